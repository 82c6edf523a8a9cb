"""The positional part of a layer case (bench/cases/layer.py), per encoding kind and
implementation: the keyword arguments posenc.DecoderLayer takes (embed, rotate, q_scale, gate,
attend), built from the cases' shared factories (bias.py, sequences.py, the rotations of
rope.py's implementations), and the tables a rotation reads. KIND says where each encoding acts.
"""

from __future__ import annotations

import torch

import posenc
from bench.cases import bias as Bias
from bench.cases import sequences as Seq
from bench.cases._common import bind, compile_impl, triton_kernels
from bench.cases._model import model_tables
from bench.cases._schedule import scaling_of
from bench.cases.families import FAMILIES, NO_BIAS
from bench.cases.multimodal import mrope_section, mrope_segments
from bench.registry import Point
from posenc import functional as F

PARTNER = "nope_"  # nope_<impl>: impl's attention path without the encoding
KIND = {  # where each encoding acts in the layer
    **dict.fromkeys(("sinusoidal", "learnable"), "embed"),
    **dict.fromkeys(("rope", "mrope"), "rotate"),
    **{name: "gate" if f.gated else "bias" for name, f in FAMILIES.items()},
    "irope": "temperature",  # a NoPE layer of Llama 4: its queries scaled by position
}
PREFIX = "position."  # the encoding's own parameters among the layer's


def rope_tables(encoding: str, point: Point, device, dtype):
    """cos, sin: (L, D/2) with the point's schedule, or M-RoPE's per-token (B, L, D/2)."""
    if encoding == "rope" and point.model:  # (L, R/2): its global layers' schedule
        return model_tables(point, dtype, device)
    if encoding == "rope":
        n, scaling = point.seq_len, scaling_of(point)
        return F.rope_cos_sin(
            n, point.head_dim, dtype=dtype, device=device, scaling=scaling, seq_len=n
        )
    section, interleaved = mrope_section(point.mrope_style, point.head_dim)
    ids = F.mrope_position_ids(mrope_segments(point.seq_len), device=device)
    ids = ids[:, None] + torch.arange(point.batch, device=device)[:, None]  # (3, B, L)
    return F.mrope_cos_sin(ids, point.head_dim, section, interleaved=interleaved, dtype=dtype)


def _position_params(inputs) -> dict:
    return {n[len(PREFIX) :]: p for n, p in inputs["params"].items() if n.startswith(PREFIX)}


def _attention_inputs(inputs) -> dict:
    """What the attention factories of bias.py / sequences.py read: q, k, v's shapes (stand-ins
    of no memory), the tables, the cache's lengths."""
    x, (_, heads, kv_heads, _) = inputs["x"], inputs["shape"]
    keys = inputs["cache_k"].shape[2] if "cache_k" in inputs else x.shape[1]

    def like(h, n):
        return torch.empty((), device=x.device, dtype=x.dtype).expand(
            x.shape[0], h, n, inputs["head_dim"]
        )

    att = {"q": like(heads, x.shape[1]), "k": like(kv_heads, keys), "v": like(kv_heads, keys)}
    att.update(causal=True, params=_position_params(inputs), **inputs.get("fixed", {}))
    att["sinks"] = inputs["sinks"]
    if "cache_k" in inputs:
        att.update(kv_lens=inputs["kv_lens"], ragged=inputs["ragged"])
    return att


def _rotate_eager(q, k, cos, sin, interleaved=False):
    return (
        F.apply_rope(q, cos, sin, interleaved=interleaved),
        F.apply_rope(k, cos, sin, interleaved=interleaved),
    )


