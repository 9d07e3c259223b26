//! Pods on this node: the watch of pods bound to it, and one worker per pod that sets up
//! its sandbox (IP, proxy, working directory, credentials), runs its containers, reports
//! its status, and on deletion stops the containers gracefully and makes the final delete.
//!
//! Ephemeral containers (added through `pods/ephemeralcontainers`) start as soon as a pod
//! update shows them, init containers finished or not, and run once: never restarted, not
//! even by a kubelet that starts again. They are stopped with the pod, and when the pod
//! ends (`Succeeded` or `Failed`) while they still run.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod, PodSpec};
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::backoff::QuickBackoff;
use super::container::ContainerTask;
use super::error::KubeletError;
use super::process::off_the_workers;
use super::runtime::{ContainerRuntime, PodNetwork, PodRuntime, StatusCell, StopState, lock};
use super::shared::Shared;
use super::status::{ContainerStatus, Eviction, PodStatus, State, Terminated, qos_class};
use crate::proxy::{Mode, Proxy, ProxyError};
use sim_apiserver::audit::PodRef;

/// Errors setting up a pod's sandbox.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// Every pod IP of this node is taken.
    #[error("no pod ip left on this node")]
    NoIp,
    /// The pod's directory could not be created.
    #[error("cannot create the pod directory {path}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The pod's proxy could not be started.
    #[error("cannot start the pod's api proxy")]
    Proxy(#[source] ProxyError),
    /// The pod's network namespace could not be made.
    #[error("cannot make the pod's network namespace")]
    Network(#[source] pod_network::NetworkError),
}

/// The faults that end a pod's containers (a crash, an eviction). They answer with a
/// [`KubeletError`], which also wraps the error of the kubelet's endpoint, a module that
/// depends on [`super::runtime`]; so they are carried out here, beside the worker whose stop
/// state they act on, and the runtime depends on no error of the kubelet's.
impl PodRuntime {
    pub(crate) fn crash(&self, container: Option<&str>) -> Result<(), KubeletError> {
        let c = match container {
            Some(name) => self.container(name),
            None => self.containers.iter().find(|c| !c.init).cloned(),
        }
        .ok_or_else(|| KubeletError::NoSuchContainer {
            namespace: self.namespace.clone(),
            pod: self.name.clone(),
            container: container.unwrap_or_default().to_string(),
        })?;
        if c.crash() {
            Ok(())
        } else {
            Err(KubeletError::NotRunning {
                namespace: self.namespace.clone(),
                pod: self.name.clone(),
                container: c.name.clone(),
            })
        }
    }

    /// Evicts the pod: from now on it is `Failed` with reason `Evicted` and `message` (once
    /// its containers have stopped), its containers are SIGKILLed and never started again.
    pub(crate) fn evict(&self, message: &str) -> Result<(), KubeletError> {
        let ended = || KubeletError::Ended {
            namespace: self.namespace.clone(),
            pod: self.name.clone(),
        };
        if self.terminal_on_arrival || self.status.read(PodStatus::terminal) {
            return Err(ended());
        }
        let mut evicted = false;
        // The eviction is noted while the containers are still told to run, so none of them
        // can end (and be reported) before the pod's status knows why.
        self.stop.send_if_modified(|state| {
            if *state != StopState::Run {
                return false;
            }
            self.status.update(|s| {
                s.eviction = Some(Eviction {
                    message: message.to_string(),
                    at: chrono::Utc::now(),
                });
            });
            *state = StopState::Evict;
            evicted = true;
            true
        });
        if !evicted {
            return Err(ended());
        }
        self.kill_all();
        Ok(())
    }
}

/// What a pod worker learns from the watch.
#[derive(Clone)]
pub enum PodUpdate {
    /// The pod as it is now.
    Current(Arc<Pod>),
    /// The pod is gone (deleted outright) or the kubelet stops: kill, no more API calls.
    Gone,
}

struct Worker {
    updates: watch::Sender<PodUpdate>,
    task: JoinHandle<()>,
}

/// Watches the pods bound to this node and keeps one worker per pod.
pub(crate) async fn pod_loop(shared: Arc<Shared>) {
    let node = shared.config.node_name.clone();
    let api: Api<Pod> = Api::all(shared.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut events = watcher::watcher(api, config)
        .backoff(QuickBackoff::default())
        .boxed();
    let mut stopping = shared.stopping();
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let mut ending: Vec<JoinHandle<()>> = Vec::new();
    let mut listed: Option<HashSet<String>> = None;
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            _ = stopping.wait_for(|s| *s) => break,
        };
        shared.gate().await;
        if *stopping.borrow() {
            break;
        }
        ending.retain(|t| !t.is_finished());
        let event = match event {
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                tracing::debug!(%node, error = %e, "pod watch failed");
                continue;
            }
            None => break,
        };
        match event {
            Event::Init => listed = Some(HashSet::new()),
            Event::InitApply(pod) => {
                if let (Some(seen), Some(uid)) = (listed.as_mut(), pod.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                apply(&shared, &mut workers, pod);
            }
            Event::InitDone => {
                let seen = listed.take().unwrap_or_default();
                let gone: Vec<String> = workers
                    .keys()
                    .filter(|u| !seen.contains(*u))
                    .cloned()
                    .collect();
                for uid in gone {
                    if let Some(w) = workers.remove(&uid) {
                        w.updates.send_replace(PodUpdate::Gone);
                        ending.push(w.task);
                    }
                }
            }
            Event::Apply(pod) => apply(&shared, &mut workers, pod),
            Event::Delete(pod) => {
                if let Some(w) = pod.metadata.uid.as_ref().and_then(|u| workers.remove(u)) {
                    w.updates.send_replace(PodUpdate::Gone);
                    ending.push(w.task);
                }
            }
        }
    }
    for (_, w) in workers.drain() {
        w.updates.send_replace(PodUpdate::Gone);
        ending.push(w.task);
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(ending)).await;
}

