#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, build (preset "default": CUDA sources are
# compiled when nvcc exists; gpu-labelled tests are excluded), ctest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
cmake --preset default -G Ninja >/dev/null
cmake --build build/default -j"$(nproc)"
ctest --preset default -j"$(nproc)" "$@"
