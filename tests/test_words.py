"""Every tracked text speaks of the product and its users: no words about how it was made
(where it was built, on whose machines, for how long), no tracker numbers of ours. The list is
short on purpose; each word is matched as a word, in any case. The words are spelled in pieces
here, so that this file passes its own test and a plain grep."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]
WORDS = [
    r"work" + r"place",
    r"\b" + "le" + r"nt\b",
    r"this " + r"session",
    r"earlier " + r"session",
    r"give" + r"_back",
    r"\b" + "lea" + r"se\b",
    r"\bissues? #?\d+",
]
PATTERN = re.compile("|".join(WORDS), re.IGNORECASE)


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    return [ROOT / p for p in out.splitlines()]


def test_no_tracked_text_speaks_of_how_it_was_made():
    found = []
    for path in _tracked():
        if path.suffix in (".png", ".tgz", ".gz") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if m := PATTERN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r} in {line.strip()[:80]}")
    assert not found, "\n".join(found[:20])


def test_the_pattern_finds_what_it_names():
    for text in (
        "a le" + "nt GPU",
        "this work" + "place's tool",
        "(iss" + "ue 6)",
        "this Ses" + "sion",
    ):
        assert PATTERN.search(text), text
    for text in ("silently", "the release", "excellent", "a pytest session"):
        assert not PATTERN.search(text), text
