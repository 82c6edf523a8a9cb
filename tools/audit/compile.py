"""One captured specialization compiled (in a worker process) and read: registers and stack from
`cuobjdump --dump-resource-usage`, spills, tensor-core and 128-bit accesses from the SASS, which
dots became wgmma (sm_90a) or mma (sm_80) from the TTGIR; and the audit's rules on them."""

from __future__ import annotations

import importlib
import re
import subprocess
import tempfile
import time
from pathlib import Path

import triton

FP32_OPS = ("FADD", "FMUL", "FFMA", "FMNMX", "FSEL", "FSETP", "I2F")
SHARED_LIMIT = {90: 232448, 80: 166912}  # bytes of shared memory one block may use
SM_SHARED = {90: 233472, 80: 167936}  # per multiprocessor
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


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
        loop_sass=" ".join("/".join(str(n) for n in lp) for lp in sass_loops(sass)),
        loop_inner=" ".join(str(n) for n in sass_inner(sass)),
        loop_mma=" ".join(sass_mma(sass)),
        registers=int(regs.group(1)) if regs else None,
        stack_bytes=int(stack.group(1)) if stack else None,
        spill_stores=sum(op.startswith("STL") for op in ops),
        spill_loads=sum(op.startswith("LDL") for op in ops),
        loop_spills=sum(sass_loop_spills(sass)),
        tensor_core_insts=sum(op.startswith(("HGMMA", "HMMA")) for op in ops),
        # the CUDA cores' float work beside the tensor cores (static counts, the whole kernel):
        # adds, multiplies, FMAs, min/max, selects, compares, int-to-float; and MUFU (exp2)
        fp32_insts=sum(op.startswith(FP32_OPS) for op in ops),
        mufu_insts=sum(op.startswith("MUFU") for op in ops),
        vector_global_insts=sum(op.startswith(("LDG", "STG")) and ".128" in op for op in ops),
        narrow_global_insts=sum(
            op.startswith(("LDG", "STG")) and (".U16" in op or ".S16" in op) for op in ops
        ),
    )


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)([^;]*);")
_TENSOR = ("HGMMA", "HMMA")


def _backward_branches(code: list[tuple]) -> list[tuple[int, int]]:
    """(target, branch) address of every backward branch: a loop's span."""
    out = []
    for addr, op, rest in code:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target is not None and int(target.group(1), 16) < addr:
            out.append((int(target.group(1), 16), addr))
    return out


def _tensor_loops(sass: str) -> list[tuple[list[tuple], int]]:
    """Each loop holding a tensor-core instruction, in address order: its body (address, op,
    operands) and the instructions of the loops nested in it (one iteration of each)."""
    code = [(int(a, 16), op, rest) for a, op, rest in _INSTRUCTION.findall(sass)]
    spans = _backward_branches(code)
    out = []
    for start, end in spans:
        body = [c for c in code if start <= c[0] <= end]
        if any(op.startswith(_TENSOR) for _, op, _ in body):
            inner = sum(
                sum(1 for c in body if s <= c[0] <= e) for s, e in spans if start < s and e < end
            )
            out.append((body, inner))
    return out


def sass_loops(sass: str) -> list[tuple[int, int, int, int]]:
    """Each tensor-core loop of the SASS, in address order, as what one iteration issues per
    thread: (instructions, FP32 instructions, MUFU instructions, tensor-core instructions). A
    loop is the span from a backward branch's target to the branch; one that holds another such
    loop counts its inner loop once (`sass_inner` says how many of them are the inner loop's:
    tools/audit/model.py multiplies those by the inner loop's trips)."""
    out = []
    for body, _ in _tensor_loops(sass):
        ops = [op for _, op, _ in body]
        out.append(
            (
                len(ops),
                sum(o.startswith(FP32_OPS) for o in ops),
                sum(o.startswith("MUFU") for o in ops),
                sum(o.startswith(_TENSOR) for o in ops),
            )
        )
    return out


def sass_inner(sass: str) -> list[int]:
    """Per tensor-core loop, the instructions of the loops nested in it (0: none)."""
    return [inner for _, inner in _tensor_loops(sass)]


