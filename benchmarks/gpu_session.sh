#!/usr/bin/env bash
# Everything of issue 15 not yet measured on a GPU, in one call of at most 8 minutes, results
# under $OUT (one file per step, summary.txt with each step's exit code and seconds):
#   1. the accel tests on the GPU (the CUDA-only ones included),
#   2. the IP mini-batch step against the bare GEMM of the same shapes (after the kernel changes),
#   3. bench_gpu.py's cases and cost table (the IP epoch of 32 trials against the 40 M goal; the
#      GPU-hour projection on the new costs; the TF32 accuracy line: states and readouts with TF32
#      products against float32),
#   4. CLIP/FedCLIP batched on cuda, end to end against the projection (bench_continual.py),
#   5. JAX (one jitted lax.scan per case) on the shapes of step 3's cases: the numbers behind
#      the torch-or-JAX choice (bench_jax_anchor.py; the image has JAX),
#   6. the 300-unit batch of the 32-trial paper slice (the 200- and 400-unit batches were
#      measured in an earlier session: BENCHMARKS.md), with the time left but 30 s,
#   7. in those 30 s, a continual share's assessment batched on cuda against numpy and the bare
#      recurrence (bench_assess.py: 5 retrains × 5 contexts at 300 units, 3 users of 300 windows).
# Run from the repository root on the GPU machine:  bash benchmarks/gpu_session.sh
# Each step has its own timeout, so one slow step cannot eat the others' time; the total stays
# under TOTAL_S (default 470 s).
set -u
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"
export PYTHONPATH=.:tests
TOTAL_S=${TOTAL_S:-470}
START=$(date +%s)

left() { echo $(( TOTAL_S - ($(date +%s) - START) )); }

step() {  # step NAME MAX_SECONDS COMMAND...
    local name=$1 limit=$2 t0
    shift 2
    if [ "$(left)" -lt 20 ] || [ "$limit" -lt 10 ]; then
        echo "$name skipped (no time left)" >> "$OUT/summary.txt"
        return
    fi
    [ "$limit" -gt "$(left)" ] && limit=$(left)
    t0=$(date +%s)
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
    echo "$name rc=$? $(( $(date +%s) - t0 ))s (limit ${limit}s)" >> "$OUT/summary.txt"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    python3 -c "import platform, numpy, scipy, torch; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__, 'scipy', scipy.__version__)"
    nproc
} > "$OUT/env.txt" 2>&1

step tests 75 python3 -m pytest -q -p no:cacheprovider tests/test_accel.py tests/test_accel_continual.py tests/test_accel_refusals.py
step ip_step 45 python3 benchmarks/bench_ip_epoch.py --device cuda --reservoirs 64 --windows 100 --steps 700 \
    --units 400 100 --mu 0 0.1 --repeats 3 --out "$OUT/ip_step.jsonl"
step gpu 100 python3 benchmarks/bench_gpu.py --no-tf32 --out "$OUT/gpu.jsonl"
step continual 120 python3 benchmarks/bench_continual.py --out "$OUT/continual.jsonl"
step jax 60 python3 benchmarks/bench_jax_anchor.py --out "$OUT/jax.jsonl"
step slice300 "$(( $(left) - 30 ))" python3 benchmarks/bench_gpu.py --slice 32 --slice-units 300 --out "$OUT/slice300.jsonl"
step assess "$(left)" python3 benchmarks/bench_assess.py --device cuda --windows 300 --numpy-windows 20 \
    --out "$OUT/assess.jsonl"
echo "total $(( $(date +%s) - START ))s" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
