//! ComponentStatus (`/api/v1/componentstatuses`, deprecated since Kubernetes 1.19): the health
//! of the control plane's components, read with get and list only.
//!
//! kube-apiserver computes it on each read: it probes kube-controller-manager's and
//! kube-scheduler's `/healthz` on their default ports and its etcd servers at once, and lists
//! `controller-manager`, `scheduler` and `etcd-0` in the order their probes finish (so in no
//! fixed order; here always that one), each with one `Healthy` condition (`True` with the
//! message `ok` when the probe answered `ok`). Label and field selectors filter the list. The simulated
//! controllers and scheduler run in the same process as this server and its store, so each
//! component is healthy here. Every answer to a get, list or watch carries the deprecation
//! warning; a watch is refused with 405 as kube-apiserver refuses it, other verbs have no route.

use serde_json::{Value, json};

use super::call::Call;
use super::registry::ResourceType;
use super::request::RequestInfo;
use super::status::{ApiError, GroupResource};

/// The `Warning` header of every answer about ComponentStatuses.
pub const WARNING: &str = "299 - \"v1 ComponentStatus is deprecated in v1.19+\"";

/// The components, in the order this server lists them.
const COMPONENTS: [&str; 3] = ["controller-manager", "scheduler", "etcd-0"];

/// The plural, which is also the resource of a refused watch.
const RESOURCE: &str = "componentstatuses";

/// Whether the answer to `info` carries [`WARNING`]: a get, list or watch of
/// ComponentStatuses.
pub fn warns(info: &RequestInfo) -> bool {
    info.resource_request
        && info.group.is_empty()
        && info.version == "v1"
        && info.resource == RESOURCE
        && info.subresource.is_empty()
        && matches!(info.verb.as_str(), "get" | "list" | "watch")
}

/// The 405 of a watch of ComponentStatuses.
pub fn watch_refused() -> ApiError {
    ApiError::VerbNotSupported {
        gr: GroupResource::new("", RESOURCE),
        verb: "watch".into(),
    }
}

/// A get or a list (with its label and field selectors); other verbs have no route.
///
/// # Errors
/// 404 for a component that does not exist, 400 for a malformed selector, 405 for other verbs.
pub fn serve(call: &Call<'_>, rt: &ResourceType) -> Result<(u16, Value), ApiError> {
    match (call.info.verb.as_str(), call.info.subresource.as_str()) {
        ("get", "") => {
            let name = call.info.name.as_str();
            if !COMPONENTS.contains(&name) {
                // The storage names the singular resource, details included.
                return Err(ApiError::not_found(
                    &GroupResource::new("", "componentstatus"),
                    name,
                ));
            }
            let mut object = healthy(name);
            object["kind"] = json!("ComponentStatus");
            object["apiVersion"] = json!("v1");
            Ok((200, object))
        }
        ("list", "") => {
            let (labels, fields) = call.selectors(rt)?;
            let items: Vec<Value> = COMPONENTS
                .iter()
                .map(|name| healthy(name))
                .filter(|item| {
                    labels.matches(
                        &item["metadata"]["labels"]
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                    ) && fields.matches(item)
                })
                .collect();
            Ok((
                200,
                json!({"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {},
                    "items": items}),
            ))
        }
        // No route: the router's 405, with empty details.
        _ => Err(ApiError::Generic { code: 405 }),
    }
}

/// A healthy component as a list item (without kind and apiVersion).
fn healthy(name: &str) -> Value {
    json!({"metadata": {"name": name},
        "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]})
}
