"""What the rest of the machine is doing while a row is timed: the CPU time other processes take
(and, on a VM, the time the hypervisor gives to other guests: steal), from /proc/stat, next to
this process's own CPU time. A figure measured while others held the CPU is marked.

Why this and not the process's CPU use alone: torch's OpenMP threads spin while they wait for
each other, so a process whose thread was descheduled by a neighbour still shows high CPU use
while doing no work. Measured on this project's 2-core VM (docs/harness.md, "Measured under
contention"): RoPE forward at L=512 took 1.64 ms with 2 threads idle and 8.8 ms with 2 threads
beside one spinning process (5.4x), while 1 thread went from 5.3 to 5.6 ms; the process's CPU
use stayed at 1.24 cores. Others' CPU time sees that neighbour as a whole core.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from bench.results import CONTENDED_CORES

HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Snapshot:
    busy_s: float  # the whole machine's non-idle CPU seconds (steal included), since boot
    own_s: float  # this process's CPU seconds (all its threads)
    wall_s: float


def snapshot() -> Snapshot | None:
    """None where /proc/stat cannot be read (not Linux): then nothing is marked."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest is already inside user)
    ticks = [int(v) for v in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    own = os.times()
    return Snapshot(busy / HZ, own.user + own.system, time.monotonic())


def others_cores(before: Snapshot | None, after: Snapshot | None) -> float | None:
    """Cores' worth of CPU that other processes (and other guests) took between two snapshots:
    the machine's busy time less this process's, over the wall time. Ticks are 10 ms, so a
    window under about half a second is coarse; None without both snapshots."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    busy = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, busy / (after.wall_s - before.wall_s))


class Monitor:
    """Others' cores over windows of at least MIN_WINDOW_S: /proc/stat counts in 10 ms ticks,
    so a group timed in a few milliseconds is measured over the last half second (the time
    around it) rather than over its own instant."""

    MIN_WINDOW_S = 0.5

    def __init__(self):
        self.marks: list[Snapshot] = []

    def mark(self) -> None:
        now = snapshot()
        if now is not None:
            self.marks.append(now)
            cut = next(
                (
                    i
                    for i, m in enumerate(self.marks)
                    if now.wall_s - m.wall_s < 4 * self.MIN_WINDOW_S
                ),
                0,
            )
            del self.marks[: max(0, cut - 1)]

    def others(self) -> float | None:
        """Others' cores from the latest mark at least MIN_WINDOW_S old (else the oldest) to
        now; marks now."""
        self.mark()
        if len(self.marks) < 2:
            return None
        end = self.marks[-1]
        start = next(
            (m for m in reversed(self.marks[:-1]) if end.wall_s - m.wall_s >= self.MIN_WINDOW_S),
            self.marks[0],
        )
        if end.wall_s - start.wall_s < self.MIN_WINDOW_S / 2:  # too few ticks to tell: unknown
            return None
        return others_cores(start, end)


def others_now(seconds: float = 0.3) -> float | None:
    """Others' cores over the next `seconds` (this process idle meanwhile)."""
    before = snapshot()
    time.sleep(seconds)
    return others_cores(before, snapshot())


def auto_threads(cores: int, others: float | None) -> int:
    """The default thread count: the cores less one (left to the OS and to a neighbour that
    starts mid-run) less those others already use, at least 1. A parallel region waits for its
    slowest thread, so one thread short of a core stalls the whole region for a scheduler
    quantum: fewer threads than cores never collapses (the measurement above)."""
    if cores <= 1:
        return 1
    busy = math.ceil(others - CONTENDED_CORES) if others and others > CONTENDED_CORES else 0
    return max(1, cores - 1 - busy)


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
