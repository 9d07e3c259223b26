//! One container's life in a pod: prepare (credentials, env, argv — the mapped executable,
//! or the process found in a directory image, see [`super::image`]), start (a process group
//! or a stand-in), probe, end (exit, crash, probe failure, graceful stop), and restart
//! according to the restartPolicy with CrashLoopBackOff delays. Ephemeral containers run
//! the same way but only once: they are never restarted, never probed and never ready.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::core::v1::{
    Container, PersistentVolume, PersistentVolumeClaim, Pod, Probe, Secret,
};
use kube::Api;
use nix::sys::signal::Signal;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::bundle::{self, BundleError};
use super::env::{self, Env, PodFacts, SourceKind, Sources};
use super::image::{self, ImageError};
use super::logs::ContainerLog;
use super::node::CAPACITY;
use super::oci::{BindMount, ContainerSpec, Isolation, OciRuntime, Rootfs};
use super::probe::{self, Kind, Target, Verdict};
use super::process::{Exit, Instance, Spec, Streams, off_the_workers};
use super::runtime::{ContainerRuntime, HeldStdin, PodRuntime, StatusCell, StopState, lock};
use super::shared::Shared;
use super::status::{ContainerStatus, State, Terminated};
use super::volume::{self, VolumeError, VolumeSources};

/// Errors preparing a container (shown as `CreateContainerConfigError`, or
/// `CreateContainerError` when the image has nothing to run).
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The pod's ServiceAccount token is not available.
    #[error(transparent)]
    Token(Box<super::upstream::UpstreamError>),
    /// A file in the pod's directory could not be written.
    #[error("cannot write {path}")]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A ConfigMap or Secret could not be read.
    #[error("failed to sync {kind} cache: {message}")]
    Source {
        /// `configmap` or `secret`.
        kind: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The environment could not be resolved.
    #[error(transparent)]
    Env(#[from] env::EnvError),
    /// A directory image has nothing to run.
    #[error(transparent)]
    Image(ImageError),
    /// The security context refuses the container.
    #[error(transparent)]
    Security(#[from] BundleError),
    /// A volume could not be set up (the pod stays `ContainerCreating`).
    #[error(transparent)]
    Mount(VolumeError),
    /// A volume mount of the container is wrong.
    #[error(transparent)]
    Volume(VolumeError),
    /// The image could not be unpacked (`ErrImagePull`).
    #[error("failed to pull and unpack image {image:?}")]
    Pull {
        /// The image.
        image: String,
        /// The cause.
        #[source]
        source: Box<oci_image::ImageError>,
    },
    /// The image could not be had from the Docker engine that has it (`ErrImagePull`).
    #[error("failed to pull and unpack image {image:?}")]
    Engine {
        /// The image.
        image: String,
        /// The cause.
        #[source]
        source: Box<oci_image::EngineError>,
    },
    /// `imagePullPolicy: Never` and the image is not present (`ErrImageNeverPull`).
    #[error("Container image {0:?} is not present with pull policy of Never")]
    NeverPull(String),
    /// The unpacking of an image stopped before it ended (the kubelet is stopping).
    #[error("the unpacking of image {0:?} was cut short")]
    Unpacking(String),
    /// A volume's ServiceAccount token could not be had.
    #[error(transparent)]
    VolumeToken(Box<super::upstream::UpstreamError>),
    /// An ephemeral container's `targetContainerName` names no container of the pod.
    #[error("unable to find target container {0}")]
    NoTarget(String),
}

impl ContainerError {
    /// The waiting reason the kubelet reports for it.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Image(_) => "CreateContainerError",
            Self::Mount(_) | Self::VolumeToken(_) => "ContainerCreating",
            Self::Pull { .. } | Self::Engine { .. } | Self::Unpacking(_) => "ErrImagePull",
            Self::NeverPull(_) => "ErrImageNeverPull",
            _ => "CreateContainerConfigError",
        }
    }
}

/// CrashLoopBackOff as the kubelet computes it: the first restart is immediate, then
/// `base`, doubling up to `cap`; a container that ran for more than twice `cap` starts over.
#[derive(Debug, Clone)]
pub struct RestartBackoff {
    base: Duration,
    cap: Duration,
    window: Option<Duration>,
}

impl RestartBackoff {
    /// A fresh backoff.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap: cap.max(base),
            window: None,
        }
    }

    /// The delay before the next restart of a container that ran for `ran_for`.
    pub fn next(&mut self, ran_for: Duration) -> Duration {
        let expired = ran_for > self.cap * 2;
        let (delay, window) = match self.window {
            Some(w) if !expired => (w, (w * 2).min(self.cap)),
            _ => (Duration::ZERO, self.base),
        };
        self.window = Some(window);
        delay
    }
}

/// A duration as Go prints it (`100ms`, `10s`, `1m20s`, `5m0s`).
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    let minutes = (secs / 60.0).floor() as u64;
    let rest = secs - (minutes * 60) as f64;
    let rest = if rest.fract() == 0.0 {
        format!("{}s", rest as u64)
    } else {
        format!("{}s", (rest * 1000.0).round() / 1000.0)
    };
    if minutes == 0 {
        rest
    } else {
        format!("{minutes}m{rest}")
    }
}

enum Launch {
    /// A process, with its `argv[0]` when that is not the executable's path.
    Process(Spec, Option<String>),
    /// A container, through the runtime, and the image it runs (for `imageID`).
    Container(Arc<OciRuntime>, Box<ContainerSpec>, String),
    /// A process the runtime cannot start (shown as `StartError`).
    Unstartable(ImageError),
    StandIn,
}

enum Running {
    Process(Box<Instance>),
    StandIn(Arc<Notify>),
}

struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// An image unpacked from a layout, an archive or a registry, as a container runs it.
fn unpacked_image(image: &str, unpacked: oci_image::Image) -> ResolvedImage {
    let env = unpacked
        .config
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ResolvedImage {
        root: unpacked.rootfs,
        filesystem: true,
        config: image::ImageConfig {
            entrypoint: unpacked.config.entrypoint,
            cmd: unpacked.config.cmd,
            user: None,
        },
        env,
        working_dir: unpacked.config.working_dir.filter(|w| !w.is_empty()),
        user: unpacked.config.user.filter(|u| !u.is_empty()),
        id: Some(format!("{image}@{}", unpacked.digest)),
    }
}

