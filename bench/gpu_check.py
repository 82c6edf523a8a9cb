"""`make gpu-check`: the kernel tests on the GPU, then both kernels timed against their peers.

On any CUDA machine: (1) runs `pytest tests/kernels` (the same tests CI runs under the
interpreter, now on the GPU); (2) times forward and forward+backward of the fused Triton RoPE
against the eager `posenc` reference, `torch.compile` of it, Liger-Kernel's RoPE when installed,
and a device-to-device copy of the same bytes, timed side by side in one run, with inputs
rotated so that every call starts with a cold L2; (3) times the relative-bias attention kernel
against SDPA with a materialized bias, FlexAttention and SDPA without bias
(bench/gpu_attention.py); (4) times that kernel over candidate tiles (block sizes, warps,
stages) at one shape, as tuning data; (5) writes rope.csv/md, attention.csv/md and tiles.csv/md
under results/gpu/<run>/, each CSV rewritten after every shape so that an interrupted run keeps
what it measured.

`--smoke` runs a tiny shape on whatever device there is (the CPU under TRITON_INTERPRET=1), to
test this script itself; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import importlib.util
import itertools
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import kernels
from bench import gpu_attention
from bench.memory import peak_bytes
from posenc import functional as F


@dataclass(frozen=True)
class Shape:
    b: int
    seq: int
    hq: int
    hk: int
    d: int

    def label(self) -> str:
        return f"B={self.b} L={self.seq} Hq={self.hq} Hk={self.hk} D={self.d}"


LLAMA = [Shape(8, 4096, 32, 8, 128), Shape(8, 1024, 32, 8, 128)]  # Llama-like, GQA 4:1
SMOKE = [Shape(1, 8, 2, 1, 16)]

FIELDS = (
    "case", "impl", "mode", "device", "device_name", "dtype", "batch", "seq_len", "num_heads",
    "num_kv_heads", "head_dim", "p20_ms", "p50_ms", "p80_ms", "n_samples", "gbps",
    "pct_of_copy", "peak_mem_bytes", "max_abs_err", "status", "message", "timestamp",
)  # fmt: skip


def _input_sets(shape: Shape, dtype, device, n_sets: int):
    """n_sets independent (q, k) pairs in the bshd layout, rotated through so L2 starts cold."""
    return [
        (
            torch.randn(shape.b, shape.seq, shape.hq, shape.d, device=device, dtype=dtype),
            torch.randn(shape.b, shape.seq, shape.hk, shape.d, device=device, dtype=dtype),
        )
        for _ in range(n_sets)
    ]


def _eager(q, k, cos, sin):
    """The posenc reference on bshd tensors: a (B, H, L, D) view each, cos/sin sliced to L."""
    seq = q.shape[1]
    qo = F.apply_rope(q.transpose(1, 2), cos[:seq], sin[:seq]).transpose(1, 2)
    ko = F.apply_rope(k.transpose(1, 2), cos[:seq], sin[:seq]).transpose(1, 2)
    return qo, ko


def _liger():
    """Liger-Kernel's RoPE as (q, k, cos, sin) -> (q, k) on bshd tensors, or None."""
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except ImportError:
        return None

    def run(q, k, cos, sin):
        seq = q.shape[1]
        full_cos = torch.cat((cos[:seq], cos[:seq]), -1)[None]  # (1, L, D): Liger's layout
        full_sin = torch.cat((sin[:seq], sin[:seq]), -1)[None]
        qo, ko = LigerRopeFunction.apply(q.transpose(1, 2), k.transpose(1, 2), full_cos, full_sin)
        return qo.transpose(1, 2), ko.transpose(1, 2)

    return run


def _impls(smoke: bool) -> dict[str, Callable | None]:
    impls: dict[str, Callable | None] = {
        "triton": lambda q, k, cos, sin: kernels.apply_rope(q, k, cos, sin),
        "eager": _eager,
        "compiled": None if smoke else torch.compile(_eager, dynamic=False),
        "liger": _liger(),
    }
    return impls


def _closure(fn, sets, cos, sin, mode: str):
    """A zero-argument call that takes the next input set each time (setup is not timed)."""
    turn = itertools.cycle(range(len(sets)))
    grads = [tuple(torch.randn_like(t) for t in pair) for pair in sets[:1]] * len(sets)

    if mode == "forward":

        def call():
            q, k = sets[next(turn)]
            with torch.no_grad():
                return fn(q, k, cos, sin)

        return call

    leaves = [tuple(t.detach().requires_grad_() for t in pair) for pair in sets]

    def call_bwd():
        i = next(turn)
        q, k = leaves[i]
        out = fn(q, k, cos, sin)
        torch.autograd.backward(out, grads[i])

    return call_bwd


