//! ComponentStatuses (`/api/v1/componentstatuses`, deprecated): get and list, their errors,
//! the deprecation warning and their discovery entries.
//!
//! kube-apiserver probes kube-controller-manager's and kube-scheduler's `/healthz` on their
//! default ports (10257, 10259). The control plane under test runs both on free ports, so
//! there both probes are refused and the two components are unhealthy, while the simulator's
//! in-process controllers and scheduler are healthy: the status and message of those two
//! conditions are masked, everything else (names, etcd's condition, the condition's type) is
//! compared. kube-apiserver lists the components in the order its concurrent probes finish,
//! which is not fixed: lists are compared sorted by name.

use serde_json::{Value, json};

use super::field_order::{Body, ordered};
use super::{AGGREGATED, Answer, Interaction, JSON, Target, discovery, normalize, parse_body};

const COMPONENT_STATUSES: &str = "/api/v1/componentstatuses";

/// A component's conditions with the status and message masked where the probe depends on
/// the environment (see the module's documentation).
fn masked(mut item: Value) -> Value {
    let name = item["metadata"]["name"].as_str().unwrap_or_default();
    if matches!(name, "controller-manager" | "scheduler")
        && let Some(conditions) = item["conditions"].as_array_mut()
    {
        for condition in conditions {
            condition["status"] = json!("<environment>");
            condition["message"] = json!("<environment>");
        }
    }
    item
}

/// Records `text` (an answer to `asked`) with its items or object masked by [`masked`], the
/// items sorted by name.
fn record_masked(t: &Target, asked: &str, text: &str) {
    let mut body = parse_body(text.to_string());
    if let Some(items) = body["items"].as_array_mut() {
        for item in items.iter_mut() {
            *item = masked(item.take());
        }
        items.sort_by_key(|item| item["metadata"]["name"].to_string());
    } else if body["kind"] == "ComponentStatus" {
        body = masked(body);
    }
    t.record(Answer {
        asked: format!("{asked}, environment masked"),
        code: 200,
        body: normalize(body),
    });
}

/// The entry of `resource` in a discovery document's `resources`, wherever it is.
fn entry(document: &Value, resource: &str) -> Value {
    let find = |resources: &Value| {
        resources
            .as_array()
            .and_then(|r| {
                r.iter()
                    .find(|e| e["name"] == resource || e["resource"] == resource)
            })
            .cloned()
    };
    find(&document["resources"])
        .or_else(|| {
            document["items"].as_array().and_then(|groups| {
                groups.iter().find_map(|group| {
                    group["versions"]
                        .as_array()
                        .and_then(|versions| versions.iter().find_map(|v| find(&v["resources"])))
                })
            })
        })
        .unwrap_or(Value::Null)
}

/// The interactions of ComponentStatuses.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![interaction!(
        "ComponentStatuses: list, get, errors, warning and discovery",
        |t| {
            let get = |path: String, keep: Body| async move {
                ordered(t, "GET", &path, JSON, JSON, Value::Null, keep).await
            };
            let list = get(COMPONENT_STATUSES.into(), Body::KeysOnly).await;
            record_masked(t, "GET /api/v1/componentstatuses", &list);
            let one = get(format!("{COMPONENT_STATUSES}/scheduler"), Body::KeysOnly).await;
            record_masked(t, "GET /api/v1/componentstatuses/scheduler", &one);
            get(format!("{COMPONENT_STATUSES}/etcd-0"), Body::Compared).await;
            get(format!("{COMPONENT_STATUSES}/nothing"), Body::Compared).await;
            get(
                format!("{COMPONENT_STATUSES}?fieldSelector=metadata.name%3Detcd-0"),
                Body::Compared,
            )
            .await;
            get(
                format!("{COMPONENT_STATUSES}?labelSelector=a%3Db"),
                Body::Compared,
            )
            .await;
            get(format!("{COMPONENT_STATUSES}?watch=1"), Body::Compared).await;
            let etcd = format!("{COMPONENT_STATUSES}/etcd-0");
            ordered(t, "DELETE", &etcd, JSON, JSON, Value::Null, Body::Compared).await;
            let core = discovery(t, "/api/v1", JSON).await;
            let aggregated = discovery(t, "/api", AGGREGATED).await;
            t.record(Answer {
                asked: "the discovery entries of componentstatuses".into(),
                code: 200,
                body: json!({
                    "/api/v1": entry(&core, "componentstatuses"),
                    "/api aggregated": entry(&aggregated, "componentstatuses"),
                }),
            });
        }
    )]
}
