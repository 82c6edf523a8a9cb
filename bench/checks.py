"""Value checks of configuration keys, shared by the harness, the knobs the cases declare and
the probe: each takes a key's value (a scalar or a list) and its name, and returns the values
as a list or raises ValueError naming the key (and the nearest allowed value for a typo)."""

from __future__ import annotations

import difflib

LARGEST = 2**48  # above any size a machine holds, below int64's overflow in products of sizes


def as_list(value) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return [value]
    try:  # omegaconf ListConfig
        return list(value)
    except TypeError:
        return [value]


def positive_ints(value, key: str, allow_none: bool = False) -> list:
    values = as_list(value)
    if not values:
        raise ValueError(f"{key}: at least one value is needed")
    for v in values:
        if v is None and allow_none:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{key}: every value must be a positive integer, got {v!r}")
        if v >= LARGEST:
            raise ValueError(f"{key}: {v} is past any tensor's size (2**48)")
    return values


def positive_numbers(value, key: str) -> list:
    values = as_list(value)
    if not values:
        raise ValueError(f"{key}: at least one value is needed")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{key}: every value must be a positive number, got {v!r}")
    return values


def at_least_one(value, key: str) -> list:
    """Factors that extend (a factor below 1 would shorten the context a schedule extends)."""
    values = positive_numbers(value, key)
    for v in values:
        if v < 1:
            raise ValueError(f"{key}: every value must be at least 1 (an extension), got {v!r}")
    return values


def nonnegative_ints(value, key: str) -> list:
    values = as_list(value)
    if not values:
        raise ValueError(f"{key}: at least one value is needed")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{key}: every value must be an integer >= 0, got {v!r}")
    return values


def choices(value, key: str, allowed) -> list[str]:
    values = [str(v) for v in as_list(value)]
    if values == ["all"]:
        return list(allowed)
    if not values:
        raise ValueError(f"{key}: at least one value is needed")
    for v in values:
        if v not in allowed:
            close = difflib.get_close_matches(v, list(allowed), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ValueError(f"{key}: unknown value {v!r}; {hint}choose from {', '.join(allowed)}")
    return values


def bools(value, key: str) -> list[bool]:
    values = as_list(value)
    for v in values:
        if not isinstance(v, bool):
            raise ValueError(f"{key}: every value must be true or false, got {v!r}")
    return values


def one_of(*allowed):
    """A knob's check: its values among `allowed`."""
    return lambda value, key: choices(value, key, allowed)
