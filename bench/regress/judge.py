"""Verdicts per case-mode, in both modes of the gate, and the table that shows them.

A case regresses only when it is slower than its threshold (practical significance) AND the
slowdown is statistically significant, p < alpha (one-sided):
- stored baseline: the normalized statistic (median over blocks of the block medians of
  case / anchor) against the baseline's; Mann-Whitney U on the block medians (on the pooled
  rounds when a file has fewer than 3 blocks). Faster by more than the threshold is `stale`:
  the baseline no longer describes this tree, and a slowdown up to that much would pass.
- A/B: per block, the ratio of the current side's median round to the base side's, timed
  side by side; the change is the median of those ratios, its interval the distribution-free
  95% interval of that median (order statistics), the test Wilcoxon's signed-rank on their logs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bench.regress.files import Series, Unusable, check_times
from bench.tables import markdown_table


@dataclass(frozen=True)
class Verdict:
    case: str  # "<case>-<mode>"
    base: float  # stored: normalized statistic; A/B: median round in ms
    current: float
    change: float  # what the gate judges: current / base - 1
    p_value: float
    verdict: str  # "ok", "regression", "faster", "stale"
    raw_change: float | None = None  # stored: the raw times' change (the machine's noise)
    interval: tuple[float, float] | None = None  # A/B: 95% interval of the change


def _scipy():
    try:  # the gate's one optional dependency (pyproject: the `gate` extra)
        from scipy import stats
    except ImportError as err:
        raise SystemExit("the timing gate needs scipy: pip install 'posenc-bench[gate]'") from err
    return stats


def limit_of(key: str, thresholds: dict[str, float], default: float) -> float:
    return thresholds.get(key, thresholds.get(key.rsplit("-", 1)[0], default))


def _decide(change: float, limit: float, slower: float, faster: float, alpha: float, fast: str):
    if change > limit and slower < alpha:
        return "regression", slower
    if change < -limit and faster < alpha:
        return fast, faster
    return "ok", min(slower, faster)


def _raw_change(a: Series, b: Series) -> float:
    return statistics.median(b.raw) / statistics.median(a.raw) - 1


def stored(base: dict, cur: dict, thresholds: dict, default: float, alpha: float) -> list[Verdict]:
    """The current file's cases against the baseline's (files.check_comparable first)."""
    mannwhitneyu = _scipy().mannwhitneyu
    verdicts = []
    for key in sorted(base["cases"]):
        a, b = base["cases"][key], cur["cases"][key]
        change = b.center / a.center - 1
        slower = mannwhitneyu(b.samples, a.samples, alternative="greater").pvalue
        faster = mannwhitneyu(b.samples, a.samples, alternative="less").pvalue
        limit = limit_of(key, thresholds, default)
        verdict, p = _decide(change, limit, slower, faster, alpha, "stale")
        verdicts.append(
            Verdict(key, a.center, b.center, change, p, verdict, raw_change=_raw_change(a, b))
        )
    return verdicts


def check_blocks(blocks: int, alpha: float) -> None:
    """Wilcoxon's one-sided p on n blocks is at least 1 / 2^n: fewer blocks can never fail."""
    if 0.5**blocks >= alpha:
        need = math.floor(math.log2(1 / alpha)) + 1
        raise Unusable(f"--blocks {blocks}: cannot reach p < {alpha} (at least {need} blocks)")


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The distribution-free interval of a median: order statistics k and n + 1 - k, k the
    largest with P(Binomial(n, 1/2) < k) <= (1 - level) / 2 (the whole range when n is small)."""
    xs, n = sorted(values), len(values)
    binom = _scipy().binom
    k = 0
    while k + 1 <= n // 2 and binom.cdf(k, n, 0.5) <= (1 - level) / 2:
        k += 1
    k = max(k, 1)
    return xs[k - 1], xs[n - k]


def paired(record: dict, thresholds: dict, default: float, alpha: float) -> list[Verdict]:
    """An A/B record's (bench.regress.ab) case-modes: current side against base side."""
    wilcoxon = _scipy().wilcoxon
    logs: dict[str, list[float]] = {}
    times: dict[str, tuple[list[float], list[float]]] = {}
    for pair in record["pairs"]:
        key, where = f"{pair['case']}-{pair['mode']}", f"block {pair['block']}"
        a = statistics.median(check_times(pair["base"], f"{key}, {where}, base side"))
        b = statistics.median(check_times(pair["current"], f"{key}, {where}, current side"))
        logs.setdefault(key, []).append(math.log(b / a))
        times.setdefault(key, ([], []))[0].append(a)
        times[key][1].append(b)
    verdicts = []
    for key, d in sorted(logs.items()):
        change = math.exp(statistics.median(d)) - 1
        low, high = (math.exp(x) - 1 for x in median_interval(d))
        slower = wilcoxon(d, alternative="greater").pvalue if any(d) else 1.0
        faster = wilcoxon(d, alternative="less").pvalue if any(d) else 1.0
        limit = limit_of(key, thresholds, default)
        verdict, p = _decide(change, limit, slower, faster, alpha, "faster")
        a, b = (1e3 * statistics.median(t) for t in times[key])
        verdicts.append(Verdict(key, a, b, change, p, verdict, interval=(low, high)))
    return verdicts


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def table(verdicts: list[Verdict]) -> str:
    ab = verdicts[0].interval is not None
    if ab:
        header = ["case", "base (ms)", "current (ms)", "change", "95% interval", "p", "verdict"]
    else:
        header = ["case", "baseline (norm.)", "current (norm.)", "raw change"]
        header += ["normalized change", "p-value", "verdict"]
    rows = []
    for v in verdicts:
        middle = [f"{_pct(v.interval[0])} .. {_pct(v.interval[1])}"] if ab else []
        first = [] if ab else [_pct(v.raw_change)]
        rows.append(
            [v.case, f"{v.base:.3f}", f"{v.current:.3f}", *first, _pct(v.change), *middle]
            + [f"{v.p_value:.2g}", v.verdict]
        )
    return "\n".join(markdown_table(header, rows))
