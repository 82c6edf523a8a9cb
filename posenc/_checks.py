"""Argument checks that name the offending argument (shared by functional and the modules)."""

from __future__ import annotations

import sys

import torch
from torch import Tensor


def check_positive(name: str, value: int, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def check_t5_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    """T5's buckets need at least one exact bucket a side and a log-spaced range beyond it:
    at max_distance <= the exact buckets the logarithm's base is 1 or below, and the buckets
    are undefined (a division by zero) or fall back into the exact ones."""
    check_positive("num_buckets", num_buckets)
    check_positive("max_distance", max_distance)
    exact = num_buckets // (4 if bidirectional else 2)
    if exact < 1:
        least = 4 if bidirectional else 2
        raise ValueError(
            f"num_buckets must be >= {least} (bidirectional={bidirectional}), got {num_buckets}"
        )
    if max_distance <= exact:
        raise ValueError(
            f"max_distance must exceed the {exact} exact buckets of num_buckets={num_buckets} "
            f"(bidirectional={bidirectional}), got {max_distance}"
        )


def check_pairs(name: str, value: int) -> None:
    """Rotations act on pairs of dimensions: the dimension must be positive and even."""
    check_positive(name, value)
    if value % 2:
        raise ValueError(f"{name} must be even (RoPE rotates pairs of dimensions), got {value}")


def check_float(name: str, t: Tensor) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")


def check_rank(name: str, t: Tensor, ranks: tuple[int, ...], layout: str) -> None:
    check_float(name, t)
    if t.dim() not in ranks:
        raise ValueError(f"{name} must be {layout}, got shape {tuple(t.shape)}")


def check_heads(d_model: int, num_heads: int) -> int:
    """Returns the head dim D = d_model / num_heads."""
    check_positive("d_model", d_model)
    check_positive("num_heads", num_heads)
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    return d_model // num_heads


def check_same_device(name: str, t: Tensor, ref: Tensor, ref_name: str) -> None:
    if t.device != ref.device:
        raise ValueError(
            f"{name} is on {t.device} but {ref_name} is on {ref.device}; move the module with "
            f".to({t.device!s}) or the input with .to({ref.device!s})"
        )


def check_cache_dtype(name: str, t: Tensor, cache: Tensor) -> None:
    """Tables less precise than the math dtype (float32 at least) would silently lose accuracy."""
    need = torch.promote_types(t.dtype, torch.float32)
    if torch.finfo(cache.dtype).eps > torch.finfo(need).eps:
        hint = ".double()" if need == torch.float64 else ".float()"
        raise TypeError(
            f"{name} needs {need} math but the module's tables are {cache.dtype}; call {hint} on "
            "the module"
        )


def compiling() -> bool:
    """torch.compiler.is_compiling() without its first call's import of Dynamo (about a second
    of every eager process's start): nothing is being traced while Dynamo is not loaded."""
    return "torch._dynamo" in sys.modules and torch.compiler.is_compiling()


def broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two shapes broadcast together (torch.broadcast_shapes imports sympy's symbolic
    shapes on its first call, half a second of an eager process's start)."""
    return all(m == n or m == 1 or n == 1 for m, n in zip(reversed(a), reversed(b), strict=False))
