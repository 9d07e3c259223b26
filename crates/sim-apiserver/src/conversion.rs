//! The version conversion of custom resources, as kube-apiserver 1.34 makes it
//! (k8s.io/apiextensions-apiserver/pkg/apiserver/conversion): a CRD whose
//! `spec.conversion.strategy` is `Webhook` has each object read or written through a version
//! other than its own `apiVersion` sent to its conversion webhook in a ConversionReview
//! (`apiextensions.k8s.io/v1`, or `v1beta1`, the first of `conversionReviewVersions` the
//! server speaks), over HTTPS with the `caBundle` as the only root and a 30 s timeout, and
//! the answer checked as the real converter checks it (uid, `result.status`, one object per
//! object sent, the desired apiVersion and the same kind, name, namespace and uid), the
//! converted object keeping the original's metadata but for its labels and annotations
//! (`restoreObjectMeta`). An object already in the desired version is not sent.
//!
//! The `None` strategy changes the apiVersion only ([`objects::to_view`] does that), so a
//! CRD without a webhook has no [`Converter`].
//!
//! The converter is used wherever kube-apiserver converts:
//! - an update's and a server-side apply's field manager judge the managers of other
//!   versions in their version (structured-merge-diff's `Updater.update`), converting the
//!   old and the new object to it: an apply conflicts with, and takes, the fields as that
//!   version names them;
//! - an admission webhook or a ValidatingAdmissionPolicy whose rules match another version
//!   than the request's (matchPolicy `Equivalent`) is given the objects converted to that
//!   version (admission's `ConvertToGVK`), and a mutating webhook's patched object is
//!   converted back;
//! - a watch selects objects as converted to its version, with that version's
//!   `selectableFields`, as kube-apiserver's watch cache of each served version holds them
//!   (a list already does).
//!
//! # Caveats
//! - Each object is sent in a review of its own, as kube-apiserver's watch cache sends the
//!   objects of a list; a `service` client config is resolved when the converter is made.
//! - A mutating webhook's patched object is converted back after each webhook, where
//!   kube-apiserver keeps it in the webhook's version until a webhook of another version
//!   (or the end of mutating admission) needs it: a webhook that does not convert
//!   losslessly is called on other objects here.

use serde_json::{Value, json};

use super::admission_webhooks::{self, Destination, Unanswered};
use super::objects;
use super::registry::{Backing, ResourceType};
use super::status::ApiError;
use super::store::Store;

/// How long kube-apiserver waits for a conversion webhook (`defaultRequestTimeout`).
const TIMEOUT_SECONDS: u64 = 30;

/// Why an object could not be converted: the real converter's words after
/// `conversion webhook for <group/version, Kind=kind> `.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The webhook could not be called, or did not answer a ConversionReview.
    #[error("failed: {0}")]
    Call(String),
    /// The webhook answered, but not with a usable response (`getConvertedObjectsFromResponse`).
    #[error("failed: {0}")]
    Response(String),
    /// The webhook answered another number of objects than it was sent.
    #[error("returned {got} objects, expected {expected}")]
    Count {
        /// How many came back.
        got: usize,
        /// How many were sent.
        expected: usize,
    },
    /// A converted object is not of the desired group version or kind.
    #[error("returned invalid object at index 0: {0}")]
    Type(String),
    /// A converted object changed its name, namespace or uid.
    #[error("returned invalid object: {0}")]
    Identity(String),
    /// A converted object's labels or annotations are not strings.
    #[error("returned invalid metadata: {0}")]
    Metadata(String),
}

/// A conversion that failed: the object's `group/version, Kind=kind` and why.
#[derive(Debug, thiserror::Error)]
#[error("conversion webhook for {gvk} {error}")]
pub struct Failure {
    /// The group version kind of the object sent, as Go prints it.
    pub gvk: String,
    /// Why.
    #[source]
    pub error: Error,
}

impl Failure {
    /// The Status a single object's failed conversion is answered with: a 500 without a
    /// reason, as kube-apiserver answers an error that is not a Status.
    pub fn into_api_error(self) -> ApiError {
        ApiError::Unclassified(self.to_string())
    }

