"""The wheel owns only the project's own import names: none of them `kernels`, the top-level
package of Hugging Face's kernel hub, which transformers imports (docs/architecture.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[1]
OURS = {"bench", "posenc", "posenc_kernels"}


def test_the_wheel_holds_exactly_the_projects_packages(tmp_path):
    src = tmp_path / "src"  # a copy, so that the build leaves nothing in the checkout
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(".*", "results", "tests", "docs", "build", "*.egg-info"),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert top == OURS, sorted(top)
    assert not any(n.startswith("kernels/") for n in names)
    assert "posenc_kernels/rope.py" in names
