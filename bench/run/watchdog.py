"""A time limit per row: a thread that notices a row stuck past its limit (a call that never
returns: a deadlock, a kernel spinning, a compile or a float64 truth that hangs) and hands the
rows in flight to `on_timeout`, which writes them as `timeout` and goes on (the command line's
restarts the run in a fresh process, resuming: bench/__main__.py).

Why a thread and a restart rather than a worker process per row: the timed calls run in the
process as they always do (no pickling of inputs, no second CUDA context, no cost on a sample:
a phase is marked once per check, group or truth, never per timed call), and only a row that
times out pays, with one process start. A call stuck in compiled code cannot be interrupted
from Python; replacing the process stops it whatever it is doing.

The runner marks phases (`phase`): building a point's inputs, its float64 truth, one
implementation's check, a side-by-side group's timing (`running` names the implementation
being warmed up or sampled), the layer share's profile. Each phase is armed with the limit of
its rows: a group of n rows gets n times a row's limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

POLL_S = 0.25  # how often the thread looks: a timeout is noticed within this of its limit


class Watchdog:
    """on_timeout(rows, what, limit_s): rows is [(task, row fields)] of the phase (in a timing
    phase, only the implementation running); called once, from the watchdog's thread."""

    def __init__(self, on_timeout: Callable[[list, str, float], None], poll_s: float = POLL_S):
        self.on_timeout, self.poll_s = on_timeout, poll_s
        self._stack: list[list] = []  # [rows, what, deadline, limit_s, running impl]
        self._lock = threading.Lock()
        self.fired = False
        self._thread = threading.Thread(target=self._watch, name="row-watchdog", daemon=True)
        self._thread.start()

    @contextmanager
    def phase(self, rows: list, what: str, limit_s: float):
        """Marks the rows as in flight while the block runs, for at most limit_s seconds."""
        entry = [rows, what, time.monotonic() + limit_s, limit_s, None]
        with self._lock:
            self._stack.append(entry)
        try:
            yield
        finally:
            with self._lock:
                self._stack.remove(entry)

    def running(self, impl: str) -> None:
        """The implementation the innermost phase is running now (a timing group's)."""
        with self._lock:
            if self._stack:
                self._stack[-1][4] = impl

    def _watch(self) -> None:
        while not self.fired:
            time.sleep(self.poll_s)
            with self._lock:  # the innermost phase is what runs now (a truth inside a check)
                if not self._stack or time.monotonic() <= self._stack[-1][2]:
                    continue
                rows, what, _, limit, impl = self._stack[-1]
                self.fired = True
            stuck = [r for r in rows if impl is None or r[0].impl == impl] or rows
            where = f"{what} of {impl}" if impl else what
            self.on_timeout(stuck, where, limit)


class NoWatchdog:
    """No limit (the runner's default outside the command line)."""

    @contextmanager
    def phase(self, rows: list, what: str, limit_s: float):
        yield

    def running(self, impl: str) -> None:
        pass
