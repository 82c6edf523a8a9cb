"""The positional encoding inside a whole decoder layer (posenc.DecoderLayer: RMSNorm, q/k/v
projections, the encoding, attention, output projection, RMSNorm, SwiGLU MLP), per encoding and
per implementation of its positional part; the rest of the layer is the same eager PyTorch in
every row, so the rows of a point differ only where the encoding lives.

  layer_{encoding}         x (B, L, d_model), causal self-attention; every mode.
  layer_{encoding}_decode  a decode step: one new token per sequence (x (B, 1, d_model)) against
                           a KV cache of seq_len (knob kv_cache: full, or ragged lengths as the
                           decode cases draw them); its k and v are written into the cache in the
                           call, as a static cache does; forward only.

Every case has `nope`: the same layer with its positional part removed (no addition, no
rotation, causal SDPA). It is timed side by side with the others, and the runner gives each row
of the group its `pe_share` = 1 - t(nope) / t(row) and the profiler's attribution beside it
(bench/run/share.py). The absolute encodings are added once per model, at the embedding: their
share of one layer is N times their share of an N-layer model.

Implementations of the positional part, each as bench/cases/rope.py and bias.py call them:
  sinusoidal, learnable  reference (posenc's module), compiled;
  rope, mrope            reference (posenc.functional.apply_rope), compiled, triton
                         (posenc_kernels.apply_rope on the projections' (B, L, H, D) memory);
  alibi, t5, shaw_bias, shaw_kv  every family of bench/cases/families.py, by the attention
                         factories of bias.py (decode: sequences.py): reference, compiled
                         (prefill), sdpa, flex, triton;
  fox                    a gated family: its gate over the layer's normed input (the
                         encoding's parameters) gives the tables attend computes with
                         (reference, compiled, triton); prefill only;
  irope                  Llama 4's NoPE layer: its queries times the temperature of their
                         positions (1 below 8191: at these lengths, the multiply's cost);
                         with model= the model's NoPE layers (its floor_scale and attn_scale;
                         a model whose NoPE layers have no temperature, SmolLM3, is said: its
                         NoPE layer is layer_rope's `nope` row).
Knobs: num_kv_heads, d_ff (null: 3.5 d_model, Llama 3's ratio), rope_scaling (layer_rope:
RoPE with a long-context schedule), mrope_style, kv_cache, sinks (the bias families: a sink
logit per head, part of the measured share), model and layer_type (layer_rope and its decode
step: a layer of the model, docs/models.md; its sliding window and sinks, where it has them,
in every row's attention, posenc's reference: the share stays RoPE's).

Why this file is long: one case per encoding kind, its inputs, cost model and implementations
together; each kind's positional part (the layer's hooks) is bench/cases/_layer_hooks.py.

Cost: FLOPs of the projections and the MLP (2 per multiply-add per token), attention 4 H D per
(query, visible key) pair, Shaw's relative terms (bias.py); backward twice the matmuls' and 2.5x
the attention's. Bytes, a lower bound: the weights, x and the output (decode: and the cache's
valid keys and values, what bounds a step); backward adds the weights' gradients, dy and dx.
"""

from __future__ import annotations

import torch

import posenc
from bench.cases import bias as Bias
from bench.cases import sequences as Seq
from bench.cases._common import (
    NUM_KV_HEADS,
    TRITON_DEVICES,
    TRITON_ELSEWHERE,
    TRITON_NOTE,
    bind,
    kv_heads,
    parameters,
    per_mode,
)
from bench.cases._layer_hooks import KIND, PARTNER, PREFIX, hooks, model_attention, rope_tables
from bench.cases._model import (
    LAYER_TYPE,
    MODEL,
    layer_problem,
    model_only,
    spec_of,
    window_of,
)
from bench.cases._schedule import ROPE_SCALING
from bench.cases.families import FAMILIES
from bench.cases.multimodal import MROPE_STYLE, _mrope_constraint
from bench.checks import positive_ints
from bench.registry import Case, Cost, Impl, Knob, Level, Point
from posenc import functional as F
from posenc._logits import ATTN_SCALE, FLOOR_SCALE
from posenc.layer import DecoderLayer, KVCache, causal_mask

