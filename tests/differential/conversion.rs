//! CRD conversion webhooks judged by kube-apiserver's calls of them: the interaction starts
//! an HTTPS conversion webhook on 127.0.0.1 (its CA given as the CRD's `caBundle`), defines
//! a custom resource stored as `v1` (`spec.size`) and served as `v2` too (`spec.replicas`),
//! and compares what a client sees writing and reading it through either version — and
//! through a webhook that answers Failure, one that leaves the objects unconverted and one
//! that cannot be reached —, which conversions the webhook was asked for, what watches of
//! `v2` select by the labels the webhook gives and by each version's `selectableFields`,
//! what a validating and a mutating admission webhook of `v2` are sent of writes through
//! either version (and what the mutating one's patch becomes in `v1`), what a
//! ValidatingAdmissionPolicy of `v2` makes of creates through `v1`, and the conflicts of
//! server-side applies through `v1` and `v2` of the field each version names its own way.
//! A CRD without a webhook (`None`) has its custom resource created through the non-storage
//! version, replaced through the storage one and applied through the other again, to
//! compare whose fields `managedFields` name.
//!
//! kube-apiserver reads a CRD through an informer: a changed conversion is in effect once a
//! read through `v2` shows it.

use serde_json::{Value, json};

use super::webhooks::{self, SERVER_PORT, WebhookServer};
use super::{Answer, Interaction, JSON, MERGE, NS, Target, exchange, normalize, support};

const GROUP: &str = "conversion.opconform.test";

const CRD_NAME: &str = "widgets.conversion.opconform.test";

fn widgets(version: &str) -> String {
    format!("/apis/{GROUP}/{version}/namespaces/{NS}/widgets")
}

fn widget_path(version: &str, name: &str) -> String {
    format!("{}/{name}", widgets(version))
}

/// The webhook's conversion of one object: `spec.size` in v1 is `spec.replicas` in v2. It
/// labels what it converts (kept) and bumps the generation (which the server restores).
fn converted(mut object: Value, desired: &str) -> Value {
    let spec = object["spec"].as_object().cloned().unwrap_or_default();
    let (from, to) = if desired.ends_with("/v2") {
        ("size", "replicas")
    } else {
        ("replicas", "size")
    };
    let mut new_spec = serde_json::Map::new();
    for (key, value) in spec {
        new_spec.insert(if key == from { to.into() } else { key }, value);
    }
    object["spec"] = Value::Object(new_spec);
    object["apiVersion"] = json!(desired);
    object["metadata"]["labels"]["converted-to"] =
        json!(desired.rsplit('/').next().unwrap_or_default());
    object["metadata"]["generation"] = json!(99);
    object
}

/// The answer of the conversion webhook at `path`: `/convert` converts, `/beta` too and
/// labels the objects with the review's version, `/fail` answers Failure, `/unconverted`
/// sends the objects back as they came. The answer is of the review's version.
fn conversion_answer(path: &str, review: &Value) -> Option<Value> {
    let request = &review["request"];
    let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
    let objects = request["objects"].as_array().cloned().unwrap_or_default();
    let mut response = json!({"uid": request["uid"], "result": {"status": "Success"}});
    match path {
        "/fail" => {
            response["result"] = json!({"status": "Failure",
                "message": "widgets are not converted today"});
        }
        "/unconverted" => response["convertedObjects"] = json!(objects),
        "/beta" => {
            let reviewed_as = review["apiVersion"].as_str().unwrap_or_default();
            response["convertedObjects"] = objects
                .into_iter()
                .map(|o| {
                    let mut o = converted(o, desired);
                    o["metadata"]["labels"]["reviewed-as"] =
                        json!(reviewed_as.rsplit('/').next().unwrap_or_default());
                    o
                })
                .collect();
        }
        _ => {
            response["convertedObjects"] =
                objects.into_iter().map(|o| converted(o, desired)).collect();
        }
    }
    Some(
        json!({"apiVersion": review["apiVersion"], "kind": "ConversionReview",
        "response": response}),
    )
}

/// The CRD of widgets: each version can select its objects by its own name of the size.
fn crd(server: &WebhookServer) -> Value {
    let version = |name: &str, storage: bool, field: &str| {
        json!({"name": name, "served": true, "storage": storage,
            "selectableFields": [{"jsonPath": format!(".spec.{field}")}],
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {field: {"type": "integer"}}}}}}})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                      "listKind": "WidgetList"},
            "versions": [version("v1", true, "size"), version("v2", false, "replicas")],
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": server.url("/convert"), "caBundle": server.ca_bundle}}}}})
}

fn widget(version: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/{version}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": spec})
}

/// Sends a request and records its status and body, the webhook server's port masked.
async fn send(t: &Target, method: &str, path: &str, content_type: &str, body: Value) -> Value {
    let (code, _, text) = exchange(t, method, path, content_type, JSON, body).await;
    let parsed = super::parse_body(text);
    let text = parsed.to_string();
    let masked = SERVER_PORT.replace_all(&text, "127.0.0.1:<port>");
    t.record(Answer {
        asked: format!("{method} {path}"),
        code: i64::from(code),
        body: normalize(serde_json::from_str(&masked).unwrap()),
    });
    parsed
}

/// The conversions the webhook at `path` was asked for since the last call, each once and
/// in order: the review's version, the desired version and each object's name, apiVersion,
/// spec and labels. How often each is asked for is kube-apiserver's watch cache's business
/// (one per version served, filled as objects are written) and is not compared, nor what
/// the watch caches of a CRD's previous conversion webhook still send to another path.
fn record_conversions(t: &Target, server: &WebhookServer, what: &str, path: &str) {
    let reviews: std::collections::BTreeSet<String> = server
        .take()
        .into_iter()
        .filter(|(sent_to, _)| sent_to == path)
        .flat_map(|(path, review)| {
            let request = review["request"].clone();
            request["objects"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |o| {
                    json!({"path": path, "review": review["apiVersion"],
                        "desiredAPIVersion": request["desiredAPIVersion"],
                        "name": o["metadata"]["name"], "apiVersion": o["apiVersion"],
                        "spec": o["spec"], "labels": o["metadata"]["labels"]})
                    .to_string()
                })
        })
        .collect();
    let reviews: Vec<Value> = reviews
        .iter()
        .map(|r| serde_json::from_str(r).unwrap())
        .collect();
    t.record(Answer {
        asked: format!("the ConversionReviews of {what}"),
        code: 0,
        body: normalize(json!(reviews)),
    });
}

/// Merges `webhook` into the CRD's conversion webhook (the review versions, the URL) and
/// waits until a read through v2 shows it (`shown` holds for the answer's status code and
/// body); the reviews meanwhile are dropped.
async fn reconfigure(
    t: &Target,
    server: &WebhookServer,
    webhook: Value,
    shown: impl Fn(u16, &Value) -> bool,
) {
    let patch = json!({"spec": {"conversion": {"webhook": webhook}}});
    let (code, text) = support::raw(
        &t.admin,
        "PATCH",
        &format!("{}/{CRD_NAME}", super::CRDS),
        MERGE,
        serde_json::to_vec(&patch).unwrap(),
    )
    .await;
    assert_eq!(
        code, 200,
        "{}: changing the conversion webhook to {webhook}: {text}",
        t.name
    );
    super::wait_until(
        t,
        &widget_path("v2", "w1"),
        "the changed conversion webhook to be called",
        shown,
    )
    .await;
    server.take();
}

/// Merge-patches the widget `name` through `version` and records the answer.
async fn merge_spec(t: &Target, version: &str, name: &str, patch: Value) -> Value {
    send(t, "PATCH", &widget_path(version, name), MERGE, patch).await
}

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1";

/// The name of the ValidatingAdmissionPolicy of widgets, of its binding and of the widget
/// it refuses whatever its size.
const POLICY: &str = "policy-probe";

