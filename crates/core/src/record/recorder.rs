//! The recorder: watches the lock objects, the operator's pods, the Memcached objects, their
//! Deployments and the Events, scrapes every replica's `/metrics`, follows the audit of
//! writes and the fault log, and turns all of it into a [`History`] with timestamps from
//! one clock.
//!
//! What it records:
//! - [`Observation::Lock`] from watches of both a `coordination.k8s.io/v1` Lease and a `v1`
//!   ConfigMap named after the lock: changes of holder or transitions only, not renewals;
//!   a Lease's holder is read from its `holderIdentity` as [`HolderNaming`] says;
//! - [`Observation::Pod`] from a watch of the pods matching the selector: changes of phase,
//!   readiness or termination (and `Deleted` once a pod is gone);
//! - [`Observation::Memcached`] from a watch of the Memcached objects of the workload
//!   namespaces: when one appears, when its size, generation, finalizer, termination or
//!   number of listed nodes changes, and when it is gone;
//! - [`Observation::Deployment`] likewise from a watch of the Deployments of the workload
//!   namespaces (replicas, ready, available, owner, termination), the operator's own
//!   namespace left out;
//! - [`Observation::Event`] from a watch of the core `v1` Events (the API the operator's
//!   event recorder writes) of the operator's and the workload namespaces: each Event once,
//!   again when its count grows;
//! - [`Observation::Gauge`] (every sample) and [`Observation::Reconciles`] (changes only)
//!   from a scrape of every known pod's metrics ([`MetricsEndpoint`]: plain HTTP, or HTTPS
//!   with a bearer token as kubebuilder v4 serves them; the ways there are in
//!   [`super::scrape`]), [`Observation::Down`] when a scrape is refused (nothing listens:
//!   no process runs), and a [`Observation::Note`] when a replica's scrapes start being
//!   denied (401 or 403: the token lacks the `metrics-reader` role);
//! - [`Observation::Write`] from the audit feed: writes sent from the operator's pods;
//! - [`Observation::Fault`] from the fault log, merged in when a snapshot is taken;
//! - [`Observation::Note`] from [`Recorder::note`].
//!
//! Watch, scrape and note entries are stamped with `chrono::Utc::now()` when observed, audit
//! entries with the audit event's own time and faults with the fault's time; on the
//! simulator all of them read the same clock.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, watcher as watch_stream};
use kube::{Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::audit::{AuditCatchUp, AuditFeed, AuditRecord};
use crate::fault::FaultLog;
use crate::record::scrape::{ScrapeError, Scraper};
use crate::record::{Change, Entry, History, Observation};
use plain_http::PlainHttpError;

pub use crate::record::scrape::{MetricsEndpoint, MetricsScheme, SCRAPE_TIMEOUT};

/// How long [`Recorder::caught_up`] waits for the audit feed.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Recorder::stop`] waits for each task to end before aborting it.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How far before the lock was seen created its creating request may lie (see
/// [`Recorder::snapshot`]).
const CREATE_WINDOW: Duration = Duration::from_secs(2);

/// The gauge of the leader election, as controller-runtime names it.
const LEADER_GAUGE: &str = "leader_election_master_status";

/// The reconcile counter, as controller-runtime names it.
const RECONCILE_TOTAL: &str = "controller_runtime_reconcile_total";

/// What to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    /// The operator's namespace.
    pub namespace: String,
    /// The name of the lock (a Lease or ConfigMap of that name), e.g. `memcached-operator-lock`.
    pub lock_name: String,
    /// The label selector of the operator's pods, e.g. `app.kubernetes.io/name=memcached-operator`.
    pub pod_selector: String,
    /// Where each replica serves its metrics: [`MetricsEndpoint::http`] on 8080 for the
    /// bundled operator; HTTPS on 8443 with a bearer token for a kubebuilder v4 scaffold.
    pub metrics: MetricsEndpoint,
    /// How a Lease's `holderIdentity` names the replica holding it.
    pub holder_naming: HolderNaming,
    /// Scrape through the API server instead of the pod IP directly: its `pods/proxy`, or a
    /// port-forward when a bearer token is to be sent (`pods/proxy` cannot carry one).
    pub scrape_through_api: bool,
    /// How often each replica is scraped (e.g. 100 ms).
    pub scrape_interval: Duration,
    /// The namespaces whose Memcached objects, Deployments and Events are recorded (the
    /// operator's namespace adds its Events; its Deployments, the operator's own, are left
    /// out); empty for every namespace, as on a cluster of the scenario's own.
    pub workload_namespaces: Vec<String>,
}

impl RecorderConfig {
    /// Where Memcached objects and Deployments are watched: each workload namespace, or
    /// `None` (all namespaces) when there are none.
    fn workload_scopes(&self) -> Vec<Option<String>> {
        if self.workload_namespaces.is_empty() {
            vec![None]
        } else {
            self.workload_namespaces.iter().cloned().map(Some).collect()
        }
    }

    /// Where Events are watched: the workload namespaces and the operator's, or all
    /// namespaces when there are no workload namespaces.
    fn event_scopes(&self) -> Vec<Option<String>> {
        let mut scopes = self.workload_scopes();
        if !scopes.contains(&None) && !scopes.contains(&Some(self.namespace.clone())) {
            scopes.push(Some(self.namespace.clone()));
        }
        scopes
    }
}

/// How a Lease's `holderIdentity` names the replica (the pod) holding it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HolderNaming {
    /// client-go's and controller-runtime's `<hostname>_<uuid>`: the pod is everything
    /// before the last `_` (the whole identity when it has none).
    #[default]
    BeforeUnderscore,
    /// The whole `holderIdentity` is the pod's host name.
    Whole,
}

impl HolderNaming {
    /// The replica named by a lease's `holderIdentity`; `None` for an empty identity.
    #[must_use]
    pub fn holder_of_identity(self, identity: &str) -> Option<String> {
        if identity.is_empty() {
            return None;
        }
        let replica = match self {
            Self::BeforeUnderscore => identity.rsplit_once('_').map_or(identity, |(pod, _)| pod),
            Self::Whole => identity,
        };
        Some(replica.to_string())
    }

    /// The replica holding a Lease, as the history records it.
    #[must_use]
    pub fn lease_holder(self, lease: &Lease) -> Option<String> {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .and_then(|identity| self.holder_of_identity(identity))
    }
}

/// The Memcached resource (`cache.example.com/v1alpha1`, plural `memcacheds`).
pub fn memcached_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cache.example.com", "v1alpha1", "Memcached"),
        "memcacheds",
    )
}

/// Where the recorder gets the audit of writes and the fault log (the simulator gives
/// both; other providers may give none).
#[derive(Debug, Default)]
pub struct Feeds {
    /// The live audit of the API server.
    pub audit: Option<AuditFeed>,
    /// The cluster's faults, whose log is merged into every snapshot.
    pub faults: Option<FaultLog>,
}

