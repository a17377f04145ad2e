#!/usr/bin/env bash
# The README's test command: set up, build everything in release mode once, pass the
# gates, then run every test suite. Exits non-zero if anything fails.
#
#   scripts/test.sh                  everything (what CI runs, through .ci/run)
#   scripts/test.sh --suites-only    only the suites, against the binaries built before
#
# The suites run side by side, each into its own log (printed when it fails), with a
# summary line per suite and its time at the end:
#   lane 1: `cargo test --workspace`, then tests/fuse (both set the kernel's FUSE
#           enable_uring parameter and mount FUSE file systems, so not at once);
#   lane 2: the other tests/*/run.sh suites, longest first, at most CKPTFS_TEST_JOBS
#           (default 1) at once.
# CKPTFS_TEST_JOBS=0 runs everything one after the other (lane 1, then lane 2).
#
# Side by side is safe because no two suites share anything one of them changes or
# listens on: each has its own TCP ports on 127.0.0.1 (cargo test: each test its own
# range in 17160-17440, 25000-26799 (its S3 servers 25000-25999), 27150-27299,
# 27400-27499, and, checked free just before, datasets_cluster's 19000-19299,
# erasure_peers' 19400-19439, ckptfs-partner's cluster_nodes' 19500-19699; the pool
# tests' ports are the kernel's choice, bound and held from the start);
# tests/metrics 27700-27709; tests/slurm 17810-17815, 27960-27963, 28000-28999;
# tests/scr-veloc 29000-29199; tests/python 30000-30999; tests/s3 31000-31099), the
# fixed ones below Linux's ephemeral ports (32768-60999) that any process may take;
# its own store, job, network namespace and /tmp names (the pid in each) and FUSE
# mount points (temporary directories); only tests/slurm runs Slurm and munge, only
# tests/metrics Prometheus; the kernel's FUSE enable_uring is changed only by lane 1,
# which holds the Slurm prolog's lock (/run/ckptfs-prolog.lock,
# examples/slurm/prolog.sh) while it has it changed.
set -euo pipefail
cd "$(dirname "$0")/.."
suites_only=0
[ "${1:-}" = --suites-only ] && suites_only=1
export CARGO_TERM_COLOR=never
if [ "$suites_only" = 0 ]; then
    bash scripts/setup.sh
    echo "== build (release)"
    cargo build --release --workspace --all-targets
fi
export CKPTFS_BIN_DIR="${CKPTFS_BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/release}"
if [ "$suites_only" = 0 ]; then
    echo "== gate: cargo fmt"
    cargo fmt --all --check
    echo "== gate: import circles, crate graph, forbidden dependencies (scripts/check-graph.sh)"
    bash scripts/check-graph.sh
    echo "== gate: cargo clippy (warnings denied, every unsafe block documented)"
    cargo clippy --release --workspace --all-targets -- -D warnings -W clippy::undocumented_unsafe_blocks
    echo "== gate: cargo doc (warnings denied)"
    # --release: the dependencies as clippy just checked them (the same profile), not
    # all of them again in the dev profile.
    RUSTDOCFLAGS="-D warnings" cargo doc --release --workspace --no-deps
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-test-logs.XXXXXX")
jobs_max=${CKPTFS_TEST_JOBS:-1}
t_all=$SECONDS

# suite NAME CMD...: run CMD with its output in $logs/NAME.log; record "rc seconds".
suite() {
    local name=$1 file t0=$SECONDS rc=0
    shift
    file=$logs/${name//\//_}
    echo "== $name: started"
    "$@" >"$file.log" 2>&1 </dev/null || rc=$?
    echo "$rc $((SECONDS - t0))" >"$file.result"
    if [ "$rc" = 0 ]; then
        echo "== $name: passed ($((SECONDS - t0)) s)"
    else
        echo "== $name: FAILED (exit $rc, $((SECONDS - t0)) s; log below at the end)"
    fi
}

lane1() {
    suite "cargo test" cargo test --release --workspace --no-fail-fast
    [ -e tests/fuse/run.sh ] && suite tests/fuse bash tests/fuse/run.sh
    return 0
}

# Lane 2 longest first (Slurm, then Python), so that the lanes end near each other.
others=()
for t in tests/slurm/run.sh tests/python/run.sh tests/*/run.sh; do
    [ -e "$t" ] || continue
    [ "$t" = tests/fuse/run.sh ] && continue
    [[ " ${others[*]} " == *" $t "* ]] && continue
    others+=("$t")
done
names=("cargo test")
[ -e tests/fuse/run.sh ] && names+=(tests/fuse)
for t in "${others[@]}"; do names+=("$(dirname "$t")"); done

if [ "$jobs_max" = 0 ]; then
    lane1
    for t in "${others[@]}"; do suite "$(dirname "$t")" bash "$t"; done
else
    lane1 &
    lane1_pid=$!
    lane2=()
    for t in "${others[@]}"; do
        # At most jobs_max of lane 2's at once (lane 1 not counted).
        while :; do
            running=0
            for p in "${lane2[@]}"; do kill -0 "$p" 2>/dev/null && running=$((running + 1)); done
            [ "$running" -lt "$jobs_max" ] && break
            wait -n || true
        done
        suite "$(dirname "$t")" bash "$t" &
        lane2+=($!)
    done
    wait
fi

echo "== summary ($((SECONDS - t_all)) s for the suites)"
failed=()
for n in "${names[@]}"; do
    f=$logs/${n//\//_}
    if [ -f "$f.result" ]; then
        read -r rc secs <"$f.result"
    else
        rc=missing secs=0
    fi
    if [ "$rc" = 0 ]; then
        printf '  %-18s passed  %5s s\n' "$n" "$secs"
    else
        printf '  %-18s FAILED  %5s s (exit %s)\n' "$n" "$secs" "$rc"
        failed+=("$n")
    fi
done
for n in "${failed[@]}"; do
    echo "==== log of $n (failed) ===="
    cat "${logs}/${n//\//_}.log" 2>/dev/null || echo "(no log)"
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "== ${#failed[@]} test suite(s) failed: ${failed[*]} (logs in $logs)"
    exit 1
fi
rm -rf "$logs"
echo "== all test suites passed"
