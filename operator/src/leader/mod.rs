//! Leader election: leader-for-life ([`for_life`]) and leader-with-lease ([`lease`]), and what both share.
//!
//! Both modes are state machines over a [`LockBackend`] (get / create / update / watch
//! of one named lock object) and a [`Clock`], so every decision is unit-tested with a
//! fake backend and an injected clock. What the rest of the process sees is a
//! [`Leadership`]: whether this replica leads, when leadership was last confirmed (read
//! by the [`WriteGuard`] before every reconcile write and by the [`HealthzAdaptor`]),
//! and the `leader_election_master_status{name}` gauge.

pub mod for_life;
pub mod lease;

#[cfg(test)]
pub(crate) mod fake;

use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Resource};
use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::clock::{Clock, lock};
use crate::metrics::Metrics;

/// How a standby waits for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StandbyMode {
    /// Watch the lock and act the moment it is released, deleted or expires (default).
    #[default]
    Watch,
    /// Poll as the anchors do (client-go: RetryPeriod ×[1, 2.2); operator-lib: 1 s doubling to 16 s, +20 %).
    Poll,
}

/// Whether reconcile writes are fenced by recent leadership confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WriteGuardMode {
    /// Every write first checks that leadership was confirmed within RenewDeadline (default).
    #[default]
    On,
    /// No check: reproduces the anchors, where a frozen leader can write after a takeover.
    Off,
}

/// A change to the watched lock object.
#[derive(Debug, Clone, PartialEq)]
pub enum LockEvent<T> {
    /// The lock exists with this content (added, modified, or listed after a reconnect).
    Applied(T),
    /// The lock does not exist (deleted, or absent from a re-list).
    Deleted,
}

/// The operations an election needs on its one named lock object.
///
/// Errors are the real [`kube::Error`]s (a fake returns `Status` objects shaped like
/// the API server's), so the election classifies Conflict / AlreadyExists / NotFound
/// the same way in tests and in production.
pub trait LockBackend<T>: Send + Sync + 'static {
    /// Reads the lock; `None` when it does not exist.
    fn get(&self) -> impl Future<Output = Result<Option<T>, kube::Error>> + Send;
    /// Creates the lock (AlreadyExists when someone else was first).
    fn create(&self, obj: &T) -> impl Future<Output = Result<T, kube::Error>> + Send;
    /// Replaces the lock, guarded by `obj`'s resourceVersion (Conflict when it changed).
    fn update(&self, obj: &T) -> impl Future<Output = Result<T, kube::Error>> + Send;
    /// A stream of changes to the lock, starting with its current state.
    fn watch(&self) -> BoxStream<'static, LockEvent<T>>;
}

/// A [`LockBackend`] over the Kubernetes API for one named object.
#[derive(Clone)]
pub struct KubeLock<T: Resource> {
    api: Api<T>,
    name: String,
}

impl<T: Resource> KubeLock<T> {
    /// The lock `name` reached through `api` (a namespaced Api).
    #[must_use]
    pub fn new(api: Api<T>, name: &str) -> Self {
        Self {
            api,
            name: name.into(),
        }
    }
}

impl<T> LockBackend<T> for KubeLock<T>
where
    T: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
{
    fn get(&self) -> impl Future<Output = Result<Option<T>, kube::Error>> + Send {
        self.api.get_opt(&self.name)
    }

    fn create(&self, obj: &T) -> impl Future<Output = Result<T, kube::Error>> + Send {
        let api = self.api.clone();
        let obj = obj.clone();
        async move { api.create(&PostParams::default(), &obj).await }
    }

    fn update(&self, obj: &T) -> impl Future<Output = Result<T, kube::Error>> + Send {
        let api = self.api.clone();
        let obj = obj.clone();
        let name = self.name.clone();
        async move { api.replace(&name, &PostParams::default(), &obj).await }
    }

    fn watch(&self) -> BoxStream<'static, LockEvent<T>> {
        watch_named(self.api.clone(), &self.name, "the lock")
    }
}

