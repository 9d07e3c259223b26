//! The protection of storage objects being deleted, as kube-controller-manager's
//! pvc-protection, pv-protection and vac-protection controllers lift it: a claim stays while
//! a pod bound to a node uses it (a pod not bound to any node does not hold it), a volume
//! that is not bound goes, an attributes class stays while a claim names it, and a namespace
//! holding a claim and its pod goes whole.
//!
//! Neither control plane has nodes: the pod that holds a claim is bound by its `nodeName` to
//! a node that does not exist, and is deleted with a zero grace period, as no kubelet would
//! finish a graceful deletion. What is compared of each object is what protection decides:
//! its finalizers and whether it is being deleted (both PersistentVolume controllers write
//! the status of claims and volumes meanwhile; `volumes.rs` compares that).

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, normalize, parse_body, support, wait_until};

/// The namespace of these interactions (the shared one is deleted earlier in the list).
const NAMESPACE: &str = "volume-protection";
const CLASSES: &str = "/apis/storage.k8s.io/v1/volumeattributesclasses";
const VOLUMES: &str = "/api/v1/persistentvolumes";

fn claims() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims")
}

fn pods() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

fn claim(name: &str, class: Option<&str>) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name},
           "spec": {"accessModes": ["ReadWriteOnce"], "volumeAttributesClassName": class,
                    "resources": {"requests": {"storage": "1Gi"}}}})
}

/// A pod using `claim`, bound to `node` when one is given.
fn pod(name: &str, claim: &str, node: Option<&str>) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": node,
                    "containers": [{"name": "main", "image": "example/app:1"}],
                    "volumes": [{"name": "data",
                                 "persistentVolumeClaim": {"claimName": claim}}]}})
}

/// Sends a request as the admin and records its code and what protection decides of the
/// object it answers with (or the error's reason and message).
async fn protection(t: &super::Target, method: &str, path: &str, body: Value) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let (code, text) = support::raw(&t.admin, method, path, JSON, bytes).await;
    let answer = parse_body(text);
    let meta = &answer["metadata"];
    t.record(Answer {
        asked: format!("{method} {path}: protection"),
        code: i64::from(code),
        body: normalize(json!({
            "name": meta["name"], "finalizers": meta["finalizers"],
            "deletionTimestamp": meta["deletionTimestamp"],
            "reason": answer["reason"], "message": answer["message"],
        })),
    });
}

async fn gone(t: &super::Target, path: &str, what: &str) {
    wait_until(t, path, what, |code, _| code == 404).await;
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "volume protection: a claim stays while a pod bound to a node uses it",
            |t| {
                protection(
                    t,
                    "POST",
                    "/api/v1/namespaces",
                    json!({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": NAMESPACE}}),
                )
                .await;
                // Pods are admitted only once the namespace's default account exists.
                let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
                wait_until(t, &account, "the default account", |code, _| code == 200).await;
                for name in ["used", "spare", "wanted"] {
                    protection(t, "POST", &claims(), claim(name, None)).await;
                }
                protection(t, "POST", &pods(), pod("user", "used", Some("absent-node"))).await;
                protection(t, "POST", &pods(), pod("waiting", "wanted", None)).await;
                for name in ["used", "spare", "wanted"] {
                    let one = format!("{}/{name}", claims());
                    protection(t, "DELETE", &one, Value::Null).await;
                }
                gone(t, &format!("{}/spare", claims()), "the unused claim gone").await;
                gone(
                    t,
                    &format!("{}/wanted", claims()),
                    "the claim of a pod bound to no node gone",
                )
                .await;
                let used = format!("{}/used", claims());
                protection(t, "GET", &used, Value::Null).await;
                protection(
                    t,
                    "DELETE",
                    &format!("{}/user", pods()),
                    json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}),
                )
                .await;
                gone(t, &used, "the claim gone with its pod").await;
                protection(t, "GET", &used, Value::Null).await;
            }
        ),
        interaction!(
            "volume protection: a volume not bound, and an attributes class while a claim names it",
            |t| {
                for name in ["gold", "plain"] {
                    let class = json!({"apiVersion": "storage.k8s.io/v1",
                                       "kind": "VolumeAttributesClass",
                                       "metadata": {"name": name},
                                       "driverName": "example.com/csi",
                                       "parameters": {"iops": "3000"}});
                    protection(t, "POST", CLASSES, class).await;
                }
                protection(t, "POST", &claims(), claim("fancy", Some("gold"))).await;
                let volume = json!({"apiVersion": "v1", "kind": "PersistentVolume",
                                    "metadata": {"name": "volume-protection-disk"},
                                    "spec": {"capacity": {"storage": "1Gi"},
                                             "accessModes": ["ReadWriteOnce"],
                                             "hostPath": {"path": "/tmp/disk"}}});
                protection(t, "POST", VOLUMES, volume).await;
                let disk = format!("{VOLUMES}/volume-protection-disk");
                protection(t, "DELETE", &disk, Value::Null).await;
                gone(t, &disk, "the volume gone").await;
                for name in ["gold", "plain"] {
                    protection(t, "DELETE", &format!("{CLASSES}/{name}"), Value::Null).await;
                }
                gone(t, &format!("{CLASSES}/plain"), "the unnamed class gone").await;
                let gold = format!("{CLASSES}/gold");
                protection(t, "GET", &gold, Value::Null).await;
                let fancy = format!("{}/fancy", claims());
                protection(t, "DELETE", &fancy, Value::Null).await;
                gone(t, &fancy, "the claim gone").await;
                gone(t, &gold, "the class gone once no claim names it").await;
                protection(t, "GET", &gold, Value::Null).await;
            }
        ),
        interaction!(
            "volume protection: a namespace holding a claim and its pod goes whole",
            |t| {
                protection(t, "POST", &claims(), claim("kept", None)).await;
                // A pod bound to a missing node would stay Terminating until the pod garbage
                // collector's quarantine ends; one bound to none goes at once.
                protection(t, "POST", &pods(), pod("keeper", "kept", None)).await;
                let namespace = format!("/api/v1/namespaces/{NAMESPACE}");
                protection(t, "DELETE", &namespace, Value::Null).await;
                gone(t, &namespace, "the namespace gone").await;
                protection(t, "GET", &namespace, Value::Null).await;
            }
        ),
    ]
}
