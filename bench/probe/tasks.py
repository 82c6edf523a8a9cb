"""The probe's synthetic tasks, generated on the fly from a torch.Generator (no data files).

A batch is (tokens (B, n), targets (B, n), items (B, n)), all int64. targets[b, t] is the token
the model must predict at position t (causal next-token style: from tokens[b, :t + 1]), -1
where nothing is asked. items[b, t] numbers the answer position t belongs to (-1: none); an
answer is right only when every one of its positions is (exact match, teacher-forced: the
same as greedy decoding giving the whole answer). Accuracy = right answers / answers.

Each task needs position in its own way:
  lookback  relative position only: copy the token k steps back.
  recall    content over distance: find the key, read the value stored after it.
  copy      order and counting: write again the string before the separator (reverse:
            backwards; not in the default tasks).
  reverse_string, duplicate_string, odds_first
            Ruoss et al. 2023's binary string tasks in their non-autoregressive format, scored
            per token as they score them (probe=modern).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Batch:
    tokens: Tensor  # (B, n)
    targets: Tensor  # (B, n), -1: no target
    items: Tensor  # (B, n), answer id per target position, -1: none


def _batch(tokens: Tensor, targets: Tensor, items: Tensor) -> Batch:
    return Batch(tokens, targets, items.masked_fill(targets < 0, -1))


def _string_lengths(
    gen: torch.Generator, batch: int, longest: int, train: bool, too_short: str
) -> Tensor:
    """(B, 1) string lengths: training draws one per row from 1 .. longest (every step sees
    every length), evaluation uses the longest. too_short: the error when none fits."""
    if longest < 1:
        raise ValueError(too_short)
    if train:
        return torch.randint(1, longest + 1, (batch, 1), generator=gen)
    return torch.full((batch, 1), longest)


class Lookback:
    """lookback: tokens x_0 .. x_{n-1} uniform over `vocab` symbols; the target at position t
    is x_{t-k} for t >= k. Scored answers: the last train_len - k positions (at n = train_len,
    all of them; at 8x, positions 7 train_len + k .. 8 train_len - 1, all past the training
    length). One answer per position. Chance: 1 / vocab.

    Needs relative position only (the offset k is fixed), so an encoding that represents
    j - i should carry it to any length; the tutorial's 1.1: without positions attention cannot
    tell x_{t-k} from any other token. k = 1 by default: with k = 3, in 700 steps (2 layers), NoPE
    reached 0.38 and ALiBi 0.80 at the training length (k = 1: 0.96 and 1.00, one seed)."""

    name = "lookback"
    seed_id = 1  # mixed into its generators' seeds: distinct per task, never reused
    metric = "accuracy"  # the column its tables report

    def __init__(self, train_len: int, max_len: int, vocab: int = 16, k: int = 1):
        self.train_len, self.vocab_size, self.k = train_len, vocab, k
        self.chance = 1.0 / vocab

    def sample(self, gen: torch.Generator, batch: int, n: int, *, train: bool) -> Batch:
        x = torch.randint(self.vocab_size, (batch, n), generator=gen)
        targets = torch.full_like(x, -1)
        targets[:, self.k :] = x[:, : n - self.k]
        first = self.k if train else max(self.k, n - self.train_len + self.k)
        targets[:, :first] = -1
        items = torch.arange(n).expand(batch, n).clone()
        return _batch(x, targets, items)


class Recall:
    """recall (associative recall over distance): `pairs` facts, each one token standing for a
    (key, value) pair (keys distinct, from `keys` symbols; values from `values` symbols), at
    random places among filler tokens (`fillers` symbols), then `queries` key tokens drawn
    from the facts; the target at a query is its key's value. One answer per query. Pairs and
    queries are as many at every length: a longer sequence only puts the facts farther from
    the queries, among more filler. Chance: 1 / values.

    Needs content matching at any distance and nothing else: the key and its value share a
    token, so the lookup is one attention hop (a two-token pair needs an induction circuit,
    which the 2-layer model did not form in 800 steps). What it probes is whether the encoding lets
    attention reach, and single out, a token however far away. Vocabulary: keys x values
    pair tokens, then keys query tokens, then the fillers."""

    name = "recall"
    seed_id = 2
    metric = "accuracy"  # the column its tables report

    def __init__(
        self,
        train_len: int,
        max_len: int,
        pairs: int = 6,
        queries: int = 4,
        keys: int = 16,
        values: int = 16,
        fillers: int = 8,
    ):
        if pairs + queries > train_len or pairs > keys:
            raise ValueError(
                f"recall: {pairs} pairs and {queries} queries do not fit in "
                f"train_len={train_len} with {keys} keys"
            )
        self.train_len, self.pairs, self.queries = train_len, pairs, queries
        self.keys, self.values, self.fillers = keys, values, fillers
        self.vocab_size, self.chance = keys * values + keys + fillers, 1.0 / values

    def sample(self, gen: torch.Generator, batch: int, n: int, *, train: bool) -> Batch:
        m, q, kv = self.pairs, self.queries, self.keys * self.values
        keys = torch.rand(batch, self.keys, generator=gen).argsort(dim=1)[:, :m]  # distinct
        vals = torch.randint(self.values, (batch, m), generator=gen)
        tokens = kv + self.keys + torch.randint(self.fillers, (batch, n), generator=gen)
        where = torch.rand(batch, n - q, generator=gen).argsort(dim=1)[:, :m]  # distinct places
        tokens.scatter_(1, where, keys * self.values + vals)  # the pair tokens
        pick = torch.randint(m, (batch, q), generator=gen)
        tokens[:, n - q :] = kv + keys.gather(1, pick)  # the query tokens
        targets = torch.full_like(tokens, -1)
        targets[:, n - q :] = vals.gather(1, pick)  # a value v is predicted as token id v
        return _batch(tokens, targets, torch.arange(n).expand(batch, n).clone())


class Copy:
    """copy: s_1 .. s_l (uniform over `vocab` symbols), a separator, then s_1 .. s_l again; the
    targets are the copy (predicted from the separator on), one answer: the whole string.
    Training draws l uniformly from 1 .. (n - 1) // 2 for every row and fills the rest of the
    row with unscored symbols (a causal model never sees them while answering); evaluation uses
    l = (n - 1) // 2 in every row. Chance: vocab^-l.

    Needs order and counting: every output copies the token l + 1 places back, an offset the
    model must take from where the separator is (a token-matching shortcut fails on repeated
    symbols). One length per row rather than per batch: every step sees every length, which
    took rope's exact copy from 0.69 to 0.80 in 700 steps (one seed, 2 layers, no BOS)."""

    name = "copy"
    seed_id = 4
    metric = "accuracy"  # the column its tables report

    def __init__(self, train_len: int, max_len: int, vocab: int = 16):
        self.train_len, self.vocab_size, self.sep = train_len, vocab + 1, vocab
        self.chance = 0.0

    def _source(self, i: Tensor, ell: Tensor) -> Tensor:
        """The string position (0-based) the i-th output copies."""
        return i

    def sample(self, gen: torch.Generator, batch: int, n: int, *, train: bool) -> Batch:
        ell = _string_lengths(gen, batch, (n - 1) // 2, train, f"{self.name} needs n >= 3, got {n}")
        tokens = torch.randint(self.sep, (batch, n), generator=gen)  # the string and the fill
        t = torch.arange(n).expand(batch, n)
        answer = (t > ell) & (t <= 2 * ell)  # where the copy is written
        src = self._source((t - ell - 1).clamp(min=0), ell).clamp(max=n - 1)
        tokens = torch.where(answer, tokens.gather(1, src), tokens)
        tokens = tokens.scatter(1, ell, self.sep)
        # position t predicts tokens[t + 1]: the targets run from the separator to 2 l - 1
        targets = torch.where((t >= ell) & (t < 2 * ell), tokens.roll(-1, dims=1), -1)
        return _batch(tokens, targets, torch.zeros_like(tokens))


class Reverse(Copy):
    """reverse: as copy, the string written backwards: the i-th output copies the token
    2 i - 1 places back, an offset that changes with every step. Not in the default tasks;
    in the default budget every encoding learned it at the training length (0.94-1.00, seed
    0) and none past it (0.00 at 2x)."""

    name = "reverse"
    seed_id = 3

    def _source(self, i: Tensor, ell: Tensor) -> Tensor:
        return (ell - 1 - i).clamp(min=0)


class StringTask:
    """Ruoss et al. 2023's string tasks (after Delétang et al. 2023, "Neural Networks and the
    Chomsky Hierarchy"), in their setup: a binary string s_0 .. s_{l-1}, then as many blank
    tokens as the answer has symbols; the model writes the answer at the blanks all at once
    (nothing it writes is fed back: the non-autoregressive encoder setup of their Table 1).
    Here the attention is causal (the probe's model), so the answer's m-th symbol is read
    at the m-th blank from everything before it. One answer per example (accuracy: the whole
    answer right); the papers' score is the per-token accuracy (token_accuracy, chance 0.5).
    Training draws l uniformly from 1 .. the longest that fits per row (their "uniform
    curriculum" over 1 .. N), filling the rest of the row with unscored symbols; evaluation
    uses the longest string that fits. Subclasses give the answer's length (`out` symbols per
    input symbol) and the input symbol each answer symbol copies (`_source`)."""

    name, out, metric = "", 1, "token_accuracy"

    def __init__(self, train_len: int, max_len: int, vocab: int = 2):
        self.train_len, self.symbols, self.blank = train_len, vocab, vocab
        self.vocab_size, self.chance = vocab + 1, 1.0 / vocab  # of the metric: per token

    def _source(self, m: Tensor, ell: Tensor) -> Tensor:
        raise NotImplementedError

    def sample(self, gen: torch.Generator, batch: int, n: int, *, train: bool) -> Batch:
        need = f"{self.name} needs n >= {1 + self.out}, got {n}"
        ell = _string_lengths(gen, batch, n // (1 + self.out), train, need)
        tokens = torch.randint(self.symbols, (batch, n), generator=gen)  # string and fill
        t = torch.arange(n).expand(batch, n)
        answer = (t >= ell) & (t < (1 + self.out) * ell)  # the blanks
        src = self._source((t - ell).clamp(min=0), ell).clamp(max=n - 1)
        targets = torch.where(answer, tokens.gather(1, src), -1)
        tokens = torch.where(answer, self.blank, tokens)
        return _batch(tokens, targets, torch.zeros_like(tokens))


class ReverseString(StringTask):
    """reverse_string: s_{l-1} .. s_0."""

    name = "reverse_string"
    seed_id = 5

    def _source(self, m: Tensor, ell: Tensor) -> Tensor:
        return (ell - 1 - m).clamp(min=0)


class DuplicateString(StringTask):
    """duplicate_string: s_0 .. s_{l-1} s_0 .. s_{l-1} (2 l blanks)."""

    name, out = "duplicate_string", 2
    seed_id = 6

    def _source(self, m: Tensor, ell: Tensor) -> Tensor:
        return m % ell


class OddsFirst(StringTask):
    """odds_first: the symbols at odd indices, then those at even ones (0-based), as the
    authors' code writes it (s[1::2] then s[::2]; its docstring's example shows the halves the
    other way round, the same task up to which half comes first)."""

    name = "odds_first"
    seed_id = 7

    def _source(self, m: Tensor, ell: Tensor) -> Tensor:
        odd = ell // 2  # how many odd indices
        return torch.where(m < odd, 2 * m + 1, 2 * (m - odd))


TASKS = {
    t.name: t for t in (Lookback, Recall, Copy, Reverse, ReverseString, DuplicateString, OddsFirst)
}


def make_task(name: str, train_len: int, max_len: int, **kwargs):
    """The task `name` trained at train_len and evaluated up to max_len tokens."""
    if name not in TASKS:
        raise ValueError(f"tasks: unknown task {name!r}; tasks: {', '.join(TASKS)}")
    return TASKS[name](train_len, max_len, **kwargs)
