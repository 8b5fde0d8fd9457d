#!/bin/sh
# GPU check (about a minute, at most 150 s): the NVML collector with the real pynvml on
# this machine's GPU 0, idle, under a PyTorch bf16 matmul load, and after; prints a table
# and fails unless utilisation and power rise under load and fall after.
#
#   scripts/gpu_check.sh [--load-seconds 15 ...]
#
# PYTHON runs the collector (default: the project's .venv, else python3); LOAD_PYTHON
# runs the load (default: the first of PYTHON and python3 that has torch with CUDA;
# without one, the load part is skipped and says so).
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
if [ -z "${LOAD_PYTHON:-}" ]; then
    for candidate in "$PYTHON" python3; do
        if "$candidate" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' \
            >/dev/null 2>&1; then
            LOAD_PYTHON=$candidate
            break
        fi
    done
fi
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 150 "$PYTHON" scripts/gpu_check.py ${LOAD_PYTHON:+--load-python "$LOAD_PYTHON"} "$@"
