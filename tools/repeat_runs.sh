#!/usr/bin/env bash
# Run-to-run repeatability of one sweep: N back-to-back runs of `python -m bench` with the
# given overrides, then `python -m bench.report --compare` over them (repeatability.md: every
# pair's drift of the medians, of the speedups and of the time vs the copy). docs/repeatability.md
# quotes the sets it measured.
# Usage: tools/repeat_runs.sh [N] [OVERRIDE ...]; OUT=dir (default: a new results/repeat/<time>)
set -eu
N=${1:-6}
shift || true
case $N in ''|*[!0-9]*) echo "repeat_runs.sh: N must be a positive integer, got '$N'" >&2; exit 2 ;; esac
[ "$N" -ge 2 ] || { echo "repeat_runs.sh: N must be at least 2 to compare runs, got $N" >&2; exit 2; }
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/repeat/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
runs=()
for i in $(seq "$N"); do
    echo "run $i of $N -> $OUT/run$i" >&2
    $PY -m bench "$@" hydra.run.dir="$OUT/run$i" > "$OUT/run$i.log" 2>&1 || {
        echo "repeat_runs.sh: run $i failed; see $OUT/run$i.log" >&2; exit 1; }
    runs+=("$OUT/run$i")
done
$PY -m bench.report --compare "${runs[@]}" --out "$OUT"
