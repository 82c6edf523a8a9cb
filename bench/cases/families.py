"""The relative-bias families, each declared once: ALiBi, T5's buckets, Shaw's scalar bias, and
Shaw's key and value terms.

A `BiasFamily` is everything the harness knows of one: the tables it computes with (learned or
fixed) and how they are built, posenc's module that computes its (H, Lq, Lk) bias from them,
its reference attention, `posenc_kernels.relative_attention`'s arguments, its FlexAttention
score_mod, what its tables weigh and what it adds to the FLOPs. The attention, decode, packed
and layer cases of every family are made from FAMILIES (bench/cases/bias.py, sequences.py,
layer.py), and so are the compile audit's launches (tools/audit/specs.py, capture.py) and the
tile search (tools/tile_search.py): adding a family is its posenc reference, its kernel, and one
declaration here (docs/architecture.md counts the files).

Inputs of a family (besides q, k, v): `params` (its learned tables, a dict of parameters
seeded by the runner, what the backward modes differentiate) and its fixed tables by name
(ALiBi's slopes, float32).

Why this file is long: every family's declaration and its small helpers (score_mods, eager
references) sit together, so that a family is read, and added, in one place; the Shaw
families are functions of their clip distance (the `shaw_k` knob).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import posenc
from bench.cases._common import bind, parameters
from bench.checks import positive_ints
from bench.registry import Knob
from posenc import functional as F

SHAW_K = Knob(
    "shaw_k",
    16,
    "Shaw's cases: the clip distance K, 2K + 1 relative positions (the kernel's band grows with K)",
    positive_ints,
    quiet_default=True,  # rows recorded before the knob are K = 16's
)
T5_ARGS = dict(num_buckets=32, max_distance=128, bidirectional=True)  # T5's public configuration
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class BiasFamily:
    """One bias family (see the module docstring). Every callable takes the point's inputs
    (q (B, H, Lq, D), k and v (B, Hk, Lk, D) and the family's tables) unless it says otherwise.

    name       the family's one name: its cases' ({name}_attention, {name}_decode, {name}_packed,
               layer_{name}), the compile audit's and the tile tables' family;
    learned    (heads, head_dim) -> the module holding its learned tables, or None;
    fixed      heads -> its tables that never train, by input name (float32 on the CPU);
    module     inputs -> posenc's bias module computing with the inputs' tables (`.bias(Lq,
               Lk, offset=)` -> (H, Lq, Lk)); None: no additive bias (SDPA and FlexAttention
               cannot express the family);
    kernel_args  inputs -> posenc_kernels.relative_attention's bias arguments;
    score      (inputs, Lq, Lk) -> bias(b, h, q_pos, k_pos) for a score_mod (positions from
               the row's first key), or None;
    table_bytes  (heads, head_dim, dtype) -> the bytes of its tables as the kernel reads them;
    extra_flops  head_dim -> FLOPs per (query, head) beyond the attention's (Shaw's terms);
    eager      (inputs, causal, seq) -> (q, k, v) -> out: the reference attention, seq the
               sequences' kv_lens / cu_seqlens; None: posenc's relative_attention with module;
    inexpressible  why SDPA and FlexAttention cannot run it (with module None);
    tile_kind  the kernel's tile table it runs with ("value": the forward keeps per-row sums per
               relative index, Shaw's value term; posenc_kernels/relbias.py), for the tile search;
    per_token  (batch, heads, keys) -> its tables of one value per key (FoX's log forget gates
               (B, H, Lk)), learned parameters like `learned`'s (they are a model's gate
               outputs: the backward modes differentiate them), or None;
    gated      in a layer its per-token tables come from a gate of the layer's input
               (`learned` is that gate: (heads, head_dim) -> module x -> tables);
    needs_causal  defined for causal attention only (its cases refuse causal=false);
    knob       its own knob (Shaw's clip distance), which its cases declare, and `sized`:
               value -> the family at that value (`at(point)`). The callables that take the
               tables read the value from their shapes.
    Every family takes `sinks` (H,) beside its tables: bench/cases/bias.py's knob.
    """

    name: str
    learned: Callable[[int, int], nn.Module] | None
    fixed: Callable[[int], dict[str, torch.Tensor]]
    module: Callable[[dict], nn.Module] | None
    kernel_args: Callable[[dict], dict]
    score: Callable[[dict, int, int], Callable] | None
    table_bytes: Callable[[int, int, torch.dtype], int]
    extra_flops: Callable[[int], int] = lambda head_dim: 0
    eager: Callable[[dict, bool, dict], Attention] | None = None
    inexpressible: str = ""
    tile_kind: str = "plain"
    per_token: Callable[[int, int, int], dict[str, torch.Tensor]] | None = None
    gated: bool = False
    needs_causal: bool = False
    knob: Knob | None = None
    sized: Callable[[int], BiasFamily] | None = None

    def at(self, point) -> BiasFamily:
        """The family at a point's value of its knob (itself without one)."""
        if self.knob is None or getattr(point, self.knob.name) == self.knob.default:
            return self
        return self.sized(getattr(point, self.knob.name))

    @property
    def knobs(self) -> tuple[Knob, ...]:
        return () if self.knob is None else (self.knob,)

    @property
    def trains(self) -> bool:
        """Whether its tables are learned (the backward modes differentiate `params`)."""
        return self.learned is not None or self.per_token is not None

    def expressible(self, point=None) -> str | None:
        """None where SDPA's attn_mask and a score_mod can express it (an additive bias), else
        why not: an Impl's `supports` for those implementations."""
        return None if self.module is not None else self.inexpressible

    def inputs(self, heads: int, head_dim: int, device, dtype, batch: int = 1, keys: int = 1):
        """Its tables for a point: the fixed ones on `device`, the learned ones as parameters in
        the row's dtype (seeded by the caller); per-token ones for batch rows of keys keys."""
        out = {n: t.to(device) for n, t in self.fixed(heads).items()}
        if self.per_token is not None:
            tables = nn.ParameterDict(self.per_token(batch, heads, keys))
            out["params"] = parameters(tables, device, dtype)
        elif self.learned is not None:
            out["params"] = parameters(self.learned(heads, head_dim), device, dtype)
        return out

    def refuses(self, point) -> str | None:
        """Why the family does not apply at a point (its causality), or None."""
        if self.needs_causal and not point.causal:
            return f"{self.name} is defined for causal attention only: causal=true"
        return None

    def attention(self, inputs: dict, causal: bool, seq: dict | None = None) -> Attention:
        """The reference attention as a function of (q, k, v), with the point's sinks."""
        seq = dict(seq or {}, sinks=sinks_of(inputs), window=inputs.get("window"))
        if self.eager is not None:
            return self.eager(inputs, causal, seq)
        bias = self.module(inputs)
        return lambda q, k, v: F.relative_attention(q, k, v, bias=bias, causal=causal, **seq)

    def score_mod(self, inputs: dict, offsets: torch.Tensor | None = None):
        """FlexAttention's score_mod: score + bias at query position i (or offsets[b] + i, the
        queries at the end of row b's cache) and key position j."""
        if self.score is None:  # no bias (NO_BIAS): the block mask alone
            return None
        lq, lk = inputs["q"].shape[2], inputs["k"].shape[2]
        bias = self.score(inputs, lq, lk)
        if offsets is None:
            return lambda score, b, h, i, j: score + bias(b, h, i, j)
        return lambda score, b, h, i, j: score + bias(b, h, offsets[b] + i, j)


def sinks_of(inputs: dict) -> torch.Tensor | None:
    """The point's sink logits (H,) (inputs["sinks"]: {"sinks": parameter} or {}), or None."""
    return inputs.get("sinks", {}).get("sinks")


def _bound(factory: Callable[[int], nn.Module]) -> Callable[[dict], nn.Module]:
    """module(inputs) for a family whose posenc module holds its learned tables."""

    def module(inputs):
        q = inputs["q"]
        return bind(factory(q.shape[1]).to(q.device), inputs["params"])

    return module


def _alibi_module(inputs):
    module = posenc.ALiBi(inputs["q"].shape[1]).to(inputs["q"].device)
    module.slopes = inputs["slopes"]
    return module


def _alibi_score(inputs, lq, lk):
    slopes = inputs["slopes"]
    return lambda b, h, i, j: -slopes[h] * (j - i).abs()


def _t5_score(inputs, lq, lk):
    """T5's bucket of each j - i looked up from a table built once (no logarithm per score)."""
    table = inputs["params"]["relative_attention_bias.weight"]  # (num_buckets, H)
    low = lq + lk  # j - i from -(Lq + Lk) (a query past an offset) to Lk
    rels = torch.arange(-low, lk + 1, device=table.device)
    bucket = F.t5_relative_bucket(
        rels, T5_ARGS["bidirectional"], T5_ARGS["num_buckets"], T5_ARGS["max_distance"]
    ).int()
    return lambda b, h, i, j: table[bucket[j - i + low], h]


def _clip(rows: int) -> int:
    """Shaw's K of a table with 2K + 1 entries."""
    return (rows - 1) // 2


def _shaw_score(inputs, lq, lk):
    table = inputs["params"]["table"]  # (H, 2K + 1)
    k = _clip(table.shape[1])
    return lambda b, h, i, j: table[h, (j - i).clamp(-k, k) + k]


def _shaw_module(inputs):
    q, params = inputs["q"], inputs["params"]
    module = posenc.ShawBias(q.shape[1], _clip(params["table"].shape[1]))
    return bind(module.to(q.device), params)


def _shaw_tables(k: int):
    """(heads, head_dim) -> Shaw's key and value tables (emb_k, emb_v: (2K + 1, D)), shared by
    every head."""
    return lambda heads, head_dim: nn.ParameterDict(
        {n: nn.Parameter(0.5 * torch.randn(2 * k + 1, head_dim)) for n in ("emb_k", "emb_v")}
    )


def _shaw_kv_eager(inputs, causal, seq):
    """posenc's Shaw attention on each sequence: queries at the end of its keys."""
    p, sinks, window = inputs["params"], seq.pop("sinks", None), seq.pop("window", None)

    def attend(q_s, k_s, v_s, _at):
        lq, lk = q_s.shape[2], k_s.shape[2]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=q_s.device).tril(lk - lq)
        if window:  # and keys past the window: j > p - W
            mask &= ~torch.ones_like(mask).tril(lk - lq - window)
        ek, ev, mask = p["emb_k"], p["emb_v"], mask if causal else None
        clip = _clip(ek.shape[0])
        return F.shaw_attention(
            q_s, k_s, v_s, ek, ev, clip, mask=mask, offset=lk - lq, sinks=sinks
        )[0]

    return lambda q, k, v: F.each_sequence(attend, q, k, v, **seq)


