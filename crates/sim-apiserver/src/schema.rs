//! A CRD version's `openAPIV3Schema` (structural schema) applied to custom resources as the
//! kube-apiserver 1.32 does: pruning of unknown fields, defaulting, and validation with the
//! kube-openapi messages that apiextensions turns into `field.Error`s.
//!
//! Validation follows kube-openapi's `SchemaValidator` (validators run in its order: type,
//! allOf/anyOf/oneOf/not, string, format, number, array, enum, object; anyOf/oneOf report the
//! branch with the highest match count), then apiextensions' embedded-resource checks, then the
//! `x-kubernetes-list-type` set/map uniqueness checks. The CEL rules (`x-kubernetes-validations`)
//! and the ratcheting of these checks' causes on updates are [`super::validation_rules`]'s.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};
use thiserror::Error;

use super::names::{self, Cause, NameRule, NamespaceRule};

/// How deep a schema may nest, and how deep data is followed.
const MAX_DEPTH: usize = 128;

/// Why a schema was refused: the structural-schema rule broken and where (relative to
/// `openAPIV3Schema`), in the apiserver's field-error style.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// The schema, or a nested schema, is not a JSON object.
    #[error("{}Invalid value: must be a schema object", at(.field))]
    NotAnObject {
        /// Where.
        field: String,
    },
    /// The root has no `type`.
    #[error("type: Required value: must not be empty at the root")]
    RootTypeRequired,
    /// The root `type` is not `object`.
    #[error("type: Invalid value: {}: must be object at the root", names::go_quote(.0))]
    RootTypeNotObject(String),
    /// A nested schema has no `type` (and is neither int-or-string nor preserve-unknown-fields).
    #[error("{field}: Required value: must not be empty for specified {what}")]
    TypeRequired {
        /// Where (`….type`).
        field: String,
        /// `object fields` or `array items`.
        what: &'static str,
    },
    /// `type` is not one of the JSON schema types.
    #[error("{field}: Unsupported value: {}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"", names::go_quote(.value))]
    UnsupportedType {
        /// Where (`….type`).
        field: String,
        /// The type given.
        value: String,
    },
    /// An array schema without `items`.
    #[error("{field}: Required value: must be specified")]
    ItemsRequired {
        /// Where (`….items`).
        field: String,
    },
    /// A keyword or combination that structural schemas forbid.
    #[error("{field}: Forbidden: {detail}")]
    Forbidden {
        /// Where.
        field: String,
        /// Why.
        detail: String,
    },
    /// A keyword with a value of the wrong shape.
    #[error("{field}: Invalid value: {detail}")]
    Invalid {
        /// Where.
        field: String,
        /// What is wrong.
        detail: String,
    },
    /// A `pattern` that is not a valid (RE2) regular expression.
    #[error("{field}: Invalid value: {}: must be a valid regular expression, but isn't: {source}", names::go_quote(.pattern))]
    Pattern {
        /// Where (`….pattern`).
        field: String,
        /// The pattern.
        pattern: String,
        /// What the regular expression parser said.
        #[source]
        source: PatternError,
    },
}

fn at(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

/// A CRD version's structural `openAPIV3Schema`.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema(Value);

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// Formats CRD schemas validate in 1.32 (with `-` removed, as go-openapi normalizes names).
const SUPPORTED_STRING_FORMATS: [&str; 23] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
];

impl Schema {
    /// Checks the structural basics the apiserver enforces on CRD schemas (object root, a
    /// `type` everywhere, `items` for arrays, no `$ref`, `properties` and
    /// `additionalProperties` not both, valid list types and patterns) and wraps the schema.
    pub fn new(openapi_v3_schema: Value) -> Result<Self, Error> {
        let Some(root) = openapi_v3_schema.as_object() else {
            return Err(Error::NotAnObject {
                field: String::new(),
            });
        };
        match root.get("type") {
            None => return Err(Error::RootTypeRequired),
            Some(Value::String(t)) if t == "object" => {}
            Some(Value::String(t)) => return Err(Error::RootTypeNotObject(t.clone())),
            Some(other) => return Err(Error::RootTypeNotObject(other.to_string())),
        }
        check_node(&openapi_v3_schema, "", Ctx::Root, 0)?;
        if let Some(meta) = properties(&openapi_v3_schema).and_then(|p| p.get("metadata")) {
            let extra = properties(meta)
                .is_some_and(|p| p.keys().any(|k| k != "name" && k != "generateName"));
            if extra {
                return Err(Error::Forbidden {
                    field: "properties[metadata]".to_string(),
                    detail: "must not specify anything other than name and generateName, but metadata is implicitly specified".to_string(),
                });
            }
        }
        Ok(Self(openapi_v3_schema))
    }

    /// The schema as given.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// Drops fields the schema does not describe (unless `x-kubernetes-preserve-unknown-fields`),
    /// as the server does when decoding a custom resource: `apiVersion`, `kind` and `metadata`
    /// at the root and in embedded resources are kept (unknown fields inside an embedded
    /// resource's `metadata` are dropped), then `null`s the schema neither allows (`nullable`)
    /// nor defaults are removed.
    pub fn prune(&self, obj: &mut Value) {
        prune(obj, Some(&self.0), true, 0);
        prune_nulls(obj, Some(&self.0), 0);
    }

    /// Applies `default`s where a field is absent (or a non-nullable `null`), recursively and
    /// only inside objects that exist, as the server does on every decode (write and read).
    pub fn apply_defaults(&self, obj: &mut Value) {
        apply_defaults(obj, Some(&self.0), 0);
    }

    /// Validates a custom resource: the causes the apiserver reports, in its formats (root
    /// `metadata` is validated by the caller through `names`; the schema's own constraints on it,
    /// if it declares any, apply here).
    pub fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut v = Validator {
            patterns: HashMap::new(),
        };
        let result = v.schema(&self.0, "", obj, 0);
        let mut causes: Vec<Cause> = result.errors.into_iter().map(to_cause).collect();
        embedded_validate("", obj, Some(&self.0), 0, &mut causes);
        if let Some(map) = obj.as_object() {
            list_validate_object("", &self.0, map, 0, &mut causes);
        }
        causes
    }
}

// ---------------------------------------------------------------------------------------------
// Schema access helpers.
// ---------------------------------------------------------------------------------------------

fn kw<'a>(s: &'a Value, key: &str) -> Option<&'a Value> {
    s.get(key)
}

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

/// `additionalProperties`: absent, a bool, or a schema.
enum Additional<'a> {
    Absent,
    Allows(bool),
    Schema(&'a Value),
}

fn additional(s: &Value) -> Additional<'_> {
    match s.get("additionalProperties") {
        None | Some(Value::Null) => Additional::Absent,
        Some(Value::Bool(b)) => Additional::Allows(*b),
        Some(v) => Additional::Schema(v),
    }
}

/// The schema of `additionalProperties` as the structural schema holds it (a bool gives none).
fn additional_schema(s: &Value) -> Option<Option<&Value>> {
    match additional(s) {
        Additional::Absent => None,
        Additional::Allows(_) => Some(None),
        Additional::Schema(v) => Some(Some(v)),
    }
}

fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|v| v.is_object())
}

fn sorted_keys(m: &Map<String, Value>) -> Vec<&String> {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    keys
}

fn int_kw(s: &Value, key: &str) -> Option<i64> {
    let v = s.get(key)?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

/// The types kube-openapi checks: `type`, or `integer,string` for int-or-string.
fn schema_types(s: &Value) -> Vec<&str> {
    if flag(s, "x-kubernetes-int-or-string") {
        return vec!["integer", "string"];
    }
    match s.get("type").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => vec![t],
        _ => Vec::new(),
    }
}

/// The `format` left after apiextensions strips formats it does not support for the type.
fn effective_format<'a>(s: &'a Value, types: &[&str]) -> &'a str {
    let format = s.get("format").and_then(Value::as_str).unwrap_or("");
    if format.is_empty() {
        return "";
    }
    let single = if types.len() == 1 { types[0] } else { "" };
    let keep = match single {
        "" | "string" => {
            let normalized = format.replace('-', "");
            normalized == "datetime" || SUPPORTED_STRING_FORMATS.contains(&normalized.as_str())
        }
        "integer" => format == "int32" || format == "int64",
        "number" => format == "float" || format == "double",
        _ => false,
    };
    if keep { format } else { "" }
}

// ---------------------------------------------------------------------------------------------
// Structural checks for Schema::new.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Root,
    Property,
    Items,
    /// Inside allOf/anyOf/oneOf/not: value validation only, no type needed.
    ValueValidation,
}

fn join(field: &str, part: &str) -> String {
    if field.is_empty() {
        part.to_string()
    } else {
        format!("{field}.{part}")
    }
}

fn check_node(node: &Value, field: &str, ctx: Ctx, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::Forbidden {
            field: field.to_string(),
            detail: format!("must not be nested more than {MAX_DEPTH} levels deep"),
        });
    }
    let Some(s) = node.as_object() else {
        return Err(Error::NotAnObject {
            field: field.to_string(),
        });
    };
    for (keyword, detail) in [
        ("$ref", "$ref is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("dependencies", "dependencies are not supported"),
        ("definitions", "definitions are not supported"),
    ] {
        if s.contains_key(keyword) {
            return Err(Error::Forbidden {
                field: join(field, keyword),
                detail: detail.to_string(),
            });
        }
    }
    if flag(node, "uniqueItems") {
        return Err(Error::Forbidden {
            field: join(field, "uniqueItems"),
            detail:
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
                    .to_string(),
        });
    }
    let ty = match s.get("type") {
        None => None,
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => Some(t.as_str()),
        Some(Value::String(t)) if t.is_empty() => None,
        Some(other) => {
            return Err(Error::UnsupportedType {
                field: join(field, "type"),
                value: other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_string),
            });
        }
    };
    let untyped_ok = flag(node, "x-kubernetes-int-or-string")
        || flag(node, "x-kubernetes-preserve-unknown-fields")
        || ctx == Ctx::ValueValidation;
    if ty.is_none() && !untyped_ok && ctx != Ctx::Root {
        return Err(Error::TypeRequired {
            field: join(field, "type"),
            what: if ctx == Ctx::Items {
                "array items"
            } else {
                "object fields"
            },
        });
    }
    if let Some(p) = s.get("properties") {
        let Some(props) = p.as_object() else {
            return Err(Error::Invalid {
                field: join(field, "properties"),
                detail: "must be an object of schemas".to_string(),
            });
        };
        for k in sorted_keys(props) {
            check_node(
                &props[k.as_str()],
                &format!("{}[{k}]", join(field, "properties")),
                if ctx == Ctx::ValueValidation {
                    ctx
                } else {
                    Ctx::Property
                },
                depth + 1,
            )?;
        }
    }
    match additional(node) {
        Additional::Absent | Additional::Allows(true) => {}
        Additional::Allows(false) | Additional::Schema(_) if s.contains_key("properties") => {
            return Err(Error::Forbidden {
                field: join(field, "additionalProperties"),
                detail: "additionalProperties and properties are mutual exclusive".to_string(),
            });
        }
        Additional::Allows(false) => {}
        Additional::Schema(ap) => check_node(
            ap,
            &join(field, "additionalProperties"),
            if ctx == Ctx::ValueValidation {
                ctx
            } else {
                Ctx::Property
            },
            depth + 1,
        )?,
    }
    match s.get("items") {
        Some(Value::Array(_)) => {
            return Err(Error::Forbidden {
                field: join(field, "items"),
                detail: "items must be a schema object and not an array".to_string(),
            });
        }
        Some(it) => check_node(
            it,
            &join(field, "items"),
            if ctx == Ctx::ValueValidation {
                ctx
            } else {
                Ctx::Items
            },
            depth + 1,
        )?,
        None if ty == Some("array") && ctx != Ctx::ValueValidation => {
            return Err(Error::ItemsRequired {
                field: join(field, "items"),
            });
        }
        None => {}
    }
    if let Some(p) = s.get("pattern") {
        let Some(p) = p.as_str() else {
            return Err(Error::Invalid {
                field: join(field, "pattern"),
                detail: "must be a string".to_string(),
            });
        };
        if let Err(source) = Regex::new(p) {
            return Err(Error::Pattern {
                field: join(field, "pattern"),
                pattern: p.to_string(),
                source,
            });
        }
    }
    if let Some(r) = s.get("required")
        && !r.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        return Err(Error::Invalid {
            field: join(field, "required"),
            detail: "must be a list of property names".to_string(),
        });
    }
    if let Some(e) = s.get("enum")
        && !e.is_array()
    {
        return Err(Error::Invalid {
            field: join(field, "enum"),
            detail: "must be a list of values".to_string(),
        });
    }
    for (keyword, positive) in [
        ("minimum", false),
        ("maximum", false),
        ("multipleOf", true),
        ("minLength", false),
        ("maxLength", false),
        ("minItems", false),
        ("maxItems", false),
    ] {
        if let Some(v) = s.get(keyword) {
            let ok = v
                .as_f64()
                .is_some_and(|f| if positive { f > 0.0 } else { true });
            if !ok {
                return Err(Error::Invalid {
                    field: join(field, keyword),
                    detail: if positive {
                        "must be a positive number".to_string()
                    } else {
                        "must be a number".to_string()
                    },
                });
            }
        }
    }
    check_list_type(node, field, ty)?;
    for keyword in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = s.get(keyword) {
            let Some(list) = list.as_array() else {
                return Err(Error::Invalid {
                    field: join(field, keyword),
                    detail: "must be a list of schemas".to_string(),
                });
            };
            for (i, sub) in list.iter().enumerate() {
                check_node(
                    sub,
                    &format!("{}[{i}]", join(field, keyword)),
                    Ctx::ValueValidation,
                    depth + 1,
                )?;
            }
        }
    }
    if let Some(not) = s.get("not") {
        check_node(not, &join(field, "not"), Ctx::ValueValidation, depth + 1)?;
    }
    Ok(())
}

