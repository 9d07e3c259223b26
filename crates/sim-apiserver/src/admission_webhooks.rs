//! The admission webhooks of the simulated API server, as kube-apiserver 1.34 calls them
//! (k8s.io/apiserver/pkg/admission/plugin/webhook): the MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations stored here are read on every create, update and delete
//! (and on the status, scale, approval, finalize, ephemeralcontainers and resize subresources), and
//! each webhook whose rules, `namespaceSelector` and `objectSelector` match the request is
//! sent an `admission.k8s.io/v1` AdmissionReview over HTTPS.
//!
//! Mutating webhooks run one after the other, their JSONPatch applied in order and the object
//! defaulted again; those with `reinvocationPolicy: IfNeeded` are called once more when a
//! later webhook changed the object. Validating webhooks run in parallel once the object has
//! passed the type's own validation; the first refusal (in the order of the configurations'
//! names) is answered. A refusal is answered with the webhook's Status as `ToStatusErr`
//! rewrites it, a webhook that cannot be called fails the request with a 500 unless its
//! `failurePolicy` is `Ignore`, a dry run is refused for webhooks with side effects, and the
//! webhooks' warnings reach the client as `Warning` headers.
//!
//! A `url` client config is dialled as written; a `service` one is resolved through the
//! Service's EndpointSlices or Endpoints, else through the Ready pods its selector picks (a
//! simulated Service has no cluster IP), and the server is verified as
//! `<name>.<namespace>.svc` against the `caBundle`. A webhook's `matchConditions` are CEL
//! ([`super::cel`]) evaluated once its rules and selectors match, with `object`, `oldObject`
//! (in the version it is sent) and `request`: one false skips the webhook, else an error
//! refuses the request with a 403 under `failurePolicy: Fail` and skips the webhook under
//! `Ignore`; conditions that do not compile are refused when the configuration is written.
//!
//! A webhook whose rules match another version of the resource than the request's
//! (`matchPolicy: Equivalent`) is sent the objects in that version: a custom resource whose
//! CRD converts through a webhook is converted by it ([`Attributes::convert`], as admission's
//! `ConvertToGVK`; a failure is a 500), and a mutating webhook's patched object is converted
//! back to the request's version.
//!
//! A create's mutating webhooks are sent the object as the decoding, the field manager and
//! the admission plugins ordered before them (for pods: ServiceAccount, Priority,
//! DefaultTolerationSeconds) leave it; its validating webhooks the object the strategy
//! prepared and validated. A delete (each item of a deletecollection too) sends the live
//! object as the old one. Subresources created on an object's behalf (`pods/binding`,
//! `pods/eviction`, `serviceaccounts/token`) are not sent to webhooks.
//!
//! Calls are made outside the store's lock: an update computes its write, calls the webhooks
//! with it, and stores it only if the object has not changed meanwhile (else answers the
//! conflict a stale resourceVersion gets).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use serde_json::{Map, Value, json};

use super::auth::UserInfo;
use super::objects::{self, from_view, selector_matches, to_view};
use super::registry::ResourceType;
use super::status::{ApiError, GroupResource};
use super::store::Store;

/// The default of `timeoutSeconds`.
const DEFAULT_TIMEOUT_SECONDS: u64 = 10;

/// The largest AdmissionReview answer read.
const MAX_ANSWER: usize = 3 * 1024 * 1024;

/// Why a webhook could not be called: Go's wording, as kube-apiserver's REST client reports
/// it after `Post "<url>": `.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The TCP connection failed.
    #[error("dial tcp {addr}: connect: {reason}")]
    Dial {
        /// The address dialled.
        addr: SocketAddr,
        /// The system's reason, e.g. `connection refused`.
        reason: String,
    },
    /// The host of a `url` could not be resolved.
    #[error("dial tcp: lookup {host}: no such host")]
    Lookup {
        /// The host name.
        host: String,
    },
    /// The webhook did not answer within its timeout.
    #[error("context deadline exceeded")]
    DeadlineExceeded,
    /// The TLS handshake failed.
    #[error("tls: {0}")]
    Tls(String),
    /// The `caBundle` holds no usable certificate.
    #[error("unable to load root certificates: {0}")]
    CaBundle(String),
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(String),
    /// A `service` reference names no Service.
    #[error("service \"{name}\" not found")]
    NoService {
        /// The Service's name.
        name: String,
    },
    /// A `service` reference names a port the Service does not have.
    #[error("no service port {port} found for service \"{name}\"")]
    NoServicePort {
        /// The Service's name.
        name: String,
        /// The port asked for.
        port: i64,
    },
    /// The Service has no ready address to send to.
    #[error("no endpoints available for service \"{name}\"")]
    NoEndpoints {
        /// The Service's name.
        name: String,
    },
    /// A `service` reference could not be resolved to an address.
    #[error("{0}")]
    Resolve(String),
    /// The answer is not an AdmissionReview.
    #[error("{0}")]
    Decode(String),
    /// The client config is malformed.
    #[error("{0}")]
    ClientConfig(String),
}

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// CREATE.
    Create,
    /// UPDATE.
    Update,
    /// DELETE.
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// What admission knows of a request (kube-apiserver's `admission.Attributes`); objects are
/// given in the version the client spoke.
pub struct Attributes<'a> {
    /// The resource.
    pub rt: &'a ResourceType,
    /// The version the client spoke.
    pub version: &'a str,
    /// The subresource, empty for the main resource.
    pub subresource: &'a str,
    /// The operation.
    pub operation: Operation,
    /// The name asked for (empty for a create with generateName).
    pub name: &'a str,
    /// The namespace of the request (a namespace's own name for namespaces).
    pub namespace: &'a str,
    /// Who asks.
    pub user: &'a UserInfo,
    /// Whether it is a dry run.
    pub dry_run: bool,
    /// CreateOptions, UpdateOptions or DeleteOptions.
    pub options: Value,
    /// How an object of a custom resource whose CRD has a conversion webhook is converted to
    /// another of its versions; `None` for every other resource, whose versions differ by
    /// their apiVersion alone.
    pub convert: Option<ConvertVersion<'a>>,
}

/// Converts an object to the version (`v2`) of its group, or says why it could not.
pub type ConvertVersion<'a> = Box<dyn Fn(Value, &str) -> Result<Value, String> + Send + Sync + 'a>;

impl Attributes<'_> {
    /// The kind the request is about: autoscaling/v1 Scale for `scale`.
    fn kind(&self, version: &str) -> (String, String, String) {
        if self.subresource == "scale" {
            return ("autoscaling".into(), "v1".into(), "Scale".into());
        }
        (
            self.rt.group.clone(),
            version.to_string(),
            self.rt.kind.clone(),
        )
    }
}

/// The options object of an operation from a request's query (and a delete's options).
pub fn options(
    operation: Operation,
    query: &super::request::Query,
    delete: Option<&Value>,
) -> Value {
    let kind = match operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if let Some(delete) = delete.and_then(Value::as_object) {
        for (k, v) in delete {
            if k != "kind" && k != "apiVersion" && !v.is_null() {
                options[k] = v.clone();
            }
        }
        return options;
    }
    if let Some(v) = query.get("dryRun") {
        options["dryRun"] = json!([v]);
    }
    for key in ["fieldManager", "fieldValidation"] {
        if let Some(v) = query.get(key).filter(|v| !v.is_empty()) {
            options[key] = json!(v);
        }
    }
    options
}

