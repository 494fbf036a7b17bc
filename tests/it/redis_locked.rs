//! Redis locked down as in production: TLS only (clients, replication, a cluster's bus, the
//! sentinels), the servers wanting a client certificate (`tls-auth-clients yes`, Redis'
//! default) and an ACL login, the sentinels a password of their own. The gateway reaches a
//! Cluster and a Sentinel set that way from `[redis]` alone (`rediss://`, `tls_*_file`,
//! `password = "${VAR}"`), and a gateway missing any one piece is refused: 503, never 200.

use std::sync::Arc;
use std::time::Duration;

use crate::utils::*;

fn without(cfg: &GatewayConfig, key: &str) -> GatewayConfig {
    let mut c = cfg.clone();
    c.redis = c.redis.lines().filter(|l| !l.starts_with(key)).collect::<Vec<_>>().join("\n");
    c
}

async fn refused(cfg: &GatewayConfig, env: &[(&str, &str)], id: &str) {
    let gw = Gateway::start_with_env(cfg, env).await;
    let (status, body) = send(gw.port, Req::signed("/slack/events", event(id), SECRET)).await;
    assert_eq!(status, 503, "not recorded, so not acked: {}", cfg.redis);
    assert_eq!(String::from_utf8_lossy(&body), "store unavailable\n", "refused by Redis, not shed");
}

/// Whether `n` events sent one after another are acked in a row within `limit`.
async fn acks_in_a_row(port: u16, prefix: &str, n: usize, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let (mut sent, mut streak) = (0, 0);
    while streak < n {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        let ok = matches!(
            try_send(port, Req::signed("/slack/events", event(&format!("{prefix}-{sent}")), SECRET)).await,
            Ok((200, _))
        );
        streak = if ok { streak + 1 } else { 0 };
        sent += 1;
    }
    true
}

