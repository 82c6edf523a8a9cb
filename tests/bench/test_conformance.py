"""Every RoPE model type of the installed transformers, as transformers runs it (bench.conformance):
posenc's rotation of q and k, read from the model's default config.json and variants of it,
gives transformers' attention scores, or posenc refuses the config in one short line; never a
silently different rotation. docs/models.md carries the table this generates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")

from bench import conformance  # noqa: E402

TYPES = conformance.rope_model_types()  # modeling files read as text: no imports at collection
DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
SECTION = re.compile(r"<!-- conformance: begin -->\n(.*?)\n<!-- conformance: end -->", re.S)


def test_the_model_types_are_enumerated_from_transformers():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    assert len(TYPES) > 150 and set(TYPES) <= set(CONFIG_MAPPING_NAMES)
    assert {"llama", "glm", "ernie4_5", "helium", "nanochat", "gptj"} <= set(TYPES)


@pytest.mark.parametrize("model_type", TYPES)
def test_posenc_turns_q_and_k_as_transformers_does_or_says_why_not(model_type):
    conformance.quiet()
    for result in conformance.check(model_type):
        assert result.status in ("reproduced", "refused"), result
        if result.status == "refused":
            assert len(result.detail) <= conformance.MESSAGE_CHARS and "\n" not in result.detail


def test_docs_carry_the_table_and_95_percent_are_reproduced():
    results = conformance.run()
    default = [r for r in results if r.variant == "default"]
    reproduced = sum(r.status == "reproduced" for r in default)
    assert reproduced >= 0.95 * len(default)
    found = SECTION.search(DOC.read_text())
    assert found, "docs/models.md lacks the conformance section"
    assert found.group(1) == conformance.markdown(results), (
        "docs/models.md's conformance table is stale: python -m bench.conformance --markdown"
    )
