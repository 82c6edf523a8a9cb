"""RoPE over several position axes (vision-language and vision models) and RoPE's per-frequency
variants (xPos, p-RoPE): tables only. Every form here reduces to what `apply_rope` already takes,
per-token cos/sin of shape (..., L, R/2) (times a scale for xPos), so one rotation serves all.

Shapes: position_ids (3, B, L) (temporal, height, width), tables (B, L, D/2); a patch grid of
height x width patches in row-major order, tables (height * width, D/2). Angles in float64, cast
once at the end (posenc/functional.py says why).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from posenc._checks import check_pairs, check_positive
from posenc._scaling import rope_frequencies

# ---------------------------------------------------------------------------------------------
# Multimodal RoPE (M-RoPE): Qwen2-VL (Wang et al. 2024, section 2.1), Qwen2.5-VL, Qwen3-VL.
# ---------------------------------------------------------------------------------------------


def mrope_axes(n_freq: int, mrope_section: Sequence[int], interleaved: bool) -> Tensor:
    """Which axis (0 temporal, 1 height, 2 width) drives each of the n_freq frequencies, (n_freq,).

    Contiguous (Qwen2-VL, Qwen2.5-VL): the first s0 frequencies follow t, the next s1 h, the
    last s2 w. Interleaved (Qwen3-VL): frequency i follows h when i % 3 == 1 and i < 3 s1, w when
    i % 3 == 2 and i < 3 s2, t otherwise, so that every axis spans high and low frequencies.
    """
    section = _section(n_freq, mrope_section)
    if not interleaved:
        return torch.repeat_interleave(torch.arange(3), torch.tensor(section))
    i = torch.arange(n_freq)
    axes = torch.zeros(n_freq, dtype=torch.long)
    axes[(i % 3 == 1) & (i < 3 * section[1])] = 1
    axes[(i % 3 == 2) & (i < 3 * section[2])] = 2
    counts = tuple(int((axes == a).sum()) for a in range(3))
    if counts != section:
        raise ValueError(
            f"mrope_section={list(section)} cannot be interleaved over {n_freq} frequencies "
            f"(it gives t, h, w counts {list(counts)}): 3 * s1 and 3 * s2 must fit in head_dim / 2"
        )
    return axes


def _section(n_freq: int, mrope_section) -> tuple[int, int, int]:
    section = tuple(mrope_section) if isinstance(mrope_section, Sequence) else ()
    ok = len(section) == 3 and all(isinstance(s, int) and not isinstance(s, bool) for s in section)
    if not ok or min(section) < 0:
        raise ValueError(f"mrope_section must be three ints >= 0, got {mrope_section!r}")
    if sum(section) != n_freq:
        raise ValueError(
            f"mrope_section={list(section)} must sum to head_dim / 2 = {n_freq}, got {sum(section)}"
        )
    return section


def mrope_cos_sin(
    position_ids: Tensor,
    head_dim: int,
    mrope_section: Sequence[int],
    *,
    base: float = 10000.0,
    interleaved: bool = False,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """cos, sin of shape (B, L, head_dim / 2): frequency i turns by the position of its axis.

    position_ids: (3, B, L) integer (temporal, height, width; a text token has the same position
    on all three, and then these tables equal 1-D RoPE's); mrope_section: three ints summing to
    head_dim / 2 ([16, 24, 24] for Qwen2-VL-7B's D = 128, [24, 20, 20] for Qwen3-VL's).
    interleaved: False for Qwen2-VL's and Qwen2.5-VL's contiguous sections, True for Qwen3-VL's.
    """
    check_pairs("head_dim", head_dim)
    if not isinstance(position_ids, Tensor) or position_ids.is_floating_point():
        raise TypeError("position_ids must be an integer tensor of shape (3, B, L)")
    if position_ids.dim() != 3 or position_ids.shape[0] != 3:
        raise ValueError(
            f"position_ids must be (3, B, L) (temporal, height, width), got "
            f"{tuple(position_ids.shape)}"
        )
    n_freq = head_dim // 2
    axes = mrope_axes(n_freq, mrope_section, interleaved).to(position_ids.device)
    inv_freq = _inv_freq(head_dim, base, position_ids.device)
    pos = position_ids.to(torch.float64)[axes]  # (D/2, B, L): each frequency's own axis
    angles = pos.permute(1, 2, 0).contiguous() * inv_freq  # (B, L, D/2), rows contiguous
    return angles.cos().to(dtype), angles.sin().to(dtype)


def mrope_position_ids(segments: Sequence, *, device=None) -> Tensor:
    """The (3, L) position ids of one text + vision sequence, as Qwen2-VL builds them.

    segments: in order, an int n (n text tokens) or a vision grid (t, h, w) in the language
    model's tokens (after the vision encoder's spatial merge), optionally (t, h, w, interval)
    with `interval` the temporal step of a video (Qwen2.5-VL's tokens_per_second * seconds per
    temporal patch; 1 for images). A text token sits at the next position on all three axes; a
    grid starting at position s puts patch (a, b, c) at (s + int(a * interval), s + b, s + c);
    the text after a grid resumes one past the grid's largest position. Stack sequences of one
    length along dim 1 for a batch: (3, B, L).
    """
    if isinstance(segments, (str, bytes)) or not isinstance(segments, Sequence):
        raise TypeError("segments must be a sequence of ints (text) and (t, h, w) tuples (grids)")
    parts, start = [], 0
    for n, seg in enumerate(segments):
        if isinstance(seg, int) and not isinstance(seg, bool):
            check_positive(f"segments[{n}]", seg, allow_zero=True)
            parts.append(torch.arange(start, start + seg, device=device).expand(3, seg))
            start += seg
            continue
        grid = _grid(n, seg)
        t, h, w = (torch.arange(size, device=device) for size in grid[:3])
        t = (t.to(torch.float64) * grid[3]).long()
        ids = torch.stack(torch.meshgrid(t, h, w, indexing="ij")).reshape(3, -1) + start
        parts.append(ids)
        start += max(int((grid[0] - 1) * grid[3]), grid[1] - 1, grid[2] - 1) + 1  # no sync
    if not parts:
        return torch.zeros(3, 0, dtype=torch.long, device=device)
    return torch.cat(parts, dim=1)


def _grid(n: int, seg) -> tuple[int, int, int, float]:
    ok = isinstance(seg, Sequence) and len(seg) in (3, 4)
    ok = ok and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in seg[:3])
    interval = seg[3] if ok and len(seg) == 4 else 1
    if not ok or isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise ValueError(
            f"segments[{n}] must be an int (text tokens) or a grid (t, h, w[, interval]) of "
            f"positive ints, got {seg!r}"
        )
    if interval <= 0:
        raise ValueError(f"segments[{n}]: the temporal interval must be > 0, got {interval!r}")
    return seg[0], seg[1], seg[2], float(interval)


# ---------------------------------------------------------------------------------------------
# 2D RoPE for a patch grid (vision transformers and the vision encoders of VLMs)
# ---------------------------------------------------------------------------------------------

SPLITS = ("pixtral", "axial", "axial_xy")


def rope_2d_cos_sin(
    height: int,
    width: int,
    head_dim: int,
    *,
    base: float = 10000.0,
    split: str = "pixtral",
    start: int = 0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> tuple[Tensor, Tensor]:
    """cos, sin of shape (height * width, head_dim / 2) for patches in row-major order.

    Patch n sits at row r = n // width, column c = n % width (plus `start` on both). The first
    head_dim / 4 frequencies turn by one axis, the last head_dim / 4 by the other:
      "pixtral":  row by theta_{2j}, column by theta_{2j+1}, theta_i = base^(-2i/D) (Pixtral);
      "axial":    row, then column, both by base^(-4j/D) (Qwen2-VL's, Qwen2.5-VL's and
                  Qwen3-VL's vision encoders);
      "axial_xy": column, then row, both by base^(-4j/D) (RoPE-ViT's axial form, whose base is
                  100; torchtune's vision RoPE with start=1).
    The tables are layout-free: apply them with the pairing the model uses (Pixtral and the Qwen
    encoders pair halves, RoPE-ViT and torchtune adjacent dims: interleaved=True).
    """
    check_positive("height", height)
    check_positive("width", width)
    check_pairs("head_dim", head_dim)
    check_positive("start", start, allow_zero=True)
    if head_dim % 4:
        raise ValueError(f"head_dim must be a multiple of 4 (two axes of pairs), got {head_dim}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    n = torch.arange(height * width, device=device)
    rows, cols = (n // width + start).to(torch.float64), (n % width + start).to(torch.float64)
    if split == "pixtral":
        theta = _inv_freq(head_dim, base, device)
        first, second = theta[0::2], theta[1::2]
    else:
        first = second = _inv_freq(head_dim // 2, base, device)  # base^(-2j/(D/2))
    a, b = (cols, rows) if split == "axial_xy" else (rows, cols)
    angles = torch.cat((torch.outer(a, first), torch.outer(b, second)), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


# ---------------------------------------------------------------------------------------------
# xPos: Sun et al. 2022 ("A Length-Extrapolatable Transformer"), as torchscale and flash-attn's
# rotary `scale_base` compute it.
# ---------------------------------------------------------------------------------------------


def xpos_scale(
    positions: Tensor | int,
    head_dim: int,
    scale_base: float = 512.0,
    *,
    center: int = 0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> Tensor:
    """zeta_i ^ ((p - center) / scale_base), shape (*positions.shape, head_dim / 2), with
    zeta_i = (2i / head_dim + 0.4) / 1.4.

    xPos multiplies the queries' tables by it and divides the keys': q_m . k_n then carries
    zeta^((m - n) / scale_base), a decay with the distance, and `center` cancels. It keeps the
    factors finite in float32: zeta_0 = 0.29, so zeta_0^(p / 512) underflows near p = 4e4 without
    a center (flash-attn centres at half the cached length).
    """
    check_pairs("head_dim", head_dim)
    if isinstance(scale_base, bool) or not isinstance(scale_base, (int, float)) or scale_base <= 0:
        raise ValueError(f"scale_base must be a number > 0, got {scale_base!r}")
    if isinstance(positions, int):
        check_positive("positions", positions, allow_zero=True)
        positions = torch.arange(positions, device=device)
    if not isinstance(positions, Tensor) or positions.is_floating_point():
        raise TypeError("positions must be an int or an integer tensor")
    i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device)
    zeta = (i / head_dim + 0.4) / 1.4
    power = (positions.to(torch.float64) - center) / scale_base
    return (zeta ** power.unsqueeze(-1)).to(dtype)


# ---------------------------------------------------------------------------------------------
# p-RoPE: Barbero et al. 2024 ("Round and Round We Go!"); transformers' "proportional" RoPE.
# ---------------------------------------------------------------------------------------------


def rotating_frequencies(dim: int, rotate_fraction: float) -> int:
    """How many of dim/2 frequencies p-RoPE keeps (the highest): floor(p * dim / 2), p in [0, 1]."""
    p = rotate_fraction
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise ValueError(f"rotate_fraction must be a number in [0, 1], got {p!r}")
    return int(p * dim // 2)


def _inv_freq(dim: int, base: float, device) -> Tensor:
    """RoPE's theta_i = base^(-2i/dim), float64: the one definition (posenc/_scaling.py)."""
    return rope_frequencies(dim, base, device=device)[0]
