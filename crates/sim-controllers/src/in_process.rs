//! The controllers against the simulated API server of the same process: how the
//! simulated cluster starts them, and the controllers' own tests.

use sim_apiserver::ServerHandle;

use crate::{
    ApiAccess, CONTROLLER_MANAGER_USER, ControllerConfig, Controllers, ControllersError,
    SCHEDULER_USER,
};

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
