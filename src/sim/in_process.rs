//! How the simulator's nodes and controllers reach the simulated API server of the same
//! process. They are clients of any API server; these adapters give them the simulated
//! one, with the two in-process hooks only it has: the kubelets hand it their container
//! logs, and it attributes each request to the pod whose IP sent it.

use std::net::{IpAddr, SocketAddr};

use async_trait::async_trait;

use super::apiserver::ServerHandle;
use super::apiserver::audit::PodRef;
use super::apiserver::state::LogSource;
use super::controllers::{
    ApiAccess, CONTROLLER_MANAGER_USER, ControllerConfig, Controllers, ControllersError,
    SCHEDULER_USER,
};
use super::kubelet::upstream::{Upstream, UpstreamError};

/// The simulated API server as the kubelets' [`Upstream`].
#[derive(Clone)]
pub struct SimulatedUpstream(pub ServerHandle);

#[async_trait]
impl Upstream for SimulatedUpstream {
    fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    fn ca_pem(&self) -> String {
        self.0.ca_pem().to_string()
    }

    fn cluster_name(&self) -> String {
        self.0.state().config.name.clone()
    }

    async fn node_client(&self, server: &str, node: &str) -> Result<kube::Client, UpstreamError> {
        self.0
            .user_client(
                server,
                &format!("system:node:{node}"),
                &["system:nodes", "system:masters"],
            )
            .await
            .map_err(|e| UpstreamError::Client(Box::new(e)))
    }

    async fn service_account_token(
        &self,
        _client: &kube::Client,
        pod: &PodRef,
        account: &str,
    ) -> Result<String, UpstreamError> {
        self.0
            .service_account_token(&pod.namespace, account)
            .map_err(|e| UpstreamError::Token {
                namespace: pod.namespace.clone(),
                name: account.to_string(),
                pod: pod.name.clone(),
                source: Box::new(e),
            })
    }

    fn add_log_source(&self, source: LogSource) {
        self.0.state().add_log_source(source);
    }

    fn attribute(&self, ip: IpAddr, pod: Option<PodRef>) {
        self.0.state().audit.set_pod_ip(ip, pod);
    }
}

/// The simulated API server as the controllers reach it: kube-controller-manager and
/// kube-scheduler, each in `system:masters`.
pub fn controller_access(server: &ServerHandle) -> ApiAccess {
    ApiAccess {
        url: server.url(),
        ca_pem: server.ca_pem().to_string(),
        controller_manager_token: server.user_token(CONTROLLER_MANAGER_USER, &["system:masters"]),
        scheduler_token: server.user_token(SCHEDULER_USER, &["system:masters"]),
    }
}

/// Starts every controller (and the scheduler, unless `config` leaves it out) against the
/// simulated API server. The certificate signers sign with the server's own CA unless
/// `config` names another, as kube-controller-manager is given the cluster CA.
///
/// # Errors
/// When a client cannot be built.
pub async fn start_controllers(
    server: &ServerHandle,
    mut config: ControllerConfig,
) -> Result<Controllers, ControllersError> {
    if config.cluster_signing.is_none() {
        config.cluster_signing = server.signing_ca().cloned();
    }
    Controllers::start_against(controller_access(server), config).await
}
