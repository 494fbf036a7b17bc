#!/usr/bin/env bash
# The chaos suite: N events through a real gateway while it is killed three times and Redis
# once, with duplicate copies and a bot that fails and stalls. Exits non-zero if anything acked
# was lost. Loopback only, bounded in time.
#
#   bench/chaos.sh [EVENTS]        default 100000 (CI runs 5000 with PROFILE=dev)
#   PROFILE=dev|release RATE=events/s
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
PROFILE=${PROFILE:-release}
scripts/deps
if [ "$PROFILE" = release ]; then
  cargo build --release --locked --bin slackgate --example chaos 2>&1 | tail -1
  dir=${CARGO_TARGET_DIR:-target}/release
else
  cargo build --locked --bin slackgate --example chaos 2>&1 | tail -1
  dir=${CARGO_TARGET_DIR:-target}/debug
fi
RATE=${RATE:-$(( N >= 50000 ? 2000 : 500 ))}
exec "$dir/examples/chaos" --events "$N" --rate "$RATE" --gateway "$dir/slackgate"
