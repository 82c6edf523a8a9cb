"""What the GPU runs launch, captured on the CPU: the launchers run on meta tensors of the real
shapes with `torch.cuda.get_device_capability` answering the target's and Triton's
`JITFunction.run` replaced by a recorder; each launch is bound by Triton's own binder for the
target (pointer and integer divisibility, unit strides as constants: what the JIT would give on
that GPU, allocations being 16-byte aligned). `capture` records one `Spec`'s launches
(tools/audit/specs.py: the audit's curated cover of the axes), `plan_launches` counts the
distinct compiles of any harness plan (the GPU run's estimates); `record_plan` is also what
the GPU run's warm cache replays through the JIT (tools/gpurun/warm.py)."""

from __future__ import annotations

import contextlib
import itertools
import os

import torch

from tools.audit.specs import Spec, family_of

# -- capture: the launchers, on meta tensors -------------------------------------------------


@contextlib.contextmanager
def recording(capability: int):
    """JITFunction.run records instead of launching; the GPU is `capability`."""
    from triton.runtime.jit import JITFunction

    launches = []

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs, grid))

    run, cap = JITFunction.run, torch.cuda.get_device_capability
    JITFunction.run = record
    torch.cuda.get_device_capability = lambda device=None: divmod(capability, 10)
    try:
        yield launches
    finally:
        JITFunction.run, torch.cuda.get_device_capability = run, cap


def _meta(*shape, dtype=torch.float32, grad=False):
    return torch.empty(*shape, dtype=dtype, device="meta", requires_grad=grad)


def _launch_rope(spec: Spec) -> None:
    """posenc_kernels.rope's launcher, forward and backward, at the Llama-like shape (per-token
    tables at the M-RoPE case's Qwen2-VL-7B-like one: Hq=28, Hk=4)."""
    from posenc_kernels import rope

    dtype = getattr(torch, spec.dtype)
    b, n, hq, hk, d = 8, 4096, 32, 8, spec.head_dim
    if spec.positions == "table":
        hq, hk = 28, 4
    rot = d if spec.rotary != "partial" else d // 4
    n_freq = rot // 8 if spec.rotary == "p_rope" else rot // 2
    shape = (lambda h: (b, n, h, d)) if spec.layout == "bshd" else (lambda h: (b, h, n, d))
    q, k = _meta(*shape(hq), dtype=dtype), _meta(*shape(hk), dtype=dtype)
    if spec.layout == "bhsd":
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # the launcher sees (B, L, H, D) views
    rows = (b, n) if spec.positions == "table" else (n,)
    cos, sin = _meta(*rows, n_freq), _meta(*rows, n_freq)
    scale = _meta(*rows, n_freq) if spec.xpos else None
    pos = {
        "none": None,
        "table": None,
        "per_seq": _meta(b, dtype=torch.int64),
        "ids": _meta(b, n, dtype=torch.int64),
    }[spec.positions]
    for backward in (False, True):
        rope._launch(
            q,
            k,
            torch.empty_like(q),
            torch.empty_like(k),
            cos,
            sin,
            scale,
            pos,
            0,
            rot,
            0,  # the rotated dims' start, a runtime argument: a slice at D - R compiles alike
            spec.interleaved,
            backward,
        )


def _launch_rope_cache(spec: Spec) -> None:
    """posenc_kernels.rope_cache's launcher at a Llama-3-8B-like serving step: T=2048 tokens, Hq=32,
    Hk=8, D=128, caches of 4096 blocks of 16 (per-token tables: M-RoPE's rows)."""
    from posenc_kernels import rope_cache

    dtype = getattr(torch, spec.dtype)
    t, hq, hk, d, blocks, page = 2048, 32, 8, spec.head_dim, 4096, 16
    rot = d if spec.rotary != "partial" else d // 4
    n_freq = rot // 8 if spec.rotary == "p_rope" else rot // 2
    qkv = _meta(t, hq + 2 * hk, d, dtype=dtype)  # one projection's output, split by views
    q, k, v = qkv.split((hq, hk, hk), dim=1)
    cache = _meta(blocks, page, hk, d, dtype=dtype)
    rows = t if spec.positions == "table" else 32768
    cos, sin = _meta(rows, n_freq), _meta(rows, n_freq)
    pos = None if spec.positions == "table" else _meta(t, dtype=torch.int64)
    slots = _meta(t, dtype=torch.int64)
    args = (cos, sin, pos, cache, torch.empty_like(cache), slots, rot, spec.interleaved)
    rope_cache._launch(q, k, v, torch.empty_like(q), *args)


