//! The cucumber step library: the [`World`] of a scenario and the steps grouped by domain.
//! Users write new features with these steps; `tests/e2e.rs` only runs them.

pub mod cluster;

use std::path::Path;

use kube::Client;

use crate::sim::apiserver::{ApiServer, ApiServerConfig, ApiServerError};

/// Errors of the step library.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A step needs a cluster and the scenario has none yet.
    #[error("no cluster: start the scenario with \"Given a simulated cluster\"")]
    NoCluster,
    /// The simulated cluster could not be started.
    #[error("cannot start the simulated cluster")]
    Start(#[source] ApiServerError),
}

/// The state of one scenario.
#[derive(Default, cucumber::World)]
#[world(init = Self::new)]
pub struct World {
    cluster: Option<(ApiServer, Client)>,
    /// Values remembered between steps (resource versions, last errors), by name.
    pub remembered: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("cluster", &self.cluster.as_ref().map(|(s, _)| s.url()))
            .field("remembered", &self.remembered)
            .finish()
    }
}

impl World {
    async fn new() -> Self {
        Self::default()
    }

    /// Starts this scenario's own simulated cluster.
    ///
    /// # Errors
    /// When it cannot start.
    pub async fn start_cluster(&mut self) -> Result<(), StepError> {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .map_err(StepError::Start)?;
        let client = server.admin_client().await.map_err(StepError::Start)?;
        self.cluster = Some((server, client));
        Ok(())
    }

    /// The admin client of the scenario's cluster.
    ///
    /// # Errors
    /// [`StepError::NoCluster`] before a cluster was started.
    pub fn client(&self) -> Result<Client, StepError> {
        self.cluster
            .as_ref()
            .map(|(_, c)| c.clone())
            .ok_or(StepError::NoCluster)
    }
}

/// Runs the features under `features` with the step library: fails on skipped (undefined)
/// steps, accepts cucumber's command line (`-- --tags @lease`, `--name …`).
pub async fn run(features: impl AsRef<Path>) {
    use cucumber::World as _;
    World::cucumber()
        .fail_on_skipped()
        .run_and_exit(features.as_ref().to_path_buf())
        .await;
}
