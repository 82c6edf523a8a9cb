"""The configuration validated into a Plan (the schema: bench/config/schema.py).

Sweep axes (batch, seq_len, d_model, num_heads, every declared knob, dtype, device, mode,
cases, impls) accept a scalar or a list: a Hydra
multirun (`-m batch=1,8`) gives each job a scalar, a single run takes lists (`batch=[1,8]`).
A sweep whose cases need different shapes lists `grids`: each grid overrides some axes, and the
plan is the union of the grids' products. An axis set on the command line (`pinned`) wins over
every grid's (`sweep=gpu seq_len=2048`), except `cases` and `impls`, which filter what the grids
list (`sweep=gpu cases=[rope]`); a case named there that no grid lists (a plugin's) runs at the
top-level axes. `smoke=true` shrinks every point to a tiny one (B=1,
L=16, 24, ..., D=16, the heads kept) to test a sweep's plumbing, e.g. on the CPU interpreter.
Everything is checked before anything runs; errors name the key (`grids[1].seq_len: ...`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import torch
from omegaconf import OmegaConf

from bench.cases import CASES
from bench.checks import as_list, choices, positive_ints
from bench.config.schema import MODES
from bench.config.schema import axes as axis_names
from bench.config.settings import check_settings
from bench.plans import Entry, Plan
from bench.registry import DTYPES, KNOBS, Point
from bench.run import memory
from bench.run.runnable import unrunnable


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


def _devices(value, key: str) -> list[str]:
    devices = [str(v) for v in as_list(value)]
    if not devices:
        raise ValueError(f"{key}: at least one value is needed")
    if devices == ["auto"]:
        return ["cuda" if torch.cuda.is_available() else "cpu"]
    for v in devices:
        if v not in ("cpu", "cuda"):
            raise ValueError(f"{key}: unknown value {v!r}; choose from cpu, cuda, auto")
    return devices


def _knob_values(axes: dict, name) -> dict[str, list]:
    """Every declared knob's values, by its own check (bench/registry.py: Knob)."""
    return {k.name: k.check(axes[k.name], name(k.name)) for k in KNOBS.values()}


def _smoke(axes: dict) -> dict:
    """Tiny points with the same heads (GQA ratios kept): B=1, D=16, and the lengths, in their
    order, 16, 24, 32, ... (distinct lengths stay distinct)."""
    heads = min(positive_ints(axes["num_heads"], "num_heads"))
    lengths = sorted(set(positive_ints(axes["seq_len"], "seq_len")))
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
    batch = positive_ints(axes["batch"], name("batch"))
    seq_len = positive_ints(axes["seq_len"], name("seq_len"))
    d_model = positive_ints(axes["d_model"], name("d_model"))
    heads = positive_ints(axes["num_heads"], name("num_heads"))
    for d, h in itertools.product(d_model, heads):
        if d % h:
            raise ValueError(f"{name('d_model')}={d} is not divisible by {name('num_heads')}={h}")
    knobs = _knob_values(axes, name)
    _check_knobs(knobs, [Point(1, 1, d, h) for d, h in itertools.product(d_model, heads)], name)
    cases = choices(axes["cases"], name("cases"), list(CASES))
    cases = [c for c in cases if filters["cases"] is None or c in filters["cases"]]
    wanted = _impls(axes["impls"], name("impls"))
    if filters["impls"] is not None:
        wanted = [i for i in wanted or filters["impls"] if i in filters["impls"]]
    dtypes = tuple(choices(axes["dtype"], name("dtype"), list(DTYPES)))
    devices = tuple(_devices(axes["device"], name("device")))
    modes = tuple(choices(axes["mode"], name("mode"), list(MODES)))
    base = list(itertools.product(batch, seq_len, d_model, heads))
    exclusive = [k for k in KNOBS.values() if k.exclusive and _set(knobs[k.name], k)]
    entries = []
    for name in cases:
        case = CASES[name]
        impls = tuple(i for i in case.impls if wanted is None or i in wanted)
        if not impls or any(k.name not in case.knob_names for k in exclusive):
            continue  # the chosen impls are other cases', or a set knob the case does not read
        if case.share_base:  # a share needs its partners: the row's own, and the plain one
            partners = [case.share_base, *(case.partner(i) for i in impls)]
            impls = (*dict.fromkeys(p for p in partners if p not in impls), *impls)
        own = [knobs[k] for k in case.knob_names]
        points = tuple(
            _expanded(Point(*p, **dict(zip(case.knob_names, values, strict=True))))
            for p in base
            for values in itertools.product(*own)
        )
        entries.append(Entry(name, impls, tuple(dict.fromkeys(points)), dtypes, devices, modes))
    return entries


