//! Steps about who leads: waiting for exactly one leader, a new leader after a fault.

use std::time::Duration;

use cucumber::{given, then};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;

use super::Doing as _;
use super::wait::{eventually, throughout};
use super::{Dur, Step, StepError, World};
use crate::record::{History, Observation};

/// The lock's holder as last recorded (`None` when free, gone or never seen).
pub fn recorded_holder(history: &History) -> Option<String> {
    history
        .entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Lock { holder, .. } => Some(holder.clone()),
            _ => None,
        })
        .next_back()?
}

/// The replica that leads now, judged from the history: the lock's latest holder, whose
/// latest gauge sample says "leader", while every other replica's latest sample says not.
pub fn current_leader(history: &History) -> Option<String> {
    let holder = recorded_holder(history)?;
    let leaders = leading_now(history);
    (leaders == [holder.as_str()]).then_some(holder)
}

/// The replica that leads, once a single one does (other than `unlike`, when given).
///
/// # Errors
/// [`StepError::NotWithin`] when no single (new) leader shows within `within`, with the
/// last entries of the history.
async fn wait_for_leader(
    world: &World,
    within: Duration,
    unlike: Option<&str>,
) -> Result<String, StepError> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let history = world.history_so_far();
        if let Some(leader) = current_leader(&history).filter(|l| Some(l.as_str()) != unlike) {
            return Ok(leader);
        }
        if tokio::time::Instant::now() >= deadline {
            let tail: Vec<_> = history
                .entries()
                .iter()
                .rev()
                .take(12)
                .rev()
                .cloned()
                .collect();
            let origin = history
                .entries()
                .first()
                .map(|e| e.time)
                .unwrap_or_default();
            let waited = StepError::NotWithin {
                within,
                what: match unlike {
                    Some(old) => format!("a single new leader, not {old}"),
                    None => "a single leader".to_string(),
                },
                last: format!("\n{}", crate::record::describe(&tail, origin)),
            };
            return Err(super::diagnosis::explained(world, waited).await);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[given(expr = "within {duration} exactly one replica leads")]
#[then(expr = "within {duration} exactly one replica leads")]
async fn exactly_one_leads(world: &mut World, within: Dur) -> Step {
    let leader = wait_for_leader(world, world.span(&within)?, None).await?;
    world.note(&format!("{leader} leads"));
    if let Some(t) = lock_transitions(&world.history().await) {
        world.transitions_at_first_leader = Some(t);
    }
    world.leader = Some(leader);
    Ok(())
}

/// The lock's latest `leaseTransitions` in the history.
fn lock_transitions(history: &History) -> Option<i64> {
    history
        .entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Lock { transitions, .. } => *transitions,
            _ => None,
        })
        .next_back()
}

/// The operator's Lease.
///
/// # Errors
/// When there is no cluster or the Lease cannot be read.
async fn lease(world: &World) -> Result<Lease, StepError> {
    let namespace = world.operator_namespace()?;
    let leases: Api<Lease> = Api::namespaced(world.client()?, &namespace);
    let lock = &world.subject().lock.name;
    leases
        .get(lock)
        .await
        .doing(format!("reading Lease {namespace}/{lock}"))
}

#[then("the lock names the leader's Pod")]
async fn lock_names_leader(world: &mut World) -> Step {
    let leader = world.seen_leader()?;
    let namespace = world.operator_namespace()?;
    let client = world.client()?;
    let pod = Api::<Pod>::namespaced(client.clone(), &namespace)
        .get(&leader)
        .await
        .doing(format!("reading the leader's Pod {namespace}/{leader}"))?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let lock = &world.subject().lock.name;
    if let Some(lease) = leases
        .get_opt(lock)
        .await
        .doing(format!("reading Lease {namespace}/{lock}"))?
    {
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        let named = world.subject().lock.holder.holder_of_identity(&holder);
        ensure!(
            named.as_deref() == Some(leader.as_str()),
            "the Lease's holderIdentity {holder:?} does not name the leader's Pod {leader} \
             (it names {named:?})"
        );
        return Ok(());
    }
    let lock = Api::<ConfigMap>::namespaced(client, &namespace)
        .get(lock)
        .await
        .doing(format!(
            "reading the lock: neither a Lease nor a ConfigMap {namespace}/{lock}"
        ))?;
    let owners = lock.metadata.owner_references.unwrap_or_default();
    ensure!(
        owners.len() == 1 && owners[0].kind == "Pod",
        "the lock ConfigMap must have exactly one Pod owner, has {owners:?}"
    );
    let owner = (owners[0].name.as_str(), Some(owners[0].uid.as_str()));
    let wanted = (leader.as_str(), pod.metadata.uid.as_deref());
    ensure!(
        owner == wanted,
        "the lock is not owned by the leader's Pod (name and uid): owned by {owner:?}, the \
         leader's Pod is {wanted:?}"
    );
    Ok(())
}

