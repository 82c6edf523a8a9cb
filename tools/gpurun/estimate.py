"""How long each part of the GPU run should take, from what it launches: `python -m tools.gpurun
--plan` prints the table docs/gpu.md shows, and tests/tools/gpurun/test_gpurun.py checks every
part's limit against it.

A sweep part's estimate = process start + the Triton kernels it compiles x their compile time
+ its torch.compile graphs x an assumed compile time + its rows x (warm-up + budget) + its
groups x (the copy's warm-up + budget + a float64 truth). What is counted:
  - Triton kernels: every `triton` row of the part's plan run through its launchers on meta
    tensors at its real shape (tools/audit/capture.py's recorder), each launch bound by Triton's
    own binder for sm_90a: distinct keys are distinct compiles, exactly as the GPU's JIT keys them.
  - The tests' kernels: the same binder over the kernel tests run under the interpreter
    (tools/gpurun/launches.py), counted once and committed in results/gpu-compile/
    test-launches.json, plus the GPU-only long tests' (counted from their parameters).
  - Compile seconds per kernel: the median per kernel of the compile audit's `compile_s`
    (results/gpu-compile/triton-3.6.0.csv, the box's Triton, measured on this project's 2-core
    VM). Measured, not assumed.
Assumed, because no GPU has run them yet (the GPU run's rows record first_call_ms, so the next
estimate can be measured): the start of a process, a torch.compile graph, a float64 truth.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.tables import markdown_table
from tools.gpurun.parts import BUDGET_S, ENV_S, PARTS, Part

ROOT = Path(__file__).resolve().parents[2]
AUDIT_CSV = ROOT / "results" / "gpu-compile" / "triton-3.6.0.csv"
TEST_LAUNCHES = ROOT / "results" / "gpu-compile" / "test-launches.json"
START_S = 10  # assumed: a process importing torch (CUDA), triton, hydra (4-6 s on the VM)
INDUCTOR_S = 8  # one torch.compile graph: the first H200 run's flex part (docs/gpu.md)
TRUTH_S = 0.5  # assumed: the float64 truth of one point and mode on the GPU
TEST_WORKERS = 14  # pytest -n {workers}: the cores less two, 14 on a 16-core H200 node
# one kernel test's own work beside its compiles, fitted to an H200 node (2026-12-04): the
# kernel tests took 66 s on 14 workers (results/gpu/2026-12-04-h200/recheck/tests.xml)
TEST_CALL_S = 0.65
LONG_TEST_KERNELS = 2 * 4 * 2 * 2 * 3 + 2 * 2 * 2  # test_long: L x family x dtype x causal x
# (fwd, dq, dkdv), and RoPE's L x dtype x (fwd, bwd): at most, as if no two shared a compile
# The audit, counted by reading it: torch.compile of the eager RoPE and FlexAttention with two
# score_mods (3 graphs); the fused RoPE forward and backward and three attention forwards
# (5 Triton kernels); 16 rows of triton.testing.do_bench (50 ms warm-up, 200 ms of repeats).
AUDIT = dict(graphs=3, kernels={"_rope_kernel": 2, "_relbias_fwd_kernel": 3}, rows=16, row_s=0.25)


@dataclass(frozen=True)
class Estimate:
    part: Part
    seconds: float
    detail: str  # what was counted, as one line


def compile_seconds() -> dict[str, float]:
    """Median compile seconds per kernel name (sm_90a) from the compile audit's CSV."""
    per: dict[str, list[float]] = {}
    with open(AUDIT_CSV, newline="") as f:
        for row in csv.DictReader(f):
            if row["target"] == "sm_90a" and row.get("compile_s"):
                name = row["kernel"].removesuffix(" (backward)")
                per.setdefault(name, []).append(float(row["compile_s"]))
    return {name: statistics.median(v) for name, v in per.items()}


def plan_of(argv: tuple[str, ...]):
    """The harness's plan for a part's `python -m bench ...` overrides (Hydra compose)."""
    from hydra import compose, initialize_config_dir

    from bench.config import plan as config
    from bench.config import schema

    schema.register()
    overrides = [a for a in argv if "=" in a and not a.startswith(("hydra.", "device="))]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("bench", overrides=[*overrides, "device=cuda"])
    return config.make_plan(cfg, frozenset(o.split("=", 1)[0] for o in overrides)), cfg


