//! Waiting for a condition, never for a guess: every poll here has a deadline and a condition,
//! and a test that proves nothing *more* happens waits for the gateway's outbox to be idle (no
//! delivery ready, in flight, held inline or scheduled for a retry), then asserts.

use std::time::Duration;

use super::{send, Req, SECRET};

/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(50);

/// Poll `check` every 50 ms until it holds or `limit` passes.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    until(limit, async || check()).await
}

/// Poll an async `check` every 50 ms until it holds or `limit` passes (it may keep what it saw
/// last in a variable it borrows, for the failure message).
pub async fn until(limit: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Poll the gateway's metrics until `series` reaches `at_least` or `limit` passes.
pub async fn metric_reaches(admin_port: u16, series: &str, at_least: f64, limit: Duration) -> bool {
    until(limit, async || super::metric(admin_port, series).await >= at_least).await
}

/// `GET path` on the admin port (no token): its status and body.
pub async fn admin_get(admin_port: u16, path: &str) -> (u16, String) {
    let mut req = Req::signed(path, Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    let (status, body) = send(admin_port, req).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// What `GET /stats` on the admin port says of each app's outbox, read from Redis on the spot
/// (the `/metrics` gauges lag up to 5 s behind). `token`: the `[server] admin_token`, if any.
pub async fn outbox_stats(admin_port: u16, token: Option<&str>) -> serde_json::Value {
    let (status, stats) = try_outbox_stats(admin_port, token).await;
    assert_eq!(status, 200, "GET /stats: {stats}");
    stats
}

/// `GET /stats`: its status and body (an error's text as a JSON string), e.g. while Redis fails
/// over.
async fn try_outbox_stats(admin_port: u16, token: Option<&str>) -> (u16, serde_json::Value) {
    let mut req = Req::signed("/stats", Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let (status, body) = send(admin_port, req).await;
    let text = String::from_utf8_lossy(&body);
    (status, serde_json::from_str(&text).unwrap_or_else(|_| serde_json::Value::String(text.into_owned())))
}

/// No delivery of any app waits anywhere: none on the stream, in flight, held by an inline
/// attempt or scheduled for a retry, and the waiting index is empty. Every accepted delivery is
/// then done, dead-lettered or cancelled, and nothing more reaches the bot until Slack (or the
/// test) sends again.
pub fn is_idle(stats: &serde_json::Value) -> bool {
    stats
        .as_array()
        .expect("a list of apps")
        .iter()
        .all(|app| ["ready", "in_flight", "scheduled", "oldest_age_ms"].iter().all(|k| app[*k].as_u64() == Some(0)))
}

/// Wait until the gateway's outbox [is idle](is_idle), up to `limit` (a failed read of the
/// stats is not idle).
pub async fn outbox_idle(admin_port: u16, limit: Duration) -> bool {
    outbox_idle_with(admin_port, None, limit).await
}

/// [`outbox_idle`] for a gateway with an admin token.
pub async fn outbox_idle_with(admin_port: u16, token: Option<&str>, limit: Duration) -> bool {
    until(limit, async || match try_outbox_stats(admin_port, token).await {
        (200, stats) => is_idle(&stats),
        _ => false,
    })
    .await
}
