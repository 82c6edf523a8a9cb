"""Relative-bias attention on the sequences models run (bench/cases/families.py's families):

  {family}_decode  a decode step: q_len queries (1 by default) at the end of a KV cache of
                   seq_len keys, causal; knob kv_cache: "full" (every row's cache seq_len
                   long) or "ragged" (row b's length drawn in [seq_len / 2, seq_len], row 0
                   full; the kernel takes them as kv_lens). Forward only, as decoding runs it.
  {family}_packed  `documents` (seeded lengths) packed into one row of seq_len tokens (batch 1),
                   attention, distances and the causal mask within each; forward and backward.

Implementations, each called as its library documents it:
  reference    posenc.functional.relative_attention with kv_lens / cu_seqlens (one call per
               sequence: what the reference does without a kernel);
  sdpa         F.scaled_dot_product_attention, the bias and the mask materialized as one
               attn_mask (outside the call unless a table trains), enable_gqa;
  sdpa_nobias  SDPA with only the mask (boolean): the ceiling a biased kernel is measured against;
  flex         torch.compile(flex_attention): the bias as a score_mod, the mask as a block mask
               built once (kv lengths per row; document ids), enable_gqa;
  triton       posenc_kernels.relative_attention(kv_lens=..., or cu_seqlens=...): decode steps split
               the keys across programs when the grid would leave SMs idle.
Shaw's value term adds to the output: neither SDPA nor a score_mod can express it.

Cost: FLOPs 4 H D per (query, visible key) pair (Shaw's terms: 4 H (2K + 1) D per query);
bytes: q, the cache's valid keys and values (Hk heads: what bounds a decode step), the table,
the output (backward as bias.py counts it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf

from bench.cases import bias as B
from bench.cases._common import (
    NUM_KV_HEADS,
    TRITON_DEVICES,
    TRITON_ELSEWHERE,
    TRITON_NOTE,
    compile_impl,
    gqa,
    kv_heads,
    per_mode,
    triton_kernels,
)
from bench.cases.families import FAMILIES, BiasFamily
from bench.checks import one_of, positive_ints
from bench.registry import Case, Cost, Impl, Knob, Level, Point

Q_LEN = Knob("q_len", 1, "decode: queries at the end of the cache (1: one step)", positive_ints)
KV_CACHE = Knob("kv_cache", "full", "decode: full or ragged caches", one_of("full", "ragged"))
DOCUMENTS = Knob("documents", 4, "packed: documents in the row (seeded lengths)", positive_ints)


def kv_lengths(point: Point) -> list[int]:
    """Each row's cache length: seq_len, or (ragged) drawn in [max(seq_len / 2, q_len),
    seq_len] from a generator seeded by the point's shape, row 0 full."""
    n = point.seq_len
    if point.kv_cache == "full":
        return [n] * point.batch
    g = torch.Generator().manual_seed(n * 7919 + point.batch)
    low = max(n // 2, point.q_len)
    lens = torch.randint(low, n + 1, (point.batch,), generator=g).tolist()
    return [n, *lens[1:]]


def document_bounds(point: Point) -> list[int]:
    """cu_seqlens of the packed row: documents - 1 distinct cut points drawn in 1 .. T - 1 from
    a generator seeded by (T, documents); every document at least one token."""
    t, docs = point.seq_len, point.documents
    g = torch.Generator().manual_seed(t * 104729 + docs)
    cuts = (torch.randperm(t - 1, generator=g)[: docs - 1] + 1).sort().values.tolist()
    return [0, *cuts, t]


def _sizes(bounds: list[int]) -> list[int]:
    return [y - x for x, y in zip(bounds, bounds[1:], strict=False)]


def _cost(family: BiasFamily, packed: bool):
    def cost(point: Point, dtype, mode: str) -> Cost:
        h, hk, d, size = point.num_heads, kv_heads(point), point.head_dim, dtype.itemsize
        if packed:
            sizes = _sizes(document_bounds(point))
            pairs = sum(n * (n + 1) // 2 if point.causal else n * n for n in sizes)
            queries = keys = point.seq_len
        else:
            lq, lens = point.q_len, kv_lengths(point)
            pairs = sum(lq * n - lq * (lq - 1) // 2 for n in lens)  # causal at the cache's end
            queries, keys = point.batch * lq, sum(lens)
        sized = family.at(point)
        rel = h * queries * sized.extra_flops(d)
        attn = 4 * h * pairs * d
        table = sized.table_bytes(h, d, dtype)
        act, act_kv = h * queries * d * size, hk * keys * d * size
        forward = Cost(2 * act + 2 * act_kv + table, attn + rel)
        backward = Cost(4 * act + 4 * act_kv + 2 * table, int(2.5 * attn) + 2 * rel)
        return per_mode(forward, backward, mode)

    return cost


def decode_cost(family: BiasFamily):
    """A decode step's cost (q_len queries at the end of kv_lengths' caches), per mode."""
    return _cost(family, packed=False)


def _build(family: BiasFamily, packed: bool):
    tensors = B.build_inputs(family, q_len=None if packed else (lambda p: p.q_len))

    def build(point: Point, device, dtype):
        inputs = dict(tensors(point, device, dtype), causal=point.causal if packed else True)
        if packed:
            bounds = document_bounds(point)
            inputs["cu_seqlens"] = torch.tensor(bounds, device=device)
            inputs["max_seqlen"] = max(_sizes(bounds))
        else:
            inputs["kv_lens"] = torch.tensor(kv_lengths(point), device=device)
            inputs["ragged"] = point.kv_cache == "ragged"
        return inputs

    return build


def _offsets(inputs) -> torch.Tensor:
    """Each row's query offset: kv_lens[b] - Lq (query i at kv_lens[b] - Lq + i)."""
    return inputs["kv_lens"] - inputs["q"].shape[2]


def _allowed(inputs) -> torch.Tensor:
    """The boolean mask (B | 1, 1, Lq, Lk) of the keys each query sees."""
    q, k = inputs["q"], inputs["k"]
    i = torch.arange(q.shape[2], device=q.device)
    j = torch.arange(k.shape[2], device=q.device)
    if "cu_seqlens" in inputs:
        doc = _document_ids(inputs)
        ok = doc[:, None] == doc[None, :]
        if inputs["causal"]:
            ok &= j[None, :] <= i[:, None]
        return ok[None, None]
    lens = inputs["kv_lens"][:, None, None]
    pos = _offsets(inputs)[:, None, None] + i[None, :, None]
    return ((j[None, None, :] <= pos) & (j[None, None, :] < lens))[:, None]


def _document_ids(inputs) -> torch.Tensor:
    cu = inputs["cu_seqlens"]
    t = inputs["q"].shape[2]
    return torch.searchsorted(cu[1:], torch.arange(t, device=cu.device), right=True)


def _seq_kwargs(inputs) -> dict:
    """kv_lens (ragged caches only: a full cache is queries at the keys' end) or cu_seqlens."""
    if "cu_seqlens" in inputs:
        return {"cu_seqlens": inputs["cu_seqlens"]}
    return {"kv_lens": inputs["kv_lens"]} if inputs["ragged"] else {}


def _kernel_seq_kwargs(inputs) -> dict:
    """The kernel's: packed with max_seqlen, as a training loop that knows its longest
    document passes it (no host read of cu_seqlens in the timed call)."""
    extra = {"max_seqlen": inputs["max_seqlen"]} if "cu_seqlens" in inputs else {}
    return dict(_seq_kwargs(inputs), **extra)


def _eager(family: BiasFamily, inputs: dict):
    return family.attention(inputs, inputs["causal"], _seq_kwargs(inputs))


def _truth(family: BiasFamily):
    return lambda inputs: B.on_qkv(lambda i: _eager(family, i))(inputs)()


def _bias(family: BiasFamily, inputs: dict) -> torch.Tensor:
    """The (B | 1, H, Lq, Lk) bias with -inf where a key is not seen, in q's dtype."""
    module, q, k = family.module(inputs), inputs["q"], inputs["k"]
    lq, lk = q.shape[2], k.shape[2]
    if "cu_seqlens" in inputs:  # j - i within a document is j - i over the row
        bias = module.bias(lq, lk)[None]
    else:
        offsets = _offsets(inputs).tolist()
        bias = torch.stack([module.bias(lq, lk, offset=o) for o in offsets])
    return bias.to(q.dtype).masked_fill(~_allowed(inputs), float("-inf"))


def _sdpa(family: BiasFamily):
    def attention(inputs):
        grouped = gqa(inputs)
        if B.trains(inputs):
            return lambda q, k, v: nnf.scaled_dot_product_attention(
                q, k, v, attn_mask=_bias(family, inputs), enable_gqa=grouped
            )
        with torch.no_grad():
            mask = _bias(family, inputs)
        return lambda q, k, v: nnf.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=grouped
        )

    return attention


def _sdpa_nobias(inputs):
    grouped, mask = gqa(inputs), _allowed(inputs)
    return lambda q, k, v: nnf.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=grouped
    )


def _nobias_truth(inputs):
    return B.on_qkv(_sdpa_nobias)(inputs)()


def _flex(family: BiasFamily):
    def attention(inputs):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        q, k = inputs["q"], inputs["k"]
        if "cu_seqlens" in inputs:
            doc, causal = _document_ids(inputs), inputs["causal"]

            def mask_mod(b, h, i, j):
                return (doc[i] == doc[j]) & ((j <= i) | (not causal))

            offsets, rows = None, None
        else:
            offsets, lens = _offsets(inputs), inputs["kv_lens"]

            def mask_mod(b, h, i, j):
                return (j <= offsets[b] + i) & (j < lens[b])

            rows = q.shape[0]
        block_mask = create_block_mask(
            mask_mod, rows, None, q.shape[2], k.shape[2], device=q.device
        )
        fn = compile_impl(flex_attention)
        score_mod, grouped = family.score_mod(inputs, offsets), gqa(inputs)
        return lambda q, k, v: fn(
            q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=grouped
        )

    return attention


def _triton(family: BiasFamily):
    def attention(inputs):
        causal = inputs["causal"]
        kwargs = dict(family.kernel_args(inputs), causal=causal, **_kernel_seq_kwargs(inputs))
        attend = triton_kernels().relative_attention
        return lambda q, k, v: attend(q, k, v, **kwargs)

    return attention


def attentions(family: BiasFamily) -> dict:
    """The family's attention factories on these sequences, by implementation (B.on_qkv)."""
    return {
        "reference": lambda inputs: _eager(family, inputs),
        "sdpa": _sdpa(family),
        "sdpa_nobias": _sdpa_nobias,
        "flex": _flex(family),
        "triton": _triton(family),
    }


def _packed_constraint(point: Point) -> str | None:
    if point.batch != 1:
        return f"packed documents fill one row: batch must be 1, got {point.batch}"
    if point.documents > point.seq_len:
        return f"documents={point.documents} > seq_len={point.seq_len} tokens"
    return None


def decode_constraint(point: Point) -> str | None:
    if point.q_len > point.seq_len:
        return f"q_len={point.q_len} > seq_len={point.seq_len} (the cache)"
    return None


def _case(family: BiasFamily, packed: bool) -> Case:
    grad = packed  # decoding runs forward only
    # the memory guard's (B, H, L, L) scores: packed SDPA's mask; a decode step's are (B, H,
    # q_len, L), unguarded (a row past memory records oom)
    guard = int(packed)
    attend = attentions(family)
    opts = {  # per implementation, besides grad
        "reference": dict(holds=4 * guard),
        "sdpa": dict(note="bias and mask materialized as attn_mask", holds=3 * guard),
        "sdpa_nobias": dict(reference=_nobias_truth, note="mask only: the ceiling"),
        "flex": dict(compiled=True, note="torch.compile(flex_attention), block mask"),
        "triton": dict(
            devices=TRITON_DEVICES,
            elsewhere=TRITON_ELSEWHERE,
            note="; ".join(filter(None, ["posenc_kernels.relative_attention", TRITON_NOTE])),
        ),
    }
    impls = {
        name: Impl(
            B.on_qkv(attend[name]),
            grad=grad,
            supports=family.expressible if name in ("sdpa", "flex") else (lambda p: None),
            **opts[name],
        )
        for name in opts
    }
    tables = ("q", "k", "v", "params") if family.trains else ("q", "k", "v")
    per_token = family.per_token is not None  # (B, H, L) tables: checked on the batch's rows
    knobs = (B.CAUSAL, NUM_KV_HEADS, DOCUMENTS) if packed else (NUM_KV_HEADS, Q_LEN, KV_CACHE)
    return Case(
        name=f"{family.name}_{'packed' if packed else 'decode'}",
        level=Level.ATTENTION,
        build=_build(family, packed),
        reference=_truth(family),
        impls=impls,
        baseline="reference",
        cost=_cost(family, packed),
        grad_inputs=tables if packed else (),
        batched=() if packed else ("q", "k", "v", "kv_lens", *(("params",) * per_token)),
        knobs=(*knobs, *family.knobs),
        # a decode step is causal whatever the knob says: only packed rows can refuse
        constraint=B.either(_packed_constraint, family.refuses) if packed else decode_constraint,
        truth_holds=4 * guard,
    )


DECODE = [_case(family, False) for family in FAMILIES.values()]
PACKED = [_case(family, True) for family in FAMILIES.values()]
