"""The CI timing gate: `python -m bench.regress --baseline FILE --current FILE [--confirm]`.

Compares two pytest-benchmark JSON files of tests/perf/perf_suite.py. Each case's round times are
divided by the median of its calibration (a same-size copy plus a small matmul measured right
before it, in the same run), so that a machine that is faster or slower as a whole cancels out.
A case regresses only when its normalized median is slower than the threshold (default 25%,
`--threshold CASE=0.4` per case) AND the slowdown is statistically significant (one-sided
Mann-Whitney U on the normalized rounds, p < alpha). With --confirm, flagged cases are measured
again once, with fresh rounds, and only a case that regresses again fails.

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

from scipy.stats import mannwhitneyu

SUITE_FILE = "tests/perf/perf_suite.py"


class Unusable(Exception):
    """Input that cannot be compared; exit code 2."""


@dataclass(frozen=True)
class Verdict:
    case: str  # "<case>-<mode>"
    baseline: float  # normalized median (case time / calibration time)
    current: float
    change: float  # current / baseline - 1
    p_value: float
    verdict: str  # "ok", "regression", "faster"


def load(path: Path) -> dict:
    """{case-mode: (normalized rounds, suite, threads)} plus the machine info, from one JSON."""
    try:
        data = json.loads(Path(path).read_text())
        benchmarks = data["benchmarks"]
    except FileNotFoundError:
        raise Unusable(f"{path}: no such file") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise Unusable(f"{path}: not a pytest-benchmark JSON file ({exc})") from None
    raw: dict[tuple[str, str], list[float]] = {}
    meta: dict[str, dict] = {}
    for bench in benchmarks:
        info = bench.get("extra_info", {})
        if "case" not in info or "kind" not in info:
            raise Unusable(f"{path}: benchmark {bench.get('name')} is not from {SUITE_FILE}")
        rounds = bench["stats"].get("data")
        if not rounds:
            raise Unusable(f"{path}: no round data (run pytest with --benchmark-save-data)")
        key = f"{info['case']}-{info['mode']}"
        raw[(key, info["kind"])] = rounds
        if info["kind"] == "case" and info.get("paired_calibration"):
            raw[(key, "paired")] = info["paired_calibration"]
        meta[key] = info
    cases = {}
    for (key, kind), rounds in raw.items():
        if kind != "case":
            continue
        paired = raw.get((key, "paired"))
        if paired and len(paired) == len(rounds):  # each round over the calibration just before it
            cases[key] = [t / c for t, c in zip(rounds, paired, strict=True)]
            continue
        calib = raw.get((key, "calibration"))
        if not calib:
            raise Unusable(f"{path}: case {key} has no calibration benchmark")
        scale = statistics.median(calib)
        cases[key] = [t / scale for t in rounds]
    suites = {m["suite"] for m in meta.values()}
    threads = {m.get("threads") for m in meta.values()}
    if len(suites) != 1:
        raise Unusable(f"{path}: mixes suites {sorted(suites)}")
    return {"cases": cases, "suite": suites.pop(), "threads": threads.pop(),
            "machine": data.get("machine_info", {})}  # fmt: skip


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


def compare(base: dict, cur: dict, thresholds: dict[str, float], default: float,
            alpha: float) -> list[Verdict]:  # fmt: skip
    check_comparable(base, cur)
    verdicts = []
    for key in sorted(base["cases"]):
        a, b = base["cases"][key], cur["cases"][key]
        med_a, med_b = statistics.median(a), statistics.median(b)
        change = med_b / med_a - 1
        limit = thresholds.get(key.rsplit("-", 1)[0], thresholds.get(key, default))
        slower = mannwhitneyu(b, a, alternative="greater").pvalue
        faster = mannwhitneyu(b, a, alternative="less").pvalue
        if change > limit and slower < alpha:
            verdict, p = "regression", slower
        elif change < -limit and faster < alpha:
            verdict, p = "faster", faster
        else:
            verdict, p = "ok", min(slower, faster)
        verdicts.append(Verdict(key, med_a, med_b, change, p, verdict))
    return verdicts


def table(verdicts: list[Verdict]) -> str:
    lines = ["| case | baseline (norm.) | current (norm.) | change | p-value | verdict |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for v in verdicts:
        lines.append(f"| {v.case} | {v.baseline:.3f} | {v.current:.3f} | {100 * v.change:+.1f}% "
                     f"| {v.p_value:.2g} | {v.verdict} |")  # fmt: skip
    return "\n".join(lines)


def run_suite(out: Path, keys: list[str] | None = None, extra: list[str] = ()) -> None:
    """Runs the suite (or only the given case-mode keys, calibrations included) into out."""
    tests = [SUITE_FILE]
    if keys:  # node ids, each calibration right before its case (the suite's order)
        tests = [f"{SUITE_FILE}::test_perf[{k}-{kind}]" for k in keys
                 for kind in ("calibration", "case")]  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", *tests, "--benchmark-only", "-q",
           f"--benchmark-json={out}", "--benchmark-save-data", *extra]  # fmt: skip
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
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--current", type=Path, required=True)
    parser.add_argument("--threshold", action="append", default=[], metavar="CASE=FRACTION",
                        help="per-case threshold (a case or case-mode), e.g. rope=0.3")  # fmt: skip
    parser.add_argument("--default-threshold", type=float, default=0.25)
    parser.add_argument("--alpha", type=float, default=0.01, help="significance level")
    parser.add_argument("--confirm", action="store_true",
                        help="re-measure flagged cases once before the verdict")  # fmt: skip
    parser.add_argument("--suite-arg", action="append", default=[], metavar="ARG",
                        help="extra pytest argument for the confirmation run, as given to the "
                             "first run (e.g. --suite-arg=--perf-slowdown=rope)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        thresholds = _thresholds(args.threshold)
        base, cur = load(args.baseline), load(args.current)
        verdicts = compare(base, cur, thresholds, args.default_threshold, args.alpha)
        print(table(verdicts))
        flagged = [v.case for v in verdicts if v.verdict == "regression"]
        if flagged and args.confirm:
            print(f"\nconfirming {', '.join(flagged)} with fresh rounds ...")
            with tempfile.TemporaryDirectory() as tmp:
                again = Path(tmp) / "confirm.json"
                run_suite(again, flagged, args.suite_arg)
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


if __name__ == "__main__":
    sys.exit(main())
