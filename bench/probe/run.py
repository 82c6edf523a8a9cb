"""One probe cell (encoding x task x seed): train at train_len, then evaluate at every length,
RoPE also under each long-context schedule. Runs in a worker process; returns its rows.

Row schema (probe.csv): one row per (encoding, eval_scaling, task, eval_len, seed); `steps` is
the steps trained (train.steps, or fewer once the check reached train.target) and
`check_accuracy` that check's last accuracy at train_len (empty when no check ran).
"""

from __future__ import annotations

import time
import traceback

import torch

from bench.probe.encodings import SPECS
from bench.probe.model import ProbeModel
from bench.probe.tasks import make_task
from bench.probe.train import TrainConfig, evaluate, train
from bench.results import Schema

COLUMNS = (
    "encoding",
    "eval_scaling",
    "task",
    "seed",
    "train_len",
    "eval_len",
    "factor",
    "status",
    "accuracy",
    "token_accuracy",
    "answers",
    "chance",
    "train_loss",
    "train_s",
    "steps",
    "check_accuracy",
    "d_model",
    "num_heads",
    "layers",
    "causal",
    "device",
    "message",
    "timestamp",
)
KEY = ("encoding", "eval_scaling", "task", "seed", "eval_len")
PROBE = Schema(COLUMNS, KEY)  # probe.csv (bench/results.py: Schema)


def _schedule(kind: str, factor: int, train_len: int) -> dict | None:
    """RoPE's schedule `kind` stretching a train_len context by `factor` (None: plain RoPE);
    train_len counts every position the model trained on (BOS included)."""
    if kind == "none":
        return None
    if kind == "linear":
        return {"type": "linear", "factor": float(factor)}
    return {"type": kind, "factor": float(factor), "original_max_position_embeddings": train_len}


def _model(encoding: str, task, cell: dict, max_len: int, scaling: dict | None = None):
    t = cell["train"]
    return ProbeModel(
        encoding,
        task.vocab_size,
        d_model=t.d_model,
        num_heads=t.num_heads,
        layers=t.layers,
        train_len=cell["train_len"],
        max_len=max_len,
        causal=cell["causal"],
        shaw_max_relative=t.shaw_max_relative,
        rope_scaling=scaling,
        bos=t.bos,
    )


def run_cell(cell: dict) -> list[dict]:
    """cell: encoding, task, seed, train_len, eval_factors, rope_eval_scalings, eval_examples,
    causal, device, threads, train (TrainConfig). Rows for every evaluation of this cell; a
    failure becomes error rows, never an exception."""
    threads = torch.get_num_threads()
    torch.set_num_threads(cell["threads"])
    try:
        return _run_cell(cell)
    finally:
        torch.set_num_threads(threads)  # a cell run in the caller's process leaves it as it was


def _run_cell(cell: dict) -> list[dict]:
    enc, seed, train_len = cell["encoding"], cell["seed"], cell["train_len"]
    cfg: TrainConfig = cell["train"]
    max_len = train_len * max(cell["eval_factors"])
    task = make_task(cell["task"], train_len, max_len)
    scalings = ["none"] + (list(cell["rope_eval_scalings"]) if enc == "rope" else [])
    base = {
        "encoding": enc,
        "task": task.name,
        "seed": seed,
        "train_len": train_len,
        "chance": task.chance,
        "d_model": cfg.d_model,
        "num_heads": cfg.num_heads,
        "layers": cfg.layers,
        "causal": cell["causal"],
        "device": cell["device"],
    }
    rows = []

    def row(scaling: str, factor: int, **values) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        rows.append(
            {
                **base,
                "eval_scaling": scaling,
                "factor": factor,
                "eval_len": factor * train_len,
                "timestamp": stamp,
                **values,
            }
        )

    try:
        torch.manual_seed(seed)
        model = _model(enc, task, cell, max_len).to(cell["device"])
        trained = train(model, task, cfg, seed)
    except Exception as exc:  # noqa: BLE001 (one failing cell never stops the probe)
        for factor in cell["eval_factors"]:
            for scaling in scalings:
                row(scaling, factor, status="error", message=_why(exc))
        return rows
    for factor in cell["eval_factors"]:
        n = factor * train_len
        for scaling in scalings:
            if SPECS[enc].table_limited and n > train_len:
                row(
                    scaling,
                    factor,
                    status="n/a",
                    **trained,
                    message=f"learned table has {train_len} positions",
                )
                continue
            try:
                evaluated = model
                if scaling != "none":  # the same weights, tables rebuilt under the schedule
                    trained_len = train_len + cfg.bos  # the RoPE positions seen in training
                    evaluated = _model(enc, task, cell, n, _schedule(scaling, factor, trained_len))
                    evaluated.load_state_dict(model.state_dict())
                    evaluated.to(cell["device"])
                got = evaluate(evaluated, task, n, cell["eval_examples"], seed)
                row(scaling, factor, status="ok", message="", **trained, **got)
            except Exception as exc:  # noqa: BLE001
                row(scaling, factor, status="error", message=_why(exc), **trained)
    return rows


def _why(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"[:300]