fn apply(shared: &Arc<Shared>, workers: &mut HashMap<String, Worker>, pod: Pod) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    let pod = Arc::new(pod);
    if let Some(w) = workers.get(&uid) {
        w.updates.send_replace(PodUpdate::Current(pod));
        return;
    }
    let (updates, rx) = watch::channel(PodUpdate::Current(pod.clone()));
    let task = tokio::spawn(run(shared.clone(), pod, rx));
    workers.insert(uid, Worker { updates, task });
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The pod's directory, its logs' directory, and the files its containers' mounts name: the
/// clock of the skew fault (when it can be skewed), `/etc/hosts`, `/etc/resolv.conf` and the
/// host name, each written once.
fn write_sandbox_files(
    shared: &Shared,
    pod: &Pod,
    dir: &std::path::Path,
    ip: Ipv4Addr,
) -> Result<(), PodError> {
    std::fs::create_dir_all(dir.join("logs")).map_err(|source| PodError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let clock = dir.join(super::bundle::CLOCK_HOST_DIR);
    let names = dir.join("etc");
    let files = [
        (
            clock.join(super::bundle::CLOCK_FILE),
            "+0\n".to_string(),
            shared.config.faketime_library.is_some(),
        ),
        (
            names.join("hosts"),
            super::names::hosts_file(pod, &ip.to_string()),
            true,
        ),
        (
            names.join("resolv.conf"),
            super::names::resolver(pod, &super::names::Resolver::of_node()).render(),
            true,
        ),
        (
            names.join("hostname"),
            format!("{}\n", super::names::hostname(pod)),
            true,
        ),
    ];
    for (path, text, wanted) in files {
        if !wanted || path.exists() {
            continue;
        }
        path.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|source| PodError::Dir {
                path: path.clone(),
                source,
            })?;
    }
    Ok(())
}

