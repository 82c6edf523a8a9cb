"""What a run prints as it goes: a progress bar on a terminal, else one plain line per row
with the time spent and the time left (bench/run/eta.py)."""

from __future__ import annotations

from tqdm import tqdm

from bench.run.eta import Eta


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return (
        f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"
        if minutes >= 60
        else f"{minutes}:{secs:02d}"
    )


class Progress:
    def __init__(self, total: int, eta: Eta, now):
        self.total, self.eta, self.now = total, eta, now
        self.bar = tqdm(total=total, disable=None, unit="row", dynamic_ncols=True)

    @property
    def plain(self) -> bool:
        """No terminal (CI, pipes): plain lines."""
        return bool(self.bar.disable)

    def step(self, n: int = 1) -> None:
        self.bar.update(n)

    def row(self, count: int, rows: int, task, row: dict) -> None:
        """A row written: count of rows rows in the file."""
        self.bar.update(1)
        if not self.plain:
            return
        ms = f"{row['p50_ms']:.3f} ms" if row.get("p50_ms") is not None else ""
        elapsed, left = self.now() - self.eta.start, self.eta.left(self.now())
        print(
            f"[{count}/{rows}, {clock(elapsed)} in, ~{clock(left)} left] "
            f"{row['case']} {row['impl']} {row['mode']} "
            f"{row['device']} {row['dtype']} {task.point.label(task.case.knob_names)}: "
            f"{row['status']} {ms} {row.get('message', '')}".rstrip(),
            flush=True,
        )

    def close(self) -> None:
        self.bar.close()
