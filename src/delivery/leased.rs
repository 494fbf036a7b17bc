//! One attempt for one leased entry, start to fenced finish: paused, stale or routed, sent
//! while the lease is kept alive, concluded through the fence.

use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, warn};

use super::held::Held;
use super::routing::{copy_to_shadow, expire_paused, note_message, park, route_of, stale_reply, still_paused, Place};
use super::Shard;
use crate::attempt::{self, InlineOutcome, Path, ReplyTo};
use crate::config::{Chosen, Upstream};
use crate::outbox::{Finish, Lease, Stored};
use crate::pauses::Pause;
use crate::policy::Outcome;
use crate::slack::Kind;
use crate::upstream::Transport;

/// With `upstream = "socket"` and no bot connected here, look again this often.
pub(super) const NO_BOT_POLL: Duration = Duration::from_millis(100);

/// One attempt for one leased entry, start to fenced finish. Its attempt slot (`permit`) is
/// given back once the bot has answered, for a slot of the recording ones: the finish waits on
/// Redis, not on the bot, and the next entry need not wait for it.
pub(super) async fn run_attempt(s: &Shard, lease: Lease, stored: Box<Stored>, permit: OwnedSemaphorePermit) {
    if stored.kind == Kind::Interactivity && stored.detail == "block_suggestion" {
        // Its inline attempt failed or its holder died: options are useless by now.
        return expire(s, &lease, &stored).await;
    }
    let number = stored.attempt_number(lease.token);
    if let Some(records) = &s.conversations {
        note_message(records, &stored, &lease.delivery, number, &s.app.name).await;
    }
    let pauses = s.shared.pauses.snapshot();
    let place = Place::of(&stored, s.app.routes_read_place() || pauses.of(&s.app.name).iter().any(Pause::reads_place));
    if pauses.covering(&s.app.name, place.team.as_deref(), place.channel.as_deref()).is_some() {
        if let Some(pause) = still_paused(s, &place).await {
            return park(s, &lease, &stored, &place, &pause).await;
        }
    }
    if stale_reply(&stored) {
        return expire_paused(s, &lease, &stored).await;
    }
    let route = route_of(&s.app, &stored, &place);
    if stored.retries == 0 && stored.reruns == 0 {
        copy_to_shadow(s, &lease, &stored, &place);
    }
    let slot = tokio::select! {
        slot = s.route_slot(&route) => slot,
        _ = keep_lease(s, &lease) => return,
    };
    tokio::select! {
        _ = s.bot_back(route.upstream, route.delivery.timeout) => {}
        _ = keep_lease(s, &lease) => return,
    }
    let d = attempt::Delivery {
        id: &lease.delivery,
        number,
        run: stored.reruns + 1,
        retry: stored.slack_retry(lease.token),
        path: &stored.path,
        content_type: &stored.content_type,
        body: stored.body.clone(),
        route,
    };
    let attempted = tokio::select! {
        a = attempt::send_once(s.transport_to(route.upstream), &s.shared, &s.app, d) => a,
        _ = keep_lease(s, &lease) => return,
    };
    drop(slot);
    if let Some(reach) = &s.reach {
        reach.note(attempted.result.as_ref().map(|r| r.status));
    }
    let socket = attempted.result.as_ref().ok().and_then(|r| r.socket);
    let recording = tokio::select! {
        r = s.recording.clone().acquire_owned() => r.expect("semaphore is never closed"),
        _ = keep_lease(s, &lease) => return,
    };
    drop(permit);
    let fence = Held { s, lease: &lease, stored: &stored, socket };
    attempt::conclude(attempted, &fence, context(s, &lease, &stored, number, route)).await;
    drop(recording);
}

async fn expire(s: &Shard, lease: &Lease, stored: &Stored) {
    if let Ok(true) = s.store.finish(&s.keys, &s.consumer, lease, Finish::Done).await {
        let m = &s.shared.metrics;
        m.inline.with_label_values(&[&s.app.name, stored.kind.as_str(), InlineOutcome::Expired.as_label()]).inc();
        m.deliveries.with_label_values(&[&s.app.name, Outcome::Expired.as_label()]).inc();
    }
}

/// How a worker's attempt is concluded: `number` on `lease`, the delivery `stored`.
fn context<'a>(
    s: &'a Shard,
    lease: &'a Lease,
    stored: &'a Stored,
    number: u64,
    route: Chosen<'a>,
) -> attempt::Context<'a> {
    attempt::Context {
        shared: &s.shared,
        client: &s.client,
        app: &s.app,
        delivery: &lease.delivery,
        number,
        run: stored.reruns + 1,
        retries: stored.retries,
        received_ms: stored.received_ms,
        paused_ms: stored.paused_ms,
        route,
        reply_to: ReplyTo {
            kind: stored.kind,
            detail: &stored.detail,
            response_url: &stored.response_url,
            allowed_hosts: &s.response_url_hosts,
        },
        path: Path::Worker { by: &s.consumer },
    }
}

/// Extend the lease every third of its length while an attempt runs. Returns only when the
/// lease is lost, which abandons the attempt: its result could not be recorded anyway.
async fn keep_lease(s: &Shard, lease: &Lease) {
    let every = s.app.delivery.lease / 3;
    loop {
        tokio::time::sleep(every).await;
        match s.store.extend(&s.keys, &s.consumer, lease).await {
            Ok(true) => {}
            Ok(false) => {
                s.shared.metrics.fence_rejections.with_label_values(&[&s.app.name]).inc();
                return warn!("lease lost during the attempt; abandoning it");
            }
            Err(e) => debug!(error = %e, "lease extension failed; will try again"),
        }
    }
}

impl Shard {
    /// How an attempt reaches `upstream` (the app's own, or an entry's).
    pub(super) fn transport_to<'a>(&'a self, upstream: &Upstream) -> Transport<'a> {
        Transport::of(upstream, &self.client, &*self.shared.bots)
    }

    /// A Socket Mode bot whose sockets here all closed since the entry was read (a bot that
    /// restarts, a run lost with it put back): wait for it to reconnect, up to `within`, rather
    /// than count an attempt no bot saw (the bot would get the delivery as Slack's retry).
    async fn bot_back(&self, upstream: &Upstream, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.transport_to(upstream).reaches(&self.app.name) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(NO_BOT_POLL).await;
        }
    }

    /// A slot of the entry's own `max_in_flight`, when it sets one.
    async fn route_slot(&self, route: &Chosen<'_>) -> Option<OwnedSemaphorePermit> {
        let slots = route.entry.and_then(|i| self.route_slots.get(i)).and_then(Option::as_ref)?;
        Some(slots.clone().acquire_owned().await.expect("semaphore is never closed"))
    }
}
