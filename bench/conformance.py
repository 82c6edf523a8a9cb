"""Every RoPE model type of the installed transformers, as transformers runs it, against posenc.

    python -m bench.conformance [--markdown] [MODEL_TYPE ...]

A model type takes part when its modeling module has an `apply_rotary_pos_emb` and a rotary
embedding that its text config builds (posenc._hf_rotation.find): the types transformers itself
rotates q and k for. For each, its default config (`AutoConfig.for_model`) and variants of it
(`variants`) are written as config.json and read by `posenc.models.load`, as a user's would be;
then, per layer type with RoPE parameters of its own, the attention scores q_m . k_n after
posenc's rotation (posenc's tables, the pair layout and direction the spec holds) are compared
with those after transformers' rotary embedding and apply function, on random float64 q and k
at positions up to 4095 and past the original context of a schedule that switches by length
(posenc._hf_check.positions): `reproduced` within the float32 angle's tolerance of the
largest score, `wrong` beyond it, `refused` where posenc says in one line what it does not
reproduce (load runs the same check and refuses what it would get wrong). Anything else is
`broken`: a message of several lines or over 200 characters, or an exception not a ValueError.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import logging
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from posenc import _hf_check, _hf_rotation, models

MESSAGE_CHARS = 200


@dataclass(frozen=True)
class Result:
    model_type: str
    variant: str
    status: str  # reproduced, refused, wrong, broken
    detail: str


def rope_model_types() -> list[str]:
    """Model types whose modeling file defines apply_rotary_pos_emb and a rotary embedding
    class (read as text: importing every modeling module takes minutes); `check` then keeps
    those whose text config builds and runs it."""
    from transformers.models.auto.configuration_auto import (
        CONFIG_MAPPING_NAMES,
        model_type_to_module_name,
    )

    root = Path(importlib.util.find_spec("transformers.models").submodule_search_locations[0])
    found = []
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        name = model_type_to_module_name(model_type)
        path = root / name / f"modeling_{name}.py"
        if path.is_file():
            text = path.read_text()
            if "def apply_rotary_pos_emb" in text and re.search(r"class \w*RotaryEmbedding", text):
                found.append(model_type)
    return found


def _set_rope(text, change: dict) -> None:
    """The rope parameters of every layer type: a scaling replaces the type's own keys (its
    theta and partial rotary factor stay); a partial rotary factor is added to them."""
    params = copy.deepcopy(text.rope_parameters)
    per_layer = all(isinstance(v, dict) for v in params.values())
    kept = ("rope_theta", "partial_rotary_factor")
    for key, p in params.items() if per_layer else [(None, params)]:
        new = (
            {**p, **change}
            if "rope_type" not in change
            else {**{k: p[k] for k in kept if k in p}, **change}
        )
        if per_layer:
            params[key] = new
        else:
            params = new
    text.rope_parameters = params


def variants(config) -> list[tuple[str, object]]:
    """(name, config): the default and each scaling transformers implements, with the model's
    own context as the original one, and a partial rotary factor of 1/2."""
    text = config.get_text_config()
    out = [("default", config)]
    if not getattr(text, "rope_parameters", None):
        return out
    original = int(getattr(text, "max_position_embeddings", 0) or 4096) // 4
    scalings = {
        "linear": {"rope_type": "linear", "factor": 4.0},
        "dynamic": {"rope_type": "dynamic", "factor": 4.0},
        "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": original},
        "llama3": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": original,
        },
        "partial 1/2": {"partial_rotary_factor": 0.5},
    }
    for name, change in scalings.items():
        other = copy.deepcopy(config)
        try:
            _set_rope(other.get_text_config(), change)
        except (AttributeError, TypeError):
            continue
        out.append((name, other))
    return out


def _one(model_type: str, name: str, config) -> Result | None:
    """One config: None where transformers itself does not build and run a text rotation."""
    try:  # the config as transformers reads its config.json back, or refuses it itself
        config = models.hf_config(json.loads(config.to_json_string()))[1]
    except ValueError:
        return None
    rotation = _hf_rotation.find(config)
    if rotation is None:
        return None
    text = config.get_text_config()
    params = getattr(text, "rope_parameters", None) or {}
    keys = _hf_rotation.rope_keys(params, getattr(text, "layer_types", None) or ["full_attention"])
    try:
        rotation.tables(torch.tensor([0, 1]), keys[0])
    except Exception:  # noqa: BLE001
        return None  # transformers refuses this variant itself
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / model_type / "config.json"  # the folder names the model
        path.parent.mkdir()
        path.write_text(config.to_json_string())
        try:
            spec = models.load(path)
            worst = 0.0  # the error over its tolerance, worst layer type
            for key in keys:
                at = _hf_check.positions(spec.parameters(key), spec.max_position_embeddings)
                head = spec.base_dim(key), spec.rotary_start
                error = _hf_check.score_error(
                    rotation, spec.rope_tables, spec.interleaved, key, at, head
                )
                worst = max(worst, error / _hf_check.tolerance(at))
        except ValueError as exc:
            message = str(exc).replace(str(path), "config.json")
            one_line = len(message.splitlines()) == 1 and len(message) <= MESSAGE_CHARS
            return Result(model_type, name, "refused" if one_line else "broken", message)
        except Exception as exc:  # noqa: BLE001 - anything else is a bug to name
            text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return Result(model_type, name, "broken", text[:MESSAGE_CHARS])
    status = "reproduced" if worst <= 1 else "wrong"
    pairs = "interleaved" if spec.interleaved else "half-split"
    turn = "" if spec.direction == 1 else ", turning the other way"
    last = f", dims {spec.rotary_start}.. of {spec.base_dim()}" if spec.rotary_start else ""
    detail = f"{pairs}{turn}{last}; error {worst:.2f} of its tolerance"
    return Result(model_type, name, status, detail)


def check(model_type: str) -> list[Result]:
    """The model type's default config and its variants, each a Result."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(model_type)
    except Exception:  # noqa: BLE001 - a type transformers cannot build a default config for
        return []
    results = []
    for name, variant in variants(config):
        result = _one(model_type, name, variant)
        if result is not None:
            results.append(result)
        elif name == "default":
            return []
    return results


