"""Multi-axis RoPE tables (M-RoPE, 2D RoPE) and RoPE's per-frequency variants (xPos, p-RoPE)
against the float64 oracles of tests/posenc/naive.py, written from the models' definitions."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import RoPEMultiHeadAttention, RoPEPositionalEncoding
from posenc import functional as F
from tests.posenc import naive


def _positions(seed: int = 0) -> torch.Tensor:
    """(3, 2, L): two text + image + video sequences, the second shifted."""
    ids = F.mrope_position_ids([3, (1, 4, 5), 2, (2, 3, 3, 7), 4])
    return torch.stack((ids, ids + 11), dim=1)


@pytest.mark.parametrize(
    "section, interleaved",
    [([16, 24, 24], False), ([24, 20, 20], True), ([4, 6, 6], False), ([6, 5, 5], True)],
)
def test_mrope_tables_match_the_definition(section, interleaved):
    head_dim, base = 2 * sum(section), 1e6
    pos = _positions()
    cos, sin = F.mrope_cos_sin(pos, head_dim, section, base=base, interleaved=interleaved)
    assert cos.shape == (2, pos.shape[-1], head_dim // 2) and cos.dtype == torch.float32
    want = torch.tensor(
        [
            [
                [
                    naive.mrope_angle(
                        pos[:, b, n].tolist(), i, head_dim, section, interleaved, base
                    )
                    for i in range(head_dim // 2)
                ]
                for n in range(pos.shape[-1])
            ]
            for b in range(2)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(cos.double(), want.cos(), rtol=0, atol=1e-7)
    torch.testing.assert_close(sin.double(), want.sin(), rtol=0, atol=1e-7)


def test_mrope_on_text_equals_1d_rope():
    pos = torch.arange(40).expand(3, 2, 40)
    for interleaved, section in ((False, [16, 24, 24]), (True, [24, 20, 20])):
        cos, sin = F.mrope_cos_sin(pos, 128, section, interleaved=interleaved)
        cos1, sin1 = F.rope_cos_sin(40, 128)
        torch.testing.assert_close(cos, cos1.expand_as(cos), rtol=0, atol=0)
        torch.testing.assert_close(sin, sin1.expand_as(sin), rtol=0, atol=0)


def test_mrope_axes_per_model():
    axes2 = F.mrope_axes(64, [16, 24, 24], False).tolist()
    assert axes2 == [0] * 16 + [1] * 24 + [2] * 24
    axes3 = F.mrope_axes(64, [24, 20, 20], True).tolist()
    assert axes3[:6] == [0, 1, 2, 0, 1, 2] and axes3[-4:] == [0, 0, 0, 0]
    assert [axes3.count(a) for a in range(3)] == [24, 20, 20]


def test_mrope_position_ids_of_text_image_video():
    ids = F.mrope_position_ids([2, (1, 2, 3), 2, (2, 1, 2, 25), 1])
    t, h, w = ids.tolist()
    # text 0, 1; image at 2: t 2, h 2..3, w 2..4; text resumes past its largest position (4)
    assert t[:8] == [0, 1, 2, 2, 2, 2, 2, 2] and h[:8] == [0, 1, 2, 2, 2, 3, 3, 3]
    assert w[:8] == [0, 1, 2, 3, 4, 2, 3, 4]
    assert [t[8:10], h[8:10], w[8:10]] == [[5, 6]] * 3
    # video at 7: two frames 25 apart, one row, two columns; then text past 7 + 25
    assert t[10:14] == [7, 7, 32, 32] and h[10:14] == [7, 7, 7, 7] and w[10:14] == [7, 8, 7, 8]
    assert ids[:, 14].tolist() == [33, 33, 33]


@pytest.mark.parametrize(
    "split", F.SPLITS if hasattr(F, "SPLITS") else ["pixtral", "axial", "axial_xy"]
)
def test_rope_2d_tables_match_the_definition(split):
    height, width, d, base = 3, 5, 16, 100.0
    cos, sin = F.rope_2d_cos_sin(height, width, d, base=base, split=split, start=1)
    want = torch.tensor(
        [
            [
                naive.rope_2d_angle(n // width + 1, n % width + 1, i, d, split, base)
                for i in range(d // 2)
            ]
            for n in range(height * width)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(cos.double(), want.cos(), rtol=0, atol=1e-7)
    torch.testing.assert_close(sin.double(), want.sin(), rtol=0, atol=1e-7)


@pytest.mark.parametrize("split", ["pixtral", "axial", "axial_xy"])
def test_rope_2d_scores_depend_on_the_2d_offset_only(split):
    height, width, d = 6, 7, 32
    cos, sin = F.rope_2d_cos_sin(height, width, d, split=split, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    q, k = (
        torch.randn(d, dtype=torch.float64, generator=g),
        torch.randn(d, dtype=torch.float64, generator=g),
    )
    rq = F.apply_rope(q.expand(height * width, d), cos, sin)
    rk = F.apply_rope(k.expand(height * width, d), cos, sin)
    score = lambda r1, c1, r2, c2: float(rq[r1 * width + c1] @ rk[r2 * width + c2])  # noqa: E731
    assert math.isclose(score(1, 2, 0, 0), score(4, 5, 3, 3), rel_tol=1e-9)
    assert math.isclose(score(0, 6, 2, 1), score(3, 6, 5, 1), rel_tol=1e-9)
    assert not math.isclose(score(1, 2, 0, 0), score(2, 1, 0, 0), rel_tol=1e-3)  # rows != cols


def test_xpos_scale_and_its_decay():
    d, scale_base = 16, 64.0
    s = F.xpos_scale(torch.tensor([0, 5, 70]), d, scale_base, center=5, dtype=torch.float64)
    zeta = torch.tensor([(2 * i / d + 0.4) / 1.4 for i in range(d // 2)], dtype=torch.float64)
    torch.testing.assert_close(s, torch.stack([zeta ** ((p - 5) / scale_base) for p in (0, 5, 70)]))
    # q . k depends on m - n only, and the center cancels
    cos, sin = F.rope_cos_sin(100, d, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    q, k = (
        torch.randn(d, dtype=torch.float64, generator=g),
        torch.randn(d, dtype=torch.float64, generator=g),
    )
    scores = []
    for center in (0, 50):
        sc = F.xpos_scale(100, d, scale_base, center=center, dtype=torch.float64)
        rq = F.apply_rope(q.expand(100, d), cos * sc, sin * sc)
        rk = F.apply_rope(k.expand(100, d), cos / sc, sin / sc)
        scores.append([float(rq[m] @ rk[n]) for m, n in ((10, 3), (90, 83), (40, 40))])
    assert math.isclose(scores[0][0], scores[0][1], rel_tol=1e-9)
    assert scores[0] == pytest.approx(scores[1], rel=1e-9)


def test_p_rope_rotates_only_the_highest_frequencies():
    d, p = 32, 0.25
    n = F.rotating_frequencies(d, p)
    assert (
        n == 4 and F.rotating_frequencies(128, 0.25) == 16 and F.rotating_frequencies(10, 0.3) == 1
    )
    cos, sin = F.rope_cos_sin(50, d, rotate_fraction=p, dtype=torch.float64)
    full_cos, full_sin = F.rope_cos_sin(50, d, dtype=torch.float64)
    torch.testing.assert_close(cos[:, :n], full_cos[:, :n])
    assert (cos[:, n:] == 1).all() and (sin[:, n:] == 0).all()
    x = torch.randn(2, 50, d, dtype=torch.float64)
    y = F.apply_rope(x, cos, sin)
    half = d // 2
    kept = torch.cat((torch.arange(n, half), torch.arange(half + n, d)))
    torch.testing.assert_close(y[..., kept], x[..., kept], rtol=0, atol=0)
    assert not torch.allclose(y[..., :n], x[..., :n])


def test_modules_take_xpos_and_p_rope():
    d, max_len = 16, 64
    module = RoPEPositionalEncoding(d, max_len, rotate_fraction=0.5, xpos_scale_base=32.0).double()
    x = torch.randn(2, 3, 20, d, dtype=torch.float64)
    cos, sin = F.rope_cos_sin(max_len, d, rotate_fraction=0.5, dtype=torch.float64)
    scale = F.xpos_scale(max_len, d, 32.0, center=max_len // 2, dtype=torch.float64)
    torch.testing.assert_close(module(x), F.apply_rope(x, (cos * scale)[:20], (sin * scale)[:20]))
    torch.testing.assert_close(
        module(x, is_key=True), F.apply_rope(x, (cos / scale)[:20], (sin / scale)[:20])
    )
    attn = RoPEMultiHeadAttention(4 * d, 4, max_len, xpos_scale_base=32.0).double()
    q = torch.randn(1, 20, 4 * d, dtype=torch.float64)
    qh, kh, vh = attn.project(q, q, q)
    rq, rk = attn.rope(qh), attn.rope(kh, is_key=True)
    weights = torch.softmax(rq @ rk.transpose(-1, -2) / math.sqrt(d), -1)
    out, w = attn(q, q, q)
    torch.testing.assert_close(w, weights)
    assert not torch.allclose(attn.rope(kh), rk)  # keys are divided, not multiplied


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: F.mrope_cos_sin(torch.zeros(3, 1, 4, dtype=torch.long), 128, [16, 24, 23]),
            "mrope_section",
        ),
        (
            lambda: F.mrope_cos_sin(torch.zeros(2, 1, 4, dtype=torch.long), 128, [16, 24, 24]),
            "position_ids",
        ),
        (lambda: F.mrope_cos_sin(torch.zeros(3, 1, 4), 128, [16, 24, 24]), "position_ids"),
        (
            lambda: F.mrope_cos_sin(
                torch.zeros(3, 1, 4, dtype=torch.long), 128, [4, 30, 30], interleaved=True
            ),
            "mrope_section",
        ),
        (lambda: F.mrope_position_ids([3, (1, 0, 2)]), r"segments\[1\]"),
        (lambda: F.mrope_position_ids([3, (1, 2, 2, -1.0)]), r"segments\[1\]"),
        (lambda: F.mrope_position_ids("abc"), "segments"),
        (lambda: F.rope_2d_cos_sin(4, 4, 18), "head_dim"),
        (lambda: F.rope_2d_cos_sin(4, 4, 16, split="diagonal"), "split"),
        (lambda: F.rope_2d_cos_sin(0, 4, 16), "height"),
        (lambda: F.xpos_scale(8, 16, 0.0), "scale_base"),
        (lambda: F.rope_cos_sin(8, 16, rotate_fraction=1.5), "rotate_fraction"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
