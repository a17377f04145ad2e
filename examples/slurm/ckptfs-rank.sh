#!/bin/bash
# One rank of examples/slurm/ckptfs-job.sh, started by srun (SLURM_PROCID, SLURMD_NODENAME):
# restart from the job's newest wholly recoverable dataset (CKPTFS_RESTART, restored
# from this node's memory, a partner's memory or the PFS), then run the heat
# simulation segment by segment, each segment's checkpoint a dataset.
set -uo pipefail
R=$SLURM_PROCID
export CKPTFS_RANK=$R CKPTFS_NRANKS=$SLURM_NTASKS CKPTFS_LOCAL_NRANKS=$((SLURM_NTASKS / SLURM_NNODES))
ck() { "$CK" --node-id "$SLURMD_NODENAME" "$@"; }
STEPS=$((HEAT_SEGMENTS * HEAT_EVERY))
HEAT="$JOBDIR/heat"
# The restart: every rank agrees on the newest dataset complete on every node and
# recoverable; its missing files come back first (CRC checked).
from=$(HEAT_SEGMENT=1 ck run --restart -- sh -c 'echo "${CKPTFS_RESTART:-}"' 2>"$JOBDIR/restart.$R.log") ||
    { echo "rank $R: run --restart failed" >&2; cat "$JOBDIR/restart.$R.log" >&2; exit 1; }
start=0
[ -n "$from" ] && start=${from#step}
echo "rank $R on $SLURMD_NODENAME: $([ -n "$from" ] && echo "restart from dataset $from$(grep -o ' from partner[^,]*' "$JOBDIR/restart.$R.log" | head -1)" || echo "first start")"
k=0
for T in $(seq $((start + HEAT_EVERY)) "$HEAT_EVERY" "$STEPS"); do
    ck ckpt begin "step$T" >/dev/null || exit 1
    HEAT_SEGMENT=1 HEAT_MAX_STEP=$((T - HEAT_EVERY)) ck run -- "$HEAT" "$HEAT_NX" "$HEAT_NY" "$T" "$HEAT_EVERY" "/ckpt/r$R" "$JOBDIR/r$R.bin" \
        >>"$JOBDIR/heat.$R.log" 2>&1 || { echo "rank $R: heat failed at step $T" >&2; exit 1; }
    ck ckpt complete >/dev/null || exit 1
    k=$((k + 1))
    [ "${STOP_AFTER:-0}" -gt 0 ] && [ $((T / HEAT_EVERY)) -ge "$STOP_AFTER" ] && break
done
exit 0