def quiet():
    """transformers' warnings about default configs (token ids past tiny vocabularies)."""
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()


def markdown(results: list[Result]) -> str:
    """The section of docs/models.md: counts, the refused with their reasons, the reproduced."""
    import transformers

    default = {r.model_type: r for r in results if r.variant == "default"}
    by = {s: sorted(t for t, r in default.items() if r.status == s) for s in STATUSES}
    others = [r for r in results if r.variant != "default"]
    lines = [
        f"transformers {transformers.__version__}: {len(default)} model types rotate q and k with "
        "a rotary embedding their text config builds. With their default configs, posenc "
        f"reproduces {len(by['reproduced'])} ({100 * len(by['reproduced']) / len(default):.1f}%), "
        f"refuses {len(by['refused'])} in one line, and is wrong on {len(by['wrong'])}; "
        f"{len(by['broken'])} fail otherwise. Variants of those configs (each scaling transformers "
        "implements, a partial rotary factor of 1/2): "
        + ", ".join(f"{sum(r.status == s for r in others)} {s}" for s in STATUSES)
        + ".",
        "",
        "| model type | variant | refused, in posenc's words |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r.model_type} | {r.variant} | {r.detail.replace('|', '/')} |"
        for r in results
        if r.status != "reproduced"
    ]
    lines += ["", "Reproduced with their default configs: " + ", ".join(by["reproduced"]) + "."]
    return "\n".join(lines)


STATUSES = ("reproduced", "refused", "wrong", "broken")


def run(model_types: list[str] | None = None, echo=None) -> list[Result]:
    quiet()
    results = []
    for model_type in model_types or rope_model_types():
        for r in check(model_type):
            results.append(r)
            if echo:
                echo(r)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.conformance", description=__doc__.splitlines()[0]
    )
    parser.add_argument("model_types", nargs="*", help="default: every RoPE model type")
    parser.add_argument("--markdown", action="store_true", help="docs/models.md's section")
    args = parser.parse_args(argv)

    def line(r: Result) -> None:
        print(f"{r.model_type} | {r.variant} | {r.status} | {r.detail}", flush=True)

    results = run(args.model_types, None if args.markdown else line)
    if args.markdown:
        print(markdown(results))
    return 1 if any(r.status in ("wrong", "broken") for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
