//! The simulator judged by the real kube-apiserver: one list of API interactions, run
//! through kube-rs (raw requests) and kubectl against the simulated control plane and a
//! real one (etcd, kube-apiserver, kube-controller-manager, kube-scheduler at the pinned
//! version, from `ci/kubernetes/build.sh control-plane` or `KUBEBUILDER_ASSETS`), comparing
//! status codes, reasons, messages and the resulting objects.
//!
//! Answers are compared after volatile values are replaced by placeholders: uids,
//! resourceVersions, timestamps, tokens. Every disagreement is reported at once, with both
//! answers, so one run shows everything the simulator gets wrong.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use opconform::cluster::local::{Binaries, ControlPlane, ControlPlaneConfig};
use opconform::sim::{SimCluster, SimClusterConfig};
use serde_json::{Value, json};

mod support;

/// The namespace every interaction works in.
const NS: &str = "differential";

/// One answer: what was asked and what came back, normalized.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    asked: String,
    code: i64,
    body: Value,
}

/// A control plane under test, recording the answers of the current interaction.
struct Target {
    name: &'static str,
    url: String,
    ca_pem: String,
    admin: kube::Client,
    kubeconfig: PathBuf,
    answers: Mutex<Vec<Answer>>,
}

impl Target {
    async fn new(name: &'static str, kubeconfig_yaml: String, dir: &Path) -> Arc<Self> {
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, &kubeconfig_yaml).unwrap();
        let parsed: kube::config::Kubeconfig = serde_yaml::from_str(&kubeconfig_yaml).unwrap();
        let cluster = &parsed.clusters[0].cluster.as_ref().unwrap();
        let url = cluster.server.clone().unwrap();
        let ca_pem = {
            use base64::Engine as _;
            let data = cluster.certificate_authority_data.clone().unwrap();
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap(),
            )
            .unwrap()
        };
        Arc::new(Self {
            name,
            url,
            ca_pem,
            admin: client_for(&kubeconfig_yaml).await,
            kubeconfig,
            answers: Mutex::new(Vec::new()),
        })
    }

    fn record(&self, answer: Answer) -> Answer {
        self.answers.lock().unwrap().push(answer.clone());
        answer
    }

    fn take(&self) -> Vec<Answer> {
        std::mem::take(&mut *self.answers.lock().unwrap())
    }

    /// A raw request as the admin.
    async fn admin(&self, method: &str, path: &str, content_type: &str, body: Value) -> Answer {
        self.send(&self.admin, method, path, content_type, body)
            .await
    }

    async fn send(
        &self,
        client: &kube::Client,
        method: &str,
        path: &str,
        content_type: &str,
        body: Value,
    ) -> Answer {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(&body).unwrap()
        };
        let (code, text) = support::raw(client, method, path, content_type, bytes).await;
        let body = parse_body(text);
        self.record(Answer {
            asked: format!("{method} {path}"),
            code: i64::from(code),
            body: normalize(body),
        })
    }

    /// kubectl with this target's admin kubeconfig; `stdin` is fed to it.
    async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Answer {
        use tokio::io::AsyncWriteExt as _;
        let mut child = tokio::process::Command::new(
            opconform::cluster::local::binaries::kubectl()
                .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e))),
        )
        .arg("--kubeconfig")
        .arg(&self.kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl is on PATH (ci/kubernetes/build.sh builds it)");
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).await.unwrap();
        }
        drop(input);
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl answers within 60 s")
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let out = serde_json::from_str(&stdout).unwrap_or(Value::String(stdout));
        self.record(Answer {
            asked: format!("kubectl {}", args.join(" ")),
            code: i64::from(output.status.code().unwrap_or(-1)),
            body: normalize(json!({"stdout": out, "stderr": stderr})),
        })
    }

    /// A client authenticated with `token`.
    async fn client_with_token(&self, user: &str, token: &str) -> kube::Client {
        client_for(&opconform::sim::apiserver::kubeconfig(
            self.name,
            &self.url,
            &self.ca_pem,
            user,
            token,
        ))
        .await
    }
}

async fn client_for(kubeconfig: &str) -> kube::Client {
    let parsed: kube::config::Kubeconfig = serde_yaml::from_str(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Text that differs between any two clusters, and its placeholder.
static VOLATILE_TEXT: std::sync::LazyLock<Vec<(regex::Regex, &'static str)>> =
    std::sync::LazyLock::new(|| {
        [
            (
                r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                "<uid>",
            ),
            (
                r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
                "<time>",
            ),
            // The ServiceAccount admission plugin names the token volume with a random suffix.
            (r"kube-api-access-[a-z0-9]{5}", "kube-api-access-<random>"),
            // A precondition failure names the live resourceVersion.
            (r"in record \(\d+\)", "in record (<volatile>)"),
        ]
        .into_iter()
        .map(|(pattern, placeholder)| (regex::Regex::new(pattern).unwrap(), placeholder))
        .collect()
    });

fn mask(text: &str) -> String {
    VOLATILE_TEXT
        .iter()
        .fold(text.to_string(), |text, (pattern, placeholder)| {
            pattern.replace_all(&text, *placeholder).into_owned()
        })
}

/// Replaces what differs between any two clusters — uids, resourceVersions, timestamps,
/// tokens, certificates — with placeholders, everywhere in a JSON answer.
/// Managed fields entries in an order that does not depend on their times.
fn sorted_managed_fields(mut entries: Value) -> Value {
    if let Some(items) = entries.as_array_mut() {
        items.sort_by_key(|e| {
            ["operation", "manager", "apiVersion", "subresource"]
                .map(|k| e[k].as_str().unwrap_or_default().to_string())
        });
    }
    entries
}

fn normalize(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    // managedFields keys name list items by uid: k:{"uid":"…"}.
                    let k = mask(&k);
                    let v = match k.as_str() {
                        "resourceVersion" | "token" if v.is_string() => json!("<volatile>"),
                        // Entries are ordered by their time (in seconds), which is masked:
                        // two writes on either side of a second boundary swap places.
                        "managedFields" if v.is_array() => sorted_managed_fields(normalize(v)),
                        "time"
                        | "creationTimestamp"
                        | "deletionTimestamp"
                        | "renewTime"
                        | "acquireTime"
                        | "expirationTimestamp"
                            if v.is_string() =>
                        {
                            json!("<time>")
                        }
                        _ => normalize(v),
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
        // Each cluster has its own CA (kube-root-ca.crt).
        Value::String(s) if s.starts_with("-----BEGIN CERTIFICATE-----") => {
            json!("<certificate>")
        }
        Value::String(s) => Value::String(mask(&s)),
        other => other,
    }
}

type Act = for<'a> fn(&'a Target) -> BoxFuture<'a, ()>;

/// One interaction: a name and the requests it makes (the answers are recorded).
struct Interaction {
    what: &'static str,
    act: Act,
}

macro_rules! interaction {
    ($what:expr, |$t:ident| $body:block) => {
        Interaction {
            what: $what,
            act: |$t| Box::pin(async move $body),
        }
    };
}

#[path = "differential/admission_policies.rs"]
mod admission_policies;
#[path = "differential/builtins.rs"]
mod builtins;
#[path = "differential/component_status.rs"]
mod component_status;
#[path = "differential/conversion.rs"]
mod conversion;
#[path = "differential/daemonsets.rs"]
mod daemonsets;
#[path = "differential/disruption.rs"]
mod disruption;
#[path = "differential/endpointslices.rs"]
mod endpointslices;
#[path = "differential/events.rs"]
mod events;
#[path = "differential/eviction.rs"]
mod eviction;
#[path = "differential/field_order.rs"]
mod field_order;
#[path = "differential/jobs.rs"]
mod jobs;
#[path = "differential/quota.rs"]
mod quota;
#[path = "differential/resize.rs"]
mod resize;
#[path = "differential/services.rs"]
mod services;
#[path = "differential/statefulset.rs"]
mod statefulset;
#[path = "differential/tables.rs"]
mod tables;
#[path = "differential/validation_rules.rs"]
mod validation_rules;
#[path = "differential/volume_protection.rs"]
mod volume_protection;
#[path = "differential/volumes.rs"]
mod volumes;
#[path = "differential/webhooks.rs"]
mod webhooks;

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data})
}

fn lease(name: &str, holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
}

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

fn cm_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{name}")
}

fn lease_path(name: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}")
}

fn interactions() -> Vec<Interaction> {
    let mut all = core_interactions();
    all.extend(certificate_interactions());
    all.extend(ephemeral_container_interactions());
    all.extend(client_library_interactions());
    all.extend(builtins::interactions());
    all.extend(field_order::interactions());
    all.extend(component_status::interactions());
    all.extend(jobs::interactions());
    all.extend(webhooks::interactions());
    all.extend(admission_policies::interactions());
    all.extend(volume_protection::interactions());
    all.extend(volumes::interactions());
    all.extend(disruption::interactions());
    all.extend(services::interactions());
    all.extend(tables::interactions());
    all.extend(statefulset::interactions());
    all.extend(eviction::interactions());
    all.extend(endpointslices::interactions());
    all.extend(daemonsets::interactions());
    all.extend(conversion::interactions());
    all.extend(quota::interactions());
    all.extend(validation_rules::interactions());
    all.extend(events::interactions());
    all.extend(resize::interactions());
    all
}