fn check_list_type(node: &Value, field: &str, ty: Option<&str>) -> Result<(), Error> {
    let list_type = node.get("x-kubernetes-list-type");
    let keys = node.get("x-kubernetes-list-map-keys");
    if let Some(lt) = list_type {
        let lt_field = join(field, "x-kubernetes-list-type");
        let Some(lt) = lt.as_str().filter(|t| ["atomic", "set", "map"].contains(t)) else {
            return Err(Error::Invalid {
                field: lt_field,
                detail: format!(
                    "{}: supported values: \"atomic\", \"map\", \"set\"",
                    names::go_value(lt)
                ),
            });
        };
        if ty != Some("array") {
            return Err(Error::Invalid {
                field: lt_field,
                detail: format!(
                    "{}: must only be used if type is array",
                    names::go_quote(lt)
                ),
            });
        }
        if lt == "map" {
            let keys_field = join(field, "x-kubernetes-list-map-keys");
            let key_names: Vec<&str> = keys
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if key_names.is_empty() {
                return Err(Error::Invalid {
                    field: keys_field,
                    detail: "must not be empty if x-kubernetes-list-type is map".to_string(),
                });
            }
            let item_props = items(node).and_then(properties);
            for k in key_names {
                if !item_props.is_some_and(|p| p.contains_key(k)) {
                    return Err(Error::Invalid {
                        field: keys_field,
                        detail: format!(
                            "{}: entries must all be names of item properties",
                            names::go_quote(k)
                        ),
                    });
                }
            }
        }
        if lt != "map" && keys.is_some() {
            return Err(Error::Forbidden {
                field: join(field, "x-kubernetes-list-map-keys"),
                detail: "must only be used if x-kubernetes-list-type is map".to_string(),
            });
        }
    } else if keys.is_some() {
        return Err(Error::Forbidden {
            field: join(field, "x-kubernetes-list-map-keys"),
            detail: "must only be used if x-kubernetes-list-type is map".to_string(),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Pruning and defaulting (apiextensions structural/pruning and structural/defaulting).
// ---------------------------------------------------------------------------------------------

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// `pruning.prune`; `embedded` is `XEmbeddedResource` (forced at the resource root).
fn prune(x: &mut Value, s: Option<&Value>, root: bool, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(sch) = s
        && flag(sch, "x-kubernetes-preserve-unknown-fields")
    {
        skip_prune(x, sch, root, depth);
        return;
    }
    match x {
        Value::Object(map) => {
            let Some(sch) = s else {
                map.clear();
                return;
            };
            let embedded = root || flag(sch, "x-kubernetes-embedded-resource");
            if embedded && !root {
                clean_embedded_metadata(map);
            }
            let props = properties(sch);
            let ap = additional_schema(sch);
            map.retain(|k, v| {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                if let Some(prop) = props.and_then(|p| p.get(k)) {
                    prune(v, Some(prop), false, depth + 1);
                    true
                } else if let Some(ap) = ap {
                    prune(v, ap, false, depth + 1);
                    true
                } else {
                    false
                }
            });
        }
        Value::Array(list) => {
            let it = s.and_then(items);
            for v in list {
                prune(v, it, false, depth + 1);
            }
        }
        _ => {}
    }
}

/// `pruning.skipPrune`: keep unknown fields, but prune inside described ones.
fn skip_prune(x: &mut Value, s: &Value, root: bool, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            let embedded = root || flag(s, "x-kubernetes-embedded-resource");
            if embedded && !root {
                clean_embedded_metadata(map);
            }
            let props = properties(s);
            let ap = additional_schema(s);
            for (k, v) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = props.and_then(|p| p.get(k)) {
                    prune(v, Some(prop), false, depth + 1);
                } else if let Some(ap) = ap {
                    prune(v, ap, false, depth + 1);
                }
            }
        }
        Value::Array(list) => {
            if let Some(it) = items(s) {
                for v in list {
                    skip_prune(v, it, false, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// An embedded resource's metadata round-trips through `ObjectMeta`: unknown fields go.
fn clean_embedded_metadata(map: &mut Map<String, Value>) {
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        meta.retain(|k, _| OBJECT_META_FIELDS.contains(&k.as_str()));
    }
}

fn is_non_nullable_null_without_default(v: &Value, s: Option<&Value>) -> bool {
    v.is_null()
        && s.is_some_and(|s| !flag(s, "nullable") && s.get("default").is_none_or(Value::is_null))
}

/// The schema of a field: its property, else `additionalProperties`' schema.
fn field_schema<'a>(s: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = s?;
    if let Some(p) = properties(s).and_then(|p| p.get(key)) {
        return Some(p);
    }
    match additional(s) {
        Additional::Schema(ap) => Some(ap),
        _ => None,
    }
}

/// `defaulting.PruneNonNullableNullsWithoutDefaults`.
fn prune_nulls(x: &mut Value, s: Option<&Value>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            map.retain(|k, v| {
                let sub = field_schema(s, k);
                if is_non_nullable_null_without_default(v, sub) {
                    false
                } else {
                    prune_nulls(v, sub, depth + 1);
                    true
                }
            });
        }
        Value::Array(list) => {
            let it = s.and_then(items);
            for v in list {
                prune_nulls(v, it, depth + 1);
            }
        }
        _ => {}
    }
}

fn default_of(s: &Value) -> Option<&Value> {
    s.get("default").filter(|d| !d.is_null())
}

fn is_non_nullable_null(v: &Value, s: &Value) -> bool {
    v.is_null() && !flag(s, "nullable")
}

/// `defaulting.Default`.
fn apply_defaults(x: &mut Value, s: Option<&Value>, depth: usize) {
    let Some(s) = s else {
        return;
    };
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            let props = properties(s);
            if let Some(props) = props {
                for k in sorted_keys(props) {
                    let prop = &props[k.as_str()];
                    let Some(default) = default_of(prop) else {
                        continue;
                    };
                    let missing = map
                        .get(k.as_str())
                        .is_none_or(|v| is_non_nullable_null(v, prop));
                    if missing {
                        map.insert(k.clone(), default.clone());
                    }
                }
            }
            let ap = match additional(s) {
                Additional::Schema(ap) => Some(ap),
                _ => None,
            };
            for (k, v) in map.iter_mut() {
                if let Some(prop) = props.and_then(|p| p.get(k)) {
                    apply_defaults(v, Some(prop), depth + 1);
                } else if let Some(ap) = ap {
                    if is_non_nullable_null(v, ap)
                        && let Some(d) = default_of(ap)
                    {
                        *v = d.clone();
                    }
                    apply_defaults(v, Some(ap), depth + 1);
                }
            }
        }
        Value::Array(list) => {
            if let Some(it) = items(s) {
                for v in list {
                    if is_non_nullable_null(v, it)
                        && let Some(d) = default_of(it)
                    {
                        *v = d.clone();
                    }
                    apply_defaults(v, Some(it), depth + 1);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: a port of kube-openapi's SchemaValidator as apiextensions configures it.
// ---------------------------------------------------------------------------------------------

/// kube-openapi's error codes (`errors.Validation.Code()`) that apiextensions distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    InvalidType,
    Required,
    TooLong,
    Enum,
    MaxItems,
    /// Any other `*errors.Validation` (minimum, pattern, minItems, …): `field.Invalid`.
    Other,
}

/// One kube-openapi error. `code: None` is a plain (composite) error, which apiextensions
/// reports against no field (`<nil>`).
#[derive(Debug, Clone)]
struct OaError {
    code: Option<Code>,
    name: String,
    value: Option<Value>,
    values: Vec<Value>,
    message: String,
}

impl OaError {
    fn new(code: Code, name: &str, value: Option<Value>, message: String) -> Self {
        Self {
            code: Some(code),
            name: name.to_string(),
            value,
            values: Vec::new(),
            message,
        }
    }

    fn composite(message: String) -> Self {
        Self {
            code: None,
            name: String::new(),
            value: None,
            values: Vec::new(),
            message,
        }
    }
}

/// `validate.Result`: errors (de-duplicated by message, as `AddErrors` does) and the match count
/// used to pick the most relevant anyOf/oneOf branch.
#[derive(Debug, Default)]
struct Res {
    errors: Vec<OaError>,
    matches: u64,
}

impl Res {
    fn ok() -> Self {
        Self {
            errors: Vec::new(),
            matches: 1,
        }
    }

    fn fail(e: OaError) -> Self {
        Self {
            errors: vec![e],
            matches: 0,
        }
    }

    fn add(&mut self, e: OaError) {
        if !self.errors.iter().any(|x| x.message == e.message) {
            self.errors.push(e);
        }
    }

    fn merge(&mut self, other: Res) {
        for e in other.errors {
            self.add(e);
        }
        self.matches += other.matches;
    }

    fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// A decoded JSON number as Go holds it: int64 when it fits, float64 otherwise.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

fn num(n: &serde_json::Number) -> Num {
    match n.as_i64() {
        Some(i) => Num::Int(i),
        None => Num::Float(n.as_f64().unwrap_or(0.0)),
    }
}

/// `swag.IsFloat64AJSONInteger`.
fn is_json_integer(f: f64) -> bool {
    const MAX_JSON: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX_JSON..=MAX_JSON).contains(&f) {
        return false;
    }
    let fa = f.abs();
    let g = fa.trunc();
    fa == g || fa < 1e-9 || (fa - g) / fa < 1e-9
}

struct Validator {
    patterns: HashMap<String, Option<Regex>>,
}

impl Validator {
    /// `SchemaValidator.Validate`.
    fn schema(&mut self, s: &Value, path: &str, data: &Value, depth: usize) -> Res {
        if depth > MAX_DEPTH {
            return Res::default();
        }
        let types = schema_types(s);
        let format = effective_format(s, &types);
        let mut r = Res::default();
        if data.is_null() {
            r.merge(type_check(s, &types, format, path, data));
            r.merge(enum_check(s, path, data));
            return r;
        }
        if !types.is_empty() || !format.is_empty() {
            r.merge(type_check(s, &types, format, path, data));
            r.matches += 1;
        }
        let props = self.schema_props(s, path, data, depth);
        r.merge(props);
        r.matches += 1;
        if let Value::String(text) = data {
            r.merge(self.string_check(s, path, text));
            r.matches += 1;
            if !format.is_empty() && is_known_format(format) {
                r.merge(format_check(format, path, text));
                r.matches += 1;
            }
        }
        if let Value::Number(n) = data {
            r.merge(number_check(s, path, num(n)));
            r.matches += 1;
        }
        if let Value::Array(list) = data {
            let res = self.slice_check(s, path, list, depth);
            r.merge(res);
            r.matches += 1;
        }
        r.merge(enum_check(s, path, data));
        r.matches += 1;
        if let Value::Object(map) = data {
            let res = self.object_check(s, path, map, depth);
            r.merge(res);
            r.matches += 1;
        }
        r.matches += 1;
        r
    }

    /// `schemaPropsValidator`: anyOf, oneOf, allOf, not.
    fn schema_props(&mut self, s: &Value, path: &str, data: &Value, depth: usize) -> Res {
        let mut main = Res::default();
        let subs = |k: &str| -> Vec<&Value> {
            s.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter(|v| v.is_object()).collect())
                .unwrap_or_default()
        };
        let any_of = subs("anyOf");
        if !any_of.is_empty() {
            let mut best: Option<Res> = None;
            let mut first_success: Option<Res> = None;
            for sub in any_of {
                let r = self.schema(sub, path, data, depth + 1);
                if r.is_valid() {
                    best = None;
                    first_success = Some(r);
                    break;
                }
                if best.as_ref().is_none_or(|b| r.matches > b.matches) {
                    best = Some(r);
                }
            }
            if first_success.is_none() {
                main.add(OaError::composite(format!(
                    "{} must validate at least one schema (anyOf)",
                    names::go_quote(path)
                )));
            }
            if let Some(b) = best {
                main.merge(b);
            } else if let Some(f) = first_success {
                main.merge(f);
            }
        }
        let one_of = subs("oneOf");
        if !one_of.is_empty() {
            let mut best: Option<Res> = None;
            let mut first_success: Option<Res> = None;
            let mut validated = 0usize;
            for sub in one_of {
                let r = self.schema(sub, path, data, depth + 1);
                if r.is_valid() {
                    validated += 1;
                    best = None;
                    if first_success.is_none() {
                        first_success = Some(r);
                    }
                    continue;
                }
                if validated == 0 && best.as_ref().is_none_or(|b| r.matches > b.matches) {
                    best = Some(r);
                }
            }
            if validated != 1 {
                let extra = if validated == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {validated} valid alternatives")
                };
                main.add(OaError::composite(format!(
                    "{} must validate one and only one schema (oneOf). {extra}",
                    names::go_quote(path)
                )));
                if let Some(b) = best {
                    main.merge(b);
                }
            } else if let Some(f) = first_success {
                main.merge(f);
            }
        }
        let all_of = subs("allOf");
        if !all_of.is_empty() {
            let total = all_of.len();
            let mut validated = 0usize;
            for sub in all_of {
                let r = self.schema(sub, path, data, depth + 1);
                if r.is_valid() {
                    validated += 1;
                }
                main.merge(r);
            }
            if validated != total {
                let extra = if validated == 0 {
                    ". None validated"
                } else {
                    ""
                };
                main.add(OaError::composite(format!(
                    "{} must validate all the schemas (allOf){extra}",
                    names::go_quote(path)
                )));
            }
        }
        if let Some(not) = s.get("not").filter(|v| v.is_object())
            && self.schema(not, path, data, depth + 1).is_valid()
        {
            main.add(OaError::composite(format!(
                "{} must not validate the schema (not)",
                names::go_quote(path)
            )));
        }
        main.matches += 1;
        main
    }

    /// `stringValidator`: maxLength, minLength, pattern; the first failure only.
    fn string_check(&mut self, s: &Value, path: &str, text: &str) -> Res {
        let len = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
        if let Some(max) = int_kw(s, "maxLength")
            && len > max
        {
            return Res::fail(OaError::new(
                Code::TooLong,
                path,
                Some(Value::from(text)),
                format!("{path} in body should be at most {max} chars long"),
            ));
        }
        if let Some(min) = int_kw(s, "minLength")
            && len < min
        {
            return Res::fail(OaError::new(
                Code::Other,
                path,
                Some(Value::from(text)),
                format!("{path} in body should be at least {min} chars long"),
            ));
        }
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str) {
            let compiled = self
                .patterns
                .entry(pattern.to_string())
                .or_insert_with(|| Regex::new(pattern).ok());
            let shown = match compiled {
                Some(re) if re.is_match(text) => return Res::default(),
                Some(_) => pattern.to_string(),
                None => match Regex::new(pattern) {
                    Err(e) => format!("{pattern}, but pattern is invalid: {e}"),
                    Ok(_) => pattern.to_string(),
                },
            };
            return Res::fail(OaError::new(
                Code::Other,
                path,
                Some(Value::from(text)),
                format!("{path} in body should match '{shown}'"),
            ));
        }
        Res::default()
    }

    /// `schemaSliceValidator`: items, minItems, maxItems, uniqueItems.
    fn slice_check(&mut self, s: &Value, path: &str, list: &[Value], depth: usize) -> Res {
        let mut r = Res::default();
        if let Some(it) = items(s) {
            for (i, v) in list.iter().enumerate() {
                let res = self.schema(it, &format!("{path}[{i}]"), v, depth + 1);
                r.merge(res);
            }
        }
        let size = i64::try_from(list.len()).unwrap_or(i64::MAX);
        if let Some(min) = int_kw(s, "minItems")
            && size < min
        {
            r.add(OaError::new(
                Code::Other,
                path,
                Some(Value::from(size)),
                format!("{path} in body should have at least {min} items"),
            ));
        }
        if let Some(max) = int_kw(s, "maxItems")
            && size > max
        {
            r.add(OaError::new(
                Code::MaxItems,
                path,
                Some(Value::from(size)),
                format!("{path} in body should have at most {max} items"),
            ));
        }
        if flag(s, "uniqueItems") {
            let dup = list
                .iter()
                .enumerate()
                .any(|(i, a)| list[..i].iter().any(|b| go_deep_equal(a, b)));
            if dup {
                r.add(OaError::new(
                    Code::Other,
                    path,
                    None,
                    format!("{path} in body shouldn't contain duplicates"),
                ));
            }
        }
        r.matches += 1;
        r
    }

    /// `objectValidator`: additionalProperties, properties, required.
    fn object_check(
        &mut self,
        s: &Value,
        path: &str,
        map: &Map<String, Value>,
        depth: usize,
    ) -> Res {
        let mut r = Res::default();
        let empty = Map::new();
        let props = properties(s).unwrap_or(&empty);
        match additional(s) {
            Additional::Allows(false) => {
                for k in sorted_keys(map) {
                    if !props.contains_key(k.as_str()) {
                        r.add(OaError::new(
                            Code::Other,
                            path,
                            Some(Value::from(k.as_str())),
                            format!("{path}.{k} in body is a forbidden property"),
                        ));
                    }
                }
            }
            Additional::Schema(ap) => {
                for k in sorted_keys(map) {
                    if !props.contains_key(k.as_str()) {
                        let res =
                            self.schema(ap, &format!("{path}.{k}"), &map[k.as_str()], depth + 1);
                        r.merge(res);
                    }
                }
            }
            Additional::Absent | Additional::Allows(true) => {}
        }
        for name in sorted_keys(props) {
            if let Some(v) = map.get(name.as_str()) {
                let child = if path.is_empty() {
                    name.to_string()
                } else {
                    format!("{path}.{name}")
                };
                let res = self.schema(&props[name.as_str()], &child, v, depth + 1);
                r.merge(res);
            }
        }
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for k in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(k) {
                    r.add(OaError::new(
                        Code::Required,
                        &format!("{path}.{k}"),
                        None,
                        format!("{path}.{k} in body is required"),
                    ));
                }
            }
        }
        r
    }
}

