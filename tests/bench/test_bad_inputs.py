"""Every bad input is refused before anything runs: exit 2 and one line on stderr that names
the argument (the key, or the config.json's key for model=), and no run folder left behind.
Each input runs the whole command line, `python -m bench ...`, in a fork of the test process's
one process that imported the harness (run_bench of tests/helpers.py): about a third of a second an
input (Hydra composes the config once), where a fresh interpreter takes 3 s."""

import json

import pytest

from tests.helpers import FAST_ARGS, run_bench

# A tiny run, so that an input that is not refused ends in seconds; an input's own keys win.
BASE = [
    "cases=[rope]",
    "impls=[reference]",
    "batch=1",
    "seq_len=8",
    "d_model=16",
    "num_heads=2",
    "mode=[forward]",
    *FAST_ARGS,
    "calibrate=false",
    "report=false",
]

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
CONFIGS = {  # model=<name>.json -> (its text, the key its refusal names)
    "bad_rope_type": ({**LLAMA, "rope_scaling": {"rope_type": "nope", "factor": 2.0}}, "rope"),
    "string_factor": (
        {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": "two"}},
        "factor",
    ),
    "odd_head_dim": ({**LLAMA, "head_dim": 15}, "head_dim"),
    "null_hidden": ({**LLAMA, "hidden_size": None}, "hidden_size"),
    "string_hidden": ({**LLAMA, "hidden_size": "64"}, "hidden_size"),
    "negative_heads": ({**LLAMA, "num_attention_heads": -4}, "num_attention_heads"),
    "zero_heads": ({**LLAMA, "num_attention_heads": 0}, "num_attention_heads"),
    "zero_theta": ({**LLAMA, "rope_theta": 0}, "rope_theta"),
    "negative_theta": ({**LLAMA, "rope_theta": -10000.0}, "rope_theta"),
    "string_theta": ({**LLAMA, "rope_theta": "abc"}, "rope_theta"),
    "kv_not_dividing": ({**LLAMA, "num_key_value_heads": 3}, "num_key_value_heads"),
    "zero_kv": ({**LLAMA, "num_key_value_heads": 0}, "num_key_value_heads"),
    "zero_head_dim": ({**LLAMA, "head_dim": 0}, "head_dim"),
    "zero_factor": ({**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 0}}, "factor"),
    "partial_zero": ({**LLAMA, "partial_rotary_factor": 0.0}, "partial_rotary_factor"),
    "partial_above": ({**LLAMA, "partial_rotary_factor": 1.5}, "partial_rotary_factor"),
    "unknown_type": ({**LLAMA, "model_type": "no_such_model"}, "model_type"),
    "no_type": ({"hidden_size": 64, "num_attention_heads": 4}, "model_type"),
    "empty_object": ({}, "model_type"),
    "a_list": ([1, 2], "model"),
    "a_number": (7, "model"),
}
RAW = {  # files that are not JSON
    "not_json": "{not json",
    "empty_file": "",
    "binary": "\x00\x01\x02",
}

