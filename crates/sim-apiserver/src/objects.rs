//! Per-kind rules of the registry strategies: defaulting, validation with the real messages,
//! generation bumps, and the events.k8s.io view of core events.
//!
//! Defaulting comes in two steps, because the real server records field ownership between
//! them (`endpoints/handlers/create.go` runs the field manager on the decoded object before
//! mutating admission and `rest.BeforeCreate`):
//!
//! - [`apply_defaults`] is what decoding a request does: the `SetDefaults_*` functions of the
//!   versioned types, then Go's `omitempty` dropping `null`s, empty lists and empty maps
//!   ([`omit_empty`]). Fields it sets belong to the writer's `managedFields` entry.
//! - [`prepare_for_create`] is what the strategy's `PrepareForCreate` and the admission
//!   plugins every cluster runs (ServiceAccount, DefaultTolerationSeconds, Priority) add to a
//!   new object afterwards: nobody owns those fields.

use std::collections::BTreeMap;

use chrono::{SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::apply;
use super::names::{self, Cause, NameRule};
use super::registry::{Backing, GenerationRule, ResourceType};
use super::selectors::LabelSelector;
use super::status::ApiError;

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
        // `ValidateCertificateRequestName` accepts any name: what a path segment may be.
        ("rbac.authorization.k8s.io", _)
        | ("certificates.k8s.io", "certificatesigningrequests") => NameRule::PathSegment,
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

/// Sets `key` of an object when it is absent or `null` (values that are not objects, which
/// validation refuses, are left alone).
fn set_default(v: &mut Value, key: &str, default: Value) {
    if let Some(map) = v.as_object_mut()
        && map.get(key).is_none_or(Value::is_null)
    {
        map.insert(key.to_owned(), default);
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
    if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
        for var in env {
            // SetDefaults_ObjectFieldSelector.
            if let Some(field_ref) = var
                .get_mut("valueFrom")
                .and_then(|from| from.get_mut("fieldRef"))
                .filter(|field_ref| field_ref.is_object())
            {
                set_default_if_empty(field_ref, "apiVersion", json!("v1"));
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            default_handler(p);
            if let Some(grpc) = p.get_mut("grpc").filter(|grpc| grpc.is_object()) {
                set_default(grpc, "service", json!(""));
            }
        }
    }
    if let Some(lifecycle) = c.get_mut("lifecycle").filter(|l| l.is_object()) {
        for hook in ["postStart", "preStop"] {
            if let Some(handler) = lifecycle.get_mut(hook).filter(|h| h.is_object()) {
                default_handler(handler);
            }
        }
    }
}

/// SetDefaults_HTTPGetAction on a probe's or a lifecycle hook's `httpGet`.
fn default_handler(handler: &mut Value) {
    if let Some(h) = handler.get_mut("httpGet").filter(|h| h.is_object()) {
        set_default_if_empty(h, "scheme", json!("HTTP"));
        set_default_if_empty(h, "path", json!("/"));
    }
}

/// Sets `key` when it is absent, `null` or the empty string (a Go string's zero value).
fn set_default_if_empty(v: &mut Value, key: &str, default: Value) {
    if let Some(map) = v.as_object_mut()
        && map.get(key).is_none_or(|x| x.is_null() || x == "")
    {
        map.insert(key.to_owned(), default);
    }
}

/// The volume defaults: an `emptyDir` for a volume without a source, the file modes of
/// secret, configMap, downwardAPI and projected volumes, a projected token's lifetime, and
/// the field selectors' API version.
fn default_volume(volume: &mut Value) {
    let Some(map) = volume.as_object_mut() else {
        return;
    };
    if map
        .iter()
        .all(|(key, value)| key == "name" || value.is_null())
    {
        map.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(source) = volume.get_mut(source).filter(|s| s.is_object()) {
            set_default(source, "defaultMode", json!(420));
        }
    }
    default_field_refs(volume.pointer_mut("/downwardAPI/items"));
    if let Some(sources) = volume
        .pointer_mut("/projected/sources")
        .and_then(Value::as_array_mut)
    {
        for source in sources {
            if let Some(token) = source
                .get_mut("serviceAccountToken")
                .filter(|t| t.is_object())
            {
                set_default(token, "expirationSeconds", json!(3600));
            }
            default_field_refs(source.pointer_mut("/downwardAPI/items"));
        }
    }
}

/// SetDefaults_ObjectFieldSelector on the items of a downwardAPI volume or projection.
fn default_field_refs(items: Option<&mut Value>) {
    for item in items.and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(field_ref) = item.get_mut("fieldRef").filter(|f| f.is_object()) {
            set_default_if_empty(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// SetDefaults_PodSpec for pods and pod templates, with the defaults of their containers and
/// volumes.
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        volumes.iter_mut().for_each(default_volume);
    }
}

/// The containers of a pod spec's `containers` and `initContainers`.
fn containers_mut(spec: &mut Value) -> impl Iterator<Item = &mut Value> {
    let Some(spec) = spec.as_object_mut() else {
        return Vec::new().into_iter();
    };
    let mut out = Vec::new();
    for (key, list) in spec.iter_mut() {
        if matches!(key.as_str(), "containers" | "initContainers")
            && let Value::Array(items) = list
        {
            out.extend(items.iter_mut());
        }
    }
    out.into_iter()
}

/// SetDefaults_Pod: what only a Pod gets, not a pod template (requests from limits, service
/// links, host ports on the host network).
fn default_pod(spec: &mut Value) {
    let host_network = spec["hostNetwork"] == json!(true);
    for c in containers_mut(spec) {
        if let Some(resources) = c.get_mut("resources").filter(|r| r.is_object())
            && let Some(limits) = resources["limits"].as_object().cloned()
        {
            let requests = obj_mut(resources, "requests");
            for (key, value) in limits {
                set_default(requests, &key, value);
            }
        }
        if host_network {
            for port in c
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let container_port = port["containerPort"].clone();
                if let Some(port) = port.as_object_mut()
                    && port.get("hostPort").is_none_or(|p| p.is_null() || p == 0)
                {
                    port.insert("hostPort".into(), container_port);
                }
            }
        }
    }
    set_default(spec, "enableServiceLinks", json!(true));
}

/// What the admission plugins every cluster runs add to a new Pod (ServiceAccount,
/// DefaultTolerationSeconds, Priority) and what its strategy sets (the pending status).
/// The ServiceAccounts of a namespace as the ServiceAccount admission plugin reads them
/// (read before the write, so the plugin sees them without touching the store).
#[derive(Debug, Clone, Default)]
pub struct ServiceAccounts(BTreeMap<String, Value>);

impl ServiceAccounts {
    /// The accounts `items` (ServiceAccount objects), by name.
    pub fn new(items: impl IntoIterator<Item = Value>) -> Self {
        Self(
            items
                .into_iter()
                .filter_map(|sa| {
                    let name = sa["metadata"]["name"].as_str()?.to_string();
                    Some((name, sa))
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// The ServiceAccount admission plugin's refusal of a pod create in `namespace` whose
    /// account does not exist: the account the pod names (`account_name`) must be one of
    /// these. Mirror pods, and creates of anything but pods, pass.
    ///
    /// # Errors
    /// 403 Forbidden for the object `name` ([`admission_name`]).
    pub fn admit(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        pod: &Value,
    ) -> Result<(), ApiError> {
        let is_mirror = pod["metadata"]["annotations"]
            .get("kubernetes.io/config.mirror")
            .is_some();
        if !(rt.group.is_empty() && rt.resource == "pods") || is_mirror {
            return Ok(());
        }
        let account = account_name(&pod["spec"]);
        if self.get(account).is_some() {
            return Ok(());
        }
        Err(ApiError::Forbidden {
            message: format!(
                "{} \"{name}\" is forbidden: error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found",
                rt.gr()
            ),
            gr: rt.gr(),
            name: name.to_string(),
        })
    }
}

/// The name admission plugins' refusals give an object being created: its name, else its
/// generateName (admission runs before the name is generated), else `Unknown`
/// (`admission.NewForbidden`).
pub fn admission_name(obj: &Value) -> String {
    ["name", "generateName"]
        .iter()
        .filter_map(|key| obj["metadata"][key].as_str())
        .find(|n| !n.is_empty())
        .unwrap_or("Unknown")
        .to_string()
}

/// The ServiceAccount a pod spec names: `serviceAccountName`, else the deprecated
/// `serviceAccount` (its alias when converting from v1), else `default`.
fn account_name(spec: &Value) -> &str {
    ["serviceAccountName", "serviceAccount"]
        .iter()
        .filter_map(|key| spec[key].as_str())
        .find(|n| !n.is_empty())
        .unwrap_or("default")
}

/// Where the ServiceAccount admission plugin mounts the API credentials.
pub const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The projected volume of API credentials the ServiceAccount admission plugin adds: a
/// bound token (3607 s, which the kubelet renews), the cluster CA from `kube-root-ca.crt`
/// and the namespace.
fn api_access_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}})
}

/// The ServiceAccount admission plugin on a pod create: the default account, the API
/// credentials volume (`kube-api-access-<suffix>`, unless the pod or its account turns
/// automounting off) mounted read-only on every container and init container that has
/// nothing at the mount path yet, and the account's image pull secrets when the pod names
/// none. Mirror pods are left alone.
fn admit_service_account(pod: &mut Value, accounts: &ServiceAccounts, suffix: &str) {
    if pod["metadata"]["annotations"]
        .get("kubernetes.io/config.mirror")
        .is_some()
    {
        return;
    }
    let spec = obj_mut(pod, "spec");
    let name = account_name(spec).to_string();
    spec["serviceAccountName"] = json!(name);
    let account = accounts.get(&name);
    let automount = spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| account.and_then(|a| a["automountServiceAccountToken"].as_bool()))
        .unwrap_or(true);
    if automount {
        mount_api_access(spec, suffix);
    }
    let pull_secrets = account.map_or(&Value::Null, |a| &a["imagePullSecrets"]);
    if spec["imagePullSecrets"]
        .as_array()
        .is_none_or(Vec::is_empty)
        && pull_secrets.as_array().is_some_and(|p| !p.is_empty())
    {
        spec["imagePullSecrets"] = pull_secrets.clone();
    }
}

fn mount_api_access(spec: &mut Value, suffix: &str) {
    const PREFIX: &str = "kube-api-access-";
    let existing = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find(|n| n.starts_with(PREFIX))
        .map(str::to_string);
    let volume = existing
        .clone()
        .unwrap_or_else(|| format!("{PREFIX}{suffix}"));
    let mount = json!({"name": volume, "readOnly": true, "mountPath": SERVICE_ACCOUNT_MOUNT_PATH});
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter(|c| c.is_object()) {
            let taken = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == SERVICE_ACCOUNT_MOUNT_PATH);
            if taken {
                continue;
            }
            match c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                Some(mounts) => mounts.push(mount.clone()),
                None => c["volumeMounts"] = json!([mount.clone()]),
            }
            mounted = true;
        }
    }
    if mounted && existing.is_none() {
        match spec.get_mut("volumes").and_then(Value::as_array_mut) {
            Some(volumes) => volumes.push(api_access_volume(&volume)),
            None => spec["volumes"] = json!([api_access_volume(&volume)]),
        }
    }
}

