//! The process: resolve the election plan, serve HTTP, elect, run the controller, handle SIGTERM, map exit codes.
//!
//! [`plan`] is pure (flags + environment → what to run, or a configuration error);
//! [`run`] takes an existing `kube::Client` and a [`Shutdown`], so integration tests
//! drive the whole operator in-process; [`main`] adds logging, signals and exit codes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{Api, Client};

use crate::backoff::ItemBackoff;
use crate::cli::{Args, ElectionMode, LogFormat};
use crate::clock::{Clock, SystemClock};
use crate::controller::{self, Context, KubeCluster, WatchNamespaces};
use crate::events::{KubeEventSink, Recorder};
use crate::http::{Endpoints, Servers};
use crate::leader::for_life::{self, ForLifeConfig, ForLifeElector};
use crate::leader::lease::{self, LeaseConfig, LeaseElector};
use crate::leader::{
    HealthzAdaptor, KubeLock, KubePods, Leadership, WriteGuard, WriteGuardMode, identity,
};
use crate::metrics::Metrics;
use crate::shutdown::{self, Shutdown};

/// Where a pod's service-account namespace is mounted.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// The reporting component of Events and the label value on locks.
pub const COMPONENT: &str = "memcached-operator";
/// client-go healthz adaptor timeout used by controller-runtime.
pub const HEALTHZ_TIMEOUT: Duration = Duration::from_secs(20);
/// How long in-flight reconciles may finish after SIGTERM before the process moves on.
pub const CONTROLLER_GRACE: Duration = Duration::from_secs(20);
/// How long in-flight reconciles may finish after leadership is lost before they are cut.
///
/// A lost leader takes no new work but lets the reconciles already running end, as after
/// SIGTERM: with the write guard on they can no longer write (the guard refuses once
/// leadership is stale), so ending them cleanly is safe; with `--write-guard off` their
/// writes land after the takeover — the split brain the guard exists to prevent.
pub const LOST_GRACE: Duration = Duration::from_secs(5);

