//! The `pods/eviction` subresource (a policy/v1 Eviction POSTed for a pod), as
//! kube-apiserver's eviction storage serves it (`pkg/registry/core/pod/storage/eviction.go`):
//! a pod that is not running (Pending, Succeeded, Failed, or being deleted) is deleted
//! without consulting budgets; otherwise the one PodDisruptionBudget whose selector picks
//! the pod decides. A budget its controller has not observed since its last change, or one
//! that allows no disruption, refuses with 429 `TooManyRequests`; several budgets answer
//! 500. An allowed eviction first takes one disruption from the budget's status (and
//! records the pod in `disruptedPods`, which the disruption controller forgets two minutes
//! later if the pod is still there), then marks the pod `DisruptionTarget` and deletes it
//! with the Eviction's `deleteOptions`. A pod that is not Ready is deleted without taking a
//! disruption when the budget's `unhealthyPodEvictionPolicy` is `AlwaysAllow`, or under
//! `IfHealthyBudget` (the default) when the budget has all the healthy pods it wants.
//!
//! Upstream reads the pod and the budget and writes them back conditionally, retrying on
//! conflicts; here the budget is checked and decremented in one atomic write of the store,
//! which is what those retries converge to. The pod's deletion of a pod that needs no
//! budget is still conditional on the version read, and retried as upstream retries it.
//!
//! # Caveats
//! - The 429 answers carry `details.retryAfterSeconds` but no `Retry-After` header.

use serde_json::{Value, json};

use super::apply;
use super::call::{Call, body_object};
use super::create::meta_str;
use super::objects;
use super::registry::ResourceType;
use super::status::{ApiError, GroupResource};
use super::store::Write;

/// Deletes the pod `namespace`/`name` with these DeleteOptions as a DELETE of it does (the
/// verb handlers' delete, given by the caller).
pub type DeletePod<'a> = dyn Fn(&str, &str, &Value) -> Result<(), ApiError> + 'a;

/// How many times a conflicting write is tried (`EvictionsRetry.Steps`).
const ATTEMPTS: usize = 20;

/// Past this many awaited evictions a budget refuses more (`MaxDisruptedPodSize`).
const MAX_DISRUPTED_PODS: usize = 2000;

/// The message of every refusal on behalf of a budget.
const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// The field manager kube-apiserver's own client writes budgets' status as.
const MANAGER: &str = "kube-apiserver";

/// An answer: its status code and body, or an error.
type Reply = Result<(u16, Value), ApiError>;

/// Serves `POST …/pods/{name}/eviction`.
///
/// # Errors
/// The request's errors as kube-apiserver answers them: 400 for a malformed Eviction, 404
/// for a missing pod, 409 for a failed precondition, 403 for a budget in an impossible
/// state. A refusal on behalf of a budget is an answer (429 or 500), not an error.
pub fn evict(call: &Call<'_>, pods: &ResourceType, delete: &DeletePod<'_>) -> Reply {
    let eviction = eviction_object(call)?;
    let name = call.info.name.as_str();
    if meta_str(&eviction, "name") != name {
        return Err(ApiError::BadRequest(
            "name in URL does not match name in Eviction object".into(),
        ));
    }
    let options = delete_options(call, &eviction)?;
    let namespace = call.info.namespace.as_str();
    let dry_run = is_dry_run(&options)?;
    let resource_version_set = !options["preconditions"]["resourceVersion"].is_null();

    // A pod that already caused its disruption (or cannot run yet) is deleted at once.
    let mut attempt = 0;
    let pod = loop {
        attempt += 1;
        let pod = current_pod(call, pods)?;
        if !can_ignore_budgets(&pod) {
            break pod;
        }
        let mut deletion = options.clone();
        if should_enforce_resource_version(&pod) && !resource_version_set {
            deletion["preconditions"]["resourceVersion"] =
                pod["metadata"]["resourceVersion"].clone();
        }
        match mark_and_delete(call, pods, &deletion, dry_run, delete) {
            Err(ApiError::Conflict { .. }) if !resource_version_set && attempt < ATTEMPTS => {}
            Err(e) => return Err(e),
            Ok(()) => return Ok(success()),
        }
    };

    let budgets = budgets_of(call, namespace, &pod);
    let mut deletion = options.clone();
    let mut unready_without_disruption = false;
    match budgets.as_slice() {
        [] => {}
        [budget] => {
            let budget_name = meta_str(budget, "name").to_string();
            if !is_ready(&pod) && unhealthy_pod_can_go(budget) {
                unready_without_disruption = true;
            } else if let Some(refused) =
                take_disruption(call, namespace, &budget_name, name, budget, dry_run)?
            {
                return Ok(refused);
            }
            if unready_without_disruption {
                // The pod must not have become Ready since it was read.
                deletion["preconditions"]["resourceVersion"] =
                    pod["metadata"]["resourceVersion"].clone();
            }
            return match mark_and_delete(call, pods, &deletion, dry_run, delete) {
                Err(ApiError::Conflict { .. })
                    if unready_without_disruption && !resource_version_set =>
                {
                    Ok(still_processed(&budget_name))
                }
                Err(e) => Err(e),
                Ok(()) => Ok(success()),
            };
        }
        _ => {
            return Ok((
                500,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                       "code": 500}),
            ));
        }
    }
    mark_and_delete(call, pods, &deletion, dry_run, delete)?;
    Ok(success())
}

