"""Attention with a relative position bias computed inside the tile: ALiBi, T5 buckets, Shaw.

softmax(scale q k^T + bias(j - i)) v by online softmax over key blocks (flash-attention style),
forward and backward. The bias is computed from r = j - i per tile, so no (L x L) tensor is ever
in memory: O(B H L D), plus O(B H L K) for Shaw's key and value terms.
File order: the kernels (kernels/_relbias_jit.py) -> tiles -> launchers -> autograd Function ->
public `relative_attention`.

Why this file is long: one op in that order (docs/architecture.md), with the per-GPU tile
tables and the checks of every argument of four bias families.

T5's bias is looked up, not computed: the bucket of each clipped offset r in [-K, K] (K the
maximum distance, beyond which every offset shares the last bucket) is computed once per
configuration and device, exactly (float64, see _t5_buckets), and the kernel reads the table at
that bucket (only in the band |r| < K of each row: beyond it one value per row): no logarithm
per score, whose approximate GPU version would drop a bucket at the offsets where
the bucket boundary is an exact integer (16, 32 and 64 for 32 buckets, max distance 128).

The table gradients (slopes, T5 and Shaw tables) are reduced per program into per-bucket
partial sums, summed on the host: no atomics, so they are deterministic; and only computed when
the table requires grad.
"""

# No `from __future__ import annotations`: the Tiles NamedTuple's annotations are real types.
import functools
import math
import os
import warnings
from typing import NamedTuple

import torch
import triton
from torch import Tensor
from triton.runtime.errors import OutOfResources

from kernels._relbias_jit import (
    ALIBI,
    CACHE,
    PACKED,
    SHAW_KV,
    TABLE,
    _relbias_bwd_delta_kernel,
    _relbias_bwd_dkdv_kernel,
    _relbias_bwd_dq_kernel,
    _relbias_fwd_kernel,
)
from kernels._relbias_seq import Sequences, check_num_splits, key_split, merge, sequences

# The public families, mapped onto the kernels' three bias paths (T5 and Shaw's scalar bias
# are both TABLE: an (H, 2K + 1) lookup).
FAMILY_ALIBI, FAMILY_T5, FAMILY_SHAW, FAMILY_SHAW_KV = "alibi", "t5", "shaw", "shaw_kv"
_LOG2E = math.log2(math.e)  # the kernels' logits are base 2: scale * log2(e) in one multiply


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _upcast(q: Tensor) -> bool:
    """Upcast dot operands to float32? Only bfloat16 under the interpreter (its bfloat16 tl.dot
    is wrong); float16 stays native there too, so the CPU tests run the GPU's dot path."""
    return _interpreting() and q.dtype == torch.bfloat16


def _split(q: Tensor, ieee: bool) -> bool:
    """Split the key loop into before / after / band (kernels/_relbias_jit.py)? Not for float32
    IEEE dots on a GPU (the FMA units: one masked loop, as its registers allow); always under
    the interpreter, so that the CPU tests run the split code (tests cover both)."""
    return _interpreting() or not (ieee and q.dtype == torch.float32)


