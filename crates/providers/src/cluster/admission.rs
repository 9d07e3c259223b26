//! `reject`/`allow` on a real API server: a ValidatingAdmissionPolicy and its binding
//! (`admissionregistration.k8s.io/v1`, Kubernetes 1.30 and later) that deny the requests a
//! [`RequestMatch`] describes, with the status the scenario names where admission can
//! give it.
//!
//! # What differs from the simulator
//! - Admission sees writes only: `get`, `list` and `watch` cannot be rejected.
//! - Admission sees operations, not verbs: `update` and `patch` are both `UPDATE`, so a
//!   rule for either rejects both; `deletecollection` is rejected object by object as
//!   `DELETE`.
//! - Only four statuses can be given: 401 Unauthorized, 403 Forbidden, 413
//!   RequestEntityTooLarge and 422 Invalid (what the policy's `reason` allows); 500, 503
//!   and the rest need the simulator.
//! - The message comes back wrapped: `ValidatingAdmissionPolicy '<name>' with binding
//!   '<name>' denied request: <message>`.
//! - A policy takes effect once the API server has seen it, usually well under a
//!   second after it is created: [`wait_until_in_force`] waits for that with a probe — a
//!   dry-run create of a ConfigMap that only this policy refuses.
//! - Requests from a pod are recognised by the claims of its bound ServiceAccount token
//!   (`authentication.kubernetes.io/pod-name`), as every pod has by default.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use crate::cluster::ProviderError;
use crate::fault::{FaultError, FaultLog, RequestMatch};

/// Errors of turning a reject rule into an admission policy.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The rule names a read, which admission never sees.
    #[error(
        "admission policies cannot reject {verb} requests: only writes (create, update, patch, delete, deletecollection) pass through admission; reads need the simulator"
    )]
    Read {
        /// The verb.
        verb: String,
    },
    /// The rule names a verb that is not a Kubernetes verb.
    #[error("{verb:?} is not a verb admission knows")]
    UnknownVerb {
        /// The verb.
        verb: String,
    },
    /// The status code is one a ValidatingAdmissionPolicy cannot answer with.
    #[error(
        "a ValidatingAdmissionPolicy cannot answer with {code}: it can only give 401 Unauthorized, 403 Forbidden, 413 RequestEntityTooLarge or 422 Invalid; other codes need the simulator"
    )]
    Code {
        /// The code asked for.
        code: u16,
    },
    /// The API server did not put a policy in force (or take it out) in time.
    #[error(
        "the API server had not {} ValidatingAdmissionPolicy {name} within {within:?}: {last}",
        if *in_force { "put in force" } else { "dropped" }
    )]
    NotInForce {
        /// The policy.
        name: String,
        /// Whether it was to be in force.
        in_force: bool,
        /// The bound.
        within: std::time::Duration,
        /// What the last probe saw.
        last: String,
    },
}

/// The `reason` a policy gives to answer with `code`.
///
/// # Errors
/// [`AdmissionError::Code`] for a code admission cannot give.
pub fn reason_for_code(code: u16) -> Result<&'static str, AdmissionError> {
    match code {
        401 => Ok("Unauthorized"),
        403 => Ok("Forbidden"),
        413 => Ok("RequestEntityTooLarge"),
        422 => Ok("Invalid"),
        _ => Err(AdmissionError::Code { code }),
    }
}

/// The admission operations of RBAC verbs (all writes when `verbs` is empty).
///
/// # Errors
/// [`AdmissionError::Read`] for get, list or watch; [`AdmissionError::UnknownVerb`] for
/// anything else that is no write.
pub fn operations(verbs: &[String]) -> Result<Vec<String>, AdmissionError> {
    if verbs.is_empty() {
        return Ok(vec!["CREATE".into(), "UPDATE".into(), "DELETE".into()]);
    }
    let mut operations: Vec<String> = Vec::new();
    for verb in verbs {
        let operation = match verb.as_str() {
            "create" => "CREATE",
            "update" | "patch" => "UPDATE",
            "delete" | "deletecollection" => "DELETE",
            "get" | "list" | "watch" => {
                return Err(AdmissionError::Read { verb: verb.clone() });
            }
            _ => return Err(AdmissionError::UnknownVerb { verb: verb.clone() }),
        };
        if !operations.iter().any(|o| o == operation) {
            operations.push(operation.to_string());
        }
    }
    Ok(operations)
}

