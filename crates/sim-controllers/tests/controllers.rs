//! The simulated controllers and scheduler against an in-process API server: garbage
//! collection in each propagation mode, Deployments (rollout, scale, RollingUpdate
//! invariants, Recreate, kubectl's rollout rule), namespace deletion, node lifecycle with
//! taint eviction, and scheduling (of pods with claims too, bound by the PersistentVolume
//! controller). The tests create the Nodes and play the kubelet
//! themselves (a small fake, `sim_test_support::controllers::FakeKubelet`: heartbeats, pods
//! Running and Ready, terminations completed), so nothing here runs a process. kubectl's
//! own verdict on a rollout is checked in the harness's `tests/kubectl.rs`, which finds or
//! builds the kubectl binary.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt as _;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};
use sim_controllers::ControllerConfig;
use sim_test_support::controllers::{
    Sim, available, deployment, node_of, pod_ready, rollout_complete,
};
use sim_test_support::{WAIT, eventually};

fn cm(name: &str, owners: Value, finalizers: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owners, "finalizers": finalizers},
        "data": {"k": "v"},
    }))
    .unwrap()
}

fn owner_ref(cm: &ConfigMap, block: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": cm.name_any(),
           "uid": cm.uid().unwrap(), "blockOwnerDeletion": block})
}

async fn gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(what, || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

fn delete_with(policy: PropagationPolicy) -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(policy),
        ..DeleteParams::default()
    }
}

// ---------------------------------------------------------------------------------------
// Garbage collection.

#[tokio::test]
async fn background_deletion_takes_the_dependents_with_the_owner() {
    let sim = Sim::start(&[]).await;
    let cms: Api<ConfigMap> = sim.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &cm("owner", json!(null), json!(null)),
        )
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &cm("dependent", json!([owner_ref(&owner, false)]), json!(null)),
    )
    .await
    .unwrap();
    cms.delete("owner", &delete_with(PropagationPolicy::Background))
        .await
        .unwrap();
    gone(&cms, "dependent", "the dependent to be collected").await;
    sim.stop().await;
}

#[tokio::test]
async fn a_configured_gc_delay_leaves_a_window_before_dependents_go() {
    let delay = Duration::from_millis(1500);
    let config = ControllerConfig {
        gc_delay: delay,
        ..ControllerConfig::fast()
    };
    let sim = Sim::start_with(&[], config).await;
    let cms: Api<ConfigMap> = sim.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &cm("owner", json!(null), json!(null)),
        )
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &cm("dependent", json!([owner_ref(&owner, false)]), json!(null)),
    )
    .await
    .unwrap();
    let deleted = tokio::time::Instant::now();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    gone(
        &cms,
        "dependent",
        "the dependent to be collected after the delay",
    )
    .await;
    assert!(
        deleted.elapsed() >= delay,
        "collected after {:?}, before the {delay:?} delay",
        deleted.elapsed()
    );
    sim.stop().await;
}

#[tokio::test]
async fn foreground_deletion_keeps_the_owner_until_its_blocking_dependent_is_gone() {
    let sim = Sim::start(&[]).await;
    let cms: Api<ConfigMap> = sim.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &cm("owner", json!(null), json!(null)),
        )
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &cm(
            "dependent",
            json!([owner_ref(&owner, true)]),
            json!(["example.com/hold"]),
        ),
    )
    .await
    .unwrap();
    cms.delete("owner", &delete_with(PropagationPolicy::Foreground))
        .await
        .unwrap();

    // The collector deletes the dependent; its own finalizer holds it, and it holds the owner.
    eventually("the dependent to be deleting", || async {
        cms.get("dependent")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    let waiting = cms.get("owner").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(waiting.finalizers(), ["foregroundDeletion"]);

    cms.patch(
        "dependent",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    gone(&cms, "dependent", "the dependent to go").await;
    gone(&cms, "owner", "the owner to go once nothing blocks it").await;
    sim.stop().await;
}

#[tokio::test]
async fn orphan_deletion_leaves_the_dependent_without_the_reference() {
    let sim = Sim::start(&[]).await;
    let cms: Api<ConfigMap> = sim.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &cm("owner", json!(null), json!(null)),
        )
        .await
        .unwrap();
    let other = cms
        .create(
            &PostParams::default(),
            &cm("other", json!(null), json!(null)),
        )
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &cm(
            "dependent",
            json!([owner_ref(&owner, true), owner_ref(&other, false)]),
            json!(null),
        ),
    )
    .await
    .unwrap();
    cms.delete("owner", &delete_with(PropagationPolicy::Orphan))
        .await
        .unwrap();
    gone(&cms, "owner", "the owner to go").await;
    let dependent = cms.get("dependent").await.unwrap();
    let refs: Vec<String> = dependent
        .owner_references()
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(
        refs,
        vec!["other"],
        "only the orphaning owner's reference is removed"
    );
    sim.stop().await;
}

#[tokio::test]
async fn an_owner_reference_with_the_wrong_uid_is_dangling_and_the_dependent_goes() {
    let sim = Sim::start(&[]).await;
    let cms: Api<ConfigMap> = sim.api();
    cms.create(
        &PostParams::default(),
        &cm("owner", json!(null), json!(null)),
    )
    .await
    .unwrap();
    let wrong = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "not-the-owners-uid"});
    cms.create(
        &PostParams::default(),
        &cm("dependent", json!([wrong]), json!(null)),
    )
    .await
    .unwrap();
    gone(
        &cms,
        "dependent",
        "the dependent of a dangling reference to go",
    )
    .await;
    assert!(
        cms.get_opt("owner").await.unwrap().is_some(),
        "the namesake owner stays"
    );
    sim.stop().await;
}

