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
# the flush), CKPTFS_FLUSH_S3 (s3://BUCKET/PREFIX: the job-end flush also puts the
# newest dataset into object storage, under PREFIX/$CKPTFS_JOB; endpoint and keys from
# the AWS_* variables, docs/object.md), CKPTFS_METRICS_PORT (each daemon serves
# Prometheus metrics on it; on one host: that port plus the node's index),
# CKPTFS_PREVIOUS_CLUSTER (the cluster file of an earlier allocation whose checkpoints
# this job continues; a requeued job uses its own from the previous run).
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
S3=${CKPTFS_FLUSH_S3:+${CKPTFS_FLUSH_S3%/}/${CKPTFS_JOB:-slurm-$SLURM_JOB_ID}}
export CK JOBDIR PFS S3
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
#    A requeued job (or one continuing CKPTFS_PREVIOUS_CLUSTER's checkpoints) keeps the
#    node ids of the allocation the checkpoints were written in: a host it gets again
#    keeps its id, a host replacing a lost one takes that node's id (and its ranks).
previous=()
if [ -n "${CKPTFS_PREVIOUS_CLUSTER:-}" ]; then
    previous=(--previous "$CKPTFS_PREVIOUS_CLUSTER")
elif [ -f c.toml ]; then
    cp c.toml c.prev.toml && previous=(--previous c.prev.toml)
fi
"$CK" cluster init --out c.toml "${one_host[@]}" "${previous[@]}" --node-map nodes.map --port "$PORT" \
    --heartbeat-ms 500 --force >/dev/null || { log "cluster init failed"; exit 2; }
export CKPTFS_CLUSTER=$JOBDIR/c.toml NODEMAP=$JOBDIR/nodes.map
# nodes.map: HOST NODE_ID lines in cluster file order; FIRST: the first node's id.
FIRST=$(awk 'NR == 1 { print $2 }' "$NODEMAP")
grep -v '^\(\S*\) \1$' "$NODEMAP" | while read -r h n; do log "host $h runs as node $n (replaces it)"; done
# Ranks go to their node's host in cluster file order (rank block i on the i-th node):
# when that is not the allocation's order (a replaced node), srun places them by a
# host file (--distribution=arbitrary).
RANK_HOSTS=""
if [ "$(awk '{ print $1 }' "$NODEMAP")" != "$(scontrol show hostnames "$SLURM_JOB_NODELIST")" ]; then
    RANK_HOSTS=$JOBDIR/ranks.hosts
    awk -v k="$SLURM_NTASKS_PER_NODE" '{ for (i = 0; i < k; i++) print $1 }' "$NODEMAP" >"$RANK_HOSTS"
fi
"$CK" cluster plan --cluster c.toml | sed -n '1p;/its loss destroys/,$p'

# 2. One daemon per node, a job step of its own that lives as long as the job.
metrics=""
[ -n "${CKPTFS_METRICS_PORT:-}" ] && metrics=$CKPTFS_METRICS_PORT
srun --overlap --ntasks-per-node=1 -N "$SLURM_NNODES" -n "$SLURM_NNODES" --kill-on-bad-exit=0 --output="$JOBDIR/daemon-%t.log" \
    bash -c 'm=(); if [ -n "$0" ]; then i=$SLURM_NODEID; [ -n "$1" ] && m=(--metrics "127.0.0.1:$(($0 + i))") || m=(--metrics "0.0.0.0:$0"); fi
             unset CKPTFS_DEST   # no drain while the job runs: memory and partners; the flush is at the end
             n=$(awk -v h="$SLURMD_NODENAME" '\''$1 == h { print $2 }'\'' "$NODEMAP")
             exec "$CK" node --cluster "$CKPTFS_CLUSTER" --node-id "${n:-$SLURMD_NODENAME}" "${m[@]}"' "$metrics" "${one_host[*]}" &
DAEMONS=$!
daemons_step="$SLURM_JOB_ID.0"
stop_daemons() {
    scancel --signal=TERM "$daemons_step" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$DAEMONS" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$DAEMONS" 2>/dev/null
    wait "$DAEMONS" 2>/dev/null
}
on_nodes() { srun --overlap --ntasks-per-node=1 -N "$SLURM_NNODES" -n "$SLURM_NNODES" --kill-on-bad-exit=0 "$@"; }
# In a step on every node: NODE is the node id this host runs as.
NODE_OF_HOST='NODE=$(awk -v h="$SLURMD_NODENAME" '\''$1 == h { print $2 }'\'' "$NODEMAP"); NODE=${NODE:-$SLURMD_NODENAME}'
export NODE_OF_HOST
on_nodes bash -c 'eval "$NODE_OF_HOST"; for i in $(seq 1 300); do "$CK" --node-id "$NODE" node status >/dev/null 2>&1 && exit 0; sleep 0.1; done
                  echo "daemon of $NODE on $SLURMD_NODENAME did not come up" >&2; exit 1' || { log "daemons did not start"; stop_daemons; exit 2; }
