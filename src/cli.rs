//! The `opconform` command line: `opconform sim` runs the simulated control plane in the
//! foreground so a person can use kubectl against it.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, Subcommand};

use crate::sim::apiserver::{ApiServer, ApiServerConfig, ApiServerError};

/// Errors of the command line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The simulated API server did not start.
    #[error("cannot start the simulated control plane")]
    Start(#[source] ApiServerError),
    /// The kubeconfig could not be written.
    #[error("cannot write kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The audit log file could not be opened.
    #[error("cannot open the audit log")]
    Audit(#[source] crate::sim::apiserver::audit::AuditError),
    /// Waiting for a signal failed.
    #[error("cannot wait for ctrl-c")]
    Signal(#[source] std::io::Error),
}

/// End-to-end conformance harness for Kubernetes operators.
#[derive(Debug, Parser)]
#[command(name = "opconform", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the simulated control plane in the foreground until interrupted.
    Sim(SimArgs),
}

/// Arguments of `opconform sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = "opconform-sim.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Also write the audit log as JSON lines to this file.
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// Cluster name (kubeconfig cluster and context name).
    #[arg(long, default_value = "opconform")]
    pub name: String,
}

/// Runs the command line.
///
/// # Errors
/// Start-up failures, with their cause.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Sim(args) => sim(args).await,
    }
}

async fn sim(args: SimArgs) -> Result<(), CliError> {
    let begin = Instant::now();
    let server = ApiServer::start(ApiServerConfig {
        name: args.name.clone(),
        port: args.port,
        ..Default::default()
    })
    .await
    .map_err(CliError::Start)?;
    if let Some(path) = &args.audit_log {
        server
            .state()
            .audit
            .write_to(path)
            .map_err(CliError::Audit)?;
    }
    std::fs::write(&args.kubeconfig, server.admin_kubeconfig()).map_err(|source| {
        CliError::Kubeconfig {
            path: args.kubeconfig.clone(),
            source,
        }
    })?;
    println!(
        "opconform sim: serving {} (started in {} ms)",
        server.url(),
        begin.elapsed().as_millis()
    );
    println!(
        "kubeconfig: {}  (try: KUBECONFIG={} kubectl get namespaces)",
        args.kubeconfig.display(),
        args.kubeconfig.display()
    );
    println!("press ctrl-c to stop");
    wait_for_interrupt().await?;
    server.shutdown();
    println!("opconform sim: stopped");
    Ok(())
}

async fn wait_for_interrupt() -> Result<(), CliError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(CliError::Signal)?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.map_err(CliError::Signal),
        _ = term.recv() => Ok(()),
    }
}
