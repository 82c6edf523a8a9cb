"""RoPE as vision-language and vision models apply it: multi-axis M-RoPE over per-token tables,
and 2D RoPE over a patch grid.

`mrope`: q (B, Hq, L, D) and k (B, Hk, L, D) of a text + image sequence (L / 8 text tokens, a
square image grid of about 3/4 of L, text after it; sequence b shifted by b positions), rotated
by M-RoPE's per-token tables (B, L, D/2): knob `mrope_style` qwen2_vl (contiguous sections
[D/8, 3D/16, 3D/16], [16, 24, 24] at D = 128) or qwen3_vl (interleaved [3D/16, 5D/32, 5D/32],
[24, 20, 20]). The tables are built once per forward in a model and shared by its layers, so
they are built here, outside the timed call; each layer pays the rotation. Liger-Kernel's M-RoPE
takes the per-axis tables (3, B, L, D) and the sections, as the transformers patch calls it.

`rope_2d`: a ViT's patches, L = side^2 in row-major order, rotated by 2D RoPE's (L, D/2) tables
(knob `rope_2d_split`: pixtral, axial, axial_xy; posenc.functional.rope_2d_cos_sin), with the
pairs each model uses (half-split for pixtral and axial, interleaved for axial_xy: RoPE-ViT).

Cost model: as `rope` (bench/cases/rope.py), with the tables' real size (per-token for mrope).
"""

from __future__ import annotations

import math

import torch

from bench.cases._common import NUM_KV_HEADS, compile_impl, kv_heads
from bench.cases._peers import hf_impl, mrope_call
from bench.cases._rotary import (
    LAYOUT,
    heads_tensor,
    kernel_call,
    liger_impl,
    own_copies,
    rotation_cost,
    triton_impl,
)
from bench.checks import one_of
from bench.registry import Call, Case, Impl, Knob, Level, Point
from posenc import functional as F

MROPE_STYLE = Knob(
    "mrope_style",
    "qwen2_vl",
    "M-RoPE's sections: qwen2_vl (contiguous, [16, 24, 24] at D=128) or qwen3_vl (interleaved, "
    "[24, 20, 20])",
    one_of("qwen2_vl", "qwen3_vl"),
)
ROPE_2D_SPLIT = Knob(
    "rope_2d_split",
    "pixtral",
    "2D RoPE's split of the frequencies between rows and columns: " + ", ".join(F.SPLITS),
    one_of(*F.SPLITS),
)