def sass_loop_spills(sass: str) -> list[int]:
    """Per tensor-core loop, its local-memory stores and loads: a spill there is paid every
    iteration, where one before or after the key loops (a few words a program) is not."""
    return [
        sum(op.startswith(("STL", "LDL")) for _, op, _ in body) for body, _ in _tensor_loops(sass)
    ]


def sass_mma(sass: str) -> list[str]:
    """Per tensor-core loop, its Hopper MMAs as `count x N` and where the A operand comes from
    (r: registers, s: shared memory), e.g. "8x64s+4x128r": what the cost model charges (an
    m64nNk16 keeps the tensor cores N / 2 cycles, or longer while its operands stream from
    shared memory). sm_80's mma.sync (HMMA) is listed as "count x mma"."""
    out = []
    for body, _ in _tensor_loops(sass):
        shapes: dict[str, int] = {}
        for _, op, rest in body:
            wgmma = re.match(r"HGMMA\.\d+x(\d+)x\d+\S*\s+[^,]+,\s*(\S)", op + rest)
            if wgmma:  # HGMMA.64xNx16.F32.BF16 D, A, B, C
                key = wgmma.group(1) + ("r" if wgmma.group(2) == "R" else "s")
            elif op.startswith("HMMA"):
                key = "mma"
            else:
                continue
            shapes[key] = shapes.get(key, 0) + 1
        out.append("+".join(f"{c}x{k}" for k, c in shapes.items()))
    return out


def read_ttgir(ttgir: str) -> dict:
    """Dots after layout assignment: wgmma (warp_group_dot, sm_90a), mma (tt.dot with an
    nvidia_mma encoding, sm_80's mma.sync), or neither (FMA); the loops that hold dots and how
    many of them the software pipeliner took (async copies into multi-buffered shared memory
    inside the loop, and on sm_90a async wgmma), and how many hold an inner loop (which the
    pipeliner skips); exp2 against exp (a softmax in base 2 saves a multiply per score)."""
    wgmma = len(re.findall(r"ttng\.warp_group_dot ", ttgir))
    plain = re.findall(r"= tt\.dot .*", ttgir)
    mma = sum("#mma" in line for line in plain)
    atomics = len(re.findall(r"tt\.atomic_(?:rmw|cas)", ttgir))
    loops = [lp for lp in _loops(ttgir, _wgmma_widths(ttgir)) if lp["dots"]]
    widths = [n for lp in loops for n in lp["wgmma_n"]]
    return dict(
        loop_wgmma=" ".join(f"m64n{n}" for n in sorted(set(widths))),
        narrow_wgmma=sum(n <= NARROW_N for n in widths),
        dots=wgmma + len(plain),
        wgmma_dots=wgmma,
        mma_dots=mma,
        atomics=atomics,
        dot_loops=len(loops),
        pipelined_loops=sum(lp["pipelined"] for lp in loops),
        nested_loops=sum(lp["inner"] > 0 for lp in loops),
        fma_loop_dots=sum(lp["fma"] for lp in loops),
        exp2=len(re.findall(r"math\.exp2 ", ttgir)),
        exp=len(re.findall(r"math\.exp ", ttgir)),
    )


# A wgmma this narrow (N columns) in a loop takes 4-8x the instructions of one of 64-128 for
# the same product, each reading its A operand again: the backward's score products at 32 x 64
# tiles on 8 warps (one m64n16 a warp group).
NARROW_N = 16


def _wgmma_widths(ttgir: str) -> dict[str, int]:
    """N of each Hopper MMA layout of the TTGIR (#mma = #ttg.nvidia_mma<{versionMajor = 3, ...
    instrShape = [16, N, 16]}>: per warp 16 rows, so a warp group's wgmma is m64nNk16)."""
    pattern = r"^(#mma\d*) = #ttg\.nvidia_mma<\{versionMajor = 3.*instrShape = \[\d+, (\d+), \d+\]"
    return {m.group(1): int(m.group(2)) for m in re.finditer(pattern, ttgir, re.M)}


