//! The copier of this process: it takes the copies the workers and the ingress queued for
//! apps' shadow bots (`queue::shadow`) and records each on its app's shadow lane — its
//! `response_url` pointed at the gateway, its receipt absorbing a copy made before, dropped
//! (counted) past the shadow's `max_backlog`. The live bot comes first: while the ack path
//! is pressed or the live workers are busy, the copier waits (its queue drops what does not
//! fit), as the lanes' readers do.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::attempt::egress_base;
use crate::config::{shadow_lane_name, Config};
use crate::live::Live;
use crate::outbox::shadow::{Copied, Copy};
use crate::outbox::{ShardKeys, Store};
use crate::queue::shadow::Copy as Queued;
use crate::shared::Shared;

/// Copies made at once, at most.
const BATCH: usize = 16;
/// While the ack path is pressed, look again this often.
const PRESSED_POLL: Duration = Duration::from_millis(20);

/// Run the copier until `stop` changes (the process stops).
pub(super) async fn copier(live: Arc<Live>, shared: Arc<Shared>, store: Store, mut stop: watch::Receiver<bool>) {
    let Some(mut rx) = shared.shadow.take_receiver() else { return };
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => if n == 0 { return },
            _ = stop.changed() => return,
        }
        if !yield_to_acks(&shared, &mut stop).await {
            return;
        }
        let config = live.get().config.clone();
        let mut copies = JoinSet::new();
        for q in batch.drain(..) {
            copies.spawn(copy_one(config.clone(), shared.clone(), store.clone(), q));
        }
        while copies.join_next().await.is_some() {}
    }
}

/// Wait while the ack path is pressed; `false` when told to stop meanwhile.
pub(super) async fn yield_to_acks(shared: &Shared, stop: &mut watch::Receiver<bool>) -> bool {
    while pressed(shared) {
        tokio::select! {
            _ = tokio::time::sleep(PRESSED_POLL) => {}
            _ = stop.changed() => return false,
        }
    }
    true
}

/// Whether the live side wants the machine: the ack path is pressed at all (the live
/// workers slow down then), or the live workers had work for every slot a moment ago. The
/// shadow's work waits meanwhile.
pub(super) fn pressed(shared: &Shared) -> bool {
    shared.pressure.allowed(2) < 2 || shared.live_is_busy()
}

async fn copy_one(config: Arc<Config>, shared: Arc<Shared>, store: Store, q: Queued) {
    let Some(app) = config.apps.iter().find(|a| a.name == q.app) else { return };
    let (Some(shadow), Some(egress)) = (&app.shadow, &config.egress.listen) else { return };
    let shard: u16 = crate::ops::shard_of(&q.id).unwrap_or(0);
    let lane = ShardKeys::new(&config.redis.key_prefix, &shadow_lane_name(&app.name), shard);
    let hook = format!("{}/shadow/response/{}", egress_base(egress), q.id);
    let body = crate::slack::with_response_url(&q.body, &hook).map_or(q.body.clone(), Bytes::from);
    let copy = Copy {
        id: &q.id,
        body: &body,
        content_type: &q.content_type,
        path: &q.path,
        kind: q.kind,
        detail: &q.detail,
        received_ms: q.received_ms,
        conversation: &q.conversation,
        ttl: app.receipt_ttl,
    };
    let per_shard = (shadow.max_backlog / u64::from(config.redis.shards.max(1))).max(1);
    let outcome = match store.copy_to_shadow(&lane, &copy, per_shard).await {
        Ok(c) => c,
        Err(e) => {
            warn!(app = %app.name, delivery = %q.id, error = %e, "cannot copy a delivery to the shadow");
            shared.metrics.routes.shadow_copies.with_label_values(&[&app.name, "failed"]).inc();
            return;
        }
    };
    shared.metrics.routes.shadow_copies.with_label_values(&[&app.name, outcome.as_label()]).inc();
    if matches!(outcome, Copied::Copied | Copied::Dropped) {
        let label = outcome.as_label();
        shared.history.step(&app.name, &q.id, || crate::history::What::Shadow { outcome: label });
    }
    if outcome == Copied::Dropped {
        info!(target: "slackgate::audit", app = %app.name, delivery = %q.id, "shadow copy dropped: its lane is full");
    }
}