/// A CEL string literal of `text`.
fn cel_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `resources` of a rule: the main resource and its subresources unless the match
/// names a subresource (`Some("")` is the main resource only).
fn resources(matches: &RequestMatch) -> Vec<String> {
    let resource = matches.resource.as_deref().unwrap_or("*");
    match matches.subresource.as_deref() {
        None => vec![resource.to_string(), format!("{resource}/*")],
        Some("") => vec![resource.to_string()],
        Some(sub) => vec![format!("{resource}/{sub}")],
    }
}

/// The ConfigMap a policy's probe creates (dry run) in [`PROBE_NAMESPACE`].
pub fn probe_name(policy: &str) -> String {
    format!("{policy}-probe")
}

/// How long a provider waits for a policy to be put in force or dropped.
pub const IN_FORCE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Where probes are created (dry run: nothing is stored).
pub const PROBE_NAMESPACE: &str = "default";

/// CEL: the request is the policy's probe.
fn probe_cel(policy: &str) -> String {
    format!(
        "(request.resource.group == \"\" && request.resource.resource == \"configmaps\" && request.operation == \"CREATE\" && request.namespace == {} && request.name == {})",
        cel_string(PROBE_NAMESPACE),
        cel_string(&probe_name(policy)),
    )
}

/// CEL: the request is one `rule` (built from `matches`) matches — what the policy's match
/// constraints say, restated so that the probe's rule matches nothing else.
fn rule_cel(matches: &RequestMatch, rule: &NamedRuleWithOperations) -> String {
    let operations: Vec<String> = rule
        .operations
        .iter()
        .flatten()
        .map(|o| cel_string(o))
        .collect();
    let mut parts = vec![format!("request.operation in [{}]", operations.join(", "))];
    if let Some(group) = matches.group.as_deref().filter(|g| *g != "*") {
        parts.push(format!("request.resource.group == {}", cel_string(group)));
    }
    if let Some(resource) = matches.resource.as_deref().filter(|r| *r != "*") {
        parts.push(format!(
            "request.resource.resource == {}",
            cel_string(resource)
        ));
    }
    // An admission request without a subresource has no `subResource` key at all.
    match matches.subresource.as_deref() {
        None | Some("*") => {}
        Some("") => parts.push("(!has(request.subResource) || request.subResource == \"\")".into()),
        Some(sub) => parts.push(format!(
            "(has(request.subResource) && request.subResource == {})",
            cel_string(sub)
        )),
    }
    if let Some(name) = &matches.name {
        parts.push(format!("request.name == {}", cel_string(name)));
    }
    parts.join(" && ")
}

