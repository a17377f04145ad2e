#!/bin/bash
# The two root settings the prolog prepares, measured inside a Slurm job step, both
# ways in one job (docs/benchmarks.md, "Under Slurm"): the store on the prolog's
# huge-page tmpfs (shm_dir, /dev/shm-ckptfs: `ckptfs bench store --huge-dir`, its
# huge-page rows) against /dev/shm, what a job gets without the prolog (its 4 KiB-page
# rows), for a fresh process's first checkpoint and restart read; and the FUSE store
# mount over io_uring (the prolog's enable_uring) against /dev/fuse, what a mount gets
# without it (`ckptfs bench fuse`, its store-mount and store-mount-devfuse rows).
# Prints what the job got from the prolog, then the benchmarks' tables.
#
#   sbatch --wait -o bench-%j.out examples/slurm/bench-job.sh
#
#SBATCH --job-name=ckptfs-bench
#SBATCH --partition=ckptfs
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --exclusive
set -uo pipefail
SUBMIT=${SLURM_SUBMIT_DIR:-$PWD}
CK=${CKPTFS_BIN:-$(command -v ckptfs || echo "$SUBMIT/target/release/ckptfs")}
echo "node $SLURMD_NODENAME, job $SLURM_JOB_ID, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "prolog: huge-page tmpfs $(mountpoint -q /dev/shm-ckptfs && grep ' /dev/shm-ckptfs ' /proc/mounts | cut -d' ' -f4 || echo 'not mounted')"
echo "prolog: fuse enable_uring = $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo unknown)"
# The huge-page rows on the prolog's own mount when it is there (else the bench mounts
# one as root, or skips the rows).
huge=()
mountpoint -q /dev/shm-ckptfs 2>/dev/null && huge=(--huge-dir /dev/shm-ckptfs)
echo "bench store: huge-page rows in ${huge[1]:-a tmpfs the bench mounts (root) or none}"
srun --overlap "$CK" bench store --procs "${BENCH_PROCS:-2}" --file-size "${BENCH_FILE_SIZE:-256M}" --no-sweep --no-spill \
    --small-files 0 --reps "${BENCH_REPS:-3}" "${huge[@]}"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
srun --overlap "$CK" bench fuse --reps "${BENCH_REPS:-3}"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
