"""posenc_kernels.relbias (forward and backward) against posenc.functional.relative_attention in
float64.

On the CPU interpreter the kernel upcasts bfloat16 dot operands to float32 (Triton 3.9's
interpreter computes bfloat16 tl.dot wrongly); float16 and float32 run the GPU's dot path.
"""

import copy
import math
import os

import pytest
import torch
from torch.testing import assert_close
from triton.runtime.errors import OutOfResources

import posenc
from posenc import functional as F
from posenc_kernels import _relbias_families, _relbias_grid, _relbias_tiles, relbias
from posenc_kernels._relbias_families import _Spec

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _family(name, heads):
    if name == "alibi":
        module = posenc.ALiBi(heads)
        return module, {"alibi_slopes": module.slopes}
    if name == "t5":
        module = posenc.T5RelativeBias(heads, num_buckets=16, max_distance=32)
        kwargs = {
            "t5_table": module.relative_attention_bias.weight.detach(),
            "t5_num_buckets": 16,
            "t5_max_distance": 32,
        }
        return module, kwargs
    module = posenc.ShawBias(heads, max_relative_position=3)
    return module, {"shaw_bias": module.table.detach()}


def trained(family, heads):
    """The family's kernel arguments with a perturbed float32 table, and a float64 reference
    module whose table is its own leaf: (kwargs, the table's argument name, table, module,
    its leaf). ALiBi's slopes buffer becomes a parameter; T5's and Shaw's tables are ones."""
    module, kwargs = _family(family, heads)
    name = next(n for n in kwargs if n in ("alibi_slopes", "t5_table", "shaw_bias"))
    table = kwargs[name].detach().float() + 0.1 * torch.randn(kwargs[name].shape)
    ref = copy.deepcopy(module).double()
    ref_table = torch.nn.Parameter(table.double())
    if family == "t5":
        ref.relative_attention_bias.weight = ref_table
    else:
        setattr(ref, "slopes" if family == "alibi" else "table", ref_table)
    return kwargs, name, table, ref, ref_table


CASES = [  # (family, B, H, Lq, Lk, D, causal): odd lengths, Lq != Lk, D = 80
    ("alibi", 1, 2, 21, 21, 32, False),
    ("alibi", 2, 1, 19, 19, 32, True),
    ("t5", 1, 2, 17, 40, 32, False),
    ("t5", 1, 2, 33, 33, 80, True),
    ("shaw_bias", 2, 2, 9, 23, 32, False),
    ("shaw_bias", 1, 3, 18, 18, 64, True),
]


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'causal' if c[6] else 'full'}")
def test_forward_matches_reference(case, dtype):
    family, b, h, lq, lk, d, causal = case
    q = torch.randn(b, h, lq, d).to(dtype)
    k, v = (torch.randn(b, h, lk, d).to(dtype) for _ in range(2))
    module, kwargs = _family(family, h)
    with torch.no_grad():
        want = F.relative_attention(q.double(), k.double(), v.double(), bias=module, causal=causal)
    on = {n: (t.to(DEVICE) if isinstance(t, torch.Tensor) else t) for n, t in kwargs.items()}
    got = relbias.relative_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), causal=causal, **on)
    assert got.dtype == dtype and got.shape == q.shape
    assert_close(got.cpu().double(), want.double(), atol=TOL[dtype], rtol=TOL[dtype])


SHAW_KV = [  # (B, H, Lq, Lk, D, K, causal, with value term)
    (1, 2, 21, 21, 32, 3, False, True),
    (2, 1, 9, 30, 32, 5, False, True),
    (1, 2, 19, 19, 64, 4, True, True),
    (1, 1, 17, 17, 32, 40, False, False),  # K beyond the lengths: every offset its own bucket
    (1, 1, 50, 50, 32, 2, False, True),  # most 16 x 16 tiles lie beyond the clip: one bucket
    (1, 2, 44, 44, 32, 12, True, True),  # 25 indices: the value term read back in two chunks
]


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize(
    "case", SHAW_KV, ids=lambda c: f"K{c[5]}-{'causal' if c[6] else 'full'}-{'kv' if c[7] else 'k'}"
)
def test_shaw_key_and_value_terms(case, dtype):
    b, h, lq, lk, d, clip, causal, value = case
    q = torch.randn(b, h, lq, d).to(dtype)
    k, v = (torch.randn(b, h, lk, d).to(dtype) for _ in range(2))
    emb_k, emb_v = torch.randn(2, 2 * clip + 1, d)
    mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal else None
    want, _ = F.shaw_attention(
        q.double(),
        k.double(),
        v.double(),
        emb_k.double(),
        emb_v.double() if value else None,
        clip,
        mask=mask,
        offset=lk - lq,  # the kernel's queries sit at the keys' end
    )
    args = [t.to(DEVICE) for t in (q, k, v)]
    shaw_v = emb_v.to(DEVICE) if value else None
    got = relbias.relative_attention(*args, shaw_k=emb_k.to(DEVICE), shaw_v=shaw_v, causal=causal)
    assert_close(got.cpu().double(), want, atol=TOL[dtype] * 2, rtol=TOL[dtype])


