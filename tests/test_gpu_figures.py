"""Every GPU figure that the README and docs/ quote (tools/figures/gpu.py writes each from the
committed rows it names) is its rows, so that a figure cannot drift from its rows, nor a row
change without its sentence; tests/test_figures.py holds docs/gpu.md to no other measured
number."""

from pathlib import Path

import pytest

from tools.figures.gpu import QUOTES as FIGURES

ROOT = Path(__file__).parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


@pytest.mark.parametrize("quoted", sorted(FIGURES))
def test_each_quoted_figure_is_its_rows(quoted):
    text = " ".join(" ".join(p.read_text() for p in PAGES).split())  # a quote may wrap
    assert " ".join(quoted.split()) in text, "no page quotes it: drop it here"
    assert FIGURES[quoted]() == quoted