def _fox_eager(inputs, causal, seq):
    """posenc's FoX attention on each sequence: the bias from the gates of its own keys, its
    queries at their end (causal: FoX is defined so)."""
    log_f, sinks, window = inputs["params"]["log_f"], seq.pop("sinks", None), seq.pop("window")

    def attend(q_s, k_s, v_s, at):
        bias = F.forgetting_bias(log_f[at[0], :, at[2]], q_s.shape[2])
        return F.relative_attention(
            q_s, k_s, v_s, bias=bias, causal=True, sinks=sinks, window=window
        )

    return lambda q, k, v: F.each_sequence(attend, q, k, v, **seq)


def _fox_gates(batch: int, heads: int, keys: int) -> dict[str, torch.Tensor]:
    """Log forget gates log sigmoid(N(2.5, 1)): gates near 0.9 (Lin et al. report trained FoX
    gates mostly close to 1, some heads forgetting fast)."""
    return {"log_f": torch.nn.functional.logsigmoid(2.5 + torch.randn(batch, heads, keys))}


ALIBI = BiasFamily(
    name="alibi",
    learned=None,
    fixed=lambda heads: {"slopes": F.alibi_slopes(heads).float()},
    module=_alibi_module,
    kernel_args=lambda inputs: {"alibi_slopes": inputs["slopes"]},
    score=_alibi_score,
    table_bytes=lambda heads, head_dim, dtype: 4 * heads,  # float32 slopes
)
T5 = BiasFamily(
    name="t5",
    learned=lambda heads, head_dim: posenc.T5RelativeBias(heads, **T5_ARGS),
    fixed=lambda heads: {},
    module=_bound(lambda heads: posenc.T5RelativeBias(heads, **T5_ARGS)),
    kernel_args=lambda inputs: {
        "t5_table": inputs["params"]["relative_attention_bias.weight"],
        "t5_num_buckets": T5_ARGS["num_buckets"],
        "t5_max_distance": T5_ARGS["max_distance"],
        "t5_bidirectional": T5_ARGS["bidirectional"],
    },
    score=_t5_score,
    table_bytes=lambda heads, head_dim, dtype: T5_ARGS["num_buckets"] * heads * dtype.itemsize,
)


