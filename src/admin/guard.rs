//! Who may reach the admin API, checked before a route acts: the `Host` allow-list (DNS
//! rebinding), the token, and the rule for writes (POST, an `Authorization` header, no
//! `Origin`, so a browser page cannot trigger them). With `[server] admin_read_token` too,
//! either token reads and only `admin_token` writes.

use http::Method;

use crate::config::Secret;

/// Why the admin API refused a request before acting on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    Host,
    Token,
    Method,
    Browser,
    /// The read-only token on a route that changes state.
    ReadOnly,
}

pub(super) fn refusal_message(r: Refusal) -> &'static str {
    match r {
        Refusal::Host => "Host not allowed (see [server] admin_hosts)",
        Refusal::Token => "Authorization required",
        Refusal::Method => "state-changing routes are POST-only",
        Refusal::Browser => "refused: a request carrying Origin",
        Refusal::ReadOnly => {
            "the read-only token (admin_read_token) can look but not act: this route wants server.admin_token"
        }
    }
}

/// What a route does: read or change state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    Write,
}

/// The access a path needs, or `None` for an unknown path.
pub(super) fn access(path: &str) -> Option<Access> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["dlq", _, "replay" | "purge"] | ["dlq", _, _, "replay" | "purge"] => Some(Access::Write),
        ["pauses", _, "pause" | "resume"] => Some(Access::Write),
        ["stats"] | ["egress"] | ["superseded"] | ["dlq"] | ["dlq", _, _] | ["pauses"] => Some(Access::Read),
        _ => None,
    }
}

/// Whether a `Host` header value may reach the admin API: an IP literal (what probes and
/// scrapers by address send, and what no rebinding attack can produce), `localhost`, or a
/// configured name, each with any port — or a configured `name:port` exactly.
pub(super) fn host_allowed(host: Option<&str>, names: &[String]) -> bool {
    let Some(host) = host.map(str::to_ascii_lowercase) else { return false };
    if names.contains(&host) {
        return true;
    }
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, "")) => return v6.parse::<std::net::Ipv6Addr>().is_ok(),
            Some((v6, port)) => return v6.parse::<std::net::Ipv6Addr>().is_ok() && port_ok(port),
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if port_ok(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host.as_str(),
        },
    };
    name.parse::<std::net::Ipv4Addr>().is_ok() || name == "localhost" || names.iter().any(|n| n == name)
}

fn port_ok(port: &str) -> bool {
    port.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok())
}

/// Whether a request tried a token, and whether it was right (`admitted`: [`admit`]'s
/// verdict): `None` when no token is configured or none was presented (a scraper or a probe
/// without one guesses nothing), else `Some(right)`, for the throttle of failed tokens.
pub(super) fn token_tried(
    headers: &http::HeaderMap,
    token: Option<&Secret>,
    admitted: &Result<(), Refusal>,
) -> Option<bool> {
    (token.is_some() && headers.contains_key(http::header::AUTHORIZATION)).then_some(*admitted != Err(Refusal::Token))
}