/// Replicas other than `leader` that are not Ready or say they lead, and how many are
/// ready standbys.
fn standbys(history: &History, leader: &str) -> (usize, Vec<String>) {
    let mut latest: std::collections::BTreeMap<String, (bool, bool, bool)> = Default::default();
    for e in history.entries() {
        match &e.observation {
            Observation::Pod {
                name,
                ready,
                terminating,
                ..
            } => {
                let entry = latest.entry(name.clone()).or_default();
                entry.0 = *ready;
                entry.1 = *terminating;
            }
            o @ (Observation::Gauge { .. } | Observation::Down { .. }) => {
                if let Some((replica, leader)) = o.leadership() {
                    latest.entry(replica.to_string()).or_default().2 = leader;
                }
            }
            _ => {}
        }
    }
    let mut ready = 0;
    let mut problems = Vec::new();
    for (name, (is_ready, terminating, leads)) in latest {
        if name == leader || terminating {
            continue;
        }
        match (is_ready, leads) {
            (true, false) => ready += 1,
            (false, _) => problems.push(format!("{name} is not Ready")),
            (true, true) => problems.push(format!("{name} says it leads")),
        }
    }
    (ready, problems)
}

#[given(expr = "within {duration} the other replicas are ready standbys")]
#[then(expr = "within {duration} the other replicas are ready standbys")]
async fn others_are_standbys(world: &mut World, within: Dur) -> Step {
    let leader = world.seen_leader()?;
    let operator = world.operator.as_ref().ok_or_else(|| {
        StepError::Missing(
            "the operator was not deployed: run a \"Given the operator is deployed with …\" \
             step first"
                .into(),
        )
    })?;
    let wanted = (operator.replicas as usize).saturating_sub(1);
    let what = format!("{wanted} ready standbys beside {leader}");
    let waited = eventually(world.span(&within)?, &what, || {
        let (ready, problems) = standbys(&world.history_so_far(), &leader);
        async move {
            if ready == wanted && problems.is_empty() {
                Ok(())
            } else {
                Err(format!("{ready} ready standbys; {problems:?}"))
            }
        }
    })
    .await;
    if let Err(e) = waited {
        return Err(super::diagnosis::explained(world, e).await.into());
    }
    Ok(())
}

#[then(expr = "the lease is renewed within {duration}")]
async fn lease_renewed(world: &mut World, within: Dur) -> Step {
    let first = lease(world).await?.spec.and_then(|s| s.renew_time);
    eventually(world.span(&within)?, "renewTime to advance", || async {
        let now = lease(world)
            .await
            .map_err(|e| super::chain(&e))?
            .spec
            .and_then(|s| s.renew_time);
        if now.is_some() && now != first {
            Ok(())
        } else {
            Err(format!("renewTime {now:?}"))
        }
    })
    .await?;
    Ok(())
}

#[then(expr = "the lease duration is {duration}")]
async fn lease_duration_is(world: &mut World, duration: Dur) -> Step {
    let expected = world.span(&duration)?;
    ensure!(
        expected.subsec_nanos() == 0,
        "a Lease holds whole seconds (spec.leaseDurationSeconds): {} is not",
        duration.shown(expected)
    );
    let got = lease(world)
        .await?
        .spec
        .and_then(|s| s.lease_duration_seconds);
    ensure!(
        got.and_then(|s| u64::try_from(s).ok()) == Some(expected.as_secs()),
        "spec.leaseDurationSeconds: expected {}, found {got:?}",
        duration.shown(expected)
    );
    Ok(())
}

/// Every live replica that reports a gauge (leaders and standbys).
pub fn leading_candidates(history: &History) -> Vec<String> {
    let mut replicas: std::collections::BTreeSet<String> = Default::default();
    let mut gone: std::collections::BTreeSet<String> = Default::default();
    for e in history.entries() {
        match &e.observation {
            Observation::Gauge { replica, .. } => {
                replicas.insert(replica.clone());
            }
            Observation::Pod {
                name,
                terminating: true,
                ..
            } => {
                gone.insert(name.clone());
            }
            _ => {}
        }
    }
    replicas.into_iter().filter(|r| !gone.contains(r)).collect()
}

