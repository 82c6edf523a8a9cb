"""Acceptance trials of the CPU timing gate (docs/regress.md): real regressions committed on top
of HEAD in a throwaway clone, each judged by both modes of the gate, N times.

    python tools/regress_trials.py [--trials 10] [--conditions ...] [--modes ab,stored]

Conditions (each a commit on top of HEAD in the clone; the A/B base is the commit before it):
  unchanged       an empty commit                                            (target: exit 0)
  unchanged-busy  the same, beside a busy loop                               (target: exit 0)
  rope15, rope30  posenc.functional.apply_rope also rotates the first 15% / 30% of its rows
                  again (the forward's eager engine; half of rope30's trials beside a busy loop)
  attention30     posenc's relative_attention (ALiBi and T5) also multiplies the gradient of its
                  logits by v twice in its backward: about 30% more work there
The stored mode judges against the clone's results/baselines/cpu.json (make regress-update on
this machine first). One line per trial goes to stdout; a markdown table of alarms ends it.
Run it on an otherwise idle machine: it takes about 2.5 hours for 10 trials of everything.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROPE_AT = (
    "    rotate_into(x[..., start:], cos, sin.reshape(cos.shape), out[..., start:], interleaved)\n"
)
ROPE_EXTRA = (
    "    n = x.shape[-2] * {pct} // 100  # planted regression (tools/regress_trials.py)\n"
    "    part = x[..., :n, start:]\n"
    "    rotate_into(part, cos[..., :n, :], sin.reshape(cos.shape)[..., :n, :],"
    " torch.empty_like(part), interleaved)\n"
)
ATTN_AT = "    logits = torch.matmul(q, k.transpose(-2, -1)) * scale + bias.to(q.dtype)\n"
ATTN_EXTRA = (
    "    if logits.requires_grad:  # planted regression (tools/regress_trials.py)\n"
    "        logits.register_hook(lambda g: [torch.matmul(g, v) for _ in range(2)] and g)\n"
)
PLANTS = {  # condition -> (file, a line of it, that line with the planted work around it)
    "rope15": ("posenc/functional.py", ROPE_AT, ROPE_EXTRA.format(pct=15) + ROPE_AT),
    "rope30": ("posenc/functional.py", ROPE_AT, ROPE_EXTRA.format(pct=30) + ROPE_AT),
    "attention30": ("posenc/_bias.py", ATTN_AT, ATTN_AT + ATTN_EXTRA),
}
CONDITIONS = ("unchanged", "unchanged-busy", "rope15", "rope30", "attention30")
WATCH = {"attention30": "alibi_attention-forward+backward"}  # the row shown; else rope-forward


def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=trials", "-c", "user.email=trials@localhost"]
    return subprocess.run([*cmd, *args], check=True, capture_output=True, text=True).stdout


def plant(repo: Path, condition: str) -> None:
    """Commits the condition's change on top of the clone's HEAD (an empty commit if none)."""
    git(repo, "checkout", "-q", "--detach", "trials-base")
    if condition in PLANTS:
        file, anchor, planted = PLANTS[condition]
        path = repo / file
        text = path.read_text()
        if text.count(anchor) != 1:
            sys.exit(f"{file}: the line to plant at is gone or repeated: {anchor.strip()}")
        path.write_text(text.replace(anchor, planted))
        git(repo, "commit", "-q", "-am", f"planted: {condition}")
    else:
        git(repo, "commit", "-q", "--allow-empty", "-m", f"planted: {condition} (nothing)")


def gate(repo: Path, mode: str, out: Path) -> tuple[int, str]:
    which = (
        ["--base-ref", "HEAD~1"] if mode == "ab" else ["--baseline", "results/baselines/cpu.json"]
    )
    cmd = [sys.executable, "-m", "bench.regress", *which, "--confirm", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def largest_change(text: str, mode: str) -> str:
    """The first table's largest |change| of any case-mode: the noise beside the planted work."""
    col = 3 if mode == "ab" else 4
    seen, largest = set(), 0.0
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[col].endswith("%") and cells[0] not in seen:
            seen.add(cells[0])
            largest = max(largest, abs(float(cells[col].rstrip("%"))))
    return f"{largest:.1f}%"


def change_of(text: str, row: str, mode: str) -> str:
    """The first table's change for row: A/B's change column, the stored mode's normalized one."""
    for line in text.splitlines():
        if line.startswith(f"| {row} |"):
            return [c.strip() for c in line.strip("|").split("|")][3 if mode == "ab" else 4]
    return "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--modes", default="ab,stored")
    args = p.parse_args()
    conditions, modes = args.conditions.split(","), args.modes.split(",")
    unknown = [c for c in conditions if c not in CONDITIONS] + [
        m for m in modes if m not in ("ab", "stored")
    ]
    if unknown:
        p.error(f"unknown condition or mode: {', '.join(unknown)}")
    here = Path(__file__).resolve().parents[1]
    tally = {}
    with tempfile.TemporaryDirectory(prefix="regress-trials-") as tmp:
        repo = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(here), str(repo)], check=True)
        git(repo, "branch", "trials-base", "HEAD")
        print(f"clone of {git(repo, 'rev-parse', '--short', 'HEAD').strip()} at {repo}", flush=True)
        for condition in conditions:
            plant(repo, condition)
            for mode in modes:
                alarms, changes = 0, []
                for trial in range(1, args.trials + 1):
                    busy = condition.endswith("-busy") or (condition == "rope30" and trial % 2 == 0)
                    hog = (
                        subprocess.Popen([sys.executable, "-c", "while True: pass"])
                        if busy
                        else None
                    )
                    try:
                        code, text = gate(repo, mode, Path(tmp) / "out")
                    finally:
                        if hog:
                            hog.kill()
                            hog.wait()
                    alarms += code == 1
                    found = re.search(r"verdict: (.*)", text)
                    verdict = found.group(1) if found else text.strip()[-200:]
                    row = WATCH.get(condition, "rope-forward")
                    changes.append(change_of(text, row, mode))
                    widest = largest_change(text, mode)
                    print(
                        f"{condition} {mode} {trial}{' busy' if busy else ''}: exit {code}; "
                        f"{row} {changes[-1]}, largest |change| {widest}; {verdict}",
                        flush=True,
                    )
                    if code == 2:
                        print(text, flush=True)
                tally[condition, mode] = (alarms, changes)
    print("\n| condition | mode | exit 1 | change of the watched row (first pass) |")
    print("|---|---|---|---|")
    for (condition, mode), (alarms, changes) in tally.items():
        print(f"| {condition} | {mode} | {alarms} of {len(changes)} | {' '.join(changes)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