/// A running recorder. Dropping it stops its tasks (without a final snapshot).
///
/// # Guarantees
/// - Watches are retried after errors with a short backoff (100 ms doubling to 2 s); a
///   re-list that no longer shows an object records it as gone.
/// - Scrapes run concurrently with [`SCRAPE_TIMEOUT`] each (plus the opening of a
///   port-forward), at most one in flight per replica: a frozen replica delays none of the
///   others. A refused scrape records the replica down (once, until it answers again); a
///   denied one (401 or 403) a note (once per change of what it says, until the replica
///   answers or goes down); any other failure records nothing.
/// - Snapshots are rebuilt from what was observed, so faults and writes appear once
///   however many snapshots are taken.
///
/// # Caveats
/// - Direct scrapes need the pod IPs reachable from the test process (they are on the
///   simulator); [`RecorderConfig::scrape_through_api`] goes through the API server's
///   `pods/proxy` instead, as on kind or any cluster, or through a port-forward when a
///   bearer token is to be sent; the simulated API server serves no port-forward.
/// - An HTTPS endpoint's certificate is not verified (see [`super::scrape`]).
/// - Audit events missed because the recorder fell behind the feed are reported as a
///   [`Observation::Note`], not recovered.
/// - A Lease and a ConfigMap of the lock's name are both recorded under that name; an
///   operator uses one or the other.
/// - Until the Memcached CRD is served its watch fails and is retried: a Memcached made
///   meanwhile is stamped when the watch first lists it.
/// - A deletion carries the object as the API server last stored it: a Memcached let go by
///   the update that removed its last finalizer is recorded deleted with that finalizer.
pub struct Recorder {
    shared: Arc<Shared>,
    faults: Option<FaultLog>,
    catch_up: Option<AuditCatchUp>,
    config: RecorderConfig,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Recorder {
    /// Starts recording at once: spawns the lock, pod, Memcached, Deployment and Event
    /// watches, the scrape loop and the audit follower.
    ///
    /// # Panics
    /// Outside a Tokio runtime (it spawns tasks).
    pub fn start(client: Client, config: RecorderConfig, feeds: Feeds) -> Recorder {
        let shared = Arc::new(Shared::default());
        let (shutdown, stop_rx) = watch::channel(false);
        let ns = config.namespace.as_str();
        let by_name =
            watcher::Config::default().fields(&format!("metadata.name={}", config.lock_name));
        let mut tasks = vec![
            tokio::spawn(watch_lock(
                Api::<Lease>::namespaced(client.clone(), ns),
                by_name.clone(),
                LockWatch {
                    lock: config.lock_name.clone(),
                    resource: "leases",
                    state_of: lease_state,
                    naming: config.holder_naming,
                },
                shared.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(watch_lock(
                Api::<ConfigMap>::namespaced(client.clone(), ns),
                by_name,
                LockWatch {
                    lock: config.lock_name.clone(),
                    resource: "configmaps",
                    state_of: config_map_state,
                    naming: config.holder_naming,
                },
                shared.clone(),
                stop_rx.clone(),
            )),
            tokio::spawn(watch_pods(
                Api::<Pod>::namespaced(client.clone(), ns),
                watcher::Config::default().labels(&config.pod_selector),
                shared.clone(),
                stop_rx.clone(),
            )),
        ];
        let scraper = if config.scrape_through_api {
            Scraper::through_api(
                config.metrics.clone(),
                client.clone(),
                config.namespace.clone(),
            )
        } else {
            Scraper::direct(config.metrics.clone())
        };
        match scraper {
            Ok(scraper) => tasks.push(tokio::spawn(scrape_loop(
                shared.clone(),
                config.lock_name.clone(),
                scraper,
                config.scrape_interval,
                stop_rx.clone(),
            ))),
            Err(e) => {
                let text = format!("recorder: no scrapes: {}", crate::error_chain(&e));
                tracing::error!("{text}");
                shared.record(Utc::now(), Observation::Note { text });
            }
        }
        for scope in config.workload_scopes() {
            let memcacheds = match &scope {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &memcached_resource()),
                None => Api::all_with(client.clone(), &memcached_resource()),
            };
            tasks.push(tokio::spawn(watch_objects::<MemcachedState>(
                memcacheds,
                None,
                shared.clone(),
                stop_rx.clone(),
            )));
            tasks.push(tokio::spawn(watch_objects::<DeploymentState>(
                scoped(&client, scope.as_deref()),
                // The operator's own Deployment: its pods are recorded.
                Some(config.namespace.clone()),
                shared.clone(),
                stop_rx.clone(),
            )));
        }
        for scope in config.event_scopes() {
            tasks.push(tokio::spawn(watch_objects::<EventState>(
                scoped(&client, scope.as_deref()),
                None,
                shared.clone(),
                stop_rx.clone(),
            )));
        }
        let mut catch_up = None;
        if let Some(feed) = feeds.audit {
            let (audit, catching_up) = feed.into_parts();
            catch_up = Some(catching_up);
            tasks.push(tokio::spawn(follow_audit(
                audit,
                config.namespace.clone(),
                shared.clone(),
                stop_rx,
            )));
        }
        Recorder {
            shared,
            faults: feeds.faults,
            catch_up,
            config,
            shutdown,
            tasks,
        }
    }

    /// Adds a [`Observation::Note`] stamped now.
    pub fn note(&self, text: &str) {
        self.shared.record(
            Utc::now(),
            Observation::Note {
                text: text.to_string(),
            },
        );
    }

    /// Everything recorded so far, with the fault log and the writes of the operator's pods
    /// merged in time order.
    ///
    /// A write counts as election traffic when it touched the lock (a Lease or ConfigMap of
    /// the lock's name in the namespace) or an Event, or deleted one of the operator's Pods
    /// (a standby freeing the lock of an evicted leader). The audit does not name the object of
    /// a `create`; such a create of a Lease or ConfigMap counts as election traffic when it
    /// failed with 409 (the lock existed) or when it is the first successful one by the
    /// replica the lock was then seen created for, at most 2 s earlier.
    pub fn snapshot(&self) -> History {
        let mut all: Vec<Entry> = {
            let inner = self.shared.lock();
            let mut all = inner.entries.clone();
            let mut used = HashSet::new();
            let creates: HashSet<u64> = inner
                .created
                .iter()
                .filter_map(|c| {
                    let seq = lock_create_of(c, &inner.writes, &self.config, &used)?;
                    used.insert(seq);
                    Some(seq)
                })
                .collect();
            all.extend(inner.writes.iter().filter_map(|ev| {
                let pod = ev.pod.as_ref()?;
                if !inner.seen.contains(&pod.name) {
                    return None;
                }
                Some(Entry {
                    time: ev.time,
                    observation: Observation::Write {
                        replica: pod.name.clone(),
                        verb: ev.verb.clone(),
                        resource: if ev.subresource.is_empty() {
                            ev.resource.clone()
                        } else {
                            format!("{}/{}", ev.resource, ev.subresource)
                        },
                        namespace: ev.namespace.clone(),
                        name: ev.name.clone(),
                        code: ev.code,
                        election: is_election(ev, &self.config)
                            || creates.contains(&ev.seq)
                            || deletes_replica(ev, &self.config, &inner.seen),
                    },
                })
            }));
            all
        };
        if let Some(faults) = &self.faults {
            all.extend(faults.events().into_iter().map(|f| Entry {
                time: f.time,
                observation: Observation::Fault {
                    verb: f.verb,
                    target: f.target,
                    detail: f.detail,
                },
            }));
        }
        all.sort_by_key(|e| e.time);
        let mut history = History::new();
        for e in all {
            history.push(e.time, e.observation);
        }
        history
    }

    /// [`Recorder::snapshot`] once the audit feed has caught up: every write the API server
    /// had answered before this call is in it (after waiting at most 10 s for the feed, which
    /// a note in the history then says).
    ///
    /// A check that follows a wait calls this, not `snapshot`: the effect the wait saw can
    /// reach the harness before the audit of the writes that caused it reaches the recorder.
    pub async fn caught_up(&self) -> History {
        if let Some(catch_up) = &self.catch_up
            && let Some(published) = catch_up.published().await
        {
            let mut followed = self.shared.audit_seq.subscribe();
            let caught =
                tokio::time::timeout(CATCH_UP_TIMEOUT, followed.wait_for(|seq| *seq >= published))
                    .await
                    .is_ok_and(|waited| waited.is_ok());
            if !caught {
                let had = *followed.borrow();
                self.note(&format!(
                    "recorder: the audit feed had not caught up within {}s (request {had} of {published})",
                    CATCH_UP_TIMEOUT.as_secs()
                ));
            }
        }
        self.snapshot()
    }

    /// Stops every task (the audit follower first takes what is already queued) and returns
    /// the final snapshot. A task that does not end within 2 s is aborted.
    pub async fn stop(mut self) -> History {
        let _ = self.shutdown.send(true);
        for task in std::mem::take(&mut self.tasks) {
            let abort = task.abort_handle();
            if tokio::time::timeout(STOP_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        self.snapshot()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("config", &self.config)
            .field("entries", &self.shared.lock().entries.len())
            .finish_non_exhaustive()
    }
}

/// What one scrape of `/metrics` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scrape {
    /// `leader_election_master_status{name="<lock>"}`: 1 is leader, 0 standby; `None` when absent.
    pub leader: Option<bool>,
    /// `controller_runtime_reconcile_total` by `result`, summed over controllers.
    pub reconciles: BTreeMap<String, u64>,
}

/// Reads the leader gauge of `lock` and the reconcile counters from a Prometheus text
/// exposition. Lines it does not understand are skipped.
pub fn parse_metrics(text: &str, lock: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines() {
        let Some(Sample {
            name,
            labels,
            value,
        }) = parse_sample(line)
        else {
            continue;
        };
        let label = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        match name {
            LEADER_GAUGE if label("name") == Some(lock) => scrape.leader = Some(value >= 0.5),
            RECONCILE_TOTAL if value >= 0.0 => {
                if let Some(result) = label("result") {
                    *scrape.reconciles.entry(result.to_string()).or_insert(0) += value as u64;
                }
            }
            _ => {}
        }
    }
    scrape
}

/// One sample of a Prometheus text exposition.
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(String, String)>,
    value: f64,
}

/// One sample line (a trailing timestamp is ignored); `None` for comments and garbage.
fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let mut key = String::new();
        let close = loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => break i,
                ',' | ' ' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '"' => break,
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            other => value.push(other),
                        }
                    }
                    labels.push((std::mem::take(&mut key).trim().to_string(), value));
                }
                other => key.push(other),
            }
        };
        rest = &body[close + 1..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// GETs `http://<addr>/metrics` and returns the body (see [`plain_http::get`]).
///
/// # Errors
/// What [`plain_http::get`] reports, or a status other than 200.
pub async fn get_metrics(addr: SocketAddr, timeout: Duration) -> Result<String, PlainHttpError> {
    plain_http::get_text(addr, "/metrics", timeout).await
}

/// What the recorder has seen, shared by its tasks.
#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
    /// The `seq` of the last audit record the follower has taken.
    audit_seq: watch::Sender<u64>,
}

