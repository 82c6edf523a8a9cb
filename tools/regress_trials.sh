#!/usr/bin/env bash
# Acceptance trials of the CPU timing gate (issue 6): N comparisons against the committed
# baseline for each condition, counting alarms (exit 1 of bench.regress, with --confirm).
#   unchanged : the tree as it is                       (target: 0 alarms)
#   slowdown  : --perf-slowdown=sinusoidal (25% more work) (target: N alarms)
#   loaded    : a busy loop on one core during the run  (target: 0 alarms)
# Usage: tools/regress_trials.sh [N] > trials.log
set -u
N=${1:-10}
PY=${PY:-.venv/bin/python}
BASE=${BASE:-results/baselines/cpu.json}
OUT=$(mktemp -d)
suite() { $PY -m pytest tests/perf/perf_suite.py --benchmark-only -q --benchmark-save-data \
          --benchmark-json="$OUT/cur.json" "$@" > /dev/null 2>&1; }
gate() { $PY -m bench.regress --baseline "$BASE" --current "$OUT/cur.json" --confirm "$@" > "$OUT/gate.txt" 2>&1; echo $?; }
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
        echo "$condition $i rc=$rc $(grep -c '| regression |' "$OUT/gate.txt") rows flagged"
    done
    echo "== $condition: $alarms of $N comparisons raised an alarm"
done
rm -rf "$OUT"
