//! The PersistentVolume controller judged by kube-controller-manager's: volumes made by
//! hand become Available; a claim binds to the smallest that fits, to the one it names, or to
//! the one reserved for it by a `claimRef`, both ways, with the annotations, phases,
//! `claimRef` and status both controllers write; a claim deleted leaves its volume Released;
//! a claim nothing can satisfy stays Pending with the controller's Event (no volume and no
//! class, a missing class, a class of a provisioner neither cluster runs); a default
//! StorageClass is given to a claim that names none (not to one that names `""`), which
//! waits for its first consumer, then for that pod to be scheduled; claims, volumes and
//! classes as `kubectl get` prints them (their Tables, ages masked).
//!
//! Neither control plane has a default StorageClass nor a provisioner (the real one has none,
//! and the simulator's is left out for this comparison), so every volume is made here.

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, Target, normalize, parse_body, support, wait_until};

/// The namespace of these interactions (the shared one is deleted earlier in the list).
const NAMESPACE: &str = "volumes";
const VOLUMES: &str = "/api/v1/persistentvolumes";
const CLASSES: &str = "/apis/storage.k8s.io/v1/storageclasses";

fn claims() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims")
}

fn claim_path(name: &str) -> String {
    format!("{}/{name}", claims())
}

fn volume_path(name: &str) -> String {
    format!("{VOLUMES}/{name}")
}

/// A claim of `size`, with `extra` merged into its spec.
fn claim(name: &str, size: &str, extra: Value) -> Value {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"],
                          "resources": {"requests": {"storage": size}}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name}, "spec": spec})
}

/// A hostPath volume of `size` made by hand, with `extra` merged into its spec.
fn volume(name: &str, size: &str, extra: Value) -> Value {
    let mut spec = json!({"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                          "hostPath": {"path": format!("/tmp/{name}")}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
           "metadata": {"name": name}, "spec": spec})
}

