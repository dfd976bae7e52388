#!/usr/bin/env bash
# Show whether the slotflow devstack runs; exit 0 if Kafka and PostgreSQL are both up, 3 if not.
# See deploy/devstack/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [[ ! -x .venv/bin/python ]]; then
  echo "devstack: .venv/bin/python is missing; run make setup first" >&2
  exit 1
fi
exec .venv/bin/python deploy/devstack/devstack.py status "$@"