def _loops(ttgir: str, widths: dict[str, int]) -> list[dict]:
    """Every scf.for of the TTGIR with what its body holds: dots, inner loops, the N of each
    wgmma (widths: the layouts'), and whether it is pipelined (async global-to-shared copies in
    it; its wgmma, if any, asynchronous)."""
    lines = ttgir.splitlines()
    out, open_loops = [], []  # [first line, brace depth]
    for i, line in enumerate(lines):
        if re.search(r"\bscf\.for\b", line):
            open_loops.append([i, 0])
        for lp in open_loops:
            lp[1] += line.count("{") - line.count("}")
        while open_loops and open_loops[-1][1] <= 0 and i > open_loops[-1][0]:
            start, _ = open_loops.pop()
            body = "\n".join(lines[start : i + 1])
            wg = re.findall(r"ttng\.warp_group_dot .*", body)
            plain = re.findall(r"= tt\.dot .*", body)
            dots = len(wg) + len(plain)
            copies = body.count("ttg.async_copy_global_to_local")
            out.append(
                dict(
                    dots=dots,
                    inner=len(re.findall(r"\bscf\.for\b", body)) - 1,
                    fma=sum("#mma" not in line for line in plain),
                    wgmma_n=[
                        widths.get(m.group(1), 0)
                        for w in wg
                        if (m := re.search(r"-> tensor<[^>]*?(#mma\d*)>", w))
                    ],
                    pipelined=bool(copies) and all("isAsync = true" in w for w in wg),
                )
            )
    return out


def _tool(name: str, *args: str) -> str:
    return subprocess.run(
        [str(BIN / name), *args], capture_output=True, text=True, check=True
    ).stdout


def blocks_per_sm(registers: int, warps: int, shared: int, capability: int) -> int:
    """Resident blocks per multiprocessor, as the forward's split reads them (programs_per_sm)."""
    from posenc_kernels._relbias_grid import programs_per_sm  # here: model.py's old trees lack it

    sm = dict(regs=65536, shared=SM_SHARED[capability], threads=2048)
    return programs_per_sm(registers, warps, shared, sm)


def verdict(rows: list[dict]) -> list[dict]:
    """The rows that fail one audit: a problem at the default tiles, or a compile or
    shared-memory problem anywhere (a candidate that only spills is reported, not failed)."""
    return [
        r
        for r in rows
        if r["problem"]
        and (r["default_tiles"] or "compile" in r["problem"] or "shared" in r["problem"])
    ]


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
        spills = row["spill_stores"] or row["spill_loads"]
        if row.get("loop_spills"):
            found.append(f"spills in the key loops ({row['loop_spills']} local accesses)")
        elif spills and not row.get("dot_loops"):
            found.append(f"spills ({row['spill_stores']} local stores)")
        half = row["dtype"] in ("bfloat16", "float16")
        # a forward of 16 query rows (a decode step's few queries; wgmma's least M is 64 per
        # warp group, 4x the rows there are): mma, on a loop bound by the cache's bytes
        few_rows = "fwd" in row["kernel"] and row["tiles"].startswith("16x")
        if capability == 90 and half and not few_rows and row["dots"] > row["wgmma_dots"]:
            found.append(f"{row['dots'] - row['wgmma_dots']} dot(s) without wgmma")
        # float32 on tensor cores (3xTF32) and pipelined: the forward without Shaw's value term
        # (the rest keep IEEE dots: their 3xTF32 splits spill at every tile tried)
        forward = "fwd" in row["kernel"] and row["family"] != "shaw_kv"
        if not half and forward and row.get("fma_loop_dots"):  # float32: 3xTF32 on tensor cores
            found.append(f"{row['fma_loop_dots']} dot(s) of the key loops on the FMA units")
        if row["nested_loops"]:  # the pipeliner skips a loop that holds one
            found.append(f"{row['nested_loops']} key loop(s) holding a loop")
        narrow = row.get("narrow_wgmma") or 0
        if capability == 90 and half and narrow:
            found.append(f"{narrow} m64n16 wgmma in the key loops")
        flat = row["dot_loops"] - row["nested_loops"]  # loops the pipeliner can take
        if (
            capability == 90
            and (half or forward)  # float32 IEEE kernels: one masked loop on the FMA units
            and row["dot_loops"]
            and (not row["pipelined_loops"] or row["pipelined_loops"] < flat)
        ):
            found.append(
                f"not pipelined: {row['pipelined_loops']} of {row['dot_loops']} key loops "
                f"({row['nested_loops']} with an inner loop)"
            )
    return "; ".join(found)


# -- the table -------------------------------------------------------------------------------
