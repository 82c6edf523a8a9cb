"""FlexAttention as the bias cases call it: torch.compile(flex_attention) with the family's
score_mod (reading its table) and, when causal, a block mask built once; beside it, where the
family's table is learned, the same with the table frozen (`flex_frozen`: requires_grad=False,
the gradient reaches q, k and v only). The two are apart because their backward passes differ:
Flex sums a learned table's gradient over every score (atomically, per element), a cost the
fused kernel does not pay the same way; a model whose table does not train pays neither.
"""

from __future__ import annotations

from torch import nn

from bench.cases._common import compile_impl, gqa
from bench.cases._window import flex_mask
from bench.cases.families import BiasFamily
from bench.registry import Call, Impl


def frozen(inputs) -> dict:
    """The inputs with the learned tables detached: a model whose table does not train."""
    params = inputs.get("params", {}).items()
    return dict(
        inputs, params={n: nn.Parameter(p.detach(), requires_grad=False) for n, p in params}
    )


def flex_attention_of(family: BiasFamily, freeze: bool = False):
    """inputs -> (q, k, v) -> out: the family's bias as a score_mod, the causal (or windowed)
    mask as a block mask, both built once; its table frozen with freeze."""

    def attention(inputs):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        inputs = frozen(inputs) if freeze else inputs
        q, k = inputs["q"], inputs["k"]
        block_mask = None
        if inputs["causal"]:  # with a window, its sliding-window mask: blocks outside skipped
            seen = flex_mask(inputs.get("window"))
            n, m = q.shape[2], k.shape[2]
            block_mask = create_block_mask(seen, None, None, n, m, device=q.device)
        fn = compile_impl(flex_attention)
        score_mod, grouped = family.score_mod(inputs), gqa(inputs)
        return lambda q, k, v: fn(
            q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=grouped
        )

    return attention


def flex_impls(family: BiasFamily, on_qkv, truth, supports) -> dict:
    """{"flex": Impl} and, for a learned table, {"flex_frozen": Impl} gated against the truth
    with the table frozen (its own semantics)."""
    learned = ", its table learned (its gradient summed by Flex)" if family.trains else ""
    impls = {
        "flex": Impl(
            on_qkv(flex_attention_of(family)),
            compiled=True,
            note="torch.compile(flex_attention)" + learned,
            supports=supports,
        )
    }
    if not family.trains:
        return impls

    def make(inputs):  # the gradients of q, k and v alone
        fn = on_qkv(flex_attention_of(family, freeze=True))(inputs)
        return Call(fn, leaves={n: inputs[n] for n in "qkv"})

    impls["flex_frozen"] = Impl(
        make,
        reference=lambda inputs: truth(frozen(inputs)),
        compiled=True,
        note="torch.compile(flex_attention), its table frozen (requires_grad=False)",
        supports=supports,
    )
    return impls
