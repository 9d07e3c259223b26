//! The operator on opconform's simulated cluster, from its own image, as in a real
//! cluster: its Deployment, ServiceAccount and ClusterRole applied from `config/`, its
//! client configured from the ServiceAccount's files in its container, its workloads'
//! pods containers of a busybox image. It makes a StatefulSet whose claims are
//! provisioned, bound and written to, and a Job whose pods run to completion, and reports
//! both in its custom resources' status; everything it made goes with them.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt as _};
use opconform::deploy::{Namespacing, apply_all, read_manifests, wait_for_rollout};
use opconform::sim::kubelet::oci::Isolation;
use opconform::sim::{SimCluster, SimClusterConfig};
use sim_test_support::{WAIT, eventually};
use workloads_operator::crd::{Batch, BatchSpec, Condition, Store, StoreSpec};

/// The image `config/manager` names, built here from the operator's binary.
const OPERATOR_IMAGE: &str = "workloads-operator:dev";
/// The image the operator's workloads run.
const BUSYBOX: &str = "busybox:1.36";
/// Where `config/` puts the operator.
const OPERATOR_NAMESPACE: &str = "workloads-operator-system";
/// The operator's identity, from `config/rbac`.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:workloads-operator-system:workloads-operator";

/// Whether the cluster's pods are containers (rather than host processes, which have no
/// mounts).
fn containers() -> bool {
    matches!(
        Isolation::detect(&std::env::temp_dir()),
        Isolation::Containers(_)
    )
}

/// A one-node cluster whose kubelet runs the operator's image, built from the binary as
/// opconform builds an operator's image, and a busybox image.
async fn start(dir: &Path) -> SimCluster {
    let binary = Path::new(env!("CARGO_BIN_EXE_workloads-operator"));
    let mut images = opconform::cluster::operator_image::operator_images(
        OPERATOR_IMAGE,
        binary,
        None,
        &dir.join("images"),
    )
    .expect("the operator's image");
    images.insert(BUSYBOX, sim_test_support::busybox_image(dir));
    SimCluster::start(SimClusterConfig {
        nodes: 1,
        images,
        work_dir: Some(dir.join("cluster")),
        ..SimClusterConfig::fast()
    })
    .await
    .expect("the cluster starts")
}

/// Applies `config/` (Namespace, CRDs, RBAC, the manager's Deployment) and waits for the
/// operator's rollout.
async fn deploy(client: &Client) {
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut manifests = Vec::new();
    for part in ["namespace.yaml", "crd", "rbac", "manager"] {
        manifests.extend(read_manifests(&config.join(part)).expect("the manifests"));
    }
    apply_all(client, &manifests, Namespacing::Default("default"))
        .await
        .expect("config/ applies");
    wait_for_rollout(client, OPERATOR_NAMESPACE, "workloads-operator", WAIT)
        .await
        .expect("the operator rolls out");
}

