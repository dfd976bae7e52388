#!/usr/bin/env bash
# Start the slotflow devstack (Kafka and PostgreSQL on 127.0.0.1) and print its env.
# See deploy/devstack/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [[ ! -x .venv/bin/python ]]; then
  echo "devstack: .venv/bin/python is missing; run make setup first" >&2
  exit 1
fi
exec .venv/bin/python deploy/devstack/devstack.py up "$@"
