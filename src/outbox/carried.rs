//! A carried delivery's fields, packed into its stream entry's one field `c` (see
//! `scripts::RECORD_CARRIED`): each field as its length in decimal, `:`, and its bytes, in the
//! order of `ct p k rcv cv x ru b` (the names their hash would give them) — which the
//! scripts' `unpack_carried` shares. One string rather than
//! eight is eight fewer strings for Lua to make, for the AOF to write, for the stream to keep and
//! for the reader to parse, on every event; lengths rather than separators, because a payload's
//! conversation, detail or response URL may hold any byte.

use bytes::Bytes;

use super::{Kept, NewDelivery, Stored};
use crate::slack::{Conversation, Kind};

/// `d`'s fields, packed.
pub fn pack(d: &NewDelivery<'_>) -> Vec<u8> {
    let received = d.received_ms.to_string();
    let fields: [&[u8]; 8] = [
        d.content_type,
        d.path.as_bytes(),
        d.kind.as_str().as_bytes(),
        received.as_bytes(),
        d.conversation.as_bytes(),
        d.detail.as_bytes(),
        d.response_url.as_bytes(),
        d.body,
    ];
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 8).sum());
    for f in fields {
        out.extend_from_slice(f.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(f);
    }
    out
}

/// A packed delivery as stored; `None` when the bytes are not a whole packing (then the
/// delivery is read as gone: nothing a worker could send).
pub fn unpack(packed: Vec<u8>) -> Option<Stored> {
    let packed = Bytes::from(packed);
    let mut parts: [Bytes; 8] = Default::default();
    let mut at = 0;
    for part in &mut parts {
        let colon = at + packed.get(at..)?.iter().position(|&b| b == b':')?;
        let n: usize = std::str::from_utf8(&packed[at..colon]).ok()?.parse().ok()?;
        let end = colon.checked_add(1 + n).filter(|&end| end <= packed.len())?;
        *part = packed.slice(colon + 1..end);
        at = end;
    }
    if at != packed.len() {
        return None;
    }
    let [ct, path, kind, received, cv, detail, response_url, body] = parts;
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    Some(Stored {
        body,
        content_type: text(&ct),
        path: text(&path),
        kind: Kind::parse(&text(&kind)),
        received_ms: text(&received).parse().unwrap_or(0),
        retries: 0,
        detail: text(&detail),
        response_url: text(&response_url),
        last_status: None,
        last_error: String::new(),
        dead: false,
        conversation: std::str::from_utf8(&cv).ok().and_then(Conversation::decode).map_or(Kept::None, Kept::Some),
        claim: String::new(),
        paused_ms: 0,
        reruns: 0,
        rerun_from: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Placement;
    use proptest::prelude::*;
    use std::time::Duration;

    fn new<'a>(body: &'a [u8], cv: &'a str, detail: &'a str, ru: &'a str) -> NewDelivery<'a> {
        NewDelivery {
            id: "0-1",
            receipt: Some("e:Ev1"),
            body,
            content_type: b"application/json",
            path: "/slack/events",
            kind: Kind::Event,
            received_ms: 1_700_000_000_123,
            ttl: Duration::from_secs(1),
            placement: Placement::Stream,
            claim: None,
            cancel: None,
            detail,
            response_url: ru,
            conversation: cv,
            carry: true,
        }
    }

    #[test]
    fn the_scripts_unpack_the_fields_in_the_same_order() {
        let lua = "local CARRIED = {'ct', 'p', 'k', 'rcv', 'cv', 'x', 'ru', 'b'}";
        assert!(crate::outbox::scripts::FINISH.contains(lua) && crate::outbox::scripts::READ_LOADED.contains(lua));
    }

    #[test]
    fn a_delivery_comes_back_as_it_was_packed() {
        let d = unpack(pack(&new(b"{\"a\":1}", "T1\tC1\t1.5\t1.5", "app_mention", ""))).unwrap();
        assert_eq!(&d.body[..], b"{\"a\":1}");
        assert_eq!(
            (d.content_type.as_str(), d.path.as_str(), d.kind),
            ("application/json", "/slack/events", Kind::Event)
        );
        assert_eq!((d.received_ms, d.detail.as_str(), d.response_url.as_str()), (1_700_000_000_123, "app_mention", ""));
        let c = Conversation { team: "T1".into(), channel: "C1".into(), ts: "1.5".into(), thread: "1.5".into() };
        assert_eq!(d.conversation, Kept::Some(c));
        assert_eq!(unpack(pack(&new(b"", "", "", ""))).unwrap().conversation, Kept::None);
    }

    #[test]
    fn bytes_that_are_not_a_whole_packing_are_nothing() {
        let whole = pack(&new(b"body", "", "x", "https://hooks.slack.com/a"));
        assert!(unpack(whole.clone()).is_some());
        for cut in 0..whole.len() {
            assert!(unpack(whole[..cut].to_vec()).is_none(), "cut at {cut}");
        }
        let mut more = whole;
        more.push(b'1');
        assert!(unpack(more).is_none(), "a byte past the last field");
        assert!(unpack(b"99999999999999999999999:".to_vec()).is_none());
    }

    proptest! {
        #[test]
        fn any_bytes_in_any_field_come_back(body in proptest::collection::vec(any::<u8>(), 0..300),
                                            cv in ".{0,40}", detail in "[:0-9]{0,20}", ru in ".{0,40}") {
            let d = unpack(pack(&new(&body, &cv, &detail, &ru))).unwrap();
            prop_assert_eq!(&d.body[..], &body[..]);
            prop_assert_eq!(d.detail, detail);
            prop_assert_eq!(d.response_url, ru);
        }

        #[test]
        fn no_bytes_panic_the_unpacking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = unpack(bytes);
        }
    }
}