/// Waits until the API server's admission has the policy `name` in force (`true`) or no
/// longer (`false`), bounded by `within`: a dry-run create of the policy's probe ConfigMap
/// is refused by that policy exactly while it is in force. A policy takes effect only once
/// the API server's informers have seen it and its binding, usually well under a second
/// after they were created.
///
/// # Errors
/// [`AdmissionError::NotInForce`] when it does not happen in time.
pub async fn wait_until_in_force(
    client: &Client,
    name: &str,
    in_force: bool,
    within: std::time::Duration,
) -> Result<(), AdmissionError> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), PROBE_NAMESPACE);
    let mut probe = ConfigMap::default();
    probe.metadata.name = Some(probe_name(name));
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let marker = format!("ValidatingAdmissionPolicy '{name}'");
    let deadline = tokio::time::Instant::now() + within;
    let mut last;
    loop {
        let refused = match api.create(&params, &probe).await {
            Ok(_) => {
                last = "the probe was admitted".to_string();
                false
            }
            Err(kube::Error::Api(status)) if status.message.contains(&marker) => {
                last = format!("the probe was refused: {}", status.message);
                true
            }
            Err(e) => {
                last = format!("the probe failed: {e}");
                // Another refusal (the namespace is missing, …): not this policy's.
                false
            }
        };
        if refused == in_force {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(AdmissionError::NotInForce {
                name: name.to_string(),
                in_force,
                within,
                last,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// What the policy matches beyond resources and names, as CEL match conditions.
fn match_conditions(matches: &RequestMatch) -> Vec<MatchCondition> {
    let mut conditions = Vec::new();
    if let Some(namespace) = &matches.namespace {
        conditions.push(MatchCondition {
            name: "namespace".into(),
            expression: format!("request.namespace == {}", cel_string(namespace)),
        });
    }
    if let Some(user) = &matches.user {
        conditions.push(MatchCondition {
            name: "user".into(),
            expression: format!("request.userInfo.username == {}", cel_string(user)),
        });
    }
    if let Some(pod) = &matches.pod {
        let (namespace, name) = pod.split_once('/').unwrap_or(("", pod));
        let key = cel_string(crate::cluster::audit_log::POD_NAME_EXTRA);
        conditions.push(MatchCondition {
            name: "pod".into(),
            expression: format!(
                "request.userInfo.username.startsWith({}) && {key} in request.userInfo.extra && request.userInfo.extra[{key}].exists(n, n == {})",
                cel_string(&format!("system:serviceaccount:{namespace}:")),
                cel_string(name),
            ),
        });
    }
    conditions
}

/// A policy and the binding that puts it in force.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectPolicy {
    /// The policy: matches the requests and denies them.
    pub policy: ValidatingAdmissionPolicy,
    /// Its binding, with the `Deny` action.
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// The policy and binding named `name` (both cluster-scoped, both carrying `labels`) that
/// deny requests matching `matches` with `code` and `message`.
///
/// # Errors
/// A read verb, a verb that is none, or a code admission cannot give.
pub fn reject_policy(
    name: &str,
    labels: &BTreeMap<String, String>,
    matches: &RequestMatch,
    code: u16,
    message: &str,
) -> Result<RejectPolicy, AdmissionError> {
    let reason = reason_for_code(code)?;
    let rule = NamedRuleWithOperations {
        api_groups: Some(vec![matches.group.clone().unwrap_or_else(|| "*".into())]),
        api_versions: Some(vec!["*".into()]),
        operations: Some(operations(&matches.verbs)?),
        resources: Some(resources(matches)),
        resource_names: matches.name.clone().map(|n| vec![n]),
        scope: Some("*".into()),
    };
    // The probe (see wait_until_in_force): every condition lets it through, and a condition
    // of its own keeps the probe's rule from matching anything but the probe.
    let probe = probe_cel(name);
    let mut conditions = vec![MatchCondition {
        name: "rule-or-probe".into(),
        expression: format!("{probe} || ({})", rule_cel(matches, &rule)),
    }];
    conditions.extend(
        match_conditions(matches)
            .into_iter()
            .map(|c| MatchCondition {
                name: c.name,
                expression: format!("{probe} || ({})", c.expression),
            }),
    );
    let probe_rule = NamedRuleWithOperations {
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(vec!["CREATE".into()]),
        resources: Some(vec!["configmaps".into()]),
        resource_names: None,
        scope: Some("Namespaced".into()),
    };
    let metadata = ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: metadata.clone(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![rule, probe_rule]),
                ..MatchResources::default()
            }),
            match_conditions: Some(conditions),
            validations: Some(vec![Validation {
                expression: "false".into(),
                // A validation message may not span lines.
                message: Some(message.replace(['\n', '\r'], " ")),
                reason: Some(reason.into()),
                ..Validation::default()
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata,
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name.to_string()),
            validation_actions: Some(vec!["Deny".into()]),
            ..ValidatingAdmissionPolicyBindingSpec::default()
        }),
    };
    Ok(RejectPolicy { policy, binding })
}

/// A reject rule as the fault log shows it: what admission matches.
pub fn describe(policy: &RejectPolicy) -> String {
    let spec = policy.policy.spec.clone().unwrap_or_default();
    let rule = spec
        .match_constraints
        .and_then(|m| m.resource_rules)
        .and_then(|r| r.into_iter().next())
        .unwrap_or_default();
    let mut text = format!(
        "{} {} in groups {}",
        rule.operations.unwrap_or_default().join(","),
        rule.resources.unwrap_or_default().join(","),
        rule.api_groups.unwrap_or_default().join(","),
    );
    if let Some(names) = rule.resource_names {
        text.push_str(&format!(" named {}", names.join(",")));
    }
    for condition in spec.match_conditions.unwrap_or_default() {
        text.push_str(&format!(" when {}", condition.name));
    }
    text
}

/// Creates the policy, then its binding (removing the policy again when the binding
/// cannot be made).
///
/// # Errors
/// What the API server answers.
pub async fn apply(client: &Client, reject: &RejectPolicy) -> Result<(), kube::Error> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let pp = PostParams::default();
    policies.create(&pp, &reject.policy).await?;
    if let Err(e) = bindings.create(&pp, &reject.binding).await {
        let name = reject.policy.metadata.name.clone().unwrap_or_default();
        let _ = policies.delete(&name, &DeleteParams::default()).await;
        return Err(e);
    }
    Ok(())
}

