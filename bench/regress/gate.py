"""The CI timing gate: `python -m bench.regress` (make regress), in one of two modes.

    --base-ref REF   A/B in one job: REF's library against the working tree's, timed side by
                     side by one suite in this environment (bench.regress.ab). CI's mode.
    --baseline FILE  a stored pytest-benchmark file of the suite (results/baselines/cpu.json),
                     for a machine of the kind that measured it; the suite is run now into
                     OUT/current.json (or --current FILE is judged). `auto`: the device's
                     committed baseline, results/baselines/cpu.json or, on a GPU,
                     results/baselines/cuda-<its name>.json; where that GPU has none, the run
                     measures one into OUT and says so (nothing is judged).

--device cuda times the suite's GPU points (the fused kernels, bfloat16); a GPU baseline is
keyed by the GPU's name and torch's and Triton's versions, and another GPU's is refused.

Both judge each case-mode of bench/regress/suite.py (bench.regress.judge): slower than its
threshold and significant at --alpha is a regression. With --confirm a flagged case must be
flagged again by a fresh pass taken the way the first one was (the whole suite, or a whole A/B
run): never by a case timed alone, which reads faster than inside the suite.

Exit codes: 0 no regression, 1 regression, 2 unusable input or a bad argument, in one line.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from pathlib import Path

from bench.regress import ab, judge, suite
from bench.regress.files import Unusable, check_comparable, cpu, load
from bench.regress.runs import run_suite

DEFAULTS = {"ab": 0.10, "stored": 0.15}  # thresholds; docs/regress.md has the trials behind them
REFRESH = "make regress-update"
AUTO = "auto"  # --baseline auto: the device's committed baseline (baseline_for)
BASELINES = Path("results/baselines")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line (argparse prints its usage line above by default)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _between_0_and_1(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a fraction such as 0.15, got {text!r}"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive fraction, got {text}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def _case(text: str) -> str:
    cases = dict.fromkeys(c for points in suite.ALL_POINTS.values() for c in points)
    if text not in cases:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(cases)}")
    return text


def baseline_for(device: str) -> Path:
    """The device's committed baseline: cpu.json, or cuda-<the GPU's name>.json."""
    if device == "cpu":
        return BASELINES / "cpu.json"
    import torch

    if not torch.cuda.is_available():
        raise Unusable("--device cuda: no CUDA device here")
    name = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name().lower()).strip("-")
    return BASELINES / f"cuda-{name}.json"


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m bench.regress", description=__doc__.splitlines()[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--base-ref", metavar="REF", help="A/B against commit REF (make regress BASE=REF)"
    )
    which.add_argument(
        "--baseline", metavar="FILE", help="a stored baseline file, or auto: the device's"
    )
    p.add_argument("--device", choices=suite.DEVICES, default="cpu", help="where the suite runs")
    p.add_argument("--current", type=Path, metavar="FILE", help="with --baseline: judge FILE")
    p.add_argument("--update", action="store_true", help="measure the suite into --baseline")
    p.add_argument("--out", type=Path, default=Path("results/regress"), help="where runs go")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="CASE=FRACTION",
        help="per case or case-mode, e.g. rope=0.3 or rope-forward=0.2",
    )
    p.add_argument(
        "--default-threshold",
        type=_fraction,
        metavar="FRACTION",
        help=f"every other case (A/B {DEFAULTS['ab']}, stored {DEFAULTS['stored']})",
    )
    p.add_argument("--alpha", type=_between_0_and_1, default=0.01, help="significance level")
    p.add_argument("--confirm", action="store_true", help="a flagged case must be flagged twice")
    p.add_argument(
        "--perf-slowdown",
        type=_case,
        metavar="CASE",
        help="plant 25%% more work in CASE in every suite run (the current side in A/B)",
    )
    p.add_argument("--blocks", type=_count, default=16, help="A/B: blocks (sides alternate)")
    p.add_argument("--rounds", type=_count, default=9, help="A/B: rounds per side per block")
    return p


def thresholds(items: list[str], device: str = "cpu") -> dict[str, float]:
    """CASE=FRACTION items, each naming a case or case-mode the device's suite has."""
    points = suite.ALL_POINTS[device]
    known = set(points) | {f"{c}-{m}" for c, m in suite.keys(device)}
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise Unusable(
                f"--threshold: {item!r} names no case or case-mode of the suite "
                f"(cases {', '.join(points)}; modes {', '.join(suite.MODES)})"
            )
        try:
            out[key] = _fraction(value)
        except argparse.ArgumentTypeError as exc:
            raise Unusable(f"--threshold {item!r}: {exc}") from None
    return out


def machine_line(base: dict, cur: dict) -> str:
    """How fast the machine was as a whole, current vs baseline (context, not judged)."""
    calibs = base["calibrations"]
    parts = [
        f"{name} {100 * (statistics.median(s.raw) / statistics.median(calibs[name].raw) - 1):+.1f}%"
        for name, s in sorted(cur["calibrations"].items())
        if name in calibs
    ]
    return "machine speed (raw calibration time change): " + (", ".join(parts) or "n/a")


