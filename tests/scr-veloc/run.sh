#!/usr/bin/env bash
# The SCR and VeloC drop-in libraries (libscr.so, libveloc-client.so) under real MPI
# programs: C and Fortran test programs written from the APIs' documentation, built
# with mpicc/mpif90 against include/scr.h, scrf.h, veloc.h and run with mpirun on 4
# ranks, on one node and on local clusters of 2 and 4 nodes (node daemons on
# 127.0.0.1; a rank killed mid-checkpoint, a node lost with its store). Every step
# checks return codes, which checkpoint is restarted and the bytes read back. Exit status non-zero on any failure; the last line is "N passed, M failed".
#
#   tests/scr-veloc/run.sh
#
# Ports: the local clusters' node daemons on 127.0.0.1:29000-29199 (this suite's own).
#
# Library location: $CKPTFS_BIN_DIR if set (must hold libscr.so, libveloc_client.so,
# libckptfs.so (loaded across nodes) and
# the ckptfs binary), else ${CARGO_TARGET_DIR:-<repo>/target}/release after building.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [[ -n "${CKPTFS_BIN_DIR:-}" ]]; then
    libdir="$CKPTFS_BIN_DIR"
else
    libdir="${CARGO_TARGET_DIR:-$root/target}/release"
    (cd "$root" && cargo build --release -q -p ckptfs-scr -p ckptfs-veloc -p ckptfs-capi -p ckptfs-cli) || exit 2
fi
# Cargo cannot put a '-' in a library file name: the VeloC client library is built as
# libveloc_client.so and linked as -lveloc-client through this name.
[[ -f "$libdir/libveloc_client.so" ]] && ln -sf libveloc_client.so "$libdir/libveloc-client.so"
for f in libscr.so libveloc-client.so libckptfs.so ckptfs; do
    [[ -e "$libdir/$f" ]] || { echo "run.sh: $libdir/$f missing" >&2; exit 2; }
done
command -v mpicc >/dev/null || { echo "run.sh: mpicc missing (scripts/setup-scr.sh)" >&2; exit 2; }

out="$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-scrv.XXXXXX")"
export CKPTFS_STORE="scrv-$$"
export CKPTFS_MEM_SIZE=256M
export CKPTFS_STAGE_DIR="$out/stage"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ckptfs="$libdir/ckptfs"
single_store="$CKPTFS_STORE"
cleanup() {
    CKPTFS_STORE="$single_store" "$ckptfs" destroy >/dev/null 2>&1 || true
    rm -rf "$out"
}
trap cleanup EXIT

# Open MPI's mpirun has been seen to hang (children reaped, mpirun waiting) after a rank
# was SIGKILLed: every run gets a time limit, so a hang is a failed step, not a stuck
# suite.
mpirun=(timeout -k 5 90 mpirun --oversubscribe -np 4)
[[ "$(id -u)" == 0 ]] && mpirun+=(--allow-run-as-root)
inc=(-I "$root/include")
link=(-L "$libdir")

passed=0
failed=0
t0=$(date +%s)
# step NAME CMD...: run CMD (output in $out/log.N), which must succeed; step_fails
# NAME CMD...: which must fail.
step() { run_step 0 "$@"; }
step_fails() { run_step nonzero "$@"; }
run_step() {
    local want="$1" name="$2"
    shift 2
    local log="$out/log.$((passed + failed))"
    "$@" >"$log" 2>&1
    local rc=$?
    local ok=0
    case "$want" in
        0) [[ $rc == 0 ]] && ok=1 ;;
        nonzero) [[ $rc != 0 ]] && ok=1 ;;
    esac
    if [[ $ok == 1 ]]; then
        passed=$((passed + 1))
        echo "ok   $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name (exit $rc, wanted $want)"
        sed 's/^/     | /' "$log" | tail -40
    fi
}

# ---------------------------------------------------------------- build
step "scr.h, scrf.h, veloc.h compile with -Wall -Wextra -Werror (every function used)" \
    mpicc -std=c99 -Wall -Wextra -Werror "${inc[@]}" "$here/api_compile.c" "${link[@]}" -lscr -lveloc-client \
    -o "$out/api_compile"
