//! `turns = { order, on_newer, end, quiet, pass_after, timeout }`: one turn of a conversation at
//! a time (see `outbox::turns`). The defaults keep every delivery going at once.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Validator};

/// How a conversation's deliveries reach the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// All at once, as they come (no turns).
    Off,
    /// One turn at a time, in message order.
    Queue,
    /// One turn at a time; of those waiting when a turn ends, only the newest.
    Latest,
    /// No order: each run of the bot is watched as a turn of its own (keyed by its delivery),
    /// holding nothing back (an app that re-runs lost runs; never written in a config).
    Watch,
}

impl Order {
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Off => "off",
            Order::Queue => "queue",
            Order::Latest => "latest",
            Order::Watch => "watch",
        }
    }
}

/// What ends a turn besides a refusal, `pass_after` and `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The bot's writes through the egress, then `quiet` (ack-first bots answer 2xx at once).
    Reply,
    /// The bot's 2xx (bots that answer after their work).
    Answer,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::Reply => "reply",
            End::Answer => "answer",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnsConfig {
    pub order: Order,
    /// Withhold a turn's new post when a newer message of its conversation waits.
    pub withhold_on_newer: bool,
    pub end: End,
    /// With `end = "reply"`: a turn ends this long after the bot's last write.
    pub quiet: Duration,
    /// A turn whose bot wrote nothing this long after its answer ends (the bot passed).
    pub pass_after: Duration,
    /// Every turn ends by this long after it began.
    pub timeout: Duration,
    /// An open stream holds its turn until this long without a call (under Slack's own expiry
    /// of about five minutes).
    pub stream_idle: Duration,
}

impl TurnsConfig {
    pub fn is_on(&self) -> bool {
        self.order != Order::Off
    }

    /// These turns, when the app takes them (`None`: `order = "off"`).
    pub fn when_on(&self) -> Option<TurnsConfig> {
        self.is_on().then_some(*self)
    }

    /// How long a status ("is thinking…") set before the first answer holds the turn: Slack's
    /// own life of a status (two minutes), or `pass_after` when that is longer.
    pub fn status_hold(&self) -> Duration {
        STATUS_LIFE.max(self.pass_after)
    }
}

/// How long Slack shows an assistant thread's status unless it is cleared or replaced.
const STATUS_LIFE: Duration = Duration::from_secs(120);

impl Default for TurnsConfig {
    fn default() -> Self {
        TurnsConfig {
            order: Order::Off,
            withhold_on_newer: false,
            end: End::Answer,
            quiet: Duration::from_secs(3),
            pass_after: Duration::from_secs(45),
            timeout: Duration::from_secs(180),
            stream_idle: Duration::from_secs(60),
        }
    }
}

/// `turns = { … }` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnsSection {
    pub order: Option<String>,
    pub on_newer: Option<String>,
    pub end: Option<String>,
    pub quiet: Option<String>,
    pub pass_after: Option<String>,
    pub timeout: Option<String>,
    pub stream_idle: Option<String>,
}

impl Validator<'_> {
    /// An app's turns; `egress_on`: whether `[egress] listen` is set (the default `end` is
    /// "reply" then, and "reply" needs it).
    pub(crate) fn turns(&self, prefix: &str, t: &TurnsSection, egress_on: bool) -> Result<TurnsConfig, ConfigError> {
        let key = |k: &str| format!("{prefix}turns.{k}");
        let d = TurnsConfig::default();
        let order = match t.order.as_deref() {
            None | Some("off") => Order::Off,
            Some("queue") => Order::Queue,
            Some("latest") => Order::Latest,
            Some(other) => {
                return Err(self.err(&key("order"), format!("`{other}`: use \"off\", \"queue\" or \"latest\"")))
            }
        };
        let withhold_on_newer = match t.on_newer.as_deref() {
            None | Some("post") => false,
            Some("withhold") => true,
            Some(other) => return Err(self.err(&key("on_newer"), format!("`{other}`: use \"post\" or \"withhold\""))),
        };
        let end =
            match t.end.as_deref() {
                None if egress_on => End::Reply,
                None | Some("answer") => End::Answer,
                Some("reply") if egress_on => End::Reply,
                Some("reply") => return Err(self.err(
                    &key("end"),
                    "\"reply\" needs `[egress] listen`: the bot's replies are seen only through the egress (or use \
                     \"answer\")",
                )),
                Some(other) => return Err(self.err(&key("end"), format!("`{other}`: use \"reply\" or \"answer\""))),
            };
        if withhold_on_newer && order == Order::Off {
            return Err(self.err(
                &key("on_newer"),
                "\"withhold\" needs `order` \"queue\" or \"latest\": with no order, a write cannot be told to \
                 belong to an older delivery",
            ));
        }
        if withhold_on_newer && !egress_on {
            return Err(self.err(&key("on_newer"), "\"withhold\" needs `[egress] listen`: writes are withheld there"));
        }
        let positive = |k: &str, v: &Option<String>, default: Duration| -> Result<Duration, ConfigError> {
            let value = self.duration(&key(k), v, default)?;
            if value.is_zero() {
                return Err(self.err(&key(k), "must be above 0"));
            }
            Ok(value)
        };
        let quiet = positive("quiet", &t.quiet, d.quiet)?;
        let pass_after = positive("pass_after", &t.pass_after, d.pass_after)?;
        // `timeout` bounds every turn, whatever `quiet` and `pass_after` say.
        let timeout = positive("timeout", &t.timeout, d.timeout)?;
        let stream_idle = positive("stream_idle", &t.stream_idle, d.stream_idle)?;
        Ok(TurnsConfig { order, withhold_on_newer, end, quiet, pass_after, timeout, stream_idle })
    }
}
