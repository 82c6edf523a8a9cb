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
or a half-precision attention dot on sm_90a without wgmma; candidate tiles that spill are
reported, not fatal. Writes results/gpu-compile/triton-<version>.{csv,md}.

    python -m bench.gpu_compile [--targets sm_90a,sm_80] [--jobs 2] [--out DIR] [--only rope]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import itertools
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

TARGETS = {"sm_90a": 90, "sm_80": 80}
SHARED_LIMIT = {90: 232448, 80: 166912}  # bytes of shared memory one block may use
SM_SHARED = {90: 233472, 80: 167936}  # per multiprocessor
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
COLUMNS = (
    "kernel",
    "target",
    "triton",
    "family",
    "dtype",
    "head_dim",
    "causal",
    "variant",
    "tiles",
    "default_tiles",
    "num_warps",
    "num_stages",
    "registers",
    "stack_bytes",
    "spill_stores",
    "spill_loads",
    "shared_bytes",
    "blocks_per_sm",
    "dots",
    "wgmma_dots",
    "mma_dots",
    "tensor_core_insts",
    "vector_global_insts",
    "narrow_global_insts",
    "atomics",
    "compile_s",
    "problem",
)


@dataclass(frozen=True)
class Spec:
    """One launcher call: RoPE (variant: layout / pairs / rotary / positions) or attention."""

    kernel: str  # "rope" | "relbias"
    family: str = ""  # relbias: alibi, t5, shaw, shaw_kv
    dtype: str = "bfloat16"
    head_dim: int = 128
    causal: bool = False
    layout: str = "bshd"
    interleaved: bool = False
    rotary: str = "full"  # full | partial (a quarter of D, GPT-NeoX style)
    positions: str = "none"  # none | per_seq | ids
    fwd_tiles: tuple | None = None  # a candidate (not the launcher's default)
    bwd_tiles: tuple | None = None

    @property
    def variant(self) -> str:
        if self.kernel == "rope":
            pairs = "interleaved" if self.interleaved else "half-split"
            return f"{self.layout} {pairs} {self.rotary} pos={self.positions}"
        return "candidate" if self.fwd_tiles or self.bwd_tiles else "default"


def specs(only: str | None = None) -> list[Spec]:
    """What `make gpu-check` and `sweep=gpu` launch: a curated cover of the axes (each value
    at least once, the sweep's shapes in full), not their product."""
    rope = [Spec("rope")]  # Llama-like: B=8, L=4096, Hq=32, Hk=8, D=128, bf16, bshd
    rope += [Spec("rope", dtype=d) for d in ("float16", "float32")]
    rope += [
        Spec("rope", layout="bhsd"),
        Spec("rope", interleaved=True),
        Spec("rope", interleaved=True, layout="bhsd"),
        Spec("rope", rotary="partial"),
        Spec("rope", positions="per_seq"),
        Spec("rope", positions="ids"),
        Spec("rope", head_dim=64),
    ]
    families = ("alibi", "t5", "shaw", "shaw_kv")
    attn = [Spec("relbias", f, causal=c) for f in families for c in (False, True)]
    attn += [Spec("relbias", f, dtype=d) for f in families for d in ("float16", "float32")]
    attn += [Spec("relbias", f, head_dim=64) for f in families]
    out = [s for s in rope + attn if only in (None, s.kernel)]
    return out


def tile_candidates() -> list[Spec]:
    """The tuning sweep's candidates (configs/sweep/gpu_tiles.yaml), on the H100/H200 only."""
    import yaml

    grids = yaml.safe_load(Path("configs/sweep/gpu_tiles.yaml").read_text())["grids"]
    fwd = next(g["fwd_tiles"] for g in grids if "fwd_tiles" in g)
    bwd = next(g["bwd_tiles"] for g in grids if "bwd_tiles" in g)
    out = []
    for family in ("alibi", "shaw_kv"):
        out += [Spec("relbias", family, fwd_tiles=_tiles(t)) for t in fwd]
        out += [Spec("relbias", family, bwd_tiles=_tiles(t)) for t in bwd]
    return out


def _tiles(text: str) -> tuple:
    from bench.tiles import parse_tiles

    return tuple(parse_tiles(text))


# -- capture: the launchers, on meta tensors -------------------------------------------------


