"""Fused rotary position embedding: q and k rotated in one launch, forward and backward.

Reads each element of q and k once and writes it once, so its limit is a copy of the same bytes.
File order: kernel -> launcher (grid) -> torch.library custom ops -> autograd.Function
-> public `apply_rope` -> `FusedRoPE` module; the argument checks in _rope_checks.py.

Why this file is long: one op per file in that order (docs/architecture.md), with the forms
its one kernel covers (layouts, pairs, partial rotary anywhere in the head, q alone, the
inverse, positions of every kind).

Layout inside the kernel: q and k are seen as (B, L, H, D) through four strides each, whatever
their memory order (`layout="bhsd"` is a transposed view, a fused-qkv split is a strided view);
nothing is made contiguous. cos/sin are (L_max, F) float32 rows indexed by position, or
(B, L, F) per-token rows (multi-axis RoPE: M-RoPE, 2D RoPE, every form that mixes positions per
frequency reduces to them); F <= R/2 frequencies turn, the rest of the R/2 pairs pass (p-RoPE).
The rotated dims start at rotary_start (0, or D - R for DeepSeek-V4's [no position | rotary]).
"""

# No `from __future__ import annotations`: torch.library.custom_op and Triton read annotations.

import contextlib

import torch
import triton
import triton.language as tl
from torch import Tensor, nn

from posenc_kernels import rope_cpu
from posenc_kernels._rope_checks import check as _check
from posenc_kernels._rope_checks import check_start as _check_start
from posenc_kernels._runtime import compiling, native_cpu, takes_c_kernel

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
    LEAD,
    INTERLEAVED: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    OFFS_64: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
):
    """Rotate all heads of one token: x_ptr/o_ptr point at (b, l, head 0, dim LEAD), the first
    rotated dim. Pairs (i, i + HALF) or (2i, 2i + 1) for i < N_PAIRS are read and written
    (N_PAIRS < HALF in place with p-RoPE: the pairs that stand still are not touched). Offsets
    within the token are 32-bit unless OFFS_64 (a head stride past 2**31 elements)."""
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
        if COPY_TAIL:  # partial rotary, out of place: the D - R other dims pass through,
            # the LEAD dims before the rotated ones and those after them, as one masked copy
            offs_j = tl.arange(0, BLOCK_TAIL)
            offs_t = tl.where(offs_j < LEAD, offs_j - LEAD, offs_j - LEAD + 2 * HALF)
            mask_t = mask_h & (offs_j[None, :] < D - 2 * HALF)
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
    LEAD,
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
    scale times a rotation, whose transpose is the scale times the inverse rotation): the
    backward, and the forward of an inverse rotation (DeepSeek-V4's output). The rotated dims
    start at LEAD (q_ptr and the others point there; DeepSeek-V4's heads rotate their last R).
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
        LEAD,
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
        LEAD,
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


def _launch(
    q,
    k,
    q_out,
    k_out,
    cos,
    sin,
    scale,
    pos,
    offset: int,
    rotary: int,
    start: int,
    interleaved,
    backward,
):
    """q, k, q_out, k_out are (B, L, H, D) views (any strides); pos None, (B,) or (B, L);
    cos/sin/scale (L_max, F) or (B | 1, L, F); rotary: R, the span of the rotated pairs, from
    dim start. CPU tensors outside the interpreter: the one-pass C kernel
    (posenc_kernels/rope_cpu.py)."""
    if takes_c_kernel(q):
        args = scale, pos, offset, rotary, start, interleaved, backward
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
        q[..., start:],  # each pointer at the first rotated dim; the kernel copies the rest
        k[..., start:],
        q_out[..., start:],
        k_out[..., start:],
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
        start,
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
    start: int,
    interleaved: bool,
    backward: bool,
) -> tuple[Tensor, Tensor]:
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _launch(q, k, q_out, k_out, cos, sin, scale, pos, offset, rotary, start, interleaved, backward)
    return q_out, k_out


@_rope_op.register_fake
def _(q, k, cos, sin, scale, pos, offset, rotary, start, interleaved, backward):
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
    start: int,
    interleaved: bool,
    backward: bool,
) -> None:
    _launch(q, k, q, k, cos, sin, scale, pos, offset, rotary, start, interleaved, backward)


@_rope_inplace_op.register_fake
def _(q, k, cos, sin, scale, pos, offset, rotary, start, interleaved, backward):
    return None


