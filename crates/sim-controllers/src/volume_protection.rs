//! The storage-object-in-use protection controllers: they remove the finalizers the API
//! server's admission puts on PersistentVolumeClaims, PersistentVolumes and
//! VolumeAttributesClasses once a deleted object is no longer in use, so that its deletion
//! (and that of a namespace holding it) completes. Each also puts its finalizer back on a
//! live object that lacks it. Follows upstream's `pkg/controller/volume/pvcprotection`,
//! `pvprotection` and `vacprotection`:
//!
//! - a claim is in use while a pod bound to a node names it in a `persistentVolumeClaim`
//!   volume, or in an `ephemeral` volume whose claim that pod controls and has not shut down
//!   (deleted with a zero grace period). A pod not bound to a node never holds a claim: the
//!   kubelet would refuse to start it with a claim being deleted. The pod cache is asked
//!   first, then a live list of the namespace's pods, as the cache may lag;
//! - a volume is in use while its phase is `Bound`;
//! - a class is in use while a claim names it (spec, current status or modification
//!   target) or a volume does (spec).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ContainerStatus, PersistentVolume, PersistentVolumeClaim, Pod, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, TypeMeta};
use kube::{Client, Resource};

use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{controller_of, has_finalizer, is_deleting, is_not_found};

/// The finalizer that protects a PersistentVolumeClaim.
pub const CLAIM_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// The finalizer that protects a PersistentVolume.
pub const VOLUME_FINALIZER: &str = "kubernetes.io/pv-protection";
/// The finalizer that protects a VolumeAttributesClass.
pub const CLASS_FINALIZER: &str = "kubernetes.io/vac-protection";

/// Errors of one object's processing (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

/// `storage.k8s.io/v1` VolumeAttributesClass, which the generated types do not have yet.
pub(crate) fn class_resource() -> ApiResource {
    ApiResource {
        group: "storage.k8s.io".into(),
        version: "v1".into(),
        api_version: "storage.k8s.io/v1".into(),
        kind: "VolumeAttributesClass".into(),
        plural: "volumeattributesclasses".into(),
    }
}

/// Being deleted and still holding `finalizer` (`protectionutil.IsDeletionCandidate`).
fn deletion_candidate(meta: &ObjectMeta, finalizer: &str) -> bool {
    is_deleting(meta) && has_finalizer(meta, finalizer)
}

/// Live and without `finalizer` (`protectionutil.NeedToAddFinalizer`).
fn lacks_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    !is_deleting(meta) && !has_finalizer(meta, finalizer)
}

/// What to do with an object's finalizer, if anything.
fn finalizer_change(meta: &ObjectMeta, finalizer: &str, in_use: bool) -> Option<bool> {
    if deletion_candidate(meta, finalizer) && !in_use {
        Some(false)
    } else if lacks_finalizer(meta, finalizer) {
        Some(true)
    } else {
        None
    }
}

