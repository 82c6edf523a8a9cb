"""How steady is this CPU over time? Times one memory-bound op (an `out=` add over 32 MiB, no
allocation) back to back for SECONDS and prints the median of each WINDOW-second slice relative to
the median of all slices. A machine whose slices swing by more than a few percent cannot give
run-to-run repeatable absolute timings: compare ratios measured side by side instead. Also
prints the calling thread's CPU time over the wall time of the same calls (meaningful with
--threads 1, since other threads are not counted): near 1 means the slow phases are not time
stolen by the hypervisor, which would show as CPU time < wall time.

Usage: python tools/cpu_drift.py [--seconds 90] [--window 3] [--threads N]
"""

import argparse
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.seconds <= 0 or args.window <= 0 or args.window > args.seconds:
        parser.error("--seconds and --window must be > 0, with --window <= --seconds")
    if args.threads:
        torch.set_num_threads(args.threads)
    x, pe = torch.randn(32, 512, 512), torch.randn(512, 512)
    out = torch.empty_like(x)
    for _ in range(20):  # warm-up
        torch.add(x, pe, out=out)
    windows, wall, cpu, end = [], 0.0, 0.0, time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        samples, stop = [], time.perf_counter() + args.window
        while time.perf_counter() < stop:
            t0, c0 = time.perf_counter(), time.thread_time()
            torch.add(x, pe, out=out)
            samples.append(time.perf_counter() - t0)
            cpu += time.thread_time() - c0
        wall += sum(samples)
        windows.append(statistics.median(samples))
    center = statistics.median(windows)
    rel = [w / center for w in windows]
    print(f"{len(windows)} windows of {args.window:g} s, {torch.get_num_threads()} threads; "
          f"median {1e3 * center:.3f} ms per call")  # fmt: skip
    print("relative window medians: " + " ".join(f"{r:.2f}" for r in rel))
    print(f"range {min(rel):.2f} .. {max(rel):.2f}")
    print(f"CPU time / wall time of the calls: {cpu / wall:.3f}")


if __name__ == "__main__":
    main()
