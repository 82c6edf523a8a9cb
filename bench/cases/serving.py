"""The serving path: what a positional encoding costs an inference engine's step, on vLLM's paged
KV cache (num_blocks, block_size, Hk, D), each sequence's blocks scattered over it (a shuffled
block table), caches ragged (row b's length drawn in [seq_len / 2, seq_len], row 0 full).

  rope_cache       a mixed step: `prefill` sequences of the batch prefill a chunk of `chunk`
                   tokens, the others decode one; their T tokens' q and k rotated (rope_form:
                   half-split or interleaved pairs, partial rotary R = D/2, or M-RoPE's
                   per-token tables), k and v written into the cache at their slots.
  {family}_paged   a decode step's attention (q_len queries a sequence, causal) over the paged
                   caches, every bias family (bench/cases/families.py).

Implementations, each called as its library documents it:
  rope_cache   eager     posenc.functional.apply_rope on q and on k (the tokens' table rows
                         gathered inside the call), then index_copy_ of k and v into the
                         caches' flat slots: what a model without a fused kernel runs;
               compiled  torch.compile of the same function (the caches its mutated inputs);
               triton    posenc_kernels.apply_rope_with_cache: one launch.
  _paged       reference the blocks gathered (posenc.serving.gather_pages), then posenc's
                         attention with kv_lens: what a model without a paged kernel pays;
               triton    posenc_kernels.relative_attention(block_table=, kv_lens=);
               triton_dense  the same kernel on caches gathered once, outside the call: the
                         price of paging, side by side;
               flex_paged    torch.compile(flex_attention) through torch's PagedAttention
                         (torch.nn.attention.experimental; its cache layout (1, Hk, pages *
                         block_size, D) built once from the same content, its page table ours),
                         the bias as a score_mod: where the installed torch has it.
Every implementation of rope_cache writes its own copy of the caches (made outside the call).

Cost: rope_cache reads q, k, v once and writes q and the cache's k and v once, plus each token's
cos and sin rows (8 F bytes) and its position and slot; 3 FLOPs per rotated element. tokens: T.
The attention: bench/cases/sequences.py's decode cost (the valid keys' bytes, 4 H D FLOPs per
visible pair), plus the block table; tokens: the queries.

Why this file is long: two kinds of case (the step and the attention) that share the paged
layout, each with its implementations as their libraries call them; split, the layout would be
imported from one into the other.
"""

from __future__ import annotations

import importlib.util

import torch

from bench.cases import sequences as Seq
from bench.cases._common import (
    NUM_KV_HEADS,
    TRITON_DEVICES,
    TRITON_ELSEWHERE,
    TRITON_NOTE,
    compile_impl,
    kv_heads,
    per_mode,
    triton_kernels,
)
from bench.cases.families import FAMILIES, BiasFamily
from bench.cases.multimodal import mrope_section
from bench.checks import nonnegative_ints, one_of, positive_ints
from bench.registry import Case, Cost, Impl, Knob, Level, Point
from posenc import functional as F
from posenc import serving

BLOCK_SIZE = Knob("block_size", 16, "serving: the paged KV cache's block size", positive_ints)
PREFILL = Knob("prefill", 0, "serving step: sequences prefilling a chunk", nonnegative_ints)
CHUNK = Knob("chunk", 256, "serving step: a prefilling sequence's chunk of tokens", positive_ints)
FORMS = ("half_split", "interleaved", "partial", "mrope")
ROPE_FORM = Knob(
    "rope_form", "half_split", "serving step's RoPE: " + ", ".join(FORMS), one_of(*FORMS)
)
PAGED = "torch.nn.attention.experimental._paged_attention"  # FlexAttention's paged attention


def new_tokens(point: Point) -> list[int]:
    """Each sequence's tokens this step: a chunk for the first `prefill`, one for the rest."""
    return [point.chunk if b < point.prefill else 1 for b in range(point.batch)]


