//! The operator under test, described once: where it runs (namespace, Deployment, the
//! labels its pods carry), the lock it elects its leader with, its image, how to find its
//! binary for the simulator, and how to render its manifests for a scenario.
//!
//! The step library ([`crate::steps`]) and the benchmark ([`crate::bench`]) both take the
//! operator from a [`Subject`] instead of from each other. An operator profile (a YAML
//! file) describes one; the bundled memcached operator's is [`Subject::memcached`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::json;

use crate::cluster::Placement;
use crate::deploy::{DeployError, Manifest, parse_manifests, read_manifests};

/// How long the operator's pods tolerate a NotReady or unreachable node before eviction.
pub const NODE_TOLERATION_SECONDS: i64 = 5;

/// Errors of finding, building or reading the operator under test.
#[derive(Debug, thiserror::Error)]
pub enum SubjectError {
    /// The operator binary could not be built (or the build could not run).
    #[error("cannot build the operator binary with `{command}`")]
    Build {
        /// The build command, as a person would type it.
        command: String,
        /// The cause (shared: a build is tried once per process).
        #[source]
        source: Arc<BuildError>,
    },
    /// The profile names a binary that is not there, or only a variable that is not set.
    #[error("no operator binary: {0}")]
    NoBinary(String),
    /// The operator's manifests could not be read or rendered.
    #[error(transparent)]
    Render(DeployError),
    /// A manifest of the operator could not be read.
    #[error("cannot read {path}")]
    Manifest {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Why the operator binary could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The running executable, whose profile directory holds the binary, is unknown.
    #[error("cannot locate the running executable")]
    CurrentExe(#[source] std::io::Error),
    /// The running executable is not in a profile directory.
    #[error("cannot locate the target directory")]
    NoTargetDir,
    /// The build tool could not be started.
    #[error("cannot run {program}")]
    Spawn {
        /// The tool (`cargo`, `go`).
        program: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The build tool failed.
    #[error("{program} exited with {status}")]
    Failed {
        /// The tool.
        program: &'static str,
        /// How it exited.
        status: ExitStatus,
    },
}

/// The kind of object the operator elects its leader with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A `coordination.k8s.io/v1` Lease.
    Lease,
    /// A ConfigMap (leader-for-life).
    ConfigMap,
}

impl LockKind {
    /// The kind as the API names it: `Lease`, `ConfigMap`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Lease => "Lease",
            LockKind::ConfigMap => "ConfigMap",
        }
    }
}

/// The operator's leader-election lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// Its kind.
    pub kind: LockKind,
    /// Its name (the leader-election id).
    pub name: String,
    /// Its namespace in the manifests; it moves with the operator's own.
    pub namespace: String,
    /// How a Lease's holderIdentity names the pod.
    pub holder: crate::record::recorder::HolderNaming,
}

/// Where an operator's pods serve their metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// Over HTTPS (a certificate of the manager's own, not verified), else plain HTTP.
    pub https: bool,
    /// The port on each pod's IP.
    pub port: u16,
    /// The path (`/metrics`).
    pub path: String,
    /// The ClusterRole (as the manifests name it) a ServiceAccount of the harness is bound
    /// to, whose token the scrapes carry; `None`: no token.
    pub token_cluster_role: Option<String>,
}

impl Metrics {
    /// Plain HTTP on `port`, `/metrics`, no token.
    pub fn http(port: u16) -> Self {
        Self {
            https: false,
            port,
            path: "/metrics".into(),
            token_cluster_role: None,
        }
    }
}

/// The placeholders of the lease mode's arguments, for the timings a feature states.
pub const TIMING_PLACEHOLDERS: [&str; 3] = ["{leaseDuration}", "{renewDeadline}", "{retryPeriod}"];

/// The flags of each election mode the operator has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    /// Lease mode.
    pub lease: Option<LeaseElection>,
    /// Leader-for-life.
    pub for_life: Option<Vec<String>>,
    /// What makes a leader release its Lease on shutdown (`None`: it never does).
    pub release_on_cancel: Option<Vec<String>>,
    /// It elects through coordinated leader election: the control plane needs the
    /// `CoordinatedLeaderElection` feature gate (see the profile's `election.coordinated`).
    pub coordinated: bool,
}

/// How an operator elects its leader with a Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseElection {
    /// Its arguments: with the [`TIMING_PLACEHOLDERS`] when its timings are set by flags,
    /// without them when they are fixed.
    pub args: Vec<String>,
    /// Its timings when it has no flags for them (a kubebuilder scaffold runs with
    /// controller-runtime's 15s/10s/2s); `None` when the features set them.
    pub fixed: Option<LeaseTimings>,
}

/// The three timings of a lease-based election, as client-go names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// LeaseDuration: how long a standby waits, from the last renewal it saw, before it
    /// may take the lease.
    pub lease_duration: Duration,
    /// RenewDeadline: how long the leader tries to renew before it steps down.
    pub renew_deadline: Duration,
    /// RetryPeriod: how often every candidate tries.
    pub retry_period: Duration,
}

/// client-go's `JitterFactor`: a renew deadline must exceed the retry period times this.
const JITTER_FACTOR: f64 = 1.2;

impl LeaseTimings {
    /// controller-runtime's defaults, 15s/10s/2s: what most operators run with.
    pub const CONTROLLER_RUNTIME: LeaseTimings = LeaseTimings {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };

