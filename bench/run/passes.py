"""Multi-pass pooling (timing.passes = P > 1): the runner sweeps the whole plan P times and each
row's samples are pooled, so that every row's median spans the whole run rather than the
seconds one group takes: what makes a CPU median repeat between runs on a VM whose speed drifts
over minutes. After every pass but the last the pending samples are saved (pooled.json, written
then renamed), so an interrupted run loses at most the pass it was in and resume=true goes on
from the next pass. A row is checked against its truth in the first pass only (the same seeded
inputs give the same result): later passes reuse its check's fields and skip the float64 truth.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bench.run.samples import Timing


class Pool:
    """Samples of the rows not yet written, by row key: each row's and its group's copy's, and
    the fields of its check (max_abs_err, err_ratio, a message)."""

    def __init__(self, path: Path, passes: int):
        self.path, self.passes = Path(path), passes
        self.rows: dict[tuple, dict[str, list[float]]] = {}

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> int:
        """-> the first pass to run, with the saved samples back (0: nothing saved)."""
        if not self.path.exists():
            return 0
        state = json.loads(self.path.read_text())
        if state["passes"] != self.passes:
            raise ValueError(
                f"timing.passes={self.passes}, but {self.path} was saved by a run "
                f"with timing.passes={state['passes']}: resume with that"
            )
        for key, row, copy, fields, *more in state["rows"]:
            first, others, held = (more + [None, None, None])[:3]
            self.rows[tuple(key)] = {
                "row": row,
                "copy": copy,
                "fields": fields,
                "first_ms": first,
                "others_cpu": others,
                "gpu_held": held,
            }
        return state["passes_done"]

    def save(self, passes_done: int) -> None:
        rows = [
            [
                list(key),
                p["row"],
                p["copy"],
                p.get("fields", {}),
                p.get("first_ms"),
                p.get("others_cpu"),
                p.get("gpu_held"),
            ]
            for key, p in self.rows.items()
        ]
        state = {"passes": self.passes, "passes_done": passes_done, "rows": rows}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.path)

    def checked(self, key: tuple) -> dict | None:
        """The fields of the row's check, when an earlier pass of this run checked it."""
        entry = self.rows.get(key)
        return None if entry is None else entry.get("fields")

    def note_check(self, key: tuple, fields: dict) -> None:
        if self.passes > 1:
            self.rows.setdefault(key, {"row": [], "copy": []})["fields"] = fields

    def add(self, key: tuple, t: Timing, copy_t: Timing | None) -> tuple[Timing, Timing | None]:
        """This pass's samples of a row (and of its group's copy) added to its earlier passes'
        -> the pooled Timings. With one pass, t and copy_t as they are."""
        if self.passes == 1:
            return t, copy_t
        pooled = self.rows.setdefault(key, {"row": [], "copy": []})
        pooled.setdefault("first_ms", t.first_ms)  # the first pass's: the compile, if any
        if t.others_cpu is not None:  # the busiest pass's: a row is marked if any pass was
            pooled["others_cpu"] = max(pooled.get("others_cpu") or 0.0, t.others_cpu)
        if t.gpu_held is not None:  # what held the GPU in any pass
            held = set(filter(None, (pooled.get("gpu_held") or "").split(",")))
            pooled["gpu_held"] = ",".join(sorted(held | set(filter(None, t.gpu_held.split(",")))))
        pooled["row"].extend(t.samples_ms)
        if copy_t is not None:
            pooled["copy"].extend(copy_t.samples_ms)
        method = copy_t.method if copy_t is not None else t.method
        copy = Timing(tuple(pooled["copy"]), method) if pooled["copy"] else None
        timing = dataclasses.replace(
            t,
            samples_ms=tuple(pooled["row"]),
            first_ms=pooled["first_ms"],
            others_cpu=pooled.get("others_cpu"),
            gpu_held=pooled.get("gpu_held"),
        )  # this pass's method, cpu_util and wall_ms
        return timing, copy

    def written(self, key: tuple) -> None:
        self.rows.pop(key, None)

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)  # every row is in results.csv now
