//! The audit as the benchmarks read it: a tap that keeps the requests sent from pods or
//! touching one namespace, and the queries that find a handoff's two ends in it (the
//! fault, the acquiring write) and count requests by pod. Every time is the API server's
//! own: when it received the request.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::BenchError;
use crate::sim::apiserver::ServerHandle;
use crate::sim::apiserver::audit::AuditEvent;

/// The user agent suffix of the simulated garbage collector's requests.
const GARBAGE_COLLECTOR: &str = "generic-garbage-collector";

/// A live copy of the audit events that matter to a benchmark: those sent from a pod and
/// those in the operator's namespace (the garbage collector's deletes, the harness's pod
/// deletions). Node heartbeats and other controllers' traffic elsewhere are left out, so
/// the copy stays small however long a benchmark runs.
///
/// # Guarantees
/// No event is lost when the tap falls behind the live feed: it fills the gap from the
/// server's full log.
pub(crate) struct AuditTap {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    events: Mutex<Vec<AuditEvent>>,
    arrived: Notify,
}

impl Shared {
    fn events(&self) -> std::sync::MutexGuard<'_, Vec<AuditEvent>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AuditTap {
    /// Starts following `server`'s audit from now on.
    ///
    /// # Panics
    /// Outside a Tokio runtime (it spawns its follower).
    pub(crate) fn start(server: ServerHandle, namespace: &str) -> AuditTap {
        let shared = Arc::new(Shared::default());
        let live = server.state().audit.subscribe();
        let task = tokio::spawn(follow(server, live, namespace.to_string(), shared.clone()));
        AuditTap { shared, task }
    }

    /// Runs `query` over the events kept so far.
    pub(crate) fn query<T>(&self, query: impl FnOnce(&[AuditEvent]) -> T) -> T {
        query(&self.shared.events())
    }

    /// Waits until `query` finds something, bounded by `within`.
    ///
    /// # Errors
    /// [`BenchError::Timeout`] naming `what`.
    pub(crate) async fn wait_for<T>(
        &self,
        what: &str,
        within: Duration,
        query: impl Fn(&[AuditEvent]) -> Option<T>,
    ) -> Result<T, BenchError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if let Some(found) = self.query(&query) {
                return Ok(found);
            }
            tokio::select! {
                () = arrived => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(BenchError::Timeout {
                        what: what.to_string(),
                        within,
                        last: "no such request in the audit".into(),
                    });
                }
            }
        }
    }
}

impl Drop for AuditTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn kept(event: &AuditEvent, namespace: &str) -> bool {
    event.pod.is_some() || event.namespace == namespace
}

async fn follow(
    server: ServerHandle,
    mut live: tokio::sync::broadcast::Receiver<AuditEvent>,
    namespace: String,
    shared: Arc<Shared>,
) {
    // After a gap is filled from the full log, events up to its last seq are known.
    let mut known_up_to = 0;
    loop {
        match live.recv().await {
            Ok(event) => {
                if event.seq > known_up_to && kept(&event, &namespace) {
                    shared.events().push(event);
                }
            }
            Err(RecvError::Lagged(_)) => {
                let all = server.state().audit.events();
                let mut events = shared.events();
                let have: HashSet<u64> = events.iter().map(|e| e.seq).collect();
                events.extend(
                    all.iter()
                        .filter(|e| !have.contains(&e.seq) && kept(e, &namespace))
                        .cloned(),
                );
                events.sort_by_key(|e| e.seq);
                known_up_to = all.last().map_or(known_up_to, |e| e.seq);
            }
            Err(RecvError::Closed) => return,
        }
        shared.arrived.notify_waiters();
    }
}

/// The pod a request came from.
pub(crate) fn pod_of(event: &AuditEvent) -> Option<&str> {
    event.pod.as_ref().map(|p| p.name.as_str())
}

fn succeeded(event: &AuditEvent) -> bool {
    (200..300).contains(&event.code)
}

fn on(event: &AuditEvent, namespace: &str, resource: &str, name: &str) -> bool {
    event.namespace == namespace
        && event.resource == resource
        && event.subresource.is_empty()
        && event.name == name
}

/// The earliest event that `keep` keeps.
fn earliest(events: &[AuditEvent], keep: impl Fn(&AuditEvent) -> bool) -> Option<&AuditEvent> {
    events.iter().filter(|e| keep(e)).min_by_key(|e| e.time)
}

/// The latest event that `keep` keeps.
fn latest(events: &[AuditEvent], keep: impl Fn(&AuditEvent) -> bool) -> Option<&AuditEvent> {
    events.iter().filter(|e| keep(e)).max_by_key(|e| e.time)
}