/// CertificateSigningRequests: creation, approval, signing.
fn certificate_interactions() -> Vec<Interaction> {
    use opconform::sim::apiserver::certificates::{pem, x509};
    use std::sync::LazyLock;

    const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    /// A signer no controller runs: its requests are never signed, on either side.
    const CUSTOM: &str = "example.com/differential";
    const CLIENT: &str = "kubernetes.io/kube-apiserver-client";

    /// PEM requests made once, so that both clusters get the same bytes: the client's subject
    /// is one Go re-encodes (its order, its string types), the serving one has names.
    static REQUESTS: LazyLock<std::collections::BTreeMap<&'static str, String>> =
        LazyLock::new(|| {
            use rcgen::DnType;
            let make = |subject: &[(DnType, &str)], names: &[&str]| {
                let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
                let mut params = rcgen::CertificateParams::new(names).unwrap();
                params.distinguished_name = rcgen::DistinguishedName::new();
                for (kind, value) in subject {
                    params.distinguished_name.push(kind.clone(), *value);
                }
                let key = rcgen::KeyPair::generate().unwrap();
                params.serialize_request(&key).unwrap().pem().unwrap()
            };
            let plain = make(&[(DnType::CommonName, "plain")], &[]);
            // The same request with one bit of its signature flipped.
            let (block, _) = pem::decode(plain.as_bytes()).unwrap();
            let mut der = block.bytes;
            *der.last_mut().unwrap() ^= 1;
            [
                (
                    "client",
                    make(
                        &[
                            (DnType::CommonName, "alice"),
                            (DnType::OrganizationName, "team"),
                            (DnType::OrganizationalUnitName, "dev_ops"),
                            (DnType::CountryName, "DE"),
                            (DnType::LocalityName, "Berlin"),
                        ],
                        &[],
                    ),
                ),
                (
                    "serving",
                    make(
                        &[
                            (DnType::CommonName, "system:node:worker-1"),
                            (DnType::OrganizationName, "system:nodes"),
                        ],
                        &["worker-1.example", "127.0.10.1"],
                    ),
                ),
                (
                    "masters",
                    make(
                        &[
                            (DnType::CommonName, "eve"),
                            (DnType::OrganizationName, "system:masters"),
                        ],
                        &[],
                    ),
                ),
                ("plain", plain),
                ("bad signature", pem::encode("CERTIFICATE REQUEST", &der)),
                ("not der", pem::encode("CERTIFICATE REQUEST", b"hello")),
                ("not pem", "hello".to_string()),
            ]
            .into_iter()
            .collect()
        });

    fn b64(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn unb64(text: &str) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default()
    }

    fn path(name: &str) -> String {
        format!("{CSRS}/{name}")
    }

    fn csr(name: &str, request: &str, signer: &str, usages: &[&str]) -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": name},
               "spec": {"request": b64(REQUESTS[request].as_bytes()), "signerName": signer,
                        "usages": usages}})
    }

    fn condition(kind: &str, status: &str, reason: &str) -> Value {
        json!({"type": kind, "status": status, "reason": reason,
               "message": format!("{reason} by the differential test")})
    }

    /// Replaces `status.certificate` by what must agree between two clusters: each signs
    /// with its own CA, so the bytes differ; the subject, names, usages, extensions,
    /// validity length and that the cluster CA issued it must not.
    fn summarized(t: &Target, mut object: Value) -> Value {
        let summarize = |o: &mut Value| {
            if let Some(text) = o["status"]["certificate"].as_str() {
                let certificate = unb64(text);
                o["status"]["certificate"] = if certificate == t.ca_pem.as_bytes() {
                    json!("<the cluster CA certificate>")
                } else {
                    let request = unb64(o["spec"]["request"].as_str().unwrap_or_default());
                    x509::describe_issued(&certificate, &t.ca_pem, &request)
                };
            }
        };
        summarize(&mut object);
        let items = object.get_mut("items").and_then(Value::as_array_mut);
        for item in items.into_iter().flatten() {
            summarize(item);
        }
        object
    }

    /// Sends a request as `client` and records the answer with any certificate summarized.
    async fn send(
        t: &Target,
        client: &kube::Client,
        method: &str,
        path: &str,
        content_type: &str,
        body: Value,
    ) -> Value {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(&body).unwrap()
        };
        let (code, text) = support::raw(client, method, path, content_type, bytes).await;
        let answer = parse_body(text);
        t.record(Answer {
            asked: format!("{method} {path}"),
            code: i64::from(code),
            body: normalize(summarized(t, answer.clone())),
        });
        answer
    }

    async fn admin(t: &Target, method: &str, path: &str, body: Value) -> Value {
        let content_type = if method == "PATCH" { MERGE } else { JSON };
        send(t, &t.admin, method, path, content_type, body).await
    }

    /// The admin acting as `user` in `groups` (impersonation: both servers then see an
    /// identity without a uid or extra, which the requests record).
    async fn as_user(t: &Target, user: &str, groups: &[&str]) -> kube::Client {
        let text = std::fs::read_to_string(&t.kubeconfig).unwrap();
        let mut config: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let identity = &mut config["users"][0]["user"];
        identity["as"] = user.into();
        if !groups.is_empty() {
            identity["as-groups"] = groups.iter().map(|g| serde_yaml::Value::from(*g)).collect();
        }
        client_for(&serde_yaml::to_string(&config).unwrap()).await
    }

    /// Waits (unrecorded) until `user` may `verb` on `resource` named `name`, as the
    /// authorizer sees it: the real one learns of new bindings from a watch.
    async fn wait_allowed(t: &Target, user: &kube::Client, verb: &str, resource: &str, name: &str) {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"group": "certificates.k8s.io", "resource": resource,
                "subresource": subresource, "verb": verb, "name": name}}});
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (_, text) = support::raw(
                user,
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                JSON,
                serde_json::to_vec(&review).unwrap(),
            )
            .await;
            if support::json(&text)["status"]["allowed"] == json!(true) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: {verb} {resource} {name} allowed within 60 s: {text}",
                t.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn has_condition(body: &Value, kind: &str) -> bool {
        body["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == kind))
    }

    vec![
        interaction!("certificates: the group in discovery", |t| {
            t.admin("GET", "/apis/certificates.k8s.io", JSON, Value::Null)
                .await;
            t.admin("GET", "/apis/certificates.k8s.io/v1", JSON, Value::Null)
                .await;
            let apis = discovery(t, "/apis", AGGREGATED).await;
            let group: Vec<Value> = apis["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| g["metadata"]["name"] == "certificates.k8s.io")
                .cloned()
                .collect();
            t.record(Answer {
                asked: "GET /apis (aggregated): certificates.k8s.io".into(),
                code: 200,
                body: normalize(json!(group)),
            });
        }),
        interaction!(
            "certificates: requests made by a user record who asked",
            |t| {
                let alice = as_user(t, "alice", &["system:masters", "team"]).await;
                let client = csr(
                    "csr-client",
                    "client",
                    CLIENT,
                    &["digital signature", "key encipherment", "client auth"],
                );
                let mut client_body = client.clone();
                client_body["spec"]["expirationSeconds"] = json!(600);
                // Claims about the requester and a status are dropped.
                client_body["spec"]["username"] = json!("mallory");
                client_body["spec"]["groups"] = json!(["system:masters"]);
                client_body["status"] =
                    json!({"conditions": [condition("Approved", "True", "Preapproved")]});
                send(t, &alice, "POST", CSRS, JSON, client_body).await;
                send(t, &alice, "POST", CSRS, JSON, client).await;
                for (name, request, signer, usages) in [
                    ("csr-rules", "plain", CUSTOM, &["digital signature"][..]),
                    ("csr-custom", "plain", CUSTOM, &["client auth"][..]),
                    ("csr-failing", "plain", CLIENT, &["server auth"][..]),
                    ("csr-denied", "plain", CLIENT, &["client auth"][..]),
                    ("csr-rbac", "plain", CUSTOM, &["client auth"][..]),
                ] {
                    send(
                        t,
                        &alice,
                        "POST",
                        CSRS,
                        JSON,
                        csr(name, request, signer, usages),
                    )
                    .await;
                }
                t.kubectl(
                &["create", "-o", "json", "--as", "carol", "--as-group", "system:masters", "-f", "-"],
                Some(&format!(
                    "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: csr-serving\nspec:\n  request: {}\n  signerName: kubernetes.io/kubelet-serving\n  usages: [digital signature, key encipherment, server auth]\n",
                    b64(REQUESTS["serving"].as_bytes())
                )),
            )
            .await;
                admin(t, "GET", &path("csr-client"), Value::Null).await;
                t.kubectl(&["get", "csr", "csr-serving", "-o", "json"], None)
                    .await;
            }
        ),
        interaction!(
            "certificates: invalid requests and refused requesters",
            |t| {
                let alice = as_user(t, "alice", &["system:masters"]).await;
                let mut many = csr(
                    "csr-invalid",
                    "plain",
                    "example",
                    &["client auth", "bogus", "client auth"],
                );
                many["spec"]["expirationSeconds"] = json!(599);
                send(t, &alice, "POST", CSRS, JSON, many).await;
                send(t, &alice, "POST", CSRS, JSON, json!({"apiVersion": "certificates.k8s.io/v1",
                "kind": "CertificateSigningRequest", "metadata": {"name": "csr-empty"}, "spec": {}}))
            .await;
                for (name, request, signer) in [
                    ("csr-legacy", "plain", "kubernetes.io/legacy-unknown"),
                    ("csr-not-pem", "not pem", CUSTOM),
                    ("csr-not-der", "not der", CUSTOM),
                    ("csr-bad-signature", "bad signature", CUSTOM),
                    ("csr-bad-signer", "plain", "Example.com/a_b"),
                    ("csr-masters", "masters", CLIENT),
                    // Any name a path segment may be (no DNS subdomain needed).
                    ("Any_Name.csr", "plain", CUSTOM),
                ] {
                    send(
                        t,
                        &alice,
                        "POST",
                        CSRS,
                        JSON,
                        csr(name, request, signer, &["client auth"]),
                    )
                    .await;
                }
                admin(
                    t,
                    "PATCH",
                    &path("Any_Name.csr"),
                    json!({"metadata": {"labels": {"checked": "yes"}}}),
                )
                .await;
                let bob = as_user(t, "bob", &[]).await;
                send(
                    t,
                    &bob,
                    "POST",
                    CSRS,
                    JSON,
                    csr("csr-bob", "plain", CUSTOM, &["client auth"]),
                )
                .await;
            }
        ),
        interaction!("certificates: what each subresource may change", |t| {
            let rules = path("csr-rules");
            let live = raw_get(t, &rules).await;
            // The main resource keeps its spec and status.
            let mut changed = live.clone();
            changed["spec"]["signerName"] = json!("example.com/other");
            changed["spec"]["usages"] = json!(["server auth"]);
            changed["status"] = json!({"conditions": [condition("Approved", "True", "Sneaked")]});
            changed["metadata"]["labels"] = json!({"changed": "yes"});
            admin(t, "PUT", &rules, changed).await;
            let live = raw_get(t, &rules).await;
            // Status may not add approvals.
            let mut approve = live.clone();
            approve["status"]["conditions"] = json!([condition("Approved", "True", "ByStatus")]);
            admin(t, "PUT", &format!("{rules}/status"), approve).await;
            // Approval conditions must be well formed and exclusive.
            let mut both = live.clone();
            both["status"]["conditions"] = json!([
                condition("Approved", "True", "Both"),
                condition("Denied", "True", "Both")
            ]);
            admin(t, "PUT", &format!("{rules}/approval"), both).await;
            let mut odd = live.clone();
            odd["status"]["conditions"] = json!([condition("Approved", "False", "Odd"),
                {"type": "", "status": ""}, condition("Custom", "Maybe", "Odd"), condition("Custom", "True", "Again")]);
            admin(t, "PUT", &format!("{rules}/approval"), odd).await;
            // Denial by merge patch, then an attempt to take it back.
            admin(t, "PATCH", &format!("{rules}/approval"),
                json!({"status": {"conditions": [condition("Denied", "True", "Denied")], "certificate": b64(t.ca_pem.as_bytes())}}))
            .await;
            let live = raw_get(t, &rules).await;
            let mut undeny = live.clone();
            undeny["status"]["conditions"] = json!([]);
            admin(t, "PUT", &format!("{rules}/approval"), undeny).await;
            // Status takes a certificate once, and only certificates.
            for certificate in [
                b64(b"junk"),
                b64(REQUESTS["plain"].as_bytes()),
                b64(t.ca_pem.as_bytes()),
            ] {
                let mut with = live.clone();
                with["status"]["certificate"] = json!(certificate);
                admin(t, "PUT", &format!("{rules}/status"), with).await;
            }
            let live = raw_get(t, &rules).await;
            // The same certificate with other line endings is other content.
            let mut other = live.clone();
            other["status"]["certificate"] = json!(b64(pem::encode(
                "CERTIFICATE",
                &pem::decode(t.ca_pem.as_bytes()).unwrap().0.bytes
            )
            .replace('\n', "\r\n")
            .as_bytes()));
            admin(t, "PUT", &format!("{rules}/status"), other).await;
            // The main resource may not set it either.
            let mut main = live.clone();
            main["status"]["certificate"] = json!(b64(b"junk"));
            admin(t, "PUT", &rules, main).await;
            admin(t, "GET", &format!("{rules}/approval"), Value::Null).await;
            admin(t, "GET", &format!("{rules}/status"), Value::Null).await;
        }),
        interaction!(
            "certificates: approval, signing and refusal by the signers",
            |t| {
                let client = path("csr-client");
                let mut approve = raw_get(t, &client).await;
                approve["status"]["conditions"] =
                    json!([condition("Approved", "True", "Approved")]);
                admin(t, "PUT", &format!("{client}/approval"), approve).await;
                // `kubectl certificate approve` PUTs the whole object as protobuf;
                // `kubectl patch` sends JSON.
                t.kubectl(&["certificate", "approve", "csr-custom"], None)
                    .await;
                for name in ["csr-serving", "csr-failing"] {
                    let patch = json!({"status": {"conditions": [condition("Approved", "True", "KubectlPatch")]}});
                    t.kubectl(
                        &[
                            "patch",
                            "csr",
                            name,
                            "--subresource",
                            "approval",
                            "--type",
                            "merge",
                            "-o",
                            "json",
                            "-p",
                            &patch.to_string(),
                        ],
                        None,
                    )
                    .await;
                }
                admin(
                    t,
                    "PATCH",
                    &format!("{}/approval", path("csr-denied")),
                    json!({"status": {"conditions": [condition("Denied", "True", "Denied")]}}),
                )
                .await;
                for name in ["csr-client", "csr-serving"] {
                    wait_until(t, &path(name), "the certificate", |_, body| {
                        body["status"]["certificate"].is_string()
                    })
                    .await;
                }
                wait_until(
                    t,
                    &path("csr-failing"),
                    "the Failed condition",
                    |_, body| has_condition(body, "Failed"),
                )
                .await;
                for name in [
                    "csr-client",
                    "csr-serving",
                    "csr-failing",
                    "csr-custom",
                    "csr-denied",
                ] {
                    admin(t, "GET", &path(name), Value::Null).await;
                }
                // A certificate, once issued, stays.
                let mut live = raw_get(t, &client).await;
                live["status"]["certificate"] = json!(b64(t.ca_pem.as_bytes()));
                admin(t, "PUT", &format!("{client}/status"), live).await;
                // The Go type has no patch strategy for the conditions: a strategic merge
                // patch replaces them, so one naming another type drops the approval, which
                // is refused (merged by type, it would be accepted).
                let extra =
                    json!({"status": {"conditions": [condition("Reviewed", "True", "Reviewed")]}});
                send(
                    t,
                    &t.admin,
                    "PATCH",
                    &format!("{}/approval", path("csr-custom")),
                    STRATEGIC,
                    extra,
                )
                .await;
            }
        ),
        interaction!(
            "certificates: approving takes the approve verb on the signer",
            |t| {
                let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "csr-approver"},
                "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get"]},
                          {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]}]});
                raw_create(t, "/apis/rbac.authorization.k8s.io/v1/clusterroles", &role).await;
                raw_create(t, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "csr-approver"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "csr-approver"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}]})).await;
                let dave = as_user(t, "dave", &[]).await;
                wait_allowed(
                    t,
                    &dave,
                    "update",
                    "certificatesigningrequests/approval",
                    "csr-rbac",
                )
                .await;
                let rbac = path("csr-rbac");
                let mut approve = raw_get(t, &rbac).await;
                approve["status"]["conditions"] = json!([condition("Approved", "True", "ByDave")]);
                send(
                    t,
                    &dave,
                    "PUT",
                    &format!("{rbac}/approval"),
                    JSON,
                    approve.clone(),
                )
                .await;
                let mut role = raw_get(
                    t,
                    "/apis/rbac.authorization.k8s.io/v1/clusterroles/csr-approver",
                )
                .await;
                role["rules"].as_array_mut().unwrap().push(json!({"apiGroups": ["certificates.k8s.io"],
                "resources": ["signers"], "resourceNames": ["example.com/*"], "verbs": ["approve"]}));
                raw_send(
                    t,
                    "PUT",
                    "/apis/rbac.authorization.k8s.io/v1/clusterroles/csr-approver",
                    role,
                )
                .await;
                wait_allowed(t, &dave, "approve", "signers", "example.com/*").await;
                send(t, &dave, "PUT", &format!("{rbac}/approval"), JSON, approve).await;
            }
        ),
        interaction!("certificates: field selectors and deletion", |t| {
            list_names(
                t,
                &format!(
                    "{CSRS}?fieldSelector=spec.signerName%3D{}",
                    CUSTOM.replace('/', "%2F")
                ),
            )
            .await;
            list_names(
                t,
                &format!("{CSRS}?fieldSelector=metadata.name%3Dcsr-client"),
            )
            .await;
            admin(
                t,
                "GET",
                &format!("{CSRS}?fieldSelector=spec.username%3Dalice"),
                Value::Null,
            )
            .await;
            admin(
                t,
                "GET",
                &format!("{CSRS}?fieldSelector=metadata.namespace%3Ddefault"),
                Value::Null,
            )
            .await;
            let applied = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"name": "csr-custom", "labels": {"applied": "yes"}}});
            send(
                t,
                &t.admin,
                "PATCH",
                &format!("{}?fieldManager=differential", path("csr-custom")),
                APPLY,
                applied,
            )
            .await;
            // Once an apply owns a field, updates are tracked again, without what their
            // strategy resets.
            admin(t, "PATCH", &format!("{}/approval", path("csr-custom")), json!({"status": {"conditions": [
                condition("Approved", "True", "KubectlPatch"), condition("Reviewed", "True", "Reviewed")]}}))
            .await;
            let mut labelled = csr("csr-labelled", "plain", CUSTOM, &["client auth"]);
            labelled["metadata"]["labels"] = json!({"team": "a"});
            let alice = as_user(t, "alice", &["system:masters"]).await;
            send(t, &alice, "POST", CSRS, JSON, labelled).await;
            admin(t, "DELETE", &path("csr-custom"), Value::Null).await;
            admin(t, "GET", &path("csr-custom"), Value::Null).await;
        }),
    ]
}

