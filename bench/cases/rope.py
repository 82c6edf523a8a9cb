"""RoPE applied to q (B, Hq, L, D) and k (B, Hk, L, D): the encoder-level rotary case.

Knobs: `rope_variant` is plain RoPE, xPos (q's tables times a per-position scale, k's divided
by it: scale_base 512, centred at L/2 as flash-attn centres it) or p-RoPE (p = 1/4: only the
highest quarter of the frequencies turn; the kernel gets only their tables); `layout` is the
memory order (bhsd, or bshd: the (B, H, L, D) tensors are transposed views of (B, L, H, D)
memory, as a model's projections produce them), `num_kv_heads` the heads of k (grouped-query
attention). Every implementation gets the same logical tensors; each is called the way its own
documentation calls it, in that memory: nothing is made contiguous inside a timed call except
where an implementation does so itself (said in its row).

Cost model: forward and backward each read q and k (or their gradients) once and write them
once, plus the (L, D/2) float32 cos and sin tables; 3 FLOPs per element (a pair: 4 mul, 2 add).
"""

from __future__ import annotations

import torch

from bench.cases._common import (
    NUM_KV_HEADS,
    compile_impl,
    native_impl,
)
from bench.cases._model import MODEL, interleaved, model_only, model_tables, rotary_cols
from bench.cases._peers import (
    hf_impl,
    llama_config,
    model_call,
    model_hf_problem,
    rotary_tables,
)
from bench.cases._rotary import (
    LAYOUT,
    heads_tensor,
    liger_copies,
    liger_impl,
    rotation_cost,
    triton_call,
    triton_impl,
)
from bench.checks import at_least_one, one_of, positive_ints, positive_numbers
from bench.registry import Call, Case, Cost, Impl, Knob, Level, Point
from posenc import functional as F
from posenc import seed

# Long-context schedules (posenc/_scaling.py), as a sweep knob: an 8x extension of a 4096-token
# original context, the shape of Llama 3.1's (which extends 8192 by 8) at this harness's lengths.
SCALINGS = ("none", "linear", "dynamic", "yarn", "llama3", "longrope")
ROPE_SCALING = Knob(
    "rope_scaling",
    "none",
    "RoPE's long-context schedule: " + ", ".join(SCALINGS),
    one_of(*SCALINGS),
    model_sets=True,
)
ORIGINAL, FACTOR = 4096, 8.0  # the knobs' defaults: an 8x extension of a 4096-token context


def _schedule_knob(name: str, default, text: str, check) -> Knob:
    return Knob(name, default, text, check, quiet_default=True, model_sets=True)


THETA_HELP, FACTOR_HELP = "RoPE's base (Llama 3: 500000)", "the schedule's extension factor"
ROPE_THETA = _schedule_knob("rope_theta", 10000.0, THETA_HELP, positive_numbers)
ROPE_FACTOR = _schedule_knob("rope_factor", FACTOR, FACTOR_HELP, at_least_one)
ORIGINAL_HELP = "the schedule's original context (original_max_position_embeddings)"
ROPE_ORIGINAL = _schedule_knob("rope_original", ORIGINAL, ORIGINAL_HELP, positive_ints)
SCHEDULE = (ROPE_THETA, ROPE_FACTOR, ROPE_ORIGINAL)
VARIANTS = ("plain", "xpos", "p_rope")
ROPE_VARIANT = Knob(
    "rope_variant",
    "plain",
    "RoPE's per-frequency form: plain, xpos (scale_base 512) or p_rope (p = 1/4)",
    one_of(*VARIANTS),
    model_sets=True,
)
XPOS_SCALE_BASE, P_ROPE = 512.0, 0.25


def scaling_of(point: Point) -> dict | None:
    """The scaling dict of the point's schedule (knobs rope_scaling, rope_factor,
    rope_original); LongRoPE's per-dimension factors: 1 (short) and 1 to the extension's factor,
    rising with the wavelength (long), as its searched factors do."""
    name, factor = point.rope_scaling, float(point.rope_factor)
    if name == "none":
        return None
    base = {"type": name, "original_max_position_embeddings": point.rope_original}
    if name == "longrope":
        pairs = point.head_dim // 2
        long = [1.0 + (factor - 1.0) * i / max(pairs - 1, 1) for i in range(pairs)]
        return dict(base, short_factor=[1.0] * pairs, long_factor=long, factor=factor)
    if name == "linear":
        return {"type": "linear", "factor": factor}
    return dict(base, factor=factor)


