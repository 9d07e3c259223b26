//! Events written through both of their group versions: `events.k8s.io/v1` and core `v1`
//! share one storage, and each writer's `managedFields` entry names the version it wrote
//! and its fields as that version names them (`note`, `regarding` in one, `message`,
//! `involvedObject` in the other), whichever version the object is read through. A write
//! through one version (an update, a patch, an apply) drops the other version's managers
//! (the field manager of either resource cannot convert to the other's version). Through
//! events.k8s.io/v1 what an Event says is immutable; through core `v1` it is not.

use serde_json::{Value, json};

use super::{APPLY, Interaction, JSON, MERGE, NS, Target, parse_body, support};

fn events_of(group_version: &str) -> String {
    match group_version {
        "v1" => format!("/api/v1/namespaces/{NS}/events"),
        _ => format!("/apis/{group_version}/namespaces/{NS}/events"),
    }
}

/// The Event `name` as `group_version` serves it, unrecorded.
async fn read(t: &Target, group_version: &str, name: &str) -> Value {
    let path = format!("{}/{name}", events_of(group_version));
    let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
    assert_eq!(code, 200, "{}: GET {path}: {text}", t.name);
    parse_body(text)
}

/// Reads the Event `name` through both versions, recorded.
async fn read_both(t: &Target, name: &str) {
    for group_version in ["events.k8s.io/v1", "v1"] {
        let path = format!("{}/{name}", events_of(group_version));
        t.admin("GET", &path, JSON, Value::Null).await;
    }
}

/// Replaces the Event `name` through `group_version` as `manager`, after `edit` changes
/// what that version serves.
async fn replace(
    t: &Target,
    group_version: &str,
    name: &str,
    manager: &str,
    edit: impl FnOnce(&mut Value),
) {
    let mut event = read(t, group_version, name).await;
    edit(&mut event);
    let path = format!("{}/{name}?fieldManager={manager}", events_of(group_version));
    t.admin("PUT", &path, JSON, event).await;
}

/// Creates the Event `name` through core `v1` as a kubelet writes one, recorded.
async fn create_as_kubelet(t: &Target, name: &str, reason: &str, message: &str) {
    let created = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": NS},
        "reason": reason, "message": message, "type": "Normal",
        "source": {"component": "kubelet", "host": "node-a"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1});
    let path = format!("{}?fieldManager=kubelet", events_of("v1"));
    t.admin("POST", &path, JSON, created).await;
}

/// The interactions of this module, in the order they run.
pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "events: created through events.k8s.io/v1, updated through both versions",
            |t| {
                let created = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "mf-reconciled"},
                    "eventTime": "2026-01-01T00:00:00.000000Z",
                    "reportingController": "example.com/operator",
                    "reportingInstance": "operator-0",
                    "action": "Reconcile", "reason": "Reconciled", "type": "Normal",
                    "regarding": {"kind": "ConfigMap", "name": "settings", "namespace": NS},
                    "note": "reconciled settings"});
                let path = format!("{}?fieldManager=recorder", events_of("events.k8s.io/v1"));
                t.admin("POST", &path, JSON, created).await;
                read_both(t, "mf-reconciled").await;
                replace(t, "v1", "mf-reconciled", "core-editor", |e| {
                    e["message"] = json!("edited through v1");
                    e["count"] = json!(2);
                })
                .await;
                read_both(t, "mf-reconciled").await;
                replace(
                    t,
                    "events.k8s.io/v1",
                    "mf-reconciled",
                    "events-editor",
                    |e| {
                        e["metadata"]["labels"] = json!({"edited": "events.k8s.io"});
                    },
                )
                .await;
                read_both(t, "mf-reconciled").await;
                let patch = json!({"series": {"count": 2,
                    "lastObservedTime": "2026-01-01T00:01:00.000000Z"}});
                let path = format!(
                    "{}/mf-reconciled?fieldManager=patcher",
                    events_of("events.k8s.io/v1")
                );
                t.admin("PATCH", &path, MERGE, patch).await;
                read_both(t, "mf-reconciled").await;
            }
        ),
        interaction!(
            "events: created through v1, updated through events.k8s.io/v1",
            |t| {
                create_as_kubelet(t, "mf-started", "Started", "started container").await;
                read_both(t, "mf-started").await;
                replace(t, "events.k8s.io/v1", "mf-started", "events-editor", |e| {
                    e["metadata"]["labels"] = json!({"edited": "events.k8s.io"});
                })
                .await;
                read_both(t, "mf-started").await;
                // events.k8s.io/v1 keeps what an Event says as it was written.
                replace(t, "events.k8s.io/v1", "mf-started", "events-editor", |e| {
                    e["note"] = json!("edited through events.k8s.io");
                    e["regarding"]["fieldPath"] = json!("spec");
                })
                .await;
            }
        ),
        interaction!(
            "events: created through v1, applied through events.k8s.io/v1",
            |t| {
                create_as_kubelet(t, "mf-applied", "Pulled", "pulled image").await;
                let applied = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "mf-applied", "labels": {"applied": "yes"}}});
                let path = format!(
                    "{}/mf-applied?fieldManager=applier",
                    events_of("events.k8s.io/v1")
                );
                t.admin("PATCH", &path, APPLY, applied).await;
                read_both(t, "mf-applied").await;
            }
        ),
    ]
}
