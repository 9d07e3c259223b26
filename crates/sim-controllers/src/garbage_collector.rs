//! The garbage collector: deletes objects whose owners are gone and carries out the
//! foreground and orphan propagation policies, following kube-controller-manager's
//! `garbagecollector` (`attemptToDeleteItem`, `processDeletingDependentsItem`,
//! `attemptToOrphan`).
//!
//! # Guarantees
//! - An owner is judged absent only after a live GET (404, or another UID): a dependent is
//!   never deleted because a cache lagged.
//! - Deletes carry a UID precondition, so a recreated object of the same name survives.
//! - A cluster-scoped dependent of a namespaced owner is never collected.
//!
//! # Caveats
//! - Dependents are found in the watch caches, as upstream finds them in its graph: a
//!   dependent created a moment before its owner's deletion may be missed by foreground and
//!   orphan processing (it is then collected as dangling, or keeps its reference).
//! - Events (core and events.k8s.io) are ignored, as upstream ignores them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{
    DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use serde_json::{Value, json};

use super::dynamic::{Hub, ResourceInfo, WeakHub};
use super::informer::{AbortOnDrop, Change};
use super::queue::Queue;
use super::support::{has_finalizer, is_conflict, is_deleting, is_not_found};

/// The finalizer of the Orphan propagation policy.
pub const ORPHAN: &str = "orphan";
/// The finalizer of the Foreground propagation policy.
pub const FOREGROUND: &str = "foregroundDeletion";

/// Errors of one garbage-collection step (the item is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// An owner reference names a kind that no served resource has (yet).
    #[error("owner reference to unknown kind {kind} in {api_version}")]
    UnknownKind {
        /// The reference's apiVersion.
        api_version: String,
        /// The reference's kind.
        kind: String,
    },
    /// An object kept changing under a patch.
    #[error("{what} kept changing; giving up for now")]
    Contended {
        /// Which object.
        what: String,
    },
}

/// An object as the collector tracks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Identity {
    group: String,
    plural: String,
    namespace: String,
    name: String,
    uid: String,
}

