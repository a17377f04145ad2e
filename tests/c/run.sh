#!/usr/bin/env bash
# Build libckptfs and the C/C++ test programs with cc/c++, run them, exit non-zero on
# any failure.
#
#   tests/c/run.sh              build and run the tests
#   tests/c/run.sh bench [MiB [reps]]   build and run capi_bench (prints a table)
#
# Library location: $CKPTFS_BIN_DIR if set (must already hold libckptfs.so and
# libckptfs.a), else ${CARGO_TARGET_DIR:-<repo>/target}/release after
# `cargo build --release -p ckptfs-capi`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [[ -n "${CKPTFS_BIN_DIR:-}" ]]; then
    libdir="$CKPTFS_BIN_DIR"
else
    libdir="${CARGO_TARGET_DIR:-$root/target}/release"
    (cd "$root" && cargo build --release -q -p ckptfs-capi)
fi
for f in libckptfs.so libckptfs.a; do
    [[ -f "$libdir/$f" ]] || { echo "run.sh: $libdir/$f missing (cargo build --release -p ckptfs-capi)" >&2; exit 2; }
done

out="$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-ctest.XXXXXX")"
trap 'rm -rf "$out"' EXIT
cc=${CC:-cc}
cxx=${CXX:-c++}
warn=(-Wall -Wextra -Werror)

# The header alone, pedantic C99, C11 and C++11.
printf '#include "ckptfs.h"\nint main(void) { return 0; }\n' > "$out/h.c"
"$cc" -std=c99 -pedantic "${warn[@]}" -I "$root/include" -c "$out/h.c" -o "$out/h99.o"
"$cc" -std=c11 -pedantic "${warn[@]}" -I "$root/include" -c "$out/h.c" -o "$out/h11.o"
cp "$out/h.c" "$out/h.cpp"
"$cxx" -std=c++11 -pedantic "${warn[@]}" -I "$root/include" -c "$out/h.cpp" -o "$out/hpp.o"

# The programs: C against the shared and the static library, C++ against the shared one.
# capi_test: files, namespace, mounts, levels; capi_region_test: data region, spill,
# limits, environment, damaged segments (both include capi_check.h).
for t in capi_test capi_region_test; do
    "$cc" -std=c99 -O1 "${warn[@]}" -I "$root/include" "$here/$t.c" \
        -L "$libdir" -lckptfs -o "$out/$t"
    "$cc" -std=c99 -O1 "${warn[@]}" -I "$root/include" "$here/$t.c" \
        "$libdir/libckptfs.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -o "$out/${t}_static"
done
"$cxx" -std=c++11 -O1 "${warn[@]}" -pthread -I "$root/include" "$here/capi_test.cpp" \
    -L "$libdir" -lckptfs -o "$out/capi_test_cpp"

export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ "${1:-}" == bench ]]; then
    "$cc" -std=c99 -O2 "${warn[@]}" -I "$root/include" "$here/capi_bench.c" -L "$libdir" -lckptfs \
        -o "$out/capi_bench"
    "$out/capi_bench" "${@:2}"
    exit
fi

status=0
for prog in capi_test capi_test_static capi_region_test capi_region_test_static capi_test_cpp; do
    echo "== $prog"
    "$out/$prog" &
    pid=$!
    wait "$pid" || { echo "run.sh: $prog FAILED" >&2; status=1; }
    # A program that crashed leaves its stores (named capi-*-PID) and temp dir behind.
    rm -rf /dev/shm/ckptfs.capi-*-"$pid" "/tmp/capi-test-$pid"
done
echo "== capi_smoke.py"
python3 "$here/capi_smoke.py" "$libdir/libckptfs.so" || { echo "run.sh: capi_smoke.py FAILED" >&2; status=1; }
[[ $status == 0 ]] && echo "run.sh: all C/C++/Python tests passed"
exit $status