#[tokio::test]
async fn a_dependent_with_a_live_owner_loses_only_its_dangling_reference() {
    let sim = Sim::start(&[]).await;
    let cms: Api<ConfigMap> = sim.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &cm("owner", json!(null), json!(null)),
        )
        .await
        .unwrap();
    let missing = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "never-existed", "uid": "8a1f6a52-0000-4000-8000-000000000000"});
    cms.create(
        &PostParams::default(),
        &cm(
            "dependent",
            json!([owner_ref(&owner, false), missing]),
            json!(null),
        ),
    )
    .await
    .unwrap();
    let refs = eventually("the dangling reference to be removed", || async {
        let d = cms.get("dependent").await.unwrap();
        let refs: Vec<String> = d
            .owner_references()
            .iter()
            .map(|r| r.name.clone())
            .collect();
        (refs.len() == 1).then_some(refs)
    })
    .await;
    assert_eq!(refs, vec!["owner"]);
    sim.stop().await;
}

const CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.example.com"},
  "spec": {"group": "example.com", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
}"#;

#[tokio::test]
async fn custom_resources_are_collected_and_orphaned_like_built_in_types() {
    let sim = Sim::start(&[]).await;
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client.clone());
    crds.create(&PostParams::default(), &serde_json::from_str(CRD).unwrap())
        .await
        .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(sim.client.clone(), "default", &ar);
    let cms: Api<ConfigMap> = sim.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &cm("owner", json!(null), json!(null)),
        )
        .await
        .unwrap();
    let widget = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "ownerReferences": [owner_ref(&owner, true)]}}))
        .unwrap()
    };
    let created = eventually("the widget type to be served", || async {
        widgets
            .create(&PostParams::default(), &widget("kept"))
            .await
            .ok()
    })
    .await;
    assert_eq!(created.owner_references().len(), 1);
    cms.delete("owner", &delete_with(PropagationPolicy::Orphan))
        .await
        .unwrap();
    gone(&cms, "owner", "the owner to go").await;
    assert!(
        widgets
            .get("kept")
            .await
            .unwrap()
            .owner_references()
            .is_empty()
    );

    let owner = cms
        .create(
            &PostParams::default(),
            &cm("owner", json!(null), json!(null)),
        )
        .await
        .unwrap();
    let mut w = widget("collected");
    w.metadata.owner_references = Some(vec![
        serde_json::from_value(owner_ref(&owner, true)).unwrap(),
    ]);
    widgets.create(&PostParams::default(), &w).await.unwrap();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    gone(&widgets, "collected", "the widget to be collected").await;
    sim.stop().await;
}

// ---------------------------------------------------------------------------------------
// Deployments.

fn revision(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.annotations
        .as_ref()?
        .get("deployment.kubernetes.io/revision")
        .cloned()
}

async fn wait_rolled_out(
    deployments: &Api<Deployment>,
    name: &str,
    revision_wanted: &str,
) -> Deployment {
    eventually(
        &format!("deployment {name} to roll out revision {revision_wanted}"),
        || async {
            let d = deployments.get(name).await.unwrap();
            (rollout_complete(&d)
                && available(&d)
                && revision(&d.metadata).as_deref() == Some(revision_wanted))
            .then_some(d)
        },
    )
    .await
}

async fn pods_of(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

fn active(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test]
async fn a_deployment_becomes_available_scales_down_and_rolls_out_within_surge_and_unavailability()
{
    let sim = Sim::start(&["node-a", "node-b", "node-c"]).await;
    let deployments: Api<Deployment> = sim.api();
    let replicasets: Api<ReplicaSet> = sim.api();
    let pods: Api<Pod> = sim.api();
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 3, "web:1", strategy),
        )
        .await
        .unwrap();
    let d = wait_rolled_out(&deployments, "web", "1").await;
    let status = d.status.clone().unwrap();
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.available_replicas
        ),
        (Some(3), Some(3), Some(3))
    );
    let conditions: BTreeMap<String, (String, Option<String>)> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.clone(), (c.status.clone(), c.reason.clone())))
        .collect();
    assert_eq!(
        conditions["Available"],
        ("True".into(), Some("MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        conditions["Progressing"],
        ("True".into(), Some("NewReplicaSetAvailable".into()))
    );

    let rss = replicasets
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = rs.labels()["pod-template-hash"].clone();
    assert_eq!(rs.name_any(), format!("web-{hash}"));
    assert_eq!(revision(&rs.metadata).as_deref(), Some("1"));
    let controller = rs
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .unwrap();
    assert_eq!(
        (controller.kind.as_str(), controller.uid.as_str()),
        ("Deployment", d.uid().unwrap().as_str())
    );

    let running = pods_of(&pods, "web").await;
    assert_eq!(running.len(), 3);
    let nodes: HashSet<String> = running.iter().filter_map(node_of).collect();
    assert_eq!(nodes.len(), 3, "one pod per node");
    for pod in &running {
        assert_eq!(pod.labels()["pod-template-hash"], hash);
        let name = pod.name_any();
        let suffix = name
            .strip_prefix(&format!("{}-", rs.name_any()))
            .expect("named after its replica set");
        assert_eq!(suffix.len(), 5);
        assert_eq!(pod.owner_references()[0].uid, rs.uid().unwrap());
    }

    // Scale to 1: two pods go.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually("two pods to be deleted", || async {
        let all = pods_of(&pods, "web").await;
        let deleted = running
            .iter()
            .filter(|p| {
                !all.iter()
                    .any(|q| q.uid() == p.uid() && q.metadata.deletion_timestamp.is_none())
            })
            .count();
        (active(&all).len() == 1 && deleted == 2).then_some(())
    })
    .await;
    wait_rolled_out(&deployments, "web", "1").await;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    wait_rolled_out(&deployments, "web", "1").await;

    // A new template rolls out within the bounds, checked on every state the watch shows.
    let (replicas, max_surge, max_unavailable) = (3, 1, 0);
    let observed = watch_invariants(
        &pods,
        "web",
        replicas + max_surge,
        replicas - max_unavailable,
    );
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "web:2"}]}}}})))
        .await
        .unwrap();
    wait_rolled_out(&deployments, "web", "2").await;
    let report = observed.finish().await;
    assert!(
        report.violations.is_empty(),
        "rollout broke its bounds: {:#?}",
        report.violations
    );
    assert_eq!(report.max_active, 4, "the rollout used its surge");

    let rss = replicasets
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(rss.len(), 2);
    let new_rs = rss
        .iter()
        .find(|rs| rs.labels()["pod-template-hash"] != hash)
        .unwrap();
    let old_rs = rss
        .iter()
        .find(|rs| rs.labels()["pod-template-hash"] == hash)
        .unwrap();
    assert_eq!(revision(&new_rs.metadata).as_deref(), Some("2"));
    assert_eq!(old_rs.spec.as_ref().unwrap().replicas, Some(0));

    // Percentages: maxSurge 50% of 3 rounds up to 2, maxUnavailable 50% rounds down to 1.
    let observed = watch_invariants(&pods, "web", 3 + 2, 3 - 1);
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "strategy": {"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": "50%"}},
                "template": {"spec": {"containers": [{"name": "main", "image": "web:3"}]}},
            }})),
        )
        .await
        .unwrap();
    wait_rolled_out(&deployments, "web", "3").await;
    let report = observed.finish().await;
    assert!(
        report.violations.is_empty(),
        "rollout broke its bounds: {:#?}",
        report.violations
    );

    // Deleting the Deployment takes its ReplicaSets and pods with it.
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("replica sets and pods to be collected", || async {
        let rss = replicasets
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items;
        (rss.is_empty() && pods_of(&pods, "web").await.is_empty()).then_some(())
    })
    .await;
    sim.stop().await;
}

