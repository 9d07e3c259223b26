//! What a failed scenario leaves behind for its author: every operator pod's log (and
//! the previous container's, after a restart), the events of the operator's namespace
//! and the lock objects, as files beside the scenario's history and timeline.

use std::path::Path;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::Client;
use kube::api::{Api, ListParams, LogParams};

/// Errors of keeping artifacts.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A list or read failed.
    #[error("cannot read the {what} of namespace {namespace}")]
    Api {
        /// What was read.
        what: &'static str,
        /// The namespace.
        namespace: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A file could not be written.
    #[error(transparent)]
    Write(#[from] crate::report::ReportError),
}

/// Writes `pods/<pod>.log` (and `<pod>.previous.log`), `events.txt` and `locks.yaml` for
/// `namespace` into `dir`.
///
/// # Errors
/// When the namespace cannot be listed or a file cannot be written; a pod without logs
/// is noted in its file instead.
pub async fn keep(client: &Client, namespace: &str, dir: &Path) -> Result<(), ArtifactError> {
    let api_error = |what| {
        move |source| ArtifactError::Api {
            what,
            namespace: namespace.to_string(),
            source,
        }
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for pod in pods
        .list(&ListParams::default())
        .await
        .map_err(api_error("pods"))?
    {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let restarted = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.restart_count > 0));
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_else(|e| format!("(no log: {e})\n"));
        crate::report::write(&dir.join("pods").join(format!("{name}.log")), &log)?;
        if restarted {
            let previous = LogParams {
                previous: true,
                ..LogParams::default()
            };
            let log = pods
                .logs(&name, &previous)
                .await
                .unwrap_or_else(|e| format!("(no log: {e})\n"));
            crate::report::write(&dir.join("pods").join(format!("{name}.previous.log")), &log)?;
        }
    }
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let mut lines: Vec<(String, String)> = events
        .list(&ListParams::default())
        .await
        .map_err(api_error("events"))?
        .into_iter()
        .map(|e| {
            let time = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
                .unwrap_or_default();
            let line = format!(
                "{time}  {:<8} {:<24} {}/{}  {}\n",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.involved_object.kind.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default()
            );
            (time, line)
        })
        .collect();
    lines.sort();
    let text: String = lines.into_iter().map(|(_, l)| l).collect();
    crate::report::write(&dir.join("events.txt"), &text)?;
    let mut locks = String::new();
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    for lease in leases
        .list(&ListParams::default())
        .await
        .map_err(api_error("leases"))?
    {
        locks.push_str("---\n");
        locks.push_str(&serde_yaml::to_string(&lease).unwrap_or_default());
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for map in maps
        .list(&ListParams::default())
        .await
        .map_err(api_error("configmaps"))?
    {
        locks.push_str("---\n");
        locks.push_str(&serde_yaml::to_string(&map).unwrap_or_default());
    }
    crate::report::write(&dir.join("locks.yaml"), &locks)?;
    Ok(())
}
