"""posenc_kernels.relative_attention on the sequences models run: a decode step against a long cache
(split across programs or not), a batch of caches of their own lengths (kv_lens), documents
packed into one row (cu_seqlens); every bias family, outputs and gradients against float64
autograd of the posenc reference (which cuts the batch into its sequences: each_sequence)."""

import pytest
import torch
from torch.testing import assert_close

from posenc import functional as F
from posenc_kernels import relbias
from tests.posenc_kernels.test_relbias import DEVICE, TOL, _assert_grad_close, _leaf, trained

FAMILIES = ("alibi", "t5", "shaw_bias", "shaw_kv")


def _pair(family, q, k, v, causal, grad=True, extra=None, **seq):
    """(reference out, its leaves, kernel out, its leaves): float64 reference, the kernel in
    q's dtype; the trained tables are leaves of both (ALiBi's slopes, T5's and Shaw's tables,
    Shaw's E_K and E_V). seq: kv_lens or cu_seqlens, to both; extra: the kernel's alone."""
    h, d = q.shape[1], q.shape[-1]
    on_device = {n: t.to(DEVICE) for n, t in seq.items()}
    if family == "shaw_kv":
        emb = torch.randn(2, 7, d)
        want_leaves = [_leaf(t, torch.float64) for t in (q, k, v, emb[0], emb[1])]

        def attend(q_s, k_s, v_s, _at):
            lq, lk = q_s.shape[2], k_s.shape[2]
            mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal else None
            ek, ev = want_leaves[3:]
            return F.shaw_attention(q_s, k_s, v_s, ek, ev, 3, mask=mask, offset=lk - lq)[0]

        want = F.each_sequence(attend, *want_leaves[:3], **seq)
        leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, emb[0], emb[1])]
        kernel_args = dict(shaw_k=leaves[3], shaw_v=leaves[4])
    else:
        kwargs, name, table, ref, ref_table = trained(family, h)
        want_leaves = [*(_leaf(t, torch.float64) for t in (q, k, v)), ref_table]
        want = F.relative_attention(*want_leaves[:3], bias=ref, causal=causal, **seq)
        leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, table)]
        kernel_args = {**kwargs, name: leaves[3]}
    with torch.set_grad_enabled(grad):
        got = relbias.relative_attention(
            *leaves[:3], causal=causal, **kernel_args, **on_device, **(extra or {})
        )
    return want, want_leaves, got, leaves


def _check(want, want_leaves, got, leaves, dtype, backward=True):
    tol = TOL[dtype] * max(1.0, want.abs().max().item())
    assert got.shape == want.shape and got.dtype == dtype
    assert_close(got.detach().cpu().double(), want.detach(), atol=tol, rtol=TOL[dtype])
    if backward:
        up = torch.randn(want.shape, dtype=torch.float64)
        expected = torch.autograd.grad(want, want_leaves, up)
        grads = torch.autograd.grad(got, leaves, up.to(DEVICE, dtype))
        labels = ("dq", "dk", "dv", "dtable", "dshaw_v")
        for label, g, w in zip(labels, grads, expected, strict=False):
            _assert_grad_close(g, w, dtype, label)


DECODE = [  # (family, causal, splits, Lk): the heuristic's split at 1000, others at 300
    ("alibi", True, None, 1000),
    ("t5", False, None, 1000),
    ("shaw_bias", True, None, 1000),
    ("shaw_kv", True, None, 1000),
    ("alibi", False, 3, 300),
    ("t5", True, 8, 300),
    ("shaw_bias", False, 8, 300),
    ("shaw_kv", False, 3, 300),
    ("shaw_kv", True, 1, 300),
]


