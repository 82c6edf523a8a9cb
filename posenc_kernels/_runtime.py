"""What the launchers ask of the process they run in."""

import os
import sys
import threading
from contextlib import contextmanager

import torch


def compiling() -> bool:
    """torch.compiler.is_compiling() without its first call's import of Dynamo (about a second
    of every eager process's start): nothing is being traced while Dynamo is not loaded."""
    return "torch._dynamo" in sys.modules and torch.compiler.is_compiling()


def interpreting() -> bool:
    """Kernels run by Triton's interpreter on the CPU (TRITON_INTERPRET=1, read per call)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


_NATIVE = threading.local()


@contextmanager
def native_cpu():
    """Within it, CPU tensors take the C kernels even under the interpreter (their tests and
    the harness's CPU rows; the interpreter is for the Triton kernels' own tests)."""
    before = getattr(_NATIVE, "on", False)
    _NATIVE.on = True
    try:
        yield
    finally:
        _NATIVE.on = before


def takes_c_kernel(t: torch.Tensor) -> bool:
    """A CPU tensor for the C kernels: outside the interpreter, or within native_cpu()."""
    return t.device.type == "cpu" and (getattr(_NATIVE, "on", False) or not interpreting())
