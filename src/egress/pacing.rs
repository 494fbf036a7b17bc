//! Pacing: chat.postMessage waits for its app's pace in the channel (shared in Redis across
//! replicas), and Slack's 429s are waited out — both up to `max_wait`, then the 429 goes back
//! to the bot. An answer lost after the call may have reached Slack comes back as [`Lost`], for
//! the uncertain-write rules: reconciled, never guessed.

use std::time::Instant;

use tracing::warn;

use super::ctx::{cached, forwarded, Ctx};
use super::model::error::Error;
use super::model::{Lost, Outcome, Reply, Target, Write};
use super::plan;
use super::store::EgressStore;
use crate::clock::now_ms;

/// chat.postMessage waits for its app's pace in the channel; then the call, holding
/// Slack's 429s; `Err` when its answer was lost on the way.
pub(super) async fn paced(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write) -> Result<Reply, Lost> {
    let started = Instant::now();
    if plan::is_paced(&w.call.method) {
        let c = ctx.cfg();
        let per = plan::pace_per(c.pace_per_second);
        // Slack's limit is per app: a bot token's app is its bot id, a user token's its user.
        let who = &to.who;
        let app_id = if who.bot_id.is_empty() { &who.user_id } else { &who.bot_id };
        match ctx.step(w, store.pace(&to.place(), app_id, now_ms(), per, c.pace_burst, c.max_wait)).await {
            Ok(Some(wait)) => {
                ctx.shared.metrics.egress.pacing_seconds.observe(wait.as_secs_f64());
                if let Some(t) = &w.call.trace {
                    t.event("paced", vec![opentelemetry::KeyValue::new("slackgate.wait_ms", wait.as_millis() as i64)]);
                }
                tokio::time::sleep(wait).await;
            }
            Ok(None) => return Ok(Error::RateLimited { retry_after: plan::paced_out_after(per) }.into()),
            Err(e) => warn!(error = %e, "pacing unavailable; posting unpaced"),
        }
    }
    with_retries(ctx, w, started).await
}

/// The call, with Slack's 429s honoured (`plan::retry_wait`) until `max_wait`; `Err` when
/// the answer was lost after the call may have reached Slack. The 429 that goes back to the
/// bot keeps Slack's value.
async fn with_retries(ctx: &Ctx, w: &Write, started: Instant) -> Result<Reply, Lost> {
    let max_wait = ctx.cfg().max_wait;
    loop {
        let sent_ms = now_ms();
        let t = Instant::now();
        let result = ctx.slack.forward(&w.call, ctx.cfg().timeout).await;
        ctx.shared.metrics.egress.slack_seconds.with_label_values(&["write"]).observe(t.elapsed().as_secs_f64());
        match result {
            Ok(r) if r.status == 429 => match plan::retry_wait(r.retry_after, started.elapsed(), max_wait) {
                Some(wait) => {
                    if let Some(t) = &w.call.trace {
                        t.event(
                            "slack 429",
                            vec![opentelemetry::KeyValue::new("slackgate.wait_ms", wait.as_millis() as i64)],
                        );
                    }
                    tokio::time::sleep(wait).await
                }
                None => return Ok(Reply::new(cached(r), Outcome::RateLimited)),
            },
            result => return forwarded(result).map_err(|_| Lost { sent_ms }),
        }
    }
}
