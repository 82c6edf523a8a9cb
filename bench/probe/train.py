"""Train one probe cell (encoding x task x seed) and evaluate it at longer lengths.

Everything random comes from generators seeded by (seed, task): the initial weights from
torch.manual_seed(seed), training batches from one generator, each evaluation length's examples
from another, the same for every encoding, so encodings are compared on identical data.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.probe.model import ProbeModel
from bench.probe.tasks import Batch


@dataclass
class TrainConfig:
    steps: int = 1000  # the most steps a cell trains for
    batch: int = 32
    lr: float = 3e-3
    warmup: int = 70
    weight_decay: float = 0.01
    # stop early once the exact-match accuracy at train_len reaches `target` on check_examples
    # held-out sequences, checked every check_every steps (target 0: always train `steps`)
    target: float = 0.95
    check_every: int = 100
    check_examples: int = 64
    d_model: int = 64
    num_heads: int = 4
    layers: int = 3
    shaw_max_relative: int = 32
    bos: bool = True


def _generator(*parts: int) -> torch.Generator:
    seed = 0
    for p in parts:  # a fixed mix, independent of Python's hash randomization
        seed = (seed * 1_000_003 + p) % (2**63 - 1)
    return torch.Generator().manual_seed(seed)


def _on(batch: Batch, model: ProbeModel) -> Batch:
    """The batch on the model's device (tasks generate on the CPU: the same data everywhere)."""
    device = model.head.weight.device
    return Batch(batch.tokens.to(device), batch.targets.to(device), batch.items.to(device))


def loss_of(model: ProbeModel, batch: Batch) -> Tensor:
    logits = model(batch.tokens)  # (B, n, vocab)
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-1)


def train(model: ProbeModel, task, cfg: TrainConfig, seed: int) -> dict:
    """AdamW, linear warmup then cosine decay to 0 at cfg.steps, stopping early at cfg.target
    (checked on sequences no evaluation uses). Returns the last 20 steps' mean loss, the steps
    taken and the check's last accuracy (nan when no check ran)."""
    gen = _generator(seed, task.seed_id, 0)
    # fused: one kernel for all parameters (about 5% of a CPU step here, measured side by side)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True
    )

    def lr_at(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    start, tail, checked, steps = time.perf_counter(), [], math.nan, cfg.steps
    for step in range(cfg.steps):
        loss = loss_of(model, _on(task.sample(gen, cfg.batch, task.train_len, train=True), model))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        sched.step()
        tail = [*tail[-19:], loss.detach()]  # no .item() per step: no device sync
        if cfg.target > 0 and (step + 1) % cfg.check_every == 0 and step + 1 < cfg.steps:
            got = evaluate(model, task, task.train_len, cfg.check_examples, seed, check=True)
            checked = got["accuracy"]
            model.train()
            if checked >= cfg.target:
                steps = step + 1
                break
    return {
        "train_loss": float(sum(tail)) / len(tail),
        "train_s": time.perf_counter() - start,
        "steps": steps,
        "check_accuracy": checked,
    }


@torch.no_grad()
def evaluate(
    model: ProbeModel, task, n: int, examples: int, seed: int, batch: int = 64, check: bool = False
) -> dict:
    """Exact-match accuracy over answers at length n (and per-token accuracy), on `examples`
    sequences drawn from a generator that depends on (seed, task, n) only; check=True draws
    from another one (training's early-stopping check: never the evaluation's sequences)."""
    gen = _generator(seed, task.seed_id, n, *((1,) if check else ()))
    model.eval()
    right = answers = tok_right = toks = 0
    for lo in range(0, examples, batch):
        b = _on(task.sample(gen, min(batch, examples - lo), n, train=False), model)
        pred = model(b.tokens).argmax(-1)  # (B, n)
        asked = b.targets >= 0
        ok = (pred == b.targets) | ~asked
        tok_right += int((ok & asked).sum())
        toks += int(asked.sum())
        # an answer is right when all its positions are: per (row, item), min over positions
        ids = (b.items + 1).clamp(min=0)  # 0: no item
        width = int(ids.max()) + 1
        key = torch.arange(ids.shape[0], device=ids.device).unsqueeze(1) * width + ids
        all_ok = torch.ones(ids.shape[0] * width, dtype=torch.bool, device=ids.device)
        all_ok = all_ok.scatter_reduce(0, key.flatten(), ok.flatten(), "amin")
        has = torch.zeros_like(all_ok).scatter(0, key[asked], True)
        right += int((all_ok & has).sum())
        answers += int(has.sum())
    return {"accuracy": right / answers, "token_accuracy": tok_right / toks, "answers": answers}
