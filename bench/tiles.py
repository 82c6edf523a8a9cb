"""The tiles knob of the Triton attention kernel: "default" or "MxNxWARPSxSTAGES"."""

from __future__ import annotations

import re

TILES = re.compile(r"^\d+x\d+x\d+x\d+$")  # block_m x block_n x warps x stages


def parse_tiles(text: str):
    """ "MxNxWARPSxSTAGES" -> posenc_kernels.relbias.Tiles, checked by the kernel's own rule;
    "default" -> None. The one parser of the tiles knob (config, the cases, the compile audit)."""
    if text == "default":  # no kernel import: a run without the triton rows needs none
        return None
    from posenc_kernels.relbias import Tiles, check_tiles

    if not TILES.match(text):
        raise ValueError(f"expected 'default' or MxNxWARPSxSTAGES (e.g. 128x64x8x3), got {text!r}")
    return check_tiles("tiles", Tiles(*(int(v) for v in text.split("x"))))


def check(value, key: str) -> list[str]:
    """The tiles knobs' check: every value "default" or tiles the kernel accepts."""
    from bench.checks import as_list

    values = [str(v) for v in as_list(value)]
    for v in values:
        try:
            parse_tiles(v)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{key}: {str(exc).removeprefix('tiles.')}") from None
    return values
