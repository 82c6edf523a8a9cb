"""The tutorial's section 5.2, reproduced and then done right: `python -m bench.tutorial_5_2`.

1. As published: three `posenc.seed` encoders at B=32, L=512, d_model=512, 100 calls timed
   with time.time(), no warm-up, no device sync.
2. The same encoders timed properly (bench.timing.measure: warm-up, perf_counter or CUDA events,
   per-call p20/p50/p80), next to the corrected `posenc` implementations and a same-size copy.
3. Shaw relative attention, tutorial vs corrected, at B=2, L=512, d_model=512, H=8, K=50:
   time and peak memory; the corrected one again at L=4096.
4. The ratios quoted in the README, each measured side by side, round by round.

Writes results.csv, ratios.csv, report.md and encoders.png to a new run directory (never
overwrites an earlier run) and prints the report.
This script stands in for `make bench` until the Hydra harness (bench/__main__.py) exists.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

import posenc
from bench.memory import peak_bytes
from bench.results import cpu_model
from bench.timing import measure, measure_ratio
from posenc import functional as F
from posenc import seed

FIELDS = (
    "case", "impl", "device", "dtype", "batch", "seq_len", "d_model", "num_heads",
    "p20_ms", "p50_ms", "p80_ms", "n_samples", "tutorial_ms_per_100", "peak_mem_bytes",
    "max_abs_err", "status", "message",
)  # fmt: skip


SEED_ATTENTION_NOTE = "no value term, unscaled relative logits (errata 3.6)"


def tutorial_timing(model: torch.nn.Module, x: torch.Tensor) -> float:
    """Section 5.2 verbatim in spirit: wall clock around 100 calls, no warm-up, no sync."""
    start_time = time.time()
    for _ in range(100):
        with torch.no_grad():
            model(x)
    return (time.time() - start_time) * 1000


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got.double() - want).abs().max().item()


def encoder_rows(device: torch.device) -> list[tuple[dict, Callable | None]]:
    """(row, zero-argument call) pairs; each call already passed or failed the float64 gate."""
    b, length, d_model = 32, 512, 512
    x = torch.randn(b, length, d_model, device=device)
    shape = dict(device=device.type, dtype="float32", batch=b, seq_len=length, d_model=d_model)

    # The float64 truth each implementation is checked against before it is timed.
    sin_truth = x.double() + F.sinusoidal_table(length, d_model, dtype=torch.float64, device=device)
    cos64, sin64 = F.rope_cos_sin(length, d_model, dtype=torch.float64, device=device)
    rope_truth = F.apply_rope(x.double(), cos64, sin64)
    gptj_truth = F.apply_rope(x.double(), cos64, sin64, interleaved=True)
    cos, sin = F.rope_cos_sin(length, d_model, device=device)
    out, dst = torch.empty_like(x), torch.empty_like(x)

    seeds = {
        "sinusoidal": seed.SinusoidalPositionalEncoding(d_model).to(device),
        "learnable": seed.LearnablePositionalEncoding(d_model).to(device),
        "rope": seed.RoPEPositionalEncoding(d_model).to(device),
    }
    fixed = {
        "sinusoidal": posenc.SinusoidalPositionalEncoding(d_model).to(device),
        "learnable": posenc.LearnablePositionalEncoding(d_model).to(device),
        "rope": posenc.RoPEPositionalEncoding(d_model).to(device),
    }
    fixed["learnable"].load_state_dict(seeds["learnable"].state_dict())
    learn_truth = x.double() + fixed["learnable"].pos_embedding.weight[:length].double()
    truth = {"sinusoidal": sin_truth, "learnable": learn_truth, "rope": rope_truth,
             "rope interleaved": gptj_truth}  # fmt: skip

    impls: list[tuple[str, str, Callable[[], object], float | None]] = []
    for case, model in seeds.items():
        impls.append((case, "seed", lambda m=model: m(x), tutorial_timing(model, x)))
    for case, model in fixed.items():
        impls.append((case, "corrected", lambda m=model: m(x), None))
    impls.append(("rope", "corrected out=", lambda: F.apply_rope(x, cos, sin, out=out), None))
    gptj = lambda: F.apply_rope(x, cos, sin, out=out, interleaved=True)  # noqa: E731
    impls.append(("rope interleaved", "corrected out=", gptj, None))
    impls.append(("copy", "dst.copy_(x)", lambda: dst.copy_(x), None))

    planned = []
    with torch.no_grad():
        for case, impl, fn, tutorial_ms in impls:
            err = _err(fn(), truth[case]) if case in truth else 0.0
            status = "ok" if err < 1e-4 else "wrong"
            message = "" if status == "ok" else "not a rotation (tutorial erratum 4.5)"
            row = dict(case=case, impl=impl, **shape, num_heads="", tutorial_ms_per_100=tutorial_ms,
                       max_abs_err=err, status=status, message=message)  # fmt: skip
            planned.append((row, fn))
    return planned


def attention_rows(device: torch.device, long_len: int) -> list[tuple[dict, Callable | None]]:
    b, d_model, heads, clip = 2, 512, 8, 50
    old = seed.RelativeMultiHeadAttention(d_model, heads, clip).to(device)
    new = posenc.RelativeMultiHeadAttention(d_model, heads, clip).to(device)
    new.load_state_dict(old.state_dict())
    planned = []
    for length in (512, long_len):
        x = torch.randn(b, length, d_model, device=device)
        shape = dict(device=device.type, dtype="float32", batch=b, seq_len=length,
                     d_model=d_model, num_heads=heads)  # fmt: skip
        for impl in ("seed", "corrected"):
            model = old if impl == "seed" else new
            # The tutorial materializes rel_k as (B, H, L, L, D) float32: skip what cannot fit.
            need = b * heads * length * length * (d_model // heads) * 4
            if impl == "seed" and length > 512:
                note = f"needs > {need / 2**30:.1f} GiB for rel_k alone"
                row = dict(case="relative_attention", impl=impl, **shape, status="skipped",
                           message=note)  # fmt: skip
                planned.append((row, None))
                continue
            note = SEED_ATTENTION_NOTE if impl == "seed" else ""
            row = dict(case="relative_attention", impl=impl, **shape, status="ok", message=note)
            planned.append((row, lambda m=model, x=x: m(x, x, x)))
    return planned


def measure_all(planned, device: torch.device, budget_s: float) -> list[dict]:
    """Times every planned call, then, apart from the timing, its peak memory (the memory probe
    watches every op, which would slow a timed call)."""
    rows = []
    with torch.no_grad():
        for row, fn in planned:
            if fn is not None:
                t = measure(fn, device, min_reps=3, budget_s=budget_s)
                row.update(p20_ms=t.p20, p50_ms=t.p50, p80_ms=t.p80, n_samples=t.n)
            rows.append(row)
        for row, fn in planned:
            if fn is not None:
                row["peak_mem_bytes"] = peak_bytes(fn, device)
    return rows


# Ratios worth quoting, each measured side by side (bench.timing.measure_ratio): numerator and
# denominator alternate within each round, so the shared machine's drift cancels.
RATIO_PAIRS = (
    (("rope", "corrected out=", 512), ("copy", "dst.copy_(x)", 512)),
    (("rope interleaved", "corrected out=", 512), ("copy", "dst.copy_(x)", 512)),
    (("rope", "seed", 512), ("rope", "corrected out=", 512)),
    (("relative_attention", "seed", 512), ("relative_attention", "corrected", 512)),
)


def measure_ratios(planned, device: torch.device, rounds: int) -> list[dict]:
    calls = {(r["case"], r["impl"], r["seq_len"]): fn for r, fn in planned if fn is not None}
    rows = []
    with torch.no_grad():
        for num, den in RATIO_PAIRS:
            if num in calls and den in calls:
                t = measure_ratio(calls[num], calls[den], device, rounds=rounds)
                rows.append(dict(numerator=" ".join(map(str, num[:2])),
                                 denominator=" ".join(map(str, den[:2])), seq_len=num[2],
                                 p20=t.p20, p50=t.p50, p80=t.p80, rounds=t.n))  # fmt: skip
    return rows


def _fmt(v, digits=2):
    return f"{v:.{digits}f}" if isinstance(v, float) else ("" if v is None else str(v))


def report(rows: list[dict], env: dict, ratios: list[dict] = ()) -> str:
    lines = [
        f"# Tutorial section 5.2, extended ({env['device_name']}, {env['threads']} threads)",
        "",
    ]
    lines += ["## Encoders at B=32, L=512, d_model=512, float32, forward", ""]
    lines += ["| case | impl | tutorial's timing (ms / 100 calls) | p50 ms/call [p20, p80] | "
              "x copy | speedup vs seed | peak MiB | max err vs float64 | status |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    copy = next(r["p50_ms"] for r in rows if r["case"] == "copy")
    seed_p50 = {
        r["case"]: r["p50_ms"] for r in rows if r["impl"] == "seed" and not r.get("num_heads")
    }
    for r in rows:
        if r.get("num_heads"):
            continue
        speed = seed_p50.get(r["case"].split()[0], r["p50_ms"]) / r["p50_ms"]
        lines.append(
            f"| {r['case']} | {r['impl']} | {_fmt(r['tutorial_ms_per_100'], 1)} | "
            f"{_fmt(r['p50_ms'], 3)} [{_fmt(r['p20_ms'], 3)}, {_fmt(r['p80_ms'], 3)}] | "
            f"{r['p50_ms'] / copy:.2f} | {speed:.1f}x | {r['peak_mem_bytes'] / 2**20:.0f} | "
            f"{r['max_abs_err']:.1e} | {r['status']} |"
        )
    lines += ["", "## Shaw relative attention, B=2, d_model=512, H=8, K=50, float32, forward", ""]
    lines += [
        "| L | impl | p50 ms [p20, p80] | peak MiB | status | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.get("num_heads"):
            continue
        if r["status"] != "ok":
            lines.append(f"| {r['seq_len']} | {r['impl']} | | | {r['status']} | {r['message']} |")
            continue
        lines.append(
            f"| {r['seq_len']} | {r['impl']} | {r['p50_ms']:.1f} [{r['p20_ms']:.1f}, "
            f"{r['p80_ms']:.1f}] | {r['peak_mem_bytes'] / 2**20:.0f} | ok | {r['message']} |"
        )
    if ratios:
        lines += ["", "## Ratios measured side by side (time / time, per round)", ""]
        lines += [
            "| numerator | denominator | L | median [p20, p80] | rounds |",
            "|---|---|---|---|---|",
        ]
        for r in ratios:
            lines.append(
                f"| {r['numerator']} | {r['denominator']} | {r['seq_len']} | {r['p50']:.2f} "
                f"[{r['p20']:.2f}, {r['p80']:.2f}] | {r['rounds']} |"
            )
    lines += ["", f"torch {env['torch']}, python {env['python']}, {env['timestamp']}", ""]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Horizontal bars of p50 ms per call with p20-p80 whiskers, one bar per encoder row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    enc = [r for r in rows if not r.get("num_heads") and "p50_ms" in r]
    labels = [
        f"{r['case']} / {r['impl']}" + (" (wrong)" if r["status"] != "ok" else "") for r in enc
    ]
    p50 = [r["p50_ms"] for r in enc]
    err = [[r["p50_ms"] - r["p20_ms"] for r in enc], [r["p80_ms"] - r["p50_ms"] for r in enc]]
    colors = ["tab:red" if r["impl"] == "seed" else "tab:gray" if r["case"] == "copy"
              else "tab:blue" for r in enc]  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(enc) + 1.2))
    ax.barh(range(len(enc)), p50, xerr=err, color=colors, capsize=3)
    ax.set_yticks(range(len(enc)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms per call (median; whiskers p20-p80)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--out", type=Path, default=None, help="run directory (must not exist)")
    parser.add_argument("--budget-s", type=float, default=2.0, help="timing budget per impl")
    parser.add_argument("--long-len", type=int, default=4096, help="long L for attention")
    parser.add_argument(
        "--ratio-rounds", type=int, default=31, help="rounds per side-by-side ratio"
    )
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine")
    if args.long_len <= 512:
        parser.error(f"--long-len must be > 512, got {args.long_len}")
    device = torch.device(args.device)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out or Path("results") / "runs" / f"{stamp}-tutorial_5_2-{device.type}"
    out_dir.mkdir(parents=True, exist_ok=False)  # never overwrite an earlier run
    torch.manual_seed(0)
    env = dict(
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda"
        else cpu_model(),
        threads=torch.get_num_threads(), torch=torch.__version__,
        python=platform.python_version(), timestamp=stamp,
    )  # fmt: skip
    # Each family is timed and its ratios taken before the next family runs: on the CPU the
    # time of allocating code depends on what the allocator holds from earlier work (the
    # tutorial's RoPE measured 14-90 ms per call depending on what ran before it in the process).
    rows, ratios = [], []
    for planned in (encoder_rows(device), attention_rows(device, args.long_len)):
        rows += measure_all(planned, device, args.budget_s)
        ratios += measure_ratios(planned, device, args.ratio_rounds)
    with open(out_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    if ratios:
        with open(out_dir / "ratios.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(ratios[0]))
            writer.writeheader()
            writer.writerows(ratios)
    text = report(rows, env, ratios)
    (out_dir / "report.md").write_text(text)
    title = f"B=32, L=512, d_model=512, float32, forward: {env['device_name']}"
    plot(rows, out_dir / "encoders.png", title)
    print(text)
    print(f"wrote {out_dir}/results.csv, ratios.csv, report.md and encoders.png")
    return out_dir


if __name__ == "__main__":
    main()
