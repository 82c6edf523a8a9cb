"""posenc.DecoderLayer against a hand-written float64 Llama block; a decode step against the
prefill it continues; the profiler regions; bad input named."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc import functional as F
from posenc.layer import REGIONS, KVCache

B, L, D_MODEL, H, HK, D_FF = 3, 12, 32, 4, 2, 48


def _layer(seed=0, head_dim=None):
    torch.manual_seed(seed)
    layer = posenc.DecoderLayer(D_MODEL, H, HK, D_FF, head_dim=head_dim).double()
    for norm in (layer.attn_norm, layer.mlp_norm):  # not all ones: the weight is used
        norm.weight.data.uniform_(0.5, 1.5)
    return layer


def _by_hand(layer, x, tables=None, bias=None, q_scale=None, gate=None):
    """The block written out: RMSNorm, projections, RoPE, the queries scaled, causal softmax
    with k and v repeated per group (and a bias, or FoX's from a gate of the normed input),
    output projection, RMSNorm, SwiGLU."""

    def rms(t, w):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    b, n, _ = x.shape
    hd = layer.head_dim
    h = rms(x, layer.attn_norm.weight)
    q = (h @ layer.w_q.weight.T).view(b, n, H, hd).transpose(1, 2)
    k = (h @ layer.w_k.weight.T).view(b, n, HK, hd).transpose(1, 2)
    v = (h @ layer.w_v.weight.T).view(b, n, HK, hd).transpose(1, 2)
    if tables is not None:
        q, k = F.apply_rope(q, *tables), F.apply_rope(k, *tables)
    if q_scale is not None:
        q = q * q_scale[:, None]  # (L,) per query position
    if gate is not None:  # log f_l of each head, summed over j < l <= i
        log_f = torch.nn.functional.logsigmoid(h @ gate.proj.weight.T + gate.proj.bias)
        c = torch.cumsum(log_f, 1).transpose(1, 2)  # (B, H, L)
        bias = c[..., :, None] - c[..., None, :]
    k, v = (t.repeat_interleave(H // HK, dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(hd) + (0 if bias is None else bias)
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, H * hd)
    x = x + o @ layer.w_o.weight.T
    h = rms(x, layer.mlp_norm.weight)
    gate, up = h @ layer.w_gate.weight.T, h @ layer.w_up.weight.T
    return x + (torch.nn.functional.silu(gate) * up) @ layer.w_down.weight.T


def _rotate(tables):
    return lambda q, k: (F.apply_rope(q, *tables), F.apply_rope(k, *tables))


def test_nope_layer_is_the_llama_block_without_positions():
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    assert_close(layer(x), _by_hand(layer, x))


def test_rope_layer_rotates_q_and_k():
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    tables = F.rope_cos_sin(L, D_MODEL // H, dtype=torch.float64)
    assert_close(layer(x, rotate=_rotate(tables)), _by_hand(layer, x, tables))
    assert not torch.allclose(layer(x, rotate=_rotate(tables)), layer(x))


def test_heads_wider_than_the_model_and_a_partial_rotation():
    """H D = 48 from d_model 32 (as Gemma 3's 32 x 128 from 5376), RoPE on 8 of the 12 dims."""
    layer, x = _layer(head_dim=12), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    assert layer.w_q.weight.shape == (H * 12, D_MODEL) and layer.w_o.weight.shape == (D_MODEL, 48)
    tables = F.rope_cos_sin(L, 8, dtype=torch.float64)
    assert_close(layer(x, rotate=_rotate(tables)), _by_hand(layer, x, tables))


def test_bias_layer_attends_with_the_bias():
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    alibi = posenc.ALiBi(H).double()

    def attend(q, k, v):
        return F.relative_attention(q, k, v, bias=alibi, causal=True)

    assert_close(layer(x, attend=attend), _by_hand(layer, x, bias=alibi.bias(L, L)))


def test_irope_layer_scales_its_queries_by_position():
    """Llama 4's NoPE layer: q times 1 + 0.5 log(1 + floor((p + 1) / 4)) (a small floor_scale,
    so that the factor moves within 12 positions)."""
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    scale = F.irope_temperature(L, floor_scale=4.0, attn_scale=0.5)
    assert_close(layer(x, q_scale=scale), _by_hand(layer, x, q_scale=scale))
    assert not torch.allclose(layer(x, q_scale=scale), layer(x))


def test_fox_layer_gates_the_normed_input():
    """attend gets FoX's log gates of the attention's normed input as its fourth argument."""
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    gate = posenc.ForgettingGate(D_MODEL, H).double()

    def attend(q, k, v, log_f):
        return F.relative_attention(q, k, v, bias=F.forgetting_bias(log_f), causal=True)

    assert_close(layer(x, gate=gate, attend=attend), _by_hand(layer, x, gate=gate))


def test_embed_adds_to_the_input_before_the_norm():
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    pe = posenc.SinusoidalPositionalEncoding(D_MODEL, L).double()
    assert_close(layer(x, embed=pe), _by_hand(layer, pe(x)))


@pytest.mark.parametrize("encoding", ["nope", "rope", "t5"])
def test_a_decode_step_continues_the_prefill(encoding):
    """Row b is a sequence of lens[b] tokens: its last token, decoded against a cache of the
    first lens[b] - 1 tokens' k and v, gives the prefill's output at that token."""
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    lens = torch.tensor([L, 7, 1])
    hd = D_MODEL // H
    tables = F.rope_cos_sin(L, hd, dtype=torch.float64)
    t5 = posenc.T5RelativeBias(H, 8, 16).double()
    cache = KVCache(
        torch.full((B, HK, L, hd), float("nan"), dtype=torch.float64),  # unwritten: never read
        torch.full((B, HK, L, hd), float("nan"), dtype=torch.float64),
        lens,
    )
    for b, n in enumerate(lens.tolist()):  # the earlier tokens' k, v as the prefill made them
        h = layer.attn_norm(x[b : b + 1, : n - 1])
        k = layer._heads(layer.w_k(h), HK)
        if encoding == "rope":
            k = F.apply_rope(k, *(t[: n - 1] for t in tables))
        cache.k[b, :, : n - 1] = k[0]
        cache.v[b, :, : n - 1] = layer._heads(layer.w_v(h), HK)[0]
    cache.k.nan_to_num_(0.0), cache.v.nan_to_num_(0.0)  # past lens: masked, but finite
    step = x[torch.arange(B), lens - 1][:, None]  # (B, 1, d_model): each row's last token
    pos = lens - 1
    kwargs = {}
    if encoding == "rope":
        cos, sin = (t[pos][:, None, None] for t in tables)  # (B, 1, 1, D/2)
        kwargs["rotate"] = lambda q, k: (F.apply_rope(q, cos, sin), F.apply_rope(k, cos, sin))
    if encoding == "t5":
        kwargs["attend"] = lambda q, k, v: F.relative_attention(
            q, k, v, bias=t5, causal=True, kv_lens=lens
        )
    got = layer(step, cache=cache, **kwargs)
    for b, n in enumerate(lens.tolist()):
        prefix = x[b : b + 1, :n]
        if encoding == "rope":
            want = layer(prefix, rotate=_rotate(tuple(t[:n] for t in tables)))
        elif encoding == "t5":
            want = layer(
                prefix, attend=lambda q, k, v: F.relative_attention(q, k, v, bias=t5, causal=True)
            )
        else:
            want = layer(prefix)
        assert_close(got[b], want[0, -1:])


def test_the_profile_names_the_position_and_the_attention():
    layer, x = _layer(), torch.randn(B, L, D_MODEL, dtype=torch.float64)
    tables = F.rope_cos_sin(L, D_MODEL // H, dtype=torch.float64)
    with torch.profiler.profile() as prof:
        layer(x, rotate=_rotate(tables))
    names = {e.key for e in prof.key_averages()}
    assert {REGIONS["position"], REGIONS["attention"]} <= names
    assert REGIONS["encoded_attention"] not in names
    with torch.profiler.profile() as prof:
        layer(
            x,
            attend=lambda q, k, v: F.relative_attention(q, k, v, bias=torch.zeros(()), causal=True),
        )
    names = {e.key for e in prof.key_averages()}
    assert REGIONS["encoded_attention"] in names and REGIONS["attention"] not in names


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="num_kv_heads"):
        posenc.DecoderLayer(32, 4, 3)
    with pytest.raises(ValueError, match="d_ff"):
        posenc.DecoderLayer(32, 4, 2, 0)
    layer = _layer()
    with pytest.raises(ValueError, match="x must be"):
        layer(torch.randn(L, D_MODEL, dtype=torch.float64))
    cache = KVCache(*(torch.zeros(2, HK, L, 8, dtype=torch.float64) for _ in "kv"), torch.ones(2))
    with pytest.raises(ValueError, match="cache"):
        layer(torch.randn(B, 1, D_MODEL, dtype=torch.float64), cache=cache)