/// Ephemeral containers: added through `pods/ephemeralcontainers`, run by the kubelet.
fn ephemeral_container_interactions() -> Vec<Interaction> {
    /// The node of these pods: one no kubelet runs (and no Node), so nothing runs them. The
    /// pod garbage collectors delete the pods of a missing node once it has been missing
    /// for a while (40 s; 2 s in the simulator's fast settings): each interaction makes its
    /// own pods and is done with them well before.
    const NODE: &str = "nowhere-node";

    fn pods() -> String {
        format!("/api/v1/namespaces/{NS}/pods")
    }

    fn pod_path(name: &str) -> String {
        format!("/api/v1/namespaces/{NS}/pods/{name}")
    }

    fn ephemeral(name: &str) -> String {
        format!("/api/v1/namespaces/{NS}/pods/{name}/ephemeralcontainers")
    }

    /// A pod with an init container, an app container and a volume, bound to [`NODE`].
    fn new_pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "debuggee"}},
            "spec": {"nodeName": NODE,
                "initContainers": [{"name": "setup", "image": "example/setup:1"}],
                "containers": [{"name": "main", "image": "example/app:1"}],
                "volumes": [{"name": "scratch", "emptyDir": {}}]}})
    }

    /// The ephemeral container `kubectl debug -it --image=busybox:1.36 --target=main`
    /// adds (with a name and a command of its own).
    fn debugger() -> Value {
        json!({"name": "debugger", "image": "busybox:1.36", "command": ["sh"],
            "resources": {}, "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent", "stdin": true, "tty": true,
            "targetContainerName": "main"})
    }

    /// Another one, with env and a volume mount, and the defaults left to the server.
    fn second() -> Value {
        json!({"name": "second", "image": "busybox", "command": ["sleep", "1"],
            "env": [{"name": "A", "value": "b"}],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]})
    }

    /// Creates pod `name` with the ephemeral containers [`debugger`] and [`second`]
    /// (unrecorded: the interaction compares what it does next).
    async fn debuggee(t: &Target, name: &str) {
        raw_create(t, &pods(), &new_pod(name)).await;
        let both = json!({"spec": {"ephemeralContainers": [debugger(), second()]}});
        raw_send(t, "PATCH", &ephemeral(name), both).await;
    }

    /// Deletes pods at once (unrecorded).
    async fn delete(t: &Target, names: &[&str]) {
        for name in names {
            let path = format!("{}?gracePeriodSeconds=0", pod_path(name));
            support::raw(&t.admin, "DELETE", &path, JSON, Vec::new()).await;
        }
    }

    /// A strategic merge patch adding `containers` to the ephemeral containers.
    fn adding(containers: Value) -> Value {
        json!({"spec": {"ephemeralContainers": containers}})
    }

    /// The namespace, made again should an interaction before have deleted it, with its
    /// default ServiceAccount (unrecorded: other interactions compare these).
    async fn namespace(t: &Target) {
        let path = format!("/api/v1/namespaces/{NS}");
        wait_until(
            t,
            &path,
            "the namespace to be active or gone",
            |code, ns| code == 404 || ns["status"]["phase"] == "Active",
        )
        .await;
        let (code, _) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
        if code == 404 {
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
            raw_create(t, "/api/v1/namespaces", &ns).await;
        }
        let account = format!("/api/v1/namespaces/{NS}/serviceaccounts/default");
        wait_until(t, &account, "the default account", |code, _| code == 200).await;
    }

    /// What `t.admin` records; with `cut`, messages end at their first line. That drops
    /// the diff of the whole pod spec that kube-apiserver appends to "pod updates may not
    /// change fields other than …": the simulator (`objects::validate`) leaves it out, for
    /// every forbidden pod update, not only of ephemeral containers.
    async fn send(
        t: &Target,
        method: &str,
        path: &str,
        content_type: &str,
        body: Value,
        cut: bool,
    ) {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(&body).unwrap()
        };
        let (code, text) = support::raw(&t.admin, method, path, content_type, bytes).await;
        let mut body = parse_body(text);
        let fix = |text: &mut Value| {
            let first = text
                .as_str()
                .filter(|_| cut)
                .and_then(|s| s.split_once('\n'));
            if let Some((first, _)) = first {
                *text = json!(first);
            }
        };
        fix(&mut body["message"]);
        if let Some(causes) = body["details"]["causes"].as_array_mut() {
            causes.iter_mut().for_each(|c| fix(&mut c["message"]));
        }
        t.record(Answer {
            asked: format!("{method} {path}"),
            code: i64::from(code),
            body: normalize(body),
        });
    }

    vec![
        interaction!(
            "ephemeral containers: added by strategic merge patch, PUT and JSON patch, read through the subresource",
            |t| {
                namespace(t).await;
                t.admin("POST", &pods(), JSON, new_pod("debuggee")).await;
                t.admin("GET", &ephemeral("debuggee"), JSON, Value::Null)
                    .await;
                // As `kubectl debug` sends it: a two-way strategic merge patch of the Pod.
                t.admin(
                    "PATCH",
                    &ephemeral("debuggee"),
                    STRATEGIC,
                    adding(json!([debugger()])),
                )
                .await;
                // A PUT of the whole Pod: only the ephemeral containers are taken from it.
                let mut pod = raw_get(t, &ephemeral("debuggee")).await;
                pod["spec"]["ephemeralContainers"]
                    .as_array_mut()
                    .unwrap()
                    .push(second());
                pod["metadata"]["labels"] = json!({"sneaky": "yes"});
                pod["metadata"]["annotations"] = json!({"sneaky": "yes"});
                pod["spec"]["activeDeadlineSeconds"] = json!(5);
                pod["status"]["phase"] = json!("Running");
                t.admin("PUT", &ephemeral("debuggee"), JSON, pod).await;
                let third = json!([{"op": "add", "path": "/spec/ephemeralContainers/-",
                    "value": {"name": "third", "image": "busybox:latest",
                        "targetContainerName": "setup", "workingDir": "/tmp"}}]);
                t.admin("PATCH", &ephemeral("debuggee"), JSON_PATCH, third)
                    .await;
                // Unconditional (no resourceVersion) and changing nothing.
                let mut pod = raw_get(t, &ephemeral("debuggee")).await;
                pod["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("resourceVersion");
                t.admin("PUT", &ephemeral("debuggee"), JSON, pod).await;
                t.admin("GET", &pod_path("debuggee"), JSON, Value::Null)
                    .await;
                delete(t, &["debuggee"]).await;
            }
        ),
        interaction!(
            "ephemeral containers: changes the subresource refuses",
            |t| {
                namespace(t).await;
                debuggee(t, "refusing").await;
                let path = ephemeral("refusing");
                let changed = json!([{"name": "debugger", "image": "busybox:1.37"}]);
                send(t, "PATCH", &path, STRATEGIC, adding(changed), false).await;
                let mut pod = raw_get(t, &path).await;
                pod["spec"]["ephemeralContainers"]
                    .as_array_mut()
                    .unwrap()
                    .remove(1);
                send(t, "PUT", &path, JSON, pod, false).await;
                let mut pod = raw_get(t, &path).await;
                let list = pod["spec"]["ephemeralContainers"].as_array_mut().unwrap();
                list.push(json!({"name": "dup", "image": "busybox"}));
                list.push(json!({"name": "dup", "image": "busybox"}));
                list.push(json!({"name": "main", "image": "busybox"}));
                list.push(json!({"name": "setup", "image": "busybox"}));
                send(t, "PUT", &path, JSON, pod, false).await;
                let forbidden = json!([{"name": "forbidden", "image": "busybox",
                    "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "1"}},
                    "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                    "restartPolicy": "Always",
                    "livenessProbe": {"exec": {"command": ["true"]}},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "startupProbe": {"exec": {"command": ["true"]}},
                    "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                    "volumeMounts": [{"name": "scratch", "mountPath": "/s", "subPath": "x"},
                        {"name": "scratch", "mountPath": "/t", "subPathExpr": "$(A)"}]}]);
                send(t, "PATCH", &path, STRATEGIC, adding(forbidden), false).await;
                let aimless = json!([{"name": "aimless", "image": "busybox",
                    "targetContainerName": "nope"},
                    {"name": "at-itself", "image": "busybox", "targetContainerName": "debugger"}]);
                send(t, "PATCH", &path, STRATEGIC, adding(aimless), false).await;
                let malformed = json!([{"name": "Bad_Name", "image": " busybox "},
                    {"name": "noimage"},
                    {"name": "policies", "image": "busybox",
                        "terminationMessagePolicy": "Sometimes", "imagePullPolicy": "Sometimes"}]);
                send(t, "PATCH", &path, STRATEGIC, adding(malformed), false).await;
                let mut stale = raw_get(t, &path).await;
                stale["metadata"]["resourceVersion"] = json!("1");
                send(t, "PUT", &path, JSON, stale, false).await;
                let fine = json!([{"name": "late", "image": "busybox"}]);
                send(
                    t,
                    "PATCH",
                    &ephemeral("missing"),
                    STRATEGIC,
                    adding(fine),
                    false,
                )
                .await;
                send(t, "POST", &path, JSON, new_pod("refusing"), false).await;
                send(t, "DELETE", &path, JSON, Value::Null, false).await;
                send(
                    t,
                    "PATCH",
                    &path,
                    MERGE,
                    json!({"metadata": {"labels": {"x": "y"}}}),
                    false,
                )
                .await;
                t.admin("GET", &path, JSON, Value::Null).await;
                delete(t, &["refusing"]).await;
            }
        ),
        interaction!(
            "ephemeral containers: the pod itself refuses them on create and on update",
            |t| {
                namespace(t).await;
                debuggee(t, "sealed").await;
                let mut pod = raw_get(t, &pod_path("sealed")).await;
                pod["spec"]["ephemeralContainers"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "sneaky", "image": "busybox"}));
                send(t, "PUT", &pod_path("sealed"), JSON, pod, true).await;
                let sneaky = json!([{"name": "sneaky", "image": "busybox"}]);
                send(
                    t,
                    "PATCH",
                    &pod_path("sealed"),
                    STRATEGIC,
                    adding(sneaky),
                    true,
                )
                .await;
                send(
                    t,
                    "PATCH",
                    &pod_path("sealed"),
                    MERGE,
                    json!({"spec": {"ephemeralContainers": null}}),
                    true,
                )
                .await;
                // Other changes of a pod with ephemeral containers go through. (By another
                // field manager: entries are sorted by the second of their last write first,
                // so the creator's entry, written again now, would move behind the
                // subresource's one unless both writes fall in the same second.)
                send(
                    t,
                    "PATCH",
                    &format!("{}?fieldManager=zz-labeler", pod_path("sealed")),
                    MERGE,
                    json!({"metadata": {"labels": {"patched": "yes"}}}),
                    true,
                )
                .await;
                let mut born = new_pod("born-debugged");
                born["spec"]["ephemeralContainers"] =
                    json!([{"name": "debugger", "image": "busybox"}]);
                send(t, "POST", &pods(), JSON, born, true).await;
                let mut born = new_pod("born-broken");
                born["spec"]["ephemeralContainers"] = json!([{"name": "main", "image": "busybox",
                    "ports": [{"containerPort": 80}], "targetContainerName": "nope"}]);
                send(t, "POST", &pods(), JSON, born, true).await;
                delete(t, &["sealed", "born-debugged", "born-broken"]).await;
            }
        ),
        interaction!(
            "ephemeral containers: kubectl debug adds one without attaching",
            |t| {
                namespace(t).await;
                let debug = |container: &'static str, pod: &'static str| {
                    [
                        "debug",
                        pod,
                        "-n",
                        NS,
                        "--image=busybox:1.36",
                        "--profile=general",
                        "-c",
                        container,
                        "--",
                        "true",
                    ]
                };
                // A pod of its own, created by a field manager that sorts before kubectl:
                // managedFields entries are sorted by the second of their last write, then
                // by manager, and the two writes may or may not fall in the same second.
                let path = format!("{}?fieldManager=aa-creator", pods());
                t.admin("POST", &path, JSON, new_pod("kubectl-debuggee"))
                    .await;
                t.kubectl(&debug("kdebug", "kubectl-debuggee"), None).await;
                // The same name again: kubectl's patch then changes the existing one.
                t.kubectl(&debug("kdebug", "kubectl-debuggee"), None).await;
                t.kubectl(&debug("kdebug2", "kubectl-debuggee"), None).await;
                t.kubectl(&debug("kdebug", "missing"), None).await;
                t.admin("GET", &ephemeral("kubectl-debuggee"), JSON, Value::Null)
                    .await;
                delete(t, &["kubectl-debuggee"]).await;
            }
        ),
    ]
}

