//! In-memory lock and pod backends with API-server semantics, for the election tests.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::core::Status;
use tokio::sync::mpsc;

use super::{LockBackend, LockEvent, PodBackend};
use crate::clock::lock;

/// A real-shaped API error.
pub(crate) fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
    kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
}

/// 409 AlreadyExists.
pub(crate) fn already_exists() -> kube::Error {
    api_error(409, "AlreadyExists", "object already exists")
}

/// 409 Conflict.
pub(crate) fn conflict() -> kube::Error {
    api_error(
        409,
        "Conflict",
        "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
    )
}

/// 503 ServiceUnavailable.
pub(crate) fn unavailable() -> kube::Error {
    api_error(
        503,
        "ServiceUnavailable",
        "the server is currently unable to handle the request",
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Get,
    Create,
    Update,
}

struct State<T> {
    obj: Option<T>,
    rv: u64,
    ops: Vec<String>,
    failures: HashMap<Op, VecDeque<kube::Error>>,
    unavailable: bool,
    hang: bool,
    watchers: Vec<mpsc::UnboundedSender<LockEvent<T>>>,
    /// Runs while a GET is in flight, after the object was read (e.g. a clock advancing:
    /// a slow answer).
    during_get: Option<Arc<dyn Fn() + Send + Sync>>,
}

/// One lock object with resourceVersion semantics, injectable failures and an op log.
pub(crate) struct FakeLock<T> {
    state: Arc<Mutex<State<T>>>,
}

impl<T> Clone for FakeLock<T> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
        }
    }
}

impl<T: Resource + Clone + Send + Sync + 'static> FakeLock<T> {
    pub(crate) fn empty() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                obj: None,
                rv: 100,
                ops: Vec::new(),
                failures: HashMap::new(),
                unavailable: false,
                hang: false,
                watchers: Vec::new(),
                during_get: None,
            })),
        }
    }

    /// A lock holding `obj` (written as if by someone else).
    pub(crate) fn with(obj: T) -> Self {
        let f = Self::empty();
        f.put(obj);
        f
    }

    /// The stored object.
    pub(crate) fn current(&self) -> Option<T> {
        lock(&self.state).obj.clone()
    }

    /// The operations made through the backend, e.g. `["get", "create"]`; failed ones end in `(error)`.
    pub(crate) fn ops(&self) -> Vec<String> {
        lock(&self.state).ops.clone()
    }

    /// Makes the next `op` fail with `err`.
    pub(crate) fn fail_next(&self, op: Op, err: kube::Error) {
        lock(&self.state)
            .failures
            .entry(op)
            .or_default()
            .push_back(err);
    }

    /// Makes every request fail with 503 (`true`) or succeed again (`false`).
    pub(crate) fn set_unavailable(&self, on: bool) {
        lock(&self.state).unavailable = on;
    }

    /// Makes every request hang forever (`true`) or answer again (`false`).
    /// Runs `f` during every later GET, after the object was read.
    pub(crate) fn during_get(&self, f: impl Fn() + Send + Sync + 'static) {
        lock(&self.state).during_get = Some(Arc::new(f));
    }

    pub(crate) fn set_hang(&self, on: bool) {
        lock(&self.state).hang = on;
    }

    /// Whether requests currently hang.
    fn hangs(&self) -> bool {
        lock(&self.state).hang
    }

    /// Writes `obj` as another client would (new resourceVersion, watchers notified).
    pub(crate) fn put(&self, mut obj: T) {
        let mut s = lock(&self.state);
        s.rv += 1;
        stamp(&mut obj, s.rv);
        s.obj = Some(obj.clone());
        notify(&mut s, &LockEvent::Applied(obj));
    }

    /// Deletes the object as another client (or the garbage collector) would.
    pub(crate) fn delete(&self) {
        let mut s = lock(&self.state);
        s.obj = None;
        notify(&mut s, &LockEvent::Deleted);
    }

    fn take_failure(s: &mut State<T>, op: Op, name: &str) -> Option<kube::Error> {
        let e = s.failures.get_mut(&op).and_then(VecDeque::pop_front);
        let e = e.or_else(|| s.unavailable.then(unavailable));
        s.ops.push(if e.is_some() {
            format!("{name}(error)")
        } else {
            name.to_owned()
        });
        e
    }
}

fn stamp<T: Resource>(obj: &mut T, rv: u64) {
    let meta = obj.meta_mut();
    meta.resource_version = Some(rv.to_string());
    if meta.uid.is_none() {
        meta.uid = Some(format!("uid-{rv}"));
    }
}

fn notify<T: Clone>(s: &mut State<T>, ev: &LockEvent<T>) {
    s.watchers.retain(|w| w.send(ev.clone()).is_ok());
}

