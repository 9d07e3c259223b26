//! The local provider: each scenario gets a real control plane of its own ([`ControlPlane`]:
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler as local processes) and
//! three nodes run by our kubelet through that real API server — pods as local processes,
//! the operator image mapped to the workspace's binary, as on the simulator.
//!
//! | fault | on local | undo |
//! |---|---|---|
//! | pod crash, evict | the kubelet: SIGKILL; eviction as node pressure does it | — |
//! | pod hold | the kubelet: SIGSTOP | release: SIGCONT |
//! | pod partition, delay | the pod's API proxy: drop, hang, hang responses, latency | repair |
//! | pod skew | libfaketime preloaded into the pod's processes | skew by 0 |
//! | node hold | the kubelet and its pods freeze | release |
//! | node partition | the node's and its pods' proxies cut: heartbeats stop, and the **real** node lifecycle controller marks it NotReady, taints it and evicts | repair |
//! | reject | a ValidatingAdmissionPolicy and binding ([`crate::cluster::admission`]), as on kind | allow: both deleted |
//! | hold a request's sender, defer a request | the pod's API proxy, which terminates the pod's TLS (the pod trusts its node's proxy CA) and judges each request by the request rules | the rule fires once; disarm |
//!
//! The audit of writes is kube-apiserver's own JSON audit log (the kind policy), followed
//! as a file; requests are attributed to pods by their bound ServiceAccount tokens, else by
//! their source address (each pod's proxy connects from the pod's IP).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams};

use super::{Binaries, ControlPlane, ControlPlaneConfig};
use crate::audit::AuditFeed;
use crate::cluster::audit::{
    PodsByIp, followed_or_warned, kube_apiserver_lines, watch_pod_addresses,
};
use crate::cluster::sim::{node_fault_on, pod_fault_on};
use crate::cluster::{Placement, Provider, ProviderError, admission};
use crate::fault::{FaultError, FaultLog, NodeFault, PodFault, RequestMatch};
use crate::sim::cluster::Nodes;
use crate::sim::kubelet::{ImageMap, Kubelet, KubeletConfig};

/// Nodes per cluster, as on the simulator.
const NODES: u8 = 3;

/// How long a node may miss heartbeats before the node lifecycle controller marks it
/// NotReady: the simulator's fast setting, so node scenarios take seconds.
const NODE_GRACE: Duration = Duration::from_secs(3);

/// A scenario's own real control plane and nodes.
pub struct LocalProvider {
    plane: Option<ControlPlane>,
    nodes: Arc<Nodes>,
    client: Client,
    /// The rules the pods' proxies judge requests by; its log is the fault log.
    request_rules: Arc<crate::sim::faults::Faults>,
    faults: FaultLog,
    rules: tokio::sync::Mutex<BTreeMap<u64, String>>,
    next_rule: AtomicU64,
    tasks: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
    /// Where the operator under test goes: as its own manifests say.
    placement: Placement,
    _dir: tempfile::TempDir,
}

fn failed(e: impl std::error::Error + Send + Sync + 'static) -> ProviderError {
    ProviderError::Local(Box::new(e))
}