def test_strided_inputs_are_read_in_place(monkeypatch):
    """The forward kernel receives the caller's storage (no copy made to a contiguous layout):
    the q, k, v it is launched with start where the views into x start."""
    x = torch.randn(1, 11, 3, 2, 32, device=DEVICE)  # (B, L, 3, H, D): a fused qkv projection
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, L, D) strided views
    launched = []
    run = relbias._relbias_fwd_kernel.run

    def spy(*args, **kwargs):
        launched.append(args[:3])
        return run(*args, **kwargs)

    monkeypatch.setattr(relbias._relbias_fwd_kernel, "run", spy)
    module, kwargs = _family("alibi", 2)
    want = F.relative_attention(*(t.double().cpu() for t in (q, k, v)), bias=module)
    got = relbias.relative_attention(q, k, v, alibi_slopes=kwargs["alibi_slopes"].to(DEVICE))
    assert_close(got.cpu().double(), want, atol=2e-5, rtol=2e-5)
    assert len(launched) == 1
    assert [t.data_ptr() for t in launched[0]] == [t.data_ptr() for t in (q, k, v)]


q4 = torch.randn(1, 2, 5, 8, device=DEVICE)
k6 = torch.randn(1, 2, 6, 8, device=DEVICE)
k4d = torch.randn(1, 2, 5, 4, device=DEVICE)


def ones(*shape):
    return torch.ones(*shape, device=DEVICE)


def _ra(q, k, v, **kwargs):
    return lambda: relbias.relative_attention(q, k, v, **kwargs)


BAD = [
    (
        "two biases",
        _ra(q4, q4, q4, alibi_slopes=ones(2), shaw_bias=ones(2, 3)),
        ValueError,
        "at most one",
    ),
    ("slopes shape", _ra(q4, q4, q4, alibi_slopes=ones(3)), ValueError, "alibi_slopes"),
    ("t5 shape", _ra(q4, q4, q4, t5_table=ones(2, 32)), ValueError, "t5_table"),
    ("shaw shape", _ra(q4, q4, q4, shaw_bias=ones(2, 4)), ValueError, "shaw_bias"),
    # at or below the exact buckets T5's log-spaced buckets were a division by zero (an
    # IndexError deep in the gather) or fell back among the exact ones
    (
        "t5 max_distance",
        _ra(q4, q4, q4, t5_table=ones(32, 2), t5_max_distance=8),
        ValueError,
        "t5_max_distance must exceed the 8 exact buckets",
    ),
    (
        "t5 buckets",
        _ra(q4, q4, q4, t5_table=ones(1, 2), t5_num_buckets=1, t5_bidirectional=False),
        ValueError,
        "t5_num_buckets must be >= 2",
    ),
    (
        "t5 bidirectional",
        _ra(q4, q4, q4, t5_table=ones(32, 2), t5_bidirectional="yes"),
        TypeError,
        "t5_bidirectional",
    ),
    ("head dim", _ra(q4, k4d, k4d, alibi_slopes=ones(2)), ValueError, "k and v"),
    (
        "dtype",
        _ra(q4, q4.half(), q4.half(), alibi_slopes=ones(2)),
        ValueError,
        "k is torch.float16",
    ),
    ("int", _ra(q4.long(), q4, q4, alibi_slopes=ones(2)), TypeError, "q must be"),
    ("causal lengths", _ra(k6, q4, q4, alibi_slopes=ones(2), causal=True), ValueError, "Lq <= Lk"),
    (
        "device",
        _ra(q4, q4, q4, alibi_slopes=ones(2).to("meta")),
        ValueError,
        "alibi_slopes is on meta",
    ),
    ("shaw_v alone", _ra(q4, q4, q4, shaw_v=ones(3, 8)), ValueError, "shaw_v needs shaw_k"),
    ("shaw_k shape", _ra(q4, q4, q4, shaw_k=ones(3, 4)), ValueError, "shaw_k must be"),
    (
        "shaw_v shape",
        _ra(q4, q4, q4, shaw_k=ones(3, 8), shaw_v=ones(5, 8)),
        ValueError,
        "shaw_v must be",
    ),
    (
        "tiles type",
        _ra(q4, q4, q4, alibi_slopes=ones(2), fwd_tiles="big"),
        TypeError,
        "fwd_tiles must be",
    ),
    (
        "block_m",
        _ra(q4, q4, q4, alibi_slopes=ones(2), fwd_tiles=relbias.Tiles(24, 16)),
        ValueError,
        "fwd_tiles.block_m",
    ),
    (
        "block_n",
        _ra(q4, q4, q4, alibi_slopes=ones(2), bwd_tiles=(16, 512)),
        ValueError,
        "bwd_tiles.block_n",
    ),
    (
        "warps",
        _ra(q4, q4, q4, alibi_slopes=ones(2), bwd_tiles=relbias.Tiles(16, 16, 3)),
        ValueError,
        "bwd_tiles.num_warps",
    ),
    (
        "stages",
        _ra(q4, q4, q4, alibi_slopes=ones(2), fwd_tiles=relbias.Tiles(16, 16, 4, 0)),
        ValueError,
        "fwd_tiles.num_stages",
    ),
]


