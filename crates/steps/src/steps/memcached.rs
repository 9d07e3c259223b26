//! Steps about Memcached objects and what they own: creating, scaling, deleting and
//! submitting invalid ones; waiting for their Deployment, pods and status.
//!
//! A Memcached is named in features by its name alone; the step that created it
//! remembers its namespace (a logical one, `default` unless stated, prefixed on shared
//! clusters) in [`Memcacheds`], so later steps find it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use cucumber::{given, then, when};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::Doing as _;
use super::wait::{eventually, throughout};
use super::{Dur, Step, StepError, World};

/// The Memcached resource (`cache.example.com/v1alpha1`, plural `memcacheds`), as the
/// recorder watches it.
pub use crate::record::recorder::memcached_resource as resource;

/// The Memcached objects of `namespace`.
///
/// # Errors
/// [`StepError::NoCluster`] before a cluster was started.
pub fn api(world: &World, namespace: &str) -> Result<Api<DynamicObject>, StepError> {
    Ok(Api::namespaced_with(
        world.client()?,
        namespace,
        &resource(),
    ))
}

/// The (real) namespace of the Memcached the scenario created under `name`; `default`
/// when no step created it.
///
/// # Errors
/// [`StepError::NoCluster`] before a cluster was started.
pub fn namespace_of(world: &World, name: &str) -> Result<String, StepError> {
    match world.memcacheds.namespaces.get(name) {
        Some(namespace) => Ok(namespace.clone()),
        None => world.namespace("default"),
    }
}

/// The names of the Memcached objects the last bulk step created.
pub fn bulk(world: &World) -> Vec<String> {
    world.memcacheds.bulk.clone()
}

fn memcached(name: &str, size: Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, &resource());
    object.data = json!({ "spec": { "size": size } });
    object
}

/// Reads a Memcached: `None` when it does not exist.
///
/// # Errors
/// What went wrong reading it, as text for a step's "last observed".
pub async fn get(world: &World, name: &str) -> Result<Option<DynamicObject>, String> {
    read(world, name).await.map_err(|e| super::chain(&e))
}

/// Reads a Memcached: `None` when it does not exist.
async fn read(world: &World, name: &str) -> Result<Option<DynamicObject>, StepError> {
    let namespace = namespace_of(world, name)?;
    api(world, &namespace)?
        .get_opt(name)
        .await
        .doing(format!("reading memcached {namespace}/{name}"))
}

/// Reads the Deployment named after a Memcached: `None` when it does not exist.
///
/// # Errors
/// What went wrong reading it, as text for a step's "last observed".
pub async fn deployment(world: &World, name: &str) -> Result<Option<Deployment>, String> {
    read_deployment(world, name)
        .await
        .map_err(|e| super::chain(&e))
}

/// Reads the Deployment named after a Memcached: `None` when it does not exist.
async fn read_deployment(world: &World, name: &str) -> Result<Option<Deployment>, StepError> {
    let namespace = namespace_of(world, name)?;
    Api::<Deployment>::namespaced(world.client()?, &namespace)
        .get_opt(name)
        .await
        .doing(format!("reading deployment {namespace}/{name}"))
}

/// `spec.size` of a Memcached as stored (any JSON value).
pub fn size_of(object: &DynamicObject) -> &Value {
    &object.data["spec"]["size"]
}

/// `status.nodes` of a Memcached.
pub fn nodes_of(object: &DynamicObject) -> Vec<String> {
    object.data["status"]["nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the Deployment names `owner` (by uid) as its controlling owner.
fn controlled_by(deployment: &Deployment, owner: &DynamicObject) -> bool {
    let uid = owner.metadata.uid.as_deref();
    deployment
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.kind == "Memcached" && Some(r.uid.as_str()) == uid)
}

fn owners(deployment: &Deployment) -> String {
    let refs: Vec<String> = deployment
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| {
            format!(
                "{} {} (uid {}, controller {:?})",
                r.kind, r.name, r.uid, r.controller
            )
        })
        .collect();
    if refs.is_empty() {
        "no owner".into()
    } else {
        refs.join(", ")
    }
}

