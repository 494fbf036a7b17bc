#!/usr/bin/env bash
# History calls per uncertain post (issue 21): a burst of 20 uncertain chat.postMessage calls in a
# row against the suite's fake Web API, taught Slack's tiers — once with the posts' own message
# events coming back (tier 1 for conversations.history: one call a minute), once without (posts
# that never landed, tier 3) — on this checkout and on BASE (default: the commit before issue 21),
# in one sitting. Prints each side's BURST lines: history calls, posts settled, unknown, posted.
#
#   bench/uncertain.sh [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-64fc5ca}
wt=$(mktemp -d /tmp/sg-uncertain-XXXX)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$wt" "$base"
# The same scenario and fake on both sides: this checkout's test and fake (it only speaks the
# config keys both sides know).
cp tests/it/evidence.rs "$wt/tests/it/evidence.rs"
cp tests/it/utils/fake_slack.rs "$wt/tests/it/utils/fake_slack.rs"
grep -q '^mod evidence;' "$wt/tests/it/main.rs" || sed -i 's/^mod egress_limits;/mod egress_limits;\nmod evidence;/' "$wt/tests/it/main.rs"
run() {
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo test -q --test it evidence::a_burst -- --nocapture 2>&1 | grep '^BURST' || true)
}
echo "== base $base"
run "$wt" "${CARGO_TARGET_DIR:-$PWD/target}/uncertain-base"
echo "== this checkout $(git rev-parse --short HEAD)"
run "$PWD" "${CARGO_TARGET_DIR:-$PWD/target}"
