//! Sign-in attempts per address: at most `attempts` in any `window` from
//! one IP address (`--console-sign-in-attempts`,
//! `--console-sign-in-window-seconds`), so a token cannot be guessed at
//! speed. The map is bounded: when full, the address seen longest ago is
//! forgotten. Behind a reverse proxy every attempt comes from the proxy's
//! address, so the bound is then the proxy's as a whole (docs/console.md).

use std::collections::HashMap;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses remembered at once.
pub const MAX_ADDRESSES: usize = 10_000;

pub struct Limiter {
    attempts: u32,
    window: Duration,
    max: usize,
    seen: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl Limiter {
    pub fn new(attempts: u32, window: Duration, max: usize) -> Limiter {
        Limiter {
            attempts,
            window,
            max: max.max(1),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Count an attempt from `address` at `now`: `Err(retry_after)` when it
    /// is one too many.
    pub fn attempt(&self, address: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains_key(&address) && seen.len() >= self.max {
            let window = self.window;
            seen.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
            if seen.len() >= self.max
                && let Some(stalest) = seen
                    .iter()
                    .min_by_key(|(_, times)| times.back().copied())
                    .map(|(a, _)| *a)
            {
                seen.remove(&stalest);
            }
        }
        let times = seen.entry(address).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            times.pop_front();
        }
        if times.len() >= self.attempts as usize {
            let oldest = times.front().copied().unwrap_or(now);
            return Err(self.window.saturating_sub(now.duration_since(oldest)));
        }
        times.push_back(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attempt_past_the_bound_is_refused_until_the_window_passes() {
        let limiter = Limiter::new(3, Duration::from_secs(10), 8);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let t = Instant::now();
        for _ in 0..3 {
            assert!(limiter.attempt(a, t).is_ok());
        }
        let wait = limiter.attempt(a, t + Duration::from_secs(4)).unwrap_err();
        assert_eq!(wait, Duration::from_secs(6));
        assert!(
            limiter.attempt(b, t).is_ok(),
            "another address is not held up"
        );
        assert!(limiter.attempt(a, t + Duration::from_secs(10)).is_ok());
    }

    #[test]
    fn the_map_stays_bounded() {
        let limiter = Limiter::new(1, Duration::from_secs(10), 2);
        let t = Instant::now();
        for last in 1..=5u8 {
            let _ = limiter.attempt(IpAddr::from([192, 0, 2, last]), t);
        }
        assert_eq!(limiter.seen.lock().unwrap().len(), 2);
    }
}
