"""Choose the attention kernel's default tiles by the compile audit: for each GPU, dtype, head
dim and kind of kernel, the first candidate (in order of preference: larger tiles first) that
compiles for every bias family, causal and not, with no spill in a key loop, within the GPU's
shared memory, and with every half-precision dot on wgmma (sm_90a). Prints a table to paste into
posenc_kernels/relbias.py (_FWD_TILES, _BWD_TILES) with the evidence for each choice.

    python tools/tile_search.py [--targets sm_90a,sm_80] [--jobs 2]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cases.families import FAMILIES as DECLARED  # noqa: E402
from tools.audit.capture import capture  # noqa: E402
from tools.audit.compile import compile_job, problems  # noqa: E402
from tools.audit.specs import TARGETS, Spec  # noqa: E402

HALF_FWD = [
    (128, 64, 8, 3),
    (128, 64, 8, 2),
    (128, 64, 4, 2),
    (64, 64, 4, 2),
    (64, 32, 8, 2),
    (64, 32, 4, 2),
]
VALUE_FWD = [(128, 32, 8, 2), (64, 64, 8, 2), (64, 32, 8, 2), (64, 32, 4, 2), (32, 32, 4, 2)]
FP32_FWD = [(64, 32, 8, 2), (32, 32, 4, 2), (32, 16, 4, 2), (16, 16, 4, 1)]
HALF_BWD = [(64, 128, 8, 3), (32, 128, 8, 2), (32, 64, 8, 2), (32, 64, 4, 2), (16, 64, 4, 2)]
FP32_BWD = [(32, 32, 4, 1), (16, 32, 4, 1), (16, 16, 4, 1)]
FAMILIES = {  # the kernel's families by the tile table they run with
    kind: tuple(f.name for f in DECLARED.values() if f.tile_kind == kind)
    for kind in ("plain", "value")
}


def _groups():
    """(label, direction, dtype, head_dim, families, candidates) to settle."""
    out = []
    for d in (128, 64):
        for dtype in ("bfloat16", "float32"):
            half = dtype != "float32"
            out.append(
                (
                    f"fwd plain {dtype} D={d}",
                    "fwd",
                    dtype,
                    d,
                    FAMILIES["plain"],
                    HALF_FWD if half else FP32_FWD,
                )
            )
            out.append(
                (
                    f"fwd value {dtype} D={d}",
                    "fwd",
                    dtype,
                    d,
                    FAMILIES["value"],
                    VALUE_FWD if half else FP32_FWD,
                )
            )
            out.append(
                (
                    f"bwd {dtype} D={d}",
                    "bwd",
                    dtype,
                    d,
                    FAMILIES["plain"] + FAMILIES["value"],
                    HALF_BWD if half else FP32_BWD,
                )
            )
    return out


def _passes(direction, dtype, d, families, tiles, target, pool) -> tuple[bool, str]:
    cap = TARGETS[target]
    jobs = []
    causal_only = {f.name for f in DECLARED.values() if f.needs_causal}
    for family in families:
        for causal in (True,) if family in causal_only else (False, True):
            key = "fwd_tiles" if direction == "fwd" else "bwd_tiles"
            spec = Spec("relbias", family, dtype=dtype, head_dim=d, causal=causal, **{key: tiles})
            jobs += [(family, causal, j) for j in capture(spec, cap)]
    results = list(pool.map(compile_job, [j for _, _, j in jobs]))
    worst = 0
    for (family, causal, job), res in zip(jobs, results, strict=True):
        row = dict(res, dtype=dtype, default_tiles=True, kernel=job["name"], family=family)
        why = problems(row, cap)
        if why:
            return False, f"{family} causal={causal} {job['name']}: {why}"
        worst = max(worst, res["registers"])
    return True, f"max {worst} registers, no spill in a key loop"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sm_90a,sm_80")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with ProcessPoolExecutor(args.jobs) as pool:
        for target in args.targets.split(","):
            for label, direction, dtype, d, families, candidates in _groups():
                for tiles in candidates:
                    ok, why = _passes(direction, dtype, d, families, tiles, target, pool)
                    print(f"{target} {label}: {tiles} {'OK' if ok else 'no'} ({why})", flush=True)
                    if ok:
                        break


if __name__ == "__main__":
    main()
