"""posenc_kernels.apply_rope over random combinations of its options (layouts and strides,
pairs, partial and p-RoPE rotary dims, the rotated span's start, positions as None, an offset,
per-sequence offsets, ids or per-token tables, xPos, inverse, in place, grouped and absent
k, dtypes), the Triton kernel and the C kernel alike, and apply_rope_with_cache's random
serving steps, each against a turn written here from the definition in float64, outputs and
gradients.

Each output element is one float32 turn of its pair, rounded once to the dtype: the bound is
half a unit in the dtype's last place of the truth (2**-9 of it in bfloat16), doubled, plus
float32's error on the pair's terms."""

import random
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc_kernels import rope, rope_cache
from posenc_kernels._runtime import native_cpu
from tests.posenc_kernels.test_relbias import DEVICE

CASES = 60
RTOL = {torch.float32: 2**-22, torch.float16: 2**-10, torch.bfloat16: 2**-7}


@dataclass
class Case:
    batch: int
    length: int
    heads: int
    kv_heads: int  # 0: k is None
    d: int
    rotary: int  # R: the rotated span
    freqs: int  # F <= R / 2 (fewer: p-RoPE)
    start: int  # 0 or D - R
    interleaved: bool
    layout: str
    strided: bool  # q and k as views into wider rows
    positions: str  # none | offset | per_seq | ids | table (B, L, F) | table1 (1, L, F)
    xpos: bool
    inverse: bool
    inplace: bool
    grad: bool
    dtype: torch.dtype


