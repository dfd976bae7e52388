#!/usr/bin/env bash
# Prints the one fault-suite seed a CI run uses: one of the comma-separated seeds given, chosen from
# the checked-out commit, so the same commit always draws the same seed and successive commits
# spread over all of them. Outside a git checkout it prints the first seed.
set -euo pipefail
IFS=, read -r -a seeds <<<"${1:?usage: chaos-seed.sh SEED[,SEED...]}"
commit="$(git rev-parse HEAD 2>/dev/null || true)"
if [[ -z "$commit" ]]; then
  echo "${seeds[0]}"
  exit 0
fi
echo "${seeds[$(( 16#${commit:0:8} % ${#seeds[@]} ))]}"
