#!/usr/bin/env bash
# Turns (issue 18) against no turns, on the ack path and on the drain, interleaved in one sitting
# so that the shared machine's drift falls on both alike. One binary, two configs of its one app:
#   off:   no `turns` (order = "off", today's behaviour)
#   queue: turns = { order = "queue", end = "answer" } (or $TURNS)
# Every event is a human `message` in a thread: team T0BENCH, THREADS threads spread over 16
# channels, event i in thread i mod THREADS (the first message of each thread is its parent,
# ts = thread_ts), ts increasing with i; so with queue each is a turn of its thread, a thread
# holds its next message until the bot's 2xx ends the turn, and the threads go on in parallel.
# The bodies are signed here (v0 HMAC over the fresh timestamp) and sent by ../shared/loadgen
# over kept-alive connections, one request in flight on each:
#   closed: ACK_EVENTS events, 64 connections back to back (closed loop, 64 in flight), bot =
#           nginx `return 200` so deliveries flow while it acks; then when the last of them
#           reached the bot (the outbox empty, held ones included), from the first send, and
#           Redis' own time (INFO commandstats) and commands per event over it all;
#   open:   OPEN_RATE events/s (default 1000) for 5 s over 32 connections, ack p99 measured
#           from each request's due time;
#   drain:  DRAIN_EVENTS events acked with the bot down (closed loop too: acks with no
#           delivery succeeding, the workers only failing or holding them), then `sim receive`
#           comes up and the time until the outbox is empty (the bot's count of deliveries
#           and duplicates too).
# Each round runs off and queue (off first in odd rounds, queue first in even ones), each phase
# on a fresh gateway (new key prefix) and a flushed Redis. Prints every round, then the medians
# and the ratios queue/off. Loopback only; every wait is bounded.
#
#   bench/turns.sh [ACK_EVENTS] [DRAIN_EVENTS] [ROUNDS] [THREADS]    defaults 60000 40000 3 1000
#   GW=binary (default target/release/slackgate), OPEN_RATE, TURNS (the queue side's line)
set -euo pipefail
ACK_N=${1:-60000}; DRAIN_N=${2:-40000}; ROUNDS=${3:-3}; THREADS=${4:-1000}; RATE=${OPEN_RATE:-1000}
OPEN_SECS=5
QUEUE='turns = { order = "queue", end = "answer" }'
TURNS=${TURNS-$QUEUE}
cd "$(dirname "$0")/.."
. bench/lib.sh
GW=$(realpath "${GW:-target/release/slackgate}")
[ -x "$GW" ] || { echo "no gateway binary at $GW: cargo build --release, or GW=…" >&2; exit 1; }
LOADGEN=$(loadgen_bin)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT
REDIS_PORT=$(port); NGINX_PORT=$(port)
export BENCH_SECRET=bench-secret SLACK_SIGNING_SECRET=bench-secret
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" >"$WORK/redis.log" 2>&1 &
nginx_bot "$WORK" "$NGINX_PORT"
sleep 0.5

# bodies FILE FIRST COUNT TAG: COUNT signed requests (loadgen's TSV) for events FIRST.. of the
# threads above, event ids Ev<TAG><i>.
bodies() {
  python3 - "$@" "$THREADS" "$BENCH_SECRET" <<'PY'
import hashlib, hmac, json, sys, time
out, first, count, tag, threads, secret = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6].encode()
now = str(int(time.time()))
ts = lambda i: f"{1750000000 + i // 1000000}.{i % 1000000:06d}"
with open(out, "w") as f:
    for i in range(first, first + count):
        k = i % threads
        event = {"type": "message", "channel_type": "channel", "user": "U0HUMAN", "channel": f"C0BENCH{k % 16:02d}",
                 "text": "a question, and then another", "ts": ts(i), "event_ts": ts(i), "thread_ts": ts(k)}
        body = json.dumps({"token": "bench", "team_id": "T0BENCH", "api_app_id": "A0BENCH", "type": "event_callback",
                           "event_id": f"Ev{tag}{i:09d}", "event_time": int(now),
                           "authorizations": [{"team_id": "T0BENCH", "user_id": "U0BENCHBOT", "is_bot": True}],
                           "event": event}, separators=(",", ":"))
        sig = hmac.new(secret, f"v0:{now}:{body}".encode(), hashlib.sha256).hexdigest()
        f.write(f"{now}\tv0={sig}\t{body}\n")
PY
}

# send LISTEN FILE RATE SECONDS CONNS → loadgen's JSON line (bounded: it sends RATE x SECONDS).
send() { timeout 300 "$LOADGEN" "127.0.0.1:$1" /slack/events "$2" "$3" "$4" "$5" | tail -1; }

# Deliveries not yet completed: on the stream, in flight, scheduled, held for their turn.
waiting() {
  "$GW" stats --json --config "$WORK/$1.toml" 2>/dev/null |
    json "sum(d[0].get(k) or 0 for k in ('ready', 'in_flight', 'scheduled', 'held'))"
}

# until_empty NAME LIMIT_S → seconds until nothing waits (LIMIT_S if it never empties).
until_empty() {
  local start end
  start=$(date +%s.%N)
  for _ in $(seq $(($2 * 10))); do [ "$(waiting "$1")" = "0" ] && break; sleep 0.1; done
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }'
}

app_lines() { [ "$1" = queue ] && echo "$TURNS" || true; }

# redis_cost N → "µs_per_event commands_per_event" since the last CONFIG RESETSTAT.
redis_cost() {
  redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    awk -F'[:,=]' -v n="$1" '/^cmdstat_/ { c += $3; u += $5 } END { printf "%.1f %.1f", u / n, c / n }'
}

