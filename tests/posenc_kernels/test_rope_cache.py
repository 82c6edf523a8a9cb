"""posenc_kernels.apply_rope_with_cache (and posenc.serving.rope_with_cache, its reference) against
a float64 truth written token by token from the definitions: each token's q and k pairs turned by
its position's angles, its k and v at its slot of a paged cache, nothing else written.

A serving step packs several sequences' new tokens: some prefill a chunk, the rest decode one
token each, each sequence's blocks scattered over the cache (a shuffled block table)."""

from dataclasses import dataclass

import pytest
import torch
from torch.testing import assert_close

import posenc_kernels
from posenc import functional as F
from posenc import serving
from tests.posenc_kernels._device import fails_on_the_device, on_device
from tests.posenc_kernels.test_rope import DEVICE, _round


@dataclass(frozen=True)
class Step:
    """A serving step: each sequence's (tokens already cached, new tokens) and the layout."""

    name: str
    seqs: tuple  # ((context, new), ...)
    hq: int
    hk: int
    d: int
    rotary: int  # R (< d: partial rotary)
    n_freq: int  # F (< R/2: p-RoPE)
    interleaved: bool
    tables: str  # "plain" | "yarn" | "mrope" (per-token)
    dtype: torch.dtype
    block_size: int = 4
    padding: int = 0  # padding tokens (slot -1) appended
    index_dtype: torch.dtype = torch.int64
    fused_qkv: bool = False  # q, k, v as strided views of one (T, (Hq + 2 Hk) D) projection
    inplace: bool = False


STEPS = [
    Step("llama mixed", ((0, 9), (5, 1), (17, 1), (3, 6)), 4, 2, 32, 32, 16, False, "plain",
         torch.float32),
    Step("gptj bf16 decode", ((12, 1), (1, 1), (30, 1)), 4, 4, 64, 64, 32, True, "plain",
         torch.bfloat16),
    Step("partial fp16 chunk", ((8, 5), (0, 1)), 3, 1, 48, 24, 12, False, "plain",
         torch.float16, block_size=8),
    Step("p-rope padded int32", ((2, 3), (9, 1)), 2, 2, 32, 32, 4, False, "plain",
         torch.float32, padding=2, index_dtype=torch.int32),
    Step("mrope per-token bf16", ((0, 7), (4, 1)), 4, 2, 32, 32, 16, False, "mrope",
         torch.bfloat16),
    Step("yarn fused-qkv in place", ((6, 4), (21, 1), (0, 2)), 4, 2, 32, 32, 16, True, "yarn",
         torch.float32, fused_qkv=True, inplace=True),
]  # fmt: skip


