#!/usr/bin/env bash
# The main job: a 2-D heat simulation (examples/heat/heat.c, plain POSIX/stdio calls)
# checkpoints into the ckptfs node store under `ckptfs run`, is SIGKILLed mid-run,
# restarts from its latest complete in-memory checkpoint, and must finish with exactly
# the field of an uninterrupted run. Then the node store is lost: a killed run's
# checkpoint is drained by `ckptfs agent`, the store destroyed, and `ckptfs run --restore`
# restarts from the drained copy, again to the exact field. Then the same program on 4
# nodes x 2 ranks with datasets loses a node mid-checkpoint and all ranks restart from the
# newest complete dataset (scripts/demo-datasets.sh). Prints checkpoint bandwidth
# next to the same run writing to plain directories. Exits non-zero on any mismatch.
set -euo pipefail
cd "$(dirname "$0")/.."

NX=${NX:-2048} NY=${NY:-2048} STEPS=${STEPS:-200} EVERY=${EVERY:-20}
STORE="demo-heat-$$"
WORK=$(mktemp -d /tmp/ckptfs-demo.XXXXXX)
SHMDIR=/dev/shm/ckptfs-demo-plain-$$
BIN=${CKPTFS_BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/release}
cleanup() {
    [ -n "${PID:-}" ] && kill -9 "$PID" 2>/dev/null || true
    "$BIN/ckptfs" --store "$STORE" destroy >/dev/null 2>&1 || true
    rm -rf "$WORK" "$SHMDIR"
}
trap cleanup EXIT

echo "== setup and build"
bash scripts/setup.sh
cargo build --release --workspace --quiet
cc -O2 -Wall -o "$WORK/heat" examples/heat/heat.c
HEAT="$WORK/heat"
CK=("$BIN/ckptfs" --store "$STORE" --mem-size 512M)

# `ckptfs run` creates the store if needed and execs the program with the shim.
RUN=("${CK[@]}" run --)

bw() { sed -n 's/.*= \([0-9.]*\) GB\/s/\1/p' "$1"; }

echo "== 1. uninterrupted reference run, checkpoints in a plain tmpfs directory ($SHMDIR)"
"$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" "$SHMDIR" "$WORK/ref.bin" | tee "$WORK/plain-shm.log"

echo "== 2. same run, checkpoints in a plain directory on disk ($WORK/disk)"
"$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" "$WORK/disk" "$WORK/disk.bin" | tee "$WORK/plain-disk.log"
cmp "$WORK/ref.bin" "$WORK/disk.bin"

# Run the simulation under ckptfs run with checkpoints in /ckpt/$1, SIGKILL it once the
# checkpoint of step STEPS/2 is in the store.
run_and_kill() {
    "${RUN[@]}" "$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" "/ckpt/$1" "$WORK/$1.bin" &
    PID=$!
    local kill_at=$((STEPS / 2))
    for _ in $(seq 1 600); do
        if "${CK[@]}" ls "/$1" 2>/dev/null | grep -qx "heat.$kill_at"; then break; fi
        sleep 0.02
    done
    kill -9 "$PID"
    wait "$PID" 2>/dev/null || true
    PID=
    echo "killed pid with SIGKILL; store contents:"
    "${CK[@]}" ls -l "/$1"
    [ -e "$WORK/$1.bin" ] && { echo "FAIL: the killed run finished"; exit 1; }
    return 0
}

echo "== 3. under ckptfs run (checkpoints in /ckpt/heat = node store $STORE); SIGKILL mid-run"
run_and_kill heat

echo "== 4. restart under ckptfs run: resumes from the latest complete checkpoint in memory"
"${RUN[@]}" "$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" /ckpt/heat "$WORK/heat.bin" | tee "$WORK/restart.log"
grep -q "resumed from checkpoint" "$WORK/restart.log" || { echo "FAIL: did not resume"; exit 1; }
if cmp "$WORK/ref.bin" "$WORK/heat.bin"; then
    echo "OK: final field after kill + restart is identical to the uninterrupted run"
else
    echo "FAIL: final field differs from the uninterrupted run"
    exit 1
fi

echo "== 5. uninterrupted run under ckptfs run, for the bandwidth comparison"
"${RUN[@]}" "$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" /ckpt/heat2 "$WORK/store2.bin" | tee "$WORK/store.log"
cmp "$WORK/ref.bin" "$WORK/store2.bin"
"${CK[@]}" fsck >/dev/null

echo "== 6. node store lost: drain to the parallel file system ($WORK/pfs stands in for it),"
echo "      destroy the store, restart with ckptfs run --restore"
run_and_kill heat3
"${CK[@]}" agent --once --dest "$WORK/pfs"
"${CK[@]}" destroy
"${CK[@]}" run --restore=/heat3 --dest "$WORK/pfs" -- \
    "$HEAT" "$NX" "$NY" "$STEPS" "$EVERY" /ckpt/heat3 "$WORK/heat3.bin" | tee "$WORK/restore.log"
grep -q "resumed from checkpoint" "$WORK/restore.log" || { echo "FAIL: did not resume"; exit 1; }
if cmp "$WORK/ref.bin" "$WORK/heat3.bin"; then
    echo "OK: restarted from the drained checkpoint; identical to the uninterrupted run"
else
    echo "FAIL: final field after restore differs from the uninterrupted run"
    exit 1
fi

echo "== 7. across nodes: 4 nodes x 2 ranks, every checkpoint a dataset, a node lost mid-checkpoint"
echo "      (scripts/demo-datasets.sh; DEMO_DATASETS=0 skips it)"
if [ "${DEMO_DATASETS:-1}" != 0 ]; then
    bash scripts/demo-datasets.sh "$HEAT"
fi

echo
echo "checkpoint bandwidth (open+write+fsync+close+rename of $((NX * NY * 8 / 1048576)) MiB checkpoints):"
printf "  %-34s %6s GB/s\n" "ckptfs store (ckptfs run)" "$(bw "$WORK/store.log")"
printf "  %-34s %6s GB/s\n" "plain directory on tmpfs" "$(bw "$WORK/plain-shm.log")"
printf "  %-34s %6s GB/s\n" "plain directory on disk" "$(bw "$WORK/plain-disk.log")"
echo "demo: OK"
