#!/usr/bin/env bash
# pjdfstest (the POSIX conformance suite, Rust port from crates.io) on five targets in
# one run: a tmpfs directory, the CRFS mount over a tmpfs backend, the store mount with
# requests through /dev/fuse, the store mount with requests over io_uring ("ring": the
# kernel's enable_uring set for it and put back afterwards; skipped, with a line saying
# so, on a kernel without the parameter), and a store directory through the preload
# shim (`ckptfs run`: pjdfstest cds into /ckpt/pjdfstest and runs there, every file call
# going through the shim).
# Prints pass/fail counts per target and every check that passes on tmpfs but fails on
# another target. Fails when such a check fails on the CRFS mount (it must pass what its
# backend passes), on the store mount unless it matches a pattern in
# tests/fuse/unsupported.txt (the features the store deliberately lacks, documented
# with their errno in docs/fuse.md), or through the shim unless it matches a pattern in
# tests/fuse/unsupported-shim.txt (documented in docs/preload.md).
#
# Needs root (pjdfstest switches users; the mounts are served for all users) and
# /dev/fuse; without root it prints why and exits 0 (1 under CKPTFS_REQUIRE_ROOT_TESTS=1). pjdfstest is installed into
# .tools/ by scripts/setup-fuse.sh. Env: CKPTFS_BIN_DIR (default target/release),
# PJDFSTEST (the binary), PJDFSTEST_KEEP=1 keeps the work directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tests/fuse"
bin="${CKPTFS_BIN_DIR:-$root/target/release}/ckptfs"
pjd="${PJDFSTEST:-$root/.tools/bin/pjdfstest}"

if [ "$(id -u)" -ne 0 ]; then
    # Under CKPTFS_REQUIRE_ROOT_TESTS=1 (.ci/run) a root-only suite that cannot run fails,
    # as the Rust tests do (crates/ckptfs-testsupport, skip_root_only).
    if [ "${CKPTFS_REQUIRE_ROOT_TESTS:-0}" = 1 ]; then
        echo "pjdfstest: FAILED: needs root and CKPTFS_REQUIRE_ROOT_TESTS=1" >&2
        exit 1
    fi
    echo "SKIPPED: pjdfstest needs root (the suite switches users and the mounts serve every user)"
    exit 0
fi
[ -x "$pjd" ] || bash "$root/scripts/setup-fuse.sh"
[ -x "$pjd" ] || { echo "pjdfstest: $pjd missing after scripts/setup-fuse.sh" >&2; exit 1; }
[ -x "$bin" ] || { echo "pjdfstest: $bin missing (cargo build --release -p ckptfs-cli)" >&2; exit 1; }
[ -e /dev/fuse ] || { echo "pjdfstest: /dev/fuse missing" >&2; exit 1; }
# The second user of the configuration's dummy_auth.
id ckptfs-pjd >/dev/null 2>&1 || useradd -M -U -r -s /usr/sbin/nologin ckptfs-pjd

work=$(mktemp -d /tmp/ckptfs-pjdfstest.XXXXXX)
chmod 755 "$work"
store="pjdfstest-$$"
ring_store="pjdfstest-ring-$$"
uring_param=/sys/module/fuse/parameters/enable_uring
uring_old=$(cat "$uring_param" 2>/dev/null || true)
shim_store="pjdfstest-shim-$$"
mkdir -p "$work/tmpfs" "$work/crfs" "$work/store" "$work/ring"
cleanup() {
    set +e
    "$bin" umount "$work/crfs" >/dev/null 2>&1
    "$bin" umount "$work/store" >/dev/null 2>&1
    "$bin" umount "$work/ring" >/dev/null 2>&1
    "$bin" --store "$store" destroy >/dev/null 2>&1
    "$bin" --store "$ring_store" destroy >/dev/null 2>&1
    [ -n "$uring_old" ] && echo "$uring_old" >"$uring_param" 2>/dev/null
    "$bin" --store "$shim_store" destroy >/dev/null 2>&1
    umount "$work/tmpfs" 2>/dev/null
    if [ "${PJDFSTEST_KEEP:-0}" = 1 ]; then
        echo "pjdfstest: outputs kept in $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
mount -t tmpfs -o size=2g,mode=755 ckptfs-pjdfstest "$work/tmpfs"
mkdir -m 755 "$work/tmpfs/plain" "$work/tmpfs/backend"
"$bin" mount --backend "$work/tmpfs/backend" --log-file "$work/crfs.log" "$work/crfs" >/dev/null
"$bin" --store "$store" mount --io-uring off --log-file "$work/store.log" "$work/store" >/dev/null
targets=(tmpfs crfs store)
if [ -n "$uring_old" ]; then
    # The kernel parameter is global: changed under the lock the Slurm node prolog
    # (examples/slurm/prolog.sh) takes to set it, since scripts/test.sh runs the Slurm
    # suite beside this one (the mount daemon does not keep the lock's descriptor).
    exec 8>/run/ckptfs-prolog.lock
    flock 8
    echo Y >"$uring_param"
    "$bin" --store "$ring_store" mount --io-uring auto --log-file "$work/ring.log" "$work/ring" >/dev/null 8>&-
    echo "$uring_old" >"$uring_param"
    exec 8>&-
    if ! grep -q "requests over io_uring" "$work/ring.log"; then
        echo "pjdfstest: the ring mount did not get io_uring from the kernel; its log:" >&2
        cat "$work/ring.log" >&2
        exit 1
    fi
    targets+=(ring)
else
    echo "pjdfstest: no ring target (this kernel has no $uring_param)"
fi
targets+=(shim)

declare -A dir=([tmpfs]="$work/tmpfs/plain" [crfs]="$work/crfs" [store]="$work/store" [ring]="$work/ring")
# The shim's directory: its path length matters to pjdfstest, whose create_path_max
# overflows when (PATH_MAX - 1 - length of its nested temporary directories) is a
# multiple of NAME_MAX/2 (/ckpt/t would hit that; /ckpt/pjdfstest does not).
shim_dir=/ckpt/pjdfstest
for t in "${targets[@]}"; do
    # Each target on its own; a hang is cut after 15 minutes (and then fails the run).
    if [ "$t" = shim ]; then
        (cd / && timeout 900 "$bin" --store "$shim_store" --mem-size 512M --mount /ckpt run -- \
            sh -c 'mkdir -p "$1" && cd "$1" && exec "$2" -c "$3" -p "$1"' sh \
            "$shim_dir" "$pjd" "$here/pjdfstest.toml") >"$work/$t.out" 2>&1 || echo $? >"$work/$t.rc"
    else
        (cd "${dir[$t]}" && timeout 900 "$pjd" -c "$here/pjdfstest.toml" -p "${dir[$t]}") \
            >"$work/$t.out" 2>&1 || echo $? >"$work/$t.rc"
    fi
    # "name   ok|FAILED|skipped" lines -> "name result"
    awk 'NF >= 2 && $1 ~ /::/ && ($NF == "ok" || $NF == "FAILED" || $NF == "skipped") {print $1, $NF}' \
        "$work/$t.out" | sort >"$work/$t.res"
done

# Patterns (bash globs) of checks the store mount (the shim) may fail: the first word of
# each line of unsupported.txt (unsupported-shim.txt) that is not a comment.
patterns() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$1" | awk '{print $1}'; }
mapfile -t allowed_store < <(patterns "$here/unsupported.txt")
mapfile -t allowed_shim < <(patterns "$here/unsupported-shim.txt")
# is_allowed TARGET CHECK
is_allowed() {
    local p list
    case $1 in
        store | ring) list=("${allowed_store[@]}") ;;
        shim) list=("${allowed_shim[@]}") ;;
        *) return 1 ;;
    esac
    for p in "${list[@]}"; do
        # shellcheck disable=SC2053 # glob match on purpose
        [[ $2 == $p ]] && return 0
    done
    return 1
}