    /// Reads `LEASE/RENEW/RETRY`, each a whole number of `ms`, `s` or `m` (`4s/3s/1s`,
    /// `2s/1500ms/500ms`).
    ///
    /// # Errors
    /// What is wrong with `text`, and what was expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let [lease, renew, retry] = parts[..] else {
            return Err(format!(
                "{text:?}: expected LEASE/RENEW/RETRY, e.g. 15s/10s/2s"
            ));
        };
        Ok(Self {
            lease_duration: parse_duration(lease)?,
            renew_deadline: parse_duration(renew)?,
            retry_period: parse_duration(retry)?,
        })
    }

    /// Whether client-go's `NewLeaderElector` accepts them.
    ///
    /// # Errors
    /// Its refusal: the lease duration must exceed the renew deadline, which must exceed
    /// the retry period times 1.2, each above zero.
    pub fn check(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err(format!(
                "{self}: client-go refuses them: the lease duration must be greater than the renew deadline"
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(format!(
                "{self}: client-go refuses them: the renew deadline must be greater than the retry period times 1.2"
            ));
        }
        if self.retry_period.is_zero() {
            return Err(format!(
                "{self}: client-go refuses them: the retry period must be greater than zero"
            ));
        }
        Ok(())
    }

    /// Each timing as a flag takes it (`4s`, `1500ms`: Rust's and Go's parsers both read
    /// these), in the order of [`TIMING_PLACEHOLDERS`].
    pub fn as_flags(&self) -> [String; 3] {
        [self.lease_duration, self.renew_deadline, self.retry_period].map(flag_duration)
    }
}

impl std::fmt::Display for LeaseTimings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [lease, renew, retry] = self.as_flags();
        write!(f, "{lease}/{renew}/{retry}")
    }
}

/// A duration as a flag takes it: whole seconds as `4s`, else milliseconds.
fn flag_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A whole number of `ms`, `s` or `m`.
///
/// # Errors
/// What is wrong, and what was expected.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| text.split_at(i))
        .ok_or_else(|| format!("duration {text:?} needs a unit: ms, s or m"))?;
    let n: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} must start with a whole number"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!(
            "duration {text:?}: unknown unit {unit:?}, expected ms, s or m"
        )),
    }
}

/// The work a leader does, so that its writes can be judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    /// Objects that give it work (a YAML file or directory), none when it works on its own.
    pub objects: Option<PathBuf>,
    /// A JSON merge patch of those objects that gives it more work.
    pub more: Option<serde_json::Value>,
    /// The resources whose successful writes prove its work.
    pub writes: Vec<String>,
}

impl Work {
    /// Whether a write of `resource` (`deployments`, `deployments/status`) is work.
    pub fn proves(&self, resource: &str) -> bool {
        let base = resource.split('/').next().unwrap_or(resource);
        self.writes.iter().any(|w| w == resource || w == base)
    }
}

impl Election {
    /// The lease mode's arguments for `timings`, `None` when the operator has no lease
    /// mode; an operator with fixed timings gets its arguments as they are.
    pub fn lease_args(&self, timings: &LeaseTimings) -> Option<Vec<String>> {
        let lease = self.lease.as_ref()?;
        let values = timings.as_flags();
        Some(
            lease
                .args
                .iter()
                .map(|arg| {
                    TIMING_PLACEHOLDERS
                        .iter()
                        .zip(&values)
                        .fold(arg.clone(), |arg, (placeholder, value)| {
                            arg.replace(placeholder, value)
                        })
                })
                .collect(),
        )
    }
}

/// Where the operator binary comes from, for the providers that run pods as processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinarySource {
    /// A variable naming a binary to use as it is, read first.
    pub env: Option<String>,
    /// Otherwise, how the binary is found or built.
    pub build: BinaryBuild,
}

/// How an operator binary is found or built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinaryBuild {
    /// Built by Cargo.
    Cargo {
        /// The workspace `cargo build` runs in.
        workspace: PathBuf,
        /// The Cargo package that builds it.
        package: String,
        /// Its binary target (and file name in the profile directory).
        bin: String,
        /// Files and directories it is built from: the binary is rebuilt when one is newer.
        sources: Vec<PathBuf>,
    },
    /// Built by `go build`.
    Go {
        /// The module's directory, where `go build` runs.
        module: PathBuf,
        /// The main package.
        package: String,
        /// Files and directories it is built from: the binary is rebuilt when one is newer.
        sources: Vec<PathBuf>,
    },
    /// An executable, as it is.
    Path(PathBuf),
    /// Nothing but the variable.
    None,
}

/// Where the operator's manifests are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestSource {
    /// Subdirectories of plain manifests.
    Dirs {
        /// The directory of the manifests.
        config: PathBuf,
        /// Its subdirectories that are applied, read in this order (then ordered by kind).
        dirs: Vec<String>,
        /// Its subdirectory of CustomResourceDefinitions, if it has any.
        crds: Option<String>,
    },
    /// A kustomize directory, rendered by `kubectl kustomize`.
    Kustomize(PathBuf),
    /// One file of rendered manifests.
    File(PathBuf),
}

impl ManifestSource {
    /// Every object the manifests hold, in their order.
    ///
    /// # Errors
    /// When they cannot be read or rendered.
    pub fn read(&self) -> Result<Vec<Manifest>, DeployError> {
        match self {
            Self::Dirs { config, dirs, .. } => {
                let mut manifests = Vec::new();
                for dir in dirs {
                    manifests.extend(read_manifests(&config.join(dir))?);
                }
                Ok(manifests)
            }
            Self::Kustomize(dir) => parse_manifests(&kustomize(dir)?, dir),
            Self::File(file) => read_manifests(file),
        }
    }

    /// Where they are, as a person names them.
    pub fn describe(&self) -> String {
        match self {
            Self::Dirs { config, dirs, .. } => {
                format!("{} ({})", config.display(), dirs.join(", "))
            }
            Self::Kustomize(dir) => format!("kustomize {}", dir.display()),
            Self::File(file) => file.display().to_string(),
        }
    }
}

/// What `kubectl kustomize dir` prints, run with the kubectl the harness builds (or finds).
///
/// # Errors
/// [`DeployError::Render`] when there is no kubectl, or kustomize fails (its error).
fn kustomize(dir: &Path) -> Result<String, DeployError> {
    let failed = |reason: String| DeployError::Render {
        dir: dir.to_path_buf(),
        reason,
    };
    let kubectl = crate::cluster::kubectl().map_err(|e| failed(crate::error_chain(&e)))?;
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|e| failed(format!("cannot run {}: {e}", kubectl.display())))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| failed(format!("its output is not UTF-8: {e}")))
}

