//! What recording one verified delivery will do, decided without the store: whether a filter
//! ignores it, which message claim it takes or cancels, which shard it lives on, and where it
//! waits. Pure, so every branch is tested here.
//! The [`Verified`] delivery it plans for is defined here too: the Slack route, the envelopes
//! and the history's arrival all take it from this leaf.

use std::time::Duration;

use bytes::Bytes;

use crate::config::AppConfig;
use crate::outbox::{self, Placement};
use crate::slack::{self, Delivery, Kind};

/// A verified delivery and what came with it, on its way to the store.
pub(super) struct Verified {
    pub delivery: slack::Delivery,
    pub content_type: Vec<u8>,
    pub body: Bytes,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The filter that ignores it (acked, not forwarded).
    pub ignored: Option<slack::IgnoreReason>,
    /// The message claim it takes (`dedupe.message`).
    pub claim: Option<String>,
    /// The claim of a message it deletes, whose waiting delivery it cancels.
    pub cancel: Option<String>,
    pub shard: u16,
    /// `<shard>-<16 hex>`: the delivery id, which names its shard.
    pub id: String,
    pub placement: Placement,
    /// The budget of an inline attempt (commands and interactions).
    pub inline: Option<Duration>,
    /// The conversation its message starts or continues (a human post or a thread broadcast),
    /// kept with the delivery so that nothing after the record reads the body for it.
    pub conversation: Option<slack::Conversation>,
}

impl Plan {
    /// Nothing to record at all: ignored, and cancelling nothing.
    pub fn skips_store(&self) -> bool {
        self.ignored.is_some() && self.cancel.is_none()
    }
}

/// Plan the record of `d` for `app` over `shards` shards, received at `now_ms`; `nonce` makes
/// the delivery id unique.
pub fn plan(d: &Delivery, app: &AppConfig, shards: u16, now_ms: u64, nonce: u64) -> Plan {
    let message = d.message.as_ref();
    let cancel = message.filter(|_| app.cancel_on_delete).and_then(slack::deleted_message_key);
    let ignored = slack::ignore_reason(d, &app.rules);
    let claim = message.filter(|_| app.message_dedupe && ignored.is_none()).and_then(slack::message_key);
    let shard = shard(d, claim.as_deref().or(cancel.as_deref()), shards, nonce);
    let inline = match d.kind {
        Kind::Command => app.inline_command,
        Kind::Interactivity => app.inline_interactivity,
        Kind::Event | Kind::Opaque => None,
    };
    let placement = match (ignored, inline) {
        (Some(_), _) => Placement::Discard,
        (None, Some(_)) => Placement::Inline { due_ms: now_ms + app.delivery.lease.as_millis() as u64 },
        (None, None) => Placement::Stream,
    };
    let conversation = slack::conversation_of(d);
    Plan { ignored, claim, cancel, shard, id: format!("{shard}-{nonce:016x}"), placement, inline, conversation }
}

/// The shard a delivery lives on, the same for every app whatever its `turns`, and for every
/// retry of it. A message's conversation picks it, so that every delivery of one conversation
/// meets its turn, every event of one message meets its claim, and a deletion meets the
/// delivery it cancels; otherwise the message claim (`claim`) or the receipt does, so Slack's
/// retries meet theirs.
pub fn shard(d: &Delivery, claim: Option<&str>, shards: u16, nonce: u64) -> u16 {
    if let Some(conversation) = slack::conversation_key(d) {
        return outbox::shard_of(&format!("c:{conversation}"), shards);
    }
    legacy_shard(d, claim, shards, nonce)
}

