//! One `[[app]]` (or one included app file): its secrets, routes, dedupe and filters, inline
//! budgets and delivery policy.

use std::path::PathBuf;
use std::time::Duration;

use super::file::{AppSection, OneOrMany};
use super::values::{check_path, parse_upstream, Upstream};
use super::{interpolate, parse_duration, AppConfig, ConfigError, DeliveryConfig, EgressConfig, Secret, Validator};

/// Receipts must outlive Slack's replay window (5 minutes) with room to spare.
const MIN_RECEIPT_TTL: Duration = Duration::from_secs(600);

impl Validator<'_> {
    /// One app; `prefix` is `app[i].` in the main file and empty in an included file.
    /// `egress`: the `[egress]` section (its listener and Slack's API URL).
    pub(crate) fn app(&self, prefix: &str, a: &AppSection, egress: &EgressConfig) -> Result<AppConfig, ConfigError> {
        let egress_on = egress.listen.is_some();
        let key = |k: &str| format!("{prefix}{k}");
        let name = a.name.clone().ok_or_else(|| self.err(&key("name"), "is required"))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(self.err(&key("name"), "use letters, digits, '-' and '_' only"));
        }
        let secrets = match self.secrets(prefix, a) {
            Err(_) if self.secrets_optional => Vec::new(),
            r => r?,
        };
        let (upstream, socket_mode) = self.upstream(prefix, a, egress)?;
        let [events_path, commands_path, interactivity_path] = self.paths(prefix, a)?;
        let receipt_ttl = self.duration(&key("dedupe.ttl"), &a.dedupe.ttl, Duration::from_secs(25 * 3600))?;
        if receipt_ttl < MIN_RECEIPT_TTL {
            return Err(self.err(
                &key("dedupe.ttl"),
                "must be at least 10m: a receipt must outlive Slack's 5-minute signature window (and Slack \
                 retries for up to 24h with Delayed Events)",
            ));
        }
        let mut delivery = self.delivery(prefix, a)?;
        let upstreams = self.app_routes(prefix, a, &mut delivery, socket_mode.is_some() && egress_on)?;
        let shadow = a.shadow.as_ref().map(|s| self.shadow(prefix, s, egress_on)).transpose()?;
        let pause_answer = self.pause_answer(prefix, &a.pause_answer)?;
        let rules = self.rules(prefix, a)?;
        let inline_command = self.inline(&key("inline.command"), &a.inline.command, &delivery)?;
        let inline_interactivity = self.inline(&key("inline.interactivity"), &a.inline.interactivity, &delivery)?;
        let turns = self.turns(prefix, &a.turns, egress_on)?;
        let runs = self.runs(prefix, &a.rerun_lost, a.rerun_limit, upstream.socket, egress_on)?;
        Ok(AppConfig {
            name,
            source: self.file.clone(),
            label: prefix.trim_end_matches('.').to_string(),
            secrets,
            upstream,
            events_path,
            commands_path,
            interactivity_path,
            passthrough: a.passthrough.clone(),
            receipt_ttl,
            message_dedupe: a.dedupe.message.unwrap_or(false),
            cancel_on_delete: a.dedupe.cancel_on_delete.unwrap_or(false),
            rules,
            inline_command,
            inline_interactivity,
            delivery,
            turns,
            socket_mode,
            upstreams,
            shadow,
            pause_answer,
            runs,
        })
    }

    /// Where Slack sends its events, commands and interactions (`/slack/events` unless set),
    /// with the passthrough paths checked.
    fn paths(&self, prefix: &str, a: &AppSection) -> Result<[String; 3], ConfigError> {
        let path = |k: &str, v: &Option<String>| -> Result<String, ConfigError> {
            let p = v.clone().unwrap_or_else(|| "/slack/events".into());
            check_path(&p).map_err(|m| self.err(&format!("{prefix}{k}"), m))?;
            Ok(p)
        };
        for (j, p) in a.passthrough.iter().enumerate() {
            check_path(p).map_err(|m| self.err(&format!("{prefix}passthrough[{j}]"), m))?;
        }
        Ok([
            path("events_path", &a.events_path)?,
            path("commands_path", &a.commands_path)?,
            path("interactivity_path", &a.interactivity_path)?,
        ])
    }

    /// The bot's URL (or `"socket"`), and Socket Mode toward Slack.
    fn upstream(
        &self,
        prefix: &str,
        a: &AppSection,
        egress: &EgressConfig,
    ) -> Result<(Upstream, Option<super::SocketModeConfig>), ConfigError> {
        let key = format!("{prefix}upstream");
        let upstream = match a.upstream.as_deref().ok_or_else(|| self.err(&key, "is required"))? {
            "socket" => Upstream::socket(),
            url => parse_upstream(url).map_err(|m| self.err(&key, m))?,
        };
        let socket_mode = self.socket_mode(prefix, &a.socket_mode, &egress.slack_api_url.url)?;
        if upstream.socket {
            self.socket_upstream(prefix, a, socket_mode.is_some(), egress.listen.is_some())?;
        }
        Ok((upstream, socket_mode))
    }

    /// `upstream = "socket"`: the bot connects in through the egress with its app token, and
    /// nothing can be reverse-proxied to it.
    fn socket_upstream(
        &self,
        prefix: &str,
        a: &AppSection,
        has_socket_mode: bool,
        egress_on: bool,
    ) -> Result<(), ConfigError> {
        let key = |k: &str| format!("{prefix}{k}");
        if !a.passthrough.is_empty() {
            return Err(self.err(
                &key("passthrough"),
                "must be empty with upstream = \"socket\": a Socket Mode bot has no URL to send them to",
            ));
        }
        if !has_socket_mode {
            return Err(self.err(
                &key("upstream"),
                "\"socket\" needs socket_mode = { app_token = \"${XAPP_TOKEN}\" } (the bot's apps.connections.open \
                 is matched by it; connections = 0 opens none to Slack)",
            ));
        }
        if !egress_on {
            return Err(self.err(
                &key("upstream"),
                "\"socket\" needs [egress] listen: the bot opens its socket with apps.connections.open through the egress",
            ));
        }
        Ok(())
    }

    /// The filters: `ignore = { … }` and `dedupe.edits`.
    fn rules(&self, prefix: &str, a: &AppSection) -> Result<crate::slack::Rules, ConfigError> {
        let edits_mention_added = match a.dedupe.edits.as_deref() {
            None | Some("all") => false,
            Some("mention-added") => true,
            Some(other) => {
                let key = format!("{prefix}dedupe.edits");
                return Err(self.err(&key, format!("`{other}`: use \"all\" or \"mention-added\"")));
            }
        };
        let ig = &a.ignore;
        Ok(crate::slack::Rules {
            own_messages: ig.own_messages.unwrap_or(true),
            bot_messages: ig.bot_messages.unwrap_or(false),
            allow_bots: ig.allow_bots.clone(),
            subtypes: ig.subtypes.clone(),
            channels_allow: ig.channels_allow.clone(),
            channels_deny: ig.channels_deny.clone(),
            edits_mention_added,
        })
    }

    /// An inline budget: a duration below Slack's 3 s, or "off".
    fn inline(&self, key: &str, value: &Option<String>, d: &DeliveryConfig) -> Result<Option<Duration>, ConfigError> {
        let budget = match value.as_deref() {
            Some("off") => return Ok(None),
            // The attempt behind the inline answer never outlives one delivery timeout.
            None => Duration::from_millis(2500).min(d.timeout),
            Some(text) => parse_duration(text).map_err(|m| self.err(key, m))?,
        };
        if budget.is_zero() || budget > Duration::from_millis(2900) {
            return Err(self.err(key, "must be above 0 and at most 2900ms (Slack waits 3 s), or \"off\""));
        }
        if budget > d.timeout {
            return Err(self.err(key, "must not exceed delivery.timeout"));
        }
        Ok(Some(budget))
    }

    fn secrets(&self, prefix: &str, a: &AppSection) -> Result<Vec<Secret>, ConfigError> {
        let key = |k: &str| format!("{prefix}{k}");
        let values: Vec<String> = match (&a.signing_secret, &a.signing_secret_file) {
            (Some(_), Some(_)) => {
                return Err(self.err(&key("signing_secret"), "set signing_secret or signing_secret_file, not both"));
            }
            (None, None) => return Err(self.err(&key("signing_secret"), "is required (or signing_secret_file)")),
            (Some(OneOrMany::One(s)), None) => vec![s.clone()],
            (Some(OneOrMany::Many(v)), None) => v.clone(),
            (None, Some(f)) => {
                let p = self.base.map(|b| b.join(f)).unwrap_or_else(|| PathBuf::from(f));
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| self.err(&key("signing_secret_file"), format!("cannot read {}: {e}", p.display())))?;
                text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
            }
        };
        let mut secrets = Vec::new();
        for (j, v) in values.iter().enumerate() {
            let k = if values.len() > 1 { key(&format!("signing_secret[{j}]")) } else { key("signing_secret") };
            if a.signing_secret.is_some() && !v.contains("${") {
                return Err(self.err(
                    &k,
                    "write \"${ENV_VAR}\" (or use signing_secret_file): secrets never live in gateway.toml itself",
                ));
            }
            let value = interpolate(v).map_err(|m| self.err(&k, m))?;
            if value.is_empty() {
                return Err(self.err(&k, "is empty"));
            }
            secrets.push(Secret::new(&value));
        }
        if secrets.is_empty() {
            return Err(self.err(&key("signing_secret"), "no secret given"));
        }
        Ok(secrets)
    }

    fn delivery(&self, prefix: &str, a: &AppSection) -> Result<DeliveryConfig, ConfigError> {
        let d = &a.delivery;
        let key = |k: &str| format!("{prefix}delivery.{k}");
        let timeout = self.duration(&key("timeout"), &d.timeout, Duration::from_secs(10))?;
        let retry_initial = self.duration(&key("retry_initial"), &d.retry_initial, Duration::from_secs(1))?;
        let retry_max = self.duration(&key("retry_max"), &d.retry_max, Duration::from_secs(300))?;
        let give_up_after = self.duration(&key("give_up_after"), &d.give_up_after, Duration::from_secs(24 * 3600))?;
        let lease = self.duration(&key("lease"), &d.lease, Duration::from_secs(60).max(timeout * 2))?;
        let max_in_flight = d.max_in_flight.unwrap_or(32);
        let dead_ttl = self.duration(&key("dead_ttl"), &d.dead_ttl, Duration::from_secs(7 * 24 * 3600))?;
        if dead_ttl < Duration::from_secs(60) {
            return Err(self.err(&key("dead_ttl"), "must be at least 1m"));
        }
        let dead_max = d.dead_max.unwrap_or(100_000);
        if !(1..=100_000_000).contains(&dead_max) {
            return Err(self.err(&key("dead_max"), "must be between 1 and 100000000"));
        }
        if timeout.is_zero() {
            return Err(self.err(&key("timeout"), "must be above 0"));
        }
        if lease <= timeout {
            return Err(self.err(&key("lease"), "must be longer than delivery.timeout"));
        }
        if retry_initial.is_zero() || retry_initial > retry_max {
            return Err(self.err(&key("retry_initial"), "must be above 0 and at most retry_max"));
        }
        if !(1..=10_000).contains(&max_in_flight) {
            return Err(self.err(&key("max_in_flight"), "must be between 1 and 10000"));
        }
        Ok(DeliveryConfig {
            timeout,
            max_in_flight,
            retry_initial,
            retry_max,
            give_up_after,
            lease,
            dead_ttl,
            dead_max,
        })
    }
}
