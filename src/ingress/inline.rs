//! Inline pass-through of slash commands and interactive payloads (DESIGN "Interactive
//! payloads"). The delivery is already recorded and held by this ingress (in the schedule zset,
//! due one lease ahead); one attempt goes to the bot now. If the bot answers within the budget,
//! its status, content type and body go back to Slack unchanged. If not, Slack gets an empty 200
//! and the attempt goes on in the background: a late 2xx answer to a slash command or block
//! action is posted to the payload's `response_url`, a failed one is retried by the workers,
//! and a late `block_suggestion` simply expires (options are useless later).
//!
//! The inline attempt and the workers never both deliver one entry: the ingress may finish it
//! only while it is still in the zset (fenced in `INLINE_FINISH`); once its due time passes the
//! promoter hands it to the workers and the ingress's word no longer counts.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::{info, info_span, warn, Instrument};

use super::answer::{Answer, Outcome as Answered, RequestKind};
use crate::attempt::{self, Attempted, InlineOutcome, ReplyTo};
use crate::clock::now_ms;
use crate::config::AppConfig;
use crate::drain::Work;
use crate::outbox::{Finish, ShardKeys, Store, StoreOp};
use crate::policy::{self, Outcome, Verdict};
use crate::shared::Shared;
use crate::slack::Kind;
use crate::upstream::{Response, Transport, UpstreamClient};

/// Everything the background half of an inline attempt needs, owned.
pub struct InlineJob {
    pub app: Arc<AppConfig>,
    pub shared: Arc<Shared>,
    pub keys: Arc<ShardKeys>,
    pub store: Store,
    pub client: Arc<UpstreamClient>,
    pub id: String,
    pub kind: Kind,
    pub detail: String,
    pub response_url: Option<String>,
    /// Where a late reply may go (`[server] response_url_hosts`).
    pub response_url_hosts: Arc<[String]>,
    pub path: String,
    pub content_type: String,
    pub body: Bytes,
    pub received_ms: u64,
}

/// Run the attempt; answer Slack with the bot's own answer if it comes within `budget`.
pub async fn run(job: InlineJob, budget: Duration) -> Answer {
    let kind = RequestKind::from(job.kind);
    let span = info_span!("inline", app = %job.app.name, delivery = %job.id, detail = %job.detail);
    let (tx, mut rx) = oneshot::channel();
    let in_flight = job.shared.drain.enter(Work::Attempt);
    tokio::spawn(
        async move {
            attempt(job, tx).await;
            drop(in_flight);
        }
        .instrument(span),
    );
    let answer = match tokio::time::timeout(budget, &mut rx).await {
        Ok(reply) => reply.ok().flatten(),
        Err(_) => {
            // Closing first means the attempt either got its answer in before the budget ran
            // out (and it is read here) or learns it is late (and posts it to response_url).
            rx.close();
            rx.try_recv().ok().flatten()
        }
    };
    match answer {
        Some(r) => Answer {
            status: r.status,
            content_type: r.content_type.map(Cow::Owned).unwrap_or(Cow::Borrowed("text/plain")),
            body: r.body,
            kind,
            outcome: Answered::Answered,
        },
        None => Answer::empty(200, kind, Answered::Accepted),
    }
}

async fn attempt(job: InlineJob, tx: oneshot::Sender<Option<Response>>) {
    let d = attempt::Delivery {
        id: &job.id,
        number: 1,
        path: &job.path,
        content_type: &job.content_type,
        body: job.body.clone(),
    };
    let transport = Transport::of(&job.app.upstream, &job.client, &*job.shared.bots);
    let attempted = attempt::send_once(transport, &job.shared.metrics, &job.app, d).await;
    let suggestion = job.detail == "block_suggestion";
    let (finish, outcome) = match &attempted.verdict {
        // Options are useless later: a failed block_suggestion is not retried.
        Verdict::Retry { .. } if suggestion => (Finish::Done, Outcome::Expired),
        v => policy::step(&job.app.delivery, v, 0, job.received_ms, now_ms(), rand::random()),
    };
    if !finish_inline(&job, finish, outcome).await {
        let _ = tx.send(None);
        return;
    }
    attempted.audit("inline attempt", 1, outcome, 0);
    attempted.remember(&job.shared, (&job.app.name, &job.id, "inline"), 1, outcome, 0);
    let pass = match attempted.verdict {
        Verdict::Delivered | Verdict::Final { .. } => attempted.result.as_ref().ok().cloned(),
        Verdict::Retry { .. } => None,
    };
    if tx.send(pass).is_ok() {
        return count(&job, InlineOutcome::InTime);
    }
    if suggestion {
        count(&job, InlineOutcome::Expired);
        return info!("block_suggestion answered too late for Slack; expired");
    }
    count(&job, InlineOutcome::Late);
    late_reply(&job, &attempted).await;
}

/// Record the outcome through the inline fence; `false` when the workers own the delivery now.
async fn finish_inline(job: &InlineJob, finish: Finish<'_>, outcome: Outcome) -> bool {
    let app = &job.app.name;
    let m = &job.shared.metrics;
    match job.store.inline_finish(&job.keys, &job.id, finish).await {
        Ok(true) => m.deliveries.with_label_values(&[app, outcome.as_label()]).inc(),
        Ok(false) => {
            m.fence_rejections.with_label_values(&[app]).inc();
            warn!(outcome = outcome.as_label(), "the workers own this delivery now; result discarded");
            return false;
        }
        Err(e) => {
            m.store_errors.with_label_values(&[app, StoreOp::InlineFinish.as_label()]).inc();
            warn!(error = %e, "cannot record the outcome; the workers will retry it after the lease");
        }
    }
    true
}

fn count(job: &InlineJob, outcome: InlineOutcome) {
    let labels = [job.app.name.as_str(), job.kind.as_str(), outcome.as_label()];
    job.shared.metrics.inline.with_label_values(&labels).inc();
}

async fn late_reply(job: &InlineJob, attempted: &Attempted) {
    let (Ok(resp), Some(url)) = (&attempted.result, job.response_url.as_deref()) else { return };
    let to = ReplyTo { kind: job.kind, detail: &job.detail, response_url: url, allowed_hosts: &job.response_url_hosts };
    attempt::late_reply(&job.client, &job.shared.metrics, &job.app.name, &to, resp).await;
}
