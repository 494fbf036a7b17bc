//! Passthrough paths (OAuth redirect, install pages): plainly reverse-proxied to the app's bot
//! by Pingora. What is ours: the peer is resolved without blocking an ingress thread and within
//! a connect timeout (an unresolvable or unreachable bot is a 502, never a hang or a panic —
//! `HttpPeer::new` would resolve a name with a blocking lookup and unwrap its result,
//! cloudflare/pingora#570 and #921, so it is only ever given an address), the
//! peer has connect and read timeouts, the request target is sent in origin form, and the
//! `X-Forwarded-*` headers are the gateway's own, never the client's.

use std::net::SocketAddr;
use std::time::Duration;

use pingora::http::RequestHeader;
use pingora::prelude::*;

use crate::config::{AppConfig, Upstream};

/// A passthrough bot that has not accepted a connection by then is unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Headers that say where a request came from: only the gateway may set them.
const FORWARDING: [&str; 6] =
    ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port", "x-real-ip"];

/// The bot's address for a passthrough request, resolved on the blocking pool (not on an
/// ingress thread) within the connect timeout; an error is a 502 for the client.
pub async fn peer(app: &AppConfig) -> Result<Box<HttpPeer>> {
    let up = &app.upstream;
    let connect = app.delivery.timeout.min(CONNECT_TIMEOUT);
    let addr = resolve(up, connect).await.ok_or_else(|| {
        Error::explain(HTTPStatus(502), format!("cannot resolve the upstream of app {} within {connect:?}", app.name))
    })?;
    let mut peer = HttpPeer::new(addr, up.tls, up.host.clone());
    peer.options.connection_timeout = Some(connect);
    peer.options.total_connection_timeout = Some(connect);
    peer.options.read_timeout = Some(app.delivery.timeout);
    peer.options.write_timeout = Some(app.delivery.timeout);
    Ok(Box::new(peer))
}

async fn resolve(up: &Upstream, within: Duration) -> Option<SocketAddr> {
    if let Ok(ip) = up.host.parse::<std::net::IpAddr>() {
        return Some(SocketAddr::new(ip, up.port));
    }
    let lookup = tokio::net::lookup_host((up.host.as_str(), up.port));
    tokio::time::timeout(within, lookup).await.ok()?.ok()?.next()
}

/// Rewrite the request for the bot: origin-form target, the bot's `Host`, and forwarding
/// headers that say what the gateway saw (`client`, the client's `Host`).
pub fn rewrite(req: &mut RequestHeader, up: &Upstream, client: Option<SocketAddr>) -> Result<()> {
    let host = req.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).map(String::from);
    // An absolute-form target (`GET http://other/x`) is routed by its path only; the bot gets
    // the path, never a host chosen by the client.
    if req.uri.scheme().is_some() || req.uri.authority().is_some() {
        let origin = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let uri = http::Uri::try_from(origin).map_err(|e| Error::because(InvalidHTTPHeader, "request target", e))?;
        req.set_uri(uri);
    }
    for name in FORWARDING {
        req.remove_header(name);
    }
    req.insert_header("Host", up.authority())?;
    if let Some(addr) = client {
        req.insert_header("X-Forwarded-For", addr.ip().to_string())?;
    }
    if let Some(host) = host {
        req.insert_header("X-Forwarded-Host", host)?;
    }
    // What the gateway itself was spoken to with; TLS ends in front of it.
    req.insert_header("X-Forwarded-Proto", "http")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarding_headers_are_the_gateways_own() {
        let up = Upstream::parse("http://bot.internal:8000").unwrap();
        let mut req = RequestHeader::build("GET", b"http://evil.example/slack/install?x=1", None).unwrap();
        req.insert_header("Host", "gw.example.com").unwrap();
        req.append_header("X-Forwarded-For", "6.6.6.6").unwrap();
        req.append_header("X-Forwarded-For", "7.7.7.7").unwrap();
        req.insert_header("Forwarded", "for=6.6.6.6").unwrap();
        req.insert_header("X-Real-IP", "6.6.6.6").unwrap();
        rewrite(&mut req, &up, Some("10.0.0.9:5555".parse().unwrap())).unwrap();
        assert_eq!(req.uri.to_string(), "/slack/install?x=1");
        let get = |n: &str| req.headers.get_all(n).iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(get("host"), ["bot.internal:8000"]);
        assert_eq!(get("x-forwarded-for"), ["10.0.0.9"]);
        assert_eq!(get("x-forwarded-host"), ["gw.example.com"]);
        assert_eq!(get("x-forwarded-proto"), ["http"]);
        assert!(get("forwarded").is_empty() && get("x-real-ip").is_empty());
    }
}
