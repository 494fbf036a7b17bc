#!/usr/bin/env bash
# What a stream's append costs through the egress: slack_sdk's own `WebClient.chat_stream`
# helper streams answers to a fake Slack Web API (`slackgate sim slack`) directly and through
# the egress, in interleaved rounds of the same sitting, and each flushed append's latency is
# timed at the client (median and p99, egress against direct). Redis is counted over the
# egress's append phases only: script calls (EVALSHA/EVAL) and every other command the
# gateway sent, per append. Run once without turns and once with an app taking turns (each
# append then renews its turn). Loopback only, bounded.
#
#   bench/stream.sh [ROUNDS] [STREAMS_PER_ROUND] [APPENDS_PER_STREAM]   defaults 5 20 20
#   GW=/path/to/slackgate bench/stream.sh …                              a given binary
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
STREAMS=${2:-20}
APPENDS=${3:-20}
scripts/deps --test >/dev/null
if [ -z "${GW:-}" ]; then
  cargo build --release --locked --bin slackgate 2>&1 | tail -1
  GW=${CARGO_TARGET_DIR:-target}/release/slackgate
fi
PY=.venv/bin/python3
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; rm -rf "$WORK"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(port); SLACK_PORT=$(port)
export BENCH_SECRET=bench-secret
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" >"$WORK/redis.log" 2>&1 &
$GW sim slack --listen "127.0.0.1:$SLACK_PORT" >"$WORK/slack.log" 2>&1 &

# A gateway with the egress; `turns` for its one app.
gateway() { # name turns
  local gw_port admin egress
  gw_port=$(port); admin=$(port); egress=$(port)
  cat >"$WORK/$1.toml" <<TOML
[server]
listen = "127.0.0.1:$gw_port"
admin_listen = "127.0.0.1:$admin"
[redis]
url = "redis://127.0.0.1:$REDIS_PORT/"
key_prefix = "sg$1"
[egress]
listen = "127.0.0.1:$egress"
slack_api_url = "http://127.0.0.1:$SLACK_PORT/api/"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:9"
$2
TOML
  RUST_LOG=warn $GW run --config "$WORK/$1.toml" --data-dir "$WORK/d$1" >"$WORK/$1.log" 2>&1 &
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$admin/readyz" && break; sleep 0.1; done
  echo "$egress"
}
PLAIN=$(gateway plain "")
TURNS=$(gateway turns 'turns = { order = "queue", on_newer = "withhold" }')

# One round: STREAMS answers of APPENDS flushed appends each (buffer_size 1: every append is a
# call), the stream's start and stop outside the timed appends. Prints each append's ms.
cat >"$WORK/round.py" <<'PY'
import sys, time, logging
from slack_sdk import WebClient
base, streams, appends, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
client = WebClient(base_url=base, token="xoxb-bench-token")
for s in range(streams):
    streamer = client.chat_stream(channel=f"C{tag}{s}", thread_ts=f"1700000000.{s:06d}", buffer_size=1,
                                  recipient_team_id="T0SIM", recipient_user_id="U1")
    streamer.append(markdown_text="Thinking about it. ")
    for i in range(appends):
        t = time.perf_counter()
        r = streamer.append(markdown_text=f"chunk {i} of the answer, about forty characters. ")
        ms = (time.perf_counter() - t) * 1000
        assert r is not None and r["ok"], r
        print(f"{ms:.4f}")
    streamer.stop()
PY

