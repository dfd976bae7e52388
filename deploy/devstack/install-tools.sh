#!/usr/bin/env bash
# Debian packages the tests drive: chromium (the dashboard's headless browser test), fonts for its
# screenshots, kcat (a Kafka client that is not ours, for the interoperability test), faketime
# (libfaketime: the ticker's chaos test skews a replica's host clock by +/-30 s), and promtool
# (Prometheus's checker of rules and metrics: `make lint` tests the alert rules with it,
# tests/integration/monitoring checks every service's /metrics).
# Idempotent and quick when everything is there: apt runs only for what is missing.
#   install-tools.sh             everything
#   install-tools.sh promtool    only the tools named (make lint needs only promtool)
set -euo pipefail

all=(chromium fonts-liberation kcat faketime promtool)
wanted=("$@")
if [ "${#wanted[@]}" -eq 0 ]; then
  wanted=("${all[@]}")
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
updated=0
apt_update() {
  if [ "$updated" -eq 0 ]; then
    $sudo apt-get update -qq >&2
    updated=1
  fi
}

missing=()
promtool=0
for package in "${wanted[@]}"; do
  if [ "$package" = promtool ]; then
    command -v promtool >/dev/null 2>&1 || promtool=1
  elif ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

export DEBIAN_FRONTEND=noninteractive
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-tools: installing ${missing[*]}" >&2
  apt_update
  $sudo apt-get install -y -qq "${missing[@]}" >&2
fi

if [ "$promtool" -eq 1 ]; then
  # promtool is the one binary wanted of Debian's `prometheus` package: installing the package
  # would also start a Prometheus server (its maintainer script does) that nothing here needs, and
  # bring a web UI's JavaScript libraries. So the package is downloaded and promtool alone taken
  # out of it (a static Go binary: it needs only libc).
  echo "install-tools: installing promtool (from Debian's prometheus package)" >&2
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  chmod 0755 "$scratch"  # apt's download sandbox user writes here
  if ! (cd "$scratch" && apt-get download prometheus >/dev/null 2>&1); then
    apt_update
    (cd "$scratch" && apt-get download prometheus >&2)
  fi
  dpkg-deb --fsys-tarfile "$scratch"/prometheus_*.deb | tar -xO ./usr/bin/promtool >"$scratch/promtool"
  $sudo install -m 0755 "$scratch/promtool" /usr/local/bin/promtool
  promtool --version >&2
fi
