"""The GPU run's harness kernels compiled here for the box, carried as a warm Triton cache.

    make gpu-cache   # .venv-compat/bin/python -m tools.gpurun.warm -> .triton-cache/cache.tgz

Each part of the GPU run that runs `python -m bench` is replayed in a process of its own, as on
the box: its plan's `triton` launches recorded on meta tensors (tools/audit/capture.py), then
run through Triton's own JIT in that order with a driver that answers sm_90a and compiles
without launching (`warmup=True`), under the box's Triton and Python (.venv-compat). Why the
JIT and not `triton.compile` from a list: a kernel's cache key depends on which kernels its
process hashed before it (Triton 3.6's `DependenciesFinder` merges a callee's global constants
before it hashes the callee), so only the same launches in the same order in a fresh process
give the keys the box computes. The archive keeps what a hit loads (cubins, metadata, group
files). The GPU run unpacks it into its own cache (`unpack`), pointing each group file at where
its files now lie: Triton names them by absolute path (triton/runtime/cache.py, `get_group`).
After packing, every part is replayed again on the unpacked archive and its misses counted.

What no check here can see: whether the box's Triton is this build (the key hashes
libtriton.so), its ptxas, its TRITON_* variables. The GPU run's status line per part counts the
kernels it compiled: what missed. The kernel tests' launches are not carried (pytest's workers
each hash in their own order). Standard library only at import: the GPU run's driver imports
`unpack` before anything it carries is unpacked.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tools.gpurun.parts import PARTS

ROOT = Path(__file__).resolve().parents[2]
CARRIED = ROOT / ".triton-cache" / "cache.tgz"
KEEP = (".cubin", ".json")  # a hit loads the binary and the metadata its group file lists
BOX_TRITON = "3.6.0"
SWEEPS = [p.name for p in PARTS if p.argv[:2] == ("-m", "bench")]


def unpack_wheels(wheels: list[Path], site: Path) -> None:
    """Pure-Python wheels unpacked into `site`: on the path, they are installed."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)


def pack(cache: Path, out: Path) -> int:
    """The cache's cubins and metadata into `out` (a .tgz); returns the kernels packed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    entries = sorted(d for d in cache.iterdir() if d.is_dir())
    with tarfile.open(tmp, "w:gz") as tar:
        for entry in entries:
            for f in sorted(entry.iterdir()):
                if f.name.endswith(KEEP):
                    tar.add(f, arcname=f"{entry.name}/{f.name}")
    tmp.replace(out)
    return len(entries)


def compiled_kernels(cache: Path) -> int:
    """Kernels compiled into `cache`: each compile writes its TTIR, which no archive carries (a
    compile into a carried entry's folder counts too)."""
    return sum(1 for _ in cache.glob("*/*.ttir")) if cache.is_dir() else 0


def unpack(archive: Path, cache: Path) -> int:
    """`pack`'s archive into `cache`, each group file pointed at its files' new place and
    listing only those carried (newer Tritons miss a group with a file absent); returns the
    kernels unpacked."""
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    groups = list(cache.glob("*/__grp__*.json"))
    for group in groups:
        data = json.loads(group.read_text())
        moved = {k: group.parent / Path(p).name for k, p in data.get("child_paths", {}).items()}
        data["child_paths"] = {k: str(p) for k, p in moved.items() if p.exists()}
        group.write_text(json.dumps(data))
    return len(groups)


def replay(name: str) -> None:
    """One part's `triton` launches through Triton's JIT for sm_90a, compiled, not launched."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from tools.audit.capture import record_plan
    from tools.gpurun.estimate import plan_of

    class Sm90:  # what the JIT asks of the driver before it compiles
        def get_current_device(self):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_current_stream(self, device=None):
            return 0

        def get_active_torch_device(self):
            return torch.device("cuda", 0)

    part = next(p for p in PARTS if p.name == name)
    launches = record_plan(plan_of(part.argv)[0])
    driver.set_active(Sm90())
    for fn, args, kwargs, grid in launches:
        JITFunction.run(fn, *args, grid=grid, warmup=True, **kwargs)


def _replay_in_process(name: str, cache: Path, site: Path) -> int:
    """`replay(name)` in a fresh process on `cache`; returns the kernels it compiled."""
    before = compiled_kernels(cache)
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache))
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "tools.gpurun.warm", "--replay", name]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"replay of {name} failed:\n{proc.stderr[-3000:]}")
    return compiled_kernels(cache) - before


def build(out: Path, workers: int, site: Path, names: list[str]) -> dict[str, int]:
    """Every part replayed into a fresh cache, packed into `out`, then replayed again, one
    part at a time, on the unpacked archive: {part: kernels it would still compile}."""
    with tempfile.TemporaryDirectory(prefix="gpurun-cache-") as work:
        cold, warm = Path(work) / "cold", Path(work) / "warm"
        cold.mkdir()
        with ThreadPoolExecutor(workers) as pool:  # each replay its own process
            list(pool.map(lambda n: _replay_in_process(n, cold, site), names))
        pack(cold, out)
        unpack(out, warm)
        return {name: _replay_in_process(name, warm, site) for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpurun.warm", description=__doc__)
    parser.add_argument("--out", type=Path, default=CARRIED, help=f"default {CARRIED}")
    parser.add_argument("--jobs", type=int, default=2, help="parts replayed at once (default 2)")
    parser.add_argument("--parts", default=",".join(SWEEPS), help="default: every sweep part")
    parser.add_argument("--replay", metavar="PART", help=argparse.SUPPRESS)  # one process's
    args = parser.parse_args(argv)
    if args.replay:
        replay(args.replay)
        return 0
    names = args.parts.split(",")
    for name in names:
        if name not in SWEEPS:
            parser.error(f"--parts: {name!r} is not a sweep part; choose from {SWEEPS}")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    import triton

    if triton.__version__ != BOX_TRITON:
        print(f"warning: Triton {triton.__version__}; the box runs {BOX_TRITON}: no key will hit")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpurun-site-") as site:  # hydra, as on the box
        unpack_wheels(sorted((ROOT / ".whl").glob("*.whl")), Path(site))
        misses = build(args.out, args.jobs, Path(site), names)
    with tarfile.open(args.out) as tar:
        kernels = len({m.name.split("/")[0] for m in tar.getmembers()})
    print(
        f"{kernels} kernels for sm_90a (Triton {triton.__version__}, Python "
        f"{sys.version.split()[0]}) in {time.perf_counter() - start:.0f} s -> {args.out} "
        f"({args.out.stat().st_size / 2**20:.1f} MiB); replayed on it, kernels each part would "
        f"still compile: {misses}"
    )
    return 1 if any(misses.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