impl<T: Resource + Clone + Send + Sync + 'static> LockBackend<T> for FakeLock<T> {
    async fn get(&self) -> Result<Option<T>, kube::Error> {
        if self.hangs() {
            std::future::pending::<()>().await;
        }
        let (obj, during) = {
            let mut s = lock(&self.state);
            if let Some(e) = Self::take_failure(&mut s, Op::Get, "get") {
                return Err(e);
            }
            (s.obj.clone(), s.during_get.clone())
        };
        if let Some(during) = during {
            during();
        }
        Ok(obj)
    }

    async fn create(&self, obj: &T) -> Result<T, kube::Error> {
        if self.hangs() {
            std::future::pending::<()>().await;
        }
        let mut s = lock(&self.state);
        if let Some(e) = Self::take_failure(&mut s, Op::Create, "create") {
            return Err(e);
        }
        if s.obj.is_some() {
            return Err(already_exists());
        }
        s.rv += 1;
        let mut obj = obj.clone();
        obj.meta_mut().uid = None;
        stamp(&mut obj, s.rv);
        s.obj = Some(obj.clone());
        notify(&mut s, &LockEvent::Applied(obj.clone()));
        Ok(obj)
    }

    async fn update(&self, obj: &T) -> Result<T, kube::Error> {
        if self.hangs() {
            std::future::pending::<()>().await;
        }
        let mut s = lock(&self.state);
        if let Some(e) = Self::take_failure(&mut s, Op::Update, "update") {
            return Err(e);
        }
        let Some(cur) = &s.obj else {
            return Err(api_error(404, "NotFound", "not found"));
        };
        if cur.meta().resource_version != obj.meta().resource_version {
            return Err(conflict());
        }
        let uid = cur.meta().uid.clone();
        s.rv += 1;
        let mut obj = obj.clone();
        obj.meta_mut().uid = uid;
        stamp(&mut obj, s.rv);
        s.obj = Some(obj.clone());
        notify(&mut s, &LockEvent::Applied(obj.clone()));
        Ok(obj)
    }

    fn watch(&self) -> BoxStream<'static, LockEvent<T>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = lock(&self.state);
        let initial = s.obj.clone().map_or(LockEvent::Deleted, LockEvent::Applied);
        let _ = tx.send(initial);
        s.watchers.push(tx);
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
            .boxed()
    }
}

/// A watch of one pod, by name.
type PodWatcher = (String, mpsc::UnboundedSender<LockEvent<Pod>>);

/// Pods by name; deleting a pod also deletes the lock it owns (standing in for garbage collection).
#[derive(Clone)]
pub(crate) struct FakePods {
    pods: Arc<Mutex<HashMap<String, Pod>>>,
    ops: Arc<Mutex<Vec<String>>>,
    gc: Option<FakeLock<k8s_openapi::api::core::v1::ConfigMap>>,
    watchers: Arc<Mutex<Vec<PodWatcher>>>,
}

impl FakePods {
    pub(crate) fn new(pods: impl IntoIterator<Item = Pod>) -> Self {
        let pods = pods
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        Self {
            pods: Arc::new(Mutex::new(pods)),
            ops: Arc::default(),
            gc: None,
            watchers: Arc::default(),
        }
    }

    /// Garbage-collect `lock` when the pod owning it is deleted.
    pub(crate) fn collecting(
        mut self,
        lock: &FakeLock<k8s_openapi::api::core::v1::ConfigMap>,
    ) -> Self {
        self.gc = Some(lock.clone());
        self
    }

    pub(crate) fn ops(&self) -> Vec<String> {
        lock(&self.ops).clone()
    }

    /// Adds or replaces a pod (e.g. its status changed), telling its watchers.
    pub(crate) fn put(&self, pod: Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        lock(&self.pods).insert(name.clone(), pod.clone());
        self.notify(&name, &LockEvent::Applied(pod));
    }

    fn notify(&self, name: &str, ev: &LockEvent<Pod>) {
        lock(&self.watchers).retain(|(n, w)| n != name || w.send(ev.clone()).is_ok());
    }

    pub(crate) fn exists(&self, name: &str) -> bool {
        lock(&self.pods).contains_key(name)
    }
}

impl PodBackend for FakePods {
    async fn get(&self, name: &str) -> Result<Option<Pod>, kube::Error> {
        lock(&self.ops).push(format!("get pod {name}"));
        Ok(lock(&self.pods).get(name).cloned())
    }

    async fn delete(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        lock(&self.ops).push(format!("delete pod {name}"));
        let removed = {
            let mut pods = lock(&self.pods);
            match pods.get(name) {
                Some(p) if p.metadata.uid.as_deref() == Some(uid) => pods.remove(name),
                Some(_) => return Err(api_error(409, "Conflict", "precondition failed: uid")),
                None => return Err(api_error(404, "NotFound", "pod not found")),
            }
        };
        if removed.is_some() {
            self.notify(name, &LockEvent::Deleted);
        }
        if let (Some(gc), Some(_)) = (&self.gc, removed) {
            let owned = gc.current().is_some_and(|cm| {
                cm.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid)
            });
            if owned {
                gc.delete();
            }
        }
        Ok(())
    }

    fn watch(&self, name: &str) -> BoxStream<'static, LockEvent<Pod>> {
        lock(&self.ops).push(format!("watch pod {name}"));
        let (tx, rx) = mpsc::unbounded_channel();
        let initial = lock(&self.pods)
            .get(name)
            .cloned()
            .map_or(LockEvent::Deleted, LockEvent::Applied);
        let _ = tx.send(initial);
        lock(&self.watchers).push((name.to_owned(), tx));
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
            .boxed()
    }
}