/// The Deployment of Memcached `name` when it has `replicas` replicas and is controlled by
/// it (and, with `unlike`, has another uid).
async fn owned_deployment(
    world: &World,
    name: &str,
    replicas: i32,
    unlike: Option<&str>,
) -> Result<Deployment, String> {
    let mc = get(world, name)
        .await?
        .ok_or_else(|| format!("memcached {name} does not exist"))?;
    let d = deployment(world, name)
        .await?
        .ok_or_else(|| format!("memcached {name} has no Deployment"))?;
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let have = d.spec.as_ref().and_then(|s| s.replicas);
    if unlike == Some(uid.as_str()) {
        return Err(format!("the Deployment is still the old one (uid {uid})"));
    }
    if have != Some(replicas) {
        return Err(format!("its Deployment has {have:?} replicas"));
    }
    if !controlled_by(&d, &mc) {
        return Err(format!(
            "its Deployment is owned by {}, not by memcached {name} (uid {})",
            owners(&d),
            mc.metadata.uid.unwrap_or_default()
        ));
    }
    Ok(d)
}

/// The names of the pods the Deployment of Memcached `name` selects, sorted.
async fn pods_of(world: &World, name: &str) -> Result<Vec<String>, String> {
    let d = deployment(world, name)
        .await?
        .ok_or_else(|| format!("memcached {name} has no Deployment"))?;
    let labels = d
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let namespace = namespace_of(world, name).map_err(|e| super::chain(&e))?;
    let client = world.client().map_err(|e| super::chain(&e))?;
    let pods = Api::<Pod>::namespaced(client, &namespace)
        .list(&ListParams::default().labels(&selector.join(",")))
        .await
        .map_err(|e| format!("listing the pods of {namespace}/{name}: {e}"))?;
    let mut names: Vec<String> = pods
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// Whether `status.nodes` of Memcached `name` names exactly its `count` pods.
async fn lists_its_pods(world: &World, name: &str, count: usize) -> Result<(), String> {
    let mc = get(world, name)
        .await?
        .ok_or_else(|| format!("memcached {name} does not exist"))?;
    let nodes = nodes_of(&mc);
    let pods = pods_of(world, name).await?;
    if pods.len() != count {
        return Err(format!(
            "its Deployment has {} pods {pods:?}; status.nodes is {nodes:?}",
            pods.len()
        ));
    }
    if nodes != pods {
        return Err(format!("status.nodes is {nodes:?}, its pods are {pods:?}"));
    }
    Ok(())
}

async fn create(
    world: &mut World,
    name: &str,
    size: i64,
    logical_namespace: &str,
) -> Result<(), StepError> {
    let namespace = world.ensure_namespace(logical_namespace).await?;
    api(world, &namespace)?
        .create(&PostParams::default(), &memcached(name, json!(size)))
        .await
        .doing(format!(
            "creating memcached {namespace}/{name} of size {size}"
        ))?;
    world
        .memcacheds
        .namespaces
        .insert(name.to_string(), namespace.clone());
    world.note(&format!(
        "created memcached {namespace}/{name} of size {size}"
    ));
    Ok(())
}

#[given(expr = "a Memcached {string} of size {int}")]
async fn a_memcached(world: &mut World, name: String, size: i64) -> Step {
    create(world, &name, size, "default").await?;
    Ok(())
}

#[when(expr = "a Memcached {string} of size {int} is created")]
async fn is_created(world: &mut World, name: String, size: i64) -> Step {
    create(world, &name, size, "default").await?;
    Ok(())
}

#[given(expr = "a Memcached {string} of size {int} in namespace {string}")]
async fn a_memcached_in(world: &mut World, name: String, size: i64, namespace: String) -> Step {
    create(world, &name, size, &namespace).await?;
    Ok(())
}

#[given(expr = "{int} Memcached objects of size {int} in namespace {string}")]
#[when(expr = "{int} Memcached objects of size {int} are created at once in namespace {string}")]
async fn many_at_once(world: &mut World, count: usize, size: i64, logical: String) -> Step {
    let namespace = world.ensure_namespace(&logical).await?;
    let api = api(world, &namespace)?;
    let names: Vec<String> = (1..=count).map(|i| format!("memcached-{i}")).collect();
    world.memcacheds.bulk_started = Some(Utc::now());
    let creates = names.iter().map(|name| {
        let api = api.clone();
        let object = memcached(name, json!(size));
        async move {
            api.create(&PostParams::default(), &object)
                .await
                .map_err(|e| format!("{name}: {e}"))
        }
    });
    let failed: Vec<String> = futures::future::join_all(creates)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    ensure!(
        failed.is_empty(),
        "creating {count} Memcached objects in {namespace} at once: {} failed: {}",
        failed.len(),
        failed.join("; ")
    );
    for name in &names {
        world
            .memcacheds
            .namespaces
            .insert(name.clone(), namespace.clone());
    }
    world.memcacheds.bulk = names;
    world.note(&format!(
        "created {count} memcached objects of size {size} in {namespace}"
    ));
    Ok(())
}

#[then(
    expr = "within {duration} all the Memcached objects have their Deployment and list their pods"
)]
async fn all_reconciled(world: &mut World, within: Dur) -> Step {
    let names = bulk(world);
    if names.is_empty() {
        return Err(StepError::Missing(
            "no step created Memcached objects at once: run \"{int} Memcached objects of size \
             {int} in namespace {string}\" first"
                .into(),
        )
        .into());
    }
    let namespace = namespace_of(world, &names[0])?;
    let client = world.client()?;
    let memcacheds = api(world, &namespace)?;
    let deployments: Api<Deployment> = Api::namespaced(client, &namespace);
    let started = world.memcacheds.bulk_started.unwrap_or_else(Utc::now);
    let what = format!(
        "all {} Memcached objects in {namespace} have a Deployment of their size owned by them and list that many pods in status.nodes",
        names.len()
    );
    eventually(world.span(&within)?, &what, || async {
        let objects = memcacheds
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing memcacheds: {e}"))?;
        let owned = deployments
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing deployments: {e}"))?;
        let mut pending = Vec::new();
        for name in &names {
            let Some(mc) = objects
                .items
                .iter()
                .find(|o| o.metadata.name.as_ref() == Some(name))
            else {
                pending.push(format!("{name}: gone"));
                continue;
            };
            let size = size_of(mc).as_i64().unwrap_or(-1);
            let has_deployment = owned.items.iter().any(|d| {
                d.metadata.name.as_ref() == Some(name)
                    && d.spec.as_ref().and_then(|s| s.replicas) == Some(size as i32)
                    && controlled_by(d, mc)
            });
            let nodes = nodes_of(mc).len();
            if !has_deployment || nodes as i64 != size {
                pending.push(format!(
                    "{name}: {} Deployment, {nodes} of {size} nodes",
                    if has_deployment { "owned" } else { "no owned" }
                ));
            }
        }
        if pending.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} of {} not yet: {}",
                pending.len(),
                names.len(),
                pending
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        }
    })
    .await?;
    let took = (Utc::now() - started).num_milliseconds() as f64 / 1000.0;
    println!(
        "all {} Memcached objects reconciled {took:.1}s after they were created",
        names.len()
    );
    world.note(&format!(
        "all {} memcached objects reconciled in {took:.1}s",
        names.len()
    ));
    Ok(())
}

