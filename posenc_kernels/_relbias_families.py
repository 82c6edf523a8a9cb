"""The bias families of posenc_kernels.relative_attention, each declared once: its public argument,
the checks of that argument, and what the kernels get from it (a _Spec: the bias path, the clip,
the entries its gradient is summed into; the table as the kernels read it; T5's and Shaw's
bucket index; Shaw's key term and value table). A new family is a new bias path in the kernels
(posenc_kernels/_relbias_common.py) and one entry in FAMILIES.

T5's bias is looked up, not computed: the bucket of each clipped offset r in [-K, K] (K the
maximum distance, beyond which every offset shares the last bucket) is computed once per
configuration and device, exactly (float64, see _t5_buckets), and the kernel reads the table at
that bucket (only in the band |r| < K of each row: beyond it one value per row): no logarithm
per score, whose approximate GPU version would drop a bucket at the offsets where the bucket
boundary is an exact integer (16, 32 and 64 for 32 buckets, max distance 128).

Why T5's bucket formula is here as well as in posenc (posenc.functional.t5_relative_bucket):
kernels never import posenc (the reference is tested against the kernels, not shared with
them), and this copy differs on purpose: float64 with the floor taken 1e-9 above, exact at the
boundaries; tests/posenc_kernels/test_relbias.py checks the two agree bucket for bucket.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import triton
from torch import Tensor

from posenc_kernels import _relbias_common as jit
from posenc_kernels._relbias_tiles import Tiles, default_dq_tiles, default_tiles, transpose

# the kernels' bias paths (their BIAS constexpr) as the ints the launchers pass; T5 and Shaw's
# scalar bias are both TABLE: an (H, n) lookup through a bucket index
ALIBI, TABLE, SHAW_KV = jit.ALIBI.value, jit.TABLE.value, jit.SHAW_KV.value
# the name of a bias path's own rows in the tile tables (posenc_kernels/_relbias_tiles.py)
_FAMILY_ROWS = {ALIBI: "alibi", SHAW_KV: "shaw_kv"}


class _Spec:
    """The compile-time settings of one call (the kernels' constexprs), its scale and tiles.

    bias: ALIBI, TABLE or SHAW_KV; clip: K, the relative indices are 0 .. 2K; n_rel: the
    entries a gradient is summed into (ALiBi 1, T5 its buckets, Shaw 2K + 1); nb: n_rel rounded
    up to a power of two (>= 16), the width of the kernels' per-bucket vectors."""

    def __init__(
        self,
        bias,
        causal,
        scale,
        clip,
        n_rel,
        has_value=False,
        table_grad=False,
        fwd_tiles=None,
        bwd_tiles=None,
        col=False,
        window=0,
    ):
        self.bias, self.causal, self.scale, self.clip = bias, causal, scale, clip
        self.window = window  # a sliding window's width (0: none)
        self.n_rel, self.has_value, self.table_grad = n_rel, has_value, table_grad
        self.col = col  # a per-key term (FoX's D_j) subtracted from every logit
        self.nb = max(16, triton.next_power_of_2(n_rel))
        self.constexprs = dict(BIAS=bias, CAUSAL=causal, K=clip, HAS_VALUE=has_value, COL=col)
        self.constexprs["WINDOW"] = window
        self.user_tiles = {False: fwd_tiles, True: bwd_tiles}
        self.buckets = None  # T5 training its table: (2K + 1, num_buckets), _bucket_matrix

    def tiles(self, q: Tensor, backward: bool, alone=True) -> tuple[Tiles, Tiles | None]:
        """(tiles, fallback): the user's tiles (no fallback), or the default for q's GPU with
        _SAFE as the fallback. alone: one query head a kv head, whole sequences, 32-bit rows;
        else, or with a window, dk/dv takes its kind's row, not its family's (ALiBi's larger
        tile spills in its key loops there)."""
        if self.user_tiles[backward] is not None:
            return self.user_tiles[backward], None
        kinds = self._kinds(backward)
        if backward and not (alone and not self.window):
            kinds = kinds[1:]
        return default_tiles(q, backward, kinds)

    def dq_tiles(self, q: Tensor, dkdv: Tiles) -> Tiles:
        """The dq kernel's tiles beside dk/dv's tiles `dkdv` (self.tiles(q, True)'s): their
        transpose for a user's bwd_tiles, else the GPU's dq row where it has one
        (_relbias_tiles._DQ_TILES). The fallback's dq is its transpose (the launcher's)."""
        if self.user_tiles[True] is not None:
            return transpose(dkdv)
        return default_dq_tiles(q, self._kinds(True), dkdv)

    def table_gradient(self, part: Tensor | None, drel: Tensor | None, heads: int):
        """The bias table's gradient (H, n_rel) from the dq kernel's sums, None where it does
        not train: ALiBi's per program (part (N H, blocks, nb)), the tables' per row and
        relative index (drel (N H, Lq, 2K + 1)) summed over the rows, then per bucket (T5)."""
        if not self.table_grad:
            return None
        if part is not None:
            return part.view(-1, heads, part.shape[1], self.nb).sum((0, 2))[:, : self.n_rel]
        per_index = drel.view(-1, heads, *drel.shape[1:]).sum((0, 2))
        return per_index if self.buckets is None else per_index @ self.buckets

    def _kinds(self, backward: bool) -> tuple[str, str]:
        """The tile tables' keys, the most specific first: the family's own rows, then its kind
        ("value": the backward's for Shaw's per-index gathers (not FoX's one index), the
        forward's for Shaw's value term; else "plain")."""
        value = (self.bias == SHAW_KV and not self.col) if backward else self.has_value
        family = "fox" if self.col else _FAMILY_ROWS.get(self.bias, "")
        return family, "value" if value else "plain"


class Prepared(NamedTuple):
    """What the kernels read of a family's argument: table (H, n) float32 (ALiBi's slopes (H,),
    T5's (num_buckets, H) as its (H, num_buckets) view; a view, so autograd returns its
    gradient to the caller's table), per_index (H, 2K + 1) float32: the bias of each relative
    index that the kernels read (T5: the table at each index's bucket, gathered without autograd
    once a call, so that a band score reads one value, not a bucket and then its value; Shaw's
    scalar bias: its table),
    relk = scale * Q E_K^T (B, H, Lq, 2K + 1) float32 and ev = E_V float32 (Shaw's terms,
    computed with torch so that autograd carries their gradients on to q, E_K and E_V); FoX:
    relk = each query's D_i (B, H, Lq, 1) and col = D (B, H, Lk), D the cumulative sum of the
    log forget gates (autograd carries both gradients on to the gates)."""

    spec: _Spec
    table: Tensor | None = None
    per_index: Tensor | None = None
    relk: Tensor | None = None
    ev: Tensor | None = None
    col: Tensor | None = None  # FoX: D (B, H, Lk) float32, the keys' per-key term


class Options(NamedTuple):
    """The call's arguments besides the family's table that a family reads."""

    causal: bool
    scale: float
    trains: bool  # the table requires grad (and grad is enabled): the kernels sum its gradient
    tiles: dict  # fwd_tiles, bwd_tiles (checked) for _Spec
    t5: tuple  # (bidirectional, num_buckets, max_distance)
    shaw_v: Tensor | None
    queries: Tensor | None = None  # (B, Lq) each query's key position (FoX reads D there)
    keys: int = 0  # the key positions of a row (Lk; paged: the block table's)
    window: int = 0  # a sliding window (0: none)


def _t5_buckets(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each relative position r = j - i (Raffel et al. 2020; the formula of the
    public T5 code, which logs in float32): half of the buckets for r > 0 when bidirectional;
    within a half, distances below half of its buckets exact, larger ones log-spaced up to
    max_distance. In float64 with the floor taken 1e-9 above: where the exact value is an
    integer (a boundary, e.g. |r| = 16, 32, 64 for 32 buckets and 128), a log that lands one
    ulp low still gives the exact bucket; elsewhere no bucket value comes within 1e-9 of an
    integer. int32, on rel's device."""
    n = -rel
    bucket = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).to(rel.dtype) * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    exact = num_buckets // 2
    scaled = torch.log(n.clamp(min=1).double() / exact) / math.log(max_distance / exact)
    large = exact + torch.floor(scaled * (num_buckets - exact) + 1e-9).long()
    large = large.clamp(max=num_buckets - 1)
    return (bucket + torch.where(n < exact, n, large)).int()


@functools.lru_cache(maxsize=64)
def _bucket_index(clip: int, device: torch.device, t5: tuple) -> Tensor:
    """T5's bucket of each relative index 0 .. 2K (int64 on `device`), built once per
    configuration and device (a T5 call would otherwise spend some twenty small kernels on
    it). Never written to."""
    return _t5_buckets(torch.arange(-clip, clip + 1, device=device), *t5).long()


@functools.lru_cache(maxsize=64)
def _bucket_matrix(clip: int, device: torch.device, t5: tuple) -> Tensor:
    """(2K + 1, num_buckets) float32, 1 where index r falls in bucket g: the table gradient's
    sums per index to sums per bucket in one matmul (cached like _bucket_index)."""
    return torch.nn.functional.one_hot(_bucket_index(clip, device, t5), t5[1]).float()


def _on_q(name: str, t: Tensor, q: Tensor) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if t.device != q.device:
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}")


