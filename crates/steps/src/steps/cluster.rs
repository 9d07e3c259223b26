//! Steps about the cluster itself: starting it, objects, versions, watches.

use std::collections::BTreeMap;
use std::time::Duration;

use cucumber::{given, then, when};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

use super::Doing as _;
use super::{Step, StepError, World};

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A provider that could not start as [`StepError::Acting`], `doing` what; other errors
/// as they are.
fn starting(e: StepError, doing: &str) -> StepError {
    match e {
        StepError::Provider(source) => StepError::Acting {
            doing: doing.into(),
            source,
        },
        other => other,
    }
}

#[given("a cluster")]
async fn a_cluster(world: &mut World) -> Step {
    world
        .start_cluster()
        .await
        .map_err(|e| starting(e, "starting the cluster"))?;
    Ok(())
}

#[given("a simulated cluster")]
async fn a_simulated_cluster(world: &mut World) -> Step {
    world
        .start_simulated_cluster()
        .await
        .map_err(|e| starting(e, "starting the simulated cluster"))?;
    Ok(())
}

/// The namespace of the ConfigMaps the steps made.
fn namespace(world: &World) -> Result<String, StepError> {
    world.config_maps.namespace.clone().ok_or_else(|| {
        StepError::Missing(
            "no step made a ConfigMap before this one: run \"a ConfigMap {string} in \
             namespace {string}\" first"
                .into(),
        )
    })
}

#[given(expr = "a ConfigMap {string} in namespace {string}")]
async fn a_config_map(world: &mut World, name: String, namespace: String) -> Step {
    let namespace = world.ensure_namespace(&namespace).await?;
    let api: Api<ConfigMap> = Api::namespaced(world.client()?, &namespace);
    let created = api
        .create(&PostParams::default(), &config_map(&name))
        .await
        .doing(format!("creating ConfigMap {namespace}/{name}"))?;
    world
        .config_maps
        .resource_versions
        .insert(name, created.metadata.resource_version.unwrap_or_default());
    world.config_maps.namespace = Some(namespace);
    Ok(())
}

#[when(expr = "the ConfigMap {string} is updated twice from the same read")]
async fn updated_twice(world: &mut World, name: String) -> Step {
    let namespace = namespace(world)?;
    let api: Api<ConfigMap> = Api::namespaced(world.client()?, &namespace);
    let read = api
        .get(&name)
        .await
        .doing(format!("reading ConfigMap {namespace}/{name}"))?;
    let mut first = read.clone();
    first.data = Some([("writer".to_string(), "first".to_string())].into());
    api.replace(&name, &PostParams::default(), &first)
        .await
        .doing(format!(
            "updating ConfigMap {namespace}/{name} the first time"
        ))?;
    let mut second = read;
    second.data = Some([("writer".to_string(), "second".to_string())].into());
    let answer = match api.replace(&name, &PostParams::default(), &second).await {
        Ok(_) => UpdateAnswer::Accepted,
        Err(kube::Error::Api(status)) => UpdateAnswer::Refused {
            reason: status.reason.clone(),
        },
        Err(other) => UpdateAnswer::Failed(other.to_string()),
    };
    world.config_maps.second_update = Some(answer);
    Ok(())
}

#[then(expr = "the second update is refused with {string}")]
async fn refused_with(world: &mut World, reason: String) -> Step {
    let answer = world.config_maps.second_update.as_ref().ok_or_else(|| {
        StepError::Missing(
            "no step updated a ConfigMap twice before this one: run \"the ConfigMap {string} \
             is updated twice from the same read\" first"
                .into(),
        )
    })?;
    match answer {
        UpdateAnswer::Refused { reason: seen } if *seen == reason => {}
        UpdateAnswer::Refused { reason: seen } => {
            bail!("the second update was refused with {seen:?}, expected {reason:?}")
        }
        UpdateAnswer::Accepted => {
            bail!("the second update was accepted, expected it refused with {reason:?}")
        }
        UpdateAnswer::Failed(error) => {
            bail!(
                "the second update got no answer (transport error: {error}), expected it refused with {reason:?}"
            )
        }
    }
    Ok(())
}

#[when(expr = "{int} more ConfigMaps are created in namespace {string}")]
async fn more_config_maps(world: &mut World, count: usize, namespace: String) -> Step {
    let namespace = world.ensure_namespace(&namespace).await?;
    let api: Api<ConfigMap> = Api::namespaced(world.client()?, &namespace);
    for i in 0..count {
        let name = format!("more-{i}");
        api.create(&PostParams::default(), &config_map(&name))
            .await
            .doing(format!("creating ConfigMap {namespace}/{name}"))?;
    }
    Ok(())
}

#[then(
    expr = "a watch from the resource version of {string} sees {int} ADDED events within {int}s"
)]
async fn watch_sees(world: &mut World, name: String, count: usize, seconds: u64) -> Step {
    let namespace = namespace(world)?;
    let api: Api<ConfigMap> = Api::namespaced(world.client()?, &namespace);
    let rv = world
        .config_maps
        .resource_versions
        .get(&name)
        .cloned()
        .ok_or_else(|| {
            StepError::Missing(format!(
                "no step made the ConfigMap {name:?}: run \"a ConfigMap {name:?} in namespace \
                 {{string}}\" first"
            ))
        })?;
    let stream = api
        .watch(&WatchParams::default().timeout(seconds as u32), &rv)
        .await
        .doing(format!(
            "starting a watch of the ConfigMaps in {namespace} from resource version {rv}"
        ))?;
    let mut stream = stream.boxed();
    let mut added = Vec::new();
    let collect = async {
        while let Some(event) = stream.next().await {
            if let Ok(WatchEvent::Added(cm)) = event {
                added.push(cm.metadata.name.unwrap_or_default());
                if added.len() == count {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(seconds), collect).await;
    ensure!(
        added.len() == count,
        "expected {count} ADDED events within {seconds}s, saw {added:?}"
    );
    Ok(())
}

/// The ConfigMaps the cluster steps made, and what they saw of them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConfigMapsSeen {
    /// The namespace of the last ConfigMap "a ConfigMap {string} in namespace {string}"
    /// made: where the later ConfigMap steps look.
    pub namespace: Option<String>,
    /// The resource version each ConfigMap had when that step made it, by name: where a
    /// watch "from the resource version of" it starts.
    pub resource_versions: BTreeMap<String, String>,
    /// What the API server answered the second of two updates from the same read.
    pub second_update: Option<UpdateAnswer>,
}

/// What the API server answered an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateAnswer {
    /// The update was applied.
    Accepted,
    /// The API server refused it.
    Refused {
        /// The reason of its status (`Conflict`, …).
        reason: String,
    },
    /// No answer came: the request failed on the way (its error).
    Failed(String),
}
