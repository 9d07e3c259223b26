//! Steps that inject faults into the leader (or any pod) and undo them.

use cucumber::{given, then, when};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;

use super::Doing as _;
use super::wait::eventually;
use super::{Dur, Step, StepError, World};
use crate::fault::{
    Cut, HoldScope, LOW_ON_MEMORY, Milestone, NodeFault, PodFault, RequestMatch, RequestRules,
};
use crate::record::Observation;

/// Applies `fault` to the operator's pod `pod`.
///
/// # Errors
/// When there is no cluster or the provider cannot apply it.
async fn pod_fault(world: &World, pod: &str, fault: PodFault) -> Result<(), StepError> {
    let namespace = world.operator_namespace()?;
    world
        .provider()?
        .pod_fault(&namespace, pod, &fault)
        .await
        .doing(format!("{} on pod {pod}", fault.verb()))
}

/// Applies `fault` to node `node`.
///
/// # Errors
/// When there is no cluster or the provider cannot apply it.
async fn node_fault(world: &World, node: &str, fault: NodeFault) -> Result<(), StepError> {
    world
        .provider()?
        .node_fault(node, &fault)
        .await
        .doing(format!("{} on node {node}", fault.verb()))
}

/// Deletes the leader's Pod with `params`, recording the deletion as a fault first.
///
/// # Errors
/// When no step saw a leader, or the deletion fails.
async fn delete_leader(world: &World, params: DeleteParams, detail: &str) -> Result<(), StepError> {
    let pod = world.seen_leader()?;
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    world
        .provider()?
        .faults()
        .record("delete", &format!("pod {namespace}/{pod}"), detail);
    pods.delete(&pod, &params)
        .await
        .doing(format!("deleting {pod} ({detail})"))?;
    Ok(())
}

#[when("the leader pod is force deleted")]
async fn force_delete(world: &mut World) -> Step {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    delete_leader(world, params, "force, grace 0").await?;
    Ok(())
}

#[when("the leader pod is deleted")]
async fn delete(world: &mut World) -> Step {
    delete_leader(world, DeleteParams::default(), "graceful").await?;
    Ok(())
}

#[when(expr = "the leader is frozen for {duration}")]
async fn frozen_for(world: &mut World, span: Dur) -> Step {
    let pod = world.seen_leader()?;
    pod_fault(world, &pod, PodFault::Hold).await?;
    // The step's meaning is "for this long": the one place a plain sleep belongs.
    tokio::time::sleep(world.span(&span)?).await;
    pod_fault(world, &pod, PodFault::Release).await?;
    Ok(())
}

#[when(
    expr = "memcached {string} is scaled to {int} while the leader is frozen for {duration} as it reads the Deployment"
)]
async fn scaled_while_frozen_at_read(
    world: &mut World,
    name: String,
    size: i64,
    span: Dur,
) -> Step {
    let pod = world.seen_leader()?;
    let operator_namespace = world.operator_namespace()?;
    let namespace = super::memcached::namespace_of(world, &name)?;
    let rules = request_rules(world, "freezing a pod at one of its requests")?;
    let object = |verbs: &[&str], group: &str, resource: &str| RequestMatch {
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource: Some(String::new()),
        namespace: Some(namespace.clone()),
        name: Some(name.clone()),
        ..RequestMatch::default()
    };
    // The leader is frozen as its first read of the Deployment from the change on, before
    // the answer goes back: it wakes in the middle of the reconcile of that change, holding
    // what it read before the takeover. The rule is armed as the change is sent (the
    // harness's own write does not pass the pods' proxies, where local judges requests), so
    // the scenario lets the operator fall idle first: no read of its own comes in between.
    rules.hold_sender(
        RequestMatch {
            pod: Some(format!("{operator_namespace}/{pod}")),
            ..object(&["get"], "apps", "deployments")
        },
        world.span(&span)?,
        None,
    );
    super::memcached::scale(world, &name, size).await?;
    Ok(())
}

#[when("the leader's container crashes")]
async fn crashes(world: &mut World) -> Step {
    let pod = world.seen_leader()?;
    pod_fault(world, &pod, PodFault::Crash { container: None }).await?;
    Ok(())
}