#[tokio::test]
async fn old_replica_sets_beyond_the_revision_history_limit_are_deleted() {
    let sim = Sim::start(&["node-a"]).await;
    let deployments: Api<Deployment> = sim.api();
    let replicasets: Api<ReplicaSet> = sim.api();
    let mut d = deployment("hist", 1, "hist:1", json!({"type": "RollingUpdate"}));
    d.spec.as_mut().unwrap().revision_history_limit = Some(1);
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    wait_rolled_out(&deployments, "hist", "1").await;
    for (image, rev) in [("hist:2", "2"), ("hist:3", "3")] {
        deployments
            .patch("hist", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}})))
            .await
            .unwrap();
        wait_rolled_out(&deployments, "hist", rev).await;
    }
    let revisions = eventually("only one old replica set to be kept", || async {
        let rss = replicasets
            .list(&ListParams::default().labels("app=hist"))
            .await
            .unwrap()
            .items;
        let mut revs: Vec<String> = rss.iter().filter_map(|rs| revision(&rs.metadata)).collect();
        revs.sort();
        (revs.len() == 2).then_some(revs)
    })
    .await;
    assert_eq!(revisions, vec!["2", "3"]);
    sim.stop().await;
}

#[tokio::test]
async fn a_deployment_deleted_in_the_foreground_goes_after_its_replica_set_and_pods() {
    let sim = Sim::start(&["node-a", "node-b"]).await;
    let deployments: Api<Deployment> = sim.api();
    let replicasets: Api<ReplicaSet> = sim.api();
    let pods: Api<Pod> = sim.api();
    deployments
        .create(
            &PostParams::default(),
            &deployment("fg", 2, "fg:1", json!({"type": "RollingUpdate"})),
        )
        .await
        .unwrap();
    wait_rolled_out(&deployments, "fg", "1").await;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let order = tokio::spawn({
        let deployments = deployments.clone();
        let replicasets = replicasets.clone();
        let pods = pods.clone();
        async move {
            // Whenever the Deployment is seen gone, nothing of it may be left.
            let mut premature = Vec::new();
            loop {
                if stopped.try_recv().is_ok() {
                    return premature;
                }
                let d = deployments.get_opt("fg").await.unwrap();
                let rss = replicasets
                    .list(&ListParams::default().labels("app=fg"))
                    .await
                    .unwrap()
                    .items;
                let left = pods_of(&pods, "fg").await.len();
                if d.is_none() && (!rss.is_empty() || left > 0) {
                    premature.push(format!(
                        "deployment gone with {} replica sets and {left} pods left",
                        rss.len()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    deployments
        .delete("fg", &delete_with(PropagationPolicy::Foreground))
        .await
        .unwrap();
    gone(
        &deployments,
        "fg",
        "the deployment to go after its dependents",
    )
    .await;
    let _ = stop.send(());
    let premature = order.await.unwrap();
    assert!(premature.is_empty(), "{premature:?}");
    assert!(
        replicasets
            .list(&ListParams::default().labels("app=fg"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(pods_of(&pods, "fg").await.is_empty());
    sim.stop().await;
}

#[derive(Debug, Default)]
struct Report {
    violations: Vec<String>,
    max_active: usize,
}

struct Observation {
    task: tokio::task::JoinHandle<Report>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl Observation {
    async fn finish(self) -> Report {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}

/// Watches the pods of `app` and checks, on every state, that at most `max_active` are
/// not terminating and at least `min_ready` of those are Ready.
fn watch_invariants(
    pods: &Api<Pod>,
    app: &str,
    max_active: usize,
    min_ready: usize,
) -> Observation {
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let stream = watcher(
        pods.clone(),
        watcher::Config::default().labels(&format!("app={app}")),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut state: HashMap<String, Pod> = HashMap::new();
        let mut init: HashMap<String, Pod> = HashMap::new();
        let mut report = Report::default();
        loop {
            let event = tokio::select! {
                _ = &mut stopped => return report,
                e = stream.next() => e,
            };
            let Some(Ok(event)) = event else { continue };
            match event {
                watcher::Event::Init => {
                    init.clear();
                    continue;
                }
                watcher::Event::InitApply(p) => {
                    init.insert(p.name_any(), p);
                    continue;
                }
                watcher::Event::InitDone => state = std::mem::take(&mut init),
                watcher::Event::Apply(p) => {
                    state.insert(p.name_any(), p);
                }
                watcher::Event::Delete(p) => {
                    state.remove(&p.name_any());
                }
            }
            let live: Vec<&Pod> = state
                .values()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let ready = live.iter().filter(|p| pod_ready(p)).count();
            report.max_active = report.max_active.max(live.len());
            if live.len() > max_active || ready < min_ready {
                report.violations.push(format!(
                    "{} active (max {max_active}), {ready} ready (min {min_ready}): {:?}",
                    live.len(),
                    live.iter()
                        .map(|p| (p.name_any(), pod_ready(p)))
                        .collect::<Vec<_>>()
                ));
            }
        }
    });
    Observation { task, stop }
}

#[tokio::test]
async fn a_recreate_deployment_removes_every_old_pod_before_the_new_replica_set_gets_any() {
    let sim = Sim::start(&["node-a", "node-b"]).await;
    let deployments: Api<Deployment> = sim.api();
    let replicasets: Api<ReplicaSet> = sim.api();
    let pods: Api<Pod> = sim.api();
    deployments
        .create(
            &PostParams::default(),
            &deployment("batch", 2, "batch:1", json!({"type": "Recreate"})),
        )
        .await
        .unwrap();
    wait_rolled_out(&deployments, "batch", "1").await;
    let old_hash = pods_of(&pods, "batch").await[0].labels()["pod-template-hash"].clone();

    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let stream = watcher(pods.clone(), watcher::Config::default().labels("app=batch"));
    let watcher_hash = old_hash.clone();
    let check = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream.default_backoff());
        let mut present: HashMap<String, String> = HashMap::new();
        let mut overlaps = Vec::new();
        loop {
            let event = tokio::select! {
                _ = &mut stopped => return overlaps,
                e = stream.next() => e,
            };
            let Some(Ok(event)) = event else { continue };
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    present.insert(p.name_any(), p.labels()["pod-template-hash"].clone());
                }
                watcher::Event::Delete(p) => {
                    present.remove(&p.name_any());
                }
                _ => {}
            }
            let old = present.values().filter(|h| **h == watcher_hash).count();
            let new = present.len() - old;
            if old > 0 && new > 0 {
                overlaps.push(format!("{old} old and {new} new pods at once"));
            }
        }
    });
    deployments
        .patch("batch", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "batch:2"}]}}}})))
        .await
        .unwrap();
    wait_rolled_out(&deployments, "batch", "2").await;
    let _ = stop.send(());
    let overlaps = check.await.unwrap();
    assert!(
        overlaps.is_empty(),
        "old and new pods coexisted: {overlaps:?}"
    );
    let rss = replicasets
        .list(&ListParams::default().labels("app=batch"))
        .await
        .unwrap()
        .items;
    let old_rs = rss
        .iter()
        .find(|rs| rs.labels()["pod-template-hash"] == old_hash)
        .unwrap();
    assert_eq!(old_rs.spec.as_ref().unwrap().replicas, Some(0));
    sim.stop().await;
}

