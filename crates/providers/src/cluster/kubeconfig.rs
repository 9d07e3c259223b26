//! The kubeconfig provider: any running cluster, reached through `KUBECONFIG` (and
//! `OPCONFORM_CONTEXT`), shared by scenarios. Each scenario gets namespaces of its own
//! (`opconform-xxxxxx-…`) and cluster-scoped names with its own suffix, all labelled so that
//! teardown removes exactly what the scenario made.
//!
//! A run leaves nothing on the cluster: each scenario's teardown deletes what carries its
//! label, and the run's end ([`finish_run`]) deletes the CustomResourceDefinitions the run
//! applied that the cluster did not have when the run began (those it had, it keeps).
//!
//! It needs nothing but a kubeconfig: the operator image must already be pullable there
//! (`OPCONFORM_IMAGE`, default `memcached-operator:dev`). It has no access to nodes, so
//! crash, hold and partition are refused; the audit of writes is followed when
//! `OPCONFORM_AUDIT_LOG` names the API server's audit log file (kube-apiserver's JSON
//! audit log, or the one `opconform sim --audit-log` writes).

use async_trait::async_trait;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use std::path::{Path, PathBuf};

use super::audit_log::{any_format_lines, followed_or_warned};
use super::shared::{SCENARIO_LABEL, client_from_kubeconfig, delete_labelled, shared_placement};
use super::{DEFAULT_OPERATOR_IMAGE, Placement, Provider, ProviderError, random_name};
use crate::audit::AuditFeed;
use crate::fault::{FaultLog, NodeFault, PodFault, RequestMatch};

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
        RUN.get_or_init(|| RunState {
            client: client.clone(),
            crds_before: tokio::sync::OnceCell::new(),
        })
        .crds_before
        .get_or_init(|| crd_names(client.clone()))
        .await;
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

/// What the run keeps for its end: a client, and the CustomResourceDefinitions the cluster
/// had before the run's first scenario applied anything.
struct RunState {
    client: Client,
    crds_before: tokio::sync::OnceCell<Option<std::collections::BTreeSet<String>>>,
}

static RUN: std::sync::OnceLock<RunState> = std::sync::OnceLock::new();

/// The names of the cluster's CustomResourceDefinitions; `None` (reported) when they cannot
/// be listed, and the run then deletes none.
async fn crd_names(client: Client) -> Option<std::collections::BTreeSet<String>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    match api.list_metadata(&ListParams::default()).await {
        Ok(list) => Some(
            list.items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .collect(),
        ),
        Err(e) => {
            eprintln!(
                "opconform: listing the cluster's CustomResourceDefinitions failed ({e}): the \
                 run will not delete those it applies"
            );
            None
        }
    }
}

/// Ends a run on the kubeconfig's cluster: deletes the CustomResourceDefinitions the run
/// applied that the cluster did not have when it began (their objects with them), saying
/// which. Errors are reported: the run's verdict stands.
pub async fn finish_run() {
    let Some(run) = RUN.get() else { return };
    let Some(Some(before)) = run.crds_before.get() else {
        return;
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(run.client.clone());
    for name in crate::deploy::crds_applied().difference(before) {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => eprintln!(
                "opconform: deleted the CustomResourceDefinition {name}, which the run applied"
            ),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => eprintln!(
                "opconform: deleting the CustomResourceDefinition {name}, which the run \
                 applied, failed: {e}"
            ),
        }
    }
}

fn no_node_access(what: String) -> ProviderError {
    ProviderError::Unsupported {
        provider: "kubeconfig",
        what,
        hint: "it has no access to the nodes; run the scenario on sim or kind",
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
