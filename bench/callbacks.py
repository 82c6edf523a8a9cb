"""Hydra callback: after a multirun, one report over every job's results.

Hydra passes no job results to on_multirun_end, so the report is built from the sweep directory.
"""

from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback

from bench import report


class AggregateRuns(Callback):
    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if any(sweep_dir.rglob("results.csv")):
            report.build([sweep_dir])
            print(f"multirun report: {sweep_dir / 'report.md'}")
