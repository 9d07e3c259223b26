//! The history of a scenario, Jepsen style: timestamped observations from one clock —
//! each replica's leadership gauge, the lock's holder as watched, pod phases, the
//! Memcached objects, their Deployments and the Events as watched, faults as applied and
//! undone, and the audit of writes attributed to replicas. Checkers ([`crate::check`])
//! decide pass or fail over it afterwards. The [`recorder`] writes it; [`scrape`] is how it
//! reads the replicas' metrics.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub mod recorder;
pub mod scrape;

impl Observation {
    /// What this observation says of a replica's leadership: its gauge (leader or not), or
    /// that it is down (not leading). `None` for every other observation.
    #[must_use]
    pub fn leadership(&self) -> Option<(&str, bool)> {
        match self {
            Self::Gauge { replica, leader } => Some((replica, *leader)),
            Self::Down { replica, .. } => Some((replica, false)),
            _ => None,
        }
    }
}

/// One observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "kind"
)]
pub enum Observation {
    /// A scrape of a replica's `leader_election_master_status` gauge.
    Gauge {
        /// The replica (pod name).
        replica: String,
        /// Whether it says it leads.
        leader: bool,
    },
    /// A scrape of a replica was refused: nothing listens on its metrics port, so no
    /// process of it runs (it exited, or has not started yet). Recorded once when a
    /// replica goes down; its next answered scrape says it is back. A replica that is down
    /// leads no more (a frozen or cut-off one, whose scrapes time out, is not down).
    Down {
        /// The replica (pod name).
        replica: String,
        /// What the scrape got.
        reason: String,
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
    /// A Memcached object as watched: what it asks for and how far it got. Recorded when
    /// it appears, when one of these fields changes, and when it is gone.
    Memcached {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Added, modified or deleted.
        change: Change,
        /// `spec.size` (`None` when it is not a whole number).
        size: Option<i64>,
        /// `metadata.generation`.
        generation: i64,
        /// Whether it carries any finalizer.
        finalizer: bool,
        /// Whether it has a deletionTimestamp.
        terminating: bool,
        /// How many pods `status.nodes` lists.
        nodes: usize,
    },
    /// A Deployment as watched (the operator's own is left out: its pods are recorded).
    /// Recorded when it appears, when one of these fields changes, and when it is gone.
    Deployment {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Added, modified or deleted.
        change: Change,
        /// `spec.replicas` (1 when unset).
        replicas: i32,
        /// `status.readyReplicas`.
        ready: i32,
        /// `status.availableReplicas`.
        available: i32,
        /// The controlling owner as `Kind/name` (`Memcached/cache`), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
        /// Whether it has a deletionTimestamp.
        terminating: bool,
    },
    /// A core `v1` Event as watched: each one once, and again when its count grows.
    Event {
        /// Namespace.
        namespace: String,
        /// The object it is about, as `Kind/name`.
        involved: String,
        /// `Normal` or `Warning`.
        #[serde(rename = "type")]
        type_: String,
        /// CamelCase reason (`Created`, `Finalized`, `LeaderElection`, …).
        reason: String,
        /// The message.
        message: String,
        /// The component that reported it (`reportingComponent`, else `source.component`).
        reporter: String,
        /// The instance of the reporter (`reportingInstance`, else `source.host`): for the
        /// operator's Events, the replica's pod.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        instance: String,
        /// How many times it happened (`count`, else `series.count`, else 1).
        count: i32,
    },
}

/// What happened to a watched object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// First seen.
    Added,
    /// Something recorded of it changed.
    Modified,
    /// Gone.
    Deleted,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Change::Added => "added",
            Change::Modified => "modified",
            Change::Deleted => "deleted",
        })
    }
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
                | Observation::Down { replica, .. }
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
            format!("{t:+10.3}s  {}", e.observation)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line per observation, as [`describe`] shows it: `gauge    op-1 leader`.