/// The `imagePullPolicy` kube-apiserver gives a container that sets none: `Always` for an
/// image tagged `:latest` or not tagged (and not pinned by digest), else `IfNotPresent`.
fn default_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit_once('/').map_or(image, |(_, last)| last);
    let tag = last.split_once(':').map(|(_, tag)| tag);
    match tag {
        _ if image.contains('@') => "IfNotPresent",
        None | Some("latest") => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// What a container's image runs from.
#[derive(Debug, Clone, Default)]
struct ResolvedImage {
    /// The executable, or the root filesystem's directory.
    root: PathBuf,
    /// Whether `root` is a root filesystem.
    filesystem: bool,
    /// Its entrypoint and cmd.
    config: image::ImageConfig,
    /// Its environment (before the container's).
    env: Vec<(String, String)>,
    /// Its working directory.
    working_dir: Option<String>,
    /// Its user.
    user: Option<String>,
    /// Its `imageID`, when it has a digest.
    id: Option<String>,
}

/// One container's life.
pub struct ContainerTask {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pod: Arc<PodRuntime>,
    pub(crate) runtime: Arc<ContainerRuntime>,
    pub(crate) status: Arc<StatusCell>,
    pub(crate) spec: Container,
    /// Its place in its list of the status: init, app or ephemeral containers.
    pub(crate) index: usize,
    pub(crate) init: bool,
    /// An ephemeral container (`spec` is its common part; `init` is false).
    pub(crate) ephemeral: bool,
    /// The container an ephemeral container targets (`targetContainerName`).
    pub(crate) target: Option<String>,
    pub(crate) pod_object: Arc<Pod>,
    pub(crate) stop: watch::Receiver<StopState>,
}

impl ContainerTask {
    fn update(&self, change: impl FnOnce(&mut ContainerStatus)) {
        let (init, ephemeral, index) = (self.init, self.ephemeral, self.index);
        self.status.update(|s| {
            let list = if ephemeral {
                &mut s.ephemeral_containers
            } else if init {
                &mut s.init_containers
            } else {
                &mut s.containers
            };
            if let Some(c) = list.get_mut(index) {
                change(c);
                // Nothing probes an ephemeral container: it is never ready.
                c.ready &= !ephemeral;
            }
        });
    }

    fn stop_state(&self) -> StopState {
        *self.stop.borrow()
    }

    fn restart_policy(&self) -> String {
        self.pod_object
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    fn grace_period(&self, probe: Option<&Probe>) -> Duration {
        let seconds = probe
            .and_then(|p| p.termination_grace_period_seconds)
            .or_else(|| {
                self.pod_object
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30)
            .max(0);
        Duration::from_secs(seconds as u64)
    }

    /// Waits `d`; `true` when a stop came first.
    async fn sleep_or_stop(&mut self, d: Duration) -> bool {
        let sleep = tokio::time::sleep(d);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return self.stop_state() != StopState::Run,
                changed = self.stop.changed() => {
                    if changed.is_err() || self.stop_state() != StopState::Run {
                        return true;
                    }
                }
            }
        }
    }

    /// Runs the container until it will not run again.
    pub async fn run(mut self) {
        let config = &self.shared.config;
        let mut backoff =
            RestartBackoff::new(config.restart_backoff_base, config.restart_backoff_cap);
        let mut restarts = 0;
        // The image back-off: the kubelet's, base and cap as the restarts'.
        let (pull_base, pull_cap) = (config.restart_backoff_base, config.restart_backoff_cap);
        let mut pull_delay = pull_base;
        loop {
            if self.stop_state() != StopState::Run {
                self.never_again();
                return;
            }
            self.shared.gate().await;
            let launch = match self.prepare().await {
                Ok(l) => l,
                Err(
                    e @ (ContainerError::Pull { .. }
                    | ContainerError::Engine { .. }
                    | ContainerError::Unpacking(_)),
                ) => {
                    // ErrImagePull, then ImagePullBackOff until the next attempt.
                    let message = error_chain(&e);
                    let image = self.spec.image.clone().unwrap_or_default();
                    self.update(|c| {
                        c.state = State::Waiting {
                            reason: "ErrImagePull".into(),
                            message: Some(message.clone()),
                        }
                    });
                    if self.sleep_or_stop(Duration::from_secs(1)).await {
                        continue;
                    }
                    self.update(|c| {
                        c.state = State::Waiting {
                            reason: "ImagePullBackOff".into(),
                            message: Some(format!(
                                "Back-off pulling image {image:?}: ErrImagePull: {message}"
                            )),
                        }
                    });
                    self.sleep_or_stop(pull_delay).await;
                    pull_delay = (pull_delay * 2).min(pull_cap);
                    continue;
                }
                Err(e) => {
                    let message = error_chain(&e);
                    let reason = e.reason();
                    self.update(|c| {
                        c.state = State::Waiting {
                            reason: reason.into(),
                            message: Some(message),
                        }
                    });
                    self.sleep_or_stop(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let terminated = self.run_instance(launch, restarts).await;
            if self.stop_state() == StopState::Kill {
                return;
            }
            let code = terminated.exit_code;
            let restart = self.stop_state() == StopState::Run
                && !self.ephemeral
                && match self.restart_policy().as_str() {
                    "Never" => false,
                    "OnFailure" => code != 0,
                    _ => !self.init || code != 0,
                };
            if !restart {
                self.update(|c| {
                    c.state = State::Terminated(terminated);
                    c.ready = false;
                    c.started = false;
                    c.done = true;
                });
                return;
            }
            let ran_for = terminated
                .started_at
                .map(|s| (terminated.finished_at - s).to_std().unwrap_or_default())
                .unwrap_or_default();
            let delay = backoff.next(ran_for);
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                go_duration(delay),
                self.spec.name,
                self.pod.name,
                self.pod.namespace,
                self.pod.uid
            );
            let last = terminated.clone();
            self.update(|c| {
                c.last_state = Some(last);
                c.state = if delay.is_zero() {
                    State::Terminated(terminated.clone())
                } else {
                    State::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: Some(message),
                    }
                };
                c.ready = false;
                c.started = false;
            });
            if !delay.is_zero() && self.sleep_or_stop(delay).await {
                if self.stop_state() == StopState::Kill {
                    return;
                }
                self.update(|c| {
                    c.state = State::Terminated(terminated);
                    c.done = true;
                });
                return;
            }
            restarts += 1;
        }
    }

    /// The container will not run again and has nothing to report but that.
    fn never_again(&self) {
        self.update(|c| {
            if c.done {
                return;
            }
            c.state = match &c.last_state {
                Some(t) if !matches!(c.state, State::Running { .. }) => {
                    State::Terminated(t.clone())
                }
                _ => State::Terminated(Terminated {
                    exit_code: 137,
                    signal: None,
                    reason: "ContainerStatusUnknown".into(),
                    message: Some(
                        "The container could not be located when the pod was terminated".into(),
                    ),
                    started_at: None,
                    finished_at: Utc::now(),
                    container_id: None,
                }),
            };
            c.ready = false;
            c.started = false;
            c.done = true;
        });
    }

    /// Credentials, env and argv for a mapped image; a stand-in otherwise.
    async fn prepare(&self) -> Result<Launch, ContainerError> {
        if let Some(target) = &self.target {
            let spec = self.pod_object.spec.as_ref();
            let mut names = spec.into_iter().flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            });
            if !names.any(|c| &c.name == target) {
                return Err(ContainerError::NoTarget(target.clone()));
            }
        }
        let image = self.spec.image.clone().unwrap_or_default();
        tracing::debug!(pod = %self.pod.name, stage = "prepare", "pod start");
        let Some(resolved) = self.resolve_image(&image).await? else {
            return Ok(Launch::StandIn);
        };
        tracing::debug!(pod = %self.pod.name, stage = "image resolved", "pod start");
        let program = resolved.root.clone();
        let filesystem = resolved.filesystem;
        let runtime = match &self.shared.config.isolation {
            Isolation::Containers(rt) => Some(rt.clone()),
            Isolation::Processes { .. } => None,
        };
        // What the API server must give, all at once: the env's objects, and the
        // volumes' (a container) or the credentials (a host process).
        let (sources, volume_sources) = tokio::try_join!(self.fetch_sources(), async {
            if runtime.is_some() {
                volume_sources(&self.shared, &self.pod, &self.pod_object)
                    .await
                    .map(Some)
            } else {
                self.write_credentials().await.map(|()| None)
            }
        })?;
        tracing::debug!(pod = %self.pod.name, stage = "sources fetched", "pod start");
        let dir = &self.pod.dir;
        let port = self.pod.proxy.addr().port().to_string();
        let mut base = Env::new();
        let path = if filesystem {
            image::DEFAULT_PATH.to_string()
        } else {
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
        };
        base.set("PATH", path);
        for (k, v) in &resolved.env {
            base.set(k, v.clone());
        }
        if runtime.is_none() {
            base.set("HOME", dir.display().to_string());
        }
        base.set("HOSTNAME", super::names::hostname(&self.pod_object));
        base.set("KUBERNETES_SERVICE_HOST", "127.0.0.1");
        base.set("KUBERNETES_SERVICE_PORT", port.clone());
        base.set("KUBERNETES_SERVICE_PORT_HTTPS", port.clone());
        base.set("KUBERNETES_PORT", format!("tcp://127.0.0.1:{port}"));
        if runtime.is_none() {
            base.set("KUBECONFIG", dir.join("kubeconfig").display().to_string());
        }
        let facts = PodFacts {
            pod: &self.pod_object,
            pod_ip: self.pod.ip.to_string(),
            host_ip: self.shared.config.node_ip.to_string(),
            allocatable: CAPACITY,
        };
        let env = env::container_env(&self.spec, &facts, &sources, &base)?;
        if let (Some(rt), Some(sources)) = (runtime, volume_sources) {
            return self.prepare_container(rt, &image, &resolved, &env, &facts, &sources);
        }
        let found = if filesystem {
            let expand = |list: &Option<Vec<String>>| -> Vec<String> {
                list.iter().flatten().map(|a| env.expand(a)).collect()
            };
            let config = resolved.config.clone();
            match image::process(
                &image,
                &program,
                &config,
                &expand(&self.spec.command),
                &expand(&self.spec.args),
                env.get("PATH"),
                self.spec
                    .working_dir
                    .as_deref()
                    .or(resolved.working_dir.as_deref()),
            ) {
                Ok(p) => Some(p),
                Err(e @ ImageError::NoCommand { .. }) => return Err(ContainerError::Image(e)),
                Err(e) => return Ok(Launch::Unstartable(e)),
            }
        } else {
            None
        };
        let mut vars: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(lib) = &self.shared.config.faketime_library {
            vars.retain(|(k, _)| !k.starts_with("FAKETIME") && k != "LD_PRELOAD");
            vars.push(("LD_PRELOAD".into(), lib.display().to_string()));
            vars.push((
                "FAKETIME_TIMESTAMP_FILE".into(),
                self.pod.clock_file().display().to_string(),
            ));
            vars.push(("FAKETIME_CACHE_DURATION".into(), "1".into()));
            // A skewed clock is a wall-clock matter (NTP drift, a wrong RTC): the
            // monotonic clock keeps counting real time, as it does on a real machine.
            vars.push(("DONT_FAKE_MONOTONIC".into(), "1".into()));
        }
        Ok(match found {
            Some(p) => Launch::Process(
                Spec {
                    program: p.program,
                    args: p.args,
                    env: vars,
                    cwd: p.cwd,
                },
                Some(p.arg0),
            ),
            None => Launch::Process(
                Spec {
                    program,
                    args: env::container_args(&self.spec, &env),
                    env: vars,
                    cwd: dir.clone(),
                },
                None,
            ),
        })
    }

    /// A container of the runtime: its volumes synced from `sources`, its argv, environment, root
    /// filesystem, mounts, security and limits.
    fn prepare_container(
        &self,
        runtime: Arc<OciRuntime>,
        image: &str,
        resolved: &ResolvedImage,
        env: &Env,
        facts: &PodFacts<'_>,
        sources: &VolumeSources,
    ) -> Result<Launch, ContainerError> {
        let (program, filesystem) = (resolved.root.clone(), resolved.filesystem);
        off_the_workers(|| self.pod.volumes.sync(facts, sources)).map_err(ContainerError::Mount)?;
        tracing::debug!(pod = %self.pod.name, stage = "volumes synced", "pod start");
        let lookup = |name: &str| env.get(name).map(str::to_string);
        let volume_mounts = self
            .pod
            .volumes
            .mounts(&self.pod_object, &self.spec, &lookup)
            .map_err(ContainerError::Volume)?;
        let expand = |list: &Option<Vec<String>>| -> Vec<String> {
            list.iter().flatten().map(|a| env.expand(a)).collect()
        };
        let working_dir = self
            .spec
            .working_dir
            .clone()
            .or_else(|| resolved.working_dir.clone())
            .unwrap_or_else(|| "/".into());
        let (rootfs, args, cwd) = if filesystem {
            let config = resolved.config.clone();
            let (command, args) = (expand(&self.spec.command), expand(&self.spec.args));
            match image::process(
                image,
                &program,
                &config,
                &command,
                &args,
                env.get("PATH"),
                Some(working_dir.as_str()),
            ) {
                Ok(_) => {}
                Err(e @ ImageError::NoCommand { .. }) => return Err(ContainerError::Image(e)),
                Err(e) => return Ok(Launch::Unstartable(e)),
            }
            (
                Rootfs::Image(program.clone()),
                image::argv(&config, &command, &args),
                working_dir,
            )
        } else {
            let command0 = self
                .spec
                .command
                .as_ref()
                .and_then(|c| c.first())
                .map(|c| env.expand(c));
            let at = bundle::executable_place(command0.as_deref(), &program);
            let mut args = vec![at.clone()];
            args.extend(env::container_args(&self.spec, env));
            (
                Rootfs::Executable {
                    program: program.clone(),
                    at,
                },
                args,
                working_dir,
            )
        };
        let security = bundle::security(
            &self.pod_object,
            &self.spec,
            resolved.user.as_deref(),
            filesystem.then_some(program.as_path()),
        )?;
        let mut vars: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut mounts = bundle::name_mounts(&self.pod.names_dir());
        mounts.extend(volume_mounts.into_iter().map(|m| BindMount {
            source: m.source,
            destination: m.destination,
            read_only: m.read_only,
        }));
        if let Some(lib) = &self.shared.config.faketime_library {
            vars.retain(|(k, _)| !k.starts_with("FAKETIME") && k != "LD_PRELOAD");
            vars.push(("LD_PRELOAD".into(), lib.display().to_string()));
            vars.push((
                "FAKETIME_TIMESTAMP_FILE".into(),
                format!("{}/{}", bundle::CLOCK_DIR, bundle::CLOCK_FILE),
            ));
            vars.push(("FAKETIME_CACHE_DURATION".into(), "1".into()));
            vars.push(("DONT_FAKE_MONOTONIC".into(), "1".into()));
            mounts.extend(bundle::clock_mounts(&self.pod.clock_dir(), lib));
        }
        // Unique beyond this kubelet's life: a kubelet started again must not reuse an id.
        let n = &uuid::Uuid::new_v4().simple().to_string()[..12];
        let id = format!("{}-{}-{n}", self.pod.uid, self.spec.name);
        let spec = ContainerSpec {
            bundle: self
                .pod
                .dir
                .join("containers")
                .join(format!("{}-{n}", self.spec.name)),
            id,
            rootfs,
            args,
            env: vars,
            cwd,
            hostname: super::names::hostname(&self.pod_object),
            network: self.pod.network.as_ref().map(|n| n.namespace.path()),
            terminal: self.spec.tty == Some(true),
            mounts,
            security,
            limits: bundle::limits(&self.spec),
        };
        let image_id = resolved.id.clone().unwrap_or_else(|| {
            format!(
                "{}://{}",
                self.shared.config.isolation_name(),
                program.display()
            )
        });
        Ok(Launch::Container(runtime, Box::new(spec), image_id))
    }

    /// What `image` is made runnable from, in this order: what it is mapped to (an
    /// executable, a directory, or an image layout or archive unpacked, cached by digest),
    /// else the Docker engine's store or a registry ([`Self::unmapped`]); `None` for a
    /// stand-in.
    async fn resolve_image(&self, image: &str) -> Result<Option<ResolvedImage>, ContainerError> {
        let images = &self.shared.config.images;
        let Some(path) = images.get(image).map(std::path::Path::to_path_buf) else {
            return self.unmapped(image).await;
        };
        let source = match image::kind_of(&path) {
            image::Kind::Executable => {
                return Ok(Some(ResolvedImage {
                    root: path,
                    filesystem: false,
                    user: images.config(image).and_then(|c| c.user.clone()),
                    ..ResolvedImage::default()
                }));
            }
            image::Kind::Directory => {
                let config = images.config(image).cloned().unwrap_or_default();
                return Ok(Some(ResolvedImage {
                    root: path,
                    filesystem: true,
                    user: config.user.clone(),
                    config,
                    ..ResolvedImage::default()
                }));
            }
            image::Kind::Layout => oci_image::Source::Layout(path),
            image::Kind::Archive => oci_image::Source::Archive(path),
        };
        let store = oci_image::ImageStore::new(self.shared.config.image_cache.clone());
        let reference = image.to_string();
        let unpacked = tokio::task::spawn_blocking(move || store.unpack(&source, Some(&reference)))
            .await
            .map_err(|_| ContainerError::Unpacking(image.to_string()))?
            .map_err(|source| ContainerError::Pull {
                image: image.to_string(),
                source: Box::new(source),
            })?;
        Ok(Some(unpacked_image(image, unpacked)))
    }

    /// An unmapped image, as its `imagePullPolicy` says (the API server's default when
    /// unset: `Always` for `:latest` or no tag, else `IfNotPresent`): from the Docker
    /// engine's store when the engine has it ([`crate::KubeletConfig::docker_engine`]),
    /// which counts as present — but for `Always` when its registry is one this kubelet
    /// pulls from ([`crate::KubeletConfig::registries`]) — else pulled from that registry;
    /// `None`, a stand-in, for an image of any other registry.
    async fn unmapped(&self, image: &str) -> Result<Option<ResolvedImage>, ContainerError> {
        let Ok(registry) = oci_image::registry_of(image) else {
            return Ok(None);
        };
        let policy = self
            .spec
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| default_pull_policy(image).to_string());
        let pulls = self.shared.config.registries.contains(&registry);
        if !(pulls && policy == "Always")
            && let Some(found) = self.engine_image(image).await?
        {
            return Ok(Some(found));
        }
        if !pulls {
            return Ok(None);
        }
        let present = lock(&self.shared.pulled).get(image).cloned();
        let pulled =
            match (policy.as_str(), present) {
                ("Never" | "IfNotPresent", Some(present)) => present,
                ("Never", None) => return Err(ContainerError::NeverPull(image.to_string())),
                _ => {
                    let options = oci_image::PullOptions {
                        credentials: self.pull_credentials(&registry).await,
                        insecure: false,
                    };
                    let store = oci_image::ImageStore::new(self.shared.config.image_cache.clone());
                    let pulled = store.pull(image, &options).await.map_err(|source| {
                        ContainerError::Pull {
                            image: image.to_string(),
                            source: Box::new(source),
                        }
                    })?;
                    lock(&self.shared.pulled).insert(image.to_string(), pulled.clone());
                    pulled
                }
            };
        Ok(Some(unpacked_image(image, pulled)))
    }

    /// `image` from the Docker engine's store, exported once and cached by its image id;
    /// `None` when no engine is configured or running, when it does not have the image, or
    /// when pods are host processes (an image's root filesystem needs a runtime to run).
    async fn engine_image(&self, image: &str) -> Result<Option<ResolvedImage>, ContainerError> {
        let config = &self.shared.config;
        let Some(engine) = &config.docker_engine else {
            return Ok(None);
        };
        if !matches!(config.isolation, Isolation::Containers(_)) {
            return Ok(None);
        }
        let store = oci_image::ImageStore::new(config.image_cache.clone());
        let found =
            store
                .engine_image(engine, image)
                .await
                .map_err(|source| ContainerError::Engine {
                    image: image.to_string(),
                    source: Box::new(source),
                })?;
        Ok(found.map(|unpacked| unpacked_image(image, unpacked)))
    }

    /// The credentials for `registry` in the pod's `imagePullSecrets` (the first
    /// `kubernetes.io/dockerconfigjson` Secret that has some), as the kubelet's keyring
    /// finds them; a Secret that is missing or unreadable is skipped, as the kubelet skips
    /// it (with a warning).
    async fn pull_credentials(&self, registry: &str) -> Option<oci_image::Credentials> {
        let names = self
            .pod_object
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.clone())
            .unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(self.shared.client.clone(), &self.pod.namespace);
        for reference in &names {
            let name = reference.name.clone();
            let secret = match api.get_opt(&name).await {
                Ok(Some(secret)) => secret,
                Ok(None) => {
                    tracing::warn!(secret = name, "an image pull secret of the pod is missing");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(secret = name, error = %e, "cannot read an image pull secret");
                    continue;
                }
            };
            let config = secret
                .data
                .as_ref()
                .and_then(|d| d.get(".dockerconfigjson"))
                .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes.0).ok());
            let Some(config) = config else {
                continue;
            };
            match oci_image::Credentials::from_docker_config(&config, registry) {
                Ok(Some(credentials)) => return Some(credentials),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(secret = name, error = %e, "an image pull secret is unreadable");
                }
            }
        }
        None
    }

    /// The ServiceAccount files and the kubeconfig (server = the pod's proxy).
    async fn write_credentials(&self) -> Result<(), ContainerError> {
        let spec = self.pod_object.spec.as_ref();
        let namespace = &self.pod.namespace;
        let account = spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let automount = spec.and_then(|s| s.automount_service_account_token) != Some(false);
        let token = if automount {
            let pod = sim_apiserver::audit::PodRef {
                namespace: namespace.clone(),
                name: self.pod.name.clone(),
                uid: self.pod.uid.clone(),
            };
            self.shared
                .server
                .service_account_token(&self.shared.client, &pod, &account)
                .await
                .map_err(|e| ContainerError::Token(Box::new(e)))?
        } else {
            String::new()
        };
        let dir = &self.pod.dir;
        // Atomically: another container of the pod may be reading these files right now.
        let write = |path: PathBuf, text: &str| {
            let tmp = path.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
            std::fs::write(&tmp, text)
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|source| ContainerError::File { path, source })
        };
        let sa_dir = dir.join("serviceaccount");
        std::fs::create_dir_all(&sa_dir).map_err(|source| ContainerError::File {
            path: sa_dir.clone(),
            source,
        })?;
        if automount {
            write(sa_dir.join("token"), &token)?;
        }
        write(sa_dir.join("ca.crt"), &self.shared.pod_ca_pem())?;
        write(sa_dir.join("namespace"), namespace)?;
        let user = format!("system:serviceaccount:{namespace}:{account}");
        let server = format!("https://{}", self.pod.proxy.addr());
        let kubeconfig = with_namespace(
            &sim_apiserver::kubeconfig(
                &self.shared.server.cluster_name(),
                &server,
                &self.shared.pod_ca_pem(),
                &user,
                &token,
            ),
            namespace,
        );
        write(dir.join("kubeconfig"), &kubeconfig)
    }

    async fn fetch_sources(&self) -> Result<Sources, ContainerError> {
        let mut sources = Sources::default();
        let namespace = &self.pod.namespace;
        for (kind, name) in env::references(&self.spec) {
            let limit = Duration::from_secs(5);
            match kind {
                SourceKind::ConfigMap => {
                    let got = self.shared.config_maps.get(namespace, &name);
                    let cm = watched("configmap", tokio::time::timeout(limit, got).await)?;
                    if let Some(cm) = cm {
                        let mut data: BTreeMap<String, String> = cm.data.unwrap_or_default();
                        for (k, v) in cm.binary_data.unwrap_or_default() {
                            data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
                        }
                        sources.config_maps.insert(name, data);
                    }
                }
                SourceKind::Secret => {
                    let got = self.shared.secrets.get(namespace, &name);
                    if let Some(secret) = watched("secret", tokio::time::timeout(limit, got).await)?
                    {
                        let mut data: BTreeMap<String, String> = secret
                            .data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                            .collect();
                        for (k, v) in secret.string_data.unwrap_or_default() {
                            data.insert(k, v);
                        }
                        sources.secrets.insert(name, data);
                    }
                }
            }
        }
        Ok(sources)
    }

    fn spawn_probe(
        &self,
        kind: Kind,
        probe: &Probe,
        tx: &mpsc::UnboundedSender<Verdict>,
    ) -> JoinHandle<()> {
        let target = Target {
            pod_ip: self.pod.ip,
            node_ip: self.shared.config.node_ip,
        };
        let exec = probe::exec::starter(self.runtime.clone(), self.pod.dir.clone());
        tokio::spawn(probe::run(
            kind,
            probe.clone(),
            self.spec.clone(),
            target,
            Some(exec),
            tx.clone(),
            self.shared.gate_fn(),
        ))
    }

    fn start_main_probes(&self, tasks: &mut Tasks, tx: &mpsc::UnboundedSender<Verdict>) {
        if let Some(p) = &self.spec.readiness_probe {
            tasks.0.push(self.spawn_probe(Kind::Readiness, p, tx));
        }
        if let Some(p) = &self.spec.liveness_probe {
            tasks.0.push(self.spawn_probe(Kind::Liveness, p, tx));
        }
    }

    /// How a new instance's standard streams are connected: a terminal for a spec with
    /// `tty: true`, pipes otherwise; stdin kept for a spec with `stdin: true`.
    fn streams(&self) -> Streams {
        let stdin = self.spec.stdin == Some(true);
        if self.spec.tty == Some(true) {
            Streams::Terminal { stdin }
        } else {
            Streams::Pipes { stdin }
        }
    }

    /// Keeps the stdin of a new instance whose spec has `stdin: true`, and its terminal,
    /// for attach. `stdinOnce` closes a kept pipe, not a terminal (as containerd's attach).
    fn hold_stdin(&self, instance: &mut Instance) {
        let once = self.spec.stdin_once == Some(true) && self.spec.tty != Some(true);
        *lock(&self.runtime.stdin) = instance
            .take_stdin()
            .map(|pipe| Arc::new(HeldStdin::new(pipe, once)));
        *lock(&self.runtime.terminal) = instance.terminal();
    }

    /// Starts one instance and runs it to its end.
    async fn run_instance(&mut self, launch: Launch, restarts: i32) -> Terminated {
        let started_at = Utc::now();
        self.runtime.log.new_instance();
        // However this ends (exit, a start error, the task aborted), followers learn of it.
        let _log_ends = InstanceEnd(self.runtime.log.clone());
        let (mut running, container_id, image_id) = match launch {
            Launch::Unstartable(e) => {
                let message = format!("unable to start container process: {}", error_chain(&e));
                return start_error(message, started_at);
            }
            Launch::Process(spec, arg0) => {
                match Instance::spawn_as(
                    &spec,
                    arg0.as_deref(),
                    self.streams(),
                    self.runtime.log.clone(),
                )
                .await
                {
                    Ok(mut instance) => {
                        self.hold_stdin(&mut instance);
                        let group = instance.group();
                        *lock(&self.runtime.group) = Some(group.clone());
                        if self.pod.frozen() {
                            let _ = group.stop();
                        }
                        let id = format!("opconform://{}", group.pid);
                        (
                            Running::Process(Box::new(instance)),
                            id,
                            format!("opconform://{}", spec.program.display()),
                        )
                    }
                    Err(e) => return start_error(error_chain(&e), started_at),
                }
            }
            Launch::Container(runtime, spec, image_id) => {
                tracing::debug!(pod = %self.pod.name, stage = "bundle", "pod start");
                let started = off_the_workers(|| runtime.prepare(&spec))
                    .map_err(|e| error_chain(&e))
                    .map(Arc::new);
                tracing::debug!(pod = %self.pod.name, stage = "bundle written", "pod start");
                let spawned = match started {
                    Ok(container) => Instance::spawn_container(
                        container,
                        self.streams(),
                        self.runtime.log.clone(),
                    )
                    .await
                    .map_err(|e| error_chain(&e)),
                    Err(e) => Err(e),
                };
                match spawned {
                    Ok(mut instance) => {
                        self.hold_stdin(&mut instance);
                        let group = instance.group();
                        *lock(&self.runtime.group) = Some(group.clone());
                        if self.pod.frozen() {
                            let _ = group.stop();
                        }
                        let id = format!("{}://{}", runtime.name(), spec.id);
                        *lock(&self.runtime.bundle) = Some((runtime.clone(), spec.bundle.clone()));
                        (Running::Process(Box::new(instance)), id, image_id)
                    }
                    Err(message) => {
                        let _ = std::fs::remove_dir_all(&spec.bundle);
                        return start_error(message, started_at);
                    }
                }
            }
            Launch::StandIn => {
                let notify = Arc::new(Notify::new());
                *lock(&self.runtime.standin) = Some(notify.clone());
                let id = format!(
                    "opconform://standin-{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..12]
                );
                let image = self.spec.image.clone().unwrap_or_default();
                (Running::StandIn(notify), id, format!("standin://{image}"))
            }
        };
        let standin = matches!(running, Running::StandIn(_));
        let has_startup = self.spec.startup_probe.is_some() && !standin;
        let has_readiness = self.spec.readiness_probe.is_some() && !standin;
        let mut started = !has_startup;
        let mut ready = started && !has_readiness;
        let (cid, iid) = (container_id.clone(), image_id);
        tracing::debug!(pod = %self.pod.name, stage = "started", "pod start");
        self.update(|c| {
            c.state = State::Running { started_at };
            c.container_id = Some(cid);
            c.image_id = iid;
            c.restart_count = restarts;
            c.ever_started = true;
            c.started = started;
            c.ready = ready;
        });
        let (tx, mut verdicts) = mpsc::unbounded_channel();
        let mut probes = Tasks(Vec::new());
        if !standin {
            match &self.spec.startup_probe {
                Some(p) => probes.0.push(self.spawn_probe(Kind::Startup, p, &tx)),
                None => self.start_main_probes(&mut probes, &tx),
            }
        }
        let mut kill_at: Option<Instant> = None;
        let mut killed = false;
        let mut stop_closed = false;
        let mut stand_in_exit: Option<Exit> = None;
        // Apply a stop that was requested before this instance started.
        let mut pending_stop = self.stop_state() != StopState::Run;
        let exit = loop {
            if pending_stop {
                pending_stop = false;
                match self.stop_state() {
                    StopState::Graceful(deadline) => {
                        if kill_at.is_none() && !killed {
                            terminate(&running, &mut stand_in_exit);
                        }
                        kill_at = Some(kill_at.map_or(deadline, |k| k.min(deadline)));
                    }
                    StopState::Kill | StopState::Evict => {
                        kill(&running, &mut stand_in_exit);
                        killed = true;
                        kill_at = None;
                    }
                    StopState::Run => {}
                }
            }
            if let Some(exit) = stand_in_exit {
                break exit;
            }
            tokio::select! {
                exit = wait(&mut running) => break exit,
                Some(v) = verdicts.recv() => match (v.kind, v.success) {
                    (Kind::Startup, true) => {
                        started = true;
                        ready = !has_readiness;
                        self.start_main_probes(&mut probes, &tx);
                        self.update(|c| { c.started = true; c.ready = ready; });
                    }
                    (Kind::Readiness, ok) => {
                        ready = ok && started;
                        self.update(|c| c.ready = ready);
                    }
                    (Kind::Liveness, true) => {}
                    (Kind::Startup | Kind::Liveness, false) => {
                        if kill_at.is_none() && !killed {
                            tracing::debug!(container = %self.spec.name, pod = %self.pod.name, message = %v.message, "probe failed, restarting");
                            let probe = if v.kind == Kind::Startup { &self.spec.startup_probe } else { &self.spec.liveness_probe };
                            let grace = self.grace_period(probe.as_ref());
                            terminate(&running, &mut stand_in_exit);
                            kill_at = Some(Instant::now() + grace);
                        }
                    }
                },
                changed = self.stop.changed(), if !stop_closed => {
                    if changed.is_err() {
                        stop_closed = true;
                        kill(&running, &mut stand_in_exit);
                        killed = true;
                    } else {
                        pending_stop = true;
                    }
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    kill(&running, &mut stand_in_exit);
                    killed = true;
                    kill_at = None;
                }
            }
        };
        drop(probes);
        *lock(&self.runtime.group) = None;
        *lock(&self.runtime.standin) = None;
        *lock(&self.runtime.stdin) = None;
        if let Running::Process(instance) = running {
            instance.finish().await;
        }
        let bundle = lock(&self.runtime.bundle).take();
        if let Some((runtime, bundle)) = bundle {
            // The container is deleted: its bundle (and copy-on-write layer) goes with it.
            let _ = tokio::task::spawn_blocking(move || runtime.remove_all(&bundle)).await;
        }
        Terminated {
            exit_code: exit.code,
            signal: exit.signal,
            reason: if exit.code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: Some(started_at),
            finished_at: Utc::now(),
            container_id: Some(container_id),
        }
    }
}

