//! Store reconcile: a headless Service and a StatefulSet of busybox pods, each with a
//! claim from a volume claim template mounted at `/data`, into which it writes its name
//! and which it serves on port 8080; its readiness probe asks for that file, so a pod is
//! Ready once its volume holds it. The Store's status follows the StatefulSet's.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt as _};
use serde_json::json;

use crate::Context;
use crate::apply::{Result, apply, build, namespaced, owner_reference, write_status};
use crate::crd::{Condition, Store, StoreStatus};

/// The file each pod writes its name into, in its volume.
pub const WRITTEN: &str = "/data/written";

/// What each pod runs: it appends its name to its volume and serves the volume on its
/// address's port 8080 until SIGTERM, when it stops the server and leaves.
const SCRIPT: &str = "echo \"$POD_NAME\" >> /data/written\nhttpd -f -p \"$POD_IP:8080\" -h /data &\ntrap 'kill $!; exit 0' TERM\nwait\n";

/// The labels of a store's pods (and the selector of its StatefulSet and Service).
#[must_use]
pub fn labels(store: &Store) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "store".into()),
        ("app.kubernetes.io/instance".into(), store.name_any()),
    ])
}

/// The headless Service that names the store's pods.
///
/// # Errors
/// [`crate::apply::Error::Build`], which the literal JSON below does not give.
pub fn service(store: &Store, owner: &OwnerReference) -> Result<Service> {
    build(
        "Service",
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": store.name_any(), "ownerReferences": [owner]},
            "spec": {
                "clusterIP": "None",
                "selector": labels(store),
                "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]
            }
        }),
    )
}

/// The StatefulSet of the store's pods, run from `image` (a busybox).
///
/// # Errors
/// [`crate::apply::Error::Build`], which the literal JSON below does not give.
pub fn stateful_set(store: &Store, owner: &OwnerReference, image: &str) -> Result<StatefulSet> {
    build(
        "StatefulSet",
        json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": store.name_any(), "ownerReferences": [owner]},
            "spec": {
                "replicas": store.spec.replicas.max(0),
                "serviceName": store.name_any(),
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": labels(store)},
                "template": {
                    "metadata": {"labels": labels(store)},
                    "spec": {
                        "terminationGracePeriodSeconds": 5,
                        "containers": [{
                            "name": "store",
                            "image": image,
                            "command": ["sh", "-c", SCRIPT],
                            "env": [
                                {"name": "POD_NAME",
                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "POD_IP",
                                 "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                            ],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {
                                "httpGet": {"path": "/written", "port": "http"},
                                "periodSeconds": 1
                            },
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                        }]
                    }
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": store.spec.storage}}
                    }
                }]
            }
        }),
    )
}

/// The store's status as its StatefulSet reports it: Ready once the StatefulSet has
/// observed its current generation and every replica asked for is Ready.
#[must_use]
pub fn status(store: &Store, set: &StatefulSet) -> StoreStatus {
    let observed = set.status.as_ref().and_then(|s| s.observed_generation);
    let ready = set
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let wanted = store.spec.replicas.max(0);
    let current = observed.is_some() && observed == set.metadata.generation;
    let previous = store
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let condition = if current && ready == wanted {
        Condition::next(
            previous,
            "Ready",
            true,
            "AllReplicasReady",
            format!("{ready} of {wanted} replicas are ready"),
            store.metadata.generation,
        )
    } else {
        Condition::next(
            previous,
            "Ready",
            false,
            "ReplicasNotReady",
            format!("{ready} of {wanted} replicas are ready"),
            store.metadata.generation,
        )
    };
    StoreStatus {
        ready_replicas: ready,
        conditions: vec![condition],
    }
}

/// Applies the store's Service and StatefulSet and writes its status.
///
/// # Errors
/// When the store lacks metadata or a request fails.
pub async fn reconcile(store: Arc<Store>, context: Arc<Context>) -> Result<Action> {
    let owner = owner_reference(store.as_ref())?;
    let name = store.name_any();
    let services: Api<Service> = namespaced(&context.client, store.as_ref())?;
    apply(&services, &name, &service(&store, &owner)?, "apply Service").await?;
    let sets: Api<StatefulSet> = namespaced(&context.client, store.as_ref())?;
    let wanted = stateful_set(&store, &owner, &context.image)?;
    let set = apply(&sets, &name, &wanted, "apply StatefulSet").await?;
    let stores: Api<Store> = namespaced(&context.client, store.as_ref())?;
    write_status(&stores, store.as_ref(), status(&store, &set)).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::StoreSpec;

    fn store(replicas: i32) -> Store {
        let mut store = Store::new(
            "web",
            StoreSpec {
                replicas,
                storage: "1Gi".into(),
            },
        );
        store.metadata.generation = Some(3);
        store
    }

    fn reported(generation: i64, observed: i64, ready: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": generation},
            "spec": {"selector": {}, "template": {}, "serviceName": "web"},
            "status": {"replicas": 2, "observedGeneration": observed, "readyReplicas": ready}
        }))
        .unwrap()
    }

    #[test]
    fn a_store_is_ready_once_its_stateful_set_observed_its_generation_with_every_replica_ready() {
        let ready = status(&store(2), &reported(4, 4, 2));
        assert_eq!(ready.ready_replicas, 2);
        assert_eq!(ready.conditions[0].status, "True");
        assert_eq!(ready.conditions[0].observed_generation, Some(3));
        let stale = status(&store(2), &reported(5, 4, 2));
        assert_eq!(stale.conditions[0].status, "False");
        let short = status(&store(2), &reported(4, 4, 1));
        assert_eq!(short.conditions[0].status, "False");
        assert_eq!(short.conditions[0].message, "1 of 2 replicas are ready");
    }

    #[test]
    fn the_stateful_set_mounts_a_claim_per_pod_and_probes_the_file_written_into_it() {
        let owner = OwnerReference {
            name: "web".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        };
        let set =
            serde_json::to_value(stateful_set(&store(2), &owner, "busybox:1.36").unwrap()).unwrap();
        let spec = &set["spec"];
        assert_eq!(spec["replicas"], 2);
        assert_eq!(spec["volumeClaimTemplates"][0]["metadata"]["name"], "data");
        let container = &spec["template"]["spec"]["containers"][0];
        assert_eq!(container["volumeMounts"][0]["mountPath"], "/data");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/written");
        assert!(container["command"][2].as_str().unwrap().contains(WRITTEN));
        assert_eq!(set["metadata"]["ownerReferences"][0]["uid"], "u");
    }
}
