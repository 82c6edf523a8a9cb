"""How steady is this CPU over time? Times three ops over 32 MiB side by side (20 ms slices in
turn, no harness) for SECONDS: an `out=` add (memory bandwidth), a same-size `copy_`, and an
allocating add (fresh pages each call: page faults). Prints each op's WINDOW-second medians
relative to their overall median, the add's median over the copy's per window (a ratio measured
side by side), and, with --block S, how far the medians of S-second blocks of the run differ
pairwise: the run-to-run repeatability that a perfect harness would get on this machine for runs
of S seconds. Also the calling thread's CPU time over the wall time of the calls (meaningful with
--threads 1, since other threads are not counted): near 1 means the slow phases are not time
stolen by the hypervisor, which would show as CPU time < wall time.

Usage: python tools/cpu_drift.py [--seconds 90] [--window 3] [--block 40] [--threads N]
"""

import argparse
import itertools
import statistics
import time

import torch


def _pairwise(values: list[float]) -> str:
    """Median and max of |b/a - 1| over all pairs, and the share of pairs within 5%."""
    drift = [abs(b / a - 1) for a, b in itertools.combinations(values, 2)]
    within = sum(d <= 0.05 for d in drift)
    return (
        f"median {100 * statistics.median(drift):.1f}%, max {100 * max(drift):.1f}%, "
        f"{within} of {len(drift)} pairs within 5%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--block", type=float, default=None, help="seconds per block (a 'run')")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.seconds <= 0 or args.window <= 0 or args.window > args.seconds:
        parser.error("--seconds and --window must be > 0, with --window <= --seconds")
    if args.block is not None and not args.window <= args.block <= args.seconds / 2:
        parser.error("--block must be between --window and half of --seconds")
    if args.threads:
        torch.set_num_threads(args.threads)
    x, pe = torch.randn(32, 512, 512), torch.randn(512, 512)
    out, src, dst = torch.empty_like(x), torch.randn(32 * 512 * 512), torch.empty_like(x).view(-1)
    ops = {
        "out= add": lambda: torch.add(x, pe, out=out),
        "copy": lambda: dst.copy_(src),
        "allocating add": lambda: x + pe,
    }
    for op in ops.values():  # warm-up
        for _ in range(10):
            op()
    windows, wall, cpu, end = [], 0.0, 0.0, time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        samples, stop = {name: [] for name in ops}, time.perf_counter() + args.window
        while time.perf_counter() < stop:
            for name, op in ops.items():
                slice_end = time.perf_counter() + 0.02
                while time.perf_counter() < slice_end:
                    t0, c0 = time.perf_counter(), time.thread_time()
                    op()
                    samples[name].append(time.perf_counter() - t0)
                    cpu += time.thread_time() - c0
        wall += sum(sum(s) for s in samples.values())
        windows.append({name: statistics.median(s) for name, s in samples.items()})
    series = {name: [w[name] for w in windows] for name in ops}
    series["out= add / copy"] = [w["out= add"] / w["copy"] for w in windows]
    print(f"{len(windows)} windows of {args.window:g} s, {torch.get_num_threads()} threads")
    for name, values in series.items():
        center = statistics.median(values)
        rel = [v / center for v in values]
        unit = "" if "/" in name else " ms per call"
        scale = 1 if "/" in name else 1e3
        print(
            f"{name}: median {scale * center:.3f}{unit}; windows {min(rel):.2f} .. "
            f"{max(rel):.2f}: " + " ".join(f"{r:.2f}" for r in rel)
        )
    if args.block:
        per = max(1, round(args.block / args.window))
        blocks = [windows[i : i + per] for i in range(0, len(windows) - per + 1, per)]
        print(f"{len(blocks)} blocks of {per * args.window:g} s, medians pairwise |b/a - 1|:")
        for name in ops:
            print(
                f"  {name}: " + _pairwise([statistics.median(w[name] for w in b) for b in blocks])
            )
        ratios = [statistics.median(w["out= add"] / w["copy"] for w in b) for b in blocks]
        print("  out= add / copy: " + _pairwise(ratios))
    print(f"CPU time / wall time of the calls: {cpu / wall:.3f}")


if __name__ == "__main__":
    main()
