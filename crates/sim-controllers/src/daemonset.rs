//! The DaemonSet controller, following upstream's `pkg/controller/daemon`: one pod per
//! node that the DaemonSet's template fits (node name, nodeSelector and required node
//! affinity, taints against the template's tolerations plus the daemon tolerations), each
//! pinned to its node through a `metadata.name` node affinity term that the scheduler
//! binds; pods on nodes that no longer fit deleted; ControllerRevisions named
//! `<set>-<template hash>` labelled `controller-revision-hash`; `RollingUpdate` with
//! `maxUnavailable` or `maxSurge`, and `OnDelete`; the status kubectl reads.
//!
//! # Guarantees
//! - Expectations, as upstream: after creating or deleting pods a DaemonSet is not managed
//!   again until the watch has shown them (its status is still written meanwhile).
//! - A failed daemon pod is deleted and replaced with a per-node back-off (1 s doubling up
//!   to 15 min, upstream's `failedPodsBackoff`), with the `FailedDaemonPod` Event.
//!
//! # Caveats
//! - The revision hash is the simulated Deployment controller's template hash, not
//!   upstream's (which hashes Go's in-memory dump of the template): names differ from a
//!   real cluster's, their form does not.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use super::deployment::template_hash;
use super::events::{EventType, Recorder};
use super::expectations::Expectations;
use super::history;
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::scheduler::matches_node_selection;
use super::support::{
    api_message, controller_of, controller_ref, is_available, is_conflict, is_deleting,
    is_not_found, is_ready, phase, selects, taints, untolerated,
};

/// Most pods created or deleted in one sync (the controller's `burstReplicas`).
const BURST_REPLICAS: usize = 250;
/// The label naming the revision a pod was made from (`DefaultDaemonSetUniqueLabelKey`).
pub(crate) const REVISION_LABEL: &str = "controller-revision-hash";
/// The label naming the template generation a pod was made from.
const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// The annotation the API server keeps the template generation in.
const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";
/// The first wait before a failed daemon pod is replaced, doubled each time.
const FAILED_POD_BACKOFF: Duration = Duration::from_secs(1);
/// The longest such wait.
const MAX_FAILED_POD_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// Errors of one DaemonSet sync (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// Some pods could not be created or deleted.
    #[error("{failed} pod {verb}s failed")]
    Pods {
        /// `create` or `delete`.
        verb: &'static str,
        /// How many failed.
        failed: usize,
        /// The first failure.
        #[source]
        first: kube::Error,
    },
    /// A revision's name was taken by one with other data: the collision count was raised
    /// and the sync is retried.
    #[error("the revision {name} exists with other data; the collision count was raised")]
    Collision {
        /// The revision's name.
        name: String,
    },
    /// `maxUnavailable` or `maxSurge` is neither a number nor a percentage.
    #[error("invalid value for {field}: {value:?}")]
    Bound {
        /// `maxUnavailable` or `maxSurge`.
        field: &'static str,
        /// What it holds.
        value: String,
    },
}

/// The back-off of failed pods per DaemonSet, generation and node
/// (`flowcontrol.Backoff`).
#[derive(Default)]
struct FailedPodBackoff(Mutex<HashMap<String, (Duration, Instant)>>);

impl FailedPodBackoff {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Duration, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long is left of the back-off of `key`, if it is in one.
    fn remaining(&self, key: &str) -> Option<Duration> {
        let (backoff, at) = *self.lock().get(key)?;
        let since = at.elapsed();
        (since < backoff).then(|| backoff - since)
    }

    /// Starts the next back-off of `key`: the first, or twice the last (a key unused for
    /// twice the longest back-off starts over).
    fn next(&self, key: &str) {
        let mut entries = self.lock();
        let now = Instant::now();
        let backoff = match entries.get(key) {
            Some((last, at)) if now.duration_since(*at) <= 2 * MAX_FAILED_POD_BACKOFF => {
                (*last * 2).min(MAX_FAILED_POD_BACKOFF)
            }
            _ => FAILED_POD_BACKOFF,
        };
        entries.insert(key.to_string(), (backoff, now));
    }
}

struct Controller {
    client: Client,
    recorder: Recorder,
    daemonsets: Cache<DaemonSet>,
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    revisions: Cache<ControllerRevision>,
    queue: Queue<ObjectKey>,
    expectations: Expectations,
    failed_backoff: FailedPodBackoff,
}

