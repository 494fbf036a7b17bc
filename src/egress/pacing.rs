//! Pacing: chat.postMessage waits for its app's pace in the channel (shared in Redis across
//! replicas), and Slack's 429s are waited out — both up to `max_wait`, then the 429 goes back
//! to the bot. An answer lost after the call may have reached Slack is reconciled, never guessed.

use std::time::Instant;

use tracing::warn;

use super::attribution::Target;
use super::error::Error;
use super::plan;
use super::write::{forwarded, Write};
use super::{cached, Egress, Outcome, Reply};
use crate::clock::now_ms;

impl Egress {
    /// chat.postMessage waits for its app's pace in the channel; then the call, holding
    /// Slack's 429s.
    pub(super) async fn paced(&self, to: &Target<'_>, w: &Write) -> Reply {
        let started = Instant::now();
        if plan::is_paced(&w.call.method) {
            let c = self.cfg();
            let per = plan::pace_per(c.pace_per_second);
            // Slack's limit is per app: a bot token's app is its bot id, a user token's its user.
            let who = &to.who;
            let app_id = if who.bot_id.is_empty() { &who.user_id } else { &who.bot_id };
            match self.step(w, to.store.pace(&to.place(), app_id, now_ms(), per, c.pace_burst, c.max_wait)).await {
                Ok(Some(wait)) => {
                    self.shared.metrics.egress.pacing_seconds.observe(wait.as_secs_f64());
                    tokio::time::sleep(wait).await;
                }
                Ok(None) => return Error::RateLimited { retry_after: plan::paced_out_after(per) }.into(),
                Err(e) => warn!(error = %e, "pacing unavailable; posting unpaced"),
            }
        }
        self.with_retries(to, w, started).await
    }

    /// The call, with Slack's 429s honoured (`plan::retry_wait`) until `max_wait`; an answer
    /// lost after the call may have reached Slack is reconciled, never guessed. The 429 that
    /// goes back to the bot keeps Slack's value.
    async fn with_retries(&self, to: &Target<'_>, w: &Write, started: Instant) -> Reply {
        let max_wait = self.cfg().max_wait;
        loop {
            let sent_ms = now_ms();
            let t = Instant::now();
            let result = self.slack.forward(&w.call, self.cfg().timeout).await;
            self.shared.metrics.egress.slack_seconds.with_label_values(&["write"]).observe(t.elapsed().as_secs_f64());
            match result {
                Ok(r) if r.status == 429 => match plan::retry_wait(r.retry_after, started.elapsed(), max_wait) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => return Reply::new(cached(r), Outcome::RateLimited),
                },
                result => match forwarded(result) {
                    Ok(reply) => return reply,
                    Err(_) => return self.uncertain(w, Some(&to.who), sent_ms).await,
                },
            }
        }
    }
}
