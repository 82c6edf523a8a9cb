"""Where model configs come from: the presets (configs/models/<name>.json, each a config.json with
the source of its facts in `_source`), a config.json path or its folder, or a dict; read as
JSON here, interpreted by transformers' AutoConfig in posenc.models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PRESETS = Path(__file__).resolve().parents[1] / "configs" / "models"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.json"))


def read_config(model) -> tuple[str, dict]:
    if isinstance(model, dict):
        return str(model.get("_name_or_path") or model.get("model_type") or "model"), dict(model)
    if not isinstance(model, (str, Path)):
        raise TypeError(
            f"model must be a preset name, a path or a dict, got {type(model).__name__}"
        )
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    elif not path.exists():
        preset = PRESETS / f"{model}.json"
        if preset.is_file():
            path = preset
        elif path.suffix != ".json" and "/" not in str(model):
            raise ValueError(
                f"model={model!r}: not a preset ({', '.join(preset_names())}) nor a config.json"
            )
    if not path.is_file():
        raise ValueError(f"model={model}: no such file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        why = f"{exc.msg}, line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else exc
        raise ValueError(f"model={model}: not JSON ({why})") from None
    if not isinstance(data, dict):
        raise ValueError(f"model={model}: a config.json holds an object, got {type(data).__name__}")
    return data.get("_name", path.parent.name if path.name == "config.json" else path.stem), data


SIZES = (  # the sizes posenc reads: a positive integer wherever they are set
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_hidden_layers",
    "rotary_dim",
    "qk_rope_head_dim",
    "max_position_embeddings",
    "original_max_position_embeddings",
)


def value_problem(data: dict, where: str = "") -> str | None:
    """The first value posenc reads that no model can have (a size that is not a positive
    integer, a base or factor that is not a positive number, a rotated fraction outside
    (0, 1]), as "key: why", found anywhere in the config (text_config, rope_parameters per
    layer type); None if there is none. A null is left to the config class's default."""
    for key, v in data.items():
        name = f"{where}{key}"
        if isinstance(v, dict):
            problem = value_problem(v, f"{name}.")
        elif v is None or isinstance(v, list):
            problem = None
        elif key in SIZES and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            problem = f"{name}: a positive integer, got {v!r}"
        elif key in ("rope_theta", "factor") and not _positive(v):
            problem = f"{name}: a positive number, got {v!r}"
        elif key == "partial_rotary_factor" and not (_positive(v) and v <= 1):
            problem = f"{name}: a fraction in (0, 1], got {v!r}"
        else:
            problem = None
        if problem:
            return problem
    return None


def _positive(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0


def source_of(model) -> Any:
    if isinstance(model, dict):
        return model.get("_source", "a dict")
    path = Path(model)
    preset = PRESETS / f"{model}.json"
    if not path.exists() and preset.is_file():
        return json.loads(preset.read_text()).get("_source", preset.name)
    return path / "config.json" if path.is_dir() else path
