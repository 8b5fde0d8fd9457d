#!/bin/sh
# Installs tritonwatch into a virtual environment with the tested versions pinned.
# The Makefile and the Dockerfile both call this script, so the tests exercise the
# exact install steps the container image uses.
#   usage: scripts/install-python.sh VENV_DIR [EXTRAS] [editable]
set -eu
venv="$1"
extras="${2:-}"
mode="${3:-}"
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
target="$here"
[ -n "$extras" ] && target="$here[$extras]"
if [ "$mode" = "editable" ]; then
  "$venv/bin/python" -m pip install --quiet --constraint "$here/constraints.txt" --editable "$target"
else
  "$venv/bin/python" -m pip install --quiet --no-cache-dir --constraint "$here/constraints.txt" "$target"
fi
