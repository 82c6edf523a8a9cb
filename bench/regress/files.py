"""The gate's inputs: pytest-benchmark JSON files of bench/regress/suite.py, read and checked.

Every case round is divided by the round of its anchor timed just before it (a frozen eager
formula of the same work, see the suite), so that a machine faster or slower as a whole, or
for a moment, cancels out. A file with a timing that is not a positive finite number, or with
no rounds at all, is refused rather than judged: a NaN compares false with every threshold and
would read as "ok".
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

SUITE_FILE = "bench/regress/suite.py"
STACK = ("gpu", "torch", "triton")  # what a GPU suite's rounds are keyed by (suite.stack)
MIN_BLOCKS = 3  # fewer blocks than this: test the pooled rounds instead


class Unusable(Exception):
    """Input that cannot be judged: one line, exit code 2."""


def check_times(times, where: str) -> list[float]:
    """times as floats, or Unusable naming `where`: empty, NaN, infinite or not positive."""
    if not isinstance(times, list) or not times:
        raise Unusable(f"{where}: no timings")
    bad = [t for t in times if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0]
    if bad:
        raise Unusable(f"{where}: timing {bad[0]!r} is not a positive finite number of seconds")
    return [float(t) for t in times]


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


def _series(rounds: dict[int, list[float]], anchors: dict[int, list[float]] | None) -> Series:
    raw = [t for _, r in sorted(rounds.items()) for t in r]
    if anchors is None:
        return Series(rounds, raw)
    blocks = {b: [t / a for t, a in zip(r, anchors[b], strict=True)] for b, r in rounds.items()}
    return Series(blocks, raw)


def _read(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
        data["benchmarks"]
    except FileNotFoundError:
        raise Unusable(f"{path}: no such file") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise Unusable(f"{path}: not a pytest-benchmark JSON file ({exc})") from None
    if not data["benchmarks"]:
        raise Unusable(f"{path}: no benchmarks")
    return data


def load(path: Path) -> dict:
    """{"cases": {case-mode: Series}, "calibrations": {name: Series}, suite, threads, machine}."""
    data = _read(path)
    rounds: dict[tuple[str, str], dict[int, list[float]]] = {}
    anchors: dict[str, dict[int, list[float]]] = {}
    suites, threads, stacks = set(), set(), set()
    for bench in data["benchmarks"]:
        info, name = bench.get("extra_info", {}), bench.get("name")
        if not {"case", "kind", "suite", "repeat"} <= set(info):
            raise Unusable(f"{path}: benchmark {name} is not from {SUITE_FILE}")
        if "data" not in bench.get("stats", {}):
            raise Unusable(f"{path}: no round data (run pytest with --benchmark-save-data)")
        times = check_times(bench["stats"]["data"], f"{path}: {name}")
        suites.add(info["suite"])
        threads.add(info.get("threads"))
        stacks.add(tuple(info.get(k) for k in STACK))
        kind, block = info["kind"], int(info["repeat"])
        key = info["case"] if kind == "calibration" else f"{info['case']}-{info['mode']}"
        rounds.setdefault((kind, key), {})[block] = times
        if kind == "case":
            anchor = check_times(info.get("anchor"), f"{path}: {name}'s anchor")
            if len(anchor) != len(times):
                raise Unusable(f"{path}: {name} lacks one anchor time per round")
            anchors.setdefault(key, {})[block] = anchor
    if len(suites) != 1:
        raise Unusable(f"{path}: mixes suites {sorted(suites)}")
    if len(stacks) != 1:
        raise Unusable(f"{path}: mixes GPUs or versions {sorted(stacks, key=str)}")
    cases = {k: _series(r, anchors[k]) for (kind, k), r in rounds.items() if kind == "case"}
    calibs = {k: _series(r, None) for (kind, k), r in rounds.items() if kind == "calibration"}
    return {
        "cases": cases,
        "calibrations": calibs,
        "suite": suites.pop(),
        "threads": threads.pop() if len(threads) == 1 else sorted(threads, key=str),
        "machine": data.get("machine_info", {}),
        "commit": data.get("commit_info", {}),
        "stack": dict(zip(STACK, stacks.pop(), strict=True)),
    }


def cpu(machine: dict) -> str | None:
    return machine.get("cpu", {}).get("brand_raw")


def check_comparable(base: dict, cur: dict) -> None:
    """Stored-baseline mode compares two files only when they come from one suite and one kind
    of machine: timings of different CPUs do not compare, anchors or not (a 2-core VM's Shaw
    backward read 71% faster on another CPU model, no code changed)."""
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
    if base["stack"] != cur["stack"]:
        said = [", ".join(f"{k} {v}" for k, v in f["stack"].items()) for f in (base, cur)]
        raise Unusable(
            f"baseline measured with {said[0]}, this run with {said[1]}: a kernel's speed "
            "changes with each; make regress-update DEVICE=cuda, or compare two commits here "
            "(make regress BASE=<ref> DEVICE=cuda)"
        )
    if not base["stack"].get("gpu") and cpu(base["machine"]) != cpu(cur["machine"]):
        raise Unusable(
            f"baseline measured on {cpu(base['machine'])}, this run on {cpu(cur['machine'])}: "
            "compare two commits here (make regress BASE=<ref>) or make regress-update"
        )
