#!/usr/bin/env bash
# Ack-path benchmark: ack latency at fixed open-loop rates, the accepted-events/s ceiling, and
# two baselines measured in the same run — nginx `return 200` (the cost of HTTP alone) and
# redis-benchmark running the same record script (the store's ceiling). Loopback only; every
# phase is bounded in time. Prints one line per phase and a summary with ratios.
#
#   bench/run.sh [SECONDS_PER_PHASE]      (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
scripts/deps
command -v nginx >/dev/null || { apt-get install -y -qq nginx >/dev/null; }
cargo build --release --locked --bin slackgate --example loadgen 2>&1 | tail -1
LOADGEN=target/release/examples/loadgen
GW=target/release/slackgate
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(port); NGINX_PORT=$(port); GW_PORT=$(port); ADMIN_PORT=$(port)
SECRET=bench-secret

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" --daemonize no >"$WORK/redis.log" 2>&1 &
cat >"$WORK/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK;
  server { listen 127.0.0.1:$NGINX_PORT; keepalive_requests 1000000; location / { return 200; } }
}
NGINX
nginx -c "$WORK/nginx.conf" &
cat >"$WORK/gateway.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
[redis]
url = "redis://127.0.0.1:$REDIS_PORT/"
key_prefix = "bench"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:$NGINX_PORT"
delivery = { max_in_flight = 64 }
TOML
BENCH_SECRET=$SECRET RUST_LOG=warn $GW run --config "$WORK/gateway.toml" >"$WORK/gateway.log" 2>&1 &
GW_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$ADMIN_PORT/readyz" && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || { cat "$WORK/gateway.log"; exit 1; }

echo "== $(date -u +%FT%TZ) $(nproc) cores; ${SECS}s per phase; gateway, redis, nginx and the load generator share the box"
load() { $LOADGEN --secret "$SECRET" --seconds "$SECS" "$@"; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

NGINX_5K=$(load --label nginx_return_200 --url "http://127.0.0.1:$NGINX_PORT/slack/events" --rate 5000); echo "$NGINX_5K"
GW_1K=$(load --label gateway --url "http://127.0.0.1:$GW_PORT/slack/events" --rate 1000); echo "$GW_1K"
RSS_FILE=$WORK/rss
( while kill -0 $GW_PID 2>/dev/null; do awk '/VmRSS/{print $2}' /proc/$GW_PID/status; sleep 0.5; done >"$RSS_FILE" ) &
GW_5K=$(load --label gateway --url "http://127.0.0.1:$GW_PORT/slack/events" --rate 5000); echo "$GW_5K"
RSS_MAX=$(sort -n "$RSS_FILE" | tail -1)
GW_10K=$(load --label gateway --url "http://127.0.0.1:$GW_PORT/slack/events" --rate 10000); echo "$GW_10K"
GW_MAX=$(load --label gateway_ceiling --url "http://127.0.0.1:$GW_PORT/slack/events" --rate 0 --connections 64); echo "$GW_MAX"
NGINX_MAX=$(load --label nginx_ceiling --url "http://127.0.0.1:$NGINX_PORT/slack/events" --rate 0 --connections 64); echo "$NGINX_MAX"

# The store's ceiling: the same record script, same key shapes and a body of the same size.
RECORD=$(python3 - <<'PY'
import re
s = open("src/outbox/scripts.rs").read()
print(re.search(r'pub const RECORD: &str = r#"(.*?)"#;', s, re.S).group(1))
PY
)
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$RECORD")
BODY=$(printf '{"token":"x","team_id":"T0BENCH","api_app_id":"A0BENCH","type":"event_callback","event_id":"Ev0000000001","event_time":1700000000,"event":{"type":"app_mention","user":"U0BENCH","text":"<@B0BENCH> benchmark message number 1","channel":"C0BENCH","ts":"1700000000.000001","event_ts":"1700000000.000001"}}')
REDIS_OPS=$(redis-benchmark -p "$REDIS_PORT" -c 64 -n $((SECS * 20000)) -r 1000000000 -q \
  EVALSHA "$SHA" 3 "{rb:bench:0}:r:__rand_int__" "{rb:bench:0}:outbox" "{rb:bench:0}:d:__rand_int__" \
  90000000 "0-__rand_int__" "$BODY" application/json /slack/events event 1700000000000 2>/dev/null | tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
echo "redis_benchmark_record_script: ops_per_s=$REDIS_OPS"

BYTES=$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "{rb:bench:0}:outbox" SAMPLES 0)
N=$(redis-cli -p "$REDIS_PORT" XLEN "{rb:bench:0}:outbox")
KEY=$(redis-cli -p "$REDIS_PORT" --scan --pattern '{rb:bench:0}:d:*' | head -1 || true)
HASH=$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$KEY")
RKEY=$(redis-cli -p "$REDIS_PORT" --scan --pattern '{rb:bench:0}:r:*' | head -1 || true)
RCPT=$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$RKEY")

echo
echo "== summary"
printf 'ack p50/p99 at 1000/s:  %s / %s ms\n' "$(echo "$GW_1K" | field p50_ms)" "$(echo "$GW_1K" | field p99_ms)"
printf 'ack p50/p99 at 5000/s:  %s / %s ms   (nginx return 200 at 5000/s: %s / %s ms)\n' \
  "$(echo "$GW_5K" | field p50_ms)" "$(echo "$GW_5K" | field p99_ms)" "$(echo "$NGINX_5K" | field p50_ms)" "$(echo "$NGINX_5K" | field p99_ms)"
printf 'ack p50/p99 at 10000/s: %s / %s ms   (ok/s %s)\n' "$(echo "$GW_10K" | field p50_ms)" "$(echo "$GW_10K" | field p99_ms)" "$(echo "$GW_10K" | field ok_per_s)"
G=$(echo "$GW_MAX" | field ok_per_s); NG=$(echo "$NGINX_MAX" | field ok_per_s)
printf 'accepted events/s (closed loop, 64 conns): %s; nginx: %s (ratio %.2f); redis record script: %s (ratio %.2f)\n' \
  "$G" "$NG" "$(awk "BEGIN{print $G/$NG}")" "$REDIS_OPS" "$(awk "BEGIN{print $G/$REDIS_OPS}")"
printf 'gateway RSS max during 5000/s: %s KiB\n' "$RSS_MAX"
printf 'redis bytes per waiting delivery beyond the body: stream %s/entry, delivery hash %s (body %s), receipt %s\n' \
  "$(( BYTES / (N > 0 ? N : 1) ))" "$HASH" "${#BODY}" "$RCPT"