/// `typeValidator`.
fn type_check(s: &Value, types: &[&str], format: &str, path: &str, data: &Value) -> Res {
    let joined = types.join(",");
    if data.is_null() {
        if !types.is_empty() && !types.contains(&"null") && !flag(s, "nullable") {
            return Res::fail(OaError::new(
                Code::InvalidType,
                path,
                Some(Value::from("null")),
                format!("{path} in body must be of type {joined}: \"null\""),
            ));
        }
        return Res::ok();
    }
    let (sch_type, data_format) = match data {
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) => match num(n) {
            Num::Int(_) => ("integer", "int64"),
            Num::Float(_) => ("number", "float64"),
        },
        Value::Array(_) => ("array", ""),
        _ => ("object", ""),
    };
    let float_value = data.as_f64().unwrap_or(0.0);
    let is_float_int =
        sch_type == "number" && is_json_integer(float_value) && types.contains(&"integer");
    let is_int_float = sch_type == "integer" && types.contains(&"number");
    let string_or_slice = data.is_string() || data.is_array();
    let type_matches = types.contains(&sch_type) || is_float_int || is_int_float;
    if !(string_or_slice || format.is_empty() || type_matches || data_format == format) {
        return Res::fail(OaError::new(
            Code::InvalidType,
            path,
            Some(Value::from(data_format)),
            format!(
                "{path} in body must be of type {format}: {}",
                names::go_quote(data_format)
            ),
        ));
    }
    let numeric = types.contains(&"number") || types.contains(&"integer");
    if !numeric && !format.is_empty() && string_or_slice {
        return Res::ok();
    }
    if !type_matches {
        return Res::fail(OaError::new(
            Code::InvalidType,
            path,
            Some(Value::from(sch_type)),
            format!("{path} in body must be of type {joined}: \"{sch_type}\""),
        ));
    }
    Res::ok()
}

/// `basicCommonValidator`: enum.
fn enum_check(s: &Value, path: &str, data: &Value) -> Res {
    let Some(values) = s.get("enum").and_then(Value::as_array) else {
        return Res::default();
    };
    if values.is_empty() || values.iter().any(|e| go_enum_equal(data, e)) {
        return Res::default();
    }
    let shown: Vec<String> = values.iter().map(go_json).collect();
    let mut e = OaError::new(
        Code::Enum,
        path,
        Some(data.clone()),
        format!("{path} in body should be one of [{}]", shown.join(" ")),
    );
    e.values = values.clone();
    Res::fail(e)
}

/// `numberValidator`: multipleOf, minimum, maximum (native int64 comparisons for integers).
fn number_check(s: &Value, path: &str, n: Num) -> Res {
    let mut r = Res::default();
    let value = match n {
        Num::Int(i) => Value::from(i),
        Num::Float(f) => Value::from(f),
    };
    let data_f = match n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    };
    if let Some(factor) = kw(s, "multipleOf").and_then(Value::as_f64) {
        let int_factor = factor as i64;
        match n {
            Num::Int(i) if int_factor != 0 => {
                if int_factor < 0 {
                    r.add(OaError::new(
                        Code::Other,
                        path,
                        Some(Value::from(int_factor)),
                        format!(
                            "factor MultipleOf declared for {path} must be positive: {int_factor}"
                        ),
                    ));
                } else if i.checked_rem(int_factor).is_some_and(|m| m != 0) {
                    r.add(OaError::new(
                        Code::Other,
                        path,
                        Some(value.clone()),
                        format!("{path} in body should be a multiple of {int_factor}"),
                    ));
                }
            }
            _ => {
                if factor < 0.0 {
                    r.add(OaError::new(
                        Code::Other,
                        path,
                        Some(Value::from(factor)),
                        format!(
                            "factor MultipleOf declared for {path} must be positive: {}",
                            names::go_float(factor)
                        ),
                    ));
                } else {
                    let mult = if factor < 1.0 {
                        1.0 / factor * data_f
                    } else {
                        data_f / factor
                    };
                    if !is_json_integer(mult) {
                        r.add(OaError::new(
                            Code::Other,
                            path,
                            Some(value.clone()),
                            format!(
                                "{path} in body should be a multiple of {}",
                                names::go_float(factor)
                            ),
                        ));
                    }
                }
            }
        }
    }
    for (keyword, exclusive_kw, is_min) in [
        ("minimum", "exclusiveMinimum", true),
        ("maximum", "exclusiveMaximum", false),
    ] {
        let Some(bound) = kw(s, keyword).and_then(Value::as_f64) else {
            continue;
        };
        let exclusive = flag(s, exclusive_kw);
        let (fails, shown) = match n {
            Num::Int(i) => {
                let b = bound as i64;
                let fails = match (is_min, exclusive) {
                    (true, false) => i < b,
                    (true, true) => i <= b,
                    (false, false) => i > b,
                    (false, true) => i >= b,
                };
                (fails, b.to_string())
            }
            Num::Float(f) => {
                let fails = match (is_min, exclusive) {
                    (true, false) => f < bound,
                    (true, true) => f <= bound,
                    (false, false) => f > bound,
                    (false, true) => f >= bound,
                };
                (fails, names::go_float(bound))
            }
        };
        if fails {
            let relation = match (is_min, exclusive) {
                (true, false) => "greater than or equal to",
                (true, true) => "greater than",
                (false, false) => "less than or equal to",
                (false, true) => "less than",
            };
            r.add(OaError::new(
                Code::Other,
                path,
                Some(value.clone()),
                format!("{path} in body should be {relation} {shown}"),
            ));
        }
    }
    r.matches += 1;
    r
}

fn is_known_format(format: &str) -> bool {
    let normalized = format.replace('-', "");
    normalized == "datetime" || SUPPORTED_STRING_FORMATS.contains(&normalized.as_str())
}

/// `formatValidator`: the string formats of the default registry.
fn format_check(format: &str, path: &str, text: &str) -> Res {
    if formats::valid(&format.replace('-', ""), text) {
        return Res::default();
    }
    Res::fail(OaError::new(
        Code::InvalidType,
        path,
        Some(Value::from(text)),
        format!(
            "{path} in body must be of type {format}: {}",
            names::go_quote(text)
        ),
    ))
}

/// Go's `reflect.DeepEqual` on decoded JSON: int64 and float64 are different types.
fn go_deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (num(x), num(y)) {
            (Num::Int(p), Num::Int(q)) => p == q,
            (Num::Float(p), Num::Float(q)) => p == q,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| go_deep_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| go_deep_equal(v, w)))
        }
        _ => a == b,
    }
}

/// kube-openapi's enum comparison: the value is converted to the enum value's Go type when Go
/// allows the conversion (numbers between int64 and float64, integers to a one-rune string),
/// then compared with `reflect.DeepEqual`. A `null` value never matches.
fn go_enum_equal(data: &Value, enum_value: &Value) -> bool {
    match (data, enum_value) {
        (Value::Null, _) | (_, Value::Null) => false,
        (Value::Number(d), Value::Number(e)) => match (num(d), num(e)) {
            (Num::Int(p), Num::Int(q)) => p == q,
            (Num::Int(p), Num::Float(q)) => (p as f64) == q,
            (Num::Float(p), Num::Int(q)) => (p as i64) == q,
            (Num::Float(p), Num::Float(q)) => p == q,
        },
        (Value::Number(d), Value::String(e)) => match num(d) {
            Num::Int(p) => {
                let rune = u32::try_from(p)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or('\u{FFFD}');
                e.chars().eq(std::iter::once(rune))
            }
            Num::Float(_) => false,
        },
        _ => go_deep_equal(data, enum_value),
    }
}

/// Go's `json.Marshal` of decoded JSON (maps sorted; floats as encoding/json writes them).
fn go_json(v: &Value) -> String {
    match v {
        Value::Number(n) => match num(n) {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => {
                let abs = f.abs();
                if abs == 0.0 || (1e-6..1e21).contains(&abs) {
                    format!("{f}")
                } else {
                    let e = format!("{f:e}");
                    match e.split_once('e') {
                        Some((m, x)) if !x.starts_with('-') => format!("{m}e+{x}"),
                        _ => e,
                    }
                }
            }
        },
        Value::Array(a) => format!("[{}]", a.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let inner: Vec<String> = sorted_keys(m)
                .into_iter()
                .map(|k| format!("{}:{}", Value::from(k.as_str()), go_json(&m[k.as_str()])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        other => other.to_string(),
    }
}

/// apiextensions' `kubeOpenAPIResultToFieldErrors`.
fn to_cause(e: OaError) -> Cause {
    let Some(code) = e.code else {
        return Cause::invalid("<nil>", Value::from(""), e.message);
    };
    let field = if e.name.is_empty() || e.name == "." {
        "<nil>"
    } else {
        e.name.strip_prefix('.').unwrap_or(&e.name)
    };
    let value = || e.value.clone().unwrap_or_else(|| Value::from(""));
    match code {
        Code::Required => Cause::required(field, ""),
        Code::Enum => {
            let supported: Vec<String> = e
                .values
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => go_json(other),
                })
                .collect();
            Cause::not_supported(field, e.value.clone().unwrap_or(Value::Null), &supported)
        }
        Code::TooLong => Cause::too_long(field, None),
        Code::MaxItems => {
            let actual = e
                .value
                .as_ref()
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0);
            Cause::too_many(field, actual, None)
        }
        Code::InvalidType => Cause::type_invalid(field, value(), e.message.clone()),
        Code::Other => Cause::invalid(field, value(), e.message.clone()),
    }
}

// ---------------------------------------------------------------------------------------------
// Embedded resources (apiextensions schema/objectmeta.Validate) and list types
// (schema/listtype.ValidateListSetsAndMaps); field paths as field.Path prints them.
// ---------------------------------------------------------------------------------------------

fn path_child(path: &str, name: &str) -> String {
    join(path, name)
}

fn path_key(path: &str, key: &str) -> String {
    format!("{path}[{key}]")
}

fn path_index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn embedded_validate(
    path: &str,
    x: &Value,
    s: Option<&Value>,
    depth: usize,
    causes: &mut Vec<Cause>,
) {
    let Some(s) = s else {
        return;
    };
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            if depth > 0 && flag(s, "x-kubernetes-embedded-resource") {
                validate_embedded_resource(path, map, causes);
            }
            let props = properties(s);
            let ap = match additional(s) {
                Additional::Schema(ap) => Some(ap),
                _ => None,
            };
            for k in sorted_keys(map) {
                let v = &map[k.as_str()];
                if let Some(prop) = props.and_then(|p| p.get(k.as_str())) {
                    embedded_validate(&path_child(path, k), v, Some(prop), depth + 1, causes);
                } else if ap.is_some() {
                    embedded_validate(&path_key(path, k), v, ap, depth + 1, causes);
                }
            }
        }
        Value::Array(list) => {
            for (i, v) in list.iter().enumerate() {
                embedded_validate(&path_index(path, i), v, items(s), depth + 1, causes);
            }
        }
        _ => {}
    }
}