log "daemons up on every node"

# 3. The job-end flush (SCR's scavenge), bounded by FLUSH_TIMEOUT: while the daemons
#    still run, the newest dataset complete on every node is chosen once, job-wide
#    (`ckpt list` on the first node asks every node); on every node the other datasets
#    leave memory (older ones are superseded, a newer one is incomplete; the drain goes
#    oldest first and the bounded time is for the one that matters), the rest is drained
#    to the PFS and, with CKPTFS_FLUSH_S3, to object storage in the time left, and which
#    files reached them is recorded. flush-report.py turns that into one line per node
#    and a verdict.
flushed=0
scavenge() {
    [ "$flushed" = 1 ] && return
    flushed=1
    log "job-end flush to $PFS${S3:+ and $S3} (at most ${FLUSH_TIMEOUT}s)"
    "$CK" --node-id "$FIRST" ckpt list --json \
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
    on_nodes bash -c 'eval "$NODE_OF_HOST"; n=$NODE; ck() { "$CK" --node-id "$n" "$@"; }
        end=$((SECONDS + $0))
        echo "$FLUSH_KEEP" >"$JOBDIR/flush-newest-$n.txt"
        for id in $FLUSH_DROP; do ck ckpt delete "$id" >/dev/null 2>&1; done
        timeout -s TERM "$0" "$CK" --node-id "$n" agent --once --json "${@}" >"$JOBDIR/flush-$n.json" 2>"$JOBDIR/flush-$n.log"
        echo $? >"$JOBDIR/flush-$n.rc"
        if [ -n "$S3" ]; then
            # Object storage in the time left (at least 1 s). Its drain finishes the file it
            # is copying on SIGTERM, so the bound is SIGKILL (an upload cut off is aborted
            # by the next drain; nothing half-written is published).
            left=$((end - SECONDS)); [ "$left" -ge 1 ] || left=1
            timeout -s KILL "$left" "$CK" --node-id "$n" agent --once --json --dest "$S3" "${@}" \
                >"$JOBDIR/flush-s3-$n.json" 2>"$JOBDIR/flush-s3-$n.log"
            echo $? >"$JOBDIR/flush-s3-$n.rc"
        fi
        ck status --json >"$JOBDIR/flush-levels-$n.json" 2>/dev/null' "$FLUSH_TIMEOUT" "${bw[@]}"
    python3 "$SUBMIT/examples/slurm/flush-report.py" "$JOBDIR" | tee "$JOBDIR/flush-report.txt"
}
# The memory goes back to the node once the newest dataset is on the PFS; after an
# incomplete flush it stays (with the partner copies) for a requeue of the job.
release_memory() {
    if grep -q '^flush: complete' "$JOBDIR/flush-report.txt"; then
        on_nodes bash -c 'eval "$NODE_OF_HOST"; "$CK" --node-id "$NODE" destroy >/dev/null'
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
ranks() {
    if [ -n "$RANK_HOSTS" ]; then
        SLURM_HOSTFILE=$RANK_HOSTS srun --overlap --kill-on-bad-exit=1 --distribution=arbitrary -n "$SLURM_NTASKS" \
            bash "$SUBMIT/examples/slurm/ckptfs-rank.sh" "$@"
    else
        srun --overlap --kill-on-bad-exit=1 bash "$SUBMIT/examples/slurm/ckptfs-rank.sh" "$@"
    fi
}
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
        "$CK" --node-id "$FIRST" ckpt list --json 2>/dev/null |
            python3 -c 'import json,sys; d=[x for x in json.load(sys.stdin)["datasets"] if x["complete"]]
sys.exit(0 if d and "partner" in d[-1]["levels"] else 1)' && break
        sleep 0.2
    done
    log "losing $lose_node: daemon killed, node memory destroyed; requeueing the job"
    srun --overlap -N1 -n1 -w "$(awk -v n="$lose_node" '$2 == n { print $1 }' "$NODEMAP")" bash -c 'eval "$NODE_OF_HOST"
        pid=$("$CK" --node-id "$NODE" node status --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"pid\"])")
        kill -9 "$pid"; sleep 0.5; "$CK" --node-id "$NODE" destroy'
    stop_daemons
    scontrol requeue "$SLURM_JOB_ID"
    sleep 600 &
    wait $!
    exit 0
fi

log "ranks done; datasets:"
"$CK" --node-id "$FIRST" ckpt list
scavenge
stop_daemons
release_memory
exit $?
