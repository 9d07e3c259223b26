//! PersistentVolumeClaims bound to PersistentVolumes: kube-controller-manager's
//! PersistentVolume controller (`persistentvolume-binder`, upstream's
//! `pkg/controller/volume/persistentvolume`) and a stand-in for kind's local-path
//! provisioner (`rancher.io/local-path`), which provisions a directory on the node the
//! scheduler chose.
//!
//! The binder, as upstream's:
//! - an unbound claim is bound to the smallest Available volume of its class that is not
//!   claimed, has its access modes and at least its requested size (or to the volume
//!   pre-bound to it by a `claimRef`, or the one it names in `volumeName`): the volume first
//!   (`claimRef`, `pv.kubernetes.io/bound-by-controller` when the controller chose it, phase
//!   Bound), then the claim (`volumeName`, `pv.kubernetes.io/bind-completed`,
//!   `pv.kubernetes.io/bound-by-controller` when it named none, then its status: phase
//!   Bound, access modes and capacity of the volume);
//! - a claim of a `WaitForFirstConsumer` class waits for the scheduler to reserve a volume
//!   for it ([`best_match_on_node`], [`reserved_for`]: then bound as one pre-bound) or to
//!   choose a node (`volume.kubernetes.io/selected-node`), with a `WaitForFirstConsumer` or
//!   `WaitForPodScheduled` Event; a claim whose class names a provisioner gets the
//!   `volume.kubernetes.io/storage-provisioner` annotations (and its beta twin) and an
//!   `ExternalProvisioning` Event, for that provisioner to act; a claim without a class
//!   and without a volume gets a `FailedBinding` Event. Each stays Pending; a claim that
//!   names no class gets the default StorageClass, if one was made after it;
//! - a volume without a claim is Available; one whose claim is gone is Released, then left
//!   to its provisioner (`pv.kubernetes.io/provisioned-by`) when its policy is Delete.
//!
//! The provisioner acts on the claims annotated for [`LOCAL_PATH_PROVISIONER`] once they
//! have a selected node, as the real one (through sig-storage-lib-external-provisioner):
//! the volume `pvc-<claim uid>` is a `hostPath` directory
//! `<root>/<node>/pvc-<uid>_<namespace>_<claim>` (mode 0777), with node affinity to that
//! node's `kubernetes.io/hostname`, the claim's access modes and requested size, the class's
//! reclaim policy and a `claimRef` to the claim; a Released volume of its own with policy
//! Delete loses its directory, then its object. Its Events (`Provisioning`,
//! `ProvisioningSucceeded`, `ProvisioningFailed`) name it as their source.
//!
//! # Caveats
//! - The real provisioner creates and removes directories through helper pods on the node;
//!   all simulated nodes share this host, so it writes under its root directly, one
//!   directory per node, and kind's `/var/local-path-provisioner` becomes that root.
//! - No label selectors on volumes (a claim with a `selector` matches none, and the
//!   provisioner refuses it as the real one does), no volume modes but Filesystem, no
//!   recycling, no resizing, no migration annotations.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, Pod,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};

use super::events::{EventType, Recorder};
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{is_conflict, is_deleting, is_not_found};

/// The provisioner the simulated cluster runs, as kind's StorageClass `standard` names it.
pub const LOCAL_PATH_PROVISIONER: &str = "rancher.io/local-path";
/// Set on a claim once its binding is complete.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a claim or volume the controller bound (not its author).
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The node the scheduler chose for a claim of a `WaitForFirstConsumer` class.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner asked to provision a claim.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The beta form of [`STORAGE_PROVISIONER`], still written beside it.
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The provisioner that made a volume.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// How often every claim and volume is synced again (`--pvclaimbinder-sync-period`).
const RESYNC: Duration = Duration::from_secs(15);

/// Errors of one claim's or volume's sync (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// A provisioned volume's directory could not be made or removed.
    #[error("cannot {action} the directory {path}")]
    Directory {
        /// `create` or `remove`.
        action: &'static str,
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The caches the binder and the provisioner read.
#[derive(Clone)]
pub(crate) struct Listers {
    pub(crate) claims: Cache<PersistentVolumeClaim>,
    pub(crate) volumes: Cache<PersistentVolume>,
    pub(crate) classes: Cache<StorageClass>,
    pub(crate) pods: Cache<Pod>,
    pub(crate) nodes: Cache<Node>,
}

fn annotation<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn annotate(meta: &mut ObjectMeta, key: &str, value: &str) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
}

/// The class a claim asks for (the beta annotation first, as upstream reads it).
pub(crate) fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    annotation(&claim.metadata, "volume.beta.kubernetes.io/storage-class")
        .or_else(|| {
            claim
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or_default()
}

fn volume_class(volume: &PersistentVolume) -> &str {
    annotation(&volume.metadata, "volume.beta.kubernetes.io/storage-class")
        .or_else(|| {
            volume
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or_default()
}

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

fn claim_key(claim: &PersistentVolumeClaim) -> String {
    format!("{}/{}", namespace(&claim.metadata), name(&claim.metadata))
}

fn volume_phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn claim_volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default()
}

fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref()?.claim_ref.as_ref()
}

/// The storage a claim requests, in bytes (0 when it names none).
fn requested(claim: &PersistentVolumeClaim) -> f64 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| sim_apiserver::objects::quantity(&q.0))
        .unwrap_or(0.0)
}

