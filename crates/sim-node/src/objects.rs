//! The ConfigMaps and Secrets the node's pods' volumes read, each kept current by a watch
//! of its own, as the kubelet's watch-based object manager keeps them (its default
//! `configMapAndSecretChangeDetectionStrategy: Watch`): the first read of an object starts
//! its watch (a list and watch of that one name) and waits for the list; later reads, by
//! any pod of the node, make no request. A watch that fails starts again with the pod
//! watch's quick back-off, so a repaired node's objects are current at once. A watch that
//! nobody read for [`IDLE`] stops, as the kubelet's stops once unread for its resync
//! interval.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt as _;
use kube::Api;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::backoff::QuickBackoff;
use super::runtime::lock;

/// How long a watch runs on unread (the kubelet: its resync interval, at least a minute).
pub const IDLE: Duration = Duration::from_secs(60);

/// What a watch knows of its object: nothing before its first list, then whether the
/// object exists and what it is.
type Seen<K> = Option<Option<Arc<K>>>;

struct Entry<K> {
    seen: watch::Receiver<Seen<K>>,
    last_read: Instant,
    task: AbortHandle,
}

type Entries<K> = Mutex<HashMap<(String, String), Entry<K>>>;

/// The watched objects of one kind; dropping it stops every watch.
pub(crate) struct Watched<K> {
    client: kube::Client,
    entries: Arc<Entries<K>>,
}

impl<K> Watched<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    /// No object watched yet; watches go through `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            client,
            entries: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The object `namespace/name` as last seen, `None` when it does not exist; the first
    /// read of an object waits for its watch's first list.
    ///
    /// # Caveats
    /// Waits for as long as the list takes (a partitioned node's forever): the caller bounds
    /// it.
    pub(crate) async fn get(&self, namespace: &str, name: &str) -> Option<K> {
        let mut seen = self.watch(namespace, name);
        let known = seen.wait_for(Option::is_some).await.ok()?;
        known.as_ref().and_then(|o| o.as_deref().cloned())
    }

    /// Starts watching `namespace/name` unless its watch runs, and counts this as a read:
    /// what the kubelet does when a pod that names the object arrives (its object manager's
    /// `RegisterPod`), so that the first list is under way while the pod's sandbox is made.
    pub(crate) fn watch(&self, namespace: &str, name: &str) -> watch::Receiver<Seen<K>> {
        let mut entries = lock(&self.entries);
        let key = (namespace.to_string(), name.to_string());
        let entry = entries.entry(key.clone()).or_insert_with(|| {
            let (tx, seen) = watch::channel(None);
            let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
            let task = tokio::spawn(keep(api, key, tx, Arc::downgrade(&self.entries)));
            Entry {
                seen,
                last_read: Instant::now(),
                task: task.abort_handle(),
            }
        });
        entry.last_read = Instant::now();
        entry.seen.clone()
    }
}

impl<K> Drop for Watched<K> {
    fn drop(&mut self) {
        for (_, entry) in lock(&self.entries).drain() {
            entry.task.abort();
        }
    }
}

/// Watches one object into `seen` until it has been unread for [`IDLE`], then forgets it.
async fn keep<K>(
    api: Api<K>,
    key: (String, String),
    seen: watch::Sender<Seen<K>>,
    entries: Weak<Entries<K>>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={}", key.1));
    let mut events = watcher::watcher(api, config)
        .backoff(QuickBackoff::default())
        .boxed();
    let mut listed: Option<Option<Arc<K>>> = None;
    let mut idle_check = tokio::time::interval_at(Instant::now() + IDLE, IDLE / 4);
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Init)) => listed = Some(None),
                Some(Ok(Event::InitApply(object))) => listed = Some(Some(Arc::new(object))),
                Some(Ok(Event::InitDone)) => {
                    seen.send_replace(Some(listed.take().flatten()));
                }
                Some(Ok(Event::Apply(object))) => {
                    seen.send_replace(Some(Some(Arc::new(object))));
                }
                Some(Ok(Event::Delete(_))) => {
                    seen.send_replace(Some(None));
                }
                Some(Err(e)) => {
                    tracing::debug!(namespace = %key.0, name = %key.1, error = %e, "object watch failed");
                }
                None => {
                    if let Some(entries) = entries.upgrade() {
                        lock(&entries).remove(&key);
                    }
                    break;
                }
            },
            _ = idle_check.tick() => {
                let Some(entries) = entries.upgrade() else { break };
                let mut entries = lock(&entries);
                let unread = entries
                    .get(&key)
                    .is_some_and(|e| e.last_read.elapsed() >= IDLE);
                if unread {
                    entries.remove(&key);
                    break;
                }
            }
        }
    }
}
