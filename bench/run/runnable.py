"""Why a plan has nothing to run on this machine: the check `python -m bench` makes before
Hydra writes a run directory (a plan is made by bench/config/plan.py; this reads it)."""

from __future__ import annotations

import torch

from bench.cases import CASES
from bench.plans import Plan
from bench.run.eta import timed_rows


def unrunnable(plan: Plan) -> str | None:
    """Why no row of the plan can run on this machine (None if one can): every device it asks
    for is missing, no point fits a case, or every implementation lacks this device."""
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
