//! Integration tests: a real `redis-server`, the real `slackgate` binary, real HTTP servers on
//! loopback. Every test brings its own Redis and its own key prefix.

mod utils;

mod agent_threads;
mod bad_input;
mod bolt;
mod browser_selftest;
mod cli;
mod cluster;
mod dashboard;
mod dedupe;
mod delivery;
mod edges;
mod egress;
mod egress_claims;
mod egress_common;
mod egress_http;
mod egress_limits;
mod evidence;
mod fake_socket_selftest;
mod fake_stream_selftest;
mod fence;
mod hidden;
mod history;
mod interactive;
mod lifecycle;
mod listeners;
mod logs;
mod messages;
mod operate;
mod overload;
mod redis_locked;
mod replies_record;
mod sentinel;
mod sim;
mod socket_bots;
mod socket_mode;
mod store_outage;
mod streams;
mod turn_rules;
mod turns;
mod ui;
mod ui_auth;
mod ui_browser;
mod ui_sessions;
mod unsigned;
