//! ValidatingAdmissionPolicies as kube-apiserver 1.34 evaluates them
//! (k8s.io/apiserver/pkg/admission/plugin/policy/validating): on every write that reaches the
//! validating webhooks (after the object's own validation and the mutating webhooks, before
//! the validating webhooks), each stored policy whose `matchConstraints` match the request
//! (resource rules and their exclusions, `matchPolicy`, namespace and object selectors) is
//! evaluated once per binding naming it whose `matchResources` match too, in the order of
//! their names. A policy whose rules match another version than the request's
//! (`matchPolicy: Equivalent`) is given the objects in that version: a custom resource
//! converted by its CRD's conversion webhook, a failed conversion being the policy's
//! configuration error (`failed to configure policy: …`, under its `failurePolicy`).
//!
//! An evaluation binds the policy's `paramKind` object the binding's `paramRef` names (by
//! name, or every one its selector picks; none found is a refusal under
//! `parameterNotFoundAction: Deny`, else nothing to check), evaluates the policy's
//! `matchConditions`, then its `variables` in order, then its `validations` ([`super::cel`]).
//! A validation that does not hold is denied with its `messageExpression`, else its
//! `message`, else `failed expression: …`, and its `reason` (default Invalid); an
//! expression that fails follows the policy's `failurePolicy` (Fail: denied; Ignore:
//! admitted). The binding's `validationActions` decide what a denial does: `Deny` refuses
//! the request with the real server's Status (`<resource> "<name>" is forbidden:
//! ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>`,
//! the reason's code), `Warn` adds a `Warning` header, `Audit` is logged.
//!
//! # Caveats
//! - A `paramKind` is found by its group and the plural `<lowercase kind>s` (right for
//!   ConfigMaps, Secrets and most custom resources).
//! - `auditAnnotations` are not evaluated, `Audit` writes no audit annotation, and the
//!   policy's `status.typeChecking` is never written.
//! - Variables are evaluated eagerly, in order; one that fails fails only the expressions
//!   that read it (`no such key: <name>` becomes its `composited variable … fails to
//!   evaluate` error), as the real server's lazy evaluation fails.

use serde_json::{Map, Value, json};

use super::admission_webhooks::{
    self, Attributes, Invocation, evaluate_conditions, namespace_matches, object_matches,
    rule_matches, status_error,
};
use super::cel::{self, Activation, Declarations};
use super::names::Cause;
use super::status::{ApiError, GroupResource};
use super::store::Store;

const GROUP: &str = "admissionregistration.k8s.io";

/// What evaluating one binding decided for one validation (validating.PolicyDecision).
#[derive(Debug, Clone, PartialEq)]
struct Denial {
    message: String,
    /// Empty for an evaluation error: the dispatcher's default (Invalid).
    reason: String,
}

/// The stored objects of a resource of this group, by name.
fn list(store: &Store, resource: &str) -> Vec<Value> {
    let (mut items, _) = store.list(&GroupResource::new(GROUP, resource), None);
    items.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    items
}

