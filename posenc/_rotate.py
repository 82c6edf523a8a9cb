"""The eager, allocation-free engine behind `posenc.functional.apply_rope(..., out=...)`.

Layouts: x is (..., L, D) with any strides; the rotated part is x[..., :R], R = 2 * cos.shape[-1];
cos/sin are already in the math dtype (float32 or float64) and have x's rank.

Cost model on the CPU (B=32, L=512, D=512 float32, 32 MiB in and out; figures in README):
- interleaved pairs are complex numbers, so one complex multiply by e^{i t} rotates in one pass:
  about the traffic of a copy;
- half-split pairs (i, i + R/2) are not adjacent, so it takes three elementwise passes
  ([a cos, b cos] in one full-width pass, then a' -= b sin and b' += a sin). They run chunk by
  chunk, so that passes two and three find the chunk in cache. Each chunk costs ~25 us of
  dispatch, hence chunks of a few MiB rather than L2-sized ones.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Bytes of x per chunk on the CPU for the multi-pass paths (measured best of 128 KiB .. 16 MiB on
# a 2-core EPYC with 1 MiB L2 per core and a shared 32 MiB L3). On CUDA one chunk covers x.
CHUNK_BYTES = 1 << 21


def rotate_into(x: Tensor, cos: Tensor, sin: Tensor, out: Tensor, interleaved: bool) -> None:
    """out <- rope(x); out may be x itself (in place) or a distinct tensor like x."""
    r = 2 * cos.shape[-1]
    src, dst = x[..., :r], out[..., :r]
    in_place = out.data_ptr() == x.data_ptr()
    if r < x.shape[-1] and not in_place:
        out[..., r:].copy_(x[..., r:])  # partial rotary: the rest passes through
    if x.dtype == cos.dtype and interleaved:
        src_c, dst_c = _complex_view(src), _complex_view(dst)
        if src_c is not None and dst_c is not None:  # elementwise, so in place is safe
            torch.mul(src_c, torch.complex(cos, sin), out=dst_c)  # (..., L, R/2) complex
            return
    # Temporaries: float16/bfloat16 are rotated in float32, and in place the later passes
    # need inputs that the first pass overwrote. Both are one chunk at a time.
    needs_temp = x.dtype != cos.dtype or in_place
    chunk = CHUNK_BYTES if x.device.type == "cpu" else None
    for idx in _chunks(x, chunk):
        c, s = cos[_aligned(idx, cos)], sin[_aligned(idx, sin)]
        part, target = src[idx], dst[idx]
        if not needs_temp:
            _rotate_passes(part, c, s, target, interleaved)
            continue
        part = part.to(cos.dtype, copy=True)
        result = torch.empty_like(part) if target.dtype != cos.dtype else target
        _rotate_passes(part, c, s, result, interleaved)
        if result is not target:
            target.copy_(result)


def _rotate_passes(src: Tensor, cos: Tensor, sin: Tensor, dst: Tensor, interleaved: bool) -> None:
    """dst <- rope(src) in real arithmetic; src and dst distinct, both in cos's dtype."""
    half = cos.shape[-1]
    if interleaved:
        a, b, oa, ob = src[..., 0::2], src[..., 1::2], dst[..., 0::2], dst[..., 1::2]
        torch.mul(a, cos, out=oa)
        torch.mul(b, cos, out=ob)
    else:
        a, b, oa, ob = src[..., :half], src[..., half:], dst[..., :half], dst[..., half:]
        # one full-width pass: (..., L, 2, R/2) * (..., L, 1, R/2) -> [a cos, b cos]
        torch.mul(src.unflatten(-1, (2, half)), cos.unsqueeze(-2), out=dst.unflatten(-1, (2, half)))
    oa.addcmul_(b, sin, value=-1.0)  # a' = a cos - b sin
    ob.addcmul_(a, sin)  # b' = b cos + a sin


def _complex_view(t: Tensor) -> Tensor | None:
    """t (..., R) as (..., R/2) complex, when its strides allow a view (else None)."""
    t = t.unflatten(-1, (-1, 2))
    ok = t.stride(-1) == 1 and t.storage_offset() % 2 == 0
    strides = zip(t.stride()[:-1], t.shape[:-1], strict=True)
    ok = ok and all(st % 2 == 0 for st, n in strides if n > 1)
    return torch.view_as_complex(t) if ok else None


def _chunks(x: Tensor, max_bytes: int | None):
    """Index tuples that cut x's leading dims (never the last two) into blocks of ~max_bytes."""
    if max_bytes is None or x.dim() == 2:
        yield (slice(None),)
        return
    outer = x[0].numel() * x.element_size()
    if outer > max_bytes and x.dim() >= 4:  # one dim-0 slice is too big: cut dim 1 as well
        inner = max(1, max_bytes // max(1, x[0, 0].numel() * x.element_size()))
        for i in range(x.shape[0]):
            for j in range(0, x.shape[1], inner):
                yield (slice(i, i + 1), slice(j, j + inner))
        return
    step = max(1, max_bytes // max(1, outer))
    for i in range(0, x.shape[0], step):
        yield (slice(i, i + step),)


def _aligned(idx: tuple[slice, ...], table: Tensor) -> tuple[slice, ...]:
    """The same cut for a table broadcast against x: its size-1 dims stay whole."""
    return tuple(slice(None) if table.shape[d] == 1 else sl for d, sl in enumerate(idx))