/// The checks every API request passes before it is served. `token` and `read_token`: the
/// configured `admin_token` and `admin_read_token` (the latter counts only beside the former).
pub(super) fn admit(
    method: &Method,
    access: Access,
    headers: &http::HeaderMap,
    token: Option<&Secret>,
    read_token: Option<&Secret>,
) -> Result<(), Refusal> {
    let authorization = headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
    let mut read_only = false;
    if let Some(token) = token {
        let given = authorization.and_then(|h| h.strip_prefix(b"Bearer ")).unwrap_or_default();
        let given = Secret::new(&String::from_utf8_lossy(given));
        if given != *token {
            read_only = read_token.is_some_and(|r| given == *r);
            if !read_only {
                return Err(Refusal::Token);
            }
        }
    }
    if access == Access::Write {
        if method != Method::POST {
            return Err(Refusal::Method);
        }
        if authorization.is_none() {
            return Err(Refusal::Token);
        }
        if headers.contains_key(http::header::ORIGIN) {
            return Err(Refusal::Browser);
        }
        if read_only {
            return Err(Refusal::ReadOnly);
        }
    } else if method != Method::GET && method != Method::HEAD {
        return Err(Refusal::Method);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_that_no_rebinding_can_forge() {
        let names = vec!["slackgate".to_string(), "gw.internal:9443".to_string()];
        for ok in
            ["127.0.0.1:9090", "10.2.3.4", "[::1]:9090", "[fe80::1]", "localhost:9090", "LOCALHOST", "slackgate:9090"]
        {
            assert!(host_allowed(Some(ok), &names), "{ok}");
        }
        assert!(host_allowed(Some("gw.internal:9443"), &names));
        for bad in ["evil.example", "evil.example:9090", "gw.internal:9090", "127.0.0.1.nip.io", "[::1", "", "a:b:c"] {
            assert!(!host_allowed(Some(bad), &names), "{bad}");
        }
        assert!(!host_allowed(None, &names));
    }

    #[test]
    fn writes_are_post_with_authorization_and_no_origin() {
        let mut h = http::HeaderMap::new();
        assert_eq!(admit(&Method::GET, Access::Read, &h, None, None), Ok(()));
        assert_eq!(admit(&Method::POST, Access::Write, &h, None, None), Err(Refusal::Token));
        h.insert("authorization", "Bearer anything".parse().unwrap());
        assert_eq!(admit(&Method::POST, Access::Write, &h, None, None), Ok(()));
        assert_eq!(admit(&Method::GET, Access::Write, &h, None, None), Err(Refusal::Method));
        assert_eq!(admit(&Method::DELETE, Access::Write, &h, None, None), Err(Refusal::Method));
        assert_eq!(admit(&Method::POST, Access::Read, &h, None, None), Err(Refusal::Method));
        h.insert("origin", "https://evil.example".parse().unwrap());
        assert_eq!(admit(&Method::POST, Access::Write, &h, None, None), Err(Refusal::Browser));
        h.remove("origin");
        let token = Secret::new("the-right-token-123");
        assert_eq!(admit(&Method::POST, Access::Write, &h, Some(&token), None), Err(Refusal::Token));
        assert_eq!(admit(&Method::GET, Access::Read, &h, Some(&token), None), Err(Refusal::Token));
        h.insert("authorization", "Bearer the-right-token-123".parse().unwrap());
        assert_eq!(admit(&Method::POST, Access::Write, &h, Some(&token), None), Ok(()));
        assert_eq!(access("/dlq/bot/0-ab/purge"), Some(Access::Write));
        assert_eq!(access("/dlq/bot/replay"), Some(Access::Write));
        assert_eq!(access("/dlq/bot/0-ab"), Some(Access::Read));
        assert_eq!(access("/pauses/bot/pause"), Some(Access::Write));
        assert_eq!(access("/pauses"), Some(Access::Read));
        assert_eq!(access("/nope"), None);
    }

    #[test]
    fn the_read_token_reads_and_never_writes() {
        let (token, read) = (Secret::new("the-admin-token-123"), Secret::new("the-read-token-4567"));
        let tokens = (Some(&token), Some(&read));
        let with = |bearer: &str| {
            let mut h = http::HeaderMap::new();
            h.insert("authorization", format!("Bearer {bearer}").parse().unwrap());
            h
        };
        let check = |method: &Method, access: Access, h: &http::HeaderMap| admit(method, access, h, tokens.0, tokens.1);
        // Either token reads; only the admin token writes.
        assert_eq!(check(&Method::GET, Access::Read, &with("the-read-token-4567")), Ok(()));
        assert_eq!(check(&Method::GET, Access::Read, &with("the-admin-token-123")), Ok(()));
        assert_eq!(check(&Method::POST, Access::Write, &with("the-read-token-4567")), Err(Refusal::ReadOnly));
        assert_eq!(check(&Method::POST, Access::Write, &with("the-admin-token-123")), Ok(()));
        // Neither, a prefix of one, or none: 401 as before.
        for bad in ["nope", "the-read-token", "the-read-token-45678", ""] {
            assert_eq!(check(&Method::GET, Access::Read, &with(bad)), Err(Refusal::Token), "{bad}");
            assert_eq!(check(&Method::POST, Access::Write, &with(bad)), Err(Refusal::Token), "{bad}");
        }
        assert_eq!(check(&Method::GET, Access::Read, &http::HeaderMap::new()), Err(Refusal::Token));
        // The other write rules come first: the method, then Origin.
        assert_eq!(check(&Method::GET, Access::Write, &with("the-read-token-4567")), Err(Refusal::Method));
        let mut h = with("the-read-token-4567");
        h.insert("origin", "https://evil.example".parse().unwrap());
        assert_eq!(check(&Method::POST, Access::Write, &h), Err(Refusal::Browser));
        // Without an admin token a read token means nothing (config refuses it anyway).
        assert_eq!(admit(&Method::GET, Access::Read, &with("x"), None, Some(&read)), Ok(()));
        assert!(refusal_message(Refusal::ReadOnly).contains("can look but not act"));
    }
}
