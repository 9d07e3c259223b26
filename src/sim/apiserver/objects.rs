//! Per-kind rules of the registry strategies: defaulting (including the admission plugins
//! every cluster runs: ServiceAccount, DefaultTolerationSeconds), validation with the real
//! messages, generation bumps, and the events.k8s.io view of core events.

use chrono::{SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::names::{self, Cause, NameRule};
use super::registry::{Backing, GenerationRule, ResourceType};
use super::selectors::LabelSelector;

/// Now, as metadata timestamps are written (RFC 3339, seconds).
pub fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Now with microseconds (MicroTime, for events).
pub fn now_micros() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The name rule of a type.
pub fn name_rule(rt: &ResourceType) -> NameRule {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "namespaces") => NameRule::Label,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

fn cause(field: &str, value: Value, reason: &'static str, message: String) -> Cause {
    Cause {
        field: field.to_string(),
        value,
        message,
        reason,
    }
}

/// A `FieldValueInvalid` cause.
pub fn invalid(field: &str, value: Value, detail: &str) -> Cause {
    cause(field, value, "FieldValueInvalid", detail.to_string())
}

/// A `FieldValueForbidden` cause that names the value.
pub fn forbidden_value(field: &str, value: Value, detail: &str) -> Cause {
    cause(field, value, "FieldValueForbidden", detail.to_string())
}

/// A `FieldValueRequired` cause.
pub fn required(field: &str) -> Cause {
    cause(field, Value::Null, "FieldValueRequired", String::new())
}

/// A `FieldValueForbidden` cause.
pub fn forbidden(field: &str, detail: &str) -> Cause {
    cause(
        field,
        Value::Null,
        "FieldValueForbidden",
        detail.to_string(),
    )
}

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    if !v.get(key).is_some_and(Value::is_object) {
        v[key] = json!({});
    }
    &mut v[key]
}

fn set_default(v: &mut Value, key: &str, default: Value) {
    if v.get(key).is_none_or(Value::is_null) {
        v[key] = default;
    }
}

fn default_container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    let image = c["image"].as_str().unwrap_or_default();
    let tag_latest = match image
        .rsplit_once('/')
        .map_or(image, |(_, last)| last)
        .split_once(':')
    {
        Some((_, tag)) => tag == "latest",
        None => !image.contains('@'),
    };
    set_default(
        c,
        "imagePullPolicy",
        json!(if tag_latest { "Always" } else { "IfNotPresent" }),
    );
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            set_default(port, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            if let Some(h) = p.get_mut("httpGet").filter(|h| h.is_object()) {
                set_default(h, "scheme", json!("HTTP"));
                set_default(h, "path", json!("/"));
            }
        }
    }
}

/// SetDefaults_PodSpec for pods and pod templates.
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
}

/// What the admission plugins every cluster runs add to a new Pod.
fn admit_pod(pod: &mut Value) {
    let spec = obj_mut(pod, "spec");
    set_default(spec, "serviceAccountName", json!("default"));
    let sa = spec["serviceAccountName"].clone();
    set_default(spec, "serviceAccount", sa);
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "priority", json!(0));
    // DefaultTolerationSeconds.
    let mut tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let has = tolerations
            .iter()
            .any(|t| t["key"] == key && (t["effect"] == "NoExecute" || t["effect"].is_null()));
        if !has {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    spec["tolerations"] = Value::Array(tolerations);
    let status = obj_mut(pod, "status");
    set_default(status, "phase", json!("Pending"));
    set_default(status, "qosClass", json!("BestEffort"));
}