/// Subscribes the controller to the shared caches and starts its worker.
pub(crate) fn start(
    client: Client,
    daemonsets: &Cache<DaemonSet>,
    pods: &Cache<Pod>,
    nodes: &Cache<Node>,
    revisions: &Cache<ControllerRevision>,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        recorder: Recorder::new(client.clone(), "daemonset-controller"),
        client,
        daemonsets: daemonsets.clone(),
        pods: pods.clone(),
        nodes: nodes.clone(),
        revisions: revisions.clone(),
        queue: Queue::new(),
        expectations: Expectations::default(),
        failed_backoff: FailedPodBackoff::default(),
    });
    let c = controller.clone();
    daemonsets.subscribe(move |change| c.queue.add(ObjectKey::of(change.object().as_ref())));
    let c = controller.clone();
    pods.subscribe(move |change| c.pod_changed(change));
    let c = controller.clone();
    nodes.subscribe(move |change| c.node_changed(change));
    let c = controller.clone();
    revisions.subscribe(move |change| c.revision_changed(change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

fn labels(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

fn template(ds: &DaemonSet) -> PodTemplateSpec {
    ds.spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default()
}

fn min_ready_seconds(ds: &DaemonSet) -> i32 {
    ds.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

fn is_rolling_update(ds: &DaemonSet) -> bool {
    ds.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        .is_some_and(|t| t == "RollingUpdate")
}

/// The DaemonSet's template generation (`GetTemplateGeneration`), from the annotation the
/// API server writes.
fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata
        .annotations
        .as_ref()?
        .get(TEMPLATE_GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

/// Upstream's `IsPodUpdated`: the pod carries the current revision's hash or the current
/// template generation.
fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let pod_labels = labels(&pod.metadata);
    let template_matches = generation.is_some_and(|g| {
        pod_labels
            .get(TEMPLATE_GENERATION_LABEL)
            .map(String::as_str)
            == Some(&g.to_string())
    });
    let hash_matches =
        !hash.is_empty() && pod_labels.get(REVISION_LABEL).map(String::as_str) == Some(hash);
    hash_matches || template_matches
}

/// The node a daemon pod is for (`GetTargetNodeName`): its node name, else the value of
/// its `metadata.name` node affinity requirement.
fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(node.to_string());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|term| {
        term.match_fields.iter().flatten().find_map(|r| {
            let values = r.values.as_deref().unwrap_or_default();
            (r.key == "metadata.name" && r.operator == "In" && values.len() == 1)
                .then(|| values[0].clone())
        })
    })
}

fn has_node_name(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Upstream's `podByCreationTimestampAndPhase`: scheduled pods first, then the oldest,
/// then by name.
fn sort_pods(pods: &mut [Arc<Pod>]) {
    pods.sort_by(|a, b| {
        has_node_name(b)
            .cmp(&has_node_name(a))
            .then_with(|| {
                a.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
            })
            .then_with(|| name(&a.metadata).cmp(name(&b.metadata)))
    });
}

/// Adds `toleration` unless the spec has it already (`AddOrUpdateTolerationInPodSpec`).
fn add_toleration(tolerations: &mut Vec<Toleration>, key: &str, effect: &str) {
    let wanted = Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".into()),
        effect: Some(effect.to_string()),
        ..Toleration::default()
    };
    let same_key = |t: &Toleration| {
        t.key.as_deref() == Some(key)
            && t.effect.as_deref() == Some(effect)
            && t.operator.as_deref().unwrap_or("Equal") == "Exists"
    };
    match tolerations.iter_mut().find(|t| same_key(t)) {
        Some(existing) => *existing = wanted,
        None => tolerations.push(wanted),
    }
}

/// Upstream's `AddOrUpdateDaemonPodTolerations`.
fn add_daemon_tolerations(template: &mut PodTemplateSpec) {
    let spec = template.spec.get_or_insert_with(Default::default);
    let host_network = spec.host_network.unwrap_or(false);
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    add_toleration(tolerations, "node.kubernetes.io/not-ready", "NoExecute");
    add_toleration(tolerations, "node.kubernetes.io/unreachable", "NoExecute");
    add_toleration(
        tolerations,
        "node.kubernetes.io/disk-pressure",
        "NoSchedule",
    );
    add_toleration(
        tolerations,
        "node.kubernetes.io/memory-pressure",
        "NoSchedule",
    );
    add_toleration(tolerations, "node.kubernetes.io/pid-pressure", "NoSchedule");
    add_toleration(
        tolerations,
        "node.kubernetes.io/unschedulable",
        "NoSchedule",
    );
    if host_network {
        add_toleration(
            tolerations,
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        );
    }
}

/// Upstream's `NewPod`: the pod the DaemonSet would run on `node`, for the predicates.
fn pod_for_node(ds: &DaemonSet, node: &str) -> Pod {
    let mut template = template(ds);
    add_daemon_tolerations(&mut template);
    let mut spec = template.spec.unwrap_or_default();
    spec.node_name = Some(node.to_string());
    Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: Some(spec),
        status: None,
    }
}

/// Upstream's `NodeShouldRunDaemonPod`: whether a daemon pod should be started on the
/// node, and whether one already there should keep running.
fn should_run(node: &Node, ds: &DaemonSet) -> (bool, bool) {
    let node_name = name(&node.metadata);
    let template_node = template(ds)
        .spec
        .and_then(|s| s.node_name)
        .unwrap_or_default();
    if !template_node.is_empty() && template_node != node_name {
        return (false, false);
    }
    let pod = pod_for_node(ds, node_name);
    if !matches_node_selection(&pod, node) {
        return (false, false);
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    if untolerated(taints(node), tolerations, &["NoSchedule", "NoExecute"]).is_some() {
        let keeps = untolerated(taints(node), tolerations, &["NoExecute"]).is_none();
        return (false, keeps);
    }
    (true, true)
}

/// Upstream's `ReplaceDaemonSetPodNodeNameNodeAffinity`: the required node affinity becomes
/// the one term naming `node`.
fn pin_to_node(template: &mut PodTemplateSpec, node: &str) {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.to_string()]),
        }]),
        match_expressions: None,
    };
    let spec = template.spec.get_or_insert_with(Default::default);
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
}

/// Upstream's `CreatePodTemplate`: the template with the daemon tolerations and the
/// generation and revision labels.
fn pod_template(ds: &DaemonSet, hash: &str) -> PodTemplateSpec {
    let mut template = template(ds);
    add_daemon_tolerations(&mut template);
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    let pod_labels = meta.labels.get_or_insert_with(BTreeMap::new);
    if let Some(generation) = template_generation(ds) {
        pod_labels.insert(TEMPLATE_GENERATION_LABEL.into(), generation.to_string());
    }
    if !hash.is_empty() {
        pod_labels.insert(REVISION_LABEL.into(), hash.to_string());
    }
    template
}

/// Upstream's `GetScaledValueFromIntOrPercent`, rounding up.
fn scaled(value: Option<&IntOrString>, total: usize, field: &'static str) -> Result<usize, Error> {
    match value {
        None => Ok(0),
        Some(IntOrString::Int(n)) => Ok(usize::try_from(*n).unwrap_or(0)),
        Some(IntOrString::String(text)) => {
            let percent: usize = text
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| Error::Bound {
                    field,
                    value: text.clone(),
                })?;
            Ok((percent * total).div_ceil(100))
        }
    }
}

/// Upstream's `SurgeCount` and `UnavailableCount`.
fn surge_and_unavailable(ds: &DaemonSet, total: usize) -> Result<(usize, usize), Error> {
    if !is_rolling_update(ds) {
        return Ok((0, 0));
    }
    let Some(rolling) = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
    else {
        return Ok((0, 0));
    };
    Ok((
        scaled(rolling.max_surge.as_ref(), total, "maxSurge")?,
        scaled(rolling.max_unavailable.as_ref(), total, "maxUnavailable")?,
    ))
}

fn allows_surge(ds: &DaemonSet) -> bool {
    surge_and_unavailable(ds, 1).is_ok_and(|(surge, _)| surge > 0)
}

