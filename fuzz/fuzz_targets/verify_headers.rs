//! Signature headers: arbitrary `X-Slack-Request-Timestamp` / `X-Slack-Signature` bytes never
//! panic and get the reference model's answer; a body signed with `sign` verifies inside the
//! window and fails after any one changed byte.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use slackgate_fuzz::checks;

#[derive(Debug, Arbitrary)]
struct Input {
    secret: String,
    other_secret: String,
    timestamp: Option<Vec<u8>>,
    signature: Option<Vec<u8>>,
    body: Vec<u8>,
    now: u64,
    signed_at: u64,
    skew: i16,
    flip_at: usize,
    flip_mask: u8,
}

fuzz_target!(|i: Input| {
    let (ts, sig) = (i.timestamp.as_deref(), i.signature.as_deref());
    // The clock's seconds are never negative.
    checks::verify_headers(&i.secret, ts, sig, &i.body, (i.now >> 1) as i64);
    // Also at a `now` near a well-formed timestamp, so that the signature check is reached.
    let parsed =
        ts.and_then(|t| std::str::from_utf8(t).ok()).filter(|t| t.len() <= 12).and_then(|t| t.parse::<i64>().ok());
    if let Some(t) = parsed {
        let now = (t + i64::from(i.skew) % 301).max(0);
        checks::verify_headers(&i.secret, ts, sig, &i.body, now);
    }
    let t = (i.signed_at % 1_000_000_000_000) as i64;
    let skew = i64::from(i.skew) % 301;
    checks::verify_signed(&i.secret, &i.other_secret, t, &i.body, skew, i.flip_at, i.flip_mask.max(1));
});