NAMED = [  # (the input, what its line must name)
    # the axes
    *((f"batch={v}", "batch") for v in ("0", "-1", "abc", "1.5", "[]", "[1,abc]", "null")),
    *(
        (f"seq_len={v}", "seq_len")
        for v in ("0", "-5", "abc", "[99999999999999999999]", "1e9", "null", "[]")
    ),
    *((f"d_model={v}", "d_model") for v in ("0", "abc", "15", "-16")),
    *((f"num_heads={v}", "num_heads") for v in ("0", "-2", "abc", "3")),
    *((f"dtype={v}", "dtype") for v in ("float8", "abc", "int32", "[]")),
    *((f"device={v}", "device") for v in ("tpu", "gpu", "[]")),
    *((f"mode={v}", "mode") for v in ("sideways", "[]")),
    *((f"cases={v}", "cases") for v in ("nope", "[]", "[rope,nope]", "rope,alibi_attention")),
    *((f"impls={v}", "impls") for v in ("nope", "[]", "reference,seed")),
    *((f"grids={v}", "grids") for v in ("abc", "[abc]", "[{batch:0}]", "[{nope:1}]")),
    ("sweep=nope", "sweep"),
    ("sweep=", "sweep"),
    *((f"seed={v}", "seed") for v in ("abc", "1.5", "[1,2]", "99999999999999999999999", "null")),
    # timing
    *(
        (f"timing.{k}={v}", f"timing.{k}")
        for k, v in (
            ("row_limit_s", "abc"),
            ("row_limit_s", "-1"),
            ("row_limit_s", "0"),
            ("warmup_s", "-1"),
            ("warmup_s", "abc"),
            ("min_reps", "0"),
            ("min_reps", "abc"),
            ("max_reps", "0"),
            ("budget_s", "-1"),
            ("budget_s", "abc"),
            ("rel_ci", "-0.1"),
            ("rel_ci", "abc"),
            ("rel_spread", "-1"),
            ("threads", "abc"),
            ("threads", "0"),
            ("threads", "-1"),
            ("copy_ref", "maybe"),
            ("passes", "0"),
            ("passes", "abc"),
            ("cpu_heap", "maybe"),
        )
    ),
    # switches
    *(
        (f"{k}=maybe", k)
        for k in ("calibrate", "report", "resume", "retry_timeouts", "profile", "smoke")
    ),
    ("tutorial_timing=maybe", "tutorial_timing"),
    (["cases=[alibi_attention]", "sinks=maybe"], "sinks"),
    # knobs
    *((f"num_kv_heads={v}", "num_kv_heads") for v in ("0", "3", "abc", "-1")),
    *(
        (["cases=[alibi_attention]", f"{k}={v}"], k)
        for k, v in (
            ("fwd_tiles", "abc"),
            ("fwd_tiles", "128x64"),
            ("bwd_tiles", "0x0x0x0"),
            ("window", "0"),
            ("window", "-1"),
            ("window", "abc"),
        )
    ),
    *(
        (["cases=[alibi_decode]", f"{k}={v}"], k)
        for k, v in (("q_len", "0"), ("kv_cache", "nope"), ("q_len", "abc"))
    ),
    *((["cases=[alibi_packed]", f"documents={v}"], "documents") for v in ("0", "abc", "-2")),
    ("layout=nope", "layout"),
    (["cases=[mrope]", "mrope_style=nope"], "mrope_style"),
    (["cases=[rope_2d]", "rope_2d_split=nope"], "rope_2d_split"),
    *((f"rope_scaling={v}", "rope_scaling") for v in ("nope", "[]")),
    ("rope_variant=nope", "rope_variant"),
    *((f"rope_theta={v}", "rope_theta") for v in ("0", "-1", "abc")),
    *((f"rope_factor={v}", "rope_factor") for v in ("0", "abc", "-2")),
    (["rope_scaling=yarn", "rope_factor=0.5"], "rope_factor"),
    ("rope_original=0", "rope_original"),
    (["cases=[layer_rope]", "impls=[nope]", "d_ff=0"], "d_ff"),
    (["cases=[layer_rope]", "impls=[nope]", "layer_type=nope"], "layer_type"),
    *(
        (["cases=[rope_cache]", "impls=[eager]", f"{k}={v}"], k)
        for k, v in (("prefill", "-1"), ("chunk", "0"), ("block_size", "0"), ("rope_form", "no"))
    ),
    ("model=nope", "model"),
    ("model={tmp}/missing.json", "model"),
    ("model={tmp}", "model"),
    *((f"model={{tmp}}/{name}.json", key) for name, (_, key) in CONFIGS.items()),
    *((f"model={{tmp}}/{name}.json", "model") for name in RAW),
    # keys, syntax, Hydra
    ("foo=1", "foo"),
    ("+batch=1", "batch"),
    ("timing.nope=1", "timing.nope"),
    ("plugins=x.py", "plugins"),
    ("plugins=[{tmp}/missing.py]", "plugins"),
    ("plugins=[{tmp}]", "plugins"),
    # the run's folder
    ("hydra.run.dir=", "hydra.run.dir"),
    ("hydra.run.dir=/proc/x", "hydra.run.dir"),
    ("hydra.run.dir=/dev/null", "hydra.run.dir"),
    ("hydra.run.dir={tmp}/a_file.txt", "hydra.run.dir"),
    (["resume=true", "hydra.run.dir={tmp}/no_run"], "resume"),
    # a plan none of whose points fits in memory (1 PiB of inputs)
    (
        [
            "cases=[alibi_attention]",
            "batch=16",
            "seq_len=1073741824",
            "d_model=4096",
            "num_heads=32",
        ],
        "no point fits in memory: alibi_attention at B=16 L=1073741824",
    ),
]


