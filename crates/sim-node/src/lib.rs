//! The simulated kubelet: one per node. It registers its Node and keeps it heartbeating,
//! watches the pods bound to it and runs them — containers of mapped images as containers
//! of an OCI runtime (see [`oci`]) or, without one, as local process groups; the rest as
//! stand-ins that are Running and Ready without a process — and carries out the process
//! and network faults of its pods and of the whole node.
//!
//! - [`config`]: [`KubeletConfig`] and the [`ImageMap`].
//! - [`node`]: Node registration, the node Lease and the Ready heartbeat.
//! - [`pod`]: one worker per pod: sandbox (IP, proxy, files), containers, status, deletion.
//! - [`container`]: one container's life: start, probes, restarts with back-off, stop.
//! - [`runtime`]: a pod and its containers while they run: the state the pod worker, the
//!   container tasks and the faults share (the status containers report into included).
//! - [`process`]: process groups with a watchdog, signals, reaping.
//! - [`image`]: what a mapped image runs: its executable, or the process found in the
//!   directory holding its filesystem.
//! - [`env`], [`probe`], [`logs`], [`status`]: what those need.
//! - [`objects`]: the ConfigMaps and Secrets the pods read, each kept by a watch, as the
//!   kubelet's watch-based object manager keeps them.
//! - [`oci`]: containers through an OCI runtime (runc, crun): the runtime found at start,
//!   each container's bundle and root filesystem, signals, pause and resume, removal.
//! - [`bundle`]: what a pod's container runs with in the runtime: its security context,
//!   limits and mounts.
//! - [`names`]: a pod's host name, `/etc/hosts` and `/etc/resolv.conf`.
//! - [`volume`]: a pod's volumes laid out on the host as the kubelet lays them out
//!   (configMap, secret, downwardAPI, projected, emptyDir, hostPath) and each container's
//!   bind mounts of them.
//! - [`server`]: the kubelet's HTTPS endpoint for a real kube-apiserver (logs, exec,
//!   port-forward), with the kubelet's authentication and authorization.
//!
//! # Guarantees
//! - No pod process outlives the kubelet: [`Kubelet::shutdown`] and dropping the
//!   [`Kubelet`] SIGKILL every process group (every container's init process), and every
//!   group also dies by itself when the process owning the kubelet ends in any way, SIGKILL
//!   included, its watchdog deleting its container through the runtime (see [`process`]).
//! - Everything the kubelet asks of the API server goes through the node's [`Proxy`]
//!   (source address = the node IP) as `system:node:<node>`; everything a pod asks goes
//!   through the pod's own proxy (source address = the pod IP), so the audit attributes it.
//!
//! # Caveats
//! - No image pulls, no `exec`/`grpc` probes, no `activeDeadlineSeconds`, no termination
//!   message files; sidecar init containers (`restartPolicy: Always`) run like ordinary
//!   init containers. Volumes and limits only for containers: host processes get neither.
//! - For an image mapped to an executable, a pod's `command[0]` names the image's
//!   entrypoint: the mapped executable runs in its place, with `command[1..]` and `args` as
//!   its arguments. An image mapped to a directory runs `command[0]` (or the entrypoint the
//!   mapping gives) found inside the directory: as a container, in it as its root; as a
//!   host process, without chroot or mounts, seeing the host's filesystem (see [`image`]).
//! - Volumes are synced when a container starts and then every
//!   [`container::VOLUME_RESYNC`] (the kubelet: about a minute plus its cache's TTL).
//! - In-place image updates of a running pod are not acted on; `hostNetwork` pods get a
//!   pod IP of their own like any other pod.
//! - Pod IPs are `127.P0.P1.1..=254`: at most 254 pods at once per node.

mod backoff;
pub mod bundle;
pub mod config;
pub mod container;
pub mod env;
mod error;
pub mod image;
pub mod inspect;
pub mod launcher;
pub mod logs;
pub mod names;
pub mod node;
pub mod objects;
pub mod oci;
pub mod pod;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod runtime;
pub mod server;
mod shared;
mod source;
pub mod status;
pub mod terminal;
pub mod upstream;
pub mod volume;

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sim_apiserver::attach::AttachRequest;
use sim_apiserver::exec::{ExecRefusal, ExecRequest};
use sim_apiserver::podlog::{LogRefusal, LogRequest};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use self::config::{ImageArgv, ImageMap, ImageMapping, KubeletConfig, find_faketime};
pub use self::error::KubeletError;
pub use self::image::ImageConfig;
use self::node::NodeAgent;
use self::runtime::{PodRuntime, lock};
use self::shared::{Held, IpPool, Shared};
use self::upstream::Upstream;
use crate::proxy::{Mode, Proxy};

