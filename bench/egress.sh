#!/usr/bin/env bash
# The egress's overhead: the same Web API calls sent to a fake Slack Web API (`slackgate sim
# slack`) directly and through the egress, for a read (users.info) and a write
# (chat.postMessage, every call a new message to a new channel, so neither the retry
# fingerprints nor the per-channel pacing hold it back). wrk, closed loop; throughput ratio and
# p99 against the direct calls measured in the same run. Loopback only, bounded in time.
#
#   bench/egress.sh [SECONDS_PER_PHASE] [CONNECTIONS]     defaults 10 and 32
#   GW=/path/to/slackgate bench/egress.sh …                 a given binary (no build), for an A/B
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
CONNS=${2:-32}
scripts/deps
command -v wrk >/dev/null || { apt-get install -y -qq wrk >/dev/null; }
if [ -z "${GW:-}" ]; then
  cargo build --release --locked --bin slackgate 2>&1 | tail -1
  GW=target/release/slackgate
fi
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; rm -rf "$WORK"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(port); SLACK_PORT=$(port); GW_PORT=$(port); ADMIN_PORT=$(port); EGRESS_PORT=$(port)
export BENCH_SECRET=bench-secret
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --save "" >"$WORK/redis.log" 2>&1 &
$GW sim slack --listen "127.0.0.1:$SLACK_PORT" >"$WORK/slack.log" 2>&1 &
cat >"$WORK/gw.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
[redis]
url = "redis://127.0.0.1:$REDIS_PORT/"
[egress]
listen = "127.0.0.1:$EGRESS_PORT"
slack_api_url = "http://127.0.0.1:$SLACK_PORT/api/"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:9"
TOML
RUST_LOG=warn $GW run --config "$WORK/gw.toml" --data-dir "$WORK/d" >"$WORK/gw.log" 2>&1 &
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$ADMIN_PORT/readyz" && break; sleep 0.1; done

cat >"$WORK/read.lua" <<'LUA'
wrk.method = "POST"
wrk.body = "user=U0SIM&include_locale=true"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = "Bearer xoxb-bench-token"
LUA
cat >"$WORK/write.lua" <<'LUA'
local n = 0
function init(args)
  -- A seed per thread: identical bodies from two threads would be taken for a retry.
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
function request()
  n = n + 1
  local id = math.random(1, 1000000000) .. "_" .. n
  local body = "channel=C" .. id .. "&text=bench+" .. id
  return wrk.format("POST", "/api/chat.postMessage",
    { ["Content-Type"] = "application/x-www-form-urlencoded", ["Authorization"] = "Bearer xoxb-bench-token" }, body)
end
LUA
# rps and p99 (ms) from wrk's --latency output.
run() { # label url script
  local out; out=$(wrk -t2 -c"$CONNS" -d"${SECS}s" --latency -s "$3" "$2" 2>&1)
  local rps p99
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v=v*1000}; print v}')
  local non2xx; non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
  printf '%-32s req/s %8.0f  p99 %7.3f ms  non-2xx %s\n' "$1" "$rps" "$p99" "${non2xx:-0}" >&2
  echo "$rps $p99"
}
echo "== $(date -u +%FT%TZ) $(nproc) cores; ${SECS}s per phase, $CONNS connections; Redis, the fake, the gateway and wrk share the box"
read -r RD_RPS RD_P99 < <(run "read, direct to the fake" "http://127.0.0.1:$SLACK_PORT/api/users.info" "$WORK/read.lua")
read -r RE_RPS RE_P99 < <(run "read, through the egress" "http://127.0.0.1:$EGRESS_PORT/api/users.info" "$WORK/read.lua")
read -r WD_RPS WD_P99 < <(run "write, direct to the fake" "http://127.0.0.1:$SLACK_PORT/api/chat.postMessage" "$WORK/write.lua")
redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
read -r WE_RPS WE_P99 < <(run "write, through the egress" "http://127.0.0.1:$EGRESS_PORT/api/chat.postMessage" "$WORK/write.lua")
echo
echo "== summary (egress / direct)"
awk -v a="$RE_RPS" -v b="$RD_RPS" -v c="$RE_P99" -v d="$RD_P99" 'BEGIN {printf "read:  throughput %.2f, p99 %.2fx (%.3f vs %.3f ms)\n", a/b, c/d, c, d}'
awk -v a="$WE_RPS" -v b="$WD_RPS" -v c="$WE_P99" -v d="$WD_P99" 'BEGIN {printf "write: throughput %.2f, p99 %.2fx (%.3f vs %.3f ms)\n", a/b, c/d, c, d}'
CMDS=$(redis-cli -p "$REDIS_PORT" INFO commandstats | awk -F'[=,:]' '/^cmdstat_/ && !/cmdstat_info/ {s+=$3} END {print s}')
awk -v c="$CMDS" -v r="$WE_RPS" -v s="$SECS" 'BEGIN {printf "redis commands per write through the egress: %.1f (%d over the phase)\n", c/(r*s), c}'