def _reads(entries: list[Entry], knob: str) -> bool:
    return any(knob in CASES[e.case].knob_names for e in entries)


def _set(values: list, knob) -> bool:
    return any(knob.is_set(v) for v in values)


def _check_knobs(knobs: dict[str, list], points: list[Point], name) -> None:
    """What the knobs declare of each other and of the base axes (Knob.needs, Knob.fits)."""
    for knob in KNOBS.values():
        values = knobs[knob.name]
        if knob.needs and _set(values, knob) and not _set(knobs[knob.needs], KNOBS[knob.needs]):
            raise ValueError(f"{name(knob.name)}: only with {knob.needs}= set ({knob.help})")
        for value, point in itertools.product(values, points if knob.fits else []):
            why = knob.is_set(value) and knob.fits(value, point)
            if why:
                raise ValueError(f"{name(knob.name)}={value} {why}")


def _expanded(point: Point) -> Point:
    """The point with what its set knobs decide (Knob.expand: a model's shapes)."""
    for knob in KNOBS.values():
        if knob.expand is not None and knob.is_set(getattr(point, knob.name)):
            point = knob.expand(point)
    return point


def _exclusive_set(cfg) -> list:
    """The exclusive knobs the configuration sets (model=)."""
    return [k for k in KNOBS.values() if k.exclusive and _set(as_list(cfg[k.name]), k)]


def exclusive_skip(cfg) -> str | None:
    """The one line a run says of the chosen cases that do not read a knob it sets and so do
    not run (Knob.exclusive: model=)."""
    chosen = choices(cfg["cases"], "cases", list(CASES))
    for knob in _exclusive_set(cfg):
        skipped = [c for c in chosen if knob.name not in CASES[c].knob_names]
        if skipped:
            more = f" and {len(skipped) - 6} more" if len(skipped) > 6 else ""
            return (
                f"{knob.name}=: {len(skipped)} chosen cases take no {knob.name} and are not run "
                f"({', '.join(skipped[:6])}{more})"
            )
    return None


def _impls(value, key: str) -> list[str] | None:
    """None for "all"; else the names, each one some case's (a name no case has is a typo)."""
    if as_list(value) == ["all"]:
        return None
    known = sorted({name for c in CASES.values() for name in c.impls})
    return choices(value, key, known)


def make_plan(cfg, pinned: frozenset[str] = frozenset()) -> Plan:
    """Validates the whole config; raises ValueError naming the offending key. pinned: the
    axes the command line set (they win over the grids')."""
    check_settings(cfg, pinned)
    filters = _filters(cfg)
    entries = []
    for axes, name in resolve_axes(cfg, pinned, filters):
        entries += _entries(_smoke(axes) if cfg["smoke"] else axes, name, filters)
    _check_entries(cfg, pinned, entries)
    if big := _nothing_fits(entries):
        raise ValueError(big)
    return Plan(tuple(entries))


def planned(cfg, pinned: frozenset[str] = frozenset()) -> tuple[Plan | None, str | None]:
    """The plan, or why there is none: a value make_plan refuses, retry_timeouts without
    resume, nothing that can run on this machine (bench/run/runnable.py). `python -m bench`
    asks before Hydra's main, on the config it composed, then again in main (a multirun's
    job is checked there alone)."""
    try:
        plan = make_plan(cfg, pinned)
    except ValueError as exc:
        return None, str(exc)
    if cfg.retry_timeouts and not cfg.resume:
        return None, "retry_timeouts=true goes with resume=true (the run whose rows timed out)"
    return plan, unrunnable(plan)


