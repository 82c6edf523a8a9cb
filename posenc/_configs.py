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
    except json.JSONDecodeError as exc:
        raise ValueError(f"model={model}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return data.get("_name", path.parent.name if path.name == "config.json" else path.stem), data


def source_of(model) -> Any:
    if isinstance(model, dict):
        return model.get("_source", "a dict")
    path = Path(model)
    preset = PRESETS / f"{model}.json"
    if not path.exists() and preset.is_file():
        return json.loads(preset.read_text()).get("_source", preset.name)
    return path / "config.json" if path.is_dir() else path
