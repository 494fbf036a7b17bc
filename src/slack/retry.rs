//! Slack's redelivery headers: `X-Slack-Retry-Num` and `X-Slack-Retry-Reason`.

/// Why Slack says it redelivers, as a metric label (anything else is `other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    HttpTimeout,
    HttpError,
    ConnectionFailed,
    SslError,
    TooManyRedirects,
    Other,
}

impl RetryReason {
    pub const ALL: [RetryReason; 6] = [
        RetryReason::HttpTimeout,
        RetryReason::HttpError,
        RetryReason::ConnectionFailed,
        RetryReason::SslError,
        RetryReason::TooManyRedirects,
        RetryReason::Other,
    ];

    pub fn parse(header: &[u8]) -> RetryReason {
        match header {
            b"http_timeout" => RetryReason::HttpTimeout,
            b"http_error" => RetryReason::HttpError,
            b"connection_failed" => RetryReason::ConnectionFailed,
            b"ssl_error" => RetryReason::SslError,
            b"too_many_redirects" => RetryReason::TooManyRedirects,
            _ => RetryReason::Other,
        }
    }

    pub fn as_label(self) -> &'static str {
        match self {
            RetryReason::HttpTimeout => "http_timeout",
            RetryReason::HttpError => "http_error",
            RetryReason::ConnectionFailed => "connection_failed",
            RetryReason::SslError => "ssl_error",
            RetryReason::TooManyRedirects => "too_many_redirects",
            RetryReason::Other => "other",
        }
    }
}

/// `X-Slack-Retry-Num` as a number, when it is one.
pub fn retry_num(header: &[u8]) -> Option<u32> {
    std::str::from_utf8(header).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_numbers() {
        for r in RetryReason::ALL {
            assert_eq!(RetryReason::parse(r.as_label().as_bytes()), r);
        }
        assert_eq!(RetryReason::parse(b"<script>"), RetryReason::Other);
        assert_eq!(retry_num(b"2"), Some(2));
        assert_eq!(retry_num(b"x"), None);
    }
}
