#!/usr/bin/env bash
# The whole GPU visit in one call (docs/gpu.md says how to call it through the device tool).
#
#   tools/gpu_run.sh            on a CUDA box: about 8 minutes, every part below
#   tools/gpu_run.sh --smoke    on a CPU, under Triton's interpreter, at tiny sizes (CI runs it)
#
# Parts, in order of value, each under its own time limit and all under BUDGET_S (default 520 s):
#   env       nvidia-smi, torch / triton / CUDA versions, the carried wheels installed
#   tests     the kernel tests on the GPU (pytest, JUnit XML)
#   sweep     python -m bench sweep=gpu: RoPE and relative-bias attention against their peers
#   cpu_cuda  python -m bench sweep=cpu_vs_cuda
#   profile   one RoPE and one attention point under torch.profiler
#   audit     .audit/audit.py (a copy of the shared independent audit), when carried
#   tiles     python -m bench sweep=gpu_tiles (tile tuning data), only with the time left
# After every part, everything measured so far is packed into $OUT/results.tgz (replaced
# atomically) next to $OUT/gpu_run.log, so a call cut short still returns what it measured.
# Each part's exit status is in status.txt inside the archive; the script exits 0 unless it
# could not start.
set -u
SMOKE=0
case "${1:-}" in
    --smoke) SMOKE=1 ;;
    "") ;;
    *) echo "gpu_run.sh: unknown argument '$1' (expected --smoke or nothing)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu-run/$(date +%Y%m%d-%H%M%S)}
BUDGET_S=${BUDGET_S:-520}
PY=${PY:-python3}
START=$(date +%s)
WORK=$(mktemp -d)
RES=$WORK/gpu  # what the archive holds
mkdir -p "$OUT" "$RES"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/gpu_run.log
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "$SMOKE" = 1 ]; then
    export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
    DEVICE=cpu
else
    DEVICE=cuda
fi

left() { echo $((BUDGET_S - ($(date +%s) - START))); }

pack() {  # the archive is replaced, never half-written
    tar -czf "$OUT/results.tgz.tmp" -C "$WORK" gpu && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"
}

# part NAME LIMIT_S MIN_S CMD...: runs CMD with at most min(LIMIT_S, time left - 10 s); skipped
# when less than MIN_S would be left for it.
part() {
    local name=$1 limit=$2 min=$3
    shift 3
    local avail=$(($(left) - 10))
    [ "$avail" -lt "$limit" ] && limit=$avail
    if [ "$limit" -lt "$min" ]; then
        echo "== $name: skipped, ${avail}s left" | tee -a "$RES/status.txt"
        return
    fi
    echo "== $name (limit ${limit}s, $(($(date +%s) - START))s into the run)"
    local t0=$(date +%s) rc
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - t0))s" | tee -a "$RES/status.txt"
    pack
}

env_part() {
    nvidia-smi || echo "nvidia-smi: not available"
    if ls .whl/*.whl >/dev/null 2>&1; then  # hydra-core, omegaconf, antlr4, liger-kernel
        # pure-Python wheels: unpacking one into a folder on the path installs it (no pip needed)
        for wheel in .whl/*.whl; do $PY -m zipfile -e "$wheel" "$WORK/site"; done
        export PYTHONPATH=$WORK/site:$PYTHONPATH
        ls .whl
    fi
    $PY - <<'EOF' | tee "$RES/versions.txt"
import importlib, platform, torch, triton
print("python", platform.python_version(), "torch", torch.__version__, "triton", triton.__version__,
      "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
for name in ("hydra", "omegaconf", "liger_kernel", "pandas", "matplotlib", "xdist"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "present"))
    except ImportError as exc:
        print(name, "MISSING", exc)
EOF
}

echo "gpu_run.sh: smoke=$SMOKE out=$OUT budget=${BUDGET_S}s python=$PY"
env_part  # not under `part`: it exports PYTHONPATH for the parts that follow
echo "env: done" >> "$RES/status.txt"
pack

# Smoke: tiny points (smoke=true), one length and causality, no torch.compile (minutes on a CPU)
# and a few cases where the sizes alone would not make it quick.
SMALL=()
PICK=()
if [ "$SMOKE" = 1 ]; then
    TESTS=(tests/kernels/test_rope.py -k "llama-like")
    SMALL=(smoke=true timing.warmup_s=0 timing.min_reps=1 timing.max_reps=2 timing.budget_s=0
           calibrate=false)
    PICK=(seq_len=16 causal=false "mode=[forward,forward+backward]"
          "impls=[seed,reference,reference_out,triton,liger,liger_copy,sdpa,sdpa_nobias]")
    CPU_CUDA=("cases=[sinusoidal,rope,alibi_attention]")
    TILES=("cases=[alibi_attention]" "fwd_tiles=[64x64x4x3]" "bwd_tiles=[32x32x4x1]")
else
    TESTS=(tests/kernels tests/test_bench_timing.py -n 8)
    CPU_CUDA=()
    TILES=()
fi
part tests 100 30 $PY -m pytest -q -p no:cacheprovider "${TESTS[@]}" \
    --junitxml="$RES/tests.xml"
part sweep 230 60 $PY -m bench sweep=gpu device=$DEVICE "${SMALL[@]}" "${PICK[@]}" \
    hydra.run.dir="$RES/sweep-gpu"
part cpu_cuda 60 20 $PY -m bench sweep=cpu_vs_cuda "${SMALL[@]}" "${CPU_CUDA[@]}" \
    hydra.run.dir="$RES/cpu_vs_cuda"
part profile 25 10 $PY -m bench profile=true sweep=gpu "cases=[rope]" "impls=[triton]" \
    device=$DEVICE "${SMALL[@]}" hydra.run.dir="$RES/profile-rope"
part profile 25 10 $PY -m bench profile=true sweep=gpu "cases=[alibi_attention]" \
    "impls=[triton]" device=$DEVICE "${SMALL[@]}" hydra.run.dir="$RES/profile-attention"
AUDIT_PY=${AUDIT_PY:-.audit/audit.py}  # a copy of ../shared/gpu/audit.py (make gpu-prep)
if [ -f "$AUDIT_PY" ]; then
    AUDIT=(--out "$RES/audit")
    [ "$SMOKE" = 1 ] && AUDIT+=(--dry)
    mkdir -p "$RES/audit"
    part audit 150 60 $PY "$AUDIT_PY" "${AUDIT[@]}"
else
    echo "== audit: skipped, $AUDIT_PY not carried" | tee -a "$RES/status.txt"
fi
# the length-generalization probe's device path at its tiny size (7 s on a 2-core CPU)
part probe 40 15 $PY -m bench.probe probe=tiny device=$DEVICE hydra.run.dir="$RES/probe-tiny"
part tiles 200 40 $PY -m bench sweep=gpu_tiles device=$DEVICE "${SMALL[@]}" "${TILES[@]}" \
    hydra.run.dir="$RES/sweep-tiles"
echo "gpu_run.sh: done in $(($(date +%s) - START))s; $OUT/results.tgz"
cat "$RES/status.txt"
pack
rm -rf "$WORK"
