//! Steps of the work a leader does, whatever the operator: the profile's `work` says what
//! gives the operator work (objects to create, a patch that gives it more) and which writes
//! prove that a leader did it. The leadership scenarios use these steps, not an operator's
//! own resources, so that they run against every operator that has a profile with `work`;
//! they are tagged `@work` and left out for the others.

use chrono::{DateTime, Utc};
use cucumber::{given, then, when};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};

use crate::deploy::{Manifest, Namespacing, apply_all, read_manifests, resolve};
use crate::record::{History, Observation};
use crate::steps::Doing as _;
use crate::steps::wait::eventually;
use crate::steps::{Dur, Step, StepError, World};
use crate::subject::Work;

/// The logical namespace the work objects are created in (each scenario has its own).
const WORK_NAMESPACE: &str = "default";

/// The profile's work.
///
/// # Errors
/// [`StepError::Unmet`] when the profile has none.
fn work(world: &World) -> Result<&'static Work, StepError> {
    world.subject().work.as_ref().ok_or_else(|| {
        StepError::Unmet(format!(
            "the profile of {} has no work (its @work scenarios are left out)",
            world.subject().name
        ))
    })
}

/// The successful writes in `history` that prove work, at or after `since`, as
/// `(time, replica, what)`.
fn work_done(
    history: &History,
    work: &Work,
    since: Option<DateTime<Utc>>,
) -> Vec<(DateTime<Utc>, String, String)> {
    history
        .entries()
        .iter()
        .filter(|e| since.is_none_or(|t| e.time >= t))
        .filter_map(|e| match &e.observation {
            Observation::Write {
                replica,
                verb,
                resource,
                namespace,
                name,
                code,
                election: false,
            } if *code < 400 && work.proves(resource) => Some((
                e.time,
                replica.clone(),
                format!("{verb} {resource} {namespace}/{name}"),
            )),
            _ => None,
        })
        .collect()
}

/// The objects that give the operator work (none when it works on its own).
///
/// # Errors
/// When the profile has no work, or its objects cannot be read.
fn work_manifests(world: &World) -> Result<Vec<Manifest>, StepError> {
    match &work(world)?.objects {
        Some(path) => read_manifests(path).map_err(|e| {
            StepError::Unmet(format!(
                "reading the work of {} failed: {}",
                world.subject().name,
                crate::steps::chain(&e)
            ))
        }),
        None => Ok(Vec::new()),
    }
}

#[given("the operator has work")]
async fn has_work(world: &mut World) -> Step {
    let manifests = work_manifests(world)?;
    if manifests.is_empty() {
        world.note("the operator works on its own: no objects to create");
        return Ok(());
    }
    let namespace = world.ensure_namespace(WORK_NAMESPACE).await?;
    let client = world.client()?;
    apply_all(&client, &manifests, Namespacing::Into(&namespace))
        .await
        .map_err(|e| {
            StepError::Unmet(format!(
                "creating the work of {} in {namespace} failed: {}",
                world.subject().name,
                crate::steps::chain(&e)
            ))
        })?;
    let names: Vec<String> = manifests
        .iter()
        .map(|m| {
            format!(
                "{} {}",
                crate::subject::kind_of(&m.object),
                m.object.metadata.name.as_deref().unwrap_or("")
            )
        })
        .collect();
    world.note(&format!("gave the operator work: {}", names.join(", ")));
    Ok(())
}

#[given(expr = "within {duration} the operator has done work")]
#[then(expr = "within {duration} the operator has done work")]
async fn has_done_work(world: &mut World, within: Dur) -> Step {
    let work = work(world)?;
    let what = format!("a write of {} by a replica", work.writes.join(" or "));
    let waited = eventually(world.span(&within)?, &what, || {
        let done = work_done(&world.history_so_far(), work, None);
        async move {
            done.into_iter()
                .next()
                .ok_or_else(|| "no such write in the audit log yet".to_string())
        }
    })
    .await;
    let (_, replica, write) = match waited {
        Ok(done) => done,
        Err(e) => return Err(super::diagnosis::explained(world, e).await.into()),
    };
    world.note(&format!("{replica} did work: {write}"));
    Ok(())
}

