//! `rerun_lost` and `rerun_limit` of an app: a run of the bot (what it does with one human
//! post, from the delivery to its last reply) that is lost with its bot is run again (see
//! `delivery::runs`).

use super::{ConfigError, End, Order, TurnsConfig, Validator};

/// Which lost runs are run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RerunLost {
    /// None.
    Off,
    /// A run whose Socket Mode socket closed before the run ended.
    Socket,
    /// Those, and a message addressed to the bot (a mention, a DM, an assistant thread) that
    /// got no write at all within `pass_after`.
    Addressed,
}

impl RerunLost {
    pub fn as_str(self) -> &'static str {
        match self {
            RerunLost::Off => "off",
            RerunLost::Socket => "socket",
            RerunLost::Addressed => "addressed",
        }
    }
}

/// An app's lost runs: which are run again, and how many times one delivery at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunsConfig {
    pub lost: RerunLost,
    pub limit: u32,
}

impl RunsConfig {
    pub const OFF: RunsConfig = RunsConfig { lost: RerunLost::Off, limit: 0 };

    pub fn is_on(&self) -> bool {
        self.lost != RerunLost::Off
    }

    /// These rules with at most `limit` re-runs of a delivery.
    pub fn with_limit(self, limit: u32) -> RunsConfig {
        RunsConfig { limit, ..self }
    }
}

/// The rules a run is tracked by, when an app tracks them: its turns' (`quiet`, `pass_after`,
/// `timeout`, `stream_idle`), and with `order = "off"` the order `watch` (each run its own
/// turn, keyed by its delivery, holding nothing) ending by the bot's replies.
pub fn run_rules(turns: &TurnsConfig, runs: &RunsConfig) -> Option<TurnsConfig> {
    if !runs.is_on() {
        return None;
    }
    if turns.is_on() {
        return Some(*turns);
    }
    Some(TurnsConfig { order: Order::Watch, withhold_on_newer: false, end: End::Reply, ..*turns })
}

impl Validator<'_> {
    /// `rerun_lost` (default "socket" for a Socket Mode bot, else "off") and `rerun_limit`
    /// (default 1).
    pub(crate) fn runs(
        &self,
        prefix: &str,
        lost: &Option<String>,
        limit: Option<i64>,
        socket: bool,
        egress_on: bool,
    ) -> Result<RunsConfig, ConfigError> {
        let key = |k: &str| format!("{prefix}{k}");
        let lost = match lost.as_deref() {
            None if socket && egress_on => RerunLost::Socket,
            None | Some("off") => RerunLost::Off,
            Some("socket") => RerunLost::Socket,
            Some("addressed") => RerunLost::Addressed,
            Some(other) => {
                return Err(self.err(&key("rerun_lost"), format!("`{other}`: use \"off\", \"socket\" or \"addressed\"")))
            }
        };
        if lost != RerunLost::Off && !egress_on {
            return Err(self.err(
                &key("rerun_lost"),
                "needs `[egress] listen`: a run is seen (its writes, its end) only through the egress",
            ));
        }
        let limit = match limit {
            None => 1,
            Some(n) if (0..=10).contains(&n) => n as u32,
            Some(_) => return Err(self.err(&key("rerun_limit"), "must be between 0 and 10")),
        };
        Ok(RunsConfig { lost, limit })
    }
}
