"""The probe's encodings proposed since 2022 (bench/probe/encodings.py) as the model builds them,
Ruoss et al.'s string tasks as their docstrings define them, the paper's score in the report,
and the named size that runs them (probe=modern)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir

import posenc
from bench.probe import config as probe_config
from bench.probe import report
from bench.probe.encodings import DEFAULT_ENCODINGS, ENCODINGS, SPECS
from bench.probe.model import RANDOMIZED_RANGE, ProbeModel
from bench.probe.tasks import make_task
from bench.probe.train import evaluate
from tests.helpers import ROOT

GEN = torch.Generator


def _model(encoding: str, **over) -> ProbeModel:
    torch.manual_seed(0)
    kw = dict(d_model=16, num_heads=2, layers=3, train_len=12, max_len=48) | over
    return ProbeModel(encoding, 3, **kw)


def test_each_encoding_is_built_from_the_parts_it_declares():
    attn = {b.attn.__class__ for b in _model("cope").blocks}
    assert attn == {posenc.CoPEMultiHeadAttention}
    kinds = [b.attn.__class__ for b in _model("rope_nope_last").blocks]
    assert kinds == [posenc.RoPEMultiHeadAttention] * 2 + [posenc.MultiHeadAttention]
    for name, cls in (("fire", posenc.FIRE), ("kerple", posenc.KerpleLog)):
        biases = [b.bias for b in _model(name).blocks]  # one per layer, as in the papers
        assert all(isinstance(b, cls) for b in biases) and len({id(b) for b in biases}) == 3
    t5 = [b.bias for b in _model("t5").blocks]  # one table shared, as in T5
    assert len({id(b) for b in t5}) == 1
    rope = {
        "xpos": (1.0, 512.0),
        "p_rope": (0.75, None),
        "rope": (1.0, None),
    }
    for name, (fraction, xpos) in rope.items():
        r = _model(name).blocks[0].attn.rope
        assert (r.rotate_fraction, r.xpos_scale_base) == (fraction, xpos)


def test_randomized_positions_are_drawn_anew_from_a_longer_range():
    """Ruoss et al.: every call draws sorted positions from RANDOMIZED_RANGE x the longest
    sequence (BOS included), in evaluation too; the fixed encodings give the same logits twice."""
    tokens = torch.randint(3, (2, 40))
    for name in ("rope_randomized", "learnable_randomized"):
        model = _model(name).eval()
        assert model.max_position == RANDOMIZED_RANGE * 49
        with torch.no_grad():
            assert not torch.equal(model(tokens), model(tokens))
    assert _model("learnable_randomized").absolute.max_len == RANDOMIZED_RANGE * 49
    assert _model("rope_randomized").blocks[0].attn.rope.max_len == RANDOMIZED_RANGE * 49
    fixed = _model("rope").eval()
    with torch.no_grad():
        assert torch.equal(fixed(tokens), fixed(tokens))


def test_randomized_models_feed_the_drawn_positions_to_the_encoding(monkeypatch):
    drawn = []
    real = posenc.functional.randomized_positions

    def spy(*args, **kwargs):
        drawn.append(real(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(posenc.functional, "randomized_positions", spy)
    model = _model("learnable_randomized", layers=1)
    seen = []
    model.absolute.register_forward_hook(lambda m, args, kw, out: seen.append(kw), with_kwargs=True)
    model(torch.randint(3, (2, 10)))
    assert len(drawn) == 1 and drawn[0].shape == (2, 11)  # BOS included
    assert torch.equal(seen[0]["positions"], drawn[0])


def test_cope_refuses_bidirectional_attention():
    with pytest.raises(ValueError, match="encodings: cope"):
        _model("cope", causal=False)


def _string(task, n):
    return task.sample(GEN().manual_seed(5), 64, n, train=False)


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("reverse_string", lambda s: s.flip(0)),
        ("duplicate_string", lambda s: torch.cat([s, s])),
        ("odds_first", lambda s: torch.cat([s[1::2], s[::2]])),
    ],
)
def test_string_tasks_ask_for_the_answer_at_the_blanks(name, answer):
    task = make_task(name, 24, 96)
    for n, train in ((24, True), (96, False)):
        b = task.sample(GEN().manual_seed(6), 32, n, train=train)
        lengths = set()
        for tokens, targets in zip(b.tokens, b.targets, strict=True):
            blanks = (tokens == task.blank).nonzero().flatten()
            ell, out = int(blanks[0]), len(blanks)
            lengths.add(ell)
            assert out == task.out * ell and (blanks == torch.arange(ell, ell + out)).all()
            assert (tokens[:ell] < task.blank).all()  # a binary string before them
            assert torch.equal(targets[ell : ell + out], answer(tokens[:ell]))
            assert (targets[:ell] < 0).all() and (targets[ell + out :] < 0).all()
        if train:
            assert min(lengths) == 1 and max(lengths) == 24 // (1 + task.out)
        else:
            assert lengths == {96 // (1 + task.out)}
    assert set(b.items[b.targets >= 0].tolist()) == {0}  # one answer per example


def test_string_tasks_score_per_token_and_whole_answers():
    task = make_task("reverse_string", 24, 24)

    class OneWrong(torch.nn.Module):
        """Right everywhere except the first answer symbol of every example."""

        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(1, 1)

        def forward(self, tokens):
            ell = int((tokens[0] == task.blank).nonzero()[0])
            want = tokens[:, :ell].flip(1)
            pred = torch.zeros(*tokens.shape, 3)
            pred[:, ell : 2 * ell].scatter_(-1, want.unsqueeze(-1), 1.0)
            pred[:, ell, :] = pred[:, ell, :].roll(1, -1)  # the wrong symbol
            return pred

    got = evaluate(OneWrong(), task, 24, examples=8, seed=0)
    assert got["accuracy"] == 0.0 and got["token_accuracy"] == pytest.approx(11 / 12)


def test_the_report_scores_string_tasks_as_their_paper_does():
    """Per seed, the per-token accuracy averaged over the lengths past training; then the best,
    mean and worst seed. The training length's own row never counts."""
    rows = []
    for seed, accs in enumerate(([1.0, 0.8, 0.6], [1.0, 0.6, 0.4])):
        for n, acc in zip((16, 32, 64), accs, strict=True):
            rows.append(
                {
                    "encoding": "rope",
                    "eval_scaling": "none",
                    "task": "odds_first",
                    "seed": seed,
                    "train_len": 16,
                    "eval_len": n,
                    "status": "ok",
                    "accuracy": 0.0,
                    "token_accuracy": acc,
                }
            )
    df = pd.DataFrame(rows)
    df["line"] = df["encoding"]
    s = report.string_score(df).iloc[0]
    assert (s["max"], s["mean"], s["min"]) == pytest.approx((0.7, 0.6, 0.5))