#[derive(Default)]
struct Inner {
    /// Lock, pod, gauge, reconcile and note entries, in the order recorded.
    entries: Vec<Entry>,
    /// Writes from pods in the namespace; attributed at snapshot time to the pods seen.
    writes: Vec<AuditRecord>,
    /// The operator's pods now.
    pods: BTreeMap<String, PodState>,
    /// Every pod that ever matched the selector.
    seen: BTreeSet<String>,
    /// When the lock was seen appearing, and for whom.
    created: Vec<Creation>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, time: DateTime<Utc>, observation: Observation) {
        self.lock().entries.push(Entry { time, observation });
    }

    /// The pods to scrape: every known pod with an IP, terminating ones included.
    fn targets(&self) -> Vec<(String, IpAddr)> {
        self.lock()
            .pods
            .iter()
            .filter_map(|(name, p)| Some((name.clone(), p.ip?)))
            .collect()
    }
}

/// The lock appeared (absent before) held by `holder`.
#[derive(Debug, Clone)]
struct Creation {
    time: DateTime<Utc>,
    resource: &'static str,
    holder: String,
}

/// The audit `seq` of the request that created the lock for `c`, if one is found.
fn lock_create_of(
    c: &Creation,
    writes: &[AuditRecord],
    config: &RecorderConfig,
    used: &HashSet<u64>,
) -> Option<u64> {
    let window = chrono::Duration::from_std(CREATE_WINDOW).unwrap_or_default();
    writes
        .iter()
        .filter(|ev| {
            ev.verb == "create"
                && ev.resource == c.resource
                && ev.subresource.is_empty()
                && ev.name.is_empty()
                && ev.namespace == config.namespace
                && (200..300).contains(&ev.code)
                && ev.pod.as_ref().is_some_and(|p| p.name == c.holder)
                && ev.time <= c.time
                && ev.time >= c.time - window
                && !used.contains(&ev.seq)
        })
        .min_by_key(|ev| (ev.time, ev.seq))
        .map(|ev| ev.seq)
}

/// Whether a write is election traffic by what the audit names: the lock, an Event, or a
/// create of a Lease or ConfigMap that failed because it existed.
fn is_election(ev: &AuditRecord, config: &RecorderConfig) -> bool {
    let events = ev.resource == "events" && matches!(ev.api_group.as_str(), "" | "events.k8s.io");
    let lock_kind = (ev.resource == "leases" && ev.api_group == "coordination.k8s.io")
        || (ev.resource == "configmaps" && ev.api_group.is_empty());
    let lock = lock_kind
        && ev.namespace == config.namespace
        && (ev.name == config.lock_name
            || (ev.name.is_empty() && ev.verb == "create" && ev.code == 409));
    events || lock
}

