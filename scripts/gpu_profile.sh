#!/usr/bin/env bash
# Where a forward's GPU time goes (issue 7), on the GPU machine with a carried build (.gpu/bin).
# Runs bench_model under Nsight Compute (duration metric only, one pass per kernel) for a prefill
# and for decode steps, and prints the time per kernel name, summed, largest first.
#   scripts/gpu_profile.sh [layers=4]      (BENCH_DIR reuses gpu_bench.sh's checkpoint)
#   BENCH_FLAGS="--batch-invariant"         extra bench_model flags for every profiled run
#   PROFILE_DETAIL=1 [DETAIL_KERNEL=regex DETAIL_ARGS="--batch 16 --prefill 128 --decode 0"]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
layers="${1:-4}"
dir="${BENCH_DIR:-/tmp/bench-v4flash-${layers}l}"
out="${OUT:-/tmp}"
ncu=/usr/local/cuda/bin/ncu
[ -x "$ncu" ] || ncu=$(command -v ncu)
if [ ! -f "$dir/config.json" ]; then
  python3 scripts/make_bench_model.py --layers "$layers" --out "$dir" --device cuda > "$out/make_bench_model.log" 2>&1 \
    || { tail -20 "$out/make_bench_model.log"; exit 1; }
fi
profile() {  # name batch prefill decode
  local name=$1
  "$ncu" --csv --metrics gpu__time_duration.sum --print-units base \
    .gpu/bin/bench_model --device cuda --batch "$2" --prefill "$3" --decode "$4" --reps 1 \
    ${BENCH_FLAGS:-} "$dir" > "$out/ncu_$name.csv" 2> "$out/ncu_$name.err" || { tail -5 "$out/ncu_$name.err"; }
}
# Kernels of one forward = (kernels with decode N) − (kernels with decode 0), per decode step.
# Batch 1 after a 128-token prompt, as bench_model's default decode (session 11; before, a
# 16-token prompt: a short key list, one attention block per layer).
profile b1_p0 1 128 0
profile b1_d4 1 128 4
profile b16_p128 16 128 0
profile b16_d4 16 128 4
python3 scripts/ncu_summary.py "$out"
# One routed-expert tensor-core GEMM of the prefill in detail (PROFILE_DETAIL=1): speed of light,
# occupancy, warp stall reasons.
if [ "${PROFILE_DETAIL:-0}" = 1 ]; then
  "$ncu" --kernel-name-base demangled --kernel-name "regex:${DETAIL_KERNEL:-tc_kernel<2}" --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    .gpu/bin/bench_model --device cuda ${DETAIL_ARGS:---batch 16 --prefill 128 --decode 0} --reps 1 \
    ${BENCH_FLAGS:-} "$dir" > "$out/ncu_tc_moe_detail.txt" 2>&1
  grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles|Block Limit|Issued" \
    "$out/ncu_tc_moe_detail.txt" | head -40
fi
