"""Attention with a relative position bias on q, k, v (B, H, L, D): ALiBi, T5 buckets, Shaw's
scalar bias, and Shaw's key and value terms.

Implementations, each called as its own documentation does:
  reference    posenc's eager attention (the (H, L, L) bias built inside the call);
  compiled     torch.compile of it;
  sdpa         F.scaled_dot_product_attention with the bias materialized as attn_mask: once,
               outside the timed call, when the table does not train (forward rows: a cached
               bias, as a model reuses across its layers); inside the call when it trains;
  sdpa_nobias  SDPA with no bias at all: the ceiling a biased kernel is measured against;
  flex         torch.compile(flex_attention), the bias as a score_mod reading a table (T5's
               bucket of each j - i looked up from a table built once, no logarithm per score),
               causal masking as a block mask built once;
  triton       kernels.relative_attention, the bias computed in the tile.
Shaw's value term adds to the output, which neither SDPA nor a score_mod can express.

Why this file is long: four families by six implementations, each a factory that calls its
library as that library's documentation does, next to the inputs it is built for.

Knobs: causal, num_kv_heads (grouped-query attention: k and v with fewer heads; SDPA and
FlexAttention get `enable_gqa=True`, the reference and the kernel take them as they are), and
the Triton kernel's tiles (fwd_tiles, bwd_tiles: "default" or
MxNxWARPSxSTAGES, for tuning; other implementations run at the default only).

Cost model: forward 4 B H L^2 D FLOPs (half when causal) plus Shaw's relative terms (Q E_K^T
and the per-bucket weights times E_V: 4 B H L (2K + 1) D); reads q, k, v and the table, writes
the output. Backward: 2.5 times the attention FLOPs (QK^T recomputed, dV, dP, dQ, dK), twice the
relative terms'; reads q, k, v, out, dout and the table, writes dq, dk, dv and its gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf

import posenc
from bench import tiles
from bench.cases._common import (
    NUM_KV_HEADS,
    TRITON_DEVICES,
    TRITON_ELSEWHERE,
    TRITON_NOTE,
    bind,
    compile_impl,
    parameters,
    per_mode,
    triton_kernels,
)
from bench.checks import bools
from bench.registry import Case, Cost, Impl, Knob, Level, Point
from bench.tiles import parse_tiles
from posenc import functional as F

SHAW_K = 16  # Shaw's clip distance K: 2K + 1 = 33 relative positions
T5_ARGS = dict(num_buckets=32, max_distance=128, bidirectional=True)  # T5's public configuration
CAUSAL = Knob("causal", False, "causal masking: true or false", bools)
FWD_TILES = Knob(
    "fwd_tiles",
    "default",
    "the Triton attention kernel's forward tiles: default or MxNxWARPSxSTAGES (e.g. 128x64x8x3)",
    tiles.check,
)
BWD_TILES = Knob("bwd_tiles", "default", "its backward tiles, likewise", tiles.check)


def _module(family: str, heads: int):
    if family == "alibi":
        return posenc.ALiBi(heads)
    if family == "t5":
        return posenc.T5RelativeBias(heads, **T5_ARGS)
    if family == "shaw":
        return posenc.ShawBias(heads, SHAW_K)
    return None  # shaw_kv: the (2K + 1, D) tables are inputs (learned_tables)


def learned_tables(family: str, heads: int, head_dim: int) -> torch.nn.Module:
    """The module holding the family's learned tables, seeded by the caller: T5's, Shaw's scalar
    table, or Shaw's key and value tables (emb_k, emb_v: (2K + 1, D), a ParameterDict)."""
    if family != "shaw_kv":
        return _module(family, heads)
    return torch.nn.ParameterDict(
        {
            n: torch.nn.Parameter(0.5 * torch.randn(2 * SHAW_K + 1, head_dim))
            for n in ("emb_k", "emb_v")
        }
    )


def _build(family: str, q_len=None):
    """inputs: q (B, H, Lq, D), k and v (B, Hk, L, D) (Lq: q_len(point), or L) and the
    family's table."""

    def build(point: Point, device, dtype):
        lq = point.seq_len if q_len is None else q_len(point)
        shape = (point.batch, point.num_heads, lq, point.head_dim)
        kv_shape = (point.batch, point.kv_heads, point.seq_len, point.head_dim)
        inputs = {
            n: torch.randn(shape if n == "q" else kv_shape, device=device).to(dtype) for n in "qkv"
        }
        if family == "alibi":
            inputs["slopes"] = F.alibi_slopes(point.num_heads).float().to(device)
        else:
            tables = learned_tables(family, point.num_heads, point.head_dim)
            inputs["params"] = parameters(tables, device, dtype)
        return inputs

    return build


def _bias_module(family: str, inputs: dict):
    """posenc's bias module for the family, computing with the point's tables."""
    module = _module(family, inputs["q"].shape[1]).to(inputs["q"].device)
    if family == "alibi":
        module.slopes = inputs["slopes"]
        return module
    return bind(module, inputs["params"])


