"""The launch settings of posenc_kernels.relbias's kernels: Tiles, the per-GPU defaults the compile
audit chose, a user's tiles checked, and the fallback when a GPU's shared memory cannot hold
them."""

# No `from __future__ import annotations`: the Tiles NamedTuple's annotations are real types.
import warnings
from typing import NamedTuple

import torch
import triton
from torch import Tensor
from triton.runtime.errors import OutOfResources

from posenc_kernels._runtime import interpreting as _interpreting


class Tiles(NamedTuple):
    """Launch settings of one kernel: a (block_m, block_n) tile of (query rows, key columns),
    num_warps and num_stages (software-pipelining depth of the key/query stream)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2


# Defaults per GPU generation, chosen by the compile audit (tools/tile_search.py: the first
# candidate, larger tiles first, with no spill in a key loop for any bias family, causal or
# not, under Triton 3.9 and 3.6, within the shared memory, every half-precision dot on wgmma
# on sm_90a; docs/kernels.md, results in results/gpu-compile/). Keyed by (bytes per element,
# head dim padded to 64 or 128: our BLOCK_D, kind): "value" is Shaw's key and value terms, whose
# band gathers the key term and stores a value a (row, relative index), and whose forward ends with
# the value term's (rows, 2K + 1) x (2K + 1, D) product. float32 runs IEEE dots on the CUDA
# cores, whose register use swings with the tile (hence its small tiles). Backward tiles are
# the dk/dv kernel's (block_m queries streamed past block_n keys held, the tile computed keys
# by queries so that every dot has M = block_n); the dq kernel runs the transpose unless
# _DQ_TILES has a row of its own. A GPU
# before sm_80 gets _GENERIC; one after sm_90, the sm80 table (neither audited).
_FWD_TILES = {
    "sm90": {
        (2, 128, "plain"): Tiles(128, 64, 8, 2),
        (2, 128, "value"): Tiles(128, 32, 8, 2),
        (2, 64, "plain"): Tiles(128, 64, 8, 3),
        (2, 64, "value"): Tiles(128, 32, 8, 2),
        (4, 128, "plain"): Tiles(32, 32, 4, 2),
        (4, 128, "value"): Tiles(16, 16, 8, 1),
        (4, 64, "plain"): Tiles(32, 32, 4, 2),
        (4, 64, "value"): Tiles(16, 16, 4, 1),
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
        # 4 warps: the score products are m64n32 wgmma, where 8 warps split them into m64n16
        # (Shaw's key + value terms under Triton 3.6, grouped or packed rows under 3.9, keep a
        # few words in local memory before and after their key loops, none inside:
        # docs/kernels.md)
        (2, 128, "plain"): Tiles(32, 64, 4, 2),
        (2, 128, "value"): Tiles(32, 64, 4, 2),
        # ALiBi, one query head a kv head, whole sequences, no window, 32-bit rows: 64 keys
        # (m64n64 score products, 255 registers, a few words in local memory outside the key
        # loops); grouped heads, packed rows, a window or 64-bit rows spill inside them there
        # and keep the kind's row (_Spec.tiles; docs/kernels.md)
        (2, 128, "alibi"): Tiles(64, 64, 4, 2),
        (2, 64, "plain"): Tiles(32, 128, 8, 2),
        (2, 64, "value"): Tiles(32, 128, 8, 2),
        (4, 128, "plain"): Tiles(16, 32, 8, 1),
        (4, 128, "value"): Tiles(16, 32, 8, 1),
        (4, 64, "plain"): Tiles(32, 32, 4, 1),
        (4, 64, "value"): Tiles(32, 32, 4, 1),
    },
    "sm80": {
        # 32 x 32 at D=128: at 32 x 64 (dq 64 x 32) T5's and Shaw's causal dq spill under
        # Triton 3.6 (docs/kernels.md, the tiles' exceptions)
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
_FWD_TILES[None], _BWD_TILES[None] = {}, {}  # before sm_80: the families' rows alone

# A family's own rows, looked up before its kind's (the key's third field is the family;
# the compile audit's evidence for each: docs/kernels.md).
# FoX's float32 forward (3xTF32): 8 warps, 16 query rows at D=128, where the kind's tile
# spills on sm_90a; the other tables take the same rule (unaudited for FoX there).
for _arch_key, _rows in _FWD_TILES.items():
    for _d in (128, 64):
        _plain = _rows.get((4, _d, "plain"), _GENERIC[False])
        _m = min(_plain.block_m, 16 if _d > 64 else _plain.block_m)
        _rows[(4, _d, "fox")] = _plain._replace(block_m=_m, num_warps=8)


# dq's own tiles, where they are not the transpose of dk/dv's (a dq tile is (query rows, key
# columns)). sm_90a: dk/dv's 32 x 64 on 8 warps, transposed, splits dq's score products into
# m64n16 pieces and computes each exponent twice; 64 x 32 on 4 warps gives m64n32 products and
# one exponent a score, with no spill under Triton 3.9 or 3.6 for ALiBi, T5, Shaw's scalar bias
# and FoX (docs/kernels.md). Shaw's key + value term ("value") takes the transpose of its own
# dk/dv row, the same 64 x 32 on 4 warps. ALiBi and FoX, whose scores take no gathered bias,
# fit FlexAttention's dq tile on sm_90a: 128 x 64 on 8 warps (m64n64 score products, 244 to
# 255 registers, no spill under Triton 3.9 or 3.6; the time model: ALiBi's dq at B=4, H=16,
# L=4096, not causal, 2.7 -> 1.9 ms); T5's and Shaw's scalar bias spill there under 3.9.
_DQ_TILES = {
    "sm90": {
        (2, 128, "plain"): Tiles(64, 32, 4, 2),
        (2, 128, "alibi"): Tiles(128, 64, 8, 2),
        (2, 128, "fox"): Tiles(128, 64, 8, 2),
    }
}


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
            f"{name} must be posenc_kernels.relbias.Tiles(block_m, block_n, num_warps, "
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


def default_tiles(q: Tensor, backward: bool, kinds: tuple[str, ...]) -> tuple[Tiles, Tiles]:
    """(tiles, fallback) of q's GPU for a kernel of `kinds`, the most specific first: the
    family ("alibi", "fox", ...), then its kind ("plain", or "value": Shaw's value term, whose
    forward and dq kernels keep per-row sums per relative index); _INTERPRETER under the
    interpreter."""
    if _interpreting():
        return _INTERPRETER, None
    major, minor = torch.cuda.get_device_capability(q.device)
    size, d = q.element_size(), 64 if q.shape[-1] <= 64 else 128
    table = (_BWD_TILES if backward else _FWD_TILES)[_arch(major, minor)]
    for kind in kinds:
        if (size, d, kind) in table:
            return table[size, d, kind], _SAFE
    return _GENERIC[backward], _SAFE


def transpose(tiles: Tiles) -> Tiles:
    """dk/dv's tiles as dq runs them: (query rows, key columns) from (key rows, query columns)."""
    return tiles._replace(block_m=tiles.block_n, block_n=tiles.block_m)


def default_dq_tiles(q: Tensor, kinds: tuple[str, ...], dkdv: Tiles) -> Tiles:
    """dq's tiles beside dk/dv's default `dkdv`: its own row for q's GPU and the most specific
    of `kinds` where _DQ_TILES has one, else the transpose of dkdv."""
    if _interpreting():
        return transpose(dkdv)
    major, minor = torch.cuda.get_device_capability(q.device)
    size, d = q.element_size(), 64 if q.shape[-1] <= 64 else 128
    table = _DQ_TILES.get(_arch(major, minor), {})
    return next((table[size, d, k] for k in kinds if (size, d, k) in table), transpose(dkdv))


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
