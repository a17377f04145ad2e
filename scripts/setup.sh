#!/usr/bin/env bash
# Install what ckptfs needs on a fresh Debian machine (idempotent, quiet).
# Rust comes from rustup (already on the development and CI machines); Debian packages
# and Python packages for the tests are installed here, by the project itself.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
have() { dpkg -s "$1" >/dev/null 2>&1; }
for p in build-essential g++ pkg-config python3 tar gzip rsync findutils coreutils fonts-dejavu-core; do
  have "$p" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need_pkgs[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "setup: installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# Per-part setup scripts (FUSE: fuse3; preload/agent test needs ...).
for s in scripts/setup-*.sh; do
  [ -e "$s" ] || continue
  bash "$s"
done

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi
