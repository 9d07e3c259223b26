//! What the operator's pods were doing when a step that waited on the operator ran out of
//! time: each pod's phase, readiness, restarts, the last exit code and reason of each
//! container, and the last lines of its log (the previous container's when it restarted).
//! A failure then says "every replica exits with: unable to find leader election
//! namespace" instead of only "no leader within 30s".

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, ListParams, LogParams};

use super::{StepError, World};

/// How many lines of each pod's log a diagnosis shows.
pub const LOG_LINES: usize = 5;

/// The diagnosis of the operator's pods, one paragraph per pod; what went wrong reading
/// them when they cannot be read.
pub async fn operator_pods(world: &World) -> String {
    match read(world).await {
        Ok(text) => text,
        Err(e) => format!(
            "the operator's pods could not be read: {}",
            super::chain(&e)
        ),
    }
}

/// `waited` (a wait on the operator that ran out) with what the operator's pods were doing
/// then; any other error as it is.
pub async fn explained(world: &World, waited: StepError) -> StepError {
    match waited {
        StepError::NotWithin { .. } | StepError::NotThroughout { .. } => StepError::OperatorPods {
            pods: operator_pods(world).await,
            waited: Box::new(waited),
        },
        other => other,
    }
}

async fn read(world: &World) -> Result<String, StepError> {
    use super::Doing as _;
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let selector = world.subject().pod_selector.as_str();
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .doing(format!(
            "listing the operator's pods ({selector}) in {namespace}"
        ))?;
    if list.items.is_empty() {
        return Ok(format!(
            "no operator pod in {namespace} matches {selector}: was the operator deployed, \
             and does its Deployment create pods?"
        ));
    }
    let mut text = format!("the operator's pods in {namespace}:");
    for pod in &list.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let restarted = statuses(pod).any(|c| c.restart_count > 0);
        let log = log_tail(&pods, &name, restarted).await;
        text.push_str("\n  ");
        text.push_str(&describe(pod, &log).replace('\n', "\n  "));
    }
    Ok(text)
}

fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
}

/// The last lines of `pod`'s log: of its previous container when it restarted (why it
/// exited), else of its current one. Empty when there is none.
async fn log_tail(pods: &Api<Pod>, pod: &str, restarted: bool) -> String {
    let params = LogParams {
        previous: restarted,
        tail_lines: Some(LOG_LINES as i64),
        ..LogParams::default()
    };
    match pods.logs(pod, &params).await {
        Ok(log) => log,
        Err(e) => format!("(its log could not be read: {e})"),
    }
}

/// One pod: `name: phase, ready, restarts` and each container's last exit, then the last
/// lines of `log`.
pub fn describe(pod: &Pod, log: &str) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or("(unnamed)");
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Unknown");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let restarts: i32 = statuses(pod).map(|c| c.restart_count).sum();
    let mut text = format!(
        "{name}: {phase}, {}, {restarts} restart{}",
        if ready { "ready" } else { "not ready" },
        if restarts == 1 { "" } else { "s" }
    );
    if pod.metadata.deletion_timestamp.is_some() {
        text.push_str(", terminating");
    }
    for container in statuses(pod) {
        let state = container.state.as_ref();
        let exited = state.and_then(|s| s.terminated.as_ref()).or_else(|| {
            container
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
        });
        if let Some(exit) = exited {
            text.push_str(&format!(
                "; {} last exited with code {}{}",
                container.name,
                exit.exit_code,
                exit.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ));
        }
        if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
            text.push_str(&format!(
                "; {} waiting: {}",
                container.name,
                waiting.reason.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        text.push_str("\nits log is empty");
    } else {
        text.push_str("\nlast lines of its log:");
        for line in &lines[lines.len().saturating_sub(LOG_LINES)..] {
            text.push_str("\n  ");
            text.push_str(line);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_crash_looping_pod_reads_with_its_restarts_last_exit_and_last_log_lines() {
        let crashing = pod(serde_json::json!({
            "metadata": {"name": "op-7d9-abc"},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{
                    "name": "manager", "image": "op:1", "imageID": "", "ready": false,
                    "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}
                }]
            }
        }));
        let log = "starting manager\n\nsetting up\n1\n2\n3\n\
                   unable to find leader election namespace: not running in-cluster\n";
        let text = describe(&crashing, log);
        assert_eq!(
            text,
            "op-7d9-abc: Running, not ready, 3 restarts; manager last exited with code 1 \
             (Error); manager waiting: CrashLoopBackOff\n\
             last lines of its log:\n  setting up\n  1\n  2\n  3\n  \
             unable to find leader election namespace: not running in-cluster"
        );
    }

    #[test]
    fn a_ready_pod_that_never_exited_reads_without_an_exit_and_says_its_log_is_empty() {
        let running = pod(serde_json::json!({
            "metadata": {"name": "op-1"},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "manager", "image": "op:1", "imageID": "", "ready": true,
                    "restartCount": 1, "state": {"running": {}}
                }]
            }
        }));
        assert_eq!(
            describe(&running, "\n"),
            "op-1: Running, ready, 1 restart\nits log is empty"
        );
    }
}
