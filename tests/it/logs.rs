//! What the log never says: a passthrough request's query string (an OAuth `code` and
//! `state`), even when Pingora itself logs the failed proxy.

use crate::utils::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_passthrough_logs_no_query_string() {
    let redis = RedisServer::start();
    // A listener that accepts and never answers (a read timeout), and a port that refuses.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = Reserved::new();
    for (name, upstream) in
        [("qrefused", closed.url()), ("qmute", format!("http://127.0.0.1:{}", mute.local_addr().unwrap().port()))]
    {
        let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &upstream);
        cfg.delivery = r#"{ timeout = "1s", retry_initial = "100ms", retry_max = "400ms", lease = "5s" }"#.into();
        let gw = Gateway::start(&cfg).await;
        let mut req = Req::signed("/slack/install?code=OAUTHCODE7731&state=OAUTHSTATE9913", Vec::new(), SECRET);
        req.method = "GET";
        req.headers = vec![("Connection".into(), "close".into())];
        let status = send(gw.port, req).await.0;
        assert!(status == 502 || status == 504, "{name}: {status}");
        // Pingora's own line for the failure, and then the request's audit line.
        let logged = || gw.log().contains("Fail to proxy") && gw.log().contains("passthrough app=");
        assert!(eventually(std::time::Duration::from_secs(5), logged).await, "{name}: {}", gw.log());
        let log = gw.log();
        assert!(log.contains("/slack/install"), "{name}: the path is logged");
        for secret in ["OAUTHCODE7731", "OAUTHSTATE9913", "code=", "state="] {
            assert!(!log.contains(secret), "{name}: `{secret}` in the log:\n{log}");
        }
    }
    drop(mute);
}