/// How a scenario or a benchmark runs the operator.
#[derive(Debug, Clone)]
pub struct OperatorSetup {
    /// Replicas of the manager Deployment.
    pub replicas: i32,
    /// Flags after the manifest's own (they win): election mode, timings, …
    pub args: Vec<String>,
    /// The timings it elects with, in lease mode.
    pub timings: Option<LeaseTimings>,
}

/// The operator under test.
#[derive(Debug, Clone, PartialEq)]
pub struct Subject {
    /// A short name for reports.
    pub name: String,
    /// Its namespace in its manifests.
    pub namespace: String,
    /// Its Deployment in its manifests.
    pub deployment: String,
    /// The label selector of its pods (`key=value,…`).
    pub pod_selector: String,
    /// Where its pods serve metrics.
    pub metrics: Metrics,
    /// Its manager works only as a container (see the profile's `needsContainer`).
    pub needs_container: bool,
    /// Its leader-election lock.
    pub lock: Lock,
    /// How its election mode is chosen.
    pub election: Election,
    /// The image its manifests name; the simulator runs the binary for it.
    pub image: String,
    /// Its binary.
    pub binary: BinarySource,
    /// Its manifests.
    pub manifests: ManifestSource,
    /// How it is told which namespaces to watch; `None` when it watches every namespace.
    pub watch_namespace: Option<WatchNamespace>,
    /// Changes to its manager container.
    pub manager: ManagerPatch,
    /// Objects of its manifests that are not applied.
    pub leave_out: LeaveOut,
    /// The work the leadership scenarios give it.
    pub work: Option<Work>,
}

/// Changes to an operator's manager container, made to every Deployment it is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagerPatch {
    /// The container's name; the first when `None`.
    pub container: Option<String>,
    /// Environment variables to set.
    pub env: BTreeMap<String, String>,
    /// Arguments to add.
    pub args: Vec<String>,
    /// Flags to remove, by name.
    pub remove_args: Vec<String>,
    /// Volumes of its pod to remove, with their mounts, by name.
    pub remove_volumes: Vec<String>,
}

/// Objects of an operator's manifests that are not applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaveOut {
    /// Kinds left out entirely.
    pub kinds: Vec<String>,
    /// Single objects left out, as `Kind/name`.
    pub objects: Vec<String>,
}

impl LeaveOut {
    /// Whether `object` is left out.
    pub fn covers(&self, object: &DynamicObject) -> bool {
        let kind = kind_of(object);
        let name = object.metadata.name.as_deref().unwrap_or_default();
        self.kinds.iter().any(|k| k == kind)
            || self
                .objects
                .iter()
                .any(|o| o.split_once('/') == Some((kind, name)))
    }
}

/// How an operator is told the namespaces it watches, on a cluster scenarios share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchNamespace {
    /// A flag of its manager, given as `FLAG=ns1,ns2`.
    Flag(String),
    /// An environment variable of its manager container, set to `ns1,ns2`.
    Env(String),
}

/// The repository root (where `operator/config` lives).
pub use crate::repository_root;

