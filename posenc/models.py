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

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from posenc import _hf_check, _hf_rotation
from posenc import _model_facts as facts
from posenc._configs import PRESETS, preset_names, read_config, source_of, value_problem
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
CODE_THETA = 10000.0  # the base of models whose config names none (GPT-J's code fixes it)


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
    interleaved: bool  # pairs (2i, 2i + 1); False: (i, i + R/2). Read from the model's own code
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
    direction: int = 1  # +1: a' = a cos - b sin; -1: the opposite turn (nanochat's)
    rotary_start: int = 0  # the first rotated dim of a head (DeepSeek-V4's: head_dim - R)
    source: str = ""
    extra: dict = field(default_factory=dict)  # head_dims per layer type, mla: latent width, ...

    def parameters(self, layer_type: str | None = None) -> dict:
        """The RoPE parameters of a layer type (the model's only ones when it has one set)."""
        if not _per_layer(self.rope_parameters):
            return self.rope_parameters
        return self.rope_parameters[self.layer_type(layer_type)]

    def layer_type(self, layer_type: str | None = None) -> str | None:
        """The key of a layer type's own RoPE parameters: the one named (or the key its
        attention reads, DeepSeek-V4's), or the global layers' (where keys are not layer types:
        those of the model's most common layer type); None for a model with one set."""
        if not _per_layer(self.rope_parameters):
            return None
        reads = self.extra.get("rope_of_layers", {})  # DeepSeek-V4: {layer type: main | compress}
        if layer_type is None and reads:
            layer_type = max(reads, key=self.layer_types.count)
        if layer_type in reads:
            return reads[layer_type]
        if layer_type is None:
            keys = [k for k in ("full_attention", "main") if k in self.rope_parameters]
            return keys[0] if keys else next(iter(self.rope_parameters))
        if layer_type not in self.rope_parameters:
            raise ValueError(
                f"layer_type must be one of {', '.join(sorted(self.rope_parameters))} for "
                f"{self.name}, got {layer_type!r}"
            )
        return layer_type

    def base_dim(self, layer_type: str | None = None) -> int:
        """The head dim of a layer type, which its partial_rotary_factor takes its part of."""
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
        # keys transformers' rope code does not read (the model's attention does: Ministral 3's
        # llama_4_scaling_beta), as the model's config class declares; the legacy `type`
        elsewhere = set(self.extra.get("rope_keys_elsewhere", ()))
        elsewhere |= {"type"} if p.get("type") in (None, kind) else set()
        unknown = set(p) - KNOWN[kind] - SHARED - elsewhere
        if unknown:
            named = ", ".join(f"{k}={str(p[k])[:24]}" for k in sorted(unknown))
            raise ValueError(f"{self.name}: {kind} RoPE with {named}: not reproduced")
        fraction = float(p.get("partial_rotary_factor") or 1.0)
        if kind == "proportional":
            scaling = _linear(p.get("factor"))
            return scaling, self.base_dim(layer_type), fraction, float(p["rope_theta"])
        # the width the model's code turns (a config's partial_rotary_factor that the code
        # ignores is ignored here too), else the config's
        widths = self.extra.get("rotary_widths", {})
        rotary = widths.get(self.layer_type(layer_type) or "") or int(
            self.base_dim(layer_type) * fraction
        )
        return _scaling(kind, p, self.max_position_embeddings), rotary, 1.0, float(p["rope_theta"])

    def rope_tables(self, positions, layer_type: str | None = None):
        """(cos, sin) float32, (len(positions), width / 2): the first half of the model's
        rotary embedding's tables at these positions (its attention factor included; dynamic
        and LongRoPE choose by the length max(positions) + 1, as transformers does)."""
        if isinstance(positions, int):
            positions = torch.arange(positions)
        elif not isinstance(positions, Tensor):  # a range or a list of positions
            positions = torch.tensor(list(positions), dtype=torch.long)
        scaling, rotary, fraction, theta = self.schedule(layer_type)
        length = int(positions.max()) + 1 if positions.numel() else 1
        cos, sin = rope_cos_sin(
            positions, rotary, theta, scaling=scaling, seq_len=length, rotate_fraction=fraction
        )
        return cos, sin * self.direction


_per_layer = _hf_rotation.per_layer


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
    with _transformers_quiet():
        spec = _spec(name, config, source=str(source_of(model)))
        _hf_check.verify(spec, config)
    for key in _hf_rotation.rope_keys(spec.rope_parameters, spec.layer_types):
        if spec.rope_parameters:  # a schedule posenc does not reproduce: refused here
            spec.schedule(key)
    defaulted = facts.defaulted_sizes(read_config(model)[1], config)
    return dataclasses.replace(spec, extra={**spec.extra, "defaulted": defaulted})


