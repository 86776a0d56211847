#!/usr/bin/env bash
# Engine sweep (issue 7): `deepinfer bench` over concurrency × (input, output) lengths, and in the same
# run the Hugging Face transformers baseline (scripts/hf_baseline.py) on the same checkpoint at the
# same points. Writes one CSV (both implementations), the raw outputs, the hardware state and the
# exact commands, then PNG plots (scripts/plot_sweep.py).
#
#   scripts/sweep.sh --quick                                   # CPU, bundled tiny model, small sizes
#   scripts/sweep.sh --model /tmp/v4-bench-4l --device cuda --out /tmp/sweep-4l
#   scripts/sweep.sh --model M --device cuda --concurrency "1 16" --lengths "512:128" --no-hf
#
# One point = one batch of `concurrency × prompts-per-slot` requests with random token ids, EOS
# ignored. With --prompts-per-slot 1 (default) deepinfer and HF run exactly the same workload: a
# batch of `concurrency` prompts of input_len tokens, each generating output_len tokens.
#
# CSV columns (results.csv):
#   impl,device,concurrency,num_prompts,input_len,output_len,elapsed_s,requests_per_s,input_tok_s,
#   output_tok_s,total_tok_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,decode_tok_s,status
# decode_tok_s = steady-state decode rate = min(concurrency, num_prompts) / TPOT p50 for deepinfer;
# for HF it is hf_baseline.py's batch·(output_len−1) / (full generate − prefill), which is the same
# quantity (batch / TPOT). HF rows derive the rest from prefill_s and decode_tok_s: TTFT = prefill_s
# (the whole batch's prompt forward; p50 = p99), TPOT = batch / decode_tok_s,
# elapsed = prefill_s + batch·(output_len−1) / decode_tok_s.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL=""
DEVICE="cuda"
OUT=""
CONCURRENCY="1 2 4 8 16 32 64 128 256"
LENGTHS="128:128 512:128 2048:128"
PROMPTS_PER_SLOT=1
DEEPINFER="${DEEPINFER:-}"
HF=1
HF_PYTHON="${HF_PYTHON:-python3}"
HF_DEVICE=""
HF_DTYPE=""
HF_REPEATS=1
PLOT_PYTHON="${PLOT_PYTHON:-python3}"
PLOT=1
EXTRA_BENCH_ARGS=()
SEED=0

usage() {
  sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  cat <<EOF
Options:
  --model DIR            checkpoint (scripts/make_bench_model.py output, or a transformers-format folder)
  --device DEV           deepinfer device (EngineConfig::device): cpu, cuda, cuda:N   [$DEVICE]
  --out DIR              output folder                      [sweep-<date> in the current folder]
  --concurrency "LIST"   concurrency levels                 [$CONCURRENCY]
  --lengths "LIST"       input:output pairs                 [$LENGTHS]
  --prompts-per-slot K   num_prompts = K × concurrency      [$PROMPTS_PER_SLOT]
  --deepinfer BIN        the deepinfer binary               [\$DEEPINFER, else build*/bin/deepinfer]
  --bench-arg ARG        extra argument for deepinfer bench (repeatable), e.g. --bench-arg=--kv-cache-memory=8000000000
  --seed N               prompt / engine seed               [$SEED]
  --no-hf                skip the transformers baseline
  --hf-python PY         python with torch + transformers   [\$HF_PYTHON or python3]
  --hf-device DEV        device for HF                      [the deepinfer device, cpu if it is cpu]
  --hf-dtype DT          bfloat16 | float32                 [bfloat16 on cuda, float32 on cpu]
  --hf-repeats R         timed HF runs per point (median)   [$HF_REPEATS]
  --plot-python PY       python with matplotlib (scripts/bench_requirements.txt) [\$PLOT_PYTHON or python3]
  --no-plot              CSV only
  --quick                CPU smoke run: bundled tiny model, concurrency "1 2 4", lengths "32:8 64:4"
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --lengths) LENGTHS="$2"; shift 2 ;;
    --prompts-per-slot) PROMPTS_PER_SLOT="$2"; shift 2 ;;
    --deepinfer) DEEPINFER="$2"; shift 2 ;;
    --bench-arg=*) EXTRA_BENCH_ARGS+=("${1#--bench-arg=}"); shift ;;
    --bench-arg) EXTRA_BENCH_ARGS+=("$2"); shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --no-hf) HF=0; shift ;;
    --hf-python) HF_PYTHON="$2"; shift 2 ;;
    --hf-device) HF_DEVICE="$2"; shift 2 ;;
    --hf-dtype) HF_DTYPE="$2"; shift 2 ;;
    --hf-repeats) HF_REPEATS="$2"; shift 2 ;;
    --plot-python) PLOT_PYTHON="$2"; shift 2 ;;
    --no-plot) PLOT=0; shift ;;
    --quick)
      MODEL="${MODEL:-$ROOT/tests/data/models/deepseek-v4-tiny-stories}"
      DEVICE="cpu"; CONCURRENCY="1 2 4"; LENGTHS="32:8 64:4"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "sweep.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ -n "$MODEL" ]] || { echo "sweep.sh: --model is required (or --quick)" >&2; exit 2; }
