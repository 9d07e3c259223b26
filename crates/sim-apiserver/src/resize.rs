//! The `pods/resize` subresource (in-place pod resize) as kube-apiserver 1.34 serves it: the
//! update strategy (`podResizeStrategy`, `pkg/registry/core/pod/strategy.go`), which takes
//! only the containers' and init containers' `resources` and `resizePolicy` from the request
//! and keeps everything else of the stored pod, and the validation of a resize
//! (`ValidatePodResize`, `pkg/apis/core/validation/validation.go`).
//!
//! The verb handlers (`handlers`) decode, patch, admit and write; this module decides what a
//! resize makes of the stored pod and what it refuses.
//!
//! # Caveats
//! - Of `validatePodMetadataAndSpec` only the containers' resources are checked (a request
//!   over its limit); the rest of a pod's spec is the stored one, already valid.
//! - A request or limit that is not a quantity is stored, where kube-apiserver cannot decode
//!   the patched pod and refuses the patch (422, about the patch).
//! - The LimitRanger admission plugin, which judges a resize upstream, does not judge it here.

use serde_json::{Value, json};

use super::names::Cause;
use super::quantity::Quantity;

/// The name of the subresource (and of the `subresource` of its managedFields entries).
pub const SUBRESOURCE: &str = "resize";

/// The container lists whose resources a resize changes, as the pod spec names them.
const LISTS: [&str; 2] = ["containers", "initContainers"];

/// The resources a resize may change.
const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// `dropNonResizeUpdates`: the stored pod `old` with the containers' and init containers'
/// `resources` and `resizePolicy` of `new`, and `new`'s resourceVersion. Should `new` add,
/// remove, reorder or rename containers, it is returned as it is, for the validation to
/// refuse.
#[must_use]
pub fn prepare_update(old: &Value, new: &Value) -> Value {
    let length = |pod: &Value, list: &str| pod["spec"][list].as_array().map_or(0, Vec::len);
    if LISTS
        .iter()
        .any(|list| length(old, list) != length(new, list))
    {
        return new.clone();
    }
    let mut out = old.clone();
    for list in LISTS {
        let (Some(old_list), Some(new_list)) =
            (old["spec"][list].as_array(), new["spec"][list].as_array())
        else {
            continue;
        };
        let merged = if old_list
            .iter()
            .zip(new_list)
            .any(|(o, n)| o["name"] != n["name"])
        {
            new_list.clone()
        } else {
            old_list
                .iter()
                .zip(new_list)
                .map(|(o, n)| {
                    let mut merged = o.clone();
                    for field in ["resources", "resizePolicy"] {
                        match n.get(field) {
                            Some(value) if !value.is_null() => merged[field] = value.clone(),
                            _ => {
                                if let Some(c) = merged.as_object_mut() {
                                    c.remove(field);
                                }
                            }
                        }
                    }
                    merged
                })
                .collect()
        };
        out["spec"][list] = Value::Array(merged);
    }
    if let Some(rv) = new["metadata"].get("resourceVersion") {
        out["metadata"]["resourceVersion"] = rv.clone();
    }
    out
}

