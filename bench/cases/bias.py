"""Attention with a relative position bias on q, k, v (B, H, L, D): ALiBi, T5 buckets, Shaw's
scalar bias, and Shaw's key and value terms.

Implementations, each called as its own documentation does:
  reference    posenc's eager attention (the (H, L, L) bias built inside the call);
  compiled     torch.compile of it;
  sdpa         F.scaled_dot_product_attention with the bias materialized as a (1, H, L, L)
               attn_mask (four dims, the shape its fused kernels take): once, outside the timed
               call, when the table does not train (a cached bias, as a model reuses across its
               layers); inside the call when it trains (then SDPA's math path);
  sdpa_nobias  SDPA with no bias at all: the ceiling a biased kernel is measured against;
  flex         torch.compile(flex_attention), the bias as a score_mod reading a table (T5's
               bucket of each j - i from a table built once), the mask a block mask built once;
  flex_frozen  the same with a learned table frozen: its gradient is not Flex's to sum
               (bench/cases/_flex.py says why the two are apart);
  triton       posenc_kernels.relative_attention, the bias computed in the tile;
  hf, fla      T5's and BLOOM's attention in transformers, fla-core's FoX (bench/cases/_peers.py).
Shaw's value term adds to the output, which neither SDPA nor a score_mod can express. Each
family is declared once (bench/cases/families.py); this file makes its case.

Knobs: causal, num_kv_heads (grouped-query attention: SDPA and FlexAttention get
`enable_gqa=True`, the reference and the kernel take k and v as they are), window (a sliding
window, bench/cases/_window.py), the Triton kernel's tiles (fwd_tiles, bwd_tiles: "default" or
MxNxWARPSxSTAGES, for tuning; other implementations run at the default only).

Cost model: forward 4 B H D FLOPs per (query, visible key) pair (L^2, half when causal, L W
within a window) plus Shaw's relative terms (Q E_K^T and the per-bucket weights times E_V:
4 B H L (2K + 1) D); reads q, k, v and the table, writes the output. Backward: 2.5 times the
attention FLOPs (QK^T recomputed, dV, dP, dQ, dK), twice the relative terms'; reads q, k, v,
out, dout and the table, writes dq, dk, dv and its gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import nn

from bench import tiles
from bench.cases._common import (
    NUM_KV_HEADS,
    TRITON_DEVICES,
    TRITON_ELSEWHERE,
    TRITON_NOTE,
    compile_impl,
    gqa,
    kv_heads,
    per_mode,
    triton_kernels,
)
from bench.cases._flex import flex_attention_of, flex_impls
from bench.cases._model import MODEL, bias_problem
from bench.cases._peers import (
    bloom_alibi_attention,
    bloom_supports,
    fla_fox_attention,
    fla_impl,
    hf_impl,
    hf_plain,
    t5_attention,
)
from bench.cases._window import WINDOW, hidden, no_window, pairs, windowed
from bench.cases.families import FAMILIES, BiasFamily, sinks_of
from bench.checks import bools
from bench.registry import Case, Cost, Impl, Knob, Level, Point
from bench.tiles import parse_tiles

CAUSAL = Knob("causal", False, "causal masking: true or false", bools)
FWD_TILES = Knob(
    "fwd_tiles",
    "default",
    "the Triton attention kernel's forward tiles: default or MxNxWARPSxSTAGES (e.g. 128x64x8x3)",
    tiles.check,
)
BWD_TILES = Knob("bwd_tiles", "default", "its backward tiles, likewise", tiles.check)
SINKS = Knob(
    "sinks", False, "attention sinks: a learned logit per head joins each softmax (gpt-oss)", bools
)


def build_inputs(family: BiasFamily, q_len=None):
    """inputs: q (B, H, Lq, D), k and v (B, Hk, L, D) (Lq: q_len(point), or L), the family's
    tables, and the sinks (H,) when the point has them (`sinks`: {"sinks": parameter} or {})."""

    def build(point: Point, device, dtype):
        lq = point.seq_len if q_len is None else q_len(point)
        shape = (point.batch, point.num_heads, lq, point.head_dim)
        kv_shape = (point.batch, kv_heads(point), point.seq_len, point.head_dim)
        inputs = {
            n: torch.randn(shape if n == "q" else kv_shape, device=device).to(dtype) for n in "qkv"
        }
        h, d = point.num_heads, point.head_dim
        tables = family.at(point).inputs(h, d, device, dtype, batch=point.batch, keys=point.seq_len)
        return dict(inputs, **tables, sinks=sinks_input(point, device, dtype))

    return build


def sinks_input(point: Point, device, dtype) -> dict:
    """{"sinks": (H,) parameter} (N(0, 1) logits, seeded by the runner) or {} without them."""
    if not point.sinks:
        return {}
    return {"sinks": nn.Parameter(torch.randn(point.num_heads, device=device).to(dtype))}


def plain_softmax(point: Point) -> str | None:
    """supports() of SDPA and FlexAttention rows: no softmax column for sinks in either."""
    return "sinks: neither SDPA nor a score_mod adds a softmax column" if point.sinks else None


def on_qkv(attention):
    """An implementation's factory from an attention factory (inputs -> (q, k, v) -> out, its
    setup done once from the inputs' shapes and tables): called on the point's q, k, v. The
    layer cases (bench/cases/layer.py) call the same attention factories on their projections."""

    def make(inputs):
        fn = attention(inputs)
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        return lambda: fn(q, k, v)

    return make


def _reference(family: BiasFamily, compiled: bool = False):
    def attention(inputs):
        fn = family.attention(inputs, inputs["causal"])
        return compile_impl(fn) if compiled else fn

    return attention


def _truth(family: BiasFamily):
    def truth(inputs):
        return family.attention(inputs, inputs["causal"])(inputs["q"], inputs["k"], inputs["v"])

    return truth


def _mask(family: BiasFamily, inputs: dict):
    """-> () -> the (1, H, L, L) additive mask in q's dtype, -inf where `hidden`. Four dims, as
    SDPA's fused kernels take a mask (2-D or 4-D, torch's check_attn_mask_shape): a 3-D
    (H, L, L) mask broadcasts to the same scores but sends every call to the math path, 2.3x
    slower on an H200 (docs/gpu.md)."""
    module, q = family.module(inputs), inputs["q"]
    n, upper = q.shape[2], hidden(inputs, q.shape[2], q.device)

    def build():
        bias = module.bias(n, n).to(q.dtype)[None]
        return bias if upper is None else bias.masked_fill(upper, float("-inf"))

    return build


def trains(inputs) -> bool:
    """Whether a learned table requires grad (SDPA's bias then built inside the call)."""
    return any(p.requires_grad for p in inputs.get("params", {}).values())


def _sdpa(family: BiasFamily):
    def attention(inputs):
        build, grouped = _mask(family, inputs), gqa(inputs)
        if trains(inputs):
            return lambda q, k, v: nnf.scaled_dot_product_attention(
                q, k, v, attn_mask=build(), enable_gqa=grouped
            )
        with torch.no_grad():
            mask = build()
        return lambda q, k, v: nnf.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=grouped
        )

    return attention