#[when(expr = "memcached {string} is scaled to {int}")]
async fn scaled_to(world: &mut World, name: String, size: i64) -> Step {
    scale(world, &name, size).await?;
    Ok(())
}

/// Sets the size of the Memcached the scenario created under `name`.
///
/// # Errors
/// When there is no cluster or the API server does not take the change.
pub async fn scale(world: &World, name: &str, size: i64) -> Result<(), StepError> {
    let namespace = namespace_of(world, name)?;
    api(world, &namespace)?
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "size": size } })),
        )
        .await
        .doing(format!("scaling memcached {namespace}/{name} to {size}"))?;
    world.note(&format!("scaled memcached {namespace}/{name} to {size}"));
    Ok(())
}

#[when(expr = "memcached {string} is deleted")]
async fn deleted(world: &mut World, name: String) -> Step {
    let namespace = namespace_of(world, &name)?;
    if let Ok(Some(mc)) = get(world, &name).await {
        world
            .memcacheds
            .deleted_uids
            .insert(name.clone(), mc.metadata.uid.unwrap_or_default());
    }
    api(world, &namespace)?
        .delete(&name, &DeleteParams::default())
        .await
        .doing(format!("deleting memcached {namespace}/{name}"))?;
    world.note(&format!("deleted memcached {namespace}/{name}"));
    Ok(())
}

