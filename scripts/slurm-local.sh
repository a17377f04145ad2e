#!/usr/bin/env bash
# A real Slurm cluster on this machine, for the examples and tests/slurm (docs/slurm.md):
# munged, slurmctld and N slurmd daemons (`slurmd -N cI`, each NodeName with its own
# port, all on 127.0.0.1) in partition `ckptfs`, with the ckptfs node prolog
# (examples/slurm/prolog.sh: huge-page tmpfs for the stores, FUSE over io_uring).
#
#   scripts/slurm-local.sh start [N]   # N >= 4 nodes (default 4); idempotent
#   scripts/slurm-local.sh stop        # stops what start started (by pid files)
#   scripts/slurm-local.sh status
#
# As root (Slurm's daemons and munge need it). Writes /etc/slurm/slurm.conf (refused if
# one exists that this script did not write) and keeps its state, logs and pid files
# under /var/lib/ckptfs-slurm. Packages: scripts/setup-slurm.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=/var/lib/ckptfs-slurm
CONF=/etc/slurm/slurm.conf
MARK="# written by ckptfs scripts/slurm-local.sh"
PORT0=${SLURM_LOCAL_PORT:-17810}   # slurmctld; the slurmds use PORT0+1..
cmd=${1:-}
N=${2:-4}

die() { echo "slurm-local.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root"
for t in munged slurmctld slurmd sinfo scontrol; do
    command -v "$t" >/dev/null || die "$t missing (bash scripts/setup-slurm.sh)"
done

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
nodes() { ls "$STATE"/nodes 2>/dev/null || true; }

write_conf() {
    local host
    host=$(hostname -s)
    if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; not overwritten"
    fi
    if [ -f /etc/slurm/topology.conf ] && ! grep -qF "$MARK" /etc/slurm/topology.conf; then
        die "/etc/slurm/topology.conf exists and was not written by this script; not overwritten"
    fi
    mkdir -p /etc/slurm "$STATE/ctld" "$STATE/log" "$STATE/run" "$STATE/nodes"
    rm -f "$STATE"/nodes/*
    for i in $(seq 1 "$N"); do : >"$STATE/nodes/c$i"; done
    {
        echo "$MARK"
        echo "ClusterName=ckptfs"
        echo "SlurmctldHost=$host(127.0.0.1)"
        echo "SlurmctldPort=$PORT0"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "StateSaveLocation=$STATE/ctld"
        echo "SlurmdSpoolDir=$STATE/spool-%n"
        echo "SlurmctldPidFile=$STATE/run/slurmctld.pid"
        echo "SlurmdPidFile=$STATE/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$STATE/log/slurmctld.log"
        echo "SlurmdLogFile=$STATE/log/slurmd-%n.log"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "SwitchType=switch/none"
        echo "MpiDefault=none"
        echo "SchedulerType=sched/backfill"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "SlurmdParameters=config_overrides"
        echo "ReturnToService=2"
        echo "JobRequeue=1"
        echo "KillWait=10"
        echo "MinJobAge=300"
        echo "SlurmctldTimeout=30"
        echo "SlurmdTimeout=30"
        echo "InactiveLimit=0"
        echo "Prolog=$ROOT/examples/slurm/prolog.sh"
        for i in $(seq 1 "$N"); do
            echo "NodeName=c$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT0 + i)) CPUs=2 RealMemory=2000 State=UNKNOWN"
        done
        echo "PartitionName=ckptfs Nodes=c[1-$N] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
        echo "TopologyPlugin=topology/tree"
    } >"$CONF.tmp"
    # Two nodes per leaf switch (the failure domains `ckptfs cluster init` takes).
    {
        echo "$MARK"
        for i in $(seq 1 2 "$N"); do
            j=$((i + 1 <= N ? i + 1 : i))
            echo "SwitchName=s$(((i + 1) / 2)) Nodes=c$i$([ "$j" != "$i" ] && echo ",c$j")"
        done
        echo "SwitchName=top Switches=s[1-$(((N + 1) / 2))]"
    } >/etc/slurm/topology.conf
    mv "$CONF.tmp" "$CONF"
}

start_munge() {
    if alive "$STATE/run/munged.pid"; then return; fi
    [ -f /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    runuser -u munge -- munged --pid-file=/run/munge/munged.pid
    for _ in $(seq 1 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$STATE/run/munged.pid"
    munge -n | unmunge >/dev/null || die "munge does not work"
}

case "$cmd" in
start)
    [ "$N" -ge 4 ] 2>/dev/null || die "want at least 4 nodes"
    if alive "$STATE/run/slurmctld.pid" && [ "$(nodes | wc -l)" -eq "$N" ]; then
        echo "slurm-local: already running ($(nodes | wc -l) nodes)"
    else
        write_conf
        start_munge
        alive "$STATE/run/slurmctld.pid" || slurmctld
        for _ in $(seq 1 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.2; done
        scontrol ping >/dev/null 2>&1 || die "slurmctld does not answer ($STATE/log/slurmctld.log)"
        scontrol reconfigure >/dev/null 2>&1 || true
    fi
    for n in $(nodes); do
        alive "$STATE/run/slurmd-$n.pid" || slurmd -N "$n"
    done
    # Nodes come up idle; one left down by an earlier run is resumed.
    for _ in $(seq 1 150); do
        bad=$(sinfo -h -N -p ckptfs -o '%N %t' | awk '$2 !~ /^(idle|alloc|mix|comp)/ {print $1}')
        [ -z "$bad" ] && break
        for b in $bad; do
            case "$(sinfo -h -n "$b" -o %t)" in down*|drain*|fail*) scontrol update nodename="$b" state=resume 2>/dev/null || true ;; esac
        done
        sleep 0.2
    done
    [ -z "$bad" ] || die "nodes not up: $bad ($STATE/log)"
    echo "slurm-local: partition ckptfs up: $(sinfo -h -p ckptfs -o '%D nodes %N %t')"
    ;;
stop)
    for n in $(nodes); do
        f=$STATE/run/slurmd-$n.pid
        alive "$f" && kill "$(cat "$f")"
    done
    f=$STATE/run/slurmctld.pid
    alive "$f" && kill "$(cat "$f")"
    for _ in $(seq 1 100); do
        running=0
        for f in "$STATE"/run/slurm*.pid; do alive "$f" && running=1; done
        [ "$running" = 0 ] && break
        sleep 0.1
    done
    f=$STATE/run/munged.pid
    alive "$f" && kill "$(cat "$f")"
    rm -f "$STATE"/run/*.pid
    echo "slurm-local: stopped"
    ;;
status)
    for f in "$STATE"/run/*.pid; do
        [ -e "$f" ] || continue
        alive "$f" && echo "$(basename "$f" .pid): running (pid $(cat "$f"))" || echo "$(basename "$f" .pid): not running"
    done
    sinfo -p ckptfs 2>/dev/null || true
    ;;
*)
    die "usage: slurm-local.sh start [N] | stop | status"
    ;;
esac
