"""docs/probe.md's prose, as templates of its own words: each figure a placeholder that
tools/figures/probe.py fills from the committed runs (its docstring lists the kinds)."""

from __future__ import annotations

from tools.figures.readme import MODERN, PROBE

P, M = PROBE, MODERN

# (run, the page's words with each figure a placeholder)
PROSE = [
    (P, "With 3 layers NoPE reaches {m:nope/copy/1}."),
    (P, "the committed\nrun took {probe_wall})"),
    (
        P,
        "**What was learned at the training length.** Every encoding learned every task: lookback "
        "{R:*/lookback/1}, recall {R:*/recall/1} (ALiBi the lowest), copy {R:*/copy/1} (NoPE the "
        "lowest)",
    ),
    (
        P,
        "the lowest single seed {lo:alibi/recall/1}, ALiBi on recall). Each cell trained until its "
        "check reached {target} or for 1000 steps: lookback took {S:*/lookback/1} steps, recall "
        "{S:*/recall/1}, copy {S:*/copy/1}",
    ),
    (
        P,
        "Sinusoidal falls to chance on lookback at 2x ({m:sinusoidal/lookback/1} -> "
        "{m:sinusoidal/lookback/2}) and to 0 on copy",
    ),
    (
        P,
        "On lookback ALiBi keeps {m:alibi/lookback/8} to 8x and Shaw {m:shaw/lookback/4} at 4x "
        "({m:shaw/lookback/8} at 8x); T5 falls past 1x ({m:t5/lookback/2} at 2x)",
    ),
    (
        P,
        "On recall Shaw ({m:shaw/recall/8}) and T5 ({m:t5/recall/8}) are the best untuned "
        "encodings at 8x, and ALiBi's distance penalty costs it ({m:alibi/recall/8}).",
    ),
    (
        P,
        "Plain RoPE holds at 2x (lookback {m:rope/lookback/2}) and falls by 8x (lookback "
        "{m:rope/lookback/8}, recall {m:rope/recall/8}). What extends it is a schedule chosen at "
        "evaluation: YaRN keeps lookback at {m:rope+yarn/lookback/8} and recall at "
        "{m:rope+yarn/recall/8} at 8x with no retraining; dynamic NTK helps less "
        "({m:rope+dynamic/lookback/8}, {m:rope+dynamic/recall/8}); linear interpolation helps "
        "recall ({m:rope+linear/recall/8}) and breaks lookback already at 2x "
        "({m:rope+linear/lookback/2})",
    ),
    (
        P,
        "Agrees on the offset task (ALiBi {m:alibi/lookback/8} at 8x, rotary {m:rope/lookback/8}, "
        "sinusoidal {m:sinusoidal/lookback/8}); on recall, which perplexity does not isolate, "
        "ALiBi's recency bias is a cost ({m:alibi/recall/1} -> {m:alibi/recall/8}).",
    ),
    (
        P,
        "Agrees on recall (at 8x NoPE {m:nope/recall/8} and T5 {m:t5/recall/8} against RoPE "
        "{m:rope/recall/8} and ALiBi {m:alibi/recall/8}; Shaw {m:shaw/recall/8}). Disagrees on "
        "lookback, where ALiBi is the one that holds ({m:alibi/lookback/8}) and NoPE "
        "({m:nope/lookback/8}) and T5 ({m:t5/lookback/8}) fall like RoPE ({m:rope/lookback/8})",
    ),
    (
        P,
        "none a 31-symbol string whole at 2x (Shaw {m:shaw/copy/2}). Per token the relative "
        "encodings get further: at 2x Shaw {t:shaw/copy/2}, ALiBi {t:alibi/copy/2}, T5 "
        "{t:t5/copy/2}, NoPE {t:nope/copy/2}, against "
        "{TR:rope,rope+linear,rope+dynamic,rope+yarn/copy/2} for RoPE (any schedule) and "
        "{t:sinusoidal/copy/2} for sinusoidal.",
    ),
]
PROSE += [
    (M, "{modern_run_0}"),
    (M, "{modern_run_1}"),
    (M, "{modern_run_2}"),
    (
        M,
        "recall at 8x {m:fire/recall/8} (among the best; RoPE {m:rope/recall/8}), copy "
        "{m:fire/copy/2} at 2x (second); lookback falls to {m:fire/lookback/8} at 8x",
    ),
    (
        M,
        "lookback {m:kerple/lookback/8} at 8x (as ALiBi), recall {m:kerple/recall/8} (ALiBi "
        "{m:alibi/recall/8}), copy {m:kerple/copy/2} at 2x (the best)",
    ),
    (M, "lookback {m:xpos/lookback/8} at 8x; recall {m:xpos/recall/8} at 8x, no better than RoPE"),
    (
        M,
        "recall {m:cope/recall/8} at 8x (with the randomized table, the best after RoPE under "
        "YaRN, {yarn_recall_8}); lookback {m:cope/lookback/8} at 8x",
    ),
    (
        M,
        "over plain RoPE: lookback {m:rope_randomized/lookback/8} vs {m:rope/lookback/8} and "
        "recall {m:rope_randomized/recall/8} vs {m:rope/recall/8} at 8x; +{random_gain_best} "
        "points on the string tasks (below)",
    ),
    (
        M,
        "recall {m:learnable_randomized/recall/8} at 8x; lookback "
        "{m:learnable_randomized/lookback/8}",
    ),
    (
        M,
        "lookback {m:rope_nope_last/lookback/8} vs RoPE's {m:rope/lookback/8} at 8x (seeds "
        "{r:rope_nope_last/lookback/8}), recall {m:rope_nope_last/recall/8} vs {m:rope/recall/8}",
    ),
    (
        M,
        "the same as `rope_nope_last` within {irope_gap} everywhere (recall {m:irope/recall/8} at "
        "8x, lookback {m:irope/lookback/8})",
    ),
    (
        M,
        "lookback {m:fox/lookback/8} at 8x (as ALiBi and RoPE under YaRN; KERPLE and xPos "
        "{R:kerple,xpos/lookback/8}), duplicate_string {fox_duplicate} past 1x (Ruoss et al.'s "
        "score, best seed: the best), copy {m:fox/copy/2} at 2x; recall not learned at the "
        "training length ({m:fox/recall/1}, seeds {r:fox/recall/1})",
    ),
    (
        M,
        "lookback {m:fox_open/lookback/8} at 8x, recall {m:fox_open/recall/8} at 8x (NoPE "
        "{m:nope/recall/8}, KERPLE {m:kerple/recall/8}), copy {m:fox_open/copy/2} at 2x: the best "
        "of every encoding (KERPLE {m:kerple/copy/2})",
    ),
    (
        M,
        "lookback {m:fox_rope/lookback/8} at 8x; recall {m:fox_rope/recall/1} at 1x, "
        "{m:fox_rope/recall/8} at 8x",
    ),
    (
        M,
        "keeps lookback at {R:alibi,kerple,xpos/lookback/8} to 8x; of those, only KERPLE keeps "
        "recall ({m:kerple/recall/8} at 8x), because its log kernel flattens far away where "
        "ALiBi's line keeps falling ({m:alibi/recall/8})",
    ),
    (
        M,
        "linear interpolation (lookback {linear_lookback_8} at 8x), while recall, which needs "
        "reach not precision, holds ({m:fire/recall/8})",
    ),
    (M, "over {p_rope_positions} positions they turn by at most {p_rope_turn} rad"),
    (
        M,
        "(copy {m:rope_randomized/copy/1} vs {m:rope/copy/1}, odds_first "
        "{m:rope_randomized/odds_first/1} vs {m:rope/odds_first/1})",
    ),
    (M, "multiplies the NoPE layer's queries by {irope_2x} (2x) to {irope_8x} (8x)"),
    (
        M,
        "`rope_nope_last` within {irope_gap}). Llama 4 scales from 8192 tokens on, and its factor "
        "reaches {llama4_1m} at 1M tokens and {llama4_10m} at 10M",
    ),
    (M, "(lookback {m:fox/lookback/8} at 8x, with or without RoPE)"),
    (
        M,
        "(training loss {L:fox/recall/1} against {loss_others} for the others; every FoX "
        "recall cell ran all {S:fox/recall/1} steps)",
    ),
    (
        M,
        "learns recall in {S:fox_open/recall/1} steps ({m:fox_open/recall/1} at 1x, "
        "{m:fox_open/recall/8} at 8x), keeps lookback at {m:fox_open/lookback/8} to 8x, and copies "
        "{p:fox_open/copy/2} of whole strings at 2x, the only encoding near half (KERPLE "
        "{p:kerple/copy/2}, FIRE {p:fire/copy/2})",
    ),
    (
        M,
        "(per token {strings_learned}; odds_first {odds_learned}) and none carries them past it: "
        "{strings_2x} at 2x, {strings_4x} at 4x",
    ),
    (
        M,
        "adds {random_gain_best} points to its best seed on average over the three tasks "
        "({random_gain_mean} on the mean of seeds)",
    ),
    (M, "causal NoPE does as well here ({nope_strings})"),
    (M, "all five within {rank_gap} of the paper's"),
    (
        M,
        "T5 and ALiBi swap places ({rank_t5} and {rank_alibi} against the paper's {paper_t5} and "
        "{paper_alibi})",
    ),
    (M, "On the string tasks alone NoPE leads further ({rank_nope_strings})"),
    (M, "the sinusoidal table last ({rank_sinusoidal}, the paper {paper_sinusoidal})"),
    (
        M,
        "NoPE and RoPE {exact_nope_rope}, T5 and ALiBi {exact_t5_alibi}, sinusoidal "
        "{exact_sinusoidal}",
    ),
    (M, "ALiBi takes the lead: {alibi_4x} at 4x, {alibi_8x} at 8x"),
    (P, "a cell\n  stops once the check reaches `train.target` ({target})"),
    (
        M,
        "so the queries past the trained positions are the ones sharpened: {irope_2x} at 2x, "
        "{irope_8x} at 8x",
    ),
    (M, "f starts at {open_gates}"),
    (M, "(biases 3 to 6, f = {open_gates})"),
    (M, "stopping once whole answers at 32 tokens are {target_pct} right"),
    (M, "lookback, where ALiBi alone stays at {m:alibi/lookback/8}"),
]