def _copy_closure(sets, mode: str):
    outs = [tuple(torch.empty_like(t) for t in pair) for pair in sets]
    turn = itertools.cycle(range(len(sets)))
    passes = 1 if mode == "forward" else 2  # backward moves the same bytes again

    def call():
        i = next(turn)
        for _ in range(passes):
            outs[i][0].copy_(sets[i][0])
            outs[i][1].copy_(sets[i][1])

    return call


def rope_rows(shape: Shape, device: torch.device, dtype, budget_s: float, smoke: bool):
    props = torch.cuda.get_device_properties(device) if device.type == "cuda" else None
    l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
    set_bytes = (shape.hq + shape.hk) * shape.b * shape.seq * shape.d * dtype.itemsize
    n_sets = max(2, min(64, math.ceil(4 * l2 / set_bytes)))  # >= 4x L2 between reuses
    sets = _input_sets(shape, dtype, device, n_sets)
    cos, sin = F.rope_cos_sin(shape.seq, shape.d, device=device)
    q0, k0 = sets[0]
    want = _eager(q0.float(), k0.float(), cos, sin)  # float32 math: the gate's truth
    tol = 4 * torch.finfo(dtype).eps * max(q0.abs().max().item(), k0.abs().max().item())
    base = dict(
        case="rope", device=device.type,
        device_name=props.name if props else "cpu (interpreter)" if smoke else "cpu",
        dtype=str(dtype).replace("torch.", ""), batch=shape.b, seq_len=shape.seq,
        num_heads=shape.hq, num_kv_heads=shape.hk, head_dim=shape.d,
        timestamp=dt.datetime.now().isoformat(timespec="seconds"),
    )  # fmt: skip
    rows = []
    for mode in ("forward", "forward+backward"):
        moved = 2 * set_bytes * (1 if mode == "forward" else 2)
        copy = dict(base, impl="copy", mode=mode, max_abs_err=0.0, message="")
        ready = {"copy": (copy, _copy_closure(sets, mode))}  # timed side by side with the rest
        for name, fn in _impls(smoke).items():
            row = dict(base, impl=name, mode=mode)
            if fn is None:
                rows.append(dict(row, status="skipped", message="not installed or not in smoke"))
                continue
            try:
                with torch.no_grad():
                    got = fn(q0, k0, cos, sin)
                err = max(
                    (g.float() - w).abs().max().item() for g, w in zip(got, want, strict=True)
                )
                if err > tol:  # never time a wrong result
                    rows.append(
                        dict(row, max_abs_err=err, status="wrong", message=f"tol {tol:.2e}")
                    )
                    continue
                ready[name] = (dict(row, max_abs_err=err), _closure(fn, sets, cos, sin, mode))
            except Exception as exc:  # one failing impl never stops the run
                rows.append(gpu_attention.failed_row(row, exc))

        def finish(name, t, call, timings, moved=moved):
            peak = 0 if name == "copy" else peak_bytes(call, device)
            return dict(**_stats(t, moved, timings["copy"].p50), peak_mem_bytes=peak)

        rows += gpu_attention.time_side_by_side(ready, device, finish, budget_s=budget_s)
    return rows


def _stats(t, moved: int, copy_p50: float) -> dict:
    return dict(
        p20_ms=t.p20, p50_ms=t.p50, p80_ms=t.p80, n_samples=t.n,
        gbps=moved / (t.p50 * 1e-3) / 1e9, pct_of_copy=100.0 * copy_p50 / t.p50,
    )  # fmt: skip


