//! `[egress]`: the listener the bots' Web API clients point at, and what it does to writes.

use std::time::Duration;

use super::file::FileConfig;
use super::values::{check_addr, parse_upstream};
use super::{ConfigError, Upstream, Validator};

/// The Web API methods that write: deduplicated, attributed, paced. Everything else is read
/// (or a write we do not know) and passes straight through with no Redis on its path.
pub const DEFAULT_WRITE_METHODS: &[&str] = &[
    "chat.postMessage",
    "chat.postEphemeral",
    "chat.update",
    "chat.delete",
    "chat.scheduleMessage",
    "chat.meMessage",
    "reactions.add",
    "reactions.remove",
    "views.open",
    "views.push",
    "views.update",
    "views.publish",
    "files.completeUploadExternal",
    "pins.add",
    "pins.remove",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "assistant.threads.setStatus",
    // Writes, but no answer: the egress's turns never hold, end or withhold a turn by them.
    "assistant.threads.setSuggestedPrompts",
    "assistant.threads.setTitle",
    "agents.sessions.setStatus",
    "agents.sessions.rename",
];

#[derive(Debug, Clone, PartialEq)]
pub struct EgressConfig {
    /// Where the bots' Web API clients send their calls; `None`: no egress.
    pub listen: Option<String>,
    /// Slack's Web API, `https://slack.com/api/` (tests point it at a local fake).
    pub slack_api_url: Upstream,
    pub write_methods: Vec<String>,
    /// A write without `Idempotency-Key` repeats an earlier identical one, whose answer never
    /// reached its client, within this.
    pub retry_window: Duration,
    /// A write is attributed to a delivered message of its thread within this.
    pub attribution_window: Duration,
    /// Withhold a write whose source message was edited since delivery.
    pub withhold_edited: bool,
    /// Replay the k-th write of a redelivered run instead of posting again.
    pub rerun_replay: bool,
    /// chat.postMessage pacing per channel, shared by every replica.
    pub pace_per_second: f64,
    pub pace_burst: u32,
    /// How long a write may be held (pacing, Slack's 429) before the 429 goes to the bot.
    pub max_wait: Duration,
    /// One call to Slack.
    pub timeout: Duration,
    /// How long an uncertain post is looked for before it is posted.
    pub evidence_window: Duration,
    /// Having received one of an app's own messages in a channel, the gateway counts on seeing
    /// the next for this long: there, no evidence within the window means not posted.
    pub evidence_recent: Duration,
    /// Slack's tier for `conversations.history` and `.replies` of the apps behind the egress.
    pub history_tier: HistoryTier,
    /// Answer a `conversations.replies` Slack refused (429) from the gateway's record of the
    /// thread, when it holds the thread from its root.
    pub replies_fallback: bool,
    /// The record of a thread lives this long after its root.
    pub replies_keep: Duration,
    /// How the gateway closes a stream whose question is gone: stop it and replace its text
    /// with `close_line` (`false`), or stop and delete it (`true`).
    pub close_by_delete: bool,
    /// What a closed stream's message says instead of its half answer.
    pub close_line: String,
}

/// A closed stream's line unless `close_line` says another.
pub const CLOSE_LINE: &str = "_This answer was stopped: its question was removed._";

/// Slack's rate-limit tier for the history reads (`conversations.history`, `.replies`), each
/// method its own budget per app and workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryTier {
    /// Internal and Marketplace apps: 50+ calls a minute.
    Tier3,
    /// Commercially distributed apps outside the Marketplace (created since 2025-05-29): one
    /// call a minute, 15 messages a page.
    Tier1,
}

impl HistoryTier {
    /// Calls a minute per method.
    pub fn per_minute(self) -> u32 {
        match self {
            HistoryTier::Tier3 => 50,
            HistoryTier::Tier1 => 1,
        }
    }

    /// Messages a page at most.
    pub fn page(self) -> usize {
        match self {
            HistoryTier::Tier3 => 1_000,
            HistoryTier::Tier1 => 15,
        }
    }
}

impl EgressConfig {
    pub fn is_write(&self, method: &str) -> bool {
        self.write_methods.iter().any(|m| m == method)
    }
}

