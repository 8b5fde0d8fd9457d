#!/bin/sh
# Installs what `make image-test` builds and runs the image with, from Debian, when
# missing: podman (with runc: the default crun refuses this machine's hybrid cgroups)
# and mmdebstrap (the Debian base image, made from Debian's packages). CI runs as root.
set -eu
missing=""
command -v podman >/dev/null 2>&1 || missing="$missing podman"
command -v runc >/dev/null 2>&1 || missing="$missing runc"
command -v mmdebstrap >/dev/null 2>&1 || missing="$missing mmdebstrap"
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing Debian packages:$missing"
$sudo apt-get update -q
# shellcheck disable=SC2086  # the package list is meant to split into words
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q $missing
