//! Steps about the operator under test: deploying its manifests with the election mode and
//! timings a scenario states, scaling and rolling it out, reading its pods' logs. What the
//! operator is (its namespace, lock, manifests, binary) comes from [`crate::subject`].

use cucumber::{given, then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};

use super::wait::eventually;
use serde_json::json;

use super::{Dur, World};
use crate::deploy::{Manifest, apply_all};
use crate::subject::{OperatorSetup, Subject, kind_of};

/// How features state a setup: the lease mode's timings are written as they are in a step.
impl OperatorSetup {
    /// Lease mode of `subject` with `timings` written `LEASE/RENEW/RETRY` (e.g. `4s/3s/1s`)
    /// and `extra` flags after them.
    ///
    /// # Panics
    /// When the timings are not three durations, or the operator's profile has no lease
    /// mode (the scenarios of `@lease` features are then left out).
    pub fn lease(subject: &Subject, replicas: i32, timings: &str, extra: &str) -> Self {
        let parts: Vec<&str> = timings.split('/').collect();
        let [lease, renew, retry] = parts[..] else {
            panic!("timings are LEASE/RENEW/RETRY, e.g. 4s/3s/1s: {timings}");
        };
        let lease_duration = lease.parse::<Dur>().unwrap_or_else(|e| panic!("{e}")).0;
        for p in [renew, retry] {
            p.parse::<Dur>().unwrap_or_else(|e| panic!("{e}"));
        }
        let mut args = subject
            .election
            .lease_args([lease, renew, retry])
            .unwrap_or_else(|| {
                panic!(
                    "the profile of {} has no lease mode (election.lease)",
                    subject.name
                )
            });
        args.extend(extra.split_whitespace().map(str::to_string));
        Self {
            replicas,
            args,
            lease_duration: Some(lease_duration),
        }
    }

    /// Leader-for-life mode of `subject`.
    ///
    /// # Panics
    /// When the operator's profile has no leader-for-life mode (the scenarios of
    /// `@for-life` features and scenarios are then left out).
    pub fn for_life(subject: &Subject, replicas: i32) -> Self {
        let args = subject.election.for_life.clone().unwrap_or_else(|| {
            panic!(
                "the profile of {} has no leader-for-life mode (election.forLife)",
                subject.name
            )
        });
        Self {
            replicas,
            args,
            lease_duration: None,
        }
    }
}

/// The operator's manifests for this scenario's placement and `setup`.
fn manifests(world: &World, setup: &OperatorSetup) -> Vec<Manifest> {
    let placement = world.provider().expect("cluster").placement();
    world
        .subject()
        .render(setup, &placement)
        .expect("operator/config is readable")
}

/// Deploys the operator into the scenario's cluster.
///
/// # Panics
/// When the manifests cannot be read or applied (the step fails with the reason).
pub async fn deploy(world: &mut World, setup: OperatorSetup) {
    world.start_recorder();
    let manifests = manifests(world, &setup);
    let client = world.client().expect("cluster");
    apply_all(&client, &manifests, None)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "deploying operator/config failed: {}",
                crate::steps::chain(&e)
            )
        });
    world.note(&format!(
        "deployed {}: {} replicas, {}",
        world.subject().deployment,
        setup.replicas,
        setup.args.join(" ")
    ));
    world.operator = Some(setup);
}

#[given(expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word}")]
async fn deployed_lease(world: &mut World, replicas: i32, timings: String) {
    let setup = OperatorSetup::lease(world.subject(), replicas, &timings, "");
    world.lease_duration = setup.lease_duration;
    deploy(world, setup).await;
}

#[given(
    expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word} and flags {string}"
)]
async fn deployed_lease_with_flags(
    world: &mut World,
    replicas: i32,
    timings: String,
    flags: String,
) {
    let setup = OperatorSetup::lease(world.subject(), replicas, &timings, &flags);
    world.lease_duration = setup.lease_duration;
    deploy(world, setup).await;
}

#[given(
    expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word}, releasing its lease on shutdown"
)]
async fn deployed_lease_releasing(world: &mut World, replicas: i32, timings: String) {
    let subject = world.subject();
    let release = subject
        .election
        .release_on_cancel
        .as_ref()
        .unwrap_or_else(|| {
            panic!(
                "the profile of {} has no election.releaseOnCancel (its @release-on-cancel \
             scenarios are left out)",
                subject.name
            )
        });
    let setup = OperatorSetup::lease(subject, replicas, &timings, &release.join(" "));
    world.lease_duration = setup.lease_duration;
    deploy(world, setup).await;
}

