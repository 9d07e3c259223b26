//! The three classic PATCH bodies of the kube-apiserver: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.
//!
//! Strategic merge patch follows the server side of apimachinery's `pkg/util/strategicpatch`
//! (`StrategicMergeMapPatch`), with the `patchMergeKey`/`patchStrategy` tags of `k8s.io/api`
//! replaced by the path table in [`list_strategy`].
//!
//! # Caveats
//!
//! - There is no schema: fields unknown to a kind are merged like any other map field, and list
//!   strategies are known only for the lists in [`list_strategy`]'s table. Every other list is
//!   replaced, as it is for lists without tags upstream.
//! - `$patch: delete` inside a map removes that map's key. Upstream leaves an empty map that is
//!   then dropped or kept by the Go decoder, depending on the field's type.
//! - A map or list that appears in the patch but not in the original is added with its directives
//!   applied and its nulls dropped (upstream copies it as is and relies on decoding to drop them).
//! - `$deleteFromPrimitiveList` on a list the original lacks is a no-op.
//! - Integer and floating-point numbers count as one type when element types are compared.
//!
//! JSON patch is not RFC 6902 as written but what kube-apiserver runs, evanphx/json-patch
//! v4.12.0 (`gopkg.in/evanphx/json-patch.v4`), behind the strict decoding of the default
//! `fieldValidation=Warn` (apiserver `endpoints/handlers/patch.go`). Its departures from the RFC
//! are kept: `replace` of a missing object key adds it, `copy` from a missing key copies `null`,
//! a missing `value` is `null`, a missing key tests equal to `null`, negative array indices
//! count from the end, and the text before a path's first `/` is ignored. Every operation that
//! fails is answered with the same generic 422.
//!
//! Where that library dereferences a missing value (a `test` without `value` of a missing key,
//! a `replace` of the whole document without `value`, a comparison with a `null` list item),
//! the real server aborts the request and the client sees the connection reset; the simulator
//! answers 500 instead ([`Error::JsonPatchAborted`]).

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::names::go_quote;
use super::status::ApiError;

/// The most operations a JSON patch may have (`maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Which list merge strategy applies at a path inside an object of a built-in kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch's list replaces the original list (no `patchStrategy` tag).
    Replace,
    /// Elements are maps identified by the given merge key and merged element-wise.
    MergeByKey(&'static str),
    /// Elements are primitives; the patch's elements are added to the original's (a set union).
    MergePrimitives,
}

/// Errors of the three patch types.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The strategic merge patch body is not a JSON object.
    #[error("json: cannot unmarshal {found} into Go value of type map[string]interface {{}}")]
    PatchNotAnObject {
        /// The JSON type of the body, as Go names it ("array", "string", "number", "bool").
        found: &'static str,
    },
    /// The object being patched is not a JSON object.
    #[error("invalid json document")]
    InvalidDocument,
    /// A list element (or a `$setElementOrder` entry) lacks the list's merge key.
    #[error("map: {map} does not contain declared merge key: {key}")]
    MissingMergeKey {
        /// The offending element, printed the way Go prints a map.
        map: String,
        /// The merge key of the list.
        key: String,
    },
    /// A `$patch` directive has a value other than `replace`, `delete` (or, in a list, `merge`).
    #[error("unknown patch type: {directive} in map: {map}")]
    UnknownPatchType {
        /// The directive's value.
        directive: String,
        /// The map holding the directive, printed the way Go prints a map.
        map: String,
    },
    /// A list element carries `$patch: merge`, which the server does not support.
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList,
    /// `$retainKeys` is not a list, or the patch sets a key the list does not retain.
    #[error("invalid patch format of retainKeys")]
    BadRetainKeys,
    /// A `$setElementOrder` directive is malformed (no list name or not a list).
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrder,
    /// A `$deleteFromPrimitiveList` directive is malformed (no list name or not a list).
    #[error("invalid patch format of primitive list")]
    BadPrimitiveList,
    /// The patch list contains elements in an order that contradicts its `$setElementOrder` list.
    // Upstream's wording, capital letter included.
    #[error("The order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}\n")]
    SetElementOrderMismatch {
        /// The patch list, printed the way Go prints it.
        patch: String,
        /// The `$setElementOrder` list, printed the way Go prints it.
        order: String,
    },
    /// A value that must be a list (the original or patch value of a list field) is not one.
    #[error("expected a []interface {{}}, but received a {found}")]
    ExpectedList {
        /// The Go type name of the value found.
        found: &'static str,
    },
    /// An element of a list of maps (or of its `$setElementOrder` list) is not a map.
    #[error("expected a map[string]interface {{}}, but received a {found}")]
    ExpectedMap {
        /// The Go type name of the value found.
        found: &'static str,
    },
    /// A list holds lists, which strategic merge patch does not support.
    #[error("lists of lists are not supported")]
    ListOfLists,
    /// The elements of the original and patch lists are of different types.
    #[error("list element types are not identical: {lists}")]
    MixedElementTypes {
        /// The lists involved, printed the way Go prints them.
        lists: String,
    },
    /// A list of maps has no merge key but the patch asks for merging (e.g. maps in a primitive list).
    #[error("cannot merge lists without merge key for type {element}")]
    NoMergeKey {
        /// The Go type name of the elements.
        element: &'static str,
    },
    /// A JSON merge patch body that is not an object (`null` is refused by the library itself).
    #[error(
        "error decoding patch: json: cannot unmarshal {found} into Go value of type map[string]interface {{}}"
    )]
    MergePatchNotAnObject {
        /// The JSON type of the body, as Go names it ("array", "string", "number", "bool").
        found: &'static str,
    },
    /// A `null` JSON merge patch (`jsonpatch.ErrBadJSONPatch`).
    #[error("Invalid JSON Patch")]
    NullMergePatch,
    /// The JSON patch body is not a list of operations with string `op`, `path` and `from`,
    /// worded as Go's `encoding/json` words it.
    #[error("error decoding patch: {0}")]
    UndecodableJsonPatch(String),
    /// More operations than [`MAX_JSON_PATCH_OPERATIONS`].
    #[error(
        "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {0}"
    )]
    TooManyJsonPatchOperations(usize),
    /// A JSON patch operation failed: a `test` that did not match, a path that does not exist,
    /// an unknown `op`, ... The message is the library's; clients only see a generic 422.
    #[error("{0}")]
    JsonPatchFailed(String),
    /// The real server's json-patch library dereferences a missing value and the request is
    /// aborted (see the module documentation).
    #[error("json patch: {0}: kube-apiserver aborts this request")]
    JsonPatchAborted(&'static str),
}

impl Error {
    /// The HTTP status the real server answers for this error (see [`ApiError::from`]).
    pub fn status_code(&self) -> u16 {
        ApiError::from(self).code()
    }
}

