#!/usr/bin/env bash
# Install what the FUSE mount and its tests need: fusermount3 (Debian's fuse3) and the
# tools the real-program comparison tests run (rsync, tar, gzip). Idempotent and quiet.
set -euo pipefail

need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v rsync >/dev/null 2>&1 || need+=(rsync)
command -v tar >/dev/null 2>&1 || need+=(tar)
command -v gzip >/dev/null 2>&1 || need+=(gzip)
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
# pjdfstest (tests/fuse/pjdfstest.sh) links libacl.
dpkg -s libacl1-dev >/dev/null 2>&1 || need+=(libacl1-dev)

if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "setup-fuse.sh: installing ${need[*]} failed" >&2
        exit 1
    fi
    rm -f "$log"
fi

# /dev/fuse is usually there; create the node if the kernel has the module but no node.
if [ ! -e /dev/fuse ] && [ "$(id -u)" -eq 0 ]; then
    modprobe fuse 2>/dev/null || true
    [ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229 || true
fi
# Let non-root mounts use allow_other if ever needed (harmless as root).
if [ -w /etc/fuse.conf ] && ! grep -q '^user_allow_other' /etc/fuse.conf; then
    echo user_allow_other >>/etc/fuse.conf
fi

# pjdfstest, the POSIX conformance suite (Rust port, crates.io) run by
# tests/fuse/pjdfstest.sh, in the project-local .tools/ (about 1.5 min once; kept).
# The binary is also kept outside the checkout, by version (CI clones afresh each run):
# a fresh checkout copies it instead of building it again.
root=$(cd "$(dirname "$0")/.." && pwd)
pjd_version=0.2.2
pjd_cache=${XDG_CACHE_HOME:-$HOME/.cache}/ckptfs/tools/pjdfstest-$pjd_version
if [ ! -x "$root/.tools/bin/pjdfstest" ] && [ -x "$pjd_cache/pjdfstest" ]; then
    mkdir -p "$root/.tools/bin"
    cp "$pjd_cache/pjdfstest" "$root/.tools/bin/pjdfstest"
fi
if [ ! -x "$root/.tools/bin/pjdfstest" ] && command -v cargo >/dev/null 2>&1; then
    log=$(mktemp)
    if ! cargo install --quiet --locked --root "$root/.tools" pjdfstest --version "$pjd_version" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "setup-fuse.sh: cargo install pjdfstest failed" >&2
        exit 1
    fi
    rm -f "$log"
fi
# Into the cache whole or not at all (setups of other checkouts may look meanwhile).
if [ -x "$root/.tools/bin/pjdfstest" ] && [ ! -x "$pjd_cache/pjdfstest" ] &&
    mkdir -p "${pjd_cache%/*}" && tmp=$(mktemp -d "${pjd_cache%/*}/.new.XXXXXX"); then
    cp "$root/.tools/bin/pjdfstest" "$tmp"/ && chmod 755 "$tmp" && mv -T "$tmp" "$pjd_cache" 2>/dev/null || rm -rf "$tmp"
fi
