#!/usr/bin/env bash
# The metrics suite (docs/metrics.md): a real Prometheus scrapes the node daemons of a
# local 4-node cluster (`ckptfs node --metrics`), and the series it stored are checked
# through its HTTP query API: present for every node, and moving as a checkpoint dataset
# is written, copied to the partners and drained. `promtool check metrics` passes on
# every daemon's output and on the drain agent's (`ckptfs agent --metrics`).
#
#   bash tests/metrics/run.sh
#
# PORT: first of 10 free TCP ports on 127.0.0.1 (default 27700: 27700-27709 are this
# suite's own, no other suite's, so that scripts/test.sh can run them side by side). Needs prometheus,
# promtool and curl (scripts/setup-slurm.sh installs them); fails when they are missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=${CKPTFS_BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/release}
CK=$BIN/ckptfs
PORT=${PORT:-27700}
PROM_PORT=$((PORT + 9))
passed=0 failed=0
t0=$(date +%s)
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }
for tool in prometheus promtool curl python3; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool missing (bash scripts/setup-slurm.sh)" >&2; echo "0 passed, 1 failed"; exit 1; }
done
[ -x "$CK" ] || { echo "FAIL: $CK missing (cargo build --release -p ckptfs-cli)" >&2; echo "0 passed, 1 failed"; exit 1; }

WORK=$(mktemp -d /tmp/ckptfs-metrics-test.XXXXXX)
JOB="hm-$$"
export CKPTFS_MEM_SIZE=64M CKPTFS_JOB=$JOB CKPTFS_NRANKS=4 CKPTFS_LOCAL_NRANKS=1 CKPTFS_DATASET_PARTNER_COPIES=all
unset CKPTFS_STORE CKPTFS_CLUSTER CKPTFS_NODE_ID CKPTFS_DEST CKPTFS_RESTART CKPTFS_METRICS
declare -A PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -f "$WORK/c.toml" ]; then
        for i in 1 2 3 4; do "$CK" --cluster "$WORK/c.toml" --node-id "node$i" destroy >/dev/null 2>&1 || true; done
    fi
    "$CK" --store "$JOB-agent" destroy >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

# query EXPR: the instant vector as "instance value" lines, sorted.
query() {
    curl -sf --max-time 5 "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
        python3 -c 'import json,sys
r=json.load(sys.stdin)
assert r["status"]=="success", r
for s in sorted(r["data"]["result"], key=lambda s: s["metric"].get("instance","")):
    print(s["metric"].get("instance","-"), s["value"][1])'
}
# until_q WHAT EXPR PY: poll (60 s) until the result lines satisfy the Python
# expression PY over `v` (list of floats) and `lines`.
until_q() {
    local what=$1 expr=$2 cond=$3 out=""
    for _ in $(seq 1 120); do
        out=$(query "$expr" 2>/dev/null) || out=""
        if printf '%s\n' "$out" | python3 -c 'import sys
lines=[l.split() for l in sys.stdin.read().split("\n") if l.strip()]
v=[float(l[1]) for l in lines]
sys.exit(0 if ('"$cond"') else 1)' 2>/dev/null; then
            ok "$what"
            return 0
        fi
        sleep 0.5
    done
    bad "$what: $expr gave: $(echo "$out" | tr '\n' ';')"
    return 1
}

echo "== 4 node daemons with --metrics (node1 also drains to a PFS directory)"
"$CK" cluster init --local 4 --out c.toml --port "$PORT" --job "$JOB" --heartbeat-ms 200 >/dev/null
mkdir -p pfs
for i in 1 2 3 4; do
    extra=()
    [ "$i" = 1 ] && extra=(--dest "$WORK/pfs")
    "$CK" node --cluster c.toml --node-id "node$i" --metrics "127.0.0.1:$((PORT + 4 + i))" "${extra[@]}" 2>"node$i.log" &
    PIDS[node$i]=$!
done
for i in 1 2 3 4; do
    up=0
    for _ in $(seq 1 200); do
        curl -sf --max-time 2 "http://127.0.0.1:$((PORT + 4 + i))/metrics" >"m$i.txt" 2>/dev/null && { up=1; break; }
        sleep 0.1
    done
    [ "$up" = 1 ] || { bad "node$i's /metrics did not answer"; cat "node$i.log" >&2; }
