//! The validation rules of a CRD's schema (`x-kubernetes-validations`, what kubebuilder's
//! `+kubebuilder:validation:XValidation` markers write), as kube-apiserver 1.34 checks them:
//! each rule is compiled when the CRD is written, and a rule that does not compile refuses the
//! CRD ([`check_crd`]); each is evaluated on every create and update of a custom resource
//! ([`validate`]) with `self`, the value at the rule's place, and on an update `oldSelf`, the
//! value it replaces.
//!
//! As the real server (apiextensions' `schema/cel`):
//! - `self` is typed by its schema: an `integer` is an int, a `number` a double, a string of
//!   format `date` or `date-time` a timestamp, of format `duration` a duration, of format
//!   `byte` bytes; an object's properties are its fields, their names escaped (`foo-bar` is
//!   `foo__dash__bar`, `a.b` is `a__dot__b`, a CEL keyword such as `namespace` is
//!   `__namespace__`), and the `metadata` of a resource (the root, or an embedded resource)
//!   has only `name` and `generateName`.
//! - A transition rule (one that names `oldSelf`) runs only where an old value corresponds:
//!   an object's field to the old object's field, a `map` list's item to the old item with
//!   the same keys; with `optionalOldSelf` it always runs, `oldSelf` an optional.
//! - A failed rule reports `Invalid value: "<type>": <message>` (the `message`, the
//!   `messageExpression`'s string, or `failed rule: <rule>`) at the rule's place or its
//!   `fieldPath`, or the `reason`'s error type; an evaluation error reports `<error>
//!   evaluating rule: <rule>`.
//! - On an update a rule that does not name `oldSelf` and fails on a value equal to its old
//!   value (or inside one) is no error but a warning (ratcheting).
//! - The rules do not run when the schema's validation found a type, enum, length, count or
//!   required error: one cause says some rules were not checked.
//! - The schema's own causes are ratcheted alike ([`ratchet_schema_causes`]), without a
//!   warning.
//!
//! # Caveats
//! - There is no type checker (see [`super::cel`]): a CRD is refused for a rule's syntax, a
//!   variable other than `self` and `oldSelf`, and a field selected from `self` or `oldSelf`
//!   (a plain chain such as `self.spec.x`) that its schema lacks, not for a type error or a
//!   rule that is no bool; those fail when the rule is evaluated.
//! - There is no cost estimate or budget.
//! - `map` and `set` lists compare as lists (their order counts) and `+` appends; a value
//!   kept by `x-kubernetes-preserve-unknown-fields` without a schema is plain JSON.
//! - Rules inside `allOf`, `anyOf`, `oneOf` and `not` are not evaluated.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::cel::{self as expressions, Activation, CelError, Declarations};
use super::names::{
    Cause, FIELD_VALUE_NOT_SUPPORTED, FIELD_VALUE_REQUIRED, FIELD_VALUE_TOO_LONG,
    FIELD_VALUE_TOO_MANY, FIELD_VALUE_TYPE_INVALID,
};

/// The environment of every rule and message expression: `self` and `oldSelf`.
const RULE_ENVIRONMENT: Declarations = Declarations {
    validation_rule: true,
    params: false,
    authorizer: false,
    variables: false,
};

/// The longest message a `messageExpression` may give (`MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// The `reason`s a rule may give.
const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// Whether `schema` or a schema below it has validation rules.
pub fn has_rules(schema: &Value) -> bool {
    rules_of(schema).next().is_some()
        || schema["properties"]
            .as_object()
            .is_some_and(|properties| properties.values().any(has_rules))
        || has_rules_below(&schema["items"])
        || has_rules_below(&schema["additionalProperties"])
}

fn has_rules_below(schema: &Value) -> bool {
    schema.is_object() && has_rules(schema)
}

fn rules_of(schema: &Value) -> impl Iterator<Item = &Value> {
    schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
}

fn text<'v>(rule: &'v Value, key: &str) -> &'v str {
    rule[key].as_str().unwrap_or_default()
}

/// `field.Path.Child`.
fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// `field.Path.Key` and `field.Path.Index`.
fn subscript(path: &str, key: &str) -> String {
    format!("{path}[{key}]")
}

// ---------------------------------------------------------------------------------------------
// Checks of a CRD's rules when it is written.
// ---------------------------------------------------------------------------------------------

/// The causes a CRD is refused for because of its validation rules: each version's schema,
/// every rule, at `spec.versions[i].schema.openAPIV3Schema…`.
pub fn check_crd(crd: &Value) -> Vec<Cause> {
    let versions: Vec<&Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let schemas: Vec<&Value> = versions
        .iter()
        .map(|version| &version["schema"]["openAPIV3Schema"])
        .collect();
    let mut checks = Checks::default();
    // Versions that all have one schema have it checked once, where the internal CRD keeps it.
    if !schemas.is_empty() && schemas.iter().all(|schema| *schema == schemas[0]) {
        if schemas[0].is_object() {
            checks.schema(schemas[0], "spec.validation.openAPIV3Schema", None);
        }
    } else {
        for (index, schema) in schemas.into_iter().enumerate() {
            if schema.is_object() {
                let path = format!("spec.versions[{index}].schema.openAPIV3Schema");
                checks.schema(schema, &path, None);
            }
        }
    }
    checks.statements.extend(checks.expressions);
    checks.statements
}