[[ -d "$MODEL" ]] || { echo "sweep.sh: --model '$MODEL' is not a directory" >&2; exit 2; }
[[ "$PROMPTS_PER_SLOT" =~ ^[1-9][0-9]*$ ]] || { echo "sweep.sh: --prompts-per-slot must be a positive integer, got '$PROMPTS_PER_SLOT'" >&2; exit 2; }
for c in $CONCURRENCY; do
  [[ "$c" =~ ^[1-9][0-9]*$ ]] || { echo "sweep.sh: --concurrency value '$c' is not a positive integer" >&2; exit 2; }
done
for lp in $LENGTHS; do
  [[ "$lp" =~ ^[1-9][0-9]*:[1-9][0-9]*$ ]] || { echo "sweep.sh: --lengths entry '$lp' is not INPUT:OUTPUT (positive integers)" >&2; exit 2; }
done
if [[ -z "$DEEPINFER" ]]; then
  DEEPINFER="$(ls -t "$ROOT"/build*/bin/deepinfer 2>/dev/null | head -1 || true)"
fi
[[ -x "$DEEPINFER" ]] || { echo "sweep.sh: no deepinfer binary (build the 'deepinfer' target or pass --deepinfer BIN)" >&2; exit 2; }
if [[ -z "$HF_DEVICE" ]]; then HF_DEVICE="$DEVICE"; fi
if [[ -z "$HF_DTYPE" ]]; then
  if [[ "$HF_DEVICE" == cpu ]]; then HF_DTYPE=float32; else HF_DTYPE=bfloat16; fi
fi
OUT="${OUT:-sweep-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT/raw"
CSV="$OUT/results.csv"
CMDS="$OUT/commands.txt"
echo "impl,device,concurrency,num_prompts,input_len,output_len,elapsed_s,requests_per_s,input_tok_s,output_tok_s,total_tok_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,decode_tok_s,status" > "$CSV"
: > "$CMDS"

# Hardware and software state at the start of the run.
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -a)"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
  echo "memory: $(grep MemTotal /proc/meminfo | awk '{printf "%.1f GiB", $2/1048576}')"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "deepinfer: $DEEPINFER"
  echo "model: $MODEL"
  echo "device: $DEVICE; hf: $([[ $HF == 1 ]] && echo "$HF_DEVICE $HF_DTYPE via $HF_PYTHON" || echo off)"
  echo "concurrency: $CONCURRENCY; lengths: $LENGTHS; prompts per slot: $PROMPTS_PER_SLOT; seed: $SEED"
  if command -v nvidia-smi > /dev/null; then
    echo "--- nvidia-smi"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,persistence_mode --format=csv 2>&1 || true
  fi
} > "$OUT/hardware.txt"
cat "$OUT/hardware.txt" >&2

# deepinfer bench JSON -> one CSV row.
json_row() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
conc = int(sys.argv[2])
t, p = j["ttft_ms"], j["tpot_ms"]
eff = min(conc, j["num_prompts"])
decode = eff * 1000.0 / p["p50"] if p["p50"] > 0 else float("nan")
print(",".join(str(x) for x in [
    "deepinfer", j["device"], conc, j["num_prompts"], j["input_len"], j["output_len"],
    f'{j["elapsed_time"]:.4f}', f'{j["requests_per_second"]:.4f}', f'{j["input_tokens_per_second"]:.2f}',
    f'{j["output_tokens_per_second"]:.2f}', f'{j["total_tokens_per_second"]:.2f}',
    f'{t["p50"]:.3f}', f'{t["p99"]:.3f}', f'{p["p50"]:.4f}', f'{p["p99"]:.4f}', f"{decode:.2f}", "ok"]))
EOF
}

