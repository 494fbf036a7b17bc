//! Where an app's deliveries go: `upstreams = [{ match, upstream, delivery }]` (the first entry
//! that matches a delivery decides its bot, and may change its delivery policy; `upstream` stays
//! the default), `shadow = { upstream, match, share, max_backlog }` (a second bot that gets a copy
//! of each matching delivery, its replies kept and never posted) and `pause_answer` (what a paused
//! app's inline payloads get).

use std::time::Duration;

use super::file::{AppSection, MatchSection, ShadowSection, UpstreamSection};
use super::values::{parse_upstream, Upstream};
use super::{AppConfig, ConfigError, DeliveryConfig, Validator};
use crate::slack::Kind;

/// What a delivery is, as a `match` reads it.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub kind: Kind,
    /// The event type, the command, or the interaction type.
    pub detail: &'a str,
    pub team: Option<&'a str>,
    pub channel: Option<&'a str>,
}

/// A `match`: every list given must hold the delivery's value (an empty list holds any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    pub kinds: Vec<Kind>,
    pub types: Vec<String>,
    pub teams: Vec<String>,
    pub channels: Vec<String>,
}

impl Match {
    pub fn matches(&self, f: &Facts<'_>) -> bool {
        let any = |list: &[String], v: Option<&str>| list.is_empty() || v.is_some_and(|v| list.iter().any(|x| x == v));
        (self.kinds.is_empty() || self.kinds.contains(&f.kind))
            && any(&self.types, Some(f.detail))
            && any(&self.teams, f.team)
            && any(&self.channels, f.channel)
    }

    /// Whether it reads the team or the channel (which a worker may have to read from the body).
    pub fn reads_place(&self) -> bool {
        !self.teams.is_empty() || !self.channels.is_empty()
    }

    /// `kinds=command types=/deploy`, or `any`.
    pub fn describe(&self) -> String {
        let kinds: Vec<String> = self.kinds.iter().map(|k| k.as_str().to_string()).collect();
        let parts: Vec<String> =
            [("kinds", &kinds), ("types", &self.types), ("teams", &self.teams), ("channels", &self.channels)]
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| format!("{k}={}", v.join(",")))
                .collect();
        if parts.is_empty() {
            "any".into()
        } else {
            parts.join(" ")
        }
    }
}

/// One entry of `upstreams`, validated: its delivery policy is the app's with the entry's keys
/// over it.
#[derive(Debug, Clone)]
pub struct Route {
    /// `upstreams[0]`: how metrics, logs and `check` name it.
    pub label: String,
    pub matcher: Match,
    pub upstream: Upstream,
    pub delivery: DeliveryConfig,
    /// Whether it sets its own `max_in_flight` (its attempts then have slots of their own).
    pub own_slots: bool,
}

/// The bot a delivery goes to, and its delivery policy.
#[derive(Debug, Clone, Copy)]
pub struct Chosen<'a> {
    /// `default` (the app's `upstream`) or the entry's label.
    pub label: &'a str,
    /// The entry's index in `upstreams`, when one matched.
    pub entry: Option<usize>,
    pub upstream: &'a Upstream,
    pub delivery: &'a DeliveryConfig,
}

/// The label of the app's own `upstream` among the entries.
pub const DEFAULT_ROUTE: &str = "default";

/// `shadow`, validated.
#[derive(Debug, Clone)]
pub struct ShadowConfig {
    pub upstream: Upstream,
    pub matcher: Match,
    /// The share of matching deliveries copied, in (0, 1].
    pub share: f64,
    /// Copies waiting for the shadow past this many are dropped (counted).
    pub max_backlog: u64,
}

impl ShadowConfig {
    /// Whether the delivery `id` (described by `f`) is copied to the shadow: it matches, and it
    /// falls in the `share` by a stable hash of its id (so every replica and every retry agree).
    pub fn takes(&self, f: &Facts<'_>, id: &str) -> bool {
        self.matcher.matches(f) && (self.share >= 1.0 || share_point(id) < self.share)
    }
}

