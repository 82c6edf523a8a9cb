"""Hydra callbacks of a multirun (configs/bench.yaml names them): every job's configuration
checked before the first starts, and one report over every job's results at the end.

Hydra passes no job results to on_multirun_end, so the report is built from the sweep directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra.experimental.callback import Callback

from bench.config import cli
from bench.config.plan import make_plan


class AggregateRuns(Callback):
    def on_multirun_start(self, config, **kwargs) -> None:
        """A job whose values are invalid fails here, before any job has run."""
        task = list(config.hydra.overrides.task)
        for num, overrides in enumerate(cli.job_overrides(task)):
            try:
                make_plan(cli.apply(config, overrides), cli.pinned(overrides))
            except ValueError as exc:
                print(
                    f"invalid configuration: job {num} ({' '.join(overrides)}): {exc}; "
                    "no job was run",
                    file=sys.stderr,
                )
                sys.exit(2)

    def on_multirun_end(self, config, **kwargs) -> None:
        # imported here: Hydra loads this module for every run, a single one included
        from bench.report import build as report
        from bench.report import rows

        sweep_dir = Path(config.hydra.sweep.dir)
        if rows.has_rows([sweep_dir]):
            report.build([sweep_dir])
            print(f"multirun report: {sweep_dir / 'report.md'}")
        else:
            print("nothing to report: no job measured a row")
