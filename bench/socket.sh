#!/usr/bin/env bash
# Socket Mode against HTTP on the same box: envelopes acked per second through the gateway's
# sockets to a fake Slack (tests/it/utils/fake_socket.rs) against signed HTTP deliveries acked
# per second, 32 in flight each, in one run (release build, real Redis, a fast bot behind).
# Usage: bench/socket.sh [events per side, default 4000]
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_EVENTS="${1:-4000}" cargo test --release --test it -- --ignored --nocapture \
  socket_mode::bench_envelopes_through_the_socket_against_http 2>&1 | grep -E "^socket mode:|test result"