# relbias sequences: (B, Lq, Lk, differentiated); decode (a step against caches of kv_lens,
# split), decode_end (Lq = 1 at the end of Lk, split), prefill (a chunk of 512 at the end of
# 4096, forward and backward), packed (4 documents in a row of 4096, forward and backward),
# paged (a step against paged caches of 4096 keys in blocks of 16, split), long (one row of
# 2**20 + 64 tokens in a (B, L, H, D) layout: a head past 2**31 elements, the kernels' WIDE)
SEQS = {
    "": (4, 4096, 4096, True),
    "decode": (4, 1, 4096, False),
    "decode_end": (4, 1, 4096, False),
    "prefill": (4, 512, 4096, True),
    "packed": (1, 4096, 4096, True),
    "paged": (4, 1, 4096, False),
    "long": (1, 2**20 + 64, 2**20 + 64, True),
}
PAGE = 16  # the paged caches' block size (vLLM's default)


def _sequence_args(spec: Spec, b: int, n: int) -> dict:
    """kv_lens (meta) or cu_seqlens: the host read of cu_seqlens replaced by its result."""
    from posenc_kernels import _relbias_seq, relbias

    if spec.seq == "decode":
        return {"kv_lens": _meta(b, dtype=torch.int32)}
    if spec.seq == "paged":
        return {
            "kv_lens": _meta(b, dtype=torch.int32),
            "block_table": _meta(b, n // PAGE, dtype=torch.int32),
        }
    if spec.seq != "packed":
        return {}
    cu = _meta(5, dtype=torch.int32)
    relbias.sequences = lambda *_a: _relbias_seq.Sequences(_relbias_seq.PACKED, cu, 4, 1500, 1500)
    return {"cu_seqlens": cu}


def _launch_relbias(spec: Spec) -> None:
    """posenc_kernels.relative_attention forward and backward (its autograd Function), at the GPU
    sweep's shape: B=4, H=16, L=4096 (SEQS: the decode, prefill and packed shapes)."""
    from posenc_kernels import _relbias_seq, relbias

    dtype = getattr(torch, spec.dtype)
    b, lq, n, grad = SEQS[spec.seq]
    h, d = 16, spec.head_dim
    q = _meta(b, h, lq, d, dtype=dtype, grad=grad)
    kv_shape = (b, spec.kv_heads or h, n, d)
    if spec.seq == "paged":  # (num_blocks, block_size, Hk, D): every row's blocks
        kv_shape = (b * n // PAGE, PAGE, spec.kv_heads or h, d)
    k, v = (_meta(*kv_shape, dtype=dtype, grad=grad) for _ in range(2))
    if spec.seq == "long":  # (B, L, H, D) memory seen as (B, H, L, D)
        q = _meta(b, lq, h, d, dtype=dtype, grad=grad).transpose(1, 2)
        k, v = (_meta(b, n, kv_shape[1], d, dtype=dtype, grad=grad).transpose(1, 2) for _ in "kv")
    family = family_of(spec.family)
    keys = k.shape[0] * k.shape[1] // b if spec.seq == "paged" else n  # a row's key positions
    # the kernel reads tables in float32
    tables = family.inputs(h, d, "meta", torch.float32, batch=b, keys=keys)
    for t in tables.get("params", {}).values():
        t.requires_grad_(grad)
    kwargs = family.kernel_args(tables)
    if spec.sinks:
        kwargs["sinks"] = _meta(h, grad=grad)
    if spec.window:
        kwargs["window"] = spec.window
    tiles = {
        "fwd_tiles": spec.fwd_tiles and relbias.Tiles(*spec.fwd_tiles),
        "bwd_tiles": spec.bwd_tiles and relbias.Tiles(*spec.bwd_tiles),
    }
    try:
        seq = _sequence_args(spec, b, n)
        out = relbias.relative_attention(q, k, v, causal=spec.causal, **kwargs, **tiles, **seq)
    finally:
        relbias.sequences = _relbias_seq.sequences
    if grad and spec.fwd_tiles is None:  # a forward candidate: its backward is the default's
        torch.autograd.grad(out, [q, k, v], torch.empty_like(out))


LAUNCHERS = {"rope": _launch_rope, "rope_cache": _launch_rope_cache, "relbias": _launch_relbias}


def bind_job(fn, args, kwargs, backend, capability: int) -> dict:
    """One recorded launch bound by Triton's binder for the target and packed as the JIT packs
    it: plain data that `triton.compile` takes (ASTSource's signature, constexprs, attrs and the
    options), so a compile from it lands under the key the GPU's JIT looks up."""
    from triton.runtime.jit import create_function_from_signature

    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, opts = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound, specialization, opts
    )
    return dict(
        module=fn.fn.__module__,
        name=fn.__name__,
        signature=signature,
        constexprs={k: _plain(v) for k, v in constexprs.items()},
        attrs=attrs,
        options=dict(options.__dict__),
        capability=capability,
    )


def capture(spec: Spec, capability: int) -> list[dict]:
    """The launches of one spec, specialized for the target: plain data a worker compiles."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    backend = make_backend(GPUTarget("cuda", capability, 32))
    with recording(capability) as launches:
        LAUNCHERS[spec.kernel](spec)
    jobs = []
    for fn, args, kwargs, _grid in launches:
        if spec.kernel == "relbias" and spec.bwd_tiles and "fwd" in fn.__name__:
            continue  # a backward candidate: its forward is the default's
        job = bind_job(fn, args, kwargs, backend, capability)
        jobs.append(dict(job, block=(kwargs.get("BLOCK_M"), kwargs.get("BLOCK_N"))))
    return jobs


def record_plan(plan, capability: int = 90) -> list:
    """The launches the `triton` rows of a harness plan make on a GPU of `capability`: each
    row's call (and its gradient, in the backward modes) run on meta tensors at its real shape."""
    from bench.cases import CASES
    from bench.registry import DTYPES
    from bench.run import check
    from bench.run.tasks import Task, leaves_of, make_call, run_for_check

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("record_plan records the JIT's launches: unset TRITON_INTERPRET")
    meta = torch.device("meta")
    # posenc_kernels.rope launches itself outside torch.compile
    with recording(capability) as launches:
        for entry in plan.entries:
            case = CASES[entry.case]
            if "triton" not in entry.impls:
                continue
            for point, mode, dtype in itertools.product(entry.points, entry.modes, entry.dtypes):
                if case.check(point) or case.impls["triton"].supports(point):
                    continue
                inputs = case.build(point, meta, DTYPES[dtype])
                for t in check.leaves(inputs, case.grad_inputs).values():
                    t.requires_grad_(mode != "forward")
                task = Task(case, "triton", mode, point, meta, DTYPES[dtype])
                call = make_call(task, inputs)
                leaves = leaves_of(call, inputs, case)
                with torch.set_grad_enabled(task.grad):  # forward rows: no_grad, as timed
                    outs = tuple(torch.empty_like(o) for o in _as_tuple(call.fn()))
                run_for_check(call, leaves, task.grad, outs if task.grad else None)
    return launches


def plan_launches(plan, capability: int = 90) -> dict[str, int]:
    """Distinct Triton compiles per kernel that a harness plan's `triton` rows launch: every
    launch bound by Triton's binder as the JIT keys it (the GPU run's estimates)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", capability, 32))
    keys: dict[str, set[str]] = {}
    for fn, args, kwargs, _grid in record_plan(plan, capability):
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        _bound, specialization, options = binder(*args, **kwargs)
        keys.setdefault(fn.__name__, set()).add(repr((specialization, options)))
    return {name: len(v) for name, v in sorted(keys.items())}


def _as_tuple(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _plain(value):
    return getattr(value, "value", value)  # tl.constexpr -> its value (picklable)
