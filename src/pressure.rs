//! How hard the ack path is pressed: published by the ingress's admission, read by the delivery
//! workers, which yield to acks while it is high (DESIGN "Overload"). One number in `[0, 1]`.
//!
//! Every admission decision is a sample: *pressed* when the request could not be admitted at
//! once (it waited for a slot or was shed) or its record was slow, *calm* otherwise. Pressed
//! samples raise the level fast and calm ones lower it slowly, so a burst shows at once and a
//! level that fell does not bounce the workers back and forth; with no samples at all (no
//! traffic) the level decays by half every [`HALF_LIFE`]. Lock-free: two threads racing on an
//! update may lose one sample, which a signal like this can afford.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The level halves in this long without samples.
pub const HALF_LIFE: Duration = Duration::from_millis(250);
/// How far one pressed sample moves the level toward 1.
const RISE: f64 = 0.2;
/// How far one calm sample moves it toward 0.
const FALL: f64 = 0.01;
/// Below this level the workers run at full speed.
const CALM: f64 = 0.02;
/// The longest pause the workers take between reads at full pressure.
const MAX_PAUSE: Duration = Duration::from_millis(50);

pub struct Pressure {
    base: Instant,
    /// The level (`f64` bits) as of `at_us` (µs since `base`).
    level: AtomicU64,
    at_us: AtomicU64,
}

impl Default for Pressure {
    fn default() -> Self {
        Pressure { base: Instant::now(), level: AtomicU64::new(0f64.to_bits()), at_us: AtomicU64::new(0) }
    }
}

impl Pressure {
    fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }

    fn decayed(&self, now_us: u64) -> f64 {
        let level = f64::from_bits(self.level.load(Ordering::Relaxed));
        let idle = now_us.saturating_sub(self.at_us.load(Ordering::Relaxed)) as f64;
        level * 0.5f64.powf(idle / HALF_LIFE.as_micros() as f64)
    }

    /// One admission decision: `pressed` when the request waited, was shed or recorded slowly.
    pub fn sample(&self, pressed: bool) {
        let now = self.now_us();
        let level = self.decayed(now);
        let next = if pressed { level + (1.0 - level) * RISE } else { level * (1.0 - FALL) };
        self.level.store(next.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
        self.at_us.store(now, Ordering::Relaxed);
    }

    /// The level now, in `[0, 1]`.
    pub fn level(&self) -> f64 {
        self.decayed(self.now_us())
    }

    /// How many of `max` concurrent attempts the delivery workers allow themselves now: all
    /// of them when calm, down to one (deliveries never stop: the outbox must still drain).
    pub fn allowed(&self, max: usize) -> usize {
        let level = self.level();
        if level < CALM {
            return max.max(1);
        }
        let calm = 1.0 - level;
        ((max as f64 * calm * calm).round() as usize).clamp(1, max.max(1))
    }

    /// How long the workers pause before their next read: nothing until the level passes one
    /// half, then up to [`MAX_PAUSE`].
    pub fn pause(&self) -> Duration {
        let level = self.level();
        if level <= 0.5 {
            return Duration::ZERO;
        }
        MAX_PAUSE.mul_f64((level - 0.5) * 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pressed_samples_raise_it_fast_and_calm_ones_lower_it_slowly() {
        let p = Pressure::default();
        assert_eq!(p.level(), 0.0);
        assert_eq!(p.allowed(64), 64);
        assert_eq!(p.pause(), Duration::ZERO);
        for _ in 0..20 {
            p.sample(true);
        }
        assert!(p.level() > 0.98, "{}", p.level());
        assert_eq!(p.allowed(64), 1, "never below one attempt");
        assert!(p.pause() > Duration::from_millis(45));
        // One shed request in three keeps it high: the flood is not over.
        for _ in 0..30 {
            p.sample(true);
            p.sample(false);
            p.sample(false);
        }
        assert!(p.level() > 0.8, "{}", p.level());
        for _ in 0..500 {
            p.sample(false);
        }
        assert!(p.level() < 0.01, "{}", p.level());
        assert_eq!(p.allowed(64), 64);
    }

    #[tokio::test(start_paused = true)]
    async fn without_traffic_it_decays_by_half_every_half_life() {
        let p = Pressure::default();
        for _ in 0..40 {
            p.sample(true);
        }
        let high = p.level();
        tokio::time::advance(HALF_LIFE).await;
        assert!((p.level() - high / 2.0).abs() < 0.01, "{} vs {high}", p.level());
        tokio::time::advance(HALF_LIFE * 10).await;
        assert!(p.level() < 0.001);
        assert_eq!(p.allowed(8), 8);
    }
}
