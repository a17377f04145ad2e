#!/usr/bin/env bash
# The Python suite (docs/python.md): pytest in the checkout's .venv, which
# scripts/setup-python.sh creates (scripts/test.sh runs setup first).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${CKPTFS_SKIP_PYTHON:-0}" = 1 ]; then
    echo "tests/python: skipped (CKPTFS_SKIP_PYTHON=1)"
    exit 0
fi
[ -x .venv/bin/python ] || bash scripts/setup-python.sh
bash scripts/setup-python.sh   # rebuilds the wheel only if its sources changed
exec .venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"
