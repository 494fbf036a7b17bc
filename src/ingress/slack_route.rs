//! The decision for one request on a Slack route: method, signature (cheap checks before the
//! body is read), body under its cap and deadline, classification, then the handshake answer or
//! the record (and for commands and interactions the inline attempt).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pingora::proxy::Session;
use tracing::{debug, warn};

use tokio::time::Instant;

use super::admission::Shed;
use super::answer::{names, read_body, single_header, Answer, BodyError, Outcome, RequestKind};
use super::budget::Held;
use super::plan::{self, Verified};
use super::shard_gate::Ask;
use super::{inline, Audit, Ingress};
use crate::clock::{now_ms, now_secs};
use crate::config::AppConfig;
use crate::outbox::{Change, Channel, NewDelivery, Recorded, ShardKeys, StoreOp};
use crate::policy;
use crate::slack::{self, Request, RetryReason};

fn signature_headers(s: &Session) -> (Option<&[u8]>, Option<&[u8]>) {
    (single_header(s, &names::TIMESTAMP), single_header(s, &names::SIGNATURE))
}

/// Where a delivery was recorded: its plan, its shard's keys and when it arrived.
struct Placed {
    plan: plan::Plan,
    keys: Arc<ShardKeys>,
    received_ms: u64,
    /// The ack budget's end.
    deadline: Instant,
}

/// Slack gives up on an answer after 3 s; an inline answer must leave before this.
const SLACK_WAITS: Duration = Duration::from_millis(2_900);

impl Ingress {
    /// Everything between the request line and the answer for one Slack route.
    ///
    /// `deadline` is the ack budget's end, counted from the request's arrival: no answer that
    /// depends on the store leaves after it.
    pub(super) async fn answer(
        &self,
        session: &mut Session,
        app: &Arc<AppConfig>,
        audit: &mut Audit,
        deadline: Instant,
    ) -> Answer {
        let (content_type, body) = match self.verified_body(session, app, audit).await {
            Ok(parts) => parts,
            Err(refusal) => return refusal,
        };
        let request = match slack::classify(&content_type, &body) {
            Ok(r) => r,
            Err(e) => {
                audit.reason = e.to_string();
                return Answer::refuse(400, Outcome::BadRequest, "unparseable payload\n");
            }
        };
        self.note_retry(session, app, audit);
        match request {
            Request::UrlVerification { challenge } => {
                let body = serde_json::json!({ "challenge": challenge }).to_string();
                Answer {
                    content_type: Cow::Borrowed("application/json"),
                    body: body.into(),
                    ..Answer::empty(200, RequestKind::UrlVerification, Outcome::Answered)
                }
            }
            Request::SslCheck => Answer::empty(200, RequestKind::SslCheck, Outcome::Answered),
            Request::RateLimited => {
                warn!(app = %app.name, "Slack reports app_rate_limited: it is dropping events for this app");
                Answer::empty(200, RequestKind::AppRateLimited, Outcome::Ignored)
            }
            Request::Delivery(delivery) => {
                let path = session.req_header().uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
                self.record(app, Verified { delivery, content_type, body, path }, audit, deadline).await
            }
        }
    }

    /// The body, once the method, the signature headers (before the body is read), the body's
    /// size and deadline, and the signature over it are all right; else the answer instead
    /// (a refusal, or 200 for Slack's unsigned `ssl_check`).
    async fn verified_body(
        &self,
        session: &mut Session,
        app: &AppConfig,
        audit: &mut Audit,
    ) -> Result<(Vec<u8>, Bytes), Answer> {
        if session.req_header().method != http::Method::POST {
            return Err(Answer::refuse(405, Outcome::BadMethod, "method not allowed\n"));
        }
        let now = now_secs();
        // Unsigned, stale or malformed: refused before a byte of the body is buffered (but
        // for the few bytes of an unsigned `ssl_check`).
        let (ts, sig) = signature_headers(session);
        if let Err(e) = slack::precheck(ts, sig, now) {
            return Err(self.unsigned(session, e, audit).await);
        }
        let server = &self.config.server;
        if !self.admission.has_room() {
            // Overloaded: answered before the body is verified or parsed. The body is read and
            // dropped all the same, so that the connection can carry the next request.
            let drained = tokio::time::timeout(server.limits.body_timeout, session.drain_request_body()).await;
            if !matches!(drained, Ok(Ok(()))) {
                session.set_keepalive(None);
            }
            return Err(self.shed(app, Shed::Full, RequestKind::Unknown));
        }
        // The body's bytes count against the budget of unverified bytes until it is checked.
        let mut held = self.unverified.hold();
        let body = self.read_within(session, server.max_body, &mut held, app).await?;
        let (ts, sig) = signature_headers(session);
        slack::verify(&app.secrets, ts, sig, &body, now).map_err(|e| {
            audit.reason = e.to_string();
            Answer::refuse(401, Outcome::Unauthorized, "invalid signature\n")
        })?;
        let content_type = single_header(session, &names::CONTENT_TYPE).unwrap_or_default().to_vec();
        Ok((content_type, body))
    }