def markdown(rows: list[dict], tests: str) -> str:
    lines = [f"# RoPE on {rows[0]['device_name']}", "", f"Kernel tests: {tests}", ""]
    lines += ["| shape | mode | impl | p50 ms [p20, p80] | GB/s | % of copy | peak MiB | status |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        shape = Shape(r["batch"], r["seq_len"], r["num_heads"], r["num_kv_heads"], r["head_dim"])
        head = f"| {shape.label()} | {r['mode']} | {r['impl']} |"
        if r["status"] != "ok":
            lines.append(f"{head} | | | | {r['status']}: {r.get('message', '')} |")
            continue
        lines.append(
            f"{head} {r['p50_ms']:.3f} [{r['p20_ms']:.3f}, "
            f"{r['p80_ms']:.3f}] | {r['gbps']:.0f} | {r['pct_of_copy']:.0f}% | "
            f"{r['peak_mem_bytes'] / 2**20:.0f} | ok |"
        )
    return "\n".join(lines) + "\n"


def run_kernel_tests(timeout_s: float) -> str:
    cmd = [sys.executable, "-m", "pytest", "-q", "tests/kernels", "tests/test_bench_timing.py"]
    if importlib.util.find_spec("xdist") is not None:  # Triton compiles dominate: use the cores
        cmd += ["-n", str(min(8, os.cpu_count() or 1))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"NOT FINISHED: stopped after {timeout_s:.0f} s (--tests-timeout-s)"
    tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
    return ("passed: " if proc.returncode == 0 else "FAILED: ") + tail


def _run(shapes, rows_of, fields, path: Path, device, args, deadline: float) -> list[dict]:
    """Every shape's rows, the CSV rewritten after each; shapes not started by the deadline
    are left out (and said so), so that a slow box still leaves a complete file."""
    rows = []
    for shape in shapes:
        if time.monotonic() > deadline:
            print(f"--deadline-s reached: {shape} and later shapes not measured")
            break
        rows += rows_of(shape, device, torch.bfloat16, args.budget_s, args.smoke)
        with open(path, "w", newline="") as f:  # rewritten after each shape
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _write_md(path: Path, text: str) -> None:
    path.write_text(text)
    print(text)
    print(f"wrote {path} and {path.with_suffix('.csv').name}")


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shape, any device, no tests")
    parser.add_argument("--out", type=Path, default=None, help="run directory (must not exist)")
    parser.add_argument("--budget-s", type=float, default=1.0, help="timing budget per impl")
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=450.0,
        help="start no new shape after this many seconds (default 450)",
    )
    parser.add_argument(
        "--tests-timeout-s",
        type=float,
        default=240.0,
        help="stop the GPU kernel tests after this many seconds",
    )
    parser.add_argument("--parts", default="rope,attention,tiles",
                        help="comma-separated: rope, attention, tiles (default all; tiles, the "
                             "attention kernel's block-size tuning, runs last)")  # fmt: skip
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        parser.error("no CUDA device: run on a GPU machine, or pass --smoke to test the script")
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        parser.error("--smoke on the CPU needs TRITON_INTERPRET=1 set before Python starts")
    parts = set(args.parts.split(","))
    if not parts <= {"rope", "attention", "tiles"}:
        parser.error(f"--parts: expected some of rope, attention, tiles, got {args.parts!r}")
    device = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name(device).replace(" ", "_") if cuda else "cpu"
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out or Path("results") / "gpu" / f"{stamp}-{name}"
    out_dir.mkdir(parents=True, exist_ok=False)  # never overwrite an earlier run
    deadline = time.monotonic() + args.deadline_s
    tests = "not run (--smoke)" if args.smoke else run_kernel_tests(args.tests_timeout_s)
    torch.manual_seed(0)
    if "rope" in parts:
        shapes = SMOKE if args.smoke else LLAMA
        rows = _run(shapes, rope_rows, FIELDS, out_dir / "rope.csv", device, args, deadline)
        if rows:
            _write_md(out_dir / "rope.md", markdown(rows, tests))
    if "attention" in parts:
        shapes = gpu_attention.SMOKE if args.smoke else gpu_attention.SHAPES
        rows = _run(shapes, gpu_attention.attention_rows, gpu_attention.FIELDS,
                    out_dir / "attention.csv", device, args, deadline)  # fmt: skip
        if rows:
            text = f"Kernel tests: {tests}\n\n" + gpu_attention.markdown(rows)
            _write_md(out_dir / "attention.md", text)
    if "tiles" in parts:
        shapes = gpu_attention.TILE_SMOKE if args.smoke else gpu_attention.TILE_SHAPES
        rows = _run(shapes, gpu_attention.tile_rows, gpu_attention.FIELDS, out_dir / "tiles.csv",
                    device, args, deadline)  # fmt: skip
        if rows:
            text = gpu_attention.markdown(rows) + gpu_attention.tiles_summary(rows)
            _write_md(out_dir / "tiles.md", text)
    (out_dir / "tests.txt").write_text(tests + "\n")
    return out_dir


if __name__ == "__main__":
    main()
