"""The `model` knob: a preset name or a config.json (posenc.models), whose attention shapes and
RoPE a case takes in place of the knobs' (bench/config/plan.py sets d_model, num_heads and
num_kv_heads from it; the rotary cases read its schedule, rotary width and pairing here)."""

from __future__ import annotations

import functools

from bench.checks import as_list
from bench.registry import Knob, Point
from posenc import functional as F


@functools.lru_cache(maxsize=32)
def spec_of(model: str):
    """posenc.models.load, once per run; ValueError naming `model` (transformers absent
    included: the one line that says how to install it)."""
    from posenc import models

    try:
        spec = models.load(model)
    except ImportError as exc:
        raise ValueError(f"model: {exc}") from None
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith("model") else f"model={model}: {text}") from None
    if spec.extra.get("defaulted"):
        raise ValueError(
            f"model={model}: the config has no {' nor '.join(spec.extra['defaulted'])}; "
            "a run at transformers' class defaults would not be this model's"
        )
    return spec


def _check(value, key: str) -> list:
    values = as_list(value)
    for v in values:
        if v is not None and not isinstance(v, str):
            raise ValueError(f"{key}: a preset name or a config.json path, got {v!r}")
        if v is not None:
            spec_of(v)
    return values


def _shaped(point: Point) -> Point:
    """A model's point: the model's attention shapes (d_model, heads, kv heads)."""
    d_model, heads, kv = shape_of(point.model, point.layer_type)
    knobs = dict(point.knobs, num_kv_heads=None if kv == heads else kv)
    return Point(point.batch, point.seq_len, d_model, heads, **knobs)


# what a model= point takes from the model: its shapes, its RoPE schedule, its MLP width
SETS = ("d_model", "num_heads", "num_kv_heads", "rope_scaling", "rope_variant", "rope_theta")
SETS += ("rope_factor", "rope_original", "d_ff")
MODEL = Knob(
    "model",
    None,
    "a model preset (configs/models/) or a config.json: its heads, head dim and RoPE",
    _check,
    quiet_default=True,
    sets=SETS,
    expand=_shaped,
    describe=lambda point: {"rope": schedule_text(point)},
    exclusive=True,
)


def _layer_type_check(value, key: str) -> list:
    values = as_list(value)
    for v in values:
        if v is not None and not isinstance(v, str):
            raise ValueError(f"{key}: a layer type of the model (sliding_attention), got {v!r}")
    return values


LAYER_TYPE = Knob(
    "layer_type",
    None,
    "with model=: the layers measured, by transformers' name (sliding_attention: the local "
    "layers' RoPE and window); null: the global layers",
    _layer_type_check,
    quiet_default=True,
    needs="model",
)


def shape_of(model: str, layer_type: str | None = None) -> tuple[int, int, int]:
    """(d_model, num_heads, num_kv_heads) of the model's attention as the rope case sees it:
    heads x the rotated width (a layer type's own head dim, as Gemma 4's); MLA (DeepSeek)
    rotates a 64-d slice of every query head and one key head shared by all of them."""
    spec = spec_of(model)
    if spec.rotary_dim < spec.head_dim and spec.extra.get("mla", False):
        return spec.num_heads * spec.rotary_dim, spec.num_heads, 1
    head_dim = spec.extra.get("head_dims", {}).get(layer_type) or spec.head_dim
    return spec.num_heads * head_dim, spec.num_heads, spec.num_kv_heads


def layer_problem(point: Point) -> str | None:
    """A layer_type the model does not have, said in one line (None: it has it, or none)."""
    if point.layer_type is None:
        return None
    types = set(spec_of(point.model).layer_types) if point.model else set()
    if point.layer_type not in types:
        return f"layer_type={point.layer_type}: {point.model or 'no model'} has {sorted(types)}"
    return None


def window_of(point: Point) -> int | None:
    """The sliding window of the point's layers: a local layer's, or every layer's where the
    model has no global ones (Mistral-7B); None for a global layer."""
    spec = spec_of(point.model)
    local = point.layer_type == "sliding_attention"
    if local or "sliding_attention" not in spec.layer_types:
        return spec.sliding_window
    return None