def _alibi(slopes: Tensor, q: Tensor, o: Options) -> Prepared:
    heads = q.shape[1]
    _on_q("alibi_slopes", slopes, q)
    if tuple(slopes.shape) != (heads,):
        raise ValueError(f"alibi_slopes must be ({heads},), got {tuple(slopes.shape)}")
    spec = _Spec(ALIBI, o.causal, o.scale, 0, 1, table_grad=o.trains, **o.tiles, window=o.window)
    return Prepared(spec, table=slopes.float())


def _check_t5(bidirectional, num_buckets, max_distance) -> None:
    """At least one exact bucket a side, and max_distance beyond them: at or below them the
    log-spaced buckets' base is 1 or less (a division by zero, or buckets back among the
    exact ones; the public T5 code computes them all the same)."""
    for name, value in (("t5_num_buckets", num_buckets), ("t5_max_distance", max_distance)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not isinstance(bidirectional, bool):
        raise TypeError(f"t5_bidirectional must be a bool, got {type(bidirectional).__name__}")
    exact = num_buckets // (4 if bidirectional else 2)
    if exact < 1:
        raise ValueError(
            f"t5_num_buckets must be >= {4 if bidirectional else 2} "
            f"(t5_bidirectional={bidirectional}), got {num_buckets}"
        )
    if max_distance <= exact:
        raise ValueError(
            f"t5_max_distance must exceed the {exact} exact buckets of t5_num_buckets="
            f"{num_buckets} (t5_bidirectional={bidirectional}), got {max_distance}"
        )


def _t5(table: Tensor, q: Tensor, o: Options) -> Prepared:
    bidirectional, num_buckets, max_distance = o.t5
    _check_t5(*o.t5)
    _on_q("t5_table", table, q)
    if tuple(table.shape) != (num_buckets, q.shape[1]):
        raise ValueError(f"t5_table must be {(num_buckets, q.shape[1])}, got {tuple(table.shape)}")
    clip = max(max_distance, num_buckets)  # beyond max_distance every offset has the last bucket
    gidx = _bucket_index(clip, q.device, o.t5)
    spec = _Spec(
        TABLE, o.causal, o.scale, clip, num_buckets, table_grad=o.trains, **o.tiles, window=o.window
    )
    if o.trains:  # the backward's sums per index to sums per bucket
        spec.buckets = _bucket_matrix(clip, q.device, o.t5)
    per_index = table.detach().float().t()[:, gidx]  # (H, 2K + 1), a head's row contiguous
    return Prepared(spec, table=table.float().t(), per_index=per_index)  # (H, num_buckets)


def _shaw_bias(table: Tensor, q: Tensor, o: Options) -> Prepared:
    heads = q.shape[1]
    _on_q("shaw_bias", table, q)
    if table.dim() != 2 or table.shape[0] != heads or table.shape[1] % 2 == 0:
        raise ValueError(f"shaw_bias must be (H={heads}, 2K+1), got {tuple(table.shape)}")
    clip = (table.shape[1] - 1) // 2  # the bucket of an index is the index
    spec = _Spec(
        TABLE,
        o.causal,
        o.scale,
        clip,
        table.shape[1],
        table_grad=o.trains,
        **o.tiles,
        window=o.window,
    )
    table = table.float()
    return Prepared(spec, table=table, per_index=table.detach())


def _shaw_kv(shaw_k: Tensor, q: Tensor, o: Options) -> Prepared:
    d = q.shape[-1]
    for name, t in (("shaw_k", shaw_k), ("shaw_v", o.shaw_v)):
        if t is None:
            continue
        _on_q(name, t, q)
        if t.dim() != 2 or t.shape[1] != d or t.shape[0] % 2 == 0 or t.shape != shaw_k.shape:
            raise ValueError(f"{name} must be (2K+1, D={d}), got {tuple(t.shape)}")
    clip = (shaw_k.shape[0] - 1) // 2
    has_value = o.shaw_v is not None
    spec = _Spec(
        SHAW_KV, o.causal, o.scale, clip, shaw_k.shape[0], has_value, **o.tiles, window=o.window
    )
    # the key term's (B, H, Lq, 2K + 1) table: O(L K), not O(L^2)
    relk = torch.matmul(q.float() * o.scale, shaw_k.float().t())
    return Prepared(spec, relk=relk, ev=o.shaw_v.float() if has_value else None)


def _fox(log_f: Tensor, q: Tensor, o: Options) -> Prepared:
    """FoX (Lin et al. 2025): the logit of query i for key j <= i gains D_i - D_j, D the
    cumulative sum of log_f over key positions: Shaw's key-term path with K = 0 (relk: each
    query's D_i) and a per-key column D_j. The sums are float32: |D| grows with the length
    (about L |log f|), so far-apart differences lose digits, as in the authors' kernel."""
    _on_q("fox_log_f", log_f, q)
    shape = (q.shape[0], q.shape[1], o.keys)
    if tuple(log_f.shape) != shape or not log_f.is_floating_point():
        raise ValueError(
            f"fox_log_f must be (B, H, Lk) = {shape}, the keys' log forget gates, got "
            f"{tuple(log_f.shape)} {log_f.dtype}"
        )
    if not o.causal:
        raise ValueError("fox_log_f: forgetting attention is causal; pass causal=True")
    d = torch.cumsum(log_f.float(), dim=-1)  # (B, H, Lk)
    pos = o.queries[:, None, :].expand(shape[0], shape[1], -1)  # (B, H, Lq)
    relk = torch.gather(d, 2, pos).unsqueeze(-1)  # (B, H, Lq, 1): each query's D_i
    spec = _Spec(SHAW_KV, o.causal, o.scale, 0, 1, col=True, **o.tiles, window=o.window)
    return Prepared(spec, relk=relk, col=d)


# The public argument of each family -> its preparation (relative_attention takes exactly one).
FAMILIES: dict[str, Callable[[Tensor, Tensor, Options], Prepared]] = {
    "alibi_slopes": _alibi,
    "t5_table": _t5,
    "shaw_bias": _shaw_bias,
    "shaw_k": _shaw_kv,
    "fox_log_f": _fox,
}
