"""The 2025 schemes' references against naive float64 written from their definitions: Llama 4's
NoPE-layer temperature (transformers' Llama4TextAttention), FoX's forgetting bias (Lin et al.
2025, eq. 4-6) and attention with sinks (gpt-oss)."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc import functional as F


def test_irope_temperature_is_llama4s_formula():
    """1 + 0.1 log(1 + floor((p + 1) / 8192)), p by p; 1 below 8191, its first step at 8191."""
    positions = [0, 1, 8190, 8191, 8192, 16382, 16383, 50_000, 1_000_000]
    want = [1 + 0.1 * math.log(1 + math.floor((p + 1) / 8192)) for p in positions]
    got = F.irope_temperature(torch.tensor(positions))
    assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-15)
    assert got[2] == 1.0 and got[3] > 1.0
    small = F.irope_temperature(6, floor_scale=2.0, attn_scale=0.5)  # int: positions 0 .. 5
    want = [1 + 0.5 * math.log(1 + (p + 1) // 2) for p in range(6)]
    assert_close(small, torch.tensor(want, dtype=torch.float64))


def test_irope_nope_layers_are_every_fourth():
    layers = F.irope_rope_layers(48)
    assert [i for i, rope in enumerate(layers) if not rope] == list(range(3, 48, 4))
    assert F.irope_rope_layers(3) == [True] * 3 and F.irope_rope_layers(3, interval=3)[2] is False


def _naive_fox_bias(log_f, q_len):
    """sum_{l = j + 1 .. p} log f_l for j <= p (p = Lk - Lq + i), -inf after: loop by loop."""
    b, h, lk = log_f.shape
    out = torch.full((b, h, q_len, lk), -math.inf, dtype=torch.float64)
    for i in range(q_len):
        p = lk - q_len + i
        for j in range(p + 1):
            out[:, :, i, j] = log_f[:, :, j + 1 : p + 1].sum(-1)
    return out


@pytest.mark.parametrize("q_len", [9, 3, 1])
def test_forgetting_bias_is_the_sum_of_log_gates_between(q_len):
    log_f = torch.nn.functional.logsigmoid(torch.randn(2, 3, 9, dtype=torch.float64) + 2)
    assert_close(F.forgetting_bias(log_f, q_len), _naive_fox_bias(log_f, q_len))


def test_fox_attention_matches_the_papers_definition():
    """o_i = sum_j exp(s_ij + D_ij) v_j / sum_j exp(s_ij + D_ij) over j <= i, with the gate
    from posenc.ForgettingGate; gradients reach the gate's weights."""
    torch.manual_seed(1)
    b, h, n, d = 2, 2, 7, 8
    gate = posenc.ForgettingGate(16, h).double()
    x = torch.randn(b, n, 16, dtype=torch.float64)
    log_f = gate(x)  # (B, H, L)
    assert log_f.shape == (b, h, n) and (log_f < 0).all()
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    got = F.relative_attention(q, k, v, bias=F.forgetting_bias(log_f), causal=True)
    want = torch.zeros_like(q)
    f = torch.sigmoid(gate.proj(x)).transpose(1, 2)  # the gate itself, not its log
    for bi, hi, i in ((bi, hi, i) for bi in range(b) for hi in range(h) for i in range(n)):
        w = torch.stack(
            [
                torch.exp(q[bi, hi, i] @ k[bi, hi, j] / math.sqrt(d))
                * torch.prod(f[bi, hi, j + 1 : i + 1])
                for j in range(i + 1)
            ]
        )
        want[bi, hi, i] = (w[:, None] * v[bi, hi, : i + 1]).sum(0) / w.sum()
    assert_close(got, want)
    got.sum().backward()
    assert gate.proj.weight.grad is not None and gate.proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("causal", [False, True])
def test_sinks_take_mass_and_add_no_value(causal):
    """softmax over [logits, sink] with the sink's column dropped, row by row (ALiBi's bias);
    Shaw's key and value attention with sinks likewise (its value term weighted the same)."""
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    sinks = torch.randn(3, dtype=torch.float64)
    bias = posenc.ALiBi(3).double()
    got = F.relative_attention(q, k, v, bias=bias, causal=causal, sinks=sinks)
    logits = q @ k.transpose(-1, -2) / 2.0 + bias.bias(5, 5).double()
    want = torch.zeros_like(q)
    for bi, hi, i in ((bi, hi, i) for bi in range(2) for hi in range(3) for i in range(5)):
        keys = range(i + 1) if causal else range(5)
        z = sum(math.exp(logits[bi, hi, i, j]) for j in keys) + math.exp(sinks[hi])
        for j in keys:
            want[bi, hi, i] += math.exp(logits[bi, hi, i, j]) / z * v[bi, hi, j]
    assert_close(got, want)
    emb = torch.randn(2, 3, 4, dtype=torch.float64)  # Shaw's a^K, a^V with K = 1
    mask = torch.ones(5, 5, dtype=torch.bool).tril() if causal else None
    got = F.shaw_attention(q, k, v, emb[0], emb[1], 1, mask=mask, sinks=sinks)[0]
    want = torch.zeros_like(q)
    for bi, hi, i in ((bi, hi, i) for bi in range(2) for hi in range(3) for i in range(5)):
        keys = list(range(i + 1) if causal else range(5))
        idx = [min(max(j - i, -1), 1) + 1 for j in keys]
        pairs = list(zip(keys, idx, strict=True))
        e = [math.exp((q[bi, hi, i] @ (k[bi, hi, j] + emb[0, r])) / 2.0) for j, r in pairs]
        z = sum(e) + math.exp(sinks[hi])
        for w, (j, r) in zip(e, pairs, strict=True):
            want[bi, hi, i] += w / z * (v[bi, hi, j] + emb[1, r])
    assert_close(got, want)


def test_bad_input_names_the_argument():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"sinks must be \(H=2,\)"):
        F.relative_attention(q, q, q, bias=posenc.ALiBi(2), sinks=torch.zeros(3))
    with pytest.raises(ValueError, match=r"log_f must be \(B, H, L\)"):
        F.forgetting_bias(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="q_len=5 > the keys' length 4"):
        F.forgetting_bias(torch.zeros(1, 2, 4), 5)
    with pytest.raises(ValueError, match="floor_scale must be > 0"):
        F.irope_temperature(4, floor_scale=0)


def test_an_open_gate_starts_at_its_bias_range_and_bad_ranges_are_named():
    gate = posenc.ForgettingGate(8, 4, bias_range=(3.0, 6.0)).double()
    with torch.no_grad():
        gate.proj.weight.zero_()
    log_f = gate(torch.randn(1, 5, 8, dtype=torch.float64))
    want = torch.nn.functional.logsigmoid(torch.tensor([3.0, 4.0, 5.0, 6.0], dtype=torch.float64))
    assert_close(log_f, want[None, :, None].expand(1, 4, 5))
    decay = -1 / want  # tokens per factor e forgotten
    assert 20 < decay[0] < 22 and 400 < decay[-1] < 410
    default = posenc.ForgettingGate(64, 4).proj.bias  # nn.Linear's: within 1 / sqrt(64)
    assert default.abs().max() <= 0.125
    for bad in ((6.0, 3.0), (1.0,), (0.0, math.inf), "3,6"):
        with pytest.raises(ValueError, match="bias_range"):
            posenc.ForgettingGate(8, 4, bias_range=bad)