def _sdpa_nobias(inputs):
    causal, grouped, q = inputs["causal"], gqa(inputs), inputs["q"]
    mask = ~hidden(inputs, q.shape[2], q.device) if inputs.get("window") else None  # a band
    return lambda q, k, v: nnf.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=grouped
    )


def _nobias_truth(inputs):
    return on_qkv(_sdpa_nobias)(inputs)()


def _triton(family: BiasFamily):
    def attention(inputs):
        kwargs = dict(
            family.kernel_args(inputs),
            causal=inputs["causal"],
            window=inputs.get("window"),
            fwd_tiles=parse_tiles(inputs.get("fwd_tiles", "default")),
            bwd_tiles=parse_tiles(inputs.get("bwd_tiles", "default")),
        )
        attend = triton_kernels().relative_attention
        sinks = sinks_of(inputs)
        return lambda q, k, v: attend(q, k, v, sinks=sinks, **kwargs)

    return attention


def attentions(family: BiasFamily) -> dict:
    """The family's attention factories by implementation name (see on_qkv)."""
    return {
        "reference": _reference(family),
        "compiled": _reference(family, compiled=True),
        "sdpa": _sdpa(family),
        "flex": flex_attention_of(family),
        "triton": _triton(family),
    }


def _default_tiles(point: Point) -> str | None:
    tuned = point.fwd_tiles != "default" or point.bwd_tiles != "default"
    return "tiles apply to the triton implementation only" if tuned else None


