"""Bad input fails early with ValueError/TypeError whose message names the argument."""

import pytest
import torch

import posenc
from posenc import functional as F

x3 = torch.randn(2, 5, 8)
cos8, sin8 = F.rope_cos_sin(5, 8)
rope = posenc.RoPEPositionalEncoding(8, max_len=16)
mha = posenc.RelativeMultiHeadAttention(8, 2, 2)
rmha = posenc.RoPEMultiHeadAttention(8, 2, 16)

CASES = [  # (id, call, exception, text the message must contain)
    ("odd rope dim", lambda: posenc.RoPEPositionalEncoding(7), ValueError, "dim"),
    ("odd rope_cos_sin dim", lambda: F.rope_cos_sin(4, 5), ValueError, "dim"),
    ("heads do not divide", lambda: posenc.RoPEMultiHeadAttention(10, 3), ValueError, "num_heads"),
    (
        "heads do not divide rel",
        lambda: posenc.RelativeMultiHeadAttention(10, 4),
        ValueError,
        "num_heads",
    ),
    ("zero d_model", lambda: posenc.SinusoidalPositionalEncoding(0), ValueError, "d_model"),
    ("float max_len", lambda: posenc.LearnablePositionalEncoding(4, 2.5), TypeError, "max_len"),
    (
        "negative clip",
        lambda: posenc.RelativePositionEncoding(4, -1),
        ValueError,
        "max_relative_position",
    ),
    (
        "sinusoidal rank",
        lambda: posenc.SinusoidalPositionalEncoding(8)(torch.randn(5, 8)),
        ValueError,
        "x",
    ),
    (
        "sinusoidal width",
        lambda: posenc.SinusoidalPositionalEncoding(8)(torch.randn(1, 5, 6)),
        ValueError,
        "d_model",
    ),
    (
        "sinusoidal too long",
        lambda: posenc.SinusoidalPositionalEncoding(8, 4)(x3),
        ValueError,
        "max_len",
    ),
    (
        "learnable offset",
        lambda: posenc.LearnablePositionalEncoding(8, 6)(x3, offset=2),
        ValueError,
        "max_len",
    ),
    (
        "negative offset",
        lambda: posenc.SinusoidalPositionalEncoding(8)(x3, offset=-1),
        ValueError,
        "offset",
    ),
    ("integer input", lambda: posenc.LearnablePositionalEncoding(8)(x3.long()), TypeError, "x"),
    ("rope rank", lambda: rope(torch.randn(5, 8)), ValueError, "x"),
    ("rope width", lambda: rope(torch.randn(1, 5, 6)), ValueError, "dim"),
    ("rope too long", lambda: rope(torch.randn(1, 17, 8)), ValueError, "max_len"),
    ("rope seq_len", lambda: rope(x3, seq_len=4), ValueError, "seq_len"),
    ("rope offset past end", lambda: rope(x3, positions=12), ValueError, "positions"),
    ("rope negative offset", lambda: rope(x3, positions=-1), ValueError, "positions"),
    (
        "rope negative ids",
        lambda: rope(x3, positions=torch.full((2, 5), -1)),
        ValueError,
        "positions",
    ),
    (
        "rope ids past end",
        lambda: rope(x3, positions=torch.full((2, 5), 16)),
        ValueError,
        "positions",
    ),
    (
        "rope ids shape",
        lambda: rope(x3, positions=torch.zeros(5, dtype=torch.long)),
        ValueError,
        "positions",
    ),
    ("rope float ids", lambda: rope(x3, positions=torch.zeros(2, 5)), TypeError, "positions"),
    ("rope float64 vs float32 tables", lambda: rope(x3.double()), TypeError, "double"),
    ("rope int input", lambda: rope(x3.long()), TypeError, "x"),
    ("apply_rope int", lambda: F.apply_rope(x3.int(), cos8, sin8), TypeError, "x"),
    ("apply_rope rotary > D", lambda: F.apply_rope(torch.randn(5, 6), cos8, sin8), ValueError, "D"),
    (
        "apply_rope table length",
        lambda: F.apply_rope(x3, *F.rope_cos_sin(7, 8)),
        ValueError,
        "cos/sin of shape",
    ),
    ("apply_rope sin shape", lambda: F.apply_rope(x3, cos8, sin8[:, :2]), ValueError, "sin"),
    (
        "apply_rope out shape",
        lambda: F.apply_rope(x3, cos8, sin8, out=torch.empty(2, 5, 6)),
        ValueError,
        "out",
    ),
    (
        "apply_rope out dtype",
        lambda: F.apply_rope(x3, cos8, sin8, out=x3.double()),
        ValueError,
        "out",
    ),
    ("attention query rank", lambda: mha(torch.randn(5, 8), x3, x3), ValueError, "query"),
    ("attention key width", lambda: mha(x3, torch.randn(2, 5, 6), x3), ValueError, "key"),
    (
        "attention batch",
        lambda: rmha(x3, torch.randn(3, 5, 8), torch.randn(3, 5, 8)),
        ValueError,
        "key",
    ),
    ("attention kv lengths", lambda: mha(x3, x3, torch.randn(2, 4, 8)), ValueError, "value"),
    ("attention dtype", lambda: rmha(x3, x3.double(), x3.double()), TypeError, "key"),
    (
        "shaw table shape",
        lambda: F.shaw_attention(*(torch.randn(1, 1, 3, 4),) * 3, torch.randn(4, 4), None, 2),
        ValueError,
        "emb_k",
    ),
    ("relative lengths", lambda: F.relative_positions(0, 3, 1), ValueError, "q_len"),
    # at max_distance <= the exact buckets the log-spaced buckets divide by log(1) or less
    (
        "t5 max_distance at the exact buckets",
        lambda: posenc.T5RelativeBias(2, num_buckets=32, max_distance=8),
        ValueError,
        "max_distance must exceed the 8 exact buckets",
    ),
    (
        "t5 one-sided max_distance",
        lambda: F.t5_relative_bucket(torch.arange(-9, 9), False, 32, 16),
        ValueError,
        "max_distance",
    ),
    (
        "t5 no exact bucket",
        lambda: posenc.T5RelativeBias(2, num_buckets=2, max_distance=8),
        ValueError,
        "num_buckets must be >= 4",
    ),
]


@pytest.mark.parametrize(("call", "exc", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_the_argument(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


def test_device_mismatch_via_meta_device():
    """A CPU module fed a tensor on another device (the meta device stands in for CUDA here)."""
    with pytest.raises(ValueError, match="x is on meta"):
        rope(torch.empty(2, 5, 8, device="meta"))
    with pytest.raises(ValueError, match="x is on meta"):
        posenc.SinusoidalPositionalEncoding(8)(torch.empty(2, 5, 8, device="meta"))
