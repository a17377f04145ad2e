#!/bin/bash
# One rank of examples/slurm/ckptfs-job.sh, started by srun (SLURM_PROCID, SLURMD_NODENAME).
#
#   ckptfs-rank.sh restart      restore the job's newest wholly recoverable dataset (from
#                               this node's memory, a partner's memory or the PFS, CRC
#                               checked) and print `start=STEP` (0: first start)
#   ckptfs-rank.sh segment T    advance the heat simulation to step T and checkpoint
#                               there, bracketed by `ckptfs ckpt begin/complete`: one
#                               job-wide dataset per segment
#
# The job script runs each as one srun step of all ranks: the step's end is the barrier
# that keeps a fast rank from beginning the next dataset before a slow one began this
# one (an MPI program would call MPI_Barrier around its checkpoint instead).
set -uo pipefail
R=$SLURM_PROCID
export CKPTFS_RANK=$R CKPTFS_NRANKS=$SLURM_NTASKS CKPTFS_LOCAL_NRANKS=$((SLURM_NTASKS / SLURM_NNODES))
# The node id this host runs as (a host replacing a lost node takes its id; nodes.map).
NODE=$(awk -v h="$SLURMD_NODENAME" '$1 == h { print $2 }' "${NODEMAP:-/dev/null}" 2>/dev/null)
NODE=${NODE:-$SLURMD_NODENAME}
WHERE=$NODE
[ "$NODE" = "$SLURMD_NODENAME" ] || WHERE="$NODE (host $SLURMD_NODENAME)"
ck() { "$CK" --node-id "$NODE" "$@"; }
HEAT="$JOBDIR/heat"
case "${1:-}" in
restart)
    from=$(HEAT_SEGMENT=1 ck run --restart -- sh -c 'echo "${CKPTFS_RESTART:-}"' 2>"$JOBDIR/restart.$R.log") ||
        { echo "rank $R: run --restart failed" >&2; cat "$JOBDIR/restart.$R.log" >&2; exit 1; }
    if [ -n "$from" ]; then
        echo "rank $R on $WHERE: restart from dataset $from$(grep -o ' from partner[^,]*' "$JOBDIR/restart.$R.log" | head -1)"
        echo "start=${from#step}"
    else
        echo "rank $R on $WHERE: first start"
        echo "start=0"
    fi
    ;;
segment)
    T=$2
    # Rank 0 begins first: its begin fixes the dataset's id job-wide, the other ranks
    # join it. (Concurrent first begins on two nodes can each take a new id; an MPI
    # program calls begin on rank 0, MPI_Barrier, then begin on the others.)
    if [ "$R" != 0 ]; then
        for _ in $(seq 1 600); do [ -e "$JOBDIR/begun.$T" ] && break; sleep 0.05; done
        [ -e "$JOBDIR/begun.$T" ] || { echo "rank $R: rank 0 did not begin step$T" >&2; exit 1; }
    fi
    # The ranks of one node checkpoint one after the other: a rank's `ckpt complete`
    # judges every file of the node written since the dataset began, and a file another
    # rank of the node still has open (heat's heat.T.tmp before its rename) would make
    # the dataset incomplete (docs/slurm.md, "Limits").
    exec 9>"$JOBDIR/node.$SLURMD_NODENAME.lock"
    flock 9
    ck ckpt begin "step$T" >/dev/null 2>>"$JOBDIR/ckpt.$R.log" || { echo "rank $R: ckpt begin step$T failed: $(tail -1 "$JOBDIR/ckpt.$R.log")" >&2; exit 1; }
    [ "$R" = 0 ] && : >"$JOBDIR/begun.$T"
    HEAT_SEGMENT=1 HEAT_MAX_STEP=$((T - HEAT_EVERY)) ck run -- "$HEAT" "$HEAT_NX" "$HEAT_NY" "$T" "$HEAT_EVERY" "/ckpt/r$R" "$JOBDIR/r$R.bin" \
        >>"$JOBDIR/heat.$R.log" 2>&1 || { echo "rank $R: heat failed at step $T" >&2; exit 1; }
    ck ckpt complete >/dev/null 2>>"$JOBDIR/ckpt.$R.log" || { echo "rank $R: ckpt complete step$T failed: $(tail -1 "$JOBDIR/ckpt.$R.log")" >&2; exit 1; }
    flock -u 9
    ;;
*)
    echo "usage: ckptfs-rank.sh restart | segment STEP" >&2
    exit 2
    ;;
esac