/// The condition of `type_` whose status is True.
fn holds<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// `object`'s controller, when it is `owner`.
fn controlled_by<K: Resource<DynamicType = ()>>(
    references: Option<&Vec<OwnerReference>>,
    owner: &K,
) -> bool {
    references.into_iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.kind == K::kind(&())
            && Some(&r.uid) == owner.meta().uid.as_ref()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_runs_from_its_image_and_reports_its_stateful_set_ready_and_its_job_complete()
{
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cluster = start(dir.path()).await;
    let client = cluster.server().admin_client().await.expect("a client");
    deploy(&client).await;
    let containers = containers();
    if !containers {
        eprintln!(
            "pods are host processes here (not root, or no OCI runtime): they mount no \
             volume at /data, so the Store's pods never turn Ready; checking its StatefulSet, \
             its claims and the Batch"
        );
    }

    let stores: Api<Store> = Api::namespaced(client.clone(), "default");
    let batches: Api<Batch> = Api::namespaced(client.clone(), "default");
    let store = Store::new(
        "web",
        StoreSpec {
            replicas: 2,
            storage: "1Gi".into(),
        },
    );
    let batch = Batch::new(
        "count",
        BatchSpec {
            command: "hostname; echo done".into(),
            completions: 3,
            parallelism: 2,
        },
    );
    let store = stores.create(&PostParams::default(), &store).await.unwrap();
    let batch = batches
        .create(&PostParams::default(), &batch)
        .await
        .unwrap();

    // The Batch: Complete once its Job is, with the Job's count.
    let done = eventually("the operator to report the Batch Complete", || async {
        let status = batches.get("count").await.ok()?.status?;
        holds(&status.conditions, "Complete")?;
        Some(status)
    })
    .await;
    assert_eq!((done.succeeded, done.failed), (3, 0), "{done:?}");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job = jobs.get("count").await.unwrap();
    assert!(controlled_by(
        job.metadata.owner_references.as_ref(),
        &batch
    ));
    let spec = job.spec.clone().unwrap();
    assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(2)));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ran = pods
        .list(&ListParams::default().labels("job-name=count"))
        .await
        .unwrap()
        .items;
    assert_eq!(ran.len(), 3, "one pod per completion");
    for pod in &ran {
        let name = pod.name_any();
        let log = pods.logs(&name, &LogParams::default()).await.unwrap();
        // A container's host name is its pod's; a host process has the machine's.
        if containers {
            assert_eq!(log, format!("{name}\ndone\n"));
        } else {
            assert!(log.ends_with("done\n"), "{log}");
        }
    }

    // The Store: its StatefulSet and Service are its own, its claims Bound.
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let set = eventually("the operator's StatefulSet", || async {
        sets.get("web").await.ok()
    })
    .await;
    assert!(controlled_by(
        set.metadata.owner_references.as_ref(),
        &store
    ));
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service = services.get("web").await.unwrap();
    assert!(controlled_by(
        service.metadata.owner_references.as_ref(),
        &store
    ));
    assert_eq!(
        service.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some("None")
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let mut directories = Vec::new();
    for ordinal in 0..2 {
        let name = format!("data-web-{ordinal}");
        let claim = eventually(&format!("claim {name} Bound"), || async {
            let claim = claims.get(&name).await.ok()?;
            let bound = claim.status.as_ref()?.phase.as_deref() == Some("Bound");
            bound.then_some(claim)
        })
        .await;
        let volume_name = claim.spec.and_then(|s| s.volume_name).unwrap();
        let volume = volumes.get(&volume_name).await.unwrap();
        let path = volume.spec.and_then(|s| s.host_path).unwrap().path;
        directories.push((format!("web-{ordinal}"), PathBuf::from(path)));
    }

    if containers {
        let ready = eventually("the operator to report the Store Ready", || async {
            let status = stores.get("web").await.ok()?.status?;
            holds(&status.conditions, "Ready")?;
            Some(status)
        })
        .await;
        assert_eq!(ready.ready_replicas, 2, "{ready:?}");
        // Each pod wrote its name into its own claim's directory, and was Ready only
        // once it served that file.
        for (pod, directory) in &directories {
            let written = std::fs::read_to_string(directory.join("written")).unwrap();
            assert_eq!(written, format!("{pod}\n"), "{}", directory.display());
        }
    }

    // What the operator made it made as its ServiceAccount, from its pod, and RBAC
    // refused it nothing.
    let audit = cluster.server().state().audit.events();
    let operator: Vec<_> = audit.iter().filter(|e| e.user == SERVICE_ACCOUNT).collect();
    let refused: Vec<_> = operator.iter().filter(|e| e.code == 403).collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
    for (resource, name) in [
        ("statefulsets", "web"),
        ("jobs", "count"),
        ("stores", "web"),
    ] {
        let made = operator
            .iter()
            .find(|e| e.verb == "patch" && e.resource == resource && e.name == name)
            .unwrap_or_else(|| panic!("no patch of {resource} {name} by the operator"));
        let pod = made
            .pod
            .as_ref()
            .map(|p| p.name.as_str())
            .unwrap_or_default();
        assert!(pod.starts_with("workloads-operator-"), "{made:?}");
    }

    // Deleted, the Store and the Batch take what the operator made along.
    stores
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    batches
        .delete("count", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the StatefulSet and the Job collected", || async {
        let set = sets.get_opt("web").await.ok()?;
        let job = jobs.get_opt("count").await.ok()?;
        (set.is_none() && job.is_none()).then_some(())
    })
    .await;
    cluster.shutdown().await;
}