/// What is wrong with a CRD's rules: how they are stated, then (after all of those, as the
/// real server lists them) how their expressions compile.
#[derive(Default)]
struct Checks {
    statements: Vec<Cause>,
    expressions: Vec<Cause>,
}

impl Checks {
    /// Checks the rules below `schema`, then its own; `uncorrelatable` is the list above whose
    /// items have no old value (where `oldSelf` cannot be used).
    fn schema(&mut self, schema: &Value, path: &str, uncorrelatable: Option<&str>) {
        let before = self.statements.len();
        let resource = path.ends_with("openAPIV3Schema") || embedded(schema);
        if let Some(properties) = schema["properties"].as_object() {
            for (name, property) in properties {
                let below = subscript(&child(path, "properties"), name);
                self.schema(property, &below, uncorrelatable);
            }
        }
        if schema["items"].is_object() {
            let inner = if schema["x-kubernetes-list-type"] == "map" {
                uncorrelatable
            } else {
                uncorrelatable.or(Some(path))
            };
            self.schema(&schema["items"], &child(path, "items"), inner);
        }
        if schema["additionalProperties"].is_object() {
            let below = child(path, "additionalProperties");
            self.schema(&schema["additionalProperties"], &below, uncorrelatable);
        }
        let rules: Vec<&Value> = rules_of(schema).collect();
        for (index, rule) in rules.iter().enumerate() {
            let at = subscript(&child(path, "x-kubernetes-validations"), &index.to_string());
            self.statements.extend(statement_causes(schema, rule, &at));
        }
        // Expressions are compiled only where nothing at or below is misstated.
        if self.statements.len() > before {
            return;
        }
        for (index, rule) in rules.iter().enumerate() {
            let at = subscript(&child(path, "x-kubernetes-validations"), &index.to_string());
            self.expressions.extend(expression_causes(
                schema,
                resource,
                rule,
                &at,
                uncorrelatable,
            ));
        }
    }
}

fn has_newlines(text: &str) -> bool {
    text.contains(['\n', '\r'])
}

/// How a rule is stated: its rule, message, message expression, reason and field path.
fn statement_causes(schema: &Value, rule: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let source = text(rule, "rule").trim();
    let message = text(rule, "message");
    let field = |name: &str| child(at, name);
    if source.is_empty() {
        causes.push(Cause::required(&field("rule"), "rule is not specified"));
    } else if !message.is_empty() && message.trim().is_empty() {
        causes.push(Cause::invalid(
            &field("message"),
            Value::from(message),
            "must be non-empty if specified",
        ));
    } else if has_newlines(message.trim()) {
        causes.push(Cause::invalid(
            &field("message"),
            Value::from(message),
            "must not contain line breaks",
        ));
    } else if has_newlines(source) && message.trim().is_empty() {
        causes.push(Cause::required(
            &field("message"),
            "message must be specified if rule contains line breaks",
        ));
    }
    let message_expression = text(rule, "messageExpression");
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        causes.push(Cause::required(
            &field("messageExpression"),
            "messageExpression must be non-empty if specified",
        ));
    }
    if let Some(reason) = rule["reason"].as_str()
        && !REASONS.contains(&reason)
    {
        let supported: Vec<String> = REASONS.iter().map(ToString::to_string).collect();
        causes.push(Cause::not_supported(
            &field("reason"),
            Value::from(reason),
            &supported,
        ));
    }
    let field_path = text(rule, "fieldPath");
    if !field_path.is_empty() && field_path.trim().is_empty() {
        causes.push(Cause::invalid(
            &field("fieldPath"),
            Value::from(field_path),
            "must be non-empty if specified",
        ));
    }
    if has_newlines(field_path) {
        causes.push(Cause::invalid(
            &field("fieldPath"),
            Value::from(field_path),
            "must not contain line breaks",
        ));
    }
    if !field_path.is_empty() && normalized_field_path(field_path, schema).is_err() {
        causes.push(Cause::invalid(
            &field("fieldPath"),
            Value::from(field_path),
            "must be a valid path",
        ));
    }
    causes
}

