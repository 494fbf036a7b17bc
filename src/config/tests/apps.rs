use super::*;

// ---------------------------------------------------------------- apps and routes

#[test]
fn app_name_is_checked() {
    assert_err(&load_err(&app("has space", "SG_CFG_NAME", "")), "app[0].name");
    assert_err(&load_err(&app("", "SG_CFG_NAME", "")), "app[0].name");
    assert_err(&load_err(&app("a{b}", "SG_CFG_NAME", "")), "app[0].name");
    set_env("SG_CFG_NAME", "x");
    let text = "[[app]]\nsigning_secret = \"${SG_CFG_NAME}\"\nupstream = \"http://127.0.0.1:8000\"\n";
    assert_err(&load_err(text), "app[0].name");
}

#[test]
fn duplicate_app_names_are_refused() {
    let text = format!(
        "{}{}",
        app(
            "bot",
            "SG_CFG_DUP_NAME",
            "events_path = \"/one\"\ncommands_path = \"/one\"\ninteractivity_path = \"/one\""
        ),
        app(
            "bot",
            "SG_CFG_DUP_NAME",
            "events_path = \"/two\"\ncommands_path = \"/two\"\ninteractivity_path = \"/two\""
        ),
    );
    let err = load_err(&text);
    assert_err(&err, "app[1].name");
    assert!(err.message.contains("app[0]"), "{err}");
}

#[test]
fn two_apps_on_one_path_are_refused() {
    // Both on the default /slack/events.
    let text = format!("{}{}", app("a", "SG_CFG_SHARED_PATH", ""), app("b", "SG_CFG_SHARED_PATH", ""));
    let err = load_err(&text);
    assert_err(&err, "app[1]");
    assert!(err.message.contains("/slack/events"), "{err}");

    // A passthrough path of one app that is another's Slack path.
    let text = format!(
        "{}{}",
        app("a", "SG_CFG_SHARED_PATH", "passthrough = [\"/b\"]"),
        app("b", "SG_CFG_SHARED_PATH", "events_path = \"/b\"\ncommands_path = \"/b\"\ninteractivity_path = \"/b\""),
    );
    assert_err(&load_err(&text), "app[1]");
}

#[test]
fn one_app_may_use_one_path_for_everything() {
    let extra = "events_path = \"/slack/all\"\ncommands_path = \"/slack/all\"\ninteractivity_path = \"/slack/all\"";
    let c = load(&app("a", "SG_CFG_ONE_PATH", extra)).unwrap();
    let routes = c.routes();
    assert_eq!(routes.len(), 1);
    assert_eq!(routes["/slack/all"], (0, RouteKind::Slack));
}

#[test]
fn one_app_may_not_use_a_slack_path_as_passthrough() {
    let err = load_err(&app("a", "SG_CFG_PASS_SLACK", "passthrough = [\"/slack/events\"]"));
    assert_err(&err, "app[0]");
}

#[test]
fn paths_must_be_absolute_without_query() {
    assert_err(&load_err(&app("a", "SG_CFG_PATHS", "events_path = \"slack/events\"")), "app[0].events_path");
    assert_err(&load_err(&app("a", "SG_CFG_PATHS", "commands_path = \"/c?x=1\"")), "app[0].commands_path");
    assert_err(&load_err(&app("a", "SG_CFG_PATHS", "interactivity_path = \"/i#f\"")), "app[0].interactivity_path");
    assert_err(&load_err(&app("a", "SG_CFG_PATHS", "passthrough = [\"/ok\", \"bad\"]")), "app[0].passthrough[1]");
}