def _rotation(impl: str, inputs, truth: bool = False):
    """rotate(q, k) of the implementation: tables as (L, R/2) (prefill; R = D but for a model's
    partial rotation), gathered at each row's new position (decode, in the call: positions
    change every step), or per token (M-RoPE); pairs interleaved where the model's are."""
    cos, sin = (inputs[n + ("64" if truth else "")] for n in ("cos", "sin"))
    pos = inputs["kv_lens"] - 1 if "kv_lens" in inputs else None
    pairs = inputs["interleaved"]
    if impl == "triton":
        extra = {} if pos is None else {"positions": pos}
        extra = dict(extra, interleaved=True) if pairs else extra
        apply_rope = triton_kernels().apply_rope

        def fused(q, k):  # q, k: (B, H, L, D) views of (B, L, H, D) memory
            qo, ko = apply_rope(
                q.transpose(1, 2), k.transpose(1, 2), cos, sin, layout="bshd", **extra
            )
            return qo.transpose(1, 2), ko.transpose(1, 2)

        return fused
    fn = compile_impl(_rotate_eager) if impl == "compiled" else _rotate_eager
    if pos is not None:
        return lambda q, k: fn(q, k, cos[pos][:, None, None], sin[pos][:, None, None], pairs)
    if cos.dim() == 3:  # per token (B, L, D/2): broadcast over heads
        cos, sin = cos[:, None], sin[:, None]
    return lambda q, k: fn(q, k, cos, sin, pairs)


def _embedding(encoding: str, impl: str, inputs):
    x = inputs["x"]
    if encoding == "sinusoidal":
        module = posenc.SinusoidalPositionalEncoding(x.shape[-1], x.shape[1]).to(x.device, x.dtype)
    else:
        with torch.device("meta"):
            module = posenc.LearnablePositionalEncoding(x.shape[-1], x.shape[1])
        module = bind(module, _position_params(inputs))
    return compile_impl(module) if impl == "compiled" else module


def hooks(encoding: str, impl: str, inputs, truth: bool = False) -> dict:
    """The layer's keyword arguments for the implementation of the encoding's part."""
    kind = KIND[encoding]
    if impl == "nope":
        return {}
    if impl.startswith(PARTNER):  # the row's attention path without its encoding
        factories = Seq.attentions(NO_BIAS) if "cache_k" in inputs else Bias.attentions(NO_BIAS)
        return {"attend": factories[impl.removeprefix(PARTNER)](_attention_inputs(inputs))}
    if kind == "embed":
        return {"embed": _embedding(encoding, impl, inputs)}
    if kind == "rotate":
        return {"rotate": _rotation(impl, inputs, truth)}
    if kind == "temperature":
        return {"q_scale": inputs["q_scale64" if truth else "q_scale"]}
    family = FAMILIES[encoding]
    if kind == "gate":
        return _gated(family, impl, inputs)
    factories = Seq.attentions(family) if "cache_k" in inputs else Bias.attentions(family)
    return {"attend": factories[impl](_attention_inputs(inputs))}


def _gated(family, impl: str, inputs) -> dict:
    """A gated family's hooks (FoX): its gate over the layer's normed input (the encoding's
    parameters), and attend(q, k, v, tables) computing with the tables the gate gives."""
    _, heads = inputs["shape"][:2]
    with torch.device("meta"):
        gate = family.learned(heads, inputs["head_dim"])
    gate, att = bind(gate, _position_params(inputs)), _attention_inputs(inputs)
    name = next(iter(family.per_token(1, 1, 1)))  # the gate's table, as the kernel names it

    def tables(t):
        return dict(att, params={name: t})

    if impl == "triton":
        kernel = triton_kernels().relative_attention
        sinks = att["sinks"].get("sinks")

        def attend(q, k, v, t):
            return kernel(q, k, v, causal=True, sinks=sinks, **family.kernel_args(tables(t)))

    else:

        def attend(q, k, v, t):
            return family.attention(tables(t), True)(q, k, v)

        if impl == "compiled":
            attend = compile_impl(attend)
    return {"gate": gate, "attend": attend}


def model_attention(inputs) -> dict:
    """A model layer's attention where SDPA's causal one is not it (a sliding window, sinks):
    posenc's reference, the same in every row of the point (its share is RoPE's alone)."""
    window, sinks = inputs.get("window"), inputs["sinks"].get("sinks")
    if not window and sinks is None:
        return {}
    lens = inputs.get("kv_lens")

    def attend(q, k, v):
        return F.relative_attention(q, k, v, causal=True, window=window, sinks=sinks, kv_lens=lens)

    return {"attend": attend}