/// Admission configuration resources are never sent to webhooks
/// (`IsExemptAdmissionConfigurationResource`).
pub(crate) fn exempt(rt: &ResourceType) -> bool {
    rt.group == "admissionregistration.k8s.io"
        && matches!(
            rt.resource.as_str(),
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// The subresources whose writes go through admission here.
pub fn admits_subresource(subresource: &str) -> bool {
    matches!(
        subresource,
        "" | "status" | "scale" | "approval" | "finalize" | "ephemeralcontainers" | "resize"
    )
}

/// One webhook of a configuration.
#[derive(Debug, Clone)]
struct Hook {
    /// Its definition (an item of the configuration's `webhooks`).
    spec: Value,
    /// Its index among all webhooks of its kind, for reinvocation.
    index: usize,
}

impl Hook {
    fn name(&self) -> &str {
        self.spec["name"].as_str().unwrap_or_default()
    }

    fn ignores_failures(&self) -> bool {
        self.spec["failurePolicy"].as_str() == Some("Ignore")
    }

    fn timeout(&self) -> u64 {
        self.spec["timeoutSeconds"]
            .as_u64()
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
    }
}

/// The webhooks of the stored configurations of one kind, by configuration name then in order.
fn hooks(store: &Store, mutating: bool) -> Vec<Hook> {
    let resource = if mutating {
        "mutatingwebhookconfigurations"
    } else {
        "validatingwebhookconfigurations"
    };
    let (mut configs, _) = store.list(
        &GroupResource::new("admissionregistration.k8s.io", resource),
        None,
    );
    configs.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    configs
        .iter()
        .flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default())
        .enumerate()
        .map(|(index, spec)| Hook { spec, index })
        .collect()
}

/// Whether any webhook configuration, ValidatingAdmissionPolicyBinding, ResourceQuota or
/// LimitRange is stored: when none is, requests skip admission.
pub fn configured(store: &Store) -> bool {
    [
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
        ),
        ("", "resourcequotas"),
        ("", "limitranges"),
    ]
    .iter()
    .any(|(group, resource)| {
        !store
            .list(&GroupResource::new(group, resource), None)
            .0
            .is_empty()
    })
}

/// A webhook to call: which resource and kind it is sent (the request's, or an equivalent
/// version its rules name).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invocation {
    pub(crate) version: String,
}

fn exact_or_wildcard(items: &Value, requested: &str) -> bool {
    items
        .as_array()
        .is_some_and(|a| a.iter().any(|i| i == "*" || i == requested))
}

/// Whether one of a webhook's rules matches (predicates/rules: scope, operation, group,
/// version, resource and subresource).
pub(crate) fn rule_matches(rule: &Value, attrs: &Attributes<'_>, version: &str) -> bool {
    let is_namespace =
        attrs.rt.group.is_empty() && attrs.rt.resource == "namespaces" && version == "v1";
    let scope = match rule["scope"].as_str().unwrap_or("*") {
        "*" => true,
        "Namespaced" => !is_namespace && !attrs.namespace.is_empty(),
        "Cluster" => is_namespace || attrs.namespace.is_empty(),
        _ => false,
    };
    let operation = rule["operations"].as_array().is_some_and(|ops| {
        ops.iter()
            .any(|o| o == "*" || o == attrs.operation.as_str())
    });
    let resource = rule["resources"].as_array().is_some_and(|resources| {
        resources.iter().filter_map(Value::as_str).any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r, ""));
            (res == "*" || res == attrs.rt.resource) && (sub == "*" || sub == attrs.subresource)
        })
    });
    scope
        && operation
        && exact_or_wildcard(&rule["apiGroups"], &attrs.rt.group)
        && exact_or_wildcard(&rule["apiVersions"], version)
        && resource
}

