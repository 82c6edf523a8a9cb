"""`python -m bench [overrides]`: one sweep (or, with -m, a Hydra multirun) -> results/.

Config: configs/bench.yaml with the schema in bench/config/schema.py. Examples:
    python -m bench                                   # the default sweep (quick)
    python -m bench sweep=seed_5_2                    # the tutorial's section 5.2, then done right
    python -m bench -m batch=1,8 seq_len=128,512      # a multirun, aggregated at the end
    python -m bench profile=true cases=[rope] impls=[reference]
    python -m bench --help                            # cases, implementations, sweeps, keys
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench import exits
from bench.config import cli, plugins, run_dir, schema
from bench.config import plan as bench_config
from bench.results import NO_SPACE, git_sha, read_rows, write_env
from bench.run import gpu_state, profile
from bench.run.runner import Runner
from bench.run.watchdog import Watchdog

# The run directory's name: results/runs/<time>-<sweep><the overrides that change what runs>
OmegaConf.register_new_resolver("bench_tag", run_dir.run_tag, replace=True)
IGNORED = ("resume", "retry_timeouts", "allow_unchecked")  # keys a resumed run may change


def _fail(message: str, out_dir: Path) -> None:
    """A configuration error: said in one line, exit 2, no empty run directory left behind."""
    print(f"invalid configuration: {message}", file=sys.stderr)
    _discard_if_empty(out_dir)
    sys.exit(2)


def _discard_if_empty(out_dir: Path) -> None:
    if (
        out_dir.is_dir()
        and not any(out_dir.glob("results.csv"))
        and not any(out_dir.glob("pooled.json"))
    ):
        shutil.rmtree(out_dir, ignore_errors=True)


def _resumable(cfg: DictConfig, out_dir: Path) -> str | None:
    """Why this run cannot resume out_dir (None if it can): nothing there to resume, or a
    configuration other than the one it was made with."""
    if not (out_dir / "results.csv").exists() and not (out_dir / "pooled.json").exists():
        return (
            f"resume=true: {out_dir} holds no results.csv; pass the run to resume as "
            "hydra.run.dir=results/runs/<run>"
        )
    diffs = bench_config.changed_since(out_dir / "config.yaml", cfg, IGNORED)
    if diffs:
        return f"resume=true: the run was made with another configuration ({diffs})"
    return None


def _save_config(cfg: DictConfig, out_dir: Path) -> None:
    """config.yaml, written whole or not at all (a temporary file renamed over it), before the
    first row: a resume after any kill finds the settings the rows were measured with."""
    tmp = out_dir / "config.yaml.tmp"
    OmegaConf.save(cfg, tmp)
    os.replace(tmp, out_dir / "config.yaml")


def _lock(out_dir: Path):
    """An exclusive lock on the run's folder for this process's life (released at its end, or
    at an exec: the watchdog's restart takes it again); None if another process holds it."""
    import fcntl

    handle = (out_dir / ".lock").open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _on_stop(signum, frame) -> None:
    """Ctrl-C, and a kill, end the run (rows kept, resume said); a plugin's own
    KeyboardInterrupt only its row (bench/exits.py)."""
    exits.STOP.set()  # by its module: a multirun's launcher pickles main (submitit)
    raise KeyboardInterrupt


def _record(out_dir: Path, cfg: DictConfig, overrides: list[str], summary: dict) -> None:
    """config.yaml and env.json; a resumed run keeps the originals and appends to env.json."""
    env_path = out_dir / "env.json"
    if cfg.resume and env_path.exists():
        env = json.loads(env_path.read_text())
        env.setdefault("resumes", []).append(
            dict(
                time=time.strftime("%Y-%m-%dT%H:%M:%S"),
                git_sha=git_sha(),
                overrides=overrides,
                **summary,
            )
        )
        env_path.write_text(json.dumps(env, indent=2, default=str) + "\n")
        return
    write_env(env_path, {"run_id": out_dir.name, "overrides": overrides, **summary})


@hydra.main(config_path="../configs", config_name="bench", version_base="1.3")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:  # again, for a launcher's job in its own process (a no-op where entry() loaded them)
        plugins.load(cfg.plugins)
    except plugins.PluginError as exc:
        _fail(str(exc), out_dir)
    overrides = list(hydra_cfg.overrides.task)
    pinned = cli.pinned(overrides)
    lock = _lock(out_dir)
    if lock is None:  # the other run's folder: said, and left as it is
        print(f"invalid configuration: another run is writing into {out_dir}", file=sys.stderr)
        sys.exit(2)
    plan, why = bench_config.planned(cfg, pinned)  # again: a multirun's job was not checked alone
    if why:
        _fail(why, out_dir)
    if note := bench_config.exclusive_skip(cfg):
        print(note)
    if cfg.resume and (why := _resumable(cfg, out_dir)):
        _fail(why, out_dir)
    if cfg.profile:
        profile.run(plan, cfg, out_dir, pinned)
        return
    try:
        runner = Runner(
            plan,
            cfg.timing,
            out_dir,
            run_id=out_dir.name,
            resume=cfg.resume,
            tutorial_timing=cfg.tutorial_timing,
            do_calibrate=cfg.calibrate,
            seed=cfg.seed,
            retry=("timeout",) if cfg.retry_timeouts else (),
        )
    except ValueError as exc:  # a results.csv with a malformed row: named, never read
        _fail(str(exc), out_dir)
    if hydra_cfg.mode != RunMode.MULTIRUN:  # a multirun's job has no command line to restart
        runner.set_watchdog(Watchdog(_restart(runner, cfg, out_dir, overrides)))
    if not cfg.resume:
        _save_config(cfg, out_dir)
    signal.signal(signal.SIGTERM, _on_stop)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a background job keeps its own
        signal.signal(signal.SIGINT, _on_stop)
    again = " ".join(o for o in overrides if not o.startswith(("resume", "hydra.run.dir")))
    again = f"python -m bench {again} resume=true hydra.run.dir={out_dir}"
    gpu_before = gpu_state.snapshot()  # clocks, power, throttling (env.json: gpu_state)
    try:
        summary = runner.run()
    except KeyboardInterrupt:
        saved = len(runner.writer.existing)
        print(
            f"\ninterrupted: {saved} rows are saved in {out_dir / 'results.csv'} "
            f"({runner.done} measured by this run). Finish it with:\n  {again}",
            file=sys.stderr,
        )
        if _report(out_dir):  # the report of what is there, rebuilt on resume
            print(f"report of the rows so far: {out_dir / 'report.md'}", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        with contextlib.suppress(OSError):  # its buffer holds the row cut short: dropped
            runner.writer.close()
        free = shutil.disk_usage(out_dir).free / 2**20
        print(  # no report: it would not fit either
            f"\ncannot write in {out_dir}: {exc.strerror} ({free:.0f} MiB free); the "
            f"{len(runner.writer.existing)} rows before are kept (a row cut short is set aside "
            f"on resume). Free some space, then: {again}",
            file=sys.stderr,
        )
        sys.exit(NO_SPACE_EXIT)
    if gpu_before is not None:
        summary["gpu_state"] = {"start": gpu_before, "end": gpu_state.snapshot()}
    _record(out_dir, cfg, overrides, summary)
    print(
        f"{runner.done} rows in {summary['wall_s']:.1f} s "
        f"(harness overhead {summary['overhead_pct']:.1f}% of the wall time) -> {out_dir}"
    )
    if hydra_cfg.mode == RunMode.MULTIRUN:  # a multirun reports once, at its end (callbacks)
        return
    if not cfg.report:  # pandas and matplotlib not even loaded: about 2 s of a small run
        print(f"no report (report=false): python -m bench.report {out_dir}")
    elif not _report(out_dir):
        print("nothing to report: no row was measured (is the device there?)")
        return
    else:
        _print_report(cfg, out_dir)
    if verdict := not_ok(out_dir / "results.csv", cfg.allow_unchecked):
        print(verdict)
        sys.exit(BAD_ROWS)


BAD_ROWS = 3  # the exit status of a run with a row in NOT_OK (--help, README)
NO_SPACE_EXIT = 74  # sysexits.h's EX_IOERR: the run could not write its rows
# rows that did not measure what was asked, or not verified it (unchecked: allow_unchecked=true)
NOT_OK = ("wrong", "error", "timeout", "oom", "unchecked")


def _restart(runner: Runner, cfg: DictConfig, out_dir: Path, overrides: list[str]):
    """What a row past its time limit does (bench/run/watchdog.py): its row written as
    `timeout`, then this process replaced by the same command resuming the run (the stuck call
    stops with the process; resume skips the timeout row unless retry_timeouts=true)."""

    def on_timeout(rows: list, what: str, limit_s: float) -> None:
        runner.timed_out(rows, what, limit_s)
        names = ", ".join(f"{t.case.name} {t.impl} {t.mode}" for t, _ in rows[:3])
        print(
            f"\ntimeout: {names} past {limit_s:.0f} s in {what}; the run goes on in a new "
            "process (resume=true)",
            file=sys.stderr,
            flush=True,
        )
        keep = [o for o in overrides if not o.startswith(("resume=", "hydra.run.dir="))]
        argv = [sys.executable, "-m", "bench", *keep, "resume=true", f"hydra.run.dir={out_dir}"]
        sys.stdout.flush()
        os.execv(sys.executable, argv)

    return on_timeout


def not_ok(results: Path, allow_unchecked: bool = False) -> str | None:
    """The last line of a run with wrong, errored, timed-out or unchecked rows (how many,
    which), or None."""
    counted = [s for s in NOT_OK if s != "unchecked" or not allow_unchecked]
    bad = [r for r in read_rows(results).rows if r["status"] in counted]
    if not bad:
        return None
    from bench.report.rows import knobs

    def label(r: dict) -> str:
        parts = (r["case"], r["impl"], r["mode"], f"L={r['seq_len']}", knobs(r["params"]))
        return " ".join(filter(None, parts)) + f": {r['status']}"

    which = "; ".join(label(r) for r in bad[:4])
    more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
    return (
        f"{len(bad)} rows wrong, in error, timed out, out of memory or unchecked (report.md, "
        "'Rows not ok'): "
        f"{which}{more}"
    )


def _print_report(cfg: DictConfig, out_dir: Path) -> None:
    if cfg.tutorial_timing:  # sweep=seed_5_2: print the table that extends section 5.2
        from bench.report import markdown, rows

        print("\n".join(markdown.tutorial_table(rows.load([out_dir]))))
    print(f"report: {out_dir / 'report.md'}")


def _report(out_dir: Path) -> bool:
    """report.md and the plots of the run's rows, if it has any (imported here: a command line
    that fails its checks exits without loading pandas and matplotlib)."""
    from bench.report import build, rows

    if not rows.has_rows([out_dir]):
        return False
    build.build([out_dir])
    return True


def entry() -> None:
    """The plugins first (their cases and knobs are part of the schema), then the checks that
    need no config: --help, keys that do not exist, the sweep's name, the run directory."""
    argv = sys.argv[1:]
    try:
        plugins.load(plugins.named_in(argv))
    except plugins.PluginError as exc:
        print(f"invalid configuration: {exc}", file=sys.stderr)
        sys.exit(2)
    schema.register()
    if "--help" in argv or "-h" in argv:
        print(cli.help_text())
        return
    problem = (
        cli.syntax_problem(argv)
        or cli.unknown_key(argv)
        or cli.sweep_value_problem(argv)
        or cli.sweep_problem(argv)
    )
    if not problem:
        argv = _default_sweep(argv)
        problem, cfg = cli.compose_problem(argv)
        problem = problem or run_dir.run_dir_problem(argv)
    flags = any(a.startswith("-") for a in argv)  # --cfg=job, --info: Hydra's, nothing runs
    if not problem and cfg is not None and not flags:  # a single run's plan: a refusal skips
        # main's two compositions (half of its second); main makes the plan again in ~10 ms
        problem = bench_config.planned(cfg, cli.pinned(argv))[1]
    if problem:
        print(f"invalid configuration: {problem}", file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = argv
    main()


def _default_sweep(argv: list[str]) -> list[str]:
    """The GPU default where no sweep is named and CUDA is there (cli.with_default_sweep),
    said in one line."""
    if cli.value(argv, "sweep") is not None:  # torch is not loaded for a named sweep
        return argv
    import torch

    chosen = cli.with_default_sweep(argv, torch.cuda.is_available())
    if chosen != argv:
        print(
            f"a GPU is here and no sweep is named: sweep={cli.GPU_DEFAULT} (sweep=quick: the CPU's)"
        )
    return chosen


if __name__ == "__main__":
    entry()
