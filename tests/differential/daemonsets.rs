//! The DaemonSet controller judged by kube-controller-manager's: two Nodes made by the test
//! (no kubelet runs them, so daemon pods stay Pending), a DaemonSet created, rolled to a
//! new image and narrowed by a nodeSelector on both control planes, compared by its pods
//! (what the controller writes: labels, owner references, node affinity, tolerations),
//! its ControllerRevisions, its status at each settled step and its Events.
//!
//! Pod names end in a random suffix and revision hashes are computed differently (the
//! real controller hashes Go's in-memory dump of the template): both are masked.

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, Target, normalize, raw_create, raw_get, raw_send, support};

/// The namespace of these interactions.
const NAMESPACE: &str = "daemonsets";

/// The Nodes the DaemonSet runs on: the first labelled `disk: ssd`.
const NODES: [&str; 2] = ["ds-node-a", "ds-node-b"];

/// A pod name's random suffix.
static POD_NAME: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"\bagent-[a-z0-9]{5}\b").unwrap());

fn set_path() -> String {
    format!("/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/agent")
}

/// The hashes of the DaemonSet's revisions, newest first.
async fn revision_hashes(t: &Target) -> Vec<String> {
    let mut revisions = revisions_of(t).await;
    revisions.reverse();
    revisions
        .iter()
        .filter_map(|r| r["metadata"]["labels"]["controller-revision-hash"].as_str())
        .map(str::to_owned)
        .collect()
}

/// Records `body` with the revision hashes and pod names masked.
async fn record(t: &Target, asked: &str, body: Value) {
    let mut text = body.to_string();
    for (i, hash) in revision_hashes(t).await.iter().enumerate() {
        text = text.replace(hash.as_str(), &format!("<hash {i} back>"));
    }
    let text = POD_NAME.replace_all(&text, "agent-<random>");
    t.record(Answer {
        asked: asked.to_string(),
        code: 200,
        body: normalize(serde_json::from_str(&text).unwrap()),
    });
}

/// The DaemonSet's ControllerRevisions, oldest first.
async fn revisions_of(t: &Target) -> Vec<Value> {
    let list = raw_get(
        t,
        &format!(
            "/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions?labelSelector=app%3Dagent"
        ),
    )
    .await;
    let mut revisions = list["items"].as_array().cloned().unwrap_or_default();
    revisions.sort_by_key(|r| r["revision"].as_i64());
    revisions
}

/// The DaemonSet's pods that are not being deleted, by the node they are for.
async fn pods_of(t: &Target) -> Vec<Value> {
    let list = raw_get(
        t,
        &format!("/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app%3Dagent"),
    )
    .await;
    let mut pods: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    pods.sort_by_key(|p| target_node(p).to_string());
    pods
}

fn target_node(pod: &Value) -> Value {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        .clone()
}

/// Waits until the pods satisfy `done`, then records what the controller wrote of them.
async fn record_pods(t: &Target, what: &str, done: impl Fn(&[Value]) -> bool) {
    let pods = super::poll_until(t, what, || pods_of(t), |pods| done(pods)).await;
    let pods: Vec<Value> = pods
        .iter()
        .map(|p| {
            json!({"generateName": p["metadata"]["generateName"],
                "labels": p["metadata"]["labels"],
                "ownerReferences": p["metadata"]["ownerReferences"],
                "affinity": p["spec"]["affinity"],
                "nodeSelector": p["spec"]["nodeSelector"],
                "tolerations": p["spec"]["tolerations"],
                "image": p["spec"]["containers"][0]["image"]})
        })
        .collect();
    record(t, &format!("the pods: {what}"), json!(pods)).await;
}

/// Waits until the status satisfies `settled`, then records it.
async fn record_status(t: &Target, settled: impl Fn(&Value) -> bool) {
    super::wait_until(t, &set_path(), "the DaemonSet's status", |code, body| {
        code == 200 && settled(&body["status"])
    })
    .await;
    let status = raw_get(t, &set_path()).await["status"].clone();
    record(t, "the status", status).await;
}