step "build scr_test (mpicc -lscr)" \
    mpicc -std=c99 -O1 -Wall -Werror "${inc[@]}" "$here/scr_test.c" "${link[@]}" -lscr -o "$out/scr_test"

# ---------------------------------------------------------------- SCR, C, one node
scr() { (cd "$out/pfs" && "${mpirun[@]}" "$out/scr_test" "$@"); }
mkdir -p "$out/pfs"
export CKPTFS_JOB=scr1 SCR_FLUSH=0
step "scr: misuse answers failures, never crashes" scr errors
step "scr: 3 checkpoints, Have_restart names the newest" scr write 1 3
step "scr: restart reads step.3 back byte for byte" scr restart step.3
step_fails "scr: a rank SIGKILLed mid-checkpoint (step.4) fails the job" scr kill 4 2
step "scr: ... and the restart skips the incomplete step.4" scr restart step.3
step "scr: one rank's invalid part fails every rank's Complete_output" scr invalid 5
step "scr: ... and the invalid step.5 is never restarted" scr restart step.3
step "scr: a failed Complete_restart offers the next older checkpoint" scr badrestart step.3 step.2
step "scr: SCR_Current selects an older checkpoint" scr current step.1
step "scr: an output dataset reaches the prefix and is not a checkpoint" scr output
step "scr: SCR_Drop hides a checkpoint from restarts" scr drop step.3 step.2
step "scr: SCR_Delete removes it" scr delete step.2
step "scr: Need_checkpoint and Should_exit agree on every rank" scr need
step "scr: right after a checkpoint the policy (Young/Daly) says not due" scr need 0
step "scr: a failure predictor's alarm for this node" "$ckptfs" alarm "$(hostname)"
step "scr: ... makes SCR_Need_checkpoint say due" scr need 1
step "scr: the alarm cleared" "$ckptfs" alarm "$(hostname)" --clear
step "scr: SCR_Should_exit: the halt file PREFIX/.ckptfs/halt" bash -c "mkdir -p '$out/pfs/.ckptfs' && touch '$out/pfs/.ckptfs/halt'"
step "scr: ... makes SCR_Should_exit say stop on every rank" scr need 0 1
rm -f "$out/pfs/.ckptfs/halt"
export CKPTFS_JOB=scr2
step "scr: a new job has nothing to restart" scr restart none
step "scr: SCR_CHECKPOINT_INTERVAL=1 says a checkpoint is due" env SCR_CHECKPOINT_INTERVAL=1 \
    bash -c "cd '$out/pfs' && ${mpirun[*]} '$out/scr_test' need 1"
printf 'SCR_CHECKPOINT_SECONDS=100000\nSCR_HALT_SECONDS=60\n' >"$out/scrconf"
step "scr: SCR_CONF_FILE's SCR_CHECKPOINT_SECONDS says not due" env SCR_CONF_FILE="$out/scrconf" \
    bash -c "cd '$out/pfs' && ${mpirun[*]} '$out/scr_test' need 0"
step "scr: ... and its unmapped key SCR_HALT_SECONDS is reported as ignored" \
    grep -q "SCR_HALT_SECONDS has no meaning" "$out/log.$((passed + failed - 1))"

# Under the preload shim (`ckptfs run`), libscr routes a checkpoint's files straight
# into the store (the shim's mount prefix) instead of staging and copying them.
export CKPTFS_JOB=scr-shim
shimscr() { (cd "$out/pfs" && "${mpirun[@]}" "$ckptfs" run -- "$out/scr_test" "$@"); }
step "scr: without the shim a routed file is staged (under CKPTFS_STAGE_DIR)" \
    env SCR_TEST_ROUTE_PREFIX="$out/stage/" bash -c "cd '$out/pfs' && ${mpirun[*]} '$out/scr_test' write 1 1"
step "scr under ckptfs run: 2 more checkpoints routed into the store (/ckpt/scr/...)" \
    env SCR_TEST_ROUTE_PREFIX=/ckpt/scr/scr-shim/ bash -c "cd '$out/pfs' && ${mpirun[*]} '$ckptfs' run -- '$out/scr_test' write 2 3"
step "scr under ckptfs run: ... in the store under the dataset's directory" \
    bash -c "'$ckptfs' ls /scr/scr-shim/3/r2/ckpt | grep -q rank_2.dat"