/// Where a delivery id falls in [0, 1): FNV-1a, stable across processes and versions.
pub fn share_point(id: &str) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// What a paused app's inline payloads are answered: a body and its content type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseAnswer {
    pub body: String,
    pub content_type: &'static str,
}

impl AppConfig {
    /// The bot `f` goes to: the first entry of `upstreams` that matches, else the app's own.
    pub fn route(&self, f: &Facts<'_>) -> Chosen<'_> {
        match self.upstreams.iter().enumerate().find(|(_, r)| r.matcher.matches(f)) {
            Some((i, r)) => Chosen { label: &r.label, entry: Some(i), upstream: &r.upstream, delivery: &r.delivery },
            None => self.default_route(),
        }
    }

    /// The app's own `upstream` and `delivery`.
    pub fn default_route(&self) -> Chosen<'_> {
        Chosen { label: DEFAULT_ROUTE, entry: None, upstream: &self.upstream, delivery: &self.delivery }
    }

    /// Whether choosing a route (or the shadow's copy) reads the team or channel.
    pub fn routes_read_place(&self) -> bool {
        self.upstreams.iter().any(|r| r.matcher.reads_place())
            || self.shadow.as_ref().is_some_and(|s| s.matcher.reads_place())
    }

    /// Whether any delivery of the app may go to a Socket Mode bot.
    pub fn any_socket(&self) -> bool {
        self.upstream.socket || self.upstreams.iter().any(|r| r.upstream.socket)
    }

    /// Whether every delivery of the app goes to a Socket Mode bot.
    pub fn all_socket(&self) -> bool {
        self.upstream.socket && self.upstreams.iter().all(|r| r.upstream.socket)
    }
}

/// What the shadow's lane of app `bot` is called: `bot.shadow` (a name no app can take, `.`
/// being refused in app names). Its metrics, history and keys go by this name.
pub fn shadow_lane_name(app: &str) -> String {
    format!("{app}.shadow")
}

/// The key prefix of the shadow's conversation records (what its deliveries carried, where
/// the egress's shadow base looks up the delivery a write answers): `<prefix>.shadow`.
pub fn shadow_prefix(prefix: &str) -> String {
    format!("{prefix}.shadow")
}

/// The app a lane name belongs to (`bot` of `bot.shadow`), when it is one.
pub fn live_of_lane(name: &str) -> Option<&str> {
    name.strip_suffix(".shadow")
}

impl AppConfig {
    /// The shadow's lane, as an app of its own that the workers run like any: the shadow's
    /// deliveries on their own stream, with their own leases, retries, dead letters and turns
    /// (the app's delivery policy and `order`; a turn ends at the shadow's 2xx, as its writes
    /// never reach the turns), signed as the app's. `None` without a shadow.
    pub fn shadow_lane(&self) -> Option<AppConfig> {
        let shadow = self.shadow.as_ref()?;
        let mut turns = self.turns;
        turns.end = super::End::Answer;
        turns.withhold_on_newer = false;
        Some(AppConfig {
            name: shadow_lane_name(&self.name),
            label: format!("{} (shadow)", self.label),
            upstream: shadow.upstream.clone(),
            upstreams: Vec::new(),
            shadow: None,
            socket_mode: None,
            passthrough: Vec::new(),
            turns,
            runs: super::RunsConfig::OFF,
            ..self.clone()
        })
    }
}

