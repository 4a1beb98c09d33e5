#!/usr/bin/env bash
# The whole test suite (the README's test command): installs what the tests drive
# (scripts/test-env.sh), then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test-env.sh
LATCH_TEST_PYTHON="$PWD/target/test-venv/bin/python" exec cargo test --workspace "$@"