/// Writes `object` back with `finalizer` present or absent, as an update guarded by its
/// resourceVersion. A conflict is an error (retried from the cache's newer state); a
/// missing object needs nothing.
async fn write_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
    present: bool,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut updated = object.clone();
    let finalizers = updated.meta_mut().finalizers.get_or_insert_with(Vec::new);
    finalizers.retain(|f| f != finalizer);
    if present {
        finalizers.push(finalizer.to_string());
    }
    let name = object.meta().name.clone().unwrap_or_default();
    match api.replace(&name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Works through `queue` for ever, retrying the keys that failed with backoff (a conflict
/// is retried once the cache holds the newer state).
async fn work<F, Fut>(queue: Queue<ObjectKey>, what: &'static str, process: F)
where
    F: Fn(ObjectKey) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    loop {
        let key = queue.next().await;
        let outcome = process(key.clone()).await.map(|()| None);
        if let Some(error) = queue.settle(&key, outcome) {
            tracing::debug!(what, object = %key, error = %super::support::error_chain(&error), "protection check failed; retrying");
        }
    }
}

// ---------------------------------------------------------------------------------------
// PersistentVolumeClaims.

struct ClaimProtection {
    client: Client,
    claims: Cache<PersistentVolumeClaim>,
    pods: Cache<Pod>,
    queue: Queue<ObjectKey>,
}

/// The claim an `ephemeral` volume of `pod` makes: `<pod>-<volume>`.
fn ephemeral_claim_name(pod: &Pod, volume: &Volume) -> String {
    format!(
        "{}-{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        volume.name
    )
}

fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

fn bound_to_a_node(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Deleted with a zero grace period: the kubelet is done with it, or it was force-deleted.
fn shut_down(pod: &Pod) -> bool {
    is_deleting(&pod.metadata) && pod.metadata.deletion_grace_period_seconds == Some(0)
}

/// Whether no container of the pod runs any more (`volumeutil.IsPodTerminated`).
fn terminated(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return is_deleting(&pod.metadata);
    };
    if matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
        return true;
    }
    let not_running = |statuses: &Option<Vec<ContainerStatus>>| {
        statuses.iter().flatten().all(|s| {
            s.state
                .as_ref()
                .is_some_and(|state| state.terminated.is_some() || state.waiting.is_some())
        })
    };
    is_deleting(&pod.metadata)
        && not_running(&status.init_container_statuses)
        && not_running(&status.container_statuses)
        && not_running(&status.ephemeral_container_statuses)
}

/// Whether `pod` holds `claim` (`podUsesPVC`).
fn uses(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    if !bound_to_a_node(pod) {
        return false;
    }
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    volumes(pod).iter().any(|volume| {
        let named = volume
            .persistent_volume_claim
            .as_ref()
            .is_some_and(|source| source.claim_name == claim_name);
        let ephemeral = volume.ephemeral.is_some()
            && !shut_down(pod)
            && ephemeral_claim_name(pod, volume) == claim_name
            && controller_of(&claim.metadata)
                .is_some_and(|owner| Some(owner.uid.as_str()) == pod.metadata.uid.as_deref());
        named || ephemeral
    })
}

/// Subscribes the claim protection controller to the claim and pod caches and starts it.
pub(crate) fn start_claim_protection(
    client: Client,
    claims: &Cache<PersistentVolumeClaim>,
    pods: &Cache<Pod>,
) -> AbortOnDrop {
    let controller = Arc::new(ClaimProtection {
        client,
        claims: claims.clone(),
        pods: pods.clone(),
        queue: Queue::new(),
    });
    let c = controller.clone();
    claims.subscribe(move |change| {
        if let Change::Applied { new, .. } = change
            && (deletion_candidate(&new.metadata, CLAIM_FINALIZER)
                || lacks_finalizer(&new.metadata, CLAIM_FINALIZER))
        {
            c.queue.add(ObjectKey::of(new.as_ref()));
        }
    });
    let c = controller.clone();
    pods.subscribe(move |change| match change {
        Change::Applied { old, new } => {
            c.enqueue_claims_of(new, false);
            // A pod replaced by another of the same name may have held other claims.
            if let Some(old) = old
                && old.metadata.uid != new.metadata.uid
            {
                c.enqueue_claims_of(old, true);
            }
        }
        Change::Deleted(pod) => c.enqueue_claims_of(pod, true),
    });
    AbortOnDrop::spawn(async move {
        controller.claims.wait_ready().await;
        controller.pods.wait_ready().await;
        let c = controller.clone();
        work(controller.queue.clone(), "claim", move |key| {
            let c = c.clone();
            async move { c.process(&key).await }
        })
        .await;
    })
}

impl ClaimProtection {
    /// Queues the claims of a pod that may no longer hold them: one deleted, terminated or
    /// not bound to a node.
    fn enqueue_claims_of(&self, pod: &Pod, deleted: bool) {
        if !deleted && !terminated(pod) && bound_to_a_node(pod) {
            return;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        for volume in volumes(pod) {
            if let Some(source) = &volume.persistent_volume_claim {
                self.queue
                    .add(ObjectKey::new(namespace, &source.claim_name));
            } else if volume.ephemeral.is_some() {
                self.queue.add(ObjectKey::new(
                    namespace,
                    &ephemeral_claim_name(pod, volume),
                ));
            }
        }
    }

    async fn process(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(claim) = self.claims.get(&key.namespace, &key.name) else {
            return Ok(());
        };
        let in_use =
            deletion_candidate(&claim.metadata, CLAIM_FINALIZER) && self.in_use(&claim).await?;
        let Some(present) = finalizer_change(&claim.metadata, CLAIM_FINALIZER, in_use) else {
            return Ok(());
        };
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &key.namespace);
        tracing::debug!(claim = %key, present, "writing the claim's protection finalizer");
        write_finalizer(&api, &claim, CLAIM_FINALIZER, present).await
    }

    /// Asks the pod cache, then, as it may lag, the API server.
    async fn in_use(&self, claim: &PersistentVolumeClaim) -> Result<bool, Error> {
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        if self
            .pods
            .list_in(namespace)
            .iter()
            .any(|pod| uses(pod, claim))
        {
            return Ok(true);
        }
        let live = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await?;
        Ok(live.items.iter().any(|pod| uses(pod, claim)))
    }
}

// ---------------------------------------------------------------------------------------
// PersistentVolumes.

struct VolumeProtection {
    client: Client,
    volumes: Cache<PersistentVolume>,
    queue: Queue<ObjectKey>,
}

fn bound(volume: &PersistentVolume) -> bool {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Bound")
}

/// Subscribes the volume protection controller to the volume cache and starts it.
pub(crate) fn start_volume_protection(
    client: Client,
    volumes: &Cache<PersistentVolume>,
) -> AbortOnDrop {
    let controller = Arc::new(VolumeProtection {
        client,
        volumes: volumes.clone(),
        queue: Queue::new(),
    });
    let c = controller.clone();
    volumes.subscribe(move |change| {
        if let Change::Applied { new, .. } = change
            && (deletion_candidate(&new.metadata, VOLUME_FINALIZER)
                || lacks_finalizer(&new.metadata, VOLUME_FINALIZER))
        {
            c.queue.add(ObjectKey::of(new.as_ref()));
        }
    });
    AbortOnDrop::spawn(async move {
        controller.volumes.wait_ready().await;
        let c = controller.clone();
        work(controller.queue.clone(), "volume", move |key| {
            let c = c.clone();
            async move { c.process(&key).await }
        })
        .await;
    })
}

impl VolumeProtection {
    async fn process(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(volume) = self.volumes.get("", &key.name) else {
            return Ok(());
        };
        let Some(present) = finalizer_change(&volume.metadata, VOLUME_FINALIZER, bound(&volume))
        else {
            return Ok(());
        };
        tracing::debug!(volume = %key, present, "writing the volume's protection finalizer");
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        write_finalizer(&api, &volume, VOLUME_FINALIZER, present).await
    }
}

// ---------------------------------------------------------------------------------------
// VolumeAttributesClasses.

struct ClassProtection {
    client: Client,
    classes: Cache<DynamicObject>,
    claims: Cache<PersistentVolumeClaim>,
    volumes: Cache<PersistentVolume>,
    queue: Queue<ObjectKey>,
}

/// The classes a claim names: wanted, current, and the target of a modification.
fn classes_of_claim(claim: &PersistentVolumeClaim) -> BTreeSet<String> {
    let status = claim.status.as_ref();
    [
        claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.clone()),
        status.and_then(|s| s.current_volume_attributes_class_name.clone()),
        status
            .and_then(|s| s.modify_volume_status.as_ref())
            .and_then(|m| m.target_volume_attributes_class_name.clone()),
    ]
    .into_iter()
    .flatten()
    .filter(|name| !name.is_empty())
    .collect()
}