impl Identity {
    fn of(info: &ResourceInfo, object: &DynamicObject) -> Self {
        let meta = &object.metadata;
        Self {
            group: info.ar.group.clone(),
            plural: info.ar.plural.clone(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        if self.namespace.is_empty() {
            write!(f, "{}.{group} {}", self.plural, self.name)
        } else {
            write!(
                f,
                "{}.{group} {}/{}",
                self.plural, self.namespace, self.name
            )
        }
    }
}

/// Work for the collector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Item {
    /// Check the owners of an object (and, if it waits for its dependents, those).
    AttemptToDelete(Identity),
    /// Remove an owner's references from its dependents, then its `orphan` finalizer.
    AttemptToOrphan(Identity),
}

fn is_ignored(info: &ResourceInfo) -> bool {
    info.is("", "events") || info.is("events.k8s.io", "events")
}

fn owner_refs(meta: &ObjectMeta) -> &[OwnerReference] {
    meta.owner_references.as_deref().unwrap_or_default()
}

fn uid(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

fn waits_for_dependents(meta: &ObjectMeta) -> bool {
    is_deleting(meta) && has_finalizer(meta, FOREGROUND)
}

struct Collector {
    hub: WeakHub,
    client: Client,
    queue: Queue<Item>,
    delay: Duration,
}

/// Subscribes the collector to `hub` and starts its worker.
pub(crate) fn start(hub: &Hub, client: Client, delay: Duration) -> AbortOnDrop {
    let collector = Arc::new(Collector {
        hub: hub.downgrade(),
        client,
        queue: Queue::new(),
        delay,
    });
    let observer = collector.clone();
    hub.subscribe(move |info, change| observer.observe(info, change));
    AbortOnDrop::spawn(async move { collector.run().await })
}

impl Collector {
    fn enqueue(&self, item: Item) {
        self.queue.add_after(item, self.delay);
    }

    /// The cached object an owner reference points at (same UID), if cached.
    fn cached_owner(
        hub: &Hub,
        namespace: &str,
        reference: &OwnerReference,
    ) -> Option<(ResourceInfo, Arc<DynamicObject>)> {
        let info = hub.resource_for(&reference.api_version, &reference.kind)?;
        let ns = if info.namespaced { namespace } else { "" };
        let cache = hub.cache(&info.ar.group, &info.ar.plural)?;
        let owner = cache.get(ns, &reference.name)?;
        (uid(&owner.metadata) == reference.uid).then_some((info, owner))
    }

    /// Whether the cache shows this reference's owner alive and not waiting for its
    /// dependents (references that can never be judged count as solid here).
    fn solid_in_cache(hub: &Hub, namespace: &str, reference: &OwnerReference) -> bool {
        if let Some(info) = hub.resource_for(&reference.api_version, &reference.kind)
            && namespace.is_empty()
            && info.namespaced
        {
            return true;
        }
        Self::cached_owner(hub, namespace, reference)
            .is_some_and(|(_, owner)| !waits_for_dependents(&owner.metadata))
    }

    /// Dependents of `owner` in the caches: objects with a reference to its UID (in its
    /// namespace when it is namespaced).
    fn dependents(
        hub: &Hub,
        owner: &Identity,
        owner_namespaced: bool,
    ) -> Vec<(ResourceInfo, Arc<DynamicObject>)> {
        let mut found = Vec::new();
        for (info, cache) in hub.caches() {
            if is_ignored(&info) {
                continue;
            }
            let objects = if owner_namespaced {
                if !info.namespaced {
                    continue;
                }
                cache.list_in(&owner.namespace)
            } else {
                cache.list()
            };
            for object in objects {
                if owner_refs(&object.metadata)
                    .iter()
                    .any(|r| r.uid == owner.uid)
                {
                    found.push((info.clone(), object));
                }
            }
        }
        found
    }

    /// Reacts to a change seen by any monitor (the graph builder's part).
    fn observe(&self, info: &ResourceInfo, change: &Change<DynamicObject>) {
        if is_ignored(info) {
            return;
        }
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        match change {
            Change::Applied { old, new } => {
                let meta = &new.metadata;
                let id = Identity::of(info, new);
                let namespace = meta.namespace.clone().unwrap_or_default();
                if is_deleting(meta) {
                    if has_finalizer(meta, ORPHAN) {
                        self.enqueue(Item::AttemptToOrphan(id.clone()));
                    }
                    if has_finalizer(meta, FOREGROUND) {
                        self.enqueue(Item::AttemptToDelete(id.clone()));
                        for (dep_info, dep) in Self::dependents(&hub, &id, info.namespaced) {
                            self.enqueue(Item::AttemptToDelete(Identity::of(&dep_info, &dep)));
                        }
                    }
                }
                let refs = owner_refs(meta);
                if refs
                    .iter()
                    .any(|r| !Self::solid_in_cache(&hub, &namespace, r))
                {
                    self.enqueue(Item::AttemptToDelete(id));
                }
                // A reference that went away may unblock an owner waiting for it.
                if let Some(old) = old {
                    for gone in owner_refs(&old.metadata)
                        .iter()
                        .filter(|o| !refs.iter().any(|r| r.uid == o.uid))
                    {
                        self.recheck_waiting_owner(&hub, &namespace, gone);
                    }
                }
            }
            Change::Deleted(object) => {
                let id = Identity::of(info, object);
                for (dep_info, dep) in Self::dependents(&hub, &id, info.namespaced) {
                    self.enqueue(Item::AttemptToDelete(Identity::of(&dep_info, &dep)));
                }
                let namespace = object.metadata.namespace.clone().unwrap_or_default();
                for reference in owner_refs(&object.metadata) {
                    self.recheck_waiting_owner(&hub, &namespace, reference);
                }
            }
        }
    }

    fn recheck_waiting_owner(&self, hub: &Hub, namespace: &str, reference: &OwnerReference) {
        if let Some((owner_info, owner)) = Self::cached_owner(hub, namespace, reference)
            && waits_for_dependents(&owner.metadata)
        {
            self.enqueue(Item::AttemptToDelete(Identity::of(&owner_info, &owner)));
        }
    }

    async fn run(self: Arc<Self>) {
        let mut synced = false;
        loop {
            let item = self.queue.next().await;
            let Some(hub) = self.hub.upgrade() else {
                return;
            };
            if !synced {
                hub.wait_synced(Duration::from_secs(30)).await;
                synced = true;
            }
            let result = match &item {
                Item::AttemptToDelete(id) => self.attempt_to_delete(&hub, id).await,
                Item::AttemptToOrphan(id) => self.attempt_to_orphan(&hub, id).await,
            };
            match result {
                Ok(()) => self.queue.forget(&item),
                Err(error) => {
                    tracing::debug!(?item, error = %super::support::error_chain(&error), "garbage collection step failed; retrying");
                    self.queue.add_rate_limited(item.clone());
                }
            }
            self.queue.done(&item);
        }
    }

    /// The live object, if it still is the one `id` names.
    async fn live(
        &self,
        info: &ResourceInfo,
        id: &Identity,
    ) -> Result<Option<DynamicObject>, Error> {
        let object = info
            .api(&self.client, &id.namespace)
            .get_opt(&id.name)
            .await?;
        Ok(object.filter(|o| uid(&o.metadata) == id.uid))
    }

    async fn attempt_to_delete(&self, hub: &Hub, id: &Identity) -> Result<(), Error> {
        let Some(info) = hub.resource(&id.group, &id.plural) else {
            return Ok(());
        };
        let Some(latest) = self.live(&info, id).await? else {
            return Ok(());
        };
        let meta = &latest.metadata;
        if is_deleting(meta) {
            if has_finalizer(meta, FOREGROUND) {
                return self
                    .process_deleting_dependents(hub, &info, id, &latest)
                    .await;
            }
            return Ok(());
        }
        let refs = owner_refs(meta).to_vec();
        if refs.is_empty() {
            return Ok(());
        }
        let mut solid = Vec::new();
        let mut dangling = Vec::new();
        let mut waiting = Vec::new();
        for reference in &refs {
            let owner_info = hub
                .resource_for(&reference.api_version, &reference.kind)
                .ok_or_else(|| Error::UnknownKind {
                    api_version: reference.api_version.clone(),
                    kind: reference.kind.clone(),
                })?;
            if id.namespace.is_empty() && owner_info.namespaced {
                tracing::warn!(object = %id, owner = %reference.name, "a cluster-scoped object cannot have a namespaced owner; never collected");
                return Ok(());
            }
            let namespace = if owner_info.namespaced {
                id.namespace.as_str()
            } else {
                ""
            };
            let owner = match Self::cached_owner(hub, namespace, reference) {
                Some((_, cached)) => Some(cached.metadata.clone()),
                None => owner_info
                    .api(&self.client, namespace)
                    .get_opt(&reference.name)
                    .await?
                    .map(|o| o.metadata),
            };
            match owner {
                Some(owner) if uid(&owner) == reference.uid => {
                    if waits_for_dependents(&owner) {
                        waiting.push(reference.clone());
                    } else {
                        solid.push(reference.clone());
                    }
                }
                _ => dangling.push(reference.clone()),
            }
        }
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(());
            }
            let gone: Vec<String> = dangling
                .iter()
                .chain(waiting.iter())
                .map(|r| r.uid.clone())
                .collect();
            tracing::debug!(object = %id, ?gone, "removing references to owners that are gone or going");
            return self.remove_references(&info, id, &gone).await;
        }
        if !waiting.is_empty() && !Self::dependents(hub, id, info.namespaced).is_empty() {
            let blocking = Self::dependents(hub, id, info.namespaced)
                .iter()
                .any(|(_, d)| waits_for_dependents(&d.metadata));
            if blocking {
                // A dependent waits for this object, which waits for its owner: unblock the
                // owner to break the cycle (upstream's conservative cycle breaking).
                self.unblock_owners(&info, id).await?;
            }
            return self.delete(&info, id, PropagationPolicy::Foreground).await;
        }
        let policy = if has_finalizer(meta, ORPHAN) {
            PropagationPolicy::Orphan
        } else if has_finalizer(meta, FOREGROUND) {
            PropagationPolicy::Foreground
        } else {
            PropagationPolicy::Background
        };
        tracing::debug!(object = %id, ?policy, "deleting an object whose owners are all gone");
        self.delete(&info, id, policy).await
    }