/// A volume's storage capacity, in bytes.
fn capacity(volume: &PersistentVolume) -> f64 {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| sim_apiserver::objects::quantity(&q.0))
        .unwrap_or(0.0)
}

fn access_modes(spec_modes: Option<&Vec<String>>) -> &[String] {
    spec_modes.map(Vec::as_slice).unwrap_or_default()
}

/// Whether the volume offers every access mode the claim asks for.
fn has_access_modes(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let offered = access_modes(volume.spec.as_ref().and_then(|s| s.access_modes.as_ref()));
    access_modes(claim.spec.as_ref().and_then(|s| s.access_modes.as_ref()))
        .iter()
        .all(|mode| offered.contains(mode))
}

/// Whether the volume is pre-bound or bound to the claim (`IsVolumeBoundToClaim`): same
/// name and namespace, and the same uid when the reference has one.
fn bound_to(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    claim_ref(volume).is_some_and(|r| {
        r.name.as_deref() == claim.metadata.name.as_deref()
            && r.namespace.as_deref() == claim.metadata.namespace.as_deref()
            && r.uid
                .as_deref()
                .filter(|uid| !uid.is_empty())
                .is_none_or(|uid| Some(uid) == claim.metadata.uid.as_deref())
    })
}

/// The volume upstream's `findBestMatchForClaim` picks for an unbound claim: of the volumes
/// with its access modes, enough storage and its attributes class, one reserved for it,
/// else (unless binding waits for a node) the smallest Available, unclaimed one of its
/// class.
fn best_match(
    volumes: &[Arc<PersistentVolume>],
    claim: &PersistentVolumeClaim,
    delay_binding: bool,
) -> Option<Arc<PersistentVolume>> {
    let mut best: Option<&Arc<PersistentVolume>> = None;
    for volume in volumes {
        // What every candidate must meet, one reserved for the claim too.
        if !has_access_modes(volume, claim)
            || (claim_ref(volume).is_some() && !bound_to(volume, claim))
            || capacity(volume) < requested(claim)
            || attributes_class(volume) != claim_attributes_class(claim)
            || is_deleting(&volume.metadata)
        {
            continue;
        }
        if bound_to(volume, claim) {
            return Some(volume.clone());
        }
        let selects = claim.spec.as_ref().is_some_and(|s| s.selector.is_some());
        if delay_binding
            || volume_phase(volume) != "Available"
            || selects
            || volume_class(volume) != claim_class(claim)
        {
            continue;
        }
        if best.is_none_or(|b| capacity(b) > capacity(volume)) {
            best = Some(volume);
        }
    }
    best.cloned()
}

/// The volume kube-scheduler's VolumeBinding plugin finds for an unbound claim of a
/// `WaitForFirstConsumer` class on `node` (upstream's `FindMatchingVolume` on the
/// scheduler's path): the one reserved for the claim if its node affinity admits the node
/// (none at all if it does not), else the smallest Available, unclaimed volume of its class
/// with its access modes, enough storage and node affinity to the node, leaving out the
/// volumes in `excluded` (chosen for the pod's other claims).
pub(crate) fn best_match_on_node(
    volumes: &[Arc<PersistentVolume>],
    claim: &PersistentVolumeClaim,
    node: &Node,
    excluded: &[String],
) -> Option<Arc<PersistentVolume>> {
    let mut best: Option<&Arc<PersistentVolume>> = None;
    for volume in volumes {
        if excluded.iter().any(|e| e == name(&volume.metadata))
            || (claim_ref(volume).is_some() && !bound_to(volume, claim))
            || capacity(volume) < requested(claim)
            || attributes_class(volume) != claim_attributes_class(claim)
            || is_deleting(&volume.metadata)
        {
            continue;
        }
        let fits = fits_node(volume, node);
        if bound_to(volume, claim) {
            return fits.then(|| volume.clone());
        }
        let selects = claim.spec.as_ref().is_some_and(|s| s.selector.is_some());
        if volume_phase(volume) != "Available"
            || selects
            || volume_class(volume) != claim_class(claim)
            || !fits
            || !has_access_modes(volume, claim)
        {
            continue;
        }
        if best.is_none_or(|b| capacity(b) > capacity(volume)) {
            best = Some(volume);
        }
    }
    best.cloned()
}

/// Whether the volume's required node affinity admits `node` (`CheckNodeAffinity`; a
/// volume without one admits every node).
pub(crate) fn fits_node(volume: &PersistentVolume, node: &Node) -> bool {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .is_none_or(|r| {
            r.node_selector_terms
                .iter()
                .any(|t| super::support::term_matches(t, node))
        })
}