/// No password, and no byte of the client key, in the gateway's log.
fn no_secret_logged(gw: &Gateway, security: &RedisSecurity) {
    let log = gw.log();
    let key = std::fs::read_to_string(&security.ca.key_file).unwrap();
    let key_body = key.lines().nth(1).unwrap();
    for secret in [security.password.as_str(), security.sentinel_password.as_str(), key_body] {
        assert!(!log.contains(secret), "a secret in the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_mutual_tls_with_a_login_records_replicates_and_delivers() {
    let security = Arc::new(RedisSecurity::new());
    let cluster = RedisCluster::start_secured(3, 1, security.clone());
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new("", &prefix("tlscluster"), &bot.url());
    // A replica's acknowledgement takes one round trip, but on a busy 2-core machine running
    // the suite a TLS replica can take more than a few hundred ms to answer `WAIT`.
    cfg.redis = format!("{}shards = 6\ndurability = \"replicated\"\nwait_timeout = \"1500ms\"", cluster.toml());
    // Replicated acks need every primary's replica confirming: waited for, not hoped for.
    assert!(cluster.wait_replicas_confirm(1, Duration::from_secs(30)), "the replicas never confirmed");
    let env = security.env();
    let gateways = [Gateway::start_with_env(&cfg, &env).await, Gateway::start_with_env(&cfg, &env).await];
    // Warmed first: a debug build's first TLS handshakes to every node, on a busy machine, can
    // take longer than the ack budget, and with `replicated` records take turns over eight
    // connections of their own (each a cluster connection to every node). Eight acks in a row
    // on one gateway are one on each of them.
    for (i, g) in gateways.iter().enumerate() {
        assert!(acks_in_a_row(g.port, &format!("EvTlsClWarm{i}"), 8, Duration::from_secs(60)).await, "{}", g.log());
    }
    let record_errors = "slackgate_store_errors_total{app=\"bot\",reason=\"record\"}";
    let mut errors_before = Vec::new();
    for g in &gateways {
        errors_before.push(metric(g.admin_port, record_errors).await);
    }
    let ids: Vec<String> = (0..30).map(|i| format!("EvTlsCl{i:03}")).collect();
    // Every event twice at the same moment, on both gateways. Each is recorded and acked, or —
    // on a machine too busy for a debug build's TLS records to keep up — shed at once as
    // overload (503, Slack retries it: then so do we). Never refused for want of a store.
    let sends = ids.iter().flat_map(|id| {
        gateways.each_ref().map(|g| {
            let id = id.clone();
            let port = g.port;
            tokio::spawn(async move {
                (port, id.clone(), send(port, Req::signed("/slack/events", event(&id), SECRET)).await)
            })
        })
    });
    let mut shed = Vec::new();
    for s in sends.collect::<Vec<_>>() {
        let (port, id, (status, body)) = s.await.unwrap();
        let body = String::from_utf8_lossy(&body).into_owned();
        match status {
            200 => {}
            503 if body == "overloaded, retry later\n" => shed.push((port, id)),
            _ => panic!("{status} {body}: {}\n{}", gateways[0].log(), gateways[1].log()),
        }
    }
    for (port, id) in &shed {
        assert!(deliver(&[*port], id, Duration::from_secs(30)).await, "Slack's retry of {id} acked in the end");
    }
    assert!(
        eventually(Duration::from_secs(20), || ids.iter().all(|id| bot.count_body(id) >= 1)).await,
        "{}",
        gateways[0].log()
    );
    gateways[0].wait_idle().await; // one cluster, one outbox: either gateway reads it
    assert!(ids.iter().all(|id| bot.count_body(id) == 1), "each delivered once");
    for (g, before) in gateways.iter().zip(errors_before) {
        assert_eq!(metric(g.admin_port, record_errors).await, before, "no record failed once connected");
        no_secret_logged(g, &security);
    }
    // Each piece missing: no login, the system's roots instead of the authority, no client
    // certificate.
    refused(&without(&cfg, "password"), &env, "EvTlsClNoLogin").await;
    refused(&without(&cfg, "tls_ca_file"), &env, "EvTlsClNoCa").await;
    refused(&without(&without(&cfg, "tls_cert_file"), "tls_key_file"), &env, "EvTlsClNoCert").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_set_over_mutual_tls_with_logins_is_followed_through_a_failover() {
    let security = Arc::new(RedisSecurity::new());
    let mut set = RedisSentinel::start_secured(security.clone());
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new("", &prefix("tlssentinel"), &bot.url());
    cfg.redis = format!("{}durability = \"replicated\"\nwait_timeout = \"1500ms\"", set.toml());
    let env = security.env();
    let gw = Gateway::start_with_env(&cfg, &env).await;
    let ids: Vec<String> = (0..20).map(|i| format!("EvTlsSn{i:03}")).collect();
    for id in &ids[..10] {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(id), SECRET)).await.0, 200, "{}", gw.log());
    }
    // The primary dies; the sentinels promote a replica; the gateway asks them again (over
    // TLS, with its login) and reaches the new primary over TLS.
    let first = set.primary().expect("the sentinels name a primary");
    set.kill(first);
    for id in &ids[10..] {
        assert!(deliver(&[gw.port], id, Duration::from_secs(60)).await, "acked in the end: {}", gw.log());
    }
    // The sentinel asked may hear of the promotion a hello later than the one the gateway asked.
    set.wait_new_primary(first, Duration::from_secs(30)).expect("a replica was promoted");
    assert!(
        eventually(Duration::from_secs(20), || ids.iter().all(|id| bot.count_body(id) >= 1)).await,
        "lost: {:?}",
        ids.iter().filter(|id| bot.count_body(id) == 0).collect::<Vec<_>>()
    );
    no_secret_logged(&gw, &security);
    // Without the sentinels' password the primary cannot be found; without the nodes' login
    // it cannot be written.
    refused(&without(&cfg, "sentinel_password"), &env, "EvTlsSnNoSentinelLogin").await;
    refused(&without(&cfg, "password"), &env, "EvTlsSnNoLogin").await;
}
