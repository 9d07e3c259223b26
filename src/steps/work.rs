//! Steps of the work a leader does, whatever the operator: the profile's `work` says what
//! gives the operator work (objects to create, a patch that gives it more) and which writes
//! prove that a leader did it. The leadership scenarios use these steps, not an operator's
//! own resources, so that they run against every operator that has a profile with `work`;
//! they are tagged `@work` and left out for the others.

use chrono::{DateTime, Utc};
use cucumber::{given, then, when};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};

use crate::deploy::{Manifest, apply_all, read_manifests, resolve};
use crate::record::{History, Observation};
use crate::steps::wait::eventually;
use crate::steps::{Dur, World};
use crate::subject::Work;

/// The logical namespace the work objects are created in (each scenario has its own).
const WORK_NAMESPACE: &str = "default";

fn work(world: &World) -> &'static Work {
    world.subject().work.as_ref().unwrap_or_else(|| {
        panic!(
            "the profile of {} has no work (its @work scenarios are left out)",
            world.subject().name
        )
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

fn work_manifests(world: &World) -> Vec<Manifest> {
    match &work(world).objects {
        Some(path) => read_manifests(path).unwrap_or_else(|e| {
            panic!(
                "reading the work of {} failed: {}",
                world.subject().name,
                crate::steps::chain(&e)
            )
        }),
        None => Vec::new(),
    }
}

#[given("the operator has work")]
async fn has_work(world: &mut World) {
    let manifests = work_manifests(world);
    if manifests.is_empty() {
        world.note("the operator works on its own: no objects to create");
        return;
    }
    let namespace = world.ensure_namespace(WORK_NAMESPACE).await;
    let client = world.client().expect("cluster");
    apply_all(&client, &manifests, Some(&namespace))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "creating the work of {} in {namespace} failed: {}",
                world.subject().name,
                crate::steps::chain(&e)
            )
        });
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
}

#[given(expr = "within {duration} the operator has done work")]
#[then(expr = "within {duration} the operator has done work")]
async fn has_done_work(world: &mut World, within: Dur) {
    let work = work(world);
    let what = format!("a write of {} by a replica", work.writes.join(" or "));
    let (_, replica, write) = eventually(within.0, &what, || {
        let done = work_done(&world.history_so_far(), work, None);
        async move {
            done.into_iter()
                .next()
                .ok_or_else(|| "no such write in the audit log yet".to_string())
        }
    })
    .await;
    world.note(&format!("{replica} did work: {write}"));
}

#[when("the operator is given more work")]
async fn more_work(world: &mut World) {
    let work = work(world);
    world
        .remembered
        .insert("more work at".into(), Utc::now().to_rfc3339());
    let Some(patch) = &work.more else {
        world.note("the operator works on its own: no more work to give");
        return;
    };
    let manifests = work_manifests(world);
    let namespace = world.ensure_namespace(WORK_NAMESPACE).await;
    let client = world.client().expect("cluster");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .unwrap_or_else(|e| panic!("API discovery failed: {e}"));
    for manifest in &manifests {
        let name = manifest.object.metadata.name.as_deref().unwrap_or_default();
        let kind = crate::subject::kind_of(&manifest.object);
        let (resource, capabilities) =
            resolve(&discovery, manifest).unwrap_or_else(|e| panic!("{}", crate::steps::chain(&e)));
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), &namespace, &resource),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("patching {kind} {name} with {patch} failed: {e}"));
    }
    world.note(&format!("gave the operator more work: {patch}"));
}

#[then(expr = "within {duration} the leader has done the new work")]
async fn leader_did_new_work(world: &mut World, within: Dur) {
    let work = work(world);
    let leader = world
        .leader
        .clone()
        .expect("a step saw a leader before this one");
    let since = world
        .remembered
        .get("more work at")
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .expect("\"the operator is given more work\" came before this step");
    let what = format!(
        "a write of {} by {leader} after it was given more work",
        work.writes.join(" or ")
    );
    let write = eventually(within.0, &what, || {
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
    .await;
    world.note(&format!("{leader} did the new work: {write}"));
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
