//! The local control endpoint of a simulated cluster, `/opconform/v1/faults`, so a person
//! (or `opconform fault …`) can inject and undo faults while watching with kubectl. Only
//! reachable with credentials RBAC allows on these non-resource paths (the admin).
//!
//! - `GET  /opconform/v1/faults`: the rules in force and the fault log;
//! - `POST /opconform/v1/faults/rules` `{"match": {…}, "action": {"action": "reject", "code": 500, "reason": "InternalError", "message": "…"}}`
//!   or `{"action": {"action": "delay", "millis": 200}}`, or
//!   `{"action": {"action": "defer", "until": {…}, "milestone": "arrived"|"answered", "millis": 10000}}`
//!   (without `until`: the request is held for `millis`)
//!   → `{"id": N}`;
//! - `DELETE /opconform/v1/faults/rules/N`: allow (remove the rule);
//! - `POST /opconform/v1/faults/pods/NAMESPACE/NAME` with a [`PodFault`];
//! - `POST /opconform/v1/faults/nodes/NAME` with a [`NodeFault`].

use hyper::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::state::State;
use super::status::ApiError;
use crate::faults::{Fate, FaultError, NodeFault, PodFault, RequestMatch, RuleAction};

/// The path prefix of the control endpoint.
pub const PREFIX: &str = "/opconform/v1/faults";

#[derive(Deserialize)]
struct NewRule {
    #[serde(rename = "match", default)]
    matches: RequestMatch,
    action: RuleAction,
    /// For a `hold`: apply only after a request matching this was served.
    #[serde(default)]
    after: Option<RequestMatch>,
}

fn bad_body(expected: &str, e: serde_json::Error) -> ApiError {
    ApiError::BadRequest(format!("the body is not {expected}: {e}"))
}

fn fault_error(e: FaultError) -> ApiError {
    match e {
        FaultError::NoRule(_) | FaultError::NoTarget(_) => ApiError::Custom {
            code: 404,
            reason: "NotFound".into(),
            message: e.to_string(),
        },
        FaultError::NotAnErrorCode(_) => ApiError::BadRequest(e.to_string()),
        FaultError::Unsupported(_) => ApiError::Custom {
            code: 501,
            reason: "NotImplemented".into(),
            message: e.to_string(),
        },
    }
}

/// Serves one request to the control endpoint.
///
/// # Errors
/// 400 for bodies of the wrong shape, 404 for unknown rules, pods or nodes, 501 when the
/// server runs without kubelets (process and network faults need them).
pub fn serve(
    state: &State,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    let rest = path
        .strip_prefix(PREFIX)
        .unwrap_or_default()
        .trim_matches('/');
    let parts: Vec<&str> = if rest.is_empty() {
        vec![]
    } else {
        rest.split('/').collect()
    };
    match (method, parts.as_slice()) {
        (&Method::GET, []) => Ok((
            200,
            json!({"rules": state.faults.rules(), "log": state.faults.log()}),
        )),
        (&Method::POST, ["rules"]) => {
            let rule: NewRule = serde_json::from_slice(body).map_err(|e| {
                bad_body("a rule {\"match\": {...}, \"action\": {\"action\": \"reject\"|\"delay\"|\"hold\"|\"defer\", ...}} (a defer's \"fate\": \"withClient\", \"committed\" or \"answerLost\")", e)
            })?;
            if rule.after.is_some() && !matches!(rule.action, RuleAction::Hold { .. }) {
                return Err(ApiError::BadRequest(
                    "\"after\" applies to hold rules only".into(),
                ));
            }
            let id = match rule.action {
                RuleAction::Reject {
                    code,
                    reason,
                    message,
                } => state
                    .faults
                    .reject(rule.matches, code, &reason, &message)
                    .map_err(fault_error)?,
                RuleAction::Delay { millis } => state
                    .faults
                    .delay(rule.matches, std::time::Duration::from_millis(millis)),
                RuleAction::Hold { millis } => state.faults.hold_sender(
                    rule.matches,
                    std::time::Duration::from_millis(millis),
                    rule.after,
                ),
                RuleAction::Defer {
                    until,
                    milestone,
                    millis,
                    fate: Fate::AnswerLost,
                } => state.faults.lose_answer(
                    rule.matches,
                    until.map(|until| (until, milestone)),
                    std::time::Duration::from_millis(millis),
                ),
                RuleAction::Defer {
                    until: None,
                    millis,
                    fate: Fate::Committed,
                    ..
                } => state
                    .faults
                    .commit_after(rule.matches, std::time::Duration::from_millis(millis)),
                RuleAction::Defer {
                    until: Some(_),
                    fate: Fate::Committed,
                    ..
                } => {
                    return Err(ApiError::BadRequest(
                        "a defer rule whose fate is \"committed\" holds for its millis: it takes no \"until\"".into(),
                    ));
                }
                RuleAction::Defer {
                    until: Some(until),
                    milestone,
                    millis,
                    fate: Fate::WithClient,
                } => state.faults.defer_until(
                    rule.matches,
                    until,
                    milestone,
                    std::time::Duration::from_millis(millis),
                ),
                RuleAction::Defer {
                    until: None,
                    millis,
                    fate: Fate::WithClient,
                    ..
                } => state
                    .faults
                    .defer_for(rule.matches, std::time::Duration::from_millis(millis)),
            };
            Ok((201, json!({"id": id})))
        }
        (&Method::DELETE, ["rules", id]) => {
            let id: u64 = id
                .parse()
                .map_err(|_| ApiError::BadRequest(format!("rule id {id:?} is not a number")))?;
            let rule = state.faults.allow(id).map_err(fault_error)?;
            Ok((200, json!(rule)))
        }
        (&Method::POST, ["pods", namespace, name]) => {
            let fault: PodFault = serde_json::from_slice(body).map_err(|e| {
                bad_body("a pod fault {\"verb\": \"crash\"|\"hold\"|\"release\"|\"partition\"|\"repair\"|\"delay\"|\"skew\", ...}", e)
            })?;
            let target = state.fault_target().ok_or_else(no_kubelets)?;
            state
                .faults
                .apply_pod(target.as_ref(), namespace, name, &fault)
                .map_err(fault_error)?;
            Ok((200, json!({"applied": fault})))
        }
        (&Method::POST, ["nodes", name]) => {
            let fault: NodeFault = serde_json::from_slice(body).map_err(|e| {
                bad_body(
                    "a node fault {\"verb\": \"hold\"|\"release\"|\"partition\"|\"repair\", ...}",
                    e,
                )
            })?;
            let target = state.fault_target().ok_or_else(no_kubelets)?;
            state
                .faults
                .apply_node(target.as_ref(), name, &fault)
                .map_err(fault_error)?;
            Ok((200, json!({"applied": fault})))
        }
        _ => Err(ApiError::NoSuchResource),
    }
}

fn no_kubelets() -> ApiError {
    ApiError::Custom {
        code: 501,
        reason: "NotImplemented".into(),
        message: "this simulated api server runs without nodes: pod and node faults need a simulated cluster".into(),
    }
}