/// How a rule's expressions compile, and whether it may use `oldSelf` where it stands.
fn expression_causes(
    schema: &Value,
    resource: bool,
    rule: &Value,
    at: &str,
    uncorrelatable: Option<&str>,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let source = text(rule, "rule").trim();
    if source.is_empty() {
        return causes;
    }
    let field = |name: &str| child(at, name);
    let typed = |variable: &str, path: &[&str]| fields_of(schema, resource, variable, path);
    let compiled = match checked(source, &typed) {
        Ok(compiled) => Some(compiled),
        Err(issues) => {
            causes.push(Cause::invalid(
                &field("rule"),
                rule_value(rule),
                format!("compilation failed: {issues}"),
            ));
            None
        }
    };
    let message_expression = text(rule, "messageExpression");
    if !message_expression.trim().is_empty()
        && let Err(issues) = checked(message_expression, &typed)
    {
        causes.push(Cause::invalid(
            &field("messageExpression"),
            rule_value(rule),
            format!("messageExpression compilation failed: {issues}"),
        ));
    }
    let Some(compiled) = compiled else {
        return causes;
    };
    if compiled.references("oldSelf") {
        if let Some(list) = uncorrelatable {
            causes.push(Cause::invalid(
                &field("rule"),
                Value::from(text(rule, "rule")),
                format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {list}"),
            ));
        }
    } else if let Some(optional) = rule["optionalOldSelf"].as_bool() {
        causes.push(Cause::invalid(
            &field("optionalOldSelf"),
            Value::Bool(optional),
            "may not be set if oldSelf is not used in rule",
        ));
    }
    causes
}

/// `source` compiled in a rule's environment, with the fields it selects from `self` and
/// `oldSelf` checked against their schema, or cel-go's issues.
fn checked(
    source: &str,
    fields: expressions::FieldsOf<'_>,
) -> Result<Arc<expressions::Expression>, String> {
    let compiled = expressions::compile(source, RULE_ENVIRONMENT).map_err(|error| match error {
        CelError::Compile(issues)
        | CelError::Evaluation {
            message: issues, ..
        } => issues,
    })?;
    match compiled.undefined_fields(fields) {
        Some(issues) => Err(issues),
        None => Ok(compiled),
    }
}

/// The fields CEL's type of `self` (and `oldSelf`) has at `path` below a rule's place, from
/// the schema there (`resource` for a resource's root): an object's escaped property names
/// (with `apiVersion`, `kind` and `metadata` for a resource, whose `metadata` has `name` and
/// `generateName`), or `None` for a map, a value kept without a schema, or what is no object.
fn fields_of(schema: &Value, resource: bool, variable: &str, path: &[&str]) -> Option<Vec<String>> {
    if !matches!(variable, "self" | "oldSelf") {
        return None;
    }
    let mut schema = schema;
    let mut resource = resource;
    let mut path = path.iter();
    while let Some(field) = path.next() {
        if resource && *field == "metadata" {
            return path
                .next()
                .is_none()
                .then(|| vec!["name".to_string(), "generateName".to_string()]);
        }
        if let Some(properties) = schema["properties"].as_object() {
            let (_, property) = properties
                .iter()
                .find(|(name, _)| escape(name).as_deref() == Some(*field))?;
            schema = property;
        } else if schema["additionalProperties"].is_object() {
            schema = &schema["additionalProperties"];
        } else {
            return None;
        }
        resource = embedded(schema);
    }
    let properties = schema["properties"].as_object();
    if properties.is_none() && !resource {
        return None;
    }
    let mut fields: Vec<String> = properties
        .into_iter()
        .flatten()
        .filter_map(|(name, _)| escape(name))
        .collect();
    if resource {
        fields.extend(["apiVersion", "kind", "metadata"].map(String::from));
    }
    Some(fields)
}

/// The rule as the real server prints it in a refusal: the internal `ValidationRule` struct,
/// marshalled with its Go field names.
fn rule_value(rule: &Value) -> Value {
    serde_json::json!({
        "Rule": text(rule, "rule"),
        "Message": text(rule, "message"),
        "MessageExpression": text(rule, "messageExpression"),
        "Reason": rule.get("reason").cloned().unwrap_or(Value::Null),
        "FieldPath": text(rule, "fieldPath"),
        "OptionalOldSelf": rule.get("optionalOldSelf").cloned().unwrap_or(Value::Null),
    })
}

/// A rule's `fieldPath` (`.spec.x`, `.labels['a.b']`) as a field path relative to the rule's
/// place (`spec.x`, `labels[a.b]`), or why it does not name a field of `schema`.
fn normalized_field_path(path: &str, schema: &Value) -> Result<String, String> {
    let mut tokens = tokens(path)?.into_iter();
    let mut out = String::new();
    let mut schema = schema;
    while let Some(token) = tokens.next() {
        let name = match token.as_str() {
            "." => tokens.next().ok_or("unexpected end of JSON path")?,
            "[" => {
                let quoted = tokens.next().ok_or("unexpected end of JSON path")?;
                if quoted.len() < 2 || !quoted.starts_with('\'') || !quoted.ends_with('\'') {
                    return Err(format!("expected single quoted string but got {quoted}"));
                }
                let name = unescape_single_quoted(&quoted[1..quoted.len() - 1])?;
                if tokens.next().as_deref() != Some("]") {
                    return Err("expected ]".to_string());
                }
                name
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        };
        if let Some(properties) = schema["properties"].as_object() {
            schema = properties
                .get(&name)
                .ok_or("does not refer to a valid field")?;
            out = child(&out, &name);
        } else if schema["additionalProperties"].is_object() {
            schema = &schema["additionalProperties"];
            out = subscript(&out, &name);
        } else {
            return Err("does not refer to a valid field".to_string());
        }
    }
    Ok(out)
}

/// The tokens of a field path: `.`, `[`, `]`, single-quoted strings and names.
fn tokens(path: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut chars = path.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        match c {
            '.' | '[' | ']' => tokens.push(c.to_string()),
            '\'' => {
                let mut end = None;
                let mut previous = c;
                for (at, next) in chars.by_ref() {
                    if next == '\'' && previous != '\\' {
                        end = Some(at);
                        break;
                    }
                    previous = next;
                }
                let end = end.ok_or("unexpected end of JSON path")?;
                tokens.push(path[start..=end].to_string());
            }
            _ => {
                let mut end = path.len();
                while let Some(&(at, next)) = chars.peek() {
                    if matches!(next, '.' | '[' | ']') {
                        end = at;
                        break;
                    }
                    chars.next();
                }
                tokens.push(path[start..end].to_string());
            }
        }
    }
    Ok(tokens)
}

