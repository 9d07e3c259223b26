//! The StatefulSet controller, ported from upstream's `pkg/controller/statefulset`: pods
//! named `<set>-<ordinal>` (from `spec.ordinals.start`) with a stable identity (the
//! `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index` labels, hostname
//! and subdomain), one ControllerRevision per template (see [`super::history`]) and the
//! `controller-revision-hash` label on every pod, claims `<template>-<set>-<ordinal>` made
//! from the volume claim templates before their pod, and the owner references the
//! `persistentVolumeClaimRetentionPolicy` asks for.
//!
//! # Guarantees
//! - `OrderedReady` creates one pod at a time in ordinal order, waiting for each to be
//!   Running, Ready and available, and removes from the highest ordinal down, one at a
//!   time; `Parallel` creates and deletes in slow-start batches without waiting.
//! - `RollingUpdate` deletes, from the highest ordinal down to the `partition`, one pod not
//!   of the update revision at a time, once every pod is available; `OnDelete` leaves that
//!   to the user. Revisions no pod uses beyond `revisionHistoryLimit` are deleted.
//! - Failed and succeeded pods are deleted, and made again on a later sync.
//! - A set is not synced again while a pod it created or deleted has not shown in the
//!   pods' cache (as upstream's ReplicaSet controller waits with its expectations): a
//!   sync on a stale cache would delete a pod twice or make it again. Upstream's
//!   StatefulSet controller has that race; its watch events usually win it.
//! - The status (`replicas`, `readyReplicas`, `currentReplicas`, `updatedReplicas`,
//!   `availableReplicas`, the revisions, `collisionCount`, `observedGeneration`) is written
//!   whole, only when it changed, as upstream writes it; the Events are upstream's
//!   (`SuccessfulCreate` "create Pod web-0 in StatefulSet web successful", …).
//!
//! # Caveats
//! - `maxUnavailable` is not honoured: its feature gate (`MaxUnavailableStatefulSet`) is
//!   off by default in 1.34.
//! - The revisions' data is the template as this crate's API types know it: fields of the
//!   pod spec newer than they are would be left out of the data and its hash.
//! - With several volume claim templates the pod's claim volumes come in template order,
//!   where upstream's order follows a Go map's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::events::{EventType, Recorder};
use super::expectations::EXPECTATIONS_TIMEOUT;
use super::history;
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{
    controller_of, controller_ref, is_available, is_conflict, is_deleting, is_not_found, is_ready,
    selects, without_nulls,
};

/// The label naming the pod (upstream's `StatefulSetPodNameLabel`).
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label holding the pod's ordinal (upstream's `PodIndexLabel`).
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The label holding the name of the pod's revision (`StatefulSetRevisionLabel`).
const REVISION_LABEL: &str = "controller-revision-hash";
/// Largest slow-start batch (upstream's `MaxBatchSize`).
const MAX_BATCH_SIZE: usize = 500;
/// How often an update is tried again after a conflict (client-go's `DefaultBackoff`).
const CONFLICT_ATTEMPTS: usize = 4;
/// The wait before the `attempt`th retry after a conflict (client-go's `DefaultBackoff`:
/// 10 ms, growing five-fold).
fn conflict_backoff(attempt: usize) -> Duration {
    let factor = 5u32.saturating_pow(u32::try_from(attempt.saturating_sub(1)).unwrap_or(u32::MAX));
    Duration::from_millis(10).saturating_mul(factor)
}

/// How often a status write is tried again after a conflict (client-go's `DefaultRetry`).
const STATUS_ATTEMPTS: usize = 5;
/// The retention policy keeping claims.
const RETAIN: &str = "Retain";
/// The retention policy deleting claims.
const DELETE: &str = "Delete";

/// Errors of one StatefulSet sync (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// The StatefulSet changed identity or is going away, so nothing may be adopted.
    #[error("cannot adopt for {set}: it is gone or being deleted")]
    CannotAdopt {
        /// `namespace/name` of the StatefulSet.
        set: String,
    },
    /// A claim of a volume claim template could not be created.
    #[error("failed to create pvc {claim}")]
    CreateClaim {
        /// The claim's name.
        claim: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A claim the pod needs is being deleted.
    #[error("pvc {0} is being deleted")]
    ClaimDeleting(String),
    /// A claim's owner references could not be set for the retention policy.
    #[error("could not update claim {claim} for delete policy ownerrefs")]
    UpdateClaimOwners {
        /// The claim's name.
        claim: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A revision's data is not a StatefulSet patch.
    #[error("revision {revision} holds no usable template")]
    Revision {
        /// The revision's name.
        revision: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// Several requests of one step failed.
    #[error("{count} requests failed")]
    Several {
        /// How many failed.
        count: usize,
        /// The first failure.
        #[source]
        first: Box<Error>,
    },
}

/// The first of `errors` (with their count), if any, as upstream's `NewAggregate`.
fn aggregate(mut errors: Vec<Error>) -> Result<(), Error> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        count => Err(Error::Several {
            count,
            first: Box::new(errors.remove(0)),
        }),
    }
}

/// Whether a create failed because the name is taken.
fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.reason == "AlreadyExists")
}

/// The text Go's client gives for a failed request: the API's message for API errors.
fn request_error_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => super::support::error_chain(other),
    }
}

/// The text upstream's errors give, for Events.
fn go_error(error: &Error) -> String {
    match error {
        Error::Api(source) => request_error_text(source),
        Error::CreateClaim { claim, source } => {
            format!(
                "failed to create PVC {claim}: {}",
                request_error_text(source)
            )
        }
        Error::Several { first, .. } => go_error(first),
        other => super::support::error_chain(other),
    }
}

/// Pods created or deleted whose change the pods' cache has not shown yet, by pod: the
/// uid deleted (none for a create) and when the request was sent.
#[derive(Default)]
struct InFlight(Mutex<HashMap<ObjectKey, (Option<String>, Instant)>>);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, (Option<String>, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A create (`uid` none) or the delete of the pod `uid` is about to be sent.
    fn begin(&self, pod: &Pod, uid: Option<String>) {
        self.lock()
            .insert(ObjectKey::of(pod), (uid, Instant::now()));
    }

    /// The request failed: no change will show.
    fn end(&self, pod: &Pod) {
        self.lock().remove(&ObjectKey::of(pod));
    }

    /// The cache applied `change`: a create or delete it shows is no longer in flight.
    fn observe(&self, change: &Change<Pod>) {
        let pod = change.object();
        let key = ObjectKey::of(pod.as_ref());
        let mut in_flight = self.lock();
        let Some((deleted, _)) = in_flight.get(&key) else {
            return;
        };
        let shown = match (change, deleted) {
            (Change::Deleted(_), _) => true,
            // Created: a pod of that name that the cache did not hold before.
            (Change::Applied { old, new }, None) => old
                .as_ref()
                .is_none_or(|old| old.metadata.uid != new.metadata.uid),
            // Deleted: gone, being deleted, or replaced by another pod of that name.
            (Change::Applied { new, .. }, Some(uid)) => {
                new.metadata.uid.as_ref() != Some(uid) || is_deleting(&new.metadata)
            }
        };
        if shown {
            in_flight.remove(&key);
        }
    }

    /// Whether a pod of `set` is in flight (for less than [`EXPECTATIONS_TIMEOUT`]).
    fn pending(&self, set: &StatefulSet) -> bool {
        self.lock().iter().any(|(key, (_, since))| {
            key.namespace == namespace(&set.metadata)
                && parent_and_ordinal(&key.name).0 == name(&set.metadata)
                && since.elapsed() < EXPECTATIONS_TIMEOUT
        })
    }
}

