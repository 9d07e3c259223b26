//! Watch streams: newline-delimited JSON events with kube-apiserver's semantics —
//! synthetic ADDED from "" or "0", sendInitialEvents with its end bookmark, resume from a
//! resourceVersion, 410 Expired as an in-stream ERROR, selector transitions, bookmarks,
//! and timeoutSeconds.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use super::call::Call;
use super::conversion::Converter;
use super::handlers::parse_rv;
use super::registry::ResourceType;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::State;
use super::status::{ApiError, GroupResource};
use super::store::{Event, EventType, StoreError};

/// A prepared watch: validated, ready to stream.
pub struct WatchPlan {
    rt: ResourceType,
    storage_gr: GroupResource,
    version: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    start: Start,
    bookmarks: bool,
    timeout: Duration,
    /// The conversion webhook of a custom resource's CRD, if it has one.
    converter: Option<Converter>,
}

enum Start {
    /// Synthetic ADDED for current objects, then live; optionally the end bookmark.
    Snapshot { end_bookmark: bool },
    /// Events after this revision.
    After(u64),
}

fn list_options_invalid(field: &str, value: &str, detail: &str) -> ApiError {
    ApiError::invalid(
        "ListOptions",
        "meta.k8s.io",
        "",
        vec![super::objects::forbidden_value(field, json!(value), detail)],
    )
}

