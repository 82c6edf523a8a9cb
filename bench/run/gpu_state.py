"""What the GPU was doing when a run started and when it ended: its SM and memory clocks, its
power limit and draw, its temperature, and the reasons NVML gives for holding the clocks down
(a power cap, thermal slowdown, ...), read through pynvml (nvidia-ml-py) where it is installed.
A GPU held below its clocks times slower than the same GPU free: env.json keeps both
snapshots, so a reader can tell a slow run from a slow kernel, and each timed group's Window
says what held the clocks down while it ran (a row's `gpu_held`, marked in the report). None
without CUDA."""

from __future__ import annotations

from functools import cache

import torch

# NVML's clocks-event (throttle) reason bits, by the names its documentation gives them
REASONS = {
    "idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
HOLDS_DOWN = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
# NVML's counters of the time spent held by a policy (nvmlDeviceGetViolationStatus), by the
# name a row gives them: a hold that starts and ends inside a window shows in them, not in the
# reasons read at its two ends
POLICIES = {
    "power_violation": "NVML_PERF_POLICY_POWER",
    "thermal_violation": "NVML_PERF_POLICY_THERMAL",
}


def snapshot(index: int = 0) -> dict | None:
    """The GPU's state now (clocks in MHz, power in W, temperature in C, `throttled`: the
    reasons that hold its clocks down), or why it could not be read; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    try:
        import pynvml
    except ImportError:
        return {"nvml": "not read: pip install nvidia-ml-py"}
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        bits = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        reasons = [name for name, bit in REASONS.items() if bits & bit]
        return dict(
            sm_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            mem_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            power_w=pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
            power_limit_w=pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
            temperature_c=pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            reasons=reasons,
            throttled=[r for r in reasons if r in HOLDS_DOWN],
        )
    except Exception as exc:  # noqa: BLE001 - NVML's own errors: said, never fatal
        return {"nvml": f"not read: {type(exc).__name__}: {exc}"[:200]}


@cache
def _nvml():
    """(pynvml, the current GPU's handle), or None where NVML cannot be read; once a process
    (NVML's start takes milliseconds)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - not installed, no driver: no window, the row says ""
        return None


class Window:
    """What held the GPU's clocks down while one group of rows was timed: the HOLDS_DOWN
    reasons at the window's start and end, and the POLICIES whose time counters moved in
    between. Reading it costs a few NVML calls (microseconds), outside the samples."""

    def __init__(self, nvml):
        self.nvml, self.handle = nvml
        self.start_held, self.start_counts = self._held(), self._counts()

    def _held(self) -> set[str]:
        try:
            bits = self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle)
        except Exception:  # noqa: BLE001 - a GPU without the query
            return set()
        return {name for name in HOLDS_DOWN if bits & REASONS[name]}

    def _counts(self) -> dict[str, int]:
        counts = {}
        for name, policy in POLICIES.items():
            try:
                status = self.nvml.nvmlDeviceGetViolationStatus(
                    self.handle, getattr(self.nvml, policy)
                )
                counts[name] = int(status.violationTime)
            except Exception:  # noqa: BLE001 - not every GPU counts every policy
                continue
        return counts

    def held(self) -> str:
        """The reasons, comma-separated and sorted, or "" when nothing held the clocks down."""
        moved = {n for n, c in self._counts().items() if c > self.start_counts.get(n, c)}
        return ",".join(sorted(self.start_held | self._held() | moved))


def window(device) -> Window | None:
    """A Window opened now on a CUDA device whose NVML can be read; None elsewhere."""
    if getattr(device, "type", str(device)) != "cuda":
        return None
    nvml = _nvml()
    return None if nvml is None else Window(nvml)