/// Deletes the binding, then the policy, named `name` (what is already gone is fine).
///
/// # Errors
/// What the API server answers, but NotFound.
pub async fn remove(client: &Client, name: &str) -> Result<(), kube::Error> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let dp = DeleteParams::default();
    match bindings.delete(name, &dp).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        other => drop(other?),
    }
    match policies.delete(name, &dp).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(drop),
    }
}

/// Deletes every binding and policy labelled `label=value`. Errors are reported, not
/// returned: teardown goes on.
pub async fn remove_labelled(client: &Client, label: &str, value: &str) {
    use crate::cluster::shared::delete_all_labelled;
    delete_all_labelled::<ValidatingAdmissionPolicyBinding>(
        client,
        label,
        value,
        "admission policy bindings",
    )
    .await;
    delete_all_labelled::<ValidatingAdmissionPolicy>(client, label, value, "admission policies")
        .await;
}

/// The reject rules one scenario keeps in force as admission policies: `reject`/`allow` of
/// every provider in front of a real API server (local, kind), named after the scenario
/// and labelled with its labels so teardown finds what is left.
pub struct Rejects {
    client: Client,
    prefix: String,
    labels: BTreeMap<String, String>,
    rules: tokio::sync::Mutex<BTreeMap<u64, String>>,
    next: std::sync::atomic::AtomicU64,
}

impl Rejects {
    /// No rules yet: policies will be named `<prefix>-reject-<id>` and carry `labels`.
    pub fn new(client: Client, prefix: &str, labels: BTreeMap<String, String>) -> Self {
        Self {
            client,
            prefix: prefix.to_string(),
            labels,
            rules: tokio::sync::Mutex::default(),
            next: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Makes the API server refuse requests `matches` describes with `code` and
    /// `message`, waits until the policy is in force and records `reject` in `faults`;
    /// returns the rule's id.
    ///
    /// # Errors
    /// [`ProviderError::Admission`] for a rule admission cannot carry out or a policy not
    /// in force within [`IN_FORCE_WITHIN`] (it is removed again); [`ProviderError::Api`]
    /// when the API server refuses the policy.
    pub async fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        message: &str,
        faults: &FaultLog,
    ) -> Result<u64, ProviderError> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let name = format!("{}-reject-{id}", self.prefix);
        let policy = reject_policy(&name, &self.labels, &matches, code, message)?;
        apply(&self.client, &policy)
            .await
            .map_err(|source| ProviderError::Api {
                action: format!("creating ValidatingAdmissionPolicy {name} and its binding"),
                source,
            })?;
        if let Err(e) = wait_until_in_force(&self.client, &name, true, IN_FORCE_WITHIN).await {
            let _ = remove(&self.client, &name).await;
            return Err(e.into());
        }
        self.rules.lock().await.insert(id, name.clone());
        let reason = reason_for_code(code).unwrap_or_default();
        faults.record(
            "reject",
            &format!("rule {id}: {}", describe(&policy)),
            &format!("{code} {reason}, ValidatingAdmissionPolicy {name}"),
        );
        Ok(id)
    }

