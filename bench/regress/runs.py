"""The stored-baseline mode's runs of the suite: one pytest process per block, merged.

A process of unchanged code can read a case up to 20% off another's for its whole life
(bench.regress.suite), so the REPEATS blocks of a run are REPEATS processes, run one after the
other, and their pytest-benchmark JSON files are merged into one (the first file's machine and
commit information, every file's benchmarks, in block order). `make regress-update` measures the
baseline this same way, so a baseline and a current run are taken alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.regress import suite
from bench.regress.files import SUITE_FILE, Unusable


def _block(block: int, out: Path, log, slowdown: str | None, device: str) -> None:
    ids = [i for i in suite.ids(device) if i.startswith(f"r{block}-")]
    cmd = [sys.executable, "-m", "pytest", *(f"{SUITE_FILE}::test_perf[{i}]" for i in ids)]
    cmd += ["--benchmark-only", "-q", "-p", "no:cacheprovider", "--benchmark-save-data"]
    cmd += [f"--benchmark-json={out}"] + ([f"--perf-slowdown={slowdown}"] if slowdown else [])
    env = dict(os.environ, **{suite.DEVICE_ENV: device})
    code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if code != 0:
        raise Unusable(f"the suite failed in block {block} (exit {code}); its log: {log.name}")


def run_suite(out: Path, log: Path, slowdown: str | None = None, device: str = "cpu") -> None:
    """Every block of the suite on `device`, each in a process of its own, into one JSON file
    at out; the processes' pytest output into log."""
    out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    merged: dict | None = None
    with tempfile.TemporaryDirectory() as tmp, log.open("w") as sink:
        for block in range(suite.REPEATS):
            part = Path(tmp) / f"r{block}.json"
            _block(block, part, sink, slowdown, device)
            data = json.loads(part.read_text())
            if merged is None:
                merged = data
            else:
                merged["benchmarks"] += data["benchmarks"]
    out.write_text(json.dumps(merged, indent=1))
