"""RoPE applied to q (B, Hq, L, D) and k (B, Hk, L, D): the encoder-level rotary case.

Knobs: `rope_variant` is plain RoPE, xPos (q's tables times a per-position scale, k's divided
by it: scale_base 512, centred at L/2 as flash-attn centres it) or p-RoPE (p = 1/4: only the
highest quarter of the frequencies turn; the kernel gets only their tables); `layout` is the
memory order (bhsd, or bshd: the (B, H, L, D) tensors are transposed views of (B, L, H, D)
memory, as a model's projections produce them), `num_kv_heads` the heads of k (grouped-query
attention), `rope_targets` what turns: q and k, q alone (an indexer's queries), or q and k then
an output shaped like q turned back by minus the angles (DeepSeek-V4's attention, whose values
are its rotated keys). With model=, the model's pairs, rotary width and the rotated slice's
place in the head (DeepSeek-V4's last 64 of 512 dims), all read from its code in transformers.
Every implementation gets the same logical tensors; each is called the way its own
documentation calls it, in that memory: nothing is made contiguous inside a timed call except
where an implementation does so itself (said in its row).

Why this file is long: ten implementations of one case, each called as its own documentation
calls it, and the forms they take (variants, targets, a model's slice) beside them.

Cost model: forward and backward each read the turned tensors (or their gradients) once and
write them once, plus the (L, D/2) float32 cos and sin tables; 3 FLOPs per element (a pair:
4 mul, 2 add).
"""

from __future__ import annotations

import torch

from bench.cases._common import NUM_KV_HEADS, compile_impl, kv_heads, native_impl
from bench.cases._model import (
    MODEL,
    interleaved,
    model_only,
    model_tables,
    rotary_cols,
    rotary_start,
    spec_of,
)
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
    kernel_call,
    liger_impl,
    own_copies,
    rotation_cost,
    triton_impl,
)
from bench.cases._schedule import ROPE_SCALING, SCHEDULE, scaling_of
from bench.checks import one_of
from bench.registry import Call, Case, Cost, Impl, Knob, Level, Point
from posenc import functional as F
from posenc import seed

VARIANTS = ("plain", "xpos", "p_rope")
ROPE_VARIANT = Knob(
    "rope_variant",
    "plain",
    "RoPE's per-frequency form: plain, xpos (scale_base 512) or p_rope (p = 1/4)",
    one_of(*VARIANTS),
    set_by="model",
)
XPOS_SCALE_BASE, P_ROPE = 512.0, 0.25
TARGETS = {  # what turns: the tensors by name, in the outputs' order
    "qk": ("q", "k"),
    "q": ("q",),
    "qk_out": ("q", "k", "o"),
}
ROPE_TARGETS = Knob(
    "rope_targets",
    "qk",
    "what turns: qk (q and k), q (q alone: an indexer's queries) or qk_out (q and k, then "
    "an output shaped like q turned back at the query's position: DeepSeek-V4's attention)",
    one_of(*TARGETS),
    quiet_default=True,
)


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
    if point.rope_targets != "qk":
        return f"the tutorial's RoPE turns q and k (rope_targets={point.rope_targets})"
    if point.rope_variant != "plain":
        return f"the tutorial's RoPE has no {point.rope_variant}"
    return None if point.rope_scaling == "none" else "the tutorial's RoPE has no scaling"


def _heads(point: Point) -> dict[str, int]:
    """The heads of each tensor a point may turn: q's, k's, and the output's (q's)."""
    return {"q": point.num_heads, "k": kv_heads(point), "o": point.num_heads}


def _target_tables(cos, sin, scale):
    """{name: (cos, sin)} of q, k and an output turned back (o: minus the angles); q's and
    k's the same but for xPos, which scales them apart."""
    if scale is None:
        return {"q": (cos, sin), "k": (cos, sin), "o": (cos, -sin)}
    return {"q": (cos * scale, sin * scale), "k": (cos / scale, sin / scale)}


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
    names, heads = TARGETS[point.rope_targets], _heads(point)
    tables = _target_tables(cos, sin, scale)  # what an eager user precomputes
    truth = _target_tables(*_tables(point, torch.float64, device))
    inputs = {n: heads_tensor(point, heads[n], device, dtype) for n in names}
    inputs |= {
        "names": names,  # q, k, o: those the point turns, in the outputs' order
        "cos": cos,  # (L, D/2) float32, times the schedule's attention factor
        "sin": sin,
        "tables": tuple(tables[n] for n in names),
        "truth_tables": tuple(truth[n] for n in names),  # float64, for the truth
        "kernel_args": {} if scale is None else {"xpos_scale": scale},  # the kernel's own
        "interleaved": interleaved(point),  # GPT-J pairs (the model's, with model=)
        "start": rotary_start(point),  # the first rotated dim (DeepSeek-V4's: D - R)
        "point": point,  # for the implementations that build their own tables (hf)
    }
    if point.rope_variant == "p_rope":  # the kernel reads only the frequencies that turn
        n = F.rotating_frequencies(point.head_dim, P_ROPE)
        inputs["cos"], inputs["sin"] = cos[:, :n].contiguous(), sin[:, :n].contiguous()
        inputs["kernel_args"] = {"rotary_dim": point.head_dim}
    if inputs["interleaved"]:
        inputs["kernel_args"] = dict(inputs["kernel_args"], interleaved=True)
    if inputs["start"]:
        inputs["kernel_args"] = dict(inputs["kernel_args"], rotary_start=inputs["start"])
    return inputs


def _targets(inputs) -> tuple:
    return tuple(inputs[n] for n in inputs["names"])


