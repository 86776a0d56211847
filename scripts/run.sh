#!/usr/bin/env bash
# The main job on a fresh machine: set-up, build, then offline generation with the bundled default
# model (deepseek-v4-tiny-stories, a real trained DeepSeek-V4) through the full engine, printing the
# text and the throughput. Extra arguments are passed to `deepinfer generate` (e.g. --temperature 0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh --no-pip
cmake --preset default -G Ninja >/dev/null
cmake --build build/default -j"$(nproc)" --target deepinfer
exec build/default/bin/deepinfer generate --model tests/data/models/deepseek-v4-tiny-stories \
  --prompt "Once upon a time" \
  --prompt "Lily and Ben went to the park" \
  --prompt "The little dog" \
  --prompt "One day, a girl named Mia found a big box" \
  --prompt "Tom had a red ball" \
  --prompt "The sun was shining and the birds were singing" \
  --prompt "There was a small boat" \
  --prompt "Max wanted to fly" \
  --max-tokens 128 --temperature 0.8 --top-p 0.95 --seed 0 "$@"