SAID = [  # (input, the words of its line): what the line says, to the letter
    ("rope_scaling.factor=8", "rope_scaling.factor: rope_scaling takes a value, not keys"),
    ("+rope_scaling.factor=8", "rope_scaling.factor: rope_scaling takes a value, not keys"),
    ("+batch=2", "+batch: batch is already a key; drop the +"),
    ("~batch", "~batch: keys cannot be removed"),
    ("~timing", "~timing: keys cannot be removed"),
    ("timing=3", "timing: set its keys"),
    ("timing.budget=1", "timing.budget: not a timing key; did you mean budget_s?"),
    ("batchsize=4", "batchsize: not a key of this harness"),
    ("+foo=1", "foo: not a key of this harness"),
    ("foo/bar=x", "foo/bar: not a key of this harness"),
    ("hydra/launcher=nope", "hydra/launcher: unknown value 'nope'; choose from basic"),
    ("sweep=quik", "sweep: unknown value 'quik'; did you mean quick?"),
    ("batch", "'batch': not an override Hydra can parse (missing EQUAL"),
    ("cases=rope]", "'cases=rope]': not an override Hydra can parse"),
    ("seq_len=[128", "'seq_len=[128': not an override Hydra can parse"),
    ("layout.kind=bshd", "layout.kind: layout takes a value, not keys"),
    (["cases=[rope]", "rope_form=partial"], "rope_form: no chosen case reads it"),
    (["cases=[layer_rope]", "sinks=true"], "sinks: no chosen case reads it"),
    (["cases=[rope]", "causal=true"], "causal: no chosen case reads it"),
    (["cases=[sinusoidal]", "layout=bshd"], "layout: no chosen case reads it"),
    (["batch=0"], "batch: every value must be a positive integer"),
    (["batch=abc"], "batch: every value must be a positive integer"),
    (["seq_len=[1,x]"], "seq_len: every value must be a positive integer"),
    (["d_model=100", "num_heads=3"], "d_model=100 is not divisible by num_heads=3"),
    (["num_heads=4", "num_kv_heads=3", "cases=[rope]"], "num_kv_heads=3 does not divide"),
    (["dtype=float64"], "dtype: unknown value 'float64'; did you mean float16?"),
    (["device=tpu"], "device: unknown value 'tpu'"),
    (["mode=fwd"], "mode: unknown value 'fwd'; did you mean forward?"),
    (["cases=[rop]"], "cases: unknown value 'rop'; did you mean rope?"),
    (["impls=[refrence]"], "impls: unknown value 'refrence'; did you mean reference?"),
    (["cases=[rope]", "impls=[sdpa]"], "impls: none of the chosen implementations"),
    (["grids=3"], "grids[0]: expected a mapping of axes"),
    (["grids=[{cases:[rope],seqlen:[4]}]"], "grids[0].seqlen: not an axis"),
    (["timing.threads=-1"], "timing.threads: auto, a positive integer or null"),
    (["timing.passes=0"], "timing.passes: must be a positive integer"),
    (["timing.min_reps=5", "timing.max_reps=2"], "timing.max_reps: at least min_reps (5)"),
    (["timing.rel_ci=-1"], "timing.rel_ci: must be positive or null"),
    (["timing.cpu_heap=jemalloc"], "timing.cpu_heap: keep or system, got 'jemalloc'"),
    (["report=maybe"], "report: true or false, got 'maybe'"),
    (["calibrate=1"], "calibrate: true or false, got 1"),
    (["smoke=yes"], "smoke: true or false, got 'yes'"),
    (["cases=[rope]", "rope_scaling=yarnn"], "rope_scaling: unknown value 'yarnn'"),
    (["cases=[rope]", "layout=bsdh"], "layout: unknown value 'bsdh'"),
    (["cases=[alibi_attention]", "causal=maybe"], "causal:"),
    (["cases=[alibi_attention]", "fwd_tiles=64x64"], "fwd_tiles:"),
    (["cases=[rope]", "rope_theta=-1"], "rope_theta: every value must be a positive number"),
    (["cases=[rope]", "rope_original=1.5"], "rope_original: every value must be a positive"),
    (["cases=[layer_rope]", "rope_theta=5e5"], "rope_theta: no chosen case reads it"),
]

BAD = SAID + NAMED


def _argv(given, tmp: str, run: str) -> list[str]:
    own = [a.replace("{tmp}", tmp) for a in ([given] if isinstance(given, str) else given)]
    keys = {a.split("=", 1)[0].lstrip("+~") for a in own}
    if "model" in keys:  # model= sets the shapes
        keys |= {"d_model", "num_heads"}
    base = [a for a in BASE if a.split("=", 1)[0] not in keys]
    folder = [] if "hydra.run.dir" in keys else [f"hydra.run.dir={run}"]
    return [*base, *own, *folder]


CHUNKS = 4  # the inputs in four tests, so that test workers share them (about 90 s in all)


def _outcomes(tmp_path_factory, chunk: int):
    tmp = tmp_path_factory.mktemp("inputs")
    for name, (config, _) in CONFIGS.items():
        (tmp / f"{name}.json").write_text(json.dumps(config))
    for name, text in RAW.items():
        (tmp / f"{name}.json").write_text(text)
    (tmp / "a_file.txt").write_text("mine")
    runs = tmp_path_factory.mktemp("runs")
    mine = list(range(chunk, len(BAD), CHUNKS))
    results = [run_bench(*_argv(BAD[i][0], str(tmp), str(runs / str(i)))) for i in mine]
    return mine, results, runs


def test_there_are_a_hundred_bad_inputs():
    assert len(BAD) >= 100 and len({str(g) for g, _ in BAD}) == len(BAD), len(BAD)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_each_bad_input_is_one_line_naming_it(tmp_path_factory, chunk):
    """Every CHUNKS-th input from chunk on, each run in a fork (forked_runs.py): each input
    that is not refused as it should be is listed with what it printed."""
    mine, results, runs = _outcomes(tmp_path_factory, chunk)
    assert len(results) == len(mine)
    failed = []
    for i, got in zip(mine, results, strict=True):
        given, names = BAD[i]
        lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
        left = (runs / str(i)).exists() and any((runs / str(i)).iterdir())
        if got.returncode != 2 or len(lines) != 1 or names not in lines[0] or left:
            said = got.stderr.strip()[-300:] or got.stdout.strip()[-300:]
            failed.append(f"{given}: exit {got.returncode}, {len(lines)} lines: {said}")
    assert not failed, f"{len(failed)} of {len(mine)}:\n" + "\n".join(failed)