/// The `Status` the real server answers: strategic merge patch errors as
/// `interpretStrategicMergePatchError` sorts them (400 for malformed patches, a generic 422 for
/// lists of lists, and the rest, plain Go errors, 500 without a reason); JSON patch errors as
/// `applyJSPatch` answers them.
impl From<&Error> for ApiError {
    fn from(e: &Error) -> Self {
        match e {
            Error::PatchNotAnObject { .. }
            | Error::InvalidDocument
            | Error::BadRetainKeys
            | Error::BadSetElementOrder
            | Error::BadPrimitiveList
            | Error::MergePatchNotAnObject { .. }
            | Error::NullMergePatch
            | Error::UndecodableJsonPatch(_) => ApiError::BadRequest(e.to_string()),
            Error::ListOfLists | Error::JsonPatchFailed(_) => ApiError::Generic { code: 422 },
            Error::TooManyJsonPatchOperations(_) => ApiError::Custom {
                code: 413,
                reason: "RequestEntityTooLarge".into(),
                message: e.to_string(),
            },
            Error::JsonPatchAborted(_) => ApiError::Internal(e.to_string()),
            Error::MissingMergeKey { .. }
            | Error::UnknownPatchType { .. }
            | Error::MergeDirectiveInList
            | Error::SetElementOrderMismatch { .. }
            | Error::ExpectedList { .. }
            | Error::ExpectedMap { .. }
            | Error::MixedElementTypes { .. }
            | Error::NoMergeKey { .. } => ApiError::Unclassified(e.to_string()),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::from(&e)
    }
}

/// Kinds whose strategic-merge metadata is known (the built-in kinds a cluster serves).
const BUILTIN_KINDS: &[&str] = &[
    "APIService",
    "Binding",
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "ComponentStatus",
    "ConfigMap",
    "ControllerRevision",
    "CronJob",
    "CustomResourceDefinition",
    "DaemonSet",
    "Deployment",
    "DeviceClass",
    "EndpointSlice",
    "Endpoints",
    "Event",
    "FlowSchema",
    "HorizontalPodAutoscaler",
    "IPAddress",
    "Ingress",
    "IngressClass",
    "Job",
    "Lease",
    "LimitRange",
    "MutatingWebhookConfiguration",
    "Namespace",
    "NetworkPolicy",
    "Node",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodDisruptionBudget",
    "PodTemplate",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "ReplicaSet",
    "ReplicationController",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceQuota",
    "ResourceSlice",
    "Role",
    "RoleBinding",
    "RuntimeClass",
    "Secret",
    "Service",
    "ServiceAccount",
    "ServiceCIDR",
    "StatefulSet",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
    "VolumeAttributesClass",
];

/// Where a kind keeps `ObjectMeta`s besides the root (pod and job templates).
fn template_meta_prefixes(kind: &str) -> &'static [&'static [&'static str]] {
    match kind {
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => &[&["spec", "template"]],
        "PodTemplate" => &[&["template"]],
        "CronJob" => &[
            &["spec", "jobTemplate"],
            &["spec", "jobTemplate", "spec", "template"],
        ],
        _ => &[],
    }
}

/// Where a kind keeps a `PodSpec`.
fn pod_spec_prefix(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Pod" => Some(&["spec"]),
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => Some(&["spec", "template", "spec"]),
        "PodTemplate" => Some(&["template", "spec"]),
        "CronJob" => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

/// The tagged lists of `PodSpec` and `Container`, by path relative to the pod spec.
fn pod_spec_list(rest: &[&str]) -> Option<ListStrategy> {
    use ListStrategy::MergeByKey;
    let is_container_list = |name: &str| {
        matches!(
            name,
            "containers" | "initContainers" | "ephemeralContainers"
        )
    };
    match rest {
        [list] if is_container_list(list) => Some(MergeByKey("name")),
        [list, field] if is_container_list(list) => match *field {
            "env" => Some(MergeByKey("name")),
            "ports" => Some(MergeByKey("containerPort")),
            "volumeMounts" => Some(MergeByKey("mountPath")),
            "volumeDevices" => Some(MergeByKey("devicePath")),
            _ => None,
        },
        ["volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates"] => {
            Some(MergeByKey("name"))
        }
        ["hostAliases"] => Some(MergeByKey("ip")),
        ["topologySpreadConstraints"] => Some(MergeByKey("topologyKey")),
        _ => None,
    }
}

/// Looks up the strategic-merge strategy of the list at `path` (field names from the object root, list indices omitted,
/// e.g. `["spec","template","spec","containers"]`) in an object of `kind` ("Pod", "Deployment", "ReplicaSet", ...).
///
/// Unknown kinds (custom resources) get [`ListStrategy::Replace`] everywhere.
pub fn list_strategy(kind: &str, path: &[&str]) -> ListStrategy {
    use ListStrategy::{MergeByKey, MergePrimitives, Replace};
    if !BUILTIN_KINDS.contains(&kind) {
        return Replace;
    }
    let root: &[&str] = &[];
    let meta_prefixes = std::iter::once(root).chain(template_meta_prefixes(kind).iter().copied());
    for prefix in meta_prefixes {
        match path.strip_prefix(prefix) {
            Some(["metadata", "finalizers"]) => return MergePrimitives,
            Some(["metadata", "ownerReferences"]) => return MergeByKey("uid"),
            _ => {}
        }
    }
    if let Some(rest) = pod_spec_prefix(kind).and_then(|prefix| path.strip_prefix(prefix))
        && let Some(strategy) = pod_spec_list(rest)
    {
        return strategy;
    }
    match (kind, path) {
        (_, ["status", "conditions"]) => MergeByKey("type"),
        ("Node", ["status", "addresses"]) => MergeByKey("type"),
        ("Pod", ["status", "podIPs" | "hostIPs"]) => MergeByKey("ip"),
        ("Service", ["spec", "ports"]) => MergeByKey("port"),
        _ => Replace,
    }
}

/// How a strategic merge patch treats the list at `path`: as [`list_strategy`] says (the
/// list's type, which field management follows too), except where the Go type's list is
/// keyed (`+listType=map`) but has no patch strategy, so a strategic merge patch replaces
/// it: a CertificateSigningRequest's conditions (kube-apiserver then refuses a patch that
/// drops the approval).
pub fn patch_strategy(kind: &str, path: &[&str]) -> ListStrategy {
    match (kind, path) {
        ("CertificateSigningRequest", ["status", "conditions"]) => ListStrategy::Replace,
        _ => list_strategy(kind, path),
    }
}

/// Applies an RFC 7386 JSON merge patch: `null` deletes a key, objects merge, everything else (lists included) replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Checks a JSON merge patch body as the handler decodes it: an object, or refused.
///
/// # Errors
/// [`Error::MergePatchNotAnObject`] or [`Error::NullMergePatch`] (HTTP 400).
pub fn check_merge_patch(patch: &Value) -> Result<(), Error> {
    match patch {
        Value::Object(_) => Ok(()),
        Value::Null => Err(Error::NullMergePatch),
        other => Err(Error::MergePatchNotAnObject {
            found: go_json_type(other),
        }),
    }
}

/// Applies a JSON patch as kube-apiserver does (see the module documentation). The operations
/// apply all or nothing: on error `target` is left as it was. A `null` body is an empty patch.
///
/// # Errors
///
/// [`Error::UndecodableJsonPatch`] for a body that is not a list of operations (HTTP 400),
/// [`Error::TooManyJsonPatchOperations`] (413), [`Error::JsonPatchFailed`] when an operation
/// fails (a generic 422), [`Error::JsonPatchAborted`] where the real server aborts.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), Error> {
    let operations: &[Value] = match patch {
        Value::Null => &[],
        Value::Array(items) => items,
        other => {
            return Err(Error::UndecodableJsonPatch(format!(
                "json: cannot unmarshal {} into Go value of type []handlers.jsonPatchOp",
                go_json_type(other)
            )));
        }
    };
    if let Some(message) = operations.iter().find_map(strict_decoding_error) {
        return Err(Error::UndecodableJsonPatch(message));
    }
    if operations.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(Error::TooManyJsonPatchOperations(operations.len()));
    }
    // Work on a copy and swap it in on success: a failed patch changes nothing.
    let mut doc = target.clone();
    for op in operations {
        apply_operation(&mut doc, op)?;
    }
    *target = doc;
    Ok(())
}

/// The first error of decoding one operation into the handler's `jsonPatchOp` struct (`op`,
/// `path` and `from` are strings; `null` leaves a field empty), as `encoding/json` words it.
fn strict_decoding_error(op: &Value) -> Option<String> {
    let fields = match op {
        Value::Null => return None,
        Value::Object(fields) => fields,
        other => {
            return Some(format!(
                "json: cannot unmarshal {} into Go value of type handlers.jsonPatchOp",
                go_json_type(other)
            ));
        }
    };
    ["from", "op", "path"]
        .into_iter()
        .find_map(|name| match fields.get(name) {
            None | Some(Value::Null | Value::String(_)) => None,
            Some(other) => Some(format!(
                "json: cannot unmarshal {} into Go struct field jsonPatchOp.{name} of type string",
                go_json_type(other)
            )),
        })
}

/// A string field of an operation (`Operation.Path`, `Operation.From`).
fn op_string<'v>(op: &'v Value, field: &str, what: &str) -> Result<&'v str, Error> {
    match op.get(field) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(Error::JsonPatchFailed(format!(
            "{what} operation failed to decode {field}"
        ))),
    }
}

/// `Operation.value()`: a missing or `null` value is Go's nil node, `null` once written.
fn op_value(op: &Value) -> Option<&Value> {
    op.get("value")
}

