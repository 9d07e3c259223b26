//! The fault vocabulary the features speak: what to match (which API requests a rule
//! refuses or holds, and until which other request's [`Milestone`]; the providers that see
//! each request carry out [`RequestRules`]), what to do (crash, evict, hold and release,
//! partition and repair, delay, skew a pod; hold and release, partition and repair a node),
//! and for how long (each fault is undone by its pair). Each provider carries it out its
//! own way (the simulator through its API server and kubelets, kind with `docker` and
//! admission policies, …) and records what it did in the scenario's [`FaultLog`], which the
//! recorder merges into the history.

use std::fmt;
use std::sync::{Arc, Mutex};

use chrono::Utc;

pub use cluster_vocabulary::{
    Cut, FaultError, FaultEvent, HoldScope, LOW_ON_MEMORY, Milestone, NodeFault, PodFault,
    RequestMatch,
};

/// Rules that judge a pod's API requests one at a time, where a provider sees each of them
/// (the simulated API server; on `local`, each pod's proxy). They hold a request, or its
/// sender, or commit one and lose its answer, to build the interleavings the election bugs
/// need. What they do is logged in the scenario's [`FaultLog`]: `arm` when a rule is made,
/// `defer` and `serve` around a held request, `lose` when its answer is dropped.
pub trait RequestRules: Send + Sync {
    /// Freezes the pod that next sends a request matching `matches` for `span`, before that
    /// request is served (with `after`: its first such request after one matching `after`
    /// was served); returns the rule's id.
    fn hold_sender(
        &self,
        matches: RequestMatch,
        span: std::time::Duration,
        after: Option<RequestMatch>,
    ) -> u64;

    /// Holds the next request matching `matches` unserved (its pod keeps running) until a
    /// request matching `until` has reached `milestone` since now, or for at most `limit`,
    /// then serves it; returns the rule's id.
    fn defer_until(
        &self,
        matches: RequestMatch,
        until: RequestMatch,
        milestone: Milestone,
        limit: std::time::Duration,
    ) -> u64;

    /// Holds the next request matching `matches` unserved for `span` (its pod keeps
    /// running), then serves it: one slow request; returns the rule's id.
    fn defer_for(&self, matches: RequestMatch, span: std::time::Duration) -> u64;

    /// Holds the next request matching `matches` for `span`, then serves it even if its
    /// client gave up on it meanwhile (a write slow to commit commits whatever its client
    /// does); returns the rule's id.
    fn commit_after(&self, matches: RequestMatch, span: std::time::Duration) -> u64;

    /// Commits the next request matching `matches` and loses its answer: holds it until a
    /// request matching `until` has reached its milestone since now, or for at most `limit`
    /// (with no `until`, for `limit`), then serves it whether or not its client still
    /// waits, and never answers it; returns the rule's id.
    fn lose_answer(
        &self,
        matches: RequestMatch,
        until: Option<(RequestMatch, Milestone)>,
        limit: std::time::Duration,
    ) -> u64;

    /// Whether the detail of a `serve` fault says the held request was let go because its
    /// limit ran out, not because the request it waited for got there.
    fn deferral_timed_out(&self, serve_detail: &str) -> bool;
}

/// Where a [`FaultLog`] keeps its events: its own list, or a log the cluster keeps itself
/// (the simulator logs the faults its API server and kubelets carry out).
pub trait FaultStore: Send + Sync {
    /// Appends an event stamped now.
    fn record(&self, verb: &str, target: &str, detail: &str);
    /// Every event so far, in the order recorded.
    fn events(&self) -> Vec<FaultEvent>;
}

/// A list of events kept in memory: the store of providers whose cluster keeps no log.
#[derive(Debug, Default)]
struct Events(Mutex<Vec<FaultEvent>>);

impl FaultStore for Events {
    fn record(&self, verb: &str, target: &str, detail: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(FaultEvent {
                time: Utc::now(),
                verb: verb.to_string(),
                target: target.to_string(),
                detail: detail.to_string(),
            });
    }

    fn events(&self) -> Vec<FaultEvent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The log of every fault applied and undone in a scenario, so its history can show when
/// each was in force. Clones share the log.
#[derive(Clone)]
pub struct FaultLog(Arc<dyn FaultStore>);

impl FaultLog {
    /// An empty log of its own.
    pub fn new() -> Self {
        Self(Arc::new(Events::default()))
    }

    /// A log kept in `store`.
    pub fn kept_in(store: Arc<dyn FaultStore>) -> Self {
        Self(store)
    }

    /// Records a fault: its verb, what it acted on, details (may be empty).
    pub fn record(&self, verb: &str, target: &str, detail: &str) {
        self.0.record(verb, target, detail);
    }

    /// Every fault applied and undone so far, in the order recorded.
    pub fn events(&self) -> Vec<FaultEvent> {
        self.0.events()
    }
}

impl Default for FaultLog {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FaultLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultLog")
            .field("events", &self.events().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_log_is_empty_and_keeps_events_in_the_order_recorded() {
        let log = FaultLog::new();
        assert!(log.events().is_empty());
        log.record("hold", "pod ops/op-1", "");
        log.record("release", "pod ops/op-1", "");
        let events = log.events();
        let verbs: Vec<&str> = events.iter().map(|e| e.verb.as_str()).collect();
        assert_eq!(verbs, ["hold", "release"]);
        assert!(events[0].time <= events[1].time);
        assert_eq!(events[0].target, "pod ops/op-1");
    }

    #[test]
    fn clones_of_a_log_share_its_events() {
        let log = FaultLog::new();
        log.clone().record("delete", "lock ops/lock", "by hand");
        assert_eq!(log.events().len(), 1);
        assert_eq!(log.events()[0].detail, "by hand");
    }

    #[test]
    fn a_log_kept_in_a_store_records_there() {
        let store = Arc::new(Events::default());
        let log = FaultLog::kept_in(store.clone());
        log.record("reject", "rule 1", "403 Forbidden");
        assert_eq!(store.events(), log.events());
        assert_eq!(store.events()[0].verb, "reject");
    }

    #[test]
    fn faults_are_logged_with_their_verb_and_detail() {
        let partition = PodFault::Partition {
            cut: Cut::HangResponses,
        };
        assert_eq!(
            (partition.verb(), partition.detail()),
            ("partition", "hangresponses".to_string())
        );
        assert_eq!(PodFault::Skew { seconds: 30 }.detail(), "+30s");
        assert_eq!(PodFault::Delay { millis: 200 }.detail(), "200ms");
        assert_eq!(PodFault::Crash { container: None }.detail(), "");
        let node = NodeFault::Partition { cut: Cut::Drop };
        assert_eq!((node.verb(), node.detail()), ("partition", "drop".into()));
        assert_eq!(NodeFault::Release.detail(), "");
    }

    #[test]
    fn the_fault_error_messages_are_lowercase() {
        assert_eq!(FaultError::NoRule(3).to_string(), "no fault rule 3");
        assert_eq!(
            FaultError::NotAnErrorCode(200).to_string(),
            "a reject rule needs an error status code (400-599), got 200"
        );
    }
}
