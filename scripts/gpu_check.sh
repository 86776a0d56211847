#!/usr/bin/env bash
# GPU checks, run on the H200 machine (never in CI). Two ways to use it:
#   here:  scripts/gpu_check.sh --stage      # builds preset "cuda", copies the gpu test
#                                            # binaries into .gpu/ and packs .gpupack/gpu.tar.xz
#                                            # (both git-ignored; carry .gpupack, unpack there)
#   there: scripts/gpu_check.sh [.gpu]       # runs every staged gpu test, prints a summary table
# Each test binary is a GoogleTest program; its per-test results are collected into the table.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" = "--stage" ]; then
  set -e
  cmake --preset cuda -G Ninja >/dev/null
  # Only what runs on the GPU machine: the gpu-labelled tests, the CLI and the kernel benchmark.
  # Test names are their target names (di_add_test); a test whose binary is not built yet has no
  # command, so the binaries are listed after the build.
  gpu_tests() { ctest --test-dir build/cuda -L gpu --show-only=json-v1 | python3 -c "$1"; }
  targets="deepinfer $(gpu_tests 'import json,sys; [print(t["name"]) for t in json.load(sys.stdin)["tests"]]' | tr '\n' ' ')"
  ninja -C build/cuda -t targets all 2>/dev/null | grep -q '^bench_ops:' && targets="$targets bench_ops bench_model"
  cmake --build build/cuda -j"$(nproc)" --target $targets
  bins=$(gpu_tests 'import json,sys; [print(t["command"][0]) for t in json.load(sys.stdin)["tests"] if t.get("command")]')
  rm -rf .gpu && mkdir -p .gpu/bin
  for b in $bins; do cp "$b" .gpu/; done
  cp build/cuda/bin/deepinfer .gpu/bin/ 2>/dev/null || cp build/cuda/tools/deepinfer/deepinfer .gpu/bin/ 2>/dev/null || true
  for b in bench_ops bench_model; do  # for scripts/gpu_bench.sh
    find build/cuda/bench -name "$b" -type f -perm -u+x -exec cp {} .gpu/bin/ \; 2>/dev/null || true
  done
  # The CLI's shared libraries that the GPU machine lacks (PCRE2, ICU 72, libcurl and theirs;
  # not those it has in other versions, e.g. gnutls/nettle/openssl). ICU's 30 MB data library is
  # replaced by a stub (the carry limit is 64 MiB): the bundled models' tokenizers never need ICU
  # data; a model whose tokenizer does would fail loudly there.
  mkdir -p .gpu/lib
  for l in $(ldd .gpu/bin/deepinfer 2>/dev/null | awk '/=>/ {print $3}' |
             grep -E 'libcurl|libpcre2|libicuuc|libnghttp2|libidn2|libunistring|libssh2|libpsl|libgssapi|libkrb5|libk5crypto|libldap|liblber|libsasl2|libbrotli'); do
    cp -L "$l" .gpu/lib/
  done
  echo 'char icudt72_dat[1024] __attribute__((aligned(16)));' |
    gcc -shared -fPIC -Wl,-soname,libicudata.so.72 -o .gpu/lib/libicudata.so.72 -x c -
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  # The device tool carries at most 64 MiB with the tree: carry .gpupack (stripped, xz) and
  # unpack there with `tar -xJf .gpupack/gpu.tar.xz`.
  strip .gpu/*_test .gpu/bin/* 2>/dev/null || true
  # One xz stream with a 256 MiB dictionary: every binary links the same CUDA kernels, so the
  # ~1 GB of binaries pack to ~14 MB (xz's default 8 MiB dictionary gives ~110 MB); ~10 min on 2 cores.
  rm -rf .gpupack && mkdir -p .gpupack && tar -cf - .gpu | xz -T1 --lzma2=preset=6,dict=256MiB > .gpupack/gpu.tar.xz
  grep -qx '/.gpupack/' .git/info/exclude 2>/dev/null || echo '/.gpupack/' >> .git/info/exclude
  echo "staged: $(ls .gpu | tr '\n' ' ') ($(du -h .gpupack/gpu.tar.xz | cut -f1) packed)"
  exit 0
fi

dir="${1:-.gpu}"
out="${OUT:-/tmp}"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts
# NCCL: the toolkit's, else the one PyTorch ships (pip nvidia-nccl) on the GPU machine.
if ! ldconfig -p | grep -q libnccl.so.2; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null || true)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH="$nccl_dir:${LD_LIBRARY_PATH:-}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
status=0
for bin in "$dir"/*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  name=$(basename "$bin")
  "$bin" --gtest_output="json:$out/$name.json" 2>&1 | tee "$out/$name.log" | grep -E '^\[  (FAILED|PASSED) |^device|worst' || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
# End to end: `deepinfer generate` on the GPU through the whole engine (async scheduling, tight
# cache so that preemption happens), greedy, against the same command on the CPU. The variant
# --enable-expert-parallel runs the routed experts through the expert-parallel MoE over a one-rank
# NCCL group (EngineConfig.enable_expert_parallel; docs/dist.md); --enforce-eager launches every
# decode op one by one (the other variants replay decode steps from CUDA graphs).
if [ -x "$dir/bin/deepinfer" ]; then
  # Shared libraries the GPU machine may lack (PCRE2, libcurl and theirs), carried in $dir/lib.
  di() { LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}" "$dir/bin/deepinfer" "$@"; }
  model=tests/data/models/deepseek-v4-tiny-stories
  prompts=(--prompt "Once upon a time" --prompt "Lily and Ben went to the park" --prompt "The little dog"
           --prompt "One day, a girl named Mia found a big box" --prompt "Tom had a red ball")
  common=(--model "$model" "${prompts[@]}" --max-tokens 96 --temperature 0 --max-num-seqs 4)
  e2e=PASS
  di generate "${common[@]}" --device cpu --output "$out/e2e_cpu.jsonl" --quiet > "$out/e2e_cpu.log" 2>&1 || e2e=FAIL
  for variant in "" "--batch-invariant" "--no-async-scheduling" "--enable-expert-parallel" "--enforce-eager"; do
    tag=${variant:-default}
    di generate "${common[@]}" --device cuda $variant --output "$out/e2e_gpu_$tag.jsonl" > "$out/e2e_gpu_$tag.log" 2>&1 || e2e=FAIL
    python3 - "$out/e2e_cpu.jsonl" "$out/e2e_gpu_$tag.jsonl" <<'PY' || e2e=FAIL
import json, sys
a = [json.loads(l)["outputs"][0]["token_ids"] for l in open(sys.argv[1])]
b = [json.loads(l)["outputs"][0]["token_ids"] for l in open(sys.argv[2])]
same = sum(x == y for x, y in zip(a, b))
print(f"e2e {sys.argv[2].split('/')[-1]}: {same}/{len(a)} requests token-identical to the CPU run")
sys.exit(0 if same == len(a) == len(b) and a else 1)
PY
  done
  tail -n 4 "$out/e2e_cpu.log" "$out/e2e_gpu_default.log"
  echo "{\"testsuites\": [{\"name\": \"e2e\", \"testsuite\": [{\"name\": \"generate_gpu_equals_cpu\"$( [ $e2e = PASS ] || echo ', \"failures\": [1]')}]}]}" > "$out/e2e.json"
  [ $e2e = PASS ] || status=1
fi
python3 - "$out" <<'PY'
import glob, json, sys
rows = []
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try: d = json.load(open(f))
    except Exception: continue
    for suite in d.get("testsuites", []):
        for t in suite.get("testsuite", []):
            ok = "failures" not in t
            rows.append((f"{suite['name']}.{t['name']}", "PASS" if ok else "FAIL", t.get("time", "")))
print(f"\n{'test':60s} {'result':6s} time")
for r in rows: print(f"{r[0]:60s} {r[1]:6s} {r[2]}")
print(f"{sum(r[1]=='PASS' for r in rows)} passed, {sum(r[1]=='FAIL' for r in rows)} failed")
PY
exit $status