fn admit_pod(pod: &mut Value, accounts: &ServiceAccounts, suffix: &str) {
    admit_service_account(pod, accounts, suffix);
    let spec = obj_mut(pod, "spec");
    // The deprecated field always mirrors the account (conversion back to v1).
    if spec["serviceAccountName"].is_string() {
        spec["serviceAccount"] = spec["serviceAccountName"].clone();
    }
    set_default(spec, "priority", json!(0));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
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
    set_default(obj_mut(pod, "status"), "phase", json!("Pending"));
    let qos = pod_qos_class(&pod["spec"]);
    set_default(obj_mut(pod, "status"), "qosClass", json!(qos));
}

/// A pod's QoS class as kube-apiserver's `GetPodQOS` computes it from its containers' and init
/// containers' CPU and memory: `BestEffort` without any request or limit, `Guaranteed` when
/// every container limits both and the summed requests equal the summed limits, else
/// `Burstable`. Zero quantities count as unset.
#[must_use]
pub fn pod_qos_class(spec: &Value) -> &'static str {
    const RESOURCES: [&str; 2] = ["cpu", "memory"];
    let containers = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|list| spec[list].as_array().into_iter().flatten());
    let mut requests = [0.0_f64; 2];
    let mut limits = [0.0_f64; 2];
    let (mut any_request, mut any_limit) = ([false; 2], [false; 2]);
    let mut every_container_limited = true;
    for container in containers {
        let resources = &container["resources"];
        for (i, name) in RESOURCES.into_iter().enumerate() {
            let amount = |of: &str| {
                resources[of][name]
                    .as_str()
                    .and_then(quantity)
                    .filter(|q| *q != 0.0)
            };
            let limit = amount("limits");
            // A limit without a request is its request too (the container defaults).
            if let Some(q) = amount("requests").or(limit) {
                requests[i] += q;
                any_request[i] = true;
            }
            match limit {
                Some(q) => {
                    limits[i] += q;
                    any_limit[i] = true;
                }
                None => every_container_limited = false,
            }
        }
    }
    if !any_request.contains(&true) && !any_limit.contains(&true) {
        return "BestEffort";
    }
    let equal = (0..2).all(|i| any_request[i] == any_limit[i] && requests[i] == limits[i]);
    if every_container_limited && equal {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The value of a resource quantity (`100m` → 0.1, `64Mi`, `1e3`, `2G`), if it is one.
pub fn quantity(text: &str) -> Option<f64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        exponent => 10f64.powi(exponent.strip_prefix(['e', 'E'])?.parse().ok()?),
    };
    Some(number * scale)
}