/// Validates a watch request.
///
/// # Errors
/// 422 for invalid option combinations or an unparsable resourceVersion, 400 for bad selectors.
pub fn plan(call: &Call<'_>, rt: &ResourceType) -> Result<WatchPlan, ApiError> {
    let q = call.query;
    let send_initial = q.get("sendInitialEvents").map(|v| v == "true");
    let rv_match = q.str("resourceVersionMatch");
    let rv = q.str("resourceVersion");
    if !rv_match.is_empty() && send_initial.is_none() {
        return Err(list_options_invalid(
            "resourceVersionMatch",
            rv_match,
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    if send_initial.is_some() && rv_match != "NotOlderThan" {
        return Err(list_options_invalid(
            "resourceVersionMatch",
            rv_match,
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    let bookmarks = q.flag("allowWatchBookmarks");
    if send_initial == Some(true) && !bookmarks {
        return Err(list_options_invalid(
            "allowWatchBookmarks",
            "false",
            "sendInitialEvents requires setting allowWatchBookmarks to true",
        ));
    }
    let start = if send_initial == Some(true) {
        Start::Snapshot { end_bookmark: true }
    } else if rv.is_empty() || rv == "0" {
        Start::Snapshot {
            end_bookmark: false,
        }
    } else {
        Start::After(parse_rv(rt, rv)?)
    };
    let (labels, mut fields) = call.selectors(rt)?;
    if !call.info.name.is_empty() {
        // A watch of one object is a watch of the collection by metadata.name.
        let combined = match q.str("fieldSelector") {
            "" => format!("metadata.name={}", call.info.name),
            other => format!("{other},metadata.name={}", call.info.name),
        };
        fields =
            FieldSelector::parse(&combined).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    }
    let timeout = match q.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid timeoutSeconds: {t}")))?,
        ),
        // The real server picks a random value in [1800, 3600) seconds.
        None => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
    };
    let storage_gr = if rt.group == "events.k8s.io" {
        GroupResource::new("", "events")
    } else {
        rt.gr()
    };
    Ok(WatchPlan {
        rt: rt.clone(),
        storage_gr,
        version: call.info.version.clone(),
        namespace: (!call.info.namespace.is_empty()).then(|| call.info.namespace.clone()),
        labels,
        fields,
        start,
        bookmarks,
        timeout,
        converter: super::conversion::converter(&call.state.store, rt),
    })
}

impl WatchPlan {
    fn matches(&self, obj: &Value) -> bool {
        let labels: Map<String, Value> = obj["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        self.labels.matches(&labels) && self.fields.matches(obj)
    }

    fn in_scope(&self, event: &Event) -> bool {
        event.gr == self.storage_gr
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == event.namespace)
    }

    /// The event of `obj`, or an ERROR event when it cannot be converted to the version.
    fn line(&self, kind: &str, obj: Value) -> Bytes {
        match super::conversion::view(self.converter.as_ref(), &self.rt, &self.version, obj) {
            Ok(object) => Bytes::from(crate::answer_json::watch_line(kind, &object)),
            Err(e) => Bytes::from(crate::answer_json::watch_line("ERROR", &e.to_status())),
        }
    }

    fn bookmark(&self, revision: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({
            "kind": self.rt.kind,
            "apiVersion": self.rt.api_version(&self.version),
            "metadata": metadata,
        });
        Bytes::from(crate::answer_json::watch_line("BOOKMARK", &object))
    }

    /// What a live event means to this watch (selector transitions included).
    fn translate(&self, event: &Event) -> Option<Bytes> {
        if !self.in_scope(event) {
            return None;
        }
        let now = event.kind != EventType::Deleted && self.matches(&event.object);
        let before = match event.kind {
            EventType::Added => false,
            EventType::Deleted => self.matches(&event.object),
            EventType::Modified => event.previous.as_ref().is_some_and(|p| self.matches(p)),
        };
        match (before, now) {
            (false, true) => Some(self.line("ADDED", event.object.clone())),
            (true, true) => Some(self.line("MODIFIED", event.object.clone())),
            (true, false) if event.kind == EventType::Deleted => {
                Some(self.line("DELETED", event.object.clone()))
            }
            (true, false) => {
                // Stopped matching: DELETED with the previous content at this revision.
                let mut old = event
                    .previous
                    .clone()
                    .unwrap_or_else(|| event.object.clone());
                old["metadata"]["resourceVersion"] = json!(event.revision.to_string());
                Some(self.line("DELETED", old))
            }
            (false, false) => None,
        }
    }
}

fn expired_line(message: String) -> Bytes {
    let status = ApiError::Expired(message).to_status();
    Bytes::from(crate::answer_json::watch_line("ERROR", &status))
}

/// Runs a watch, sending lines into the returned channel until the timeout, the client
/// leaves, or the server shuts down.
pub fn run(
    state: Arc<State>,
    plan: WatchPlan,
    mut shutdown: watch::Receiver<bool>,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + plan.timeout;
        let (mut receiver, mut revision) = match plan.start {
            Start::Snapshot { end_bookmark } => {
                let (items, receiver, revision) = state
                    .store
                    .list_and_watch(&plan.storage_gr, plan.namespace.as_deref());
                for item in items.into_iter().filter(|o| plan.matches(o)) {
                    if tx.send(plan.line("ADDED", item)).await.is_err() {
                        return;
                    }
                }
                if end_bookmark && tx.send(plan.bookmark(revision, true)).await.is_err() {
                    return;
                }
                (receiver, revision)
            }
            Start::After(from) => match state.store.watch(Some(from)) {
                Ok((backlog, receiver, revision)) => {
                    for event in backlog {
                        if let Some(line) = plan.translate(&event)
                            && tx.send(line).await.is_err()
                        {
                            return;
                        }
                    }
                    (receiver, revision)
                }
                Err(StoreError::Expired { requested, oldest }) => {
                    let _ = tx
                        .send(expired_line(format!(
                            "too old resource version: {requested} ({oldest})"
                        )))
                        .await;
                    return;
                }
            },
        };
        let mut bookmark = tokio::time::interval(state.config.bookmark_interval);
        bookmark.tick().await;
        loop {
            tokio::select! {
                event = receiver.recv() => match event {
                    Ok(event) => {
                        if event.revision <= revision {
                            continue;
                        }
                        revision = event.revision;
                        if let Some(line) = plan.translate(&event)
                            && tx.send(line).await.is_err() {
                                return;
                            }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Too slow to keep up: the watch cache would terminate it too.
                        let _ = tx.send(expired_line(format!(
                            "too old resource version: {revision} ({})", state.store.revision()))).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = bookmark.tick(), if plan.bookmarks => {
                    if tx.send(plan.bookmark(revision, false)).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
            }
        }
    });
    rx
}
