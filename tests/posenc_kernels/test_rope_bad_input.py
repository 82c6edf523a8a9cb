"""posenc_kernels.apply_rope rejects bad input with ValueError/TypeError naming the argument."""

import pytest
import torch

from posenc import functional as F
from posenc_kernels import FusedRoPE, apply_rope
from tests.posenc_kernels.test_rope_cpu import _no_compiler

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the GPU box runs these too

q = torch.randn(2, 5, 3, 8, device=DEVICE)
k = torch.randn(2, 5, 1, 8, device=DEVICE)
cos, sin = F.rope_cos_sin(16, 8, device=DEVICE)
cos4, sin4 = F.rope_cos_sin(16, 4, device=DEVICE)

CASES = [  # (id, call, exception, text the message must contain)
    (
        "odd D",
        lambda: apply_rope(
            torch.randn(2, 5, 3, 9, device=DEVICE),
            torch.randn(2, 5, 1, 9, device=DEVICE),
            cos4,
            sin4,
        ),
        ValueError,
        "D must be even",
    ),
    ("R > D", lambda: apply_rope(q[..., :6], k[..., :6], cos, sin), ValueError, "rotary dim R"),
    (
        "tables too short",
        lambda: apply_rope(q, k, cos[:4], sin[:4]),
        ValueError,
        "cos/sin have 4 rows",
    ),
    (
        "offset past tables",
        lambda: apply_rope(q, k, cos, sin, positions=12),
        ValueError,
        "largest position is 16",
    ),
    (
        "negative position",
        lambda: apply_rope(q, k, cos, sin, positions=-1),
        ValueError,
        "positions must be >= 0",
    ),
    (
        "positions shape",
        lambda: apply_rope(
            q, k, cos, sin, positions=torch.zeros(3, dtype=torch.long, device=DEVICE)
        ),
        ValueError,
        "positions must be (B,)",
    ),
    (
        "float positions",
        lambda: apply_rope(q, k, cos, sin, positions=torch.zeros(2, device=DEVICE)),
        TypeError,
        "positions",
    ),
    ("positions type", lambda: apply_rope(q, k, cos, sin, positions=1.5), TypeError, "positions"),
    (
        "head dims differ",
        lambda: apply_rope(q, torch.randn(2, 5, 1, 10, device=DEVICE), cos, sin),
        ValueError,
        "head dims differ",
    ),
    (
        "batch mismatch",
        lambda: apply_rope(q, torch.randn(3, 5, 1, 8, device=DEVICE), cos, sin),
        ValueError,
        "but k is",
    ),
    (
        "length mismatch",
        lambda: apply_rope(q, torch.randn(2, 4, 1, 8, device=DEVICE), cos, sin),
        ValueError,
        "but k is",
    ),
    ("integer q", lambda: apply_rope(q.long(), k, cos, sin), TypeError, "q must be floating"),
    (
        "float64 q",
        lambda: apply_rope(q.double(), k.double(), cos, sin),
        TypeError,
        "q must be float32",
    ),
    ("dtype mismatch", lambda: apply_rope(q, k.half(), cos, sin), TypeError, "k is torch.float16"),
    (
        "float64 tables",
        lambda: apply_rope(q, k, cos.double(), sin.double()),
        TypeError,
        "float32 tables",
    ),
    ("sin shape", lambda: apply_rope(q, k, cos, sin[:, :2]), ValueError, "cos and sin"),
    ("rank", lambda: apply_rope(q[0], k, cos, sin), ValueError, "q must be a 4-D"),
    ("layout", lambda: apply_rope(q, k, cos, sin, layout="sbhd"), ValueError, "layout"),
    (
        "device",
        lambda: apply_rope(q, k, cos.to("meta"), sin.to("meta")),
        ValueError,
        "cos is on meta",
    ),
    ("module dim", lambda: FusedRoPE(7), ValueError, "dim"),
    (
        "module tables",
        lambda: FusedRoPE(8, 4, tables=(torch.ones(4, 8), torch.ones(4, 8))),
        ValueError,
        "tables must be",
    ),
    (
        "module input",
        lambda: FusedRoPE(8)(torch.randn(2, 5, 6, device=DEVICE)),
        ValueError,
        "dim=8",
    ),
]


@pytest.mark.parametrize(("call", "exc", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_the_argument(call, exc, text):
    with pytest.raises(exc, match=text.replace("(", r"\(").replace(")", r"\)")):
        call()


# Tensor positions are checked on the device, without a host sync (torch._assert_async): on the
# CPU it raises at once; on a GPU it is a device-side assert, which ends the CUDA context, so
# there the call runs in a process of its own.
DEVICE_CHECKED = [
    ("per-seq past tables", "torch.tensor([0, 12])"),
    ("ids past tables", "torch.full((2, 5), 16)"),
    ("negative ids", "torch.full((2, 5), -1)"),
]


@pytest.mark.parametrize(
    "positions", [c[1] for c in DEVICE_CHECKED], ids=[c[0] for c in DEVICE_CHECKED]
)
def test_tensor_positions_out_of_range_fail_on_the_device(positions):
    if DEVICE == "cpu":
        with pytest.raises(RuntimeError, match=r"positions must lie in 0 \.\. 15"):
            apply_rope(q, k, cos, sin, positions=eval(positions))
        return
    import subprocess
    import sys

    code = (
        "import torch, posenc_kernels; from posenc import functional as F; "
        "q = torch.randn(2, 5, 2, 8, device='cuda'); cos, sin = F.rope_cos_sin(16, 8, "
        f"device='cuda'); posenc_kernels.apply_rope(q, q, cos, sin, positions={positions}"
        ".cuda()); torch.cuda.synchronize()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "assert" in (proc.stderr + proc.stdout).lower()


def test_inplace_refuses_gradients():
    qg = q.clone().requires_grad_()
    with pytest.raises(ValueError, match="inplace"):
        apply_rope(qg, k, cos, sin, inplace=True)


@pytest.mark.skipif(bool(_no_compiler()), reason=_no_compiler() or "a C compiler")
def test_cpu_tensors_outside_the_interpreter_run_the_c_kernel(monkeypatch):
    """(The launcher reads the variable per call; triton's own import-time switch is unaffected.)
    Outside the interpreter, CPU tensors, whatever the box, take the C kernel (rope_cpu.py)."""
    from posenc_kernels import rope_cpu

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    calls = []
    launch = rope_cpu.launch
    monkeypatch.setattr(rope_cpu, "launch", lambda *a: calls.append(1) or launch(*a))
    qc, kc, c, s = q.cpu(), k.cpu(), cos.cpu(), sin.cpu()
    got_q, _ = apply_rope(qc, kc, c, s)
    want = F.apply_rope(qc.double().transpose(1, 2), c[:5].double(), s[:5].double())
    assert calls and torch.allclose(got_q.double(), want.transpose(1, 2), atol=1e-6)