def _stored(args, limits: dict, default: float) -> list[str] | None:
    """The flagged case-modes against the stored baseline; None where a GPU has no baseline
    yet (one is measured into OUT instead)."""
    args.out.mkdir(parents=True, exist_ok=True)  # a clean clone has no results/regress
    if args.baseline == AUTO and not args.path.exists() and args.device == "cuda":
        fresh = args.out / args.path.name
        run_suite(fresh, args.out / "baseline.log", args.perf_slowdown, args.device)
        print(
            f"no baseline for this GPU ({args.path} is not committed): measured one into "
            f"{fresh}; commit it as {args.path} to gate later runs. Nothing judged."
        )
        return None
    base = load(args.path)
    current = args.current
    if current is None:
        current = args.out / "current.json"
        run_suite(current, args.out / "current.log", args.perf_slowdown, args.device)
    cur = load(current)
    check_comparable(base, cur)
    verdicts = judge.stored(base, cur, limits, default, args.alpha)
    commit = base["commit"].get("id", "?")[:12]
    on = base["stack"].get("gpu") or cpu(base["machine"])
    print(f"stored baseline {args.path} (measured at {commit} on {on})")
    print(judge.table(verdicts))
    print(machine_line(base, cur))
    flagged = [v.case for v in verdicts if v.verdict == "regression"]
    if flagged and args.confirm:
        print(f"\nconfirming {', '.join(flagged)}: the whole suite again, as the first pass ran it")
        again = args.out / "confirm.json"
        run_suite(again, args.out / "confirm.log", args.perf_slowdown, args.device)
        rerun = load(again)
        check_comparable(base, rerun)
        verdicts = judge.stored(base, rerun, limits, default, args.alpha)
        print(judge.table(verdicts))
        flagged = [v.case for v in verdicts if v.verdict == "regression" and v.case in flagged]
    stale = [v.case for v in verdicts if v.verdict == "stale"]
    if stale:
        print(
            f"stale baseline: {', '.join(stale)} read faster than {args.path} by more than "
            f"the threshold, so a slowdown of up to that much would pass: refresh it ({REFRESH})"
        )
    return flagged


def _ab_pass(args, name: str) -> dict:
    record = ab.run(
        Path.cwd(),
        args.base_ref,
        blocks=args.blocks,
        rounds=args.rounds,
        slowdown=args.perf_slowdown,
        logs=args.out,
        device=args.device,
    )
    ab.save(record, args.out / f"{name}.json")
    return record


def _ab(args, limits: dict, default: float) -> list[str]:
    judge.check_blocks(args.blocks, args.alpha)
    record = _ab_pass(args, "ab")
    print(ab.describe(record))
    verdicts = judge.paired(record, limits, default, args.alpha)
    print(judge.table(verdicts))
    flagged = [v.case for v in verdicts if v.verdict == "regression"]
    if flagged and args.confirm:
        print(f"\nconfirming {', '.join(flagged)}: a second A/B run of the whole suite")
        verdicts = judge.paired(_ab_pass(args, "ab-confirm"), limits, default, args.alpha)
        print(judge.table(verdicts))
        flagged = [v.case for v in verdicts if v.verdict == "regression" and v.case in flagged]
    return flagged


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    mode = "ab" if args.base_ref else "stored"
    try:
        if args.perf_slowdown and args.perf_slowdown not in suite.ALL_POINTS[args.device]:
            raise Unusable(
                f"--perf-slowdown: {args.perf_slowdown!r} is not a case of the {args.device} "
                f"suite ({', '.join(suite.ALL_POINTS[args.device])})"
            )
        if args.current is not None and mode == "ab":
            raise Unusable("--current: only with --baseline (A/B times both sides itself)")
        if mode == "stored":
            auto = args.baseline == AUTO
            args.path = baseline_for(args.device) if auto else Path(args.baseline)
        if args.update:
            if mode == "ab" or args.current is not None:
                raise Unusable("--update: only with --baseline FILE (no --base-ref, no --current)")
            run_suite(args.path, args.out / "baseline.log", args.perf_slowdown, args.device)
            print(f"measured {args.path}: review the change (make regress) before committing")
            return 0
        limits = thresholds(args.threshold, args.device)
        default = args.default_threshold or DEFAULTS[mode]
        flagged = (_ab if mode == "ab" else _stored)(args, limits, default)
    except Unusable as exc:
        print(f"unusable input: {exc}", file=sys.stderr)
        return 2
    if flagged is None:
        print("\nverdict: no baseline (measured one)")
        return 0
    print(f"\nverdict: {'REGRESSION in ' + ', '.join(flagged) if flagged else 'ok'}")
    return 1 if flagged else 0
