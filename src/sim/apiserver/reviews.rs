//! Computed, never-stored resources: access reviews (`kubectl auth can-i`) and
//! ServiceAccount TokenRequests (`kubectl create token`).

use chrono::{Duration, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::auth::{self, Attributes, UserInfo};
use super::handlers::{Call, decode};
use super::registry::ResourceType;
use super::status::{ApiError, GroupResource};

fn attributes_of(spec: &Value, namespace_override: Option<&str>) -> Attributes {
    if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        Attributes {
            verb: s("verb"),
            resource_request: true,
            group: s("group"),
            resource: s("resource"),
            subresource: s("subresource"),
            namespace: namespace_override
                .map(str::to_string)
                .unwrap_or_else(|| s("namespace")),
            name: s("name"),
            path: String::new(),
        }
    } else {
        let n = &spec["nonResourceAttributes"];
        Attributes {
            verb: n["verb"].as_str().unwrap_or_default().to_string(),
            resource_request: false,
            path: n["path"].as_str().unwrap_or_default().to_string(),
            ..Default::default()
        }
    }
}

/// Serves a create of an access review.
///
/// # Errors
/// BadRequest for a malformed body.
pub fn create(call: &Call<'_>, rt: &ResourceType) -> Result<(u16, Value), ApiError> {
    let mut review = decode(&call.content_type, &call.body)?;
    if !review.is_object() {
        return Err(ApiError::BadRequest(
            "the object provided is unrecognized or malformed".into(),
        ));
    }
    let spec = review["spec"].clone();
    let (user, ns) = match rt.resource.as_str() {
        "selfsubjectaccessreviews" => (call.user.clone(), None),
        _ => {
            let user = UserInfo {
                name: spec["user"].as_str().unwrap_or_default().to_string(),
                groups: spec["groups"]
                    .as_array()
                    .map(|g| {
                        g.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
                uid: spec["uid"].as_str().unwrap_or_default().to_string(),
            };
            let ns = (rt.resource == "localsubjectaccessreviews")
                .then_some(call.info.namespace.as_str());
            (user, ns)
        }
    };
    let decision = auth::authorize(&call.state.store, &user, &attributes_of(&spec, ns));
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!(rt.kind);
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    review["status"] = status;
    Ok((201, review))
}

/// Serves `POST …/serviceaccounts/NAME/token`.
///
/// # Errors
/// NotFound when the ServiceAccount does not exist.
pub fn token_request(call: &Call<'_>, _rt: &ResourceType) -> Result<(u16, Value), ApiError> {
    let mut request = if call.body.is_empty() {
        json!({})
    } else {
        decode(&call.content_type, &call.body)?
    };
    let gr = GroupResource::new("", "serviceaccounts");
    let sa = call
        .state
        .store
        .get(&gr, &call.info.namespace, &call.info.name)
        .ok_or_else(|| ApiError::not_found(&gr, &call.info.name))?;
    let seconds = request["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(3600)
        .max(600);
    let expires = Utc::now() + Duration::seconds(seconds);
    let uid = sa["metadata"]["uid"].as_str().unwrap_or_default();
    let token = call
        .state
        .tokens
        .issue(&call.info.namespace, &call.info.name, uid, Some(expires));
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    request["metadata"] = json!({"name": call.info.name, "namespace": call.info.namespace,
                                 "creationTimestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)});
    request["spec"]["expirationSeconds"] = json!(seconds);
    if request["spec"]["audiences"].is_null() {
        request["spec"]["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    request["status"] = json!({"token": token,
        "expirationTimestamp": expires.to_rfc3339_opts(SecondsFormat::Secs, true)});
    Ok((201, request))
}