fn apply_operation(doc: &mut Value, op: &Value) -> Result<(), Error> {
    let kind = op.get("op").and_then(Value::as_str).unwrap_or("unknown");
    match kind {
        "add" => {
            let path = op_string(op, "path", "add")?;
            let value = op_value(op).cloned().unwrap_or(Value::Null);
            let (container, key) = find_container(doc, path).ok_or_else(|| {
                failed(format!(
                    "add operation does not apply: doc is missing path: \"{path}\""
                ))
            })?;
            container_add(container, &key, value)
                .map_err(|e| failed(format!("error in add for path: '{path}': {e}")))
        }
        "remove" => {
            let path = op_string(op, "path", "remove")?;
            let (container, key) = find_container(doc, path).ok_or_else(|| {
                failed(format!(
                    "remove operation does not apply: doc is missing path: \"{path}\""
                ))
            })?;
            container_remove(container, &key)
                .map(drop)
                .map_err(|e| failed(format!("error in remove for path: '{path}': {e}")))
        }
        "replace" => {
            let path = op_string(op, "path", "replace")?;
            if path.is_empty() {
                return match op_value(op) {
                    None => Err(Error::JsonPatchAborted(
                        "a replace of the document without a value",
                    )),
                    // An object or list replaces the document; a scalar or null is ignored
                    // (the library wraps a nil error, which is no error at all).
                    Some(v @ (Value::Object(_) | Value::Array(_))) => {
                        *doc = v.clone();
                        Ok(())
                    }
                    Some(_) => Ok(()),
                };
            }
            let value = op_value(op).cloned().unwrap_or(Value::Null);
            let (container, key) = find_container(doc, path).ok_or_else(|| {
                failed(format!(
                    "replace operation does not apply: doc is missing path: {path}"
                ))
            })?;
            // An object never misses a key here: the library's get answers nil, and set adds it.
            container_get(container, &key).map_err(|_| {
                failed(format!(
                    "replace operation does not apply: doc is missing key: {path}"
                ))
            })?;
            container_set(container, &key, value);
            Ok(())
        }
        "move" => {
            let from = op_string(op, "from", "move")?;
            let (container, key) = find_container(doc, from).ok_or_else(|| {
                failed(format!(
                    "move operation does not apply: doc is missing from path: {from}"
                ))
            })?;
            container_get(container, &key)
                .map_err(|e| failed(format!("error in move for path: '{key}': {e}")))?;
            let value = container_remove(container, &key)
                .map_err(|e| failed(format!("error in move for path: '{key}': {e}")))?;
            let path = op_string(op, "path", "move")?;
            let (container, key) = find_container(doc, path).ok_or_else(|| {
                failed(format!(
                    "move operation does not apply: doc is missing destination path: {path}"
                ))
            })?;
            container_add(container, &key, value)
                .map_err(|e| failed(format!("error in move for path: '{path}': {e}")))
        }
        "copy" => {
            let from = op_string(op, "from", "copy")?;
            let (container, key) = find_container(doc, from).ok_or_else(|| {
                failed(format!(
                    "copy operation does not apply: doc is missing from path: {from}"
                ))
            })?;
            let value = container_get(container, &key)
                .map_err(|e| failed(format!("error in copy for from: '{from}': {e}")))?
                .cloned()
                .unwrap_or(Value::Null);
            let path = op_string(op, "path", "copy")?;
            let (container, key) = find_container(doc, path).ok_or_else(|| {
                failed(format!(
                    "copy operation does not apply: doc is missing destination path: {path}"
                ))
            })?;
            container_add(container, &key, value)
                .map_err(|e| failed(format!("error while adding value during copy: {e}")))
        }
        "test" => {
            let path = op_string(op, "path", "test")?;
            let expected = op_value(op);
            let matches = if path.is_empty() {
                let expected = expected.ok_or(Error::JsonPatchAborted(
                    "a test of the document without a value",
                ))?;
                lazy_equal(doc, expected)?
            } else {
                let (container, key) = find_container(doc, path).ok_or_else(|| {
                    failed(format!(
                        "test operation does not apply: is missing path: {path}"
                    ))
                })?;
                let actual = container_get(container, &key)
                    .map_err(|e| failed(format!("error in test for path: '{path}': {e}")))?;
                match (actual, expected) {
                    (None, None) => {
                        return Err(Error::JsonPatchAborted(
                            "a test of a missing value without a value",
                        ));
                    }
                    (None, Some(expected)) => expected.is_null(),
                    (Some(_), None) => false,
                    (Some(actual), Some(expected)) => lazy_equal(actual, expected)?,
                }
            };
            if matches {
                Ok(())
            } else {
                Err(failed(format!("testing value {path} failed: test failed")))
            }
        }
        other => Err(failed(format!("Unexpected kind: {other}"))),
    }
}

fn failed(message: String) -> Error {
    Error::JsonPatchFailed(message)
}

/// `lazyNode.equal`: structural equality of a document value (never `null`) with a patch value;
/// a `null` list item met on the way is the library's nil dereference.
fn lazy_equal(actual: &Value, expected: &Value) -> Result<bool, Error> {
    const ABORT: Error = Error::JsonPatchAborted("a comparison with a null list item");
    match (actual, expected) {
        (Value::Object(a), Value::Object(b)) => {
            if a.len() != b.len() {
                return Ok(false);
            }
            for (k, v) in a {
                let Some(w) = b.get(k) else {
                    return Ok(false);
                };
                match (v.is_null(), w.is_null()) {
                    (true, true) => {}
                    (false, false) => {
                        if !lazy_equal(v, w)? {
                            return Ok(false);
                        }
                    }
                    _ => return Ok(false),
                }
            }
            Ok(true)
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                return Ok(false);
            }
            for (v, w) in a.iter().zip(b) {
                if v.is_null() || w.is_null() {
                    return Err(ABORT);
                }
                if !lazy_equal(v, w)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        (Value::Object(_) | Value::Array(_), _) => Ok(false),
        // Scalars compare as compact JSON text: 1 and 1.0 differ, as their texts do.
        (a, b) => Ok(!b.is_null() && a == b),
    }
}

/// RFC 6901 unescaping (`~1` then `~0`).
fn decode_patch_key(key: &str) -> String {
    key.replace("~1", "/").replace("~0", "~")
}

/// `findObject`: the container holding a path's last segment, and that segment. The text before
/// the first `/` is skipped; every segment between must lead to an object or a list.
fn find_container<'v>(doc: &'v mut Value, path: &str) -> Option<(&'v mut Value, String)> {
    let split: Vec<&str> = path.split('/').collect();
    if split.len() < 2 {
        return None;
    }
    let key = decode_patch_key(split[split.len() - 1]);
    let mut current = doc;
    for part in &split[1..split.len() - 1] {
        let next = container_get(current, &decode_patch_key(part)).ok()??;
        if !(next.is_object() || next.is_array()) {
            return None;
        }
        current = next;
    }
    Some((current, key))
}

/// Go's `strconv.Atoi`.
fn atoi(key: &str) -> Result<i64, String> {
    let digits = key.strip_prefix(['+', '-']).unwrap_or(key);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            go_quote(key)
        ));
    }
    key.parse::<i64>().map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: value out of range",
            go_quote(key)
        )
    })
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: invalid index referenced")
}

/// A list index as `partialArray.get`/`remove` resolve it (negative counts from the end).
fn resolve_index(key: &str, len: usize) -> Result<usize, String> {
    let idx = atoi(key)?;
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let resolved = if idx < 0 { idx + len } else { idx };
    if idx < -len || resolved >= len {
        return Err(invalid_index(idx));
    }
    usize::try_from(resolved).map_err(|_| invalid_index(idx))
}

/// `container.get`: an object's key (`None` when missing or `null`), a list's item.
fn container_get<'v>(container: &'v mut Value, key: &str) -> Result<Option<&'v mut Value>, String> {
    match container {
        Value::Object(map) => Ok(map.get_mut(key).filter(|v| !v.is_null())),
        Value::Array(items) => {
            let i = resolve_index(key, items.len())?;
            Ok(items.get_mut(i).filter(|v| !v.is_null()))
        }
        _ => Err("unknown object type".into()),
    }
}

/// `container.set`, only called on a key `container_get` accepted.
fn container_set(container: &mut Value, key: &str, value: Value) {
    match container {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        Value::Array(items) => {
            if let Some(slot) = resolve_index(key, items.len())
                .ok()
                .and_then(|i| items.get_mut(i))
            {
                *slot = value;
            }
        }
        _ => {}
    }
}

/// `container.add`: sets an object's key; inserts into a list (`-` appends, negative counts
/// from the end of the longer list).
fn container_add(container: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match container {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            let idx = atoi(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let size = i64::try_from(items.len()).unwrap_or(i64::MAX) + 1;
            if idx >= size || idx < -size {
                return Err(invalid_index(idx));
            }
            let at = if idx < 0 { idx + size } else { idx };
            let at = usize::try_from(at).map_err(|_| invalid_index(idx))?;
            items.insert(at, value);
            Ok(())
        }
        _ => Err("unknown object type".into()),
    }
}