@contextlib.contextmanager
def _transformers_quiet():
    import logging

    log = logging.getLogger("transformers")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def hf_config(model: str | Path | dict):
    """(name, transformers' config object) of a preset, a config.json or a dict."""
    name, data = read_config(model)
    try:
        from transformers import AutoConfig
    except ImportError as exc:
        raise ImportError(INSTALL) from exc
    data = {k: v for k, v in data.items() if not k.startswith("_")}
    if problem := value_problem(data):
        raise ValueError(f"{name}: {problem}")
    model_type = data.get("model_type")
    if not model_type:
        raise ValueError(f"{name}: the config has no model_type")
    from transformers import CONFIG_MAPPING, PretrainedConfig

    if model_type not in CONFIG_MAPPING:
        raise ValueError(f"{name}: model_type {model_type!r} is not one transformers knows")
    data = PretrainedConfig._decode_special_floats(data)  # {"__float__": "Infinity"}, as saved
    try:
        with _transformers_quiet():  # its warnings would make a refusal several lines
            config = AutoConfig.for_model(**data)
    except Exception as exc:  # noqa: BLE001 - transformers' validation, in one line
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise ValueError(
            f"{name}: transformers refuses the config: {' '.join(lines)[:160]}"
        ) from None
    return name, config


def _spec(name: str, config, source: str) -> ModelSpec:
    text = facts.GlobalLayers(config.get_text_config())
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    if heads % kv_heads:
        raise ValueError(
            f"{name}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}"
        )
    layers = text.num_hidden_layers
    layer_types = tuple(getattr(text, "layer_types", None) or ("full_attention",) * layers)
    dims = facts.head_dims(text, layer_types)
    base_dim = (
        dims.get("full_attention") or facts.attr(text, "head_dim") or facts.attr(text, "d_kv")
    )
    base_dim = base_dim or text.hidden_size // heads
    head_dim = base_dim
    if getattr(text, "qk_nope_head_dim", None):  # MLA: RoPE on a decoupled slice of each head
        head_dim = text.qk_nope_head_dim + text.qk_rope_head_dim
    params = dict(getattr(text, "rope_parameters", None) or {})
    if not params and _hf_rotation.find(config) is not None:  # GPT-J, CodeGen: rotary_dim only
        params = {"rope_type": "default", "rope_theta": CODE_THETA}
    first = params  # the global layers' parameters stand for the model's
    if _per_layer(params):
        keys = [k for k in ("full_attention", "main") if k in params]
        first = params[keys[0] if keys else next(iter(params))]
    facts.check_width(name, base_dim, first)
    layouts = (
        _hf_rotation.layouts(name, config, params, layer_types, lambda k: dims.get(k) or base_dim)
        if params
        else {None: _hf_rotation.NO_ROPE}
    )
    layout = next(iter(layouts.values()))
    reads = _hf_rotation.rope_of_layers(config, params, layer_types)  # DeepSeek-V4's
    window = getattr(text, "sliding_window", None)
    if getattr(text, "use_sliding_window", True) is False:
        window = None
    nope = getattr(text, "no_rope_layers", None) or ()
    return ModelSpec(
        name=name,
        model_type=text.model_type,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rotary_dim=layout.width
        if _hf_rotation.reads_width(first, layout)
        else facts.rotary_width(base_dim, first),
        rope_base_dim=base_dim,
        interleaved=layout.interleaved,
        rope_theta=float(first.get("rope_theta", math.nan)),
        rope_type=first.get("rope_type", "default") if params else "none",
        rope_parameters=params,
        layer_types=layer_types,
        sliding_window=window,
        mrope_section=tuple(first["mrope_section"]) if first.get("mrope_section") else None,
        hidden_size=text.hidden_size,
        mlp_size=facts.mlp_size(text),
        num_layers=layers,
        max_position_embeddings=getattr(text, "max_position_embeddings", 0),
        nope_layers=tuple(i for i, use in enumerate(nope) if not use),
        sinks=text.model_type == "gpt_oss",
        direction=layout.direction,
        rotary_start=layout.start,
        source=source,
        extra={
            **({"head_dims": dims} if len(set(dims.values())) > 1 else {}),
            **({"mla": text.kv_lora_rank} if getattr(text, "qk_nope_head_dim", None) else {}),
            **({"attention_chunk": n} if (n := facts.attr(text, "attention_chunk_size")) else {}),
            **facts.temperature(text),
            **_hf_rotation.widths(layouts, params),
            **({"rope_of_layers": reads} if reads else {}),
            **facts.elsewhere(text, first),
        },
    )
