"""Every declared case, by name. One file per family; adding a case is adding it here."""

from bench.cases.absolute import LEARNABLE, SINUSOIDAL
from bench.cases.attention import ATTENTION_SINUSOIDAL, ROPE_ATTENTION, SHAW_ATTENTION
from bench.cases.bias import (
    ALIBI_ATTENTION,
    SHAW_BIAS_ATTENTION,
    SHAW_KV_ATTENTION,
    T5_ATTENTION,
)
from bench.cases.relative import RELATIVE_TABLES
from bench.cases.rope import ROPE, ROPE_MODULE
from bench.cases.tables import ROPE_TABLES

CASES = {
    case.name: case
    for case in (
        SINUSOIDAL,
        LEARNABLE,
        ROPE,
        ROPE_MODULE,
        ROPE_TABLES,
        RELATIVE_TABLES,
        ATTENTION_SINUSOIDAL,
        SHAW_ATTENTION,
        ROPE_ATTENTION,
        ALIBI_ATTENTION,
        T5_ATTENTION,
        SHAW_BIAS_ATTENTION,
        SHAW_KV_ATTENTION,
    )
}
