"""Structured config (Hydra ConfigStore schema) and its validation into a Plan.

Sweep axes (batch, seq_len, d_model, num_heads, the knobs num_kv_heads, layout, causal,
fwd_tiles, bwd_tiles, and dtype, device, mode, cases, impls) accept a scalar or a list: a Hydra
multirun (`-m batch=1,8`) gives each job a scalar, a single run takes lists (`batch=[1,8]`).
A sweep whose cases need different shapes lists `grids`: each grid overrides some axes, and the
plan is the union of the grids' products. An axis set on the command line (`pinned`) wins over
every grid's (`sweep=gpu seq_len=2048`), except `cases` and `impls`, which filter what the grids
list (`sweep=gpu cases=[rope]`). `smoke=true` shrinks every point to a tiny one (B=1,
L=16, 24, ..., D=16, the heads kept) to test a sweep's plumbing, e.g. on the CPU interpreter.
Everything is checked before anything runs; errors name the key (`grids[1].seq_len: ...`).
"""

from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from bench.cases import CASES
from bench.cases.rope import SCALINGS
from bench.registry import KNOBS, Point
from bench.tiles import parse_tiles

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MODES = ("forward", "backward", "forward+backward")
LAYOUTS = ("bhsd", "bshd")
AXES = (
    "batch",
    "seq_len",
    "d_model",
    "num_heads",
    *KNOBS,
    "dtype",
    "device",
    "mode",
    "cases",
    "impls",
)


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
    # torch.set_num_threads: "auto" (the cores less one, less those other processes use when
    # the run starts: bench/machine.py), a positive number, or null (torch's default)
    threads: Any = "auto"
    copy_ref: bool = True  # time a copy of each row's modelled bytes in the same group
    # >1: sweep the plan this many times, each pass with 1/passes of the budget and max_reps,
    # pooling each row's samples, so that every median spans the whole run (bench/passes.py)
    passes: int = 1


@dataclass
class BenchConfig:
    sweep_name: str = "quick"
    batch: Any = field(default_factory=lambda: [1, 8])
    seq_len: Any = field(default_factory=lambda: [128, 512])
    d_model: Any = 256
    num_heads: Any = 4
    num_kv_heads: Any = None  # null: as many as num_heads (cases with GQA: rope)
    layout: Any = "bhsd"  # bhsd or bshd memory order of (B, H, L, D) tensors (rope)
    causal: Any = False  # the attention cases with a relative bias
    fwd_tiles: Any = "default"  # the Triton attention kernel's tiles: MxNxWARPSxSTAGES
    bwd_tiles: Any = "default"
    rope_scaling: Any = "none"  # RoPE's long-context schedule (rope, rope_tables): none, yarn...
    dtype: Any = "float32"
    device: Any = "auto"  # "auto": cuda if available, else cpu
    mode: Any = field(default_factory=lambda: ["forward", "forward+backward"])
    cases: Any = "all"
    impls: Any = "all"
    grids: Any = field(default_factory=list)  # [{axis: value, ...}, ...]: see the docstring
    smoke: bool = False  # tiny points (B=1, L=16, D=16): a sweep's plumbing, not its numbers
    timing: TimingConfig = field(default_factory=TimingConfig)
    tutorial_timing: bool = False  # also time each encoder the tutorial's way (5.2)
    calibrate: bool = True
    resume: bool = False
    profile: bool = False
    seed: int = 0


def register() -> None:
    ConfigStore.instance().store(name="bench_schema", node=BenchConfig)


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


def changed_since(saved_path: Path, cfg, free: tuple[str, ...]) -> str | None:
    """How cfg differs from the config saved at saved_path, outside the keys in `free`
    ("key: old -> new, ..."), or None: what a resumed run (the harness's, the probe's) refuses."""
    if not saved_path.exists():
        return None
    saved = OmegaConf.to_container(OmegaConf.load(saved_path))
    now = OmegaConf.to_container(cfg)
    changed = [
        k for k in sorted(set(saved) | set(now)) if k not in free and saved.get(k) != now.get(k)
    ]
    if not changed:
        return None
    return ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed[:4])


def _as_list(value) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return [value]
    try:  # omegaconf ListConfig
        return list(value)
    except TypeError:
        return [value]


def _positive_ints(value, key: str, allow_none: bool = False) -> list:
    values = _as_list(value)
    if not values:
        raise ValueError(f"{key}: at least one value is needed")
    for v in values:
        if v is None and allow_none:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{key}: every value must be a positive integer, got {v!r}")
    return values


