//! The Node this kubelet stands for: registration (the Node object and its status) and
//! heartbeats (the `kube-node-lease` Lease and the Ready condition's lastHeartbeatTime).

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::config::KubeletConfig;

/// Errors registering a node or renewing its heartbeat.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// An API request failed.
    #[error("{what} failed")]
    Api {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// An API request got no answer in time (a partition or a held API server).
    #[error("{what} timed out")]
    Timeout {
        /// What was being done.
        what: &'static str,
    },
    /// An object could not be built.
    #[error("cannot build the {0} object")]
    Build(&'static str, #[source] serde_json::Error),
}

/// The resources every simulated node offers.
pub const CAPACITY: &[(&str, &str)] = &[
    ("cpu", "8"),
    ("memory", "32Gi"),
    ("pods", "110"),
    ("ephemeral-storage", "100Gi"),
    ("hugepages-2Mi", "0"),
];

/// The kubelet version a simulated node reports.
pub const KUBELET_VERSION: &str = "v1.34.0";

/// Namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn resources() -> Value {
    Value::Object(
        CAPACITY
            .iter()
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect(),
    )
}

async fn timed<T>(
    what: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, NodeError> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r.map_err(|source| NodeError::Api { what, source }),
        Err(_) => Err(NodeError::Timeout { what }),
    }
}

