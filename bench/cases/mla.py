"""DeepSeek's multi-head latent attention (MLA: DeepSeek-V2 and V3, Kimi K2) rotates a decoupled
slice: each query head is Dn + R wide (V3: 128 + 64) and only its last R dimensions turn; the
keys' rotary part is one head of R shared by every query head, the last R dimensions of the
compressed latent (B, L, C + R) (V3: C = 512). Pairs are interleaved where the model says so
(V3's rope_interleave).

  mla_rope   q (B, L, H, Dn + R), as the query projection leaves it, and the latent
             (B, L, C + R); out: q with its slice rotated (the rest as it was) and the keys'
             rotary head (B, L, R).

Implementations:
  reference  split, posenc.functional.apply_rope on the slices, torch.cat back (the eager way);
  hf         transformers' DeepseekV3Attention's own lines: split, apply_rotary_pos_emb_interleave
             (or apply_rotary_pos_emb), cat; its output pairs come de-interleaved (the same
             permutation on q and k, so attention is unchanged): gated against a truth in that
             order;
  triton     posenc_kernels.apply_rope in place on the strided slices (its own copies of q and the
             latent): no cat, the passing dimensions never read.
With model= (an MLA preset or config.json): its head dims, latent width, rotary width, pairs and
schedule; without, V3's proportions at R = d_model / num_heads: Dn = 2R, C = 8R, half-split
pairs. Forward only (the serving path). Cost: the rotated slices read and written once.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from bench.cases._common import per_mode, triton_kernels
from bench.cases._model import MODEL, model_tables, spec_of
from bench.cases._peers import hf_impl
from bench.cases._rotary import triton_impl
from bench.registry import Case, Cost, Impl, Level, Point
from posenc import functional as F


def dims(point: Point) -> tuple[int, int, int, bool]:
    """(Dn, R, C, interleaved) of the point: its model's, or V3's proportions."""
    r = point.head_dim
    if not point.model:
        return 2 * r, r, 8 * r, False
    spec = spec_of(point.model)
    r = int(spec.rotary_dim)
    return int(spec.head_dim) - r, r, int(spec.extra["mla"]), spec.interleaved


def _tables(point: Point, dtype, device):
    if point.model:
        return model_tables(point, dtype, device)
    return F.rope_cos_sin(point.seq_len, point.head_dim, dtype=dtype, device=device)


def _build(point: Point, device, dtype):
    dn, r, c, pairs = dims(point)
    b, n, h = point.batch, point.seq_len, point.num_heads
    cos, sin = _tables(point, torch.float32, device)
    return {
        "q": torch.randn(b, n, h, dn + r, device=device).to(dtype),
        "latent": torch.randn(b, n, c + r, device=device).to(dtype),
        "cos": cos,  # (L, R/2)
        "sin": sin,
        "truth_tables": _tables(point, torch.float64, device),
        "dims": (dn, r, c, pairs),
    }


def _rotate(x, cos, sin, pairs):
    """x (B, L, heads, R) -> rotated, through (B, heads, L, R) views."""
    return F.apply_rope(x.transpose(1, 2), cos, sin, interleaved=pairs).transpose(1, 2)


def _eager(q, latent, cos, sin, dn, c, pairs):
    q_pass, q_rot = q.split([dn, q.shape[-1] - dn], -1)
    k_rot = latent[..., c:][:, :, None]  # (B, L, 1, R)
    q = torch.cat((q_pass, _rotate(q_rot, cos, sin, pairs)), -1)
    return q, _rotate(k_rot, cos, sin, pairs)[:, :, 0]


def _truth(inputs, deinterleave: bool = False):
    dn, _, c, pairs = inputs["dims"]
    q, k = _eager(
        inputs["q"].double(), inputs["latent"].double(), *inputs["truth_tables"], dn, c, pairs
    )
    if deinterleave and pairs:  # transformers' order: the even dims' results, then the odd's
        q = torch.cat((q[..., :dn], q[..., dn::2], q[..., dn + 1 :: 2]), -1)
        k = torch.cat((k[..., 0::2], k[..., 1::2]), -1)
    return q, k


def _reference(inputs):
    dn, _, c, pairs = inputs["dims"]
    q, latent, cos, sin = inputs["q"], inputs["latent"], inputs["cos"], inputs["sin"]
    return lambda: _eager(q, latent, cos, sin, dn, c, pairs)


def _triton(inputs):
    """In place on its own copies: the slices are strided views of q's heads and the latent."""
    dn, _, c, pairs = inputs["dims"]
    q, latent = inputs["q"].clone(), inputs["latent"].clone()
    q_rot, k_rot = q[..., dn:], latent[..., c:][:, :, None]
    apply_rope, cos, sin = triton_kernels().apply_rope, inputs["cos"], inputs["sin"]

    def call():
        apply_rope(q_rot, k_rot, cos, sin, layout="bshd", inplace=True, interleaved=pairs)
        return q, k_rot[:, :, 0]

    return call


def _hf(inputs):
    """As DeepseekV3Attention.forward: q (B, H, L, Dn + R) split, the latent split and its rotary
    part viewed (B, 1, L, R), the (1, L, R) tables of both halves, rotate, cat."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    dn, r, c, pairs = inputs["dims"]
    q_states, latent = inputs["q"].transpose(1, 2), inputs["latent"]
    b, n = latent.shape[:2]
    cos, sin = (torch.cat((t, t), -1)[None] for t in (inputs["cos"], inputs["sin"]))
    rotate = ds.apply_rotary_pos_emb_interleave if pairs else ds.apply_rotary_pos_emb

    def call():
        q_pass, q_rot = torch.split(q_states, [dn, r], dim=-1)
        _, k_rot = torch.split(latent, [c, r], dim=-1)
        q_rot, k_rot = rotate(q_rot, k_rot.view(b, 1, n, r), cos, sin)
        return torch.cat((q_pass, q_rot), dim=-1).transpose(1, 2), k_rot[:, 0]

    return call


def _cost(point: Point, dtype, mode: str) -> Cost:
    """The slices of q and the latent's rotary head read and written once, two float32 tables,
    3 FLOPs an element."""
    _, r, _, _ = dims(point)
    n = point.batch * point.seq_len * r * (point.num_heads + 1)
    one = Cost(2 * n * dtype.itemsize + 2 * point.seq_len * r // 2 * 4, 3 * n)
    return per_mode(one, one, mode)


def _one_head_slice(point: Point) -> str | None:
    if point.head_dim % 2:
        return f"head_dim={point.head_dim} is odd"
    if point.model and not spec_of(point.model).extra.get("mla"):
        return f"{point.model}: no MLA (its RoPE: the rope case)"
    return None


MLA = Case(
    name="mla_rope",
    level=Level.ENCODER,
    build=_build,
    reference=_truth,
    impls={
        "reference": Impl(_reference, grad=False, note="split, rotate, cat"),
        "hf": replace(
            hf_impl(_hf, note="transformers' DeepseekV3Attention lines", grad=False),
            reference=lambda inputs: _truth(inputs, deinterleave=True),
        ),
        "triton": replace(triton_impl(_triton), grad=False),
    },
    baseline="reference",
    cost=_cost,
    grad_inputs=(),
    batched=("q", "latent"),
    knobs=(MODEL,),
    constraint=_one_head_slice,
)
