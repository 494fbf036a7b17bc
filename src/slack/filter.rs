//! Which deliveries an app does not want (acked and counted, never an error status), and the
//! message identity that collapses Slack's several events for one human message.

use super::classify::{Delivery, Message};

/// An app's filters, from `ignore = { … }` and `dedupe = { edits = … }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// The app's own messages (the user `authorizations` marks as the bot), like Bolt's
    /// self-event filter.
    pub own_messages: bool,
    /// Messages of other bots (`bot_id` set), except those in `allow_bots`.
    pub bot_messages: bool,
    pub allow_bots: Vec<String>,
    pub subtypes: Vec<String>,
    /// When non-empty, only these channels.
    pub channels_allow: Vec<String>,
    pub channels_deny: Vec<String>,
    /// Forward a `message_changed` only when the edit adds the bot's mention.
    pub edits_mention_added: bool,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            own_messages: true,
            bot_messages: false,
            allow_bots: Vec::new(),
            subtypes: Vec::new(),
            channels_allow: Vec::new(),
            channels_deny: Vec::new(),
            edits_mention_added: false,
        }
    }
}

/// Why a delivery is not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoreReason {
    ChannelDenied,
    ChannelNotAllowed,
    Subtype,
    OwnMessage,
    BotMessage,
    Edit,
}

impl IgnoreReason {
    pub const ALL: [IgnoreReason; 6] = [
        IgnoreReason::ChannelDenied,
        IgnoreReason::ChannelNotAllowed,
        IgnoreReason::Subtype,
        IgnoreReason::OwnMessage,
        IgnoreReason::BotMessage,
        IgnoreReason::Edit,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            IgnoreReason::ChannelDenied => "channel_denied",
            IgnoreReason::ChannelNotAllowed => "channel_not_allowed",
            IgnoreReason::Subtype => "subtype",
            IgnoreReason::OwnMessage => "own_message",
            IgnoreReason::BotMessage => "bot_message",
            IgnoreReason::Edit => "edit",
        }
    }
}

/// Why a delivery is ignored, or `None` to forward it.
pub fn ignore_reason(d: &Delivery, rules: &Rules) -> Option<IgnoreReason> {
    if let Some(channel) = &d.channel {
        if rules.channels_deny.contains(channel) {
            return Some(IgnoreReason::ChannelDenied);
        }
        if !rules.channels_allow.is_empty() && !rules.channels_allow.contains(channel) {
            return Some(IgnoreReason::ChannelNotAllowed);
        }
    }
    let m = d.message.as_ref()?;
    if m.subtype.as_ref().is_some_and(|s| rules.subtypes.contains(s)) {
        return Some(IgnoreReason::Subtype);
    }
    if rules.own_messages && m.user.as_ref().is_some_and(|u| d.bot_users.contains(u)) {
        return Some(IgnoreReason::OwnMessage);
    }
    let other_bot = m.bot_id.is_some() || m.subtype.as_deref() == Some("bot_message");
    if rules.bot_messages && other_bot && !m.bot_id.as_ref().is_some_and(|b| rules.allow_bots.contains(b)) {
        return Some(IgnoreReason::BotMessage);
    }
    let is_edit = m.subtype.as_deref() == Some("message_changed");
    let adds_mention = m.mentions_bot && !m.previously_mentioned_bot;
    if is_edit && rules.edits_mention_added && !adds_mention {
        return Some(IgnoreReason::Edit);
    }
    None
}

/// The message claim of a message event: `m:<team>:<channel>:<ts>`, and for an edit
/// `…:<ts>:<edit ts>` so that an edit's own copies collapse without being taken for the
/// original. `None` for a deletion, which claims nothing (see [`deleted_message_key`]).
pub fn message_key(m: &Message) -> Option<String> {
    match (m.subtype.as_deref(), &m.edit_ts) {
        (Some("message_deleted"), _) => None,
        (Some("message_changed"), Some(edit)) => Some(format!("m:{}:{}:{}:{edit}", m.team, m.channel, m.ts)),
        (Some("message_changed"), None) => None,
        _ => Some(format!("m:{}:{}:{}", m.team, m.channel, m.ts)),
    }
}

