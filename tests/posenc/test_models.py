"""posenc.models: a model's positional facts from its config, and its RoPE tables rebuilt by
posenc's schedules, equal to what the model's own rotary embedding in transformers returns (every
layer type, positions to 12k: past most original contexts), within a few ulps of the float32
angle (tests/posenc/test_vs_transformers.py says why); the configs are transformers' defaults
for each model type, configs the harness has never seen; a scheme posenc does not reproduce is
named."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
import torch

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")
from transformers import AutoConfig  # noqa: E402

from posenc import _hf_check, _hf_rotation, models  # noqa: E402
from posenc.functional import rope_frequencies  # noqa: E402

TYPES = [
    "llama", "qwen2", "qwen3", "mistral", "gemma3_text", "gpt_oss", "deepseek_v3", "gpt_neox",
    "smollm3", "phi3", "olmo3", "qwen3_next", "llama4_text", "glm4", "cohere2", "phi",
    "stablelm", "falcon", "apertus", "deepseek_v2", "qwen3_5_text", "starcoder2", "gemma4_text",
    "deepseek_v4", "cohere",
]  # fmt: skip
ULPS, LIMIT = 2.0**-20, 1e-6


def _rotary(config):
    return _hf_rotation.find(config).rotary


def _theirs(rotary, positions, layer_type):
    kwargs = {}
    if layer_type is not None and "layer_type" in inspect.signature(rotary.forward).parameters:
        kwargs["layer_type"] = layer_type
    out = rotary(torch.zeros(1), positions[None], **kwargs)
    if isinstance(out, torch.Tensor):  # Llama 4, DeepSeek-V2: complex cos + i sin, (., D/2)
        return out[0].real, out[0].imag
    return out[0][0], out[1][0]


@pytest.mark.parametrize("model_type", TYPES)
def test_rope_tables_equal_the_models_rotary_embedding(model_type):
    config = AutoConfig.for_model(model_type)
    _check_tables(models._spec(model_type, config, source="transformers' defaults"), config)


@pytest.mark.parametrize("name", models.preset_names())
def test_every_preset_loads_and_its_tables_equal_transformers(name):
    data = json.loads((models.PRESETS / f"{name}.json").read_text())
    assert data["_name"] == name and data["_source"]
    spec = models.load(name)
    assert spec.name == name and spec.source == data["_source"]
    heads = data.get("num_attention_heads") or data.get("num_heads") or data["n_head"]
    assert spec.num_heads == heads  # T5's and BLOOM's own spellings
    assert spec.num_kv_heads == data.get("num_key_value_heads", spec.num_heads)
    config = AutoConfig.for_model(**{k: v for k, v in data.items() if not k.startswith("_")})
    if spec.rope_type == "none":  # T5's buckets, BLOOM's ALiBi: never a table of RoPE
        assert name in ("t5-base", "bloom-7b1") and not spec.rope_parameters
        with pytest.raises(ValueError, match=f"{name}: no RoPE"):
            spec.rope_tables(8)
        return
    _check_tables(spec, config)


# The hidden width of the MLP a token goes through, each the sum of the checkpoint's published
# sizes (the presets' _source): dense intermediate sizes; a mixture of experts' experts per token
# times their size plus the shared ones.
MLP = {
    "deepseek-v3": 8 * 2048 + 2048,  # 8 routed of 2048, 1 shared
    "deepseek-v4-flash": 6 * 2048 + 2048,
    "gemma-3-27b": 21504,
    "gemma-4": 9216,
    "gpt-oss-20b": 4 * 2880,  # 4 of its 32 experts, no shared one
    "llama-3.1-8b": 14336,
    "llama-3.2-1b": 8192,
    "llama-4-scout": 8192 + 8192,  # 1 routed of 8192 and the shared expert
    "mistral-7b": 14336,
    "pythia-1.4b": 4 * 2048,
    "qwen2.5-7b": 18944,
    "qwen2.5-vl-7b": 18944,
    "qwen3-8b": 12288,
    "qwen3.5-27b": 17408,
    "smollm3-3b": 11008,
    "t5-base": 3072,  # d_ff
    "bloom-7b1": 4 * 4096,
}


def test_every_preset_has_its_mlp_width():
    assert set(MLP) == set(models.preset_names())
    assert {n: models.load(n).mlp_size for n in MLP} == MLP


def _check_tables(spec, config):
    model_type = spec.model_type
    rotary = _rotary(config)
    positions = torch.arange(0, 12288, 3)
    per_layer = models._per_layer(spec.rope_parameters)
    for layer_type in sorted(spec.rope_parameters) if per_layer else [None]:
        cos, sin = spec.rope_tables(positions, layer_type)
        their_cos, their_sin = _theirs(rotary, positions, layer_type)
        cols = cos.shape[-1]
        if their_cos.shape[-1] == 2 * cols:  # cat(angles, angles) or each angle twice in a row
            halves = torch.equal(their_cos[:, :cols], their_cos[:, cols:])
            pick = slice(0, cols) if halves else slice(0, None, 2)
            their_cos, their_sin = their_cos[:, pick], their_sin[:, pick]
        scaling, rotary_dim, fraction, theta = spec.schedule(layer_type)
        inv, factor = rope_frequencies(rotary_dim, theta, scaling, int(positions.max()) + 1)
        angles = positions.double()[:, None] * inv
        bound = factor * (angles * (ULPS + LIMIT) + 2.0**-21)
        assert ((cos - their_cos).abs() <= bound).all(), (model_type, layer_type)
        assert ((sin - their_sin).abs() <= bound).all(), (model_type, layer_type)


def test_facts_of_a_config_json(tmp_path):
    """A Llama 3.1 config.json in transformers 4.x spelling (rope_scaling with rope_type)."""
    config = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = models.load(tmp_path)
    assert (spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.rotary_dim) == (32, 8, 128, 128)
    assert (spec.rope_type, spec.rope_theta, spec.interleaved) == ("llama3", 500000.0, False)
    assert spec.schedule()[0]["original_max_position_embeddings"] == 8192
    assert models.load(tmp_path / "config.json") == spec
    assert models.load(config).rope_parameters == spec.rope_parameters


@pytest.mark.parametrize(
    ("model", "text"),
    [
        ("no-such-model", "not a preset"),
        ({"hidden_size": 8}, "no model_type"),
        ({"model_type": "not_a_type"}, "not_a_type"),
    ],
)
def test_bad_models_are_named(model, text):
    with pytest.raises(ValueError, match=text):
        models.load(model)


def _longrope_lists(n: int) -> dict:
    return {
        "short_factor": [1.0 + 0.01 * i for i in range(n)],
        "long_factor": [1.0 + 0.5 * i for i in range(n)],
    }


# Configs in the shape their checkpoints ship them (keys and spellings; factor lists made up):
# Phi-3's legacy `rope_scaling` with `type` and a top-level original context, OLMo 3's YaRN
# in `rope_scaling` beside sliding and full layer types.
SHIPPED = {
    "phi-3-style": {
        "model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32,
        "num_key_value_heads": 32, "num_hidden_layers": 32, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0, "rope_scaling": {"type": "longrope", **_longrope_lists(48)},
    },
    "olmo-3-style": {
        "model_type": "olmo3", "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 32, "num_hidden_layers": 8, "intermediate_size": 11008,
        "max_position_embeddings": 65536, "rope_theta": 500000, "sliding_window": 4096,
        "rope_scaling": {
            "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192,
            "attention_factor": 1.2079, "beta_fast": 32, "beta_slow": 1,
        },
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 3
        + ["full_attention"],
    },
}  # fmt: skip


@pytest.mark.parametrize("name", SHIPPED)
def test_configs_as_shipped_give_transformers_rotation_per_layer_type(tmp_path, name):
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(SHIPPED[name]))
    spec = models.load(path)
    config = models.hf_config(path)[1]
    rotation = _hf_rotation.find(config)
    keys = _hf_rotation.rope_keys(spec.rope_parameters, spec.layer_types)
    assert len(keys) == (2 if name.startswith("olmo") else 1)
    for key in keys:
        at = _hf_check.positions(spec.parameters(key), spec.max_position_embeddings)
        head = spec.base_dim(key), spec.rotary_start
        error = _hf_check.score_error(rotation, spec.rope_tables, spec.interleaved, key, at, head)
        assert error <= _hf_check.tolerance(at), (key, error)
    if name.startswith("phi"):  # past the original context: the long factors are in play
        at = _hf_check.positions(spec.parameters(), spec.max_position_embeddings)
        assert int(at.max()) == 4097 and spec.rope_type == "longrope"


def test_a_key_posenc_does_not_know_is_one_line_naming_it_and_its_value():
    params = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}
    params.update(original_max_position_embeddings=2048, extrapolation_factor=2.0)
    with pytest.raises(ValueError) as err:
        models.load({"model_type": "llama", "rope_parameters": params})
    assert str(err.value) == "llama: yarn RoPE with extrapolation_factor=2.0: not reproduced"


def test_a_layout_read_wrong_is_refused_not_run(monkeypatch):
    """load checks the whole rotation against the model's code: a layout misread (here forced
    to half-split for GLM, whose pairs are interleaved) is refused in one line."""
    wrong = _hf_rotation.layout

    def half_split(rotation, layer_type=None, head_dim=0):
        found = wrong(rotation, layer_type, head_dim)
        return _hf_rotation.Layout(False, found.direction, found.width, start=found.start)

    monkeypatch.setattr(_hf_rotation, "layout", half_split)
    with pytest.raises(ValueError, match="differs from the model's own code in transformers"):
        models.load(json.loads(AutoConfig.for_model("glm").to_json_string()))


def test_the_rotated_slices_place_is_read_from_the_code_and_checked(monkeypatch):
    """DeepSeek-V4 turns the last R dims of each head ([no position | rotary]): read from its
    apply function on whole heads; misread as the first R, load refuses it (the scores are
    compared on whole heads wherever the model's function takes them)."""
    spec = models.load("deepseek-v4-flash")
    assert (spec.rotary_start, spec.rotary_dim, spec.head_dim) == (448, 64, 512)
    assert models.load("llama-3.1-8b").rotary_start == 0
    found = _hf_rotation.layout
    monkeypatch.setattr(_hf_rotation, "layout", lambda *a: dataclasses.replace(found(*a), start=0))
    with pytest.raises(ValueError, match="differs from the model's own code in transformers"):
        models.load("deepseek-v4-flash")


def test_deepseek_v4s_layers_read_the_rope_their_attention_names():
    """DeepSeek-V4's RoPE parameters are keyed main and compress, not by layer type: its
    compressed layers' attention reads compress (base 160000), so the model's global layers
    are those, and a named layer type maps to its key, as its attention's rope_layer_type."""
    spec = models.load("deepseek-v4-flash")
    assert spec.layer_type() == "compress" and spec.schedule()[3] == 160000.0
    assert spec.layer_type("compressed_sparse_attention") == "compress"
    assert spec.layer_type("main") == "main" and spec.schedule("main")[3] == 10000.0


def test_the_models_call_reads_no_signature_once_set_up(monkeypatch):
    """apply_tables runs inside the timed calls of the rope case's hf rows: after the first
    call it must not read the apply function's signature again (host work a model never pays)."""
    config = models.hf_config("llama-3.2-1b")[1]
    rotation = _hf_rotation.find(config)
    q = torch.randn(1, 2, 4, 64, dtype=torch.float64)
    tables = rotation.tables(torch.arange(4), None)
    rotation.apply_tables(q, q, tables)
    monkeypatch.setattr(inspect, "signature", lambda *a, **k: pytest.fail("read again"))
    rotation.apply_tables(q, q, tables)
