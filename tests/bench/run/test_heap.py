"""timing.cpu_heap (bench/run/heap.py): with `keep`, a call that allocates a 40 MB output again
and again stops faulting fresh pages in; with `system` (glibc's defaults) every call does.
Page faults are counted, not timed."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT

CALLS = """
import resource, sys, torch
from bench.run import heap
print(heap.apply(sys.argv[1]), file=sys.stderr)
x = torch.randn(10 * 2**20)  # 40 MiB: above glibc's largest mmap threshold
for _ in range(30):  # glibc settles on a heap that holds the blocks
    y = x * 2
    del y
faults = []
for _ in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    y = x * 2
    del y
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sorted(faults)[5])  # the median call: a neighbour's memory pressure can fault one in
"""


def _faults_per_call(choice: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CALLS, choice], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_stops_the_fresh_pages_of_each_call():
    system, keep = _faults_per_call("system"), _faults_per_call("keep")
    assert system > 5000, system  # 10,240 pages of 4 KiB, or fewer with huge pages
    assert keep < 100, keep
