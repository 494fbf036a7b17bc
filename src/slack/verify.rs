//! Slack's v0 request signature: `v0=` + hex(HMAC-SHA256(secret, "v0:{ts}:{raw body}")).
//! <https://api.slack.com/authentication/verifying-requests-from-slack>

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Slack's replay window: a timestamp further than this from now is refused.
pub const MAX_SKEW_SECS: i64 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing X-Slack-Request-Timestamp or X-Slack-Signature")]
    Missing,
    #[error("timestamp is not a number")]
    BadTimestamp,
    #[error("timestamp outside the 5-minute window")]
    Stale,
    #[error("signature does not match")]
    Mismatch,
}

/// Compute the `X-Slack-Signature` value for `body` sent at `timestamp`.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let digest = mac(secret, timestamp.as_bytes(), body).finalize().into_bytes();
    format!("v0={}", hex::encode(digest))
}

fn mac(secret: &[u8], timestamp: &[u8], body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(b"v0:");
    mac.update(timestamp);
    mac.update(b":");
    mac.update(body);
    mac
}

/// The checks that need no body: both headers present, the timestamp a number inside the
/// replay window, the signature a well-formed `v0=<64 hex>`. Run before the body is read, so
/// an unsigned or stale request costs no body buffer. Returns the decoded signature.
pub fn precheck(timestamp: Option<&[u8]>, signature: Option<&[u8]>, now: i64) -> Result<[u8; 32], VerifyError> {
    let (Some(ts), Some(sig)) = (timestamp, signature) else {
        return Err(VerifyError::Missing);
    };
    let ts_value: i64 = std::str::from_utf8(ts)
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or(VerifyError::BadTimestamp)?;
    if now.abs_diff(ts_value) > MAX_SKEW_SECS as u64 {
        return Err(VerifyError::Stale);
    }
    let Some(hex_sig) = sig.strip_prefix(b"v0=") else {
        return Err(VerifyError::Mismatch);
    };
    let mut expected = [0u8; 32];
    if hex_sig.len() != 64 || hex::decode_to_slice(hex_sig, &mut expected).is_err() {
        return Err(VerifyError::Mismatch);
    }
    Ok(expected)
}

/// Check the two headers against every configured secret (several during rotation), in
/// constant time per comparison. `now` is Unix seconds.
pub fn verify<S: AsRef<[u8]>>(
    secrets: &[S],
    timestamp: Option<&[u8]>,
    signature: Option<&[u8]>,
    body: &[u8],
    now: i64,
) -> Result<(), VerifyError> {
    let expected = precheck(timestamp, signature, now)?;
    let ts = timestamp.unwrap_or_default();
    let mut ok = subtle::Choice::from(0);
    for secret in secrets {
        let got = mac(secret.as_ref(), ts, body).finalize().into_bytes();
        ok |= got.as_slice().ct_eq(&expected);
    }
    if bool::from(ok) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    // Slack's published example from "Verifying requests from Slack".
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: &str = "1531420618";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn check(body: &[u8], sig: &str, now: i64) -> Result<(), VerifyError> {
        verify(&[Secret::new(SECRET)], Some(TS.as_bytes()), Some(sig.as_bytes()), body, now)
    }

    #[test]
    fn slack_published_example() {
        assert_eq!(sign(SECRET.as_bytes(), TS, BODY.as_bytes()), SIG);
        assert_eq!(check(BODY.as_bytes(), SIG, 1531420618), Ok(()));
    }

    #[test]
    fn one_changed_byte_fails() {
        let mut body = BODY.as_bytes().to_vec();
        body[10] ^= 1;
        assert_eq!(check(&body, SIG, 1531420618), Err(VerifyError::Mismatch));
        let mut sig = SIG.to_string();
        sig.replace_range(66.., "c"); // last hex digit: 3 → c
        assert_eq!(check(BODY.as_bytes(), &sig, 1531420618), Err(VerifyError::Mismatch));
    }

    #[test]
    fn replay_window_is_five_minutes_each_way() {
        let ts = 1531420618;
        assert_eq!(check(BODY.as_bytes(), SIG, ts + 299), Ok(()));
        assert_eq!(check(BODY.as_bytes(), SIG, ts - 299), Ok(()));
        assert_eq!(check(BODY.as_bytes(), SIG, ts + 301), Err(VerifyError::Stale));
        assert_eq!(check(BODY.as_bytes(), SIG, ts - 301), Err(VerifyError::Stale));
    }

    #[test]
    fn any_rotated_secret_verifies_and_others_fail() {
        let secrets = [Secret::new("old-secret"), Secret::new(SECRET)];
        let ok = verify(&secrets, Some(TS.as_bytes()), Some(SIG.as_bytes()), BODY.as_bytes(), 1531420618);
        assert_eq!(ok, Ok(()));
        let other = [Secret::new("another-app")];
        let bad = verify(&other, Some(TS.as_bytes()), Some(SIG.as_bytes()), BODY.as_bytes(), 1531420618);
        assert_eq!(bad, Err(VerifyError::Mismatch));
    }

    #[test]
    fn malformed_headers_are_refused() {
        let s = [Secret::new(SECRET)];
        let b = BODY.as_bytes();
        assert_eq!(verify(&s, None, Some(SIG.as_bytes()), b, 0), Err(VerifyError::Missing));
        assert_eq!(verify(&s, Some(b"abc"), Some(SIG.as_bytes()), b, 0), Err(VerifyError::BadTimestamp));
        assert_eq!(verify(&s, Some(b"-5"), Some(SIG.as_bytes()), b, 0), Err(VerifyError::BadTimestamp));
        assert_eq!(verify(&s, Some(b"99999999999999999999"), Some(b"v0="), b, 0), Err(VerifyError::BadTimestamp));
        for sig in [&b"v1=00"[..], b"v0=zz", b"", b"v0=\xff\xfe"] {
            assert_eq!(verify(&s, Some(TS.as_bytes()), Some(sig), b, 1531420618), Err(VerifyError::Mismatch));
        }
    }
}
