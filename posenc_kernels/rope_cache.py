"""RoPE fused with a serving step's KV-cache write: q and k rotated, k and v written into a paged
cache (vLLM's layout), in one launch, as vLLM, SGLang and FlashInfer do before decode attention.

One program per token t of the step's T tokens (prefill chunks and decode steps packed
together): its cos/sin row (positions[t]'s, or its own row of per-token tables), q's heads
rotated (into q itself or a new tensor), k's rotated straight into k_cache at slot_mapping[t]
and v's copied there into v_cache; a slot of -1 (a padding token) writes nothing. Every element
of q, k and v is read once and written once: the op's limit is a copy of (Hq + 2 Hk) D elements
a token, plus its cos/sin row (8 F bytes).

Layout: q (T, Hq, D), k and v (T, Hk, D), any strides; k_cache, v_cache (num_blocks,
block_size, Hk, D) contiguous, slot s at cache[s // block_size, s % block_size]. The rotation
itself is posenc_kernels/rope.py's (`_rotate_heads`): pairs half-split or interleaved, the first R
of D dims (partial rotary), the first F <= R/2 frequencies turning (p-RoPE: the tables' width).
File order: kernels -> checks and launcher -> custom ops -> public `apply_rope_with_cache`.

Why this file is long: the kernel's some forty arguments one a line as the formatter lays them
out, and a check with its own message for every argument of the public function.
"""

# No `from __future__ import annotations`: torch.library.custom_op reads the real annotations.
import torch
import triton
import triton.language as tl
from torch import Tensor

from posenc_kernels._runtime import compiling
from posenc_kernels._runtime import interpreting as _interpreting
from posenc_kernels.rope import _rotate_heads

# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _copy_heads(
    x_ptr,
    o_ptr,
    stride_xh,
    stride_xd,
    stride_oh,
    n_heads,
    D,
    OFFS_64: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Copy all heads of one token (x_ptr, o_ptr at head 0, dim 0; o's dims contiguous)."""
    offs_d = tl.arange(0, BLOCK_D)
    for h0 in range(0, n_heads, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        if OFFS_64:
            offs_h = offs_h.to(tl.int64)
        mask = (offs_h[:, None] < n_heads) & (offs_d[None, :] < D)
        x = tl.load(x_ptr + offs_h[:, None] * stride_xh + offs_d[None, :] * stride_xd, mask=mask)
        tl.store(o_ptr + offs_h[:, None] * stride_oh + offs_d[None, :], x, mask=mask)


@triton.jit
def _rope_cache_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    qo_ptr,
    kc_ptr,
    vc_ptr,
    cos_ptr,
    sin_ptr,
    pos_ptr,
    slot_ptr,
    HQ,
    HK,
    D,
    HALF,
    NFREQ,
    N_PAIRS_Q,
    PAGE,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_kt,
    stride_kh,
    stride_kd,
    stride_vt,
    stride_vh,
    stride_vd,
    stride_qot,
    stride_qoh,
    stride_qod,
    stride_cp,
    stride_cs,
    stride_ch,
    stride_cos,
    PER_TOKEN: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    COPY_TAIL_Q: tl.constexpr,
    COPY_TAIL_K: tl.constexpr,
    OFFS_64: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per token t: its cos/sin row (row positions[t], or row t of per-token
    tables) loaded once; q's HQ heads rotated into qo (N_PAIRS_Q pairs: all R/2 out of place,
    only the F turning ones in place); with slot_mapping[t] = s >= 0, k's HK heads rotated
    into k_cache[s // PAGE, s % PAGE] (all R/2 pairs and the tail: out of place) and v's copied
    into v_cache there. Token and slot offsets are 64-bit (a cache passes 2**31 elements)."""
    t = tl.program_id(0).to(tl.int64)
    if PER_TOKEN:  # noqa: SIM108 (a constexpr branch: the load is compiled out)
        row = t * stride_cos
    else:
        row = tl.load(pos_ptr + t).to(tl.int64) * stride_cos
    offs_i = tl.arange(0, BLOCK_HALF)
    cos = tl.load(cos_ptr + row + offs_i, mask=offs_i < NFREQ, other=1.0)
    sin = tl.load(sin_ptr + row + offs_i, mask=offs_i < NFREQ, other=0.0)
    _rotate_heads(
        q_ptr + t * stride_qt,
        qo_ptr + t * stride_qot,
        stride_qh,
        stride_qd,
        stride_qoh,
        stride_qod,
        HQ,
        cos,
        sin,
        D,
        HALF,
        N_PAIRS_Q,
        0,  # the rotated dims lead the head
        INTERLEAVED,
        COPY_TAIL_Q,
        OFFS_64,
        BLOCK_HQ,
        BLOCK_HALF,
        BLOCK_TAIL,
    )
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:  # -1: a padding token, nothing written
        dst = (slot // PAGE) * stride_cp + (slot % PAGE) * stride_cs
        _rotate_heads(
            k_ptr + t * stride_kt,
            kc_ptr + dst,
            stride_kh,
            stride_kd,
            stride_ch,
            1,
            HK,
            cos,
            sin,
            D,
            HALF,
            HALF,
            0,
            INTERLEAVED,
            COPY_TAIL_K,
            OFFS_64,
            BLOCK_HK,
            BLOCK_HALF,
            BLOCK_TAIL,
        )
        _copy_heads(
            v_ptr + t * stride_vt,
            vc_ptr + dst,
            stride_vh,
            stride_vd,
            stride_ch,
            HK,
            D,
            OFFS_64,
            BLOCK_HK,
            BLOCK_D,
        )


# ---------------------------------------------------------------------------------------------
# Checks and launcher
# ---------------------------------------------------------------------------------------------

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _tensor(name: str, t, dims: int, shape: str) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a tensor {shape}, got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must be {shape}, got shape {tuple(t.shape)}")


def _check_activations(q, k, v) -> None:
    _tensor("q", q, 3, "(T, Hq, D)")
    _tensor("k", k, 3, "(T, Hk, D)")
    _tensor("v", v, 3, "(T, Hk, D)")
    if q.dtype not in _FLOATS:
        raise TypeError(f"q must be float32, float16 or bfloat16, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} is {t.dtype} but q is {q.dtype}")
        if t.shape[0] != q.shape[0]:
            raise ValueError(f"{name} has {t.shape[0]} tokens but q has T={q.shape[0]}")
        if t.shape[2] != q.shape[2]:
            raise ValueError(f"{name} has head dim {t.shape[2]} but q has D={q.shape[2]}")
    if v.shape[1] != k.shape[1]:
        raise ValueError(f"v has {v.shape[1]} heads but k has Hk={k.shape[1]}")
    if q.shape[2] % 2:
        raise ValueError(f"head dim D must be even, got {q.shape[2]}")


def _check_caches(k, k_cache, v_cache) -> None:
    hk, d = k.shape[1], k.shape[2]
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        _tensor(name, c, 4, "(num_blocks, block_size, Hk, D)")
        if c.dtype != k.dtype:
            raise TypeError(f"{name} is {c.dtype} but k is {k.dtype}")
        if c.shape[2] != hk:
            raise ValueError(f"{name} has {c.shape[2]} heads but k has Hk={hk}")
        if c.shape[3] != d:
            raise ValueError(f"{name} has head dim {c.shape[3]} but k has D={d}")
        if not c.is_contiguous():
            raise ValueError(f"{name} must be contiguous (num_blocks, block_size, Hk, D)")
        if min(c.shape[:2]) < 1:
            raise ValueError(f"{name} has no slots: shape {tuple(c.shape)}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache is {tuple(v_cache.shape)} but k_cache {tuple(k_cache.shape)}")


def _check_tables(q, cos, sin, rotary: int) -> None:
    for name, t in (("cos", cos), ("sin", sin)):
        _tensor(name, t, 2, "(L_max, F) or per-token (T, F)")
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 table, got {t.dtype}")
    if sin.shape != cos.shape or sin.stride() != cos.stride() or cos.stride(-1) != 1:
        raise ValueError(
            f"cos and sin must be alike with unit stride along F, got {tuple(cos.shape)} and "
            f"{tuple(sin.shape)}"
        )
    d = q.shape[2]
    if isinstance(rotary, bool) or not isinstance(rotary, int) or rotary % 2:
        raise ValueError(f"rotary_dim must be an even int, got {rotary!r}")
    if not 2 * cos.shape[1] <= rotary <= d:
        raise ValueError(
            f"rotary_dim must lie in 2 * cos.shape[-1] = {2 * cos.shape[1]} .. D={d}, got {rotary}"
        )


def _check_index(name: str, t, tokens: int) -> None:
    if not isinstance(t, Tensor) or t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be a (T,) int32 or int64 tensor, got {_describe(t)}")
    if t.shape[0] != tokens:
        raise ValueError(f"{name} has {t.shape[0]} entries but q has T={tokens} tokens")
    if t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous")


def _describe(t) -> str:
    if isinstance(t, Tensor):
        return f"a {tuple(t.shape)} {t.dtype} tensor"
    return type(t).__name__


def _check(q, k, v, cos, sin, positions, k_cache, v_cache, slot_mapping, rotary) -> None:
    """Every check, naming its argument. Values (positions, slots) are checked on the device
    without a host sync (a step stays capturable in a CUDA graph): a bad one fails there."""
    _check_activations(q, k, v)
    _check_caches(k, k_cache, v_cache)
    _check_tables(q, cos, sin, rotary)
    tokens = q.shape[0]
    _check_index("slot_mapping", slot_mapping, tokens)
    named = (("k", k), ("v", v), ("cos", cos), ("sin", sin), ("k_cache", k_cache))
    for name, t in (*named, ("v_cache", v_cache), ("slot_mapping", slot_mapping)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError(
            "q is a CPU tensor: the Triton kernel needs a GPU; to run it on the CPU, set "
            "TRITON_INTERPRET=1 in the environment before triton is imported"
        )
    slots = k_cache.shape[0] * k_cache.shape[1]
    torch._assert_async(
        ((slot_mapping >= -1) & (slot_mapping < slots)).all(),
        f"slot_mapping must lie in -1 .. {slots - 1} (num_blocks * block_size slots; -1 skips)",
    )
    if positions is None:
        if cos.shape[0] != tokens:
            raise ValueError(
                f"positions=None reads per-token tables: cos must be (T={tokens}, F), got "
                f"{tuple(cos.shape)}"
            )
        return
    _check_index("positions", positions, tokens)
    if positions.device != q.device:
        raise ValueError(f"positions is on {positions.device} but q is on {q.device}")
    torch._assert_async(
        ((positions >= 0) & (positions < cos.shape[0])).all(),
        f"positions must lie in 0 .. {cos.shape[0] - 1} (the rows of cos/sin)",
    )


def _launch(q, k, v, q_out, cos, sin, positions, k_cache, v_cache, slot_mapping, rotary, inter):
    tokens, hq, d = q.shape
    hk, half, n_freq = k.shape[1], rotary // 2, cos.shape[1]
    if tokens == 0:
        return
    block_half = triton.next_power_of_2(half)
    block_d = triton.next_power_of_2(d)
    tail = d - 2 * half
    in_place = q_out.data_ptr() == q.data_ptr()

    # head tiles of at most ~4K elements (posenc_kernels/rope.py's rule; v's copy: BLOCK_H x
    # BLOCK_D)
    def block_h(heads: int, width: int) -> int:
        return max(1, min(triton.next_power_of_2(max(heads, 1)), 4096 // width))

    span = max((t.shape[1] - 1) * abs(t.stride(1)) + (d - 1) * abs(t.stride(2)) for t in (q, k, v))
    _rope_cache_kernel[(tokens,)](
        q,
        k,
        v,
        q_out,
        k_cache,
        v_cache,
        cos,
        sin,
        positions if positions is not None else slot_mapping,  # unused with per-token rows
        slot_mapping,
        hq,
        hk,
        d,
        half,
        n_freq,
        n_freq if in_place else half,
        k_cache.shape[1],
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *q_out.stride(),
        *k_cache.stride()[:3],
        cos.stride(0),
        PER_TOKEN=positions is None,
        INTERLEAVED=inter,
        COPY_TAIL_Q=tail > 0 and not in_place,
        COPY_TAIL_K=tail > 0,
        OFFS_64=max(span, k_cache.stride(1)) >= 2**31,  # within a token (slots are 64-bit)
        BLOCK_HQ=block_h(hq, block_half),
        BLOCK_HK=min(block_h(hk, block_half), block_h(hk, block_d)),
        BLOCK_HALF=block_half,
        BLOCK_TAIL=triton.next_power_of_2(max(tail, 1)),
        BLOCK_D=block_d,
    )


# ---------------------------------------------------------------------------------------------
# Custom ops: what torch.compile traces (a raw launch cannot be traced under the interpreter);
# in eager mode the launch is called directly (posenc_kernels/rope.py: the dispatch costs host
# time).
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op("posenc_kernels::rope_with_cache", mutates_args=("k_cache", "v_cache"))
def _rope_cache_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor | None,
    k_cache: Tensor,
    v_cache: Tensor,
    slot_mapping: Tensor,
    rotary: int,
    interleaved: bool,
) -> Tensor:
    q_out = torch.empty_like(q)
    _launch(
        q, k, v, q_out, cos, sin, positions, k_cache, v_cache, slot_mapping, rotary, interleaved
    )
    return q_out


@_rope_cache_op.register_fake
def _(q, k, v, cos, sin, positions, k_cache, v_cache, slot_mapping, rotary, interleaved):
    return torch.empty_like(q)


@torch.library.custom_op(
    "posenc_kernels::rope_with_cache_", mutates_args=("q", "k_cache", "v_cache")
)
def _rope_cache_inplace_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor | None,
    k_cache: Tensor,
    v_cache: Tensor,
    slot_mapping: Tensor,
    rotary: int,
    interleaved: bool,
) -> None:
    _launch(q, k, v, q, cos, sin, positions, k_cache, v_cache, slot_mapping, rotary, interleaved)


@_rope_cache_inplace_op.register_fake
def _(q, k, v, cos, sin, positions, k_cache, v_cache, slot_mapping, rotary, interleaved):
    return None


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def apply_rope_with_cache(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cos: Tensor,
    sin: Tensor,
    *,
    positions: Tensor | None,
    k_cache: Tensor,
    v_cache: Tensor,
    slot_mapping: Tensor,
    interleaved: bool = False,
    inplace: bool = False,
    rotary_dim: int | None = None,
) -> Tensor:
    """Rotate q and k by their tokens' positions and write k and v into a paged KV cache, in
    one launch with no host sync.

    q: (T, Hq, D); k, v: (T, Hk, D): the T tokens of one step, packed (any mix of prefill
       chunks and decode steps); any strides; float32, float16 or bfloat16.
    cos, sin: (L_max, F) float32 tables (`posenc.functional.rope_cos_sin`, any scaling
       schedule), rows indexed by positions; or per-token (T, F) with positions=None (M-RoPE's
       `posenc.functional.mrope_cos_sin`, any table gathered per token). F = R/2 by default.
    positions: (T,) int32/int64, each token's position (< L_max); None with per-token tables.
    k_cache, v_cache: (num_blocks, block_size, Hk, D), contiguous, in k's dtype (vLLM's
       layout); written in place: cache[s // block_size, s % block_size] = rotated k (v).
    slot_mapping: (T,) int32/int64, token t's slot s = block * block_size + offset; -1 skips
       it (a padding token: its q is still rotated, nothing is written).
    interleaved: False pairs (i, i + R/2) (GPT-NeoX, Llama); True pairs (2i, 2i + 1) (GPT-J).
    rotary_dim: R (partial rotary: dims R .. D - 1 pass through; with tables narrower than
       R/2, p-RoPE: the other pairs stand still).
    inplace: True rotates q in place and returns it; False returns a new q (q untouched).
    Returns q rotated, (T, Hq, D). Not differentiable (a serving op).
    """
    rotary = 2 * cos.shape[-1] if rotary_dim is None and isinstance(cos, Tensor) else rotary_dim
    _check(q, k, v, cos, sin, positions, k_cache, v_cache, slot_mapping, rotary)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError(
            "apply_rope_with_cache is not differentiable (a serving op): call it under "
            "torch.no_grad() or with q, k, v that do not require grad"
        )
    args = cos, sin, positions, k_cache, v_cache, slot_mapping, rotary, interleaved
    traced = compiling()
    if inplace:
        if traced:
            _rope_cache_inplace_op(q, k, v, *args)
        else:
            _launch(q, k, v, q, *args)
        return q
    if traced:
        return _rope_cache_op(q, k, v, *args)
    q_out = torch.empty_like(q)
    _launch(q, k, v, q_out, *args)
    return q_out