fn labels_of(object: Option<&Value>) -> Option<Map<String, Value>> {
    object.map(|o| {
        o["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    })
}

fn selector_is_empty(selector: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .is_none_or(Map::is_empty)
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(Vec::is_empty)
}

/// predicates/namespace: whether the namespace of the request is selected; a missing
/// namespace is the 404 the real server answers.
pub(crate) fn namespace_matches(
    store: &Store,
    selector: &Value,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
) -> Result<bool, ApiError> {
    let is_namespaces = attrs.rt.group.is_empty() && attrs.rt.resource == "namespaces";
    if attrs.namespace.is_empty() && !is_namespaces {
        return Ok(true);
    }
    if selector_is_empty(selector) {
        return Ok(true);
    }
    let labels = if is_namespaces
        && attrs.subresource.is_empty()
        && matches!(attrs.operation, Operation::Create | Operation::Update)
    {
        labels_of(object).unwrap_or_default()
    } else {
        let namespaces = GroupResource::new("", "namespaces");
        let ns = store
            .get(&namespaces, "", attrs.namespace)
            .ok_or_else(|| ApiError::not_found(&namespaces, attrs.namespace))?;
        labels_of(Some(&ns)).unwrap_or_default()
    };
    Ok(selector_matches(selector, &labels))
}

/// predicates/object: the new or the old object's labels are selected.
pub(crate) fn object_matches(
    selector: &Value,
    object: Option<&Value>,
    old: Option<&Value>,
) -> bool {
    if selector_is_empty(selector) {
        return true;
    }
    [object, old]
        .into_iter()
        .filter_map(labels_of)
        .any(|labels| selector_matches(selector, &labels))
}

/// A webhook to call and the objects it is sent, in the version its rules matched.
struct Matched {
    invocation: Invocation,
    /// The object, `null` for a delete.
    object: Value,
    /// The old object, `null` for a create.
    old: Value,
}

/// generic.Webhook.ShouldCallHook: the invocation of `hook` for the request, if it applies,
/// with the objects converted to its version.
///
/// # Errors
/// A missing namespace, a failed match condition under `failurePolicy: Fail`, or the
/// internal error of a conversion that failed.
fn should_call(
    store: &Store,
    hook: &Hook,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Option<Matched>, ApiError> {
    let namespace = namespace_matches(store, &hook.spec["namespaceSelector"], attrs, object);
    if matches!(namespace, Ok(false)) {
        return Ok(None);
    }
    if !object_matches(&hook.spec["objectSelector"], object, old) {
        return Ok(None);
    }
    let rules = hook.spec["rules"].as_array().cloned().unwrap_or_default();
    let mut invocation = rules
        .iter()
        .any(|r| rule_matches(r, attrs, attrs.version))
        .then(|| Invocation {
            version: attrs.version.to_string(),
        });
    let equivalent = hook.spec["matchPolicy"].as_str().unwrap_or("Equivalent") == "Equivalent";
    if invocation.is_none() && equivalent && attrs.subresource != "scale" {
        // The other served versions of the same resource are its equivalents.
        invocation = rules.iter().find_map(|r| {
            attrs
                .rt
                .versions
                .iter()
                .filter(|v| v.as_str() != attrs.version)
                .find(|v| rule_matches(r, attrs, v))
                .map(|v| Invocation { version: v.clone() })
        });
    }
    let Some(invocation) = invocation else {
        return Ok(None);
    };
    namespace?;
    let matched = Matched {
        object: versioned_converting(attrs, &invocation, object)?,
        old: versioned_converting(attrs, &invocation, old)?,
        invocation,
    };
    let conditions = hook.spec["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !conditions.is_empty() && !conditions_match(store, hook, &conditions, attrs, &matched)? {
        return Ok(None);
    }
    Ok(Some(matched))
}

/// The CEL `request` of an invocation (cel.CreateAdmissionRequest).
pub(crate) fn cel_request(attrs: &Attributes<'_>, version: &str) -> Value {
    let (group, kind_version, kind) = attrs.kind(version);
    let (request_group, request_version, request_kind) = attrs.kind(attrs.version);
    let rt = attrs.rt;
    super::cel::admission_request(
        (&group, &kind_version, &kind),
        (&rt.group, version, &rt.resource),
        (&request_group, &request_version, &request_kind),
        (&rt.group, attrs.version, &rt.resource),
        attrs.subresource,
        attrs.name,
        attrs.namespace,
        attrs.operation.as_str(),
        attrs.user,
        attrs.dry_run,
        &attrs.options,
    )
}

/// The CEL `authorizer` of a request: RBAC for its user, `requestResource` its resource.
pub(crate) fn cel_authorizer(store: &Store, attrs: &Attributes<'_>) -> super::cel::Authorizer {
    super::cel::authorizer(
        store,
        attrs.user,
        super::auth::Attributes {
            resource_request: true,
            group: attrs.rt.group.clone(),
            resource: attrs.rt.resource.clone(),
            subresource: attrs.subresource.to_string(),
            namespace: attrs.namespace.to_string(),
            name: attrs.name.to_string(),
            ..super::auth::Attributes::default()
        },
    )
}

/// admission.NewForbidden: `<resource> "<name>" is forbidden: <message>`, the name the
/// request's, else the object's (or its generateName), else `Unknown`.
pub(crate) fn forbidden(attrs: &Attributes<'_>, object: Option<&Value>, message: &str) -> Value {
    let meta = object.map(|o| &o["metadata"]);
    let name = [
        Some(attrs.name),
        meta.and_then(|m| m["name"].as_str()),
        meta.and_then(|m| m["generateName"].as_str()),
    ]
    .into_iter()
    .flatten()
    .find(|n| !n.is_empty())
    .unwrap_or("Unknown");
    let gr = GroupResource::new(&attrs.rt.group, &attrs.rt.resource);
    let mut details = json!({"name": name, "kind": attrs.rt.resource});
    if !attrs.rt.group.is_empty() {
        details["group"] = json!(attrs.rt.group);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{gr} {name:?} is forbidden: {message}"),
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    })
}

/// validateMatchConditions: the causes of match conditions at `at` (at most 64, each with an
/// expression that compiles and a qualified name, names unique).
pub(crate) fn match_condition_causes(
    conditions: &Value,
    at: &str,
    declared: super::cel::Declarations,
) -> Vec<super::names::Cause> {
    use super::names::Cause;
    let conditions = conditions.as_array().cloned().unwrap_or_default();
    let mut causes = Vec::new();
    if conditions.len() > 64 {
        causes.push(Cause::too_many(at, conditions.len(), Some(64)));
    }
    let mut names = BTreeSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let expression = condition["expression"].as_str().unwrap_or_default().trim();
        if expression.is_empty() {
            causes.push(Cause::required(&format!("{at}[{i}].expression"), ""));
        } else if let Err(e) = super::cel::compile(expression, declared) {
            causes.push(Cause::invalid(
                &format!("{at}[{i}].expression"),
                json!(expression),
                e.to_string(),
            ));
        }
        let name = condition["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push(Cause::required(&format!("{at}[{i}].name"), ""));
        } else {
            for message in super::names::label_key(name) {
                causes.push(Cause::invalid(
                    &format!("{at}[{i}].name"),
                    json!(name),
                    message,
                ));
            }
            if !names.insert(name.to_string()) {
                causes.push(Cause::duplicate(&format!("{at}[{i}].name"), json!(name)));
            }
        }
    }
    causes
}

/// Evaluates match conditions (matchconditions.Matcher): any false skips, else any error is
/// `failurePolicy`'s (Fail: the errors; Ignore: skip), else all hold.
///
/// # Errors
/// The messages of the errors under `failurePolicy: Fail`, aggregated as Go aggregates them.
pub(crate) fn evaluate_conditions(
    conditions: &[Value],
    declared: super::cel::Declarations,
    activation: &super::cel::Activation,
    ignore_errors: bool,
) -> Result<bool, String> {
    let mut errors = Vec::new();
    for condition in conditions {
        let expression = condition["expression"].as_str().unwrap_or_default();
        let outcome = super::cel::compile(expression, declared)
            .and_then(|compiled| compiled.holds(activation));
        match outcome {
            Ok(false) => return Ok(false),
            Ok(true) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    match errors.len() {
        0 => Ok(true),
        _ if ignore_errors => Ok(false),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// Whether a webhook's match conditions let it be called.
fn conditions_match(
    store: &Store,
    hook: &Hook,
    conditions: &[Value],
    attrs: &Attributes<'_>,
    matched: &Matched,
) -> Result<bool, ApiError> {
    let activation = super::cel::Activation {
        object: matched.object.clone(),
        old_object: matched.old.clone(),
        request: cel_request(attrs, &matched.invocation.version),
        authorizer: conditions
            .iter()
            .any(|c| {
                c["expression"]
                    .as_str()
                    .is_some_and(|e| e.contains("authorizer"))
            })
            .then(|| cel_authorizer(store, attrs)),
        ..super::cel::Activation::default()
    };
    let declared = super::cel::Declarations {
        authorizer: true,
        ..super::cel::Declarations::default()
    };
    evaluate_conditions(conditions, declared, &activation, hook.ignores_failures()).map_err(
        |message| {
            tracing::warn!(
                "failed evaluating match conditions of {}, failing closed: {message}",
                hook.name()
            );
            let object = Some(&matched.object).filter(|o| !o.is_null());
            status_error(forbidden(attrs, object, &message))
        },
    )
}

pub(crate) fn status_error(mut status: Value) -> ApiError {
    status["kind"] = json!("Status");
    status["apiVersion"] = json!("v1");
    if !status["metadata"].is_object() {
        status["metadata"] = json!({});
    }
    ApiError::Status(Box::new(status))
}

/// `apierrors.NewInternalError` of a webhook that could not be called.
fn internal_error(message: &str) -> ApiError {
    status_error(json!({
        "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }))
}

/// errors.ToStatusErr: a webhook's refusal as the client gets it.
fn denial(name: &str, result: &Value) -> ApiError {
    let denied_by = format!("admission webhook {name:?} denied the request");
    let mut status = if result.is_object() {
        result.clone()
    } else {
        json!({"status": "Failure"})
    };
    if status["code"].as_i64().unwrap_or(0) < 400 {
        status["code"] = json!(400);
    }
    if matches!(status["status"].as_str(), None | Some("" | "Success")) {
        status["status"] = json!("Failure");
    }
    let message = status["message"].as_str().unwrap_or_default().to_string();
    let reason = status["reason"].as_str().unwrap_or_default().to_string();
    status["message"] = json!(if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    });
    if let Some(o) = status.as_object_mut() {
        // Status.reason is omitempty.
        if reason.is_empty() {
            o.remove("reason");
        }
    }
    status_error(status)
}

/// The object of `attrs` as the webhook is sent it (the invocation's version; a Scale as is).
pub(crate) fn versioned(attrs: &Attributes<'_>, inv: &Invocation, object: Option<&Value>) -> Value {
    match object {
        None => Value::Null,
        Some(o) if inv.version == attrs.version || attrs.subresource == "scale" => o.clone(),
        Some(o) => to_view(attrs.rt, &inv.version, from_view(attrs.rt, o.clone())),
    }
}

/// The object of `attrs` as the webhook is sent it: a custom resource whose CRD has a
/// conversion webhook converted by it to the invocation's version (admission's
/// `ConvertToGVK`), any other object as [`versioned`] gives it.
///
/// # Errors
/// The internal error of a conversion that failed.
fn versioned_converting(
    attrs: &Attributes<'_>,
    inv: &Invocation,
    object: Option<&Value>,
) -> Result<Value, ApiError> {
    converted_to(attrs, inv, object).map_err(|e| internal_error(&e))
}

/// The object of `attrs` in the invocation's version, converted as [`versioned_converting`]
/// converts it, or why the conversion failed.
pub(crate) fn converted_to(
    attrs: &Attributes<'_>,
    inv: &Invocation,
    object: Option<&Value>,
) -> Result<Value, String> {
    match (object, &attrs.convert) {
        (Some(o), Some(convert)) if inv.version != attrs.version => {
            let converted = convert(o.clone(), &inv.version)?;
            Ok(to_view(attrs.rt, &inv.version, converted))
        }
        _ => Ok(versioned(attrs, inv, object)),
    }
}

/// A mutated object of the invocation's version back in the version of the request:
/// converted by the CRD's conversion webhook when it has one.
///
/// # Errors
/// The internal error of a conversion that failed.
fn unversioned(
    attrs: &Attributes<'_>,
    inv: &Invocation,
    patched: Value,
) -> Result<Value, ApiError> {
    if inv.version == attrs.version || attrs.subresource == "scale" {
        return Ok(patched);
    }
    match &attrs.convert {
        Some(convert) => convert(patched, attrs.version)
            .map(|o| to_view(attrs.rt, attrs.version, o))
            .map_err(|e| internal_error(&e)),
        None => Ok(to_view(
            attrs.rt,
            attrs.version,
            from_view(attrs.rt, patched),
        )),
    }
}

/// request.CreateV1AdmissionReview of a matched webhook.
fn review(uid: &str, attrs: &Attributes<'_>, matched: &Matched) -> Value {
    let inv = &matched.invocation;
    let (group, version, kind) = attrs.kind(&inv.version);
    let (request_group, request_version, request_kind) = attrs.kind(attrs.version);
    let mut user = json!({"username": attrs.user.name});
    if !attrs.user.uid.is_empty() {
        user["uid"] = json!(attrs.user.uid);
    }
    if !attrs.user.groups.is_empty() {
        user["groups"] = json!(attrs.user.groups);
    }
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": attrs.rt.group, "version": inv.version, "resource": attrs.rt.resource},
        "requestKind": {"group": request_group, "version": request_version, "kind": request_kind},
        "requestResource": {"group": attrs.rt.group, "version": attrs.version, "resource": attrs.rt.resource},
        "operation": attrs.operation.as_str(),
        "userInfo": user,
        "object": matched.object,
        "oldObject": matched.old,
        "dryRun": attrs.dry_run,
        "options": attrs.options,
    });
    for (key, value) in [
        ("subResource", attrs.subresource),
        ("requestSubResource", attrs.subresource),
        ("name", attrs.name),
        ("namespace", attrs.namespace),
    ] {
        if !value.is_empty() {
            request[key] = json!(value);
        }
    }
    json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request})
}

/// Where a webhook is sent: the URL its errors name, the address dialled and the TLS name.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Destination {
    pub(crate) url: String,
    host: String,
    port: u16,
    path: String,
    /// A service reference's endpoint, or why it has none (reported as the dial's error).
    resolved: Option<Result<SocketAddr, String>>,
}

/// The path as the REST client joins it (`path.Join("/", path)`).
fn clean_path(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// The destination of a `clientConfig`.
pub(crate) fn destination(
    store: &Store,
    config: &Value,
    timeout: u64,
) -> Result<Destination, CallError> {
    if let Some(url) = config["url"].as_str() {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| CallError::ClientConfig(format!("unsupported url {url:?}")))?;
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let path = path.split('?').next().unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
                h.trim_start_matches('[').trim_end_matches(']').to_string(),
                p.parse()
                    .map_err(|_| CallError::ClientConfig(format!("invalid port in {url:?}")))?,
            ),
            _ => (authority.to_string(), 443),
        };
        let path = clean_path(path);
        return Ok(Destination {
            url: format!("https://{authority}{path}?timeout={timeout}s"),
            host,
            port,
            path,
            resolved: None,
        });
    }
    let service = &config["service"];
    let namespace = service["namespace"].as_str().unwrap_or_default();
    let name = service["name"].as_str().unwrap_or_default();
    let port = service["port"].as_i64().unwrap_or(443);
    let path = clean_path(service["path"].as_str().unwrap_or_default());
    let host = format!("{name}.{namespace}.svc");
    let url = format!("https://{host}:{port}{path}?timeout={timeout}s");
    let resolved = resolve_service(store, namespace, name, port).map_err(|e| e.to_string());
    Ok(Destination {
        url,
        host,
        port: u16::try_from(port).unwrap_or(443),
        path,
        resolved: Some(resolved),
    })
}

/// A ready address of a Service's port: its EndpointSlices', else its Endpoints', else its
/// selector's Ready pods at the target port.
fn resolve_service(
    store: &Store,
    namespace: &str,
    name: &str,
    port: i64,
) -> Result<SocketAddr, CallError> {
    let service = store
        .get(&GroupResource::new("", "services"), namespace, name)
        .ok_or_else(|| CallError::NoService {
            name: name.to_string(),
        })?;
    let service_port = service["spec"]["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["port"].as_i64() == Some(port)))
        .cloned()
        .ok_or_else(|| CallError::NoServicePort {
            name: name.to_string(),
            port,
        })?;
    let port_name = service_port["name"].as_str().unwrap_or_default();
    let at = |ip: &str, port: i64| -> Option<SocketAddr> {
        Some(SocketAddr::new(
            ip.parse::<IpAddr>().ok()?,
            u16::try_from(port).ok()?,
        ))
    };
    let (slices, _) = store.list(
        &GroupResource::new("discovery.k8s.io", "endpointslices"),
        Some(namespace),
    );
    for slice in slices
        .iter()
        .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == name)
    {
        let Some(slice_port) = slice["ports"].as_array().and_then(|ps| {
            ps.iter()
                .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
        }) else {
            continue;
        };
        let found = slice["endpoints"].as_array().and_then(|es| {
            es.iter()
                .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
                .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                .find_map(|a| at(a.as_str()?, slice_port["port"].as_i64()?))
        });
        if let Some(addr) = found {
            return Ok(addr);
        }
    }
    if let Some(endpoints) = store.get(&GroupResource::new("", "endpoints"), namespace, name) {
        for subset in endpoints["subsets"].as_array().cloned().unwrap_or_default() {
            let Some(subset_port) = subset["ports"].as_array().and_then(|ps| {
                ps.iter()
                    .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            }) else {
                continue;
            };
            if let Some(addr) = subset["addresses"].as_array().and_then(|a| {
                a.iter()
                    .find_map(|a| at(a["ip"].as_str()?, subset_port["port"].as_i64()?))
            }) {
                return Ok(addr);
            }
        }
    }
    let selector = &service["spec"]["selector"];
    if let Some(selector) = selector.as_object().filter(|s| !s.is_empty()) {
        let (pods, _) = store.list(&GroupResource::new("", "pods"), Some(namespace));
        for pod in pods {
            let labels = labels_of(Some(&pod)).unwrap_or_default();
            if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                continue;
            }
            let ready = pod["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            if !ready {
                continue;
            }
            let target = match &service_port["targetPort"] {
                Value::Number(n) => n.as_i64(),
                Value::String(named) => pod["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
                    .find(|p| p["name"] == named.as_str())
                    .and_then(|p| p["containerPort"].as_i64()),
                _ => Some(port),
            };
            if let Some(addr) = pod["status"]["podIP"]
                .as_str()
                .zip(target)
                .and_then(|(ip, p)| at(ip, p))
            {
                return Ok(addr);
            }
        }
    }
    Err(CallError::NoEndpoints {
        name: name.to_string(),
    })
}

/// The TLS client of a webhook: its `caBundle` as the only roots.
fn tls_client(ca_bundle: Option<&str>) -> Result<tokio_rustls::TlsConnector, CallError> {
    use base64::Engine as _;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(bundle) = ca_bundle.filter(|b| !b.is_empty()) {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .map_err(|e| CallError::CaBundle(e.to_string()))?;
        for block in x509_parser::pem::Pem::iter_from_buffer(&pem) {
            let block = block.map_err(|e| CallError::CaBundle(e.to_string()))?;
            if block.label == "CERTIFICATE" {
                roots
                    .add(rustls::pki_types::CertificateDer::from(block.contents))
                    .map_err(|e| CallError::CaBundle(e.to_string()))?;
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Go's text for a failed connect (`connection refused`).
fn dial_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::TimedOut => "connection timed out".into(),
        _ => {
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or_default();
            let mut chars = text.chars();
            chars
                .next()
                .map(|c| c.to_lowercase().chain(chars).collect())
                .unwrap_or_default()
        }
    }
}

/// Go's text for a certificate the caBundle does not verify.
fn tls_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    if text.contains("UnknownIssuer") {
        "failed to verify certificate: x509: certificate signed by unknown authority".into()
    } else if text.contains("NotValidForName") {
        "failed to verify certificate: x509: certificate is not valid for the requested name".into()
    } else {
        text
    }
}

/// Why a webhook gave no answer to read.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The call failed or timed out.
    Call(CallError),
    /// It answered a status outside 2xx: the message client-go's REST client makes of it
    /// (the `Status` message, else the code).
    Status(String),
}

/// Posts `body` to `dest` within `timeout` seconds and returns the body of its 2xx answer.
///
/// # Errors
/// As [`Unanswered`] says.
pub(crate) async fn post_for_answer(
    dest: &Destination,
    ca_bundle: Option<&str>,
    body: Vec<u8>,
    timeout: u64,
) -> Result<Bytes, Unanswered> {
    let posted = tokio::time::timeout(
        Duration::from_secs(timeout),
        post(dest, ca_bundle, body, timeout),
    )
    .await
    .unwrap_or(Err(CallError::DeadlineExceeded));
    let (code, bytes) = posted.map_err(Unanswered::Call)?;
    if (200..300).contains(&code) {
        return Ok(bytes);
    }
    let text = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(|s| s["kind"] == "Status")
        .and_then(|s| s["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            format!(
                "the server responded with the status code {code} but did not return more information"
            )
        });
    Err(Unanswered::Status(text))
}

