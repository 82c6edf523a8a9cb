"""RoPE's long-context frequency schedules (posenc/_scaling.py): hand-worked cases per variant,
their properties, the relative-position property of scores, bad keys named. (The kernels take
these tables: there is no second implementation to hold to this one.)"""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.functional import apply_rope, rope_cos_sin, rope_frequencies

DEFAULT8 = [1.0, 0.1, 0.01, 0.001]  # base 10000, dim 8: 10000^(-2i/8)

# Worked by hand (dim 8, base 10000 unless said):
HAND = [
    ("linear x4", {"type": "linear", "factor": 4.0}, None, [0.25, 0.025, 0.0025, 0.00025], 1.0),
    # factor 2, original 16, L 32: base 10000 * (2 * 32 / 16 - 1)^(8/6) = 10000 * 3^(4/3)
    (
        "dynamic past the context",
        {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16},
        32,
        [(10000 * 3 ** (4 / 3)) ** (-i / 4) for i in range(4)],
        1.0,
    ),
    (
        "dynamic within the context",
        {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16},
        12,
        DEFAULT8,
        1.0,
    ),
    # original 2048: pairs turning 32 times -> 8 ln(2048 / 64 pi) / (2 ln 1e4) = 1.008 -> floor 1;
    # once -> 8 ln(2048 / 2 pi) / (2 ln 1e4) = 2.513 -> ceil 3; ramp (i - 1) / 2 = 0, 0, .5, 1
    (
        "yarn x4",
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
        None,
        [1.0, 0.1, 0.5 * 0.01 + 0.5 * 0.0025, 0.00025],
        0.1 * math.log(4) + 1,
    ),
    # original 1024: wavelengths 2 pi / theta = 6.28, 62.8, 628.3, 6283; 1024 / 4 = 256 < 628.3
    # <= 1024: smooth = (1024 / 628.3 - 1) / 3; 6283 > 1024: divided by 8
    (
        "llama3 x8",
        {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 1024},
        None,
        [
            1.0,
            0.1,
            (1 - (1024 * 0.01 / (2 * math.pi) - 1) / 3) * 0.01 / 8
            + (1024 * 0.01 / (2 * math.pi) - 1) / 3 * 0.01,
            0.001 / 8,
        ],
        1.0,
    ),
    (
        "longrope short",
        {
            "type": "longrope",
            "short_factor": [1, 2, 1, 2],
            "long_factor": [4, 8, 4, 8],
            "original_max_position_embeddings": 16,
            "factor": 4.0,
        },
        8,
        [1.0, 0.05, 0.01, 0.0005],
        math.sqrt(1.5),
    ),  # sqrt(1 + ln 4 / ln 16)
    (
        "longrope long",
        {
            "type": "longrope",
            "short_factor": [1, 2, 1, 2],
            "long_factor": [4, 8, 4, 8],
            "original_max_position_embeddings": 16,
            "factor": 4.0,
        },
        32,
        [0.25, 0.0125, 0.0025, 0.000125],
        math.sqrt(1.5),
    ),
]


@pytest.mark.parametrize(
    ("scaling", "seq_len", "want", "factor"), [h[1:] for h in HAND], ids=[h[0] for h in HAND]
)
def test_hand_worked_cases(scaling, seq_len, want, factor):
    inv_freq, attention = rope_frequencies(8, 10000.0, scaling, seq_len)
    assert inv_freq.dtype == torch.float64 and inv_freq.shape == (4,)
    assert_close(inv_freq, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0)
    assert attention == pytest.approx(factor, rel=1e-12)


LLAMA = dict(original_max_position_embeddings=8192, factor=8.0)


def test_yarn_and_llama3_keep_the_highest_and_divide_the_lowest():
    plain = rope_frequencies(128, 500000.0)[0]
    for kind in ("yarn", "llama3"):
        scaled = rope_frequencies(128, 500000.0, {"type": kind, **LLAMA})[0]
        assert scaled[0] == plain[0]
        assert_close(scaled[-1], plain[-1] / 8, rtol=1e-12, atol=0)
        assert torch.all(scaled <= plain) and torch.all(scaled >= plain / 8 * (1 - 1e-12))


def test_the_variants_reduce_to_the_default():
    plain = rope_frequencies(64)[0]
    assert torch.equal(rope_frequencies(64, scaling={"type": "linear", "factor": 1.0})[0], plain)
    dynamic = {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4096}
    for length in (None, 100, 4096):
        assert_close(rope_frequencies(64, scaling=dynamic, seq_len=length)[0], plain)
    assert not torch.allclose(rope_frequencies(64, scaling=dynamic, seq_len=8192)[0], plain)


VARIANTS = [
    None,
    {"type": "linear", "factor": 4.0},
    {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64},
    {
        "type": "longrope",
        "short_factor": [1.0] * 8,
        "long_factor": [1.0 + i for i in range(8)],
        "original_max_position_embeddings": 64,
        "factor": 8.0,
    },
]


