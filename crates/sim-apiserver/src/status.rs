//! Kubernetes `Status` errors with the exact reasons, codes and messages of kube-apiserver.
//!
//! Every failed request is answered with one of these, serialized by [`ApiError::to_status`];
//! clients (kube-rs, client-go) branch on `reason` and `code`, and people read `message`.

use serde_json::{Value, json};

use super::names::Cause;

/// A resource named the way the real server names it in messages (`leases.coordination.k8s.io`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// API group; empty for the core group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// A group/resource pair.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// An error answered to a client as a `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// 404: the object does not exist.
    #[error("{gr} \"{name}\" not found")]
    NotFound {
        /// Its resource.
        gr: GroupResource,
        /// Its name.
        name: String,
    },
    /// 404 for a path that names no resource the server serves.
    #[error("the server could not find the requested resource")]
    NoSuchResource,
    /// 409: create of an object whose name is taken.
    #[error("{gr} \"{name}\" already exists")]
    AlreadyExists {
        /// Its resource.
        gr: GroupResource,
        /// Its name.
        name: String,
    },
    /// 409: optimistic concurrency failed or a precondition did not hold.
    #[error("Operation cannot be fulfilled on {gr} \"{name}\": {detail}")]
    Conflict {
        /// Its resource.
        gr: GroupResource,
        /// Its name.
        name: String,
        /// Why, e.g. "the object has been modified; please apply your changes to the latest version and try again".
        detail: String,
    },
    /// 409: server-side apply found fields owned by other managers.
    #[error("{message}")]
    ApplyConflict {
        /// The whole message, `Apply failed with 1 conflict: …`.
        message: String,
        /// One `(message, field)` per conflicting field.
        causes: Vec<(String, String)>,
    },
    /// 422: validation failed (`NewInvalid`).
    #[error(
        "{kind}{} \"{name}\" is invalid{}",
        dotted(group),
        colon_causes(causes)
    )]
    Invalid {
        /// Kind (or, for a few messages, the resource) named in the message.
        kind: String,
        /// API group.
        group: String,
        /// Object name.
        name: String,
        /// What is wrong, field by field.
        causes: Vec<Cause>,
    },
    /// 403: RBAC denied the request, or the namespace is terminating.
    #[error("{message}")]
    Forbidden {
        /// The whole message.
        message: String,
        /// Its resource, for details.
        gr: GroupResource,
        /// Object name, for details.
        name: String,
    },
    /// 403: a create in a namespace that is being deleted (the NamespaceLifecycle
    /// admission plugin), with the cause `NamespaceTerminating` on `metadata.namespace`.
    #[error(
        "{gr} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated"
    )]
    NamespaceTerminating {
        /// The resource created.
        gr: GroupResource,
        /// The object's name.
        name: String,
        /// The terminating namespace.
        namespace: String,
    },
    /// 401: no valid credentials.
    #[error("Unauthorized")]
    Unauthorized,
    /// 400: malformed request.
    #[error("{0}")]
    BadRequest(String),
    /// 405: the verb is not supported on this resource.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotSupported,
    /// 405: a verb the resource's storage does not implement (`NewMethodNotSupported`), e.g.
    /// a watch of componentstatuses.
    #[error("{verb} is not supported on resources of kind \"{gr}\"")]
    VerbNotSupported {
        /// The resource.
        gr: GroupResource,
        /// The verb refused.
        verb: String,
    },
    /// 406: the client accepts no representation the server can produce.
    #[error("only the following media types are accepted: application/json, application/yaml")]
    NotAcceptable,
    /// 413: body over the limit.
    #[error("Request entity too large: limit is {limit}")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// 415: unknown body or patch content type.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: {accepted}"
    )]
    UnsupportedMediaType {
        /// The accepted media types, comma separated.
        accepted: String,
    },
    /// 410: the resource version is too old (compacted away).
    #[error("{0}")]
    Expired(String),
    /// 500: an internal error.
    #[error("{0}")]
    Internal(String),
    /// `NewGenericServerResponse` without a resource or name: the wording of the code alone
    /// and empty details, e.g. 422 `the server rejected our request due to an error in our
    /// request` for a JSON patch that does not apply.
    #[error("{}", generic_message(*code))]
    Generic {
        /// HTTP status code.
        code: u16,
    },
    /// 500 with no reason: an error that is not a `Status`, as `ErrorToAPIStatus` answers it
    /// (e.g. a strategic merge patch the server cannot apply).
    #[error("{0}")]
    Unclassified(String),
    /// A whole `Status` as an admission webhook's refusal or failure is answered.
    #[error("{}", .0["message"].as_str().unwrap_or_default())]
    Status(Box<Value>),
    /// Any code and reason, for injected faults.
    #[error("{message}")]
    Custom {
        /// HTTP status code.
        code: u16,
        /// The `reason` field.
        reason: String,
        /// The message.
        message: String,
    },
}

