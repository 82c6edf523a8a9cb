"""The CI timing gate: `python -m bench.regress --baseline FILE --current FILE [--confirm]`.

Compares two pytest-benchmark JSON files of bench/regress/suite.py. Every round of a case is
divided by the round of its anchor timed just before it (a frozen eager formula of the same
work, see the suite), so that a machine that is faster or slower, as a whole or for a moment,
cancels out. The suite measures each case in several blocks spread over the run; a case's
statistic is the median over blocks of its normalized block medians. A case regresses only when
that statistic is slower than the threshold (default 25%, `--threshold CASE=0.4` per case) AND
the slowdown is statistically significant: one-sided Mann-Whitney U on the block medians (on the
pooled rounds when a file has fewer than 3 blocks), p < alpha. With --confirm, flagged cases are
measured again once, with fresh rounds, and only a case that regresses again fails.

Exit codes: 0 no regression, 1 regression, 2 unusable input (missing or corrupt file, missing
cases, a different suite, machines that cannot be compared) with the reason.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.tables import markdown_table

SUITE_FILE = "bench/regress/suite.py"
MIN_BLOCKS = 3  # fewer blocks than this: test the pooled rounds instead


class Unusable(Exception):
    """Input that cannot be compared; exit code 2."""


@dataclass(frozen=True)
class Series:
    """One case-mode (or calibration) in one file: normalized rounds grouped by block."""

    blocks: dict[int, list[float]]  # block -> rounds (normalized by their anchors for cases)
    raw: list[float]  # un-normalized round times, all blocks

    @property
    def block_medians(self) -> list[float]:
        return [statistics.median(r) for _, r in sorted(self.blocks.items())]

    @property
    def center(self) -> float:
        return statistics.median(self.block_medians)

    @property
    def samples(self) -> list[float]:
        """What the significance test compares: block medians, or pooled rounds."""
        if len(self.blocks) >= MIN_BLOCKS:
            return self.block_medians
        return [t for _, r in sorted(self.blocks.items()) for t in r]


@dataclass(frozen=True)
class Verdict:
    case: str  # "<case>-<mode>"
    baseline: float  # normalized statistic (case time / anchor time)
    current: float
    raw_change: float  # change of the median raw time: what the machine's noise did
    change: float  # current / baseline - 1, normalized: what the gate judges
    p_value: float
    verdict: str  # "ok", "regression", "faster"


def _series(rounds: dict[int, list[float]], anchors: dict[int, list[float]] | None) -> Series:
    raw = [t for _, r in sorted(rounds.items()) for t in r]
    if anchors is None:
        return Series(rounds, raw)
    blocks = {b: [t / a for t, a in zip(r, anchors[b], strict=True)] for b, r in rounds.items()}
    return Series(blocks, raw)


def load(path: Path) -> dict:
    """{"cases": {case-mode: Series}, "calibrations": {name: Series}, suite, threads, machine}."""
    try:
        data = json.loads(Path(path).read_text())
        benchmarks = data["benchmarks"]
    except FileNotFoundError:
        raise Unusable(f"{path}: no such file") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise Unusable(f"{path}: not a pytest-benchmark JSON file ({exc})") from None
    rounds: dict[tuple[str, str], dict[int, list[float]]] = {}
    anchors: dict[str, dict[int, list[float]]] = {}
    suites, threads = set(), set()
    for bench in benchmarks:
        info = bench.get("extra_info", {})
        if not {"case", "kind", "suite", "repeat"} <= set(info):
            raise Unusable(f"{path}: benchmark {bench.get('name')} is not from {SUITE_FILE}")
        data_ = bench["stats"].get("data")
        if not data_:
            raise Unusable(f"{path}: no round data (run pytest with --benchmark-save-data)")
        suites.add(info["suite"])
        threads.add(info.get("threads"))
        kind, block = info["kind"], int(info["repeat"])
        key = info["case"] if kind == "calibration" else f"{info['case']}-{info['mode']}"
        rounds.setdefault((kind, key), {})[block] = data_
        if kind == "case":
            anchor = info.get("anchor")
            if not anchor or len(anchor) != len(data_):
                raise Unusable(f"{path}: {bench.get('name')} lacks one anchor time per round")
            anchors.setdefault(key, {})[block] = anchor
    if len(suites) != 1:
        raise Unusable(f"{path}: mixes suites {sorted(suites)}")
    cases = {k: _series(r, anchors[k]) for (kind, k), r in rounds.items() if kind == "case"}
    calibs = {k: _series(r, None) for (kind, k), r in rounds.items() if kind == "calibration"}
    return {
        "cases": cases,
        "calibrations": calibs,
        "suite": suites.pop(),
        "threads": threads.pop() if len(threads) == 1 else sorted(threads, key=str),
        "machine": data.get("machine_info", {}),
    }


def check_comparable(base: dict, cur: dict) -> None:
    if base["suite"] != cur["suite"]:
        raise Unusable(f"different suites: baseline {base['suite']}, current {cur['suite']}")
    missing = sorted(set(base["cases"]) ^ set(cur["cases"]))
    if missing:
        raise Unusable(f"cases in only one file: {', '.join(missing)}")
    for field in ("machine", "python_implementation"):
        a, b = base["machine"].get(field), cur["machine"].get(field)
        if a and b and a != b:
            raise Unusable(f"machines cannot be compared: {field} {a} vs {b}")
    if base["threads"] != cur["threads"]:
        raise Unusable(
            f"machines cannot be compared: {base['threads']} vs {cur['threads']} threads"
        )


def _raw_change(a: Series, b: Series) -> float:
    return statistics.median(b.raw) / statistics.median(a.raw) - 1


def compare(
    base: dict, cur: dict, thresholds: dict[str, float], default: float, alpha: float
) -> list[Verdict]:
    check_comparable(base, cur)
    try:  # the gate's one optional dependency (pyproject: the `gate` extra)
        from scipy.stats import mannwhitneyu
    except ImportError as err:
        raise SystemExit("the timing gate needs scipy: pip install 'posenc-bench[gate]'") from err
    verdicts = []
    for key in sorted(base["cases"]):
        a, b = base["cases"][key], cur["cases"][key]
        change = b.center / a.center - 1
        limit = thresholds.get(key, thresholds.get(key.rsplit("-", 1)[0], default))
        slower = mannwhitneyu(b.samples, a.samples, alternative="greater").pvalue
        faster = mannwhitneyu(b.samples, a.samples, alternative="less").pvalue
        if change > limit and slower < alpha:
            verdict, p = "regression", slower
        elif change < -limit and faster < alpha:
            verdict, p = "faster", faster
        else:
            verdict, p = "ok", min(slower, faster)
        verdicts.append(Verdict(key, a.center, b.center, _raw_change(a, b), change, p, verdict))
    return verdicts


def table(verdicts: list[Verdict]) -> str:
    header = [
        "case",
        "baseline (norm.)",
        "current (norm.)",
        "raw change",
        "normalized change",
        "p-value",
        "verdict",
    ]
    rows = [
        [
            v.case,
            f"{v.baseline:.3f}",
            f"{v.current:.3f}",
            f"{100 * v.raw_change:+.1f}%",
            f"{100 * v.change:+.1f}%",
            f"{v.p_value:.2g}",
            v.verdict,
        ]
        for v in verdicts
    ]
    return "\n".join(markdown_table(header, rows))


def machine_line(base: dict, cur: dict) -> str:
    """How fast the machine was as a whole, current vs baseline (context, not judged)."""
    calibs = base["calibrations"]
    parts = [
        f"{name} {100 * _raw_change(calibs[name], s):+.1f}%"
        for name, s in sorted(cur["calibrations"].items())
        if name in calibs
    ]
    line = "machine speed (raw calibration time change): " + (", ".join(parts) or "n/a")
    cpus = [m["machine"].get("cpu", {}).get("brand_raw") for m in (base, cur)]
    if cpus[0] != cpus[1]:  # compared anyway: the anchors do the same work on the same CPU
        line += f"\nnote: other CPU (baseline {cpus[0]}, current {cpus[1]}): compared via anchors"
    return line


def run_suite(
    out: Path, keys: list[str] | None = None, blocks: int = 1, extra: list[str] = ()
) -> None:
    """Runs the suite (or only the given case-mode keys, in `blocks` blocks) into out."""
    tests = [SUITE_FILE]
    if keys:
        tests = [f"{SUITE_FILE}::test_perf[r{r}-{k}]" for r in range(blocks) for k in keys]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *tests,
        "--benchmark-only",
        "-q",
        f"--benchmark-json={out}",
        "--benchmark-save-data",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Unusable(f"the suite failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _thresholds(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        case, _, value = item.partition("=")
        try:
            out[case] = float(value)
        except ValueError:
            raise Unusable(f"--threshold: expected CASE=FRACTION, got {item!r}") from None
        if not case or out[case] <= 0:
            raise Unusable(f"--threshold: expected CASE=FRACTION > 0, got {item!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--current", type=Path, required=True)
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="CASE=FRACTION",
        help="per-case threshold (a case or case-mode), e.g. rope=0.3",
    )
    parser.add_argument("--default-threshold", type=float, default=0.25)
    parser.add_argument("--alpha", type=float, default=0.01, help="significance level")
    parser.add_argument(
        "--confirm", action="store_true", help="re-measure flagged cases once before the verdict"
    )
    parser.add_argument(
        "--suite-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra pytest argument for the confirmation run, as given to the "
        "first run (e.g. --suite-arg=--perf-slowdown=rope)",
    )
    args = parser.parse_args(argv)
    try:
        if args.default_threshold <= 0:
            raise Unusable(f"--default-threshold must be > 0, got {args.default_threshold}")
        thresholds = _thresholds(args.threshold)
        base, cur = load(args.baseline), load(args.current)
        verdicts = compare(base, cur, thresholds, args.default_threshold, args.alpha)
        print(table(verdicts))
        print(machine_line(base, cur))
        flagged = [v.case for v in verdicts if v.verdict == "regression"]
        if flagged and args.confirm:
            print(f"\nconfirming {', '.join(flagged)} with fresh rounds ...")
            blocks = max(len(s.blocks) for s in cur["cases"].values())
            with tempfile.TemporaryDirectory() as tmp:
                again = Path(tmp) / "confirm.json"
                run_suite(again, flagged, blocks, args.suite_arg)
                rerun = load(again)
            sub = {**base, "cases": {k: base["cases"][k] for k in flagged}}
            verdicts = compare(sub, rerun, thresholds, args.default_threshold, args.alpha)
            print(table(verdicts))
            flagged = [v.case for v in verdicts if v.verdict == "regression"]
    except Unusable as exc:
        print(f"unusable input: {exc}", file=sys.stderr)
        return 2
    print(f"\nverdict: {'REGRESSION in ' + ', '.join(flagged) if flagged else 'ok'}")
    return 1 if flagged else 0