/// The volume reserved for `claim` as kube-scheduler's PreBind reserves it
/// (`GetBindVolumeToClaim`): a `claimRef` to the claim and `bound-by-controller`, for the
/// binder to finish.
pub(crate) fn reserved_for(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> PersistentVolume {
    let mut volume = volume.clone();
    if !bound_to(&volume, claim) {
        volume.spec.get_or_insert_with(Default::default).claim_ref = Some(reference_to(claim));
    }
    if annotation(&volume.metadata, BOUND_BY_CONTROLLER).is_none() {
        annotate(&mut volume.metadata, BOUND_BY_CONTROLLER, "yes");
    }
    volume
}

fn attributes_class(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or_default()
}

fn claim_attributes_class(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or_default()
}

/// Why a volume a claim names cannot be bound to it (`checkVolumeSatisfyClaim`).
fn unsatisfied(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> Option<String> {
    if is_deleting(&volume.metadata) {
        return Some(format!(
            "the volume is marked for deletion {:?}",
            name(&volume.metadata)
        ));
    }
    if capacity(volume) < requested(claim) {
        return Some("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Some("storageClassName does not match".into());
    }
    if attributes_class(volume) != claim_attributes_class(claim) {
        return Some("volumeAttributesClassName does not match".into());
    }
    if !has_access_modes(volume, claim) {
        return Some("incompatible accessMode".into());
    }
    None
}

/// The default StorageClass (`GetDefaultClass`): of those annotated as the default, the
/// newest, then the first by name.
fn default_class(classes: &[Arc<StorageClass>]) -> Option<String> {
    let is_default = |class: &StorageClass| {
        [
            "storageclass.kubernetes.io/is-default-class",
            "storageclass.beta.kubernetes.io/is-default-class",
        ]
        .iter()
        .any(|key| annotation(&class.metadata, key) == Some("true"))
    };
    classes
        .iter()
        .filter(|class| is_default(class))
        .max_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| name(&b.metadata).cmp(name(&a.metadata)))
        })
        .map(|class| name(&class.metadata).to_string())
}

/// A reference to the claim as `reference.GetReference` makes it.
fn reference_to(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        name: claim.metadata.name.clone(),
        namespace: claim.metadata.namespace.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        field_path: None,
    }
}

// ---------------------------------------------------------------------------------------
// The binder.

struct Binder {
    client: Client,
    listers: Listers,
    recorder: Recorder,
    claims_queue: Queue<ObjectKey>,
    volumes_queue: Queue<ObjectKey>,
}

/// Subscribes the binder to its caches and starts its claim and volume workers.
pub(crate) fn start_binder(client: Client, listers: &Listers) -> AbortOnDrop {
    let binder = Arc::new(Binder {
        recorder: Recorder::new(client.clone(), "persistentvolume-controller"),
        client,
        listers: listers.clone(),
        claims_queue: Queue::new(),
        volumes_queue: Queue::new(),
    });
    let b = binder.clone();
    listers.claims.subscribe(move |change| {
        let claim = change.object();
        b.claims_queue.add(ObjectKey::of(claim.as_ref()));
        // A deleted claim releases its volume.
        if let Change::Deleted(claim) = change
            && !claim_volume_name(claim).is_empty()
        {
            b.volumes_queue
                .add(ObjectKey::new("", claim_volume_name(claim)));
        }
    });
    let b = binder.clone();
    listers.volumes.subscribe(move |change| {
        if let Change::Applied { new, .. } = change {
            b.volumes_queue.add(ObjectKey::of(new.as_ref()));
        }
    });
    AbortOnDrop::spawn(async move {
        binder.listers.claims.wait_ready().await;
        binder.listers.volumes.wait_ready().await;
        binder.listers.classes.wait_ready().await;
        binder.listers.pods.wait_ready().await;
        let claims = binder.clone();
        let volumes = binder.clone();
        let resync = binder.clone();
        tokio::join!(
            async move {
                loop {
                    let key = claims.claims_queue.next().await;
                    let outcome = claims.sync_claim(&key).await.map(|()| None);
                    if let Some(error) = claims.claims_queue.settle(&key, outcome) {
                        tracing::debug!(claim = %key, error = %super::support::error_chain(&error), "claim sync failed; retrying");
                    }
                }
            },
            async move {
                loop {
                    let key = volumes.volumes_queue.next().await;
                    let outcome = volumes.sync_volume(&key).await.map(|()| None);
                    if let Some(error) = volumes.volumes_queue.settle(&key, outcome) {
                        tracing::debug!(volume = %key, error = %super::support::error_chain(&error), "volume sync failed; retrying");
                    }
                }
            },
            async move {
                let mut ticker = tokio::time::interval(RESYNC);
                ticker.tick().await;
                loop {
                    ticker.tick().await;
                    for claim in resync.listers.claims.list() {
                        resync.claims_queue.add(ObjectKey::of(claim.as_ref()));
                    }
                    for volume in resync.listers.volumes.list() {
                        resync.volumes_queue.add(ObjectKey::of(volume.as_ref()));
                    }
                }
            },
        );
    })
}

