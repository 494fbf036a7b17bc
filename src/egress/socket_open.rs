//! A Socket Mode bot's `apps.connections.open` (`upstream = "socket"`): answered by the
//! gateway with a one-time URL of its own socket listener, never sent to Slack. The bot is
//! known by its app token, which is compared in constant time and never logged.

use std::sync::Arc;

use pingora::protocols::http::ServerSession;
use tracing::{info, warn};

use super::ctx::{respond, Ctx};
use super::model::{Call, Outcome, Reply};
use crate::config::AppConfig;

pub const METHOD: &str = "apps.connections.open";

/// For a Socket Mode bot's `apps.connections.open`: the app whose bot presents the call's
/// token (`None` for every other call, without a look at the apps).
pub(super) fn socket_bot(ctx: &Ctx, call: &Call) -> Option<Arc<AppConfig>> {
    if call.method != METHOD {
        return None;
    }
    let token = call.token.as_ref()?;
    let config = ctx.live.get().config.clone();
    config
        .apps
        .iter()
        .find(|a| a.any_socket() && a.socket_mode.as_ref().is_some_and(|s| &s.app_token == token))
        .cloned()
}

/// `{"ok": true, "url": "ws://<socket_listen>/socket?ticket=…"}`.
pub(super) async fn open(ctx: &Ctx, app: &AppConfig, session: &mut ServerSession) -> bool {
    let reply = match ctx.shared.bots.issue(&app.name, &ctx.config.server.socket_listen) {
        Some(url) => {
            info!(target: "slackgate::audit", app = %app.name, method = METHOD, outcome = "socket_opened", "egress read");
            Reply::own(200, serde_json::json!({ "ok": true, "url": url }), Outcome::SocketOpened, None)
        }
        None => {
            warn!(app = %app.name, "too many unused Socket Mode tickets; the bot is asked to retry");
            Reply::own(429, serde_json::json!({ "ok": false, "error": "ratelimited" }), Outcome::RateLimited, Some(1))
        }
    };
    ctx.count("read", reply.outcome);
    respond(session, &reply).await
}
