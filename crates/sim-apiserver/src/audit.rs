//! The audit log: every request with its time, identity, source address, the pod it came
//! from when known, verb, resource and response code — the raw material of the
//! single-writer check. Readable in memory, streamable live, and writable as JSON lines.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// Errors of the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The JSON-lines file could not be opened or written.
    #[error("cannot write audit log {path}")]
    File {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The pod a request came from, found by its source address.
pub use cluster_vocabulary::PodRef;

/// One audited request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// When the request was received.
    pub time: DateTime<Utc>,
    /// Its sequence number in this log (from 1).
    pub seq: u64,
    /// The user, after impersonation.
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// The authenticated user when impersonating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated_by: Option<String>,
    /// Source address.
    pub source_ip: String,
    /// The pod that owns the source address, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    /// The RBAC verb (get, list, watch, create, update, patch, delete, deletecollection).
    pub verb: String,
    /// API group.
    pub api_group: String,
    /// Plural resource (empty for non-resource paths).
    pub resource: String,
    /// Subresource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Object name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The request URI.
    pub request_uri: String,
    /// User agent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// HTTP status code of the response.
    pub code: u16,
}

impl AuditEvent {
    /// Whether the request could change state (create, update, patch, delete, deletecollection).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// The audit log of one API server.
pub struct AuditLog {
    events: Mutex<Vec<AuditEvent>>,
    file: Mutex<Option<std::fs::File>>,
    live: broadcast::Sender<AuditEvent>,
    pods_by_ip: Mutex<HashMap<IpAddr, PodRef>>,
}

impl Default for AuditLog {
    fn default() -> Self {
        Self::new()
    }
}

impl AuditLog {
    /// An empty log.
    pub fn new() -> Self {
        Self {
            events: Mutex::new(Vec::new()),
            file: Mutex::new(None),
            live: broadcast::channel(4096).0,
            pods_by_ip: Mutex::new(HashMap::new()),
        }
    }

    /// Also writes every event from now on as a JSON line to `path` (appending).
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn write_to(&self, path: &Path) -> Result<(), AuditError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| AuditError::File {
                path: path.display().to_string(),
                source,
            })?;
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
        Ok(())
    }

    /// Attributes requests from `ip` to a pod (or stops doing so with `None`).
    pub fn set_pod_ip(&self, ip: IpAddr, pod: Option<PodRef>) {
        let mut map = self.pods_by_ip.lock().unwrap_or_else(|p| p.into_inner());
        match pod {
            Some(pod) => {
                map.insert(ip, pod);
            }
            None => {
                map.remove(&ip);
            }
        }
    }

    /// The pod that owns `ip`, if any.
    pub fn pod_of(&self, ip: IpAddr) -> Option<PodRef> {
        self.pods_by_ip
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ip)
            .cloned()
    }

    /// Records one event (its `seq` is assigned here).
    pub fn record(&self, mut event: AuditEvent) {
        {
            let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
            event.seq = events.len() as u64 + 1;
            events.push(event.clone());
        }
        if let Some(file) = self.file.lock().unwrap_or_else(|p| p.into_inner()).as_mut()
            && let Ok(line) = serde_json::to_string(&event)
        {
            // A failing audit file must not fail the request; the in-memory log keeps it.
            let _ = writeln!(file, "{line}");
        }
        let _ = self.live.send(event);
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<AuditEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The `seq` of the latest event recorded (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<AuditEvent> {
        self.live.subscribe()
    }
}

/// A shared audit log.
pub type SharedAudit = Arc<AuditLog>;
