#!/usr/bin/env bash
# Debian packages the tests drive: chromium (the dashboard's headless browser test), fonts for its
# screenshots, kcat (a Kafka client that is not ours, for the interoperability test), and faketime
# (libfaketime: the ticker's chaos test skews a replica's host clock by +/-30 s).
# Idempotent and quick when everything is there: apt runs only for what is missing.
set -euo pipefail

wanted=(chromium fonts-liberation kcat faketime)
missing=()
for package in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "install-tools: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq "${missing[@]}" >&2