step "scr under ckptfs run: restart reads step.3 back from the store byte for byte" \
    env SCR_TEST_ROUTE_PREFIX=/ckpt/scr/scr-shim/ bash -c "cd '$out/pfs' && ${mpirun[*]} '$ckptfs' run -- '$out/scr_test' restart step.3"
step "scr: ... and the same checkpoint without the shim (copied out of the store)" scr restart step.3
step_fails "scr under ckptfs run: a rank SIGKILLed mid-checkpoint (step.4) fails the job" shimscr kill 4 2
step "scr under ckptfs run: ... and the restart skips the incomplete step.4" shimscr restart step.3

# A file lost from the store: restart falls back to the PFS copy (SCR_FLUSH=1) or,
# without one, to the next older checkpoint. lose_file JOB API NAME removes the store
# file NAME of rank 1 from whichever dataset directory holds it.
lose_file() {
    local d
    for d in $("$ckptfs" ls "/$2/$1"); do
        d="/$2/$1/${d%/}/r1"
        if "$ckptfs" ls "$d" 2>/dev/null | grep -qx "$3"; then
            "$ckptfs" rm -r "$d" && return 0
        fi
    done
    echo "lose_file: $3 not found" >&2
    return 1
}
export CKPTFS_JOB=scr3 SCR_FLUSH=1
step "scr: SCR_FLUSH=1 flushes each checkpoint to PREFIX/.ckptfs" scr write 1 3
step "scr: ... which holds a manifest of the flushed files" \
    bash -c "ls '$out/pfs/.ckptfs/scr/scr3/3/r1/ckpt/rank_1.dat' && ls '$out/pfs/.ckptfs/scr/scr3/3/' | grep -q '^r0$'"
step "scr: rank 1's files of the newest checkpoint (dataset 3) lost from the store" \
    "$ckptfs" rm -r /scr/scr3/3/r1
step "scr: ... restart brings them back from the PFS (checked) and reads step.3" scr restart step.3
export CKPTFS_JOB=scr4 SCR_FLUSH=0
step "scr: SCR_FLUSH=0: 3 checkpoints in memory only" scr write 1 3
step "scr: rank 1's files of step.3 (dataset 3) lost from the store" "$ckptfs" rm -r /scr/scr4/3/r1
step "scr: ... restart takes step.2, the newest wholly recoverable" scr restart step.2

# Scavenge at job end (SCR's scr_postrun role): `ckptfs agent --once --dest` drains
# every complete file not yet on the PFS, the newest checkpoint included, with the
# manifest a restart looks for; then the checkpoint survives the loss of the store copy.
export CKPTFS_JOB=scr5 SCR_FLUSH=0
step "scr: scavenge: 2 checkpoints in memory only" scr write 1 2
step "scr: scavenge: ckptfs agent --once --dest PREFIX/.ckptfs at job end" \
    "$ckptfs" agent --once --dest "$out/pfs/.ckptfs"
step "scr: scavenge: rank 1's files of step.2 lost from the store" "$ckptfs" rm -r /scr/scr5/2/r1
step "scr: scavenge: ... restart reads step.2 back from the PFS" scr restart step.2

# ---------------------------------------------------------------- SCR, Fortran
step "build scr_test.f90 (mpif90 -lscr, scrf.h)" \
    mpif90 -Wall -Werror "${inc[@]}" "$here/scr_test.f90" "${link[@]}" -lscr -o "$out/scr_ftest"
export CKPTFS_JOB=scrf
step "scr fortran: two checkpoints" bash -c "cd '$out/pfs' && ${mpirun[*]} '$out/scr_ftest' write"
step "scr fortran: restart reads fstep.2 back" bash -c "cd '$out/pfs' && ${mpirun[*]} '$out/scr_ftest' restart"

# ---------------------------------------------------------------- VeloC, C
step "build veloc_test (mpicc -lveloc-client)" \
    mpicc -std=c99 -O1 -Wall -Werror "${inc[@]}" "$here/veloc_test.c" "${link[@]}" -lveloc-client -o "$out/veloc_test"
mkdir -p "$out/vel"
printf 'scratch = %s\npersistent = %s\nmode = sync\nwatchdog_interval = 0\n' "$out/vel/scratch" "$out/vel/persistent" \
    >"$out/vel/veloc.cfg"
