//! A subject for opconform's conformance table: leader election done by the
//! [kube-leader-election](https://crates.io/crates/kube-leader-election) crate and nothing
//! else of ours. What the library says (each `try_acquire_or_renew`: acquired or not) is
//! all this binary reports, as the `leader_election_master_status` gauge on `/metrics`;
//! while the library says it leads, the replica does its "work": it writes the ConfigMap
//! `<lease>-work` every `--work-interval`, so that the single-writer check has writes to
//! judge.
//!
//! The library's one timing is the lease's TTL, and its documented usage is a loop of the
//! caller's that calls `try_acquire_or_renew` well within it (its example: TTL 15 s, a try
//! every 5 s) and shares the last answer with the application. The harness's three timings
//! map onto that as TTL = `--lease-duration`, a try every `--retry-period` (leader and
//! candidates alike), and `--renew-deadline` as the one addition of ours: a try that
//! errs leaves the last answer standing (as in the library's example), but only until
//! renew-deadline after the start of the last try that acquired; past that the replica no
//! longer claims to lead. On SIGTERM it calls the library's `step_down` (its release).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};

/// Leader election with kube-leader-election, reported as a gauge, with work while leading.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The Lease's name.
    #[arg(long, default_value = "kube-leader-election-subject-lock")]
    lease_name: String,
    /// The Lease's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: String,
    /// This replica's identity in the Lease (its Pod's name).
    #[arg(long, env = "POD_NAME")]
    identity: String,
    /// How long a lease is valid (the library's `lease_ttl`).
    #[arg(long, default_value = "15s", value_parser = seconds)]
    lease_duration: u64,
    /// How long after the start of its last successful renewal a leader still claims to
    /// lead while its tries fail.
    #[arg(long, default_value = "10s", value_parser = seconds)]
    renew_deadline: u64,
    /// How often `try_acquire_or_renew` is called, by the leader and the candidates.
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
    #[error("cannot listen for SIGTERM")]
    Signal(#[source] std::io::Error),
    #[error("cannot build a Kubernetes client")]
    Client(#[source] kube::Error),
    #[error("cannot serve /metrics on {addr}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot step down from lease {lease}")]
    StepDown {
        lease: String,
        #[source]
        source: kube_leader_election::Error,
    },
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

/// Whether this replica claims to lead: until the instant it holds, if any.
#[derive(Debug, Default)]
struct Leadership(Mutex<Option<Instant>>);

impl Leadership {
    fn leading(&self) -> bool {
        self.lock().is_some_and(|until| Instant::now() < until)
    }

    /// Takes in one try's answer, the try having started at `started`.
    fn record(&self, answer: Option<bool>, started: Instant, renew_deadline: Duration) {
        let mut until = self.lock();
        match answer {
            Some(true) => *until = Some(started + renew_deadline),
            Some(false) => *until = None,
            // An error: the last answer stands, up to its deadline.
            None => {}
        }
    }

    fn end(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
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
    let leadership = Arc::new(Leadership::default());
    serve(
        args.metrics_bind_address,
        &args.lease_name,
        leadership.clone(),
    )
    .await?;

    let lock = LeaseLock::new(
        client.clone(),
        &args.namespace,
        LeaseLockParams {
            lease_name: args.lease_name.clone(),
            holder_id: args.identity.clone(),
            lease_ttl: Duration::from_secs(args.lease_duration),
        },
    );
    tracing::info!(
        lease = %args.lease_name,
        identity = %args.identity,
        watch_namespaces = ?args.watch_namespace,
        ttl = args.lease_duration,
        retry = args.retry_period,
        renew_deadline = args.renew_deadline,
        "electing with kube-leader-election"
    );
    let work = tokio::spawn(work(
        Api::namespaced(client, &args.namespace),
        format!("{}-work", args.lease_name),
        args.identity.clone(),
        args.work_interval,
        leadership.clone(),
    ));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(Error::Signal)?;
    let renew_deadline = Duration::from_secs(args.renew_deadline);
    let mut tick = tokio::time::interval(Duration::from_secs(args.retry_period));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let elect = async {
        loop {
            tick.tick().await;
            let started = Instant::now();
            let answer = match lock.try_acquire_or_renew().await {
                Ok(result) => Some(matches!(result, LeaseLockResult::Acquired(_))),
                Err(e) => {
                    tracing::warn!(error = %e, "try_acquire_or_renew failed");
                    None
                }
            };
            let before = leadership.leading();
            leadership.record(answer, started, renew_deadline);
            let now = leadership.leading();
            if now != before {
                tracing::info!(leader = now, "kube-leader-election says");
            }
        }
    };
    tokio::select! {
        () = elect => {}
        _ = terminate.recv() => tracing::info!("SIGTERM: stepping down"),
    }
    leadership.end();
    work.abort();
    match lock.step_down().await {
        Ok(()) => Ok(()),
        Err(kube_leader_election::Error::ReleaseLockWhenNotLeading { leader }) => {
            tracing::info!(%leader, "not the leader: nothing to release");
            Ok(())
        }
        Err(source) => Err(Error::StepDown {
            lease: args.lease_name,
            source,
        }),
    }
}

/// While leading, writes `{leader, at}` into the ConfigMap `name` every `interval`
/// (server-side apply: created when missing).
async fn work(
    maps: Api<ConfigMap>,
    name: String,
    identity: String,
    interval: Duration,
    leadership: Arc<Leadership>,
) {
    let params = PatchParams::apply("kube-leader-election-subject").force();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !leadership.leading() {
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
async fn serve(addr: SocketAddr, lease: &str, leadership: Arc<Leadership>) -> Result<(), Error> {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve { addr, source })?;
    let lease = lease.to_string();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let value = u8::from(leadership.leading());
                let lease = lease.clone();
                async move {
                    format!(
                        "# HELP leader_election_master_status 1 while this replica leads (as kube-leader-election says).\n\
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

    #[test]
    fn an_acquired_try_leads_until_renew_deadline_and_errors_do_not_extend_it() {
        let deadline = Duration::from_secs(10);
        let leadership = Leadership::default();
        assert!(!leadership.leading());
        let now = Instant::now();
        leadership.record(Some(true), now, deadline);
        assert!(leadership.leading());
        leadership.record(None, now, deadline);
        assert_eq!(
            *leadership.lock(),
            Some(now + deadline),
            "an error keeps the claim as it was"
        );
        // A claim from a try that started renew-deadline ago has run out.
        let old = now.checked_sub(deadline).expect("the clock is past 10 s");
        leadership.record(Some(true), old, deadline);
        leadership.record(None, now, deadline);
        assert!(!leadership.leading());
        leadership.record(Some(true), now, deadline);
        leadership.record(Some(false), now, deadline);
        assert!(!leadership.leading(), "not acquired ends the claim at once");
    }

    #[test]
    fn the_harness_timing_flags_parse() {
        let args = Args::try_parse_from([
            "kube-leader-election-subject",
            "--namespace=ns",
            "--identity=pod-a",
            "--lease-duration=4s",
            "--renew-deadline=3s",
            "--retry-period=1s",
        ])
        .expect("the harness's flags parse");
        assert_eq!(
            (args.lease_duration, args.renew_deadline, args.retry_period),
            (4, 3, 1)
        );
        assert_eq!(args.lease_name, "kube-leader-election-subject-lock");
        assert_eq!(args.work_interval, Duration::from_millis(500));
    }
}
