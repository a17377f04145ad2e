#!/bin/bash
# The two root settings the prolog prepares, measured inside a Slurm job step
# (docs/benchmarks.md, "Under Slurm"): the store on the huge-page tmpfs (shm_dir) vs
# /dev/shm for a fresh process's first checkpoint and restart read (`ckptfs bench store`,
# its huge-page rows, baselines of the same run), and the FUSE store mount with the
# prolog's enable_uring (`ckptfs bench fuse`, its mount rows). Prints what the job got
# from the prolog, then the benchmarks' tables.
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
srun --overlap "$CK" bench store --procs "${BENCH_PROCS:-2}" --file-size "${BENCH_FILE_SIZE:-256M}" --no-sweep --no-spill \
    --small-files 0 --reps "${BENCH_REPS:-3}"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
srun --overlap "$CK" bench fuse --reps "${BENCH_REPS:-3}"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
