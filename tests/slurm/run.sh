#!/usr/bin/env bash
# The Slurm suite (docs/slurm.md): a real Slurm 22.05 (scripts/slurm-local.sh: munge,
# slurmctld, 4 slurmd on this machine) runs the documented example job
# (examples/slurm/ckptfs-job.sh) with sbatch:
#
#   1. 4 nodes x 2 ranks checkpoint through ckptfs (daemons started with the job,
#      partner copies across the topology.conf switches); the job-end flush puts every
#      rank's newest checkpoint on the PFS; the results equal an uninterrupted run.
#   2. A node's daemon and memory are lost after the 3rd dataset; the job is requeued
#      and every rank restarts from that dataset (the lost node's ranks from its
#      partner's memory) and finishes identical to an uninterrupted run.
#   3. The allocation ends (time limit) while the flush runs, throttled: the flush stops
#      at its time bound and the report names what did not reach the PFS; a second
#      job whose flush has time reports it complete.
#   4. The job-end flush also to object storage (a real S3 server, versitygw from
#      scripts/setup-s3.sh): the newest dataset in the bucket, restored from it byte
#      for byte; with the server down the flush reports what is not in the bucket.
#   5. A node lost and replaced by another host: the requeued job's new allocation has
#      c5 instead of c3 (c3 drained); c5 runs as node c3, its ranks restart from the
#      partner's memory, the results equal an uninterrupted run.
#
#   bash tests/slurm/run.sh [CASE...]          (cases 1-5; default all)
#
# Needs root (Slurm's daemons) and scripts/setup-slurm.sh's packages: fails otherwise;
# case 4 needs versitygw (scripts/setup-s3.sh; VERSITYGW names another binary).
# Starts the local cluster (5 nodes) if it is not running and stops it at the end if it
# started it. Ports (this suite's own, disjoint from the other suites' so that
# scripts/test.sh can run them side by side): the Slurm daemons 17810-17815
# (scripts/slurm-local.sh), the job's node daemons 28000-28399 (each job submitted its
# own 40; SLURM_TEST_PORT: one first port for every job), their metrics 27960-27963
# (SLURM_TEST_METRICS_PORT), the S3 server 28900-28999 (S3_LOCAL_PORTS).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=${CKPTFS_BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/release}
export CKPTFS_BIN=$BIN/ckptfs
passed=0 failed=0
t0=$(date +%s)
CASES=" ${*:-1 2 3 4 5} "
# The jobs get the submitter's environment (sbatch --export=ALL): an inherited setting
# would change which node ids they take or where they flush.
unset CKPTFS_PREVIOUS_CLUSTER CKPTFS_FLUSH_S3
want() { [[ "$CASES" == *" $1 "* ]]; }
# Case 4's S3 server on this suite's ports (the object and Python suites have their own).
export S3_LOCAL_PORTS=${S3_LOCAL_PORTS:-28900-28999}
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }
finish() { echo "tests/slurm: $passed passed, $failed failed ($(($(date +%s) - t0)) s)"; [ "$failed" -eq 0 ]; exit $?; }
[ "$(id -u)" -eq 0 ] || { bad "needs root (Slurm's daemons)"; finish; }
for t in sbatch scontrol slurmctld slurmd munged cc python3 curl promtool; do
    command -v "$t" >/dev/null || { bad "$t missing (bash scripts/setup-slurm.sh)"; finish; }
