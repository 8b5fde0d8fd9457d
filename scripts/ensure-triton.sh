#!/bin/sh
# Installs a real Triton Inference Server (2.51, CPU, Python backend) and the real
# perf_analyzer into DEST (default .triton) when they are missing, for the tests and
# benchmarks that use them as the ground truth.
#
#   usage: scripts/ensure-triton.sh [DEST] [PYTHON]
#
# Both wheels are only downloaded and unpacked, never pip-installed, so their pins
# never touch our environment.
#   * nvidia-pytriton 0.7.0 (manylinux_2_35) carries tritonserver 2.51, the Python
#     backend and one backend stub per Python version; the stub matching PYTHON's
#     version is copied into backends/python. The stub imports each model with the
#     `python3` first on PATH, which must have numpy 1.x: with numpy 2 the 2.51 stub
#     misreads BYTES tensors and crashes ("unpack_from requires a buffer of at least
#     33686022 bytes"). DEST/stub-venv is that environment, made with PYTHON.
#   * tritonclient 2.49.0 (manylinux1) ships the real perf_analyzer binary. It needs
#     libb64.so.0d and libcudart.so.12, which the pytriton wheel carries under hashed
#     names; DEST/lib holds links under the names perf_analyzer asks for.
# DEST/bin/tritonserver and DEST/bin/perf_analyzer are wrappers that set all that up.
set -eu
dest="${1:-.triton}"
python="${2:-${PYTHON:-python3}}"
pytriton_version=0.7.0
tritonclient_version=2.49.0
stamp="$dest/.installed-$pytriton_version-$tritonclient_version"
[ -f "$stamp" ] && exit 0

mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
echo "installing real tritonserver 2.51 (nvidia-pytriton $pytriton_version) and perf_analyzer $tritonclient_version into $dest"
rm -rf "$dest/wheels" "$dest/server" "$dest/client" "$dest/lib" "$dest/bin" "$dest/stub-venv"
mkdir -p "$dest/wheels" "$dest/lib" "$dest/bin"
"$python" -m venv "$dest/stub-venv"
python="$dest/stub-venv/bin/python"
"$python" -m pip install --quiet "numpy==1.26.4" 2>&1 | grep -v "^WARNING: Location" || true
"$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$dest/wheels" \
  "nvidia-pytriton==$pytriton_version" "tritonclient==$tritonclient_version" 2>&1 \
  | grep -v "^WARNING: Location" || true

"$python" - "$dest" <<'EOF'
"""Unpacks the two wheels (zipfile keeps no permissions, so executables get +x)."""
import glob
import os
import sys
import zipfile

dest = sys.argv[1]
(server_wheel,) = glob.glob(f"{dest}/wheels/nvidia_pytriton-*.whl")
(client_wheel,) = glob.glob(f"{dest}/wheels/tritonclient-*.whl")
with zipfile.ZipFile(server_wheel) as wheel:
    members = [m for m in wheel.namelist() if m.startswith(("pytriton/tritonserver/", "nvidia_pytriton.libs/"))]
    wheel.extractall(f"{dest}/server", members)
with zipfile.ZipFile(client_wheel) as wheel:
    (binary,) = [m for m in wheel.namelist() if m.endswith("/data/bin/perf_analyzer")]
    wheel.extract(binary, f"{dest}/client")
    os.replace(f"{dest}/client/{binary}", f"{dest}/client/perf_analyzer")
for path in glob.glob(f"{dest}/server/pytriton/tritonserver/bin/*") + glob.glob(
    f"{dest}/server/pytriton/tritonserver/python_backend_stubs/*/triton_python_backend_stub"
) + [f"{dest}/client/perf_analyzer"]:
    os.chmod(path, 0o755)
EOF

tritonserver_home="$dest/server/pytriton/tritonserver"
libs="$dest/server/nvidia_pytriton.libs"
py_version="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
stub="$tritonserver_home/python_backend_stubs/$py_version/triton_python_backend_stub"
[ -x "$stub" ] || { echo "no Python backend stub for Python $py_version in pytriton $pytriton_version" >&2; exit 1; }
cp "$stub" "$tritonserver_home/backends/python/"
ln -sf "$(ls "$libs"/libcudart-*.so.12*)" "$dest/lib/libcudart.so.12"
ln -sf "$(ls "$libs"/libb64-*.so.0d)" "$dest/lib/libb64.so.0d"
rm -rf "$dest/wheels"

python_bin="$(dirname "$python")"
cat > "$dest/bin/tritonserver" <<EOF
#!/bin/sh
# Real tritonserver 2.51 from nvidia-pytriton $pytriton_version; the Python backend's stub
# imports models with the python3 of $python_bin (numpy). Bind it to 127.0.0.1 yourself.
PATH="$python_bin:\$PATH" exec "$tritonserver_home/bin/tritonserver" \\
  --backend-directory "$tritonserver_home/backends" "\$@"
EOF
cat > "$dest/bin/perf_analyzer" <<EOF
#!/bin/sh
# Real perf_analyzer from tritonclient $tritonclient_version, with the two libraries it
# links against taken from the pytriton wheel.
LD_LIBRARY_PATH="$dest/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dest/client/perf_analyzer" "\$@"
EOF
chmod +x "$dest/bin/tritonserver" "$dest/bin/perf_analyzer"

# Fail here, not in the middle of the suite, when either binary cannot run.
missing="$(ldd "$tritonserver_home/bin/tritonserver" "$tritonserver_home/backends/python/triton_python_backend_stub" 2>&1 | grep 'not found' || true)"
missing="$missing$(LD_LIBRARY_PATH="$dest/lib" ldd "$dest/client/perf_analyzer" 2>&1 | grep 'not found' || true)"
[ -z "$missing" ] || { echo "real Triton install is missing libraries:$missing" >&2; exit 1; }
"$dest/bin/perf_analyzer" --version >/dev/null 2>&1 || "$dest/bin/perf_analyzer" --help >/dev/null 2>&1 || true
touch "$stamp"