/// Applies the type's defaults to an object about to be written, as decoding the request does
/// (the versioned types' `SetDefaults_*`), and drops what `omitempty` drops ([`omit_empty`]).
/// What a create adds besides is [`prepare_for_create`]'s.
pub fn apply_defaults(rt: &ResourceType, obj: &mut Value) {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            let spec = obj_mut(obj, "spec");
            default_pod_spec(spec);
            default_pod(spec);
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
        ("batch", "jobs") => default_job(obj),
        ("batch", "cronjobs") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "concurrencyPolicy", json!("Allow"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "successfulJobsHistoryLimit", json!(3));
            set_default(spec, "failedJobsHistoryLimit", json!(1));
            // The templates' metadata are structs: encoded even when empty.
            let job_template = obj_mut(spec, "jobTemplate");
            obj_mut(job_template, "metadata");
            let pod_template = obj_mut(obj_mut(job_template, "spec"), "template");
            obj_mut(pod_template, "metadata");
            default_pod_spec(obj_mut(pod_template, "spec"));
        }
        ("", "namespaces") => {
            let name = obj["metadata"]["name"].clone();
            if name.as_str().is_some_and(|name| !name.is_empty()) {
                let labels = obj_mut(obj_mut(obj, "metadata"), "labels");
                labels["kubernetes.io/metadata.name"] = name;
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
        ("", "services") => default_service(obj_mut(obj, "spec")),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            const RBAC: &str = "rbac.authorization.k8s.io";
            if let Some(role_ref) = obj.get_mut("roleRef").filter(|r| r.is_object()) {
                set_default_if_empty(role_ref, "apiGroup", json!(RBAC));
            }
            for subject in obj
                .get_mut("subjects")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if matches!(subject["kind"].as_str(), Some("User" | "Group")) {
                    set_default_if_empty(subject, "apiGroup", json!(RBAC));
                }
            }
        }
        ("", "nodes") => {
            obj_mut(obj, "spec");
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => default_crd_spec(obj),
        ("apps", "statefulsets") => default_stateful_set(obj_mut(obj, "spec")),
        ("apps", "daemonsets") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "revisionHistoryLimit", json!(10));
            let strategy = obj_mut(spec, "updateStrategy");
            set_default(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                let rolling = obj_mut(strategy, "rollingUpdate");
                set_default(rolling, "maxUnavailable", json!(1));
                set_default(rolling, "maxSurge", json!(0));
            }
            default_pod_spec(obj_mut(obj_mut(spec, "template"), "spec"));
            // The template's generation, which the strategy keeps in an annotation (and the
            // field manager gives to the writer).
            let annotations = obj_mut(obj_mut(obj, "metadata"), "annotations");
            set_default(annotations, DAEMON_SET_TEMPLATE_GENERATION, json!("1"));
        }
        ("", "replicationcontrollers") => {
            // SetDefaults_ReplicationController: the template's labels are the selector and
            // the controller's labels when those are empty.
            let template_labels = obj
                .pointer("/spec/template/metadata/labels")
                .filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
                .cloned();
            let spec = obj_mut(obj, "spec");
            set_default(spec, "replicas", json!(1));
            if let Some(labels) = &template_labels {
                if spec["selector"].as_object().is_none_or(Map::is_empty) {
                    spec["selector"] = labels.clone();
                }
                let metadata = obj_mut(obj, "metadata");
                if metadata["labels"].as_object().is_none_or(Map::is_empty) {
                    metadata["labels"] = labels.clone();
                }
            }
            if let Some(template) = obj.pointer_mut("/spec/template").filter(|t| t.is_object()) {
                default_pod_spec(obj_mut(template, "spec"));
            }
        }
        ("", "podtemplates") => default_pod_spec(obj_mut(obj_mut(obj, "template"), "spec")),
        ("", "persistentvolumeclaims") => {
            set_default(obj_mut(obj, "spec"), "volumeMode", json!("Filesystem"));
        }
        ("", "persistentvolumes") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set_default(spec, "volumeMode", json!("Filesystem"));
            if let Some(host_path) = spec.get_mut("hostPath").filter(|h| h.is_object()) {
                set_default(host_path, "type", json!(""));
            }
        }
        ("discovery.k8s.io", "endpointslices") | ("", "endpoints") => default_ports(obj),
        ("networking.k8s.io", "networkpolicies") => default_network_policy(obj_mut(obj, "spec")),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            default_webhooks(obj, false);
        }
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            default_webhooks(obj, true);
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "failurePolicy", json!("Fail"));
            if let Some(constraints) = spec.get_mut("matchConstraints").filter(|m| m.is_object()) {
                default_match_resources(constraints);
            }
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            if let Some(resources) = obj
                .pointer_mut("/spec/matchResources")
                .filter(|m| m.is_object())
            {
                default_match_resources(resources);
            }
        }
        ("scheduling.k8s.io", "priorityclasses") => {
            set_default(obj, "preemptionPolicy", json!("PreemptLowerPriority"));
        }
        ("", "limitranges") => default_limit_range(obj),
        ("storage.k8s.io", "csidrivers") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "attachRequired", json!(true));
            set_default(spec, "podInfoOnMount", json!(false));
            set_default(spec, "storageCapacity", json!(false));
            set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
            set_default(spec, "requiresRepublish", json!(false));
            set_default(spec, "seLinuxMount", json!(false));
            if spec["volumeLifecycleModes"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                spec["volumeLifecycleModes"] = json!(["Persistent"]);
            }
        }
        ("resource.k8s.io", "resourceclaims") => default_device_requests(obj_mut(obj, "spec")),
        ("resource.k8s.io", "resourceclaimtemplates") => {
            let spec = obj_mut(obj, "spec");
            obj_mut(spec, "metadata");
            default_device_requests(obj_mut(spec, "spec"));
        }
        ("storage.k8s.io", "storageclasses") => {
            set_default(obj, "reclaimPolicy", json!("Delete"));
            set_default(obj, "volumeBindingMode", json!("Immediate"));
        }
        ("autoscaling", "horizontalpodautoscalers") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "minReplicas", json!(1));
            if spec["metrics"].as_array().is_none_or(Vec::is_empty) {
                spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]);
            }
        }
        _ => {}
    }
    omit_empty(rt, obj);
}

