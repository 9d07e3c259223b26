//! The scheduler: binds each pending pod without `spec.nodeName` (and with the
//! `default-scheduler`) to a node through the `pods/binding` subresource. Feasible nodes
//! are schedulable (not cordoned), carry no NoSchedule/NoExecute taint the pod does not
//! tolerate, match its nodeSelector and required node affinity, and are Ready. Among them
//! it prefers the node with the fewest pods of the pod's owner, then the fewest pods. A
//! pod that fits nowhere stays Pending with `PodScheduled=False`, reason `Unschedulable`
//! and kube-scheduler's message, and is tried again when a node changes in a way that
//! matters (or after the retry period).
//!
//! Pods are placed one at a time and bound concurrently, as kube-scheduler's scheduling and
//! binding cycles are: a placed pod is assumed on its node (counted there by the next
//! placements) and its binding sent by a task of its own, so a slow binding holds up no
//! other pod. A binding that fails forgets the assumption and the pod is tried again with
//! backoff.
//!
//! Volumes are placed as kube-scheduler's VolumeBinding plugin places them: a pod whose
//! claim is missing or being deleted, or has an unbound claim of a class that binds at once
//! (or of no class), fits nowhere (the PreFilter's reason); a claim bound to a volume limits
//! the pod to the nodes of the volume's node affinity; an unbound claim of a
//! `WaitForFirstConsumer` class is bound where the pod goes: to the smallest Available
//! volume of its class that fits it and whose node affinity admits the node (the volume is
//! given a `claimRef` to the claim before the pod's binding, for the PersistentVolume
//! controller to finish), else provisioned there if its class has a provisioner and its
//! `allowedTopologies` admit the node (the claim is annotated with
//! `volume.kubernetes.io/selected-node`); a node where neither can be is unfit ("didn't find
//! available persistent volumes to bind"). The pod is bound only once its claims are, or
//! tried again after 10 minutes (`bindTimeoutSeconds`).
//!
//! # Caveats
//! No resource requests, ports, pod (anti-)affinity, topology spread or preemption; no
//! storage capacity tracking (`CSIStorageCapacity`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodCondition,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::informer::{self, AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{
    controller_of, is_conflict, is_deleting, is_not_found, is_terminal, node_ready, now,
    pod_condition, taints, term_matches, tolerates, tolerations, untolerated,
};

/// The scheduler name this scheduler serves.
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// Errors of one scheduling attempt (the pod is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

struct Scheduler {
    client: Client,
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    claims: Cache<PersistentVolumeClaim>,
    volumes: Cache<PersistentVolume>,
    classes: Cache<StorageClass>,
    queue: Queue<ObjectKey>,
    /// Pods bound here whose binding the cache has not shown yet: pod key → node.
    assumed: Mutex<HashMap<ObjectKey, String>>,
    /// Pods that fit nowhere, tried again when a node changes.
    unschedulable: Mutex<HashSet<ObjectKey>>,
    retry: Duration,
}

