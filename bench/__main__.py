"""`python -m bench [overrides]`: one sweep (or, with -m, a Hydra multirun) -> results/.

Config: configs/bench.yaml with the schema in bench/config.py. Examples:
    python -m bench                                   # the default sweep (quick)
    python -m bench sweep=seed_5_2                    # the tutorial's section 5.2, then done right
    python -m bench -m batch=1,8 seq_len=128,512      # a multirun, aggregated at the end
    python -m bench profile=true cases=rope impls=reference
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench import config as bench_config
from bench import profile, report
from bench.results import write_env
from bench.runner import Runner

bench_config.register()


@hydra.main(config_path="../configs", config_name="bench", version_base="1.3")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    pinned = frozenset(o.split("=", 1)[0].lstrip("+~") for o in hydra_cfg.overrides.task)
    try:
        plan = bench_config.make_plan(cfg, pinned)
    except ValueError as exc:  # before anything runs
        print(f"invalid configuration: {exc}", file=sys.stderr)
        sys.exit(2)
    out_dir = Path(hydra_cfg.runtime.output_dir)
    if cfg.profile:
        profile.run(plan, cfg, out_dir)
        return
    runner = Runner(
        plan, cfg.timing, out_dir, run_id=out_dir.name, resume=cfg.resume,
        tutorial_timing=cfg.tutorial_timing, do_calibrate=cfg.calibrate, seed=cfg.seed,
    )  # fmt: skip
    summary = runner.run()
    overrides = list(hydra_cfg.overrides.task)
    write_env(out_dir / "env.json", {"run_id": out_dir.name, "overrides": overrides, **summary})
    print(
        f"{runner.done} rows in {summary['wall_s']:.1f} s "
        f"(harness overhead {summary['overhead_pct']:.1f}% of the wall time) -> {out_dir}"
    )
    if hydra_cfg.mode != RunMode.MULTIRUN:  # a multirun reports once, at its end (callbacks)
        report.build([out_dir])
        if cfg.tutorial_timing:  # sweep=seed_5_2: print the table that extends section 5.2
            print("\n".join(report.tutorial_table(report.load([out_dir]))))
        print(f"report: {out_dir / 'report.md'}")
    OmegaConf.save(cfg, out_dir / "config.yaml")


if __name__ == "__main__":
    main()