    /// Removes rule `id` (undoes [`Rejects::reject`]), waits until the API server no
    /// longer applies it and records `allow` in `faults`.
    ///
    /// # Errors
    /// [`FaultError::NoRule`] for an id this scenario has no rule of;
    /// [`ProviderError::Api`] when the policy cannot be deleted,
    /// [`ProviderError::Admission`] when it stays in force.
    pub async fn allow(&self, id: u64, faults: &FaultLog) -> Result<(), ProviderError> {
        let mut rules = self.rules.lock().await;
        let name = rules
            .get(&id)
            .cloned()
            .ok_or(ProviderError::Fault(FaultError::NoRule(id)))?;
        remove(&self.client, &name)
            .await
            .map_err(|source| ProviderError::Api {
                action: format!("deleting ValidatingAdmissionPolicy {name} and its binding"),
                source,
            })?;
        wait_until_in_force(&self.client, &name, false, IN_FORCE_WITHIN).await?;
        rules.remove(&id);
        drop(rules);
        faults.record(
            "allow",
            &format!("rule {id}"),
            &format!("ValidatingAdmissionPolicy {name} deleted"),
        );
        Ok(())
    }

    /// Removes every rule still in force, and whatever else carries the scenario's labels.
    /// Errors are reported, not returned: teardown goes on.
    pub async fn remove_all(&self) {
        let rules = std::mem::take(&mut *self.rules.lock().await);
        for name in rules.values() {
            if let Err(e) = remove(&self.client, name).await {
                eprintln!(
                    "opconform: teardown of {}: deleting admission policy {name} failed: {}",
                    self.prefix,
                    crate::error_chain(&e)
                );
            }
        }
        for (label, value) in &self.labels {
            remove_labelled(&self.client, label, value).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> BTreeMap<String, String> {
        [(
            "opconform.io/scenario".to_string(),
            "opconform-abc123".to_string(),
        )]
        .into()
    }

    #[test]
    fn a_lease_update_by_one_pod_becomes_a_policy_and_a_deny_binding() {
        let m = RequestMatch {
            verbs: vec!["update".into(), "patch".into()],
            group: Some("coordination.k8s.io".into()),
            resource: Some("leases".into()),
            namespace: Some("ops".into()),
            name: Some("lock".into()),
            pod: Some("ops/op-1".into()),
            ..RequestMatch::default()
        };
        let r = reject_policy("opconform-abc123-reject-1", &labels(), &m, 403, "no\nway").unwrap();
        const PROBE: &str = "(request.resource.group == \"\" && request.resource.resource == \"configmaps\" && request.operation == \"CREATE\" && request.namespace == \"default\" && request.name == \"opconform-abc123-reject-1-probe\")";
        let policy = serde_json::to_value(&r.policy).unwrap();
        assert_eq!(
            policy,
            serde_json::json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {
                    "name": "opconform-abc123-reject-1",
                    "labels": {"opconform.io/scenario": "opconform-abc123"}
                },
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": ["coordination.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["leases", "leases/*"],
                        "resourceNames": ["lock"],
                        "scope": "*"
                    }, {
                        // The probe: a dry-run create only this policy refuses.
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                        "scope": "Namespaced"
                    }]},
                    "matchConditions": [
                        {"name": "rule-or-probe", "expression": format!("{PROBE} || (request.operation in [\"UPDATE\"] && request.resource.group == \"coordination.k8s.io\" && request.resource.resource == \"leases\" && request.name == \"lock\")")},
                        {"name": "namespace", "expression": format!("{PROBE} || (request.namespace == \"ops\")")},
                        {"name": "pod", "expression": format!("{PROBE} || (request.userInfo.username.startsWith(\"system:serviceaccount:ops:\") && \"authentication.kubernetes.io/pod-name\" in request.userInfo.extra && request.userInfo.extra[\"authentication.kubernetes.io/pod-name\"].exists(n, n == \"op-1\"))")}
                    ],
                    "validations": [{"expression": "false", "message": "no way", "reason": "Forbidden"}]
                }
            })
        );
        let binding = serde_json::to_value(&r.binding).unwrap();
        assert_eq!(
            binding,
            serde_json::json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {
                    "name": "opconform-abc123-reject-1",
                    "labels": {"opconform.io/scenario": "opconform-abc123"}
                },
                "spec": {
                    "policyName": "opconform-abc123-reject-1",
                    "validationActions": ["Deny"]
                }
            })
        );
    }

    #[test]
    fn an_empty_match_denies_every_write_of_every_resource() {
        let r = reject_policy("p", &labels(), &RequestMatch::default(), 422, "x").unwrap();
        let spec = r.policy.spec.unwrap();
        let rule = &spec.match_constraints.unwrap().resource_rules.unwrap()[0];
        assert_eq!(
            rule.operations.as_deref().unwrap(),
            ["CREATE", "UPDATE", "DELETE"]
        );
        assert_eq!(rule.resources.as_deref().unwrap(), ["*", "*/*"]);
        assert_eq!(rule.api_groups.as_deref().unwrap(), ["*"]);
        assert_eq!(rule.resource_names, None);
        // Only the condition that keeps the probe's rule to the probe.
        let conditions = spec.match_conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert!(
            conditions[0]
                .expression
                .ends_with("|| (request.operation in [\"CREATE\", \"UPDATE\", \"DELETE\"])"),
            "{}",
            conditions[0].expression
        );
        assert_eq!(
            spec.validations.unwrap()[0].reason.as_deref(),
            Some("Invalid")
        );
    }

    #[test]
    fn a_subresource_and_the_main_resource_alone_are_told_apart() {
        let status = RequestMatch {
            resource: Some("memcacheds".into()),
            subresource: Some("status".into()),
            ..RequestMatch::default()
        };
        assert_eq!(resources(&status), ["memcacheds/status"]);
        let main = RequestMatch {
            subresource: Some(String::new()),
            ..status
        };
        assert_eq!(resources(&main), ["memcacheds"]);
    }

    #[test]
    fn reads_and_codes_admission_cannot_give_are_refused_saying_why() {
        let read = RequestMatch {
            verbs: vec!["create".into(), "watch".into()],
            ..RequestMatch::default()
        };
        let e = reject_policy("p", &labels(), &read, 403, "x").unwrap_err();
        assert!(
            e.to_string().contains("cannot reject watch requests"),
            "{e}"
        );
        for code in [500, 503, 409, 429] {
            let e = reject_policy("p", &labels(), &RequestMatch::default(), code, "x")
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("cannot answer with {code}")), "{e}");
            assert!(e.contains("403 Forbidden"), "{e}");
        }
        for (code, reason) in [
            (401, "Unauthorized"),
            (403, "Forbidden"),
            (413, "RequestEntityTooLarge"),
            (422, "Invalid"),
        ] {
            assert_eq!(reason_for_code(code).unwrap(), reason);
        }
    }

    #[test]
    fn user_names_are_quoted_for_cel() {
        let m = RequestMatch {
            user: Some("a\"b\\c".into()),
            ..RequestMatch::default()
        };
        assert_eq!(
            match_conditions(&m)[0].expression,
            r#"request.userInfo.username == "a\"b\\c""#
        );
    }
}
