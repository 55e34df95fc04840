#!/usr/bin/env bash
# Create .venv (or $VENV), install torch and looped (editable) with the test extras.
# torch: LOOPED_TORCH picks the requirement (default torch==2.13.0, the release this project is tested on;
# on a machine where it is not available, any torch>=2.4 works: LOOPED_TORCH='torch>=2.4').
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  "$py" -m pip install -q "${LOOPED_TORCH:-torch==2.13.0}"
fi
"$py" -m pip install -q -e ".[dev]"
"$py" -c "import torch, looped; print(f'looped {looped.__version__} ready (torch {torch.__version__}) in $venv')"
