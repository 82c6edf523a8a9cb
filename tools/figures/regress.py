"""docs/regress.md's figures: the acceptance trials of the A/B gate as tools/regress_trials.py
printed them (results/baselines/trials-ab.log: its command, commit and machine on the first
line, then a line per trial)."""

from __future__ import annotations

import re

from tools.figures.sources import ROOT

TRIALS = ROOT / "results" / "baselines" / "trials-ab.log"
LINE = re.compile(
    r"^(?P<condition>[\w-]+) ab (?P<trial>\d+)(?P<busy> busy)?: exit (?P<exit>\d+); "
    r"(?P<row>\S+) (?P<change>[+-][\d.]+)%, largest \|change\| (?P<largest>[\d.]+)%",
    flags=re.M,
)
LABELS = {  # condition -> the table's words
    "unchanged": "unchanged",
    "unchanged-busy": "unchanged, beside a busy loop",
    "rope15": "rope15",
    "rope30": "rope30",
    "attention30": "attention30",
}


def _label(condition: str, trials: list[dict]) -> str:
    """The condition's words, and which of its trials ran beside a busy loop where not all."""
    busy = [r["trial"] for r in trials if r["busy"]]
    if not busy or len(busy) == len(trials):
        return LABELS[condition]
    return f"{LABELS[condition]} (trial {', '.join(busy)} beside a busy loop)"


def _trials() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for m in LINE.finditer(TRIALS.read_text()):
        out.setdefault(m["condition"], []).append(m.groupdict())
    return out


def _pct(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:+.1f}%" if lo == hi else f"{lo:+.1f}% to {hi:+.1f}%"


def table() -> str:
    lines = [
        "| condition | alarms (exit 1) | the watched row's change | largest change of any case |",
        "|---|---|---|---|",
    ]
    for condition in LABELS:
        t = _trials()[condition]
        label = _label(condition, t)
        alarms = sum(r["exit"] == "1" for r in t)
        changes = [float(r["change"]) for r in t]
        largest = max(float(r["largest"]) for r in t)
        lines.append(f"| {label} | {alarms} of {len(t)} | {_pct(changes)} | {largest:.1f}% |")
    return "\n".join(lines)


def header() -> str:
    """The log's first line: the command, the commit, the machine."""
    command, where = TRIALS.read_text().splitlines()[0].removeprefix("# ").split(" at ", 1)
    return f"`{command}` at {where}"


SETTINGS = (
    "(default 10%)", "(default 15%)", "(A/B 10%, stored 15%)", "--threshold rope=0.2",
    "--alpha 0.01", "p < alpha (default 0.01)", "the distribution-free 95% interval",
    "rotating 15% or 30% of its rows", "rope15, rope30",
)  # fmt: skip
FIGURES = {"header": header, "table": table}
