//! The read path: a call that is not a write goes to Slack and its answer comes back as it
//! arrives, head and body untouched (its encoding too), with no Redis on its path but the
//! history reads' budget (`replies`). Nothing is
//! buffered whole, so a `conversations.history` page of any size passes.

use std::time::Instant;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use tracing::debug;

use super::ctx::{respond, Ctx};
use super::headers;
use super::model::error::Error;
use super::model::{Call, Outcome};
use super::replies::{history_read, record_page, refused_read};

/// A read; `true` when its answer reached the client whole.
pub(super) async fn read(ctx: &Ctx, call: &Call, session: &mut ServerSession) -> bool {
    // A history read is counted against its app's budget (and may come from the record).
    let who = history_read(ctx, call).await;
    if let Some(reply) = record_page(ctx, call, who.as_ref()).await {
        ctx.count("read", reply.outcome);
        return respond(session, &reply).await;
    }
    let started = Instant::now();
    let opened = ctx.slack.open(call, ctx.cfg().timeout).await;
    ctx.shared.metrics.egress.slack_seconds.with_label_values(&["read"]).observe(started.elapsed().as_secs_f64());
    match opened {
        Ok(answer) if answer.status() == 429 && who.is_some() => {
            let after = answer.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok());
            let after = after.and_then(crate::upstream::parse_retry_after);
            match refused_read(ctx, call, who.as_ref(), after).await {
                Some(reply) => {
                    ctx.count("read", reply.outcome);
                    respond(session, &reply).await
                }
                None => {
                    ctx.count("read", Outcome::Forwarded);
                    relay(session, answer, ctx.cfg().timeout).await
                }
            }
        }
        Ok(answer) => {
            ctx.count("read", Outcome::Forwarded);
            relay(session, answer, ctx.cfg().timeout).await
        }
        Err(e) => {
            debug!(method = %call.method, error = %e, "Slack did not answer a read");
            ctx.count("read", Outcome::Failed);
            respond(session, &Error::Upstream.into()).await
        }
    }
}

/// Pass Slack's answer on as it comes. A body that stalls for `stall` (or breaks) cuts the
/// answer: the bot's client sees a short body, never a silently different one.
async fn relay(session: &mut ServerSession, answer: http::Response<Incoming>, stall: std::time::Duration) -> bool {
    let (parts, mut body) = answer.into_parts();
    let Ok(mut head) = ResponseHeader::build(parts.status, Some(parts.headers.len() + 1)) else { return false };
    let passed = headers::end_to_end(&parts.headers);
    for (name, value) in &passed {
        if head.append_header(name.clone(), value.clone()).is_err() {
            return false;
        }
    }
    // Without a length the answer is framed by chunks (for an HTTP/1.0 client, by the close).
    if !passed.contains_key(http::header::CONTENT_LENGTH) && session.req_header().version == http::Version::HTTP_11 {
        let _ = head.insert_header(http::header::TRANSFER_ENCODING, "chunked");
    }
    if session.write_response_header(Box::new(head)).await.is_err() {
        return false;
    }
    loop {
        let frame = match tokio::time::timeout(stall, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                debug!(error = %e, "a read's answer broke off");
                return false;
            }
            Err(_) => return false,
        };
        // Trailers are not passed (the bot's client asked for none: `TE` is hop-by-hop).
        if let Ok(data) = frame.into_data() {
            if session.write_response_body(data, false).await.is_err() {
                return false;
            }
        }
    }
    session.finish_body().await.is_ok()
}