/// Whether a write deletes a Pod of the operator (one that matched the selector): a
/// standby under leader-for-life deleting an evicted or preempted leader's Pod so that the
/// lock it owns is collected, which is election traffic, not the work of a leader.
fn deletes_replica(ev: &AuditRecord, config: &RecorderConfig, replicas: &BTreeSet<String>) -> bool {
    ev.verb == "delete"
        && ev.resource == "pods"
        && ev.api_group.is_empty()
        && ev.subresource.is_empty()
        && ev.namespace == config.namespace
        && replicas.contains(&ev.name)
}

/// Who holds a lock object, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LockState {
    holder: Option<String>,
    transitions: Option<i64>,
}

fn lease_state(lease: &Lease, naming: HolderNaming) -> LockState {
    LockState {
        holder: naming.lease_holder(lease),
        transitions: lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .map(i64::from),
    }
}

/// A ConfigMap lock names its holder by its owner, whatever the naming.
fn config_map_state(cm: &ConfigMap, _naming: HolderNaming) -> LockState {
    LockState {
        holder: config_map_holder(cm),
        transitions: None,
    }
}

/// The replica holding a leader-for-life lock ConfigMap, as the history records it: its
/// Pod owner.
pub fn config_map_holder(cm: &ConfigMap) -> Option<String> {
    cm.owner_references()
        .iter()
        .find(|o| o.kind == "Pod")
        .map(|o| o.name.clone())
}

struct LockWatch<K> {
    lock: String,
    resource: &'static str,
    state_of: fn(&K, HolderNaming) -> LockState,
    naming: HolderNaming,
}

/// A watch stream retried with a short backoff.
fn retried<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = watcher::Result<Event<K>>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watch_stream(api, config).backoff(RetryBackoff::default())
}

async fn watch_lock<K>(
    api: Api<K>,
    config: watcher::Config,
    spec: LockWatch<K>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let stream = retried(api, config);
    futures::pin_mut!(stream);
    // `None`: the lock does not exist (as far as this watch knows).
    let mut last: Option<LockState> = None;
    let mut listed = false;
    // Records a change of (holder, transitions), and when the lock appears held, a creation
    // (seen in the first list too: the recorder may start just before the lock is made).
    let change = |state: Option<LockState>, rv: String, last: &mut Option<LockState>| {
        if state == *last {
            return;
        }
        let now = Utc::now();
        let mut inner = shared.lock();
        if last.is_none()
            && let Some(LockState {
                holder: Some(h), ..
            }) = &state
        {
            inner.created.push(Creation {
                time: now,
                resource: spec.resource,
                holder: h.clone(),
            });
        }
        let (holder, transitions) = state
            .clone()
            .map_or((None, None), |s| (s.holder, s.transitions));
        inner.entries.push(Entry {
            time: now,
            observation: Observation::Lock {
                lock: spec.lock.clone(),
                holder,
                transitions,
                resource_version: rv,
            },
        });
        *last = state;
    };
    let applied = |obj: &K| {
        (
            Some((spec.state_of)(obj, spec.naming)),
            obj.resource_version().unwrap_or_default(),
        )
    };
    loop {
        let event = tokio::select! {
            _ = stop.changed() => break,
            event = stream.next() => event,
        };
        match event {
            None => break,
            Some(Err(e)) => {
                tracing::warn!(lock = %spec.lock, resource = spec.resource, error = %e, "lock watch failed; retrying");
            }
            Some(Ok(Event::Apply(obj))) => {
                let (state, rv) = applied(&obj);
                change(state, rv, &mut last);
            }
            // The deleted object's resourceVersion is kept with the change.
            Some(Ok(Event::Delete(obj))) => {
                change(None, obj.resource_version().unwrap_or_default(), &mut last);
            }
            Some(Ok(Event::Init)) => listed = false,
            Some(Ok(Event::InitApply(obj))) => {
                listed = true;
                let (state, rv) = applied(&obj);
                change(state, rv, &mut last);
            }
            // A re-list without the lock: it was deleted while the watch was down.
            Some(Ok(Event::InitDone)) => {
                if !listed {
                    change(None, String::new(), &mut last);
                }
            }
        }
    }
}

/// A pod as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodState {
    phase: String,
    ready: bool,
    terminating: bool,
    ip: Option<IpAddr>,
}

impl PodState {
    fn of(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        PodState {
            phase: status
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            ip: status
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok()),
        }
    }

    fn observation(&self, name: &str) -> Observation {
        Observation::Pod {
            name: name.to_string(),
            phase: self.phase.clone(),
            ready: self.ready,
            terminating: self.terminating,
        }
    }
}

fn pod_seen(shared: &Shared, pod: &Pod) {
    let name = pod.name_any();
    let state = PodState::of(pod);
    let mut inner = shared.lock();
    inner.seen.insert(name.clone());
    let changed = inner.pods.get(&name).is_none_or(|p| {
        (&p.phase, p.ready, p.terminating) != (&state.phase, state.ready, state.terminating)
    });
    if changed {
        let observation = state.observation(&name);
        inner.entries.push(Entry {
            time: Utc::now(),
            observation,
        });
    }
    inner.pods.insert(name, state);
}

fn pod_gone(shared: &Shared, name: &str) {
    let mut inner = shared.lock();
    if inner.pods.remove(name).is_some() {
        inner.entries.push(Entry {
            time: Utc::now(),
            observation: Observation::Pod {
                name: name.to_string(),
                phase: "Deleted".into(),
                ready: false,
                terminating: true,
            },
        });
    }
}

async fn watch_pods(
    api: Api<Pod>,
    config: watcher::Config,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let stream = retried(api, config);
    futures::pin_mut!(stream);
    let mut listed = HashSet::new();
    loop {
        let event = tokio::select! {
            _ = stop.changed() => break,
            event = stream.next() => event,
        };
        match event {
            None => break,
            Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying"),
            Some(Ok(Event::Apply(pod))) => pod_seen(&shared, &pod),
            Some(Ok(Event::Delete(pod))) => pod_gone(&shared, &pod.name_any()),
            Some(Ok(Event::Init)) => listed.clear(),
            Some(Ok(Event::InitApply(pod))) => {
                listed.insert(pod.name_any());
                pod_seen(&shared, &pod);
            }
            Some(Ok(Event::InitDone)) => {
                let gone: Vec<String> = shared
                    .lock()
                    .pods
                    .keys()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                for name in gone {
                    pod_gone(&shared, &name);
                }
            }
        }
    }
}

/// An `Api` of `K` in `namespace`, or in every namespace.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What the history keeps of a watched object, and how a change of it is recorded.
trait Tracked: Clone + PartialEq + Debug + Send + 'static {
    /// The watched type.
    type Object: Resource + Clone + DeserializeOwned + Debug + Send + 'static;
    /// The resource, for log lines.
    const RESOURCE: &'static str;
    /// What is recorded of an object.
    fn of(object: &Self::Object) -> Self;
    /// The entry for a change of the object `namespace/name`; `None` when such a change is
    /// not recorded.
    fn observation(&self, namespace: &str, name: &str, change: Change) -> Option<Observation>;
}