fn unescape_single_quoted(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('a') => '\u{7}',
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('v') => '\u{b}',
            Some('\'') => '\'',
            Some('\\') => '\\',
            other => {
                return Err(format!(
                    "invalid string literal: invalid escape char \\{}",
                    other.map(String::from).unwrap_or_default()
                ));
            }
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Evaluation on writes of custom resources.
// ---------------------------------------------------------------------------------------------

/// The causes `obj` (and, for an update, `old`, both in the version `schema` describes) fails
/// the rules of `schema` with, after the schema's own validation found `found`.
pub fn validate(schema: &Value, obj: &Value, old: Option<&Value>, found: &[Cause]) -> Vec<Cause> {
    if !has_rules(schema) {
        return Vec::new();
    }
    let blocking = [
        FIELD_VALUE_NOT_SUPPORTED,
        FIELD_VALUE_REQUIRED,
        FIELD_VALUE_TOO_LONG,
        FIELD_VALUE_TOO_MANY,
        FIELD_VALUE_TYPE_INVALID,
    ];
    if found.iter().any(|cause| blocking.contains(&cause.reason)) {
        return vec![Cause::invalid(
            "<nil>",
            Value::Null,
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        )];
    }
    let mut causes = Vec::new();
    let place = Place {
        path: String::new(),
        resource_root: true,
        unchanged: old.map(|old| old == obj),
        root: true,
    };
    walk(schema, &place, obj, old, &mut causes);
    causes
}

/// The schema's causes an update keeps (CRDValidationRatcheting): a cause raised at a value
/// the update left as it was — or, for a missing required field, at an object it left as it
/// was — is dropped. A value corresponds to the old one at the same field path, an item of a
/// `map` list to the old item with its keys; below a list of another kind the list itself is
/// compared.
pub fn ratchet_schema_causes(
    schema: &Value,
    obj: &Value,
    old: &Value,
    causes: Vec<Cause>,
) -> Vec<Cause> {
    causes
        .into_iter()
        .filter(|cause| {
            let mut segments = field_segments(&cause.field);
            if cause.reason == FIELD_VALUE_REQUIRED {
                segments.pop();
            }
            !unchanged_at(schema, obj, old, &segments)
        })
        .collect()
}

/// The segments of a field path (`spec.ports[0].name`: `spec`, `[0]`, `name`); none for
/// `<nil>` or an empty path.
fn field_segments(path: &str) -> Vec<String> {
    let mut segments = Vec::new();
    if path.is_empty() || path == "<nil>" {
        return segments;
    }
    for part in path.split('.') {
        let mut rest = part;
        if let Some(at) = rest.find('[') {
            if at > 0 {
                segments.push(rest[..at].to_string());
            }
            rest = &rest[at..];
            while let Some(end) = rest.find(']') {
                segments.push(rest[..=end].to_string());
                rest = &rest[end + 1..];
            }
        } else {
            segments.push(rest.to_string());
        }
    }
    segments
}

/// Whether the value at `segments` (or the nearest value above it that corresponds to an old
/// one) is what it was.
fn unchanged_at(schema: &Value, new: &Value, old: &Value, segments: &[String]) -> bool {
    let Some((first, rest)) = segments.split_first() else {
        return new == old;
    };
    if let Some(index) = first
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .and_then(|i| i.parse::<usize>().ok())
        && let Some(item) = new.as_array().and_then(|items| items.get(index))
    {
        return match corresponding_item(schema, item, old) {
            Some(old_item) => unchanged_at(&schema["items"], item, old_item, rest),
            None => new == old,
        };
    }
    let name = first
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(first);
    let sub = match schema["properties"].get(name) {
        Some(sub) => sub,
        None => &schema["additionalProperties"],
    };
    match (new.get(name), old.get(name)) {
        (Some(new_field), Some(old_field)) => unchanged_at(sub, new_field, old_field, rest),
        _ => new == old,
    }
}

/// Where a value stands: its path, whether it is a resource, and whether the nearest value
/// that corresponds to an old one is unchanged (`None` on a create).
struct Place {
    path: String,
    resource_root: bool,
    unchanged: Option<bool>,
    root: bool,
}

impl Place {
    fn below(
        &self,
        path: String,
        schema: &Value,
        value: &Value,
        old: Option<&Value>,
        field: Option<&str>,
    ) -> Self {
        let unchanged = match (self.unchanged, old) {
            (None, _) => None,
            // The root's apiVersion and kind are never ratcheted.
            _ if self.root && matches!(field, Some("apiVersion" | "kind")) => Some(false),
            (Some(_), Some(old)) => Some(old == value),
            (Some(parent), None) => Some(parent),
        };
        Self {
            path,
            resource_root: embedded(schema),
            unchanged,
            root: false,
        }
    }
}

fn embedded(schema: &Value) -> bool {
    schema["x-kubernetes-embedded-resource"].as_bool() == Some(true)
}

fn walk(schema: &Value, place: &Place, value: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
    if value.is_null() {
        return;
    }
    let old = old.filter(|old| !old.is_null());
    evaluate(schema, place, value, old, out);
    match value {
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            for (name, field) in map {
                let (sub, path) = match properties.and_then(|p| p.get(name)) {
                    Some(sub) => (sub, child(&place.path, name)),
                    None if additional.is_object() => (additional, subscript(&place.path, name)),
                    None => continue,
                };
                if !has_rules(sub) {
                    continue;
                }
                let old_field = old.and_then(|old| old.get(name));
                let below = place.below(path, sub, field, old_field, Some(name));
                walk(sub, &below, field, old_field, out);
            }
        }
        Value::Array(items) => {
            let item_schema = &schema["items"];
            if !item_schema.is_object() || !has_rules(item_schema) {
                return;
            }
            for (index, item) in items.iter().enumerate() {
                let old_item = old.and_then(|old| corresponding_item(schema, item, old));
                let path = subscript(&place.path, &index.to_string());
                let below = place.below(path, item_schema, item, old_item, None);
                walk(item_schema, &below, item, old_item, out);
            }
        }
        _ => {}
    }
}

