//! Form decoding: arbitrary bytes as a form never panic and classify as the reference model
//! says; a form serialised from arbitrary pairs (and a payload) decodes back to them and
//! classifies to the same request kind and fields.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use slackgate_fuzz::checks::{self, PayloadFields};

/// Field names: mostly the ones `classify` reads, so that every branch is reached.
#[derive(Debug, Arbitrary)]
enum Name {
    Command,
    ChannelId,
    ResponseUrl,
    Payload,
    TriggerId,
    SslCheck,
    Other(String),
}

#[derive(Debug, Arbitrary)]
enum FieldValue {
    One,
    Empty,
    Any(String),
}

#[derive(Debug, Arbitrary)]
struct Payload {
    kind: Option<String>,
    trigger_id: Option<String>,
    response_url: Option<String>,
    channel_id: Option<String>,
}

#[derive(Debug, Arbitrary)]
enum Input {
    Raw(Vec<u8>),
    Pairs { pairs: Vec<(Name, FieldValue)>, payload: Option<Payload> },
}

fuzz_target!(|input: Input| match input {
    Input::Raw(bytes) => checks::form_bytes(&bytes),
    Input::Pairs { pairs, payload } => {
        let pairs: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(name, value)| {
                let name = match name {
                    Name::Command => "command".into(),
                    Name::ChannelId => "channel_id".into(),
                    Name::ResponseUrl => "response_url".into(),
                    Name::Payload => "payload".into(),
                    Name::TriggerId => "trigger_id".into(),
                    Name::SslCheck => "ssl_check".into(),
                    Name::Other(s) => s,
                };
                let value = match value {
                    FieldValue::One => "1".into(),
                    FieldValue::Empty => String::new(),
                    FieldValue::Any(s) => s,
                };
                (name, value)
            })
            .collect();
        let payload = payload.map(|p| PayloadFields {
            kind: p.kind,
            trigger_id: p.trigger_id,
            response_url: p.response_url,
            channel_id: p.channel_id,
        });
        checks::form_pairs(&pairs, payload.as_ref());
    }
});