/// For a `message_deleted`: the claim of the message it deletes.
pub fn deleted_message_key(m: &Message) -> Option<String> {
    (m.subtype.as_deref() == Some("message_deleted")).then(|| format!("m:{}:{}:{}", m.team, m.channel, m.ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slack::{classify, Request};

    fn delivery(json: &str) -> Delivery {
        match classify(b"application/json", json.as_bytes()).unwrap() {
            Request::Delivery(d) => d,
            other => panic!("{other:?}"),
        }
    }

    fn envelope(event: &str) -> String {
        format!(
            r#"{{"type":"event_callback","event_id":"Ev1","team_id":"T1","authorizations":[{{"user_id":"UBOT","is_bot":true}}],"event":{event}}}"#
        )
    }

    #[test]
    fn mention_and_message_of_one_post_share_a_key() {
        let a =
            delivery(&envelope(r#"{"type":"app_mention","user":"U1","text":"<@UBOT> hi","channel":"C1","ts":"1.5"}"#));
        let b = delivery(&envelope(r#"{"type":"message","user":"U1","text":"<@UBOT> hi","channel":"C1","ts":"1.5"}"#));
        let ka = message_key(a.message.as_ref().unwrap());
        assert_eq!(ka, Some("m:T1:C1:1.5".into()));
        assert_eq!(ka, message_key(b.message.as_ref().unwrap()));
        assert!(a.message.unwrap().mentions_bot);
    }

    #[test]
    fn an_edit_is_keyed_on_the_original_ts_and_its_own() {
        let e = delivery(&envelope(
            r#"{"type":"message","subtype":"message_changed","channel":"C1","ts":"2.0","message":{"user":"U1","text":"<@UBOT> now","ts":"1.5"},"previous_message":{"user":"U1","text":"before","ts":"1.5"}}"#,
        ));
        let m = e.message.as_ref().unwrap();
        assert_eq!(message_key(m), Some("m:T1:C1:1.5:2.0".into()));
        assert!(m.mentions_bot && !m.previously_mentioned_bot);
        let rules = Rules { edits_mention_added: true, ..Rules::default() };
        assert_eq!(ignore_reason(&e, &rules), None, "the edit adds the mention");
        let plain = delivery(&envelope(
            r#"{"type":"message","subtype":"message_changed","channel":"C1","ts":"3.0","message":{"user":"U1","text":"<@UBOT> typo fixed","ts":"1.5"},"previous_message":{"user":"U1","text":"<@UBOT> typo","ts":"1.5"}}"#,
        ));
        assert_eq!(ignore_reason(&plain, &rules), Some(IgnoreReason::Edit));
        assert_eq!(ignore_reason(&plain, &Rules::default()), None, "edits forwarded unless asked");
    }

    #[test]
    fn a_deletion_names_the_deleted_message() {
        let d = delivery(&envelope(
            r#"{"type":"message","subtype":"message_deleted","channel":"C1","ts":"9.0","deleted_ts":"1.5","previous_message":{"ts":"1.5"}}"#,
        ));
        let m = d.message.as_ref().unwrap();
        assert_eq!(message_key(m), None);
        assert_eq!(deleted_message_key(m), Some("m:T1:C1:1.5".into()));
    }

    #[test]
    fn filters() {
        let own = delivery(&envelope(
            r#"{"type":"message","user":"UBOT","bot_id":"BME","text":"hi","channel":"C1","ts":"1.1"}"#,
        ));
        assert_eq!(ignore_reason(&own, &Rules::default()), Some(IgnoreReason::OwnMessage));
        assert_eq!(ignore_reason(&own, &Rules { own_messages: false, ..Rules::default() }), None);
        let bot = delivery(&envelope(
            r#"{"type":"message","bot_id":"B9","subtype":"bot_message","text":"hi","channel":"C1","ts":"1.2"}"#,
        ));
        assert_eq!(ignore_reason(&bot, &Rules::default()), None);
        let no_bots = Rules { bot_messages: true, ..Rules::default() };
        assert_eq!(ignore_reason(&bot, &no_bots), Some(IgnoreReason::BotMessage));
        let allowed = Rules { allow_bots: vec!["B9".into()], ..no_bots.clone() };
        assert_eq!(ignore_reason(&bot, &allowed), None);
        let joined =
            delivery(&envelope(r#"{"type":"message","subtype":"channel_join","user":"U1","channel":"C1","ts":"1.3"}"#));
        assert_eq!(
            ignore_reason(&joined, &Rules { subtypes: vec!["channel_join".into()], ..Rules::default() }),
            Some(IgnoreReason::Subtype)
        );
        let human =
            delivery(&envelope(r#"{"type":"app_mention","user":"U1","text":"<@UBOT>","channel":"C1","ts":"1.4"}"#));
        assert_eq!(
            ignore_reason(&human, &Rules { channels_deny: vec!["C1".into()], ..Rules::default() }),
            Some(IgnoreReason::ChannelDenied)
        );
        assert_eq!(
            ignore_reason(&human, &Rules { channels_allow: vec!["C2".into()], ..Rules::default() }),
            Some(IgnoreReason::ChannelNotAllowed)
        );
        assert_eq!(ignore_reason(&human, &Rules { channels_allow: vec!["C1".into()], ..Rules::default() }), None);
        let reaction = delivery(&envelope(
            r#"{"type":"reaction_added","user":"U1","item":{"type":"message","channel":"C7","ts":"1.0"}}"#,
        ));
        assert_eq!(reaction.channel.as_deref(), Some("C7"));
        assert_eq!(
            ignore_reason(&reaction, &Rules { channels_deny: vec!["C7".into()], ..Rules::default() }),
            Some(IgnoreReason::ChannelDenied)
        );
    }
}
