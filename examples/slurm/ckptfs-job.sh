#!/bin/bash
# ckptfs under Slurm (docs/slurm.md): the per-node daemons start and stop with the job,
# the ranks checkpoint through ckptfs into node memory with partner copies in other
# failure domains (Slurm's topology.conf switches), and at the end of the job (or when
# Slurm warns that the time limit is near) the newest checkpoints are flushed to the
# PFS within a bounded time, with a report. A requeued job restarts from the newest
# dataset that is wholly recoverable: in the memory of the nodes it gets again, in a
# partner's memory for a node whose memory was lost, or on the PFS.
#
#   sbatch --wait examples/slurm/ckptfs-job.sh           (from the repository root)
#
# The application is examples/heat (2-D heat diffusion, plain POSIX checkpoints), 2
# ranks per node, each checkpoint a job-wide dataset. Settings (environment; sbatch
# passes the submitter's environment): CKPTFS_BIN (the ckptfs binary), CKPTFS_JOBDIR
# (a directory every node sees: cluster file, secret, logs; default
# $SLURM_SUBMIT_DIR/ckptfs-jobs/$SLURM_JOB_ID), CKPTFS_PFS (flush destination; default
# $CKPTFS_JOBDIR/pfs), HEAT_NX, HEAT_NY, HEAT_SEGMENTS, HEAT_EVERY, CKPTFS_FLUSH_TIMEOUT
# (seconds the job-end flush may take, default 40), CKPTFS_FLUSH_MAX_BW (MB/s cap of
# the flush), CKPTFS_METRICS_PORT (each daemon serves Prometheus metrics on it; on one
# host: that port plus the node's index).
#
#SBATCH --job-name=ckptfs-heat
#SBATCH --partition=ckptfs
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=2
#SBATCH --requeue
#SBATCH --signal=B:USR1@50
#SBATCH --output=ckptfs-job-%j.out
set -uo pipefail
# Slurm's warning may come at any moment: remembered until the flush can run.
usr1=0
trap 'usr1=1' USR1

SUBMIT=${SLURM_SUBMIT_DIR:-$PWD}
CK=${CKPTFS_BIN:-$(command -v ckptfs || echo "$SUBMIT/target/release/ckptfs")}
JOBDIR=${CKPTFS_JOBDIR:-$SUBMIT/ckptfs-jobs/$SLURM_JOB_ID}
PFS=${CKPTFS_PFS:-$JOBDIR/pfs}
RUN=${SLURM_RESTART_COUNT:-0}
FLUSH_TIMEOUT=${CKPTFS_FLUSH_TIMEOUT:-40}
export CK JOBDIR PFS
export HEAT_NX=${HEAT_NX:-512} HEAT_NY=${HEAT_NY:-512} HEAT_SEGMENTS=${HEAT_SEGMENTS:-6} HEAT_EVERY=${HEAT_EVERY:-10}
# Every checkpoint gets partner copies (the job survives a node's loss at any time).
export CKPTFS_DATASET_PARTNER_COPIES=${CKPTFS_DATASET_PARTNER_COPIES:-all}
export CKPTFS_MEM_SIZE=${CKPTFS_MEM_SIZE:-256M}
export CKPTFS_DEST=$PFS
export CKPTFS_JOB=${CKPTFS_JOB:-slurm-$SLURM_JOB_ID}
# The fast defaults that need root, prepared by the node prolog (examples/slurm/prolog.sh).
if [ -z "${CKPTFS_SHM_DIR:-}" ] && mountpoint -q /dev/shm-ckptfs 2>/dev/null; then
    export CKPTFS_SHM_DIR=/dev/shm-ckptfs
fi
log() { echo "[$(date +%T)] ckptfs-job: $*"; }
[ -x "$CK" ] || { log "no ckptfs binary ($CK): set CKPTFS_BIN"; exit 2; }

# The job directory and the secret are the job user's only.
umask 077
mkdir -p "$JOBDIR" "$PFS"
cd "$JOBDIR" || exit 2
log "run $RUN of job $SLURM_JOB_ID on $SLURM_JOB_NODELIST ($SLURM_NNODES nodes x $SLURM_NTASKS_PER_NODE ranks), shm_dir ${CKPTFS_SHM_DIR:-/dev/shm}"

# 1. The cluster file from the allocation. Several slurmd on one host (scripts/slurm-
#    local.sh): every node on 127.0.0.1 with its own port and store. Failure domains:
#    Slurm's topology.conf switches, when the site has one (cluster init finds it).
PORT=${CKPTFS_PORT:-$((20000 + SLURM_JOB_ID % 1000 * 40))}
hosts=$(for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    scontrol show node -o "$n" | grep -o 'NodeHostName=[^ ]*'; done | sort -u | wc -l)
one_host=()
[ "$hosts" = 1 ] && [ "$SLURM_NNODES" -gt 1 ] && one_host=(--one-host 127.0.0.1)
"$CK" cluster init --out c.toml "${one_host[@]}" --port "$PORT" --heartbeat-ms 500 --force >/dev/null ||
    { log "cluster init failed"; exit 2; }
