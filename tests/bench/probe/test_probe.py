"""The length-generalization probe (bench/probe): the tasks as their docstrings define them,
the exact-match scoring, determinism, the permutation sanity check, and `python -m bench.probe`
end to end on the tiny size (rows, n/a past the learned table, report files, bad keys)."""

import json
import re

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from bench.probe.encodings import ENCODINGS
from bench.probe.model import ProbeModel
from bench.probe.run import run_cell
from bench.probe.tasks import make_task
from bench.probe.train import TrainConfig, evaluate, train
from tests.helpers import ROOT, read_rows, run_module

GEN = torch.Generator


def test_lookback_asks_for_the_token_k_back_in_the_last_window():
    task = make_task("lookback", 16, 64)
    b = task.sample(GEN().manual_seed(1), 4, 64, train=False)
    asked = b.targets >= 0
    assert asked[:, : 64 - 16 + task.k].sum() == 0 and asked[:, 64 - 16 + task.k :].all()
    t = torch.arange(64 - 16 + task.k, 64)
    assert torch.equal(b.targets[:, t], b.tokens[:, t - task.k])
    train_batch = task.sample(GEN().manual_seed(1), 4, 16, train=True)
    assert (train_batch.targets[:, task.k :] >= 0).all()


def test_recall_answers_are_the_values_of_the_queried_keys():
    task = make_task("recall", 32, 256)
    for n in (32, 256):
        b = task.sample(GEN().manual_seed(2), 8, n, train=False)
        kv = task.keys * task.values
        for row, target in zip(b.tokens, b.targets, strict=True):
            facts = {int(t) // task.values: int(t) % task.values for t in row if t < kv}
            assert len(facts) == task.pairs  # distinct keys
            queries = row[n - task.queries :] - kv
            assert [facts[int(q)] for q in queries] == target[n - task.queries :].tolist()
            assert (target[: n - task.queries] < 0).all()


def test_reverse_targets_are_the_string_backwards_one_answer_per_example():
    task = make_task("reverse", 32, 64)
    b = task.sample(GEN().manual_seed(3), 2, 64, train=False)
    ell = (64 - 1) // 2
    assert (b.tokens[:, ell] == task.sep).all()
    assert torch.equal(b.targets[:, ell : 2 * ell], b.tokens[:, :ell].flip(1))
    assert (b.targets[:, 2 * ell :] < 0).all() and (b.targets[:, :ell] < 0).all()
    assert set(b.items[b.targets >= 0].tolist()) == {0}


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_training_strings_have_a_length_per_row_every_one_scored_whole(name):
    task = make_task(name, 32, 64)
    b = task.sample(GEN().manual_seed(4), 64, 32, train=True)
    lengths = set()
    for tokens, targets in zip(b.tokens, b.targets, strict=True):
        ell = int((tokens == task.sep).nonzero()[0])  # the first separator: after the string
        lengths.add(ell)
        string = tokens[:ell] if name == "copy" else tokens[:ell].flip(0)
        assert torch.equal(targets[ell : 2 * ell], string)  # predicted from the separator on
        assert torch.equal(tokens[ell + 1 : 2 * ell + 1], string)  # and written after it
        assert (targets[:ell] < 0).all() and (targets[2 * ell :] < 0).all()  # fill: unscored
    assert min(lengths) >= 1 and max(lengths) <= 15 and len(lengths) > 8


class Oracle(nn.Module):
    """Predicts the targets of the batch it was given, wrong at `wrong` positions."""

    def __init__(self, vocab: int, wrong: tuple = ()):
        super().__init__()
        self.head, self.vocab, self.wrong, self.targets = nn.Linear(1, 1), vocab, wrong, None

    def forward(self, tokens):
        want = self.targets.clamp(min=0)
        want[:, list(self.wrong)] = (want[:, list(self.wrong)] + 1) % self.vocab
        return nn.functional.one_hot(want, self.vocab).float()


@pytest.mark.parametrize(
    ("name", "wrong", "accuracy"),
    [
        ("copy", (), 1.0),
        ("copy", (40,), 0.0),  # one wrong token: the whole string wrong
        ("reverse", (61,), 0.0),
        ("recall", (62,), 3 / 4),  # 4 queries, one wrong
        ("lookback", (60,), 14 / 15),  # positions 49 .. 63 scored, one wrong
    ],
)
def test_exact_match_counts_an_answer_right_only_when_all_of_it_is(
    name, wrong, accuracy, monkeypatch
):
    task = make_task(name, 16, 64)
    oracle = Oracle(task.vocab_size, wrong)
    sample = task.sample

    def remember(*args, **kwargs):
        batch = sample(*args, **kwargs)
        oracle.targets = batch.targets
        return batch

    monkeypatch.setattr(task, "sample", remember)
    got = evaluate(oracle, task, 64, examples=8, seed=0)
    assert got["accuracy"] == pytest.approx(accuracy)


def _cell(**over) -> dict:
    cell = {
        "encoding": "rope",
        "task": "lookback",
        "seed": 0,
        "train_len": 16,
        "eval_factors": [1, 2],
        "rope_eval_scalings": ["yarn", "llama3"],
        "eval_examples": 16,
        "causal": True,
        "device": "cpu",
        "threads": 1,
        "train": TrainConfig(
            steps=6,
            batch=4,
            warmup=2,
            d_model=16,
            num_heads=2,
            layers=1,
            target=0.99,
            check_every=2,
            check_examples=8,
        ),
    }
    return {**cell, **over}


def _numbers(rows):
    return [
        (
            r["eval_scaling"],
            r["eval_len"],
            r.get("accuracy"),
            r.get("token_accuracy"),
            r.get("train_loss"),
        )
        for r in rows
    ]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_cell_gives_the_same_numbers_twice(encoding):
    first, second = run_cell(_cell(encoding=encoding)), run_cell(_cell(encoding=encoding))
    assert {r["status"] for r in first} <= {"ok", "n/a"}, first
    assert _numbers(first) == _numbers(second)
    other_seed = run_cell(_cell(encoding=encoding, seed=1))
    assert _numbers(other_seed) != _numbers(first)  # the seed does reach the numbers


def test_the_learned_table_is_not_applicable_past_its_length():
    rows = run_cell(_cell(encoding="learnable"))
    status = {r["eval_len"]: (r["status"], r.get("accuracy")) for r in rows}
    assert status[16][0] == "ok" and status[32] == ("n/a", None)


def test_bos_lets_causal_attention_without_positions_tell_positions_apart():
    """A causal NoPE model sees a run of one repeated token the same at every position (each
    position averages identical values) unless a BOS token anchors the count: then its output
    changes along the run (the weight on BOS falls with t). Untrained weights; BOS is never a
    prediction (the logits keep the task's vocabulary)."""
    tokens = torch.full((2, 12), 3)
    spread = {}
    for bos in (False, True):
        torch.manual_seed(0)
        model = ProbeModel(
            "nope", 16, d_model=16, num_heads=2, layers=1, train_len=12, max_len=12, bos=bos
        )
        with torch.no_grad():
            out = model(tokens)
        assert out.shape == (2, 12, 16)
        spread[bos] = float((out - out[:, :1]).abs().max())
    assert spread[False] < 1e-5 < 1e-2 < spread[True]


def test_training_stops_once_the_check_reaches_the_target_on_unseen_sequences(monkeypatch):
    task = make_task("lookback", 16, 16)

    def fit(target: float) -> dict:
        torch.manual_seed(0)
        model = ProbeModel(
            "rope", task.vocab_size, d_model=32, num_heads=2, layers=1, train_len=16, max_len=16
        )
        cfg = TrainConfig(steps=400, batch=32, warmup=10, target=target, check_every=20)
        return train(model, task, cfg, seed=0)

    early, full = fit(0.9), fit(0.0)
    assert early["steps"] < 400 and early["steps"] % 20 == 0 and early["check_accuracy"] >= 0.9
    assert full["steps"] == 400 and full["check_accuracy"] != full["check_accuracy"]  # nan
    drawn, sample = [], task.sample
    monkeypatch.setattr(task, "sample", lambda *a, **k: drawn.append(sample(*a, **k)) or drawn[-1])
    model = ProbeModel(
        "nope", task.vocab_size, d_model=16, num_heads=2, layers=1, train_len=16, max_len=16
    )
    evaluate(model, task, 16, 8, seed=0, check=True)
    evaluate(model, task, 16, 8, seed=0)
    assert not torch.equal(drawn[0].tokens, drawn[1].tokens)  # the check never sees the test


def _trained(encoding: str, causal: bool) -> float:
    task = make_task("lookback", 16, 16)
    torch.manual_seed(0)
    model = ProbeModel(
        encoding,
        task.vocab_size,
        d_model=32,
        num_heads=2,
        layers=2,
        train_len=16,
        max_len=16,
        causal=causal,
    )
    train(model, task, TrainConfig(steps=250, batch=32, lr=3e-3, warmup=25), seed=0)
    return evaluate(model, task, 16, examples=256, seed=0)["token_accuracy"]


def _best_without_order(task, n: int) -> float:
    """The best accuracy any permutation-equivariant model can have on lookback: knowing x_t and
    the multiset of the other tokens, x_{t-k} is a draw from that multiset; guess its mode."""
    b = task.sample(GEN().manual_seed(9), 2000, n, train=False)
    counts = nn.functional.one_hot(b.tokens, task.vocab_size).sum(1, keepdim=True)  # (B, 1, V)
    others = counts - nn.functional.one_hot(b.tokens, task.vocab_size)  # (B, n, V): minus x_t
    best = others.max(-1).values / (n - 1)  # (B, n)
    return float(best[b.targets >= 0].mean())


def test_without_positions_bidirectional_attention_cannot_look_back():
    """Permutation equivariance (the tutorial's 1.1): with no encoding and no causal mask, the
    output at t depends on x_t and the multiset of tokens only, so x_{t-1} can only be guessed
    from the multiset (about 0.2 here, chance 1/16 without it); the same model with RoPE learns
    the task in the same budget."""
    bound = _best_without_order(make_task("lookback", 16, 16), 16)
    assert 0.1 < bound < 0.3
    assert _trained("nope", causal=False) < bound + 0.02
    assert _trained("rope", causal=False) > 0.9


def _probe(*args):
    return run_module("bench.probe", "probe=tiny", *args)


def test_probe_end_to_end_writes_rows_table_and_plot(tmp_path):
    out = tmp_path / "probe"
    proc = _probe(
        "encodings=[learnable,rope,t5]",
        "tasks=[lookback,reverse]",
        "rope_eval_scalings=[linear,dynamic]",
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "probe.csv")
    # (learnable + t5 + rope x 3 schedules) x 2 tasks x 2 lengths x 1 seed
    assert len(rows) == 5 * 2 * 2
    assert {r["status"] for r in rows if r["encoding"] != "learnable"} == {"ok"}
    na = [r for r in rows if r["status"] == "n/a"]
    assert {(r["encoding"], r["eval_len"]) for r in na} == {("learnable", "32")}
    table = (out / "probe.md").read_text()
    assert "rope+dynamic" in table and "n/a" in table and "## reverse" in table
    assert (out / "probe.png").stat().st_size > 0
    env = json.loads((out / "env.json").read_text())
    assert env["wall_s"] > 0 and "git_sha" in env


def test_a_resumed_probe_trains_only_what_is_missing(tmp_path):
    out = tmp_path / "probe"
    first = _probe("encodings=[alibi]", "tasks=[lookback]", f"hydra.run.dir={out}")
    assert first.returncode == 0, first.stderr[-2000:]
    again = _probe(
        "encodings=[alibi,nope]", "tasks=[lookback]", "resume=true", f"hydra.run.dir={out}"
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "1 cells" in again.stdout
    rows = read_rows(out / "probe.csv")
    assert sorted(r["encoding"] for r in rows) == ["alibi", "alibi", "nope", "nope"]
    saved = OmegaConf.load(out / "config.yaml")  # names every cell of the CSV
    assert list(saved.encodings) == ["alibi", "nope"] and saved.resume
    again = _probe("encodings=[nope]", "tasks=[lookback]", "resume=true", f"hydra.run.dir={out}")
    assert again.returncode == 0 and "0 cells" in again.stdout, again.stderr[-2000:]
    assert list(OmegaConf.load(out / "config.yaml").encodings) == ["alibi", "nope"]
    other = _probe(
        "encodings=[alibi]",
        "tasks=[lookback]",
        "train.steps=7",
        "resume=true",
        f"hydra.run.dir={out}",
    )
    assert other.returncode == 2 and "train" in other.stderr and "resume" in other.stderr
    assert len(read_rows(out / "probe.csv")) == 4  # nothing mixed in


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("encodings=[rope,xpos2]", "encodings"),
        ("tasks=[reverse_strings]", "tasks"),
        ("tasks=[sort]", "tasks"),
        ("eval_factors=[0]", "eval_factors"),
        ("train.num_heads=3", "train.d_model"),
        ("rope_eval_scalings=[ntk]", "rope_eval_scalings"),
        ("device=tpu", "device"),
        ("train.target=1.5", "train.target"),
        ("train.check_every=0", "train.check_every"),
    ],
)
def test_a_bad_key_is_named(override, key):
    from hydra import compose, initialize_config_dir

    from bench.probe.config import register, validate

    register()
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("probe", ["probe=tiny", override])
    with pytest.raises(ValueError, match=re.escape(key)):
        validate(cfg)