def sweep_estimate(part: Part, seconds: dict[str, float]) -> Estimate:
    from tools.audit.capture import plan_launches

    plan, cfg = plan_of(part.argv)
    from bench.run.eta import timed_rows

    timed = {(c.name, i, p, m, d, t): c.impls[i] for c, i, p, m, d, t in timed_rows(plan)}
    rows, groups = len(timed), len({(c, p, m) for c, _, p, m, _, _ in timed})
    graphs = sum(1 + (k[3] != "forward") for k, impl in timed.items() if impl.compiled)
    kernels = plan_launches(plan)
    compile_s = sum(n * seconds.get(name, max(seconds.values())) for name, n in kernels.items())
    tm = cfg.timing
    timing_s = (rows + groups) * (tm.warmup_s + tm.budget_s)
    total = START_S + compile_s + graphs * INDUCTOR_S + timing_s + groups * TRUTH_S
    detail = (
        f"{rows} rows in {groups} groups x {tm.warmup_s + tm.budget_s:g} s (and a copy "
        f"per group): {timing_s:.0f} s; {sum(kernels.values())} Triton kernels: "
        f"{compile_s:.0f} s; {graphs} compiled graphs: {graphs * INDUCTOR_S} s"
    )
    return Estimate(part, total, detail)


def tests_estimate(part: Part, seconds: dict[str, float]) -> Estimate:
    counted = json.loads(TEST_LAUNCHES.read_text())
    per_kernel, tests = counted["kernels"], counted["tests"]
    kernels = sum(per_kernel.values()) + LONG_TEST_KERNELS
    mean = statistics.mean(seconds.values())
    compile_s = sum(n * seconds.get(k, mean) for k, n in per_kernel.items())
    compile_s += LONG_TEST_KERNELS * mean
    total = 2 * START_S + (compile_s + tests * TEST_CALL_S) / TEST_WORKERS
    detail = (
        f"{kernels} Triton kernels ({compile_s:.0f} s of compiles) and {tests} tests "
        f"over {TEST_WORKERS} workers"
    )
    return Estimate(part, total, detail)


def audit_estimate(part: Part, seconds: dict[str, float]) -> Estimate:
    compile_s = sum(n * seconds[k] for k, n in AUDIT["kernels"].items())
    graphs_s = AUDIT["graphs"] * INDUCTOR_S
    total = START_S + compile_s + graphs_s + AUDIT["rows"] * AUDIT["row_s"]
    detail = (
        f"{AUDIT['rows']} do_bench rows; {sum(AUDIT['kernels'].values())} Triton kernels: "
        f"{compile_s:.0f} s; {AUDIT['graphs']} compiled graphs: {graphs_s} s (its "
        "docstring says 2-3 minutes; it writes audit.csv only at its end)"
    )
    return Estimate(part, total, detail)


def estimates() -> list[Estimate]:
    seconds = compile_seconds()
    out = []
    for part in PARTS:
        if part.name == "tests":
            out.append(tests_estimate(part, seconds))
        elif part.name == "audit":
            out.append(audit_estimate(part, seconds))
        elif part.argv[:2] == ("-m", "bench") and "profile=true" in part.argv:
            out.append(Estimate(part, START_S + 5, "one point: 3 warm-up and 5 profiled calls"))
        elif part.argv[:2] == ("-m", "bench"):
            out.append(sweep_estimate(part, seconds))
        else:  # the probe's tiny size: 7 s on the 2-core VM's CPU
            out.append(Estimate(part, START_S + 10, "probe=tiny: 7 s on the 2-core VM"))
    return out


def markdown(rows: list[Estimate]) -> str:
    lines = markdown_table(
        ["part", "limit s", "estimate s", "what is counted"],
        [[e.part.name, e.part.limit_s, f"{e.seconds:.0f}", e.detail] for e in rows],
    )
    reserved = [e.part for e in rows if e.part.reserved]
    rest = [e.part.name for e in rows if not e.part.reserved]
    names = ", ".join(p.name for p in reserved)
    lines += [
        "",
        f"Reserved: {ENV_S} s for env and the limits of {names}, "
        f"{ENV_S + sum(p.limit_s for p in reserved)} s of the {BUDGET_S} s budget "
        f"(estimated {ENV_S + sum(e.seconds for e in rows if e.part.reserved):.0f} s); "
        f"{', '.join(rest)} run in what is left.",
    ]
    return "\n".join(lines)
