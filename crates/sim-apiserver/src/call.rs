//! A resource request as the handlers receive it ([`Call`]: the parsed path and query, the
//! body, the field manager and who is asking), the largest body the server accepts, and the
//! decoding of a body. The resource verbs and the computed resources (access reviews,
//! TokenRequests) both serve a `Call`; this module knows neither of them.

use bytes::Bytes;
use serde_json::Value;

use super::request::{Query, RequestInfo};
use super::state::State;
use super::status::ApiError;

/// Largest accepted request body (kube-apiserver's 3 MiB limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// A resource request with everything a handler needs.
pub struct Call<'a> {
    /// Server state.
    pub state: &'a State,
    /// The parsed path.
    pub info: &'a RequestInfo,
    /// The query.
    pub query: &'a Query,
    /// Content-Type of the body, without parameters.
    pub content_type: String,
    /// The body.
    pub body: Bytes,
    /// The field manager for writes.
    pub manager: String,
    /// Who is asking (after impersonation).
    pub user: &'a super::auth::UserInfo,
}

/// Decodes a JSON or YAML body into an object.
pub fn decode(content_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = match content_type {
        "application/vnd.kubernetes.protobuf" => {
            super::protobuf::decode(body).map_err(|e| ApiError::UnsupportedMediaType {
                accepted: format!("application/json, application/yaml ({e})"),
            })?
        }
        "application/yaml" | "application/apply-patch+yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?,
        _ => serde_json::from_slice(body).map_err(|e| {
            ApiError::BadRequest(format!(
                "the object provided is unrecognized or malformed: {e}"
            ))
        })?,
    };
    Ok(value)
}

/// The object in a request's body: JSON, YAML or protobuf (`*/*` and no type read as
/// JSON); the real server's 415 for another type, its 400 for a body that is no object.
///
/// # Errors
/// As said.
pub(crate) fn body_object(call: &Call<'_>) -> Result<Value, ApiError> {
    match call.content_type.as_str() {
        ""
        | "application/json"
        | "application/yaml"
        | "application/vnd.kubernetes.protobuf"
        | "*/*" => {}
        _ => {
            return Err(ApiError::UnsupportedMediaType {
                accepted: "application/json, application/yaml, application/vnd.kubernetes.protobuf"
                    .into(),
            });
        }
    }
    let obj = decode(&call.content_type, &call.body)?;
    if !obj.is_object() {
        return Err(ApiError::BadRequest(
            "the object provided is unrecognized or malformed: expected a JSON object".into(),
        ));
    }
    Ok(obj)
}
