"""What one run measures: a Plan of Entries (a case over its points, dtypes, devices and
modes). A leaf: the configuration makes plans (bench/config/plan.py), the runner sweeps them
(bench/run), the estimates count them (bench/run/eta.py, tools/gpurun), and none of those
packages imports another for it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from bench.registry import Point


@dataclass(frozen=True)
class Entry:
    """One case over its points, dtypes, devices and modes, with the impls it runs."""

    case: str
    impls: tuple[str, ...]
    points: tuple[Point, ...]
    dtypes: tuple[str, ...]
    devices: tuple[str, ...]
    modes: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    entries: tuple[Entry, ...]

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.case for e in self.entries))

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for e in self.entries for d in e.devices))

    def rows(self, devices: tuple[str, ...] | None = None) -> int:
        """Distinct rows (grids may overlap), on `devices` only if given."""
        keys = {
            (e.case, i, m, d, t, p)
            for e in self.entries
            for i, m, t, p in itertools.product(e.impls, e.modes, e.dtypes, e.points)
            for d in e.devices
            if devices is None or d in devices
        }
        return len(keys)