printf 'scratch = %s\nmode = sync\n' "$out/vel/scratch" >"$out/vel/mem-only.cfg"
veloc() { "${mpirun[@]}" "$out/veloc_test" "$@"; }
export CKPTFS_JOB=vel1
step "veloc: misuse answers VELOC_FAILURE, never crashes" veloc "$out/vel/veloc.cfg" errors
step "veloc: memory mode, versions 1..3" veloc "$out/vel/veloc.cfg" mem 1 3
step "veloc: ... the unknown key watchdog_interval is reported as ignored" \
    grep -q "watchdog_interval has no meaning" "$out/log.$((passed + failed - 1))"
step "veloc: Restart_test gives 3, Recover_mem restores every element, then 2 below it" \
    veloc "$out/vel/veloc.cfg" memrestart 3
step_fails "veloc: a rank SIGKILLed inside checkpoint 4 fails the job" veloc "$out/vel/veloc.cfg" kill 4 1
step "veloc: ... and version 4 is never offered" veloc "$out/vel/veloc.cfg" memrestart 3
step "veloc: rank 1's memory checkpoint of version 3 lost from the store" \
    bash -c "$(declare -f lose_file); ckptfs='$ckptfs' lose_file vel1 veloc heat-1-3.mem"
step "veloc: ... restored from persistent (checked), version 3 restarts" veloc "$out/vel/veloc.cfg" memrestart 3
step "veloc: file mode, versions 1..2" veloc "$out/vel/veloc.cfg" file 1 2
step "veloc: file mode restart reads version 2 back" veloc "$out/vel/veloc.cfg" filerestart 2
step "veloc: selective checkpoint and recovery" veloc "$out/vel/veloc.cfg" selective
step "veloc: VELOC_Init_single, each rank its own versions" veloc "$out/vel/veloc.cfg" single
export CKPTFS_JOB=vel2
step "veloc: no persistent level: versions 1..3 in memory" veloc "$out/vel/mem-only.cfg" mem 1 3
step "veloc: rank 1's version 3 lost from the store" \
    bash -c "$(declare -f lose_file); ckptfs='$ckptfs' lose_file vel2 veloc heat-1-3.mem"
step "veloc: ... Restart_test gives 2, the newest wholly recoverable" veloc "$out/vel/mem-only.cfg" memrestart 2
export CKPTFS_JOB=vel3
step "veloc: a new job has nothing to restart" veloc "$out/vel/veloc.cfg" memrestart none

