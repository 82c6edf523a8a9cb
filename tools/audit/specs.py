"""What the compile audit launches: `Spec` (one launcher call), `specs` (the curated cover of
the axes that `make gpu-check` and `sweep=gpu` launch) and `tile_candidates` (the tuning
sweep's). tools/audit/capture.py runs them on meta tensors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Spec:
    """One launcher call: RoPE (variant: layout / pairs / rotary / positions) or attention."""

    kernel: str  # "rope" | "rope_cache" | "relbias"
    family: str = ""  # relbias: alibi, t5, shaw, shaw_kv
    dtype: str = "bfloat16"
    head_dim: int = 128
    causal: bool = False
    layout: str = "bshd"
    interleaved: bool = False
    rotary: str = "full"  # full | partial (a quarter of D, GPT-NeoX style) | p_rope (p = 1/4)
    positions: str = "none"  # none | per_seq | ids | table (per-token rows, M-RoPE's shape)
    xpos: bool = False
    kv_heads: int = 0  # relbias: grouped-query k and v with this many heads (0: H)
    seq: str = ""  # relbias: "" one sequence a row; decode, decode_end, prefill, packed, paged
    fwd_tiles: tuple | None = None  # a candidate (not the launcher's default)
    bwd_tiles: tuple | None = None
    sinks: bool = False  # relbias: a sink logit per head
    window: int = 0  # relbias: a sliding window (gpt-oss's 128, Mistral's 4096)

    @property
    def variant(self) -> str:
        if self.kernel == "rope":
            pairs = "interleaved" if self.interleaved else "half-split"
            xpos = " xpos" if self.xpos else ""
            return f"{self.layout} {pairs} {self.rotary} pos={self.positions}{xpos}"
        if self.kernel == "rope_cache":
            pairs = "interleaved" if self.interleaved else "half-split"
            return f"paged cache {pairs} {self.rotary} pos={self.positions}"
        gqa = f" gqa {self.kv_heads}" if self.kv_heads else ""
        seq = f" {self.seq}" if self.seq else ""
        sinks = " sinks" if self.sinks else ""
        window = f" window {self.window}" if self.window else ""
        kind = "candidate" if self.fwd_tiles or self.bwd_tiles else "default"
        return kind + gqa + seq + sinks + window


TARGETS = {"sm_90a": 90, "sm_80": 80}


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
        Spec("rope", positions="table"),
        Spec("rope", rotary="p_rope"),
        Spec("rope", xpos=True),
    ]
    # the serving step's fused RoPE + cache write (Llama-3-8B-like: T=2048 tokens)
    rope += [Spec("rope_cache", positions="ids")]
    rope += [Spec("rope_cache", dtype=d, positions="ids") for d in ("float16", "float32")]
    rope += [
        Spec("rope_cache", interleaved=True, positions="ids"),
        Spec("rope_cache", rotary="partial", positions="ids"),
        Spec("rope_cache", rotary="p_rope", positions="ids"),
        Spec("rope_cache", positions="table"),
    ]
    every = [f for f in _families()]
    families = tuple(f.name for f in every)
    # each family causal or not (where it is defined so), then other dtypes and D=64
    attn = [
        Spec("relbias", f.name, causal=c)
        for f in every
        for c in (False, True)
        if c or not f.needs_causal
    ]
    causal = {f.name: f.needs_causal for f in every}
    attn += [
        Spec("relbias", f, dtype=d, causal=causal[f])
        for f in families
        for d in ("float16", "float32")
    ]
    attn += [Spec("relbias", f, head_dim=64, causal=causal[f]) for f in families]
    # sinks: on ALiBi's and FoX's forward and backward, and a split decode step
    attn += [Spec("relbias", f, causal=True, sinks=True) for f in ("alibi", "fox")]
    attn += [Spec("relbias", "alibi", causal=True, kv_heads=4, seq="decode", sinks=True)]
    attn += [Spec("relbias", f, kv_heads=4) for f in ("alibi", "t5")]  # 16 query heads, 4 kv
    seqs = [(f, 4, s) for f in families for s in ("decode", "packed")]  # causal, as models run
    seqs += [(f, 0, "packed") for f in families]  # one kv head a query head: the other code
    seqs += [(f, 0, s) for f in ("alibi", "t5") for s in ("decode_end", "prefill")]
    attn += [Spec("relbias", f, causal=True, kv_heads=g, seq=s) for f, g, s in seqs]
    attn += [Spec("relbias", "alibi", "float32", causal=True, kv_heads=4, seq="decode")]
    # decode steps over paged caches (block size 16), every family
    attn += [Spec("relbias", f, causal=True, kv_heads=4, seq="paged") for f in families]
    attn += [Spec("relbias", "alibi", "float16", causal=True, kv_heads=4, seq="paged")]
    # sliding windows (one masked loop): gpt-oss's layers (sinks, GQA), a decode step, T5's
    attn += [Spec("relbias", "alibi", causal=True, kv_heads=4, sinks=True, window=128)]
    attn += [Spec("relbias", "alibi", causal=True, kv_heads=4, seq="decode", window=128)]
    attn += [Spec("relbias", "t5", causal=True, window=4096)]
    # heads past 2**31 elements (a (B, L, H, D) layout at 2**20 tokens): 64-bit row offsets
    attn += [Spec("relbias", "alibi", seq="long")]
    attn += [Spec("relbias", "t5", causal=True, kv_heads=4, seq="long")]
    out = [s for s in rope + attn if only in (None, s.kernel)]
    return out


def _families():
    """The bias families, as the cases declare them (bench/cases/families.py)."""
    from bench.cases.families import FAMILIES

    return FAMILIES.values()


def family_of(name: str):
    """The family declaration named `name`."""
    return next(f for f in _families() if f.name == name)


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
