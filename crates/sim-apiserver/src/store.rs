//! The object store: one global monotonic resourceVersion, atomic read-modify-write, and a
//! bounded event log from which watches start and resume (the etcd + watch cache of the sim).
//!
//! # Guarantees
//! - Every write gets the next revision; `metadata.resourceVersion` is that revision.
//! - Events are appended to the log and broadcast in revision order, under the same lock as
//!   the write, so a watch that starts from revision N sees exactly the writes after N.
//! - A DELETED event carries the last state of the object stamped with the delete's revision.
//!
//! # Caveats
//! Only the newest `history` events are kept; a watch from an older revision gets
//! [`StoreError::Expired`], as from a compacted etcd.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::status::GroupResource;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The requested revision has been compacted out of the event log.
    #[error("too old resource version: {requested} ({oldest})")]
    Expired {
        /// The revision asked for.
        requested: u64,
        /// The oldest revision still in the log.
        oldest: u64,
    },
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Deleted.
    Deleted,
}

impl EventType {
    /// The watch event type string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as the watch cache keeps it.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its revision.
    pub revision: u64,
    /// What happened.
    pub kind: EventType,
    /// The resource.
    pub gr: GroupResource,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The new object (for DELETED: the last state, stamped with this revision).
    pub object: Value,
    /// The state before a MODIFIED or DELETED.
    pub previous: Option<Value>,
}

/// The key of an object within its resource.
pub type ObjectKey = (String, String);

/// What a read-modify-write decides.
pub enum Write {
    /// Store this object (create or update).
    Put(Value),
    /// Remove the object.
    Delete,
    /// Change nothing.
    Keep,
}

struct Inner {
    revision: u64,
    objects: HashMap<GroupResource, BTreeMap<ObjectKey, Value>>,
    log: VecDeque<Arc<Event>>,
    /// Oldest revision a watch may start from (events after it are all in the log).
    compacted: u64,
}

/// Where a watch starts: the logged events it must replay, the receiver of later events,
/// and the revision it starts at.
pub type WatchStart = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>, u64);

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<Event>>,
    history: usize,
}

/// The outcome of [`Store::write`]: the object after the write (or as it was, for `Keep`),
/// and the event if anything was written.
pub struct Written {
    /// The object after the write; for a delete, its final state.
    pub object: Option<Value>,
    /// The event of the write, if any.
    pub event: Option<Arc<Event>>,
}

