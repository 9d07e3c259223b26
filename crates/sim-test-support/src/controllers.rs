//! The simulated controllers against the simulated API server, with a fake kubelet in
//! place of the nodes: what the controllers' tests start, and what kubectl's rollout
//! rule is checked against.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use sim_apiserver::ApiServer;
use sim_controllers::{ControllerConfig, Controllers};

pub use sim_controllers::in_process::{controller_access, start_controllers};

// ---------------------------------------------------------------------------------------
// A fake kubelet: heartbeats (Lease and Ready condition), pods Running and Ready after a
// short start-up, terminations completed with grace 0. A partitioned node does nothing.

/// A fake kubelet for the named nodes: their Node and Lease, heartbeats, and their pods
/// played through; a partitioned node does nothing until repaired. Stops on drop.
pub struct FakeKubelet {
    partitioned: Arc<Mutex<HashSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn micro_now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn secs_now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

async fn heartbeat(client: &Client, node: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let _ = leases
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewTime": micro_now()}})),
        )
        .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(current) = nodes.get_status(node).await else {
        return;
    };
    let ready = current
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .cloned();
    let transition = match &ready {
        Some(c) if c.status == "True" => json!(c.last_transition_time),
        _ => json!(secs_now()),
    };
    let beat = secs_now();
    let unchanged = ready.as_ref().is_some_and(|c| {
        c.status == "True"
            && c.last_heartbeat_time.as_ref().map(|t| t.0.to_string()) == Some(beat.clone())
    });
    if unchanged {
        return;
    }
    let _ = nodes
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": beat, "lastTransitionTime": transition,
            }]}})),
        )
        .await;
}

/// The node a pod is bound to, if any.
pub fn node_of(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
}

/// Whether a pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn run_pod(client: Client, pod: Pod) {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    if pod.metadata.deletion_timestamp.is_some() {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(kube::api::Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &params).await;
        return;
    }
    if pod_ready(&pod) {
        return;
    }
    // A container takes a moment to start.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let now = secs_now();
    let _ = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                ],
            }})),
        )
        .await;
}

impl FakeKubelet {
    /// Creates the Nodes and their Leases and starts playing them.
    ///
    /// # Panics
    /// When a Node or Lease cannot be created.
    pub async fn start(client: Client, nodes: &[&str]) -> Self {
        let node_api: Api<Node> = Api::all(client.clone());
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        for name in nodes {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            }))
            .unwrap();
            node_api
                .create(&PostParams::default(), &node)
                .await
                .unwrap();
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_now()},
            }))
            .unwrap();
            leases.create(&PostParams::default(), &lease).await.unwrap();
            heartbeat(&client, name).await;
        }
        let names: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        let partitioned: Arc<Mutex<HashSet<String>>> = Arc::default();
        let cut = partitioned.clone();
        let task = tokio::spawn(async move {
            let pods = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
                .default_backoff()
                .applied_objects();
            let mut pods = std::pin::pin!(pods);
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            let mut was_cut: HashSet<String> = HashSet::new();
            loop {
                tokio::select! {
                    Some(Ok(pod)) = pods.next() => {
                        let Some(node) = node_of(&pod) else { continue };
                        if !names.contains(&node) || cut.lock().unwrap().contains(&node) {
                            continue;
                        }
                        tokio::spawn(run_pod(client.clone(), pod));
                    }
                    _ = tick.tick() => {
                        let now_cut = cut.lock().unwrap().clone();
                        for node in &names {
                            if now_cut.contains(node) {
                                continue;
                            }
                            heartbeat(&client, node).await;
                            if was_cut.contains(node) {
                                // Back from a partition: catch up with the node's pods.
                                let api: Api<Pod> = Api::all(client.clone());
                                let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
                                if let Ok(list) = api.list(&lp).await {
                                    for pod in list.items {
                                        tokio::spawn(run_pod(client.clone(), pod));
                                    }
                                }
                            }
                        }
                        was_cut = now_cut;
                    }
                }
            }
        });
        Self { partitioned, task }
    }

    /// The node stops: no heartbeat, its pods left as they are.
    pub fn partition(&self, node: &str) {
        self.partitioned.lock().unwrap().insert(node.to_string());
    }

    /// The node is back: heartbeats again and catches up with its pods.
    pub fn repair(&self, node: &str) {
        self.partitioned.lock().unwrap().remove(node);
    }
}

// ---------------------------------------------------------------------------------------

/// The simulated API server with every controller against it and a [`FakeKubelet`].
pub struct Sim {
    /// An admin client.
    pub client: Client,
    /// The API server.
    pub server: ApiServer,
    /// The fake kubelet of the nodes.
    pub kubelet: FakeKubelet,
    controllers: Option<Controllers>,
}

impl Sim {
    /// The server, the controllers with [`ControllerConfig::fast`], and `nodes`.
    pub async fn start(nodes: &[&str]) -> Self {
        Self::start_with(nodes, ControllerConfig::fast()).await
    }

    /// The server, the controllers with `config`, and `nodes`.
    ///
    /// # Panics
    /// When the server or the controllers do not start.
    pub async fn start_with(nodes: &[&str], config: ControllerConfig) -> Self {
        let (server, client) = crate::server().await;
        let controllers = start_controllers(&server.handle(), config)
            .await
            .expect("controllers start");
        let kubelet = FakeKubelet::start(client.clone(), nodes).await;
        Self {
            client,
            server,
            kubelet,
            controllers: Some(controllers),
        }
    }

    /// The namespaced API of `K` in `default`.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Shuts the controllers down.
    pub async fn stop(mut self) {
        if let Some(c) = self.controllers.take() {
            c.shutdown().await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Deployments, as kubectl sees them.

/// A Deployment `name` of `replicas` pods labelled `app: NAME`, each one container of
/// `image`, rolled out by `strategy` (the `spec.strategy` object).
pub fn deployment(name: &str, replicas: i32, image: &str, strategy: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    }))
    .unwrap()
}

/// kubectl's rollout rule (`polymorphichelpers/rollout_status.go`), as the reference
/// quotes it.
pub fn rollout_complete(d: &Deployment) -> bool {
    let status = d.status.clone().unwrap_or_default();
    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let progressing = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing");
    d.metadata.generation.unwrap_or(0) <= status.observed_generation.unwrap_or(0)
        && progressing.is_none_or(|c| c.reason.as_deref() != Some("ProgressDeadlineExceeded"))
        && status.updated_replicas.unwrap_or(0) >= wanted
        && status.replicas.unwrap_or(0) <= status.updated_replicas.unwrap_or(0)
        && status.available_replicas.unwrap_or(0) >= status.updated_replicas.unwrap_or(0)
}

/// Whether a Deployment's Available condition is True for its current generation.
pub fn available(d: &Deployment) -> bool {
    let status = d.status.clone().unwrap_or_default();
    status.observed_generation >= d.metadata.generation
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.status == "True")
}