struct Controller {
    client: Client,
    in_flight: InFlight,
    sets: Cache<StatefulSet>,
    pods: Cache<Pod>,
    claims: Cache<PersistentVolumeClaim>,
    revisions: Cache<ControllerRevision>,
    queue: Queue<ObjectKey>,
    recorder: Recorder,
}

/// Subscribes the controller to the shared caches and starts its worker.
pub(crate) fn start(
    client: Client,
    sets: &Cache<StatefulSet>,
    pods: &Cache<Pod>,
    claims: &Cache<PersistentVolumeClaim>,
    revisions: &Cache<ControllerRevision>,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        recorder: Recorder::new(client.clone(), "statefulset-controller"),
        client,
        sets: sets.clone(),
        pods: pods.clone(),
        claims: claims.clone(),
        revisions: revisions.clone(),
        queue: Queue::new(),
        in_flight: InFlight::default(),
    });
    let c = controller.clone();
    sets.subscribe(move |change| c.queue.add(ObjectKey::of(change.object().as_ref())));
    let c = controller.clone();
    pods.subscribe(move |change| c.pod_changed(change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

// --- The set's spec, read with the server's defaults. ---

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

fn spec_replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .unwrap_or(0)
}

fn end_ordinal(set: &StatefulSet) -> i32 {
    start_ordinal(set) + spec_replicas(set) - 1
}

fn template(set: &StatefulSet) -> PodTemplateSpec {
    set.spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default()
}

fn claim_templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_deref())
        .unwrap_or_default()
}

fn update_strategy_type(set: &StatefulSet) -> &str {
    set.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

/// The rolling update's partition, when the strategy has a `rollingUpdate`.
fn partition(set: &StatefulSet) -> Option<i32> {
    set.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .map(|r| r.partition.unwrap_or(0))
}

fn allows_burst(set: &StatefulSet) -> bool {
    set.spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        == Some("Parallel")
}

/// `whenDeleted` and `whenScaled`, `Retain` unless set.
fn retention_policy(set: &StatefulSet) -> (&str, &str) {
    let policy = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    (
        policy
            .and_then(|p| p.when_deleted.as_deref())
            .unwrap_or(RETAIN),
        policy
            .and_then(|p| p.when_scaled.as_deref())
            .unwrap_or(RETAIN),
    )
}

fn set_ref(set: &StatefulSet) -> OwnerReference {
    controller_ref("apps/v1", "StatefulSet", &set.metadata)
}

// --- Pods' identity (upstream's stateful_set_utils.go). ---

/// The parent's name and the ordinal of a pod named `<parent>-<ordinal>` (-1 otherwise).
fn parent_and_ordinal(pod_name: &str) -> (&str, i32) {
    let Some((parent, digits)) = pod_name.rsplit_once('-') else {
        return ("", -1);
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return ("", -1);
    }
    (parent, digits.parse::<i32>().unwrap_or(-1))
}

fn ordinal(pod: &Pod) -> i32 {
    parent_and_ordinal(name(&pod.metadata)).1
}

fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", name(&set.metadata))
}

fn claim_name(set: &StatefulSet, claim: &PersistentVolumeClaim, ordinal: i32) -> String {
    format!(
        "{}-{}-{ordinal}",
        name(&claim.metadata),
        name(&set.metadata)
    )
}

fn in_ordinal_range(pod: &Pod, set: &StatefulSet) -> bool {
    let o = ordinal(pod);
    o >= start_ordinal(set) && o <= end_ordinal(set)
}

fn is_member_of(set: &StatefulSet, pod: &Pod) -> bool {
    parent_and_ordinal(name(&pod.metadata)).0 == name(&set.metadata)
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let (parent, o) = parent_and_ordinal(name(&pod.metadata));
    o >= 0
        && parent == name(&set.metadata)
        && name(&pod.metadata) == pod_name(set, o)
        && namespace(&pod.metadata) == namespace(&set.metadata)
        && label(&pod.metadata, POD_NAME_LABEL) == Some(name(&pod.metadata))
}

fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let o = ordinal(pod);
    if o < 0 {
        return false;
    }
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    claim_templates(set).iter().all(|claim| {
        volumes
            .iter()
            .find(|v| v.name == name(&claim.metadata))
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .is_some_and(|c| c.claim_name == claim_name(set, claim, o))
    })
}

/// The claims of the pod's ordinal, each with its template's name (upstream's
/// `getPersistentVolumeClaims`): the template under its new name, labelled with the
/// template's labels and the selector's `matchLabels`.
fn claims_of(set: &StatefulSet, pod: &Pod) -> Vec<(String, PersistentVolumeClaim)> {
    let o = ordinal(pod);
    let match_labels = set
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone());
    claim_templates(set)
        .iter()
        .map(|template| {
            let mut claim = template.clone();
            claim.metadata.name = Some(claim_name(set, template, o));
            claim.metadata.namespace = set.metadata.namespace.clone();
            claim.metadata.labels = match claim.metadata.labels.take() {
                Some(mut labels) => {
                    labels.extend(match_labels.clone().unwrap_or_default());
                    Some(labels)
                }
                None => match_labels.clone(),
            };
            (name(&template.metadata).to_string(), claim)
        })
        .collect()
}

/// Upstream's `updateStorage`: a volume per claim, then the pod's other volumes.
fn update_storage(set: &StatefulSet, pod: &mut Pod) {
    let claims = claims_of(set, pod);
    let spec = pod.spec.get_or_insert_with(Default::default);
    let current = spec.volumes.take().unwrap_or_default();
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(template, claim)| Volume {
            name: template.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: name(&claim.metadata).to_string(),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    volumes.extend(
        current
            .into_iter()
            .filter(|v| !claims.iter().any(|(template, _)| *template == v.name)),
    );
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
}

/// Upstream's `updateIdentity`: name, namespace, the pod-name and pod-index labels.
fn update_identity(set: &StatefulSet, pod: &mut Pod) {
    let o = ordinal(pod);
    let name = pod_name(set, o);
    pod.metadata.name = Some(name.clone());
    pod.metadata.namespace = set.metadata.namespace.clone();
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(POD_NAME_LABEL.to_string(), name);
    labels.insert(POD_INDEX_LABEL.to_string(), o.to_string());
}

/// Upstream's `newStatefulSetPod`: the template's pod with the set's controller
/// reference, its identity, hostname, subdomain and claim volumes.
fn new_pod(set: &StatefulSet, ordinal: i32) -> Pod {
    let template = template(set);
    let meta = template.metadata.unwrap_or_default();
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(set, ordinal)),
            generate_name: Some(format!("{}-", name(&set.metadata))),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![set_ref(set)]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    };
    update_identity(set, &mut pod);
    let service = set
        .spec
        .as_ref()
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.hostname = pod.metadata.name.clone();
    spec.subdomain = service;
    update_storage(set, &mut pod);
    pod
}

fn set_revision(pod: &mut Pod, revision: &str) {
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(REVISION_LABEL.to_string(), revision.to_string());
}

fn revision_of(pod: &Pod) -> &str {
    label(&pod.metadata, REVISION_LABEL).unwrap_or_default()
}

