"""`python -m bench profile=true cases=<case> impls=<impl> ...`: profile one point.

Takes the first point, dtype, device and mode of the plan and the first selected case and impl;
writes a Chrome/Perfetto trace (trace.json), a top-operators table (top_ops.md), and for Triton
kernels on CUDA their registers, spills and warps (kernels.md).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from bench.cases import CASES
from bench.config import DTYPES, Plan
from bench.runner import timed_call


def run(plan: Plan, cfg, out_dir: Path) -> None:
    case = CASES[plan.cases[0]]
    impl_name = plan.impls[0] if plan.impls else case.baseline
    if impl_name not in case.impls:
        raise SystemExit(f"impls: {impl_name!r} is not an implementation of {case.name}")
    device = torch.device(plan.devices[0])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("device=cuda: CUDA is not available on this machine")
    point, dtype, mode = plan.points[0], DTYPES[plan.dtypes[0]], plan.modes[0]
    torch.manual_seed(cfg.seed)
    inputs = case.build(point, device, dtype)
    for name in case.grad_inputs:
        inputs[name].requires_grad_(mode != "forward")
    call = timed_call(case.impls[impl_name].make(inputs), mode)
    for _ in range(3):  # warm-up: compilation and allocator outside the trace
        call()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        for _ in range(5):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(out_dir / "trace.json"))
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    title = f"{case.name} / {impl_name} / {mode} / {plan.dtypes[0]} / {device.type} / {point}"
    table = prof.key_averages().table(sort_by=sort, row_limit=25)
    (out_dir / "top_ops.md").write_text(f"# {title}\n\n```\n{table}\n```\n")
    if device.type == "cuda":
        (out_dir / "kernels.md").write_text(_triton_kernels())
    print(f"profile of {title} -> {out_dir}/trace.json, top_ops.md")


def _triton_kernels() -> str:
    """Registers, spills and warps of every compiled Triton kernel of the `kernels` package."""
    import kernels.relbias
    import kernels.rope

    lines = ["| kernel | registers | spills | warps | shared bytes |", "|---|---|---|---|---|"]
    for fn in (kernels.rope._rope_kernel, kernels.relbias._relbias_fwd_kernel):
        for caches in getattr(fn, "device_caches", {}).values():
            for compiled in caches[0].values():
                meta = compiled.metadata
                lines.append(f"| {fn.__name__} | {getattr(compiled, 'n_regs', '?')} | "
                             f"{getattr(compiled, 'n_spills', '?')} | {meta.num_warps} | "
                             f"{meta.shared} |")  # fmt: skip
    return "\n".join(lines) + "\n"
