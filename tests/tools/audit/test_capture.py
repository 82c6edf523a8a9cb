"""The compile audit's launch capture (tools/audit/capture.py, `make gpu-compile`) calls each
kernel's launcher as the package now defines it: every default spec records its launches on
meta tensors (no compile, no GPU), so a launcher whose arguments changed fails here, in
`make test`, not only in CI's compile step. In a process of its own, without Triton's
interpreter (which this test session runs under), as the audit runs."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]
CODE = """
from tools.audit.capture import capture
from tools.audit.specs import specs
for kind in ("rope", "rope_cache", "relbias"):
    for spec in specs(kind):
        assert capture(spec, 90), spec.variant
print("captured")
"""


def test_every_default_spec_records_its_launches():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and "captured" in run.stdout, run.stderr[-3000:]
