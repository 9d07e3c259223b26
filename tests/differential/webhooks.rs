//! Admission webhooks judged by kube-apiserver's calls of them: each interaction starts its
//! own HTTPS webhook server on 127.0.0.1 (a certificate for that address, its CA given as
//! the configurations' `caBundle`), registers the same webhook configurations on the control
//! plane, and compares what the client sees (answers, refusals, `Warning` headers, a
//! mutating webhook's patch, failure policies, a timeout, selectors that exclude) and the
//! AdmissionReviews the webhook server received.
//!
//! kube-apiserver reads webhook configurations through an informer: a configuration is in
//! effect once a probe (a dry-run ConfigMap only the configuration's probe webhook selects)
//! reaches the webhook server, and gone once a probe no longer does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};

use super::{
    Answer, Interaction, JSON, MERGE, NS, Target, exchange, normalize, support, wait_until,
    warnings,
};

/// The address of a webhook server started here (port 1 is the unreachable one).
pub(super) static SERVER_PORT: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"127\.0\.0\.1:\d{2,5}").unwrap());

/// What the webhook server received: the path and the AdmissionReview.
type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// An HTTPS webhook server on 127.0.0.1, stopped when dropped.
pub(super) struct WebhookServer {
    port: u16,
    pub(super) ca_bundle: String,
    received: Received,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        // The accept loop owns the connections' tasks: they end with it.
        self.accepting.abort();
    }
}

/// The answer of the webhook at `path` to `review`; `None` never answers.
fn answer_of(path: &str, review: &Value) -> Option<Value> {
    let request = &review["request"];
    let name = [
        &request["name"],
        &request["object"]["metadata"]["name"],
        &request["oldObject"]["metadata"]["name"],
    ]
    .iter()
    .find_map(|n| n.as_str().filter(|n| !n.is_empty()))
    .unwrap_or_default()
    .to_string();
    let mut response = json!({"uid": request["uid"], "allowed": true});
    match path {
        "/slow" => return None,
        "/label" => {
            let patch = json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]);
            response["patchType"] = json!("JSONPatch");
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
        "/mutate" => {
            let patch = json!([
                {"op": "add", "path": "/metadata/labels/mutated", "value": "yes"},
                {"op": "add", "path": "/data/added", "value": "by the webhook"},
            ]);
            response["patchType"] = json!("JSONPatch");
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
        _ if name.contains("bare") => {
            response["allowed"] = json!(false);
        }
        _ if name.contains("deny") => {
            response["allowed"] = json!(false);
            response["status"] = json!({
                "message": format!("{} of {name} is refused", request["operation"].as_str().unwrap_or_default()),
                "reason": "Conflict",
                "code": 409,
                "details": {"name": name, "causes": [{"field": "data", "message": "not this one"}]},
            });
        }
        _ if name.contains("warn") => {
            response["warnings"] = json!(["a warning from the webhook", "and \"another\" one"]);
        }
        _ => {}
    }
    Some(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

/// How a webhook server answers the review sent to a path; `None` never answers.
pub(super) type Answering = fn(&str, &Value) -> Option<Value>;

impl WebhookServer {
    pub(super) async fn start() -> Self {
        Self::answering(answer_of).await
    }

    /// A server that answers with `answer_of`.
    pub(super) async fn answering(answer_of: Answering) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(cert.pem());
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let received: Received = Arc::default();
        let recorder = received.clone();
        let accepting = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let recorder = recorder.clone();
                connections.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let recorder = recorder.clone();
                            async move {
                                let path = request.uri().path().to_string();
                                let body = request.into_body().collect().await?.to_bytes();
                                let review: Value =
                                    serde_json::from_slice(&body).unwrap_or(Value::Null);
                                recorder
                                    .lock()
                                    .unwrap()
                                    .push((path.clone(), review.clone()));
                                let Some(answer) = answer_of(&path, &review) else {
                                    return std::future::pending().await;
                                };
                                Ok::<_, hyper::Error>(
                                    hyper::Response::builder()
                                        .header("content-type", "application/json")
                                        .body(Full::new(Bytes::from(answer.to_string())))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self {
            port,
            ca_bundle,
            received,
            accepting,
        }
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The reviews received but the probes', taken.
    pub(super) fn take(&self) -> Vec<(String, Value)> {
        std::mem::take(&mut *self.received.lock().unwrap())
            .into_iter()
            .filter(|(_, review)| !is_probe(review))
            .collect()
    }

    fn probes_of(&self, config: &str) -> usize {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, r)| r["request"]["object"]["metadata"]["labels"][PROBE] == config)
            .count()
    }
}

/// The label a configuration's probe webhook selects.
const PROBE: &str = "webhook-probe";

fn is_probe(review: &Value) -> bool {
    review["request"]["object"]["metadata"]["labels"]
        .get(PROBE)
        .is_some()
}

/// A webhook of the configurations below: configmaps in the namespace, sideEffects None.
pub(super) fn webhook(name: &str, server: &WebhookServer, path: &str, extra: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": {"url": server.url(path), "caBundle": server.ca_bundle},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                   "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
        "objectSelector": {"matchExpressions": [{"key": PROBE, "operator": "DoesNotExist"}]},
    });
    if let (Some(hook), Some(extra)) = (hook.as_object_mut(), extra.as_object()) {
        hook.extend(extra.clone());
    }
    hook
}