#[when(expr = "the Deployment of memcached {string} is deleted")]
async fn deployment_deleted(world: &mut World, name: String) -> Step {
    let namespace = namespace_of(world, &name)?;
    let Some(old) = read_deployment(world, &name).await? else {
        bail!("memcached {name} has no Deployment to delete");
    };
    Api::<Deployment>::namespaced(world.client()?, &namespace)
        .delete(&name, &DeleteParams::background())
        .await
        .doing(format!("deleting deployment {namespace}/{name}"))?;
    world
        .memcacheds
        .deleted_deployments
        .insert(name.clone(), old.metadata.uid.unwrap_or_default());
    world.note(&format!("deleted deployment {namespace}/{name}"));
    Ok(())
}

#[given(
    expr = "within {duration} memcached {string} has a Deployment of {int} replica(s) owned by it"
)]
#[then(
    expr = "within {duration} memcached {string} has a Deployment of {int} replica(s) owned by it"
)]
async fn has_deployment(world: &mut World, within: Dur, name: String, replicas: i32) -> Step {
    let what = format!("memcached {name} has a Deployment of {replicas} replicas it controls");
    eventually(world.span(&within)?, &what, || {
        owned_deployment(world, &name, replicas, None)
    })
    .await?;
    Ok(())
}

#[then(
    expr = "within {duration} memcached {string} has a new Deployment of {int} replica(s) owned by it"
)]
async fn has_new_deployment(world: &mut World, within: Dur, name: String, replicas: i32) -> Step {
    let old = world
        .memcacheds
        .deleted_deployments
        .get(&name)
        .cloned()
        .ok_or_else(|| {
            StepError::Missing(format!(
                "no step deleted the Deployment of memcached {name}: run \
                 \"the Deployment of memcached {name:?} is deleted\" first"
            ))
        })?;
    let what = format!(
        "memcached {name} has a new Deployment (not uid {old}) of {replicas} replicas it controls"
    );
    eventually(world.span(&within)?, &what, || {
        owned_deployment(world, &name, replicas, Some(&old))
    })
    .await?;
    Ok(())
}

#[given(expr = "within {duration} the status of memcached {string} lists its {int} pod(s)")]
#[then(expr = "within {duration} the status of memcached {string} lists its {int} pod(s)")]
async fn status_lists_pods(world: &mut World, within: Dur, name: String, count: usize) -> Step {
    let what = format!("status.nodes of memcached {name} names its {count} pods");
    eventually(world.span(&within)?, &what, || {
        lists_its_pods(world, &name, count)
    })
    .await?;
    Ok(())
}

