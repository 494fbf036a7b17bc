//! Request classification: any content type and body never panic, classify the same way twice
//! and keep the receipt (≤ 140 bytes of printable ASCII, one of the documented shapes), error,
//! kind, message key and filter contracts. The first byte picks the content type.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slackgate_fuzz::checks::{self, FORM, JSON};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let content_type: &[u8] = match pick % 4 {
        0 => JSON,
        1 => FORM,
        2 => b"",
        _ => b"text/plain; charset=utf-8",
    };
    checks::classify_any(content_type, body);
});