/// What is recorded of a Memcached.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemcachedState {
    size: Option<i64>,
    generation: i64,
    finalizer: bool,
    terminating: bool,
    nodes: usize,
}

impl Tracked for MemcachedState {
    type Object = DynamicObject;
    const RESOURCE: &'static str = "memcacheds";

    fn of(mc: &DynamicObject) -> Self {
        MemcachedState {
            size: mc.data["spec"]["size"].as_i64(),
            generation: mc.metadata.generation.unwrap_or(0),
            finalizer: !mc.finalizers().is_empty(),
            terminating: mc.metadata.deletion_timestamp.is_some(),
            nodes: mc.data["status"]["nodes"]
                .as_array()
                .map_or(0, |nodes| nodes.len()),
        }
    }

    fn observation(&self, namespace: &str, name: &str, change: Change) -> Option<Observation> {
        Some(Observation::Memcached {
            namespace: namespace.to_string(),
            name: name.to_string(),
            change,
            size: self.size,
            generation: self.generation,
            finalizer: self.finalizer,
            terminating: self.terminating,
            nodes: self.nodes,
        })
    }
}

/// What is recorded of a Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DeploymentState {
    replicas: i32,
    ready: i32,
    available: i32,
    owner: Option<String>,
    terminating: bool,
}

impl Tracked for DeploymentState {
    type Object = Deployment;
    const RESOURCE: &'static str = "deployments";

    fn of(d: &Deployment) -> Self {
        let status = d.status.as_ref();
        let owners = d.owner_references();
        DeploymentState {
            replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ready: status.and_then(|s| s.ready_replicas).unwrap_or(0),
            available: status.and_then(|s| s.available_replicas).unwrap_or(0),
            owner: owners
                .iter()
                .find(|o| o.controller == Some(true))
                .or(owners.first())
                .map(|o| format!("{}/{}", o.kind, o.name)),
            terminating: d.metadata.deletion_timestamp.is_some(),
        }
    }

    fn observation(&self, namespace: &str, name: &str, change: Change) -> Option<Observation> {
        Some(Observation::Deployment {
            namespace: namespace.to_string(),
            name: name.to_string(),
            change,
            replicas: self.replicas,
            ready: self.ready,
            available: self.available,
            owner: self.owner.clone(),
            terminating: self.terminating,
        })
    }
}

/// What is recorded of an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EventState {
    involved: String,
    type_: String,
    reason: String,
    message: String,
    reporter: String,
    instance: String,
    count: i32,
}

impl Tracked for EventState {
    type Object = CoreEvent;
    const RESOURCE: &'static str = "events";

    fn of(ev: &CoreEvent) -> Self {
        let given = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        let source = ev.source.as_ref();
        let about = &ev.involved_object;
        EventState {
            involved: format!(
                "{}/{}",
                about.kind.as_deref().unwrap_or_default(),
                about.name.as_deref().unwrap_or_default()
            ),
            type_: ev.type_.clone().unwrap_or_default(),
            reason: ev.reason.clone().unwrap_or_default(),
            message: ev.message.clone().unwrap_or_default(),
            reporter: given(&ev.reporting_component)
                .or_else(|| source.and_then(|s| given(&s.component)))
                .unwrap_or_default(),
            instance: given(&ev.reporting_instance)
                .or_else(|| source.and_then(|s| given(&s.host)))
                .unwrap_or_default(),
            count: ev
                .count
                .or_else(|| ev.series.as_ref().and_then(|s| s.count))
                .unwrap_or(1),
        }
    }

    /// Events expire on their own: a deletion is not recorded.
    fn observation(&self, namespace: &str, _name: &str, change: Change) -> Option<Observation> {
        (change != Change::Deleted).then(|| Observation::Event {
            namespace: namespace.to_string(),
            involved: self.involved.clone(),
            type_: self.type_.clone(),
            reason: self.reason.clone(),
            message: self.message.clone(),
            reporter: self.reporter.clone(),
            instance: self.instance.clone(),
            count: self.count,
        })
    }
}

/// A watched object's namespace and name.
type Key = (String, String);

/// The objects of one watch as last recorded, with their uid: decides which changes are
/// worth an entry.
#[derive(Debug)]
struct Tracker<S> {
    known: BTreeMap<Key, (String, S)>,
}

impl<S> Default for Tracker<S> {
    fn default() -> Self {
        Self {
            known: BTreeMap::new(),
        }
    }
}

impl<S: Tracked> Tracker<S> {
    /// An object as seen (listed or watched): `Added` the first time, `Modified` when what
    /// is recorded of it changed, nothing otherwise, and `Deleted` then `Added` when a new
    /// object (another uid) took the name.
    fn seen(&mut self, key: Key, uid: String, state: S) -> Vec<(Change, S)> {
        match self.known.insert(key, (uid.clone(), state.clone())) {
            None => vec![(Change::Added, state)],
            Some((was, old)) if was != uid => {
                vec![(Change::Deleted, old), (Change::Added, state)]
            }
            Some((_, old)) if old == state => Vec::new(),
            Some(_) => vec![(Change::Modified, state)],
        }
    }

    /// An object deleted, as last seen (`last`, else as last recorded); nothing for an
    /// object never recorded.
    fn gone(&mut self, key: &Key, last: Option<S>) -> Option<(Change, S)> {
        let (_, known) = self.known.remove(key)?;
        Some((Change::Deleted, last.unwrap_or(known)))
    }

    /// After a re-list: the objects it did not show were deleted while the watch was down.
    fn relisted(&mut self, listed: &HashSet<Key>) -> Vec<(Key, Change, S)> {
        let missing: Vec<Key> = self
            .known
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        missing
            .into_iter()
            .filter_map(|key| {
                let (change, state) = self.gone(&key, None)?;
                Some((key, change, state))
            })
            .collect()
    }
}

/// Records the changes of the objects an `api` watches; objects in `skip_namespace` are
/// left out.
async fn watch_objects<S: Tracked>(
    api: Api<S::Object>,
    skip_namespace: Option<String>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let stream = retried(api, watcher::Config::default());
    futures::pin_mut!(stream);
    let mut tracker = Tracker::<S>::default();
    let mut listed: HashSet<Key> = HashSet::new();
    let record = |key: &Key, changes: Vec<(Change, S)>| {
        let now = Utc::now();
        let mut inner = shared.lock();
        for (change, state) in changes {
            if let Some(observation) = state.observation(&key.0, &key.1, change) {
                inner.entries.push(Entry {
                    time: now,
                    observation,
                });
            }
        }
    };
    let key_of = |o: &S::Object| (o.namespace().unwrap_or_default(), o.name_any());
    let skipped = |key: &Key| skip_namespace.as_deref() == Some(key.0.as_str());
    loop {
        let event = tokio::select! {
            _ = stop.changed() => break,
            event = stream.next() => event,
        };
        match event {
            None => break,
            Some(Err(e)) => {
                tracing::warn!(resource = S::RESOURCE, error = %e, "watch failed; retrying");
            }
            Some(Ok(Event::Apply(o) | Event::InitApply(o))) if skipped(&key_of(&o)) => {}
            Some(Ok(Event::Apply(o))) => {
                let key = key_of(&o);
                let changes = tracker.seen(key.clone(), o.uid().unwrap_or_default(), S::of(&o));
                record(&key, changes);
            }
            Some(Ok(Event::InitApply(o))) => {
                let key = key_of(&o);
                listed.insert(key.clone());
                let changes = tracker.seen(key.clone(), o.uid().unwrap_or_default(), S::of(&o));
                record(&key, changes);
            }
            Some(Ok(Event::Delete(o))) => {
                let key = key_of(&o);
                if let Some(change) = tracker.gone(&key, Some(S::of(&o))) {
                    record(&key, vec![change]);
                }
            }
            Some(Ok(Event::Init)) => listed.clear(),
            Some(Ok(Event::InitDone)) => {
                for (key, change, state) in tracker.relisted(&listed) {
                    record(&key, vec![(change, state)]);
                }
            }
        }
    }
}