done

echo "== promtool check metrics on every daemon's output"
for i in 1 2 3 4; do
    if out=$(promtool check metrics <"m$i.txt" 2>&1); then ok "promtool check metrics: node$i"; else bad "promtool node$i: $out"; fi
done

echo "== Prometheus on 127.0.0.1:$PROM_PORT scraping the 4 daemons every second"
cat >prometheus.yml <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ckptfs
    static_configs:
      - targets: ['127.0.0.1:$((PORT + 5))', '127.0.0.1:$((PORT + 6))', '127.0.0.1:$((PORT + 7))', '127.0.0.1:$((PORT + 8))']
EOF
promtool check config prometheus.yml >/dev/null || bad "promtool check config"
prometheus --config.file=prometheus.yml --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn 2>prometheus.log &
PIDS[prometheus]=$!
until_q "Prometheus scraped all 4 daemons (up == 1)" 'up{job="ckptfs"}' 'len(v) == 4 and all(x == 1 for x in v)'
until_q "store capacity series for every node" 'ckptfs_store_capacity_bytes{tier="memory"}' 'len(v) == 4 and all(x == 64 * 2**20 for x in v)'
until_q "every node sees its 3 peers up" 'sum by (instance) (ckptfs_peer_up)' 'len(v) == 4 and all(x == 3 for x in v)'
until_q "no dataset yet" 'ckptfs_datasets{state="complete"}' 'len(v) == 4 and all(x == 0 for x in v)'
until_q "the drain runs on node1 only" 'ckptfs_drain_running' 'sorted(v) == [0, 0, 0, 1]'
until_q "nothing copied yet" 'sum(ckptfs_partner_copies_sent_total)' 'v == [0]'

echo "== a checkpoint dataset: 4 ranks (one per node) write 2 MB each"
for r in 0 1 2 3; do
    n=node$((r + 1))
    head -c 2000000 /dev/urandom >"r$r.dat"
    CKPTFS_RANK=$r "$CK" --cluster c.toml --node-id "$n" ckpt begin step1 >/dev/null || bad "rank $r ckpt begin"
    CKPTFS_RANK=$r "$CK" --cluster c.toml --node-id "$n" put -p "r$r.dat" "/ckpt/step1/r$r.dat" >/dev/null || bad "rank $r put"
done
for r in 0 1 2 3; do
    CKPTFS_RANK=$r "$CK" --cluster c.toml --node-id "node$((r + 1))" ckpt complete >/dev/null 2>&1 || bad "rank $r ckpt complete"
done
# A node's records learn the job-wide outcome when a rank on it runs a dataset command
# (the job script's `ckptfs ckpt list`); the metrics export each node's records.
for r in 0 1 2 3; do
    CKPTFS_RANK=$r "$CK" --cluster c.toml --node-id "node$((r + 1))" ckpt list >/dev/null 2>&1 || bad "rank $r ckpt list"
done
until_q "the dataset is complete in every node's records" 'ckptfs_datasets{state="complete"}' 'len(v) == 4 and all(x == 1 for x in v)'
until_q "every node's file reaches a partner (level_files partner)" 'ckptfs_level_files{level="partner"}' 'len(v) == 4 and all(x >= 1 for x in v)'
until_q "copies sent counted (4 files, >= 8 MB)" 'sum(ckptfs_partner_copies_sent_total) >= 4 and sum(ckptfs_partner_sent_bytes_total) >= 8e6' 'len(v) == 1'
until_q "rate() of the bytes sent moved" 'sum(increase(ckptfs_partner_sent_bytes_total[10m]))' 'len(v) == 1 and v[0] > 0'
until_q "each node holds one copy for another node" 'sum by (instance) (ckptfs_partner_held_files)' 'len(v) == 4 and all(x == 1 for x in v)'
until_q "no copy pending any more" 'ckptfs_partner_copies_pending' 'len(v) == 4 and all(x == 0 for x in v)'
until_q "node1 drained its file (level pfs, drained bytes)" 'ckptfs_level_files{level="pfs"} + on(instance) ckptfs_drained_bytes_total' 'len(v) == 1 and v[0] >= 2000001'
until_q "newest dataset protected: node1 on the PFS (3), the others in partner memory (2)" 'ckptfs_newest_dataset_protection_level' 'sorted(v) == [2, 2, 2, 3]'
until_q "memory in use grew on every node" 'ckptfs_store_used_bytes{tier="memory"}' 'len(v) == 4 and all(x >= 2e6 for x in v)'

