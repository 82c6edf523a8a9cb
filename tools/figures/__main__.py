"""python -m tools.figures [--check | --record-tests] (tools/figures/__init__.py)."""

from __future__ import annotations

import argparse
import os
import sys

import torch

# The host audit (docs/kernels.md's host table) launches the kernels: on a CPU, interpreted.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tools.figures import PAGES, ROOT, loose, misquoted, record  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.figures", description="the pages' figures from their rows"
    )
    parser.add_argument(
        "--check", action="store_true", help="list what the pages misquote or hold loose"
    )
    parser.add_argument("--record-tests", action="store_true", help="record the last make test")
    args = parser.parse_args(argv)
    if args.record_tests:
        message = record.record_tests()
        print(message)
        return 0 if message.startswith("recorded") else 1
    wrong = 0
    for page, figures in PAGES.items():
        text = (ROOT / page).read_text()
        bad = misquoted(text, page)
        wrong += len(bad)
        for name, figure in figures.items():
            if not args.check or name in bad:
                print(f"--- {page}: {name}{' (not quoted as written)' if name in bad else ''}")
                print(figure())
        stray = loose(text, page) if args.check else []
        wrong += len(stray)
        if stray:
            print(f"--- {page}: {', '.join(stray)} (no figure writes them)")
    return 1 if args.check and wrong else 0


if __name__ == "__main__":
    sys.exit(main())
