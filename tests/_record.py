"""A pytest plugin (tests/conftest.py loads it): at the end of a session, what it ran, in
pytest's cache (.pytest_cache/v/posenc-bench/run): the tests that passed and failed, the wall
time, the cores, the commit and whether the tree had changes, and whether it ran the whole suite
as `make test` does. `python -m tools.figures --record-tests` turns a clean, whole, passing one into
results/reference/tests.json, the README's test count and time."""

import os
import platform
import subprocess
import time
from pathlib import Path

import torch

KEY = "posenc-bench/run"
MAKE_TEST_MARKS = "not rehearsal"  # the Makefile's `make test` selection


_START = [time.monotonic()]


def pytest_sessionstart(session):
    _START[0] = time.monotonic()


def _git(root: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def _whole_suite(config) -> bool:
    """Every test of tests/ under make test's marks: no paths narrower than tests/, no -k, no
    deselection, no last-failed."""
    here = config.invocation_params.dir
    paths = {(here / a.split("::")[0]).resolve() for a in config.args}
    o = config.option
    return (
        paths <= {(config.rootpath / "tests").resolve(), config.rootpath.resolve()}
        and not any("::" in a for a in config.args)
        and not o.keyword
        and o.markexpr == MAKE_TEST_MARKS
        and not o.deselect
        and not getattr(o, "lf", False)
    )


def record(config, exitstatus: int, seconds: float) -> dict:
    stats = config.pluginmanager.get_plugin("terminalreporter").stats
    root = config.rootpath
    return {
        "commit": _git(root, "rev-parse", "--short=7", "HEAD"),
        "dirty": bool(_git(root, "status", "--porcelain")),
        "passed": len(stats.get("passed", [])),
        "failed": len(stats.get("failed", [])) + len(stats.get("error", [])),
        "exitstatus": int(exitstatus),
        "seconds": round(seconds),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "whole_suite": _whole_suite(config),
    }


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    if hasattr(config, "workerinput") or cache is None:  # an xdist worker reports to the main
        return
    cache.set(KEY, record(config, exitstatus, time.monotonic() - _START[0]))