fn core_interactions() -> Vec<Interaction> {
    vec![
        interaction!("create the namespace", |t| {
            t.admin(
                "POST",
                "/api/v1/namespaces",
                JSON,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
            )
            .await;
            // The controllers write the root CA ConfigMap and the default ServiceAccount
            // soon after; wait for both, so every later list and watch of the namespace
            // sees them written before anything of ours, on either side.
            let root_ca = format!("/api/v1/namespaces/{NS}/configmaps/kube-root-ca.crt");
            wait_until(t, &root_ca, "the root CA ConfigMap", |code, _| code == 200).await;
            let account = format!("/api/v1/namespaces/{NS}/serviceaccounts/default");
            wait_until(t, &account, "the default account", |code, _| code == 200).await;
        }),
        interaction!("create a ConfigMap, then the same again", |t| {
            let path = format!("/api/v1/namespaces/{NS}/configmaps");
            t.admin("POST", &path, JSON, configmap("a", json!({"k": "1"})))
                .await;
            t.admin("POST", &path, JSON, configmap("a", json!({"k": "1"})))
                .await;
        }),
        interaction!("get a missing object and one in a missing namespace", |t| {
            t.admin("GET", &cm_path("missing"), JSON, Value::Null).await;
            t.admin(
                "POST",
                "/api/v1/namespaces/nowhere/configmaps",
                JSON,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
            )
            .await;
        }),
        interaction!("update a ConfigMap twice from the same read", |t| {
            t.admin("GET", &cm_path("a"), JSON, Value::Null).await;
            let live = raw_get(t, &cm_path("a")).await;
            let mut first = live.clone();
            first["data"]["k"] = json!("2");
            t.admin("PUT", &cm_path("a"), JSON, first).await;
            let mut second = live;
            second["data"]["k"] = json!("3");
            t.admin("PUT", &cm_path("a"), JSON, second).await;
        }),
        interaction!("update a ConfigMap without a resourceVersion", |t| {
            t.admin(
                "PUT",
                &cm_path("a"),
                JSON,
                configmap("a", json!({"k": "4"})),
            )
            .await;
        }),
        interaction!(
            "create a Lease by PUT, then update it without a resourceVersion",
            |t| {
                t.admin("PUT", &lease_path("by-put"), JSON, lease("by-put", "a"))
                    .await;
                t.admin("PUT", &lease_path("by-put"), JSON, lease("by-put", "b"))
                    .await;
            }
        ),
        interaction!(
            "update a Lease from a fresh read, then from the stale one",
            |t| {
                let live = raw_get(t, &lease_path("by-put")).await;
                let mut next = live.clone();
                next["spec"]["holderIdentity"] = json!("c");
                next["spec"]["leaseTransitions"] = json!(1);
                t.admin("PUT", &lease_path("by-put"), JSON, next).await;
                let mut stale = live;
                stale["spec"]["holderIdentity"] = json!("d");
                t.admin("PUT", &lease_path("by-put"), JSON, stale).await;
            }
        ),
        interaction!(
            "a lock ConfigMap owned by another object: created once, refused after",
            |t| {
                let path = format!("/api/v1/namespaces/{NS}/configmaps");
                t.admin(
                    "POST",
                    &path,
                    JSON,
                    configmap("leader", json!({"pod": "stand-in"})),
                )
                .await;
                let owner = raw_get(t, &cm_path("leader")).await;
                let lock = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "lock", "namespace": NS,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "leader",
                        "uid": owner["metadata"]["uid"]}]}});
                t.admin("POST", &path, JSON, lock.clone()).await;
                t.admin("POST", &path, JSON, lock).await;
            }
        ),
        interaction!("merge, JSON and strategic merge patches", |t| {
            t.admin(
                "PATCH",
                &cm_path("a"),
                MERGE,
                json!({"data": {"m": "merge"}}),
            )
            .await;
            t.admin(
                "PATCH",
                &cm_path("a"),
                JSON_PATCH,
                json!([{"op": "add", "path": "/data/j", "value": "json"}]),
            )
            .await;
            t.admin(
                "PATCH",
                &cm_path("a"),
                JSON_PATCH,
                json!([{"op": "test", "path": "/data/j", "value": "other"}]),
            )
            .await;
            t.admin(
                "PATCH",
                &cm_path("a"),
                STRATEGIC,
                json!({"data": {"s": "strategic", "m": null}}),
            )
            .await;
            t.admin("PATCH", &cm_path("missing"), MERGE, json!({"data": {}}))
                .await;
        }),
        interaction!("server-side apply, a conflict, and forcing it", |t| {
            let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied", "namespace": NS}, "data": {"owner": "one"}});
            let path = |manager: &str, force: bool| {
                format!(
                    "{}?fieldManager={manager}{}",
                    cm_path("applied"),
                    if force { "&force=true" } else { "" }
                )
            };
            t.admin("PATCH", &path("one", false), APPLY, applied.clone())
                .await;
            let mut other = applied.clone();
            other["data"]["owner"] = json!("two");
            t.admin("PATCH", &path("two", false), APPLY, other.clone())
                .await;
            t.admin("PATCH", &path("two", true), APPLY, other).await;
        }),
        interaction!("invalid objects", |t| {
            let path = format!("/api/v1/namespaces/{NS}/configmaps");
            t.admin("POST", &path, JSON, configmap("Not_Valid", json!({})))
                .await;
            t.admin(
                "POST",
                &path,
                JSON,
                configmap("bad-key", json!({"a b": "x"})),
            )
            .await;
            let lease_path = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
            let mut bad = lease("bad", "x");
            bad["spec"]["leaseDurationSeconds"] = json!(0);
            t.admin("POST", &lease_path, JSON, bad).await;
        }),
        interaction!("delete with preconditions", |t| {
            let path = format!("/api/v1/namespaces/{NS}/configmaps");
            t.admin("POST", &path, JSON, configmap("doomed", json!({})))
                .await;
            t.admin(
                "DELETE",
                &cm_path("doomed"),
                JSON,
                json!({"kind": "DeleteOptions", "apiVersion": "v1",
                       "preconditions": {"uid": "00000000-0000-0000-0000-000000000002"}}),
            )
            .await;
            t.admin(
                "DELETE",
                &cm_path("doomed"),
                JSON,
                json!({"kind": "DeleteOptions", "apiVersion": "v1",
                       "preconditions": {"resourceVersion": "1"}}),
            )
            .await;
            t.admin("DELETE", &cm_path("doomed"), JSON, Value::Null)
                .await;
            t.admin("DELETE", &cm_path("doomed"), JSON, Value::Null)
                .await;
        }),
        interaction!("RBAC: a ServiceAccount without rights is refused", |t| {
            t.admin(
                "POST",
                &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
                JSON,
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "limited"}}),
            )
            .await;
            let token = raw_token(t, "limited").await;
            let user = format!("system:serviceaccount:{NS}:limited");
            let client = t.client_with_token(&user, &token).await;
            t.send(
                &client,
                "GET",
                &format!("/api/v1/namespaces/{NS}/configmaps"),
                JSON,
                Value::Null,
            )
            .await;
            t.send(&client, "GET", &cm_path("a"), JSON, Value::Null)
                .await;
            t.send(
                &client,
                "POST",
                &format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"),
                JSON,
                lease("sa-lease", "x"),
            )
            .await;
            t.send(&client, "GET", "/api/v1/nodes", JSON, Value::Null)
                .await;
        }),
        interaction!(
            "RBAC: an apply or a PUT that creates its object needs the create verb too",
            |t| {
                let rbac = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}");
                t.admin(
                    "POST",
                    &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
                    JSON,
                    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "patcher"}}),
                )
                .await;
                t.admin("POST", &format!("{rbac}/roles"), JSON, json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "patcher"},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]},
                              {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}]}))
                .await;
                t.admin("POST", &format!("{rbac}/rolebindings"), JSON, json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "patcher"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "patcher"},
                    "subjects": [{"kind": "ServiceAccount", "name": "patcher", "namespace": NS}]}))
                .await;
                let token = raw_token(t, "patcher").await;
                let user = format!("system:serviceaccount:{NS}:patcher");
                let client = t.client_with_token(&user, &token).await;
                // Unrecorded: the real authorizer learns of the binding from a watch.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                while support::raw(&client, "GET", &cm_path("a"), JSON, Vec::new())
                    .await
                    .0
                    == 403
                {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{}: the binding takes effect",
                        t.name
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let applied = |name: &str| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                           "data": {"by": "patcher"}})
                };
                let apply = |name: &str| format!("{}?fieldManager=patcher", cm_path(name));
                t.send(
                    &client,
                    "PATCH",
                    &apply("patcher-new"),
                    APPLY,
                    applied("patcher-new"),
                )
                .await;
                t.admin(
                    "POST",
                    &format!("/api/v1/namespaces/{NS}/configmaps"),
                    JSON,
                    configmap("patcher-old", json!({})),
                )
                .await;
                t.send(
                    &client,
                    "PATCH",
                    &apply("patcher-old"),
                    APPLY,
                    applied("patcher-old"),
                )
                .await;
                // Checked after the object is validated: an invalid one is refused as such.
                let mut invalid = applied("patcher-bad");
                invalid["data"] = json!({"a b": "x"});
                t.send(&client, "PATCH", &apply("patcher-bad"), APPLY, invalid)
                    .await;
                t.send(
                    &client,
                    "PUT",
                    &lease_path("patcher-lease"),
                    JSON,
                    lease("patcher-lease", "x"),
                )
                .await;
            }
        ),
        interaction!(
            "kubectl: create, get, a missing object, server-side apply",
            |t| {
                t.kubectl(
                    &[
                        "-n",
                        NS,
                        "create",
                        "configmap",
                        "by-kubectl",
                        "--from-literal=a=b",
                        "-o",
                        "json",
                    ],
                    None,
                )
                .await;
                t.kubectl(
                    &["-n", NS, "get", "configmap", "by-kubectl", "-o", "json"],
                    None,
                )
                .await;
                t.kubectl(&["-n", NS, "get", "configmap", "nope"], None)
                    .await;
                t.kubectl(
                &["apply", "--server-side", "-o", "json", "-f", "-"],
                Some(&format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: by-kubectl\n  namespace: {NS}\ndata:\n  a: changed\n"
                )),
            )
            .await;
                t.kubectl(&["-n", NS, "delete", "configmap", "by-kubectl"], None)
                    .await;
            }
        ),
        interaction!(
            "watch from a resourceVersion, and from the beginning",
            |t| {
                let path = format!("/api/v1/namespaces/{NS}/configmaps");
                t.admin("POST", &path, JSON, configmap("w0", json!({"n": "0"})))
                    .await;
                let from = raw_get(t, &cm_path("w0")).await["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string();
                for name in ["w1", "w2"] {
                    t.admin("POST", &path, JSON, configmap(name, json!({"n": name})))
                        .await;
                }
                t.admin(
                "GET",
                &format!(
                    "{path}?watch=true&resourceVersion={from}&timeoutSeconds=1&fieldSelector=metadata.name%3Dw1"
                ),
                JSON,
                Value::Null,
            )
            .await;
                t.admin(
                    "GET",
                    &format!("{path}?watch=true&resourceVersion=1&timeoutSeconds=1"),
                    JSON,
                    Value::Null,
                )
                .await;
            }
        ),
        interaction!("field selectors: supported, and one that is not", |t| {
            let path = format!("/api/v1/namespaces/{NS}/configmaps");
            t.admin(
                "GET",
                &format!("{path}?fieldSelector=metadata.name%3Dw2"),
                JSON,
                Value::Null,
            )
            .await;
            t.admin(
                "GET",
                &format!("{path}?fieldSelector=data.n%3Dw2"),
                JSON,
                Value::Null,
            )
            .await;
            t.admin(
                "GET",
                "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse",
                JSON,
                Value::Null,
            )
            .await;
            t.admin(
                "GET",
                &format!("/api/v1/namespaces/{NS}/pods?fieldSelector=spec.nodeName%3Dnowhere,status.phase%3DRunning"),
                JSON,
                Value::Null,
            )
            .await;
        }),
        interaction!(
            "a CRD with a schema: valid, invalid and status updates of its objects",
            |t| {
                let crd = json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "required": ["size"], "properties": {
                                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                "mode": {"type": "string", "enum": ["fast", "slow"]}}},
                            "status": {"type": "object", "properties": {"nodes": {"type": "array", "items": {"type": "string"}}}}}}}}]}});
                t.admin(
                    "POST",
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    JSON,
                    crd,
                )
                .await;
                let widgets = format!("/apis/example.com/v1/namespaces/{NS}/widgets");
                wait_until(t, &widgets, "the CRD's resource to be served", |code, _| {
                    code == 200
                })
                .await;
                let widget = |name: &str, spec: Value| {
                    json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": name, "namespace": NS}, "spec": spec})
                };
                t.admin("POST", &widgets, JSON, widget("ok", json!({"size": 3})))
                    .await;
                t.admin("POST", &widgets, JSON, widget("big", json!({"size": 11})))
                    .await;
                t.admin(
                    "POST",
                    &widgets,
                    JSON,
                    widget("typed", json!({"size": "three"})),
                )
                .await;
                // One invalid field per object: kube-apiserver reports several in the order it
                // walks a Go map, which is not fixed.
                t.admin(
                    "POST",
                    &widgets,
                    JSON,
                    widget("moded", json!({"size": 2, "mode": "medium"})),
                )
                .await;
                t.admin("POST", &widgets, JSON, widget("empty", json!({})))
                    .await;
                t.admin(
                    "PATCH",
                    &format!("{widgets}/ok/status"),
                    MERGE,
                    json!({"status": {"nodes": ["a", "b"]}, "spec": {"size": 5}}),
                )
                .await;
                t.admin("GET", &format!("{widgets}/ok"), JSON, Value::Null)
                    .await;
            }
        ),
        interaction!(
            "garbage collection: foreground and orphan propagation",
            |t| {
                let path = format!("/api/v1/namespaces/{NS}/configmaps");
                for (owner, dependent) in
                    [("fg-owner", "fg-dependent"), ("or-owner", "or-dependent")]
                {
                    t.admin("POST", &path, JSON, configmap(owner, json!({})))
                        .await;
                    let uid = raw_get(t, &cm_path(owner)).await["metadata"]["uid"].clone();
                    let mut dep = configmap(dependent, json!({"of": owner}));
                    dep["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
                    "name": owner, "uid": uid, "blockOwnerDeletion": true}]);
                    t.admin("POST", &path, JSON, dep).await;
                }
                t.admin(
                "DELETE",
                &cm_path("fg-owner"),
                JSON,
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}),
            )
            .await;
                wait_until(
                    t,
                    &cm_path("fg-owner"),
                    "the foreground owner to be gone",
                    |code, _| code == 404,
                )
                .await;
                t.admin("GET", &cm_path("fg-dependent"), JSON, Value::Null)
                    .await;
                t.admin(
                "DELETE",
                &cm_path("or-owner"),
                JSON,
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}),
            )
            .await;
                wait_until(
                    t,
                    &cm_path("or-owner"),
                    "the orphaning owner to be gone",
                    |code, _| code == 404,
                )
                .await;
                t.admin("GET", &cm_path("or-dependent"), JSON, Value::Null)
                    .await;
            }
        ),
        interaction!(
            "pods: defaults, graceful deletion on a node, and at once when unscheduled",
            |t| {
                let path = format!("/api/v1/namespaces/{NS}/pods");
                let pod = |name: &str, node: Option<&str>| {
                    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"containers": [{"name": "main", "image": "example/app:1"}]}});
                    if let Some(node) = node {
                        p["spec"]["nodeName"] = json!(node);
                    }
                    p
                };
                t.admin("POST", &path, JSON, pod("bound", Some("ghost-node")))
                    .await;
                t.admin("POST", &path, JSON, pod("unbound", None)).await;
                t.admin("DELETE", &format!("{path}/bound"), JSON, Value::Null)
                    .await;
                t.admin(
                    "DELETE",
                    &format!("{path}/bound"),
                    JSON,
                    json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}),
                )
                .await;
                t.admin("GET", &format!("{path}/bound"), JSON, Value::Null)
                    .await;
            }
        ),
        interaction!("kubectl: auth can-i as a ServiceAccount", |t| {
            let user = format!("--as=system:serviceaccount:{NS}:limited");
            t.kubectl(
                &["auth", "can-i", "-n", NS, "create", "leases", &user],
                None,
            )
            .await;
            t.kubectl(&["auth", "can-i", "-n", NS, "create", "leases"], None)
                .await;
        }),
        interaction!(
            "the kubernetes Service in default, there from the start",
            |t| {
                let path = "/api/v1/namespaces/default/services/kubernetes";
                let mut service = raw_get(t, path).await;
                // It forwards to the port the server listens on.
                let target = &mut service["spec"]["ports"][0]["targetPort"];
                if target.as_u64() == Some(u64::from(server_port(t))) {
                    *target = json!("<server port>");
                }
                t.record(Answer {
                    asked: format!("GET {path}"),
                    code: 200,
                    body: normalize(service),
                });
                list_names(
                t,
                "/api/v1/namespaces/default/services?fieldSelector=spec.clusterIP%3D10.0.0.1,spec.type%3DClusterIP",
            )
            .await;
            }
        ),
        interaction!("field selectors on each resource's own fields", |t| {
            let pods = format!("/api/v1/namespaces/{NS}/pods");
            for (name, node, host_network) in [("fs-a", "node-a", true), ("fs-b", "node-b", false)]
            {
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"nodeName": node, "hostNetwork": host_network, "restartPolicy": "Never",
                             "containers": [{"name": "main", "image": "example/app:1"}]}});
                raw_create(t, &pods, &pod).await;
            }
            for selector in [
                "spec.nodeName%3Dnode-a",
                "spec.host%3Dnode-b",
                "spec.hostNetwork%3Dtrue",
                "spec.hostNetwork!%3Dtrue",
                "spec.restartPolicy%3DNever,spec.schedulerName%3Ddefault-scheduler",
                "spec.serviceAccountName%3Ddefault",
                "status.phase%3DPending",
                "status.podIP%3D",
                "status.podIPs%3D",
                "status.nominatedNodeName!%3Dx",
                "spec.nodeName%3Dnode-a,metadata.name%3Dfs-b",
                "spec.containers%3Dx",
                "metadata.uid%3Dx",
            ] {
                list_names(t, &format!("{pods}?fieldSelector={selector}")).await;
            }
            // Gone at once (unrecorded): no kubelet confirms a graceful deletion on these
            // nodes, so deleting the namespace later would wait for kube-controller-manager's
            // pod garbage collector, which removes pods of missing nodes only after 40 s.
            let force =
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0});
            for name in ["fs-a", "fs-b"] {
                support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("{pods}/{name}"),
                    JSON,
                    serde_json::to_vec(&force).expect("JSON"),
                )
                .await;
            }
            let secrets = format!("/api/v1/namespaces/{NS}/secrets");
            t.admin(
                "POST",
                &secrets,
                JSON,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fs-tls"},
                       "type": "example.com/custom", "stringData": {"k": "v"}}),
            )
            .await;
            for selector in ["type%3Dexample.com/custom", "type!%3DOpaque", "data.k%3Dv"] {
                list_names(t, &format!("{secrets}?fieldSelector={selector}")).await;
            }
            let events = format!("/api/v1/namespaces/{NS}/events");
            let event = json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "fs-event", "namespace": NS},
                "involvedObject": {"kind": "Pod", "name": "fs-a", "namespace": NS, "apiVersion": "v1"},
                "reason": "Testing", "message": "m", "type": "Warning",
                "source": {"component": "tester"}});
            raw_create(t, &events, &event).await;
            for selector in [
                "involvedObject.kind%3DPod,involvedObject.name%3Dfs-a",
                "involvedObject.namespace%3Ddifferential,involvedObject.apiVersion%3Dv1,involvedObject.name%3Dfs-a",
                "involvedObject.uid%3D,involvedObject.fieldPath%3D,involvedObject.resourceVersion%3D",
                "reason%3DTesting,type%3DWarning",
                "source%3Dtester",
                "reportingComponent%3D",
                "message%3Dm",
            ] {
                list_names(t, &format!("{events}?fieldSelector={selector}")).await;
            }
            let events_v1 = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
            for selector in [
                "regarding.kind%3DPod,regarding.name%3Dfs-a",
                "reason%3DTesting,type%3DWarning,reportingController%3D",
                "source%3Dtester",
                "involvedObject.kind%3DPod",
            ] {
                list_names(t, &format!("{events_v1}?fieldSelector={selector}")).await;
            }
            for (path, selector) in [
                (
                    "/api/v1/namespaces",
                    "status.phase%3DActive,metadata.name%3Ddefault",
                ),
                ("/api/v1/namespaces", "metadata.namespace%3Ddefault"),
                ("/api/v1/nodes", "spec.unschedulable%3Dtrue"),
                ("/api/v1/nodes", "metadata.namespace%3Dx"),
                (
                    "/api/v1/services",
                    "spec.type%3DClusterIP,metadata.namespace%3Ddefault",
                ),
                ("/api/v1/services", "spec.ports%3Dx"),
                (
                    "/api/v1/serviceaccounts",
                    "metadata.namespace%3Ddifferential",
                ),
                ("/api/v1/serviceaccounts", "secrets%3Dx"),
                ("/apis/apps/v1/replicasets", "status.replicas%3D0"),
                ("/apis/apps/v1/deployments", "spec.paused%3Dfalse"),
                (
                    "/apis/coordination.k8s.io/v1/leases",
                    "spec.holderIdentity%3Dx",
                ),
                (
                    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                    "metadata.namespace%3D,metadata.name%3Dcluster-admin",
                ),
                (
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    "spec.group%3Dx",
                ),
            ] {
                list_names(t, &format!("{path}?fieldSelector={selector}")).await;
            }
        }),
        interaction!(
            "field selectors on a CRD's selectableFields, per version",
            |t| {
                let crd = json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "gadgets.example.org"},
                "spec": {"group": "example.org", "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget",
                              "shortNames": ["gd"], "categories": ["all", "things"]},
                    "versions": [
                        {"name": "v1", "served": true, "storage": true,
                         "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                         "selectableFields": [{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.size"}, {"jsonPath": ".spec.on"}],
                         "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "properties": {
                                "color": {"type": "string"}, "size": {"type": "integer"},
                                "on": {"type": "boolean"}, "replicas": {"type": "integer"}}},
                            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}},
                        {"name": "v1beta1", "served": true, "storage": false,
                         "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
                raw_create(t, CRDS, &crd).await;
                let gadgets = format!("/apis/example.org/v1/namespaces/{NS}/gadgets");
                wait_until(t, &gadgets, "the CRD's resource to be served", |code, _| {
                    code == 200
                })
                .await;
                for (name, spec) in [
                    ("red", json!({"color": "red", "size": 3, "on": true})),
                    ("blue", json!({"color": "blue", "size": 10})),
                ] {
                    let gadget = json!({"apiVersion": "example.org/v1", "kind": "Gadget",
                    "metadata": {"name": name, "namespace": NS}, "spec": spec});
                    raw_create(t, &gadgets, &gadget).await;
                }
                for selector in [
                    "spec.color%3Dred",
                    "spec.size%3D10",
                    "spec.on%3Dtrue",
                    "spec.on!%3Dtrue",
                    "spec.color%3Dred,metadata.name%3Dred",
                    "spec.replicas%3D1",
                ] {
                    list_names(t, &format!("{gadgets}?fieldSelector={selector}")).await;
                }
                list_names(
                t,
                &format!("/apis/example.org/v1beta1/namespaces/{NS}/gadgets?fieldSelector=spec.color%3Dred"),
            )
            .await;
            }
        ),
        interaction!(
            "aggregated discovery of /api and /apis, and the plain form",
            |t| {
                let core = discovery(t, "/api", AGGREGATED).await;
                let pick = |list: &Value, group: &str, version: &str, resources: &[&str]| {
                    let versions = list["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|g| g["metadata"]["name"].as_str().unwrap_or("") == group)
                        .flat_map(|g| g["versions"].as_array().cloned().unwrap_or_default());
                    let picked: Vec<Value> = versions
                        .filter(|v| v["version"] == version)
                        .flat_map(|v| v["resources"].as_array().cloned().unwrap_or_default())
                        .filter(|r| resources.contains(&r["resource"].as_str().unwrap_or("")))
                        .collect();
                    json!({group: {version: picked}})
                };
                t.record(Answer {
                asked: "GET /api (aggregated): the core group".into(),
                code: 200,
                body: json!({"kind": core["kind"], "apiVersion": core["apiVersion"],
                    "metadata": core["items"][0]["metadata"],
                    "version": core["items"][0]["versions"][0]["version"],
                    "freshness": core["items"][0]["versions"][0]["freshness"],
                    "resources": pick(&core, "", "v1", &["configmaps", "secrets", "serviceaccounts", "namespaces", "events", "pods", "services", "nodes"])}),
            });
                let apis = discovery(t, "/apis", AGGREGATED).await;
                let compared = [
                    "apps",
                    "events.k8s.io",
                    "authorization.k8s.io",
                    "rbac.authorization.k8s.io",
                    "apiextensions.k8s.io",
                    "coordination.k8s.io",
                    "apiregistration.k8s.io",
                    "example.com",
                    "example.org",
                ];
                let order: Vec<&Value> = apis["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|g| &g["metadata"]["name"])
                    .filter(|n| compared.contains(&n.as_str().unwrap_or("")))
                    .collect();
                let gadget_versions: Vec<&Value> = apis["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|g| g["metadata"]["name"] == "example.org")
                    .flat_map(|g| g["versions"].as_array().into_iter().flatten())
                    .map(|v| &v["version"])
                    .collect();
                t.record(Answer {
                asked: "GET /apis (aggregated): groups, their order and resources".into(),
                code: 200,
                body: json!({"kind": apis["kind"], "apiVersion": apis["apiVersion"],
                    "order": order, "example.org versions": gadget_versions,
                    "apps": pick(&apis, "apps", "v1", &["deployments", "replicasets"]),
                    "events": pick(&apis, "events.k8s.io", "v1", &["events"]),
                    "authorization": pick(&apis, "authorization.k8s.io", "v1",
                        &["localsubjectaccessreviews", "selfsubjectaccessreviews", "subjectaccessreviews"]),
                    "rbac": pick(&apis, "rbac.authorization.k8s.io", "v1",
                        &["roles", "rolebindings", "clusterroles", "clusterrolebindings"]),
                    "crds": pick(&apis, "apiextensions.k8s.io", "v1", &["customresourcedefinitions"]),
                    "leases": pick(&apis, "coordination.k8s.io", "v1", &["leases"]),
                    "apiservices": pick(&apis, "apiregistration.k8s.io", "v1", &["apiservices"]),
                    "widgets": pick(&apis, "example.com", "v1", &["widgets"]),
                    "gadgets": pick(&apis, "example.org", "v1", &["gadgets"])}),
            });
                let plain = discovery(t, "/apis", "application/json").await;
                t.record(Answer {
                    asked: "GET /apis (plain)".into(),
                    code: 200,
                    body: json!({"kind": plain["kind"], "apiVersion": plain["apiVersion"]}),
                });
                let plain = discovery(t, "/api", "application/json, */*").await;
                t.record(Answer {
                    asked: "GET /api (plain)".into(),
                    code: 200,
                    body: json!({"kind": plain["kind"], "versions": plain["versions"]}),
                });
            }
        ),
        interaction!(
            "APIServices: one per served group version, built-in and CRD",
            |t| {
                for name in [
                    "v1.",
                    "v1.apps",
                    "v1.apiregistration.k8s.io",
                    "v1.coordination.k8s.io",
                    "v1.example.org",
                    "v1beta1.example.org",
                ] {
                    let path = format!("/apis/apiregistration.k8s.io/v1/apiservices/{name}");
                    let (code, text) = support::raw(&t.admin, "GET", &path, JSON, Vec::new()).await;
                    let object = parse_body(text);
                    t.record(Answer {
                        asked: format!("GET {path}"),
                        code: i64::from(code),
                        body: normalize(
                            json!({"apiVersion": object["apiVersion"], "kind": object["kind"],
                        "name": object["metadata"]["name"], "labels": object["metadata"]["labels"],
                        "spec": object["spec"], "status": object["status"]}),
                        ),
                    });
                }
                let (code, text) = support::raw(
                    &t.admin,
                    "GET",
                    "/apis/apiregistration.k8s.io/v1/apiservices",
                    JSON,
                    Vec::new(),
                )
                .await;
                let list = parse_body(text);
                let names: Vec<&Value> = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| &a["metadata"]["name"])
                    .filter(|n| {
                        [
                            "v1.",
                            "v1.apps",
                            "v1.example.com",
                            "v1.example.org",
                            "v1beta1.example.org",
                        ]
                        .contains(&n.as_str().unwrap_or(""))
                    })
                    .collect();
                t.record(Answer {
                    asked: "GET apiservices: the names compared".into(),
                    code: i64::from(code),
                    body: json!({"kind": list["kind"], "names": names}),
                });
            }
        ),
        interaction!("pods naming a ServiceAccount that does not exist", |t| {
            let path = format!("/api/v1/namespaces/{NS}/pods");
            let pod = |metadata: Value, spec: Value| {
                let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                    "spec": {"containers": [{"name": "main", "image": "example/app:1"}]}});
                for (k, v) in spec.as_object().into_iter().flatten() {
                    p["spec"][k] = v.clone();
                }
                p
            };
            let ghost = json!({"serviceAccountName": "ghost"});
            for (metadata, spec) in [
                (json!({"name": "orphan"}), ghost.clone()),
                (json!({"generateName": "orphan-"}), ghost),
                // The deprecated field names the account when serviceAccountName is empty.
                (
                    json!({"name": "orphan"}),
                    json!({"serviceAccount": "ghost"}),
                ),
                // Admission runs before validation: the missing account is what is reported.
                (
                    json!({"name": "orphan"}),
                    json!({"serviceAccountName": "ghost", "containers": []}),
                ),
            ] {
                t.admin("POST", &path, JSON, pod(metadata, spec)).await;
            }
        }),
        interaction!(
            "a terminating pod deleted again with shorter and longer grace periods",
            |t| {
                let path = format!("/api/v1/namespaces/{NS}/pods");
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "slow", "namespace": NS},
                    "spec": {"nodeName": "ghost-node",
                        "containers": [{"name": "main", "image": "example/app:1"}]}});
                t.admin("POST", &path, JSON, pod).await;
                let slow = format!("{path}/slow");
                let grace = |s: i64| json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": s});
                let first = raw_delete(t, &slow, grace(30)).await;
                // No pause: the simulated pod garbage collector removes pods of missing
                // nodes after 2 s. A shortened deadline moves back by the difference, to
                // now at the earliest; how far it moves for 0 depends on the clock's second.
                let mut last = first.clone();
                for options in [grace(10), grace(20), Value::Null, grace(0)] {
                    let to_zero = options["gracePeriodSeconds"] == 0;
                    let next = raw_delete(t, &slow, options).await;
                    let (before, after) = (deletion_time(&last), deletion_time(&next));
                    let moved = before
                        .zip(after)
                        .filter(|_| !to_zero)
                        .map(|(b, a)| (a - b).num_seconds());
                    t.record(Answer {
                        asked: "the deletion metadata, against the previous answer's".into(),
                        code: 0,
                        body: json!({"deletionGracePeriodSeconds": next["metadata"]["deletionGracePeriodSeconds"],
                            "deletionTimestamp moved by seconds": moved,
                            "deletionTimestamp not after now": after.map(|a| a <= chrono::Utc::now())}),
                    });
                    last = next;
                }
                t.admin("GET", &slow, JSON, Value::Null).await;
            }
        ),
        interaction!(
            "the core group's resource list: pods, services and nodes",
            |t| {
                let (code, text) = support::raw(&t.admin, "GET", "/api/v1", JSON, Vec::new()).await;
                let list = parse_body(text);
                let picked: Vec<&Value> = list["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| {
                        let name = r["name"].as_str().unwrap_or_default();
                        ["pods", "services", "nodes"]
                            .contains(&name.split('/').next().unwrap_or_default())
                    })
                    .collect();
                t.record(Answer {
                    asked: "GET /api/v1: pods, services, nodes and their subresources".into(),
                    code: i64::from(code),
                    body: json!({"kind": list["kind"], "groupVersion": list["groupVersion"],
                    "resources": picked}),
                });
            }
        ),
        interaction!(
            "watching one object by field selector: initial events, changes, resourceVersions",
            |t| {
                let path = format!("/api/v1/namespaces/{NS}/configmaps");
                let created =
                    raw_send(t, "POST", &path, configmap("watched", json!({"n": "0"}))).await;
                let by_name = format!(
                    "{path}?watch=1&fieldSelector=metadata.name%3Dwatched&timeoutSeconds=1"
                );
                let mut rvs = vec![(created["metadata"]["resourceVersion"].clone(), "created")];
                for query in [
                    "",
                    "&resourceVersion=0",
                    "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
                ] {
                    let (code, text) = support::raw(
                        &t.admin,
                        "GET",
                        &format!("{by_name}{query}"),
                        JSON,
                        Vec::new(),
                    )
                    .await;
                    record_events(t, &format!("GET {by_name}{query}"), code, &text, &rvs);
                }
                // Watch from the create while the object changes, is deleted and made again;
                // another object changes beside it.
                let from = created["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                let watch = format!(
                    "{path}?watch=true&fieldSelector=metadata.name%3Dwatched&resourceVersion={from}&timeoutSeconds=2"
                );
                let writes = async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let mut rvs = Vec::new();
                    let patched =
                        raw_send(t, "PATCH", &cm_path("watched"), json!({"data": {"n": "1"}}))
                            .await;
                    rvs.push((patched["metadata"]["resourceVersion"].clone(), "patched"));
                    raw_send(t, "POST", &path, configmap("bystander", json!({}))).await;
                    let deleted = raw_send(t, "DELETE", &cm_path("watched"), Value::Null).await;
                    rvs.push((deleted["metadata"]["resourceVersion"].clone(), "deleted"));
                    let again =
                        raw_send(t, "POST", &path, configmap("watched", json!({"n": "2"}))).await;
                    rvs.push((
                        again["metadata"]["resourceVersion"].clone(),
                        "created again",
                    ));
                    rvs
                };
                let ((code, text), more) = tokio::join!(
                    support::raw(&t.admin, "GET", &watch, JSON, Vec::new()),
                    writes
                );
                rvs.extend(more);
                record_events(t, &format!("GET {watch}"), code, &text, &rvs);
            }
        ),
        interaction!("aggregated discovery's ETag and If-None-Match", |t| {
            let hash = regex::Regex::new("^\"[0-9A-F]{128}\"$").unwrap();
            for path in ["/api", "/apis"] {
                let (_, first) = conditional_discovery(t, path, None).await;
                let etag = first["etag"].as_str().unwrap_or_default().to_string();
                let (code, mut again) = conditional_discovery(t, path, Some(&etag)).await;
                let (other, _) = conditional_discovery(t, path, Some("\"other\"")).await;
                again["etag"] = json!(again["etag"] == first["etag"]);
                t.record(Answer {
                    asked: format!("GET {path} (aggregated), then with If-None-Match"),
                    code: i64::from(code),
                    body: json!({"etag is a quoted SHA-512 in hex": hash.is_match(&etag),
                        "with If-None-Match (etag: the same again)": again,
                        "code with another ETag": other,
                        "first": {"content-type": first["content-type"], "vary": first["vary"],
                            "cache-control": first["cache-control"], "body is empty": first["body is empty"]}}),
                });
            }
        }),
        interaction!("deleting the namespace", |t| {
            t.admin(
                "DELETE",
                &format!("/api/v1/namespaces/{NS}"),
                JSON,
                Value::Null,
            )
            .await;
            t.admin(
                "POST",
                &format!("/api/v1/namespaces/{NS}/configmaps"),
                JSON,
                configmap("late", json!({})),
            )
            .await;
            // The refusal names an object by its generateName: it has no name yet.
            t.admin(
                "POST",
                &format!("/api/v1/namespaces/{NS}/configmaps"),
                JSON,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "late-"}}),
            )
            .await;
            wait_until(
                t,
                &format!("/api/v1/namespaces/{NS}"),
                "the namespace to be gone",
                |code, _| code == 404,
            )
            .await;
            t.admin(
                "GET",
                &format!("/api/v1/namespaces/{NS}"),
                JSON,
                Value::Null,
            )
            .await;
        }),
        interaction!("a field selector a custom resource does not support", |t| {
            t.admin(
                "GET",
                "/apis/example.com/v1/widgets?fieldSelector=spec.size%3D3",
                JSON,
                Value::Null,
            )
            .await;
        }),
        interaction!(
            "pod eviction: at once, gracefully, with options, and refused",
            |t| {
                let namespace =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
                t.admin("POST", "/api/v1/namespaces", JSON, namespace).await;
                // kube-apiserver refuses pods until their ServiceAccount exists.
                let account = format!("/api/v1/namespaces/{NS}/serviceaccounts/default");
                wait_until(t, &account, "the default account", |code, _| code == 200).await;
                let path = format!("/api/v1/namespaces/{NS}/pods");
                for (name, node) in [
                    ("pending", None),
                    ("bound", Some("ghost-node")),
                    ("quick", Some("ghost-node")),
                ] {
                    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {"containers": [{"name": "main", "image": "example/app:1"}]}});
                    if let Some(node) = node {
                        p["spec"]["nodeName"] = json!(node);
                    }
                    t.admin("POST", &path, JSON, p).await;
                }
                let eviction = |name: &str, options: Option<Value>| {
                    let mut e = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": name, "namespace": NS}});
                    if let Some(options) = options {
                        e["deleteOptions"] = options;
                    }
                    e
                };
                let evict = |name: &str| format!("{path}/{name}/eviction");
                t.admin("POST", &evict("pending"), JSON, eviction("pending", None))
                    .await;
                t.admin("GET", &format!("{path}/pending"), JSON, Value::Null)
                    .await;
                t.admin("POST", &evict("bound"), JSON, eviction("bound", None))
                    .await;
                t.admin("GET", &format!("{path}/bound"), JSON, Value::Null)
                    .await;
                t.admin(
                    "POST",
                    &evict("quick"),
                    JSON,
                    eviction(
                        "quick",
                        Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})),
                    ),
                )
                .await;
                t.admin("GET", &format!("{path}/quick"), JSON, Value::Null)
                    .await;
                t.admin("POST", &evict("missing"), JSON, eviction("missing", None))
                    .await;
                t.admin("POST", &evict("bound"), JSON, eviction("other", None))
                    .await;
                t.admin(
                    "POST",
                    &evict("bound"),
                    JSON,
                    eviction(
                        "bound",
                        Some(json!({"kind": "DeleteOptions", "apiVersion": "v1",
                            "preconditions": {"uid": "00000000-0000-0000-0000-000000000002"}})),
                    ),
                )
                .await;
            }
        ),
    ]
}