async fn create(t: &Target, path: &str, body: Value) {
    let (code, text) = support::raw(
        &t.admin,
        "POST",
        path,
        JSON,
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{}: POST {path}: {text}", t.name);
}

/// Waits until the claim `name` names the class `class`.
async fn wait_for_class(t: &Target, name: &str, class: &'static str) {
    let path = claim_path(name);
    wait_until(
        t,
        &path,
        "the claim given the default class",
        |code, body| code == 200 && body["spec"]["storageClassName"] == class,
    )
    .await;
}

async fn delete(t: &Target, path: &str) {
    let (code, text) = support::raw(&t.admin, "DELETE", path, JSON, Vec::new()).await;
    assert!(
        (200..300).contains(&code),
        "{}: DELETE {path}: {text}",
        t.name
    );
}

fn phase_is(phase: &'static str) -> impl Fn(u16, &Value) -> bool {
    move |code, body| code == 200 && body["status"]["phase"] == phase
}

/// Records what binding decides of the object at `path`: its annotations, finalizers, spec
/// and status.
async fn record(t: &Target, path: &str) {
    let (code, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
    let object = parse_body(text);
    let meta = &object["metadata"];
    t.record(Answer {
        asked: format!("GET {path}: binding"),
        code: i64::from(code),
        body: normalize(json!({
            "annotations": meta["annotations"], "finalizers": meta["finalizers"],
            "spec": object["spec"], "status": object["status"],
        })),
    });
}

/// Waits until an Event of `reason` about the claim `name` is there, then records the
/// distinct Events about it (type, reason, message, source), sorted.
async fn record_claim_events(t: &Target, name: &str, reason: &str) {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/events");
    let about = |e: &Value| {
        e["involvedObject"]["kind"] == "PersistentVolumeClaim"
            && e["involvedObject"]["name"] == name
    };
    wait_until(
        t,
        &path,
        &format!("a {reason} Event about {name}"),
        |_, list| {
            list["items"]
                .as_array()
                .is_some_and(|items| items.iter().any(|e| about(e) && e["reason"] == reason))
        },
    )
    .await;
    let (_, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
    let mut events: Vec<Value> = parse_body(text)["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(about)
        .map(|e| {
            json!({"type": e["type"], "reason": e["reason"], "message": e["message"],
                   "source": e["source"], "reportingComponent": e["reportingComponent"]})
        })
        .collect();
    events.sort_by_key(ToString::to_string);
    events.dedup();
    t.record(Answer {
        asked: format!("the events of {name}"),
        code: 200,
        body: normalize(json!(events)),
    });
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "volumes: a claim binds to the smallest Available volume that fits, and releases it when deleted",
            |t| {
                create(
                    t,
                    "/api/v1/namespaces",
                    json!({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": NAMESPACE}}),
                )
                .await;
                for (name, size) in [
                    ("volumes-tiny", "100Mi"),
                    ("volumes-small", "1Gi"),
                    ("volumes-big", "5Gi"),
                ] {
                    create(t, VOLUMES, volume(name, size, json!({}))).await;
                    let path = volume_path(name);
                    wait_until(t, &path, "the volume Available", phase_is("Available")).await;
                }
                record(t, &volume_path("volumes-small")).await;
                create(t, &claims(), claim("data", "500Mi", json!({}))).await;
                wait_until(t, &claim_path("data"), "the claim Bound", phase_is("Bound")).await;
                let small = volume_path("volumes-small");
                wait_until(t, &small, "the volume Bound", phase_is("Bound")).await;
                record(t, &claim_path("data")).await;
                record(t, &small).await;
                record(t, &volume_path("volumes-big")).await;
                delete(t, &claim_path("data")).await;
                wait_until(t, &small, "the volume Released", phase_is("Released")).await;
                record(t, &small).await;
                for name in ["volumes-tiny", "volumes-small", "volumes-big"] {
                    delete(t, &volume_path(name)).await;
                    let path = volume_path(name);
                    wait_until(t, &path, "the volume gone", |code, _| code == 404).await;
                }
            }
        ),
        interaction!(
            "volumes: a claim naming a volume, and a volume reserved for a claim, bind",
            |t| {
                create(t, VOLUMES, volume("volumes-named", "1Gi", json!({}))).await;
                let reserved = json!({"claimRef": {"namespace": NAMESPACE, "name": "reserved"}});
                create(t, VOLUMES, volume("volumes-reserved", "2Gi", reserved)).await;
                let named = json!({"volumeName": "volumes-named"});
                create(t, &claims(), claim("named", "1Gi", named)).await;
                create(t, &claims(), claim("reserved", "1Gi", json!({}))).await;
                for name in ["named", "reserved"] {
                    wait_until(t, &claim_path(name), "the claim Bound", phase_is("Bound")).await;
                }
                for name in ["volumes-named", "volumes-reserved"] {
                    wait_until(t, &volume_path(name), "the volume Bound", phase_is("Bound")).await;
                }
                record(t, &claim_path("named")).await;
                record(t, &claim_path("reserved")).await;
                record(t, &volume_path("volumes-named")).await;
                record(t, &volume_path("volumes-reserved")).await;
                // As `kubectl get pvc,pv` shows them.
                super::tables::table(t, &format!("{}?includeObject=None", claims())).await;
                super::tables::table(t, &volume_path("volumes-reserved")).await;
                for name in ["named", "reserved"] {
                    delete(t, &claim_path(name)).await;
                }
                for name in ["volumes-named", "volumes-reserved"] {
                    let path = volume_path(name);
                    wait_until(t, &path, "the volume Released", phase_is("Released")).await;
                    delete(t, &path).await;
                    wait_until(t, &path, "the volume gone", |code, _| code == 404).await;
                }
            }
        ),
        interaction!(
            "volumes: claims nothing satisfies stay Pending with the controller's Events",
            |t| {
                let class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                   "metadata": {"name": "volumes-elsewhere"},
                                   "provisioner": "example.com/nfs"});
                create(t, CLASSES, class).await;
                create(t, &claims(), claim("lonely", "1Gi", json!({}))).await;
                let missing = json!({"storageClassName": "volumes-missing"});
                create(t, &claims(), claim("classless", "1Gi", missing)).await;
                let elsewhere = json!({"storageClassName": "volumes-elsewhere"});
                create(t, &claims(), claim("external", "1Gi", elsewhere)).await;
                record_claim_events(t, "lonely", "FailedBinding").await;
                record_claim_events(t, "classless", "ProvisioningFailed").await;
                record_claim_events(t, "external", "ExternalProvisioning").await;
                for name in ["lonely", "classless", "external"] {
                    record(t, &claim_path(name)).await;
                    delete(t, &claim_path(name)).await;
                }
                delete(t, &format!("{CLASSES}/volumes-elsewhere")).await;
            }
        ),
        interaction!(
            "volumes: a default StorageClass for claims that name none, waiting for a consumer",
            |t| {
                let class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                    "metadata": {"name": "volumes-default", "annotations":
                        {"storageclass.kubernetes.io/is-default-class": "true"}},
                    "provisioner": "example.com/none",
                    "volumeBindingMode": "WaitForFirstConsumer"});
                create(t, CLASSES, class).await;
                create(t, &claims(), claim("waiting", "1Gi", json!({}))).await;
                let none = json!({"storageClassName": ""});
                create(t, &claims(), claim("unclassed", "1Gi", none)).await;
                wait_for_class(t, "waiting", "volumes-default").await;
                super::tables::table(t, &format!("{CLASSES}/volumes-default")).await;
                super::tables::table(t, &claim_path("unclassed")).await;
                record_claim_events(t, "waiting", "WaitForFirstConsumer").await;
                record_claim_events(t, "unclassed", "FailedBinding").await;
                record(t, &claim_path("unclassed")).await;
                // Pods are admitted only once the namespace's default account exists.
                let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
                wait_until(t, &account, "the default account", |code, _| code == 200).await;
                let pods = format!("/api/v1/namespaces/{NAMESPACE}/pods");
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "consumer"},
                    "spec": {"containers": [{"name": "main", "image": "example/app:1"}],
                             "volumes": [{"name": "data",
                                          "persistentVolumeClaim": {"claimName": "waiting"}}]}});
                create(t, &pods, pod).await;
                let consumer = format!("{pods}/consumer");
                wait_until(t, &consumer, "the pod unschedulable", |_, pod| {
                    pod["status"]["conditions"][0]["reason"] == "Unschedulable"
                })
                .await;
                record(t, &consumer).await;
                record_claim_events(t, "waiting", "WaitForPodScheduled").await;
                record(t, &claim_path("waiting")).await;
                let now = json!({"apiVersion": "v1", "kind": "DeleteOptions",
                                 "gracePeriodSeconds": 0});
                let (code, text) = support::raw(
                    &t.admin,
                    "DELETE",
                    &consumer,
                    JSON,
                    serde_json::to_vec(&now).unwrap(),
                )
                .await;
                assert_eq!(code, 200, "{}: DELETE {consumer}: {text}", t.name);
                for name in ["waiting", "unclassed"] {
                    delete(t, &claim_path(name)).await;
                }
                delete(t, &format!("{CLASSES}/volumes-default")).await;
            }
        ),
    ]
}