fn dotted(group: &str) -> String {
    if group.is_empty() {
        String::new()
    } else {
        format!(".{group}")
    }
}

/// Joins causes as `field.ErrorList.ToAggregate()` does: duplicates dropped, one plain,
/// several in brackets.
pub fn join_causes(causes: &[Cause]) -> String {
    super::names::aggregate(causes)
}

/// `: ` and the causes, or nothing when there are none (`NewInvalid` then ends at "is invalid").
fn colon_causes(causes: &[Cause]) -> String {
    if causes.is_empty() {
        String::new()
    } else {
        format!(": {}", join_causes(causes))
    }
}

/// `NewGenericServerResponse`'s message for a code.
fn generic_message(code: u16) -> String {
    match code {
        409 => "the server reported a conflict".into(),
        404 => "the server could not find the requested resource".into(),
        400 => "the server rejected our request for an unknown reason".into(),
        401 => "the server has asked for the client to provide credentials".into(),
        406 => "the server was unable to respond with a content type that the client supports"
            .into(),
        405 => "the server does not allow this method on the requested resource".into(),
        422 => "the server rejected our request due to an error in our request".into(),
        503 => "the server is currently unable to handle the request".into(),
        504 => "the server was unable to return a response in the time allotted, but may still be processing the request".into(),
        429 => "the server has received too many requests and has asked us to try again later"
            .into(),
        // These two keep the server's message, which this variant does not have.
        403 | 415 => String::new(),
        500.. => "an error on the server (\"\") has prevented the request from succeeding".into(),
        _ => format!(
            "the server responded with the status code {code} but did not return more information"
        ),
    }
}

