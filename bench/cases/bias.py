"""Attention with a relative position bias on q, k, v (B, H, L, D): ALiBi and T5.

Implementations: the posenc reference (bias built inside the call), SDPA with the (H, L, L) bias
materialized once outside the timed region (read every call: O(L^2) bytes), FlexAttention with
the equivalent score_mod (compiled; the first call compiles, which the warm-up absorbs).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as nnf

import posenc
from bench.registry import Case, Impl, Point
from posenc import functional as F


def _build(factory):
    def build(point: Point, device, dtype):
        shape = (point.batch, point.num_heads, point.seq_len, point.head_dim)
        q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
        return {"q": q, "k": k, "v": v, "bias": factory(point.num_heads).to(device)}

    return build


def _truth(inputs):
    q, k, v = (inputs[n].double() for n in "qkv")
    bias = copy.deepcopy(inputs["bias"]).double()  # .double() on the shared module would mutate it
    return F.relative_attention(q, k, v, bias=bias)


def _reference(inputs):
    q, k, v, bias = inputs["q"], inputs["k"], inputs["v"], inputs["bias"]
    return lambda: F.relative_attention(q, k, v, bias=bias)


def _sdpa(inputs):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    with torch.no_grad():  # a constant of the call, built once (setup)
        mask = inputs["bias"].bias(q.shape[2], k.shape[2]).to(q.dtype)  # (H, L, L)
    return lambda: nnf.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _flex(score_mod_of):
    def make(inputs):
        from torch.nn.attention.flex_attention import flex_attention

        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        fn = torch.compile(flex_attention, dynamic=False)
        score_mod = score_mod_of(inputs["bias"], q.shape[2], k.shape[2])
        return lambda: fn(q, k, v, score_mod=score_mod)

    return make


def _triton(kwargs_of):
    def make(inputs):
        import kernels

        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        kwargs = kwargs_of(inputs["bias"])
        return lambda: kernels.relative_attention(q, k, v, **kwargs)

    return make


def _alibi_kwargs(module):
    return {"alibi_slopes": module.slopes}


def _t5_kwargs(module):
    table = module.relative_attention_bias.weight.detach()
    return {
        "t5_table": table,
        "t5_num_buckets": module.num_buckets,
        "t5_max_distance": module.max_distance,
        "t5_bidirectional": module.bidirectional,
    }


def _alibi_mod(module, q_len, k_len):
    slopes = module.slopes

    def score_mod(score, b, h, i, j):
        return score - slopes[h] * (j - i).abs()

    return score_mod


def _t5_mod(module, q_len, k_len):
    """The bucket is computed from j - i inside the score_mod (no L x L table)."""
    table = module.relative_attention_bias.weight.detach()  # (num_buckets, H)
    args = (module.bidirectional, module.num_buckets, module.max_distance)

    def score_mod(score, b, h, i, j):
        return score + table[F.t5_relative_bucket(j - i, *args), h]

    return score_mod


def _bytes(point: Point, dtype) -> int:
    return 4 * point.batch * point.seq_len * point.d_model * dtype.itemsize  # q, k, v in; out


def _flops(point: Point) -> int:
    return 4 * point.batch * point.seq_len * point.seq_len * point.d_model


def _case(name, factory, score_mod_of, kwargs_of):
    return Case(
        name=name, level="attention", build=_build(factory), reference=_truth,
        impls={
            "reference": Impl(_reference),
            "sdpa": Impl(_sdpa, note="bias materialized as attn_mask"),
            "flex": Impl(_flex(score_mod_of), note="torch.compile(flex_attention)", compiled=True),
            "triton": Impl(_triton(kwargs_of), devices=("cuda",), note="kernels.relbias"),
        },
        baseline="reference", bytes_moved=_bytes, flops=_flops, grad_inputs=("q", "k", "v"),
        batched=("q", "k", "v"),
    )  # fmt: skip


ALIBI_ATTENTION = _case("alibi_attention", posenc.ALiBi, _alibi_mod, _alibi_kwargs)
T5_ATTENTION = _case(
    "t5_attention", lambda h: posenc.T5RelativeBias(h, 32, 128), _t5_mod, _t5_kwargs
)