#[then(expr = "within {duration} memcached {string} is gone")]
async fn is_gone(world: &mut World, within: Dur, name: String) -> Step {
    let what = format!("memcached {name} no longer exists");
    eventually(world.span(&within)?, &what, || async {
        match get(world, &name).await? {
            None => Ok(()),
            Some(mc) => Err(format!(
                "it exists{}, finalizers {:?}",
                if mc.metadata.deletion_timestamp.is_some() {
                    ", Terminating"
                } else {
                    ""
                },
                mc.metadata.finalizers.unwrap_or_default()
            )),
        }
    })
    .await?;
    world.note(&format!("memcached {name} is gone"));
    Ok(())
}

#[then(expr = "within {duration} the Deployment of memcached {string} is gone")]
async fn deployment_is_gone(world: &mut World, within: Dur, name: String) -> Step {
    let what = format!("the Deployment of memcached {name} no longer exists");
    eventually(world.span(&within)?, &what, || async {
        match deployment(world, &name).await? {
            None => Ok(()),
            Some(d) => Err(format!(
                "it exists (uid {}), owned by {}",
                d.metadata.uid.clone().unwrap_or_default(),
                owners(&d)
            )),
        }
    })
    .await?;
    Ok(())
}

/// Remembers what the API server answered to the last submission (`doing`): that it
/// accepted it or how it refused it.
///
/// # Errors
/// [`StepError::Api`] when the request got no answer from the API server.
fn remember_answer(
    world: &mut World,
    answer: Result<(), kube::Error>,
    doing: &str,
) -> Result<(), StepError> {
    let answer = match answer {
        Ok(()) => Answer::Accepted,
        Err(kube::Error::Api(s)) => Answer::Refused {
            code: s.code,
            reason: s.reason,
            message: s.message,
        },
        Err(source) => {
            return Err(StepError::Api {
                doing: format!("{doing}: the request did not get an answer from the API server"),
                source,
            });
        }
    };
    world.memcacheds.last_answer = Some(answer);
    Ok(())
}

fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[when(expr = "a Memcached {string} of size {word} is submitted")]
async fn submitted(world: &mut World, name: String, size: String) -> Step {
    let namespace = world.ensure_namespace("default").await?;
    world
        .memcacheds
        .namespaces
        .insert(name.clone(), namespace.clone());
    let answer = api(world, &namespace)?
        .create(&PostParams::default(), &memcached(&name, json_value(&size)))
        .await
        .map(|_| ());
    remember_answer(
        world,
        answer,
        &format!("submitting memcached {namespace}/{name} of size {size}"),
    )?;
    Ok(())
}

#[when(expr = "memcached {string} is changed to size {word}")]
async fn changed_to(world: &mut World, name: String, size: String) -> Step {
    let namespace = namespace_of(world, &name)?;
    let answer = api(world, &namespace)?
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "size": json_value(&size) } })),
        )
        .await
        .map(|_| ());
    remember_answer(
        world,
        answer,
        &format!("changing memcached {namespace}/{name} to size {size}"),
    )?;
    Ok(())
}

#[then(expr = "the API server refused it as {word}, naming the field {string}")]
async fn refused_as(world: &mut World, reason: String, field: String) -> Step {
    let answer = world.memcacheds.last_answer.clone().ok_or_else(|| {
        StepError::Missing(
            "no step submitted or changed a Memcached before: run \"a Memcached {string} of \
             size {word} is submitted\" or \"memcached {string} is changed to size {word}\" \
             first"
                .into(),
        )
    })?;
    let Answer::Refused {
        code,
        reason: answered,
        message,
    } = &answer
    else {
        bail!("the API server accepted it; expected a refusal as {reason}");
    };
    ensure!(
        *answered == reason,
        "expected a refusal as {reason} naming {field}; the API server answered {answer}"
    );
    if reason == "Invalid" {
        ensure!(*code == 422, "an Invalid refusal is a 422: {answer}");
    }
    ensure!(
        message.contains(&field),
        "the refusal does not name the field {field}: {message}"
    );
    Ok(())
}