/// The shard versions before turns gave a delivery: its message claim's or its receipt's.
/// A retry of a delivery recorded by one of them finds its receipt there (see
/// `outbox::Store::earlier_receipt`).
pub fn legacy_shard(d: &Delivery, claim: Option<&str>, shards: u16, nonce: u64) -> u16 {
    match claim.or(d.receipt.as_deref()) {
        Some(key) => outbox::shard_of(key, shards),
        None => (nonce % u64::from(shards.max(1))) as u16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};
    use crate::slack::{classify, IgnoreReason, Request};

    fn app(extra: &str) -> AppConfig {
        std::env::set_var("SG_PLAN_SECRET", "s");
        let text = format!(
            "[[app]]\nname = \"a\"\nsigning_secret = \"${{SG_PLAN_SECRET}}\"\nupstream = \"http://127.0.0.1:1\"\n{extra}"
        );
        let c = Config::from_toml(&text, std::path::Path::new("t.toml"), &Overrides::default()).unwrap();
        (*c.apps[0]).clone()
    }

    fn delivery(ct: &[u8], body: &str) -> Delivery {
        match classify(ct, body.as_bytes()).unwrap() {
            Request::Delivery(d) => d,
            other => panic!("{other:?}"),
        }
    }

    fn message(subtype: &str, user: &str) -> Delivery {
        let event = format!(
            r#"{{"type":"message","subtype":{subtype},"user":"{user}","text":"hi","channel":"C1","ts":"1.5","deleted_ts":"1.5"}}"#
        );
        delivery(
            b"application/json",
            &format!(
                r#"{{"type":"event_callback","event_id":"Ev1","team_id":"T1","authorizations":[{{"user_id":"UBOT","is_bot":true}}],"event":{event}}}"#
            ),
        )
    }

    #[test]
    fn a_message_goes_on_the_stream_of_its_conversations_shard() {
        let d = message("null", "U1");
        let p = plan(&d, &app(""), 8, 1000, 0xab);
        assert_eq!(p.placement, Placement::Stream);
        assert_eq!((p.ignored, p.claim.as_deref(), p.cancel.as_deref(), p.inline), (None, None, None, None));
        assert_eq!(p.shard, outbox::shard_of("c:T1:C1:1.5", 8));
        assert_eq!(p.id, format!("{}-00000000000000ab", p.shard));
        assert_eq!(legacy_shard(&d, None, 8, 0xab), outbox::shard_of("e:Ev1", 8), "versions before turns");
        assert!(!p.skips_store());
    }

    #[test]
    fn an_event_without_a_message_goes_on_its_receipts_shard() {
        let reaction = delivery(
            b"application/json",
            r#"{"type":"event_callback","event_id":"Ev9","team_id":"T1","event":{"type":"reaction_added","item":{"channel":"C1","ts":"1.5"}}}"#,
        );
        let p = plan(&reaction, &app(""), 8, 1000, 1);
        assert_eq!(p.shard, outbox::shard_of("e:Ev9", 8));
        assert_eq!(p.shard, legacy_shard(&reaction, None, 8, 1));
    }

    #[test]
    fn every_delivery_of_one_thread_shares_a_shard_whatever_the_apps_turns() {
        let event = |id: &str, inner: &str| {
            delivery(
                b"application/json",
                &format!(r#"{{"type":"event_callback","event_id":"{id}","team_id":"T1","event":{inner}}}"#),
            )
        };
        let root = event("Ev1", r#"{"type":"message","user":"U1","text":"q","channel":"C1","ts":"1.5"}"#);
        let reply =
            event("Ev2", r#"{"type":"message","user":"U2","text":"a","channel":"C1","ts":"2.5","thread_ts":"1.5"}"#);
        let mention = event(
            "Ev3",
            r#"{"type":"app_mention","user":"U2","text":"<@UBOT>","channel":"C1","ts":"2.5","thread_ts":"1.5"}"#,
        );
        let edit = event(
            "Ev4",
            r#"{"type":"message","subtype":"message_changed","channel":"C1","ts":"3.0","message":{"user":"U2","text":"b","ts":"2.5","thread_ts":"1.5"}}"#,
        );
        let deletion = event(
            "Ev5",
            r#"{"type":"message","subtype":"message_deleted","channel":"C1","ts":"4.0","deleted_ts":"2.5","previous_message":{"ts":"2.5","thread_ts":"1.5"}}"#,
        );
        let other = event("Ev6", r#"{"type":"message","user":"U1","text":"q","channel":"C1","ts":"9.5"}"#);
        let on = app("turns = { order = \"queue\", end = \"answer\" }");
        for shards in [2, 4, 16] {
            let shard = |d: &Delivery, a: &AppConfig| plan(d, a, shards, 0, 7).shard;
            let want = outbox::shard_of("c:T1:C1:1.5", shards);
            for d in [&root, &reply, &mention, &edit, &deletion] {
                assert_eq!((shard(d, &app("")), shard(d, &on)), (want, want), "{:?}", d.message);
            }
            assert_eq!(shard(&other, &app("")), outbox::shard_of("c:T1:C1:9.5", shards));
        }
    }

    #[test]
    fn an_assistant_threads_events_share_its_messages_shard_and_take_no_turn() {
        let event = |id: &str, inner: &str| {
            delivery(
                b"application/json",
                &format!(r#"{{"type":"event_callback","event_id":"{id}","team_id":"T1","event":{inner}}}"#),
            )
        };
        let thread = r#"{"user_id":"U1","context":{"channel_id":"C1"},"channel_id":"D1","thread_ts":"1.5"}"#;
        let started = event("Ev1", &format!(r#"{{"type":"assistant_thread_started","assistant_thread":{thread}}}"#));
        let changed =
            event("Ev2", &format!(r#"{{"type":"assistant_thread_context_changed","assistant_thread":{thread}}}"#));
        let question = event(
            "Ev3",
            r#"{"type":"message","user":"U1","text":"q","channel":"D1","channel_type":"im","ts":"2.5","thread_ts":"1.5"}"#,
        );
        for shards in [2, 4, 16] {
            let want = outbox::shard_of("c:T1:D1:1.5", shards);
            for d in [&started, &changed, &question] {
                assert_eq!(plan(d, &app(""), shards, 0, 7).shard, want, "{}", d.detail);
            }
        }
        assert_eq!(plan(&started, &app(""), 1, 0, 1).conversation, None);
        assert_eq!(plan(&question, &app(""), 1, 0, 1).conversation.map(|c| c.key()).as_deref(), Some("T1:D1:1.5"));
    }

    #[test]
    fn a_dms_messages_outside_a_thread_are_one_conversation() {
        let dm = |ts: &str, extra: &str| {
            delivery(
                b"application/json",
                &format!(
                    r#"{{"type":"event_callback","event_id":"Ev{ts}","team_id":"T1","event":{{"type":"message","user":"U1","text":"q","channel":"D1","channel_type":"im","ts":"{ts}"{extra}}}}}"#
                ),
            )
        };
        let (a, b) = (plan(&dm("1.5", ""), &app(""), 1, 0, 1), plan(&dm("2.5", ""), &app(""), 1, 0, 1));
        let (a, b) = (a.conversation.unwrap(), b.conversation.unwrap());
        assert_eq!((a.key(), b.key()), ("T1:D1:-".to_string(), "T1:D1:-".to_string()));
        let threaded = plan(&dm("3.5", r#","thread_ts":"1.5""#), &app(""), 1, 0, 1).conversation.unwrap();
        assert_eq!(threaded.key(), "T1:D1:1.5", "a thread in a DM is its own conversation");
    }

    #[test]
    fn a_message_claim_rides_on_its_conversations_shard() {
        let a = app("dedupe = { message = true }");
        let p = plan(&message("null", "U1"), &a, 8, 1000, 1);
        assert_eq!(p.claim.as_deref(), Some("m:T1:C1:1.5"));
        assert_eq!(p.shard, outbox::shard_of("c:T1:C1:1.5", 8));
    }

    #[test]
    fn an_ignored_delivery_is_not_stored_unless_it_cancels() {
        let a =
            app("dedupe = { message = true, cancel_on_delete = true }\nignore = { subtypes = [\"message_deleted\"] }");
        let own = plan(&message("null", "UBOT"), &a, 1, 0, 1);
        assert_eq!(
            (own.ignored, own.claim.as_deref()),
            (Some(IgnoreReason::OwnMessage), None),
            "an ignored copy claims nothing"
        );
        assert!(own.skips_store());
        let deleted = plan(&message("\"message_deleted\"", "U1"), &a, 4, 0, 1);
        assert_eq!(deleted.ignored, Some(IgnoreReason::Subtype));
        assert_eq!(deleted.cancel.as_deref(), Some("m:T1:C1:1.5"));
        assert_eq!(deleted.placement, Placement::Discard);
        let original = plan(&message("null", "U1"), &a, 4, 0, 1);
        assert_eq!(deleted.shard, original.shard, "it meets the claim it cancels");
        assert!(!deleted.skips_store());
    }

    #[test]
    fn commands_and_interactions_are_held_for_their_inline_attempt() {
        let a = app("delivery = { lease = \"30s\" }\ninline = { interactivity = \"off\" }");
        let cmd = delivery(b"application/x-www-form-urlencoded", "command=%2Fx&trigger_id=1.2");
        let p = plan(&cmd, &a, 1, 1_000, 1);
        assert_eq!(p.placement, Placement::Inline { due_ms: 31_000 });
        assert_eq!(p.inline, Some(Duration::from_millis(2500)));
        let action = delivery(b"application/x-www-form-urlencoded", "payload=%7B%22type%22%3A%22block_actions%22%7D");
        let p = plan(&action, &a, 1, 1_000, 1);
        assert_eq!((p.placement, p.inline), (Placement::Stream, None), "inline off");
    }

    #[test]
    fn without_a_receipt_the_nonce_spreads_deliveries() {
        let suggestion = delivery(
            b"application/x-www-form-urlencoded",
            "payload=%7B%22type%22%3A%22block_suggestion%22%2C%22value%22%3A%22al%22%7D",
        );
        assert_eq!(suggestion.receipt, None);
        let shards: std::collections::BTreeSet<u16> =
            (0..64).map(|n| plan(&suggestion, &app(""), 4, 0, n).shard).collect();
        assert_eq!(shards.len(), 4);
    }

    #[test]
    fn a_post_keeps_its_conversation_and_edits_or_commands_keep_none() {
        let post = plan(&message("null", "U1"), &app(""), 1, 0, 1);
        let c = post.conversation.expect("a human post starts a conversation");
        assert_eq!((c.team.as_str(), c.channel.as_str(), c.ts.as_str(), c.thread.as_str()), ("T1", "C1", "1.5", "1.5"));
        for subtype in [r#""message_changed""#, r#""message_deleted""#, r#""channel_join""#] {
            assert_eq!(plan(&message(subtype, "U1"), &app(""), 1, 0, 1).conversation, None, "{subtype}");
        }
        let broadcast = plan(&message(r#""thread_broadcast""#, "U1"), &app(""), 1, 0, 1);
        assert!(broadcast.conversation.is_some());
        let command = delivery(b"application/x-www-form-urlencoded", "command=%2Fx&channel_id=C1&trigger_id=1.2");
        assert_eq!(plan(&command, &app(""), 1, 0, 1).conversation, None);
    }
}