def _eager(family: str, inputs: dict, causal: bool):
    """posenc's reference attention as a function of (q, k, v)."""
    if family == "shaw_kv":
        p, n, device = inputs["params"], inputs["q"].shape[2], inputs["q"].device
        mask = torch.ones(n, n, dtype=torch.bool, device=device).tril() if causal else None

        def shaw(q, k, v):
            return F.shaw_attention(q, k, v, p["emb_k"], p["emb_v"], SHAW_K, mask=mask)[0]

        return shaw
    bias = _bias_module(family, inputs)
    return lambda q, k, v: F.relative_attention(q, k, v, bias=bias, causal=causal)


def on_qkv(attention):
    """An implementation's factory from an attention factory (inputs -> (q, k, v) -> out, its
    setup done once from the inputs' shapes and tables): called on the point's q, k, v. The
    layer cases (bench/cases/layer.py) call the same attention factories on their projections."""

    def make(inputs):
        fn = attention(inputs)
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        return lambda: fn(q, k, v)

    return make


def _reference(family: str, compiled: bool = False):
    def attention(inputs):
        fn = _eager(family, inputs, inputs["causal"])
        return compile_impl(fn) if compiled else fn

    return attention


def _truth(family: str):
    def truth(inputs):
        return _eager(family, inputs, inputs["causal"])(inputs["q"], inputs["k"], inputs["v"])

    return truth


def _mask(family: str, inputs: dict):
    """-> () -> the (H, L, L) additive mask in q's dtype, -inf above the diagonal if causal."""
    module, q = _bias_module(family, inputs), inputs["q"]
    n, causal = q.shape[2], inputs["causal"]
    upper = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1) if causal else None

    def build():
        bias = module.bias(n, n).to(q.dtype)
        return bias if upper is None else bias.masked_fill(upper, float("-inf"))

    return build


def _sdpa(family: str):
    def attention(inputs):
        build = _mask(family, inputs)
        trains = any(p.requires_grad for p in inputs.get("params", {}).values())
        gqa = _gqa(inputs)
        if trains:  # the table's gradient flows through the mask: built in the call
            return lambda q, k, v: nnf.scaled_dot_product_attention(
                q, k, v, attn_mask=build(), enable_gqa=gqa
            )
        with torch.no_grad():
            mask = build()
        return lambda q, k, v: nnf.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=gqa
        )

    return attention


def _gqa(inputs) -> bool:
    """SDPA's and FlexAttention's own switch for k and v with fewer heads than q."""
    return inputs["k"].shape[1] != inputs["q"].shape[1]


def _sdpa_nobias(inputs):
    causal, gqa = inputs["causal"], _gqa(inputs)
    return lambda q, k, v: nnf.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=gqa
    )


def _nobias_truth(inputs):
    return on_qkv(_sdpa_nobias)(inputs)()


def _score_mod(family: str, inputs: dict, offsets=None):
    """FlexAttention's score_mod of the family: the bias of r = j - i, or with offsets (B,)
    (queries at the end of each row's cache) of r = j - (offsets[b] + i)."""
    q = inputs["q"]
    lq, lk = q.shape[2], inputs["k"].shape[2]

    def rel(b, i, j):
        return j - i if offsets is None else j - i - offsets[b]

    if family == "alibi":
        slopes = inputs["slopes"]
        return lambda score, b, h, i, j: score - slopes[h] * rel(b, i, j).abs()
    if family == "t5":
        table = inputs["params"]["relative_attention_bias.weight"]  # (num_buckets, H)
        low = lq + lk  # r from -(Lq + Lk) (a query past an offset) to Lk
        rels = torch.arange(-low, lk + 1, device=q.device)
        bucket = F.t5_relative_bucket(
            rels, T5_ARGS["bidirectional"], T5_ARGS["num_buckets"], T5_ARGS["max_distance"]
        ).int()
        return lambda score, b, h, i, j: score + table[bucket[rel(b, i, j) + low], h]
    table = inputs["params"]["table"]  # (H, 2K + 1)
    return lambda score, b, h, i, j: score + table[h, rel(b, i, j).clamp(-SHAW_K, SHAW_K) + SHAW_K]


def _flex(family: str):
    def attention(inputs):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        q, k = inputs["q"], inputs["k"]
        block_mask = None
        if inputs["causal"]:
            block_mask = create_block_mask(
                lambda b, h, i, j: j <= i, None, None, q.shape[2], k.shape[2], device=q.device
            )
        fn = compile_impl(flex_attention)
        score_mod = _score_mod(family, inputs)
        gqa = _gqa(inputs)
        return lambda q, k, v: fn(
            q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa
        )

    return attention


def triton_kwargs(family: str, inputs: dict) -> dict:
    """kernels.relative_attention's bias arguments for the family, from the inputs."""
    if family == "alibi":
        return {"alibi_slopes": inputs["slopes"]}
    if family == "t5":
        return {
            "t5_table": inputs["params"]["relative_attention_bias.weight"],
            "t5_num_buckets": T5_ARGS["num_buckets"],
            "t5_max_distance": T5_ARGS["max_distance"],
            "t5_bidirectional": T5_ARGS["bidirectional"],
        }
    if family == "shaw":
        return {"shaw_bias": inputs["params"]["table"]}
    return {"shaw_k": inputs["params"]["emb_k"], "shaw_v": inputs["params"]["emb_v"]}


