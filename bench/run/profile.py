"""`python -m bench profile=true cases=<case> impls=<impl> ...`: profile one point.

Takes the first case of the plan, its first point, dtype, device and mode, and profiles the
implementations named by `impls=[...]` on the command line, else the case's baseline and its
fused kernel (when the plan has it); writes a Chrome/Perfetto trace per implementation
(trace_<impl>.json), a top-operators table per implementation (top_ops.md), and on CUDA
kernels.md: every GPU kernel launch in the trace with its grid, block, registers per thread and
shared memory (as the profiler recorded them), then the registers, spills and warps of each
compiled Triton kernel of the `posenc_kernels` package.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from bench.cases import CASES
from bench.plans import Plan
from bench.registry import DTYPES, as_call
from bench.run import check
from bench.run.tasks import leaves_of, timed_call
from bench.tables import markdown_table


def run(plan: Plan, cfg, out_dir: Path, pinned: frozenset[str] = frozenset()) -> None:
    entry = plan.entries[0]
    case = CASES[entry.case]
    device = torch.device(entry.devices[0])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("device=cuda: CUDA is not available on this machine")
    names = chosen(entry.impls, case, "impls" in pinned)
    sections = []
    for name in names:
        title, table = _profile(case, name, entry, device, cfg.seed, out_dir / f"trace_{name}.json")
        sections.append((title, table))
        print(f"profile of {title} -> {out_dir}/trace_{name}.json", flush=True)
    text = "".join(f"# {title}\n\n```\n{table}\n```\n\n" for title, table in sections)
    (out_dir / "top_ops.md").write_text(text)
    if device.type == "cuda":
        launches = "".join(
            f"## {n}\n\n" + kernel_launches(out_dir / f"trace_{n}.json") + "\n" for n in names
        )
        (out_dir / "kernels.md").write_text(launches + _triton_kernels())


def chosen(impls: tuple[str, ...], case, named: bool) -> list[str]:
    """The implementations profiled: those named on the command line (impls=[...]), else the
    case's baseline and its fused kernel when the plan has it (not merely the first listed,
    which is often the tutorial's code)."""
    if named:
        return list(impls)
    return [n for n in dict.fromkeys((case.baseline, "triton")) if n in impls]


def _profile(case, name, entry, device, seed, trace: Path) -> tuple[str, str]:
    point, dtype, mode = entry.points[0], DTYPES[entry.dtypes[0]], entry.modes[0]
    torch.manual_seed(seed)
    inputs = case.build(point, device, dtype)
    for t in check.leaves(inputs, case.grad_inputs).values():
        t.requires_grad_(mode != "forward")
    made = as_call(case.impls[name].make(inputs))
    call = timed_call(made, leaves_of(made, inputs, case), mode)
    for _ in range(3):  # warm-up: compilation and allocator outside the trace
        call()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        for _ in range(5):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace))
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    title = f"{case.name} / {name} / {mode} / {entry.dtypes[0]} / {device.type} / {point}"
    return title, prof.key_averages().table(sort_by=sort, row_limit=25)


def kernel_launches(trace: Path) -> str:
    """A table of the distinct GPU kernel launches in a Chrome trace: name, grid, block,
    registers per thread, shared memory, count (from the profiler's kernel events' args)."""
    import json

    events = json.loads(Path(trace).read_text()).get("traceEvents", [])
    seen: dict[tuple, int] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        args = e.get("args", {})
        key = (
            e.get("name", "?")[:60],
            str(args.get("grid")),
            str(args.get("block")),
            args.get("registers per thread"),
            args.get("shared memory"),
        )
        seen[key] = seen.get(key, 0) + 1
    header = ["kernel", "grid", "block", "registers/thread", "shared bytes", "launches"]
    return "\n".join(markdown_table(header, [[*k, n] for k, n in seen.items()])) + "\n"


def _triton_kernels() -> str:
    """Registers, spills and warps of every compiled Triton kernel of the `posenc_kernels`
    package."""
    import posenc_kernels.relbias
    import posenc_kernels.rope

    rows = []
    relbias = posenc_kernels.relbias
    for fn in (
        posenc_kernels.rope._rope_kernel,
        relbias._relbias_fwd_kernel,
        relbias._relbias_bwd_dkdv_kernel,
        relbias._relbias_bwd_dq_kernel,
    ):
        for caches in getattr(fn, "device_caches", {}).values():
            for compiled in caches[0].values():
                meta = compiled.metadata
                rows.append(
                    [
                        fn.__name__,
                        getattr(compiled, "n_regs", "?"),
                        getattr(compiled, "n_spills", "?"),
                        meta.num_warps,
                        meta.shared,
                    ]
                )
    header = ["kernel", "registers", "spills", "warps", "shared bytes"]
    return "\n".join(markdown_table(header, rows)) + "\n"