// ---------------------------------------------------------------------------------------
// Namespaces.

#[tokio::test]
async fn deleting_a_namespace_removes_its_content_then_the_namespace() {
    let sim = Sim::start(&[]).await;
    let namespaces: Api<Namespace> = Api::all(sim.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client.clone(), "doomed");
    let secrets: Api<Secret> = Api::namespaced(sim.client.clone(), "doomed");
    cms.create(
        &PostParams::default(),
        &cm("held", json!(null), json!(["example.com/hold"])),
    )
    .await
    .unwrap();
    cms.create(
        &PostParams::default(),
        &cm("plain", json!(null), json!(null)),
    )
    .await
    .unwrap();
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();

    eventually(
        "the namespace to report the finalizer that holds it",
        || async {
            let ns = namespaces.get("doomed").await.ok()?;
            let held = ns.status?.conditions?.into_iter().any(|c| {
                c.type_ == "NamespaceFinalizersRemaining"
                    && c.status == "True"
                    && c.message
                        .as_deref()
                        .is_some_and(|m| m.contains("example.com/hold in 1 resource instances"))
            });
            held.then_some(())
        },
    )
    .await;
    gone(&cms, "plain", "unheld content to go").await;
    gone(&secrets, "s", "secrets to go").await;
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert!(
        namespaces
            .get("doomed")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    gone(
        &namespaces,
        "doomed",
        "the namespace to go once it is empty",
    )
    .await;
    sim.stop().await;
}

// ---------------------------------------------------------------------------------------
// Node lifecycle and taint eviction.

fn bare_pod(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "main", "image": "pause:3"}]);
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "bare"}}, "spec": spec}),
    )
    .unwrap()
}

fn parse(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    t.0.to_string().parse().unwrap()
}

