"""What the kernel tests share about their device: CUDA where there is one, else the CPU (the
kernels then run under Triton's interpreter), and bad values the kernels check on the device."""

import subprocess
import sys
from pathlib import Path

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).parents[2]


def on_device(args: dict) -> dict:
    """The call's tensors on DEVICE, everything else as it is."""
    return {n: t.to(DEVICE) if isinstance(t, torch.Tensor) else t for n, t in args.items()}


def fails_on_the_device(module: str, what: str) -> None:
    """On CUDA, BAD case `what` of tests.posenc_kernels.`module` run in a process of its own,
    which must end on a device-side assertion: the kernels check values (slots, positions,
    block ids) with torch._assert_async, without a host sync, and a CUDA assertion leaves the
    process's CUDA context unusable, so it cannot run in the test's own process."""
    code = (
        f"import torch; from tests.posenc_kernels.{module} import BAD; "
        f"next(b[1] for b in BAD if b[0] == {what!r})(); torch.cuda.synchronize()"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert run.returncode != 0 and "assert" in (run.stdout + run.stderr).lower(), run.stderr[-2000:]