/// The old item of a `map` list with the keys of `item`; items of other lists correspond to
/// none.
fn corresponding_item<'v>(schema: &Value, item: &Value, old: &'v Value) -> Option<&'v Value> {
    if schema["x-kubernetes-list-type"] != "map" {
        return None;
    }
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old.as_array()?
        .iter()
        .find(|candidate| keys.iter().all(|key| candidate.get(*key) == item.get(*key)))
}

fn evaluate(
    schema: &Value,
    place: &Place,
    value: &Value,
    old: Option<&Value>,
    out: &mut Vec<Cause>,
) {
    let mut rules = rules_of(schema).peekable();
    if rules.peek().is_none() {
        return;
    }
    let type_name = Value::from(schema["type"].as_str().unwrap_or_default());
    let at = if place.path.is_empty() {
        "<nil>"
    } else {
        place.path.as_str()
    };
    let typed_self = typed(value, schema, place.resource_root);
    let typed_old = old.map(|old| typed(old, schema, place.resource_root));
    for rule in rules {
        let source = text(rule, "rule").trim();
        if source.is_empty() {
            continue;
        }
        let compiled = match expressions::compile(source, RULE_ENVIRONMENT) {
            Ok(compiled) => compiled,
            Err(error) => {
                out.push(Cause::invalid(
                    at,
                    type_name.clone(),
                    format!("rule compile error: {error}"),
                ));
                continue;
            }
        };
        let transition = compiled.references("oldSelf");
        let optional_old_self = rule["optionalOldSelf"].as_bool() == Some(true);
        if transition && typed_old.is_none() && !optional_old_self {
            continue;
        }
        let activation = Activation {
            rule_self: Some(typed_self.clone()),
            rule_old_self: typed_old.clone(),
            ..Activation::default()
        };
        let outcome = if optional_old_self {
            let optional = match &typed_old {
                Some(old) => ::cel::objects::OptionalValue::of(old.clone()),
                None => ::cel::objects::OptionalValue::none(),
            };
            compiled.evaluate(&Activation {
                rule_old_self: Some(::cel::Value::Opaque(Arc::new(optional))),
                ..activation.clone()
            })
        } else {
            compiled.evaluate(&activation)
        };
        let named = rule_error_string(rule);
        match outcome {
            Ok(::cel::Value::Bool(true)) => continue,
            Ok(_) => {}
            Err(CelError::Evaluation { message, .. })
                if message.starts_with("no such overload") =>
            {
                out.push(Cause::invalid(
                    at,
                    type_name.clone(),
                    format!("'{message}': call arguments did not match a supported operator, function or macro signature for rule: {named}"),
                ));
                continue;
            }
            Err(CelError::Evaluation { message, .. } | CelError::Compile(message)) => {
                out.push(Cause::invalid(
                    at,
                    type_name.clone(),
                    format!("{message} evaluating rule: {named}"),
                ));
                continue;
            }
        }
        let ratcheted = !transition && place.unchanged == Some(true);
        let mut field = place.path.clone();
        let field_path = text(rule, "fieldPath");
        if !field_path.is_empty()
            && let Ok(normalized) = normalized_field_path(field_path, schema)
            && !normalized.is_empty()
        {
            field = child(&field, &normalized);
        }
        if field.is_empty() {
            field = "<nil>".to_string();
        }
        let detail = message_of(rule, &activation).unwrap_or_else(|| {
            let message = text(rule, "message").trim();
            if message.is_empty() {
                format!("failed rule: {named}")
            } else {
                message.to_string()
            }
        });
        let cause = match rule["reason"].as_str() {
            Some("FieldValueForbidden") => Cause::forbidden(&field, detail),
            Some("FieldValueRequired") => Cause::required(&field, detail),
            Some("FieldValueDuplicate") => Cause::duplicate(&field, type_name.clone()),
            _ => Cause::invalid(&field, type_name.clone(), detail),
        };
        if ratcheted {
            super::warnings::add_warning(&cause.to_string());
        } else {
            out.push(cause);
        }
    }
}

