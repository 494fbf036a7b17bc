//! Which headers cross the egress. The bot's Web API client and Slack should see each other's
//! headers as if the egress were not there (the SDKs send `User-Agent`, `Accept`, …; Slack
//! answers `X-Slack-Req-Id`, `X-OAuth-Scopes`, …, which `@slack/web-api` reads), except those
//! that belong to one connection (RFC 9110 §7.6.1) and those the egress computes itself.

use http::header::{self, HeaderMap, HeaderName};

/// Headers of one connection, never forwarded; `Proxy-*` as well (see [`hop_by_hop`]).
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Request headers the egress sets itself (or consumes): the `Host` and the length are those
/// of the request it sends, `Expect` is answered by the egress, which reads the body whole,
/// `Idempotency-Key` is the egress's, not Slack's, and the bot's trace context (`traceparent`,
/// `tracestate`) stops at the egress, whose span of the call is its child.
const OWN_REQUEST: [&str; 6] = ["host", "content-length", "expect", "idempotency-key", "traceparent", "tracestate"];

/// What a stored answer keeps of Slack's headers, so that a replay carries what the first
/// answer carried: the `X-…` ones (`X-Slack-Req-Id`, the OAuth scopes, …) and `Warning`,
/// bounded (they live in Redis beside the answer).
const KEPT_MAX: usize = 32;
const KEPT_MAX_BYTES: usize = 8 << 10;

/// Whether `name` is hop-by-hop: a fixed one, a `Proxy-*` one, or one that the message's
/// `Connection` names.
fn hop_by_hop(name: &HeaderName, headers: &HeaderMap) -> bool {
    if HOP_BY_HOP.contains(name) || name.as_str().starts_with("proxy-") {
        return true;
    }
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case(name.as_str()))
}

/// The end-to-end headers of a message.
pub fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !hop_by_hop(name, headers) {
            out.append(name, value.clone());
        }
    }
    out
}

/// The bot's request headers as they go to Slack.
pub fn toward_slack(headers: &HeaderMap) -> HeaderMap {
    let mut out = end_to_end(headers);
    for name in OWN_REQUEST {
        out.remove(name);
    }
    out
}

/// The small set of Slack's answer headers that a write's answer keeps (and replays).
pub fn kept(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for (name, value) in headers {
        let keep = name.as_str().starts_with("x-") || *name == header::WARNING;
        let Ok(value) = value.to_str() else { continue };
        if !keep || hop_by_hop(name, headers) {
            continue;
        }
        bytes += name.as_str().len() + value.len();
        if out.len() == KEPT_MAX || bytes > KEPT_MAX_BYTES {
            break;
        }
        out.push((name.as_str().to_string(), value.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap())).collect()
    }

    #[test]
    fn hop_by_hop_headers_stay_and_the_rest_goes() {
        let h = map(&[
            ("user-agent", "Python/3.12 slackclient/3.33"),
            ("accept", "*/*"),
            ("connection", "keep-alive, X-Conn-Only"),
            ("x-conn-only", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
            ("host", "gw:8080"),
            ("content-length", "12"),
            ("idempotency-key", "k"),
            ("expect", "100-continue"),
            ("authorization", "Bearer xoxb-1"),
        ]);
        let out = toward_slack(&h);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["user-agent", "accept", "authorization"]);
        assert_eq!(end_to_end(&h).len(), 7, "host, length and the egress's own stay for the caller to judge");
    }

    #[test]
    fn an_answer_keeps_a_small_set() {
        let h = map(&[
            ("x-slack-req-id", "abc"),
            ("x-oauth-scopes", "chat:write,channels:read"),
            ("x-accepted-oauth-scopes", "chat:write"),
            ("warning", "299 - \"missing_charset\""),
            ("content-type", "application/json"),
            ("set-cookie", "b=1"),
            ("date", "now"),
        ]);
        let kept = kept(&h);
        let names: Vec<&str> = kept.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["x-slack-req-id", "x-oauth-scopes", "x-accepted-oauth-scopes", "warning"]);
        let many: HeaderMap = (0..100)
            .map(|i| (HeaderName::from_bytes(format!("x-h{i}").as_bytes()).unwrap(), "v".repeat(500).parse().unwrap()))
            .collect();
        let kept = super::kept(&many);
        assert!(kept.len() <= KEPT_MAX && kept.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() <= KEPT_MAX_BYTES);
    }
}
