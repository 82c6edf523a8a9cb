"""Under Triton's interpreter, with the tests' launch wrapper (tests/_interpreter.py), a launch
patches triton.language once and its @triton.jit helpers find it patched: the same results,
Triton left as it was after the call; the processes the tests start get the same wrapper."""

import os
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

import posenc_kernels
from posenc import functional as F
from posenc_kernels._runtime import interpreting
from tests.helpers import PYTHONPATH, ROOT

pytestmark = pytest.mark.skipif(not interpreting(), reason="needs Triton's interpreter")


def test_a_launch_patches_the_language_once_and_leaves_triton_as_it_was(monkeypatch):
    from triton.runtime import interpreter

    calls = []
    original = interpreter._patch_lang

    def counting(fn):
        calls.append(fn.__name__)
        return original(fn)

    monkeypatch.setattr(interpreter, "_patch_lang", counting)
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 2, 8)  # (B, L, H, D)
    cos, sin = F.rope_cos_sin(3, 8)  # (L, D/2)
    got = posenc_kernels.apply_rope(q, k, cos, sin)
    # the kernel's own launch only, not again for its helper (_rotate_heads) per program
    assert calls == ["_rope_kernel"], calls
    assert interpreter._patch_lang is counting
    c, s = cos.double()[:, None], sin.double()[:, None]  # over the heads
    for g, x in zip(got, (q, k), strict=True):
        assert_close(g.double(), F.apply_rope(x.double(), c, s), atol=1e-6, rtol=1e-6)


def test_a_launch_computes_no_overflow_check_the_interpreter_would_drop(monkeypatch):
    """Every integer op's overflow check is skipped within a launch (device_assert would drop
    it: debug is off), and Triton's options are as they were after the call."""
    from triton.language.semantic import TritonSemantic
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    before = builder.options
    checked = []
    original = TritonSemantic.binary_op_sanitize_overflow_impl

    def counting(self, lhs, rhs, op):
        checked.append(self.builder.options.sanitize_overflow)
        return original(self, lhs, rhs, op)

    monkeypatch.setattr(TritonSemantic, "binary_op_sanitize_overflow_impl", counting)
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 2, 8)  # (B, L, H, D)
    cos, sin = F.rope_cos_sin(3, 8)  # (L, D/2)
    got = posenc_kernels.apply_rope(q, k, cos, sin)
    assert checked and not any(checked)  # integer ops ran, none with the check on
    assert builder.options is before and before.sanitize_overflow and not before.debug
    c, s = cos.double()[:, None], sin.double()[:, None]
    for g, x in zip(got, (q, k), strict=True):
        assert_close(g.double(), F.apply_rope(x.double(), c, s), atol=1e-6, rtol=1e-6)


def test_the_processes_the_tests_start_wrap_their_launches_too():
    """tests/_site/sitecustomize.py on their PYTHONPATH installs the wrapper where the
    interpreter runs, and nothing without it."""
    code = (
        "from triton.runtime import interpreter as i; "
        "print(hasattr(i.GridExecutor.__call__, 'once_per_launch'))"
    )
    for interpret, want in (("1", "True"), ("0", "False")):
        env = dict(os.environ, PYTHONPATH=PYTHONPATH, TRITON_INTERPRET=interpret)
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert proc.stdout.strip() == want, proc.stderr[-2000:]
