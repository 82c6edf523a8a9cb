"""What a plugin's code that would end the process becomes: an error of its own row.

register_impl (bench/registry.py) wraps every plugin implementation here, so that its sys.exit,
or a KeyboardInterrupt it raises itself, ends its row as `error` and the run goes on with the
rows before kept; Ctrl-C and SIGTERM still end the run (their handler in bench/__main__.py sets
STOP first)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

STOP = threading.Event()  # set by the run's SIGINT and SIGTERM handlers (bench/__main__.py)


def guarded(fn: Callable) -> Callable:
    """A plugin's code with sys.exit, and a KeyboardInterrupt it raises itself (not Ctrl-C's:
    STOP is set then), turned into an error of its own row: the run goes on and keeps the rows
    before it. What it costs a timed call: one try block, tens of nanoseconds (a plugin's calls
    only)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
        except SystemExit as exc:
            raise RuntimeError(f"the implementation called sys.exit({exc.code!r})") from None
        except KeyboardInterrupt:
            if STOP.is_set():
                raise
            raise RuntimeError("the implementation raised KeyboardInterrupt") from None
        return out

    return call
