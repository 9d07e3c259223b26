//! The operator's process: its flags, a client from its configuration (in a cluster, the
//! ServiceAccount's files), and the Store and Batch controllers, run until SIGTERM or
//! SIGINT.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt as _};

use crate::Context;
use crate::apply::Error as ReconcileError;
use crate::crd::{Batch, Store};

/// The operator's flags.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "workloads-operator",
    about = "Runs Stores as StatefulSets and Batches as Jobs."
)]
pub struct Args {
    /// The image the workloads' pods run: a busybox (`sh`, `httpd`).
    #[arg(long, env = "WORKLOADS_IMAGE", default_value = "busybox:1.36")]
    pub image: String,
}

/// Why the process ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The async runtime could not start.
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// No client could be configured (no kubeconfig, no in-cluster files).
    #[error("cannot configure a Kubernetes client")]
    Client(#[source] kube::Error),
}

/// How long a failed reconcile waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

fn retry<K>(object: Arc<K>, error: &ReconcileError, _: Arc<Context>) -> Action
where
    K: kube::Resource,
{
    tracing::warn!(name = %object.name_any(), error = %error_chain(error), "reconcile failed");
    Action::requeue(RETRY)
}

/// An error and its causes, one after the other.
#[must_use]
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Runs both controllers, in every namespace, until SIGTERM or SIGINT.
pub async fn run(client: Client, image: String) {
    let context = Arc::new(Context {
        client: client.clone(),
        image,
    });
    let stores = Controller::new(
        Api::<Store>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<StatefulSet>::all(client.clone()),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(crate::store::reconcile, retry, context.clone())
    .for_each(|done| async move {
        if let Ok((object, _)) = done {
            tracing::info!(store = %object.name, "reconciled");
        }
    });
    let batches = Controller::new(
        Api::<Batch>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<Job>::all(client), watcher::Config::default())
    .shutdown_on_signal()
    .run(crate::batch::reconcile, retry, context)
    .for_each(|done| async move {
        if let Ok((object, _)) = done {
            tracing::info!(batch = %object.name, "reconciled");
        }
    });
    tokio::join!(stores, batches);
}

/// The whole process: logging, the runtime, the client, [`run`], the exit code.
#[must_use]
pub fn main(args: Args) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::Runtime)
        .and_then(|runtime| {
            runtime.block_on(async {
                let client = Client::try_default().await.map_err(Error::Client)?;
                run(client, args.image).await;
                Ok(())
            })
        });
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(error = %error_chain(&error), "workloads-operator failed");
            ExitCode::FAILURE
        }
    }
}
