"""What happens to freed CPU memory between timed calls (timing.cpu_heap).

glibc's malloc gives a block above its mmap threshold (32 MiB at most by default) back to the
kernel when it is freed, so a call whose output is larger writes it onto fresh pages every
time: at Llama-3.1-8B's shapes RoPE's 33.5 MB output costs about 8,500 page faults a call, 17 ms
against the 4 ms rotation (docs/performance.md). CUDA's caching allocator keeps such blocks for
the next call, as jemalloc and tcmalloc do on the CPU (PyTorch's CPU tuning advice). `keep`, the
default, makes glibc keep them too, for the whole process: no mmap and no trim below 1 GiB
(mallopt). The process then holds its heap's high-water mark (up to 1 GiB more) until it ends.
`system` leaves the C library's defaults; a C library without mallopt is said and left alone.
"""

from __future__ import annotations

import ctypes

CHOICES = ("keep", "system")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
KEEP_BYTES = 1 << 30


def apply(choice: str) -> str:
    """Sets the process's heap as timing.cpu_heap says -> a line for the run's log."""
    if choice == "system":
        return "CPU heap: the C library's defaults (timing.cpu_heap=system)"
    try:
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    except (OSError, AttributeError):
        return "CPU heap: no mallopt in this C library; its defaults (timing.cpu_heap=keep)"
    done = mallopt(M_MMAP_THRESHOLD, KEEP_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, KEEP_BYTES) == 1
    if not done:
        return "CPU heap: the C library refused mallopt; its defaults (timing.cpu_heap=keep)"
    return (
        "CPU heap: freed blocks below 1 GiB stay with the process, as a caching allocator keeps "
        "them (timing.cpu_heap=keep; system: the C library's defaults)"
    )