# acks MODE ROUND → "closed_ok_per_s all_delivered_at_s redis_us_per_event redis_cmds_per_event
# open_p99_ms open_ok_per_s"
acks() {
  local mode=$1 name="ack$1$2" listen admin closed after open
  listen=$(port); admin=$(port)
  bench_gateway "$GW" "$name" "$listen" "$admin" "$REDIS_PORT" "$NGINX_PORT" "{ max_in_flight = 64 }" "$(app_lines "$mode")"
  bodies "$WORK/closed.tsv" 0 $((ACK_N + 64)) "${name}c"
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  closed=$(send "$listen" "$WORK/closed.tsv" 1000000 "$(awk -v n="$ACK_N" 'BEGIN { printf "%.6f", n / 1e6 }')" 64 |
    json "d['ok'] * d['achieved_rps'] / max(d['sent'], 1)")
  after=$(until_empty "$name" 120)
  after="$(awk -v n="$ACK_N" -v c="$closed" -v a="$after" 'BEGIN { printf "%.2f", n / c + a }') $(redis_cost "$ACK_N")"
  bodies "$WORK/open.tsv" $((ACK_N + 64)) $((RATE * OPEN_SECS + 64)) "${name}o"
  open=$(send "$listen" "$WORK/open.tsv" "$RATE" "$OPEN_SECS" 32 | json "d['p99_ms'], d['ok'] / $OPEN_SECS")
  kill -INT "$GW_PID"; wait "$GW_PID" 2>/dev/null || true
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  echo "$closed $after $open"
}

# drain MODE ROUND → "acked acked_per_s seconds per_s received duplicated"
drain() {
  local mode=$1 name="drain$1$2" listen admin bot acked secs recv
  listen=$(port); admin=$(port); bot=$(port)
  bench_gateway "$GW" "$name" "$listen" "$admin" "$REDIS_PORT" "$bot" \
    '{ max_in_flight = 64, retry_initial = "100ms", retry_max = "1s" }' "$(app_lines "$mode")"
  bodies "$WORK/drain.tsv" 0 $((DRAIN_N + 64)) "$name"
  acked=$(send "$listen" "$WORK/drain.tsv" 1000000 "$(awk -v n="$DRAIN_N" 'BEGIN { printf "%.6f", n / 1e6 }')" 64 |
    json "d['ok'], round(d['ok'] * d['achieved_rps'] / max(d['sent'], 1))")
  "$GW" sim receive --listen "127.0.0.1:$bot" --idle 3 --duration 300 --json >"$WORK/$name.recv" 2>/dev/null &
  recv=$!
  secs=$(until_empty "$name" 300)
  kill -INT "$GW_PID"; wait "$GW_PID" 2>/dev/null || true
  wait "$recv" 2>/dev/null || true
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  echo "$acked $secs $(awk -v n="${acked%% *}" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')" \
    "$(json "d['received'], d['duplicated']" <"$WORK/$name.recv")"
}

echo "== $(date -u +%FT%TZ) $(nproc) cores; $ROUNDS rounds; $THREADS threads over 16 channels; closed loop $ACK_N events (64 in flight), open loop $RATE/s for ${OPEN_SECS}s, drain $DRAIN_N; queue: $TURNS; GW=$GW"
: >"$WORK/rows"
declare -A ack dr
for r in $(seq "$ROUNDS"); do
  modes=(off queue)
  [ $((r % 2)) -eq 0 ] && modes=(queue off)
  ack=(); dr=()
  for m in "${modes[@]}"; do ack[$m]=$(acks "$m" "$r"); done
  for m in "${modes[@]}"; do dr[$m]=$(drain "$m" "$r"); done
  for m in off queue; do
    read -r c a ru rc p o <<<"${ack[$m]}"
    read -r n na s d got du <<<"${dr[$m]}"
    printf 'round %d %-5s closed %6.0f/s, all at the bot at %5.2fs, Redis %5.1f µs %4.1f cmds/event | open p99 %7.3f ms %5.0f ok/s | bot down %6.0f/s | drain %6d in %6.2fs: %5d/s (bot got %d, %d dup)\n' \
      "$r" "$m" "$c" "$a" "$ru" "$rc" "$p" "$o" "$na" "$n" "$s" "$d" "$got" "$du"
    echo "$r $m $c $a $p $o $n $na $s $d $got $du $ru $rc" >>"$WORK/rows"
  done
done
python3 - "$WORK/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
col = {"closed": 2, "at": 3, "p99": 4, "down": 7, "drain": 9, "redis_us": 12, "redis_cmds": 13}
by = {m: {k: [float(r[i]) for r in rows if r[1] == m] for k, i in col.items()} for m in ("off", "queue")}
med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in by.items()}
rounds = sorted({r[0] for r in rows})
pair = lambda k: [float(next(r for r in rows if r[0] == n and r[1] == "queue")[col[k]])
                  / max(float(next(r for r in rows if r[0] == n and r[1] == "off")[col[k]]), 1e-9) for n in rounds]
for m in ("off", "queue"):
    d = med[m]
    print(f"median {m:5}: closed-loop acked/s {d['closed']:.0f}, all at the bot at {d['at']:.2f}s, "
          f"Redis {d['redis_us']:.1f} µs and {d['redis_cmds']:.1f} commands per event, "
          f"open-loop p99 {d['p99']:.3f} ms, acked/s with the bot down {d['down']:.0f}, drain {d['drain']:.0f}/s")
med_ratio = lambda k: statistics.median(pair(k))
print(f"median of the rounds' ratios queue/off: closed-loop acked/s {med_ratio('closed'):.3f}, "
      f"all at the bot {med_ratio('at'):.2f}, open-loop p99 {med_ratio('p99'):.2f}, "
      f"acked/s with the bot down {med_ratio('down'):.3f}, drain deliveries/s {med_ratio('drain'):.3f}")
PY