/// `objectmeta.validateEmbeddedResource`.
fn validate_embedded_resource(path: &str, x: &Map<String, Value>, causes: &mut Vec<Cause>) {
    let api_version_field = path_child(path, "apiVersion");
    let kind_field = path_child(path, "kind");
    if !x.contains_key("apiVersion") {
        causes.push(Cause::required(&api_version_field, "must not be empty"));
    }
    if !x.contains_key("kind") {
        causes.push(Cause::required(&kind_field, "must not be empty"));
    }
    for k in sorted_keys(x) {
        let v = &x[k.as_str()];
        match k.as_str() {
            "apiVersion" => match v.as_str() {
                None => causes.push(Cause::invalid(
                    &api_version_field,
                    v.clone(),
                    "must be a string",
                )),
                Some("") => causes.push(Cause::invalid(
                    &api_version_field,
                    Value::from(""),
                    "must not be empty",
                )),
                Some(av) if av.matches('/').count() > 1 => causes.push(Cause::invalid(
                    &api_version_field,
                    Value::from(av),
                    format!("unexpected GroupVersion string: {av}"),
                )),
                Some(_) => {}
            },
            "kind" => match v.as_str() {
                None => causes.push(Cause::invalid(&kind_field, v.clone(), "must be a string")),
                Some("") => causes.push(Cause::invalid(
                    &kind_field,
                    Value::from(""),
                    "must not be empty",
                )),
                Some(kind) => {
                    let errs = names::dns1035_label(&kind.to_lowercase());
                    if !errs.is_empty() {
                        causes.push(Cause::invalid(
                            &kind_field,
                            Value::from(kind),
                            format!(
                                "may have mixed case, but should otherwise match: {}",
                                errs.join(",")
                            ),
                        ));
                    }
                }
            },
            "metadata" => {
                let meta_field = path_child(path, "metadata");
                let Some(meta) = v.as_object() else {
                    causes.push(Cause::invalid(
                        &meta_field,
                        v.clone(),
                        format!("invalid metadata: expected object, got {}", go_type_name(v)),
                    ));
                    continue;
                };
                let mut meta = meta.clone();
                if meta
                    .get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    meta.insert("name".to_string(), Value::from("fakename"));
                }
                causes.extend(names::validate_object_meta_with(
                    &Value::Object(meta),
                    NameRule::PathSegment,
                    NamespaceRule::IfSet,
                    &meta_field,
                ));
            }
            _ => {}
        }
    }
}

/// The Go type name `%T` prints for decoded JSON.
fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) => match num(n) {
            Num::Int(_) => "int64",
            Num::Float(_) => "float64",
        },
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn list_validate_object(
    path: &str,
    s: &Value,
    map: &Map<String, Value>,
    depth: usize,
    causes: &mut Vec<Cause>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Additional::Schema(ap) = additional(s) {
        for k in sorted_keys(map) {
            list_validate_value(&path_key(path, k), ap, &map[k.as_str()], depth + 1, causes);
        }
    }
    if let Some(props) = properties(s) {
        for k in sorted_keys(map) {
            if let Some(sub) = props.get(k.as_str()) {
                list_validate_value(
                    &path_child(path, k),
                    sub,
                    &map[k.as_str()],
                    depth + 1,
                    causes,
                );
            }
        }
    }
}

fn list_validate_value(path: &str, s: &Value, x: &Value, depth: usize, causes: &mut Vec<Cause>) {
    match x {
        Value::Array(list) => list_validate_array(path, s, list, depth, causes),
        Value::Object(map) => list_validate_object(path, s, map, depth, causes),
        _ => {}
    }
}

fn list_validate_array(
    path: &str,
    s: &Value,
    list: &[Value],
    depth: usize,
    causes: &mut Vec<Cause>,
) {
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            for i in non_unique(list) {
                causes.push(Cause::duplicate(&path_index(path, i), list[i].clone()));
            }
        }
        Some("map") => validate_list_map(path, s, list, causes),
        _ => {}
    }
    if let Some(it) = items(s) {
        for (i, v) in list.iter().enumerate() {
            list_validate_value(&path_index(path, i), it, v, depth + 1, causes);
        }
    }
}

/// The identity Go's set check gives a value: scalars by type and value, compounds by JSON.
fn set_identity(v: &Value) -> String {
    match v {
        Value::Null => "n".to_string(),
        Value::Bool(b) => format!("b{b}"),
        Value::Number(n) => match num(n) {
            Num::Int(i) => format!("i{i}"),
            Num::Float(f) => format!("f{}", f.to_bits()),
        },
        Value::String(s) => format!("s{s}"),
        Value::Array(_) | Value::Object(_) => format!("c{}", go_json(v)),
    }
}

/// `validateListSet`: the index of the second appearance of each repeated value.
fn non_unique(list: &[Value]) -> Vec<usize> {
    non_unique_by(list.iter().map(set_identity).collect())
}

fn non_unique_by(ids: Vec<String>) -> Vec<usize> {
    if ids.len() <= 1 {
        return Vec::new();
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        let times = seen.entry(id).or_insert(0);
        *times += 1;
        if *times == 2 {
            out.push(i);
        }
    }
    out
}

/// `validateListMap`.
fn validate_list_map(path: &str, s: &Value, list: &[Value], causes: &mut Vec<Cause>) {
    for (i, x) in list.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            causes.push(Cause::invalid(
                &path_index(path, i),
                x.clone(),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if list.len() <= 1 {
        return;
    }
    let key_fields: Vec<&str> = s
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let [key_field] = key_fields.as_slice() {
        let keys: Vec<Option<&Value>> = list.iter().map(|x| x.get(*key_field)).collect();
        let ids = keys
            .iter()
            .map(|k| k.map_or_else(|| "u".to_string(), set_identity))
            .collect();
        for i in non_unique_by(ids) {
            let mut dup = Map::new();
            if let Some(k) = keys[i] {
                dup.insert((*key_field).to_string(), k.clone());
            }
            causes.push(Cause::duplicate(&path_index(path, i), Value::Object(dup)));
        }
        return;
    }
    let keys: Vec<Value> = list
        .iter()
        .map(|x| {
            let mut key = Map::new();
            for f in &key_fields {
                if let Some(v) = x.get(*f) {
                    key.insert((*f).to_string(), v.clone());
                }
            }
            Value::Object(key)
        })
        .collect();
    for i in non_unique(&keys) {
        causes.push(Cause::duplicate(&path_index(path, i), keys[i].clone()));
    }
}

// ---------------------------------------------------------------------------------------------
// String formats of go-openapi's default registry, as far as CRDs use them.
// ---------------------------------------------------------------------------------------------

mod formats {
    use std::net::IpAddr;

    /// Whether `text` is valid for the (dash-free) format name.
    pub(super) fn valid(format: &str, text: &str) -> bool {
        match format {
            "datetime" => is_date_time(text),
            "date" => is_date(text),
            "uuid" => is_uuid(text, None),
            "uuid3" => is_uuid(text, Some(b'3')),
            "uuid4" => is_uuid(text, Some(b'4')),
            "uuid5" => is_uuid(text, Some(b'5')),
            "ipv4" => text.parse::<IpAddr>().is_ok() && text.contains('.'),
            "ipv6" => text.parse::<IpAddr>().is_ok() && text.contains(':'),
            "cidr" => is_cidr(text),
            "mac" => is_mac(text),
            "hostname" => is_hostname(text),
            "email" => is_email(text),
            "byte" => is_base64(text),
            "uri" => is_request_uri(text),
            "duration" => is_duration(text),
            "bsonobjectid" => text.len() == 24 && text.bytes().all(|b| b.is_ascii_hexdigit()),
            "hexcolor" => {
                let h = text.strip_prefix('#').unwrap_or(text);
                (h.len() == 3 || h.len() == 6) && h.bytes().all(|b| b.is_ascii_hexdigit())
            }
            "rgbcolor" => is_rgb(text),
            "ssn" => is_ssn(text),
            "isbn" => is_isbn10(text) || is_isbn13(text),
            "isbn10" => is_isbn10(text),
            "isbn13" => is_isbn13(text),
            "creditcard" => is_credit_card(text),
            _ => true,
        }
    }

    fn digits(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
    }

    /// `time.Parse("2006-01-02", s)`.
    fn is_date(s: &str) -> bool {
        let b = s.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return false;
        }
        let (y, m, d) = (&s[0..4], &s[5..7], &s[8..10]);
        if !digits(y) || !digits(m) || !digits(d) {
            return false;
        }
        let (Ok(y), Ok(m), Ok(d)) = (y.parse::<u32>(), m.parse::<u32>(), d.parse::<u32>()) else {
            return false;
        };
        let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let days = match m {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return false,
        };
        (1..=days).contains(&d)
    }

    /// strfmt `IsDateTime`: a date, `t`, then `hh:mm:ss(.frac)?(z|±hh:mm)`, case-insensitive.
    fn is_date_time(s: &str) -> bool {
        if s.len() < 4 {
            return false;
        }
        let lower = s.to_lowercase();
        let parts: Vec<&str> = lower.split('t').collect();
        if parts.len() < 2 || !is_date(parts[0]) {
            return false;
        }
        let t = parts[1].as_bytes();
        if t.len() < 9 || t[2] != b':' || t[5] != b':' {
            return false;
        }
        let two = |i: usize| t[i].is_ascii_digit() && t[i + 1].is_ascii_digit();
        if !(two(0) && two(3) && two(6)) {
            return false;
        }
        let mut rest = &parts[1][8..];
        if let Some(c) = rest.chars().next()
            && c != 'z'
            && c != '+'
            && c != '-'
        {
            // `(.[0-9]+)?`: any one character, then digits.
            let after = &rest[c.len_utf8()..];
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return false;
            }
            rest = &after[n..];
        }
        let zone_ok = rest == "z"
            || (rest.len() == 6
                && rest.is_ascii()
                && (rest.starts_with('+') || rest.starts_with('-'))
                && rest.as_bytes()[3] == b':'
                && digits(&rest[1..3])
                && digits(&rest[4..6]));
        zone_ok && &parts[1][0..2] <= "23" && &parts[1][3..5] <= "59" && &parts[1][6..8] <= "59"
    }

    fn is_uuid(s: &str, version: Option<u8>) -> bool {
        let hex: Vec<u8> = s.bytes().filter(|b| *b != b'-').collect();
        let groups: Vec<&str> = s.split('-').collect();
        let dashed = groups.len() == 5 && groups.iter().map(|g| g.len()).eq([8usize, 4, 4, 4, 12]);
        if !(dashed || (groups.len() == 1 && s.len() == 32)) {
            return false;
        }
        if hex.len() != 32 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return false;
        }
        match version {
            None => true,
            Some(v) => {
                hex[12] == v
                    && (v == b'3'
                        || matches!(hex[16].to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b'))
            }
        }
    }

    fn is_cidr(s: &str) -> bool {
        let Some((addr, bits)) = s.split_once('/') else {
            return false;
        };
        let Ok(ip) = addr.parse::<IpAddr>() else {
            return false;
        };
        let max = if ip.is_ipv4() { 32 } else { 128 };
        digits(bits) && bits.len() <= 3 && bits.parse::<u32>().is_ok_and(|b| b <= max)
    }

    /// `net.ParseMAC`: 6, 8 or 20 octets separated by `:` or `-`, or dotted 4-digit groups.
    fn is_mac(s: &str) -> bool {
        let octets_ok = |n: usize| [6usize, 8, 20].contains(&n);
        for sep in [':', '-'] {
            let parts: Vec<&str> = s.split(sep).collect();
            if parts.len() > 1 {
                return octets_ok(parts.len())
                    && parts
                        .iter()
                        .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
            }
        }
        let parts: Vec<&str> = s.split('.').collect();
        parts.len() > 1
            && octets_ok(parts.len() * 2)
            && parts
                .iter()
                .all(|p| p.len() == 4 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    fn is_hostname(s: &str) -> bool {
        if s.is_empty() || s.len() > 255 {
            return false;
        }
        let labels: Vec<&str> = s.split('.').collect();
        labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| {
                    c.is_alphanumeric() || c == '-' || (!c.is_ascii() && !c.is_whitespace())
                })
        })
    }

    fn is_email(s: &str) -> bool {
        let addr = match (s.find('<'), s.ends_with('>')) {
            (Some(i), true) => &s[i + 1..s.len() - 1],
            _ => s,
        };
        let Some((local, domain)) = addr.rsplit_once('@') else {
            return false;
        };
        !local.is_empty()
            && !domain.is_empty()
            && !addr.chars().any(|c| c.is_whitespace() || c.is_control())
            && !domain.starts_with('.')
            && !domain.ends_with('.')
    }

    /// govalidator `IsBase64`: whole 4-character groups, padding only at the end, not empty.
    fn is_base64(s: &str) -> bool {
        let b = s.as_bytes();
        if b.is_empty() || !b.len().is_multiple_of(4) {
            return false;
        }
        let body_ok = |c: &u8| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/';
        let pad = b.iter().rev().take_while(|c| **c == b'=').count();
        pad <= 2 && b[..b.len() - pad].iter().all(body_ok)
    }

    /// `url.ParseRequestURI`: an absolute URI or an absolute path.
    fn is_request_uri(s: &str) -> bool {
        if s.is_empty() || s.chars().any(|c| c.is_control() || c == ' ') {
            return false;
        }
        if s.starts_with('/') {
            return true;
        }
        let Some((scheme, _)) = s.split_once(':') else {
            return false;
        };
        let mut chars = scheme.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    }

    /// strfmt `IsDuration`: Go's `time.ParseDuration`, or `<n> <unit>` with day/week units.
    fn is_duration(s: &str) -> bool {
        go_duration(s) || scala_duration(s)
    }

    fn go_duration(s: &str) -> bool {
        let s = s.strip_prefix(['+', '-']).unwrap_or(s);
        if s == "0" {
            return true;
        }
        if s.is_empty() {
            return false;
        }
        let mut rest = s;
        while !rest.is_empty() {
            let n = rest
                .bytes()
                .take_while(|b| b.is_ascii_digit() || *b == b'.')
                .count();
            let number = &rest[..n];
            if number.is_empty() || number == "." || number.matches('.').count() > 1 {
                return false;
            }
            rest = &rest[n..];
            let unit_len = rest
                .char_indices()
                .find(|(_, c)| c.is_ascii_digit() || *c == '.')
                .map_or(rest.len(), |(i, _)| i);
            if !["ns", "us", "µs", "μs", "ms", "s", "m", "h"].contains(&&rest[..unit_len]) {
                return false;
            }
            rest = &rest[unit_len..];
        }
        true
    }

    fn scala_duration(s: &str) -> bool {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        let unit = s[n..].trim_start();
        [
            "ns",
            "nano",
            "nanos",
            "nanosecond",
            "nanoseconds",
            "us",
            "µs",
            "micro",
            "micros",
            "microsecond",
            "microseconds",
            "ms",
            "milli",
            "millis",
            "millisecond",
            "milliseconds",
            "s",
            "sec",
            "secs",
            "second",
            "seconds",
            "m",
            "min",
            "mins",
            "minute",
            "minutes",
            "h",
            "hr",
            "hrs",
            "hour",
            "hours",
            "d",
            "day",
            "days",
            "w",
            "wk",
            "wks",
            "week",
            "weeks",
        ]
        .contains(&unit)
    }

    fn is_rgb(s: &str) -> bool {
        let Some(inner) = s.strip_prefix("rgb(").and_then(|r| r.strip_suffix(')')) else {
            return false;
        };
        let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
        parts.len() == 3
            && parts.iter().all(|p| {
                digits(p)
                    && p.len() <= 3
                    && (p.len() == 1 || !p.starts_with('0'))
                    && p.parse::<u32>().is_ok_and(|v| v <= 255)
            })
    }

    fn is_ssn(s: &str) -> bool {
        let b = s.as_bytes();
        let d = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
        match b.len() {
            9 => d(0..9),
            11 => {
                d(0..3)
                    && matches!(b[3], b'-' | b' ')
                    && d(4..6)
                    && matches!(b[6], b'-' | b' ')
                    && d(7..11)
            }
            10 => {
                (d(0..3) && matches!(b[3], b'-' | b' ') && d(4..10))
                    || (d(0..5) && matches!(b[5], b'-' | b' ') && d(6..10))
            }
            _ => false,
        }
    }

    fn isbn_chars(s: &str) -> Vec<char> {
        s.chars().filter(|c| *c != '-' && *c != ' ').collect()
    }

    fn is_isbn10(s: &str) -> bool {
        let c = isbn_chars(s);
        if c.len() != 10 {
            return false;
        }
        let mut sum = 0u32;
        for (i, ch) in c.iter().enumerate() {
            let v = match (i, ch) {
                (9, 'X') => 10,
                (_, ch) => match ch.to_digit(10) {
                    Some(v) => v,
                    None => return false,
                },
            };
            sum += (i as u32 + 1) * v;
        }
        sum.is_multiple_of(11)
    }

    fn is_isbn13(s: &str) -> bool {
        let c = isbn_chars(s);
        if c.len() != 13 {
            return false;
        }
        let mut sum = 0u32;
        for (i, ch) in c.iter().enumerate() {
            let Some(v) = ch.to_digit(10) else {
                return false;
            };
            sum += if i % 2 == 0 { v } else { 3 * v };
        }
        sum.is_multiple_of(10)
    }

    fn is_credit_card(s: &str) -> bool {
        let d: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
        if !(13..=19).contains(&d.len()) {
            return false;
        }
        let sum: u32 = d
            .iter()
            .rev()
            .enumerate()
            .map(|(i, v)| {
                if i % 2 == 1 {
                    let x = v * 2;
                    if x > 9 { x - 9 } else { x }
                } else {
                    *v
                }
            })
            .sum();
        sum.is_multiple_of(10)
    }
}