@contextlib.contextmanager
def recording(capability: int):
    """JITFunction.run records instead of launching; the GPU is `capability`."""
    from triton.runtime.jit import JITFunction

    launches = []

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    run, cap = JITFunction.run, torch.cuda.get_device_capability
    JITFunction.run = record
    torch.cuda.get_device_capability = lambda device=None: divmod(capability, 10)
    try:
        yield launches
    finally:
        JITFunction.run, torch.cuda.get_device_capability = run, cap


def _meta(*shape, dtype=torch.float32, grad=False):
    return torch.empty(*shape, dtype=dtype, device="meta", requires_grad=grad)


def _launch_rope(spec: Spec) -> None:
    """kernels.rope's launcher, forward and backward, at the Llama-like shape."""
    from kernels import rope

    dtype = getattr(torch, spec.dtype)
    b, n, hq, hk, d = 8, 4096, 32, 8, spec.head_dim
    rot = d if spec.rotary == "full" else d // 4
    shape = (lambda h: (b, n, h, d)) if spec.layout == "bshd" else (lambda h: (b, h, n, d))
    q, k = _meta(*shape(hq), dtype=dtype), _meta(*shape(hk), dtype=dtype)
    if spec.layout == "bhsd":
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # the launcher sees (B, L, H, D) views
    cos, sin = _meta(n, rot // 2), _meta(n, rot // 2)
    pos = {
        "none": None,
        "per_seq": _meta(b, dtype=torch.int64),
        "ids": _meta(b, n, dtype=torch.int64),
    }[spec.positions]
    for backward in (False, True):
        rope._launch(
            q,
            k,
            torch.empty_like(q),
            torch.empty_like(k),
            cos,
            sin,
            pos,
            0,
            spec.interleaved,
            backward,
        )


def _launch_relbias(spec: Spec) -> None:
    """kernels.relative_attention forward and backward (its autograd Function), at the GPU
    sweep's shape: B=4, H=16, L=4096."""
    from kernels import relbias

    dtype = getattr(torch, spec.dtype)
    b, h, n, d = 4, 16, 4096, spec.head_dim
    q, k, v = (_meta(b, h, n, d, dtype=dtype, grad=True) for _ in range(3))
    kwargs = {
        "alibi": lambda: {"alibi_slopes": _meta(h)},
        "t5": lambda: {"t5_table": _meta(32, h, grad=True)},
        "shaw": lambda: {"shaw_bias": _meta(h, 33, grad=True)},
        "shaw_kv": lambda: {"shaw_k": _meta(33, d, grad=True), "shaw_v": _meta(33, d, grad=True)},
    }[spec.family]()
    tiles = {
        "fwd_tiles": spec.fwd_tiles and relbias.Tiles(*spec.fwd_tiles),
        "bwd_tiles": spec.bwd_tiles and relbias.Tiles(*spec.bwd_tiles),
    }
    out = relbias.relative_attention(q, k, v, causal=spec.causal, **kwargs, **tiles)
    if spec.fwd_tiles is None:  # a forward candidate: its backward is the default's
        torch.autograd.grad(out, [q, k, v], torch.empty_like(out))


def capture(spec: Spec, capability: int) -> list[dict]:
    """The launches of one spec, specialized for the target: plain data a worker compiles."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    with recording(capability) as launches:
        (_launch_rope if spec.kernel == "rope" else _launch_relbias)(spec)
    jobs = []
    for fn, args, kwargs in launches:
        if spec.kernel == "relbias" and spec.bwd_tiles and "fwd" in fn.__name__:
            continue  # a backward candidate: its forward is the default's
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        bound, specialization, opts = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(
            backend, kwargs, bound, specialization, opts
        )
        jobs.append(
            dict(
                module=fn.fn.__module__,
                name=fn.__name__,
                signature=signature,
                constexprs={k: _plain(v) for k, v in constexprs.items()},
                attrs=attrs,
                options=dict(options.__dict__),
                capability=capability,
                block=(kwargs.get("BLOCK_M"), kwargs.get("BLOCK_N")),
            )
        )
    return jobs


def plan_launches(plan, capability: int = 90) -> dict[str, int]:
    """Distinct Triton compiles per kernel that the `triton` rows of a harness plan launch on a
    GPU of `capability`: each row's call (and its gradient, in the backward modes) run on meta
    tensors at its real shape, every launch bound by Triton's binder as the JIT keys it."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    from bench.cases import CASES
    from bench.config.schema import DTYPES
    from bench.run import check
    from bench.run.tasks import Task, leaves_of, make_call, run_for_check

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("plan_launches records the JIT's launches: unset TRITON_INTERPRET")
    meta = torch.device("meta")
    with recording(capability) as launches, _rope_launches_on_meta():
        for entry in plan.entries:
            case = CASES[entry.case]
            if "triton" not in entry.impls:
                continue
            for point, mode, dtype in itertools.product(entry.points, entry.modes, entry.dtypes):
                if case.check(point) or case.impls["triton"].supports(point):
                    continue
                inputs = case.build(point, meta, DTYPES[dtype])
                for t in check.leaves(inputs, case.grad_inputs).values():
                    t.requires_grad_(mode != "forward")
                task = Task(case, "triton", mode, point, meta, DTYPES[dtype])
                call = make_call(task, inputs)
                leaves = leaves_of(call, inputs, case)
                outs = tuple(torch.empty_like(o) for o in _as_tuple(call.fn()))
                run_for_check(call, leaves, task.grad, outs if task.grad else None)
    backend = make_backend(GPUTarget("cuda", capability, 32))
    keys: dict[str, set[str]] = {}
    for fn, args, kwargs in launches:
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        _bound, specialization, options = binder(*args, **kwargs)
        keys.setdefault(fn.__name__, set()).add(repr((specialization, options)))
    return {name: len(v) for name, v in sorted(keys.items())}


@contextlib.contextmanager
def _rope_launches_on_meta():
    """kernels.rope's custom ops describe meta outputs without launching: for the recorder,
    the ops launch (into empty outputs) as they do on a GPU."""
    from kernels import rope

    def launching(q, k, cos, sin, pos, offset, interleaved, backward):
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        rope._launch(q, k, q_out, k_out, cos, sin, pos, offset, interleaved, backward)
        return q_out, k_out

    def launching_inplace(q, k, cos, sin, pos, offset, interleaved, backward):
        rope._launch(q, k, q, k, cos, sin, pos, offset, interleaved, backward)

    saved = rope._rope_op, rope._rope_inplace_op
    rope._rope_op, rope._rope_inplace_op = launching, launching_inplace
    try:
        yield
    finally:
        rope._rope_op, rope._rope_inplace_op = saved


def _as_tuple(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _plain(value):
    return getattr(value, "value", value)  # tl.constexpr -> its value (picklable)


# -- compile and read ------------------------------------------------------------------------


def compile_job(job: dict) -> dict:
    """Compile one specialization (in a worker process) and read its cubin and TTGIR."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(job["module"]), job["name"])
    target = GPUTarget("cuda", job["capability"], 32)
    t0 = time.perf_counter()
    try:
        src = ASTSource(fn, job["signature"], job["constexprs"], job["attrs"])
        compiled = triton.compile(src, target=target, options=job["options"])
    except Exception as exc:  # a compile error is a finding, not a crash
        return {"problem": f"compile error: {type(exc).__name__}: {str(exc)[:200]}"}
    seconds = time.perf_counter() - t0
    return dict(
        read_cubin(compiled.asm["cubin"]),
        **read_ttgir(compiled.asm["ttgir"]),
        shared_bytes=compiled.metadata.shared,
        compile_s=round(seconds, 1),
    )


def read_cubin(cubin: bytes) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = _tool("cuobjdump", "--dump-resource-usage", f.name)
        sass = _tool("cuobjdump", "-sass", f.name)
    regs = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    return dict(
        registers=int(regs.group(1)) if regs else None,
        stack_bytes=int(stack.group(1)) if stack else None,
        spill_stores=sum(op.startswith("STL") for op in ops),
        spill_loads=sum(op.startswith("LDL") for op in ops),
        tensor_core_insts=sum(op.startswith(("HGMMA", "HMMA")) for op in ops),
        vector_global_insts=sum(op.startswith(("LDG", "STG")) and ".128" in op for op in ops),
        narrow_global_insts=sum(
            op.startswith(("LDG", "STG")) and (".U16" in op or ".S16" in op) for op in ops
        ),
    )


def read_ttgir(ttgir: str) -> dict:
    """Dots after layout assignment: wgmma (warp_group_dot, sm_90a), mma (tt.dot with an
    nvidia_mma encoding, sm_80's mma.sync), or neither (FMA: float32 IEEE dots)."""
    wgmma = len(re.findall(r"ttng\.warp_group_dot ", ttgir))
    plain = re.findall(r"= tt\.dot .*", ttgir)
    mma = sum("#mma" in line for line in plain)
    atomics = len(re.findall(r"tt\.atomic_(?:rmw|cas)", ttgir))
    return dict(dots=wgmma + len(plain), wgmma_dots=wgmma, mma_dots=mma, atomics=atomics)


def _tool(name: str, *args: str) -> str:
    return subprocess.run(
        [str(BIN / name), *args], capture_output=True, text=True, check=True
    ).stdout


def blocks_per_sm(registers: int, warps: int, shared: int, capability: int) -> int:
    """Resident blocks per multiprocessor: registers (allocated per warp in units of 256),
    shared memory, 64 warps and 32 blocks per SM."""
    per_warp = -(-registers * 32 // 256) * 256
    by_regs = 65536 // (per_warp * warps) if registers else 32
    by_shared = SM_SHARED[capability] // (shared + 1024) if shared else 32  # 1 KiB reserved
    return min(by_regs, by_shared, 64 // warps, 32)


def problems(row: dict, capability: int) -> str:
    """Why a row fails the audit ("" if it does not)."""
    if row.get("problem"):
        return row["problem"]
    found = []
    if row.get("atomics"):  # the table gradients promise determinism
        found.append(f"{row['atomics']} atomic operation(s)")
    if row["shared_bytes"] > SHARED_LIMIT[capability]:
        found.append(f"shared memory {row['shared_bytes']} > {SHARED_LIMIT[capability]}")
    if row["default_tiles"]:
        if row["spill_stores"] or row["spill_loads"]:
            found.append(f"spills ({row['spill_stores']} local stores)")
        half = row["dtype"] in ("bfloat16", "float16")
        if capability == 90 and half and row["dots"] > row["wgmma_dots"]:
            found.append(f"{row['dots'] - row['wgmma_dots']} dot(s) without wgmma")
    return "; ".join(found)


# -- the table -------------------------------------------------------------------------------


def rows_for(spec: Spec, target: str, jobs: list[dict], results: list[dict]) -> list[dict]:
    capability = TARGETS[target]
    out = []
    for job, res in zip(jobs, results, strict=True):
        names = list(job["signature"])
        c = {names[path[0]]: v for path, v in job["constexprs"].items() if len(path) == 1}
        o = job["options"]
        block_m, block_n = job["block"]
        kernel = job["name"] + (" (backward)" if c.get("BACKWARD") else "")
        row = dict(
            kernel=kernel,
            target=target,
            triton=triton.__version__,
            family=spec.family,
            dtype=spec.dtype,
            head_dim=spec.head_dim,
            causal=spec.causal,
            variant=spec.variant,
            tiles=(
                f"{block_m}x{block_n}"
                if block_m
                else f"heads {c.get('BLOCK_HQ')}+{c.get('BLOCK_HK')}"
            ),
            default_tiles=spec.fwd_tiles is None and spec.bwd_tiles is None,
            num_warps=o.get("num_warps"),
            num_stages=o.get("num_stages"),
        )
        row.update({k: v for k, v in res.items() if k != "problem"})
        if "registers" in res:
            row["blocks_per_sm"] = blocks_per_sm(
                res["registers"], row["num_warps"], res["shared_bytes"], capability
            )
        row["problem"] = problems(dict(row, problem=res.get("problem")), capability)
        out.append(row)
    return out


def markdown(rows: list[dict]) -> str:
    version = triton.__version__
    bad = [r for r in rows if r["problem"] and r["default_tiles"]]
    lines = [
        f"# Kernel resources: Triton {version}, compiled on the CPU",
        "",
        "Command: `python -m bench.gpu_compile` (`make gpu-compile`). Every specialization "
        "`make gpu-check` and `sweep=gpu` launch at their shapes (RoPE: B=8, L=4096, Hq=32, "
        "Hk=8; attention: B=4, H=16, L=4096), specialized as Triton's JIT would on that GPU, "
        "read from the cubin with cuobjdump. `stack`: local-memory frame per thread; "
        "`STL/LDL`: spill stores and loads in the SASS; `wgmma`/`mma`: dots lowered to "
        "Hopper's warpgroup MMA or to mma.sync (of all dots; float32 dots are IEEE FMA by "
        "design); `TC`: tensor-core instructions; `LDG/STG.128`: 16-byte global accesses "
        "(`16-bit`: two-byte ones).",
        "",
        f"{len(rows)} kernels; problems at default tiles: {len(bad)}.",
        "",
        "| kernel | target | family | dtype | D | causal | variant | tiles | warps | stages "
        "| regs | stack | STL/LDL | shared KiB | blocks/SM | dots (wgmma, mma) | TC "
        "| LDG/STG.128 | 16-bit | problem |",
        "|" + "---|" * 20,
    ]
    for r in rows:
        dots = f"{r.get('dots', '')} ({r.get('wgmma_dots', '')}, {r.get('mma_dots', '')})"
        shared = f"{r['shared_bytes'] / 1024:.0f}" if r.get("shared_bytes") is not None else ""
        spills = f"{r.get('spill_stores', '')}/{r.get('spill_loads', '')}"
        cells = [
            r["kernel"].removeprefix("_"),
            r["target"],
            r["family"],
            r["dtype"],
            r["head_dim"],
            r["causal"],
            r["variant"],
            r["tiles"],
            r["num_warps"],
            r["num_stages"],
            r.get("registers", ""),
            r.get("stack_bytes", ""),
            spills,
            shared,
            r.get("blocks_per_sm", ""),
            dots,
            r.get("tensor_core_insts", ""),
            r.get("vector_global_insts", ""),
            r.get("narrow_global_insts", ""),
            r["problem"],
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def compare(before: Path, after: Path) -> str:
    """Two audits' CSVs side by side for the default specializations both have (matched on
    kernel, target, family, dtype, head dim, causal and variant): tiles, registers, stack,
    spill stores, wgmma dots and 128-bit accesses, before -> after."""
    import pandas as pd

    key = ["kernel", "target", "family", "dtype", "head_dim", "causal", "variant"]
    shown = [
        "tiles",
        "registers",
        "stack_bytes",
        "spill_stores",
        "wgmma_dots",
        "vector_global_insts",
    ]
    a, b = (pd.read_csv(p, keep_default_na=False, dtype=str) for p in (before, after))
    a, b = (df[df["default_tiles"] == "True"] for df in (a, b))
    both = a.merge(b, on=key, suffixes=("_a", "_b"))
    lines = [
        "| kernel | target | family | dtype | D | causal | variant | tiles | regs | stack "
        "| STL | wgmma dots | 128-bit |",
        "|" + "---|" * 13,
    ]
    for _, r in both.iterrows():
        pairs = [
            r[c + "_a"] if r[c + "_a"] == r[c + "_b"] else f"{r[c + '_a']} -> {r[c + '_b']}"
            for c in shown
        ]
        lines.append("| " + " | ".join([*(r[k] for k in key), *pairs]) + " |")
    spills = [int((df["spill_stores"].astype(int) > 0).sum()) for df in (a, b)]
    return (
        f"Default specializations in both: {len(both)}; spilling: {spills[0]} -> "
        f"{spills[1]}.\n\n" + "\n".join(lines) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sm_90a,sm_80", help="comma-separated: sm_90a, sm_80")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    parser.add_argument("--out", type=Path, default=Path("results/gpu-compile"))
    parser.add_argument("--only", choices=("rope", "relbias"), default=None)
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
    if not args.no_candidates and "sm_90a" in targets and args.only != "rope":
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
    bad = [
        r
        for r in rows
        if r["problem"]
        and (r["default_tiles"] or "compile" in r["problem"] or "shared" in r["problem"])
    ]
    print(
        f"{len(rows)} kernels compiled in {time.perf_counter() - start:.0f} s "
        f"({args.jobs} processes) -> {stem}.md"
    )
    for r in bad:
        print(
            f"PROBLEM {r['kernel']} {r['target']} {r['family']} {r['dtype']} D={r['head_dim']} "
            f"causal={r['causal']} {r['variant']} {r['tiles']}: {r['problem']}"
        )
    return 1 if bad else 0