/// Changes to the one object `name` reachable through `api`, starting with its current
/// state ([`LockEvent::Deleted`] when absent); failures are logged as of `what` and retried
/// with backoff.
fn watch_named<T>(api: Api<T>, name: &str, what: &'static str) -> BoxStream<'static, LockEvent<T>>
where
    T: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let name = name.to_owned();
    watcher(api, config)
        .default_backoff()
        .scan(false, move |seen, ev| {
            let out = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    *seen = true;
                    Some(LockEvent::Applied(o))
                }
                Ok(watcher::Event::Delete(_)) => Some(LockEvent::Deleted),
                Ok(watcher::Event::Init) => {
                    *seen = false;
                    None
                }
                Ok(watcher::Event::InitDone) => (!*seen).then_some(LockEvent::Deleted),
                Err(error) => {
                    tracing::warn!(
                        object = %name,
                        error = %error,
                        "watch of {what} failed; retrying",
                    );
                    None
                }
            };
            std::future::ready(Some(out))
        })
        .filter_map(std::future::ready)
        .boxed()
}

/// The pod operations leader-for-life needs besides the lock.
pub trait PodBackend: Send + Sync + 'static {
    /// Reads a pod in the lock's namespace; `None` when it does not exist.
    fn get(&self, name: &str) -> impl Future<Output = Result<Option<Pod>, kube::Error>> + Send;
    /// Deletes a pod, only if it still has `uid`.
    fn delete(&self, name: &str, uid: &str)
    -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// A stream of changes to one pod, starting with its current state.
    fn watch(&self, name: &str) -> BoxStream<'static, LockEvent<Pod>>;
}

/// A [`PodBackend`] over the Kubernetes API.
#[derive(Clone)]
pub struct KubePods {
    api: Api<Pod>,
}

impl KubePods {
    /// Pods reached through `api` (a namespaced Api).
    #[must_use]
    pub fn new(api: Api<Pod>) -> Self {
        Self { api }
    }
}

impl PodBackend for KubePods {
    fn get(&self, name: &str) -> impl Future<Output = Result<Option<Pod>, kube::Error>> + Send {
        let api = self.api.clone();
        let name = name.to_owned();
        async move { api.get_opt(&name).await }
    }

    fn delete(
        &self,
        name: &str,
        uid: &str,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send {
        let api = self.api.clone();
        let name = name.to_owned();
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        async move { api.delete(&name, &dp).await.map(|_| ()) }
    }

    fn watch(&self, name: &str) -> BoxStream<'static, LockEvent<Pod>> {
        watch_named(self.api.clone(), name, "the leader pod")
    }
}

#[derive(Debug)]
struct LeaderState {
    leading: bool,
    confirmed_at: Option<Instant>,
}

/// This replica's leadership as the rest of the process sees it; cheap to clone.
///
/// Setting it also sets `leader_election_master_status{name}`.
#[derive(Debug, Clone)]
pub struct Leadership {
    name: Arc<str>,
    metrics: Metrics,
    state: Arc<Mutex<LeaderState>>,
}

impl Leadership {
    /// A standby for lock `name`; reports the gauge as 0.
    #[must_use]
    pub fn new(name: &str, metrics: Metrics) -> Self {
        metrics.set_leader(name, false);
        Self {
            name: name.into(),
            metrics,
            state: Arc::new(Mutex::new(LeaderState {
                leading: false,
                confirmed_at: None,
            })),
        }
    }

    /// The lock name (the gauge's `name` label).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Marks this replica the leader, confirmed at `at`.
    pub fn start(&self, at: Instant) {
        let mut s = lock(&self.state);
        s.leading = true;
        s.confirmed_at = Some(at);
        self.metrics.set_leader(&self.name, true);
    }

    /// Records a successful renewal that began at `at`.
    pub fn confirm(&self, at: Instant) {
        let mut s = lock(&self.state);
        if s.leading {
            s.confirmed_at = Some(s.confirmed_at.map_or(at, |c| c.max(at)));
        }
    }

    /// Marks this replica as no longer leading.
    pub fn stop(&self) {
        let mut s = lock(&self.state);
        s.leading = false;
        self.metrics.set_leader(&self.name, false);
    }

    /// Whether this replica currently leads.
    #[must_use]
    pub fn is_leading(&self) -> bool {
        lock(&self.state).leading
    }

    /// When leadership was last confirmed (the start of the last successful renewal).
    #[must_use]
    pub fn confirmed_at(&self) -> Option<Instant> {
        lock(&self.state).confirmed_at
    }
}