impl Subject {
    /// The labels of the pod selector, as `(key, value)` pairs.
    pub fn selector_labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pod_selector
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
    }

    /// Where the manifests themselves put the operator: its namespace and image, watching
    /// every namespace, no suffix, no labels (as on a cluster of its own).
    pub fn own_placement(&self) -> Placement {
        Placement {
            namespace: self.namespace.clone(),
            suffix: String::new(),
            image: self.image.clone(),
            watch_namespaces: Vec::new(),
            labels: BTreeMap::new(),
        }
    }

    /// Whether the operator serves the Memcached custom resource
    /// (`memcacheds.cache.example.com`) that the reconcile, finalizer and detection
    /// features, and the leadership scenarios that give the leader Memcached work, use:
    /// whether its CustomResourceDefinitions include it.
    pub fn serves_memcached(&self) -> bool {
        self.crd_manifests().unwrap_or_default().iter().any(|yaml| {
            serde_yaml::from_str::<serde_json::Value>(yaml).is_ok_and(|crd| {
                crd["spec"]["group"] == "cache.example.com"
                    && crd["spec"]["names"]["plural"] == "memcacheds"
            })
        })
    }

    /// The operator's CustomResourceDefinitions, as YAML, in file name order.
    ///
    /// # Errors
    /// When the directory or a file cannot be read.
    pub fn crd_manifests(&self) -> Result<Vec<String>, SubjectError> {
        let (config, crds) = match &self.manifests {
            ManifestSource::Dirs {
                crds: Some(crds),
                config,
                ..
            } => (config, crds),
            ManifestSource::Dirs { crds: None, .. } => return Ok(Vec::new()),
            rendered => {
                return rendered
                    .read()
                    .map_err(SubjectError::Render)?
                    .iter()
                    .filter(|m| kind_of(&m.object) == "CustomResourceDefinition")
                    .map(|m| {
                        serde_yaml::to_string(&m.object).map_err(|e| {
                            SubjectError::Render(DeployError::Render {
                                dir: m.path.clone(),
                                reason: format!("cannot write a CRD back as YAML: {e}"),
                            })
                        })
                    })
                    .collect();
            }
        };
        let dir = config.join(crds);
        let unreadable = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SubjectError::Manifest { path, source }
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(unreadable(&dir))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|x| x == "yaml"))
            .collect();
        paths.sort();
        paths
            .iter()
            .map(|path| std::fs::read_to_string(path).map_err(unreadable(path)))
            .collect()
    }

    /// The operator binary for the simulator: the one the binary's variable names, else
    /// the one in the running executable's profile directory, built with `cargo build`
    /// (once per process) when it is missing or older than its sources, so that a scenario
    /// never runs a stale operator.
    ///
    /// # Errors
    /// When it cannot be built.
    pub fn binary(&self) -> Result<PathBuf, SubjectError> {
        type Built = BTreeMap<String, Result<PathBuf, Arc<BuildError>>>;
        static BUILT: Mutex<Built> = Mutex::new(BTreeMap::new());
        let source = &self.binary;
        if let Some(path) = source.env.as_ref().and_then(std::env::var_os) {
            return Ok(PathBuf::from(path));
        }
        match &source.build {
            BinaryBuild::Path(path) if path.is_file() => Ok(path.clone()),
            BinaryBuild::Path(path) => Err(SubjectError::NoBinary(format!(
                "{} does not exist",
                path.display()
            ))),
            BinaryBuild::None => Err(SubjectError::NoBinary(format!(
                "set {} to the operator's executable",
                source.env.as_deref().unwrap_or("the profile's binary.env")
            ))),
            BinaryBuild::Cargo {
                workspace,
                package,
                bin,
                sources,
            } => {
                let cargo = CargoBinary {
                    workspace,
                    package,
                    bin,
                    sources,
                };
                let command = format!("cargo build -p {package} --bin {bin}");
                let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
                built
                    .entry(command.clone())
                    .or_insert_with(|| cargo.find_or_build().map_err(Arc::new))
                    .clone()
                    .map_err(|source| SubjectError::Build { command, source })
            }
            BinaryBuild::Go {
                module,
                package,
                sources,
            } => {
                let go = GoBinary {
                    module,
                    package,
                    sources,
                };
                let command = format!("go build {package} (in {})", module.display());
                let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
                built
                    .entry(command.clone())
                    .or_insert_with(|| go.find_or_build().map_err(Arc::new))
                    .clone()
                    .map_err(|source| SubjectError::Build { command, source })
            }
        }
    }

    /// The manifests to apply, in dependency order (CRD, Namespace, RBAC, manager), placed
    /// where `placement` says (namespace, cluster-scoped names, image, labels) and with the
    /// manager Deployment's replicas and flags set by `setup`.
    ///
    /// # Errors
    /// When the manifests cannot be read.
    pub fn render(
        &self,
        setup: &OperatorSetup,
        placement: &Placement,
    ) -> Result<Vec<Manifest>, DeployError> {
        let manifests = self.manifests.read()?;
        let (left_out, mut manifests): (Vec<_>, Vec<_>) = manifests
            .into_iter()
            .partition(|m| self.leave_out.covers(&m.object));
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            for m in &left_out {
                eprintln!(
                    "opconform: leaving out {} {} ({}), as the profile of {} says",
                    kind_of(&m.object),
                    m.object.metadata.name.as_deref().unwrap_or_default(),
                    m.path.display(),
                    self.name
                );
            }
        });
        // The Namespace first, so the RBAC and the Deployment have somewhere to go.
        manifests.sort_by_key(|m| match kind_of(&m.object) {
            "CustomResourceDefinition" => 0,
            "Namespace" => 1,
            "Deployment" => 3,
            _ => 2,
        });
        for m in &mut manifests {
            self.place(&mut m.object, placement);
            if kind_of(&m.object) == "Deployment" {
                set_manager(self, &mut m.object, setup, placement).map_err(|reason| {
                    DeployError::Patch {
                        path: m.path.clone(),
                        reason,
                    }
                })?;
            }
        }
        Ok(manifests)
    }

    /// Moves an object of the manifests to the placement's namespace and names.
    fn place(&self, object: &mut DynamicObject, placement: &Placement) {
        let kind = kind_of(object).to_string();
        if kind == "CustomResourceDefinition" {
            // Cluster-wide and the same for every scenario.
            return;
        }
        let own = self.namespace.as_str();
        let meta = &mut object.metadata;
        if meta.namespace.as_deref() == Some(own) {
            meta.namespace = Some(placement.namespace.clone());
        }
        if kind == "Namespace" && meta.name.as_deref() == Some(own) {
            meta.name = Some(placement.namespace.clone());
        }
        if let (true, Some(name)) = (
            matches!(kind.as_str(), "ClusterRole" | "ClusterRoleBinding"),
            &mut meta.name,
        ) {
            name.push_str(&placement.suffix);
        }
        if !placement.labels.is_empty() {
            meta.labels
                .get_or_insert_with(Default::default)
                .extend(placement.labels.clone());
        }
        // `get_mut`, not indexing: `data["x"]` on a missing key would insert `x: null`, a
        // field kube-apiserver's server-side apply refuses ("field not declared in schema").
        if kind == "ClusterRoleBinding"
            && let Some(role_ref) = object.data.get_mut("roleRef")
            && role_ref["kind"] == "ClusterRole"
            && let Some(name) = role_ref["name"].as_str().map(str::to_string)
        {
            role_ref["name"] = json!(format!("{name}{}", placement.suffix));
        }
        if let Some(subjects) = object
            .data
            .get_mut("subjects")
            .and_then(serde_json::Value::as_array_mut)
        {
            for subject in subjects {
                if subject["namespace"] == own {
                    subject["namespace"] = json!(placement.namespace);
                }
            }
        }
    }
}

/// A binary that Cargo builds.
struct CargoBinary<'a> {
    workspace: &'a Path,
    package: &'a str,
    bin: &'a str,
    sources: &'a [PathBuf],
}

/// Where the binaries the harness builds are kept: the profile directory of the running
/// executable (`target/<profile>`) when it is one cargo built in place, else — an
/// installed `opconform` — `operator-builds/debug` in opconform's cache directory
/// ([`crate::cluster::local::pinned::cache_dir`]), never beside the installed executable.
fn profile_dir() -> Result<PathBuf, BuildError> {
    // target/<profile>/deps/e2e-… → target/<profile>
    let exe = std::env::current_exe().map_err(BuildError::CurrentExe)?;
    let dir = exe
        .parent()
        .and_then(|deps| {
            if deps.file_name().is_some_and(|n| n == "deps") {
                deps.parent()
            } else {
                Some(deps)
            }
        })
        .map(Path::to_path_buf)
        .ok_or(BuildError::NoTargetDir)?;
    Ok(profile_dir_for(
        &dir,
        &crate::cluster::local::pinned::cache_dir(),
    ))
}

