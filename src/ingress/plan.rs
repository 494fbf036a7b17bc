//! What recording one verified delivery will do, decided without the store: whether a filter
//! ignores it, which message claim it takes or cancels, which shard it lives on, and where it
//! waits. Pure, so every branch is tested here.

use std::time::Duration;

use crate::config::AppConfig;
use crate::outbox::{self, Placement};
use crate::slack::{self, Delivery, Kind};

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
    // The message identity picks the shard, so every event of one message meets its claim;
    // otherwise the receipt does, so Slack's retries meet theirs.
    let shard = match claim.as_deref().or(cancel.as_deref()).or(d.receipt.as_deref()) {
        Some(key) => outbox::shard_of(key, shards),
        None => (nonce % u64::from(shards.max(1))) as u16,
    };
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
    fn an_event_goes_on_the_stream_of_its_receipts_shard() {
        let d = message("null", "U1");
        let p = plan(&d, &app(""), 8, 1000, 0xab);
        assert_eq!(p.placement, Placement::Stream);
        assert_eq!((p.ignored, p.claim.as_deref(), p.cancel.as_deref(), p.inline), (None, None, None, None));
        assert_eq!(p.shard, outbox::shard_of("e:Ev1", 8));
        assert_eq!(p.id, format!("{}-00000000000000ab", p.shard));
        assert!(!p.skips_store());
    }

    #[test]
    fn a_message_claim_picks_the_shard() {
        let a = app("dedupe = { message = true }");
        let p = plan(&message("null", "U1"), &a, 8, 1000, 1);
        assert_eq!(p.claim.as_deref(), Some("m:T1:C1:1.5"));
        assert_eq!(p.shard, outbox::shard_of("m:T1:C1:1.5", 8));
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
        assert_eq!(deleted.shard, outbox::shard_of("m:T1:C1:1.5", 4), "it meets the claim it cancels");
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