/// The class a volume names.
fn classes_of_volume(volume: &PersistentVolume) -> BTreeSet<String> {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.clone())
        .filter(|name| !name.is_empty())
        .into_iter()
        .collect()
}

/// The classes `change` may have released: those the old state named and the new does
/// not, or all those of a deleted object.
fn released<K>(change: &Change<K>, classes: fn(&K) -> BTreeSet<String>) -> Vec<String> {
    match change {
        Change::Applied {
            old: Some(old),
            new,
        } => classes(old).difference(&classes(new)).cloned().collect(),
        Change::Applied { old: None, .. } => Vec::new(),
        Change::Deleted(last) => classes(last).into_iter().collect(),
    }
}

/// Subscribes the class protection controller to the class, claim and volume caches and
/// starts it.
pub(crate) fn start_class_protection(
    client: Client,
    classes: &Cache<DynamicObject>,
    claims: &Cache<PersistentVolumeClaim>,
    volumes: &Cache<PersistentVolume>,
) -> AbortOnDrop {
    let controller = Arc::new(ClassProtection {
        client,
        classes: classes.clone(),
        claims: claims.clone(),
        volumes: volumes.clone(),
        queue: Queue::new(),
    });
    let c = controller.clone();
    classes.subscribe(move |change| {
        if let Change::Applied { new, .. } = change
            && (deletion_candidate(&new.metadata, CLASS_FINALIZER)
                || lacks_finalizer(&new.metadata, CLASS_FINALIZER))
        {
            c.queue.add(ObjectKey::of(new.as_ref()));
        }
    });
    let c = controller.clone();
    claims.subscribe(move |change| {
        for name in released(change, classes_of_claim) {
            c.queue.add(ObjectKey::new("", &name));
        }
    });
    let c = controller.clone();
    volumes.subscribe(move |change| {
        for name in released(change, classes_of_volume) {
            c.queue.add(ObjectKey::new("", &name));
        }
    });
    AbortOnDrop::spawn(async move {
        controller.classes.wait_ready().await;
        controller.claims.wait_ready().await;
        controller.volumes.wait_ready().await;
        let c = controller.clone();
        work(
            controller.queue.clone(),
            "volume attributes class",
            move |key| {
                let c = c.clone();
                async move { c.process(&key).await }
            },
        )
        .await;
    })
}

