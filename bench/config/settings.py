"""The run's settings checked (timing, seed, the switches) and the axes a set knob decides
(model= sets the shapes: the command line may not set them too); errors name the key."""

from __future__ import annotations

from bench.checks import as_list
from bench.registry import KNOBS
from bench.run import heap

SWITCHES = (  # the keys that are true or false
    "smoke",
    "tutorial_timing",
    "calibrate",
    "resume",
    "retry_timeouts",
    "allow_unchecked",
    "report",
    "profile",
)


def _check_timing(t) -> None:
    for key in ("warmup_s", "budget_s"):
        if not t[key] >= 0:
            raise ValueError(f"timing.{key}: seconds >= 0, got {t[key]!r}")
    if t["min_reps"] < 1:
        raise ValueError(f"timing.min_reps: at least 1, got {t['min_reps']!r}")
    if t["max_reps"] < t["min_reps"]:
        raise ValueError(
            f"timing.max_reps: at least min_reps ({t['min_reps']}), got {t['max_reps']!r}"
        )
    if isinstance(t["passes"], bool) or not isinstance(t["passes"], int) or t["passes"] < 1:
        raise ValueError(f"timing.passes: must be a positive integer, got {t['passes']!r}")
    threads = t["threads"]
    if threads not in ("auto", None) and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(f"timing.threads: auto, a positive integer or null, got {threads!r}")
    limit = t.get("row_limit_s")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0
    ):
        raise ValueError(f"timing.row_limit_s: seconds > 0 or null (auto), got {limit!r}")
    if t.get("cpu_heap", "keep") not in heap.CHOICES:
        raise ValueError(f"timing.cpu_heap: {' or '.join(heap.CHOICES)}, got {t['cpu_heap']!r}")
    for key in ("rel_ci", "rel_spread"):
        if t[key] is not None and not t[key] > 0:
            raise ValueError(
                f"timing.{key}: must be positive or null (no early stop), got {t[key]!r}"
            )


def check_settings(cfg, pinned: frozenset[str]) -> None:
    """The run's settings (timing, seed, switches), and no axis both pinned and set by a knob
    (model= sets the shapes)."""
    _check_timing(cfg["timing"])
    seed = cfg["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed: an integer from 0 to 2**63 - 1, got {seed!r}")
    for key in SWITCHES:
        if not isinstance(cfg.get(key, False), bool):
            raise ValueError(f"{key}: true or false, got {cfg[key]!r}")
    for knob in KNOBS.values():  # what a set knob decides, the command line may not set too
        given = knob.sets and any(knob.is_set(v) for v in as_list(cfg[knob.name]))
        clash = [k for k in knob.sets if k in pinned] if given else []
        if clash:
            raise ValueError(
                f"{clash[0]}: {knob.name}= sets it; leave it out (or drop {knob.name}=)"
            )