/// SetDefaults_LimitRangeItem: a container's limits default to its maximums, and its
/// requests to its default limits, then to its minimums.
fn default_limit_range(obj: &mut Value) {
    let limits = obj
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut);
    for item in limits
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "Container")
    {
        let max = item["max"].as_object().cloned().unwrap_or_default();
        let min = item["min"].as_object().cloned().unwrap_or_default();
        let default = obj_mut(item, "default");
        for (resource, quantity) in max {
            set_default(default, &resource, quantity);
        }
        let default = default.as_object().cloned().unwrap_or_default();
        let request = obj_mut(item, "defaultRequest");
        for (resource, quantity) in default.into_iter().chain(min) {
            set_default(request, &resource, quantity);
        }
    }
}

/// SetDefaults_ExactDeviceRequest: one device, counted exactly.
fn default_device_requests(claim_spec: &mut Value) {
    let requests = claim_spec
        .pointer_mut("/devices/requests")
        .and_then(Value::as_array_mut);
    for exactly in requests
        .into_iter()
        .flatten()
        .filter_map(|r| r.get_mut("exactly"))
        .filter(|e| e.is_object())
    {
        set_default(exactly, "allocationMode", json!("ExactCount"));
        if exactly["allocationMode"] == "ExactCount" {
            set_default(exactly, "count", json!(1));
        }
    }
}

/// SetDefaults_StatefulSet (`pkg/apis/apps/v1/defaults.go`): one replica, ordered pod
/// management, rolling updates from partition 0, ten revisions kept, claims retained, and
/// the pod template's and the claim templates' own defaults.
fn default_stateful_set(spec: &mut Value) {
    set_default(spec, "replicas", json!(1));
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    set_default(spec, "revisionHistoryLimit", json!(10));
    let strategy = obj_mut(spec, "updateStrategy");
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        set_default(obj_mut(strategy, "rollingUpdate"), "partition", json!(0));
    }
    let retention = obj_mut(spec, "persistentVolumeClaimRetentionPolicy");
    set_default(retention, "whenDeleted", json!("Retain"));
    set_default(retention, "whenScaled", json!("Retain"));
    default_pod_spec(obj_mut(obj_mut(spec, "template"), "spec"));
    for claim in spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter(|c| c.is_object())
    {
        set_default_if_empty(claim, "apiVersion", json!("v1"));
        set_default_if_empty(claim, "kind", json!("PersistentVolumeClaim"));
        default_claim(claim);
    }
}

/// SetDefaults_PersistentVolumeClaim of a StatefulSet's claim template: a filesystem
/// volume, `Pending` (a claim's own status is the strategy's, see [`prepare_for_create`]).
fn default_claim(claim: &mut Value) {
    set_default(obj_mut(claim, "spec"), "volumeMode", json!("Filesystem"));
    set_default(obj_mut(claim, "status"), "phase", json!("Pending"));
}

/// The `TCP` protocol of each port of an EndpointSlice or of each subset of Endpoints.
fn default_ports(obj: &mut Value) {
    default_protocols(obj.get_mut("ports"));
    for subset in obj
        .get_mut("subsets")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        default_protocols(subset.get_mut("ports"));
    }
}

/// Sets `protocol: TCP` on each port of a list that names none.
fn default_protocols(ports: Option<&mut Value>) {
    for port in ports.and_then(Value::as_array_mut).into_iter().flatten() {
        set_default(port, "protocol", json!("TCP"));
    }
}

/// SetDefaults_NetworkPolicy: ports are TCP; without policy types, `Ingress`, and `Egress`
/// too when there are egress rules.
fn default_network_policy(spec: &mut Value) {
    for direction in ["ingress", "egress"] {
        for rule in spec
            .get_mut(direction)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            default_protocols(rule.get_mut("ports"));
        }
    }
    if spec["policyTypes"].as_array().is_none_or(Vec::is_empty) {
        let mut types = vec![json!("Ingress")];
        if spec["egress"].as_array().is_some_and(|e| !e.is_empty()) {
            types.push(json!("Egress"));
        }
        spec["policyTypes"] = Value::Array(types);
    }
}

/// SetDefaults_ValidatingWebhook and SetDefaults_MutatingWebhook
/// (`pkg/apis/admissionregistration/v1/defaults.go`), with their rules' scope and their
/// services' port.
fn default_webhooks(obj: &mut Value, mutating: bool) {
    for webhook in obj
        .get_mut("webhooks")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter(|w| w.is_object())
    {
        set_default(webhook, "failurePolicy", json!("Fail"));
        set_default(webhook, "matchPolicy", json!("Equivalent"));
        set_default(webhook, "namespaceSelector", json!({}));
        set_default(webhook, "objectSelector", json!({}));
        set_default(webhook, "timeoutSeconds", json!(10));
        if mutating {
            set_default(webhook, "reinvocationPolicy", json!("Never"));
        }
        default_rule_scopes(webhook.get_mut("rules"));
        if let Some(service) = webhook
            .pointer_mut("/clientConfig/service")
            .filter(|s| s.is_object())
        {
            set_default(service, "port", json!(443));
        }
    }
}

/// SetDefaults_MatchResources: equivalent matching, empty selectors, and every rule's scope.
fn default_match_resources(resources: &mut Value) {
    set_default(resources, "matchPolicy", json!("Equivalent"));
    set_default(resources, "namespaceSelector", json!({}));
    set_default(resources, "objectSelector", json!({}));
    default_rule_scopes(resources.get_mut("resourceRules"));
    default_rule_scopes(resources.get_mut("excludeResourceRules"));
}

/// SetDefaults_Rule: a rule without a scope applies to `*`.
fn default_rule_scopes(rules: Option<&mut Value>) {
    for rule in rules.and_then(Value::as_array_mut).into_iter().flatten() {
        set_default(rule, "scope", json!("*"));
    }
}

/// SetDefaults_Job (`pkg/apis/batch/v1/defaults.go`) and the pod template's defaults.
fn default_job(job: &mut Value) {
    let template_labels = job
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.is_object())
        .cloned();
    let spec = obj_mut(job, "spec");
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    set_default(spec, "parallelism", json!(1));
    if spec["backoffLimit"].is_null() {
        let limit = if spec["backoffLimitPerIndex"].is_null() {
            6
        } else {
            i64::from(i32::MAX)
        };
        spec["backoffLimit"] = json!(limit);
    }
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "manualSelector", json!(false));
    let replacement = if spec["podFailurePolicy"].is_null() {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    if let Some(rules) = spec
        .pointer_mut("/podFailurePolicy/rules")
        .and_then(Value::as_array_mut)
    {
        for pattern in rules
            .iter_mut()
            .filter_map(|r| r.get_mut("onPodConditions"))
            .filter_map(Value::as_array_mut)
            .flatten()
        {
            set_default(pattern, "status", json!("True"));
        }
    }
    default_pod_spec(obj_mut(obj_mut(spec, "template"), "spec"));
    let metadata = obj_mut(job, "metadata");
    let unlabelled = metadata["labels"].as_object().is_none_or(|l| l.is_empty());
    if let Some(labels) = template_labels.filter(|_| unlabelled) {
        metadata["labels"] = labels;
    }
}

