"""python -m bench model=<preset|config.json>: the model's attention shapes and RoPE in place
of the knobs (d_model = heads x the rotated width, kv heads, schedule, partial rotary, pairs),
every implementation gated against float64 at them; the cases that take no model said once and
not run; bad models named in one line, exit 2."""

import json

import pytest
import torch

from bench import plans
from bench.cases import CASES
from bench.registry import Point
from bench.run.runner import Runner
from posenc import functional as F
from posenc import models
from tests.helpers import FAST as FAST_TIMING
from tests.helpers import FAST_ARGS, read_rows, run_bench

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")


def test_models_set_the_shapes_and_the_rope(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "m"
    args = [
        "model=[llama-3.1-8b,deepseek-v3,pythia-1.4b,llama-4-scout]",
        "cases=[rope,shaw_attention]",
        "impls=[reference,hf,triton]",
        "seq_len=[16]",
        "batch=1",
        "mode=forward+backward",
        "calibrate=false",
        *FAST_ARGS,
    ]
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "chosen cases take no model and are not run" in proc.stdout
    rows = read_rows(out / "results.csv")
    assert {r["case"] for r in rows} == {"rope"}
    by = {(json.loads(r["params"])["model"], r["impl"]): r for r in rows}
    shapes = {  # d_model (heads x rotated head), heads, kv heads
        "llama-3.1-8b": ("4096", "32", 8),
        "deepseek-v3": ("8192", "128", 1),  # MLA: a 64-d slice, one shared key head
        "pythia-1.4b": ("2048", "16", None),
    }
    for model, (d, h, kv) in shapes.items():
        for impl in ("reference", "triton"):
            row = by[(model, impl)]
            assert row["status"] == "ok", row
            assert (row["d_model"], row["num_heads"]) == (d, h)
            assert json.loads(row["params"])["num_kv_heads"] == kv
    assert by[("llama-3.1-8b", "hf")]["status"] == "ok"
    params = json.loads(by[("llama-3.1-8b", "reference")]["params"])  # the schedule used
    assert "rope_scaling" not in params and "rope_theta" not in params
    assert params["rope"].startswith("llama3 (factor 8.0, ") and "base 500000" in params["rope"]
    assert by[("pythia-1.4b", "hf")]["status"] == "ok"  # GPT-NeoX's function slices itself
    assert by[("llama-4-scout", "hf")]["status"] == "ok"  # complex tables, apply_rotary_emb
    assert "another order" in by[("deepseek-v3", "hf")]["message"]  # read from its code


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["model=no-such-model"], "model='no-such-model': not a preset"),
        (["model=llama-3.1-8b", "d_model=512"], "d_model: model= sets it"),
        (["model=llama-3.1-8b", "rope_theta=1e4"], "rope_theta: model= sets it"),
        (["model=llama-3.1-8b", "cases=[shaw_attention]"], "none of the chosen cases takes"),
        (["model=/no/such/config.json"], "no such file"),
        (
            [{"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5,
              "hidden_size": 4096}],
            "num_key_value_heads 5 does not divide num_attention_heads 32",
        ),
        ([{"model_type": "llama", "num_attention_heads": 32}], "the config has no hidden_size"),
        ([{"model_type": "nonesuch_lm"}], "model_type 'nonesuch_lm' is not one transformers knows"),
        (
            [{"model_type": "llama", "num_attention_heads": 4, "hidden_size": 64,
              "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                  "extrapolation_factor": 2.0}}],
            "yarn RoPE with extrapolation_factor=2.0: not reproduced",
        ),
    ],
)  # fmt: skip
def test_bad_models_are_one_line(tmp_path, args, text):
    """Exit 2, one line on stderr (transformers' own warnings silenced), no run folder."""
    if isinstance(args[0], dict):  # a config.json of one's own
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "config.json").write_text(json.dumps(args[0]))
        args = [f"model={tmp_path / 'm'}", "cases=[rope]", "seq_len=[8]"]
    out = tmp_path / "bad"
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln]
    assert len(lines) == 1 and text in lines[0] and len(lines[0]) < 400, proc.stderr
    assert not out.exists()


# Tiny checkpoints of three kinds: heads wider than the model (H D = 64 from a hidden size of
# 48, as Gemma 3's), a partial rotation (GPT-NeoX's rotary_pct), GPT-J's interleaved pairs
# (Cohere's); each with a schedule of its own.
TINY = {
    "wide": {
        "model_type": "llama",
        "hidden_size": 48,
        "intermediate_size": 80,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        },
    },
    "partial": {
        "model_type": "gpt_neox",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "rotary_pct": 0.5,
        "rope_theta": 10000.0,
    },
    "pairs": {
        "model_type": "cohere",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "rope_theta": 10000.0,
    },
}


def _tiny(tmp_path, name):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(TINY[name]))
    return str(path)


def _point(model, seq_len, **knobs):
    spec = models.load(model)
    kv = None if spec.num_kv_heads == spec.num_heads else spec.num_kv_heads
    d = spec.num_heads * spec.head_dim
    return Point(1, seq_len, d, spec.num_heads, num_kv_heads=kv, model=model, **knobs)


