"""The forward's grid (launched by posenc_kernels/relbias.py): how many query heads one program
holds, how many parts the keys are split into, and what that grid costs in waves and bytes.

A decode step (a few queries against a long cache) reads every key and value once per program
that streams them and does little arithmetic per byte, so its time is the bytes it moves over
the memory bandwidth, provided the grid keeps every SM busy:
- Grouped-query heads packed: the query heads that share a kv head are rows of one tile
  (GROUP x Lq rows, query r // GROUP of head r % GROUP), so that kv head's keys and values are
  read once instead of GROUP times (Llama-3.1-8B: 32 query heads on 8 kv heads, 4x fewer bytes).
- Keys split (flash-decoding) into fixed chunks of whole key blocks, each chunk a program whose
  partial output is merged by log-sum-exp; the split count fills the GPU's program slots (SMs x
  the programs one SM holds at once, from the compiled kernel's registers and shared memory).
  A ragged batch's caches are not read on the host: a short cache's chunks past its length
  find no keys and end at once, so every program reads at most one chunk.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
import triton

from posenc_kernels import _relbias_common as jit
from posenc_kernels._relbias_seq import AT_END, CACHE, SELF, Sequences

# the grid's orders (the kernels' ORDER constexpr: _relbias_common.py)
NATURAL, LAST_FIRST, FIRST_FIRST = (o.value for o in (jit.NATURAL, jit.LAST_FIRST, jit.FIRST_FIRST))


def order(causal: bool, seq: Sequences, heaviest: int, pack: int = 1) -> int:
    """A causal pass over whole sequences takes its heaviest blocks first (`heaviest`: the
    forward's query blocks LAST_FIRST, dk/dv's key blocks FIRST_FIRST; dq, at the register
    limit under Triton 3.6, spills with it and keeps NATURAL); any other keeps a head's blocks
    adjacent (sequences of their own lengths, packed heads: the work is not in the block)."""
    return heaviest if causal and seq.mode == SELF and pack == 1 else NATURAL


# An H100 / H200 SXM's SMs: the split's GPU where there is none (the interpreter, the compile
# audit's meta tensors), each holding one program (no compiled kernel to read)
_DEFAULT_SMS = 132
# A split holds at least this many key blocks: its partial output (BLOCK_M x D float32 and a
# log-sum-exp, written and read back by the merge) stays small beside the keys and values it
# reads (MIN_SPLIT_BLOCKS x BLOCK_N x D x 2 elements)
MIN_SPLIT_BLOCKS = 4
MAX_SPLITS = 64
# What one SM holds at most (sm_80 to sm_90): 64K registers, allocated per warp in units of
# 256; 32 resident programs; 1 KiB of shared memory reserved per program
_REGISTERS, _REG_UNIT, _MAX_PROGRAMS, _RESERVED_SHARED = 65536, 256, 32, 1024


def packed_heads(seq: Sequences, heads: int, kv_heads: int, block_m: int, col: bool) -> int:
    """Query heads per forward program: a kv head's whole group where its GROUP x Lq rows fit
    in the tile's block_m (a decode step, a short chunk at a cache's end); else 1. Not for
    packed documents (a document a program) nor FoX, whose per-key term is per head."""
    group = heads // kv_heads
    if group == 1 or col or seq.mode not in (SELF, AT_END, CACHE):
        return 1
    return group if group * seq.rows_q <= block_m else 1


def programs_per_sm(registers: int, warps: int, shared: int, sm: dict) -> int:
    """Programs one SM runs at once: the least of what its registers, shared memory, threads
    and program slots allow. sm: regs, shared, threads per SM (the device's properties)."""
    per_warp = -(-registers * 32 // _REG_UNIT) * _REG_UNIT
    by_regs = sm["regs"] // (per_warp * warps) if registers else _MAX_PROGRAMS
    by_shared = sm["shared"] // (shared + _RESERVED_SHARED)
    by_threads = sm["threads"] // (32 * warps)
    return max(1, min(by_regs, by_shared, by_threads, _MAX_PROGRAMS))


@functools.lru_cache(maxsize=8)
def sm_of(device: torch.device) -> tuple[int, dict | None]:
    """(SM count, its resources for programs_per_sm) of a CUDA device; off a GPU the default
    SMs and None (one program an SM)."""
    if device.type != "cuda":
        return _DEFAULT_SMS, None
    props = torch.cuda.get_device_properties(device)
    sm = dict(
        regs=getattr(props, "regs_per_multiprocessor", _REGISTERS),
        shared=getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
        threads=getattr(props, "max_threads_per_multi_processor", 2048),
    )
    return props.multi_processor_count, sm


_OCCUPANCY: dict = {}


def occupancy(kernel, args: Callable[[], list], constexprs: dict, sm: dict) -> int:
    """programs_per_sm of `kernel` compiled for the arguments args() makes (Triton's warmup:
    compiled, not launched; args() only then), kept per specialization (its constexprs and
    the SM's resources: one GPU model a process, as a rule)."""
    key = (*sorted(constexprs.items()), *sorted(sm.items()))
    if key not in _OCCUPANCY:
        compiled = kernel.warmup(*args(), grid=(1,), **constexprs)
        compiled._init_handles()  # loads the binary: its register count
        warps = compiled.metadata.num_warps
        _OCCUPANCY[key] = programs_per_sm(compiled.n_regs, warps, compiled.metadata.shared, sm)
    return _OCCUPANCY[key]


def num_splits(programs: int, key_blocks: int, slots: int) -> int:
    """How many key splits a forward takes. One when the programs (query blocks x sequences x
    heads, or kv heads when packed) already fill every slot (SMs x programs per SM) or the keys
    are too few to share (MIN_SPLIT_BLOCKS each). Otherwise the fewest splits whose last wave
    is at least 90% full (programs x splits / (waves x slots)), or failing that the fullest: a
    decode step of B x Hk programs on 132 SMs of 2 programs each gets about 264 / (B x Hk)
    splits rounded to fill waves, so the keys of each head stream through many SMs at once."""
    if programs >= slots or key_blocks < 2 * MIN_SPLIT_BLOCKS:
        return 1
    most = min(MAX_SPLITS, key_blocks // MIN_SPLIT_BLOCKS)
    best, best_fill = 1, 0.0
    for s in range(1, most + 1):
        n = programs * s
        fill = n / (triton.cdiv(n, slots) * slots)
        if fill >= 0.9:
            return s
        if fill > best_fill + 1e-9:
            best, best_fill = s, fill
    return best


class Grid(NamedTuple):
    """A forward's launch: pack query heads a program, the keys in `splits` chunks of `chunk`
    keys (whole key blocks), `programs` in all (query blocks x splits x sequences x heads /
    pack)."""

    pack: int
    splits: int
    chunk: int
    programs: int


def forward_grid(
    seq: Sequences, heads: int, pack: int, block_m: int, block_n: int, asked, slots
) -> Grid:
    """The grid of a forward: the caller's split count (asked), or num_splits' for `slots`
    program slots (an int, or a function giving it: the compiled kernel's occupancy, only
    read when the split depends on it)."""
    key_blocks = max(1, triton.cdiv(seq.rows_k, block_n))
    query_blocks = triton.cdiv(seq.rows_q * pack, block_m)
    units = query_blocks * seq.count * (heads // pack)
    if asked is None:
        asked = 1
        if key_blocks >= 2 * MIN_SPLIT_BLOCKS:
            asked = num_splits(units, key_blocks, slots() if callable(slots) else slots)
    per = triton.cdiv(key_blocks, min(asked, key_blocks))
    splits = triton.cdiv(key_blocks, per)
    return Grid(pack, splits, per * block_n, units * splits)


class Cost(NamedTuple):
    """What a forward grid costs: waves of `slots` programs and the last one's fill; the key
    and value bytes its programs read (each program its chunk of its sequence's keys) against
    the bytes of the caches themselves (every kv head's keys once); the float32 partial outputs
    a split writes and its merge reads back."""

    waves: int
    fill: float
    kv_bytes: int
    cache_bytes: int
    partial_bytes: int


def cost(grid: Grid, lens, heads: int, kv_heads: int, lq: int, d: int, elt: int, slots: int):
    """The cost of `grid` over caches of lens[b] keys (the rows' real lengths: a model's
    accounting, the launcher never reads them) of head dim d and elt bytes an element."""
    streams = heads // grid.pack  # programs reading their own copy of a kv head's keys
    kv = 2 * d * elt * streams * sum(lens)
    cache = 2 * d * elt * kv_heads * sum(lens)
    partial = 0
    if grid.splits > 1:  # (out + lse) float32 per query, split and head: written, read back
        partial = 2 * 4 * (d + 1) * len(lens) * heads * grid.splits * lq
    waves = triton.cdiv(grid.programs, slots)
    return Cost(waves, grid.programs / (waves * slots), kv, cache, partial)
