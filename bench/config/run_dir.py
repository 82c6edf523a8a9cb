"""The run's folder, before Hydra writes into it: its name from the overrides that change what
runs, and why a folder given cannot be used (a run there without resume=true, other files,
empty, a file, or nowhere to write)."""

from __future__ import annotations

import contextlib
import re
import tempfile
from pathlib import Path

from bench.config import cli


def run_dir_problem(argv: list[str]) -> str | None:
    """Why the run directory cannot be used, before Hydra writes into it: one that holds a run
    (without resume=true: a run is never overwritten, nor its .hydra/config.yaml), or one that
    cannot be written."""
    given = cli.value(argv, "hydra.run.dir")
    resume = str(cli.value(argv, "resume")).lower() == "true"
    if given is None and not cli.multirun(argv):
        given = "results/runs"  # the default's parent: <time>-<sweep> is made in it
    if given is None:
        return None
    if not str(given).strip():
        return "hydra.run.dir is empty: name a folder of the run's own (results/runs/<name>)"
    path = Path(given)
    if cli.value(argv, "hydra.run.dir") and not resume and path.is_dir() and _foreign(path):
        return (
            f"hydra.run.dir={given} holds other files: a run writes into a new or empty "
            "folder of its own (its report reads that folder's rows only)"
        )
    if (
        cli.value(argv, "hydra.run.dir")
        and not resume
        and ((path / "results.csv").exists() or (path / "pooled.json").exists())
    ):
        return (
            f"hydra.run.dir={given} holds a run: pass resume=true to finish it, or choose "
            "another directory (a run is never overwritten)"
        )
    existing = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    if not existing.is_dir():
        return f"hydra.run.dir={given}: {existing} is a file, not a directory"
    return _unwritable(path, given)


def _unwritable(path: Path, given: str) -> str | None:
    """Whether a file can be made in the folder, tried (permissions do not say it for root, nor
    for /proc or a read-only mount); what the try made is removed (Hydra makes it again)."""
    made = [p for p in [path, *path.parents] if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"hydra.run.dir={given}: cannot write there ({exc.strerror or exc})"
    finally:
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()
    return None


def _foreign(path: Path) -> bool:
    """Whether a folder holds anything but a run of its own (whose results.csv the check above
    names): a repository, a parent of runs, someone's files."""
    if (path / "results.csv").exists() or (path / "pooled.json").exists():
        return False
    return any(p.name not in (".hydra", ".lock") for p in path.iterdir())


def run_tag(override_dirname: str) -> str:
    """The overrides that change what a run measures, as a directory-name suffix:
    "cases=[rope],seq_len=128" -> "-cases_rope-seq_len_128" (Hydra sorts them; timing keys
    kept, the sweep (already in the name) and plumbing keys left out; whole overrides up to 160
    characters)."""
    keep = []
    for item in re.split(r",(?![^\[]*\])", override_dirname or ""):
        key = item.split("=", 1)[0]
        if not item or key.startswith(("sweep", "hydra", "resume", "calibrate", "seed", "report")):
            continue  # the sweep is in the name already; the rest do not change what runs
        keep.append(re.sub(r"[^A-Za-z0-9_.+-]+", "_", item).strip("_"))
    tag = ""
    for item in keep:  # whole overrides only, up to 160 characters
        if len(tag) + len(item) + 1 > 160:
            break
        tag += f"-{item}"
    return tag
