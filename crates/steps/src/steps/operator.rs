//! Steps about the operator under test: deploying its manifests with the election mode and
//! timings a scenario states, scaling and rolling it out, reading its pods' logs. What the
//! operator is (its namespace, lock, manifests, binary) comes from [`crate::subject`].

use cucumber::{given, then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};

use super::wait::eventually;
use serde_json::json;

use super::Doing as _;
use super::{Dur, Step, StepError, World};
use crate::cluster::ProviderError;
use crate::deploy::{DeployError, Manifest, Namespacing, apply_all};
use crate::subject::{LeaseTimings, OperatorSetup, Subject, kind_of};

/// How features state a setup: the lease mode's timings are written as they are in a step.
impl OperatorSetup {
    /// Lease mode of `subject` with `timings` written `LEASE/RENEW/RETRY` (e.g. `4s/3s/1s`)
    /// and `extra` flags after them. An operator whose profile fixes its timings runs at
    /// those instead (the step's are only what it would have asked for).
    ///
    /// # Errors
    /// [`StepError::Unmet`] when the timings are not three durations, or the operator's
    /// profile has no lease mode (the scenarios of `@lease` features are then left out).
    pub fn lease(
        subject: &Subject,
        replicas: i32,
        timings: &str,
        extra: &str,
    ) -> Result<Self, StepError> {
        let stated = LeaseTimings::parse(timings).map_err(StepError::Unmet)?;
        let timings = subject
            .election
            .lease
            .as_ref()
            .and_then(|l| l.fixed)
            .unwrap_or(stated);
        let mut args = subject.election.lease_args(&timings).ok_or_else(|| {
            StepError::Unmet(format!(
                "the profile of {} has no lease mode (election.lease)",
                subject.name
            ))
        })?;
        args.extend(extra.split_whitespace().map(str::to_string));
        Ok(Self {
            replicas,
            args,
            timings: Some(timings),
        })
    }

    /// Leader-for-life mode of `subject`.
    ///
    /// # Errors
    /// [`StepError::Unmet`] when the operator's profile has no leader-for-life mode (the
    /// scenarios of `@for-life` features and scenarios are then left out).
    pub fn for_life(subject: &Subject, replicas: i32) -> Result<Self, StepError> {
        let args = subject.election.for_life.clone().ok_or_else(|| {
            StepError::Unmet(format!(
                "the profile of {} has no leader-for-life mode (election.forLife)",
                subject.name
            ))
        })?;
        Ok(Self {
            replicas,
            args,
            timings: None,
        })
    }
}

/// A failure of the operator's manifests (read, applied) as the provider's: the operator
/// under test could not be put into the cluster; its causes stay in the chain.
fn operator_error(e: DeployError) -> ProviderError {
    ProviderError::Operator(Box::new(e))
}

/// The operator's manifests for this scenario's placement and `setup`.
fn manifests(world: &World, setup: &OperatorSetup) -> Result<Vec<Manifest>, StepError> {
    let placement = world.provider()?.placement();
    world
        .subject()
        .render(setup, &placement)
        .map_err(operator_error)
        .doing(format!("reading {}", manifests_named(world)))
}

/// The operator's manifests as a person names them: whose, and where its profile says.
fn manifests_named(world: &World) -> String {
    let subject = world.subject();
    format!(
        "the manifests of {} (its profile's manifests: {})",
        subject.name,
        subject.manifests.describe()
    )
}

/// The manager Deployment of the operator's manifests for `setup`.
fn manager_deployment(world: &World, setup: &OperatorSetup) -> Result<Manifest, StepError> {
    manifests(world, setup)?
        .into_iter()
        .find(|m| kind_of(&m.object) == "Deployment")
        .ok_or_else(|| {
            StepError::Unmet(format!(
                "{} hold no manager Deployment",
                manifests_named(world)
            ))
        })
}

/// A failed apply of the operator's manifests; a kind the cluster does not serve says how
/// to make the profile and the cluster agree.
fn deploy_error(world: &World, e: DeployError) -> StepError {
    match e {
        DeployError::UnknownKind {
            api_version,
            kind,
            path,
        } => StepError::Unmet(format!(
            "deploying {}: they hold a {api_version} {kind} ({}) that this cluster does not \
             serve: install what serves it first, or leave it out with the profile's \
             leaveOut (kinds: [{kind}]); what was applied before it was removed with the \
             scenario",
            manifests_named(world),
            path.display()
        )),
        e => StepError::Acting {
            doing: format!("deploying {}", manifests_named(world)),
            source: operator_error(e),
        },
    }
}

