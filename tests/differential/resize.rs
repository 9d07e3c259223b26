//! In-place pod resize (`pods/resize`) as kube-apiserver 1.34 serves it: a pod's containers'
//! resources read, raised and lowered by every patch type, a PUT and a server-side apply on
//! the subresource (what it takes from the request and what it keeps of the stored pod, the
//! generation, the managed fields under the subresource), refusals (a QoS class that would
//! change, a limit removed, a resource other than cpu and memory, a container added or
//! renamed, a request over its limit, a non-sidecar init container's resources, a stale
//! resourceVersion), other verbs (405), and a resize that a ResourceQuota refuses. Neither control plane has nodes, so only the API server answers.

use serde_json::{Value, json};

use super::{
    APPLY, Answer, Interaction, JSON, JSON_PATCH, MERGE, STRATEGIC, normalize, parse_body, support,
    wait_until,
};

/// The namespace of these interactions.
const NAMESPACE: &str = "resize";

fn pods() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

fn resize(pod: &str) -> String {
    format!("{}/{pod}/resize", pods())
}

/// A pod whose container `main` requests and limits `cpu` and `memory` as given (Burstable
/// when they differ, Guaranteed when equal), with an init container and a sidecar.
fn pod(name: &str, requests: Value, limits: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"app": "resize"}},
           "spec": {
               "initContainers": [
                   {"name": "setup", "image": "example/setup:1",
                    "resources": {"requests": {"cpu": "10m"}, "limits": {"cpu": "10m"}}},
                   {"name": "sidecar", "image": "example/sidecar:1", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                  "limits": {"cpu": "10m", "memory": "16Mi"}}}
               ],
               "containers": [{"name": "main", "image": "example/app:1",
                               "resizePolicy": [
                                   {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                   {"resourceName": "memory",
                                    "restartPolicy": "RestartContainer"}],
                               "resources": {"requests": requests, "limits": limits}}]}})
}

/// Sends `body` with `method` and `content_type` and records the answer: of a success, the
/// containers' resources and resize policies, the labels, the generation, the QoS class and
/// the managed fields; a refusal whole.
async fn send(t: &super::Target, method: &str, path: &str, content_type: &str, body: Value) {
    let bytes = serde_json::to_vec(&body).unwrap();
    let (code, text) = support::raw(&t.admin, method, path, content_type, bytes).await;
    record(t, format!("{method} {path} {body}"), code, text);
}

fn record(t: &super::Target, asked: String, code: u16, text: String) {
    let answer = parse_body(text);
    let body = if (200..300).contains(&code) {
        let containers = |list: &str| -> Vec<Value> {
            answer["spec"][list]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    json!({"name": c["name"], "image": c["image"], "resources": c["resources"],
                           "resizePolicy": c["resizePolicy"]})
                })
                .collect()
        };
        json!({"kind": answer["kind"],
               "containers": containers("containers"),
               "initContainers": containers("initContainers"),
               "labels": answer["metadata"]["labels"],
               "generation": answer["metadata"]["generation"],
               "qosClass": answer["status"]["qosClass"],
               "managedFields": managed_fields(&answer)})
    } else {
        answer
    };
    t.record(Answer {
        asked,
        code: i64::from(code),
        body: normalize(body),
    });
}

