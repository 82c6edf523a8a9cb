"""The one Markdown table writer of the project's reports (the harness's, the probe's, the
compile audit's, the CI gate's, the GPU run's estimates)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
    """The lines of a table: the header, its rule, a line per row; each cell as str(), a `|`
    in it (which would split the cell) escaped."""

    def line(cells) -> str:
        return "| " + " | ".join(re.sub(r"(?<!\\)\|", r"\\|", str(c)) for c in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *(line(r) for r in rows)]