async fn setup(
    shared: &Arc<Shared>,
    pod: &Pod,
    sequence: u64,
) -> Result<Arc<PodRuntime>, PodError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let ip = shared.allocate_ip().ok_or(PodError::NoIp)?;
    let release = |e| {
        shared.release_ip(ip);
        e
    };
    let dir = shared
        .config
        .work_dir
        .join("pods")
        .join(format!("{namespace}_{name}_{uid}"));
    // Blocking, as is every step of a pod's start that touches the disk or the kernel:
    // done off the async workers (see `off_the_workers`).
    off_the_workers(|| write_sandbox_files(shared, pod, &dir, ip)).map_err(release)?;
    let inspection = shared.inspection.as_ref().map(|i| {
        let account = spec
            .service_account_name
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "default".into());
        i.for_pod(
            PodRef {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
            },
            format!("system:serviceaccount:{namespace}:{account}"),
            shared.pods_as_fault_target(),
        )
    });
    // Containers get the pod's own network namespace, as a real pod's do; host processes
    // (and `hostNetwork` pods) stay in the host's, and so do rootless containers (see
    // `oci`'s documentation for why).
    let network = (matches!(
        &shared.config.isolation,
        crate::oci::Isolation::Containers(rt) if !rt.rootless()
    ) && !spec.host_network.unwrap_or(false))
    .then(|| off_the_workers(|| PodNetwork::create(ip)))
    .transpose()
    .map_err(PodError::Network)
    .map_err(release)?;
    let proxy = Proxy::start_inspecting(
        &format!("pod {namespace}/{name}"),
        shared.server.addr(),
        IpAddr::V4(ip),
        inspection,
        network.as_ref().map(|n| &*n.namespace),
    )
    .await
    .map_err(PodError::Proxy)
    .map_err(release)?;
    let mode = shared.node_mode();
    if mode != Mode::Pass {
        proxy.set_mode(mode);
    }
    let mut containers = Vec::new();
    for (init, list) in [
        (true, spec.init_containers.clone().unwrap_or_default()),
        (false, spec.containers.clone()),
    ] {
        for c in list {
            let log = dir.join("logs").join(format!("{}.log", c.name));
            containers.push(Arc::new(ContainerRuntime::new(
                &c.name,
                init,
                log,
                shared.config.log_limit_bytes,
            )));
        }
    }
    let status = initial_status(pod, &spec, ip, shared.config.node_ip.to_string());
    let weak = Arc::downgrade(shared);
    Ok(Arc::new(PodRuntime {
        volumes: super::volume::PodVolumes::new(&dir),
        tokens: tokio::sync::Mutex::new(HashMap::new()),
        namespace,
        name,
        uid,
        ip,
        dir,
        proxy,
        network,
        sequence,
        containers,
        ephemeral: std::sync::Mutex::new(Vec::new()),
        held: AtomicBool::new(false),
        node_held: Arc::new(move || weak.upgrade().is_some_and(|s| s.node_held())),
        terminal_on_arrival: is_terminal(pod),
        stop: watch::channel(StopState::Run).0,
        status: Arc::new(StatusCell::new(status)),
    }))
}

/// The status of a pod just admitted: its containers waiting to be created.
fn initial_status(pod: &Pod, spec: &PodSpec, ip: Ipv4Addr, host_ip: String) -> PodStatus {
    let mut model = PodStatus::new(ip.to_string(), host_ip);
    if let Some(t) = pod.status.as_ref().and_then(|s| s.start_time.as_ref())
        && let Ok(parsed) = chrono::DateTime::parse_from_rfc3339(&t.0.to_string())
    {
        model.start_time = parsed.with_timezone(&chrono::Utc);
    }
    model.sandbox_ready = true;
    model.readiness_gates = spec
        .readiness_gates
        .iter()
        .flatten()
        .map(|g| g.condition_type.clone())
        .collect();
    model.qos_class = qos_class(&serde_json::to_value(spec).unwrap_or_default()).to_string();
    let has_init = spec.init_containers.as_ref().is_some_and(|l| !l.is_empty());
    model.init_containers = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            ContainerStatus::waiting(
                &c.name,
                c.image.as_deref().unwrap_or_default(),
                "PodInitializing",
            )
        })
        .collect();
    let app_reason = if has_init {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    model.containers = spec
        .containers
        .iter()
        .map(|c| {
            ContainerStatus::waiting(&c.name, c.image.as_deref().unwrap_or_default(), app_reason)
        })
        .collect();
    model
}