#[given(
    expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word} and no right to leases"
)]
async fn deployed_without_lease_rights(world: &mut World, replicas: i32, timings: String) {
    world.start_recorder();
    let setup = OperatorSetup::lease(world.subject(), replicas, &timings, "");
    let mut manifests = manifests(world, &setup);
    for m in &mut manifests {
        if kind_of(&m.object) == "Role"
            && let Some(rules) = m.object.data["rules"].as_array_mut()
        {
            rules.retain(|r| r["apiGroups"] != json!(["coordination.k8s.io"]));
        }
    }
    apply(world, &manifests).await;
    world.note(&format!(
        "deployed {} without rights to leases",
        world.subject().deployment
    ));
    world.lease_duration = setup.lease_duration;
    world.operator = Some(setup);
}

#[when("the operator's Role is given its rights to leases")]
async fn lease_rights_restored(world: &mut World) {
    let setup = world.operator.clone().expect("the operator was deployed");
    let roles: Vec<Manifest> = manifests(world, &setup)
        .into_iter()
        .filter(|m| kind_of(&m.object) == "Role")
        .collect();
    apply(world, &roles).await;
    world.note("the operator's Role has its rights to leases again");
}

#[given(
    expr = "a second operator {string} is deployed with {int} replica(s) in lease mode with timings {word} and the same lock"
)]
async fn second_operator(world: &mut World, instance: String, replicas: i32, timings: String) {
    let setup = OperatorSetup::lease(world.subject(), replicas, &timings, "");
    let mut deployment = manifests(world, &setup)
        .into_iter()
        .find(|m| kind_of(&m.object) == "Deployment")
        .expect("operator/config has the manager Deployment");
    let object = &mut deployment.object;
    let name = format!(
        "{}-{instance}",
        object.metadata.name.clone().unwrap_or_default()
    );
    object.metadata.name = Some(name.clone());
    let spec = &mut object.data["spec"];
    spec["selector"]["matchLabels"]["app.kubernetes.io/instance"] = json!(instance);
    spec["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] = json!(instance);
    apply(world, &[deployment]).await;
    world.note(&format!(
        "deployed a second operator {name} with the same lock"
    ));
}

async fn apply(world: &World, manifests: &[Manifest]) {
    let client = world.client().expect("cluster");
    apply_all(&client, manifests, None)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "applying operator/config failed: {}",
                crate::steps::chain(&e)
            )
        });
}

#[then(expr = "within {duration} every operator pod has failed with {string}")]
async fn pods_fail_with(world: &mut World, within: Dur, message: String) {
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let what = format!("every operator pod exited with {message:?} in its log");
    let selector = world.subject().pod_selector.as_str();
    eventually(within.0, &what, || {
        let (pods, message) = (&pods, &message);
        async move {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| format!("listing the operator pods: {e}"))?;
            let mut failed = 0;
            let mut seen = Vec::new();
            for pod in &list.items {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let exited = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.restart_count > 0
                                || c.state.as_ref().is_some_and(|s| s.terminated.is_some())
                        })
                    });
                let log = logs_of(pods, &name).await;
                if exited && log.contains(message.as_str()) {
                    failed += 1;
                }
                seen.push(format!(
                    "{name} (exited: {exited}): {}",
                    log.lines().last().unwrap_or("")
                ));
            }
            if !list.items.is_empty() && failed == list.items.len() {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        }
    })
    .await;
}

/// The logs of `pod`: its previous container's (when it restarted) and its current one's.
async fn logs_of(pods: &Api<Pod>, pod: &str) -> String {
    let previous = LogParams {
        previous: true,
        ..LogParams::default()
    };
    let before = pods.logs(pod, &previous).await.unwrap_or_default();
    let now = pods
        .logs(pod, &LogParams::default())
        .await
        .unwrap_or_default();
    before + &now
}

#[then(expr = "within {duration} an operator pod logs {string}")]
async fn pod_logs(world: &mut World, within: Dur, text: String) {
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let what = format!("an operator pod logs {text:?}");
    let selector = world.subject().pod_selector.as_str();
    eventually(within.0, &what, || {
        let (pods, text) = (&pods, &text);
        async move {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| format!("listing the operator pods: {e}"))?;
            let mut names = Vec::new();
            for pod in &list.items {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if logs_of(pods, &name).await.contains(text.as_str()) {
                    return Ok(());
                }
                names.push(name);
            }
            Err(format!("not in the logs of {names:?}"))
        }
    })
    .await;
}