/// `container.remove`: the removed value (`null` for a key that held it).
fn container_remove(container: &mut Value, key: &str) -> Result<Value, String> {
    match container {
        Value::Object(map) => map
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: missing value")),
        Value::Array(items) => {
            let i = resolve_index(key, items.len())?;
            Ok(items.remove(i))
        }
        _ => Err("unknown object type".into()),
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder";
const DELETE_PRIMITIVES_PREFIX: &str = "$deleteFromPrimitiveList";

/// Applies a strategic merge patch to `original`, an object of `kind`, and returns the patched object.
///
/// Maps merge recursively and `null` deletes a key; lists merge according to [`list_strategy`].
/// The directives `$patch` (`delete`, `replace`), `$retainKeys`, `$setElementOrder/<list>` and
/// `$deleteFromPrimitiveList/<list>` are honoured and never appear in the result.
///
/// A merged list is ordered like upstream orders it: by `$setElementOrder` when the patch has one;
/// otherwise the patch's elements follow the patch's order and keep their place among the original
/// elements, and an element new to the list goes right after the patch elements before it, ahead of
/// the remaining original elements (so a patch adding one container puts it first, as the real
/// server does, rather than appending it).
///
/// # Errors
///
/// A malformed patch: not an object, a list element without its merge key, a bad directive, a
/// `$setElementOrder` list that contradicts the patch list, ... The messages are the real
/// server's; [`Error::status_code`] tells which of 400 and 422 it answers.
pub fn strategic_merge_patch(original: &Value, patch: &Value, kind: &str) -> Result<Value, Error> {
    let original = match original {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        _ => return Err(Error::InvalidDocument),
    };
    let patch = match patch {
        Value::Object(map) => map,
        Value::Null => return Ok(Value::Object(original)),
        other => {
            return Err(Error::PatchNotAnObject {
                found: go_json_type(other),
            });
        }
    };
    let merger = Merger { kind };
    let mut path = Vec::new();
    let merged = merger.merge_map(original, patch, &mut path)?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

/// The strategic merge of one object of a given kind; `path` holds field names from the root.
struct Merger<'a> {
    kind: &'a str,
}

impl Merger<'_> {
    fn strategy(&self, path: &[String]) -> ListStrategy {
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        patch_strategy(self.kind, &names)
    }

    /// Merges `patch` into `original`; `None` means the map is deleted (`$patch: delete`).
    fn merge_map(
        &self,
        mut original: Map<String, Value>,
        patch: &Map<String, Value>,
        path: &mut Vec<String>,
    ) -> Result<Option<Map<String, Value>>, Error> {
        if let Some(directive) = patch.get(DIRECTIVE) {
            return match directive.as_str() {
                Some("replace") => {
                    let mut rest = patch.clone();
                    rest.remove(DIRECTIVE);
                    self.merge_map(Map::new(), &rest, path)
                }
                Some("delete") => Ok(None),
                _ => Err(Error::UnknownPatchType {
                    directive: go_format(directive),
                    map: go_format_map(patch),
                }),
            };
        }

        if let Some(retain) = patch.get(RETAIN_KEYS) {
            let Value::Array(retained) = retain else {
                return Err(Error::BadRetainKeys);
            };
            let retained: Vec<&str> = retained.iter().filter_map(Value::as_str).collect();
            for (key, value) in patch {
                let exempt = key == RETAIN_KEYS
                    || value.is_null()
                    || key.starts_with(DELETE_PRIMITIVES_PREFIX)
                    || key.starts_with(SET_ORDER_PREFIX);
                if !exempt && !retained.contains(&key.as_str()) {
                    return Err(Error::BadRetainKeys);
                }
            }
            original.retain(|key, _| retained.contains(&key.as_str()));
        }

        // `$setElementOrder/<list>` merges its list (if the patch has it) and then orders it.
        let mut ordered_lists: Vec<&str> = Vec::new();
        for (key, order) in patch {
            let Some(rest) = key.strip_prefix(SET_ORDER_PREFIX) else {
                continue;
            };
            let name = rest.strip_prefix('/').ok_or(Error::BadSetElementOrder)?;
            let Value::Array(order) = order else {
                return Err(Error::BadSetElementOrder);
            };
            path.push(name.to_owned());
            let strategy = self.strategy(path);
            let original_list = match original.get(name) {
                None | Some(Value::Null) => None,
                Some(Value::Array(items)) => Some(items.clone()),
                Some(other) => return Err(expected_list(other)),
            };
            let patch_list = match patch.get(name) {
                None => None,
                Some(Value::Array(items)) => Some(items),
                Some(other) => return Err(expected_list(other)),
            };
            let merge_key = match strategy {
                ListStrategy::MergeByKey(key) => Some(key),
                _ => None,
            };
            validate_set_order(patch_list.map(Vec::as_slice), order, merge_key)?;
            let merged = match (&original_list, patch_list) {
                (None, None) => {
                    path.pop();
                    continue;
                }
                (Some(items), None) => items.clone(),
                (None, Some(patch_items)) => self.materialize_list(patch_items, path)?,
                (Some(items), Some(patch_items)) => {
                    self.merge_list(items.clone(), patch_items, path)?
                }
            };
            let server_order = original_list.unwrap_or_default();
            let ordered = order_elements(merged, order, &server_order, merge_key)?;
            original.insert(name.to_owned(), Value::Array(ordered));
            ordered_lists.push(name);
            path.pop();
        }

        for (key, value) in patch {
            if key == DIRECTIVE
                || key == RETAIN_KEYS
                || key.starts_with(SET_ORDER_PREFIX)
                || ordered_lists.contains(&key.as_str())
            {
                continue;
            }
            if let Some(rest) = key.strip_prefix(DELETE_PRIMITIVES_PREFIX) {
                let name = rest.strip_prefix('/').ok_or(Error::BadPrimitiveList)?;
                let Value::Array(to_delete) = value else {
                    return Err(Error::BadPrimitiveList);
                };
                match original.get_mut(name) {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(items)) => items.retain(|item| !to_delete.contains(item)),
                    Some(other) => return Err(expected_list(other)),
                }
                continue;
            }
            if value.is_null() {
                original.remove(key);
                continue;
            }
            path.push(key.clone());
            let existing = original.remove(key);
            let merged = match (existing, value) {
                (Some(Value::Object(existing)), Value::Object(patch_map)) => self
                    .merge_map(existing, patch_map, path)?
                    .map(Value::Object),
                (Some(Value::Array(existing)), Value::Array(patch_items)) => Some(Value::Array(
                    self.merge_list(existing, patch_items, path)?,
                )),
                (_, patch_value) => self.materialize(patch_value, path)?,
            };
            if let Some(merged) = merged {
                original.insert(key.clone(), merged);
            }
            path.pop();
        }
        Ok(Some(original))
    }

    /// Merges two lists found at `path` according to the list's strategy.
    fn merge_list(
        &self,
        original: Vec<Value>,
        patch: &[Value],
        path: &mut Vec<String>,
    ) -> Result<Vec<Value>, Error> {
        match self.strategy(path) {
            ListStrategy::Replace => self.materialize_list(patch, path),
            ListStrategy::MergePrimitives => merge_primitive_list(original, patch),
            ListStrategy::MergeByKey(key) => self.merge_keyed_list(original, patch, key, path),
        }
    }

    /// Merges a list of maps identified by `key`, honouring `$patch` elements.
    fn merge_keyed_list(
        &self,
        original: Vec<Value>,
        patch: &[Value],
        key: &str,
        path: &mut Vec<String>,
    ) -> Result<Vec<Value>, Error> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        if element_kind(&[&original, patch])? != Some(ValueKind::Object) {
            return merge_primitive_list(original, patch);
        }
        let mut original = original;
        let mut plain: Vec<&Map<String, Value>> = Vec::new();
        let mut replace = false;
        for element in patch {
            let Value::Object(element) = element else {
                continue;
            };
            let Some(directive) = element.get(DIRECTIVE) else {
                plain.push(element);
                continue;
            };
            match directive.as_str() {
                Some("delete") => {
                    let Some(wanted) = element.get(key) else {
                        return Err(missing_merge_key(element, key));
                    };
                    original.retain(|item| item.get(key) != Some(wanted));
                }
                Some("replace") => replace = true,
                Some("merge") => return Err(Error::MergeDirectiveInList),
                _ => {
                    return Err(Error::UnknownPatchType {
                        directive: go_format(directive),
                        map: go_format_map(element),
                    });
                }
            }
        }
        if replace {
            let mut replaced = Vec::with_capacity(plain.len());
            for element in plain {
                if let Some(element) = self.merge_map(Map::new(), element, path)? {
                    replaced.push(Value::Object(element));
                }
            }
            return Ok(replaced);
        }

        let server_order = original.clone();
        let mut merged = original;
        for element in &plain {
            let Some(wanted) = element.get(key) else {
                return Err(missing_merge_key(element, key));
            };
            let position = merged.iter().position(|item| item.get(key) == Some(wanted));
            match position {
                Some(index) => {
                    let existing = match merged.get_mut(index).map(Value::take) {
                        Some(Value::Object(existing)) => existing,
                        _ => Map::new(),
                    };
                    match self.merge_map(existing, element, path)? {
                        Some(item) => {
                            if let Some(slot) = merged.get_mut(index) {
                                *slot = Value::Object(item);
                            }
                        }
                        None => {
                            merged.remove(index);
                        }
                    }
                }
                None => {
                    if let Some(item) = self.merge_map(Map::new(), element, path)? {
                        merged.push(Value::Object(item));
                    }
                }
            }
        }
        let patch_order: Vec<Value> = plain.into_iter().cloned().map(Value::Object).collect();
        order_elements(merged, &patch_order, &server_order, Some(key))
    }

    /// The value a patch fragment produces where the original has nothing: directives applied, nulls dropped.
    fn materialize(&self, value: &Value, path: &mut Vec<String>) -> Result<Option<Value>, Error> {
        match value {
            Value::Object(map) => Ok(self.merge_map(Map::new(), map, path)?.map(Value::Object)),
            Value::Array(items) => Ok(Some(Value::Array(self.materialize_list(items, path)?))),
            other => Ok(Some(other.clone())),
        }
    }

    /// A patch list taken where the original has no list (or a list that the patch replaces).
    fn materialize_list(
        &self,
        items: &[Value],
        path: &mut Vec<String>,
    ) -> Result<Vec<Value>, Error> {
        let strategy = self.strategy(path);
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Value::Object(map) => {
                    if let Some(directive) = map.get(DIRECTIVE) {
                        match (strategy, directive.as_str()) {
                            (_, Some("delete" | "replace")) => continue,
                            (ListStrategy::MergeByKey(_), Some("merge")) => {
                                return Err(Error::MergeDirectiveInList);
                            }
                            _ => {
                                return Err(Error::UnknownPatchType {
                                    directive: go_format(directive),
                                    map: go_format_map(map),
                                });
                            }
                        }
                    }
                    if let Some(map) = self.merge_map(Map::new(), map, path)? {
                        out.push(Value::Object(map));
                    }
                }
                Value::Array(inner) => out.push(Value::Array(self.materialize_list(inner, path)?)),
                other => out.push(other.clone()),
            }
        }
        Ok(out)
    }
}

