#!/usr/bin/env bash
# Instructions per acked-and-delivered event, counted by valgrind (callgrind), of each gateway
# binary given and of its Redis: a count, not a time, so it repeats on a shared, noisy box
# (whatever else runs) and an A/B of it needs no interleaving. User space only: the kernel's
# share (sockets, wake-ups) is not in it, so it complements `bench/cost.sh`, never replaces it.
# Each binary runs under callgrind in front of nginx `return 200` (deliveries flow), gets
# EVENTS events (closed loop, CONC in flight, default 16), then is waited on until its outbox is empty; the
# instructions of a run with no events that lasts as long (start, the timers of an idle
# gateway) are taken off, so what is left is the events' own. Start-up and stop are not
# counted at all. Prints, per binary, instructions per event of the gateway and of Redis, and
# the top functions of the gateway (inclusive), and B/A ratios when given two.
#
#   bench/instr.sh BINARY [BINARY_B] [EVENTS]          EVENTS default 2000
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
A=$(realpath "$1"); B=${2:+$(realpath "$2")}; N=${3:-2000}
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null
SIM=$(realpath "${SIM:-$A}")
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$W/nginx.pid" ] && kill "$(cat "$W/nginx.pid")" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
export BENCH_SECRET=bench-secret
NP=$(port)
nginx_bot "$W" "$NP"

# run NAME BINARY EVENTS [SECONDS] → $W/NAME.gw.out and $W/NAME.redis.out (callgrind outputs),
# and $W/NAME.secs, how long it ran; with no events it idles for SECONDS instead.
run() {
  local name=$1 bin=$2 n=$3 idle=${4:-0} rp gp ap gw redis start
  rp=$(port); gp=$(port); ap=$(port)
  # %p: Redis forks for its AOF, and the child would write over the parent's counts.
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/$name.redis.%p.out" \
    redis-server --port "$rp" --bind 127.0.0.1 --dir "$W" --appendonly yes --appendfilename "$name.aof" \
    --save "" >"$W/$name.redis.log" 2>&1 &
  redis=$!
  for _ in $(seq 300); do redis-cli -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.1; done
  cat >"$W/$name.toml" <<TOML
[server]
listen = "127.0.0.1:$gp"
admin_listen = "127.0.0.1:$ap"
ack_budget = "2s"
${SERVER_LINES:-}
[redis]
url = "redis://127.0.0.1:$rp/"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:$NP"
delivery = { max_in_flight = 64 }
TOML
  # The delivery history keeps `history_rate` deliveries a second in full (100 by default) and
  # only counts the rest. Under valgrind a gateway does ~150 events a second, not ~10,000, so
  # the default would keep two in three in full where a real flood keeps one in a hundred: the
  # rate is scaled down with the event rate (1 a second), for a binary that has the setting.
  if [ -z "${HISTORY_RATE_AS_SHIPPED:-}" ]; then
    printf '[ui]\nhistory_rate = 1\n' >>"$W/$name.toml"
    "$bin" check --config "$W/$name.toml" >/dev/null 2>&1 || sed -i '/^\[ui\]$/,$d' "$W/$name.toml"
  fi
  RUST_LOG=warn valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/$name.gw.out" \
    "$bin" run --config "$W/$name.toml" --data-dir "$W/$name.d" >"$W/$name.gw.log" 2>&1 &
  gw=$!
  for _ in $(seq 600); do curl -sf -o /dev/null "http://127.0.0.1:$ap/readyz" && break; sleep 0.1; done
  # Counted from here (the start-up is not) to the end of the drain (the stop is not).
  callgrind_control -i on "$gw" >/dev/null 2>&1; callgrind_control -i on "$redis" >/dev/null 2>&1
  start=$(date +%s.%N)
  [ "$n" -gt 0 ] || sleep "$idle"
  if [ "$n" -gt 0 ]; then
    "$SIM" sim send --json --secret bench-secret --url "http://127.0.0.1:$gp/slack/events" --events "$n" \
      --duration 600 --concurrency "${CONC:-16}" >"$W/$name.send.json" 2>/dev/null
  fi
  for _ in $(seq 1200); do
    [ "$("$bin" stats --json --config "$W/$name.toml" 2>/dev/null | json "d[0]['ready'] + d[0]['in_flight'] + d[0]['scheduled']")" = "0" ] && break
    sleep 0.25
  done
  python3 -c "import time; print(time.time() - $start)" >"$W/$name.secs"
  callgrind_control -i off "$gw" >/dev/null 2>&1; callgrind_control -i off "$redis" >/dev/null 2>&1
  kill -INT "$gw"; wait "$gw" 2>/dev/null || true
  redis-cli -p "$rp" shutdown nosave >/dev/null 2>&1 || kill "$redis"; wait "$redis" 2>/dev/null || true
  mv "$W/$name.redis.$redis.out" "$W/$name.redis.out"
  if [ "$n" -gt 0 ]; then
    json "d['acked']" <"$W/$name.send.json" >"$W/$name.acked"
    # Every event acked on its first send: a shed or refused one would count its cost too.
    json "d['requests'] - d['acked']" <"$W/$name.send.json" >"$W/$name.unacked"
  fi
}
sha_self() { callgrind_annotate "$1" 2>/dev/null | awk '/:sha2::sha256::compress256/ && !/=>/ {c = $1; gsub(",", "", c); s += c} END {print s + 0}'; }
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}'; }

for label in A ${B:+B}; do
  bin=$A; [ "$label" = B ] && bin=$B
  run "$label" "$bin" "$N"
  run "${label}0" "$bin" 0 "$(cat "$W/$label.secs")"
  acked=$(cat "$W/$label.acked")
  g=$(( ($(total "$W/$label.gw.out") - $(total "$W/${label}0.gw.out")) / acked ))
  r=$(( ($(total "$W/$label.redis.out") - $(total "$W/${label}0.redis.out")) / acked ))
  # valgrind hides SHA-NI from the CPU id, so sha2 runs its software rounds here (the machine
  # itself runs the SHA extensions): the HMACs are shown apart, and the ratios leave them out.
  sha=$(( $(sha_self "$W/$label.gw.out") / acked ))
  echo "$label $(basename "$bin"): $acked acked ($(cat "$W/$label.unacked") not); instructions per event: gateway $g (of which software SHA-256 $sha), redis $r"
  g=$((g - sha))
  echo "$g $r" >"$W/$label.per"
  callgrind_annotate --inclusive=yes "$W/$label.gw.out" 2>/dev/null | sed -n '/file:function/,$p' | sed -n 2,26p |
    awk -v n="$acked" '{c=$1; gsub(",", "", c); $1=""; printf "  %9.0f  %s\n", c / n, substr($0, 1, 150)}'
done
if [ -n "$B" ]; then
  read -r ga ra <"$W/A.per"; read -r gb rb <"$W/B.per"
  python3 -c "print(f'B/A: gateway {$gb / $ga:.3f} (without SHA-256), redis {$rb / $ra:.3f}')"
fi