class _LaunchSpy:
    """Stands in for the forward kernel: records each launch's grid and heads a program."""

    def __init__(self, launched, kernel=relbias._relbias_fwd_kernel):
        self.launched, self.kernel = launched, kernel
        self.warmup = kernel.warmup

    def __getitem__(self, grid):
        def run(*args, **constexprs):
            self.launched.append((grid, constexprs["QPACK"]))
            return self.kernel[grid](*args, **constexprs)

        return run


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "head-a-program"])
@pytest.mark.parametrize(
    "case", DECODE, ids=lambda c: f"{c[0]}-{'causal' if c[1] else 'full'}-splits{c[2]}-{c[3]}"
)
def test_decode_step_against_a_long_cache(case, packed, monkeypatch):
    """Lq = 1 against a long cache (1000: far past every clip, T5's 128 included), grouped-query
    heads (4 on 2 kv heads: packed two a program, or one head a program), forward only (as
    decoding runs it): the keys split into that many programs merged by their log-sum-exps,
    not split, or as the heuristic chooses (here: 4 programs on the 132 SMs assumed off a GPU),
    all equal to the reference."""
    family, causal, splits, lk = case
    torch.manual_seed(5)
    q = torch.randn(2, 4, 1, 32)
    k, v = (torch.randn(2, 2, lk, 32) for _ in range(2))
    seen, chosen = [], []
    merge, forward_grid = relbias.merge, relbias.forward_grid
    spy = lambda part, *a: seen.append(part.shape[2]) or merge(part, *a)  # noqa: E731
    monkeypatch.setattr(relbias, "merge", spy)
    monkeypatch.setattr(
        relbias, "forward_grid", lambda *a: chosen.append(forward_grid(*a)) or chosen[-1]
    )
    if not packed:
        monkeypatch.setattr(relbias, "packed_heads", lambda *a: 1)
    launched = []
    monkeypatch.setattr(relbias, "_relbias_fwd_kernel", _LaunchSpy(launched))
    want, _, got, _ = _pair(family, q, k, v, causal, grad=False, extra={"num_splits": splits})
    _check(want, None, got, None, torch.float32, backward=False)
    grid = chosen[0]
    assert (seen or [1]) == [grid.splits]  # the merge saw as many partial outputs as chosen
    assert grid.pack == (2 if packed else 1)
    assert grid.programs == 2 * 4 // grid.pack * grid.splits  # B x H / pack x splits
    assert launched == [((grid.programs,), grid.pack)]  # the grid the model describes
    if DEVICE == "cpu":  # the interpreter's 16 x 16 tiles and the 132 SMs assumed off a GPU:
        # 1000 keys (63 blocks of 16): packed, 15 asked of 4 programs (45% of 132 SMs, the
        # fullest), 13 of 5 blocks each; 8 programs: 15 asked (91%), 13 again; 300 keys (19
        # blocks): 3 asked, 3 of 7 blocks; 8 asked, 7 of 3
        assert grid.splits == {None: 13, 1: 1, 3: 3, 8: 7}[splits]


CACHES = [  # (family, Lq, causal, dtype): ragged caches of one batch, forward and backward
    ("alibi", 1, True, torch.float32),
    ("t5", 4, True, torch.bfloat16),
    ("shaw_bias", 3, False, torch.float32),
    ("shaw_kv", 4, True, torch.float32),
    ("t5", 2, False, torch.float32),
    ("shaw_kv", 1, False, torch.bfloat16),
]


@pytest.mark.parametrize(
    "case", CACHES, ids=lambda c: f"{c[0]}-{c[1]}q-{'causal' if c[2] else 'full'}-{c[3]}"
)
def test_batch_of_caches_of_their_own_lengths(case):
    """kv_lens: each row's keys 0 .. kv_lens[b] - 1 of Lk = 70 (one full, one ending inside a
    key block, one shorter than a block), its queries at kv_lens[b] - Lq + i; grouped-query
    heads; outputs and every gradient (keys past kv_lens[b] get zero dk, dv)."""
    family, lq, causal, dtype = case
    torch.manual_seed(7)
    q = torch.randn(3, 4, lq, 32).to(dtype)
    k, v = (torch.randn(3, 2, 70, 32).to(dtype) for _ in range(2))
    kv_lens = torch.tensor([70, 37, 5])
    want, want_leaves, got, leaves = _pair(family, q, k, v, causal, kv_lens=kv_lens)
    _check(want, want_leaves, got, leaves, dtype)


PACKED = [  # (family, document lengths, causal, dtype): 3-5 documents of unequal length
    ("alibi", (7, 30, 1, 19), True, torch.float32),
    ("t5", (40, 3, 22), True, torch.bfloat16),
    ("shaw_bias", (9, 9, 16, 2, 25), False, torch.float32),
    ("shaw_kv", (12, 31, 5), True, torch.float32),
    ("alibi", (18, 5, 27), False, torch.bfloat16),
    ("shaw_kv", (3, 20, 8, 14), False, torch.bfloat16),
]


@pytest.mark.parametrize(
    "case", PACKED, ids=lambda c: f"{c[0]}-{len(c[1])}docs-{'causal' if c[2] else 'full'}-{c[3]}"
)
def test_packed_documents_attend_within_themselves(case):
    """cu_seqlens: documents packed into one row of T tokens; attention, distances and the
    causal mask within each document; grouped-query heads; outputs and every gradient, the
    tables' summed over documents."""
    family, sizes, causal, dtype = case
    torch.manual_seed(11)
    t = sum(sizes)
    cu = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(1, 4, t, 32).to(dtype)
    k, v = (torch.randn(1, 2, t, 32).to(dtype) for _ in range(2))
    extra = {"max_seqlen": max(sizes)} if family == "alibi" else None  # no host read
    want, want_leaves, got, leaves = _pair(family, q, k, v, causal, extra=extra, cu_seqlens=cu)
    _check(want, want_leaves, got, leaves, dtype)