def _rope(q, k, cos, sin, *args):
    """The op as torch.compile sees it (a custom op it can trace), or, in eager mode, the launch
    itself: the custom op's dispatch cost more host time than the rest of the call (python -m
    tools.audit.host; docs/kernels.md, host work per call). args: scale, pos, offset, rotary,
    start, interleaved, backward."""
    if compiling():
        return _rope_op(q, k, cos, sin, *args)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _launch(q, k, q_out, k_out, cos, sin, *args)
    return q_out, k_out


# ---------------------------------------------------------------------------------------------
# Autograd
# ---------------------------------------------------------------------------------------------


class RoPEFunction(torch.autograd.Function):
    """(q, k) -> (S R q, S^-1 R k) with S the xPos scale (1 without) and R the rotation (its
    inverse with inverse=True); backward applies R^T S, the rotation the other way with the same
    scale, with the same kernel."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, scale, pos, offset, rotary, start, interleaved, inverse):
        ctx.save_for_backward(cos, sin, scale, pos)
        ctx.args, ctx.native = (offset, rotary, start, interleaved), takes_c_kernel(q)
        ctx.inverse = inverse
        return _rope(q, k, cos, sin, scale, pos, offset, rotary, start, interleaved, inverse)

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        cos, sin, scale, pos = ctx.saved_tensors
        with native_cpu() if ctx.native else contextlib.nullcontext():  # the forward's kernel
            args = scale, pos, *ctx.args, not ctx.inverse
            grad_q, grad_k = _rope(grad_q, grad_k, cos, sin, *args)
        return grad_q, grad_k, *(None,) * 9


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def apply_rope(
    q: Tensor,
    k: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    *,
    positions: Tensor | int | None = None,
    interleaved: bool = False,
    inplace: bool = False,
    layout: str = "bshd",
    xpos_scale: Tensor | None = None,
    rotary_dim: int | None = None,
    rotary_start: int = 0,
    inverse: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Rotate q and k by their positions' angles in one fused launch.

    q: (B, L, Hq, D) for layout="bshd" or (B, Hq, L, D) for "bhsd"; k likewise with Hk heads
       (Hk != Hq for grouped-query attention), or None: q alone turns (an indexer's queries,
       DeepSeek-V4's) and k_out is None. Any strides; float32, float16 or bfloat16, with
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
    rotary_start: the first rotated dim s (dims s .. s + R - 1 turn, the others pass): 0, or
       D - R where a head is laid out [no position | rotary] (DeepSeek-V4).
    inverse: turn by minus the angles (DeepSeek-V4 turns its attention output back at the
       query's position): the same launch with -sin, no table negated.
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
    for name, t in (("q", q), ("k", q if k is None else k)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(
                f"{name} must be a 4-D tensor ({layout}), got {getattr(t, 'shape', t)}"
            )
    if not isinstance(inverse, bool):
        raise TypeError(f"inverse must be a bool, got {inverse!r}")
    qv = q if layout == "bshd" else q.transpose(1, 2)
    # k=None: an empty-head view of q, so the kernel's k loop runs zero times
    kv = qv[:, :, :0] if k is None else k if layout == "bshd" else k.transpose(1, 2)
    rotary = 2 * cos.shape[-1] if rotary_dim is None and isinstance(cos, Tensor) else rotary_dim
    _check(qv, kv, cos, sin, xpos_scale, pos, offset, rotary)
    _check_start(rotary_start, qv.shape[-1], rotary)
    args = xpos_scale, pos, offset, rotary, rotary_start, interleaved
    if inplace:
        if torch.is_grad_enabled() and (q.requires_grad or kv.requires_grad):
            raise ValueError("inplace=True is not differentiable: use inplace=False for training")
        if compiling():
            _rope_inplace_op(qv, kv, cos, sin, *args, inverse)
        else:  # eager: the launch itself (see _rope)
            _launch(qv, kv, qv, kv, cos, sin, *args, inverse)
        return q, k
    q_out, k_out = RoPEFunction.apply(qv, kv, cos, sin, *args, inverse)
    if layout == "bhsd":
        q_out, k_out = q_out.transpose(1, 2), k_out.transpose(1, 2)
    return q_out, None if k is None else k_out


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
        out, _ = apply_rope(
            x4,
            None,
            self.cos_cached,
            self.sin_cached,
            positions=positions,
            interleaved=self.interleaved,
        )
        return out.squeeze(2) if x.dim() == 3 else out.transpose(1, 2)