/// Ends the log's current instance when dropped.
struct InstanceEnd(Arc<ContainerLog>);

impl Drop for InstanceEnd {
    fn drop(&mut self) {
        self.0.end_instance();
    }
}

/// What the volumes of `object` (run by `pod`) need: ConfigMaps, Secrets and
/// ServiceAccount tokens, with the CA of the node's proxy for `kube-root-ca.crt`.
///
/// # Errors
/// When the API server cannot be read or issues no token.
pub(crate) async fn volume_sources(
    shared: &Shared,
    pod: &PodRuntime,
    object: &Pod,
) -> Result<VolumeSources, ContainerError> {
    let wanted = volume::references(object);
    let namespace = &pod.namespace;
    let limit = Duration::from_secs(5);
    let account = object
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    // Every object and token at once: objects from the node's watches, tokens each a
    // round trip to the API server.
    let config_maps =
        futures::future::try_join_all(wanted.config_maps.into_iter().map(|name| async move {
            let got = tokio::time::timeout(limit, shared.config_maps.get(namespace, &name)).await;
            Ok::<_, ContainerError>(watched("configmap", got)?.map(|cm| (name, cm)))
        }));
    let secrets =
        futures::future::try_join_all(wanted.secrets.into_iter().map(|name| async move {
            let got = tokio::time::timeout(limit, shared.secrets.get(namespace, &name)).await;
            Ok::<_, ContainerError>(watched("secret", got)?.map(|s| (name, s)))
        }));
    let tokens = futures::future::try_join_all(wanted.tokens.into_iter().map(|token| {
        let account = &account;
        async move {
            let text = service_account_token(shared, pod, account, &token)
                .await
                .map_err(|e| ContainerError::VolumeToken(Box::new(e)))?;
            Ok::<_, ContainerError>((token, text))
        }
    }));
    // A claim and the volume bound to it, read from the API server.
    let claims = futures::future::try_join_all(wanted.claims.into_iter().map(|name| async move {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(shared.client.clone(), namespace);
        let got = tokio::time::timeout(limit, api.get_opt(&name)).await;
        let Some(claim) = fetched("persistentvolumeclaim", got)? else {
            return Ok::<_, ContainerError>(None);
        };
        let volume_name = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        let volume = match volume_name {
            Some(volume_name) => {
                let api: Api<PersistentVolume> = Api::all(shared.client.clone());
                let got = tokio::time::timeout(limit, api.get_opt(&volume_name)).await;
                fetched("persistentvolume", got)?
            }
            None => None,
        };
        Ok(Some((name, volume::ClaimedVolume { claim, volume })))
    }));
    let (config_maps, secrets, tokens, claims) =
        tokio::try_join!(config_maps, secrets, tokens, claims)?;
    Ok(VolumeSources {
        extra_ca: shared.inspection.as_ref().map(|i| i.ca_pem().to_string()),
        config_maps: config_maps.into_iter().flatten().collect(),
        secrets: secrets.into_iter().flatten().collect(),
        tokens: tokens.into_iter().collect(),
        claims: claims.into_iter().flatten().collect(),
    })
}