/// Union of two primitive lists: duplicates dropped, then ordered like upstream.
fn merge_primitive_list(original: Vec<Value>, patch: &[Value]) -> Result<Vec<Value>, Error> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    if element_kind(&[&original, patch])? == Some(ValueKind::Object) {
        return Err(Error::NoMergeKey {
            element: "map[string]interface {}",
        });
    }
    let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
    for item in original.iter().chain(patch) {
        if !merged.contains(item) {
            merged.push(item.clone());
        }
    }
    order_elements(merged, patch, &original, None)
}

/// Orders a merged list like upstream's `normalizeElementOrder`: the elements named in `order`
/// follow `order`; the others keep the order of `server_order` (the original list); the two groups
/// are interleaved so that an ordered element goes before a server element unless the server list
/// had the server element first.
fn order_elements(
    merged: Vec<Value>,
    order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>, Error> {
    let identity = |value: &Value| -> Result<Value, Error> {
        match key {
            None => Ok(value.clone()),
            Some(key) => match value {
                Value::Object(map) => map
                    .get(key)
                    .cloned()
                    .ok_or_else(|| missing_merge_key(map, key)),
                other => Err(expected_map(other)),
            },
        }
    };
    let order_ids = order
        .iter()
        .filter(|item| !is_directive_element(item))
        .map(&identity)
        .collect::<Result<Vec<_>, _>>()?;
    let server_ids = server_order
        .iter()
        .map(&identity)
        .collect::<Result<Vec<_>, _>>()?;
    let position = |ids: &[Value], id: &Value| ids.iter().position(|candidate| candidate == id);

    let mut ordered: Vec<(Value, Value)> = Vec::new();
    let mut server_only: Vec<(Value, Value)> = Vec::new();
    for item in merged {
        let id = identity(&item)?;
        if position(&order_ids, &id).is_some() {
            ordered.push((id, item));
        } else {
            server_only.push((id, item));
        }
    }
    ordered.sort_by_key(|(id, _)| position(&order_ids, id).unwrap_or(usize::MAX));
    server_only.sort_by_key(|(id, _)| position(&server_ids, id).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(ordered.len() + server_only.len());
    let mut ordered = ordered.into_iter().peekable();
    let mut server_only = server_only.into_iter().peekable();
    loop {
        let take_server = match (server_only.peek(), ordered.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((server_id, _)), Some((ordered_id, _))) => {
                match (
                    position(&server_ids, server_id),
                    position(&server_ids, ordered_id),
                ) {
                    (Some(server), Some(ordered)) => server.cmp(&ordered) == Ordering::Less,
                    _ => false,
                }
            }
        };
        let next = if take_server {
            server_only.next()
        } else {
            ordered.next()
        };
        if let Some((_, item)) = next {
            out.push(item);
        }
    }
    Ok(out)
}

fn is_directive_element(item: &Value) -> bool {
    item.as_object()
        .is_some_and(|map| map.contains_key(DIRECTIVE))
}

/// Checks that the patch list's elements appear in the `$setElementOrder` list in the same relative order.
fn validate_set_order(
    patch: Option<&[Value]>,
    order: &[Value],
    key: Option<&str>,
) -> Result<(), Error> {
    let Some(patch) = patch else {
        return Ok(());
    };
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let candidates: Vec<&Value> = patch
        .iter()
        .filter(|item| {
            key.is_none() || item.get(DIRECTIVE).and_then(Value::as_str) != Some("delete")
        })
        .collect();
    let key_of = |value: &Value, key: &str| -> Result<Value, Error> {
        match value {
            Value::Object(map) => map
                .get(key)
                .cloned()
                .ok_or_else(|| missing_merge_key(map, key)),
            other => Err(expected_map(other)),
        }
    };
    let (mut in_patch, mut in_order) = (0, 0);
    while let (Some(item), Some(ordered)) = (candidates.get(in_patch), order.get(in_order)) {
        if is_directive_element(item) {
            in_patch += 1;
            continue;
        }
        let equal = match key {
            Some(key) => key_of(item, key)? == key_of(ordered, key)?,
            None => *item == ordered,
        };
        if equal {
            in_patch += 1;
        }
        in_order += 1;
    }
    if in_patch < candidates.len() && in_order >= order.len() {
        return Err(Error::SetElementOrderMismatch {
            patch: go_format_list(patch),
            order: go_format_list(order),
        });
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueKind {
    Null,
    Bool,
    Number,
    String,
    Object,
}

/// The common element type of some lists (`None` if they are all empty), like upstream's `sliceElementType`.
fn element_kind(lists: &[&[Value]]) -> Result<Option<ValueKind>, Error> {
    let mut kind = None;
    for item in lists.iter().flat_map(|list| list.iter()) {
        let this = match item {
            Value::Null => ValueKind::Null,
            Value::Bool(_) => ValueKind::Bool,
            Value::Number(_) => ValueKind::Number,
            Value::String(_) => ValueKind::String,
            Value::Object(_) => ValueKind::Object,
            Value::Array(_) => return Err(Error::ListOfLists),
        };
        match kind {
            None => kind = Some(this),
            Some(previous) if previous != this => {
                let lists = lists
                    .iter()
                    .map(|list| go_format_list(list))
                    .collect::<Vec<_>>()
                    .join(" ");
                return Err(Error::MixedElementTypes {
                    lists: format!("[{lists}]"),
                });
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

fn missing_merge_key(map: &Map<String, Value>, key: &str) -> Error {
    Error::MissingMergeKey {
        map: go_format_map(map),
        key: key.to_owned(),
    }
}

fn expected_map(found: &Value) -> Error {
    Error::ExpectedMap {
        found: go_type_name(found),
    }
}

fn expected_list(found: &Value) -> Error {
    Error::ExpectedList {
        found: go_type_name(found),
    }
}

/// The name Go's JSON decoder gives a JSON value's type in "cannot unmarshal X" errors.
fn go_json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The Go type a decoded JSON value has in apimachinery (`map[string]interface {}`, `string`, ...).
fn go_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Formats a value the way Go's `%v` prints a decoded JSON value (`map[name:c image:x]`, `[a b]`, `<nil>`).
fn go_format(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        Value::Array(items) => go_format_list(items),
        Value::Object(map) => go_format_map(map),
    }
}

fn go_format_list(items: &[Value]) -> String {
    let items: Vec<String> = items.iter().map(go_format).collect();
    format!("[{}]", items.join(" "))
}

fn go_format_map(map: &Map<String, Value>) -> String {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|left, right| left.0.cmp(right.0));
    let entries: Vec<String> = entries
        .into_iter()
        .map(|(key, value)| format!("{key}:{}", go_format(value)))
        .collect();
    format!("map[{}]", entries.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(original: Value, patch: Value, kind: &str) -> Value {
        match strategic_merge_patch(&original, &patch, kind) {
            Ok(result) => result,
            Err(error) => panic!("strategic merge patch failed: {error}"),
        }
    }

    fn smp_error(original: Value, patch: Value, kind: &str) -> Error {
        match strategic_merge_patch(&original, &patch, kind) {
            Ok(result) => panic!("expected an error, got {result}"),
            Err(error) => error,
        }
    }

    fn pod(containers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    #[test]
    fn list_strategy_knows_the_pod_spec_lists_in_pods_and_templates() {
        let pod_path = ["spec", "containers"];
        let template_path = ["spec", "template", "spec", "containers"];
        assert_eq!(
            list_strategy("Pod", &pod_path),
            ListStrategy::MergeByKey("name")
        );
        for kind in [
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
            "DaemonSet",
            "Job",
        ] {
            assert_eq!(
                list_strategy(kind, &template_path),
                ListStrategy::MergeByKey("name")
            );
        }
        assert_eq!(
            list_strategy(
                "CronJob",
                &[
                    "spec",
                    "jobTemplate",
                    "spec",
                    "template",
                    "spec",
                    "initContainers"
                ]
            ),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            list_strategy(
                "Deployment",
                &["spec", "template", "spec", "containers", "ports"]
            ),
            ListStrategy::MergeByKey("containerPort")
        );
        assert_eq!(
            list_strategy("Pod", &["spec", "initContainers", "volumeMounts"]),
            ListStrategy::MergeByKey("mountPath")
        );
        assert_eq!(
            list_strategy("Pod", &["spec", "containers", "volumeDevices"]),
            ListStrategy::MergeByKey("devicePath")
        );
        assert_eq!(
            list_strategy("Pod", &["spec", "hostAliases"]),
            ListStrategy::MergeByKey("ip")
        );
        assert_eq!(
            list_strategy("Pod", &["spec", "topologySpreadConstraints"]),
            ListStrategy::MergeByKey("topologyKey")
        );
        assert_eq!(
            list_strategy("Pod", &["spec", "tolerations"]),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy("Pod", &["spec", "containers", "args"]),
            ListStrategy::Replace
        );
    }

    #[test]
    fn list_strategy_knows_metadata_and_status_lists() {
        assert_eq!(
            list_strategy("ConfigMap", &["metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            list_strategy(
                "Deployment",
                &["spec", "template", "metadata", "ownerReferences"]
            ),
            ListStrategy::MergeByKey("uid")
        );
        assert_eq!(
            list_strategy("Lease", &["metadata", "ownerReferences"]),
            ListStrategy::MergeByKey("uid")
        );
        for kind in ["Pod", "Node", "Deployment", "ReplicaSet", "Namespace"] {
            assert_eq!(
                list_strategy(kind, &["status", "conditions"]),
                ListStrategy::MergeByKey("type")
            );
        }
        assert_eq!(
            list_strategy("Node", &["status", "addresses"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            list_strategy("Node", &["spec", "taints"]),
            ListStrategy::Replace
        );
        assert_eq!(list_strategy("Role", &["rules"]), ListStrategy::Replace);
        assert_eq!(
            list_strategy("RoleBinding", &["subjects"]),
            ListStrategy::Replace
        );
    }

    #[test]
    fn a_strategic_merge_patch_replaces_a_certificate_requests_conditions_which_stay_keyed_by_type()
    {
        let kind = "CertificateSigningRequest";
        assert_eq!(
            patch_strategy(kind, &["status", "conditions"]),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy(kind, &["status", "conditions"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            patch_strategy(kind, &["metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
    }

    #[test]
    fn list_strategy_replaces_every_list_of_an_unknown_kind() {
        assert_eq!(
            list_strategy("Widget", &["metadata", "finalizers"]),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy("Widget", &["spec", "containers"]),
            ListStrategy::Replace
        );
        assert_eq!(
            list_strategy("Widget", &["status", "conditions"]),
            ListStrategy::Replace
        );
    }

    #[test]
    fn strategic_merge_replaces_a_container_by_name() {
        let original = pod(json!([
            {"name": "app", "image": "app:1", "args": ["a"]},
            {"name": "sidecar", "image": "proxy:1"}
        ]));
        let result = smp(
            original,
            json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}}),
            "Pod",
        );
        assert_eq!(
            result["spec"]["containers"],
            json!([
                {"name": "app", "image": "app:2", "args": ["a"]},
                {"name": "sidecar", "image": "proxy:1"}
            ])
        );
    }

    #[test]
    fn strategic_merge_puts_a_new_container_before_the_existing_ones_like_the_server() {
        let original = pod(json!([{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]));
        let result = smp(
            original,
            json!({"spec": {"containers": [{"name": "c", "image": "c"}]}}),
            "Pod",
        );
        let names: Vec<&str> = result["spec"]["containers"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(names, ["c", "a", "b"]);
    }

    #[test]
    fn strategic_merge_keeps_the_patch_order_for_merged_elements() {
        // Upstream case "preserve the order from the patch in a merging list 2".
        let original = pod(json!([{"name": "1"}, {"name": "2", "image": "b"}, {"name": "3"}]));
        let patch = json!({"spec": {"containers": [{"name": "3", "image": "c"}, {"name": "1", "image": "a"}]}});
        let result = smp(original, patch, "Pod");
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "2", "image": "b"}, {"name": "3", "image": "c"}, {"name": "1", "image": "a"}])
        );
    }

    #[test]
    fn strategic_merge_deletes_a_list_element_with_the_delete_directive() {
        let original = pod(
            json!([{"name": "app", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]),
        );
        let patch = json!({"spec": {"containers": [{"name": "app", "env": [{"name": "B", "$patch": "delete"}]}]}});
        let result = smp(original, patch, "Pod");
        assert_eq!(
            result["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}])
        );
    }

    #[test]
    fn strategic_merge_deletes_an_owner_reference_by_uid_like_the_garbage_collector() {
        let original = json!({"metadata": {"name": "rs", "uid": "dep-uid", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u1", "controller": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u2"}
        ]}});
        let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "u1"}], "uid": "dep-uid"}});
        let result = smp(original, patch, "ReplicaSet");
        assert_eq!(
            result["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u2"}])
        );
    }

    #[test]
    fn strategic_merge_merges_ports_volume_mounts_and_devices_by_their_keys() {
        let original = pod(json!([{
            "name": "app",
            "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}],
            "volumeMounts": [{"mountPath": "/data", "name": "data"}],
            "volumeDevices": [{"devicePath": "/dev/xvda", "name": "raw"}]
        }]));
        let patch = json!({"spec": {"containers": [{
            "name": "app",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "volumeMounts": [{"mountPath": "/data", "readOnly": true}],
            "volumeDevices": [{"devicePath": "/dev/xvdb", "name": "raw2"}]
        }]}});
        let result = smp(original, patch, "Pod");
        let container = &result["spec"]["containers"][0];
        assert_eq!(
            container["ports"],
            json!([{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}])
        );
        assert_eq!(
            container["volumeMounts"],
            json!([{"mountPath": "/data", "name": "data", "readOnly": true}])
        );
        assert_eq!(
            container["volumeDevices"],
            json!([{"devicePath": "/dev/xvdb", "name": "raw2"}, {"devicePath": "/dev/xvda", "name": "raw"}])
        );
    }

    #[test]
    fn strategic_merge_merges_volumes_image_pull_secrets_host_aliases_and_spread_constraints() {
        let original = json!({"spec": {
            "volumes": [{"name": "data", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "regcred"}],
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
            "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1}]
        }});
        let patch = json!({"spec": {
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "regcred"}],
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}],
            "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}]
        }});
        let result = smp(original, patch, "Pod");
        assert_eq!(
            result["spec"]["volumes"],
            json!([{"name": "cache", "emptyDir": {}}, {"name": "data", "emptyDir": {}}])
        );
        assert_eq!(
            result["spec"]["imagePullSecrets"],
            json!([{"name": "regcred"}])
        );
        assert_eq!(
            result["spec"]["hostAliases"],
            json!([{"ip": "10.0.0.1", "hostnames": ["b"]}])
        );
        assert_eq!(
            result["spec"]["topologySpreadConstraints"],
            json!([{"topologyKey": "zone", "maxSkew": 2}])
        );
    }

    #[test]
    fn strategic_merge_merges_status_conditions_by_type() {
        let original = json!({"status": {"conditions": [
            {"type": "Available", "status": "False"},
            {"type": "Progressing", "status": "True"}
        ]}});
        let patch = json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}});
        for kind in ["Deployment", "ReplicaSet", "Pod", "Node", "Namespace"] {
            let result = smp(original.clone(), patch.clone(), kind);
            assert_eq!(
                result["status"]["conditions"],
                json!([{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}]),
                "{kind}"
            );
        }
    }

    #[test]
    fn strategic_merge_merges_node_addresses_by_type() {
        let original =
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}});
        let patch = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
        let result = smp(original, patch, "Node");
        assert_eq!(
            result["status"]["addresses"],
            json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"}])
        );
    }

    #[test]
    fn strategic_merge_unions_finalizers_and_deletes_from_a_primitive_list() {
        let original = json!({"metadata": {"name": "x", "finalizers": ["a", "b"]}});
        let added = smp(
            original.clone(),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
            "ConfigMap",
        );
        assert_eq!(added["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let removed = smp(
            original,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zzz"]}}),
            "ConfigMap",
        );
        assert_eq!(removed["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn strategic_merge_ignores_a_primitive_deletion_for_a_missing_list() {
        let original = json!({"metadata": {"name": "x"}});
        let result = smp(
            original.clone(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
            "ConfigMap",
        );
        assert_eq!(result, original);
    }

    #[test]
    fn strategic_merge_replaces_lists_without_a_merge_strategy() {
        let original = json!({"spec": {
            "tolerations": [{"key": "a", "operator": "Exists"}],
            "containers": [{"name": "app", "args": ["x", "y"], "command": ["sh"]}]
        }});
        let patch = json!({"spec": {
            "tolerations": [{"key": "b", "operator": "Exists"}],
            "containers": [{"name": "app", "args": ["z"]}]
        }});
        let result = smp(original, patch, "Pod");
        assert_eq!(
            result["spec"]["tolerations"],
            json!([{"key": "b", "operator": "Exists"}])
        );
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "app", "args": ["z"], "command": ["sh"]}])
        );
    }

    #[test]
    fn strategic_merge_replaces_every_list_of_an_unknown_kind() {
        let original =
            json!({"metadata": {"finalizers": ["a"]}, "spec": {"items": [{"name": "a"}]}});
        let patch = json!({"metadata": {"finalizers": ["b"]}, "spec": {"items": [{"name": "b"}]}});
        let result = smp(original, patch, "Widget");
        assert_eq!(
            result,
            json!({"metadata": {"finalizers": ["b"]}, "spec": {"items": [{"name": "b"}]}})
        );
    }

    #[test]
    fn strategic_merge_deletes_keys_set_to_null_and_merges_maps() {
        let original =
            json!({"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}});
        let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}, "annotations": null}});
        let result = smp(original, patch, "ConfigMap");
        assert_eq!(
            result,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}})
        );
    }

    #[test]
    fn strategic_merge_replaces_a_map_with_the_replace_directive() {
        let original = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}});
        let result = smp(original, patch, "ConfigMap");
        assert_eq!(result, json!({"metadata": {"labels": {"c": "3"}}}));
    }

    #[test]
    fn strategic_merge_deletes_a_map_with_the_delete_directive() {
        let original = json!({"metadata": {"name": "x", "labels": {"a": "1"}}});
        let patch = json!({"metadata": {"labels": {"$patch": "delete"}}});
        let result = smp(original, patch, "ConfigMap");
        assert_eq!(result, json!({"metadata": {"name": "x"}}));
    }

    #[test]
    fn strategic_merge_replaces_a_list_with_the_replace_directive() {
        let original = pod(json!([{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]));
        let patch =
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "c", "image": "c"}]}});
        let result = smp(original.clone(), patch, "Pod");
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "c", "image": "c"}])
        );
        let emptied = smp(
            original,
            json!({"spec": {"containers": [{"$patch": "replace"}]}}),
            "Pod",
        );
        assert_eq!(emptied["spec"]["containers"], json!([]));
    }

    #[test]
    fn strategic_merge_rejects_the_merge_directive_like_the_server() {
        let original = pod(json!([{"name": "a"}]));
        let in_list = smp_error(
            original.clone(),
            json!({"spec": {"containers": [{"$patch": "merge"}]}}),
            "Pod",
        );
        assert_eq!(
            in_list.to_string(),
            "merging lists cannot yet be specified in the patch"
        );
        let in_map = smp_error(
            original,
            json!({"metadata": {"$patch": "merge", "name": "p"}}),
            "Pod",
        );
        assert_eq!(
            in_map.to_string(),
            "unknown patch type: merge in map: map[$patch:merge name:p]"
        );
        // Plain Go errors, not Status errors: 500 without a reason.
        assert_eq!(in_map.status_code(), 500);
        assert_eq!(in_list.status_code(), 500);
    }

    #[test]
    fn strategic_merge_retain_keys_drops_the_keys_not_listed() {
        let original = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let result = smp(original, patch, "Deployment");
        assert_eq!(result, json!({"spec": {"strategy": {"type": "Recreate"}}}));
    }

    #[test]
    fn strategic_merge_rejects_a_patch_key_missing_from_retain_keys() {
        let original = json!({"spec": {"strategy": {"type": "RollingUpdate"}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 1}}}});
        let error = smp_error(original, patch, "Deployment");
        assert_eq!(error.to_string(), "invalid patch format of retainKeys");
        assert_eq!(error.status_code(), 400);
    }

    #[test]
    fn strategic_merge_orders_a_list_by_set_element_order() {
        let original = pod(json!([{"name": "a"}, {"name": "b"}]));
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
            "containers": [{"name": "c", "image": "c"}]
        }});
        let result = smp(original, patch, "Pod");
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "b"}, {"name": "c", "image": "c"}, {"name": "a"}])
        );
    }

    #[test]
    fn strategic_merge_orders_a_primitive_list_by_set_element_order() {
        // Upstream case "add and delete items in lists of scalars" against a live list with an extra item.
        let original = json!({"metadata": {"finalizers": ["1", "2", "3", "4"]}});
        let patch = json!({"metadata": {
            "$setElementOrder/finalizers": ["1", "2", "5"],
            "$deleteFromPrimitiveList/finalizers": ["3"],
            "finalizers": ["5"]
        }});
        let result = smp(original, patch, "Pod");
        assert_eq!(
            result["metadata"]["finalizers"],
            json!(["1", "2", "5", "4"])
        );
    }

    #[test]
    fn strategic_merge_rejects_a_patch_list_out_of_set_element_order() {
        let original = pod(json!([{"name": "1"}, {"name": "3"}, {"name": "2"}]));
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
            "containers": [{"name": "3", "image": "x"}, {"name": "1", "image": "y"}]
        }});
        let error = smp_error(original, patch, "Pod");
        assert!(
            error
                .to_string()
                .contains("doesn't match $setElementOrder list"),
            "{error}"
        );
    }

    #[test]
    fn strategic_merge_applies_a_kubectl_three_way_patch_to_a_deployment() {
        let live = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "generation": 3,
                "annotations": {"deployment.kubernetes.io/revision": "3", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                         "env": [{"name": "MODE", "value": "prod"}, {"name": "DEBUG", "value": "1"}, {"name": "LOG", "value": "info"}],
                         "terminationMessagePath": "/dev/termination-log"},
                        {"name": "metrics", "image": "exporter:2"}
                    ]}
                }
            },
            "status": {"replicas": 2}
        });
        // What `kubectl apply` sends after changing the image and dropping DEBUG from the manifest.
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}"}},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "web"}, {"name": "metrics"}],
                "containers": [{
                    "$setElementOrder/env": [{"name": "MODE"}, {"name": "LOG"}],
                    "env": [{"$patch": "delete", "name": "DEBUG"}],
                    "image": "nginx:1.26",
                    "name": "web"
                }]
            }}}
        });
        let result = smp(live.clone(), patch, "Deployment");
        let mut expected = live;
        expected["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
            json!("{\"new\":true}");
        expected["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.26");
        expected["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "MODE", "value": "prod"}, {"name": "LOG", "value": "info"}]);
        assert_eq!(result, expected);
    }

    #[test]
    fn strategic_merge_reports_a_missing_merge_key_like_the_server() {
        let original = pod(json!([{"name": "app", "image": "a"}]));
        let error = smp_error(
            original,
            json!({"spec": {"containers": [{"image": "nginx"}]}}),
            "Pod",
        );
        assert_eq!(
            error.to_string(),
            "map: map[image:nginx] does not contain declared merge key: name"
        );
        assert_eq!(error.status_code(), 500);
    }

    #[test]
    fn strategic_merge_rejects_a_patch_that_is_not_an_object() {
        let error = smp_error(json!({}), json!([1, 2]), "Pod");
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        );
        assert_eq!(error.status_code(), 400);
    }

    #[test]
    fn strategic_merge_rejects_an_unknown_directive_in_a_list() {
        let original = pod(json!([{"name": "a"}]));
        let error = smp_error(
            original,
            json!({"spec": {"containers": [{"name": "a", "$patch": "frobnicate"}]}}),
            "Pod",
        );
        assert_eq!(
            error.to_string(),
            "unknown patch type: frobnicate in map: map[$patch:frobnicate name:a]"
        );
    }

    #[test]
    fn strategic_merge_leaves_no_directive_in_a_new_subtree() {
        let original = json!({"metadata": {"name": "p"}});
        let patch = json!({"spec": {"containers": [
            {"name": "a", "image": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "$patch": "delete"}]},
            {"name": "gone", "$patch": "delete"}
        ], "nodeSelector": {"disk": "ssd", "zone": null}}});
        let result = smp(original, patch, "Pod");
        assert_eq!(
            result,
            json!({"metadata": {"name": "p"}, "spec": {
                "containers": [{"name": "a", "image": "a", "env": [{"name": "X", "value": "1"}]}],
                "nodeSelector": {"disk": "ssd"}
            }})
        );
    }

    #[test]
    fn strategic_merge_rejects_mixed_element_types() {
        let original = json!({"metadata": {"finalizers": ["a"]}});
        let error = smp_error(original, json!({"metadata": {"finalizers": [1]}}), "Pod");
        assert_eq!(
            error.to_string(),
            "list element types are not identical: [[a] [1]]"
        );
    }

    #[test]
    fn strategic_merge_with_a_null_patch_changes_nothing() {
        let original = pod(json!([{"name": "a"}]));
        assert_eq!(smp(original.clone(), Value::Null, "Pod"), original);
    }

    #[test]
    fn merge_patch_deletes_nulls_and_replaces_lists() {
        let mut target =
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"items": [1, 2, 3]}});
        merge_patch(
            &mut target,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"items": [4]}}),
        );
        assert_eq!(
            target,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"items": [4]}})
        );
    }

    #[test]
    fn json_patch_adds_removes_and_replaces() {
        let mut target =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1, "items": ["x"]}});
        let patch = json!([
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/a"},
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "add", "path": "/spec/items/-", "value": "y"},
            {"op": "test", "path": "/spec/replicas", "value": 3}
        ]);
        let outcome = json_patch(&mut target, &patch);
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(
            target,
            json!({"metadata": {"labels": {"b": "2"}}, "spec": {"replicas": 3, "items": ["x", "y"]}})
        );
    }

    #[test]
    fn json_patch_test_failure_leaves_the_target_unchanged() {
        let original = json!({"spec": {"replicas": 1}});
        let mut target = original.clone();
        let patch = json!([
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "test", "path": "/spec/replicas", "value": 1}
        ]);
        let Err(error) = json_patch(&mut target, &patch) else {
            panic!("the test operation should have failed");
        };
        assert_eq!(
            error.to_string(),
            "testing value /spec/replicas failed: test failed"
        );
        assert_eq!(target, original);
    }

    #[test]
    fn a_failed_json_patch_is_the_generic_422_with_empty_details() {
        let mut target = json!({"data": {"j": "json"}});
        let error = json_patch(
            &mut target,
            &json!([{"op": "test", "path": "/data/j", "value": "other"}]),
        )
        .err()
        .map(ApiError::from);
        assert_eq!(
            error.map(|e| e.to_status()),
            Some(json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server rejected our request due to an error in our request",
                "reason": "Invalid", "details": {}, "code": 422
            }))
        );
    }

    fn patched(target: Value, patch: Value) -> Result<Value, String> {
        let mut target = target;
        json_patch(&mut target, &patch)
            .map(|()| target)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn json_patch_fails_on_missing_paths_and_keys_it_cannot_remove() {
        let doc = json!({"spec": {}, "list": ["a", "b"]});
        for patch in [
            json!([{"op": "remove", "path": "/spec/replicas"}]),
            json!([{"op": "add", "path": "/spec/x/y", "value": 1}]),
            json!([{"op": "move", "from": "/spec/nope", "path": "/spec/x"}]),
            json!([{"op": "replace", "path": "/list/2", "value": "c"}]),
            json!([{"op": "add", "path": "/list/3", "value": "c"}]),
            json!([{"op": "remove", "path": "/list/x"}]),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"path": "/a"}]),
            json!([null]),
            json!([{"op": "add", "value": 1}]),
            json!([{"op": "test", "path": "/spec", "value": null}]),
        ] {
            let outcome = patched(doc.clone(), patch.clone());
            assert!(outcome.is_err(), "{patch} applied: {outcome:?}");
            let mut scratch = doc.clone();
            let status = json_patch(&mut scratch, &patch).map_err(|e| e.status_code());
            assert_eq!(status, Err(422), "{patch}");
        }
    }

    #[test]
    fn json_patch_keeps_the_departures_from_rfc_6902_of_the_real_library() {
        let doc = json!({"data": {"k": "v"}, "list": ["a", "b"]});
        // replace of a missing key adds it; copy from a missing key copies null
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "replace", "path": "/data/new", "value": "x"}])
            ),
            Ok(json!({"data": {"k": "v", "new": "x"}, "list": ["a", "b"]}))
        );
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "copy", "from": "/data/nope", "path": "/data/x"}])
            ),
            Ok(json!({"data": {"k": "v", "x": null}, "list": ["a", "b"]}))
        );
        // a missing value is null; a missing key tests equal to null
        assert_eq!(
            patched(doc.clone(), json!([{"op": "add", "path": "/data/z"}])),
            Ok(json!({"data": {"k": "v", "z": null}, "list": ["a", "b"]}))
        );
        assert!(
            patched(
                doc.clone(),
                json!([{"op": "test", "path": "/data/nope", "value": null}])
            )
            .is_ok()
        );
        // negative indices count from the end (of the longer list for add)
        assert_eq!(
            patched(doc.clone(), json!([{"op": "remove", "path": "/list/-1"}])),
            Ok(json!({"data": {"k": "v"}, "list": ["a"]}))
        );
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "replace", "path": "/list/-2", "value": "x"}])
            ),
            Ok(json!({"data": {"k": "v"}, "list": ["x", "b"]}))
        );
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "add", "path": "/list/-1", "value": "c"}])
            ),
            Ok(json!({"data": {"k": "v"}, "list": ["a", "b", "c"]}))
        );
        // the text before the first slash is ignored; ~1 and ~0 are unescaped
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "add", "path": "x/data", "value": {"q": "r"}}])
            ),
            Ok(json!({"data": {"q": "r"}, "list": ["a", "b"]}))
        );
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "add", "path": "/data/a~1b~0", "value": "s"}])
            ),
            Ok(json!({"data": {"k": "v", "a/b~": "s"}, "list": ["a", "b"]}))
        );
        // a scalar or null replacing the whole document is ignored
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op": "replace", "path": "", "value": 5}])
            ),
            Ok(doc.clone())
        );
        // null and an empty list are empty patches
        assert_eq!(patched(doc.clone(), Value::Null), Ok(doc.clone()));
        assert_eq!(patched(doc.clone(), json!([])), Ok(doc.clone()));
        // numbers of another type are not equal
        assert!(
            patched(
                json!({"n": 1}),
                json!([{"op": "test", "path": "/n", "value": 1.0}])
            )
            .is_err()
        );
        assert!(
            patched(
                json!({"n": [1, {"a": null}]}),
                json!([{"op": "test", "path": "/n", "value": [1, {"a": null}]}])
            )
            .is_ok()
        );
    }

    #[test]
    fn json_patch_bodies_go_cannot_decode_are_refused_with_its_messages() {
        let cases = [
            (
                json!({"op": "add"}),
                "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp",
            ),
            (
                json!("x"),
                "error decoding patch: json: cannot unmarshal string into Go value of type []handlers.jsonPatchOp",
            ),
            (
                json!([1]),
                "error decoding patch: json: cannot unmarshal number into Go value of type handlers.jsonPatchOp",
            ),
            (
                json!([{"op": 1, "path": "/a"}]),
                "error decoding patch: json: cannot unmarshal number into Go struct field jsonPatchOp.op of type string",
            ),
            (
                json!([{"op": "add", "path": 1}]),
                "error decoding patch: json: cannot unmarshal number into Go struct field jsonPatchOp.path of type string",
            ),
        ];
        for (body, message) in cases {
            let mut target = json!({});
            let error = json_patch(&mut target, &body).err();
            assert_eq!(
                error.as_ref().map(ToString::to_string).as_deref(),
                Some(message)
            );
            assert_eq!(error.map(|e| e.status_code()), Some(400));
        }
    }

    #[test]
    fn json_patch_limits_the_number_of_operations() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/a", "value": 1}))
            .collect();
        let mut target = json!({"a": 1});
        let error = json_patch(&mut target, &Value::Array(ops))
            .err()
            .map(ApiError::from);
        assert_eq!(error.as_ref().map(ApiError::code), Some(413));
        assert_eq!(
            error.map(|e| e.to_string()).as_deref(),
            Some(
                "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
            )
        );
    }

    #[test]
    fn json_patches_the_real_server_aborts_are_answered_500() {
        for patch in [
            json!([{"op": "test", "path": "/missing"}]),
            json!([{"op": "replace", "path": ""}]),
            json!([{"op": "test", "path": ""}]),
            json!([{"op": "test", "path": "/l", "value": ["a", null]}]),
        ] {
            let mut target = json!({"l": ["a", "b"]});
            let error = json_patch(&mut target, &patch).err();
            assert!(
                matches!(error, Some(Error::JsonPatchAborted(_))),
                "{patch}: {error:?}"
            );
            assert_eq!(error.map(|e| e.status_code()), Some(500));
        }
    }

    #[test]
    fn merge_patch_bodies_that_are_not_objects_are_refused_like_the_server() {
        assert!(check_merge_patch(&json!({})).is_ok());
        assert_eq!(
            check_merge_patch(&json!([1])).map_err(|e| e.to_string()),
            Err("error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}".to_string())
        );
        assert_eq!(
            check_merge_patch(&Value::Null).map_err(|e| e.to_string()),
            Err("Invalid JSON Patch".to_string())
        );
        assert_eq!(
            check_merge_patch(&json!(true)).map_err(|e| e.status_code()),
            Err(400)
        );
    }

    #[test]
    fn strategic_merge_errors_get_the_status_the_server_gives_them() {
        let bad_directive = smp_error(
            json!({"metadata": {}}),
            json!({"metadata": {"$patch": "bogus"}}),
            "ConfigMap",
        );
        let status = ApiError::from(&bad_directive).to_status();
        assert_eq!(status["code"], 500);
        assert_eq!(status.get("reason"), None);
        assert_eq!(
            status["message"],
            "unknown patch type: bogus in map: map[$patch:bogus]"
        );
        assert_eq!(Error::ListOfLists.status_code(), 422);
        assert_eq!(
            ApiError::from(Error::ListOfLists).to_string(),
            "the server rejected our request due to an error in our request"
        );
        assert_eq!(Error::BadRetainKeys.status_code(), 400);
    }
}
