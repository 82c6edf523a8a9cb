"""A time model of the attention kernels on a Hopper GPU, from what the compile audit reads in
each key loop's SASS (tools/audit/compile.py), calibrated on the committed GPU runs' rows.

One iteration of a key loop, per program, in SM cycles:
- tensor cores: each m64nNk16 of a warp group keeps the SM's four tensor cores N / 2 cycles
  (dense BF16: 4096 FLOP a cycle an SM, 989 TFLOP/s on 132 SMs at 1.83 GHz, NVIDIA's H100
  figures), or as long as its operands take to stream from shared memory at 128 bytes a cycle
  (B: 32 N bytes; A: 2 KiB unless it is in registers), whichever is longer: an m64n16 from
  shared memory takes 20 cycles for 8 cycles of products;
- the CUDA cores: each of the 4 schedulers issues one warp instruction a cycle to the warps it
  holds (warps / 4), and a MUFU (exp2) takes 8 of them (16 lanes an SM);
- overlapped in part: max(tensor, issue) + alpha * min(tensor, issue).
A program's cycles: its iterations of each loop (the band's with its inner loop's trips) plus a
fixed `overhead` of cycles per program (loading its block, writing its results); programs run
`blocks_per_sm` at a time on each SM (their iterations share the SM), assigned in grid order to
the first free slot. Times are cycles over an effective clock `hz`; the backward's `delta` pass
is its bytes at the run's copy rate. alpha, hz and overhead are fitted to the runs' rows.

`python -m tools.audit.fit` fits these constants and prints what they predict (tools/audit/fit.py).
"""

from __future__ import annotations

import functools
import heapq
import re
from dataclasses import dataclass

import pandas as pd

SMS = 132  # H100 and H200 SXM
SHARED_BYTES_PER_CYCLE = 128
A_BYTES = 64 * 16 * 2  # an m64k16 bf16 operand
KERNELS = {"fwd": "_relbias_fwd_kernel", "dkdv": "_relbias_bwd_dkdv_kernel"}
KERNELS["dq"] = "_relbias_bwd_dq_kernel"
T5_BUCKETS, T5_DISTANCE = 32, 128  # bench/cases/families.py's T5_ARGS (bidirectional)


@dataclass(frozen=True)
class Params:
    alpha: float  # the share of the shorter of tensor and issue work not hidden under the other
    hz: float  # effective cycles a second
    overhead: float  # cycles a program spends outside its key loops
    call_s: tuple[tuple[str, float], ...] = ()  # per run: a call's time besides its kernels

    def call(self, run: str) -> float:
        return dict(self.call_s).get(run, 0.0)


@dataclass(frozen=True)
class Loop:
    insts: int
    mufu: int
    inner: int  # instructions of a nested loop (one of its iterations)
    mma: tuple[tuple[int, bool, int], ...]  # (N, A in registers, count) per warp group


def loops_of(row) -> list[Loop]:
    """The key loops of an audit row, in address order (the band's last)."""
    sass = str(row["loop_sass"]).split()
    inner = [int(x) for x in str(row["loop_inner"]).split()]
    mma = str(row["loop_mma"]).split()
    out = []
    for s, i, m in zip(sass, inner, mma, strict=True):
        insts, _, mufu, _ = (int(x) for x in s.split("/"))
        shapes = tuple(
            (int(g.group(2)), g.group(3) == "r", int(g.group(1)))
            for g in re.finditer(r"(\d+)x(\d+)([rs])", m)
        )
        out.append(Loop(insts, mufu, i, shapes))
    return out


def iteration_cycles(loop: Loop, warps: int, trips: int) -> tuple[float, float]:
    """One iteration of a loop for one program, in SM cycles: (tensor, issue)."""
    tensor = (warps // 4) * sum(
        count * max(n / 2, ((0 if regs else A_BYTES) + 32 * n) / SHARED_BYTES_PER_CYCLE)
        for n, regs, count in loop.mma
    )
    insts = loop.insts + loop.inner * max(trips - 1, 0)
    issue = warps / 4 * max(insts, 8 * loop.mufu)
    return tensor, issue


