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

use super::Answer;
use crate::config::AppConfig;
use crate::delivery::{now_ms, policy, policy::Verdict};
use crate::metrics::METRICS;
use crate::outbox::{Finish, ShardKeys, Store};
use crate::slack::{self, Kind};
use crate::upstream::{Outgoing, Response, UpstreamClient};

/// Everything the background half of an inline attempt needs, owned.
pub struct InlineJob {
    pub app: Arc<AppConfig>,
    pub keys: ShardKeys,
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
    let kind = job.kind.as_str();
    let span = info_span!("inline", app = %job.app.name, delivery = %job.id, detail = %job.detail);
    let (tx, mut rx) = oneshot::channel();
    let in_flight = crate::drain::ATTEMPTS.enter();
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
            outcome: "answered",
        },
        None => Answer::empty(200, kind, "accepted"),
    }
}

async fn attempt(job: InlineJob, tx: oneshot::Sender<Option<Response>>) {
    let app = &job.app.name;
    let label = job.kind.as_str();
    let out = Outgoing {
        upstream: &job.app.upstream,
        path: &job.path,
        content_type: &job.content_type,
        body: job.body.clone(),
        secret: &job.app.secrets[0],
        delivery_id: &job.id,
        attempt: 1,
    };
    let started = std::time::Instant::now();
    let result = job.client.send(out, job.app.delivery.timeout).await;
    crate::metrics::attempt_observed(app, &result, started.elapsed());
    let suggestion = job.detail == "block_suggestion";
    let verdict = policy::judge(&result);
    let (finish, outcome) = match &verdict {
        // Options are useless later: a failed block_suggestion is not retried.
        Verdict::Retry { .. } if suggestion => (Finish::Done, "expired"),
        _ => policy::step(&job.app.delivery, &verdict, 0, job.received_ms, now_ms()),
    };
    match job.store.inline_finish(&job.keys, &job.id, finish).await {
        Ok(true) => METRICS.deliveries.with_label_values(&[app, outcome]).inc(),
        Ok(false) => {
            METRICS.fence_rejections.with_label_values(&[app]).inc();
            warn!(outcome, "the workers own this delivery now; result discarded");
            let _ = tx.send(None);
            return;
        }
        Err(e) => {
            METRICS.store_errors.with_label_values(&[app, "inline_finish"]).inc();
            warn!(error = %e, "cannot record the outcome; the workers will retry it after the lease");
        }
    }
    let (status, error) = match &result {
        Ok(r) => (r.status, String::new()),
        Err(e) => (0, e.to_string()),
    };
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    info!(target: "slackgate::audit", attempt = 1, outcome, status, error = %error, latency_ms, "inline attempt");
    let pass = match verdict {
        Verdict::Delivered | Verdict::Final { .. } => result.ok(),
        Verdict::Retry { .. } => None,
    };
    let late = match tx.send(pass) {
        Ok(()) => {
            METRICS.inline.with_label_values(&[app, label, "in_time"]).inc();
            return;
        }
        Err(late) => late,
    };
    if suggestion {
        METRICS.inline.with_label_values(&[app, label, "expired"]).inc();
        return info!("block_suggestion answered too late for Slack; expired");
    }
    METRICS.inline.with_label_values(&[app, label, "late"]).inc();
    let (Some(resp), Some(url)) = (late, job.response_url.as_deref()) else { return };
    if (200..300).contains(&resp.status) && slack::replies_late(job.kind, &job.detail) {
        let allowed = &job.response_url_hosts;
        crate::upstream::post_late_reply(&job.client, app, url, allowed, resp.content_type.as_deref(), &resp.body)
            .await;
    }
}
