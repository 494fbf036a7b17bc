#!/usr/bin/env bash
# What the operator's list costs Redis and the ack path (issue 32, item 6), with 10,000
# deliveries of ~3 KB in the history (seeded through the gateway itself, every one kept:
# history_rate = 100000):
#  1. the bytes Redis sends for one list page (INFO's total_net_output_bytes around one GET of
#     the page): a filter that matches nothing, a filter on a tenth of them, the live poll's
#     `rows=1` of the unfiltered list — for each binary given (e.g. the code before and after);
#  2. with the last binary, the ack p50/p99 under closed-loop load (64 in flight) with three
#     pollers of the list's `rows=1` URL every 2 s (as three open tabs) against none,
#     interleaved: none, tabs, none, tabs … — and the ratio of two "none" rounds (an A/A)
#     for the sitting's spread.
#
#   bench/history_list.sh BINARY [BINARY …]     (SECS per load phase, default 8; ROUNDS, default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${SECS:-8}; ROUNDS=${ROUNDS:-3}; N=${N:-10000}
BINS=(); for b in "$@"; do BINS+=("$(realpath "$b")"); done
[ ${#BINS[@]} -gt 0 ] || { echo "usage: bench/history_list.sh BINARY [BINARY …]" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT
REDIS_PORT=$(port); NGINX_PORT=$(port)
export BENCH_SECRET=bench-secret
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --save "" >"$WORK/redis.log" 2>&1 &
nginx_bot "$WORK" "$NGINX_PORT"
sleep 0.5
used_memory() { redis-cli -p "$REDIS_PORT" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p' | tr -d '\r'; }
out_bytes() { redis-cli -p "$REDIS_PORT" INFO stats | sed -n 's/^total_net_output_bytes:\([0-9]*\).*/\1/p' | tr -d '\r'; }
# seed PORT: N app_mentions of ~3 KB, one channel in ten "CTENTH", signed, over one connection.
seed() {
  python3 - "$1" "$N" <<'PY'
import hashlib, hmac, http.client, json, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
pad = "lorem ipsum dolor sit amet " * 100
for i in range(n):
    body = json.dumps({"token": "legacy", "type": "event_callback", "team_id": "T1", "api_app_id": "A1",
        "event_id": f"EvHist{i:06d}", "event_time": int(time.time()),
        "event": {"type": "app_mention", "user": "U1", "channel": "CTENTH" if i % 10 == 0 else f"C{i % 7}",
                  "ts": f"{1700000000 + i}.000100", "text": f"<@UBOT> question {i} {pad}"}}).encode()
    ts = str(int(time.time()))
    sig = "v0=" + hmac.new(b"bench-secret", b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    c.request("POST", "/slack/events", body, {"Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
PY
}
page_bytes() { # ADMIN_PORT PATH → bytes Redis sent while the page was made
  local before after
  before=$(out_bytes)
  curl -sf -o /dev/null "http://127.0.0.1:$1$2"
  after=$(out_bytes)
  echo $((after - before))
}
echo "== $(date -u +%FT%TZ) $(nproc) cores; $N deliveries of ~3 KB in the history; binaries: ${BINS[*]}"
i=0
for gw in "${BINS[@]}"; do
  i=$((i + 1)); name="hl$i"; listen=$(port); admin=$(port)
  SERVER_LINES="" bench_gateway "$gw" "$name" "$listen" "$admin" "$REDIS_PORT" "$NGINX_PORT" "{ max_in_flight = 64 }" \
    $'\n[ui]\nhistory_rate = 100000\nhistory_max = '"$N"
  mem0=$(used_memory)
  seed "$listen"
  for _ in $(seq 300); do
    [ "$(redis-cli -p "$REDIS_PORT" ZCARD "{$name:h:bench}:idx")" -ge "$N" ] && break
    sleep 0.2
  done
  sleep 1 # the writer's last window
  # The binaries share one Redis: what this one's history added, not the total.
  mem=$(( $(used_memory) - mem0 ))
  printf '%s: %s in the index, Redis used_memory +%.1f MB for them (%d B a delivery)\n' "$gw" "$(redis-cli -p "$REDIS_PORT" ZCARD "{$name:h:bench}:idx")" "$(echo "$mem / 1000000" | bc -l)" $((mem / N))
  for path in "/ui/deliveries?channel=CNONE" "/ui/deliveries?channel=CTENTH" "/ui/deliveries?rows=1"; do
    b=$(page_bytes "$admin" "$path")
    printf '  %-32s Redis sent %10d bytes (%.2f MB)\n' "$path" "$b" "$(echo "$b / 1000000" | bc -l)"
  done
  LAST_ADMIN=$admin; LAST_LISTEN=$listen; LAST_PID=$GW_PID; LAST_GW=$gw
done
# The load phase, on the last binary's gateway with its history full.
url="http://127.0.0.1:$LAST_LISTEN/slack/events"
load() { # → "p50 p99"
  "$LAST_GW" sim send --json --secret bench-secret --url "$url" --duration "$SECS" --concurrency 64 2>/dev/null |
    json "d['ack_latency']['p50_ms'], d['ack_latency']['p99_ms']"
}
tabs() { # three pollers of the list's rows=1 URL every 2 s, until killed
  for t in 1 2 3; do
    (while true; do curl -sf -o /dev/null "http://127.0.0.1:$LAST_ADMIN/ui/deliveries?rows=1"; sleep 2; done) &
  done
}
: >"$WORK/rows"
for r in $(seq "$ROUNDS"); do
  none=$(load); sleep 2
  tabs; pids=$(jobs -p | tail -3); with=$(load); kill $pids 2>/dev/null || true; sleep 2
  again=$(load); sleep 2
  printf 'round %d  none p50 %6.2f p99 %6.2f ms | 3 tabs p50 %6.2f p99 %6.2f ms | none again p50 %6.2f p99 %6.2f ms\n' "$r" $none $with $again
  echo "$none $with $again" >>"$WORK/rows"
done
python3 - "$WORK/rows" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
m = lambda f: statistics.median(f(r) for r in rows)
print(f"median ratios: 3 tabs / none: p50 {m(lambda r: r[2] / r[0]):.2f}, p99 {m(lambda r: r[3] / r[1]):.2f}; "
      f"A/A (none again / none): p50 {m(lambda r: r[4] / r[0]):.2f}, p99 {m(lambda r: r[5] / r[1]):.2f}")
PY