    /// The body under `max`, `body_timeout` and the budget of unverified bytes.
    async fn read_within(
        &self,
        session: &mut Session,
        max: usize,
        held: &mut Held,
        app: &AppConfig,
    ) -> Result<Bytes, Answer> {
        let limits = &self.config.server.limits;
        match tokio::time::timeout(limits.body_timeout, read_body(session, max, held)).await {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(BodyError::Refused(refusal))) => Err(refusal),
            Ok(Err(BodyError::Busy)) => {
                session.set_keepalive(None);
                Err(self.shed(app, Shed::Unverified, RequestKind::Unknown))
            }
            Err(_) => Err(Answer::refuse(408, Outcome::BodyTimeout, "request body too slow\n")),
        }
    }

    /// A request that failed the checks before the body: 401, unless it carries no signature
    /// headers at all and its body is exactly Slack's `ssl_check` (sent unsigned when a
    /// command's URL is saved), read only up to a few bytes.
    async fn unsigned(&self, session: &mut Session, e: slack::VerifyError, audit: &mut Audit) -> Answer {
        let headers = &session.req_header().headers;
        let unsigned = !headers.contains_key("x-slack-signature") && !headers.contains_key("x-slack-request-timestamp");
        let form = single_header(session, &names::CONTENT_TYPE).is_some_and(slack::is_form);
        if unsigned && form {
            let mut held = self.unverified.hold();
            let timeout = self.config.server.limits.body_timeout;
            let read = tokio::time::timeout(timeout, read_body(session, slack::SSL_CHECK_MAX, &mut held)).await;
            if matches!(read, Ok(Ok(b)) if slack::is_unsigned_ssl_check(&b)) {
                audit.reason = "unsigned ssl_check".into();
                return Answer::empty(200, RequestKind::SslCheck, Outcome::Answered);
            }
        }
        audit.reason = e.to_string();
        Answer::refuse(401, Outcome::Unauthorized, "invalid signature\n")
    }

    /// Count and audit Slack's own redelivery headers.
    fn note_retry(&self, session: &Session, app: &AppConfig, audit: &mut Audit) {
        let Some(num) = single_header(session, &names::RETRY_NUM) else { return };
        let reason = RetryReason::parse(single_header(session, &names::RETRY_REASON).unwrap_or_default());
        self.shared.metrics.slack_retries.with_label_values(&[app.name.as_str(), reason.as_label()]).inc();
        audit.retry_num = slack::retry_num(num).map(|n| n.to_string()).unwrap_or_else(|| "?".into());
        audit.retry_reason = reason.as_label();
    }

    /// Filters, then the one Redis round trip before the ack (bounded by the pre-ack budget),
    /// then for commands and interactions the inline attempt.
    pub(super) async fn record(
        &self,
        app: &Arc<AppConfig>,
        v: Verified,
        audit: &mut Audit,
        deadline: Instant,
    ) -> Answer {
        let d = &v.delivery;
        let kind = RequestKind::from(d.kind);
        self.note_change(d);
        audit.detail.clone_from(&d.detail);
        audit.receipt = d.receipt.clone().unwrap_or_default();
        audit.sight = self.sight(d, &v.body);
        let received_ms = now_ms();
        let (kept, nonce) = self.nonce(&v, audit, received_ms);
        let plan = plan::plan(d, app, self.config.redis.shards, received_ms, nonce);
        if kept {
            audit.arrival = Some(super::history::arrival(&v, &plan));
            audit.history_id.clone_from(&plan.id);
        }
        if let Some(reason) = plan.ignored {
            self.shared.metrics.ignored.with_label_values(&[&app.name, reason.as_label()]).inc();
            audit.reason = reason.as_label().into();
        }
        if plan.skips_store() {
            return Answer::empty(200, kind, Outcome::Ignored);
        }
        audit.message_key = plan.claim.clone().or_else(|| plan.cancel.clone()).unwrap_or_default();
        let keys = self.shard_keys(&app.name, plan.shard);
        let conversation = plan.conversation.as_ref().map(slack::Conversation::encode).unwrap_or_default();
        let new = NewDelivery {
            id: &plan.id,
            receipt: d.receipt.as_deref(),
            body: &v.body,
            content_type: &v.content_type,
            path: &v.path,
            kind: d.kind,
            received_ms,
            ttl: app.receipt_ttl,
            placement: plan.placement,
            claim: plan.claim.as_deref(),
            cancel: plan.cancel.as_deref(),
            detail: &d.detail,
            response_url: d.response_url.as_deref().unwrap_or(""),
            conversation: &conversation,
            carry: !app.turns.is_on(),
        };
        let earlier = self.earlier_shard(app, d, &plan, received_ms, deadline).await;
        let at = Shards { now: &keys, earlier: earlier.as_ref() };
        let began = audit.trace.is_some().then(std::time::Instant::now);
        let recorded = self.admitted_record(app, plan.shard, at, &new, deadline).await;
        if let (Some(t), Some(began)) = (audit.trace.as_mut(), began) {
            t.record = Some((began, std::time::Instant::now()));
        }
        let recorded = match recorded {
            Ok(r) => r,
            Err(refusal) => return refusal,
        };
        self.recorded(app, recorded, Placed { plan, keys, received_ms, deadline }, v, audit).await
    }

    /// The new delivery id's nonce, which says whether the history keeps the delivery (see
    /// `history::KEPT`) and whether its trace is sampled (see `telemetry::ids::TRACED`, with
    /// traces on); and the first.
    fn nonce(&self, v: &Verified, audit: &mut Audit, received_ms: u64) -> (bool, u64) {
        let kept = self.shared.history.keep_next(received_ms);
        if let Some(traces) = self.shared.telemetry.get() {
            audit.trace = Some(super::trace::RequestTrace::new(traces.sample(), &v.path, &v.delivery));
        }
        let traced = audit.trace.as_ref().is_some_and(|t| t.sampled);
        let bits = (crate::history::KEPT, crate::telemetry::ids::TRACED);
        let nonce = rand::random::<u64>() & !(bits.0 | bits.1)
            | if kept { bits.0 } else { 0 }
            | if traced { bits.1 } else { 0 };
        (kept, nonce)
    }

    /// The record under admission: past the shard gate (a shard whose primary is gone gets its
    /// probes only, which take no slot, and the rest do not queue for one), with a slot, by the
    /// deadline.
    async fn admitted_record(
        &self,
        app: &AppConfig,
        shard: u16,
        keys: Shards<'_>,
        new: &NewDelivery<'_>,
        deadline: Instant,
    ) -> Result<Recorded, Answer> {
        let kind = RequestKind::from(new.kind);
        match self.shard_gate.ask(&app.name, shard) {
            Ask::Admit => {}
            Ask::Refuse => return Err(self.shed(app, Shed::Stalled, kind)),
            Ask::Probe(lane) => {
                let recorded = self.store_record(app, keys, new, deadline).await;
                if recorded.is_ok() {
                    lane.recorded();
                }
                return recorded;
            }
        }
        let slot = self.admission.admit(deadline).await.map_err(|shed| self.shed(app, shed, kind))?;
        let Some(lane) = self.shard_gate.enter(&app.name, shard) else {
            slot.unsampled();
            return Err(self.shed(app, Shed::Stalled, kind));
        };
        self.shared.metrics.overload.admitted.with_label_values(&[&app.name]).inc();
        let recorded = self.store_record(app, keys, new, deadline).await;
        match &recorded {
            Ok(_) => lane.recorded(),
            // One dead primary's timeouts say nothing of how fast the store records, so the
            // limit does not learn from them; the whole store failing still teaches it.
            Err(_) if lane.failed_alone() => slot.unsampled(),
            Err(_) => drop(slot),
        }
        recorded
    }

    /// Where a version before turns put this delivery, while its receipts may still be there
    /// (a receipt's lifetime after this version first ran), when that is another shard. Asked
    /// of the store only until known, and by the deadline.
    async fn earlier_shard(
        &self,
        app: &AppConfig,
        d: &slack::Delivery,
        p: &plan::Plan,
        now: u64,
        deadline: Instant,
    ) -> Option<ShardKeys> {
        let shards = self.config.redis.shards;
        if shards < 2 || (d.receipt.is_none() && p.claim.is_none()) {
            return None;
        }
        let earlier = plan::legacy_shard(d, p.claim.as_deref().or(p.cancel.as_deref()), shards, 0);
        if earlier == p.shard {
            return None;
        }
        let prefix = &self.config.redis.key_prefix;
        let known = &self.shared.sharded_since;
        let since = match known.get() {
            Some(since) => *since,
            None => {
                let asked = self.store().ok()?.sharded_by_conversation(prefix, now);
                match tokio::time::timeout_at(deadline, asked).await {
                    Ok(Ok(since)) => *known.get_or_init(async || since).await,
                    // Unsure: look there (the record fails anyway if Redis does).
                    _ => now,
                }
            }
        };
        (since > 0 && now < since + app.receipt_ttl.as_millis() as u64)
            .then(|| ShardKeys::new(prefix, &app.name, earlier))
    }

    /// A deletion or an edit, into the conversation records (the egress withholds replies to
    /// it): in the background (the ack does not wait), and whatever the filters say (a filtered
    /// `message_deleted` still makes replies stale).
    fn note_change(&self, d: &slack::Delivery) {
        let (Some(window), Some(m)) = (self.attribution_window, &d.message) else { return };
        let change = match m.subtype.as_deref() {
            Some("message_deleted") => Change::Deleted,
            Some("message_changed") => Change::Edited,
            _ => return,
        };
        let Ok(store) = self.store() else { return };
        let records = store.conversations(&self.config.redis.key_prefix, window);
        let (team, channel, ts) = (m.team.clone(), m.channel.clone(), m.ts.clone());
        tokio::spawn(async move {
            if let Err(e) = records.changed(Channel { team: &team, channel: &channel }, &ts, change).await {
                debug!(error = %e, "cannot record a deletion or an edit in the conversation records");
            }
        });
    }

    /// A message event for what the gateway sees (`seen`): an own post (by one of the bot users
    /// `authorizations` names, or any bot's) as evidence, and every message for the thread
    /// record when that is on. Whatever the filters say: the app's own posts are ignored for
    /// delivery, and a thread's record needs every message.
    fn sight(&self, d: &slack::Delivery, body: &bytes::Bytes) -> Option<crate::seen::Sight> {
        let m = d.message.as_ref()?;
        let own = m.user.as_ref().is_some_and(|u| d.bot_users.contains(u)) || m.bot_id.is_some();
        if !self.shared.seen.wants(own) || m.team.is_empty() {
            return None;
        }
        Some(crate::seen::Sight::Event { team: m.team.clone(), channel: m.channel.clone(), own, body: body.clone() })
    }

    /// Not admitted: 503 at once, nothing recorded (Slack retries).
    fn shed(&self, app: &AppConfig, why: Shed, kind: RequestKind) -> Answer {
        self.shared.metrics.overload.shed.with_label_values(&[&app.name, why.as_label()]).inc();
        let mut a = Answer::refuse(503, Outcome::Shed, "overloaded, retry later\n");
        a.kind = kind;
        a
    }

    /// The record itself, by the deadline; a 503 (Slack retries) when it cannot be made.
    async fn store_record(
        &self,
        app: &AppConfig,
        keys: Shards<'_>,
        new: &NewDelivery<'_>,
        deadline: Instant,
    ) -> Result<Recorded, Answer> {
        let unavailable = |why: &str| {
            self.shared.metrics.store_errors.with_label_values(&[&app.name, StoreOp::Record.as_label()]).inc();
            warn!(app = %app.name, error = why, "cannot record; answering 503 so Slack retries");
            let mut a = Answer::refuse(503, Outcome::StoreUnavailable, "store unavailable\n");
            a.kind = RequestKind::from(new.kind);
            a
        };
        let store = self.store().map_err(|e| unavailable(&e.to_string()))?;
        let record = async {
            if let Some(earlier) = keys.earlier {
                let now_shard = shard_of_id(new.id);
                if let Some(duplicate) = store.earlier_receipt(earlier, now_shard, new).await? {
                    return Ok(duplicate);
                }
            }
            store.record(keys.now, new).await
        };
        match tokio::time::timeout_at(deadline, record).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(unavailable(&e.to_string())),
            Err(_) => Err(unavailable("the pre-ack budget ran out")),
        }
    }

    /// The answer for what the record found; a new command or interaction goes inline.
    async fn recorded(
        &self,
        app: &Arc<AppConfig>,
        recorded: Recorded,
        at: Placed,
        v: Verified,
        audit: &mut Audit,
    ) -> Answer {
        let Placed { plan, keys, received_ms, deadline } = at;
        let kind = RequestKind::from(v.delivery.kind);
        let cancelled = match recorded {
            Recorded::Duplicate(original) => {
                audit.delivery = original;
                return Answer::empty(200, kind, Outcome::Duplicate);
            }
            Recorded::DuplicateMessage(holder) => {
                audit.delivery = holder;
                return Answer::empty(200, kind, Outcome::DuplicateMessage);
            }
            Recorded::New { cancelled } => cancelled,
        };
        if cancelled {
            let m = &self.shared.metrics;
            m.cancelled.with_label_values(&[&app.name]).inc();
            m.deliveries.with_label_values(&[&app.name, policy::Outcome::Cancelled.as_label()]).inc();
            audit.reason = "cancelled the deleted message's delivery".into();
        }
        if plan.ignored.is_some() {
            return Answer::empty(200, kind, Outcome::Ignored);
        }
        audit.delivery.clone_from(&plan.id);
        let Some(budget) = plan.inline else { return Answer::empty(200, kind, Outcome::Accepted) };
        if let Some(answer) = self.paused_answer(app, &v, audit) {
            return answer;
        }
        let Ok(store) = self.store() else { return Answer::empty(200, kind, Outcome::Accepted) };
        let job = inline::InlineJob {
            app: app.clone(),
            shared: self.shared.clone(),
            keys,
            store: store.clone(),
            client: self.client.clone(),
            id: plan.id,
            kind: v.delivery.kind,
            detail: v.delivery.detail,
            team: v.delivery.team,
            channel: v.delivery.channel,
            response_url: v.delivery.response_url,
            response_url_hosts: self.response_url_hosts.clone(),
            path: v.path,
            content_type: String::from_utf8_lossy(&v.content_type).into_owned(),
            body: v.body,
            received_ms,
            shadow: app.shadow.is_some() && self.config.egress.listen.is_some(),
        };
        // However long the record took, the answer still leaves inside Slack's 3 s.
        let arrived = deadline.checked_sub(self.config.server.ack_budget).unwrap_or(deadline);
        inline::run(job, budget.min((arrived + SLACK_WAITS).saturating_duration_since(Instant::now()))).await
    }
}

