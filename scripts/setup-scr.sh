#!/usr/bin/env bash
# Packages the SCR/VeloC drop-in libraries and their tests need (crates/ckptfs-compat
# compiles its MPI glue with mpicc; tests/scr-veloc/run.sh builds C and Fortran MPI
# programs and runs them with mpirun): Open MPI and gfortran. Idempotent and quiet;
# apt-get update only when something is missing.
set -euo pipefail
have() { dpkg -s "$1" >/dev/null 2>&1; }
missing=()
for p in openmpi-bin libopenmpi-dev gfortran; do
    have "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-scr: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
        exit 1
    fi
    echo "setup-scr: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
