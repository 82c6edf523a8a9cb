"""Attention-level cases: self-attention over x (B, L, d_model). Every implementation's module
computes with the same parameters (built once per point, bound by name), so the backward check
compares the gradients of x and of every weight, relative tables included.

Cost model. Forward FLOPs: the four projections (4 * 2 B L d^2) and the two (L x L) products
(2 * 2 B H L^2 D = 4 B L^2 d), plus Shaw's relative terms (Q a^K^T and the per-bucket weights
times a^V: 4 B L (2K + 1) d). Backward: twice the projections' (dX and dW), 2.5 times the
attention products' (as flash-attention counts it: QK^T recomputed, dV, dP, dQ, dK), twice the
relative terms'. Bytes: a lower bound that ignores the (L x L) scores of the eager paths:
forward reads x and the weights and writes the output; backward reads dy, x and the weights and
writes dx and the weights' gradients.
"""

from __future__ import annotations

import os

import torch

import posenc
from bench.cases._common import bind, compile_impl, parameters, per_mode
from bench.registry import Case, Cost, Impl, Level, Point
from posenc import seed

CLIP = 32  # Shaw's K


def _module(factory, inputs):
    x = inputs["x"]
    return bind(factory(inputs).to(device=x.device, dtype=x.dtype), inputs["params"])


def _builder(factory):
    def build(point: Point, device, dtype):
        x = torch.randn(point.batch, point.seq_len, point.d_model, device=device, dtype=dtype)
        spec = {"x": x, "d_model": point.d_model, "num_heads": point.num_heads}
        return dict(spec, params=parameters(factory(spec), device, dtype))

    return build


def _call(module, x, **kwargs):
    return module(x, x, x, **kwargs)[0]  # (B, L, d_model): the output, not the weights


def _impl(factory, *, compiled=False, **kwargs):
    def make(inputs):
        module = _module(factory, inputs)
        fn = compile_impl(module) if compiled else module
        x = inputs["x"]
        return lambda: _call(fn, x, **kwargs)

    return make


def _truth(factory, **kwargs):
    def truth(inputs):
        return _call(_module(factory, inputs), inputs["x"], **kwargs)

    return truth


def _cost(clip: int = 0):
    def cost(point: Point, dtype, mode: str) -> Cost:
        b, seq, d = point.batch, point.seq_len, point.d_model
        proj, attn = 8 * b * seq * d * d, 4 * b * seq * seq * d
        rel = 4 * b * seq * (2 * clip + 1) * d if clip else 0
        weights = 4 * d * d + 4 * d
        forward = Cost((2 * b * seq * d + weights) * dtype.itemsize, proj + attn + rel)
        backward = Cost(
            (3 * b * seq * d + 2 * weights) * dtype.itemsize, 2 * proj + int(2.5 * attn) + 2 * rel
        )
        return per_mode(forward, backward, mode)

    return cost


class _SinusoidalThenAttention(torch.nn.Module):
    def __init__(self, d_model, num_heads, max_len):
        super().__init__()
        self.pe = posenc.SinusoidalPositionalEncoding(d_model, max_len)
        self.mha = posenc.MultiHeadAttention(d_model, num_heads)

    def forward(self, q, k, v, need_weights=True):
        q = self.pe(q)
        return self.mha(q, q, q, need_weights=need_weights)


def _length(inputs) -> int:
    return inputs["x"].shape[1] if "x" in inputs else 1


def _plain(inputs):
    return _SinusoidalThenAttention(inputs["d_model"], inputs["num_heads"], _length(inputs))


def _seed_fits(point: Point) -> str | None:
    """The tutorial's 3.6 repeats a^K into a (B, H, L, L, D) float32 tensor: skipped (and said
    so) where that alone would take more than half of this machine's memory."""
    need = 4 * point.batch * point.num_heads * point.seq_len**2 * point.head_dim
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need <= ram / 2:
        return None
    return f"needs {need / 2**30:.1f} GiB for its (B, H, L, L, D) tensor alone"


def _shaw_seed(inputs):
    return seed.RelativeMultiHeadAttention(inputs["d_model"], inputs["num_heads"], CLIP)


def _shaw(inputs):
    return posenc.RelativeMultiHeadAttention(inputs["d_model"], inputs["num_heads"], CLIP)


def _rope_seed(inputs):
    return seed.RoPEMultiHeadAttention(inputs["d_model"], inputs["num_heads"], _length(inputs))


def _rope(inputs):
    return posenc.RoPEMultiHeadAttention(inputs["d_model"], inputs["num_heads"], _length(inputs))


def _case(name, factory, impls, clip: int = 0):
    return Case(
        name=name,
        level=Level.ATTENTION,
        build=_builder(factory),
        reference=_truth(factory),
        impls=impls,
        baseline="reference",
        cost=_cost(clip),
        grad_inputs=("x", "params"),
        batched=("x",),
        truth_holds=4,
    )


ATTENTION_SINUSOIDAL = _case(
    "attention_sinusoidal",
    _plain,
    {
        "reference": Impl(_impl(_plain), holds=4),
        "sdpa": Impl(
            _impl(_plain, need_weights=False), note="F.scaled_dot_product_attention", holds=1
        ),
    },
)


def _shaw_seed_truth(inputs):
    """The tutorial's 3.6 in float64 (logits QK^T/sqrt(D) + Q a^K unscaled, no value term),
    contracted with einsum instead of through its (B, H, L, L, D) tensor."""
    module = _module(_shaw_seed, inputs)
    x = inputs["x"]
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
    _shaw,
    {
        "seed": Impl(
            _impl(_shaw_seed),
            reference=_shaw_seed_truth,
            devices=("cpu",),
            supports=_seed_fits,
            note="tutorial 3.6: no value term, (B,H,L,L,D) tensor",
        ),
        "reference": Impl(_impl(_shaw), holds=4),
        "compiled": Impl(_impl(_shaw, compiled=True), compiled=True, holds=2),
    },
    clip=CLIP,
)

ROPE_ATTENTION = _case(
    "rope_attention",
    _rope,
    {
        "seed": Impl(
            _impl(_rope_seed), reference=_truth(_rope_seed), note="tutorial 4.8 RoPE", holds=4
        ),
        "reference": Impl(_impl(_rope), holds=4),
        "sdpa": Impl(
            _impl(_rope, need_weights=False), note="F.scaled_dot_product_attention", holds=1
        ),
        "compiled": Impl(_impl(_rope, compiled=True), compiled=True, holds=2),
    },
)