#[when("the leader pod is evicted by its kubelet")]
async fn evicted(world: &mut World) -> Step {
    let pod = world.seen_leader()?;
    let namespace = world.operator_namespace()?;
    let uid = Api::<Pod>::namespaced(world.client()?, &namespace)
        .get(&pod)
        .await
        .doing(format!("reading the leader's Pod {pod}"))?
        .metadata
        .uid
        .ok_or_else(|| StepError::Unmet(format!("the leader's Pod {pod} has no uid")))?;
    let fault = PodFault::Evict {
        message: LOW_ON_MEMORY.into(),
    };
    pod_fault(world, &pod, fault).await?;
    world.faulted.evicted = Some((pod, uid));
    Ok(())
}

#[when(expr = "the leader is cut off from the API server for {duration}")]
async fn cut_off_for(world: &mut World, span: Dur) -> Step {
    let pod = world.seen_leader()?;
    pod_fault(world, &pod, PodFault::Partition { cut: Cut::Drop }).await?;
    tokio::time::sleep(world.span(&span)?).await;
    pod_fault(world, &pod, PodFault::Repair).await?;
    Ok(())
}

#[when(expr = "the API server rejects the leader's lease updates for {duration}")]
async fn reject_lease_updates(world: &mut World, span: Dur) -> Step {
    let pod = world.seen_leader()?;
    let namespace = world.operator_namespace()?;
    let provider = world.provider()?;
    // Update and patch (server-side apply too): as an admission policy's UPDATE matches
    // both on a real API server, a library renewing by patch is rejected everywhere.
    let rule = RequestMatch {
        verbs: vec!["update".into(), "patch".into()],
        group: Some("coordination.k8s.io".into()),
        resource: Some("leases".into()),
        namespace: Some(namespace.clone()),
        pod: Some(format!("{namespace}/{pod}")),
        ..RequestMatch::default()
    };
    // Counted from the request: on a real API server a rule takes effect, and lapses, only
    // once its admission has seen it; counting from the request keeps the window the step
    // names (each end late by about as much), rather than adding the first delay to it.
    let begin = tokio::time::Instant::now();
    let id = provider
        .reject(rule, 403, "lease updates rejected by opconform")
        .await
        .doing(format!("rejecting {pod}'s lease updates"))?;
    // The step's meaning is "for this long".
    tokio::time::sleep_until(begin + world.span(&span)?).await;
    provider
        .allow(id)
        .await
        .doing(format!("allowing {pod}'s lease updates"))?;
    Ok(())
}

#[when(expr = "the API server holds the leader's next lease update for {duration}")]
async fn slow_lease_update(world: &mut World, span: Dur) -> Step {
    let pod = world.seen_leader()?;
    let span = world.span(&span)?;
    let rules = request_rules(world, "holding one lease update")?;
    let id = rules.defer_for(
        leaders_lock_requests(world, &pod, &["update", "patch"])?,
        span,
    );
    next_lease_update_held(world, &pod, id).await
}

// kubernetes #131867 (PRs #132849 and #137988): a renewal in flight when the leader shuts
// down is given up by the client (its context is cancelled) but committed by the server
// after the release read the lease; the release's write, based on that read, conflicts,
// and a client that does not read again and retry leaves the lease to expire. The first
// rule commits the update once the leader has read the lease again (at most RenewDeadline
// later: a leader that waits for its answer instead of giving up on it gets no answer, the
// connection closed, when the limit runs out); the second holds the leader's next write of
// the lock until that update was committed, as when it lands just after the read.
#[when(
    "the API server commits the leader's next lease update only after the leader reads the lease again, and loses its answer"
)]
async fn lost_lease_update(world: &mut World) -> Step {
    let pod = world.seen_leader()?;
    let rules = request_rules(world, "losing a lease update's answer")?;
    let writes = leaders_lock_requests(world, &pod, &["update", "patch"])?;
    let limit = world
        .timings
        .map_or(std::time::Duration::from_secs(10), |t| t.renew_deadline);
    let id = rules.lose_answer(
        writes.clone(),
        Some((
            leaders_lock_requests(world, &pod, &["get"])?,
            Milestone::Answered,
        )),
        limit,
    );
    rules.defer_until(writes.clone(), writes, Milestone::Answered, limit);
    next_lease_update_held(world, &pod, id).await
}

