"""The built-in cases, registered (bench.registry.CASES, by name). One file per kind of case;
adding a case is adding it here, or registering it from a plugin; a relative-bias family is
declared in bench/cases/families.py and gets its cases from there."""

from bench.cases.absolute import LEARNABLE, SINUSOIDAL
from bench.cases.attention import ATTENTION_SINUSOIDAL, ROPE_ATTENTION, SHAW_ATTENTION
from bench.cases.bias import ATTENTION as BIAS_ATTENTION
from bench.cases.layer import DECODE as LAYER_DECODE
from bench.cases.layer import PREFILL as LAYER
from bench.cases.mla import MLA
from bench.cases.multimodal import MROPE, ROPE_2D
from bench.cases.relative import RELATIVE_TABLES
from bench.cases.rope import ROPE
from bench.cases.rope_module import ROPE_MODULE
from bench.cases.sequences import DECODE, PACKED
from bench.cases.serving import PAGED_DECODE, ROPE_CACHE
from bench.cases.tables import ROPE_TABLES
from bench.registry import CASES, register_case

for _case in (
    SINUSOIDAL,
    LEARNABLE,
    ROPE,
    ROPE_MODULE,
    MROPE,
    ROPE_2D,
    MLA,
    ROPE_TABLES,
    RELATIVE_TABLES,
    ATTENTION_SINUSOIDAL,
    SHAW_ATTENTION,
    ROPE_ATTENTION,
    *BIAS_ATTENTION,
    *DECODE,
    *PACKED,
    *LAYER,
    *LAYER_DECODE,
    ROPE_CACHE,
    *PAGED_DECODE,
):
    if _case.name not in CASES:  # importing this module twice registers once
        register_case(_case)

__all__ = ["CASES"]
