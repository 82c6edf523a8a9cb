"""What the rotary cases share (bench/cases/rope.py, bench/cases/multimodal.py): q and k in a
point's memory order, the fused kernel called through its layout argument, Liger's private
copies, the cost of one rotation, and the kernel's and Liger's implementation entries."""

from __future__ import annotations

import torch

from bench.cases._common import (
    TRITON_DEVICES,
    TRITON_ELSEWHERE,
    TRITON_NOTE,
    kv_heads,
    per_mode,
    triton_kernels,
)
from bench.checks import one_of
from bench.registry import Cost, Impl, Knob, Point

LAYOUT = Knob(
    "layout",
    "bhsd",
    "memory order of the (B, H, L, D) tensors: bhsd or bshd",
    one_of("bhsd", "bshd"),
)


def heads_tensor(point: Point, heads: int, device, dtype):
    """(B, heads, L, D) random, in the point's memory order (bshd: a transposed view)."""
    if point.layout == "bshd":  # (B, L, H, D) memory seen as (B, H, L, D)
        x = torch.randn(point.batch, point.seq_len, heads, point.head_dim, device=device)
        return x.to(dtype).transpose(1, 2)
    x = torch.randn(point.batch, heads, point.seq_len, point.head_dim, device=device)
    return x.to(dtype)


def kernel_call(q, k, cos, sin, **kwargs):
    """posenc_kernels.apply_rope (the Triton kernel on CUDA, the C kernel on a CPU) on
    (B, H, L, D) q and k (or None) as its users call it: through its layout argument, on the
    memory as it is (bshd memory is passed as bshd, not transposed back)."""
    apply_rope = triton_kernels().apply_rope
    if q.transpose(1, 2).is_contiguous():  # bshd memory: the kernel's own layout argument
        qs, ks = q.transpose(1, 2), None if k is None else k.transpose(1, 2)

        def bshd():
            out = apply_rope(qs, ks, cos, sin, layout="bshd", **kwargs)
            return tuple(None if x is None else x.transpose(1, 2) for x in out)

        return bshd
    return lambda: apply_rope(q, k, cos, sin, layout="bhsd", **kwargs)


def own_copies(inputs, names=("q", "k")) -> tuple:
    """Private copies of the named inputs in the point's memory order, for a kernel that
    writes into its inputs; they are the leaves its gradients reach."""
    copies = []
    for n in names:
        x = inputs[n].detach().clone(memory_format=torch.preserve_format)
        copies.append(x.requires_grad_(inputs[n].requires_grad))
    return tuple(copies)


def rotation_cost(
    point: Point, dtype, mode: str, table_rows: int, table_cols: int, heads: int = 0
) -> Cost:
    """q and k (or `heads` heads in all) read and written once, two float32 tables of
    table_rows x table_cols (a third for xPos's scale), 3 FLOPs per element."""
    heads = heads or point.num_heads + kv_heads(point)
    n = point.batch * point.seq_len * point.head_dim * heads
    n_tables = 3 if point.rope_variant == "xpos" else 2
    one = Cost(2 * n * dtype.itemsize + n_tables * table_rows * table_cols * 4, 3 * n)
    return per_mode(one, one, mode)


def triton_impl(make) -> Impl:
    """A fused-kernel implementation: a GPU, or the CPU under the interpreter."""
    return Impl(make, devices=TRITON_DEVICES, note=TRITON_NOTE, elsewhere=TRITON_ELSEWHERE)


def liger_impl(make, supports, note="in place on its own copies of q and k") -> Impl:
    return Impl(make, devices=("cuda",), needs="liger_kernel", supports=supports, note=note)