#[tokio::test]
async fn a_node_without_heartbeats_goes_unknown_is_tainted_and_its_pods_are_evicted_after_their_toleration()
 {
    let sim = Sim::start(&["node-a", "node-b"]).await;
    let nodes: Api<Node> = Api::all(sim.client.clone());
    let pods: Api<Pod> = sim.api();
    let tolerate_2s = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]);
    for name in ["short-1", "short-2"] {
        pods.create(
            &PostParams::default(),
            &bare_pod(
                name,
                json!({"nodeName": "node-a", "tolerations": tolerate_2s}),
            ),
        )
        .await
        .unwrap();
    }
    pods.create(
        &PostParams::default(),
        &bare_pod("patient", json!({"nodeName": "node-a"})),
    )
    .await
    .unwrap();
    eventually("the pods to run", || async {
        let all = pods_of(&pods, "bare").await;
        (all.len() == 3 && all.iter().all(pod_ready)).then_some(())
    })
    .await;

    sim.kubelet.partition("node-a");
    let node = tokio::time::timeout(WAIT, async {
        loop {
            let node = nodes.get("node-a").await.unwrap();
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            if tainted.len() == 2 {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("node-a to be tainted");
    let ready = node
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.status, "Unknown");
    assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(
        ready.message.as_deref(),
        Some("Kubelet stopped posting node status.")
    );
    let taints = node.spec.unwrap().taints.unwrap();
    let effects: HashSet<(String, String)> = taints
        .iter()
        .map(|t| (t.key.clone(), t.effect.clone()))
        .collect();
    assert_eq!(
        effects,
        HashSet::from([
            (
                "node.kubernetes.io/unreachable".to_string(),
                "NoSchedule".to_string()
            ),
            (
                "node.kubernetes.io/unreachable".to_string(),
                "NoExecute".to_string()
            ),
        ])
    );
    let added = parse(
        taints
            .iter()
            .find(|t| t.effect == "NoExecute")
            .unwrap()
            .time_added
            .as_ref()
            .expect("timeAdded"),
    );

    // Pods tolerating the taint for 2 s are deleted 2 s after it was added, gracefully.
    for name in ["short-1", "short-2"] {
        let pod = eventually("the pod to be evicted", || async {
            let p = pods.get(name).await.unwrap();
            p.metadata.deletion_timestamp.is_some().then_some(p)
        })
        .await;
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap();
        assert_eq!(grace, 30, "a normal graceful delete");
        let deleted_at = parse(pod.metadata.deletion_timestamp.as_ref().unwrap())
            - chrono::Duration::seconds(grace);
        assert!(
            deleted_at >= added + chrono::Duration::seconds(2),
            "evicted at {deleted_at}, taint added at {added}"
        );
        assert!(
            !pod_ready(&pod),
            "pods of an unreachable node are marked not ready"
        );
        let disruption = pod
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget");
        assert!(disruption);
    }
    let patient = pods.get("patient").await.unwrap();
    assert!(
        patient.metadata.deletion_timestamp.is_none(),
        "the default 300 s toleration still holds"
    );

    // Nobody completes the deletion of a pod on an unreachable node.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        pods.get_opt("short-1").await.unwrap().is_some(),
        "it stays Terminating"
    );

    // Heartbeats return: Ready again (from the kubelet), taints gone.
    sim.kubelet.repair("node-a");
    eventually("the taints to go", || async {
        let node = nodes.get("node-a").await.unwrap();
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let ready = node
            .status?
            .conditions?
            .into_iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (taints.is_empty() && ready).then_some(())
    })
    .await;
    // The returning kubelet completes the pending deletions.
    gone(
        &pods,
        "short-1",
        "the evicted pod to go once its kubelet is back",
    )
    .await;
    sim.stop().await;
}

#[tokio::test]
async fn pods_bound_to_a_deleted_node_are_force_deleted_after_the_quarantine() {
    let sim = Sim::start(&["node-a"]).await;
    let nodes: Api<Node> = Api::all(sim.client.clone());
    let pods: Api<Pod> = sim.api();
    pods.create(
        &PostParams::default(),
        &bare_pod("stranded", json!({"nodeName": "node-a"})),
    )
    .await
    .unwrap();
    sim.kubelet.partition("node-a");
    nodes
        .delete("node-a", &DeleteParams::default())
        .await
        .unwrap();
    gone(
        &pods,
        "stranded",
        "the pod of a deleted node to be collected",
    )
    .await;
    sim.stop().await;
}

// ---------------------------------------------------------------------------------------
// Scheduling.

#[tokio::test]
async fn the_scheduler_spreads_pods_and_respects_selectors_and_taints() {
    let sim = Sim::start(&["node-a", "node-b", "node-c"]).await;
    let pods: Api<Pod> = sim.api();
    for i in 0..6 {
        pods.create(
            &PostParams::default(),
            &bare_pod(&format!("spread-{i}"), json!({})),
        )
        .await
        .unwrap();
    }
    let placed = eventually("six pods to be bound", || async {
        let all = pods_of(&pods, "bare").await;
        let nodes: Vec<String> = all.iter().filter_map(node_of).collect();
        (nodes.len() == 6).then_some(nodes)
    })
    .await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for n in placed {
        *per_node.entry(n).or_default() += 1;
    }
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{per_node:?}"
    );
    let scheduled = pods.get("spread-0").await.unwrap();
    let condition = scheduled
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    assert_eq!(condition.status, "True");

    // nodeSelector and NoSchedule taints.
    let nodes: Api<Node> = Api::all(sim.client.clone());
    nodes
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"disk": "ssd"}}})),
        )
        .await
        .unwrap();
    nodes
        .patch("node-c", &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}})))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &bare_pod("wants-ssd", json!({"nodeSelector": {"disk": "ssd"}})),
    )
    .await
    .unwrap();
    for i in 0..4 {
        pods.create(
            &PostParams::default(),
            &bare_pod(&format!("untolerating-{i}"), json!({})),
        )
        .await
        .unwrap();
    }
    let tolerating = json!([{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]);
    pods.create(
        &PostParams::default(),
        &bare_pod("infra", json!({"tolerations": tolerating, "nodeSelector": {"kubernetes.io/hostname": "node-c"}})),
    )
    .await
    .unwrap();
    let placements = eventually("the new pods to be bound", || async {
        let all = pods_of(&pods, "bare").await;
        let placed: HashMap<String, String> = all
            .iter()
            .filter_map(|p| Some((p.name_any(), node_of(p)?)))
            .collect();
        (placed.len() == 12).then_some(placed)
    })
    .await;
    assert_eq!(placements["wants-ssd"], "node-b");
    assert_eq!(placements["infra"], "node-c");
    for i in 0..4 {
        assert_ne!(
            placements[&format!("untolerating-{i}")],
            "node-c",
            "NoSchedule taint respected"
        );
    }

    // A pod that fits nowhere stays Pending with the scheduler's reason.
    pods.create(
        &PostParams::default(),
        &bare_pod("nowhere", json!({"nodeSelector": {"disk": "tape"}})),
    )
    .await
    .unwrap();
    let condition = eventually("the pod to be marked unschedulable", || async {
        let pod = pods.get("nowhere").await.unwrap();
        pod.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    let message = condition.message.unwrap();
    assert!(
        message.starts_with("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, 2 node(s) didn't match Pod's node affinity/selector."),
        "{message}"
    );
    let pod = pods.get("nowhere").await.unwrap();
    assert!(node_of(&pod).is_none());
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Pending"));

    // It is retried when a node changes so that it fits.
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"disk": "tape"}}})),
        )
        .await
        .unwrap();
    let node = eventually("the pod to be bound once a node fits", || async {
        node_of(&pods.get("nowhere").await.unwrap())
    })
    .await;
    assert_eq!(node, "node-a");
    sim.stop().await;
}