def _shaw_bias(k: int) -> BiasFamily:
    """Shaw's scalar bias at clip distance k."""
    return BiasFamily(
        name="shaw_bias",
        learned=lambda heads, head_dim: posenc.ShawBias(heads, k),
        fixed=lambda heads: {},
        module=_shaw_module,
        kernel_args=lambda inputs: {"shaw_bias": inputs["params"]["table"]},
        score=_shaw_score,
        table_bytes=lambda heads, head_dim, dtype: heads * (2 * k + 1) * dtype.itemsize,
        knob=SHAW_K,
        sized=_shaw_bias,
    )


def _shaw_kv(k: int) -> BiasFamily:
    """Shaw's key and value terms at clip distance k."""
    return BiasFamily(
        name="shaw_kv",
        learned=_shaw_tables(k),
        fixed=lambda heads: {},
        module=None,  # Shaw's value term adds to the output: no attn_mask, no score_mod
        kernel_args=lambda inputs: {
            "shaw_k": inputs["params"]["emb_k"],
            "shaw_v": inputs["params"]["emb_v"],
        },
        score=None,
        table_bytes=lambda heads, head_dim, dtype: 2 * (2 * k + 1) * head_dim * dtype.itemsize,
        # Q E_K^T and the per-index weights times E_V: 2 (2K + 1) D multiply-adds each
        extra_flops=lambda head_dim: 4 * (2 * k + 1) * head_dim,
        eager=_shaw_kv_eager,
        inexpressible="Shaw's value term adds to the output: not expressible",
        tile_kind="value",
        knob=SHAW_K,
        sized=_shaw_kv,
    )


