//! Watch streams: newline-delimited JSON events with kube-apiserver's semantics —
//! synthetic ADDED from "" or "0", sendInitialEvents with its end bookmark, resume from a
//! resourceVersion, 410 Expired as an in-stream ERROR, selector transitions, bookmarks,
//! and timeoutSeconds. Selectors are matched against the objects as the watch's version
//! shows them (a custom resource converted by its CRD's webhook, with that version's
//! `selectableFields`), as kube-apiserver's watch cache of that version holds them.

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
    /// Whether the object as this watch's version shows it is selected.
    fn matches(&self, view: &Value) -> bool {
        let labels: Map<String, Value> = view["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        self.labels.matches(&labels) && self.fields.matches(view)
    }

    /// A stored object as this watch's version shows it: kube-apiserver keeps a watch cache
    /// per served version, of objects converted to it, and selects from those.
    fn view(&self, obj: Value) -> Result<Value, ApiError> {
        super::conversion::view(self.converter.as_ref(), &self.rt, &self.version, obj)
    }

    /// Whether a stored object is selected once converted; one that cannot be converted is
    /// not.
    fn selects(&self, obj: &Value) -> bool {
        self.view(obj.clone()).is_ok_and(|view| self.matches(&view))
    }

    fn in_scope(&self, event: &Event) -> bool {
        event.gr == self.storage_gr
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == event.namespace)
    }

    /// The event of `obj` as this watch's version shows it.
    fn line(kind: &str, view: &Value) -> Bytes {
        Bytes::from(crate::answer_json::watch_line(kind, view))
    }

    /// The ERROR event of an object that cannot be converted to the version.
    fn error_line(error: &ApiError) -> Bytes {
        Bytes::from(crate::answer_json::watch_line("ERROR", &error.to_status()))
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
        let view = match self.view(event.object.clone()) {
            Ok(view) => view,
            Err(e) => return Some(Self::error_line(&e)),
        };
        let now = event.kind != EventType::Deleted && self.matches(&view);
        let before = match event.kind {
            EventType::Added => false,
            EventType::Deleted => self.matches(&view),
            EventType::Modified => event.previous.as_ref().is_some_and(|p| self.selects(p)),
        };
        match (before, now) {
            (false, true) => Some(Self::line("ADDED", &view)),
            (true, true) => Some(Self::line("MODIFIED", &view)),
            (true, false) if event.kind == EventType::Deleted => Some(Self::line("DELETED", &view)),
            (true, false) => {
                // Stopped matching: DELETED with the previous content at this revision.
                let mut old = event
                    .previous
                    .clone()
                    .unwrap_or_else(|| event.object.clone());
                old["metadata"]["resourceVersion"] = json!(event.revision.to_string());
                Some(match self.view(old) {
                    Ok(old) => Self::line("DELETED", &old),
                    Err(e) => Self::error_line(&e),
                })
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
                for item in items {
                    let line = match plan.view(item) {
                        Ok(view) if plan.matches(&view) => WatchPlan::line("ADDED", &view),
                        Ok(_) => continue,
                        Err(e) => WatchPlan::error_line(&e),
                    };
                    if tx.send(line).await.is_err() {
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