/// A JSON body, a watch stream (one JSON event per line) as an array of its events, else text.
/// The Accept header of kube-rs's `get_metadata` and client-go's metadata client.
const PARTIAL: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The Accept header of a metadata list (client-go asks for the list kind).
const PARTIAL_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// The `Warning` headers of a response, in order.
fn warnings(response: &http::Response<()>) -> Vec<String> {
    response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect()
}

/// A request as the admin with an Accept header: its status, its response (with an empty
/// body) and its body's text.
async fn exchange(
    t: &Target,
    method: &str,
    path: &str,
    content_type: &str,
    accept: &str,
    body: Value,
) -> (u16, http::Response<()>, String) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .header("accept", accept)
        .body(kube::client::Body::from(bytes))
        .unwrap();
    let response = t.admin.send(request).await.unwrap();
    let code = response.status().as_u16();
    let (parts, body) = response.into_parts();
    let bytes = http_body_util::BodyExt::collect(body)
        .await
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (code, http::Response::from_parts(parts, ()), text)
}

/// A request as the admin with an Accept header (recorded).
async fn with_accept(
    t: &Target,
    method: &str,
    path: &str,
    content_type: &str,
    accept: &str,
    body: Value,
) -> String {
    let (code, response, text) = exchange(t, method, path, content_type, accept, body).await;
    let content_type = header_of(&response, "content-type");
    t.record(Answer {
        asked: format!("{method} {path} with Accept: {accept}"),
        code: i64::from(code),
        body: normalize(json!({"content-type": content_type, "body": parse_body(text.clone())})),
    });
    text
}