SHAW_BIAS, SHAW_KV = _shaw_bias(SHAW_K.default), _shaw_kv(SHAW_K.default)
FOX = BiasFamily(
    name="fox",
    learned=lambda heads, head_dim: posenc.ForgettingGate(heads * head_dim, heads),
    fixed=lambda heads: {},
    module=None,  # a per-row, data-dependent bias: no (H, L, L) table or position score_mod
    kernel_args=lambda inputs: {"fox_log_f": inputs["params"]["log_f"]},
    score=None,
    table_bytes=lambda heads, head_dim, dtype: 0,  # B H Lk gates: next to nothing beside k, v
    eager=_fox_eager,
    inexpressible=(
        "FoX's bias is each row's cumulative gates (data, not positions): this harness builds "
        "attn_masks and score_mods from position tables"
    ),
    per_token=_fox_gates,
    gated=True,
    needs_causal=True,
)
FAMILIES = {f.name: f for f in (ALIBI, T5, SHAW_BIAS, SHAW_KV, FOX)}


class _Zeros(nn.Module):
    """No bias, in a bias module's form: zeros of one head, so that an SDPA partner's mask has
    the row's format (-inf where hidden) without the bias's values (B.H.L.L of them)."""

    def __init__(self, device):
        super().__init__()
        self.device = device

    def bias(self, lq: int, lk: int, offset: int = 0) -> torch.Tensor:
        return torch.zeros(1, lq, lk, device=self.device)


def _plain_eager(inputs: dict, causal: bool, seq: dict) -> Attention:
    return lambda q, k, v: F.relative_attention(q, k, v, causal=causal, **seq)


# The attention without positions, through each implementation's own path: the partner a
# layer row's share is measured against (bench/cases/layer.py). Not a family of FAMILIES: it
# has no cases of its own.
NO_BIAS = BiasFamily(
    name="none",
    learned=None,
    fixed=lambda heads: {},
    module=lambda inputs: _Zeros(inputs["q"].device),
    kernel_args=lambda inputs: {},
    score=None,
    table_bytes=lambda heads, head_dim, dtype: 0,
    eager=_plain_eager,
)
