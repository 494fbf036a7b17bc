#!/usr/bin/env bash
# The flood, measured (issue 11). First the gateway's own closed-loop ceiling with a fast bot up
# (`sim receive`, so deliveries flow while it acks); then open loop at 0.5×, 0.8×, 1.5× and 3×
# that ceiling, each phase on a fresh gateway and bot. Each prints goodput (2xx answers/s),
# p50/p99 of first attempts answered 2xx, p99 of those answered 503, how many answers took
# longer than 2 s (the ack budget) and 3 s (Slack's deadline), and afterwards how long until
# every acked delivery reached the bot, with the bot's count of lost and duplicated ones.
# Slack's retries (1 min, 5 min) run 60× faster, so shed events come back within the phase.
# nginx `return 200` at 0.8× is the latency baseline. Last, the gateway CPU of a 503 against an
# accepted event's (from the ceiling phase), in a 3× flood with `max_pending = 1`, where nearly
# every answer is a 503. SERVER_LINES adds lines to each gateway's [server]. Loopback only,
# bounded in time.
#
#   bench/overload.sh [SECONDS_PER_PHASE]        default 10
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
scripts/deps
command -v nginx >/dev/null || { apt-get install -y -qq nginx >/dev/null; }
[ -n "${GW_BUILT:-}" ] || cargo build --release --locked --bin slackgate 2>&1 | tail -1
GW=target/release/slackgate
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
REDIS_PORT=$(port); NGINX_PORT=$(port)
export SLACK_SIGNING_SECRET=bench-secret BENCH_SECRET=bench-secret
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" >"$WORK/redis.log" 2>&1 &
cat >"$WORK/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $WORK;
  server { listen 127.0.0.1:$NGINX_PORT; keepalive_requests 1000000; location / { return 200; } }
}
NGINX
nginx -c "$WORK/nginx.conf" &
sleep 0.5

# A fresh bot and gateway for phase $1: sets GW_PID, GW_URL, BOT_PID, CONFIG.
start_phase() {
  local name=$1 listen admin bot
  $GW sim receive --listen "127.0.0.1:0" --idle 5 --manifest "$WORK/$name.manifest" --json \
    >"$WORK/$name.recv.json" 2>"$WORK/$name.recv.err" &
  BOT_PID=$!
  for _ in $(seq 100); do grep -q "listening on" "$WORK/$name.recv.err" 2>/dev/null && break; sleep 0.05; done
  bot=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/$name.recv.err" | head -1)
  listen=$(port); admin=$(port)
  CONFIG="$WORK/$name.toml"
  cat >"$CONFIG" <<TOML
[server]
listen = "127.0.0.1:$listen"
admin_listen = "127.0.0.1:$admin"
${SERVER_LINES:-}
[redis]
url = "redis://127.0.0.1:$REDIS_PORT/"
key_prefix = "$name"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:$bot"
delivery = { max_in_flight = 64, retry_initial = "100ms", retry_max = "2s" }
TOML
  RUST_LOG=warn $GW run --config "$CONFIG" --data-dir "$WORK/$name.d" >"$WORK/$name.log" 2>&1 &
  GW_PID=$!
  ( while kill -0 "$GW_PID" 2>/dev/null; do awk '/VmRSS/{print $2}' "/proc/$GW_PID/status" 2>/dev/null; sleep 0.25; done \
    >"$WORK/$name.rss" ) &
  GW_URL="http://127.0.0.1:$listen/slack/events"
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$admin/readyz" && { GW_CPU0=$(cpu "$GW_PID"); return; }; sleep 0.1; done
  echo "gateway not ready"; exit 1
}
# A process's CPU time so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
waiting() { $GW stats --json --config "$CONFIG" 2>/dev/null | json "d[0]['ready'] + d[0]['in_flight'] + d[0]['scheduled']"; }
# After the send: time until the outbox is empty, then the bot's account.
end_phase() {
  local name=$1 start end
  start=$(date +%s.%N)
  for _ in $(seq 1500); do [ "$(waiting)" = "0" ] && break; sleep 0.2; done
  end=$(date +%s.%N)
  DRAINED_S=$(awk "BEGIN{printf \"%.1f\", $end - $start}")
  # The gateway's CPU over the phase and its drain: the acks, the 503s and the deliveries.
  GW_CPU_US=$(( ($(cpu "$GW_PID") - GW_CPU0) * 1000000 / $(getconf CLK_TCK) ))
  wait "$BOT_PID" || true
  kill -INT "$GW_PID"; wait "$GW_PID" 2>/dev/null || true
  RECV=$(cat "$WORK/$name.recv.json")
}

echo "== $(date -u +%FT%TZ) $(nproc) cores; ${SECS}s per phase; gateway, Redis, the bot, nginx and the load generator share the box"
start_phase ceiling
CEIL_JSON=$($GW sim send --json --time-scale 60 --duration "$SECS" --url "$GW_URL" --concurrency 64 --manifest "$WORK/ceiling.manifest" 2>/dev/null)
end_phase ceiling
echo "$CEIL_JSON" >"$WORK/ceiling.send.json"
echo "$GW_CPU_US" >"$WORK/ceiling.cpu"
CEIL=$(echo "$CEIL_JSON" | json "round(d['acked_per_s'])")
printf 'ceiling, closed loop 64 in flight: %s acked/s (p99 %s ms); every delivery at the bot %ss later; lost %s, duplicated %s\n' \
  "$CEIL" "$(echo "$CEIL_JSON" | json "d['ack_latency']['p99_ms']")" "$DRAINED_S" \
  "$(echo "$RECV" | json "d['lost']")" "$(echo "$RECV" | json "d['duplicated']")"