impl Store {
    /// A store that keeps the newest `history` events for watches.
    pub fn new(history: usize) -> Self {
        let (events, _) = broadcast::channel(history.clamp(1024, 65536));
        Self {
            inner: Mutex::new(Inner {
                revision: 1,
                objects: HashMap::new(),
                log: VecDeque::new(),
                compacted: 1,
            }),
            events,
            history: history.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock would leave a half-applied write; writes are
        // pure JSON edits computed before any mutation, so the data stays consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// One object.
    pub fn get(&self, gr: &GroupResource, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(gr)
            .and_then(|m| m.get(&(namespace.to_string(), name.to_string())))
            .cloned()
    }

    /// All objects of a resource (in one namespace, or all), sorted by namespace and name,
    /// with the revision they were read at.
    pub fn list(&self, gr: &GroupResource, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = match inner.objects.get(gr) {
            Some(m) => match namespace {
                Some(ns) => m
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
                None => m.values().cloned().collect(),
            },
            None => Vec::new(),
        };
        (items, inner.revision)
    }

    /// Names of the resources that hold at least one object in `namespace`.
    pub fn resources_in_namespace(&self, namespace: &str) -> Vec<GroupResource> {
        let inner = self.lock();
        inner
            .objects
            .iter()
            .filter(|(_, m)| {
                m.range((namespace.to_string(), String::new())..)
                    .next()
                    .is_some_and(|((n, _), _)| n == namespace)
            })
            .map(|(gr, _)| gr.clone())
            .collect()
    }

    /// Atomically reads an object, lets `decide` choose a write, and applies it.
    ///
    /// `decide` runs under the store lock: it must be quick and must not call the store.
    /// The store stamps `metadata.resourceVersion` on what it writes.
    ///
    /// # Errors
    /// Whatever `decide` returns.
    pub fn write<E>(
        &self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        decide: impl FnOnce(Option<&Value>) -> Result<Write, E>,
    ) -> Result<Written, E> {
        let mut inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let current = inner.objects.get(gr).and_then(|m| m.get(&key));
        let decision = decide(current)?;
        let previous = current.cloned();
        let (kind, object) = match decision {
            Write::Keep => {
                return Ok(Written {
                    object: previous,
                    event: None,
                });
            }
            Write::Put(mut object) => {
                let revision = inner.revision + 1;
                object["metadata"]["resourceVersion"] = json!(revision.to_string());
                inner.revision = revision;
                inner
                    .objects
                    .entry(gr.clone())
                    .or_default()
                    .insert(key, object.clone());
                let kind = if previous.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (kind, object)
            }
            Write::Delete => {
                let Some(mut object) = previous.clone() else {
                    return Ok(Written {
                        object: None,
                        event: None,
                    });
                };
                let revision = inner.revision + 1;
                inner.revision = revision;
                if let Some(m) = inner.objects.get_mut(gr) {
                    m.remove(&key);
                }
                object["metadata"]["resourceVersion"] = json!(revision.to_string());
                (EventType::Deleted, object)
            }
        };
        let event = Arc::new(Event {
            revision: inner.revision,
            kind,
            gr: gr.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            object: object.clone(),
            previous,
        });
        inner.log.push_back(event.clone());
        while inner.log.len() > self.history {
            if let Some(old) = inner.log.pop_front() {
                inner.compacted = old.revision;
            }
        }
        // Sent under the lock so subscribers see events in revision order.
        let _ = self.events.send(event.clone());
        Ok(Written {
            object: Some(object),
            event: Some(event),
        })
    }

    /// Like [`Store::write`] but changes nothing (`dryRun=All`): returns what the object
    /// would be after the write — a new object without a resourceVersion, an updated one
    /// with its current resourceVersion, a deleted one as it is — and no event.
    ///
    /// # Errors
    /// Whatever `decide` returns.
    pub fn preview<E>(
        &self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        decide: impl FnOnce(Option<&Value>) -> Result<Write, E>,
    ) -> Result<Written, E> {
        let inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let current = inner.objects.get(gr).and_then(|m| m.get(&key));
        let object = match decide(current)? {
            Write::Keep | Write::Delete => current.cloned(),
            Write::Put(mut object) => {
                match current {
                    Some(c) => {
                        object["metadata"]["resourceVersion"] =
                            c["metadata"]["resourceVersion"].clone()
                    }
                    None => {
                        if let Some(m) = object["metadata"].as_object_mut() {
                            m.remove("resourceVersion");
                        }
                    }
                }
                Some(object)
            }
        };
        Ok(Written {
            object,
            event: None,
        })
    }

    /// Starts a watch after `from`: the logged events newer than `from`, and a receiver of
    /// all later ones. `None` starts at the current revision.
    ///
    /// # Errors
    /// [`StoreError::Expired`] when events after `from` were compacted away.
    pub fn watch(&self, from: Option<u64>) -> Result<WatchStart, StoreError> {
        let inner = self.lock();
        let receiver = self.events.subscribe();
        let from = from.unwrap_or(inner.revision);
        if from < inner.compacted {
            return Err(StoreError::Expired {
                requested: from,
                oldest: inner.compacted,
            });
        }
        let backlog = inner
            .log
            .iter()
            .filter(|e| e.revision > from)
            .cloned()
            .collect();
        Ok((backlog, receiver, inner.revision))
    }

    /// Lists a resource and subscribes to later events at the same revision, atomically.
    pub fn list_and_watch(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> (Vec<Value>, broadcast::Receiver<Arc<Event>>, u64) {
        let inner = self.lock();
        let receiver = self.events.subscribe();
        let items = match inner.objects.get(gr) {
            Some(m) => m
                .iter()
                .filter(|((n, _), _)| namespace.is_none_or(|ns| ns == n))
                .map(|(_, v)| v.clone())
                .collect(),
            None => Vec::new(),
        };
        (items, receiver, inner.revision)
    }

    /// Drops all logged events, as an etcd compaction does: watches from before now expire.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.log.clear();
        inner.compacted = inner.revision;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> GroupResource {
        GroupResource::new("", "configmaps")
    }

    fn put(store: &Store, name: &str) -> u64 {
        let w = store
            .write::<()>(&cm(), "ns", name, |_| {
                Ok(Write::Put(json!({"metadata": {"name": name}})))
            })
            .unwrap();
        w.event.unwrap().revision
    }

    #[test]
    fn every_write_takes_the_next_global_revision() {
        let store = Store::new(100);
        let a = put(&store, "a");
        let b = put(&store, "b");
        assert_eq!(b, a + 1);
        assert_eq!(
            store.get(&cm(), "ns", "b").unwrap()["metadata"]["resourceVersion"],
            b.to_string()
        );
    }

    #[test]
    fn a_delete_event_carries_the_revision_of_the_delete() {
        let store = Store::new(100);
        put(&store, "a");
        let w = store
            .write::<()>(&cm(), "ns", "a", |_| Ok(Write::Delete))
            .unwrap();
        let e = w.event.unwrap();
        assert_eq!(e.kind, EventType::Deleted);
        assert_eq!(
            e.object["metadata"]["resourceVersion"],
            e.revision.to_string()
        );
        assert!(store.get(&cm(), "ns", "a").is_none());
    }

    #[test]
    fn a_watch_from_a_compacted_revision_expires() {
        let store = Store::new(2);
        let first = put(&store, "a");
        put(&store, "b");
        put(&store, "c");
        assert!(matches!(
            store.watch(Some(first - 1)),
            Err(StoreError::Expired { .. })
        ));
        let (backlog, _, _) = store.watch(Some(first + 1)).unwrap();
        assert_eq!(backlog.len(), 1);
    }

    #[test]
    fn lists_are_sorted_and_scoped_to_a_namespace() {
        let store = Store::new(10);
        put(&store, "b");
        put(&store, "a");
        store
            .write::<()>(&cm(), "other", "c", |_| {
                Ok(Write::Put(json!({"metadata": {"name": "c"}})))
            })
            .unwrap();
        let (items, _) = store.list(&cm(), Some("ns"));
        let names: Vec<_> = items
            .iter()
            .map(|o| o["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, vec![json!("a"), json!("b")]);
        assert_eq!(store.list(&cm(), None).0.len(), 3);
    }
}
