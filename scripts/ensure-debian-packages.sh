#!/bin/sh
# Installs the real programs the end-to-end tests use (Prometheus with promtool,
# Alertmanager with amtool, Chromium for the status page) from Debian when they are
# missing. CI runs as root.
set -eu
missing=""
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v prometheus-alertmanager >/dev/null 2>&1 || missing="$missing prometheus-alertmanager"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing Debian packages:$missing"
$sudo apt-get update -q
# shellcheck disable=SC2086  # the package list is meant to split into words
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
