"""The CI timing suite (pytest-benchmark): fixed CPU points of the harness's declared cases.

Run by `make regress` (`pytest bench/regress/suite.py --benchmark-only ...`); the normal test
run does not collect it (it is not under tests/, nor named test_*.py).

How it keeps a noisy 2-core VM from raising false alarms (measured in the README):
- one thread: a busy neighbour on the other core then costs cache and memory bandwidth, not half
  of our threads (with 2 threads a busy loop doubled some cases but not their anchors);
- every round of a case is paired with a round of its anchor, timed just before it: a frozen
  eager formula of the same work (RoPE by cat of halves, x + table, SDPA with a materialized
  bias, torch's own MultiheadAttention), kept in this file so that a change to posenc shows in
  the case and not in the anchor; bench.regress.gate divides each round by its anchor's;
- REPEATS blocks, each going over every case once, so that a slow minute of the machine hits
  one block of every case, not all rounds of one; bench.regress.gate tests the block medians;
- copy and matmul calibrations in every block record how fast the machine was as a whole (the
  raw change bench.regress.gate prints next to the normalized one).

`--perf-slowdown CASE` makes CASE do 25% more work (the same op again on a quarter of the batch):
the planted regression that the gate must catch.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as tf

from bench.cases import CASES
from bench.registry import Point, as_call
from bench.run import check
from bench.run.tasks import leaves_of, timed_call
from posenc import functional as F

# bump when points, anchors, threads or what a mode times change: other suites are refused
# (v3: backward modes time torch.autograd.grad of every trainable leaf, tables included)
SUITE = "posenc-cpu-v3"
THREADS = 1
REPEATS, ROUNDS, WARMUP = 7, 11, 2
POINTS = {  # case -> (impl, point): a few ms per call on one core
    "rope": ("reference", Point(8, 512, 256, 4)),
    "sinusoidal": ("reference", Point(16, 512, 256, 4)),
    "shaw_attention": ("reference", Point(2, 256, 128, 4)),
    "alibi_attention": ("reference", Point(4, 256, 256, 4)),
    "t5_attention": ("reference", Point(4, 256, 256, 4)),
}
MODES = ("forward", "forward+backward")
CALIBRATIONS = ("copy", "matmul")


def _inputs(case_name: str, mode: str, point: Point) -> dict:
    case = CASES[case_name]
    torch.manual_seed(0)
    inputs = case.build(point, torch.device("cpu"), torch.float32)
    for t in check.leaves(inputs, case.grad_inputs).values():
        t.requires_grad_(mode != "forward")
    return inputs


def _timed(case_name: str, make, inputs: dict, mode: str):
    """The harness's timed call of `mode` (bench.run.tasks.timed_call)."""
    call = as_call(make(inputs))
    return timed_call(call, leaves_of(call, inputs, CASES[case_name]), mode)


def _call(case_name: str, mode: str, point: Point):
    inputs = _inputs(case_name, mode, point)
    return _timed(case_name, CASES[case_name].impls[POINTS[case_name][0]].make, inputs, mode)


# Anchors: frozen eager formulas of each case's work. Do not "improve" them: their speed must
# follow the machine, not the library (a change here needs a new SUITE and a new baseline).


def _rope_anchor(inputs):
    cos, sin = inputs["cos"], inputs["sin"]

    def rotate(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)

    return lambda: (rotate(inputs["q"]), rotate(inputs["k"]))


def _sinusoidal_anchor(inputs):
    x = inputs["x"]
    table = F.sinusoidal_table(x.shape[1], x.shape[2])
    return lambda: x + table


def _bias_anchor(inputs):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    n = q.shape[-2]
    bias = -(torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs().float() / 8  # (L, L)
    return lambda: tf.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def _mha_anchor(inputs):
    torch.manual_seed(0)
    x = inputs["x"]
    mha = torch.nn.MultiheadAttention(inputs["d_model"], inputs["num_heads"], batch_first=True)
    return lambda: mha(x, x, x, need_weights=False)[0]


ANCHORS = {
    "rope": _rope_anchor,
    "sinusoidal": _sinusoidal_anchor,
    "shaw_attention": _mha_anchor,
    "alibi_attention": _bias_anchor,
    "t5_attention": _bias_anchor,
}


def _anchor(case: str, mode: str):
    return _timed(case, ANCHORS[case], _inputs(case, mode, POINTS[case][1]), mode)


def _calibration(kind: str):
    """The machine as a whole: a 16 MiB copy (bandwidth) and a 256^3 matmul (FLOP/s)."""
    if kind == "copy":
        src, dst = torch.randn(4 << 20), torch.empty(4 << 20)
        return lambda: dst.copy_(src)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    return lambda: a @ b


def _case(case: str, mode: str, slowdown: str | None):
    point = POINTS[case][1]
    call = _call(case, mode, point)
    if slowdown != case:
        return call
    quarter = Point(max(1, point.batch // 4), point.seq_len, point.d_model, point.num_heads)
    extra = _call(case, mode, quarter)  # the same op again on B/4 sequences: 25% more work

    def work():
        call()
        extra()

    return work


# Block r: the two calibrations, then every case-mode; pytest runs parameters in this order.
ORDER = [(r, name, "-") for r in range(REPEATS) for name in CALIBRATIONS]
ORDER = [*ORDER, *((r, c, m) for r in range(REPEATS) for c in POINTS for m in MODES)]
ORDER.sort(key=lambda item: item[0])  # stable: within a block, calibrations first
IDS = [f"r{r}-{name}" if mode == "-" else f"r{r}-{name}-{mode}" for r, name, mode in ORDER]


@pytest.fixture
def slowdown(request) -> str | None:
    return request.config.getoption("--perf-slowdown")


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("repeat", "case", "mode"), ORDER, ids=IDS)
def test_perf(benchmark, one_thread, repeat, case, mode, slowdown):
    """A case's rounds each come right after one untimed-by-pytest-benchmark round of its anchor
    (pedantic's setup), whose time is kept in extra_info["anchor"]: one per timed round."""
    info = dict(suite=SUITE, case=case, mode=mode, repeat=repeat, threads=THREADS)
    if case in CALIBRATIONS:
        benchmark.extra_info.update(info, kind="calibration")
        benchmark.pedantic(_calibration(case), rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
        return
    benchmark.extra_info.update(info, kind="case")
    anchor, work, anchor_times = _anchor(case, mode), _case(case, mode, slowdown), []

    def setup():
        start = time.perf_counter()
        anchor()
        anchor_times.append(time.perf_counter() - start)

    benchmark.pedantic(work, setup=setup, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    benchmark.extra_info["anchor"] = anchor_times[WARMUP:]
