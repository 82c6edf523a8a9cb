"""docs/models.md's table of YaRN's attention factor engine by engine, recomputed: the
transformers column from transformers' own YaRN code (and posenc's, which follows it), the
other columns from the engines' rules as the page states them, so that no cell drifts from its
rule."""

import math
import re
from pathlib import Path

import pytest

from posenc.functional import rope_frequencies

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")

PAGE = Path(__file__).parents[1] / "docs" / "models.md"
SECTION = re.compile(r"<!-- yarn-factors: begin -->\n(.*?)\n<!-- yarn-factors: end -->", re.S)
KEYS = re.compile(r"(factor|mscale_all_dim|mscale|attention_factor) ([\d.]+)")


def _g(f: float, m: float) -> float:
    return 0.1 * m * math.log(f) + 1.0 if f > 1 else 1.0


def _transformers(params: dict) -> tuple[float, float]:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, yarn_apply_mscale

    rope = {"rope_type": "yarn", "rope_theta": 1e4, "original_max_position_embeddings": 4096}
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, rope_parameters={**rope, **params})
    _, factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    return factor, yarn_apply_mscale({**rope, **params}, 1.0)


def _vllm_yarn(p: dict) -> tuple[float, float]:
    f = p["factor"]
    if "attention_factor" in p:
        return p["attention_factor"], 1.0
    if p.get("mscale") and p.get("mscale_all_dim"):
        return _g(f, p["mscale"]) / _g(f, p["mscale_all_dim"]), 1.0
    return _g(f, 1.0), 1.0


def _vllm_deepseek(p: dict) -> tuple[float, float]:
    f, all_dim = p["factor"], p.get("mscale_all_dim", 0.0)
    return _g(f, p.get("mscale", 1.0)) / _g(f, all_dim), _g(f, all_dim) ** 2


def _llama_cpp(p: dict) -> tuple[float, float]:
    f = p["factor"]
    if "mscale_all_dim" in p:  # the DeepSeek-2 path: cancelled in the kernel, squared in kq
        return 1.0, _g(f, p["mscale_all_dim"]) ** 2
    return _g(f, 1.0), 1.0


def _cells(text: str) -> tuple[float, float]:
    a, b = (float(x) for x in text.split(","))
    return a, b


def test_every_cell_follows_its_engines_rule():
    found = SECTION.search(PAGE.read_text())
    assert found, "docs/models.md lacks the yarn-factors section"
    rows = [line for line in found.group(1).splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 4
    for line in rows:
        keys, *cells = (c.strip() for c in line.strip("|").split("|"))
        params = {k: float(v) for k, v in KEYS.findall(keys)}
        hf = _transformers(params)
        ours = rope_frequencies(64, 1e4, {"type": "yarn", "original_max_position_embeddings": 4096,
                                          **params})[1]  # fmt: skip
        assert ours == pytest.approx(hf[0], rel=1e-12)
        want = (hf, _vllm_yarn(params), _vllm_deepseek(params), _llama_cpp(params))
        for cell, (factor, softmax) in zip(cells, want, strict=True):
            got = _cells(cell)
            assert got == pytest.approx((factor, softmax), abs=6e-5), (keys, cell)