/// The replicas whose Pod is frozen now: held by a fault and not released since. A frozen
/// replica is not scraped, so its last gauge sample stands, stale: it leads nothing while
/// it cannot run.
fn frozen_now(history: &History) -> std::collections::BTreeSet<String> {
    let mut frozen = std::collections::BTreeSet::new();
    for e in history.entries() {
        let Observation::Fault { verb, target, .. } = &e.observation else {
            continue;
        };
        let Some((_, pod)) = target.strip_prefix("pod ").and_then(|t| t.rsplit_once('/')) else {
            continue;
        };
        match verb.as_str() {
            "hold" => {
                frozen.insert(pod.to_string());
            }
            "release" => {
                frozen.remove(pod);
            }
            _ => {}
        }
    }
    frozen
}

/// The replicas whose latest gauge sample says they lead, leaving out Pods that are
/// terminating or gone, and replicas frozen now.
pub fn leading_now(history: &History) -> Vec<String> {
    let mut latest: std::collections::BTreeMap<String, bool> = Default::default();
    let mut gone: std::collections::BTreeSet<String> = Default::default();
    for e in history.entries() {
        match &e.observation {
            o @ (Observation::Gauge { .. } | Observation::Down { .. }) => {
                if let Some((replica, leader)) = o.leadership() {
                    latest.insert(replica.to_string(), leader);
                }
            }
            Observation::Pod {
                name,
                terminating: true,
                ..
            } => {
                gone.insert(name.clone());
            }
            _ => {}
        }
    }
    let frozen = frozen_now(history);
    latest
        .into_iter()
        .filter(|(r, leads)| *leads && !gone.contains(r) && !frozen.contains(r))
        .map(|(r, _)| r)
        .collect()
}

#[then("the leader gauges sum to 1")]
async fn gauges_sum_to_one(world: &mut World) -> Step {
    let leading = leading_now(&world.history().await);
    ensure!(
        leading.len() == 1,
        "expected 1 live replica whose gauge says leader, found {}: {leading:?}",
        leading.len()
    );
    Ok(())
}

#[then(expr = "the lease transitions grew by exactly {int}")]
async fn transitions_grew_by(world: &mut World, by: i64) -> Step {
    let before: i64 = world.transitions_at_first_leader.ok_or_else(|| {
        StepError::Missing(
            "the lease's transitions were not seen when the first leader was: run \"within \
             {duration} exactly one replica leads\" first"
                .into(),
        )
    })?;
    let now = lease(world)
        .await?
        .spec
        .and_then(|s| s.lease_transitions)
        .map(i64::from)
        .unwrap_or_default();
    ensure!(
        now - before == by,
        "leaseTransitions went from {before} to {now}: grew by {}, expected {by}",
        now - before
    );
    Ok(())
}

#[then(expr = "no replica leads for {duration}")]
async fn nobody_leads_for(world: &mut World, span: Dur) -> Step {
    throughout(world.span(&span)?, "no replica leads", || {
        let leading = leading_now(&world.history_so_far());
        async move {
            if leading.is_empty() {
                Ok(())
            } else {
                Err(format!("{leading:?} leads"))
            }
        }
    })
    .await?;
    Ok(())
}

#[then(expr = "within {duration} the old leader no longer leads")]
async fn old_leader_stops(world: &mut World, within: Dur) -> Step {
    // The leader replaced by an earlier step, else the one seen last.
    let old = match world.old_leader.clone() {
        Some(old) => old,
        None => world.seen_leader()?,
    };
    let what = format!("{old} no longer says it leads");
    eventually(world.span(&within)?, &what, || {
        let stopped = stopped_leading_after_last_fault(&world.history_so_far(), &old);
        async move {
            if stopped {
                Ok(())
            } else {
                Err("its gauge still says leader".to_string())
            }
        }
    })
    .await?;
    Ok(())
}

/// Whether `replica` was seen not leading — a standby sample, down, or its Pod terminating
/// or gone — at or after the last fault. The moment it stopped can fall between two polls
/// (a replica that steps down and exits at once, then is restarted), so the history since
/// the fault is read, not only its latest sample.
pub fn stopped_leading_after_last_fault(history: &History, replica: &str) -> bool {
    let since = history
        .entries()
        .iter()
        .filter(|e| matches!(e.observation, Observation::Fault { .. }))
        .map(|e| e.time)
        .max();
    history
        .entries()
        .iter()
        .filter(|e| since.is_none_or(|t| e.time >= t))
        .any(|e| match &e.observation {
            Observation::Pod {
                name,
                phase,
                terminating,
                ..
            } => name == replica && (*terminating || phase == "Deleted"),
            o => o.leadership() == Some((replica, false)),
        })
}