// ---------------------------------------------------------------------------------------------
// `pattern`: an RE2 (Go regexp) subset compiled to a Pike VM, so matching is linear and safe
// on any input. Unsupported Perl syntax (lookaround, backreferences) is refused as Go refuses it.
// ---------------------------------------------------------------------------------------------

/// Why a `pattern` is not a regular expression Go accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    /// Go's `ErrorCode` text, e.g. `missing closing )`.
    pub code: &'static str,
    /// The offending part of the expression.
    pub expr: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error parsing regexp: {}: `{}`", self.code, self.expr)
    }
}

impl std::error::Error for PatternError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Assertion {
    LineStart,
    LineEnd,
    TextStart,
    TextEnd,
    WordBoundary,
    NotWordBoundary,
}

#[derive(Debug, Clone, PartialEq)]
enum ClassItem {
    Range(char, char),
    Digit(bool),
    Word(bool),
    Space(bool),
    Letter(bool),
    Upper(bool),
    Lower(bool),
    Number(bool),
    Punct(bool),
}

impl ClassItem {
    fn matches(&self, c: char) -> bool {
        let (hit, negated) = match self {
            Self::Range(lo, hi) => return (*lo..=*hi).contains(&c),
            Self::Digit(n) => (c.is_ascii_digit(), *n),
            Self::Word(n) => (c.is_ascii_alphanumeric() || c == '_', *n),
            Self::Space(n) => (matches!(c, ' ' | '\t' | '\n' | '\u{c}' | '\r'), *n),
            Self::Letter(n) => (c.is_alphabetic(), *n),
            Self::Upper(n) => (c.is_uppercase(), *n),
            Self::Lower(n) => (c.is_lowercase(), *n),
            Self::Number(n) => (c.is_numeric(), *n),
            Self::Punct(n) => (c.is_ascii_punctuation(), *n),
        };
        hit != negated
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Class {
    items: Vec<ClassItem>,
    negated: bool,
    fold: bool,
}

impl Class {
    fn matches(&self, c: char) -> bool {
        let hit = |c: char| self.items.iter().any(|i| i.matches(c));
        let found = hit(c) || (self.fold && fold_variants(c).into_iter().any(hit));
        found != self.negated
    }
}

fn fold_variants(c: char) -> [char; 2] {
    let lower = c.to_lowercase().next().unwrap_or(c);
    let upper = c.to_uppercase().next().unwrap_or(c);
    [lower, upper]
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Empty,
    Char(char, bool),
    Any(bool),
    Class(Class),
    Assert(Assertion),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, u32, Option<u32>),
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    fold: bool,
    multi_line: bool,
    dot_nl: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Inst {
    Char(char, bool),
    Any(bool),
    Class(Class),
    Assert(Assertion),
    Split(usize, usize),
    Jmp(usize),
    Match,
}

/// A compiled `pattern`.
#[derive(Debug, Clone, PartialEq)]
struct Regex {
    prog: Vec<Inst>,
}

const MAX_PROGRAM: usize = 20_000;
const MAX_REPEAT: u32 = 1000;
const MAX_NESTING: usize = 200;

struct ReParser<'a> {
    src: &'a str,
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

fn perr(code: &'static str, expr: impl Into<String>) -> PatternError {
    PatternError {
        code,
        expr: expr.into(),
    }
}

impl ReParser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn rest(&self) -> String {
        self.chars[self.pos.min(self.chars.len())..]
            .iter()
            .collect()
    }

    fn alternation(&mut self, flags: &mut Flags) -> Result<Node, PatternError> {
        let mut branches = vec![self.concat(flags)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            branches.push(self.concat(flags)?);
        }
        Ok(if branches.len() == 1 {
            branches.remove(0)
        } else {
            Node::Alt(branches)
        })
    }

    fn concat(&mut self, flags: &mut Flags) -> Result<Node, PatternError> {
        let mut items: Vec<Node> = Vec::new();
        // Where the repetition operator just applied started (Go refuses `a**`, `a{2}{3}`).
        let mut last_repeat: Option<usize> = None;
        while let Some(c) = self.peek() {
            match c {
                '|' | ')' => break,
                '*' | '+' | '?' => {
                    let start = self.pos;
                    self.pos += 1;
                    let (min, max) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.apply_repeat(&mut items, min, max, start, last_repeat)?;
                    last_repeat = Some(start);
                }
                '{' => {
                    let start = self.pos;
                    match self.repeat_braces() {
                        Some((min, max)) => {
                            if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT || m < min) {
                                return Err(perr(
                                    "invalid repeat count",
                                    self.chars[start..self.pos].iter().collect::<String>(),
                                ));
                            }
                            self.apply_repeat(&mut items, min, max, start, last_repeat)?;
                            last_repeat = Some(start);
                        }
                        None => {
                            self.pos += 1;
                            items.push(Node::Char('{', flags.fold));
                            last_repeat = None;
                        }
                    }
                }
                _ => {
                    if let Some(node) = self.atom(flags)? {
                        items.push(node);
                    }
                    last_repeat = None;
                }
            }
        }
        Ok(match items.len() {
            0 => Node::Empty,
            1 => items.remove(0),
            _ => Node::Concat(items),
        })
    }

    fn apply_repeat(
        &mut self,
        items: &mut Vec<Node>,
        min: u32,
        max: Option<u32>,
        start: usize,
        last_repeat: Option<usize>,
    ) -> Result<(), PatternError> {
        if self.peek() == Some('?') {
            self.pos += 1;
        }
        if let Some(prev) = last_repeat {
            let op: String = self.chars[prev..self.pos].iter().collect();
            return Err(perr("invalid nested repetition operator", op));
        }
        let op: String = self.chars[start..self.pos].iter().collect();
        match items.pop() {
            None | Some(Node::Empty) => Err(perr("missing argument to repetition operator", op)),
            Some(node) => {
                items.push(Node::Repeat(Box::new(node), min, max));
                Ok(())
            }
        }
    }

    /// `{n}`, `{n,}`, `{n,m}`; `None` (a literal `{`) when it is not one.
    fn repeat_braces(&mut self) -> Option<(u32, Option<u32>)> {
        let mut i = self.pos + 1;
        let number = |i: &mut usize| -> Option<u32> {
            let start = *i;
            while self.chars.get(*i).is_some_and(char::is_ascii_digit) {
                *i += 1;
            }
            if *i == start {
                return None;
            }
            let s: String = self.chars[start..*i].iter().collect();
            Some(s.parse::<u32>().unwrap_or(u32::MAX))
        };
        let min = number(&mut i)?;
        let max = if self.chars.get(i) == Some(&',') {
            i += 1;
            if self.chars.get(i) == Some(&'}') {
                None
            } else {
                Some(number(&mut i)?)
            }
        } else {
            Some(min)
        };
        if self.chars.get(i) != Some(&'}') {
            return None;
        }
        self.pos = i + 1;
        Some((min, max))
    }

    fn atom(&mut self, flags: &mut Flags) -> Result<Option<Node>, PatternError> {
        let Some(c) = self.peek() else {
            return Ok(None);
        };
        self.pos += 1;
        Ok(Some(match c {
            '(' => return self.group(flags),
            '.' => Node::Any(flags.dot_nl),
            '^' => Node::Assert(if flags.multi_line {
                Assertion::LineStart
            } else {
                Assertion::TextStart
            }),
            '$' => Node::Assert(if flags.multi_line {
                Assertion::LineEnd
            } else {
                Assertion::TextEnd
            }),
            '[' => Node::Class(self.class(flags)?),
            '\\' => return self.escape(flags).map(Some),
            c => Node::Char(c, flags.fold),
        }))
    }