/// Starts the recorder before the operator is deployed, with the token its metrics ask for.
async fn start_recording(world: &mut World) -> Result<(), StepError> {
    if !world.recording() {
        let token = super::metrics::metrics_token(world).await?;
        world.start_recorder(token);
    }
    Ok(())
}

/// Deploys the operator into the scenario's cluster.
///
/// # Errors
/// When there is no cluster, or the manifests cannot be read or applied (the step fails
/// with the reason).
pub async fn deploy(world: &mut World, setup: OperatorSetup) -> Result<(), StepError> {
    start_recording(world).await?;
    let manifests = manifests(world, &setup)?;
    apply(world, &manifests).await?;
    world.note(&format!(
        "deployed {}: {} replicas, {}",
        world.subject().deployment,
        setup.replicas,
        setup.args.join(" ")
    ));
    world.operator = Some(setup);
    Ok(())
}

/// The lease setup a step states, its timings kept for the durations that name them; when
/// the operator's timings are fixed the scenario says so.
fn lease_setup(
    world: &mut World,
    replicas: i32,
    timings: &str,
    extra: &str,
) -> Result<OperatorSetup, StepError> {
    let setup = OperatorSetup::lease(world.subject(), replicas, timings, extra)?;
    if let Some(fixed) = setup.timings
        && LeaseTimings::parse(timings).ok() != Some(fixed)
    {
        world.note(&format!(
            "the operator's lease timings are fixed at {fixed} (its profile's \
             election.lease.timings): the scenario's {timings} do not apply, and its durations \
             that name LeaseDuration, RenewDeadline or RetryPeriod follow {fixed}"
        ));
    }
    world.timings = setup.timings;
    Ok(setup)
}

#[given(expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word}")]
async fn deployed_lease(world: &mut World, replicas: i32, timings: String) -> Step {
    let setup = lease_setup(world, replicas, &timings, "")?;
    deploy(world, setup).await?;
    Ok(())
}

#[given(
    expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word} and flags {string}"
)]
async fn deployed_lease_with_flags(
    world: &mut World,
    replicas: i32,
    timings: String,
    flags: String,
) -> Step {
    let setup = lease_setup(world, replicas, &timings, &flags)?;
    deploy(world, setup).await?;
    Ok(())
}

#[given(
    expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word}, releasing its lease on shutdown"
)]
async fn deployed_lease_releasing(world: &mut World, replicas: i32, timings: String) -> Step {
    let subject = world.subject();
    let release = subject.election.release_on_cancel.as_ref().ok_or_else(|| {
        StepError::Unmet(format!(
            "the profile of {} has no election.releaseOnCancel (its @release-on-cancel \
             scenarios are left out)",
            subject.name
        ))
    })?;
    let release = release.join(" ");
    let setup = lease_setup(world, replicas, &timings, &release)?;
    deploy(world, setup).await?;
    Ok(())
}

#[given(
    expr = "the operator is deployed with {int} replica(s) in lease mode with timings {word} and no right to leases"
)]
async fn deployed_without_lease_rights(world: &mut World, replicas: i32, timings: String) -> Step {
    start_recording(world).await?;
    let setup = lease_setup(world, replicas, &timings, "")?;
    let mut manifests = manifests(world, &setup)?;
    for m in &mut manifests {
        if kind_of(&m.object) == "Role"
            && let Some(rules) = m.object.data["rules"].as_array_mut()
        {
            rules.retain(|r| r["apiGroups"] != json!(["coordination.k8s.io"]));
        }
    }
    apply(world, &manifests).await?;
    world.note(&format!(
        "deployed {} without rights to leases",
        world.subject().deployment
    ));
    world.operator = Some(setup);
    Ok(())
}

