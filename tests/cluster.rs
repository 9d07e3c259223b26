//! The simulated cluster as a whole: controllers, scheduler and kubelets together run a
//! Deployment of a real executable, scale it, replace deleted pods, and react to a node
//! partition as a real cluster does.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use opconform::sim::faults::{Cut, NodeFault};
use opconform::sim::kubelet::ImageMap;
use opconform::sim::{SimCluster, SimClusterConfig};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// A container that records its start and SIGTERM in `dir`, then idles.
fn fixture(dir: &Path) -> PathBuf {
    let path = dir.join("fixture.sh");
    let script = format!(
        "#!/bin/sh\necho \"started $POD_NAME\" >> {log}\ntrap 'echo \"got SIGTERM $POD_NAME\" >> {log}; exit 0' TERM\nwhile true; do sleep 0.05; done\n",
        log = dir.join("events.log").display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn events(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("events.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The Deployment of the fixture, which sees `dir` at the same path (a hostPath volume,
/// for pods that are containers) to record its events there.
fn deployment(replicas: i32, toleration: Option<i64>, dir: &Path) -> Deployment {
    let mut spec = json!({
        "containers": [{"name": "app", "image": "fixture:1",
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "volumeMounts": [{"name": "events", "mountPath": dir}]}],
        "volumes": [{"name": "events", "hostPath": {"path": dir, "type": "Directory"}}],
        "terminationGracePeriodSeconds": 5
    });
    if let Some(seconds) = toleration {
        spec["tolerations"] = json!([
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        ]);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "fixture"}},
                 "template": {"metadata": {"labels": {"app": "fixture"}}, "spec": spec}}
    }))
    .unwrap()
}

async fn start(dir: &Path) -> SimCluster {
    let mut images = ImageMap::new();
    images.insert("fixture:1", fixture(dir));
    let config = SimClusterConfig {
        images,
        work_dir: Some(dir.join("cluster")),
        ..SimClusterConfig::fast()
    };
    SimCluster::start(config).await.expect("the cluster starts")
}

fn running(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_of_an_executable_runs_scales_down_gracefully_and_replaces_deleted_pods() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path()).await;
    let client = cluster.server().admin_client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment(3, None, dir.path()))
        .await
        .unwrap();
    opconform::deploy::wait_for_rollout(&client, "default", "app", WAIT)
        .await
        .expect("Available");

    let list = pods
        .list(&ListParams::default().labels("app=fixture"))
        .await
        .unwrap()
        .items;
    assert_eq!(running(&list).len(), 3);
    let nodes: BTreeSet<String> = list
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 3, "one pod per node");
    until("three fixture processes to start", || async {
        (events(dir.path())
            .iter()
            .filter(|l| l.starts_with("started"))
            .count()
            == 3)
            .then_some(())
    })
    .await;
    assert!(
        cluster.pids().len() >= 3,
        "every container runs as processes"
    );

    // Scale to 1: two pods get SIGTERM and go away.
    deployments
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    until("two SIGTERMs", || async {
        (events(dir.path())
            .iter()
            .filter(|l| l.starts_with("got SIGTERM"))
            .count()
            == 2)
            .then_some(())
    })
    .await;
    until("one pod left", || async {
        let l = pods
            .list(&ListParams::default().labels("app=fixture"))
            .await
            .ok()?
            .items;
        (l.len() == 1).then_some(())
    })
    .await;
    until(
        "the processes of the two stopped pods to be gone",
        // One pod is left: its shell and at most one short-lived `sleep` child.
        || async { (cluster.pids().len() <= 2).then_some(()) },
    )
    .await;

    // A deleted pod is replaced by a new one.
    let survivor = running(
        &pods
            .list(&ListParams::default().labels("app=fixture"))
            .await
            .unwrap()
            .items,
    )
    .pop()
    .unwrap();
    pods.delete(&survivor, &DeleteParams::default())
        .await
        .unwrap();
    let replacement = until("a replacement pod running", || async {
        let l = pods
            .list(&ListParams::default().labels("app=fixture"))
            .await
            .ok()?
            .items;
        running(&l).into_iter().find(|n| *n != survivor)
    })
    .await;
    assert_ne!(replacement, survivor);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_node_goes_unknown_its_pods_are_evicted_and_stay_terminating_until_repair() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path()).await;
    let client = cluster.server().admin_client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    deployments
        .create(&PostParams::default(), &deployment(3, Some(1), dir.path()))
        .await
        .unwrap();
    opconform::deploy::wait_for_rollout(&client, "default", "app", WAIT)
        .await
        .expect("Available");
    let victim = pods
        .list(&ListParams::default().labels("app=fixture"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("worker-1"))
        .expect("a pod on worker-1");
    let victim_name = victim.metadata.name.clone().unwrap();

    cluster
        .node_fault("worker-1", &NodeFault::Partition { cut: Cut::Drop })
        .unwrap();
    let taint_added = until(
        "worker-1 Unknown with the unreachable NoExecute taint",
        || async {
            let n = nodes.get("worker-1").await.ok()?;
            let ready = n
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            let taint =
                n.spec?.taints?.into_iter().find(|t| {
                    t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute"
                })?;
            (ready.status == "Unknown").then_some(taint.time_added?.0)
        },
    )
    .await;
    let evicted = until("the pod on worker-1 to be evicted", || async {
        let p = pods.get(&victim_name).await.ok()?;
        p.metadata
            .deletion_timestamp
            .map(|t| (t.0, p.metadata.deletion_grace_period_seconds.unwrap_or(0)))
    })
    .await;
    // Evicted no sooner than the toleration after the taint was added.
    let delete_requested = evicted.0 - k8s_openapi::jiff::SignedDuration::from_secs(evicted.1);
    assert!(
        delete_requested >= taint_added + k8s_openapi::jiff::SignedDuration::from_secs(1),
        "evicted at {delete_requested}, taint at {taint_added}"
    );
    // A replacement runs elsewhere while the evicted pod stays Terminating.
    until("a replacement on another node", || async {
        let l = pods
            .list(&ListParams::default().labels("app=fixture"))
            .await
            .ok()?
            .items;
        (running(&l).len() == 3 && running(&l).iter().all(|n| *n != victim_name)).then_some(())
    })
    .await;
    assert!(
        pods.get(&victim_name).await.is_ok(),
        "still Terminating while the node is cut off"
    );

    cluster.node_fault("worker-1", &NodeFault::Repair).unwrap();
    until(
        "the evicted pod to finish terminating after repair",
        || async {
            pods.get_opt(&victim_name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    until("worker-1 Ready without taints", || async {
        let n = nodes.get("worker-1").await.ok()?;
        let ready = n
            .status?
            .conditions?
            .into_iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let tainted = n.spec.and_then(|s| s.taints).is_some_and(|t| !t.is_empty());
        (ready && !tainted).then_some(())
    })
    .await;
    let log: Vec<String> = cluster
        .server()
        .state()
        .faults
        .log()
        .into_iter()
        .map(|e| e.verb)
        .collect();
    assert_eq!(log, vec!["partition", "repair"]);
    cluster.shutdown().await;
}
