//! The objects kube-apiserver 1.34 writes into every cluster itself, besides its namespaces,
//! the RBAC bootstrap policy and the `kubernetes` Service: the two system PriorityClasses
//! (`pkg/apis/scheduling.SystemPriorityClasses`), the API Priority and Fairness
//! configuration its config producer keeps (`flowcontrol/bootstrap`), with the `Dangling`
//! condition its config consumer applies to each FlowSchema's status, and the default
//! ServiceCIDR with the IPAddress of the `kubernetes` Service, as kube-apiserver and
//! kube-controller-manager leave them once the range is ready.
//!
//! The flow-control objects are held as captured from a real kube-apiserver 1.34.4
//! (`flowcontrol.json` beside this module: metadata, spec, nothing the server sets), since
//! they are data rather than rules; the differential test compares them, whole, with the
//! real server's, so the file cannot drift unseen.

use serde_json::{Value, json};

/// The manager the real server's config producer writes the flow-control objects as.
pub const FLOW_CONTROL_PRODUCER: &str = "api-priority-and-fairness-config-producer-v1";

/// The manager its config consumer applies FlowSchema status as.
const FLOW_CONTROL_CONSUMER: &str = "api-priority-and-fairness-config-consumer-v1";

/// `system-node-critical` and `system-cluster-critical`, as the server creates them.
pub fn priority_classes() -> Vec<Value> {
    [
        (
            "system-node-critical",
            2_000_001_000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        (
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ]
    .into_iter()
    .map(|(name, value, description)| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description})
    })
    .collect()
}

/// The PriorityLevelConfigurations, then the FlowSchemas, each with its plural.
pub fn flow_control() -> Vec<(&'static str, Value)> {
    let objects: Vec<Value> =
        serde_json::from_str(include_str!("flowcontrol.json")).unwrap_or_default();
    objects
        .into_iter()
        .map(|object| {
            let resource = match object["kind"].as_str() {
                Some("FlowSchema") => "flowschemas",
                _ => "prioritylevelconfigurations",
            };
            (resource, object)
        })
        .collect()
}

/// The status the config consumer applies to a FlowSchema whose priority level exists, and
/// the `managedFields` entry of that apply, both at `now`.
pub fn flow_schema_status(flow_schema: &Value, now: &str) -> (Value, Value) {
    let level = flow_schema["spec"]["priorityLevelConfiguration"]["name"]
        .as_str()
        .unwrap_or_default();
    let status = json!({"conditions": [{"type": "Dangling", "status": "False", "reason": "Found",
        "message": format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} and it exists"),
        "lastTransitionTime": now}]});
    let entry = json!({"manager": FLOW_CONTROL_CONSUMER, "operation": "Apply",
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "time": now, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Dangling\"}": {
            ".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {},
            "f:status": {}, "f:type": {}}}}},
        "subresource": "status"});
    (status, entry)
}

/// The default service range, `10.0.0.0/24` (the local control plane's).
pub const SERVICE_CIDR: &str = "10.0.0.0/24";

/// The `kubernetes` ServiceCIDR once ready: its range as kube-apiserver writes it, the
/// finalizer kube-controller-manager's servicecidr controller adds, and the `Ready`
/// condition both apply, each with its own `managedFields` entry, at `now`.
pub fn service_cidr(now: &str) -> Value {
    const GROUP_VERSION: &str = "networking.k8s.io/v1";
    let ready =
        |fields: Value| json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": fields}}});
    let entry = |manager: &str, operation: &str, fields: Value, status: bool| {
        let mut e = json!({"manager": manager, "operation": operation,
            "apiVersion": GROUP_VERSION, "time": now, "fieldsType": "FieldsV1",
            "fieldsV1": fields});
        if status {
            e["subresource"] = json!("status");
        }
        e
    };
    json!({"apiVersion": GROUP_VERSION, "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes",
            "finalizers": ["networking.k8s.io/service-cidr-finalizer"],
            "managedFields": [
                entry("kubernetes-service-cidr-controller", "Apply",
                    ready(json!({".": {}, "f:status": {}, "f:type": {}})), true),
                entry("service-cidr-controller", "Apply",
                    ready(json!({".": {}, "f:lastTransitionTime": {}, "f:message": {},
                        "f:reason": {}, "f:status": {}, "f:type": {}})), true),
                entry("kube-apiserver", "Update", json!({"f:spec": {"f:cidrs": {}}}), false),
                entry("kube-controller-manager", "Update",
                    json!({"f:metadata": {"f:finalizers": {".": {},
                        "v:\"networking.k8s.io/service-cidr-finalizer\"": {}}}}), false),
            ]},
        "spec": {"cidrs": [SERVICE_CIDR]},
        "status": {"conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": now, "reason": "", "message": "Kubernetes Service CIDR is ready"}]}})
}

/// The IPAddress the IP allocator records for a Service's cluster IP.
pub fn service_ip_address(ip: &str, namespace: &str, service: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
        "metadata": {"name": ip, "labels": {"ipaddress.kubernetes.io/ip-family": "IPv4",
            "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}},
        "spec": {"parentRef": {"resource": "services", "namespace": namespace, "name": service}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_captured_flow_control_configuration_has_eight_levels_and_eleven_schemas() {
        let objects = flow_control();
        let count = |resource| objects.iter().filter(|(r, _)| *r == resource).count();
        assert_eq!(count("prioritylevelconfigurations"), 8);
        assert_eq!(count("flowschemas"), 11);
    }

    #[test]
    fn a_flow_schema_is_found_dangling_false_for_its_level() {
        let (status, _) = flow_schema_status(
            &json!({"spec": {"priorityLevelConfiguration": {"name": "exempt"}}}),
            "t",
        );
        assert_eq!(
            status["conditions"][0]["message"],
            "This FlowSchema references the PriorityLevelConfiguration object named \"exempt\" and it exists"
        );
    }
}
