//! A scenario's share of the run's kind cluster, and the fault vocabulary by real means:
//!
//! | fault | on kind | undo |
//! |---|---|---|
//! | pod crash | SIGKILL of the container's processes inside its node; the Pod stays and the kubelet restarts the container | — |
//! | pod hold | SIGSTOP of the pod's container processes inside the node | release: SIGCONT |
//! | pod partition (drop, hang) | iptables in the pod's node: its TCP traffic to the API server (port 6443) reset (drop) or dropped (hang) | repair: the same rules deleted |
//! | node hold | `docker pause <node>` (kubelet, runtime and pods freeze) | release: `docker unpause` |
//! | node partition (drop) | `docker network disconnect kind <node>` | repair: `docker network connect` at the same address |
//! | reject | a ValidatingAdmissionPolicy and binding ([`crate::cluster::admission`]) | allow: both deleted |
//!
//! Refused with [`ProviderError::Unsupported`]: delay, skew and eviction of a pod, a
//! partition that drops only responses, a node partition that hangs, and any fault of the
//! control-plane node (the harness talks to its API server). Every fault applied and undone is recorded
//! in the scenario's fault log. Teardown undoes the node and network faults still in
//! force, so the next scenario gets a whole cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;

use super::node::{self, Address};
use super::{KindCluster, KindError};
use crate::audit::AuditFeed;
use crate::cluster::admission;
use crate::cluster::audit_log::{
    PodsByIp, followed_or_warned, kube_apiserver_lines, watch_pod_addresses,
};
use crate::cluster::shared::{SCENARIO_LABEL, delete_labelled, shared_placement};
use crate::cluster::{Placement, Provider, ProviderError, random_name};
use crate::fault::{Cut, FaultError, FaultLog, HoldScope, NodeFault, PodFault, RequestMatch};

/// Where a pod runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placed {
    node: String,
    ip: Option<String>,
    uid: String,
}

/// Faults of this scenario still in force (to undo at teardown).
#[derive(Debug, Default)]
struct InForce {
    /// Pod partitions: `namespace/name` → (node, rules).
    partitions: BTreeMap<String, (String, Vec<node::Rule>)>,
    /// Held pods: `namespace/name`.
    held: BTreeSet<String>,
    /// Paused nodes.
    paused: BTreeSet<String>,
    /// Nodes whose kubelet is stopped (SIGSTOP).
    kubelet_stopped: BTreeSet<String>,
    /// Disconnected nodes and their addresses before.
    disconnected: BTreeMap<String, Address>,
}

/// A scenario's share of the run's kind cluster.
pub struct KindProvider {
    cluster: Arc<KindCluster>,
    image: String,
    prefix: String,
    faults: FaultLog,
    in_force: tokio::sync::Mutex<InForce>,
    rejects: admission::Rejects,
    tasks: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
}

impl KindProvider {
    /// A new share (`opconform-xxxxxx`) of `cluster`, whose operator runs `image` (one the
    /// cluster has, or can pull).
    pub fn new(cluster: Arc<KindCluster>, image: impl Into<String>) -> Self {
        let prefix = random_name("opconform");
        let image = image.into();
        let labels = shared_placement(&prefix, &image).labels;
        Self {
            rejects: admission::Rejects::new(cluster.client(), &prefix, labels),
            cluster,
            image,
            prefix,
            faults: FaultLog::new(),
            in_force: tokio::sync::Mutex::default(),
            tasks: std::sync::Mutex::default(),
        }
    }

    /// The scenario's name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The run's cluster.
    pub fn cluster(&self) -> &KindCluster {
        &self.cluster
    }

    fn unsupported(&self, what: String, hint: &'static str) -> ProviderError {
        ProviderError::Unsupported {
            provider: "kind",
            what,
            hint,
        }
    }

    async fn placed(&self, namespace: &str, pod: &str) -> Result<Placed, ProviderError> {
        let api: Api<Pod> = Api::namespaced(self.cluster.client(), namespace);
        let found = api.get(pod).await.map_err(|source| ProviderError::Api {
            action: format!("reading pod {namespace}/{pod}"),
            source,
        })?;
        let not_placed = |why: &str| KindError::Pod {
            pod: format!("{namespace}/{pod}"),
            why: why.to_string(),
        };
        let node = found
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .ok_or_else(|| not_placed("it is not scheduled to a node yet"))?;
        Ok(Placed {
            node,
            ip: found.status.as_ref().and_then(|s| s.pod_ip.clone()),
            uid: found
                .metadata
                .uid
                .clone()
                .ok_or_else(|| not_placed("it has no uid"))?,
        })
    }

