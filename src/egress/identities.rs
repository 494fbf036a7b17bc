//! Who each token is (`auth.test`), remembered for an hour and bounded: a deployment with many
//! tokens (or a client sending a new one with every call) cannot grow it without end. When it
//! is full, what has expired goes first, then the entry learned longest ago.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::model::Identity;

/// How long a token's identity is trusted.
pub const IDENTITY_TTL: Duration = Duration::from_secs(3600);
/// The most tokens remembered at once.
pub const MAX_IDENTITIES: usize = 10_000;

#[derive(Default)]
pub struct Identities {
    by_token: HashMap<String, (Identity, Instant)>,
}

impl Identities {
    /// The identity of the token whose keyed hash is `token_hash`, if learned within the TTL.
    pub fn get(&self, token_hash: &str, now: Instant) -> Option<Identity> {
        let (id, at) = self.by_token.get(token_hash)?;
        (now.saturating_duration_since(*at) < IDENTITY_TTL).then(|| id.clone())
    }

    pub fn insert(&mut self, token_hash: &str, id: Identity, now: Instant) {
        if self.by_token.len() >= MAX_IDENTITIES && !self.by_token.contains_key(token_hash) {
            self.by_token.retain(|_, (_, at)| now.saturating_duration_since(*at) < IDENTITY_TTL);
            if self.by_token.len() >= MAX_IDENTITIES {
                let oldest = self.by_token.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    self.by_token.remove(&k);
                }
            }
        }
        self.by_token.insert(token_hash.to_string(), (id, now));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_token.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: usize) -> Identity {
        Identity { team: "T1".into(), user_id: format!("U{n}"), bot_id: format!("B{n}") }
    }

    #[test]
    fn identities_expire_and_stay_bounded() {
        let start = Instant::now();
        let mut ids = Identities::default();
        ids.insert("a", id(0), start);
        assert_eq!(ids.get("a", start + IDENTITY_TTL / 2), Some(id(0)));
        assert_eq!(ids.get("a", start + IDENTITY_TTL), None, "expired");
        for n in 1..MAX_IDENTITIES {
            ids.insert(&format!("t{n}"), id(n), start + Duration::from_millis(n as u64));
        }
        assert_eq!(ids.len(), MAX_IDENTITIES);
        // Full: the expired one goes first.
        let later = start + IDENTITY_TTL;
        ids.insert("new", id(1), later);
        assert_eq!(ids.len(), MAX_IDENTITIES);
        assert_eq!(ids.get("a", later), None);
        assert!(ids.get("new", later).is_some());
        // Full with nothing expired: the one learned longest ago goes.
        ids.insert("newer", id(2), later);
        assert_eq!(ids.len(), MAX_IDENTITIES);
        assert_eq!(ids.get("t1", later), None, "the oldest was dropped");
        assert!(ids.get("t2", later).is_some());
    }
}
