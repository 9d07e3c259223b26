//! The LimitRanger admission plugin (`plugin/pkg/admission/limitranger`): a pod created (by
//! any create path: [`super::admission::mutate_by_plugins`] calls [`default_pod`]) in
//! a namespace with LimitRanges gets their `Container` defaults (`default` as limits,
//! `defaultRequest` as requests) where its containers state none, with the
//! `kubernetes.io/limit-ranger` annotation naming what was set; a pod created and a
//! PersistentVolumeClaim created or updated are then refused when they break a range's
//! `min`, `max` or `maxLimitRequestRatio` (per `Container`, per `Pod` over the pod's summed
//! requests and limits, per `PersistentVolumeClaim` over its storage request), with the
//! plugin's messages.
//!
//! # Caveats
//! - A range's several violations of one kind (two resources under `min`) are listed in
//!   name order, where the real plugin lists them in Go's map order, which varies.
//! - The `resize` subresource of pods is not checked.

use serde_json::{Map, Value, json};

use super::quantity::Quantity;
use super::quota::{ResourceList, pod_resources, resource_list};

/// The annotation the plugin writes on a pod it defaulted.
const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Whether the plugin looks at a write of `group`/`resource` at `subresource`.
#[must_use]
pub fn applies(group: &str, resource: &str, subresource: &str, update: bool) -> bool {
    group.is_empty()
        && subresource.is_empty()
        && match resource {
            "pods" => !update,
            "persistentvolumeclaims" => true,
            _ => false,
        }
}

/// The `Container` defaults of one range: limits and requests.
fn container_defaults(range: &Value) -> (Map<String, Value>, Map<String, Value>) {
    let (mut limits, mut requests) = (Map::new(), Map::new());
    for item in range["spec"]["limits"].as_array().into_iter().flatten() {
        if item["type"] == "Container" {
            if let Some(d) = item["defaultRequest"].as_object() {
                requests.extend(d.clone());
            }
            if let Some(d) = item["default"].as_object() {
                limits.extend(d.clone());
            }
        }
    }
    (limits, requests)
}

/// Gives `pod` (as sent, before its own defaulting) the `Container` defaults of each range
/// in turn, and the annotation of the last range that set something.
pub fn default_pod(ranges: &[Value], pod: &mut Value) {
    for range in ranges {
        let (default_limits, default_requests) = container_defaults(range);
        let mut notes = Vec::new();
        for (key, prefix) in [
            ("containers", "container"),
            ("initContainers", "init container"),
        ] {
            let Some(containers) = pod["spec"][key].as_array_mut() else {
                continue;
            };
            for container in containers {
                let name = container["name"].as_str().unwrap_or_default().to_string();
                let resources = &mut container["resources"];
                // Decoding already gave the requests the limits stated (SetDefaults_Pod).
                let stated_limits = resources["limits"].as_object().cloned().unwrap_or_default();
                let mut set_limits = Vec::new();
                for (k, v) in &default_limits {
                    if resources["limits"].get(k).is_none() {
                        resources["limits"][k] = v.clone();
                        set_limits.push(k.clone());
                    }
                }
                let mut set_requests = Vec::new();
                for (k, v) in &default_requests {
                    if resources["requests"].get(k).is_none() && !stated_limits.contains_key(k) {
                        resources["requests"][k] = v.clone();
                        set_requests.push(k.clone());
                    }
                }
                set_requests.sort();
                set_limits.sort();
                if !set_requests.is_empty() {
                    notes.push(format!(
                        "{} request for {prefix} {name}",
                        set_requests.join(", ")
                    ));
                }
                if !set_limits.is_empty() {
                    notes.push(format!(
                        "{} limit for {prefix} {name}",
                        set_limits.join(", ")
                    ));
                }
            }
        }
        if !notes.is_empty() {
            pod["metadata"]["annotations"][ANNOTATION] =
                json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
        }
    }
}

/// `minConstraint`.
fn min_constraint(
    kind: &str,
    name: &str,
    enforced: Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let Some(request) = requests.get(name) else {
        return Some(format!(
            "minimum {name} usage per {kind} is {enforced}.  No request is specified"
        ));
    };
    if *request < enforced {
        return Some(format!(
            "minimum {name} usage per {kind} is {enforced}, but request is {request}"
        ));
    }
    match limits.get(name) {
        Some(limit) if *limit < enforced => Some(format!(
            "minimum {name} usage per {kind} is {enforced}, but limit is {limit}"
        )),
        _ => None,
    }
}

/// `maxConstraint`, or `maxRequestConstraint` when `limits` is `None`.
fn max_constraint(
    kind: &str,
    name: &str,
    enforced: Quantity,
    requests: &ResourceList,
    limits: Option<&ResourceList>,
) -> Option<String> {
    let request = requests.get(name);
    let Some(limits) = limits else {
        return match request {
            None => Some(format!(
                "maximum {name} usage per {kind} is {enforced}.  No request is specified"
            )),
            Some(r) if *r > enforced => Some(format!(
                "maximum {name} usage per {kind} is {enforced}, but request is {r}"
            )),
            Some(_) => None,
        };
    };
    let Some(limit) = limits.get(name) else {
        return Some(format!(
            "maximum {name} usage per {kind} is {enforced}.  No limit is specified"
        ));
    };
    if *limit > enforced {
        return Some(format!(
            "maximum {name} usage per {kind} is {enforced}, but limit is {limit}"
        ));
    }
    match request {
        Some(r) if *r > enforced => Some(format!(
            "maximum {name} usage per {kind} is {enforced}, but request is {r}"
        )),
        _ => None,
    }
}