/// A bad flag or environment (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Lease timings or identity are invalid.
    #[error("invalid leader election timing")]
    Lease(#[source] lease::ConfigError),
    /// Lease election outside a cluster without a namespace.
    #[error("not running in a cluster: set --leader-election-namespace")]
    NotInCluster,
    /// Leader-for-life in a cluster without POD_NAME.
    #[error("leader-for-life cannot run")]
    ForLife(#[source] for_life::Error),
}

/// Why the process stops with a failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad flags or environment.
    #[error("invalid configuration")]
    Config(#[source] ConfigError),
    /// No Kubernetes client could be built.
    #[error("failed to build a kubernetes client")]
    Client(#[source] kube::Error),
    /// An HTTP endpoint could not be bound.
    #[error("failed to start the http endpoints")]
    Http(#[source] crate::http::Error),
    /// Leader-for-life could not identify this pod.
    #[error("leader-for-life election failed")]
    ForLife(#[source] for_life::Error),
    /// The lease was lost (renew deadline passed, or taken over).
    #[error("leader election lost")]
    LeaseLost(#[source] lease::Lost),
    /// The leader-for-life lock was deleted or changed owner.
    #[error("leader-for-life lock lost")]
    ForLifeLost(#[source] for_life::Lost),
    /// The controller stopped on its own.
    #[error("the controller stopped unexpectedly")]
    ControllerStopped,
    /// The async runtime could not start.
    #[error("failed to start the async runtime")]
    Runtime(#[source] std::io::Error),
}

impl Error {
    /// The process exit code: 2 for configuration, 1 otherwise.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) => 2,
            _ => 1,
        }
    }
}

/// The parts of the environment the operator reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    /// `POD_NAME` (Downward API metadata.name).
    pub pod_name: Option<String>,
    /// `POD_NAMESPACE` (Downward API metadata.namespace).
    pub pod_namespace: Option<String>,
    /// The service-account namespace file's content.
    pub service_account_namespace: Option<String>,
}

impl Env {
    /// Reads the process environment and the service-account namespace file.
    #[must_use]
    pub fn from_process() -> Self {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        Self {
            pod_name: var("POD_NAME"),
            pod_namespace: var("POD_NAMESPACE"),
            service_account_namespace: read_namespace_file(Path::new(
                SERVICE_ACCOUNT_NAMESPACE_FILE,
            )),
        }
    }
}

fn read_namespace_file(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Which election to run.
#[derive(Debug, Clone)]
pub enum Election {
    /// `--leader-election none`.
    None,
    /// for-life outside a cluster: skipped, as operator-sdk documents.
    SkippedNotInCluster,
    /// Leader-for-life.
    ForLife(ForLifeConfig),
    /// Leader-with-lease.
    Lease(LeaseConfig),
}

/// What the process will run, resolved from flags and environment.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The election.
    pub election: Election,
    /// Namespace of the registry ConfigMap: the election namespace, else `default`.
    pub operator_namespace: String,
    /// Namespaces to watch.
    pub watch: WatchNamespaces,
    /// The instance name in Events (POD_NAME or the hostname).
    pub instance: String,
}

fn operator_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".to_owned(), COMPONENT.to_owned())])
}

/// Resolves flags and environment into a [`Plan`].
///
/// Namespace: `--leader-election-namespace`, else `POD_NAMESPACE`, else the
/// service-account file. for-life without any → election skipped; lease without any →
/// [`ConfigError::NotInCluster`]; for-life with one but no `POD_NAME` →
/// [`for_life::Error::MissingPodName`].
///
/// # Errors
/// [`ConfigError`] for anything that makes the flags unusable (exit code 2).
pub fn plan(args: &Args, env: &Env) -> Result<Plan, ConfigError> {
    lease::validate_timings(args.lease_duration, args.renew_deadline, args.retry_period)
        .map_err(ConfigError::Lease)?;
    let namespace = args
        .leader_election_namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| env.pod_namespace.clone())
        .or_else(|| env.service_account_namespace.clone());
    let instance = env
        .pod_name
        .clone()
        .or_else(|| hostname::get().ok().and_then(|h| h.into_string().ok()))
        .unwrap_or_else(|| COMPONENT.to_owned());
    let election = match (args.leader_election, &namespace) {
        (ElectionMode::None, _) => Election::None,
        (ElectionMode::ForLife, None) => Election::SkippedNotInCluster,
        (ElectionMode::ForLife, Some(ns)) => {
            let pod_name = env
                .pod_name
                .clone()
                .ok_or(ConfigError::ForLife(for_life::Error::MissingPodName))?;
            Election::ForLife(ForLifeConfig {
                lock_name: args.leader_election_id.clone(),
                namespace: ns.clone(),
                pod_name,
                standby: args.standby,
                labels: operator_labels(),
            })
        }
        (ElectionMode::Lease, None) => return Err(ConfigError::NotInCluster),
        (ElectionMode::Lease, Some(ns)) => {
            let cfg = LeaseConfig {
                name: args.leader_election_id.clone(),
                namespace: ns.clone(),
                identity: identity(env.pod_name.as_deref()),
                lease_duration: args.lease_duration,
                renew_deadline: args.renew_deadline,
                retry_period: args.retry_period,
                standby: args.standby,
                labels: operator_labels(),
            };
            cfg.validate().map_err(ConfigError::Lease)?;
            Election::Lease(cfg)
        }
    };
    Ok(Plan {
        election,
        operator_namespace: namespace.unwrap_or_else(|| "default".to_owned()),
        watch: WatchNamespaces::parse(&args.watch_namespace),
        instance,
    })
}

/// Runs the operator until `shutdown` (clean: `Ok`) or a failure.
///
/// Serves HTTP at once (standbys included), then elects, then reconciles while leading.
/// Once leadership ends — shutdown or loss — no new reconcile starts and the running ones
/// may end ([`CONTROLLER_GRACE`], [`LOST_GRACE`]), their writes subject to the write guard;
/// on shutdown the lease is renewed until they have ended, and only then released.
///
/// # Errors
/// See [`Error`]; lost leadership is [`Error::LeaseLost`] / [`Error::ForLifeLost`].
pub async fn run(
    args: &Args,
    plan: Plan,
    client: Client,
    mut shutdown: Shutdown,
) -> Result<(), Error> {
    let metrics = Metrics::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let recorder = Recorder::new(Arc::new(KubeEventSink::new(
        client.clone(),
        COMPONENT,
        &plan.instance,
    )));
    let guard_on = args.write_guard == WriteGuardMode::On;

    let (leadership, guard, healthz) = match &plan.election {
        Election::None | Election::SkippedNotInCluster => (
            None,
            WriteGuard::off(),
            HealthzAdaptor::always(clock.clone()),
        ),
        Election::ForLife(cfg) => {
            let l = Leadership::new(&cfg.lock_name, metrics.clone());
            let g = if guard_on {
                WriteGuard::leading(l.clone(), clock.clone(), None)
            } else {
                WriteGuard::off()
            };
            (Some(l), g, HealthzAdaptor::always(clock.clone()))
        }
        Election::Lease(cfg) => {
            let l = Leadership::new(&cfg.name, metrics.clone());
            let g = if guard_on {
                WriteGuard::leading(l.clone(), clock.clone(), Some(cfg.renew_deadline))
            } else {
                WriteGuard::off()
            };
            let h = HealthzAdaptor::lease(
                l.clone(),
                clock.clone(),
                cfg.lease_duration,
                HEALTHZ_TIMEOUT,
            );
            (Some(l), g, h)
        }
    };

    let servers = Servers::bind(
        args.metrics_bind_address,
        args.health_probe_bind_address,
        Endpoints {
            metrics: metrics.clone(),
            healthz,
            leader: leadership
                .clone()
                .map(|leadership| crate::http::LeaderGauge {
                    leadership,
                    guard: guard.clone(),
                }),
        },
    )
    .await
    .map_err(Error::Http)?;
    tracing::info!(addresses = ?servers.local_addrs(), "serving /metrics, /healthz and /readyz");
    servers.spawn(&shutdown);

    let ctx = Arc::new(Context {
        api: KubeCluster::new(client.clone(), &plan.operator_namespace),
        recorder: recorder.clone(),
        metrics: metrics.clone(),
        guard,
        backoff: ItemBackoff::default(),
        resync: args.resync_period,
        clock: clock.clone(),
    });
    let leader = Leader {
        client: client.clone(),
        ctx,
        watch: plan.watch.clone(),
        max: args.max_concurrent_reconciles,
    };

    match plan.election {
        Election::None => {
            tracing::info!("leader election disabled");
            leader.run_until(shutdown).await
        }
        Election::SkippedNotInCluster => {
            tracing::info!("skipping leader election: not running in a cluster");
            leader.run_until(shutdown).await
        }
        Election::ForLife(cfg) => {
            let Some(leadership) = leadership else {
                return Err(Error::ControllerStopped);
            };
            let lock = KubeLock::new(
                Api::<ConfigMap>::namespaced(client.clone(), &cfg.namespace),
                &cfg.lock_name,
            );
            let pods = KubePods::new(Api::<Pod>::namespaced(client.clone(), &cfg.namespace));
            let mut elector =
                ForLifeElector::new(cfg, lock, pods, SystemClock, leadership, Some(recorder));
            tracing::info!("trying to become the leader (leader-for-life)");
            if !elector
                .become_leader(&mut shutdown)
                .await
                .map_err(Error::ForLife)?
            {
                return Ok(());
            }
            let (stop_tx, stop_rx) = shutdown::channel();
            let mut task = leader.spawn(stop_rx);
            let stop = tokio::select! {
                s = elector.hold(&mut shutdown) => s,
                _ = &mut task => return Err(Error::ControllerStopped),
            };
            match stop {
                for_life::Stop::Cancelled => {
                    finish(&stop_tx, task, CONTROLLER_GRACE).await;
                    Ok(())
                }
                for_life::Stop::Lost(why) => {
                    finish(&stop_tx, task, LOST_GRACE).await;
                    // No longer leading, its work stopped: the process leaves only after the
                    // standbys that saw the lock go have taken it (they wait
                    // INITIAL_BACKOFF), so that its restart finds their lock rather than
                    // racing them for it.
                    tokio::select! {
                        () = tokio::time::sleep(for_life::LOST_LINGER) => {}
                        () = shutdown.wait() => {}
                    }
                    Err(Error::ForLifeLost(why))
                }
            }
        }
        Election::Lease(cfg) => {
            let Some(leadership) = leadership else {
                return Err(Error::ControllerStopped);
            };
            let renew_deadline = cfg.renew_deadline;
            let lock = KubeLock::new(
                Api::<Lease>::namespaced(client.clone(), &cfg.namespace),
                &cfg.name,
            );
            let mut elector = LeaseElector::new(cfg, lock, SystemClock, leadership, Some(recorder));
            tracing::info!(identity = %elector.config().identity, "trying to acquire the lease");
            if !elector.acquire(&mut shutdown).await {
                return Ok(());
            }
            let (stop_tx, stop_rx) = shutdown::channel();
            let mut task = leader.spawn(stop_rx);
            let stop = tokio::select! {
                s = elector.hold(&mut shutdown) => s,
                _ = &mut task => return Err(Error::ControllerStopped),
            };
            let result = match stop {
                lease::Stop::Cancelled => {
                    // The lease is kept while the running reconciles end: a write they have
                    // in flight lands while this replica still holds the lock.
                    elector
                        .renew_while(finish(&stop_tx, task, CONTROLLER_GRACE))
                        .await;
                    Ok(())
                }
                lease::Stop::Lost(why) => {
                    finish(&stop_tx, task, LOST_GRACE).await;
                    Err(Error::LeaseLost(why))
                }
            };
            // The gauge goes to 0 before the lease is given up, never after (as client-go's
            // leaderOff precedes its release): nobody can see two replicas claiming to lead.
            elector.stopped_leading().await;
            if args.release_on_cancel {
                match tokio::time::timeout(renew_deadline, elector.release()).await {
                    Ok(Ok(true)) | Ok(Ok(false)) => {}
                    Ok(Err(error)) => tracing::warn!(error = %error, "failed to release the lease"),
                    Err(_) => tracing::warn!("releasing the lease timed out"),
                }
            }
            result
        }
    }
}

/// The leader's work: the controller.
struct Leader {
    client: Client,
    ctx: Arc<Context<KubeCluster>>,
    watch: WatchNamespaces,
    max: u16,
}

impl Leader {
    fn spawn(&self, mut stop: Shutdown) -> tokio::task::JoinHandle<()> {
        let (client, ctx, watch, max) = (
            self.client.clone(),
            self.ctx.clone(),
            self.watch.clone(),
            self.max,
        );
        tokio::spawn(async move {
            controller::run(client, ctx, &watch, max, async move { stop.wait().await }).await;
        })
    }

    async fn run_until(self, mut shutdown: Shutdown) -> Result<(), Error> {
        let (stop_tx, stop_rx) = shutdown::channel();
        let mut task = self.spawn(stop_rx);
        tokio::select! {
            () = shutdown.wait() => {
                finish(&stop_tx, task, CONTROLLER_GRACE).await;
                Ok(())
            }
            _ = &mut task => Err(Error::ControllerStopped),
        }
    }
}

/// Stops the controller gracefully: no new reconcile starts, and the running ones may end
/// within `grace` before they are cut.
async fn finish(
    stop: &shutdown::ShutdownTrigger,
    mut task: tokio::task::JoinHandle<()>,
    grace: Duration,
) {
    stop.trigger();
    if tokio::time::timeout(grace, &mut task).await.is_err() {
        tracing::warn!("reconciles did not finish within the grace period; stopping them");
        task.abort();
    }
}

/// Installs the tracing subscriber (text or JSON, filtered by `RUST_LOG`, default `info`), writing to stderr.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Triggers `trigger` on SIGTERM or SIGINT.
fn watch_signals(trigger: shutdown::ShutdownTrigger) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => tracing::info!("received SIGTERM; shutting down"),
                        _ = tokio::signal::ctrl_c() => tracing::info!("received SIGINT; shutting down"),
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %error, "cannot listen for SIGTERM");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        trigger.trigger();
    });
}

