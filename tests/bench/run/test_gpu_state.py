"""The GPU's state in env.json (bench/run/gpu_state.py): clocks, power, temperature and the
reasons NVML gives for holding the clocks down, read through a stand-in pynvml here (the
GPU box reads the real one); nothing without CUDA, one line when NVML cannot be read."""

import sys

import torch

from bench.run import gpu_state
from tests.helpers import fake_module


def _nvml(bits: int, fail: bool = False) -> dict:
    def clock(handle, which):
        return {"sm": 1410, "mem": 2619}[which]

    def init():
        if fail:
            raise RuntimeError("NVML Shared Library Not Found")

    return dict(
        nvmlInit=init,
        nvmlDeviceGetHandleByIndex=lambda i: "gpu0",
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: bits,
        nvmlDeviceGetClockInfo=clock,
        NVML_CLOCK_SM="sm",
        NVML_CLOCK_MEM="mem",
        nvmlDeviceGetPowerUsage=lambda h: 612_000,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetTemperature=lambda h, which: 71,
        NVML_TEMPERATURE_GPU=0,
    )


def test_a_power_capped_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_module(monkeypatch, "pynvml", **_nvml(0x4 | 0x1))
    state = gpu_state.snapshot()
    assert state == dict(
        sm_mhz=1410,
        mem_mhz=2619,
        power_w=612.0,
        power_limit_w=700.0,
        temperature_c=71,
        reasons=["idle", "sw_power_cap"],
        throttled=["sw_power_cap"],
    )


def test_without_cuda_nothing_and_without_nvml_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_state.snapshot() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert gpu_state.snapshot() == {"nvml": "not read: pip install nvidia-ml-py"}
    fake_module(monkeypatch, "pynvml", **_nvml(0, fail=True))
    said = gpu_state.snapshot()["nvml"]
    assert said.startswith("not read: RuntimeError: NVML") and "\n" not in said