@pytest.mark.parametrize(("call", "exc", "text"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_names_the_argument(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


# Backward: gradients of q, k, v and of the bias table against float64 autograd through the
# posenc reference. Low-precision gradients are compared relative to their largest entry.
# Worst scaled errors measured under the interpreter: fp32 1.7e-6, fp16 5.3e-3, bf16 1.5e-2; the
# half-precision bounds leave room for the GPU's native-dtype dots, not yet run.
GRAD_TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def _assert_grad_close(got, want, dtype, name):
    bound = GRAD_TOL[dtype] * max(1.0, want.abs().max().item())
    assert got is not None, f"no gradient for {name}"
    assert_close(got.cpu().double(), want, atol=bound, rtol=GRAD_TOL[dtype], msg=name)


def _leaf(t, dtype=None):
    return t.detach().to(dtype or t.dtype).requires_grad_()


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'causal' if c[6] else 'full'}")
def test_backward_matches_reference(case, dtype):
    family, b, h, lq, lk, d, causal = case
    q, k, v = (torch.randn(b, h, n, d).to(dtype) for n in (lq, lk, lk))
    _gradients_meet_float64(family, q, k, v, causal)


def _gradients_meet_float64(family, q, k, v, causal):
    """The kernel's gradients of q, k, v and the family's table (in q's dtype; the table's
    float32) against float64 autograd of posenc's reference."""
    dtype = q.dtype
    kwargs, name, table, ref, ref_table = trained(family, q.shape[1])
    want_leaves = [*(_leaf(t, torch.float64) for t in (q, k, v)), ref_table]
    out = F.relative_attention(*want_leaves[:3], bias=ref, causal=causal)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    want = torch.autograd.grad(out, want_leaves, grad_out)
    leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, table)]
    got_out = relbias.relative_attention(*leaves[:3], causal=causal, **{**kwargs, name: leaves[3]})
    got = torch.autograd.grad(got_out, leaves, grad_out.to(DEVICE, dtype))
    for label, g, w in zip(("dq", "dk", "dv", "d" + name), got, want, strict=True):
        assert g.dtype == (dtype if label != "d" + name else torch.float32)
        _assert_grad_close(g, w, dtype, label)


@pytest.mark.parametrize("family", ["alibi", "t5", "shaw_bias"])
def test_a_causal_grid_takes_every_block_of_every_head_heaviest_first(family, monkeypatch):
    """A causal forward and dk/dv over whole sequences order their programs heaviest first,
    eight heads at a time (ORDER): with 2 x 5 heads (a group of 8 and one of 2) and three blocks
    a head, every (block, head) is computed once, forward and backward, against float64; and
    the launchers pass that order only there."""
    orders = []
    for kernel in ("_relbias_fwd_kernel", "_relbias_bwd_dkdv_kernel"):
        launcher = getattr(relbias, kernel)

        class Spy:
            def __init__(self, jit, name):
                self.jit, self.name = jit, name

            def __getitem__(self, grid):
                def run(*args, **kwargs):
                    orders.append((self.name, kwargs["ORDER"]))
                    return self.jit[grid](*args, **kwargs)

                return run

        monkeypatch.setattr(relbias, kernel, Spy(launcher, kernel.split("_")[-2]))
    q, k, v = (torch.randn(2, 5, 37, 32) for _ in range(3))
    _gradients_meet_float64(family, q, k, v, causal=True)  # the output too, through them
    assert orders == [("fwd", _relbias_grid.LAST_FIRST), ("dkdv", _relbias_grid.FIRST_FIRST)]
    orders.clear()
    kwargs = trained(family, 5)[0]
    relbias.relative_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), **kwargs)
    assert orders == [("fwd", _relbias_grid.NATURAL)]


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize(
    "case", SHAW_KV, ids=lambda c: f"K{c[5]}-{'causal' if c[6] else 'full'}-{'kv' if c[7] else 'k'}"
)
def test_shaw_key_and_value_backward(case, dtype):
    b, h, lq, lk, d, clip, causal, value = case
    q, k, v = (torch.randn(b, h, n, d).to(dtype) for n in (lq, lk, lk))
    emb_k, emb_v = torch.randn(2, 2 * clip + 1, d)
    mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal else None
    inputs = [q, k, v, emb_k] + ([emb_v] if value else [])
    want_leaves = [_leaf(t, torch.float64) for t in inputs]
    out, _ = F.shaw_attention(
        *want_leaves[:4], want_leaves[4] if value else None, clip, mask=mask, offset=lk - lq
    )
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    want = torch.autograd.grad(out, want_leaves, grad_out)
    leaves = [_leaf(t.to(DEVICE)) for t in inputs]
    got_out = relbias.relative_attention(
        *leaves[:3], shaw_k=leaves[3], causal=causal, shaw_v=leaves[4] if value else None
    )
    got = torch.autograd.grad(got_out, leaves, grad_out.to(DEVICE, dtype))
    labels = ("dq", "dk", "dv", "dshaw_k", "dshaw_v")[: len(inputs)]
    for label, g, w in zip(labels, got, want, strict=True):
        _assert_grad_close(g, w, dtype, label)


def test_table_gradient_is_deterministic():
    """Per-program partial sums reduced on the host, no atomics: the same bits every time. On a
    GPU, where programs run concurrently, two runs over many programs must agree bit for bit;
    under the serial interpreter they always would, so there the compiled dq kernel (Triton's
    IR for sm_90a, compiled on the CPU) must hold no atomic operation."""
    if DEVICE == "cuda":
        q, k, v = (torch.randn(2, 4, 2048, 64, device=DEVICE) for _ in range(3))
        table = torch.randn(32, 4, device=DEVICE, requires_grad=True)
        grads = []
        for _ in range(2):
            out = relbias.relative_attention(q, k, v, t5_table=table)
            (grad,) = torch.autograd.grad(out.sum(), table)
            grads.append(grad)
        assert torch.equal(grads[0], grads[1]) and grads[0].abs().sum() > 0
        return
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "from tools.audit.capture import capture; from tools.audit.specs import Spec;"
        "from tools.audit.compile import compile_job;"
        "jobs = capture(Spec('relbias', 't5'), 90);"
        "dq = [j for j in jobs if j['name'] == '_relbias_bwd_dq_kernel'];"
        "print(len(dq), compile_job(dq[0])['atomics'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "0"], out.stdout