class Tiles(NamedTuple):
    """Launch settings of one kernel: a (block_m, block_n) tile of (query rows, key columns),
    num_warps and num_stages (software-pipelining depth of the key/query stream)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2


# Defaults per GPU generation, chosen by the compile audit (tools/tile_search.py: the first
# candidate, larger tiles first, with no spill for any bias family, causal or not, under
# Triton 3.9 and 3.6, within the shared memory, every half-precision dot on wgmma on sm_90a;
# docs/kernels.md, results in results/gpu-compile/). Keyed by (bytes per element, head dim
# padded to 64 or 128: our BLOCK_D, kind): "value" is Shaw's key and value terms, whose
# forward and dq kernels keep (block_m, NB) per-row sums. float32 runs IEEE dots on the CUDA
# cores, whose register use swings with the tile (hence its small tiles). Backward tiles are
# the dk/dv kernel's (block_m queries streamed past block_n keys held, the tile computed keys
# by queries so that every dot has M = block_n); the dq kernel runs the transpose. A GPU
# before sm_80 gets _GENERIC; one after sm_90, the sm80 table (neither audited).
_FWD_TILES = {
    "sm90": {
        (2, 128, "plain"): Tiles(128, 64, 8, 2),
        (2, 128, "value"): Tiles(64, 32, 8, 2),
        (2, 64, "plain"): Tiles(128, 64, 8, 3),
        (2, 64, "value"): Tiles(64, 64, 8, 3),
        (4, 128, "plain"): Tiles(32, 32, 4, 2),
        (4, 128, "value"): Tiles(16, 32, 8, 1),
        (4, 64, "plain"): Tiles(32, 32, 4, 2),
        (4, 64, "value"): Tiles(16, 32, 8, 1),
    },
    "sm80": {
        (2, 128, "plain"): Tiles(64, 64, 8, 2),
        (2, 128, "value"): Tiles(32, 32, 8, 2),
        (2, 64, "plain"): Tiles(128, 64, 8, 3),
        (2, 64, "value"): Tiles(32, 32, 4, 2),
        (4, 128, "plain"): Tiles(16, 32, 8, 1),
        (4, 128, "value"): Tiles(16, 32, 8, 1),
        (4, 64, "plain"): Tiles(32, 32, 8, 1),
        (4, 64, "value"): Tiles(16, 32, 8, 1),
    },
}
_BWD_TILES = {
    "sm90": {
        (2, 128, "plain"): Tiles(32, 64, 8, 2),
        (2, 128, "value"): Tiles(32, 64, 8, 2),
        (2, 64, "plain"): Tiles(32, 128, 8, 2),
        (2, 64, "value"): Tiles(32, 128, 8, 2),
        (4, 128, "plain"): Tiles(16, 32, 8, 1),
        (4, 128, "value"): Tiles(16, 32, 8, 1),
        (4, 64, "plain"): Tiles(32, 32, 4, 1),
        (4, 64, "value"): Tiles(32, 32, 4, 1),
    },
    "sm80": {
        # 32 x 64 (dq 64 x 32) sat at 255 registers with no spill until the sequence layouts
        # came; then T5's and Shaw's causal dq spilled 3-5 local stores under Triton 3.6
        (2, 128, "plain"): Tiles(32, 32, 8, 2),
        (2, 128, "value"): Tiles(16, 32, 4, 2),
        (2, 64, "plain"): Tiles(32, 64, 8, 2),
        (2, 64, "value"): Tiles(32, 32, 8, 2),
        (4, 128, "plain"): Tiles(16, 32, 4, 1),
        (4, 128, "value"): Tiles(16, 32, 4, 1),
        (4, 64, "plain"): Tiles(32, 32, 8, 1),
        (4, 64, "value"): Tiles(32, 32, 8, 1),
    },
}
# GPUs with 99 KiB of shared memory per block (sm_86, sm_89, sm_120, sm_121: the RTX and L4/L40
# line): the sm80 table's 3-stage 128 x 64 forward needs about 160 KiB. These fit in 80 KiB
# (stages x (k + v) + the held block); not audited for spills.
_SMALL_SHARED = {(8, 6), (8, 9), (12, 0), (12, 1)}
_FWD_TILES["sm86"] = {
    key: Tiles(16, 32, 4, 1) if key[0] == 4 else Tiles(64, 64 if key[2] == "plain" else 32, 4, 2)
    for key in _FWD_TILES["sm80"]
}
_BWD_TILES["sm86"] = {
    key: Tiles(16, 32, 4, 1) if key[0] == 4 else Tiles(32, 64, 4, 2) for key in _BWD_TILES["sm80"]
}
_GENERIC = {False: Tiles(64, 64, 4, 3), True: Tiles(32, 32, 4, 1)}  # before sm_80


def _arch(major: int, minor: int) -> str | None:
    """The tile table of a compute capability: sm90 (H100/H200), sm86 (99 KiB of shared memory),
    sm80 (A100 and the rest from 8.0 on, unaudited beyond sm_80), None before sm_80."""
    if (major, minor) == (9, 0):
        return "sm90"
    if (major, minor) in _SMALL_SHARED:
        return "sm86"
    return "sm80" if major >= 8 else None


_SAFE = Tiles(32, 32, 4, 1)  # when a GPU's shared memory cannot hold the default
_INTERPRETER = Tiles(16, 16)  # the interpreter runs fastest with small tiles


def check_tiles(name: str, tiles) -> Tiles:
    """A user's tiles, validated: a clear error naming the argument and the field."""
    if not isinstance(tiles, tuple) or len(tiles) not in (2, 3, 4):
        raise TypeError(
            f"{name} must be kernels.relbias.Tiles(block_m, block_n, num_warps, "
            f"num_stages), got {tiles!r}"
        )
    tiles = Tiles(*tiles)
    for field in ("block_m", "block_n"):
        value = getattr(tiles, field)
        if not isinstance(value, int) or value < 16 or value > 256 or value & (value - 1):
            raise ValueError(f"{name}.{field} must be a power of two in [16, 256], got {value!r}")
    if not isinstance(tiles.num_warps, int) or tiles.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"{name}.num_warps must be 1, 2, 4, 8 or 16, got {tiles.num_warps!r}")
    if not isinstance(tiles.num_stages, int) or tiles.num_stages < 1:
        raise ValueError(f"{name}.num_stages must be an int >= 1, got {tiles.num_stages!r}")
    return tiles


