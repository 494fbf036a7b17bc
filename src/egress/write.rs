//! The write path. In order:
//!
//! 1. **Keys** (`keyed`). With `Idempotency-Key`, the call claims `(token, method, key)` for a
//!    day, bound to its request (query and body): the winner sends, a concurrent duplicate gets
//!    409 while the winner's lease is alive, a later one gets the winner's answer, one with
//!    another request 422; a failure drops the claim. A claim whose call died is settled by
//!    the next call with the key, by the uncertain-write rules. Fails closed (503) without Redis.
//! 2. **Retries** (`retry`). Without a key, an identical earlier call (same token, method,
//!    query and body) within `retry_window` whose answer never reached its client makes this
//!    call its retry: it waits for that call's result, or gets it replayed, or — when that call
//!    died — settles it by the uncertain-write rules. Anything else is a new write and is posted.
//! 3. **Attribution** (`attribution`). The write's channel and thread name a message the
//!    gateway delivered; if that message was deleted (or edited, with `on_edited =
//!    "withhold"`), the write is withheld.
//! 4. **Turns** (`turn`). A write of a conversation's turn renews or ends it; a new post of a
//!    turn whose conversation has a newer message waiting is withheld (`on_newer`).
//! 5. **Re-runs** (`rerun`, opt-in). The k-th write of a method during run n of a delivery
//!    returns the k-th such write of an earlier run instead of posting again.
//! 6. **Pacing** (`pacing`) of chat.postMessage per app and channel, and Slack's 429s, up to
//!    `max_wait`.
//! 7. **The uncertain write** (`uncertain`). No answer after the call may have reached Slack: a
//!    chat.postMessage is looked for in the channel before it is posted again; other methods as
//!    `uncertain` says.
//!
//! A stream's append or stop (`stream`) skips layers 1–2: it goes on the stream the gateway
//! keeps, which is its own retry layer (its text kept, an answer lost on the way settled as
//! edits of the whole text), then its turn. A stream's start is a post on this path.
//!
//! What each layer decides is in `plan`; each layer is a function over the context (`Ctx`) and
//! the write that does the I/O its rule asks for, and none calls another: what a layer hands
//! on — the rest of the path to send, an answer lost on the way — comes back here, and this
//! file calls the next. Every Redis step goes through [`Ctx::step`]: once one has found Redis
//! not answering, the call's later steps skip it instead of waiting again (a frozen Redis costs
//! one timeout).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::protocols::http::ServerSession;

use super::call::{request_digest, token_hash, with_query_args};
use super::ctx::{forwarded, Ctx};
use super::lease::Lease;
use super::model::error::Error;
use super::model::{Attributed, Cached, Call, Identity, Lost, Reply, Target, Write};
use super::plan::{self, FpStep, KeyKind, Layer};
use super::retry::{ClientGone, Tracked};
use super::store::EgressStore;
use super::uncertain::Unsettled;
use super::{attribution, keyed, pacing, rerun, retry, stream, turn, uncertain};
use crate::clock::now_ms;

/// A write; `true` when its answer reached the client.
pub(super) async fn write(ctx: &Arc<Ctx>, mut call: Call, session: &mut ServerSession) -> bool {
    with_query_args(&mut call);
    let digest = request_digest(&call);
    let mut w = Write::new(call, digest);
    let layer = plan::layer(w.call.token.is_some(), w.call.idempotency_key.is_some());
    // A write without a token touches no store.
    if let Some(token) = w.call.token.as_ref() {
        if let Some(store) = ctx.store() {
            w.token_hash = ctx.step(&w, store.hash_key()).await.ok().map(|k| token_hash(&k, token));
        }
    }
    let w = Arc::new(w);
    // A stream's append or stop goes on the stream the gateway keeps (it is its own retry
    // layer: its text is kept, an answer lost on the way is settled there).
    if layer != Layer::Plain && plan::continues_a_stream(&w.call.method) {
        if let Some(reply) = stream::continued(ctx, &w).await {
            return ctx.answer(&w.call, KeyKind::None, reply, session).await;
        }
    }
    match (layer, w.call.idempotency_key.as_deref()) {
        (Layer::Keyed, Some(key)) => keyed(ctx, &w, key, session).await,
        (Layer::Fingerprint, _) => unkeyed(ctx, w, session).await,
        // Slack answers a write without a token itself.
        _ => {
            let reply = forward(ctx, &w).await;
            ctx.answer(&w.call, KeyKind::None, reply, session).await
        }
    }
}

/// Layer 1, keys: replayed, refused while in flight or for another request, or sent.
async fn keyed(ctx: &Ctx, w: &Write, key: &str, session: &mut ServerSession) -> bool {
    let reply = match keyed::claim(ctx, w, key).await {
        Err(decided) => decided,
        Ok(claim) => {
            let reply = match claim.unsettled {
                None => send(ctx, w).await,
                Some(sent_ms) => match uncertain::unsettled(ctx, w, sent_ms).await {
                    Unsettled::Answer(reply) => reply,
                    Unsettled::SendAgain => send(ctx, w).await,
                },
            };
            keyed::finish(ctx, w, claim, &reply).await;
            reply
        }
    };
    ctx.answer(&w.call, KeyKind::Key, reply, session).await
}