/// Upstream's `newVersionedStatefulSetPod`, with its operator precedence: ordinals below
/// the partition (or, without a `rollingUpdate`, below the current replicas) get the
/// current revision, the others the update revision.
fn new_versioned_pod(
    current_set: &StatefulSet,
    update_set: &StatefulSet,
    current_revision: &str,
    update_revision: &str,
    ordinal: i32,
) -> Pod {
    let start = start_ordinal(current_set);
    let current_replicas = current_set
        .status
        .as_ref()
        .and_then(|s| s.current_replicas)
        .unwrap_or(0);
    let below_current = update_strategy_type(current_set) == "RollingUpdate"
        && partition(current_set).is_none()
        && ordinal < start + current_replicas;
    let below_partition = partition(current_set).is_some_and(|p| ordinal < start + p);
    if below_current || below_partition {
        let mut pod = new_pod(current_set, ordinal);
        set_revision(&mut pod, current_revision);
        pod
    } else {
        let mut pod = new_pod(update_set, ordinal);
        set_revision(&mut pod, update_revision);
        pod
    }
}

// --- Pod states. ---

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn is_created(pod: &Pod) -> bool {
    !pod_phase(pod).is_empty()
}

fn is_terminating(pod: &Pod) -> bool {
    is_deleting(&pod.metadata)
}

fn is_running_and_ready(pod: &Pod) -> bool {
    pod_phase(pod) == "Running" && is_ready(pod)
}

fn is_running_and_available(pod: &Pod, min_ready_seconds: i32) -> bool {
    is_available(pod, min_ready_seconds, &Timestamp::now())
}

fn is_unavailable(pod: &Pod, min_ready_seconds: i32) -> bool {
    !is_running_and_available(pod, min_ready_seconds) || is_terminating(pod)
}

// --- Revisions. ---

/// Upstream's `getPatch`: the set's template, replacing the whole template when applied.
fn revision_data(set: &StatefulSet) -> Value {
    history::template_patch(&template(set))
}

/// The template a revision holds.
fn revision_template(revision: &ControllerRevision) -> Result<PodTemplateSpec, Error> {
    let mut template = revision
        .data
        .as_ref()
        .map(|d| d.0["spec"]["template"].clone())
        .unwrap_or(Value::Null);
    if let Value::Object(map) = &mut template {
        map.remove("$patch");
    }
    serde_json::from_value(template).map_err(|source| Error::Revision {
        revision: name(&revision.metadata).to_string(),
        source,
    })
}

/// Upstream's `ApplyRevision`: the set with the revision's template.
fn apply_revision(set: &StatefulSet, revision: &ControllerRevision) -> Result<StatefulSet, Error> {
    let mut applied = set.clone();
    if let Some(spec) = applied.spec.as_mut() {
        spec.template = revision_template(revision)?;
    }
    Ok(applied)
}

/// Upstream's `setMatchesLatestExistingRevision` (`StatefulSetSemanticRevisionComparison`,
/// on by default): the latest revision holds the set's template, written differently
/// (such as with the `creationTimestamp: null` of releases before 1.34).
fn matches_latest_revision(set: &StatefulSet, latest: &ControllerRevision) -> bool {
    let Some(data) = latest.data.as_ref() else {
        return false;
    };
    let mut theirs = without_nulls(&data.0);
    let mut ours = revision_data(set);
    for value in [&mut theirs, &mut ours] {
        if let Some(meta) = value["spec"]["template"]["metadata"].as_object_mut() {
            meta.remove("creationTimestamp");
        }
    }
    theirs == ours
}

// --- Claims' owner references (upstream's retention policy helpers). ---

fn matches_ref(r: &OwnerReference, meta: &ObjectMeta, api_version: &str, kind: &str) -> bool {
    r.api_version == api_version && r.kind == kind && r.name == name(meta)
}

fn owner_refs(claim: &PersistentVolumeClaim) -> &[OwnerReference] {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
}

fn uid(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

fn has_owner_ref(claim: &PersistentVolumeClaim, owner: &ObjectMeta) -> bool {
    owner_refs(claim).iter().any(|r| r.uid == uid(owner))
}

fn has_stale_owner_ref(
    claim: &PersistentVolumeClaim,
    owner: &ObjectMeta,
    api_version: &str,
    kind: &str,
) -> bool {
    owner_refs(claim)
        .iter()
        .find(|r| matches_ref(r, owner, api_version, kind))
        .is_some_and(|r| r.uid != uid(owner))
}

fn has_unexpected_controller(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    if retention_policy(set) == (RETAIN, RETAIN) {
        return false;
    }
    for r in owner_refs(claim) {
        if matches_ref(r, &set.metadata, "apps/v1", "StatefulSet") {
            if r.uid != uid(&set.metadata) {
                return true;
            }
            continue;
        }
        if matches_ref(r, &pod.metadata, "v1", "Pod") {
            if r.uid != uid(&pod.metadata) {
                return true;
            }
            continue;
        }
        if r.controller == Some(true) {
            return true;
        }
    }
    false
}

fn has_non_controller_owner(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    owner_refs(claim).iter().any(|r| {
        (r.uid == uid(&set.metadata) || r.uid == uid(&pod.metadata)) && r.controller != Some(true)
    })
}

/// Upstream's `isClaimOwnerUpToDate`.
fn claim_owner_up_to_date(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    if has_stale_owner_ref(claim, &set.metadata, "apps/v1", "StatefulSet")
        || has_stale_owner_ref(claim, &pod.metadata, "v1", "Pod")
    {
        return true;
    }
    if has_unexpected_controller(claim, set, pod) {
        return !(has_owner_ref(claim, &set.metadata) || has_owner_ref(claim, &pod.metadata));
    }
    if has_non_controller_owner(claim, set, pod) {
        return false;
    }
    let scaled_down = !in_ordinal_range(pod, set);
    let by_set = has_owner_ref(claim, &set.metadata);
    let by_pod = has_owner_ref(claim, &pod.metadata);
    match retention_policy(set) {
        (DELETE, RETAIN) => by_set && !by_pod,
        (RETAIN, DELETE) => !by_set && scaled_down == by_pod,
        (DELETE, DELETE) => scaled_down != by_set && scaled_down == by_pod,
        _ => !(by_set || by_pod),
    }
}

/// Upstream's `updateClaimOwnerRefForSetAndPod`.
fn update_claim_owner_refs(claim: &mut PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) {
    let unexpected = has_unexpected_controller(claim, set, pod);
    let mut refs: Vec<OwnerReference> = owner_refs(claim)
        .iter()
        .filter(|r| {
            !(matches_ref(r, &set.metadata, "apps/v1", "StatefulSet")
                || matches_ref(r, &pod.metadata, "v1", "Pod"))
        })
        .cloned()
        .collect();
    if !unexpected {
        let scaled_down = !in_ordinal_range(pod, set);
        let mut add = |owner: &ObjectMeta, api_version: &str, kind: &str| {
            if !refs.iter().any(|r| r.uid == uid(owner)) {
                refs.push(controller_ref(api_version, kind, owner));
            }
        };
        match retention_policy(set) {
            (DELETE, RETAIN) => add(&set.metadata, "apps/v1", "StatefulSet"),
            (RETAIN, DELETE) if scaled_down => add(&pod.metadata, "v1", "Pod"),
            (DELETE, DELETE) => {
                if scaled_down {
                    add(&pod.metadata, "v1", "Pod");
                } else {
                    add(&set.metadata, "apps/v1", "StatefulSet");
                }
            }
            _ => {}
        }
    }
    claim.metadata.owner_references = (!refs.is_empty()).then_some(refs);
}

// --- Status. ---

/// The counts of upstream's `computeReplicaStatus`, summed over lists of pods.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    replicas: i32,
    ready: i32,
    available: i32,
    current: i32,
    updated: i32,
}