    /// The Status of a list whose objects could not be converted: kube-apiserver's watch
    /// cache cannot fill, and answers 429 until it can.
    pub fn into_list_error(self, rt: &ResourceType, version: &str) -> ApiError {
        let message = format!(
            "storage is (re)initializing: failed to list {}, Kind={}: {self}",
            rt.api_version(version),
            rt.kind
        );
        ApiError::Status(Box::new(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": 30}, "code": 429,
        })))
    }
}

/// The conversion webhook of one CRD.
#[derive(Debug, Clone)]
pub struct Converter {
    group: String,
    destination: Result<Destination, String>,
    ca_bundle: Option<String>,
    /// The ConversionReview version spoken, if the CRD names one the server knows.
    review_version: Option<&'static str>,
}

/// The converter of `rt`'s objects: `None` for built-in resources and CRDs whose strategy
/// is `None`.
pub fn converter(store: &Store, rt: &ResourceType) -> Option<Converter> {
    let Backing::Custom {
        conversion_webhook: Some(webhook),
        ..
    } = &rt.backing
    else {
        return None;
    };
    let config = &webhook["clientConfig"];
    let review_version = webhook["conversionReviewVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|v| match v.as_str() {
            Some("v1") => Some("v1"),
            Some("v1beta1") => Some("v1beta1"),
            _ => None,
        });
    Some(Converter {
        group: rt.group.clone(),
        destination: admission_webhooks::destination(store, config, TIMEOUT_SECONDS)
            .map_err(|e| e.to_string()),
        ca_bundle: config["caBundle"]
            .as_str()
            .filter(|b| !b.trim().is_empty())
            .map(str::to_string),
        review_version,
    })
}

/// Go's `GroupVersionKind.String()` of an object.
fn gvk_of(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    match api_version.split_once('/') {
        Some((group, version)) => format!("{group}/{version}, Kind={kind}"),
        None => format!("/{api_version}, Kind={kind}"),
    }
}

impl Converter {
    /// `object` in `version` of the CRD's group: unchanged when it is already, else as the
    /// webhook converted it.
    ///
    /// # Errors
    /// The webhook could not be called, refused, or answered something the real converter
    /// does not accept.
    pub fn convert(&self, object: Value, version: &str) -> Result<Value, Failure> {
        let desired = format!("{}/{version}", self.group);
        if object["apiVersion"] == desired.as_str() {
            return Ok(object);
        }
        let gvk = gvk_of(&object);
        self.call(&object, &desired)
            .map_err(|error| Failure { gvk, error })
    }

    /// Converts every object of `objects` that is not in `version`.
    ///
    /// # Errors
    /// The first object that could not be converted.
    pub fn convert_all(&self, objects: Vec<Value>, version: &str) -> Result<Vec<Value>, Failure> {
        objects
            .into_iter()
            .map(|o| self.convert(o, version))
            .collect()
    }

    /// Converts what a client sent for `version` of `rt` (its apiVersion set to the storage
    /// version by [`objects::from_view`]) into the storage version.
    ///
    /// # Errors
    /// As [`Converter::convert`].
    pub fn to_storage(
        &self,
        rt: &ResourceType,
        version: &str,
        mut object: Value,
    ) -> Result<Value, Failure> {
        object["apiVersion"] = json!(rt.api_version(version));
        self.convert(object, rt.storage_version())
    }

