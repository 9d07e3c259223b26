//! A pod and its containers while this kubelet runs them: the state the pod worker, the
//! container tasks and the faults share. [`PodRuntime`] holds the pod's sandbox, its
//! [`ContainerRuntime`]s (ephemeral containers join them while the pod runs), the
//! [`StopState`] its worker tells the containers and the
//! [`StatusCell`] they report into; the pod worker (`pod`) sets it up and the container
//! tasks (`container`) act on it, so both depend on this module and it on neither. The
//! faults that answer with a `KubeletError` (crash, eviction) are carried out in `pod`.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nix::sys::signal::Signal;
use sim_apiserver::attach::{Attached, Resize};
use sim_apiserver::exec::{Started, Terminal};
use std::os::fd::OwnedFd;
use std::process::Stdio;

use super::terminal::open_pty;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use std::collections::HashMap;
use std::time::SystemTime;

use sim_apiserver::podlog::{LogOptions, LogStream};

use super::logs::{ContainerLog, LogError};
use super::process::{Group, InstanceInput, TerminalControl};
use super::proxy::Proxy;
use super::status::PodStatus;
use super::volume::{PodVolumes, TokenSpec};

/// Locks `m`, also when a thread panicked while holding it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the pod worker tells its containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopState {
    /// Keep running (and restarting).
    Run,
    /// Stop: SIGTERM now, SIGKILL at the deadline; no more restarts.
    Graceful(Instant),
    /// Stop at once with SIGKILL (force deletion, shutdown).
    Kill,
    /// Evicted: SIGKILL at once, report the containers terminated, never restart them.
    Evict,
}

/// One container as the faults see it: its current process group or stand-in, its log.
pub struct ContainerRuntime {
    /// Container name.
    pub name: String,
    /// Whether it is an init container.
    pub init: bool,
    /// Its log.
    pub log: Arc<ContainerLog>,
    pub(crate) group: Mutex<Option<Group>>,
    pub(crate) standin: Mutex<Option<Arc<Notify>>>,
    /// The bundle of the container running now and its runtime, which removes it when it
    /// ends.
    pub(crate) bundle: Mutex<Option<(Arc<super::oci::OciRuntime>, PathBuf)>>,
    /// The stdin kept of the instance running now, when its spec has `stdin: true`.
    pub(crate) stdin: Mutex<Option<Arc<HeldStdin>>>,
    /// The terminal of the instance running now, when its spec has `tty: true`.
    pub(crate) terminal: Mutex<Option<Arc<TerminalControl>>>,
}

/// The stdin the kubelet keeps of a container instance whose spec has `stdin: true`: the
/// write end of the pipe that is its stdin, or the master of its terminal, which attach
/// sessions write to.
pub struct HeldStdin {
    pipe: Arc<tokio::sync::Mutex<Option<InstanceInput>>>,
    /// `stdinOnce`: the end of the first attach session's stdin closes it.
    once: bool,
}

impl HeldStdin {
    /// Keeps `pipe`; with `once`, the first attach session that ends closes it.
    pub fn new(pipe: InstanceInput, once: bool) -> Self {
        Self {
            pipe: Arc::new(tokio::sync::Mutex::new(Some(pipe))),
            once,
        }
    }

    /// A session's stdin: what is sent on it is written to the container's stdin in order;
    /// once it is dropped (and what was sent is written), with `stdinOnce` the container's
    /// stdin is closed. Needs a Tokio runtime.
    pub fn session(&self) -> mpsc::Sender<Bytes> {
        let (tx, mut rx) = mpsc::channel::<Bytes>(16);
        let (pipe, once) = (self.pipe.clone(), self.once);
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                let mut held = pipe.lock().await;
                let Some(writer) = held.as_mut() else { break };
                if writer.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            if once {
                pipe.lock().await.take();
            }
        });
        tx
    }
}