/// Matching.Matches: whether `constraints` (a policy's `matchConstraints` or a binding's
/// `matchResources`) select the request, and the version it is evaluated in.
fn matches(
    store: &Store,
    constraints: &Value,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Option<Invocation>, ApiError> {
    let namespace = namespace_matches(store, &constraints["namespaceSelector"], attrs, object);
    if matches!(namespace, Ok(false)) {
        return Ok(None);
    }
    if !object_matches(&constraints["objectSelector"], object, old) {
        return Ok(None);
    }
    let equivalent = constraints["matchPolicy"].as_str() == Some("Equivalent");
    if rules_match(&constraints["excludeResourceRules"], attrs, equivalent).is_some() {
        return Ok(None);
    }
    let rules = &constraints["resourceRules"];
    let invocation = if rules.as_array().is_none_or(Vec::is_empty) {
        Some(Invocation {
            version: attrs.version.to_string(),
        })
    } else {
        rules_match(rules, attrs, equivalent)
    };
    if invocation.is_none() {
        return Ok(None);
    }
    namespace?;
    Ok(invocation)
}

/// The version in which one of the named rules matches: the request's, else (under
/// `matchPolicy: Equivalent`) another served version of the resource.
fn rules_match(rules: &Value, attrs: &Attributes<'_>, equivalent: bool) -> Option<Invocation> {
    let rules = rules.as_array()?;
    let named = |rule: &Value| {
        rule["resourceNames"]
            .as_array()
            .is_none_or(|names| names.is_empty() || names.iter().any(|n| n == attrs.name))
    };
    let mut versions = vec![attrs.version];
    if equivalent && attrs.subresource != "scale" {
        versions.extend(
            attrs
                .rt
                .versions
                .iter()
                .map(String::as_str)
                .filter(|v| *v != attrs.version),
        );
    }
    versions.into_iter().find_map(|version| {
        rules
            .iter()
            .any(|r| rule_matches(r, attrs, version) && named(r))
            .then(|| Invocation {
                version: version.to_string(),
            })
    })
}

/// The objects a binding's `paramRef` names (generic.CollectParams): `[None]` without a
/// `paramKind` or `paramRef`.
fn params(
    store: &Store,
    policy: &Value,
    binding: &Value,
    attrs: &Attributes<'_>,
) -> Result<Vec<Option<Value>>, String> {
    let kind = &policy["spec"]["paramKind"];
    let reference = &binding["spec"]["paramRef"];
    if !kind.is_object() || !reference.is_object() {
        return Ok(vec![None]);
    }
    let api_version = kind["apiVersion"].as_str().unwrap_or_default();
    let kind_name = kind["kind"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let gr = GroupResource::new(group, &format!("{}s", kind_name.to_lowercase()));
    let reference_namespace = reference["namespace"].as_str().unwrap_or_default();
    let namespace = if reference_namespace.is_empty() {
        attrs.namespace
    } else {
        reference_namespace
    };
    if namespace.is_empty() {
        return Err(
            "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                .into(),
        );
    }
    let with_kind = |mut param: Value| {
        param["apiVersion"] = json!(api_version);
        param["kind"] = json!(kind_name);
        Some(param)
    };
    let found: Vec<Option<Value>> = if let Some(name) = reference["name"].as_str() {
        if reference["selector"].is_object() {
            return Err("paramRef.name and paramRef.selector are mutually exclusive".into());
        }
        store
            .get(&gr, namespace, name)
            .into_iter()
            .map(with_kind)
            .collect()
    } else if reference["selector"].is_object() {
        store
            .list(&gr, Some(namespace))
            .0
            .into_iter()
            .filter(|p| {
                let labels = p["metadata"]["labels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                super::objects::selector_matches(&reference["selector"], &labels)
            })
            .map(with_kind)
            .collect()
    } else {
        return Err("one of name or selector must be provided".into());
    };
    if found.is_empty() && reference["parameterNotFoundAction"].as_str() == Some("Deny") {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(found)
}

/// cel.CreateNamespaceObject: the namespace with only the metadata CEL sees.
fn namespace_object(store: &Store, attrs: &Attributes<'_>) -> Value {
    let is_namespaces = attrs.rt.group.is_empty() && attrs.rt.resource == "namespaces";
    if attrs.namespace.is_empty() || is_namespaces {
        return Value::Null;
    }
    let Some(namespace) = store.get(&GroupResource::new("", "namespaces"), "", attrs.namespace)
    else {
        return Value::Null;
    };
    let mut meta = Map::new();
    for key in [
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "finalizers",
    ] {
        if let Some(value) = namespace["metadata"].get(key) {
            meta.insert(key.to_string(), value.clone());
        }
    }
    json!({"metadata": meta, "spec": namespace["spec"], "status": namespace["status"]})
}

/// What the policy's failure policy makes of an evaluation error: a denial under Fail.
fn on_error(fails: bool, message: String) -> Option<Denial> {
    fails.then_some(Denial {
        message,
        reason: String::new(),
    })
}

/// Validator.Validate: the denials of one policy for one param.
fn evaluate(policy: &Value, mut activation: Activation) -> Vec<Denial> {
    let spec = &policy["spec"];
    let fails = spec["failurePolicy"].as_str() != Some("Ignore");
    let declared = Declarations {
        params: spec["paramKind"].is_object(),
        authorizer: true,
        variables: true,
        validation_rule: false,
    };
    let conditions = spec["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match evaluate_conditions(&conditions, declared, &activation, !fails) {
        Ok(true) => {}
        Ok(false) => return Vec::new(),
        Err(message) => return on_error(fails, message).into_iter().collect(),
    }
    // Variables are evaluated in order; one that fails is left out, and an expression reading
    // it fails with its error, as the real server's lazy evaluation fails.
    let mut variables = Map::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().unwrap_or_default();
        let expression = variable["expression"].as_str().unwrap_or_default();
        activation.variables = variables.clone();
        match cel::compile(expression, declared).and_then(|e| e.evaluate(&activation)) {
            Ok(value) => {
                variables.insert(name.to_string(), cel::json_of(&value));
            }
            Err(e) => {
                let message = variable_error(e, &failed);
                failed.push((
                    name.to_string(),
                    format!("composited variable {name:?} fails to evaluate: {message}"),
                ));
            }
        }
    }
    activation.variables = variables;
    let mut denials = Vec::new();
    for validation in spec["validations"].as_array().into_iter().flatten() {
        let expression = validation["expression"].as_str().unwrap_or_default();
        let outcome = cel::compile(expression, declared).and_then(|e| e.holds(&activation));
        match outcome {
            Ok(true) => {}
            Ok(false) => denials.push(Denial {
                message: message_of(validation, declared, &activation),
                reason: validation["reason"]
                    .as_str()
                    .unwrap_or("Invalid")
                    .to_string(),
            }),
            Err(e) => {
                let own = e.to_string();
                let message = match variable_error(e, &failed) {
                    message if message.starts_with("composited variable") => {
                        format!("expression '{expression}' resulted in error: {message}")
                    }
                    _ => own,
                };
                denials.extend(on_error(fails, message));
            }
        }
    }
    denials
}

/// The message of an evaluation error: a failed variable's error when the expression failed
/// for reading it (`no such key: <variable>`), else its own.
fn variable_error(error: cel::CelError, failed: &[(String, String)]) -> String {
    if let cel::CelError::Evaluation { message, .. } = &error
        && let Some(key) = message.strip_prefix("no such key: ")
        && let Some((_, variable_error)) = failed.iter().find(|(name, _)| name == key)
    {
        return variable_error.clone();
    }
    match error {
        cel::CelError::Evaluation { message, .. } => message,
        other => other.to_string(),
    }
}

/// A failed validation's message: its `messageExpression` when that gives a one-line string,
/// else its `message`, else `failed expression: <expression>`.
fn message_of(validation: &Value, declared: Declarations, activation: &Activation) -> String {
    let evaluated = validation["messageExpression"]
        .as_str()
        .and_then(|source| cel::compile(source, declared).ok())
        .and_then(|e| e.evaluate(activation).ok())
        .and_then(|v| match v {
            ::cel::Value::String(s) => Some(s.trim().to_string()),
            _ => None,
        })
        .filter(|m| !m.is_empty() && !m.contains('\n') && m.len() <= 5 * 1024);
    if let Some(message) = evaluated {
        return message;
    }
    let message = validation["message"].as_str().unwrap_or_default().trim();
    if !message.is_empty() {
        return message.to_string();
    }
    format!(
        "failed expression: {}",
        validation["expression"].as_str().unwrap_or_default().trim()
    )
}

/// The code a denial's reason is answered with (reasonToCode).
fn code_of(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// A configuration error of `policy`: the failure policy's, and always a denial; the first
/// denial is kept.
fn configuration_error(
    policy: &Value,
    denied: &mut Option<String>,
    message: impl FnOnce() -> String,
) {
    if policy["spec"]["failurePolicy"].as_str() != Some("Ignore") && denied.is_none() {
        *denied = Some(message());
    }
}

/// Evaluates the ValidatingAdmissionPolicies that apply to the request (the dispatcher):
/// warnings for `Warn`, a refusal for the first `Deny`.
///
/// # Errors
/// The first denial of a binding whose `validationActions` include `Deny`, as the real
/// server's Status.
pub fn validate(
    store: &Store,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if admission_webhooks::exempt(attrs.rt) {
        return Ok(());
    }
    let bindings = list(store, "validatingadmissionpolicybindings");
    if bindings.is_empty() {
        return Ok(());
    }
    let mut denied: Option<String> = None;
    let mut denied_reason = String::new();
    for policy in list(store, "validatingadmissionpolicies") {
        let policy_name = policy["metadata"]["name"].as_str().unwrap_or_default();
        let constraints = &policy["spec"]["matchConstraints"];
        if !constraints.is_object() {
            continue;
        }
        let Some(invocation) = matches(store, constraints, attrs, object, old)? else {
            continue;
        };
        let authorizer = policy["spec"]
            .to_string()
            .contains("authorizer")
            .then(|| admission_webhooks::cel_authorizer(store, attrs));
        for binding in bindings
            .iter()
            .filter(|b| b["spec"]["policyName"].as_str() == Some(policy_name))
        {
            let binding_name = binding["metadata"]["name"].as_str().unwrap_or_default();
            let resources = &binding["spec"]["matchResources"];
            if resources.is_object() && matches(store, resources, attrs, object, old)?.is_none() {
                continue;
            }
            // The objects in the version the policy matched (a custom resource converted by
            // its CRD's webhook); a failed conversion is the policy's configuration error.
            let sent =
                admission_webhooks::converted_to(attrs, &invocation, object).and_then(|object| {
                    Ok((
                        object,
                        admission_webhooks::converted_to(attrs, &invocation, old)?,
                    ))
                });
            let (sent, sent_old) = match sent {
                Ok(sent) => sent,
                Err(e) => {
                    configuration_error(&policy, &mut denied, || {
                        format!(
                            "policy {policy_name:?} denied request: failed to configure policy: {e}"
                        )
                    });
                    continue;
                }
            };
            let actions: Vec<&str> = binding["spec"]["validationActions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let denials = match params(store, &policy, binding, attrs) {
                Ok(params) => params
                    .into_iter()
                    .flat_map(|param| {
                        let activation = Activation {
                            object: sent.clone(),
                            old_object: sent_old.clone(),
                            request: admission_webhooks::cel_request(attrs, &invocation.version),
                            namespace_object: namespace_object(store, attrs),
                            params: param.unwrap_or(Value::Null),
                            variables: Map::new(),
                            authorizer: authorizer.clone(),
                            ..Activation::default()
                        };
                        evaluate(&policy, activation)
                    })
                    .collect::<Vec<_>>(),
                Err(e) => {
                    configuration_error(&policy, &mut denied, || {
                        format!(
                            "ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request: failed to configure binding: {e}"
                        )
                    });
                    continue;
                }
            };
            for denial in denials {
                for action in &actions {
                    match *action {
                        "Deny" if denied.is_none() => {
                            denied = Some(format!(
                                "ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request: {}",
                                denial.message
                            ));
                            denied_reason = denial.reason.clone();
                        }
                        "Warn" => super::warnings::add_warning(&format!(
                            "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {}",
                            denial.message
                        )),
                        "Audit" => tracing::info!(
                            policy = policy_name,
                            binding = binding_name,
                            "validation failed (audit): {}",
                            denial.message
                        ),
                        _ => {}
                    }
                }
            }
        }
    }
    let Some(message) = denied else {
        return Ok(());
    };
    let mut status = admission_webhooks::forbidden(attrs, object.or(old), &message);
    let reason = if denied_reason.is_empty() {
        "Invalid".to_string()
    } else {
        denied_reason
    };
    status["code"] = json!(code_of(&reason));
    status["reason"] = json!(reason);
    status["details"]["causes"] = json!([{"message": message}]);
    Err(status_error(status))
}

/// Compiles a policy's expressions as its validation does: the causes of those that do not
/// compile.
pub fn policy_causes(policy: &Value) -> Vec<Cause> {
    let spec = &policy["spec"];
    let declared = Declarations {
        params: spec["paramKind"].is_object(),
        authorizer: true,
        variables: true,
        validation_rule: false,
    };
    let mut causes = admission_webhooks::match_condition_causes(
        &spec["matchConditions"],
        "spec.matchConditions",
        declared,
    );
    // Each variable's expression, then each validation's expression and messageExpression.
    let mut expressions = Vec::new();
    for (i, variable) in spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        expressions.push((
            format!("spec.variables[{i}].expression"),
            &variable["expression"],
        ));
    }
    for (i, validation) in spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for key in ["expression", "messageExpression"] {
            expressions.push((format!("spec.validations[{i}].{key}"), &validation[key]));
        }
    }
    for (field, expression) in expressions {
        let Some(expression) = expression.as_str() else {
            continue;
        };
        if let Err(e) = cel::compile(expression, declared) {
            causes.push(Cause::invalid(&field, json!(expression), e.to_string()));
        }
    }
    causes
}

/// validateValidatingAdmissionPolicyBindingSpec, in part: the causes of a binding without a
/// policy name or with validation actions the real server refuses.
pub fn binding_causes(binding: &Value) -> Vec<Cause> {
    let spec = &binding["spec"];
    let mut causes = Vec::new();
    if spec["policyName"].as_str().is_none_or(str::is_empty) {
        causes.push(Cause::required("spec.policyName", ""));
    }
    let at = "spec.validationActions";
    let actions = spec["validationActions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let supported = ["Audit", "Deny", "Warn"].map(String::from);
    let mut seen: Vec<&Value> = Vec::new();
    for (i, action) in actions.iter().enumerate() {
        if !action
            .as_str()
            .is_some_and(|a| supported.iter().any(|s| s == a))
        {
            causes.push(Cause::not_supported(
                &format!("{at}[{i}]"),
                action.clone(),
                &supported,
            ));
        }
        if seen.contains(&action) {
            causes.push(Cause::duplicate(&format!("{at}[{i}]"), action.clone()));
        }
        seen.push(action);
    }
    if seen.iter().any(|a| *a == "Deny") && seen.iter().any(|a| *a == "Warn") {
        causes.push(Cause::invalid(
            at,
            json!(actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        causes.push(Cause::required(
            at,
            "at least one validation action is required",
        ));
    }
    causes
}
