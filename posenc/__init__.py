"""posenc: reference positional encodings in eager PyTorch, the oracle for kernels and benchmarks.

`posenc.seed` holds the tutorial's classes as published (baselines, defects kept); the classes
re-exported here are the corrected ones with the same names and compatible constructors.
"""

from posenc import functional, seed, serving
from posenc._logits import ForgettingGate
from posenc.absolute import LearnablePositionalEncoding, SinusoidalPositionalEncoding
from posenc.attention import MultiHeadAttention
from posenc.contextual import CoPEMultiHeadAttention
from posenc.layer import DecoderLayer, KVCache
from posenc.relative import (
    FIRE,
    ALiBi,
    KerpleLog,
    RelativeMultiHeadAttention,
    RelativePositionEncoding,
    ShawBias,
    T5RelativeBias,
)
from posenc.rotary import RoPEMultiHeadAttention, RoPEPositionalEncoding

__all__ = [
    "ALiBi",
    "CoPEMultiHeadAttention",
    "FIRE",
    "ForgettingGate",
    "KerpleLog",
    "DecoderLayer",
    "KVCache",
    "ShawBias",
    "T5RelativeBias",
    "LearnablePositionalEncoding",
    "MultiHeadAttention",
    "RelativeMultiHeadAttention",
    "RelativePositionEncoding",
    "RoPEMultiHeadAttention",
    "RoPEPositionalEncoding",
    "SinusoidalPositionalEncoding",
    "functional",
    "seed",
    "serving",
]
