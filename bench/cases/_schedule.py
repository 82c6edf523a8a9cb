"""RoPE's long-context schedule as knobs (rope_scaling, rope_theta, rope_factor,
rope_original), read by the cases that build RoPE tables: rope, rope_tables and the layer
cases. The schedules themselves are posenc's (posenc/_scaling.py)."""

from __future__ import annotations

from bench.checks import at_least_one, one_of, positive_ints, positive_numbers
from bench.registry import Knob, Point
from posenc._scaling import SCHEDULES, extension

# Long-context schedules (posenc/_scaling.py), as a sweep knob: an 8x extension of a 4096-token
# original context, the shape of Llama 3.1's (which extends 8192 by 8) at this harness's lengths.
SCALINGS = ("none", *SCHEDULES)
ROPE_SCALING = Knob(
    "rope_scaling",
    "none",
    "RoPE's long-context schedule: " + ", ".join(SCALINGS),
    one_of(*SCALINGS),
    set_by="model",
)
ORIGINAL, FACTOR = 4096, 8.0  # the knobs' defaults: an 8x extension of a 4096-token context


def _schedule_knob(name: str, default, text: str, check) -> Knob:
    return Knob(name, default, text, check, quiet_default=True, set_by="model")


THETA_HELP, FACTOR_HELP = "RoPE's base (Llama 3: 500000)", "the schedule's extension factor"
ROPE_THETA = _schedule_knob("rope_theta", 10000.0, THETA_HELP, positive_numbers)
ROPE_FACTOR = _schedule_knob("rope_factor", FACTOR, FACTOR_HELP, at_least_one)
ORIGINAL_HELP = "the schedule's original context (original_max_position_embeddings)"
ROPE_ORIGINAL = _schedule_knob("rope_original", ORIGINAL, ORIGINAL_HELP, positive_ints)
SCHEDULE = (ROPE_THETA, ROPE_FACTOR, ROPE_ORIGINAL)


def scaling_of(point: Point) -> dict | None:
    """The scaling dict of the point's schedule (knobs rope_scaling, rope_factor,
    rope_original): the schedule's extension of that context by that factor."""
    if point.rope_scaling == "none":
        return None
    return extension(
        point.rope_scaling, float(point.rope_factor), point.rope_original, point.head_dim
    )