@pytest.mark.parametrize("name", sorted(TINY))
def test_a_models_layer_has_its_widths_and_its_tables(tmp_path, name):
    """The layer of a model: x at its hidden size, its MLP's width, q of H x D, and the tables
    of the model's own schedule and rotary width (what posenc.models says transformers uses)."""
    model = _tiny(tmp_path, name)
    spec, point = models.load(model), _point(model, 12)
    inputs = CASES["layer_rope"].build(point, "cpu", torch.float32)
    assert inputs["x"].shape == (1, 12, spec.hidden_size)
    assert inputs["params"]["w_q.weight"].shape == (
        spec.num_heads * spec.head_dim,
        spec.hidden_size,
    )
    assert inputs["params"]["w_up.weight"].shape == (spec.mlp_size, spec.hidden_size)
    cos, sin = spec.rope_tables(torch.arange(12))
    torch.testing.assert_close(inputs["cos"], cos)
    torch.testing.assert_close(inputs["sin"], sin)
    assert inputs["interleaved"] == (name == "pairs")


def test_a_models_layer_and_decode_step_are_gated_with_their_share(tmp_path, monkeypatch):
    """Every kind, prefill (outputs and every gradient) and a decode step, the fused kernel on
    the model's pairs and rotary width under the interpreter, each row naming its model."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    names = sorted(TINY)
    paths = [_tiny(tmp_path, n) for n in names]
    impls = ("nope", "reference", "triton")
    entries = [
        plans.Entry(case, impls, tuple(_point(m, 12) for m in paths), ("float32",), ("cpu",), modes)
        for case, modes in (
            ("layer_rope", ("forward", "forward+backward")),
            ("layer_rope_decode", ("forward",)),
        )
    ]
    run = tmp_path / "run"
    run.mkdir()
    Runner(plans.Plan(tuple(entries)), FAST_TIMING, run, run_id="t", do_calibrate=False).run()
    rows = read_rows(tmp_path / "run" / "results.csv")
    bad = [(r["case"], r["impl"], r["model"], r["message"]) for r in rows if r["status"] != "ok"]
    assert not bad and len(rows) == 2 * 3 * 3 + 3 * 3
    assert {r["model"] for r in rows} == set(paths)
    assert all(r["pe_share"] for r in rows if r["impl"] != "nope")


LLAMA4_TINY = {  # Llama 4's NoPE layers at a tiny width, their temperature visible at 12 tokens
    "model_type": "llama4_text",
    "hidden_size": 64,
    "num_hidden_layers": 4,  # no RoPE in the 4th
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 64,
    "intermediate_size_mlp": 128,
    "attn_temperature_tuning": True,
    "floor_scale": 4,
    "attn_scale": 0.5,
}


def test_a_models_nope_layers_scale_their_queries_by_its_temperature(tmp_path, monkeypatch):
    """layer_irope with model=: the model's widths and its floor_scale and attn_scale (a
    floor_scale of 4 makes the factor grow within 12 tokens), gated and timed with its share
    and model; SmolLM3's NoPE layers (no temperature) and a model without any are said."""
    path = tmp_path / "llama4.json"
    path.write_text(json.dumps(LLAMA4_TINY))
    model, case = str(path), CASES["layer_irope"]
    spec, point = models.load(model), _point(str(path), 12)
    assert spec.nope_layers == (3,) and case.constraint(point) is None
    inputs = case.build(point, "cpu", torch.float32)
    assert inputs["x"].shape == (1, 12, 64)
    want = F.irope_temperature(12, floor_scale=4, attn_scale=0.5)
    torch.testing.assert_close(inputs["q_scale64"], want)
    assert inputs["q_scale"][-1] > 1.0  # position 11: 1 + 0.5 log(1 + 3)
    assert "no positional part" in case.constraint(_point("smollm3-3b", 12))
    assert "no NoPE layers" in case.constraint(_point("llama-3.1-8b", 12))
    entry = plans.Entry(
        "layer_irope", ("nope", "reference"), (point,), ("float32",), ("cpu",), ("forward",)
    )
    run = tmp_path / "run"
    run.mkdir()
    Runner(plans.Plan((entry,)), FAST_TIMING, run, run_id="t", do_calibrate=False).run()
    rows = read_rows(run / "results.csv")
    assert sorted((r["impl"], r["status"], r["model"]) for r in rows) == [
        ("nope", "ok", model),
        ("reference", "ok", model),
    ]
    assert next(r for r in rows if r["impl"] == "reference")["pe_share"]


@pytest.mark.parametrize(
    ("model", "seq_len", "why"),
    [
        ("deepseek-v3", 16, "MLA attention"),
        ("deepseek-v4-flash", 16, "compressed attention"),
        ("llama-4-scout", 16384, "attend in chunks of 8192"),
    ],
)
def test_a_layer_the_model_does_not_have_is_said(model, seq_len, why):
    assert why in CASES["layer_rope"].constraint(_point(model, seq_len))
    assert CASES["layer_rope"].constraint(_point("mistral-7b", 8192)) is None  # its window, applied
    assert CASES["layer_rope"].constraint(_point("gpt-oss-20b", 16)) is None  # sinks, applied