/// Why a reconcile write was refused by the [`WriteGuard`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuardError {
    /// This replica does not lead.
    #[error("write refused: this replica is not the leader")]
    NotLeading,
    /// Leadership was last confirmed too long ago.
    #[error(
        "write refused: leadership last confirmed {since:?} ago, more than the renew deadline {limit:?}"
    )]
    NotConfirmed {
        /// Time since the last confirmation.
        since: Duration,
        /// The renew deadline.
        limit: Duration,
    },
}

#[derive(Clone)]
enum GuardKind {
    Off,
    Leading {
        leadership: Leadership,
        clock: Arc<dyn Clock>,
        within: Option<Duration>,
    },
}

/// Checked before every write a reconcile makes: refuses writes unless leadership is current.
///
/// # Guarantees
/// With a lease, a write is allowed only while `now − confirmed_at < RenewDeadline` on
/// the monotonic clock, where `confirmed_at` is when the last *successful* renewal was
/// *sent*. Other candidates cannot take over before they have observed that renewal
/// for LeaseDuration, so a leader frozen past its lease refuses to write when it wakes.
///
/// # Caveats
/// A write already in flight when the deadline passes is not recalled; the margin
/// LeaseDuration − RenewDeadline is what covers it. A process stopped (SIGSTOP, a paused
/// VM) between the check and the send sends the write when it resumes, however late: no
/// check in the client can close that window, only a precondition the API server enforces.
#[derive(Clone)]
pub struct WriteGuard {
    kind: GuardKind,
}

impl Debug for WriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            GuardKind::Off => f.write_str("WriteGuard(off)"),
            GuardKind::Leading { within, .. } => write!(f, "WriteGuard(within {within:?})"),
        }
    }
}

impl WriteGuard {
    /// A guard that allows every write (`--write-guard off`, or no election).
    #[must_use]
    pub fn off() -> Self {
        Self {
            kind: GuardKind::Off,
        }
    }

    /// A guard requiring leadership, confirmed within `within` when given (lease mode).
    #[must_use]
    pub fn leading(
        leadership: Leadership,
        clock: Arc<dyn Clock>,
        within: Option<Duration>,
    ) -> Self {
        Self {
            kind: GuardKind::Leading {
                leadership,
                clock,
                within,
            },
        }
    }

    /// Whether this guard lets every write through (`--write-guard off`).
    #[must_use]
    pub fn is_off(&self) -> bool {
        matches!(self.kind, GuardKind::Off)
    }