#[when("the operator is given more work")]
pub(super) async fn more_work(world: &mut World) -> Step {
    let work = work(world)?;
    world.work.more_at = Some(Utc::now());
    let Some(patch) = &work.more else {
        world.note("the operator works on its own: no more work to give");
        return Ok(());
    };
    let manifests = work_manifests(world)?;
    let namespace = world.ensure_namespace(WORK_NAMESPACE).await?;
    let client = world.client()?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .doing("running API discovery")?;
    for manifest in &manifests {
        let name = manifest.object.metadata.name.as_deref().unwrap_or_default();
        let kind = crate::subject::kind_of(&manifest.object);
        let (resource, capabilities) =
            resolve(&discovery, manifest).map_err(|e| StepError::Unmet(crate::steps::chain(&e)))?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), &namespace, &resource),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .doing(format!("patching {kind} {name} with {patch}"))?;
    }
    world.note(&format!("gave the operator more work: {patch}"));
    Ok(())
}

#[then(expr = "within {duration} the leader has done the new work")]
async fn leader_did_new_work(world: &mut World, within: Dur) -> Step {
    let work = work(world)?;
    let leader = world.leader.clone().ok_or_else(|| {
        StepError::Missing(
            "no step saw a leader before this one: run \"within {duration} exactly one \
             replica leads\" first"
                .into(),
        )
    })?;
    let since = world.work.more_at.ok_or_else(|| {
        StepError::Missing(
            "no step gave the operator more work before this one: run \"the operator is \
             given more work\" first"
                .into(),
        )
    })?;
    let what = format!(
        "a write of {} by {leader} after it was given more work",
        work.writes.join(" or ")
    );
    let write = eventually(world.span(&within)?, &what, || {
        let done = work_done(&world.history_so_far(), work, Some(since));
        let leader = leader.clone();
        async move {
            let others: Vec<String> = done.iter().map(|(_, replica, _)| replica.clone()).collect();
            done.into_iter()
                .find(|(_, replica, _)| *replica == leader)
                .map(|(_, _, write)| write)
                .ok_or_else(|| {
                    if others.is_empty() {
                        "no such write in the audit log yet".to_string()
                    } else {
                        format!("only writes by {others:?}")
                    }
                })
        }
    })
    .await?;
    world.note(&format!("{leader} did the new work: {write}"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    fn write(
        ms: i64,
        replica: &str,
        resource: &str,
        code: u16,
        election: bool,
    ) -> (DateTime<Utc>, Observation) {
        (
            DateTime::from_timestamp_millis(ms).unwrap(),
            Observation::Write {
                replica: replica.into(),
                verb: "patch".into(),
                resource: resource.into(),
                namespace: "ns".into(),
                name: "x".into(),
                code,
                election,
            },
        )
    }

    #[test]
    fn only_successful_work_writes_since_the_given_time_prove_work() {
        let work = Work {
            objects: None,
            more: None,
            writes: vec!["deployments".into()],
        };
        let mut history = History::default();
        for entry in [
            write(1_000, "a", "deployments", 200, false),
            write(2_000, "b", "deployments/status", 200, false),
            write(3_000, "b", "deployments", 409, false),
            write(4_000, "b", "configmaps", 200, false),
            write(5_000, "b", "leases", 200, true),
            write(6_000, "c", "deployments", 201, false),
        ] {
            history.push(entry.0, entry.1);
        }
        let since = DateTime::from_timestamp_millis(2_000);
        let done: Vec<(i64, String)> = work_done(&history, &work, since)
            .into_iter()
            .map(|(t, r, _)| (t.timestamp_millis(), r))
            .collect();
        assert_eq!(done, [(2_000, "b".into()), (6_000, "c".into())]);
        assert_eq!(work_done(&history, &work, None).len(), 3);
    }
}

/// What the work steps gave the operator.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WorkGiven {
    /// When "the operator is given more work" last ran: the leader's writes from then on
    /// are the new work.
    pub more_at: Option<DateTime<Utc>>,
    /// The request rules (first and last id) holding the leader's next write of its work,
    /// armed by "the API server holds the leader's next write of its work …".
    pub held_by: Option<(u64, u64)>,
}
