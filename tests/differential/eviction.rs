//! Evictions (`pods/eviction`) judged against PodDisruptionBudgets, as kube-apiserver
//! decides them: allowed (the budget's status as the eviction writes it, then as its
//! controller settles it, and the pod gone), refused with 429 when no disruption is left,
//! refused with 500 for a pod under two budgets, refused with 429 for a budget its
//! controller cannot observe, unready pods under both `unhealthyPodEvictionPolicy` values,
//! and a dry run. Neither control plane has nodes: the admin plays the kubelet through
//! `pods/status` (phase Running, Ready or not).

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::{Value, json};

use super::{
    Answer, Interaction, JSON, MERGE, STRATEGIC, normalize, parse_body, raw_get, support,
    wait_until,
};

/// The namespace of these interactions.
const NAMESPACE: &str = "eviction";

fn budgets() -> String {
    format!("/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets")
}

fn pods() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

async fn post(t: &super::Target, path: &str, object: &Value) -> Value {
    let body = serde_json::to_vec(object).unwrap();
    let (code, text) = support::raw(&t.admin, "POST", path, JSON, body).await;
    assert_eq!(code, 201, "{}: POST {path}: {text}", t.name);
    parse_body(text)
}

/// A pod labelled `app: <app>`, optionally controlled by `owner`, which the kubelet the
/// admin plays reports Running, Ready or not.
async fn running_pod(t: &super::Target, name: &str, app: &str, ready: bool, owner: Option<Value>) {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "labels": {"app": app}},
                         "spec": {"containers": [{"name": "main", "image": "example/app:1"}]}});
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([owner]);
    }
    post(t, &pods(), &pod).await;
    let ready = if ready { "True" } else { "False" };
    let status = json!({"status": {"phase": "Running",
                                   "conditions": [{"type": "Ready", "status": ready}]}});
    let path = format!("{}/{name}/status", pods());
    let body = serde_json::to_vec(&status).unwrap();
    let (code, text) = support::raw(&t.admin, "PATCH", &path, STRATEGIC, body).await;
    assert_eq!(code, 200, "{}: PATCH {path}: {text}", t.name);
}

async fn budget(t: &super::Target, name: &str, app: &str, rule: Value) {
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
    if let (Some(spec), Some(rule)) = (spec.as_object_mut(), rule.as_object()) {
        spec.extend(rule.clone());
    }
    let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": name}, "spec": spec});
    post(t, &budgets(), &budget).await;
}

/// Waits until the budget's status satisfies `settled`, then records it.
async fn status_once(t: &super::Target, name: &str, settled: impl Fn(&Value) -> bool) {
    let path = format!("{}/{name}", budgets());
    wait_until(
        t,
        &path,
        &format!("the status of budget {name}"),
        |code, body| code == 200 && settled(&body["status"]),
    )
    .await;
    let budget = raw_get(t, &path).await;
    t.record(Answer {
        asked: format!("GET {path}: status"),
        code: 200,
        body: normalize(budget["status"].clone()),
    });
}

