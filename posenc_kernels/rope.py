"""Fused rotary position embedding: q and k rotated in one launch, forward and backward.

Reads each element of q and k once and writes it once, so its limit is a copy of the same bytes.
File order: kernel -> launcher (checks, grid) -> torch.library custom ops -> autograd.Function
-> public `apply_rope` -> `FusedRoPE` module.

Why this file is long: one op per file in that order (docs/architecture.md), the checks of
every argument the launcher takes (layouts, pairs, partial rotary, positions) with it.

Layout inside the kernel: q and k are seen as (B, L, H, D) through four strides each, whatever
their memory order (`layout="bhsd"` is a transposed view, a fused-qkv split is a strided view);
nothing is made contiguous. cos/sin are (L_max, F) float32 rows indexed by position, or
(B, L, F) per-token rows (multi-axis RoPE: M-RoPE, 2D RoPE, every form that mixes positions per
frequency reduces to them); F <= R/2 frequencies turn, the rest of the R/2 pairs pass (p-RoPE).
"""

# No `from __future__ import annotations`: torch.library.custom_op and Triton read annotations.

import contextlib

import torch
import triton
import triton.language as tl
from torch import Tensor, nn

from posenc_kernels import rope_cpu
from posenc_kernels._runtime import compiling, cpu_native, launches, native_cpu

# ---------------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------------

# Rows of cos/sin: offset + l | offsets[b] + l | ids[b, l] | the token's own row (b, l)
POS_RANGE, POS_PER_SEQ, POS_IDS, POS_TABLE = 0, 1, 2, 3


