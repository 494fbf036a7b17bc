//! Values with rules of their own: the bot's URL, `${ENV}` interpolation, host allow-list
//! entries, addresses and paths.

/// Where the bot listens: `http(s)://host[:port][/path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub url: String,
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// A path in the URL replaces the path Slack used.
    pub path: Option<String>,
    /// `upstream = "socket"`: a Socket Mode bot that connects in (no URL; the rest is empty).
    pub socket: bool,
}

impl Upstream {
    /// Parse an `http://` or `https://` URL (the message never repeats the URL, which may
    /// carry credentials).
    pub fn parse(text: &str) -> Result<Upstream, String> {
        parse_upstream(text)
    }

    /// A Socket Mode bot: deliveries go over the socket it opened through the egress.
    pub fn socket() -> Upstream {
        Upstream { url: "socket".into(), tls: false, host: String::new(), port: 0, path: None, socket: true }
    }

    /// The URL of `tail` under this base (`https://slack.com/api/` + `chat.postMessage`).
    pub fn join(&self, tail: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let path = self.path.as_deref().unwrap_or("/");
        let sep = if path.ends_with('/') { "" } else { "/" };
        format!("{scheme}://{}{path}{sep}{tail}", self.authority())
    }

    /// `host[:port]` for the Host header (port omitted when it is the scheme's default).
    pub fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        match (self.port == default, self.host.contains(':')) {
            (true, false) => self.host.clone(),
            (true, true) => format!("[{}]", self.host),
            (false, false) => format!("{}:{}", self.host, self.port),
            (false, true) => format!("[{}]:{}", self.host, self.port),
        }
    }
}

/// Replace each `${NAME}` with the environment variable's value; an unset variable is an error.
pub fn interpolate(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or("unclosed `${`")?;
        let name = &after[..end];
        let value = std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether a Redis URL as written in the TOML carries a password of its own: a userinfo
/// password (`redis://user:pw@host`) or a `pass`/`password` query field (unix URLs) that is
/// anything but a whole `${VAR}`.
pub(super) fn literal_url_password(url: &str) -> bool {
    let from_env = |p: &str| {
        let name = p.strip_prefix("${").and_then(|rest| rest.strip_suffix('}'));
        p.is_empty() || name.is_some_and(|n| !n.is_empty() && !n.contains(['{', '}', '$']))
    };
    let Some((_, rest)) = url.split_once("://") else { return false };
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = before_query.split('/').next().unwrap_or_default();
    let userinfo_pw = authority.rsplit_once('@').and_then(|(info, _)| info.split_once(':')).map(|(_, pw)| pw);
    if userinfo_pw.is_some_and(|pw| !from_env(pw)) {
        return true;
    }
    query.split('&').filter_map(|kv| kv.split_once('=')).any(|(k, v)| matches!(k, "pass" | "password") && !from_env(v))
}

pub(super) fn check_addr(addr: &str) -> Result<(), String> {
    addr.parse::<std::net::SocketAddr>().map(|_| ()).map_err(|_| format!("`{addr}` is not an ip:port address"))
}

/// A host allow-list entry: `name` or `name:port`, lower-cased; no scheme, path or wildcard.
pub(super) fn check_host_entry(entry: &str) -> Result<String, String> {
    let e = entry.trim().to_ascii_lowercase();
    let (host, port) = match e.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (e.as_str(), None),
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    if !host_ok || !port_ok {
        return Err(format!("`{entry}` is not a host name or host:port (no scheme, path or wildcard)"));
    }
    Ok(e)
}

/// A URL fit for logs and `check`'s output: any password (`user:pw@`, or `?pass=` /
/// `?password=` as in `redis+unix://` URLs) replaced by `***`.
pub fn redact_url(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            let secret = |k: &str| k == "pass" || k == "password";
            if u.query_pairs().any(|(k, _)| secret(&k)) {
                let pairs: Vec<(String, String)> = u
                    .query_pairs()
                    .map(|(k, v)| (k.to_string(), if secret(&k) { "***".to_string() } else { v.into_owned() }))
                    .collect();
                u.query_pairs_mut().clear().extend_pairs(pairs);
            }
            u.to_string()
        }
        // Not a URL: it may still hold a secret, so show only its scheme-like head.
        Err(_) => format!("{}…", text.chars().take_while(|c| *c != ':' && *c != '@').collect::<String>()),
    }
}

pub(super) fn check_path(p: &str) -> Result<(), String> {
    if !p.starts_with('/') || p.contains(['?', '#', ' ']) {
        return Err(format!("`{p}` must be an absolute path without query"));
    }
    Ok(())
}

pub(super) fn parse_upstream(text: &str) -> Result<Upstream, String> {
    // Messages never repeat the text: it might carry credentials.
    let url = url::Url::parse(text).map_err(|e| format!("is not a URL: {e}"))?;
    let tls = match url.scheme() {
        "http" => false,
        "https" => true,
        s => return Err(format!("scheme `{s}` is not supported (http or https)")),
    };
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err("has no host".into()),
    };
    let port = url.port_or_known_default().ok_or("no port")?;
    if url.query().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a query or credentials (the bot's URL is not a secret store)".into());
    }
    let path = match url.path() {
        "" | "/" => None,
        p => Some(p.to_string()),
    };
    Ok(Upstream { url: text.to_string(), tls, host, port, path, socket: false })
}