def test_t5_buckets_are_exact_for_the_public_configuration():
    """The kernel's T5 lookup table against the public bucket function (float32 logarithm, as
    the T5 code computes it) at 32 buckets / max distance 128, bidirectional and not, over
    offsets beyond the clip: at |r| = 16, 32, 64 the log-spaced boundary is an exact integer."""
    rel = torch.arange(-300, 301)

    def public(r, bidirectional, num_buckets=32, max_distance=128):
        n, bucket = -r, torch.zeros_like(r)
        if bidirectional:
            num_buckets //= 2
            bucket += (n < 0).long() * num_buckets
            n = n.abs()
        else:
            n = torch.maximum(n, torch.zeros_like(n))
        exact = num_buckets // 2
        large = exact + (
            torch.log(n.float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)
        ).to(torch.long)
        large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
        return bucket + torch.where(n < exact, n, large)

    for bidirectional in (True, False):
        got = _relbias_families._t5_buckets(rel, bidirectional, 32, 128)
        assert torch.equal(got.long(), public(rel, bidirectional))
        assert torch.equal(got.long(), F.t5_relative_bucket(rel, bidirectional, 32, 128))
    at = _relbias_families._t5_buckets(torch.tensor([-64, -32, -16, 16, 32, 64]), True, 32, 128)
    assert at.tolist() == [14, 12, 10, 26, 28, 30]


class _Spy:
    """Records the keyword arguments of each launch of a kernel, then launches it."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append(kwargs)
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.mark.parametrize("family", ["alibi", "t5", "shaw_bias"])
def test_table_gradient_only_when_the_table_trains(family, monkeypatch):
    spy = _Spy(relbias._relbias_bwd_dq_kernel)
    monkeypatch.setattr(relbias, "_relbias_bwd_dq_kernel", spy)
    module, kwargs = _family(family, 2)
    name = next(n for n in kwargs if n in ("alibi_slopes", "t5_table", "shaw_bias"))
    q, k, v = (torch.randn(1, 2, 19, 32, device=DEVICE, requires_grad=True) for _ in range(3))
    for trains in (False, True):
        table = kwargs[name].detach().float().to(DEVICE).requires_grad_(trains)
        out = relbias.relative_attention(q, k, v, **{**kwargs, name: table})
        grads = torch.autograd.grad(out.sum(), [q, table] if trains else [q])
        assert spy.calls[-1]["TABLE_GRAD"] is trains
        assert grads[0].abs().sum() > 0 and (not trains or grads[1].abs().sum() > 0)


@pytest.mark.parametrize("family", ["t5", "shaw_kv"])
def test_memory_grows_linearly_with_length(family):
    """Peak bytes of torch storage the call allocates (bench.run.memory.peak_bytes: the CUDA
    allocator on a GPU, a dispatch-mode tally on the CPU), forward and backward, at L and 2L:
    doubling L must about double it (an (L x L) tensor anywhere would quadruple its share)."""
    from bench.run.memory import peak_bytes

    def peak(n):
        q, k, v = (torch.randn(1, 2, n, 16, device=DEVICE, requires_grad=True) for _ in range(3))
        if family == "t5":
            kwargs = {
                "t5_table": torch.randn(16, 2, device=DEVICE, requires_grad=True),
                "t5_num_buckets": 16,
                "t5_max_distance": 32,
            }
        else:
            kwargs = {
                "shaw_k": torch.randn(9, 16, device=DEVICE, requires_grad=True),
                "shaw_v": torch.randn(9, 16, device=DEVICE, requires_grad=True),
            }

        def call():
            relbias.relative_attention(q, k, v, **kwargs).sum().backward()

        return peak_bytes(call, DEVICE)

    small, large = peak(32), peak(64)
    assert small > 0 and large <= 2.2 * small, (small, large)


def test_cpu_tensor_outside_the_interpreter_says_how(monkeypatch):
    """(The launcher reads the variable per call; triton's own import-time switch is unaffected.)"""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        q = torch.randn(1, 2, 5, 8)  # on the CPU, whatever the machine
        relbias.relative_attention(q, q, q, alibi_slopes=torch.ones(2))


# Tiles other than the interpreter's 16 x 16: rectangular, both orientations, the dq kernel's
# transpose of bwd_tiles (32 x 64: sm_90a's dk/dv and dq shapes), tiles longer than the
# sequence; and 16 x 16 at lengths where every part of the key loop (beyond the clip on either
# side, the band) spans several blocks, at a length that is not a multiple of the tile (the last
# block's bounds); float32 forward and backward, table gradients included.
TILES = [
    (relbias.Tiles(32, 16), relbias.Tiles(16, 32), (37, 37), (29, 45)),
    (relbias.Tiles(16, 64, 8, 3), relbias.Tiles(64, 16, 8, 3), (37, 37), (29, 45)),
    (relbias.Tiles(32, 16), relbias.Tiles(32, 64), (37, 37), (29, 45)),
    (relbias.Tiles(32, 16), relbias.Tiles(64, 64, 4, 2), (37, 37), (29, 45)),  # ALiBi's dk/dv
    (relbias.Tiles(16, 16), relbias.Tiles(16, 16), (101, 101), (83, 117)),
    (relbias.Tiles(16, 16), relbias.Tiles(16, 16), (101, 101), (83, 117), "one loop"),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "tiles", TILES, ids=["32x16", "16x64", "32x64", "64x64", "16x16-long", "one-loop"]
)
@pytest.mark.parametrize("family", ["alibi", "t5", "shaw_bias", "shaw_kv"])
def test_other_tiles_match_reference(family, tiles, causal, monkeypatch):
    """ "one loop": the GPU's float32 IEEE path, the key loop unsplit."""
    lq, lk = tiles[2] if causal else tiles[3]
    if len(tiles) > 4:
        monkeypatch.setattr(relbias, "_split", lambda q, ieee: False)
    q, k, v = (torch.randn(1, 2, n, 32) for n in (lq, lk, lk))
    if family == "shaw_kv":
        tables = list(torch.randn(2, 2 * 3 + 1, 32))
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal else None

        def reference(q, k, v, emb_k, emb_v):
            return F.shaw_attention(q, k, v, emb_k, emb_v, 3, mask=mask, offset=lk - lq)[0]

        def kernel(q, k, v, emb_k, emb_v):
            return relbias.relative_attention(
                q,
                k,
                v,
                shaw_k=emb_k,
                shaw_v=emb_v,
                causal=causal,
                fwd_tiles=tiles[0],
                bwd_tiles=tiles[1],
            )
    else:
        module, kwargs = _family(family, 2)
        name = next(n for n in kwargs if n in ("alibi_slopes", "t5_table", "shaw_bias"))
        tables = [kwargs[name].detach().float() + 0.1 * torch.randn(kwargs[name].shape)]
        attr = {"alibi": "slopes", "shaw_bias": "table"}.get(family)

        def reference(q, k, v, table):
            ref = copy.deepcopy(module).double()
            if family == "t5":
                ref.relative_attention_bias.weight = table
            else:
                setattr(ref, attr, table)
            return F.relative_attention(q, k, v, bias=ref, causal=causal)

        def kernel(q, k, v, table):
            kwargs[name] = table
            return relbias.relative_attention(
                q, k, v, causal=causal, fwd_tiles=tiles[0], bwd_tiles=tiles[1], **kwargs
            )

    # tables as Parameters: the reference module takes them as they are (T5's Embedding.weight)
    want_leaves = [
        *(_leaf(t, torch.float64) for t in (q, k, v)),
        *(torch.nn.Parameter(t.double()) for t in tables),
    ]
    want_out = reference(*want_leaves)
    grad_out = torch.randn(want_out.shape, dtype=torch.float64)
    want = torch.autograd.grad(want_out, want_leaves, grad_out)
    leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, *tables)]
    got_out = kernel(*leaves)
    assert_close(
        got_out.cpu().double(), want_out.detach(), atol=TOL[torch.float32], rtol=TOL[torch.float32]
    )
    got = torch.autograd.grad(got_out, leaves, grad_out.to(DEVICE, torch.float32))
    for label, g, w in zip(("dq", "dk", "dv", "dtable", "dshaw_v"), got, want, strict=False):
        _assert_grad_close(g, w, torch.float32, label)


