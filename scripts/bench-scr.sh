#!/usr/bin/env bash
# Checkpoint bandwidth of an SCR-style MPI program through ckptfs's libscr.so against
# the store through the preload shim, a tmpfs directory and a disk directory, in one
# run: builds what it needs, then runs `ckptfs bench scr` (docs/scr-veloc.md).
#
#   scripts/bench-scr.sh [RANKS [MIB_PER_RANK [REPS]]]      (default 4 64 5)
#
# Figures depend on the machine and its load: compare only within one run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
libdir="${CARGO_TARGET_DIR:-$root/target}/release"
(cd "$root" && cargo build --release -q -p ckptfs-scr -p ckptfs-preload -p ckptfs-cli)
exec "$libdir/ckptfs" bench scr --ranks "${1:-4}" --mib "${2:-64}" --reps "${3:-5}" \
    --disk-dir "${BENCH_DISK_DIR:-/var/tmp}"
