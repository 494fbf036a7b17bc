#!/usr/bin/env bash
# The failover runs of the suite (tests/it/cluster.rs, tests/it/sentinel.rs), longer: a Redis
# Cluster of 3 primaries + 3 replicas whose shard-0 primary is killed while its replica is cut
# off, once with `durability = "local"` (the acked events lost are counted) and once with
# `"replicated"` (none may be), and a Sentinel set whose primary is killed mid-run. EVENTS
# events per cluster run (the suite uses 60). Loopback only, bounded in time.
#
#   bench/failover.sh [EVENTS]        default 600
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps --test
SG_FAILOVER_EVENTS=${1:-600} cargo test --release --locked --test it -- \
  cluster::with_ sentinel:: --nocapture --test-threads 1 2>&1 | grep -E "^test |durability =|test result|panicked"