def draw(seed: int) -> Case:
    r = random.Random(seed)
    d = r.choice([2, 8, 24, 64, 80, 128])
    rotary = max(2, r.choice([d, d, d // 2, d // 4]) // 2 * 2)
    positions = r.choice(["none", "offset", "per_seq", "ids", "table", "table1"])
    inplace = r.random() < 0.25
    heads = r.choice([1, 2, 4, 6])
    return Case(
        batch=r.choice([1, 2, 3]),
        length=r.choice([1, 2, 7, 33]),
        heads=heads,
        kv_heads=r.choice([0, 1, 2, heads]),
        d=d,
        rotary=rotary,
        freqs=r.choice([rotary // 2, rotary // 2, max(1, rotary // 4)]),
        start=r.choice([0, 0, d - rotary]),
        interleaved=r.random() < 0.4,
        layout=r.choice(["bshd", "bhsd"]),
        strided=r.random() < 0.3,
        positions=positions,
        xpos=r.random() < 0.25 and not positions.startswith("table"),
        inverse=r.random() < 0.2,
        inplace=inplace,
        grad=not inplace and r.random() < 0.6,
        dtype=r.choice([torch.float32, torch.float16, torch.bfloat16]),
    )


def turn(x: Tensor, c: Case, cos: Tensor, sin: Tensor, scale: Tensor | None, divide: bool):
    """x (B, L, H, D) float64 turned pair by pair: cos, sin, scale (B, L, F) per token; pair f
    is (start + 2f, start + 2f + 1) interleaved, else (start + f, start + f + R/2); xPos
    multiplies q's pairs by the scale and divides k's."""
    out = x.clone()
    sin = -sin if c.inverse else sin
    for f in range(c.freqs):
        a = c.start + (2 * f if c.interleaved else f)
        b = a + (1 if c.interleaved else c.rotary // 2)
        co, si = cos[..., f, None], sin[..., f, None]
        ya, yb = x[..., a] * co - x[..., b] * si, x[..., b] * co + x[..., a] * si
        if scale is not None:
            m = 1 / scale[..., f, None] if divide else scale[..., f, None]
            ya, yb = ya * m, yb * m
        out[..., a], out[..., b] = ya, yb
    return out


def setup(c: Case, gen: torch.Generator):
    """(tables, positions argument, per-token tables (B, L, F) float64 for the truth)."""
    rows = c.length + 20
    # angles far from 0 at later rows, as a long context's are
    grow = torch.arange(rows, dtype=torch.float64)[:, None] / 5
    angles = torch.rand(rows, c.freqs, generator=gen, dtype=torch.float64) * 6.3 * grow
    cos, sin = angles.cos().float(), angles.sin().float()
    scale = (0.8 + 0.4 * torch.rand(rows, c.freqs, generator=gen)) if c.xpos else None
    offset = int(torch.randint(0, rows - c.length + 1, (1,), generator=gen))
    steps = torch.arange(c.length)
    arg, at = None, steps.expand(c.batch, -1)
    if c.positions == "offset":
        arg, at = offset, at + offset
    elif c.positions == "per_seq":
        arg = torch.randint(0, rows - c.length + 1, (c.batch,), generator=gen)
        at = arg[:, None] + steps
    elif c.positions == "ids":
        arg = at = torch.randint(0, rows, (c.batch, c.length), generator=gen)
    elif c.positions.startswith("table"):
        b = c.batch if c.positions == "table" else 1
        angles = torch.rand(b, c.length, c.freqs, generator=gen, dtype=torch.float64) * 50
        cos, sin = angles.cos().float(), angles.sin().float()
        per = [t.double().expand(c.batch, -1, -1) for t in (cos, sin)]
        return (cos, sin, None), None, (*per, None)
    per = [None if t is None else t.double()[at] for t in (cos, sin, scale)]
    return (cos, sin, scale), arg, per


def _inputs(c: Case, heads: int, gen: torch.Generator) -> Tensor:
    """(B, L, H, D) float64 values of the dtype, laid out as the case says."""
    x = torch.randn(c.batch, c.length, heads, c.d, generator=gen, dtype=torch.float64)
    return x.to(c.dtype).double()


def _laid(x: Tensor, c: Case) -> Tensor:
    """x (B, L, H, D) in the dtype, as a bshd or bhsd tensor, a view into wider rows if strided."""
    t = x.to(c.dtype)
    if c.layout == "bhsd":
        t = t.transpose(1, 2)
    if c.strided:
        wide = torch.zeros(*t.shape[:-1], c.d + 6, dtype=c.dtype)
        wide[..., 3 : 3 + c.d] = t
        t = wide[..., 3 : 3 + c.d]
    return t.contiguous() if not c.strided and c.layout == "bhsd" else t


def _bshd(t: Tensor, c: Case) -> Tensor:
    return t if c.layout == "bshd" else t.transpose(1, 2)


def _close(got: Tensor, want: Tensor, inputs: Tensor, c: Case, what: str):
    atol = 4 * 2**-24 * inputs.abs().max().item() * (1.3 if c.xpos else 1.0)
    got = _bshd(got.detach(), c).cpu().double()
    assert_close(got, want, rtol=RTOL[c.dtype], atol=atol, msg=lambda m: f"{what} {c}: {m}")


@pytest.mark.parametrize("kernel", ["triton", "c"])
@pytest.mark.parametrize("seed", range(CASES))
def test_random_options_meet_the_turn(seed, kernel):
    c = draw(seed)
    gen = torch.Generator().manual_seed(seed)
    (cos, sin, scale), positions, per = setup(c, gen)
    q = _inputs(c, c.heads, gen)
    k = _inputs(c, c.kv_heads, gen) if c.kv_heads else None
    device = DEVICE if kernel == "triton" else "cpu"
    on = [_laid(x, c).to(device) if x is not None else None for x in (q, k)]
    for t in on:
        if t is not None and c.grad:
            t.requires_grad_()
    kwargs = dict(
        positions=positions.to(device) if isinstance(positions, Tensor) else positions,
        interleaved=c.interleaved,
        inplace=c.inplace,
        layout=c.layout,
        xpos_scale=None if scale is None else scale.to(device),
        rotary_dim=c.rotary,
        rotary_start=c.start,
        inverse=c.inverse,
    )
    tables = [t.to(device) for t in (cos, sin)]
    with native_cpu():  # the C kernel on CPU tensors (the interpreter runs Triton's on them)
        got = rope.apply_rope(*on, *tables, **kwargs) if kernel == "c" else None
    if kernel == "triton":
        got = rope.apply_rope(*on, *tables, **kwargs)
    if c.inplace:
        assert got[0] is on[0] and got[1] is on[1]
    wants = [None if x is None else turn(x, c, *per, divide=i == 1) for i, x in enumerate((q, k))]
    for name, g, w, x in zip("qk", got, wants, (q, k), strict=True):
        assert (g is None) == (w is None), name
        if w is not None:
            _close(g, w, x, c, name)
    if c.grad:
        ups = [None if w is None else torch.randn(w.shape, generator=gen) for w in wants]
        ups = [None if u is None else u.to(c.dtype).double() for u in ups]
        given = [i for i, u in enumerate(ups) if u is not None]
        grads = torch.autograd.grad(
            [got[i] for i in given],
            [on[i] for i in given],
            [_bshd(ups[i].to(c.dtype), c).to(device) for i in given],
        )
        leaves = [x.clone().requires_grad_() for x in (q, k) if x is not None]
        outs = [turn(x, c, *per, divide=i == 1) for i, x in enumerate(leaves)]
        exact = torch.autograd.grad(outs, leaves, [u for u in ups if u is not None])
        for i, g, w in zip(given, grads, exact, strict=True):
            _close(g, w, ups[i], c, "d" + "qk"[i])


@pytest.mark.parametrize("seed", range(CASES // 2))
def test_random_cache_steps_meet_the_turn(seed):
    """apply_rope_with_cache on a random serving step: T tokens at random positions (or
    per-token tables), random distinct slots or -1 (padding), strided or not, in place or
    not: q turned as the truth turns it, each kept token's turned k and its v at its slot,
    every other slot untouched."""
    r = random.Random(seed)
    c = draw(seed)
    c.positions, c.layout = r.choice(["ids", "table"]), "bshd"
    c.xpos = c.inverse = False
    c.start = 0  # the serving op turns the first R dims
    c.batch, c.length, c.kv_heads = 1, r.choice([1, 3, 17]), r.choice([1, 2, c.heads])
    gen = torch.Generator().manual_seed(seed)
    (cos, sin, _), positions, per = setup(c, gen)
    cos, sin = (t[0] if t.dim() == 3 else t for t in (cos, sin))  # per token: (T, F)
    q, k, v = (_inputs(c, h, gen) for h in (c.heads, c.kv_heads, c.kv_heads))  # (1, T, H, D)
    page = r.choice([1, 4, 16])
    blocks = -(-c.length // page) + 2
    slots = torch.randperm(blocks * page, generator=gen)[: c.length]
    slots[torch.rand(c.length, generator=gen) < 0.2] = -1
    caches = [torch.full((blocks, page, c.kv_heads, c.d), 7.0, dtype=c.dtype) for _ in "kv"]
    caches = [t.to(DEVICE) for t in caches]
    on = [_laid(x, c)[0].to(DEVICE) for x in (q, k, v)]  # (T, H, D), strided or not
    with torch.no_grad():
        got = rope_cache.apply_rope_with_cache(
            *on,
            cos.to(DEVICE),
            sin.to(DEVICE),
            positions=None if positions is None else positions[0].to(DEVICE),
            k_cache=caches[0],
            v_cache=caches[1],
            slot_mapping=slots.to(DEVICE),
            interleaved=c.interleaved,
            inplace=c.inplace,
            rotary_dim=c.rotary,
        )
    if c.inplace:
        assert got is on[0]
    _close(got[None], turn(q, c, *per, divide=False), q, c, "q")
    want = [torch.full(t.shape, 7.0, dtype=torch.float64) for t in caches]
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            want[0][s // page, s % page] = turn(k, c, *per, divide=False)[0, t]
            want[1][s // page, s % page] = v[0, t]
    _close(caches[0].flatten(0, 1)[None], want[0].flatten(0, 1)[None], k, c, "k cache")
    assert torch.equal(caches[1].cpu().double(), want[1]), f"v cache {c}"
