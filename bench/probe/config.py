"""The probe's structured config (Hydra ConfigStore `probe_schema`) and its validation.

Every key is checked before anything trains; an error names the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from bench.checks import as_list, choices, positive_ints  # the harness's: errors alike
from bench.probe.encodings import DEFAULT_ENCODINGS, ENCODINGS, SPECS
from bench.probe.tasks import TASKS
from bench.probe.train import TrainConfig

# RoPE's long-context schedules applied to a RoPE model at evaluation (never in training), each
# with factor = eval_len / train_len and original_max_position_embeddings = the positions
# trained on (train_len, plus one with BOS); the default evaluates the first three (llama3 on
# request: rope_eval_scalings=[yarn,llama3])
EVAL_SCALINGS = ("linear", "dynamic", "yarn", "llama3")


@dataclass
class ProbeConfig:
    size_name: str = "cpu"
    encodings: Any = field(default_factory=lambda: list(DEFAULT_ENCODINGS))
    tasks: Any = field(default_factory=lambda: ["lookback", "recall", "copy"])
    rope_eval_scalings: Any = field(default_factory=lambda: ["linear", "dynamic", "yarn"])
    train_len: int = 32
    eval_factors: Any = field(default_factory=lambda: [1, 2, 4, 8])
    seeds: Any = field(default_factory=lambda: [0, 1, 2])
    eval_examples: int = 128
    causal: bool = True
    device: str = "cpu"
    workers: int = 0  # cells trained at once (0: one per CPU core; 1 on a GPU)
    threads: int = 1  # torch threads per worker: 1 keeps the numbers reproducible
    resume: bool = False
    train: TrainConfig = field(default_factory=TrainConfig)


def register() -> None:
    ConfigStore.instance().store(name="probe_schema", node=ProbeConfig)


def _seeds(value) -> list[int]:
    values = as_list(value)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(f"seeds: expected integers >= 0, got {value!r}")
    return values


def validate(cfg) -> dict:
    """The checked plan: lists of encodings, tasks, schedules, factors, seeds."""
    plan = {
        "encodings": choices(cfg.encodings, "encodings", ENCODINGS),
        "tasks": choices(cfg.tasks, "tasks", tuple(TASKS)),
        "rope_eval_scalings": (
            choices(cfg.rope_eval_scalings, "rope_eval_scalings", EVAL_SCALINGS)
            if cfg.rope_eval_scalings
            else []
        ),
        "eval_factors": positive_ints(cfg.eval_factors, "eval_factors"),
        "seeds": _seeds(cfg.seeds),
    }
    causal_only = [e for e in plan["encodings"] if SPECS[e].needs_causal]
    if causal_only and not cfg.causal:
        raise ValueError(
            f"encodings: {', '.join(causal_only)} count the keys before the query and need "
            "causal=true"
        )
    for key, minimum in (("train_len", 8), ("eval_examples", 1), ("threads", 1), ("workers", 0)):
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{key}: expected an integer >= {minimum}, got {value!r}")
    t = cfg.train
    positive = (
        "steps",
        "batch",
        "d_model",
        "num_heads",
        "layers",
        "shaw_max_relative",
        "check_every",
        "check_examples",
    )
    for key in positive:
        if not isinstance(t[key], int) or t[key] < 1:
            raise ValueError(f"train.{key}: expected a positive integer, got {t[key]!r}")
    if t.d_model % t.num_heads or (t.d_model // t.num_heads) % 2:
        raise ValueError(
            f"train.d_model={t.d_model} must split into num_heads={t.num_heads} "
            "heads of an even width (RoPE rotates pairs)"
        )
    if not 0 <= t.target <= 1:
        raise ValueError(
            f"train.target: expected an accuracy in [0, 1] (0: no early stop), got {t.target!r}"
        )
    if not t.lr > 0 or t.warmup < 0:
        raise ValueError(f"train.lr must be > 0 and train.warmup >= 0, got {t.lr}, {t.warmup}")
    if cfg.device not in ("cpu", "cuda"):
        raise ValueError(f"device: expected cpu or cuda, got {cfg.device!r}")
    return plan
