"""make test's record: tests/_record.py leaves each session's summary in pytest's cache;
`python -m tools.figures --record-tests` keeps a whole, passing run of a committed tree as
results/reference/tests.json, which the README's test count and time are written from."""

from __future__ import annotations

import json

from tools.figures import sources
from tools.figures.readme import tests_line

LAST_RUN = sources.ROOT / ".pytest_cache" / "v" / "posenc-bench" / "run"  # tests/_record.py's


def record_tests() -> str:
    """results/reference/tests.json from the last `make test`: refused in one line unless it
    ran every test of the suite, all passed, on a tree with no change."""
    if not LAST_RUN.exists():
        return (
            f"no record of a test run ({LAST_RUN.relative_to(sources.ROOT)}): run make test first"
        )
    run = json.loads(LAST_RUN.read_text())
    checks = (
        (not run["whole_suite"], "it did not run the whole suite as make test does"),
        (run["failed"], f"{run['failed']} tests failed"),
        (run["dirty"], "its tree had uncommitted changes"),
    )
    why = next((reason for failed, reason in checks if failed), "")
    if why:
        return f"not recorded: {why}"
    keep = ("commit", "passed", "seconds", "cores", "python", "torch")
    sources.TESTS.write_text(json.dumps({k: run[k] for k in keep}, indent=2) + "\n")
    return f"recorded {sources.TESTS.relative_to(sources.ROOT)}: {tests_line()}"
