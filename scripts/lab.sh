#!/usr/bin/env bash
# Set up msvm and run the main job: the terminal demo, then JupyterLab on the quickstart notebook.
# Usage: scripts/lab.sh [--headless]   (--headless: the demo only, no JupyterLab)
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install -q --disable-pip-version-check -e ".[lab]"
# An editable install leaves the sources uncompiled, and where PYTHONDONTWRITEBYTECODE is set every process
# (each compile worker, each notebook kernel) would compile them again at import: byte-compile once.
python3 -m compileall -q msvm bench >/dev/null
python3 -m msvm demo
if [ "${1:-}" = "--headless" ]; then
  exit 0
fi
NB=notebooks/01_quickstart.ipynb
ROOT_FLAG=()
[ "$(id -u)" = 0 ] && ROOT_FLAG=(--allow-root)  # JupyterLab refuses to run as root without it (containers, CI)
exec python3 -m jupyter lab "$NB" --ip=127.0.0.1 ${ROOT_FLAG[@]+"${ROOT_FLAG[@]}"} ${JUPYTER_ARGS:-}