impl ClassProtection {
    fn in_use(&self, name: &str) -> bool {
        !self
            .volumes
            .filter(|v| classes_of_volume(v).contains(name))
            .is_empty()
            || !self
                .claims
                .filter(|c| classes_of_claim(c).contains(name))
                .is_empty()
    }

    async fn process(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(class) = self.classes.get("", &key.name) else {
            return Ok(());
        };
        let in_use = self.in_use(&key.name);
        let Some(present) = finalizer_change(&class.metadata, CLASS_FINALIZER, in_use) else {
            return Ok(());
        };
        tracing::debug!(class = %key, present, "writing the class's protection finalizer");
        let resource = class_resource();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let mut class = class.as_ref().clone();
        // Items of a list carry no apiVersion and kind; an update names them.
        class.types = Some(TypeMeta {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
        });
        write_finalizer(&api, &class, CLASS_FINALIZER, present).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"nodeName": node, "containers": [], "volumes": volumes},
        }))
        .unwrap()
    }

    fn claim(name: &str, owner_uid: Option<&str>) -> PersistentVolumeClaim {
        let owners = owner_uid.map(|uid| {
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid,
                    "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_pod_bound_to_a_node_holds_the_claim_it_names() {
        let volumes = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]);
        assert!(uses(&pod(Some("n"), volumes.clone()), &claim("c", None)));
        assert!(!uses(&pod(None, volumes.clone()), &claim("c", None)));
        assert!(!uses(&pod(Some("n"), volumes), &claim("other", None)));
    }

    #[test]
    fn an_ephemeral_claim_is_held_only_by_the_pod_that_controls_it() {
        let volumes =
            json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let bound = pod(Some("n"), volumes);
        assert!(uses(&bound, &claim("p-scratch", Some("pod-uid"))));
        assert!(!uses(&bound, &claim("p-scratch", Some("another-uid"))));
        let mut shut = bound.clone();
        shut.metadata.deletion_timestamp = Some(super::super::support::now());
        shut.metadata.deletion_grace_period_seconds = Some(0);
        assert!(!uses(&shut, &claim("p-scratch", Some("pod-uid"))));
    }

    #[test]
    fn a_live_object_gets_its_finalizer_back_and_a_deleted_unused_one_loses_it() {
        let live = ObjectMeta::default();
        assert_eq!(finalizer_change(&live, CLAIM_FINALIZER, false), Some(true));
        let deleted = ObjectMeta {
            deletion_timestamp: Some(super::super::support::now()),
            finalizers: Some(vec![CLAIM_FINALIZER.into()]),
            ..ObjectMeta::default()
        };
        assert_eq!(finalizer_change(&deleted, CLAIM_FINALIZER, true), None);
        assert_eq!(
            finalizer_change(&deleted, CLAIM_FINALIZER, false),
            Some(false)
        );
    }

    #[test]
    fn a_claim_names_its_wanted_current_and_target_classes() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"volumeAttributesClassName": "gold"},
            "status": {"currentVolumeAttributesClassName": "silver",
                       "modifyVolumeStatus": {"status": "InProgress",
                                              "targetVolumeAttributesClassName": "gold"}},
        }))
        .unwrap();
        assert_eq!(
            classes_of_claim(&claim).into_iter().collect::<Vec<_>>(),
            ["gold", "silver"]
        );
    }
}
