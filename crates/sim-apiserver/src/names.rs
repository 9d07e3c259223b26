//! Object name, label and annotation validation with the kube-apiserver's own messages, the
//! field-error `Cause` every validator of the simulated apiserver reports, and the random
//! suffix `generateName` appends.
//!
//! The messages are those of apimachinery 1.34 (`util/validation`, `api/validation`,
//! `apis/meta/v1/validation`), and `Cause`'s `Display` renders a `field.Error` exactly as
//! `(*field.Error).Error()` of apimachinery v0.34 does (`util/validation/field/errors.go`): a
//! string bad value with Go's `%q`, a number or bool with `%v`, anything else (`null`, lists,
//! maps, structs) as the JSON `encoding/json` writes. See [`go_value`].

use std::fmt;

use rand::Rng as _;
use serde_json::{Map, Value};
use thiserror::Error;

/// A random suffix as generateName uses (5 characters of the real alphabet).
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `StatusCause.reason` of a malformed value (`field.Invalid`).
pub const FIELD_VALUE_INVALID: &str = "FieldValueInvalid";
/// `StatusCause.reason` of a missing value (`field.Required`).
pub const FIELD_VALUE_REQUIRED: &str = "FieldValueRequired";
/// `StatusCause.reason` of a value outside an enumeration (`field.NotSupported`).
pub const FIELD_VALUE_NOT_SUPPORTED: &str = "FieldValueNotSupported";
/// `StatusCause.reason` of a value of the wrong schema type (`field.TypeInvalid`).
pub const FIELD_VALUE_TYPE_INVALID: &str = "FieldValueTypeInvalid";
/// `StatusCause.reason` of a value that is too long (`field.TooLong`).
pub const FIELD_VALUE_TOO_LONG: &str = "FieldValueTooLong";
/// `StatusCause.reason` of a list with too many items (`field.TooMany`).
pub const FIELD_VALUE_TOO_MANY: &str = "FieldValueTooMany";
/// `StatusCause.reason` of a repeated value (`field.Duplicate`).
pub const FIELD_VALUE_DUPLICATE: &str = "FieldValueDuplicate";
/// `StatusCause.reason` of a value not permitted here (`field.Forbidden`).
pub const FIELD_VALUE_FORBIDDEN: &str = "FieldValueForbidden";
/// `StatusCause.reason` of a value that refers to nothing (`field.NotFound`).
pub const FIELD_VALUE_NOT_FOUND: &str = "FieldValueNotFound";
/// `StatusCause.reason` of a server-side failure (`field.InternalError`).
pub const INTERNAL_ERROR: &str = "InternalError";

/// Total size of all annotation keys and values an object may carry (`TotalAnnotationSizeLimitB`).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Failures of this module's non-validation helpers.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// A `reason` string is not one of the `field.ErrorType` values the apiserver uses.
    #[error("unknown field error reason {0:?}")]
    UnknownReason(String),
}

/// One field-level validation error: `field.Error` of apimachinery, as it becomes a
/// `StatusCause` (`reason` is the cause type, `field` the field path).
///
/// `message` is the error's *detail* (what `field.Invalid(path, value, detail)` was given; empty
/// for a bare `Required value`). [`Cause::body`] renders the `StatusCause.message`
/// (`Invalid value: "x": detail`) and `Display` renders `field: body`, as `Error()` does.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// Field path, e.g. `metadata.name`, `spec.containers[0].image`; `<nil>` for errors without one.
    pub field: String,
    /// The offending value (shown for `Invalid`, `TypeInvalid`, `NotSupported`, `Duplicate`, `TooMany`, `NotFound`).
    pub value: Value,
    /// The detail after the type and value; may be empty.
    pub message: String,
    /// `StatusCause.reason`: one of the `FIELD_VALUE_*` constants or `InternalError`.
    pub reason: &'static str,
}

