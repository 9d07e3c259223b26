//! ValidatingAdmissionPolicies judged by kube-apiserver's evaluation of them: each interaction
//! creates a policy and its binding on the control plane, sends ConfigMaps it denies, warns
//! about or lets through, and compares what the client sees (codes, Status, `Warning`
//! headers); an invalid expression is compared as the refusal of the policy's create.
//!
//! Every policy selects only ConfigMaps labelled `policy-case: <policy>` and has a last
//! validation refusing a ConfigMap named `policy-probe`: the policy is in force once a dry-run
//! probe in the `default` namespace is refused (or, for a `Warn` binding, warned about).

use std::time::Duration;

use serde_json::{Value, json};

use super::{Answer, Interaction, JSON, NS, Target, exchange, normalize, support, warnings};

const ADMISSION: &str = "/apis/admissionregistration.k8s.io/v1";

/// The name of the probe ConfigMap every policy here refuses.
const PROBE: &str = "policy-probe";

/// A ConfigMap of the policy's case.
fn configmap(name: &str, policy: &str, k: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"policy-case": policy}}, "data": {"k": k}})
}

/// Creates the policy (its spec given the case's constraints and the probe's validation)
/// and its binding, and waits until the server evaluates them.
async fn install(t: &Target, name: &str, mut spec: Value, mut binding: Value) {
    spec["matchConstraints"] = json!({
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}],
        "objectSelector": {"matchLabels": {"policy-case": name}},
    });
    let mut validations = spec["validations"].as_array().cloned().unwrap_or_default();
    validations.push(
        json!({"expression": format!("object.metadata.name != '{PROBE}'"),
        "message": "probe"}),
    );
    spec["validations"] = json!(validations);
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec});
    let (code, text) = support::raw(
        &t.admin,
        "POST",
        &format!("{ADMISSION}/validatingadmissionpolicies"),
        JSON,
        serde_json::to_vec(&policy).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{}: creating policy {name}: {text}", t.name);
    binding["policyName"] = json!(name);
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name}, "spec": binding});
    let (code, text) = support::raw(
        &t.admin,
        "POST",
        &format!("{ADMISSION}/validatingadmissionpolicybindings"),
        JSON,
        serde_json::to_vec(&binding).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{}: creating binding {name}: {text}", t.name);
    let marker = format!("ValidatingAdmissionPolicy '{name}'");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (code, response, text) = exchange(
            t,
            "POST",
            "/api/v1/namespaces/default/configmaps?dryRun=All",
            JSON,
            JSON,
            configmap(PROBE, name, "probe"),
        )
        .await;
        let warned = warnings(&response).iter().any(|w| w.contains(&marker));
        if warned || (code >= 400 && text.contains(&marker)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: policy {name} in force within 30 s; the probe was answered {code} {text}",
            t.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Deletes the binding and the policy.
async fn uninstall(t: &Target, name: &str) {
    for resource in [
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicies",
    ] {
        let path = format!("{ADMISSION}/{resource}/{name}");
        let (code, text) = support::raw(&t.admin, "DELETE", &path, JSON, Vec::new()).await;
        assert_eq!(code, 200, "{}: deleting {path}: {text}", t.name);
    }
}

/// Sends a request and records its status, Warning headers and body.
async fn send(t: &Target, method: &str, path: &str, body: Value) {
    let (code, response, text) = exchange(t, method, path, JSON, JSON, body).await;
    let warnings = warnings(&response);
    let parsed = serde_json::from_str(&text).unwrap_or(Value::String(text));
    t.record(Answer {
        asked: format!("{method} {path}"),
        code: i64::from(code),
        body: normalize(json!({"warnings": warnings, "body": parsed})),
    });
}

async fn create(t: &Target, object: Value) {
    send(
        t,
        "POST",
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        object,
    )
    .await;
}

/// Deletes the ConfigMaps (unrecorded; absent ones are fine).
async fn remove(t: &Target, names: &[&str]) {
    for name in names {
        let path = format!("/api/v1/namespaces/{NS}/configmaps/{name}");
        let _ = support::raw(&t.admin, "DELETE", &path, JSON, Vec::new()).await;
    }
}

pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        interaction!(
            "admission policies: a policy denies with its message, its messageExpression and its reason",
            |t| {
                let name = "opconform-policy-deny";
                let spec = json!({
                    "failurePolicy": "Fail",
                    "matchConditions": [{"name": "creates", "expression": "request.operation == 'CREATE'"}],
                    "validations": [
                        {"expression": "object.data.k != 'message'", "message": "k may not be message"},
                        {"expression": "object.data.k != 'expression'",
                         "messageExpression": "'k is ' + object.data.k + ' in ' + request.namespace"},
                        {"expression": "object.data.k != 'reason'", "message": "not for you",
                         "reason": "Forbidden"},
                        {"expression": "object.data.k != 'bare'"},
                        {"expression": "object.data.k != 'multi'", "messageExpression": "'two\\nlines'",
                         "message": "the message, as the expression's has two lines"},
                    ],
                });
                install(t, name, spec, json!({"validationActions": ["Deny"]})).await;
                for k in ["message", "expression", "reason", "bare", "multi", "fine"] {
                    create(t, configmap(&format!("policy-deny-{k}"), name, k)).await;
                }
                // Updates are not matched by the condition.
                let mut updated = configmap("policy-deny-fine", name, "message");
                updated["metadata"]["namespace"] = json!(NS);
                send(
                    t,
                    "PUT",
                    &format!("/api/v1/namespaces/{NS}/configmaps/policy-deny-fine"),
                    updated,
                )
                .await;
                uninstall(t, name).await;
                remove(t, &["policy-deny-fine"]).await;
            }
        ),
        interaction!(
            "admission policies: a Warn binding warns and an Audit one lets the request through",
            |t| {
                let name = "opconform-policy-warn";
                let spec = json!({"validations": [
                    {"expression": "object.data.k != 'warned'", "message": "k is warned"}]});
                install(
                    t,
                    name,
                    spec,
                    json!({"validationActions": ["Warn", "Audit"]}),
                )
                .await;
                create(t, configmap("policy-warned", name, "warned")).await;
                uninstall(t, name).await;
                remove(t, &["policy-warned"]).await;
            }
        ),
        interaction!(
            "admission policies: a binding whose matchResources exclude the namespace",
            |t| {
                let name = "opconform-policy-excluded";
                let spec =
                    json!({"validations": [{"expression": "false", "message": "never here"}]});
                let binding = json!({"validationActions": ["Deny"], "matchResources": {
                    "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                        "operator": "NotIn", "values": [NS]}]}}});
                install(t, name, spec, binding).await;
                create(t, configmap("policy-excluded", name, "any")).await;
                uninstall(t, name).await;
                remove(t, &["policy-excluded"]).await;
            }
        ),
        interaction!("admission policies: a ConfigMap param and variables", |t| {
            let name = "opconform-policy-params";
            let params = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "policy-params"}, "data": {"banned": "red"}});
            let (code, text) = support::raw(
                &t.admin,
                "POST",
                &format!("/api/v1/namespaces/{NS}/configmaps"),
                JSON,
                serde_json::to_vec(&params).unwrap(),
            )
            .await;
            assert_eq!(code, 201, "{}: creating the params: {text}", t.name);
            let spec = json!({
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "variables": [{"name": "banned", "expression": "params.data.banned"},
                              {"name": "colour", "expression": "object.data.k.lowerAscii()"}],
                "validations": [{"expression": "variables.colour != variables.banned",
                    "messageExpression": "'k may not be ' + variables.banned + ' (' + params.kind + ')'"}],
            });
            let binding = json!({"validationActions": ["Deny"], "paramRef": {
                    "name": "policy-params", "namespace": NS, "parameterNotFoundAction": "Deny"}});
            install(t, name, spec, binding).await;
            create(t, configmap("policy-params-red", name, "RED")).await;
            create(t, configmap("policy-params-blue", name, "blue")).await;
            uninstall(t, name).await;
            remove(t, &["policy-params", "policy-params-blue"]).await;
        }),
        interaction!(
            "admission policies: an expression failing at runtime under failurePolicy Fail and Ignore",
            |t| {
                for (name, policy) in [
                    ("opconform-policy-fail", "Fail"),
                    ("opconform-policy-ignore", "Ignore"),
                ] {
                    let spec = json!({"failurePolicy": policy, "validations": [
                        {"expression": "object.data.missing == 'x'", "message": "never seen"}]});
                    install(t, name, spec, json!({"validationActions": ["Deny"]})).await;
                    create(
                        t,
                        configmap(&format!("policy-error-{policy}").to_lowercase(), name, "v"),
                    )
                    .await;
                    uninstall(t, name).await;
                }
                remove(t, &["policy-error-ignore"]).await;
            }
        ),
        interaction!(
            "admission policies: the string, list and regex functions of Kubernetes' CEL",
            |t| {
                let name = "opconform-policy-functions";
                let spec = json!({"validations": [
                    {"expression": "object.data.k != 'all'", "messageExpression": concat!(
                        "string([1, 2, 2].isSorted()) + ' ' + string([2, 1].isSorted())",
                        " + ' ' + string([1, 2, 3].sum()) + ' ' + string([4, 2, 9].min())",
                        " + ' ' + string([4, 2, 9].max())",
                        " + ' ' + 'abc 123 def 456'.find('[0-9]+')",
                        " + ' ' + 'a1 b2 c3'.findAll('[0-9]', 2).join(',')",
                        " + ' ' + 'TacoCat'.lowerAscii() + ' ' + 'a,b'.split(',').join('+')",
                        " + ' ' + string('hello'.indexOf('l')) + ' ' + 'hello'.substring(1, 3)",
                        " + ' ' + object.metadata.name.replace('-', '_')",
                        " + ' ' + string(object.metadata.name.matches('^policy-[a-z]+$'))")},
                    {"expression": "object.data.k != 'empty' || [0].filter(x, x > 0).max() == 1"},
                ]});
                install(t, name, spec, json!({"validationActions": ["Deny"]})).await;
                create(t, configmap("policy-functions", name, "all")).await;
                create(t, configmap("policy-empty", name, "empty")).await;
                uninstall(t, name).await;
            }
        ),
        interaction!(
            "admission policies: the authorizer checks the requester, a service account and a path",
            |t| {
                let name = "opconform-policy-authorizer";
                let spec = json!({"validations": [
                    {"expression": "object.data.k != 'authz' || !authorizer.serviceAccount('differential', 'nobody').group('').resource('secrets').namespace('differential').check('get').allowed()",
                     "message": "the nobody account may read secrets"},
                    {"expression": "object.data.k != 'authz' || authorizer.requestResource.check('create').allowed()",
                     "message": "the requester may not create what it creates"},
                    {"expression": "object.data.k != 'authz' || !authorizer.path('/healthz').check('get').allowed()",
                     "message": "the requester may get /healthz"},
                ]});
                install(t, name, spec, json!({"validationActions": ["Deny"]})).await;
                create(t, configmap("policy-authorizer", name, "authz")).await;
                create(t, configmap("policy-authorizer-other", name, "other")).await;
                uninstall(t, name).await;
                remove(t, &["policy-authorizer-other"]).await;
            }
        ),
        interaction!(
            "admission policies: an update checked against oldObject and namespaceObject",
            |t| {
                let name = "opconform-policy-update";
                let spec = json!({"validations": [{
                    "expression": "request.operation != 'UPDATE' || object.data.k == oldObject.data.k",
                    "messageExpression": "'k may not change from ' + oldObject.data.k + ' in ' + namespaceObject.metadata.name + ' (' + namespaceObject.status.phase + ')'"}]});
                install(t, name, spec, json!({"validationActions": ["Deny"]})).await;
                create(t, configmap("policy-update", name, "before")).await;
                let mut changed = configmap("policy-update", name, "after");
                changed["metadata"]["namespace"] = json!(NS);
                send(
                    t,
                    "PUT",
                    &format!("/api/v1/namespaces/{NS}/configmaps/policy-update"),
                    changed,
                )
                .await;
                uninstall(t, name).await;
                remove(t, &["policy-update"]).await;
            }
        ),
        interaction!(
            "admission policies: a variable that fails to evaluate fails only what reads it",
            |t| {
                let name = "opconform-policy-broken-variable";
                let spec = json!({
                "variables": [{"name": "broken", "expression": "object.data.missing"},
                              {"name": "derived", "expression": "variables.broken + '!'"},
                              {"name": "fine", "expression": "object.data.k"}],
                "validations": [
                    {"expression": "variables.fine != 'unread'", "message": "k is unread"},
                    {"expression": "object.data.k != 'read' || variables.derived == 'x'"},
                ]});
                install(t, name, spec, json!({"validationActions": ["Deny"]})).await;
                create(t, configmap("policy-variable-unread", name, "unread")).await;
                create(t, configmap("policy-variable-read", name, "read")).await;
                create(t, configmap("policy-variable-other", name, "other")).await;
                uninstall(t, name).await;
                remove(t, &["policy-variable-other"]).await;
            }
        ),
        interaction!(
            "admission policies: a failing match condition, and a param not found under Deny",
            |t| {
                let name = "opconform-policy-condition";
                let spec = json!({"failurePolicy": "Fail",
                    "matchConditions": [{"name": "missing", "expression":
                        "object.metadata.name == 'policy-probe' || object.data.missing == 'x'"}],
                    "validations": [{"expression": "true"}]});
                install(t, name, spec, json!({"validationActions": ["Deny"]})).await;
                create(t, configmap("policy-condition", name, "v")).await;
                uninstall(t, name).await;
                let name = "opconform-policy-no-params";
                let spec = json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                    "validations": [{"expression": "params.data.k == object.data.k"}]});
                let binding = json!({"validationActions": ["Deny"], "paramRef": {
                    "name": "policy-absent", "namespace": NS, "parameterNotFoundAction": "Deny"}});
                install(t, name, spec, binding).await;
                create(t, configmap("policy-no-params", name, "v")).await;
                uninstall(t, name).await;
            }
        ),
        interaction!(
            "admission policies: the reject fault's policy refuses the requests it names",
            |t| {
                use opconform::cluster::admission;
                let name = "opconform-policy-reject";
                let matches = opconform::fault::RequestMatch {
                    verbs: vec!["create".into(), "update".into()],
                    group: Some(String::new()),
                    resource: Some("configmaps".into()),
                    namespace: Some(NS.into()),
                    name: Some("policy-rejected".into()),
                    ..opconform::fault::RequestMatch::default()
                };
                let labels = [(
                    "opconform.io/scenario".to_string(),
                    "differential".to_string(),
                )]
                .into();
                let reject = admission::reject_policy(
                    name,
                    &labels,
                    &matches,
                    403,
                    "rejected by the scenario",
                )
                .unwrap();
                admission::apply(&t.admin, &reject).await.unwrap();
                admission::wait_until_in_force(&t.admin, name, true, Duration::from_secs(30))
                    .await
                    .unwrap();
                create(t, configmap("policy-rejected", name, "v")).await;
                create(t, configmap("policy-admitted", name, "v")).await;
                admission::remove(&t.admin, name).await.unwrap();
                admission::wait_until_in_force(&t.admin, name, false, Duration::from_secs(30))
                    .await
                    .unwrap();
                create(t, configmap("policy-rejected", name, "v")).await;
                remove(t, &["policy-rejected", "policy-admitted"]).await;
            }
        ),
        interaction!(
            "admission policies: a policy with expressions that do not compile and bindings with invalid actions are refused at create",
            |t| {
                let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "opconform-policy-invalid"},
                "spec": {
                    "matchConstraints": {"resourceRules": [{"apiGroups": [""],
                        "apiVersions": ["v1"], "operations": ["CREATE"],
                        "resources": ["configmaps"]}]},
                    "validations": [
                        {"expression": "object.data.k =="},
                        {"expression": "params.data.k == 'x'"},
                        {"expression": "object.data.k == 'x'", "messageExpression": "'k is ' +"},
                            {"expression": "request.operation == 'CREATE' && has(request.userInfo.nick)"},
                            {"expression": "namespaceObject.metadata.uid == '' || request.foo.bar == 1"},
                            {"expression": "request.userInfo.extra.anything == ['x'] && namespaceObject.metadata.UID != ''"},
                    ]}});
                send(
                    t,
                    "POST",
                    &format!("{ADMISSION}/validatingadmissionpolicies"),
                    policy,
                )
                .await;
                let _ = support::raw(
                    &t.admin,
                    "DELETE",
                    &format!("{ADMISSION}/validatingadmissionpolicies/opconform-policy-invalid"),
                    JSON,
                    Vec::new(),
                )
                .await;
                for (binding, actions) in [
                    ("opconform-binding-deny-warn", json!(["Deny", "Warn"])),
                    ("opconform-binding-none", json!([])),
                    (
                        "opconform-binding-unknown",
                        json!(["Deny", "Deny", "Block"]),
                    ),
                ] {
                    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": binding},
                        "spec": {"policyName": "opconform-policy-invalid",
                                 "validationActions": actions}});
                    send(
                        t,
                        "POST",
                        &format!("{ADMISSION}/validatingadmissionpolicybindings"),
                        body,
                    )
                    .await;
                    let _ = support::raw(
                        &t.admin,
                        "DELETE",
                        &format!("{ADMISSION}/validatingadmissionpolicybindings/{binding}"),
                        JSON,
                        Vec::new(),
                    )
                    .await;
                }
            }
        ),
    ]
}