/// A ServiceAccount token of `account` for the projection `spec`, bound to the pod: the
/// one the pod holds while the kubelet's token manager would keep it, else a new one.
async fn service_account_token(
    shared: &Shared,
    pod: &PodRuntime,
    account: &str,
    spec: &volume::TokenSpec,
) -> Result<String, super::upstream::UpstreamError> {
    let mut tokens = pod.tokens.lock().await;
    if let Some((token, issued)) = tokens.get(spec) {
        let expiration = Duration::from_secs(spec.expiration_seconds.max(0) as u64);
        if std::time::SystemTime::now() < volume::refresh_due(*issued, expiration) {
            return Ok(token.clone());
        }
    }
    let owner = sim_apiserver::audit::PodRef {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    };
    let token = shared
        .server
        .service_account_token(&shared.client, &owner, account)
        .await?;
    tokens.insert(spec.clone(), (token.clone(), std::time::SystemTime::now()));
    Ok(token)
}

/// How often a running pod's volumes are synced again (ConfigMap, Secret and Downward API
/// updates, renewed tokens). The kubelet resyncs each pod about every minute, plus the TTL
/// of its object cache; this is shorter, so that a scenario sees an update in seconds.
pub const VOLUME_RESYNC: Duration = Duration::from_secs(10);