impl Ingress {
    /// An inline payload a pause holds: answered with the app's `pause_answer` now, delivered
    /// by the workers when the pause ends (it waits in the schedule, as one whose inline
    /// attempt failed does).
    fn paused_answer(&self, app: &AppConfig, v: &Verified, audit: &mut Audit) -> Option<Answer> {
        let pauses = self.shared.pauses.snapshot();
        let pause = pauses.covering(&app.name, v.delivery.team.as_deref(), v.delivery.channel.as_deref())?;
        audit.reason = format!("paused ({}): answered with pause_answer, delivered when it ends", pause.describe());
        let a = &app.pause_answer;
        Some(Answer {
            status: 200,
            content_type: Cow::Borrowed(a.content_type),
            body: Bytes::from(a.body.clone()),
            kind: RequestKind::from(v.delivery.kind),
            outcome: Outcome::Accepted,
        })
    }
}

/// The shard a delivery is recorded on, and the one an earlier version would have used.
#[derive(Clone, Copy)]
struct Shards<'a> {
    now: &'a ShardKeys,
    earlier: Option<&'a ShardKeys>,
}

/// The shard a delivery id names (`<shard>-<16 hex>`).
fn shard_of_id(id: &str) -> u16 {
    id.split_once('-').and_then(|(s, _)| s.parse().ok()).unwrap_or(0)
}
