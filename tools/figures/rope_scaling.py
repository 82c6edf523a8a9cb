"""docs/rope_scaling.md's figures: the committed `sweep=long_context` run."""

from __future__ import annotations

from tools.figures.sources import _cpu, _json, contended, parts, pick, report_rows, sci, span

RUN = "long_context-cpu"
SCHEDULES = ("none", "linear", "dynamic", "yarn", "llama3", "longrope")


def _rows(case: str, impl: str, length: int, schedules=SCHEDULES):
    df = report_rows(RUN)
    return [pick(df, case=case, impl=impl, seq_len=length, rope_scaling=s) for s in schedules]


def _err(impl: str, length: int, schedule: str) -> str:
    return sci(_rows("rope_tables", impl, length, [schedule])[0].max_abs_err)


def _ref_err(schedule: str) -> str:
    return sci(_rows("rope_tables", "reference", 32768, [schedule])[0].max_abs_err, 0)


def run() -> str:
    env, summary = _json(RUN, "env.json"), _json(RUN, "timing_summary.json")
    return (
        f"commit {env['git_sha'][:7]}, {_cpu(env)}, torch {env['torch']}, "
        f"{len(report_rows(RUN))} rows in {round(summary['wall_s'])} s, {contended(RUN)}"
    )


def rotation() -> str:
    ms = {i: [r.p50_ms for r in _rows("rope", i, 32768)] for i in ("reference", "reference_out")}
    return (
        f"the reference takes {span(ms['reference'])} ms and writing into preallocated outputs "
        f"{span(ms['reference_out'])} ms for all six"
    )


def tables() -> tuple[str, ...]:
    ref, f32 = (_rows("rope_tables", impl, 4096) for impl in ("reference", "float32_angles"))
    faster = [r.p50_ms / f.p50_ms for r, f in zip(ref, f32, strict=True)]
    late = zip(SCHEDULES, _rows("rope_tables", "float32_angles", 8192), strict=True)
    wrong = {s for s, r in late if r.status == "wrong"}
    assert wrong == set(SCHEDULES) - {"linear"}, wrong  # the sentence names linear alone
    plain = [_err("float32_angles", n, "none") for n in (4096, 32768)]
    return (
        f"{span(faster)}x faster to build than float64 angles cast once at L = 4096",
        f"{plain[0]} at 4096, {plain[1]} at 32768 for the plain schedule (YaRN "
        f"{_err('float32_angles', 32768, 'yarn')}, LongRoPE "
        f"{_err('float32_angles', 32768, 'longrope')}), where the reference's is "
        f"{_ref_err('none')} ({_ref_err('yarn')} "
        "with an attention factor)",
        f"(which slows every angle by 8: {_err('float32_angles', 32768, 'linear')} at 32768)",
    )


def far() -> tuple[str, ...]:
    f32 = {(n, s): _rows("rope_tables", "float32_angles", n, [s])[0].max_abs_err
           for n in (2**20, 2**22) for s in ("none", "yarn")}  # fmt: skip
    built = [r.p50_ms / 1e3 for r in _rows("rope_tables", "reference", 2**22, ["none", "yarn"])]
    return (
        f"the float32 angles' largest error is {f32[2**20, 'none']:.3f} at 1M positions (YaRN "
        f"{f32[2**20, 'yarn']:.3f}) and {f32[2**22, 'none']:.2f} at 4M ({f32[2**22, 'yarn']:.2f})",
        f"its 4M table built in {span(built)} s",
    )


def transformers() -> tuple[str, ...]:
    hf = _rows("rope", "hf", 2**20, ["none", "yarn"])
    native, ref = (_rows("rope", i, 2**20, ["none"])[0].p50_ms for i in ("native", "reference"))
    return (
        f"is off by {hf[0].max_abs_err:.2f} (YaRN {hf[1].max_abs_err:.2f}) in the rotated values, "
        f"{round(hf[0].err_ratio, -2):.0f}x the reference's own float32 error",
        f"(the C kernel {native:.0f} ms against the reference's {ref:.0f} ms there)",
    )


SETTINGS = ("5x past L0", "(knob `rope_scaling`, an 8x")
FIGURES = {"run": run, "rotation": rotation, **parts(tables, 3), **parts(far, 2),
           **parts(transformers, 2)}  # fmt: skip
