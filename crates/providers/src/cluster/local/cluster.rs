//! A real control plane ([`ControlPlane`]: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler as local processes) and three nodes run by our kubelet through that real
//! API server — pods as local processes, the operator image mapped to the workspace's
//! binary, as on the simulator — with the request rules the pods' proxies judge by.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ListParams};

use super::{Binaries, ControlPlane, ControlPlaneConfig};
use crate::cluster::ProviderError;
use crate::cluster::sim_parts::SimRules;
use crate::sim::Nodes;
use crate::sim::kubelet::{ImageMap, Kubelet, KubeletConfig};

/// Nodes per cluster, as on the simulator.
pub(super) const NODES: u8 = 3;

/// How long a cluster's nodes may take to become Ready.
pub(super) const NODES_READY_WITHIN: Duration = Duration::from_secs(60);

/// How long a node may miss heartbeats before the node lifecycle controller marks it
/// NotReady: the simulator's fast setting, so node scenarios take seconds.
const NODE_GRACE: Duration = Duration::from_secs(3);

/// A real control plane and its nodes.
pub struct LocalCluster {
    plane: Option<ControlPlane>,
    pub(super) nodes: Arc<Nodes>,
    pub(super) client: Client,
    /// The rules the pods' proxies judge requests by, and their log.
    pub(super) request_rules: SimRules,
    /// The image of the operator under test, which the kubelets run as its binary.
    pub(super) image: String,
    _dir: tempfile::TempDir,
}

fn failed(e: impl std::error::Error + Send + Sync + 'static) -> ProviderError {
    ProviderError::Local(Box::new(e))
}

impl LocalCluster {
    /// [`LocalCluster::start`] with kubelets that run `images` for the containers of the
    /// operator under test, whose manifests name `image`.
    ///
    /// # Errors
    /// As [`LocalCluster::start`].
    pub async fn running(
        binaries: Binaries,
        image: &str,
        images: ImageMap,
        crds: Vec<String>,
    ) -> Result<Self, ProviderError> {
        let mut cluster = Self::start(binaries, images, crds).await?;
        cluster.image = image.to_string();
        Ok(cluster)
    }

    /// Starts a control plane from `binaries`, with the CustomResourceDefinitions `crds`
    /// (YAML) installed before its controllers start, and three nodes whose kubelets run
    /// `images` as local processes; returns once every node is Ready.
    ///
    /// # Errors
    /// When the control plane or a kubelet does not start, or the nodes are not Ready
    /// within 60 s.
    pub async fn start(
        binaries: Binaries,
        images: ImageMap,
        crds: Vec<String>,
    ) -> Result<Self, ProviderError> {
        let names: Vec<String> = (1..=NODES).map(|i| format!("worker-{i}")).collect();
        let mut config = ControlPlaneConfig::new(binaries);
        config.nodes = names.clone();
        config.node_monitor_grace_period = NODE_GRACE;
        config.crds = crds;
        // The run's choice of version (found by Binaries::find) and feature gates.
        let chosen = super::versions::chosen();
        config.runtime_config =
            super::versions::runtime_config(chosen.version(), &chosen.feature_gates);
        config.feature_gates = chosen.feature_gates;
        let plane = ControlPlane::start(config).await.map_err(failed)?;
        let controllers = plane.controllers();
        if controllers != crate::cluster::local::ControllersRun::Real {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!("opconform: on local, the built-in controllers are {controllers}")
            });
        }
        match Self::with_plane(plane, &names, images).await {
            Ok(provider) => Ok(provider),
            Err((plane, e)) => {
                plane.shutdown().await;
                Err(e)
            }
        }
    }

    async fn with_plane(
        plane: ControlPlane,
        names: &[String],
        images: ImageMap,
    ) -> Result<Self, (ControlPlane, ProviderError)> {
        let dir = match tempfile::Builder::new()
            .prefix("opconform-local-nodes-")
            .tempdir()
        {
            Ok(dir) => dir,
            Err(e) => return Err((plane, failed(e))),
        };
        let cluster = next_cluster_id();
        let upstream: Arc<dyn crate::sim::kubelet::upstream::Upstream> = Arc::new(plane.upstream());
        let request_rules = SimRules::default();
        let mut kubelets = Vec::new();
        for (index, name) in (1u8..).zip(names) {
            let mut kc = KubeletConfig::new(name, index, dir.path().join(name));
            // Pod IPs 127.<100+node>.<cluster>.N: clusters in one process never share one.
            kc.pod_ip_prefix = [100 + index, cluster];
            kc.images = images.clone();
            kc.heartbeat_interval = Duration::from_millis(500);
            kc.request_rules = Some(Arc::clone(&request_rules));
            match Kubelet::start(upstream.clone(), kc).await {
                Ok(kubelet) => kubelets.push(kubelet),
                Err(e) => {
                    Nodes::new(kubelets).shutdown().await;
                    return Err((plane, failed(e)));
                }
            }
        }
        let nodes = Arc::new(Nodes::new(kubelets));
        let client = match plane.admin_client().await {
            Ok(client) => client,
            Err(e) => {
                nodes.shutdown().await;
                return Err((plane, failed(e)));
            }
        };
        if let Err(e) = wait_for_ready_nodes(&client, names.len(), NODES_READY_WITHIN).await {
            nodes.shutdown().await;
            return Err((plane, e));
        }
        Ok(Self {
            plane: Some(plane),
            nodes,
            client,
            request_rules,
            image: crate::cluster::DEFAULT_OPERATOR_IMAGE.to_string(),
            _dir: dir,
        })
    }

    /// The control plane.
    pub fn control_plane(&self) -> &ControlPlane {
        self.plane
            .as_ref()
            .expect("the control plane runs until teardown")
    }

    /// The nodes' kubelets.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }
}

/// A process-wide id for each local cluster (1..=200, from a random start), the third
/// octet of its pod IPs, so concurrent scenarios never share a pod or node address.
fn next_cluster_id() -> u8 {
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        rand::random::<u32>() % 200,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    (NEXT.fetch_add(1, Ordering::SeqCst) % 200 + 1) as u8
}

/// The taints the node lifecycle controller puts on a node that is not Ready; a node
/// carrying one takes no new pods (NoSchedule) or evicts its pods (NoExecute).
const NODE_LIFECYCLE_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// Whether `node` is Ready and carries none of [`NODE_LIFECYCLE_TAINTS`].
fn ready_and_untainted(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| NODE_LIFECYCLE_TAINTS.contains(&t.key.as_str()))
        });
    ready && !tainted
}

/// Waits until `wanted` nodes are Ready and free of the node lifecycle controller's taints,
/// for at most `within`.
pub(super) async fn wait_for_ready_nodes(
    client: &Client,
    wanted: usize,
    within: Duration,
) -> Result<(), ProviderError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let ready = nodes
            .list(&ListParams::default())
            .await
            .map(|list| list.items.iter().filter(|n| ready_and_untainted(n)).count())
            .unwrap_or(0);
        if ready >= wanted {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ProviderError::Unsupported {
                provider: "local",
                what: format!(
                    "get its nodes Ready and untainted ({ready} of {wanted} within {} s)",
                    within.as_secs()
                ),
                hint: "see the kubelet and kube-apiserver logs in the scenario's artifacts",
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl LocalCluster {
    /// Stops the nodes (their pods first), then the control plane.
    pub async fn shutdown(mut self) {
        self.nodes.shutdown().await;
        if let Some(plane) = self.plane.take() {
            plane.shutdown().await;
        }
    }
}