/// The Job strategy's `PrepareForCreate` (`pkg/registry/batch/job/strategy.go`): without
/// `manualSelector`, a selector on the Job's uid and the labels that match it on its pod
/// template; an empty status.
fn prepare_job(job: &mut Value) {
    let uid = job["metadata"]["uid"].clone();
    let name = job["metadata"]["name"].clone();
    let spec = obj_mut(job, "spec");
    if spec["manualSelector"] != json!(true) {
        spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
        let labels = obj_mut(obj_mut(obj_mut(spec, "template"), "metadata"), "labels");
        set_default(labels, "controller-uid", uid.clone());
        set_default(labels, "batch.kubernetes.io/controller-uid", uid);
        set_default(labels, "job-name", name.clone());
        set_default(labels, "batch.kubernetes.io/job-name", name);
    }
    let labels = job.pointer("/spec/template/metadata/labels").cloned();
    let metadata = obj_mut(job, "metadata");
    if metadata["labels"].as_object().is_none_or(|l| l.is_empty())
        && let Some(labels) = labels
    {
        metadata["labels"] = labels;
    }
    job["status"] = json!({});
}

/// SetDefaults_CustomResourceDefinitionSpec and SetDefaults_ServiceReference.
fn default_crd_spec(crd: &mut Value) {
    let spec = obj_mut(crd, "spec");
    if let Some(names) = spec.get_mut("names").filter(|n| n.is_object()) {
        let kind = names["kind"].as_str().unwrap_or_default().to_owned();
        set_default_if_empty(names, "singular", json!(kind.to_lowercase()));
        if !kind.is_empty() {
            set_default_if_empty(names, "listKind", json!(format!("{kind}List")));
        }
    }
    set_default(spec, "conversion", json!({"strategy": "None"}));
    if let Some(service) = spec
        .pointer_mut("/conversion/webhook/clientConfig/service")
        .filter(|s| s.is_object())
    {
        set_default(service, "port", json!(443));
    }
}