    /// Allows or refuses a write now.
    ///
    /// # Errors
    /// [`GuardError`] when this replica does not lead or its leadership is stale.
    pub fn check(&self) -> Result<(), GuardError> {
        match &self.kind {
            GuardKind::Off => Ok(()),
            GuardKind::Leading {
                leadership,
                clock,
                within,
            } => {
                if !leadership.is_leading() {
                    return Err(GuardError::NotLeading);
                }
                let (Some(limit), Some(at)) = (within, leadership.confirmed_at()) else {
                    return Ok(());
                };
                let since = clock.now().saturating_duration_since(at);
                if since >= *limit {
                    Err(GuardError::NotConfirmed {
                        since,
                        limit: *limit,
                    })
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// client-go's leader healthz adaptor: a leader that has not renewed for LeaseDuration + timeout is unhealthy.
#[derive(Clone)]
pub struct HealthzAdaptor {
    leadership: Option<Leadership>,
    clock: Arc<dyn Clock>,
    limit: Option<Duration>,
}

impl Debug for HealthzAdaptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthzAdaptor")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl HealthzAdaptor {
    /// Always healthy (no election, or leader-for-life whose lock never expires).
    #[must_use]
    pub fn always(clock: Arc<dyn Clock>) -> Self {
        Self {
            leadership: None,
            clock,
            limit: None,
        }
    }

    /// Unhealthy when leading and not renewed within `lease_duration + timeout`.
    #[must_use]
    pub fn lease(
        leadership: Leadership,
        clock: Arc<dyn Clock>,
        lease_duration: Duration,
        timeout: Duration,
    ) -> Self {
        Self {
            leadership: Some(leadership),
            clock,
            limit: Some(lease_duration + timeout),
        }
    }

    /// `Ok` when healthy, otherwise the failure message.
    ///
    /// # Errors
    /// `failed election to renew leadership on lease <name>` when stale.
    pub fn check(&self) -> Result<(), String> {
        let (Some(l), Some(limit)) = (&self.leadership, self.limit) else {
            return Ok(());
        };
        if !l.is_leading() {
            return Ok(());
        }
        match l.confirmed_at() {
            Some(at) if self.clock.now().saturating_duration_since(at) > limit => Err(format!(
                "failed election to renew leadership on lease {}",
                l.name()
            )),
            _ => Ok(()),
        }
    }
}

/// A duration in `[d, d + max_factor·d)`, as client-go's `wait.Jitter`.
#[must_use]
pub fn jitter(d: Duration, max_factor: f64) -> Duration {
    let r: f64 = rand::rng().random_range(0.0..1.0);
    d + d.mul_f64(max_factor * r)
}

/// Runs `fut` until `shutdown` fires; `None` when it did.
pub(crate) async fn unless_shutdown<F: Future>(
    shutdown: &mut crate::shutdown::Shutdown,
    fut: F,
) -> Option<F::Output> {
    tokio::select! {
        out = fut => Some(out),
        () = shutdown.wait() => None,
    }
}

/// This replica's election identity: `<POD_NAME or hostname>_<random uuid>` (controller-runtime's form).
#[must_use]
pub fn identity(pod_name: Option<&str>) -> String {
    let base = pod_name
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .or_else(|| hostname::get().ok().and_then(|h| h.into_string().ok()))
        .unwrap_or_else(|| "memcached-operator".into());
    format!("{base}_{}", uuid::Uuid::new_v4())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    fn leadership() -> (Leadership, FakeClock) {
        (Leadership::new("lock", Metrics::new()), FakeClock::new())
    }

    #[test]
    fn the_write_guard_refuses_writes_from_a_standby() {
        let (l, clock) = leadership();
        let guard = WriteGuard::leading(l, Arc::new(clock), Some(Duration::from_secs(10)));
        assert_eq!(guard.check(), Err(GuardError::NotLeading));
    }

    #[test]
    fn the_write_guard_allows_writes_within_the_renew_deadline_and_refuses_after() {
        let (l, clock) = leadership();
        l.start(clock.now());
        let guard = WriteGuard::leading(
            l.clone(),
            Arc::new(clock.clone()),
            Some(Duration::from_secs(10)),
        );
        clock.advance(Duration::from_millis(9_999));
        assert_eq!(guard.check(), Ok(()));
        clock.advance(Duration::from_millis(1));
        assert!(matches!(
            guard.check(),
            Err(GuardError::NotConfirmed { .. })
        ));
        l.confirm(clock.now());
        assert_eq!(guard.check(), Ok(()));
    }

    #[test]
    fn the_write_guard_off_allows_everything() {
        assert_eq!(WriteGuard::off().check(), Ok(()));
    }

    #[test]
    fn the_leadership_sets_the_master_status_gauge() {
        let metrics = Metrics::new();
        let l = Leadership::new("lock", metrics.clone());
        assert_eq!(metrics.leader_status("lock"), Some(0));
        l.start(Instant::now());
        assert_eq!(metrics.leader_status("lock"), Some(1));
        l.stop();
        assert_eq!(metrics.leader_status("lock"), Some(0));
    }

    #[test]
    fn healthz_is_healthy_for_a_standby_and_for_a_leader_within_lease_duration_plus_timeout() {
        let (l, clock) = leadership();
        let h = HealthzAdaptor::lease(
            l.clone(),
            Arc::new(clock.clone()),
            Duration::from_secs(15),
            Duration::from_secs(20),
        );
        assert_eq!(h.check(), Ok(()));
        l.start(clock.now());
        clock.advance(Duration::from_secs(35));
        assert_eq!(h.check(), Ok(()));
        clock.advance(Duration::from_millis(1));
        assert_eq!(
            h.check(),
            Err("failed election to renew leadership on lease lock".into())
        );
        l.stop();
        assert_eq!(
            h.check(),
            Ok(()),
            "far expired but no longer leading is healthy"
        );
    }

    #[test]
    fn jitter_stays_within_the_factor() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(2), 1.2);
            assert!(j >= Duration::from_secs(2) && j < Duration::from_millis(4400));
        }
    }

    #[test]
    fn the_identity_is_the_pod_name_and_a_uuid() {
        let id = identity(Some("memcached-operator-abc"));
        let (name, uuid) = id.split_once('_').unwrap();
        assert_eq!(name, "memcached-operator-abc");
        assert!(uuid::Uuid::parse_str(uuid).is_ok());
    }
}
