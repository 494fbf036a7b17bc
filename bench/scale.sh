#!/usr/bin/env bash
# Scale-out on one box (issue 12): accepted events/s closed loop (64 in flight, split over the
# gateway processes) and ack p99 at a fixed open-loop rate, for
#   1 gateway on 1 Redis node          | 3 gateways on 1 node
#   1 gateway on a 3-master cluster    | 3 gateways on the cluster
# with durability local, and replicated (the node gets a replica; the cluster has 3 replicas).
# A fast bot (nginx `return 200`) takes the deliveries. Everything shares this machine's cores,
# so read it as efficiency per core, not as how far more machines would go. Loopback only,
# bounded in time.
#
#   bench/scale.sh [SECONDS_PER_PHASE] [OPEN_RATE]      defaults 8 and 2000
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-8}; RATE=${2:-2000}
scripts/deps
cargo build --release --locked --bin slackgate 2>&1 | tail -1
GW=$(realpath target/release/slackgate)
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; sleep 0.3; [ -f "$W/nginx.pid" ] && kill "$(cat "$W/nginx.pid")" 2>/dev/null; rm -rf "$W"' EXIT
# A port whose cluster bus port (+10000) is free too, both below the ephemeral range.
bus_port() { python3 -c '
import random, socket
while True:
    p = random.randint(10000, 22000)
    try:
        a = socket.socket(); a.bind(("127.0.0.1", p)); b = socket.socket(); b.bind(("127.0.0.1", p + 10000))
        print(p); break
    except OSError:
        pass'; }
export BENCH_SECRET=bench-secret
NP=$(port)
nginx_bot "$W" "$NP"
redis() { # port dir [args...]
  local p=$1 d=$2; shift 2; mkdir -p "$d"
  redis-server --port "$p" --bind 127.0.0.1 --dir "$d" --appendonly yes --save "" "$@" >"$d/log" 2>&1 &
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && return; sleep 0.05; done
}
# One Redis node, with a replica: NODE_PORT.
NODE_PORT=$(port); REPLICA_PORT=$(port)
redis "$NODE_PORT" "$W/node"; redis "$REPLICA_PORT" "$W/replica" --replicaof 127.0.0.1 "$NODE_PORT"
# A cluster: 3 primaries + 3 replicas.
CLUSTER=()
for _ in 1 2 3 4 5 6; do CLUSTER+=("$(bus_port)"); done
for p in "${CLUSTER[@]}"; do redis "$p" "$W/c$p" --cluster-enabled yes --cluster-config-file nodes.conf; done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CLUSTER[@]}") --cluster-replicas 1 --cluster-yes >/dev/null
for _ in $(seq 200); do
  ok=1; for p in "${CLUSTER[@]}"; do redis-cli -p "$p" cluster info | grep -q cluster_state:ok || ok=0; done
  [ $ok = 1 ] && break; sleep 0.1
done
CLUSTER_TOML="cluster = [$(printf '"redis://127.0.0.1:%s/", ' "${CLUSTER[@]}" | sed 's/, $//')]
shards = 6"

# N gateways on a topology: sets URLS (their Slack-facing URLs) and PIDS.
start_gateways() { # name n redis-lines durability
  local name=$1 n=$2 i listen admin
  URLS=(); PIDS=()
  for i in $(seq "$n"); do
    listen=$(port); admin=$(port)
    cat >"$W/$name-$i.toml" <<TOML
[server]
listen = "127.0.0.1:$listen"
admin_listen = "127.0.0.1:$admin"
[redis]
$3
key_prefix = "$name"
durability = "$4"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:$NP"
delivery = { max_in_flight = 64, retry_initial = "100ms", retry_max = "2s" }
TOML
    RUST_LOG=warn $GW run --config "$W/$name-$i.toml" --data-dir "$W/$name-$i.d" >"$W/$name-$i.log" 2>&1 &
    PIDS+=($!)
    URLS+=("http://127.0.0.1:$listen/slack/events")
    for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$admin/readyz" && break; sleep 0.1; done
  done
}
stop_gateways() { kill -INT "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null || true; }
# One sender per gateway, run at once; prints the summed rate and the worst p99.
load() { # label sim-args...
  local label=$1 i=0 senders=(); shift
  for u in "${URLS[@]}"; do
    $GW sim send --json --secret bench-secret --time-scale 60 --duration "$SECS" --url "$u" "$@" >"$W/out.$i" 2>/dev/null &
    senders+=($!)
    i=$((i + 1))
  done
  wait "${senders[@]}" || true
  python3 - "$label" "$W"/out.* <<'PY'
import json, sys
outs = [json.load(open(f)) for f in sys.argv[2:]]
rate = sum(o["acked_per_s"] for o in outs)
p99 = max(o["ack_latency"]["p99_ms"] for o in outs)
bad = sum(o["requests"] - o["statuses"].get("200", 0) for o in outs)
print(f"{sys.argv[1]:<44} acked/s {rate:8.0f}  p99 {p99:8.3f} ms  non-2xx {bad}")
PY
  rm -f "$W"/out.*
}
phase() { # name n redis-lines durability
  start_gateways "$1" "$2" "$3" "$4"
  local per=$((64 / $2)); local rate=$((RATE / $2))
  load "$1: closed loop, 64 in flight over $2" --concurrency "$per"
  load "$1: open loop, $RATE/s over $2" --rate "$rate"
  stop_gateways
}
echo "== $(date -u +%FT%TZ) $(nproc) cores; ${SECS}s per phase; every gateway, Redis node, nginx and sender share the box"
phase node1-local 1 "url = \"redis://127.0.0.1:$NODE_PORT/\"" local
phase node3-local 3 "url = \"redis://127.0.0.1:$NODE_PORT/\"" local
phase cluster1-local 1 "$CLUSTER_TOML" local
phase cluster3-local 3 "$CLUSTER_TOML" local
phase node1-replicated 1 "url = \"redis://127.0.0.1:$NODE_PORT/\"" replicated
phase cluster1-replicated 1 "$CLUSTER_TOML" replicated
phase cluster3-replicated 3 "$CLUSTER_TOML" replicated
