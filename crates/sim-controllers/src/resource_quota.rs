//! The resource quota controller, as kube-controller-manager's `pkg/controller/resourcequota`
//! runs it: each ResourceQuota's `status.hard` follows its `spec.hard`, and its
//! `status.used` is what the namespace's objects use of each limited resource, summed by
//! [`sim_apiserver::quota`]'s evaluators over every monitored resource type.
//!
//! A quota is synced when it is added, when its `spec.hard` changes, every five minutes,
//! and when its usage may have dropped: an object of a resource it limits is deleted, a pod
//! stops being charged (terminal, or past its deletion grace) or moves in or out of the
//! `Terminating` scope, a Service changes type, a claim's allocated storage or
//! VolumeAttributesClasses change (the quota monitor's replenishment). Creates are charged by the
//! ResourceQuota admission plugin, which writes `status.used` itself, not by this
//! controller, which would otherwise race the admission's own count.
//!
//! # Guarantees
//! - Usage is written only when it or the limits changed, by a status update that fails on
//!   a conflict (and is retried from a fresh read).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;
use sim_apiserver::quota;

use super::dynamic::{Hub, ResourceInfo, WeakHub};
use super::informer::{AbortOnDrop, Change, ObjectKey};
use super::queue::Queue;
use super::support::is_not_found;

/// How often every quota is synced again (`--resource-quota-sync-period`'s default).
const RESYNC: Duration = Duration::from_secs(300);

/// Errors of one sync (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// A quota could not be read as a ResourceQuota.
    #[error("the resource quota is not a valid object")]
    Decode(#[from] serde_json::Error),
}

struct Controller {
    hub: WeakHub,
    client: Client,
    queue: Queue<ObjectKey>,
}

/// Subscribes the controller to every monitored type and starts its worker.
pub(crate) fn start(hub: &Hub, client: Client) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        hub: hub.downgrade(),
        client,
        queue: Queue::new(),
    });
    let observer = controller.clone();
    hub.subscribe(move |info, change| observer.observe(info, change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

fn as_json(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}

impl Controller {
    fn observe(&self, info: &ResourceInfo, change: &Change<DynamicObject>) {
        if info.is("", "resourcequotas") {
            if let Change::Applied { old, new } = change {
                let hard = |o: &DynamicObject| as_json(o)["spec"]["hard"].clone();
                if old.as_ref().is_none_or(|old| hard(old) != hard(new)) {
                    self.queue.add(ObjectKey::of(new.as_ref()));
                }
            }
            return;
        }
        let replenish = match change {
            Change::Applied {
                old: Some(old),
                new,
            } => may_lower_usage(info, &as_json(old), &as_json(new)),
            Change::Applied { old: None, .. } => false,
            _ => true,
        };
        if !replenish {
            return;
        }
        let object = change.object();
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let Some(quotas) = hub.cache("", "resourcequotas") else {
            return;
        };
        for q in quotas.list_in(&namespace) {
            let hard = quota::hard_names(&as_json(&q), "status");
            if !quota::matching_resources(&info.ar.group, &info.ar.plural, &hard).is_empty() {
                self.queue.add(ObjectKey::of(q.as_ref()));
            }
        }
    }

    async fn run(self: Arc<Self>) {
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await.map(|()| Some(RESYNC));
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(quota = %key, error = %super::support::error_chain(&error), "resource quota sync failed; retrying");
            }
        }
    }

    /// `syncResourceQuota`: recomputes the usage of the quota `key` from the caches.
    async fn sync(&self, key: &ObjectKey) -> Result<(), Error> {
        let api: Api<ResourceQuota> = Api::namespaced(self.client.clone(), &key.namespace);
        let live = match api.get(&key.name).await {
            Ok(q) => q,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let Some(hub) = self.hub.upgrade() else {
            return Ok(());
        };
        let quota_json = serde_json::to_value(&live)?;
        let hard = quota::hard_names(&quota_json, "spec");
        let now = std::time::SystemTime::now();
        let mut used = quota_json["status"]["used"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (info, cache) in hub.caches() {
            if info.is("", "events") || info.is("events.k8s.io", "events") {
                continue;
            }
            if quota::matching_resources(&info.ar.group, &info.ar.plural, &hard).is_empty() {
                continue;
            }
            let objects: Vec<Value> = cache
                .list_in(&key.namespace)
                .iter()
                .map(|o| as_json(o))
                .collect();
            let usage =
                quota::usage_of(&quota_json, &info.ar.group, &info.ar.plural, &objects, now);
            if let Value::Object(usage) = quota::to_json(&usage) {
                used.extend(usage);
            }
        }
        used.retain(|name, _| hard.contains(name));
        let status = serde_json::json!({
            "hard": quota_json["spec"]["hard"].clone(),
            "used": Value::Object(used),
        });
        let current = &quota_json["status"];
        let dirty = current["hard"] != status["hard"]
            || current["used"] != status["used"]
            || current["hard"].is_null()
            || current["used"].is_null();
        if !dirty {
            return Ok(());
        }
        let mut updated = quota_json.clone();
        updated["status"] = status;
        let updated: ResourceQuota = serde_json::from_value(updated)?;
        api.replace_status(&key.name, &PostParams::default(), &updated)
            .await?;
        Ok(())
    }
}

/// Whether an update may lower what the object uses (the quota monitor's update filter):
/// a pod no longer charged or moved in or out of the `Terminating` scope, a Service of
/// another type, a claim whose allocated storage or VolumeAttributesClasses changed.
fn may_lower_usage(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    let now = std::time::SystemTime::now();
    match (info.ar.group.as_str(), info.ar.plural.as_str()) {
        ("", "pods") => {
            let charged =
                |p: &Value| quota::usage(&info.ar.group, "pods", p, now).contains_key("pods");
            (charged(old) && !charged(new))
                || quota::is_terminating(old) != quota::is_terminating(new)
        }
        ("", "services") => old["spec"]["type"] != new["spec"]["type"],
        ("", "persistentvolumeclaims") => quota::claim_requires_replenish(new, old),
        _ => false,
    }
}
