#!/bin/sh
# Installs the real servers the end-to-end tests talk to (Prometheus with promtool,
# Alertmanager with amtool) from Debian when they are missing. CI runs as root.
set -eu
missing=""
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v prometheus-alertmanager >/dev/null 2>&1 || missing="$missing prometheus-alertmanager"
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing Debian packages:$missing"
$sudo apt-get update -q
# shellcheck disable=SC2086  # the package list is meant to split into words
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