/// [`profile_dir`] for an executable in `dir`: `dir` itself when cargo keeps its build
/// state there (`.fingerprint`), else `<cache>/operator-builds/debug`.
fn profile_dir_for(dir: &Path, cache: &Path) -> PathBuf {
    if dir.join(".fingerprint").is_dir() {
        dir.to_path_buf()
    } else {
        cache.join("operator-builds").join("debug")
    }
}

/// Whether `binary` is missing or older than one of `sources` (files, or directories
/// searched through).
fn is_stale(binary: &Path, sources: &[PathBuf]) -> bool {
    fn newest(path: &Path) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_dir() {
            return meta.modified().ok();
        }
        std::fs::read_dir(path)
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|e| newest(&e.path()))
            .max()
    }
    let Some(built) = std::fs::metadata(binary).and_then(|m| m.modified()).ok() else {
        return true;
    };
    sources
        .iter()
        .filter_map(|p| newest(p))
        .any(|changed| changed > built)
}

/// Runs a build command, its output going to the harness's stderr.
fn run_build(program: &'static str, cmd: &mut Command) -> Result<(), BuildError> {
    let status = cmd
        .stdout(std::process::Stdio::inherit())
        .status()
        .map_err(|source| BuildError::Spawn { program, source })?;
    if status.success() {
        Ok(())
    } else {
        Err(BuildError::Failed { program, status })
    }
}

impl CargoBinary<'_> {
    /// The binary in the running executable's profile directory, built when stale.
    fn find_or_build(&self) -> Result<PathBuf, BuildError> {
        let profile_dir = profile_dir()?;
        let binary = profile_dir.join(self.bin);
        if self.is_stale(&binary) {
            self.build(&profile_dir)?;
        }
        Ok(binary)
    }

    /// Whether `binary` is missing or older than a source it is built from.
    fn is_stale(&self, binary: &Path) -> bool {
        is_stale(binary, self.sources)
    }

    fn build(&self, profile_dir: &Path) -> Result<(), BuildError> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        eprintln!(
            "opconform: bringing the operator binary up to date (cargo build -p {})…",
            self.package
        );
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", self.package, "--bin", self.bin])
            .current_dir(self.workspace);
        if release {
            cmd.arg("--release");
        }
        if let Some(target) = profile_dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        run_build("cargo", &mut cmd)
    }
}

/// A binary that `go build` makes from a module of its own (with its `go.sum`).
struct GoBinary<'a> {
    module: &'a Path,
    package: &'a str,
    sources: &'a [PathBuf],
}

impl GoBinary<'_> {
    /// The binary in `<profile dir>/go/`, named after the module's directory (and the
    /// package, when it is not the module's root), built when stale.
    fn find_or_build(&self) -> Result<PathBuf, BuildError> {
        let dir = profile_dir()?.join("go");
        let binary = dir.join(self.file_name());
        if is_stale(&binary, self.sources) {
            std::fs::create_dir_all(&dir).map_err(|source| BuildError::Spawn {
                program: "go",
                source,
            })?;
            eprintln!(
                "opconform: bringing the operator binary up to date (go build {} in {})…",
                self.package,
                self.module.display()
            );
            let mut cmd = Command::new("go");
            cmd.args(["build", "-trimpath", "-o"])
                .arg(&binary)
                .arg(self.package)
                .current_dir(self.module)
                // Static, with the module's own go.sum, with the Go that is installed.
                .env("CGO_ENABLED", "0")
                .env("GOFLAGS", "-mod=readonly")
                .env("GOTOOLCHAIN", "local");
            run_build("go", &mut cmd)?;
        }
        Ok(binary)
    }

    /// `<module dir>` or `<module dir>-<last element of the package>`.
    fn file_name(&self) -> String {
        let module = self.module.file_name().map_or_else(
            || "go-operator".into(),
            |n| n.to_string_lossy().into_owned(),
        );
        match self.package.trim_end_matches('/').rsplit('/').next() {
            Some(last) if !last.is_empty() && last != "." => format!("{module}-{last}"),
            _ => module,
        }
    }
}

/// The kind of a manifest's object (empty when it has none).
pub fn kind_of(object: &DynamicObject) -> &str {
    object.types.as_ref().map_or("", |t| t.kind.as_str())
}