    fn call(&self, object: &Value, desired: &str) -> Result<Value, Error> {
        let review_version = self
            .review_version
            .ok_or_else(|| Error::Call("no supported conversion review versions".into()))?;
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "kind": "ConversionReview",
            "apiVersion": format!("apiextensions.k8s.io/{review_version}"),
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": [object]},
            "response": {"uid": "", "convertedObjects": null, "result": {"metadata": {}}},
        });
        let destination = self
            .destination
            .as_ref()
            .map_err(|e| Error::Call(e.clone()))?;
        let body = serde_json::to_vec(&review).unwrap_or_default();
        let ca = self.ca_bundle.as_deref();
        let posted = admission_webhooks::run_blocking(admission_webhooks::post_for_answer(
            destination,
            ca,
            body,
            TIMEOUT_SECONDS,
        ))
        .map_err(|e| Error::Call(e.to_string()))?;
        let failed =
            |e: &dyn std::fmt::Display| Error::Call(format!("Post {:?}: {e}", destination.url));
        let bytes = match posted {
            Ok(bytes) => bytes,
            Err(Unanswered::Call(e)) => return Err(failed(&e)),
            Err(Unanswered::Status(text)) => return Err(Error::Call(text)),
        };
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| failed(&e))?;
        let converted = converted_objects(&answer, review_version, &uid)?;
        if converted.len() != 1 {
            return Err(Error::Count {
                got: converted.len(),
                expected: 1,
            });
        }
        let mut converted = converted.into_iter().next().unwrap_or_default();
        let got = converted["apiVersion"].as_str().unwrap_or_default();
        if got != desired {
            return Err(Error::Type(format!(
                "invalid groupVersion (expected {desired}, received {got})"
            )));
        }
        let (want_kind, got_kind) = (&object["kind"], &converted["kind"]);
        if want_kind != got_kind {
            return Err(Error::Type(format!(
                "invalid kind (expected {}, received {})",
                want_kind.as_str().unwrap_or_default(),
                got_kind.as_str().unwrap_or_default()
            )));
        }
        for field in ["name", "namespace", "uid"] {
            let text = |o: &Value| {
                o["metadata"][field]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            };
            let (was, is) = (text(object), text(&converted));
            if was != is {
                let what = if field == "uid" { "UID" } else { field };
                return Err(Error::Identity(format!(
                    "must have the same {what}: {was} != {is}"
                )));
            }
        }
        restore_object_meta(object, &mut converted)?;
        Ok(converted)
    }
}

/// The converted objects of a ConversionReview answer, or why there are none.
fn converted_objects(answer: &Value, review_version: &str, uid: &str) -> Result<Vec<Value>, Error> {
    let response = &answer["response"];
    if review_version == "v1" {
        let (api_version, kind) = (
            answer["apiVersion"].as_str().unwrap_or_default(),
            answer["kind"].as_str().unwrap_or_default(),
        );
        if api_version != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
            return Err(Error::Response(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {api_version}, Kind={kind}"
            )));
        }
    }
    if !response.is_object() {
        return Err(Error::Response("no response provided".into()));
    }
    if review_version == "v1" {
        let got = response["uid"].as_str().unwrap_or_default();
        if got != uid {
            return Err(Error::Response(format!(
                "expected response.uid={uid:?}, got {got:?}"
            )));
        }
    }
    let result = &response["result"];
    let status = result["status"].as_str().unwrap_or_default();
    if status != "Success" {
        let message = result["message"].as_str().unwrap_or_default();
        return Err(Error::Response(if message.is_empty() {
            format!("response.result.status was '{status}', not 'Success'")
        } else {
            message.to_string()
        }));
    }
    Ok(response["convertedObjects"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// The original's metadata with the converted object's labels and annotations
/// (`restoreObjectMeta`): every other change the webhook made to metadata is undone.
fn restore_object_meta(original: &Value, converted: &mut Value) -> Result<(), Error> {
    let answered = match converted.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(Error::Metadata(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            )));
        }
        None => {
            return Err(Error::Metadata(
                "missing metadata in converted object".into(),
            ));
        }
    };
    let mut metadata = original["metadata"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        match answered.get(field) {
            None | Some(Value::Null) => {
                metadata.remove(field);
            }
            Some(Value::Object(map)) => {
                if let Some((key, value)) = map.iter().find(|(_, v)| !v.is_string()) {
                    return Err(Error::Metadata(format!(
                        "metadata.{field}[{key}] must be a string, but is {} in converted object",
                        go_type(value)
                    )));
                }
                metadata.insert(field.into(), Value::Object(map.clone()));
            }
            Some(other) => {
                return Err(Error::Metadata(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(other)
                )));
            }
        }
    }
    converted["metadata"] = Value::Object(metadata);
    Ok(())
}

