#!/bin/sh
# Installs what `make bench` measures against, from Debian, when it is missing: wrk
# (the load-generation anchor), nginx-light (a near-zero-latency endpoint for wrk and
# for us) and prometheus-node-exporter (the footprint anchor). `make bench` runs
# scripts/ensure-debian-packages.sh first for Alertmanager (detection time).
# The benchmarks start their own copies on loopback ports, so the packages' system
# services must not start: node-exporter's would listen on every interface. Unless the
# machine already has a policy-rc.d (containers do), a temporary one says "no".
set -eu
missing=""
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx-light"
command -v prometheus-node-exporter >/dev/null 2>&1 || missing="$missing prometheus-node-exporter"
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    trap '$sudo rm -f "$policy"' EXIT
fi
echo "installing Debian packages for make bench:$missing"
$sudo apt-get update -q
# shellcheck disable=SC2086  # the package list is meant to split into words
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