impl LocalProvider {
    /// [`LocalProvider::start`] with kubelets that run `binary` for the containers of the
    /// operator under test, placed as `placement` says (its own manifests' namespace and
    /// image: [`crate::subject::Subject::own_placement`]).
    ///
    /// # Errors
    /// As [`LocalProvider::start`].
    pub async fn running(
        binaries: Binaries,
        placement: Placement,
        binary: &Path,
        crds: Vec<String>,
    ) -> Result<Self, ProviderError> {
        let mut images = ImageMap::new();
        images.insert(&placement.image, binary);
        let mut provider = Self::start(binaries, images, crds).await?;
        provider.placement = placement;
        Ok(provider)
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
        let request_rules = Arc::new(crate::sim::faults::Faults::new());
        let mut kubelets = Vec::new();
        for (index, name) in (1u8..).zip(names) {
            let mut kc = KubeletConfig::new(name, index, dir.path().join(name));
            // Pod IPs 127.<100+node>.<cluster>.N: clusters in one process never share one.
            kc.pod_ip_prefix = [100 + index, cluster];
            kc.images = images.clone();
            kc.heartbeat_interval = Duration::from_millis(500);
            kc.request_rules = Some(request_rules.clone());
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
        if let Err(e) = wait_for_ready_nodes(&client, names.len()).await {
            nodes.shutdown().await;
            return Err((plane, e));
        }
        Ok(Self {
            plane: Some(plane),
            nodes,
            client,
            faults: FaultLog::kept_in(request_rules.clone()),
            request_rules,
            rules: tokio::sync::Mutex::default(),
            next_rule: AtomicU64::new(0),
            tasks: std::sync::Mutex::default(),
            placement: Placement::bundled(),
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

async fn wait_for_ready_nodes(client: &Client, wanted: usize) -> Result<(), ProviderError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let ready = nodes
            .list(&ListParams::default())
            .await
            .map(|list| {
                list.items
                    .iter()
                    .filter(|n| {
                        n.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                    })
                    .count()
            })
            .unwrap_or(0);
        if ready >= wanted {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ProviderError::Unsupported {
                provider: "local",
                what: format!("get its nodes Ready ({ready} of {wanted} within 60 s)"),
                hint: "see the kubelet and kube-apiserver logs in the scenario's artifacts",
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &'static str {
        "local"
    }

    fn client(&self) -> Client {
        self.client.clone()
    }

    fn namespace(&self, logical: &str) -> String {
        logical.to_string()
    }

    fn placement(&self) -> Placement {
        self.placement.clone()
    }

    fn faults(&self) -> FaultLog {
        self.faults.clone()
    }

    fn audit(&self) -> Option<AuditFeed> {
        let pods = PodsByIp::default();
        let api: Api<Pod> = Api::all(self.client.clone());
        let task = watch_pod_addresses(api, pods.clone());
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
        followed_or_warned(self.control_plane().audit_log(), kube_apiserver_lines(pods))
    }

    fn request_rules(&self) -> Option<Arc<crate::sim::faults::Faults>> {
        Some(self.request_rules.clone())
    }

    async fn pod_fault(
        &self,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), ProviderError> {
        pod_fault_on(&self.nodes, namespace, pod, fault)?;
        self.faults.record(
            fault.verb(),
            &format!("pod {namespace}/{pod}"),
            &fault.detail(),
        );
        Ok(())
    }

    async fn node_fault(&self, node: &str, fault: &NodeFault) -> Result<(), ProviderError> {
        node_fault_on(&self.nodes, node, fault)?;
        self.faults
            .record(fault.verb(), &format!("node {node}"), &fault.detail());
        Ok(())
    }

    async fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        message: &str,
    ) -> Result<u64, ProviderError> {
        let id = self.next_rule.fetch_add(1, Ordering::SeqCst) + 1;
        let name = format!("opconform-reject-{id}");
        let policy = admission::reject_policy(&name, &BTreeMap::new(), &matches, code, message)
            .map_err(|e| ProviderError::Local(Box::new(e)))?;
        admission::apply(&self.client, &policy)
            .await
            .map_err(|source| ProviderError::Api {
                action: format!("creating ValidatingAdmissionPolicy {name} and its binding"),
                source,
            })?;
        if let Err(e) =
            admission::wait_until_in_force(&self.client, &name, true, admission::IN_FORCE_WITHIN)
                .await
        {
            let _ = admission::remove(&self.client, &name).await;
            return Err(ProviderError::Local(Box::new(e)));
        }
        self.rules.lock().await.insert(id, name.clone());
        let reason = admission::reason_for_code(code).unwrap_or_default();
        self.faults.record(
            "reject",
            &format!("rule {id}: {}", admission::describe(&policy)),
            &format!("{code} {reason}, ValidatingAdmissionPolicy {name}"),
        );
        Ok(id)
    }

    async fn allow(&self, id: u64) -> Result<(), ProviderError> {
        let mut rules = self.rules.lock().await;
        let name = rules
            .get(&id)
            .cloned()
            .ok_or(ProviderError::Fault(FaultError::NoRule(id)))?;
        admission::remove(&self.client, &name)
            .await
            .map_err(|source| ProviderError::Api {
                action: format!("deleting ValidatingAdmissionPolicy {name} and its binding"),
                source,
            })?;
        admission::wait_until_in_force(&self.client, &name, false, admission::IN_FORCE_WITHIN)
            .await
            .map_err(|e| -> ProviderError { ProviderError::Local(Box::new(e)) })?;
        rules.remove(&id);
        drop(rules);
        self.faults.record(
            "allow",
            &format!("rule {id}"),
            &format!("ValidatingAdmissionPolicy {name} deleted"),
        );
        Ok(())
    }

    fn pod_ips_reachable(&self) -> bool {
        true
    }

    async fn keep_artifacts(&self, dir: &Path) {
        // The components' logs and the audit log; pod logs, events and locks are kept by
        // the step library through the API.
        self.control_plane().keep_logs(&dir.join("control-plane"));
    }

    async fn teardown(mut self: Box<Self>) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        self.nodes.shutdown().await;
        if let Some(plane) = self.plane.take() {
            plane.shutdown().await;
        }
    }
}