/// Syncs the volumes of the pod `runtime` runs every [`VOLUME_RESYNC`], with the pod's
/// latest object from `latest`, until the task is aborted. Failures are logged and retried
/// at the next round, as the kubelet retries a failed remount.
pub(crate) async fn resync_volumes(
    shared: Arc<Shared>,
    runtime: Arc<PodRuntime>,
    mut latest: watch::Receiver<Arc<Pod>>,
) {
    loop {
        tokio::time::sleep(VOLUME_RESYNC).await;
        shared.gate().await;
        let object = latest.borrow_and_update().clone();
        let facts = PodFacts {
            pod: &object,
            pod_ip: runtime.ip.to_string(),
            host_ip: shared.config.node_ip.to_string(),
            allocatable: CAPACITY,
        };
        let synced = match volume_sources(&shared, &runtime, &object).await {
            Ok(sources) => runtime
                .volumes
                .sync(&facts, &sources)
                .map_err(ContainerError::Mount),
            Err(e) => Err(e),
        };
        if let Err(e) = synced {
            tracing::debug!(pod = %format!("{}/{}", runtime.namespace, runtime.name), error = %error_chain(&e), "volume resync failed");
        }
    }
}

/// How a container the runtime could not start ends.
fn start_error(message: String, started_at: chrono::DateTime<Utc>) -> Terminated {
    Terminated {
        exit_code: 128,
        signal: None,
        reason: "StartError".into(),
        message: Some(message),
        started_at: Some(started_at),
        finished_at: Utc::now(),
        container_id: None,
    }
}