/// `ruleErrorString`: the rule's message, or the rule itself.
fn rule_error_string(rule: &Value) -> String {
    let message = text(rule, "message").trim();
    if message.is_empty() {
        text(rule, "rule").trim().to_string()
    } else {
        message.to_string()
    }
}

/// The message a rule's `messageExpression` gives, when it gives a usable one (a string,
/// not empty, on one line, at most 5 KiB): otherwise the `message` is used.
fn message_of(rule: &Value, activation: &Activation) -> Option<String> {
    let source = text(rule, "messageExpression");
    if source.trim().is_empty() {
        return None;
    }
    let compiled = expressions::compile(source, RULE_ENVIRONMENT).ok()?;
    match compiled.evaluate(activation) {
        Ok(::cel::Value::String(message)) => {
            let message = message.trim();
            (!message.is_empty() && !message.contains('\n') && message.len() <= MAX_MESSAGE_BYTES)
                .then(|| message.to_string())
        }
        Ok(_) | Err(_) => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Values typed by their schema (UnstructuredToVal).
// ---------------------------------------------------------------------------------------------

/// CEL's reserved words, which a property named alike is escaped from (`__in__`).
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property's name as a CEL field (`Escape`), or `None` for one CEL cannot name.
pub fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

fn string_value(text: &str) -> ::cel::Value {
    ::cel::Value::String(Arc::new(text.to_string()))
}

fn map_value(entries: HashMap<::cel::objects::Key, ::cel::Value>) -> ::cel::Value {
    ::cel::Value::Map(::cel::objects::Map {
        map: Arc::new(entries),
    })
}

fn key(name: &str) -> ::cel::objects::Key {
    ::cel::objects::Key::String(Arc::new(name.to_string()))
}

/// `value` as CEL sees it under `schema`; `resource` for the root of a resource, whose
/// `apiVersion`, `kind` and `metadata` (`name` and `generateName` only) are fields too.
fn typed(value: &Value, schema: &Value, resource: bool) -> ::cel::Value {
    if value.is_null() {
        return ::cel::Value::Null;
    }
    if schema["x-kubernetes-int-or-string"].as_bool() == Some(true) {
        return match value {
            Value::String(text) => string_value(text),
            Value::Number(n) => n.as_i64().map_or(::cel::Value::Null, ::cel::Value::Int),
            _ => ::cel::Value::Null,
        };
    }
    match (schema["type"].as_str(), value) {
        (Some("object"), Value::Object(map)) => {
            let mut entries = HashMap::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (name, field) in map {
                    if let (Some(sub), Some(escaped)) = (properties.get(name), escape(name)) {
                        entries.insert(key(&escaped), typed(field, sub, embedded(sub)));
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                let sub = &schema["additionalProperties"];
                for (name, field) in map {
                    entries.insert(key(name), typed(field, sub, embedded(sub)));
                }
            }
            if resource {
                for name in ["apiVersion", "kind"] {
                    if let Some(text) = map.get(name).and_then(Value::as_str) {
                        entries.insert(key(name), string_value(text));
                    }
                }
                if let Some(meta) = map.get("metadata").and_then(Value::as_object) {
                    let fields = ["name", "generateName"]
                        .into_iter()
                        .filter_map(|name| {
                            let text = meta.get(name)?.as_str()?;
                            Some((key(name), string_value(text)))
                        })
                        .collect();
                    entries.insert(key("metadata"), map_value(fields));
                }
            }
            map_value(entries)
        }
        (Some("array"), Value::Array(items)) => {
            let sub = &schema["items"];
            ::cel::Value::List(Arc::new(
                items
                    .iter()
                    .map(|item| typed(item, sub, embedded(sub)))
                    .collect(),
            ))
        }
        (Some("string"), Value::String(text)) => match schema["format"].as_str() {
            Some("duration") => {
                duration(text).map_or_else(|| string_value(text), ::cel::Value::Duration)
            }
            Some("date") => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|date| date.and_hms_opt(0, 0, 0))
                .map_or_else(
                    || string_value(text),
                    |at| ::cel::Value::Timestamp(at.and_utc().fixed_offset()),
                ),
            Some("date-time") => chrono::DateTime::parse_from_rfc3339(text)
                .map_or_else(|_| string_value(text), ::cel::Value::Timestamp),
            Some("byte") => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_or_else(
                        |_| string_value(text),
                        |bytes| ::cel::Value::Bytes(Arc::new(bytes)),
                    )
            }
            _ => string_value(text),
        },
        (Some("number"), Value::Number(n)) => ::cel::Value::Float(n.as_f64().unwrap_or_default()),
        (Some("integer"), Value::Number(n)) => {
            n.as_i64().map_or(::cel::Value::Null, ::cel::Value::Int)
        }
        (Some("boolean"), Value::Bool(b)) => ::cel::Value::Bool(*b),
        _ => ::cel::to_value(value).unwrap_or(::cel::Value::Null),
    }
}

/// A string of format `duration` (strfmt's `ParseDuration`): Go's `time.ParseDuration`
/// syntax (`1h30m`, `1.5s`), or `<n> <unit>` with units up to weeks (`3 days`).
fn duration(text: &str) -> Option<chrono::Duration> {
    const UNITS: &[(&[&str], i64)] = &[
        (&["ns", "nano", "nanos", "nanosecond", "nanoseconds"], 1),
        (
            &[
                "us",
                "µs",
                "μs",
                "micro",
                "micros",
                "microsecond",
                "microseconds",
            ],
            1_000,
        ),
        (
            &["ms", "milli", "millis", "millisecond", "milliseconds"],
            1_000_000,
        ),
        (&["s", "sec", "secs", "second", "seconds"], 1_000_000_000),
        (&["m", "min", "mins", "minute", "minutes"], 60_000_000_000),
        (&["h", "hr", "hrs", "hour", "hours"], 3_600_000_000_000),
        (&["d", "day", "days"], 86_400_000_000_000),
        (&["w", "wk", "wks", "week", "weeks"], 604_800_000_000_000),
    ];
    let factor = |unit: &str| {
        UNITS
            .iter()
            .find(|(names, _)| names.contains(&unit))
            .map(|(_, nanos)| *nanos)
    };
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    let mut total: f64 = 0.0;
    let mut rest = rest.trim_start();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(rest.len());
        let nanos = factor(&rest[..unit_end].to_lowercase())?;
        total += number * nanos as f64;
        rest = rest[unit_end..].trim_start();
    }
    let nanos = total as i64;
    Some(chrono::Duration::nanoseconds(if negative {
        -nanos
    } else {
        nanos
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.minReplicas <= self.maxReplicas",
                     "message": "minReplicas must not exceed maxReplicas"},
                    {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"}],
                "properties": {
                    "minReplicas": {"type": "integer"},
                    "maxReplicas": {"type": "integer"},
                    "mode": {"type": "string"},
                    "weight": {"type": "number"},
                    "timeout": {"type": "string", "format": "duration",
                        "x-kubernetes-validations": [{"rule": "self <= duration('1h')"}]},
                    "host-name": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self != ''", "fieldPath": ""}]},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object",
                            "x-kubernetes-validations": [
                                {"rule": "self.port == oldSelf.port", "message": "port is immutable"}],
                            "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}}},
                "required": ["minReplicas"]}}})
    }

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "example.org/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "default"}, "spec": spec})
    }

    fn messages(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_failed_rule_is_reported_with_its_message_at_its_place() {
        let causes = validate(
            &schema(),
            &object(json!({"minReplicas": 5, "maxReplicas": 2, "mode": "a"})),
            None,
            &[],
        );
        assert_eq!(
            messages(&causes),
            ["spec: Invalid value: \"object\": minReplicas must not exceed maxReplicas"]
        );
    }

    #[test]
    fn transition_rules_run_only_on_updates() {
        let old = object(json!({"minReplicas": 1, "maxReplicas": 2, "mode": "a"}));
        let new = object(json!({"minReplicas": 1, "maxReplicas": 2, "mode": "b"}));
        assert!(validate(&schema(), &new, None, &[]).is_empty());
        assert_eq!(
            messages(&validate(&schema(), &new, Some(&old), &[])),
            ["spec: Invalid value: \"object\": mode is immutable"]
        );
    }

    #[test]
    fn an_unchanged_value_that_fails_a_rule_is_ratcheted_on_update() {
        let old = object(json!({"minReplicas": 5, "maxReplicas": 2, "mode": "a"}));
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"changed": "yes"});
        assert!(validate(&schema(), &new, Some(&old), &[]).is_empty());
        new["spec"]["minReplicas"] = json!(6);
        assert_eq!(validate(&schema(), &new, Some(&old), &[]).len(), 1);
    }

    #[test]
    fn schema_causes_at_values_an_update_left_as_they_were_are_dropped() {
        let schema = schema();
        let old = object(json!({"minReplicas": 1, "maxReplicas": 50, "mode": "a",
            "ports": [{"name": "a", "port": 1}]}));
        let mut new = old.clone();
        new["spec"]["mode"] = json!("b");
        let causes = vec![
            Cause::invalid("spec.maxReplicas", json!(50), "too many"),
            Cause::invalid("spec.mode", json!("b"), "bad mode"),
            Cause::required("spec.weight", ""),
            Cause::invalid("spec.ports[0].port", json!(1), "low"),
        ];
        assert_eq!(
            messages(&ratchet_schema_causes(&schema, &new, &old, causes)),
            [
                "spec.mode: Invalid value: \"b\": bad mode",
                "spec.weight: Required value"
            ]
        );
    }

    #[test]
    fn a_duration_string_is_a_duration_and_map_list_items_meet_their_old_items_by_key() {
        let old = object(
            json!({"minReplicas": 1, "maxReplicas": 1, "mode": "a", "timeout": "30m",
            "ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}),
        );
        let new = object(
            json!({"minReplicas": 1, "maxReplicas": 1, "mode": "a", "timeout": "2h",
            "ports": [{"name": "b", "port": 3}, {"name": "a", "port": 1}, {"name": "c", "port": 9}]}),
        );
        assert_eq!(
            messages(&validate(&schema(), &new, Some(&old), &[])),
            [
                "spec.ports[0]: Invalid value: \"object\": port is immutable",
                "spec.timeout: Invalid value: \"string\": failed rule: self <= duration('1h')"
            ]
        );
    }

    #[test]
    fn a_blocking_schema_error_keeps_the_rules_from_running() {
        let found = [Cause::required("spec.minReplicas", "")];
        assert_eq!(
            messages(&validate(&schema(), &object(json!({})), None, &found)),
            [
                "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
            ]
        );
    }

    #[test]
    fn property_names_are_escaped_as_cel_names_them() {
        assert_eq!(
            escape("foo-bar.baz/x").as_deref(),
            Some("foo__dash__bar__dot__baz__slash__x")
        );
        assert_eq!(escape("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("1a"), None);
        assert_eq!(escape("a b"), None);
    }

    fn crd_with_rules(rules: Value) -> Value {
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema":
            {"type": "object", "properties": {"spec": {"type": "object",
                "x-kubernetes-validations": rules,
                "properties": {"a": {"type": "integer"}}}}}}}]}})
    }

    #[test]
    fn a_crd_whose_rule_does_not_compile_is_refused_at_the_rule() {
        let crd = crd_with_rules(json!([{"rule": "self.a >"}, {"rule": "object.a == 1"}]));
        let causes = messages(&check_crd(&crd));
        assert_eq!(causes.len(), 2, "{causes:#?}");
        assert!(
            causes[0].starts_with("spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: {\"Rule\":\"self.a \\u003e\",\"Message\":\"\","),
            "{}",
            causes[0]
        );
        assert!(
            causes[0].contains("compilation failed: ERROR: <input>:1:"),
            "{}",
            causes[0]
        );
        assert!(
            causes[1].contains("undeclared reference to 'object'"),
            "{}",
            causes[1]
        );
    }

    #[test]
    fn a_crd_whose_rule_selects_a_field_its_schema_lacks_is_refused() {
        let crd = json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema":
            {"type": "object",
             "x-kubernetes-validations": [
                {"rule": "self.metadata.name != '' && has(self.metadata.labels)"}],
             "properties": {"spec": {"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.host__dash__name != '' && self.sizes.any > 0 && self.nope"}],
                "properties": {"host-name": {"type": "string"},
                    "sizes": {"type": "object", "additionalProperties": {"type": "integer"}}}}}}}}]}});
        let causes = messages(&check_crd(&crd));
        assert_eq!(causes.len(), 2, "{causes:#?}");
        assert!(causes[0].ends_with("ERROR: <input>:1:58: undefined field 'nope'\n | self.host__dash__name != '' && self.sizes.any > 0 && self.nope\n | .........................................................^"), "{}", causes[0]);
        assert!(
            causes[1].contains("undefined field 'labels'"),
            "{}",
            causes[1]
        );
    }

    #[test]
    fn a_misstated_rule_refuses_its_crd_and_keeps_the_rules_beside_it_from_compiling() {
        let crd = crd_with_rules(json!([{"rule": "self.a >"},
            {"rule": "self.a == 1", "reason": "Bad"},
            {"rule": "self.a == 1", "fieldPath": ".nope"}]));
        assert_eq!(
            messages(&check_crd(&crd)),
            [
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].reason: Unsupported value: \"Bad\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"",
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[2].fieldPath: Invalid value: \".nope\": must be a valid path",
            ]
        );
    }

    #[test]
    fn field_paths_are_normalized_against_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}}}});
        assert_eq!(
            normalized_field_path(".a['b.c']", &schema).as_deref(),
            Ok("a.b.c")
        );
        assert_eq!(
            normalized_field_path(".m.k", &schema).as_deref(),
            Ok("m[k]")
        );
        assert!(normalized_field_path(".x", &schema).is_err());
        assert!(normalized_field_path("a", &schema).is_err());
    }

    #[test]
    fn durations_read_as_strfmt_reads_them() {
        assert_eq!(duration("1h30m"), Some(chrono::Duration::minutes(90)));
        assert_eq!(duration("1.5s"), Some(chrono::Duration::milliseconds(1500)));
        assert_eq!(duration("3 days"), Some(chrono::Duration::days(3)));
        assert_eq!(duration("soon"), None);
    }
}