#[test]
fn routes_map_paths_to_apps() {
    let text = format!(
        "{}{}",
        app(
            "a",
            "SG_CFG_ROUTES",
            "events_path = \"/a/events\"\ncommands_path = \"/a/commands\"\ninteractivity_path = \"/a/interactive\"\npassthrough = [\"/a/install\", \"/a/oauth\"]"
        ),
        app("b", "SG_CFG_ROUTES", "passthrough = [\"/b/install\"]"),
    );
    let c = load(&text).unwrap();
    let routes = c.routes();
    let expected: HashMap<String, (usize, RouteKind)> = [
        ("/a/events", (0, RouteKind::Slack)),
        ("/a/commands", (0, RouteKind::Slack)),
        ("/a/interactive", (0, RouteKind::Slack)),
        ("/a/install", (0, RouteKind::Passthrough)),
        ("/a/oauth", (0, RouteKind::Passthrough)),
        ("/slack/events", (1, RouteKind::Slack)),
        ("/b/install", (1, RouteKind::Passthrough)),
    ]
    .into_iter()
    .map(|(p, r)| (p.to_string(), r))
    .collect();
    assert_eq!(routes, expected);
    assert_eq!(c.apps[1].name, "b");
}

// ---------------------------------------------------------------- listeners, overrides, redis

#[test]
fn admin_listen_must_differ_from_listen() {
    let a = app("a", "SG_CFG_ADMIN_SAME", "");
    let err = load_err(&format!("[server]\nlisten = \"127.0.0.1:4000\"\nadmin_listen = \"127.0.0.1:4000\"\n{a}"));
    assert_err(&err, "server.admin_listen");
    // The default admin address collides with a listen override too.
    let ov = Overrides { listen: Some("127.0.0.1:9090".into()), ..Overrides::default() };
    assert_err(&load_with(&a, &ov).unwrap_err(), "server.admin_listen");
}

#[test]
fn admin_listen_off() {
    let a = app("a", "SG_CFG_ADMIN_OFF", "");
    let c = load(&format!("[server]\nadmin_listen = \"off\"\n{a}")).unwrap();
    assert_eq!(c.server.admin_listen, None);
    let ov = Overrides { admin_listen: Some("off".into()), ..Overrides::default() };
    assert_eq!(load_with(&a, &ov).unwrap().server.admin_listen, None);
}

#[test]
fn overrides_beat_the_file() {
    let text = format!(
        "[server]\nlisten = \"0.0.0.0:5000\"\nadmin_listen = \"127.0.0.1:5001\"\n[redis]\nurl = \"embedded\"\n{}",
        app("a", "SG_CFG_OVERRIDES", "")
    );
    let ov = Overrides {
        listen: Some("127.0.0.1:4000".into()),
        admin_listen: Some("127.0.0.1:4001".into()),
        redis_url: Some("redis://10.0.0.1:6379/".into()),
        egress_listen: None,
        secrets_optional: false,
    };
    let c = load_with(&text, &ov).unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:4000");
    assert_eq!(c.server.admin_listen.as_deref(), Some("127.0.0.1:4001"));
    assert_eq!(c.redis.target, RedisTarget::Url("redis://10.0.0.1:6379/".into()));

    // Without overrides the file's values stand.
    let c = load(&text).unwrap();
    assert_eq!(c.server.listen, "0.0.0.0:5000");
    assert_eq!(c.redis.target, RedisTarget::Embedded);

    // A bad override is reported under the key it overrides.
    let ov = Overrides { listen: Some("not-an-addr".into()), ..Overrides::default() };
    assert_err(&load_with(&text, &ov).unwrap_err(), "server.listen");
}

#[test]
fn redis_targets() {
    let a = app("a", "SG_CFG_REDIS_TARGETS", "");
    for url in [
        "redis://127.0.0.1:6379/",
        "rediss://u@r.internal:6380/0",
        "unix:///tmp/redis.sock",
        "redis+unix:///tmp/r.sock",
    ] {
        let c = load(&format!("[redis]\nurl = \"{url}\"\n{a}")).unwrap();
        assert_eq!(c.redis.target, RedisTarget::Url(url.into()));
    }
    for url in ["embedded", ""] {
        let c = load(&format!("[redis]\nurl = \"{url}\"\n{a}")).unwrap();
        assert_eq!(c.redis.target, RedisTarget::Embedded);
    }
}

