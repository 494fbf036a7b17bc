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
use tracing::{info_span, Instrument};

use super::answer::{Answer, Outcome as Answered, RequestKind};
use crate::attempt::{self, Path, ReplyTo};
use crate::config::{AppConfig, Chosen, Facts};
use crate::drain::Work;
use crate::outbox::{Finish, ShardKeys, Store, StoreError};
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
    /// Where it came from, as `upstreams` entries may match it.
    pub team: Option<String>,
    pub channel: Option<String>,
    pub response_url: Option<String>,
    /// Where a late reply may go (`[server] response_url_hosts`).
    pub response_url_hosts: Arc<[String]>,
    pub path: String,
    pub content_type: String,
    pub body: Bytes,
    pub received_ms: u64,
    /// Whether the app's shadow may take a copy (it has one, and the egress is on).
    pub shadow: bool,
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

async fn attempt(job: InlineJob, slack: oneshot::Sender<Option<Response>>) {
    let route = job.route();
    let d = attempt::Delivery {
        id: &job.id,
        number: 1,
        run: 1,
        retry: 0,
        path: &job.path,
        content_type: &job.content_type,
        body: job.body.clone(),
        route,
    };
    let transport = Transport::of(route.upstream, &job.client, &*job.shared.bots);
    let attempted = attempt::send_once(transport, &job.shared, &job.app, d).await;
    attempt::conclude(attempted, &job, context(&job, route, slack)).await;
    job.copy_to_shadow();
}

impl InlineJob {
    /// The shadow's copy, offered once the live bot's inline attempt is over (the shadow gets
    /// inline payloads in the background; its answer never reaches Slack).
    fn copy_to_shadow(&self) {
        if !self.shadow {
            return;
        }
        attempt::ShadowCopy {
            app: &self.app,
            shared: &self.shared,
            id: &self.id,
            body: &self.body,
            content_type: &self.content_type,
            path: &self.path,
            kind: self.kind,
            detail: &self.detail,
            team: self.team.as_deref(),
            channel: self.channel.as_deref(),
            received_ms: self.received_ms,
            conversation: String::new(),
        }
        .offer();
    }

    /// The bot it goes to: the first entry of `upstreams` that matches, else the app's own.
    fn route(&self) -> Chosen<'_> {
        let (team, channel) = (self.team.as_deref(), self.channel.as_deref());
        self.app.route(&Facts { kind: self.kind, detail: &self.detail, team, channel })
    }
}

/// How the inline attempt is concluded: the first, with Slack's request waiting on `slack`.
fn context<'a>(
    job: &'a InlineJob,
    route: Chosen<'a>,
    slack: oneshot::Sender<Option<Response>>,
) -> attempt::Context<'a> {
    attempt::Context {
        shared: &job.shared,
        client: &job.client,
        app: &job.app,
        delivery: &job.id,
        number: 1,
        run: 1,
        retries: 0,
        received_ms: job.received_ms,
        paused_ms: 0,
        route,
        reply_to: ReplyTo {
            kind: job.kind,
            detail: &job.detail,
            response_url: job.response_url.as_deref().unwrap_or(""),
            allowed_hosts: &job.response_url_hosts,
        },
        path: Path::Inline { slack },
    }
}

/// The inline fence: the ingress's word counts only while the delivery is still in the
/// schedule (`INLINE_FINISH`), before the promoter hands it to the workers.
impl attempt::Fence for InlineJob {
    async fn finish(&self, how: Finish<'static>) -> Result<bool, StoreError> {
        self.store.inline_finish(&self.keys, &self.id, how).await
    }
}
