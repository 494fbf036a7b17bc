//! `[ui]`: the operator's pages (`/ui/` on the admin listener) and the delivery history they
//! show.

use std::time::Duration;

use super::file::FileConfig;
use super::{ConfigError, Validator};

#[derive(Debug, Clone, PartialEq)]
pub struct UiConfig {
    /// How long a delivery's history is kept; zero: no history (the pages show the overview
    /// only, and nothing is written).
    pub history: Duration,
    /// At most this many deliveries per app in the history; the oldest go first.
    pub history_max: usize,
    /// Deliveries a second each gateway process keeps in full; past it (a flood) they are
    /// counted on the overview but not recorded.
    pub history_rate: u32,
    /// Message text on the pages and in `slackgate show`. Never the verification token,
    /// signatures or Web API tokens, whatever this says.
    pub show_text: bool,
    /// How long a login lasts.
    pub session: Duration,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            history: Duration::from_secs(24 * 3600),
            history_max: 10_000,
            history_rate: 100,
            show_text: false,
            session: Duration::from_secs(12 * 3600),
        }
    }
}

impl UiConfig {
    /// Whether deliveries are kept for the pages.
    pub fn keeps_history(&self) -> bool {
        !self.history.is_zero()
    }
}

impl Validator<'_> {
    pub(super) fn ui(&self, raw: &FileConfig) -> Result<UiConfig, ConfigError> {
        let u = &raw.ui;
        let d = UiConfig::default();
        let history = match u.history.as_deref() {
            Some("off") => Duration::ZERO,
            _ => self.duration("ui.history", &u.history, d.history)?,
        };
        if history > Duration::from_secs(30 * 24 * 3600) {
            return Err(self.err("ui.history", "at most 30d (the history lives in Redis' memory)"));
        }
        let history_max = u.history_max.unwrap_or(d.history_max);
        if !(100..=1_000_000).contains(&history_max) {
            return Err(self.err("ui.history_max", "must be between 100 and 1000000"));
        }
        let history_rate = u.history_rate.unwrap_or(d.history_rate);
        if !(1..=100_000).contains(&history_rate) {
            return Err(self.err("ui.history_rate", "must be between 1 and 100000 (deliveries a second)"));
        }
        let session = self.duration("ui.session", &u.session, d.session)?;
        if session < Duration::from_secs(60) || session > Duration::from_secs(30 * 24 * 3600) {
            return Err(self.err("ui.session", "must be between 1m and 30d"));
        }
        Ok(UiConfig { history, history_max, history_rate, show_text: u.show_text.unwrap_or(false), session })
    }
}