/// Applies the type's defaults to an object about to be written.
pub fn apply_defaults(rt: &ResourceType, obj: &mut Value, creating: bool) {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            default_pod_spec(obj_mut(obj, "spec"));
            if creating {
                admit_pod(obj);
            }
        }
        ("apps", "deployments") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            let strategy = obj_mut(spec, "strategy");
            set_default(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                let ru = obj_mut(strategy, "rollingUpdate");
                set_default(ru, "maxUnavailable", json!("25%"));
                set_default(ru, "maxSurge", json!("25%"));
            }
            default_pod_spec(obj_mut(obj_mut(spec, "template"), "spec"));
        }
        ("apps", "replicasets") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "replicas", json!(1));
            default_pod_spec(obj_mut(obj_mut(spec, "template"), "spec"));
        }
        ("", "namespaces") => {
            let name = obj["metadata"]["name"].clone();
            let labels = obj_mut(obj_mut(obj, "metadata"), "labels");
            labels["kubernetes.io/metadata.name"] = name;
            if creating {
                let spec = obj_mut(obj, "spec");
                set_default(spec, "finalizers", json!(["kubernetes"]));
                let status = obj_mut(obj, "status");
                set_default(status, "phase", json!("Active"));
            }
        }
        ("", "secrets") => {
            set_default(obj, "type", json!("Opaque"));
            if let Some(Value::Object(string_data)) =
                obj.as_object_mut().and_then(|o| o.remove("stringData"))
            {
                use base64::Engine as _;
                let data = obj_mut(obj, "data");
                for (k, v) in string_data {
                    let s = v.as_str().unwrap_or_default();
                    data[k] = json!(base64::engine::general_purpose::STANDARD.encode(s));
                }
            }
        }
        ("", "services") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "type", json!("ClusterIP"));
            set_default(spec, "sessionAffinity", json!("None"));
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    set_default(p, "protocol", json!("TCP"));
                    let port = p["port"].clone();
                    set_default(p, "targetPort", port);
                }
            }
        }
        ("", "nodes") => {
            obj_mut(obj, "spec");
        }
        _ => {}
    }
}

fn int_at(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

fn validate_pod_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let containers = spec["containers"].as_array().filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        causes.push(required(&format!("{path}.containers")));
        return;
    };
    for (i, c) in containers.iter().enumerate() {
        let at = format!("{path}.containers[{i}]");
        match c["name"].as_str() {
            None | Some("") => causes.push(required(&format!("{at}.name"))),
            Some(name) => {
                for m in names::dns1123_label(name) {
                    causes.push(invalid(&format!("{at}.name"), json!(name), &m));
                }
            }
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            causes.push(required(&format!("{at}.image")));
        }
    }
}

fn labels_of(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn go_map(labels: &Map<String, Value>) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default()))
        .collect();
    format!("map[string]string{{{}}}", inner.join(", "))
}

/// Whether a `metav1.LabelSelector` object matches `labels`.
pub fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    match label_selector_string(selector) {
        Some(s) => LabelSelector::parse(&s).is_ok_and(|sel| sel.matches(labels)),
        None => false,
    }
}

/// A `metav1.LabelSelector` as a selector string (`a=b,c in (d)`); `None` when malformed.
pub fn label_selector_string(selector: &Value) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(m) = selector["matchLabels"].as_object() {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str()?));
        }
    }
    if let Some(exprs) = selector["matchExpressions"].as_array() {
        for e in exprs {
            let key = e["key"].as_str()?;
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            parts.push(match e["operator"].as_str()? {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_string(),
                "DoesNotExist" => format!("!{key}"),
                _ => return None,
            });
        }
    }
    Some(parts.join(","))
}

fn validate_workload(obj: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    if let Some(r) = int_at(spec, "replicas").filter(|r| *r < 0) {
        causes.push(invalid(
            "spec.replicas",
            json!(r),
            "must be greater than or equal to 0",
        ));
    }
    let selector = &spec["selector"];
    if !selector.is_object()
        || (selector["matchLabels"]
            .as_object()
            .is_none_or(Map::is_empty)
            && selector["matchExpressions"]
                .as_array()
                .is_none_or(Vec::is_empty))
    {
        causes.push(required("spec.selector"));
    } else {
        let labels = labels_of(&spec["template"]["metadata"]["labels"]);
        if !selector_matches(selector, &labels) {
            causes.push(invalid(
                "spec.template.metadata.labels",
                Value::String(go_map(&labels)),
                "`selector` does not match template `labels`",
            ));
        }
        if let Some(old) = old
            && old["spec"]["selector"] != *selector
        {
            causes.push(invalid(
                "spec.selector",
                selector.clone(),
                "field is immutable",
            ));
        }
    }
    validate_pod_spec(&spec["template"]["spec"], "spec.template.spec", causes);
}

