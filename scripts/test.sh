#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run the whole suite.
# Usage: scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing chromium for the browser test (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "== chromium not found and cannot apt-get it: the browser test will be skipped" >&2
  fi
fi

echo "== installing msvm with its test dependencies"
python3 -m pip install -q --disable-pip-version-check -e ".[dev,onnx,dask]"
# An editable install leaves the sources uncompiled, and where PYTHONDONTWRITEBYTECODE is set every process
# (each compile worker, each notebook kernel) would compile them again at import: byte-compile once.
python3 -m compileall -q msvm bench >/dev/null
# PyTorch (CPU) only for comparison tests; never a dependency of msvm. Skipped where unavailable.
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q --disable-pip-version-check torch==2.13.0 \
  || echo "== torch not installable here: torch comparison tests will be skipped"

echo "== ruff"
python3 -m ruff check .
echo "== pytest"
python3 -m pytest "$@"