def _choices(value, key: str, allowed) -> list[str]:
    values = [str(v) for v in _as_list(value)]
    if values == ["all"]:
        return list(allowed)
    if not values:
        raise ValueError(f"{key}: at least one value is needed")
    for v in values:
        if v not in allowed:
            close = difflib.get_close_matches(v, list(allowed), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ValueError(f"{key}: unknown value {v!r}; {hint}choose from {', '.join(allowed)}")
    return values


def _bools(value, key: str) -> list[bool]:
    values = _as_list(value)
    for v in values:
        if not isinstance(v, bool):
            raise ValueError(f"{key}: every value must be true or false, got {v!r}")
    return values


def _tiles(value, key: str) -> list[str]:
    values = [str(v) for v in _as_list(value)]
    for v in values:
        try:
            parse_tiles(v)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{key}: {str(exc).removeprefix('tiles.')}") from None
    return values


def _devices(value, key: str) -> list[str]:
    devices = [str(v) for v in _as_list(value)]
    if devices == ["auto"]:
        return ["cuda" if torch.cuda.is_available() else "cpu"]
    for v in devices:
        if v not in ("cpu", "cuda"):
            raise ValueError(f"{key}: unknown value {v!r}; choose from cpu, cuda, auto")
    return devices


def _check_timing(t) -> None:
    if t["min_reps"] < 1 or t["max_reps"] < t["min_reps"] or t["budget_s"] < 0:
        raise ValueError("timing: need 1 <= min_reps <= max_reps and budget_s >= 0")
    if isinstance(t["passes"], bool) or not isinstance(t["passes"], int) or t["passes"] < 1:
        raise ValueError(f"timing.passes: must be a positive integer, got {t['passes']!r}")
    threads = t["threads"]
    if threads not in ("auto", None) and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(f"timing.threads: auto, a positive integer or null, got {threads!r}")
    for key in ("rel_ci", "rel_spread"):
        if t[key] is not None and not t[key] > 0:
            raise ValueError(
                f"timing.{key}: must be positive or null (no early stop), got {t[key]!r}"
            )


def _knob_values(axes: dict, name) -> dict[str, list]:
    return {
        "num_kv_heads": _positive_ints(axes["num_kv_heads"], name("num_kv_heads"), True),
        "layout": _choices(axes["layout"], name("layout"), LAYOUTS),
        "causal": _bools(axes["causal"], name("causal")),
        "fwd_tiles": _tiles(axes["fwd_tiles"], name("fwd_tiles")),
        "bwd_tiles": _tiles(axes["bwd_tiles"], name("bwd_tiles")),
        "rope_scaling": _choices(axes["rope_scaling"], name("rope_scaling"), SCALINGS),
    }


def _smoke(axes: dict) -> dict:
    """Tiny points with the same heads (GQA ratios kept): B=1, D=16, and the lengths, in their
    order, 16, 24, 32, ... (distinct lengths stay distinct)."""
    heads = min(_positive_ints(axes["num_heads"], "num_heads"))
    lengths = sorted(set(_positive_ints(axes["seq_len"], "seq_len")))
    return dict(
        axes,
        batch=1,
        seq_len=[16 + 8 * i for i in range(len(lengths))],
        num_heads=heads,
        d_model=16 * heads,
    )


def _entries(axes: dict, name, filters: dict) -> list[Entry]:
    """The entries of one grid (or of the whole config when it has no grids); name(axis) is
    the key an error names (grids[i].axis for a value the grid set)."""
    batch = _positive_ints(axes["batch"], name("batch"))
    seq_len = _positive_ints(axes["seq_len"], name("seq_len"))
    d_model = _positive_ints(axes["d_model"], name("d_model"))
    heads = _positive_ints(axes["num_heads"], name("num_heads"))
    for d, h in itertools.product(d_model, heads):
        if d % h:
            raise ValueError(f"{name('d_model')}={d} is not divisible by {name('num_heads')}={h}")
    knobs = _knob_values(axes, name)
    for kv, h in itertools.product(knobs["num_kv_heads"], heads):
        if kv is not None and h % kv:
            raise ValueError(f"{name('num_kv_heads')}={kv} does not divide {name('num_heads')}={h}")
    cases = _choices(axes["cases"], name("cases"), list(CASES))
    cases = [c for c in cases if filters["cases"] is None or c in filters["cases"]]
    wanted = _impls(axes["impls"], name("impls"))
    if filters["impls"] is not None:
        wanted = [i for i in wanted or filters["impls"] if i in filters["impls"]]
    dtypes = tuple(_choices(axes["dtype"], name("dtype"), list(DTYPES)))
    devices = tuple(_devices(axes["device"], name("device")))
    modes = tuple(_choices(axes["mode"], name("mode"), list(MODES)))
    base = list(itertools.product(batch, seq_len, d_model, heads))
    entries = []
    for name in cases:
        case = CASES[name]
        impls = tuple(i for i in case.impls if wanted is None or i in wanted)
        if not impls:  # the chosen impls are other cases': this case has nothing to run
            continue
        own = [knobs[k] for k in case.knobs]
        points = tuple(
            Point(*p, **dict(zip(case.knobs, values, strict=True)))
            for p in base
            for values in itertools.product(*own)
        )
        entries.append(Entry(name, impls, points, dtypes, devices, modes))
    return entries


def _impls(value, key: str) -> list[str] | None:
    """None for "all"; else the names, each one some case's (a name no case has is a typo)."""
    if _as_list(value) == ["all"]:
        return None
    known = sorted({name for c in CASES.values() for name in c.impls})
    return _choices(value, key, known)


def make_plan(cfg, pinned: frozenset[str] = frozenset()) -> Plan:
    """Validates the whole config; raises ValueError naming the offending key. pinned: the
    axes the command line set (they win over the grids')."""
    _check_timing(cfg["timing"])
    base = {axis: cfg[axis] for axis in AXES}
    grids = _as_list(cfg["grids"]) if cfg["grids"] else []
    filters = {"cases": None, "impls": None}
    if grids:  # the top level filters what the grids list
        top = _choices(cfg["cases"], "cases", list(CASES))
        filters = {
            "cases": None if top == list(CASES) else top,
            "impls": _impls(cfg["impls"], "impls"),
        }
    entries = []
    for i, grid in enumerate(grids or [{}]):
        prefix = f"grids[{i}]." if grids else ""
        if not hasattr(grid, "keys"):
            raise ValueError(f"grids[{i}]: expected a mapping of axes, got {grid!r}")
        unknown = [k for k in grid if k not in AXES]
        if unknown:
            raise ValueError(f"{prefix}{unknown[0]}: not an axis; choose from {', '.join(AXES)}")
        own = {k: v for k, v in dict(grid).items() if k not in pinned or k in ("cases", "impls")}
        axes = {**base, **own}

        def name(axis, own=own, prefix=prefix):
            return prefix + axis if axis in own else axis

        entries += _entries(_smoke(axes) if cfg["smoke"] else axes, name, filters)
    if not entries:
        raise ValueError("impls: none of the chosen implementations belongs to a chosen case")
    return Plan(tuple(entries))


def unrunnable(plan: Plan) -> str | None:
    """Why no row of the plan can run on this machine (None if one can): every device it asks
    for is missing, no point fits a case, or every implementation lacks this device."""
    from bench.eta import timed_rows

    here = [d for d in plan.devices if d != "cuda" or torch.cuda.is_available()]
    if not here:
        return (
            f"device={','.join(plan.devices)}: CUDA is not available on this machine, so "
            "nothing would run (pass device=cpu, or run this sweep on a GPU)"
        )
    for entry in plan.entries:  # a case none of whose points applies: a configuration error
        whys = [CASES[entry.case].check(p) for p in entry.points]
        if all(whys):
            p = entry.points[0]
            return (
                f"cases: {entry.case} applies at none of its points: {whys[0]} "
                f"(d_model={p.d_model}, num_heads={p.num_heads})"
            )
    if next(timed_rows(plan, tuple(here)), None) is not None:
        return None
    reasons = []
    for entry in plan.entries:
        case = CASES[entry.case]
        for point in entry.points:
            if case.check(point):
                continue
            for name in entry.impls:
                impl = case.impls[name]
                lacking = [d for d in entry.devices if d in here and d not in impl.devices]
                if lacking:
                    hint = f"; {impl.elsewhere}" if impl.elsewhere else ""
                    reasons.append(
                        f"{entry.case} {name}: runs on {', '.join(impl.devices)} only{hint}"
                    )
                elif impl.supports(point):
                    reasons.append(f"{entry.case} {name}: {impl.supports(point)}")
    unique = list(dict.fromkeys(reasons))
    return "no row of this plan can run here: " + "; ".join(unique[:3])