NGINX_RATE=$(awk "BEGIN{printf \"%d\", $CEIL * 0.8}")
NGINX_JSON=$($GW sim send --json --duration "$SECS" --url "http://127.0.0.1:$NGINX_PORT/slack/events" --rate "$NGINX_RATE" 2>/dev/null)
NGINX_P99=$(echo "$NGINX_JSON" | json "d['ok_latency']['p99_ms']")
printf 'nginx return 200 at 0.8x (%s/s): p99 %s ms\n' "$NGINX_RATE" "$NGINX_P99"
printf '%-9s %7s %8s %9s %9s %9s %9s %6s %6s %7s %8s %5s %4s %7s\n' \
  "load" "rate/s" "2xx/s" "2xx p50" "2xx p99" "503 p99" "503 p99s" ">2s" ">3s" "gaveup" "drained" "lost" "dup" "RSS MiB"
# One open-loop phase at FACTOR x the ceiling, named NAME: its row of the table, its send's
# JSON and the gateway's CPU kept under $WORK for the solve below.
flood() {
  local factor=$1 name=$2 label=$3 rate
  rate=$(awk "BEGIN{printf \"%d\", $CEIL * $factor}")
  start_phase "$name"
  OUT=$($GW sim send --json --time-scale 60 --duration "$SECS" --url "$GW_URL" --rate "$rate" --manifest "$WORK/$name.manifest" 2>/dev/null)
  end_phase "$name"
  echo "$OUT" >"$WORK/$name.send.json"
  echo "$GW_CPU_US" >"$WORK/$name.cpu"
  RSS_MIB=$(sort -n "$WORK/$name.rss" | tail -1 | awk '{printf "%.0f", $1 / 1024}')
  echo "$OUT" | json "'%-9s %7d %8.0f %9.3f %9.3f %9.3f %9.3f %6d %6d %7d %7ss %5s %4s %7s' % ('$label', $rate, d['statuses'].get('200', 0) / d['seconds'], d['ok_latency']['p50_ms'], d['ok_latency']['p99_ms'], d['refused_latency']['p99_ms'], d['refused_service']['p99_ms'], d['answers_over_2s'], d['answers_over_3s'], d['failed'], '$DRAINED_S', $(echo "$RECV" | json "d['lost']"), $(echo "$RECV" | json "d['duplicated']"), '$RSS_MIB')"
}
for factor in 0.5 0.8 1.5 3; do
  flood "$factor" "x${factor/./_}" "${factor}x"
done
# The same floods against nginx `return 200`: what the box and the load tool allow.
for factor in 1.5 3; do
  rate=$(awk "BEGIN{printf \"%d\", $CEIL * $factor}")
  $GW sim send --json --duration "$SECS" --url "http://127.0.0.1:$NGINX_PORT/slack/events" --rate "$rate" 2>/dev/null |
    json "'nginx return 200 at ${factor}x (%d/s): %.0f 2xx/s, p50 %.3f ms, p99 %.3f ms, %d answers over 2 s' % ($rate, d['statuses'].get('200', 0) / d['seconds'], d['ok_latency']['p50_ms'], d['ok_latency']['p99_ms'], d['answers_over_2s'])"
done
# What a 503 costs, in a flood where nearly every answer is one: 3x again with the limit on
# pending records held at 1 (`max_pending = 1`, the row marked "1p"), so that the gateway sheds
# as it does once its limit is reached. Its CPU beyond its few accepted events' (at the ceiling
# phase's cost each, where nothing is refused) is its 503s'. (In the 1.5x and 3x floods an
# accepted event costs more than in the closed loop, so solving those for a 503 blames the
# refusals for the contention: 2.7x an accepted event, on 2026-12-02.)
SERVER_LINES="${SERVER_LINES:-}
max_pending = 1" flood 3 p3 "3x 1p"
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def phase(name):
    st = json.load(open(f"{work}/{name}.send.json"))["statuses"]
    return st.get("200", 0), st.get("503", 0), int(open(f"{work}/{name}.cpu").read())
ok, _, cpu = phase("ceiling")
a = cpu / max(ok, 1)
acc, ref, c = phase("p3")
r = max(c - acc * a, 0) / max(ref, 1)
print(f"a 503 in a flood ({ref} of {acc + ref} answers): {r:.0f} µs of gateway CPU, against {a:.0f} µs for an "
      f"accepted event (acked and delivered, closed loop): {r / a:.2f}x")
PY
echo "(rates: events/s offered over at most 256 connections; 2xx/s: 200 answers per second of the phase, Slack's retries"
echo " included; latencies in ms from each first attempt's scheduled time, except 503 p99s: from each 503'd request's send;"
echo " >2s/>3s: answers slower than the ack budget / Slack's deadline, from each send; gaveup: events Slack would have"
echo " dropped after its 3 retries; drained: from the end of the send until the outbox was empty; lost/dup: acked events"
echo " the bot never got / got twice; RSS MiB: the gateway's largest resident set during the phase and its drain)"
