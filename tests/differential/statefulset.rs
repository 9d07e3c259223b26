//! The StatefulSet controller judged by kube-controller-manager's: StatefulSets created on
//! both control planes (neither has nodes, so pods stay Pending until the test plays the
//! kubelet's part through `pods/status`), compared by their pods (names, labels, owner
//! references, spec, the order they come and go in), their ControllerRevisions (names,
//! data), their claims, the set's status at each settled step, and the Events the
//! controller wrote.

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, STRATEGIC, Target, normalize, parse_body, support};

/// The namespace of these interactions (the shared one is deleted earlier in the list).
const NAMESPACE: &str = "statefulsets";

fn sets_path() -> String {
    format!("/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets")
}

fn set_path(name: &str) -> String {
    format!("{}/{name}", sets_path())
}

fn pods_path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

async fn get(t: &Target, path: &str) -> Value {
    let (_, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
    parse_body(text)
}

async fn send(t: &Target, method: &str, path: &str, content_type: &str, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let (code, text) = support::raw(&t.admin, method, path, content_type, bytes).await;
    assert!(
        (200..300).contains(&code),
        "{}: {method} {path}: {text}",
        t.name
    );
}

fn record(t: &Target, asked: String, body: Value) {
    t.record(Answer {
        asked,
        code: 200,
        body: normalize(body),
    });
}

/// A StatefulSet `name` of `replicas` pods selecting `app: <name>`, with `extra` merged
/// into its spec.
fn stateful_set(name: &str, replicas: i32, extra: Value) -> Value {
    let mut spec = json!({
        "replicas": replicas,
        "serviceName": name,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "example/app:1"}]}},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": name, "annotations": {"note": "kept on revisions"}},
           "spec": spec})
}

/// The set's pods (by its `app` label), sorted by name.
async fn pods_of(t: &Target, set: &str) -> Vec<Value> {
    let list = get(t, &format!("{}?labelSelector=app%3D{set}", pods_path())).await;
    let mut pods = list["items"].as_array().cloned().unwrap_or_default();
    pods.sort_by_key(|p| p["metadata"]["name"].as_str().map(str::to_owned));
    pods
}

fn names(pods: &[Value]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// Polls (at most 60 s) until `done` holds for the set's pods; returns them.
async fn wait_for_pods(
    t: &Target,
    set: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    super::poll_until(t, what, || pods_of(t, set), |pods| done(pods)).await
}

/// Waits until the pods are exactly `expected` and records their names.
async fn expect_pods(t: &Target, set: &str, expected: &[&str]) {
    wait_for_pods(t, set, &format!("the pods {expected:?}"), |pods| {
        names(pods) == expected
    })
    .await;
    record(t, format!("the pods of {set}"), json!(expected));
}

/// Plays the kubelet: the pod runs and is Ready (or has failed).
async fn set_phase(t: &Target, pod: &str, phase: &str) {
    let ready = if phase == "Running" { "True" } else { "False" };
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let patch = json!({"status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": ready, "lastTransitionTime": now}]}});
    send(
        t,
        "PATCH",
        &format!("{}/{pod}/status", pods_path()),
        STRATEGIC,
        &patch,
    )
    .await;
}

/// Waits for the pod `name` (of `revision`, when given) and marks it Running and Ready.
async fn bring_up(t: &Target, set: &str, pod: &str, revision: Option<&str>) {
    wait_for_pods(t, set, &format!("the pod {pod}"), |pods| {
        pods.iter().any(|p| {
            p["metadata"]["name"] == pod
                && p["metadata"]["deletionTimestamp"].is_null()
                && revision.is_none_or(|r| p["metadata"]["labels"]["controller-revision-hash"] == r)
        })
    })
    .await;
    set_phase(t, pod, "Running").await;
}

/// Records what the controller made of the pods: metadata it sets and the spec.
async fn record_pods(t: &Target, set: &str) {
    let pods: Vec<Value> = pods_of(t, set)
        .await
        .into_iter()
        .map(|p| {
            json!({
                "name": p["metadata"]["name"],
                "generateName": p["metadata"]["generateName"],
                "labels": p["metadata"]["labels"],
                "annotations": p["metadata"]["annotations"],
                "ownerReferences": p["metadata"]["ownerReferences"],
                "spec": p["spec"],
            })
        })
        .collect();
    record(t, format!("the pods of {set} in full"), json!(pods));
}

