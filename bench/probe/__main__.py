"""`python -m bench.probe [overrides]` (`make probe`): the length-generalization probe.

Trains a tiny Transformer per (encoding, task, seed) at train_len and measures exact-match
accuracy at eval_factors x train_len; writes results/probe/<time>-<size>/probe.csv (a row per
encoding, schedule, task, length, seed, flushed as each cell ends), probe.md, probe.png,
config.yaml and env.json. Config: configs/probe.yaml, sizes in configs/probe/ (cpu: the
default; gpu; tiny: the tests'). Examples:
    python -m bench.probe                                   # about 9 minutes on 2 CPU cores
    python -m bench.probe probe=gpu                         # a GPU box
    python -m bench.probe encodings=[rope,alibi] tasks=[lookback] seeds=[0]
    python -m bench.probe resume=true hydra.run.dir=results/probe/<run>   # finish a run
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from bench.config.plan import changed_since
from bench.probe import config as probe_config
from bench.probe import report
from bench.probe.run import PROBE, run_cell
from bench.probe.train import TrainConfig
from bench.results import ResultsWriter, git_sha, write_env

probe_config.register()


# tasks whose cells train longest start first, so that the last cells in flight are short ones
_SLOW_FIRST = ("copy", "reverse", "recall")


def _cells(cfg: DictConfig, plan: dict) -> list[dict]:
    train = TrainConfig(**OmegaConf.to_container(cfg.train))
    slow = {t: i for i, t in enumerate(_SLOW_FIRST)}
    tasks = sorted(plan["tasks"], key=lambda t: slow.get(t, len(slow)))
    return [
        {
            "encoding": e,
            "task": t,
            "seed": s,
            "train_len": cfg.train_len,
            "eval_factors": plan["eval_factors"],
            "rope_eval_scalings": plan["rope_eval_scalings"],
            "eval_examples": cfg.eval_examples,
            "causal": cfg.causal,
            "device": cfg.device,
            "threads": cfg.threads,
            "train": train,
        }
        for t in tasks
        for e in plan["encodings"]
        for s in plan["seeds"]
    ]


def _done(cell: dict, existing: set) -> bool:
    """A resumed run skips a cell whose plain evaluation at every length is written."""
    return all(
        (cell["encoding"], "none", cell["task"], str(cell["seed"]), str(f * cell["train_len"]))
        in existing
        for f in cell["eval_factors"]
    )


# keys a resumed run may change: which cells exist, and how many run at once
FREE_ON_RESUME = ("resume", "encodings", "tasks", "seeds", "workers", "threads")


def _unlike(cfg: DictConfig, out_dir: Path) -> str | None:
    """Why resuming out_dir with cfg would mix unlike rows (None if it would not): any
    training or evaluation setting other than the saved run's."""
    diffs = changed_since(out_dir / "config.yaml", cfg, FREE_ON_RESUME)
    if diffs:
        return f"resume=true: {out_dir} was trained with another configuration ({diffs})"
    return None


def _with_earlier_cells(cfg: DictConfig, path: Path) -> DictConfig:
    """The configuration a run saves: cfg, and on resuming, the encodings, tasks and seeds of the
    earlier parts kept before its own, so that config.yaml names every cell in probe.csv."""
    if not cfg.resume or not path.exists():
        return cfg
    earlier, merged = OmegaConf.load(path), OmegaConf.to_container(cfg)
    for key in ("encodings", "tasks", "seeds"):
        merged[key] = list(dict.fromkeys([*earlier[key], *cfg[key]]))
    return OmegaConf.create(merged)


def _execute(cells: list[dict], workers: int, writer: ResultsWriter) -> int:
    """Runs the cells, `workers` at a time, writing each one's rows as it ends."""
    done = 0

    def write(cell: dict, rows: list[dict]) -> None:
        nonlocal done
        done += 1
        for row in rows:
            if PROBE.key_of(row) not in writer.existing:
                writer.append(row)
        first = next((r for r in rows if r["factor"] == 1), rows[0])
        acc = first.get("accuracy")
        said = f"{acc:.3f} at train_len" if isinstance(acc, float) else first["status"]
        print(
            f"[{done}/{len(cells)}] {cell['encoding']} {cell['task']} seed {cell['seed']}: "
            f"{said} ({first.get('train_s', 0):.0f} s)",
            flush=True,
        )

    if workers == 1:
        for cell in cells:
            write(cell, run_cell(cell))
        return done
    ctx = multiprocessing.get_context("spawn")  # no fork of a threaded torch
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = {pool.submit(run_cell, cell): cell for cell in cells}
        for future in as_completed(futures):
            write(futures[future], future.result())
    return done


@hydra.main(config_path="../../configs", config_name="probe", version_base="1.3")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        plan = probe_config.validate(cfg)
    except ValueError as exc:
        print(f"invalid configuration: {exc}", file=sys.stderr)
        if out_dir.is_dir() and not (out_dir / "probe.csv").exists():
            shutil.rmtree(out_dir, ignore_errors=True)
        sys.exit(2)
    if cfg.resume and (why := _unlike(cfg, out_dir)):
        print(f"invalid configuration: {why}", file=sys.stderr)
        sys.exit(2)
    writer = ResultsWriter(out_dir / "probe.csv", PROBE)
    cells = [c for c in _cells(cfg, plan) if not (cfg.resume and _done(c, writer.existing))]
    workers = cfg.workers or (1 if cfg.device == "cuda" else os.cpu_count() or 1)
    workers = min(workers, max(1, len(cells)))
    print(
        f"{len(cells)} cells (encoding x task x seed) to train on {cfg.device}, "
        f"{workers} at a time -> {out_dir}",
        flush=True,
    )
    start, sha = time.perf_counter(), git_sha()  # the code that trains, not the code at the end
    OmegaConf.save(_with_earlier_cells(cfg, out_dir / "config.yaml"), out_dir / "config.yaml")
    try:
        _execute(cells, workers, writer)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: finished cells are in {out_dir / 'probe.csv'}; finish with "
            f"python -m bench.probe ... resume=true hydra.run.dir={out_dir}",
            file=sys.stderr,
        )
        sys.exit(130)
    finally:
        writer.close()
    wall = time.perf_counter() - start
    extra = {
        "run_id": out_dir.name,
        "git_sha": sha,
        "wall_s": round(wall, 1),
        "workers": workers,
        "overrides": list(hydra_cfg.overrides.task),
    }
    env_path = out_dir / "env.json"
    if cfg.resume and env_path.exists():  # the earlier parts' provenance, kept
        before = json.loads(env_path.read_text())
        extra["earlier"] = [{k: v for k, v in before.items() if k != "earlier"}]
        extra["earlier"] += before.get("earlier", [])
    write_env(env_path, extra)
    report.build(out_dir)
    print(f"{len(cells)} cells in {wall:.0f} s; table: {out_dir / 'probe.md'}")


if __name__ == "__main__":
    main()
