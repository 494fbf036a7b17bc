//! What a worker decides about a leased delivery before its attempt: where it came from (its
//! team and channel, read only when a route or a pause asks), which bot it goes to
//! (`upstreams`), whether a pause holds it (then it waits off the stream), whether a pause held
//! a command past its `response_url`'s life, the shadow's copy, and which message it carries
//! (for the egress's attribution).

use std::time::Duration;

use tracing::{debug, info, warn};

use super::held::Held;
use super::Shard;
use crate::attempt;
use crate::clock::now_ms;
use crate::config::{AppConfig, Chosen, Facts};
use crate::outbox::{Conversations, Finish, Kept, Lease, StoreOp, Stored};
use crate::pauses::Pause;
use crate::policy::Outcome;
use crate::slack::{Conversation, Kind};

/// A `response_url` takes replies this long after its command or action.
const RESPONSE_URL_LIFE: Duration = Duration::from_secs(30 * 60);

/// Where a stored delivery came from (its team and channel), read only when an entry of
/// `upstreams` or a pause asks for them: from the kept conversation, else the body.
#[derive(Default)]
pub(super) struct Place {
    pub team: Option<String>,
    pub channel: Option<String>,
}

impl Place {
    pub fn of(stored: &Stored, needed: bool) -> Place {
        match (&stored.conversation, needed) {
            (_, false) => Place::default(),
            (Kept::Some(c), true) => Place { team: Some(c.team.clone()), channel: Some(c.channel.clone()) },
            (_, true) => match crate::slack::classify(stored.content_type.as_bytes(), &stored.body) {
                Ok(crate::slack::Request::Delivery(d)) => Place { team: d.team, channel: d.channel },
                _ => Place::default(),
            },
        }
    }

    /// As a paused delivery's record keeps it: `team\tchannel`, each '' when unknown.
    fn kept(&self) -> String {
        format!("{}\t{}", self.team.as_deref().unwrap_or(""), self.channel.as_deref().unwrap_or(""))
    }
}

/// The bot a stored delivery from `place` goes to: the first entry of `upstreams` that
/// matches it, else the app's own.
pub(super) fn route_of<'a>(app: &'a AppConfig, stored: &Stored, place: &Place) -> Chosen<'a> {
    let (team, channel) = (place.team.as_deref(), place.channel.as_deref());
    app.route(&Facts { kind: stored.kind, detail: &stored.detail, team, channel })
}

/// The pause that holds a delivery from `place`, as Redis says now: this process's copy may be
/// up to one refresh old, and a delivery put to wait for a pause that just ended would come
/// back after the ones released with it. (Read only while a pause seems to hold it.)
pub(super) async fn still_paused(s: &Shard, place: &Place) -> Option<Pause> {
    let now = match s.store.pauses(&s.prefix).await {
        Ok(now) => now,
        // Redis cannot say: the copy decides (the delivery waits, or is sent, as it says).
        Err(_) => {
            return s
                .shared
                .pauses
                .snapshot()
                .covering(&s.app.name, place.team.as_deref(), place.channel.as_deref())
                .cloned()
        }
    };
    s.shared.pauses.set(now);
    s.shared.pauses.snapshot().covering(&s.app.name, place.team.as_deref(), place.channel.as_deref()).cloned()
}

/// The app's shadow gets a copy of the delivery (when it takes it), made off this attempt's
/// path: every round of first attempts offers it (a copy made before is absorbed).
pub(super) fn copy_to_shadow(s: &Shard, lease: &Lease, stored: &Stored, place: &Place) {
    if s.app.shadow.is_none() || s.egress.is_none() {
        return;
    }
    let conversation = match &stored.conversation {
        Kept::Some(c) => c.encode(),
        _ => String::new(),
    };
    attempt::ShadowCopy {
        app: &s.app,
        shared: &s.shared,
        id: &lease.delivery,
        body: &stored.body,
        content_type: &stored.content_type,
        path: &stored.path,
        kind: stored.kind,
        detail: &stored.detail,
        team: place.team.as_deref(),
        channel: place.channel.as_deref(),
        received_ms: stored.received_ms,
        conversation,
    }
    .offer();
}

/// Put a delivery a pause holds to wait until it ends (off the stream, no attempt counted).
pub(super) async fn park(s: &Shard, lease: &Lease, stored: &Stored, place: &Place, pause: &Pause) {
    let kept = place.kept();
    let fence = Held { s, lease, stored, socket: None };
    match fence.finish_as(Finish::Pause { now_ms: now_ms(), place: &kept }).await {
        Ok(true) => {
            s.shared.metrics.routes.paused.with_label_values(&[&s.app.name]).inc();
            let scope = pause.describe();
            info!(target: "slackgate::audit", app = %s.app.name, delivery = %lease.delivery, pause = %scope, "paused");
            s.shared.history.step(&s.app.name, &lease.delivery, || crate::history::What::Paused { pause: scope });
        }
        Ok(false) => debug!(delivery = %lease.delivery, "lease lost before the pause; the new holder decides"),
        Err(e) => {
            // Its lease runs out and it is read again: still paused, or sent.
            s.store_error(StoreOp::Finish);
            warn!(app = %s.app.name, error = %e, "cannot put a paused delivery to wait");
        }
    }
}

/// A command or action a pause held past [`RESPONSE_URL_LIFE`]: its `response_url` is dead,
/// so whatever the bot answered could reach no one.
pub(super) fn stale_reply(stored: &Stored) -> bool {
    stored.paused_ms > 0
        && crate::slack::replies_late(stored.kind, &stored.detail)
        && now_ms().saturating_sub(stored.received_ms) > RESPONSE_URL_LIFE.as_millis() as u64
}

/// Park a delivery [`stale_reply`] found as a dead letter (visible, replayable), unsent.
pub(super) async fn expire_paused(s: &Shard, lease: &Lease, stored: &Stored) {
    let error = "expired while paused: its response_url is older than 30 minutes";
    let how = Finish::Dead { now_ms: now_ms(), status: None, error, final_: false };
    if let Ok(true) = (Held { s, lease, stored, socket: None }).finish_as(how).await {
        let m = &s.shared.metrics;
        m.deliveries.with_label_values(&[&s.app.name, Outcome::Expired.as_label()]).inc();
        info!(target: "slackgate::audit", app = %s.app.name, delivery = %lease.delivery, error, "expired");
    }
}

/// Say which message this attempt carries (the egress reads it to attribute replies): the
/// conversation kept with the delivery when it was recorded. Only an entry recorded by a version that kept none (an
/// upgrade, a backlog) has its body read for it, once per attempt; one whose body says nothing
/// is unattributed (its replies are posted), never dropped.
pub(super) async fn note_message(records: &Conversations, stored: &Stored, delivery: &str, run: u64, app: &str) {
    let conversation = match &stored.conversation {
        Kept::Some(c) => Some(c.clone()),
        Kept::None => None,
        Kept::Unknown => recorded_before(stored),
    };
    let Some(c) = conversation else { return };
    if let Err(e) = records.delivering(&c, delivery, run, app).await {
        // Best effort: an unrecorded message only means its replies are not attributed (posted).
        debug!(error = %e, "cannot record the delivered message's conversation");
    }
}

/// The conversation of an entry recorded without one, from its body.
fn recorded_before(stored: &Stored) -> Option<Conversation> {
    if stored.kind != Kind::Event {
        return None;
    }
    match crate::slack::classify(stored.content_type.as_bytes(), &stored.body) {
        Ok(crate::slack::Request::Delivery(d)) => crate::slack::conversation_of(&d),
        _ => None,
    }
}