/// Waits until the set's status satisfies `settled`; returns it.
async fn wait_for_status(t: &Target, set: &str, settled: impl Fn(&Value) -> bool) -> Value {
    super::wait_until(t, &set_path(set), "the set's status", |code, body| {
        code == 200 && settled(&body["status"])
    })
    .await;
    get(t, &set_path(set)).await["status"].clone()
}

/// Waits until the set's status satisfies `settled`, then records it.
async fn record_status(t: &Target, set: &str, settled: impl Fn(&Value) -> bool) {
    let status = wait_for_status(t, set, settled).await;
    record(t, format!("the status of {set}"), status);
}

/// Records the set's ControllerRevisions, oldest first.
async fn record_revisions(t: &Target, set: &str) {
    let list = get(
        t,
        &format!(
            "/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions?labelSelector=app%3D{set}"
        ),
    )
    .await;
    let mut revisions: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            json!({"name": r["metadata"]["name"], "labels": r["metadata"]["labels"],
                "annotations": r["metadata"]["annotations"],
                "ownerReferences": r["metadata"]["ownerReferences"],
                "revision": r["revision"], "data": r["data"]})
        })
        .collect();
    revisions.sort_by_key(|r| r["revision"].as_i64());
    record(t, format!("the revisions of {set}"), json!(revisions));
}

/// Records the claims of the set's pods, by name.
async fn record_claims(t: &Target, set: &str) {
    let list = get(
        t,
        &format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims?labelSelector=app%3D{set}"),
    )
    .await;
    let mut claims: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            json!({"name": c["metadata"]["name"], "labels": c["metadata"]["labels"],
                "annotations": c["metadata"]["annotations"],
                "ownerReferences": c["metadata"]["ownerReferences"],
                "finalizers": c["metadata"]["finalizers"], "spec": c["spec"]})
        })
        .collect();
    claims.sort_by_key(|c| c["name"].as_str().map(str::to_owned));
    record(t, format!("the claims of {set}"), json!(claims));
}

/// Waits until the Events about the set add up to `count`, then records them: in the
/// order they were first written when `ordered` (an Event's name holds the time it was
/// made), sorted otherwise.
async fn record_events(t: &Target, set: &str, count: i64, ordered: bool) {
    let events = super::poll_until(
        t,
        &format!("{count} events of {set}"),
        || events_of(t, set, ordered),
        |events| {
            events
                .iter()
                .map(|e| e["count"].as_i64().unwrap_or(1))
                .sum::<i64>()
                >= count
        },
    )
    .await;
    record(t, format!("the events of {set}"), json!(events));
}

