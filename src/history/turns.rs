//! A turn that ended, as both sides see it: the delivery workers (a reply, a timeout, the
//! housekeeping) and the egress (a write that ends it) count it, audit it and note the
//! deliveries it superseded in their history — the same way, from here. The turn's records
//! themselves are the outbox's (`outbox::Turns`).

use tracing::{debug, info};

use crate::outbox::{TurnEnd, TurnEnded};
use crate::shared::Shared;

/// Count and audit a turn of `app` that ended: the delivery workers' and the egress's alike.
pub fn ended(shared: &Shared, app: &str, ended: &TurnEnded) {
    let m = &shared.metrics.turns;
    m.ended.with_label_values(&[app, ended.how.as_label()]).inc();
    m.duration_seconds.with_label_values(&[app]).observe(ended.lasted.as_secs_f64());
    m.superseded.with_label_values(&[app]).inc_by(ended.superseded.len() as u64);
    let next = ended.next.as_deref().unwrap_or("");
    let (how, secs) = (ended.how.as_label(), ended.lasted.as_secs_f64());
    // One per delivery of an app with turns: audited only when it timed out (the metrics
    // count them all).
    if ended.how == TurnEnd::Timeout {
        info!(target: "slackgate::audit", app, ended = how, secs, next, "turn ended");
    } else {
        debug!(target: "slackgate::audit", app, ended = how, secs, next, "turn ended");
    }
    for d in &ended.superseded {
        info!(target: "slackgate::audit", app, delivery = %d, by = next, "turn superseded");
        shared.history.step(app, d, || super::What::Superseded { by: next.to_string() });
    }
}