export CKPTFS_CLUSTER=$JOBDIR/c.toml
"$CK" cluster plan --cluster c.toml | sed -n '1p;/its loss destroys/,$p'

# 2. One daemon per node, a job step of its own that lives as long as the job.
metrics=""
[ -n "${CKPTFS_METRICS_PORT:-}" ] && metrics=$CKPTFS_METRICS_PORT
srun --overlap --ntasks-per-node=1 -N "$SLURM_NNODES" -n "$SLURM_NNODES" --kill-on-bad-exit=0 --output="$JOBDIR/daemon-%t.log" \
    bash -c 'm=(); if [ -n "$0" ]; then i=$SLURM_NODEID; [ -n "$1" ] && m=(--metrics "127.0.0.1:$(($0 + i))") || m=(--metrics "0.0.0.0:$0"); fi
             unset CKPTFS_DEST   # no drain while the job runs: memory and partners; the flush is at the end
             exec "$CK" node --cluster "$CKPTFS_CLUSTER" --node-id "$SLURMD_NODENAME" "${m[@]}"' "$metrics" "${one_host[*]}" &
DAEMONS=$!
daemons_step="$SLURM_JOB_ID.0"
stop_daemons() {
    scancel --signal=TERM "$daemons_step" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$DAEMONS" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$DAEMONS" 2>/dev/null
    wait "$DAEMONS" 2>/dev/null
}
on_nodes() { srun --overlap --ntasks-per-node=1 -N "$SLURM_NNODES" -n "$SLURM_NNODES" --kill-on-bad-exit=0 "$@"; }
on_nodes bash -c 'for i in $(seq 1 300); do "$CK" --node-id "$SLURMD_NODENAME" node status >/dev/null 2>&1 && exit 0; sleep 0.1; done
                  echo "daemon on $SLURMD_NODENAME did not come up" >&2; exit 1' || { log "daemons did not start"; stop_daemons; exit 2; }
log "daemons up on every node"

