"""`make gpu-compile`: every kernel specialization the GPU runs would launch, compiled for a GPU
on the CPU, with registers, stack, spills, shared memory and instructions read from the cubin.

How: the launchers themselves run on meta tensors of the real shapes (no data, no GPU) with
`torch.cuda.get_device_capability` answering the target's, and Triton's `JITFunction.run`
replaced by a recorder; each recorded launch is specialized by Triton's own binder for the
target (pointer and integer divisibility, unit strides as constants: what the JIT would give on
that GPU, allocations being 16-byte aligned) and compiled with `triton.compile`. The Triton
wheel's `cuobjdump` reads the cubin: `--dump-resource-usage` (registers, stack) and `-sass`
(local-memory stores and loads, tensor-core instructions, 128-bit global accesses); the TTGIR
says which dots became wgmma (sm_90a) or mma (sm_80).

Exits 1 on a compile error, a spill at a default tile, shared memory above the target's limit,
an attention dot on sm_90a without wgmma, or an attention kernel on sm_90a whose key loops the
software pipeliner did not take (every loop without an inner loop must be, and at least one);
candidate tiles that spill are reported, not fatal. Writes
results/gpu-compile/triton-<version>.{csv,md}.

    python -m tools.audit [--targets sm_90a,sm_80] [--jobs 2] [--out DIR] [--only rope_cache]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import triton

from tools.audit.capture import capture
from tools.audit.compile import compile_job, verdict
from tools.audit.specs import TARGETS, specs, tile_candidates
from tools.audit.tables import COLUMNS, compare, markdown, rows_for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sm_90a,sm_80", help="comma-separated: sm_90a, sm_80")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    parser.add_argument("--out", type=Path, default=Path("results/gpu-compile"))
    parser.add_argument("--only", choices=("rope", "rope_cache", "relbias"), default=None)
    parser.add_argument("--no-candidates", action="store_true", help="default tiles only")
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="print two audits' CSVs side by side and exit",
    )
    args = parser.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return 0
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("TRITON_INTERPRET=1 is set: the kernels would be interpreted, not compiled")
    targets = args.targets.split(",")
    for t in targets:
        if t not in TARGETS:
            parser.error(f"--targets: unknown {t!r}; choose from {', '.join(TARGETS)}")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    work = [(s, t) for t in targets for s in specs(args.only)]
    if not args.no_candidates and "sm_90a" in targets and args.only in (None, "relbias"):
        work += [(s, "sm_90a") for s in tile_candidates()]
    # a fresh cache: every kernel compiled cold, so compile_s is what the GPU's JIT would pay
    start = time.perf_counter()
    captured = [(s, t, capture(s, TARGETS[t])) for s, t in work]
    flat = [job for _, _, jobs in captured for job in jobs]
    with tempfile.TemporaryDirectory(prefix="gpu-compile-cache-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache  # read by the workers' Triton
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(compile_job, flat))
    rows, i = [], 0
    for s, t, jobs in captured:
        rows += rows_for(s, t, jobs, results[i : i + len(jobs)])
        i += len(jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"triton-{triton.__version__}"
    with open(f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    Path(f"{stem}.md").write_text(markdown(rows))
    bad = verdict(rows)
    print(
        f"{len(rows)} kernels compiled in {time.perf_counter() - start:.0f} s "
        f"({args.jobs} processes) -> {stem}.md"
    )
    for r in bad:
        print(
            f"PROBLEM {r['kernel']} {r['target']} {r['family']} {r['dtype']} "
            f"D={r['head_dim']} causal={r['causal']} {r['variant']} {r['tiles']}: {r['problem']}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
