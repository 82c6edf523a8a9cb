"""Every project path that a docstring, a comment, a script or a config names exists (the
README's links are tests/test_readme.py's): a file moved or deleted leaves no pointer behind."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a path inside the project: a top-level folder, then names (a `{` or `<` after it: a pattern)
PATH = re.compile(
    r"(?<![\w/.-])((?:bench|posenc|posenc_kernels|tests|tools|docs|configs|results)/[\w/.-]*\w)(?![{<\w])"
)
# where runs write: named in help texts and comments before they exist
OUTPUTS = {"runs", "reports", "multirun", "probe", "regress", "repeat", "gpu", "gpu-run"}


def _sources() -> list[Path]:
    files = [ROOT / "Makefile", ROOT / ".ci" / "run"]
    for folder in ("bench", "posenc", "posenc_kernels", "tests", "tools", "configs"):
        files += [
            p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh", ".yaml", ".md")
        ]
    return files


def _missing(text: str) -> list[str]:
    out = []
    for match in PATH.finditer(text):
        if re.match(r"[-.]?[{<]", text[match.end() : match.end() + 2]):
            continue  # a pattern: results/gpu-compile/triton-{version}.csv
        path = match.group(1).rstrip(".")
        parts = path.split("/")
        if parts[0] == "results" and (len(parts) == 1 or parts[1] in OUTPUTS):
            continue
        if not (ROOT / path).exists():
            out.append(path)
    return out


def test_every_named_path_exists():
    missing = {}
    for f in _sources():
        if f.name == Path(__file__).name:
            continue
        for path in _missing(f.read_text()):
            missing.setdefault(path, []).append(str(f.relative_to(ROOT)))
    assert not missing, missing


def test_a_stale_path_is_found():
    assert _missing("see bench/check.py and bench/run/check.py; results/runs/x") == [
        "bench/check.py"
    ]
    assert _missing("results/gpu-compile/triton-{version}.csv") == []
