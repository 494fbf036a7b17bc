//! What to do after an attempt toward the bot: pure rules, tested beside them, used alike by
//! the inline path and the delivery workers.

use std::time::Duration;

use crate::config::DeliveryConfig;
use crate::outbox::Finish;
use crate::upstream::{Response, SendError};

/// How one attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Try again; `after` is the bot's own `Retry-After` when it sent one. `status` is the
    /// bot's answer, `None` when there was none (`error` says why).
    Retry {
        status: Option<u16>,
        error: &'static str,
        after: Option<Duration>,
    },
    /// Never retried: a 4xx other than 408/429 (Bolt answers 404 to an event with no listener).
    Final {
        status: u16,
    },
}

/// How a delivery's attempt chain stands after one attempt: the `deliveries_total` outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    Retried,
    /// Parked in the dead-letter stream: a final 4xx, or retried past `give_up_after`.
    Dead,
    /// A `block_suggestion` answered too late: options are useless later.
    Expired,
    /// Cancelled by a `message_deleted` while it waited.
    Cancelled,
}

impl Outcome {
    pub const ALL: [Outcome; 5] =
        [Outcome::Delivered, Outcome::Retried, Outcome::Dead, Outcome::Expired, Outcome::Cancelled];

    pub fn as_label(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Retried => "retried",
            Outcome::Dead => "dead",
            Outcome::Expired => "expired",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// What to record for `verdict`: the outbox transition and the outcome. `retries` is how many
/// attempts already ended in a retry; `unit` is a uniform draw in [0, 1) for the jitter.
pub fn step(
    cfg: &DeliveryConfig,
    verdict: &Verdict,
    retries: u64,
    received_ms: u64,
    now_ms: u64,
    unit: f64,
) -> (Finish<'static>, Outcome) {
    match *verdict {
        Verdict::Delivered => (Finish::Done, Outcome::Delivered),
        Verdict::Final { status } => {
            (Finish::Dead { now_ms, status: Some(status), error: "", final_: true }, Outcome::Dead)
        }
        Verdict::Retry { status, error, .. } if given_up(cfg, received_ms, now_ms) => {
            (Finish::Dead { now_ms, status, error, final_: false }, Outcome::Dead)
        }
        Verdict::Retry { status, error, after } => {
            let delay = backoff(cfg, retries, after, unit);
            (Finish::Retry { due_ms: now_ms + delay.as_millis() as u64, status, error }, Outcome::Retried)
        }
    }
}

/// Judge one attempt's result.
pub fn judge(result: &Result<Response, SendError>) -> Verdict {
    match result {
        Ok(r) if (200..300).contains(&r.status) => Verdict::Delivered,
        Ok(r) if r.status >= 500 || r.status == 408 || r.status == 429 => {
            Verdict::Retry { status: Some(r.status), error: "", after: r.retry_after }
        }
        Ok(r) => Verdict::Final { status: r.status },
        Err(e) => Verdict::Retry { status: None, error: e.as_label(), after: None },
    }
}

/// The delay before retry number `retries + 1`: full jitter over
/// `[retry_initial, min(retry_max, retry_initial · 2^retries)]`; `unit` is a uniform draw in
/// [0, 1). A `Retry-After` from the bot wins, capped at `retry_max`.
pub fn backoff(cfg: &DeliveryConfig, retries: u64, retry_after: Option<Duration>, unit: f64) -> Duration {
    if let Some(after) = retry_after {
        return after.min(cfg.retry_max);
    }
    let factor = 2u32.saturating_pow(retries.min(31) as u32);
    let ceiling = cfg.retry_initial.saturating_mul(factor).min(cfg.retry_max);
    let span = ceiling.saturating_sub(cfg.retry_initial);
    cfg.retry_initial + span.mul_f64(unit.clamp(0.0, 1.0))
}

/// Whether a delivery received at `received_ms` has run out of time at `now_ms`.
pub fn given_up(cfg: &DeliveryConfig, received_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(received_ms) >= cfg.give_up_after.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn cfg() -> DeliveryConfig {
        DeliveryConfig {
            timeout: Duration::from_secs(10),
            max_in_flight: 4,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            give_up_after: Duration::from_secs(3600),
            lease: Duration::from_secs(60),
            dead_ttl: Duration::from_secs(7 * 86400),
            dead_max: 100_000,
        }
    }

    fn resp(status: u16, retry_after: Option<u64>) -> Result<Response, SendError> {
        Ok(Response {
            status,
            content_type: None,
            body: Bytes::new(),
            retry_after: retry_after.map(Duration::from_secs),
            headers: Default::default(),
            socket: None,
        })
    }

    #[test]
    fn statuses() {
        assert_eq!(judge(&resp(200, None)), Verdict::Delivered);
        assert_eq!(judge(&resp(204, None)), Verdict::Delivered);
        for s in [500, 502, 503, 408, 429] {
            assert!(matches!(judge(&resp(s, None)), Verdict::Retry { .. }), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 302] {
            assert!(matches!(judge(&resp(s, None)), Verdict::Final { .. }), "{s}");
        }
        assert_eq!(judge(&Err(SendError::Timeout)), Verdict::Retry { status: None, error: "timeout", after: None });
        let r = judge(&resp(429, Some(7)));
        assert_eq!(r, Verdict::Retry { status: Some(429), error: "", after: Some(Duration::from_secs(7)) });
        assert_eq!(judge(&resp(404, None)), Verdict::Final { status: 404 });
    }

    #[test]
    fn backoff_grows_and_stays_in_bounds() {
        let c = cfg();
        assert_eq!(backoff(&c, 0, None, 0.99), Duration::from_secs(1));
        assert_eq!(backoff(&c, 3, None, 0.0), Duration::from_secs(1));
        assert_eq!(backoff(&c, 3, None, 1.0), Duration::from_secs(8));
        assert_eq!(backoff(&c, 40, None, 1.0), Duration::from_secs(300));
        assert_eq!(backoff(&c, 40, None, 0.5), Duration::from_millis(150_500));
        assert_eq!(backoff(&c, 2, Some(Duration::from_secs(42)), 0.0), Duration::from_secs(42));
        assert_eq!(backoff(&c, 2, Some(Duration::from_secs(4200)), 0.0), Duration::from_secs(300));
    }

    #[test]
    fn steps() {
        let c = cfg();
        assert_eq!(step(&c, &Verdict::Delivered, 0, 0, 10, 0.5).1, Outcome::Delivered);
        let (finish, outcome) = step(&c, &Verdict::Final { status: 404 }, 0, 0, 10, 0.5);
        assert_eq!(outcome, Outcome::Dead);
        assert!(matches!(finish, Finish::Dead { status: Some(404), final_: true, .. }));
        let retry = Verdict::Retry { status: Some(503), error: "", after: None };
        let (finish, outcome) = step(&c, &retry, 2, 0, 10_000, 0.0);
        assert_eq!(outcome, Outcome::Retried);
        assert!(matches!(finish, Finish::Retry { due_ms: 11_000, status: Some(503), .. }));
        let (finish, outcome) = step(&c, &retry, 2, 0, 3_600_000, 0.0);
        assert_eq!(outcome, Outcome::Dead, "past give_up_after");
        assert!(matches!(finish, Finish::Dead { final_: false, .. }));
    }

    #[test]
    fn give_up_after_elapsed() {
        let c = cfg();
        assert!(!given_up(&c, 1_000, 1_000 + 3_599_999));
        assert!(given_up(&c, 1_000, 1_000 + 3_600_000));
    }
}
