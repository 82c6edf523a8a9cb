"""What every figure of the report shares: titles wrapped, never cut, legends readable, and
each figure saved with its bounding box around every artist (nothing at or past the canvas'
edge; tests/bench/report/test_figures.py checks every plot kind)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WRAP = 60  # characters per line of a panel title
LEGEND_PT = 8  # the smallest text a reader has to read


def wrap(text: str, width: int = WRAP) -> str:
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def save(fig, path: Path, dpi: int = 100) -> None:
    """Saved with its bounding box around every artist, padded; the figure closed."""
    fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