const BATCH: &str = "/apis/batch/v1";

/// What a client library's own cluster tests touch beyond the operators' usual kinds:
/// Jobs and CronJobs, TokenReviews, ComponentStatuses, metadata-only answers and the order
/// of an answer's fields.
fn client_library_interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "Jobs and CronJobs of batch/v1: discovery, create, lists and status",
            |t| {
                t.admin("GET", BATCH, JSON, Value::Null).await;
                let job = json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "namespace": NS},
                "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}]}}}});
                t.admin("POST", &format!("{BATCH}/namespaces/{NS}/jobs"), JSON, job)
                    .await;
                let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "c", "namespace": NS},
                "spec": {"schedule": "*/5 * * * *", "suspend": true, "jobTemplate": {"spec": {
                    "template": {"spec": {"restartPolicy": "OnFailure",
                        "containers": [{"name": "c", "image": "busybox"}]}}}}}});
                t.admin(
                    "POST",
                    &format!("{BATCH}/namespaces/{NS}/cronjobs"),
                    JSON,
                    cron,
                )
                .await;
                list_names(t, &format!("{BATCH}/jobs")).await;
                list_names(t, &format!("{BATCH}/namespaces/{NS}/jobs")).await;
                list_names(t, &format!("{BATCH}/cronjobs")).await;
                list_names(t, &format!("{BATCH}/namespaces/{NS}/cronjobs")).await;
                let status = format!("{BATCH}/namespaces/{NS}/cronjobs/c/status");
                t.admin("GET", &status, JSON, Value::Null).await;
                t.admin(
                    "PATCH",
                    &status,
                    MERGE,
                    json!({"status": {"lastScheduleTime": "2026-01-01T00:00:00Z"}}),
                )
                .await;
                t.admin(
                    "GET",
                    &format!("{BATCH}/namespaces/{NS}/cronjobs/missing"),
                    JSON,
                    Value::Null,
                )
                .await;
                let background = json!({"propagationPolicy": "Background"});
                raw_delete(
                    t,
                    &format!("{BATCH}/namespaces/{NS}/cronjobs/c"),
                    background.clone(),
                )
                .await;
                let job = format!("{BATCH}/namespaces/{NS}/jobs/j");
                let options = serde_json::to_vec(&background).unwrap();
                let (code, text) = support::raw(&t.admin, "DELETE", &job, JSON, options).await;
                assert_eq!(code, 200, "{}: DELETE {job}: {text}", t.name);
                wait_until(t, &job, "the Job gone", |code, _| code == 404).await;
            }
        ),
        interaction!(
            "TokenReviews of a valid, an unknown and a malformed token",
            |t| {
                const REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
                let review = |token: &str| {
                    json!({"apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview", "spec": {"token": token}})
                };
                let token = raw_token(t, "default").await;
                t.admin("POST", REVIEWS, JSON, review(&token)).await;
                t.admin("POST", REVIEWS, JSON, review("not-a-token")).await;
                // A JWT the server did not sign, with the service-account issuer, long expired.
                let forged = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMuZGVmYXVsdC5zdmMuY2x1c3Rlci5sb2NhbCIsInN1YiI6InN5c3RlbTpzZXJ2aWNlYWNjb3VudDpkaWZmZXJlbnRpYWw6ZGVmYXVsdCIsImF1ZCI6WyJodHRwczovL2t1YmVybmV0ZXMuZGVmYXVsdC5zdmMuY2x1c3Rlci5sb2NhbCJdLCJleHAiOjE2MDAwMDAwMDAsImlhdCI6MTYwMDAwMDAwMCwibmJmIjoxNjAwMDAwMDAwfQ.c2lnbmF0dXJl";
                t.admin("POST", REVIEWS, JSON, review(forged)).await;
                t.admin(
                    "POST",
                    REVIEWS,
                    JSON,
                    json!({"apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview", "spec": {"token": token,
                "audiences": ["https://kubernetes.default.svc.cluster.local", "other"]}}),
                )
                .await;
            }
        ),
        interaction!("metadata-only answers to every verb", |t| {
            let path = format!("/api/v1/namespaces/{NS}/configmaps");
            with_accept(
                t,
                "POST",
                &path,
                JSON,
                PARTIAL,
                configmap("meta", json!({"k": "1"})),
            )
            .await;
            let one = format!("{path}/meta");
            with_accept(t, "GET", &one, JSON, PARTIAL, Value::Null).await;
            with_accept(
                t,
                "GET",
                &format!("{path}?fieldSelector=metadata.name%3Dmeta"),
                JSON,
                PARTIAL_LIST,
                Value::Null,
            )
            .await;
            with_accept(
                t,
                "PATCH",
                &one,
                MERGE,
                PARTIAL,
                json!({"metadata": {"labels": {"a": "b"}}}),
            )
            .await;
            let mut live = raw_get(t, &one).await;
            live["data"]["k"] = json!("2");
            with_accept(t, "PUT", &one, JSON, PARTIAL, live).await;
            with_accept(
                t,
                "GET",
                &format!("{path}/missing"),
                JSON,
                PARTIAL,
                Value::Null,
            )
            .await;
            with_accept(t, "DELETE", &one, JSON, PARTIAL, Value::Null).await;
        }),
    ]
}