/// SetDefaults_Service.
fn default_service(spec: &mut Value) {
    set_default_if_empty(spec, "sessionAffinity", json!("None"));
    match spec["sessionAffinity"].as_str() {
        Some("None") => {
            if let Some(spec) = spec.as_object_mut() {
                spec.remove("sessionAffinityConfig");
            }
        }
        Some("ClientIP")
            if spec
                .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
                .is_none_or(Value::is_null) =>
        {
            spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
        }
        _ => {}
    }
    set_default_if_empty(spec, "type", json!("ClusterIP"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            set_default_if_empty(p, "protocol", json!("TCP"));
            let port = p["port"].clone();
            if let Some(p) = p.as_object_mut()
                && p.get("targetPort")
                    .is_none_or(|t| t.is_null() || t == 0 || t == "")
            {
                p.insert("targetPort".into(), port);
            }
        }
    }
    let service_type = spec["type"].as_str().unwrap_or_default().to_owned();
    let has_external_ips = spec["externalIPs"]
        .as_array()
        .is_some_and(|ips| !ips.is_empty());
    let externally_accessible = matches!(service_type.as_str(), "LoadBalancer" | "NodePort")
        || (service_type == "ClusterIP" && has_external_ips);
    if externally_accessible {
        set_default_if_empty(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if matches!(
        service_type.as_str(),
        "ClusterIP" | "NodePort" | "LoadBalancer"
    ) {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if service_type == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

/// What a new object gets after its field ownership is recorded: the strategy's
/// `PrepareForCreate` (a namespace's `kubernetes` finalizer and phase, a pod's generation
/// and pending status) and the admission plugins' changes (a pod's service account and its
/// API credentials volume named with `suffix`, tolerations, priority). An Event created
/// through events.k8s.io has its ownership recorded again in that version's terms
/// ([`own_as_events_v1`]).
pub fn prepare_for_create(
    rt: &ResourceType,
    obj: &mut Value,
    accounts: &ServiceAccounts,
    suffix: &str,
) {
    as_stored(rt, obj);
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("events.k8s.io", "events") => own_as_events_v1(obj),
        ("", "pods") => admit_pod(obj, accounts, suffix),
        ("batch", "jobs") => prepare_job(obj),
        ("batch", "cronjobs") => obj["status"] = json!({}),
        // Each strategy's `PrepareForCreate` resets status to its Go zero value, and the
        // StorageObjectInUseProtection admission plugin adds its finalizer to claims,
        // volumes and volume attributes classes.
        ("apps", "statefulsets") => {
            obj["status"] = json!({"replicas": 0, "availableReplicas": 0});
        }
        ("", "replicationcontrollers") | ("apps", "replicasets") => {
            obj["status"] = json!({"replicas": 0});
        }
        ("apps", "daemonsets") => {
            obj["status"] = json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                "desiredNumberScheduled": 0, "numberReady": 0});
        }
        ("", "persistentvolumeclaims") => {
            add_finalizer(obj, "kubernetes.io/pvc-protection");
            obj["status"] = json!({"phase": "Pending"});
        }
        ("", "persistentvolumes") => {
            add_finalizer(obj, "kubernetes.io/pv-protection");
            obj["status"] = json!({"phase": "Pending", "lastPhaseTransitionTime": now()});
        }
        ("policy", "poddisruptionbudgets") => {
            obj["status"] = json!({"disruptionsAllowed": 0, "currentHealthy": 0,
                "desiredHealthy": 0, "expectedPods": 0});
        }
        ("networking.k8s.io", "ingresses") => obj["status"] = json!({"loadBalancer": {}}),
        ("flowcontrol.apiserver.k8s.io", _)
        | ("", "resourcequotas")
        | ("resource.k8s.io", "resourceclaims") => obj["status"] = json!({}),
        ("storage.k8s.io", "volumeattachments") => obj["status"] = json!({"attached": false}),
        ("storage.k8s.io", "volumeattributesclasses") => {
            add_finalizer(obj, "kubernetes.io/vac-protection");
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            obj["status"] = json!({});
        }
        ("autoscaling", "horizontalpodautoscalers") => {
            obj["status"] = json!({"currentMetrics": null, "desiredReplicas": 0});
        }
        ("", "namespaces") => {
            let spec = obj_mut(obj, "spec");
            let mut finalizers = spec["finalizers"].as_array().cloned().unwrap_or_default();
            if !finalizers.iter().any(|f| f == "kubernetes") {
                finalizers.push(json!("kubernetes"));
            }
            spec["finalizers"] = Value::Array(finalizers);
            obj_mut(obj, "status")["phase"] = json!("Active");
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            // A fresh status (the Go zero values of its names and conditions) with the
            // storage version stored; the establishing controller fills in the rest.
            let stored: Vec<Value> = obj["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["storage"] == json!(true))
                .take(1)
                .map(|v| v["name"].clone())
                .collect();
            obj["status"] = json!({
                "acceptedNames": {"kind": "", "plural": ""},
                "conditions": null,
                "storedVersions": stored,
            });
        }
        _ => {}
    }
}

/// What an update of the main resource does beyond defaults, validation and generation
/// (the strategy's `PrepareForUpdate`): a DaemonSet keeps its template generation, one more
/// when its template changed.
pub fn prepare_for_update(rt: &ResourceType, old: &Value, new: &mut Value) {
    if (rt.group.as_str(), rt.resource.as_str()) != ("apps", "daemonsets") {
        return;
    }
    let generation = |obj: &Value| {
        obj["metadata"]["annotations"][DAEMON_SET_TEMPLATE_GENERATION]
            .as_str()
            .and_then(|g| g.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let bump = i64::from(old["spec"]["template"] != new["spec"]["template"]);
    let annotations = obj_mut(obj_mut(new, "metadata"), "annotations");
    annotations[DAEMON_SET_TEMPLATE_GENERATION] = json!((generation(old) + bump).to_string());
}

/// The annotation a DaemonSet's strategy keeps its template's generation in.
const DAEMON_SET_TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// Adds `finalizer` to an object's finalizers unless it is there.
fn add_finalizer(obj: &mut Value, finalizer: &str) {
    let metadata = obj_mut(obj, "metadata");
    let mut finalizers = metadata["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(json!(finalizer));
    }
    metadata["finalizers"] = Value::Array(finalizers);
}

/// Drops what Go's `omitempty` drops when the real server decodes a built-in object and
/// encodes it again: `null` fields, empty lists (except the few without `omitempty`, e.g. a
/// pod's `containers` and a role's `rules`), and empty maps of map-typed fields (`labels`,
/// `annotations`, a ConfigMap's `data` and `binaryData`, `nodeSelector`, resource lists, ...).
/// Empty structs stay (`securityContext: {}`), as Go encodes them. Custom resources and CRDs
/// keep everything: they are not Go structs here.
pub fn omit_empty(rt: &ResourceType, obj: &mut Value) {
    if rt.is_custom() || rt.group == "apiextensions.k8s.io" {
        return;
    }
    omit_empty_in(&rt.kind, obj, &mut Vec::new());
}

fn omit_empty_in(kind: &str, value: &mut Value, names: &mut Vec<String>) {
    if names.as_slice() == ["metadata", "managedFields"] {
        return;
    }
    match value {
        Value::Object(map) if !is_go_map(kind, names) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let Some(child) = map.get_mut(&key) else {
                    continue;
                };
                names.push(key);
                omit_empty_in(kind, child, names);
                let omitted = match child {
                    Value::Null => true,
                    Value::Array(items) => items.is_empty() && !is_always_serialized(kind, names),
                    Value::Object(fields) => fields.is_empty() && is_go_map(kind, names),
                    _ => false,
                };
                if let Some(key) = names.pop()
                    && omitted
                {
                    map.remove(&key);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                omit_empty_in(kind, item, names);
            }
        }
        _ => {}
    }
}

/// Whether the field at `names` is a Go map (not a struct) in the built-in kinds' types.
fn is_go_map(kind: &str, names: &[String]) -> bool {
    let path: Vec<&str> = names.iter().map(String::as_str).collect();
    match path.as_slice() {
        ["data" | "binaryData" | "stringData"] => matches!(kind, "ConfigMap" | "Secret"),
        ["spec", "selector"] => kind == "Service",
        ["parameters"] => matches!(kind, "StorageClass" | "VolumeAttributesClass"),
        [.., "flexVolume", "options"] => true,
        [
            ..,
            "labels" | "annotations" | "nodeSelector" | "matchLabels" | "limits" | "requests"
            | "capacity" | "allocatable" | "allocatedResources" | "overhead" | "volumeAttributes",
        ] => true,
        _ => false,
    }
}

/// Whether the Go types always encode the field at `names`, empty or not (see
/// [`apply::is_always_serialized`]).
fn is_always_serialized(kind: &str, names: &[String]) -> bool {
    let path: Vec<&str> = names.iter().map(String::as_str).collect();
    apply::is_always_serialized(kind, &path)
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

fn validate_workload(rt: &ResourceType, obj: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    if let Some(r) = int_at(spec, "replicas").filter(|r| *r < 0) {
        causes.push(invalid(
            "spec.replicas",
            json!(r),
            "must be greater than or equal to 0",
        ));
    }
    let selector = &spec["selector"];
    let daemon_set = rt.resource == "daemonsets";
    if daemon_set && selector.as_object().is_some_and(Map::is_empty) {
        causes.push(invalid(
            "spec.selector",
            selector.clone(),
            "empty selector is invalid for daemonset",
        ));
    } else if !selector.is_object()
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
            // The apps validation of StatefulSets and DaemonSets names the labels themselves,
            // that of Deployments and ReplicaSets as Go prints a map.
            let shown = match rt.resource.as_str() {
                "statefulsets" | "daemonsets" => Value::Object(labels.clone()),
                _ => Value::String(go_map(&labels)),
            };
            causes.push(invalid(
                "spec.template.metadata.labels",
                shown,
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
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets") => {
            validate_workload(rt, obj, old, &mut causes);
        }
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
            causes.extend(super::validation_rules::check_crd(obj));
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

/// Sets a pod condition as `podutil.UpdatePodCondition` does: a new type is appended with
/// the transition time now; an existing one takes the new status, reason and message, and
/// a new transition time only when its status changes.
pub fn set_pod_condition(pod: &mut Value, condition: Value) {
    let now = now();
    let status = obj_mut(pod, "status");
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    match conditions
        .iter_mut()
        .find(|c| c["type"] == condition["type"])
    {
        Some(existing) => {
            if existing["status"] != condition["status"] {
                existing["lastTransitionTime"] = json!(now);
            }
            for key in ["status", "reason", "message"] {
                existing[key] = condition[key].clone();
            }
        }
        None => {
            let mut c = condition;
            c["lastProbeTime"] = Value::Null;
            c["lastTransitionTime"] = json!(now);
            conditions.push(c);
        }
    }
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
        // The EndpointSlice strategy counts a change of labels too, and its semantic
        // comparison takes an empty list for none.
        GenerationRule::AllButMetadata if is_endpoint_slice(rt) => {
            let without_meta = |v: &Value| {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("metadata");
                }
                drop_empty_endpoint_slice_lists(rt, &mut v);
                v
            };
            old["metadata"]["labels"] != new["metadata"]["labels"]
                || without_meta(old) != without_meta(new)
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
    if rt.group == AUTOSCALING && version == "v1" {
        autoscaler_to_v1(&mut obj);
    }
    // The Service storage's `defaultOnReadInternalTrafficPolicy`: an ExternalName Service is
    // read without the `internalTrafficPolicy` a change of type may have left stored.
    if rt.group.is_empty()
        && rt.resource == "services"
        && obj["spec"]["type"] == "ExternalName"
        && let Some(spec) = obj["spec"].as_object_mut()
    {
        spec.remove("internalTrafficPolicy");
    }
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(rt.api_version(version)));
        o.insert("kind".into(), json!(rt.kind));
    }
    obj
}

/// Turns what a client sees of an object into an item of a list: items of built-in types
/// carry no apiVersion and kind (the list names them once), items of custom resources keep
/// both.
pub fn list_item(rt: &ResourceType, mut item: Value) -> Value {
    if !rt.is_custom()
        && let Some(o) = item.as_object_mut()
    {
        o.remove("apiVersion");
        o.remove("kind");
    }
    item
}

/// Converts what a client sent into the stored form.
pub fn from_view(rt: &ResourceType, mut obj: Value) -> Value {
    if rt.group == "events.k8s.io" {
        obj = events_v1_to_core_event(obj);
    }
    if rt.group == AUTOSCALING && obj["apiVersion"] == "autoscaling/v1" {
        autoscaler_from_v1(&mut obj);
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

const AUTOSCALING: &str = "autoscaling";

/// Whether a v2 metric (spec or status) is the CPU utilization autoscaling/v1 has a field
/// for; `part` is `target` or `current`.
fn cpu_utilization(metrics: &Value, part: &str) -> Option<Value> {
    metrics.as_array()?.iter().find_map(|m| {
        let resource = &m["resource"];
        let utilization = &resource[part]["averageUtilization"];
        (m["type"] == "Resource" && resource["name"] == "cpu" && !utilization.is_null())
            .then(|| utilization.clone())
    })
}

/// Copies the fields of `from` named in `keys` that are set into `to`.
fn copy_set(from: &Value, to: &mut Value, keys: &[&str]) {
    for key in keys {
        if let Some(value) = from.get(*key).filter(|v| !v.is_null()) {
            to[*key] = value.clone();
        }
    }
}

/// autoscaling/v2 → autoscaling/v1 HorizontalPodAutoscaler (`pkg/apis/autoscaling/v1`
/// conversion): the CPU utilization target and reading become
/// `targetCPUUtilizationPercentage` and `currentCPUUtilizationPercentage`.
///
/// # Caveats
/// Other metrics, the behavior and the conditions, which the real conversion keeps in
/// `autoscaling.alpha.kubernetes.io/*` annotations, are left out.
fn autoscaler_to_v1(obj: &mut Value) {
    if let Some(spec) = obj.get("spec").filter(|s| s.is_object()).cloned() {
        let mut v1 = json!({});
        copy_set(
            &spec,
            &mut v1,
            &["scaleTargetRef", "minReplicas", "maxReplicas"],
        );
        if let Some(cpu) = cpu_utilization(&spec["metrics"], "target") {
            v1["targetCPUUtilizationPercentage"] = cpu;
        }
        obj["spec"] = v1;
    }
    if let Some(status) = obj.get("status").filter(|s| s.is_object()).cloned() {
        let mut v1 = json!({"currentReplicas": 0, "desiredReplicas": 0});
        copy_set(
            &status,
            &mut v1,
            &[
                "observedGeneration",
                "lastScaleTime",
                "currentReplicas",
                "desiredReplicas",
            ],
        );
        if let Some(cpu) = cpu_utilization(&status["currentMetrics"], "current") {
            v1["currentCPUUtilizationPercentage"] = cpu;
        }
        obj["status"] = v1;
    }
}

/// autoscaling/v1 → autoscaling/v2 HorizontalPodAutoscaler, the inverse of
/// [`autoscaler_to_v1`].
fn autoscaler_from_v1(obj: &mut Value) {
    if let Some(spec) = obj.get("spec").filter(|s| s.is_object()).cloned() {
        let mut v2 = json!({});
        copy_set(
            &spec,
            &mut v2,
            &["scaleTargetRef", "minReplicas", "maxReplicas"],
        );
        if let Some(cpu) = spec
            .get("targetCPUUtilizationPercentage")
            .filter(|c| !c.is_null())
        {
            v2["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": cpu}}}]);
        }
        obj["spec"] = v2;
    }
    if let Some(status) = obj.get("status").filter(|s| s.is_object()).cloned() {
        let mut v2 = json!({"currentMetrics": null});
        copy_set(
            &status,
            &mut v2,
            &["observedGeneration", "lastScaleTime", "desiredReplicas"],
        );
        if let Some(current) = status["currentReplicas"].as_i64().filter(|c| *c != 0) {
            v2["currentReplicas"] = json!(current);
        }
        if let Some(cpu) = status
            .get("currentCPUUtilizationPercentage")
            .filter(|c| !c.is_null())
        {
            v2["currentMetrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": cpu}}}]);
        }
        obj["status"] = v2;
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