@pytest.mark.parametrize("scaling", VARIANTS, ids=lambda s: s["type"] if s else "none")
def test_scores_depend_on_m_minus_n_only(scaling):
    """q_m . k_n after the rotation is a function of m - n for every schedule (the tables are
    scaled by the attention factor a, so scores by a^2)."""
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    pos = torch.arange(300)
    cos, sin = rope_cos_sin(pos, 16, scaling=scaling, seq_len=256, dtype=torch.float64)

    def score(m, n):
        qm = apply_rope(q[None], cos[m : m + 1], sin[m : m + 1])
        kn = apply_rope(k[None], cos[n : n + 1], sin[n : n + 1])
        return (qm * kn).sum()

    for m, n in ((5, 2), (200, 197), (299, 296)):
        assert_close(score(m, n), score(3, 0), rtol=1e-9, atol=1e-9)
    a = rope_frequencies(16, scaling=scaling, seq_len=256)[1]
    assert_close(score(0, 0), a**2 * (q * k).sum(), rtol=1e-12, atol=1e-12)


def test_modules_take_scaling_and_a_rotary_dim():
    """GPT-NeoX rotates 25% of each head: dims R .. D - 1 pass through."""
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    rope = posenc.RoPEPositionalEncoding(64, 128, scaling=yarn, rotary_dim=16)
    x = torch.randn(2, 100, 64)
    out = rope(x)
    assert torch.equal(out[..., 16:], x[..., 16:])
    cos, sin = rope_cos_sin(100, 16, scaling=yarn, seq_len=128)
    assert_close(out[..., :16], apply_rope(x[..., :16], cos, sin))
    mha = posenc.RoPEMultiHeadAttention(64, 4, 128, scaling=yarn, rotary_dim=8)
    assert mha.rope.rotary_dim == 8 and mha.rope.scaling == yarn
    assert mha(x, x, x)[0].shape == x.shape


BAD = [
    ({"type": "ntk", "factor": 2.0}, ValueError, r"scaling\['type'\]"),
    ({"type": "linear"}, ValueError, r"scaling\['factor'\] is required"),
    ({"type": "linear", "factor": 0.5}, ValueError, r"scaling\['factor'\] must be >= 1"),
    ({"type": "linear", "factor": 2.0, "beta": 1}, ValueError, r"scaling\['beta'\]: not a key"),
    ({"type": "yarn", "factor": 2.0}, ValueError, "original_max_position_embeddings"),
    (
        {
            "type": "yarn",
            "factor": 2.0,
            "original_max_position_embeddings": 64,
            "beta_fast": 1.0,
            "beta_slow": 2.0,
        },
        ValueError,
        r"scaling\['beta_fast'\]",
    ),
    (
        {
            "type": "llama3",
            "factor": 8.0,
            "original_max_position_embeddings": 64,
            "low_freq_factor": 4.0,
            "high_freq_factor": 1.0,
        },
        ValueError,
        r"scaling\['low_freq_factor'\]",
    ),
    (
        {
            "type": "longrope",
            "short_factor": [1.0],
            "long_factor": [1.0] * 4,
            "original_max_position_embeddings": 64,
        },
        ValueError,
        r"scaling\['short_factor'\] must have",
    ),
    (
        {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 0},
        ValueError,
        "original_max_position_embeddings",
    ),
    ("yarn", TypeError, "scaling must be None or a dict"),
]


@pytest.mark.parametrize(("scaling", "exc", "text"), BAD, ids=[str(b[2]) for b in BAD])
def test_bad_scaling_names_the_key(scaling, exc, text):
    with pytest.raises(exc, match=text):
        rope_frequencies(8, 10000.0, scaling)


def test_a_schedule_is_declared_in_one_place(monkeypatch):
    """A schedule added to posenc/_scaling.py's SCHEDULES alone is checked, computed and
    extended: its keys, its frequencies, its name in the error that lists the schedules."""
    from posenc import _scaling

    def halved(dim, base, s, seq_len, device):
        return _scaling._default(dim, base, device) / (2 * s["factor"]), 1.0

    new = _scaling.Schedule(
        frozenset({"factor"}), {}, _scaling._no_check, halved, lambda f, o, d: {"factor": f}
    )
    monkeypatch.setitem(_scaling.SCHEDULES, "halved", new)
    scaling = _scaling.extension("halved", 2.0, 16, 8)
    assert scaling == {"type": "halved", "factor": 2.0}
    inv_freq, factor = rope_frequencies(8, 10000.0, scaling)
    assert_close(inv_freq, torch.tensor(DEFAULT8, dtype=torch.float64) / 4) and factor == 1.0
    with pytest.raises(ValueError, match="scaling\\['beta_fast'\\]: not a key of the halved"):
        rope_frequencies(8, 10000.0, dict(scaling, beta_fast=3.0))
    with pytest.raises(ValueError, match="linear, dynamic, yarn, llama3, longrope, halved"):
        rope_frequencies(8, 10000.0, {"type": "nope"})


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "llama3", "longrope"])
def test_each_extension_is_a_valid_schedule(kind):
    """extension(kind, factor, original, dim): what the harness's rope_scaling knob builds,
    accepted by rope_frequencies at that dim, the factor and the context where it takes them."""
    from posenc._scaling import extension

    scaling = extension(kind, 8.0, 4096, 64)
    inv_freq, _ = rope_frequencies(64, 10000.0, scaling, seq_len=8 * 4096)
    assert inv_freq.shape == (32,) and scaling["factor"] == 8.0
    assert scaling.get("original_max_position_embeddings", 4096) == 4096
