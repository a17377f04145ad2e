#!/usr/bin/env bash
# Install what the Slurm and metrics suites need (tests/slurm, tests/metrics): Slurm 22.05
# from Debian (slurmctld, slurmd, the client commands), munge (Slurm's authentication),
# Prometheus (its server and promtool). Idempotent and quiet; needs root to install.
# The services are not started here: scripts/slurm-local.sh starts a local cluster, the
# metrics suite starts its own Prometheus.
set -euo pipefail

need=()
command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need+=(slurmd)
command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v curl >/dev/null 2>&1 || need+=(curl)

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-slurm.sh: missing Debian packages: ${need[*]} (run as root or install them)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    # Installing must not start the packages' own services (no init system in CI
    # containers; and the suites start their own instances): a policy-rc.d refusal
    # for the duration of the install.
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        own_policy=1
    fi
    ok=1
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$log" 2>&1 || ok=0
    [ "$own_policy" = 1 ] && rm -f "$policy"
    if [ "$ok" = 0 ]; then
        cat "$log" >&2
        rm -f "$log"
        echo "setup-slurm.sh: installing ${need[*]} failed" >&2
        exit 1
    fi
    rm -f "$log"
fi
