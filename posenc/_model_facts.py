"""Facts read from a transformers config beyond its RoPE parameters: the layers the spec
describes when the config holds per-layer attributes, the MLP width a token goes through, Llama
4's query temperature, the rope keys the attention reads instead of the rotation, head dims per
layer type, the rotary width (posenc.models builds the ModelSpec from them)."""

from __future__ import annotations


class GlobalLayers:
    """A text config whose per-layer attributes (transformers' per_layer_config: Gemma 4's
    head_dim, EmbeddingGemma 2's kv heads) read as its first global layer's, or its first
    layer's: the layers the spec describes (posenc.models.ModelSpec.layer_type)."""

    def __init__(self, text):
        self._text = text

    def __getattr__(self, name: str):
        try:
            return getattr(self._text, name)
        except AttributeError:
            raise
        except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError
            per = self._text.per_layer_config
            kinds = list(getattr(self._text, "layer_types", None) or ())
            i = kinds.index("full_attention") if "full_attention" in kinds else 0
            return getattr(per[i], name)


def check_width(name: str, base_dim: int, params: dict) -> None:
    """An odd rotary width (a default config's head dim of 73) is named, not run."""
    width = rotary_width(base_dim, params)
    if not params or params.get("rope_type") == "proportional" or width % 2 == 0:
        return
    factor = params.get("partial_rotary_factor")
    part = f" x partial_rotary_factor {factor}" if factor not in (None, 1, 1.0) else ""
    raise ValueError(
        f"{name}: head dim {base_dim}{part} gives an odd rotary width {width}: "
        "RoPE turns pairs of dims (set head_dim)"
    )


def elsewhere(text, params: dict) -> dict:
    """Rope parameters read outside the rotation, as the config class declares them
    (ignore_keys_at_rope_validation); Llama 4 scaling's beta is kept as the queries' scale by
    position, 1 + beta log(1 + floor(p / original)), which the attention applies after RoPE."""
    keys = set(getattr(text, "ignore_keys_at_rope_validation", None) or ()) & set(params)
    out: dict = {"rope_keys_elsewhere": tuple(sorted(keys))} if keys else {}
    if "llama_4_scaling_beta" in keys:
        original = params.get("original_max_position_embeddings")
        out["query_scale"] = (float(params["llama_4_scaling_beta"]), int(original or 0))
    return out


def temperature(text) -> dict:
    """Llama 4's NoPE layers scale their queries by position (attn_temperature_tuning):
    {"temperature": (floor_scale, attn_scale)}, or nothing."""
    if not getattr(text, "attn_temperature_tuning", False) or not getattr(
        text, "no_rope_layers", 0
    ):
        return {}
    return {"temperature": (float(text.floor_scale), float(text.attn_scale))}


def mlp_size(text) -> int:
    """The MLP width a token goes through (its FLOPs, not the weights read): intermediate_size,
    or a mixture's experts per token plus its shared ones (DeepSeek, Qwen2-MoE, Llama 4's)."""
    inter = getattr(text, "intermediate_size", 0) or getattr(text, "d_ff", 0) or 0  # T5: d_ff
    inter = inter or (4 * text.hidden_size if text.model_type == "bloom" else 0)  # its 4 x
    k = getattr(text, "num_experts_per_tok", None)
    if not k:
        return inter
    expert = text_part(getattr(text, "moe_intermediate_size", None)) or inter
    shared = (getattr(text, "n_shared_experts", None) or 0) * expert
    shared += getattr(text, "shared_expert_intermediate_size", None) or 0
    shared += inter if text.model_type.startswith("llama4") else 0
    return k * expert + shared


def text_part(value):
    """A width given per modality (ERNIE 4.5 VL's experts: [text, vision]): the text one."""
    return value[0] if isinstance(value, (list, tuple)) else value


def attr(config, name: str):
    """An attribute, or None where the config keeps it per layer (Gemma 4's head_dim)."""
    try:
        return getattr(config, name, None)
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError
        return None


def head_dims(text, layer_types) -> dict[str, int]:
    """{layer type: head dim} where the config holds per-layer attributes, else {}."""
    per = attr(text, "per_layer_config")
    if per is None:
        return {}
    dims: dict[str, int] = {}
    for i, kind in enumerate(layer_types):
        dim = attr(per[i], "head_dim")
        if dim is not None:
            dims.setdefault(kind, dim)
    return dims


def rotary_width(rotary: int, params: dict) -> int:
    if params.get("rope_type") == "proportional":
        return rotary
    return int(rotary * float(params.get("partial_rotary_factor") or 1.0))


SIZES = ("hidden_size", "num_attention_heads")  # what a run at the model's shapes needs


def defaulted_sizes(data: dict, config) -> tuple[str, ...]:
    """The SIZES the config.json leaves to transformers' class defaults (GPT-2's n_embd and
    T5's d_model count, by the config classes' attribute maps): a model's shapes, not a
    library's."""
    dicts = [data] + [v for v in data.values() if isinstance(v, dict)]  # text_config, ...
    maps = {}
    for c in (config, config.get_text_config()):
        maps.update(getattr(type(c), "attribute_map", {}) or {})
    missing = []
    for size in SIZES:
        names = {size, maps.get(size, size)}  # the standard name, or the class's own spelling
        if not any(n in d for d in dicts for n in names):
            missing.append(size)
    return tuple(missing)
