//! The node lifecycle controller: watches each node's heartbeats (the Ready condition's
//! `lastHeartbeatTime` and the `kube-node-lease/<node>` Lease's `renewTime`), marks a node
//! whose heartbeats stop Unknown after the grace period, keeps the condition taints
//! (`node.kubernetes.io/unreachable`, `not-ready`, `unschedulable`, pressure) in step with
//! its conditions, and marks the pods of a node that is not Ready as not Ready, following
//! upstream's `pkg/controller/nodelifecycle`.
//!
//! # Guarantees
//! Staleness is judged by when this controller last *observed* a heartbeat change, on its
//! own monotonic clock (upstream's `probeTimestamp`), never by comparing the timestamps a
//! kubelet wrote with this clock: a skewed kubelet clock does not make a node go Unknown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::informer::{AbortOnDrop, Cache, Change};
use super::queue::Queue;
use super::support::{is_conflict, is_not_found, is_ready, node_ready, now, taints};

/// The taint of a node whose Ready condition is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a node whose Ready condition is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint of a cordoned node.
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Conditions that go Unknown with Ready (NetworkUnavailable is left alone, as upstream).
const UNKNOWN_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// NoSchedule taints for conditions other than Ready (`nodeConditionToTaintKeyStatusMap`).
const CONDITION_TAINTS: [(&str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
];

/// The periods of the controller (see [`super::ControllerConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Periods {
    /// How often every node is checked.
    pub(crate) monitor: Duration,
    /// Heartbeat grace period.
    pub(crate) grace: Duration,
    /// Grace for a node that never posted Ready.
    pub(crate) startup_grace: Duration,
}

/// Errors of one node check (the node is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

/// What the controller last saw of a node's heartbeats, and when it saw it change.
struct Health {
    ready_heartbeat: Option<Time>,
    lease_renew: Option<Timestamp>,
    probe: Instant,
}

struct Controller {
    client: Client,
    nodes: Cache<Node>,
    leases: Cache<Lease>,
    pods: Cache<Pod>,
    periods: Periods,
    queue: Queue<String>,
    health: Mutex<HashMap<String, Health>>,
}

/// Subscribes the controller to the shared caches and starts its monitor.
pub(crate) fn start(
    client: Client,
    nodes: &Cache<Node>,
    leases: &Cache<Lease>,
    pods: &Cache<Pod>,
    periods: Periods,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        client,
        nodes: nodes.clone(),
        leases: leases.clone(),
        pods: pods.clone(),
        periods,
        queue: Queue::new(),
        health: Mutex::new(HashMap::new()),
    });
    let c = controller.clone();
    nodes.subscribe(move |change| {
        let name = change.object().metadata.name.clone().unwrap_or_default();
        match change {
            Change::Applied { .. } => c.queue.add(name),
            Change::Deleted(_) => {
                c.health
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
            }
        }
    });
    let c = controller.clone();
    leases.subscribe(move |change| {
        if let Change::Applied { new, .. } = change {
            c.queue.add(new.metadata.name.clone().unwrap_or_default());
        }
    });
    let c = controller.clone();
    pods.subscribe(move |change| {
        // A pod that turns Ready on a node that is not: mark it again (upstream's
        // `processPod`).
        if let Change::Applied { new, .. } = change
            && is_ready(new)
            && let Some(node) = new.spec.as_ref().and_then(|s| s.node_name.as_deref())
            && c.nodes
                .get("", node)
                .is_some_and(|n| node_ready(&n).is_some_and(|r| r != "True"))
        {
            c.queue.add(node.to_string());
        }
    });
    AbortOnDrop::spawn(async move { controller.run().await })
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn lease_renew(lease: Option<&Lease>) -> Option<Timestamp> {
    lease?.spec.as_ref()?.renew_time.as_ref().map(|t| t.0)
}