impl Validator<'_> {
    /// A `match`, its kinds checked.
    pub(super) fn matcher(&self, key: &str, m: &MatchSection) -> Result<Match, ConfigError> {
        let mut kinds = Vec::new();
        for (j, k) in m.kinds.iter().enumerate() {
            kinds.push(match k.as_str() {
                "event" => Kind::Event,
                "command" => Kind::Command,
                "interactivity" => Kind::Interactivity,
                other => {
                    let message = format!("`{other}`: use \"event\", \"command\" or \"interactivity\"");
                    return Err(self.err(&format!("{key}.kinds[{j}]"), message));
                }
            });
        }
        for (name, list) in [("types", &m.types), ("teams", &m.teams), ("channels", &m.channels)] {
            if let Some(j) = list.iter().position(|v| v.trim().is_empty()) {
                return Err(self.err(&format!("{key}.{name}[{j}]"), "is empty"));
            }
        }
        Ok(Match { kinds, types: m.types.clone(), teams: m.teams.clone(), channels: m.channels.clone() })
    }

    /// An app's `upstreams`, and its lease made longer than each entry's timeout: by default
    /// twice the longest; one set must exceed them all. `socket_ok`: the app has Socket Mode
    /// and the egress on, so an entry may be `"socket"`.
    pub(super) fn app_routes(
        &self,
        prefix: &str,
        a: &AppSection,
        delivery: &mut DeliveryConfig,
        socket_ok: bool,
    ) -> Result<Vec<Route>, ConfigError> {
        let socket_ok = match socket_ok {
            true => Ok(()),
            false => Err("\"socket\" needs socket_mode = { app_token = \"${XAPP_TOKEN}\" } and [egress] listen".into()),
        };
        let mut routes = self.routes(prefix, &a.upstreams, delivery, socket_ok)?;
        let longest = longest_timeout(delivery, &routes);
        match a.delivery.lease {
            None => delivery.lease = delivery.lease.max(longest * 2),
            Some(_) if delivery.lease <= longest => {
                let key = format!("{prefix}delivery.lease");
                return Err(self.err(&key, "must be longer than every delivery.timeout of upstreams"));
            }
            Some(_) => {}
        }
        for r in &mut routes {
            r.delivery.lease = delivery.lease;
        }
        Ok(routes)
    }

    /// `upstreams`: each entry's bot (HTTP, or `"socket"` when the app has Socket Mode) and its
    /// delivery policy over the app's `base`.
    pub(super) fn routes(
        &self,
        prefix: &str,
        entries: &[UpstreamSection],
        base: &DeliveryConfig,
        socket_ok: Result<(), String>,
    ) -> Result<Vec<Route>, ConfigError> {
        let mut out = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let label = format!("upstreams[{i}]");
            let key = |k: &str| format!("{prefix}{label}.{k}");
            let matcher = self.matcher(&key("match"), &e.matcher)?;
            let upstream = match e.upstream.as_deref().ok_or_else(|| self.err(&key("upstream"), "is required"))? {
                "socket" => {
                    socket_ok.clone().map_err(|m| self.err(&key("upstream"), m))?;
                    Upstream::socket()
                }
                url => parse_upstream(url).map_err(|m| self.err(&key("upstream"), m))?,
            };
            let d = &e.delivery;
            let k = |n: &str| key(&format!("delivery.{n}"));
            let delivery = DeliveryConfig {
                timeout: self.duration(&k("timeout"), &d.timeout, base.timeout)?,
                retry_initial: self.duration(&k("retry_initial"), &d.retry_initial, base.retry_initial)?,
                retry_max: self.duration(&k("retry_max"), &d.retry_max, base.retry_max)?,
                give_up_after: self.duration(&k("give_up_after"), &d.give_up_after, base.give_up_after)?,
                max_in_flight: d.max_in_flight.unwrap_or(base.max_in_flight),
                ..base.clone()
            };
            if delivery.timeout.is_zero() {
                return Err(self.err(&k("timeout"), "must be above 0"));
            }
            if delivery.retry_initial.is_zero() || delivery.retry_initial > delivery.retry_max {
                return Err(self.err(&k("retry_initial"), "must be above 0 and at most retry_max"));
            }
            if !(1..=base.max_in_flight).contains(&delivery.max_in_flight) {
                let message = format!(
                    "must be between 1 and the app's delivery.max_in_flight ({}): it caps the entry's attempts \
                     within the app's",
                    base.max_in_flight
                );
                return Err(self.err(&k("max_in_flight"), message));
            }
            let own_slots = d.max_in_flight.is_some();
            out.push(Route { label, matcher, upstream, delivery, own_slots });
        }
        Ok(out)
    }

    /// `shadow`: an HTTP bot, with the egress on (its Web API client points there).
    pub(super) fn shadow(&self, prefix: &str, s: &ShadowSection, egress_on: bool) -> Result<ShadowConfig, ConfigError> {
        let key = |k: &str| format!("{prefix}shadow.{k}");
        let upstream = match s.upstream.as_deref().ok_or_else(|| self.err(&key("upstream"), "is required"))? {
            "socket" => {
                return Err(self.err(
                    &key("upstream"),
                    "must be an http(s) URL: a second Socket Mode bot of the same app cannot be told apart from the live one",
                ))
            }
            url => parse_upstream(url).map_err(|m| self.err(&key("upstream"), m))?,
        };
        if !egress_on {
            return Err(self.err(
                &key("upstream"),
                "needs [egress] listen: the shadow bot's Web API client points at the egress's shadow base, where its \
                 writes are kept and never posted",
            ));
        }
        let share = s.share.unwrap_or(1.0);
        if !(share > 0.0 && share <= 1.0) {
            return Err(self.err(&key("share"), "must be above 0 and at most 1.0"));
        }
        let max_backlog = s.max_backlog.unwrap_or(10_000);
        if !(1..=10_000_000).contains(&max_backlog) {
            return Err(self.err(&key("max_backlog"), "must be between 1 and 10000000"));
        }
        Ok(ShadowConfig { upstream, matcher: self.matcher(&key("match"), &s.matcher)?, share, max_backlog })
    }

    /// `pause_answer`: a JSON object is sent as JSON, anything else as text; none is an empty 200.
    pub(super) fn pause_answer(&self, prefix: &str, text: &Option<String>) -> Result<PauseAnswer, ConfigError> {
        let body = text.clone().unwrap_or_default();
        if body.len() > 3000 {
            return Err(self.err(&format!("{prefix}pause_answer"), "must be at most 3000 bytes"));
        }
        let json = body.trim_start().starts_with('{');
        if json && serde_json::from_str::<serde_json::Value>(&body).is_err() {
            return Err(self.err(&format!("{prefix}pause_answer"), "starts with `{` but is not valid JSON"));
        }
        let content_type = if json { "application/json" } else { "text/plain; charset=utf-8" };
        Ok(PauseAnswer { body, content_type })
    }
}