#[then(expr = "memcached {string} does not exist")]
async fn does_not_exist(world: &mut World, name: String) -> Step {
    if let Some(mc) = read(world, &name).await? {
        bail!("memcached {name} exists with spec {}", mc.data["spec"]);
    }
    if let Some(d) = read_deployment(world, &name).await? {
        bail!(
            "memcached {name} does not exist but a Deployment of its name does, owned by {}",
            owners(&d)
        );
    }
    Ok(())
}

#[then(
    expr = "for {duration} memcached {string} keeps size {int} and a Deployment of {int} replica(s)"
)]
async fn keeps_size(world: &mut World, span: Dur, name: String, size: i64, replicas: i32) -> Step {
    let Some(mc) = read(world, &name).await? else {
        bail!("memcached {name} does not exist");
    };
    let generation = mc.metadata.generation;
    let what = format!(
        "memcached {name} keeps size {size} (generation {generation:?}) and its Deployment {replicas} replicas"
    );
    throughout(world.span(&span)?, &what, || async {
        let mc = get(world, &name)
            .await?
            .ok_or_else(|| format!("memcached {name} is gone"))?;
        if size_of(&mc) != &json!(size) || mc.metadata.generation != generation {
            return Err(format!(
                "size {}, generation {:?}",
                size_of(&mc),
                mc.metadata.generation
            ));
        }
        owned_deployment(world, &name, replicas, None)
            .await
            .map(|_| ())
    })
    .await?;
    Ok(())
}

/// The status of a condition of a Memcached (`True`, `False`, …), if it has it.
pub fn condition(object: &DynamicObject, type_: &str) -> Option<String> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

#[given(expr = "within {duration} memcached {string} is available and no longer progressing")]
#[then(expr = "within {duration} memcached {string} is available and no longer progressing")]
async fn is_available(world: &mut World, within: Dur, name: String) -> Step {
    let what = format!("memcached {name} has the conditions Available True and Progressing False");
    eventually(world.span(&within)?, &what, || async {
        let mc = get(world, &name)
            .await?
            .ok_or_else(|| format!("memcached {name} does not exist"))?;
        let available = condition(&mc, "Available");
        let progressing = condition(&mc, "Progressing");
        if available.as_deref() == Some("True") && progressing.as_deref() == Some("False") {
            Ok(())
        } else {
            Err(format!(
                "Available {available:?}, Progressing {progressing:?}; status {}",
                mc.data["status"]
            ))
        }
    })
    .await?;
    Ok(())
}

/// What the API server answered to a submission or a change of a Memcached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It accepted it.
    Accepted,
    /// It refused it.
    Refused {
        /// The status code (422 for an invalid object).
        code: u16,
        /// The reason (`Invalid`, `Forbidden`, …).
        reason: String,
        /// The message, which names the fields at fault.
        message: String,
    },
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Accepted => f.write_str("accepted"),
            Self::Refused {
                code,
                reason,
                message,
            } => write!(f, "{code} {reason}: {message}"),
        }
    }
}

/// The Memcached objects the scenario made, and what became of them.
#[derive(Debug, Default)]
pub struct Memcacheds {
    /// The (real) namespace of each Memcached a step created or submitted, by its name.
    pub namespaces: BTreeMap<String, String>,
    /// The names of the Memcached objects the last bulk step created, in order.
    pub bulk: Vec<String>,
    /// When the last bulk step started creating its Memcached objects.
    pub bulk_started: Option<DateTime<Utc>>,
    /// The uid each deleted Memcached had (empty when it had none), by its name: the
    /// Events of that object, not of one created again under its name.
    pub deleted_uids: BTreeMap<String, String>,
    /// The uid of the Deployment a step deleted (empty when it had none), by the name of
    /// its Memcached.
    pub deleted_deployments: BTreeMap<String, String>,
    /// What the API server answered to the last submission or change of a Memcached.
    pub last_answer: Option<Answer>,
}