fn terminate(running: &Running, stand_in_exit: &mut Option<Exit>) {
    match running {
        Running::Process(i) => {
            let _ = i.group().signal(Signal::SIGTERM);
        }
        Running::StandIn(_) => {
            *stand_in_exit = Some(Exit {
                code: 0,
                signal: None,
            })
        }
    }
}

fn kill(running: &Running, stand_in_exit: &mut Option<Exit>) {
    match running {
        Running::Process(i) => {
            let _ = i.group().signal(Signal::SIGKILL);
        }
        Running::StandIn(_) => {
            *stand_in_exit = Some(Exit {
                code: 137,
                signal: Some(9),
            })
        }
    }
}

async fn wait(running: &mut Running) -> Exit {
    match running {
        Running::Process(i) => i.wait().await,
        Running::StandIn(n) => {
            n.notified().await;
            Exit {
                code: 137,
                signal: Some(9),
            }
        }
    }
}

/// An object read from the node's watches within the time allowed, as the kubelet's
/// watch-based manager fails a read whose watch has not listed yet.
fn watched<T>(
    kind: &'static str,
    got: Result<Option<T>, tokio::time::error::Elapsed>,
) -> Result<Option<T>, ContainerError> {
    got.map_err(|_| ContainerError::Source {
        kind,
        message: "timed out waiting for the condition".into(),
    })
}