def _scaled_tables(point: Point, dtype, device):
    """cos, sin (L, D/2) with the point's schedule (its model's, with model=: (L, R/2) for a
    partial rotary R); p-RoPE's still frequencies have cos 1, sin 0."""
    if point.model:
        return model_tables(point, dtype, device)
    return F.rope_cos_sin(
        point.seq_len,
        point.head_dim,
        float(point.rope_theta),
        dtype=dtype,
        device=device,
        scaling=scaling_of(point),
        seq_len=point.seq_len,
        rotate_fraction=P_ROPE if point.rope_variant == "p_rope" else 1.0,
    )


def _plain_only(point: Point) -> str | None:
    if point.model:
        return "the tutorial's RoPE is no model's"
    if point.rope_variant != "plain":
        return f"the tutorial's RoPE has no {point.rope_variant}"
    return None if point.rope_scaling == "none" else "the tutorial's RoPE has no scaling"


def _qk_tables(cos, sin, scale):
    """((cos, sin) of q, (cos, sin) of k): the same but for xPos, which scales them apart."""
    if scale is None:
        return (cos, sin), (cos, sin)
    return (cos * scale, sin * scale), (cos / scale, sin / scale)


def _tables(point: Point, dtype, device):
    """cos, sin and xPos's scale (None for the other variants), built once per dtype."""
    scale = _xpos(point, dtype, device) if point.rope_variant == "xpos" else None
    return (*_scaled_tables(point, dtype, device), scale)


def _xpos(point: Point, dtype, device):
    return F.xpos_scale(
        point.seq_len,
        point.head_dim,
        XPOS_SCALE_BASE,
        center=point.seq_len // 2,
        dtype=dtype,
        device=device,
    )


def _build(point: Point, device, dtype):
    cos, sin, scale = _tables(point, torch.float32, device)
    inputs = {
        "q": heads_tensor(point, point.num_heads, device, dtype),
        "k": heads_tensor(point, point.kv_heads, device, dtype),
        "cos": cos,  # (L, D/2) float32, times the schedule's attention factor
        "sin": sin,
        "tables": _qk_tables(cos, sin, scale),  # what an eager user precomputes: q's, k's
        "truth_tables": _qk_tables(*_tables(point, torch.float64, device)),  # for the truth
        "kernel_args": {} if scale is None else {"xpos_scale": scale},  # the kernel's own
        "interleaved": interleaved(point),  # GPT-J pairs (the model's, with model=)
        "point": point,  # for the implementations that build their own tables (hf)
    }
    if point.rope_variant == "p_rope":  # the kernel reads only the frequencies that turn
        n = F.rotating_frequencies(point.head_dim, P_ROPE)
        inputs["cos"], inputs["sin"] = cos[:, :n].contiguous(), sin[:, :n].contiguous()
        inputs["kernel_args"] = {"rotary_dim": point.head_dim}
    if inputs["interleaved"]:
        inputs["kernel_args"] = dict(inputs["kernel_args"], interleaved=True)
    return inputs


def _truth(inputs):
    (cq, sq), (ck, sk) = inputs["truth_tables"]
    pairs = inputs["interleaved"]
    return (
        F.apply_rope(inputs["q"], cq, sq, interleaved=pairs),
        F.apply_rope(inputs["k"], ck, sk, interleaved=pairs),
    )


def _seed_module(inputs, dtype=None):
    q = inputs["q"]
    module = seed.RoPEPositionalEncoding(q.shape[-1], q.shape[-2]).to(q.device)
    return module.double() if dtype == torch.float64 else module


def _seed(inputs):
    rope = _seed_module(inputs)
    return lambda: (rope(inputs["q"]), rope(inputs["k"]))


def _seed_truth(inputs):
    rope = _seed_module(inputs, torch.float64)
    return rope(inputs["q"]), rope(inputs["k"])


def reference_fn(q, k, tables_q, tables_k, interleaved=False):
    return (
        F.apply_rope(q, *tables_q, interleaved=interleaved),
        F.apply_rope(k, *tables_k, interleaved=interleaved),
    )


def _reference(inputs):
    q, k, (tq, tk), pairs = inputs["q"], inputs["k"], inputs["tables"], inputs["interleaved"]
    return lambda: reference_fn(q, k, tq, tk, pairs)


def _reference_out(inputs):
    q, k, (tq, tk), pairs = inputs["q"], inputs["k"], inputs["tables"], inputs["interleaved"]
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)  # preallocated: not timed
    return lambda: (
        F.apply_rope(q, *tq, out=q_out, interleaved=pairs),
        F.apply_rope(k, *tk, out=k_out, interleaved=pairs),
    )


def _compiled(inputs):
    fn = compile_impl(reference_fn)
    q, k, (tq, tk), pairs = inputs["q"], inputs["k"], inputs["tables"], inputs["interleaved"]
    return lambda: fn(q, k, tq, tk, pairs)