def model_tables(point: Point, dtype, device):
    """cos, sin (L, R/2) of the point's model (its layer type's schedule: the global layers'
    without one), in dtype."""
    spec = spec_of(point.model)
    scaling, rotary, fraction, theta = spec.schedule(point.layer_type)
    if rotary > point.head_dim:  # MLA: the point is the rotated slice itself
        rotary = point.head_dim
    cos, sin = F.rope_cos_sin(
        point.seq_len,
        rotary,
        theta,
        scaling=scaling,
        seq_len=point.seq_len,
        rotate_fraction=fraction,
        dtype=dtype,
        device=device,
    )
    return cos, sin * spec.direction  # the model's turn: nanochat's goes the other way


def rotary_cols(point: Point) -> int:
    """The columns of the point's tables: R/2 of its model's rotary width R, else D/2."""
    if not point.model:
        return point.head_dim // 2
    return min(spec_of(point.model).schedule()[1], point.head_dim) // 2


def interleaved(point: Point) -> bool:
    return bool(point.model) and spec_of(point.model).interleaved


def rotary_start(point: Point) -> int:
    """The first rotated dim of a head: its model's (DeepSeek-V4's: D - R), else 0."""
    return spec_of(point.model).rotary_start if point.model else 0


# The relative-bias family of the models without RoPE (transformers' model types)
BIAS_OF = {"t5": "t5", "mt5": "t5", "umt5": "t5", "longt5": "t5", "bloom": "alibi", "mpt": "alibi"}


def bias_problem(point: Point, family: str) -> str | None:
    """A bias case's constraint with a model: the model's positions must be the family's, and a
    T5's buckets the case's (T5_ARGS: 32 buckets, max distance 128, bidirectional)."""
    if not point.model:
        return None
    spec = spec_of(point.model)
    own = BIAS_OF.get(spec.model_type, "RoPE" if spec.rope_type != "none" else "none")
    if own != family:
        return f"{point.model}: its positions are {own}'s, not {family}'s"
    buckets, distance = _t5_buckets(point.model) if family == "t5" else (32, 128)
    if (buckets, distance) != (32, 128):
        return f"{point.model}: {buckets} buckets to {distance}, the case's are 32 to 128"
    return None


@functools.lru_cache(maxsize=32)
def _t5_buckets(model: str) -> tuple[int, int]:
    """A T5's (num_buckets, max_distance), its config read once per run."""
    from posenc import models

    _, config = models.hf_config(model)
    return config.relative_attention_num_buckets, config.relative_attention_max_distance


def model_only(point: Point) -> str | None:
    """A case's constraint: a model sets the schedule and form, the knobs may not as well."""
    if point.model and spec_of(point.model).rope_type == "none":
        return f"{point.model}: no RoPE (its positions are its own: its attention case)"
    if point.model and (point.rope_scaling != "none" or point.rope_variant != "plain"):
        return "model= sets the RoPE schedule: rope_scaling and rope_variant stay at their defaults"
    return None


def schedule_text(point: Point) -> str:
    """The RoPE a model= row's tables were built with, in one line: the schedule with its
    parameters (factor lists by their length), the base, the rotated dims, the pairs and the
    turn, e.g. "llama3 (factor 8.0, high_freq_factor 4.0, ...), base 500000, 128 of 128 dims,
    half-split"."""
    spec = spec_of(point.model)
    if spec.rope_type == "none":  # its rows are skipped; their params say so
        return "none (its own positions)"
    scaling, rotary, fraction, theta = spec.schedule(point.layer_type)
    kind = (scaling or {}).get("type") or spec.parameters(point.layer_type).get("rope_type")
    keys = sorted(k for k in (scaling or {}) if k != "type")
    shown = [
        f"{k} {len(v)} values" if isinstance(v, (list, tuple)) else f"{k} {v}"
        for k, v in ((k, scaling[k]) for k in keys)
    ]
    shown += [f"p {fraction:g}"] if fraction != 1.0 else []  # p-RoPE: the turning frequencies
    text = (kind or "default") + (f" ({', '.join(shown)})" if shown else "") + f", base {theta:g}"
    last = "the last " if spec.rotary_start else ""
    text += f", {last}{min(rotary, point.head_dim)} of {point.head_dim} dims"
    text += ", interleaved" if spec.interleaved else ", half-split"
    return text + (", turning the other way" if spec.direction == -1 else "")
