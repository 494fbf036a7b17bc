//! Late answers to slash commands and block actions, posted to the payload's `response_url` —
//! the one URL the gateway ever takes from a payload, so it is held to Slack's own host.

use super::Kind;

/// How a bot's late answer is posted to `response_url`: JSON as is, anything else wrapped as
/// `{"text": …}`. `None` for an empty answer.
pub fn late_reply(content_type: Option<&str>, body: &[u8]) -> Option<Vec<u8>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    if content_type.is_some_and(|ct| ct.to_ascii_lowercase().starts_with("application/json")) {
        return Some(body.to_vec());
    }
    let text = String::from_utf8_lossy(body);
    Some(serde_json::json!({ "text": text }).to_string().into_bytes())
}

/// Whether a late answer of this delivery goes to its `response_url` (Slack keeps it valid
/// for 30 minutes): slash commands and block actions.
pub fn replies_late(kind: Kind, detail: &str) -> bool {
    kind == Kind::Command || (kind == Kind::Interactivity && detail == "block_actions")
}

/// What became of a bot's late answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyOutcome {
    Posted,
    /// Slack refused it or could not be reached; not retried (the URL is valid 5 times).
    Failed,
    /// The payload's `response_url` is not Slack's: never requested.
    Refused,
}

impl ReplyOutcome {
    pub const ALL: [ReplyOutcome; 3] = [ReplyOutcome::Posted, ReplyOutcome::Failed, ReplyOutcome::Refused];

    pub fn as_label(self) -> &'static str {
        match self {
            ReplyOutcome::Posted => "posted",
            ReplyOutcome::Failed => "failed",
            ReplyOutcome::Refused => "refused",
        }
    }
}

/// Why a `response_url` is not posted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RefusedUrl {
    #[error("response_url is not a URL")]
    NotUrl,
    #[error("response_url is not https")]
    NotHttps,
    #[error("response_url carries credentials")]
    Credentials,
    #[error("response_url's host is not an allowed Slack host")]
    Host,
}