#[test]
fn bad_redis_url_scheme_is_refused() {
    let a = app("a", "SG_CFG_REDIS_BAD", "");
    for url in ["http://127.0.0.1:6379", "127.0.0.1:6379", "memcached://x"] {
        assert_err(&load_err(&format!("[redis]\nurl = \"{url}\"\n{a}")), "redis.url");
    }
    let ov = Overrides { redis_url: Some("tcp://127.0.0.1:6379".into()), ..Overrides::default() };
    assert_err(&load_with(&a, &ov).unwrap_err(), "redis.url");
    // An unset variable in the URL is named.
    let err = load_err(&format!("[redis]\nurl = \"redis://:${{SG_CFG_REDIS_UNSET_41}}@h:6379\"\n{a}"));
    assert_err(&err, "redis.url");
    assert!(err.message.contains("SG_CFG_REDIS_UNSET_41"));
}

#[test]
fn from_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.toml");
    let err = Config::from_file(&path, &Overrides::default()).unwrap_err();
    assert_eq!(err.key, "(file)");
    assert!(err.to_string().starts_with(&path.display().to_string()), "{err}");

    let path = dir.path().join("gw.toml");
    std::fs::write(&path, app("a", "SG_CFG_FROM_FILE", "")).unwrap();
    let c = Config::from_file(&path, &Overrides::default()).unwrap();
    assert_eq!(c.source, path);
}

