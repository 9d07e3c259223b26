//! The words the harness and the simulated cluster share, defined once: the pod a request
//! came from ([`PodRef`]); which API requests a rule matches ([`RequestMatch`], judged
//! against a request's [`RequestFacts`]) and until which other request's [`Milestone`] a
//! rule holds one; the faults a pod or a node can be given ([`PodFault`], [`NodeFault`],
//! [`Cut`]); and one event of a fault log ([`FaultEvent`]).
//!
//! The harness speaks these words in its features and steps; the simulated API server, its
//! kubelets and their pods' proxies carry them out. Neither side converts them.

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

/// The pod a request came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
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

/// What a request asks, for rule matching.
#[derive(Debug, Clone, Default)]
pub struct RequestFacts<'a> {
    /// RBAC verb.
    pub verb: &'a str,
    /// API group.
    pub group: &'a str,
    /// Plural resource (empty for non-resource paths).
    pub resource: &'a str,
    /// Subresource.
    pub subresource: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// Object name.
    pub name: &'a str,
    /// The pod the request came from.
    pub pod: Option<&'a PodRef>,
    /// The user.
    pub user: &'a str,
}

impl RequestMatch {
    /// Whether a request matches (a request for no resource never does).
    pub fn matches(&self, r: &RequestFacts<'_>) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        (self.verbs.is_empty() || self.verbs.iter().any(|v| v == r.verb))
            && !r.resource.is_empty()
            && eq(&self.group, r.group)
            && eq(&self.resource, r.resource)
            && eq(&self.subresource, r.subresource)
            && eq(&self.namespace, r.namespace)
            && eq(&self.name, r.name)
            && eq(&self.user, r.user)
            && self.pod.as_deref().is_none_or(|want| {
                r.pod
                    .is_some_and(|p| format!("{}/{}", p.namespace, p.name) == want)
            })
    }
}

/// How far an API request has got, for a rule that holds another request until then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Milestone {
    /// It reached the API server (authenticated and authorized, before any rule acted on
    /// it, so a request held by a rule of its own has arrived).
    Arrived,
    /// The API server is done with it: answered whatever the status (refused by a rule
    /// included), or given up with its connection.
    Answered,
}

/// How a partition cuts traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
    /// The cut as the fault log writes it (`drop`, `hang`, `hangresponses`).
    pub fn describe(self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

/// The message of a pod evicted because its node ran short of memory, as the kubelet
/// words it (without its figures).
pub const LOW_ON_MEMORY: &str = "The node was low on resource: memory.";

fn low_on_memory() -> String {
    LOW_ON_MEMORY.to_string()
}

/// A fault on one pod, carried out by the kubelet running it (or, on kind, in its node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "verb")]
pub enum PodFault {
    /// Kill the container's processes (SIGKILL); the kubelet restarts it per restartPolicy.
    Crash {
        /// One container, or all.
        #[serde(default)]
        container: Option<String>,
    },
    /// Evict the pod as the kubelet does under node pressure: its containers are killed,
    /// marked terminated and never run again; the phase is `Failed` with reason `Evicted`
    /// and this message. The Pod object stays until someone deletes it (the undo).
    Evict {
        /// The pod's `status.message`, naming the resource the node was low on.
        #[serde(default = "low_on_memory")]
        message: String,
    },
    /// Freeze the pod's processes (SIGSTOP).
    Hold,
    /// Let them run again (SIGCONT; undoes `Hold`).
    Release,
    /// Cut the pod from the API server.
    Partition {
        /// How.
        #[serde(default)]
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
            Self::Hold { .. } => "hold",
            Self::Release => "release",
            Self::Partition { .. } => "partition",
            Self::Repair => "repair",
            Self::Delay { .. } => "delay",
            Self::Skew { .. } => "skew",
        }
    }

    /// The details the log writes with the verb.
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "verb")]
pub enum NodeFault {
    /// Freeze the node: its kubelet and every pod process stop; or the kubelet alone.
    Hold {
        /// What stops.
        #[serde(default)]
        scope: HoldScope,
    },
    /// Undo `Hold`.
    Release,
    /// Cut the node (kubelet and pods) from the API server.
    Partition {
        /// How.
        #[serde(default)]
        cut: Cut,
    },
    /// Undo `Partition`.
    Repair,
}

