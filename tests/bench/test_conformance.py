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


def test_each_type_is_turned_as_transformers_does_or_refused_and_the_docs_carry_the_table():
    """Every type's default config and variants (one pass: about 50 s), each reproduced or
    refused in one short line, the failures listed; then docs/models.md's table is this run's."""
    results = conformance.run(TYPES)
    bad = [r for r in results if r.status not in ("reproduced", "refused")]
    bad += [
        r
        for r in results
        if r.status == "refused" and (len(r.detail) > conformance.MESSAGE_CHARS or "\n" in r.detail)
    ]
    assert not bad, f"{len(bad)} results:\n" + "\n".join(map(str, bad[:20]))
    default = [r for r in results if r.variant == "default"]
    reproduced = sum(r.status == "reproduced" for r in default)
    assert reproduced >= 0.95 * len(default)
    found = SECTION.search(DOC.read_text())
    assert found, "docs/models.md lacks the conformance section"
    assert found.group(1) == conformance.markdown(results), (
        "docs/models.md's conformance table is stale: python -m bench.conformance --markdown"
    )