def _triton(inputs):
    return triton_call(
        inputs["q"], inputs["k"], inputs["cos"], inputs["sin"], **inputs["kernel_args"]
    )


def _native_inplace(inputs):
    """The C kernel in place (inplace=True) on private copies of q and k, which it overwrites
    each call: no output to allocate."""
    q, k = liger_copies(inputs)
    return triton_call(q, k, inputs["cos"], inputs["sin"], inplace=True, **inputs["kernel_args"])


def _liger(inputs):
    """As Liger's tests and Hugging Face's Llama call it: q and k (B, H, L, D) views of
    (B, L, H, D) memory, cos and sin (1, L, D) with both halves, built once here. It writes
    into q and k, so it gets copies of its own; the copies' memory order is the point's (bhsd
    memory: `liger_copy`, whose call includes Liger's own copy to bshd and back)."""
    from liger_kernel.ops.rope import LigerRopeFunction

    q, k = liger_copies(inputs)
    cos = torch.cat((inputs["cos"], inputs["cos"]), -1)[None]  # (1, L, D)
    sin = torch.cat((inputs["sin"], inputs["sin"]), -1)[None]
    return Call(lambda: LigerRopeFunction.apply(q, k, cos, sin), leaves={"q": q, "k": k})


def _hf(inputs):
    """transformers' `apply_rotary_pos_emb` as its Llama attention calls it: q and k (B, H, L, D)
    in the point's memory (a model's are bshd: views of its projections), the (1, L, D) tables
    its rotary embedding returns for the point's schedule (float32 angles, in q's dtype)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k = inputs["q"], inputs["k"]
    point = inputs["point"]
    if point.model:
        return model_call(point.model, q, k)
    config = llama_config(
        point.head_dim,
        point.num_heads,
        point.kv_heads,
        float(point.rope_theta),
        scaling_of(point),
        P_ROPE if point.rope_variant == "p_rope" else 1.0,
    )
    positions = torch.arange(point.seq_len, device=q.device)[None]
    cos, sin = rotary_tables(config, positions, q.dtype)
    return lambda: apply_rotary_pos_emb(q, k, cos, sin)


def _hf_supports(point: Point) -> str | None:
    if point.model:  # read from the model's own code (bench.cases._peers.model_hf_problem)
        return model_hf_problem(point.model, point.head_dim)
    if point.rope_variant == "xpos":
        return "transformers has no xPos"
    if point.rope_variant == "p_rope" and point.rope_scaling not in ("none", "linear"):
        return f"transformers' proportional RoPE has no {point.rope_scaling} schedule"
    return None


def liger_only(layout: str, other: str):
    def supports(point: Point) -> str | None:
        if point.model and (interleaved(point) or 2 * rotary_cols(point) < point.head_dim):
            return "Liger's RoPE rotates whole heads in half-split pairs"
        if point.rope_variant != "plain":
            return f"Liger's RoPE has no {point.rope_variant}"
        if point.layout == layout:
            return None
        return f"layout={point.layout}: see {other} (Liger's kernel reads (B, L, H, D) memory)"

    return supports


def _cost(point: Point, dtype, mode: str) -> Cost:
    cols = rotary_cols(point)
    if point.rope_variant == "p_rope":
        cols = F.rotating_frequencies(point.head_dim, P_ROPE)
    return rotation_cost(point, dtype, mode, point.seq_len, cols)


ROPE = Case(
    name="rope",
    level=Level.ENCODER,
    build=_build,
    reference=_truth,
    impls={
        "seed": Impl(
            _seed, reference=_seed_truth, note="tutorial 4.5: not a rotation", supports=_plain_only
        ),
        "reference": Impl(_reference),
        "reference_out": Impl(_reference_out, grad=False, note="out= preallocated"),
        "compiled": Impl(_compiled, compiled=True),
        "hf": hf_impl(_hf, _hf_supports, note="transformers' apply_rotary_pos_emb"),
        "triton": triton_impl(_triton),
        "native": native_impl(_triton),
        "native_inplace": native_impl(_native_inplace, grad=False, note="in place: no output"),
        "liger": liger_impl(_liger, liger_only("bshd", "liger_copy")),
        "liger_copy": liger_impl(
            _liger,
            liger_only("bhsd", "liger"),
            note="bhsd memory: includes Liger's .contiguous() to bshd",
        ),
    },
    baseline="reference",
    cost=_cost,
    grad_inputs=("q", "k"),
    batched=("q", "k"),
    knobs=(LAYOUT, NUM_KV_HEADS, ROPE_SCALING, ROPE_VARIANT, *SCHEDULE, MODEL),
    constraint=lambda p: f"head_dim={p.head_dim} is odd" if p.head_dim % 2 else model_only(p),
)
