"""The CI timing suite (pytest-benchmark): fixed CPU points of the harness's declared cases.

Run by `make regress` (`pytest tests/perf/perf_suite.py --benchmark-only ...`); the normal test
run does not collect it (its file name is not test_*.py). Every case has its own
calibration: a stable torch op of the same nature and size (see _calibration), timed before each
of the case's rounds and also as a benchmark of its own, so that bench.regress can normalize the
case by how fast the machine was at that moment for that kind of work.

`--perf-slowdown CASE` makes CASE do 25% more work (one extra pass over a quarter of the batch):
the planted regression that the gate must catch.
"""

from __future__ import annotations

import time

import pytest
import torch

from bench.cases import CASES
from bench.registry import Point
from bench.runner import timed_call

SUITE = "posenc-cpu-v1"  # bump when the points change: baselines of another suite are refused
ROUNDS, WARMUP = 31, 5
POINTS = {  # case -> (impl, point): a few ms per call on a 2-core machine
    "rope": ("reference", Point(16, 512, 256, 4)),
    "sinusoidal": ("reference", Point(32, 512, 256, 4)),
    "shaw_attention": ("reference", Point(4, 256, 128, 4)),
    "alibi_attention": ("reference", Point(8, 256, 256, 4)),
    "t5_attention": ("reference", Point(8, 256, 256, 4)),
}
MODES = ("forward", "forward+backward")
PARAMS = [(case, mode) for case in POINTS for mode in MODES]
IDS = [f"{case}-{mode}" for case, mode in PARAMS]


def _call(case_name: str, mode: str, point: Point):
    case = CASES[case_name]
    torch.manual_seed(0)
    inputs = case.build(point, torch.device("cpu"), torch.float32)
    for name in case.grad_inputs:
        inputs[name].requires_grad_(mode != "forward")
    fn = case.impls[POINTS[case_name][0]].make(inputs)
    return timed_call(fn, mode), inputs


def _quarter(point: Point) -> Point:
    return Point(max(1, point.batch // 4), point.seq_len, point.d_model, point.num_heads)


def _bytes(inputs) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))


@pytest.fixture
def slowdown(request) -> str | None:
    return request.config.getoption("--perf-slowdown")


def _info(benchmark, case: str, mode: str, kind: str) -> None:
    benchmark.extra_info.update(suite=SUITE, case=case, mode=mode, kind=kind,
                                threads=torch.get_num_threads())  # fmt: skip


def _calibration(case: str):
    """A stable torch op of the same nature and size as the case, its machine-speed anchor:
    an elementwise multiply over the same bytes for the encoders (memory-bound, like them), and
    SDPA on q, k, v of the same (B, H, L, D) for the attention cases (matmul + softmax)."""
    point = POINTS[case][1]
    if CASES[case].level == "attention":
        shape = (point.batch, point.num_heads, point.seq_len, point.head_dim)
        q, k, v = (torch.randn(shape) for _ in range(3))
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    _, inputs = _call(case, "forward", point)
    n = max(1, _bytes(inputs) // 4)
    src, dst = torch.randn(n), torch.empty(n)
    return lambda: torch.mul(src, 1.0001, out=dst)


def _case(case: str, mode: str, slowdown: str | None):
    call, _ = _call(case, mode, POINTS[case][1])
    if slowdown != case:
        return call
    extra, _ = _call(case, mode, _quarter(POINTS[case][1]))  # the same op again on B/4 sequences

    def work():
        call()
        extra()

    return work


# Each case right after its own calibration (pytest runs parameters in this order).
ORDER = [(case, mode, kind) for case, mode in PARAMS for kind in ("calibration", "case")]


@pytest.mark.parametrize(("case", "mode", "kind"), ORDER, ids=[f"{c}-{m}-{k}" for c, m, k in ORDER])
def test_perf(benchmark, case, mode, kind, slowdown):
    """kind="case" also times its calibration in pedantic's (untimed) setup before every round,
    so that each round has its own machine-speed reference taken a moment before it."""
    calibration = _calibration(case)
    _info(benchmark, case, mode, kind)
    if kind == "calibration":
        benchmark.pedantic(calibration, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
        return
    work, paired = _case(case, mode, slowdown), []

    def setup():
        start = time.perf_counter()
        calibration()
        paired.append(time.perf_counter() - start)

    benchmark.pedantic(work, setup=setup, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    benchmark.extra_info["paired_calibration"] = paired[WARMUP:]  # one per timed round