/// Layer 2, retries: without a key, an identical earlier call whose answer was lost makes
/// this one its retry.
async fn unkeyed(ctx: &Arc<Ctx>, w: Arc<Write>, session: &mut ServerSession) -> bool {
    let Some(fp) = Tracked::new(ctx, &w) else {
        let reply = send(ctx, &w).await;
        return ctx.answer(&w.call, KeyKind::None, reply, session).await;
    };
    let reply = match retry::wait_turn(ctx, &w, &fp, session).await {
        // (A poll is waited out in the layer.)
        Err(ClientGone) | Ok(FpStep::Poll(_)) => return false,
        Ok(FpStep::Send) => send(ctx, &w).await,
        Ok(FpStep::SendTracked) => {
            let lease = fp.lease();
            return send_tracked(ctx, w, fp, lease, session).await;
        }
        Ok(FpStep::Replay(answer)) => return retry::replay(ctx, &w, &fp, answer, session).await,
        // The earlier identical call never settled and the fingerprint is ours now: found,
        // sent again, or unknown again, by the uncertain-write rules.
        Ok(FpStep::Reconcile { sent_ms }) => {
            let lease = fp.lease();
            return match uncertain::unsettled(ctx, &w, sent_ms).await {
                Unsettled::SendAgain => send_tracked(ctx, w, fp, lease, session).await,
                Unsettled::Answer(reply) => retry::answer_settled(ctx, &w, &fp, lease, reply, session).await,
            };
        }
        Ok(FpStep::GiveUp) => uncertain::unknown(ctx, &w, Error::RetryPending).await,
    };
    ctx.answer(&w.call, KeyKind::Retry, reply, session).await
}

/// Send a write whose fingerprint is ours on its own task, so that a client that goes
/// meanwhile leaves its answer for its retry.
async fn send_tracked(ctx: &Arc<Ctx>, w: Arc<Write>, fp: Tracked, lease: Lease, session: &mut ServerSession) -> bool {
    let (me, w2) = (ctx.clone(), w.clone());
    let sending = tokio::spawn(async move { send(&me, &w2).await });
    retry::answer_tracked(ctx, &w, &fp, lease, sending, session).await
}

/// Everything between the dedupe and Slack: attribution (layer 3), then the target's layers.
async fn send(ctx: &Ctx, w: &Write) -> Reply {
    let Some(store) = ctx.store() else { return forward(ctx, w).await };
    let Some(to) = attribution::attribute(ctx, store, w).await else { return forward(ctx, w).await };
    let started = Instant::now();
    let reply = send_to(ctx, store, &to, w).await;
    if let Some(source) = &to.source {
        remember_write(ctx, source, w, &reply, started.elapsed());
    }
    reply
}

/// A write whose target is known, layer by layer: withheld (its source gone), superseded (its
/// turn, layer 4), replayed (re-runs, 5), or paced and sent (6), an answer lost on the way
/// settled by the uncertain-write rules (7); a success is remembered for what comes after it.
async fn send_to(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write) -> Reply {
    if let Some(withheld) = attribution::withhold(ctx, store, to, w).await {
        return withheld;
    }
    if let Some(superseded) = turn::turn(ctx, store, to, w).await {
        return superseded;
    }
    let rerun = match rerun::rerun(ctx, store, to, w).await {
        Ok(k) => k,
        Err(replayed) => return replayed,
    };
    let reply = match pacing::paced(ctx, store, to, w).await {
        Ok(reply) => reply,
        Err(Lost { sent_ms }) => uncertain::uncertain(ctx, w, Some(&to.who), sent_ms).await,
    };
    if reply.answer.succeeded() {
        attribution::remember(ctx, store, to, w, &reply.answer).await;
        stream::opened(ctx, store, to, w, &reply.answer).await;
        rerun::record(ctx, store, to, w, rerun, &reply.answer).await;
        saw_post(ctx, &to.who, w, &reply.answer);
    }
    reply
}

/// A write without the token or the fields to dedupe or attribute it: sent as it is; an
/// answer lost on the way is settled by the uncertain-write rules like any other.
async fn forward(ctx: &Ctx, w: &Write) -> Reply {
    let sent_ms = now_ms();
    match forwarded(ctx.slack.forward(&w.call, ctx.cfg().timeout).await) {
        Ok(reply) => reply,
        Err(_) => uncertain::uncertain(ctx, w, None, sent_ms).await,
    }
}

/// A post, into its thread's record (when threads are recorded): Slack's answer carries the
/// message as history will show it.
fn saw_post(ctx: &Ctx, who: &Identity, w: &Write, answer: &Cached) {
    let seen = &ctx.shared.seen;
    if w.call.method != "chat.postMessage" || !seen.records_threads() {
        return;
    }
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&answer.body) else { return };
    let (Some(channel), Some(message)) = (v["channel"].as_str().map(String::from), v.get_mut("message")) else {
        return;
    };
    let message = message.take();
    seen.note(crate::seen::Sight::Posted { team: who.team.clone(), channel, message });
}

/// The write, for its delivery's history (with the posted message's `ts`).
fn remember_write(ctx: &Ctx, source: &Attributed, w: &Write, reply: &Reply, took: Duration) {
    ctx.shared.history.step(&source.app, &source.delivery, || {
        let answer = serde_json::from_slice::<serde_json::Value>(&reply.answer.body).ok();
        let ts = answer.as_ref().and_then(|v| v["ts"].as_str()).unwrap_or_default().to_string();
        crate::history::What::Wrote(crate::history::Write {
            method: w.call.method.clone(),
            channel: w.call.fields.channel.clone().unwrap_or_default(),
            outcome: reply.outcome.as_label(),
            key: if w.call.idempotency_key.is_some() { "idempotency_key" } else { "digest" },
            ts,
            took_ms: took.as_millis() as u64,
            bytes: w.call.body.len() as u64,
            text: crate::queue::history::kept_text(ctx.live.get().config.ui.show_text, w.call.fields.message_text()),
        })
    });
}
