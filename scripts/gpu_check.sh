#!/usr/bin/env bash
# GPU checks, run on the H200 machine (never in CI). Two ways to use it:
#   here:  scripts/gpu_check.sh --stage      # builds preset "cuda" and copies the gpu test
#                                            # binaries into .gpu/ (git-ignored) to carry
#   there: scripts/gpu_check.sh [.gpu]       # runs every staged gpu test, prints a summary table
# Each test binary is a GoogleTest program; its per-test results are collected into the table.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" = "--stage" ]; then
  set -e
  cmake --preset cuda -G Ninja >/dev/null
  # Only what runs on the GPU machine: the gpu-labelled tests, the CLI and the kernel benchmark.
  bins=$(ctest --test-dir build/cuda -L gpu --show-only=json-v1 |
    python3 -c 'import json,sys; [print(t["command"][0]) for t in json.load(sys.stdin)["tests"]]')
  targets="deepinfer $(for b in $bins; do basename "$b"; done | tr '\n' ' ')"
  ninja -C build/cuda -t targets all 2>/dev/null | grep -q '^bench_ops:' && targets="$targets bench_ops"
  cmake --build build/cuda -j"$(nproc)" --target $targets
  rm -rf .gpu && mkdir -p .gpu/bin
  for b in $bins; do cp "$b" .gpu/; done
  cp build/cuda/tools/deepinfer/deepinfer .gpu/bin/ 2>/dev/null || true
  find build/cuda -name bench_ops -type f -perm -u+x -exec cp {} .gpu/bin/ \; 2>/dev/null || true
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  echo "staged: $(ls .gpu | tr '\n' ' ')"
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
