"""What the GPU was doing when a run started and when it ended: its SM and memory clocks, its
power limit and draw, its temperature, and the reasons NVML gives for holding the clocks down
(a power cap, thermal slowdown, ...), read through pynvml (nvidia-ml-py) where it is installed.
A GPU held below its clocks times slower than the same GPU free: env.json keeps both
snapshots, so a reader can tell a slow run from a slow kernel. None without CUDA."""

from __future__ import annotations

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
