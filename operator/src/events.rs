//! Kubernetes Events (core/v1, as controller-runtime's recorder writes them) behind a sink trait.
//!
//! Events are best effort: a failure to publish is logged and never fails the caller.
//! The sink is a trait so reconcile and election tests can assert on what was
//! recorded without an API server.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::clock::lock;

/// Normal or Warning, as in `Event.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to record about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason, e.g. `Finalized`, `ReconcileError`, `LeaderElection`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// What was done, e.g. `Reconcile`, `Finalize`, `Elect`.
    pub action: String,
}

impl EventRecord {
    /// A Normal event.
    #[must_use]
    pub fn normal(reason: &str, action: &str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            action: action.into(),
        }
    }

    /// A Warning event.
    #[must_use]
    pub fn warning(reason: &str, action: &str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
            action: action.into(),
        }
    }
}

/// Where events go.
pub trait EventSink: Send + Sync {
    /// Writes one event about `regarding`.
    fn publish<'a>(
        &'a self,
        regarding: &'a ObjectReference,
        event: &'a EventRecord,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// Records events through a sink; failures are logged, not returned.
#[derive(Clone)]
pub struct Recorder {
    sink: Arc<dyn EventSink>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder over a sink.
    #[must_use]
    pub fn new(sink: Arc<dyn EventSink>) -> Self {
        Self { sink }
    }

    /// Publishes an event; a failure is logged at warn level and otherwise ignored.
    pub async fn publish(&self, regarding: &ObjectReference, event: &EventRecord) {
        if let Err(error) = self.sink.publish(regarding, event).await {
            tracing::warn!(
                reason = %event.reason,
                object = regarding.name.as_deref().unwrap_or(""),
                namespace = regarding.namespace.as_deref().unwrap_or(""),
                error = %error,
                "failed to record event"
            );
        }
    }
}

/// Writes core/v1 Events through the API.
#[derive(Clone)]
pub struct KubeEventSink {
    client: Client,
    component: String,
    instance: String,
}

impl KubeEventSink {
    /// A sink writing events as `component` (reporting controller) from `instance` (the pod).
    #[must_use]
    pub fn new(client: Client, component: &str, instance: &str) -> Self {
        Self {
            client,
            component: component.into(),
            instance: instance.into(),
        }
    }
}

impl EventSink for KubeEventSink {
    fn publish<'a>(
        &'a self,
        regarding: &'a ObjectReference,
        event: &'a EventRecord,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let ev = build_event(
                regarding,
                event,
                &self.component,
                &self.instance,
                Timestamp::now(),
            );
            let ns = ev
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            Api::<Event>::namespaced(self.client.clone(), &ns)
                .create(&PostParams::default(), &ev)
                .await
                .map(|_| ())
        })
    }
}

/// Builds the core/v1 Event object for `event` about `regarding` at `now`.
#[must_use]
pub fn build_event(
    regarding: &ObjectReference,
    event: &EventRecord,
    component: &str,
    instance: &str,
    now: Timestamp,
) -> Event {
    let namespace = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let base = regarding.name.as_deref().unwrap_or(component);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{base}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: regarding.clone(),
        reason: Some(event.reason.clone()),
        message: Some(event.message.clone()),
        type_: Some(event.type_.as_str().into()),
        action: Some(event.action.clone()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        source: Some(EventSource {
            component: Some(component.into()),
            host: None,
        }),
        reporting_component: Some(component.into()),
        reporting_instance: Some(instance.into()),
        ..Event::default()
    }
}

/// An in-memory sink, for tests: keeps every event with the object it was about.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    events: Arc<Mutex<Vec<(ObjectReference, EventRecord)>>>,
}

impl MemorySink {
    /// An empty sink.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything recorded so far.
    #[must_use]
    pub fn events(&self) -> Vec<(ObjectReference, EventRecord)> {
        lock(&self.events).clone()
    }

    /// The reasons recorded so far, in order.
    #[must_use]
    pub fn reasons(&self) -> Vec<String> {
        lock(&self.events)
            .iter()
            .map(|(_, e)| e.reason.clone())
            .collect()
    }
}

impl EventSink for MemorySink {
    fn publish<'a>(
        &'a self,
        regarding: &'a ObjectReference,
        event: &'a EventRecord,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        lock(&self.events).push((regarding.clone(), event.clone()));
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_its_object_reason_type_and_reporter() {
        let regarding = ObjectReference {
            kind: Some("Memcached".into()),
            name: Some("test".into()),
            namespace: Some("ns1".into()),
            ..ObjectReference::default()
        };
        let ev = build_event(
            &regarding,
            &EventRecord::warning("ReconcileError", "Reconcile", "boom"),
            "memcached-operator",
            "pod-a",
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(ev.metadata.namespace.as_deref(), Some("ns1"));
        assert!(ev.metadata.name.as_deref().unwrap().starts_with("test."));
        assert_eq!(ev.involved_object, regarding);
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.reason.as_deref(), Some("ReconcileError"));
        assert_eq!(ev.reporting_instance.as_deref(), Some("pod-a"));
        assert_eq!(ev.count, Some(1));
    }

    #[tokio::test]
    async fn the_memory_sink_keeps_events_in_order() {
        let sink = MemorySink::new();
        let rec = Recorder::new(Arc::new(sink.clone()));
        let r = ObjectReference::default();
        rec.publish(&r, &EventRecord::normal("A", "x", "")).await;
        rec.publish(&r, &EventRecord::normal("B", "x", "")).await;
        assert_eq!(sink.reasons(), ["A", "B"]);
    }
}
