#!/usr/bin/env bash
# What one event costs, acked and delivered: a gateway binary in front of nginx `return 200` (a
# fast bot, so deliveries flow while it acks), closed loop (64 in flight) for SECONDS, then until
# every delivery is done (the outbox empty). Prints accepted/s, CPU µs per acked event of the gateway and of Redis
# (from /proc), and Redis' `INFO commandstats` per acked event (calls and µs; commands run inside
# scripts are counted too, and their µs are part of the EVALSHA's). `perf` as a third argument
# also records a profile of the gateway to ./perf.data; `perf-redis`, of Redis to ./redis.perf;
# `syscalls` counts the gateway's system calls per acked event (perf's tracepoints, in the
# closed-loop phase).
#
#   bench/cost.sh [BINARY] [SECONDS] [perf|perf-redis|syscalls]   defaults target/release/slackgate and 8
# SERVER_LINES adds lines to the gateway's [server] (e.g. `threads = 1`), to weigh a setting.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
GWBIN=$(realpath "${1:-target/release/slackgate}"); SECS=${2:-8}
[ -x "$GWBIN" ] || cargo build --release --locked --bin slackgate 2>&1 | tail -1
SIM=$GWBIN
[ -x target/release/slackgate ] && SIM=$(realpath target/release/slackgate)
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$W/nginx.pid" ] && kill "$(cat "$W/nginx.pid")" 2>/dev/null; rm -rf "$W"' EXIT
RP=$(port); NP=$(port); GP=$(port); AP=$(port)
export BENCH_SECRET=bench-secret
redis-server --port "$RP" --bind 127.0.0.1 --dir "$W" --appendonly ${AOF:-yes} --save "" >"$W/redis.log" 2>&1 &
REDIS_PID=$!
nginx_bot "$W" "$NP"
cat >"$W/gw.toml" <<TOML
[server]
listen = "127.0.0.1:$GP"
admin_listen = "127.0.0.1:$AP"
${SERVER_LINES:-}
[redis]
url = "redis://127.0.0.1:$RP/"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:$NP"
delivery = { max_in_flight = 64 }
TOML
RUST_LOG=warn "$GWBIN" run --config "$W/gw.toml" --data-dir "$W/d" >"$W/gw.log" 2>&1 &
PID=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$AP/readyz" && break; sleep 0.1; done
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis-cli -p "$RP" CONFIG RESETSTAT >/dev/null
G0=$(cpu $PID); R0=$(cpu $REDIS_PID)
case "${3:-}" in
  perf) perf record -F 499 --call-graph dwarf,16384 -p "$PID" -o perf.data -- sleep "$SECS" >/dev/null 2>&1 & ;;
  syscalls) perf stat -x, -o "$W/syscalls" -p "$PID" -e "$(printf 'syscalls:sys_enter_%s,' \
    recvfrom sendto writev write read epoll_wait futex)raw_syscalls:sys_enter" -- sleep "$SECS" >/dev/null 2>&1 & ;;
  perf-redis) perf record -F 999 -g -p "$REDIS_PID" -o redis.perf -- sleep "$SECS" >/dev/null 2>&1 & ;;
esac
"$SIM" sim send --json --secret bench-secret --url "http://127.0.0.1:$GP/slack/events" --duration "$SECS" \
  --concurrency 64 2>/dev/null >"$W/out.json"
for _ in $(seq 600); do
  [ "$("$SIM" stats --json --config "$W/gw.toml" 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin)[0]; print(d["ready"] + d["in_flight"] + d["scheduled"])')" = "0" ] && break
  sleep 0.1
done
G1=$(cpu $PID); R1=$(cpu $REDIS_PID)
redis-cli -p "$RP" INFO commandstats | tr -d '\r' >"$W/cmdstats"
python3 - "$W/out.json" "$W/cmdstats" "$G0" "$G1" "$R0" "$R1" "$(getconf CLK_TCK)" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1])); n = d["acked"]
g0, g1, r0, r1, tck = map(int, sys.argv[3:8])
us = lambda a, b: (b - a) * 1e6 / tck / n
print(f"== {n} acked in the closed-loop phase, {d['acked_per_s']:.0f}/s")
print(f"CPU µs per event, acked and delivered: gateway {us(g0, g1):.1f}, redis {us(r0, r1):.1f}")
rows, total = [], 0
for line in open(sys.argv[2]):
    m = re.match(r"cmdstat_(\S+):calls=(\d+),usec=(\d+)", line)
    if m and m.group(1) not in ("info", "config|resetstat"):
        rows.append((m.group(1), int(m.group(2)), int(m.group(3))))
        total += int(m.group(2))
print(f"redis commands per event: {total / n:.2f}")
for name, calls, usec in sorted(rows, key=lambda r: -r[2]):
    print(f"  {name:<16} {calls / n:6.2f} calls  {usec / n:7.2f} µs per event  ({usec / max(calls, 1):.1f} µs per call)")
PY
if [ "${3:-}" = perf ]; then wait %?perf 2>/dev/null || sleep 1; fi
if [ "${3:-}" = syscalls ]; then
  wait %?perf 2>/dev/null || true
  n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["acked"])' "$W/out.json")
  echo "gateway system calls per acked event (perf stat, the closed-loop phase):"
  awk -F, -v n="$n" '$3 ~ /sys_enter/ { sub(/.*:sys_enter_?/, "", $3); printf "  %-16s %6.2f\n", ($3 == "" ? "all" : $3), $1 / n }' \
    "$W/syscalls" | sort -k2 -nr
fi
