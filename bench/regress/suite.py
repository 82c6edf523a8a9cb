"""The CI timing suite: fixed CPU points of the harness's declared cases, timed by one file in
both of the gate's modes (bench.regress.gate).

- Stored-baseline mode: pytest-benchmark runs `test_perf` below; the gate runs one pytest
  process per block (bench.regress.runs) and merges their JSON, so `pytest-benchmark compare`
  reads the result. Every round of a case comes right after a round of its anchor, a frozen eager
  formula of the same work (RoPE by cat of halves, x + table, SDPA with a materialized bias,
  torch's own MultiheadAttention), kept in this file so that a change to posenc shows in the
  case and not in the anchor; the gate divides each round by its anchor's.
- A/B mode: bench.regress.worker calls `work` for each case-mode, in a process that has the base
  commit's library or the working tree's.

What keeps a noisy 2-core VM from raising false alarms (measured in docs/regress.md):
- one thread, pinned to one CPU (`prepare`): a neighbour on the other core then costs cache and
  memory bandwidth, not half of our threads, and every process runs on the same core;
- a fresh process per block: one process of unchanged code reads RoPE up to 20% faster or
  slower than another for its whole life (and so do its forks), so a block is a process and
  the gate's statistics see that spread instead of mistaking it for a change;
- the harness's kept heap (timing.cpu_heap=keep): no fresh pages at every call.

`--perf-slowdown CASE` makes CASE do 25% more work (the same op again on a quarter of the batch):
the planted regression that the gate must catch.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.nn.functional as tf

from bench.cases import CASES
from bench.registry import Point, as_call
from bench.run import check, heap
from bench.run.tasks import leaves_of, timed_call
from posenc import functional as F

# bump when points, anchors, threads or what a mode times change: other suites are refused
# (v3: backward modes time torch.autograd.grad of every trainable leaf, tables included;
# v4: one pinned CPU, the kept heap, a process per block)
SUITE = "posenc-cpu-v4"
THREADS = 1
HEAP = "keep"  # the harness's default timing.cpu_heap: freed memory stays, no fresh pages per call
REPEATS, ROUNDS, WARMUP = 10, 9, 5  # blocks (one process each), rounds, untimed calls
POINTS = {  # case -> (impl, point): a few ms per call on one core
    "rope": ("reference", Point(8, 512, 256, 4)),
    "sinusoidal": ("reference", Point(16, 512, 256, 4)),
    "shaw_attention": ("reference", Point(2, 256, 128, 4)),
    "alibi_attention": ("reference", Point(4, 256, 256, 4)),
    "t5_attention": ("reference", Point(4, 256, 256, 4)),
}
MODES = ("forward", "forward+backward")
KEYS = [(case, mode) for case in POINTS for mode in MODES]  # the case-modes, in timing order
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


def work(case: str, mode: str, slowdown: str | None = None):
    """The zero-argument call timed for case-mode (with SLOWDOWN's planted extra work)."""
    point = POINTS[case][1]
    call = _call(case, mode, point)
    if slowdown != case:
        return call
    quarter = Point(max(1, point.batch // 4), point.seq_len, point.d_model, point.num_heads)
    extra = _call(case, mode, quarter)  # the same op again on B/4 sequences: 25% more work

    def both():
        call()
        extra()

    return both


# Block r: the two calibrations, then every case-mode; pytest runs parameters in this order.
ORDER = [(r, name, "-") for r in range(REPEATS) for name in CALIBRATIONS]
ORDER = [*ORDER, *((r, c, m) for r in range(REPEATS) for c in POINTS for m in MODES)]
ORDER.sort(key=lambda item: item[0])  # stable: within a block, calibrations first
IDS = [f"r{r}-{name}" if mode == "-" else f"r{r}-{name}-{mode}" for r, name, mode in ORDER]


@pytest.fixture
def slowdown(request) -> str | None:
    return request.config.getoption("--perf-slowdown")


def prepare() -> None:
    """The process as the suite times it: THREADS threads on the last CPU it may use, the
    harness's kept heap."""
    torch.set_num_threads(THREADS)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    heap.apply(HEAP)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    prepare()
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
    anchor, call, anchor_times = _anchor(case, mode), work(case, mode, slowdown), []

    def setup():
        start = time.perf_counter()
        anchor()
        anchor_times.append(time.perf_counter() - start)

    benchmark.pedantic(call, setup=setup, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    benchmark.extra_info["anchor"] = anchor_times[WARMUP:]
