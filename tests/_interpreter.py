"""Triton's interpreter made faster for the tests (and the harness runs and GPU-run rehearsal
they start): `install()` wraps every interpreted launch so that it patches triton.language into
its numpy semantics once, as the interpreter does, and the @triton.jit helpers the kernel calls
find it patched; the interpreter itself patches it again at every helper call (a scan of the
whole language per call, 40-50% of an interpreted attention kernel's time) and never undoes
those. Nor does a launch compute the overflow checks the interpreter then drops
(_no_dropped_checks). Results are unchanged; Triton is left as it was outside each launch.
Installed by tests/conftest.py and, in the subprocesses the tests start, by
tests/_site/sitecustomize.py (on their PYTHONPATH)."""

from contextlib import contextmanager


def install() -> None:
    """Wraps the interpreter's launch (GridExecutor.__call__) once per process."""
    from triton.runtime import interpreter

    executor = getattr(interpreter, "GridExecutor", None)
    if executor is None or getattr(executor.__call__, "once_per_launch", False):
        return  # another Triton, or done
    call = executor.__call__

    def launch(self, *args, **kwargs):
        with _patched_once_per_launch(), _no_dropped_checks():
            return call(self, *args, **kwargs)

    launch.once_per_launch = True
    executor.__call__ = launch


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
