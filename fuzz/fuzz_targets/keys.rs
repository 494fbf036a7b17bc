//! Message keys: `message_key` / `deleted_message_key` of arbitrary messages are deterministic,
//! exclusive, of the documented shape and whitespace-free when the ids are; from a JSON event,
//! a `message` and an `app_mention` of one post share a key, an edit has its own, and a
//! deletion names the deleted message's key.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use slackgate::slack::Message;
use slackgate_fuzz::checks::{self, EventFields};

#[derive(Debug, Arbitrary)]
enum Subtype {
    None,
    Changed,
    Deleted,
    BotMessage,
    Other(String),
}

impl Subtype {
    fn name(self) -> Option<String> {
        match self {
            Subtype::None => None,
            Subtype::Changed => Some("message_changed".into()),
            Subtype::Deleted => Some("message_deleted".into()),
            Subtype::BotMessage => Some("bot_message".into()),
            Subtype::Other(s) => Some(s),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    team: String,
    channel: String,
    ts: String,
    edit_ts: Option<String>,
    subtype: Subtype,
    user: Option<String>,
    bot_id: Option<String>,
    bot_user: String,
    mention: bool,
    mentions_bot: bool,
    previously_mentioned_bot: bool,
}

fuzz_target!(|i: Input| {
    let subtype = i.subtype.name();
    let m = Message {
        team: i.team.clone(),
        channel: i.channel.clone(),
        ts: i.ts.clone(),
        edit_ts: i.edit_ts.clone(),
        subtype: subtype.clone(),
        user: i.user.clone(),
        bot_id: i.bot_id.clone(),
        mentions_bot: i.mentions_bot,
        previously_mentioned_bot: i.previously_mentioned_bot,
    };
    checks::message_keys(&m);
    checks::event_keys(&EventFields {
        team: i.team,
        channel: i.channel,
        ts: i.ts,
        edit_ts: i.edit_ts.unwrap_or_default(),
        user: i.user.unwrap_or_default(),
        bot_user: i.bot_user,
        mention: i.mention,
        bot_id: i.bot_id,
        subtype,
    });
});