/// A client of the target's admin that takes a 429 for an answer: kube's default client
/// retries 429s (honouring `Retry-After`) for minutes, where an eviction's 429 is what
/// is being compared.
async fn client_without_retries(t: &super::Target) -> kube::Client {
    let yaml = std::fs::read_to_string(&t.kubeconfig).unwrap();
    let kubeconfig: kube::config::Kubeconfig = serde_yaml::from_str(&yaml).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// Asks for the pod's eviction (the answer is recorded); `query` is appended to the path.
async fn evict(t: &super::Target, pod: &str, query: &str) {
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": pod, "namespace": NAMESPACE}});
    let path = format!("{}/{pod}/eviction{query}", pods());
    let client = client_without_retries(t).await;
    let body = serde_json::to_vec(&eviction).unwrap();
    let (code, text) = support::raw(&client, "POST", &path, JSON, body).await;
    t.record(Answer {
        asked: format!("POST {path}"),
        code: i64::from(code),
        body: normalize(parse_body(text)),
    });
}

/// Records whether the pod is still there, being deleted, and its `DisruptionTarget`
/// condition (the rest of a pod here races with the scheduler's verdict on it).
async fn get_pod(t: &super::Target, pod: &str) {
    let path = format!("{}/{pod}", pods());
    let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
    let found = parse_body(text);
    let body = if code == 200 {
        let target = found["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "DisruptionTarget")
            .cloned();
        json!({"deleting": !found["metadata"]["deletionTimestamp"].is_null(),
               "disruptionTarget": target})
    } else {
        found
    };
    t.record(Answer {
        asked: format!("GET {path}: deletion and DisruptionTarget"),
        code: i64::from(code),
        body: normalize(body),
    });
}

/// Evicts `pod` and records the first change of budget `name` after it: the eviction's
/// own write of the budget's status, and who wrote it.
async fn evict_and_watch_budget(t: &super::Target, pod: &str, name: &str) {
    let current = raw_get(t, &format!("{}/{name}", budgets())).await;
    let version = current["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let api: Api<PodDisruptionBudget> = Api::namespaced(t.admin.clone(), NAMESPACE);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(30);
    // The watch starts at the version read, so it sees the eviction's write whenever its
    // answer's headers come (a server may hold them until the first event).
    let first_change = async {
        let mut changes = api
            .watch(&params, &version)
            .await
            .unwrap_or_else(|e| panic!("{}: watch of budget {name}: {e}", t.name))
            .boxed();
        changes
            .try_next()
            .await
            .unwrap_or_else(|e| panic!("{}: watch of budget {name}: {e}", t.name))
    };
    let (first, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(30), first_change),
        evict(t, pod, "")
    );
    let first = first.unwrap_or_else(|_| {
        panic!(
            "{}: a change of budget {name} within 30 s of the eviction of {pod}",
            t.name
        )
    });
    let Some(WatchEvent::Modified(changed)) = first else {
        panic!(
            "{}: budget {name} modified by the eviction of {pod}, not {first:?}",
            t.name
        );
    };
    let mut managers: Vec<Value> = changed
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|entry| json!([entry.manager, entry.operation, entry.subresource]))
        .collect();
    // Entries written in the same second are ordered by manager: compare them as a set.
    managers.sort_by_key(ToString::to_string);
    t.record(Answer {
        asked: format!("watch budget {name} after evicting {pod}"),
        code: 200,
        body: normalize(json!({"status": changed.status, "managers": managers})),
    });
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "pod eviction under a disruption budget: dry run, allowed, then refused",
            |t| {
                post(
                    t,
                    "/api/v1/namespaces",
                    &json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": NAMESPACE}}),
                )
                .await;
                let account = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default");
                wait_until(t, &account, "the default account", |code, _| code == 200).await;
                running_pod(t, "allowed-a", "allowed", true, None).await;
                running_pod(t, "allowed-b", "allowed", true, None).await;
                budget(t, "allowed", "allowed", json!({"minAvailable": 1})).await;
                status_once(t, "allowed", |s| {
                    s["observedGeneration"] == 1 && s["currentHealthy"] == 2
                })
                .await;
                evict(t, "allowed-a", "?dryRun=All").await;
                get_pod(t, "allowed-a").await;
                status_once(t, "allowed", |_| true).await;
                evict_and_watch_budget(t, "allowed-a", "allowed").await;
                get_pod(t, "allowed-a").await;
                status_once(t, "allowed", |s| {
                    s["expectedPods"] == 1 && s.get("disruptedPods").is_none()
                })
                .await;
                evict(t, "allowed-b", "").await;
                get_pod(t, "allowed-b").await;
            }
        ),
        interaction!(
            "pod eviction under two disruption budgets, and under one not yet observed",
            |t| {
                running_pod(t, "double", "double", true, None).await;
                budget(t, "double-one", "double", json!({"minAvailable": 0})).await;
                budget(t, "double-two", "double", json!({"minAvailable": 0})).await;
                evict(t, "double", "").await;
                // A controller the disruption controller cannot scale: the budget's status
                // never observes its generation.
                let owner = post(
                    t,
                    &format!("/api/v1/namespaces/{NAMESPACE}/configmaps"),
                    &json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "owner"}}),
                )
                .await;
                let owner = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                   "uid": owner["metadata"]["uid"], "controller": true});
                running_pod(t, "unobserved", "unobserved", true, Some(owner)).await;
                budget(t, "unobserved", "unobserved", json!({"maxUnavailable": 1})).await;
                evict(t, "unobserved", "").await;
                get_pod(t, "unobserved").await;
            }
        ),
        interaction!(
            "pod eviction of unready pods under IfHealthyBudget and AlwaysAllow",
            |t| {
                running_pod(t, "strict-sick", "strict", false, None).await;
                running_pod(t, "strict-fine", "strict", true, None).await;
                budget(t, "strict", "strict", json!({"minAvailable": 2})).await;
                status_once(t, "strict", |s| {
                    s["observedGeneration"] == 1 && s["expectedPods"] == 2
                })
                .await;
                evict(t, "strict-sick", "").await;
                let policy = json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}});
                t.admin("PATCH", &format!("{}/strict", budgets()), MERGE, policy)
                    .await;
                evict(t, "strict-sick", "").await;
                get_pod(t, "strict-sick").await;
                status_once(t, "strict", |s| {
                    s["observedGeneration"] == 2 && s["expectedPods"] == 1
                })
                .await;
                running_pod(t, "lenient-sick", "lenient", false, None).await;
                running_pod(t, "lenient-fine", "lenient", true, None).await;
                budget(t, "lenient", "lenient", json!({"minAvailable": 1})).await;
                status_once(t, "lenient", |s| {
                    s["observedGeneration"] == 1 && s["currentHealthy"] == 1
                })
                .await;
                evict(t, "lenient-sick", "").await;
                get_pod(t, "lenient-sick").await;
                status_once(t, "lenient", |s| s["expectedPods"] == 1).await;
                // The namespace goes in the background: nothing later uses its name.
                let namespace = format!("/api/v1/namespaces/{NAMESPACE}");
                support::raw(&t.admin, "DELETE", &namespace, JSON, Vec::new()).await;
            }
        ),
    ]
}
