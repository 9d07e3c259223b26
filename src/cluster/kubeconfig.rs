//! The kubeconfig provider: any running cluster, reached through `KUBECONFIG` (and
//! `OPCONFORM_CONTEXT`), shared by scenarios. Each scenario gets namespaces of its own
//! (`opconform-xxxxxx-…`) and cluster-scoped names with its own suffix, all labelled so that
//! teardown removes exactly what the scenario made.
//!
//! It needs nothing but a kubeconfig: the operator image must already be pullable there
//! (`OPCONFORM_IMAGE`, default `memcached-operator:dev`). It has no access to nodes, so
//! crash, hold and partition are refused; the audit of writes is followed when
//! `OPCONFORM_AUDIT_LOG` names the API server's audit log file (kube-apiserver's JSON
//! audit log, or the one `opconform sim --audit-log` writes).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use std::path::{Path, PathBuf};

use super::audit::{any_format_lines, followed_or_warned};
use super::{DEFAULT_OPERATOR_IMAGE, Placement, Provider, ProviderError, random_name};
use crate::audit::AuditFeed;
use crate::fault::{FaultLog, NodeFault, PodFault, RequestMatch};

/// The label every object a scenario creates on a shared cluster carries.
pub const SCENARIO_LABEL: &str = "opconform.io/scenario";

/// Feature namespaces the operator watches on a shared cluster (mapped by
/// [`Provider::namespace`]); a feature that creates objects elsewhere is not reconciled.
pub const WORKLOAD_NAMESPACES: [&str; 3] = ["default", "team-a", "team-b"];

/// Settings of the kubeconfig provider, read from the environment.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigOptions {
    /// The kubeconfig file; `None` reads `KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (`OPCONFORM_CONTEXT`), else the current one.
    pub context: Option<String>,
    /// The operator image (`OPCONFORM_IMAGE`).
    pub image: Option<String>,
    /// The API server's audit log, followed for the single-writer check
    /// (`OPCONFORM_AUDIT_LOG`).
    pub audit_log: Option<PathBuf>,
}

impl KubeconfigOptions {
    /// Reads `OPCONFORM_CONTEXT`, `OPCONFORM_IMAGE` and `OPCONFORM_AUDIT_LOG`.
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Self {
            kubeconfig: None,
            context: var("OPCONFORM_CONTEXT"),
            image: var("OPCONFORM_IMAGE"),
            audit_log: var("OPCONFORM_AUDIT_LOG").map(PathBuf::from),
        }
    }
}

/// A scenario's share of a running cluster.
pub struct KubeconfigProvider {
    client: Client,
    prefix: String,
    image: String,
    audit_log: Option<PathBuf>,
    faults: FaultLog,
}