def test_the_command_line_names_a_bad_key_and_runs_nothing(tmp_path):
    """The command line's side of the check above (one process; the keys are checked in it)."""
    out = tmp_path / "bad"
    proc = _probe("encodings=[rope,xpos2]", f"hydra.run.dir={out}")
    assert proc.returncode == 2
    assert "invalid configuration" in proc.stderr and "encodings" in proc.stderr
    assert not out.exists()


def test_the_committed_probe_table_is_made_from_its_csv(tmp_path):
    """results/reference/probe-cpu: probe.md (quoted in the README and docs/probe.md) is what
    the report makes from the committed probe.csv, and the run is the default configuration."""
    import shutil

    from bench.probe import report

    ref = ROOT / "results" / "reference" / "probe-cpu"
    shutil.copy(ref / "probe.csv", tmp_path / "probe.csv")
    report.build(tmp_path)
    assert (tmp_path / "probe.md").read_text() == (ref / "probe.md").read_text()
    rows = read_rows(ref / "probe.csv")
    assert len(rows) == (6 + 4) * 3 * 4 * 3  # (6 encodings + rope x 4 schedules) x tasks x ...
    assert {r["status"] for r in rows} == {"ok", "n/a"}


def test_irope_scales_the_nope_layers_queries_only_past_the_trained_length():
    """irope is rope_nope_last with Llama 4's temperature on the last layer's queries,
    floor_scale the trained length (with BOS): the same weights give the same logits up to
    it, and different ones past it."""
    tokens = torch.randint(0, 8, (2, 48))
    logits = {}
    for name in ("rope_nope_last", "irope"):
        torch.manual_seed(0)
        model = ProbeModel(name, 8, d_model=16, num_heads=2, layers=2, train_len=15, max_len=48)
        logits[name] = model(tokens).detach()
    same, later = slice(0, 14), slice(20, 48)  # positions 1 .. 14 (BOS at 0): p + 1 < 16
    torch.testing.assert_close(logits["irope"][:, same], logits["rope_nope_last"][:, same])
    assert not torch.allclose(logits["irope"][:, later], logits["rope_nope_last"][:, later])


