#!/usr/bin/env bash
# A real S3 server for the object level's tests, benchmark and the README example
# (docs/object.md): versitygw (built by scripts/setup-s3.sh) serving a directory.
#
#   eval "$(scripts/s3-local.sh start DIR)"   # start (or find running) the server of DIR;
#                                             # prints export lines for AWS_ENDPOINT_URL,
#                                             # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#                                             # AWS_REGION (ckptfs, awscli and SDKs read them)
#   scripts/s3-local.sh stop DIR              # stop it (the data stays in DIR)
#   scripts/s3-local.sh env DIR               # print the export lines again
#
# DIR holds the objects (DIR/data/<bucket>/<key>, plain files), the server's metadata
# (DIR/meta), its log, pid and credentials (DIR/credentials, mode 0600, generated at the
# first start and kept, so a restarted server takes the same keys and port). The server
# listens on 127.0.0.1 only, on a free port of S3_LOCAL_PORTS (default 44000-44999). The
# bucket `ckptfs` (S3_LOCAL_BUCKET) is created at the first start.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|env DIR" >&2; exit 2; }
bin=${VERSITYGW:-$root/.tools/s3/bin/versitygw}
bucket=${S3_LOCAL_BUCKET:-ckptfs}
range=${S3_LOCAL_PORTS:-44000-44999}

# Running (a killed server whose parent is gone can linger as a zombie: not alive).
alive() {
    local pid state
    [ -f "$dir/server.pid" ] || return 1
    pid=$(cat "$dir/server.pid")
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

print_env() {
    # shellcheck disable=SC1091
    . "$dir/credentials"
    printf 'export AWS_ENDPOINT_URL=http://127.0.0.1:%s\n' "$S3_PORT"
    printf 'export AWS_ACCESS_KEY_ID=%s\n' "$S3_ACCESS"
    printf 'export AWS_SECRET_ACCESS_KEY=%s\n' "$S3_SECRET"
    printf 'export AWS_REGION=us-east-1\n'
}

# Wait until the server answers HTTP on its port (any status).
wait_up() {
    local i
    for i in $(seq 1 100); do
        if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$1/"; then return 0; fi
        alive || return 1
        sleep 0.1
    done
    return 1
}

# A signed request with the generated credentials (kept off the command line).
s3_curl() {
    # shellcheck disable=SC1091
    . "$dir/credentials"
    curl -s -o /dev/null -w '%{http_code}' --max-time 10 \
        -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
        --aws-sigv4 "aws:amz:us-east-1:s3" -K <(printf 'user = "%s:%s"\n' "$S3_ACCESS" "$S3_SECRET") "$@"
}

case "$cmd" in
start)
    [ -x "$bin" ] || { echo "s3-local: $bin missing: run scripts/setup-s3.sh" >&2; exit 1; }
    mkdir -p "$dir/data" "$dir/meta"
    dir=$(cd "$dir" && pwd)
    if alive; then print_env; exit 0; fi
    fresh=0
    if [ ! -f "$dir/credentials" ]; then
        access=$(head -c 4096 /dev/urandom | LC_ALL=C tr -dc 'A-Z0-9')
        secret=$(head -c 4096 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z0-9')
        S3_ACCESS=${access:0:20}
        S3_SECRET=${secret:0:40}
        S3_PORT=
        fresh=1
    else
        # shellcheck disable=SC1091
        . "$dir/credentials"
    fi
    lo=${range%-*}; hi=${range#*-}
    started=0
    for _ in 1 2 3 4 5; do
        if [ $fresh = 1 ]; then
            # A new server: a free port (another start may take it first: then another).
            S3_PORT=
            for _ in $(seq 1 200); do
                p=$(( lo + RANDOM % (hi - lo + 1) ))
                if ! port_busy "$p"; then S3_PORT=$p; break; fi
            done
            [ -n "$S3_PORT" ] || { echo "s3-local: no free port in $range" >&2; exit 1; }
            (umask 077; printf 'S3_PORT=%s\nS3_ACCESS=%s\nS3_SECRET=%s\n' "$S3_PORT" "$S3_ACCESS" "$S3_SECRET" >"$dir/credentials")
        elif port_busy "$S3_PORT"; then
            echo "s3-local: port $S3_PORT (kept in $dir/credentials) is taken by another process" >&2
            exit 1
        fi
        # The keys go through the environment, not argv (ps shows argv to every user).
        ROOT_ACCESS_KEY_ID=$S3_ACCESS ROOT_SECRET_ACCESS_KEY=$S3_SECRET \
            setsid "$bin" --port "127.0.0.1:$S3_PORT" --region us-east-1 \
            posix --sidecar "$dir/meta" "$dir/data" >>"$dir/server.log" 2>&1 </dev/null &
        echo $! >"$dir/server.pid"
        # Up, and still ours (not another server that won the port while ours exited).
        if wait_up "$S3_PORT" && sleep 0.3 && alive; then started=1; break; fi
        [ $fresh = 1 ] || break
    done
    if [ $started = 0 ]; then
        echo "s3-local: versitygw did not start (log: $dir/server.log):" >&2
        tail -5 "$dir/server.log" >&2 || true
        exit 1
    fi
    code=$(s3_curl -I "http://127.0.0.1:$S3_PORT/$bucket")
    if [ "$code" != 200 ]; then
        code=$(s3_curl -X PUT "http://127.0.0.1:$S3_PORT/$bucket")
        [ "$code" = 200 ] || { echo "s3-local: creating bucket $bucket: HTTP $code" >&2; exit 1; }
    fi
    print_env
    ;;
stop)
    if alive; then
        pid=$(cat "$dir/server.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do alive || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/server.pid"
    ;;
env)
    [ -f "$dir/credentials" ] || { echo "s3-local: no server in $dir" >&2; exit 1; }
    print_env
    ;;
*)
    echo "usage: $0 start|stop|env DIR" >&2
    exit 2
    ;;
esac
