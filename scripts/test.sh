#!/usr/bin/env bash
# The README's test command: set up, build everything in release mode once, pass the
# gates, then run every test suite. Exits non-zero if anything fails.
#
# The suites run side by side, each into its own log (printed when it fails), with a
# summary line per suite and its time at the end:
#   lane 1: `cargo test --workspace`, then tests/fuse (both set the kernel's FUSE
#           enable_uring parameter and mount FUSE file systems, so not at once);
#   lane 2: the other tests/*/run.sh suites, at most CKPTFS_TEST_JOBS (default 2) at once.
# CKPTFS_TEST_JOBS=0 runs everything one after the other (lane 1, then lane 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CARGO_TERM_COLOR=never
echo "== build (release)"
cargo build --release --workspace --all-targets
export CKPTFS_BIN_DIR="${CKPTFS_BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/release}"
echo "== gate: cargo fmt"
cargo fmt --all --check
echo "== gate: import circles, crate graph, forbidden dependencies (scripts/check-graph.sh)"
bash scripts/check-graph.sh
echo "== gate: cargo clippy (warnings denied, every unsafe block documented)"
cargo clippy --release --workspace --all-targets -- -D warnings -W clippy::undocumented_unsafe_blocks
echo "== gate: cargo doc (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

logs=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-test-logs.XXXXXX")
jobs_max=${CKPTFS_TEST_JOBS:-2}
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

others=()
for t in tests/*/run.sh; do
    [ -e "$t" ] || continue
    [ "$t" = tests/fuse/run.sh ] && continue
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
    for t in "${others[@]}"; do
        # The first lane counts as one running job.
        while [ "$(jobs -rp | wc -l)" -gt "$jobs_max" ]; do wait -n || true; done
        suite "$(dirname "$t")" bash "$t" &
    done
    wait
    wait "$lane1_pid" 2>/dev/null || true
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