def test_queries_that_see_no_key_output_zero():
    """kv_lens[b] < Lq with causal (and kv_lens[b] = 0): those queries see no key; they output
    0 and their gradients are 0, not NaN (the forward saves +inf as their log-sum-exp)."""
    torch.manual_seed(2)
    q = torch.randn(2, 2, 4, 32, device=DEVICE, requires_grad=True)
    k, v = (torch.randn(2, 2, 16, 32, device=DEVICE, requires_grad=True) for _ in range(2))
    slopes = torch.ones(2, device=DEVICE)
    kv_lens = torch.tensor([2, 0], device=DEVICE)  # row 0: queries 0, 1 at -2, -1; row 1: none
    out = relbias.relative_attention(q, k, v, alibi_slopes=slopes, causal=True, kv_lens=kv_lens)
    assert out[0, :, :2].abs().max() == 0 and out[1].abs().max() == 0
    assert out[0, :, 2:].abs().max() > 0
    grads = torch.autograd.grad(out, [q, k, v], torch.ones_like(out))
    assert all(torch.isfinite(g).all() for g in grads)
    assert grads[0][1].abs().max() == 0 and grads[1][:, :, 2:].abs().max() == 0


def _call(**kwargs):
    q = torch.zeros(1, 2, 8, 32, device=DEVICE)
    args = dict(alibi_slopes=torch.ones(2, device=DEVICE))
    return lambda: relbias.relative_attention(q, q, q, **{**args, **kwargs})


BAD = [
    ("max_seqlen alone", _call(max_seqlen=4), ValueError, "max_seqlen goes with cu_seqlens"),
    (
        "max_seqlen past T",
        _call(cu_seqlens=torch.tensor([0, 8], device=DEVICE), max_seqlen=9),
        ValueError,
        "max_seqlen must be an int in 1 .. T=8",
    ),
    (
        "kv_lens 2-D",
        _call(kv_lens=torch.ones(1, 1, dtype=torch.int32)),
        TypeError,
        "kv_lens must be a 1-D",
    ),
    ("kv_lens float", _call(kv_lens=torch.ones(1)), TypeError, "kv_lens must be a 1-D int32"),
    (
        "kv_lens length",
        _call(kv_lens=torch.ones(2, dtype=torch.int32)),
        ValueError,
        "kv_lens must have 1",
    ),
    (
        "cu_seqlens short",
        _call(cu_seqlens=torch.tensor([0, 5], device=DEVICE)),
        ValueError,
        "cu_seqlens must run from 0 to T=8",
    ),
    (
        "cu_seqlens down",
        _call(cu_seqlens=torch.tensor([0, 6, 3, 8], device=DEVICE)),
        ValueError,
        "non-decreasing",
    ),
    (
        "both",
        _call(
            kv_lens=torch.ones(1, dtype=torch.int32), cu_seqlens=torch.tensor([0, 8], device=DEVICE)
        ),
        ValueError,
        "not both",
    ),
    (
        "splits packed",
        _call(cu_seqlens=torch.tensor([0, 8], device=DEVICE), num_splits=2),
        ValueError,
        "num_splits=2: packed",
    ),
    ("splits zero", _call(num_splits=0), ValueError, "num_splits must be an int >= 1"),
]


@pytest.mark.parametrize(("call", "exc", "text"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_sequences_name_the_argument(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


def test_split_forward_refuses_a_gradient_and_packing_needs_one_row():
    q = torch.zeros(2, 2, 8, 32, device=DEVICE, requires_grad=True)
    slopes = torch.ones(2, device=DEVICE)
    with pytest.raises(ValueError, match="num_splits=2: a split forward is not differentiable"):
        relbias.relative_attention(q, q, q, alibi_slopes=slopes, num_splits=2)
    with pytest.raises(ValueError, match="cu_seqlens packs documents into one row"):
        relbias.relative_attention(
            q, q, q, alibi_slopes=slopes, cu_seqlens=torch.tensor([0, 8], device=DEVICE)
        )


def test_the_documented_example_runs_as_written():
    """docs/kernels.md's runnable example (kv_lens and cu_seqlens), executed as it stands."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "kernels.md").read_text()
    block = text.split("Runnable as written", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(compile(block, "docs/kernels.md", "exec"), scope)  # noqa: S102
    assert scope["out"].shape == (1, 8, 100, 64)


@pytest.mark.parametrize("family", ["t5", "shaw_kv"])
def test_split_keys_in_square_causal_attention(family):
    """The split also serves a small grid of full-length queries (inference of a short batch):
    causal Lq = Lk = 70, keys in 3 splits, each split's band and far parts from its own start."""
    torch.manual_seed(9)
    q, k, v = (torch.randn(1, 2, 70, 32) for _ in range(3))
    want, _, got, _ = _pair(family, q, k, v, True, grad=False, extra={"num_splits": 3})
    _check(want, None, got, None, torch.float32, backward=False)
