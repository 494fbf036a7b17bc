# Shared by the bench scripts (sourced): a free loopback port, a field of a JSON document on
# stdin, and nginx `return 200` standing in for a fast bot.

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A free loopback port below the kernel's ephemeral range, for a listener that starts after a
# client has long been trying to reach it (a bot that comes up late): thousands of refused
# connects to an ephemeral port can land one on the port itself, a socket connected to itself,
# and the listener then cannot bind it.
low_port() {
  python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
while True:
    p = random.randrange(10000, low)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass'
}

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# nginx_bot DIR PORT: nginx answering 200 to everything on 127.0.0.1:PORT, in the background,
# its files in DIR (its pid in DIR/nginx.pid, for the caller's trap to kill).
nginx_bot() {
  command -v nginx >/dev/null || apt-get install -y -qq nginx >/dev/null
  cat >"$1/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/nginx.err;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1;
  server { listen 127.0.0.1:$2; keepalive_requests 1000000; location / { return 200; } }
}
NGINX
  nginx -c "$1/nginx.conf" &
}

# bench_gateway BINARY NAME LISTEN ADMIN REDIS_PORT UPSTREAM_PORT DELIVERY [APP_LINES]: a gateway
# of one app ("bench", secret $BENCH_SECRET, key prefix NAME) in the background, its files under
# $WORK, APP_LINES (e.g. `turns = { order = "queue" }`) added to its [[app]]; sets GW_PID and
# returns once its /readyz answers. SERVER_LINES adds lines to its [server].
bench_gateway() {
  local gw=$1 name=$2 listen=$3 admin=$4 redis=$5 upstream=$6 delivery=$7 app_lines=${8:-}
  cat >"$WORK/$name.toml" <<TOML
[server]
listen = "127.0.0.1:$listen"
admin_listen = "127.0.0.1:$admin"
${SERVER_LINES:-}
[redis]
url = "redis://127.0.0.1:$redis/"
key_prefix = "$name"
[[app]]
name = "bench"
signing_secret = "\${BENCH_SECRET}"
upstream = "http://127.0.0.1:$upstream"
delivery = $delivery
$app_lines
TOML
  RUST_LOG=warn "$gw" run --config "$WORK/$name.toml" --data-dir "$WORK/$name" >"$WORK/$name.log" 2>&1 &
  GW_PID=$!
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$admin/readyz" && return; sleep 0.1; done
  echo "gateway $name not ready" >&2
  return 1
}

# app_lines SIDE BOT_PORT: $AB_A_LINES (SIDE a) or $AB_B_LINES (b), @BOT@ made BOT_PORT and
# @EGRESS@ a free port.
app_lines() {
  local lines
  case $1 in a) lines=${AB_A_LINES:-} ;; *) lines=${AB_B_LINES:-} ;; esac
  lines=${lines//@BOT@/$2}
  echo "${lines//@EGRESS@/$(port)}"
}

# loadgen_bin: the path of ../shared/loadgen's binary (open loop at a fixed rate over kept-alive
# connections, one request in flight on each, pre-signed requests from a TSV file; see its
# README), built under target/ on first use. It is built from a copy whose hdrhistogram has no
# default features, with this repository's Cargo.lock, so that it builds offline from the crates
# the gateway already uses (else online). LOADGEN_SRC overrides where its source is.
loadgen_bin() {
  local src=${LOADGEN_SRC:-../shared/loadgen} copy=target/loadgen-src bin=target/loadgen/release/loadgen
  if [ ! -x "$bin" ] || [ "$src/src/main.rs" -nt "$bin" ]; then
    [ -f "$src/src/main.rs" ] || { echo "no loadgen source at $src (set LOADGEN_SRC)" >&2; return 1; }
    rm -rf "$copy" && mkdir -p "$copy" && cp -r "$src/src" "$copy/"
    sed 's/^hdrhistogram = "7"$/hdrhistogram = { version = "7", default-features = false }/' \
      "$src/Cargo.toml" >"$copy/Cargo.toml"
    printf '\n[workspace]\n' >>"$copy/Cargo.toml"
    cp Cargo.lock "$copy/"
    cargo build --release --offline --quiet --manifest-path "$copy/Cargo.toml" --target-dir target/loadgen >&2 ||
      cargo build --release --quiet --manifest-path "$copy/Cargo.toml" --target-dir target/loadgen >&2
  fi
  realpath "$bin"
}
