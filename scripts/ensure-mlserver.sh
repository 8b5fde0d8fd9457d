#!/bin/sh
# Installs a real Seldon MLServer (1.7.1) into DEST/venv (default .mlserver) when it is
# missing, for the tests that check the canary against a KServe v2 server that is not
# Triton: no binary tensor extension in `GET /v2`, no model config API.
#
#   usage: scripts/ensure-mlserver.sh [DEST] [PYTHON]
#
# MLServer gets a venv of its own, so its pins (fastapi, pandas, its own tritonclient)
# never touch ours. Its framework dependencies are pinned below to the versions the
# tests last passed with; the rest follow mlserver's own bounds. About 60 MB of wheels,
# 330 MB installed, about a minute on two cores.
set -eu
dest="${1:-.mlserver}"
python="${2:-${PYTHON:-python3}}"
mlserver_version=1.7.1
pins_revision=1 # bump when the pins below change, so installed copies are redone
stamp="$dest/.installed-$mlserver_version-$pins_revision"
[ -f "$stamp" ] && exit 0

mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
echo "installing real MLServer $mlserver_version into $dest/venv"
rm -rf "$dest/venv" "$dest"/.installed-*
cat > "$dest/constraints.txt" <<'EOF'
fastapi==0.115.14
starlette==0.46.2
uvicorn==0.54.0
pydantic==2.14.4
pydantic_core==2.50.5
pydantic-settings==2.16.3
numpy==2.4.6
pandas==3.1.1
grpcio==1.85.3
protobuf==6.33.6
orjson==3.13.0
EOF
"$python" -m venv "$dest/venv"
"$dest/venv/bin/python" -m pip install --quiet --only-binary=:all: \
  --constraint "$dest/constraints.txt" "mlserver==$mlserver_version" 2>&1 \
  | grep -v "^WARNING: Location" || true

# Fail here, not in the middle of the suite, when it cannot run.
version="$("$dest/venv/bin/mlserver" --version 2>&1 || true)"
case "$version" in
  *"$mlserver_version"*) ;;
  *) echo "MLServer install in $dest/venv does not run: $version" >&2; exit 1 ;;
esac
touch "$stamp"
