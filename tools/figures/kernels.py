"""docs/kernels.md's figures: the compile audit's tables (results/gpu-compile/*.csv), the host
audit's counts (tools.audit.host) and a list model of the causal grid's waves."""

from __future__ import annotations

import json
import os
from functools import cache

import pandas as pd

from tools.audit.model import makespan
from tools.figures.model import MODEL_FIGURES
from tools.figures.sources import ROOT

# docs/kernels.md: the compile audit's table at what `sweep=gpu` runs.
AUDIT = ROOT / "results" / "gpu-compile"
TRITONS = ("3.9.0", "3.6.0")
FAMILY_NAMES = {
    "alibi": "ALiBi",
    "t5": "T5",
    "shaw_bias": "Shaw scalar",
    "shaw_kv": "Shaw key + value",
    "fox": "FoX",
}
COMPILE_GROUPS = [  # (label, kernel, families)
    ("forward", "_relbias_fwd_kernel", ("alibi", "t5", "shaw_bias", "fox")),
    ("forward", "_relbias_fwd_kernel", ("shaw_kv",)),
    ("delta (backward's row term)", "_relbias_bwd_delta_kernel", None),
    ("dk/dv", "_relbias_bwd_dkdv_kernel", ("alibi", "t5", "shaw_bias", "fox")),
    ("dk/dv", "_relbias_bwd_dkdv_kernel", ("shaw_kv",)),
    ("dq", "_relbias_bwd_dq_kernel", ("alibi", "fox")),
    ("dq", "_relbias_bwd_dq_kernel", ("t5", "shaw_bias")),
    ("dq", "_relbias_bwd_dq_kernel", ("shaw_kv",)),
]


@cache
def _audit(triton: str) -> pd.DataFrame:
    df = pd.read_csv(AUDIT / f"triton-{triton}.csv", keep_default_na=False, na_values=[""])
    at = (df["target"] == "sm_90a") & (df["dtype"] == "bfloat16") & (df["head_dim"] == 128)
    return df[at & (df["variant"] == "default") & df["default_tiles"]]


def _one(values) -> str:
    """A value the rows share, or every value they hold, in order of first appearance."""
    return " / ".join(dict.fromkeys(str(v) for v in values))


def _loops(rows: pd.DataFrame) -> str:
    def of(r) -> str:
        nested = f" +{r.nested_loops}" if r.nested_loops else ""
        return f"{r.pipelined_loops} of {r.dot_loops}{nested}"

    full = _one(of(r) for r in rows[~rows["causal"]].itertuples())
    causal = _one(of(r) for r in rows[rows["causal"]].itertuples())
    if not full or causal in (full, ""):
        return full or causal
    return f"{full} (causal {causal})"


def _span_of(values: pd.Series) -> str:
    lo, hi = values.min(), values.max()
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _narrowest(shapes) -> str:
    every = {s for v in shapes if isinstance(v, str) for s in v.split()}
    return min(every, key=lambda s: int(s.split("n")[1])) if every else "-"


def _tiles(r) -> str:
    m, n = r.tiles.split("x")
    return (
        f"{m} rows ({r.num_warps})" if n == "None" else f"{m} x {n} ({r.num_warps}, {r.num_stages})"
    )


def _spills(rows: pd.DataFrame) -> str:
    """The most local stores of the rows, and where none is inside a key loop, so."""
    stores = rows["spill_stores"].max()
    return f"{stores} (none in a loop)" if stores and not rows["loop_spills"].max() else f"{stores}"