/// The Events about the set, in the order they were first written when `ordered`.
async fn events_of(t: &Target, set: &str, ordered: bool) -> Vec<Value> {
    let list = get(t, &format!("/api/v1/namespaces/{NAMESPACE}/events")).await;
    let mut events: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e["involvedObject"]["name"] == set && e["involvedObject"]["kind"] == "StatefulSet"
        })
        .collect();
    events.sort_by_key(|e| e["metadata"]["name"].as_str().map(str::to_owned));
    let mut events: Vec<Value> = events
        .into_iter()
        .map(|e| {
            json!({"type": e["type"], "reason": e["reason"], "message": e["message"],
                "count": e["count"], "source": e["source"],
                "reportingComponent": e["reportingComponent"],
                "involvedObject": {"apiVersion": e["involvedObject"]["apiVersion"],
                    "kind": e["involvedObject"]["kind"]}})
        })
        .collect();
    if !ordered {
        events.sort_by_key(ToString::to_string);
    }
    events
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "StatefulSets: OrderedReady makes pods one at a time and removes them from the highest ordinal",
            |t| {
                send(
                    t,
                    "POST",
                    "/api/v1/namespaces",
                    JSON,
                    &json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": NAMESPACE}}),
                )
                .await;
                let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
                super::wait_until(t, &account, "the default account", |code, _| code == 200).await;
                let set = "web";
                send(
                    t,
                    "POST",
                    &sets_path(),
                    JSON,
                    &stateful_set(set, 3, json!({})),
                )
                .await;
                for (i, pod) in ["web-0", "web-1", "web-2"].into_iter().enumerate() {
                    let expected = ["web-0", "web-1", "web-2"][..=i].to_vec();
                    expect_pods(t, set, &expected).await;
                    set_phase(t, pod, "Running").await;
                }
                record_status(t, set, |s| s["availableReplicas"] == 3).await;
                record_pods(t, set).await;
                record_revisions(t, set).await;
                send(
                    t,
                    "PATCH",
                    &set_path(set),
                    STRATEGIC,
                    &json!({"spec": {"replicas": 1}}),
                )
                .await;
                expect_pods(t, set, &["web-0"]).await;
                record_status(t, set, |s| {
                    s["replicas"] == 1 && s["observedGeneration"] == 2
                })
                .await;
                record_events(t, set, 5, true).await;
            }
        ),
        interaction!(
            "StatefulSets: Parallel makes every pod and claim at once from ordinals.start and replaces a failed pod",
            |t| {
                let set = "par";
                let body = stateful_set(
                    set,
                    3,
                    json!({"podManagementPolicy": "Parallel", "ordinals": {"start": 5},
                        "volumeClaimTemplates": [{"metadata": {"name": "data",
                                "labels": {"tier": "storage"}},
                            "spec": {"accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}}}}]}),
                );
                send(t, "POST", &sets_path(), JSON, &body).await;
                expect_pods(t, set, &["par-5", "par-6", "par-7"]).await;
                record_pods(t, set).await;
                record_claims(t, set).await;
                for pod in ["par-5", "par-6", "par-7"] {
                    set_phase(t, pod, "Running").await;
                }
                record_status(t, set, |s| s["readyReplicas"] == 3).await;
                let failed = pods_of(t, set).await[1]["metadata"]["uid"].clone();
                set_phase(t, "par-6", "Failed").await;
                wait_for_pods(t, set, "par-6 made again", |pods| {
                    pods.iter()
                        .any(|p| p["metadata"]["name"] == "par-6" && p["metadata"]["uid"] != failed)
                })
                .await;
                record_status(t, set, |s| s["replicas"] == 3 && s["readyReplicas"] == 2).await;
                record_revisions(t, set).await;
                record_events(t, set, 8, false).await;
            }
        ),
        interaction!(
            "StatefulSets: a rolling update with a partition replaces the pods above it, highest first",
            |t| {
                let set = "roll";
                let body = stateful_set(
                    set,
                    3,
                    json!({"updateStrategy": {"type": "RollingUpdate",
                        "rollingUpdate": {"partition": 1}}, "revisionHistoryLimit": 0}),
                );
                send(t, "POST", &sets_path(), JSON, &body).await;
                for pod in ["roll-0", "roll-1", "roll-2"] {
                    bring_up(t, set, pod, None).await;
                }
                record_status(t, set, |s| s["availableReplicas"] == 3).await;
                for (generation, image) in [(2, "example/app:2"), (3, "example/app:3")] {
                    let patch = json!({"spec": {"template": {"spec": {"containers": [
                        {"name": "main", "image": image}]}}}});
                    send(t, "PATCH", &set_path(set), STRATEGIC, &patch).await;
                    let status =
                        wait_for_status(t, set, |s| s["observedGeneration"] == generation).await;
                    let update = status["updateRevision"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    for pod in ["roll-2", "roll-1"] {
                        bring_up(t, set, pod, Some(&update)).await;
                    }
                    record_status(t, set, |s| {
                        s["updatedReplicas"] == 2 && s["availableReplicas"] == 3
                    })
                    .await;
                    record_pods(t, set).await;
                    record_revisions(t, set).await;
                }
                record_events(t, set, 11, true).await;
            }
        ),
        interaction!(
            "StatefulSets: an orphan pod adopted, given its identity, then replaced for its revision",
            |t| {
                let set = "adopt";
                let orphan = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "adopt-0", "labels": {"app": set}},
                    "spec": {"containers": [{"name": "main", "image": "example/app:1"}]}});
                send(t, "POST", &pods_path(), JSON, &orphan).await;
                set_phase(t, "adopt-0", "Running").await;
                send(
                    t,
                    "POST",
                    &sets_path(),
                    JSON,
                    &stateful_set(set, 1, json!({})),
                )
                .await;
                record_events(t, set, 3, true).await;
                let status = wait_for_status(t, set, |s| s["observedGeneration"] == 1).await;
                let update = status["updateRevision"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                bring_up(t, set, "adopt-0", Some(&update)).await;
                record_status(t, set, |s| s["availableReplicas"] == 1).await;
                record_pods(t, set).await;
            }
        ),
        interaction!(
            "StatefulSets: a pod Ready for minReadySeconds becomes available without another change",
            |t| {
                let set = "slow";
                let body = stateful_set(set, 1, json!({"minReadySeconds": 1}));
                send(t, "POST", &sets_path(), JSON, &body).await;
                bring_up(t, set, "slow-0", None).await;
                record_status(t, set, |s| s["availableReplicas"] == 1).await;
            }
        ),
        interaction!(
            "StatefulSets: OnDelete leaves pods of the old revision until they are deleted",
            |t| {
                let set = "manual";
                let body = stateful_set(
                    set,
                    2,
                    json!({"podManagementPolicy": "Parallel",
                        "updateStrategy": {"type": "OnDelete"}}),
                );
                send(t, "POST", &sets_path(), JSON, &body).await;
                for pod in ["manual-0", "manual-1"] {
                    bring_up(t, set, pod, None).await;
                }
                record_status(t, set, |s| s["availableReplicas"] == 2).await;
                let patch =
                    json!({"spec": {"template": {"metadata": {"labels": {"version": "2"}}}}});
                send(t, "PATCH", &set_path(set), STRATEGIC, &patch).await;
                let status = wait_for_status(t, set, |s| s["observedGeneration"] == 2).await;
                let update = status["updateRevision"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                record_status(t, set, |s| s["observedGeneration"] == 2).await;
                send(
                    t,
                    "DELETE",
                    &format!("{}/manual-1", pods_path()),
                    JSON,
                    &json!({}),
                )
                .await;
                bring_up(t, set, "manual-1", Some(&update)).await;
                record_status(t, set, |s| {
                    s["updatedReplicas"] == 1 && s["readyReplicas"] == 2
                })
                .await;
                record_pods(t, set).await;
                record_revisions(t, set).await;
                record_events(t, set, 3, false).await;
            }
        ),
        interaction!(
            "StatefulSets: claims owned as the retention policy asks, deleted when scaled away",
            |t| {
                let set = "kept";
                let body = stateful_set(
                    set,
                    2,
                    json!({"podManagementPolicy": "Parallel",
                        "persistentVolumeClaimRetentionPolicy":
                            {"whenDeleted": "Delete", "whenScaled": "Delete"},
                        "volumeClaimTemplates": [{"metadata": {"name": "data"},
                            "spec": {"accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}}}}]}),
                );
                send(t, "POST", &sets_path(), JSON, &body).await;
                let claims = format!(
                    "/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims?labelSelector=app%3D{set}"
                );
                super::wait_until(t, &claims, "both claims owned by the set", |_, list| {
                    let items = list["items"].as_array().cloned().unwrap_or_default();
                    items.len() == 2
                        && items
                            .iter()
                            .all(|c| c["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet")
                })
                .await;
                record_claims(t, set).await;
                send(
                    t,
                    "PATCH",
                    &set_path(set),
                    STRATEGIC,
                    &json!({"spec": {"replicas": 1}}),
                )
                .await;
                expect_pods(t, set, &["kept-0"]).await;
                super::wait_until(t, &claims, "the claim of kept-1 gone", |_, list| {
                    list["items"]
                        .as_array()
                        .is_some_and(|items| items.len() == 1)
                })
                .await;
                record_claims(t, set).await;
            }
        ),
    ]
}
