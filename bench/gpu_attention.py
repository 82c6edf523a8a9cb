"""The attention half of `make gpu-check`: kernels.relative_attention against its peers.

For each bias family (ALiBi, T5, Shaw's key + value terms), causal and not, forward and
forward+backward, at B=4, H=16, D=128, L in {1024, 4096, 8192}, bfloat16 (issue 4):
  - triton      kernels.relative_attention, the bias computed in the tile;
  - sdpa_bias   scaled_dot_product_attention with the (H, L, L) bias materialized as attn_mask;
  - flex        torch.compile(flex_attention) with the same bias as a score_mod (ALiBi, T5);
  - sdpa        scaled_dot_product_attention without a bias: the ceiling;
  - eager       posenc.functional.shaw_attention (Shaw only, forward, L <= 4096).
`tile_rows` (`--parts tiles`) times the kernel over candidate block sizes, warps and stages.
Every implementation is first gated against a float32 SDPA with the materialized bias (Shaw:
the float32 eager reference) and never timed when wrong. Reports p20/p50/p80 ms, TFLOP/s
(4 B H Lq Lk D per forward, half that when causal, x3.5 for forward+backward as
flash-attention counts it) and the peak memory the call allocates.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
import triton

import kernels
import posenc
from bench.memory import peak_bytes
from bench.timing import measure_side_by_side
from kernels.relbias import Tiles
from posenc import functional as F


@dataclass(frozen=True)
class AttnShape:
    b: int
    h: int
    seq: int
    d: int

    def label(self) -> str:
        return f"B={self.b} H={self.h} L={self.seq} D={self.d}"


SHAPES = [AttnShape(4, 16, n, 128) for n in (1024, 4096, 8192)]
SMOKE = [AttnShape(1, 2, 24, 16)]
SHAW_CLIP = 16  # Shaw's K: 2K + 1 = 33 relative buckets
EAGER_MAX_LEN = 4096  # the eager Shaw reference materializes (B, H, L, L) scores

FIELDS = (
    "case", "impl", "mode", "causal", "device", "device_name", "dtype", "batch", "num_heads",
    "seq_len", "head_dim", "p20_ms", "p50_ms", "p80_ms", "n_samples", "tflops",
    "peak_mem_bytes", "max_abs_err", "status", "message", "timestamp",
)  # fmt: skip


def _bias_module(family: str, heads: int, device):
    torch.manual_seed(1)
    module = posenc.ALiBi(heads) if family == "alibi" else posenc.T5RelativeBias(heads, 32, 128)
    return module.to(device)


def _materialized(module, n: int, causal: bool, dtype) -> torch.Tensor:
    """(H, L, L) bias; -inf above the diagonal when causal."""
    with torch.no_grad():
        bias = module.bias(n, n).to(dtype)
    if causal:
        upper = torch.ones(n, n, dtype=torch.bool, device=bias.device).triu(1)
        bias = bias.masked_fill(upper, float("-inf"))
    return bias


def _score_mod(family: str, module):
    if family == "alibi":
        slopes = module.slopes

        def alibi(score, b, h, i, j):
            return score - slopes[h] * (j - i).abs()

        return alibi
    table = module.relative_attention_bias.weight.detach()
    args = (module.bidirectional, module.num_buckets, module.max_distance)

    def t5(score, b, h, i, j):
        return score + table[F.t5_relative_bucket(j - i, *args), h]

    return t5


def _kernel_kwargs(family: str, module) -> dict:
    if family == "alibi":
        return {"alibi_slopes": module.slopes}
    return {"t5_table": module.relative_attention_bias.weight.detach(), "t5_num_buckets": 32,
            "t5_max_distance": 128}  # fmt: skip


def _bias_impls(family, module, n, causal, dtype, device, smoke) -> dict[str, Callable | None]:
    """name -> f(q, k, v) -> out for ALiBi and T5."""
    mask = _materialized(module, n, causal, dtype)
    kwargs = _kernel_kwargs(family, module)
    impls: dict[str, Callable | None] = {
        "triton": lambda q, k, v: kernels.relative_attention(q, k, v, causal=causal, **kwargs),
        "sdpa_bias": lambda q, k, v: nnf.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "flex": None,
        "sdpa": lambda q, k, v: nnf.scaled_dot_product_attention(q, k, v, is_causal=causal),
    }
    if not smoke:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        block_mask = None
        if causal:
            block_mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, n, n,
                                           device=device)  # fmt: skip
        flex = torch.compile(flex_attention, dynamic=False)
        score_mod = _score_mod(family, module)
        impls["flex"] = lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=block_mask)
    return impls


def _shaw_eager(emb_k, emb_v, n, causal, device):
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril() if causal else None

    def eager(q, k, v):
        return F.shaw_attention(q, k, v, emb_k.to(q.dtype), emb_v.to(q.dtype), SHAW_CLIP,
                                mask=mask)[0]  # fmt: skip

    return eager


def _shaw_impls(emb_k, emb_v, n, causal, device) -> dict[str, Callable | None]:
    eager = _shaw_eager(emb_k, emb_v, n, causal, device)
    return {
        "triton": lambda q, k, v: kernels.relative_attention(
            q, k, v, shaw_k=emb_k, shaw_v=emb_v, causal=causal
        ),  # fmt: skip
        "eager": eager if n <= EAGER_MAX_LEN else None,
        "sdpa": lambda q, k, v: nnf.scaled_dot_product_attention(q, k, v, is_causal=causal),
    }


def _flops(shape: AttnShape, causal: bool, mode: str) -> float:
    fwd = 4 * shape.b * shape.h * shape.seq * shape.seq * shape.d * (0.5 if causal else 1.0)
    return fwd * (1.0 if mode == "forward" else 3.5)


def _timed(fn, q, k, v, mode: str):
    """A zero-argument call for `mode`; set-up (leaves, the upstream gradient) is not timed."""
    if mode == "forward":

        def forward():
            with torch.no_grad():
                return fn(q, k, v)

        return forward
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    grad = torch.randn_like(q)

    def forward_backward():
        out = fn(*leaves)
        out.backward(grad)
        for t in leaves:
            t.grad = None

    return forward_backward


def _inputs(shape: AttnShape, device, dtype):
    """-> (q, k, v), (E_K, E_V), the row fields every row of this shape shares."""
    props = torch.cuda.get_device_properties(device) if device.type == "cuda" else None
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape.b, shape.h, shape.seq, shape.d, device=device, dtype=dtype)
               for _ in range(3))  # fmt: skip
    emb_k, emb_v = (0.5 * torch.randn(2 * SHAW_CLIP + 1, shape.d, device=device) for _ in "kv")
    base = dict(device=device.type, device_name=props.name if props else "cpu (interpreter)",
                dtype=str(dtype).replace("torch.", ""), batch=shape.b, num_heads=shape.h,
                seq_len=shape.seq, head_dim=shape.d,
                timestamp=dt.datetime.now().isoformat(timespec="seconds"))  # fmt: skip
    return (q, k, v), (emb_k, emb_v), base


def attention_rows(shape: AttnShape, device, dtype, budget_s: float, smoke: bool) -> list[dict]:
    (q, k, v), (emb_k, emb_v), base = _inputs(shape, device, dtype)
    rows = []
    for family in ("alibi", "t5", "shaw"):
        for causal in (False, True):
            if family == "shaw":
                impls = _shaw_impls(emb_k, emb_v, shape.seq, causal, device)
                truth = _shaw_eager(emb_k, emb_v, shape.seq, causal, device)
            else:
                module = _bias_module(family, shape.h, device)
                impls = _bias_impls(family, module, shape.seq, causal, dtype, device, smoke)
                mask32 = _materialized(module, shape.seq, causal, torch.float32)

                def truth(q, k, v, mask32=mask32):
                    return nnf.scaled_dot_product_attention(q, k, v, attn_mask=mask32)

            with torch.no_grad():
                want = truth(q.float(), k.float(), v.float())
            rows += _family_rows(
                family, causal, impls, want, (q, k, v), shape, base, budget_s, smoke
            )
            del want
    return rows


def _family_rows(family, causal, impls, want, qkv, shape, base, budget_s, smoke,
                 modes=("forward", "forward+backward")) -> list[dict]:  # fmt: skip
    """Per mode: each implementation gated against `want`, the passing ones timed side by side."""
    rows, device = [], qkv[0].device
    quick = {"min_reps": 1, "warmup_s": 0.0} if smoke else {}  # smoke: the script, not numbers
    tol = 4e-2  # bfloat16 outputs of a softmax average: about 8 ulps at 1.0
    for mode in modes:
        ready = {}
        for name, fn in impls.items():
            row = dict(base, case=f"{family}_attention", impl=name, mode=mode, causal=causal)
            if fn is None or (name == "eager" and mode != "forward"):
                rows.append(dict(row, status="skipped", message="not available at this shape"))
                continue
            try:
                err = 0.0
                if name != "sdpa":  # the ceiling computes no bias: nothing to compare
                    with torch.no_grad():
                        err = (fn(*qkv).float() - want).abs().max().item()
                if err > tol:  # never time a wrong result
                    rows.append(dict(row, max_abs_err=err, status="wrong", message=f"tol {tol}"))
                    continue
                ready[name] = (dict(row, max_abs_err=err, message=""), _timed(fn, *qkv, mode))
            except Exception as exc:  # one failing impl never stops the run
                rows.append(failed_row(row, exc))

        def finish(name, t, call, timings, mode=mode):
            return dict(p20_ms=t.p20, p50_ms=t.p50, p80_ms=t.p80, n_samples=t.n,
                        tflops=_flops(shape, causal, mode) / (t.p50 * 1e-3) / 1e12,
                        peak_mem_bytes=peak_bytes(call, device))  # fmt: skip

        rows += time_side_by_side(ready, device, finish, budget_s=budget_s, **quick)
    return rows


def time_side_by_side(ready: dict, device, finish: Callable, **kwargs) -> list[dict]:
    """Rows for the calls that passed their gate, ready = {name: (row, call)}, timed side by side
    (bench.timing.measure_side_by_side: a change in clocks or load lands on all of them);
    finish(name, timing, call, timings) -> the row's measured fields. A call that fails becomes
    an oom or error row."""
    timings = measure_side_by_side({n: call for n, (_, call) in ready.items()}, device, **kwargs)
    rows = []
    for name, (row, call) in ready.items():
        try:
            t = timings[name]
            if isinstance(t, Exception):
                raise t
            rows.append(dict(row, **finish(name, t, call, timings), status="ok"))
        except Exception as exc:
            rows.append(failed_row(row, exc))
    return rows


def failed_row(row: dict, exc: BaseException) -> dict:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return dict(row, status="oom", message=str(exc).splitlines()[0])
    return dict(row, status="error", message=f"{type(exc).__name__}: {exc}"[:200])


# Tile candidates for `--parts tiles` (kernels.relbias.Tiles: block_m, block_n, warps, stages),
# around FlexAttention's defaults that the kernel starts from. Backward tiles are the dk/dv
# kernel's; the dq kernel runs their transpose.
FWD_TILES = [(64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 128, 4, 3),
             (128, 32, 4, 3)]  # fmt: skip
BWD_TILES = [(64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 8, 3), (32, 64, 4, 2), (32, 128, 4, 2),
             (32, 32, 4, 1)]  # fmt: skip
TILE_SHAPES = [AttnShape(4, 16, 4096, 128)]
TILE_SMOKE = [AttnShape(1, 2, 40, 16)]


def _label(tiles) -> str:
    return "triton[{}x{} w{} s{}]".format(*tiles)


def tile_rows(shape: AttnShape, device, dtype, budget_s: float, smoke: bool) -> list[dict]:
    """Block-size tuning data: ALiBi and Shaw k+v (the lightest and the heaviest tile), not
    causal, forward over FWD_TILES and forward+backward over BWD_TILES, next to the default
    tiles and SDPA without bias. The gate checks each forward's output; a backward candidate's
    gradients are checked only by the kernel tests' own tiles (tests/kernels)."""
    (q, k, v), (emb_k, emb_v), base = _inputs(shape, device, dtype)
    rows = []
    for family in ("alibi", "shaw"):
        if family == "shaw":
            kwargs = {"shaw_k": emb_k, "shaw_v": emb_v}
            truth = _shaw_eager(emb_k, emb_v, shape.seq, False, device)
        else:
            module = _bias_module(family, shape.h, device)
            kwargs = _kernel_kwargs(family, module)
            mask32 = _materialized(module, shape.seq, False, torch.float32)

            def truth(q, k, v, mask32=mask32):
                return nnf.scaled_dot_product_attention(q, k, v, attn_mask=mask32)

        with torch.no_grad():
            want = truth(q.float(), k.float(), v.float())

        def impl(kwargs=kwargs, **tiles):
            return lambda q, k, v: kernels.relative_attention(q, k, v, **kwargs, **tiles)

        sdpa = {"sdpa": lambda q, k, v: nnf.scaled_dot_product_attention(q, k, v)}
        for mode, name, grid in (("forward", "fwd_tiles", FWD_TILES),
                                 ("forward+backward", "bwd_tiles", BWD_TILES)):  # fmt: skip
            impls = {"triton": impl(), **sdpa}
            for t in grid[:2] if smoke else grid:  # smoke tests the plumbing, not every tile
                impls[_label(t)] = impl(**{name: Tiles(*t)})
            rows += _family_rows(family, False, impls, want, (q, k, v), shape, base, budget_s,
                                 smoke, modes=(mode,))  # fmt: skip
        del want
    return rows


