//! Time sources: a monotonic clock for every decision, a wall clock only for timestamps written to the API.
//!
//! Leadership decisions (lease validity, renew deadlines, the write guard) use the
//! monotonic [`Clock::now`] only; wall-clock values ([`Clock::wall`]) are written into
//! objects (`renewTime`, `acquireTime`, event timestamps) and never compared with
//! anything. That is what makes the election tolerate clock *offsets* between replicas.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

/// A source of monotonic and wall-clock time.
///
/// The monotonic time is a [`tokio::time::Instant`], so a test runtime started with
/// `start_paused = true` drives the [`SystemClock`] deterministically, and
/// [`FakeClock`] can be stepped by hand for the pure state-machine tests.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now: the only time used for decisions.
    fn now(&self) -> Instant;
    /// Wall-clock now: only written into objects, never compared.
    fn wall(&self) -> Timestamp;
}

/// The process clock (tokio's monotonic clock and the system wall clock).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to; both readings advance together.
#[derive(Debug, Clone)]
pub struct FakeClock {
    inner: Arc<Mutex<FakeInner>>,
}

#[derive(Debug)]
struct FakeInner {
    mono: Instant,
    wall: Timestamp,
}

impl FakeClock {
    /// A fake clock starting at the current instant and a fixed wall time (2026-01-01T00:00:00Z).
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(FakeInner {
                mono: Instant::now(),
                wall: Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH),
            })),
        }
    }

    /// Moves both readings forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut inner = lock(&self.inner);
        inner.mono += by;
        let signed = k8s_openapi::jiff::SignedDuration::try_from(by).unwrap_or_default();
        inner.wall = inner.wall.checked_add(signed).unwrap_or(inner.wall);
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        lock(&self.inner).mono
    }
    fn wall(&self) -> Timestamp {
        lock(&self.inner).wall
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }
    fn wall(&self) -> Timestamp {
        (**self).wall()
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fake_clock_moves_monotonic_and_wall_time_together() {
        let clock = FakeClock::new();
        let (m0, w0) = (clock.now(), clock.wall());
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now() - m0, Duration::from_millis(1500));
        assert_eq!(
            clock.wall().duration_since(w0),
            k8s_openapi::jiff::SignedDuration::from_millis(1500)
        );
    }
}
