#!/usr/bin/env bash
# The whole test suite on a fresh machine: set-up, build (CPU preset), ctest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
cmake --preset cpu -G Ninja >/dev/null
cmake --build build/cpu -j"$(nproc)"
ctest --preset cpu -j"$(nproc)" "$@"
