#!/usr/bin/env bash
# Installs what deepinfer needs to build and test on a fresh Debian 12 machine. Idempotent and
# non-interactive: packages already present are not touched; nothing is downloaded at build time.
#   scripts/setup.sh            build + test dependencies (Debian -dev packages, pinned pip tools)
#   scripts/setup.sh --no-pip   Debian packages only
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git xz-utils
  nlohmann-json3-dev   # JSON: safetensors headers, config.json, tokenizer.json
  libpcre2-dev         # pre-tokenizer regexes (PCRE2 with JIT)
  libicu-dev           # tokenizer: Unicode normalization (NFC) and character properties
  liblzma-dev          # tokenizer: reads .xz-compressed tokenizer.json test fixtures
  libcurl4-openssl-dev # Hugging Face Hub downloads
  libcli11-dev         # command-line parsing
  libcpp-httplib-dev   # local HTTP server in tests; OpenAI-compatible server
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pip
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" != "--no-pip" ] && [ -f "$here/requirements-test.txt" ]; then
  # Python tools used by tests as references (pinned). Skipped quickly when already satisfied.
  if ! python3 - "$here/requirements-test.txt" <<'PY' 2>/dev/null
import sys, importlib.metadata as md
for line in open(sys.argv[1]):
    line = line.split('#')[0].strip()
    if not line: continue
    name, ver = line.split('==')
    if md.version(name) != ver: sys.exit(1)
PY
  then
    echo "setup: installing pinned Python test tools"
    python3 -m pip install -q --disable-pip-version-check -r "$here/requirements-test.txt"
  fi
fi
