"""bench.run.memory counts the tensor bytes a call holds at its peak."""

import subprocess
import sys

import torch

from bench.run.memory import peak_bytes
from tests.helpers import ROOT

MIB = 1 << 20


def test_counts_new_storage_once_and_not_inputs():
    x = torch.empty(MIB // 4)  # 1 MiB of float32, built outside: not counted
    assert peak_bytes(lambda: x.add_(1)) == 0
    assert peak_bytes(lambda: x + 1) == MIB
    assert peak_bytes(lambda: (x + 1).view(2, -1).t()) == MIB  # views share the storage


def test_peak_is_the_high_water_mark_not_the_total():
    x = torch.empty(MIB // 4)

    def two_alive_then_freed():
        a = x * 2
        b = a + 1  # a and b alive together: 2 MiB
        del a, b
        return x * 3  # 1 MiB

    assert peak_bytes(two_alive_then_freed) == 2 * MIB

    def sequential():
        for _ in range(4):
            x * 2  # each freed before the next

    assert peak_bytes(sequential) == MIB


PROBE_ALONE = """
import sys, torch
from bench.run.memory import peak_bytes
x = torch.randn(1000)
assert peak_bytes(lambda: x + 1) == 4000
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""


def test_the_probe_does_not_load_dynamo():
    """A run's first probe must not import torch._dynamo (about 3 s of every command's start)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE_ALONE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout[:300]