#[tokio::test]
async fn a_binding_the_api_server_holds_does_not_hold_up_the_pods_behind_it() {
    let sim = Sim::start(&["node-a"]).await;
    let pods: Api<Pod> = sim.api();
    let binding_of = |name: &str| sim_apiserver::faults::RequestMatch {
        verbs: vec!["create".into()],
        resource: Some("pods".into()),
        subresource: Some("binding".into()),
        name: Some(name.into()),
        ..Default::default()
    };
    // The first pod's binding is answered only once the second pod's has been: a
    // scheduler that waits for each binding before placing the next pod never sends the
    // second, and both stay unbound for the whole minute.
    sim.server.state().faults.defer_until(
        binding_of("first"),
        binding_of("second"),
        sim_apiserver::faults::Milestone::Answered,
        Duration::from_secs(60),
    );
    pods.create(&PostParams::default(), &bare_pod("first", json!({})))
        .await
        .unwrap();
    eventually("the first pod's binding to reach the server", || async {
        let log = sim.server.state().faults.log();
        log.iter().any(|e| e.verb == "defer").then_some(())
    })
    .await;
    pods.create(&PostParams::default(), &bare_pod("second", json!({})))
        .await
        .unwrap();
    for name in ["second", "first"] {
        eventually(&format!("pod {name} to be bound"), || async {
            node_of(&pods.get(name).await.unwrap())
        })
        .await;
    }
    sim.stop().await;
}