def test_default_tiles_are_valid_on_every_gpu(monkeypatch):
    """Outside the interpreter the tiles come from tables per GPU generation, dtype and head dim:
    each is a valid Tiles with _SAFE as its fallback."""
    monkeypatch.setattr(_relbias_tiles, "_interpreting", lambda: False)
    for capability in ((9, 0), (8, 0), (8, 6), (7, 5), (10, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d, c=capability: c)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for d in (32, 64, 80, 128):
                q = torch.empty(1, 1, 1, d, dtype=dtype)
                for backward in (False, True):
                    spec = _Spec(relbias.SHAW_KV, False, 1.0, 40, 81, has_value=True)
                    tiles, fallback = spec.tiles(q, backward)
                    assert (
                        relbias.check_tiles("tiles", tiles) == tiles
                        and fallback == _relbias_tiles._SAFE
                    )
    spec = _Spec(relbias.ALIBI, False, 1.0, 0, 1, fwd_tiles=relbias.Tiles(32, 16))
    assert spec.tiles(q, False) == (relbias.Tiles(32, 16), None)  # the user's: no fallback


def test_a_family_row_comes_before_its_kind(monkeypatch):
    """The tile tables' family rows: FoX's float32 forward (16 rows on 8 warps at D=128, every
    GPU generation); ALiBi's dk/dv on sm_90a in half precision at D=128, 64 x 64 on 4 warps
    where each kv head has one query head, the rows are whole sequences, 32-bit and without a
    window (`alone`), else its kind's; the other families take their kind's row (on sm_90a
    every backward on 4 warps: m64n32 score products; Shaw's key and value terms' from the
    kind "value")."""
    monkeypatch.setattr(_relbias_tiles, "_interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d: (9, 0))
    half = torch.empty(1, 1, 1, 128, dtype=torch.bfloat16)
    alibi, t5 = _Spec(relbias.ALIBI, False, 1.0, 0, 1), _Spec(relbias.TABLE, False, 1.0, 4, 9)
    assert alibi.tiles(half, True)[0] == relbias.Tiles(64, 64, 4, 2)
    window = _Spec(relbias.ALIBI, True, 1.0, 0, 1, window=128)
    kind = relbias.Tiles(32, 64, 4, 2)
    assert alibi.tiles(half, True, alone=False)[0] == window.tiles(half, True)[0] == kind
    assert t5.tiles(half, True)[0] == kind
    shaw_kv = _Spec(relbias.SHAW_KV, False, 1.0, 4, 9, has_value=True)
    assert shaw_kv.tiles(half, True)[0] == relbias.Tiles(32, 64, 4, 2)
    assert alibi.tiles(half, False) == t5.tiles(half, False)  # the forward: no ALiBi row
    fox = _Spec(relbias.SHAW_KV, True, 1.0, 0, 1, col=True)
    for capability, want in (
        ((9, 0), (16, 32, 8, 2)),
        ((8, 0), (16, 32, 8, 1)),
        ((7, 5), (16, 64, 8, 3)),
    ):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d, c=capability: c)
        assert fox.tiles(torch.empty(1, 1, 1, 128), False)[0] == relbias.Tiles(*want)


@pytest.mark.parametrize(
    ("kv_heads", "packed", "alone"), [(2, False, True), (1, False, False), (2, True, False)]
)
def test_dkdv_takes_its_familys_row_only_alone(kv_heads, packed, alone, monkeypatch):
    """The launcher asks for the family's dk/dv row only with one query head a kv head and
    whole sequences (ALiBi's 64 x 64 spills in its key loops with grouped heads or packed
    rows): what it passes, and that the backward runs at what it is given."""
    asked = []
    tiles = _Spec.tiles

    def spy(self, q, backward, alone=True):
        if backward:
            asked.append(alone)
        return tiles(self, q, backward, alone)

    monkeypatch.setattr(_Spec, "tiles", spy)
    q = torch.randn(1, 2, 20, 16, device=DEVICE, requires_grad=True)
    k, v = (torch.randn(1, kv_heads, 20, 16, device=DEVICE) for _ in range(2))
    seq = {"cu_seqlens": torch.tensor([0, 7, 20], device=DEVICE)} if packed else {}
    out = relbias.relative_attention(q, k, v, alibi_slopes=ones(2), causal=True, **seq)
    out.sum().backward()
    assert asked == [alone] and q.grad.isfinite().all()


def test_dq_takes_its_own_tiles_only_beside_the_default(monkeypatch):
    """On sm_90a in half precision at D=128, dq runs tiles of its own beside dk/dv's default:
    64 x 32 on 4 warps (not their transpose, whose m64n16 products compute each exponent
    twice), ALiBi and FoX 128 x 64 on 8 warps (FlexAttention's), Shaw's key + value term the
    transpose; a user's bwd_tiles and other GPUs and dtypes: the transpose (the fallback's dq,
    its transpose too, is the launcher's)."""
    monkeypatch.setattr(_relbias_tiles, "_interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d: (9, 0))
    half = torch.empty(1, 1, 1, 128, dtype=torch.bfloat16)
    own = {"t5": relbias.Tiles(64, 32, 4, 2)}
    own["alibi"] = own["fox"] = relbias.Tiles(128, 64, 8, 2)
    families = {
        "alibi": _Spec(relbias.ALIBI, False, 1.0, 0, 1),
        "t5": _Spec(relbias.TABLE, False, 1.0, 4, 9),
        "fox": _Spec(relbias.SHAW_KV, True, 1.0, 0, 1, col=True),
        "shaw_kv": _Spec(relbias.SHAW_KV, False, 1.0, 4, 9, has_value=True),
    }
    for name, spec in families.items():
        dkdv = spec.tiles(half, True)[0]
        transpose = dkdv._replace(block_m=dkdv.block_n, block_n=dkdv.block_m)
        assert spec.dq_tiles(half, dkdv) == own.get(name, transpose), name
    user = relbias.Tiles(32, 64, 8, 2)
    t5 = _Spec(relbias.TABLE, False, 1.0, 4, 9, bwd_tiles=user)
    assert t5.dq_tiles(half, user) == relbias.Tiles(64, 32, 8, 2)
    plain = families["t5"]
    for dtype, capability in ((torch.float32, (9, 0)), (torch.bfloat16, (8, 0))):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d, c=capability: c)
        q = torch.empty(1, 1, 1, 128, dtype=dtype)
        dkdv = plain.tiles(q, True)[0]
        assert plain.dq_tiles(q, dkdv) == dkdv._replace(block_m=dkdv.block_n, block_n=dkdv.block_m)


def test_tiles_that_do_not_fit_fall_back_or_name_the_argument():
    """A default that needs more shared memory than the GPU has is relaunched with _SAFE; a
    user's tiles that do not fit raise an error naming the argument."""
    tried = []

    def launch(tiles):
        tried.append(tiles)
        if tiles.block_m > 32:
            raise OutOfResources(300_000, 232_448, "shared memory")
        return tiles

    big = relbias.Tiles(128, 64, 8, 3)
    with pytest.warns(UserWarning, match=r"fwd_tiles \(128, 64, 8, 3\) do not fit.*ran with"):
        assert relbias._run(launch, big, _relbias_tiles._SAFE, "fwd_tiles") == _relbias_tiles._SAFE
    assert tried == [big, _relbias_tiles._SAFE]
    with pytest.raises(ValueError, match=r"bwd_tiles=Tiles\(block_m=128.*does not fit"):
        relbias._run(launch, big, None, "bwd_tiles")


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32 (10 mantissa bits, round to nearest even), as a tensor core reads it."""
    bits = x.view(torch.int32)
    rounded = bits + 0x0FFF + ((bits >> 13) & 1)
    return (rounded & ~0x1FFF).view(torch.float32)


def test_3xtf32_dots_keep_float32_accuracy():
    """float32 inputs run their dots as 3xTF32 (input_precision="tf32x3": a = hi + lo, three
    TF32 products) on tensor cores. The interpreter computes exact float32 whatever the
    precision, so the arithmetic is emulated here: the logits of attention-shaped operands
    (D = 128) stay within a few times float32's own error, well inside the float32 check,
    while one TF32 product is a hundred times worse."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(256, 128, generator=g), torch.randn(256, 128, generator=g)
    want = q.double() @ k.double().t()

    def err(s):
        return ((s.double() - want).abs().max() / want.abs().max()).item()

    q_hi, k_hi = _tf32(q), _tf32(k)
    q_lo, k_lo = _tf32(q - q_hi), _tf32(k - k_hi)
    x3 = q_hi @ k_hi.t() + (q_hi @ k_lo.t() + q_lo @ k_hi.t())
    ieee, one = err(q @ k.t()), err(q_hi @ k_hi.t())
    assert err(x3) <= 4 * ieee and err(x3) < TOL[torch.float32] / 10
    assert one > 100 * ieee


def test_gpus_with_99_kib_of_shared_memory_get_tiles_that_fit(monkeypatch):
    """sm_86, sm_89 and sm_120 (99 KiB per block) get their own table, not the sm_80 one whose
    3-stage 128 x 64 forward needs about 160 KiB (every launch would fail and fall back). The
    estimate: the held block plus num_stages buffers of the two streamed ones."""
    monkeypatch.setattr(_relbias_tiles, "_interpreting", lambda: False)

    def shared(t: relbias.Tiles, elem: int, block_d: int, backward: bool) -> int:
        held, streamed = (t.block_n, t.block_m) if backward else (t.block_m, t.block_n)
        return elem * block_d * ((2 if backward else 1) * held + t.num_stages * 2 * streamed)

    for capability, arch in (
        ((8, 6), "sm86"),
        ((8, 9), "sm86"),
        ((12, 0), "sm86"),
        ((8, 0), "sm80"),
    ):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d, c=capability: c)
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.empty(1, 1, 1, 128, dtype=dtype)
            for backward in (False, True):
                spec = _Spec(relbias.ALIBI, False, 1.0, 0, 1)
                tiles, _ = spec.tiles(q, backward)
                table = _relbias_tiles._BWD_TILES if backward else _relbias_tiles._FWD_TILES
                assert tiles == table[arch][(q.element_size(), 128, "plain")]
                if arch == "sm86":
                    assert shared(tiles, q.element_size(), 128, backward) <= 99 * 1024