D_FF = Knob(
    "d_ff",
    None,
    "layer cases: the SwiGLU MLP's hidden size (null: 3.5 x d_model)",
    lambda value, key: positive_ints(value, key, allow_none=True),
)


def d_ff(point: Point) -> int:
    """The MLP's hidden size: the model's (the width its tokens go through, posenc.models), the
    knob's, or 3.5 x d_model."""
    if point.model:
        return spec_of(point.model).mlp_size
    return point.d_ff or int(3.5 * point.d_model)


def hidden(point: Point) -> int:
    """The layer's width: the model's hidden size (its heads' H D is the point's d_model), or
    d_model."""
    return spec_of(point.model).hidden_size if point.model else point.d_model


def _position_module(encoding: str, point: Point):
    """The encoding's module with parameters (learned tables), or None."""
    if encoding == "learnable":
        return posenc.LearnablePositionalEncoding(point.d_model, point.seq_len)
    family = FAMILIES.get(encoding)
    if family is not None and family.learned is not None:
        return family.learned(point.num_heads, point.head_dim)
    return None


def _builder(encoding: str, decode: bool):
    def build(point: Point, device, dtype):
        shape = (hidden(point), point.num_heads, kv_heads(point), d_ff(point))
        with torch.device(device):  # seeded by the runner
            layer = DecoderLayer(*shape, head_dim=point.head_dim)
            extra = _position_module(encoding, point)
        params = parameters(layer, device, dtype)
        if extra is not None:
            params.update({PREFIX + n: p for n, p in parameters(extra, device, dtype).items()})
        n, b = point.seq_len, point.batch
        inputs = {
            "x": torch.randn(b, 1 if decode else n, shape[0], device=device).to(dtype),
            "params": params,
            "shape": shape,
            "head_dim": point.head_dim,
            "interleaved": bool(point.model) and spec_of(point.model).interleaved,
        }
        if KIND[encoding] == "rotate":
            inputs["cos"], inputs["sin"] = rope_tables(encoding, point, device, torch.float32)
            inputs["cos64"], inputs["sin64"] = rope_tables(encoding, point, device, torch.float64)
        if encoding in FAMILIES:  # its fixed tables (ALiBi's slopes), the sinks if any
            fixed = FAMILIES[encoding].fixed(point.num_heads)
            inputs["fixed"] = {n: t.to(device) for n, t in fixed.items()}
        inputs["sinks"] = Bias.sinks_input(point, device, dtype)
        if encoding == "rope" and point.model:  # the model's window and sinks, in every row
            inputs["window"] = window_of(point)
            if spec_of(point.model).sinks:  # gpt-oss: a learned logit per head
                sinks = torch.randn(point.num_heads, device=device).to(dtype)
                inputs["sinks"] = {"sinks": torch.nn.Parameter(sinks)}
        if KIND[encoding] == "temperature":  # Llama 4's factors at the tokens' positions
            scale = F.irope_temperature(n, *_temperature_of(point))
            inputs["q_scale"] = scale.to(device, torch.float32)
            inputs["q_scale64"] = scale.to(device)
        if decode:
            cache = (b, kv_heads(point), n, point.head_dim)
            inputs["cache_k"], inputs["cache_v"] = (
                torch.randn(cache, device=device).to(dtype) for _ in "kv"
            )
            inputs["kv_lens"] = torch.tensor(Seq.kv_lengths(point), device=device)
            inputs["ragged"] = point.kv_cache == "ragged"
        return inputs

    return build


def _layer(inputs) -> DecoderLayer:
    """The layer (built on the meta device: no weights of its own) computing with the point's
    parameters."""
    with torch.device("meta"):
        layer = DecoderLayer(*inputs["shape"], head_dim=inputs["head_dim"])
    own = {n: p for n, p in inputs["params"].items() if not n.startswith(PREFIX)}
    return bind(layer, own)