impl ApiError {
    /// Not found.
    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::NotFound {
            gr: gr.clone(),
            name: name.to_string(),
        }
    }

    /// Already exists.
    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::AlreadyExists {
            gr: gr.clone(),
            name: name.to_string(),
        }
    }

    /// Conflict with a free-form detail.
    pub fn conflict(gr: &GroupResource, name: &str, detail: impl Into<String>) -> Self {
        Self::Conflict {
            gr: gr.clone(),
            name: name.to_string(),
            detail: detail.into(),
        }
    }

    /// The optimistic-concurrency conflict of a stale resourceVersion.
    pub fn modified(gr: &GroupResource, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// Invalid with one cause.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        Self::Invalid {
            kind: kind.to_string(),
            group: group.to_string(),
            name: name.to_string(),
            causes,
        }
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } | Self::NoSuchResource => 404,
            Self::AlreadyExists { .. } | Self::Conflict { .. } | Self::ApplyConflict { .. } => 409,
            Self::Invalid { .. } => 422,
            Self::Forbidden { .. } | Self::NamespaceTerminating { .. } => 403,
            Self::Unauthorized => 401,
            Self::BadRequest(_) => 400,
            Self::MethodNotSupported | Self::VerbNotSupported { .. } => 405,
            Self::NotAcceptable => 406,
            Self::TooLarge { .. } => 413,
            Self::UnsupportedMediaType { .. } => 415,
            Self::Expired(_) => 410,
            Self::Internal(_) | Self::Unclassified(_) => 500,
            Self::Generic { code } | Self::Custom { code, .. } => *code,
            Self::Status(status) => status["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500),
        }
    }

    /// The `reason` field.
    pub fn reason(&self) -> &str {
        match self {
            Self::NotFound { .. } | Self::NoSuchResource => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } | Self::ApplyConflict { .. } => "Conflict",
            Self::Invalid { .. } => "Invalid",
            Self::Forbidden { .. } | Self::NamespaceTerminating { .. } => "Forbidden",
            Self::Unauthorized => "Unauthorized",
            Self::BadRequest(_) => "BadRequest",
            Self::MethodNotSupported | Self::VerbNotSupported { .. } => "MethodNotAllowed",
            Self::NotAcceptable => "NotAcceptable",
            Self::TooLarge { .. } => "RequestEntityTooLarge",
            Self::UnsupportedMediaType { .. } => "UnsupportedMediaType",
            Self::Expired(_) => "Expired",
            Self::Internal(_) => "InternalError",
            Self::Unclassified(_) => "",
            Self::Generic { code } => generic_reason(*code),
            Self::Custom { reason, .. } => reason,
            Self::Status(status) => status["reason"].as_str().unwrap_or_default(),
        }
    }

    /// The `Status` object sent to the client.
    pub fn to_status(&self) -> Value {
        if let Self::Status(status) = self {
            return (**status).clone();
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if self.reason().is_empty() {
            // StatusReasonUnknown is "", left out as omitempty.
            if let Some(o) = status.as_object_mut() {
                o.remove("reason");
            }
        }
        let details = match self {
            Self::NotFound { gr, name }
            | Self::AlreadyExists { gr, name }
            | Self::Conflict { gr, name, .. }
            | Self::Forbidden { gr, name, .. } => Some(resource_details(gr, name)),
            Self::NamespaceTerminating {
                gr,
                name,
                namespace,
            } => {
                let mut d = resource_details(gr, name);
                d["causes"] = json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {namespace} is being terminated"),
                    "field": "metadata.namespace",
                }]);
                Some(d)
            }
            Self::ApplyConflict { causes, .. } => Some(json!({
                "causes": causes.iter().map(|(message, field)| json!({
                    "reason": "FieldManagerConflict", "message": message, "field": field,
                })).collect::<Vec<_>>(),
            })),
            Self::Invalid {
                kind,
                group,
                name,
                causes,
            } => {
                let mut d = json!({
                    "causes": causes.iter().map(|c| json!({
                        "reason": c.reason, "message": cause_message(c), "field": c.field,
                    })).collect::<Vec<_>>(),
                });
                // StatusDetails' name, group and kind are omitempty.
                for (key, value) in [("name", name), ("group", group), ("kind", kind)] {
                    if !value.is_empty() {
                        d[key] = json!(value);
                    }
                }
                Some(d)
            }
            Self::VerbNotSupported { gr, .. } => Some(resource_details(gr, "")),
            Self::Internal(message) => Some(json!({"causes": [{"message": message}]})),
            Self::Generic { .. } => Some(json!({})),
            _ => None,
        };
        if let Some(details) = details {
            status["details"] = details;
        }
        status
    }
}

/// `NewGenericServerResponse`'s reason for a code.
fn generic_reason(code: u16) -> &'static str {
    match code {
        409 => "Conflict",
        404 => "NotFound",
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        406 => "NotAcceptable",
        415 => "UnsupportedMediaType",
        405 => "MethodNotAllowed",
        422 => "Invalid",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        429 => "TooManyRequests",
        500.. => "InternalError",
        _ => "",
    }
}

/// A cause's message as `StatusCause.message` carries it: the error without its field prefix.
pub fn cause_message(cause: &Cause) -> String {
    let full = cause.to_string();
    match full.strip_prefix(&format!("{}: ", cause.field)) {
        Some(rest) => rest.to_string(),
        None => full,
    }
}