impl Binder {
    fn claims_api(&self, namespace: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn volumes_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    fn event_on_claim(
        &self,
        claim: &PersistentVolumeClaim,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        self.recorder.record(
            "v1",
            "PersistentVolumeClaim",
            &claim.metadata,
            type_,
            reason,
            message,
        );
    }

    async fn sync_claim(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(claim) = self.listers.claims.get(&key.namespace, &key.name) else {
            return Ok(());
        };
        if annotation(&claim.metadata, BIND_COMPLETED).is_some() {
            return self.sync_bound_claim(&claim).await;
        }
        self.sync_unbound_claim(&claim).await
    }

    /// Whether binding the claim waits for a consumer (its class's `volumeBindingMode`).
    fn delays_binding(&self, claim: &PersistentVolumeClaim) -> bool {
        let class = claim_class(claim);
        !class.is_empty()
            && self
                .listers
                .classes
                .get("", class)
                .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
    }

    async fn sync_unbound_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), Error> {
        let wanted = claim_volume_name(claim);
        if wanted.is_empty() {
            let delay = self.delays_binding(claim);
            if let Some(volume) = best_match(&self.listers.volumes.list(), claim, delay) {
                return self.bind(&volume, claim).await;
            }
            if self.assign_default_class(claim).await? {
                return Ok(());
            }
            let class = claim_class(claim);
            if delay && annotation(&claim.metadata, SELECTED_NODE).is_none() {
                self.wait_for_first_consumer(claim);
            } else if !class.is_empty() {
                return self.provision(claim, class).await;
            } else {
                self.event_on_claim(
                    claim,
                    EventType::Normal,
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set",
                );
            }
            return self.update_claim_status(claim, "Pending", None).await;
        }
        let Some(volume) = self.listers.volumes.get("", wanted) else {
            return self.update_claim_status(claim, "Pending", None).await;
        };
        match claim_ref(&volume) {
            None => match unsatisfied(&volume, claim) {
                Some(why) => {
                    self.event_on_claim(
                        claim,
                        EventType::Warning,
                        "VolumeMismatch",
                        &format!("Cannot bind to requested volume {wanted:?}: {why}"),
                    );
                    self.update_claim_status(claim, "Pending", None).await
                }
                None => self.bind(&volume, claim).await,
            },
            Some(_) if bound_to(&volume, claim) => self.bind(&volume, claim).await,
            Some(_) => {
                self.event_on_claim(
                    claim,
                    EventType::Warning,
                    "FailedBinding",
                    &format!("volume {wanted:?} already bound to a different claim."),
                );
                self.update_claim_status(claim, "Pending", None).await
            }
        }
    }

