#!/usr/bin/env bash
# The Python part (docs/python.md): a virtual environment at .venv/ in the checkout with
# the test dependencies (torch CPU included) and the ckptfs wheel built by maturin.
# Idempotent: packages are installed only when missing, the wheel is rebuilt only when
# its sources changed (a stamp of their checksums). Skipped with CKPTFS_SKIP_PYTHON=1.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${CKPTFS_SKIP_PYTHON:-0}" = 1 ] && { echo "setup-python: skipped (CKPTFS_SKIP_PYTHON=1)"; exit 0; }

PY=${CKPTFS_PYTHON:-python3}
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends python3-venv python3-dev >/dev/null
    else
        echo "setup-python: $PY lacks venv/ensurepip (install python3-venv)" >&2
        exit 1
    fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python

deps=(maturin numpy pandas pyarrow fsspec pytest hypothesis safetensors)
if ! "$VPY" -c 'import maturin, numpy, pandas, pyarrow, fsspec, pytest, hypothesis, safetensors' >/dev/null 2>&1; then
    echo "setup-python: installing ${deps[*]}"
    "$VPY" -m pip install -q "${deps[@]}"
fi
if ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
    start=$(date +%s)
    # PyPI's torch for Linux pulls the CUDA runtime packages (docs/python.md: time, size).
    "$VPY" -m pip install -q torch
    echo "setup-python: torch installed in $(( $(date +%s) - start )) s"
fi

stamp=.venv/.ckptfs-wheel.stamp
sum=$(find crates/ckptfs-python crates/ckptfs-store crates/ckptfs-crc crates/ckptfs-settings crates/ckptfs-datasets \
        crates/ckptfs-object crates/ckptfs-dirlevel \
        crates/ckptfs-agent crates/ckptfs-policy crates/ckptfs-runtime crates/ckptfs-node crates/ckptfs-partner crates/ckptfs-cluster \
        crates/ckptfs-transport crates/ckptfs-level python \
        -path '*/target' -prune -o -path '*/__pycache__' -prune -o -type f -print0 \
        | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ] || ! "$VPY" -c 'import ckptfs._native' >/dev/null 2>&1; then
    echo "setup-python: building the ckptfs wheel (maturin)"
    rm -rf target/wheels-python
    (cd python && PYO3_PYTHON="$OLDPWD/$VPY" CARGO_TARGET_DIR="$OLDPWD/target" \
        ../.venv/bin/maturin build --release --quiet -i ../.venv/bin/python -o ../target/wheels-python)
    "$VPY" -m pip install -q --force-reinstall --no-deps target/wheels-python/ckptfs-*.whl
    echo "$sum" > "$stamp"
fi
