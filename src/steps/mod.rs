//! The cucumber step library: the [`World`] of a scenario and the steps grouped by domain
//! (cluster, operator, leadership, faults, history). Users write new features with these
//! steps; `tests/e2e.rs` only runs them.

pub mod cluster;
pub mod faults;
pub mod history;
pub mod leadership;
pub mod operator;

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use kube::Client;

use crate::record::History;
use crate::record::recorder::{Feeds, Recorder, RecorderConfig};
use crate::sim::cluster::{SimCluster, SimClusterConfig};
use crate::sim::kubelet::ImageMap;

/// Errors of the step library.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A step needs a cluster and the scenario has none yet.
    #[error("no cluster: start the scenario with \"Given a simulated cluster\"")]
    NoCluster,
    /// The simulated cluster could not be started.
    #[error("cannot start the simulated cluster")]
    Start(#[source] Box<crate::sim::cluster::ClusterError>),
    /// The client could not be built.
    #[error("cannot build a client for the cluster")]
    Client(#[source] crate::sim::apiserver::ApiServerError),
    /// OPCONFORM_PROVIDER names no provider.
    #[error(
        "OPCONFORM_PROVIDER={0:?} is not a provider: expected sim (the default), kubeconfig or kind"
    )]
    UnknownProvider(String),
    /// The provider exists but cannot run features yet.
    #[error("OPCONFORM_PROVIDER={0}: this provider cannot run the features yet; use sim")]
    ProviderUnavailable(String),
    /// The operator binary could not be found or built.
    #[error(transparent)]
    Operator(#[from] operator::OperatorError),
}

/// A duration as features write it: `500ms`, `4s`, `2m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, cucumber::Parameter)]
#[param(name = "duration", regex = r"\d+(?:ms|s|m)")]
pub struct Dur(pub Duration);

impl FromStr for Dur {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (number, unit) = s
            .find(|c: char| !c.is_ascii_digit())
            .map(|i| s.split_at(i))
            .ok_or_else(|| format!("duration {s:?} needs a unit: ms, s or m"))?;
        let n: u64 = number
            .parse()
            .map_err(|_| format!("duration {s:?} must start with a whole number"))?;
        match unit {
            "ms" => Ok(Self(Duration::from_millis(n))),
            "s" => Ok(Self(Duration::from_secs(n))),
            "m" => Ok(Self(Duration::from_secs(n * 60))),
            _ => Err(format!(
                "duration {s:?}: unknown unit {unit:?}, expected ms, s or m"
            )),
        }
    }
}

/// The error and its causes on one line.
pub use crate::sim::error_chain as chain;

/// The state of one scenario.
#[derive(Default, cucumber::World)]
#[world(init = Self::new)]
pub struct World {
    /// The scenario's name (set before it runs).
    pub scenario: String,
    cluster: Option<SimCluster>,
    client: Option<Client>,
    recorder: Option<Recorder>,
    /// How the operator was deployed, once it was.
    pub operator: Option<operator::OperatorSetup>,
    /// The configured lease duration (lease mode).
    pub lease_duration: Option<Duration>,
    /// The replica last seen leading.
    pub leader: Option<String>,
    /// Values remembered between steps, by name.
    pub remembered: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("scenario", &self.scenario)
            .field("cluster", &self.cluster.as_ref().map(|c| c.server().url()))
            .field("leader", &self.leader)
            .finish()
    }
}

/// The provider named by `OPCONFORM_PROVIDER` (default `sim`).
///
/// # Errors
/// An unknown name, or a provider that cannot run features yet.
pub fn provider() -> Result<&'static str, StepError> {
    match std::env::var("OPCONFORM_PROVIDER").as_deref() {
        Err(_) | Ok("") | Ok("sim") => Ok("sim"),
        Ok(p @ ("kubeconfig" | "kind")) => Err(StepError::ProviderUnavailable(p.to_string())),
        Ok(other) => Err(StepError::UnknownProvider(other.to_string())),
    }
}

impl World {
    async fn new() -> Self {
        Self::default()
    }

    /// Starts this scenario's own simulated cluster, with the operator image mapped to
    /// the built operator binary.
    ///
    /// # Errors
    /// When it cannot start.
    pub async fn start_cluster(&mut self) -> Result<(), StepError> {
        provider()?;
        let mut images = ImageMap::new();
        images.insert(operator::OPERATOR_IMAGE, operator::operator_binary()?);
        let config = SimClusterConfig {
            images,
            ..SimClusterConfig::fast()
        };
        let cluster = SimCluster::start(config)
            .await
            .map_err(|e| StepError::Start(Box::new(e)))?;
        let client = cluster
            .server()
            .admin_client()
            .await
            .map_err(StepError::Client)?;
        self.client = Some(client);
        self.cluster = Some(cluster);
        Ok(())
    }