status=0
printf '%-8s %7s %7s %8s %7s\n' target passed failed skipped total
for t in "${targets[@]}"; do
    p=$(awk '$2 == "ok"' "$work/$t.res" | wc -l)
    f=$(awk '$2 == "FAILED"' "$work/$t.res" | wc -l)
    s=$(awk '$2 == "skipped"' "$work/$t.res" | wc -l)
    printf '%-8s %7d %7d %8d %7d\n' "$t" "$p" "$f" "$s" "$(wc -l <"$work/$t.res")"
done
tmpfs_total=$(wc -l <"$work/tmpfs.res")
if [ "$tmpfs_total" -lt 100 ]; then
    echo "pjdfstest: only $tmpfs_total checks ran on tmpfs; output:" >&2
    tail -20 "$work/tmpfs.out" >&2
    exit 1
fi
ok_on_tmpfs=$(awk '$2 == "ok" {print $1}' "$work/tmpfs.res")
for t in "${targets[@]:1}"; do
    declare -A res=()
    while read -r name r; do res[$name]=$r; done <"$work/$t.res"
    bad=() deliberate=0
    for name in $ok_on_tmpfs; do
        r=${res[$name]:-missing}
        [ "$r" = ok ] && continue
        if is_allowed "$t" "$name"; then
            deliberate=$((deliberate + 1))
            continue
        fi
        bad+=("$name ($r)")
    done
    unset res
    case $t in
        store | ring) echo "$t: $deliberate checks passing on tmpfs fail as documented (tests/fuse/unsupported.txt)" ;;
        shim) echo "shim: $deliberate checks passing on tmpfs fail as documented (tests/fuse/unsupported-shim.txt)" ;;
    esac
    if [ ${#bad[@]} -gt 0 ]; then
        status=1
        where="on the $t mount"
        [ "$t" = shim ] && where="through the shim"
        echo "$t: ${#bad[@]} checks pass on tmpfs but not $where:"
        for b in "${bad[@]}"; do
            name=${b%% *}
            echo "  $b"
            # The suite's reason: the indented lines after the check's line.
            awk -v n="$name" '$1 == n {on = 1; next} on && /^[[:space:]]/ {print "      " $0; next} {on = 0}' \
                "$work/$t.out" | head -4
        done
    fi
done
# A failed check exits 1; a signal (128+n: a crash, as the shim's once was) or the
# timeout (124) fails the run whatever the counts say.
for t in "${targets[@]}"; do
    rc=$(cat "$work/$t.rc" 2>/dev/null || echo 0)
    if [ "$rc" -gt 1 ]; then
        status=1
        echo "$t: pjdfstest exited with status $rc (124: timeout, >128: killed by a signal); output ends:"
        tail -5 "$work/$t.out" | sed 's/^/  /'
    fi
done
# fuser's "[Not Implemented] ..." warnings: every call the suite makes is answered.
for t in "${targets[@]}"; do
    [ -e "$work/$t.log" ] || continue
    if grep -q "Not Implemented" "$work/$t.log"; then
        status=1
        echo "$t: the daemon logged unimplemented FUSE calls:"
        grep "Not Implemented" "$work/$t.log" | sed 's/^/  /' | sort -u | head -5
    fi
done
if [ $status -eq 0 ]; then
    echo "pjdfstest: the mounts and the shim pass every check tmpfs passes (store, shim: except the documented features)"
fi
exit $status
