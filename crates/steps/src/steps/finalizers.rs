//! Steps about finalizers: the finalizer on a Memcached, an object held Terminating by it,
//! the cleanup it guards (the operator's registry entry and its `Finalized` Event), and
//! namespace deletion.
//!
//! The registry is the bundled operator's state that owner references cannot clean up:
//! the ConfigMap `memcached-registry` in the operator's namespace, one key
//! `<namespace>.<name>` per Memcached.

use cucumber::{given, then, when};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace};
use kube::api::{Api, DeleteParams, ListParams};

use super::Doing as _;
use super::memcached::{bulk, get, namespace_of};
use super::reconcile::{accept, origin, refuse};
use super::wait::{eventually, throughout};
use super::{Dur, Step, StepError, World};
use crate::fault::RequestMatch;
use crate::record::Observation;

/// The registry ConfigMap's name.
pub const REGISTRY: &str = "memcached-registry";

/// The registry key of a Memcached.
fn key(world: &World, name: &str) -> Result<String, StepError> {
    Ok(format!("{}.{name}", namespace_of(world, name)?))
}

/// The registry keys of Memcached objects `names`.
fn keys_of(world: &World, names: &[String]) -> Result<Vec<String>, StepError> {
    names.iter().map(|n| key(world, n)).collect()
}

/// The registry's keys (none when it does not exist).
async fn registry_keys(world: &World) -> Result<Vec<String>, StepError> {
    let namespace = world.operator_namespace()?;
    let cm = Api::<ConfigMap>::namespaced(world.client()?, &namespace)
        .get_opt(REGISTRY)
        .await
        .doing(format!("reading ConfigMap {namespace}/{REGISTRY}"))?;
    Ok(cm
        .and_then(|c| c.data)
        .map(|d| d.into_keys().collect())
        .unwrap_or_default())
}

/// Whether the registry holds an entry for each of `names`.
///
/// # Errors
/// [`StepError::Unmet`] naming the entries it lacks; or when the registry cannot be read.
async fn registry_has(world: &World, names: &[String]) -> Result<(), StepError> {
    let keys = registry_keys(world).await?;
    let missing: Vec<String> = keys_of(world, names)?
        .into_iter()
        .filter(|k| !keys.contains(k))
        .collect();
    ensure!(
        missing.is_empty(),
        "the registry lacks {missing:?}; it holds {keys:?}"
    );
    Ok(())
}

async fn registry_lacks(world: &World, names: &[String]) -> Result<(), StepError> {
    let keys = registry_keys(world).await?;
    let left: Vec<String> = keys_of(world, names)?
        .into_iter()
        .filter(|k| keys.contains(k))
        .collect();
    ensure!(
        left.is_empty(),
        "expected no registry entry for {names:?}; the registry still holds {left:?} (all keys: {keys:?})"
    );
    Ok(())
}

#[given(expr = "within {duration} the registry holds an entry for memcached {string}")]
#[then(expr = "within {duration} the registry holds an entry for memcached {string}")]
async fn registry_holds(world: &mut World, within: Dur, name: String) -> Step {
    let what = format!("the registry holds the key {}", key(world, &name)?);
    eventually(world.span(&within)?, &what, || async {
        registry_has(world, std::slice::from_ref(&name))
            .await
            .map_err(|e| super::chain(&e))
    })
    .await?;
    Ok(())
}

#[given(expr = "within {duration} the registry holds an entry for each of the Memcached objects")]
#[then(expr = "within {duration} the registry holds an entry for each of the Memcached objects")]
async fn registry_holds_all(world: &mut World, within: Dur) -> Step {
    let names = bulk(world);
    let what = format!("the registry holds a key for each of {names:?}");
    eventually(world.span(&within)?, &what, || async {
        registry_has(world, &names)
            .await
            .map_err(|e| super::chain(&e))
    })
    .await?;
    Ok(())
}

#[then(expr = "the registry still holds an entry for memcached {string}")]
async fn registry_still_holds(world: &mut World, name: String) -> Step {
    registry_has(world, std::slice::from_ref(&name)).await?;
    Ok(())
}

#[then(expr = "the registry holds no entry for memcached {string}")]
async fn registry_holds_none(world: &mut World, name: String) -> Step {
    registry_lacks(world, &[name]).await?;
    Ok(())
}

#[then(expr = "the registry holds no entry for any of the Memcached objects")]
async fn registry_holds_none_of_all(world: &mut World) -> Step {
    registry_lacks(world, &bulk(world)).await?;
    Ok(())
}