def _truth(inputs):
    return reference_fn(
        _targets(inputs), inputs["truth_tables"], inputs["interleaved"], inputs["start"]
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


def reference_fn(xs, tables, interleaved=False, start=0):
    """Each tensor of xs turned by its (cos, sin) of tables (an output turned back: minus
    the angles), the eager way."""
    return tuple(
        F.apply_rope(x, c, s, interleaved=interleaved, rotary_start=start)
        for x, (c, s) in zip(xs, tables, strict=True)
    )


def _reference(inputs):
    xs, tables = _targets(inputs), inputs["tables"]
    pairs, start = inputs["interleaved"], inputs["start"]
    return lambda: reference_fn(xs, tables, pairs, start)


def _reference_out(inputs):
    xs, tables = _targets(inputs), inputs["tables"]
    kwargs = dict(interleaved=inputs["interleaved"], rotary_start=inputs["start"])
    outs = [torch.empty_like(x) for x in xs]  # preallocated: not timed
    pairs = list(zip(xs, tables, outs, strict=True))
    return lambda: tuple(F.apply_rope(x, c, s, out=o, **kwargs) for x, (c, s), o in pairs)


def _compiled(inputs):
    fn = compile_impl(reference_fn)
    xs, tables = _targets(inputs), inputs["tables"]
    pairs, start = inputs["interleaved"], inputs["start"]
    return lambda: fn(xs, tables, pairs, start)


def _kernel_calls(inputs, xs, **kwargs):
    """The kernel's launches for the point's targets: q and k in one (q alone: k=None), an
    output turned back in a second (inverse=True: the same tables)."""
    cos, sin, args = inputs["cos"], inputs["sin"], dict(inputs["kernel_args"], **kwargs)
    names = inputs["names"]
    k = xs[1] if "k" in names else None
    first = kernel_call(xs[0], k, cos, sin, **args)
    if "o" not in names:
        return first if k is not None else lambda: first()[:1]
    back = kernel_call(xs[2], None, cos, sin, inverse=True, **args)
    return lambda: (*first(), back()[0])


def _triton(inputs):
    return _kernel_calls(inputs, _targets(inputs))


def _native_inplace(inputs):
    """The C kernel in place (inplace=True) on private copies of the targets, which it
    overwrites each call: no output to allocate."""
    return _kernel_calls(inputs, own_copies(inputs, inputs["names"]), inplace=True)


def _liger(inputs):
    """As Liger's tests and Hugging Face's Llama call it: q and k (B, H, L, D) views of
    (B, L, H, D) memory, cos and sin (1, L, D) with both halves, built once here. It writes
    into q and k, so it gets copies of its own; the copies' memory order is the point's (bhsd
    memory: `liger_copy`, whose call includes Liger's own copy to bshd and back)."""
    from liger_kernel.ops.rope import LigerRopeFunction

    q, k = own_copies(inputs)
    cos = torch.cat((inputs["cos"], inputs["cos"]), -1)[None]  # (1, L, D)
    sin = torch.cat((inputs["sin"], inputs["sin"]), -1)[None]
    return Call(lambda: LigerRopeFunction.apply(q, k, cos, sin), leaves={"q": q, "k": k})


def _hf(inputs):
    """transformers' `apply_rotary_pos_emb` as its Llama attention calls it: q and k (B, H, L, D)
    in the point's memory (a model's are bshd: views of its projections), the (1, L, D) tables
    its rotary embedding returns for the point's schedule (float32 angles, in q's dtype)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    point = inputs["point"]
    if point.model:
        return model_call(point.model, spec_of(point.model).layer_type(), _targets(inputs))
    q, k = inputs["q"], inputs["k"]
    config = llama_config(
        point.head_dim,
        point.num_heads,
        kv_heads(point),
        float(point.rope_theta),
        scaling_of(point),
        P_ROPE if point.rope_variant == "p_rope" else 1.0,
    )
    positions = torch.arange(point.seq_len, device=q.device)[None]
    cos, sin = rotary_tables(config, positions, q.dtype)
    return lambda: apply_rotary_pos_emb(q, k, cos, sin)


def _hf_supports(point: Point) -> str | None:
    if point.model:  # read from the model's own code (bench.cases._peers.model_hf_problem)
        return model_hf_problem(point.model, point.head_dim, point.rope_targets)
    if point.rope_targets != "qk":
        return f"rope_targets={point.rope_targets}: its apply_rotary_pos_emb turns q and k together"
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
        if point.rope_targets != "qk":
            return f"rope_targets={point.rope_targets}: Liger's RoPE turns q and k together"
        if point.layout == layout:
            return None
        return f"layout={point.layout}: see {other} (Liger's kernel reads (B, L, H, D) memory)"

    return supports


def _cost(point: Point, dtype, mode: str) -> Cost:
    cols = rotary_cols(point)
    if point.rope_variant == "p_rope":
        cols = F.rotating_frequencies(point.head_dim, P_ROPE)
    turned = sum(_heads(point)[n] for n in TARGETS[point.rope_targets])
    return rotation_cost(point, dtype, mode, point.seq_len, cols, turned)


def _constraint(point: Point) -> str | None:
    if point.head_dim % 2:
        return f"head_dim={point.head_dim} is odd"
    if point.rope_variant == "xpos" and point.rope_targets != "qk":
        return f"rope_targets={point.rope_targets}: xPos scales q and k apart (rope_targets=qk)"
    return model_only(point)


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
    grad_inputs=("q", "k", "o"),
    batched=("q", "k", "o"),
    knobs=(LAYOUT, NUM_KV_HEADS, ROPE_SCALING, ROPE_VARIANT, *SCHEDULE, ROPE_TARGETS, MODEL),
    constraint=_constraint,
)
