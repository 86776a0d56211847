#!/usr/bin/env bash
# The main job on a fresh machine: set-up, build, then run deepinfer on the bundled default model.
# Extra arguments are passed to the deepinfer command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh --no-pip
cmake --preset default -G Ninja >/dev/null
cmake --build build/default -j"$(nproc)" --target deepinfer
exec build/default/bin/deepinfer inspect tests/data/models/deepseek-v4-tiny-stories "$@"
