//! Shared informers: a watch-fed cache of one resource type that tells its subscribers
//! about every change after applying it, as client-go's shared informers do.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use futures::StreamExt as _;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A task that is aborted when this handle is dropped.
pub(crate) struct AbortOnDrop(Option<JoinHandle<()>>);

impl AbortOnDrop {
    /// Spawns `future` on the current runtime.
    pub(crate) fn spawn(future: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(Some(tokio::spawn(future)))
    }

    /// Asks the task to stop.
    pub(crate) fn abort(&self) {
        if let Some(handle) = &self.0 {
            handle.abort();
        }
    }

    /// Waits until the task has ended (after [`AbortOnDrop::abort`] or by itself).
    pub(crate) async fn join(mut self) {
        if let Some(handle) = self.0.take() {
            let _ = handle.await;
        }
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Namespace and name of an object (namespace empty for cluster-scoped ones).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectKey {
    /// The namespace, or empty.
    pub(crate) namespace: String,
    /// The name.
    pub(crate) name: String,
}

impl ObjectKey {
    /// A key from its parts.
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The key of an object.
    pub(crate) fn of<K: Resource>(object: &K) -> Self {
        Self::new(
            object.meta().namespace.as_deref().unwrap_or_default(),
            object.meta().name.as_deref().unwrap_or_default(),
        )
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// One change a cache applied.
pub(crate) enum Change<K> {
    /// Added (`old` is `None`) or modified.
    Applied {
        /// The previous state, if the cache had one.
        old: Option<Arc<K>>,
        /// The new state.
        new: Arc<K>,
    },
    /// Deleted (also reported for objects missing from a relist): the last known state.
    Deleted(Arc<K>),
}

impl<K> Change<K> {
    /// The object after the change (for a deletion, its last state).
    pub(crate) fn object(&self) -> &Arc<K> {
        match self {
            Change::Applied { new, .. } => new,
            Change::Deleted(old) => old,
        }
    }
}

type Handler<K> = Arc<dyn Fn(&Change<K>) + Send + Sync>;

struct Inner<K> {
    objects: RwLock<HashMap<ObjectKey, Arc<K>>>,
    handlers: RwLock<Vec<Handler<K>>>,
    ready: watch::Sender<bool>,
}

/// The cache of one resource type, filled by [`spawn`].
pub(crate) struct Cache<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Resource> Default for Cache<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Resource> Cache<K> {
    /// An empty cache that is not ready yet.
    pub(crate) fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                objects: RwLock::new(HashMap::new()),
                handlers: RwLock::new(Vec::new()),
                ready: watch::channel(false).0,
            }),
        }
    }

    fn objects(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ObjectKey, Arc<K>>> {
        self.inner.objects.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached object, if any.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.objects()
            .get(&ObjectKey::new(namespace, name))
            .cloned()
    }

    /// Every cached object.
    pub(crate) fn list(&self) -> Vec<Arc<K>> {
        self.objects().values().cloned().collect()
    }

    /// The cached objects of one namespace.
    pub(crate) fn list_in(&self, namespace: &str) -> Vec<Arc<K>> {
        self.objects()
            .iter()
            .filter(|(k, _)| k.namespace == namespace)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The cached objects that satisfy `keep`.
    pub(crate) fn filter(&self, keep: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.objects()
            .values()
            .filter(|o| keep(o))
            .cloned()
            .collect()
    }

    /// Waits until the first list has been applied.
    pub(crate) async fn wait_ready(&self) {
        let mut rx = self.inner.ready.subscribe();
        let _ = rx.wait_for(|ready| *ready).await;
    }

    /// Calls `handler` after every change from now on, and at once with every object
    /// already cached (as additions), so that no subscriber misses a state.
    ///
    /// # Caveats
    /// The handler runs on the informer's task while it holds a lock: it must be quick
    /// and must not subscribe.
    pub(crate) fn subscribe(&self, handler: impl Fn(&Change<K>) + Send + Sync + 'static) {
        let handler: Handler<K> = Arc::new(handler);
        let mut handlers = self
            .inner
            .handlers
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let existing: Vec<Arc<K>> = self.objects().values().cloned().collect();
        for new in existing {
            handler(&Change::Applied { old: None, new });
        }
        handlers.push(handler);
    }

    fn notify(&self, changes: &[Change<K>]) {
        let handlers: Vec<Handler<K>> = self
            .inner
            .handlers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for change in changes {
            for handler in &handlers {
                handler(change);
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ObjectKey, Arc<K>>> {
        self.inner
            .objects
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn apply(&self, object: K) {
        let new = Arc::new(object);
        let old = self
            .write()
            .insert(ObjectKey::of(new.as_ref()), new.clone());
        self.notify(&[Change::Applied { old, new }]);
    }

    fn delete(&self, object: K) {
        let key = ObjectKey::of(&object);
        let last = self
            .write()
            .remove(&key)
            .unwrap_or_else(|| Arc::new(object));
        self.notify(&[Change::Deleted(last)]);
    }

    /// Replaces the content after a (re)list and reports what changed meanwhile.
    fn replace(&self, fresh: HashMap<ObjectKey, Arc<K>>) {
        let mut changes = Vec::new();
        {
            let mut objects = self.write();
            let previous = std::mem::replace(&mut *objects, fresh);
            for (key, new) in objects.iter() {
                let old = previous.get(key).cloned();
                let same = old.as_ref().is_some_and(|o| {
                    o.meta().resource_version == new.meta().resource_version
                        && o.meta().uid == new.meta().uid
                });
                if !same {
                    changes.push(Change::Applied {
                        old,
                        new: new.clone(),
                    });
                }
            }
            for (key, old) in previous {
                if !objects.contains_key(&key) {
                    changes.push(Change::Deleted(old));
                }
            }
        }
        self.inner.ready.send_replace(true);
        self.notify(&changes);
    }
}

/// Starts the watch that fills `cache`: list, then watch, relisting when the server says
/// the resourceVersion is too old, retrying with kube-runtime's default backoff.
pub(crate) fn spawn<K>(api: Api<K>, config: watcher::Config, cache: Cache<K>) -> AbortOnDrop
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let what = std::any::type_name::<K>();
    AbortOnDrop::spawn(async move {
        let stream = watcher::watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut buffer: Option<HashMap<ObjectKey, Arc<K>>> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => buffer = Some(HashMap::new()),
                Ok(Event::InitApply(object)) => {
                    buffer
                        .get_or_insert_with(HashMap::new)
                        .insert(ObjectKey::of(&object), Arc::new(object));
                }
                Ok(Event::InitDone) => cache.replace(buffer.take().unwrap_or_default()),
                Ok(Event::Apply(object)) => cache.apply(object),
                Ok(Event::Delete(object)) => cache.delete(object),
                Err(error) => {
                    tracing::debug!(what, %error, "watch failed; retrying");
                }
            }
        }
    })
}

/// The `namespace/name` of an object, for logs.
pub(crate) fn name_of<K: Resource>(object: &K) -> String {
    let name = object.name_any();
    match object.namespace() {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    }
}