def test_key_term_strides_are_read_as_given():
    """relk (the key term) and g (do E_V^T, made in the backward) are read with their own
    strides: a relk laid out column-major gives the same output and gradients."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 19, 16, generator=g, device="cpu").to(DEVICE) for _ in range(3))
    emb_k, emb_v = (torch.randn(7, 16, generator=g).to(DEVICE) for _ in range(2))
    leaves = [t.clone().requires_grad_() for t in (q, k, v, emb_k, emb_v)]
    want = relbias.relative_attention(*leaves[:3], shaw_k=leaves[3], shaw_v=leaves[4])
    up = torch.randn(want.shape, generator=g).to(DEVICE)
    want_grads = torch.autograd.grad(want, leaves, up)
    q2, k2, v2, ek2, ev2 = (t.clone().requires_grad_() for t in (q, k, v, emb_k, emb_v))
    scale = 16**-0.5
    relk = torch.matmul(q2 * scale, ek2.t())
    relk = relk.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, other strides
    assert relk.stride()[-1] != 1
    spec = _Spec(relbias.SHAW_KV, False, scale, 3, 7, has_value=True)
    seq = relbias.sequences(q2, k2, False, None, None)
    apply = relbias.RelativeBiasAttention.apply
    got = apply(q2, k2, v2, None, None, relk, ev2, None, None, spec, seq)
    assert_close(got, want, atol=2e-5, rtol=2e-5)
    for a, b in zip(torch.autograd.grad(got, [q2, k2, v2, ek2, ev2], up), want_grads, strict=True):
        assert_close(a, b, atol=2e-5, rtol=2e-5)


GRIDS = """
import torch
from tools.audit.capture import recording
from posenc_kernels import relbias