impl ContainerRuntime {
    /// A container that has not started.
    pub fn new(name: &str, init: bool, log_path: PathBuf, log_limit: usize) -> Self {
        Self {
            name: name.to_string(),
            init,
            log: Arc::new(ContainerLog::new(log_path, log_limit)),
            group: Mutex::new(None),
            bundle: Mutex::new(None),
            standin: Mutex::new(None),
            stdin: Mutex::new(None),
            terminal: Mutex::new(None),
        }
    }

    /// Its running process group.
    pub fn group(&self) -> Option<Group> {
        lock(&self.group).clone()
    }

    /// Kills the running instance as a crash would; `false` when nothing runs.
    pub fn crash(&self) -> bool {
        if let Some(g) = self.group() {
            return g.signal(Signal::SIGKILL).is_ok();
        }
        match lock(&self.standin).as_ref() {
            Some(n) => {
                n.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The pod status and its version; container tasks change it, the sync task writes it.
pub struct StatusCell {
    model: Mutex<PodStatus>,
    pub(crate) version: watch::Sender<u64>,
}

impl StatusCell {
    pub(crate) fn new(model: PodStatus) -> Self {
        Self {
            model: Mutex::new(model),
            version: watch::channel(0).0,
        }
    }

    /// Changes the status and schedules a write.
    pub fn update(&self, change: impl FnOnce(&mut PodStatus)) {
        change(&mut lock(&self.model));
        self.version.send_modify(|v| *v += 1);
    }

    /// Reads the status.
    pub fn read<T>(&self, f: impl FnOnce(&PodStatus) -> T) -> T {
        f(&lock(&self.model))
    }

    pub(crate) fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Reads with mutable access but without scheduling a write (condition bookkeeping).
    pub(crate) fn update_quietly<T>(&self, f: impl FnOnce(&mut PodStatus) -> T) -> T {
        f(&mut lock(&self.model))
    }
}

/// Why a command could not be run in a container (`pods/exec`; the kubelet's messages).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The container is not running.
    #[error("container not found ({container:?})")]
    NotRunning {
        /// The container.
        container: String,
    },
    /// The command (or the runtime's `exec`) could not be started.
    #[error("cannot start {command:?} in container {container:?}")]
    Spawn {
        /// argv.
        command: Vec<String>,
        /// The container.
        container: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The command's terminal could not be made.
    #[error("cannot make a terminal in container {container}")]
    Terminal {
        /// The container.
        container: String,
        /// The cause.
        #[source]
        source: super::terminal::TerminalError,
    },
    /// Attach found no running instance of the container.
    #[error("container {container} of pod {pod} is not running")]
    NotAttachable {
        /// The container.
        container: String,
        /// The pod (`namespace/name`).
        pod: String,
    },
    /// Attach could not follow the container's output.
    #[error("cannot attach to container {container}")]
    Attach {
        /// The container.
        container: String,
        /// The cause.
        #[source]
        source: LogError,
    },
}

/// The terminal whose master is `master`: read and written through copies of it, resized
/// on it.
pub(crate) fn terminal_of(master: OwnedFd) -> std::io::Result<Terminal> {
    let file = |fd: &OwnedFd| {
        fd.try_clone()
            .map(|copy| tokio::fs::File::from_std(std::fs::File::from(copy)))
    };
    let (output, input) = (file(&master)?, file(&master)?);
    Ok(Terminal {
        output: Box::pin(output),
        input: Box::pin(input),
        resize: Box::new(move |width, height| {
            if let Err(e) = super::terminal::resize(&master, width, height) {
                tracing::debug!(error = %e, "cannot resize a terminal");
            }
        }),
    })
}

/// A pod's own network (see [`pod_network`]).
pub struct PodNetwork {
    /// The namespace its containers join and its proxy listens in.
    pub namespace: Arc<pod_network::Namespace>,
    /// The pod IP's route into the namespace: dials of the pod IP from this process enter
    /// it.
    _route: pod_network::Route,
}

impl PodNetwork {
    /// A new namespace, with `ip` routed to it.
    ///
    /// # Errors
    /// When the namespace cannot be made.
    pub fn create(ip: Ipv4Addr) -> Result<Self, pod_network::NetworkError> {
        let namespace = Arc::new(pod_network::Namespace::create()?);
        let route = pod_network::route(ip.into(), &namespace);
        Ok(Self {
            namespace,
            _route: route,
        })
    }
}

/// A pod while this kubelet runs it: what the faults act on.
pub struct PodRuntime {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The pod IP.
    pub ip: Ipv4Addr,
    /// Working directory of its processes.
    pub dir: PathBuf,
    /// Its API proxy.
    pub proxy: Proxy,
    /// Its own network namespace, when it has one: pods that are containers do, unless
    /// they ask for `hostNetwork`; `None` is the host's.
    pub network: Option<PodNetwork>,
    /// Admission order on this node.
    pub sequence: u64,
    /// Init containers first, then app containers.
    pub containers: Vec<Arc<ContainerRuntime>>,
    /// Ephemeral containers, in the order they were added to the pod.
    pub(crate) ephemeral: Mutex<Vec<Arc<ContainerRuntime>>>,
    pub(crate) held: AtomicBool,
    pub(crate) node_held: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Whether the pod had ended before this kubelet saw it (nothing runs; no status).
    pub(crate) terminal_on_arrival: bool,
    /// Its volumes (used when pods are containers).
    pub volumes: PodVolumes,
    /// The ServiceAccount tokens of its volumes, with when each was issued.
    pub(crate) tokens: tokio::sync::Mutex<HashMap<TokenSpec, (String, SystemTime)>>,
    /// What the containers are told: run, stop, be killed, be evicted.
    pub(crate) stop: watch::Sender<StopState>,
    /// The status the kubelet reports.
    pub(crate) status: Arc<StatusCell>,
}

impl PodRuntime {
    /// The process groups running now (ephemeral containers' included).
    pub fn groups(&self) -> Vec<Group> {
        self.containers
            .iter()
            .chain(self.ephemeral_containers().iter())
            .filter_map(|c| c.group())
            .collect()
    }

    /// The ephemeral containers added so far.
    pub fn ephemeral_containers(&self) -> Vec<Arc<ContainerRuntime>> {
        lock(&self.ephemeral).clone()
    }

    /// The container named `name`: an init, app or ephemeral container.
    pub fn container(&self, name: &str) -> Option<Arc<ContainerRuntime>> {
        self.containers
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .or_else(|| {
                lock(&self.ephemeral)
                    .iter()
                    .find(|c| c.name == name)
                    .cloned()
            })
    }

    /// Whether new processes must start frozen.
    pub fn frozen(&self) -> bool {
        self.held.load(Ordering::SeqCst) || (self.node_held)()
    }

    /// SIGKILLs every process group now (shutdown, drop, force deletion).
    pub fn kill_all(&self) {
        for g in self.groups() {
            let _ = g.signal(nix::sys::signal::Signal::SIGKILL);
        }
    }

    pub(crate) fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
        self.freeze();
    }

    /// SIGSTOPs every group (without marking the pod held).
    pub(crate) fn freeze(&self) {
        for g in self.groups() {
            let _ = g.stop();
        }
    }

    /// Forgets the pod's own hold; thaws unless the node is still held.
    pub(crate) fn release(&self, node_held: bool) {
        self.held.store(false, Ordering::SeqCst);
        if !node_held {
            self.thaw();
        }
    }

    /// Thaws after the node's release, unless the pod is held on its own.
    pub(crate) fn thaw(&self) {
        if self.held.load(Ordering::SeqCst) {
            return;
        }
        for g in self.groups() {
            let _ = g.resume();
        }
    }

    pub(crate) fn skew(&self, offset: chrono::Duration) -> std::io::Result<()> {
        let millis = offset.num_milliseconds();
        let sign = if millis < 0 { '-' } else { '+' };
        let abs = millis.unsigned_abs();
        let text = format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000);
        let tmp = self.clock_dir().join(".faketime.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, self.clock_file())
    }

    /// The directory of the pod's clock file (bound into its containers).
    pub fn clock_dir(&self) -> PathBuf {
        self.dir.join(super::bundle::CLOCK_HOST_DIR)
    }

    /// libfaketime's `FAKETIME_TIMESTAMP_FILE` of the pod, on the host.
    pub fn clock_file(&self) -> PathBuf {
        self.clock_dir().join(super::bundle::CLOCK_FILE)
    }

    /// The directory of the pod's `hosts`, `resolv.conf` and `hostname`.
    pub fn names_dir(&self) -> PathBuf {
        self.dir.join("etc")
    }

    /// A container's log; without a name, the only app container's (ephemeral containers
    /// are read by name only).
    pub(crate) fn log_text(&self, container: Option<&str>, previous: bool) -> Option<String> {
        let apps: Vec<&Arc<ContainerRuntime>> =
            self.containers.iter().filter(|c| !c.init).collect();
        let c = match container {
            Some(name) => self.container(name)?,
            None if apps.len() == 1 => apps[0].clone(),
            None => return None,
        };
        c.log.text(previous)
    }

    /// Starts `command` in the running instance of `container`, killed when dropped: its
    /// standard streams piped (stdin only with `stdin`), or with `tty` all three a new
    /// pseudo-terminal that is its controlling terminal (`setsid --ctty`). Through the
    /// runtime's `exec` for a container (with `tty`, its `--tty`: the runtime relays a
    /// terminal of the container to this one), as a host process in the pod's directory for
    /// a pod that is processes.
    ///
    /// # Errors
    /// When nothing of the container runs (a stand-in runs nothing either), or the command
    /// or its terminal cannot be started.
    pub fn exec(
        &self,
        container: &str,
        command: &[String],
        stdin: bool,
        tty: bool,
    ) -> Result<Started, ExecError> {
        let not_running = || ExecError::NotRunning {
            container: container.to_string(),
        };
        let group = self
            .container(container)
            .and_then(|c| c.group())
            .ok_or_else(not_running)?;
        let spawn_error = |source| ExecError::Spawn {
            command: command.to_vec(),
            container: container.to_string(),
            source,
        };
        let terminal_error = |source| ExecError::Terminal {
            container: container.to_string(),
            source,
        };
        let (first, rest) = command.split_first().ok_or_else(not_running)?;
        let (program, args, cwd) = match &group.container {
            Some(oci) => {
                let (program, args) = oci.exec_command(command, tty);
                (program, args, PathBuf::from("/"))
            }
            None => (PathBuf::from(first), rest.to_vec(), self.dir.clone()),
        };
        if tty {
            let pty = open_pty().map_err(terminal_error)?;
            let slave = |fd: &OwnedFd| fd.try_clone().map(Stdio::from);
            let (input, output) = (
                slave(&pty.slave).map_err(spawn_error)?,
                slave(&pty.slave).map_err(spawn_error)?,
            );
            // The command's own copies only: the terminal ends when it closes them. A
            // runtime's `exec --tty` relays its own terminal in the container to this one,
            // and takes a new window size from it at the SIGWINCH a resize sends.
            let mut command = tokio::process::Command::new("setsid");
            command
                .args(["--ctty", "--"])
                .arg(program)
                .args(args)
                .current_dir(cwd)
                .stdin(input)
                .stdout(output)
                .stderr(Stdio::from(pty.slave))
                .kill_on_drop(true);
            let child =
                super::process::spawn(command, group.container.as_ref()).map_err(spawn_error)?;
            let terminal = terminal_of(pty.master).map_err(spawn_error)?;
            return Ok(Started {
                child,
                terminal: Some(terminal),
            });
        }
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .current_dir(cwd)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child =
            super::process::spawn(command, group.container.as_ref()).map_err(spawn_error)?;
        Ok(Started {
            child,
            terminal: None,
        })
    }

    /// Attaches to the running instance of `container`: what it writes from now on on its
    /// stdout and its stderr, each tagged (its log followed, until the instance ends) and, with `stdin` and a container whose spec
    /// has `stdin: true`, a session of the stdin this kubelet keeps ([`HeldStdin`]); a
    /// container without one gets no stdin (what the client sends is dropped, as containerd
    /// drops it). Needs a Tokio runtime.
    ///
    /// # Errors
    /// When the container is not running or its log cannot be followed.
    pub fn attach(&self, container: &str, stdin: bool) -> Result<Attached, ExecError> {
        let not_attachable = || ExecError::NotAttachable {
            container: container.to_owned(),
            pod: format!("{}/{}", self.namespace, self.name),
        };
        // The log's checks: a container that has not started cannot be attached to.
        let nothing = LogOptions {
            container: container.to_owned(),
            tail_lines: Some(0),
            ..LogOptions::default()
        };
        let output = match self.read_log(container, &nothing, chrono::Utc::now()) {
            Ok(_) => self
                .container(container)
                .and_then(|c| c.log.follow_outputs())
                .ok_or_else(not_attachable)?,
            Err(source) => {
                return Err(ExecError::Attach {
                    container: container.to_owned(),
                    source,
                });
            }
        };
        let runtime = self.container(container);
        let held = runtime
            .as_ref()
            .and_then(|c| lock(&c.stdin).clone())
            .filter(|_| stdin);
        let terminal = runtime.as_ref().and_then(|c| lock(&c.terminal).clone());
        Ok(Attached {
            output,
            stdin: held.as_ref().map(|h| h.session()),
            stdin_once: held.is_some_and(|h| h.once),
            resize: terminal.map(|t| -> Resize {
                Box::new(move |width, height| {
                    if let Err(e) = t.resize(width, height) {
                        tracing::debug!(error = %e, "cannot resize a container's terminal");
                    }
                })
            }),
        })
    }

    /// Reads a container's log for `pods/log` at `now`, as the kubelet answers it: with
    /// `previous`, the instance its status reports as the last terminated one (while it
    /// waits to restart, the one that just ended).
    ///
    /// # Errors
    /// When the pod has no such container, `previous` is asked of a container that was
    /// not restarted, or the container has not started yet.
    pub fn read_log(
        &self,
        container: &str,
        options: &LogOptions,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<LogStream, LogError> {
        let c = self
            .container(container)
            .ok_or_else(|| LogError::NotAvailable {
                container: container.to_string(),
                pod: self.name.clone(),
            })?;
        let (waiting, restarting) = self.status.read(|s| {
            s.init_containers
                .iter()
                .chain(&s.containers)
                .chain(&s.ephemeral_containers)
                .find(|c| c.name == container)
                .map(|c| {
                    let waiting = match &c.state {
                        super::status::State::Waiting { reason, .. } => Some(reason.clone()),
                        _ => None,
                    };
                    // Between an exit and the restart the status already names the
                    // instance that ended as the last terminated one.
                    let restarting = !c.done
                        && c.last_state.is_some()
                        && !matches!(c.state, super::status::State::Running { .. });
                    (waiting, restarting)
                })
                .unwrap_or_default()
        });
        let read = if options.previous && restarting && c.log.ended() {
            let current = LogOptions {
                previous: false,
                ..options.clone()
            };
            c.log.read(&current, now)
        } else {
            c.log.read(options, now)
        };
        if let Some(stream) = read {
            return Ok(stream);
        }
        if options.previous {
            return Err(LogError::NoPrevious {
                container: container.to_string(),
                pod: self.name.clone(),
            });
        }
        Err(LogError::Waiting {
            container: container.to_string(),
            pod: self.name.clone(),
            reason: waiting.unwrap_or_else(|| "ContainerCreating".into()),
        })
    }
}