    /// The admin client of the scenario's cluster.
    ///
    /// # Errors
    /// [`StepError::NoCluster`] before a cluster was started.
    pub fn client(&self) -> Result<Client, StepError> {
        self.client.clone().ok_or(StepError::NoCluster)
    }

    /// The scenario's simulated cluster.
    ///
    /// # Errors
    /// [`StepError::NoCluster`] before a cluster was started.
    pub fn cluster(&self) -> Result<&SimCluster, StepError> {
        self.cluster.as_ref().ok_or(StepError::NoCluster)
    }

    /// Starts recording the operator's namespace (once).
    pub fn start_recorder(&mut self) {
        if self.recorder.is_some() {
            return;
        }
        let (Some(cluster), Some(client)) = (&self.cluster, &self.client) else {
            return;
        };
        let state = cluster.server().state();
        self.recorder = Some(Recorder::start(
            client.clone(),
            RecorderConfig {
                namespace: operator::OPERATOR_NAMESPACE.into(),
                lock_name: operator::LOCK_NAME.into(),
                pod_selector: "app.kubernetes.io/name=memcached-operator".into(),
                metrics_port: 8080,
                scrape_interval: Duration::from_millis(100),
            },
            Feeds {
                audit: Some(state.audit.subscribe()),
                faults: Some(state.faults.clone()),
            },
        ));
    }

    /// Adds a note to the history.
    pub fn note(&self, text: &str) {
        if let Some(r) = &self.recorder {
            r.note(text);
        }
    }

    /// The history so far (empty before the operator is deployed).
    pub fn history(&self) -> History {
        self.recorder
            .as_ref()
            .map(Recorder::snapshot)
            .unwrap_or_default()
    }

    /// Where this scenario's reports go: `target/opconform/<scenario>/`.
    pub fn report_dir(&self) -> PathBuf {
        let slug: String = self
            .scenario
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        operator::repository_root()
            .join("target/opconform")
            .join(if slug.is_empty() {
                "scenario".into()
            } else {
                slug
            })
    }

    /// Writes the scenario's history and timeline, then stops everything it started.
    pub async fn finish(&mut self, failed: bool) {
        let history = match self.recorder.take() {
            Some(r) => Some(r.stop().await),
            None => None,
        };
        if let Some(history) = history.filter(|h| !h.entries().is_empty()) {
            let dir = self.report_dir();
            let verdicts = vec![
                crate::check::single_leader(&history),
                crate::check::single_writer(&history),
                crate::check::transitions_never_decrease(&history),
            ];
            let failovers: Vec<_> = ["crash", "delete", "hold", "partition"]
                .iter()
                .filter_map(|v| crate::check::failover(&history, v))
                .collect();
            let html =
                crate::report::timeline_html(&self.scenario, &history, &verdicts, &failovers);
            let _ = crate::report::write(&dir.join("timeline.html"), &html);
            let _ = crate::report::write(&dir.join("history.jsonl"), &history.to_json_lines());
            if failed {
                eprintln!(
                    "opconform: history and timeline of the failed scenario in {}",
                    dir.display()
                );
            }
        }
        if let Some(cluster) = self.cluster.take() {
            cluster.shutdown().await;
        }
    }
}

/// Runs the features under `features` with the step library: fails on skipped (undefined)
/// steps, accepts cucumber's command line (`-- --tags @lease`, `--name …`), keeps each
/// scenario's history and timeline in `target/opconform/<scenario>/`, and always cleans up.
pub async fn run(features: impl AsRef<std::path::Path>) {
    use cucumber::World as _;
    World::cucumber()
        .max_concurrent_scenarios(2)
        .before(|_feature, _rule, scenario, world| {
            Box::pin(async move {
                world.scenario = scenario.name.clone();
            })
        })
        .after(|_feature, _rule, _scenario, event, world| {
            Box::pin(async move {
                let failed = matches!(event, cucumber::event::ScenarioFinished::StepFailed(..));
                if let Some(world) = world {
                    world.finish(failed).await;
                }
            })
        })
        .fail_on_skipped()
        .run_and_exit(features.as_ref().to_path_buf())
        .await;
}
