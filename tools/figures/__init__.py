"""Every measured figure of README.md and docs/, written from what holds it: the reference
runs' rows (results/reference/<run>/: results.csv or probe.csv, env.json, timing_summary.json,
config.yaml), docs/models.md's conformance section (written by `python -m bench.conformance
--markdown`), the record of the last full `make test` (results/reference/tests.json), the compile
audit's tables (results/gpu-compile/*.csv), the host audit's counts (`python -m tools.audit.host`),
the models' configs (configs/models/) and the GPU runs' files (results/gpu/). One module per
page (readme.py, kernels.py, harness.py, probe.py, gpu.py, ...).

    python -m tools.figures                  # each figure as its page must quote it
    python -m tools.figures --check          # the ones a page does not quote so, and any
                                             # number a page holds that no figure writes (exit 1)
    python -m tools.figures --record-tests   # after `make test` on a clean tree: its record

tests/test_figures.py checks that each page quotes each figure as written here and that the
pages in WHOLE hold no other number that reads like a measurement (a percentage, a time, a
ratio, an accuracy, a count of rows). A new run: commit its folder, point the figure at it,
paste what `python -m tools.figures` prints.
"""

from __future__ import annotations

import re
from functools import cache

from tools.figures import (
    gpu,
    harness,
    models,
    multiaxis,
    performance,
    probe,
    regress,
    repeatability,
    rope_scaling,
    tutorial,
)
from tools.figures.kernels import KERNELS_FIGURES, KERNELS_SETTINGS
from tools.figures.readme import README_FIGURES, README_SETTINGS
from tools.figures.sources import README, ROOT

DOCS = {  # the docs pages whose every measured figure is written here: page -> its module
    "docs/gpu.md": gpu,
    "docs/harness.md": harness,
    "docs/models.md": models,
    "docs/multiaxis_rope.md": multiaxis,
    "docs/performance.md": performance,
    "docs/probe.md": probe,
    "docs/regress.md": regress,
    "docs/repeatability.md": repeatability,
    "docs/rope_scaling.md": rope_scaling,
    "docs/tutorial.md": tutorial,
}
PAGES = {  # each page -> its figures
    "README.md": README_FIGURES,
    "docs/architecture.md": {},  # no measured figure (tests/test_figures.py keeps it so)
    "docs/kernels.md": KERNELS_FIGURES,
    **{page: module.FIGURES for page, module in DOCS.items()},
}
# The pages all of whose measured figures are written here: tests/test_figures.py fails a number
# in them that no figure writes (the README's settings are checked against the code there).
WHOLE = {  # page -> the settings it states that read like figures (not measurements)
    "README.md": tuple(README_SETTINGS),
    "docs/architecture.md": (),
    "docs/kernels.md": KERNELS_SETTINGS,
    **{page: module.SETTINGS for page, module in DOCS.items()},
}
# Sections of a page between `<!-- name: begin -->` and `<!-- name: end -->` that a command of
# their own writes and a test of their own checks (docs/models.md's conformance section).
ELSEWHERE = {page: getattr(module, "ELSEWHERE", ()) for page, module in DOCS.items()}


def flat(text: str) -> str:
    """Text with its line breaks and runs of spaces as single spaces: a figure may wrap."""
    return " ".join(text.split())


@cache
def written(page: str) -> dict[str, str]:
    """Each figure of `page` as written here, flattened: computed once a process."""
    return {name: flat(figure()) for name, figure in PAGES[page].items()}


def misquoted(text: str, page: str = "README.md") -> list[str]:
    """The figures of `page` that `text` (its contents) does not quote as written here."""
    text = flat(text)
    return [name for name, figure in written(page).items() if figure not in text]


# A measured figure: a percentage, a time, a ratio, an accuracy, a count of rows or of cases
FIGURE = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?: ?%| ?ms\b| ?min\b| minutes\b| ?s\b|x\b)|\b\d+:\d\d\b"
    r"|(?<![\w.])[01]\.\d\d\b|\b\d+ rows\b|\b\d+ of \d+\b"
)


def loose(text: str, page: str = "README.md") -> list[str]:
    """The figure-like numbers of `text` (a page of WHOLE, its Python examples aside) that
    neither a figure of the page nor a setting it states covers: a number no row is behind,
    or a figure's old value left where the new one is quoted elsewhere on the page."""
    text = re.sub(r"```python.*?```", " ", text, flags=re.S)
    for name in ELSEWHERE.get(page, ()):
        text = re.sub(f"<!-- {name}: begin -->.*?<!-- {name}: end -->", " ", text, flags=re.S)
    text = flat(text)
    covered = [False] * len(text)
    for q in [*written(page).values(), *(flat(s) for s in WHOLE[page])]:
        for m in re.finditer(re.escape(q), text):
            covered[m.start() : m.end()] = [True] * (m.end() - m.start())
    return [m.group() for m in FIGURE.finditer(text) if not all(covered[m.start() : m.end()])]


__all__ = [
    "ELSEWHERE",
    "PAGES",
    "WHOLE",
    "written",
    "README",
    "README_FIGURES",
    "ROOT",
    "flat",
    "loose",
    "misquoted",
]