def block_table(point: Point, totals: list[int], device) -> tuple[torch.Tensor, int]:
    """(B, max_blocks) int32: sequence b's ceil(totals[b] / block_size) blocks, drawn from a
    shuffled pool by a generator seeded by the point's shape; and the pool's size."""
    page = point.block_size
    need = [-(-n // page) for n in totals]
    g = torch.Generator().manual_seed(point.seq_len * 7907 + point.batch * 31 + page)
    order = torch.randperm(sum(need), generator=g)
    table = torch.zeros(point.batch, max(need), dtype=torch.int32)
    first = 0
    for b, m in enumerate(need):
        table[b, :m] = order[first : first + m]
        first += m
    return table.to(device), sum(need)


# -- rope_cache: the fused RoPE + cache write of a mixed step ---------------------------------


def _step(point: Point) -> tuple[list[int], list[int]]:
    """Each token's position and its sequence, in batch order: sequence b's context (a ragged
    cache length) then its new tokens."""
    positions, owner = [], []
    for b, (context, new) in enumerate(zip(Seq.kv_lengths(point), new_tokens(point), strict=True)):
        positions += range(context, context + new)
        owner += [b] * new
    return positions, owner


def _rope_tables(point: Point, positions: torch.Tensor, device):
    """(cos, sin, positions argument, R): (L + chunk, R/2) tables read at positions, or
    M-RoPE's per-token (T, D/2) rows (text-like t = h = w on decode tokens, image-like grid
    positions on the chunks' tokens) with positions None."""
    d = point.head_dim
    if point.rope_form == "mrope":
        grid = torch.stack([positions, positions // 4, positions % 4])  # (3, T)
        section, interleaved = mrope_section("qwen2_vl", d)  # Qwen2-VL's contiguous sections
        cos, sin = F.mrope_cos_sin(grid[:, None], d, section, interleaved=interleaved)
        return cos[0].to(device), sin[0].to(device), None, d
    rotary = d // 2 if point.rope_form == "partial" else d
    cos, sin = F.rope_cos_sin(point.seq_len + point.chunk, rotary, device=device)
    return cos, sin, positions.to(device), rotary


def _build_step(point: Point, device, dtype):
    pos, owner = _step(point)
    positions = torch.tensor(pos)
    totals = [c + n for c, n in zip(Seq.kv_lengths(point), new_tokens(point), strict=True)]
    table, num_blocks = block_table(point, totals, "cpu")
    page = point.block_size
    slots = table[torch.tensor(owner), positions // page].long() * page + positions % page
    t, hk, d = len(pos), kv_heads(point), point.head_dim
    cos, sin, pos_arg, rotary = _rope_tables(point, positions, device)
    q, k, v = (torch.randn(t, h, d, device=device).to(dtype) for h in (point.num_heads, hk, hk))
    caches = {n: torch.zeros(num_blocks, page, hk, d, device=device, dtype=dtype) for n in "KV"}
    return dict(
        q=q, k=k, v=v, cos=cos, sin=sin, positions=pos_arg, rows=positions.to(device),
        slot_mapping=slots.to(device), k_cache=caches["K"], v_cache=caches["V"], rotary=rotary,
        interleaved=point.rope_form == "interleaved",
    )  # fmt: skip


def _eager_step(q, k, v, cos, sin, rows, k_cache, v_cache, slots, interleaved: bool):
    """Rotate with posenc (the tokens' rows gathered here), then index_copy_ into the caches."""
    if rows is not None:
        cos, sin = cos[rows], sin[rows]
    cos, sin = cos[:, None], sin[:, None]  # (T, 1, F): over heads
    q_out = F.apply_rope(q, cos, sin, interleaved=interleaved)
    k_rot = F.apply_rope(k, cos, sin, interleaved=interleaved)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k_rot)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v)
    return q_out


def _own_caches(inputs) -> tuple[torch.Tensor, torch.Tensor]:
    return inputs["k_cache"].clone(), inputs["v_cache"].clone()


def _step_impl(compiled: bool):
    def make(inputs):
        fn = compile_impl(_eager_step) if compiled else _eager_step
        kc, vc = _own_caches(inputs)
        rows = inputs["rows"] if inputs["positions"] is not None else None
        args = [inputs[n] for n in ("q", "k", "v", "cos", "sin")]

        def call():
            q = fn(*args, rows, kc, vc, inputs["slot_mapping"], inputs["interleaved"])
            return q, kc, vc

        return call

    return make


def _triton_step(inputs):
    kc, vc = _own_caches(inputs)
    fused = triton_kernels().apply_rope_with_cache
    q, k, v, cos, sin = (inputs[n] for n in ("q", "k", "v", "cos", "sin"))
    kwargs = dict(
        positions=inputs["positions"], k_cache=kc, v_cache=vc,
        slot_mapping=inputs["slot_mapping"], interleaved=inputs["interleaved"],
        rotary_dim=inputs["rotary"],
    )  # fmt: skip
    return lambda: (fused(q, k, v, cos, sin, **kwargs), kc, vc)


def _step_truth(inputs):
    """posenc.serving.rope_with_cache on the float64 inputs (caches: the check's own copies)."""
    kc, vc = _own_caches(inputs)
    q = serving.rope_with_cache(
        inputs["q"], inputs["k"], inputs["v"], inputs["cos"], inputs["sin"],
        positions=inputs["positions"], k_cache=kc, v_cache=vc,
        slot_mapping=inputs["slot_mapping"], interleaved=inputs["interleaved"],
        rotary_dim=inputs["rotary"],
    )  # fmt: skip
    return q, kc, vc


def _step_cost(point: Point, dtype, mode: str) -> Cost:
    """Forward only (a serving op); backward, never run, modelled as the forward (a rotation's
    backward is the inverse rotation of the gradients: the same bytes)."""
    t = sum(new_tokens(point))
    hq, hk, d = point.num_heads, kv_heads(point), point.head_dim
    rotary = d // 2 if point.rope_form == "partial" else d
    moved = 2 * t * (hq + 2 * hk) * d * dtype.itemsize  # q, k, v read; q, k, v written
    tables = t * (8 * (rotary // 2) + 16)  # the token's cos and sin rows, position and slot
    one = Cost(moved + tables, 3 * t * (hq + hk) * rotary, t)
    return per_mode(one, one, mode)


def _step_constraint(point: Point) -> str | None:
    if point.prefill > point.batch:
        return f"prefill={point.prefill} > batch={point.batch} sequences"
    if point.head_dim % 4 and point.rope_form == "partial":
        return f"head_dim={point.head_dim}: partial rotary (D/2) needs D % 4 == 0"
    if point.head_dim % 16 and point.rope_form == "mrope":
        return f"head_dim={point.head_dim}: M-RoPE's sections need D % 16 == 0"
    if point.head_dim % 2:
        return f"head_dim={point.head_dim} is odd"
    return None


ROPE_CACHE = Case(
    name="rope_cache",
    level=Level.ENCODER,
    build=_build_step,
    reference=_step_truth,
    impls={
        "eager": Impl(_step_impl(False), grad=False, note="posenc rotation, then index_copy_"),
        "compiled": Impl(_step_impl(True), grad=False, compiled=True),
        "triton": Impl(
            _triton_step,
            grad=False,
            devices=TRITON_DEVICES,
            elsewhere=TRITON_ELSEWHERE,
            note="; ".join(filter(None, ["posenc_kernels.apply_rope_with_cache", TRITON_NOTE])),
        ),
    },  # fmt: skip
    baseline="eager",
    cost=_step_cost,
    knobs=(NUM_KV_HEADS, PREFILL, CHUNK, BLOCK_SIZE, ROPE_FORM, Seq.KV_CACHE),
    constraint=_step_constraint,
)


# -- {family}_paged: a decode step's attention over the paged caches --------------------------


def _build_paged(family: BiasFamily):
    def build(point: Point, device, dtype):
        lens = Seq.kv_lengths(point)
        table, num_blocks = block_table(point, lens, device)
        hk, d = kv_heads(point), point.head_dim
        shape = (num_blocks, point.block_size, hk, d)
        q = torch.randn(point.batch, point.num_heads, point.q_len, d, device=device).to(dtype)
        kc, vc = (torch.randn(shape, device=device).to(dtype) for _ in range(2))
        keys = table.shape[1] * point.block_size  # per-token tables: the table's positions
        tables = family.inputs(point.num_heads, d, device, dtype, batch=point.batch, keys=keys)
        lens_t = torch.tensor(lens, device=device)
        return dict(q=q, k_cache=kc, v_cache=vc, block_table=table, kv_lens=lens_t, **tables)

    return build


def _gathered(inputs) -> dict:
    """The inputs with k and v: each row's keys gathered from its blocks, (B, Hk, L, D)."""
    args = inputs["block_table"], inputs["kv_lens"]
    k, v = (serving.gather_pages(inputs[n], *args) for n in ("k_cache", "v_cache"))
    return dict(inputs, k=k, v=v)


def _reference_paged(family: BiasFamily):
    def make(inputs):
        attend = family.attention(inputs, True, {"kv_lens": inputs["kv_lens"]})

        def call():
            full = _gathered(inputs)
            return attend(full["q"], full["k"], full["v"])

        return call

    return make


def _triton_paged(family: BiasFamily, dense: bool):
    def make(inputs):
        attend = triton_kernels().relative_attention
        kwargs = dict(family.kernel_args(inputs), causal=True, kv_lens=inputs["kv_lens"])
        if dense:  # caches gathered once, here: the kernel on contiguous keys
            full = _gathered(inputs)
            if family.per_token is not None:  # its per-key tables, to the gathered keys
                lk = full["k"].shape[2]
                params = {n: t[..., :lk] for n, t in full["params"].items()}
                kwargs.update(family.kernel_args(dict(full, params=params)))
            return lambda: attend(full["q"], full["k"], full["v"], **kwargs)
        q, kc, vc = inputs["q"], inputs["k_cache"], inputs["v_cache"]
        return lambda: attend(q, kc, vc, block_table=inputs["block_table"], **kwargs)

    return make


def _flex_paged(family: BiasFamily):
    def make(inputs):
        from torch.nn.attention.experimental._paged_attention import PagedAttention
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        q, kc, vc, table, lens = (
            inputs[n] for n in ("q", "k_cache", "v_cache", "block_table", "kv_lens")
        )
        num_blocks, page, hk, d = kc.shape
        bsz, width, lq = table.shape[0], table.shape[1], q.shape[2]
        paged = PagedAttention(num_blocks, page, bsz, device=q.device)
        for b, n in enumerate(lens.tolist()):  # its page table is ours (pages already reserved)
            m = -(-n // page)
            paged.page_table[b, :m] = table[b, :m]
            paged.physical_to_logical[b, table[b, :m].long()] = torch.arange(m, device=q.device)
            paged.capacity[b] = m * page
        k, v = (c.permute(2, 0, 1, 3).reshape(1, hk, num_blocks * page, d) for c in (kc, vc))
        offsets = lens - lq

        def mask_mod(b, h, i, j):
            return (j <= offsets[b] + i) & (j < lens[b])

        logical = create_block_mask(
            mask_mod, bsz, None, lq, width * page, device=q.device, BLOCK_SIZE=(128, page)
        )
        block_mask = paged.convert_logical_block_mask(logical, kv_len=lens)
        bias = family.score(dict(inputs, k=q.new_empty(1, 1, width * page, 1)), lq, width * page)
        score_mod = paged.get_score_mod(
            lambda s, b, h, i, j: s + bias(b, h, offsets[b] + i, j), kv_len=lens
        )
        fn, grouped = compile_impl(flex_attention), hk != q.shape[1]
        return lambda: fn(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=grouped)

    return make


def _flex_supports(family: BiasFamily):
    def supports(point: Point) -> str | None:
        if importlib.util.find_spec(PAGED.rpartition(".")[0]) is None or not _has_paged():
            return f"this torch {torch.__version__} has no FlexAttention paged attention"
        return family.expressible(point)

    return supports


def _has_paged() -> bool:
    try:
        importlib.import_module(PAGED)
    except ImportError:
        return False
    return True


def _truth_paged(family: BiasFamily):
    return lambda inputs: _reference_paged(family)(inputs)()


def _paged_cost(family: BiasFamily):
    decode = Seq.decode_cost(family)  # the valid keys' bytes and FLOPs

    def cost(point: Point, dtype, mode: str) -> Cost:
        width = -(-point.seq_len // point.block_size)  # the block table's int32 entries

        def one(m: str) -> Cost:
            c = decode(point, dtype, m)
            return Cost(c.bytes + 4 * point.batch * width, c.flops, point.batch * point.q_len)

        return per_mode(one("forward"), one("backward"), mode)

    return cost


def _paged_case(family: BiasFamily) -> Case:
    triton = dict(devices=TRITON_DEVICES, elsewhere=TRITON_ELSEWHERE, grad=False)
    note = "; ".join(filter(None, ["posenc_kernels.relative_attention(block_table=)", TRITON_NOTE]))
    dense = "; ".join(filter(None, ["caches gathered outside the call", TRITON_NOTE]))
    return Case(
        name=f"{family.name}_paged",
        level=Level.ATTENTION,
        build=_build_paged(family),
        reference=_truth_paged(family),
        impls={
            "reference": Impl(_reference_paged(family), grad=False, note="gather, then posenc"),
            "triton": Impl(_triton_paged(family, False), note=note, **triton),
            "triton_dense": Impl(_triton_paged(family, True), note=dense, **triton),
            "flex_paged": Impl(
                _flex_paged(family),
                grad=False,
                compiled=True,
                supports=_flex_supports(family),
                note="torch.compile(flex_attention), torch's PagedAttention",
            ),
        },  # fmt: skip
        baseline="reference",
        cost=_paged_cost(family),
        batched=("q", "block_table", "kv_lens", *(("params",) * (family.per_token is not None))),
        knobs=(NUM_KV_HEADS, Seq.Q_LEN, Seq.KV_CACHE, BLOCK_SIZE),
        constraint=Seq.decode_constraint,
    )


PAGED_DECODE = [_paged_case(family) for family in FAMILIES.values()]
