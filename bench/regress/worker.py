"""One side of an A/B timing run (bench.regress.ab): the suite's case-modes timed on request.

Started by bench.regress.ab as `python -c BOOT LIBRARY TREE [SLOWDOWN]`: LIBRARY's posenc and
posenc_kernels come first on sys.path, TREE's bench next, so that the side of the base commit
runs that commit's library under the working tree's suite and harness (one suite times both).
Requests are JSON lines on stdin, answers JSON lines on the stdout the process started with;
anything else printed goes to stderr, so that a stray print cannot corrupt an answer.

    {"op": "hello"}                -> {"files": {package: its __init__}, "cpus": [pinned to]}
    {"op": "time", "case": c, "mode": m, "rounds": n}
                                   -> {"times": [s, ...]} (after WARMUP untimed calls)
    {"op": "modules"}              -> {"files": {module: file}} of our packages
"""

from __future__ import annotations

import json
import os
import sys
import time

# sys.path[:0] = [LIBRARY, TREE]; then this module runs as __main__
BOOT = (
    "import sys, runpy; sys.path[:0] = sys.argv[1:3]; runpy.run_module({!r}, run_name='__main__')"
)
PACKAGES = ("posenc", "posenc_kernels", "bench")
WARMUP = 5  # untimed calls before each request's rounds: a fresh process's first calls run slow


def _ours() -> dict[str, str]:
    """Every loaded module of our packages, with its file: what the driver checks for mixing."""
    return {
        name: getattr(mod, "__file__", None) or ""
        for name, mod in list(sys.modules.items())
        if name.split(".")[0] in PACKAGES
    }


class _Works:
    """The suite's zero-argument calls, built once per case-mode (inputs and all)."""

    def __init__(self, slowdown: str | None):
        from bench.regress import suite

        suite.prepare()
        self.suite, self.slowdown, self.built = suite, slowdown, {}

    def time(self, case: str, mode: str, rounds: int) -> list[float]:
        key = (case, mode)
        if key not in self.built:
            self.built[key] = self.suite.work(case, mode, self.slowdown)
        call = self.built[key]
        for _ in range(WARMUP):
            call()
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return times


def serve(requests, answer, slowdown: str | None) -> None:
    works = _Works(slowdown)
    for line in requests:
        req = json.loads(line)
        if req["op"] == "hello":
            files, cpus = _ours(), sorted(os.sched_getaffinity(0))
            answer({"files": {p: files.get(p, "") for p in PACKAGES}, "cpus": cpus})
        elif req["op"] == "time":
            answer({"times": works.time(req["case"], req["mode"], int(req["rounds"]))})
        elif req["op"] == "modules":
            answer({"files": _ours()})
        else:
            answer({"error": f"unknown request {req['op']!r}"})


def main() -> None:
    out = os.fdopen(os.dup(1), "w")  # the answers' channel; fd 1 now goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    slowdown = sys.argv[3] if len(sys.argv) > 3 else None  # the suite's --perf-slowdown
    serve(sys.stdin, answer, slowdown)
    out.flush()
    os._exit(0)  # skips torch's teardown (over a second), which nothing here needs


if __name__ == "__main__":
    main()