fn count<'a>(
    pods: impl IntoIterator<Item = &'a Arc<Pod>>,
    min_ready_seconds: i32,
    current_revision: &str,
    update_revision: &str,
) -> Counts {
    let mut counts = Counts::default();
    for pod in pods {
        if is_created(pod) {
            counts.replicas += 1;
        }
        if is_running_and_ready(pod) {
            counts.ready += 1;
            if is_running_and_available(pod, min_ready_seconds) {
                counts.available += 1;
            }
        }
        if is_created(pod) && !is_terminating(pod) {
            if revision_of(pod) == current_revision {
                counts.current += 1;
            }
            if revision_of(pod) == update_revision {
                counts.updated += 1;
            }
        }
    }
    counts
}

/// The status being computed in one sync.
#[derive(Debug, Clone)]
struct Status {
    observed_generation: i64,
    counts: Counts,
    current_revision: String,
    update_revision: String,
    collision_count: i32,
}

impl Status {
    fn recount(&mut self, min_ready_seconds: i32, pods: &[&[Arc<Pod>]]) {
        self.counts = count(
            pods.iter().flat_map(|list| list.iter()),
            min_ready_seconds,
            &self.current_revision,
            &self.update_revision,
        );
    }

    /// The status as written: what Go leaves out when zero is left out.
    fn to_api(&self) -> StatefulSetStatus {
        let nz = |n: i32| (n != 0).then_some(n);
        StatefulSetStatus {
            observed_generation: (self.observed_generation != 0)
                .then_some(self.observed_generation),
            replicas: self.counts.replicas,
            ready_replicas: nz(self.counts.ready),
            current_replicas: nz(self.counts.current),
            updated_replicas: nz(self.counts.updated),
            current_revision: Some(self.current_revision.clone()).filter(|s| !s.is_empty()),
            update_revision: Some(self.update_revision.clone()).filter(|s| !s.is_empty()),
            collision_count: Some(self.collision_count),
            conditions: None,
            available_replicas: Some(self.counts.available),
        }
    }
}

/// Upstream's `completeRollingUpdate`: once every pod is updated and ready, the update
/// revision becomes the current one.
fn complete_rolling_update(set: &StatefulSet, status: &mut Status) {
    let wanted = spec_replicas(set);
    if update_strategy_type(set) == "RollingUpdate"
        && status.counts.updated == wanted
        && status.counts.ready == wanted
        && status.counts.replicas == wanted
    {
        status.counts.current = status.counts.updated;
        status.current_revision = status.update_revision.clone();
    }
}

/// Upstream's `inconsistentStatus`: whether the status differs from the set's.
fn inconsistent_status(set: &StatefulSet, status: &Status) -> bool {
    let old = set.status.clone().unwrap_or_default();
    status.observed_generation > old.observed_generation.unwrap_or(0)
        || status.counts.replicas != old.replicas
        || status.counts.current != old.current_replicas.unwrap_or(0)
        || status.counts.ready != old.ready_replicas.unwrap_or(0)
        || status.counts.updated != old.updated_replicas.unwrap_or(0)
        || status.current_revision != old.current_revision.unwrap_or_default()
        || status.counts.available != old.available_replicas.unwrap_or(0)
        || status.update_revision != old.update_revision.unwrap_or_default()
}

// --- The controller. ---

impl Controller {
    fn resolve(&self, namespace: &str, r: &OwnerReference) -> Option<Arc<StatefulSet>> {
        if r.kind != "StatefulSet" {
            return None;
        }
        self.sets
            .get(namespace, &r.name)
            .filter(|set| uid(&set.metadata) == r.uid)
    }

    /// Upstream's `GetPodStatefulSets`: the sets in the pod's namespace selecting it.
    fn selecting(&self, pod: &Pod) -> Vec<Arc<StatefulSet>> {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if labels.is_empty() {
            return Vec::new();
        }
        self.sets
            .list_in(namespace(&pod.metadata))
            .into_iter()
            .filter(|set| selects(set.spec.as_ref().map(|s| &s.selector), &labels))
            .collect()
    }

    fn enqueue(&self, set: &StatefulSet) {
        self.queue.add(ObjectKey::of(set));
    }

    fn pod_changed(&self, change: &Change<Pod>) {
        self.in_flight.observe(change);
        match change {
            Change::Applied { old: None, new } => self.pod_added(new),
            Change::Applied {
                old: Some(old),
                new,
            } => self.pod_updated(old, new),
            Change::Deleted(old) => self.pod_deleted(old),
        }
    }

    fn pod_added(&self, pod: &Pod) {
        if is_deleting(&pod.metadata) {
            self.pod_deleted(pod);
            return;
        }
        if let Some(r) = controller_of(&pod.metadata) {
            if let Some(set) = self.resolve(namespace(&pod.metadata), r) {
                self.enqueue(&set);
            }
            return;
        }
        for set in self.selecting(pod) {
            self.enqueue(&set);
        }
    }