/// The node's conditions; Ready=True unless told otherwise.
fn conditions(previous: Option<&Value>, heartbeat: &str) -> Value {
    let wanted = [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        (
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
    ];
    let list: Vec<Value> = wanted
        .iter()
        .map(|(kind, status, reason, message)| {
            let old = previous
                .and_then(Value::as_array)
                .and_then(|l| l.iter().find(|c| c["type"] == *kind));
            let transition = match old {
                Some(c) if c["status"] == *status => c["lastTransitionTime"].clone(),
                _ => json!(heartbeat),
            };
            json!({"type": kind, "status": status, "reason": reason, "message": message,
                   "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition})
        })
        .collect();
    Value::Array(list)
}

/// The status a healthy node reports.
fn status(config: &KubeletConfig, previous: Option<&Value>) -> Value {
    let heartbeat = now();
    json!({
        "capacity": resources(),
        "allocatable": resources(),
        "conditions": conditions(previous, &heartbeat),
        "addresses": [
            {"type": "InternalIP", "address": config.node_ip.to_string()},
            {"type": "Hostname", "address": config.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": config.kubelet_port}},
        "nodeInfo": {
            "machineID": format!("opconform-{}", config.node_name),
            "systemUUID": format!("opconform-{}", config.node_name),
            "bootID": uuid::Uuid::new_v4().to_string(),
            "kernelVersion": "opconform",
            "osImage": "opconform simulated node",
            "containerRuntimeVersion": "opconform://0.1.0",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
        },
    })
}

/// Keeps one node registered and heartbeating.
pub struct NodeAgent {
    config: KubeletConfig,
    nodes: Api<Node>,
    leases: Api<Lease>,
    lease: Option<Lease>,
    node_uid: Option<String>,
    boot_id: Option<Value>,
}

impl NodeAgent {
    /// An agent using `client` (which goes through the node's proxy).
    pub fn new(config: KubeletConfig, client: kube::Client) -> Self {
        Self {
            config,
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client, LEASE_NAMESPACE),
            lease: None,
            node_uid: None,
            boot_id: None,
        }
    }

    fn limit(&self) -> Duration {
        self.config.heartbeat_interval.max(Duration::from_secs(2))
    }

    /// Creates the Node (or adopts an existing one with this name), posts its Ready
    /// status and takes its Lease.
    ///
    /// # Errors
    /// When the API server refuses or does not answer.
    pub async fn register(&mut self) -> Result<(), NodeError> {
        let mut labels = serde_json::Map::new();
        labels.insert(
            "kubernetes.io/hostname".into(),
            json!(self.config.node_name),
        );
        labels.insert("kubernetes.io/os".into(), json!("linux"));
        labels.insert("kubernetes.io/arch".into(), json!("amd64"));
        labels.insert("beta.kubernetes.io/os".into(), json!("linux"));
        labels.insert("beta.kubernetes.io/arch".into(), json!("amd64"));
        for (k, v) in &self.config.labels {
            labels.insert(k.clone(), json!(v));
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.config.node_name, "labels": labels,
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": {},
        }))
        .map_err(|e| NodeError::Build("node", e))?;
        let limit = self.limit();
        let created = timed(
            "creating the node",
            limit,
            self.nodes.create(&PostParams::default(), &node),
        )
        .await;
        let node = match created {
            Ok(n) => n,
            Err(NodeError::Api {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 409 => {
                // Re-registration: keep the object, make sure our labels are on it.
                let patch = json!({"metadata": {"labels": labels}});
                timed(
                    "labelling the existing node",
                    limit,
                    self.nodes.patch(
                        &self.config.node_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    ),
                )
                .await?
            }
            Err(e) => return Err(e),
        };
        self.node_uid = node.metadata.uid.clone();
        let status = status(&self.config, None);
        self.boot_id = Some(status["nodeInfo"]["bootID"].clone());
        timed(
            "posting the node status",
            limit,
            self.nodes.patch_status(
                &self.config.node_name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            ),
        )
        .await?;
        self.renew_lease().await
    }

    /// One heartbeat: renews the Lease and refreshes the node status.
    ///
    /// # Errors
    /// When either write fails or times out; the next heartbeat tries again.
    /// A Node that was deleted is registered again, as the real kubelet does.
    pub async fn heartbeat(&mut self) -> Result<(), NodeError> {
        let status = self.update_status().await;
        if let Err(NodeError::Api {
            source: kube::Error::Api(s),
            ..
        }) = &status
            && s.code == 404
        {
            self.lease = None;
            return self.register().await;
        }
        let lease = self.renew_lease().await;
        status.and(lease)
    }

    async fn update_status(&mut self) -> Result<(), NodeError> {
        let limit = self.limit();
        let current = timed(
            "reading the node",
            limit,
            self.nodes.get(&self.config.node_name),
        )
        .await?;
        let current = serde_json::to_value(&current).map_err(|e| NodeError::Build("node", e))?;
        let mut status = status(&self.config, current["status"].get("conditions"));
        if let Some(boot) = &self.boot_id {
            status["nodeInfo"]["bootID"] = boot.clone();
        }
        timed(
            "updating the node status",
            limit,
            self.nodes.patch_status(
                &self.config.node_name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            ),
        )
        .await?;
        Ok(())
    }

    fn new_lease(&self) -> Result<Lease, NodeError> {
        let owner = self.node_uid.as_ref().map(|uid| {
            json!([{"apiVersion": "v1", "kind": "Node", "name": self.config.node_name, "uid": uid}])
        });
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.config.node_name, "namespace": LEASE_NAMESPACE},
            "spec": {"holderIdentity": self.config.node_name,
                     "leaseDurationSeconds": self.config.lease_duration_seconds,
                     "renewTime": micro_now()},
        });
        if let Some(owner) = owner {
            lease["metadata"]["ownerReferences"] = owner;
        }
        serde_json::from_value(lease).map_err(|e| NodeError::Build("lease", e))
    }

    /// Renews the node Lease as the kubelet does: an update of the last known version,
    /// re-reading (or creating) it when that fails.
    async fn renew_lease(&mut self) -> Result<(), NodeError> {
        let limit = self.limit();
        let name = self.config.node_name.clone();
        let mut lease = match self.lease.take() {
            Some(l) => l,
            None => match timed("reading the node lease", limit, self.leases.get_opt(&name)).await?
            {
                Some(l) => l,
                None => {
                    let fresh = self.new_lease()?;
                    let created = timed(
                        "creating the node lease",
                        limit,
                        self.leases.create(&PostParams::default(), &fresh),
                    )
                    .await?;
                    self.lease = Some(created);
                    return Ok(());
                }
            },
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        let patch: Value = json!({"holderIdentity": name,
            "leaseDurationSeconds": self.config.lease_duration_seconds,
            "renewTime": micro_now()});
        let patched: k8s_openapi::api::coordination::v1::LeaseSpec =
            serde_json::from_value(patch).map_err(|e| NodeError::Build("lease", e))?;
        spec.holder_identity = patched.holder_identity;
        spec.lease_duration_seconds = patched.lease_duration_seconds;
        spec.renew_time = patched.renew_time;
        lease.spec = Some(spec);
        match timed(
            "renewing the node lease",
            limit,
            self.leases.replace(&name, &PostParams::default(), &lease),
        )
        .await
        {
            Ok(updated) => {
                self.lease = Some(updated);
                Ok(())
            }
            // Forget the cached version; the next heartbeat reads it again.
            Err(e) => Err(e),
        }
    }
}

fn micro_now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_keep_their_transition_time_while_unchanged() {
        let first = conditions(None, "2025-01-01T00:00:00Z");
        let ready = |v: &Value| {
            v.as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .unwrap()
                .clone()
        };
        assert_eq!(ready(&first)["status"], "True");
        let second = conditions(Some(&first), "2025-01-01T00:00:10Z");
        assert_eq!(ready(&second)["lastTransitionTime"], "2025-01-01T00:00:00Z");
        assert_eq!(ready(&second)["lastHeartbeatTime"], "2025-01-01T00:00:10Z");
        let unknown = json!([{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2025-01-01T00:00:20Z"}]);
        let third = conditions(Some(&unknown), "2025-01-01T00:00:30Z");
        assert_eq!(ready(&third)["lastTransitionTime"], "2025-01-01T00:00:30Z");
    }
}