/// Validates an object of a built-in type (metadata included). `old` is set on update.
pub fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = names::validate_object_meta(&obj["metadata"], name_rule(rt));
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            validate_pod_spec(&obj["spec"], "spec", &mut causes);
            if let Some(old) = old
                && pod_spec_mutable_part(&old["spec"]) != pod_spec_mutable_part(&obj["spec"])
            {
                causes.push(forbidden("spec", "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"));
            }
        }
        ("apps", "deployments" | "replicasets") => validate_workload(obj, old, &mut causes),
        ("coordination.k8s.io", "leases") => {
            let spec = &obj["spec"];
            if let Some(d) = int_at(spec, "leaseDurationSeconds").filter(|d| *d <= 0) {
                causes.push(invalid(
                    "spec.leaseDurationSeconds",
                    json!(d),
                    "must be greater than 0",
                ));
            }
            if let Some(t) = int_at(spec, "leaseTransitions").filter(|t| *t < 0) {
                causes.push(invalid(
                    "spec.leaseTransitions",
                    json!(t),
                    "must be greater than or equal to 0",
                ));
            }
            if spec.get("preferredHolder").is_some_and(|p| !p.is_null())
                && spec.get("strategy").is_none_or(Value::is_null)
            {
                causes.push(forbidden(
                    "spec.preferredHolder",
                    "preferredHolder is only allowed if strategy is set",
                ));
            }
        }
        ("", "configmaps" | "secrets") => {
            if let Some(old) = old
                && old["immutable"] == json!(true)
            {
                for field in ["data", "binaryData"] {
                    if old[field] != obj[field] {
                        causes.push(forbidden(
                            field,
                            "field is immutable when `immutable` is set",
                        ));
                    }
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let spec = &obj["spec"];
            let expected = format!(
                "{}.{}",
                spec["names"]["plural"].as_str().unwrap_or_default(),
                spec["group"].as_str().unwrap_or_default()
            );
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            if name != expected {
                causes.push(invalid(
                    "metadata.name",
                    json!(name),
                    "must be spec.names.plural+\".\"+spec.group",
                ));
            }
            if let Err(message) = super::registry::custom_type(obj) {
                causes.push(invalid("spec", Value::Null, &message));
            }
        }
        _ => {}
    }
    causes
}

fn pod_spec_mutable_part(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("activeDeadlineSeconds");
        o.remove("tolerations");
        o.remove("terminationGracePeriodSeconds");
        // Binding sets nodeName once; later changes are checked by the binding itself.
        o.remove("nodeName");
    }
    for list in ["containers", "initContainers"] {
        if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    o.remove("image");
                }
            }
        }
    }
    s
}

/// Whether the parts of an object that drive `generation` differ.
pub fn generation_changed(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    match rt.generation {
        GenerationRule::None => false,
        GenerationRule::Spec => old["spec"] != new["spec"],
        GenerationRule::SpecOrAnnotations => {
            old["spec"] != new["spec"]
                || old["metadata"]["annotations"] != new["metadata"]["annotations"]
        }
        GenerationRule::AllButMetadata => {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("metadata");
                    if rt.status {
                        o.remove("status");
                    }
                }
                v
            };
            strip(old) != strip(new)
        }
    }
}

/// Converts a stored object into what a client of `version` of `rt` sees.
pub fn to_view(rt: &ResourceType, version: &str, mut obj: Value) -> Value {
    if rt.group == "events.k8s.io" {
        obj = core_event_to_events_v1(obj);
    }
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(rt.api_version(version)));
        o.insert("kind".into(), json!(rt.kind));
    }
    obj
}

/// Converts what a client sent into the stored form.
pub fn from_view(rt: &ResourceType, mut obj: Value) -> Value {
    if rt.group == "events.k8s.io" {
        obj = events_v1_to_core_event(obj);
    }
    let storage = storage_type_api_version(rt);
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(storage.0));
        o.insert("kind".into(), json!(storage.1));
    }
    obj
}

