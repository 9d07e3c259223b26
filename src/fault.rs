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

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Errors of carrying out a fault.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// No rule has this id (already allowed, or never made).
    #[error("no fault rule {0}")]
    NoRule(u64),
    /// The status code of a reject rule is not an error code.
    #[error("a reject rule needs an error status code (400-599), got {0}")]
    NotAnErrorCode(u16),
    /// The target of a process or network fault does not exist.
    #[error("no such target: {0}")]
    NoTarget(String),
    /// The provider or machine cannot carry out this fault.
    #[error("{0}")]
    Unsupported(String),
}

/// Which API requests a rule applies to; every field set must match (unset matches all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestMatch {
    /// RBAC verbs (get, list, watch, create, update, patch, delete, deletecollection).
    pub verbs: Vec<String>,
    /// API group (`""` is core; unset matches any).
    pub group: Option<String>,
    /// Plural resource.
    pub resource: Option<String>,
    /// Subresource (`status`, …); `Some("")` means the main resource only.
    pub subresource: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// The requesting pod, as `namespace/name`.
    pub pod: Option<String>,
    /// The requesting user.
    pub user: Option<String>,
}

/// How far an API request has got, for a rule that holds another request until then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Milestone {
    /// It reached the API server (even if a rule holds it there).
    Arrived,
    /// The API server is done with it: answered, whatever the status.
    Answered,
}

/// Rules that judge a pod's API requests one at a time, where a provider sees each of them
/// (the simulated API server; on `local`, each pod's proxy). They hold a request, or its
/// sender, to build the interleavings the election bugs need. What they do is logged in the
/// scenario's [`FaultLog`]: `arm` when a rule is made, `defer` and `serve` around a held
/// request.
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

    /// Whether the detail of a `serve` fault says the held request was let go because its
    /// limit ran out, not because the request it waited for got there.
    fn deferral_timed_out(&self, serve_detail: &str) -> bool;
}

/// How a partition cuts traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cut {
    /// Connections are refused and closed: clients see errors at once.
    #[default]
    Drop,
    /// Connections hang: clients see timeouts.
    Hang,
    /// Requests arrive, responses never return (one-way).
    HangResponses,
}

impl Cut {
    /// The cut as the log writes it (`drop`, `hang`, `hangresponses`).
    pub fn describe(self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

/// The message of a pod evicted because its node ran short of memory, as the kubelet
/// words it (without its figures).
pub const LOW_ON_MEMORY: &str = "The node was low on resource: memory.";

/// A fault on one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodFault {
    /// Kill the container's processes (SIGKILL); the kubelet restarts it per restartPolicy.
    Crash {
        /// One container, or all.
        container: Option<String>,
    },
    /// Evict the pod as the kubelet does under node pressure: its containers are killed
    /// and never run again, the phase is `Failed` with reason `Evicted` and this message.
    /// The Pod object stays until someone deletes it (the undo).
    Evict {
        /// The pod's `status.message`, naming the resource the node was low on.
        message: String,
    },
    /// Freeze the pod's processes (SIGSTOP).
    Hold,
    /// Let them run again (SIGCONT; undoes `Hold`).
    Release,
    /// Cut the pod from the API server.
    Partition {
        /// How.
        cut: Cut,
    },
    /// Restore the pod's API traffic (undoes `Partition` and `Delay`).
    Repair,
    /// Add latency to the pod's API traffic.
    Delay {
        /// Milliseconds.
        millis: u64,
    },
    /// Offset the pod's wall clock by this many seconds (0 undoes it; monotonic time is real).
    Skew {
        /// Seconds, may be negative.
        seconds: i64,
    },
}

impl PodFault {
    /// The fault verb as the log writes it.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Crash { .. } => "crash",
            Self::Evict { .. } => "evict",
            Self::Hold => "hold",
            Self::Release => "release",
            Self::Partition { .. } => "partition",
            Self::Repair => "repair",
            Self::Delay { .. } => "delay",
            Self::Skew { .. } => "skew",
        }
    }

    /// The details the log writes with the verb (the simulator's wording).
    pub fn detail(&self) -> String {
        match self {
            Self::Crash { container: Some(c) } => format!("container {c}"),
            Self::Evict { message } => message.clone(),
            Self::Partition { cut } => cut.describe(),
            Self::Delay { millis } => format!("{millis}ms"),
            Self::Skew { seconds } => format!("{seconds:+}s"),
            _ => String::new(),
        }
    }
}

/// A fault on a whole node (its kubelet and every pod on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFault {
    /// Freeze the node: its kubelet and every pod process stop.
    Hold,
    /// Undo `Hold`.
    Release,
    /// Cut the node (kubelet and pods) from the API server.
    Partition {
        /// How.
        cut: Cut,
    },
    /// Undo `Partition`.
    Repair,
}

impl NodeFault {
    /// The fault verb as the log writes it.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Hold => "hold",
            Self::Release => "release",
            Self::Partition { .. } => "partition",
            Self::Repair => "repair",
        }
    }

    /// The details the log writes with the verb (the simulator's wording).
    pub fn detail(&self) -> String {
        match self {
            Self::Partition { cut } => cut.describe(),
            _ => String::new(),
        }
    }
}

/// One fault applied or undone, as the history shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultEvent {
    /// When.
    pub time: DateTime<Utc>,
    /// The verb: `reject`, `allow`, `delay`, `crash`, `evict`, `hold`, `release`, `partition`, `repair`, `skew`, …
    pub verb: String,
    /// What it acted on (`pod ns/name`, `node worker-1`, `rule 3: create deployments`).
    pub target: String,
    /// Details (mode, offset, status).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
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