/// A successful write (update or create) of the Lease `lock`.
fn lease_written(event: &AuditEvent, namespace: &str, lock: &str) -> bool {
    matches!(event.verb.as_str(), "update" | "create")
        && on(event, namespace, "leases", lock)
        && succeeded(event)
}

/// A successful `verb` of the object `resource`/`name` received at or after `after`.
fn did(
    e: &AuditEvent,
    verb: &str,
    (namespace, resource, name): (&str, &str, &str),
    after: DateTime<Utc>,
) -> bool {
    e.verb == verb && on(e, namespace, resource, name) && succeeded(e) && e.time >= after
}

/// The deletion of pod `name` received at or after `after`.
pub(crate) fn pod_deleted<'a>(
    events: &'a [AuditEvent],
    namespace: &str,
    name: &str,
    after: DateTime<Utc>,
) -> Option<&'a AuditEvent> {
    earliest(events, |e| {
        did(e, "delete", (namespace, "pods", name), after)
    })
}

/// The first successful write of the Lease `lock` by a pod other than `old` at or after
/// `after`: a standby only writes the Lease to take it, so this is the acquisition (an
/// update that puts its identity in `holderIdentity`, or the create of a missing Lease).
pub(crate) fn lease_taken<'a>(
    events: &'a [AuditEvent],
    namespace: &str,
    lock: &str,
    old: &str,
    after: DateTime<Utc>,
) -> Option<&'a AuditEvent> {
    earliest(events, |e| {
        lease_written(e, namespace, lock) && e.time >= after && pod_of(e).is_some_and(|p| p != old)
    })
}

/// The last successful write of the Lease `lock` by `leader` received before `before`:
/// its last renewal (or its acquisition, when it never renewed).
pub(crate) fn last_renewal<'a>(
    events: &'a [AuditEvent],
    namespace: &str,
    lock: &str,
    leader: &str,
    before: DateTime<Utc>,
) -> Option<&'a AuditEvent> {
    latest(events, |e| {
        lease_written(e, namespace, lock) && e.time < before && pod_of(e) == Some(leader)
    })
}

/// The garbage collector's deletion of the ConfigMap `lock` at or after `after`.
pub(crate) fn lock_collected<'a>(
    events: &'a [AuditEvent],
    namespace: &str,
    lock: &str,
    after: DateTime<Utc>,
) -> Option<&'a AuditEvent> {
    earliest(events, |e| {
        did(e, "delete", (namespace, "configmaps", lock), after)
            && e.user_agent.ends_with(GARBAGE_COLLECTOR)
    })
}

/// The first successful create of the ConfigMap `lock` by a pod at or after `after`.
pub(crate) fn lock_created<'a>(
    events: &'a [AuditEvent],
    namespace: &str,
    lock: &str,
    after: DateTime<Utc>,
) -> Option<&'a AuditEvent> {
    earliest(events, |e| {
        did(e, "create", (namespace, "configmaps", lock), after) && e.pod.is_some()
    })
}

/// The first request of `pod` about the lock: a read or write of `lock`, or a list or
/// watch of `resource` in the namespace (how a standby watches it). Proof that the pod
/// campaigns and has seen the lock.
pub(crate) fn first_lock_request<'a>(
    events: &'a [AuditEvent],
    namespace: &str,
    resource: &str,
    lock: &str,
    pod: &str,
) -> Option<&'a AuditEvent> {
    earliest(events, |e| {
        pod_of(e) == Some(pod)
            && e.namespace == namespace
            && e.resource == resource
            && (e.name == lock || e.name.is_empty())
    })
}

/// The last write of `pod` at or after `after`, leaving out the lock and Events (what a
/// leader writes while it has nothing to reconcile).
pub(crate) fn last_work_write<'a>(
    events: &'a [AuditEvent],
    pod: &str,
    lock: &str,
    after: DateTime<Utc>,
) -> Option<&'a AuditEvent> {
    latest(events, |e| {
        pod_of(e) == Some(pod)
            && e.is_write()
            && e.time >= after
            && e.resource != "events"
            && e.name != lock
    })
}