#[then(expr = "within {duration} another replica leads")]
async fn another_leads(world: &mut World, within: Dur) -> Step {
    let old = world.seen_leader()?;
    let leader = wait_for_leader(world, world.span(&within)?, Some(&old)).await?;
    world.note(&format!("{leader} leads after {old}"));
    world.old_leader = Some(old);
    world.leader = Some(leader);
    Ok(())
}

#[then(expr = "within {duration} the same replica leads again")]
async fn same_leads_again(world: &mut World, within: Dur) -> Step {
    let old = world.seen_leader()?;
    let leader = wait_for_leader(world, world.span(&within)?, None).await?;
    ensure!(
        leader == old,
        "another replica took over instead of {old}: {leader} leads"
    );
    world.note(&format!("{leader} leads again"));
    Ok(())
}

#[then(expr = "the leader keeps leading for {duration}")]
async fn keeps_leading(world: &mut World, span: Dur) -> Step {
    let leader = world.seen_leader()?;
    let what = format!("{leader} keeps leading");
    throughout(world.span(&span)?, &what, || {
        let now = current_leader(&world.history_so_far());
        let leader = &leader;
        async move {
            match now {
                Some(other) if other != *leader => Err(format!("{other} took over")),
                _ => Ok(()),
            }
        }
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[test]
    fn a_leader_that_went_down_after_the_fault_stopped_leading_even_if_it_leads_again() {
        let t = Utc::now();
        let at = |ms: i64| t + chrono::Duration::milliseconds(ms);
        let gauge = |leader: bool| Observation::Gauge {
            replica: "a".into(),
            leader,
        };
        let mut h = History::new();
        h.push(at(0), gauge(false));
        h.push(at(100), gauge(true));
        h.push(
            at(200),
            Observation::Fault {
                verb: "delete".into(),
                target: "lock ops/lock".into(),
                detail: "by hand".into(),
            },
        );
        h.push(at(300), gauge(true));
        assert!(
            !stopped_leading_after_last_fault(&h, "a"),
            "a standby sample before the fault does not count"
        );
        h.push(
            at(400),
            Observation::Down {
                replica: "a".into(),
                reason: "connection refused".into(),
            },
        );
        h.push(at(900), gauge(true));
        assert!(stopped_leading_after_last_fault(&h, "a"));
        assert!(
            leading_now(&h).contains(&"a".to_string()),
            "it leads again after its restart"
        );
        assert!(!stopped_leading_after_last_fault(&h, "b"));
    }

    #[test]
    fn a_replica_that_is_down_does_not_lead_now() {
        let t = Utc::now();
        let mut h = History::new();
        h.push(
            t,
            Observation::Gauge {
                replica: "a".into(),
                leader: true,
            },
        );
        assert_eq!(leading_now(&h), vec!["a".to_string()]);
        h.push(
            t + chrono::Duration::milliseconds(100),
            Observation::Down {
                replica: "a".into(),
                reason: "connection refused".into(),
            },
        );
        assert!(leading_now(&h).is_empty());
    }

    #[test]
    fn a_frozen_replica_does_not_lead_now_until_it_is_released() {
        let t = Utc::now();
        let at = |ms: i64| t + chrono::Duration::milliseconds(ms);
        let fault = |verb: &str| Observation::Fault {
            verb: verb.into(),
            target: "pod ops/a".into(),
            detail: String::new(),
        };
        let mut h = History::new();
        h.push(
            at(0),
            Observation::Gauge {
                replica: "a".into(),
                leader: true,
            },
        );
        h.push(at(100), fault("hold"));
        assert!(leading_now(&h).is_empty(), "its last sample is stale");
        h.push(at(200), fault("release"));
        assert_eq!(leading_now(&h), vec!["a".to_string()]);
    }

    #[test]
    fn the_leader_is_the_holder_whose_gauge_alone_says_leader() {
        let mut h = History::new();
        let t = Utc::now();
        h.push(
            t,
            Observation::Lock {
                lock: "l".into(),
                holder: Some("a".into()),
                transitions: Some(0),
                resource_version: String::new(),
            },
        );
        h.push(
            t,
            Observation::Gauge {
                replica: "a".into(),
                leader: true,
            },
        );
        h.push(
            t,
            Observation::Gauge {
                replica: "b".into(),
                leader: false,
            },
        );
        assert_eq!(current_leader(&h).as_deref(), Some("a"));
        h.push(
            t,
            Observation::Gauge {
                replica: "b".into(),
                leader: true,
            },
        );
        assert_eq!(current_leader(&h), None, "two gauges say leader");
    }
}
