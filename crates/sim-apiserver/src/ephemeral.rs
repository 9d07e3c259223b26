//! The `pods/ephemeralcontainers` subresource as kube-apiserver 1.34 serves it: the update
//! strategy (`podEphemeralContainersStrategy`, `pkg/registry/core/pod/strategy.go`) and the
//! validation of ephemeral containers (`validateEphemeralContainers` and
//! `ValidatePodEphemeralContainersUpdate`, `pkg/apis/core/validation/validation.go`), with the
//! diff its refusals carry (`k8s.io/apimachinery/pkg/util/diff.Diff`: a unified diff, three
//! lines of context, of the internal Go objects as indented JSON).
//!
//! The verb handlers (`handlers`) decode, patch and write; this module decides what an update
//! of the subresource makes of the stored pod and what it refuses. Pod creation refuses
//! ephemeral containers too ([`validate_create`]).
//!
//! # Caveats
//! - Of `validateContainerCommon` only the checks ephemeral containers meet in practice are
//!   made: name, image, `terminationMessagePolicy`, `imagePullPolicy`, the ports' numbers,
//!   names and protocols, and that volume mounts name a volume of the pod and have a mount
//!   path. Env names, resource quantities, volume devices and security contexts are not
//!   checked.
//! - Go tells a nil list from an empty one (`"ports": []` is a forbidden field there); the
//!   stored form of the simulator drops empty lists and maps, so an empty one is never
//!   refused here.
//! - Quantities are rendered in a diff as stored, not in their canonical form.

use serde_json::{Map, Value, json};

use super::names::{self, Cause, go_quote};

/// The name of the subresource (and of the `subresource` of its managedFields entries).
pub const SUBRESOURCE: &str = "ephemeralcontainers";

/// The annotation of a mirror pod (a static pod's reflection in the API).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Fields of an ephemeral container that `validateFieldAllowList` refuses, in the order of
/// the Go struct, with the JSON name the field path uses.
const FORBIDDEN_FIELDS: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "restartPolicyRules",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// Where the refusals of changes to existing ephemeral containers point.
const LIST_PATH: &str = "spec.ephemeralContainers";

/// What an update through `pods/ephemeralcontainers` stores (`PrepareForUpdate` of the
/// strategy): the live pod `old` with only the ephemeral containers of `new`, and the
/// `resourceVersion` `new` was written against. The rest of `new` — spec, status, labels,
/// annotations, finalizers, owner references, deletion timestamp, generation — is dropped.
///
/// `new` comes defaulted (as the request decodes); [`drop_disabled_fields`] runs on the
/// result, then [`validate_update`].
pub fn prepare_update(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    match new["spec"].get("ephemeralContainers") {
        Some(list) if !list.is_null() => out["spec"]["ephemeralContainers"] = list.clone(),
        _ => {
            if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("ephemeralContainers");
            }
        }
    }
    if let Some(rv) = new["metadata"].get("resourceVersion") {
        out["metadata"]["resourceVersion"] = rv.clone();
    }
    out
}

/// `DropDisabledPodFields` for ephemeral containers: `restartPolicy` and `restartPolicyRules`
/// belong to the `ContainerRestartRules` feature, off in 1.34, and are dropped silently.
pub fn drop_disabled_fields(pod: &mut Value) {
    let Some(list) = pod["spec"]
        .get_mut("ephemeralContainers")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for c in list.iter_mut().filter_map(Value::as_object_mut) {
        c.remove("restartPolicy");
        c.remove("restartPolicyRules");
    }
}

