//! Controller expectations, as upstream's `ControllerExpectations`
//! (`pkg/controller/controller_utils.go`): after a controller creates or deletes pods for an
//! object, it does not manage that object's pods again until its informer has shown every
//! create and delete it sent, or until [`EXPECTATIONS_TIMEOUT`] has passed (a lost event must
//! not hold the object back for ever). The ReplicaSet and Job controllers use them.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::informer::ObjectKey;

/// How long unmet expectations hold an object back (upstream's `ExpectationsTimeout`).
pub(crate) const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// What an object waits to see before its pods are managed again.
#[derive(Debug)]
struct Expectation {
    adds: i64,
    deletes: HashSet<String>,
    set_at: Instant,
}

/// The expectations of every object of one controller.
#[derive(Debug, Default)]
pub(crate) struct Expectations(Mutex<HashMap<ObjectKey, Expectation>>);

impl Expectations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Expectation>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `key`'s pods may be managed: nothing is expected of it, everything expected
    /// was seen, or the expectations have expired.
    pub(crate) fn satisfied(&self, key: &ObjectKey) -> bool {
        self.lock().get(key).is_none_or(|e| {
            (e.adds <= 0 && e.deletes.is_empty()) || e.set_at.elapsed() > EXPECTATIONS_TIMEOUT
        })
    }

    /// Expects `adds` creates and the deletes of the pods with the uids `deletes`.
    pub(crate) fn expect(&self, key: &ObjectKey, adds: i64, deletes: HashSet<String>) {
        self.lock().insert(
            key.clone(),
            Expectation {
                adds,
                deletes,
                set_at: Instant::now(),
            },
        );
    }

    /// One of the creates was seen (or will never come: its request failed).
    pub(crate) fn creation_observed(&self, key: &ObjectKey) {
        if let Some(e) = self.lock().get_mut(key) {
            e.adds -= 1;
        }
    }

    /// The delete of the pod `uid` was seen (or will never come).
    pub(crate) fn deletion_observed(&self, key: &ObjectKey, uid: &str) {
        if let Some(e) = self.lock().get_mut(key) {
            e.deletes.remove(uid);
        }
    }

    /// Drops what was expected of `key` (the object is gone).
    pub(crate) fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_are_met_once_every_create_and_delete_was_seen() {
        let expectations = Expectations::default();
        let key = ObjectKey {
            namespace: "ns".into(),
            name: "rs".into(),
        };
        assert!(expectations.satisfied(&key));
        expectations.expect(&key, 1, HashSet::from(["a".to_string()]));
        assert!(!expectations.satisfied(&key));
        expectations.creation_observed(&key);
        assert!(!expectations.satisfied(&key));
        expectations.deletion_observed(&key, "a");
        assert!(expectations.satisfied(&key));
        expectations.expect(&key, 2, HashSet::new());
        expectations.forget(&key);
        assert!(expectations.satisfied(&key));
    }
}
