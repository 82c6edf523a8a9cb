"""What the launchers ask of the process they run in."""

import os
import sys

import torch


def compiling() -> bool:
    """torch.compiler.is_compiling() without its first call's import of Dynamo (about a second
    of every eager process's start): nothing is being traced while Dynamo is not loaded."""
    return "torch._dynamo" in sys.modules and torch.compiler.is_compiling()


def interpreting() -> bool:
    """Kernels run by Triton's interpreter on the CPU (TRITON_INTERPRET=1, read per call)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"