#[when("the operator's Role is given its rights to leases")]
async fn lease_rights_restored(world: &mut World) -> Step {
    let setup = world.operator.clone().ok_or_else(|| {
        StepError::Missing(
            "the operator was not deployed: run \"Given the operator is deployed with {int} \
             replica(s) in lease mode with timings {word} and no right to leases\" first"
                .into(),
        )
    })?;
    let roles: Vec<Manifest> = manifests(world, &setup)?
        .into_iter()
        .filter(|m| kind_of(&m.object) == "Role")
        .collect();
    apply(world, &roles).await?;
    world.note("the operator's Role has its rights to leases again");
    Ok(())
}

#[given(
    expr = "a second operator {string} is deployed with {int} replica(s) in lease mode with timings {word} and the same lock"
)]
async fn second_operator(
    world: &mut World,
    instance: String,
    replicas: i32,
    timings: String,
) -> Step {
    let setup = OperatorSetup::lease(world.subject(), replicas, &timings, "")?;
    let mut deployment = manager_deployment(world, &setup)?;
    let object = &mut deployment.object;
    let name = format!(
        "{}-{instance}",
        object.metadata.name.clone().unwrap_or_default()
    );
    object.metadata.name = Some(name.clone());
    let spec = &mut object.data["spec"];
    spec["selector"]["matchLabels"]["app.kubernetes.io/instance"] = json!(instance);
    spec["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] = json!(instance);
    apply(world, &[deployment]).await?;
    world.note(&format!(
        "deployed a second operator {name} with the same lock"
    ));
    Ok(())
}

async fn apply(world: &World, manifests: &[Manifest]) -> Result<(), StepError> {
    let client = world.client()?;
    let namespace = world.operator_namespace()?;
    apply_all(&client, manifests, Namespacing::Default(&namespace))
        .await
        .map_err(|e| deploy_error(world, e))?;
    Ok(())
}

#[then(expr = "within {duration} every operator pod has failed with {string}")]
async fn pods_fail_with(world: &mut World, within: Dur, message: String) -> Step {
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let what = format!("every operator pod exited with {message:?} in its log");
    let selector = world.subject().pod_selector.as_str();
    eventually(world.span(&within)?, &what, || {
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
    .await?;
    Ok(())
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
async fn pod_logs(world: &mut World, within: Dur, text: String) -> Step {
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let what = format!("an operator pod logs {text:?}");
    let selector = world.subject().pod_selector.as_str();
    eventually(world.span(&within)?, &what, || {
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
    .await?;
    Ok(())
}

#[then(expr = "within {duration} the old leader logs {string}")]
async fn old_leader_logs(world: &mut World, within: Dur, text: String) -> Step {
    let old = world.old_leader.clone().ok_or_else(|| {
        StepError::Missing(
            "no step saw another replica take over before this one: run \"Then within \
             {duration} another replica leads\" first"
                .into(),
        )
    })?;
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let what = format!("{old} logs {text:?}");
    eventually(world.span(&within)?, &what, || {
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
    .await?;
    Ok(())
}

#[then("there is no lease")]
async fn no_lease(world: &mut World) -> Step {
    let namespace = world.operator_namespace()?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(world.client()?, &namespace);
    let list = leases
        .list(&ListParams::default())
        .await
        .doing(format!("listing leases in {namespace}"))?;
    ensure!(
        list.items.is_empty(),
        "expected no Lease in {namespace}, found {:?}",
        list.items
            .iter()
            .map(|l| l.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    Ok(())
}

#[when("the operator Deployment is rolled out again")]
async fn rolled_out_again(world: &mut World) -> Step {
    let namespace = world.operator_namespace()?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(world.client()?, &namespace);
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {
        "opconform.io/restartedAt": chrono::Utc::now().to_rfc3339()
    }}}}});
    let deployment = &world.subject().deployment;
    world.provider()?.faults().record(
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
        .doing(format!(
            "restarting the operator Deployment {namespace}/{deployment}"
        ))?;
    Ok(())
}

#[when(expr = "the operator is rolled out with timings {word}")]
async fn rolled_out_with_timings(world: &mut World, timings: String) -> Step {
    let replicas = world
        .operator
        .as_ref()
        .ok_or_else(|| {
            StepError::Missing(
                "the operator was not deployed: deploy it in lease mode first".into(),
            )
        })?
        .replicas;
    let setup = lease_setup(world, replicas, &timings, "")?;
    let mut deployment = manager_deployment(world, &setup)?;
    // A new template whatever the timings (a profile may fix them): the rollout happens.
    deployment.object.data["spec"]["template"]["metadata"]["annotations"]["opconform.io/restartedAt"] =
        json!(chrono::Utc::now().to_rfc3339());
    let namespace = world.operator_namespace()?;
    world.provider()?.faults().record(
        "rollout",
        &format!("deployment {namespace}/{}", world.subject().deployment),
        &format!("timings {timings}"),
    );
    apply(world, &[deployment]).await?;
    world.note(&format!(
        "rolling the operator out with timings {timings}: {}",
        setup.args.join(" ")
    ));
    world.operator = Some(setup);
    Ok(())
}

#[then(expr = "within {duration} the operator Deployment is rolled out")]
async fn rolled_out(world: &mut World, within: Dur) -> Step {
    let namespace = world.operator_namespace()?;
    let deployment = &world.subject().deployment;
    match crate::deploy::wait_for_rollout(
        &world.client()?,
        &namespace,
        deployment,
        world.span(&within)?,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(DeployError::RolloutTimeout {
            namespace,
            name,
            within,
            last,
        }) => {
            let waited = StepError::NotWithin {
                within,
                what: format!("deployment {namespace}/{name} rolls out"),
                last,
            };
            Err(super::diagnosis::explained(world, waited).await.into())
        }
        Err(e) => Err(StepError::Acting {
            doing: format!("waiting for deployment {namespace}/{deployment} to roll out"),
            source: operator_error(e),
        }
        .into()),
    }
}

#[given(expr = "the operator is deployed with {int} replica(s) and the flags {string}")]
async fn deployed_with_flags(world: &mut World, replicas: i32, flags: String) -> Step {
    let args = flags.split_whitespace().map(str::to_string).collect();
    deploy(
        world,
        OperatorSetup {
            replicas,
            args,
            timings: None,
        },
    )
    .await?;
    Ok(())
}

#[when(expr = "the operator is scaled to {int} replica(s)")]
async fn operator_scaled(world: &mut World, replicas: i32) -> Step {
    let namespace = world.operator_namespace()?;
    Api::<Deployment>::namespaced(world.client()?, &namespace)
        .patch(
            &world.subject().deployment,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .doing(format!(
            "scaling the operator Deployment {namespace}/{} to {replicas}",
            world.subject().deployment
        ))?;
    world.note(&format!("scaled the operator to {replicas} replicas"));
    Ok(())
}

#[then(expr = "within {duration} the operator has no pods")]
async fn no_operator_pods(world: &mut World, within: Dur) -> Step {
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let selector = world.subject().pod_selector.as_str();
    eventually(world.span(&within)?, "no operator pod exists", || async {
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
    .await?;
    Ok(())
}

#[given(expr = "the operator is deployed with {int} replica(s) in for-life mode")]
async fn deployed_for_life(world: &mut World, replicas: i32) -> Step {
    let setup = OperatorSetup::for_life(world.subject(), replicas)?;
    deploy(world, setup).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_timings_as_features_write_them_become_the_operators_flags() {
        let setup =
            OperatorSetup::lease(&Subject::memcached(), 2, "4s/3s/1s", "--standby=poll").unwrap();
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
        assert_eq!(setup.timings, LeaseTimings::parse("4s/3s/1s").ok());
    }

    #[test]
    fn an_operator_with_fixed_timings_runs_at_them_whatever_the_scenario_states() {
        let mut subject = Subject::memcached();
        subject.election.lease = Some(crate::subject::LeaseElection {
            args: vec!["--leader-elect".into()],
            fixed: Some(LeaseTimings::CONTROLLER_RUNTIME),
        });
        let setup = OperatorSetup::lease(&subject, 3, "4s/3s/1s", "").unwrap();
        assert_eq!(setup.args, ["--leader-elect"]);
        assert_eq!(setup.timings, Some(LeaseTimings::CONTROLLER_RUNTIME));
    }

    #[test]
    fn timings_that_are_not_three_durations_are_refused_naming_the_form() {
        let e = OperatorSetup::lease(&Subject::memcached(), 3, "4s/3s", "").unwrap_err();
        assert!(e.to_string().contains("LEASE/RENEW/RETRY"), "{e}");
    }
}
