#!/usr/bin/env bash
# Stop the slotflow devstack; --clean also deletes its data.
# See deploy/devstack/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [[ ! -x .venv/bin/python ]]; then
  echo "devstack: .venv/bin/python is missing; run make setup first" >&2
  exit 1
fi
exec .venv/bin/python deploy/devstack/devstack.py down "$@"
