#!/usr/bin/env bash
# Benchmarks of the ack path and of delivery, with baselines measured in the same run (these
# machines are shared and noisy: compare ratios, not absolute numbers). Loopback only; every
# phase is bounded in time. Uses `slackgate sim` as Slack (open loop, latency from each
# request's scheduled time) and as the bot.
#
# Ends with the flood (bench/overload.sh: the gateway's ceiling, then 0.5x to 3x of it).
#
#   bench/run.sh [SECONDS_PER_PHASE] [DRAIN_EVENTS]      defaults 10 and 100000
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
DRAIN_N=${2:-100000}
scripts/deps
command -v nginx >/dev/null || { apt-get install -y -qq nginx >/dev/null; }
cargo build --release --locked --bin slackgate --example pingora_ok 2>&1 | tail -1
GW=target/release/slackgate
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT
. bench/lib.sh
REDIS_PORT=$(port); NGINX_PORT=$(port); GW_PORT=$(port); ADMIN_PORT=$(port); PINGORA_PORT=$(port)
export SLACK_SIGNING_SECRET=bench-secret BENCH_SECRET=bench-secret

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
cat >"$WORK/nginx.conf" <<NGINX
worker_processes 1;
master_process off;
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
NGINX_PID=$!
# Bare Pingora: the same framework, service, threads and allocator, answering 200 itself.
target/release/examples/pingora_ok "127.0.0.1:$PINGORA_PORT" 2>"$WORK/pingora.log" &
PINGORA_PID=$!
# CPU ticks (user + system, every thread) of a process.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
gateway_config() { # name listen admin upstream-port retry_max
  cat >"$WORK/$1.toml" <<TOML
[server]
listen = "127.0.0.1:$2"
admin_listen = "127.0.0.1:$3"
[redis]
url = "redis://127.0.0.1:$REDIS_PORT/"
key_prefix = "$1"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:$4"
delivery = { max_in_flight = 64, retry_initial = "100ms", retry_max = "$5" }
TOML
}
wait_ready() { for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/readyz" && return; sleep 0.1; done; echo "gateway not ready"; exit 1; }
gateway_config bench "$GW_PORT" "$ADMIN_PORT" "$NGINX_PORT" 5m
RUST_LOG=warn $GW run --config "$WORK/bench.toml" --data-dir "$WORK/d1" >"$WORK/gateway.log" 2>&1 &
GW_PID=$!
wait_ready "$ADMIN_PORT"

# Slack's retry delays (1 min, 5 min) compressed 60x, so an overloaded phase still ends soon.
send() { $GW sim send --json --time-scale 60 --duration "$SECS" "$@" 2>/dev/null; }
echo "== $(date -u +%FT%TZ) $(nproc) cores; ${SECS}s per phase; gateway, Redis, nginx and the load generator share the box"
# ok/s: events answered 200 at their first attempt, per second of the send (a 503'd event is
# retried like Slack retries it, later, and counts as non-2xx here).
row() { # label json
  echo "$2" | json "'%-34s ok/s %7.0f  p50 %7.3f  p99 %7.3f  p99.9 %7.3f  max %8.3f ms  non-2xx %d' % ('$1', d['ok_first_attempts'] / $SECS if d['mode'].startswith('open') else d['acked_per_s'], d['ack_latency']['p50_ms'], d['ack_latency']['p99_ms'], d['ack_latency']['p999_ms'], d['ack_latency']['max_ms'], d['requests'] - d['statuses'].get('200', 0))"
}
NGINX_5K=$(send --url "http://127.0.0.1:$NGINX_PORT/slack/events" --rate 5000); row "nginx return 200, open 5000/s" "$NGINX_5K"
GW_1K=$(send --url "http://127.0.0.1:$GW_PORT/slack/events" --rate 1000); row "gateway, open 1000/s" "$GW_1K"
( while kill -0 $GW_PID 2>/dev/null; do awk '/VmRSS/{print $2}' /proc/$GW_PID/status; sleep 0.5; done >"$WORK/rss" ) &
GW_5K=$(send --url "http://127.0.0.1:$GW_PORT/slack/events" --rate 5000); row "gateway, open 5000/s" "$GW_5K"
RSS_MAX=$(sort -n "$WORK/rss" | tail -1)
GW_10K=$(send --url "http://127.0.0.1:$GW_PORT/slack/events" --rate 10000); row "gateway, open 10000/s" "$GW_10K"
PINGORA_5K=$(send --url "http://127.0.0.1:$PINGORA_PORT/slack/events" --rate 5000); row "bare Pingora, open 5000/s" "$PINGORA_5K"
# Closed loop, with the CPU each server (and, for the gateway, Redis) spent over the phase.
closed() { # name url pids...
  local name=$1 url=$2 out; shift 2
  local before=() p
  for p in "$@"; do before+=("$(cpu "$p")"); done
  out=$(send --url "$url" --concurrency 64)
  local i=0 ticks=()
  for p in "$@"; do ticks+=("$(( $(cpu "$p") - before[i] ))"); i=$((i + 1)); done
  echo "$out" >"$WORK/$name.json"
  echo "${ticks[*]}" >"$WORK/$name.ticks"
}
closed gw_max "http://127.0.0.1:$GW_PORT/slack/events" "$GW_PID" "$REDIS_PID"; GW_MAX=$(cat "$WORK/gw_max.json")
row "gateway, closed 64 in flight" "$GW_MAX"
closed nginx_max "http://127.0.0.1:$NGINX_PORT/slack/events" "$NGINX_PID"; NGINX_MAX=$(cat "$WORK/nginx_max.json")
row "nginx, closed 64 in flight" "$NGINX_MAX"
closed pingora_max "http://127.0.0.1:$PINGORA_PORT/slack/events" "$PINGORA_PID"; PINGORA_MAX=$(cat "$WORK/pingora_max.json")
row "bare Pingora, closed 64 in flight" "$PINGORA_MAX"

# The store's ceiling: the script the gateway records these events with (an app without turns,
# an event that claims no message: RECORD_CARRIED, the delivery packed into its stream entry as
# `outbox::carried::pack` packs it), the same key shapes and body, from redis-benchmark.
RECORD=$(python3 - <<'PY'
import re
s = open("src/outbox/scripts/mod.rs").read()
print(re.search(r'pub const RECORD_CARRIED: &str = r#"(.*?)"#', s, re.S).group(1))
PY
)
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$RECORD")
BODY='{"token":"sim","team_id":"T0SIM","api_app_id":"A0SIM","type":"event_callback","event_id":"Ev0000000001","event_time":1700000000,"authorizations":[{"team_id":"T0SIM","user_id":"U0SIMBOT","is_bot":true}],"event":{"type":"app_mention","user":"U0HUMAN","channel":"C0SIM","text":"<@U0SIMBOT> hello from sim","ts":"1700000000.000001","event_ts":"1700000000.000001","sim_sent_ms":1700000000000}}'
# Its fields as carried: content type, path, kind, received ms, conversation, detail, response
# url, body; each as its length, a colon and its bytes.
PACKED=$(BODY="$BODY" python3 -c '
import os
f = ["application/json", "/slack/events", "event", "1700000000000",
     "T0SIM\tC0SIM\t1700000000.000001\t1700000000.000001", "app_mention", "", os.environ["BODY"]]
print("".join("%d:%s" % (len(x.encode()), x) for x in f), end="")')
# KEYS: receipt, stream; ARGV: receipt ttl ms, replicated, delivery id, the packed fields.
REDIS_OPS=$(redis-benchmark -p "$REDIS_PORT" -c 64 -n $((SECS * 20000)) -r 1000000000 -q \
  EVALSHA "$SHA" 2 "{rb:bench:0}:r:e:__rand_int__" "{rb:bench:0}:stream" 90000000 0 "0-__rand_int__" "$PACKED" \
  2>/dev/null | tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
printf '%-34s ok/s %7.0f\n' "redis-benchmark, RECORD_CARRIED, 64 clients" "$REDIS_OPS"
STREAM_BYTES=$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "{rb:bench:0}:stream" SAMPLES 0)
STREAM_N=$(redis-cli -p "$REDIS_PORT" XLEN "{rb:bench:0}:stream")
RCPT_KEY=$(redis-cli -p "$REDIS_PORT" --scan --pattern '{rb:bench:0}:r:*' | head -1 || true)
RCPT_BYTES=$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$RCPT_KEY")

# End to end: the gateway in front of `sim receive`, 1000 events/s: send → bot latency.
# The receiver binds a free port itself and says which: a port picked long before could be taken
# by now by one of the load generator's many outgoing connections.
$GW sim receive --listen "127.0.0.1:0" --idle 3 --json >"$WORK/e2e.json" 2>"$WORK/e2e.err" &
RECV=$!
for _ in $(seq 100); do grep -q "listening on" "$WORK/e2e.err" 2>/dev/null && break; sleep 0.05; done
E2E_BOT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/e2e.err" | head -1)
E2E_GW=$(port); E2E_ADMIN=$(port)
gateway_config e2e "$E2E_GW" "$E2E_ADMIN" "$E2E_BOT" 5m
RUST_LOG=warn $GW run --config "$WORK/e2e.toml" --data-dir "$WORK/d2" >"$WORK/e2e.log" 2>&1 &
wait_ready "$E2E_ADMIN"
E2E_SEND=$(send --url "http://127.0.0.1:$E2E_GW/slack/events" --rate 1000); row "gateway → sim receive, 1000/s" "$E2E_SEND"
wait $RECV || true
E2E=$(cat "$WORK/e2e.json")
[ -n "$E2E" ] || { echo "sim receive reported nothing:"; cat "$WORK/e2e.err"; exit 1; }
echo "$E2E" | json "'%-34s p50 %7.3f  p99 %7.3f  max %8.3f ms (ms resolution), %d delivered, %d duplicated' % ('send → bot receipt, 1000/s', d['send_to_delivery']['p50_ms'], d['send_to_delivery']['p99_ms'], d['send_to_delivery']['max_ms'], d['received'], d['duplicated'])"

# Backlog drain: DRAIN_N deliveries accepted while the bot is down, then the bot comes up.
D_GW=$(port); D_ADMIN=$(port); D_BOT=$(low_port)
gateway_config drain "$D_GW" "$D_ADMIN" "$D_BOT" 1s
RUST_LOG=warn $GW run --config "$WORK/drain.toml" --data-dir "$WORK/d3" >"$WORK/drain.log" 2>&1 &
wait_ready "$D_ADMIN"
$GW sim send --json --time-scale 60 --url "http://127.0.0.1:$D_GW/slack/events" --rate 5000 --events "$DRAIN_N" \
  --duration $(( DRAIN_N / 5000 + 1 )) >/dev/null 2>&1
waiting() { $GW stats --json --config "$WORK/drain.toml" 2>/dev/null | json "d[0]['ready'] + d[0]['in_flight'] + d[0]['scheduled']"; }
BACKLOG=$(waiting)
# Timed by the bot, from its start to its last delivery: nothing polls the outbox meanwhile.
$GW sim receive --listen "127.0.0.1:$D_BOT" --idle 2 --duration 600 --json >"$WORK/drain.json" 2>/dev/null || true
DRAIN_S=$(json "d['last_delivery_s'] or 1e-9" <"$WORK/drain.json")
echo "backlog drain: $BACKLOG waiting when the bot came up; all at the bot after ${DRAIN_S}s: $(awk "BEGIN{printf \"%.0f\", $BACKLOG / $DRAIN_S}") deliveries/s"

echo
echo "== summary"
p99() { echo "$1" | json "d['ack_latency']['p99_ms']"; }
ok() { echo "$1" | json "d['acked_per_s']"; }
ratio() { awk "BEGIN{printf \"%.2f\", $1 / $2}"; }
printf 'ack p99 at 5000/s: gateway %s ms; nginx %s ms; bare Pingora %s ms (gateway/Pingora %s)\n' \
  "$(p99 "$GW_5K")" "$(p99 "$NGINX_5K")" "$(p99 "$PINGORA_5K")" "$(ratio "$(p99 "$GW_5K")" "$(p99 "$PINGORA_5K")")"
printf 'accepted/s closed loop: gateway %.0f; store ceiling %.0f (ratio %s); bare Pingora %.0f (ratio %s); nginx %.0f (ratio %s)\n' \
  "$(ok "$GW_MAX")" "$REDIS_OPS" "$(ratio "$(ok "$GW_MAX")" "$REDIS_OPS")" "$(ok "$PINGORA_MAX")" \
  "$(ratio "$(ok "$GW_MAX")" "$(ok "$PINGORA_MAX")")" "$(ok "$NGINX_MAX")" "$(ratio "$(ok "$GW_MAX")" "$(ok "$NGINX_MAX")")"
# CPU seconds per 1000 answered requests over the closed-loop phases (for the gateway, the
# deliveries made during the phase are in its figure too).
per_k() { # name index
  local ticks n; ticks=$(cut -d' ' -f$(($2 + 1)) "$WORK/$1.ticks"); n=$(json "d['acked']" <"$WORK/$1.json")
  awk "BEGIN{printf \"%.3f\", $ticks / $(getconf CLK_TCK) * 1000 / $n}"
}
printf 'CPU s per 1000 acked, closed loop: gateway %s + its Redis %s; bare Pingora %s; nginx %s\n' \
  "$(per_k gw_max 0)" "$(per_k gw_max 1)" "$(per_k pingora_max 0)" "$(per_k nginx_max 0)"
printf 'gateway RSS max during 5000/s: %s KiB\n' "$RSS_MAX"
printf 'redis bytes per waiting delivery: stream %s/entry, carrying it all (body %s bytes; no hash), receipt %s\n' \
  "$(( STREAM_BYTES / (STREAM_N > 0 ? STREAM_N : 1) ))" "${#BODY}" "$RCPT_BYTES"

echo
GW_BUILT=1 bench/overload.sh "$SECS"
