#!/usr/bin/env bash
# The heat demo across nodes, with datasets: 4 nodes on 127.0.0.1 (one `ckptfs node`
# daemon each), 2 ranks per node, each rank an unmodified heat simulation
# (examples/heat/heat.c) that checkpoints into its node's store. The job script makes
# every checkpoint a dataset (`ckptfs ckpt begin` / `complete` around each segment).
# A node is lost in the middle of a checkpoint (daemon SIGKILLed, node memory
# destroyed): that dataset is incomplete job-wide (failure case D7). A replacement node
# starts empty, every rank runs `ckptfs run --restart`: all agree on the newest complete
# dataset, the lost node's files come back from its partner's memory, and every rank
# finishes with exactly the field of an uninterrupted run.
#
#   bash scripts/demo-datasets.sh [HEAT_BINARY]     (run by scripts/demo.sh at its end)
#
# PORT (first of 4 free ports, default 27240), NX, NY, SEGMENTS, EVERY.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${CKPTFS_BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/release}
PORT=${PORT:-27240} NX=${NX:-512} NY=${NY:-512} SEGMENTS=${SEGMENTS:-6} EVERY=${EVERY:-10}
STEPS=$((SEGMENTS * EVERY))
LOSE_AT=$((SEGMENTS / 2 + 1)) LOST=node3
WORK=$(mktemp -d /tmp/ckptfs-demo-ds.XXXXXX)
unset CKPTFS_STORE CKPTFS_CLUSTER CKPTFS_NODE_ID CKPTFS_DEST CKPTFS_RESTART
export CKPTFS_JOB=heat CKPTFS_NRANKS=8 CKPTFS_LOCAL_NRANKS=2 CKPTFS_MEM_SIZE=${CKPTFS_MEM_SIZE:-128M}
# Every checkpoint gets partner copies (the demo loses a node and restores from its
# partner), whatever the runtime policy decides for it (docs/datasets.md).
export CKPTFS_DATASET_PARTNER_COPIES=all
declare -A PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -f "$WORK/c.toml" ]; then
        for i in 1 2 3 4; do "$BIN/ckptfs" --cluster "$WORK/c.toml" --node-id "node$i" destroy >/dev/null 2>&1 || true; done
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
HEAT=${1:-}
if [ -z "$HEAT" ]; then
    HEAT="$WORK/heat"
    cc -O2 -Wall -o "$HEAT" examples/heat/heat.c
fi
cd "$WORK"
fail() { echo "FAIL: $*" >&2; for i in 1 2 3 4; do echo "--- node$i log" >&2; cat "node$i.log" >&2 || true; done; exit 1; }
nodeof() { echo "node$(($1 / 2 + 1))"; }
# ck RANK ARGS...: ckptfs as rank RANK on its node.
ck() { local r=$1; shift; CKPTFS_RANK=$r "$BIN/ckptfs" --cluster c.toml --node-id "$(nodeof "$r")" "$@"; }
start() { "$BIN/ckptfs" node --cluster c.toml --node-id "$1" 2>"$1.log" & PIDS[$1]=$!; }
wait_up() {
    for _ in $(seq 1 300); do
        "$BIN/ckptfs" --cluster c.toml --node-id "$1" node status >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    fail "$1's daemon did not come up"
}
# One segment of rank R: advance to step $2 and checkpoint there (heat.<step> in /ckpt/rR).
segment() { HEAT_SEGMENT=1 ck "$1" run -- "$HEAT" "$NX" "$NY" "$2" "$EVERY" "/ckpt/r$1" "r$1.bin" >"seg.$1.log"; }

echo "== 4 nodes x 2 ranks on 127.0.0.1 (ports $PORT-$((PORT + 3))), heat ${NX}x${NY}, $STEPS steps, a dataset every $EVERY"
"$BIN/ckptfs" cluster init --local 4 --out c.toml --port "$PORT" --job "hds-demo-$$" --heartbeat-ms 200 >/dev/null
for i in 1 2 3 4; do start "node$i"; done
for i in 1 2 3 4; do wait_up "node$i"; done
"$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" "$WORK/plain" ref.bin >/dev/null

