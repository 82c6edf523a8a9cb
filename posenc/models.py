"""Models, not knobs: a checkpoint's attention shapes and positional facts as one `ModelSpec`,
read from a preset name (configs/models/<name>.json), a config.json (or its folder), or a dict,
in either spelling checkpoints ship (transformers 4.x: `rope_theta`, `rope_scaling`,
`rotary_pct`, `partial_rotary_factor`, `rope_local_base_freq`; 5.x: `rope_parameters`, nested per
layer type). transformers' own `AutoConfig` reads it: it knows every model type's defaults and
legacy keys (`pip install transformers`).

`ModelSpec.rope_tables(positions, layer_type)` rebuilds the model's cos and sin tables from
posenc's schedules (posenc/_scaling.py), equal to the first half of what the model's rotary
embedding returns (tests/posenc/test_models.py); a positional scheme posenc cannot reproduce is a
ValueError naming it, never a different table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from posenc._configs import PRESETS, preset_names, read_config, source_of
from posenc.functional import rope_cos_sin

__all__ = ["PRESETS", "ModelSpec", "hf_config", "load", "preset_names"]
INSTALL = "reading a model's config needs transformers: pip install 'transformers>=5.25'"
# The keys of each rope_type posenc reproduces (transformers' names), beside rope_theta.
KNOWN = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor"},
    "yarn": {
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "truncate",
        "mscale",
        "mscale_all_dim",
    },
    "llama3": {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
    "longrope": {
        "short_factor",
        "long_factor",
        "original_max_position_embeddings",
        "factor",
        "attention_factor",
    },
    "proportional": {"factor"},
}
SHARED = {"rope_type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}
# Models whose pairs are (2i, 2i + 1) (GPT-J's), where the config does not say (rope_interleave)
INTERLEAVED = {"llama4", "llama4_text", "deepseek_v2", "cohere", "cohere2"}


@dataclass(frozen=True)
class ModelSpec:
    """A model's attention and positional facts. rope_parameters: one dict (transformers' names),
    or {layer_type: dict} where layer types differ (Gemma 3's local and global layers)."""

    name: str
    model_type: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    interleaved: bool
    rope_theta: float
    rope_type: str  # transformers' names; "none": no RoPE (T5, BLOOM)
    rope_parameters: dict
    layer_types: tuple[str, ...]
    sliding_window: int | None
    mrope_section: tuple[int, ...] | None
    hidden_size: int
    num_layers: int
    max_position_embeddings: int
    mlp_size: int = 0  # the MLP's hidden width a token goes through (MoE: its experts', below)
    nope_layers: tuple[int, ...] = ()
    rope_base_dim: int = 0  # the dim partial_rotary_factor takes its part of (transformers')
    sinks: bool = False
    source: str = ""
    extra: dict = field(default_factory=dict)  # head_dims per layer type, mla: latent width, ...

    def parameters(self, layer_type: str | None = None) -> dict:
        """The RoPE parameters of a layer type (the model's only ones when it has one set)."""
        if not _per_layer(self.rope_parameters):
            return self.rope_parameters
        return self.rope_parameters[self.layer_type(layer_type)]

    def layer_type(self, layer_type: str | None = None) -> str | None:
        """A layer type with its own RoPE: the one named, or the global layers' (DeepSeek-V4:
        its main attention's); None for a model with one set of parameters."""
        if not _per_layer(self.rope_parameters):
            return None
        if layer_type is None:
            keys = [k for k in ("full_attention", "main") if k in self.rope_parameters]
            return keys[0] if keys else next(iter(self.rope_parameters))
        if layer_type not in self.rope_parameters:
            raise ValueError(
                f"layer_type must be one of {', '.join(sorted(self.rope_parameters))} for "
                f"{self.name}, got {layer_type!r}"
            )
        return layer_type

    def _base_dim(self, layer_type: str | None) -> int:
        dims = self.extra.get("head_dims", {})  # Gemma 4: head dims per layer type
        return dims.get(self.layer_type(layer_type)) or self.rope_base_dim or self.head_dim

    def schedule(self, layer_type: str | None = None) -> tuple[dict | None, int, float, float]:
        """(posenc scaling dict or None, rotary dim, rotate_fraction, theta) of a layer type;
        ValueError naming what posenc does not reproduce."""
        if not self.rope_parameters:  # T5's buckets, BLOOM's ALiBi: positions of their own
            raise ValueError(f"{self.name}: no RoPE ({self.model_type} has its own positions)")
        p = self.parameters(layer_type)
        kind = p.get("rope_type", "default")
        if kind not in KNOWN:
            raise ValueError(f"{self.name}: rope_type {kind!r} is not one posenc reproduces")
        unknown = set(p) - KNOWN[kind] - SHARED
        if unknown:
            raise ValueError(
                f"{self.name}: {kind} RoPE with {', '.join(sorted(unknown))}: not reproduced"
            )
        fraction = float(p.get("partial_rotary_factor") or 1.0)
        if kind == "proportional":
            scaling = _linear(p.get("factor"))
            return scaling, self._base_dim(layer_type), fraction, float(p["rope_theta"])
        rotary = int(self._base_dim(layer_type) * fraction)
        return _scaling(kind, p, self.max_position_embeddings), rotary, 1.0, float(p["rope_theta"])

    def rope_tables(self, positions: Tensor | int, layer_type: str | None = None):
        """(cos, sin) float32, (len(positions), width / 2): the first half of the model's
        rotary embedding's tables at these positions (its attention factor included; dynamic
        and LongRoPE choose by the length max(positions) + 1, as transformers does)."""
        if isinstance(positions, int):
            positions = torch.arange(positions)
        scaling, rotary, fraction, theta = self.schedule(layer_type)
        length = int(positions.max()) + 1 if positions.numel() else 1
        return rope_cos_sin(
            positions, rotary, theta, scaling=scaling, seq_len=length, rotate_fraction=fraction
        )


def _per_layer(params: dict) -> bool:
    return bool(params) and all(isinstance(v, dict) for v in params.values())


def _linear(factor) -> dict | None:
    return None if factor in (None, 1, 1.0) else {"type": "linear", "factor": float(factor)}


def _scaling(kind: str, p: dict, max_positions: int) -> dict | None:
    """transformers' rope parameters -> posenc's scaling dict (posenc/_scaling.py)."""
    if kind == "default":
        return None
    if kind == "linear":
        return {"type": "linear", "factor": float(p["factor"])}
    if kind == "dynamic":  # transformers takes the original context from max_position_embeddings
        return {
            "type": "dynamic",
            "factor": float(p["factor"]),
            "original_max_position_embeddings": max_positions,
        }
    out = {"type": kind, **{k: v for k, v in p.items() if k in KNOWN[kind]}}
    original = out.setdefault("original_max_position_embeddings", max_positions)
    if kind == "yarn" and out.get("factor") is None:  # DeepSeek: the ratio of the contexts
        out["factor"] = max_positions / original
    if kind == "longrope" and out.get("factor") is None:
        out["factor"] = max_positions / original if max_positions > original else None
    for key in ("beta_fast", "beta_slow", "factor"):
        if out.get(key) is not None:
            out[key] = float(out[key])
        elif key != "factor":
            out.pop(key, None)
    return {k: v for k, v in out.items() if v is not None or k == "factor"}


def load(model: str | Path | dict) -> ModelSpec:
    """A ModelSpec from a preset name, a config.json path (or its folder), or a config dict."""
    name, config = hf_config(model)
    return _spec(name, config, source=str(source_of(model)))


def hf_config(model: str | Path | dict):
    """(name, transformers' config object) of a preset, a config.json or a dict."""
    name, data = read_config(model)
    try:
        from transformers import AutoConfig
    except ImportError as exc:
        raise ImportError(INSTALL) from exc
    data = {k: v for k, v in data.items() if not k.startswith("_")}
    model_type = data.get("model_type")
    if not model_type:
        raise ValueError(f"{name}: the config has no model_type")
    try:
        config = AutoConfig.for_model(**data)
    except ValueError as exc:
        raise ValueError(f"{name}: {str(exc).splitlines()[0]}") from None
    return name, config


def _spec(name: str, config, source: str) -> ModelSpec:
    text = config.get_text_config()
    heads = text.num_attention_heads
    layers = text.num_hidden_layers
    layer_types = tuple(getattr(text, "layer_types", None) or ("full_attention",) * layers)
    dims = _head_dims(text, layer_types)
    base_dim = dims.get("full_attention") or _attr(text, "head_dim") or _attr(text, "d_kv")
    base_dim = base_dim or text.hidden_size // heads
    head_dim = base_dim
    if getattr(text, "qk_nope_head_dim", None):  # MLA: RoPE on a decoupled slice of each head
        head_dim = text.qk_nope_head_dim + text.qk_rope_head_dim
    params = dict(getattr(text, "rope_parameters", None) or {})
    first = params  # the global layers' parameters stand for the model's
    if _per_layer(params):
        keys = [k for k in ("full_attention", "main") if k in params]
        first = params[keys[0] if keys else next(iter(params))]
    window = getattr(text, "sliding_window", None)
    if getattr(text, "use_sliding_window", True) is False:
        window = None
    nope = getattr(text, "no_rope_layers", None) or ()
    return ModelSpec(
        name=name,
        model_type=text.model_type,
        num_heads=heads,
        num_kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        rotary_dim=_rotary(base_dim, first),
        rope_base_dim=base_dim,
        interleaved=bool(getattr(text, "rope_interleave", text.model_type in INTERLEAVED)),
        rope_theta=float(first.get("rope_theta", math.nan)),
        rope_type=first.get("rope_type", "default") if params else "none",
        rope_parameters=params,
        layer_types=layer_types,
        sliding_window=window,
        mrope_section=tuple(first["mrope_section"]) if first.get("mrope_section") else None,
        hidden_size=text.hidden_size,
        mlp_size=_mlp_size(text),
        num_layers=layers,
        max_position_embeddings=getattr(text, "max_position_embeddings", 0),
        nope_layers=tuple(i for i, use in enumerate(nope) if not use),
        sinks=text.model_type == "gpt_oss",
        source=source,
        extra={
            **({"head_dims": dims} if len(set(dims.values())) > 1 else {}),
            **({"mla": text.kv_lora_rank} if getattr(text, "qk_nope_head_dim", None) else {}),
            **({"attention_chunk": n} if (n := _attr(text, "attention_chunk_size")) else {}),
            **_temperature(text),
        },
    )


def _temperature(text) -> dict:
    """Llama 4's NoPE layers scale their queries by position (attn_temperature_tuning):
    {"temperature": (floor_scale, attn_scale)}, or nothing."""
    if not getattr(text, "attn_temperature_tuning", False) or not getattr(
        text, "no_rope_layers", 0
    ):
        return {}
    return {"temperature": (float(text.floor_scale), float(text.attn_scale))}


def _mlp_size(text) -> int:
    """The MLP width a token goes through (its FLOPs, not the weights read): intermediate_size,
    or a mixture's experts per token plus its shared ones (DeepSeek, Qwen2-MoE, Llama 4's)."""
    inter = getattr(text, "intermediate_size", 0) or getattr(text, "d_ff", 0) or 0  # T5: d_ff
    inter = inter or (4 * text.hidden_size if text.model_type == "bloom" else 0)  # its 4 x
    k = getattr(text, "num_experts_per_tok", None)
    if not k:
        return inter
    expert = getattr(text, "moe_intermediate_size", None) or inter
    shared = (getattr(text, "n_shared_experts", None) or 0) * expert
    shared += getattr(text, "shared_expert_intermediate_size", None) or 0
    shared += inter if text.model_type.startswith("llama4") else 0
    return k * expert + shared


def _attr(config, name: str):
    """An attribute, or None where the config keeps it per layer (Gemma 4's head_dim)."""
    try:
        return getattr(config, name, None)
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError
        return None


def _head_dims(text, layer_types) -> dict[str, int]:
    """{layer type: head dim} where the config holds per-layer attributes, else {}."""
    per = _attr(text, "per_layer_config")
    if per is None:
        return {}
    dims: dict[str, int] = {}
    for i, kind in enumerate(layer_types):
        dim = _attr(per[i], "head_dim")
        if dim is not None:
            dims.setdefault(kind, dim)
    return dims


def _rotary(rotary: int, params: dict) -> int:
    if params.get("rope_type") == "proportional":
        return rotary
    return int(rotary * float(params.get("partial_rotary_factor") or 1.0))