def _filters(cfg) -> dict:
    """With grids, the top level's cases and impls filter what the grids list (None: all)."""
    if not cfg["grids"]:
        return {"cases": None, "impls": None}
    top = choices(cfg["cases"], "cases", list(CASES))
    return {
        "cases": None if top == list(CASES) else top,
        "impls": _impls(cfg["impls"], "impls"),
    }


def resolve_axes(cfg, pinned: frozenset[str], filters: dict) -> list[tuple[dict, object]]:
    """The axes of each grid (the config's own without grids; the command line's pinned values
    over a grid's), then of the cases the command line names and no grid lists, each with the
    function naming a key as the user wrote it (grids[i].axis for a value the grid set)."""
    base = {axis: cfg[axis] for axis in axis_names()}
    grids = as_list(cfg["grids"]) if cfg["grids"] else []
    out = []
    for i, grid in enumerate(grids or [{}]):
        prefix = f"grids[{i}]." if grids else ""
        if not hasattr(grid, "keys"):
            raise ValueError(f"grids[{i}]: expected a mapping of axes, got {grid!r}")
        unknown = [k for k in grid if k not in axis_names()]
        if unknown:
            raise ValueError(
                f"{prefix}{unknown[0]}: not an axis; choose from {', '.join(axis_names())}"
            )
        if any(k in pinned for k in grid):  # the grid's own values are checked all the same
            _entries({**base, **dict(grid)}, lambda a, g=grid, p=prefix: p * (a in g) + a, filters)
        own = {k: v for k, v in dict(grid).items() if k not in pinned or k in ("cases", "impls")}

        def name(axis, own=own, prefix=prefix):
            return prefix + axis if axis in own else axis

        out.append(({**base, **own}, name))
    listed = {c for g in grids for c in choices(g.get("cases", "all"), "cases", list(CASES))}
    orphans = [c for c in filters["cases"] or [] if c not in listed]
    if orphans:  # cases the command line names and no grid lists: at the top-level axes
        out.append((dict(base, cases=orphans), lambda a: a))
    return out


def _check_entries(cfg, pinned: frozenset[str], entries: list[Entry]) -> None:
    """A plan that measures something, and no pinned knob or exclusive knob that no case of it
    reads (it would change nothing, silently)."""
    unread = [k for k in sorted(pinned) if k in KNOBS and not _reads(entries, k)]
    if entries and unread:
        readers = [c for c in CASES if unread[0] in CASES[c].knob_names]
        readers = ", ".join(readers[:8]) + (f" and {len(readers) - 8} more" * (len(readers) > 8))
        raise ValueError(
            f"{unread[0]}: no chosen case reads it, so it would change nothing; "
            f"the cases that do: {readers}"
        )
    for knob in _exclusive_set(cfg) if not entries else []:
        takes = ", ".join(c for c in CASES if knob.name in CASES[c].knob_names)
        raise ValueError(
            f"{knob.name}: none of the chosen cases takes a {knob.name}; the cases that do: {takes}"
        )
    if not entries:
        wanted = ", ".join(as_list(cfg["impls"]))
        chosen = choices(cfg["cases"], "cases", list(CASES))
        have = "; ".join(f"{c}: {', '.join(CASES[c].impls)}" for c in chosen[:4])
        raise ValueError(
            f"impls: none of the chosen implementations ({wanted}) belongs to a "
            f"chosen case ({have}); pass impls=[...] or impls=all"
        )


def _nothing_fits(entries: list[Entry]) -> str | None:
    """Why no point of the plan fits this machine's memory (None if one does): each point's
    inputs and output, by its case's cost model, against what its device has available. A plan
    in which some points fit runs, and the others are written as `oom` rows, never built."""
    first = None
    for e in entries:
        for device in (d for d in e.devices if d == "cpu" or torch.cuda.is_available()):
            for dtype, p in itertools.product(e.dtypes, e.points):
                if CASES[e.case].check(p):  # skipped, never built (a model without RoPE)
                    continue
                big = memory.inputs_too_big(CASES[e.case], p, torch.device(device), DTYPES[dtype])
                if not big:
                    return None
                first = first or f"{e.case} at {p.label()} {dtype} on {device}: {big}"
    return first and f"no point fits in memory: {first} (a smaller batch, seq_len or d_model)"
