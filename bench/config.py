"""Structured config (Hydra ConfigStore schema) and its validation into a Plan.

Sweep axes (batch, seq_len, d_model, num_heads, dtype, device, mode, cases, impls) accept a
scalar or a list: a Hydra multirun (`-m batch=1,8`) gives each job a scalar, a single run takes
lists (`batch=[1,8]`). Everything is checked before anything runs; errors name the key.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch
from hydra.core.config_store import ConfigStore

from bench.cases import CASES
from bench.registry import Point

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MODES = ("forward", "backward", "forward+backward")


@dataclass
class TimingConfig:
    warmup_s: float = 0.1  # warm-up by time (the first call also compiles)
    min_reps: int = 5
    max_reps: int = 100
    budget_s: float = 0.5  # per (impl, point, mode), after warm-up
    # stop early once the 95% interval of the median is within +-rel_ci of it (the median is
    # known well enough), or once the samples' (p80 - p20) / p50 <= rel_spread; null: never
    rel_ci: float | None = 0.02
    rel_spread: float | None = None
    threads: int | None = None  # torch.set_num_threads on the CPU (None: torch's default)
    copy_ref: bool = True  # time a copy of each row's modelled bytes in the same group
    # >1: sweep the plan this many times, each pass with 1/passes of the budget and max_reps,
    # pooling each row's samples, so that every median spans the whole run (bench/runner.py)
    passes: int = 1


@dataclass
class BenchConfig:
    sweep_name: str = "quick"
    batch: Any = field(default_factory=lambda: [1, 8])
    seq_len: Any = field(default_factory=lambda: [128, 512])
    d_model: Any = 256
    num_heads: Any = 4
    dtype: Any = "float32"
    device: Any = "auto"  # "auto": cuda if available, else cpu
    mode: Any = field(default_factory=lambda: ["forward", "forward+backward"])
    cases: Any = "all"
    impls: Any = "all"
    timing: TimingConfig = field(default_factory=TimingConfig)
    tutorial_timing: bool = False  # also time each encoder the tutorial's way (5.2)
    calibrate: bool = True
    resume: bool = False
    profile: bool = False
    seed: int = 0


def register() -> None:
    ConfigStore.instance().store(name="bench_schema", node=BenchConfig)


@dataclass(frozen=True)
class Plan:
    cases: tuple[str, ...]
    impls: tuple[str, ...] | None  # None: every impl of each case
    points: tuple[Point, ...]
    dtypes: tuple[str, ...]
    devices: tuple[str, ...]
    modes: tuple[str, ...]


def _as_list(value) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    try:  # omegaconf ListConfig
        return list(value) if not isinstance(value, (str, int, float)) else [value]
    except TypeError:
        return [value]


def _positive_ints(cfg, key: str) -> list[int]:
    values = _as_list(cfg[key])
    if not values:
        raise ValueError(f"{key}: at least one value is needed")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{key}: every value must be a positive integer, got {v!r}")
    return values


def _choices(cfg, key: str, allowed) -> list[str]:
    values = [str(v) for v in _as_list(cfg[key])]
    if values == ["all"]:
        return list(allowed)
    for v in values:
        if v not in allowed:
            raise ValueError(f"{key}: unknown value {v!r}; choose from {', '.join(allowed)}")
    return values


def make_plan(cfg) -> Plan:
    """Validates the whole config; raises ValueError naming the offending key."""
    batch, seq_len = _positive_ints(cfg, "batch"), _positive_ints(cfg, "seq_len")
    d_model, heads = _positive_ints(cfg, "d_model"), _positive_ints(cfg, "num_heads")
    for d, h in itertools.product(d_model, heads):
        if d % h:
            raise ValueError(f"d_model={d} is not divisible by num_heads={h}")
    cases = _choices(cfg, "cases", list(CASES))
    all_impls = sorted({name for c in cases for name in CASES[c].impls})
    impls = None if _as_list(cfg["impls"]) == ["all"] else tuple(_choices(cfg, "impls", all_impls))
    devices = [str(v) for v in _as_list(cfg["device"])]
    if devices == ["auto"]:
        devices = ["cuda" if torch.cuda.is_available() else "cpu"]
    for v in devices:
        if v not in ("cpu", "cuda"):
            raise ValueError(f"device: unknown value {v!r}; choose from cpu, cuda, auto")
    t = cfg["timing"]
    if t["min_reps"] < 1 or t["max_reps"] < t["min_reps"] or t["budget_s"] < 0:
        raise ValueError("timing: need 1 <= min_reps <= max_reps and budget_s >= 0")
    if isinstance(t["passes"], bool) or not isinstance(t["passes"], int) or t["passes"] < 1:
        raise ValueError(f"timing.passes: must be a positive integer, got {t['passes']!r}")
    for key in ("rel_ci", "rel_spread"):
        if t[key] is not None and not t[key] > 0:
            raise ValueError(f"timing.{key}: must be positive or null (no early stop), "
                             f"got {t[key]!r}")  # fmt: skip
    points = tuple(Point(*p) for p in itertools.product(batch, seq_len, d_model, heads))
    return Plan(
        cases=tuple(cases), impls=impls, points=points,
        dtypes=tuple(_choices(cfg, "dtype", list(DTYPES))), devices=tuple(devices),
        modes=tuple(_choices(cfg, "mode", list(MODES))),
    )  # fmt: skip