def compile_table() -> str:
    head = [
        "kernel",
        "tiles (warps, stages)",
        f"registers ({' / '.join(t.rsplit('.', 1)[0] for t in TRITONS)})",
        "spills",
        "key loops pipelined",
        "dots on wgmma",
        "score products",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, kernel, families in COMPILE_GROUPS:
        parts = []
        for triton in TRITONS:
            df = _audit(triton)
            df = df[df["kernel"] == kernel]
            parts.append(df[df["family"].isin(families)] if families else df)
        both = pd.concat(parts)
        if families:
            label = f"{label}, {' / '.join(FAMILY_NAMES[f] for f in families)}"
        tiles = _one(_tiles(r) for r in both.itertuples())
        regs = " / ".join(_span_of(p["registers"]) for p in parts)
        dots = both["dots"].sum()
        wgmma = "no dots" if not dots else "all" if both["wgmma_dots"].sum() == dots else "some"
        loops = "no dots" if not dots else _one(_loops(p) for p in parts)
        cells = [
            label,
            tiles,
            regs,
            _spills(both),
            loops,
            wgmma if dots else "-",
            _narrowest(both["loop_wgmma"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(_rope_row())
    return "\n".join(lines)


def narrow_count() -> str:
    """How many sm_90a attention kernels at default tiles keep an m64n16 product in a key loop."""
    counts = []
    for triton in TRITONS:
        df = pd.read_csv(AUDIT / f"triton-{triton}.csv", keep_default_na=False, na_values=[""])
        df = df[(df["target"] == "sm_90a") & df["kernel"].str.startswith("_relbias")]
        df = df[df["default_tiles"]]
        counts.append(f"{(df['narrow_wgmma'] > 0).sum()} of the {len(df)}")
    return f"{_one(counts)} sm_90a attention kernels at default tiles hold m64n16 products"


def host_table() -> str:
    """docs/kernels.md's host work per call: the counts of `python -m tools.audit.host` (its
    launches stubbed under Triton's interpreter, which this process turns on if it can)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from tools.audit.host import measure

    head = ["call", "part", "Triton kernels", "torch operations besides them", "allocations"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in measure(reps=2):  # the counts; its timings (a CPU proxy) are not quoted
        cells = [r["call"], r["part"], r["kernels"], r["launches"], r["allocs"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


PASSES = {
    "_relbias_fwd_kernel": "forward",
    "_relbias_bwd_dkdv_kernel": "dk/dv",
    "_relbias_bwd_dq_kernel": "dq",
}


def _per_score(loop: str, scores: float) -> str:
    insts, fp32, mufu, _ = (int(n) for n in loop.split("/"))
    return f"{insts / scores:.1f} / {fp32 / scores:.1f} / {mufu / scores:.2f}"


def loop_table() -> str:
    """What one key loop's iteration issues per score, per pass and family (Triton 3.9, not
    causal where the family is defined so): its instructions, FP32 and MUFU instructions over
    the scores a thread holds."""
    df = _audit(TRITONS[0])
    df = df[df["kernel"].isin(PASSES)].sort_values("causal", kind="stable")
    df = df.drop_duplicates(["kernel", "family"])  # the first: not causal where there is one
    head = ["pass", "family", "tile (warps)", "scores a thread", "outside the band", "the band"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kernel, name in PASSES.items():
        for r in df[df["kernel"] == kernel].itertuples():
            m, n = (int(x) for x in r.tiles.split("x"))
            scores = m * n / (32 * r.num_warps)
            loops = r.loop_sass.split()
            cells = [name, FAMILY_NAMES[r.family], f"{m} x {n} ({r.num_warps})", f"{scores:g}"]
            cells += [_per_score(loops[0], scores), _per_score(loops[-1], scores)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _causal_work(heads: int, blocks: int, block_m: int, block_n: int, grouped: bool) -> list[int]:
    """Each query block's key blocks under a causal mask, in the grid's order: a head's blocks
    adjacent (NATURAL), or heaviest first eight heads at a time (LAST_FIRST, HEAD_GROUP 8)."""
    cost = [-(-(i + 1) * block_m // block_n) for i in range(blocks)]
    if not grouped:
        return cost * heads
    order = []
    for g0 in range(0, heads, 8):
        order += [cost[i] for i in reversed(range(blocks)) for _ in range(min(8, heads - g0))]
    return order


def grid_order() -> str:
    """The causal forward's waves under both orders (128 x 64 tiles, 132 SMs): the makespan
    over the ideal (total work / slots), per shape and programs an SM."""
    head = ["B x H", "L", "slots", "a head's blocks adjacent", "heaviest first", "gain"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b, h, length in ((4, 16, 4096), (1, 32, 8192), (8, 32, 2048), (1, 16, 4096)):
        for slots in (132, 264):
            natural, grouped = (
                _causal_work(b * h, length // 128, 128, 64, g) for g in (False, True)
            )
            ideal = sum(natural) / slots
            a, c = makespan(natural, slots), makespan(grouped, slots)
            cells = [f"{b} x {h}", str(length), str(slots), f"{a / ideal:.2f}", f"{c / ideal:.2f}"]
            lines.append("| " + " | ".join(cells + [f"{100 * (a / c - 1):.0f}%"]) + " |")
    return "\n".join(lines)


def alibi_fp32() -> str:
    """The float instructions of ALiBi's forward at the default tile, per Triton."""
    counts = []
    for triton in TRITONS:
        df = _audit(triton)
        at = (df["kernel"] == "_relbias_fwd_kernel") & (df["family"] == "alibi") & ~df["causal"]
        counts.append(
            f"{_one(df.loc[at, 'fp32_insts'])} under {'Triton ' if not counts else ''}"
            f"{triton.rsplit('.', 1)[0]}"
        )
    return f"(`fp32_insts`, static): {' and '.join(counts)} at the default tile"


def _rope_row() -> str:
    """RoPE's kernel as sweep=gpu runs it: bshd, 32 query and 8 kv heads, forward and backward."""
    parts = []
    for triton in TRITONS:
        df = pd.read_csv(AUDIT / f"triton-{triton}.csv", keep_default_na=False, na_values=[""])
        at = (df["target"] == "sm_90a") & (df["dtype"] == "bfloat16") & (df["head_dim"] == 128)
        at &= df["kernel"].str.startswith("_rope_kernel") & (df["tiles"] == "heads 32+8")
        parts.append(df[at & (df["variant"] == "bshd half-split full pos=none")])
    both = pd.concat(parts)
    cells = [
        f"RoPE forward and backward (bshd, GQA 32/8: {_one(both['vector_global_insts'])} 128-bit"
        " accesses)",
        f"one token per program ({_one(both['num_warps'])} warps)",
        " / ".join(_span_of(p["registers"]) for p in parts),
        str(both["spill_stores"].max()),
        "no dots",
        "-",
        "-",
    ]
    return "| " + " | ".join(cells) + " |"


# Computed from the models' configs and the decode model (posenc_kernels/_relbias_grid.py).
def _config(model: str) -> dict:
    return json.loads((ROOT / "configs" / "models" / f"{model}.json").read_text())


def table_share() -> str:
    """Per-token tables' bytes (cos and sin, F = D/2 float32 each: 8F) against a model's q and k
    in bfloat16, read and written."""
    c = _config("qwen2.5-vl-7b")
    d = c["hidden_size"] // c["num_attention_heads"]
    heads = c["num_attention_heads"] + c["num_key_value_heads"]
    share = 8 * (d // 2) / (heads * d * 2 * 2)
    return (
        f"about {share:.0%} of Qwen2-VL-7B's q and k ({c['num_attention_heads']} + "
        f"{c['num_key_value_heads']} heads of\n  {d} bf16, read and written)"
    )


def gqa_bytes() -> str:
    c = _config("llama-3.1-8b")
    group = c["num_attention_heads"] // c["num_key_value_heads"]
    return (
        f"{c['num_attention_heads']} query heads on {c['num_key_value_heads']} kv heads read "
        f"{group}x fewer cache bytes"
    )


def decode_model() -> str:
    """The decode model at B=64 and B=1 over ragged 16k-32k caches, Llama-3.1-8B's heads, D=128
    bfloat16, 132 SMs of 2 programs (tests/posenc_kernels/test_relbias_grid.py asserts it)."""
    from posenc_kernels import _relbias_grid as G
    from posenc_kernels._relbias_seq import CACHE, Sequences

    c, slots = _config("llama-3.1-8b"), 132 * 2
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    out = {}
    for bsz in (64, 1):
        lens = [16384 + (b * 997) % 16385 for b in range(bsz)]
        grid = G.forward_grid(Sequences(CACHE, None, bsz, 1, 32768), heads, heads // kv_heads,
                              16, 64, None, slots)  # fmt: skip
        out[bsz] = grid, G.cost(grid, lens, heads, kv_heads, 1, 128, 2, slots)
    (g64, c64), (_, c1) = out[64], out[1]
    exact = "exactly the caches' bytes" if c64.kv_bytes == c64.cache_bytes else "more"
    return (
        f"the packed grid is {g64.programs} programs in {c64.waves} waves\n  reading {exact}; at "
        f"B=1 it splits the keys to fill one wave {c1.fill:.0%}"
    )


KERNELS_FIGURES = {
    "table_share": table_share,
    "gqa_bytes": gqa_bytes,
    "decode_model": decode_model,
    "compile_table": compile_table,
    "narrow_count": narrow_count,
    "host_table": host_table,
    "alibi_fp32": alibi_fp32,
    "loop_table": loop_table,
    "grid_order": grid_order,
    **MODEL_FIGURES,
}
# Settings the page states that read like figures: tile sizes and the code's thresholds.
KERNELS_SETTINGS = (
    "at least 90% full",  # _relbias_grid.num_splits
    "BLOCK_N stays 64 at 16 rows", "4 warps at 16 rows", "decode of 16 rows", "computes 16 rows",
    "no worse than 3x the eager reference",  # bench/run/check.py FACTOR
)  # fmt: skip
