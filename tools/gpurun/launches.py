"""A pytest plugin that counts the distinct Triton specializations a test session launches, as
the JIT of an sm_90a GPU would key them, while the kernels run under Triton's interpreter: the
count of kernels the GPU run's test part compiles (tools/gpurun/estimate.py).

    TRITON_INTERPRET=1 python -m pytest -p tools.gpurun.launches tests/posenc_kernels \
        tests/bench/run/test_timing.py \
        --launches-out results/gpu-compile/test-launches.json

Each launch is bound by Triton's own binder for a CUDA backend (pointer alignment, integer
divisibility by 16, unit values, constexprs, launch options): the key the JIT's in-memory cache
uses, so two launches share a compile exactly when the GPU would compile once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

SEEN: dict[str, set[str]] = {}  # kernel name -> distinct specialization keys
TESTS = Counter()  # test outcomes


def pytest_addoption(parser):
    parser.addoption(
        "--launches-out",
        default=None,
        metavar="PATH",
        help="write the distinct Triton specializations per kernel as JSON",
    )


def pytest_configure(config):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction, create_function_from_signature

    backend = make_backend(GPUTarget("cuda", 90, 32))
    binders = {}
    run = InterpretedFunction.run

    def counted(self, *args, grid, warmup, **kwargs):
        if self.fn not in binders:
            jit = JITFunction(self.fn)
            binders[self.fn] = create_function_from_signature(jit.signature, jit.params, backend)
        options = dict(kwargs, debug=False, instrumentation_mode="", fpsan_homomorphic_casts=False)
        try:
            _bound, specialization, opts = binders[self.fn](*args, **options)
            key = repr((specialization, sorted(opts.items()) if isinstance(opts, dict) else opts))
        except Exception as exc:  # noqa: BLE001 (a binder mismatch is reported, not fatal)
            key = f"unbound: {type(exc).__name__}: {exc}"
        SEEN.setdefault(self.fn.__name__, set()).add(key)
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = counted


def pytest_runtest_logreport(report):
    if report.when == "call":
        TESTS[report.outcome] += 1


def pytest_sessionfinish(session):
    path = session.config.getoption("--launches-out")
    kernels = {name: len(keys) for name, keys in sorted(SEEN.items())}
    if path:
        out = {"kernels": kernels, "tests": sum(TESTS.values()), "outcomes": dict(TESTS)}
        Path(path).write_text(json.dumps(out, indent=2) + "\n")
