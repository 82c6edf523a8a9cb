"""The GPU run's warm Triton cache (tools/gpurun/warm.py): a part replayed through Triton's JIT
for sm_90a finds, in a fresh process, the kernels an earlier replay packed and the GPU run
unpacked elsewhere; without the archive, or with the group files left pointing at the old
place, it compiles them again."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tools.gpurun import warm

ROOT = Path(__file__).resolve().parents[3]


def _replay(part: str, cache: Path) -> int:
    """The kernels `part`'s replay compiles, in a fresh process with the JIT (no interpreter)."""
    before = warm.compiled_kernels(cache)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    argv = [sys.executable, "-m", "tools.gpurun.warm", "--replay", part]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return warm.compiled_kernels(cache) - before


def test_a_replayed_part_hits_the_carried_cache_where_the_run_unpacks_it(tmp_path):
    cold, moved, empty = (tmp_path / n for n in ("cold", "moved", "empty"))
    for d in (cold, empty):
        d.mkdir()
    compiled = _replay("compiled", cold)  # RoPE at the target's shape: forward and backward
    assert compiled == 2
    archive = tmp_path / "carried" / "cache.tgz"
    assert warm.pack(cold, archive) == compiled
    assert warm.unpack(archive, moved) == compiled
    for group in moved.glob("*/__grp__*.json"):  # what a hit loads, named in its new place
        paths = [Path(p) for p in json.loads(group.read_text())["child_paths"].values()]
        assert {p.suffix for p in paths} == {".cubin", ".json"}
        assert all(p.parent == group.parent and p.exists() for p in paths)
    assert _replay("compiled", moved) == 0  # all hits
    assert _replay("compiled", empty) == compiled  # the control: cold, it compiles


def test_group_files_left_at_the_old_place_miss(tmp_path):
    cold, moved = tmp_path / "cold", tmp_path / "moved"
    cold.mkdir()
    _replay("compiled", cold)
    archive = tmp_path / "cache.tgz"
    warm.pack(cold, archive)
    moved.mkdir()
    with tarfile.open(archive) as tar:  # extracted as it is, paths not rewritten
        tar.extractall(moved, filter="data")
    for group in cold.glob("*/__grp__*.json"):
        for p in json.loads(group.read_text())["child_paths"].values():
            Path(p).unlink()  # the old place gone, as on another machine
    assert _replay("compiled", moved) == 2


def test_only_sweep_parts_can_be_replayed(capsys):
    with pytest.raises(SystemExit):
        warm.main(["--parts", "tests"])
    assert "--parts: 'tests' is not a sweep part" in capsys.readouterr().err
