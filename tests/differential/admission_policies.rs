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

/// Installs a policy with `validations` (calls of one of Kubernetes' CEL libraries), sends a
/// dry-run ConfigMap with each of `cases` as its data, and removes the policy.
async fn library_cases(t: &Target, name: &str, validations: Value, cases: &[Value]) {
    install(
        t,
        name,
        json!({"validations": validations}),
        json!({"validationActions": ["Deny"]}),
    )
    .await;
    for (index, data) in cases.iter().enumerate() {
        let mut object = configmap(&format!("{name}-{index}"), name, "");
        object["data"] = data.clone();
        send(
            t,
            "POST",
            &format!("/api/v1/namespaces/{NS}/configmaps?dryRun=All"),
            object,
        )
        .await;
    }
    uninstall(t, name).await;
}

/// A validation that always fails with `report` (a list of strings) joined as its message.
fn report(report: &str) -> Value {
    json!({"expression": "false", "messageExpression": format!("{report}.join(' ')"),
        "message": "the report failed"})
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
            "admission policies: Kubernetes' IP and CIDR libraries parse, classify and compare addresses and prefixes",
            |t| {
                let validations = json!([
                    {"expression": "!has(object.data.ip) || ip(object.data.ip).family() != 0"},
                    {"expression": "!has(object.data.canonical) || ip.isCanonical(object.data.canonical)",
                     "message": "not canonical"},
                    {"expression": "!has(object.data.cidr) || cidr(object.data.cidr).prefixLength() >= 0"},
                    {"expression": "!has(object.data.containsip) || cidr('10.0.0.0/8').containsIP(object.data.containsip)",
                     "message": "address outside"},
                    {"expression": "!has(object.data.containscidr) || cidr('10.0.0.0/8').containsCIDR(object.data.containscidr)",
                     "message": "prefix outside"},
                    report("[string(ip(object.data.ip)), string(ip(object.data.ip).family()), \
                        string(ip(object.data.ip).isUnspecified()), string(ip(object.data.ip).isLoopback()), \
                        string(ip(object.data.ip).isLinkLocalMulticast()), \
                        string(ip(object.data.ip).isLinkLocalUnicast()), \
                        string(ip(object.data.ip).isGlobalUnicast()), \
                        string(ip(object.data.ip) == ip('10.0.0.1')), string(isIP(object.data.ip)), \
                        string(cidr(object.data.cidr)), string(cidr(object.data.cidr).masked()), \
                        string(cidr(object.data.cidr).ip()), string(cidr(object.data.cidr).prefixLength()), \
                        string(cidr(object.data.cidr).containsIP(object.data.ip)), \
                        string(cidr(object.data.cidr).containsIP(ip(object.data.ip))), \
                        string(cidr(object.data.cidr).containsCIDR(cidr(object.data.cidr).masked())), \
                        string(cidr(object.data.cidr) == cidr(object.data.cidr).masked()), \
                        string(isCIDR(object.data.cidr))]"),
                ]);
                let mut cases = Vec::new();
                for (ip, cidr) in [
                    ("10.0.0.1", "10.1.2.3/8"),
                    ("::1", "fe80::1/10"),
                    ("fe80::1", "fe80::/10"),
                    ("ff02::1", "::/0"),
                    ("224.0.0.5", "0.0.0.0/0"),
                    ("0.0.0.0", "192.168.0.0/16"),
                    ("2001:DB8:0:0:0:0:0:1", "2001:db8::/32"),
                    ("255.255.255.255", "255.255.255.255/32"),
                    ("169.254.1.1", "169.254.0.0/16"),
                ] {
                    cases.push(json!({"ip": ip, "cidr": cidr}));
                }
                for ip in [
                    "1.2.3",
                    "1.2.3.04",
                    "::ffff:1.2.3.4",
                    "fe80::1%eth0",
                    "1:2:3:4:5:6:7:8:9",
                    "abc",
                    "1.2.3.256",
                    "::1::2",
                    "1.2.3.4.5",
                    "12345::",
                    "1::2:3:4:5:6:7:8",
                ] {
                    cases.push(json!({"ip": ip}));
                }
                for canonical in ["2001:DB8::1", "2001:db8::1", "bad"] {
                    cases.push(json!({"canonical": canonical}));
                }
                for cidr in [
                    "10.0.0.0",
                    "10.0.0.0/33",
                    "10.0.0.0/08",
                    "::ffff:1.2.3.4/120",
                    "1.2.3/8",
                    "fe80::1%eth0/64",
                    "10.0.0.0/",
                    "10.0.0.0/x",
                ] {
                    cases.push(json!({"cidr": cidr}));
                }
                for contained in ["11.0.0.1", "bad", "10.255.0.1"] {
                    cases.push(json!({"containsip": contained}));
                }
                for contained in ["10.1.0.0/16", "0.0.0.0/0", "bad"] {
                    cases.push(json!({"containscidr": contained}));
                }
                library_cases(t, "opconform-policy-net", validations, &cases).await;
            }
        ),
        interaction!(
            "admission policies: Kubernetes' quantity library parses, compares and adds quantities",
            |t| {
                // Doubles are compared with the value expected (`f`, `sum`), not written out:
                // the crate's `string(double)` does not write them as cel-go's `%g` does.
                let validations = json!([
                    {"expression": "!has(object.data.q) || sign(quantity(object.data.q)) >= -1"},
                    {"expression": "!has(object.data.int) || quantity(object.data.int).asInteger() >= 0"},
                    report("[string(isQuantity(object.data.q)), string(sign(quantity(object.data.q))), \
                        string(quantity(object.data.q).isInteger()), \
                        string(quantity(object.data.q).asApproximateFloat() == double(object.data.f)), \
                        string(quantity(object.data.q).compareTo(quantity(object.data.other))), \
                        string(quantity(object.data.q).isGreaterThan(quantity(object.data.other))), \
                        string(quantity(object.data.q).isLessThan(quantity(object.data.other))), \
                        string(quantity(object.data.q) == quantity(object.data.other)), \
                        string(quantity(object.data.q).add(quantity(object.data.other)).asApproximateFloat() \
                            == double(object.data.sum)), \
                        string(quantity(object.data.q).sub(quantity(object.data.other)).isInteger()), \
                        string(quantity(object.data.q).add(1).compareTo(quantity(object.data.q))), \
                        string(quantity(object.data.q).sub(2).compareTo(quantity(object.data.q)))]"),
                ]);
                let mut cases = Vec::new();
                for (q, other, f, sum) in [
                    ("1Ki", "1024", "1024", "2048"),
                    ("1.5", "1500m", "1.5", "3"),
                    ("1000m", "1", "1", "2"),
                    ("-2.5Gi", "1G", "-2684354560", "-1684354560"),
                    ("1e3", "1k", "1000", "2000"),
                    ("0", "0.0", "0", "0"),
                    (
                        "12345678901234567890",
                        "1",
                        "1.234567890123457e19",
                        "1.234567890123457e19",
                    ),
                    ("0.0000000001", "1n", "1e-9", "2e-9"),
                    ("1.5Ki", "1536", "1536", "3072"),
                    ("100M", "0.1G", "1e8", "2e8"),
                    ("3E", "3Ei", "3e18", "6.458764513820542e18"),
                    ("+.5", "-0", "0.5", "0.5"),
                ] {
                    cases.push(json!({"q": q, "other": other, "f": f, "sum": sum}));
                }
                for q in ["1Kx", "1KK", "", "abc", "1e", "1.2.3"] {
                    cases.push(json!({"q": q}));
                }
                for int in ["1.5", "1000m", "1k"] {
                    cases.push(json!({"int": int}));
                }
                library_cases(t, "opconform-policy-quantity", validations, &cases).await;
            }
        ),
        interaction!(
            "admission policies: Kubernetes' lists library finds the first and last index of an element",
            |t| {
                let validations = json!([report(
                    "[string([1, 2, 2, 3].indexOf(2)), string([1, 2, 2, 3].lastIndexOf(2)), \
                    string(object.data.k.split(',').indexOf('b')), \
                    string(object.data.k.split(',').lastIndexOf('b')), \
                    string([ip('10.0.0.1'), ip('::1')].indexOf(ip('::1'))), \
                    string([1.0].indexOf(1.1)), string(['x'].lastIndexOf('y'))]"
                )]);
                let cases = [json!({"k": "a,b,c,b"}), json!({"k": "c"})];
                library_cases(t, "opconform-policy-lists", validations, &cases).await;
            }
        ),
        interaction!(
            "admission policies: Kubernetes' semver library parses, normalizes and orders versions",
            |t| {
                let validations = json!([
                    {"expression": "!has(object.data.v) || semver(object.data.v).major() >= 0"},
                    {"expression": "!has(object.data.loose) || semver(object.data.loose, true).major() >= 0"},
                    report("[string(isSemver(object.data.a)), string(semver(object.data.a).major()), \
                        string(semver(object.data.a).minor()), string(semver(object.data.a).patch()), \
                        string(semver(object.data.a).compareTo(semver(object.data.b))), \
                        string(semver(object.data.a).isGreaterThan(semver(object.data.b))), \
                        string(semver(object.data.a).isLessThan(semver(object.data.b))), \
                        string(semver(object.data.a) == semver(object.data.b)), \
                        string(isSemver(object.data.b, true))]"),
                ]);
                let mut cases = Vec::new();
                for (a, b) in [
                    ("1.2.3", "1.2.4"),
                    ("1.0.0-alpha", "1.0.0"),
                    ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
                    ("1.0.0-2", "1.0.0-10"),
                    ("1.0.0+build.1", "1.0.0+build.2"),
                    ("10.20.30", "v10.020"),
                    ("2.0.0-rc.1+meta", "1.9.9"),
                ] {
                    cases.push(json!({"a": a, "b": b}));
                }
                for v in [
                    "",
                    "1.2",
                    "01.2.3",
                    "1.a.3",
                    "1.2.3-",
                    "1.2.3-01",
                    "1.2.3+",
                    "1.2.3-a_b",
                    "1.2.3+a..b",
                    "v1.2.3",
                    "1.2.99999999999999999999",
                ] {
                    cases.push(json!({"v": v}));
                }
                for loose in ["v1", "v01.02.03", "1.2-beta", "1.2.3-01", "v"] {
                    cases.push(json!({"loose": loose}));
                }
                library_cases(t, "opconform-policy-semver", validations, &cases).await;
            }
        ),
        interaction!(
            "admission policies: Kubernetes' URL library parses URLs and reads their parts",
            |t| {
                let validations = json!([
                    {"expression": "!has(object.data.bad) || url(object.data.bad).getScheme() != ''"},
                    report("[string(isURL(object.data.u)), url(object.data.u).getScheme(), \
                        url(object.data.u).getHost(), url(object.data.u).getHostname(), \
                        url(object.data.u).getPort(), url(object.data.u).getEscapedPath(), \
                        string(url(object.data.u).getQuery().size()), ['x', 'y', 'a', 'b', 'd e', 'b=1;c'].map(k, \
                        k in url(object.data.u).getQuery() ? url(object.data.u).getQuery()[k].join(',') : '-').join(','), \
                        string(url(object.data.u) == url(object.data.u))]"),
                ]);
                let mut cases = Vec::new();
                for u in [
                    "https://example.com:8443/a/b?x=1&y=2&x=3#frag",
                    "http://user:pass@[::1]:80/path%20with%2Fslash",
                    "https://[fe80::1%25eth0]/",
                    "/relative/path?q",
                    "https://example.com",
                    "http://host:/a b",
                    "mailto:someone@example.com",
                    "https://example.com/?a=%zz&b=1;c=2&d+e=f+g",
                    "*",
                    "HTTPS://EXAMPLE.com/A",
                ] {
                    cases.push(json!({"u": u}));
                }
                for bad in [
                    "",
                    "example.com",
                    "//host/path",
                    "http://[::1",
                    "http://host:port/",
                    "http://a b.com/",
                    "1http://x",
                    ":foo",
                    "http://[1.2.3.4]/",
                    "http://user^name@host/",
                    "http://%41/",
                    "http://host/%zz",
                    "http://[::1]x/",
                ] {
                    cases.push(json!({"bad": bad}));
                }
                library_cases(t, "opconform-policy-url", validations, &cases).await;
            }
        ),
        interaction!(
            "admission policies: Kubernetes' format library validates strings against named formats",
            |t| {
                let formats = [
                    "dns1123Label",
                    "dns1123Subdomain",
                    "dns1035Label",
                    "qualifiedName",
                    "dns1123LabelPrefix",
                    "dns1123SubdomainPrefix",
                    "dns1035LabelPrefix",
                    "labelValue",
                    "uri",
                    "uuid",
                    "byte",
                    "date",
                    "datetime",
                ];
                let checks: Vec<String> = formats
                    .iter()
                    .map(|f| {
                        format!(
                            "'{f}: ' + (format.{f}().validate(object.data.v).hasValue() ? \
                            format.{f}().validate(object.data.v).value().join(', ') : 'valid')"
                        )
                    })
                    .collect();
                let validations = json!([
                    {"expression": "!has(object.data.named) || format.named(object.data.named).hasValue()",
                     "message": "no such format"},
                    report(&format!(
                        "[{}, string(format.named('uuid') == optional.of(format.uuid()))]",
                        checks.join(", ")
                    )),
                ]);
                let mut cases = Vec::new();
                for v in [
                    "my-name",
                    "-bad-",
                    "Upper.Case",
                    "a.b-",
                    "example.com/Name",
                    "1abc",
                    "123e4567-E89B-12d3-a456-426614174000",
                    "aGVsbG8=",
                    "2021-02-29",
                    "2024-02-29T23:59:59.5+01:00",
                    "2021-01-01t24:00:00Z",
                    "https://x/y",
                    "",
                    "a_b",
                    &"x".repeat(64),
                ] {
                    cases.push(json!({"v": v}));
                }
                for named in ["dns1123Label", "nope"] {
                    cases.push(json!({"named": named}));
                }
                library_cases(t, "opconform-policy-format", validations, &cases).await;
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