fn parse_body(text: String) -> Value {
    if let Ok(v) = serde_json::from_str(&text) {
        return v;
    }
    let events: Result<Vec<Value>, _> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect();
    match events {
        Ok(events) if !events.is_empty() => Value::Array(events),
        _ => Value::String(text),
    }
}

/// Polls `probe` (unrecorded) every 50 ms until `done` holds for what it returns, for at
/// most 60 s, and returns that; else fails naming `what` and the last value seen.
async fn poll_until<T, F>(
    t: &Target,
    what: &str,
    mut probe: impl FnMut() -> F,
    done: impl Fn(&T) -> bool,
) -> T
where
    T: std::fmt::Debug,
    F: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let value = probe().await;
        if done(&value) {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: {what} within 60 s; last seen: {value:#?}",
            t.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `path` (unrecorded) until `done` holds for its status code and body, for at most
/// 60 s; the interaction then records what it wants to compare.
async fn wait_until(t: &Target, path: &str, what: &str, done: impl Fn(u16, &Value) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (code, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
        if done(code, &parse_body(text.clone())) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: {what} within 60 s; GET {path} last answered {code} {text}",
            t.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The object at `path`, unnormalized (for building the next request).
async fn raw_get(t: &Target, path: &str) -> Value {
    let (code, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
    assert_eq!(code, 200, "{}: GET {path}: {text}", t.name);
    support::json(&text)
}

/// A token for a ServiceAccount of [`NS`], by TokenRequest (the answer is recorded).
async fn raw_token(t: &Target, account: &str) -> String {
    let path = format!("/api/v1/namespaces/{NS}/serviceaccounts/{account}/token");
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let (code, text) = support::raw(
        &t.admin,
        "POST",
        &path,
        JSON,
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    let answer = support::json(&text);
    t.record(Answer {
        asked: format!("POST {path}"),
        code: i64::from(code),
        body: normalize(answer.clone()),
    });
    answer["status"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: no token in {text}", t.name))
        .to_string()
}

/// The port a target's API server listens on.
fn server_port(t: &Target) -> u16 {
    t.url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{}: no port in {}", t.name, t.url))
}

/// The header `name` of `response`, if it has one in text.
fn header_of<B>(response: &http::Response<B>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The Accept header of kubectl and client-go 1.34 for discovery.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// A discovery document fetched with `accept`; its status, Content-Type and Vary headers
/// are recorded, the document returned for the interaction to pick from.
async fn discovery(t: &Target, path: &str, accept: &str) -> Value {
    let request = http::Request::builder()
        .method("GET")
        .uri(path)
        .header("accept", accept)
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let response = t.admin.send(request).await.unwrap();
    let headers = {
        let header = |name: &str| header_of(&response, name);
        // Cache-Control is compared for the aggregated form only: the simulator leaves out
        // the `no-cache, private` kube-apiserver puts on every other answer.
        let aggregated = header("content-type").is_some_and(|c| c.contains("apidiscovery"));
        json!({"content-type": header("content-type"), "vary": header("vary"),
            "cache-control": header("cache-control").filter(|_| aggregated),
            "etag": header("etag").is_some()})
    };
    let code = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    t.record(Answer {
        asked: format!("GET {path} with Accept: {accept}"),
        code: i64::from(code),
        body: headers,
    });
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// Sends `body` as the admin (unrecorded) and returns the answer's JSON, unnormalized.
async fn raw_send(t: &Target, method: &str, path: &str, body: Value) -> Value {
    let content_type = if method == "PATCH" { MERGE } else { JSON };
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let (code, text) = support::raw(&t.admin, method, path, content_type, bytes).await;
    assert!(
        (200..300).contains(&code),
        "{}: {method} {path}: {text}",
        t.name
    );
    support::json(&text)
}

/// Deletes with `options` (recorded) and returns the answer, unnormalized.
async fn raw_delete(t: &Target, path: &str, options: Value) -> Value {
    let bytes = if options.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&options).unwrap()
    };
    let (code, text) = support::raw(&t.admin, "DELETE", path, JSON, bytes).await;
    let body = parse_body(text);
    t.record(Answer {
        asked: format!("DELETE {path} with {options}"),
        code: i64::from(code),
        body: normalize(body.clone()),
    });
    body
}

/// An object's `metadata.deletionTimestamp`, if it has one.
fn deletion_time(object: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = object["metadata"]["deletionTimestamp"].as_str()?;
    let time = chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    Some(time.with_timezone(&chrono::Utc))
}

/// Records a watch's events, each as its type, the object's name and data (or a
/// bookmark's annotations) and which write's resourceVersion it carries: `rvs` names
/// them; any other is `other`.
fn record_events(t: &Target, asked: &str, code: u16, text: &str, rvs: &[(Value, &str)]) {
    let events = match parse_body(text.to_string()) {
        Value::Array(events) => events,
        Value::Object(event) => vec![Value::Object(event)],
        other => vec![other],
    };
    let summary: Vec<Value> = events
        .iter()
        .map(|e| {
            let metadata = &e["object"]["metadata"];
            let rv = if e["type"] == "BOOKMARK" {
                bookmark_written_at(&metadata["resourceVersion"], rvs)
            } else {
                rvs.iter()
                    .find(|(rv, _)| *rv == metadata["resourceVersion"])
                    .map_or("other", |(_, name)| name)
                    .to_string()
            };
            json!({"type": e["type"], "kind": e["object"]["kind"], "name": metadata["name"],
                "data": e["object"]["data"], "annotations": metadata["annotations"],
                "written at": rv})
        })
        .collect();
    t.record(Answer {
        asked: asked.to_string(),
        code: i64::from(code),
        body: normalize(json!(summary)),
    });
}

/// Where a BOOKMARK's resourceVersion stands among the scenario's writes `rvs`: a bookmark
/// carries the version its watch has reached, which any write of the cluster (kube-apiserver
/// renews its identity Lease every 10 s) may have moved past the last write of the watched
/// kind, so it is named by the last of `rvs` it is not older than.
fn bookmark_written_at(rv: &Value, rvs: &[(Value, &str)]) -> String {
    let number = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
    let Some(at) = number(rv) else {
        return "not a number".into();
    };
    rvs.iter()
        .filter(|(written, _)| number(written).is_some_and(|w| w <= at))
        .max_by_key(|(written, _)| number(written))
        .map_or("before every write".into(), |(_, name)| {
            format!("not older than {name}")
        })
}

/// `GET path` in the aggregated form, with `If-None-Match` when given: the status code and
/// the headers that matter to caching, and whether a body came.
async fn conditional_discovery(
    t: &Target,
    path: &str,
    if_none_match: Option<&str>,
) -> (u16, Value) {
    let mut request = http::Request::builder()
        .method("GET")
        .uri(path)
        .header("accept", AGGREGATED);
    if let Some(etag) = if_none_match {
        request = request.header("if-none-match", etag);
    }
    let request = request.body(kube::client::Body::from(Vec::new())).unwrap();
    let response = t.admin.send(request).await.unwrap();
    let headers = ["etag", "content-type", "vary", "cache-control"]
        .into_iter()
        .map(|name| (name.to_string(), json!(header_of(&response, name))))
        .collect::<serde_json::Map<_, _>>();
    let headers = Value::Object(headers);
    let code = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let mut answer = headers;
    answer["body is empty"] = json!(bytes.is_empty());
    (code, answer)
}

/// Where CustomResourceDefinitions are created.
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// Creates an object (unrecorded: the interaction compares what it reads next).
async fn raw_create(t: &Target, path: &str, object: &Value) {
    let body = serde_json::to_vec(object).unwrap();
    let (code, text) = support::raw(&t.admin, "POST", path, JSON, body).await;
    assert_eq!(code, 201, "{}: POST {path}: {text}", t.name);
}

/// Lists `path` and records the names of the items (lists of built-in types differ in
/// their items' apiVersion and kind, compared elsewhere), or the error.
async fn list_names(t: &Target, path: &str) {
    let (code, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
    let body = parse_body(text);
    let body = match body["items"].as_array() {
        Some(items) if code == 200 => {
            json!({"names": items.iter().map(|i| i["metadata"]["name"].clone()).collect::<Vec<_>>()})
        }
        _ => body,
    };
    t.record(Answer {
        asked: format!("GET {path}"),
        code: i64::from(code),
        body: normalize(body),
    });
}

/// The places where two JSON values differ: (path, sim, real), a key that is absent on one
/// side compared as `null`.
fn json_diff(path: &str, sim: &Value, real: &Value, out: &mut Vec<(String, String, String)>) {
    match (sim, real) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let (x, y) = (
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                );
                json_diff(&format!("{path}.{key}"), x, y, out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                json_diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (x, y) if x != y => out.push((path.to_string(), x.to_string(), y.to_string())),
        _ => {}
    }
}

/// One place where the simulator answered otherwise than kube-apiserver.
#[derive(Debug)]
struct Difference {
    interaction: &'static str,
    asked: String,
    path: String,
    sim: String,
    real: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  {} / {}\n    {}\n      sim:  {}\n      real: {}",
            self.interaction, self.asked, self.path, self.sim, self.real
        )
    }
}

/// Every difference between two transcripts of one interaction.
fn differences(interaction: &'static str, sim: &[Answer], real: &[Answer]) -> Vec<Difference> {
    let mut found = Vec::new();
    if sim.len() != real.len() {
        found.push(Difference {
            interaction,
            asked: "the number of requests".into(),
            path: "".into(),
            sim: sim.len().to_string(),
            real: real.len().to_string(),
        });
    }
    for (s, r) in sim.iter().zip(real) {
        let mut paths = Vec::new();
        if s.code != r.code {
            paths.push(("code".to_string(), s.code.to_string(), r.code.to_string()));
        }
        json_diff("", &s.body, &r.body, &mut paths);
        found.extend(paths.into_iter().map(|(path, sim, real)| Difference {
            interaction,
            asked: r.asked.clone(),
            path,
            sim,
            real,
        }));
    }
    found
}

/// Disagreements found and not fixed yet, as (interaction, path prefix). The test fails on
/// any disagreement not listed here, and on an entry that no longer disagrees: fixing the
/// simulator means deleting its line.
const KNOWN: &[(&str, &str)] = &[];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_every_interaction_as_the_real_kube_apiserver_does() {
    let binaries = Binaries::find().unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let dir = tempfile::tempdir().unwrap();
    let (real, sim) = tokio::join!(
        ControlPlane::start(ControlPlaneConfig::new(binaries)),
        SimCluster::start(SimClusterConfig {
            nodes: 0,
            // The real control plane has no default StorageClass (nor a provisioner).
            default_storage_class: false,
            ..SimClusterConfig::fast()
        })
    );
    let real = real.unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let sim = sim.unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let targets = [
        Target::new("sim", sim.server().admin_kubeconfig(), dir.path()).await,
        Target::new("real", real.admin_kubeconfig(), dir.path()).await,
    ];
    // `OPCONFORM_DIFFERENTIAL_ONLY=a|b` runs only the interactions whose name contains `a`
    // or `b` (and the first, which makes the namespace): quicker while fixing one thing.
    let only = std::env::var("OPCONFORM_DIFFERENTIAL_ONLY").ok();
    let all: Vec<Interaction> = interactions()
        .into_iter()
        .enumerate()
        .filter(|(i, x)| {
            *i == 0
                || only
                    .as_deref()
                    .is_none_or(|o| o.split('|').any(|w| x.what.contains(w)))
        })
        .map(|(_, x)| x)
        .collect();
    let mut found = Vec::new();
    let [sim_target, real_target] = &targets;
    for interaction in &all {
        // Both control planes go through the interaction at once: each keeps its own
        // transcript, and most of an interaction is waiting on controllers.
        tokio::join!(
            (interaction.act)(sim_target),
            (interaction.act)(real_target)
        );
        found.extend(differences(
            interaction.what,
            &sim_target.take(),
            &real_target.take(),
        ));
    }
    sim.shutdown().await;
    real.shutdown().await;
    let known = |d: &Difference| {
        KNOWN
            .iter()
            .any(|(what, path)| d.interaction == *what && d.path.starts_with(path))
    };
    let unexpected: Vec<String> = found
        .iter()
        .filter(|d| !known(d))
        .map(ToString::to_string)
        .collect();
    let fixed: Vec<String> = KNOWN
        .iter()
        .filter(|(what, _)| all.iter().any(|x| x.what == *what))
        .filter(|(what, path)| {
            !found
                .iter()
                .any(|d| d.interaction == *what && d.path.starts_with(path))
        })
        .map(|(what, path)| format!("  {what} / {path}"))
        .collect();
    println!(
        "{} interactions; {} differences, {} of them known",
        all.len(),
        found.len(),
        found.len() - unexpected.len()
    );
    assert!(
        unexpected.is_empty() && fixed.is_empty(),
        "the simulator disagrees with kube-apiserver in {} place(s):\n{}\n\
         known disagreements that no longer occur (remove them from KNOWN):\n{}",
        unexpected.len(),
        unexpected.join("\n"),
        fixed.join("\n")
    );
}