/// What the scrape loop has recorded of each replica's failed scrapes, so that each failure
/// is recorded once per change, not once per scrape.
#[derive(Debug, Default)]
struct Failures {
    /// Replicas recorded as down and not answered since.
    down: HashSet<String>,
    /// The denial last noted of each replica, until it answers or goes down.
    denied: HashMap<String, String>,
}

impl Failures {
    /// `replica` answered: its next failure is recorded again.
    fn answered(&mut self, replica: &str) {
        self.down.remove(replica);
        self.denied.remove(replica);
    }

    /// What a failed scrape of `replica` records: [`Observation::Down`] when it was refused
    /// and the replica was not down already; a [`Observation::Note`] when it was denied
    /// otherwise than last noted; nothing for any other failure.
    fn failed(&mut self, replica: &str, e: &ScrapeError) -> Option<Observation> {
        let message = crate::error_chain(e);
        if e.is_refused() {
            self.denied.remove(replica);
            return self
                .down
                .insert(replica.to_string())
                .then(|| Observation::Down {
                    replica: replica.to_string(),
                    reason: message,
                });
        }
        if !e.is_denied() || self.denied.get(replica) == Some(&message) {
            return None;
        }
        self.denied.insert(replica.to_string(), message.clone());
        Some(Observation::Note {
            text: format!("recorder: the scrape of {replica} was denied: {message}"),
        })
    }
}

/// How long one scrape may take in all, a port-forward opened included: past it the scrape
/// is abandoned (its own timeouts end it sooner; this bounds what they might miss).
const SCRAPE_BOUND: Duration = Duration::from_secs(4);

async fn scrape_loop(
    shared: Arc<Shared>,
    lock: String,
    scraper: Scraper,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = FuturesUnordered::new();
    let mut busy: HashSet<String> = HashSet::new();
    let mut counters: HashMap<(String, String), u64> = HashMap::new();
    let mut failures = Failures::default();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = ticker.tick() => {
                let targets = shared.targets();
                scraper.keep_only(&targets.iter().map(|(name, _)| name.clone()).collect());
                for (name, ip) in targets {
                    if busy.insert(name.clone()) {
                        // Each scrape is a task of its own with a bound of its own: however
                        // one replica's connection misbehaves, the others are scraped.
                        let task = tokio::spawn({
                            let scraper = scraper.clone();
                            let name = name.clone();
                            async move { scraper.scrape(&name, ip).await }
                        });
                        in_flight.push(async move {
                            let abort = task.abort_handle();
                            let result = tokio::time::timeout(SCRAPE_BOUND, task).await;
                            if result.is_err() {
                                abort.abort();
                            }
                            (name, result)
                        });
                    }
                }
            }
            Some((name, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                busy.remove(&name);
                let result = match outcome {
                    Ok(Ok(result)) => result,
                    Ok(Err(e)) => {
                        tracing::warn!(replica = %name, error = %e, "a scrape task ended without an answer");
                        scraper.forget(&name);
                        continue;
                    }
                    Err(_) => {
                        tracing::warn!(replica = %name, bound = ?SCRAPE_BOUND, "a scrape did not end within its bound; its connection is dropped");
                        scraper.forget(&name);
                        continue;
                    }
                };
                match result {
                    Ok(text) => {
                        failures.answered(&name);
                        record_scrape(&shared, &name, &parse_metrics(&text, &lock), &mut counters);
                    }
                    Err(e) => {
                        tracing::debug!(replica = %name, error = %crate::error_chain(&e), "scrape failed");
                        if let Some(observation) = failures.failed(&name, &e) {
                            if e.is_denied() {
                                tracing::warn!(replica = %name, error = %crate::error_chain(&e), "scrape denied");
                            }
                            shared.record(Utc::now(), observation);
                        }
                    }
                }
            }
        }
    }
}

fn record_scrape(
    shared: &Shared,
    replica: &str,
    scrape: &Scrape,
    counters: &mut HashMap<(String, String), u64>,
) {
    let time = Utc::now();
    let mut inner = shared.lock();
    if let Some(leader) = scrape.leader {
        inner.entries.push(Entry {
            time,
            observation: Observation::Gauge {
                replica: replica.to_string(),
                leader,
            },
        });
    }
    for (result, count) in &scrape.reconciles {
        let key = (replica.to_string(), result.clone());
        if counters.insert(key, *count) != Some(*count) {
            inner.entries.push(Entry {
                time,
                observation: Observation::Reconciles {
                    replica: replica.to_string(),
                    result: result.clone(),
                    count: *count,
                },
            });
        }
    }
}

async fn follow_audit(
    mut audit: broadcast::Receiver<AuditRecord>,
    namespace: String,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let keep = |ev: AuditRecord| {
        shared.audit_seq.send_if_modified(|seq| {
            let newer = ev.seq > *seq;
            *seq = (*seq).max(ev.seq);
            newer
        });
        if ev.is_write() && ev.pod.as_ref().is_some_and(|p| p.namespace == namespace) {
            shared.lock().writes.push(ev);
        }
    };
    let lagged = |missed: u64| {
        shared.record(
            Utc::now(),
            Observation::Note {
                text: format!(
                    "recorder: fell behind the audit feed, {missed} request(s) not recorded"
                ),
            },
        );
    };
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            received = audit.recv() => match received {
                Ok(ev) => keep(ev),
                Err(broadcast::error::RecvError::Lagged(missed)) => lagged(missed),
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
    // Take what was audited before the stop.
    loop {
        match audit.try_recv() {
            Ok(ev) => keep(ev),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => lagged(missed),
            Err(_) => break,
        }
    }
}

/// Watch retries: 100 ms doubling to 2 s, reset once a watch works again.
#[derive(Debug, Clone)]
struct RetryBackoff {
    next: Duration,
}

impl RetryBackoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(2);
}

impl Default for RetryBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (now * 2).min(Self::MAX);
        Some(now)
    }
}

