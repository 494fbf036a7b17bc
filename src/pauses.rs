//! Pauses (DESIGN "Pause"): what an operator stopped delivering — an app, a team of it, or a
//! channel — held in Redis (`outbox::pauses`) and read by every process into this snapshot,
//! which the workers and the ingress consult with no round trip. A pause reaches every process
//! within one refresh ([`REFRESH`]); the processes show how many pauses they hold
//! (`slackgate_pauses`), so a caller can wait for it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often each process reads the pauses again.
pub const REFRESH: Duration = Duration::from_millis(500);
/// A scope's "any": a pause of a whole app (or of every channel of a team).
pub const ANY: &str = "*";

/// One pause: its scope, and who set it when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub app: String,
    /// `*` for every team.
    pub team: String,
    /// `*` for every channel.
    pub channel: String,
    pub by: String,
    pub at_ms: u64,
}

impl Pause {
    /// The registry's field: `app`, `team` and `channel` joined by tabs (no Slack id holds one).
    pub fn field(app: &str, team: &str, channel: &str) -> String {
        format!("{app}\t{team}\t{channel}")
    }

    /// The scope as the release script takes it: `team\tchannel`.
    pub fn scope(&self) -> String {
        format!("{}\t{}", self.team, self.channel)
    }

    /// Whether it stops a delivery of its app from `team` in `channel` (unknown: `None`). A
    /// pause of a team or channel never stops a delivery that names neither.
    pub fn covers(&self, team: Option<&str>, channel: Option<&str>) -> bool {
        let holds = |scope: &str, v: Option<&str>| scope == ANY || v == Some(scope);
        holds(&self.team, team) && holds(&self.channel, channel)
    }

    /// Whether it needs a delivery's team or channel to decide.
    pub fn reads_place(&self) -> bool {
        self.team != ANY || self.channel != ANY
    }

    /// `app bot`, `app bot team T1 channel C1`.
    pub fn describe(&self) -> String {
        let mut out = format!("app {}", self.app);
        for (k, v) in [("team", &self.team), ("channel", &self.channel)] {
            if v != ANY {
                out.push_str(&format!(" {k} {v}"));
            }
        }
        out
    }
}

/// The pauses as this process last read them.
#[derive(Default)]
pub struct Pauses {
    now: RwLock<Arc<Snapshot>>,
}

/// The pauses by app, and a number that changes whenever they do.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub by_app: HashMap<String, Vec<Pause>>,
    pub generation: u64,
}

impl Snapshot {
    /// The pause that stops a delivery of `app` from `team` in `channel`, if one does.
    pub fn covering(&self, app: &str, team: Option<&str>, channel: Option<&str>) -> Option<&Pause> {
        self.by_app.get(app)?.iter().find(|p| p.covers(team, channel))
    }

    pub fn of(&self, app: &str) -> &[Pause] {
        self.by_app.get(app).map_or(&[], Vec::as_slice)
    }
}

impl Pauses {
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.now.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Take what Redis holds now; returns whether it changed.
    pub fn set(&self, mut pauses: Vec<Pause>) -> bool {
        pauses.sort_by(|a, b| (&a.app, &a.team, &a.channel).cmp(&(&b.app, &b.team, &b.channel)));
        let mut by_app: HashMap<String, Vec<Pause>> = HashMap::new();
        for p in pauses {
            by_app.entry(p.app.clone()).or_default().push(p);
        }
        let mut now = self.now.write().unwrap_or_else(|e| e.into_inner());
        if now.by_app == by_app {
            return false;
        }
        *now = Arc::new(Snapshot { by_app, generation: now.generation + 1 });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(team: &str, channel: &str) -> Pause {
        Pause { app: "bot".into(), team: team.into(), channel: channel.into(), by: "ops".into(), at_ms: 1 }
    }

    #[test]
    fn a_pause_covers_its_scope_only() {
        let app = pause(ANY, ANY);
        assert!(app.covers(None, None) && app.covers(Some("T1"), Some("C1")));
        let channel = pause(ANY, "C1");
        assert!(channel.covers(Some("T1"), Some("C1")));
        assert!(!channel.covers(Some("T1"), Some("C2")));
        assert!(!channel.covers(Some("T1"), None), "a delivery that names no channel flows");
        let team = pause("T1", ANY);
        assert!(team.covers(Some("T1"), Some("C9")) && !team.covers(Some("T2"), Some("C9")));
        assert_eq!(pause("T1", "C1").describe(), "app bot team T1 channel C1");
    }

    #[test]
    fn a_snapshot_changes_only_when_the_pauses_do() {
        let p = Pauses::default();
        assert!(!p.set(vec![]), "none, as before");
        assert!(p.set(vec![pause(ANY, "C1")]));
        let g = p.snapshot().generation;
        assert!(!p.set(vec![pause(ANY, "C1")]));
        assert_eq!(p.snapshot().generation, g);
        assert!(p.snapshot().covering("bot", Some("T1"), Some("C1")).is_some());
        assert!(p.snapshot().covering("other", Some("T1"), Some("C1")).is_none());
        assert!(p.set(vec![]));
        assert!(p.snapshot().covering("bot", Some("T1"), Some("C1")).is_none());
    }
}
