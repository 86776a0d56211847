#!/usr/bin/env bash
# Attention data parallelism + expert parallelism across GPUs, end to end through `deepinfer
# generate` (issue 9; docs/dist.md "Launcher"). Run on a machine with >= 2 GPUs after
# `scripts/gpu_check.sh --stage` here and unpacking .gpupack there (binaries in .gpu/bin, the
# libraries the machine lacks in .gpu/lib):
#
#   scripts/gpu_dp_check.sh [.gpu]                     # token ids: DP=2 (+EP) vs one GPU; PASS/FAIL
#   scripts/gpu_dp_check.sh [.gpu] --bench [MODEL]     # throughput, one line per config
#
# Check: `--data-parallel-size 2 --enable-expert-parallel --device cuda` (one process per GPU, NCCL
# group, experts sharded, ranks in lockstep) and `--data-parallel-size 2 --device cuda` (two
# independent replicas) against `--device cuda` (one GPU), greedy, with --batch-invariant (a
# row's result then does not depend on the batch, so the token ids must be identical), and once
# without it (informational: an expert's row count differs per rank, so cuBLAS may round
# differently; see docs/dist.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=.gpu
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then dir=$1; shift; fi
mode=check
bench_model=tests/data/models/deepseek-v4-tiny-stories
if [ "${1:-}" = "--bench" ]; then mode=bench; bench_model=${2:-$bench_model}; fi
out="${OUT:-/tmp}"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast (the launcher also sets it for its ranks)
if ! ldconfig -p | grep -q libnccl.so.2; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null || true)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH="$nccl_dir:${LD_LIBRARY_PATH:-}"
fi
di() { LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}" "$dir/bin/deepinfer" "$@"; }
[ -x "$dir/bin/deepinfer" ] || { echo "no $dir/bin/deepinfer (run scripts/gpu_check.sh --stage here first)"; exit 2; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true

same_ids() {  # same_ids A.jsonl B.jsonl LABEL -> prints n/m, exit 0 when all equal
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l)["outputs"][0]["token_ids"] for l in open(sys.argv[1])]
b = [json.loads(l)["outputs"][0]["token_ids"] for l in open(sys.argv[2])]
same = sum(x == y for x, y in zip(a, b))
print(f"{sys.argv[3]:58s} {same}/{len(a)} requests token-identical to one GPU")
sys.exit(0 if same == len(a) == len(b) and a else 1)
PY
}

if [ $mode = check ]; then
  model=tests/data/models/deepseek-v4-tiny-stories
  prompts=(--prompt "Once upon a time" --prompt "Lily and Ben went to the park" --prompt "The little dog"
           --prompt "One day, a girl named Mia found a big box" --prompt "Tom had a red ball"
           --prompt "The sun was shining" --prompt "Sam wanted to fly")
  # 7 prompts: rank 0 gets 4, rank 1 gets 3 (and runs out first: idle steps in lockstep).
  common=(--model "$model" "${prompts[@]}" --max-tokens 96 --temperature 0 --ignore-eos --max-num-seqs 2 --quiet)
  result=PASS
  for bi in "--batch-invariant" ""; do
    tag=${bi:+bi}; tag=${tag:-default}
    di generate "${common[@]}" --device cuda $bi --output "$out/dp1_$tag.jsonl" > "$out/dp1_$tag.log" 2>&1 \
      || { echo "DP=1 ($tag) failed:"; tail -n 20 "$out/dp1_$tag.log"; result=FAIL; continue; }
    for variant in "--enable-expert-parallel" ""; do
      vtag=${variant:+ep}; vtag=${vtag:-replicas}
      log="$out/dp2_${vtag}_$tag.log"
      di generate "${common[@]}" --device cuda --data-parallel-size 2 $variant $bi \
        --output "$out/dp2_${vtag}_$tag.jsonl" > "$log" 2>&1 \
        || { echo "DP=2 $vtag ($tag) failed:"; tail -n 20 "$log"; result=FAIL; continue; }
      grep -E '^(ranks|engine|throughput) ' "$log" | sed 's/^/    /'
      if same_ids "$out/dp1_$tag.jsonl" "$out/dp2_${vtag}_$tag.jsonl" "DP=2 $vtag ${bi:-(no --batch-invariant)}"; then :
      elif [ -n "$bi" ]; then result=FAIL
      else echo "    (informational without --batch-invariant)"; fi
    done
  done
  echo "gpu_dp_check: $result"
  [ $result = PASS ]
  exit $?
fi

# --bench: N random token-id prompts through `deepinfer generate`, one line per config with the
# generate summary's throughput (generation time only, model load excluded; with several ranks the
# window runs from the first rank's start to the last rank's end).
n=${DP_BENCH_PROMPTS:-256}; in_len=${DP_BENCH_INPUT_LEN:-128}; out_len=${DP_BENCH_OUTPUT_LEN:-128}
seqs=${DP_BENCH_MAX_NUM_SEQS:-64}
python3 - "$bench_model" "$n" "$in_len" > "$out/dp_bench_input.jsonl" <<'PY'
import json, random, sys
cfg = json.load(open(sys.argv[1] + "/config.json"))
vocab = cfg.get("vocab_size", 512)
rng = random.Random(0)
for _ in range(int(sys.argv[2])):
    print(json.dumps({"prompt_token_ids": [rng.randrange(3, vocab) for _ in range(int(sys.argv[3]))]}))
PY
echo "bench: $bench_model, $n prompts x ($in_len in, $out_len out), max-num-seqs $seqs per rank, greedy"
for cfg in "1|" "1|--enable-expert-parallel" "2|--enable-expert-parallel" "2|"; do
  dp=${cfg%%|*}; flags=${cfg#*|}
  log="$out/dp_bench_dp${dp}${flags:+_ep}.log"
  args=(--model "$bench_model" --input "$out/dp_bench_input.jsonl" --max-tokens "$out_len" --temperature 0
        --ignore-eos --max-num-seqs "$seqs" --device cuda --quiet)
  [ "$dp" -gt 1 ] && args+=(--data-parallel-size "$dp")
  if di generate "${args[@]}" $flags > "$log" 2>&1; then
    printf "DP=%s %-26s %s\n" "$dp" "${flags:-(plain)}" "$(grep '^throughput ' "$log" | sed 's/^throughput *//')"
  else
    printf "DP=%s %-26s FAILED (see %s)\n" "$dp" "${flags:-(plain)}" "$log"; tail -n 5 "$log"
  fi
done
