"""posenc_kernels.apply_rope on CPU tensors outside Triton's interpreter: the one-pass C kernel
(posenc_kernels/rope_cpu.py), through the same float64 tests as the Triton kernel (every case
of tests/posenc_kernels/test_rope.py and the multi-axis forms of test_rope_multiaxis.py: both
layouts, half-split and interleaved pairs, partial rotary, p-RoPE, per-token tables, xPos, GQA,
every kind of positions, float32, bfloat16 and float16, forward, backward and in place), run
here on the CPU whatever the machine, within native_cpu() (the interpreter is the Triton
kernels' CPU path in CI)."""

import pytest
import torch

import posenc_kernels
from posenc import functional as F
from posenc_kernels import rope_cpu
from posenc_kernels._runtime import native_cpu
from tests.posenc_kernels import test_rope as T
from tests.posenc_kernels import test_rope_multiaxis as M


def _no_compiler() -> str:
    try:
        rope_cpu._compiler()
    except RuntimeError as exc:
        return str(exc)
    return ""


pytestmark = pytest.mark.skipif(bool(_no_compiler()), reason=_no_compiler() or "a C compiler")


@pytest.fixture(autouse=True)
def native(monkeypatch):
    """The shared tests' tensors on the CPU, bfloat16 rounded to nearest as the C kernel does,
    every call within native_cpu(); and the C kernel counted, so that a test cannot pass on
    another path."""
    for module in (T, M):
        monkeypatch.setattr(module, "DEVICE", "cpu")
        monkeypatch.setattr(module, "_round", lambda x32, dtype: x32.to(dtype))
    calls = []
    launch = rope_cpu.launch
    monkeypatch.setattr(rope_cpu, "launch", lambda *a: calls.append(a[-1]) or launch(*a))
    with native_cpu():
        yield calls


@pytest.mark.parametrize("dtype", T.DTYPES, ids=str)
@pytest.mark.parametrize("case", T.CASES, ids=lambda c: c.name)
def test_forward_and_backward_match_the_reference(case, dtype, native):
    T.test_forward_and_backward_match_reference(case, dtype)
    assert native == [False, True]  # the forward and the backward (by minus the angle)


@pytest.mark.parametrize("case", T.CASES[:4], ids=lambda c: c.name)
def test_in_place(case, native):
    T.test_inplace_writes_into_the_inputs(case)
    assert native == [False]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_multi_axis_forms(dtype, native):
    """Per-token M-RoPE tables, xPos (q's rows times its scale, k's divided), p-RoPE's narrow
    tables, forward and backward."""
    for spec in M.MROPE:
        M.test_per_token_mrope_tables(spec, dtype)
    for per_token in (False, True):
        M.test_xpos_scales_queries_up_and_keys_down(per_token, dtype)
    for pairs in (False, True):
        M.test_p_rope_narrow_tables_forward_backward_and_in_place(pairs)
    assert native and True in native


def _ranges(monkeypatch) -> list:
    """The (begin, end) row range of each call into the C library, recorded."""
    lib, seen = rope_cpu.library(), []

    class Spy:
        def rope_rows(self, *args):
            seen.append(args[-2:])
            return lib.rope_rows(*args)

    monkeypatch.setattr(rope_cpu, "library", lambda: Spy())
    return seen


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_threads_split_every_layout_and_agree(monkeypatch, layout):
    """Every thread a range of whole rows of D in both memory orders, a few heads of one
    sequence (bhsd: h outer) included: 3 threads make 3 ranges covering all B H L rows, with
    the same bits as one thread."""
    b, n, h, d = 1, 300, 2, 64
    q = torch.randn(b, n, h, d)
    qs = q if layout == "bshd" else q.transpose(1, 2).contiguous()
    cos, sin = F.rope_cos_sin(n, d)
    monkeypatch.setattr(rope_cpu, "MIN_ELEMENTS_PER_THREAD", 1)
    threads = torch.get_num_threads()
    with native_cpu():
        try:
            torch.set_num_threads(1)
            one = posenc_kernels.apply_rope(qs, qs, cos, sin, layout=layout)[0]
            seen = _ranges(monkeypatch)
            torch.set_num_threads(3)
            three = posenc_kernels.apply_rope(qs, qs, cos, sin, layout=layout)[0]
        finally:
            torch.set_num_threads(threads)
    assert torch.equal(one, three)
    per_call = len(seen) // 2  # q's calls, then k's
    assert per_call == 3, seen
    starts, ends = zip(*seen[:per_call], strict=True)
    assert starts[0] == 0 and ends[-1] == b * h * n and list(starts[1:]) == list(ends[:-1])


def test_in_place_on_an_expanded_view_is_refused():
    q = torch.randn(1, 8, 2, 32).expand(3, 8, 2, 32)
    cos, sin = F.rope_cos_sin(8, 32)
    with native_cpu(), pytest.raises(ValueError, match="expanded"):
        posenc_kernels.apply_rope(q, q, cos, sin, inplace=True)


def test_the_library_is_built_once_per_source_and_cpu(tmp_path, monkeypatch):
    """Built into $POSENC_CACHE at first use, then loaded from there; no compiler: one line."""
    monkeypatch.setenv("POSENC_CACHE", str(tmp_path))
    rope_cpu.library.cache_clear()
    try:
        rope_cpu.library()
        built = list(tmp_path.glob("rope_cpu-*.so"))
        assert len(built) == 1
        rope_cpu.library.cache_clear()
        stamp = built[0].stat().st_mtime_ns
        rope_cpu.library()
        assert built[0].stat().st_mtime_ns == stamp  # loaded, not rebuilt
        rope_cpu.library.cache_clear()
        monkeypatch.setenv("CC", "no-such-compiler")
        monkeypatch.setattr(rope_cpu.shutil, "which", lambda name: None)
        with pytest.raises(RuntimeError, match="needs a C compiler"):
            rope_cpu.library()
    finally:
        rope_cpu.library.cache_clear()


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "pairs"])
def test_what_passes_through_keeps_its_bits(interleaved):
    """p-RoPE's unturned pairs and partial rotary's tail, bfloat16: every bit as torch would copy
    it, a signalling NaN's too (it came back quiet through float32)."""
    q = torch.randn(1, 4, 2, 32).to(torch.bfloat16)  # (B, L, H, D), R = 16, F = 4 of 8 pairs
    q.view(torch.int16)[..., 5:] = 0x7F81  # every dim from 5 up: a signalling NaN
    cos, sin = F.rope_cos_sin(4, 16)
    cos, sin = cos[:, :4].contiguous(), sin[:, :4].contiguous()
    with native_cpu():
        out = posenc_kernels.apply_rope(q, q, cos, sin, rotary_dim=16, interleaved=interleaved)
    turned = list(range(8)) if interleaved else [0, 1, 2, 3, 8, 9, 10, 11]
    through = [d for d in range(32) if d not in turned]
    bits = out[0].view(torch.int16)[..., through]
    assert torch.equal(bits, q.view(torch.int16)[..., through])