    /// The main processes of a pod's running containers (of one when named).
    async fn pids(
        &self,
        target: &str,
        placed: &Placed,
        container: Option<&str>,
    ) -> Result<Vec<u32>, ProviderError> {
        let tools = self.cluster.tools();
        let limit = self.cluster.timeouts().command;
        let pids = node::container_pids(tools, limit, &placed.node, &placed.uid, container).await?;
        if pids.is_empty() {
            return Err(KindError::Pod {
                pod: target.to_string(),
                why: format!(
                    "no running container{} on node {}",
                    container.map(|c| format!(" {c:?}")).unwrap_or_default(),
                    placed.node
                ),
            }
            .into());
        }
        Ok(pids)
    }

    async fn signal_pod(
        &self,
        namespace: &str,
        pod: &str,
        signal: &str,
        container: Option<&str>,
    ) -> Result<String, ProviderError> {
        let target = format!("{namespace}/{pod}");
        let placed = self.placed(namespace, pod).await?;
        let pids = self.pids(&target, &placed, container).await?;
        node::signal(
            self.cluster.tools(),
            self.cluster.timeouts().command,
            &placed.node,
            signal,
            &pids,
        )
        .await?;
        Ok(placed.node)
    }

    /// Refuses faults of nodes that are not this cluster's workers.
    fn check_node(&self, node: &str) -> Result<(), ProviderError> {
        let why = if node.ends_with("-control-plane") {
            "it runs the API server the harness talks to"
        } else if !node.starts_with(&format!("{}-", self.cluster.name())) {
            "it is not a node of this kind cluster"
        } else {
            return Ok(());
        };
        Err(KindError::Node {
            node: node.to_string(),
            why: why.into(),
        }
        .into())
    }

    async fn partition_pod(
        &self,
        namespace: &str,
        pod: &str,
        cut: Cut,
    ) -> Result<String, ProviderError> {
        let target = format!("{namespace}/{pod}");
        let placed = self.placed(namespace, pod).await?;
        let ip = placed.ip.clone().ok_or_else(|| KindError::Pod {
            pod: target.clone(),
            why: "it has no IP address yet".into(),
        })?;
        let rules = node::partition_rules(&ip, &target, cut).map_err(|what| {
            self.unsupported(
                what,
                "iptables would also drop the handshake; run the scenario on sim",
            )
        })?;
        let mut in_force = self.in_force.lock().await;
        if in_force.partitions.contains_key(&target) {
            return Ok(format!("{cut:?}, already in force").to_lowercase());
        }
        let tools = self.cluster.tools();
        let limit = self.cluster.timeouts().command;
        let mut applied = Vec::new();
        for rule in rules {
            if let Err(e) = node::iptables(tools, limit, &placed.node, &rule, true).await {
                for done in &applied {
                    let _ = node::iptables(tools, limit, &placed.node, done, false).await;
                }
                return Err(e.into());
            }
            applied.push(rule);
        }
        in_force
            .partitions
            .insert(target, (placed.node.clone(), applied));
        Ok(format!(
            "{}: iptables on {} against {ip} to port {}",
            format!("{cut:?}").to_lowercase(),
            placed.node,
            node::API_SERVER_PORT
        ))
    }

    async fn repair_pod(&self, target: &str) -> Result<String, ProviderError> {
        let removed = self.in_force.lock().await.partitions.remove(target);
        let Some((node_name, rules)) = removed else {
            return Ok("nothing was cut".into());
        };
        let tools = self.cluster.tools();
        let limit = self.cluster.timeouts().command;
        for rule in &rules {
            node::iptables(tools, limit, &node_name, rule, false).await?;
        }
        Ok(format!("iptables rules removed on {node_name}"))
    }