# hf_baseline CSV line (impl,batch,input_len,output_len,prefill_s,decode_tok_s) -> one CSV row.
hf_row() {
  python3 - "$1" "$HF_DEVICE" <<'EOF'
import math, sys
impl, b, il, ol, p, d = sys.argv[1].strip().split(",")
b, il, ol, p, d = int(b), int(il), int(ol), float(p), float(d)
if math.isnan(p) or math.isnan(d) or d <= 0:
    print(f"hf,{sys.argv[2]},{b},{b},{il},{ol},,,,,,,,,,,failed")
else:
    el = p + b * (ol - 1) / d
    tpot = 1000.0 * b / d
    print(",".join(str(x) for x in [
        "hf", sys.argv[2], b, b, il, ol, f"{el:.4f}", f"{b / el:.4f}", f"{b * il / el:.2f}", f"{b * ol / el:.2f}",
        f"{b * (il + ol) / el:.2f}", f"{1000 * p:.3f}", f"{1000 * p:.3f}", f"{tpot:.4f}", f"{tpot:.4f}", f"{d:.2f}", "ok"]))
EOF
}

for lp in $LENGTHS; do
  IN="${lp%%:*}"; OUTLEN="${lp##*:}"
  for C in $CONCURRENCY; do
    N=$((C * PROMPTS_PER_SLOT))
    tag="c${C}_i${IN}_o${OUTLEN}"
    cmd=("$DEEPINFER" bench --model "$MODEL" --device "$DEVICE" --mode throughput --input-len "$IN"
         --output-len "$OUTLEN" --num-prompts "$N" --max-concurrency "$C" --seed "$SEED"
         --output-json "$OUT/raw/deepinfer_$tag.json" "${EXTRA_BENCH_ARGS[@]}")
    printf '%q ' "${cmd[@]}" >> "$CMDS"; echo >> "$CMDS"
    echo "[sweep] deepinfer concurrency $C, input $IN, output $OUTLEN ($N prompts)" >&2
    if "${cmd[@]}" > "$OUT/raw/deepinfer_$tag.log" 2>&1; then
      json_row "$OUT/raw/deepinfer_$tag.json" "$C" >> "$CSV"
    else
      echo "[sweep]   failed (see $OUT/raw/deepinfer_$tag.log): $(tail -1 "$OUT/raw/deepinfer_$tag.log")" >&2
      echo "deepinfer,$DEVICE,$C,$N,$IN,$OUTLEN,,,,,,,,,,,failed" >> "$CSV"
    fi
  done
  if [[ $HF == 1 ]]; then
    # One HF process per length pair: the model is loaded once for all its batch sizes.
    hcmd=("$HF_PYTHON" "$ROOT/scripts/hf_baseline.py" --model "$MODEL" --device "$HF_DEVICE" --dtype "$HF_DTYPE"
          --batch $CONCURRENCY --input-len "$IN" --output-len "$OUTLEN" --repeats "$HF_REPEATS" --seed "$SEED"
          --keep-going)
    printf '%q ' "${hcmd[@]}" >> "$CMDS"; echo >> "$CMDS"
    echo "[sweep] hf baseline batches ($CONCURRENCY), input $IN, output $OUTLEN" >&2
    hf_out="$OUT/raw/hf_i${IN}_o${OUTLEN}.csv"
    if ! "${hcmd[@]}" > "$hf_out" 2> "$OUT/raw/hf_i${IN}_o${OUTLEN}.log"; then
      echo "[sweep]   hf baseline failed (see $OUT/raw/hf_i${IN}_o${OUTLEN}.log): $(tail -1 "$OUT/raw/hf_i${IN}_o${OUTLEN}.log")" >&2
    fi
    done_batches=" "
    while IFS= read -r line; do
      [[ "$line" == hf,* ]] || continue
      hf_row "$line" >> "$CSV"
      done_batches+="$(cut -d, -f2 <<< "$line") "
    done < "$hf_out"
    for C in $CONCURRENCY; do  # points the HF process never reached
      [[ "$done_batches" == *" $C "* ]] || echo "hf,$HF_DEVICE,$C,$C,$IN,$OUTLEN,,,,,,,,,,,failed" >> "$CSV"
    done
  fi
done

echo "[sweep] wrote $CSV" >&2
if [[ $PLOT == 1 ]]; then
  printf '%q ' "$PLOT_PYTHON" "$ROOT/scripts/plot_sweep.py" "$CSV" --out "$OUT" >> "$CMDS"; echo >> "$CMDS"
  "$PLOT_PYTHON" "$ROOT/scripts/plot_sweep.py" "$CSV" --out "$OUT"
fi
column -s, -t < "$CSV" 2>/dev/null || cat "$CSV"