def mrope_section(style: str, head_dim: int) -> tuple[list[int], bool]:
    """(sections, interleaved) of a style at head_dim (a multiple of 16, of 32 for qwen3_vl)."""
    if style == "qwen2_vl":
        return [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16], False
    return [3 * head_dim // 16, 5 * head_dim // 32, 5 * head_dim // 32], True


def mrope_segments(seq_len: int) -> list:
    """Text, one square image grid of about 3/4 of the tokens, text: seq_len tokens in all."""
    text = max(seq_len // 8, 1)
    side = max(math.isqrt(3 * seq_len // 4), 1)
    if text + side * side > seq_len:
        side = max(math.isqrt(seq_len - text), 1)
    return [text, (1, side, side), seq_len - text - side * side]


def _impls(reference, compiled, triton, liger) -> dict[str, Impl]:
    """Both cases' implementations: eager, compiled, the kernel, Liger (liger: (make, supports))."""
    return {
        "reference": Impl(reference),
        "compiled": Impl(compiled, compiled=True),
        "triton": triton_impl(triton),
        "liger": liger_impl(*liger),
    }


def _position_ids(point: Point, device):
    ids = F.mrope_position_ids(mrope_segments(point.seq_len), device=device)
    shift = torch.arange(point.batch, device=device)[:, None]
    return ids[:, None] + shift  # (3, B, L): sequence b starts at position b


def _build_mrope(point: Point, device, dtype):
    section, interleaved = mrope_section(point.mrope_style, point.head_dim)
    pos = _position_ids(point, device)

    def tables(dt):
        return F.mrope_cos_sin(pos, point.head_dim, section, interleaved=interleaved, dtype=dt)

    (cos, sin), (cos64, sin64) = tables(torch.float32), tables(torch.float64)
    return {
        "q": heads_tensor(point, point.num_heads, device, dtype),
        "k": heads_tensor(point, kv_heads(point), device, dtype),
        "cos": cos,  # (B, L, D/2) per token, float32
        "sin": sin,
        "cos64": cos64,  # the same in float64 for the truth (per sequence: batched)
        "sin64": sin64,
        "position_ids": pos,
        "section": section,
        "style": point.mrope_style,
    }


def _heads(inputs, suffix=""):
    """The per-token tables as (B, 1, L, D/2): broadcast over heads."""
    return inputs["cos" + suffix][:, None], inputs["sin" + suffix][:, None]


def _truth_mrope(inputs):
    tables = _heads(inputs, "64")
    return F.apply_rope(inputs["q"], *tables), F.apply_rope(inputs["k"], *tables)


def _rotate_both(q, k, cos, sin):
    return F.apply_rope(q, cos, sin), F.apply_rope(k, cos, sin)


def _reference_mrope(inputs):
    q, k, (cos, sin) = inputs["q"], inputs["k"], _heads(inputs)
    return lambda: _rotate_both(q, k, cos, sin)


def _compiled_mrope(inputs):
    fn = compile_impl(_rotate_both)
    q, k, (cos, sin) = inputs["q"], inputs["k"], _heads(inputs)
    return lambda: fn(q, k, cos, sin)


def _triton_mrope(inputs):
    return kernel_call(inputs["q"], inputs["k"], inputs["cos"], inputs["sin"])


def _hf_mrope(inputs):
    q = inputs["q"]
    return mrope_call(
        inputs["style"], inputs["section"], q.shape[-1], inputs["position_ids"], q, inputs["k"]
    )


def _liger_mrope(inputs):
    """Liger's Qwen2-VL M-RoPE as transformers' patch calls it: q and k (B, H, L, D) views of
    (B, L, H, D) memory, the per-axis tables (3, B, L, D) with both halves (built once here)
    and the sections; in place on its own copies (bench/cases/_rotary.py)."""
    from liger_kernel.ops.qwen2vl_mrope import LigerQwen2VLMRopeFunction

    q, k = own_copies(inputs)
    head_dim = q.shape[-1]
    cos, sin = F.rope_cos_sin(inputs["position_ids"], head_dim)  # (3, B, L, D/2)
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    section = inputs["section"]
    return Call(
        lambda: LigerQwen2VLMRopeFunction.apply(q, k, cos, sin, section), leaves={"q": q, "k": k}
    )


def _liger_mrope_supports(point: Point) -> str | None:
    if point.mrope_style != "qwen2_vl":
        return "Liger's M-RoPE has contiguous sections only (Qwen2-VL's)"
    if point.layout != "bshd":
        return f"layout={point.layout}: Liger's kernel reads (B, L, H, D) memory"
    return None


def _mrope_cost(point: Point, dtype, mode: str):
    return rotation_cost(point, dtype, mode, point.batch * point.seq_len, point.head_dim // 2)


def _mrope_constraint(point: Point) -> str | None:
    step = 16 if point.mrope_style == "qwen2_vl" else 32
    if point.head_dim % step:
        return (
            f"head_dim={point.head_dim}: {point.mrope_style}'s sections need a multiple of {step}"
        )
    return None


MROPE = Case(
    name="mrope",
    level=Level.ENCODER,
    build=_build_mrope,
    reference=_truth_mrope,
    impls={
        **_impls(
            _reference_mrope,
            _compiled_mrope,
            _triton_mrope,
            (_liger_mrope, _liger_mrope_supports),
        ),
        "hf": hf_impl(_hf_mrope, note="transformers' Qwen2-VL / Qwen3-VL rotary and rotation"),
    },
    baseline="reference",
    cost=_mrope_cost,
    grad_inputs=("q", "k"),
    batched=("q", "k", "cos64", "sin64"),
    knobs=(LAYOUT, NUM_KV_HEADS, MROPE_STYLE),
    constraint=_mrope_constraint,
)


# ---------------------------------------------------------------------------------------------
# 2D RoPE over a patch grid
# ---------------------------------------------------------------------------------------------


def _side(point: Point) -> int:
    return math.isqrt(point.seq_len)


def _build_2d(point: Point, device, dtype):
    side = _side(point)

    def tables(dt):
        return F.rope_2d_cos_sin(
            side, side, point.head_dim, split=point.rope_2d_split, dtype=dt, device=device
        )

    (cos, sin), (cos64, sin64) = tables(torch.float32), tables(torch.float64)
    return {
        "q": heads_tensor(point, point.num_heads, device, dtype),
        "k": heads_tensor(point, kv_heads(point), device, dtype),
        "cos": cos,  # (L, D/2): row n is patch n's
        "sin": sin,
        "cos64": cos64,
        "sin64": sin64,
        "interleaved": point.rope_2d_split == "axial_xy",
    }


def _rotate_pairs(interleaved: bool):
    def rotate(q, k, cos, sin):
        return (
            F.apply_rope(q, cos, sin, interleaved=interleaved),
            F.apply_rope(k, cos, sin, interleaved=interleaved),
        )

    return rotate


def _truth_2d(inputs):
    fn = _rotate_pairs(inputs["interleaved"])
    return fn(inputs["q"], inputs["k"], inputs["cos64"], inputs["sin64"])


def _reference_2d(inputs):
    fn = _rotate_pairs(inputs["interleaved"])
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    return lambda: fn(q, k, cos, sin)


def _compiled_2d(inputs):
    fn = compile_impl(_rotate_pairs(inputs["interleaved"]))
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    return lambda: fn(q, k, cos, sin)


def _triton_2d(inputs):
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    return kernel_call(q, k, cos, sin, interleaved=inputs["interleaved"])


def _liger_2d(inputs):
    """Liger's RoPE with the grid's tables as its (1, L, D) cos and sin (both halves)."""
    from liger_kernel.ops.rope import LigerRopeFunction

    q, k = own_copies(inputs)
    cos, sin = (torch.cat((inputs[n], inputs[n]), -1)[None] for n in ("cos", "sin"))
    return Call(lambda: LigerRopeFunction.apply(q, k, cos, sin), leaves={"q": q, "k": k})


def _liger_2d_supports(point: Point) -> str | None:
    if point.rope_2d_split == "axial_xy":
        return "axial_xy pairs adjacent dims: Liger's RoPE pairs halves only"
    if point.layout != "bshd":
        return f"layout={point.layout}: Liger's kernel reads (B, L, H, D) memory"
    return None


def _2d_cost(point: Point, dtype, mode: str):
    return rotation_cost(point, dtype, mode, point.seq_len, point.head_dim // 2)


def _2d_constraint(point: Point) -> str | None:
    if _side(point) ** 2 != point.seq_len:
        return f"seq_len={point.seq_len} is not a square grid of patches"
    if point.head_dim % 4:
        return f"head_dim={point.head_dim}: 2D RoPE needs a multiple of 4"
    return None


ROPE_2D = Case(
    name="rope_2d",
    level=Level.ENCODER,
    build=_build_2d,
    reference=_truth_2d,
    impls=_impls(_reference_2d, _compiled_2d, _triton_2d, (_liger_2d, _liger_2d_supports)),
    baseline="reference",
    cost=_2d_cost,
    grad_inputs=("q", "k"),
    batched=("q", "k"),
    knobs=(LAYOUT, NUM_KV_HEADS, ROPE_2D_SPLIT),
    constraint=_2d_constraint,
)