impl Cause {
    fn new(field: &str, value: Value, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            value,
            message: message.into(),
            reason,
        }
    }

    /// `field.Invalid(field, value, detail)`.
    pub fn invalid(field: &str, value: Value, detail: impl Into<String>) -> Self {
        Self::new(field, value, FIELD_VALUE_INVALID, detail)
    }

    /// `field.Required(field, detail)`.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::new(
            field,
            Value::String(String::new()),
            FIELD_VALUE_REQUIRED,
            detail,
        )
    }

    /// `field.Forbidden(field, detail)`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self::new(
            field,
            Value::String(String::new()),
            FIELD_VALUE_FORBIDDEN,
            detail,
        )
    }

    /// `field.TypeInvalid(field, value, detail)`.
    pub fn type_invalid(field: &str, value: Value, detail: impl Into<String>) -> Self {
        Self::new(field, value, FIELD_VALUE_TYPE_INVALID, detail)
    }

    /// `field.Duplicate(field, value)`.
    pub fn duplicate(field: &str, value: Value) -> Self {
        Self::new(field, value, FIELD_VALUE_DUPLICATE, "")
    }

    /// `field.NotSupported(field, value, supported)`: detail `supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: Value, supported: &[String]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(field, value, FIELD_VALUE_NOT_SUPPORTED, detail)
    }

    /// `field.TooLong(field, _, max)`: `may not be more than N bytes` (`1 byte`), or `value is
    /// too long` without a limit.
    pub fn too_long(field: &str, max: Option<usize>) -> Self {
        let detail = match max {
            Some(1) => "may not be more than 1 byte".to_string(),
            Some(n) => format!("may not be more than {n} bytes"),
            None => "value is too long".to_string(),
        };
        Self::new(field, Value::Null, FIELD_VALUE_TOO_LONG, detail)
    }

    /// `field.TooMany(field, actual, max)`: `must have at most N items` (`1 item`), or `has too
    /// many items`.
    pub fn too_many(field: &str, actual: usize, max: Option<usize>) -> Self {
        let detail = match max {
            Some(1) => "must have at most 1 item".to_string(),
            Some(n) => format!("must have at most {n} items"),
            None => "has too many items".to_string(),
        };
        Self::new(field, Value::from(actual), FIELD_VALUE_TOO_MANY, detail)
    }

    /// A cause from a `StatusCause.reason` string, checked against the known reasons.
    pub fn from_reason(
        field: &str,
        value: Value,
        reason: &str,
        detail: impl Into<String>,
    ) -> Result<Self, Error> {
        let reason =
            known_reason(reason).ok_or_else(|| Error::UnknownReason(reason.to_string()))?;
        Ok(Self::new(field, value, reason, detail))
    }

    /// The `StatusCause.message`: `(*field.Error).ErrorBody()`, e.g. `Invalid value: "Bad_Name": a lowercase …`.
    pub fn body(&self) -> String {
        let kind = type_string(self.reason);
        let mut s = match self.reason {
            FIELD_VALUE_REQUIRED
            | FIELD_VALUE_FORBIDDEN
            | FIELD_VALUE_TOO_LONG
            | INTERNAL_ERROR => kind.to_string(),
            _ => format!("{kind}: {}", go_value(&self.value)),
        };
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(&self.message);
        }
        s
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

fn known_reason(reason: &str) -> Option<&'static str> {
    [
        FIELD_VALUE_INVALID,
        FIELD_VALUE_REQUIRED,
        FIELD_VALUE_NOT_SUPPORTED,
        FIELD_VALUE_TYPE_INVALID,
        FIELD_VALUE_TOO_LONG,
        FIELD_VALUE_TOO_MANY,
        FIELD_VALUE_DUPLICATE,
        FIELD_VALUE_FORBIDDEN,
        FIELD_VALUE_NOT_FOUND,
        INTERNAL_ERROR,
    ]
    .into_iter()
    .find(|r| *r == reason)
}

/// `field.ErrorType.String()`.
fn type_string(reason: &str) -> &'static str {
    match reason {
        FIELD_VALUE_NOT_FOUND => "Not found",
        FIELD_VALUE_REQUIRED => "Required value",
        FIELD_VALUE_DUPLICATE => "Duplicate value",
        FIELD_VALUE_NOT_SUPPORTED => "Unsupported value",
        FIELD_VALUE_FORBIDDEN => "Forbidden",
        FIELD_VALUE_TOO_LONG => "Too long",
        FIELD_VALUE_TOO_MANY => "Too many",
        INTERNAL_ERROR => "Internal error",
        _ => "Invalid value",
    }
}

