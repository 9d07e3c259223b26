//! The history of a scenario, Jepsen style: timestamped observations from one clock —
//! each replica's leadership gauge, the lock's holder as watched, pod phases, faults as
//! applied and undone, and the audit of writes attributed to replicas. Checkers
//! ([`crate::check`]) decide pass or fail over it afterwards.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub mod recorder;

/// One observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Observation {
    /// A scrape of a replica's `leader_election_master_status` gauge.
    Gauge {
        /// The replica (pod name).
        replica: String,
        /// Whether it says it leads.
        leader: bool,
    },
    /// The lock object as watched: who holds it now.
    Lock {
        /// The lock's name.
        lock: String,
        /// The holder (pod name), `None` when released or deleted.
        holder: Option<String>,
        /// `spec.leaseTransitions` for a Lease.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transitions: Option<i64>,
        /// The lock's resourceVersion.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        resource_version: String,
    },
    /// A replica's pod as watched.
    Pod {
        /// Pod name.
        name: String,
        /// Phase (`Deleted` once the pod is gone).
        phase: String,
        /// Ready condition.
        ready: bool,
        /// Has a deletionTimestamp.
        terminating: bool,
    },
    /// A fault applied or undone.
    Fault {
        /// Verb (crash, hold, release, partition, repair, reject, allow, delete, …).
        verb: String,
        /// Target (`pod ns/name`, `node n`, `rule 3: …`).
        target: String,
        /// Details.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        detail: String,
    },
    /// A write request as audited by the API server, attributed to a replica.
    Write {
        /// The replica (pod name) that sent it.
        replica: String,
        /// Verb.
        verb: String,
        /// Resource (plural, with subresource as `deployments/status`).
        resource: String,
        /// Namespace.
        namespace: String,
        /// Object name.
        name: String,
        /// Response code.
        code: u16,
        /// Whether it is election traffic (the lock, an Event, or the delete of one of the
        /// operator's Pods) rather than the work of a leader.
        election: bool,
    },
    /// A replica's reconcile counter as scraped.
    Reconciles {
        /// The replica.
        replica: String,
        /// The result label (success, error, requeue, requeue_after).
        result: String,
        /// The counter value.
        count: u64,
    },
    /// A note from a step (what the scenario did), for the timeline.
    Note {
        /// The text.
        text: String,
    },
}

/// One entry of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// When it was observed (server time for audit entries, recorder time otherwise; one
    /// clock on the simulator).
    pub time: DateTime<Utc>,
    /// What.
    #[serde(flatten)]
    pub observation: Observation,
}

/// A scenario's history: entries in time order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    entries: Vec<Entry>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry, keeping time order (stable for equal times).
    pub fn push(&mut self, time: DateTime<Utc>, observation: Observation) {
        let at = self.entries.partition_point(|e| e.time <= time);
        self.entries.insert(at, Entry { time, observation });
    }

    /// Entries in time order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Entries between two times (inclusive), for showing the slice around a violation.
    pub fn slice(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Entry> {
        self.entries
            .iter()
            .filter(|e| e.time >= from && e.time <= to)
            .cloned()
            .collect()
    }

    /// The history as JSON lines (one entry per line).
    pub fn to_json_lines(&self) -> String {
        self.entries
            .iter()
            .filter_map(|e| serde_json::to_string(e).ok())
            .map(|l| l + "\n")
            .collect()
    }

    /// The replicas that appear anywhere in the history, sorted.
    pub fn replicas(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| match &e.observation {
                Observation::Gauge { replica, .. }
                | Observation::Write { replica, .. }
                | Observation::Reconciles { replica, .. } => Some(replica.clone()),
                Observation::Lock {
                    holder: Some(h), ..
                } => Some(h.clone()),
                _ => None,
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Formats entries one per line for failure messages: `+12.345s  gauge  op-1 leader`.
pub fn describe(entries: &[Entry], origin: DateTime<Utc>) -> String {
    entries
        .iter()
        .map(|e| {
            let t = (e.time - origin).num_microseconds().unwrap_or(0) as f64 / 1e6;
            let what = match &e.observation {
                Observation::Gauge { replica, leader } => {
                    format!(
                        "gauge    {replica} {}",
                        if *leader { "leader" } else { "standby" }
                    )
                }
                Observation::Lock {
                    lock,
                    holder,
                    transitions,
                    ..
                } => format!(
                    "lock     {lock} held by {}{}",
                    holder.as_deref().unwrap_or("nobody"),
                    transitions
                        .map(|t| format!(" (transitions {t})"))
                        .unwrap_or_default()
                ),
                Observation::Pod {
                    name,
                    phase,
                    ready,
                    terminating,
                } => format!(
                    "pod      {name} {phase}{}{}",
                    if *ready { " ready" } else { "" },
                    if *terminating { " terminating" } else { "" }
                ),
                Observation::Fault {
                    verb,
                    target,
                    detail,
                } => format!("fault    {verb} {target} {detail}"),
                Observation::Write {
                    replica,
                    verb,
                    resource,
                    namespace,
                    name,
                    code,
                    election,
                } => format!(
                    "write    {replica} {verb} {resource} {namespace}/{name} -> {code}{}",
                    if *election { " (election)" } else { "" }
                ),
                Observation::Reconciles {
                    replica,
                    result,
                    count,
                } => format!("reconcile {replica} {result}={count}"),
                Observation::Note { text } => format!("note     {text}"),
            };
            format!("{t:+10.3}s  {what}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}
