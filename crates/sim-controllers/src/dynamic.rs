//! Informers for every served resource type that can be listed and watched, found by
//! discovery and kept in step with CustomResourceDefinitions: the view of "everything"
//! that the garbage collector and the namespace controller work from.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::{ApiResource, Discovery, Scope};
use kube::runtime::watcher;
use tokio::sync::{Notify, watch};

use super::informer::{self, AbortOnDrop, Cache, Change};

/// One served resource type.
#[derive(Clone, Debug)]
pub(crate) struct ResourceInfo {
    /// Group, version, kind and plural.
    pub(crate) ar: ApiResource,
    /// Namespaced or cluster-scoped.
    pub(crate) namespaced: bool,
    /// The verbs discovery announces.
    pub(crate) verbs: Vec<String>,
}

impl ResourceInfo {
    /// Whether discovery announces `verb`.
    pub(crate) fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// Whether this is `group`/`plural`.
    pub(crate) fn is(&self, group: &str, plural: &str) -> bool {
        self.ar.group == group && self.ar.plural == plural
    }

    /// An API for objects of this type in `namespace` (ignored when cluster-scoped).
    pub(crate) fn api(&self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        if self.namespaced && !namespace.is_empty() {
            Api::namespaced_with(client.clone(), namespace, &self.ar)
        } else {
            Api::all_with(client.clone(), &self.ar)
        }
    }
}

/// Called after every change of any monitored type.
pub(crate) type Handler = Arc<dyn Fn(&ResourceInfo, &Change<DynamicObject>) + Send + Sync>;

struct Monitor {
    info: ResourceInfo,
    cache: Cache<DynamicObject>,
    _task: AbortOnDrop,
}

struct Inner {
    client: Client,
    period: Duration,
    resources: RwLock<Vec<ResourceInfo>>,
    monitors: RwLock<HashMap<(String, String), Monitor>>,
    handlers: RwLock<Vec<Handler>>,
    rediscover: Notify,
    discovered: watch::Sender<bool>,
    /// CRD changes seen, and how many of them the last discovery started after.
    crd_changes: AtomicU64,
    discovered_after: AtomicU64,
    /// One discovery at a time.
    discovering: tokio::sync::Mutex<()>,
}

/// The set of monitors; clones share it.
#[derive(Clone)]
pub(crate) struct Hub {
    inner: Arc<Inner>,
}

/// A hub reference that does not keep it alive (for handlers the hub itself holds).
#[derive(Clone)]
pub(crate) struct WeakHub(Weak<Inner>);

impl WeakHub {
    /// The hub, while it exists.
    pub(crate) fn upgrade(&self) -> Option<Hub> {
        self.0.upgrade().map(|inner| Hub { inner })
    }
}

impl Hub {
    /// A hub that discovers with `client` every `period` (and whenever a CRD changes).
    pub(crate) fn new(client: Client, period: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                period,
                resources: RwLock::new(Vec::new()),
                monitors: RwLock::new(HashMap::new()),
                handlers: RwLock::new(Vec::new()),
                rediscover: Notify::new(),
                discovered: watch::channel(false).0,
                crd_changes: AtomicU64::new(0),
                discovered_after: AtomicU64::new(0),
                discovering: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// A reference that does not keep the hub alive.
    pub(crate) fn downgrade(&self) -> WeakHub {
        WeakHub(Arc::downgrade(&self.inner))
    }

    /// Calls `handler` after every change of every monitored type, including the objects
    /// already cached.
    pub(crate) fn subscribe(
        &self,
        handler: impl Fn(&ResourceInfo, &Change<DynamicObject>) + Send + Sync + 'static,
    ) {
        let handler: Handler = Arc::new(handler);
        self.inner
            .handlers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(handler.clone());
        for (info, cache) in self.caches() {
            for new in cache.list() {
                handler(&info, &Change::Applied { old: None, new });
            }
        }
    }

    /// Starts discovery: at once, every period, and when a CRD changes. The task keeps
    /// the hub (and with it every monitor) alive until it is aborted.
    pub(crate) fn start(&self) -> AbortOnDrop {
        let hub = self.clone();
        let period = self.inner.period;
        AbortOnDrop::spawn(async move {
            loop {
                let notified = hub.inner.rediscover.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                hub.discover().await;
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep(period) => {}
                }
            }
        })
    }