/// `field.ErrorList.ToAggregate().Error()`: duplicates dropped, one error plain, several as `[a, b]`.
pub fn aggregate(causes: &[Cause]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for c in causes {
        let s = c.to_string();
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    match seen.len() {
        1 => seen.remove(0),
        _ if seen.is_empty() => String::new(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// How `metadata.name` (and `generateName`) of a kind is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: most kinds, custom resources.
    Subdomain,
    /// `NameIsDNSLabel`: namespaces (and a few others such as services).
    Label,
    /// `path.IsValidPathSegmentName`: RBAC objects; only `/`, `%`, `.` and `..` are refused.
    PathSegment,
}

/// How `metadata.namespace` is checked by [`validate_object_meta_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceRule {
    /// Not looked at (the caller handles scope).
    Unchecked,
    /// Namespaced kind: required, and must be an RFC 1123 label.
    Required,
    /// Cluster-scoped kind: must be absent (`Forbidden: not allowed on this type`).
    Forbidden,
    /// Embedded resources: validated as a label when set, otherwise fine.
    IfSet,
}

/// Go's `regexp`-free check of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, or with `first_alpha` of the DNS-1035 form.
fn is_label_shape(s: &str, first_alpha: bool) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    let first_ok = if first_alpha {
        first.is_ascii_lowercase()
    } else {
        first.is_ascii_lowercase() || first.is_ascii_digit()
    };
    first_ok
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_qualified_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `validation.RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `IsDNS1123Subdomain`: the messages for an invalid RFC 1123 subdomain (empty when valid).
pub fn dns1123_subdomain(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 253 {
        errs.push(max_len_error(253));
    }
    if name.is_empty() || !name.split('.').all(|p| is_label_shape(p, false)) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1123Label`: the messages for an invalid RFC 1123 label (namespaces use it).
pub fn dns1123_label(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_label_shape(name, false) {
        errs.push(regex_error(
            DNS1123_LABEL_MSG,
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// `IsDNS1035Label` (a label that starts with a letter; used for embedded resource kinds).
pub fn dns1035_label(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_label_shape(name, true) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `IsQualifiedName`: label keys, annotation keys (lowercased first) and finalizers.
pub fn label_key(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_qualified_shape(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !is_qualified_shape(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `path.IsValidPathSegmentName`: names that can sit in a URL path segment (RBAC names).
pub fn path_segment_name(name: &str) -> Vec<String> {
    for bad in [".", ".."] {
        if name == bad {
            return vec![format!("may not be '{bad}'")];
        }
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_MSG: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

/// `IsConfigMapKey`: the keys of ConfigMap and Secret data.
pub fn config_map_key(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push(max_len_error(253));
    }
    let shaped = !key.is_empty()
        && key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !shaped {
        errs.push(regex_error(
            CONFIG_MAP_KEY_MSG,
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    // hasChDirPrefix
    if key == "." {
        errs.push("must not be '.'".to_string());
    } else if key == ".." {
        errs.push("must not be '..'".to_string());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// `maskTrailingDash`: a generateName may end in `-` (the random suffix follows).
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        // Go slices bytes: name[:len-2] + "a". Cutting inside a multi-byte character leaves
        // invalid UTF-8 there, which fails validation; the unmasked name fails it just the same.
        let cut = name.len() - 2;
        if name.is_char_boundary(cut) {
            format!("{}a", &name[..cut])
        } else {
            name.to_string()
        }
    } else {
        name.to_string()
    }
}

/// The messages of `name_rule` for a name, or for a generateName prefix when `prefix` is set.
pub fn validate_name(name: &str, name_rule: NameRule, prefix: bool) -> Vec<String> {
    match name_rule {
        NameRule::Subdomain if prefix => dns1123_subdomain(&mask_trailing_dash(name)),
        NameRule::Subdomain => dns1123_subdomain(name),
        NameRule::Label if prefix => dns1123_label(&mask_trailing_dash(name)),
        NameRule::Label => dns1123_label(name),
        NameRule::PathSegment => path_segment_name(name),
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn str_at<'a>(meta: &'a Value, key: &str) -> &'a str {
    meta.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Validates an object's `metadata` on create or update as `ValidateObjectMetaAccessor` does for
/// name, generateName, labels, annotations, generation, ownerReferences and finalizers, with field
/// paths under `metadata.` (namespace is left to the caller: see [`validate_object_meta_with`]).
pub fn validate_object_meta(meta: &Value, name_rule: NameRule) -> Vec<Cause> {
    validate_object_meta_with(meta, name_rule, NamespaceRule::Unchecked, "metadata")
}

/// [`validate_object_meta`] with a namespace rule and the path of the metadata (`metadata`, or
/// e.g. `spec.template.metadata` for an embedded resource).
pub fn validate_object_meta_with(
    meta: &Value,
    name_rule: NameRule,
    namespace: NamespaceRule,
    path: &str,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let generate_name = str_at(meta, "generateName");
    if !generate_name.is_empty() {
        let field = child(path, "generateName");
        for msg in validate_name(generate_name, name_rule, true) {
            causes.push(Cause::invalid(&field, Value::from(generate_name), msg));
        }
    }
    let name = str_at(meta, "name");
    let name_field = child(path, "name");
    if name.is_empty() {
        causes.push(Cause::required(
            &name_field,
            "name or generateName is required",
        ));
    } else {
        for msg in validate_name(name, name_rule, false) {
            causes.push(Cause::invalid(&name_field, Value::from(name), msg));
        }
    }
    let ns = str_at(meta, "namespace");
    let ns_field = child(path, "namespace");
    match namespace {
        NamespaceRule::Unchecked => {}
        NamespaceRule::Required | NamespaceRule::IfSet if ns.is_empty() => {
            if namespace == NamespaceRule::Required {
                causes.push(Cause::required(&ns_field, ""));
            }
        }
        NamespaceRule::Required | NamespaceRule::IfSet => {
            for msg in validate_name(ns, NameRule::Label, false) {
                causes.push(Cause::invalid(&ns_field, Value::from(ns), msg));
            }
        }
        NamespaceRule::Forbidden => {
            if !ns.is_empty() {
                causes.push(Cause::forbidden(&ns_field, "not allowed on this type"));
            }
        }
    }
    if let Some(generation) = meta.get("generation").and_then(Value::as_i64)
        && generation < 0
    {
        causes.push(Cause::invalid(
            &child(path, "generation"),
            Value::from(generation),
            "must be greater than or equal to 0",
        ));
    }
    validate_labels(meta.get("labels"), &child(path, "labels"), &mut causes);
    validate_annotations(
        meta.get("annotations"),
        &child(path, "annotations"),
        &mut causes,
    );
    validate_owner_references(
        meta.get("ownerReferences"),
        &child(path, "ownerReferences"),
        &mut causes,
    );
    validate_finalizers(
        meta.get("finalizers"),
        &child(path, "finalizers"),
        &mut causes,
    );
    causes
}

fn string_map(v: Option<&Value>) -> Vec<(&str, &str)> {
    v.and_then(Value::as_object)
        .map(|m: &Map<String, Value>| {
            m.iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default()
}

/// `ValidateLabels`: every key as a qualified name, every value as a label value.
fn validate_labels(labels: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    for (k, v) in string_map(labels) {
        for msg in label_key(k) {
            causes.push(Cause::invalid(field, Value::from(k), msg));
        }
        for msg in label_value(v) {
            causes.push(Cause::invalid(field, Value::from(v), msg));
        }
    }
}

/// `ValidateAnnotations`: keys as (case-insensitive) qualified names, total size limit.
fn validate_annotations(annotations: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    let entries = string_map(annotations);
    let mut total = 0usize;
    for (k, v) in &entries {
        for msg in label_key(&k.to_lowercase()) {
            causes.push(Cause::invalid(field, Value::from(*k), msg));
        }
        total = total.saturating_add(k.len()).saturating_add(v.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        causes.push(Cause::too_long(field, Some(TOTAL_ANNOTATION_SIZE_LIMIT)));
    }
}

/// `ValidateOwnerReferences`.
fn validate_owner_references(refs: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    let Some(refs) = refs.and_then(Value::as_array) else {
        return;
    };
    let mut first_controller: Option<String> = None;
    for r in refs {
        let api_version = str_at(r, "apiVersion");
        let kind = str_at(r, "kind");
        // schema.ParseGroupVersion: more than one '/' is an error, which leaves the version empty.
        let version = match api_version.matches('/').count() {
            0 => api_version,
            1 => api_version.split_once('/').map_or("", |(_, v)| v),
            _ => "",
        };
        let group = match api_version.matches('/').count() {
            1 => api_version.split_once('/').map_or("", |(g, _)| g),
            _ => "",
        };
        if version.is_empty() {
            causes.push(Cause::invalid(
                &format!("{field}.apiVersion"),
                Value::from(api_version),
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            causes.push(Cause::invalid(
                &format!("{field}.kind"),
                Value::from(kind),
                "must not be empty",
            ));
        }
        let name = str_at(r, "name");
        if name.is_empty() {
            causes.push(Cause::invalid(
                &format!("{field}.name"),
                Value::from(name),
                "must not be empty",
            ));
        }
        let uid = str_at(r, "uid");
        if uid.is_empty() {
            causes.push(Cause::invalid(
                &format!("{field}.uid"),
                Value::from(uid),
                "must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            causes.push(Cause::invalid(
                field,
                typed_owner_reference(r),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => causes.push(Cause::invalid(
                    field,
                    Value::Array(refs.iter().map(typed_owner_reference).collect()),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
}

/// An owner reference as the typed `metav1.OwnerReference` holds it: the four string fields
/// always (empty when missing), `controller` and `blockOwnerDeletion` only when set.
fn typed_owner_reference(r: &Value) -> Value {
    let mut typed = Map::new();
    for key in ["apiVersion", "kind", "name", "uid"] {
        typed.insert(key.to_string(), Value::from(str_at(r, key)));
    }
    for key in ["controller", "blockOwnerDeletion"] {
        if let Some(b) = r.get(key).and_then(Value::as_bool) {
            typed.insert(key.to_string(), Value::Bool(b));
        }
    }
    Value::Object(typed)
}

/// `ValidateFinalizers`.
fn validate_finalizers(finalizers: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    let Some(list) = finalizers.and_then(Value::as_array) else {
        return;
    };
    let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    for f in &names {
        for msg in label_key(f) {
            causes.push(Cause::invalid(field, Value::from(*f), msg));
        }
    }
    if names.contains(&"orphan") && names.contains(&"foregroundDeletion") {
        causes.push(Cause::invalid(
            field,
            Value::Array(list.clone()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Go value rendering, shared with the schema validator.
// ---------------------------------------------------------------------------------------------

/// How `ErrorBody` (apimachinery v0.34) prints a bad value: a string with `%q`, a number or bool
/// with `%v`, everything else — `null`, lists, maps, structs — as `json.Marshal` writes it.
///
/// Values decoded from JSON hold int64 or float64 numbers, both printed with `%v`. A Go `int`
/// (a count, say) would be marshalled instead, which prints the same digits.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => go_quote(s),
        Value::Null | Value::Array(_) | Value::Object(_) => go_json(v),
    }
}

/// A JSON number as Go holds it after decoding (int64 when it fits, else float64), printed with `%v`.
pub fn go_number(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(0.0)),
    }
}

/// The fields of the Go structs validators pass as bad values, in declaration order: the
/// required ones (always written), then all of them. `encoding/json` writes a struct's fields in
/// that order but a map's keys sorted, and a `Value` cannot tell the two apart; an object with
/// every required field and no other than the struct's is taken for that struct.
/// The fields of apiextensions' internal `ValidationRule`, all always written.
const VALIDATION_RULE_FIELDS: &[&str] = &[
    "Rule",
    "Message",
    "MessageExpression",
    "Reason",
    "FieldPath",
    "OptionalOldSelf",
];

const GO_STRUCTS: &[(&[&str], &[&str])] = &[
    // apiextensions.ValidationRule (the internal type: Go's field names, none omitted)
    (VALIDATION_RULE_FIELDS, VALIDATION_RULE_FIELDS),
    // metav1.OwnerReference
    (
        &["apiVersion", "kind", "name", "uid"],
        &[
            "apiVersion",
            "kind",
            "name",
            "uid",
            "controller",
            "blockOwnerDeletion",
        ],
    ),
    // The internal core.ObjectReference and core.EventSource (no JSON names, no omitempty).
    (INTERNAL_OBJECT_REFERENCE, INTERNAL_OBJECT_REFERENCE),
    (INTERNAL_EVENT_SOURCE, INTERNAL_EVENT_SOURCE),
];

/// The fields of the internal `core.ObjectReference`, each always written.
const INTERNAL_OBJECT_REFERENCE: &[&str] = &[
    "Kind",
    "Namespace",
    "Name",
    "UID",
    "APIVersion",
    "ResourceVersion",
    "FieldPath",
];

/// The fields of the internal `core.EventSource`, each always written.
const INTERNAL_EVENT_SOURCE: &[&str] = &["Component", "Host"];

/// `json.Marshal` of decoded JSON (`encoding/json` of Go 1.24): map keys sorted, HTML characters
/// and U+2028/U+2029 escaped, floats in the ES6 style (`1e-7`, `1e+21`, otherwise plain digits).
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out, 0);
    out
}

fn write_go_json(v: &Value, out: &mut String, depth: usize) {
    if depth > 256 {
        out.push_str("null");
        return;
    }
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => write_go_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out, depth + 1);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let struct_order = GO_STRUCTS.iter().find_map(|(required, all)| {
                let fits = required.iter().all(|k| m.contains_key(*k))
                    && m.keys().all(|k| all.contains(&k.as_str()));
                fits.then_some(*all)
            });
            let keys: Vec<&str> = match struct_order {
                Some(order) => order
                    .iter()
                    .copied()
                    .filter(|k| m.contains_key(*k))
                    .collect(),
                // serde_json's map iterates in key order, which is Go's (bytewise) order.
                None => m.keys().map(String::as_str).collect(),
            };
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(k, out);
                out.push(':');
                write_go_json(&m[k], out, depth + 1);
            }
            out.push('}');
        }
    }
}

/// `encoding/json`'s `appendString` with HTML escaping on.
fn write_go_json_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{0}'..='\u{1f}' => {
                let b = c as u32;
                out.push_str("\\u00");
                out.push(char::from(HEX[(b >> 4) as usize & 0xf]));
                out.push(char::from(HEX[b as usize & 0xf]));
            }
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `encoding/json`'s float64 encoder: `strconv.FormatFloat(f, 'f', -1, 64)`, or the `'e'` form
/// below 1e-6 and from 1e21 on with a one-digit negative exponent (`1e-7`, not `1e-07`).
fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        // json.Marshal refuses these; decoded JSON never holds them.
        return go_float(f);
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = go_float(f);
        // go_float writes the same shortest digits; only the exponent's padding differs.
        return match s.find("e-0") {
            Some(i) if s.len() == i + 4 => format!("{}e-{}", &s[..i], &s[i + 3..]),
            _ => s,
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Shortest round-tripping digits, written out without an exponent.
    let e = format!("{:e}", abs);
    let (mantissa, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let nd = digits.len() as i32;
    let dp = exp + 1;
    let mut out = String::new();
    if f < 0.0 {
        out.push('-');
    }
    if dp <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', dp.unsigned_abs() as usize));
        out.push_str(&digits);
    } else if dp >= nd {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (dp - nd) as usize));
    } else {
        out.push_str(&digits[..dp as usize]);
        out.push('.');
        out.push_str(&digits[dp as usize..]);
    }
    out
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits, in
/// exponent form when the decimal exponent is below -4 or at least 6.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-tripping digits, like Go's shortest formatting.
    let e = format!("{:e}", f.abs());
    let (mantissa, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.as_bytes();
    let nd = digits.len() as i32;
    let dp = exp + 1;
    let mut out = String::new();
    if f < 0.0 {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        out.push(char::from(digits[0]));
        if nd > 1 {
            out.push('.');
            out.extend(digits[1..].iter().map(|d| char::from(*d)));
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let ae = exp.unsigned_abs();
        if ae < 10 {
            out.push('0');
        }
        out.push_str(&ae.to_string());
        return out;
    }
    let digit_at = |i: i32| -> char {
        if i >= 0 && i < nd {
            char::from(digits[i as usize])
        } else {
            '0'
        }
    };
    if dp > 0 {
        for i in 0..dp {
            out.push(digit_at(i));
        }
    } else {
        out.push('0');
    }
    let decimals = (nd - dp).max(0);
    if decimals > 0 {
        out.push('.');
        for i in 0..decimals {
            out.push(digit_at(dp + i));
        }
    }
    out
}

/// Go's `strconv.Quote` (`%q`): printable runes kept, the rest escaped.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_is_print(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint`: graphic characters and the ASCII space.
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
        | 0xE000..=0xF8FF | 0xF0000..=0x10FFFF | 0xFFFE | 0xFFFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    #[test]
    fn a_valid_subdomain_has_no_messages() {
        assert!(dns1123_subdomain("example.com").is_empty());
        assert!(dns1123_subdomain("a").is_empty());
        assert!(dns1123_subdomain("my-app.v1.cache.example.com").is_empty());
    }

    #[test]
    fn an_invalid_subdomain_gets_the_rfc_1123_subdomain_message() {
        assert_eq!(
            dns1123_subdomain("Bad_Name"),
            vec![SUBDOMAIN_MSG.to_string()]
        );
        assert_eq!(dns1123_subdomain("a..b"), vec![SUBDOMAIN_MSG.to_string()]);
        assert_eq!(dns1123_subdomain("-a"), vec![SUBDOMAIN_MSG.to_string()]);
        assert_eq!(dns1123_subdomain(""), vec![SUBDOMAIN_MSG.to_string()]);
    }

    #[test]
    fn a_subdomain_over_253_characters_gets_both_length_and_shape_messages_when_both_fail() {
        let long = "a".repeat(254);
        assert_eq!(
            dns1123_subdomain(&long),
            vec!["must be no more than 253 characters".to_string()]
        );
        let long_bad = format!("{}_", "a".repeat(254));
        assert_eq!(
            dns1123_subdomain(&long_bad),
            vec![
                "must be no more than 253 characters".to_string(),
                SUBDOMAIN_MSG.to_string()
            ]
        );
    }

    #[test]
    fn the_label_message_lists_its_two_examples_with_go_spacing() {
        // RegexError appends "', " after each example and " or " between them.
        assert_eq!(dns1123_label("Kube-System"), vec![LABEL_MSG.to_string()]);
        assert_eq!(
            dns1123_label("kube.system")[0],
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn label_keys_are_qualified_names_with_an_optional_prefix() {
        assert!(label_key("app").is_empty());
        assert!(label_key("app.kubernetes.io/name").is_empty());
        assert_eq!(
            label_key("bad key"),
            vec!["name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string()]
        );
        assert_eq!(
            label_key("/a"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(
            label_key("Example.com/a")[0],
            format!("prefix part {SUBDOMAIN_MSG}")
        );
        assert_eq!(
            label_key("a/"),
            vec![
                "name part must be non-empty".to_string(),
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string()
            ]
        );
        assert_eq!(
            label_key("a/b/c"),
            vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string()]
        );
        assert_eq!(
            label_key(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn label_values_may_be_empty_but_not_malformed_or_long() {
        assert!(label_value("").is_empty());
        assert!(label_value("my_value.1").is_empty());
        assert_eq!(
            label_value("-x"),
            vec!["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string()]
        );
        assert_eq!(
            label_value(&"v".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn path_segment_names_refuse_only_dots_slashes_and_percent() {
        assert!(path_segment_name("system:controller:x").is_empty());
        assert_eq!(path_segment_name(".."), vec!["may not be '..'".to_string()]);
        assert_eq!(
            path_segment_name("a/b%c"),
            vec![
                "may not contain '/'".to_string(),
                "may not contain '%'".to_string()
            ]
        );
    }

    #[test]
    fn an_invalid_name_renders_like_the_real_cause_fragment() {
        let causes = validate_object_meta(&json!({"name": "Bad_Name"}), NameRule::Subdomain);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
        assert_eq!(causes[0].reason, "FieldValueInvalid");
        assert_eq!(
            causes[0].to_string(),
            format!("metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}")
        );
        assert_eq!(
            causes[0].body(),
            format!("Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}")
        );
    }

    #[test]
    fn a_missing_name_is_required_unless_generate_name_is_set_and_valid() {
        let causes = validate_object_meta(&json!({}), NameRule::Subdomain);
        assert_eq!(
            causes[0].to_string(),
            "metadata.name: Required value: name or generateName is required"
        );
        assert_eq!(causes[0].reason, "FieldValueRequired");
        // generateName is validated (trailing dash masked); the name itself is checked after generation.
        let causes = validate_object_meta(&json!({"generateName": "web-"}), NameRule::Subdomain);
        assert_eq!(
            causes.len(),
            1,
            "only the missing generated name: {causes:?}"
        );
        let causes = validate_object_meta(
            &json!({"generateName": "Web-", "name": "web-abcde"}),
            NameRule::Subdomain,
        );
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.generateName");
        assert!(causes[0].to_string().starts_with(
            "metadata.generateName: Invalid value: \"Web-\": a lowercase RFC 1123 subdomain"
        ));
    }

    #[test]
    fn namespaces_use_the_label_rule_and_rbac_names_the_path_segment_rule() {
        let causes = validate_object_meta(&json!({"name": "my.ns"}), NameRule::Label);
        assert_eq!(
            causes[0].to_string(),
            "metadata.name: Invalid value: \"my.ns\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert!(
            validate_object_meta(&json!({"name": "system:Admin"}), NameRule::PathSegment)
                .is_empty()
        );
        let causes = validate_object_meta(&json!({"name": "a/b"}), NameRule::PathSegment);
        assert_eq!(
            causes[0].to_string(),
            "metadata.name: Invalid value: \"a/b\": may not contain '/'"
        );
    }

    #[test]
    fn labels_report_keys_and_values_under_metadata_labels() {
        let causes = validate_object_meta(
            &json!({"name": "x", "labels": {"bad key": "ok", "k": "-bad"}}),
            NameRule::Subdomain,
        );
        assert_eq!(causes.len(), 2);
        assert!(causes.iter().all(|c| c.field == "metadata.labels"));
        assert!(
            causes[0]
                .to_string()
                .starts_with("metadata.labels: Invalid value: \"bad key\": name part must consist")
        );
        assert!(causes[1].to_string().starts_with(
            "metadata.labels: Invalid value: \"-bad\": a valid label must be an empty string"
        ));
    }

    #[test]
    fn oversized_annotations_are_too_long_without_the_value() {
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let causes = validate_object_meta(
            &json!({"name": "x", "annotations": {"a": big}}),
            NameRule::Subdomain,
        );
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].reason, "FieldValueTooLong");
        assert_eq!(
            causes[0].to_string(),
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
    }

    #[test]
    fn annotation_keys_are_checked_case_insensitively() {
        let causes = validate_object_meta(
            &json!({"name": "x", "annotations": {"Example.COM/Key": "v", "bad key": "v"}}),
            NameRule::Subdomain,
        );
        assert_eq!(causes.len(), 1);
        assert!(causes[0].to_string().starts_with(
            "metadata.annotations: Invalid value: \"bad key\": name part must consist"
        ));
    }

    #[test]
    fn namespace_rules_require_forbid_or_check_the_namespace() {
        let meta = json!({"name": "x"});
        let causes = validate_object_meta_with(
            &meta,
            NameRule::Subdomain,
            NamespaceRule::Required,
            "metadata",
        );
        assert_eq!(causes[0].to_string(), "metadata.namespace: Required value");
        let meta = json!({"name": "x", "namespace": "default"});
        let causes = validate_object_meta_with(
            &meta,
            NameRule::Subdomain,
            NamespaceRule::Forbidden,
            "metadata",
        );
        assert_eq!(
            causes[0].to_string(),
            "metadata.namespace: Forbidden: not allowed on this type"
        );
        let meta = json!({"name": "x", "namespace": "Bad"});
        let causes = validate_object_meta_with(
            &meta,
            NameRule::Subdomain,
            NamespaceRule::IfSet,
            "spec.template.metadata",
        );
        assert_eq!(causes[0].field, "spec.template.metadata.namespace");
    }

    #[test]
    fn generation_owner_references_and_finalizers_are_checked() {
        let meta = json!({
            "name": "x",
            "generation": -1,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "1", "controller": true},
                {"apiVersion": "", "kind": "", "name": "", "uid": "", "controller": true}
            ],
            "finalizers": ["orphan", "foregroundDeletion", "bad finalizer"]
        });
        let causes = validate_object_meta(&meta, NameRule::Subdomain);
        let rendered: Vec<String> = causes.iter().map(ToString::to_string).collect();
        assert_eq!(
            rendered[0],
            "metadata.generation: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            rendered[1],
            "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty"
        );
        assert_eq!(
            rendered[2],
            "metadata.ownerReferences.kind: Invalid value: \"\": must not be empty"
        );
        assert!(rendered[5].ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for Deployment/d and /"
        ));
        assert!(rendered[6].starts_with(
            "metadata.finalizers: Invalid value: \"bad finalizer\": name part must consist"
        ));
        assert!(
            rendered[7].ends_with("finalizer orphan and foregroundDeletion cannot be both set")
        );
    }

    #[test]
    fn aggregate_prints_one_error_plainly_and_several_in_brackets_without_duplicates() {
        let a = Cause::required("spec.size", "");
        let b = Cause::invalid("spec.x", json!(1), "must be greater than 1");
        assert_eq!(
            aggregate(std::slice::from_ref(&a)),
            "spec.size: Required value"
        );
        assert_eq!(
            aggregate(&[a.clone(), b.clone(), a.clone()]),
            "[spec.size: Required value, spec.x: Invalid value: 1: must be greater than 1]"
        );
        assert_eq!(aggregate(&[]), "");
    }

    #[test]
    fn scalars_render_with_go_percent_v_and_percent_q() {
        assert_eq!(go_value(&json!(-1)), "-1");
        assert_eq!(go_value(&json!(1.5)), "1.5");
        assert_eq!(go_value(&json!(1e6)), "1e+06");
        assert_eq!(go_value(&json!(true)), "true");
        assert_eq!(go_value(&json!("a\"b\n")), "\"a\\\"b\\n\"");
    }

    #[test]
    fn null_lists_and_maps_render_as_json_since_apimachinery_1_34() {
        assert_eq!(go_value(&Value::Null), "null");
        assert_eq!(
            go_value(&json!({"b": 1, "a": "x"})),
            "{\"a\":\"x\",\"b\":1}"
        );
        assert_eq!(go_value(&json!(["a", null, 2.5])), "[\"a\",null,2.5]");
        assert_eq!(go_value(&json!({})), "{}");
        assert_eq!(
            Cause::duplicate("spec.ports[1]", json!({"port": 80})).to_string(),
            "spec.ports[1]: Duplicate value: {\"port\":80}"
        );
        assert_eq!(
            Cause::invalid("spec.x", Value::Null, "must be set").to_string(),
            "spec.x: Invalid value: null: must be set"
        );
    }

    #[test]
    fn json_rendering_escapes_and_formats_like_encoding_json() {
        assert_eq!(go_json(&json!("<a&b>")), "\"\\u003ca\\u0026b\\u003e\"");
        assert_eq!(
            go_json(&json!("\u{1}\u{8}\u{c}\n\r\t\u{2028}é")),
            "\"\\u0001\\b\\f\\n\\r\\t\\u2028é\""
        );
        assert_eq!(
            go_json(&json!([1e6, 1e20, 1e21, 1e-6, 1e-7, 0.000123, -2.5, 1.0])),
            "[1000000,100000000000000000000,1e+21,0.000001,1e-7,0.000123,-2.5,1]"
        );
        assert_eq!(go_json(&json!(1.5e-300)), "1.5e-300");
        assert_eq!(go_json(&json!(u64::MAX)), "18446744073709552000");
    }

    #[test]
    fn owner_references_render_in_struct_field_order() {
        let meta = json!({"name": "x", "ownerReferences": [
            {"uid": "1", "name": "a", "kind": "Deployment", "apiVersion": "apps/v1", "controller": true},
            {"uid": "2", "name": "b", "kind": "ReplicaSet", "apiVersion": "apps/v1", "controller": true, "bogus": 1}
        ]});
        let causes = validate_object_meta(&meta, NameRule::Subdomain);
        assert_eq!(
            causes[0].to_string(),
            "metadata.ownerReferences: Invalid value: [{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"a\",\"uid\":\"1\",\"controller\":true},{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"b\",\"uid\":\"2\",\"controller\":true}]: Only one reference can have Controller set to true. Found \"true\" in references for Deployment/a and ReplicaSet/b"
        );
        let event = json!({"name": "x", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"}
        ]});
        assert_eq!(
            validate_object_meta(&event, NameRule::Subdomain)[0].to_string(),
            "metadata.ownerReferences: Invalid value: {\"apiVersion\":\"v1\",\"kind\":\"Event\",\"name\":\"e\",\"uid\":\"u\"}: /v1, Kind=Event is disallowed from being an owner"
        );
    }

    #[test]
    fn limits_of_one_are_worded_in_the_singular() {
        assert_eq!(
            Cause::too_long("f", Some(1)).to_string(),
            "f: Too long: may not be more than 1 byte"
        );
        assert_eq!(
            Cause::too_many("f", 2, Some(1)).to_string(),
            "f: Too many: 2: must have at most 1 item"
        );
    }

    #[test]
    fn config_map_keys_are_checked_like_is_config_map_key() {
        assert!(config_map_key("key.name").is_empty());
        assert!(config_map_key("KEY_NAME-1").is_empty());
        assert!(config_map_key(".hidden").is_empty());
        assert_eq!(
            config_map_key("a b"),
            vec!["a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".to_string()]
        );
        assert_eq!(config_map_key("."), vec!["must not be '.'".to_string()]);
        assert_eq!(config_map_key(".."), vec!["must not be '..'".to_string()]);
        assert_eq!(
            config_map_key("..a"),
            vec!["must not start with '..'".to_string()]
        );
        assert_eq!(config_map_key("").len(), 1);
        assert_eq!(
            config_map_key(&"a".repeat(254)),
            vec!["must be no more than 253 characters".to_string()]
        );
        assert_eq!(config_map_key("é").len(), 1);
    }

    #[test]
    fn floats_use_go_shortest_g_formatting() {
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1000000.0), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-2.5), "-2.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(123.456), "123.456");
    }

    #[test]
    fn quoting_escapes_control_and_invisible_characters() {
        assert_eq!(go_quote("é"), "\"é\"");
        assert_eq!(go_quote("\u{1}"), "\"\\x01\"");
        assert_eq!(go_quote("\u{a0}"), "\"\\u00a0\"");
        assert_eq!(go_quote("\u{feff}"), "\"\\ufeff\"");
    }

    #[test]
    fn causes_render_every_error_type_like_field_error_body() {
        assert_eq!(
            Cause::not_supported("spec.x", json!("c"), &["a".into(), "b".into()]).to_string(),
            "spec.x: Unsupported value: \"c\": supported values: \"a\", \"b\""
        );
        assert_eq!(
            Cause::too_many("spec.l", 3, None).to_string(),
            "spec.l: Too many: 3: has too many items"
        );
        assert_eq!(
            Cause::too_many("spec.l", 3, Some(2)).to_string(),
            "spec.l: Too many: 3: must have at most 2 items"
        );
        assert_eq!(
            Cause::too_long("spec.s", None).to_string(),
            "spec.s: Too long: value is too long"
        );
        assert_eq!(
            Cause::duplicate("spec.l[1]", json!("a")).to_string(),
            "spec.l[1]: Duplicate value: \"a\""
        );
        assert_eq!(
            Cause::forbidden("spec", "nope").to_string(),
            "spec: Forbidden: nope"
        );
        assert_eq!(
            Cause::type_invalid("spec.size", json!("string"), "d").body(),
            "Invalid value: \"string\": d"
        );
        let c = Cause::from_reason("f", json!(1), "FieldValueNotFound", "").unwrap_or_else(|e| {
            panic!("known reason refused: {e}");
        });
        assert_eq!(c.to_string(), "f: Not found: 1");
        assert_eq!(
            Cause::from_reason("f", json!(1), "Bogus", ""),
            Err(Error::UnknownReason("Bogus".into()))
        );
    }

    #[test]
    fn non_ascii_names_and_odd_inputs_never_panic() {
        assert!(!validate_name("é-", NameRule::Subdomain, true).is_empty());
        assert!(validate_name("web-", NameRule::Subdomain, true).is_empty());
        for s in ["é-", "-", "ü", "a-", "\u{0}", "ß/ß", "////", "é/"] {
            let _ = validate_name(s, NameRule::Subdomain, true);
            let _ = validate_name(s, NameRule::Label, true);
            let _ = label_key(s);
            let _ = label_value(s);
        }
        let causes = validate_object_meta(&json!("not an object"), NameRule::Subdomain);
        assert_eq!(causes.len(), 1);
        let causes = validate_object_meta(
            &json!({"name": 5, "labels": [1], "annotations": "x", "finalizers": {}}),
            NameRule::Subdomain,
        );
        assert_eq!(causes.len(), 1);
    }
}