    fn group(&mut self, flags: &mut Flags) -> Result<Option<Node>, PatternError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(perr("expression nests too deeply", self.src));
        }
        let mut inner = *flags;
        if self.peek() == Some('?') {
            let start = self.pos - 1;
            self.pos += 1;
            match self.peek() {
                Some('P') | Some('<') => {
                    if self.peek() == Some('P') {
                        self.pos += 1;
                    }
                    if self.peek() != Some('<') {
                        return Err(perr(
                            "invalid or unsupported Perl syntax",
                            self.chars[start..self.pos.min(self.chars.len())]
                                .iter()
                                .collect::<String>(),
                        ));
                    }
                    if matches!(self.chars.get(self.pos + 1), Some('=') | Some('!')) {
                        return Err(perr("invalid or unsupported Perl syntax", "(?<"));
                    }
                    let Some(end) = self.chars[self.pos..].iter().position(|c| *c == '>') else {
                        return Err(perr("invalid named capture", self.rest()));
                    };
                    let name: String = self.chars[self.pos + 1..self.pos + end].iter().collect();
                    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        return Err(perr("invalid named capture", name));
                    }
                    self.pos += end + 1;
                }
                _ => {
                    let mut negate = false;
                    let mut seen_flag = false;
                    loop {
                        let Some(f) = self.peek() else {
                            return Err(perr("missing closing )", self.src));
                        };
                        self.pos += 1;
                        match f {
                            'i' => inner.fold = !negate,
                            'm' => inner.multi_line = !negate,
                            's' => inner.dot_nl = !negate,
                            'U' => {}
                            '-' if !negate => {
                                negate = true;
                                continue;
                            }
                            ')' if seen_flag => {
                                // Flags for the rest of the enclosing group; nothing to repeat.
                                *flags = inner;
                                self.depth -= 1;
                                return Ok(Some(Node::Empty));
                            }
                            ':' => break,
                            _ => {
                                let text: String = self.chars[start..self.pos].iter().collect();
                                return Err(perr("invalid or unsupported Perl syntax", text));
                            }
                        }
                        seen_flag = true;
                    }
                }
            }
        }
        let node = self.alternation(&mut inner)?;
        if self.peek() != Some(')') {
            return Err(perr("missing closing )", self.src));
        }
        self.pos += 1;
        self.depth -= 1;
        // An empty group is still something a repetition can apply to.
        Ok(Some(match node {
            Node::Empty => Node::Concat(Vec::new()),
            node => node,
        }))
    }

    fn escape(&mut self, flags: &Flags) -> Result<Node, PatternError> {
        let Some(c) = self.peek() else {
            return Err(perr("trailing backslash at end of expression", ""));
        };
        self.pos += 1;
        let class = |item: ClassItem| {
            Node::Class(Class {
                items: vec![item],
                negated: false,
                fold: false,
            })
        };
        Ok(match c {
            'd' => class(ClassItem::Digit(false)),
            'D' => class(ClassItem::Digit(true)),
            'w' => class(ClassItem::Word(false)),
            'W' => class(ClassItem::Word(true)),
            's' => class(ClassItem::Space(false)),
            'S' => class(ClassItem::Space(true)),
            'p' | 'P' => class(self.unicode_class(c == 'P')?),
            'b' => Node::Assert(Assertion::WordBoundary),
            'B' => Node::Assert(Assertion::NotWordBoundary),
            'A' => Node::Assert(Assertion::TextStart),
            'z' => Node::Assert(Assertion::TextEnd),
            'Q' => {
                let rest: String = self.rest();
                let (lit, consumed) = match rest.find("\\E") {
                    Some(i) => (rest[..i].to_string(), rest[..i].chars().count() + 2),
                    None => (rest.clone(), rest.chars().count()),
                };
                self.pos += consumed;
                Node::Concat(lit.chars().map(|c| Node::Char(c, flags.fold)).collect())
            }
            _ => Node::Char(self.escaped_char(c)?, flags.fold),
        })
    }

    /// A single-character escape (also used inside classes).
    fn escaped_char(&mut self, c: char) -> Result<char, PatternError> {
        Ok(match c {
            'a' => '\u{7}',
            'f' => '\u{c}',
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            'v' => '\u{b}',
            '0'..='7' => {
                if c != '0' && self.peek().and_then(|d| d.to_digit(8)).is_none() {
                    return Err(perr("invalid escape sequence", format!("\\{c}")));
                }
                let mut v = c.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match self.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            self.pos += 1;
                        }
                        None => break,
                    }
                }
                char::from_u32(v).unwrap_or('\u{FFFD}')
            }
            'x' => {
                let hex: String = if self.peek() == Some('{') {
                    let Some(end) = self.chars[self.pos..].iter().position(|c| *c == '}') else {
                        return Err(perr("invalid escape sequence", "\\x{"));
                    };
                    let h: String = self.chars[self.pos + 1..self.pos + end].iter().collect();
                    self.pos += end + 1;
                    h
                } else {
                    let h: String = self.chars[self.pos..(self.pos + 2).min(self.chars.len())]
                        .iter()
                        .collect();
                    self.pos += h.chars().count();
                    h
                };
                u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| !hex.is_empty())
                    .and_then(char::from_u32)
                    .ok_or_else(|| perr("invalid escape sequence", format!("\\x{hex}")))?
            }
            c if c.is_ascii() && !c.is_ascii_alphanumeric() => c,
            c => return Err(perr("invalid escape sequence", format!("\\{c}"))),
        })
    }

    fn unicode_class(&mut self, negated: bool) -> Result<ClassItem, PatternError> {
        let name: String = if self.peek() == Some('{') {
            let Some(end) = self.chars[self.pos..].iter().position(|c| *c == '}') else {
                return Err(perr("invalid character class range", "\\p{"));
            };
            let n: String = self.chars[self.pos + 1..self.pos + end].iter().collect();
            self.pos += end + 1;
            n
        } else {
            let Some(c) = self.peek() else {
                return Err(perr("invalid character class range", "\\p"));
            };
            self.pos += 1;
            c.to_string()
        };
        let (name, negated) = match name.strip_prefix('^') {
            Some(n) => (n.to_string(), !negated),
            None => (name, negated),
        };
        Ok(match name.as_str() {
            "L" => ClassItem::Letter(negated),
            "Lu" => ClassItem::Upper(negated),
            "Ll" => ClassItem::Lower(negated),
            "N" | "Nd" => ClassItem::Number(negated),
            "P" => ClassItem::Punct(negated),
            _ => {
                return Err(perr(
                    "invalid character class range",
                    format!("\\p{{{name}}}"),
                ));
            }
        })
    }

    fn class(&mut self, flags: &Flags) -> Result<Class, PatternError> {
        let start = self.pos - 1;
        let mut class = Class {
            items: Vec::new(),
            negated: false,
            fold: flags.fold,
        };
        if self.peek() == Some('^') {
            class.negated = true;
            self.pos += 1;
        }
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                let text: String = self.chars[start..].iter().collect();
                return Err(perr("missing closing ]", text));
            };
            if c == ']' && !first {
                self.pos += 1;
                return Ok(class);
            }
            first = false;
            if c == '[' && self.chars.get(self.pos + 1) == Some(&':') {
                let rest = self.rest();
                if let Some(end) = rest.get(2..).and_then(|r| r.find(":]")).map(|e| e + 2) {
                    let name = &rest[2..end];
                    let (name, negated) = match name.strip_prefix('^') {
                        Some(n) => (n, true),
                        None => (name, false),
                    };
                    let items = posix_class(name, negated).ok_or_else(|| {
                        perr("invalid character class range", format!("[:{name}:]"))
                    })?;
                    class.items.extend(items);
                    self.pos += rest[..end + 2].chars().count();
                    continue;
                }
            }
            self.pos += 1;
            let lo = if c == '\\' {
                let Some(e) = self.peek() else {
                    return Err(perr("missing closing ]", self.src));
                };
                self.pos += 1;
                match e {
                    'd' => {
                        class.items.push(ClassItem::Digit(false));
                        continue;
                    }
                    'D' => {
                        class.items.push(ClassItem::Digit(true));
                        continue;
                    }
                    'w' => {
                        class.items.push(ClassItem::Word(false));
                        continue;
                    }
                    'W' => {
                        class.items.push(ClassItem::Word(true));
                        continue;
                    }
                    's' => {
                        class.items.push(ClassItem::Space(false));
                        continue;
                    }
                    'S' => {
                        class.items.push(ClassItem::Space(true));
                        continue;
                    }
                    'p' | 'P' => {
                        let item = self.unicode_class(e == 'P')?;
                        class.items.push(item);
                        continue;
                    }
                    e => self.escaped_char(e)?,
                }
            } else {
                c
            };
            let hi = if self.peek() == Some('-')
                && self.chars.get(self.pos + 1).is_some_and(|n| *n != ']')
            {
                self.pos += 1;
                let Some(h) = self.peek() else {
                    return Err(perr("missing closing ]", self.src));
                };
                self.pos += 1;
                let h = if h == '\\' {
                    let Some(e) = self.peek() else {
                        return Err(perr("missing closing ]", self.src));
                    };
                    self.pos += 1;
                    self.escaped_char(e)?
                } else {
                    h
                };
                if h < lo {
                    return Err(perr("invalid character class range", format!("{lo}-{h}")));
                }
                h
            } else {
                lo
            };
            class.items.push(ClassItem::Range(lo, hi));
        }
    }
}

fn posix_class(name: &str, negated: bool) -> Option<Vec<ClassItem>> {
    let ranges: &[(char, char)] = match name {
        "alnum" => &[('0', '9'), ('A', 'Z'), ('a', 'z')],
        "alpha" => &[('A', 'Z'), ('a', 'z')],
        "ascii" => &[('\0', '\u{7f}')],
        "blank" => &[('\t', '\t'), (' ', ' ')],
        "cntrl" => &[('\0', '\u{1f}'), ('\u{7f}', '\u{7f}')],
        "digit" => &[('0', '9')],
        "graph" | "print" => &[('!', '~')],
        "lower" => &[('a', 'z')],
        "punct" => &[('!', '/'), (':', '@'), ('[', '`'), ('{', '~')],
        "space" => &[('\t', '\r'), (' ', ' ')],
        "upper" => &[('A', 'Z')],
        "word" => &[('0', '9'), ('A', 'Z'), ('a', 'z'), ('_', '_')],
        "xdigit" => &[('0', '9'), ('A', 'F'), ('a', 'f')],
        _ => return None,
    };
    let mut items: Vec<ClassItem> = ranges
        .iter()
        .map(|(a, b)| ClassItem::Range(*a, *b))
        .collect();
    if name == "print" {
        items.push(ClassItem::Range(' ', ' '));
    }
    if !negated {
        return Some(items);
    }
    // The complement of a set of ASCII ranges, as ranges.
    let mut sorted: Vec<(u32, u32)> = items
        .iter()
        .filter_map(|i| match i {
            ClassItem::Range(a, b) => Some((*a as u32, *b as u32)),
            _ => None,
        })
        .collect();
    sorted.sort_unstable();
    let mut out = Vec::new();
    let mut next = 0u32;
    for (a, b) in sorted {
        if a > next {
            out.push((next, a - 1));
        }
        next = next.max(b + 1);
    }
    out.push((next, 0x10FFFF));
    Some(
        out.into_iter()
            .filter_map(|(a, b)| {
                Some(ClassItem::Range(
                    char::from_u32(a)?,
                    char::from_u32(b).unwrap_or(char::MAX),
                ))
            })
            .collect(),
    )
}

impl Regex {
    fn new(pattern: &str) -> Result<Self, PatternError> {
        let mut p = ReParser {
            src: pattern,
            chars: pattern.chars().collect(),
            pos: 0,
            depth: 0,
        };
        let mut flags = Flags::default();
        let node = p.alternation(&mut flags)?;
        if p.pos < p.chars.len() {
            return Err(perr("unexpected )", pattern));
        }
        let mut prog = Vec::new();
        compile(&node, &mut prog, 0)?;
        prog.push(Inst::Match);
        Ok(Self { prog })
    }

    /// Go's `MatchString`: whether the pattern matches anywhere in `text`.
    fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let n = self.prog.len();
        let mut current = ThreadList::new(n);
        let mut next = ThreadList::new(n);
        for pos in 0..=chars.len() {
            if self.add(&mut current, 0, pos, &chars) {
                return true;
            }
            let Some(&c) = chars.get(pos) else {
                break;
            };
            next.clear();
            for i in 0..current.dense.len() {
                let pc = current.dense[i];
                let hit = match &self.prog[pc] {
                    Inst::Char(want, fold) => {
                        *want == c
                            || (*fold && fold_variants(c).contains(want))
                            || (*fold && fold_variants(*want).contains(&c))
                    }
                    Inst::Any(nl) => *nl || c != '\n',
                    Inst::Class(class) => class.matches(c),
                    _ => false,
                };
                if hit && self.add(&mut next, pc + 1, pos + 1, &chars) {
                    return true;
                }
            }
            std::mem::swap(&mut current, &mut next);
        }
        false
    }

    /// Adds a thread and follows jumps, splits and assertions; true once `Match` is reached.
    fn add(&self, list: &mut ThreadList, pc: usize, pos: usize, chars: &[char]) -> bool {
        let mut stack = vec![pc];
        while let Some(pc) = stack.pop() {
            if pc >= self.prog.len() || !list.insert(pc) {
                continue;
            }
            match &self.prog[pc] {
                Inst::Jmp(x) => stack.push(*x),
                Inst::Split(x, y) => {
                    stack.push(*y);
                    stack.push(*x);
                }
                Inst::Assert(a) if assertion_holds(*a, pos, chars) => {
                    stack.push(pc + 1);
                }
                Inst::Match => return true,
                _ => {}
            }
        }
        false
    }
}

fn assertion_holds(a: Assertion, pos: usize, chars: &[char]) -> bool {
    let before = pos.checked_sub(1).and_then(|i| chars.get(i)).copied();
    let after = chars.get(pos).copied();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    match a {
        Assertion::TextStart => pos == 0,
        Assertion::TextEnd => pos == chars.len(),
        Assertion::LineStart => pos == 0 || before == Some('\n'),
        Assertion::LineEnd => pos == chars.len() || after == Some('\n'),
        Assertion::WordBoundary => word(before) != word(after),
        Assertion::NotWordBoundary => word(before) == word(after),
    }
}

/// A sparse set of program counters, in insertion order.
struct ThreadList {
    dense: Vec<usize>,
    sparse: Vec<usize>,
}

impl ThreadList {
    fn new(n: usize) -> Self {
        Self {
            dense: Vec::with_capacity(n),
            sparse: vec![0; n],
        }
    }

    fn insert(&mut self, pc: usize) -> bool {
        let i = self.sparse[pc];
        if i < self.dense.len() && self.dense[i] == pc {
            return false;
        }
        self.sparse[pc] = self.dense.len();
        self.dense.push(pc);
        true
    }

    fn clear(&mut self) {
        self.dense.clear();
    }
}

fn emit(prog: &mut Vec<Inst>, inst: Inst) -> Result<usize, PatternError> {
    if prog.len() >= MAX_PROGRAM {
        return Err(perr("expression too large", ""));
    }
    prog.push(inst);
    Ok(prog.len() - 1)
}