/// The whole process: logging, plan, client, signals, [`run`], exit code.
#[must_use]
pub fn main(args: Args) -> ExitCode {
    init_logging(args.log_format);
    let result = plan(&args, &Env::from_process())
        .map_err(Error::Config)
        .and_then(|plan| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(Error::Runtime)
                .map(|rt| (rt, plan))
        })
        .and_then(|(rt, plan)| {
            rt.block_on(async {
                let (trigger, shutdown) = shutdown::channel();
                watch_signals(trigger);
                let client = Client::try_default().await.map_err(Error::Client)?;
                run(&args, plan, client, shutdown).await
            })
        });
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            let message = controller::error_chain(&error);
            tracing::error!(exit_code = error.exit_code(), error = %message, "{}", error);
            ExitCode::from(error.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("memcached-operator").chain(extra.iter().copied()))
            .unwrap()
    }

    fn in_cluster() -> Env {
        Env {
            pod_name: Some("memcached-operator-abc".into()),
            pod_namespace: Some("operators".into()),
            service_account_namespace: None,
        }
    }

    #[test]
    fn for_life_outside_a_cluster_skips_the_election() {
        let p = plan(&args(&[]), &Env::default()).unwrap();
        assert!(matches!(p.election, Election::SkippedNotInCluster));
        assert_eq!(p.operator_namespace, "default");
    }

    #[test]
    fn for_life_in_a_cluster_without_pod_name_names_the_downward_api_fix() {
        let env = Env {
            pod_name: None,
            ..in_cluster()
        };
        let err = plan(&args(&[]), &env).unwrap_err();
        let msg = controller::error_chain(&err);
        assert!(
            msg.contains("POD_NAME") && msg.contains("Downward API"),
            "{msg}"
        );
    }

    #[test]
    fn for_life_uses_pod_namespace_and_the_lock_id() {
        let p = plan(&args(&["--leader-election-id", "my-lock"]), &in_cluster()).unwrap();
        let Election::ForLife(cfg) = p.election else {
            panic!("expected for-life")
        };
        assert_eq!(
            (
                cfg.lock_name.as_str(),
                cfg.namespace.as_str(),
                cfg.pod_name.as_str()
            ),
            ("my-lock", "operators", "memcached-operator-abc")
        );
        assert_eq!(p.operator_namespace, "operators");
    }

    #[test]
    fn the_namespace_flag_wins_over_pod_namespace_and_the_service_account_file() {
        let env = Env {
            service_account_namespace: Some("sa-ns".into()),
            ..in_cluster()
        };
        let p = plan(
            &args(&[
                "--leader-election",
                "lease",
                "--leader-election-namespace",
                "flag-ns",
            ]),
            &env,
        )
        .unwrap();
        let Election::Lease(cfg) = p.election else {
            panic!("expected lease")
        };
        assert_eq!(cfg.namespace, "flag-ns");
        let env = Env {
            pod_namespace: None,
            service_account_namespace: Some("sa-ns".into()),
            ..in_cluster()
        };
        let p = plan(&args(&["--leader-election", "lease"]), &env).unwrap();
        let Election::Lease(cfg) = p.election else {
            panic!("expected lease")
        };
        assert_eq!(cfg.namespace, "sa-ns");
        assert!(cfg.identity.starts_with("memcached-operator-abc_"));
    }

    #[test]
    fn lease_outside_a_cluster_asks_for_the_namespace_flag() {
        let err = plan(&args(&["--leader-election", "lease"]), &Env::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not running in a cluster: set --leader-election-namespace"
        );
        assert_eq!(Error::Config(err).exit_code(), 2);
    }

    #[test]
    fn invalid_timings_are_a_configuration_error() {
        let err = plan(
            &args(&["--leader-election", "lease", "--renew-deadline", "20s"]),
            &in_cluster(),
        )
        .unwrap_err();
        assert!(controller::error_chain(&err).contains("must be greater than --renew-deadline"));
    }

    #[test]
    fn none_runs_without_election_and_watch_namespaces_are_parsed() {
        let p = plan(
            &args(&["--leader-election", "none", "--watch-namespace", "b,a"]),
            &in_cluster(),
        )
        .unwrap();
        assert!(matches!(p.election, Election::None));
        assert_eq!(p.watch, WatchNamespaces::Some(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn the_service_account_namespace_file_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("namespace");
        std::fs::write(&path, "operators\n").unwrap();
        assert_eq!(read_namespace_file(&path).as_deref(), Some("operators"));
        assert_eq!(read_namespace_file(&dir.path().join("missing")), None);
    }

    #[test]
    fn lost_leadership_and_runtime_failures_exit_one() {
        assert_eq!(
            Error::LeaseLost(lease::Lost::TakenBy("b".into())).exit_code(),
            1
        );
        assert_eq!(Error::ForLifeLost(for_life::Lost::Deleted).exit_code(), 1);
        assert_eq!(
            Error::LeaseLost(lease::Lost::TakenBy("b".into())).to_string(),
            "leader election lost"
        );
        assert_eq!(
            Error::ForLifeLost(for_life::Lost::Deleted).to_string(),
            "leader-for-life lock lost"
        );
    }
}