/// The pod's managed fields but the scheduler's (whose verdict races with the requests).
fn managed_fields(pod: &Value) -> Vec<Value> {
    pod["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["manager"] != "kube-scheduler")
        .cloned()
        .collect()
}

async fn get(t: &super::Target, path: &str) -> Value {
    let (code, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
    record(t, format!("GET {path}"), code, text.clone());
    parse_body(text)
}

/// Creates `pod` and waits for the scheduler's verdict on it (no node fits), which writes
/// the pod: requests conditional on its resourceVersion come after it.
async fn create_pod(t: &super::Target, pod: Value) {
    let path = format!("{}/{}", pods(), pod["metadata"]["name"].as_str().unwrap());
    send(t, "POST", &pods(), JSON, pod).await;
    scheduled(t, &path).await;
}

/// Waits for the scheduler's verdict on the pod at `path`.
async fn scheduled(t: &super::Target, path: &str) {
    wait_until(t, path, "the scheduler's verdict", |code, body| {
        code == 200
            && body["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "PodScheduled")
    })
    .await;
}

/// `pod` without its resourceVersion, so that a PUT of it is unconditional, and without
/// its status conditions: the scheduler rewrites its `PodScheduled` condition whenever the
/// pod's generation moves, at its own pace on each server, and a PUT sending the condition
/// as read before that rewrite would own its `observedGeneration` on one server and not on
/// the other (the field manager records what a request changes, before the strategy drops
/// all but the resources).
fn unconditional(mut pod: Value) -> Value {
    if let Some(meta) = pod["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    if let Some(status) = pod["status"].as_object_mut() {
        status.remove("conditions");
    }
    pod
}

/// A strategic merge patch of container `main`'s resources.
fn main_resources(resources: Value) -> Value {
    json!({"spec": {"containers": [{"name": "main", "resources": resources}]}})
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "pod resize: read, raised and lowered by every patch type, PUT and apply",
            |t| {
                let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": NAMESPACE}});
                send(t, "POST", "/api/v1/namespaces", JSON, namespace).await;
                let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
                wait_until(t, &account, "the default account", |code, _| code == 200).await;
                let web = pod(
                    "web",
                    json!({"cpu": "100m", "memory": "64Mi"}),
                    json!({"cpu": "200m", "memory": "128Mi"}),
                );
                create_pod(t, web).await;
                get(t, &resize("web")).await;
                let up = main_resources(json!({"requests": {"cpu": "150m"},
                                               "limits": {"cpu": "300m"}}));
                send(t, "PATCH", &resize("web"), STRATEGIC, up).await;
                let down = json!({"spec": {"containers": [{"name": "main",
                    "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                                  "limits": {"cpu": "100m", "memory": "64Mi"}}}]}});
                // A merge patch replaces the list: the container loses its image, refused.
                send(t, "PATCH", &resize("web"), MERGE, down).await;
                let lower = main_resources(json!({"requests": {"cpu": "80m"},
                                                  "limits": {"cpu": "250m"}}));
                send(t, "PATCH", &resize("web"), STRATEGIC, lower).await;
                let memory = json!([{"op": "replace",
                    "path": "/spec/containers/0/resources/limits/memory", "value": "96Mi"}]);
                send(t, "PATCH", &resize("web"), JSON_PATCH, memory).await;
                let sidecar = json!([{"op": "replace",
                    "path": "/spec/initContainers/1/resources/limits/cpu", "value": "20m"},
                    {"op": "replace",
                    "path": "/spec/initContainers/1/resources/requests/cpu", "value": "20m"}]);
                send(t, "PATCH", &resize("web"), JSON_PATCH, sidecar).await;
                // A PUT of the whole pod: only the resources and resize policies are taken.
                // Each PUT is unconditional: the schedulers mark the unschedulable pod's
                // generations at their own pace, and a resourceVersion read before one of
                // their writes would conflict on one server and not the other.
                let mut whole = unconditional(get(t, &resize("web")).await);
                for (pointer, value) in [
                    ("/spec/containers/0/resources/requests/cpu", "120m"),
                    ("/spec/containers/0/image", "example/app:2"),
                    ("/metadata/labels/app", "changed"),
                    ("/status/phase", "Running"),
                ] {
                    if let Some(field) = whole.pointer_mut(pointer) {
                        *field = json!(value);
                    }
                }
                send(t, "PUT", &resize("web"), JSON, whole.clone()).await;
                // A resize policy changed.
                if let Some(policy) =
                    whole.pointer_mut("/spec/containers/0/resizePolicy/1/restartPolicy")
                {
                    *policy = json!("NotRequired");
                }
                send(t, "PUT", &resize("web"), JSON, whole).await;
                get(t, &format!("{}/web", pods())).await;
                // The same PUT again changes nothing.
                let same = unconditional(get(t, &resize("web")).await);
                send(t, "PUT", &resize("web"), JSON, same).await;
                let apply = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "web"},
                    "spec": {"containers": [{"name": "main",
                        "resources": {"requests": {"cpu": "130m", "memory": "32Mi"},
                                      "limits": {"cpu": "200m", "memory": "96Mi"}}}]}});
                send(
                    t,
                    "PATCH",
                    &format!("{}?fieldManager=resizer&force=true", resize("web")),
                    APPLY,
                    apply,
                )
                .await;
                // Another field patched through the subresource is dropped.
                let other = json!({"metadata": {"labels": {"extra": "yes"}},
                                   "spec": {"activeDeadlineSeconds": 60}});
                send(t, "PATCH", &resize("web"), MERGE, other).await;
                send(t, "DELETE", &resize("web"), JSON, Value::Null).await;
                send(t, "POST", &resize("web"), JSON, json!({})).await;
                send(t, "PATCH", &resize("absent"), MERGE, json!({})).await;
            }
        ),
        interaction!("pod resize: refusals", |t| {
            let mut fixed = pod(
                "fixed",
                json!({"cpu": "100m", "memory": "64Mi"}),
                json!({"cpu": "100m", "memory": "64Mi"}),
            );
            // Guaranteed only without the init containers, of which one limits no memory.
            if let Some(spec) = fixed["spec"].as_object_mut() {
                spec.remove("initContainers");
            }
            create_pod(t, fixed).await;
            // Guaranteed to Burstable.
            let qos = main_resources(json!({"requests": {"cpu": "50m"}}));
            send(t, "PATCH", &resize("fixed"), STRATEGIC, qos).await;
            // Requests removed default to the limits again: accepted.
            let removed = json!([{"op": "remove",
                "path": "/spec/containers/0/resources/requests"}]);
            send(t, "PATCH", &resize("web"), JSON_PATCH, removed).await;
            let limit_removed = json!([{"op": "remove",
                "path": "/spec/containers/0/resources/limits/memory"}]);
            send(t, "PATCH", &resize("web"), JSON_PATCH, limit_removed).await;
            let storage = main_resources(json!({"requests": {"ephemeral-storage": "1Gi"}}));
            send(t, "PATCH", &resize("web"), STRATEGIC, storage).await;
            let added = json!([{"op": "add", "path": "/spec/containers/-",
                "value": {"name": "extra", "image": "example/extra:1"}}]);
            send(t, "PATCH", &resize("web"), JSON_PATCH, added).await;
            let renamed = json!([{"op": "replace", "path": "/spec/containers/0/name",
                "value": "renamed"}]);
            send(t, "PATCH", &resize("web"), JSON_PATCH, renamed).await;
            let over = main_resources(json!({"requests": {"cpu": "2"}}));
            send(t, "PATCH", &resize("web"), STRATEGIC, over).await;
            let init = json!([{"op": "replace",
                "path": "/spec/initContainers/0/resources/limits/cpu", "value": "20m"},
                {"op": "replace",
                "path": "/spec/initContainers/0/resources/requests/cpu", "value": "20m"}]);
            send(t, "PATCH", &resize("web"), JSON_PATCH, init).await;
            let stale = json!({"metadata": {"resourceVersion": "1"}});
            send(t, "PATCH", &resize("web"), MERGE, stale).await;
            // Pods that cannot be resized at all: Windows pods, pods with pod-level
            // resources, and a pod whose running container's status reports no resources
            // (its node's kubelet does not resize).
            let raise = main_resources(json!({"requests": {"cpu": "150m"},
                                              "limits": {"cpu": "250m"}}));
            let mut windows = pod("windows", json!({"cpu": "100m"}), json!({"cpu": "200m"}));
            windows["spec"]["os"] = json!({"name": "windows"});
            let mut pod_level = pod("pod-level", json!({"cpu": "100m"}), json!({"cpu": "200m"}));
            pod_level["spec"]["resources"] = json!({"requests": {"cpu": "300m"},
                                                    "limits": {"cpu": "500m"}});
            let legacy = pod("legacy", json!({"cpu": "100m"}), json!({"cpu": "200m"}));
            for unresizable in [windows, pod_level, legacy] {
                let name = unresizable["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string();
                // Created unrecorded: pod-level resources' defaults are not under test.
                let bytes = serde_json::to_vec(&unresizable).unwrap();
                let (code, text) = support::raw(&t.admin, "POST", &pods(), JSON, bytes).await;
                assert_eq!(code, 201, "{}: POST {name}: {text}", t.name);
                scheduled(t, &format!("{}/{name}", pods())).await;
                if name == "legacy" {
                    let status = json!({"status": {"containerStatuses": [{
                        "name": "main", "image": "example/app:1", "imageID": "",
                        "ready": true, "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}});
                    let path = format!("{}/{name}/status", pods());
                    let bytes = serde_json::to_vec(&status).unwrap();
                    let (code, text) = support::raw(&t.admin, "PATCH", &path, MERGE, bytes).await;
                    assert_eq!(code, 200, "{}: PATCH {path}: {text}", t.name);
                }
                send(t, "PATCH", &resize(&name), STRATEGIC, raise.clone()).await;
            }
        }),
        interaction!(
            "pod resize: refused by a ResourceQuota it would exceed",
            |t| {
                let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
                               "metadata": {"name": "compute"},
                               "spec": {"hard": {"requests.cpu": "1", "limits.cpu": "2"}}});
                let quotas = format!("/api/v1/namespaces/{NAMESPACE}/resourcequotas");
                send(t, "POST", &quotas, JSON, quota).await;
                wait_until(
                    t,
                    &format!("{quotas}/compute"),
                    "the quota's usage",
                    |code, body| code == 200 && body["status"]["used"]["requests.cpu"].is_string(),
                )
                .await;
                let within = main_resources(json!({"requests": {"cpu": "200m"}}));
                send(t, "PATCH", &resize("web"), STRATEGIC, within).await;
                let beyond = main_resources(json!({"requests": {"cpu": "1500m"},
                                               "limits": {"cpu": "1500m"}}));
                send(t, "PATCH", &resize("web"), STRATEGIC, beyond).await;
                // The namespace goes in the background: nothing later uses its name.
                let namespace = format!("/api/v1/namespaces/{NAMESPACE}");
                support::raw(&t.admin, "DELETE", &namespace, JSON, Vec::new()).await;
            }
        ),
    ]
}