def _parts(x0, start, end, k, low, high, bx, by) -> tuple[int, int]:
    """posenc_kernels/_relbias_common.py's _parts: the band [lo, hi) of streamed blocks."""
    lo = max(start, max(x0 - k + 1, 0) // by * by) if low else start
    lo = min(lo, end)
    hi = min(max(-(-(x0 + bx - 1 + k) // by) * by, lo), end) if high else end
    return lo, hi


def bucket_index(family: str, k: int) -> list[int]:
    """The table index of each relative position -K..K (T5: its bucket; the loops of the kernels
    that the H200 runs measured spanned a tile's buckets)."""
    if family != "t5":
        return list(range(2 * k + 1))
    import torch

    from posenc._bias import t5_relative_bucket

    rel = torch.arange(-k, k + 1)
    return t5_relative_bucket(rel, True, T5_BUCKETS, T5_DISTANCE).tolist()


def programs(kernel: str, family: str, length: int, bm: int, bn: int, k: int, causal: bool):
    """Per held block of one head: (outer iterations, [inner trips of each band iteration]).
    fwd and dq hold queries and stream keys; dk/dv hold keys and stream queries."""
    gidx = bucket_index(family, k)
    key_held = kernel == "dkdv"
    held, streamed = (bn, bm) if key_held else (bm, bn)
    out = []
    for x0 in range(0, length, held):
        if key_held:
            start, end = ((x0 // streamed) * streamed if causal else 0), length
            lo, hi = _parts(x0, start, end, k, not causal, True, held, streamed)
        else:
            start, end = 0, (min(length, x0 + held) if causal else length)
            lo, hi = _parts(x0, start, end, k, True, not causal, held, streamed)
        outer = -(-(lo - start) // streamed) + -(-(end - hi) // streamed)
        trips = []
        for y0 in range(lo, hi, streamed):
            q0, k0 = (y0, x0) if key_held else (x0, y0)
            r_lo = min(max(k0 - (q0 + bm - 1), -k), k) + k
            r_hi = min(max(k0 + bn - 1 - q0, -k), k) + k
            span = gidx[r_lo : r_hi + 1]
            trips.append(max(span) - min(span) + 1)
        out.append((outer, trips))
    return out


def makespan(work: list[float], slots: int) -> float:
    """The last program's end when each starts on the first slot to free, in grid order."""
    free = [0.0] * slots
    for w in work:
        heapq.heapreplace(free, free[0] + w)
    return max(free)


@functools.cache
def _program_work(loops, warps, kernel, family, length, bm, bn, k, causal):
    """Per held block of one head: (sum of max(tensor, issue), sum of min) over its iterations."""
    band, outer_loops = loops[-1], loops[:-1] or loops[-1:]
    out = []
    for outer, trips in programs(kernel, family, length, bm, bn, k, causal):
        big = small = 0.0
        for lp in outer_loops:  # the outer iterations split evenly among the outer loops
            t, i = _split(iteration_cycles(lp, warps, 1))
            big, small = big + outer * t / len(outer_loops), small + outer * i / len(outer_loops)
        for trip in trips:
            t, i = _split(iteration_cycles(band, warps, trip))
            big, small = big + t, small + i
        out.append((big, small))
    return tuple(out)


def _split(pair: tuple[float, float]) -> tuple[float, float]:
    return max(pair), min(pair)


def kernel_cycles(row, point: dict, alpha: float, overhead: float) -> float:
    """One kernel's cycles at a point (batch, seq_len, heads, causal, k) from its audit row:
    the makespan of its programs over the SMs' slots."""
    kernel = next(name for name, k in KERNELS.items() if k == row["kernel"])
    bm, bn = (int(x) for x in str(row["tiles"]).split("x"))
    slots = int(row["blocks_per_sm"])
    each = _program_work(
        tuple(loops_of(row)), int(row["num_warps"]), kernel, point["family"],
        point["seq_len"], bm, bn, point["k"], point["causal"],
    )  # fmt: skip
    # co-resident programs share the SM: each runs at 1 / slots of its speed
    work = [(big + alpha * small + overhead) * slots for big, small in each]
    return makespan(work * (point["batch"] * point["heads"]), SMS * slots)


def case_rows(rows: pd.DataFrame, point: dict) -> list[dict]:
    """The audit rows of a point's kernels: the forward, and with the backward dk/dv and dq
    (picked once a point: the fit prices each point at 66 settings)."""
    kernels = ["fwd"] + (["dkdv", "dq"] if point["mode"] == "forward+backward" else [])
    out = []
    for kernel in kernels:
        at = (rows["kernel"] == KERNELS[kernel]) & (rows["family"] == point["family"])
        at &= rows["causal"].astype(str) == str(point["causal"])
        out.append(rows[at].iloc[0].to_dict())
    return out


def case_cycles(kernel_rows: list[dict], point: dict, alpha: float, overhead: float) -> float:
    """A row's kernels' cycles (their audit rows: case_rows)."""
    return sum(kernel_cycles(row, point, alpha, overhead) for row in kernel_rows)


def fixed_seconds(point: dict, copy_bps: float) -> float:
    """The backward's delta pass (reads out and dO, writes a float a row) at the copy rate."""
    if point["mode"] != "forward+backward":
        return 0.0
    elems = point["batch"] * point["heads"] * point["seq_len"]
    return elems * (2 * point["head_dim"] * 2 + 4) / copy_bps