impl NodeFault {
    /// The fault verb as the log writes it.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Hold { .. } => "hold",
            Self::Release => "release",
            Self::Partition { .. } => "partition",
            Self::Repair => "repair",
        }
    }

    /// The details the log writes with the verb.
    pub fn detail(&self) -> String {
        match self {
            Self::Partition { cut } => cut.describe(),
            Self::Hold {
                scope: HoldScope::Kubelet,
            } => "kubelet only".to_string(),
            _ => String::new(),
        }
    }
}

/// What a node hold stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HoldScope {
    /// The kubelet and every pod process: a machine that freezes.
    #[default]
    Node,
    /// The kubelet alone: it stops heartbeats, status and pod syncs while its pods run on
    /// and reach the API server (a hung kubelet process); the node turns NotReady.
    Kubelet,
}

/// One fault applied or undone, as the history shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultEvent {
    /// When.
    pub time: DateTime<Utc>,
    /// The verb: `reject`, `allow`, `delay`, `crash`, `evict`, `hold`, `release`,
    /// `partition`, `repair`, `skew`, …
    pub verb: String,
    /// What it acted on (`pod ns/name`, `node worker-1`, `rule 3: create deployments`).
    pub target: String,
    /// Details (mode, offset, status).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "ops".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn lease_update<'a>(from: Option<&'a PodRef>) -> RequestFacts<'a> {
        RequestFacts {
            verb: "update",
            group: "coordination.k8s.io",
            resource: "leases",
            namespace: "ops",
            name: "lock",
            pod: from,
            user: "system:serviceaccount:ops:op",
            ..RequestFacts::default()
        }
    }

    #[test]
    fn an_empty_match_matches_every_request_for_a_resource_and_none_for_a_path() {
        let all = RequestMatch::default();
        assert!(all.matches(&lease_update(None)));
        let healthz = RequestFacts {
            verb: "get",
            ..RequestFacts::default()
        };
        assert!(!all.matches(&healthz));
    }

    #[test]
    fn every_field_set_must_match_and_the_pod_is_named_namespace_slash_name() {
        let a = pod("a");
        let b = pod("b");
        let writes_of_a = RequestMatch {
            verbs: vec!["update".into(), "patch".into()],
            resource: Some("leases".into()),
            pod: Some("ops/a".into()),
            ..RequestMatch::default()
        };
        assert!(writes_of_a.matches(&lease_update(Some(&a))));
        assert!(!writes_of_a.matches(&lease_update(Some(&b))));
        assert!(!writes_of_a.matches(&lease_update(None)));
        let reads = RequestMatch {
            verbs: vec!["get".into()],
            ..RequestMatch::default()
        };
        assert!(!reads.matches(&lease_update(Some(&a))));
    }

    #[test]
    fn an_empty_subresource_means_the_main_resource_only() {
        let main_only = RequestMatch {
            subresource: Some(String::new()),
            ..RequestMatch::default()
        };
        let status = RequestFacts {
            subresource: "status",
            ..lease_update(None)
        };
        assert!(main_only.matches(&lease_update(None)));
        assert!(!main_only.matches(&status));
    }

    #[test]
    fn each_fault_is_logged_with_its_verb_and_details() {
        let logged = [
            (
                PodFault::Crash {
                    container: Some("manager".into()),
                },
                "crash",
                "container manager",
            ),
            (PodFault::Crash { container: None }, "crash", ""),
            (
                PodFault::Partition {
                    cut: Cut::HangResponses,
                },
                "partition",
                "hangresponses",
            ),
            (PodFault::Delay { millis: 250 }, "delay", "250ms"),
            (PodFault::Skew { seconds: -30 }, "skew", "-30s"),
            (PodFault::Hold, "hold", ""),
        ];
        for (fault, verb, detail) in logged {
            assert_eq!(
                (fault.verb(), fault.detail().as_str()),
                (verb, detail),
                "{fault:?}"
            );
        }
        let node = NodeFault::Partition { cut: Cut::Hang };
        assert_eq!((node.verb(), node.detail().as_str()), ("partition", "hang"));
    }

    #[test]
    fn a_fault_reads_from_the_json_a_rule_or_the_command_line_writes() {
        let evict: PodFault = serde_json::from_str(r#"{"verb":"evict"}"#).unwrap();
        assert_eq!(
            evict,
            PodFault::Evict {
                message: LOW_ON_MEMORY.into()
            }
        );
        let cut: NodeFault = serde_json::from_str(r#"{"verb":"partition"}"#).unwrap();
        assert_eq!(cut, NodeFault::Partition { cut: Cut::Drop });
    }
}