impl Validator<'_> {
    pub(super) fn egress(&self, raw: &FileConfig, listen_override: Option<&str>) -> Result<EgressConfig, ConfigError> {
        let e = &raw.egress;
        let key = |k: &str| format!("egress.{k}");
        let listen = match listen_override.map(String::from).or_else(|| e.listen.clone()) {
            None => None,
            Some(l) if l == "off" => None,
            Some(l) => {
                check_addr(&l).map_err(|m| self.err(&key("listen"), m))?;
                Some(l)
            }
        };
        let api = e.slack_api_url.clone().unwrap_or_else(|| "https://slack.com/api/".into());
        let mut slack_api_url = parse_upstream(&api).map_err(|m| self.err(&key("slack_api_url"), m))?;
        let path = slack_api_url.path.get_or_insert_with(|| "/".into());
        if !path.ends_with('/') {
            path.push('/');
        }
        let write_methods = match &e.write_methods {
            None => DEFAULT_WRITE_METHODS.iter().map(|m| m.to_string()).collect(),
            Some(list) => list.clone(),
        };
        let rerun_replay = self.switch(&key("rerun"), e.rerun.as_deref(), ("off", "replay"))?;
        let withhold_edited = self.switch(&key("on_edited"), e.on_edited.as_deref(), ("post", "withhold"))?;
        let (pace_per_second, pace_burst) = self.pace(e)?;
        let (close_by_delete, close_line) = self.close_stream(e)?;
        let positive = |k: &str, v: &Option<String>, default: Duration| -> Result<Duration, ConfigError> {
            let d = self.duration(&key(k), v, default)?;
            if d.is_zero() {
                return Err(self.err(&key(k), "must be above 0"));
            }
            Ok(d)
        };
        Ok(EgressConfig {
            listen,
            slack_api_url,
            write_methods,
            retry_window: positive("retry_window", &e.retry_window, Duration::from_secs(35 * 60))?,
            attribution_window: positive("attribution_window", &e.attribution_window, Duration::from_secs(15 * 60))?,
            withhold_edited,
            rerun_replay,
            pace_per_second,
            pace_burst,
            max_wait: positive("max_wait", &e.max_wait, Duration::from_secs(10))?,
            timeout: positive("timeout", &e.timeout, Duration::from_secs(10))?,
            evidence_window: positive("evidence_window", &e.evidence_window, Duration::from_secs(5))?,
            evidence_recent: positive("evidence_recent", &e.evidence_recent, Duration::from_secs(3600))?,
            history_tier: match self.switch(&key("history_tier"), e.history_tier.as_deref(), ("tier3", "tier1"))? {
                false => HistoryTier::Tier3,
                true => HistoryTier::Tier1,
            },
            replies_fallback: self.switch(
                &key("replies_fallback"),
                e.replies_fallback.as_deref(),
                ("off", "record"),
            )?,
            replies_keep: positive("replies_keep", &e.replies_keep, Duration::from_secs(24 * 3600))?,
            close_by_delete,
            close_line,
        })
    }

    /// How a stream whose question is gone is closed: by deleting it, else the line it says.
    fn close_stream(&self, e: &super::file::EgressSection) -> Result<(bool, String), ConfigError> {
        let by_delete = self.switch("egress.close_stream", e.close_stream.as_deref(), ("replace", "delete"))?;
        let line = match e.close_line.as_deref().map(str::trim) {
            None => CLOSE_LINE.to_string(),
            Some("") => {
                return Err(self.err("egress.close_line", "must not be empty (or use close_stream = \"delete\")"))
            }
            Some(line) => line.to_string(),
        };
        Ok((by_delete, line))
    }

    /// chat.postMessage's pace: a rate and a burst.
    fn pace(&self, e: &super::file::EgressSection) -> Result<(f64, u32), ConfigError> {
        let pace_per_second = e.pace_per_second.unwrap_or(1.0);
        if !(0.01..=1000.0).contains(&pace_per_second) {
            return Err(self.err("egress.pace_per_second", "must be between 0.01 and 1000"));
        }
        let pace_burst = e.pace_burst.unwrap_or(3);
        if !(1..=1000).contains(&pace_burst) {
            return Err(self.err("egress.pace_burst", "must be between 1 and 1000"));
        }
        Ok((pace_per_second, pace_burst))
    }

    /// A two-way setting: `false` for `off` (the default), `true` for `on`.
    fn switch(&self, key: &str, value: Option<&str>, (off, on): (&str, &str)) -> Result<bool, ConfigError> {
        match value {
            None => Ok(false),
            Some(v) if v == off => Ok(false),
            Some(v) if v == on => Ok(true),
            Some(other) => Err(self.err(key, format!("`{other}`: use \"{off}\" or \"{on}\""))),
        }
    }
}
