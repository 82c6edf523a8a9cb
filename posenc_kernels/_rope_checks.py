"""The argument checks of posenc_kernels.apply_rope, each naming the argument: every shape,
dtype, device, stride and position rule of the launcher, kept apart from the kernel so that
rope.py reads kernel -> launcher -> ops -> autograd -> API."""

import torch
from torch import Tensor


def check(q, k, cos, sin, scale, pos, offset: int, rotary: int) -> None:
    """Every argument check, with the argument's name in the message."""
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"q must be float32, float16 or bfloat16, got {q.dtype}")
    if k.dtype != q.dtype:
        raise TypeError(f"k is {k.dtype} but q is {q.dtype}")
    (bsz, seq_len, _, d), (kb, kl, _, kd) = q.shape, k.shape
    if kd != d:
        raise ValueError(f"q and k head dims differ: q has D={d}, k has D={kd}")
    if (kb, kl) != (bsz, seq_len):
        raise ValueError(f"q is (B={bsz}, L={seq_len}) but k is (B={kb}, L={kl})")
    if d % 2:
        raise ValueError(f"head dim D must be even, got {d}")
    if cos.dim() not in (2, 3) or sin.shape != cos.shape:
        raise ValueError(
            f"cos and sin must both be (L_max, F) or per-token (B, L, F), got {tuple(cos.shape)} "
            f"and {tuple(sin.shape)}"
        )
    if cos.dtype != torch.float32 or sin.dtype != torch.float32:
        raise TypeError(f"cos and sin must be float32 tables, got {cos.dtype} and {sin.dtype}")
    n_freq = cos.shape[-1]
    if 2 * n_freq > d:
        raise ValueError(f"rotary dim R = 2 * cos.shape[-1] = {2 * n_freq} exceeds D={d}")
    if isinstance(rotary, bool) or not isinstance(rotary, int) or rotary % 2:
        raise ValueError(f"rotary_dim must be an even int, got {rotary!r}")
    if not 2 * n_freq <= rotary <= d:
        raise ValueError(
            f"rotary_dim must lie in 2 * cos.shape[-1] = {2 * n_freq} .. D={d}, got {rotary}"
        )
    if cos.stride(-1) != 1 or sin.stride() != cos.stride():
        raise ValueError("cos and sin must have unit stride along F and the same strides")
    if scale is not None and (
        not isinstance(scale, Tensor)
        or scale.shape != cos.shape
        or scale.dtype != torch.float32
        or scale.stride() != cos.stride()
    ):
        raise ValueError(
            f"xpos_scale must be a float32 table shaped and strided like cos {tuple(cos.shape)}, "
            f"got {getattr(scale, 'shape', scale)}"
        )
    others = (("k", k), ("cos", cos), ("sin", sin), ("xpos_scale", scale), ("positions", pos))
    for name, t in others:
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if cos.dim() == 3:
        if tuple(cos.shape[:2]) not in ((bsz, seq_len), (1, seq_len)):
            raise ValueError(
                f"per-token cos/sin must be (B, L, F) = ({bsz}, {seq_len}, F) or (1, L, F), got "
                f"{tuple(cos.shape)}"
            )
        if pos is not None or offset:
            raise ValueError(
                "positions must be None with per-token cos/sin (B, L, F): their rows are the "
                "tokens' own"
            )
        return
    n_rows = cos.shape[0]
    if pos is not None:
        if pos.is_floating_point() or pos.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor, got {pos.dtype}")
        if pos.shape not in ((bsz,), (bsz, seq_len)):
            raise ValueError(
                f"positions must be (B,) = ({bsz},) or (B, L) = ({bsz}, {seq_len}), "
                f"got {tuple(pos.shape)}"
            )
        # On the device, without a host sync (a decoding step stays capturable in a CUDA
        # graph and compilable with fullgraph=True): an out-of-range position fails there.
        last = pos + (seq_len - 1) if pos.dim() == 1 else pos
        torch._assert_async(
            ((pos >= 0) & (last < n_rows)).all(),
            f"positions must lie in 0 .. {n_rows - 1} (the rows of cos/sin)",
        )
        return
    lo, hi = offset, offset + seq_len - 1
    if lo < 0:
        raise ValueError(f"positions must be >= 0, got {lo}")
    if hi >= n_rows:
        raise ValueError(
            f"cos/sin have {n_rows} rows but the largest position is {hi}: build longer tables"
        )


def check_start(start, d: int, rotary: int) -> None:
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= d - rotary:
        raise ValueError(f"rotary_start must be an int in 0 .. D - R = {d - rotary}, got {start!r}")
