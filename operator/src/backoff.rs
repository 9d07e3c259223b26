//! Per-object exponential backoff: controller-runtime's item rate limiter (5 ms doubling, capped, reset on success).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::lock;

/// The first delay.
pub const BASE_DELAY: Duration = Duration::from_millis(5);
/// The cap.
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// The delay after `failures` earlier failures: `base × 2^failures`, capped at `max`.
#[must_use]
pub fn exponential(base: Duration, max: Duration, failures: u32) -> Duration {
    // 2^31 × 5 ms already exceeds any sensible cap; avoid overflow beyond it.
    let factor = 1u64.checked_shl(failures.min(40)).unwrap_or(u64::MAX);
    let nanos = u64::try_from(base.as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_mul(factor);
    Duration::from_nanos(nanos).min(max)
}

/// Failure counts per key; `when` counts a failure and returns its delay, `forget` resets.
#[derive(Debug)]
pub struct ItemBackoff<K> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash + Clone> Default for ItemBackoff<K> {
    fn default() -> Self {
        Self::new(BASE_DELAY, MAX_DELAY)
    }
}

impl<K: Eq + Hash + Clone> ItemBackoff<K> {
    /// A backoff from `base` doubling to `max`.
    #[must_use]
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one more failure for `key` and returns how long to wait before retrying it.
    pub fn when(&self, key: &K) -> Duration {
        let mut f = lock(&self.failures);
        let n = f.entry(key.clone()).or_insert(0);
        let delay = exponential(self.base, self.max, *n);
        *n = n.saturating_add(1);
        delay
    }

    /// Resets `key` after a success.
    pub fn forget(&self, key: &K) {
        lock(&self.failures).remove(key);
    }

    /// Failures counted for `key` since its last success.
    #[must_use]
    pub fn failures(&self, key: &K) -> u32 {
        lock(&self.failures).get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_starts_at_five_milliseconds_and_doubles() {
        let b = ItemBackoff::<&str>::default();
        let delays: Vec<_> = (0..5).map(|_| b.when(&"a").as_millis()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80]);
    }

    #[test]
    fn the_delay_is_capped_at_five_minutes() {
        let b = ItemBackoff::<&str>::default();
        let last = (0..30).map(|_| b.when(&"a")).last().unwrap();
        assert_eq!(last, Duration::from_secs(300));
        assert_eq!(exponential(BASE_DELAY, MAX_DELAY, u32::MAX), MAX_DELAY);
    }

    #[test]
    fn a_success_resets_the_delay_for_that_object_only() {
        let b = ItemBackoff::<&str>::default();
        b.when(&"a");
        b.when(&"a");
        b.when(&"b");
        b.forget(&"a");
        assert_eq!(b.when(&"a"), Duration::from_millis(5));
        assert_eq!(b.when(&"b"), Duration::from_millis(10));
        assert_eq!(b.failures(&"b"), 2);
    }
}