echo "== the Grafana dashboard's queries (examples/grafana/ckptfs-dashboard.json)"
curl -sf --max-time 2 "http://127.0.0.1:$((PORT + 5))/metrics" >m1.txt
if out=$(python3 - "$ROOT/examples/grafana/ckptfs-dashboard.json" m1.txt "$PROM_PORT" <<'PY'
import json, re, sys, urllib.parse, urllib.request
dash = json.load(open(sys.argv[1]))
exposed = {l.split("{")[0].split(" ")[0] for l in open(sys.argv[2]) if l.startswith("ckptfs_")}
bad = []
n = 0
for p in dash["panels"]:
    for t in p["targets"]:
        n += 1
        expr = t["expr"].replace("$instance", ".*")
        for name in re.findall(r"ckptfs_[a-z_]+", expr):
            if name not in exposed:
                bad.append(f"{p['title']}: {name} is not exported")
        url = f"http://127.0.0.1:{sys.argv[3]}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        r = json.load(urllib.request.urlopen(url, timeout=5))
        if r["status"] != "success" or not r["data"]["result"]:
            bad.append(f"{p['title']}: {expr} gave no series")
print("\n".join(bad) if bad else f"{n} queries")
sys.exit(1 if bad else 0)
PY
); then ok "every dashboard query names exported series and gives series ($out)"; else bad "dashboard: $out"; fi

echo "== a node lost: its peers count missed heartbeats and see it down"
kill -9 "${PIDS[node4]}"; wait "${PIDS[node4]}" 2>/dev/null; unset 'PIDS[node4]'
until_q "node4 is down for its peers" 'ckptfs_peer_up{peer="node4"}' 'len(v) == 3 and all(x == 0 for x in v)'
until_q "heartbeats to node4 missed" 'ckptfs_heartbeats_missed_total{peer="node4"}' 'len(v) == 3 and all(x > 0 for x in v)'
until_q "Prometheus sees the lost node's target down" 'up{job="ckptfs"}' 'sorted(v) == [0, 1, 1, 1]'

echo "== the drain agent's metrics (ckptfs agent --metrics)"
head -c 300000 /dev/urandom >a.dat
export CKPTFS_MEM_SIZE=16M
"$CK" --store "$JOB-agent" init >/dev/null || bad "init the agent's store"
"$CK" --store "$JOB-agent" put -p a.dat /ckpt/a.dat >/dev/null || bad "put into the agent's store"
mkdir -p pfs2
"$CK" --store "$JOB-agent" agent --dest "$WORK/pfs2" --metrics "127.0.0.1:$((PORT + 4))" 2>agent.log &
PIDS[agent]=$!
got=0
for _ in $(seq 1 100); do
    if curl -sf --max-time 2 "http://127.0.0.1:$((PORT + 4))/metrics" >agent.txt 2>/dev/null &&
        grep -q '^ckptfs_drained_bytes_total 300000$' agent.txt; then
        got=1
        break
    fi
    sleep 0.1
done
[ "$got" = 1 ] && ok "the agent's metrics show its drained bytes" || { bad "agent metrics: $(cat agent.txt 2>/dev/null | grep drain)"; cat agent.log >&2; }
if [ "$got" = 1 ] && out=$(promtool check metrics <agent.txt 2>&1); then ok "promtool check metrics: agent"; else bad "promtool agent: ${out:-no output}"; fi

if [ "$failed" -gt 0 ]; then
    for i in 1 2 3 4; do echo "--- node$i log" >&2; tail -5 "node$i.log" >&2; done
    echo "--- prometheus log" >&2; tail -5 prometheus.log >&2
fi
echo "tests/metrics: $passed passed, $failed failed ($(($(date +%s) - t0)) s)"
[ "$failed" -eq 0 ]