/// A node's updated pod and old pod, each if any.
type NewAndOld = (Option<Arc<Pod>>, Option<Arc<Pod>>);

/// Upstream's `findUpdatedPodsOnNode`: the node's one updated and one old pod (not
/// deleting), or `None` when it has more than one of either.
fn updated_and_old(pods: &[Arc<Pod>], hash: &str, generation: Option<i64>) -> Option<NewAndOld> {
    let mut new = None;
    let mut old = None;
    for pod in pods.iter().filter(|p| !is_deleting(&p.metadata)) {
        let slot = if is_updated(pod, hash, generation) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod.clone());
    }
    Some((new, old))
}

impl Controller {
    /// The DaemonSet a controller reference points at, if cached with that UID.
    fn resolve(&self, ns: &str, meta: &ObjectMeta) -> Option<Arc<DaemonSet>> {
        let r = controller_of(meta)?;
        if r.kind != "DaemonSet" || !r.api_version.starts_with("apps/") {
            return None;
        }
        let ds = self.daemonsets.get(ns, &r.name)?;
        (ds.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(ds)
    }

    /// DaemonSets in the pod's namespace whose selector matches it (for adoption).
    fn selecting(&self, pod: &Pod) -> Vec<ObjectKey> {
        let pod_labels = labels(&pod.metadata);
        self.daemonsets
            .list_in(namespace(&pod.metadata))
            .iter()
            .filter(|ds| selects(ds.spec.as_ref().map(|s| &s.selector), &pod_labels))
            .map(|ds| ObjectKey::of(ds.as_ref()))
            .collect()
    }

    fn pod_changed(&self, change: &Change<Pod>) {
        let pod = change.object();
        let ns = namespace(&pod.metadata);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        match change {
            Change::Applied { old, new } if is_deleting(&new.metadata) => {
                if let Some(ds) = self.resolve(ns, &new.metadata) {
                    let key = ObjectKey::of(ds.as_ref());
                    if old.is_none() {
                        self.expectations.creation_observed(&key);
                    }
                    self.expectations.deletion_observed(&key, &uid);
                    self.queue.add(key);
                }
            }
            Change::Applied { old: None, new } => match self.resolve(ns, &new.metadata) {
                Some(ds) => {
                    let key = ObjectKey::of(ds.as_ref());
                    self.expectations.creation_observed(&key);
                    self.queue.add(key);
                }
                None if controller_of(&new.metadata).is_none() => {
                    for key in self.selecting(new) {
                        self.queue.add(key);
                    }
                }
                None => {}
            },
            Change::Applied {
                old: Some(old),
                new,
            } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                let owner_changed = controller_of(&old.metadata) != controller_of(&new.metadata);
                if owner_changed && let Some(ds) = self.resolve(ns, &old.metadata) {
                    self.queue.add(ObjectKey::of(ds.as_ref()));
                }
                if controller_of(&new.metadata).is_some() {
                    if let Some(ds) = self.resolve(ns, &new.metadata) {
                        let key = ObjectKey::of(ds.as_ref());
                        let min_ready = min_ready_seconds(&ds);
                        if !is_ready(old) && is_ready(new) && min_ready > 0 {
                            let after = Duration::from_secs(u64::try_from(min_ready).unwrap_or(0))
                                + Duration::from_secs(1);
                            self.queue.add_after(key.clone(), after);
                        }
                        self.queue.add(key);
                    }
                    return;
                }
                if old.metadata.labels != new.metadata.labels || owner_changed {
                    for key in self.selecting(new) {
                        self.queue.add(key);
                    }
                }
            }
            Change::Deleted(old) => {
                if let Some(ds) = self.resolve(ns, &old.metadata) {
                    let key = ObjectKey::of(ds.as_ref());
                    self.expectations.deletion_observed(&key, &uid);
                    self.queue.add(key);
                }
            }
        }
    }

    /// Upstream's `syncNodeUpdate`: a new node, or one whose labels or taints changed,
    /// queues the DaemonSets whose decision for it changes.
    fn node_changed(&self, change: &Change<Node>) {
        let node = match change {
            Change::Applied {
                old: Some(old),
                new,
            } => {
                if old.metadata.labels == new.metadata.labels && taints(old) == taints(new) {
                    return;
                }
                new
            }
            Change::Applied { old: None, new } => new,
            Change::Deleted(_) => return,
        };
        let node_name = name(&node.metadata);
        for ds in self.daemonsets.list() {
            let (run, keep) = should_run(node, &ds);
            let uid = ds.metadata.uid.as_deref();
            let scheduled = self.pods.list_in(namespace(&ds.metadata)).iter().any(|p| {
                controller_of(&p.metadata).is_some_and(|r| Some(r.uid.as_str()) == uid)
                    && target_node(p).as_deref() == Some(node_name)
            });
            if (run && !scheduled) || (!keep && scheduled) {
                self.queue.add(ObjectKey::of(ds.as_ref()));
            }
        }
    }

    fn revision_changed(&self, change: &Change<ControllerRevision>) {
        let revision = change.object();
        let ns = namespace(&revision.metadata);
        match self.resolve(ns, &revision.metadata) {
            Some(ds) => self.queue.add(ObjectKey::of(ds.as_ref())),
            None if controller_of(&revision.metadata).is_none() => {
                let revision_labels = labels(&revision.metadata);
                for ds in self.daemonsets.list_in(ns) {
                    if selects(ds.spec.as_ref().map(|s| &s.selector), &revision_labels) {
                        self.queue.add(ObjectKey::of(ds.as_ref()));
                    }
                }
            }
            None => {}
        }
    }

