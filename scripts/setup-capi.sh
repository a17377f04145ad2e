#!/usr/bin/env bash
# Packages the C ABI tests need (tests/c/run.sh, cargo test -p ckptfs-capi): a C and a
# C++ compiler. Idempotent and quiet; apt-get update only when something is missing.
set -euo pipefail
missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