/// Creates (or deletes) a ValidatingAdmissionPolicy of v2 widgets allowing at most 4
/// replicas, and its binding, and waits until a dry-run create of the probe widget through
/// v1 is refused (or no longer is).
async fn replicas_policy(t: &Target, install: bool) {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": POLICY},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [GROUP], "apiVersions": ["v2"],
                "operations": ["CREATE"], "resources": ["widgets"]}]},
            "validations": [
                {"expression": format!("object.metadata.name != '{POLICY}'"),
                 "message": "the probe is refused"},
                {"expression": "object.spec.replicas < 5", "message": "at most 4 replicas"}]}});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": POLICY},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]}});
    for (resource, object) in [
        ("validatingadmissionpolicies", policy),
        ("validatingadmissionpolicybindings", binding),
    ] {
        let collection = format!("{POLICIES}/{resource}");
        let (method, path, body) = if install {
            ("POST", collection, serde_json::to_vec(&object).unwrap())
        } else {
            ("DELETE", format!("{collection}/{POLICY}"), Vec::new())
        };
        let (code, text) = support::raw(&t.admin, method, &path, JSON, body).await;
        assert!(code < 300, "{}: {method} {path}: {code} {text}", t.name);
    }
    let probe = serde_json::to_vec(&widget("v1", POLICY, json!({"size": 1}))).unwrap();
    let dry_run = format!("{}?dryRun=All", widgets("v1"));
    let what = if install {
        "the widgets' policy to refuse its probe"
    } else {
        "the widgets' policy to be gone"
    };
    super::poll_until(
        t,
        what,
        || support::raw(&t.admin, "POST", &dry_run, JSON, probe.clone()),
        |(code, _)| (*code >= 400) == install,
    )
    .await;
}

fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or_default()
}

pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "conversion webhooks: a custom resource written and read through two versions",
            |t| {
                let server = WebhookServer::answering(conversion_answer).await;
                let (code, text) = support::raw(
                    &t.admin,
                    "POST",
                    super::CRDS,
                    JSON,
                    serde_json::to_vec(&crd(&server)).unwrap(),
                )
                .await;
                assert_eq!(code, 201, "{}: creating the CRD: {text}", t.name);
                for version in ["v1", "v2"] {
                    super::wait_until(
                        t,
                        &widgets(version),
                        "the CRD's versions to be served",
                        |code, _| code == 200,
                    )
                    .await;
                }
                server.take();
                let created = send(
                    t,
                    "POST",
                    &widgets("v1"),
                    JSON,
                    widget("v1", "w1", json!({"size": 3})),
                )
                .await;
                let read = send(t, "GET", &widget_path("v2", "w1"), JSON, Value::Null).await;
                send(t, "GET", &widgets("v2"), JSON, Value::Null).await;
                let mut replaced = read.clone();
                replaced["spec"]["replicas"] = json!(5);
                send(t, "PUT", &widget_path("v2", "w1"), JSON, replaced).await;
                send(t, "GET", &widget_path("v1", "w1"), JSON, Value::Null).await;
                merge_spec(t, "v2", "w1", json!({"spec": {"replicas": 6}})).await;
                send(
                    t,
                    "POST",
                    &widgets("v2"),
                    JSON,
                    widget("v2", "w2", json!({"replicas": 2})),
                )
                .await;
                let from = created["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                send(
                    t,
                    "GET",
                    &format!(
                        "{}?watch=true&resourceVersion={from}&timeoutSeconds=1",
                        widgets("v2")
                    ),
                    JSON,
                    Value::Null,
                )
                .await;
                // A watch selects the objects as its version shows them: converted (the
                // webhook labels them) and by that version's selectable fields.
                for selector in [
                    "labelSelector=converted-to%3Dv2",
                    "fieldSelector=spec.replicas%3D6",
                ] {
                    send(
                        t,
                        "GET",
                        &format!(
                            "{}?watch=true&resourceVersion={from}&{selector}&timeoutSeconds=1",
                            widgets("v2")
                        ),
                        JSON,
                        Value::Null,
                    )
                    .await;
                }
                send(
                    t,
                    "GET",
                    &format!("{}?fieldSelector=spec.size%3D6", widgets("v1")),
                    JSON,
                    Value::Null,
                )
                .await;
                send(t, "DELETE", &widget_path("v2", "w2"), JSON, Value::Null).await;

                // A validating webhook of v2 is sent the objects of writes through either
                // version in v2, converted by the conversion webhook; a mutating one of v2
                // labels a create through v1 in v2, converted back.
                let admission = WebhookServer::start().await;
                let of_v2 = |name: &str, path: &str, operations: Value| {
                    let mut hook = webhooks::webhook(name, &admission, path, json!({}));
                    hook["rules"] = json!([{"apiGroups": [GROUP], "apiVersions": ["v2"],
                        "operations": operations, "resources": ["widgets"]}]);
                    hook
                };
                let labeller = of_v2("label.widgets.opconform.test", "/label", json!(["CREATE"]));
                webhooks::register(
                    t,
                    &admission,
                    "opconform-widget-labels",
                    true,
                    vec![labeller],
                )
                .await;
                let hook = of_v2(
                    "widgets.opconform.test",
                    "/check",
                    json!(["CREATE", "UPDATE"]),
                );
                webhooks::register(t, &admission, "opconform-widgets", false, vec![hook]).await;
                merge_spec(t, "v2", "w1", json!({"spec": {"replicas": 8}})).await;
                send(
                    t,
                    "POST",
                    &widgets("v1"),
                    JSON,
                    widget("v1", "w4", json!({"size": 4})),
                )
                .await;
                merge_spec(t, "v1", "w4", json!({"spec": {"size": 5}})).await;
                webhooks::record_reviews(t, &admission, "the widgets' validating webhook");
                webhooks::unregister(t, &admission, "opconform-widgets", false).await;
                webhooks::unregister(t, &admission, "opconform-widget-labels", true).await;
                send(t, "DELETE", &widget_path("v1", "w4"), JSON, Value::Null).await;

                // A ValidatingAdmissionPolicy of v2 judges creates through v1 in v2.
                replicas_policy(t, true).await;
                for (name, size) in [("w6", 4), ("w7", 7)] {
                    let created = widget("v1", name, json!({"size": size}));
                    send(t, "POST", &widgets("v1"), JSON, created).await;
                }
                replicas_policy(t, false).await;
                send(t, "DELETE", &widget_path("v1", "w6"), JSON, Value::Null).await;

                // Server-side apply judges a manager of v1 in v1: another manager's v2
                // `replicas` is its `size`.
                // The sizer creates w5; the scaler conflicts, then forces; the sizer conflicts.
                for (version, manager, force, spec) in [
                    ("v1", "sizer", false, json!({"size": 1})),
                    ("v2", "scaler", false, json!({"replicas": 2})),
                    ("v2", "scaler", true, json!({"replicas": 2})),
                    ("v1", "sizer", false, json!({"size": 3})),
                ] {
                    let path = format!(
                        "{}?fieldManager={manager}&force={force}",
                        widget_path(version, "w5")
                    );
                    let applied = widget(version, "w5", spec);
                    send(t, "PATCH", &path, super::APPLY, applied).await;
                }
                send(t, "GET", &widget_path("v1", "w5"), JSON, Value::Null).await;
                send(t, "DELETE", &widget_path("v1", "w5"), JSON, Value::Null).await;
                // A conversion kube-apiserver's watch cache made once is not made again: the
                // conversions are compared over all the writes and reads.
                record_conversions(
                    t,
                    &server,
                    "the reads and writes through both versions",
                    "/convert",
                );

                // A webhook that speaks only v1beta1 is sent v1beta1 reviews.
                let beta = json!({"conversionReviewVersions": ["v1beta1", "v1"],
                "clientConfig": {"url": server.url("/beta")}});
                reconfigure(t, &server, beta, |code, body| {
                    code == 200 && body["metadata"]["labels"]["reviewed-as"] == "v1beta1"
                })
                .await;
                send(t, "GET", &widget_path("v2", "w1"), JSON, Value::Null).await;
                merge_spec(t, "v2", "w1", json!({"spec": {"replicas": 9}})).await;
                record_conversions(t, &server, "v1beta1 reviews", "/beta");

                let fail = json!({"conversionReviewVersions": ["v1"],
                "clientConfig": {"url": server.url("/fail")}});
                reconfigure(t, &server, fail, |code, _| code != 200).await;
                // A list is not compared: kube-apiserver answers it from a watch cache that
                // keeps trying to fill, 429 or after a wait.
                send(t, "GET", &widget_path("v2", "w1"), JSON, Value::Null).await;
                send(
                    t,
                    "POST",
                    &widgets("v2"),
                    JSON,
                    widget("v2", "w3", json!({"replicas": 1})),
                )
                .await;
                send(t, "GET", &widget_path("v1", "w1"), JSON, Value::Null).await;
                record_conversions(t, &server, "a webhook that answers Failure", "/fail");

                let unconverted = json!({"clientConfig": {"url": server.url("/unconverted")}});
                reconfigure(t, &server, unconverted, |_, body| {
                    message(body).contains("invalid groupVersion")
                })
                .await;
                send(t, "GET", &widget_path("v2", "w1"), JSON, Value::Null).await;
                merge_spec(t, "v2", "w1", json!({"spec": {"replicas": 7}})).await;
                record_conversions(
                    t,
                    &server,
                    "a webhook that converts nothing",
                    "/unconverted",
                );

                let unreachable = json!({"clientConfig": {"url": "https://127.0.0.1:1/convert"}});
                reconfigure(t, &server, unreachable, |_, body| {
                    message(body).contains("127.0.0.1:1")
                })
                .await;
                send(t, "GET", &widget_path("v2", "w1"), JSON, Value::Null).await;
                send(
                    t,
                    "POST",
                    &widgets("v2"),
                    JSON,
                    widget("v2", "w3", json!({"replicas": 1})),
                )
                .await;
                send(t, "GET", &widget_path("v1", "w1"), JSON, Value::Null).await;

                let crd_path = format!("{}/{CRD_NAME}", super::CRDS);
                let _ = support::raw(&t.admin, "DELETE", &crd_path, JSON, Vec::new()).await;
                super::wait_until(t, &crd_path, "the CRD to be gone", |code, _| code == 404).await;
            }
        ),
        interaction!(
            "conversion webhooks: without a webhook, managers of either version own their fields",
            |t| {
                let name = format!("gizmos.{GROUP}");
                let version = |v: &str, storage: bool| {
                    json!({"name": v, "served": true, "storage": storage,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
                };
                let crd = json!({"apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition", "metadata": {"name": name},
                "spec": {"group": GROUP, "scope": "Namespaced",
                    "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                    "versions": [version("v1", true), version("v2", false)]}});
                let (code, text) = support::raw(
                    &t.admin,
                    "POST",
                    super::CRDS,
                    JSON,
                    serde_json::to_vec(&crd).unwrap(),
                )
                .await;
                assert_eq!(code, 201, "{}: creating the CRD: {text}", t.name);
                let gizmos = |v: &str| format!("/apis/{GROUP}/{v}/namespaces/{NS}/gizmos");
                for v in ["v1", "v2"] {
                    super::wait_until(
                        t,
                        &gizmos(v),
                        "the CRD's versions to be served",
                        |code, _| code == 200,
                    )
                    .await;
                }
                let gizmo = |v: &str, spec: Value| {
                    json!({"apiVersion": format!("{GROUP}/{v}"), "kind": "Gizmo",
                    "metadata": {"name": "g1"}, "spec": spec})
                };
                send(
                    t,
                    "POST",
                    &gizmos("v2"),
                    JSON,
                    gizmo("v2", json!({"size": 1, "colour": "red"})),
                )
                .await;
                let mut replaced = super::raw_get(t, &format!("{}/g1", gizmos("v1"))).await;
                replaced["spec"]["size"] = json!(2);
                send(t, "PUT", &format!("{}/g1", gizmos("v1")), JSON, replaced).await;
                send(
                    t,
                    "PATCH",
                    &format!("{}/g1?fieldManager=applier&force=true", gizmos("v2")),
                    super::APPLY,
                    gizmo("v2", json!({"size": 3})),
                )
                .await;
                send(t, "GET", &format!("{}/g1", gizmos("v1")), JSON, Value::Null).await;
                let crd_path = format!("{}/{name}", super::CRDS);
                let _ = support::raw(&t.admin, "DELETE", &crd_path, JSON, Vec::new()).await;
                super::wait_until(t, &crd_path, "the CRD to be gone", |code, _| code == 404).await;
            }
        ),
    ]
}