#[tokio::test]
async fn an_unreachable_node_gets_no_new_pods_and_the_scheduler_says_why() {
    let sim = Sim::start(&["node-a"]).await;
    let pods: Api<Pod> = sim.api();
    let nodes: Api<Node> = Api::all(sim.client.clone());
    sim.kubelet.partition("node-a");
    eventually("node-a to be tainted unreachable", || async {
        let n = nodes.get("node-a").await.unwrap();
        (n.spec?.taints?.len() == 2).then_some(())
    })
    .await;
    pods.create(&PostParams::default(), &bare_pod("waiting", json!({})))
        .await
        .unwrap();
    let condition = eventually("the pod to be unschedulable", || async {
        let pod = pods.get("waiting").await.unwrap();
        pod.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(
        condition.message.as_deref(),
        Some(
            "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        )
    );
    sim.kubelet.repair("node-a");
    eventually("the pod to be bound once the node is back", || async {
        node_of(&pods.get("waiting").await.unwrap())
    })
    .await;
    sim.stop().await;
}

/// The message of the pod's `PodScheduled=False` condition, once it says `reason`.
async fn unschedulable_because(pods: &Api<Pod>, name: &str, reason: &str) -> String {
    eventually(&format!("{name} unschedulable: {reason}"), || async {
        let pod = pods.get(name).await.unwrap();
        pod.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message)
            .filter(|m| m.contains(reason))
    })
    .await
}

#[tokio::test]
async fn a_pod_waits_for_its_claim_to_be_bound_then_goes_where_its_volume_is() {
    let sim = Sim::start(&["node-a", "node-b"]).await;
    let pods: Api<Pod> = sim.api();
    let claims: Api<PersistentVolumeClaim> = sim.api();
    let volumes: Api<PersistentVolume> = Api::all(sim.client.clone());
    let spec = json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
    pods.create(&PostParams::default(), &bare_pod("user", spec))
        .await
        .unwrap();
    assert_eq!(
        unschedulable_because(&pods, "user", "not found").await,
        "0/2 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    unschedulable_because(
        &pods,
        "user",
        "pod has unbound immediate PersistentVolumeClaims",
    )
    .await;
    assert!(node_of(&pods.get("user").await.unwrap()).is_none());

    // A volume of node-b that fits: the controller binds it, the pod follows it there.
    available_volume_of_node_b(&volumes, "").await;
    // The controller looks for volumes for a claim when the claim changes, or on its resync
    // every 15 s: a label spares the wait.
    claims
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    let node = eventually("the pod bound to a node", || async {
        node_of(&pods.get("user").await.unwrap())
    })
    .await;
    assert_eq!(node, "node-b");
    let claim = claims.get("data").await.unwrap();
    assert_eq!(claim.spec.unwrap().volume_name.as_deref(), Some("disk-b"));
    assert_eq!(claim.status.unwrap().phase.as_deref(), Some("Bound"));
    let annotations = claim.metadata.annotations.unwrap();
    assert_eq!(annotations["pv.kubernetes.io/bind-completed"], "yes");
    assert_eq!(annotations["pv.kubernetes.io/bound-by-controller"], "yes");
    let volume = volumes.get("disk-b").await.unwrap();
    assert_eq!(volume.status.unwrap().phase.as_deref(), Some("Bound"));
    assert_eq!(
        volume.spec.unwrap().claim_ref.unwrap().uid,
        claim.metadata.uid
    );
    sim.stop().await;
}

#[tokio::test]
async fn controllers_write_as_their_own_users() {
    let sim = Sim::start(&["node-a"]).await;
    let deployments: Api<Deployment> = sim.api();
    deployments
        .create(
            &PostParams::default(),
            &deployment("who", 1, "who:1", json!({"type": "RollingUpdate"})),
        )
        .await
        .unwrap();
    wait_rolled_out(&deployments, "who", "1").await;
    let events = sim.server.state().audit.events();
    let writer = |verb: &str, resource: &str, sub: &str| {
        events
            .iter()
            .find(|e| {
                e.verb == verb && e.resource == resource && e.subresource == sub && e.code < 300
            })
            .map(|e| {
                (
                    e.user.clone(),
                    e.user_agent
                        .split('/')
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
    };
    let kcm = Some((
        "system:kube-controller-manager".to_string(),
        "kube-controller-manager".to_string(),
    ));
    assert_eq!(writer("create", "replicasets", ""), kcm);
    assert_eq!(writer("create", "pods", ""), kcm);
    assert_eq!(writer("update", "deployments", "status"), kcm);
    assert_eq!(
        writer("create", "pods", "binding"),
        Some((
            "system:kube-scheduler".to_string(),
            "kube-scheduler".to_string()
        ))
    );
    sim.stop().await;
}

// ---------------------------------------------------------------------------------------
// Volume protection.

#[tokio::test]
async fn a_claim_waiting_for_its_consumer_is_bound_to_a_volume_of_the_pods_node_or_provisioned_where_its_class_allows()
 {
    let sim = Sim::start(&["node-a", "node-b"]).await;
    let pods: Api<Pod> = sim.api();
    let claims: Api<PersistentVolumeClaim> = sim.api();
    let volumes: Api<PersistentVolume> = Api::all(sim.client.clone());
    let classes: Api<StorageClass> = Api::all(sim.client.clone());
    for class in [
        json!({"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
               "volumeBindingMode": "WaitForFirstConsumer"}),
        json!({"metadata": {"name": "zoned"}, "provisioner": "example.com/zoned",
               "volumeBindingMode": "WaitForFirstConsumer",
               "allowedTopologies": [{"matchLabelExpressions": [
                   {"key": "kubernetes.io/hostname", "values": ["node-a"]}]}]}),
    ] {
        let class: StorageClass = serde_json::from_value(class).unwrap();
        classes
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }
    available_volume_of_node_b(&volumes, "local").await;
    // A claim of `class` and a pod `pod` that uses it.
    let claim_with_user = |name: &'static str, class: &'static str, pod: &'static str| {
        let (claims, pods) = (claims.clone(), pods.clone());
        async move {
            let spec = json!({"storageClassName": class});
            claims
                .create(&PostParams::default(), &claim(name, spec))
                .await
                .unwrap();
            let volumes = json!({"volumes": [
                {"name": "d", "persistentVolumeClaim": {"claimName": name}}]});
            pods.create(&PostParams::default(), &bare_pod(pod, volumes))
                .await
                .unwrap();
        }
    };
    // The volume of node-b: reserved by the scheduler, bound by the controller, the pod there.
    claim_with_user("data", "local", "user").await;
    let node = eventually("the pod bound to a node", || async {
        node_of(&pods.get("user").await.unwrap())
    })
    .await;
    assert_eq!(node, "node-b");
    let claim_now = claims.get("data").await.unwrap();
    assert_eq!(
        claim_now.spec.unwrap().volume_name.as_deref(),
        Some("disk-b")
    );
    let volume = volumes.get("disk-b").await.unwrap();
    assert_eq!(
        volume.metadata.annotations.unwrap()["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    // No volume left and no provisioner: no node will do.
    claim_with_user("more", "local", "second").await;
    assert_eq!(
        unschedulable_because(&pods, "second", "didn't find available").await,
        "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    // A class whose topology admits node-a only: provisioned there.
    claim_with_user("zoned", "zoned", "third").await;
    let selected = eventually("the zoned claim given a node", || async {
        let claim = claims.get("zoned").await.unwrap();
        claim
            .metadata
            .annotations?
            .get("volume.kubernetes.io/selected-node")
            .cloned()
    })
    .await;
    assert_eq!(selected, "node-a");
    sim.stop().await;
}

/// Creates `disk-b`, a 2Gi volume of `class` with node affinity to node-b, and waits until
/// it is Available.
async fn available_volume_of_node_b(volumes: &Api<PersistentVolume>, class: &str) {
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "disk-b"},
        "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": class, "hostPath": {"path": "/tmp/disk-b"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}]}]}}}}))
    .unwrap();
    volumes
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    eventually("the volume Available", || async {
        let volume = volumes.get("disk-b").await.unwrap();
        (volume.status?.phase.as_deref() == Some("Available")).then_some(())
    })
    .await;
}

fn claim(name: &str, spec_extra: Value) -> PersistentVolumeClaim {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"],
                          "resources": {"requests": {"storage": "1Gi"}}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn claim_user(name: &str, claim: &str, node: &str) -> Pod {
    bare_pod(
        name,
        json!({"nodeName": node,
               "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}),
    )
}

fn holds_protection(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
        && meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f.ends_with("-protection"))
}

#[tokio::test]
async fn a_claim_used_by_a_pod_stays_while_the_pod_lives_and_goes_once_it_is_gone() {
    let sim = Sim::start(&["node-a"]).await;
    let claims: Api<PersistentVolumeClaim> = sim.api();
    let pods: Api<Pod> = sim.api();
    for name in ["used", "spare"] {
        claims
            .create(&PostParams::default(), &claim(name, json!({})))
            .await
            .unwrap();
    }
    pods.create(
        &PostParams::default(),
        &claim_user("user", "used", "node-a"),
    )
    .await
    .unwrap();
    eventually("the pod to run", || async {
        pod_ready(&pods.get("user").await.ok()?).then_some(())
    })
    .await;

    for name in ["used", "spare"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    gone(&claims, "spare", "the unused claim to go").await;
    assert!(
        holds_protection(&claims.get("used").await.unwrap().metadata),
        "the used claim is still protected once the unused one is gone"
    );

    pods.delete("user", &DeleteParams::default()).await.unwrap();
    gone(&pods, "user", "the pod to terminate").await;
    gone(&claims, "used", "the claim to go with its pod").await;
    sim.stop().await;
}

#[tokio::test]
async fn a_namespace_holding_a_claim_in_use_is_deleted_whole() {
    let sim = Sim::start(&["node-a"]).await;
    let namespaces: Api<Namespace> = Api::all(sim.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "storage"}})).unwrap(),
        )
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sim.client.clone(), "storage");
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "storage");
    claims
        .create(&PostParams::default(), &claim("data", json!({})))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &claim_user("user", "data", "node-a"),
    )
    .await
    .unwrap();
    namespaces
        .delete("storage", &DeleteParams::default())
        .await
        .unwrap();
    gone(&claims, "data", "the claim to go").await;
    gone(&namespaces, "storage", "the namespace to go whole").await;
    sim.stop().await;
}

