//! `socket_mode = { app_token, connections, api_url }` per app, and `upstream = "socket"`:
//! Socket Mode in both directions (see `crate::socket`).

use std::path::PathBuf;

use serde::Deserialize;

use super::values::{parse_upstream, Upstream};
use super::{interpolate, ConfigError, Secret, Validator};

/// Slack allows this many Socket Mode connections per app, across every process.
pub const SLACK_MAX_CONNECTIONS: u16 = 10;

/// `socket_mode = { … }` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketModeSection {
    pub app_token: Option<String>,
    pub app_token_file: Option<String>,
    pub connections: Option<u16>,
    pub api_url: Option<String>,
}

/// An app's Socket Mode: its app-level token (`xapp-…`), how many sockets this process holds
/// to Slack (0: none, the token only matches the bot's own `apps.connections.open`), and where
/// `apps.connections.open` is called.
#[derive(Debug, Clone)]
pub struct SocketModeConfig {
    pub app_token: Secret,
    pub connections: u16,
    pub api_url: Upstream,
}

impl Validator<'_> {
    /// `socket_mode`, when set; `default_api` is `[egress] slack_api_url`.
    pub(crate) fn socket_mode(
        &self,
        prefix: &str,
        s: &Option<SocketModeSection>,
        default_api: &str,
    ) -> Result<Option<SocketModeConfig>, ConfigError> {
        let Some(s) = s else { return Ok(None) };
        let key = |k: &str| format!("{prefix}socket_mode.{k}");
        let token = match (&s.app_token, &s.app_token_file) {
            (Some(_), Some(_)) => return Err(self.err(&key("app_token"), "set app_token or app_token_file, not both")),
            (None, None) => return Err(self.err(&key("app_token"), "is required (or app_token_file)")),
            (Some(t), None) => {
                if !t.contains("${") {
                    return Err(self.err(
                        &key("app_token"),
                        "write \"${ENV_VAR}\" (or use app_token_file): secrets never live in gateway.toml itself",
                    ));
                }
                match interpolate(t) {
                    Err(_) if self.secrets_optional => String::new(),
                    r => r.map_err(|m| self.err(&key("app_token"), m))?,
                }
            }
            (None, Some(f)) => {
                let p = self.base.map(|b| b.join(f)).unwrap_or_else(|| PathBuf::from(f));
                match std::fs::read_to_string(&p) {
                    Ok(text) => text.trim().to_string(),
                    Err(_) if self.secrets_optional => String::new(),
                    Err(e) => {
                        return Err(self.err(&key("app_token_file"), format!("cannot read {}: {e}", p.display())));
                    }
                }
            }
        };
        if !self.secrets_optional && !token.starts_with("xapp-") {
            return Err(self.err(&key("app_token"), "is not an app-level token (they start with `xapp-`)"));
        }
        let connections = s.connections.unwrap_or(2);
        if connections > SLACK_MAX_CONNECTIONS {
            return Err(self.err(&key("connections"), "must be at most 10 (Slack allows 10 per app)"));
        }
        let api = s.api_url.as_deref().unwrap_or(default_api);
        let mut api_url = parse_upstream(api).map_err(|m| self.err(&key("api_url"), m))?;
        api_url.path.get_or_insert_with(|| "/".into());
        Ok(Some(SocketModeConfig { app_token: Secret::new(&token), connections, api_url }))
    }
}

/// Warnings `slackgate check` prints: the sockets all replicas hold past Slack's 10.
pub fn warnings(apps: &[std::sync::Arc<super::AppConfig>], replicas: u16) -> Vec<String> {
    apps.iter()
        .filter_map(|a| a.socket_mode.as_ref().map(|s| (a, s)))
        .filter(|(_, s)| u32::from(s.connections) * u32::from(replicas) > u32::from(SLACK_MAX_CONNECTIONS))
        .map(|(a, s)| {
            format!(
                "app {}: socket_mode.connections = {} on {replicas} replicas opens {} sockets; Slack allows {} per \
                 app (the ones past it are refused)",
                a.name,
                s.connections,
                u32::from(s.connections) * u32::from(replicas),
                SLACK_MAX_CONNECTIONS
            )
        })
        .collect()
}
