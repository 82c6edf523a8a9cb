"""The GPU's state in env.json (bench/run/gpu_state.py): clocks, power, temperature and the
reasons NVML gives for holding the clocks down, read through a stand-in pynvml here (the
GPU box reads the real one); nothing without CUDA, one line when NVML cannot be read."""

import dataclasses
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


class _Violation:
    def __init__(self, ns):
        self.violationTime = ns


def _window_nvml(monkeypatch, bits: list[int], power_ns: list[int]):
    """A stand-in NVML whose reasons and power counter take the listed values, one per read."""
    reads = {"bits": iter(bits), "power": iter(power_ns)}

    def violation(handle, policy):
        if policy != "power":
            raise RuntimeError("Not Supported")  # a GPU without the thermal counter
        return _Violation(next(reads["power"]))

    fake_module(
        monkeypatch,
        "pynvml",
        **dict(
            _nvml(0),
            nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: next(reads["bits"]),
            nvmlDeviceGetViolationStatus=violation,
            NVML_PERF_POLICY_POWER="power",
            NVML_PERF_POLICY_THERMAL="thermal",
        ),
    )
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    gpu_state._nvml.cache_clear()


def test_a_window_says_what_held_the_clocks_while_it_was_open(monkeypatch):
    """The reasons at either end, and a power hold that came and went inside (its counter
    moved); nothing held: ""; off CUDA, no window."""
    _window_nvml(monkeypatch, [0x1, 0x20], [100, 100])
    assert gpu_state.window(torch.device("cuda")).held() == "sw_thermal"  # idle is no hold
    _window_nvml(monkeypatch, [0, 0], [100, 250])
    assert gpu_state.window(torch.device("cuda")).held() == "power_violation"
    _window_nvml(monkeypatch, [0x1, 0x1], [100, 100])
    assert gpu_state.window(torch.device("cuda")).held() == ""
    assert gpu_state.window(torch.device("cpu")) is None
    gpu_state._nvml.cache_clear()


def test_the_window_reaches_the_rows_column_and_survives_passes(monkeypatch, tmp_path):
    """measure_side_by_side opens a window around its group (here a stand-in on the CPU) and
    each Timing carries it; the row's gpu_held column; pooled passes keep any pass's hold."""
    from bench.registry import Cost
    from bench.run.metrics import row_metrics
    from bench.run.passes import Pool
    from bench.run.timing import Budget, measure_side_by_side

    class Held:
        def held(self):
            return "sw_power_cap"

    monkeypatch.setattr(gpu_state, "window", lambda device: Held())
    budget = Budget(warmup_s=0, min_reps=2, max_reps=2, budget_s=0)
    timings = measure_side_by_side({"a": lambda: None, "b": lambda: None}, "cpu", budget)
    assert {t.gpu_held for t in timings.values()} == {"sw_power_cap"}
    assert row_metrics(Cost(0, 0), timings["a"], {}, None)["gpu_held"] == "sw_power_cap"
    pool = Pool(tmp_path / "pooled.json", passes=2)
    pool.add(("k",), timings["a"], None)
    free = dataclasses.replace(timings["a"], gpu_held="", wall_ms=0.5)
    pooled, _ = pool.add(("k",), free, None)
    assert pooled.gpu_held == "sw_power_cap" and pooled.wall_ms == 0.5 and pooled.n == 4