/// A client for the kubeconfig at `path` (else the one `KUBECONFIG` names, else
/// `~/.kube/config`), in `context` (else its current context).
///
/// # Errors
/// When the kubeconfig cannot be read or names no usable context.
pub async fn client_from_kubeconfig(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<Client, ProviderError> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let client_error = |e: kube::config::KubeconfigError| ProviderError::Client(Box::new(e));
    let config = match path {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(client_error)?;
            kube::Config::from_custom_kubeconfig(file, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .map_err(client_error)?;
    Client::try_from(without_retries(config)).map_err(|e| ProviderError::Client(Box::new(e)))
}

/// `config` without kube's default retries of 429, 503 and 504: the harness observes, so
/// it takes every answer as it comes. Retried, the 503 with which the API server's pod
/// proxy says that nothing listens on a replica's port (it just exited) turned into a
/// scrape that timed out, and that replica's exit was never recorded.
pub fn without_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

impl KubeconfigProvider {
    /// Connects with `options`, checking that the cluster answers.
    ///
    /// # Errors
    /// When the kubeconfig is unusable, the cluster does not answer, or the audit log
    /// cannot be opened.
    pub async fn connect(options: KubeconfigOptions) -> Result<Self, ProviderError> {
        let client =
            client_from_kubeconfig(options.kubeconfig.as_deref(), options.context.as_deref())
                .await?;
        client
            .apiserver_version()
            .await
            .map_err(|source| ProviderError::Api {
                action: "asking the cluster in the kubeconfig for its version".into(),
                source,
            })?;
        Ok(Self::with_client(client, options))
    }

    /// A provider over `client` (no check that the cluster answers).
    pub fn with_client(client: Client, options: KubeconfigOptions) -> Self {
        Self {
            client,
            prefix: random_name("opconform"),
            image: options
                .image
                .unwrap_or_else(|| DEFAULT_OPERATOR_IMAGE.to_string()),
            audit_log: options.audit_log,
            faults: FaultLog::new(),
        }
    }

    /// The scenario's name prefix (`opconform-xxxxxx`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

fn no_node_access(what: String) -> ProviderError {
    ProviderError::Unsupported {
        provider: "kubeconfig",
        what,
        hint: "it has no access to the nodes; run the scenario on sim or kind",
    }
}

/// Deletes every cluster-scoped `K` (namespaces delete what is in them) carrying
/// `label=value`; `what` names them in the message of an error, which is reported, not
/// returned: teardown goes on.
pub async fn delete_all_labelled<K>(client: &Client, label: &str, value: &str, what: &str)
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let selector = ListParams::default().labels(&format!("{label}={value}"));
    let api: Api<K> = Api::all(client.clone());
    if let Err(e) = api
        .delete_collection(&DeleteParams::background(), &selector)
        .await
    {
        eprintln!("opconform: deleting the {what} of {value} failed: {e}");
    }
}

/// Deletes what carries `label=value`: namespaces (and so everything in them) one by one,
/// as kube-apiserver has no delete-collection for them (it answers 405), then the
/// cluster-scoped RBAC objects. Errors are reported, not returned: teardown goes on.
pub async fn delete_labelled(client: &Client, label: &str, value: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let selector = ListParams::default().labels(&format!("{label}={value}"));
    match namespaces.list(&selector).await {
        Ok(listed) => {
            for namespace in listed {
                let name = kube::ResourceExt::name_any(&namespace);
                if let Err(e) = namespaces.delete(&name, &DeleteParams::background()).await {
                    eprintln!("opconform: deleting namespace {name} failed: {e}");
                }
            }
        }
        Err(e) => eprintln!("opconform: listing the namespaces of {value} failed: {e}"),
    }
    delete_all_labelled::<ClusterRole>(client, label, value, "ClusterRoles").await;
    delete_all_labelled::<ClusterRoleBinding>(client, label, value, "ClusterRoleBindings").await;
}

/// The placement of a scenario on a shared cluster.
pub fn shared_placement(prefix: &str, image: &str) -> Placement {
    Placement {
        namespace: format!("{prefix}-system"),
        suffix: format!("-{prefix}"),
        image: image.to_string(),
        watch_namespaces: WORKLOAD_NAMESPACES
            .iter()
            .map(|n| format!("{prefix}-{n}"))
            .collect(),
        labels: [(SCENARIO_LABEL.to_string(), prefix.to_string())].into(),
    }
}

#[async_trait]
impl Provider for KubeconfigProvider {
    fn name(&self) -> &'static str {
        "kubeconfig"
    }

    fn client(&self) -> Client {
        self.client.clone()
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
        let path = self.audit_log.as_ref()?;
        followed_or_warned(path, any_format_lines())
    }

    async fn pod_fault(
        &self,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), ProviderError> {
        let what = format!("{} pod {namespace}/{pod}", fault.verb());
        let sim_only = |hint| ProviderError::Unsupported {
            provider: "kubeconfig",
            what: what.clone(),
            hint,
        };
        match fault {
            PodFault::Evict { .. } => Err(sim_only(
                "a kubelet evicts under real node pressure only, never a chosen pod on request; run the scenario on sim or local (tag it @kubelet-faults)",
            )),
            PodFault::Delay { .. } | PodFault::Skew { .. } => Err(sim_only(
                "only the simulator can slow one pod's API traffic or skew its clock; run the scenario on sim or local (tag it @kubelet-faults)",
            )),
            _ => Err(no_node_access(what)),
        }
    }

    async fn node_fault(&self, node: &str, fault: &NodeFault) -> Result<(), ProviderError> {
        Err(no_node_access(format!("{} node {node}", fault.verb())))
    }

    async fn reject(
        &self,
        _matches: RequestMatch,
        code: u16,
        _message: &str,
    ) -> Result<u64, ProviderError> {
        Err(ProviderError::Unsupported {
            provider: "kubeconfig",
            what: format!("make the API server reject requests with {code}"),
            hint: "run the scenario on sim or kind",
        })
    }

    async fn allow(&self, id: u64) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported {
            provider: "kubeconfig",
            what: format!("remove reject rule {id}"),
            hint: "it sets no reject rules",
        })
    }

    async fn keep_artifacts(&self, _dir: &Path) {}

    async fn teardown(self: Box<Self>) {
        delete_labelled(&self.client, SCENARIO_LABEL, &self.prefix).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_placement_prefixes_namespaces_and_suffixes_cluster_names() {
        let p = shared_placement("opconform-abc123", "registry/op:1");
        assert_eq!(p.namespace, "opconform-abc123-system");
        assert_eq!(p.suffix, "-opconform-abc123");
        assert_eq!(p.image, "registry/op:1");
        assert_eq!(
            p.watch_namespaces,
            [
                "opconform-abc123-default",
                "opconform-abc123-team-a",
                "opconform-abc123-team-b"
            ]
        );
    }

    #[tokio::test]
    async fn eviction_delay_and_skew_are_refused_as_faults_only_the_simulator_can_do() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let provider = KubeconfigProvider::with_client(client, KubeconfigOptions::default());
        let evict = PodFault::Evict {
            message: crate::fault::LOW_ON_MEMORY.into(),
        };
        let e = provider
            .pod_fault("ops", "op-1", &evict)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the kubeconfig provider cannot evict pod ops/op-1"),
            "{e}"
        );
        assert!(
            e.contains("run the scenario on sim or local (tag it @kubelet-faults)"),
            "{e}"
        );
        let e = provider
            .pod_fault("ops", "op-1", &PodFault::Skew { seconds: 30 })
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("run the scenario on sim or local (tag it @kubelet-faults)"),
            "{e}"
        );
        let e = provider
            .pod_fault("ops", "op-1", &PodFault::Hold)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("no access to the nodes"), "{e}");
        assert!(provider.faults().events().is_empty());
    }
}
