#!/bin/sh
# Tools of the simulated-node tests and `ckptfs bench partner` (crates/ckptfs-netsim):
# iproute2 (ip, tc) and util-linux (unshare, nsenter, taskset, mount). Needs root to install;
# the tests themselves also need root and print SKIPPED without it.
set -e
if command -v ip >/dev/null && command -v tc >/dev/null && command -v nsenter >/dev/null \
    && command -v unshare >/dev/null && command -v taskset >/dev/null; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-netsim: iproute2/util-linux missing and not root: the simulated-node tests will be SKIPPED" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends iproute2 util-linux mount >/dev/null