def _cost(family: BiasFamily):
    def cost(point: Point, dtype, mode: str) -> Cost:
        b, h, n, d = point.batch, point.num_heads, point.seq_len, point.head_dim
        hk = kv_heads(point)
        attn = 4 * b * h * d * pairs(point)
        sized = family.at(point)
        rel = b * h * n * sized.extra_flops(d)
        table = sized.table_bytes(h, d, dtype)
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
            window=point.window,
            fwd_tiles=point.fwd_tiles,
            bwd_tiles=point.bwd_tiles,
        )

    return wrapped


def either(first, second):
    """supports(point): the first reason not to run, of two checks."""
    return lambda point: first(point) or second(point)


T5_HF = hf_impl(on_qkv(t5_attention), either(hf_plain, no_window), note="transformers' T5 bias")
BLOOM = either(bloom_supports, no_window)
PEERS = {  # family -> implementations outside the project that compute the same attention
    "t5": {"hf": T5_HF},
    "alibi": {"hf": hf_impl(on_qkv(bloom_alibi_attention), BLOOM, note="BLOOM's ALiBi")},
    "fox": {"fla": fla_impl(on_qkv(fla_fox_attention), either(plain_softmax, no_window))},
}


def _sdpa_note(family: BiasFamily) -> str:
    """Which of SDPA's paths the row times: a mask that needs its gradient (a learned table in
    training) is refused by every fused kernel (check_attn_mask_shape), so it runs the math
    path, materializing the (B, H, L, L) scores."""
    note = "bias materialized as a (1, H, L, L) attn_mask"
    return note + ("; its backward trains the table: math path" if family.trains else "")


def _case(family: BiasFamily) -> Case:
    expressible = either(either(family.expressible, _default_tiles), plain_softmax)
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
            note=_sdpa_note(family),
            holds=3,
            supports=expressible,
        ),
        "sdpa_nobias": Impl(
            on_qkv(_sdpa_nobias),
            reference=_nobias_truth,
            supports=either(_default_tiles, plain_softmax),
            note="no bias: the ceiling",
        ),
        **flex_impls(family, on_qkv, _truth(family), expressible),
        "triton": Impl(
            on_qkv(_triton(family)),
            devices=TRITON_DEVICES,
            elsewhere=TRITON_ELSEWHERE,
            note="; ".join(filter(None, ["posenc_kernels.relative_attention", TRITON_NOTE])),
        ),
        **PEERS.get(family.name, {}),
    }
    return Case(
        name=f"{family.name}_attention",
        level=Level.ATTENTION,
        build=_with_knobs(build_inputs(family)),
        reference=_truth(family),
        impls=impls,
        baseline="reference",
        cost=_cost(family),
        grad_inputs=("q", "k", "v", "params", "sinks")
        if family.trains
        else ("q", "k", "v", "sinks"),
        batched=("q", "k", "v", "params") if family.per_token else ("q", "k", "v"),
        knobs=(CAUSAL, NUM_KV_HEADS, FWD_TILES, BWD_TILES, SINKS, WINDOW, MODEL, *family.knobs),
        constraint=either(family.refuses, lambda p: windowed(p) or bias_problem(p, family.name)),
        truth_holds=4,
    )


ATTENTION = [_case(family) for family in FAMILIES.values()]
