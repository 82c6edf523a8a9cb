"""The fused RoPE inside transformers' models, in one process with them (run from the repository
root, where the project's packages come first on sys.path): docs/kernels.md's drop-in block run
as written (a tiny random Llama with grouped-query attention, logits equal within 1e-5 with the
kernel swapped in), the same for Qwen2, and a control: a rotation by the wrong angle is seen."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import posenc_kernels
from tests.posenc_kernels._device import DEVICE

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")
from transformers.models.llama import modeling_llama  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402

DOC = Path(__file__).parents[2] / "docs" / "kernels.md"


def _dropin_block() -> str:
    text = DOC.read_text()
    section = text[text.index("## In a transformers model") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def restore():
    saved = modeling_llama.apply_rotary_pos_emb, modeling_qwen2.apply_rotary_pos_emb
    yield
    modeling_llama.apply_rotary_pos_emb, modeling_qwen2.apply_rotary_pos_emb = saved


def test_the_docs_dropin_runs_as_written(restore):
    scope: dict = {}
    exec(compile(_dropin_block(), str(DOC), "exec"), scope)  # noqa: S102
    assert modeling_llama.apply_rotary_pos_emb is posenc_kernels.apply_rotary_pos_emb
    assert scope["expected"].shape == (1, 32, 128)


def _logits(module, model, ids, rotation):
    module.apply_rotary_pos_emb = rotation
    with torch.no_grad():
        return model(ids).logits


def _wrong(q, k, cos, sin, unsqueeze_dim=1):  # the control: the rotation by minus the angle
    return posenc_kernels.apply_rotary_pos_emb(q, k, cos, -sin, unsqueeze_dim)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_logits_with_the_fused_rope_equal_transformers(restore, family):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    module, config_cls, model_cls = {
        "llama": (modeling_llama, LlamaConfig, LlamaForCausalLM),
        "qwen2": (modeling_qwen2, Qwen2Config, Qwen2ForCausalLM),
    }[family]
    config = config_cls(
        vocab_size=96,
        hidden_size=96,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    model = model_cls(config).eval().to(DEVICE)
    ids = torch.randint(0, 96, (2, 12), device=DEVICE)
    own = module.apply_rotary_pos_emb
    expected = _logits(module, model, ids, own)
    got = _logits(module, model, ids, posenc_kernels.apply_rotary_pos_emb)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    wrong = _logits(module, model, ids, _wrong)
    assert (wrong - expected).abs().max() > 1e-3


def test_bad_unsqueeze_dim_is_named():
    q = torch.randn(1, 2, 4, 8)
    cos = torch.ones(1, 4, 8)
    with pytest.raises(ValueError, match="unsqueeze_dim"):
        posenc_kernels.apply_rotary_pos_emb(q, q, cos, cos, unsqueeze_dim=3)