@triton.jit
def _rotate_heads(
    x_ptr,
    o_ptr,
    stride_xh,
    stride_xd,
    stride_oh,
    stride_od,
    n_heads,
    cos,
    sin,
    D,
    HALF,
    N_PAIRS,
    INTERLEAVED: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    OFFS_64: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
):
    """Rotate all heads of one token: x_ptr/o_ptr point at (b, l, head 0, dim 0). Pairs
    (i, i + HALF) or (2i, 2i + 1) for i < N_PAIRS are read and written (N_PAIRS < HALF in place
    with p-RoPE: the pairs that stand still are not touched). Offsets within the token are
    32-bit unless OFFS_64 (a head stride past 2**31 elements)."""
    offs_i = tl.arange(0, BLOCK_HALF)  # pair index i < R/2
    mask_i = offs_i < N_PAIRS
    for h0 in range(0, n_heads, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        if OFFS_64:
            offs_h = offs_h.to(tl.int64)
        row_x, row_o = offs_h[:, None] * stride_xh, offs_h[:, None] * stride_oh
        mask_h = offs_h[:, None] < n_heads
        if INTERLEAVED:  # pairs (2i, 2i + 1): a whole row loaded, split in registers
            offs_r = tl.arange(0, 2 * BLOCK_HALF)
            mask = mask_h & (offs_r[None, :] < 2 * N_PAIRS)
            x = tl.load(x_ptr + row_x + offs_r[None, :] * stride_xd, mask=mask, other=0.0)
            a, b = tl.split(tl.reshape(x.to(tl.float32), (BLOCK_H, BLOCK_HALF, 2)))
        else:  # pairs (i, i + R/2): two contiguous halves
            mask = mask_h & mask_i[None, :]
            a = tl.load(x_ptr + row_x + offs_i[None, :] * stride_xd, mask=mask, other=0.0)
            b = tl.load(x_ptr + row_x + (offs_i[None, :] + HALF) * stride_xd, mask=mask, other=0.0)
            a, b = a.to(tl.float32), b.to(tl.float32)
        a2 = a * cos[None, :] - b * sin[None, :]
        b2 = b * cos[None, :] + a * sin[None, :]
        out_ty = o_ptr.dtype.element_ty
        if INTERLEAVED:
            y = tl.reshape(tl.join(a2, b2), (BLOCK_H, 2 * BLOCK_HALF))
            tl.store(o_ptr + row_o + offs_r[None, :] * stride_od, y.to(out_ty), mask=mask)
        else:
            tl.store(o_ptr + row_o + offs_i[None, :] * stride_od, a2.to(out_ty), mask=mask)
            tl.store(o_ptr + row_o + (offs_i[None, :] + HALF) * stride_od, b2.to(out_ty), mask=mask)
        if COPY_TAIL:  # partial rotary, out of place: dims R .. D-1 pass through
            offs_t = 2 * HALF + tl.arange(0, BLOCK_TAIL)
            mask_t = mask_h & (offs_t[None, :] < D)
            t = tl.load(x_ptr + row_x + offs_t[None, :] * stride_xd, mask=mask_t)
            tl.store(o_ptr + row_o + offs_t[None, :] * stride_od, t, mask=mask_t)


@triton.jit
def _rope_kernel(
    q_ptr,
    k_ptr,
    qo_ptr,
    ko_ptr,
    cos_ptr,
    sin_ptr,
    scale_ptr,
    pos_ptr,
    L,
    HQ,
    HK,
    D,
    HALF,
    NFREQ,
    N_PAIRS,
    pos_offset,
    stride_qb,
    stride_ql,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_kl,
    stride_kh,
    stride_kd,
    stride_qob,
    stride_qol,
    stride_qoh,
    stride_qod,
    stride_kob,
    stride_kol,
    stride_koh,
    stride_kod,
    stride_cos,
    stride_pb,
    stride_pl,
    POS_KIND: tl.constexpr,
    XPOS: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    BACKWARD: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    OFFS_64: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
):
    """One program per token (b, l): loads its cos/sin row once and rotates every q and k head.

    Reads and writes (HQ + HK) * D elements per program; cos/sin rows (NFREQ floats each) stay in
    L2 (per-token rows: read once, 8 NFREQ bytes a token, about 3% of Qwen2-VL-7B's q and k).
    Frequencies NFREQ .. HALF - 1 get cos 1 and sin 0 (p-RoPE). XPOS: q's rows times the scale
    row, k's divided by it. BACKWARD rotates by -angle with the same scale (each pair's map is a
    scale times a rotation, whose transpose is the scale times the inverse rotation).
    The token's base address is 64-bit (B * L * H * D may exceed 2**31).
    """
    pid = tl.program_id(0).to(tl.int64)
    b = pid // L
    l = pid % L
    if POS_KIND == 0:
        row = (l + pos_offset) * stride_cos
    elif POS_KIND == 1:
        row = (l + tl.load(pos_ptr + b * stride_pb).to(tl.int64)) * stride_cos
    elif POS_KIND == 2:
        row = tl.load(pos_ptr + b * stride_pb + l * stride_pl).to(tl.int64) * stride_cos
    else:  # (B, L, NFREQ) tables: stride_pb is the table's batch stride
        row = b * stride_pb + l * stride_cos
    offs_i = tl.arange(0, BLOCK_HALF)
    cos = tl.load(cos_ptr + row + offs_i, mask=offs_i < NFREQ, other=1.0)
    sin = tl.load(sin_ptr + row + offs_i, mask=offs_i < NFREQ, other=0.0)
    if BACKWARD:
        sin = -sin
    cos_k, sin_k = cos, sin
    if XPOS:
        scale = tl.load(scale_ptr + row + offs_i, mask=offs_i < NFREQ, other=1.0)
        cos, sin = cos * scale, sin * scale
        cos_k, sin_k = cos_k / scale, sin_k / scale
    _rotate_heads(
        q_ptr + b * stride_qb + l * stride_ql,
        qo_ptr + b * stride_qob + l * stride_qol,
        stride_qh,
        stride_qd,
        stride_qoh,
        stride_qod,
        HQ,
        cos,
        sin,
        D,
        HALF,
        N_PAIRS,
        INTERLEAVED,
        COPY_TAIL,
        OFFS_64,
        BLOCK_HQ,
        BLOCK_HALF,
        BLOCK_TAIL,
    )
    _rotate_heads(
        k_ptr + b * stride_kb + l * stride_kl,
        ko_ptr + b * stride_kob + l * stride_kol,
        stride_kh,
        stride_kd,
        stride_koh,
        stride_kod,
        HK,
        cos_k,
        sin_k,
        D,
        HALF,
        N_PAIRS,
        INTERLEAVED,
        COPY_TAIL,
        OFFS_64,
        BLOCK_HK,
        BLOCK_HALF,
        BLOCK_TAIL,
    )


# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------


@launches
def _launch(
    q, k, q_out, k_out, cos, sin, scale, pos, offset: int, rotary: int, interleaved, backward
):
    """q, k, q_out, k_out are (B, L, H, D) views (any strides); pos None, (B,) or (B, L);
    cos/sin/scale (L_max, F) or (B | 1, L, F); rotary: R, the span of the rotated pairs. CPU
    tensors outside the interpreter: the one-pass C kernel (posenc_kernels/rope_cpu.py)."""
    if cpu_native(q):
        args = scale, pos, offset, rotary, interleaved, backward
        return rope_cpu.launch(q, k, q_out, k_out, cos, sin, *args)
    bsz, seq_len, hq, d = q.shape
    hk = k.shape[2]
    half, n_freq = rotary // 2, cos.shape[-1]
    if cos.dim() == 3:  # per-token rows; a batch of 1 broadcasts
        kind, pos_arg, spb, spl = POS_TABLE, cos, cos.stride(0) if cos.shape[0] > 1 else 0, 0
    elif pos is None:
        kind, pos_arg, spb, spl = POS_RANGE, cos, 0, 0  # pos_arg unused: any pointer
    elif pos.dim() == 1:
        kind, pos_arg, spb, spl = POS_PER_SEQ, pos, pos.stride(0), 0
    else:
        kind, pos_arg, spb, spl = POS_IDS, pos, pos.stride(0), pos.stride(1)
    block_half = triton.next_power_of_2(half)
    tail = d - 2 * half
    in_place = q_out.data_ptr() == q.data_ptr()
    copy_tail = tail > 0 and not in_place

    # Head tiles of at most ~4K elements: (BLOCK_H, BLOCK_HALF) fp32 pairs held in registers;
    # q and k get their own tile height so that a 4:1 GQA k is not padded to q's head count.
    def block_h(heads: int) -> int:
        return max(1, min(triton.next_power_of_2(max(heads, 1)), 4096 // block_half))

    # 64-bit offsets within a token only where a head's span needs them
    span = max(
        (t.shape[2] - 1) * abs(t.stride(2)) + (d - 1) * abs(t.stride(3))
        for t in (q, k, q_out, k_out)
    )
    grid = (bsz * seq_len,)
    _rope_kernel[grid](
        q,
        k,
        q_out,
        k_out,
        cos,
        sin,
        cos if scale is None else scale,  # unused without xPos: any pointer
        pos_arg,
        seq_len,
        hq,
        hk,
        d,
        half,
        n_freq,
        n_freq if in_place else half,  # in place, the pairs that stand still are not touched
        offset,
        *q.stride(),
        *k.stride(),
        *q_out.stride(),
        *k_out.stride(),
        cos.stride(-2),
        spb,
        spl,
        POS_KIND=kind,
        XPOS=scale is not None,
        INTERLEAVED=interleaved,
        BACKWARD=backward,
        COPY_TAIL=copy_tail,
        OFFS_64=span >= 2**31,
        BLOCK_HQ=block_h(hq),
        BLOCK_HK=block_h(hk),
        BLOCK_HALF=block_half,
        BLOCK_TAIL=triton.next_power_of_2(max(tail, 1)),
    )


def _check(q, k, cos, sin, scale, pos, offset: int, rotary: int) -> None:
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


# ---------------------------------------------------------------------------------------------
# Custom ops: one opaque op each for torch.compile (a raw launch cannot be traced under the
# interpreter), with fake implementations that only describe the outputs.
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op("posenc_kernels::rope", mutates_args=())
def _rope_op(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    scale: Tensor | None,
    pos: Tensor | None,
    offset: int,
    rotary: int,
    interleaved: bool,
    backward: bool,
) -> tuple[Tensor, Tensor]:
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _launch(q, k, q_out, k_out, cos, sin, scale, pos, offset, rotary, interleaved, backward)
    return q_out, k_out


@_rope_op.register_fake
def _(q, k, cos, sin, scale, pos, offset, rotary, interleaved, backward):
    return torch.empty_like(q), torch.empty_like(k)


@torch.library.custom_op("posenc_kernels::rope_", mutates_args=("q", "k"))
def _rope_inplace_op(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    scale: Tensor | None,
    pos: Tensor | None,
    offset: int,
    rotary: int,
    interleaved: bool,
    backward: bool,
) -> None:
    _launch(q, k, q, k, cos, sin, scale, pos, offset, rotary, interleaved, backward)


@_rope_inplace_op.register_fake
def _(q, k, cos, sin, scale, pos, offset, rotary, interleaved, backward):
    return None


def _rope(q, k, cos, sin, scale, pos, offset: int, rotary: int, interleaved: bool, backward: bool):
    """The op as torch.compile sees it (a custom op it can trace), or, in eager mode, the launch
    itself: the custom op's dispatch cost more host time than the rest of the call (96 -> 37 us,
    python -m bench.audit.host, docs/kernels.md)."""
    if compiling():
        return _rope_op(q, k, cos, sin, scale, pos, offset, rotary, interleaved, backward)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _launch(q, k, q_out, k_out, cos, sin, scale, pos, offset, rotary, interleaved, backward)
    return q_out, k_out


# ---------------------------------------------------------------------------------------------
# Autograd
# ---------------------------------------------------------------------------------------------


class RoPEFunction(torch.autograd.Function):
    """(q, k) -> (S R q, S^-1 R k) with S the xPos scale (1 without); backward applies
    R^T S = rotation by -angle with the same scale, with the same kernel."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, scale, pos, offset, rotary, interleaved):
        ctx.save_for_backward(cos, sin, scale, pos)
        ctx.args, ctx.native = (offset, rotary, interleaved), cpu_native(q)
        return _rope(q, k, cos, sin, scale, pos, offset, rotary, interleaved, False)

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        cos, sin, scale, pos = ctx.saved_tensors
        with native_cpu() if ctx.native else contextlib.nullcontext():  # the forward's kernel
            grad_q, grad_k = _rope(grad_q, grad_k, cos, sin, scale, pos, *ctx.args, True)
        return grad_q, grad_k, *(None,) * 7


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def apply_rope(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    *,
    positions: Tensor | int | None = None,
    interleaved: bool = False,
    inplace: bool = False,
    layout: str = "bshd",
    xpos_scale: Tensor | None = None,
    rotary_dim: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Rotate q and k by their positions' angles in one fused launch.

    q: (B, L, Hq, D) for layout="bshd" or (B, Hq, L, D) for "bhsd"; k likewise with Hk heads
       (Hk != Hq for grouped-query attention). Any strides; float32, float16 or bfloat16, with
       float32 arithmetic.
    cos, sin: (L_max, F) float32 tables from `posenc.functional.rope_cos_sin` with F = R/2,
       R <= D (dims R .. D - 1 pass through unchanged), rows indexed by position; or per-token
       tables (B, L, F) or (1, L, F) (`posenc.functional.mrope_cos_sin`, any table gathered per
       token), broadcast over heads, with positions=None.
    positions: None (0 .. L-1), an int offset, a (B,) tensor of per-sequence offsets, or a
       (B, L) tensor of position ids; every position must be < L_max.
    xpos_scale: xPos, a float32 table like cos (`posenc.functional.xpos_scale`): q's rows are
       multiplied by it, k's divided by it.
    rotary_dim: R, when the tables have fewer than R/2 columns: p-RoPE, only the first F
       frequencies turn and the other pairs pass through (in place they are not even read).
    interleaved: False pairs (i, i + R/2) (GPT-NeoX, Llama); True pairs (2i, 2i + 1) (GPT-J).
    inplace: True writes the result into q and k themselves and returns them (not
       differentiable); False allocates outputs with q's and k's layouts and leaves them untouched.
    Returns (q_out, k_out) shaped like q and k. Differentiable in q and k (not in cos/sin).
    """
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f'layout must be "bshd" or "bhsd", got {layout!r}')
    if isinstance(positions, Tensor):
        offset, pos = 0, positions
    elif positions is None or (isinstance(positions, int) and not isinstance(positions, bool)):
        offset, pos = positions or 0, None
    else:
        raise TypeError(
            f"positions must be None, an int or a tensor, got {type(positions).__name__}"
        )
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(
                f"{name} must be a 4-D tensor ({layout}), got {getattr(t, 'shape', t)}"
            )
    qv, kv = (q, k) if layout == "bshd" else (q.transpose(1, 2), k.transpose(1, 2))
    rotary = 2 * cos.shape[-1] if rotary_dim is None and isinstance(cos, Tensor) else rotary_dim
    _check(qv, kv, cos, sin, xpos_scale, pos, offset, rotary)
    args = xpos_scale, pos, offset, rotary, interleaved
    if inplace:
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            raise ValueError("inplace=True is not differentiable: use inplace=False for training")
        if compiling():
            _rope_inplace_op(qv, kv, cos, sin, *args, False)
        else:  # eager: the launch itself (see _rope)
            _launch(qv, kv, qv, kv, cos, sin, *args, False)
        return q, k
    q_out, k_out = RoPEFunction.apply(qv, kv, cos, sin, *args)
    if layout == "bhsd":
        q_out, k_out = q_out.transpose(1, 2), k_out.transpose(1, 2)
    return q_out, k_out


class FusedRoPE(nn.Module):
    """Drop-in for `posenc.RoPEPositionalEncoding`'s default (the same constructor and forward),
    or a module over any tables: `tables=(cos, sin)`, each (max_len, rotary_dim / 2) float32,
    e.g. `posenc.functional.rope_cos_sin(max_len, rotary_dim, scaling=...)` for a long-context
    schedule. The schedules live in posenc alone: this package takes their tables (it never
    imports posenc), so there is one implementation of them.

    forward(x, seq_len=None, positions=None) rotates x of shape (B, L, D) or (B, H, L, D); with
    tables narrower than D (partial rotary), only the first rotary_dim features rotate.
    """

    def __init__(
        self,
        dim: int,
        max_len: int = 5000,
        base: float = 10000.0,
        interleaved: bool = False,
        *,
        tables: tuple[Tensor, Tensor] | None = None,
    ):
        super().__init__()
        if dim <= 0 or dim % 2:
            raise ValueError(f"dim must be positive and even, got {dim}")
        if max_len <= 0:
            raise ValueError(f"max_len must be > 0, got {max_len}")
        # base^(-2i/dim) in float64: posenc's plain tables again (kernels never import posenc;
        if tables is None:  # a drop-in for its module), equal bit for bit (tests/posenc_kernels)
            inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
            angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)
            tables = angles.cos().float(), angles.sin().float()
        cos, sin = tables
        if not (isinstance(cos, Tensor) and isinstance(sin, Tensor)) or cos.shape != sin.shape:
            raise ValueError("tables must be (cos, sin) tensors of one shape (max_len, rotary/2)")
        if cos.dim() != 2 or cos.shape[0] < max_len or not 0 < 2 * cos.shape[1] <= dim:
            raise ValueError(
                f"tables must be (>= max_len={max_len}, <= dim/2={dim // 2}), got "
                f"{tuple(cos.shape)}"
            )
        self.dim, self.max_len, self.base, self.interleaved = dim, max_len, base, interleaved
        self.rotary_dim = 2 * cos.shape[1]
        self.register_buffer("cos_cached", cos.float().contiguous(), persistent=False)
        self.register_buffer("sin_cached", sin.float().contiguous(), persistent=False)

    def forward(
        self, x: Tensor, seq_len: int | None = None, positions: Tensor | int | None = None
    ) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() not in (3, 4):
            raise ValueError(f"x must be (B, L, D) or (B, H, L, D), got {getattr(x, 'shape', x)}")
        if seq_len is not None and seq_len != x.shape[-2]:
            raise ValueError(f"seq_len={seq_len} does not match x's length {x.shape[-2]}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"x's last dim must be dim={self.dim}, got {x.shape[-1]}")
        x4 = x.unsqueeze(2) if x.dim() == 3 else x.transpose(1, 2)  # (B, L, H, D) view
        # k is an empty-head view of q: the kernel's k loop runs zero times.
        out, _ = apply_rope(
            x4,
            x4[:, :, :0],
            self.cos_cached,
            self.sin_cached,
            positions=positions,
            interleaved=self.interleaved,
        )
        return out.squeeze(2) if x.dim() == 3 else out.transpose(1, 2)