    /// Undoes what is still in force; errors are reported, teardown goes on.
    async fn undo_in_force(&self) {
        let tools = self.cluster.tools();
        let limit = self.cluster.timeouts().command;
        let network = self.cluster.network();
        let in_force = std::mem::take(&mut *self.in_force.lock().await);
        let report = |what: String, e: &dyn std::error::Error| {
            eprintln!(
                "opconform: teardown of {}: {what} failed: {}",
                self.prefix,
                crate::error_chain(e)
            );
        };
        for node_name in &in_force.paused {
            match tools.run("docker", &["unpause", node_name], limit).await {
                Ok(_) => self
                    .faults
                    .record("release", &format!("node {node_name}"), "teardown"),
                Err(e) => report(format!("docker unpause {node_name}"), &e),
            }
        }
        for node_name in &in_force.kubelet_stopped {
            match tools
                .run("docker", &kubelet_signal(node_name, false), limit)
                .await
            {
                Ok(_) => self
                    .faults
                    .record("release", &format!("node {node_name}"), "teardown"),
                Err(e) => report(format!("continuing the kubelet of {node_name}"), &e),
            }
        }
        for (node_name, before) in &in_force.disconnected {
            match node::reconnect(tools, limit, node_name, network, before).await {
                Ok(()) => self
                    .faults
                    .record("repair", &format!("node {node_name}"), "teardown"),
                Err(e) => report(format!("reconnecting {node_name}"), &e),
            }
        }
        for (target, (node_name, rules)) in &in_force.partitions {
            for rule in rules {
                if let Err(e) = node::iptables(tools, limit, node_name, rule, false).await {
                    report(format!("removing the partition of {target}"), &e);
                }
            }
        }
        for target in &in_force.held {
            let (namespace, pod) = target.split_once('/').unwrap_or_default();
            if let Err(e) = self.signal_pod(namespace, pod, "CONT", None).await {
                report(format!("releasing {target}"), &e);
            }
        }
        self.rejects.remove_all().await;
    }

    /// Follows the pods of `namespace` into `pods` (IP address → pod) until aborted.
    fn watch_pod_addresses(&self, namespace: &str, pods: PodsByIp) {
        let api: Api<Pod> = Api::namespaced(self.cluster.client(), namespace);
        let task = watch_pod_addresses(api, pods);
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
    }
}

