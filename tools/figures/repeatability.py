"""docs/repeatability.md's figures: the six-run and five-run sets' summaries as
`python -m bench.report --compare` wrote them (results/reference/repeatability-2026-11-29/,
results/reference/rope-copy-cpu/repeatability.md), the huge-page comparison's rows
(seed_5_2-thp/) and tools/cpu_drift.py's committed output (results/reference/cpu-drift/)."""

from __future__ import annotations

import re

import pandas as pd

from tools.figures.sources import REF, g3, parts

DAY = REF / "repeatability-2026-11-29"
SETS = {  # the page's name for a set -> its compare output
    "first": DAY / "repeatability.md",
    "second": DAY / "repeatability-2.md",
    "rope": REF / "rope-copy-cpu" / "repeatability.md",
}
DRIFT = REF / "cpu-drift" / "seconds-300.txt"


def _summary(name: str) -> str:
    """The compare output's closing paragraph: every pair's drift, summarized."""
    text = SETS[name].read_text()
    return re.search(r"^Over the \d+ pairs.*$", text, flags=re.M).group()


def _pairs(name: str) -> dict[tuple[int, int], float]:
    """(run a, run b) -> the median over rows of |B/A - 1| of their medians, in percent."""
    rows = re.findall(r"^\| (\d+) vs (\d+) \| \d+ \| ([\d.]+)%", SETS[name].read_text(), re.M)
    return {(int(a), int(b)): float(m) for a, b, m in rows}


def first() -> str:
    return _summary("first")


def second() -> str:
    return _summary("second")


def rope() -> str:
    return _summary("rope")


def neighbours() -> str:
    """Consecutive runs against the furthest apart, in the first set; the second's worst."""
    one, two = _pairs("first"), _pairs("second")
    n = max(b for _, b in one)
    consecutive = ", ".join(f"{one[i, i + 1]:.1f}%" for i in range(1, n))
    worst = max(two, key=two.get)
    return (
        f"consecutive runs agreed best ({consecutive}) and the two furthest apart least (runs 1 "
        f"and {n}: {one[1, n]:.1f}%); in the second set, runs {worst[0]} and {worst[1]} "
        f"differed most ({two[worst]:.1f}%)"
    )


def _thp() -> pd.DataFrame:
    key = ["case", "impl"]
    default, thp = (
        pd.read_csv(DAY / "seed_5_2-thp" / d / "results.csv").set_index(key).p50_ms
        for d in ("default", "thp")
    )
    return pd.DataFrame({"default": default, "thp": thp}).dropna()


THP_ROWS = [("sinusoidal", "seed"), ("sinusoidal", "reference"), ("learnable", "seed"),
            ("learnable", "reference"), ("rope_module", "seed"), ("rope_module", "reference"),
            ("rope_module", "reference_out")]  # fmt: skip


def thp_table() -> str:
    df = _thp()
    lines = [
        "| case | impl | default p50 ms | THP p50 ms | THP / default |",
        "|---|---|---|---|---|",
    ]
    for case, impl in THP_ROWS:
        r = df.loc[(case, impl)]
        lines.append(
            f"| {case} | {impl} | {g3(r.default)} | {g3(r.thp)} | {r.thp / r.default:.2f} |"
        )
    return "\n".join(lines)


def thp_prose() -> tuple[str, ...]:
    df = _thp()
    moved = df.drop(("rope_module", "reference_out"))
    faster = df.default / df.thp
    seed, out = df.loc[("rope_module", "seed")], df.loc[("rope_module", "reference_out")]
    return (
        f"the same sweep runs {(moved.default / moved.thp).min():.1f}-"
        f"{faster.drop(('rope_module', 'reference_out')).max():.1f}x faster",
        f"the seed's RoPE is {seed.default / out.default:.0f}x slower than `reference_out` by "
        f"default but {seed.thp / out.thp:.1f}x with\nhuge pages",
    )


def _drift_line(name: str) -> re.Match:
    return re.search(rf"^  {re.escape(name)}: median ([\d.]+)%, max ([\d.]+)%, (\d+) of (\d+)",
                     DRIFT.read_text(), flags=re.M)  # fmt: skip


def drift() -> tuple[str, ...]:
    text = DRIFT.read_text()
    add, copy, alloc, ratio = (
        _drift_line(n) for n in ("out= add", "copy", "allocating add", "out= add / copy")
    )
    windows = re.search(r"^out= add: median [\d.]+ ms per call; windows ([\d.]+) \.\. ([\d.]+)",
                        text, flags=re.M)  # fmt: skip
    cpu = re.search(r"CPU time / wall time of the calls: ([\d.]+)", text)
    blocks = re.search(r"^(\d+) blocks of ([\d.]+) s", text, flags=re.M)
    return (
        f"Cut into {_words(int(blocks[1]))} {blocks[2]}-second blocks, the blocks' medians "
        f"differed pairwise by {add[1]}% (median over the {add[4]} pairs; {add[2]}% at most; "
        f"{add[3]} of {add[4]} pairs within 5%) for the add, {copy[1]}% for the copy and "
        f"{alloc[1]}% for the allocating add, while the add's time over the copy's, taken side "
        f"by side, differed by "
        f"{ratio[1]}% ({ratio[3]} of {ratio[4]} pairs within 5%)",
        f"The add's two-second windows ranged from {windows[1]}x to {windows[2]}x of their median",
        f"The calls' CPU time over their wall time was {cpu[1]}",
    )


def _words(n: int) -> str:
    return {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}.get(n, str(n))


SETTINGS = ("within 5% only if", "the pairs that miss 5%", "in 20 ms slices")
FIGURES = {
    "rope": rope,
    "first": first,
    "second": second,
    "neighbours": neighbours,
    "thp_table": thp_table,
    **parts(thp_prose, 2),
    **parts(drift, 3),
}
