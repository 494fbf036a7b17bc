//! Time, in one place. Wall-clock milliseconds are what the outbox stores (received-at, due
//! times, dead-letter ages) and what Slack's signatures carry (seconds). They are read here from
//! tokio's clock, anchored once to the system clock, so a test that pauses tokio's time
//! (`#[tokio::test(start_paused = true)]`) moves them deterministically with `advance`.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The system clock and tokio's clock, read together once: wall time is the first plus the
/// time tokio's clock has run since.
fn anchor() -> &'static (u64, Instant) {
    static ANCHOR: OnceLock<(u64, Instant)> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        (wall, Instant::now())
    })
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    let (wall, at) = anchor();
    wall + Instant::now().saturating_duration_since(*at).as_millis() as u64
}

/// Unix time in seconds, as Slack's `X-Slack-Request-Timestamp` carries it.
pub fn now_secs() -> i64 {
    (now_ms() / 1000) as i64
}

/// `HH:MM:SS` (UTC) of a time in ms since the epoch.
pub fn hms(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn time_moves_with_tokios_clock() {
        let before = now_ms();
        tokio::time::advance(Duration::from_secs(3600)).await;
        let after = now_ms();
        assert_eq!(after - before, 3_600_000);
        assert!(now_secs() >= 1_700_000_000, "wall time, not time since start");
    }
}