for k in $(seq 1 "$SEGMENTS"); do
    T=$((k * EVERY))
    if [ "$k" -eq "$LOSE_AT" ]; then
        # The previous dataset is protected (partner copies of every node's files).
        prev="step$(((k - 1) * EVERY))"
        for _ in $(seq 1 300); do
            ck 0 ckpt list --json | python3 -c 'import json,sys
d=[x for x in json.load(sys.stdin)["datasets"] if x["name"]==sys.argv[1]][0]
sys.exit(0 if "partner" in d["levels"] else 1)' "$prev" && break
            sleep 0.1
        done
    fi
    for r in 0 1 2 3 4 5 6 7; do ck "$r" ckpt begin "step$T" >/dev/null; done
    if [ "$k" -eq "$LOSE_AT" ]; then
        echo "== dataset step$T: $LOST lost while the ranks checkpoint (daemon SIGKILLed, node memory destroyed)"
        for r in 0 1 2 3 6 7; do segment "$r" "$T"; done
        kill -9 "${PIDS[$LOST]}"; wait "${PIDS[$LOST]}" 2>/dev/null || true; unset "PIDS[$LOST]"
        "$BIN/ckptfs" --cluster c.toml --node-id "$LOST" destroy >/dev/null
        for r in 0 1 2 3 6 7; do ck "$r" ckpt complete 2>&1 | sed 's/^/   /' || true; done
        break
    fi
    for r in 0 1 2 3 4 5 6 7; do segment "$r" "$T"; done
    for r in 0 1 2 3 4 5 6 7; do ck "$r" ckpt complete 2>/dev/null; done
done
echo "== job-wide datasets (seen from node1)"
ck 0 ckpt list
state=$(ck 0 ckpt list --json | python3 -c 'import json,sys
d=[x for x in json.load(sys.stdin)["datasets"] if x["name"]=="step'"$((LOSE_AT * EVERY))"'"][0]
print(d["state"], d["reason"])')
case "$state" in incomplete*"node $LOST was lost"*) ;; *) fail "dataset step$((LOSE_AT * EVERY)): $state" ;; esac

echo "== replacement $LOST (empty store); every rank runs ckptfs run --restart"
start "$LOST"; wait_up "$LOST"
for r in 0 1 2 3 4 5 6 7; do
    # HEAT_SEGMENT=1 keeps the restart dataset's checkpoint when heat writes its next one:
    # the ranks restart one after another here, and a rank that deleted its file of the
    # agreed dataset before another rank decided would change that rank's answer.
    HEAT_SEGMENT=1 ck "$r" run --restart -- sh -c 'HEAT_MAX_STEP=${CKPTFS_RESTART#step} exec "$0" "$@"' \
        "$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" "/ckpt/r$r" "r$r.bin" >"restart.$r.log" 2>"restart.$r.err" \
        || { cat "restart.$r.err" >&2; fail "rank $r: run --restart"; }
    from=$(sed -n 's/^ckptfs run: restarting from dataset [0-9]* (\(.*\)),.*/\1/p' "restart.$r.err")
    resumed=$(sed -n 's/^heat: resumed from checkpoint at step //p' "restart.$r.log")
    echo "   rank $r on $(nodeof "$r"): dataset $from, heat resumed at step $resumed$(grep -o ' from partner:.*' "restart.$r.err" | head -1 | sed 's/^/, its files/')"
    [ "$from" = "step$(((LOSE_AT - 1) * EVERY))" ] || fail "rank $r restarted from '$from'"
    cmp -s ref.bin "r$r.bin" || fail "rank $r: final field differs from the uninterrupted run"
done
echo "OK: all 8 ranks restarted from the same dataset and finished identical to the uninterrupted run"
echo "demo datasets: OK"