    async fn run(self: Arc<Self>) {
        self.daemonsets.wait_ready().await;
        self.pods.wait_ready().await;
        self.nodes.wait_ready().await;
        self.revisions.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(daemonset = %key, error = %super::support::error_chain(&error), "daemonset sync failed; retrying");
            }
        }
    }

    fn event(&self, ds: &DaemonSet, type_: EventType, reason: &str, message: &str) {
        self.recorder
            .record("apps/v1", "DaemonSet", &ds.metadata, type_, reason, message);
    }

    /// Upstream's `syncDaemonSet`.
    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(ds) = self.daemonsets.get(&key.namespace, &key.name) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let mut nodes = self.nodes.list();
        nodes.sort_by(|a, b| name(&a.metadata).cmp(name(&b.metadata)));
        let selector = ds.spec.as_ref().map(|s| &s.selector);
        if selector.is_none_or(|s| {
            s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
        }) {
            self.event(
                &ds,
                EventType::Warning,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
            );
            return Ok(None);
        }
        if is_deleting(&ds.metadata) {
            return Ok(None);
        }
        let (hash, old) = self.construct_history(&ds).await?;
        if !self.expectations.satisfied(key) {
            return self.update_status(&ds, &nodes, &hash, false).await;
        }
        let updated = self.update(key, &ds, &nodes, &hash, old).await;
        let status = self.update_status(&ds, &nodes, &hash, true).await;
        let requeue = updated?;
        let status_requeue = status?;
        Ok(match (requeue, status_requeue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Upstream's `updateDaemonSet`: manage, roll, clean the history.
    async fn update(
        &self,
        key: &ObjectKey,
        ds: &DaemonSet,
        nodes: &[Arc<Node>],
        hash: &str,
        old: Vec<Arc<ControllerRevision>>,
    ) -> Result<Option<Duration>, Error> {
        let requeue = self.manage(key, ds, nodes, hash).await?;
        if self.expectations.satisfied(key) && is_rolling_update(ds) {
            self.rolling_update(key, ds, nodes, hash).await?;
        }
        self.cleanup_history(ds, old).await?;
        Ok(requeue)
    }

    /// Upstream's `getDaemonPods` with `ClaimPods`: the pods it controls that it still
    /// selects, and orphans it selects, adopted; pods it controls but no longer selects
    /// are released.
    async fn claim_pods(&self, ds: &DaemonSet) -> Result<Vec<Arc<Pod>>, Error> {
        let candidates = self.pods.list_in(namespace(&ds.metadata));
        self.claim(ds, candidates, |pod| is_deleting(&pod.metadata))
            .await
    }

    /// Upstream's `ClaimObject`, for pods and revisions alike: what `ds` controls and
    /// selects kept, orphans it selects adopted (after a live read shows it is not going;
    /// never an orphan for which `skip_orphan` holds), what it controls and no longer
    /// selects released.
    async fn claim<K>(
        &self,
        ds: &DaemonSet,
        candidates: Vec<Arc<K>>,
        skip_orphan: impl Fn(&K) -> bool,
    ) -> Result<Vec<Arc<K>>, Error>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let ds_uid = ds.metadata.uid.clone().unwrap_or_default();
        let selector = ds.spec.as_ref().map(|s| &s.selector);
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        let mut owned = Vec::new();
        let mut can_adopt: Option<bool> = None;
        for object in candidates {
            let meta = object.meta();
            let matches = selects(selector, &labels(meta));
            let patch = match controller_of(meta) {
                Some(r) if r.uid == ds_uid && matches => {
                    owned.push(object);
                    continue;
                }
                Some(r) if r.uid == ds_uid && !is_deleting(&ds.metadata) => json!({"metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": ds_uid}],
                    "uid": meta.uid,
                }}),
                None if matches && !is_deleting(&ds.metadata) && !skip_orphan(&object) => {
                    if can_adopt.is_none() {
                        can_adopt = Some(self.is_current(ds).await?);
                    }
                    if can_adopt != Some(true) {
                        continue;
                    }
                    json!({"metadata": {
                        "ownerReferences": [controller_ref("apps/v1", "DaemonSet", &ds.metadata)],
                        "uid": meta.uid,
                    }})
                }
                _ => continue,
            };
            let adopting = controller_of(meta).is_none();
            match api
                .patch(
                    name(meta),
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await
            {
                Ok(adopted) if adopting => owned.push(Arc::new(adopted)),
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(owned)
    }

    /// A live read: the DaemonSet is still there with this UID and not being deleted
    /// (`RecheckDeletionTimestamp`), so it may adopt.
    async fn is_current(&self, ds: &DaemonSet) -> Result<bool, Error> {
        let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        let fresh = api.get_opt(name(&ds.metadata)).await?;
        Ok(fresh.is_some_and(|f| f.metadata.uid == ds.metadata.uid && !is_deleting(&f.metadata)))
    }

    /// Upstream's `getNodesToDaemonPods`: the claimed pods by the node they are for
    /// (terminal pods being deleted left out unless `with_deleted_terminal`).
    async fn pods_by_node(
        &self,
        ds: &DaemonSet,
        with_deleted_terminal: bool,
    ) -> Result<BTreeMap<String, Vec<Arc<Pod>>>, Error> {
        let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
        for pod in self.claim_pods(ds).await? {
            let terminal = matches!(phase(&pod), "Succeeded" | "Failed");
            if !with_deleted_terminal && terminal && is_deleting(&pod.metadata) {
                continue;
            }
            if let Some(node) = target_node(&pod) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        Ok(by_node)
    }

    /// Upstream's `podsShouldBeOnNode`: whether the node needs a daemon pod, and which of
    /// its pods go, added to `plan` (with the delay of a failed pod's back-off, if one
    /// holds it).
    fn plan_node(
        &self,
        node: &Node,
        pods_by_node: &BTreeMap<String, Vec<Arc<Pod>>>,
        ds: &DaemonSet,
        hash: &str,
        plan: &mut Plan,
    ) {
        let node_name = name(&node.metadata);
        let (run, keep) = should_run(node, ds);
        let pods = pods_by_node.get(node_name);
        match pods {
            None if run => plan.create.push(node_name.to_string()),
            Some(pods) if keep => {
                let mut running = Vec::new();
                for pod in pods.iter().filter(|p| !is_deleting(&p.metadata)) {
                    match phase(pod) {
                        "Failed" => {
                            let generation = ds
                                .status
                                .as_ref()
                                .and_then(|s| s.observed_generation)
                                .unwrap_or(0);
                            let backoff_key = format!(
                                "{}/{generation}/{node_name}",
                                ds.metadata.uid.as_deref().unwrap_or_default()
                            );
                            if let Some(left) = self.failed_backoff.remaining(&backoff_key) {
                                plan.requeue = Some(plan.requeue.map_or(left, |r| r.min(left)));
                                continue;
                            }
                            self.failed_backoff.next(&backoff_key);
                            self.event(
                                ds,
                                EventType::Warning,
                                "FailedDaemonPod",
                                &format!(
                                    "Found failed daemon pod {}/{} on node {node_name}, will try to kill it",
                                    namespace(&pod.metadata),
                                    name(&pod.metadata)
                                ),
                            );
                            plan.delete.push(pod.clone());
                        }
                        "Succeeded" => {
                            self.event(
                                ds,
                                EventType::Normal,
                                "SucceededDaemonPod",
                                &format!(
                                    "Found succeeded daemon pod {}/{} on node {node_name}, will try to delete it",
                                    namespace(&pod.metadata),
                                    name(&pod.metadata)
                                ),
                            );
                            plan.delete.push(pod.clone());
                        }
                        _ => running.push(pod.clone()),
                    }
                }
                sort_pods(&mut running);
                if !allows_surge(ds) {
                    // Only the oldest keeps running.
                    plan.delete.extend(running.into_iter().skip(1));
                    return;
                }
                if running.len() <= 1 {
                    if running.is_empty() && run {
                        plan.create.push(node_name.to_string());
                    }
                    return;
                }
                // With surge: the oldest updated and the oldest old pod stay, until the
                // updated one is available (or the old one is not ready).
                let mut oldest_new: Option<Arc<Pod>> = None;
                let mut oldest_old: Option<Arc<Pod>> = None;
                for pod in running {
                    let slot = if labels(&pod.metadata)
                        .get(REVISION_LABEL)
                        .map(String::as_str)
                        == Some(hash)
                    {
                        &mut oldest_new
                    } else {
                        &mut oldest_old
                    };
                    if slot.is_none() {
                        *slot = Some(pod);
                    } else {
                        plan.delete.push(pod);
                    }
                }
                if let (Some(new), Some(old)) = (oldest_new, oldest_old)
                    && (!is_ready(&old)
                        || is_available(&new, min_ready_seconds(ds), &Timestamp::now()))
                {
                    plan.delete.push(old);
                }
            }
            Some(pods) if !keep => {
                plan.delete
                    .extend(pods.iter().filter(|p| !is_deleting(&p.metadata)).cloned());
            }
            _ => {}
        }
    }

    /// Upstream's `manage`.
    async fn manage(
        &self,
        key: &ObjectKey,
        ds: &DaemonSet,
        nodes: &[Arc<Node>],
        hash: &str,
    ) -> Result<Option<Duration>, Error> {
        let pods_by_node = self.pods_by_node(ds, false).await?;
        let mut plan = Plan::default();
        for node in nodes {
            self.plan_node(node, &pods_by_node, ds, hash, &mut plan);
        }
        // Unscheduled pods for nodes that are gone (the pod garbage collector leaves them).
        let known: HashSet<&str> = nodes.iter().map(|n| name(&n.metadata)).collect();
        for (node, pods) in &pods_by_node {
            if !known.contains(node.as_str()) {
                plan.delete
                    .extend(pods.iter().filter(|p| !has_node_name(p)).cloned());
            }
        }
        self.sync_nodes(key, ds, &plan.delete, &plan.create, hash)
            .await?;
        Ok(plan.requeue)
    }

    /// Upstream's `syncNodes`: creates a pod for each node (slow start: batches of 1, 2,
    /// 4, …, stopping after a batch with a failure) and deletes the pods.
    async fn sync_nodes(
        &self,
        key: &ObjectKey,
        ds: &DaemonSet,
        delete: &[Arc<Pod>],
        create: &[String],
        hash: &str,
    ) -> Result<(), Error> {
        let create = &create[..create.len().min(BURST_REPLICAS)];
        let delete = &delete[..delete.len().min(BURST_REPLICAS)];
        let deleted_uids: HashSet<String> = delete
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        self.expectations.expect(
            key,
            i64::try_from(create.len()).unwrap_or(i64::MAX),
            deleted_uids,
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        let template = pod_template(ds, hash);
        let params = PostParams::default();
        let mut failure: Option<(usize, kube::Error)> = None;
        let mut created = 0;
        let mut batch = 1;
        while created < create.len() {
            let size = batch.min(create.len() - created);
            let pods: Vec<Pod> = create[created..created + size]
                .iter()
                .map(|node| self.new_pod(ds, &template, node))
                .collect();
            let results = join_all(pods.iter().map(|p| api.create(&params, p))).await;
            let mut failed = 0;
            for result in results {
                match result {
                    Ok(pod) => self.event(
                        ds,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {}", name(&pod.metadata)),
                    ),
                    Err(e) => {
                        self.expectations.creation_observed(key);
                        if super::support::code(&e) == Some(403)
                            && api_message(&e).contains("because it is being terminated")
                        {
                            continue;
                        }
                        failed += 1;
                        self.event(
                            ds,
                            EventType::Warning,
                            "FailedCreate",
                            &format!("Error creating: {}", api_message(&e)),
                        );
                        match failure.as_mut() {
                            Some((n, _)) => *n += 1,
                            None => failure = Some((1, e)),
                        }
                    }
                }
            }
            created += size;
            if failed > 0 {
                break;
            }
            batch *= 2;
        }
        for _ in created..create.len() {
            self.expectations.creation_observed(key);
        }
        let results = join_all(delete.iter().map(|pod| {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let api = api.clone();
            async move { api.delete(name(&pod.metadata), &params).await }
        }))
        .await;
        let mut delete_failure: Option<(usize, kube::Error)> = None;
        for (pod, result) in delete.iter().zip(results) {
            match result {
                Ok(_) => self.event(
                    ds,
                    EventType::Normal,
                    "SuccessfulDelete",
                    &format!("Deleted pod: {}", name(&pod.metadata)),
                ),
                Err(e) => {
                    self.expectations
                        .deletion_observed(key, pod.metadata.uid.as_deref().unwrap_or_default());
                    if !is_not_found(&e) {
                        self.event(
                            ds,
                            EventType::Warning,
                            "FailedDelete",
                            &format!("Error deleting: {}", api_message(&e)),
                        );
                        match delete_failure.as_mut() {
                            Some((n, _)) => *n += 1,
                            None => delete_failure = Some((1, e)),
                        }
                    }
                }
            }
        }
        if let Some((failed, first)) = failure {
            return Err(Error::Pods {
                verb: "create",
                failed,
                first,
            });
        }
        if let Some((failed, first)) = delete_failure {
            return Err(Error::Pods {
                verb: "delete",
                failed,
                first,
            });
        }
        Ok(())
    }

    /// A daemon pod for `node` (upstream's `GetPodFromTemplate` with the node affinity).
    fn new_pod(&self, ds: &DaemonSet, template: &PodTemplateSpec, node: &str) -> Pod {
        let mut template = template.clone();
        pin_to_node(&mut template, node);
        let meta = template.metadata.unwrap_or_default();
        Pod {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", name(&ds.metadata))),
                namespace: ds.metadata.namespace.clone(),
                labels: meta.labels,
                annotations: meta.annotations,
                finalizers: meta.finalizers,
                owner_references: Some(vec![controller_ref("apps/v1", "DaemonSet", &ds.metadata)]),
                ..ObjectMeta::default()
            },
            spec: template.spec,
            status: None,
        }
    }

    /// Upstream's `rollingUpdate`: old pods replaced within `maxUnavailable`, or new pods
    /// started beside the old within `maxSurge`.
    async fn rolling_update(
        &self,
        key: &ObjectKey,
        ds: &DaemonSet,
        nodes: &[Arc<Node>],
        hash: &str,
    ) -> Result<(), Error> {
        let mut pods_by_node = self.pods_by_node(ds, false).await?;
        let mut desired = 0;
        for node in nodes {
            if should_run(node, ds).0 {
                desired += 1;
                pods_by_node
                    .entry(name(&node.metadata).to_string())
                    .or_default();
            }
        }
        let (max_surge, mut max_unavailable) = surge_and_unavailable(ds, desired)?;
        if desired > 0 && max_surge == 0 && max_unavailable == 0 {
            max_unavailable = 1;
        }
        let generation = template_generation(ds);
        let min_ready = min_ready_seconds(ds);
        let now = Timestamp::now();
        let available = |pod: &Pod| is_available(pod, min_ready, &now);
        if max_surge == 0 {
            let mut unavailable = 0;
            let mut replace_now = Vec::new();
            let mut candidates = Vec::new();
            for pods in pods_by_node.values() {
                let Some((new, old)) = updated_and_old(pods, hash, generation) else {
                    unavailable += 1;
                    continue;
                };
                match (new, old) {
                    (None, None) | (Some(_), Some(_)) => unavailable += 1,
                    (Some(new), None) => {
                        if !available(&new) {
                            unavailable += 1;
                        }
                    }
                    (None, Some(old)) => {
                        if !available(&old) {
                            replace_now.push(old);
                            unavailable += 1;
                        } else if unavailable < max_unavailable {
                            candidates.push(old);
                        }
                    }
                }
            }
            let remaining = max_unavailable
                .saturating_sub(unavailable)
                .min(candidates.len());
            replace_now.extend(candidates.into_iter().take(remaining));
            return self.sync_nodes(key, ds, &replace_now, &[], hash).await;
        }
        let mut old_to_delete = Vec::new();
        let mut should_not_run = Vec::new();
        let mut candidate_nodes = Vec::new();
        let mut allowed_nodes = Vec::new();
        let mut surging = 0;
        let mut available_count: usize = 0;
        for (node_name, pods) in &pods_by_node {
            let Some((new, old)) = updated_and_old(pods, hash, generation) else {
                surging += 1;
                continue;
            };
            if let Some(pod) = old.as_ref().or(new.as_ref())
                && available(pod)
            {
                available_count += 1;
            }
            match (new, old) {
                (_, None) => {}
                (None, Some(old)) => {
                    let runs = nodes
                        .iter()
                        .find(|n| name(&n.metadata) == node_name)
                        .is_some_and(|n| should_run(n, ds).0);
                    if !available(&old) {
                        if runs {
                            allowed_nodes.push(node_name.clone());
                        } else {
                            old_to_delete.push(old);
                        }
                    } else if !runs {
                        should_not_run.push(old);
                    } else if surging < max_surge {
                        candidate_nodes.push(node_name.clone());
                    }
                }
                (Some(new), Some(old)) => {
                    if available(&new) {
                        old_to_delete.push(old);
                    } else {
                        surging += 1;
                    }
                }
            }
        }
        let deletable = available_count
            .saturating_sub(desired)
            .min(should_not_run.len());
        old_to_delete.extend(should_not_run.into_iter().take(deletable));
        let remaining = max_surge.saturating_sub(surging).min(candidate_nodes.len());
        allowed_nodes.extend(candidate_nodes.into_iter().take(remaining));
        self.sync_nodes(key, ds, &old_to_delete, &allowed_nodes, hash)
            .await
    }

    /// Upstream's `constructHistory`: the current revision's hash (the revision made, or
    /// renumbered to be the newest) and the other revisions.
    async fn construct_history(
        &self,
        ds: &DaemonSet,
    ) -> Result<(String, Vec<Arc<ControllerRevision>>), Error> {
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        let data = history::go_json(&history::template_patch(&template(ds)));
        let mut current = Vec::new();
        let mut old = Vec::new();
        for revision in self.claim_revisions(ds).await? {
            let revision = if labels(&revision.metadata).contains_key(REVISION_LABEL) {
                revision
            } else {
                let mut labelled = (*revision).clone();
                labelled
                    .metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(REVISION_LABEL.into(), name(&revision.metadata).to_string());
                Arc::new(
                    api.replace(name(&revision.metadata), &PostParams::default(), &labelled)
                        .await?,
                )
            };
            if history::data_of(&revision).as_deref() == Some(data.as_str()) {
                current.push(revision);
            } else {
                old.push(revision);
            }
        }
        let next = old.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
        let current = if current.is_empty() {
            self.snapshot(ds, &data, next).await?
        } else {
            let keep = self.dedup_current(ds, current).await?;
            if keep.revision < next {
                let mut renumbered = (*keep).clone();
                renumbered.revision = next;
                api.replace(name(&keep.metadata), &PostParams::default(), &renumbered)
                    .await?;
            }
            keep
        };
        let hash = labels(&current.metadata)
            .get(REVISION_LABEL)
            .cloned()
            .unwrap_or_default();
        Ok((hash, old))
    }

    /// Upstream's `controlledHistories` with `ClaimControllerRevisions`.
    async fn claim_revisions(&self, ds: &DaemonSet) -> Result<Vec<Arc<ControllerRevision>>, Error> {
        let candidates = self.revisions.list_in(namespace(&ds.metadata));
        self.claim(ds, candidates, |_| false).await
    }

    /// Upstream's `snapshot`: a new revision of the template, numbered `revision`; a name
    /// taken by other data raises the collision count.
    async fn snapshot(
        &self,
        ds: &DaemonSet,
        data: &str,
        revision: i64,
    ) -> Result<Arc<ControllerRevision>, Error> {
        let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
        let hash = template_hash(&template(ds), collision_count);
        let revision_name = history::revision_name(name(&ds.metadata), &hash);
        let mut revision_labels = labels(&template(ds).metadata.unwrap_or_default());
        revision_labels.insert(REVISION_LABEL.into(), hash);
        let new = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(revision_name.clone()),
                namespace: ds.metadata.namespace.clone(),
                labels: Some(revision_labels),
                annotations: ds.metadata.annotations.clone(),
                owner_references: Some(vec![controller_ref("apps/v1", "DaemonSet", &ds.metadata)]),
                ..ObjectMeta::default()
            },
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                serde_json::from_str(data).unwrap_or_default(),
            )),
            revision,
        };
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        match api.create(&PostParams::default(), &new).await {
            Ok(created) => Ok(Arc::new(created)),
            Err(e) if super::support::code(&e) == Some(409) => {
                let existing = api.get(&revision_name).await?;
                if history::data_of(&existing).as_deref() == Some(data) {
                    return Ok(Arc::new(existing));
                }
                let sets: Api<DaemonSet> =
                    Api::namespaced(self.client.clone(), namespace(&ds.metadata));
                let mut fresh = sets.get(name(&ds.metadata)).await?;
                let fresh_count = fresh.status.as_ref().and_then(|s| s.collision_count);
                if fresh_count == collision_count {
                    let status = fresh.status.get_or_insert_with(DaemonSetStatus::default);
                    status.collision_count = Some(collision_count.unwrap_or(0) + 1);
                    sets.replace_status(name(&ds.metadata), &PostParams::default(), &fresh)
                        .await?;
                }
                Err(Error::Collision {
                    name: revision_name,
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Upstream's `dedupCurHistories`: of several revisions holding the template, the
    /// newest stays; pods of the others are relabelled and the others deleted.
    async fn dedup_current(
        &self,
        ds: &DaemonSet,
        mut current: Vec<Arc<ControllerRevision>>,
    ) -> Result<Arc<ControllerRevision>, Error> {
        if current.len() == 1 {
            return Ok(current.remove(0));
        }
        let mut keep = current[0].clone();
        for revision in &current {
            if revision.revision >= keep.revision {
                keep = revision.clone();
            }
        }
        let keep_hash = labels(&keep.metadata)
            .get(REVISION_LABEL)
            .cloned()
            .unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        for pod in self.claim_pods(ds).await? {
            if labels(&pod.metadata).get(REVISION_LABEL) != Some(&keep_hash) {
                let patch = json!({"metadata": {"labels": {REVISION_LABEL: keep_hash}}});
                pods.patch(
                    name(&pod.metadata),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await?;
            }
        }
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        for revision in &current {
            if name(&revision.metadata) != name(&keep.metadata) {
                api.delete(name(&revision.metadata), &DeleteParams::default())
                    .await?;
            }
        }
        Ok(keep)
    }

    /// Upstream's `cleanupHistory`: old revisions beyond `revisionHistoryLimit`, oldest
    /// first, deleted unless a pod still carries their hash.
    async fn cleanup_history(
        &self,
        ds: &DaemonSet,
        mut old: Vec<Arc<ControllerRevision>>,
    ) -> Result<(), Error> {
        let limit = ds
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10);
        let mut to_kill = old
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(0));
        if to_kill == 0 {
            return Ok(());
        }
        let live: HashSet<String> = self
            .pods_by_node(ds, true)
            .await?
            .values()
            .flatten()
            .filter_map(|p| labels(&p.metadata).get(REVISION_LABEL).cloned())
            .collect();
        old.sort_by_key(|r| r.revision);
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        for revision in old {
            if to_kill == 0 {
                break;
            }
            if labels(&revision.metadata)
                .get(REVISION_LABEL)
                .is_some_and(|h| live.contains(h))
            {
                continue;
            }
            api.delete(name(&revision.metadata), &DeleteParams::default())
                .await?;
            to_kill -= 1;
        }
        Ok(())
    }

    /// Upstream's `updateDaemonSetStatus`: counts per node, written when they changed (or
    /// the generation was not yet observed). Returns when to look again for pods that
    /// become available after `minReadySeconds`.
    async fn update_status(
        &self,
        ds: &DaemonSet,
        nodes: &[Arc<Node>],
        hash: &str,
        observe_generation: bool,
    ) -> Result<Option<Duration>, Error> {
        let mut by_node = self.pods_by_node(ds, false).await?;
        let generation = template_generation(ds);
        let min_ready = min_ready_seconds(ds);
        let now = Timestamp::now();
        let mut counts = Counts::default();
        for node in nodes {
            let (run, _) = should_run(node, ds);
            let pods = by_node
                .get_mut(name(&node.metadata))
                .filter(|p| !p.is_empty());
            match pods {
                None if run => counts.desired += 1,
                None => {}
                Some(_) if !run => counts.misscheduled += 1,
                Some(pods) => {
                    counts.desired += 1;
                    counts.current += 1;
                    sort_pods(pods);
                    let pod = &pods[0];
                    if is_ready(pod) {
                        counts.ready += 1;
                        if is_available(pod, min_ready, &now) {
                            counts.available += 1;
                        }
                    }
                    if is_updated(pod, hash, generation) {
                        counts.updated += 1;
                    }
                }
            }
        }
        let requeue = (min_ready > 0 && counts.ready != counts.available)
            .then(|| Duration::from_secs(u64::try_from(min_ready).unwrap_or(0)));
        let status = ds.status.clone().unwrap_or_default();
        let unavailable = counts.desired - counts.available;
        let unchanged = status.desired_number_scheduled == counts.desired
            && status.current_number_scheduled == counts.current
            && status.number_misscheduled == counts.misscheduled
            && status.number_ready == counts.ready
            && status.updated_number_scheduled.unwrap_or(0) == counts.updated
            && status.number_available.unwrap_or(0) == counts.available
            && status.number_unavailable.unwrap_or(0) == unavailable
            && status.observed_generation.unwrap_or(0) >= ds.metadata.generation.unwrap_or(0);
        if unchanged {
            return Ok(requeue);
        }
        let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), namespace(&ds.metadata));
        let mut to_update = ds.clone();
        for attempt in 0..2 {
            let generation = to_update.metadata.generation;
            let status = to_update
                .status
                .get_or_insert_with(DaemonSetStatus::default);
            if observe_generation {
                status.observed_generation = generation;
            }
            status.desired_number_scheduled = counts.desired;
            status.current_number_scheduled = counts.current;
            status.number_misscheduled = counts.misscheduled;
            status.number_ready = counts.ready;
            // Go leaves these out when zero (`omitempty`).
            let nonzero = |n: i32| (n != 0).then_some(n);
            status.updated_number_scheduled = nonzero(counts.updated);
            status.number_available = nonzero(counts.available);
            status.number_unavailable = nonzero(unavailable);
            match api
                .replace_status(name(&ds.metadata), &PostParams::default(), &to_update)
                .await
            {
                Ok(_) => return Ok(requeue),
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) if attempt == 0 && is_conflict(&e) => {
                    to_update = api.get(name(&ds.metadata)).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(requeue)
    }
}

/// What one sync decided for the nodes: nodes needing a pod, pods to delete, and when to
/// look again (a failed pod in its back-off).
#[derive(Default)]
struct Plan {
    create: Vec<String>,
    delete: Vec<Arc<Pod>>,
    requeue: Option<Duration>,
}

/// The counts of a DaemonSet's status.
#[derive(Default)]
struct Counts {
    desired: i32,
    current: i32,
    misscheduled: i32,
    ready: i32,
    updated: i32,
    available: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).unwrap()
    }

    fn daemon_set(template_spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "ns", "uid": "u1",
                "annotations": {TEMPLATE_GENERATION_ANNOTATION: "2"}},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": template_spec}}
        }))
        .unwrap()
    }

    #[test]
    fn a_node_tainted_no_schedule_gets_no_new_pod_but_keeps_a_running_one() {
        let ds = daemon_set(json!({"containers": [{"name": "c", "image": "i"}]}));
        let tainted = node(json!({"metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}}));
        assert_eq!(should_run(&tainted, &ds), (false, true));
        let evicting = node(json!({"metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "dedicated", "effect": "NoExecute"}]}}));
        assert_eq!(should_run(&evicting, &ds), (false, false));
        let plain = node(json!({"metadata": {"name": "n1"}}));
        assert_eq!(should_run(&plain, &ds), (true, true));
    }

    #[test]
    fn daemon_pods_tolerate_unschedulable_and_not_ready_nodes() {
        let ds = daemon_set(json!({"containers": [{"name": "c", "image": "i"}]}));
        let cordoned = node(json!({"metadata": {"name": "n1"}, "spec": {"taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}}));
        assert_eq!(should_run(&cordoned, &ds), (true, true));
    }

    #[test]
    fn a_node_selector_the_node_lacks_keeps_the_pod_off_it() {
        let ds = daemon_set(json!({"nodeSelector": {"disk": "ssd"},
            "containers": [{"name": "c", "image": "i"}]}));
        let hdd = node(json!({"metadata": {"name": "n1", "labels": {"disk": "hdd"}}}));
        let ssd = node(json!({"metadata": {"name": "n2", "labels": {"disk": "ssd"}}}));
        assert_eq!(should_run(&hdd, &ds), (false, false));
        assert_eq!(should_run(&ssd, &ds), (true, true));
    }

    #[test]
    fn a_pod_is_pinned_to_its_node_by_a_metadata_name_term_and_labelled_with_its_revision() {
        let ds = daemon_set(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "containers": [{"name": "c", "image": "i"}]}));
        let mut template = pod_template(&ds, "abc");
        pin_to_node(&mut template, "n2");
        let pod = Pod {
            metadata: template.metadata.clone().unwrap(),
            spec: template.spec.clone(),
            status: None,
        };
        assert_eq!(target_node(&pod).as_deref(), Some("n2"));
        let pod_labels = labels(&pod.metadata);
        assert_eq!(pod_labels[REVISION_LABEL], "abc");
        assert_eq!(pod_labels[TEMPLATE_GENERATION_LABEL], "2");
        assert!(is_updated(&pod, "abc", None));
        assert!(is_updated(&pod, "other", Some(2)));
        assert!(!is_updated(&pod, "other", Some(3)));
        assert_eq!(tolerations_of(&pod).len(), 6);
    }

    fn tolerations_of(pod: &Pod) -> &[Toleration] {
        pod.spec.as_ref().unwrap().tolerations.as_deref().unwrap()
    }

    #[test]
    fn percentages_of_surge_and_unavailability_round_up() {
        let mut ds = daemon_set(json!({"containers": [{"name": "c", "image": "i"}]}));
        ds.spec.as_mut().unwrap().update_strategy = serde_json::from_value(json!({
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}))
        .unwrap();
        assert_eq!(surge_and_unavailable(&ds, 3).unwrap(), (0, 1));
        assert_eq!(surge_and_unavailable(&ds, 25).unwrap(), (0, 3));
        assert!(!allows_surge(&ds));
    }

    #[test]
    fn a_failed_pods_backoff_doubles_from_one_second() {
        let backoff = FailedPodBackoff::default();
        assert!(backoff.remaining("k").is_none());
        backoff.next("k");
        assert!(
            backoff
                .remaining("k")
                .is_some_and(|d| d <= FAILED_POD_BACKOFF)
        );
        backoff.next("k");
        assert!(
            backoff
                .remaining("k")
                .is_some_and(|d| d > FAILED_POD_BACKOFF)
        );
    }
}