#[async_trait]
impl Provider for KindProvider {
    fn name(&self) -> &'static str {
        "kind"
    }

    fn client(&self) -> Client {
        self.cluster.client()
    }

    fn namespace(&self, logical: &str) -> String {
        format!("{}-{logical}", self.prefix)
    }

    fn placement(&self) -> Placement {
        shared_placement(&self.prefix, &self.image)
    }

    fn faults(&self) -> FaultLog {
        self.faults.clone()
    }

    fn audit(&self) -> Option<AuditFeed> {
        let path = self.cluster.audit_log()?;
        let pods = PodsByIp::default();
        self.watch_pod_addresses(&self.placement().namespace, pods.clone());
        followed_or_warned(path, kube_apiserver_lines(pods))
    }

    async fn pod_fault(
        &self,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), ProviderError> {
        let target = format!("{namespace}/{pod}");
        let detail = match fault {
            PodFault::Crash { container } => {
                let node_name = self
                    .signal_pod(namespace, pod, "KILL", container.as_deref())
                    .await?;
                match container {
                    Some(c) => format!("SIGKILL, container {c} on {node_name}"),
                    None => format!("SIGKILL on {node_name}"),
                }
            }
            PodFault::Evict { .. } => {
                return Err(self.unsupported(
                    format!("evict pod {target}"),
                    "a kubelet evicts under real node pressure only, never a chosen pod on request; run the scenario on sim or local (tag it @kubelet-faults)",
                ));
            }
            PodFault::Hold => {
                let node_name = self.signal_pod(namespace, pod, "STOP", None).await?;
                self.in_force.lock().await.held.insert(target.clone());
                format!("SIGSTOP on {node_name}")
            }
            PodFault::Release => {
                let node_name = self.signal_pod(namespace, pod, "CONT", None).await?;
                self.in_force.lock().await.held.remove(&target);
                format!("SIGCONT on {node_name}")
            }
            PodFault::Partition { cut } => self.partition_pod(namespace, pod, *cut).await?,
            PodFault::Repair => self.repair_pod(&target).await?,
            PodFault::Delay { millis } => {
                return Err(self.unsupported(
                    format!("delay pod {target}'s API traffic by {millis}ms"),
                    "kind has no sound way to slow one pod's API traffic; run the scenario on sim or local (tag it @kubelet-faults)",
                ));
            }
            PodFault::Skew { seconds } => {
                return Err(self.unsupported(
                    format!("skew pod {target}'s clock by {seconds:+}s"),
                    "containers share their node's clock; run the scenario on sim or local (tag it @kubelet-faults)",
                ));
            }
        };
        self.faults
            .record(fault.verb(), &format!("pod {target}"), &detail);
        Ok(())
    }

    async fn node_fault(&self, node_name: &str, fault: &NodeFault) -> Result<(), ProviderError> {
        self.check_node(node_name)?;
        let tools = self.cluster.tools();
        let limit = self.cluster.timeouts().command;
        let network = self.cluster.network();
        let mut in_force = self.in_force.lock().await;
        let detail = match fault {
            NodeFault::Hold {
                scope: HoldScope::Node,
            } => {
                tools.run("docker", &["pause", node_name], limit).await?;
                in_force.paused.insert(node_name.to_string());
                "docker pause".to_string()
            }
            NodeFault::Hold {
                scope: HoldScope::Kubelet,
            } => {
                tools
                    .run("docker", &kubelet_signal(node_name, true), limit)
                    .await?;
                in_force.kubelet_stopped.insert(node_name.to_string());
                "systemctl kill --signal=SIGSTOP kubelet".to_string()
            }
            NodeFault::Release => {
                if in_force.kubelet_stopped.remove(node_name) {
                    tools
                        .run("docker", &kubelet_signal(node_name, false), limit)
                        .await?;
                    "systemctl kill --signal=SIGCONT kubelet".to_string()
                } else {
                    tools.run("docker", &["unpause", node_name], limit).await?;
                    in_force.paused.remove(node_name);
                    "docker unpause".to_string()
                }
            }
            NodeFault::Partition { cut: Cut::Drop } => {
                if in_force.disconnected.contains_key(node_name) {
                    return Err(ProviderError::Fault(FaultError::Unsupported(format!(
                        "node {node_name} is already cut off"
                    ))));
                }
                let before = node::address(tools, limit, node_name, network).await?;
                tools
                    .run(
                        "docker",
                        &["network", "disconnect", network, node_name],
                        limit,
                    )
                    .await?;
                in_force
                    .disconnected
                    .insert(node_name.to_string(), before.clone());
                format!("docker network disconnect {network} (was {})", before.ipv4)
            }
            NodeFault::Partition { cut } => {
                return Err(self.unsupported(
                    format!(
                        "cut node {node_name} off with {}",
                        format!("{cut:?}").to_lowercase()
                    ),
                    "a node partition on kind disconnects it from the Docker network (drop); hanging cuts need sim",
                ));
            }
            NodeFault::Repair => match in_force.disconnected.remove(node_name) {
                Some(before) => {
                    if let Err(e) = node::reconnect(tools, limit, node_name, network, &before).await
                    {
                        in_force.disconnected.insert(node_name.to_string(), before);
                        return Err(e.into());
                    }
                    format!("docker network connect {network}")
                }
                None => "nothing was cut".to_string(),
            },
        };
        drop(in_force);
        self.faults
            .record(fault.verb(), &format!("node {node_name}"), &detail);
        Ok(())
    }

    async fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        message: &str,
    ) -> Result<u64, ProviderError> {
        self.rejects
            .reject(matches, code, message, &self.faults)
            .await
    }

    async fn allow(&self, id: u64) -> Result<(), ProviderError> {
        self.rejects.allow(id, &self.faults).await
    }

    async fn keep_artifacts(&self, dir: &Path) {
        let cluster = &self.cluster;
        let text = format!(
            "kind cluster: {}\nscenario prefix: {}\nkubeconfig: {}\naudit log: {}\nThe cluster's logs are exported when the run ends, if it failed (`kind export logs`).\n",
            cluster.name(),
            self.prefix,
            cluster.kubeconfig().display(),
            cluster
                .audit_log()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "none".into()),
        );
        if let Err(e) = crate::report::write(&dir.join("kind.txt"), &text) {
            eprintln!("opconform: {}", crate::error_chain(&e));
        }
    }

    async fn teardown(self: Box<Self>) {
        self.undo_in_force().await;
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        delete_labelled(&self.cluster.client(), SCENARIO_LABEL, &self.prefix).await;
    }
}

/// `docker` arguments that stop (SIGSTOP) or continue (SIGCONT) every process of the
/// kubelet unit of kind node `node_name`.
fn kubelet_signal(node_name: &str, stop: bool) -> [&str; 6] {
    let signal = if stop {
        "--signal=SIGSTOP"
    } else {
        "--signal=SIGCONT"
    };
    ["exec", node_name, "systemctl", "kill", signal, "kubelet"]
}