def test_fox_gates_every_layer_and_is_causal():
    """fox: each layer's logits gain its forget gate's bias (a gate that forgets nothing,
    log f = 0, is NoPE); a token's output does not depend on later tokens."""
    torch.manual_seed(0)
    model = ProbeModel("fox", 8, d_model=16, num_heads=2, layers=2, train_len=16, max_len=16)
    tokens = torch.randint(0, 8, (2, 16))
    out = model(tokens).detach()
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 8
    torch.testing.assert_close(model(changed).detach()[:, :10], out[:, :10])
    torch.manual_seed(0)
    nope = ProbeModel("nope", 8, d_model=16, num_heads=2, layers=2, train_len=16, max_len=16)
    for block in model.blocks:  # log sigmoid(large) = 0: no forgetting
        block.gate.proj.weight.data.zero_()
        block.gate.proj.bias.data.fill_(50.0)
    nope.load_state_dict({k: v for k, v in model.state_dict().items() if ".gate." not in k})
    torch.testing.assert_close(model(tokens), nope(tokens), atol=1e-5, rtol=1e-5)


def test_fox_open_starts_its_gates_open_and_fox_near_a_half():
    """fox_open's gate biases start at 3 .. 6 over the heads in every layer (f 0.95 .. 0.998);
    fox's keep nn.Linear's start near 0 (f near 0.5, the authors' data-dependent gate)."""
    kw = dict(d_model=16, num_heads=4, layers=2, train_len=16, max_len=16)
    opened = ProbeModel("fox_open", 8, **kw)
    for block in opened.blocks:
        torch.testing.assert_close(block.gate.proj.bias, torch.tensor([3.0, 4.0, 5.0, 6.0]))
    for block in ProbeModel("fox", 8, **kw).blocks:
        assert block.gate.proj.bias.abs().max() <= 0.25  # 1 / sqrt(16)