/// The lease an app needs: longer than the longest delivery timeout of its routes.
pub(super) fn longest_timeout(base: &DeliveryConfig, routes: &[Route]) -> Duration {
    routes.iter().map(|r| r.delivery.timeout).fold(base.timeout, Duration::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(kind: Kind, detail: &'a str, team: Option<&'a str>, channel: Option<&'a str>) -> Facts<'a> {
        Facts { kind, detail, team, channel }
    }

    #[test]
    fn a_match_needs_every_list_it_gives() {
        let m = Match { kinds: vec![Kind::Command], types: vec!["/deploy".into()], ..Match::default() };
        assert!(m.matches(&facts(Kind::Command, "/deploy", Some("T1"), None)));
        assert!(!m.matches(&facts(Kind::Command, "/other", Some("T1"), None)));
        assert!(!m.matches(&facts(Kind::Event, "/deploy", Some("T1"), None)));
        let c = Match { channels: vec!["C1".into()], ..Match::default() };
        assert!(c.matches(&facts(Kind::Event, "app_mention", None, Some("C1"))));
        assert!(
            !c.matches(&facts(Kind::Event, "app_mention", None, None)),
            "no channel: a channel list does not hold it"
        );
        assert!(Match::default().matches(&facts(Kind::Opaque, "", None, None)), "an empty match holds anything");
        assert_eq!(m.describe(), "kinds=command types=/deploy");
        assert_eq!(Match::default().describe(), "any");
    }

    #[test]
    fn a_share_is_stable_and_spread() {
        assert_eq!(share_point("a1b2"), share_point("a1b2"));
        let below = (0..10_000).filter(|i| share_point(&format!("d{i:x}")) < 0.3).count();
        assert!((2_700..3_300).contains(&below), "{below} of 10000 below 0.3");
    }
}
