"""The CI timing suite: fixed points of the harness's declared cases, timed by one file in
both of the gate's modes (bench.regress.gate), on a CPU (the eager references, float32) or on a
GPU (--device cuda: the fused kernels, bfloat16, each round waited for).

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

# The suite's device: the gate sets it for the processes it starts (--device); cpu by default.
DEVICE_ENV = "POSENC_REGRESS_DEVICE"
DEVICES = ("cpu", "cuda")
# bump when points, anchors, threads or what a mode times change: other suites are refused
# (cpu v3: backward modes time torch.autograd.grad of every trainable leaf, tables included;
# cpu v4: one pinned CPU, the kept heap, a process per block)
SUITES = {"cpu": "posenc-cpu-v4", "cuda": "posenc-cuda-v1"}
THREADS = 1
HEAP = "keep"  # the harness's default timing.cpu_heap: freed memory stays, no fresh pages per call
REPEATS, ROUNDS, WARMUP = 10, 9, 5  # blocks (one process each), rounds, untimed calls
DTYPES = {"cpu": torch.float32, "cuda": torch.bfloat16}
ALL_POINTS = {  # device -> case -> (impl, point)
    "cpu": {  # the eager references, a few ms per call on one core
        "rope": ("reference", Point(8, 512, 256, 4)),
        "sinusoidal": ("reference", Point(16, 512, 256, 4)),
        "shaw_attention": ("reference", Point(2, 256, 128, 4)),
        "alibi_attention": ("reference", Point(4, 256, 256, 4)),
        "t5_attention": ("reference", Point(4, 256, 256, 4)),
    },
    "cuda": {  # the fused kernels at sweep=gpu's shapes, bfloat16: 0.2-10 ms per call on an H200
        "rope": ("triton", Point(8, 4096, 4096, 32, num_kv_heads=8, layout="bshd")),
        "alibi_attention": ("triton", Point(4, 4096, 2048, 16)),
        "t5_attention": ("triton", Point(4, 4096, 2048, 16)),
        "shaw_kv_attention": ("triton", Point(4, 2048, 2048, 16)),
    },
}
MODES = ("forward", "forward+backward")
CALIBRATIONS = ("copy", "matmul")


def keys(device: str) -> list[tuple[str, str]]:
    """The device's case-modes, in timing order."""
    return [(case, mode) for case in ALL_POINTS[device] for mode in MODES]


def ids(device: str) -> list[str]:
    """Block r: the two calibrations, then every case-mode; pytest runs parameters in this
    order."""
    return [_id(r, name, mode) for r, name, mode in _order(device)]


def _order(device: str) -> list[tuple[int, str, str]]:
    order = [(r, name, "-") for r in range(REPEATS) for name in CALIBRATIONS]
    order += [(r, c, m) for r in range(REPEATS) for c, m in keys(device)]
    return sorted(order, key=lambda item: item[0])  # stable: within a block, calibrations first


def _id(r: int, name: str, mode: str) -> str:
    return f"r{r}-{name}" if mode == "-" else f"r{r}-{name}-{mode}"


DEVICE = os.environ.get(DEVICE_ENV, "cpu")  # this process's (a worker's, a block's)
SUITE, POINTS, KEYS = SUITES[DEVICE], ALL_POINTS[DEVICE], keys(DEVICE)


def _inputs(case_name: str, mode: str, point: Point) -> dict:
    case = CASES[case_name]
    torch.manual_seed(0)
    inputs = case.build(point, torch.device(DEVICE), DTYPES[DEVICE])
    for t in check.leaves(inputs, case.grad_inputs).values():
        t.requires_grad_(mode != "forward")
    return inputs


def synced(fn):
    """fn, and on CUDA its queued work waited for: what a round's wall clock then measures."""
    if DEVICE != "cuda":
        return fn

    def call():
        fn()
        torch.cuda.synchronize()

    return call


def _timed(case_name: str, make, inputs: dict, mode: str):
    """The harness's timed call of `mode` (bench.run.tasks.timed_call), synced."""
    call = as_call(make(inputs))
    return synced(timed_call(call, leaves_of(call, inputs, CASES[case_name]), mode))


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
    at = torch.arange(n, device=q.device)
    bias = (-(at[None, :] - at[:, None]).abs().float() / 8).to(q.dtype)  # (L, L)
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
    "shaw_kv_attention": _bias_anchor,
}


def _anchor(case: str, mode: str):
    return _timed(case, ANCHORS[case], _inputs(case, mode, POINTS[case][1]), mode)


def _calibration(kind: str):
    """The machine as a whole: a copy (bandwidth) and a matmul (FLOP/s): 16 MiB and 256^3 in
    float32 on a CPU, 1 GiB and 8192^3 in bfloat16 on a GPU."""
    gpu = DEVICE == "cuda"
    n, m, dtype = (256 << 20, 8192, torch.bfloat16) if gpu else (4 << 20, 256, torch.float32)
    if kind == "copy":
        src = torch.randn(n, device=DEVICE)
        dst = torch.empty_like(src)
        return synced(lambda: dst.copy_(src))
    a, b = (torch.randn(m, m, device=DEVICE).to(dtype) for _ in range(2))
    return synced(lambda: a @ b)


def work(case: str, mode: str, slowdown: str | None = None):
    """The zero-argument call timed for case-mode (with SLOWDOWN's planted extra work)."""
    point = POINTS[case][1]
    call = _call(case, mode, point)
    if slowdown != case:
        return call
    b, knobs = max(1, point.batch // 4), dict(point.knobs)
    quarter = Point(b, point.seq_len, point.d_model, point.num_heads, **knobs)
    extra = _call(case, mode, quarter)  # the same op again on B/4 sequences: 25% more work

    def both():
        call()
        extra()

    return both


ORDER, IDS = _order(DEVICE), ids(DEVICE)


@pytest.fixture
def slowdown(request) -> str | None:
    return request.config.getoption("--perf-slowdown")


def stack() -> dict:
    """On CUDA, what a GPU baseline is keyed by: the GPU's name, torch's and Triton's versions
    (a kernel's speed changes with each); nothing on a CPU (pytest-benchmark's machine_info
    names it)."""
    if DEVICE != "cuda":
        return {}
    import triton

    gpu = torch.cuda.get_device_name()
    return dict(gpu=gpu, torch=torch.__version__, triton=triton.__version__)


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
    info = dict(suite=SUITE, case=case, mode=mode, repeat=repeat, threads=THREADS, **stack())
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
