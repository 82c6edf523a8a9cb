"""What the launchers ask of the process they run in."""

import functools
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


def launches(fn):
    """Decorates a function that launches kernels. Under Triton's interpreter, each launch
    patches triton.language into its numpy semantics once, as the interpreter does, and the
    @triton.jit helpers the kernel calls find it patched: the interpreter itself patches it
    again at every helper call (a scan of the whole language per call, 40-50% of an interpreted
    attention kernel's time) and never undoes those. Results are unchanged; nothing happens on
    a GPU, and Triton is left as it was outside these calls. Nor does the interpreter compute
    overflow checks it then drops (_no_dropped_checks)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not interpreting():
            return fn(*args, **kwargs)
        with _patched_once_per_launch(), _no_dropped_checks():
            return fn(*args, **kwargs)

    return wrapper


@contextmanager
def _no_dropped_checks():
    """With sanitize_overflow on (the interpreter's default), Triton redoes every 32-bit integer
    op of a kernel in 64 bits and compares it with the type's bounds, then hands the result to
    device_assert, which drops it unless debug is on (off in the interpreter): about a third of
    an interpreted kernel's time for nothing. Off for the launch while debug is off; as it was
    after."""
    import dataclasses

    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if not getattr(options, "sanitize_overflow", False) or getattr(options, "debug", True):
        yield
        return
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    try:
        yield
    finally:
        builder.options = options


class _Unpatched:
    def restore(self) -> None:  # what a launch patched, its own scope undoes
        pass


@contextmanager
def _patched_once_per_launch():
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang", None)
    if original is None or getattr(original, "once_per_launch", False):  # another Triton, nested
        yield
        return
    patched: set[int] = set()  # ids of the language modules the running launch has patched

    def patch_lang(fn):
        mods = fn.__globals__.values()
        langs = {id(m) for m in mods if inspect.ismodule(m) and m in (tl, tl.core)}
        if patched and langs <= patched:
            return _Unpatched()
        scope = original(fn)
        if patched:  # a helper seeing another module: patched as the interpreter would
            patched.update(langs)
            return scope
        patched.update(langs)
        restore = scope.restore

        def undo() -> None:  # the launch's end
            patched.clear()
            restore()

        scope.restore = undo
        return scope

    patch_lang.once_per_launch = True
    interpreter._patch_lang = patch_lang
    try:
        yield
    finally:
        interpreter._patch_lang = original