    fn pod_updated(&self, old: &Pod, new: &Pod) {
        if old.metadata.resource_version == new.metadata.resource_version {
            return;
        }
        let labels_changed = old.metadata.labels != new.metadata.labels;
        let new_ref = controller_of(&new.metadata);
        let old_ref = controller_of(&old.metadata);
        let ref_changed = new_ref != old_ref;
        if ref_changed
            && let Some(old_ref) = old_ref
            && let Some(set) = self.resolve(namespace(&old.metadata), old_ref)
        {
            self.enqueue(&set);
        }
        if let Some(new_ref) = new_ref {
            let Some(set) = self.resolve(namespace(&new.metadata), new_ref) else {
                return;
            };
            self.enqueue(&set);
            let min_ready = min_ready_seconds(&set);
            if !is_ready(old) && is_ready(new) && min_ready > 0 {
                self.queue.add_after(
                    ObjectKey::of(set.as_ref()),
                    Duration::from_secs(u64::try_from(min_ready).unwrap_or(0) + 1),
                );
            }
            return;
        }
        if labels_changed || ref_changed {
            for set in self.selecting(new) {
                self.enqueue(&set);
            }
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        if let Some(r) = controller_of(&pod.metadata)
            && let Some(set) = self.resolve(namespace(&pod.metadata), r)
        {
            self.enqueue(&set);
        }
    }

    async fn run(self: Arc<Self>) {
        self.sets.wait_ready().await;
        self.pods.wait_ready().await;
        self.claims.wait_ready().await;
        self.revisions.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(statefulset = %key, error = %super::support::error_chain(&error), "statefulset sync failed; retrying");
            }
        }
    }

    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(set) = self.sets.get(&key.namespace, &key.name) else {
            return Ok(None);
        };
        if self.in_flight.pending(&set) {
            return Ok(None);
        }
        self.adopt_orphan_revisions(&set).await?;
        let pods = self.claim_pods(&set).await?;
        let status = self.update_stateful_set(&set, &pods).await?;
        let min_ready = min_ready_seconds(&set);
        Ok(
            (min_ready > 0 && status.counts.available != spec_replicas(&set))
                .then(|| Duration::from_secs(u64::try_from(min_ready).unwrap_or(0))),
        )
    }

    /// Upstream's `RecheckDeletionTimestamp` over a live read of the set.
    async fn can_adopt(&self, set: &StatefulSet) -> Result<(), Error> {
        let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), namespace(&set.metadata));
        let fresh = api.get(name(&set.metadata)).await?;
        if fresh.metadata.uid != set.metadata.uid || is_deleting(&fresh.metadata) {
            return Err(Error::CannotAdopt {
                set: ObjectKey::of(set).to_string(),
            });
        }
        Ok(())
    }

    /// The revisions the set's selector selects that are its own or nobody's.
    fn list_revisions(&self, set: &StatefulSet) -> Vec<Arc<ControllerRevision>> {
        let selector = set.spec.as_ref().map(|s| &s.selector);
        self.revisions
            .list_in(namespace(&set.metadata))
            .into_iter()
            .filter(|r| selects(selector, &r.metadata.labels.clone().unwrap_or_default()))
            .filter(|r| controller_of(&r.metadata).is_none_or(|c| c.uid == uid(&set.metadata)))
            .collect()
    }

    async fn adopt_orphan_revisions(&self, set: &StatefulSet) -> Result<(), Error> {
        let orphans: Vec<_> = self
            .list_revisions(set)
            .into_iter()
            .filter(|r| controller_of(&r.metadata).is_none())
            .collect();
        if orphans.is_empty() {
            return Ok(());
        }
        self.can_adopt(set).await?;
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&set.metadata));
        for revision in orphans {
            let patch = json!({"metadata": {
                "ownerReferences": [set_ref(set)],
                "uid": revision.metadata.uid,
            }});
            api.patch(
                name(&revision.metadata),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await?;
        }
        Ok(())
    }

    /// Upstream's `ClaimPods` with the `isMemberOf` filter: the set's pods it still
    /// selects, plus orphans it adopts; its pods it no longer selects are released.
    async fn claim_pods(&self, set: &StatefulSet) -> Result<Vec<Arc<Pod>>, Error> {
        let set_uid = uid(&set.metadata).to_string();
        let selector = set.spec.as_ref().map(|s| &s.selector);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace(&set.metadata));
        let mut owned = Vec::new();
        let mut errors = Vec::new();
        let mut adoptable: Option<bool> = None;
        for pod in self.pods.list_in(namespace(&set.metadata)) {
            let matches = selects(selector, &pod.metadata.labels.clone().unwrap_or_default())
                && is_member_of(set, &pod);
            let pod_uid = pod.metadata.uid.clone();
            match controller_of(&pod.metadata) {
                Some(r) if r.uid == set_uid => {
                    if matches {
                        owned.push(pod);
                        continue;
                    }
                    if is_deleting(&set.metadata) {
                        continue;
                    }
                    let patch = json!({"metadata": {
                        "ownerReferences": [{"$patch": "delete", "uid": set_uid}],
                        "uid": pod_uid,
                    }});
                    match api
                        .patch(
                            name(&pod.metadata),
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        )
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) || super::support::code(&e) == Some(422) => {}
                        Err(e) => errors.push(e.into()),
                    }
                }
                None => {
                    if is_deleting(&set.metadata) || !matches || is_deleting(&pod.metadata) {
                        continue;
                    }
                    let can = match adoptable {
                        Some(can) => can,
                        None => match self.can_adopt(set).await {
                            Ok(()) => *adoptable.insert(true),
                            Err(e) => {
                                adoptable = Some(false);
                                errors.push(e);
                                false
                            }
                        },
                    };
                    if !can {
                        continue;
                    }
                    let patch = json!({"metadata": {
                        "ownerReferences": [set_ref(set)],
                        "uid": pod_uid,
                    }});
                    match api
                        .patch(
                            name(&pod.metadata),
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        )
                        .await
                    {
                        Ok(_) => owned.push(pod),
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => errors.push(e.into()),
                    }
                }
                Some(_) => {}
            }
        }
        aggregate(errors)?;
        Ok(owned)
    }

    /// Upstream's `UpdateStatefulSet`: revisions, pods, status, then the history's pruning.
    async fn update_stateful_set(
        &self,
        set: &StatefulSet,
        pods: &[Arc<Pod>],
    ) -> Result<Status, Error> {
        let mut revisions = self.list_revisions(set);
        history::sort(&mut revisions);
        let mut live: HashSet<String> = HashSet::new();
        let outcome = self.perform_update(set, pods, &revisions, &mut live).await;
        let truncated = self.truncate_history(set, pods, &revisions, &live).await;
        let status = outcome?;
        truncated?;
        Ok(status)
    }

    async fn perform_update(
        &self,
        set: &StatefulSet,
        pods: &[Arc<Pod>],
        revisions: &[Arc<ControllerRevision>],
        live: &mut HashSet<String>,
    ) -> Result<Status, Error> {
        let (current, update, collision_count) = self.set_revisions(set, revisions).await?;
        live.insert(name(&current.metadata).to_string());
        live.insert(name(&update.metadata).to_string());
        let (mut status, pods_error) = self
            .update_pods(set, &current, &update, collision_count, pods)
            .await?;
        let status_error = self.write_status(set, &mut status).await.err();
        match (pods_error, status_error) {
            (Some(error), _) | (None, Some(error)) => Err(error),
            (None, None) => Ok(status),
        }
    }

    /// Upstream's `getStatefulSetRevisions`: the current and update revisions (creating
    /// the update revision, or renumbering an equal older one) and the collision count.
    async fn set_revisions(
        &self,
        set: &StatefulSet,
        revisions: &[Arc<ControllerRevision>],
    ) -> Result<(Arc<ControllerRevision>, Arc<ControllerRevision>, i32), Error> {
        let mut collision_count = set
            .status
            .as_ref()
            .and_then(|s| s.collision_count)
            .unwrap_or(0);
        let next = revisions.last().map_or(1, |r| r.revision + 1);
        let mut proposed = history::new_revision(
            name(&set.metadata),
            namespace(&set.metadata),
            set_ref(set),
            &template(set)
                .metadata
                .and_then(|m| m.labels)
                .unwrap_or_default(),
            &revision_data(set),
            next,
            collision_count,
        );
        if let Some(annotations) = set.metadata.annotations.clone().filter(|a| !a.is_empty()) {
            proposed.metadata.annotations = Some(annotations);
        }
        let equal: Vec<&Arc<ControllerRevision>> = revisions
            .iter()
            .filter(|r| history::equal(r, &proposed))
            .collect();
        let update = match (equal.last(), revisions.last()) {
            (Some(found), Some(latest)) if history::equal(latest, found) => latest.clone(),
            (Some(found), _) => self.renumber_revision(found, proposed.revision).await?,
            (None, Some(latest)) if matches_latest_revision(set, latest) => latest.clone(),
            _ => {
                self.create_revision(set, proposed, &mut collision_count)
                    .await?
            }
        };
        let current_name = set
            .status
            .as_ref()
            .and_then(|s| s.current_revision.clone())
            .unwrap_or_default();
        let current = revisions
            .iter()
            .find(|r| name(&r.metadata) == current_name)
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok((current, update, collision_count))
    }

    /// Upstream's `UpdateControllerRevision`: gives an older revision a new number.
    async fn renumber_revision(
        &self,
        revision: &ControllerRevision,
        number: i64,
    ) -> Result<Arc<ControllerRevision>, Error> {
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&revision.metadata));
        let mut clone = revision.clone();
        let mut attempt = 0;
        loop {
            if clone.revision == number {
                return Ok(Arc::new(clone));
            }
            clone.revision = number;
            match api
                .replace(name(&revision.metadata), &PostParams::default(), &clone)
                .await
            {
                Ok(updated) => return Ok(Arc::new(updated)),
                Err(e) if is_conflict(&e) && attempt + 1 < CONFLICT_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(conflict_backoff(attempt)).await;
                    clone = api.get(name(&revision.metadata)).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Upstream's `CreateControllerRevision`: on a name taken by other data, the collision
    /// count grows and the name changes.
    async fn create_revision(
        &self,
        set: &StatefulSet,
        mut revision: ControllerRevision,
        collision_count: &mut i32,
    ) -> Result<Arc<ControllerRevision>, Error> {
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&set.metadata));
        loop {
            history::rename(&mut revision, name(&set.metadata), *collision_count);
            match api.create(&PostParams::default(), &revision).await {
                Ok(created) => return Ok(Arc::new(created)),
                Err(e) if is_already_exists(&e) => {
                    let existing = api.get(name(&revision.metadata)).await?;
                    if history::equal(&existing, &revision) {
                        return Ok(Arc::new(existing));
                    }
                    *collision_count += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Upstream's `truncateHistory`: the oldest revisions no pod and neither the current
    /// nor the update revision uses, beyond `revisionHistoryLimit`, are deleted.
    async fn truncate_history(
        &self,
        set: &StatefulSet,
        pods: &[Arc<Pod>],
        revisions: &[Arc<ControllerRevision>],
        live: &HashSet<String>,
    ) -> Result<(), Error> {
        let in_use: HashSet<&str> = pods.iter().map(|p| revision_of(p)).collect();
        let old: Vec<&Arc<ControllerRevision>> = revisions
            .iter()
            .filter(|r| !live.contains(name(&r.metadata)) && !in_use.contains(name(&r.metadata)))
            .collect();
        let limit = set
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10);
        let Ok(limit) = usize::try_from(limit) else {
            return Ok(());
        };
        if old.len() <= limit {
            return Ok(());
        }
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), namespace(&set.metadata));
        for revision in &old[..old.len() - limit] {
            api.delete(name(&revision.metadata), &DeleteParams::default())
                .await?;
        }
        Ok(())
    }

    /// Upstream's `updateStatefulSet`: makes the pods match the set, returning the status
    /// it leaves and the error that stopped it, if any.
    async fn update_pods(
        &self,
        set: &StatefulSet,
        current: &ControllerRevision,
        update: &ControllerRevision,
        collision_count: i32,
        pods: &[Arc<Pod>],
    ) -> Result<(Status, Option<Error>), Error> {
        let current_set = apply_revision(set, current)?;
        let update_set = apply_revision(set, update)?;
        let min_ready = min_ready_seconds(set);
        let mut status = Status {
            observed_generation: set.metadata.generation.unwrap_or(0),
            counts: Counts::default(),
            current_revision: name(&current.metadata).to_string(),
            update_revision: name(&update.metadata).to_string(),
            collision_count,
        };
        status.recount(min_ready, &[pods]);

        let start = start_ordinal(set);
        let replica_count = usize::try_from(spec_replicas(set)).unwrap_or(0);
        let mut slots: Vec<Option<Arc<Pod>>> = vec![None; replica_count];
        let mut condemned: Vec<Arc<Pod>> = Vec::new();
        for pod in pods {
            if in_ordinal_range(pod, set) {
                if let Ok(index) = usize::try_from(ordinal(pod) - start) {
                    slots[index] = Some(pod.clone());
                }
            } else if ordinal(pod) >= 0 {
                condemned.push(pod.clone());
            }
        }
        let replicas: Vec<Arc<Pod>> = slots
            .into_iter()
            .enumerate()
            .map(|(index, pod)| {
                pod.unwrap_or_else(|| {
                    Arc::new(new_versioned_pod(
                        &current_set,
                        &update_set,
                        name(&current.metadata),
                        name(&update.metadata),
                        start + i32::try_from(index).unwrap_or(i32::MAX),
                    ))
                })
            })
            .collect();
        condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));

        let first_unavailable: Option<Arc<Pod>> = replicas
            .iter()
            .chain(condemned.iter().rev())
            .find(|p| is_unavailable(p, min_ready))
            .cloned();

        if is_deleting(&set.metadata) {
            return Ok((status, None));
        }
        let monotonic = !allows_burst(set);

        let (stop, error) = self
            .run_for_all(replicas.len(), monotonic, |i| {
                self.process_replica(set, &update_set, monotonic, &replicas[i])
            })
            .await;
        if stop {
            status.recount(min_ready, &[&replicas, &condemned]);
            return Ok((status, error));
        }

        let (stop, error) = self
            .run_for_all(condemned.len(), monotonic, |i| {
                self.fix_condemned_claims(&update_set, &condemned[i])
            })
            .await;
        if stop {
            status.recount(min_ready, &[&replicas, &condemned]);
            return Ok((status, error));
        }

        let (stop, error) = self
            .run_for_all(condemned.len(), monotonic, |i| {
                self.process_condemned(
                    set,
                    first_unavailable.as_ref(),
                    monotonic,
                    &condemned[i],
                    min_ready,
                )
            })
            .await;
        if stop {
            status.recount(min_ready, &[&replicas, &condemned]);
            return Ok((status, error));
        }

        status.recount(min_ready, &[&replicas, &condemned]);
        if update_strategy_type(set) == "OnDelete" {
            return Ok((status, None));
        }

        let update_min = usize::try_from(partition(set).unwrap_or(0)).unwrap_or(0);
        for target in (update_min..replicas.len()).rev() {
            let pod = &replicas[target];
            if revision_of(pod) != name(&update.metadata) && !is_terminating(pod) {
                let error = match self.delete_pod(set, pod).await {
                    Err(Error::Api(e)) if is_not_found(&e) => None,
                    outcome => outcome.err(),
                };
                status.counts.current -= 1;
                return Ok((status, error));
            }
            if is_unavailable(pod, min_ready) {
                return Ok((status, None));
            }
        }
        Ok((status, None))
    }

    /// Upstream's `runForAll`: in order, stopping at the first that asks to (monotonic);
    /// or in slow-start batches of 1, 2, 4, … stopping at the first batch with an error.
    /// Returns whether to stop and the error.
    async fn run_for_all<F, Fut>(
        &self,
        count: usize,
        monotonic: bool,
        process: F,
    ) -> (bool, Option<Error>)
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<bool, Error>>,
    {
        if monotonic {
            for i in 0..count {
                match process(i).await {
                    Ok(false) => {}
                    Ok(true) => return (true, None),
                    Err(e) => return (true, Some(e)),
                }
            }
            return (false, None);
        }
        let mut done = 0;
        let mut batch = 1usize.min(count);
        while batch > 0 {
            let results = join_all((done..done + batch).map(&process)).await;
            let errors: Vec<Error> = results.into_iter().filter_map(Result::err).collect();
            if !errors.is_empty() {
                return (true, aggregate(errors).err());
            }
            done += batch;
            batch = (2 * batch).min(count - done).min(MAX_BATCH_SIZE);
        }
        (false, None)
    }

    /// Upstream's `processReplica`; `Ok(true)` stops a monotonic pass.
    async fn process_replica(
        &self,
        set: &StatefulSet,
        update_set: &StatefulSet,
        monotonic: bool,
        pod: &Arc<Pod>,
    ) -> Result<bool, Error> {
        if matches!(pod_phase(pod), "Failed" | "Succeeded") {
            if !is_terminating(pod) {
                self.delete_pod(set, pod).await?;
            }
            return Ok(true);
        }
        if !is_created(pod) {
            if self.claim_is_stale(set, pod) {
                return Ok(true);
            }
            self.create_pod(set, pod).await?;
            if monotonic {
                return Ok(true);
            }
        }
        if pod_phase(pod) == "Pending" {
            self.create_claims(set, pod).await?;
            if let Err(e) = self.update_claims_for_retention(set, pod).await {
                self.record_pod_event("update", set, pod, Some(&e));
                return Err(e);
            }
        }
        let min_ready = min_ready_seconds(set);
        if monotonic
            && (is_terminating(pod)
                || !is_running_and_ready(pod)
                || !is_running_and_available(pod, min_ready))
        {
            return Ok(true);
        }
        let retention_matches = self.claims_match_retention(update_set, pod);
        if identity_matches(set, pod) && storage_matches(set, pod) && retention_matches {
            return Ok(false);
        }
        self.update_pod(update_set, (**pod).clone()).await?;
        Ok(false)
    }

    /// Upstream's `processCondemned`; `Ok(true)` stops a monotonic pass.
    async fn process_condemned(
        &self,
        set: &StatefulSet,
        first_unavailable: Option<&Arc<Pod>>,
        monotonic: bool,
        pod: &Arc<Pod>,
        min_ready: i32,
    ) -> Result<bool, Error> {
        if is_terminating(pod) {
            return Ok(monotonic);
        }
        let is_first_unavailable = first_unavailable.is_some_and(|f| Arc::ptr_eq(f, pod));
        if monotonic
            && !is_first_unavailable
            && (!is_running_and_ready(pod) || !is_running_and_available(pod, min_ready))
        {
            return Ok(true);
        }
        self.delete_pod(set, pod).await?;
        Ok(true)
    }

    /// The retention-policy step upstream runs over condemned pods before deleting them.
    async fn fix_condemned_claims(
        &self,
        update_set: &StatefulSet,
        pod: &Arc<Pod>,
    ) -> Result<bool, Error> {
        if !self.claims_match_retention(update_set, pod) {
            self.update_claims_for_retention(update_set, pod).await?;
        }
        Ok(false)
    }

    fn record_pod_event(&self, verb: &str, set: &StatefulSet, pod: &Pod, error: Option<&Error>) {
        let title = title(verb);
        let (type_, reason, message) = match error {
            None => (
                EventType::Normal,
                format!("Successful{title}"),
                format!(
                    "{verb} Pod {} in StatefulSet {} successful",
                    name(&pod.metadata),
                    name(&set.metadata)
                ),
            ),
            Some(error) => (
                EventType::Warning,
                format!("Failed{title}"),
                format!(
                    "{verb} Pod {} in StatefulSet {} failed error: {}",
                    name(&pod.metadata),
                    name(&set.metadata),
                    go_error(error)
                ),
            ),
        };
        self.recorder.record(
            "apps/v1",
            "StatefulSet",
            &set.metadata,
            type_,
            &reason,
            &message,
        );
    }

    fn record_claim_event(
        &self,
        set: &StatefulSet,
        pod: &Pod,
        claim: &PersistentVolumeClaim,
        error: Option<&str>,
    ) {
        let (type_, reason, message) = match error {
            None => (
                EventType::Normal,
                "SuccessfulCreate",
                format!(
                    "create Claim {} Pod {} in StatefulSet {} success",
                    name(&claim.metadata),
                    name(&pod.metadata),
                    name(&set.metadata)
                ),
            ),
            Some(error) => (
                EventType::Warning,
                "FailedCreate",
                format!(
                    "create Claim {} for Pod {} in StatefulSet {} failed error: {error}",
                    name(&claim.metadata),
                    name(&pod.metadata),
                    name(&set.metadata),
                ),
            ),
        };
        self.recorder.record(
            "apps/v1",
            "StatefulSet",
            &set.metadata,
            type_,
            reason,
            &message,
        );
    }

    /// Upstream's `CreateStatefulPod`: the claims, then the pod, then the claims' owners.
    async fn create_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        if let Err(e) = self.create_claims(set, pod).await {
            self.record_pod_event("create", set, pod, Some(&e));
            return Err(e);
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace(&set.metadata));
        self.in_flight.begin(pod, None);
        let created = api.create(&PostParams::default(), pod).await;
        if created.is_err() {
            self.in_flight.end(pod);
        }
        if let Err(e) = &created
            && is_already_exists(e)
        {
            return created.map(drop).map_err(Error::from);
        }
        if let Err(e) = self.update_claims_for_retention(set, pod).await {
            self.record_pod_event("update", set, pod, Some(&e));
            return Err(e);
        }
        let result = created.map(drop).map_err(Error::from);
        self.record_pod_event("create", set, pod, result.as_ref().err());
        result
    }

    /// Upstream's `UpdateStatefulPod`: identity, storage and claims' owners made right,
    /// the pod written back, again on conflicts.
    async fn update_pod(&self, set: &StatefulSet, mut pod: Pod) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace(&set.metadata));
        let mut attempted = false;
        let mut attempt = 0;
        let result = loop {
            let mut consistent = true;
            if !identity_matches(set, &pod) {
                update_identity(set, &mut pod);
                consistent = false;
            }
            if !storage_matches(set, &pod) {
                update_storage(set, &mut pod);
                consistent = false;
                if let Err(e) = self.create_claims(set, &pod).await {
                    self.record_pod_event("update", set, &pod, Some(&e));
                    return Err(e);
                }
            }
            if !self.claims_match_retention(set, &pod) {
                if let Err(e) = self.update_claims_for_retention(set, &pod).await {
                    self.record_pod_event("update", set, &pod, Some(&e));
                    return Err(e);
                }
                consistent = false;
            }
            if consistent {
                break Ok(());
            }
            attempted = true;
            match api
                .replace(name(&pod.metadata), &PostParams::default(), &pod)
                .await
            {
                Ok(_) => break Ok(()),
                Err(e) => {
                    if let Some(fresh) =
                        self.pods.get(namespace(&set.metadata), name(&pod.metadata))
                    {
                        pod = (*fresh).clone();
                    }
                    attempt += 1;
                    if !is_conflict(&e) || attempt >= CONFLICT_ATTEMPTS {
                        break Err(Error::from(e));
                    }
                    tokio::time::sleep(conflict_backoff(attempt)).await;
                }
            }
        };
        if attempted {
            self.record_pod_event("update", set, &pod, result.as_ref().err());
        }
        result
    }

    /// Upstream's `DeleteStatefulPod`.
    async fn delete_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace(&set.metadata));
        self.in_flight.begin(pod, pod.metadata.uid.clone());
        let result = api
            .delete(name(&pod.metadata), &DeleteParams::default())
            .await
            .map(drop)
            .map_err(Error::from);
        if result.is_err() {
            self.in_flight.end(pod);
        }
        self.record_pod_event("delete", set, pod, result.as_ref().err());
        result
    }

    /// Upstream's `createPersistentVolumeClaims`: the pod's claims that do not exist yet.
    async fn create_claims(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        let mut errors = Vec::new();
        for (_, claim) in claims_of(set, pod) {
            match self
                .claims
                .get(namespace(&claim.metadata), name(&claim.metadata))
            {
                None => {
                    let api: Api<PersistentVolumeClaim> =
                        Api::namespaced(self.client.clone(), namespace(&claim.metadata));
                    match api.create(&PostParams::default(), &claim).await {
                        Ok(_) => self.record_claim_event(set, pod, &claim, None),
                        Err(source) => {
                            if !is_already_exists(&source) {
                                // Upstream's event gives the request's own error.
                                let text = request_error_text(&source);
                                self.record_claim_event(set, pod, &claim, Some(&text));
                            }
                            errors.push(Error::CreateClaim {
                                claim: name(&claim.metadata).to_string(),
                                source,
                            });
                        }
                    }
                }
                Some(existing) if is_deleting(&existing.metadata) => {
                    errors.push(Error::ClaimDeleting(name(&claim.metadata).to_string()));
                }
                Some(_) => {}
            }
        }
        aggregate(errors)
    }

    /// Upstream's `ClaimsMatchRetentionPolicy` (a missing claim matches).
    fn claims_match_retention(&self, set: &StatefulSet, pod: &Pod) -> bool {
        claims_of(set, pod).iter().all(|(_, claim)| {
            self.claims
                .get(namespace(&set.metadata), name(&claim.metadata))
                .is_none_or(|existing| claim_owner_up_to_date(&existing, set, pod))
        })
    }

    /// Upstream's `UpdatePodClaimForRetentionPolicy`.
    async fn update_claims_for_retention(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        for (_, claim) in claims_of(set, pod) {
            let claim_name = name(&claim.metadata).to_string();
            let Some(existing) = self.claims.get(namespace(&set.metadata), &claim_name) else {
                continue;
            };
            if has_unexpected_controller(&existing, set, pod) {
                self.recorder.record(
                    "apps/v1",
                    "StatefulSet",
                    &set.metadata,
                    EventType::Warning,
                    "ConflictingController",
                    &format!(
                        "PersistentVolumeClaim {claim_name} has a conflicting OwnerReference that acts as a manging controller, the retention policy is ignored for this claim"
                    ),
                );
            }
            if !claim_owner_up_to_date(&existing, set, pod) {
                let mut updated = (*existing).clone();
                update_claim_owner_refs(&mut updated, set, pod);
                let api: Api<PersistentVolumeClaim> =
                    Api::namespaced(self.client.clone(), namespace(&set.metadata));
                api.replace(&claim_name, &PostParams::default(), &updated)
                    .await
                    .map_err(|source| Error::UpdateClaimOwners {
                        claim: claim_name.clone(),
                        source,
                    })?;
            }
        }
        Ok(())
    }

    /// Upstream's `PodClaimIsStale`: a claim of the pod's name still owned by an earlier
    /// pod of that name (to be deleted by the garbage collector first).
    fn claim_is_stale(&self, set: &StatefulSet, pod: &Pod) -> bool {
        if retention_policy(set).1 == RETAIN {
            return false;
        }
        claims_of(set, pod).iter().any(|(_, claim)| {
            self.claims
                .get(namespace(&claim.metadata), name(&claim.metadata))
                .is_some_and(|existing| has_stale_owner_ref(&existing, &pod.metadata, "v1", "Pod"))
        })
    }

    /// Upstream's `updateStatefulSetStatus`: completes a finished rolling update and
    /// writes the status when it changed.
    async fn write_status(&self, set: &StatefulSet, status: &mut Status) -> Result<(), Error> {
        complete_rolling_update(set, status);
        if !inconsistent_status(set, status) {
            return Ok(());
        }
        let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), namespace(&set.metadata));
        let mut updated = set.clone();
        let mut attempt = 0;
        loop {
            updated.status = Some(status.to_api());
            match api
                .replace_status(name(&set.metadata), &PostParams::default(), &updated)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) && attempt + 1 < STATUS_ATTEMPTS => {
                    attempt += 1;
                    match api.get_opt(name(&set.metadata)).await? {
                        Some(fresh) if fresh.metadata.uid == set.metadata.uid => updated = fresh,
                        _ => return Ok(()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Go's `strings.Title` of a lowercase verb.
fn title(verb: &str) -> String {
    let mut chars = verb.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(spec: Value) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn base_spec() -> Value {
        json!({
            "replicas": 3,
            "serviceName": "nginx",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
        })
    }

    #[test]
    fn a_set_waits_until_its_pod_creates_and_deletes_have_shown_in_the_cache() {
        let set = set(base_spec());
        let mut pod = new_pod(&set, 0);
        let in_flight = InFlight::default();
        in_flight.begin(&pod, None);
        assert!(in_flight.pending(&set));
        pod.metadata.uid = Some("pod-uid".into());
        let pod = Arc::new(pod);
        in_flight.observe(&Change::Applied {
            old: None,
            new: pod.clone(),
        });
        assert!(!in_flight.pending(&set));
        in_flight.begin(&pod, Some("pod-uid".into()));
        in_flight.observe(&Change::Applied {
            old: Some(pod.clone()),
            new: pod.clone(),
        });
        assert!(in_flight.pending(&set));
        in_flight.observe(&Change::Deleted(pod.clone()));
        assert!(!in_flight.pending(&set));
    }

    #[test]
    fn a_pod_name_splits_at_its_last_dash_into_parent_and_ordinal() {
        assert_eq!(parent_and_ordinal("web-0"), ("web", 0));
        assert_eq!(parent_and_ordinal("my-web-12"), ("my-web", 12));
        assert_eq!(parent_and_ordinal("web-x"), ("", -1));
        assert_eq!(parent_and_ordinal("web"), ("", -1));
    }

    #[test]
    fn a_new_pod_has_the_identity_labels_hostname_subdomain_and_claim_volumes() {
        let mut spec = base_spec();
        spec["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}]);
        let pod = new_pod(&set(spec), 2);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-2"));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], "web-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        let volumes = spec.volumes.unwrap();
        assert_eq!(volumes[0].name, "data");
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "data-web-2"
        );
    }

    #[test]
    fn claims_carry_the_template_labels_and_the_selector_labels() {
        let mut spec = base_spec();
        spec["volumeClaimTemplates"] = json!([{"metadata": {"name": "data",
            "labels": {"tier": "db"}}, "spec": {}}]);
        let set = set(spec);
        let pod = new_pod(&set, 0);
        let claims = claims_of(&set, &pod);
        let labels = claims[0].1.metadata.labels.clone().unwrap();
        assert_eq!(claims[0].1.metadata.name.as_deref(), Some("data-web-0"));
        assert_eq!(labels["tier"], "db");
        assert_eq!(labels["app"], "web");
    }

    #[test]
    fn ordinals_below_the_partition_get_the_current_revision() {
        let mut spec = base_spec();
        spec["updateStrategy"]["rollingUpdate"]["partition"] = json!(2);
        let set = set(spec);
        assert_eq!(
            revision_of(&new_versioned_pod(&set, &set, "cur", "upd", 1)),
            "cur"
        );
        assert_eq!(
            revision_of(&new_versioned_pod(&set, &set, "cur", "upd", 2)),
            "upd"
        );
    }

    #[test]
    fn revision_data_replaces_the_whole_template() {
        let data = revision_data(&set(base_spec()));
        assert_eq!(
            history::go_json(&data),
            r#"{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx","name":"c"}]}}}}"#
        );
        let revision = history::new_revision(
            "web",
            "ns",
            set_ref(&set(base_spec())),
            &BTreeMap::new(),
            &data,
            1,
            0,
        );
        let applied = apply_revision(&set(base_spec()), &revision).unwrap();
        assert_eq!(template(&applied), template(&set(base_spec())));
    }

    #[test]
    fn claims_get_the_owner_references_their_retention_policy_asks_for() {
        let mut spec = base_spec();
        spec["persistentVolumeClaimRetentionPolicy"] =
            json!({"whenDeleted": "Delete", "whenScaled": "Delete"});
        spec["replicas"] = json!(1);
        let set = set(spec);
        let mut pod = new_pod(&set, 1);
        pod.metadata.uid = Some("pod-uid".into());
        let mut claim = PersistentVolumeClaim::default();
        assert!(!claim_owner_up_to_date(&claim, &set, &pod));
        update_claim_owner_refs(&mut claim, &set, &pod);
        let refs = claim.metadata.owner_references.clone().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(
            (refs[0].kind.as_str(), refs[0].uid.as_str()),
            ("Pod", "pod-uid")
        );
        assert!(claim_owner_up_to_date(&claim, &set, &pod));
        let in_range = new_pod(&set, 0);
        let mut claim = PersistentVolumeClaim::default();
        update_claim_owner_refs(&mut claim, &set, &in_range);
        let refs = claim.metadata.owner_references.unwrap();
        assert_eq!(
            (refs[0].kind.as_str(), refs[0].uid.as_str()),
            ("StatefulSet", "set-uid")
        );
    }
}