/// `ValidatePodResize` of the prepared (and defaulted) `new` against the stored `old`, its
/// causes in upstream's order. `qos_class` computes a pod's QoS class from its spec.
#[must_use]
pub fn validate_update(
    new: &Value,
    old: &Value,
    qos_class: fn(&Value) -> &'static str,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    for list in LISTS {
        for (i, c) in containers(new, list).iter().enumerate() {
            requests_within_limits(c, &format!("spec.{list}[{i}].resources"), &mut causes);
        }
    }
    let pod_level = |pod: &Value| {
        let resources = &pod["spec"]["resources"];
        ["requests", "limits"]
            .iter()
            .any(|k| resources[k].as_object().is_some_and(|m| !m.is_empty()))
    };
    if pod_level(old) || pod_level(new) {
        return vec![Cause::forbidden(
            "[]",
            "pods with pod-level resources cannot be resized",
        )];
    }
    if old["metadata"]["annotations"]
        .get(super::ephemeral::MIRROR_ANNOTATION)
        .is_some()
    {
        return vec![Cause::forbidden("[]", "static pods cannot be resized")];
    }
    if old["spec"]["os"]["name"] == "windows" {
        return vec![Cause::forbidden("[]", "windows pods cannot be resized")];
    }
    let old_qos = old["status"]["qosClass"]
        .as_str()
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| qos_class(&old["spec"]));
    if old_qos != qos_class(&new["spec"]) {
        causes.push(Cause::invalid(
            "spec",
            new["status"]["qosClass"].clone(),
            "Pod QOS Class may not change as a result of resizing",
        ));
    }
    if !node_supports_resize(old) {
        causes.push(Cause::forbidden(
            "spec",
            "Pod running on node without support for resize",
        ));
    }
    let order = container_order(new, old);
    let misordered = !order.is_empty();
    causes.extend(order);
    if misordered {
        return causes;
    }
    for list in LISTS {
        let old_list = containers(old, list);
        let new_list = containers(new, list);
        for (i, (o, n)) in old_list.iter().zip(&new_list).enumerate() {
            if list == "initContainers" && !is_sidecar(o) {
                continue;
            }
            let path = format!("spec.{list}[{i}].resources");
            for (kind, what) in [("requests", "requests"), ("limits", "limits")] {
                if removed(&n["resources"][kind], &o["resources"][kind]) {
                    causes.push(Cause::forbidden(
                        &format!("{path}.{kind}"),
                        format!("resource {what} cannot be removed"),
                    ));
                }
            }
        }
    }
    let mut munged_spec = new["spec"].clone();
    for list in LISTS {
        let old_list = containers(old, list);
        let Some(new_list) = munged_spec[list].as_array_mut() else {
            continue;
        };
        for (n, o) in new_list.iter_mut().zip(&old_list) {
            let sidecar = is_sidecar(n);
            if list == "containers" || sidecar {
                keep_old_cpu_memory(n, o);
            }
            if !same_container(n, o) {
                causes.push(Cause::forbidden(
                    "spec",
                    match (list, sidecar) {
                        ("containers", _) => "only cpu and memory resources are mutable",
                        (_, true) => {
                            "only cpu and memory resources for sidecar containers are mutable"
                        }
                        _ => "resources for non-sidecar init containers are immutable",
                    },
                ));
            }
        }
    }
    if causes.is_empty() && !same_container(&munged_spec, &old["spec"]) {
        causes.push(Cause::forbidden(
            "spec",
            "only cpu and memory resources are mutable",
        ));
    }
    causes
}

fn containers(pod: &Value, list: &str) -> Vec<Value> {
    pod["spec"][list].as_array().cloned().unwrap_or_default()
}

/// An init container that keeps running beside the containers (`restartPolicy: Always`).
fn is_sidecar(container: &Value) -> bool {
    container["restartPolicy"] == "Always"
}

/// `isPodResizeRequestSupported`: the first running container of the pod's status reports
/// its resources (its node's kubelet resizes), or none runs.
fn node_supports_resize(pod: &Value) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["state"]["running"].is_object())
        .is_none_or(|s| s["resources"].is_object())
}

/// `validatePodResizeContainerOrdering`: no container added, removed, renamed or reordered.
fn container_order(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for list in LISTS {
        let (old_list, new_list) = (containers(old, list), containers(new, list));
        if old_list.len() != new_list.len() {
            causes.push(Cause::forbidden(
                &format!("spec.{list}"),
                format!("{list} may not be added or removed on resize"),
            ));
            continue;
        }
        for (i, (o, n)) in old_list.iter().zip(&new_list).enumerate() {
            if o["name"] != n["name"] {
                causes.push(Cause::forbidden(
                    &format!("spec.{list}[{i}].name"),
                    format!("{list} may not be renamed or reordered on resize"),
                ));
            }
        }
    }
    causes
}

/// `resourcesRemoved`: a resource of `old` missing from `new`.
fn removed(new: &Value, old: &Value) -> bool {
    let Some(old) = old.as_object() else {
        return false;
    };
    old.keys().any(|name| new.get(name).is_none())
}

