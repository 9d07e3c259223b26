//! The back-off of the node's watches (its pods, and the ConfigMaps and Secrets they
//! read): quick, from 50 ms doubling up to 1 s, so a repaired node resumes at once.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// The kubelet's watch backoff: quick, so a repaired node resumes at once.
pub(crate) struct QuickBackoff {
    next: Duration,
}

impl Default for QuickBackoff {
    fn default() -> Self {
        Self {
            next: Duration::from_millis(50),
        }
    }
}

impl Iterator for QuickBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(1));
        Some(d)
    }
}

impl Backoff for QuickBackoff {
    fn reset(&mut self) {
        self.next = Duration::from_millis(50);
    }
}