def tiles_summary(rows: list[dict]) -> str:
    """Per case and mode of the tiles part: the fastest candidate against the default tiles."""
    nb = triton.next_power_of_2(2 * SHAW_CLIP + 1)  # kernels.relbias caps block_m at 4096 / NB
    lines = ["", f"Labels are the tiles asked for: with Shaw's {2 * SHAW_CLIP + 1} buckets the "
             f"kernel caps block_m at {4096 // nb} in the forward and dq kernels.", "",
             "| case | mode | default p50 ms | fastest | its p50 ms | default / fastest |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    ok = [r for r in rows if r["status"] == "ok" and r["impl"].startswith("triton")]
    for case, mode in dict.fromkeys((r["case"], r["mode"]) for r in ok):
        group = [r for r in ok if (r["case"], r["mode"]) == (case, mode)]
        default = next((r for r in group if r["impl"] == "triton"), None)
        best = min(group, key=lambda r: r["p50_ms"])
        if default is not None:
            ratio = default["p50_ms"] / best["p50_ms"]
            lines.append(f"| {case} | {mode} | {default['p50_ms']:.3f} | {best['impl']} "
                         f"| {best['p50_ms']:.3f} | {ratio:.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict]) -> str:
    """One line per row; "x sdpa" is p50 over SDPA-without-bias's p50 at the same shape, case,
    causality and mode (the issue's target for triton: <= 1.4)."""

    def key(r):
        return (r["seq_len"], r["case"], r["causal"], r["mode"])

    ceiling = {key(r): r["p50_ms"] for r in rows if r["impl"] == "sdpa" and r["status"] == "ok"}
    lines = [f"# Attention with a relative bias on {rows[0]['device_name']}", "",
             "| shape | case | causal | mode | impl | p50 ms [p20, p80] | x sdpa | TFLOP/s "
             "| peak MiB | status |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        shape = AttnShape(r["batch"], r["num_heads"], r["seq_len"], r["head_dim"])
        head = f"| {shape.label()} | {r['case']} | {r['causal']} | {r['mode']} | {r['impl']} |"
        if r["status"] != "ok":
            lines.append(f"{head} | | | | {r['status']}: {r.get('message', '')} |")
            continue
        ratio = f"{r['p50_ms'] / ceiling[key(r)]:.2f}" if key(r) in ceiling else ""
        lines.append(f"{head} {r['p50_ms']:.3f} [{r['p20_ms']:.3f}, {r['p80_ms']:.3f}] "
                     f"| {ratio} | {r['tflops']:.1f} | {r['peak_mem_bytes'] / 2**20:.0f} "
                     "| ok |")  # fmt: skip
    return "\n".join(lines) + "\n"