def _call(encoding: str, impl: str, truth: bool = False):
    def make(inputs):
        layer, x, kw = _layer(inputs), inputs["x"], hooks(encoding, impl, inputs, truth)
        kw.update(model_attention(inputs))
        if "cache_k" not in inputs:
            return lambda: layer(x, **kw)
        k, lens = inputs["cache_k"], inputs["kv_lens"]
        mask = causal_mask(lens, x.shape[1], k.shape[2])  # once per step, as a model makes it
        cache = KVCache(k, inputs["cache_v"], lens, mask)
        return lambda: layer(x, cache=cache, **kw)

    return make


def _truth(encoding: str, impl: str = "reference"):
    return lambda inputs: _call(encoding, impl, truth=True)(inputs)()


def _cost(encoding: str, decode: bool):
    def cost(point: Point, dtype, mode: str) -> Cost:
        b, n, d = point.batch, point.seq_len, hidden(point)
        h, hk, hd = point.num_heads, kv_heads(point), point.head_dim
        mats = 2 * d * h * hd + 2 * d * hk * hd + 3 * d * d_ff(point)  # q, o; k, v; the MLP
        weights = mats + 2 * d  # and the two norms'
        tokens = b if decode else b * n
        w = window_of(point) if point.model and encoding == "rope" else None
        w = w or n + 1  # no window: every earlier key
        lens = Seq.kv_lengths(point) if decode else []
        pairs = sum(min(x, w) for x in lens) if decode else b * sum(min(i + 1, w) for i in range(n))
        attn = 4 * h * hd * pairs
        rel = h * tokens * FAMILIES[encoding].extra_flops(hd) if encoding in FAMILIES else 0
        matmul = 2 * tokens * mats
        size = dtype.itemsize
        cache = 2 * hk * hd * sum(Seq.kv_lengths(point)) * size if decode else 0
        forward = Cost((weights + 2 * tokens * d) * size + cache, matmul + attn + rel, tokens)
        backward = Cost(
            (2 * weights + 3 * tokens * d) * size, 2 * matmul + int(2.5 * attn) + 2 * rel, tokens
        )
        return per_mode(forward, backward, mode)

    return cost


def _impls(encoding: str, decode: bool) -> dict[str, Impl]:
    kind, grad = KIND[encoding], not decode
    names = {
        "embed": ("reference", "compiled"),
        "rotate": ("reference", "compiled", "triton"),
        "gate": ("reference", "compiled", "triton"),
        "temperature": ("reference", "compiled"),
    }
    names = names.get(
        kind,
        ("reference", "sdpa", "flex", "triton")
        if decode
        else ("reference", "compiled", "sdpa", "flex", "triton"),
    )
    family = FAMILIES.get(encoding)
    impls = {
        "nope": Impl(
            _call(encoding, "nope"),
            reference=_truth(encoding, "nope"),
            grad=grad,
            note="no positions: the layer without its encoding",
        ),
    }
    for name in names:
        opts = {}
        if name == "triton":
            opts = dict(devices=TRITON_DEVICES, elsewhere=TRITON_ELSEWHERE, note=TRITON_NOTE)
        if name in ("compiled", "flex"):
            opts["compiled"] = True
        if name in ("sdpa", "flex"):
            opts["supports"] = Bias.either(family.expressible, Bias.plain_softmax)
        if kind == "bias" and not decode:
            opts["holds"] = {"reference": 4, "compiled": 2, "sdpa": 3}.get(name, 0)
        impls[name] = Impl(_call(encoding, name), grad=grad, **opts)
        if kind in ("bias", "gate"):  # its share's partner: the same path, no encoding
            note = f"{name}'s attention path without the encoding: its rows' share partner"
            impls[PARTNER + name] = Impl(  # run where its row runs (the row's supports)
                _call(encoding, PARTNER + name),
                reference=_truth(encoding, "nope"),
                grad=grad,
                **dict(opts, note=note),
            )
    return impls