/// Starts the scheduler's own informers (pods and nodes, as its own user) and its worker.
pub(crate) fn start(client: Client, retry: Duration) -> Vec<AbortOnDrop> {
    let scheduler = Arc::new(Scheduler {
        client: client.clone(),
        pods: Cache::new(),
        nodes: Cache::new(),
        claims: Cache::new(),
        volumes: Cache::new(),
        classes: Cache::new(),
        queue: Queue::new(),
        assumed: Mutex::new(HashMap::new()),
        unschedulable: Mutex::new(HashSet::new()),
        retry,
    });
    let s = scheduler.clone();
    scheduler
        .pods
        .subscribe(move |change| s.pod_changed(change));
    let s = scheduler.clone();
    scheduler
        .nodes
        .subscribe(move |change| s.node_changed(change));
    let s = scheduler.clone();
    scheduler.claims.subscribe(move |_| s.retry_unschedulable());
    let s = scheduler.clone();
    scheduler
        .volumes
        .subscribe(move |_| s.retry_unschedulable());
    let s = scheduler.clone();
    scheduler
        .classes
        .subscribe(move |_| s.retry_unschedulable());
    vec![
        informer::spawn(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            watcher::Config::default(),
            scheduler.claims.clone(),
        ),
        informer::spawn(
            Api::<PersistentVolume>::all(client.clone()),
            watcher::Config::default(),
            scheduler.volumes.clone(),
        ),
        informer::spawn(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
            scheduler.classes.clone(),
        ),
        informer::spawn(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default(),
            scheduler.pods.clone(),
        ),
        informer::spawn(
            Api::<Node>::all(client),
            watcher::Config::default(),
            scheduler.nodes.clone(),
        ),
        AbortOnDrop::spawn(async move { scheduler.run().await }),
    ]
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// Whether this scheduler should place the pod.
fn wants_scheduling(pod: &Pod) -> bool {
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(SCHEDULER_NAME);
    node_of(pod).is_none()
        && scheduler == SCHEDULER_NAME
        && !is_deleting(&pod.metadata)
        && !is_terminal(pod)
}

/// What about a node matters to scheduling (a change of anything else is not retried).
fn fingerprint(node: &Node) -> Value {
    json!({
        "labels": node.metadata.labels,
        "taints": taints(node).iter().map(|t| (&t.key, &t.value, &t.effect)).collect::<Vec<_>>(),
        "unschedulable": node.spec.as_ref().and_then(|s| s.unschedulable),
        "ready": node_ready(node),
    })
}

/// Why a node does not fit a pod (kube-scheduler's filter messages), checked in the
/// order of its plugins; `None` when it fits.
fn unfit(pod: &Pod, node: &Node) -> Option<String> {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if cordoned {
        let tolerated = tolerations(pod).iter().any(|t| {
            tolerates(
                t,
                &k8s_openapi::api::core::v1::Taint {
                    key: super::node_lifecycle::UNSCHEDULABLE.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
            )
        });
        if !tolerated {
            return Some("node(s) were unschedulable".into());
        }
    }
    if let Some(taint) = untolerated(taints(node), tolerations(pod), &["NoSchedule", "NoExecute"]) {
        return Some(format!(
            "node(s) had untolerated taint {{{}: {}}}",
            taint.key,
            taint.value.as_deref().unwrap_or_default()
        ));
    }
    if !matches_node_selection(pod, node) {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    if node_ready(node) != Some("True") {
        return Some("node(s) were not ready".into());
    }
    None
}

/// nodeSelector and required node affinity.
pub(crate) fn matches_node_selection(pod: &Pod, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let spec = pod.spec.as_ref();
    if let Some(selector) = spec.and_then(|s| s.node_selector.as_ref())
        && selector.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    let required = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        Some(r) => r.node_selector_terms.iter().any(|t| term_matches(t, node)),
        None => true,
    }
}

/// How long the VolumeBinding plugin waits for a pod's claims to be bound
/// (`bindTimeoutSeconds`).
const VOLUME_BIND_TIMEOUT: Duration = Duration::from_secs(600);

use crate::persistent_volume::SELECTED_NODE;

/// A pod's claims as they bear on its placement.
#[derive(Default)]
struct PodClaims {
    /// The volumes of the bound claims.
    bound: Vec<Arc<PersistentVolume>>,
    /// Whether a bound claim names a volume that does not exist.
    missing_volume: bool,
    /// Unbound claims of a `WaitForFirstConsumer` class, bound or provisioned on the chosen
    /// node.
    delayed: Vec<Arc<PersistentVolumeClaim>>,
}

/// What becomes of a `WaitForFirstConsumer` claim on a node.
#[derive(Debug, Clone, PartialEq)]
enum Placement {
    /// Bound to this existing volume.
    Volume(String),
    /// Provisioned on the node.
    Provision,
}

/// The placements of a pod's delayed claims on one node, claim by claim.
type VolumePlan = Vec<(ObjectKey, Placement)>;

/// The VolumeBinding plugin's reason for a node where a delayed claim can be neither bound
/// nor provisioned.
const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";

/// Whether a StorageClass's `allowedTopologies` admit a node of `labels`
/// (`MatchTopologySelectorTerms`: no terms admit every node; a term admits a node that has
/// one of the listed values for each of its keys).
fn topology_admits(class: &StorageClass, labels: &BTreeMap<String, String>) -> bool {
    let terms = class.allowed_topologies.as_deref().unwrap_or_default();
    terms.is_empty()
        || terms.iter().any(|term| {
            term.match_label_expressions
                .iter()
                .flatten()
                .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
        })
}

impl PodClaims {
    /// Why `node` cannot have the pod's volumes (the VolumeBinding plugin's Filter).
    fn unfit(&self, node: &Node) -> Option<String> {
        if self.missing_volume {
            return Some(
                "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".into(),
            );
        }
        let conflict = self.bound.iter().any(|volume| {
            volume
                .spec
                .as_ref()
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref())
                .is_some_and(|r| !r.node_selector_terms.iter().any(|t| term_matches(t, node)))
        });
        conflict.then(|| "node(s) didn't match PersistentVolume's node affinity".into())
    }
}

/// kube-scheduler's FitError message when a PreFilter plugin turned the pod away.
fn prefilter_error(total: usize, reason: &str) -> String {
    format!(
        "0/{total} nodes are available: {reason}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    )
}

/// kube-scheduler's FitError message.
fn fit_error(total: usize, reasons: &[String]) -> String {
    if total == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r.as_str()).or_default() += 1;
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!(
        "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling.",
        parts.join(", ")
    )
}

impl Scheduler {
    fn pod_changed(&self, change: &Change<Pod>) {
        let pod = change.object();
        let key = ObjectKey::of(pod.as_ref());
        match change {
            Change::Applied { new, .. } => {
                if node_of(new).is_some() {
                    self.assumed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                }
                if wants_scheduling(new) {
                    self.queue.add(key);
                } else {
                    self.unschedulable
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                }
            }
            Change::Deleted(_) => {
                self.assumed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
                self.unschedulable
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
            }
        }
    }

    fn node_changed(&self, change: &Change<Node>) {
        let Change::Applied { old, new } = change else {
            return;
        };
        if old
            .as_ref()
            .is_some_and(|o| fingerprint(o) == fingerprint(new))
        {
            return;
        }
        self.retry_unschedulable();
    }

    /// Queues again every pod that fit nowhere.
    fn retry_unschedulable(&self) {
        let waiting: Vec<ObjectKey> = self
            .unschedulable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        for key in waiting {
            self.queue.add(key);
        }
    }

    async fn run(self: Arc<Self>) {
        self.pods.wait_ready().await;
        self.nodes.wait_ready().await;
        self.claims.wait_ready().await;
        self.volumes.wait_ready().await;
        self.classes.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.schedule(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(pod = %key, error = %super::support::error_chain(&error), "scheduling failed; retrying");
            }
        }
    }

    /// Pods per node (all, and of `owner`), counting bindings not yet seen in the cache.
    fn counts(&self, owner: Option<&str>) -> (HashMap<String, usize>, HashMap<String, usize>) {
        let mut all: HashMap<String, usize> = HashMap::new();
        let mut same: HashMap<String, usize> = HashMap::new();
        let mut seen: HashSet<ObjectKey> = HashSet::new();
        for pod in self.pods.list() {
            let Some(node) = node_of(&pod) else { continue };
            if is_terminal(&pod) {
                continue;
            }
            seen.insert(ObjectKey::of(pod.as_ref()));
            *all.entry(node.to_string()).or_default() += 1;
            if owner.is_some() && controller_of(&pod.metadata).map(|r| r.uid.as_str()) == owner {
                *same.entry(node.to_string()).or_default() += 1;
            }
        }
        let assumed = self
            .assumed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (key, node) in assumed {
            if seen.contains(&key) {
                continue;
            }
            *all.entry(node.clone()).or_default() += 1;
            if let Some(pod) = self.pods.get(&key.namespace, &key.name)
                && owner.is_some()
                && controller_of(&pod.metadata).map(|r| r.uid.as_str()) == owner
            {
                *same.entry(node).or_default() += 1;
            }
        }
        (all, same)
    }

    async fn schedule(self: &Arc<Self>, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(pod) = self.pods.get(&key.namespace, &key.name) else {
            return Ok(None);
        };
        if !wants_scheduling(&pod)
            || self
                .assumed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(key)
        {
            return Ok(None);
        }
        let nodes = self.nodes.list();
        // Without nodes kube-scheduler stops before its PreFilter plugins.
        let claims = match self.pod_claims(&pod) {
            Ok(claims) => claims,
            Err(reason) if !nodes.is_empty() => {
                let message = prefilter_error(nodes.len(), &reason);
                self.unschedulable
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone());
                self.mark_unschedulable(&pod, &message).await?;
                return Ok(Some(self.retry));
            }
            Err(_) => PodClaims::default(),
        };
        let mut reasons = Vec::new();
        let mut feasible = Vec::new();
        let mut plans: HashMap<String, VolumePlan> = HashMap::new();
        for node in &nodes {
            let unfit = unfit(&pod, node).or_else(|| claims.unfit(node));
            let planned = match unfit {
                Some(reason) => Err(reason),
                None => self.plan_volumes(&claims, node),
            };
            match planned {
                Err(reason) => reasons.push(reason),
                Ok(plan) => {
                    plans.insert(node.metadata.name.clone().unwrap_or_default(), plan);
                    feasible.push(node.clone());
                }
            }
        }
        if feasible.is_empty() {
            let message = fit_error(nodes.len(), &reasons);
            self.unschedulable
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone());
            self.mark_unschedulable(&pod, &message).await?;
            return Ok(Some(self.retry));
        }
        let owner = controller_of(&pod.metadata).map(|r| r.uid.clone());
        let (all, same) = self.counts(owner.as_deref());
        let count = |m: &HashMap<String, usize>, n: &Node| {
            m.get(n.metadata.name.as_deref().unwrap_or_default())
                .copied()
                .unwrap_or(0)
        };
        feasible.sort_by(|a, b| {
            count(&same, a)
                .cmp(&count(&same, b))
                .then(count(&all, a).cmp(&count(&all, b)))
                .then(a.metadata.name.cmp(&b.metadata.name))
        });
        let target = feasible[0].metadata.name.clone().unwrap_or_default();
        // The pod is assumed on its node before its binding is sent, and the binding runs
        // on its own, as kube-scheduler's binding cycle does: the next pod is placed
        // counting this one, without waiting for the API server's answer.
        self.assumed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), target.clone());
        self.unschedulable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        let scheduler = self.clone();
        let (key, uid) = (key.clone(), pod.metadata.uid.clone());
        let plan = plans.remove(&target).unwrap_or_default();
        tokio::spawn(async move {
            if scheduler.bind_volumes(&key, &plan, &target).await {
                scheduler.bind(key, uid, target).await;
            }
        });
        Ok(None)
    }

    /// The pod's claims as the VolumeBinding plugin's PreFilter sorts them, or why the pod
    /// fits nowhere.
    fn pod_claims(&self, pod: &Pod) -> Result<PodClaims, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut claims = PodClaims::default();
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for source in volumes
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
        {
            let name = &source.claim_name;
            let Some(claim) = self.claims.get(namespace, name) else {
                return Err(format!("persistentvolumeclaim {name:?} not found"));
            };
            if is_deleting(&claim.metadata) {
                return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
            }
            let volume_name = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or_default();
            if !volume_name.is_empty() {
                match self.volumes.get("", volume_name) {
                    Some(volume) => claims.bound.push(volume),
                    None => claims.missing_volume = true,
                }
                continue;
            }
            let class = crate::persistent_volume::claim_class(&claim);
            let delayed = !class.is_empty()
                && self.classes.get("", class).is_some_and(|c| {
                    c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
                });
            if !delayed {
                return Err("pod has unbound immediate PersistentVolumeClaims".into());
            }
            claims.delayed.push(claim);
        }
        Ok(claims)
    }

    /// The VolumeBinding plugin's Filter for the delayed claims (`FindPodVolumes`): each
    /// bound to a matching volume on `node`, else provisioned there, or why neither can be.
    fn plan_volumes(&self, claims: &PodClaims, node: &Node) -> Result<VolumePlan, String> {
        if claims.delayed.is_empty() {
            return Ok(Vec::new());
        }
        let volumes = self.volumes.list();
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let mut chosen: Vec<String> = Vec::new();
        let mut plan = Vec::new();
        for claim in &claims.delayed {
            let key = ObjectKey::of(claim.as_ref());
            if let Some(volume) =
                crate::persistent_volume::best_match_on_node(&volumes, claim, node, &chosen)
            {
                let name = volume.metadata.name.clone().unwrap_or_default();
                chosen.push(name.clone());
                plan.push((key, Placement::Volume(name)));
                continue;
            }
            let class = self
                .classes
                .get("", crate::persistent_volume::claim_class(claim));
            let provisions = class.is_some_and(|c| {
                !c.provisioner.is_empty()
                    && c.provisioner != "kubernetes.io/no-provisioner"
                    && topology_admits(&c, labels)
            });
            if !provisions {
                return Err(BIND_CONFLICT.into());
            }
            plan.push((key, Placement::Provision));
        }
        Ok(plan)
    }

    /// The VolumeBinding plugin's PreBind: reserves each chosen volume for its claim and
    /// annotates each claim to provision with the chosen node, then waits until every
    /// delayed claim of the pod is bound. `false` when the pod is not to be bound now (it is
    /// queued again).
    async fn bind_volumes(&self, key: &ObjectKey, plan: &VolumePlan, target: &str) -> bool {
        if plan.is_empty() {
            return true;
        }
        let forget = |error: &dyn std::fmt::Display| {
            tracing::debug!(pod = %key, %error, "binding volumes failed; retrying");
            self.assumed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
            self.queue.add_rate_limited(key.clone());
            false
        };
        for (claim_key, placement) in plan {
            let api: Api<PersistentVolumeClaim> =
                Api::namespaced(self.client.clone(), &claim_key.namespace);
            let Some(mut claim) = self
                .claims
                .get(&claim_key.namespace, &claim_key.name)
                .map(|c| c.as_ref().clone())
            else {
                return forget(&format!("claim {claim_key} is gone"));
            };
            if let Placement::Volume(name) = placement {
                let Some(volume) = self.volumes.get("", name) else {
                    return forget(&format!("volume {name} is gone"));
                };
                let reserved = crate::persistent_volume::reserved_for(&volume, &claim);
                if reserved != *volume {
                    let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
                    if let Err(e) = volumes
                        .replace(name, &PostParams::default(), &reserved)
                        .await
                    {
                        return forget(&e);
                    }
                }
                continue;
            }
            let annotations = claim.metadata.annotations.get_or_insert_with(BTreeMap::new);
            if annotations.get(SELECTED_NODE).map(String::as_str) == Some(target) {
                continue;
            }
            annotations.insert(SELECTED_NODE.into(), target.into());
            if let Err(e) = api
                .replace(&claim_key.name, &PostParams::default(), &claim)
                .await
            {
                return forget(&e);
            }
        }
        let bound = |scheduler: &Self| {
            plan.iter().all(|(k, _)| {
                scheduler
                    .claims
                    .get(&k.namespace, &k.name)
                    .is_some_and(|c| {
                        let named = c
                            .spec
                            .as_ref()
                            .and_then(|s| s.volume_name.as_deref())
                            .is_some_and(|v| !v.is_empty());
                        let completed = c.metadata.annotations.as_ref().is_some_and(|a| {
                            a.contains_key(crate::persistent_volume::BIND_COMPLETED)
                        });
                        named && completed
                    })
            })
        };
        let deadline = tokio::time::Instant::now() + VOLUME_BIND_TIMEOUT;
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        while !bound(self) {
            if tokio::time::Instant::now() > deadline {
                return forget(&"binding volumes: context deadline exceeded");
            }
            ticker.tick().await;
        }
        true
    }

    /// Binds the assumed pod `key` to `target`. A failed binding forgets the assumption and
    /// puts the pod back in the queue with backoff, as kube-scheduler's binding cycle does;
    /// a pod bound meanwhile, being deleted or gone is forgotten.
    async fn bind(&self, key: ObjectKey, uid: Option<String>, target: String) {
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": key.name, "namespace": key.namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": target},
        });
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        let bound: Result<Value, kube::Error> = api
            .create_subresource("binding", &key.name, &PostParams::default(), &binding)
            .await;
        match bound {
            Ok(_) => tracing::debug!(pod = %key, node = %target, "bound"),
            Err(e) => {
                self.assumed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
                // Already bound, being deleted, or gone: nothing more to do.
                if !is_conflict(&e) && !is_not_found(&e) {
                    tracing::debug!(pod = %key, error = %super::support::error_chain(&e), "binding failed; retrying");
                    self.queue.add_rate_limited(key);
                }
            }
        }
    }

    /// Sets `PodScheduled=False` (reason Unschedulable, the pod's generation observed) unless
    /// it already says so.
    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), Error> {
        // kube-scheduler 1.34 records the pod generation it saw (PodObservedGenerationTracking).
        let generation = pod.metadata.generation;
        if pod_condition(pod, "PodScheduled").is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(message)
                && c.observed_generation == generation
        }) {
            return Ok(());
        }
        tracing::debug!(pod = %informer::name_of(pod), message, "unschedulable");
        let mut updated = pod.clone();
        let conditions = updated
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        let previous = conditions
            .iter()
            .find(|c| c.type_ == "PodScheduled")
            .cloned();
        conditions.retain(|c| c.type_ != "PodScheduled");
        let transition = match previous {
            Some(p) if p.status == "False" => p.last_transition_time,
            _ => Some(now()),
        };
        conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some(message.to_string()),
            last_transition_time: transition,
            observed_generation: generation,
            ..PodCondition::default()
        });
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = pod.metadata.name.clone().unwrap_or_default();
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_error_counts_and_sorts_reasons_like_kube_scheduler() {
        let reasons = vec![
            "node(s) had untolerated taint {node.kubernetes.io/unreachable: }".to_string(),
            "node(s) didn't match Pod's node affinity/selector".to_string(),
            "node(s) had untolerated taint {node.kubernetes.io/unreachable: }".to_string(),
        ];
        assert_eq!(
            fit_error(3, &reasons),
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }
}