q = torch.empty(7000, 10, 64, 32, device="meta", dtype=torch.bfloat16, requires_grad=True)
with recording(90) as launches:
    out = relbias.relative_attention(q, q, q, alibi_slopes=torch.empty(10, device="meta"))
    torch.autograd.grad(out, [q], torch.empty_like(out))
print([grid for *_, grid in launches])
"""


def test_grids_stay_within_cudas_limits_past_65535_heads():
    """B * H = 70000 (more than a grid's y dimension may hold): every launch's grid is flat and
    within CUDA's x limit. The launches are recorded on meta tensors as the compile audit does
    (the JIT's, so in a process without the interpreter)."""
    import ast
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", GRIDS], env=env, cwd=root, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    grids = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert len(grids) == 4  # forward, delta, dk/dv, dq
    for grid in grids:
        assert len(grid) == 1 and grid[0] < 2**31, grid


GQA = [  # (family, B, H, Hk, Lq, Lk, D, causal): groups of 2 and 3, one kv head
    ("alibi", 1, 4, 2, 19, 19, 32, True),
    ("t5", 2, 6, 2, 17, 29, 32, False),
    ("shaw_bias", 1, 3, 1, 18, 18, 32, True),
    ("shaw_kv", 1, 4, 1, 21, 21, 32, False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", GQA, ids=lambda c: f"{c[0]}-{c[2]}x{c[3]}")
def test_grouped_query_heads_forward_and_backward(case, dtype):
    """k and v with Hk < H heads: outputs and every gradient (dk, dv summed over each kv head's
    group inside the kernel; the tables') against float64 autograd of the reference."""
    family, b, h, hk, lq, lk, d, causal = case
    torch.manual_seed(0)
    q = torch.randn(b, h, lq, d).to(dtype)
    k, v = (torch.randn(b, hk, lk, d).to(dtype) for _ in range(2))
    if family == "shaw_kv":
        emb = torch.randn(2, 7, d)
        want_leaves = [_leaf(t, torch.float64) for t in (q, k, v, emb[0], emb[1])]
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal else None
        out, _ = F.shaw_attention(*want_leaves, 3, mask=mask, offset=lk - lq)
        leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, emb[0], emb[1])]
        got_out = relbias.relative_attention(
            *leaves[:3], shaw_k=leaves[3], shaw_v=leaves[4], causal=causal
        )
        labels = ("dq", "dk", "dv", "dshaw_k", "dshaw_v")
    else:
        kwargs, name, table, ref, ref_table = trained(family, h)
        want_leaves = [*(_leaf(t, torch.float64) for t in (q, k, v)), ref_table]
        out = F.relative_attention(*want_leaves[:3], bias=ref, causal=causal)
        leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, table)]
        got_out = relbias.relative_attention(
            *leaves[:3], causal=causal, **{**kwargs, name: leaves[3]}
        )
        labels = ("dq", "dk", "dv", "d" + name)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    want = torch.autograd.grad(out, want_leaves, grad_out)
    assert got_out.shape == q.shape
    tol = TOL[dtype] * max(1.0, out.abs().max().item())
    assert_close(got_out.detach().cpu().double(), out.detach(), atol=tol, rtol=TOL[dtype])
    got = torch.autograd.grad(got_out, leaves, grad_out.to(DEVICE, dtype))
    assert got[1].shape == k.shape and got[2].shape == v.shape
    for label, g, w in zip(labels, got, want, strict=True):
        _assert_grad_close(g, w, dtype, label)


