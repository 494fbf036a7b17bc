//! Arbitrary and mutated bytes: never a panic, always bounded receipts.

use super::*;

// ---------------------------------------------------------------- hostile bytes

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn check_invariants(ct: &[u8], body: &[u8]) {
    // The point is that this returns at all; a delivery must also carry a well-formed receipt.
    let Ok(Request::Delivery(d)) = classify(ct, body) else {
        return;
    };
    let Some(receipt) = d.receipt.as_deref() else {
        assert!(matches!(d.kind, Kind::Command | Kind::Interactivity), "{:?} without a receipt", d.kind);
        return;
    };
    let ok_prefix = ["e:", "e#", "t:", "t#", "h:"].iter().any(|p| receipt.starts_with(p));
    assert!(ok_prefix, "receipt {receipt:?}");
    // Bounded and printable: safe inside a Redis key.
    assert!(receipt.len() <= 2 + MAX_ID_LEN.max(64), "receipt {receipt:?}");
    assert!(receipt.bytes().all(|b| b.is_ascii_graphic()), "receipt {receipt:?}");
}

#[test]
fn random_bytes_never_panic() {
    const CTS: [&[u8]; 4] = [JSON, FORM, b"", b"text/plain"];
    // Bytes that steer the parsers into their interesting branches.
    const ALPHABET: &[u8] = b"{}[]\":,=&%+ \\u0aZ-.1ntfel\xff\xfe\xc3\x80";
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for i in 0..4_000 {
        let len = rng.below(160);
        let structured = i % 2 == 0;
        let mut body: Vec<u8> =
            (0..len).map(|_| if structured { ALPHABET[rng.below(ALPHABET.len())] } else { rng.next() as u8 }).collect();
        if i % 3 == 0 {
            body.insert(0, b'{');
        }
        for ct in CTS {
            check_invariants(ct, &body);
        }
    }
}

#[test]
fn mutated_valid_bodies_never_panic() {
    let seeds: Vec<(&[u8], Vec<u8>)> = vec![
        (JSON, br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"message","text":"hi"}}"#.to_vec()),
        (JSON, br#"{"type":"url_verification","challenge":"abc"}"#.to_vec()),
        (FORM, form(&[("command", "/x"), ("text", "a b"), ("trigger_id", "1.2.3")])),
        (FORM, form(&[("payload", r#"{"type":"block_actions","trigger_id":"1.2","actions":[{"value":"é"}]}"#)])),
    ];
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    for _ in 0..2_000 {
        for (ct, seed) in &seeds {
            let mut body = seed.clone();
            for _ in 0..=rng.below(4) {
                match rng.below(3) {
                    0 if !body.is_empty() => {
                        let at = rng.below(body.len());
                        body[at] = rng.next() as u8;
                    }
                    1 if !body.is_empty() => {
                        let at = rng.below(body.len());
                        body.truncate(at);
                    }
                    _ => {
                        let at = rng.below(body.len() + 1);
                        body.insert(at, rng.next() as u8);
                    }
                }
            }
            check_invariants(ct, &body);
            check_invariants(b"", &body);
        }
    }
}

#[test]
fn invalid_utf8_never_panics() {
    let bodies: [&[u8]; 8] = [
        b"\xff\xfe\xfd",
        b"{\xff}",
        b"{\"type\":\"\xff\"}",
        b"{\"type\":\"event_callback\",\"event_id\":\"\xc3\x28\"}",
        b"command=\xff&trigger_id=\xfe",
        b"command=%FF&trigger_id=%FE%80",
        b"payload=%7B%22type%22%3A%22\xff%22%7D",
        b"payload=\xc0\xaf",
    ];
    for body in bodies {
        for ct in [JSON, FORM, b""] {
            check_invariants(ct, body);
        }
    }
    // Lossily decoded trigger ids are not printable ASCII, so they are hashed.
    let d = delivery(classify(FORM, b"command=/x&trigger_id=%FF"));
    assert!(d.receipt.as_deref().unwrap().starts_with("t#"), "{:?}", d.receipt);
}

#[test]
fn unknown_shape_with_unexpected_field_types_is_opaque() {
    for body in [
        &br#"{"type":"something_new","event":"not an object"}"#[..],
        br#"{"type":"something_new","event_id":123}"#,
        br#"{"type":"something_new","trigger_id":{"a":1}}"#,
        br#"{"type":"something_new","challenge":true}"#,
    ] {
        let d = delivery(classify(JSON, body));
        assert_eq!(d.kind, Kind::Opaque);
        assert_body_hash(&d.receipt, body);
    }
}
