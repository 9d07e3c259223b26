//! Steps about the cluster itself: starting it, objects, versions, watches.

use std::time::Duration;

use cucumber::{given, then, when};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

use super::World;

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[given("a cluster")]
async fn a_cluster(world: &mut World) {
    world
        .start_cluster()
        .await
        .unwrap_or_else(|e| panic!("the cluster does not start: {}", super::chain(&e)));
}

#[given("a simulated cluster")]
async fn a_simulated_cluster(world: &mut World) {
    world
        .start_simulated_cluster()
        .await
        .unwrap_or_else(|e| panic!("the simulated cluster does not start: {}", super::chain(&e)));
}

#[given(expr = "a ConfigMap {string} in namespace {string}")]
async fn a_config_map(world: &mut World, name: String, namespace: String) {
    let namespace = world.ensure_namespace(&namespace).await;
    let api: Api<ConfigMap> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let created = api
        .create(&PostParams::default(), &config_map(&name))
        .await
        .unwrap_or_else(|e| panic!("creating ConfigMap {namespace}/{name} failed: {e}"));
    world.remembered.insert(
        format!("rv:{name}"),
        created.metadata.resource_version.unwrap_or_default(),
    );
    world.remembered.insert("namespace".into(), namespace);
}

#[when(expr = "the ConfigMap {string} is updated twice from the same read")]
async fn updated_twice(world: &mut World, name: String) {
    let namespace = world.remembered["namespace"].clone();
    let api: Api<ConfigMap> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let read = api.get(&name).await.expect("read");
    let mut first = read.clone();
    first.data = Some([("writer".to_string(), "first".to_string())].into());
    api.replace(&name, &PostParams::default(), &first)
        .await
        .expect("the first update succeeds");
    let mut second = read;
    second.data = Some([("writer".to_string(), "second".to_string())].into());
    let outcome = match api.replace(&name, &PostParams::default(), &second).await {
        Ok(_) => "accepted".to_string(),
        Err(kube::Error::Api(status)) => status.reason.clone(),
        Err(other) => format!("transport error: {other}"),
    };
    world.remembered.insert("second update".into(), outcome);
}

#[then(expr = "the second update is refused with {string}")]
async fn refused_with(world: &mut World, reason: String) {
    assert_eq!(world.remembered["second update"], reason);
}

#[when(expr = "{int} more ConfigMaps are created in namespace {string}")]
async fn more_config_maps(world: &mut World, count: usize, namespace: String) {
    let namespace = world.ensure_namespace(&namespace).await;
    let api: Api<ConfigMap> = Api::namespaced(world.client().expect("cluster"), &namespace);
    for i in 0..count {
        api.create(&PostParams::default(), &config_map(&format!("more-{i}")))
            .await
            .expect("create");
    }
}

#[then(
    expr = "a watch from the resource version of {string} sees {int} ADDED events within {int}s"
)]
async fn watch_sees(world: &mut World, name: String, count: usize, seconds: u64) {
    let namespace = world.remembered["namespace"].clone();
    let api: Api<ConfigMap> = Api::namespaced(world.client().expect("cluster"), &namespace);
    let rv = world.remembered[&format!("rv:{name}")].clone();
    let stream = api
        .watch(&WatchParams::default().timeout(seconds as u32), &rv)
        .await
        .expect("watch starts");
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
    assert_eq!(
        added.len(),
        count,
        "expected {count} ADDED events within {seconds}s, saw {added:?}"
    );
}