// kubernetes PR #139991 (client-go releases the lease while OnStartedLeading still runs)
// and controller-runtime #1132: a leader that releases its lock on shutdown before its work
// has stopped lets a write still in flight land after a standby took the lock. The write
// is held at the API server for the span (its pod keeps running) and then committed even
// if the leader gave up on it meanwhile, as a write that reached the server's storage is:
// cancelling a request does not take it back.
#[when(
    expr = "the API server holds the leader's next write of its work for {duration} and then commits it"
)]
async fn slow_work_write(world: &mut World, span: Dur) -> Step {
    let pod = world.seen_leader()?;
    let span = world.span(&span)?;
    let namespace = world.operator_namespace()?;
    let subject = world.subject();
    let work = subject.work.as_ref().ok_or_else(|| {
        StepError::Unmet(format!(
            "the profile of {} has no work (its @work scenarios are left out)",
            subject.name
        ))
    })?;
    let rules = request_rules(world, "holding a write of the work")?;
    // One one-shot rule per resource whose writes are work: the first to fire is the write
    // held; the others match only this pod's writes, which end with it.
    let ids: Vec<u64> = work
        .writes
        .iter()
        .map(|written| {
            let (resource, subresource) = written.split_once('/').unwrap_or((written, ""));
            rules.commit_after(
                RequestMatch {
                    verbs: vec!["create".into(), "update".into(), "patch".into()],
                    resource: Some(resource.into()),
                    subresource: Some(subresource.into()),
                    pod: Some(format!("{namespace}/{pod}")),
                    ..RequestMatch::default()
                },
                span,
            )
        })
        .collect();
    if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
        world.work.held_by = Some((*first, *last));
    }
    // An operator that works only when given work (a Memcached to scale) writes once given
    // more; one that works on its own writes anyway.
    super::work::more_work(world).await?;
    held(
        world,
        &ids,
        &format!("{pod}'s next write of its work"),
        "work",
    )
    .await
}