    async fn discover(&self) {
        let _one = self.inner.discovering.lock().await;
        let changes = self.inner.crd_changes.load(Ordering::SeqCst);
        let discovery = match Discovery::new(self.inner.client.clone()).run().await {
            Ok(d) => d,
            Err(error) => {
                tracing::warn!(%error, "resource discovery failed; keeping the known types");
                return;
            }
        };
        let mut found = Vec::new();
        for group in discovery.groups() {
            for (ar, caps) in group.recommended_resources() {
                found.push(ResourceInfo {
                    namespaced: caps.scope == Scope::Namespaced,
                    verbs: caps.operations.clone(),
                    ar,
                });
            }
        }
        let watchable: Vec<ResourceInfo> = found
            .iter()
            .filter(|r| r.supports("list") && r.supports("watch"))
            .cloned()
            .collect();
        *self
            .inner
            .resources
            .write()
            .unwrap_or_else(|p| p.into_inner()) = found;
        let mut monitors = self
            .inner
            .monitors
            .write()
            .unwrap_or_else(|p| p.into_inner());
        monitors.retain(|key, m| {
            watchable.iter().any(|r| {
                (r.ar.group.clone(), r.ar.plural.clone()) == *key
                    && r.ar.version == m.info.ar.version
            })
        });
        for info in watchable {
            let key = (info.ar.group.clone(), info.ar.plural.clone());
            if monitors.contains_key(&key) {
                continue;
            }
            let cache = Cache::<DynamicObject>::new();
            let hub = self.downgrade();
            let forwarded = info.clone();
            let is_crd = info.is("apiextensions.k8s.io", "customresourcedefinitions");
            cache.subscribe(move |change| {
                let Some(hub) = hub.upgrade() else { return };
                if is_crd {
                    hub.inner.crd_changes.fetch_add(1, Ordering::SeqCst);
                    hub.inner.rediscover.notify_one();
                }
                let handlers = hub
                    .inner
                    .handlers
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                for handler in handlers {
                    handler(&forwarded, change);
                }
            });
            let task = informer::spawn(
                Api::<DynamicObject>::all_with(self.inner.client.clone(), &info.ar),
                watcher::Config::default(),
                cache.clone(),
            );
            monitors.insert(
                key,
                Monitor {
                    info,
                    cache,
                    _task: task,
                },
            );
        }
        drop(monitors);
        self.inner
            .discovered_after
            .fetch_max(changes, Ordering::SeqCst);
        self.inner.discovered.send_replace(true);
    }

    /// Runs discovery now if a CRD changed since the last one started, then waits (up to
    /// `patience` each) until every monitor has listed its type: what a controller calls
    /// before it relies on knowing every type (orphaning, foreground deletion, emptying a
    /// namespace).
    pub(crate) async fn refresh(&self, patience: Duration) {
        let seen = self.inner.crd_changes.load(Ordering::SeqCst);
        if seen > self.inner.discovered_after.load(Ordering::SeqCst) {
            self.discover().await;
        }
        self.wait_synced(patience).await;
    }

    /// Every discovered resource type (not only the monitored ones).
    pub(crate) fn resources(&self) -> Vec<ResourceInfo> {
        self.inner
            .resources
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The type of `group`/`plural`.
    pub(crate) fn resource(&self, group: &str, plural: &str) -> Option<ResourceInfo> {
        self.inner
            .resources
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|r| r.is(group, plural))
            .cloned()
    }

    /// The type an owner reference's `apiVersion` and `kind` name: the exact version if
    /// served, else any served version of the group.
    pub(crate) fn resource_for(&self, api_version: &str, kind: &str) -> Option<ResourceInfo> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let resources = self
            .inner
            .resources
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let of_kind = || {
            resources
                .iter()
                .filter(|r| r.ar.group == group && r.ar.kind == kind)
        };
        of_kind()
            .find(|r| r.ar.version == version)
            .or_else(|| of_kind().next())
            .cloned()
    }

    /// The cache of `group`/`plural`, if monitored.
    pub(crate) fn cache(&self, group: &str, plural: &str) -> Option<Cache<DynamicObject>> {
        self.inner
            .monitors
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(group.to_string(), plural.to_string()))
            .map(|m| m.cache.clone())
    }

    /// Every monitored type with its cache.
    pub(crate) fn caches(&self) -> Vec<(ResourceInfo, Cache<DynamicObject>)> {
        self.inner
            .monitors
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|m| (m.info.clone(), m.cache.clone()))
            .collect()
    }

    /// Waits until discovery has run once and every monitor has listed its type; gives
    /// up on a monitor after `patience` (its type may have gone).
    pub(crate) async fn wait_synced(&self, patience: Duration) {
        let mut discovered = self.inner.discovered.subscribe();
        let _ = discovered.wait_for(|d| *d).await;
        for (info, cache) in self.caches() {
            if tokio::time::timeout(patience, cache.wait_ready())
                .await
                .is_err()
            {
                tracing::warn!(resource = %info.ar.plural, "cache did not sync; going on without it");
            }
        }
    }
}
