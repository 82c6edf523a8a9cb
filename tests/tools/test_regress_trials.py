"""The acceptance trials plant real slowdowns in posenc (tools/regress_trials.py): each plant's
anchor line is in today's code once, and the planted module computes what posenc computes, so a
trial measures the gate on extra work and not on a broken or silently unplanted library."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import regress_trials  # noqa: E402

sys.path.remove(str(ROOT / "tools"))


def _planted(condition: str, tmp_path: Path):
    """The condition's file with its plant, imported as a module of its own."""
    file, anchor, planted = regress_trials.PLANTS[condition]
    text = (ROOT / file).read_text()
    assert text.count(anchor) == 1, f"{file}: the plant's line is gone or repeated"
    path = tmp_path / f"planted_{condition}.py"
    path.write_text(text.replace(anchor, planted))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("condition", ["rope15", "rope30"])
def test_a_rope_plant_adds_work_and_keeps_the_result(condition, tmp_path, monkeypatch):
    from posenc import functional

    planted = _planted(condition, tmp_path)
    calls = []
    real = planted.rotate_into
    monkeypatch.setattr(planted, "rotate_into", lambda *a: calls.append(a[0].shape) or real(*a))
    x = torch.randn(2, 4, 64, 32)
    cos, sin = functional.rope_cos_sin(64, 32)
    assert torch.equal(planted.apply_rope(x, cos, sin), functional.apply_rope(x, cos, sin))
    rows = 64 * int(condition.removeprefix("rope")) // 100
    assert calls == [(2, 4, rows, 32), (2, 4, 64, 32)]  # the planted pass, then the real one


def test_the_attention_plant_adds_work_and_keeps_the_gradients(tmp_path, monkeypatch):
    from posenc import _bias

    planted = _planted("attention30", tmp_path)
    products = []
    real = torch.matmul
    monkeypatch.setattr(planted.torch, "matmul", lambda *a: products.append(1) or real(*a))
    q, k, v = (torch.randn(1, 2, 8, 16, requires_grad=True) for _ in range(3))
    bias = torch.randn(2, 8, 8)
    grads, counts = [], []
    for module in (planted, _bias):
        products.clear()
        out = module.relative_attention(q, k, v, bias=bias)
        grads.append(torch.autograd.grad(out.sum(), (q, k, v)))
        counts.append(len(products))
    assert all(torch.allclose(a, b) for a, b in zip(*grads, strict=True))
    assert counts[0] == counts[1] + 2  # the hook's two more products in the backward