/// The Go type `encoding/json` decodes a value into, as `%T` prints it.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// What a client of `version` sees of a stored object of `rt`: converted by the webhook
/// when the CRD has one, then given the version's apiVersion and kind.
///
/// # Errors
/// The conversion's failure, as the real server answers it.
pub fn view(
    converter: Option<&Converter>,
    rt: &ResourceType,
    version: &str,
    object: Value,
) -> Result<Value, ApiError> {
    let object = match converter {
        Some(c) => c
            .convert(object, version)
            .map_err(Failure::into_api_error)?,
        None => object,
    };
    Ok(objects::to_view(rt, version, object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget(version: &str) -> Value {
        json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "uid": "u", "generation": 1,
                         "labels": {"a": "b"}},
            "spec": {"size": 1}})
    }

    fn widget_crd(conversion: Value) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "conversion": conversion,
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}})
    }

    #[test]
    fn only_a_crd_of_the_webhook_strategy_has_a_converter_speaking_its_first_known_version() {
        let store = Store::new(10);
        let none = crate::registry::custom_type(&widget_crd(json!({"strategy": "None"}))).unwrap();
        assert!(converter(&store, &none).is_none());
        let webhook = json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v2", "v1beta1", "v1"],
            "clientConfig": {"url": "https://127.0.0.1:8443/convert"}}});
        let rt = crate::registry::custom_type(&widget_crd(webhook)).unwrap();
        let converter = converter(&store, &rt).expect("a webhook converter");
        assert_eq!(converter.review_version, Some("v1beta1"));
        assert_eq!(
            converter.destination.map(|d| d.url),
            Ok("https://127.0.0.1:8443/convert?timeout=30s".to_string())
        );
    }

    #[test]
    fn an_object_already_in_the_desired_version_is_not_sent() {
        let converter = Converter {
            group: "example.com".into(),
            destination: Err("never dialled".into()),
            ca_bundle: None,
            review_version: Some("v1"),
        };
        assert_eq!(converter.convert(widget("v2"), "v2").unwrap(), widget("v2"));
        assert_eq!(
            converter
                .convert(widget("v1"), "v2")
                .unwrap_err()
                .to_string(),
            "conversion webhook for example.com/v1, Kind=Widget failed: never dialled"
        );
    }

    #[test]
    fn the_converted_object_keeps_its_metadata_but_the_labels_and_annotations() {
        let original = widget("v1");
        let mut converted = widget("v2");
        converted["metadata"]["generation"] = json!(7);
        converted["metadata"]["labels"] = json!({"c": "d"});
        converted["metadata"]["annotations"] = json!({"e": "f"});
        restore_object_meta(&original, &mut converted).unwrap();
        assert_eq!(converted["metadata"]["generation"], 1);
        assert_eq!(converted["metadata"]["labels"], json!({"c": "d"}));
        assert_eq!(converted["metadata"]["annotations"], json!({"e": "f"}));
    }

    #[test]
    fn labels_the_webhook_drops_are_dropped() {
        let original = widget("v1");
        let mut converted = widget("v2");
        converted["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        restore_object_meta(&original, &mut converted).unwrap();
        assert_eq!(converted["metadata"].get("labels"), None);
    }

    #[test]
    fn a_label_that_is_not_a_string_is_refused_with_the_go_type() {
        let mut converted = widget("v2");
        converted["metadata"]["labels"] = json!({"n": 1});
        let e = restore_object_meta(&widget("v1"), &mut converted).unwrap_err();
        assert_eq!(
            e.to_string(),
            "returned invalid metadata: metadata.labels[n] must be a string, but is int64 in converted object"
        );
    }

    #[test]
    fn an_answer_of_failure_is_its_message_or_the_status() {
        let answer = |result: Value| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": "x", "result": result}})
        };
        let e = converted_objects(
            &answer(json!({"status": "Failure", "message": "no"})),
            "v1",
            "x",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "failed: no");
        let e = converted_objects(&answer(json!({"status": "Failure"})), "v1", "x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed: response.result.status was 'Failure', not 'Success'"
        );
        let e = converted_objects(&answer(json!({"status": "Success"})), "v1", "y").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed: expected response.uid=\"y\", got \"x\""
        );
    }

    #[test]
    fn a_v1beta1_answer_is_not_checked_for_its_kind_or_uid() {
        let answer = json!({"response": {"uid": "other", "result": {"status": "Success"},
            "convertedObjects": [widget("v2")]}});
        assert_eq!(converted_objects(&answer, "v1beta1", "x").unwrap().len(), 1);
    }

    #[test]
    fn a_failure_names_the_group_version_kind_as_go_prints_it() {
        let failure = Failure {
            gvk: gvk_of(&widget("v1")),
            error: Error::Response("no".into()),
        };
        assert_eq!(
            failure.to_string(),
            "conversion webhook for example.com/v1, Kind=Widget failed: no"
        );
    }
}
