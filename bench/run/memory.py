"""Peak memory of one call, per device: bytes of tensor storage the call had alive at once.

CUDA: torch.cuda.max_memory_allocated above what was allocated before the call.
CPU: the same quantity, counted by `LiveTensorBytes`, a TorchDispatchMode that sees every op's
outputs and frees. It counts each storage once (views share it) from the op that created it until
the last tensor on it dies. Input tensors built before the call are not counted, nor allocator
slack or non-tensor memory. (The process's RSS high-water mark was the alternative; it also
counts the allocator's caching, which hides a call's peak once an earlier call has grown the heap.)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    """Tracks the bytes of storages created inside the mode; `peak` is their high-water mark."""

    # Higher-order operators (FlexAttention on the CPU) reach __torch_dispatch__ like any op.
    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in Dynamo's `disable`, which imports Dynamo at
        # the first op: 2.7 s of every run's start for a probe that never compiles (compiled
        # rows are not probed on the CPU, bench/run/point.py).
        return False

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage key -> [nbytes, live tensors on it]
        self._seen_inputs: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):  # storages that existed before: never counted
                key = _key(t)
                if key not in self._refs:
                    self._seen_inputs.add(key)
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        key = _key(t)
        if key == 0 or key in self._seen_inputs:
            return
        entry = self._refs.get(key)
        if entry is None:
            entry = self._refs[key] = [t.untyped_storage().nbytes(), 0]
            self.live += entry[0]
            self.peak = max(self.peak, self.live)
        entry[1] += 1
        weakref.finalize(t, self._release, key)

    def _release(self, key: int) -> None:
        entry = self._refs[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self._refs[key]


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def peak_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor storage the call allocated and held at once (its result included)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with LiveTensorBytes() as probe:
        fn()
    return probe.peak


def peak_reserved_bytes(device: torch.device | str) -> int | None:
    """Right after peak_bytes on CUDA: the caching allocator's reserved pool at its largest
    since peak_bytes reset the statistics (cached blocks from earlier calls included): what
    the process held from the driver. None on the CPU (no such pool)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_reserved(device)


def available_bytes(device: torch.device) -> int | None:
    """Memory a call may still take: CUDA's free memory, or the CPU's MemAvailable (None where
    neither can be read)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def scores_bytes(point, itemsize: int, rows: int | None = None) -> int:
    """One (B, H, L, L) tensor of the point (B = rows when only those are computed)."""
    return (point.batch if rows is None else rows) * point.num_heads * point.seq_len**2 * itemsize


def too_big(need: int, device: torch.device, what: str) -> str | None:
    """Why `need` bytes do not fit (None if they do): over 90% of what is available."""
    free = available_bytes(device)
    if free is None or need <= 0.9 * free:
        return None
    return f"{what}: ~{need / 2**30:.1f} GiB needed; {free / 2**30:.1f} GiB available"


def inputs_too_big(case, point, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why a point cannot be built here (None if it may be): its inputs and output alone, the
    bytes its cost model says a forward call moves at least, over 90% of the memory available.
    Said before anything is allocated: on Linux an allocation past the memory succeeds and the
    kernel's OOM killer ends the process when the pages are touched, with no row written."""
    need = case.cost(point, dtype, "forward").bytes
    return too_big(need, device, "its inputs and output alone")
