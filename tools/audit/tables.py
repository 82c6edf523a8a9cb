"""The audit's table: a row per compiled kernel (CSV columns, Markdown), and two audits
compared."""

from __future__ import annotations

from pathlib import Path

import triton

from bench.tables import markdown_table
from tools.audit.compile import blocks_per_sm, problems
from tools.audit.specs import TARGETS, Spec

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
    "loop_spills",
    "shared_bytes",
    "blocks_per_sm",
    "dots",
    "wgmma_dots",
    "mma_dots",
    "loop_wgmma",
    "loop_sass",
    "loop_inner",
    "loop_mma",
    "narrow_wgmma",
    "tensor_core_insts",
    "fp32_insts",
    "mufu_insts",
    "vector_global_insts",
    "narrow_global_insts",
    "atomics",
    "dot_loops",
    "pipelined_loops",
    "nested_loops",
    "exp2",
    "exp",
    "compile_s",
    "problem",
)


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


# the columns that say which kernel a row is, in both tables
SPEC_HEADER = ("kernel", "target", "family", "dtype", "D", "causal", "variant", "tiles")


def markdown(rows: list[dict]) -> str:
    version = triton.__version__
    bad = [r for r in rows if r["problem"] and r["default_tiles"]]
    lines = [
        f"# Kernel resources: Triton {version}, compiled on the CPU",
        "",
        "Command: `python -m tools.audit` (`make gpu-compile`). Every specialization "
        "`make gpu-check` and `sweep=gpu` launch at their shapes (RoPE: B=8, L=4096, Hq=32, "
        "Hk=8; attention: B=4, H=16, L=4096), specialized as Triton's JIT would on that GPU, "
        "read from the cubin with cuobjdump. `stack`: local-memory frame per thread; "
        "`STL/LDL`: spill stores and loads in the SASS; `wgmma`/`mma`: dots lowered to "
        "Hopper's warpgroup MMA or to mma.sync (of all dots; float32 dots are IEEE FMA by "
        "design); `TC`: tensor-core instructions; `LDG/STG.128`: 16-byte global accesses "
        "(`16-bit`: two-byte ones); `pipelined`: loops holding dots that Triton's software "
        "pipeliner took (async copies into multi-buffered shared memory, async wgmma on "
        "sm_90a) of all such loops, `+n nested`: those holding an inner loop, which it skips "
        "(the attention band's per-index sums); `loop wgmma`: the shapes of the wgmma in "
        "those loops (`narrow`: how many are m64n16, a quarter of an m64n64's columns per "
        "instruction); `exp2`: exponentials in base 2 (of all).",
        "",
        f"{len(rows)} kernels; problems at default tiles: {len(bad)}.",
        "",
    ]
    header = [
        *SPEC_HEADER,
        "warps",
        "stages",
        "regs",
        "stack",
        "STL/LDL",
        "shared KiB",
        "blocks/SM",
        "dots (wgmma, mma)",
        "loop wgmma",
        "TC",
        "LDG/STG.128",
        "16-bit",
        "pipelined",
        "exp2",
        "problem",
    ]
    body = []
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
            _loop_wgmma(r),
            r.get("tensor_core_insts", ""),
            r.get("vector_global_insts", ""),
            r.get("narrow_global_insts", ""),
            _pipelined(r),
            f"{r['exp2']}/{r['exp2'] + r['exp']}" if r.get("exp2") is not None else "",
            r["problem"],
        ]
        body.append(cells)
    return "\n".join([*lines, *markdown_table(header, body)]) + "\n"


def _loop_wgmma(r: dict) -> str:
    """The wgmma shapes of the key loops, and how many are m64n16 or narrower."""
    shapes = r.get("loop_wgmma") or ""
    narrow = r.get("narrow_wgmma") or 0
    return f"{shapes} ({narrow} narrow)" if narrow else shapes


def _pipelined(r: dict) -> str:
    if not r.get("dot_loops"):
        return ""
    nested = f" +{r['nested_loops']} nested" if r["nested_loops"] else ""
    return f"{r['pipelined_loops']}/{r['dot_loops']}{nested}"


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
        "pipelined_loops",
        "vector_global_insts",
    ]
    a, b = (pd.read_csv(p, keep_default_na=False, dtype=str) for p in (before, after))
    a, b = (df[df["default_tiles"] == "True"] for df in (a, b))
    for df in (a, b):  # an audit from before a column existed
        for c in shown:
            if c not in df:
                df[c] = "-"
    both = a.merge(b, on=key, suffixes=("_a", "_b"))
    header = [
        *SPEC_HEADER,
        "regs",
        "stack",
        "STL",
        "wgmma dots",
        "pipelined loops",
        "128-bit",
    ]
    body = []
    for _, r in both.iterrows():
        pairs = [
            r[c + "_a"] if r[c + "_a"] == r[c + "_b"] else f"{r[c + '_a']} -> {r[c + '_b']}"
            for c in shown
        ]
        body.append([*(r[k] for k in key), *pairs])
    lines = markdown_table(header, body)
    spills = [int((df["spill_stores"].astype(int) > 0).sum()) for df in (a, b)]
    return (
        f"Default specializations in both: {len(both)}; spilling: {spills[0]} -> "
        f"{spills[1]}.\n\n" + "\n".join(lines) + "\n"
    )