fn compile(node: &Node, prog: &mut Vec<Inst>, depth: usize) -> Result<(), PatternError> {
    if depth > MAX_NESTING * 2 {
        return Err(perr("expression nests too deeply", ""));
    }
    match node {
        Node::Empty => {}
        Node::Char(c, fold) => {
            emit(prog, Inst::Char(*c, *fold))?;
        }
        Node::Any(nl) => {
            emit(prog, Inst::Any(*nl))?;
        }
        Node::Class(c) => {
            emit(prog, Inst::Class(c.clone()))?;
        }
        Node::Assert(a) => {
            emit(prog, Inst::Assert(*a))?;
        }
        Node::Concat(items) => {
            for item in items {
                compile(item, prog, depth + 1)?;
            }
        }
        Node::Alt(branches) => {
            let mut jumps = Vec::new();
            for (i, branch) in branches.iter().enumerate() {
                if i + 1 < branches.len() {
                    let split = emit(prog, Inst::Split(0, 0))?;
                    compile(branch, prog, depth + 1)?;
                    jumps.push(emit(prog, Inst::Jmp(0))?);
                    let next = prog.len();
                    prog[split] = Inst::Split(split + 1, next);
                } else {
                    compile(branch, prog, depth + 1)?;
                }
            }
            let end = prog.len();
            for j in jumps {
                prog[j] = Inst::Jmp(end);
            }
        }
        Node::Repeat(inner, min, max) => {
            for _ in 0..*min {
                compile(inner, prog, depth + 1)?;
            }
            match max {
                None => {
                    let split = emit(prog, Inst::Split(0, 0))?;
                    compile(inner, prog, depth + 1)?;
                    emit(prog, Inst::Jmp(split))?;
                    let end = prog.len();
                    prog[split] = Inst::Split(split + 1, end);
                }
                Some(max) => {
                    let mut splits = Vec::new();
                    for _ in *min..*max {
                        splits.push(emit(prog, Inst::Split(0, 0))?);
                        compile(inner, prog, depth + 1)?;
                    }
                    let end = prog.len();
                    for s in splits {
                        prog[s] = Inst::Split(s + 1, end);
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Schema {
        Schema::new(v).unwrap_or_else(|e| panic!("schema refused: {e}"))
    }

    fn memcached() -> Schema {
        schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "format": "int32", "minimum": 0},
                        "x": {"type": "string", "enum": ["a", "b"]}
                    }
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        }))
    }

    fn spec_schema(props: Value) -> Schema {
        schema(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}),
        )
    }

    fn rendered(s: &Schema, obj: Value) -> Vec<String> {
        s.validate(&obj).iter().map(ToString::to_string).collect()
    }

    fn one(s: &Schema, obj: Value) -> Cause {
        let causes = s.validate(&obj);
        assert_eq!(causes.len(), 1, "expected one cause: {causes:?}");
        causes
            .into_iter()
            .next()
            .unwrap_or_else(|| Cause::required("", ""))
    }

    #[test]
    fn a_negative_memcached_size_gives_the_real_minimum_cause() {
        let c = one(&memcached(), json!({"spec": {"size": -1}}));
        assert_eq!(c.field, "spec.size");
        assert_eq!(c.reason, "FieldValueInvalid");
        assert_eq!(
            c.body(),
            "Invalid value: -1: spec.size in body should be greater than or equal to 0"
        );
        assert_eq!(
            c.to_string(),
            "spec.size: Invalid value: -1: spec.size in body should be greater than or equal to 0"
        );
        assert_eq!(
            format!(
                "Memcached.cache.example.com \"m\" is invalid: {}",
                names::aggregate(&[c])
            ),
            "Memcached.cache.example.com \"m\" is invalid: spec.size: Invalid value: -1: spec.size in body should be greater than or equal to 0"
        );
    }

    #[test]
    fn a_string_memcached_size_is_a_type_invalid_cause() {
        let c = one(&memcached(), json!({"spec": {"size": "three"}}));
        assert_eq!(c.field, "spec.size");
        assert_eq!(c.reason, "FieldValueTypeInvalid");
        assert_eq!(
            c.to_string(),
            "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
        );
    }

    #[test]
    fn a_missing_required_field_is_required_value() {
        let c = one(&memcached(), json!({"spec": {}}));
        assert_eq!(c.field, "spec.size");
        assert_eq!(c.reason, "FieldValueRequired");
        assert_eq!(c.to_string(), "spec.size: Required value");
        assert_eq!(c.body(), "Required value");
    }

    #[test]
    fn a_value_outside_the_enum_is_unsupported() {
        let c = one(&memcached(), json!({"spec": {"size": 1, "x": "c"}}));
        assert_eq!(c.reason, "FieldValueNotSupported");
        assert_eq!(
            c.to_string(),
            "spec.x: Unsupported value: \"c\": supported values: \"a\", \"b\""
        );
        let nums = spec_schema(json!({"n": {"type": "integer", "enum": [1, 2]}}));
        assert_eq!(
            rendered(&nums, json!({"spec": {"n": 3}})),
            vec!["spec.n: Unsupported value: 3: supported values: \"1\", \"2\""]
        );
        assert!(nums.validate(&json!({"spec": {"n": 2}})).is_empty());
    }

    #[test]
    fn several_causes_aggregate_in_brackets() {
        let causes = memcached().validate(&json!({"spec": {"x": "c"}}));
        assert_eq!(
            names::aggregate(&causes),
            "[spec.x: Unsupported value: \"c\": supported values: \"a\", \"b\", spec.size: Required value]"
        );
    }

    #[test]
    fn a_valid_object_has_no_causes_and_unknown_status_is_fine() {
        let obj = json!({
            "apiVersion": "cache.example.com/v1", "kind": "Memcached",
            "metadata": {"name": "m", "anything": 1},
            "spec": {"size": 3, "x": "a"},
            "status": {"nodes": ["a"]}
        });
        assert!(memcached().validate(&obj).is_empty());
    }

    #[test]
    fn maximum_and_exclusive_bounds_use_the_kube_openapi_wording() {
        let s = spec_schema(json!({
            "a": {"type": "integer", "maximum": 10},
            "b": {"type": "integer", "minimum": 0, "exclusiveMinimum": true},
            "c": {"type": "integer", "maximum": 10, "exclusiveMaximum": true},
            "d": {"type": "number", "minimum": 0.5}
        }));
        assert_eq!(
            rendered(&s, json!({"spec": {"a": 11, "b": 0, "c": 10, "d": 0.25}})),
            vec![
                "spec.a: Invalid value: 11: spec.a in body should be less than or equal to 10",
                "spec.b: Invalid value: 0: spec.b in body should be greater than 0",
                "spec.c: Invalid value: 10: spec.c in body should be less than 10",
                "spec.d: Invalid value: 0.25: spec.d in body should be greater than or equal to 0.5",
            ]
        );
    }

    #[test]
    fn integer_bounds_are_compared_as_int64_like_kube_openapi() {
        // MinimumNativeType truncates the float bound for integer data.
        let s = spec_schema(json!({"n": {"type": "integer", "minimum": 0.5}}));
        assert!(s.validate(&json!({"spec": {"n": 0}})).is_empty());
        let s = spec_schema(json!({"n": {"type": "number", "maximum": 1000000}}));
        assert_eq!(
            rendered(&s, json!({"spec": {"n": 1000000.5}})),
            vec![
                "spec.n: Invalid value: 1.0000005e+06: spec.n in body should be less than or equal to 1e+06"
            ]
        );
    }

    #[test]
    fn multiple_of_is_checked_for_integers_and_floats() {
        let s = spec_schema(json!({
            "i": {"type": "integer", "multipleOf": 5},
            "f": {"type": "number", "multipleOf": 0.5}
        }));
        assert_eq!(
            rendered(&s, json!({"spec": {"i": 7, "f": 0.75}})),
            vec![
                "spec.f: Invalid value: 0.75: spec.f in body should be a multiple of 0.5",
                "spec.i: Invalid value: 7: spec.i in body should be a multiple of 5",
            ]
        );
        assert!(s.validate(&json!({"spec": {"i": 10, "f": 1.5}})).is_empty());
    }

    #[test]
    fn string_lengths_and_patterns_report_only_the_first_failure() {
        let s = spec_schema(json!({
            "long": {"type": "string", "maxLength": 3},
            "short": {"type": "string", "minLength": 3, "pattern": "^[a-z]+$"},
            "pat": {"type": "string", "pattern": "^[a-z]+$"}
        }));
        assert_eq!(
            rendered(
                &s,
                json!({"spec": {"long": "abcd", "short": "A", "pat": "ab1"}})
            ),
            vec![
                "spec.long: Too long: value is too long",
                "spec.pat: Invalid value: \"ab1\": spec.pat in body should match '^[a-z]+$'",
                "spec.short: Invalid value: \"A\": spec.short in body should be at least 3 chars long",
            ]
        );
        let causes = s.validate(&json!({"spec": {"long": "abcd"}}));
        assert_eq!(causes[0].reason, "FieldValueTooLong");
        // Lengths count characters, not bytes.
        assert!(s.validate(&json!({"spec": {"long": "ééé"}})).is_empty());
    }

    #[test]
    fn array_item_counts_and_item_paths_are_reported() {
        let s = spec_schema(json!({
            "l": {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "string"}},
            "objs": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}
        }));
        assert_eq!(
            rendered(
                &s,
                json!({"spec": {"l": ["a"], "objs": [{"name": "x"}, {}]}})
            ),
            vec![
                "spec.l: Invalid value: 1: spec.l in body should have at least 2 items",
                "spec.objs[1].name: Required value",
            ]
        );
        let c = one(&s, json!({"spec": {"l": ["a", "b", 3]}}));
        assert_eq!(
            c.to_string(),
            "spec.l[2]: Invalid value: \"integer\": spec.l[2] in body must be of type string: \"integer\""
        );
        let causes = s.validate(&json!({"spec": {"l": ["a", "b", "c", "d"]}}));
        assert_eq!(causes[0].reason, "FieldValueTooMany");
        assert_eq!(
            causes[0].to_string(),
            "spec.l: Too many: 4: has too many items"
        );
    }

    #[test]
    fn formats_are_validated_only_where_the_server_supports_them() {
        let s = spec_schema(json!({
            "t": {"type": "string", "format": "date-time"},
            "d": {"type": "string", "format": "date"},
            "u": {"type": "string", "format": "uuid"},
            "x": {"type": "string", "format": "made-up"},
            "n": {"type": "integer", "format": "int32"}
        }));
        assert!(
            s.validate(&json!({"spec": {
                "t": "2024-05-01T12:00:00.123456Z", "d": "2024-02-29",
                "u": "123e4567-e89b-12d3-a456-426614174000", "x": "anything", "n": 5
            }}))
            .is_empty()
        );
        assert_eq!(
            rendered(&s, json!({"spec": {"t": "yesterday", "d": "2023-02-29"}})),
            vec![
                "spec.d: Invalid value: \"2023-02-29\": spec.d in body must be of type date: \"2023-02-29\"",
                "spec.t: Invalid value: \"yesterday\": spec.t in body must be of type date-time: \"yesterday\"",
            ]
        );
        let c = one(&s, json!({"spec": {"t": "nope"}}));
        assert_eq!(c.reason, "FieldValueTypeInvalid");
        assert_eq!(
            rendered(&s, json!({"spec": {"n": 1.5}})),
            vec![
                "spec.n: Invalid value: \"float64\": spec.n in body must be of type int32: \"float64\""
            ]
        );
        // A whole float is an integer.
        assert!(s.validate(&json!({"spec": {"n": 3.0}})).is_empty());
    }

    #[test]
    fn more_string_formats_accept_and_refuse_like_go() {
        for (format, good, bad) in [
            ("ipv4", "10.0.0.1", "10.0.0"),
            ("ipv6", "2001:db8::1", "2001:db8::g"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "00:1a:2b:3c:4d:5e", "00:1a:2b"),
            ("hostname", "example.com", "-bad.com"),
            ("email", "a@b.c", "no-at-sign"),
            ("byte", "aGVsbG8=", "aGVsbG8"),
            ("uri", "https://example.com/x", "relative/path"),
            ("duration", "1h30m", "90 parsecs"),
            ("hexcolor", "#fff", "#ffff"),
            (
                "uuid4",
                "123e4567-e89b-42d3-a456-426614174000",
                "123e4567-e89b-12d3-a456-426614174000",
            ),
            ("bsonobjectid", "507f1f77bcf86cd799439011", "507f1f77"),
            ("isbn10", "0-306-40615-2", "0-306-40615-3"),
            ("creditcard", "4111 1111 1111 1111", "4111 1111 1111 1112"),
            ("ssn", "123-45-6789", "123-456-789"),
            ("rgbcolor", "rgb(255, 0, 10)", "rgb(256,0,0)"),
            ("password", "anything", ""),
        ] {
            let s = spec_schema(json!({"v": {"type": "string", "format": format}}));
            assert!(
                s.validate(&json!({"spec": {"v": good}})).is_empty(),
                "{format} refused {good}"
            );
            if format != "password" {
                assert_eq!(
                    s.validate(&json!({"spec": {"v": bad}})).len(),
                    1,
                    "{format} accepted {bad}"
                );
            }
        }
    }

    #[test]
    fn nulls_are_type_errors_unless_nullable() {
        let s = spec_schema(json!({
            "a": {"type": "string"},
            "b": {"type": "string", "nullable": true},
            "c": {"type": "string", "nullable": true, "enum": ["x"]}
        }));
        assert_eq!(
            rendered(&s, json!({"spec": {"a": null, "b": null}})),
            vec![
                "spec.a: Invalid value: \"null\": spec.a in body must be of type string: \"null\""
            ]
        );
        // kube-openapi never matches null against an enum.
        assert_eq!(
            rendered(&s, json!({"spec": {"c": null}})),
            vec!["spec.c: Unsupported value: null: supported values: \"x\""]
        );
    }

    #[test]
    fn int_or_string_accepts_both_and_names_both_types() {
        let s = spec_schema(json!({"port": {"x-kubernetes-int-or-string": true}}));
        assert!(s.validate(&json!({"spec": {"port": 80}})).is_empty());
        assert!(s.validate(&json!({"spec": {"port": "http"}})).is_empty());
        assert_eq!(
            rendered(&s, json!({"spec": {"port": true}})),
            vec![
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
            ]
        );
    }

    #[test]
    fn additional_properties_validate_map_values_and_false_forbids_keys() {
        let s = spec_schema(json!({
            "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 2}},
            "closed": {"type": "object", "additionalProperties": false}
        }));
        assert_eq!(
            rendered(
                &s,
                json!({"spec": {"labels": {"ok": "a", "bad": 1}, "closed": {"k": 1}}})
            ),
            vec![
                "spec.closed: Invalid value: \"k\": spec.closed.k in body is a forbidden property",
                "spec.labels.bad: Invalid value: \"integer\": spec.labels.bad in body must be of type string: \"integer\"",
            ]
        );
    }

    #[test]
    fn one_of_reports_the_composite_error_and_the_closest_branch() {
        let s = spec_schema(json!({
            "v": {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
        }));
        assert!(s.validate(&json!({"spec": {"v": {"a": 1}}})).is_empty());
        assert_eq!(
            rendered(&s, json!({"spec": {"v": {}}})),
            vec![
                "<nil>: Invalid value: \"\": \"spec.v\" must validate one and only one schema (oneOf). Found none valid",
                "spec.v.a: Required value",
            ]
        );
        assert_eq!(
            rendered(&s, json!({"spec": {"v": {"a": 1, "b": 2}}})),
            vec![
                "<nil>: Invalid value: \"\": \"spec.v\" must validate one and only one schema (oneOf). Found 2 valid alternatives"
            ]
        );
    }

    #[test]
    fn any_of_all_of_and_not_report_their_composite_errors() {
        let s = spec_schema(json!({
            "any": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string", "minLength": 5}]},
            "all": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]},
            "not": {"type": "string", "not": {"enum": ["forbidden"]}}
        }));
        assert!(
            s.validate(&json!({"spec": {"any": 3, "all": 3, "not": "ok"}}))
                .is_empty()
        );
        assert_eq!(
            rendered(
                &s,
                json!({"spec": {"any": "abc", "all": 9, "not": "forbidden"}})
            ),
            vec![
                "spec.all: Invalid value: 9: spec.all in body should be less than or equal to 5",
                "<nil>: Invalid value: \"\": \"spec.all\" must validate all the schemas (allOf)",
                "<nil>: Invalid value: \"\": \"spec.any\" must validate at least one schema (anyOf)",
                "spec.any: Invalid value: \"abc\": spec.any in body should be at least 5 chars long",
                "<nil>: Invalid value: \"\": \"spec.not\" must not validate the schema (not)",
            ]
        );
    }

    #[test]
    fn list_type_set_and_map_report_duplicates_with_their_keys() {
        let s = spec_schema(json!({
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {
                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                "items": {"type": "object", "properties": {"port": {"type": "integer"}, "name": {"type": "string"}}}
            },
            "pairs": {
                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
                "items": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
            }
        }));
        assert_eq!(
            rendered(
                &s,
                json!({"spec": {
                    "tags": ["a", "b", "a", "a"],
                    "ports": [{"port": 80, "name": "x"}, {"port": 80, "name": "y"}, {"name": "z"}, {"name": "w"}],
                    "pairs": [{"a": "1", "b": "2"}, {"a": "1", "b": "2"}]
                }})
            ),
            vec![
                "spec.pairs[1]: Duplicate value: {\"a\":\"1\",\"b\":\"2\"}",
                "spec.ports[1]: Duplicate value: {\"port\":80}",
                "spec.ports[3]: Duplicate value: {}",
                "spec.tags[2]: Duplicate value: \"a\"",
            ]
        );
        let c = s.validate(&json!({"spec": {"ports": [1]}}));
        assert_eq!(
            c.last().map(ToString::to_string).as_deref(),
            Some(
                "spec.ports[0]: Invalid value: 1: must be an object for an array of list-type map"
            )
        );
    }

    #[test]
    fn embedded_resources_need_api_version_kind_and_valid_metadata() {
        let s = spec_schema(json!({
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}
        }));
        assert!(s
            .validate(&json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}}}}}))
            .is_empty());
        assert_eq!(
            rendered(
                &s,
                json!({"spec": {"template": {"kind": "Bad_Kind", "metadata": {"name": "a/b"}}}})
            ),
            vec![
                "spec.template.apiVersion: Required value: must not be empty",
                "spec.template.kind: Invalid value: \"Bad_Kind\": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                "spec.template.metadata.name: Invalid value: \"a/b\": may not contain '/'",
            ]
        );
    }

    #[test]
    fn pruning_drops_unknown_fields_at_every_level_but_keeps_type_and_object_meta() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "size": {"type": "integer"},
                        "nested": {"type": "object", "properties": {"keep": {"type": "string"}}},
                        "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                        "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}}}
                    }
                }
            }
        }));
        let mut obj = json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "whatever": 1},
            "spec": {
                "size": 1, "unknown": true,
                "nested": {"keep": "k", "drop": "d"},
                "list": [{"a": "1", "b": "2"}],
                "map": {"k": {"v": "1", "w": "2"}}
            },
            "status": {"gone": true}
        });
        s.prune(&mut obj);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "whatever": 1},
                "spec": {"size": 1, "nested": {"keep": "k"}, "list": [{"a": "1"}], "map": {"k": {"v": "1"}}}
            })
        );
    }

    #[test]
    fn preserve_unknown_fields_keeps_unknowns_but_prunes_inside_described_fields() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        }));
        let mut obj = json!({
            "spec": {"free": {"deep": [1, {"x": 1}]}, "known": {"a": "1", "b": "2"}},
            "status": {"anything": {"goes": true}}
        });
        s.prune(&mut obj);
        assert_eq!(
            obj,
            json!({
                "spec": {"free": {"deep": [1, {"x": 1}]}, "known": {"a": "1"}},
                "status": {"anything": {"goes": true}}
            })
        );
    }

    #[test]
    fn pruning_cleans_embedded_metadata_and_drops_non_nullable_nulls() {
        let s = spec_schema(json!({
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "a": {"type": "string"},
            "b": {"type": "string", "nullable": true},
            "c": {"type": "string", "default": "dc"}
        }));
        let mut obj = json!({"spec": {
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1}, "spec": {"x": 1}},
            "a": null, "b": null, "c": null
        }});
        s.prune(&mut obj);
        assert_eq!(
            obj,
            json!({"spec": {
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}},
                "b": null, "c": null
            }})
        );
        s.apply_defaults(&mut obj);
        assert_eq!(obj["spec"]["c"], json!("dc"));
    }

    #[test]
    fn additional_properties_true_keeps_keys_but_empties_their_objects() {
        let s = spec_schema(json!({"free": {"type": "object", "additionalProperties": true}}));
        let mut obj = json!({"spec": {"free": {"k": {"x": 1}, "s": "v"}}});
        s.prune(&mut obj);
        assert_eq!(obj, json!({"spec": {"free": {"k": {}, "s": "v"}}}));
    }

    #[test]
    fn defaults_apply_recursively_only_where_the_parent_exists() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "default": {},
                    "properties": {
                        "replicas": {"type": "integer", "default": 1},
                        "image": {"type": "object", "properties": {"tag": {"type": "string", "default": "latest"}}},
                        "probe": {"type": "object", "default": {"path": "/"}, "properties": {"port": {"type": "integer", "default": 80}}},
                        "ports": {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string", "default": "TCP"}}}},
                        "env": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string", "default": "x"}}}}
                    }
                }
            }
        }));
        let mut obj = json!({"apiVersion": "x/v1"});
        s.apply_defaults(&mut obj);
        assert_eq!(
            obj,
            json!({"apiVersion": "x/v1", "spec": {"replicas": 1, "probe": {"path": "/", "port": 80}}}),
            "image has no default, so its tag is not defaulted"
        );
        let mut obj = json!({"spec": {"replicas": 3, "image": {}, "ports": [{}, {"protocol": "UDP"}], "env": {"A": {}}}});
        s.apply_defaults(&mut obj);
        assert_eq!(
            obj,
            json!({"spec": {
                "replicas": 3, "image": {"tag": "latest"}, "probe": {"path": "/", "port": 80},
                "ports": [{"protocol": "TCP"}, {"protocol": "UDP"}], "env": {"A": {"v": "x"}}
            }})
        );
    }

    #[test]
    fn defaults_replace_non_nullable_nulls_but_not_nullable_ones() {
        let s = spec_schema(json!({
            "a": {"type": "string", "default": "x"},
            "b": {"type": "string", "nullable": true, "default": "y"}
        }));
        let mut obj = json!({"spec": {"a": null, "b": null}});
        s.apply_defaults(&mut obj);
        assert_eq!(obj, json!({"spec": {"a": "x", "b": null}}));
    }

    #[test]
    fn non_structural_schemas_are_refused_with_a_field_path() {
        let err = |v: Value| match Schema::new(v) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        };
        assert_eq!(err(json!("x")), "Invalid value: must be a schema object");
        assert_eq!(
            err(json!({})),
            "type: Required value: must not be empty at the root"
        );
        assert_eq!(
            err(json!({"type": "array", "items": {"type": "string"}})),
            "type: Invalid value: \"array\": must be object at the root"
        );
        assert_eq!(
            err(json!({"type": "object", "properties": {"spec": {"properties": {}}}})),
            "properties[spec].type: Required value: must not be empty for specified object fields"
        );
        assert_eq!(
            err(json!({"type": "object", "properties": {"l": {"type": "array"}}})),
            "properties[l].items: Required value: must be specified"
        );
        assert_eq!(
            err(json!({"type": "object", "properties": {"l": {"type": "list"}}})),
            "properties[l].type: Unsupported value: \"list\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
        );
        assert_eq!(
            err(
                json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}})
            ),
            "additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
        );
        assert_eq!(
            err(json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}})),
            "properties[a].$ref: Forbidden: $ref is not supported"
        );
        assert_eq!(
            err(
                json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(a"}}})
            ),
            "properties[a].pattern: Invalid value: \"(a\": must be a valid regular expression, but isn't: error parsing regexp: missing closing ): `(a`"
        );
        assert_eq!(
            err(
                json!({"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-list-type": "set"}}})
            ),
            "properties[a].x-kubernetes-list-type: Invalid value: \"set\": must only be used if type is array"
        );
        assert_eq!(
            err(
                json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}})
            ),
            "properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
        );
        assert!(
            err(json!({"type": "object", "properties": {"l": {
                "type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}
            }}}))
            .contains("x-kubernetes-list-map-keys")
        );
    }

    #[test]
    fn schema_errors_keep_the_pattern_error_as_their_source() {
        let e = Schema::new(
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)"}}}),
        )
        .err();
        let source = e
            .as_ref()
            .and_then(|e| std::error::Error::source(e))
            .map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("error parsing regexp: invalid or unsupported Perl syntax: `(?=`")
        );
    }

    #[test]
    fn untyped_nodes_are_allowed_for_int_or_string_preserve_and_value_validations() {
        assert!(Schema::new(json!({
            "type": "object",
            "properties": {
                "a": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "b": {"x-kubernetes-preserve-unknown-fields": true}
            }
        }))
        .is_ok());
    }

    fn re(p: &str) -> Regex {
        Regex::new(p).unwrap_or_else(|e| panic!("{p:?}: {e}"))
    }

    #[test]
    fn patterns_match_like_go_regexp() {
        let cases: &[(&str, &str, bool)] = &[
            ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "my-name", true),
            ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "my-name-", false),
            ("abc", "xxabcxx", true),
            ("^abc$", "xxabcxx", false),
            ("a|b|c", "zzc", true),
            ("^(ab)+$", "ababab", true),
            ("^(ab)+$", "ababa", false),
            ("^a{2,3}$", "aaa", true),
            ("^a{2,3}$", "aaaa", false),
            ("^a{2}$", "aa", true),
            ("^a{2,}$", "aaaaa", true),
            ("^a{,2}$", "a{,2}", true),
            ("^\\d+\\.\\d+$", "12.5", true),
            ("^\\w+$", "a_b9", true),
            ("^\\w+$", "a-b", false),
            ("^\\s*$", " \t", true),
            ("^[^abc]+$", "xyz", true),
            ("^[^abc]+$", "xaz", false),
            ("(?i)^hello$", "HeLLo", true),
            ("^(?i:a)b$", "Ab", true),
            ("^(?i:a)b$", "AB", false),
            ("^[[:alpha:]]+$", "abcXYZ", true),
            ("^[[:digit:]]+$", "12a", false),
            ("\\bfoo\\b", "a foo b", true),
            ("\\bfoo\\b", "afoob", false),
            ("^a.c$", "abc", true),
            ("^a.c$", "a\nc", false),
            ("(?s)^a.c$", "a\nc", true),
            ("(?m)^b$", "a\nb\nc", true),
            ("^$", "", true),
            ("^\\p{L}+$", "héllo", true),
            ("^[a\\-z]+$", "-az", true),
            ("^[]a]+$", "]a", true),
            ("^\\Qa.b\\E$", "a.b", true),
            ("^\\Qa.b\\E$", "axb", false),
            ("^(?P<name>x)y$", "xy", true),
            ("^\\x41\\x{42}$", "AB", true),
            ("^(a*)*$", "aaaa", true),
            ("^(a|ab)(c|bcd)(d*)$", "abcd", true),
            ("^()*x$", "x", true),
            ("^a\\ b$", "a b", true),
            ("^\\101$", "A", true),
            ("^[[:]x$", ":x", true),
            ("^([0-9]+(\\.[0-9]+)?(Ki|Mi|Gi)?)$", "1.5Gi", true),
            ("^\\$\\{[A-Z_]+\\}$", "${HOME_DIR}", true),
        ];
        for (p, text, want) in cases {
            assert_eq!(re(p).is_match(text), *want, "{p:?} on {text:?}");
        }
    }

    #[test]
    fn unsupported_or_broken_patterns_are_refused_like_go() {
        for (p, msg) in [
            (
                "(?=a)",
                "error parsing regexp: invalid or unsupported Perl syntax: `(?=`",
            ),
            (
                "(?!a)",
                "error parsing regexp: invalid or unsupported Perl syntax: `(?!`",
            ),
            (
                "(?<=a)b",
                "error parsing regexp: invalid or unsupported Perl syntax: `(?<`",
            ),
            (
                "(a)\\1",
                "error parsing regexp: invalid escape sequence: `\\1`",
            ),
            (
                "*a",
                "error parsing regexp: missing argument to repetition operator: `*`",
            ),
            (
                "a**",
                "error parsing regexp: invalid nested repetition operator: `**`",
            ),
            ("[a", "error parsing regexp: missing closing ]: `[a`"),
            ("a)", "error parsing regexp: unexpected ): `a)`"),
            (
                "a{1001}",
                "error parsing regexp: invalid repeat count: `{1001}`",
            ),
            (
                "[z-a]",
                "error parsing regexp: invalid character class range: `z-a`",
            ),
            (
                "(?i)*",
                "error parsing regexp: missing argument to repetition operator: `*`",
            ),
            (
                "a{2}{3}",
                "error parsing regexp: invalid nested repetition operator: `{2}{3}`",
            ),
            (
                "\\8",
                "error parsing regexp: invalid escape sequence: `\\8`",
            ),
        ] {
            let got = Regex::new(p).err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), Some(msg), "{p:?}");
        }
        assert!(
            Regex::new("(((a{100}){100}){100})").is_err(),
            "too large to compile"
        );
    }

    #[test]
    fn pathological_patterns_match_in_linear_time() {
        let r = re("^(a+)+$");
        let text = format!("{}b", "a".repeat(5000));
        assert!(!r.is_match(&text));
        let nested = format!("{}a{}", "(".repeat(190), ")".repeat(190));
        assert!(re(&nested).is_match("a"));
        assert!(Regex::new(&format!("{}a{}", "(".repeat(300), ")".repeat(300))).is_err());
        let r = re("(x+x+)+y");
        assert!(!r.is_match(&"x".repeat(3000)));
    }

    #[test]
    fn odd_objects_and_schemas_never_panic() {
        let s = memcached();
        for obj in [
            json!(null),
            json!(1),
            json!("x"),
            json!([]),
            json!({"spec": null}),
            json!({"spec": [1, 2]}),
            json!({"spec": {"size": 1e300}}),
            json!({"spec": {"size": -9223372036854775808_i64}}),
            json!({"spec": {"size": 18446744073709551615_u64}}),
        ] {
            let _ = s.validate(&obj);
            let mut o = obj.clone();
            s.prune(&mut o);
            s.apply_defaults(&mut o);
        }
        let mut deep = json!("leaf");
        for _ in 0..1000 {
            deep = json!([deep]);
        }
        let mut obj = json!({"spec": {"size": 1, "x": "a", "deep": deep}});
        let free = schema(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        let _ = free.validate(&obj);
        free.prune(&mut obj);
        s.prune(&mut obj);
        for bad in [
            json!({"type": "object", "properties": []}),
            json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": "x"}}}),
            json!({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 0}}}),
            json!({"type": "object", "required": "a"}),
            json!({"type": "object", "properties": {"a": {"type": "array", "items": []}}}),
        ] {
            assert!(Schema::new(bad).is_err());
        }
        let big = spec_schema(
            json!({"n": {"type": "integer", "multipleOf": 0.5, "minimum": -1e300, "maximum": 1e300}}),
        );
        let _ = big.validate(&json!({"spec": {"n": 9223372036854775807_i64}}));
    }
}