done
for f in ckptfs libckptfs_preload.so; do
    [ -e "$BIN/$f" ] || { bad "$BIN/$f missing (cargo build --release -p ckptfs-cli -p ckptfs-preload)"; finish; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-slurm-test.XXXXXX")
chmod 755 "$WORK"
started=0
if ! bash scripts/slurm-local.sh status 2>/dev/null | grep -q '^slurmctld: running'; then
    started=1
fi
cleanup() {
    # Jobs of this suite still queued or running are cancelled, their stores destroyed.
    for j in $(cat "$WORK"/jobs 2>/dev/null); do scancel "$j" 2>/dev/null; done
    for j in $(cat "$WORK"/jobs 2>/dev/null); do
        for n in 1 2 3 4 5; do
            for d in /dev/shm /dev/shm-ckptfs; do
                "$CKPTFS_BIN" --shm-dir "$d" --store "slurm-$j.c$n" destroy >/dev/null 2>&1
            done
        done
    done
    [ -n "${DRAINED:-}" ] && scontrol update nodename="$DRAINED" state=resume 2>/dev/null
    [ -d "$WORK/s3" ] && bash scripts/s3-local.sh stop "$WORK/s3" >/dev/null 2>&1
    [ "$started" = 1 ] && bash scripts/slurm-local.sh stop >/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
bash scripts/slurm-local.sh start 5 || { bad "scripts/slurm-local.sh start 5"; finish; }

cc -O2 -o "$WORK/heat" examples/heat/heat.c || { bad "build heat"; finish; }
# reference STEPS: the field of an uninterrupted run to STEPS (512x512, a checkpoint every 10).
reference() { [ -f "$WORK/ref.$1" ] || "$WORK/heat" 512 512 "$1" 10 "$WORK/refck.$1" "$WORK/ref.$1" >/dev/null; echo "$WORK/ref.$1"; }

NSUBMIT=0
# The nodes whose slurmd is no longer running (its pid file names a dead process).
# Slurm 22.05's slurmd has been seen to abort on a corrupted heap inside its host-list
# code (malloc(): unaligned tcache chunk detected, in slurm_hostlist_create_dims; a core
# in /var/lib/ckptfs-slurm/log) while a job was requeued: that is Slurm's crash, not the
# case's result.
dead_slurmds() {
    local n f
    for n in c1 c2 c3 c4 c5; do
        f=/var/lib/ckptfs-slurm/run/slurmd-$n.pid
        [ -f "$f" ] || continue
        kill -0 "$(cat "$f")" 2>/dev/null || echo "$n"
    done
}
# submit NAME [sbatch options] -- [VAR=value ...]: as submit_once; when a slurmd died
# during the job, the daemons are started again and the case is submitted once more
# (said in the log; a second crash leaves the case's result as it is).
submit() {
    local dead
    submit_once "$@"
    dead=$(dead_slurmds)
    [ -z "$dead" ] && return 0
    echo "   slurmd of $dead died during job $JOB (Slurm's own crash; logs and core in /var/lib/ckptfs-slurm/log): restarting Slurm's daemons and submitting the case again"
    scancel "$JOB" 2>/dev/null
    bash scripts/slurm-local.sh start 5 >/dev/null || { bad "scripts/slurm-local.sh start 5 after slurmd of $dead died"; return 0; }
    rm -rf "$JD"
    submit_once "$@"
}
# submit_once NAME [sbatch options] -- [VAR=value ...]: sbatch --wait the example job
# with its own job directory; sets JOB, RC, OUT, JD. (Cases 1-4 name their nodes,
# c1-c4: the cluster has a fifth node for case 5.)
submit_once() {
    local name=$1; shift
    local opts=()
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    JD=$WORK/$name
    mkdir -p "$JD"
    local exports="ALL,CKPTFS_JOBDIR=$JD/job"
    # The job's node daemons on this suite's ports, not on the example's default (one
    # derived from the job id, anywhere in 20000-59999: another suite's or an ephemeral
    # port); each job its own 40 (a requeued job keeps them: the same environment).
    exports+=",CKPTFS_PORT=${SLURM_TEST_PORT:-$((28000 + NSUBMIT % 10 * 40))}"
    NSUBMIT=$((NSUBMIT + 1))
    for kv in "$@"; do exports+=",$kv"; done
    OUT=$JD/out.txt  # appended to across a requeue
    JOB=$(sbatch --parsable --open-mode=append --chdir="$ROOT" --output="$OUT" --export="$exports" "${opts[@]}" examples/slurm/ckptfs-job.sh)
    echo "$JOB" >>"$WORK/jobs"
    # --wait through a requeue: poll until the job has left the queue for good.
    local signaled=0 scraped=0 held_since=
    for _ in $(seq 1 600); do
        # WARN_WHEN_COMPUTING=1: Slurm's warning (USR1 to the batch shell) once the job
        # computes after its checkpoints. (--signal=B:USR1@T alone may come up to a
        # minute early, by Slurm's event resolution: too early for a 1-minute test job.)
        if [ "${WARN_WHEN_COMPUTING:-0}" = 1 ] && [ "$signaled" = 0 ] && grep -q 'computing on' "$OUT" 2>/dev/null; then
            scancel --batch --signal=USR1 "$JOB" && signaled=1
        fi
        # SCRAPE_PORT: the daemons' metrics (CKPTFS_METRICS_PORT) while the job computes.
        if [ -n "${SCRAPE_PORT:-}" ] && [ "$scraped" = 0 ] && grep -q 'computing on' "$OUT" 2>/dev/null; then
            for i in 0 1 2 3; do curl -sf --max-time 2 "http://127.0.0.1:$((SCRAPE_PORT + i))/metrics" >"$JD/metrics.$i.txt"; done
            scraped=1
        fi
        st=$(scontrol show job "$JOB" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        case "$st" in COMPLETED | FAILED | TIMEOUT | CANCELLED | NODE_FAIL | OUT_OF_MEMORY | "") break ;; esac
        # A slurmd that died leaves the job pending or hung: `submit` starts it again.
        [ -n "$(dead_slurmds)" ] && break
        # Slurm holds a requeued job for about two minutes (Reason=BeginTime): release it
        # (DRAIN_ON_REQUEUE: first take that node out of service, as a site does with a
        # failed node, so that the new allocation gets another host).
        # Not in the second the run was requeued: slurmd refuses a credential issued in
        # the same second as its revocation of the run before ("Job credential revoked",
        # the job then fails), which is why Slurm itself holds the job: wait 2 s first.
        if [ "$st" = PENDING ] && scontrol show job "$JOB" | grep -q 'Reason=BeginTime'; then
            [ -n "${held_since:-}" ] || held_since=$SECONDS
        fi
        if [ "$st" = PENDING ] && [ $((SECONDS - ${held_since:-SECONDS})) -ge 2 ] && scontrol show job "$JOB" | grep -q 'Reason=BeginTime'; then
            if [ -n "${DRAIN_ON_REQUEUE:-}" ] && [ -z "${DRAINED:-}" ]; then
                scontrol update nodename="$DRAIN_ON_REQUEUE" state=drain reason=ckptfs-test-lost && DRAINED=$DRAIN_ON_REQUEUE
                # The first run excluded the spare node; the requeued job may take it.
                scontrol update jobid="$JOB" excnodelist="$DRAIN_ON_REQUEUE"
            fi
            scontrol update jobid="$JOB" starttime=now 2>/dev/null
        fi
        sleep 0.5
    done
    RC=$(scontrol show job "$JOB" 2>/dev/null | grep -o ' ExitCode=[0-9]*' | cut -d= -f2)
    STATE=$st
    echo "   job $JOB ($name): $STATE, exit ${RC:-?}, restarts $(scontrol show job "$JOB" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)"
}
show_out() { echo "--- $OUT" >&2; grep -v '^ckptfs ckpt: dataset' "$OUT" | tail -40 >&2; }
# The newest checkpoint of every rank on the PFS, byte-identical to the one written.
check_pfs() {
    local step=$1 missing=0
    for r in 0 1 2 3 4 5 6 7; do
        f=$(find "$JD/job/pfs" -path "*r$r/heat.$step" -type f 2>/dev/null | head -1)
        [ -n "$f" ] || { missing=$((missing + 1)); continue; }
        # header: magic, nx, ny, step; the grid after it (heat checks its own sum on resume).
        python3 -c 'import struct,sys; h=open(sys.argv[1],"rb").read(40); sys.exit(0 if h[:8]==b"HEATCKP1" and struct.unpack("<QQQ",h[8:32])[2]==int(sys.argv[2]) else 1)' "$f" "$step" ||
            missing=$((missing + 1))
    done
    [ "$missing" = 0 ]
}

if want 1; then
echo "== 1. the example job: 4 nodes x 2 ranks, partner copies, the job-end flush"
SCRAPE_PORT=${SLURM_TEST_METRICS_PORT:-27960}
submit basic -w 'c[1-4]' -- HEAT_SEGMENTS=4 CKPTFS_METRICS_PORT=$SCRAPE_PORT CKPTFS_EXAMPLE_COMPUTE_S=4
unset SCRAPE_PORT
if [ "$STATE" = COMPLETED ] && [ "$RC" = 0 ]; then ok "sbatch: the example job exits 0"; else bad "example job: $STATE exit $RC"; show_out; fi
grep -q 'daemons up on every node' "$OUT" && ok "a daemon started with the job on every node" || bad "daemons"
m=0
for i in 0 1 2 3; do
    grep -q "^ckptfs_node_info{node=\"c$((i + 1))\"" "$JD/metrics.$i.txt" 2>/dev/null &&
        grep -Eq '^ckptfs_newest_dataset_protection_level [12]$' "$JD/metrics.$i.txt" &&
        [ "$(sed -n 's/^ckptfs_level_files{level="partner"} //p' "$JD/metrics.$i.txt")" -ge 6 ] 2>/dev/null &&
        promtool check metrics <"$JD/metrics.$i.txt" >/dev/null 2>&1 && m=$((m + 1))
done
[ "$m" = 4 ] && ok "each daemon of the job served its metrics (CKPTFS_METRICS_PORT): files in partner memory, newest dataset protected; promtool passes" ||
    bad "metrics of the job's daemons: $m of 4"
grep -q 'failure domains from Slurm' "$OUT" && grep -q '^switch=s1 *c1,c2 *nothing' "$OUT" &&
    ok "the cluster file takes topology.conf's switches as failure domains" || { bad "topology"; show_out; }
[ "$(stat -c %a "$JD/job/c.secret")" = 600 ] && [ "$(stat -c %a "$JD/job")" = 700 ] &&
    ok "the per-job secret is mode 0600 in a 0700 job directory" || bad "secret mode $(stat -c %a "$JD/job/c.secret")"
grep -Eq '^ +[0-9]+ +step40 +complete .* local,partner' "$OUT" && ok "dataset step40 complete job-wide with partner copies" || { bad "dataset list"; show_out; }
grep -q "^flush: complete: dataset step40" "$OUT" && check_pfs 40 && ok "the job-end flush put every rank's step-40 checkpoint on the PFS" || { bad "flush"; show_out; }
same=0
for r in 0 1 2 3 4 5 6 7; do cmp -s "$(reference 40)" "$JD/job/r$r.bin" && same=$((same + 1)); done
[ "$same" = 8 ] && ok "all 8 ranks' results equal the uninterrupted run" || bad "$same of 8 results equal"
grep -q 'stores destroyed' "$OUT" && ! ls /dev/shm*/ckptfs.slurm-"$JOB".* >/dev/null 2>&1 &&
    ok "the node memory is released after the flush" || bad "stores left: $(ls /dev/shm*/ckptfs.slurm-"$JOB".* 2>&1)"

fi

if want 2; then
echo "== 2. a node lost after dataset 3, the job requeued, the restart"
submit requeue -w 'c[1-4]' -- HEAT_SEGMENTS=5 CKPTFS_EXAMPLE_LOSE=c3:3
if [ "$STATE" = COMPLETED ] && [ "$RC" = 0 ]; then ok "the requeued job completes (exit 0)"; else bad "requeue job: $STATE exit $RC"; show_out; fi
grep -q 'losing c3: daemon killed, node memory destroyed; requeueing' "$OUT" && grep -q 'run 1 of job' "$OUT" &&
    ok "run 0 lost c3 and requeued; run 1 started in a new allocation" || { bad "requeue"; show_out; }
n=$(grep -c 'restart from dataset step30' "$OUT")
[ "$n" = 8 ] && ok "all 8 ranks restarted from dataset step30" || { bad "$n ranks restarted from step30"; show_out; }
grep -Eq '^rank [45] on c3: restart from dataset step30 from partner' "$OUT" &&
    ok "the lost node's ranks got their files from the partner's memory" || { bad "no partner restore for c3"; grep '^rank' "$OUT" >&2; }
same=0
for r in 0 1 2 3 4 5 6 7; do cmp -s "$(reference 50)" "$JD/job/r$r.bin" && same=$((same + 1)); done
[ "$same" = 8 ] && ok "after the restart all 8 results equal the uninterrupted run" || bad "$same of 8 results equal after the restart"
grep -q '^flush: complete: ' "$OUT" && check_pfs 50 && ok "the requeued job's flush is complete" || { bad "flush after requeue"; show_out; }

fi

if want 3; then
echo "== 3. the allocation ends during the flush"
# A job whose computation outlasts its time limit; the warning comes while it computes
# (the example's own --signal=B:USR1@50 is moved to the last second: Slurm may send it
# up to a minute early, before the checkpoints of a short test job); the
# flush of the newest dataset (2 MiB per rank, 4 MiB per node) is throttled to 1 MB/s
# and bounded at 2 s: it cannot finish, and the allocation's end is near.
export WARN_WHEN_COMPUTING=1
submit timelimit -w 'c[1-4]' --time=2 --signal=B:USR1@1 -- HEAT_SEGMENTS=3 CKPTFS_EXAMPLE_COMPUTE_S=300 CKPTFS_FLUSH_MAX_BW=1 CKPTFS_FLUSH_TIMEOUT=2
grep -q 'time limit near (SIGUSR1)' "$OUT" && ok "Slurm's warning before the time limit started the flush" || { bad "no USR1"; show_out; }
grep -q 'stopped by the time bound' "$OUT" && grep -Eq '^flush: INCOMPLETE: [0-9]+ files not on the PFS: c[1-4]:/' "$OUT" &&
    ok "the bounded flush reports the files it could not flush" || { bad "incomplete flush report"; show_out; }
[ "$RC" != 0 ] && ok "the job reports the incomplete flush in its exit status ($STATE, exit $RC)" || bad "exit $RC after an incomplete flush"
submit timelimit-ok -w 'c[1-4]' --time=2 --signal=B:USR1@1 -- HEAT_SEGMENTS=3 CKPTFS_EXAMPLE_COMPUTE_S=300 CKPTFS_FLUSH_TIMEOUT=30
unset WARN_WHEN_COMPUTING
# (The warning may come before the last segment: the flush is of the newest complete one.)
last=$(sed -n 's/^flush: complete: dataset step\([0-9]*\),.*/\1/p' "$OUT")
grep -q 'time limit near (SIGUSR1)' "$OUT" && [ -n "$last" ] && check_pfs "$last" &&
    ok "with time to finish, the flush at the time limit completes" || { bad "flush at the time limit"; show_out; }
grep -q 'stores destroyed' "$OUT" && ! ls /dev/shm*/ckptfs.slurm-"$JOB".* >/dev/null 2>&1 &&
    ok "the memory is released after the flush at the time limit" || bad "stores left: $(ls /dev/shm*/ckptfs.slurm-"$JOB".* 2>&1)"
fi

if want 4; then
echo "== 4. the job-end flush to object storage (a real S3 server)"
if [ ! -x "${VERSITYGW:-.tools/s3/bin/versitygw}" ] && [ -z "${CKPTFS_REQUIRE_SERVICES:-}" ]; then
    echo "SKIPPED: no S3 server (.tools/s3/bin/versitygw; bash scripts/setup-s3.sh needs Go)"
elif ! env=$(bash scripts/s3-local.sh start "$WORK/s3" 2>"$WORK/s3.err"); then
    bad "the S3 server does not start (scripts/setup-s3.sh; VERSITYGW): $(tail -2 "$WORK/s3.err")"
else
    eval "$env"   # AWS_ENDPOINT_URL and the keys: sbatch passes them to the job
    submit s3 -w 'c[1-4]' -- HEAT_SEGMENTS=3 CKPTFS_FLUSH_S3=s3://ckptfs/slurm-test
    if [ "$STATE" = COMPLETED ] && [ "$RC" = 0 ]; then ok "the job with an object-storage flush exits 0"; else bad "s3 job: $STATE exit $RC"; show_out; fi
    n=$(grep -Ec "^node c[1-4]: dataset step30: s3:ckptfs/slurm-test/slurm-$JOB: done: [0-9]+ files .* 2 in object storage$" "$OUT")
    grep -Eq "^flush: complete: dataset step30, 8 files of 4 nodes on the PFS, 8 in object storage$" "$OUT" && [ "$n" = 4 ] &&
        ok "the flush report: every node's newest files on the PFS and in the bucket" || { bad "object flush report ($n nodes)"; show_out; }
    # The bucket's copy, restored into a fresh store (every chunk's CRC32C checked),
    # equals the PFS copy of every rank's newest checkpoint.
    st=slurm-test-s3-$$
    "$CKPTFS_BIN" --store "$st" restore --dest "s3://ckptfs/slurm-test/slurm-$JOB" >"$JD/restore.txt" 2>&1
    same=0
    for r in 0 1 2 3 4 5 6 7; do
        pfs=$(find "$JD/job/pfs" -path "*r$r/heat.30" -type f | head -1)
        "$CKPTFS_BIN" --store "$st" get "/r$r/heat.30" "$JD/s3.r$r" 2>/dev/null && [ -n "$pfs" ] && cmp -s "$pfs" "$JD/s3.r$r" && same=$((same + 1))
    done
    "$CKPTFS_BIN" --store "$st" destroy >/dev/null 2>&1
    [ "$same" = 8 ] && ok "restored from the bucket: all 8 ranks' step-30 checkpoints equal the PFS copies" ||
        { bad "$same of 8 checkpoints restored from the bucket equal"; cat "$JD/restore.txt" >&2; }
    grep -q 'stores destroyed' "$OUT" && ok "the memory is released after the flush to both levels" || bad "stores kept after the s3 flush"
    # The server down: the PFS flush completes, the object flush cannot; the report says
    # which files are not in the bucket and the memory is kept.
    bash scripts/s3-local.sh stop "$WORK/s3"
    submit s3-down -w 'c[1-4]' -- HEAT_SEGMENTS=2 CKPTFS_FLUSH_S3=s3://ckptfs/slurm-test CKPTFS_FLUSH_TIMEOUT=20 CKPTFS_S3_MAX_RETRIES=1 CKPTFS_S3_RETRY_TIMEOUT=3
    grep -Eq "^flush: INCOMPLETE: 8 files not on the PFS or in object storage: c1:/r[01]/heat.20 \(object storage\)" "$OUT" &&
        grep -Eq "^node c1: dataset step20: done: .* 2 on the PFS$" "$OUT" &&
        ok "with the S3 server down the report names the files not in the bucket (the PFS flush complete)" || { bad "report with the server down"; show_out; }
    [ "$RC" != 0 ] && grep -q 'flush incomplete: node memory kept' "$OUT" &&
        ok "the job exits non-zero and keeps the node memory ($STATE, exit $RC)" || bad "exit $RC with the object flush incomplete"
fi
fi

if want 5; then
echo "== 5. a node lost and replaced by another host in the new allocation"
# The first run excludes c5 (so it has c1-c4); c3 is drained while the job waits to be
# requeued and the exclusion moved to it (DRAIN_ON_REQUEUE): the new allocation is c1,
# c2, c4, c5.
DRAIN_ON_REQUEUE=c3 submit replace -x c5 -- HEAT_SEGMENTS=5 CKPTFS_EXAMPLE_LOSE=c3:3
if [ -n "${DRAINED:-}" ]; then scontrol update nodename="$DRAINED" state=resume 2>/dev/null; DRAINED=""; fi
if [ "$STATE" = COMPLETED ] && [ "$RC" = 0 ]; then ok "the requeued job completes in the new allocation (exit 0)"; else bad "replace job: $STATE exit $RC"; show_out; fi
grep -q 'run 1 of job .* on c\[1-2,4-5\]' "$OUT" && grep -q 'host c5 runs as node c3 (replaces it)' "$OUT" &&
    ok "run 1 got c5 instead of c3; c5 runs as node c3" || { bad "new allocation"; show_out; }
n=$(grep -c 'restart from dataset step30' "$OUT")
[ "$n" = 8 ] && ok "all 8 ranks restarted from dataset step30" || { bad "$n ranks restarted from step30"; show_out; }
# Both of c3's ranks run on c5; the node's files come back once, from the partner's
# memory, by whichever of the two restarts first (the other finds them local).
[ "$(grep -Ec '^rank [45] on c3 \(host c5\): restart from dataset step30' "$OUT")" = 2 ] &&
    grep -Eq '^rank [45] on c3 \(host c5\): restart from dataset step30 from partner' "$OUT" &&
    ok "the lost node's ranks ran on c5 and got their files from the partner's memory" || { bad "ranks of c3 on c5"; grep '^rank' "$OUT" >&2; }
same=0
for r in 0 1 2 3 4 5 6 7; do cmp -s "$(reference 50)" "$JD/job/r$r.bin" && same=$((same + 1)); done
[ "$same" = 8 ] && ok "after the restart on the new host all 8 results equal the uninterrupted run" || bad "$same of 8 results equal"
grep -q '^flush: complete: ' "$OUT" && check_pfs 50 && ok "the flush of the job on the new hosts is complete" || { bad "flush after the replacement"; show_out; }
fi

finish