/// `limitRequestRatioConstraint`, in milli-units as the plugin compares them.
fn ratio_constraint(
    kind: &str,
    name: &str,
    enforced: Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let milli = |q: &Quantity| q.milli_value();
    let request = requests.get(name).map(milli).filter(|v| *v != 0);
    let limit = limits.get(name).map(milli).filter(|v| *v != 0);
    let Some(request) = request else {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
        ));
    };
    let Some(limit) = limit else {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
        ));
    };
    #[allow(clippy::cast_precision_loss)]
    let ratio = limit as f64 / request as f64;
    #[allow(clippy::cast_precision_loss)]
    let most = enforced.milli_value() as f64;
    (ratio * 1000.0 > most).then(|| {
        format!(
            "{name} max limit to request ratio per {kind} is {enforced}, but provided ratio is {ratio:.6}"
        )
    })
}

/// The errors of one range's item over one set of requests and limits.
fn check_item(
    item: &Value,
    kind: &str,
    requests: &ResourceList,
    limits: &ResourceList,
    errors: &mut Vec<String>,
) {
    for (name, q) in resource_list(&item["min"]) {
        errors.extend(min_constraint(kind, &name, q, requests, limits));
    }
    for (name, q) in resource_list(&item["max"]) {
        errors.extend(max_constraint(kind, &name, q, requests, Some(limits)));
    }
    for (name, q) in resource_list(&item["maxLimitRequestRatio"]) {
        errors.extend(ratio_constraint(kind, &name, q, requests, limits));
    }
}

/// The errors of `object` (a pod or a claim, `resource`) under one range.
fn range_errors(range: &Value, resource: &str, object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    for item in range["spec"]["limits"].as_array().into_iter().flatten() {
        match (resource, item["type"].as_str().unwrap_or_default()) {
            ("pods", "Container") => {
                for key in ["containers", "initContainers"] {
                    for c in object["spec"][key].as_array().into_iter().flatten() {
                        let requests = resource_list(&c["resources"]["requests"]);
                        let limits = resource_list(&c["resources"]["limits"]);
                        check_item(item, "Container", &requests, &limits, &mut errors);
                    }
                }
            }
            ("pods", "Pod") => {
                let requests = pod_resources(object, "requests", false);
                let limits = pod_resources(object, "limits", false);
                check_item(item, "Pod", &requests, &limits, &mut errors);
            }
            ("persistentvolumeclaims", "PersistentVolumeClaim") => {
                let kind = "PersistentVolumeClaim";
                let requests = resource_list(&object["spec"]["resources"]["requests"]);
                for (name, q) in resource_list(&item["min"]) {
                    errors.extend(min_constraint(
                        kind,
                        &name,
                        q,
                        &requests,
                        &ResourceList::new(),
                    ));
                }
                for (name, q) in resource_list(&item["max"]) {
                    errors.extend(max_constraint(kind, &name, q, &requests, None));
                }
            }
            _ => {}
        }
    }
    errors
}

/// Checks `object` (a pod or a claim, `resource`) against each range in turn: the first
/// range it breaks refuses it, with apimachinery's aggregate of that range's errors
/// (duplicates once, several in brackets).
///
/// # Errors
/// The refusal's message (the caller makes it a 403 for the object).
pub fn validate(ranges: &[Value], resource: &str, object: &Value) -> Result<(), String> {
    for range in ranges {
        let mut errors = range_errors(range, resource, object);
        let mut seen = std::collections::BTreeSet::new();
        errors.retain(|e| seen.insert(e.clone()));
        match errors.len() {
            0 => {}
            1 => return Err(errors.remove(0)),
            _ => return Err(format!("[{}]", errors.join(", "))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(items: Value) -> Value {
        json!({"metadata": {"name": "r"}, "spec": {"limits": items}})
    }

    #[test]
    fn a_pod_gets_the_container_defaults_it_does_not_state_and_the_annotation_naming_them() {
        let ranges = [range(json!([{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]))];
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"memory": "1Gi"}}}],
            "initContainers": [{"name": "setup"}]}});
        default_pod(&ranges, &mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"limits": {"memory": "1Gi", "cpu": "500m"}, "requests": {"cpu": "100m"}})
        );
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu request for container main; cpu limit for container main; \
             cpu, memory request for init container setup; cpu, memory limit for init container setup"
        );
    }

    #[test]
    fn a_range_refuses_with_the_plugins_words() {
        let ranges = [range(json!([
            {"type": "Container", "min": {"cpu": "100m"}, "max": {"memory": "1Gi"},
             "maxLimitRequestRatio": {"cpu": "2"}}]))];
        let pod = |resources: Value| json!({"spec": {"containers": [{"name": "main", "resources": resources}]}});
        let low =
            pod(json!({"requests": {"cpu": "50m"}, "limits": {"memory": "1Gi", "cpu": "50m"}}));
        assert_eq!(
            validate(&ranges, "pods", &low).unwrap_err(),
            "minimum cpu usage per Container is 100m, but request is 50m"
        );
        let high =
            pod(json!({"requests": {"cpu": "100m"}, "limits": {"memory": "2Gi", "cpu": "300m"}}));
        assert_eq!(
            validate(&ranges, "pods", &high).unwrap_err(),
            "[maximum memory usage per Container is 1Gi, but limit is 2Gi, \
             cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000]"
        );
        let claim_ranges = [range(
            json!([{"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}}]),
        )];
        let claim = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
        assert_eq!(
            validate(&claim_ranges, "persistentvolumeclaims", &claim).unwrap_err(),
            "maximum storage usage per PersistentVolumeClaim is 1Gi, but request is 2Gi"
        );
    }
}