fn finalizers(object: &kube::api::DynamicObject) -> Vec<String> {
    object.metadata.finalizers.clone().unwrap_or_default()
}

#[then(expr = "within {duration} memcached {string} carries the finalizer {string}")]
async fn carries_finalizer(
    world: &mut World,
    within: Dur,
    name: String,
    finalizer: String,
) -> Step {
    let what = format!("memcached {name} carries the finalizer {finalizer}");
    eventually(world.span(&within)?, &what, || async {
        let mc = get(world, &name)
            .await?
            .ok_or_else(|| format!("memcached {name} does not exist"))?;
        if finalizers(&mc).contains(&finalizer) {
            Ok(())
        } else {
            Err(format!("finalizers {:?}", finalizers(&mc)))
        }
    })
    .await?;
    Ok(())
}

/// How long a write already seen through the API may take to reach the audit:
/// kube-apiserver logs a request once it has answered it, so a client can see the object
/// before the audit has its create.
const AUDIT_LAG: std::time::Duration = std::time::Duration::from_secs(10);

#[then(expr = "the finalizer was added to memcached {string} before its Deployment was created")]
async fn finalizer_before_deployment(world: &mut World, name: String) -> Step {
    let namespace = namespace_of(world, &name)?;
    // The steps before saw the Deployment; its create may still be on its way to the audit.
    // Waiting for it ends at once when it is there; when it never comes, the check below
    // says what the audit holds.
    let _ = eventually(
        AUDIT_LAG,
        &format!("the create of a Deployment in {namespace} in the audit"),
        || async {
            let history = world.history().await;
            let created = history.entries().iter().any(|e| {
                matches!(&e.observation, Observation::Write { namespace: ns, verb, resource, code, .. }
                    if *ns == namespace && verb == "create" && resource == "deployments" && (200..300).contains(code))
            });
            if created { Ok(()) } else { Err("not yet".to_string()) }
        },
    )
    .await;
    let history = world.history().await;
    let writes: Vec<_> = history
        .entries()
        .iter()
        .filter(|e| {
            matches!(&e.observation, Observation::Write { namespace: ns, code, .. }
                if *ns == namespace && (200..300).contains(code))
        })
        .cloned()
        .collect();
    let position = |what: &dyn Fn(&str, &str, &str) -> bool| {
        writes.iter().position(|e| match &e.observation {
            Observation::Write {
                verb,
                resource,
                name,
                ..
            } => what(verb, resource, name),
            _ => false,
        })
    };
    let finalizer = position(&|verb, resource, object| {
        matches!(verb, "update" | "patch") && resource == "memcacheds" && object == name
    });
    let created = position(&|verb, resource, _| verb == "create" && resource == "deployments");
    let origin = origin(&history);
    let shown = crate::record::describe(&writes, origin);
    match (finalizer, created) {
        (Some(f), Some(c)) if f < c => {}
        (None, _) => bail!(
            "the operator never updated memcached {name} (where the finalizer goes); its writes in {namespace}:\n{shown}"
        ),
        (_, None) => {
            bail!("the operator never created a Deployment in {namespace}; its writes:\n{shown}")
        }
        (Some(_), Some(_)) => bail!(
            "the Deployment of memcached {name} was created before the finalizer was added; the operator's writes in {namespace}:\n{shown}"
        ),
    }
    Ok(())
}

#[then(expr = "memcached {string} stays Terminating with its finalizer for {duration}")]
async fn stays_terminating(world: &mut World, name: String, span: Dur) -> Step {
    let what = format!("memcached {name} exists, Terminating, with its finalizer");
    throughout(world.span(&span)?, &what, || async {
        let mc = get(world, &name)
            .await?
            .ok_or_else(|| format!("memcached {name} is gone"))?;
        if mc.metadata.deletion_timestamp.is_none() {
            return Err("it is not Terminating (no deletionTimestamp)".into());
        }
        if finalizers(&mc).is_empty() {
            return Err("it has no finalizer left".into());
        }
        Ok(())
    })
    .await?;
    Ok(())
}

