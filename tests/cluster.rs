//! The simulated cluster as a whole: controllers, scheduler and kubelets together run a
//! Deployment of a real executable, scale it, replace deleted pods, and react to a node
//! partition as a real cluster does; a StatefulSet's claims are provisioned by the default
//! StorageClass on its pods' nodes, bound and mounted, and keep their data.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
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

/// A container that records each of its starts in its volume at `/data` (when it has one:
/// pods that are host processes have no mounts), then idles.
fn stateful_fixture(dir: &Path) -> PathBuf {
    let path = dir.join("stateful.sh");
    let script = "#!/bin/sh\necho \"started $POD_NAME\" >> /data/starts 2>/dev/null\ntrap 'exit 0' TERM\nwhile true; do sleep 0.05; done\n";
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Whether the cluster's pods are containers (rather than host processes, which have no
/// mounts).
fn containers() -> bool {
    matches!(
        opconform::sim::kubelet::oci::Isolation::detect(&std::env::temp_dir()),
        opconform::sim::kubelet::oci::Isolation::Containers(_)
    )
}

fn stateful_set(replicas: i32) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "app", "image": "stateful:1",
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "terminationGracePeriodSeconds": 2}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .unwrap()
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_sets_claims_are_provisioned_bound_mounted_and_keep_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut images = ImageMap::new();
    images.insert("stateful:1", stateful_fixture(dir.path()));
    let cluster = SimCluster::start(SimClusterConfig {
        images,
        work_dir: Some(dir.path().join("cluster")),
        ..SimClusterConfig::fast()
    })
    .await
    .expect("the cluster starts");
    let client = cluster.server().admin_client().await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    sets.create(&PostParams::default(), &stateful_set(2))
        .await
        .unwrap();
    until("both replicas Ready", || async {
        let set = sets.get("web").await.ok()?;
        (set.status?.ready_replicas == Some(2)).then_some(())
    })
    .await;

    let mut directories = Vec::new();
    for ordinal in 0..2 {
        let pod = pods.get(&format!("web-{ordinal}")).await.unwrap();
        let node = pod.spec.unwrap().node_name.unwrap();
        let claim = claims.get(&format!("data-web-{ordinal}")).await.unwrap();
        let uid = claim.metadata.uid.clone().unwrap();
        let spec = claim.spec.clone().unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
        assert_eq!(spec.volume_name, Some(format!("pvc-{uid}")));
        let status = claim.status.clone().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Bound"));
        assert_eq!(status.capacity.unwrap()["storage"].0, "1Gi");
        for (key, value) in [
            ("pv.kubernetes.io/bind-completed", "yes"),
            ("pv.kubernetes.io/bound-by-controller", "yes"),
            ("volume.kubernetes.io/selected-node", node.as_str()),
            (
                "volume.kubernetes.io/storage-provisioner",
                "rancher.io/local-path",
            ),
            (
                "volume.beta.kubernetes.io/storage-provisioner",
                "rancher.io/local-path",
            ),
        ] {
            assert_eq!(annotation(&claim.metadata, key), Some(value), "{key}");
        }
        let volume = volumes.get(&format!("pvc-{uid}")).await.unwrap();
        assert_eq!(
            annotation(&volume.metadata, "pv.kubernetes.io/provisioned-by"),
            Some("rancher.io/local-path")
        );
        assert_eq!(volume.status.unwrap().phase.as_deref(), Some("Bound"));
        let spec = volume.spec.unwrap();
        let reference = spec.claim_ref.unwrap();
        assert_eq!(reference.name, claim.metadata.name);
        assert_eq!(reference.uid.as_deref(), Some(uid.as_str()));
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        let affinity = serde_json::to_value(spec.node_affinity.unwrap()).unwrap();
        assert_eq!(
            affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
            json!([node])
        );
        let path = PathBuf::from(spec.host_path.unwrap().path);
        assert!(
            path.is_dir(),
            "the volume's directory {} exists",
            path.display()
        );
        directories.push((node, path));
    }

    // web-0 deleted comes back on the node of its volume, which kept what it wrote.
    let (node, path) = directories[0].clone();
    let starts = |path: &Path| std::fs::read_to_string(path.join("starts")).unwrap_or_default();
    if containers() {
        until("web-0 to write into its volume", || async {
            (starts(&path) == "started web-0\n").then_some(())
        })
        .await;
    }
    let old_uid = pods.get("web-0").await.unwrap().metadata.uid;
    pods.delete("web-0", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = until("web-0 made again and Ready", || async {
        let pod = pods.get("web-0").await.ok()?;
        let ready = pod
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (pod.metadata.uid != old_uid && ready).then_some(pod)
    })
    .await;
    assert_eq!(recreated.spec.unwrap().node_name, Some(node));
    if containers() {
        until("the new web-0 to find the old one's line", || async {
            (starts(&path) == "started web-0\nstarted web-0\n").then_some(())
        })
        .await;
    }

    // Scaled down, web-1's claim stays; deleted, it takes its volume and directory along.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    until("web-1 gone", || async {
        pods.get_opt("web-1").await.ok()?.is_none().then_some(())
    })
    .await;
    let claim = claims.get("data-web-1").await.unwrap();
    let volume_name = claim.spec.unwrap().volume_name.unwrap();
    claims
        .delete("data-web-1", &DeleteParams::default())
        .await
        .unwrap();
    until("the claim's volume deleted", || async {
        volumes
            .get_opt(&volume_name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        !directories[1].1.exists(),
        "the volume's directory is removed"
    );
    assert!(directories[0].1.is_dir(), "web-0's volume is kept");
    cluster.shutdown().await;
}
