#!/usr/bin/env bash
# A/B of two gateway binaries on the backlog drain, interleaved so that the shared machine's
# drift falls on both alike: each round starts each binary fresh (new key prefix) with its bot
# down, sends DRAIN_EVENTS events (acked into the outbox), then starts the bot (`sim receive`
# of this tree) and times from its start to its last delivery (then checks that the outbox is
# empty). Prints every round, with Redis' bytes per waiting delivery (its used memory before the
# events and with them all waiting, over their number: receipts, entries, records, indexes),
# then the median ratio B/A.
#
#   bench/drain.sh A_BINARY B_BINARY [DRAIN_EVENTS] [ROUNDS]     defaults 40000 and 3
#
# AB_A_LINES and AB_B_LINES add lines to each side's [[app]], as in bench/ab.sh (@BOT@: the
# bot's port, which then gets the shadow's copies too, counted in its time to the last one).
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); N=${3:-40000}; ROUNDS=${4:-3}
cd "$(dirname "$0")/.."
. bench/lib.sh
SIM=$B
[ -x target/release/slackgate ] && SIM=$(realpath target/release/slackgate)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; rm -rf "$WORK"' EXIT
REDIS_PORT=$(port)
export BENCH_SECRET=bench-secret SLACK_SIGNING_SECRET=bench-secret
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" >"$WORK/redis.log" 2>&1 &
sleep 0.5
drain_one() { # binary label round → prints "backlog seconds per_s"
  local gw=$1 name="$2$3" listen admin bot pid recv
  listen=$(port); admin=$(port); bot=$(low_port)
  bench_gateway "$gw" "$name" "$listen" "$admin" "$REDIS_PORT" "$bot" \
    '{ max_in_flight = 64, retry_initial = "100ms", retry_max = "1s" }' "$(app_lines "$2" "$bot")"
  pid=$GW_PID
  local mem0 mem1
  mem0=$(used_memory)
  "$gw" sim send --json --time-scale 60 --url "http://127.0.0.1:$listen/slack/events" --rate 5000 --events "$N" \
    --duration $((N / 5000 + 1)) >/dev/null 2>&1 || true
  waiting() { "$gw" stats --json --config "$WORK/$name.toml" 2>/dev/null | json "d[0]['ready'] + d[0]['in_flight'] + d[0]['scheduled']"; }
  local backlog left
  backlog=$(waiting)
  mem1=$(used_memory)
  # The bot times the drain itself (from its start to its last delivery), so nothing polls the
  # outbox meanwhile: a poll a tenth of a second (a process and a Python each) took a third of
  # the box. The same bot, this tree's, for both binaries.
  "$SIM" sim receive --listen "127.0.0.1:$bot" --idle 2 --duration 600 --json \
    >"$WORK/$name.recv" 2>"$WORK/$name.recv.err" &
  recv=$!
  wait "$recv" 2>/dev/null || true
  left=$(waiting)
  [ "$left" = "0" ] || echo "warning: $left deliveries still waiting after the bot went idle ($name)" >&2
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local took
  if ! took=$(json "d['last_delivery_s'] or 0" <"$WORK/$name.recv" 2>/dev/null); then
    echo "the bot failed ($name):" >&2
    cat "$WORK/$name.recv.err" >&2
    took=0
  fi
  # A round whose bot failed or got nothing reads 0/s, and the script stops on it below.
  awk -v b="$backlog" -v t="$took" -v m=$((mem1 - mem0)) \
    'BEGIN { printf "%d %.2f %.0f %.0f\n", b, t, (t > 0 ? b / t : 0), (b > 0 ? m / b : 0) }'
}
used_memory() { redis-cli -p "$REDIS_PORT" info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }
echo "== $(date -u +%FT%TZ) $(nproc) cores; $N events waiting, $ROUNDS rounds; A=$A B=$B"
ratios=()
for r in $(seq "$ROUNDS"); do
  read -r ab as ar am < <(drain_one "$A" a "$r")
  read -r bb bs br bm < <(drain_one "$B" b "$r")
  printf 'round %d  A %6d waiting (%d B each), delivered in %6.2fs: %6d/s | B %6d waiting (%d B each), delivered in %6.2fs: %6d/s\n' \
    "$r" "$ab" "$am" "$as" "$ar" "$bb" "$bm" "$bs" "$br"
  [ "$ar" != 0 ] && [ "$br" != 0 ] || { echo "round $r did not drain: no ratio" >&2; exit 1; }
  ratios+=("$(awk -v a="$ar" -v b="$br" 'BEGIN { printf "%.3f", b / a }')")
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
echo "median B/A: deliveries/s while draining $median"