impl Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_the_identity_up_to_its_last_underscore() {
        assert_eq!(
            HolderNaming::BeforeUnderscore
                .holder_of_identity("op-a_1234-uuid")
                .as_deref(),
            Some("op-a")
        );
        assert_eq!(
            HolderNaming::BeforeUnderscore
                .holder_of_identity("a_b_c")
                .as_deref(),
            Some("a_b")
        );
        assert_eq!(
            HolderNaming::BeforeUnderscore
                .holder_of_identity("plain")
                .as_deref(),
            Some("plain")
        );
        assert_eq!(HolderNaming::BeforeUnderscore.holder_of_identity(""), None);
        assert_eq!(HolderNaming::default(), HolderNaming::BeforeUnderscore);
    }

    #[test]
    fn under_whole_naming_the_holder_is_the_whole_identity() {
        let whole = HolderNaming::Whole;
        assert_eq!(
            whole.holder_of_identity("op-a_1234-uuid").as_deref(),
            Some("op-a_1234-uuid")
        );
        assert_eq!(whole.holder_of_identity("op-a").as_deref(), Some("op-a"));
        assert_eq!(whole.holder_of_identity(""), None);
    }

    #[test]
    fn a_lease_is_held_by_the_replica_its_naming_reads_from_the_holder_identity() {
        let lease: Lease = from_json(serde_json::json!({
            "metadata": {"name": "lock", "namespace": "ops"},
            "spec": {"holderIdentity": "op-a_7f3c", "leaseTransitions": 2},
        }));
        assert_eq!(
            HolderNaming::BeforeUnderscore
                .lease_holder(&lease)
                .as_deref(),
            Some("op-a")
        );
        assert_eq!(
            lease_state(&lease, HolderNaming::BeforeUnderscore),
            LockState {
                holder: Some("op-a".into()),
                transitions: Some(2),
            }
        );
        assert_eq!(
            lease_state(&lease, HolderNaming::Whole).holder.as_deref(),
            Some("op-a_7f3c")
        );
        let released: Lease = from_json(serde_json::json!({
            "metadata": {"name": "lock"}, "spec": {"holderIdentity": ""},
        }));
        assert_eq!(HolderNaming::Whole.lease_holder(&released), None);
    }

    #[test]
    fn a_refused_scrape_records_down_and_a_denied_one_a_note_once_per_change() {
        let denied = |status: u16, why: &str| ScrapeError::Denied {
            target: "10.0.0.7:8443".into(),
            status,
            why: why.into(),
        };
        let refused = ScrapeError::Http(PlainHttpError::Connect {
            target: "10.0.0.7:8443".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        });
        let late = ScrapeError::Timeout {
            target: "10.0.0.7:8443".into(),
            timeout: SCRAPE_TIMEOUT,
        };
        let mut failures = Failures::default();
        let note = failures.failed("op-a", &denied(401, "the bearer token lacks it"));
        assert_eq!(
            note,
            Some(Observation::Note {
                text: "recorder: the scrape of op-a was denied: 10.0.0.7:8443 answered 401: \
                       the bearer token lacks it"
                    .into()
            })
        );
        assert_eq!(
            failures.failed("op-a", &denied(401, "the bearer token lacks it")),
            None
        );
        assert_eq!(failures.failed("op-a", &late), None);
        assert_eq!(
            failures.failed("op-a", &denied(401, "the bearer token lacks it")),
            None
        );
        assert!(failures.failed("op-a", &denied(403, "now this")).is_some());
        assert!(failures.failed("op-b", &denied(403, "now this")).is_some());
        assert!(matches!(
            failures.failed("op-a", &refused),
            Some(Observation::Down { .. })
        ));
        assert_eq!(failures.failed("op-a", &refused), None);
        failures.answered("op-a");
        assert!(failures.failed("op-a", &refused).is_some());
        assert!(failures.failed("op-a", &denied(403, "now this")).is_some());
        failures.answered("op-a");
        assert!(failures.failed("op-a", &denied(403, "now this")).is_some());
    }

    #[test]
    fn the_gauge_of_the_lock_and_reconcile_counts_are_read_from_prometheus_text() {
        let text = "\
# HELP leader_election_master_status Gauge\n\
# TYPE leader_election_master_status gauge\n\
leader_election_master_status{name=\"other\"} 0\n\
leader_election_master_status{name=\"lock\"} 1\n\
controller_runtime_reconcile_total{controller=\"memcached\",result=\"success\"} 7\n\
controller_runtime_reconcile_total{controller=\"memcached\",result=\"error\"} 2 1700000000000\n\
controller_runtime_reconcile_total{controller=\"other\",result=\"success\"} 1\n\
controller_runtime_reconcile_errors_total{controller=\"memcached\"} 2\n\
weird_label{a=\"x\\\"}y\"} 3\n\
garbage line\n";
        let scrape = parse_metrics(text, "lock");
        assert_eq!(scrape.leader, Some(true));
        assert_eq!(scrape.reconciles.get("success"), Some(&8));
        assert_eq!(scrape.reconciles.get("error"), Some(&2));
        assert_eq!(scrape.reconciles.len(), 2);
        assert_eq!(parse_metrics(text, "missing").leader, None);
        assert_eq!(
            parse_metrics("leader_election_master_status{name=\"lock\"} 0", "lock").leader,
            Some(false)
        );
    }

    #[test]
    fn a_label_value_may_hold_escaped_quotes_and_braces() {
        let sample = parse_sample("m{a=\"x\\\"}y\",b=\"z\"} 3").unwrap();
        assert_eq!(
            sample,
            Sample {
                name: "m",
                labels: vec![("a".into(), "x\"}y".into()), ("b".into(), "z".into())],
                value: 3.0,
            }
        );
    }

    fn from_json<K: DeserializeOwned>(value: serde_json::Value) -> K {
        serde_json::from_value(value).expect("a valid object")
    }

    fn memcached(
        rv: &str,
        size: i64,
        nodes: &[&str],
        finalizer: bool,
        deleting: bool,
    ) -> DynamicObject {
        let mut metadata = serde_json::json!({
            "name": "cache", "namespace": "default", "uid": "u1", "generation": size,
            "resourceVersion": rv,
        });
        if finalizer {
            metadata["finalizers"] = serde_json::json!(["cache.example.com/finalizer"]);
        }
        if deleting {
            metadata["deletionTimestamp"] = serde_json::json!("2030-01-01T00:00:00Z");
        }
        from_json(serde_json::json!({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": metadata,
            "spec": {"size": size},
            "status": {"nodes": nodes, "conditions": [{"type": "Available", "status": "False"}]},
        }))
    }

    #[test]
    fn a_memcached_is_recorded_by_its_size_generation_finalizer_termination_and_nodes() {
        let state = MemcachedState::of(&memcached("7", 3, &["a", "b"], true, true));
        assert_eq!(
            state.observation("default", "cache", Change::Modified),
            Some(Observation::Memcached {
                namespace: "default".into(),
                name: "cache".into(),
                change: Change::Modified,
                size: Some(3),
                generation: 3,
                finalizer: true,
                terminating: true,
                nodes: 2,
            })
        );
        let bare: DynamicObject = from_json(serde_json::json!({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": "bare"}, "spec": {"size": "three"},
        }));
        assert_eq!(
            MemcachedState::of(&bare),
            MemcachedState {
                size: None,
                generation: 0,
                finalizer: false,
                terminating: false,
                nodes: 0,
            }
        );
    }

    #[test]
    fn a_deployment_is_recorded_by_its_replicas_readiness_and_controlling_owner() {
        let d: Deployment = from_json(serde_json::json!({
            "metadata": {"name": "cache", "namespace": "default", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "x"},
                {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "name": "cache",
                 "uid": "u1", "controller": true},
            ]},
            "spec": {"replicas": 3, "selector": {}, "template": {}},
            "status": {"replicas": 3, "readyReplicas": 2, "availableReplicas": 1, "observedGeneration": 4},
        }));
        assert_eq!(
            DeploymentState::of(&d),
            DeploymentState {
                replicas: 3,
                ready: 2,
                available: 1,
                owner: Some("Memcached/cache".into()),
                terminating: false,
            }
        );
        let bare: Deployment = from_json(serde_json::json!({"metadata": {"name": "web"}}));
        let state = DeploymentState::of(&bare);
        assert_eq!((state.replicas, state.ready, state.owner), (1, 0, None));
    }

    #[test]
    fn an_event_names_its_object_reporter_and_count_from_whichever_fields_are_set() {
        let written: CoreEvent = from_json(serde_json::json!({
            "metadata": {"name": "cache.1", "namespace": "default"},
            "involvedObject": {"kind": "Memcached", "name": "cache", "namespace": "default"},
            "type": "Warning", "reason": "ReconcileError", "message": "boom",
            "reportingComponent": "memcached-operator", "reportingInstance": "op-a",
            "source": {"component": "ignored"}, "count": 2,
        }));
        assert_eq!(
            EventState::of(&written).observation("default", "cache.1", Change::Added),
            Some(Observation::Event {
                namespace: "default".into(),
                involved: "Memcached/cache".into(),
                type_: "Warning".into(),
                reason: "ReconcileError".into(),
                message: "boom".into(),
                reporter: "memcached-operator".into(),
                instance: "op-a".into(),
                count: 2,
            })
        );
        let legacy: CoreEvent = from_json(serde_json::json!({
            "metadata": {"name": "p.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "Started", "reportingComponent": "",
            "source": {"component": "kubelet", "host": "node-1"},
            "series": {"count": 5, "lastObservedTime": "2030-01-01T00:00:00.000000Z"},
        }));
        let state = EventState::of(&legacy);
        assert_eq!(
            (
                state.reporter.as_str(),
                state.instance.as_str(),
                state.count
            ),
            ("kubelet", "node-1", 5)
        );
        // Events expire on their own: their deletion is not history.
        assert_eq!(state.observation("default", "p.1", Change::Deleted), None);
    }

    #[test]
    fn only_changes_of_what_is_recorded_are_entries_and_a_new_uid_is_a_new_object() {
        let key = ("default".to_string(), "cache".to_string());
        let of = |rv: &str, size: i64, nodes: &[&str], finalizer: bool, deleting: bool| {
            MemcachedState::of(&memcached(rv, size, nodes, finalizer, deleting))
        };
        let changes = |c: Vec<(Change, MemcachedState)>| -> Vec<Change> {
            c.into_iter().map(|(c, _)| c).collect()
        };
        let mut t = Tracker::<MemcachedState>::default();
        assert_eq!(
            changes(t.seen(key.clone(), "u1".into(), of("1", 3, &[], false, false))),
            [Change::Added]
        );
        // A new resourceVersion (a condition changed) that changes nothing recorded.
        assert!(
            t.seen(key.clone(), "u1".into(), of("2", 3, &[], false, false))
                .is_empty()
        );
        assert_eq!(
            changes(t.seen(key.clone(), "u1".into(), of("3", 3, &[], true, false))),
            [Change::Modified]
        );
        assert_eq!(
            changes(t.seen(
                key.clone(),
                "u1".into(),
                of("4", 3, &["a", "b", "c"], true, false)
            )),
            [Change::Modified]
        );
        // Deleted and created again under the same name while the watch was down.
        assert_eq!(
            changes(t.seen(key.clone(), "u2".into(), of("9", 1, &[], false, false))),
            [Change::Deleted, Change::Added]
        );
        let (change, last) = t
            .gone(&key, Some(of("10", 1, &[], false, true)))
            .expect("a known object");
        assert_eq!(change, Change::Deleted);
        assert!(
            last.terminating,
            "the deletion carries the object as last seen"
        );
        assert_eq!(t.gone(&key, None), None, "gone only once");
    }

    #[test]
    fn a_relist_without_an_object_records_it_gone_as_last_recorded() {
        let mut t = Tracker::<MemcachedState>::default();
        let a = ("default".to_string(), "a".to_string());
        let b = ("default".to_string(), "b".to_string());
        t.seen(
            a.clone(),
            "ua".into(),
            MemcachedState::of(&memcached("1", 2, &[], true, false)),
        );
        t.seen(
            b.clone(),
            "ub".into(),
            MemcachedState::of(&memcached("2", 1, &[], false, false)),
        );
        let gone = t.relisted(&HashSet::from([b.clone()]));
        assert_eq!(gone.len(), 1);
        let (key, change, state) = &gone[0];
        assert_eq!(
            (key, *change, state.size, state.finalizer),
            (&a, Change::Deleted, Some(2), true)
        );
        assert!(t.relisted(&HashSet::from([b])).is_empty());
    }

    #[test]
    fn workloads_are_watched_in_their_namespaces_and_events_in_the_operators_too() {
        let mut config = RecorderConfig {
            namespace: "op-system".into(),
            lock_name: "lock".into(),
            pod_selector: "app=op".into(),
            metrics: MetricsEndpoint::http(8080),
            holder_naming: HolderNaming::default(),
            scrape_through_api: false,
            scrape_interval: Duration::from_millis(100),
            workload_namespaces: Vec::new(),
        };
        assert_eq!(config.workload_scopes(), [None]);
        assert_eq!(config.event_scopes(), [None]);
        config.workload_namespaces = vec!["x-default".into(), "x-team-a".into()];
        let some = |names: &[&str]| {
            names
                .iter()
                .map(|n| Some(n.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(config.workload_scopes(), some(&["x-default", "x-team-a"]));
        assert_eq!(
            config.event_scopes(),
            some(&["x-default", "x-team-a", "op-system"])
        );
        config.workload_namespaces = vec!["op-system".into()];
        assert_eq!(config.event_scopes(), some(&["op-system"]));
    }

    #[test]
    fn the_retry_backoff_doubles_to_two_seconds_and_resets() {
        let mut b = RetryBackoff::default();
        let first: Vec<u128> = b.by_ref().take(6).map(|d| d.as_millis()).collect();
        assert_eq!(first, vec![100, 200, 400, 800, 1600, 2000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }
}
