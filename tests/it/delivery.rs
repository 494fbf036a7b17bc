//! Delivery to the bot: invariant 5 (the bot cannot tell), retries, dead letters, passthrough,
//! and invariant 3's other half — a killed gateway loses nothing.

use std::time::Duration;

use crate::utils::*;

async fn setup(name: &str, tweak: impl FnOnce(&mut GatewayConfig)) -> (RedisServer, Receiver, Gateway, String) {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix(name), &bot.url());
    tweak(&mut cfg);
    let gw = Gateway::start(&cfg).await;
    (redis, bot, gw, cfg.prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bot_gets_exactly_what_slack_sent_freshly_signed() {
    let (_redis, bot, gw, _) = setup("same", |_| {}).await;
    let body = event("EvSame1");
    let old = unix_now() - 200; // Slack's delivery was delayed: the bot still gets a fresh timestamp.
    let req = Req::signed_at("/slack/events?from=slack", body.clone(), SECRET, old)
        .header("X-Slack-Retry-Num", "1")
        .header("X-Slack-Retry-Reason", "http_timeout");
    assert_eq!(send(gw.port, req).await.0, 200);
    let form = b"token=x&command=%2Fdeploy&text=a+b%26c&trigger_id=9.9.9".to_vec();
    assert_eq!(send(gw.port, Req::signed("/slack/events", form.clone(), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 2).await, "{}", gw.log());
    let got = bot.received();
    let ev = got.iter().find(|r| r.body.as_ref() == body.as_slice()).expect("event body byte for byte");
    assert_eq!(ev.method, "POST");
    assert_eq!(ev.path, "/slack/events?from=slack");
    assert_eq!(ev.header("content-type").as_deref(), Some("application/json"));
    assert!(ev.header("x-slack-retry-num").is_none() && ev.header("x-slack-retry-reason").is_none());
    assert_eq!(ev.header("x-slackgate-attempt").as_deref(), Some("1"));
    assert!(ev.header("x-slackgate-delivery").is_some());
    let cmd = got.iter().find(|r| r.body.as_ref() == form.as_slice()).expect("form body byte for byte");
    assert_eq!(cmd.header("content-type").as_deref(), Some("application/x-www-form-urlencoded"));
    for r in &got {
        assert!(r.signature_ok, "the bot's own signature check passes");
        assert!(r.timestamp_fresh, "re-signed with a fresh timestamp");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_in_the_upstream_url_replaces_slacks_path() {
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let cfg = GatewayConfig::new(&redis.url(), &prefix("path"), &format!("{}/bolt/events", bot.url()));
    let gw = Gateway::start(&cfg).await;
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvPath"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    assert_eq!(bot.received()[0].path, "/bolt/events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_paths_are_reverse_proxied_unchanged() {
    let (redis, bot, gw, _) = setup("pass", |_| {}).await;
    let mut req = Req::signed("/slack/install?state=abc", Vec::new(), SECRET);
    req.method = "GET";
    req.headers.clear();
    let (status, _) = send(gw.port, req).await;
    assert_eq!(status, 200);
    let got = bot.received();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].method.as_str(), got[0].path.as_str()), ("GET", "/slack/install?state=abc"));
    assert!(redis.keys("*:r:*").is_empty(), "passthrough stores nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_that_is_down_then_back_gets_everything() {
    let redis = RedisServer::start();
    let down = Reserved::new();
    let cfg = GatewayConfig::new(&redis.url(), &prefix("down"), &down.url());
    let gw = Gateway::start(&cfg).await;
    const N: usize = 20;
    for i in 0..N {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvDown{i:02}")), SECRET)).await.0, 200);
    }
    let retried = r#"slackgate_deliveries_total{app="bot",outcome="retried"}"#;
    assert!(metric_reaches(gw.admin_port, retried, 2.0 * N as f64, Duration::from_secs(10)).await, "failed attempts");
    let bot = down.start(SECRET).await;
    assert!(eventually(Duration::from_secs(10), || bot.count() >= N).await, "{}", gw.log());
    gw.wait_idle().await;
    for i in 0..N {
        assert_eq!(bot.count_body(&format!("EvDown{i:02}")), 1);
    }
    assert!(bot.received().iter().all(|r| r.header("x-slackgate-attempt").unwrap().parse::<u32>().unwrap() > 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_and_timeouts_are_retried_until_2xx() {
    let (redis, bot, gw, _) = setup("5xx", |c| {
        c.delivery = r#"{ timeout = "500ms", retry_initial = "50ms", retry_max = "200ms", lease = "5s" }"#.into()
    })
    .await;
    bot.push(Reply::status(500));
    bot.push(Reply::status(503));
    bot.push(Reply::status(200).delay(Duration::from_secs(1))); // slower than the timeout
    bot.push(Reply::status(408));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvRetry"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count() == 5).await, "{}", gw.log());
    gw.wait_idle().await;
    let got = bot.received();
    assert_eq!(got.len(), 5, "no attempt after the 2xx");
    let attempts: Vec<String> = got.iter().map(|r| r.header("x-slackgate-attempt").unwrap()).collect();
    assert_eq!(attempts, ["1", "2", "3", "4", "5"]);
    let ids: Vec<String> = got.iter().map(|r| r.header("x-slackgate-delivery").unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one stable delivery id");
    assert!(redis.keys("*:d:*").is_empty(), "completed deliveries are removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_final_and_dead_lettered() {
    let (redis, bot, gw, prefix) = setup("4xx", |_| {}).await;
    bot.set_default(Reply::status(404)); // Bolt's answer to an event with no listener
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvFinal"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(5), || bot.count() == 1).await);
    gw.wait_idle().await;
    assert_eq!(bot.count(), 1, "a 404 is never retried");
    let dead = format!("{{{prefix}:bot:0}}:dead");
    assert_eq!(redis.xlen(&dead), 1);
    let entries: redis::streams::StreamRangeReply =
        redis::cmd("XRANGE").arg(&dead).arg("-").arg("+").query(&mut redis.conn()).unwrap();
    let e = &entries.ids[0];
    assert_eq!(e.get::<String>("st").as_deref(), Some("404"));
    assert_eq!(e.get::<String>("attempts").as_deref(), Some("1"));
    let d: String = e.get("d").unwrap();
    let body: Vec<u8> =
        redis::cmd("HGET").arg(format!("{{{prefix}:bot:0}}:d:{d}")).arg("b").query(&mut redis.conn()).unwrap();
    assert_eq!(body, event("EvFinal"), "the body is kept for replay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_from_the_bot_is_honoured() {
    let (_redis, bot, gw, _) = setup("429", |c| {
        c.delivery = r#"{ timeout = "1s", retry_initial = "50ms", retry_max = "10s", lease = "5s" }"#.into()
    })
    .await;
    bot.push(Reply::status(429).retry_after(2));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("Ev429"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(8), || bot.count() == 2).await, "{}", gw.log());
    let got = bot.received();
    let gap = got[1].at - got[0].at;
    // Without Retry-After the first backoff would be at most 100 ms.
    assert!(gap >= 1.9, "waited {gap:.2}s, Retry-After said 2s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_give_up_into_the_dead_letter_stream() {
    let (redis, bot, gw, prefix) = setup("giveup", |c| {
        c.delivery =
            r#"{ timeout = "500ms", retry_initial = "50ms", retry_max = "100ms", give_up_after = "1s", lease = "5s" }"#
                .into()
    })
    .await;
    bot.set_default(Reply::status(502));
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvGiveUp"), SECRET)).await.0, 200);
    let dead = format!("{{{prefix}:bot:0}}:dead");
    assert!(eventually(Duration::from_secs(5), || redis.xlen(&dead) == 1).await, "{}", gw.log());
    let n = bot.count();
    assert!(n >= 3, "retried several times before giving up ({n})");
    gw.wait_idle().await;
    assert_eq!(bot.count(), n, "no attempt after giving up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_deliveries_in_flight_loses_nothing() {
    let (redis, bot, mut gw, prefix) = setup("kill", |c| {
        c.delivery = r#"{ timeout = "2s", retry_initial = "100ms", retry_max = "300ms", lease = "3s" }"#.into()
    })
    .await;
    bot.set_default(Reply::status(200).delay(Duration::from_millis(1500)));
    const N: usize = 12;
    for i in 0..N {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvKill{i:02}")), SECRET)).await.0, 200);
    }
    // The first attempts reach the bot (each then takes 1.5 s): on a loaded machine the fresh
    // gateway's workers may take seconds to start.
    let started = eventually(Duration::from_secs(20), || bot.count() >= 1).await;
    assert!(started, "no attempt reached the bot:\n{}", gw.log());
    gw.kill9(); // attempts in flight, their acks never recorded
    bot.set_default(Reply::status(200));
    gw.restart().await;
    let all = || (0..N).all(|i| bot.count_body(&format!("EvKill{i:02}")) >= 1);
    assert!(eventually(Duration::from_secs(20), all).await, "every event delivered after the restart\n{}", gw.log());
    let stream = format!("{{{prefix}:bot:0}}:stream");
    assert!(eventually(Duration::from_secs(10), || redis.xlen(&stream) == 0).await, "outbox drained");
    assert!(redis.keys("*:d:*").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_lease_no_more_entries_than_they_have_permits_for() {
    // Two shards share an app's permits: no entry may sit leased, its lease running, while it
    // waits for a permit; the bot never has more than `max_in_flight` attempts at once. An
    // attempt the bot has answered gives its permit back while its outcome is recorded, so
    // the leases are at most the attempts plus as many being recorded.
    let redis = RedisServer::start();
    let bot = Receiver::start(SECRET).await;
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("permits"), &bot.url());
    cfg.delivery =
        r#"{ timeout = "2s", max_in_flight = 2, retry_initial = "100ms", retry_max = "400ms", lease = "5s" }"#.into();
    cfg.redis = "shards = 2".into();
    let gw = Gateway::start(&cfg).await;
    bot.set_default(Reply::status(200).delay(Duration::from_millis(300)));
    for i in 0..12 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvPermit{i:02}")), SECRET)).await.0, 200);
    }
    let pending = |shard: u16| -> usize {
        let stream = format!("{{{}:bot:{shard}}}:stream", cfg.prefix);
        match redis::cmd("XPENDING").arg(&stream).arg("slackgate").query(&mut redis.conn()) {
            Ok(redis::Value::Array(v)) => redis::from_redis_value_ref::<usize>(&v[0]).unwrap_or(0),
            _ => 0, // no group yet
        }
    };
    // Watched over the whole drain, from the first lease to the last delivery.
    let mut most = 0;
    let drained = eventually(Duration::from_secs(10), || {
        most = most.max(pending(0) + pending(1));
        bot.count() == 12
    })
    .await;
    assert!(drained, "{}", gw.log());
    assert!(bot.most_concurrent() <= 2, "at most max_in_flight attempts at once, saw {}", bot.most_concurrent());
    assert!(most <= 4, "at most max_in_flight entries leased at once and as many being recorded, saw {most}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_going_down_and_back_is_logged_once_each_way() {
    let redis = RedisServer::start();
    let down = Reserved::new();
    let cfg = GatewayConfig::new(&redis.url(), &prefix("downlog"), &down.url());
    let gw = Gateway::start(&cfg).await;
    for i in 0..5 {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(&format!("EvLog{i}")), SECRET)).await.0, 200);
    }
    let retried = r#"slackgate_deliveries_total{app="bot",outcome="retried"}"#;
    assert!(metric_reaches(gw.admin_port, retried, 10.0, Duration::from_secs(10)).await, "several failed attempts");
    let bot = down.start(SECRET).await;
    assert!(eventually(Duration::from_secs(10), || bot.count() >= 5).await);
    let log = gw.log();
    assert_eq!(log.matches("bot unreachable").count(), 1, "{log}");
    assert!(eventually(Duration::from_secs(2), || gw.log().matches("bot reachable again").count() == 1).await);
    assert!(!log.contains("ERROR"), "{log}");
    let longest = log.lines().filter(|l| l.contains("attempt")).map(str::len).max().unwrap_or(0);
    assert!(longest < 400, "attempt lines stay short ({longest} bytes)");
}

/// `shards` lowered on a running system: the deliveries waiting in the shards that are no
/// longer written are still delivered (the workers read every shard the app has had), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_shards_keeps_every_waiting_delivery() {
    let redis = RedisServer::start();
    let bot_port = Reserved::new();
    let mut cfg = GatewayConfig::new(&redis.url(), &prefix("reshard"), &bot_port.url());
    cfg.redis = "shards = 4".into();
    let mut gw = Gateway::start(&cfg).await;
    let ids: Vec<String> = (0..24).map(|i| format!("EvShard{i:02}")).collect();
    for id in &ids {
        assert_eq!(send(gw.port, Req::signed("/slack/events", event(id), SECRET)).await.0, 200);
    }
    // Each waiting delivery is in its shard's slot (the bot is down: all wait): carried in its
    // entry on the shard's stream, or, once an attempt failed, in its hash there.
    let in_shard = |s: u16| {
        let tag = format!("{{{}:bot:{s}}}", cfg.prefix);
        redis.keys(&format!("{tag}:d:*")).len() + redis.xlen(&format!("{tag}:stream"))
    };
    let spread = eventually(Duration::from_secs(5), || (0..4).map(in_shard).sum::<usize>() == 24).await;
    assert!(spread, "recorded over the 4 shards: {:?}", (0..4).map(in_shard).collect::<Vec<_>>());
    assert!(in_shard(3) > 0, "shard 3 has some");
    gw.kill9();
    cfg.redis = "shards = 1".into();
    let gw = Gateway::start(&cfg).await;
    let bot = bot_port.start(SECRET).await;
    assert!(
        eventually(Duration::from_secs(20), || ids.iter().all(|id| bot.count_body(id) >= 1)).await,
        "stranded: {:?}",
        ids.iter().filter(|id| bot.count_body(id) == 0).collect::<Vec<_>>()
    );
    for id in &ids {
        assert_eq!(bot.count_body(id), 1, "{id} once");
    }
    // New deliveries go to the one shard now.
    assert_eq!(send(gw.port, Req::signed("/slack/events", event("EvShardNew"), SECRET)).await.0, 200);
    assert!(eventually(Duration::from_secs(10), || bot.count_body("EvShardNew") == 1).await);
    assert_eq!(in_shard(3), 0, "the old shard drained");
}