/// Sets the manager container of `deployment`: image, replicas, tolerations, the profile's
/// patch, the watched namespaces and `setup`'s flags.
///
/// # Errors
/// What is wrong, when the profile's patch names no container of it.
fn set_manager(
    subject: &Subject,
    deployment: &mut DynamicObject,
    setup: &OperatorSetup,
    placement: &Placement,
) -> Result<(), String> {
    let spec = &mut deployment.data["spec"];
    spec["replicas"] = json!(setup.replicas);
    // Evicted 5 s after their node goes NotReady or unreachable, instead of the API
    // server's default 300 s, so that node scenarios take seconds.
    let pod_spec = &mut spec["template"]["spec"];
    let mut tolerations = pod_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        tolerations.retain(|t| t["key"] != key);
        tolerations.push(json!({
            "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": NODE_TOLERATION_SECONDS
        }));
    }
    pod_spec["tolerations"] = json!(tolerations);
    let removed = &subject.manager.remove_volumes;
    if !removed.is_empty() {
        let named = |v: &serde_json::Value| {
            v["name"]
                .as_str()
                .is_some_and(|name| removed.iter().any(|r| r == name))
        };
        if let Some(volumes) = pod_spec
            .get_mut("volumes")
            .and_then(serde_json::Value::as_array_mut)
        {
            volumes.retain(|v| !named(v));
        }
        for container in pod_spec["containers"].as_array_mut().into_iter().flatten() {
            if let Some(mounts) = container
                .get_mut("volumeMounts")
                .and_then(serde_json::Value::as_array_mut)
            {
                mounts.retain(|m| !named(m));
            }
        }
    }
    let containers = spec["template"]["spec"]["containers"]
        .as_array_mut()
        .ok_or_else(|| format!("Deployment {} has no containers", subject.deployment))?;
    let patch = &subject.manager;
    let container = match &patch.container {
        None => containers.first_mut(),
        Some(name) => containers.iter_mut().find(|c| c["name"] == name.as_str()),
    }
    .ok_or_else(|| {
        format!(
            "the profile's manager.container {:?} names no container of Deployment {}",
            patch.container.as_deref().unwrap_or_default(),
            subject.deployment
        )
    })?;
    container["image"] = json!(placement.image);
    let mut args: Vec<String> = container["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let name_of = |flag: &str| flag.split('=').next().unwrap_or(flag).to_string();
    args.retain(|a| !patch.remove_args.contains(&name_of(a)));
    let mut flags = patch.args.clone();
    for (name, value) in &patch.env {
        set_env(container, name, value);
    }
    let watched = placement.watch_namespaces.join(",");
    match (&subject.watch_namespace, watched.is_empty()) {
        (Some(WatchNamespace::Flag(flag)), false) => flags.push(format!("{flag}={watched}")),
        (Some(WatchNamespace::Env(name)), false) => set_env(container, name, &watched),
        // Every namespace: on a cluster of its own, or an operator that cannot be told.
        _ => {}
    }
    flags.extend(setup.args.iter().cloned());
    for flag in flags {
        let name = name_of(&flag);
        args.retain(|a| name_of(a) != name);
        args.push(flag);
    }
    container["args"] = json!(args);
    Ok(())
}

/// Sets the environment variable `name` of `container` to `value`, replacing the value its
/// manifests gave it.
fn set_env(container: &mut serde_json::Value, name: &str, value: &str) {
    let mut env = container["env"].as_array().cloned().unwrap_or_default();
    env.retain(|e| e["name"] != name);
    env.push(json!({ "name": name, "value": value }));
    container["env"] = json!(env);
}

impl crate::cluster::OperatorUnderTest for Subject {
    fn own_placement(&self) -> Placement {
        Subject::own_placement(self)
    }

    fn binary(&self) -> Result<PathBuf, crate::cluster::ProviderError> {
        Subject::binary(self).map_err(|e| crate::cluster::ProviderError::Operator(Box::new(e)))
    }

    fn crd_manifests(&self) -> Result<Vec<String>, crate::cluster::ProviderError> {
        Subject::crd_manifests(self)
            .map_err(|e| crate::cluster::ProviderError::Operator(Box::new(e)))
    }

    fn entrypoint_in_image(&self) -> Result<Option<String>, crate::cluster::ProviderError> {
        Subject::manager_command(self)
            .map(|command| command.filter(|c| c.starts_with('/')))
            .map_err(|e| crate::cluster::ProviderError::Operator(Box::new(e)))
    }
}

