//! Slack's `ssl_check`: when a slash command's Request URL is saved, Slack POSTs
//! `ssl_check=1&token=…` **without** signature headers to see that the URL answers over TLS.
//! Bolt for Python and Bolt for JavaScript answer it before verifying; so does the gateway, but
//! only for exactly that shape: a body that also names a command, a trigger or a payload is no
//! `ssl_check` and stays unauthorized.

/// The most bytes of an unsigned body that are read to see whether it is an `ssl_check`
/// (it is `ssl_check=1&token=` and a 24-character token).
pub const SSL_CHECK_MAX: usize = 256;

/// Whether a content type is a form (`application/x-www-form-urlencoded`, any parameters).
pub fn is_form(content_type: &[u8]) -> bool {
    let essence = content_type.split(|b| *b == b';').next().unwrap_or_default();
    essence.trim_ascii().eq_ignore_ascii_case(b"application/x-www-form-urlencoded")
}

/// Whether an unsigned form body is exactly Slack's `ssl_check`: `ssl_check=1` once, at most
/// one `token`, and nothing else.
pub fn is_unsigned_ssl_check(body: &[u8]) -> bool {
    if body.len() > SSL_CHECK_MAX {
        return false;
    }
    let (mut checks, mut tokens) = (0, 0);
    for (k, v) in form_urlencoded::parse(body) {
        match &*k {
            "ssl_check" if v == "1" => checks += 1,
            "token" => tokens += 1,
            _ => return false,
        }
    }
    checks == 1 && tokens <= 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_shape_is_an_ssl_check() {
        assert!(is_unsigned_ssl_check(b"ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO"));
        assert!(is_unsigned_ssl_check(b"token=abc&ssl_check=1"));
        assert!(is_unsigned_ssl_check(b"ssl_check=1"));
        for bypass in [
            &b"ssl_check=1&command=%2Fdeploy&text=prod"[..],
            b"ssl_check=1&payload=%7B%22type%22%3A%22block_actions%22%7D",
            b"ssl_check=1&trigger_id=1.2.3",
            b"ssl_check=1&ssl_check=1",
            b"ssl_check=1&token=a&token=b",
            b"ssl_check=0&token=a",
            b"ssl_check=true",
            b"token=a",
            b"",
            b"{\"ssl_check\":\"1\"}",
        ] {
            assert!(!is_unsigned_ssl_check(bypass), "{}", String::from_utf8_lossy(bypass));
        }
        let long = format!("ssl_check=1&token={}", "a".repeat(SSL_CHECK_MAX));
        assert!(!is_unsigned_ssl_check(long.as_bytes()));
    }

    #[test]
    fn form_content_types() {
        assert!(is_form(b"application/x-www-form-urlencoded"));
        assert!(is_form(b"Application/X-WWW-Form-Urlencoded; charset=utf-8"));
        assert!(!is_form(b"application/json"));
        assert!(!is_form(b"application/x-www-form-urlencodedx"));
        assert!(!is_form(b""));
    }
}