/// One pod's life on this node.
async fn run(shared: Arc<Shared>, pod: Arc<Pod>, mut updates: watch::Receiver<PodUpdate>) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    tracing::debug!(pod = %name, stage = "admitted", "pod start");
    if matches!(
        shared.config.isolation,
        crate::oci::Isolation::Containers(_)
    ) {
        // The objects its volumes read are watched from now on (the kubelet's object
        // managers' `RegisterPod`): their first lists overlap the sandbox's making.
        let wanted = super::volume::references(&pod);
        for config_map in &wanted.config_maps {
            shared.config_maps.watch(&namespace, config_map);
        }
        for secret in &wanted.secrets {
            shared.secrets.watch(&namespace, secret);
        }
    }
    let runtime = match setup(&shared, &pod, shared.next_sequence()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "cannot admit pod");
            // Nothing runs; a deletion still gets its final delete.
            let deleting = |u: &PodUpdate| matches!(u, PodUpdate::Current(p) if p.metadata.deletion_timestamp.is_some());
            let seen = updates
                .wait_for(|u| matches!(u, PodUpdate::Gone) || deleting(u))
                .await
                .map(|u| deleting(&u));
            if matches!(seen, Ok(true)) {
                let (_tx, synced) = watch::channel(0);
                let status = Arc::new(StatusCell::new(PodStatus::new(
                    String::new(),
                    String::new(),
                )));
                let finalizer = final_delete(shared.clone(), api, name, uid, status, synced, true);
                tokio::select! {
                    _ = finalizer => {}
                    _ = updates.wait_for(|u| matches!(u, PodUpdate::Gone)) => {}
                }
            }
            return;
        }
    };
    tracing::debug!(pod = %name, stage = "sandbox ready", "pod start");
    shared.register(runtime.clone());
    let spec = pod.spec.clone().unwrap_or_default();
    let terminal_on_arrival = runtime.terminal_on_arrival;
    if !terminal_on_arrival {
        // Attribute the pod's requests from its first one on, before a status write lands.
        shared.server.attribute(
            IpAddr::V4(runtime.ip),
            Some(PodRef {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
            }),
        );
    }

    let status = runtime.status.clone();
    let (latest_tx, latest_rx) = watch::channel(pod.clone());
    let (synced_tx, synced_rx) = watch::channel(0u64);
    let stop_tx = &runtime.stop;
    let stop_rx = stop_tx.subscribe();
    let mut sync = None;
    let mut pipeline = None;
    if !terminal_on_arrival {
        sync = Some(tokio::spawn(status_sync(
            shared.clone(),
            api.clone(),
            status.clone(),
            latest_rx,
            synced_tx,
        )));
        pipeline = Some(tokio::spawn(run_containers(
            shared.clone(),
            runtime.clone(),
            pod.clone(),
            status.clone(),
            stop_rx,
        )));
    }
    // Containers see their volumes' updates; host processes have no volumes.
    let containers = matches!(
        shared.config.isolation,
        super::oci::Isolation::Containers(_)
    );
    // Stand-ins (images not mapped) have nothing that reads a volume.
    let runs_something = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            shared
                .config
                .images
                .get(c.image.as_deref().unwrap_or_default())
                .is_some()
        });
    let resync = (!terminal_on_arrival && containers && runs_something && spec.volumes.is_some())
        .then(|| {
            tokio::spawn(super::container::resync_volumes(
                shared.clone(),
                runtime.clone(),
                latest_tx.subscribe(),
            ))
        });
    let mut ephemerals = Ephemerals::default();
    if !terminal_on_arrival {
        ephemerals.start_new(&shared, &runtime, &pod, &stop_tx.subscribe(), true);
    }
    let mut finished = pipeline.is_none();
    let mut deleting = false;
    let mut finalizer: Option<JoinHandle<()>> = None;
    // Stops the containers by the pod's grace period; a later, shorter one (a second
    // DELETE) brings the SIGKILL forward.
    let stop_by = |p: &Pod| {
        let grace = p
            .metadata
            .deletion_grace_period_seconds
            .or(spec.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(grace);
        stop_tx.send_if_modified(|state| match state {
            StopState::Graceful(current) if *current <= deadline => false,
            // An evicted pod's containers are stopped already.
            StopState::Kill | StopState::Evict => false,
            _ => {
                *state = StopState::Graceful(deadline);
                true
            }
        });
    };
    if pod.metadata.deletion_timestamp.is_some() {
        deleting = true;
        stop_by(&pod);
    }
    loop {
        if finished && ephemerals.tasks.is_empty() && deleting && finalizer.is_none() {
            finalizer = Some(tokio::spawn(final_delete(
                shared.clone(),
                api.clone(),
                name.clone(),
                uid.clone(),
                status.clone(),
                synced_rx.clone(),
                terminal_on_arrival,
            )));
        }
        tokio::select! {
            changed = updates.changed() => {
                let update = if changed.is_err() {
                    PodUpdate::Gone
                } else {
                    updates.borrow_and_update().clone()
                };
                match update {
                    PodUpdate::Gone => break,
                    PodUpdate::Current(p) => {
                        latest_tx.send_replace(p.clone());
                        if p.metadata.deletion_timestamp.is_some() {
                            deleting = true;
                            stop_by(&p);
                        }
                        if !terminal_on_arrival {
                            ephemerals.start_new(&shared, &runtime, &p, &stop_tx.subscribe(), false);
                        }
                    }
                }
            }
            _ = async {
                match pipeline.as_mut() {
                    Some(p) => { let _ = p.await; }
                    None => std::future::pending().await,
                }
            }, if !finished => {
                finished = true;
                // A pod that has ended stops what still runs: its ephemeral containers.
                if status.read(PodStatus::terminal) {
                    let grace = spec.termination_grace_period_seconds.unwrap_or(30).max(0) as u64;
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(grace);
                    stop_tx.send_if_modified(|state| {
                        let run = *state == StopState::Run;
                        if run {
                            *state = StopState::Graceful(deadline);
                        }
                        run
                    });
                }
            }
            Some(_) = ephemerals.tasks.join_next(), if !ephemerals.tasks.is_empty() => {}
        }
    }
    // Gone: kill at once, make no more API calls.
    stop_tx.send_replace(StopState::Kill);
    runtime.kill_all();
    if let Some(f) = finalizer {
        f.abort();
    }
    if let Some(p) = pipeline.filter(|_| !finished) {
        let abort = p.abort_handle();
        if tokio::time::timeout(Duration::from_secs(10), p)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
    let drained = async { while ephemerals.tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(10), drained)
        .await
        .is_err()
    {
        ephemerals.tasks.abort_all();
    }
    if let Some(s) = sync {
        s.abort();
    }
    if let Some(r) = resync {
        r.abort();
    }
    shared.unregister(&uid);
    shared.release_ip(runtime.ip);
}

/// Runs the init containers one after the other, then the app containers together;
/// returns when none of them will run again.
async fn run_containers(
    shared: Arc<Shared>,
    runtime: Arc<PodRuntime>,
    pod: Arc<Pod>,
    status: Arc<StatusCell>,
    stop: watch::Receiver<StopState>,
) {
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.clone().unwrap_or_default();
    let task = |index: usize, init: bool, container| ContainerTask {
        ephemeral: false,
        target: None,
        shared: shared.clone(),
        pod: runtime.clone(),
        runtime: runtime
            .containers
            .iter()
            .filter(|c| c.init == init)
            .nth(index)
            .cloned()
            .expect("one runtime per container"),
        status: status.clone(),
        spec: container,
        index,
        init,
        pod_object: pod.clone(),
        stop: stop.clone(),
    };
    for (i, c) in inits.into_iter().enumerate() {
        if *stop.borrow() != StopState::Run {
            break;
        }
        task(i, true, c).run().await;
        let failed = status.read(|s| {
            s.init_containers
                .get(i)
                .is_some_and(|c| !matches!(&c.state, State::Terminated(t) if t.exit_code == 0))
        });
        if failed {
            break;
        }
    }
    let initialized = status.read(PodStatus::initialized);
    if initialized && *stop.borrow() == StopState::Run {
        let tasks: Vec<_> = spec
            .containers
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, c)| tokio::spawn(task(i, false, c).run()))
            .collect();
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        // Dropping this future (the pod is gone) must stop the containers too.
        let _guard = AbortOnDrop(aborts);
        futures::future::join_all(tasks).await;
    }
    // Containers that never got to run will not run any more once the pod stops (an
    // init failure leaves them waiting, as the real kubelet does).
    if *stop.borrow() != StopState::Run {
        status.update(|s| {
            for c in s.init_containers.iter_mut().chain(s.containers.iter_mut()) {
                if !c.done && !c.ever_started {
                    c.state = State::Terminated(Terminated {
                        exit_code: 137,
                        signal: None,
                        reason: "ContainerStatusUnknown".into(),
                        message: Some(
                            "The container could not be located when the pod was terminated".into(),
                        ),
                        started_at: None,
                        finished_at: chrono::Utc::now(),
                        container_id: None,
                    });
                    c.done = true;
                }
            }
        });
    }
}

