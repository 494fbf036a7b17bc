//! Failed tokens, counted per client address and for the whole process: the pages' login and
//! the bearer admin API share one [`Throttle`], so a token is guessed slowly whichever door is
//! tried, while a stranger's failures never lock out an operator at another address.
//!
//! An address is the TCP peer's (an IPv6 address counts by its /64, which one host is commonly
//! given whole). Past [`Limits::per_address`] failures in a window, that address is refused
//! until its window ends; past [`Limits::global`] failures of all addresses together, every
//! address is, a backstop against a guesser with many addresses. A refused try is not looked
//! at and not counted: a guess over the limit learns nothing.
//!
//! A leaf: it knows no service, no HTTP and no store.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How many failures are allowed, and how many addresses are remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Failures one address may make within a window.
    pub per_address: u32,
    /// Failures all addresses together may make within a window (far above one operator's
    /// mistakes).
    pub global: u32,
    /// A window starts at its first failure and lasts this long.
    pub window: Duration,
    /// At most this many addresses are remembered; past it, ended windows go first, then the
    /// oldest one.
    pub addresses: usize,
}

impl Limits {
    /// The admin listener's: 10 failures a minute per address, 1,000 a minute in all.
    pub const TOKENS: Limits =
        Limits { per_address: 10, global: 1_000, window: Duration::from_secs(60), addresses: 4_096 };
}

/// A try refused for too many failures: when the next one may come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after: Duration,
}

impl Throttled {
    /// As a `Retry-After` header's value: whole seconds, at least one.
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0)
    }
}

/// One window of failures: its start (the first failure) and how many.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    failures: u32,
}

#[derive(Debug, Default)]
struct State {
    all: Option<Window>,
    by_address: HashMap<Option<IpAddr>, Window>,
}

/// The failures of one process (see the module's doc).
#[derive(Debug)]
pub struct Throttle {
    limits: Limits,
    state: Mutex<State>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(Limits::TOKENS)
    }
}

impl Throttle {
    pub fn new(limits: Limits) -> Self {
        Throttle { limits, state: Mutex::new(State::default()) }
    }

    /// The verdict on one try at `now` from `client` (`None`: an unknown peer, counted as one
    /// address) whose token was `good`: refused while the address or everyone is over the
    /// limit, else allowed, a wrong token counted. Judged under one lock, so many tries at
    /// once cannot slip past the limit together.
    pub fn judge(&self, now: Instant, client: Option<IpAddr>, good: bool) -> Result<(), Throttled> {
        let limits = self.limits;
        let address = client.map(counted_as);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let current = |w: Option<Window>| w.filter(|w| now.saturating_duration_since(w.start) < limits.window);
        let all = current(state.all);
        let mine = current(state.by_address.get(&address).copied());
        for (window, limit) in [(mine, limits.per_address), (all, limits.global)] {
            if let Some(w) = window.filter(|w| w.failures >= limit) {
                return Err(Throttled { retry_after: (w.start + limits.window).saturating_duration_since(now) });
            }
        }
        if good {
            return Ok(());
        }
        let count = |w: Option<Window>| {
            w.map_or(Window { start: now, failures: 1 }, |w| Window { failures: w.failures + 1, ..w })
        };
        state.all = Some(count(all));
        if mine.is_none() && !state.by_address.contains_key(&address) {
            make_room(&mut state.by_address, now, limits);
        }
        state.by_address.insert(address, count(mine));
        Ok(())
    }

    /// How many addresses are remembered (for tests of the bound).
    pub fn addresses(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).by_address.len()
    }
}

/// Room for one more address: the ended windows go, then (only if still full) the oldest.
fn make_room(by_address: &mut HashMap<Option<IpAddr>, Window>, now: Instant, limits: Limits) {
    if by_address.len() < limits.addresses {
        return;
    }
    by_address.retain(|_, w| now.saturating_duration_since(w.start) < limits.window);
    while by_address.len() >= limits.addresses.max(1) {
        let Some(oldest) = by_address.iter().min_by_key(|(_, w)| w.start).map(|(a, _)| *a) else { break };
        by_address.remove(&oldest);
    }
}

/// The address a peer's failures count under: IPv4 as it is (also when mapped into IPv6), an
/// IPv6 address by its /64.
fn counted_as(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::from([s[0], s[1], s[2], s[3], 0, 0, 0, 0])
            }
        },
    }
}

#[cfg(test)]
mod tests;