/// Parse `url` and allow it only when it is `https://` to one of `allowed` (`host` for port
/// 443, `host:port` for another), with no credentials. Nothing else from a payload — `http://`,
/// loopback, the admin port, an internal name — is ever requested.
pub fn check_response_url(url: &str, allowed: &[String]) -> Result<url::Url, RefusedUrl> {
    let u = url::Url::parse(url).map_err(|_| RefusedUrl::NotUrl)?;
    if u.scheme() != "https" {
        return Err(RefusedUrl::NotHttps);
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(RefusedUrl::Credentials);
    }
    let host = match u.host() {
        Some(url::Host::Domain(d)) => d.to_ascii_lowercase(),
        _ => return Err(RefusedUrl::Host),
    };
    let port = u.port_or_known_default().unwrap_or(443);
    let ok = allowed.iter().any(|entry| match entry.rsplit_once(':') {
        Some((h, p)) => h == host && p.parse::<u16>().ok() == Some(port),
        None => *entry == host && port == 443,
    });
    if ok {
        Ok(u)
    } else {
        Err(RefusedUrl::Host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_replies() {
        assert_eq!(
            late_reply(Some("text/plain; charset=utf-8"), b"deploying prod"),
            Some(br#"{"text":"deploying prod"}"#.to_vec())
        );
        assert_eq!(late_reply(Some("application/json"), br#"{"blocks":[]}"#), Some(br#"{"blocks":[]}"#.to_vec()));
        assert_eq!(late_reply(None, b"  \n"), None);
        assert!(replies_late(Kind::Command, "/deploy"));
        assert!(replies_late(Kind::Interactivity, "block_actions"));
        assert!(!replies_late(Kind::Interactivity, "view_submission"));
        assert!(!replies_late(Kind::Event, "app_mention"));
    }

    #[test]
    fn only_slacks_https_hooks_are_posted_to() {
        let slack = vec!["hooks.slack.com".to_string()];
        let ok = check_response_url("https://hooks.slack.com/commands/T1/2/abc", &slack).unwrap();
        assert_eq!(ok.host_str(), Some("hooks.slack.com"));
        assert!(check_response_url("https://HOOKS.slack.com:443/x", &slack).is_ok());
        for (url, why) in [
            ("http://hooks.slack.com/commands/T1/2/abc", RefusedUrl::NotHttps),
            ("https://hooks.slack.com:8443/x", RefusedUrl::Host),
            ("https://hooks.slack.com.evil.example/x", RefusedUrl::Host),
            ("https://evil.example/hooks.slack.com", RefusedUrl::Host),
            ("https://127.0.0.1/x", RefusedUrl::Host),
            ("https://[::1]:9090/dlq/bot/purge", RefusedUrl::Host),
            ("https://localhost:9090/x", RefusedUrl::Host),
            ("https://user:pw@hooks.slack.com/x", RefusedUrl::Credentials),
            ("file:///etc/passwd", RefusedUrl::NotHttps),
            ("gopher://hooks.slack.com/", RefusedUrl::NotHttps),
            ("not a url", RefusedUrl::NotUrl),
            ("", RefusedUrl::NotUrl),
        ] {
            assert_eq!(check_response_url(url, &slack).unwrap_err(), why, "{url}");
        }
        let extra = vec!["hooks.slack.com".to_string(), "localhost:8443".to_string()];
        assert!(check_response_url("https://localhost:8443/hook", &extra).is_ok());
        assert!(check_response_url("https://localhost/hook", &extra).is_err(), "port must match");
    }
}

/// The body of a command or interaction with every `response_url` in it (a command's field; an
/// interaction's `response_url` and each of `response_urls`) replaced by `to` — what a shadow
/// bot gets, so that its late answers reach the gateway, never Slack. `None` when the body is
/// not such a form, or names none. Events carry none.
pub fn with_response_url(body: &[u8], to: &str) -> Option<Vec<u8>> {
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let mut changed = false;
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &pairs {
        let v = match k.as_str() {
            "response_url" => {
                changed = true;
                to.to_string()
            }
            "payload" => {
                let mut p = serde_json::from_str::<serde_json::Value>(v).unwrap_or_default();
                match point_response_urls(&mut p, to) {
                    true => {
                        changed = true;
                        p.to_string()
                    }
                    false => v.clone(),
                }
            }
            _ => v.clone(),
        };
        out.append_pair(k, &v);
    }
    changed.then(|| out.finish().into_bytes())
}

/// Point an interaction payload's `response_url` and `response_urls[].response_url` at `to`;
/// whether it named one.
fn point_response_urls(p: &mut serde_json::Value, to: &str) -> bool {
    let mut changed = false;
    if let Some(u) = p.get_mut("response_url").filter(|u| u.is_string()) {
        *u = to.into();
        changed = true;
    }
    for entry in p.get_mut("response_urls").and_then(|u| u.as_array_mut()).into_iter().flatten() {
        if let Some(u) = entry.get_mut("response_url").filter(|u| u.is_string()) {
            *u = to.into();
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod shadow_tests {
    use super::*;

    #[test]
    fn every_response_url_points_at_the_gateway_and_nothing_else_changes() {
        let to = "http://127.0.0.1:3001/shadow/response/0-ab";
        let cmd = b"command=%2Fdeploy&text=a+b%26c&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1%2F1%2Fx";
        let out = String::from_utf8(with_response_url(cmd, to).unwrap()).unwrap();
        let got: Vec<(String, String)> = form_urlencoded::parse(out.as_bytes()).into_owned().collect();
        assert_eq!(got[0], ("command".into(), "/deploy".into()));
        assert_eq!(got[1], ("text".into(), "a b&c".into()));
        assert_eq!(got[2], ("response_url".into(), to.into()));
        let payload = serde_json::json!({"type": "view_submission", "response_urls": [{"response_url": "https://hooks.slack.com/a", "channel_id": "C1"}]});
        let form =
            format!("payload={}", form_urlencoded::byte_serialize(payload.to_string().as_bytes()).collect::<String>());
        let out = with_response_url(form.as_bytes(), to).unwrap();
        let (_, p) = form_urlencoded::parse(&out).next().unwrap();
        let p: serde_json::Value = serde_json::from_str(&p).unwrap();
        assert_eq!(p["response_urls"][0]["response_url"], to);
        assert_eq!(p["response_urls"][0]["channel_id"], "C1");
        assert_eq!(with_response_url(b"payload=%7B%22type%22%3A%22block_suggestion%22%7D", to), None);
        assert_eq!(with_response_url(br#"{"type":"event_callback"}"#, to), None);
    }
}