#[then(expr = "within {duration} the held write of its work was committed")]
async fn held_work_committed(world: &mut World, within: Dur) -> Step {
    let (first, last) = world.work.held_by.ok_or_else(|| {
        StepError::Missing(
            "no write of the work was held: hold one first (\"the API server holds the \
             leader's next write of its work for {duration} and then commits it\")"
                .into(),
        )
    })?;
    let rules: Vec<String> = (first..=last).map(|id| format!("rule {id}:")).collect();
    let faults = world.provider()?.faults();
    eventually(
        world.span(&within)?,
        "the held write of the work to be committed",
        || {
            let served = faults.events().iter().any(|e| {
                e.verb == "serve" && rules.iter().any(|rule| e.target.starts_with(rule.as_str()))
            });
            async move {
                if served {
                    Ok(())
                } else {
                    Err("the write is still held".to_string())
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// The requests of the leader `pod` with one of `verbs` on the operator's lock.
fn leaders_lock_requests(
    world: &World,
    pod: &str,
    verbs: &[&str],
) -> Result<RequestMatch, StepError> {
    let namespace = world.operator_namespace()?;
    let (group, resource) = lock_resource(world);
    Ok(RequestMatch {
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        group: Some(group.into()),
        resource: Some(resource.into()),
        name: Some(world.subject().lock.name.clone()),
        pod: Some(format!("{namespace}/{pod}")),
        namespace: Some(namespace),
        ..RequestMatch::default()
    })
}

/// Waits until request rule `id`, armed for the leader `pod`'s next lease update, holds
/// one. The leader renews every RetryPeriod; a RenewDeadline bounds the wait.
async fn next_lease_update_held(world: &World, pod: &str, id: u64) -> Step {
    held(
        world,
        &[id],
        &format!("{pod}'s next lease update"),
        "lease update",
    )
    .await
}

/// Waits until one of the request rules `ids` holds a request (`what`, of the leader's
/// `kind` of request): a scenario whose request was never held has checked nothing. A
/// RenewDeadline bounds the wait (the leader renews, and works, more often than that).
async fn held(world: &World, ids: &[u64], what: &str, kind: &str) -> Step {
    let within = world
        .timings
        .map_or(std::time::Duration::from_secs(10), |t| t.renew_deadline);
    let faults = world.provider()?.faults();
    let rules: Vec<String> = ids.iter().map(|id| format!("rule {id}:")).collect();
    eventually(within, &format!("{what} to be held"), || {
        let held = faults.events().iter().any(|e| {
            e.verb == "defer" && rules.iter().any(|rule| e.target.starts_with(rule.as_str()))
        });
        async move {
            if held {
                Ok(())
            } else {
                Err(format!(
                    "the rule is armed; no {kind} of the leader came yet"
                ))
            }
        }
    })
    .await?;
    Ok(())
}

/// A replica other than the leader whose leader gauge was scraped.
///
/// # Errors
/// When no step saw a leader, or no standby was seen yet.
async fn seen_standby(world: &World) -> Result<String, StepError> {
    let leader = world.seen_leader()?;
    super::leadership::leading_candidates(&world.history().await)
        .into_iter()
        .find(|r| *r != leader)
        .ok_or_else(|| {
            StepError::Missing(format!(
                "no standby of {leader} seen yet (no leader gauge of another replica was \
                 scraped): wait for them first, with \"within {{duration}} the other replicas \
                 are ready standbys\""
            ))
        })
}

#[when(expr = "a standby's clock runs {int}s ahead")]
async fn standby_clock_ahead(world: &mut World, seconds: i64) -> Step {
    let standby = seen_standby(world).await?;
    pod_fault(world, &standby, PodFault::Skew { seconds }).await?;
    Ok(())
}

#[when("a standby pod is deleted")]
async fn standby_deleted(world: &mut World) -> Step {
    let standby = seen_standby(world).await?;
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    world.provider()?.faults().record(
        "delete",
        &format!("pod {namespace}/{standby}"),
        "graceful, a standby",
    );
    pods.delete(&standby, &DeleteParams::default())
        .await
        .doing(format!("deleting the standby {standby} (graceful)"))?;
    Ok(())
}

#[when("the lock is deleted by hand")]
async fn lock_deleted(world: &mut World) -> Step {
    let namespace = world.operator_namespace()?;
    let client = world.client()?;
    let lock = &world.subject().lock.name;
    world
        .provider()?
        .faults()
        .record("delete", &format!("lock {namespace}/{lock}"), "by hand");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let maps: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let dp = DeleteParams::default();
    let lease = leases.delete(lock, &dp).await.is_ok();
    let map = maps.delete(lock, &dp).await.is_ok();
    ensure!(
        lease || map,
        "there was no lock {namespace}/{lock} to delete"
    );
    Ok(())
}

/// The node the leader's Pod runs on.
///
/// # Errors
/// When no step saw a leader, or its Pod cannot be read or has no node.
async fn leaders_node(world: &World) -> Result<String, StepError> {
    let pod = world.seen_leader()?;
    let namespace = world.operator_namespace()?;
    Api::<Pod>::namespaced(world.client()?, &namespace)
        .get(&pod)
        .await
        .doing(format!("reading the leader's Pod {pod}"))?
        .spec
        .and_then(|s| s.node_name)
        .ok_or_else(|| StepError::Unmet(format!("the leader's Pod {pod} has no node")))
}

// operator-sdk #1874 (operator-lib's isNotReadyNode): a hung kubelet stops reporting, so its
// node turns NotReady, while its pods run on and reach the API server.
#[when("the kubelet of the leader's node hangs")]
async fn kubelet_hangs(world: &mut World) -> Step {
    let node = leaders_node(world).await?;
    node_fault(
        world,
        &node,
        NodeFault::Hold {
            scope: HoldScope::Kubelet,
        },
    )
    .await?;
    world.faulted.hung_kubelet = Some(node);
    Ok(())
}

/// The node whose kubelet a step made hang.
///
/// # Errors
/// [`StepError::Missing`] when none did.
fn hung_kubelet(world: &World) -> Result<String, StepError> {
    world.faulted.hung_kubelet.clone().ok_or_else(|| {
        StepError::Missing(
            "no kubelet hangs: run \"the kubelet of the leader's node hangs\" first".into(),
        )
    })
}

#[when("the hung kubelet recovers")]
async fn kubelet_recovers(world: &mut World) -> Step {
    let node = hung_kubelet(world)?;
    node_fault(world, &node, NodeFault::Release).await?;
    Ok(())
}

#[then(expr = "within {duration} the node of the hung kubelet is not ready")]
async fn hung_node_not_ready(world: &mut World, within: Dur) -> Step {
    use k8s_openapi::api::core::v1::Node;
    let node = hung_kubelet(world)?;
    let nodes: Api<Node> = Api::all(world.client()?);
    eventually(
        world.span(&within)?,
        &format!("node {node} to be not ready"),
        || {
            let (nodes, node) = (nodes.clone(), node.clone());
            async move {
                let read = nodes.get(&node).await.map_err(|e| e.to_string())?;
                let ready = read
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| c.status);
                match ready.as_deref() {
                    Some("True") => Err("its Ready condition is still True".to_string()),
                    _ => Ok(()),
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[when("the leader's node is cut off from the API server")]
async fn node_cut_off(world: &mut World) -> Step {
    let node = leaders_node(world).await?;
    node_fault(world, &node, NodeFault::Partition { cut: Cut::Drop }).await?;
    world.faulted.partitioned_node = Some(node);
    Ok(())
}

#[when("the leader's node is reconnected")]
async fn node_repaired(world: &mut World) -> Step {
    let node = world.faulted.partitioned_node.clone().ok_or_else(|| {
        StepError::Missing(
            "no node was cut off before this step: run \"the leader's node is cut off from \
             the API server\" first"
                .into(),
        )
    })?;
    node_fault(world, &node, NodeFault::Repair).await?;
    Ok(())
}

#[then(expr = "within {duration} the old leader's Pod is terminating")]
async fn old_pod_terminating(world: &mut World, within: Dur) -> Step {
    let pod = world.seen_leader()?;
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let deadline = tokio::time::Instant::now() + world.span(&within)?;
    loop {
        let p = pods
            .get_opt(&pod)
            .await
            .doing(format!("reading the leader's Pod {pod}"))?;
        match p {
            Some(p) if p.metadata.deletion_timestamp.is_some() => return Ok(()),
            Some(_) => {}
            None => bail!("the leader's Pod {pod} is gone: expected it to stay Terminating"),
        }
        if tokio::time::Instant::now() >= deadline {
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client()?);
            let seen: Vec<String> = nodes
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .map(|n| {
                            let ready = n
                                .status
                                .as_ref()
                                .and_then(|s| s.conditions.as_ref())
                                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                                .map(|c| c.status.clone())
                                .unwrap_or_default();
                            let taints: Vec<String> = n
                                .spec
                                .as_ref()
                                .and_then(|s| s.taints.as_ref())
                                .map(|t| {
                                    t.iter()
                                        .map(|t| format!("{}:{}", t.key, t.effect))
                                        .collect()
                                })
                                .unwrap_or_default();
                            format!(
                                "{} Ready={ready} taints={taints:?}",
                                n.metadata.name.clone().unwrap_or_default()
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            bail!("{pod} was not evicted within {within:?}; nodes: {seen:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[then(expr = "the old leader's Pod stays terminating and the lock stays its own for {duration}")]
async fn stays_terminating(world: &mut World, span: Dur) -> Step {
    let pod = world.seen_leader()?;
    let namespace = world.operator_namespace()?;
    let client = world.client()?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let maps: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let lock = &world.subject().lock.name;
    let deadline = tokio::time::Instant::now() + world.span(&span)?;
    while tokio::time::Instant::now() < deadline {
        let p = pods
            .get_opt(&pod)
            .await
            .doing(format!("reading the leader's Pod {pod}"))?;
        ensure!(
            p.as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
            "{pod} is no longer Terminating"
        );
        let owner = maps
            .get_opt(lock)
            .await
            .doing(format!("reading the lock {namespace}/{lock}"))?
            .and_then(|m| m.metadata.owner_references)
            .and_then(|o| o.first().map(|o| o.name.clone()));
        ensure!(
            owner.as_deref() == Some(pod.as_str()),
            "the lock changed owner: expected {pod:?}, owned by {owner:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Ok(())
}

#[then(expr = "within {duration} the evicted Pod is gone, deleted by a standby")]
async fn evicted_pod_deleted_by_standby(world: &mut World, within: Dur) -> Step {
    let (pod, uid) = world.faulted.evicted.clone().ok_or_else(|| {
        StepError::Missing(
            "no pod was evicted before this step: run \"the leader pod is evicted by its \
             kubelet\" first"
                .into(),
        )
    })?;
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let what = format!("{pod} (uid {uid}) gone, deleted by another replica of the operator");
    let by = eventually(world.span(&within)?, &what, || async {
        let now = pods
            .get_opt(&pod)
            .await
            .map_err(|e| format!("reading {pod}: {e}"))?;
        if let Some(p) = now.filter(|p| p.metadata.uid.as_deref() == Some(uid.as_str())) {
            let status = p.status.unwrap_or_default();
            return Err(format!(
                "{pod} still exists: phase {:?}, reason {:?}",
                status.phase.unwrap_or_default(),
                status.reason.unwrap_or_default()
            ));
        }
        let deletes: Vec<(String, u16)> = world
            .history()
            .await
            .entries()
            .iter()
            .filter_map(|e| match &e.observation {
                Observation::Write {
                    replica,
                    verb,
                    resource,
                    name,
                    code,
                    ..
                } if verb == "delete" && resource == "pods" && *name == pod => {
                    Some((replica.clone(), *code))
                }
                _ => None,
            })
            .collect();
        deletes
            .iter()
            .find(|(replica, code)| *replica != pod && (200..300).contains(code))
            .map(|(replica, _)| replica.clone())
            .ok_or_else(|| {
                format!("{pod} is gone, but no replica's successful delete of it was audited; deletes of it by replicas: {deletes:?}")
            })
    })
    .await?;
    world.note(&format!("{by} deleted the evicted {pod}"));
    Ok(())
}

/// The operator's pods whose latest observation is Running and not terminating, by name.
fn running_replicas(history: &crate::record::History) -> Vec<String> {
    let mut latest: std::collections::BTreeMap<String, bool> = Default::default();
    for e in history.entries() {
        if let Observation::Pod {
            name,
            phase,
            terminating,
            ..
        } = &e.observation
        {
            latest.insert(name.clone(), phase == "Running" && !terminating);
        }
    }
    latest
        .into_iter()
        .filter_map(|(name, running)| running.then_some(name))
        .collect()
}

#[given(expr = "within {duration} every operator replica runs")]
async fn every_replica_runs(world: &mut World, within: Dur) -> Step {
    let wanted = world.operator.as_ref().map_or(0, |o| o.replicas as usize);
    let what = format!("{wanted} operator pods running");
    eventually(world.span(&within)?, &what, || {
        let running = running_replicas(&world.history_so_far());
        async move {
            if running.len() == wanted {
                Ok(())
            } else {
                Err(format!("running: {running:?}"))
            }
        }
    })
    .await?;
    Ok(())
}

/// Where the freezing steps remember the frozen replica.
#[when("one operator replica is frozen")]
async fn one_replica_frozen(world: &mut World) -> Step {
    let replicas = running_replicas(&world.history_so_far());
    let pod = replicas
        .first()
        .ok_or_else(|| {
            StepError::Missing(
                "no operator replica runs: run \"within {duration} every operator replica \
                 runs\" first"
                    .into(),
            )
        })?
        .clone();
    pod_fault(world, &pod, PodFault::Hold).await?;
    world.faulted.frozen = Some(pod);
    Ok(())
}

/// Releases the replica a step froze, and forgets it; returns its name.
///
/// # Errors
/// [`StepError::Missing`] when no step froze a replica; when the release fails.
async fn release_frozen(world: &mut World) -> Result<String, StepError> {
    let frozen = world.faulted.frozen.take().ok_or_else(|| {
        StepError::Missing(
            "no step froze a replica before this one: run \"one operator replica is frozen\" \
             or \"the leader is frozen\" first"
                .into(),
        )
    })?;
    pod_fault(world, &frozen, PodFault::Release).await?;
    Ok(frozen)
}

#[when("the frozen replica is released and another one is frozen")]
async fn frozen_replica_swapped(world: &mut World) -> Step {
    let frozen = release_frozen(world).await?;
    let other = running_replicas(&world.history_so_far())
        .into_iter()
        .find(|p| *p != frozen)
        .ok_or_else(|| {
            StepError::Unmet(format!(
                "no operator replica runs beside the frozen {frozen}"
            ))
        })?;
    pod_fault(world, &other, PodFault::Hold).await?;
    world.faulted.frozen = Some(other);
    Ok(())
}

#[when("the frozen replica is released")]
async fn frozen_replica_released(world: &mut World) -> Step {
    release_frozen(world).await?;
    Ok(())
}

/// Freezes the leader with no end of its own: it stays frozen until "the frozen replica
/// is released", or the scenario ends. Unlike a deleted leader it is not replaced by a new
/// Pod, so no other replica joins the standbys.
#[when("the leader is frozen")]
async fn leader_frozen(world: &mut World) -> Step {
    let pod = world.seen_leader()?;
    pod_fault(world, &pod, PodFault::Hold).await?;
    world.faulted.frozen = Some(pod);
    Ok(())
}

/// The longest the API server holds each of two racing lock writes: longer than it takes
/// two polling standbys to both see an expired lease (client-go waits up to 2.2 retry
/// periods between tries), short enough that a race that cannot happen fails the scenario
/// instead of hanging it.
const RACE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

#[when("two standbys' next lock writes are made to race")]
async fn lock_writes_race(world: &mut World) -> Step {
    let leader = world.seen_leader()?;
    // Running, whether or not a gauge of theirs was scraped yet: an elector may publish its
    // gauge only once it has tried the lock.
    let mut standbys = running_replicas(&world.history_so_far());
    standbys.retain(|r| *r != leader);
    let [b, c] = standbys.as_slice() else {
        return Err(StepError::Missing(format!(
            "two running standbys beside {leader} are needed, seen: {standbys:?} (wait for them \
             first, with \"within {{duration}} the other replicas are ready standbys\")"
        ))
        .into());
    };
    let rules = request_rules(world, "making two lock writes race")?;
    let namespace = world.operator_namespace()?;
    let lock = &world.subject().lock;
    let (group, resource) = lock_resource(world);
    let writes_of = |pod: &str| RequestMatch {
        verbs: vec!["update".into(), "patch".into()],
        group: Some(group.into()),
        resource: Some(resource.into()),
        namespace: Some(namespace.clone()),
        name: Some(lock.name.clone()),
        pod: Some(format!("{namespace}/{pod}")),
        ..RequestMatch::default()
    };
    // Whichever standby writes first, C's write is served first, and B's — sent before B
    // could see C's — after it, against a lock C has changed.
    let first = rules.defer_until(writes_of(c), writes_of(b), Milestone::Arrived, RACE_LIMIT);
    let second = rules.defer_until(writes_of(b), writes_of(c), Milestone::Answered, RACE_LIMIT);
    world.faulted.racing_rules = vec![(first, c.clone()), (second, b.clone())];
    world.note(&format!(
        "{c}'s next lock write waits for {b}'s to arrive; {b}'s, for {c}'s to be answered"
    ));
    Ok(())
}

/// The provider's request rules, for `doing`.
///
/// # Errors
/// [`StepError::NoCluster`] before a cluster was started; [`StepError::Unmet`] when the
/// provider has no request rules.
fn request_rules<'w>(world: &'w World, doing: &str) -> Result<&'w dyn RequestRules, StepError> {
    let provider = world.provider()?;
    provider.request_rules().ok_or_else(|| {
        StepError::Unmet(format!(
            "{doing} needs an API server or proxy that judges requests one by one; the {} \
             provider has none (tag the scenario @request-rules)",
            provider.name()
        ))
    })
}

/// The API group and resource of the operator's lock.
fn lock_resource(world: &World) -> (&'static str, &'static str) {
    match world.subject().lock.kind {
        crate::subject::LockKind::Lease => ("coordination.k8s.io", "leases"),
        crate::subject::LockKind::ConfigMap => ("", "configmaps"),
    }
}

/// The replica holding the lock now, read from the API server, as the history names it.
async fn lock_holder_now(world: &World) -> Result<Option<String>, String> {
    use crate::record::recorder::config_map_holder;
    use crate::subject::LockKind;
    async fn holder<K>(
        api: Api<K>,
        name: &str,
        of: impl Fn(&K) -> Option<String>,
    ) -> kube::Result<Option<String>>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        Ok(api.get_opt(name).await?.as_ref().and_then(of))
    }
    let ns = world.operator_namespace().map_err(|e| super::chain(&e))?;
    let client = world.client().map_err(|e| super::chain(&e))?;
    let lock = &world.subject().lock;
    let name = lock.name.as_str();
    match lock.kind {
        LockKind::Lease => {
            let naming = lock.holder;
            holder(Api::namespaced(client, &ns), name, |l| {
                naming.lease_holder(l)
            })
            .await
        }
        LockKind::ConfigMap => holder(Api::namespaced(client, &ns), name, config_map_holder).await,
    }
    .map_err(|e| format!("reading the lock {ns}/{name}: {e}"))
}

#[then(expr = "within {duration} the two standbys' lock writes raced")]
async fn lock_writes_raced(world: &mut World, within: Dur) -> Step {
    if world.faulted.racing_rules.is_empty() {
        return Err(StepError::Missing(
            "no step made two standbys' lock writes race before this one: run \"two \
             standbys' next lock writes are made to race\" first"
                .into(),
        )
        .into());
    }
    // (the rule as the fault log names it, the standby whose write it holds)
    let rules: Vec<(String, &str)> = world
        .faulted
        .racing_rules
        .iter()
        .map(|(id, pod)| (format!("rule {id}: "), pod.as_str()))
        .collect();
    let lock = &world.subject().lock.name;
    let (_, lock_resource) = lock_resource(world);
    let what = "both racing lock writes answered, and the history's lock caught up with the lock";
    let served = eventually(world.span(&within)?, what, || async {
        let history = world.history_so_far();
        let mut served = Vec::new();
        for (rule, pod) in &rules {
            let mut armed = None;
            let mut serve = None;
            for e in history.entries() {
                if let Observation::Fault {
                    verb,
                    target,
                    detail,
                } = &e.observation
                    && target.starts_with(rule.as_str())
                {
                    match verb.as_str() {
                        "arm" => armed = Some(e.time),
                        "serve" => serve = Some((e.time, detail.clone())),
                        _ => {}
                    }
                }
            }
            let (Some(armed), Some((_, detail))) = (armed, serve) else {
                return Err(format!("{rule}{pod}'s lock write not let go yet"));
            };
            // The audit has a request once it was answered, stamped when it reached the API
            // server: before it was let go where the API server holds it (sim), after where
            // a pod's proxy does (local). The rule holds the pod's next write of the lock, so
            // its first one since the rule was armed is the one held.
            let answered = history.entries().iter().any(|e| {
                matches!(&e.observation, Observation::Write { replica, resource, name, .. }
                    if replica == pod && resource == lock_resource && name == lock)
                    && armed <= e.time
            });
            if !answered {
                return Err(format!("{rule}{pod}'s lock write let go, not yet answered"));
            }
            served.push((format!("{pod}: {detail}"), detail));
        }
        // The writes the rules held are the race's last changes of the lock: once the
        // recorded holder is the lock's, the recorder has seen them.
        let recorded = super::leadership::recorded_holder(&history);
        let now = lock_holder_now(world).await?;
        if recorded != now {
            return Err(format!(
                "the lock is held by {now:?}, the history's last holder is {recorded:?}"
            ));
        }
        Ok(served)
    })
    .await?;
    for (pod_detail, detail) in &served {
        ensure!(
            !request_rules(world, "reading how the racing writes were let go")?
                .deferral_timed_out(detail),
            "the standbys' lock writes did not race: {pod_detail}"
        );
        println!("raced: {pod_detail}");
    }
    Ok(())
}
