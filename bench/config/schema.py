"""The configuration's schema, as Hydra's ConfigStore holds it (`bench_schema`).

The sweep axes are the shape (batch, seq_len, d_model, num_heads), every knob a declared case
has (bench/registry.py: Knob; its name, default and check come from that declaration), dtype,
device, mode and the filters cases and impls. The schema is built when it is registered, after
the plugins are imported (bench/config/plugins.py), so a plugin's knobs are keys like any other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from bench.registry import BASE_AXES, KNOBS, MODES


@dataclass
class TimingConfig:
    """The one timing-options object: the runner passes it whole to the timer."""

    warmup_s: float = 0.1  # warm-up by time (the first call also compiles)
    min_reps: int = 5
    max_reps: int = 100
    budget_s: float = 0.5  # per (impl, point, mode), after warm-up
    # stop early once the 95% interval of the median is within +-rel_ci of it (the median is
    # known well enough), or once the samples' (p80 - p20) / p50 <= rel_spread; null: never
    rel_ci: float | None = 0.02
    rel_spread: float | None = None
    # torch.set_num_threads: "auto" (the cores less one, less those other processes use when
    # the run starts: bench/run/machine.py), a positive number, or null (torch's default)
    threads: Any = "auto"
    copy_ref: bool = True  # time a copy of each row's modelled bytes in the same group
    # >1: sweep the plan this many times, each pass with 1/passes of the budget and max_reps,
    # pooling each row's samples, so that every median spans the whole run (bench/run/passes.py)
    passes: int = 1
    # a row's time limit in seconds (check and timing; bench/run/watchdog.py), past which it is
    # written as `timeout` and the run goes on; null: 120 s plus 20x the row's modelled time
    row_limit_s: float | None = None
    # keep: freed CPU memory below 1 GiB stays with the process, as a caching allocator keeps
    # it; system: the C library's defaults, fresh pages for big outputs (bench/run/heap.py)
    cpu_heap: str = "keep"


def _list(*values):
    return field(default_factory=lambda: list(values))


# (name, default, help) of every key but the knobs, in the order of --help
KEYS = (
    ("sweep_name", "quick", "the run directory's name (a sweep sets it)"),
    ("batch", _list(1, 8), "batch sizes"),
    ("seq_len", _list(128, 512), "sequence lengths"),
    ("d_model", 256, "model widths (head_dim = d_model / num_heads)"),
    ("num_heads", 4, "attention heads"),
    ("dtype", "float32", "float32, float16, bfloat16"),
    ("device", "auto", "auto (cuda if available, else cpu), cpu, cuda"),
    ("mode", _list("forward", "forward+backward"), ", ".join(MODES)),
    ("cases", "all", "the cases to run (python -m bench --help lists them)"),
    ("impls", "all", "the implementations to run"),
    ("grids", _list(), "[{axis: value, ...}, ...]: sweeps whose cases need other shapes"),
    ("smoke", False, "tiny points (B=1, L=16, D=16): a sweep's plumbing, not its numbers"),
    ("timing", field(default_factory=TimingConfig), "timing.*: warm-up, budget, stops, threads"),
    ("tutorial_timing", False, "also time each encoder the tutorial's way (its section 5.2)"),
    ("calibrate", True, "measure the copy and matmul rates the % columns divide by"),
    ("resume", False, "finish the run in hydra.run.dir"),
    ("retry_timeouts", False, "with resume: measure the rows that timed out again"),
    ("allow_unchecked", False, "rows whose float64 truth could not be computed exit 0"),
    ("report", True, "write report.md and plots at the end (later: python -m bench.report RUN)"),
    ("profile", False, "profile one point instead of sweeping"),
    ("seed", 0, "the inputs' random seed"),
    ("plugins", _list(), "modules or .py files that register implementations and cases"),
)


def axes() -> tuple[str, ...]:
    """The keys a grid may set: the shape, every declared knob, dtype, device, mode, filters."""
    return (*BASE_AXES, *KNOBS, "dtype", "device", "mode", "cases", "impls")


def config_class() -> type:
    """BenchConfig as a dataclass of the keys above and of every knob declared now."""
    fields = []
    for name, default, _help in KEYS[:5]:
        fields.append(
            (
                name,
                Any,
                default if isinstance(default, dataclasses.Field) else field(default=default),
            )
        )
    for knob in KNOBS.values():
        fields.append((knob.name, Any, field(default=knob.default)))
    for name, default, _help in KEYS[5:]:
        kind = TimingConfig if name == "timing" else Any
        fields.append(
            (
                name,
                kind,
                default if isinstance(default, dataclasses.Field) else field(default=default),
            )
        )
    return dataclasses.make_dataclass("BenchConfig", fields)


def register() -> type:
    """Stores the schema (with the knobs declared so far) as Hydra's `bench_schema`."""
    cls = config_class()
    ConfigStore.instance().store(name="bench_schema", node=cls)
    return cls