# 3. The job-end flush (SCR's scavenge), bounded by FLUSH_TIMEOUT: while the daemons
#    still run, the newest dataset complete on every node is chosen once, job-wide
#    (`ckpt list` on the first node asks every node); on every node the other datasets
#    leave memory (older ones are superseded, a newer one is incomplete; the drain goes
#    oldest first and the bounded time is for the one that matters), the rest is drained
#    to the PFS, and which files reached it is recorded. flush-report.py turns that into
#    one line per node and a verdict.
flushed=0
scavenge() {
    [ "$flushed" = 1 ] && return
    flushed=1
    log "job-end flush to $PFS (at most ${FLUSH_TIMEOUT}s)"
    "$CK" --node-id "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)" ckpt list --json \
        >"$JOBDIR/flush-datasets.json" 2>"$JOBDIR/flush-datasets.log"
    choice=$(python3 -c 'import json,sys
d=[x for x in json.load(open(sys.argv[1]))["datasets"] if not x.get("evicted")]
c=[x for x in d if x["complete"]]
keep=c[-1] if c else None
print(keep["name"] if keep else "-")
print(" ".join(str(x["id"]) for x in d if keep is None or x["id"] != keep["id"]))' "$JOBDIR/flush-datasets.json") ||
        choice=$'-\n'
    export FLUSH_KEEP=$(echo "$choice" | sed -n 1p) FLUSH_DROP=$(echo "$choice" | sed -n 2p)
    log "newest complete dataset: $FLUSH_KEEP"
    bw=()
    [ -n "${CKPTFS_FLUSH_MAX_BW:-}" ] && bw=(--max-bw "$CKPTFS_FLUSH_MAX_BW")
    on_nodes bash -c 'n=$SLURMD_NODENAME; ck() { "$CK" --node-id "$n" "$@"; }
        echo "$FLUSH_KEEP" >"$JOBDIR/flush-newest-$n.txt"
        for id in $FLUSH_DROP; do ck ckpt delete "$id" >/dev/null 2>&1; done
        timeout -s TERM "$0" "$CK" --node-id "$n" agent --once --json "${@}" >"$JOBDIR/flush-$n.json" 2>"$JOBDIR/flush-$n.log"
        echo $? >"$JOBDIR/flush-$n.rc"
        ck status --json >"$JOBDIR/flush-levels-$n.json" 2>/dev/null' "$FLUSH_TIMEOUT" "${bw[@]}"
    python3 "$SUBMIT/examples/slurm/flush-report.py" "$JOBDIR" | tee "$JOBDIR/flush-report.txt"
}
# The memory goes back to the node once the newest dataset is on the PFS; after an
# incomplete flush it stays (with the partner copies) for a requeue of the job.
release_memory() {
    if grep -q '^flush: complete' "$JOBDIR/flush-report.txt"; then
        on_nodes bash -c '"$CK" --node-id "$SLURMD_NODENAME" destroy >/dev/null'
        log "stores destroyed"
        return 0
    fi
    log "flush incomplete: node memory kept (a requeue of this job restarts from it)"
    return 1
}

# Slurm's warning before the time limit (--signal=B:USR1@50): flush now, then stop.
on_usr1() {
    trap '' USR1 # once; the flush's steps inherit the ignored signal
    log "time limit near (SIGUSR1)"
    # The ranks stop first (a checkpoint they were writing stays incomplete), so that
    # every node agrees on the newest complete dataset before it is flushed.
    if [ -n "${WORK_PID:-}" ] && kill -0 "$WORK_PID" 2>/dev/null; then
        kill -TERM "$WORK_PID" 2>/dev/null
        wait "$WORK_PID" 2>/dev/null
        log "ranks stopped"
    fi
    scavenge
    stop_daemons
    release_memory
    exit $?
}
trap on_usr1 USR1
[ "$usr1" = 1 ] && on_usr1

# 4. The ranks: restart from the newest recoverable dataset, checkpoint each segment.
#    (Test hook: CKPTFS_EXAMPLE_LOSE=NODE:SEGMENT, first run only: stop after SEGMENT,
#    lose NODE's daemon and memory, requeue the job.)
lose_node="" lose_at=0
if [ -n "${CKPTFS_EXAMPLE_LOSE:-}" ] && [ "$RUN" = 0 ]; then
    lose_node=${CKPTFS_EXAMPLE_LOSE%%:*} lose_at=${CKPTFS_EXAMPLE_LOSE##*:}
fi
cc -O2 -o "$JOBDIR/heat" "$SUBMIT/examples/heat/heat.c" || { log "cannot build heat"; stop_daemons; exit 2; }
ranks() { srun --overlap --kill-on-bad-exit=1 bash "$SUBMIT/examples/slurm/ckptfs-rank.sh" "$@"; }
rm -f "$JOBDIR"/begun.*
ranks restart >"$JOBDIR/restart.out" || { log "restart failed"; stop_daemons; exit 1; }
grep '^rank' "$JOBDIR/restart.out" | sort -k2n
start=$(grep -o '^start=[0-9]*' "$JOBDIR/restart.out" | sort -u)
[ "$(echo "$start" | wc -l)" = 1 ] || { log "ranks disagree on the restart: $start"; stop_daemons; exit 1; }
start=${start#start=}
STEPS=$((HEAT_SEGMENTS * HEAT_EVERY))
for T in $(seq $((start + HEAT_EVERY)) "$HEAT_EVERY" "$STEPS"); do
    # In the background so that Slurm's warning (USR1) is handled at once.
    ranks segment "$T" &
    WORK_PID=$!
    wait $WORK_PID
    rc=$?
    [ "$rc" = 0 ] || { log "ranks failed at step $T ($rc)"; scavenge; stop_daemons; exit 1; }
    [ "$lose_at" -gt 0 ] && [ $((T / HEAT_EVERY)) -ge "$lose_at" ] && break
done
# Test hook (tests/slurm): the rest of a long computation, during which the allocation ends.
if [ -n "${CKPTFS_EXAMPLE_COMPUTE_S:-}" ]; then
    log "computing on (test hook, ${CKPTFS_EXAMPLE_COMPUTE_S}s)"
    sleep "$CKPTFS_EXAMPLE_COMPUTE_S" &
    WORK_PID=$!
    wait $WORK_PID
fi

if [ -n "$lose_node" ]; then
    # Wait until the newest dataset is protected, then lose a node: its daemon is
    # killed and its memory destroyed (what a node crash and reboot leave).
    for _ in $(seq 1 300); do
        "$CK" --node-id "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)" ckpt list --json 2>/dev/null |
            python3 -c 'import json,sys; d=[x for x in json.load(sys.stdin)["datasets"] if x["complete"]]
sys.exit(0 if d and "partner" in d[-1]["levels"] else 1)' && break
        sleep 0.2
    done
    log "losing $lose_node: daemon killed, node memory destroyed; requeueing the job"
    srun --overlap -N1 -n1 -w "$lose_node" bash -c 'pid=$("$CK" --node-id "$SLURMD_NODENAME" node status --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"pid\"])")
        kill -9 "$pid"; sleep 0.5; "$CK" --node-id "$SLURMD_NODENAME" destroy'
    stop_daemons
    scontrol requeue "$SLURM_JOB_ID"
    sleep 600 &
    wait $!
    exit 0
fi

log "ranks done; datasets:"
"$CK" --node-id "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)" ckpt list
scavenge
stop_daemons
release_memory
exit $?