/// A running simulated kubelet. Dropping it kills its pods' processes (use
/// [`Kubelet::shutdown`] to also wait for them).
pub struct Kubelet {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Kubelet {
    /// Starts the kubelet: its proxy and client, the Node (registered Ready, with its
    /// Lease), heartbeats every `heartbeat_interval`, and the pod loop. A pod log source is
    /// added to the server so `kubectl logs` reads this node's containers.
    ///
    /// # Errors
    /// When the proxy, the client or the work directory cannot be set up, or the Node
    /// cannot be registered.
    pub async fn start(
        server: Arc<dyn Upstream>,
        config: KubeletConfig,
    ) -> Result<Kubelet, KubeletError> {
        let node = config.node_name.clone();
        if let Some(line) = config
            .isolation
            .warning()
            .or_else(|| config.isolation.rootless_notice())
        {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| tracing::warn!("{line}"));
        }
        std::fs::create_dir_all(config.work_dir.join("pods")).map_err(|source| {
            KubeletError::WorkDir {
                path: config.work_dir.clone(),
                source,
            }
        })?;
        let proxy = Proxy::start(
            &format!("node {node}"),
            server.addr(),
            IpAddr::V4(config.node_ip),
        )
        .await
        .map_err(|source| KubeletError::Proxy {
            node: node.clone(),
            source,
        })?;
        let client = server
            .node_client(&format!("https://{}", proxy.addr()), &node)
            .await
            .map_err(|source| KubeletError::Client {
                node: node.clone(),
                source,
            })?;
        let mut config = config;
        let endpoint = if server.reads_logs_from_kubelets() {
            let listener = self::server::bind(IpAddr::V4(config.node_ip))
                .await
                .map_err(|source| KubeletError::Endpoint {
                    node: node.clone(),
                    source,
                })?;
            if let Ok(addr) = listener.local_addr() {
                config.kubelet_port = addr.port();
            }
            Some(listener)
        } else {
            None
        };
        let mut agent = NodeAgent::new(config.clone(), client.clone());
        agent
            .register()
            .await
            .map_err(|source| KubeletError::Register {
                node: node.clone(),
                source,
            })?;
        let inspection = match &config.request_rules {
            Some(rules) => Some(
                self::inspect::NodeInspection::new(&node, rules.clone(), &server.ca_pem())
                    .map_err(|source| KubeletError::Inspect {
                        node: node.clone(),
                        source,
                    })?,
            ),
            None => None,
        };
        let shared = Arc::new(Shared {
            inspection,
            ips: Mutex::new(IpPool {
                prefix: config.pod_ip_prefix,
                next: 1,
                used: BTreeSet::new(),
            }),
            config,
            server: server.clone(),
            reviews: self::server::auth::Reviews::new(
                client.clone(),
                self::server::auth::CacheTtls::default(),
            ),
            config_maps: self::objects::Watched::new(client.clone()),
            secrets: self::objects::Watched::new(client.clone()),
            client,
            proxy,
            pods: Mutex::new(HashMap::new()),
            node_mode: Mutex::new(Mode::Pass),
            held: watch::channel(Held::No).0,
            stopping: watch::channel(false).0,
            sequence: AtomicU64::new(0),
            pulled: Mutex::new(HashMap::new()),
        });
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        server.add_log_source(Arc::new(move |request: &LogRequest<'_>| {
            let shared = weak.upgrade()?;
            let pod = shared.find(request.namespace, request.pod)?;
            Some(
                pod.read_log(request.container, request.options, chrono::Utc::now())
                    .map_err(|e| Box::new(e) as LogRefusal),
            )
        }));
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        server.add_exec_source(Arc::new(move |request: &ExecRequest<'_>| {
            let shared = weak.upgrade()?;
            let pod = shared.find(request.namespace, request.pod)?;
            Some(
                pod.exec(
                    request.container,
                    request.command,
                    request.stdin,
                    request.tty,
                )
                .map_err(|e| ExecRefusal::from(container::error_chain(&e))),
            )
        }));
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        server.add_attach_source(Arc::new(move |request: &AttachRequest<'_>| {
            let shared = weak.upgrade()?;
            let pod = shared.find(request.namespace, request.pod)?;
            Some(
                pod.attach(request.container, request.stdin)
                    .map_err(|e| Box::new(e) as ExecRefusal),
            )
        }));
        let mut tasks = vec![
            tokio::spawn(heartbeats(shared.clone(), agent)),
            tokio::spawn(pod::pod_loop(shared.clone())),
        ];
        if let Some(listener) = endpoint {
            let tls = self::server::tls_config(
                &node,
                IpAddr::V4(shared.config.node_ip),
                server.kubelet_serving_ca().as_ref(),
                &server.ca_pem(),
            )
            .map_err(|source| KubeletError::Endpoint {
                node: node.clone(),
                source,
            });
            match tls {
                Ok(tls) => tasks.push(self::server::serve(listener, tls, Arc::downgrade(&shared))),
                Err(e) => {
                    for task in &tasks {
                        task.abort();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Kubelet { shared, tasks })
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.shared.config.node_name
    }

    /// The node's settings.
    pub fn config(&self) -> &KubeletConfig {
        &self.shared.config
    }

    fn pod(&self, namespace: &str, pod: &str) -> Result<Arc<PodRuntime>, KubeletError> {
        self.shared
            .find(namespace, pod)
            .ok_or_else(|| KubeletError::NoSuchPod {
                namespace: namespace.to_string(),
                pod: pod.to_string(),
                node: self.node_name().to_string(),
            })
    }

    /// Crashes a container (the first when `container` is `None`): SIGKILL to its process
    /// group, or for a stand-in the same outcome without a process. The pod stays; its
    /// restartPolicy decides what follows (exit code 137, reason `Error`).
    ///
    /// # Errors
    /// When the pod or container is unknown or not running.
    pub fn crash(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
    ) -> Result<(), KubeletError> {
        self.pod(namespace, pod)?.crash(container)
    }

    /// Evicts a pod as node-pressure eviction does: its containers are SIGKILLed (stand-ins
    /// end the same way) and reported terminated, the pod becomes `Failed` with reason
    /// `Evicted`, `message` and a `DisruptionTarget` condition, and its containers never run
    /// again whatever its restartPolicy. The Pod object stays; deleting it then goes as for
    /// any ended pod (the kubelet makes the final delete, or the API server deletes it at
    /// once).
    ///
    /// # Errors
    /// When the pod is unknown, has ended, is being deleted, or was evicted already.
    pub fn evict_pod(&self, namespace: &str, pod: &str, message: &str) -> Result<(), KubeletError> {
        self.pod(namespace, pod)?.evict(message)
    }

    /// Freezes the pod's processes (SIGSTOP); containers started while held start frozen.
    ///
    /// # Errors
    /// When the pod is unknown.
    pub fn hold_pod(&self, namespace: &str, pod: &str) -> Result<(), KubeletError> {
        self.pod(namespace, pod)?.hold();
        Ok(())
    }

    /// Thaws the pod's processes (SIGCONT), unless the whole node is held.
    ///
    /// # Errors
    /// When the pod is unknown.
    pub fn release_pod(&self, namespace: &str, pod: &str) -> Result<(), KubeletError> {
        self.pod(namespace, pod)?.release(self.shared.node_held());
        Ok(())
    }

    /// Freezes the whole node: the kubelet's loops stop (no heartbeats, no status, no
    /// restarts, no probes) and every pod process is SIGSTOPped.
    pub fn hold_node(&self) {
        self.shared.held.send_replace(Held::Node);
        for pod in self.shared.all_pods() {
            pod.freeze();
        }
    }

    /// Freezes the kubelet alone, as a kubelet process that hangs: its loops stop (no
    /// heartbeats, no status, no restarts, no probes) while its pods run on and reach the
    /// API server. A node held whole stays held whole.
    pub fn hold_kubelet(&self) {
        self.shared.held.send_if_modified(|held| {
            let was = *held;
            if was == Held::No {
                *held = Held::Kubelet;
            }
            was == Held::No
        });
    }

    /// Thaws the node, or its kubelet: loops resume and pods not held on their own are
    /// SIGCONTed.
    pub fn release_node(&self) {
        self.shared.held.send_replace(Held::No);
        for pod in self.shared.all_pods() {
            pod.thaw();
        }
    }

    /// Whether the node is held.
    pub fn node_held(&self) -> bool {
        self.shared.node_held()
    }

    /// Sets the mode of one pod's proxy ([`Mode::Pass`] repairs).
    ///
    /// # Errors
    /// When the pod is unknown.
    pub fn partition_pod(
        &self,
        namespace: &str,
        pod: &str,
        mode: Mode,
    ) -> Result<(), KubeletError> {
        self.pod(namespace, pod)?.proxy.set_mode(mode);
        Ok(())
    }

    /// Sets the mode of the kubelet's own proxy and of every pod proxy on this node, pods
    /// started later included. [`Mode::Pass`] repairs (pod partitions included).
    pub fn partition_node(&self, mode: Mode) {
        *lock(&self.shared.node_mode) = mode;
        self.shared.proxy.set_mode(mode);
        for pod in self.shared.all_pods() {
            pod.proxy.set_mode(mode);
        }
    }

    /// Adds latency to every chunk of the pod's API traffic (zero removes it).
    ///
    /// # Errors
    /// When the pod is unknown.
    pub fn delay_pod(
        &self,
        namespace: &str,
        pod: &str,
        delay: Duration,
    ) -> Result<(), KubeletError> {
        self.pod(namespace, pod)?.proxy.set_delay(delay);
        Ok(())
    }

    /// Offsets the pod's wall clock by `offset` (zero removes the skew; the monotonic clock
    /// keeps real time, as on a machine whose wall clock is wrong),
    /// through libfaketime preloaded into its processes. Running processes follow within
    /// about a second (libfaketime re-reads its offset file once a second).
    ///
    /// # Errors
    /// [`KubeletError::NoFaketime`] when libfaketime is not installed (Debian package
    /// `faketime`); when the pod is unknown or its offset file cannot be written.
    pub fn skew_pod(
        &self,
        namespace: &str,
        pod: &str,
        offset: chrono::Duration,
    ) -> Result<(), KubeletError> {
        if self.shared.config.faketime_library.is_none() {
            return Err(KubeletError::NoFaketime);
        }
        self.pod(namespace, pod)?
            .skew(offset)
            .map_err(|source| KubeletError::Skew {
                namespace: namespace.to_string(),
                pod: pod.to_string(),
                source,
            })
    }

    /// The pod's IP, once the kubelet has admitted it.
    pub fn pod_ip(&self, namespace: &str, pod: &str) -> Option<Ipv4Addr> {
        self.shared.find(namespace, pod).map(|p| p.ip)
    }

    /// The pod's working directory (cwd of its processes; holds its kubeconfig,
    /// `serviceaccount/`, the `faketime` offset and `logs/`).
    pub fn pod_dir(&self, namespace: &str, pod: &str) -> Option<PathBuf> {
        self.shared.find(namespace, pod).map(|p| p.dir.clone())
    }

    /// A container's log (the first container when `None`): the current instance's, or
    /// with `previous` the one before the last restart.
    pub fn log(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
        previous: bool,
    ) -> Option<String> {
        self.shared
            .find(namespace, pod)?
            .log_text(container, previous)
    }

    /// Every live process of every container on this node: the members of each host
    /// process's group (grandchildren included; the kubelet's watchdogs excluded), and the
    /// processes of each container (its runtime's own excluded).
    pub fn pids(&self) -> Vec<u32> {
        let groups: Vec<process::Group> = self
            .shared
            .all_pods()
            .iter()
            .flat_map(|p| p.groups())
            .collect();
        let (containers, plain): (Vec<_>, Vec<_>) =
            groups.iter().partition(|g| g.container.is_some());
        let pgids: Vec<i32> = plain.iter().map(|g| g.pgid).collect();
        let mut pids: Vec<u32> = process::group_members(&pgids)
            .into_iter()
            .filter(|pid| !pgids.contains(&(*pid as i32)))
            .collect();
        pids.extend(
            containers
                .iter()
                .filter_map(|g| g.container_pids())
                .flatten(),
        );
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Stops the kubelet like a machine losing power: the loops stop, every process group
    /// is SIGKILLed and reaped. Does not touch the API (pods and the Node stay as they are).
    pub async fn shutdown(mut self) {
        self.shared.stopping.send_replace(true);
        self.shared.held.send_replace(Held::No);
        self.shared.kill_everything();
        let handles = std::mem::take(&mut self.tasks);
        let aborts: Vec<_> = handles.iter().map(JoinHandle::abort_handle).collect();
        let joined =
            tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(handles)).await;
        if joined.is_err() {
            for a in aborts {
                a.abort();
            }
        }
        self.shared.kill_everything();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !self.pids().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.shared.stopping.send_replace(true);
        self.shared.held.send_replace(Held::No);
        self.shared.kill_everything();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Renews the Lease and the Ready condition every `heartbeat_interval` until stopped;
/// nothing while the node is held. Failures (a partition) are retried at the next beat.
async fn heartbeats(shared: Arc<Shared>, mut agent: NodeAgent) {
    let mut stopping = shared.stopping();
    let interval = shared.config.heartbeat_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        shared.gate().await;
        if *stopping.borrow() {
            return;
        }
        if let Err(e) = agent.heartbeat().await {
            tracing::debug!(node = %shared.config.node_name, error = %e, "heartbeat failed");
        }
    }
}
