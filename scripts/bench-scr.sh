#!/usr/bin/env bash
# Checkpoint bandwidth of an SCR-style program (tests/scr-veloc/scr_bench.c: each rank
# writes a file per checkpoint, fsync, complete) through ckptfs's libscr.so, against the
# same program writing into a plain tmpfs directory and onto disk, in one run.
#
#   scripts/bench-scr.sh [RANKS [MIB_PER_RANK [REPS]]]      (default 4 64 5)
#
# Figures depend on the machine and its load: compare only within one run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ranks=${1:-4}
mib=${2:-64}
reps=${3:-5}
libdir="${CARGO_TARGET_DIR:-$root/target}/release"
(cd "$root" && cargo build --release -q -p ckptfs-scr -p ckptfs-cli)
out="$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-bench-scr.XXXXXX")"
disk="$(mktemp -d "${BENCH_DISK_DIR:-/var/tmp}/ckptfs-bench-scr.XXXXXX")"
tmpfs="$(mktemp -d /dev/shm/ckptfs-bench-scr.XXXXXX)"
export CKPTFS_STORE="bench-scr-$$" CKPTFS_JOB="bench" CKPTFS_STAGE_DIR="$out/stage" SCR_FLUSH=0
# Every checkpoint stays in the store (SCR_FLUSH=0: none is protected on the PFS, so
# none is evicted): size it for all of them.
export CKPTFS_MEM_SIZE=$((ranks * mib * (reps + 1) + 256))M LD_LIBRARY_PATH="$libdir"
trap '"$libdir/ckptfs" destroy >/dev/null 2>&1; rm -rf "$out" "$disk" "$tmpfs"' EXIT
mpicc -O2 -I "$root/include" "$root/tests/scr-veloc/scr_bench.c" -L "$libdir" -lscr -o "$out/scr_bench"
mpirun=(mpirun --oversubscribe -np "$ranks")
[[ "$(id -u)" == 0 ]] && mpirun+=(--allow-run-as-root)
mkdir -p "$out/prefix"
echo "# $ranks ranks x $mib MiB per checkpoint, $reps checkpoints each; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$out/prefix" && "${mpirun[@]}" "$out/scr_bench" scr "$mib" "$reps")
"${mpirun[@]}" "$out/scr_bench" plain "$mib" "$reps" "$tmpfs"
"${mpirun[@]}" "$out/scr_bench" plain "$mib" "$reps" "$disk"
