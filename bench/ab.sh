#!/usr/bin/env bash
# A/B of two gateway binaries on the ack path, interleaved so that the shared machine's drift
# falls on both alike: each round starts each binary fresh (new key prefix) in front of nginx
# `return 200` (a fast bot, so deliveries flow while it acks) and measures closed loop (64 in
# flight) and open loop at AB_RATE events/s (default 1000; above the ceiling, the events answered
# 200 at their first attempt per second tell what a flood leaves). Prints every round, then the
# median ratios B/A.
#
#   bench/ab.sh A_BINARY B_BINARY [SECONDS_PER_PHASE] [ROUNDS]     defaults 8 and 3
#
# AB_A_LINES and AB_B_LINES add lines to each side's [[app]] (the same binary twice then
# compares two configs): @BOT@ is the bot's port, @EGRESS@ a free port, e.g. a shadow at share
# 1.0 against none: AB_B_LINES=$'shadow = { upstream = "http://127.0.0.1:@BOT@" }\n[egress]\nlisten = "127.0.0.1:@EGRESS@"'.
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); SECS=${3:-8}; ROUNDS=${4:-3}; RATE=${AB_RATE:-1000}
cd "$(dirname "$0")/.."
. bench/lib.sh
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT
REDIS_PORT=$(port); NGINX_PORT=$(port)
export BENCH_SECRET=bench-secret
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" >"$WORK/redis.log" 2>&1 &
nginx_bot "$WORK" "$NGINX_PORT"
sleep 0.5
run_one() { # binary label round → prints "closed_ok_s open_p99_ms open_ok_s"
  local gw=$1 name="$2$3" listen admin pid
  listen=$(port); admin=$(port)
  local lines
  lines=$(app_lines "$2" "$NGINX_PORT")
  bench_gateway "$gw" "$name" "$listen" "$admin" "$REDIS_PORT" "$NGINX_PORT" "{ max_in_flight = 64 }" "$lines"
  pid=$GW_PID
  local url="http://127.0.0.1:$listen/slack/events" closed open
  closed=$("$B" sim send --json --secret bench-secret --url "$url" --duration "$SECS" --concurrency 64 2>/dev/null | json "d['acked_per_s']")
  sleep 2 # let the deliveries catch up before the latency phase
  open=$("$B" sim send --json --secret bench-secret --url "$url" --duration "$SECS" --rate "$RATE" 2>/dev/null | json "d['ack_latency']['p99_ms'], d['ok_first_attempts'] / $SECS")
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  echo "$closed $open"
}
echo "== $(date -u +%FT%TZ) $(nproc) cores; ${SECS}s per phase, $ROUNDS rounds, open loop $RATE/s; A=$A B=$B"
: >"$WORK/rows"
for r in $(seq "$ROUNDS"); do
  a=$(run_one "$A" a "$r"); b=$(run_one "$B" b "$r")
  printf 'round %d  A closed %6.0f/s  open p99 %8.3f ms %6.0f ok/s | B closed %6.0f/s  open p99 %8.3f ms %6.0f ok/s\n' "$r" $a $b
  echo "$a $b" >>"$WORK/rows"
done
python3 - "$WORK/rows" "$RATE" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
thr = statistics.median(r[3] / r[0] for r in rows)
p99 = statistics.median(r[4] / r[1] for r in rows)
ok = statistics.median(r[5] / r[2] for r in rows)
print(f"median B/A: closed-loop accepted/s {thr:.2f}, open-loop {sys.argv[2]}/s p99 {p99:.2f}, acked/s {ok:.2f}")
PY
