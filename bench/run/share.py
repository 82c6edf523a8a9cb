"""How much of a layer its positional encoding takes, measured two ways for every row of a case
with a `share_base` (the layer without its encoding, timed in the same side-by-side group), each
row against its partner: the same attention path without the encoding (Case.share_partners:
SDPA's row against SDPA with the same mask format and no bias), else the base:

removal   pe_share = 1 - t(partner) / t(row), medians of the same group; its interval
          [pe_share_lo, pe_share_hi] from the two medians' 95% intervals, combined at their
          extremes (1 - hi(partner) / lo(row), 1 - lo(partner) / hi(row)): conservative, and
          wider than either. pe_share_best: the same against the fastest partner timed (what
          a user pays over the best layer without an encoding).
profiler  pe_share_profiler: torch.profiler over PROFILE_CALLS calls of the row and of the base
          (fewer when the timing's min_reps is smaller),
          the time inside posenc.layer's regions: the position region (an addition, a
          rotation) plus what the row's attention region (a bias inside it) takes beyond the
          base's plain attention, over the whole call's region. Host time on the CPU, the
          kernels' device time on CUDA. Forward rows only: autograd runs the backward outside
          the regions, so a forward+backward row's backward cannot be attributed to them.

The two differ in what they see: removal counts everything the encoding changes (a fused
attention that a bias rules out, a different memory pattern); the profiler counts the
operators inside the regions, plus its own per-operator overhead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bench.run.samples import Timing
from posenc.layer import REGIONS

PROFILE_CALLS = 5
CALL = "posenc::call"  # the region around each profiled call


def removal(t: Timing, base: Timing) -> dict:
    """The removal share of a row against the base's timing (same group)."""
    (lo, hi), (base_lo, base_hi) = t.median_ci(), base.median_ci()
    return {
        "pe_share": 1 - base.p50 / t.p50,
        "pe_share_lo": 1 - base_hi / lo,
        "pe_share_hi": 1 - base_lo / hi,
    }


def regions_ms(fn: Callable[[], object], device: torch.device, calls: int):
    """ms per call inside each of posenc.layer's regions and the whole call (CALL)."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            with record_function(CALL):
                fn()
        if cuda:
            torch.cuda.synchronize(device)
    names = {CALL, *REGIONS.values()}
    out = dict.fromkeys(names, 0.0)
    for event in prof.key_averages():
        if event.key in names:
            total = event.device_time_total if cuda else event.cpu_time_total
            out[event.key] = total / 1e3 / calls
    return out


def profiled(row: dict[str, float], base: dict[str, float]) -> float | None:
    """The profiler's share from regions_ms of a row and of its base."""
    if not row[CALL]:
        return None
    encoded = row[REGIONS["encoded_attention"]]
    # the partner's attention: the layer's own (nope), or a caller's in the encoded region
    plain = base[REGIONS["attention"]] + base[REGIONS["encoded_attention"]]
    excess = encoded - plain if encoded else 0.0
    return (row[REGIONS["position"]] + excess) / row[CALL]


def group_shares(
    base: str,
    partners: dict[str, str],
    timings: dict[str, Timing],
    calls: dict[str, Callable],
    mode: str,
    device,
    profile_calls: int = PROFILE_CALLS,
) -> dict[str, dict]:
    """Each timed implementation's share columns, by name: `pe_share` against its own partner
    (partners[name], else base) and `pe_share_best` against the fastest partner timed, the
    partner's name in `share_partner`; a share whose interval lies wholly below 0 says in
    `share_note` that the partner is the slower. Partners' own rows get none (their share is
    zero by definition); a row whose partner was not timed, none."""
    plain = {base, *partners.values()}
    timed = {n: t for n, t in timings.items() if isinstance(t, Timing)}
    if base not in timed:
        return {}
    profiles = {}
    for name, fn in calls.items() if mode == "forward" else ():
        try:
            profiles[name] = regions_ms(fn, device, profile_calls)
        except Exception:  # a call the profiler cannot follow keeps its removal share
            continue
    best = min((n for n in plain if n in timed), key=lambda n: timed[n].p50)
    shares = {}
    for name, t in timed.items():
        partner = partners.get(name, base)
        if name in plain or partner not in timed:
            continue
        shares[name] = dict(removal(t, timed[partner]), share_partner=partner)
        shares[name]["pe_share_best"] = removal(t, timed[best])["pe_share"]
        if shares[name]["pe_share_hi"] < 0:
            shares[name]["share_note"] = (
                f"share below 0: {partner} (the same path without the encoding) read slower "
                "than this row"
            )
        if name in profiles and partner in profiles:
            shares[name]["pe_share_profiler"] = profiled(profiles[name], profiles[partner])
    return shares