/// An object read from the API server within the time allowed.
fn fetched<T>(
    kind: &'static str,
    got: Result<Result<Option<T>, kube::Error>, tokio::time::error::Elapsed>,
) -> Result<Option<T>, ContainerError> {
    match got {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ContainerError::Source {
            kind,
            message: e.to_string(),
        }),
        Err(elapsed) => watched(kind, Err(elapsed)),
    }
}

/// An error and its causes, `: `-joined.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The kubeconfig with its contexts' namespace set (a pod's default namespace is its own).
fn with_namespace(kubeconfig: &str, namespace: &str) -> String {
    let Ok(mut doc) = serde_yaml::from_str::<serde_yaml::Value>(kubeconfig) else {
        return kubeconfig.to_string();
    };
    if let Some(contexts) = doc.get_mut("contexts").and_then(|c| c.as_sequence_mut()) {
        for c in contexts {
            if let Some(ctx) = c.get_mut("context").and_then(|c| c.as_mapping_mut()) {
                ctx.insert("namespace".into(), namespace.into());
            }
        }
    }
    serde_yaml::to_string(&doc).unwrap_or_else(|_| kubeconfig.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_pull_policy_is_always_for_latest_or_no_tag_and_if_not_present_otherwise() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("127.0.0.1:5000/hello"), "Always");
        assert_eq!(
            default_pull_policy("127.0.0.1:5000/hello:1"),
            "IfNotPresent"
        );
        assert_eq!(
            default_pull_policy("registry.example/app@sha256:0123"),
            "IfNotPresent"
        );
    }

    #[test]
    fn backoff_restarts_at_once_then_doubles_up_to_the_cap() {
        let mut b = RestartBackoff::new(Duration::from_secs(10), Duration::from_secs(300));
        let short = Duration::from_secs(1);
        let delays: Vec<u64> = (0..8).map(|_| b.next(short).as_secs()).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
        // A container that ran for more than twice the cap starts over.
        assert_eq!(b.next(Duration::from_secs(601)).as_secs(), 0);
        assert_eq!(b.next(short).as_secs(), 10);
    }

    #[test]
    fn durations_print_as_go_prints_them() {
        assert_eq!(go_duration(Duration::from_millis(100)), "100ms");
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn the_pod_kubeconfig_defaults_to_the_pods_namespace() {
        let kc = sim_apiserver::kubeconfig("c", "https://127.0.0.1:1", "CA", "u", "t");
        let out = with_namespace(&kc, "team-a");
        let doc: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
        assert_eq!(doc["contexts"][0]["context"]["namespace"], "team-a");
        assert_eq!(doc["users"][0]["user"]["token"], "t");
    }
}
