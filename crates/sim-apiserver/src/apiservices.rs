//! The APIServices of `apiregistration.k8s.io/v1`: one per served group version, as
//! kube-apiserver's autoregister controller keeps them (`v1.` for the core group, `v1.apps`,
//! …, and one per served version of every CRD group, by the CRD registration controller),
//! each Available because it is served locally.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::registry::Registry;

/// The label the autoregister controller puts on the APIServices it manages.
pub const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// `(group, version, groupPriorityMinimum, versionPriority)` of the built-in group versions
/// the simulator serves (`pkg/controlplane/apiserver/aggregator.go` `APIVersionPriorities`).
const PRIORITIES: &[(&str, &str, u32, u32)] = &[
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
];

/// The name of the APIService of a group version: `v1.apps`, `v1.` for the core group.
pub fn name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// The APIService of one served group version, without status: built-in ones are
/// registered on start with their priorities, CRD group versions with priority 1000/100.
fn apiservice(group: &str, version: &str, custom: bool) -> Value {
    let (group_priority, version_priority, managed) = match PRIORITIES
        .iter()
        .find(|(g, v, _, _)| *g == group && *v == version)
    {
        Some((_, _, g, v)) if !custom => (*g, *v, "onstart"),
        _ => (1000, 100, "true"),
    };
    let mut spec = json!({"version": version,
        "groupPriorityMinimum": group_priority, "versionPriority": version_priority});
    if !group.is_empty() {
        spec["group"] = json!(group);
    }
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": name(group, version), "labels": {AUTOMANAGED: managed}},
        "spec": spec,
    })
}

/// The APIServices the served types call for, by name; the aggregator's own group has
/// none.
pub fn desired(registry: &Registry) -> Vec<Value> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for ((group, version), types) in registry.group_versions() {
        if group == "apiregistration.k8s.io" {
            continue;
        }
        if seen.insert((group.clone(), version.clone())) {
            let custom = types.iter().all(|t| t.is_custom());
            out.push(apiservice(&group, &version, custom));
        }
    }
    out
}

/// The status of a locally served APIService: Available since `now`.
pub fn local_status(now: &str) -> Value {
    json!({"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": now,
        "reason": "Local", "message": "Local APIServices are always available"}]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_group_version_has_an_apiservice_with_its_priority() {
        let all = desired(&Registry::new());
        let names: Vec<&str> = all
            .iter()
            .filter_map(|a| a["metadata"]["name"].as_str())
            .collect();
        assert!(names.contains(&"v1."));
        assert!(names.contains(&"v1.apps"));
        assert!(!names.contains(&"v1.apiregistration.k8s.io"));
        let apps = all
            .iter()
            .find(|a| a["metadata"]["name"] == "v1.apps")
            .cloned()
            .unwrap_or_default();
        assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800);
        assert_eq!(apps["metadata"]["labels"][AUTOMANAGED], "onstart");
    }
}