/// The `(apiVersion, kind)` objects of `rt` are stored as.
pub fn storage_type_api_version(rt: &ResourceType) -> (String, String) {
    if rt.group == "events.k8s.io" {
        ("v1".into(), "Event".into())
    } else {
        (rt.api_version(rt.storage_version()), rt.kind.clone())
    }
}

const EVENT_RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(mut obj: Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) -> Value {
    if let Some(o) = obj.as_object_mut() {
        for (from, to) in pairs {
            if let Some(v) = o.remove(from) {
                o.insert(to.into(), v);
            }
        }
    }
    obj
}

/// core/v1 Event → events.k8s.io/v1 Event.
pub fn core_event_to_events_v1(obj: Value) -> Value {
    rename(obj, EVENT_RENAMES.iter().copied())
}

/// events.k8s.io/v1 Event → core/v1 Event.
pub fn events_v1_to_core_event(obj: Value) -> Value {
    rename(obj, EVENT_RENAMES.iter().map(|(a, b)| (*b, *a)))
}

/// The autoscaling/v1 Scale of an object with a scale subresource.
pub fn scale_of(rt: &ResourceType, obj: &Value) -> Value {
    let Some(paths) = &rt.scale else {
        return Value::Null;
    };
    let at = |path: &str| {
        path.split('.')
            .filter(|p| !p.is_empty())
            .try_fold(obj, |v, k| v.get(k))
            .cloned()
    };
    let selector = match (&rt.backing, &paths.label_selector) {
        (Backing::Builtin, _) => label_selector_string(&obj["spec"]["selector"]).map(Value::String),
        (_, Some(p)) => at(p),
        _ => None,
    };
    let meta = &obj["metadata"];
    let mut scale = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": at(&paths.spec_replicas).unwrap_or(json!(0))},
        "status": {"replicas": at(&paths.status_replicas).unwrap_or(json!(0))},
    });
    if let Some(s) = selector {
        scale["status"]["selector"] = s;
    }
    scale
}

/// Writes `replicas` into an object at its scale subresource's spec path.
pub fn set_scale(rt: &ResourceType, obj: &mut Value, replicas: Value) {
    let Some(paths) = &rt.scale else {
        return;
    };
    let keys: Vec<&str> = paths
        .spec_replicas
        .split('.')
        .filter(|p| !p.is_empty())
        .collect();
    let Some((last, parents)) = keys.split_last() else {
        return;
    };
    let mut at = obj;
    for k in parents {
        at = obj_mut(at, k);
    }
    at[*last] = replicas;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::apiserver::registry::Registry;

    #[test]
    fn a_new_pod_gets_the_default_tolerations_and_service_account() {
        let r = Registry::new();
        let rt = r.lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "memcached:1.6"}]}});
        apply_defaults(rt, &mut pod, true);
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(
            pod["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["status"]["phase"], "Pending");
    }

    #[test]
    fn a_deployment_whose_selector_misses_its_template_is_invalid() {
        let r = Registry::new();
        let rt = r.lookup("apps", "v1", "deployments").unwrap();
        let d = json!({"metadata": {"name": "d"}, "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let causes = validate(rt, &d, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }

    #[test]
    fn a_lease_with_zero_duration_is_invalid_with_the_real_message() {
        let r = Registry::new();
        let rt = r.lookup("coordination.k8s.io", "v1", "leases").unwrap();
        let l = json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}});
        let causes = validate(rt, &l, None);
        assert_eq!(
            causes[0].to_string(),
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
        );
    }

    #[test]
    fn events_round_trip_between_the_two_groups() {
        let core = json!({"involvedObject": {"name": "x"}, "message": "hi", "reason": "R"});
        let v1 = core_event_to_events_v1(core.clone());
        assert_eq!(v1["regarding"]["name"], "x");
        assert_eq!(v1["note"], "hi");
        assert_eq!(events_v1_to_core_event(v1), core);
    }
}