/// The answer to an eviction carried out.
fn success() -> (u16, Value) {
    (
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

/// The Eviction in the request's body (an empty body is an Eviction naming nothing).
fn eviction_object(call: &Call<'_>) -> Result<Value, ApiError> {
    if call.body.is_empty() {
        return Ok(json!({}));
    }
    body_object(call)
}

/// The Eviction's `deleteOptions` with the request's `dryRun` pushed into them
/// (`propagateDryRun`); refuses the option that may not be set for an eviction.
fn delete_options(call: &Call<'_>, eviction: &Value) -> Result<Value, ApiError> {
    let mut options = match eviction.get("deleteOptions") {
        Some(o) if o.is_object() => o.clone(),
        _ => json!({}),
    };
    let option = "ignoreStoreReadErrorWithClusterBreakingPotential";
    if options[option] == json!(true) {
        return Err(ApiError::invalid(
            "Eviction",
            "policy",
            meta_str(eviction, "name"),
            vec![objects::invalid(
                &format!("deleteOptions.{option}"),
                json!(true),
                "can not be set for pod eviction, try after removing the option",
            )],
        ));
    }
    let requested: Vec<Value> = call
        .query
        .get("dryRun")
        .map(|d| json!(d))
        .into_iter()
        .collect();
    let in_options = options["dryRun"].as_array().cloned().unwrap_or_default();
    if in_options.is_empty() {
        if !requested.is_empty() {
            options["dryRun"] = json!(requested);
        }
    } else if !requested.is_empty() && requested != in_options {
        let words = |values: &[Value]| {
            values
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Err(ApiError::Unclassified(format!(
            "Non-matching dry-run options in request and content: [{}] and [{}]",
            words(&requested),
            words(&in_options)
        )));
    }
    Ok(options)
}

/// Whether the options ask for a dry run; `All` is the only value there is.
fn is_dry_run(options: &Value) -> Result<bool, ApiError> {
    let values = options["dryRun"].as_array().cloned().unwrap_or_default();
    for value in &values {
        if value != "All" {
            return Err(ApiError::BadRequest(format!(
                "dryRun: Unsupported value: {value}: supported values: \"All\""
            )));
        }
    }
    Ok(!values.is_empty())
}

fn current_pod(call: &Call<'_>, pods: &ResourceType) -> Result<Value, ApiError> {
    call.state
        .store
        .get(&pods.gr(), &call.info.namespace, &call.info.name)
        .ok_or_else(|| ApiError::not_found(&pods.gr(), &call.info.name))
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn is_deleting(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
}

/// `canIgnorePDB`: a pod that ran to its end, has not started, or is already being
/// deleted disrupts nothing more by going.
fn can_ignore_budgets(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || is_deleting(pod)
}

/// `shouldEnforceResourceVersion`: a pod that could still become Ready is deleted only in
/// the version read.
fn should_enforce_resource_version(pod: &Value) -> bool {
    !(matches!(phase(pod), "Succeeded" | "Failed") || is_deleting(pod))
}

/// `podutil.IsPodReady`.
fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The budgets of the pod's namespace whose selector picks it; a budget without a
/// selector, or with one that does not parse, picks nothing.
fn budgets_of(call: &Call<'_>, namespace: &str, pod: &Value) -> Vec<Value> {
    let labels = pod["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let (budgets, _) = call.state.store.list(&budgets_resource(), Some(namespace));
    budgets
        .into_iter()
        .filter(|b| {
            let selector = &b["spec"]["selector"];
            selector.is_object() && objects::selector_matches(selector, &labels)
        })
        .collect()
}

fn budgets_resource() -> GroupResource {
    GroupResource::new("policy", "poddisruptionbudgets")
}

fn int(status: &Value, field: &str) -> i64 {
    status[field].as_i64().unwrap_or(0)
}

/// Whether a pod that is not Ready goes without taking a disruption: always under
/// `AlwaysAllow`, and under `IfHealthyBudget` while the budget has the healthy pods it
/// wants.
fn unhealthy_pod_can_go(budget: &Value) -> bool {
    if budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" {
        return true;
    }
    let status = &budget["status"];
    int(status, "currentHealthy") >= int(status, "desiredHealthy")
        && int(status, "desiredHealthy") > 0
}

/// The 429 of a budget its controller has not caught up with.
fn still_processed(budget: &str) -> (u16, Value) {
    too_many_requests(
        10,
        format!("The disruption budget {budget} is still being processed by the server."),
    )
}

fn too_many_requests(retry_after_seconds: i64, cause: String) -> (u16, Value) {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after_seconds > 0 {
        details["retryAfterSeconds"] = json!(retry_after_seconds);
    }
    (
        429,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": REFUSED, "reason": "TooManyRequests", "details": details, "code": 429}),
    )
}

/// Why a budget refuses a disruption.
enum Refusal {
    /// An answer of the eviction (429).
    Answer((u16, Value)),
    /// An error of the eviction (403).
    Error(ApiError),
}

/// `checkAndDecrement`: refuses if the budget cannot spare the pod, else the budget's
/// status with one disruption taken (and the pod recorded as awaited, unless `dry_run`).
fn decremented(budget: &Value, pod: &str, dry_run: bool) -> Result<Value, Refusal> {
    let name = meta_str(budget, "name");
    let status = &budget["status"];
    let generation = budget["metadata"]["generation"].as_i64().unwrap_or(0);
    if int(status, "observedGeneration") < generation {
        return Err(Refusal::Answer(still_processed(name)));
    }
    let allowed = int(status, "disruptionsAllowed");
    let forbidden = |why: &str| {
        Refusal::Error(ApiError::Forbidden {
            message: format!("poddisruptionbudget.policy {name:?} is forbidden: {why}"),
            gr: GroupResource::new("policy", "poddisruptionbudget"),
            name: name.to_string(),
        })
    };
    if allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    let awaited = status["disruptedPods"].as_object().map_or(0, |m| m.len());
    if awaited > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(Refusal::Answer(too_many_requests(
            0,
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int(status, "desiredHealthy"),
                int(status, "currentHealthy")
            ),
        )));
    }
    let mut updated = budget.clone();
    let status = &mut updated["status"];
    status["disruptionsAllowed"] = json!(allowed - 1);
    if allowed == 1 {
        insufficient_pods(status);
    }
    if !dry_run {
        if !status["disruptedPods"].is_object() {
            status["disruptedPods"] = json!({});
        }
        status["disruptedPods"][pod] = json!(objects::now());
    }
    Ok(updated)
}

/// `UpdateDisruptionAllowedCondition` with no disruption left (`meta.SetStatusCondition`:
/// the transition time moves only with the status, the message is emptied).
fn insufficient_pods(status: &mut Value) {
    let observed = status["observedGeneration"].clone();
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    let fresh = json!({"type": "DisruptionAllowed", "status": "False",
                       "reason": "InsufficientPods", "message": "",
                       "observedGeneration": observed, "lastTransitionTime": objects::now()});
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionAllowed")
    {
        Some(existing) => {
            if existing["status"] != fresh["status"] {
                existing["status"] = fresh["status"].clone();
                existing["lastTransitionTime"] = fresh["lastTransitionTime"].clone();
            }
            for key in ["reason", "message", "observedGeneration"] {
                existing[key] = fresh[key].clone();
            }
        }
        None => conditions.push(fresh),
    }
}

/// Takes one disruption from the budget for the pod: in the budget read for a dry run,
/// else in one write of its status through the store (the budget as it is then). A
/// refusal on the budget's behalf is the answer returned.
fn take_disruption(
    call: &Call<'_>,
    namespace: &str,
    budget: &str,
    pod: &str,
    listed: &Value,
    dry_run: bool,
) -> Result<Option<(u16, Value)>, ApiError> {
    let refusal = |refusal: Refusal| match refusal {
        Refusal::Answer(answer) => Ok(Some(answer)),
        Refusal::Error(e) => Err(e),
    };
    if dry_run {
        return decremented(listed, pod, true).map_or_else(refusal, |_| Ok(None));
    }
    let resource = budgets_resource();
    let Some(rt) = call.state.registry().get(&resource).cloned() else {
        return Err(ApiError::NoSuchResource);
    };
    let mut refused = None;
    call.state.write(&rt, namespace, budget, |current| {
        let current = current.ok_or_else(|| ApiError::not_found(&resource, budget))?;
        match decremented(current, pod, false) {
            Ok(mut updated) => {
                apply::record_update(
                    current,
                    &mut updated,
                    MANAGER,
                    &rt.kind,
                    &objects::now(),
                    Some("status"),
                );
                Ok(Write::Put(updated))
            }
            Err(Refusal::Answer(answer)) => {
                refused = Some(answer);
                Ok(Write::Keep)
            }
            Err(Refusal::Error(e)) => Err(e),
        }
    })?;
    Ok(refused)
}

/// Marks the pod `DisruptionTarget` (unless `dry_run`) and deletes it with `options`
/// (`addConditionAndDeletePod`); the preconditions are checked against the pod as it is
/// marked.
fn mark_and_delete(
    call: &Call<'_>,
    pods: &ResourceType,
    options: &Value,
    dry_run: bool,
    delete: &DeletePod<'_>,
) -> Result<(), ApiError> {
    let namespace = call.info.namespace.as_str();
    let name = call.info.name.as_str();
    let mut options = options.clone();
    if !dry_run {
        let written = call.state.write(pods, namespace, name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(&pods.gr(), name))?;
            check_preconditions(name, &options["preconditions"], current)?;
            let mut pod = current.clone();
            objects::set_pod_condition(
                &mut pod,
                json!({"type": "DisruptionTarget", "status": "True",
                       "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}),
            );
            Ok(if &pod == current {
                Write::Keep
            } else {
                Write::Put(pod)
            })
        })?;
        // The condition's write moved the resourceVersion a precondition names.
        if !options["preconditions"]["resourceVersion"].is_null()
            && let Some(pod) = &written.object
        {
            options["preconditions"]["resourceVersion"] =
                pod["metadata"]["resourceVersion"].clone();
        }
    }
    delete(namespace, name, &options)
}

/// The preconditions of the eviction's options, as the update marking the pod checks them
/// (its conflicts name the kind `Pod`).
fn check_preconditions(name: &str, preconditions: &Value, pod: &Value) -> Result<(), ApiError> {
    let kind = GroupResource::new("", "Pod");
    if let Some(uid) = preconditions["uid"].as_str().filter(|u| !u.is_empty()) {
        let actual = meta_str(pod, "uid");
        if uid != actual {
            return Err(ApiError::conflict(
                &kind,
                name,
                format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
                ),
            ));
        }
    }
    if let Some(version) = preconditions["resourceVersion"]
        .as_str()
        .filter(|v| !v.is_empty())
    {
        let actual = meta_str(pod, "resourceVersion");
        if version != actual {
            return Err(ApiError::conflict(
                &kind,
                name,
                format!(
                    "the ResourceVersion in the precondition ({version}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;
    use crate::request::{self, Query};
    use crate::state::{ApiServerConfig, State};
    use bytes::Bytes;
    use hyper::Method;

    const PODS: &str = "/api/v1/namespaces/default/pods";
    const BUDGETS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
    const MERGE: &str = "application/merge-patch+json";

    fn state() -> State {
        State::new(ApiServerConfig::default(), String::new())
    }

    fn send(state: &State, method: Method, path: &str, content_type: &str, body: Value) -> Reply {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let query = Query::parse(Some(query));
        let info = request::parse(&method, path, &query);
        let user = UserInfo::admin();
        Call {
            state,
            info: &info,
            query: &query,
            content_type: content_type.into(),
            body: if body.is_null() {
                Bytes::new()
            } else {
                Bytes::from(body.to_string())
            },
            manager: "test".into(),
            user: &user,
        }
        .serve()
    }

    fn get(state: &State, path: &str) -> Option<Value> {
        send(state, Method::GET, path, "application/json", Value::Null)
            .ok()
            .map(|(_, object)| object)
    }

    fn evict(state: &State, pod: &str, query: &str) -> Reply {
        let eviction =
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}});
        send(
            state,
            Method::POST,
            &format!("{PODS}/{pod}/eviction{query}"),
            "application/json",
            eviction,
        )
    }

    /// A pod labelled `app: web` on `node-a`, in `phase` and Ready or not.
    fn pod(state: &State, name: &str, phase: &str, ready: bool) {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "example/app:1"}]}});
        send(state, Method::POST, PODS, "application/json", pod).unwrap();
        let ready = if ready { "True" } else { "False" };
        let status = json!({"status": {"phase": phase,
                                       "conditions": [{"type": "Ready", "status": ready}]}});
        let path = format!("{PODS}/{name}/status");
        send(state, Method::PATCH, &path, MERGE, status).unwrap();
    }

    /// A budget over `app: web` with the status its controller would have written.
    fn budget(state: &State, name: &str, spec: Value, status: Value) {
        let mut budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}});
        if let (Some(all), Some(more)) = (budget["spec"].as_object_mut(), spec.as_object()) {
            all.extend(more.clone());
        }
        send(state, Method::POST, BUDGETS, "application/json", budget).unwrap();
        let path = format!("{BUDGETS}/{name}/status");
        send(
            state,
            Method::PATCH,
            &path,
            MERGE,
            json!({"status": status}),
        )
        .unwrap();
    }

    fn observed(allowed: i64, current: i64, desired: i64) -> Value {
        json!({"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": current,
               "desiredHealthy": desired, "expectedPods": current})
    }

    #[test]
    fn an_eviction_marks_the_pod_and_deletes_it_gracefully() {
        let s = state();
        pod(&s, "p", "Pending", false);
        let (code, answer) = evict(&s, "p", "").unwrap();
        assert_eq!((code, answer["status"].as_str()), (201, Some("Success")));
        let p = get(&s, &format!("{PODS}/p")).unwrap();
        assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30);
        let target = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "DisruptionTarget")
            .cloned()
            .unwrap();
        assert_eq!(target["reason"], "EvictionByEvictionAPI");
        let other =
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}});
        let refused = send(
            &s,
            Method::POST,
            &format!("{PODS}/p/eviction"),
            "application/json",
            other,
        );
        assert!(matches!(refused, Err(ApiError::BadRequest(_))));
        assert!(matches!(
            evict(&s, "missing", ""),
            Err(ApiError::NotFound { .. })
        ));
    }

    #[test]
    fn a_pod_that_is_not_running_goes_whatever_its_budget_says() {
        let s = state();
        pod(&s, "pending", "Pending", false);
        pod(&s, "done", "Succeeded", false);
        budget(&s, "web", json!({"minAvailable": 5}), observed(0, 0, 5));
        assert_eq!(evict(&s, "pending", "").unwrap().0, 201);
        assert_eq!(evict(&s, "done", "").unwrap().0, 201);
        let status = &get(&s, &format!("{BUDGETS}/web")).unwrap()["status"];
        assert_eq!(status["disruptionsAllowed"], 0);
        assert!(status.get("disruptedPods").is_none());
    }

    #[test]
    fn an_allowed_eviction_takes_a_disruption_from_the_budget_before_deleting_the_pod() {
        let s = state();
        pod(&s, "a", "Running", true);
        pod(&s, "b", "Running", true);
        budget(&s, "web", json!({"minAvailable": 1}), observed(1, 2, 1));
        assert_eq!(evict(&s, "a", "").unwrap().0, 201);
        let budget = get(&s, &format!("{BUDGETS}/web")).unwrap();
        let status = &budget["status"];
        assert_eq!(status["disruptionsAllowed"], 0);
        assert!(status["disruptedPods"]["a"].is_string());
        assert_eq!(status["conditions"][0]["reason"], "InsufficientPods");
        let managers: Vec<&Value> = budget["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["manager"])
            .collect();
        assert!(managers.contains(&&json!(MANAGER)));
        let a = get(&s, &format!("{PODS}/a")).unwrap();
        assert!(a["metadata"]["deletionTimestamp"].is_string());
    }

    #[test]
    fn a_budget_with_no_disruption_left_refuses_with_too_many_requests() {
        let s = state();
        pod(&s, "a", "Running", true);
        budget(&s, "web", json!({"minAvailable": 1}), observed(0, 1, 1));
        let (code, status) = evict(&s, "a", "").unwrap();
        assert_eq!(code, 429);
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["message"], REFUSED);
        assert_eq!(
            status["details"],
            json!({"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]})
        );
        assert!(get(&s, &format!("{PODS}/a")).unwrap()["metadata"]["deletionTimestamp"].is_null());
    }

    #[test]
    fn a_budget_not_yet_observed_asks_to_come_back_in_ten_seconds() {
        let s = state();
        pod(&s, "a", "Running", true);
        budget(
            &s,
            "web",
            json!({"minAvailable": 1}),
            json!({"disruptionsAllowed": 3}),
        );
        let (code, status) = evict(&s, "a", "").unwrap();
        assert_eq!(code, 429);
        assert_eq!(status["details"]["retryAfterSeconds"], 10);
        assert_eq!(
            status["details"]["causes"][0]["message"],
            "The disruption budget web is still being processed by the server."
        );
    }

    #[test]
    fn a_pod_under_two_budgets_is_not_evicted() {
        let s = state();
        pod(&s, "a", "Running", true);
        budget(&s, "one", json!({"minAvailable": 0}), observed(1, 1, 0));
        budget(&s, "two", json!({"minAvailable": 0}), observed(1, 1, 0));
        let (code, status) = evict(&s, "a", "").unwrap();
        assert_eq!((code, status["code"].as_i64()), (500, Some(500)));
        assert!(status.get("reason").is_none());
    }

    #[test]
    fn an_unready_pod_goes_under_always_allow_and_waits_for_a_healthy_budget_otherwise() {
        let s = state();
        pod(&s, "a", "Running", false);
        budget(&s, "web", json!({"minAvailable": 1}), observed(0, 0, 1));
        assert_eq!(evict(&s, "a", "").unwrap().0, 429);
        let path = format!("{BUDGETS}/web");
        let policy = json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}});
        send(&s, Method::PATCH, &path, MERGE, policy).unwrap();
        let patch = json!({"status": {"observedGeneration": 2}});
        send(&s, Method::PATCH, &format!("{path}/status"), MERGE, patch).unwrap();
        assert_eq!(evict(&s, "a", "").unwrap().0, 201);
        assert!(
            get(&s, &path).unwrap()["status"]
                .get("disruptedPods")
                .is_none()
        );
    }

    #[test]
    fn an_unready_pod_goes_without_a_disruption_while_the_budget_is_healthy() {
        let s = state();
        pod(&s, "a", "Running", false);
        budget(&s, "web", json!({"minAvailable": 1}), observed(0, 1, 1));
        assert_eq!(evict(&s, "a", "").unwrap().0, 201);
        let status = &get(&s, &format!("{BUDGETS}/web")).unwrap()["status"];
        assert_eq!(status["disruptionsAllowed"], 0);
        assert!(status.get("disruptedPods").is_none());
    }

    #[test]
    fn a_dry_run_eviction_changes_neither_the_pod_nor_the_budget() {
        let s = state();
        pod(&s, "a", "Running", true);
        budget(&s, "web", json!({"minAvailable": 0}), observed(1, 1, 0));
        let before = get(&s, &format!("{BUDGETS}/web")).unwrap();
        assert_eq!(evict(&s, "a", "?dryRun=All").unwrap().0, 201);
        assert_eq!(get(&s, &format!("{BUDGETS}/web")).unwrap(), before);
        let a = get(&s, &format!("{PODS}/a")).unwrap();
        assert!(a["metadata"]["deletionTimestamp"].is_null());
        assert!(
            a["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != "DisruptionTarget")
        );
    }

    #[test]
    fn a_precondition_on_another_uid_is_a_conflict_on_the_pod() {
        let s = state();
        pod(&s, "a", "Running", true);
        let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"},
            "deleteOptions": {"preconditions": {"uid": "00000000-0000-0000-0000-000000000002"}}});
        let answer = send(
            &s,
            Method::POST,
            &format!("{PODS}/a/eviction"),
            "application/json",
            eviction,
        );
        let Err(ApiError::Conflict { gr, .. }) = answer else {
            panic!("a conflict, not {answer:?}");
        };
        assert_eq!(gr.resource, "Pod");
    }
}