@pytest.mark.parametrize(
    ("case", "model", "why"),
    [
        ("t5_attention", "t5-base", None),
        ("alibi_attention", "bloom-7b1", None),
        ("alibi_attention", "t5-base", "its positions are t5's, not alibi's"),
        ("t5_attention", "llama-3.1-8b", "its positions are RoPE's, not t5's"),
        ("rope", "bloom-7b1", "no RoPE"),
        ("layer_rope", "t5-base", "no RoPE"),
    ],
)
def test_each_model_runs_the_cases_of_its_positions(case, model, why):
    """T5 and BLOOM presets at their shapes in their attention cases; the others say why not."""
    spec = models.load(model)
    point = Point(1, 16, spec.num_heads * spec.head_dim, spec.num_heads, model=model)
    got = CASES[case].constraint(point)
    assert got is None if why is None else why in got


def _tiny_local(tmp_path, model_type, **extra):
    """A small model with local layers of window 4 beside global ones (Gemma 3's or gpt-oss's
    form): local base 1e4, global base 1e6 with linear x8 (Gemma 3), YaRN for gpt-oss."""
    types = ["sliding_attention", "full_attention"] * 2
    config = {
        "model_type": model_type,
        "hidden_size": 48,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "sliding_window": 4,
        "layer_types": types,
        **extra,
    }
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_a_local_layer_has_its_schedule_window_and_sinks(tmp_path, monkeypatch):
    """layer_type=sliding_attention: the local layers' tables and window (gpt-oss: and its
    sinks) in every row, gated against float64 like the global layer, prefill and decode."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    per_type = {
        "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    gemma = _tiny_local(tmp_path, "gemma3_text", rope_parameters=per_type)
    oss = _tiny_local(tmp_path, "gpt_oss", num_local_experts=4, num_experts_per_tok=2)
    local = Point(1, 12, 64, 4, num_kv_heads=2, model=gemma, layer_type="sliding_attention")
    inputs = CASES["layer_rope"].build(local, "cpu", torch.float32)
    cos, sin = models.load(gemma).rope_tables(torch.arange(12), "sliding_attention")
    torch.testing.assert_close(inputs["cos"], cos)
    assert inputs["window"] == 4 and inputs["sinks"] == {}
    windowed = CASES["layer_rope"].impls["nope"].make(inputs)()
    whole = CASES["layer_rope"].impls["nope"].make(dict(inputs, window=None))()
    assert not torch.allclose(windowed, whole)  # the window is in the layer's attention
    glob = CASES["layer_rope"].build(_point(gemma, 12), "cpu", torch.float32)
    assert glob.get("window") is None and not torch.allclose(glob["cos"], cos)
    oss_local = Point(1, 12, 64, 4, num_kv_heads=2, model=oss, layer_type="sliding_attention")
    assert CASES["layer_rope"].build(oss_local, "cpu", torch.float32)["sinks"]["sinks"].shape == (
        4,
    )
    points = (local, oss_local, _point(oss, 12))
    entries = [
        plans.Entry(case, ("nope", "reference", "triton"), points, ("float32",), ("cpu",), modes)
        for case, modes in (
            ("layer_rope", ("forward+backward",)),
            ("layer_rope_decode", ("forward",)),
        )
    ]
    run = tmp_path / "run"
    run.mkdir()
    Runner(plans.Plan(tuple(entries)), FAST_TIMING, run, run_id="t", do_calibrate=False).run()
    rows = read_rows(run / "results.csv")
    assert len(rows) == 2 * 3 * 3 and {r["status"] for r in rows} == {"ok"}, [
        r["message"] for r in rows if r["status"] != "ok"
    ]
    bad = Point(1, 12, 64, 4, model=gemma, layer_type="chunked_attention")
    assert "gemma3_text.json has" in CASES["layer_rope"].constraint(bad)


def test_a_model_without_rope_beside_rope_models_is_skipped_in_the_rope_cases(tmp_path):
    """model=[t5-base, a RoPE model] on the rope case: T5's rows are skipped with the reason
    and their params say it has no RoPE (its schedule was once read for them and crashed the
    run), the RoPE model's rows are measured."""
    out = tmp_path / "mixed"
    proc = run_bench(
        "model=[t5-base,llama-3.2-1b]",
        "cases=[rope]",
        "impls=[reference]",
        "seq_len=[16]",
        "batch=1",
        "mode=forward",
        "calibrate=false",
        *FAST_ARGS,
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["model"]: r for r in read_rows(out / "results.csv")}
    assert rows["t5-base"]["status"] == "skipped" and "no RoPE" in rows["t5-base"]["message"]
    assert json.loads(rows["t5-base"]["params"])["rope"] == "none (its own positions)"
    assert rows["llama-3.2-1b"]["status"] == "ok"