    /// A bound claim whose volume is there and bound to it is kept Bound; one whose volume
    /// is gone is Lost.
    async fn sync_bound_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), Error> {
        let wanted = claim_volume_name(claim);
        if wanted.is_empty() {
            return self.update_claim_status(claim, "Lost", None).await;
        }
        match self.listers.volumes.get("", wanted) {
            None => self.update_claim_status(claim, "Lost", None).await,
            Some(volume) if claim_ref(&volume).is_none() || bound_to(&volume, claim) => {
                self.bind(&volume, claim).await
            }
            Some(_) => self.update_claim_status(claim, "Lost", None).await,
        }
    }

    /// Gives a claim that names no class the default StorageClass, if there is one
    /// (`assignDefaultStorageClass`: the admission plugin's choice, made for claims created
    /// while there was none). Whether the claim was updated.
    async fn assign_default_class(&self, claim: &PersistentVolumeClaim) -> Result<bool, Error> {
        let names_a_class = annotation(&claim.metadata, "volume.beta.kubernetes.io/storage-class")
            .is_some()
            || claim
                .spec
                .as_ref()
                .is_some_and(|s| s.storage_class_name.is_some());
        if names_a_class {
            return Ok(false);
        }
        let Some(default) = default_class(&self.listers.classes.list()) else {
            return Ok(false);
        };
        let mut updated = claim.clone();
        updated
            .spec
            .get_or_insert_with(Default::default)
            .storage_class_name = Some(default);
        self.claims_api(namespace(&claim.metadata))
            .replace(name(&claim.metadata), &PostParams::default(), &updated)
            .await?;
        Ok(true)
    }

    /// The Event of a claim waiting for a consumer (`emitEventForUnboundDelayBindingClaim`).
    fn wait_for_first_consumer(&self, claim: &PersistentVolumeClaim) {
        let claim_name = name(&claim.metadata);
        let mut waiting: Vec<String> = self
            .listers
            .pods
            .list_in(namespace(&claim.metadata))
            .iter()
            .filter(|pod| {
                pod.spec.as_ref().is_some_and(|s| {
                    s.node_name.as_deref().is_none_or(str::is_empty)
                        && s.volumes.iter().flatten().any(|v| {
                            v.persistent_volume_claim
                                .as_ref()
                                .is_some_and(|c| c.claim_name == claim_name)
                        })
                })
            })
            .map(|pod| name(&pod.metadata).to_string())
            .collect();
        waiting.sort();
        let (reason, message) = match waiting.as_slice() {
            [] => (
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding".to_string(),
            ),
            [one] => (
                "WaitForPodScheduled",
                format!("waiting for pod {one} to be scheduled"),
            ),
            many => (
                "WaitForPodScheduled",
                format!("waiting for pods {} to be scheduled", many.join(",")),
            ),
        };
        self.event_on_claim(claim, EventType::Normal, reason, &message);
    }

    /// Asks the class's provisioner for a volume (`provisionClaimOperationExternal`): the
    /// provisioner annotations, then an `ExternalProvisioning` Event. A missing class gets
    /// a `ProvisioningFailed` Event.
    async fn provision(&self, claim: &PersistentVolumeClaim, class: &str) -> Result<(), Error> {
        let Some(class) = self.listers.classes.get("", class) else {
            self.event_on_claim(
                claim,
                EventType::Warning,
                "ProvisioningFailed",
                &format!("storageclass.storage.k8s.io {class:?} not found"),
            );
            return self.update_claim_status(claim, "Pending", None).await;
        };
        let provisioner = class.provisioner.as_str();
        let mut claim = claim.clone();
        if annotation(&claim.metadata, STORAGE_PROVISIONER) != Some(provisioner)
            || annotation(&claim.metadata, BETA_STORAGE_PROVISIONER) != Some(provisioner)
        {
            annotate(&mut claim.metadata, STORAGE_PROVISIONER, provisioner);
            annotate(&mut claim.metadata, BETA_STORAGE_PROVISIONER, provisioner);
            claim = self
                .claims_api(namespace(&claim.metadata))
                .replace(name(&claim.metadata), &PostParams::default(), &claim)
                .await?;
        }
        self.event_on_claim(
            &claim,
            EventType::Normal,
            "ExternalProvisioning",
            &format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            ),
        );
        Ok(())
    }

    /// Binds volume and claim both ways (upstream's `bind`): the volume's `claimRef`, its
    /// phase, the claim's `volumeName` and annotations, its status.
    async fn bind(
        &self,
        volume: &PersistentVolume,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), Error> {
        let mut volume = volume.clone();
        let chosen_by_controller = !bound_to(&volume, claim);
        let mut dirty = false;
        let same_claim = claim_ref(&volume).is_some_and(|r| {
            r.name == claim.metadata.name
                && r.namespace == claim.metadata.namespace
                && r.uid == claim.metadata.uid
        });
        if !same_claim {
            volume
                .spec
                .get_or_insert_with(PersistentVolumeSpec::default)
                .claim_ref = Some(reference_to(claim));
            dirty = true;
        }
        if chosen_by_controller && annotation(&volume.metadata, BOUND_BY_CONTROLLER).is_none() {
            annotate(&mut volume.metadata, BOUND_BY_CONTROLLER, "yes");
            dirty = true;
        }
        if dirty {
            volume = self
                .volumes_api()
                .replace(name(&volume.metadata), &PostParams::default(), &volume)
                .await?;
        }
        let volume = self.update_volume_phase(&volume, "Bound").await?;

        let mut updated = claim.clone();
        let mut dirty = false;
        if claim_volume_name(claim) != name(&volume.metadata) {
            updated
                .spec
                .get_or_insert_with(Default::default)
                .volume_name = volume.metadata.name.clone();
            if annotation(&updated.metadata, BOUND_BY_CONTROLLER).is_none() {
                annotate(&mut updated.metadata, BOUND_BY_CONTROLLER, "yes");
            }
            dirty = true;
        }
        if annotation(&updated.metadata, BIND_COMPLETED).is_none() {
            annotate(&mut updated.metadata, BIND_COMPLETED, "yes");
            dirty = true;
        }
        if dirty {
            updated = self
                .claims_api(namespace(&claim.metadata))
                .replace(name(&claim.metadata), &PostParams::default(), &updated)
                .await?;
        }
        self.update_claim_status(&updated, "Bound", Some(&volume))
            .await
    }

    /// Writes the claim's phase, and its access modes and capacity from `volume` (reset
    /// without one), when they differ (`updateClaimStatus`).
    async fn update_claim_status(
        &self,
        claim: &PersistentVolumeClaim,
        phase: &str,
        volume: Option<&PersistentVolume>,
    ) -> Result<(), Error> {
        let mut updated = claim.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        let becoming = claim_phase(claim) != phase;
        status.phase = Some(phase.to_string());
        match volume {
            None => {
                status.access_modes = None;
                status.capacity = None;
                status.current_volume_attributes_class_name = None;
            }
            Some(volume) => {
                let spec = volume.spec.as_ref();
                status.access_modes = spec.and_then(|s| s.access_modes.clone());
                if becoming {
                    status.capacity = spec.and_then(|s| s.capacity.clone());
                    if claim_phase(claim) == "Pending" {
                        status.current_volume_attributes_class_name =
                            spec.and_then(|s| s.volume_attributes_class_name.clone());
                    }
                }
            }
        }
        if updated.status == claim.status {
            return Ok(());
        }
        match self
            .claims_api(namespace(&claim.metadata))
            .replace_status(name(&claim.metadata), &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the volume's phase when it differs (`updateVolumePhase`, message cleared).
    async fn update_volume_phase(
        &self,
        volume: &PersistentVolume,
        phase: &str,
    ) -> Result<PersistentVolume, Error> {
        if volume_phase(volume) == phase {
            return Ok(volume.clone());
        }
        let mut updated = volume.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        status.phase = Some(phase.to_string());
        status.message = None;
        Ok(self
            .volumes_api()
            .replace_status(name(&volume.metadata), &PostParams::default(), &updated)
            .await?)
    }

    async fn sync_volume(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(volume) = self.listers.volumes.get("", &key.name) else {
            return Ok(());
        };
        let Some(reference) = claim_ref(&volume).cloned() else {
            self.update_volume_phase(&volume, "Available").await?;
            return Ok(());
        };
        if reference.uid.as_deref().is_none_or(str::is_empty) {
            // Pre-bound: the claim's sync binds it.
            self.update_volume_phase(&volume, "Available").await?;
            return Ok(());
        }
        let ns = reference.namespace.clone().unwrap_or_default();
        let claim_name = reference.name.clone().unwrap_or_default();
        let mut claim = self.listers.claims.get(&ns, &claim_name);
        let released = matches!(volume_phase(&volume), "Released" | "Failed");
        if claim.is_none() && !released {
            // The cache may lag behind a claim just made: ask the server.
            claim = self
                .claims_api(&ns)
                .get_opt(&claim_name)
                .await?
                .map(Arc::new);
        }
        if let Some(found) = &claim
            && found.metadata.uid != reference.uid
        {
            claim = self
                .claims_api(&ns)
                .get_opt(&claim_name)
                .await?
                .filter(|c| c.metadata.uid == reference.uid)
                .map(Arc::new);
        }
        match claim {
            None => {
                if !released {
                    self.update_volume_phase(&volume, "Released").await?;
                }
                // Retain keeps it; Delete is its provisioner's; Recycle is not simulated.
                Ok(())
            }
            Some(claim) if claim_volume_name(&claim).is_empty() => {
                self.claims_queue.add(ObjectKey::of(claim.as_ref()));
                Ok(())
            }
            Some(claim) if claim_volume_name(&claim) == name(&volume.metadata) => {
                self.update_volume_phase(&volume, "Bound").await?;
                Ok(())
            }
            Some(_) => {
                // Bound to a claim bound elsewhere: released back to the pool.
                let provisioned = annotation(&volume.metadata, PROVISIONED_BY).is_some();
                let policy = volume
                    .spec
                    .as_ref()
                    .and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
                if provisioned && policy == Some("Delete") {
                    if !released {
                        self.update_volume_phase(&volume, "Released").await?;
                    }
                    return Ok(());
                }
                self.unbind(&volume).await
            }
        }
    }

    /// Rolls a binding back (`unbindVolume`): a volume the controller bound loses its
    /// `claimRef`, one its author pre-bound keeps it without the uid; either is Available.
    async fn unbind(&self, volume: &PersistentVolume) -> Result<(), Error> {
        let mut updated = volume.clone();
        if annotation(&volume.metadata, BOUND_BY_CONTROLLER).is_some() {
            if let Some(spec) = updated.spec.as_mut() {
                spec.claim_ref = None;
            }
            if let Some(annotations) = updated.metadata.annotations.as_mut() {
                annotations.remove(BOUND_BY_CONTROLLER);
            }
        } else if let Some(reference) = updated.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
            reference.uid = Some(String::new());
        }
        let updated = self
            .volumes_api()
            .replace(name(&volume.metadata), &PostParams::default(), &updated)
            .await?;
        self.update_volume_phase(&updated, "Available").await?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The local-path provisioner.

struct Provisioner {
    client: Client,
    listers: Listers,
    root: PathBuf,
    recorder: Recorder,
    claims_queue: Queue<ObjectKey>,
    volumes_queue: Queue<ObjectKey>,
}

/// Subscribes the provisioner to its caches and starts it; its volumes go under `root`.
pub(crate) fn start_provisioner(client: Client, listers: &Listers, root: PathBuf) -> AbortOnDrop {
    let provisioner = Arc::new(Provisioner {
        recorder: Recorder::new(client.clone(), LOCAL_PATH_PROVISIONER),
        client,
        listers: listers.clone(),
        root,
        claims_queue: Queue::new(),
        volumes_queue: Queue::new(),
    });
    let p = provisioner.clone();
    listers.claims.subscribe(move |change| {
        if let Change::Applied { new, .. } = change
            && wants_provisioning(new)
        {
            p.claims_queue.add(ObjectKey::of(new.as_ref()));
        }
    });
    let p = provisioner.clone();
    listers.volumes.subscribe(move |change| {
        if let Change::Applied { new, .. } = change
            && annotation(&new.metadata, PROVISIONED_BY) == Some(LOCAL_PATH_PROVISIONER)
        {
            p.volumes_queue.add(ObjectKey::of(new.as_ref()));
        }
    });
    AbortOnDrop::spawn(async move {
        provisioner.listers.claims.wait_ready().await;
        provisioner.listers.volumes.wait_ready().await;
        provisioner.listers.classes.wait_ready().await;
        provisioner.listers.nodes.wait_ready().await;
        let claims = provisioner.clone();
        let volumes = provisioner.clone();
        tokio::join!(
            async move {
                loop {
                    let key = claims.claims_queue.next().await;
                    let outcome = claims.provision(&key).await.map(|()| None);
                    if let Some(error) = claims.claims_queue.settle(&key, outcome) {
                        tracing::debug!(claim = %key, error = %super::support::error_chain(&error), "provisioning failed; retrying");
                    }
                }
            },
            async move {
                loop {
                    let key = volumes.volumes_queue.next().await;
                    let outcome = volumes.reclaim(&key).await.map(|()| None);
                    if let Some(error) = volumes.volumes_queue.settle(&key, outcome) {
                        tracing::debug!(volume = %key, error = %super::support::error_chain(&error), "deleting a volume failed; retrying");
                    }
                }
            },
        );
    })
}

/// Whether a claim waits for this provisioner: annotated for it, given a node, unbound.
fn wants_provisioning(claim: &PersistentVolumeClaim) -> bool {
    annotation(&claim.metadata, STORAGE_PROVISIONER) == Some(LOCAL_PATH_PROVISIONER)
        && annotation(&claim.metadata, SELECTED_NODE).is_some()
        && claim_volume_name(claim).is_empty()
        && !is_deleting(&claim.metadata)
}

/// The node affinity of a volume on the node whose host name is `hostname`.
fn on_node(hostname: &str) -> VolumeNodeAffinity {
    VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "kubernetes.io/hostname".into(),
                    operator: "In".into(),
                    values: Some(vec![hostname.to_string()]),
                }]),
                match_fields: None,
            }],
        }),
    }
}

