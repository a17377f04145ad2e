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
# The wheel's inputs: every path crate of crates/ckptfs-python's dependency tree (its own
# workspace and lock file, from cargo metadata; all of crates/ if that cannot say), the
# Python package, the toolchain and the interpreter.
crates=$(cargo metadata --manifest-path crates/ckptfs-python/Cargo.toml --format-version 1 --offline 2>/dev/null |
    "$VPY" -c 'import json, os, sys
m = json.load(sys.stdin)
print("\n".join(sorted(os.path.relpath(os.path.dirname(p["manifest_path"])) for p in m["packages"] if p["source"] is None)))' \
    2>/dev/null) || crates=crates
[ -n "$crates" ] || crates=crates
sum=$( { find $crates python -path '*/target' -prune -o -path '*/__pycache__' -prune -o -type f -print0 |
        sort -z | xargs -0 sha256sum; rustc -vV; "$VPY" -V; } | sha256sum | cut -d' ' -f1)
# Built wheels are kept by that sum outside the checkout (CI clones afresh each run):
# the same inputs give the wheel built before instead of another maturin build.
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ckptfs/wheels/$sum
if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ] || ! "$VPY" -c 'import ckptfs._native' >/dev/null 2>&1; then
    rm -rf target/wheels-python
    if ls "$cache"/ckptfs-*.whl >/dev/null 2>&1; then
        echo "setup-python: the ckptfs wheel of these sources, built before ($cache)"
        mkdir -p target/wheels-python
        cp "$cache"/ckptfs-*.whl target/wheels-python/
    else
        echo "setup-python: building the ckptfs wheel (maturin)"
        (cd python && PYO3_PYTHON="$OLDPWD/$VPY" CARGO_TARGET_DIR="$OLDPWD/target" \
            ../.venv/bin/maturin build --release --quiet -i ../.venv/bin/python -o ../target/wheels-python)
    fi
    "$VPY" -m pip install -q --force-reinstall --no-deps target/wheels-python/ckptfs-*.whl
    echo "$sum" > "$stamp"
fi
# Into the cache whole or not at all (setups of other checkouts may look meanwhile).
if [ ! -d "$cache" ] && ls target/wheels-python/ckptfs-*.whl >/dev/null 2>&1 &&
    mkdir -p "${cache%/*}" && tmp=$(mktemp -d "${cache%/*}/.new.XXXXXX"); then
    cp target/wheels-python/ckptfs-*.whl "$tmp"/ && chmod 755 "$tmp" && mv -T "$tmp" "$cache" 2>/dev/null || rm -rf "$tmp"
fi