impl std::fmt::Display for Observation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            Observation::Gauge { replica, leader } => {
                format!(
                    "gauge    {replica} {}",
                    if *leader { "leader" } else { "standby" }
                )
            }
            Observation::Down { replica, reason } => format!("down     {replica} {reason}"),
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
            Observation::Memcached {
                namespace,
                name,
                change,
                size,
                generation,
                finalizer,
                terminating,
                nodes,
            } => format!(
                "memcached {namespace}/{name} {change}: size {}, generation {generation}, {nodes} node(s){}{}",
                size.map_or_else(|| "?".to_string(), |s| s.to_string()),
                if *finalizer { ", finalizer" } else { "" },
                if *terminating { ", terminating" } else { "" }
            ),
            Observation::Deployment {
                namespace,
                name,
                change,
                replicas,
                ready,
                available,
                owner,
                terminating,
            } => format!(
                "deploy   {namespace}/{name} {change}: {replicas} replica(s), {ready} ready, {available} available{}{}",
                owner
                    .as_ref()
                    .map(|o| format!(", owned by {o}"))
                    .unwrap_or_default(),
                if *terminating { ", terminating" } else { "" }
            ),
            Observation::Event {
                namespace,
                involved,
                type_,
                reason,
                message,
                reporter,
                instance,
                count,
            } => format!(
                "event    {namespace} {involved} {type_} {reason}: {message} (by {reporter}{}{})",
                if instance.is_empty() {
                    String::new()
                } else {
                    format!(" {instance}")
                },
                if *count > 1 {
                    format!(", {count} times")
                } else {
                    String::new()
                }
            ),
        };
        f.write_str(&what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    #[test]
    fn objects_and_events_are_json_lines_in_camel_case_tagged_by_kind() {
        let mut h = History::new();
        h.push(
            at(0),
            Observation::Memcached {
                namespace: "default".into(),
                name: "cache".into(),
                change: Change::Added,
                size: Some(3),
                generation: 1,
                finalizer: false,
                terminating: false,
                nodes: 0,
            },
        );
        h.push(
            at(5),
            Observation::Deployment {
                namespace: "default".into(),
                name: "cache".into(),
                change: Change::Modified,
                replicas: 3,
                ready: 2,
                available: 2,
                owner: Some("Memcached/cache".into()),
                terminating: false,
            },
        );
        h.push(
            at(9),
            Observation::Event {
                namespace: "default".into(),
                involved: "Memcached/cache".into(),
                type_: "Normal".into(),
                reason: "Created".into(),
                message: "created deployment cache".into(),
                reporter: "memcached-operator".into(),
                instance: "op-a".into(),
                count: 1,
            },
        );
        h.push(
            at(12),
            Observation::Lock {
                lock: "lock".into(),
                holder: None,
                transitions: None,
                resource_version: "42".into(),
            },
        );
        let lines: Vec<serde_json::Value> = h
            .to_json_lines()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["kind"], "memcached");
        assert_eq!(lines[0]["change"], "added");
        assert_eq!(lines[1]["kind"], "deployment");
        assert_eq!(lines[1]["owner"], "Memcached/cache");
        assert_eq!(lines[2]["kind"], "event");
        assert_eq!(lines[2]["type"], "Normal");
        assert_eq!(lines[2]["reporter"], "memcached-operator");
        assert_eq!(lines[3]["resourceVersion"], "42");
        for (line, entry) in lines.iter().zip(h.entries()) {
            let back: Entry = serde_json::from_value(line.clone()).unwrap();
            assert_eq!(&back, entry);
        }
        assert!(
            h.replicas().is_empty(),
            "objects and events name no replica"
        );
    }

    #[test]
    fn objects_and_events_read_as_one_line_each() {
        let mut h = History::new();
        h.push(
            at(0),
            Observation::Memcached {
                namespace: "default".into(),
                name: "cache".into(),
                change: Change::Modified,
                size: Some(3),
                generation: 2,
                finalizer: true,
                terminating: true,
                nodes: 3,
            },
        );
        h.push(
            at(1500),
            Observation::Deployment {
                namespace: "default".into(),
                name: "cache".into(),
                change: Change::Deleted,
                replicas: 3,
                ready: 3,
                available: 3,
                owner: Some("Memcached/cache".into()),
                terminating: true,
            },
        );
        h.push(
            at(2000),
            Observation::Event {
                namespace: "default".into(),
                involved: "Memcached/cache".into(),
                type_: "Warning".into(),
                reason: "ReconcileError".into(),
                message: "boom".into(),
                reporter: "memcached-operator".into(),
                instance: String::new(),
                count: 4,
            },
        );
        let lines: Vec<String> = describe(h.entries(), at(0))
            .lines()
            .map(|l| l.trim().to_string())
            .collect();
        assert_eq!(
            lines,
            [
                "+0.000s  memcached default/cache modified: size 3, generation 2, 3 node(s), finalizer, terminating",
                "+1.500s  deploy   default/cache deleted: 3 replica(s), 3 ready, 3 available, owned by Memcached/cache, terminating",
                "+2.000s  event    default Memcached/cache Warning ReconcileError: boom (by memcached-operator, 4 times)",
            ]
        );
    }
}
