"""Attention-level cases: self-attention over x (B, L, d_model), weights shared by every impl.

FLOPs count the four projections (4 * 2 B L d^2) and the two (L x L) products (2 * 2 B H L^2 D);
bytes count x in, out back, and the four weight matrices: a lower bound, since the (L x L)
scores of the eager paths are not counted.
"""

from __future__ import annotations

import torch

import posenc
from bench.registry import Case, Impl, Point
from posenc import seed

CLIP = 32  # Shaw's K


def _build(point: Point, device, dtype):
    return {
        "x": torch.randn(point.batch, point.seq_len, point.d_model, device=device, dtype=dtype),
        "d_model": point.d_model,
        "num_heads": point.num_heads,
        "seed": torch.initial_seed(),  # the same weights for every impl of this point
    }


def _module(factory, inputs, dtype=None):
    torch.manual_seed(inputs["seed"])
    module = factory(inputs).to(inputs["x"].device)
    return module.to(dtype or inputs["x"].dtype)


def _call(module, x, **kwargs):
    return module(x, x, x, **kwargs)[0]  # (B, L, d_model): the output, not the weights


def _impl(factory, *, compiled=False, **kwargs):
    def make(inputs):
        module = _module(factory, inputs)
        fn = torch.compile(module) if compiled else module
        x = inputs["x"]
        return lambda: _call(fn, x, **kwargs)

    return make


def _truth(factory, **kwargs):
    def truth(inputs):
        return _call(_module(factory, inputs, torch.float64), inputs["x"].double(), **kwargs)

    return truth


def _bytes(point: Point, dtype) -> int:
    return (2 * point.batch * point.seq_len * point.d_model + 4 * point.d_model**2) * dtype.itemsize


def _flops(point: Point) -> int:
    b, seq, d = point.batch, point.seq_len, point.d_model
    return 8 * b * seq * d * d + 4 * b * seq * seq * d


class _SinusoidalThenAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, max_len):
        super().__init__()
        self.pe = posenc.SinusoidalPositionalEncoding(d_model, max_len)
        self.mha = posenc.MultiHeadAttention(d_model, num_heads)

    def forward(self, q, k, v, need_weights=True):
        q = self.pe(q)
        return self.mha(q, q, q, need_weights=need_weights)


def _plain(inputs):
    return _SinusoidalThenAttention(inputs["d_model"], inputs["num_heads"], inputs["x"].shape[1])


def _shaw_seed(inputs):
    return seed.RelativeMultiHeadAttention(inputs["d_model"], inputs["num_heads"], CLIP)


def _shaw(inputs):
    return posenc.RelativeMultiHeadAttention(inputs["d_model"], inputs["num_heads"], CLIP)


def _rope_seed(inputs):
    return seed.RoPEMultiHeadAttention(inputs["d_model"], inputs["num_heads"], inputs["x"].shape[1])


def _rope(inputs):
    return posenc.RoPEMultiHeadAttention(
        inputs["d_model"], inputs["num_heads"], inputs["x"].shape[1]
    )


def _case(name, reference, impls):
    return Case(name=name, level="attention", build=_build, reference=reference, impls=impls,
                baseline="reference", bytes_moved=_bytes, flops=_flops, grad_inputs=("x",),
                batched=("x",))  # fmt: skip


ATTENTION_SINUSOIDAL = _case(
    "attention_sinusoidal",
    _truth(_plain),
    {
        "reference": Impl(_impl(_plain)),
        "sdpa": Impl(_impl(_plain, need_weights=False), note="F.scaled_dot_product_attention"),
    },
)


def _shaw_seed_truth(inputs):
    """The tutorial's 3.6 in float64 (logits QK^T/sqrt(D) + Q a^K unscaled, no value term),
    contracted with einsum instead of through its (B, H, L, L, D) tensor."""
    module = _module(_shaw_seed, inputs, torch.float64)
    x = inputs["x"].double()
    b, seq, d_model = x.shape
    h = module.num_heads

    def heads(t):
        return t.view(b, seq, h, -1).transpose(1, 2)

    q, k, v = heads(module.w_q(x)), heads(module.w_k(x)), heads(module.w_v(x))
    idx = module.rel_pos_encoding.get_relative_positions(seq).to(x.device)
    a_k = module.rel_pos_encoding.relative_position_k.weight[idx]  # (L, L, D)
    logits = q @ k.transpose(-1, -2) / module.d_k**0.5 + torch.einsum("bhid,ijd->bhij", q, a_k)
    out = torch.softmax(logits, -1) @ v
    return module.w_o(out.transpose(1, 2).reshape(b, seq, d_model))


SHAW_ATTENTION = _case(
    "shaw_attention",
    _truth(_shaw),
    {
        "seed": Impl(
            _impl(_shaw_seed),
            reference=_truth(_shaw_seed),
            devices=("cpu",),
            note="tutorial 3.6: no value term, (B,H,L,L,D) tensor",
        ),  # fmt: skip
        "reference": Impl(_impl(_shaw)),
        "compiled": Impl(_impl(_shaw, compiled=True), compiled=True),
    },
)

ROPE_ATTENTION = _case(
    "rope_attention",
    _truth(_rope),
    {
        "seed": Impl(_impl(_rope_seed), reference=_truth(_rope_seed), note="tutorial 4.8 RoPE"),
        "reference": Impl(_impl(_rope)),
        "sdpa": Impl(_impl(_rope, need_weights=False), note="F.scaled_dot_product_attention"),
        "compiled": Impl(_impl(_rope, compiled=True), compiled=True),
    },
)
