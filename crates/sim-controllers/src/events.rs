//! An event recorder for the controllers: core/v1 Events about an object, written as
//! client-go's `record.EventRecorder` writes them (named `<object>.<hex nanoseconds>`,
//! `source.component` and `reportingComponent` the controller's name), an Event identical
//! to an earlier one (same object, type, reason and message) counted on that one.
//!
//! # Caveats
//! - Similar events (same reason, other messages) are never combined into one, as
//!   client-go's aggregator does past ten within ten minutes. Identical ones are counted
//!   while the recorder remembers them: up to 4096 distinct Events, all forgotten at once
//!   when full, where client-go forgets the least recently used first.
//! - Writing is in the background and a failure is only logged, as client-go's
//!   broadcaster only logs it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::support::now;

/// How many distinct Events a recorder remembers to count repeats on (client-go's
/// correlator keeps an LRU cache of 4096).
const MAX_REMEMBERED: usize = 4096;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// Nothing is wrong.
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

/// Writes Events as one controller.
#[derive(Clone)]
pub(crate) struct Recorder {
    client: Client,
    component: &'static str,
    /// Events written, by what makes two identical: their name and count so far.
    written: Arc<Mutex<HashMap<String, (String, i32)>>>,
}

impl Recorder {
    /// A recorder writing as `component` (such as `job-controller`).
    pub(crate) fn new(client: Client, component: &'static str) -> Self {
        Self {
            client,
            component,
            written: Arc::default(),
        }
    }

    /// Records an Event about the object of `api_version`, `kind` and `meta`.
    pub(crate) fn record(
        &self,
        api_version: &str,
        kind: &str,
        meta: &ObjectMeta,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let event = self.event(api_version, kind, meta, type_, reason, message);
        let api: Api<Event> = Api::namespaced(
            self.client.clone(),
            meta.namespace.as_deref().unwrap_or("default"),
        );
        let identity = [
            api_version,
            kind,
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            meta.uid.as_deref().unwrap_or_default(),
            type_.as_str(),
            reason,
            message,
        ]
        .join("\u{0}");
        let repeat = {
            let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
            match written.get_mut(&identity) {
                Some((name, count)) => {
                    *count += 1;
                    Some((name.clone(), *count))
                }
                None => {
                    if written.len() >= MAX_REMEMBERED {
                        written.clear();
                    }
                    written.insert(
                        identity,
                        (event.metadata.name.clone().unwrap_or_default(), 1),
                    );
                    None
                }
            }
        };
        tokio::spawn(async move {
            let result = match repeat {
                Some((name, count)) => {
                    let patch = json!({"count": count, "lastTimestamp": event.last_timestamp});
                    api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                        .await
                }
                None => api.create(&PostParams::default(), &event).await,
            };
            if let Err(error) = result {
                tracing::debug!(error = %super::support::error_chain(&error), "cannot write an event");
            }
        });
    }

    fn event(
        &self,
        api_version: &str,
        kind: &str,
        meta: &ObjectMeta,
        type_: EventType,
        reason: &str,
        message: &str,
    ) -> Event {
        let at = now();
        let nanos = Timestamp::now().as_nanosecond();
        Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{nanos:x}",
                    meta.name.as_deref().unwrap_or_default()
                )),
                namespace: meta.namespace.clone(),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(api_version.to_string()),
                kind: Some(kind.to_string()),
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                field_path: None,
            },
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            source: Some(EventSource {
                component: Some(self.component.to_string()),
                host: None,
            }),
            first_timestamp: Some(at.clone()),
            last_timestamp: Some(at),
            count: Some(1),
            type_: Some(type_.as_str().to_string()),
            reporting_component: Some(self.component.to_string()),
            reporting_instance: Some(String::new()),
            ..Event::default()
        }
    }
}