# ---------------------------------------------------------------- across nodes
# A local cluster (docs/cluster.md): N node daemons on 127.0.0.1, each with its own
# store; the 4 ranks are mapped onto the nodes by node-wrap.sh (CKPTFS_NODE_ID).
# Completion and restart are job-wide through the daemons; a node is lost by killing
# its daemon and destroying its store, and a replacement starts empty.
daemons=()
stop_daemons() {
    local p
    for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${daemons[@]}"; do wait "$p" 2>/dev/null; done
    daemons=()
}
cleanup_all() {
    stop_daemons
    local c
    for c in "$out"/c*/c.toml; do
        [[ -f "$c" ]] || continue
        for n in $(sed -n 's/^id = "\(.*\)"/\1/p' "$c"); do
            "$ckptfs" --cluster "$c" --node-id "$n" destroy >/dev/null 2>&1
        done
    done
    cleanup
}
trap cleanup_all EXIT
until_ok() {
    local i
    for i in $(seq 1 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    return 1
}
declare -A node_pid
start_node() { # CLUSTER NODE
    "$ckptfs" node --cluster "$1" --node-id "$2" 2>>"${1%/*}/$2.log" &
    node_pid[$2]=$!
    daemons+=($!)
    until_ok "$ckptfs" --cluster "$1" --node-id "$2" node status
}
# Every file of dataset ID written on NODE has a partner copy (the levels show another
# node beside local).
partnered() { # CLUSTER NODE JOB ID FILES
    [[ $("$ckptfs" --cluster "$1" --node-id "$2" ls -l -R "/$6/$3/$4" 2>/dev/null | grep -cE "\[local, partner:node[0-9]+") == "$5" ]]
}
cluster_case() { # NODES
    local n=$1 per=$((4 / $1)) dir="$out/c$1" c
    mkdir -p "$dir/pfs"
    c="$dir/c.toml"
    # This suite's own ports (29000-29199, disjoint from the other suites' so that
    # scripts/test.sh can run them side by side): the first block of 10 with the
    # daemons' $n ports free (a daemon left by a killed run keeps its block).
    local port="" p q
    for p in $(seq 29000 10 29190); do
        for q in $(seq "$p" $((p + n - 1))); do
            (exec 3<>"/dev/tcp/127.0.0.1/$q") 2>/dev/null && continue 2
        done
        port=$p
        break
    done
    [[ -n "$port" ]] || { step "cluster $n nodes: $n free ports in 29000-29199" false; return; }
    step "cluster $n nodes: cluster init --local $n and $n node daemons" bash -c \
        "'$ckptfs' cluster init --local $n --out '$c' --port $port --job scrv$$ >/dev/null"
    local i
    for i in $(seq 1 "$n"); do start_node "$c" "node$i"; done
    step "cluster $n nodes: every daemon answers" bash -c \
        "for i in \$(seq 1 $n); do '$ckptfs' --cluster '$c' --node-id node\$i node status >/dev/null || exit 1; done"
    local run=(env CKPTFS_CLUSTER="$c" PER_NODE="$per" "${mpirun[@]}" "$here/node-wrap.sh")
    local last="node$n" victim=$((4 - 1))
    export CKPTFS_JOB="mn$n" SCR_FLUSH=0
    step "cluster $n nodes: scr, 3 checkpoints complete job-wide" bash -c "cd '$dir/pfs' && ${run[*]} '$out/scr_test' write 1 3"
    step "cluster $n nodes: scr restart on every node reads step.3" bash -c "cd '$dir/pfs' && ${run[*]} '$out/scr_test' restart step.3"
    step_fails "cluster $n nodes: rank $victim on $last SIGKILLed mid-checkpoint" bash -c \
        "cd '$dir/pfs' && ${run[*]} '$out/scr_test' kill 4 $victim"
    step "cluster $n nodes: ... restart skips the incomplete step.4, reads step.3" bash -c \
        "cd '$dir/pfs' && ${run[*]} '$out/scr_test' restart step.3"
    step "cluster $n nodes: $last's files of step.3 have partner copies" until_ok partnered "$c" "$last" "mn$n" 3 "$per" scr
    kill -9 "${node_pid[$last]}" 2>/dev/null
    wait "${node_pid[$last]}" 2>/dev/null
    step "cluster $n nodes: $last lost (daemon SIGKILLed, store destroyed)" \
        "$ckptfs" --cluster "$c" --node-id "$last" destroy
    start_node "$c" "$last"
    step "cluster $n nodes: after the loss, every rank restarts from step.3 (partner copies)" bash -c \
        "cd '$dir/pfs' && ${run[*]} '$out/scr_test' restart step.3"
    export CKPTFS_JOB="mv$n"
    step "cluster $n nodes: veloc, memory checkpoints 1..2 job-wide" \
        "${run[@]}" "$out/veloc_test" "$out/vel/veloc.cfg" mem 1 2
    step "cluster $n nodes: veloc, $last's version 2 has partner copies" \
        until_ok partnered "$c" "$last" "mv$n" 2 "$per" veloc
    kill -9 "${node_pid[$last]}" 2>/dev/null
    wait "${node_pid[$last]}" 2>/dev/null
    "$ckptfs" --cluster "$c" --node-id "$last" destroy >/dev/null 2>&1
    start_node "$c" "$last"
    step "cluster $n nodes: veloc, after losing $last, version 2 restores every element" \
        "${run[@]}" "$out/veloc_test" "$out/vel/veloc.cfg" memrestart 2
    stop_daemons
}
# The nodes' stores come from the cluster file; daemons and ranks agree on their size.
unset CKPTFS_STORE
export CKPTFS_MEM_SIZE=64M
cluster_case 2
cluster_case 4
unset CKPTFS_CLUSTER

# ---------------------------------------------------------------- every symbol
step "api_compile: every header function resolves in the libraries (LD_BIND_NOW=1)" \
    env LD_BIND_NOW=1 "$out/api_compile"

echo "== $passed passed, $failed failed ($(($(date +%s) - t0)) s)"
[[ $failed == 0 ]]