/// `dropCPUMemoryResourcesFromContainer`: `container`'s cpu and memory requests and limits
/// replaced by those of `old` (a list `old` lacks is dropped).
fn keep_old_cpu_memory(container: &mut Value, old: &Value) {
    let mut resources = serde_json::Map::new();
    for kind in ["limits", "requests"] {
        let Some(old_list) = old["resources"][kind].as_object() else {
            continue;
        };
        let mut munged = container["resources"][kind]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for name in RESIZABLE {
            munged.remove(name);
            if let Some(q) = old_list.get(name) {
                munged.insert(name.to_string(), q.clone());
            }
        }
        resources.insert(kind.to_string(), Value::Object(munged));
    }
    container["resources"] = Value::Object(resources);
}

/// `apiequality.Semantic.DeepEqual`: quantities compare by value, and an empty list or map
/// equals an absent one.
fn same_container(a: &Value, b: &Value) -> bool {
    semantic(a) == semantic(b)
}

fn semantic(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), semantic(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(semantic).collect()),
        Value::String(s) => match Quantity::parse(s) {
            Ok(q) if s.chars().next().is_some_and(|c| c.is_ascii_digit()) => {
                json!(q.to_string())
            }
            _ => value.clone(),
        },
        other => other.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// `validateResourceRequirements`' check that a request is not over its limit (for cpu and
/// memory, which may be overcommitted).
fn requests_within_limits(container: &Value, path: &str, causes: &mut Vec<Cause>) {
    let resources = &container["resources"];
    let Some(requests) = resources["requests"].as_object() else {
        return;
    };
    for (name, request) in requests {
        let limit = resources["limits"][name.as_str()].as_str();
        let (Some(request), Some(limit)) = (
            request.as_str().and_then(|q| Quantity::parse(q).ok()),
            limit.and_then(|q| Quantity::parse(q).ok()),
        ) else {
            continue;
        };
        if request > limit {
            causes.push(Cause::invalid(
                &format!("{path}.requests"),
                json!(request.to_string()),
                format!("must be less than or equal to {name} limit of {limit}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(requests: Value, limits: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": {"a": "b"}, "resourceVersion": "5"},
               "spec": {"containers": [{"name": "main", "image": "app:1",
                        "resources": {"requests": requests, "limits": limits}}]},
               "status": {"qosClass": "Burstable"}})
    }

    fn burstable(_: &Value) -> &'static str {
        "Burstable"
    }

    #[test]
    fn a_resize_takes_only_the_containers_resources_from_the_request() {
        let old = pod(json!({"cpu": "100m"}), json!({"cpu": "200m"}));
        let mut new = pod(json!({"cpu": "150m"}), json!({"cpu": "300m"}));
        new["metadata"]["labels"]["a"] = json!("changed");
        new["metadata"]["resourceVersion"] = json!("6");
        new["spec"]["containers"][0]["image"] = json!("app:2");
        let out = prepare_update(&old, &new);
        assert_eq!(out["metadata"]["labels"]["a"], "b");
        assert_eq!(out["metadata"]["resourceVersion"], "6");
        assert_eq!(out["spec"]["containers"][0]["image"], "app:1");
        assert_eq!(
            out["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "300m"
        );
        assert!(validate_update(&out, &old, burstable).is_empty());
    }

    #[test]
    fn a_resize_may_not_remove_requests_or_add_other_resources() {
        let old = pod(
            json!({"cpu": "100m", "memory": "1Mi"}),
            json!({"cpu": "200m"}),
        );
        let new = pod(
            json!({"cpu": "100m", "ephemeral-storage": "1Gi"}),
            json!({"cpu": "200m"}),
        );
        let messages: Vec<String> = validate_update(&prepare_update(&old, &new), &old, burstable)
            .into_iter()
            .map(|c| c.message)
            .collect();
        assert_eq!(
            messages,
            [
                "resource requests cannot be removed",
                "only cpu and memory resources are mutable"
            ]
        );
    }

    #[test]
    fn a_request_over_its_limit_is_refused_with_the_limit_named() {
        let old = pod(json!({"cpu": "100m"}), json!({"cpu": "200m"}));
        let new = pod(json!({"cpu": "2"}), json!({"cpu": "200m"}));
        let causes = validate_update(&prepare_update(&old, &new), &old, burstable);
        assert_eq!(causes[0].field, "spec.containers[0].resources.requests");
        assert_eq!(
            causes[0].message,
            "must be less than or equal to cpu limit of 200m"
        );
    }
}