#[then(expr = "within {duration} the old leader logs {string}")]
async fn old_leader_logs(world: &mut World, within: Dur, text: String) {
    let old = world
        .old_leader
        .clone()
        .expect("a step saw another replica take over before this one");
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let what = format!("{old} logs {text:?}");
    eventually(within.0, &what, || {
        let (pods, old, text) = (&pods, &old, &text);
        async move {
            let log = logs_of(pods, old).await;
            if log.contains(text.as_str()) {
                Ok(())
            } else {
                let tail: Vec<&str> = log.lines().rev().take(3).collect();
                Err(format!("its last lines: {tail:?}"))
            }
        }
    })
    .await;
}

#[then("there is no lease")]
async fn no_lease(world: &mut World) {
    let namespace = world.operator_namespace().expect("cluster");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(world.client().expect("cluster"), &namespace);
    let list = leases
        .list(&ListParams::default())
        .await
        .expect("listing leases");
    assert!(
        list.items.is_empty(),
        "expected no Lease in {namespace}, found {:?}",
        list.items
            .iter()
            .map(|l| l.metadata.name.clone())
            .collect::<Vec<_>>()
    );
}

#[when("the operator Deployment is rolled out again")]
async fn rolled_out_again(world: &mut World) {
    let namespace = world.operator_namespace().expect("cluster");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(world.client().expect("cluster"), &namespace);
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {
        "opconform.io/restartedAt": chrono::Utc::now().to_rfc3339()
    }}}}});
    let deployment = &world.subject().deployment;
    world.provider().expect("cluster").faults().record(
        "rollout",
        &format!("deployment {namespace}/{deployment}"),
        "",
    );
    deployments
        .patch(
            deployment,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap_or_else(|e| panic!("restarting the operator Deployment failed: {e}"));
}

#[then(expr = "within {duration} the operator Deployment is rolled out")]
async fn rolled_out(world: &mut World, within: Dur) {
    let namespace = world.operator_namespace().expect("cluster");
    crate::deploy::wait_for_rollout(
        &world.client().expect("cluster"),
        &namespace,
        &world.subject().deployment,
        within.0,
    )
    .await
    .unwrap_or_else(|e| panic!("{}", crate::steps::chain(&e)));
}

#[given(expr = "the operator is deployed with {int} replica(s) and the flags {string}")]
async fn deployed_with_flags(world: &mut World, replicas: i32, flags: String) {
    let args = flags.split_whitespace().map(str::to_string).collect();
    deploy(
        world,
        OperatorSetup {
            replicas,
            args,
            lease_duration: None,
        },
    )
    .await;
}

#[when(expr = "the operator is scaled to {int} replica(s)")]
async fn operator_scaled(world: &mut World, replicas: i32) {
    let namespace = world.operator_namespace().expect("cluster");
    Api::<Deployment>::namespaced(world.client().expect("cluster"), &namespace)
        .patch(
            &world.subject().deployment,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .unwrap_or_else(|e| panic!("scaling the operator to {replicas} failed: {e}"));
    world.note(&format!("scaled the operator to {replicas} replicas"));
}

#[then(expr = "within {duration} the operator has no pods")]
async fn no_operator_pods(world: &mut World, within: Dur) {
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let selector = world.subject().pod_selector.as_str();
    eventually(within.0, "no operator pod exists", || async {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| format!("listing the operator's pods: {e}"))?;
        let names: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        if names.is_empty() {
            Ok(())
        } else {
            Err(format!("pods {names:?}"))
        }
    })
    .await;
}

#[given(expr = "the operator is deployed with {int} replica(s) in for-life mode")]
async fn deployed_for_life(world: &mut World, replicas: i32) {
    let setup = OperatorSetup::for_life(world.subject(), replicas);
    deploy(world, setup).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_timings_as_features_write_them_become_the_operators_flags() {
        let setup = OperatorSetup::lease(&Subject::memcached(), 2, "4s/3s/1s", "--standby=poll");
        assert_eq!(setup.replicas, 2);
        assert_eq!(
            setup.args,
            [
                "--leader-election=lease",
                "--lease-duration=4s",
                "--renew-deadline=3s",
                "--retry-period=1s",
                "--standby=poll",
            ]
        );
        assert_eq!(
            setup.lease_duration,
            Some(std::time::Duration::from_secs(4))
        );
    }
}