impl Subject {
    /// The program the manager container of its manifests runs (its `command[0]`, e.g.
    /// `/manager`), `None` when it runs its image's ENTRYPOINT.
    ///
    /// # Errors
    /// When the manifests cannot be read.
    pub fn manager_command(&self) -> Result<Option<String>, DeployError> {
        let setup = OperatorSetup {
            replicas: 1,
            args: Vec::new(),
            timings: None,
        };
        let manifests = self.render(&setup, &self.own_placement())?;
        let deployment = manifests.iter().find(|m| {
            kind_of(&m.object) == "Deployment"
                && m.object.metadata.name.as_deref() == Some(self.deployment.as_str())
        });
        let containers = deployment
            .and_then(|d| d.object.data["spec"]["template"]["spec"]["containers"].as_array());
        let container = containers.and_then(|c| match &self.manager.container {
            None => c.first(),
            Some(name) => c.iter().find(|c| c["name"] == name.as_str()),
        });
        Ok(container
            .and_then(|c| c["command"][0].as_str())
            .map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_are_built_beside_a_cargo_built_harness_and_in_the_cache_for_an_installed_one() {
        let target = tempfile::tempdir().unwrap();
        let debug = target.path().join("debug");
        std::fs::create_dir_all(debug.join(".fingerprint")).unwrap();
        let cache = Path::new("/cache/opconform");
        assert_eq!(profile_dir_for(&debug, cache), debug);
        let installed = target.path().join("bin");
        std::fs::create_dir_all(&installed).unwrap();
        assert_eq!(
            profile_dir_for(&installed, cache),
            cache.join("operator-builds/debug")
        );
    }

    fn setup(replicas: i32, args: &[&str]) -> OperatorSetup {
        OperatorSetup {
            replicas,
            timings: None,
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    fn of_kind<'a>(manifests: &'a [Manifest], kind: &str) -> Vec<&'a DynamicObject> {
        manifests
            .iter()
            .map(|m| &m.object)
            .filter(|o| kind_of(o) == kind)
            .collect()
    }

    #[test]
    fn the_memcached_subjects_manifests_name_its_namespace_lock_and_selector_consistently() {
        let subject = Subject::memcached();
        let manifests = subject
            .render(&setup(2, &[]), &subject.own_placement())
            .unwrap();
        let namespaces = of_kind(&manifests, "Namespace");
        assert_eq!(namespaces.len(), 1);
        assert_eq!(
            namespaces[0].metadata.name.as_deref(),
            Some(subject.namespace.as_str())
        );
        assert_eq!(subject.lock.namespace, subject.namespace);

        let deployments = of_kind(&manifests, "Deployment");
        assert_eq!(deployments.len(), 1);
        let deployment = deployments[0];
        assert_eq!(
            deployment.metadata.name.as_deref(),
            Some(subject.deployment.as_str())
        );
        assert_eq!(
            deployment.metadata.namespace.as_deref(),
            Some(subject.namespace.as_str())
        );
        let spec = &deployment.data["spec"];
        let selector: Vec<(&str, &str)> = subject.selector_labels().collect();
        assert!(!selector.is_empty(), "{}", subject.pod_selector);
        for (key, value) in &selector {
            assert_eq!(spec["selector"]["matchLabels"][key], *value);
            assert_eq!(spec["template"]["metadata"]["labels"][key], *value);
        }
        let container = &spec["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], subject.image.as_str());
        let args = container["args"].as_array().unwrap();
        assert!(
            args.contains(&json!(format!(
                "--leader-election-id={}",
                subject.lock.name
            ))),
            "{args:?}"
        );
        assert!(args.contains(&json!(format!(
            "--metrics-bind-address=$(POD_IP):{}",
            subject.metrics.port
        ))));

        // The operator may take its lock where the lock is.
        let may_take_lock = of_kind(&manifests, "Role").into_iter().any(|role| {
            role.metadata.namespace.as_deref() == Some(subject.lock.namespace.as_str())
                && role.data["rules"].as_array().unwrap().iter().any(|rule| {
                    rule["apiGroups"] == json!(["coordination.k8s.io"])
                        && rule["resources"] == json!(["leases"])
                })
        });
        assert_eq!(subject.lock.kind, LockKind::Lease);
        assert!(
            may_take_lock,
            "no Role in {} grants leases",
            subject.lock.namespace
        );
    }

    #[test]
    fn the_memcached_subjects_crds_are_the_ones_its_manifests_apply_first() {
        let subject = Subject::memcached();
        let crds = subject.crd_manifests().unwrap();
        assert!(!crds.is_empty());
        let manifests = subject
            .render(&setup(1, &[]), &subject.own_placement())
            .unwrap();
        let applied = of_kind(&manifests, "CustomResourceDefinition");
        assert_eq!(applied.len(), crds.len());
        for (crd, yaml) in manifests.iter().zip(&crds) {
            assert_eq!(kind_of(&crd.object), "CustomResourceDefinition");
            let name = crd.object.metadata.name.as_deref().unwrap();
            assert!(yaml.contains(&format!("name: {name}")), "{name}");
        }
    }

    #[test]
    fn the_manager_gets_the_scenarios_replicas_and_flags_replacing_its_own() {
        let subject = Subject::memcached();
        let setup = setup(3, &["--leader-election=lease", "--retry-period=1s"]);
        let manifests = subject.render(&setup, &subject.own_placement()).unwrap();
        let kinds: Vec<&str> = manifests.iter().map(|m| kind_of(&m.object)).collect();
        assert_eq!(kinds.first().copied(), Some("CustomResourceDefinition"));
        assert_eq!(kinds.last().copied(), Some("Deployment"));
        let deployment = &manifests.last().unwrap().object;
        assert_eq!(deployment.data["spec"]["replicas"], 3);
        let args = deployment.data["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .clone();
        assert!(args.contains(&json!("--leader-election=lease")));
        assert!(!args.contains(&json!("--leader-election=for-life")));
        assert!(args.contains(&json!("--metrics-bind-address=$(POD_IP):8080")));
    }

    #[test]
    fn on_a_shared_cluster_every_object_moves_to_the_scenarios_namespace_and_names() {
        let subject = Subject::memcached();
        let placement = crate::cluster::shared::shared_placement("opconform-x1", "op:1");
        let manifests = subject.render(&setup(2, &[]), &placement).unwrap();
        for m in &manifests {
            let o = &m.object;
            let text = serde_json::to_string(o).unwrap();
            assert!(
                !text.contains(&subject.namespace),
                "{} still names {}: {text}",
                kind_of(o),
                subject.namespace
            );
            match kind_of(o) {
                "CustomResourceDefinition" => {}
                "ClusterRole" | "ClusterRoleBinding" => {
                    assert!(o.metadata.name.as_ref().unwrap().ends_with("-opconform-x1"));
                    assert_eq!(
                        o.metadata.labels.as_ref().unwrap()["opconform.io/scenario"],
                        "opconform-x1"
                    );
                }
                _ => assert_eq!(
                    o.metadata.labels.as_ref().unwrap()["opconform.io/scenario"],
                    "opconform-x1"
                ),
            }
            // Nothing the manifest does not have: server-side apply refuses unknown fields.
            let fields = o.data.as_object().unwrap();
            if !matches!(kind_of(o), "ClusterRoleBinding" | "RoleBinding") {
                assert!(
                    !fields.contains_key("roleRef") && !fields.contains_key("subjects"),
                    "{} gained binding fields: {text}",
                    kind_of(o)
                );
            }
            assert!(
                fields.values().all(|v| !v.is_null()),
                "{} has a null field: {text}",
                kind_of(o)
            );
            if kind_of(o) == "ClusterRoleBinding" {
                assert!(
                    o.data["roleRef"]["name"]
                        .as_str()
                        .unwrap()
                        .ends_with("-opconform-x1")
                );
            }
        }
        let deployment = &manifests.last().unwrap().object;
        let container = &deployment.data["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "op:1");
        assert!(container["args"].as_array().unwrap().contains(&json!(
            "--watch-namespace=opconform-x1-default,opconform-x1-team-a,opconform-x1-team-b"
        )));
    }

    #[test]
    fn an_operator_told_its_namespaces_by_a_variable_gets_it_in_its_manager_container() {
        let mut subject = Subject::memcached();
        subject.watch_namespace = Some(WatchNamespace::Env("WATCH_NAMESPACE".into()));
        let placement = crate::cluster::shared::shared_placement("opconform-x1", "op:1");
        let manifests = subject.render(&setup(2, &[]), &placement).unwrap();
        let container =
            &manifests.last().unwrap().object.data["spec"]["template"]["spec"]["containers"][0];
        let env = container["env"].as_array().unwrap();
        assert_eq!(
            env.iter()
                .filter(|e| e["name"] == "WATCH_NAMESPACE")
                .collect::<Vec<_>>(),
            [&json!({
                "name": "WATCH_NAMESPACE",
                "value": "opconform-x1-default,opconform-x1-team-a,opconform-x1-team-b"
            })]
        );
        let args = container["args"].as_array().unwrap();
        assert!(
            !args
                .iter()
                .any(|a| a.as_str().unwrap().starts_with("--watch-namespace")),
            "{args:?}"
        );
        // An operator that watches every namespace is told nothing.
        subject.watch_namespace = None;
        let manifests = subject.render(&setup(2, &[]), &placement).unwrap();
        let container =
            &manifests.last().unwrap().object.data["spec"]["template"]["spec"]["containers"][0];
        assert!(
            !container["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "WATCH_NAMESPACE"),
            "{container}"
        );
        assert!(
            !container["args"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| { a.as_str().unwrap().starts_with("--watch-namespace") }),
            "{container}"
        );
    }

    #[test]
    fn a_removed_volume_goes_from_the_pod_with_every_mount_of_it() {
        let mut subject = Subject::memcached();
        subject.manager.remove_volumes = vec!["webhook-certs".into()];
        let mut deployment: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "memcached-operator"},
            "spec": {"template": {"spec": {
                "volumes": [
                    {"name": "webhook-certs", "secret": {"secretName": "webhook-server-cert"}},
                    {"name": "tmp", "emptyDir": {}}
                ],
                "containers": [{
                    "name": "manager",
                    "volumeMounts": [
                        {"name": "webhook-certs", "mountPath": "/tmp/k8s-webhook-server/serving-certs"},
                        {"name": "tmp", "mountPath": "/tmp"}
                    ]
                }]
            }}}
        }))
        .unwrap();
        set_manager(
            &subject,
            &mut deployment,
            &setup(1, &[]),
            &subject.own_placement(),
        )
        .unwrap();
        let pod = &deployment.data["spec"]["template"]["spec"];
        assert_eq!(pod["volumes"], json!([{"name": "tmp", "emptyDir": {}}]));
        assert_eq!(
            pod["containers"][0]["volumeMounts"],
            json!([{"name": "tmp", "mountPath": "/tmp"}])
        );
    }

    #[test]
    fn the_profiles_patch_of_the_manager_sets_env_adds_and_removes_flags_and_leaves_objects_out() {
        let mut subject = Subject::memcached();
        subject.manager = ManagerPatch {
            container: Some("manager".into()),
            env: [("ENABLE_WEBHOOKS".to_string(), "false".to_string())].into(),
            args: vec!["--zap-log-level=debug".into()],
            remove_args: vec!["--health-probe-bind-address".into()],
            remove_volumes: vec!["certs".into()],
        };
        subject.leave_out = LeaveOut {
            kinds: vec!["ClusterRole".into()],
            objects: vec!["ServiceAccount/memcached-operator".into()],
        };
        let manifests = subject
            .render(
                &setup(1, &["--leader-election=none"]),
                &subject.own_placement(),
            )
            .unwrap();
        for m in &manifests {
            assert!(
                !matches!(kind_of(&m.object), "ClusterRole" | "ServiceAccount"),
                "{} was not left out",
                kind_of(&m.object)
            );
        }
        assert!(
            manifests
                .iter()
                .any(|m| kind_of(&m.object) == "ClusterRoleBinding")
        );
        let container =
            &manifests.last().unwrap().object.data["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--zap-log-level=debug"), "{args:?}");
        assert!(args.contains(&"--leader-election=none"), "{args:?}");
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--health-probe-bind-address")),
            "{args:?}"
        );
        assert!(
            container["env"]
                .as_array()
                .unwrap()
                .contains(&json!({"name": "ENABLE_WEBHOOKS", "value": "false"})),
            "{container}"
        );
        subject.manager.container = Some("kube-rbac-proxy".into());
        let e = subject
            .render(&setup(1, &[]), &subject.own_placement())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "the profile's manager.container \"kube-rbac-proxy\" names no container of \
                 Deployment memcached-operator"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_pod_selector_reads_as_label_pairs() {
        let mut subject = Subject::memcached();
        assert_eq!(
            subject.selector_labels().collect::<Vec<_>>(),
            [("app.kubernetes.io/name", "memcached-operator")]
        );
        subject.pod_selector = "a=1, b = 2".into();
        assert_eq!(
            subject.selector_labels().collect::<Vec<_>>(),
            [("a", "1"), ("b", "2")]
        );
    }

    #[test]
    fn a_missing_binary_is_stale_and_one_newer_than_its_sources_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("src");
        std::fs::create_dir(&source).unwrap();
        std::fs::write(source.join("main.rs"), "fn main() {}").unwrap();
        let sources = [source.clone()];
        let binary = CargoBinary {
            workspace: dir.path(),
            package: "p",
            bin: "p",
            sources: &sources,
        };
        let built = dir.path().join("p");
        assert!(binary.is_stale(&built));
        std::fs::write(&built, "").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&built)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert!(!binary.is_stale(&built));
        std::fs::File::options()
            .write(true)
            .open(source.join("main.rs"))
            .unwrap()
            .set_modified(later + std::time::Duration::from_secs(1))
            .unwrap();
        assert!(binary.is_stale(&built));
    }

    #[test]
    fn a_failed_build_names_its_command_and_keeps_its_cause() {
        let error = SubjectError::Build {
            command: "cargo build -p memcached-operator --bin memcached-operator".into(),
            source: Arc::new(BuildError::Spawn {
                program: "cargo",
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }),
        };
        assert_eq!(
            crate::error_chain(&error),
            "cannot build the operator binary with `cargo build -p memcached-operator --bin \
             memcached-operator`: cannot run cargo: entity not found"
        );
    }

    #[test]
    fn a_go_binary_is_named_after_its_module_and_package() {
        let go = |package| GoBinary {
            module: Path::new("/r/subjects/go-election"),
            package,
            sources: &[],
        };
        assert_eq!(go(".").file_name(), "go-election");
        assert_eq!(go("./").file_name(), "go-election");
        assert_eq!(go("./cmd/manager").file_name(), "go-election-manager");
    }
}