def _rank_rows(values: dict) -> pd.DataFrame:
    rows = [
        {
            "encoding": e,
            "eval_scaling": "none",
            "task": task,
            "seed": seed,
            "train_len": 16,
            "eval_len": 32,
            "status": "ok",
            "accuracy": 0.0,
            "token_accuracy": acc,
        }
        for (task, seed), accs in values.items()
        for e, acc in accs.items()
    ]
    return pd.DataFrame(rows)


def test_the_report_ranks_kazemnejads_five_encodings_as_their_figure_does():
    """Per task, rank 1 for the best at 2x (ties share their mean rank), 1/rank averaged over
    tasks; from the seeds' mean and per seed. Rows at 1x, under an evaluation schedule, of
    other encodings or in another metric never count."""
    names = ["nope", "t5", "alibi", "rope", "sinusoidal"]
    a = dict(zip(names, (0.9, 0.8, 0.7, 0.6, 0.5), strict=True))
    df = _rank_rows(
        {
            ("copy", 0): a,
            ("copy", 1): a,
            ("recall", 0): dict(zip(names, (0.6, 0.4, 0.4, 0.3, 0.2), strict=True)),
            ("recall", 1): dict(zip(names, (0.4, 0.6, 0.4, 0.3, 0.2), strict=True)),
        }
    )
    noise = df.copy()
    noise["token_accuracy"] = 1.0 - noise["token_accuracy"]
    at_1x = noise.assign(eval_len=16)
    scaled = noise[noise["encoding"] == "rope"].assign(eval_scaling="yarn")
    other = noise[noise["encoding"] == "rope"].assign(encoding="fire")
    df = pd.concat([df, at_1x, scaled, other]).assign(accuracy=lambda d: 1 - d["token_accuracy"])
    r = report.reciprocal_rank(df).set_index("encoding")
    assert list(r.index) == names
    assert r.attrs["tasks"] == ["recall", "copy"]  # in the order TASKS declares them
    # recall's seed mean ties nope and t5 at 0.5: both rank 1.5
    assert r["mrr"].tolist() == pytest.approx(
        [(1 + 1 / 1.5) / 2, (1 / 2 + 1 / 1.5) / 2, 1 / 3, 1 / 4, 1 / 5]
    )
    # seed 0: nope first in both; seed 1: t5 first in recall, nope and alibi tie at 2.5
    assert (r.loc["nope", "seed_min"], r.loc["nope", "seed_max"]) == pytest.approx((0.7, 1.0))
    assert (r.loc["t5", "seed_min"], r.loc["t5", "seed_max"]) == pytest.approx((0.45, 0.75))
    assert r.loc["nope", "published"] == 0.69
    assert report.reciprocal_rank(df[df["encoding"] != "t5"]).empty
    # a seed whose row failed ranks over the tasks it has
    lost = (df["seed"] == 1) & (df["task"] == "recall") & (df["encoding"] == "t5")
    r = report.reciprocal_rank(df[~lost]).set_index("encoding")
    assert r.loc["t5", "seed_max"] == pytest.approx(1 / 2)