async fn record_revisions(t: &Target) {
    let revisions: Vec<Value> = revisions_of(t)
        .await
        .into_iter()
        .map(|r| {
            json!({"name": r["metadata"]["name"], "labels": r["metadata"]["labels"],
                "annotations": r["metadata"]["annotations"],
                "ownerReferences": r["metadata"]["ownerReferences"],
                "revision": r["revision"], "data": r["data"]})
        })
        .collect();
    record(t, "the revisions", json!(revisions)).await;
}

/// Waits until `count` Events about the DaemonSet are there, then records them sorted.
async fn record_events(t: &Target, count: usize) {
    let events = super::poll_until(
        t,
        &format!("{count} events of the DaemonSet"),
        || async {
            let list = raw_get(t, &format!("/api/v1/namespaces/{NAMESPACE}/events")).await;
            list["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e["involvedObject"]["kind"] == "DaemonSet")
                .map(|e| {
                    json!({"type": e["type"], "reason": e["reason"],
                        "message": POD_NAME.replace_all(e["message"].as_str().unwrap_or_default(), "agent-<random>"),
                        "source": e["source"], "reportingComponent": e["reportingComponent"]})
                })
                .collect::<Vec<Value>>()
        },
        |events| events.len() >= count,
    )
    .await;
    let mut events = events;
    events.sort_by_key(ToString::to_string);
    record(t, "the events", json!(events)).await;
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![interaction!(
        "DaemonSets: a pod per fitting node, rolled to a new image, then narrowed by a nodeSelector",
        |t| {
            raw_create(
                t,
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .await;
            let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
            super::wait_until(t, &account, "the default account", |code, _| code == 200).await;
            for (i, node) in NODES.into_iter().enumerate() {
                let labels = if i == 0 {
                    json!({"disk": "ssd"})
                } else {
                    json!({"disk": "hdd"})
                };
                raw_create(
                    t,
                    "/api/v1/nodes",
                    &json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": node, "labels": labels}}),
                )
                .await;
            }
            let daemon_set = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "agent", "annotations": {"note": "kept on revisions"}},
                "spec": {"selector": {"matchLabels": {"app": "agent"}},
                    "template": {"metadata": {"labels": {"app": "agent"}},
                        "spec": {"tolerations": [{"operator": "Exists"}],
                            "containers": [{"name": "main", "image": "example/agent:1"}]}}}});
            raw_create(
                t,
                &format!("/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"),
                &daemon_set,
            )
            .await;
            record_pods(t, "one per node", |pods| pods.len() == 2).await;
            record_status(t, |s| {
                s["observedGeneration"] == 1 && s["currentNumberScheduled"] == 2
            })
            .await;
            record_revisions(t).await;

            raw_send(
                t,
                "PATCH",
                &set_path(),
                json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "main", "image": "example/agent:2"}]}}}}),
            )
            .await;
            record_pods(t, "both rolled to the new image", |pods| {
                pods.len() == 2
                    && pods
                        .iter()
                        .all(|p| p["spec"]["containers"][0]["image"] == "example/agent:2")
            })
            .await;
            record_status(t, |s| {
                s["observedGeneration"] == 2 && s["updatedNumberScheduled"] == 2
            })
            .await;

            raw_send(
                t,
                "PATCH",
                &set_path(),
                json!({"spec": {"template": {"spec": {"nodeSelector": {"disk": "ssd"}}}}}),
            )
            .await;
            record_pods(t, "only on the ssd node, of the newest template", |pods| {
                pods.len() == 1 && pods[0]["spec"]["nodeSelector"]["disk"] == "ssd"
            })
            .await;
            record_status(t, |s| {
                s["observedGeneration"] == 3
                    && s["desiredNumberScheduled"] == 1
                    && s["currentNumberScheduled"] == 1
                    && s["updatedNumberScheduled"] == 1
            })
            .await;
            record_revisions(t).await;
            record_events(t, 9).await;

            let (_, _) = support::raw(&t.admin, "DELETE", &set_path(), JSON, Vec::new()).await;
            for node in NODES {
                let (_, _) = support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("/api/v1/nodes/{node}"),
                    JSON,
                    Vec::new(),
                )
                .await;
            }
        }
    )]
}