# The delivered questions the streams answer, as the inbound side records them (so that each
# append is attributed, and with turns renews its turn): a message per stream in its channel.
seed() { # prefix tag
  for s in $(seq 0 $((STREAMS - 1))); do
    local ts; ts=$(printf '1700000000.%06d' "$s")
    local t="{$1:e:T0SIM:C$2$s}"
    redis-cli -p "$REDIS_PORT" HSET "$t:m:$ts" th "$ts" d "0-bench$2$s" n 1 app bench k "T0SIM:C$2$s:$ts" >/dev/null
    redis-cli -p "$REDIS_PORT" SET "$t:t:$ts" "$ts" >/dev/null
  done
}
# Script calls the gateways made since the last reset (commandstats counts the commands inside
# a script as well, so only the script calls themselves are counted; the append path sends no
# other command).
cmds() {
  redis-cli -p "$REDIS_PORT" INFO commandstats | awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ {s+=$3} END {print s+0, 0}'
}
echo "== $(date -u +%FT%TZ) $(nproc) cores; $ROUNDS rounds x $STREAMS streams x $APPENDS appends, interleaved; Redis, the fake, two gateways and the client share the box"
: >"$WORK/direct"; : >"$WORK/plain"; : >"$WORK/turns"
SCRIPTS_PLAIN=0; SCRIPTS_TURNS=0
for r in $(seq "$ROUNDS"); do
  $PY "$WORK/round.py" "http://127.0.0.1:$SLACK_PORT/api/" "$STREAMS" "$APPENDS" "d$r" >>"$WORK/direct"
  seed sgplain "p$r"; seed sgturns "t$r"
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  $PY "$WORK/round.py" "http://127.0.0.1:$PLAIN/api/" "$STREAMS" "$APPENDS" "p$r" >>"$WORK/plain"
  read -r s _ < <(cmds); SCRIPTS_PLAIN=$((SCRIPTS_PLAIN + s))
  redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
  $PY "$WORK/round.py" "http://127.0.0.1:$TURNS/api/" "$STREAMS" "$APPENDS" "t$r" >>"$WORK/turns"
  read -r s _ < <(cmds); SCRIPTS_TURNS=$((SCRIPTS_TURNS + s))
done
stats() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%.3f %.3f %d\n", a[int(NR*0.5)+1], a[int(NR*0.99)+1], NR}'; }
read -r D50 D99 N < <(stats "$WORK/direct")
read -r P50 P99 _ < <(stats "$WORK/plain")
read -r T50 T99 _ < <(stats "$WORK/turns")
STREAMS_TOTAL=$((ROUNDS * STREAMS))
printf '%-36s median %7.3f ms  p99 %7.3f ms  (%d appends)\n' "direct to the fake" "$D50" "$D99" "$N"
printf '%-36s median %7.3f ms  p99 %7.3f ms\n' "through the egress" "$P50" "$P99"
printf '%-36s median %7.3f ms  p99 %7.3f ms\n' "through the egress, app with turns" "$T50" "$T99"
echo
echo "== summary (egress - direct, per append)"
awk -v a="$P50" -v b="$D50" -v c="$T50" 'BEGIN {printf "median: +%.3f ms without turns, +%.3f ms with turns\n", a-b, c-b}'
# A round's script calls cover its streams' starts and stops too: each stream's start costs
# the write path's calls, so the appends' share is what is left after a stream made of a start
# and a stop alone (measured below) is taken out.
cat >"$WORK/bare.py" <<'PY'
import sys
from slack_sdk import WebClient
client = WebClient(base_url=sys.argv[1], token="xoxb-bench-token")
for s in range(int(sys.argv[2])):
    st = client.chat_stream(channel=f"C{sys.argv[3]}{s}", thread_ts=f"1700000000.{s:06d}", buffer_size=1,
                            recipient_team_id="T0SIM", recipient_user_id="U1")
    st.append(markdown_text="Thinking about it. ")
    st.stop()
PY
seed sgplain bp; seed sgturns bt
redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
$PY "$WORK/bare.py" "http://127.0.0.1:$PLAIN/api/" "$STREAMS" bp
read -r BARE_PLAIN _ < <(cmds)
redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
$PY "$WORK/bare.py" "http://127.0.0.1:$TURNS/api/" "$STREAMS" bt
read -r BARE_TURNS _ < <(cmds)
awk -v s="$SCRIPTS_PLAIN" -v b="$BARE_PLAIN" -v n="$N" -v r="$ROUNDS" 'BEGIN {printf "Redis script calls per append: %.2f without turns\n", (s - b*r)/n}'
awk -v s="$SCRIPTS_TURNS" -v b="$BARE_TURNS" -v n="$N" -v r="$ROUNDS" 'BEGIN {printf "Redis script calls per append: %.2f with turns\n", (s - b*r)/n}'