/// The ephemeral containers of one pod: each started once, when a pod update first shows
/// it, and never again.
#[derive(Default)]
struct Ephemerals {
    /// The names seen so far.
    seen: HashSet<String>,
    /// Their tasks, until they end (dropping the set aborts them).
    tasks: JoinSet<()>,
}

impl Ephemerals {
    /// Starts the ephemeral containers of `pod` not seen before: each gets a status entry
    /// (waiting, `PodInitializing` when the pod has init containers, else
    /// `ContainerCreating`) and a task that runs it once. None starts in a pod that has
    /// ended or is stopping. On the worker's `first` look, a container the pod's status
    /// already reports ran under an earlier kubelet: it is reported as it was (or as
    /// unknown, had it not ended) and not started again.
    fn start_new(
        &mut self,
        shared: &Arc<Shared>,
        runtime: &Arc<PodRuntime>,
        pod: &Arc<Pod>,
        stop: &watch::Receiver<StopState>,
        first: bool,
    ) {
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let reported = pod
            .status
            .as_ref()
            .and_then(|s| s.ephemeral_container_statuses.as_ref());
        let has_init = spec.init_containers.as_ref().is_some_and(|l| !l.is_empty());
        for ec in spec.ephemeral_containers.iter().flatten() {
            if !self.seen.insert(ec.name.clone()) {
                continue;
            }
            let image = ec.image.clone().unwrap_or_default();
            let earlier = reported
                .filter(|_| first)
                .and_then(|list| list.iter().find(|c| c.name == ec.name));
            if let Some(earlier) = earlier {
                let carried = carried_over(earlier, &image);
                runtime
                    .status
                    .update(|s| s.ephemeral_containers.push(carried));
                continue;
            }
            if *stop.borrow() != StopState::Run || runtime.status.read(PodStatus::terminal) {
                continue;
            }
            let log = runtime.dir.join("logs").join(format!("{}.log", ec.name));
            let container = Arc::new(ContainerRuntime::new(
                &ec.name,
                false,
                log,
                shared.config.log_limit_bytes,
            ));
            lock(&runtime.ephemeral).push(container.clone());
            let reason = if has_init {
                "PodInitializing"
            } else {
                "ContainerCreating"
            };
            let mut index = 0;
            runtime.status.update(|s| {
                index = s.ephemeral_containers.len();
                s.ephemeral_containers
                    .push(ContainerStatus::waiting(&ec.name, &image, reason));
            });
            let task = ContainerTask {
                shared: shared.clone(),
                pod: runtime.clone(),
                runtime: container,
                status: runtime.status.clone(),
                spec: common_part(ec),
                index,
                init: false,
                ephemeral: true,
                target: ec.target_container_name.clone().filter(|t| !t.is_empty()),
                pod_object: pod.clone(),
                stop: stop.clone(),
            };
            self.tasks.spawn(task.run());
        }
    }
}