#[then(expr = "an Event {string} was recorded for memcached {string}")]
async fn event_recorded(world: &mut World, reason: String, name: String) -> Step {
    let namespace = namespace_of(world, &name)?;
    // The uid it had when a step deleted it: the Events of that object only.
    let uid = world.memcacheds.deleted_uids.get(&name).cloned();
    let events = Api::<Event>::namespaced(world.client()?, &namespace)
        .list(&ListParams::default())
        .await
        .doing(format!("listing the events of {namespace}"))?;
    let about: Vec<&Event> = events
        .items
        .iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Memcached")
                && e.involved_object.name.as_deref() == Some(name.as_str())
                && (uid.is_none() || e.involved_object.uid == uid)
        })
        .collect();
    if !about
        .iter()
        .any(|e| e.reason.as_deref() == Some(reason.as_str()))
    {
        let seen: Vec<String> = about
            .iter()
            .map(|e| {
                format!(
                    "{} ({})",
                    e.reason.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default()
                )
            })
            .collect();
        bail!("no Event {reason} about memcached {namespace}/{name}; its events: {seen:?}");
    }
    Ok(())
}

fn registry_match(world: &World, configmap: &str) -> Result<RequestMatch, StepError> {
    Ok(RequestMatch {
        verbs: ["update", "patch", "delete"].map(String::from).to_vec(),
        resource: Some("configmaps".into()),
        group: Some(String::new()),
        namespace: Some(world.operator_namespace()?),
        name: Some(configmap.to_string()),
        ..RequestMatch::default()
    })
}

#[given(expr = "the API server rejects changes to ConfigMap {string} in the operator's namespace")]
#[when(expr = "the API server rejects changes to ConfigMap {string} in the operator's namespace")]
async fn rejects_changes(world: &mut World, configmap: String) -> Step {
    let matches = registry_match(world, &configmap)?;
    refuse(world, &format!("changes to ConfigMap {configmap}"), matches).await?;
    Ok(())
}

#[when(
    expr = "the API server accepts changes to ConfigMap {string} in the operator's namespace again"
)]
async fn accepts_changes(world: &mut World, configmap: String) -> Step {
    accept(world, &format!("changes to ConfigMap {configmap}")).await?;
    Ok(())
}

#[then(expr = "the registry entry of memcached {string} was removed by the new leader")]
async fn removed_by_new_leader(world: &mut World, name: String) -> Step {
    let leader = world.leader.clone().ok_or_else(|| {
        StepError::Missing(
            "no step saw the new leader before: run \"within {duration} another replica leads\" \
             first"
                .into(),
        )
    })?;
    let namespace = world.operator_namespace()?;
    let history = world.history().await;
    let changes: Vec<_> = history
        .entries()
        .iter()
        .filter(|e| {
            matches!(&e.observation, Observation::Write { resource, namespace: ns, name: n, .. }
                if resource == "configmaps" && *ns == namespace && n == REGISTRY)
        })
        .cloned()
        .collect();
    let by_leader = changes.iter().any(|e| {
        matches!(&e.observation, Observation::Write { replica, code, verb, .. }
            if *replica == leader && (200..300).contains(code) && verb != "create")
    });
    let origin = origin(&history);
    ensure!(
        by_leader,
        "the new leader {leader} never changed the registry; the changes of {REGISTRY} (memcached {name}):\n{}",
        crate::record::describe(&changes, origin)
    );
    Ok(())
}

#[when(expr = "namespace {string} is deleted")]
async fn namespace_deleted(world: &mut World, logical: String) -> Step {
    let name = world.namespace(&logical)?;
    Api::<Namespace>::all(world.client()?)
        .delete(&name, &DeleteParams::default())
        .await
        .doing(format!("deleting namespace {name}"))?;
    world.note(&format!("deleted namespace {name}"));
    Ok(())
}

#[then(expr = "within {duration} namespace {string} is gone")]
async fn namespace_gone(world: &mut World, within: Dur, logical: String) -> Step {
    let name = world.namespace(&logical)?;
    let namespaces: Api<Namespace> = Api::all(world.client()?);
    let memcacheds = super::memcached::api(world, &name)?;
    let what = format!("namespace {name} no longer exists");
    eventually(world.span(&within)?, &what, || async {
        let Some(ns) = namespaces
            .get_opt(&name)
            .await
            .map_err(|e| format!("reading namespace {name}: {e}"))?
        else {
            return Ok(());
        };
        let left: Vec<String> = memcacheds
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|m| {
                        format!(
                            "{} (finalizers {:?})",
                            m.metadata.name.clone().unwrap_or_default(),
                            m.metadata.finalizers.clone().unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Err(format!(
            "it is {}; Memcached objects left in it: {left:?}",
            ns.status
                .and_then(|s| s.phase)
                .unwrap_or_else(|| "there".into())
        ))
    })
    .await?;
    Ok(())
}