#[test]
fn upstream_credentials_are_not_echoed() {
    set_env("SG_CFG_UPSTREAM_CREDS", "x");
    let text = "[[app]]\nname = \"a\"\nsigning_secret = \"${SG_CFG_UPSTREAM_CREDS}\"\nupstream = \"https://bot:hunter2@bot.example.com/\"\n";
    let err = load_err(text);
    assert_err(&err, "app[0].upstream");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

// ---------------------------------------------------------------- turns

#[test]
fn turns_are_off_by_default_and_end_by_reply_when_the_egress_is_on() {
    let c = load(&app("a", "SG_T_TURNS_1", "")).unwrap();
    assert_eq!(c.apps[0].turns, TurnsConfig::default());
    assert!(!c.apps[0].turns.is_on());
    let with_egress =
        format!("[egress]\nlisten = \"127.0.0.1:0\"\n{}", app("a", "SG_T_TURNS_1", "turns = { order = \"queue\" }"));
    let t = load(&with_egress).unwrap().apps[0].turns;
    assert_eq!((t.order, t.end, t.withhold_on_newer), (Order::Queue, End::Reply, false));
    assert_eq!(
        (t.quiet, t.pass_after, t.timeout),
        (Duration::from_secs(3), Duration::from_secs(45), Duration::from_secs(180))
    );
    let without = load(&app("a", "SG_T_TURNS_1", "turns = { order = \"latest\" }")).unwrap();
    assert_eq!((without.apps[0].turns.order, without.apps[0].turns.end), (Order::Latest, End::Answer));
}

#[test]
fn turns_that_cannot_work_are_refused_with_the_key_named() {
    let cases = [
        ("turns = { order = \"queue\", end = \"reply\" }", "app[0].turns.end"),
        ("turns = { order = \"off\", on_newer = \"withhold\" }", "app[0].turns.on_newer"),
        ("turns = { on_newer = \"withhold\" }", "app[0].turns.on_newer"),
        ("turns = { order = \"fifo\" }", "app[0].turns.order"),
        ("turns = { order = \"queue\", end = \"done\" }", "app[0].turns.end"),
        ("turns = { order = \"queue\", quiet = \"0s\" }", "app[0].turns.quiet"),
        ("turns = { order = \"queue\", timeout = \"soon\" }", "app[0].turns.timeout"),
    ];
    for (extra, key) in cases {
        assert_err(&load_err(&app("a", "SG_T_TURNS_2", extra)), key);
    }
    let withhold = format!(
        "[egress]\nlisten = \"127.0.0.1:0\"\n{}",
        app("a", "SG_T_TURNS_2", "turns = { order = \"queue\", on_newer = \"withhold\", quiet = \"1s\" }")
    );
    let t = load(&withhold).unwrap().apps[0].turns;
    assert!(t.withhold_on_newer && t.quiet == Duration::from_secs(1));
    let unknown = load_err(&app("a", "SG_T_TURNS_2", "turns = { order = \"queue\", when = \"now\" }"));
    assert_eq!(unknown.key, "(toml)", "{unknown}");
}

#[test]
fn the_history_tier_and_the_replies_fallback_are_checked() {
    let base = app("a", "SG_T_TIER_1", "");
    let egress = |lines: &str| format!("[egress]\nlisten = \"127.0.0.1:0\"\n{lines}\n{base}");
    let c = load(&egress("")).unwrap().egress;
    assert_eq!((c.history_tier, c.replies_fallback), (crate::config::HistoryTier::Tier3, false));
    assert_eq!((c.evidence_window, c.evidence_recent, c.replies_keep), (secs(5), secs(3600), secs(86_400)));
    let c =
        load(&egress("history_tier = \"tier1\"\nreplies_fallback = \"record\"\nreplies_keep = \"2h\"")).unwrap().egress;
    assert_eq!((c.history_tier.per_minute(), c.history_tier.page(), c.replies_fallback), (1, 15, true));
    assert_eq!(c.replies_keep, secs(7200));
    assert_err(&load_err(&egress("history_tier = \"tier2\"")), "egress.history_tier");
    assert_err(&load_err(&egress("replies_fallback = \"on\"")), "egress.replies_fallback");
    assert_err(&load_err(&egress("evidence_recent = \"0s\"")), "egress.evidence_recent");
}

fn secs(n: u64) -> std::time::Duration {
    std::time::Duration::from_secs(n)
}

// ---------------------------------------------------------------- lost runs

#[test]
fn lost_runs_are_run_again_by_default_for_socket_bots_only_and_watched_without_order() {
    let egress = "[egress]\nlisten = \"127.0.0.1:0\"\n";
    let http = load(&format!("{egress}{}", app("a", "SG_T_RUNS_1", ""))).unwrap();
    assert_eq!(http.apps[0].runs, RunsConfig::OFF.with_limit(1));
    assert_eq!(http.apps[0].run_rules(), None, "an HTTP bot's runs are not tracked by default");
    let addressed = load(&format!("{egress}{}", app("a", "SG_T_RUNS_1", "rerun_lost = \"addressed\""))).unwrap();
    let r = addressed.apps[0].run_rules().expect("tracked");
    assert_eq!((addressed.apps[0].runs.lost, r.order, r.end), (RerunLost::Addressed, Order::Watch, End::Reply));
    let queued = format!(
        "{egress}{}",
        app("a", "SG_T_RUNS_1", "rerun_lost = \"socket\"\nrerun_limit = 3\nturns = { order = \"queue\" }")
    );
    let queued = load(&queued).unwrap();
    assert_eq!(queued.apps[0].runs, RunsConfig { lost: RerunLost::Socket, limit: 3 });
    assert_eq!(queued.apps[0].run_rules().map(|r| r.order), Some(Order::Queue), "the turns track the runs");
}

#[test]
fn lost_runs_that_cannot_work_are_refused_with_the_key_named() {
    let egress = "[egress]\nlisten = \"127.0.0.1:0\"\n";
    let cases = [
        ("", "rerun_lost = \"addressed\"", "app[0].rerun_lost"),
        (egress, "rerun_lost = \"always\"", "app[0].rerun_lost"),
        (egress, "rerun_limit = 11", "app[0].rerun_limit"),
        (egress, "rerun_limit = -1", "app[0].rerun_limit"),
    ];
    for (head, extra, key) in cases {
        assert_err(&load_err(&format!("{head}{}", app("a", "SG_T_RUNS_2", extra))), key);
    }
}