def _layout(step: Step, gen: torch.Generator):
    """positions (T,), slot_mapping (T,), the caches' block count: sequence b's blocks are a
    shuffled draw, token at position p in block table[b, p // bs] at slot p % bs; padding
    tokens at the end get position 0 and slot -1."""
    bs = step.block_size
    need = [-(-(c + n) // bs) for c, n in step.seqs]
    num_blocks = sum(need) + 3  # spare blocks never written
    order = torch.randperm(num_blocks, generator=gen).tolist()
    positions, slots = [], []
    for b, (context, new) in enumerate(step.seqs):
        table = order[sum(need[:b]) :]
        for p in range(context, context + new):
            positions.append(p)
            slots.append(table[p // bs] * bs + p % bs)
    positions += [0] * step.padding
    slots += [-1] * step.padding
    return torch.tensor(positions), torch.tensor(slots), num_blocks


def _tables(step: Step, positions: torch.Tensor):
    """(cos, sin, positions argument): (64, F) tables read at positions, or per-token (T, F)."""
    if step.tables == "mrope":  # text-like tokens share t/h/w; a few image-like ones differ
        ids = torch.stack([positions, positions // 2, positions % 3])[:, None]  # (3, 1, T)
        sec = (step.rotary // 2 - 2 * (step.rotary // 6), step.rotary // 6, step.rotary // 6)
        cos, sin = F.mrope_cos_sin(ids, step.rotary, sec)
        return cos[0], sin[0], None
    scaling = None
    if step.tables == "yarn":
        scaling = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    cos, sin = F.rope_cos_sin(64, step.rotary, scaling=scaling)
    return cos[:, : step.n_freq].contiguous(), sin[:, : step.n_freq].contiguous(), positions


def _inputs(step: Step, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    positions, slots, num_blocks = _layout(step, gen)
    t = len(positions)
    heads = step.hq + 2 * step.hk
    qkv = torch.randn(t, heads, step.d, generator=gen, dtype=torch.float64)
    if step.fused_qkv:  # one projection's output, split by views: strided q, k, v
        q, k, v = qkv.to(step.dtype).split((step.hq, step.hk, step.hk), dim=1)
    else:
        q, k, v = (x.contiguous().to(step.dtype) for x in qkv.split((step.hq, step.hk, step.hk), 1))
    shape = (num_blocks, step.block_size, step.hk, step.d)
    caches = [torch.randn(shape, generator=gen).to(step.dtype) for _ in range(2)]  # old content
    cos, sin, pos = _tables(step, positions)
    index = step.index_dtype
    return dict(
        q=q, k=k, v=v, cos=cos, sin=sin, positions=None if pos is None else pos.to(index),
        rows=positions if pos is not None else torch.arange(t), slots=slots.to(index),
        k_cache=caches[0], v_cache=caches[1],
    )  # fmt: skip


def _turn(x, cos_row, sin_row, step: Step):
    """One head's vector turned pair by pair (float64): pair i is (i, i + R/2) or (2i, 2i + 1);
    the first F pairs by the row's angles, pairs F .. R/2 - 1 and dims R .. D - 1 unchanged."""
    out = x.clone()
    half = step.rotary // 2
    for i in range(len(cos_row)):
        a, b = (2 * i, 2 * i + 1) if step.interleaved else (i, i + half)
        c, s = cos_row[i], sin_row[i]
        out[a], out[b] = x[a] * c - x[b] * s, x[b] * c + x[a] * s
    return out


def _truth(step: Step, inp: dict):
    """float64 (q rotated, k_cache, v_cache) token by token: token t at table row rows[t]."""
    q, k, v = (inp[n].double() for n in "qkv")
    cos, sin = inp["cos"].double(), inp["sin"].double()
    kc, vc = inp["k_cache"].double().clone(), inp["v_cache"].double().clone()
    q_out = q.clone()
    for t in range(q.shape[0]):
        row = int(inp["rows"][t])
        for h in range(q.shape[1]):
            q_out[t, h] = _turn(q[t, h], cos[row], sin[row], step)
        slot = int(inp["slots"][t])
        if slot < 0:
            continue
        block, offset = divmod(slot, step.block_size)
        for h in range(k.shape[1]):
            kc[block, offset, h] = _turn(k[t, h], cos[row], sin[row], step)
            vc[block, offset, h] = v[t, h]
    return q_out, kc, vc


def _assert_near(got, want, dtype, label):
    """float32: within float32 rounding; half precision: no worse than the float32 result
    rounded once to the dtype (as the backend rounds), times 1.01."""
    got = got.detach().cpu().double()
    if dtype == torch.float32:
        assert_close(got, want, atol=2e-6, rtol=2e-6, msg=lambda m: f"{label}: {m}")
        return
    err = (got - want).abs().max()
    bound = (_round(want.float(), dtype).double() - want).abs().max()
    assert err <= bound * 1.01 + 1e-6, (label, err, bound)


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.name)
def test_rotates_q_and_writes_the_cache_at_each_slot(step):
    """q rotated at each token's position; the caches hold the rotated k and plain v at each
    token's slot, their other slots (and a padding token's) keep their content, bit for bit."""
    inp = _inputs(step)
    want_q, want_kc, want_vc = _truth(step, inp)
    kc, vc = inp["k_cache"].to(DEVICE), inp["v_cache"].to(DEVICE)
    q = inp["q"].to(DEVICE)
    q_before = q.clone()
    with torch.no_grad():
        got = posenc_kernels.apply_rope_with_cache(
            q, inp["k"].to(DEVICE), inp["v"].to(DEVICE), inp["cos"].to(DEVICE),
            inp["sin"].to(DEVICE), positions=_on(inp["positions"]), k_cache=kc, v_cache=vc,
            slot_mapping=inp["slots"].to(DEVICE), interleaved=step.interleaved,
            rotary_dim=step.rotary, inplace=step.inplace,
        )  # fmt: skip
    assert (got.data_ptr() == q.data_ptr()) == step.inplace
    if not step.inplace:
        assert torch.equal(q, q_before)  # out of place: q untouched
    _assert_near(got, want_q, step.dtype, "q")
    _assert_near(kc, want_kc, step.dtype, "k_cache")
    written = inp["slots"][inp["slots"] >= 0].long()
    untouched = torch.ones(kc.shape[0] * kc.shape[1], dtype=torch.bool)
    untouched[written] = False
    for got_c, old in ((kc, inp["k_cache"]), (vc, inp["v_cache"])):
        flat = got_c.cpu().view(-1, *got_c.shape[2:])
        assert torch.equal(flat[untouched], old.view(-1, *old.shape[2:])[untouched])
    assert torch.equal(vc.cpu().double(), want_vc)  # v copied exactly


def _on(t):
    return None if t is None else t.to(DEVICE)


@pytest.mark.parametrize("step", STEPS[:5], ids=lambda s: s.name)
def test_posenc_reference_matches_the_truth(step):
    """posenc.serving.rope_with_cache (rotate with posenc, then index_copy into the cache)
    in float64 equals the token-by-token truth."""
    inp = _inputs(step)
    want_q, want_kc, want_vc = _truth(step, inp)
    kc, vc = inp["k_cache"].double(), inp["v_cache"].double()
    got = serving.rope_with_cache(
        inp["q"].double(), inp["k"].double(), inp["v"].double(), inp["cos"].double(),
        inp["sin"].double(), positions=inp["positions"], k_cache=kc, v_cache=vc,
        slot_mapping=inp["slots"], interleaved=step.interleaved, rotary_dim=step.rotary,
    )  # fmt: skip
    assert_close(got, want_q, atol=1e-12, rtol=1e-12)
    assert_close(kc, want_kc, atol=1e-12, rtol=1e-12)
    assert torch.equal(vc, want_vc)


def test_compiles_as_one_custom_op_that_writes_the_caches():
    """Under torch.compile (fullgraph) the op is traced as a custom op that mutates the
    caches: the compiled step writes them as the eager one does."""
    step = STEPS[0]
    inp = _inputs(step, seed=3)
    want_q, want_kc, _ = _truth(step, inp)
    kc, vc = inp["k_cache"].to(DEVICE), inp["v_cache"].to(DEVICE)

    def layer_step(q, k, v, cos, sin, positions, slots):
        q = posenc_kernels.apply_rope_with_cache(
            q, k, v, cos, sin, positions=positions, k_cache=kc, v_cache=vc, slot_mapping=slots
        )
        return q * 2.0

    fn = torch.compile(layer_step, fullgraph=True, backend="aot_eager")
    args = [inp[n].to(DEVICE) for n in ("q", "k", "v", "cos", "sin", "positions", "slots")]
    with torch.no_grad():
        got = fn(*args)
    _assert_near(got / 2.0, want_q, step.dtype, "q")
    _assert_near(kc, want_kc, step.dtype, "k_cache")


def _bad(**change):
    """A valid call on the first step (float32) with one argument changed."""
    inp = _inputs(STEPS[0])
    args = dict(
        q=inp["q"], k=inp["k"], v=inp["v"], cos=inp["cos"], sin=inp["sin"],
        positions=inp["positions"], k_cache=inp["k_cache"], v_cache=inp["v_cache"],
        slot_mapping=inp["slots"],
    )  # fmt: skip
    args.update(change)
    return lambda: posenc_kernels.apply_rope_with_cache(**on_device(args))


_INP = _inputs(STEPS[0])
_T = _INP["q"].shape[0]
BAD = [  # (what, call, exception, text the message must hold)
    ("slot past the cache", _bad(slot_mapping=_INP["slots"] + 10_000), RuntimeError,
     "slot_mapping must lie in -1 .."),
    ("slot below -1", _bad(slot_mapping=_INP["slots"] - 100), RuntimeError, "slot_mapping"),
    ("position past the tables", _bad(positions=_INP["positions"] + 64), RuntimeError,
     "positions must lie in 0 .. 63"),
    ("k_cache heads", _bad(k_cache=_INP["k_cache"][:, :, :1].contiguous()), ValueError,
     "k_cache has 1 heads but k has Hk=2"),
    ("v heads", _bad(v=_INP["v"][:, :1]), ValueError, "v has 1 heads but k has Hk=2"),
    ("non-contiguous cache", _bad(v_cache=_INP["v_cache"].transpose(0, 1).contiguous()
                                  .transpose(0, 1)), ValueError, "v_cache must be contiguous"),
    ("cache dtype", _bad(k_cache=_INP["k_cache"].half()), TypeError, "k_cache is torch.float16"),
    ("slot dtype", _bad(slot_mapping=_INP["slots"].float()), TypeError, "slot_mapping must be"),
    ("slot count", _bad(slot_mapping=_INP["slots"][:-1]), ValueError,
     f"slot_mapping has {_T - 1} entries"),
    ("no positions, shared tables", _bad(positions=None), ValueError, "positions=None reads"),
    ("tokens", _bad(k=_INP["k"][:-1]), ValueError, "k has"),
    ("half tables", _bad(cos=_INP["cos"].half()), TypeError, "cos must be a float32 table"),
    ("rotary past D", _bad(rotary_dim=34), ValueError, "rotary_dim must lie in"),
    ("gradient", _bad(q=_INP["q"].clone().requires_grad_()), ValueError, "not differentiable"),
]  # fmt: skip


@pytest.mark.parametrize("what, call, exc, text", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_argument(what, call, exc, text):
    """One line naming the argument; slot and position values are checked on the device
    without a host sync (on the CPU the assertion raises at once)."""
    if exc is RuntimeError and DEVICE == "cuda":
        fails_on_the_device("test_rope_cache", what)
        return
    with pytest.raises(exc) as info:
        call()
    assert text in str(info.value), str(info.value)


def test_the_documented_serving_example_runs_as_written():
    """docs/kernels.md's serving example (the fused step, then paged decode attention),
    executed as it stands."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "kernels.md").read_text()
    block = text.split("(the serving example)", 1)[1].split("```python\n", 1)[1]
    scope = {}
    exec(compile(block.split("```", 1)[0], "docs/kernels.md", "exec"), scope)  # noqa: S102
    assert scope["out"].shape == (2, 8, 1, 64) and scope["q_rot"].shape == (21, 8, 64)