const ADMISSION: &str = "/apis/admissionregistration.k8s.io/v1";

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn config_path(mutating: bool) -> String {
    let resource = if mutating {
        "mutatingwebhookconfigurations"
    } else {
        "validatingwebhookconfigurations"
    };
    format!("{ADMISSION}/{resource}")
}

/// Registers a configuration of `hooks` (and its probe webhook) and waits until the server
/// calls it.
pub(super) async fn register(
    t: &Target,
    server: &WebhookServer,
    name: &str,
    mutating: bool,
    hooks: Vec<Value>,
) {
    let kind = if mutating {
        "MutatingWebhookConfiguration"
    } else {
        "ValidatingWebhookConfiguration"
    };
    let mut all = vec![webhook(
        "probe.opconform.test",
        server,
        "/probe",
        json!({"objectSelector": {"matchLabels": {PROBE: name}}}),
    )];
    all.extend(hooks);
    let config = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "webhooks": all});
    let (code, text) = support::raw(
        &t.admin,
        "POST",
        &config_path(mutating),
        JSON,
        serde_json::to_vec(&config).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{}: creating {name}: {text}", t.name);
    wait_for_probe(t, server, name, true).await;
}

/// Deletes the configuration and waits until the server no longer calls it.
pub(super) async fn unregister(t: &Target, server: &WebhookServer, name: &str, mutating: bool) {
    let path = format!("{}/{name}", config_path(mutating));
    let (code, text) = support::raw(&t.admin, "DELETE", &path, JSON, Vec::new()).await;
    assert_eq!(code, 200, "{}: deleting {name}: {text}", t.name);
    wait_for_probe(t, server, name, false).await;
}