    async fn delete(
        &self,
        info: &ResourceInfo,
        id: &Identity,
        policy: PropagationPolicy,
    ) -> Result<(), Error> {
        let params = DeleteParams {
            propagation_policy: Some(policy),
            preconditions: Some(Preconditions {
                uid: Some(id.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match info
            .api(&self.client, &id.namespace)
            .delete(&id.name, &params)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Foreground deletion of `owner`: when no dependent blocks it any more, remove the
    /// `foregroundDeletion` finalizer; otherwise make sure the blocking ones are deleted.
    async fn process_deleting_dependents(
        &self,
        hub: &Hub,
        info: &ResourceInfo,
        id: &Identity,
        owner: &DynamicObject,
    ) -> Result<(), Error> {
        hub.refresh(Duration::from_secs(5)).await;
        let blocking: Vec<_> = Self::dependents(hub, id, info.namespaced)
            .into_iter()
            .filter(|(_, d)| {
                owner_refs(&d.metadata)
                    .iter()
                    .any(|r| r.uid == id.uid && r.block_owner_deletion == Some(true))
            })
            .collect();
        if blocking.is_empty() {
            tracing::debug!(object = %id, "no dependent blocks it any more; removing foregroundDeletion");
            return self
                .remove_finalizer(info, id, Some(owner.clone()), FOREGROUND)
                .await;
        }
        for (dep_info, dep) in blocking {
            if !waits_for_dependents(&dep.metadata) {
                self.queue
                    .add(Item::AttemptToDelete(Identity::of(&dep_info, &dep)));
            }
        }
        Ok(())
    }

    async fn attempt_to_orphan(&self, hub: &Hub, id: &Identity) -> Result<(), Error> {
        let Some(info) = hub.resource(&id.group, &id.plural) else {
            return Ok(());
        };
        let Some(latest) = self.live(&info, id).await? else {
            return Ok(());
        };
        if !has_finalizer(&latest.metadata, ORPHAN) {
            return Ok(());
        }
        hub.refresh(Duration::from_secs(5)).await;
        for (dep_info, dep) in Self::dependents(hub, id, info.namespaced) {
            let dep_id = Identity::of(&dep_info, &dep);
            tracing::debug!(owner = %id, dependent = %dep_id, "orphaning");
            self.remove_references(&dep_info, &dep_id, std::slice::from_ref(&id.uid))
                .await?;
        }
        self.remove_finalizer(&info, id, Some(latest), ORPHAN).await
    }

    /// Removes the references to `owners` from an object: a strategic merge patch with
    /// `$patch: delete` and a UID precondition (what upstream sends for built-in types),
    /// falling back to a JSON merge patch of the whole list guarded by the
    /// resourceVersion when the type takes no strategic merge patch (custom resources).
    async fn remove_references(
        &self,
        info: &ResourceInfo,
        id: &Identity,
        owners: &[String],
    ) -> Result<(), Error> {
        let api = info.api(&self.client, &id.namespace);
        let deletes: Vec<Value> = owners
            .iter()
            .map(|u| json!({"$patch": "delete", "uid": u}))
            .collect();
        let strategic = json!({"metadata": {"ownerReferences": deletes, "uid": id.uid}});
        match api
            .patch(
                &id.name,
                &PatchParams::default(),
                &Patch::Strategic(strategic),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_not_found(&e) => return Ok(()),
            // 415: no strategic merge for this type. 400/422: a server that does not
            // understand the directive; the merge patch below says the same plainly.
            Err(e) if matches!(super::support::code(&e), Some(400 | 415 | 422)) => {}
            Err(e) => return Err(e.into()),
        }
        for _ in 0..5 {
            let Some(latest) = self.live(info, id).await? else {
                return Ok(());
            };
            let refs = owner_refs(&latest.metadata);
            let kept: Vec<&OwnerReference> =
                refs.iter().filter(|r| !owners.contains(&r.uid)).collect();
            if kept.len() == refs.len() {
                return Ok(());
            }
            let list = if kept.is_empty() {
                Value::Null
            } else {
                json!(kept)
            };
            let merge = json!({"metadata": {
                "ownerReferences": list,
                "resourceVersion": latest.metadata.resource_version,
                "uid": id.uid,
            }});
            match api
                .patch(&id.name, &PatchParams::default(), &Patch::Merge(merge))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Contended {
            what: id.to_string(),
        })
    }

    /// Sets `blockOwnerDeletion: false` on every blocking reference of an object.
    async fn unblock_owners(&self, info: &ResourceInfo, id: &Identity) -> Result<(), Error> {
        let api = info.api(&self.client, &id.namespace);
        for _ in 0..5 {
            let Some(latest) = self.live(info, id).await? else {
                return Ok(());
            };
            let mut refs = owner_refs(&latest.metadata).to_vec();
            let mut changed = false;
            for r in &mut refs {
                if r.block_owner_deletion == Some(true) {
                    r.block_owner_deletion = Some(false);
                    changed = true;
                }
            }
            if !changed {
                return Ok(());
            }
            let merge = json!({"metadata": {
                "ownerReferences": refs,
                "resourceVersion": latest.metadata.resource_version,
                "uid": id.uid,
            }});
            match api
                .patch(&id.name, &PatchParams::default(), &Patch::Merge(merge))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Contended {
            what: id.to_string(),
        })
    }

    /// Removes `finalizer` with a merge patch guarded by the resourceVersion, re-reading
    /// on conflict (upstream's `removeFinalizer`).
    async fn remove_finalizer(
        &self,
        info: &ResourceInfo,
        id: &Identity,
        mut latest: Option<DynamicObject>,
        finalizer: &str,
    ) -> Result<(), Error> {
        let api = info.api(&self.client, &id.namespace);
        for _ in 0..5 {
            let object = match latest.take() {
                Some(o) => o,
                None => match self.live(info, id).await? {
                    Some(o) => o,
                    None => return Ok(()),
                },
            };
            if !has_finalizer(&object.metadata, finalizer) {
                return Ok(());
            }
            let kept: Vec<&String> = object
                .metadata
                .finalizers
                .iter()
                .flatten()
                .filter(|f| *f != finalizer)
                .collect();
            let list = if kept.is_empty() {
                Value::Null
            } else {
                json!(kept)
            };
            let merge = json!({"metadata": {
                "finalizers": list,
                "resourceVersion": object.metadata.resource_version,
            }});
            match api
                .patch(&id.name, &PatchParams::default(), &Patch::Merge(merge))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Contended {
            what: id.to_string(),
        })
    }
}