fn resource_details(gr: &GroupResource, name: &str) -> Value {
    let mut d = json!({ "kind": gr.resource });
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    if !gr.group.is_empty() {
        d["group"] = json!(gr.group);
    }
    d
}

/// The `Status` of a successful delete (what kubectl reads `details.uid` from).
pub fn success_status(gr: &GroupResource, name: &str, uid: &str) -> Value {
    let mut details = resource_details(gr, name);
    details["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_plural_resource_in_details() {
        let e = ApiError::not_found(&GroupResource::new("", "configmaps"), "x");
        assert_eq!(
            e.to_status(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"configmaps \"x\" not found","reason":"NotFound",
                   "details":{"name":"x","kind":"configmaps"},"code":404})
        );
    }

    #[test]
    fn a_create_in_a_terminating_namespace_names_the_cause_on_metadata_namespace() {
        let e = ApiError::NamespaceTerminating {
            gr: GroupResource::new("", "configmaps"),
            name: "late".into(),
            namespace: "gone".into(),
        };
        assert_eq!(
            e.to_status(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"configmaps \"late\" is forbidden: unable to create new content in namespace gone because it is being terminated",
                   "reason":"Forbidden",
                   "details":{"name":"late","kind":"configmaps","causes":[{
                       "reason":"NamespaceTerminating","message":"namespace gone is being terminated",
                       "field":"metadata.namespace"}]},
                   "code":403})
        );
    }

    #[test]
    fn conflict_message_is_the_real_one() {
        let e = ApiError::modified(&GroupResource::new("coordination.k8s.io", "leases"), "x");
        assert_eq!(
            e.to_string(),
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"x\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(e.to_status()["details"]["group"], "coordination.k8s.io");
    }

    #[test]
    fn a_precondition_conflict_names_the_kind_and_its_group() {
        let e = ApiError::conflict(
            &GroupResource::new("coordination.k8s.io", "Lease"),
            "l",
            "the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (2). The object might have been modified",
        );
        assert_eq!(
            e.to_string(),
            "Operation cannot be fulfilled on Lease.coordination.k8s.io \"l\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (2). The object might have been modified"
        );
        assert_eq!(
            e.to_status()["details"],
            json!({"name": "l", "group": "coordination.k8s.io", "kind": "Lease"})
        );
    }

    #[test]
    fn invalid_leaves_out_an_empty_name_and_kind_and_repeats_no_message() {
        use crate::names::Cause;
        let cause = Cause::invalid(
            "spec.expirationSeconds",
            json!(599),
            "may not specify a duration less than 10 minutes",
        );
        let e = ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            "",
            vec![cause.clone()],
        );
        assert_eq!(
            e.to_string(),
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        );
        let details = &e.to_status()["details"];
        assert_eq!(details.get("name"), None);
        assert_eq!(details["kind"], "TokenRequest");
        // Duplicates stay in details.causes but the message names each error once.
        let e = ApiError::invalid("", "", "", vec![cause.clone(), cause]);
        assert_eq!(
            e.to_string(),
            " \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        );
        let details = &e.to_status()["details"];
        assert_eq!(details.get("kind"), None);
        assert_eq!(details["causes"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            ApiError::invalid("ConfigMap", "", "x", vec![]).to_string(),
            "ConfigMap \"x\" is invalid"
        );
    }

    #[test]
    fn a_generic_server_response_has_the_code_s_wording_and_empty_details() {
        assert_eq!(
            ApiError::Generic { code: 422 }.to_status(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"the server rejected our request due to an error in our request",
                   "reason":"Invalid","details":{},"code":422})
        );
        assert_eq!(ApiError::Generic { code: 409 }.reason(), "Conflict");
    }

    #[test]
    fn an_error_that_is_no_status_is_a_500_without_reason_or_details() {
        assert_eq!(
            ApiError::Unclassified("list element types are not identical: [[a] [1]]".into())
                .to_status(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"list element types are not identical: [[a] [1]]","code":500})
        );
    }
}