impl Controller {
    async fn run(self: Arc<Self>) {
        self.nodes.wait_ready().await;
        self.leases.wait_ready().await;
        self.pods.wait_ready().await;
        let ticker = async {
            let mut interval = tokio::time::interval(self.periods.monitor);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                for node in self.nodes.list() {
                    self.queue
                        .add(node.metadata.name.clone().unwrap_or_default());
                }
            }
        };
        let worker = async {
            loop {
                let name = self.queue.next().await;
                match self.check(&name).await {
                    Ok(()) => self.queue.forget(&name),
                    Err(error) => {
                        tracing::debug!(node = %name, error = %super::support::error_chain(&error), "node check failed; retrying");
                        self.queue.add_rate_limited(name.clone());
                    }
                }
                self.queue.done(&name);
            }
        };
        tokio::join!(ticker, worker);
    }

    /// Records heartbeat changes; returns when one was last seen.
    fn observe(&self, name: &str, node: &Node) -> Instant {
        let heartbeat = condition(node, "Ready").and_then(|c| c.last_heartbeat_time.clone());
        let renew = lease_renew(self.leases.get("kube-node-lease", name).as_deref());
        let now = Instant::now();
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let h = health.entry(name.to_string()).or_insert_with(|| Health {
            ready_heartbeat: heartbeat.clone(),
            lease_renew: renew,
            probe: now,
        });
        if h.ready_heartbeat != heartbeat {
            h.ready_heartbeat = heartbeat;
            h.probe = now;
        }
        if renew.is_some() && (h.lease_renew.is_none() || h.lease_renew < renew) {
            h.lease_renew = renew;
            h.probe = now;
        }
        h.probe
    }

    async fn check(&self, name: &str) -> Result<(), Error> {
        let Some(node) = self.nodes.get("", name) else {
            self.health
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(name);
            return Ok(());
        };
        let probe = self.observe(name, &node);
        let never_posted = condition(&node, "Ready").is_none();
        let grace = if never_posted {
            self.periods.startup_grace
        } else {
            self.periods.grace
        };
        let mut node = (*node).clone();
        if probe.elapsed() > grace
            && let Some(updated) = self.mark_unknown(&node).await?
        {
            node = updated;
        }
        self.reconcile_taints(&node).await?;
        if node_ready(&node).is_some_and(|r| r != "True") {
            self.mark_pods_not_ready(name).await?;
        }
        Ok(())
    }

    /// Sets Ready and the pressure conditions to Unknown (`tryUpdateNodeHealth`).
    async fn mark_unknown(&self, node: &Node) -> Result<Option<Node>, Error> {
        let mut updated = node.clone();
        let created = node.metadata.creation_timestamp.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let t = now();
        let mut changed = false;
        for type_ in UNKNOWN_CONDITIONS {
            match conditions.iter_mut().find(|c| c.type_ == type_) {
                None => {
                    conditions.push(NodeCondition {
                        type_: type_.into(),
                        status: "Unknown".into(),
                        reason: Some("NodeStatusNeverUpdated".into()),
                        message: Some("Kubelet never posted node status.".into()),
                        last_heartbeat_time: created.clone(),
                        last_transition_time: Some(t.clone()),
                    });
                    changed = true;
                }
                Some(c) if c.status != "Unknown" => {
                    c.status = "Unknown".into();
                    c.reason = Some("NodeStatusUnknown".into());
                    c.message = Some("Kubelet stopped posting node status.".into());
                    c.last_transition_time = Some(t.clone());
                    changed = true;
                }
                Some(_) => {}
            }
        }
        if !changed {
            return Ok(None);
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        tracing::info!(node = %name, "node stopped posting status; marking it Unknown");
        let api: Api<Node> = Api::all(self.client.clone());
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(n) => Ok(Some(n)),
            // Someone (the kubelet) wrote meanwhile: the event brings the node back here.
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Keeps the condition taints in step with the node's conditions and cordon.
    async fn reconcile_taints(&self, node: &Node) -> Result<(), Error> {
        let current = taints(node);
        let mut wanted: Vec<(&str, &str)> = Vec::new();
        let mut unwanted: Vec<(&str, &str)> = Vec::new();
        let both = |key| [(key, "NoSchedule"), (key, "NoExecute")];
        match node_ready(node) {
            Some("True") => {
                unwanted.extend(both(UNREACHABLE));
                unwanted.extend(both(NOT_READY));
            }
            Some("False") => {
                wanted.extend(both(NOT_READY));
                unwanted.extend(both(UNREACHABLE));
            }
            Some(_) => {
                wanted.extend(both(UNREACHABLE));
                unwanted.extend(both(NOT_READY));
            }
            None => {}
        }
        for (type_, status, key) in CONDITION_TAINTS {
            if condition(node, type_).is_some_and(|c| c.status == status) {
                wanted.push((key, "NoSchedule"));
            } else {
                unwanted.push((key, "NoSchedule"));
            }
        }
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if cordoned {
            wanted.push((UNSCHEDULABLE, "NoSchedule"));
        } else {
            unwanted.push((UNSCHEDULABLE, "NoSchedule"));
        }
        let mut next: Vec<Taint> = current
            .iter()
            .filter(|t| !unwanted.contains(&(t.key.as_str(), t.effect.as_str())))
            .cloned()
            .collect();
        let t = now();
        for (key, effect) in wanted {
            if !next.iter().any(|x| x.key == key && x.effect == effect) {
                next.push(Taint {
                    key: key.into(),
                    effect: effect.into(),
                    value: None,
                    time_added: Some(t.clone()),
                });
            }
        }
        if next.as_slice() == current {
            return Ok(());
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        tracing::debug!(node = %name, taints = ?next.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>(), "updating condition taints");
        let list = if next.is_empty() {
            Value::Null
        } else {
            json!(next)
        };
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": list},
        });
        let api: Api<Node> = Api::all(self.client.clone());
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets the Ready condition of the node's pods to False (`MarkPodsNotReady`).
    async fn mark_pods_not_ready(&self, node: &str) -> Result<(), Error> {
        let pods = self.pods.filter(|p| {
            is_ready(p) && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        });
        let mut first_error = None;
        for pod in pods {
            let mut updated = (*pod).clone();
            if let Some(c) = updated
                .status
                .as_mut()
                .and_then(|s| s.conditions.as_mut())
                .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "Ready"))
            {
                c.status = "False".into();
                c.last_transition_time = Some(now());
            }
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            match api
                .replace_status(&name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    if first_error.is_none() {
                        first_error = Some(e);
                    }
                }
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}
