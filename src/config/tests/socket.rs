//! `socket_mode` and `upstream = "socket"`.

use super::*;

fn socket_app(extra: &str, upstream: &str) -> String {
    set_env("SG_CFG_SOCK_SECRET", "s3cr3t-value");
    set_env("SG_CFG_XAPP", "xapp-1-A1-secret");
    set_env("SG_CFG_XOXB", "xoxb-not-an-app-token");
    format!(
        "[[app]]\nname = \"bot\"\nsigning_secret = \"${{SG_CFG_SOCK_SECRET}}\"\nupstream = \"{upstream}\"\n{extra}\n"
    )
}

const EGRESS: &str = "[egress]\nlisten = \"127.0.0.1:0\"\n";

#[test]
fn socket_mode_takes_an_app_token_from_the_environment_only() {
    let c = load(&socket_app("socket_mode = { app_token = \"${SG_CFG_XAPP}\" }", "http://127.0.0.1:8000")).unwrap();
    let s = c.apps[0].socket_mode.as_ref().unwrap();
    assert_eq!((s.connections, s.api_url.url.as_str()), (2, "https://slack.com/api/"));
    assert_eq!(s.app_token.expose(), b"xapp-1-A1-secret");
    assert!(!format!("{s:?}").contains("xapp-1"), "the token in a Debug: {s:?}");
    let written =
        load_err(&socket_app("socket_mode = { app_token = \"xapp-1-in-the-file\" }", "http://127.0.0.1:8000"));
    assert_err(&written, "app[0].socket_mode.app_token");
    assert!(!written.to_string().contains("in-the-file"), "{written}");
    let bot_token = load_err(&socket_app("socket_mode = { app_token = \"${SG_CFG_XOXB}\" }", "http://127.0.0.1:8000"));
    assert_err(&bot_token, "app[0].socket_mode.app_token");
    let many = load_err(&socket_app("socket_mode = { app_token = \"${SG_CFG_XAPP}\", connections = 11 }", "http://x"));
    assert_err(&many, "app[0].socket_mode.connections");
}

#[test]
fn a_socket_upstream_needs_its_token_the_egress_and_no_passthrough() {
    let token = "socket_mode = { app_token = \"${SG_CFG_XAPP}\", connections = 0 }";
    let ok = load(&format!("{EGRESS}{}", socket_app(token, "socket"))).unwrap();
    assert!(ok.apps[0].upstream.socket && ok.socket_bots());
    assert_eq!(ok.server.socket_listen, "127.0.0.1:3002");
    let passthrough =
        load_err(&format!("{EGRESS}{}", socket_app(&format!("{token}\npassthrough = [\"/x\"]"), "socket")));
    assert_err(&passthrough, "app[0].passthrough");
    assert_err(&load_err(&format!("{EGRESS}{}", socket_app("", "socket"))), "app[0].upstream");
    assert_err(&load_err(&socket_app(token, "socket")), "app[0].upstream");
    let same = format!("[server]\nsocket_listen = \"127.0.0.1:9090\"\n{EGRESS}{}", socket_app(token, "socket"));
    assert_err(&load_err(&same), "server.socket_listen");
}

#[test]
fn check_warns_past_slacks_ten_sockets_over_the_replicas() {
    let c =
        load(&socket_app("socket_mode = { app_token = \"${SG_CFG_XAPP}\", connections = 4 }", "http://127.0.0.1:8000"))
            .unwrap();
    assert!(super::super::socket::warnings(&c.apps, 2).is_empty());
    let w = super::super::socket::warnings(&c.apps, 3);
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("12 sockets"), "{w:?}");
}