def _partners(encoding: str, decode: bool) -> dict[str, str]:
    """Each row's share partner (bench/run/share.py): a bias's or a gate's rows, the same
    attention path without it (an SDPA row against SDPA with the same mask format, FlexAttention
    against its block mask alone, the kernel without a family, eager against eager); a
    rotation's, an embedding's and a temperature's, `nope` (their attention is nope's)."""
    impls = _impls(encoding, decode)
    return {n[len(PARTNER) :]: n for n in impls if n.startswith(PARTNER)}


def _model_problem(point: Point) -> str | None:
    """Why this layer is not the model's (None: it is, a global layer of it)."""
    spec = spec_of(point.model)
    if spec.extra.get("mla"):
        return f"{point.model}: MLA attention (the rope case measures its rotated slice)"
    if spec.model_type == "deepseek_v4":
        return f"{point.model}: compressed attention, which this layer does not have"
    chunk = spec.extra.get("attention_chunk")  # Llama 4's RoPE layers attend in chunks
    if chunk and point.seq_len > chunk:
        return f"{point.model}: its layers attend in chunks of {chunk}, this one {point.seq_len}"
    return layer_problem(point) or model_only(point)


def _temperature_of(point: Point) -> tuple[float, float]:
    """(floor_scale, attn_scale): the model's, or Llama 4's defaults (8192, 0.1)."""
    if point.model:
        return spec_of(point.model).extra["temperature"]
    return FLOOR_SCALE, ATTN_SCALE


def _nope_problem(point: Point) -> str | None:
    """Why the model has no NoPE layer with a temperature to measure (None: it has)."""
    spec = spec_of(point.model)
    if not spec.nope_layers:
        return f"{point.model}: no NoPE layers (its RoPE layers: the layer_rope case)"
    if "temperature" not in spec.extra:
        return (
            f"{point.model}: its NoPE layers ({len(spec.nope_layers)} of {spec.num_layers}) have "
            "no positional part at all: layer_rope's `nope` row is such a layer"
        )
    return None


def _constraint(encoding: str):
    def check(point: Point) -> str | None:
        if encoding == "mrope":
            return _mrope_constraint(point)
        if point.model and encoding == "irope":
            return _nope_problem(point)
        if point.model:
            return _model_problem(point)
        return None if point.head_dim % 2 == 0 else f"head_dim={point.head_dim} is odd"

    return check


def _case(encoding: str, decode: bool) -> Case:
    knobs = [NUM_KV_HEADS, D_FF]
    knobs += {"rope": [ROPE_SCALING, MODEL, LAYER_TYPE], "mrope": [MROPE_STYLE]}.get(encoding, [])
    knobs += [MODEL] if encoding == "irope" else []
    knobs += [Bias.SINKS] if KIND[encoding] in ("bias", "gate") else []
    knobs += [Seq.KV_CACHE] if decode else []
    batched = ("x", "cache_k", "cache_v", "kv_lens") if decode else ("x",)
    if encoding == "mrope":
        batched += ("cos", "sin", "cos64", "sin64")
    return Case(
        name=f"layer_{encoding}" + ("_decode" if decode else ""),
        level=Level.LAYER,
        build=_builder(encoding, decode),
        reference=_truth(encoding),
        impls=_impls(encoding, decode),
        baseline="reference",
        cost=_cost(encoding, decode),
        grad_inputs=() if decode else ("x", "params", "sinks"),
        batched=batched,
        knobs=tuple(knobs),
        constraint=_constraint(encoding),
        truth_holds=0 if decode else 4,
        share_base="nope",
        share_partners=_partners(encoding, decode),
    )


PREFILL = [_case(e, False) for e in KIND]
# decode steps: not a gated family's (its gates of the cached keys would need a cache of
# their own), nor iRoPE's temperature (a factor per query: its prefill rows say its cost)
DECODE = [_case(e, True) for e in ("rope", *(n for n, f in FAMILIES.items() if not f.gated))]
