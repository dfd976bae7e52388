#!/usr/bin/env bash
# Compile deploy/docker/requirements*.in into requirements*.lock: every package the image installs,
# transitive ones included, pinned, with the sha256 of each of its files on the index (any platform's
# wheel and the sdist), so `pip install --require-hashes` in the Dockerfile installs exactly those
# bytes or fails. Run after changing a pin in requirements-dev.txt or services/stats/requirements.txt
# (tests/unit/deploy/test_image.py says when a lock no longer fits them) and commit the locks.
# pip-tools runs from a virtualenv of its own under .cache: it is a tool of this script only.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLS="$(realpath -m "${SLOTFLOW_DEVSTACK_CACHE:-.cache}/pip-tools")"
if [[ ! -x "$TOOLS/bin/pip-compile" ]]; then
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q pip-tools==7.6.2
fi
for name in requirements requirements-stats requirements-build; do
  # A find-links folder of this machine stays out (its wheels are no index's); relative paths, so
  # the lock's comments name repository files and nothing of this machine.
  (cd deploy/docker && env -u PIP_FIND_LINKS CUSTOM_COMPILE_COMMAND="deploy/docker/lock.sh" \
    "$TOOLS/bin/pip-compile" \
    --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
    --resolver=backtracking --output-file "$name.lock" "$name.in")
done
