#!/usr/bin/env bash
# Everything of the accelerator path not yet measured on a GPU, in one call of at most 8 minutes:
#   1. the accel tests on the GPU (the CUDA-only ones included; the fused IP sums' too),
#   2. the IP mini-batch step against the bare GEMM of the same shapes (after the kernel changes),
#      and with the IP sums fused by torch.compile (--fused-sums: Triton; its compile timed apart),
#   3. bench_gpu.py's cases and cost table (the IP epoch of 32 trials against the 40 M goal, also
#      with the fused IP sums (--ip-fused); the GPU-hour projection on the new costs; the TF32
#      accuracy line: states and readouts with TF32 products against float32),
#   3b. (ipepoch) the 32-trial IP epoch four ways, interleaved: eager, CUDA graphs (accel.ip_rounds),
#      fused IP sums, both,
#   4. CLIP/FedCLIP batched on cuda, end to end against the projection (bench_continual.py;
#      joint at one round per context, to fit its 120 s),
#   5. JAX (one jitted lax.scan per case) on the shapes of step 3's cases: the numbers behind
#      the torch-or-JAX choice (bench_jax_anchor.py; the image has JAX),
#   6. batches of the 32-trial paper slice, one step `slice<N>` per size N in SLICE_UNITS
#      (default 300; all three sizes were measured by 2026-11-27, the 200 and 400 on older
#      kernels: BENCHMARKS.md), sharing the time left but 30 s, each run only if its projection
#      fits (else it says so and leaves its time to the next),
#   7. in the rest, a continual share's assessment batched on cuda against numpy and the bare
#      recurrence (bench_assess.py: 5 retrains × 5 contexts at 300 units, 3 users of 300 windows).
#
# Run from the repository root on the GPU machine, with the image's python3 (torch+CUDA, JAX):
#     bash benchmarks/gpu_session.sh              # device tool: run(command=..., timeout_s=600)
# Nothing is to be carried: the project's .venv is Python 3.11 with a CPU-only torch and does not
# run there. A preflight (env.txt) stops the script at once, exit 3, if python3 lacks a module the
# steps import or torch sees no GPU: no step would measure anything then. It also records what
# torch.compile needs on the GPU (Triton, a C compiler, Python.h for Triton's launcher); without
# them the fused sums' cases record the error and the rest runs.
#
# Results. Only 8 files come back from $OUT, so every step's output (NAME.txt, NAME.jsonl) goes to
# $RES and is packed into $OUT/results.tar.gz after each step (a call cut off keeps the steps
# done); $OUT/summary.txt (each step's exit code and seconds) and $OUT/env.txt are plain copies.
# The end of the output repeats each step's last lines and the summary. Each step has its own
# timeout, so one slow step cannot eat the others' time; the total stays under TOTAL_S (470 s).
#
# ONLY="step ..." runs only the named steps (tests ip_step gpu ipepoch continual jax slice<N>... assess), e.g.
# ONLY=slice300 for the slice with all the time; SLICE_UNITS="200 400" with ONLY="slice200 slice400"
# for those two batches. REHEARSE=1 runs the same script on the CPU with
# tiny sizes (torch-cpu, --smoke): a check of the script itself (tests/test_gpu_session.py), no
# measurement.
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/gpu_session}
RES=${RES:-/tmp/gpu_session_results}
PY=${PYTHON:-python3}
TOTAL_S=${TOTAL_S:-470}
REHEARSE=${REHEARSE:-0}
ONLY=${ONLY:-}  # e.g. ONLY="tests slice300": run only these steps (the others say "skipped")
SLICE_UNITS=${SLICE_UNITS:-300}  # the paper slice's batches (reservoir sizes: 200 300 400), a step each
# IP_SIZES: bench_ip_epoch.py's sizes for the ip_step step on the GPU (not in REHEARSE), e.g. with
# --chunk-elements to time the IP step per chunk size (BENCHMARKS.md, "For the next session").
mkdir -p "$OUT"
rm -rf "$RES" && mkdir -p "$RES"
export PYTHONPATH=.:tests PYTHONUNBUFFERED=1
START=$(date +%s)

