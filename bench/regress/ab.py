"""A/B timing in one job: the library of a base commit against the working tree's, side by side.

`python -m bench.regress --base-ref REF` (make regress BASE=REF). REF's posenc and posenc_kernels
are extracted with `git archive` into a temporary folder; two worker processes
(bench.regress.worker) load one library each, both with the working tree's suite and harness,
in this environment. The driver then alternates between them at the finest grain the suite has:
for every block and every case-mode, one side's rounds and then the other's, the order swapped
from block to block (AB, BA, ...), so that a machine that drifts over minutes, or a neighbour
that comes and goes, weighs on both sides alike. The gate judges the per-block ratios
current / base (bench.regress.paired): no stored baseline, no other machine, no other day.

Nothing is mixed: each worker reports the file of every module of ours it imported, and a side
whose posenc or posenc_kernels came from the other tree stops the run (exit 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from contextlib import ExitStack
from pathlib import Path

from bench.regress import suite, worker
from bench.regress.files import Unusable

LIBRARY = ("posenc", "posenc_kernels")  # what REF contributes; bench (the harness) is the tree's


def _git(tree: Path, *args: str, binary: bool = False):
    proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=not binary)
    return proc


def resolve(tree: Path, ref: str) -> str:
    """REF's commit id, or one line saying why there is none."""
    proc = _git(tree, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode != 0 or not proc.stdout.strip():
        raise Unusable(f"--base-ref: no commit {ref!r} in {tree} (a shallow clone? git fetch it)")
    return proc.stdout.strip()


def extract(tree: Path, sha: str, dest: Path) -> None:
    """REF's library (posenc, posenc_kernels) into dest, as committed."""
    missing = [p for p in LIBRARY if _git(tree, "cat-file", "-e", f"{sha}:{p}").returncode]
    if missing:
        raise Unusable(f"--base-ref: commit {sha[:12]} has no {', '.join(missing)}/")
    proc = _git(tree, "archive", "--format=tar", sha, *LIBRARY, binary=True)
    if proc.returncode != 0:
        raise Unusable(f"--base-ref: git archive of {sha[:12]} failed: {proc.stderr.strip()[:120]}")
    archive = dest / "library.tar"
    archive.write_bytes(proc.stdout)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()


class Side:
    """One worker process: a library (LIBRARY's folder) under the tree's suite."""

    def __init__(
        self, name: str, library: Path, tree: Path, slowdown: str | None, log: Path, device: str
    ):
        self.name, self.library, self.log = name, library, log
        boot = worker.BOOT.format("bench.regress.worker")
        argv = [sys.executable, "-c", boot, str(library), str(tree)]
        self.proc = subprocess.Popen(
            argv + ([slowdown] if slowdown else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env=dict(os.environ, **{suite.DEVICE_ENV: device}),
        )

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log.read_text().strip().splitlines()[-1:] or ["no output"]
            raise Unusable(f"the {self.name} side stopped: {tail[0][:150]} (log: {self.log})")
        answer = json.loads(line)
        if "error" in answer:
            raise Unusable(f"the {self.name} side: {answer['error']}")
        return answer

    def check_library(self) -> dict[str, str]:
        """Every module of posenc / posenc_kernels it loaded comes from its own library."""
        files = self.ask(op="modules")["files"]
        root = self.library.resolve()
        for name, file in sorted(files.items()):
            if name.split(".")[0] in LIBRARY and file and root not in Path(file).resolve().parents:
                raise Unusable(f"the {self.name} side imported {name} from {file}, not {root}")
        return files

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def run(
    tree: Path,
    ref: str,
    *,
    blocks: int,
    rounds: int,
    slowdown: str | None = None,
    logs: Path | None = None,
    keys: list[tuple[str, str]] | None = None,
    device: str = "cpu",
) -> dict:
    """Times the suite's case-modes on `device` (or `keys`) on both sides; -> the A/B record."""
    sha = resolve(tree, ref)
    keys = keys or suite.keys(device)
    with tempfile.TemporaryDirectory(prefix="regress-ab-") as tmp:
        library = Path(tmp)
        logs = logs or library
        logs.mkdir(parents=True, exist_ok=True)
        extract(tree, sha, library)
        pairs, cpus, files = [], set(), {}
        for block in range(blocks):
            with ExitStack() as stack:  # a fresh pair of processes per block (module docstring)
                sides = {
                    "base": Side("base", library, tree, None, logs / "ab-base.log", device),
                    "current": Side(
                        "current", tree, tree, slowdown, logs / "ab-current.log", device
                    ),
                }
                for side in sides.values():
                    stack.callback(side.close)
                cpus |= {tuple(side.ask(op="hello")["cpus"]) for side in sides.values()}
                if len(cpus) > 1:
                    raise Unusable(f"the sides run on different CPUs: {sorted(cpus)}")
                files = {s: side.check_library() for s, side in sides.items()}
                order = ("base", "current") if block % 2 == 0 else ("current", "base")
                for case, mode in keys:
                    times = {
                        s: sides[s].ask(op="time", case=case, mode=mode, rounds=rounds)["times"]
                        for s in order
                    }
                    pairs.append(dict(case=case, mode=mode, block=block, first=order[0], **times))
                for side in sides.values():
                    side.check_library()
    return {
        "suite": suite.SUITES[device],
        "threads": suite.THREADS,
        "cpus": list(cpus.pop()),
        "base_ref": ref,
        "base_commit": sha,
        "current": describe_tree(tree),
        "slowdown": slowdown,
        "blocks": blocks,
        "rounds": rounds,
        "libraries": {s: {p: f.get(p, "") for p in LIBRARY} for s, f in files.items()},
        "pairs": pairs,
    }


def describe_tree(tree: Path) -> str:
    """The working tree's commit, with +dirty when it has uncommitted changes."""
    head = _git(tree, "rev-parse", "HEAD").stdout.strip()[:12] or "no commit"
    dirty = _git(tree, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head + ("+dirty" if dirty else "")


def describe(record: dict) -> str:
    planted = f", {record['slowdown']} slowed down on purpose" if record["slowdown"] else ""
    return (
        f"A/B: {record['base_ref']} ({record['base_commit'][:12]}) against the working tree "
        f"({record['current']}){planted}; both on CPU {record['cpus']}, "
        f"{record['blocks']} blocks x {record['rounds']} rounds, the sides alternating"
    )


def save(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
