#!/usr/bin/env bash
# The S3 server of the object-level tests and `ckptfs bench object` (docs/object.md):
# versitygw (an S3 gateway over a POSIX directory) built from the Go module proxy with the
# installed Go toolchain, into .tools/s3/bin of the checkout (cached: built once per pinned
# version); and the AWS command-line client (PyPI `awscli`), the well-known client the
# benchmark compares against, in a small venv of its own (.tools/s3/venv).
# Idempotent and quiet; skipped with CKPTFS_SKIP_S3=1. Without Go the S3 tests print SKIPPED.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${CKPTFS_SKIP_S3:-0}" = 1 ]; then
    echo "setup-s3: skipped (CKPTFS_SKIP_S3=1)"
    exit 0
fi

VERSITYGW_VERSION=${CKPTFS_VERSITYGW_VERSION:-v1.8.0}
bin_dir=$PWD/.tools/s3/bin
stamp=$bin_dir/.versitygw-version
# The binary is also kept outside the checkout, by version (CI clones afresh each run):
# a fresh checkout copies it instead of building it again.
gw_cache=${XDG_CACHE_HOME:-$HOME/.cache}/ckptfs/tools/versitygw-$VERSITYGW_VERSION
if [ -x "$bin_dir/versitygw" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$VERSITYGW_VERSION" ]; then
    :
elif [ -x "$gw_cache/versitygw" ]; then
    mkdir -p "$bin_dir"
    cp "$gw_cache/versitygw" "$bin_dir/versitygw"
    echo "$VERSITYGW_VERSION" >"$stamp"
elif ! command -v go >/dev/null 2>&1; then
    echo "setup-s3: no Go toolchain: the S3 tests will be SKIPPED (install Go >= 1.22)" >&2
else
    mkdir -p "$bin_dir"
    start=$(date +%s)
    echo "setup-s3: building versitygw $VERSITYGW_VERSION with go install (1.5-5 min)"
    if GOBIN=$bin_dir CGO_ENABLED=0 GOFLAGS=-trimpath \
        go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"; then
        echo "$VERSITYGW_VERSION" >"$stamp"
        echo "setup-s3: versitygw built in $(( $(date +%s) - start )) s"
    else
        echo "setup-s3: go install of versitygw failed: the S3 tests will be SKIPPED" >&2
    fi
fi
# Into the cache whole or not at all (setups of other checkouts may look meanwhile).
if [ -x "$bin_dir/versitygw" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$VERSITYGW_VERSION" ] &&
    [ ! -x "$gw_cache/versitygw" ] && mkdir -p "${gw_cache%/*}" && tmp=$(mktemp -d "${gw_cache%/*}/.new.XXXXXX"); then
    cp "$bin_dir/versitygw" "$tmp"/ && chmod 755 "$tmp" && mv -T "$tmp" "$gw_cache" 2>/dev/null || rm -rf "$tmp"
fi

# Optional: the benchmark and the tests say so without it.
venv=$PWD/.tools/s3/venv
if [ ! -x "$venv/bin/aws" ]; then
    echo "setup-s3: installing awscli into .tools/s3/venv"
    if ! { python3 -m venv "$venv" >/dev/null 2>&1 && "$venv/bin/python" -m pip install -q awscli; }; then
        echo "setup-s3: awscli not installed (bench object and tests/s3 skip the comparison)" >&2
    fi
fi
exit 0