/// `ValidatePodEphemeralContainersUpdate` of the prepared (and defaulted) `new` against the
/// live `old`: the ephemeral containers are valid, none was removed and none changed. A
/// mirror pod refuses them all with one cause.
pub fn validate_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = validate_containers(&new["spec"]);
    if old["metadata"]["annotations"]
        .get(MIRROR_ANNOTATION)
        .is_some()
    {
        return vec![Cause::forbidden(
            "[]",
            "static pods do not support ephemeral containers",
        )];
    }
    let new_list = containers(&new["spec"]);
    for old_container in containers(&old["spec"]) {
        let name = old_container["name"].as_str().unwrap_or_default();
        // Go indexes the new list by name: of duplicates, the last one counts.
        match new_list
            .iter()
            .rev()
            .find(|c| c["name"] == old_container["name"])
        {
            None => causes.push(Cause::forbidden(
                LIST_PATH,
                format!(
                    "existing ephemeral containers {} may not be removed\n",
                    go_quote(name)
                ),
            )),
            Some(new_container) if !same(old_container, new_container) => {
                causes.push(Cause::forbidden(
                    LIST_PATH,
                    format!(
                        "existing ephemeral containers {} may not be changed\n{}",
                        go_quote(name),
                        diff(old_container, new_container)
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    causes
}

/// What `ValidatePodCreate` adds for ephemeral containers in a new pod: their validation,
/// then `spec.ephemeralContainers: Forbidden: cannot be set on create`.
pub fn validate_create(pod: &Value) -> Vec<Cause> {
    if containers(&pod["spec"]).is_empty() {
        return Vec::new();
    }
    let mut causes = validate_containers(&pod["spec"]);
    causes.push(Cause::forbidden(LIST_PATH, "cannot be set on create"));
    causes
}

/// The ephemeral containers of a pod spec.
fn containers(spec: &Value) -> &[Value] {
    spec["ephemeralContainers"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

fn names_of(spec: &Value, list: &str) -> Vec<String> {
    spec[list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// `validateEphemeralContainers` of a pod spec (paths `spec.ephemeralContainers[i]…`).
pub fn validate_containers(spec: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let others: Vec<String> = names_of(spec, "containers")
        .into_iter()
        .chain(names_of(spec, "initContainers"))
        .collect();
    let mut all = others.clone();
    let volumes = names_of(spec, "volumes");
    for (i, c) in containers(spec).iter().enumerate() {
        let at = format!("{LIST_PATH}[{i}]");
        validate_common(c, &volumes, &at, &mut causes);
        let image = c["image"].as_str().unwrap_or_default();
        if image.len() != image.trim().len() {
            causes.push(Cause::invalid(
                &format!("{at}.image"),
                json!(image),
                "must not have leading or trailing whitespace",
            ));
        }
        let name = c["name"].as_str().unwrap_or_default();
        if all.iter().any(|n| n == name) {
            causes.push(Cause::duplicate(&format!("{at}.name"), json!(name)));
        } else {
            all.push(name.to_string());
        }
        let target = c["targetContainerName"].as_str().unwrap_or_default();
        if !target.is_empty() && !others.iter().any(|n| n == target) {
            causes.push(not_found(
                &format!("{at}.targetContainerName"),
                json!(target),
            ));
        }
        for field in FORBIDDEN_FIELDS {
            if is_set(&c[*field]) {
                causes.push(Cause::forbidden(
                    &format!("{at}.{field}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        for (j, mount) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for field in ["subPath", "subPathExpr"] {
                if mount[field].as_str().is_some_and(|s| !s.is_empty()) {
                    causes.push(Cause::forbidden(
                        &format!("{at}.volumeMounts[{j}].{field}"),
                        "cannot be set for an Ephemeral Container",
                    ));
                }
            }
        }
    }
    causes
}

/// `field.NotFound(path, value)`.
fn not_found(field: &str, value: Value) -> Cause {
    Cause::from_reason(field, value.clone(), names::FIELD_VALUE_NOT_FOUND, "")
        .unwrap_or_else(|_| Cause::invalid(field, value, "not found"))
}

/// Whether a field holds something other than Go's zero value (in the stored form, where
/// empty lists and maps are already gone).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Object(m) => m.values().any(is_set),
        Value::Array(a) => !a.is_empty(),
        Value::String(s) => !s.is_empty(),
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
    }
}

/// The part of `validateContainerCommon` made here (see the module's caveats).
fn validate_common(c: &Value, volumes: &[String], at: &str, causes: &mut Vec<Cause>) {
    match c["name"].as_str().unwrap_or_default() {
        "" => causes.push(Cause::required(&format!("{at}.name"), "")),
        name => {
            for m in names::dns1123_label(name) {
                causes.push(Cause::invalid(&format!("{at}.name"), json!(name), m));
            }
        }
    }
    if c["image"].as_str().is_none_or(str::is_empty) {
        causes.push(Cause::required(&format!("{at}.image"), ""));
    }
    one_of(
        &c["terminationMessagePolicy"],
        &["File", "FallbackToLogsOnError"],
        &format!("{at}.terminationMessagePolicy"),
        causes,
    );
    validate_ports(&c["ports"], &format!("{at}.ports"), causes);
    for (j, mount) in c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("{at}.volumeMounts[{j}]");
        match mount["name"].as_str().unwrap_or_default() {
            "" => causes.push(Cause::required(&format!("{path}.name"), "")),
            name if !volumes.iter().any(|v| v == name) => {
                causes.push(not_found(&format!("{path}.name"), json!(name)));
            }
            _ => {}
        }
        if mount["mountPath"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required(&format!("{path}.mountPath"), ""));
        }
    }
    one_of(
        &c["imagePullPolicy"],
        &["Always", "IfNotPresent", "Never"],
        &format!("{at}.imagePullPolicy"),
        causes,
    );
}

/// Required when empty, NotSupported outside `supported`.
fn one_of(value: &Value, supported: &[&str], field: &str, causes: &mut Vec<Cause>) {
    match value.as_str().unwrap_or_default() {
        "" => causes.push(Cause::required(field, "")),
        v if supported.contains(&v) => {}
        v => causes.push(Cause::not_supported(
            field,
            json!(v),
            &supported.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )),
    }
}

/// `validateContainerPorts`.
fn validate_ports(ports: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut seen: Vec<&str> = Vec::new();
    for (i, port) in ports.as_array().into_iter().flatten().enumerate() {
        let path = format!("{at}[{i}]");
        if let Some(name) = port["name"].as_str().filter(|n| !n.is_empty()) {
            let problems = port_name(name);
            if !problems.is_empty() {
                for m in problems {
                    causes.push(Cause::invalid(&format!("{path}.name"), json!(name), m));
                }
            } else if seen.contains(&name) {
                causes.push(Cause::duplicate(&format!("{path}.name"), json!(name)));
            } else {
                seen.push(name);
            }
        }
        match port["containerPort"].as_i64().unwrap_or(0) {
            0 => causes.push(Cause::required(&format!("{path}.containerPort"), "")),
            p if !(1..=65535).contains(&p) => causes.push(Cause::invalid(
                &format!("{path}.containerPort"),
                json!(p),
                "must be between 1 and 65535, inclusive",
            )),
            _ => {}
        }
        if let Some(p) = port["hostPort"]
            .as_i64()
            .filter(|p| *p != 0 && !(1..=65535).contains(p))
        {
            causes.push(Cause::invalid(
                &format!("{path}.hostPort"),
                json!(p),
                "must be between 1 and 65535, inclusive",
            ));
        }
        one_of(
            &port["protocol"],
            &["SCTP", "TCP", "UDP"],
            &format!("{path}.protocol"),
            causes,
        );
    }
}

/// `IsValidPortName`: an IANA_SVC_NAME.
fn port_name(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push("must be no more than 15 characters".to_string());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        problems
            .push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen".into());
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// The internal Go type of an ephemeral container, as `json.MarshalIndent` writes it.
// ---------------------------------------------------------------------------------------------

/// A Go field: its name in the internal type (which has no JSON tags, so `encoding/json`
/// writes every field under its Go name) and in the v1 JSON the simulator stores.
struct Field {
    go: &'static str,
    json: &'static str,
    kind: Kind,
}

/// How a Go field is written.
enum Kind {
    /// A string (`""` when unset).
    Str,
    /// A bool (`false`).
    Bool,
    /// An integer (`0`).
    Int,
    /// A `resource.Quantity` (not a pointer: `"0"` when unset).
    Quantity,
    /// An `intstr.IntOrString` (`0` when unset).
    IntOrString,
    /// A pointer (`null` when unset).
    Ptr(&'static Kind),
    /// A slice (`null` when unset).
    Slice(&'static Kind),
    /// A map (`null` when unset), keys sorted.
    Map(&'static Kind),
    /// A struct (always written, `{}`-like with zero fields when unset).
    Struct(&'static [Field]),
    /// An embedded struct: its fields are the outer struct's, from the same JSON object.
    Inline(&'static [Field]),
}

const fn f(go: &'static str, json: &'static str, kind: Kind) -> Field {
    Field { go, json, kind }
}

const STR_PTR: Kind = Kind::Ptr(&Kind::Str);
const BOOL_PTR: Kind = Kind::Ptr(&Kind::Bool);
const INT_PTR: Kind = Kind::Ptr(&Kind::Int);
const STRINGS: Kind = Kind::Slice(&Kind::Str);

const LOCAL_OBJECT_REFERENCE: &[Field] = &[f("Name", "name", Kind::Str)];
const CONTAINER_PORT: &[Field] = &[
    f("Name", "name", Kind::Str),
    f("HostPort", "hostPort", Kind::Int),
    f("ContainerPort", "containerPort", Kind::Int),
    f("Protocol", "protocol", Kind::Str),
    f("HostIP", "hostIP", Kind::Str),
];
const REFERENCE_SOURCE: &[Field] = &[
    f(
        "LocalObjectReference",
        "",
        Kind::Inline(LOCAL_OBJECT_REFERENCE),
    ),
    f("Optional", "optional", BOOL_PTR),
];
const ENV_FROM_SOURCE: &[Field] = &[
    f("Prefix", "prefix", Kind::Str),
    f(
        "ConfigMapRef",
        "configMapRef",
        Kind::Ptr(&Kind::Struct(REFERENCE_SOURCE)),
    ),
    f(
        "SecretRef",
        "secretRef",
        Kind::Ptr(&Kind::Struct(REFERENCE_SOURCE)),
    ),
];
const OBJECT_FIELD_SELECTOR: &[Field] = &[
    f("APIVersion", "apiVersion", Kind::Str),
    f("FieldPath", "fieldPath", Kind::Str),
];
const RESOURCE_FIELD_SELECTOR: &[Field] = &[
    f("ContainerName", "containerName", Kind::Str),
    f("Resource", "resource", Kind::Str),
    f("Divisor", "divisor", Kind::Quantity),
];
const KEY_SELECTOR: &[Field] = &[
    f(
        "LocalObjectReference",
        "",
        Kind::Inline(LOCAL_OBJECT_REFERENCE),
    ),
    f("Key", "key", Kind::Str),
    f("Optional", "optional", BOOL_PTR),
];
const FILE_KEY_SELECTOR: &[Field] = &[
    f("VolumeName", "volumeName", Kind::Str),
    f("Path", "path", Kind::Str),
    f("Key", "key", Kind::Str),
    f("Optional", "optional", BOOL_PTR),
];
const ENV_VAR_SOURCE: &[Field] = &[
    f(
        "FieldRef",
        "fieldRef",
        Kind::Ptr(&Kind::Struct(OBJECT_FIELD_SELECTOR)),
    ),
    f(
        "ResourceFieldRef",
        "resourceFieldRef",
        Kind::Ptr(&Kind::Struct(RESOURCE_FIELD_SELECTOR)),
    ),
    f(
        "ConfigMapKeyRef",
        "configMapKeyRef",
        Kind::Ptr(&Kind::Struct(KEY_SELECTOR)),
    ),
    f(
        "SecretKeyRef",
        "secretKeyRef",
        Kind::Ptr(&Kind::Struct(KEY_SELECTOR)),
    ),
    f(
        "FileKeyRef",
        "fileKeyRef",
        Kind::Ptr(&Kind::Struct(FILE_KEY_SELECTOR)),
    ),
];
const ENV_VAR: &[Field] = &[
    f("Name", "name", Kind::Str),
    f("Value", "value", Kind::Str),
    f(
        "ValueFrom",
        "valueFrom",
        Kind::Ptr(&Kind::Struct(ENV_VAR_SOURCE)),
    ),
];
const RESOURCE_CLAIM: &[Field] = &[
    f("Name", "name", Kind::Str),
    f("Request", "request", Kind::Str),
];
const RESOURCE_REQUIREMENTS: &[Field] = &[
    f("Limits", "limits", Kind::Map(&Kind::Quantity)),
    f("Requests", "requests", Kind::Map(&Kind::Quantity)),
    f(
        "Claims",
        "claims",
        Kind::Slice(&Kind::Struct(RESOURCE_CLAIM)),
    ),
];
const CONTAINER_RESIZE_POLICY: &[Field] = &[
    f("ResourceName", "resourceName", Kind::Str),
    f("RestartPolicy", "restartPolicy", Kind::Str),
];
const ON_EXIT_CODES: &[Field] = &[
    f("Operator", "operator", Kind::Str),
    f("Values", "values", Kind::Slice(&Kind::Int)),
];
const CONTAINER_RESTART_RULE: &[Field] = &[
    f("Action", "action", Kind::Str),
    f(
        "ExitCodes",
        "exitCodes",
        Kind::Ptr(&Kind::Struct(ON_EXIT_CODES)),
    ),
];
const VOLUME_MOUNT: &[Field] = &[
    f("Name", "name", Kind::Str),
    f("ReadOnly", "readOnly", Kind::Bool),
    f("RecursiveReadOnly", "recursiveReadOnly", STR_PTR),
    f("MountPath", "mountPath", Kind::Str),
    f("SubPath", "subPath", Kind::Str),
    f("MountPropagation", "mountPropagation", STR_PTR),
    f("SubPathExpr", "subPathExpr", Kind::Str),
];
const VOLUME_DEVICE: &[Field] = &[
    f("Name", "name", Kind::Str),
    f("DevicePath", "devicePath", Kind::Str),
];
const EXEC_ACTION: &[Field] = &[f("Command", "command", STRINGS)];
const HTTP_HEADER: &[Field] = &[f("Name", "name", Kind::Str), f("Value", "value", Kind::Str)];
const HTTP_GET_ACTION: &[Field] = &[
    f("Path", "path", Kind::Str),
    f("Port", "port", Kind::IntOrString),
    f("Host", "host", Kind::Str),
    f("Scheme", "scheme", Kind::Str),
    f(
        "HTTPHeaders",
        "httpHeaders",
        Kind::Slice(&Kind::Struct(HTTP_HEADER)),
    ),
];
const TCP_SOCKET_ACTION: &[Field] = &[
    f("Port", "port", Kind::IntOrString),
    f("Host", "host", Kind::Str),
];
const GRPC_ACTION: &[Field] = &[
    f("Port", "port", Kind::Int),
    f("Service", "service", STR_PTR),
];
const PROBE_HANDLER: &[Field] = &[
    f("Exec", "exec", Kind::Ptr(&Kind::Struct(EXEC_ACTION))),
    f(
        "HTTPGet",
        "httpGet",
        Kind::Ptr(&Kind::Struct(HTTP_GET_ACTION)),
    ),
    f(
        "TCPSocket",
        "tcpSocket",
        Kind::Ptr(&Kind::Struct(TCP_SOCKET_ACTION)),
    ),
    f("GRPC", "grpc", Kind::Ptr(&Kind::Struct(GRPC_ACTION))),
];
const PROBE: &[Field] = &[
    f("ProbeHandler", "", Kind::Inline(PROBE_HANDLER)),
    f("InitialDelaySeconds", "initialDelaySeconds", Kind::Int),
    f("TimeoutSeconds", "timeoutSeconds", Kind::Int),
    f("PeriodSeconds", "periodSeconds", Kind::Int),
    f("SuccessThreshold", "successThreshold", Kind::Int),
    f("FailureThreshold", "failureThreshold", Kind::Int),
    f(
        "TerminationGracePeriodSeconds",
        "terminationGracePeriodSeconds",
        INT_PTR,
    ),
];
const SLEEP_ACTION: &[Field] = &[f("Seconds", "seconds", Kind::Int)];
const LIFECYCLE_HANDLER: &[Field] = &[
    f("Exec", "exec", Kind::Ptr(&Kind::Struct(EXEC_ACTION))),
    f(
        "HTTPGet",
        "httpGet",
        Kind::Ptr(&Kind::Struct(HTTP_GET_ACTION)),
    ),
    f(
        "TCPSocket",
        "tcpSocket",
        Kind::Ptr(&Kind::Struct(TCP_SOCKET_ACTION)),
    ),
    f("Sleep", "sleep", Kind::Ptr(&Kind::Struct(SLEEP_ACTION))),
];
const LIFECYCLE: &[Field] = &[
    f(
        "PostStart",
        "postStart",
        Kind::Ptr(&Kind::Struct(LIFECYCLE_HANDLER)),
    ),
    f(
        "PreStop",
        "preStop",
        Kind::Ptr(&Kind::Struct(LIFECYCLE_HANDLER)),
    ),
    f("StopSignal", "stopSignal", STR_PTR),
];
const CAPABILITIES: &[Field] = &[f("Add", "add", STRINGS), f("Drop", "drop", STRINGS)];
const SELINUX_OPTIONS: &[Field] = &[
    f("User", "user", Kind::Str),
    f("Role", "role", Kind::Str),
    f("Type", "type", Kind::Str),
    f("Level", "level", Kind::Str),
];
const WINDOWS_OPTIONS: &[Field] = &[
    f("GMSACredentialSpecName", "gmsaCredentialSpecName", STR_PTR),
    f("GMSACredentialSpec", "gmsaCredentialSpec", STR_PTR),
    f("RunAsUserName", "runAsUserName", STR_PTR),
    f("HostProcess", "hostProcess", BOOL_PTR),
];
const PROFILE: &[Field] = &[
    f("Type", "type", Kind::Str),
    f("LocalhostProfile", "localhostProfile", STR_PTR),
];
const SECURITY_CONTEXT: &[Field] = &[
    f(
        "Capabilities",
        "capabilities",
        Kind::Ptr(&Kind::Struct(CAPABILITIES)),
    ),
    f("Privileged", "privileged", BOOL_PTR),
    f(
        "SELinuxOptions",
        "seLinuxOptions",
        Kind::Ptr(&Kind::Struct(SELINUX_OPTIONS)),
    ),
    f(
        "WindowsOptions",
        "windowsOptions",
        Kind::Ptr(&Kind::Struct(WINDOWS_OPTIONS)),
    ),
    f("RunAsUser", "runAsUser", INT_PTR),
    f("RunAsGroup", "runAsGroup", INT_PTR),
    f("RunAsNonRoot", "runAsNonRoot", BOOL_PTR),
    f("ReadOnlyRootFilesystem", "readOnlyRootFilesystem", BOOL_PTR),
    f(
        "AllowPrivilegeEscalation",
        "allowPrivilegeEscalation",
        BOOL_PTR,
    ),
    f("ProcMount", "procMount", STR_PTR),
    f(
        "SeccompProfile",
        "seccompProfile",
        Kind::Ptr(&Kind::Struct(PROFILE)),
    ),
    f(
        "AppArmorProfile",
        "appArmorProfile",
        Kind::Ptr(&Kind::Struct(PROFILE)),
    ),
];
const PROBE_PTR: Kind = Kind::Ptr(&Kind::Struct(PROBE));
const EPHEMERAL_CONTAINER_COMMON: &[Field] = &[
    f("Name", "name", Kind::Str),
    f("Image", "image", Kind::Str),
    f("Command", "command", STRINGS),
    f("Args", "args", STRINGS),
    f("WorkingDir", "workingDir", Kind::Str),
    f("Ports", "ports", Kind::Slice(&Kind::Struct(CONTAINER_PORT))),
    f(
        "EnvFrom",
        "envFrom",
        Kind::Slice(&Kind::Struct(ENV_FROM_SOURCE)),
    ),
    f("Env", "env", Kind::Slice(&Kind::Struct(ENV_VAR))),
    f(
        "Resources",
        "resources",
        Kind::Struct(RESOURCE_REQUIREMENTS),
    ),
    f(
        "ResizePolicy",
        "resizePolicy",
        Kind::Slice(&Kind::Struct(CONTAINER_RESIZE_POLICY)),
    ),
    f("RestartPolicy", "restartPolicy", STR_PTR),
    f(
        "RestartPolicyRules",
        "restartPolicyRules",
        Kind::Slice(&Kind::Struct(CONTAINER_RESTART_RULE)),
    ),
    f(
        "VolumeMounts",
        "volumeMounts",
        Kind::Slice(&Kind::Struct(VOLUME_MOUNT)),
    ),
    f(
        "VolumeDevices",
        "volumeDevices",
        Kind::Slice(&Kind::Struct(VOLUME_DEVICE)),
    ),
    f("LivenessProbe", "livenessProbe", PROBE_PTR),
    f("ReadinessProbe", "readinessProbe", PROBE_PTR),
    f("StartupProbe", "startupProbe", PROBE_PTR),
    f(
        "Lifecycle",
        "lifecycle",
        Kind::Ptr(&Kind::Struct(LIFECYCLE)),
    ),
    f(
        "TerminationMessagePath",
        "terminationMessagePath",
        Kind::Str,
    ),
    f(
        "TerminationMessagePolicy",
        "terminationMessagePolicy",
        Kind::Str,
    ),
    f("ImagePullPolicy", "imagePullPolicy", Kind::Str),
    f(
        "SecurityContext",
        "securityContext",
        Kind::Ptr(&Kind::Struct(SECURITY_CONTEXT)),
    ),
    f("Stdin", "stdin", Kind::Bool),
    f("StdinOnce", "stdinOnce", Kind::Bool),
    f("TTY", "tty", Kind::Bool),
];
const EPHEMERAL_CONTAINER: &[Field] = &[
    f(
        "EphemeralContainerCommon",
        "",
        Kind::Inline(EPHEMERAL_CONTAINER_COMMON),
    ),
    f("TargetContainerName", "targetContainerName", Kind::Str),
];

/// Go's `json.MarshalIndent(value, "", " ")` of a v1 ephemeral container converted to the
/// internal type.
pub fn go_json(container: &Value) -> String {
    let mut out = String::new();
    write(container, &Kind::Struct(EPHEMERAL_CONTAINER), 0, &mut out);
    out
}

fn indent(out: &mut String, depth: usize) {
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', depth));
}

/// Writes `value` (v1 JSON; `null` when absent) as the Go value of `kind` at `depth`.
fn write(value: &Value, kind: &Kind, depth: usize, out: &mut String) {
    match kind {
        Kind::Str => match value {
            Value::Null => out.push_str("\"\""),
            v => out.push_str(&names::go_json(v)),
        },
        Kind::Bool => match value {
            Value::Null => out.push_str("false"),
            v => out.push_str(&names::go_json(v)),
        },
        Kind::Int | Kind::IntOrString => match value {
            Value::Null => out.push('0'),
            v => out.push_str(&names::go_json(v)),
        },
        Kind::Quantity => match value {
            Value::Null => out.push_str("\"0\""),
            Value::Number(n) => out.push_str(&names::go_json(&json!(n.to_string()))),
            v => out.push_str(&names::go_json(v)),
        },
        Kind::Ptr(inner) => match value {
            Value::Null => out.push_str("null"),
            v => write(v, inner, depth, out),
        },
        Kind::Slice(inner) => match value {
            Value::Array(items) if items.is_empty() => out.push_str("[]"),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    indent(out, depth + 1);
                    write(item, inner, depth + 1, out);
                }
                indent(out, depth);
                out.push(']');
            }
            Value::Null => out.push_str("null"),
            v => out.push_str(&names::go_json(v)),
        },
        Kind::Map(inner) => match value {
            Value::Object(m) if m.is_empty() => out.push_str("{}"),
            Value::Object(m) => {
                out.push('{');
                // serde_json's map iterates in key order, which is Go's (bytewise) order.
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    indent(out, depth + 1);
                    out.push_str(&names::go_json(&json!(k)));
                    out.push_str(": ");
                    write(v, inner, depth + 1, out);
                }
                indent(out, depth);
                out.push('}');
            }
            Value::Null => out.push_str("null"),
            v => out.push_str(&names::go_json(v)),
        },
        Kind::Struct(fields) => {
            let empty = Map::new();
            let object = value.as_object().unwrap_or(&empty);
            let mut entries = Vec::new();
            flatten(fields, object, &mut entries);
            out.push('{');
            for (i, (go, kind, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, depth + 1);
                out.push('"');
                out.push_str(go);
                out.push_str("\": ");
                write(v, kind, depth + 1, out);
            }
            indent(out, depth);
            out.push('}');
        }
        // Inline fields are written by their struct (see `flatten`).
        Kind::Inline(_) => {}
    }
}

/// The fields of a struct in order, embedded structs' fields in their place.
fn flatten<'a>(
    fields: &'static [Field],
    object: &'a Map<String, Value>,
    out: &mut Vec<(&'static str, &'static Kind, &'a Value)>,
) {
    for field in fields {
        match &field.kind {
            Kind::Inline(inner) => flatten(inner, object, out),
            kind => out.push((
                field.go,
                kind,
                object.get(field.json).unwrap_or(&Value::Null),
            )),
        }
    }
}

/// `apiequality.Semantic.DeepEqual` of two ephemeral containers: equal as Go values, where an
/// empty list or map equals a nil one.
fn same(a: &Value, b: &Value) -> bool {
    a == b || go_json(&without_empties(a)) == go_json(&without_empties(b))
}

/// `value` with the members that are empty lists or maps left out (as if nil).
fn without_empties(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), without_empties(v)))
                .filter(|(_, v)| match v {
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    _ => true,
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_empties).collect()),
        other => other.clone(),
    }
}

/// `diff.Diff(old, new)` of two ephemeral containers: a unified diff of their Go JSON.
pub fn diff(old: &Value, new: &Value) -> String {
    unified_diff(&go_json(old), &go_json(new), 3)
}

// ---------------------------------------------------------------------------------------------
// go-difflib (a port of Python's difflib), as `diff.Diff` uses it.
// ---------------------------------------------------------------------------------------------

/// `difflib.SplitLines`: lines with their `\n`, the last one given one too.
fn split_lines(s: &str) -> Vec<String> {
    let mut lines: Vec<String> = s.split_inclusive('\n').map(str::to_string).collect();
    match lines.last_mut() {
        Some(last) if !last.ends_with('\n') => last.push('\n'),
        Some(_) => lines.push("\n".into()),
        None => lines.push("\n".into()),
    }
    lines
}

/// A run of equal lines: `a[a..a+size] == b[b..b+size]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Match {
    a: usize,
    b: usize,
    size: usize,
}

/// What turns a range of `a` into a range of `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OpCode {
    tag: u8,
    i1: usize,
    i2: usize,
    j1: usize,
    j2: usize,
}

/// `difflib.SequenceMatcher` over lines, with its autojunk heuristic (no junk function).
struct Matcher<'s> {
    a: &'s [String],
    b: &'s [String],
    b2j: std::collections::HashMap<&'s str, Vec<usize>>,
}

impl<'s> Matcher<'s> {
    fn new(a: &'s [String], b: &'s [String]) -> Self {
        let mut b2j: std::collections::HashMap<&'s str, Vec<usize>> =
            std::collections::HashMap::new();
        for (i, line) in b.iter().enumerate() {
            b2j.entry(line.as_str()).or_default().push(i);
        }
        // Popular elements (more than 1% + 1 of a long b) are not indexed.
        let n = b.len();
        if n >= 200 {
            let ntest = n / 100 + 1;
            b2j.retain(|_, indices| indices.len() <= ntest);
        }
        Self { a, b, b2j }
    }

    fn find_longest_match(&self, alo: usize, ahi: usize, blo: usize, bhi: usize) -> Match {
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
        let mut j2len: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for i in alo..ahi {
            let mut newj2len = std::collections::HashMap::new();
            if let Some(indices) = self.b2j.get(self.a[i].as_str()) {
                for &j in indices {
                    if j < blo {
                        continue;
                    }
                    if j >= bhi {
                        break;
                    }
                    let k = j
                        .checked_sub(1)
                        .and_then(|p| j2len.get(&p))
                        .copied()
                        .unwrap_or(0)
                        + 1;
                    newj2len.insert(j, k);
                    if k > bestsize {
                        besti = i + 1 - k;
                        bestj = j + 1 - k;
                        bestsize = k;
                    }
                }
            }
            j2len = newj2len;
        }
        // No junk: extend the match over equal neighbours (popular lines included).
        while besti > alo && bestj > blo && self.a[besti - 1] == self.b[bestj - 1] {
            besti -= 1;
            bestj -= 1;
            bestsize += 1;
        }
        while besti + bestsize < ahi
            && bestj + bestsize < bhi
            && self.a[besti + bestsize] == self.b[bestj + bestsize]
        {
            bestsize += 1;
        }
        Match {
            a: besti,
            b: bestj,
            size: bestsize,
        }
    }

    fn matching_blocks(&self) -> Vec<Match> {
        let mut queue = vec![(0, self.a.len(), 0, self.b.len())];
        let mut blocks = Vec::new();
        while let Some((alo, ahi, blo, bhi)) = queue.pop() {
            let m = self.find_longest_match(alo, ahi, blo, bhi);
            if m.size > 0 {
                blocks.push(m);
                if alo < m.a && blo < m.b {
                    queue.push((alo, m.a, blo, m.b));
                }
                if m.a + m.size < ahi && m.b + m.size < bhi {
                    queue.push((m.a + m.size, ahi, m.b + m.size, bhi));
                }
            }
        }
        blocks.sort_by_key(|m| (m.a, m.b, m.size));
        let mut merged: Vec<Match> = Vec::new();
        for m in blocks {
            match merged.last_mut() {
                Some(last) if last.a + last.size == m.a && last.b + last.size == m.b => {
                    last.size += m.size;
                }
                _ => merged.push(m),
            }
        }
        merged.push(Match {
            a: self.a.len(),
            b: self.b.len(),
            size: 0,
        });
        merged
    }

    fn opcodes(&self) -> Vec<OpCode> {
        let (mut i, mut j) = (0, 0);
        let mut codes = Vec::new();
        for m in self.matching_blocks() {
            let tag = match (i < m.a, j < m.b) {
                (true, true) => Some(b'r'),
                (true, false) => Some(b'd'),
                (false, true) => Some(b'i'),
                (false, false) => None,
            };
            if let Some(tag) = tag {
                codes.push(OpCode {
                    tag,
                    i1: i,
                    i2: m.a,
                    j1: j,
                    j2: m.b,
                });
            }
            i = m.a + m.size;
            j = m.b + m.size;
            if m.size > 0 {
                codes.push(OpCode {
                    tag: b'e',
                    i1: m.a,
                    i2: i,
                    j1: m.b,
                    j2: j,
                });
            }
        }
        codes
    }

    fn grouped_opcodes(&self, n: usize) -> Vec<Vec<OpCode>> {
        let mut codes = self.opcodes();
        if codes.is_empty() {
            codes.push(OpCode {
                tag: b'e',
                i1: 0,
                i2: 1,
                j1: 0,
                j2: 1,
            });
        }
        if let Some(first) = codes.first_mut().filter(|c| c.tag == b'e') {
            first.i1 = first.i1.max(first.i2.saturating_sub(n));
            first.j1 = first.j1.max(first.j2.saturating_sub(n));
        }
        if let Some(last) = codes.last_mut().filter(|c| c.tag == b'e') {
            last.i2 = last.i2.min(last.i1 + n);
            last.j2 = last.j2.min(last.j1 + n);
        }
        let nn = n + n;
        let mut groups = Vec::new();
        let mut group = Vec::new();
        for mut c in codes {
            if c.tag == b'e' && c.i2 - c.i1 > nn {
                group.push(OpCode {
                    i2: c.i2.min(c.i1 + n),
                    j2: c.j2.min(c.j1 + n),
                    ..c
                });
                groups.push(std::mem::take(&mut group));
                c.i1 = c.i1.max(c.i2.saturating_sub(n));
                c.j1 = c.j1.max(c.j2.saturating_sub(n));
            }
            group.push(c);
        }
        // A group of only equal lines shows no change.
        if !group.is_empty() && (group.len() != 1 || group[0].tag != b'e') {
            groups.push(group);
        }
        groups
    }
}

/// `formatRangeUnified`.
fn unified_range(start: usize, stop: usize) -> String {
    let beginning = start + 1;
    match stop - start {
        1 => beginning.to_string(),
        0 => format!("{},0", beginning - 1),
        length => format!("{beginning},{length}"),
    }
}

/// `difflib.GetUnifiedDiffString` of two texts without file names: hunks only.
fn unified_diff(a: &str, b: &str, context: usize) -> String {
    let (a, b) = (split_lines(a), split_lines(b));
    let matcher = Matcher::new(&a, &b);
    let mut out = String::new();
    for group in matcher.grouped_opcodes(context) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            unified_range(first.i1, last.i2),
            unified_range(first.j1, last.j2)
        ));
        for c in &group {
            if c.tag == b'e' {
                for line in &a[c.i1..c.i2] {
                    out.push(' ');
                    out.push_str(line);
                }
                continue;
            }
            if c.tag == b'r' || c.tag == b'd' {
                for line in &a[c.i1..c.i2] {
                    out.push('-');
                    out.push_str(line);
                }
            }
            if c.tag == b'r' || c.tag == b'i' {
                for line in &b[c.j1..c.j2] {
                    out.push('+');
                    out.push_str(line);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    /// A defaulted ephemeral container, as stored.
    fn debugger() -> Value {
        json!({"name": "debugger", "image": "busybox:1.36", "command": ["sh"],
            "env": [{"name": "A", "value": "b"}],
            "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
            "resources": {}, "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
            "stdin": true, "targetContainerName": "main"})
    }

    fn pod(ephemeral: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "setup", "image": "x"}],
            "containers": [{"name": "main", "image": "x"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "ephemeralContainers": ephemeral}})
    }

    #[test]
    fn a_change_is_shown_as_kube_apiserver_shows_it() {
        // Answered by kube-apiserver v1.34.4 to the same change.
        let expected = r#"@@ -1,18 +1,36 @@
 {
  "Name": "debugger",
- "Image": "busybox:1.36",
+ "Image": "busybox:1.37",
  "Command": [
-  "sh"
+  "sh",
+  "-c",
+  "echo \u003chi\u003e"
  ],
- "Args": null,
+ "Args": [
+  "x"
+ ],
  "WorkingDir": "",
  "Ports": null,
  "EnvFrom": null,
  "Env": [
   {
    "Name": "A",
-   "Value": "b",
+   "Value": "c",
    "ValueFrom": null
+  },
+  {
+   "Name": "B",
+   "Value": "",
+   "ValueFrom": {
+    "FieldRef": {
+     "APIVersion": "v1",
+     "FieldPath": "metadata.name"
+    },
+    "ResourceFieldRef": null,
+    "ConfigMapKeyRef": null,
+    "SecretKeyRef": null,
+    "FileKeyRef": null
+   }
   }
  ],
  "Resources": {
@@ -23,7 +41,17 @@
  "ResizePolicy": null,
  "RestartPolicy": null,
  "RestartPolicyRules": null,
- "VolumeMounts": null,
+ "VolumeMounts": [
+  {
+   "Name": "scratch",
+   "ReadOnly": false,
+   "RecursiveReadOnly": null,
+   "MountPath": "/s",
+   "SubPath": "",
+   "MountPropagation": null,
+   "SubPathExpr": ""
+  }
+ ],
  "VolumeDevices": null,
  "LivenessProbe": null,
  "ReadinessProbe": null,
@@ -42,7 +70,7 @@
   "Privileged": null,
   "SELinuxOptions": null,
   "WindowsOptions": null,
-  "RunAsUser": null,
+  "RunAsUser": 0,
   "RunAsGroup": null,
   "RunAsNonRoot": null,
   "ReadOnlyRootFilesystem": null,
@@ -51,8 +79,8 @@
   "SeccompProfile": null,
   "AppArmorProfile": null
  },
- "Stdin": true,
+ "Stdin": false,
  "StdinOnce": false,
- "TTY": false,
- "TargetContainerName": "main"
+ "TTY": true,
+ "TargetContainerName": "setup"
 }
"#;
        let mut changed = debugger();
        changed["image"] = json!("busybox:1.37");
        changed["command"] = json!(["sh", "-c", "echo <hi>"]);
        changed["args"] = json!(["x"]);
        changed["env"] = json!([{"name": "A", "value": "c"},
            {"name": "B", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}]);
        changed["securityContext"]["runAsUser"] = json!(0);
        changed["stdin"] = json!(false);
        changed["tty"] = json!(true);
        changed["targetContainerName"] = json!("setup");
        changed["volumeMounts"] = json!([{"name": "scratch", "mountPath": "/s"}]);
        assert_eq!(diff(&debugger(), &changed), expected);
    }

    #[test]
    fn an_unchanged_container_has_no_diff_and_an_empty_list_equals_none() {
        assert_eq!(diff(&debugger(), &debugger()), "");
        let mut with_empty = debugger();
        with_empty["args"] = json!([]);
        assert!(same(&debugger(), &with_empty));
    }

    #[test]
    fn go_json_writes_every_field_of_the_internal_type() {
        let text = go_json(&json!({"name": "x", "image": "y"}));
        let keys: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(" \""))
            .map(|l| l.trim().split('"').nth(1).unwrap())
            .collect();
        assert_eq!(keys.len(), 26, "{text}");
        assert_eq!(keys.first(), Some(&"Name"));
        assert_eq!(keys.last(), Some(&"TargetContainerName"));
        assert!(
            text.contains("\"Resources\": {\n  \"Limits\": null,"),
            "{text}"
        );
    }

    #[test]
    fn existing_containers_may_be_neither_removed_nor_changed() {
        let old = pod(json!([debugger()]));
        assert!(validate_update(&old, &old).is_empty());
        let removed = pod(json!([]));
        assert_eq!(
            rendered(&validate_update(&removed, &old)),
            vec![
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed\n"
            ]
        );
        let mut changed = debugger();
        changed["image"] = json!("busybox:1.37");
        let causes = validate_update(&pod(json!([changed])), &old);
        assert_eq!(causes.len(), 1);
        assert!(
            causes[0].message.starts_with(
                "existing ephemeral containers \"debugger\" may not be changed\n@@ -1,6 +1,6 @@\n {\n  \"Name\": \"debugger\",\n- \"Image\": \"busybox:1.36\",\n+ \"Image\": \"busybox:1.37\",\n"
            ),
            "{}",
            causes[0].message
        );
    }

    #[test]
    fn a_mirror_pod_refuses_them_with_one_cause() {
        let mut old = pod(json!([]));
        old["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "x"});
        let new = pod(json!([{"name": "Bad_Name", "image": "busybox"}]));
        assert_eq!(
            rendered(&validate_update(&new, &old)),
            vec!["[]: Forbidden: static pods do not support ephemeral containers"]
        );
    }

    #[test]
    fn names_targets_and_policies_are_checked_in_kube_apiserver_s_order() {
        let spec = pod(json!([
            {"name": "Bad_Name", "image": " busybox ", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"},
            {"name": "noimage", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"},
            {"name": "policies", "image": "busybox", "terminationMessagePolicy": "Sometimes", "imagePullPolicy": "Sometimes"},
            {"name": "main", "image": "busybox", "targetContainerName": "nope", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"},
        ]));
        assert_eq!(
            rendered(&validate_containers(&spec["spec"])),
            vec![
                "spec.ephemeralContainers[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.ephemeralContainers[0].image: Invalid value: \" busybox \": must not have leading or trailing whitespace",
                "spec.ephemeralContainers[1].image: Required value",
                "spec.ephemeralContainers[2].terminationMessagePolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"FallbackToLogsOnError\"",
                "spec.ephemeralContainers[2].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
                "spec.ephemeralContainers[3].name: Duplicate value: \"main\"",
                "spec.ephemeralContainers[3].targetContainerName: Not found: \"nope\"",
            ]
        );
    }

    #[test]
    fn ports_probes_resources_lifecycle_and_sub_paths_are_forbidden() {
        let spec = pod(json!([{"name": "forbidden", "image": "busybox",
            "terminationMessagePolicy": "File", "imagePullPolicy": "Always",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "resources": {"limits": {"cpu": "1"}},
            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
            "livenessProbe": {"exec": {"command": ["true"]}},
            "readinessProbe": {"exec": {"command": ["true"]}},
            "startupProbe": {"exec": {"command": ["true"]}},
            "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
            "volumeMounts": [{"name": "scratch", "mountPath": "/s", "subPath": "x"},
                {"name": "scratch", "mountPath": "/t", "subPathExpr": "$(A)"}]}]));
        let fields: Vec<String> = validate_containers(&spec["spec"])
            .into_iter()
            .map(|c| {
                assert_eq!(c.message, "cannot be set for an Ephemeral Container");
                c.field
            })
            .collect();
        assert_eq!(
            fields,
            [
                "ports",
                "resources",
                "resizePolicy",
                "livenessProbe",
                "readinessProbe",
                "startupProbe",
                "lifecycle",
                "volumeMounts[0].subPath",
                "volumeMounts[1].subPathExpr"
            ]
            .map(|f| format!("spec.ephemeralContainers[0].{f}"))
        );
        // An empty resources struct is Go's zero value: allowed.
        let plain = pod(
            json!([{"name": "plain", "image": "busybox", "resources": {},
            "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}]),
        );
        assert!(validate_containers(&plain["spec"]).is_empty());
    }

    #[test]
    fn a_new_pod_may_not_have_ephemeral_containers() {
        assert!(validate_create(&pod(json!(null))).is_empty());
        let born = pod(json!([{"name": "main", "image": "busybox",
            "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}]));
        assert_eq!(
            rendered(&validate_create(&born)),
            vec![
                "spec.ephemeralContainers[0].name: Duplicate value: \"main\"",
                "spec.ephemeralContainers: Forbidden: cannot be set on create",
            ]
        );
    }

    #[test]
    fn an_update_keeps_everything_of_the_live_pod_but_the_ephemeral_containers() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "b"}, "resourceVersion": "7", "generation": 1},
            "spec": {"containers": [{"name": "main", "image": "x"}]}, "status": {"phase": "Pending"}});
        let new = json!({"metadata": {"name": "p", "labels": {"sneaky": "yes"}, "resourceVersion": "6"},
            "spec": {"containers": [{"name": "main", "image": "y"}], "activeDeadlineSeconds": 5,
                "ephemeralContainers": [{"name": "d", "image": "busybox", "restartPolicy": "Always"}]},
            "status": {"phase": "Running"}});
        let mut prepared = prepare_update(&old, &new);
        drop_disabled_fields(&mut prepared);
        assert_eq!(
            prepared,
            json!({"metadata": {"name": "p", "labels": {"a": "b"}, "resourceVersion": "6", "generation": 1},
                "spec": {"containers": [{"name": "main", "image": "x"}],
                    "ephemeralContainers": [{"name": "d", "image": "busybox"}]},
                "status": {"phase": "Pending"}})
        );
    }

    #[test]
    fn unified_ranges_and_groups_follow_difflib() {
        assert_eq!(unified_range(0, 1), "1");
        assert_eq!(unified_range(3, 3), "3,0");
        assert_eq!(unified_range(0, 6), "1,6");
        let a: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let b = a.replace("5\n", "five\n").replace("18\n", "");
        assert_eq!(
            unified_diff(&a, &b, 3),
            // What Python's difflib.unified_diff makes of the same lines.
            "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n@@ -12,10 +12,9 @@\n 12\n 13\n 14\n-15\n+1five\n 16\n 17\n-18\n 19\n 20\n \n"
        );
    }
}
