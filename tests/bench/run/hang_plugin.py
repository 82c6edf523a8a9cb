"""A plugin whose implementations never finish, for the row time limit's tests: a call that
never returns, a torch.compile whose compile never ends, and a float64 truth that never ends
(an implementation with its own reference). Each waits on an event nobody sets."""

import threading

import torch

from bench.registry import Impl, register_impl

_NEVER = threading.Event()


def _rotate(inputs):
    return inputs["q"] * 1.0, inputs["k"] * 1.0


def _hangs(inputs):
    def call():
        _NEVER.wait()
        return _rotate(inputs)

    return call


def _hang_compile(inputs):
    def backend(graph, example_inputs):  # Dynamo calls it at the first call: the compile
        _NEVER.wait()
        return graph

    fn = torch.compile(lambda q, k: (q * 1.0, k * 1.0), backend=backend)
    return lambda: fn(inputs["q"], inputs["k"])


def _truth_that_hangs(inputs):
    _NEVER.wait()
    return _rotate(inputs)


register_impl("rope", "hangs", Impl(_hangs, note="never returns"))
register_impl("rope", "hang_compile", Impl(_hang_compile, compiled=True, note="compile hangs"))
register_impl(
    "rope",
    "hang_truth",
    Impl(lambda inputs: lambda: _rotate(inputs), reference=_truth_that_hangs, note="truth hangs"),
)
