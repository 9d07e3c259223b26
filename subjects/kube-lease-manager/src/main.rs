//! A subject for opconform's conformance table: leader election done by the
//! [kube-lease-manager](https://crates.io/crates/kube-lease-manager) crate and nothing
//! else of ours. What the library says (its watch channel: leader or not) is all this
//! binary reports, as the `leader_election_master_status` gauge on `/metrics`; while the
//! library says it leads, the replica does its "work": it writes the ConfigMap
//! `<lease>-work` every `--work-interval`, so that the single-writer check has writes to
//! judge.
//!
//! The library's timings are a lease duration and a grace (how long before expiry the
//! holder renews, which is also the clock skew it tolerates); the harness's three timings
//! map onto them as duration = `--lease-duration`, grace = lease duration − renew
//! deadline (at least 1 s). `--retry-period` is accepted and unused: the library has none.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};

/// Leader election with kube-lease-manager, reported as a gauge, with work while leading.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The Lease's name.
    #[arg(long, default_value = "kube-lease-manager-subject-lock")]
    lease_name: String,
    /// The Lease's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: String,
    /// This replica's identity in the Lease (its Pod's name).
    #[arg(long, env = "POD_NAME")]
    identity: String,
    /// How long a lease is valid (the library's duration).
    #[arg(long, default_value = "15s", value_parser = seconds)]
    lease_duration: u64,
    /// How long a leader may go without renewing: the library renews
    /// `lease-duration − renew-deadline` before expiry (its grace).
    #[arg(long, default_value = "10s", value_parser = seconds)]
    renew_deadline: u64,
    /// Accepted for the harness's timing template; the library has no retry period.
    #[arg(long, default_value = "2s", value_parser = seconds)]
    retry_period: u64,
    /// Where `/metrics` and `/healthz` are served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    /// How often the leader writes its work ConfigMap.
    #[arg(long, default_value = "500ms", value_parser = millis)]
    work_interval: Duration,
    /// The namespaces a harness confines the operator to on a shared cluster
    /// (comma-separated). The subject watches only its lock and writes only in its own
    /// namespace, so it accepts them and needs nothing more.
    #[arg(long, value_delimiter = ',')]
    watch_namespace: Vec<String>,
}

/// What can stop this process.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot build a Kubernetes client")]
    Client(#[source] kube::Error),
    #[error("cannot set up the lease manager for lease {lease}")]
    Manager {
        lease: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    #[error("cannot serve /metrics on {addr}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen for SIGTERM")]
    Signal(#[source] std::io::Error),
    #[error("the lease manager stopped")]
    Stopped(#[source] kube_lease_manager::LeaseManagerError),
    #[error("the lease manager's task failed")]
    Task(#[source] tokio::task::JoinError),
}

fn seconds(text: &str) -> Result<u64, String> {
    let d = millis(text)?;
    if d.subsec_millis() != 0 || d.is_zero() {
        return Err(format!(
            "{text:?}: expected a whole, positive number of seconds such as 4s"
        ));
    }
    Ok(d.as_secs())
}

fn millis(text: &str) -> Result<Duration, String> {
    let parse = |n: &str| n.parse::<u64>().map_err(|_| ());
    let parsed = if let Some(n) = text.strip_suffix("ms") {
        parse(n).map(Duration::from_millis)
    } else if let Some(n) = text.strip_suffix('s') {
        parse(n).map(Duration::from_secs)
    } else {
        Err(())
    };
    parsed.map_err(|()| format!("{text:?}: expected a duration such as 4s or 500ms"))
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                message.push_str(": ");
                message.push_str(&s.to_string());
                source = s.source();
            }
            tracing::error!(error = %message, "stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let client = kube::Client::try_default().await.map_err(Error::Client)?;
    let leading = Arc::new(AtomicBool::new(false));
    serve(args.metrics_bind_address, &args.lease_name, leading.clone()).await?;

    let grace = args
        .lease_duration
        .saturating_sub(args.renew_deadline)
        .max(1);
    let manager = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&args.namespace)
        .with_identity(&args.identity)
        .with_duration(args.lease_duration)
        .with_grace(grace)
        .with_create_mode(LeaseCreateMode::AutoCreate)
        .build()
        .await
        .map_err(|source| Error::Manager {
            lease: args.lease_name.clone(),
            source,
        })?;
    tracing::info!(
        lease = %args.lease_name,
        identity = %args.identity,
        watch_namespaces = ?args.watch_namespace,
        duration = args.lease_duration,
        grace,
        "electing with kube-lease-manager"
    );
    let (mut channel, task) = manager.watch().await;
    let work = tokio::spawn(work(
        Api::namespaced(client, &args.namespace),
        format!("{}-work", args.lease_name),
        args.identity.clone(),
        args.work_interval,
        leading.clone(),
    ));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(Error::Signal)?;
    loop {
        tokio::select! {
            changed = channel.changed() => {
                if changed.is_err() {
                    // The manager's task ended: its error says why.
                    break;
                }
                let now = *channel.borrow_and_update();
                leading.store(now, Ordering::SeqCst);
                tracing::info!(leader = now, "the lease manager says");
            }
            _ = terminate.recv() => {
                tracing::info!("SIGTERM: releasing the lease");
                break;
            }
        }
    }
    leading.store(false, Ordering::SeqCst);
    work.abort();
    // Dropping the receiver makes the manager release the lease and end.
    drop(channel);
    match task.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Stopped(e)),
        Err(e) => Err(Error::Task(e)),
    }
}

/// While `leading`, writes `{leader, at}` into the ConfigMap `name` every `interval`
/// (server-side apply: created when missing).
async fn work(
    maps: Api<ConfigMap>,
    name: String,
    identity: String,
    interval: Duration,
    leading: Arc<AtomicBool>,
) {
    let params = PatchParams::apply("kube-lease-manager-subject").force();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !leading.load(Ordering::SeqCst) {
            continue;
        }
        let at = format!("{:?}", std::time::SystemTime::now());
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": name },
            "data": { "leader": identity, "at": at },
        });
        if let Err(e) = maps.patch(&name, &params, &Patch::Apply(&body)).await {
            tracing::warn!(configmap = %name, error = %e, "work write failed");
        }
    }
}

/// Serves `/metrics` (the leader gauge) and `/healthz` in the background.
async fn serve(addr: SocketAddr, lease: &str, leading: Arc<AtomicBool>) -> Result<(), Error> {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve { addr, source })?;
    let lease = lease.to_string();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let value = u8::from(leading.load(Ordering::SeqCst));
                let lease = lease.clone();
                async move {
                    format!(
                        "# HELP leader_election_master_status 1 while this replica leads (as kube-lease-manager says).\n\
                         # TYPE leader_election_master_status gauge\n\
                         leader_election_master_status{{name=\"{lease}\"}} {value}\n"
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics server stopped");
        }
    });
    tracing::info!(%addr, "serving /metrics and /healthz");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_read_as_the_harness_writes_them_and_bad_ones_are_named() {
        assert_eq!(seconds("4s"), Ok(4));
        assert_eq!(millis("500ms"), Ok(Duration::from_millis(500)));
        assert!(seconds("1500ms").unwrap_err().contains("\"1500ms\""));
        assert!(seconds("0s").is_err());
        assert!(millis("4").unwrap_err().contains("such as 4s"));
    }
}
