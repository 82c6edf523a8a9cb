"""What models shipped in 2025 add to attention's logits, as references: Llama 4's attention
temperature in its NoPE layers (iRoPE), the Forgetting Transformer's data-dependent decay (FoX),
and attention sinks (gpt-oss). Re-exported by posenc.functional (the sinks enter
relative_attention and shaw_attention as their `sinks=` argument).

iRoPE (Meta, "The Llama 4 herd", 2025; transformers' Llama4TextAttention): every
`interval`-th layer (the 4th, 8th, ...) has no rotary embedding, and there each query at
position p is multiplied by 1 + attn_scale * log(1 + floor((p + 1) / floor_scale))
(Llama 4's configuration: floor_scale 8192, attn_scale 0.1, attn_temperature_tuning on), so
that past floor_scale tokens the logits sharpen as the context grows (the inference-time
temperature scaling of Nakanishi 2025, arXiv 2501.19399, which Meta cites).

FoX (Lin, Nikishin, He, Courville, "Forgetting Transformer: Softmax Attention with a Forget
Gate", ICLR 2025, eq. 4-6): per head a forget gate f_t = sigmoid(w . x_t + b) in (0, 1) and the
logit of query i for key j <= i gains sum_{l = j + 1 .. i} log f_l = D_i - D_j, D the cumulative
sum of log f; no positional embedding is needed (the paper's FoX uses none; "FoX (Pro)" adds
other parts, and RoPE is optional).

Sinks (OpenAI, gpt-oss, 2025): a learned logit per head joins each row's softmax as one more
column; it takes probability mass and adds no value (out = sum_j p_j v_j, the p_j summing to
less than 1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from posenc._checks import check_float, check_positive

FLOOR_SCALE, ATTN_SCALE = 8192, 0.1  # Llama 4's defaults (Llama4TextConfig)
NOPE_INTERVAL = 4  # Llama 4: every 4th layer has no RoPE (no_rope_layer_interval)


def irope_temperature(
    positions: Tensor | int, floor_scale: float = FLOOR_SCALE, attn_scale: float = ATTN_SCALE
) -> Tensor:
    """The factor Llama 4 multiplies a NoPE layer's queries by: 1 + attn_scale *
    log(1 + floor((p + 1) / floor_scale)) for each position p (an int N: 0 .. N - 1), float64
    of positions' shape. 1 up to position floor_scale - 2, then growing with log(p)."""
    if isinstance(positions, int):
        check_positive("positions", positions, allow_zero=True)
        positions = torch.arange(positions)
    if not isinstance(positions, Tensor) or positions.is_floating_point():
        raise TypeError(f"positions must be an int or an integer tensor, got {positions!r}")
    if not floor_scale > 0:
        raise ValueError(f"floor_scale must be > 0, got {floor_scale}")
    if not attn_scale >= 0:
        raise ValueError(f"attn_scale must be >= 0, got {attn_scale}")
    p = positions.to(torch.float64)
    return 1.0 + attn_scale * torch.log1p(torch.floor((p + 1.0) / floor_scale))


def irope_rope_layers(num_layers: int, interval: int = NOPE_INTERVAL) -> list[bool]:
    """Which layers rotate (True) and which are NoPE (False): layer l is NoPE when
    (l + 1) % interval == 0, as Llama 4's configuration builds no_rope_layers."""
    check_positive("num_layers", num_layers)
    check_positive("interval", interval)
    return [(layer + 1) % interval != 0 for layer in range(num_layers)]


def forgetting_bias(log_f: Tensor, q_len: int | None = None) -> Tensor:
    """FoX's logit bias from the log forget gates log_f (B, H, Lk) of the keys' positions:
    (B, H, Lq, Lk), query i at position Lk - Lq + i (Lq = Lk by default), bias D_p - D_j for
    key j <= p (D = cumsum of log_f over positions) and -inf for j > p: FoX is causal.
    In log_f's dtype (float64 for a reference); its gradient reaches log_f."""
    check_float("log_f", log_f)
    if log_f.dim() != 3:
        raise ValueError(f"log_f must be (B, H, L), got shape {tuple(log_f.shape)}")
    k_len = log_f.shape[-1]
    q_len = k_len if q_len is None else q_len
    check_positive("q_len", q_len)
    if q_len > k_len:
        raise ValueError(f"q_len={q_len} > the keys' length {k_len} (queries at their end)")
    d = torch.cumsum(log_f, dim=-1)  # (B, H, Lk)
    d_q = d[..., k_len - q_len :]  # the queries' positions
    bias = d_q[..., :, None] - d[..., None, :]  # (B, H, Lq, Lk)
    i = torch.arange(q_len, device=log_f.device)[:, None] + (k_len - q_len)
    j = torch.arange(k_len, device=log_f.device)[None, :]
    return bias.masked_fill(j > i, -math.inf)


class ForgettingGate(nn.Module):
    """FoX's forget gate: x (B, L, d_model) -> log f (B, H, L) = log sigmoid(W x + b), one
    scalar gate per head and token (the log taken stably: logsigmoid). Feed it to
    `forgetting_bias`, or to posenc_kernels.relative_attention(fox_log_f=...).

    bias_range (lo, hi): b starts spaced evenly from lo to hi over the heads, so that the gates
    start open (b = 3 forgets a factor e per 21 tokens, b = 6 per 404: -1 / log sigmoid(b));
    None keeps nn.Linear's start, b near 0 (f near 0.5, as the authors' data-dependent gate)."""

    def __init__(self, d_model: int, num_heads: int, bias_range: tuple[float, float] | None = None):
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("num_heads", num_heads)
        self.proj = nn.Linear(d_model, num_heads)
        if bias_range is not None:
            lo, hi = _bias_range(bias_range)
            with torch.no_grad():
                self.proj.bias.copy_(torch.linspace(lo, hi, num_heads))

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"x must be (B, L, d_model), got shape {tuple(x.shape)}")
        return nnf.logsigmoid(self.proj(x)).transpose(1, 2)  # (B, H, L)


def _bias_range(bias_range) -> tuple[float, float]:
    ok = isinstance(bias_range, (tuple, list)) and len(bias_range) == 2
    if ok and all(isinstance(v, (int, float)) and math.isfinite(v) for v in bias_range):
        lo, hi = (float(v) for v in bias_range)
        if lo <= hi:
            return lo, hi
    raise ValueError(
        f"bias_range must be two finite numbers (lo, hi), lo <= hi; got {bias_range!r}"
    )


def softmax_with_sinks(logits: Tensor, sinks: Tensor | None) -> Tensor:
    """softmax over the last dim with each head's sink logit as one more column, dropped after:
    logits (B, H, Lq, Lk), sinks (H,) -> weights (B, H, Lq, Lk) summing to 1 - p(sink)."""
    if sinks is None:
        return torch.softmax(logits, dim=-1)
    heads = logits.shape[1]
    if not isinstance(sinks, Tensor) or tuple(sinks.shape) != (heads,):
        raise ValueError(f"sinks must be (H={heads},), got {getattr(sinks, 'shape', sinks)}")
    column = sinks.to(logits.dtype)[None, :, None, None].expand(*logits.shape[:-1], 1)
    return torch.softmax(torch.cat([logits, column], dim=-1), dim=-1)[..., :-1]
