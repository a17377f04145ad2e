#!/bin/sh
# ckptfs node preparation, run as root by slurmd before a job's first step on the node
# (slurm.conf: Prolog=/path/to/prolog.sh; docs/slurm.md). Two settings that need root:
#
#   1. a tmpfs with transparent huge pages for the node stores (the `shm_dir` setting):
#      a fresh process's first checkpoint and a restart run at the steady-state rate
#      instead of paying ~140 ms per GiB for page tables. Mounted once per host, mode
#      1777 like /dev/shm (the store checks ownership on the descriptor it opens), size
#      CKPTFS_PROLOG_HUGE_SIZE (default: half the memory).
#   2. FUSE requests over io_uring (the fuse module's enable_uring), for `ckptfs mount`.
#
# Never fails the job (a prolog that exits non-zero drains the node): a step that
# cannot be done is logged with logger and the job gets the defaults without it.
# The job script uses the mount when it is there (examples/slurm/ckptfs-job.sh).
DIR=${CKPTFS_PROLOG_HUGE_DIR:-/dev/shm-ckptfs}
log() { logger -t ckptfs-prolog "$*" 2>/dev/null || true; }
(
    flock -w 30 9 || exit 0
    if ! mountpoint -q "$DIR"; then
        size=${CKPTFS_PROLOG_HUGE_SIZE:-50%}
        mkdir -p "$DIR" && chmod 1777 "$DIR" &&
            mount -t tmpfs -o "huge=within_size,size=$size,mode=1777,nosuid,nodev" ckptfs-huge "$DIR" ||
            log "cannot mount the huge-page tmpfs on $DIR"
    fi
    p=/sys/module/fuse/parameters/enable_uring
    if [ -w "$p" ] && [ "$(cat "$p")" != Y ]; then
        echo Y >"$p" 2>/dev/null || log "cannot set $p"
    fi
) 9>/run/ckptfs-prolog.lock
exit 0