def test_grouped_query_heads_that_do_not_divide_are_named():
    q = torch.zeros(1, 4, 8, 32, device=DEVICE)
    k = torch.zeros(1, 3, 8, 32, device=DEVICE)
    with pytest.raises(ValueError, match="must divide"):
        relbias.relative_attention(q, k, k, alibi_slopes=torch.ones(4, device=DEVICE))


DECODE = [  # (family, B, H, Hk, Lq, Lk, causal): a decode step, a short prefill, past the clip
    ("alibi", 2, 4, 2, 1, 300, True),
    ("t5", 1, 2, 2, 5, 150, True),
    ("shaw_bias", 1, 2, 1, 3, 40, False),
    ("shaw_kv", 1, 2, 2, 4, 70, True),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", DECODE, ids=lambda c: f"{c[0]}-{c[4]}of{c[5]}")
def test_queries_at_the_end_of_a_cache(case, dtype):
    """Lq < Lk: query i at position Lk - Lq + i (decoding and chunked prefill against a
    cache), every family, causal and not, grouped-query heads: outputs and every gradient
    against float64 autograd of the reference, which places them the same way."""
    family, b, h, hk, lq, lk, causal = case
    torch.manual_seed(3)
    q = torch.randn(b, h, lq, 32).to(dtype)
    k, v = (torch.randn(b, hk, lk, 32).to(dtype) for _ in range(2))
    if family == "shaw_kv":
        emb = torch.randn(2, 7, 32)
        want_leaves = [_leaf(t, torch.float64) for t in (q, k, v, emb[0], emb[1])]
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal else None
        out, _ = F.shaw_attention(*want_leaves, 3, mask=mask, offset=lk - lq)
        leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, emb[0], emb[1])]
        got_out = relbias.relative_attention(
            *leaves[:3], shaw_k=leaves[3], shaw_v=leaves[4], causal=causal
        )
    else:
        module, kwargs = _family(family, h)
        want_leaves = [_leaf(t, torch.float64) for t in (q, k, v)]
        out = F.relative_attention(*want_leaves, bias=copy.deepcopy(module).double(), causal=causal)
        leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v)]
        on = {n: (t.to(DEVICE) if isinstance(t, torch.Tensor) else t) for n, t in kwargs.items()}
        got_out = relbias.relative_attention(*leaves, causal=causal, **on)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    tol = TOL[dtype] * max(1.0, out.abs().max().item())
    assert_close(got_out.detach().cpu().double(), out.detach(), atol=tol, rtol=TOL[dtype])
    want = torch.autograd.grad(out, want_leaves, grad_out)
    got = torch.autograd.grad(got_out, leaves, grad_out.to(DEVICE, dtype))
    for label, g, w in zip(("dq", "dk", "dv", "demb_k", "demb_v"), got, want, strict=False):
        _assert_grad_close(g, w, dtype, label)