def _triton(family: str):
    def attention(inputs):
        kwargs = dict(
            triton_kwargs(family, inputs),
            causal=inputs["causal"],
            fwd_tiles=parse_tiles(inputs.get("fwd_tiles", "default")),
            bwd_tiles=parse_tiles(inputs.get("bwd_tiles", "default")),
        )
        attend = triton_kernels().relative_attention
        return lambda q, k, v: attend(q, k, v, **kwargs)

    return attention


def attentions(family: str) -> dict:
    """The family's attention factories by implementation name (see on_qkv)."""
    return {
        "reference": _reference(family),
        "compiled": _reference(family, compiled=True),
        "sdpa": _sdpa(family),
        "flex": _flex(family),
        "triton": _triton(family),
    }


def _default_tiles(point: Point) -> str | None:
    if point.fwd_tiles == point.bwd_tiles == "default":
        return None
    return "tiles apply to the triton implementation only"


def _unsupported(why: str):
    return lambda point: why


def table_bytes(family: str, heads: int, head_dim: int, dtype) -> int:
    """The bias table's bytes (ALiBi's float32 slopes; the learned tables in the row's dtype)."""
    return {
        "alibi": 4 * heads,
        "t5": T5_ARGS["num_buckets"] * heads * dtype.itemsize,
        "shaw": heads * (2 * SHAW_K + 1) * dtype.itemsize,
        "shaw_kv": 2 * (2 * SHAW_K + 1) * head_dim * dtype.itemsize,
    }[family]


def _cost(family: str):
    def cost(point: Point, dtype, mode: str) -> Cost:
        b, h, n, d = point.batch, point.num_heads, point.seq_len, point.head_dim
        hk = point.kv_heads
        attn = 4 * b * h * n * n * d // (2 if point.causal else 1)
        rel = 4 * b * h * n * (2 * SHAW_K + 1) * d if family == "shaw_kv" else 0
        table = table_bytes(family, h, d, dtype)
        act, act_kv = (b * heads * n * d * dtype.itemsize for heads in (h, hk))
        # forward reads q, k, v and writes out; backward reads q, k, v, out, dout and writes
        # dq, dk, dv (k and v with the kv heads)
        forward = Cost(2 * act + 2 * act_kv + table, attn + rel)
        backward = Cost(4 * act + 4 * act_kv + 2 * table, int(2.5 * attn) + 2 * rel)
        return per_mode(forward, backward, mode)

    return cost


def _with_knobs(build):
    """The point's knobs the implementations read, alongside the tensors."""

    def wrapped(point: Point, device, dtype):
        return dict(
            build(point, device, dtype),
            causal=point.causal,
            fwd_tiles=point.fwd_tiles,
            bwd_tiles=point.bwd_tiles,
        )

    return wrapped


def _case(name: str, family: str) -> Case:
    kv = family == "shaw_kv"
    no_bias = "Shaw's value term adds to the output: not expressible"
    impls = {
        "reference": Impl(on_qkv(_reference(family)), supports=_default_tiles, holds=4),
        "compiled": Impl(
            on_qkv(_reference(family, compiled=True)),
            compiled=True,
            holds=2,
            supports=_default_tiles,
        ),
        "sdpa": Impl(
            on_qkv(_sdpa(family)),
            note="bias materialized as attn_mask",
            holds=3,
            supports=_unsupported(no_bias) if kv else _default_tiles,
        ),
        "sdpa_nobias": Impl(
            on_qkv(_sdpa_nobias),
            reference=_nobias_truth,
            supports=_default_tiles,
            note="no bias: the ceiling",
        ),
        "flex": Impl(
            on_qkv(_flex(family)),
            compiled=True,
            note="torch.compile(flex_attention)",
            supports=_unsupported(no_bias) if kv else _default_tiles,
        ),
        "triton": Impl(
            on_qkv(_triton(family)),
            devices=TRITON_DEVICES,
            elsewhere=TRITON_ELSEWHERE,
            note="; ".join(filter(None, ["kernels.relative_attention", TRITON_NOTE])),
        ),
    }
    grads = ("q", "k", "v") if family == "alibi" else ("q", "k", "v", "params")
    return Case(
        name=name,
        level=Level.ATTENTION,
        build=_with_knobs(_build(family)),
        reference=_truth(family),
        impls=impls,
        baseline="reference",
        cost=_cost(family),
        grad_inputs=grads,
        batched=("q", "k", "v"),
        knobs=(CAUSAL, NUM_KV_HEADS, FWD_TILES, BWD_TILES),
        truth_holds=4,
    )


ALIBI_ATTENTION = _case("alibi_attention", "alibi")
T5_ATTENTION = _case("t5_attention", "t5")
SHAW_BIAS_ATTENTION = _case("shaw_bias_attention", "shaw")
SHAW_KV_ATTENTION = _case("shaw_kv_attention", "shaw_kv")