class _Spec:
    """The compile-time settings of one call (the kernels' constexprs), its scale and tiles.

    bias: ALIBI, TABLE or SHAW_KV; clip: K, the relative indices are 0 .. 2K; n_rel: the
    entries a gradient is summed into (ALiBi 1, T5 its buckets, Shaw 2K + 1); nb: n_rel rounded
    up to a power of two (>= 16), the width of the kernels' per-bucket vectors."""

    def __init__(
        self,
        bias,
        causal,
        scale,
        clip,
        n_rel,
        has_value=False,
        table_grad=False,
        fwd_tiles=None,
        bwd_tiles=None,
        family=None,
    ):
        self.bias, self.causal, self.scale, self.clip = bias, causal, scale, clip
        self.family = family  # FAMILY_*: T5's table is (num_buckets, H), the others' (H, ...)
        self.n_rel, self.has_value, self.table_grad = n_rel, has_value, table_grad
        self.nb = max(16, triton.next_power_of_2(n_rel))
        self.constexprs = dict(BIAS=bias, CAUSAL=causal, K=clip, HAS_VALUE=has_value)
        self.user_tiles = {False: fwd_tiles, True: bwd_tiles}

    def tiles(self, q: Tensor, backward: bool) -> tuple[Tiles, Tiles | None]:
        """(tiles, fallback): the user's tiles (no fallback), or the default for q's GPU with
        _SAFE as the fallback (block_m capped per kernel by row_tiles)."""
        if self.user_tiles[backward] is not None:
            return self.user_tiles[backward], None
        if _interpreting():
            return _INTERPRETER, None
        major, minor = torch.cuda.get_device_capability(q.device)
        arch = _arch(major, minor)
        kind = "value" if (self.has_value if not backward else self.bias == SHAW_KV) else "plain"
        key = (q.element_size(), 64 if q.shape[-1] <= 64 else 128, kind)
        table = (_BWD_TILES if backward else _FWD_TILES).get(arch, {})
        return table.get(key, _GENERIC[backward]), _SAFE

    def row_tiles(self, tiles: Tiles) -> Tiles:
        """tiles for a kernel that keeps (block_m, NB) float32 per-row bucket sums in registers
        (the dq kernel always, the forward with Shaw's value term): block_m <= 4096 / NB, so a
        wide table (Shaw with a large K) shrinks the tile instead of spilling."""
        return tiles._replace(block_m=max(16, min(tiles.block_m, 4096 // self.nb)))


def _run(launch, tiles: Tiles, fallback: Tiles | None, name: str):
    """launch(tiles), or launch(fallback) on a GPU whose shared memory cannot hold the default
    tiles, with a warning that names both (the harness puts warnings in the row). A user's
    tiles that do not fit raise an error naming the argument."""
    try:
        return launch(tiles)
    except OutOfResources as err:
        if fallback is None:
            raise ValueError(f"{name}={tiles} does not fit this GPU: {err}") from err
        warnings.warn(
            f"relative_attention: {name} {tuple(tiles)} do not fit this GPU "
            f"({err}); ran with {tuple(fallback)}",
            stacklevel=3,
        )
        return launch(fallback)


def _t5_buckets(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each relative position r = j - i (Raffel et al. 2020; the formula of the
    public T5 code, which logs in float32): half of the buckets for r > 0 when bidirectional;
    within a half, distances below half of its buckets exact, larger ones log-spaced up to
    max_distance. In float64 with the floor taken 1e-9 above: where the exact value is an
    integer (a boundary, e.g. |r| = 16, 32, 64 for 32 buckets and 128), a log that lands one
    ulp low still gives the exact bucket; elsewhere no bucket value comes within 1e-9 of an
    integer. int32, on rel's device."""
    n = -rel
    bucket = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).to(rel.dtype) * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    exact = num_buckets // 2
    scaled = torch.log(n.clamp(min=1).double() / exact) / math.log(max_distance / exact)
    large = exact + torch.floor(scaled * (num_buckets - exact) + 1e-9).long()
    large = large.clamp(max=num_buckets - 1)
    return (bucket + torch.where(n < exact, n, large)).int()


def _pointers(spec: _Spec, q: Tensor, slopes, table, gidx, relk) -> dict:
    """The pointers and strides each family reads; an unused one points at q (never read:
    its branch is compiled out). TABLE: the table is read as table[bucket, h] through strides
    (T5's is (num_buckets, H), Shaw's (H, 2K + 1)), its bucket per index from gidx."""
    is_table = spec.bias == TABLE
    t5 = spec.family == FAMILY_T5
    return dict(
        slopes=slopes if spec.bias == ALIBI else q,
        table=table if is_table else q,
        gidx=gidx if gidx is not None else q,
        table_strides=(table.stride(1), table.stride(0))
        if is_table and t5
        else (table.stride(0), table.stride(1))
        if is_table
        else (0, 0),
        relk=relk if relk is not None else q,
        rel_strides=relk.stride() if relk is not None else (0, 0, 0, 0),
    )


def _grid(n_blocks: int, bsz: int, heads: int) -> tuple[int]:
    """A flat grid, a head's blocks adjacent (CUDA caps a grid's y at 65535, its x at 2**31 - 1:
    B * H beyond 65535 needs the flat form)."""
    size = n_blocks * bsz * heads
    if size >= 2**31:
        raise ValueError(f"B * H * blocks = {size} programs exceed CUDA's grid (2**31 - 1)")
    return (size,)


def _forward(q, k, v, slopes, table, gidx, relk, ev, spec: _Spec, seq: Sequences, splits=1):
    """-> out (like q), lse (B * H, Lq) float32 in base 2, pn (B * H, Lq, NR) or None.
    splits: 1, the count to split the keys into, or None (kernels._relbias_seq.num_splits);
    a split forward returns lse and pn as None (it is never differentiated)."""
    bsz, heads, lq, d = q.shape
    lk = k.shape[2]
    out = torch.empty_like(q)
    c = _pointers(spec, q, slopes, table, gidx, relk)
    ev_ = ev if ev is not None else q
    kept = {}

    def launch(tiles: Tiles) -> None:
        t = spec.row_tiles(tiles) if spec.has_value else tiles
        if spec.user_tiles[False] is None:
            t = _fit_rows(t, seq.rows_q)
        n_split, chunk = key_split(seq, splits, t.block_m, t.block_n, heads, q.device)
        if n_split > 1:  # float32 partials, merged below
            o = torch.empty(seq.count, heads, n_split, lq, d, device=q.device)
            o_strides = (*o.stride()[:2], *o.stride()[3:], o.stride(2))
        else:
            o, o_strides = out, (*out.stride(), 0)
        lse = torch.empty(seq.count * heads * n_split, lq, device=q.device)
        pn = None
        if spec.has_value and n_split == 1:
            pn = torch.empty(bsz * heads, lq, spec.n_rel, device=q.device)
        _relbias_fwd_kernel[_grid(triton.cdiv(seq.rows_q, t.block_m) * n_split, seq.count, heads)](
            q,
            k,
            v,
            o,
            lse,
            c["slopes"],
            c["table"],
            c["gidx"],
            c["relk"],
            ev_,
            pn if pn is not None else q,
            seq.lens if seq.lens is not None else q,
            *q.stride(),
            *k.stride(),
            *v.stride(),
            *o_strides,
            *c["table_strides"],
            *c["rel_strides"],
            ev_.stride(0),
            ev_.stride(-1),
            heads,
            lq,
            lk,
            seq.rows_q,
            n_split,
            chunk,
            d,
            spec.n_rel,
            spec.scale * _LOG2E,
            **spec.constexprs,
            NB=spec.nb,
            MASK_N=lk % t.block_n != 0 or seq.mode >= CACHE,
            UPCAST=_upcast(q),
            # float32: 3xTF32; with Shaw's value term IEEE (its 3xTF32 spills at every tile)
            F32=(2 if spec.has_value else 1) * (q.dtype == torch.float32),
            SPLIT=_split(q, ieee=spec.has_value),
            GROUP=heads // k.shape[1],
            SEQ=seq.mode,
            SPLIT_K=n_split > 1,
            BLOCK_M=t.block_m,
            BLOCK_N=t.block_n,
            BLOCK_D=_block_d(d),
            num_warps=t.num_warps,
            num_stages=t.num_stages,
        )
        if n_split > 1:
            merge(o, lse, out, _block_d(d), _interpreting())
            lse = None
        kept.update(lse=lse, pn=pn)

    _run(launch, *spec.tiles(q, backward=False), "fwd_tiles")
    return out, kept["lse"], kept["pn"]


def _fit_rows(tiles: Tiles, rows: int) -> Tiles:
    """A default forward tile for few query rows (a decode step: 1): block_m no larger than the
    rows rounded up to a power of two (>= 16, tl.dot's least M), and 4 warps for 16 rows (8
    would split a 16-row tile too thin)."""
    block_m = min(tiles.block_m, max(16, triton.next_power_of_2(rows)))
    if block_m == tiles.block_m:
        return tiles
    return tiles._replace(block_m=block_m, num_warps=min(tiles.num_warps, 4))


def _block_d(d: int) -> int:
    return max(16, triton.next_power_of_2(d))


def _delta(do: Tensor, out: Tensor) -> Tensor:
    """rowsum(do * out) (B * H, Lq) float32, by one small kernel in the inputs' dtype."""
    bsz, heads, lq, d = out.shape
    delta = torch.empty(bsz * heads, lq, device=out.device, dtype=torch.float32)
    # 4096 elements of each operand per program: 32 registers a thread (4 warps), no spill
    block_m = 16 if _interpreting() else max(16, 4096 // _block_d(d))
    _relbias_bwd_delta_kernel[_grid(triton.cdiv(lq, block_m), bsz, heads)](
        out,
        do,
        delta,
        *out.stride(),
        *do.stride(),
        heads,
        lq,
        d,
        BLOCK_M=block_m,
        BLOCK_D=_block_d(d),
    )
    return delta


def _backward(do, q, k, v, out, lse, slopes, table, gidx, relk, ev, pn, spec: _Spec, seq):
    """-> dq, dk, dv (in q's dtype), the per-bucket table gradient (H, n_rel) or None, d relk,
    d E_V (None where unused)."""
    bsz, heads, lq, d = q.shape
    lk = k.shape[2]
    delta = _delta(do, out)
    g = None
    if spec.has_value:  # dp_ij gains do_i . E_V[idx(i, j)]: gathered from do E_V^T
        g = torch.matmul(do.float(), ev.t())  # (B, H, Lq, NR)
    dq = torch.empty_like(q)
    group = heads // k.shape[1]  # grouped-query heads per kv head
    if group == 1:
        dk = torch.empty_like(k)
    else:  # per query head in float32, summed over each group below (2 B H Lk D floats)
        dk = torch.empty(bsz, heads, lk, d, device=q.device, dtype=torch.float32)
    dv = torch.empty_like(dk)  # dk's strides: the dk/dv kernel writes both with one set
    c = _pointers(spec, q, slopes, table, gidx, relk)
    drel = (
        torch.empty(bsz * heads, lq, spec.n_rel, device=q.device) if spec.bias == SHAW_KV else None
    )
    g_ = g if g is not None else q
    g_strides = g.stride() if g is not None else (0, 0, 0, 0)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    # float32: IEEE dots (3xTF32 spills in these kernels)
    shared = dict(
        **spec.constexprs,
        UPCAST=_upcast(q),
        F32=2 * (q.dtype == torch.float32),
        SPLIT=_split(q, ieee=True),
        GROUP=group,
        SEQ=seq.mode,
    )
    lens = seq.lens if seq.lens is not None else q

    def launch(tiles: Tiles) -> Tensor | None:
        """Both kernels; -> the dq kernel's per-program table-gradient partials (or None)."""
        _relbias_bwd_dkdv_kernel[_grid(triton.cdiv(seq.rows_k, tiles.block_n), seq.count, heads)](
            q,
            k,
            v,
            do,
            dk,
            dv,
            lse,
            delta,
            c["slopes"],
            c["table"],
            c["gidx"],
            c["relk"],
            g_,
            lens,
            *strides,
            *dk.stride(),
            *c["table_strides"],
            *c["rel_strides"],
            *g_strides,
            heads,
            lq,
            lk,
            seq.rows_k,
            d,
            spec.scale * _LOG2E,
            **shared,
            BLOCK_M=tiles.block_m,
            BLOCK_N=tiles.block_n,
            BLOCK_D=_block_d(d),
            num_warps=tiles.num_warps,
            num_stages=tiles.num_stages,
        )
        t = tiles._replace(block_m=tiles.block_n, block_n=tiles.block_m)
        t = spec.row_tiles(t) if spec.bias == SHAW_KV else t
        n_mblocks = triton.cdiv(seq.rows_q, t.block_m)
        part = None
        if spec.table_grad:
            part = torch.empty(seq.count * heads, n_mblocks, spec.nb, device=q.device)
        _relbias_bwd_dq_kernel[_grid(n_mblocks, seq.count, heads)](
            q,
            k,
            v,
            do,
            dq,
            lse,
            delta,
            c["slopes"],
            c["table"],
            c["gidx"],
            c["relk"],
            g_,
            drel if drel is not None else q,
            part if part is not None else q,
            lens,
            *strides,
            *dq.stride(),
            *c["table_strides"],
            *c["rel_strides"],
            *g_strides,
            heads,
            lq,
            lk,
            seq.rows_q,
            d,
            spec.n_rel,
            spec.scale * _LOG2E,
            TABLE_GRAD=spec.table_grad,
            NB=spec.nb,
            MASK_N=lk % t.block_n != 0 or seq.mode >= CACHE,
            **shared,
            BLOCK_M=t.block_m,
            BLOCK_N=t.block_n,
            BLOCK_D=_block_d(d),
            num_warps=t.num_warps,
            num_stages=t.num_stages,
        )
        return part

    part = _run(launch, *spec.tiles(q, backward=True), "bwd_tiles")
    if group > 1:  # each kv head's gradient: the sum over the query heads that read it
        dk, dv = (t.view(bsz, -1, group, lk, d).sum(2).to(k.dtype) for t in (dk, dv))
    dtable = None
    if part is not None:
        dtable = part.view(seq.count, heads, -1, spec.nb).sum((0, 2))[:, : spec.n_rel]  # (H, n_rel)
    dev = None
    if spec.has_value:  # out_i gains sum_r pn_ir E_V[r]
        dev = torch.einsum("nlr,nld->rd", pn, do.float().reshape(bsz * heads, lq, d))
    drel = drel.view(bsz, heads, lq, spec.n_rel) if drel is not None else None
    return dq, dk, dv, dtable, drel, dev


class RelativeBiasAttention(torch.autograd.Function):
    """Autograd around the kernels: (q, k, v, table, gidx, relk, ev, spec, seq) -> out.

    table: ALiBi's slopes (H,), T5's bucket table (num_buckets, H) or Shaw's (H, 2K + 1),
    float32, read by the kernels as they are; gidx (2K + 1,) int32: the bucket of each
    relative index (T5; Shaw: the index), built once per configuration and device; relk:
    scale * Q E_K^T (B, H, Lq, 2K + 1) float32 for Shaw's key term, computed by the caller
    with torch so that autograd carries d relk on to q and E_K; ev: float32 E_V."""

    @staticmethod
    def forward(ctx, q, k, v, table, gidx, relk, ev, spec, seq):
        slopes = table if spec.bias == ALIBI else None
        out, lse, pn = _forward(q, k, v, slopes, table, gidx, relk, ev, spec, seq)
        ctx.save_for_backward(q, k, v, out, lse, table, gidx, relk, ev, pn, seq.lens)
        ctx.spec, ctx.seq = spec, seq._replace(lens=None)  # lens: saved above
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse, table, gidx, relk, ev, pn, lens = ctx.saved_tensors
        spec, seq = ctx.spec, ctx.seq._replace(lens=lens)
        slopes = table if spec.bias == ALIBI else None
        dq, dk, dv, dtable, drel, dev = _backward(
            do, q, k, v, out, lse, slopes, table, gidx, relk, ev, pn, spec, seq
        )
        if dtable is not None:  # (H, n_rel) -> the table's own layout
            if spec.bias == ALIBI:
                dtable = dtable[:, 0]
            elif spec.family == FAMILY_T5:  # (num_buckets, H)
                dtable = dtable.t()
        return dq, dk, dv, dtable, None, drel, dev, None, None


@functools.lru_cache(maxsize=64)
def _bucket_index(family: str, clip: int, device: torch.device, *t5) -> Tensor:
    """gidx: the bucket of each relative index 0 .. 2K (T5's, or the index itself for Shaw's
    scalar table), int32 on `device`; built once per configuration and device (a T5 call
    would otherwise spend some twenty small kernels on it). Never written to."""
    rel = torch.arange(-clip, clip + 1, device=device)
    if family == FAMILY_T5:
        return _t5_buckets(rel, *t5)
    return (rel + clip).int()


def relative_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    alibi_slopes: Tensor | None = None,
    t5_table: Tensor | None = None,
    t5_num_buckets: int = 32,
    t5_max_distance: int = 128,
    t5_bidirectional: bool = True,
    shaw_bias: Tensor | None = None,
    shaw_k: Tensor | None = None,
    shaw_v: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    kv_lens: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
    max_seqlen: int | None = None,
    num_splits: int | None = None,
    fwd_tiles: Tiles | None = None,
    bwd_tiles: Tiles | None = None,
) -> Tensor:
    """softmax(scale q k^T + bias(j - i) [causal]) v with exactly one bias family.

    q: (B, H, Lq, D); k, v: (B, Hk, Lk, D) with Hk dividing H (grouped-query attention: query
    head h reads kv head h // (H / Hk); dk and dv per query head in float32, summed per group);
    returns (B, H, Lq, D) in q's dtype.
    alibi_slopes (H,): bias -m_h |j - i|. t5_table (num_buckets, H): bias t5_table[bucket, h].
    shaw_bias (H, 2K + 1): bias shaw_bias[h, clip(j - i, -K, K) + K].
    shaw_k (2K + 1, D) and optional shaw_v (2K + 1, D), shared by all heads (Shaw et al.):
      logits scale q_i . (k_j + shaw_k[clip(j - i) + K]), output sum_j a_ij (v_j + shaw_v[...]).
    Query i sits at position Lk - Lq + i (Lq <= Lk: the last Lq tokens of a cache of Lk, as in
    decoding; Lq == Lk: self-attention): every bias takes its distance j - (Lk - Lq + i), and
    causal masks j > Lk - Lq + i.
    kv_lens (B,) int32/int64: row b's cache holds keys 0 .. kv_lens[b] - 1 (the rest of Lk is
      ignored), its queries at kv_lens[b] - Lq + i; never read on the host (values are
      clamped to [0, Lk]; a query that sees no key, kv_lens[b] < Lq with causal, outputs 0).
    cu_seqlens (N + 1,) int32/int64: N documents packed into one row (B = 1, Lq = Lk = T),
      document n at rows cu_seqlens[n] .. cu_seqlens[n + 1] - 1; attention, distances and the
      causal mask stay within a document (one host read of cu_seqlens, to check it and find the
      longest document; max_seqlen, at least the longest, skips both, as for CUDA graphs).
    num_splits: the forward splits the keys into this many parts, merged by their log-sum-exps
      (flash-decoding; not differentiable, not with cu_seqlens); None: split when the queries'
      programs would leave SMs idle and nothing needs a gradient (kernels._relbias_seq).
    Differentiable in q, k, v and every table (slopes, T5 and Shaw tables, shaw_k, shaw_v).
    fwd_tiles, bwd_tiles: `Tiles` overriding the per-GPU defaults (for tuning); bwd_tiles are
      the dk/dv kernel's, the dq kernel runs their transpose; block_m of the dq kernel (and of
      the forward with shaw_v) is capped at 4096 / NB, NB the table's entries rounded up to a
      power of two (>= 16). The interpreter ignores warps and stages.
    """
    families = (
        ("alibi_slopes", alibi_slopes),
        ("t5_table", t5_table),
        ("shaw_bias", shaw_bias),
        ("shaw_k", shaw_k),
    )
    given = [name for name, t in families if t is not None]
    if shaw_v is not None and shaw_k is None:
        raise ValueError("shaw_v needs shaw_k (Shaw's value term comes with the key term)")
    if len(given) != 1:
        raise ValueError(
            f"pass exactly one of alibi_slopes, t5_table, shaw_bias, shaw_k; got {given}"
        )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor (B, H, L, D)")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} is {t.dtype} on {t.device}; q is {q.dtype} on {q.device}")
    bsz, heads, lq, d = q.shape
    kv_heads = k.shape[1]
    if k.shape[0] != bsz or k.shape[3] != d or v.shape != k.shape:
        raise ValueError(
            f"k and v must be (B={bsz}, Hk, Lk, D={d}) and alike, "
            f"got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"k and v's heads (Hk={kv_heads}) must divide q's (H={heads})")
    seq = sequences(q, k, causal, kv_lens, cu_seqlens, max_seqlen)
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError(
            "q is a CPU tensor: run on a GPU, or set TRITON_INTERPRET=1 before "
            "triton is imported to use Triton's interpreter"
        )
    table = {
        "alibi_slopes": alibi_slopes,
        "t5_table": t5_table,
        "shaw_bias": shaw_bias,
        "shaw_k": shaw_k,
    }[given[0]]
    if table.device != q.device:
        raise ValueError(f"{given[0]} is on {table.device} but q is on {q.device}")
    expected = {"alibi_slopes": (heads,), "t5_table": (t5_num_buckets, heads)}.get(given[0])
    if given[0] == "shaw_bias":
        if table.dim() != 2 or table.shape[0] != heads or table.shape[1] % 2 == 0:
            raise ValueError(f"shaw_bias must be (H={heads}, 2K+1), got {tuple(table.shape)}")
    elif given[0] == "shaw_k":
        for name, t in (("shaw_k", shaw_k), ("shaw_v", shaw_v)):
            if t is not None and (
                t.dim() != 2 or t.shape[1] != d or t.shape[0] % 2 == 0 or t.shape != shaw_k.shape
            ):
                raise ValueError(f"{name} must be (2K+1, D={d}), got {tuple(t.shape)}")
            if t is not None and t.device != q.device:
                raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    elif tuple(table.shape) != expected:
        raise ValueError(f"{given[0]} must be {expected}, got {tuple(table.shape)}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    tiles = dict(
        fwd_tiles=None if fwd_tiles is None else check_tiles("fwd_tiles", fwd_tiles),
        bwd_tiles=None if bwd_tiles is None else check_tiles("bwd_tiles", bwd_tiles),
    )
    gidx = relk = ev = None
    trains = table.requires_grad and torch.is_grad_enabled()
    if given[0] == "alibi_slopes":
        spec = _Spec(ALIBI, causal, scale, 0, 1, table_grad=trains, family=FAMILY_ALIBI, **tiles)
        table = table.float()
    elif given[0] == "shaw_k":  # the key term's (B, H, Lq, 2K + 1) table: O(L K), not O(L^2)
        clip = (shaw_k.shape[0] - 1) // 2
        spec = _Spec(
            SHAW_KV,
            causal,
            scale,
            clip,
            shaw_k.shape[0],
            has_value=shaw_v is not None,
            family=FAMILY_SHAW_KV,
            **tiles,
        )
        relk = torch.matmul(q.float() * scale, shaw_k.float().t())
        ev = shaw_v.float() if shaw_v is not None else None
        table = None
    elif given[0] == "t5_table":  # beyond max_distance every offset has the last bucket
        clip = max(t5_max_distance, t5_num_buckets)
        gidx = _bucket_index(
            FAMILY_T5, clip, q.device, t5_bidirectional, t5_num_buckets, t5_max_distance
        )
        spec = _Spec(
            TABLE, causal, scale, clip, t5_num_buckets, table_grad=trains, family=FAMILY_T5, **tiles
        )
        table = table.float()
    else:  # Shaw's scalar bias: the bucket of an index is the index
        clip = (table.shape[1] - 1) // 2
        gidx = _bucket_index(FAMILY_SHAW, clip, q.device)
        spec = _Spec(
            TABLE,
            causal,
            scale,
            clip,
            table.shape[1],
            table_grad=trains,
            family=FAMILY_SHAW,
            **tiles,
        )
        table = table.float()
    tensors = (q, k, v, table, relk, ev)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    check_num_splits(num_splits, seq, grad)
    if not grad and seq.mode != PACKED and num_splits != 1:  # may split the keys: no autograd
        slopes = table if spec.bias == ALIBI else None
        return _forward(q, k, v, slopes, table, gidx, relk, ev, spec, seq, num_splits)[0]
    return RelativeBiasAttention.apply(q, k, v, table, gidx, relk, ev, spec, seq)