impl Provisioner {
    fn refuse(&self, claim: &PersistentVolumeClaim, class: &str, why: &str) {
        self.recorder.record(
            "v1",
            "PersistentVolumeClaim",
            &claim.metadata,
            EventType::Warning,
            "ProvisioningFailed",
            &format!("failed to provision volume with StorageClass {class:?}: {why}"),
        );
    }

    async fn provision(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(claim) = self.listers.claims.get(&key.namespace, &key.name) else {
            return Ok(());
        };
        if !wants_provisioning(&claim) {
            return Ok(());
        }
        let volume_name = format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default());
        if self.listers.volumes.get("", &volume_name).is_some() {
            return Ok(());
        }
        let class_name = claim_class(&claim);
        let Some(class) = self.listers.classes.get("", class_name) else {
            return Ok(());
        };
        if class.provisioner != LOCAL_PATH_PROVISIONER {
            return Ok(());
        }
        let spec = claim.spec.clone().unwrap_or_default();
        if spec.selector.is_some() {
            self.refuse(&claim, class_name, "claim.Spec.Selector is not supported");
            return Ok(());
        }
        if access_modes(spec.access_modes.as_ref())
            .iter()
            .any(|m| m != "ReadWriteOnce" && m != "ReadWriteOncePod")
        {
            self.refuse(
                &claim,
                class_name,
                "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes",
            );
            return Ok(());
        }
        let node = annotation(&claim.metadata, SELECTED_NODE)
            .unwrap_or_default()
            .to_string();
        let hostname = self
            .listers
            .nodes
            .get("", &node)
            .and_then(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kubernetes.io/hostname").cloned())
            })
            .unwrap_or_else(|| node.clone());
        self.recorder.record(
            "v1",
            "PersistentVolumeClaim",
            &claim.metadata,
            EventType::Normal,
            "Provisioning",
            &format!(
                "External provisioner is provisioning volume for claim \"{}\"",
                claim_key(&claim)
            ),
        );
        let path = self.root.join(&node).join(format!(
            "{volume_name}_{}_{}",
            namespace(&claim.metadata),
            name(&claim.metadata)
        ));
        make_volume_dir(&path)?;
        let storage = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage").cloned());
        let volume = PersistentVolume {
            metadata: ObjectMeta {
                name: Some(volume_name.clone()),
                annotations: Some(BTreeMap::from([(
                    PROVISIONED_BY.to_string(),
                    LOCAL_PATH_PROVISIONER.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: spec.access_modes.clone(),
                capacity: storage.map(|q| BTreeMap::from([("storage".to_string(), q)])),
                claim_ref: Some(reference_to(&claim)),
                host_path: Some(HostPathVolumeSource {
                    path: path.display().to_string(),
                    type_: Some("DirectoryOrCreate".into()),
                }),
                node_affinity: Some(on_node(&hostname)),
                persistent_volume_reclaim_policy: Some(
                    class
                        .reclaim_policy
                        .clone()
                        .unwrap_or_else(|| "Delete".into()),
                ),
                storage_class_name: Some(class_name.to_string()),
                volume_mode: Some("Filesystem".into()),
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        };
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &volume).await {
            Ok(_) => {}
            Err(e) if super::support::code(&e) == Some(409) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        self.recorder.record(
            "v1",
            "PersistentVolumeClaim",
            &claim.metadata,
            EventType::Normal,
            "ProvisioningSucceeded",
            &format!("Successfully provisioned volume {volume_name}"),
        );
        Ok(())
    }

    /// Deletes a Released volume of its own whose policy is Delete: its directory, then
    /// its object.
    async fn reclaim(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(volume) = self.listers.volumes.get("", &key.name) else {
            return Ok(());
        };
        let spec = volume.spec.as_ref();
        let policy = spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
        if volume_phase(&volume) != "Released"
            || policy != Some("Delete")
            || annotation(&volume.metadata, PROVISIONED_BY) != Some(LOCAL_PATH_PROVISIONER)
            || is_deleting(&volume.metadata)
        {
            return Ok(());
        }
        if let Some(path) = spec
            .and_then(|s| s.host_path.as_ref())
            .map(|h| Path::new(&h.path))
            && path.starts_with(&self.root)
        {
            match std::fs::remove_dir_all(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(Error::Directory {
                        action: "remove",
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.delete(&key.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Makes a volume's directory, writable by every user (the setup script's `mkdir -m 0777`).
fn make_volume_dir(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    let fail = |source| Error::Directory {
        action: "create",
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(path).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(value: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(value).unwrap()
    }

    fn volume(value: serde_json::Value) -> Arc<PersistentVolume> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn available(name: &str, size: &str, class: &str) -> Arc<PersistentVolume> {
        volume(json!({"metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": class, "hostPath": {"path": "/x"}},
            "status": {"phase": "Available"}}))
    }

    fn data_claim(size: &str, class: Option<&str>) -> PersistentVolumeClaim {
        claim(
            json!({"metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": size}}}}),
        )
    }

    #[test]
    fn the_smallest_volume_of_the_claims_class_that_is_big_enough_is_chosen() {
        let volumes = vec![
            available("big", "10Gi", ""),
            available("small", "100Mi", ""),
            available("fits", "1Gi", ""),
            available("other-class", "1Gi", "fast"),
        ];
        let chosen = best_match(&volumes, &data_claim("500Mi", None), false).unwrap();
        assert_eq!(chosen.metadata.name.as_deref(), Some("fits"));
        assert!(best_match(&volumes, &data_claim("20Gi", None), false).is_none());
    }

    #[test]
    fn a_volume_pre_bound_to_the_claim_wins_even_when_binding_waits_for_a_consumer() {
        let pre_bound = volume(json!({"metadata": {"name": "mine"},
            "spec": {"capacity": {"storage": "1Gi"}, "storageClassName": "standard",
                     "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": "ns", "name": "data"}, "hostPath": {"path": "/x"}},
            "status": {"phase": "Available"}}));
        let volumes = vec![available("free", "1Gi", "standard"), pre_bound];
        let claim = data_claim("1Gi", Some("standard"));
        let chosen = best_match(&volumes, &claim, true).unwrap();
        assert_eq!(chosen.metadata.name.as_deref(), Some("mine"));
        assert!(best_match(&volumes[..1], &claim, true).is_none());
        let too_big = data_claim("2Gi", Some("standard"));
        assert!(
            best_match(&volumes, &too_big, true).is_none(),
            "a reserved volume too small is no match"
        );
    }

    #[test]
    fn on_a_node_the_smallest_available_volume_with_affinity_to_it_is_chosen() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}
        }))
        .unwrap();
        let pinned = |name: &str, size: &str, host: &str| {
            let mut v = available(name, size, "local").as_ref().clone();
            v.spec.as_mut().unwrap().node_affinity = Some(on_node(host));
            Arc::new(v)
        };
        let volumes = vec![
            pinned("elsewhere", "1Gi", "n2"),
            pinned("big", "10Gi", "n1"),
            pinned("small", "2Gi", "n1"),
            available("anywhere", "5Gi", "local"),
        ];
        let claim = data_claim("1Gi", Some("local"));
        let chosen = |excluded: &[String]| {
            best_match_on_node(&volumes, &claim, &node, excluded)
                .map(|v| name(&v.metadata).to_string())
        };
        assert_eq!(chosen(&[]).as_deref(), Some("small"));
        assert_eq!(chosen(&["small".into()]).as_deref(), Some("anywhere"));
        let reserved = reserved_for(&volumes[1], &claim);
        assert_eq!(
            reserved.spec.unwrap().claim_ref.unwrap().name.as_deref(),
            Some("data")
        );
        assert_eq!(
            annotation(&reserved.metadata, BOUND_BY_CONTROLLER),
            Some("yes")
        );
    }

    #[test]
    fn the_newest_default_class_is_the_default() {
        let class = |name: &str, created: &str, default: &str| {
            Arc::new(
                serde_json::from_value::<StorageClass>(json!({"metadata": {"name": name,
                    "creationTimestamp": created,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": default}},
                    "provisioner": "example.com/p"}))
                .unwrap(),
            )
        };
        let classes = vec![
            class("old", "2026-01-01T00:00:00Z", "true"),
            class("b", "2026-02-01T00:00:00Z", "true"),
            class("a", "2026-02-01T00:00:00Z", "true"),
            class("newest", "2026-03-01T00:00:00Z", "false"),
        ];
        assert_eq!(default_class(&classes).as_deref(), Some("a"));
        assert_eq!(default_class(&classes[3..]), None);
    }

    #[test]
    fn a_reference_with_another_uid_does_not_bind_the_claim() {
        let taken = volume(json!({"metadata": {"name": "old"},
            "spec": {"claimRef": {"namespace": "ns", "name": "data", "uid": "u0"}}}));
        assert!(!bound_to(&taken, &data_claim("1Gi", None)));
    }
}
