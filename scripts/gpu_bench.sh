#!/usr/bin/env bash
# Speed on the H200 (issue 7), run on the GPU machine with a carried build (.gpu/bin, staged by
# scripts/gpu_check.sh --stage). Writes the V4-Flash-width bench checkpoint (scripts/
# make_bench_model.py, random weights in the release formats) to $BENCH_DIR, then measures in one
# run: deepinfer's model forward (bench_model: prefill, then greedy decode of B sequences) and the
# HF transformers implementation (scripts/hf_baseline.py, bf16) on the same checkpoint.
#   scripts/gpu_bench.sh [layers=4] [batches=1,16]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
layers="${1:-4}"
batches="${2:-1,16}"
dir="${BENCH_DIR:-/tmp/bench-v4flash-${layers}l}"
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw --format=csv || true
if [ ! -f "$dir/config.json" ]; then
  t0=$(date +%s)
  python3 scripts/make_bench_model.py --layers "$layers" --out "$dir" --device cuda > "$out/make_bench_model.log" 2>&1 \
    || { tail -20 "$out/make_bench_model.log"; exit 1; }
  echo "bench checkpoint: $dir ($(du -sh "$dir" | cut -f1), written in $(( $(date +%s) - t0 )) s)"
fi
echo "== deepinfer (model forward, CUDA backend, weights in stored format, fp32 math)"
.gpu/bin/bench_model --device cuda --batch "$batches" --prefill 128 --decode 32 --reps 2 "$dir" \
  | tee "$out/deepinfer_bench.txt"
if [ "${SKIP_HF:-0}" != 1 ]; then
  echo "== HF transformers (bf16), same checkpoint"
  timeout 420 python3 scripts/hf_baseline.py --model "$dir" --batch ${batches//,/ } --input-len 128 --output-len 32 --header \
    2>"$out/hf_baseline.err" | tee "$out/hf_baseline.csv" || tail -20 "$out/hf_baseline.err"
fi
