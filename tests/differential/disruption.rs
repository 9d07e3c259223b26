//! The status kube-controller-manager's disruption controller writes on
//! PodDisruptionBudgets: over bare pods counted one by one (`minAvailable` as an integer),
//! over bare pods that have no controller to scale a percentage by, and over a Deployment's
//! pods counted by its scale. Neither control plane has nodes, so no pod is Ready unless the
//! admin plays the kubelet through `pods/status`.

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, STRATEGIC, normalize, parse_body, support, wait_until};

/// The namespace of these interactions (the shared one is deleted earlier in the list).
const NAMESPACE: &str = "disruption";

fn budgets() -> String {
    format!("/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets")
}

fn pods() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods")
}

async fn post(t: &super::Target, path: &str, object: &Value) {
    let body = serde_json::to_vec(object).unwrap();
    let (code, text) = support::raw(&t.admin, "POST", path, JSON, body).await;
    assert_eq!(code, 201, "{}: POST {path}: {text}", t.name);
}

fn budget(name: &str, app: &str, rule: Value) -> Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
    if let (Some(spec), Some(rule)) = (spec.as_object_mut(), rule.as_object()) {
        spec.extend(rule.clone());
    }
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": name}, "spec": spec})
}

/// Waits until the budget's status satisfies `settled`, then records it.
async fn status_once(t: &super::Target, name: &str, settled: impl Fn(&Value) -> bool) {
    let path = format!("{}/{name}", budgets());
    wait_until(t, &path, "the budget's status", |code, body| {
        code == 200 && settled(&body["status"])
    })
    .await;
    let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
    t.record(Answer {
        asked: format!("GET {path}: status"),
        code: i64::from(code),
        body: normalize(parse_body(text)["status"].clone()),
    });
}

/// Marks a pod Ready through `pods/status`, as its kubelet would.
async fn make_ready(t: &super::Target, pod: &str) {
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let path = format!("{}/{pod}/status", pods());
    let body = serde_json::to_vec(&patch).unwrap();
    let (code, text) = support::raw(&t.admin, "PATCH", &path, STRATEGIC, body).await;
    assert_eq!(code, 200, "{}: PATCH {path}: {text}", t.name);
}

fn reason(status: &Value) -> &str {
    status["conditions"][0]["reason"]
        .as_str()
        .unwrap_or_default()
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "disruption budgets: status over bare pods, by count and by percentage",
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
                for name in ["guarded-a", "guarded-b"] {
                    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {"name": name, "labels": {"app": "guarded"}},
                                     "spec": {"containers": [{"name": "main",
                                                              "image": "example/app:1"}]}});
                    post(t, &pods(), &pod).await;
                }
                post(
                    t,
                    &budgets(),
                    &budget("by-count", "guarded", json!({"minAvailable": 1})),
                )
                .await;
                status_once(t, "by-count", |s| {
                    s["observedGeneration"] == 1 && s["expectedPods"] == 2
                })
                .await;
                make_ready(t, "guarded-a").await;
                make_ready(t, "guarded-b").await;
                status_once(t, "by-count", |s| s["currentHealthy"] == 2).await;
                post(
                    t,
                    &budgets(),
                    &budget("by-percent", "guarded", json!({"maxUnavailable": "50%"})),
                )
                .await;
                status_once(t, "by-percent", |s| s["observedGeneration"] == 1).await;
            }
        ),
        interaction!(
            "disruption budgets: status over a Deployment's pods, by its scale",
            |t| {
                let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web"},
                    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                             "template": {"metadata": {"labels": {"app": "web"}},
                                          "spec": {"containers": [{"name": "main",
                                                                   "image": "example/app:1"}]}}}});
                post(
                    t,
                    &format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments"),
                    &deployment,
                )
                .await;
                post(
                    t,
                    &budgets(),
                    &budget("web", "web", json!({"maxUnavailable": "34%"})),
                )
                .await;
                status_once(t, "web", |s| {
                    s["expectedPods"] == 3 && reason(s) == "InsufficientPods"
                })
                .await;
                post(
                    t,
                    &budgets(),
                    &budget("web-half", "web", json!({"minAvailable": "50%"})),
                )
                .await;
                status_once(t, "web-half", |s| {
                    s["expectedPods"] == 3 && reason(s) == "InsufficientPods"
                })
                .await;
                let namespace = format!("/api/v1/namespaces/{NAMESPACE}");
                support::raw(&t.admin, "DELETE", &namespace, JSON, Vec::new()).await;
                wait_until(t, &namespace, "the namespace gone", |code, _| code == 404).await;
            }
        ),
    ]
}