/// What of an ephemeral container runs: the fields the API allows it (probes, ports,
/// resources, lifecycle hooks and restart policies never reach it).
fn common_part(ec: &EphemeralContainer) -> Container {
    Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        command: ec.command.clone(),
        args: ec.args.clone(),
        working_dir: ec.working_dir.clone(),
        env_from: ec.env_from.clone(),
        env: ec.env.clone(),
        volume_mounts: ec.volume_mounts.clone(),
        volume_devices: ec.volume_devices.clone(),
        termination_message_path: ec.termination_message_path.clone(),
        termination_message_policy: ec.termination_message_policy.clone(),
        image_pull_policy: ec.image_pull_policy.clone(),
        security_context: ec.security_context.clone(),
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        tty: ec.tty,
        ..Container::default()
    }
}

/// The status an earlier kubelet reported for an ephemeral container: kept if it had
/// ended, else unknown (its process died with that kubelet); either way done.
fn carried_over(
    earlier: &k8s_openapi::api::core::v1::ContainerStatus,
    image: &str,
) -> ContainerStatus {
    let time = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.and_then(|t| chrono::DateTime::parse_from_rfc3339(&t.0.to_string()).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    };
    let mut c = ContainerStatus::waiting(&earlier.name, image, "");
    c.image_id = earlier.image_id.clone();
    c.container_id = earlier.container_id.clone();
    c.state = match earlier.state.as_ref().and_then(|s| s.terminated.as_ref()) {
        Some(t) => State::Terminated(Terminated {
            exit_code: t.exit_code,
            signal: t.signal,
            reason: t.reason.clone().unwrap_or_default(),
            message: t.message.clone(),
            started_at: time(t.started_at.as_ref()),
            finished_at: time(t.finished_at.as_ref()).unwrap_or_else(chrono::Utc::now),
            container_id: t.container_id.clone(),
        }),
        None => State::Terminated(Terminated {
            exit_code: 137,
            signal: None,
            reason: "ContainerStatusUnknown".into(),
            message: Some("The container could not be located when the pod was terminated".into()),
            started_at: None,
            finished_at: chrono::Utc::now(),
            container_id: None,
        }),
    };
    c.ever_started = true;
    c.done = true;
    c
}

struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for a in &self.0 {
            a.abort();
        }
    }
}

fn newer(a: &Arc<Pod>, b: &Arc<Pod>) -> Arc<Pod> {
    let rv = |p: &Pod| {
        p.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    if rv(b) > rv(a) { b.clone() } else { a.clone() }
}

/// Writes the pod status whenever it changes: a PUT of the newest known pod with the new
/// status, so conditions other writers added are kept (a conflict re-reads the pod).
async fn status_sync(
    shared: Arc<Shared>,
    api: Api<Pod>,
    status: Arc<StatusCell>,
    mut latest: watch::Receiver<Arc<Pod>>,
    synced: watch::Sender<u64>,
) {
    let mut versions = status.version.subscribe();
    let mut base = latest.borrow_and_update().clone();
    let name = base.metadata.name.clone().unwrap_or_default();
    let mut last_sent: Option<Value> = None;
    let mut retry: Option<Duration> = Some(Duration::ZERO);
    loop {
        tokio::select! {
            changed = versions.changed() => if changed.is_err() { return },
            changed = latest.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => {}
        }
        shared.gate().await;
        let version = *versions.borrow_and_update();
        base = newer(&base, &latest.borrow_and_update());
        let current = serde_json::to_value(&base.status).unwrap_or(Value::Null);
        let mut wanted = status.update_quietly(|s| s.to_json(&current));
        super::status::follow_spec(
            &mut wanted,
            &serde_json::to_value(&*base).unwrap_or_default(),
        );
        if last_sent.as_ref() == Some(&wanted) {
            synced.send_replace(version);
            retry = None;
            continue;
        }
        let mut object = (*base).clone();
        object.status = match serde_json::from_value(wanted.clone()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!(pod = %name, error = %e, "built an invalid pod status");
                return;
            }
        };
        tracing::debug!(pod = %name, stage = "status write", phase = ?wanted["phase"], "pod start");
        let write = tokio::time::timeout(
            Duration::from_secs(5),
            api.replace_status(&name, &PostParams::default(), &object),
        )
        .await;
        tracing::debug!(pod = %name, stage = "status written", phase = ?wanted["phase"], "pod start");
        match write {
            Ok(Ok(updated)) => {
                base = Arc::new(updated);
                last_sent = Some(wanted);
                synced.send_replace(version);
                retry = None;
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => return,
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                if let Ok(Ok(fresh)) =
                    tokio::time::timeout(Duration::from_secs(5), api.get(&name)).await
                {
                    if fresh.metadata.uid != base.metadata.uid {
                        return;
                    }
                    base = Arc::new(fresh);
                }
                retry = Some(Duration::ZERO);
            }
            Ok(Err(e)) => {
                if matches!(&e, kube::Error::Api(s) if s.code < 500) {
                    tracing::warn!(pod = %name, error = %e, "the pod status was refused");
                } else {
                    tracing::debug!(pod = %name, error = %e, "pod status update failed");
                }
                retry = Some(next_retry(retry));
            }
            Err(_) => retry = Some(next_retry(retry)),
        }
    }
}

fn next_retry(previous: Option<Duration>) -> Duration {
    match previous {
        Some(d) if !d.is_zero() => (d * 2).min(Duration::from_secs(1)),
        _ => Duration::from_millis(100),
    }
}

/// After the containers stopped: waits until the terminal status is written, then deletes
/// the pod with grace 0 and its UID as precondition, retrying until the server answers.
async fn final_delete(
    shared: Arc<Shared>,
    api: Api<Pod>,
    name: String,
    uid: String,
    status: Arc<StatusCell>,
    mut synced: watch::Receiver<u64>,
    skip_status: bool,
) {
    if !skip_status {
        let target = status.version();
        if synced.wait_for(|v| *v >= target).await.is_err() {
            return;
        }
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let mut retry = None;
    loop {
        shared.gate().await;
        match tokio::time::timeout(Duration::from_secs(5), api.delete(&name, &params)).await {
            Ok(Ok(_)) => return,
            Ok(Err(kube::Error::Api(s))) if s.code == 404 || s.code == 409 => return,
            Ok(Err(e)) => tracing::warn!(pod = %name, error = %e, "the final pod delete failed"),
            Err(_) => {}
        }
        let d = next_retry(retry);
        retry = Some(d);
        tokio::time::sleep(d).await;
    }
}