def test_the_default_size_keeps_the_classic_encodings_and_modern_runs_them_all():
    assert set(DEFAULT_ENCODINGS) == {e for e in ENCODINGS if not SPECS[e].modern}
    assert {"nope", "rope", "alibi", "t5"} <= set(DEFAULT_ENCODINGS)
    probe_config.register()
    plans = {}
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        for size in ("cpu", "modern", "gpu"):
            plans[size] = probe_config.validate(compose("probe", [f"probe={size}"]))
    assert plans["cpu"]["encodings"] == list(DEFAULT_ENCODINGS)
    strings = {"reverse_string", "duplicate_string", "odds_first"}
    for size in ("modern", "gpu"):
        assert set(plans[size]["encodings"]) == set(ENCODINGS)
        assert strings <= set(plans[size]["tasks"])


def test_a_causal_only_encoding_with_bidirectional_attention_is_refused_by_name():
    probe_config.register()
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("probe", ["encodings=[rope,cope]", "causal=false"])
    with pytest.raises(ValueError, match="encodings: cope .* causal=true"):
        probe_config.validate(cfg)


def test_the_committed_modern_run_is_made_from_its_csv(tmp_path):
    """results/reference/probe-modern: probe.md (quoted in docs/probe.md) is what the report
    makes from the committed probe.csv; every encoding, task, length and seed of the size."""
    import shutil

    from tests.helpers import read_rows

    ref = ROOT / "results" / "reference" / "probe-modern"
    shutil.copy(ref / "probe.csv", tmp_path / "probe.csv")
    report.build(tmp_path)
    assert (tmp_path / "probe.md").read_text() == (ref / "probe.md").read_text()
    rows = read_rows(ref / "probe.csv")
    lines = len(ENCODINGS) + 3  # RoPE again under linear, dynamic and YaRN
    assert len(rows) == lines * 6 * 4 * 3  # x tasks x lengths x seeds
    assert {r["status"] for r in rows} == {"ok", "n/a"}
    assert {r["encoding"] for r in rows} == set(ENCODINGS)


def test_docs_describe_every_encoding_of_the_probe():
    text = (ROOT / "docs" / "probe.md").read_text()
    missing = [e for e in ENCODINGS if f"`{e}`" not in text]
    assert not missing, missing


def test_every_task_seeds_its_generators_with_its_own_id():
    from bench.probe.tasks import TASKS

    ids = [t.seed_id for t in TASKS.values()]
    assert len(set(ids)) == len(ids)