fn is_endpoint_slice(rt: &ResourceType) -> bool {
    (rt.group.as_str(), rt.resource.as_str()) == ("discovery.k8s.io", "endpointslices")
}

/// What storage gives back of what an update or create wrote, once the field manager has
/// seen it as sent: an EndpointSlice's empty lists of endpoints and ports, which Go
/// serializes without `omitempty` (the writer owns them), are stored as protobuf and read
/// back as none (`null`).
pub fn as_stored(rt: &ResourceType, obj: &mut Value) {
    drop_empty_endpoint_slice_lists(rt, obj);
}

fn drop_empty_endpoint_slice_lists(rt: &ResourceType, obj: &mut Value) {
    if !is_endpoint_slice(rt) {
        return;
    }
    if let Some(o) = obj.as_object_mut() {
        for list in ["endpoints", "ports"] {
            if o.get(list)
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                o.remove(list);
            }
        }
    }
}

/// Whether `rt` is one of the two resources of Events, which share one storage: core
/// `events` and `events.k8s.io` `events`.
pub fn is_event(rt: &ResourceType) -> bool {
    rt.resource == "events" && matches!(rt.group.as_str(), "" | "events.k8s.io")
}

/// Records the ownership of a new Event (stored as a core Event) as kube-apiserver's field
/// manager records it for a create through events.k8s.io/v1, on the object in that version:
/// the writer's entry names `events.k8s.io/v1` and the fields as it names them (`regarding`,
/// `note`, `reportingController`, ...). The writer and time are its entry's, made on the
/// stored form.
fn own_as_events_v1(obj: &mut Value) {
    let Some(metadata) = obj["metadata"].as_object_mut() else {
        return;
    };
    let entries = metadata.remove("managedFields");
    let Some([entry]) = entries
        .as_ref()
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    else {
        if let Some(entries) = entries {
            metadata.insert("managedFields".into(), entries);
        }
        return;
    };
    let manager = entry["manager"].as_str().unwrap_or_default();
    let time = entry["time"].as_str().unwrap_or_default();
    let mut view = core_event_to_events_v1(obj.clone());
    view["apiVersion"] = json!("events.k8s.io/v1");
    apply::record_update(&json!({}), &mut view, manager, "Event", time, None);
    if let Some(owned) = view["metadata"].get_mut("managedFields") {
        obj["metadata"]["managedFields"] = owned.take();
    }
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
        // `replicas` of a ScaleSpec is `omitempty`: no replicas reads as none.
        "spec": match at(&paths.spec_replicas).filter(|r| *r != json!(0)) {
            Some(replicas) => json!({"replicas": replicas}),
            None => json!({}),
        },
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
    #[test]
    fn a_pods_qos_class_follows_its_containers_cpu_and_memory() {
        let spec = |containers: Value| json!({"containers": containers});
        assert_eq!(pod_qos_class(&spec(json!([{"name": "a"}]))), "BestEffort");
        let requests = json!([{"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]);
        assert_eq!(pod_qos_class(&spec(requests)), "Burstable");
        let limits = json!([{"resources": {"limits": {"cpu": "0.1", "memory": "64Mi"}}}]);
        assert_eq!(pod_qos_class(&spec(limits)), "Guaranteed");
        let equal = json!([{"resources": {"limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "1000m", "memory": "1073741824"}}}]);
        assert_eq!(pod_qos_class(&spec(equal.clone())), "Guaranteed");
        let mut with_init = spec(equal);
        with_init["initContainers"] = json!([{"name": "init"}]);
        assert_eq!(pod_qos_class(&with_init), "Burstable");
        let zero = json!([{"resources": {"requests": {"cpu": "0"}, "limits": {"memory": "0"}}}]);
        assert_eq!(pod_qos_class(&spec(zero)), "BestEffort");
    }

    use super::*;
    use crate::registry::Registry;

    #[test]
    fn a_new_pod_gets_the_default_tolerations_and_service_account() {
        let r = Registry::new();
        let rt = r.lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "memcached:1.6"}]}});
        apply_defaults(rt, &mut pod);
        prepare_for_create(rt, &mut pod, &ServiceAccounts::default(), "abcde");
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
    fn a_pod_naming_a_missing_account_is_refused_as_the_service_account_plugin_refuses_it() {
        let r = Registry::new();
        let rt = r.lookup("", "v1", "pods").unwrap();
        let accounts = ServiceAccounts::new([json!({"metadata": {"name": "default"}})]);
        let pod = |spec: Value| json!({"metadata": {"generateName": "web-"}, "spec": spec});
        accounts.admit(rt, "ns", "web-", &pod(json!({}))).unwrap();
        let error = accounts
            .admit(rt, "ns", "web-", &pod(json!({"serviceAccount": "ghost"})))
            .unwrap_err();
        assert_eq!(error.code(), 403);
        assert_eq!(
            error.to_string(),
            "pods \"web-\" is forbidden: error looking up service account ns/ghost: serviceaccount \"ghost\" not found"
        );
        let mut mirror = pod(json!({"serviceAccountName": "ghost"}));
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        accounts.admit(rt, "ns", "web-", &mirror).unwrap();
    }

    #[test]
    fn admission_names_an_object_by_its_name_else_its_generate_name() {
        let named = json!({"metadata": {"name": "a", "generateName": "b-"}});
        assert_eq!(admission_name(&named), "a");
        assert_eq!(
            admission_name(&json!({"metadata": {"generateName": "b-"}})),
            "b-"
        );
        assert_eq!(admission_name(&json!({"metadata": {}})), "Unknown");
    }

    #[test]
    fn the_deprecated_service_account_field_names_the_account_and_mirrors_it_after() {
        let r = Registry::new();
        let rt = r.lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"serviceAccount": "old",
            "containers": [{"name": "c", "image": "i"}]}});
        prepare_for_create(rt, &mut pod, &ServiceAccounts::default(), "abcde");
        assert_eq!(pod["spec"]["serviceAccountName"], "old");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"serviceAccount": "old",
            "serviceAccountName": "new", "containers": [{"name": "c", "image": "i"}]}});
        prepare_for_create(rt, &mut pod, &ServiceAccounts::default(), "abcde");
        assert_eq!(pod["spec"]["serviceAccount"], "new");
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

    #[test]
    fn omitempty_drops_empty_lists_and_maps_but_keeps_empty_structs_and_lists_without_it() {
        let r = Registry::new();
        let rt = r.lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p", "labels": {}, "ownerReferences": []},
            "spec": {"containers": [{"name": "c", "env": [], "resources": {"limits": {}}}],
                "nodeSelector": {}, "tolerations": [], "securityContext": {}, "hostname": null}});
        omit_empty(rt, &mut pod);
        assert_eq!(
            pod,
            json!({"metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "resources": {}}], "securityContext": {}}})
        );
        let rt = r
            .lookup("rbac.authorization.k8s.io", "v1", "roles")
            .unwrap();
        let mut role = json!({"metadata": {"name": "r"}, "rules": []});
        omit_empty(rt, &mut role);
        assert_eq!(role["rules"], json!([]));
        let rt = r.lookup("", "v1", "services").unwrap();
        let mut service = json!({"metadata": {"name": "s"}, "spec": {"selector": {}, "ports": []}});
        omit_empty(rt, &mut service);
        assert_eq!(service["spec"], json!({}));
    }

    #[test]
    fn a_service_is_defaulted_as_the_versioned_type_is() {
        let r = Registry::new();
        let rt = r.lookup("", "v1", "services").unwrap();
        let mut service = json!({"metadata": {"name": "s"},
            "spec": {"type": "NodePort", "ports": [{"port": 80}], "sessionAffinityConfig": {}}});
        apply_defaults(rt, &mut service);
        assert_eq!(
            service["spec"],
            json!({"type": "NodePort", "sessionAffinity": "None", "externalTrafficPolicy": "Cluster",
                "internalTrafficPolicy": "Cluster",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]})
        );
    }

    #[test]
    fn volumes_and_field_references_get_their_defaults() {
        let mut spec = json!({"containers": [{"name": "c", "image": "i",
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
            "volumes": [{"name": "scratch"}, {"name": "config", "configMap": {"name": "x"}},
                {"name": "projected", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]});
        default_pod_spec(&mut spec);
        assert_eq!(
            spec["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"],
            "v1"
        );
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["configMap"]["defaultMode"], 420);
        assert_eq!(spec["volumes"][2]["projected"]["defaultMode"], 420);
        assert_eq!(
            spec["volumes"][2]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3600
        );
    }
}
