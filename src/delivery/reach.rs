//! Whether a shadow's bot can be reached. A shadow that is down (nothing listens, its host is
//! gone) would otherwise have every copy tried, failed, rescheduled and promoted again, on the
//! same Redis and the same cores as the live bot, for as long as `give_up_after` allows. So
//! its lane backs off instead: after an attempt that could not connect, the lane's readers in
//! this process read nothing for a while, then send one copy (a probe); each probe that fails
//! doubles the wait (up to [`MAX_BACKOFF`]), the first bot answer of any status ends it. The
//! copies wait in the lane's stream meanwhile (up to the shadow's `max_backlog`, past which they
//! are dropped and counted), so nothing the shadow could still answer is lost.

use std::sync::Mutex;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::time::Instant;
use tracing::info;

use crate::upstream::SendError;

/// The first wait after an attempt that could not connect.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between probes: a shadow that comes back is used again within this.
const MAX_BACKOFF: Duration = Duration::from_secs(15);

/// One lane's reach in this process, shared by its shards' readers and attempts.
pub(super) struct Reach {
    app: String,
    state: Mutex<State>,
    /// `slackgate_shadow_unreachable{app}`: 1 while backing off.
    gauge: IntGauge,
}

#[derive(Default)]
struct State {
    /// Probes failed in a row (0: the bot is reachable, or was when last tried).
    strikes: u32,
    /// No attempt before this (`None`: none is held back).
    until: Option<Instant>,
}

/// What a lane's reader may do now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Turn {
    /// Read as many entries as its slots allow.
    Read,
    /// Read one entry: a probe of a bot that could not be reached.
    Probe,
    /// Read nothing for this long.
    Wait(Duration),
}

impl Reach {
    pub(super) fn new(app: &str, gauge: IntGauge) -> Self {
        gauge.set(0);
        Reach { app: app.to_string(), state: Mutex::new(State::default()), gauge }
    }

    /// What the reader may do now (see [`Turn`]).
    pub(super) fn turn(&self) -> Turn {
        let state = self.state.lock().expect("never poisoned");
        match state.until {
            None => Turn::Read,
            Some(until) => match until.checked_duration_since(Instant::now()) {
                Some(wait) if !wait.is_zero() => Turn::Wait(wait),
                _ => Turn::Probe,
            },
        }
    }

    /// What an attempt found: `result` is the bot's answer (any status: it is up) or why none
    /// came. Only a failure to connect counts against the bot; a timeout is the bot's own
    /// slowness, which its slots already bound.
    pub(super) fn note(&self, result: Result<u16, &SendError>) {
        let mut state = self.state.lock().expect("never poisoned");
        match result {
            Ok(_) if state.strikes > 0 => {
                info!(target: "slackgate::audit", app = %self.app, "shadow bot reachable again");
                *state = State::default();
                self.gauge.set(0);
            }
            Ok(_) => {}
            Err(e) if unreachable(e) => {
                let now = Instant::now();
                // Attempts that were in flight together fail together: one strike for them.
                if state.until.is_some_and(|until| until > now) {
                    return;
                }
                state.strikes += 1;
                let wait = backoff(state.strikes);
                state.until = Some(now + wait);
                if state.strikes == 1 {
                    self.gauge.set(1);
                    info!(
                        target: "slackgate::audit",
                        app = %self.app,
                        error = e.as_label(),
                        "shadow bot unreachable; its lane backs off and probes"
                    );
                }
            }
            Err(_) => {}
        }
    }
}

/// Whether `e` says nothing listens where the bot should be.
fn unreachable(e: &SendError) -> bool {
    matches!(e, SendError::Resolve(_) | SendError::Refused(_) | SendError::ConnectTimeout(_) | SendError::Connect(_))
}

/// The wait after `strikes` failed probes in a row.
fn backoff(strikes: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1 << strikes.saturating_sub(1).min(16)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach() -> Reach {
        Reach::new("bot.shadow", IntGauge::new("shadow_unreachable", "test").unwrap())
    }

    fn refused() -> SendError {
        SendError::Refused("refused".into())
    }

    #[test]
    fn the_wait_doubles_up_to_its_cap() {
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(2), FIRST_BACKOFF * 2);
        assert_eq!(backoff(3), FIRST_BACKOFF * 4);
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_attempt_backs_off_then_probes_and_an_answer_ends_it() {
        let reach = reach();
        assert_eq!(reach.turn(), Turn::Read);
        reach.note(Err(&refused()));
        assert!(matches!(reach.turn(), Turn::Wait(w) if w == FIRST_BACKOFF));
        // The attempts in flight with it fail too: still one strike.
        reach.note(Err(&refused()));
        assert!(matches!(reach.turn(), Turn::Wait(w) if w == FIRST_BACKOFF));
        tokio::time::advance(FIRST_BACKOFF).await;
        assert_eq!(reach.turn(), Turn::Probe);
        reach.note(Err(&refused()));
        assert!(matches!(reach.turn(), Turn::Wait(w) if w == FIRST_BACKOFF * 2), "a failed probe doubles the wait");
        assert_eq!(reach.gauge.get(), 1);
        tokio::time::advance(FIRST_BACKOFF * 2).await;
        reach.note(Ok(503));
        assert_eq!(reach.turn(), Turn::Read, "any answer: the bot is up");
        assert_eq!(reach.gauge.get(), 0);
    }

    #[test]
    fn a_slow_bot_is_not_backed_off() {
        let reach = reach();
        reach.note(Err(&SendError::Timeout));
        reach.note(Err(&SendError::Io("reset".into())));
        assert_eq!(reach.turn(), Turn::Read);
    }
}
