//! A secret value (a signing secret, the admin token): never shown by `Debug`, compared in
//! constant time.

use std::fmt;
use std::sync::Arc;

#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(value: &str) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl AsRef<[u8]> for Secret {
    fn as_ref(&self) -> &[u8] {
        self.expose()
    }
}

/// Constant-time, so that comparing a presented token leaks nothing through timing.
impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        use subtle::ConstantTimeEq;
        bool::from(self.expose().ct_eq(other.expose()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_shown_and_compared_whole() {
        let s = Secret::new("hunter2-hunter2");
        assert_eq!(format!("{s:?}"), "Secret([redacted])");
        assert_eq!(s, Secret::new("hunter2-hunter2"));
        assert_ne!(s, Secret::new("hunter2"));
    }
}
