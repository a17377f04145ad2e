#!/usr/bin/env bash
# Packages the preload tests and the demo need: C and C++ compilers (test programs,
# examples/heat, the bench worker), gfortran (Fortran test programs), tar, gzip,
# coreutils, bash, Debian's python3, rsync, make, mpirun (openmpi-bin), sqlite3, h5py and
# h5dump (HDF5 with its default file locking), fio.
set -euo pipefail
need=()
for p in gcc:gcc g++:g++ gfortran:gfortran tar:tar gzip:gzip bash:bash /usr/bin/python3:python3 \
    rsync:rsync make:make mpirun:openmpi-bin sqlite3:sqlite3 h5dump:hdf5-tools fio:fio; do
    cmd=${p%%:*} pkg=${p##*:}
    command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1 || need+=(python3-h5py python3-numpy)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
