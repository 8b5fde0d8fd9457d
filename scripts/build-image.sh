#!/bin/sh
# Builds the Dockerfile's image with podman: `make image-test` runs its tests on it.
#   usage: scripts/build-image.sh [TAG]      (default localhost/tritonwatch:test)
#
# The base is a Debian bookworm with Python 3.11 made by mmdebstrap from Debian's own
# packages (no image registry is reachable here), imported once and kept in podman's
# storage between runs. The build reaches PyPI through this host's CA bundle and pip
# settings, mounted into the build's RUN steps only (nothing of them is in the image).
# Where podman cannot build (not installed, no user namespaces), it says why and exits 3.
set -eu
here="$(cd "$(dirname "$0")/.." && pwd)"
tag="${1:-localhost/tritonwatch:test}"
base="localhost/tritonwatch-base:bookworm"
export CONTAINERS_CONF="$here/tests/image/containers.conf"
if ! command -v podman >/dev/null 2>&1; then
  echo "build-image: podman is not installed (scripts/ensure-image-tools.sh installs it)"
  exit 3
fi
if ! podman image exists "$base"; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  echo "build-image: making the $base base with mmdebstrap"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$work/base.tar"
  podman import --quiet "$work/base.tar" "$base" >/dev/null
fi
pip_conf="$(mktemp)"
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$pip_conf"
revision="$(git -C "$here" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
status=0
podman build --quiet --network host \
  --volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
  --volume "$pip_conf:/etc/pip.conf:ro" \
  --build-arg BASE_IMAGE="$base" --build-arg REVISION="$revision" \
  --tag "$tag" --file "$here/Dockerfile" "$here" >/dev/null || status=$?
rm -f "$pip_conf"
[ "$status" -eq 0 ] && echo "build-image: built $tag (revision $revision)"
exit "$status"