/// Posts `body` to `dest` and returns the answer's status and body.
pub(crate) async fn post(
    dest: &Destination,
    ca_bundle: Option<&str>,
    body: Vec<u8>,
    timeout: u64,
) -> Result<(u16, Bytes), CallError> {
    let addr = match &dest.resolved {
        Some(Ok(addr)) => *addr,
        Some(Err(why)) => return Err(CallError::Resolve(why.clone())),
        None => match dest.host.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, dest.port),
            Err(_) => tokio::net::lookup_host((dest.host.as_str(), dest.port))
                .await
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| CallError::Lookup {
                    host: dest.host.clone(),
                })?,
        },
    };
    let connector = tls_client(ca_bundle)?;
    let server_name = rustls::pki_types::ServerName::try_from(dest.host.clone())
        .map_err(|e| CallError::ClientConfig(e.to_string()))?;
    let tcp = pod_network::connect(addr)
        .await
        .map_err(|e| CallError::Dial {
            addr,
            reason: dial_reason(&e),
        })?;
    let tls = connector
        .connect(server_name, tcp)
        .await
        .map_err(|e| CallError::Tls(tls_reason(&e)))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| CallError::Http(e.to_string()))?;
    let driver = tokio::spawn(connection);
    let authority = if dest.port == 443 {
        dest.host.clone()
    } else {
        format!("{}:{}", dest.host, dest.port)
    };
    let request = hyper::Request::post(format!("{}?timeout={timeout}s", dest.path))
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json, */*")
        .header(hyper::header::USER_AGENT, "kube-apiserver-admission")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| CallError::Http(e.to_string()))?;
    let answer = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| CallError::Http(e.to_string()))?;
        let code = response.status().as_u16();
        let bytes = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| CallError::Http(e.to_string()))?
            .to_bytes();
        Ok((code, bytes))
    }
    .await;
    driver.abort();
    answer
}

/// What a webhook answered: its verdict and its warnings.
#[derive(Debug)]
struct Answer {
    verdict: Verdict,
    warnings: Vec<String>,
}

/// A webhook's verdict.
#[derive(Debug)]
enum Verdict {
    /// Allowed, with a JSONPatch for mutating webhooks.
    Allowed { patch: Option<Value> },
    /// Refused: the Status to answer.
    Refused(ApiError),
}

/// A failed call: `ErrCallingWebhook`'s reason.
struct CallFailure(String);

/// Calls `hook` with the review and checks its answer (VerifyAdmissionResponse).
async fn call(
    destination: &Result<Destination, CallError>,
    hook: &Hook,
    review: Value,
    mutating: bool,
) -> Result<Answer, CallFailure> {
    let uid = review["request"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let timeout = hook.timeout();
    let dest = destination
        .as_ref()
        .map_err(|e| CallFailure(format!("failed to call webhook: {e}")))?;
    let body = serde_json::to_vec(&review).unwrap_or_default();
    let ca = hook.spec["clientConfig"]["caBundle"].as_str();
    let failed = |e: &dyn std::fmt::Display| {
        CallFailure(format!("failed to call webhook: Post {:?}: {e}", dest.url))
    };
    let bytes = match post_for_answer(dest, ca, body, timeout).await {
        Ok(bytes) => bytes,
        Err(Unanswered::Call(e)) => return Err(failed(&e)),
        Err(Unanswered::Status(text)) => {
            return Err(CallFailure(format!("failed to call webhook: {text}")));
        }
    };
    let answer: Value = serde_json::from_slice(&bytes).map_err(|e| failed(&e))?;
    let invalid = |why: String| CallFailure(format!("received invalid webhook response: {why}"));
    let response = &answer["response"];
    if !response.is_object() {
        return Err(invalid("webhook response was absent".into()));
    }
    let got_uid = response["uid"].as_str().unwrap_or_default();
    if got_uid != uid {
        return Err(invalid(format!(
            "expected response.uid={uid:?}, got {got_uid:?}"
        )));
    }
    if answer["apiVersion"] != "admission.k8s.io/v1" || answer["kind"] != "AdmissionReview" {
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            answer["apiVersion"].as_str().unwrap_or_default(),
            answer["kind"].as_str().unwrap_or_default()
        )));
    }
    let patch = response["patch"].as_str().filter(|p| !p.is_empty());
    let patch_type = response.get("patchType").filter(|t| !t.is_null());
    if mutating {
        if patch.is_some() && patch_type.is_none() {
            return Err(invalid(
                "webhook returned response.patch but not response.patchType".into(),
            ));
        }
        if patch.is_none() && patch_type.is_some() {
            return Err(invalid(
                "webhook returned response.patchType but not response.patch".into(),
            ));
        }
    } else {
        if patch.is_some() {
            return Err(invalid(
                "validating webhook may not return response.patch".into(),
            ));
        }
        if patch_type.is_some() {
            return Err(invalid(
                "validating webhook may not return response.patchType".into(),
            ));
        }
    }
    let warnings = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let answer = |verdict| Ok(Answer { verdict, warnings });
    if response["allowed"].as_bool() != Some(true) {
        // AdmissionResponse.Result is `status` in JSON.
        return answer(Verdict::Refused(denial(hook.name(), &response["status"])));
    }
    let Some(patch) = patch else {
        return answer(Verdict::Allowed { patch: None });
    };
    if patch_type.and_then(Value::as_str) != Some("JSONPatch") {
        return Err(CallFailure(format!(
            "unsupported patch type {:?}",
            patch_type.and_then(Value::as_str).unwrap_or_default()
        )));
    }
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .ok_or_else(|| {
            CallFailure("received undecodable patch in webhook response: invalid json patch".into())
        })?;
    answer(Verdict::Allowed {
        patch: Some(decoded),
    })
}

/// Runs `work` to completion from the synchronous request path: on a thread of its own with
/// its own runtime, the caller's worker handed over to the scheduler meanwhile.
pub(crate) fn run_blocking<T: Send>(
    work: impl std::future::Future<Output = T> + Send,
) -> Result<T, ApiError> {
    let run = || {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map(|runtime| runtime.block_on(work))
                })
                .join()
        })
    };
    let outcome = match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(run)
        }
        _ => run(),
    };
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(ApiError::Internal(format!(
            "cannot start a runtime to call admission webhooks: {e}"
        ))),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The error of a webhook that refused or could not be called, if it is to be answered.
fn outcome_error(
    hook: &Hook,
    outcome: Result<Answer, CallFailure>,
) -> Result<Option<Value>, ApiError> {
    match outcome {
        Ok(Answer { verdict, warnings }) => {
            for warning in &warnings {
                super::warnings::add_warning(warning);
            }
            match verdict {
                Verdict::Allowed { patch } => Ok(patch),
                Verdict::Refused(e) => Err(e),
            }
        }
        Err(CallFailure(reason)) => {
            let message = format!("failed calling webhook {:?}: {reason}", hook.name());
            if hook.ignores_failures() {
                tracing::warn!("failed calling webhook, failing open: {message}");
                Ok(None)
            } else {
                Err(internal_error(&message))
            }
        }
    }
}

/// The dry-run refusal of a webhook with side effects.
fn refuses_dry_run(hook: &Hook, attrs: &Attributes<'_>) -> Option<ApiError> {
    if !attrs.dry_run {
        return None;
    }
    match hook.spec["sideEffects"].as_str() {
        Some("None" | "NoneOnDryRun") => None,
        _ => Some(ApiError::BadRequest(format!(
            "admission webhook {:?} does not support dry run",
            hook.name()
        ))),
    }
}

/// Calls the validating webhooks that apply to the request, in parallel (see
/// [`super::admission::validate`] for the whole validating admission).
///
/// # Errors
/// The first refusal (or call failure under `failurePolicy: Fail`), in the webhooks' order.
pub fn call_validating(
    store: &Store,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if exempt(attrs.rt) {
        return Ok(());
    }
    let mut calls = Vec::new();
    for hook in hooks(store, false) {
        let Some(matched) = should_call(store, &hook, attrs, object, old)? else {
            continue;
        };
        if let Some(e) = refuses_dry_run(&hook, attrs) {
            return Err(e);
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let review = review(&uid, attrs, &matched);
        let dest = destination(store, &hook.spec["clientConfig"], hook.timeout());
        calls.push((hook, review, dest));
    }
    if calls.is_empty() {
        return Ok(());
    }
    let outcomes = run_blocking(futures::future::join_all(
        calls
            .iter()
            .map(|(hook, review, dest)| call(dest, hook, review.clone(), false)),
    ))?;
    for ((hook, _, _), outcome) in calls.iter().zip(outcomes) {
        outcome_error(hook, outcome)?;
    }
    Ok(())
}

/// Calls the mutating webhooks that apply to the request in order, applying their patches to
/// `object` (defaulted again by `redefault` after each), and once more those with
/// `reinvocationPolicy: IfNeeded` when a later one changed it.
///
/// # Errors
/// A refusal, a call failure under `failurePolicy: Fail`, or a patch that does not apply.
pub fn mutate(
    store: &Store,
    attrs: &Attributes<'_>,
    object: &mut Option<Value>,
    old: Option<&Value>,
    redefault: &dyn Fn(&mut Value),
) -> Result<bool, ApiError> {
    if exempt(attrs.rt) {
        return Ok(false);
    }
    let hooks = hooks(store, true);
    let mut changed_any = false;
    let mut reinvocable = BTreeSet::new();
    let mut reinvoke = BTreeSet::new();
    for round in 0..2 {
        if round == 1 && (!changed_any || reinvoke.is_empty()) {
            break;
        }
        for hook in &hooks {
            if round == 1 && !reinvoke.contains(&hook.index) {
                continue;
            }
            let Some(matched) = should_call(store, hook, attrs, object.as_ref(), old)? else {
                continue;
            };
            if let Some(e) = refuses_dry_run(hook, attrs) {
                return Err(e);
            }
            let uid = uuid::Uuid::new_v4().to_string();
            let review = review(&uid, attrs, &matched);
            let dest = destination(store, &hook.spec["clientConfig"], hook.timeout());
            let outcome = run_blocking(call(&dest, hook, review, true))?;
            let patch = outcome_error(hook, outcome)?;
            let mut changed = false;
            if let Some(patch) = patch.filter(|p| p.as_array().is_some_and(|a| !a.is_empty())) {
                let Some(current) = object.as_mut() else {
                    return Err(internal_error(&format!(
                        "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                        hook.name()
                    )));
                };
                let Matched {
                    invocation,
                    object: mut patched,
                    ..
                } = matched;
                let operations: json_patch::Patch =
                    serde_json::from_value(patch).map_err(|e| internal_error(&e.to_string()))?;
                json_patch::patch(&mut patched, &operations)
                    .map_err(|e| internal_error(&e.to_string()))?;
                let mut patched = unversioned(attrs, &invocation, patched)?;
                redefault(&mut patched);
                changed = patched != *current;
                *current = patched;
            }
            if changed {
                changed_any = true;
                reinvoke.extend(reinvocable.iter().copied());
                if round == 1 {
                    reinvoke.remove(&hook.index);
                }
            }
            if round == 0 && hook.spec["reinvocationPolicy"].as_str() == Some("IfNeeded") {
                reinvocable.insert(hook.index);
            }
        }
    }
    Ok(changed_any)
}

/// A create's mutating admission: `object` (as the client sent it, its name generated if
/// it asked for one) is sent defaulted and with the field manager's entry, as the real
/// server has it then; the mutated object is returned with that entry (admission's changes
/// are owned by nobody) when a webhook changed it.
///
/// # Errors
/// As [`mutate`].
pub fn mutate_create(
    store: &Store,
    attrs: &Attributes<'_>,
    object: Value,
    manager: &str,
    accounts: &objects::ServiceAccounts,
) -> Result<(Value, Option<Value>), ApiError> {
    if exempt(attrs.rt) || hooks(store, true).is_empty() {
        return Ok((object, None));
    }
    let generated_name = object["metadata"]["name"].clone();
    let mut sent = object.clone();
    if attrs.name.is_empty()
        && let Some(m) = sent["metadata"].as_object_mut()
    {
        m.remove("name");
    }
    let redefault = redefaulter(attrs.rt, attrs.version);
    if attrs.rt.namespaced {
        // The create handler sets the request's namespace before admission.
        sent["metadata"]["namespace"] = json!(attrs.namespace);
    }
    redefault(&mut sent);
    super::apply::record_update(
        &json!({}),
        &mut sent,
        manager,
        &attrs.rt.kind,
        &objects::now(),
        None,
    );
    if attrs.rt.group.is_empty() && attrs.rt.resource == "pods" {
        // The pod admission plugins ordered before the webhooks (ServiceAccount, Priority,
        // DefaultTolerationSeconds) have run; the strategy, which sets the status, has not.
        let status = sent.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut stored = from_view(attrs.rt, sent);
        objects::prepare_for_create(
            attrs.rt,
            &mut stored,
            accounts,
            &super::names::random_suffix(),
        );
        stored["status"] = status;
        sent = to_view(attrs.rt, attrs.version, stored);
    }
    let managed = sent["metadata"]["managedFields"].clone();
    let mut mutated = Some(sent);
    if !mutate(store, attrs, &mut mutated, None, &redefault)? {
        return Ok((object, None));
    }
    let mut mutated = mutated.unwrap_or(object);
    if mutated["metadata"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        mutated["metadata"]["name"] = generated_name;
    }
    Ok((mutated, Some(managed)))
}

/// Defaults an object in the version the client spoke, as decoding does.
pub fn redefaulter<'a>(rt: &'a ResourceType, version: &'a str) -> impl Fn(&mut Value) + 'a {
    move |view: &mut Value| {
        if rt.is_custom() {
            if let super::registry::Backing::Custom { schemas, .. } = &rt.backing
                && let Some(schema) = schemas.get(version)
            {
                schema.apply_defaults(view);
            }
        } else if view["kind"] == rt.kind.as_str() {
            let mut stored = from_view(rt, view.clone());
            objects::apply_defaults(rt, &mut stored);
            *view = to_view(rt, version, stored);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::store::Write;

    fn rt(group: &str, resource: &str) -> ResourceType {
        Registry::new()
            .get(&GroupResource::new(group, resource))
            .cloned()
            .expect("a built-in resource")
    }

    fn attrs<'a>(
        rt: &'a ResourceType,
        user: &'a UserInfo,
        subresource: &'a str,
        operation: Operation,
    ) -> Attributes<'a> {
        Attributes {
            rt,
            version: rt.versions.first().map(String::as_str).unwrap_or("v1"),
            subresource,
            operation,
            name: "cm",
            namespace: "team",
            user,
            dry_run: false,
            options: json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
            convert: None,
        }
    }

    fn rule(resources: &[&str], operations: &[&str], scope: &str) -> Value {
        json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
               "resources": resources, "scope": scope})
    }

    #[test]
    fn a_rule_matches_its_resource_and_operation_and_nothing_else() {
        let cms = rt("", "configmaps");
        let user = UserInfo::admin();
        let create = attrs(&cms, &user, "", Operation::Create);
        assert!(rule_matches(
            &rule(&["configmaps"], &["CREATE"], "*"),
            &create,
            "v1"
        ));
        assert!(!rule_matches(
            &rule(&["configmaps"], &["UPDATE"], "*"),
            &create,
            "v1"
        ));
        assert!(!rule_matches(
            &rule(&["secrets"], &["*"], "*"),
            &create,
            "v1"
        ));
        assert!(rule_matches(
            &rule(&["*"], &["*"], "Namespaced"),
            &create,
            "v1"
        ));
        assert!(!rule_matches(
            &rule(&["*"], &["*"], "Cluster"),
            &create,
            "v1"
        ));
    }

    #[test]
    fn a_subresource_is_matched_only_by_a_rule_naming_it_or_a_wildcard() {
        let pods = rt("", "pods");
        let user = UserInfo::admin();
        let status = attrs(&pods, &user, "status", Operation::Update);
        assert!(!rule_matches(&rule(&["pods"], &["*"], "*"), &status, "v1"));
        assert!(rule_matches(
            &rule(&["pods/status"], &["*"], "*"),
            &status,
            "v1"
        ));
        assert!(rule_matches(&rule(&["pods/*"], &["*"], "*"), &status, "v1"));
        assert!(rule_matches(&rule(&["*/*"], &["*"], "*"), &status, "v1"));
        assert!(!rule_matches(&rule(&["*"], &["*"], "*"), &status, "v1"));
        let main = attrs(&pods, &user, "", Operation::Update);
        assert!(!rule_matches(
            &rule(&["pods/status"], &["*"], "*"),
            &main,
            "v1"
        ));
        assert!(rule_matches(&rule(&["*"], &["*"], "*"), &main, "v1"));
    }

    #[test]
    fn a_namespace_object_is_cluster_scoped_for_rules() {
        let namespaces = rt("", "namespaces");
        let user = UserInfo::admin();
        let mut a = attrs(&namespaces, &user, "", Operation::Update);
        a.namespace = "team";
        assert!(rule_matches(
            &rule(&["namespaces"], &["*"], "Cluster"),
            &a,
            "v1"
        ));
        assert!(!rule_matches(
            &rule(&["namespaces"], &["*"], "Namespaced"),
            &a,
            "v1"
        ));
    }

    #[test]
    fn an_object_selector_matches_the_new_or_the_old_object() {
        let selector = json!({"matchLabels": {"app": "web"}});
        let web = json!({"metadata": {"labels": {"app": "web"}}});
        let other = json!({"metadata": {"labels": {"app": "db"}}});
        assert!(object_matches(&selector, Some(&web), None));
        assert!(object_matches(&selector, Some(&other), Some(&web)));
        assert!(!object_matches(&selector, Some(&other), None));
        assert!(!object_matches(&selector, None, None));
        assert!(object_matches(&json!({}), None, None));
    }

    #[test]
    fn a_namespace_selector_reads_the_namespace_and_a_created_namespace_itself() {
        let store = Store::new(100);
        let namespaces = GroupResource::new("", "namespaces");
        store
            .write::<ApiError>(&namespaces, "", "team", |_| {
                Ok(Write::Put(
                    json!({"metadata": {"name": "team", "labels": {"env": "prod"}}}),
                ))
            })
            .unwrap();
        let cms = rt("", "configmaps");
        let user = UserInfo::admin();
        let a = attrs(&cms, &user, "", Operation::Create);
        let prod = json!({"matchLabels": {"env": "prod"}});
        let dev = json!({"matchLabels": {"env": "dev"}});
        assert!(namespace_matches(&store, &prod, &a, None).unwrap());
        assert!(!namespace_matches(&store, &dev, &a, None).unwrap());
        let mut missing = attrs(&cms, &user, "", Operation::Create);
        missing.namespace = "gone";
        assert_eq!(
            namespace_matches(&store, &dev, &missing, None)
                .unwrap_err()
                .code(),
            404
        );
        let ns_rt = rt("", "namespaces");
        let mut create_ns = attrs(&ns_rt, &user, "", Operation::Create);
        create_ns.namespace = "";
        let created = json!({"metadata": {"name": "new", "labels": {"env": "dev"}}});
        assert!(namespace_matches(&store, &dev, &create_ns, Some(&created)).unwrap());
    }

    #[test]
    fn the_review_names_the_request_as_kube_apiserver_sends_it() {
        let pods = rt("", "pods");
        let user = UserInfo {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
            uid: String::new(),
        };
        let a = attrs(&pods, &user, "status", Operation::Update);
        let object = json!({"kind": "Pod", "metadata": {"name": "cm"}});
        let matched = Matched {
            invocation: Invocation {
                version: "v1".into(),
            },
            object: object.clone(),
            old: object,
        };
        let r = review("u-1", &a, &matched);
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        let request = &r["request"];
        assert_eq!(request["uid"], "u-1");
        assert_eq!(
            request["kind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert_eq!(
            request["resource"],
            json!({"group": "", "version": "v1", "resource": "pods"})
        );
        assert_eq!(request["subResource"], "status");
        assert_eq!(request["requestSubResource"], "status");
        assert_eq!(request["operation"], "UPDATE");
        assert_eq!(request["namespace"], "team");
        assert_eq!(
            request["userInfo"],
            json!({"username": "alice", "groups": ["system:authenticated"]})
        );
        assert_eq!(request["dryRun"], false);
        assert_eq!(request["options"]["kind"], "CreateOptions");
    }

    #[test]
    fn a_denial_names_the_webhook_and_keeps_the_webhook_s_status() {
        let e = denial(
            "deny.example.com",
            &json!({"message": "no", "code": 418, "reason": "Teapot"}),
        );
        let status = e.to_status();
        assert_eq!(
            status["message"],
            "admission webhook \"deny.example.com\" denied the request: no"
        );
        assert_eq!(status["code"], 418);
        assert_eq!(status["reason"], "Teapot");
        let bare = denial("d", &Value::Null).to_status();
        assert_eq!(bare["code"], 400);
        assert_eq!(
            bare["message"],
            "admission webhook \"d\" denied the request without explanation"
        );
    }

    #[test]
    fn a_url_destination_carries_the_timeout_in_its_query() {
        let store = Store::new(100);
        let d = destination(&store, &json!({"url": "https://127.0.0.1:8443/check"}), 10).unwrap();
        assert_eq!(d.url, "https://127.0.0.1:8443/check?timeout=10s");
        assert_eq!(d.port, 8443);
        let root = destination(&store, &json!({"url": "https://127.0.0.1:1"}), 1).unwrap();
        assert_eq!(root.url, "https://127.0.0.1:1/?timeout=1s");
    }

    #[test]
    fn a_service_reference_resolves_through_its_endpoint_slices() {
        let store = Store::new(100);
        store
            .write::<ApiError>(&GroupResource::new("", "services"), "hooks", "svc", |_| {
                Ok(Write::Put(
                    json!({"metadata": {"name": "svc", "namespace": "hooks"},
                    "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 9443}]}}),
                ))
            })
            .unwrap();
        store
            .write::<ApiError>(
                &GroupResource::new("discovery.k8s.io", "endpointslices"),
                "hooks",
                "svc-abc",
                |_| {
                    Ok(Write::Put(
                        json!({"metadata": {"name": "svc-abc", "namespace": "hooks",
                        "labels": {"kubernetes.io/service-name": "svc"}},
                        "ports": [{"name": "https", "port": 9443}],
                        "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": true}}]}),
                    ))
                },
            )
            .unwrap();
        let d = destination(
            &store,
            &json!({"service": {"namespace": "hooks", "name": "svc", "path": "/validate"}}),
            10,
        )
        .unwrap();
        assert_eq!(d.url, "https://svc.hooks.svc:443/validate?timeout=10s");
        assert_eq!(d.host, "svc.hooks.svc");
        assert_eq!(d.resolved, Some(Ok("10.0.0.7:9443".parse().unwrap())));
    }

    #[test]
    fn a_service_without_endpoints_resolves_through_its_ready_pods_and_named_target_port() {
        let store = Store::new(100);
        let put = |resource: &str, name: &str, object: Value| {
            store
                .write::<ApiError>(&GroupResource::new("", resource), "hooks", name, |_| {
                    Ok(Write::Put(object))
                })
                .unwrap();
        };
        put(
            "services",
            "svc",
            json!({"metadata": {"name": "svc", "namespace": "hooks"}, "spec": {
                "selector": {"app": "hook"},
                "ports": [{"port": 8443, "targetPort": "https"}]}}),
        );
        let pod = |name: &str, ready: &str, ip: &str| {
            json!({"metadata": {"name": name, "namespace": "hooks", "labels": {"app": "hook"}},
                "spec": {"containers": [{"name": "c", "ports": [{"name": "https", "containerPort": 9443}]}]},
                "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": ready}]}})
        };
        put("pods", "a-starting", pod("a-starting", "False", "10.1.2.2"));
        put("pods", "b-ready", pod("b-ready", "True", "10.1.2.3"));
        let d = destination(
            &store,
            &json!({"service": {"namespace": "hooks", "name": "svc", "port": 8443}}),
            10,
        )
        .unwrap();
        assert_eq!(d.url, "https://svc.hooks.svc:8443/?timeout=10s");
        assert_eq!(d.resolved, Some(Ok("10.1.2.3:9443".parse().unwrap())));
        let missing = destination(
            &store,
            &json!({"service": {"namespace": "hooks", "name": "gone"}}),
            10,
        );
        assert_eq!(
            missing.unwrap().resolved,
            Some(Err("service \"gone\" not found".to_string()))
        );
        let wrong_port = destination(
            &store,
            &json!({"service": {"namespace": "hooks", "name": "svc", "port": 443}}),
            10,
        );
        assert_eq!(
            wrong_port.unwrap().resolved,
            Some(Err(
                "no service port 443 found for service \"svc\"".to_string()
            ))
        );
    }

    type Calls = Arc<std::sync::Mutex<Vec<(String, Value)>>>;

    /// Webhooks allowing `/allow` and answering other paths with a patch adding the label of
    /// that name ([`test_webhooks::serve`]); returns their port, their CA bundle, the calls
    /// they received and the runtime serving them.
    fn label_adding_webhooks() -> (u16, String, Calls, tokio::runtime::Runtime) {
        use base64::Engine as _;
        let calls: Calls = Arc::default();
        let received = calls.clone();
        let server = test_webhooks::serve(move |path, review| {
            received
                .lock()
                .unwrap()
                .push((path.to_string(), review.clone()));
            let label = path.trim_start_matches('/');
            let patch = json!([{"op": "add",
                "path": format!("/metadata/labels/{label}"), "value": "yes"}]);
            let mut response = json!({"uid": review["request"]["uid"], "allowed": true});
            if label != "allow" {
                response["patchType"] = json!("JSONPatch");
                response["patch"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
            }
            response
        });
        (server.port, server.ca, calls, server.runtime)
    }

    #[test]
    fn a_webhook_that_may_be_reinvoked_is_called_again_once_a_later_one_changed_the_object() {
        let (port, ca, calls, runtime) = label_adding_webhooks();
        let store = Store::new(100);
        let hook = |name: &str, path: &str, policy: &str| {
            json!({"name": name, "reinvocationPolicy": policy,
                "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["configmaps"]}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"]})
        };
        store
            .write::<ApiError>(
                &GroupResource::new(
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations",
                ),
                "",
                "labels",
                |_| {
                    Ok(Write::Put(
                        json!({"metadata": {"name": "labels"}, "webhooks": [
                            hook("first.test", "/first", "IfNeeded"),
                            hook("second.test", "/second", "Never"),
                        ]}),
                    ))
                },
            )
            .unwrap();
        let cms = rt("", "configmaps");
        let user = UserInfo::admin();
        let attrs = attrs(&cms, &user, "", Operation::Create);
        let mut object = Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "labels": {}}}));
        let changed = mutate(&store, &attrs, &mut object, None, &|_| {}).unwrap();
        assert!(changed);
        assert_eq!(
            object.unwrap()["metadata"]["labels"],
            json!({"first": "yes", "second": "yes"})
        );
        let calls = calls.lock().unwrap().clone();
        let paths: Vec<&str> = calls.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/first", "/second", "/first"]);
        assert_eq!(
            calls[2].1["request"]["object"]["metadata"]["labels"],
            json!({"first": "yes", "second": "yes"})
        );
        runtime.shutdown_background();
    }

    #[test]
    fn a_service_reference_is_dialled_at_its_endpoint_and_verified_as_the_service_s_name() {
        let (port, ca, calls, runtime) = label_adding_webhooks();
        let store = Store::new(100);
        let put = |gr: GroupResource, namespace: &str, name: &str, object: Value| {
            store
                .write::<ApiError>(&gr, namespace, name, |_| Ok(Write::Put(object)))
                .unwrap();
        };
        put(
            GroupResource::new("", "services"),
            "hooks",
            "svc",
            json!({"metadata": {"name": "svc", "namespace": "hooks"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
        );
        put(
            GroupResource::new("discovery.k8s.io", "endpointslices"),
            "hooks",
            "svc-1",
            json!({"metadata": {"name": "svc-1", "namespace": "hooks",
                    "labels": {"kubernetes.io/service-name": "svc"}},
                "ports": [{"name": "https", "port": port}],
                "endpoints": [{"addresses": ["127.0.0.1"]}]}),
        );
        put(
            GroupResource::new(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
            ),
            "",
            "by-service",
            json!({"metadata": {"name": "by-service"}, "webhooks": [{
                "name": "service.test",
                "clientConfig": {"caBundle": ca,
                    "service": {"namespace": "hooks", "name": "svc", "path": "/allow"}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["configmaps"]}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}),
        );
        let cms = rt("", "configmaps");
        let user = UserInfo::admin();
        let attrs = attrs(&cms, &user, "", Operation::Create);
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        call_validating(&store, &attrs, Some(&object), None).unwrap();
        let calls = calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "/allow");
        assert_eq!(calls[0].1["request"]["object"], object);
        runtime.shutdown_background();
    }
}

/// An HTTPS webhook server for tests.
#[cfg(test)]
pub(crate) mod test_webhooks {
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};
    use serde_json::{Value, json};
    use std::sync::Arc;

    /// A webhook server on 127.0.0.1, serving until its runtime is dropped.
    pub(crate) struct Server {
        /// The port it listens on.
        pub port: u16,
        /// The CA bundle (base64 PEM) its certificate is signed by, for `clientConfig`.
        pub ca: String,
        /// The runtime serving it.
        pub runtime: tokio::runtime::Runtime,
    }

    /// Serves AdmissionReviews over HTTPS on 127.0.0.1 (the certificate also names
    /// `svc.hooks.svc`), answering each with the `response` that `answer` makes of the
    /// request's path and review.
    pub(crate) fn serve(answer: impl Fn(&str, &Value) -> Value + Send + Sync + 'static) -> Server {
        use base64::Engine as _;
        let answer = Arc::new(answer);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params
            .subject_alt_names
            .push(rcgen::SanType::DnsName("svc.hooks.svc".try_into().unwrap()));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let ca = base64::engine::general_purpose::STANDARD.encode(cert.pem());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, answer) = (acceptor.clone(), answer.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let answer = answer.clone();
                            async move {
                                let path = request.uri().path().to_string();
                                let body = request.into_body().collect().await?.to_bytes();
                                let review: Value = serde_json::from_slice(&body).unwrap();
                                let response =
                                    tokio::task::spawn_blocking(move || answer(&path, &review))
                                        .await
                                        .unwrap();
                                let review = json!({"apiVersion": "admission.k8s.io/v1",
                                    "kind": "AdmissionReview", "response": response});
                                Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(
                                    review.to_string(),
                                ))))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Server { port, ca, runtime }
    }
}