/// Sends dry-run probes until one reaches the webhook server (`called`) or one no longer does.
async fn wait_for_probe(t: &Target, server: &WebhookServer, config: &str, called: bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let probe = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "webhook-probe", "labels": {PROBE: config}}});
    loop {
        let before = server.probes_of(config);
        let (code, text) = support::raw(
            &t.admin,
            "POST",
            &format!("/api/v1/namespaces/{NS}/configmaps?dryRun=All"),
            JSON,
            serde_json::to_vec(&probe).unwrap(),
        )
        .await;
        assert!(code < 300, "{}: probing {config}: {code} {text}", t.name);
        if (server.probes_of(config) > before) == called {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: webhook configuration {config} {} within 30 s",
            t.name,
            if called { "called" } else { "no longer called" }
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn cm_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{name}")
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

/// Sends a request and records its status, Warning headers and body.
async fn send(t: &Target, method: &str, path: &str, body: Value) -> Value {
    let (code, response, text) = exchange(t, method, path, JSON, JSON, body).await;
    let warnings = warnings(&response);
    let parsed = serde_json::from_str(&text).unwrap_or(Value::String(text));
    // Each target has its own webhook server: its port is masked.
    let masked = serde_json::to_string(&json!({"warnings": warnings, "body": parsed})).unwrap();
    let masked = SERVER_PORT.replace_all(&masked, "127.0.0.1:<port>");
    t.record(Answer {
        asked: format!("{method} {path}"),
        code: i64::from(code),
        body: normalize(serde_json::from_str(&masked).unwrap()),
    });
    parsed
}

async fn create(t: &Target, object: Value) -> Value {
    send(
        t,
        "POST",
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        object,
    )
    .await
}

/// The reviews the server sent, recorded with what differs between any two clusters masked
/// (uids, times) and without the user's uid, which the real server's static admin token has
/// and the simulator's admin has not.
pub(super) fn record_reviews(t: &Target, server: &WebhookServer, what: &str) {
    let reviews: Vec<Value> = server
        .take()
        .into_iter()
        .map(|(path, mut review)| {
            if let Some(user) = review["request"]["userInfo"].as_object_mut() {
                user.remove("uid");
            }
            json!({"path": path, "review": review})
        })
        .collect();
    t.record(Answer {
        asked: format!("the AdmissionReviews of {what}"),
        code: 0,
        body: normalize(json!(reviews)),
    });
}

/// Deletes the ConfigMaps left (unrecorded; absent ones are fine).
async fn remove(t: &Target, names: &[&str]) {
    for name in names {
        let _ = support::raw(&t.admin, "DELETE", &cm_path(name), JSON, Vec::new()).await;
    }
}

pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "admission webhooks: a validating webhook refuses, warns and is sent the request",
            |t| {
                let server = WebhookServer::start().await;
                let config = "opconform-validating";
                register(
                    t,
                    &server,
                    config,
                    false,
                    vec![webhook(
                        "check.opconform.test",
                        &server,
                        "/check",
                        json!({}),
                    )],
                )
                .await;
                create(t, configmap("webhook-warn", json!({"app": "web"}))).await;
                create(t, configmap("webhook-deny", json!({}))).await;
                create(t, configmap("webhook-bare", json!({}))).await;
                let mut updated = configmap("webhook-warn", json!({"app": "web"}));
                updated["data"]["k"] = json!("changed");
                send(t, "PUT", &cm_path("webhook-warn"), updated).await;
                send(
                    t,
                    "POST",
                    &format!(
                        "/api/v1/namespaces/{NS}/configmaps?dryRun=All&fieldManager=probe-manager"
                    ),
                    configmap("webhook-dry", json!({})),
                )
                .await;
                send(t, "DELETE", &cm_path("webhook-warn"), Value::Null).await;
                create(t, configmap("webhook-collected", json!({"collect": "yes"}))).await;
                send(
                    t,
                    "DELETE",
                    &format!("/api/v1/namespaces/{NS}/configmaps?labelSelector=collect%3Dyes"),
                    Value::Null,
                )
                .await;
                record_reviews(t, &server, "the validating webhook");
                unregister(t, &server, config, false).await;
                remove(t, &["webhook-warn"]).await;
            }
        ),
        interaction!(
            "admission webhooks: match conditions skip a webhook, let it be called, fail by its failure policy and are validated at create",
            |t| {
                let server = WebhookServer::start().await;
                let config = "opconform-conditions";
                let conditional = |name: &str, case: &str, policy: &str, conditions: Value| {
                    let mut hook = webhook(
                        name,
                        &server,
                        "/check",
                        json!({"objectSelector": {"matchLabels": {"case": case}}}),
                    );
                    hook["failurePolicy"] = json!(policy);
                    hook["matchConditions"] = conditions;
                    hook
                };
                let selected = conditional(
                    "condition.opconform.test",
                    "condition",
                    "Fail",
                    json!([
                        {"name": "not-skipped", "expression": "!has(object.metadata.labels.skip)"},
                        {"name": "a-create-here", "expression":
                            "request.operation == 'CREATE' && request.namespace == 'differential' && !has(request.subResource) && oldObject == null"},
                    ]),
                );
                let missing = json!([{"name": "missing-key",
                    "expression": "object.data.missing == 'x'"}]);
                let failing = conditional(
                    "error-fail.opconform.test",
                    "error-fail",
                    "Fail",
                    missing.clone(),
                );
                let ignoring = conditional(
                    "error-ignore.opconform.test",
                    "error-ignore",
                    "Ignore",
                    missing,
                );
                register(t, &server, config, false, vec![selected, failing, ignoring]).await;
                create(
                    t,
                    configmap(
                        "webhook-deny-condition-skipped",
                        json!({"case": "condition", "skip": "yes"}),
                    ),
                )
                .await;
                create(
                    t,
                    configmap(
                        "webhook-deny-condition-called",
                        json!({"case": "condition"}),
                    ),
                )
                .await;
                create(
                    t,
                    configmap("webhook-deny-error-fail", json!({"case": "error-fail"})),
                )
                .await;
                create(
                    t,
                    configmap("webhook-deny-error-ignore", json!({"case": "error-ignore"})),
                )
                .await;
                record_reviews(t, &server, "the webhooks with match conditions");
                unregister(t, &server, config, false).await;
                remove(
                    t,
                    &[
                        "webhook-deny-condition-skipped",
                        "webhook-deny-error-ignore",
                    ],
                )
                .await;
                let invalid = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "opconform-invalid-conditions"},
                "webhooks": [conditional("invalid.opconform.test", "invalid", "Fail", json!([
                    {"name": "syntax", "expression": "object.metadata.name =="},
                    {"name": "undeclared", "expression": "objet.metadata.name == 'x'"},
                    {"name": "fine", "expression": "object.metadata.name == 'x'"},
                    {"name": "fine", "expression": "  "},
                    {"name": "", "expression": "true"},
                    {"name": "not a qualified name!", "expression": "true"},
                ]))]});
                send(t, "POST", &config_path(false), invalid).await;
                let _ = support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("{}/opconform-invalid-conditions", config_path(false)),
                    JSON,
                    Vec::new(),
                )
                .await;
            }
        ),
        interaction!(
            "admission webhooks: a custom resource is sent in the version the rule names",
            |t| {
                let crd_path = format!("{CRDS}/gadgets.webhooks.opconform.test");
                let version = |name: &str, storage: bool| {
                    json!({"name": name, "served": true, "storage": storage,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
                };
                let crd = json!({"apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": "gadgets.webhooks.opconform.test"},
                    "spec": {"group": "webhooks.opconform.test", "scope": "Namespaced",
                        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget",
                                  "listKind": "GadgetList"},
                        "versions": [version("v1", true), version("v2", false)]}});
                let (code, text) = support::raw(
                    &t.admin,
                    "POST",
                    CRDS,
                    JSON,
                    serde_json::to_vec(&crd).unwrap(),
                )
                .await;
                assert_eq!(code, 201, "{}: creating the CRD: {text}", t.name);
                let gadgets =
                    |v: &str| format!("/apis/webhooks.opconform.test/{v}/namespaces/{NS}/gadgets");
                for v in ["v1", "v2"] {
                    wait_until(
                        t,
                        &gadgets(v),
                        "the CRD's versions to be served",
                        |code, _| code == 200,
                    )
                    .await;
                }
                let server = WebhookServer::start().await;
                let config = "opconform-custom";
                // Created in v1, sent in v2 (matchPolicy Equivalent).
                let mut v2_only = webhook("gadgets.opconform.test", &server, "/check", json!({}));
                v2_only["rules"] = json!([{"apiGroups": ["webhooks.opconform.test"],
                    "apiVersions": ["v2"], "operations": ["CREATE"], "resources": ["gadgets"]}]);
                register(t, &server, config, false, vec![v2_only]).await;
                let gadget = |v: &str, name: &str| {
                    json!({"apiVersion": format!("webhooks.opconform.test/{v}"), "kind": "Gadget",
                        "metadata": {"name": name}, "spec": {"size": 1}})
                };
                send(t, "POST", &gadgets("v1"), gadget("v1", "gadget-warn")).await;
                send(t, "POST", &gadgets("v1"), gadget("v1", "gadget-deny")).await;
                record_reviews(t, &server, "the custom resource's webhook");
                unregister(t, &server, config, false).await;
                let _ = support::raw(&t.admin, "DELETE", &crd_path, JSON, Vec::new()).await;
                wait_until(t, &crd_path, "the CRD to be gone", |code, _| code == 404).await;
            }
        ),
        interaction!(
            "admission webhooks: failure policies with an unreachable and a slow webhook",
            |t| {
                let server = WebhookServer::start().await;
                let config = "opconform-failures";
                let case =
                    |value: &str| json!({"objectSelector": {"matchLabels": {"case": value}}});
                let unreachable = |name: &str, policy: &str, value: &str| {
                    let mut hook = webhook(name, &server, "/", case(value));
                    hook["clientConfig"]["url"] = json!("https://127.0.0.1:1/refused");
                    hook["failurePolicy"] = json!(policy);
                    hook
                };
                let ignore = unreachable("ignore.opconform.test", "Ignore", "ignore");
                let fail = unreachable("fail.opconform.test", "Fail", "fail");
                let mut slow = webhook("slow.opconform.test", &server, "/slow", case("slow"));
                slow["timeoutSeconds"] = json!(1);
                register(t, &server, config, false, vec![ignore, fail, slow]).await;
                create(t, configmap("webhook-ignore", json!({"case": "ignore"}))).await;
                create(t, configmap("webhook-fail", json!({"case": "fail"}))).await;
                create(t, configmap("webhook-slow", json!({"case": "slow"}))).await;
                record_reviews(t, &server, "the slow webhook");
                unregister(t, &server, config, false).await;
                remove(t, &["webhook-ignore", "webhook-fail", "webhook-slow"]).await;
            }
        ),
        interaction!(
            "admission webhooks: namespace and object selectors that exclude",
            |t| {
                let server = WebhookServer::start().await;
                let config = "opconform-selectors";
                let other_namespaces = webhook(
                    "namespaces.opconform.test",
                    &server,
                    "/check",
                    json!({"namespaceSelector": {"matchLabels": {"webhooks": "wanted"}}}),
                );
                let unskipped = webhook(
                    "objects.opconform.test",
                    &server,
                    "/check",
                    json!({"objectSelector": {"matchExpressions": [
                        {"key": "skip", "operator": "DoesNotExist"},
                        {"key": PROBE, "operator": "DoesNotExist"},
                    ]}}),
                );
                register(t, &server, config, false, vec![other_namespaces, unskipped]).await;
                create(t, configmap("webhook-deny-skipped", json!({"skip": "yes"}))).await;
                create(t, configmap("webhook-deny-checked", json!({}))).await;
                record_reviews(t, &server, "the selected webhooks");
                unregister(t, &server, config, false).await;
                remove(t, &["webhook-deny-skipped", "webhook-deny-checked"]).await;
            }
        ),
        interaction!(
            "admission webhooks: rules naming pods/status and deployments/scale",
            |t| {
                let server = WebhookServer::start().await;
                let config = "opconform-status";
                let mut status_only =
                    webhook("status.opconform.test", &server, "/check", json!({}));
                status_only["rules"] = json!([
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                     "resources": ["pods/status"]},
                    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                     "resources": ["deployments/scale"]}]);
                register(t, &server, config, false, vec![status_only]).await;
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "webhook-deny-status"},
                    // No scheduler writes its status meanwhile.
                    "spec": {"schedulerName": "opconform-nobody",
                             "containers": [{"name": "c", "image": "busybox"}]}});
                send(t, "POST", &format!("/api/v1/namespaces/{NS}/pods"), pod).await;
                let path = format!("/api/v1/namespaces/{NS}/pods/webhook-deny-status");
                let (code, response, text) = exchange(
                    t,
                    "PATCH",
                    &format!("{path}/status"),
                    MERGE,
                    JSON,
                    json!({"status": {"message": "from the test"}}),
                )
                .await;
                drop(response);
                t.record(Answer {
                    asked: "PATCH pods/status".into(),
                    code: i64::from(code),
                    body: normalize(serde_json::from_str(&text).unwrap_or(Value::String(text))),
                });
                // A Deployment of no replicas, refused its scale-up: no pod is ever made.
                let deployments = format!("/apis/apps/v1/namespaces/{NS}/deployments");
                let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "webhook-deny-scale"},
                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "scale"}},
                        "template": {"metadata": {"labels": {"app": "scale"}},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
                let (code, text) = support::raw(
                    &t.admin,
                    "POST",
                    &deployments,
                    JSON,
                    serde_json::to_vec(&deployment).unwrap(),
                )
                .await;
                assert_eq!(code, 201, "{}: creating the Deployment: {text}", t.name);
                // The scale-up waits for the Deployment controller's last status write: a
                // write between the server's read and its update would make it retry the
                // update and call the webhook again.
                super::wait_until(
                    t,
                    &format!("{deployments}/webhook-deny-scale"),
                    "the Deployment's status settled",
                    |code, d| {
                        code == 200
                            && d["status"]["observedGeneration"] == 1
                            && d["status"]["conditions"].as_array().is_some_and(|c| {
                                c.iter().any(|c| {
                                    c["type"] == "Progressing"
                                        && c["reason"] == "NewReplicaSetAvailable"
                                })
                            })
                    },
                )
                .await;
                let (code, response, text) = exchange(
                    t,
                    "PATCH",
                    &format!("{deployments}/webhook-deny-scale/scale"),
                    MERGE,
                    JSON,
                    json!({"spec": {"replicas": 2}}),
                )
                .await;
                drop(response);
                t.record(Answer {
                    asked: "PATCH deployments/scale".into(),
                    code: i64::from(code),
                    body: normalize(serde_json::from_str(&text).unwrap_or(Value::String(text))),
                });
                record_reviews(t, &server, "the status and scale webhook");
                let _ = support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("{deployments}/webhook-deny-scale"),
                    JSON,
                    Vec::new(),
                )
                .await;
                unregister(t, &server, config, false).await;
                let _ = support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("{path}?gracePeriodSeconds=0"),
                    JSON,
                    Vec::new(),
                )
                .await;
            }
        ),
        interaction!(
            "admission webhooks: mutating and validating webhooks on a pod's create and update",
            |t| {
                let server = WebhookServer::start().await;
                let config = "opconform-pods";
                let mut pods = webhook("pods.opconform.test", &server, "/label", json!({}));
                pods["rules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]);
                let mut seen = pods.clone();
                seen["name"] = json!("seen.opconform.test");
                seen["clientConfig"]["url"] = json!(server.url("/check"));
                register(t, &server, config, true, vec![pods]).await;
                register(t, &server, "opconform-pods-seen", false, vec![seen]).await;
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "webhook-mutated-pod", "labels": {"app": "web"}},
                    // No scheduler writes it meanwhile.
                    "spec": {"schedulerName": "opconform-nobody",
                             "containers": [{"name": "c", "image": "busybox"}]}});
                send(t, "POST", &format!("/api/v1/namespaces/{NS}/pods"), pod).await;
                let path = format!("/api/v1/namespaces/{NS}/pods/webhook-mutated-pod");
                let (code, response, text) = exchange(
                    t,
                    "PATCH",
                    &path,
                    MERGE,
                    JSON,
                    json!({"spec": {"activeDeadlineSeconds": 600}}),
                )
                .await;
                drop(response);
                t.record(Answer {
                    asked: "PATCH pod".into(),
                    code: i64::from(code),
                    body: normalize(serde_json::from_str(&text).unwrap_or(Value::String(text))),
                });
                record_reviews(t, &server, "the pods' mutating and validating webhooks");
                unregister(t, &server, "opconform-pods-seen", false).await;
                unregister(t, &server, config, true).await;
                let _ = support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("{path}?gracePeriodSeconds=0"),
                    JSON,
                    Vec::new(),
                )
                .await;
            }
        ),
        interaction!(
            "admission webhooks: a mutating webhook's patch is applied before validation",
            |t| {
                let server = WebhookServer::start().await;
                register(
                    t,
                    &server,
                    "opconform-mutating",
                    true,
                    vec![webhook(
                        "mutate.opconform.test",
                        &server,
                        "/mutate",
                        json!({}),
                    )],
                )
                .await;
                register(
                    t,
                    &server,
                    "opconform-after-mutation",
                    false,
                    vec![webhook("seen.opconform.test", &server, "/check", json!({}))],
                )
                .await;
                // Only the interaction's own requests are compared.
                server.take();
                create(t, configmap("webhook-mutated", json!({"app": "web"}))).await;
                let (code, response, text) = exchange(
                    t,
                    "PATCH",
                    &cm_path("webhook-mutated"),
                    MERGE,
                    JSON,
                    json!({"data": {"k": "patched"}}),
                )
                .await;
                drop(response);
                t.record(Answer {
                    asked: "PATCH webhook-mutated".into(),
                    code: i64::from(code),
                    body: normalize(serde_json::from_str(&text).unwrap_or(Value::String(text))),
                });
                record_reviews(t, &server, "the mutating and the validating webhook");
                unregister(t, &server, "opconform-after-mutation", false).await;
                unregister(t, &server, "opconform-mutating", true).await;
                remove(t, &["webhook-mutated"]).await;
            }
        ),
    ]
}
