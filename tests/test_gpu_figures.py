"""Every GPU figure that the README and docs/ quote (tools/figures/gpu.py writes each from the
committed rows it names): each quoted text is its rows, and no number in docs/gpu.md's measured
sections escapes the list, so that a figure cannot drift from its rows, nor a row change without
its sentence."""

import re
from pathlib import Path

import pytest

from tools.figures.gpu import FIGURES

ROOT = Path(__file__).parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


@pytest.mark.parametrize("quoted", sorted(FIGURES))
def test_each_quoted_figure_is_its_rows(quoted):
    assert quoted in "\n".join(p.read_text() for p in PAGES), "no page quotes it: drop it here"
    assert FIGURES[quoted]() == quoted


# A measured figure of docs/gpu.md's runs: ms, a ratio or a percentage (a target's threshold,
# after ">=" or "goal", is not one)
FIGURE = re.compile(r"(?<!>= )(?<!goal )(?<![\d.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:ms|x\b|%)")


def test_every_figure_of_the_measured_runs_is_checked():
    """No number in docs/gpu.md's measured sections escapes the list above."""
    text = (ROOT / "docs" / "gpu.md").read_text()
    runs = text[text.index("## Measured: one H200") :]
    covered = [False] * len(runs)
    for quoted in FIGURES:
        for m in re.finditer(re.escape(quoted), runs):
            covered[m.start() : m.end()] = [True] * (m.end() - m.start())
    loose = [m.group() for m in FIGURE.finditer(runs) if not all(covered[m.start() : m.end()])]
    assert not loose, f"figures quoted without their rows: {loose}"
