#!/usr/bin/env bash
# Acceptance trials of the CPU timing gate (docs/regress.md): N comparisons against the committed
# baseline for each condition, counting alarms (exit 1 of bench.regress, with --confirm).
#   unchanged : the tree as it is                       (target: 0 alarms)
#   slowdown  : --perf-slowdown=sinusoidal (25% more work) (target: N alarms)
#   loaded    : a busy loop on one core during the run  (target: 0 alarms)
# Usage: tools/regress_trials.sh [N] > trials.log
set -u
N=${1:-10}
PY=${PY:-.venv/bin/python}
BASE=${BASE:-results/baselines/cpu.json}
OUT=$(mktemp -d)  # each trial's suite and gate output, kept (its path is printed at the end)
# the suite the gate runs (Makefile: PERF_SUITE); a suite that fails stops the trials, its log shown
suite() {
    if ! $PY -m pytest bench/regress/suite.py --benchmark-only -q --benchmark-save-data \
            --benchmark-json="$OUT/cur.json" "$@" > "$OUT/suite.log" 2>&1; then
        echo "the timing suite failed (log: $OUT/suite.log):" >&2
        tail -20 "$OUT/suite.log" >&2
        exit 2
    fi
}
gate() { $PY -m bench.regress --baseline "$BASE" --current "$OUT/cur.json" --confirm --default-threshold "${THRESHOLD:-0.15}" "$@" > "$OUT/gate.txt" 2>&1; echo $?; }
for condition in ${CONDITIONS:-unchanged slowdown loaded}; do
    alarms=0
    for i in $(seq "$N"); do
        case $condition in
            unchanged) suite; rc=$(gate) ;;
            slowdown)  suite --perf-slowdown=sinusoidal
                       rc=$(gate --suite-arg=--perf-slowdown=sinusoidal) ;;
            loaded)    ( while :; do :; done ) & hog=$!
                       suite; kill "$hog"; wait "$hog" 2>/dev/null; rc=$(gate) ;;
        esac
        [ "$rc" = 1 ] && alarms=$((alarms + 1))
        flagged=$(grep -c '| regression |' "$OUT/gate.txt")
        # columns of the first table: raw change ($5), normalized change ($6)
        spread=$(awk -F'|' '/^\| [a-z0-9_]+-/ && !seen[$2]++ {gsub(/[ %+]/, "", $5); gsub(/[ %+]/, "", $6);
                 r = ($5 < 0 ? -$5 : $5); n = ($6 < 0 ? -$6 : $6); if (r > mr) mr = r; if (n > mn) mn = n}
                 END {printf "max |raw change| %.1f%%, max |normalized change| %.1f%%", mr, mn}' "$OUT/gate.txt")
        echo "$condition $i rc=$rc $flagged rows flagged; $spread"
    done
    echo "== $condition: $alarms of $N comparisons raised an alarm"
done
echo "logs of the last trial: $OUT"
