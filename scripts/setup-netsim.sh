#!/bin/sh
# Tools the simulated-node tests and `ckptfs bench partner` use (crates/ckptfs-netsim):
# iproute2 (ip, tc) and util-linux (unshare, nsenter, mount). Run as root; the tests
# themselves also need root and print SKIPPED without it.
set -e
if command -v ip >/dev/null && command -v tc >/dev/null && command -v nsenter >/dev/null \
    && command -v unshare >/dev/null; then
    exit 0
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2 util-linux mount