left() { echo $(( TOTAL_S - ($(date +%s) - START) )); }

pack() {  # the results so far into $OUT (at most 3 files there)
    cp "$RES/summary.txt" "$RES/env.txt" "$OUT/" 2>/dev/null
    if tar -czf "$OUT/results.tar.gz.part" -C "$RES" . 2>/dev/null; then
        mv "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
    else  # no tar: the steps' text files themselves (some may not come back: 8 files at most)
        rm -f "$OUT/results.tar.gz.part"
        cp "$RES"/*.txt "$OUT/" 2>/dev/null
    fi
}

wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

step() {  # step NAME MAX_SECONDS COMMAND...
    local name=$1 limit=$2 t0 rc
    shift 2
    if ! wanted "$name"; then
        echo "$name skipped (not in ONLY)" >> "$RES/summary.txt"
        return
    fi
    if [ "$(left)" -lt 20 ] || [ "$limit" -lt 10 ]; then
        echo "$name skipped (no time left)" >> "$RES/summary.txt"
        pack
        return
    fi
    [ "$limit" -gt "$(left)" ] && limit=$(left)
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" > "$RES/$name.txt" 2>&1
    rc=$?
    echo "$name rc=$rc $(( $(date +%s) - t0 ))s (limit ${limit}s)$( { [ $rc = 124 ] || [ $rc = 137 ]; } && echo ' TIMED OUT')" >> "$RES/summary.txt"
    pack
}

if [ "$REHEARSE" = 1 ]; then
    DEV=torch-cpu SMOKE=--smoke TESTS_K=cuda
    IP_SIZES="--reservoirs 2 --windows 5 --steps 12 --units 16 --repeats 1 --fused-sums"
    SLICE="--slice 3" ASSESS_SIZES=""  # tiny: every trial has 8 units, so no --slice-units
else
    DEV=cuda SMOKE="" TESTS_K=""
    IP_SIZES=${IP_SIZES:-"--reservoirs 64 --windows 100 --steps 700 --units 400 100 --repeats 3 --fused-sums"}
    SLICE="--slice 32" ASSESS_SIZES="--windows 300 --numpy-windows 20"
fi

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
    echo "cpus $(nproc)"
    REHEARSE=$REHEARSE "$PY" - <<'EOF'
import importlib, importlib.util, os, platform, sys
# What the steps import (the project itself comes from this tree); JAX only in its own step.
need = ["numpy", "scipy", "yaml", "threadpoolctl", "typer", "rich", "pytest", "torch"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
print("python", platform.python_version(), sys.executable)
if missing:
    print("MISSING modules:", " ".join(missing))
    sys.exit(3)
import numpy, scipy, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cuda available", torch.cuda.is_available(),
      "numpy", numpy.__version__, "scipy", scipy.__version__)
print("tf32 matmul", torch.backends.cuda.matmul.allow_tf32, "cudnn", torch.backends.cudnn.allow_tf32,
      "float32_matmul_precision", torch.get_float32_matmul_precision(),
      "env", {k: v for k, v in os.environ.items() if "TF32" in k})
# torch.compile (the fused IP sums): Triton on CUDA, which builds its launcher with a C compiler
# and Python.h; inductor's C++ on the CPU. Recorded, not required: those cases record their error.
import shutil, sysconfig
triton = importlib.util.find_spec("triton")
print("torch.compile needs: triton", importlib.import_module("triton").__version__ if triton else "MISSING",
      "cc", shutil.which("cc") or shutil.which("gcc") or "MISSING",
      "Python.h", os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
if os.environ.get("REHEARSE") == "1":
    sys.exit(0)
if not torch.cuda.is_available():
    print("NO GPU: torch", torch.__version__, "(torch.version.cuda", torch.version.cuda, ") sees no CUDA device")
    sys.exit(3)
x = torch.ones((256, 256), device="cuda")
free, total = torch.cuda.mem_get_info()
print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0),
      "product check", float((x @ x).sum()), "(expect 16777216.0)", "free/total GiB", round(free / 2**30, 1),
      round(total / 2**30, 1))
EOF
} > "$RES/env.txt" 2>&1
pre=$?
if [ "$pre" != 0 ]; then
    echo "preflight rc=$pre: no step run (env.txt says why)" >> "$RES/summary.txt"
    pack
    cat "$RES/env.txt" "$RES/summary.txt"
    exit 3
fi

# test_accel_fused.py compiles the fused IP sums (inductor's C++ on the CPU, Triton on cuda): ~30 s
# more on a cold compile cache.
# The accel files had 78 tests on 2026-11-28 (65 done when 110 s ran out): 240 s.
step tests 240 "$PY" -m pytest -q -p no:cacheprovider ${TESTS_K:+-k "$TESTS_K"} \
    tests/test_accel.py tests/test_accel_continual.py tests/test_accel_refusals.py tests/test_accel_fused.py \
    tests/test_accel_bias.py tests/test_accel_ip_rounds.py
step ip_step 90 "$PY" benchmarks/bench_ip_epoch.py --device "$DEV" $IP_SIZES --mu 0 0.1 --out "$RES/ip_step.jsonl"
step gpu 150 "$PY" benchmarks/bench_gpu.py $SMOKE --no-tf32 --ip-fused --out "$RES/gpu.jsonl"
# The 32-trial IP epoch eager / CUDA graphs / fused sums / both, 3 interleaved timed rounds after an
# untimed one: 16 epochs of ~5.5 s, the fused compile apart (~11 s cold).
step ipepoch 150 "$PY" benchmarks/bench_gpu.py $SMOKE --ip-variants 3 --out "$RES/ipepoch.jsonl"
# Joint at one round per context: with the default 3, the three methods' window-steps at the last
# cost table's prices come to ~150 s (fedclip-joint ~100 s of it) against this step's 120 s, and
# joint, last, would write nothing; its measured ÷ projected needs its path, not its rounds.
step continual 120 "$PY" benchmarks/bench_continual.py $SMOKE --joint-max-rounds 1 --out "$RES/continual.jsonl"
step jax 60 "$PY" benchmarks/bench_jax_anchor.py $SMOKE --out "$RES/jax.jsonl"
set -- $SLICE_UNITS
for u in $SLICE_UNITS; do  # the time left but assess's 30 s, shared by the slice steps still wanted
    n=0
    for v in "$@"; do wanted "slice$v" && n=$(( n + 1 )); done
    shift
    wanted "slice$u" || { step "slice$u" 0 true; continue; }
    lim=$(( ($(left) - $(wanted assess && echo 30 || echo 0)) / n ))
    step "slice$u" "$lim" "$PY" benchmarks/bench_gpu.py $SMOKE $SLICE \
        $([ "$REHEARSE" = 1 ] || echo --slice-units "$u") --time-limit "$(( lim > 20 ? lim - 10 : 10 ))" \
        --out "$RES/slice$u.jsonl"
done
step assess "$(left)" "$PY" benchmarks/bench_assess.py --device "$DEV" $SMOKE $ASSESS_SIZES --out "$RES/assess.jsonl"
echo "total $(( $(date +%s) - START ))s" >> "$RES/summary.txt"
pack
for f in "$RES"/*.txt; do
    [ "$f" = "$RES/summary.txt" ] && continue
    echo "== $(basename "$f"), last lines"
    tail -n 6 "$f" | cut -c1-300
done
echo "== summary (files in \$OUT: $(cd "$OUT" && ls | tr '\n' ' '))"
cat "$RES/summary.txt"