#[tokio::test]
async fn a_bound_volume_and_a_named_attributes_class_stay_until_released() {
    let sim = Sim::start(&[]).await;
    let volumes: Api<PersistentVolume> = Api::all(sim.client.clone());
    let claims: Api<PersistentVolumeClaim> = sim.api();
    let classes: Api<DynamicObject> = Api::all_with(
        sim.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("storage.k8s.io", "v1", "VolumeAttributesClass"),
            "volumeattributesclasses",
        ),
    );
    let class: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
        "metadata": {"name": "gold"}, "driverName": "example.com/csi",
        "parameters": {"iops": "3000"},
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    claims
        .create(
            &PostParams::default(),
            &claim("fancy", json!({"volumeAttributesClassName": "gold"})),
        )
        .await
        .unwrap();
    // A volume reserved for the claim `holder`, which the PersistentVolume controller binds.
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "disk"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "claimRef": {"namespace": "default", "name": "holder"},
                 "hostPath": {"path": "/tmp/disk"}},
    }))
    .unwrap();
    volumes
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    claims
        .create(&PostParams::default(), &claim("holder", json!({})))
        .await
        .unwrap();
    eventually("the volume Bound", || async {
        let volume = volumes.get("disk").await.unwrap();
        (volume.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;

    classes
        .delete("gold", &DeleteParams::default())
        .await
        .unwrap();
    volumes
        .delete("disk", &DeleteParams::default())
        .await
        .unwrap();
    claims
        .delete("fancy", &DeleteParams::default())
        .await
        .unwrap();
    gone(&claims, "fancy", "the unused claim to go").await;
    gone(&classes, "gold", "the class to go once no claim names it").await;
    assert!(
        holds_protection(&volumes.get("disk").await.unwrap().metadata),
        "a bound volume stays"
    );
    claims
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    gone(&volumes, "disk", "the volume to go once its claim is gone").await;
    sim.stop().await;
}

// ---------------------------------------------------------------------------------------
// Disruption budgets.

#[tokio::test]
async fn a_disruption_budget_counts_a_deployments_ready_pods_against_its_scale() {
    let sim = Sim::start(&["node-a"]).await;
    let deployments: Api<Deployment> = sim.api();
    let budgets: Api<PodDisruptionBudget> = sim.api();
    deployments
        .create(
            &PostParams::default(),
            &deployment("guarded", 3, "pause:3", json!({"type": "RollingUpdate"})),
        )
        .await
        .unwrap();
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guard"},
        "spec": {"maxUnavailable": "34%", "selector": {"matchLabels": {"app": "guarded"}}},
    }))
    .unwrap();
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    let status = eventually("the budget to count three Ready pods", || async {
        let status = budgets.get("guard").await.ok()?.status?;
        (status.current_healthy == 3).then_some(status)
    })
    .await;
    assert_eq!(
        (
            status.expected_pods,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (3, 1, 2),
        "34% of 3 rounds up to 2 pods that may be unavailable"
    );
    let condition = &status.conditions.unwrap()[0];
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "SufficientPods")
    );
    sim.stop().await;
}

// DaemonSets.

#[tokio::test]
async fn a_daemon_set_runs_a_ready_pod_on_each_node_and_leaves_a_node_it_no_longer_tolerates() {
    let sim = Sim::start(&["node-a", "node-b", "node-c"]).await;
    let sets: Api<DaemonSet> = sim.api();
    let set: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "main", "image": "agent:1"}]}}}
    }))
    .unwrap();
    sets.create(&PostParams::default(), &set).await.unwrap();
    let status = eventually("three ready daemon pods", || async {
        let status = sets.get("agent").await.ok()?.status?;
        (status.number_ready == 3 && status.number_available == Some(3)).then_some(status)
    })
    .await;
    assert_eq!(
        (
            status.desired_number_scheduled,
            status.current_number_scheduled,
            status.number_misscheduled,
            status.updated_number_scheduled
        ),
        (3, 3, 0, Some(3))
    );
    let pods: Api<Pod> = sim.api();
    let mut placed: Vec<String> = pods_of(&pods, "agent")
        .await
        .iter()
        .filter_map(node_of)
        .collect();
    placed.sort();
    assert_eq!(placed, ["node-a", "node-b", "node-c"]);

    // A NoExecute taint the template does not tolerate: the pod there goes, none replaces it.
    let nodes: Api<Node> = Api::all(sim.client.clone());
    nodes
        .patch(
            "node-c",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"taints": [{"key": "dedicated", "effect": "NoExecute"}]}}),
            ),
        )
        .await
        .unwrap();
    let remaining = eventually("the pod on node-c gone", || async {
        let status = sets.get("agent").await.ok()?.status?;
        let mut placed: Vec<String> = active(&pods_of(&pods, "agent").await)
            .into_iter()
            .filter_map(node_of)
            .collect();
        placed.sort();
        (status.desired_number_scheduled == 2 && placed.len() == 2).then_some(placed)
    })
    .await;
    assert_eq!(remaining, ["node-a", "node-b"]);
    sim.stop().await;
}