/// Requests received in `[from, to)` by the pod that sent them.
pub(crate) fn requests_by_pod(
    events: &[AuditEvent],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for e in events.iter().filter(|e| e.time >= from && e.time < to) {
        if let Some(pod) = pod_of(e) {
            *counts.entry(pod.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// Milliseconds from `from` to `to` (negative when `to` is earlier).
pub(crate) fn millis_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::apiserver::audit::PodRef;

    const NS: &str = "op";

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    fn event(ms: i64, pod: Option<&str>, verb: &str, resource: &str, name: &str) -> AuditEvent {
        AuditEvent {
            time: at(ms),
            seq: 0,
            user: "u".into(),
            groups: vec![],
            impersonated_by: None,
            source_ip: "127.0.0.1".into(),
            pod: pod.map(|p| PodRef {
                namespace: NS.into(),
                name: p.into(),
                uid: format!("uid-{p}"),
            }),
            verb: verb.into(),
            api_group: String::new(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: NS.into(),
            name: name.into(),
            request_uri: String::new(),
            user_agent: String::new(),
            code: 200,
        }
    }

    #[test]
    fn the_lease_is_taken_by_the_first_other_pod_writing_it_after_the_fault() {
        let mut refused = event(40, Some("b"), "update", "leases", "lock");
        refused.code = 409;
        let events = vec![
            event(0, Some("a"), "update", "leases", "lock"),
            event(10, None, "delete", "pods", "a"),
            event(20, Some("a"), "update", "leases", "lock"),
            event(30, Some("b"), "get", "leases", "lock"),
            refused,
            event(60, Some("c"), "update", "leases", "lock"),
            event(50, Some("b"), "update", "leases", "lock"),
        ];
        let fault = pod_deleted(&events, NS, "a", at(0)).unwrap();
        assert_eq!(fault.time, at(10));
        let taken = lease_taken(&events, NS, "lock", "a", fault.time).unwrap();
        assert_eq!((pod_of(taken), taken.time), (Some("b"), at(50)));
        let renewed = last_renewal(&events, NS, "lock", "a", taken.time).unwrap();
        assert_eq!(
            renewed.time,
            at(20),
            "a renewal after the delete still counts"
        );
    }

    #[test]
    fn the_for_life_lock_is_collected_by_the_garbage_collector_and_created_by_a_pod() {
        let mut by_person = event(5, None, "delete", "configmaps", "lock");
        by_person.user_agent = "kubectl/v1.32".into();
        let mut by_gc = event(15, None, "delete", "configmaps", "lock");
        by_gc.user_agent =
            "kube-controller-manager/v1.33 kubernetes/opconform/generic-garbage-collector".into();
        let mut exists = event(12, Some("b"), "create", "configmaps", "lock");
        exists.code = 409;
        let events = vec![
            by_person,
            exists,
            by_gc,
            event(17, Some("b"), "create", "configmaps", "other"),
            event(19, Some("b"), "create", "configmaps", "lock"),
        ];
        let collected = lock_collected(&events, NS, "lock", at(0)).unwrap();
        assert_eq!(collected.time, at(15));
        let created = lock_created(&events, NS, "lock", collected.time).unwrap();
        assert_eq!(millis_between(collected.time, created.time), 4.0);
    }

    #[test]
    fn a_standby_campaigns_once_it_reads_or_watches_the_lock() {
        let events = vec![
            event(1, Some("b"), "get", "pods", "b"),
            event(2, Some("b"), "get", "configmaps", "registry"),
            event(3, Some("b"), "watch", "configmaps", ""),
        ];
        let first = first_lock_request(&events, NS, "configmaps", "lock", "b").unwrap();
        assert_eq!(first.time, at(3));
        assert!(first_lock_request(&events, NS, "configmaps", "lock", "c").is_none());
    }

    #[test]
    fn requests_are_counted_by_pod_within_the_window() {
        let events = vec![
            event(0, Some("a"), "update", "leases", "lock"),
            event(10, Some("a"), "update", "leases", "lock"),
            event(10, Some("b"), "get", "leases", "lock"),
            event(10, None, "get", "leases", "lock"),
            event(20, Some("a"), "update", "leases", "lock"),
        ];
        let counts = requests_by_pod(&events, at(5), at(20));
        assert_eq!(counts, BTreeMap::from([("a".into(), 1), ("b".into(), 1)]));
    }

    #[test]
    fn the_last_work_write_ignores_the_lock_and_events() {
        let events = vec![
            event(1, Some("a"), "create", "deployments", "mc-1"),
            event(2, Some("a"), "update", "leases", "lock"),
            event(3, Some("a"), "create", "events", ""),
            event(4, Some("a"), "get", "deployments", "mc-1"),
        ];
        let last = last_work_write(&events, "a", "lock", at(0)).unwrap();
        assert_eq!(last.time, at(1));
    }
}
