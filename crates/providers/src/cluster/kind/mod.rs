//! The kind provider: one kind cluster for the whole run (created, or an existing one
//! reused), the image of the operator under test in it, and each scenario a share of it
//! with namespaces and cluster-scoped names of its own, as on any shared cluster
//! ([`super::kubeconfig`]). Faults are carried out by real means on the nodes (Docker
//! containers) and through admission policies (see [`provider`] for the mapping).
//!
//! # The run
//! [`KindRun::provider`] sets the run up on the first scenario that needs it:
//! 1. `docker`, `kind` and `kubectl` must be on the search path (a missing one is named
//!    with how to install it), and `docker info` must reach the engine;
//! 2. the operator's image, once per image the manifests name ([`image`] says where it
//!    comes from): `OPCONFORM_IMAGE`'s prebuilt one; else the local Docker engine's image
//!    of that name; else one built from the operator's binary on `OPCONFORM_KIND_BASE_IMAGE`
//!    under that name; else, for the bundled operator, `docker build -f
//!    operator/Dockerfile -t memcached-operator:dev .`;
//! 3. [`KindRun::cluster`]: `kind create cluster --name opconform-<random> --config
//!    <kind-config.yaml made absolute> --wait 5m`, unless `OPCONFORM_KIND_CLUSTER` names a
//!    cluster to reuse (`opconform conformance --provider kind` creates one for all its
//!    profiles and hands it to each run so); then the kubeconfig from `kind get
//!    kubeconfig` and `kubectl wait` until every node is Ready;
//! 4. `kind load docker-image` of the operator's image, once per image.
//!
//! [`KindRun::finish`] ends it: `kind export logs` into `target/opconform/kind-logs` when
//! the run failed, then `kind delete cluster` — never for a reused cluster. A failure
//! while setting up deletes what was created at once, and [`KindRun::interrupt`] (what
//! ctrl-c and SIGTERM run, see [`spawn_interrupt_handler`]) kills the commands in flight
//! and deletes the cluster.
//!
//! # Caveats
//! Exercised against a real kind cluster with the node image `ci/kind/build.sh` builds
//! (`ci/kind-e2e.sh`), and in `tests/kind.rs` through its exact command sequences
//! against stand-in `kind`, `docker` and `kubectl` executables.

pub mod command;
pub mod config;
pub mod image;
pub mod node;
pub mod provider;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;

pub use command::{CommandError, Output, Tools};
pub use provider::KindProvider;

use super::shared::client_from_kubeconfig;
use super::{DEFAULT_OPERATOR_IMAGE, OperatorUnderTest, ProviderError, random_name};

/// The tools the provider needs.
pub const REQUIRED_TOOLS: [&str; 3] = ["docker", "kind", "kubectl"];

/// Errors of the kind provider.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    /// A tool is missing, failed, or took too long.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// `docker info` failed: there is no engine to run kind on.
    #[error(
        "the Docker engine does not answer; start it (kind runs its nodes as Docker containers)"
    )]
    NoEngine(#[source] CommandError),
    /// The kind configuration is unusable.
    #[error("cannot use the kind configuration {path}: {why}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// `OPCONFORM_KIND_CLUSTER` names no existing cluster.
    #[error(
        "OPCONFORM_KIND_CLUSTER={name}, but kind has no such cluster (`kind get clusters`: {listed})"
    )]
    NoSuchCluster {
        /// The name asked for.
        name: String,
        /// What kind listed.
        listed: String,
    },
    /// A file of the run could not be written.
    #[error(transparent)]
    File(Box<ProviderError>),
    /// The kubeconfig kind gave does not make a client.
    #[error("the kubeconfig of kind cluster {name} is unusable")]
    Kubeconfig {
        /// The cluster.
        name: String,
        /// The cause.
        #[source]
        source: Box<ProviderError>,
    },
    /// A tool answered something that cannot be read.
    #[error("cannot read {what} from the answer of `{line}`: {output:?}")]
    Unexpected {
        /// What was looked for.
        what: &'static str,
        /// The command line.
        line: String,
        /// What it printed.
        output: String,
    },
    /// The pod a fault targets is not running on a node.
    #[error("pod {pod} cannot be faulted: {why}")]
    Pod {
        /// `namespace/name`.
        pod: String,
        /// Why.
        why: String,
    },
    /// The node a fault targets is not one this provider may fault.
    #[error("node {node} cannot be faulted: {why}")]
    Node {
        /// The node.
        node: String,
        /// Why.
        why: String,
    },
    /// A node came back on the kind network at another address.
    #[error(
        "node {node} came back on the kind network at {now}, not at {before}: its kubelet and the routes to its pods may not recover"
    )]
    AddressChanged {
        /// The node.
        node: String,
        /// Its address before the partition.
        before: String,
        /// Its address now.
        now: String,
    },
    /// Setting up the run's cluster failed earlier (every scenario sees the same cause).
    #[error("the run's kind cluster is not available: {0}")]
    Unavailable(String),
    /// Checking the tools and the engine failed (every scenario sees the same cause).
    #[error("{0}")]
    Preflight(String),
    /// Providing or loading the operator's image failed earlier in the run (every later
    /// scenario sees the same cause).
    #[error("{what} failed earlier in this run: {why}")]
    FailedEarlier {
        /// What was being done.
        what: String,
        /// Why it failed.
        why: String,
    },
    /// The manifests name an image that nothing provides.
    #[error(
        "no image {image} for the operator under test: set OPCONFORM_IMAGE to a prebuilt image \
         (it replaces {image} in the manifests), build {image} into the local Docker engine \
         (it is loaded as it is), or set OPCONFORM_KIND_BASE_IMAGE to a base image to build \
         {image} on from the operator's binary (`ci/kind/build.sh base` builds one and prints \
         its name)"
    )]
    NoImage {
        /// The image the manifests name.
        image: String,
    },
    /// `OPCONFORM_KIND_BASE_IMAGE` names an image the local Docker engine does not have.
    #[error(
        "OPCONFORM_KIND_BASE_IMAGE={base}, but the local Docker engine has no such image \
         (`ci/kind/build.sh base` builds one and prints its name)"
    )]
    NoBaseImage {
        /// The base image.
        base: String,
    },
    /// An image of the operator's binary cannot be made as asked.
    #[error("cannot build {image} from {binary}: {why}")]
    Build {
        /// The image.
        image: String,
        /// The binary.
        binary: String,
        /// What is wrong.
        why: String,
    },
}

impl From<KindError> for ProviderError {
    fn from(e: KindError) -> Self {
        ProviderError::Kind(Box::new(e))
    }
}

impl From<CommandError> for ProviderError {
    fn from(e: CommandError) -> Self {
        KindError::Command(e).into()
    }
}

/// How long each kind of command may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Queries and faults (`docker exec`, `docker inspect`, `kind get …`).
    pub command: Duration,
    /// `kind create cluster --wait` (the command itself gets two minutes more).
    pub create: Duration,
    /// `kubectl wait` for the nodes to be Ready.
    pub nodes_ready: Duration,
    /// `docker build` of the operator image (from `operator/Dockerfile`, or of its binary
    /// on the base image).
    pub build: Duration,
    /// `kind load docker-image`.
    pub load: Duration,
    /// `kind delete cluster` and `kind export logs`.
    pub teardown: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            command: Duration::from_secs(60),
            create: Duration::from_secs(300),
            nodes_ready: Duration::from_secs(180),
            build: Duration::from_secs(1800),
            load: Duration::from_secs(600),
            teardown: Duration::from_secs(180),
        }
    }
}

/// Settings of the kind provider.
#[derive(Debug, Clone)]
pub struct KindOptions {
    /// Where `docker`, `kind` and `kubectl` are found (default: `PATH`).
    pub tools: Tools,
    /// An existing cluster to use and never delete (`OPCONFORM_KIND_CLUSTER`).
    pub existing: Option<String>,
    /// A prebuilt operator image deployed in place of the manifests' (`OPCONFORM_IMAGE`).
    pub image: Option<String>,
    /// The base image an image of the operator's binary is built on, when the manifests'
    /// image is neither prebuilt nor in the local engine (`OPCONFORM_KIND_BASE_IMAGE`).
    pub base_image: Option<String>,
    /// The node image (`OPCONFORM_KIND_NODE_IMAGE`), else kind's default.
    pub node_image: Option<String>,
    /// The kind configuration (`OPCONFORM_KIND_CONFIG`, default `kind-config.yaml`).
    pub config: PathBuf,
    /// The build context of the operator image (the repository root).
    pub repository: PathBuf,
    /// Where each cluster's files go (its configuration, kubeconfig and audit log):
    /// `target/opconform/kind/<cluster>`.
    pub workdir: PathBuf,
    /// Where `kind export logs` puts the logs of a failed run.
    pub logs: PathBuf,
    /// The Docker network of kind's nodes (`KIND_EXPERIMENTAL_DOCKER_NETWORK`, default
    /// `kind`).
    pub network: String,
    /// Time limits.
    pub timeouts: Timeouts,
}

impl KindOptions {
    /// Defaults for a repository at `repository`: tools from `PATH`, a new cluster, no
    /// prebuilt image nor base image, files under `target/opconform`.
    pub fn new(repository: impl Into<PathBuf>) -> Self {
        let repository = repository.into();
        Self {
            tools: Tools::from_env(),
            existing: None,
            image: None,
            base_image: None,
            node_image: None,
            config: repository.join("kind-config.yaml"),
            workdir: crate::report::reports_root().join("kind"),
            logs: crate::report::reports_root().join("kind-logs"),
            repository,
            network: "kind".into(),
            timeouts: Timeouts::default(),
        }
    }

    /// [`KindOptions::new`] for this repository, with `OPCONFORM_KIND_CLUSTER`,
    /// `OPCONFORM_IMAGE`, `OPCONFORM_KIND_BASE_IMAGE`, `OPCONFORM_KIND_NODE_IMAGE`,
    /// `OPCONFORM_KIND_CONFIG` and `KIND_EXPERIMENTAL_DOCKER_NETWORK` applied.
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let mut options = Self::new(crate::repository_root());
        options.existing = var("OPCONFORM_KIND_CLUSTER");
        options.image = var("OPCONFORM_IMAGE");
        options.base_image = var("OPCONFORM_KIND_BASE_IMAGE");
        options.node_image = var("OPCONFORM_KIND_NODE_IMAGE");
        if let Some(config) = var("OPCONFORM_KIND_CONFIG") {
            options.config = config.into();
        }
        if let Some(network) = var("KIND_EXPERIMENTAL_DOCKER_NETWORK") {
            options.network = network;
        }
        options
    }
}

/// A line of progress on stderr (the slow steps say how long they may take).
fn progress(message: &str) {
    eprintln!("opconform: {message}");
}

fn minutes(d: Duration) -> String {
    match d.as_secs() {
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn file_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> KindError {
    let path = path.display().to_string();
    move |source| {
        KindError::File(Box::new(ProviderError::File {
            action,
            path,
            source,
        }))
    }
}

/// The run's kind cluster, ready for scenarios.
pub struct KindCluster {
    name: String,
    owned: bool,
    dir: PathBuf,
    kubeconfig: PathBuf,
    audit_log: Option<PathBuf>,
    client: Client,
    tools: Tools,
    network: String,
    timeouts: Timeouts,
}

impl std::fmt::Debug for KindCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindCluster")
            .field("name", &self.name)
            .field("owned", &self.owned)
            .field("kubeconfig", &self.kubeconfig)
            .field("audit_log", &self.audit_log)
            .finish()
    }
}

impl KindCluster {
    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the run created it (and so deletes it).
    pub fn owned(&self) -> bool {
        self.owned
    }

    /// The kubeconfig file.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's audit log on this machine, when it can be followed.
    pub fn audit_log(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// An admin client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The tools.
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// The Docker network of its nodes.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// Time limits.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }
}

/// An image scenarios deploy, and where it came from.
#[derive(Debug, Clone)]
struct Provided {
    /// Its name.
    image: String,
    /// Where it came from.
    origin: image::Origin,
    /// Whether the local Docker engine has it (it is loaded), else the nodes pull it.
    local: bool,
}

/// One image the manifests name: provided (named, found or built) once, then loaded into
/// the run's cluster once.
#[derive(Default)]
struct ImageState {
    provided: tokio::sync::OnceCell<Result<Provided, String>>,
    loaded: tokio::sync::OnceCell<Result<(), String>>,
}

/// One run on kind: checks the tools and sets the cluster up once, provides and loads
/// each operator image once, hands out scenario shares, and always ends it.
pub struct KindRun {
    options: KindOptions,
    checked: tokio::sync::OnceCell<Result<(), String>>,
    cluster: tokio::sync::OnceCell<Result<Arc<KindCluster>, String>>,
    /// By the image the manifests name.
    images: Mutex<BTreeMap<String, Arc<ImageState>>>,
    /// The cluster this run created and has not deleted yet, from the moment its creation
    /// starts: what an interrupt deletes.
    to_delete: Mutex<Option<String>>,
    /// When the creation of the cluster this run created began and how long `kind create`
    /// took, until the first operator image is in it ([`ClusterStart`]).
    starting: Mutex<Option<(Instant, Duration)>>,
}

/// `cell`'s value, `init` run by the first call: the first caller gets its error as it is,
/// later ones [`KindError::FailedEarlier`] with `what` was being done.
async fn once<T: Clone>(
    cell: &tokio::sync::OnceCell<Result<T, String>>,
    what: impl FnOnce() -> String,
    init: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    let mut first = None;
    let cached = cell
        .get_or_init(|| async {
            init.await.map_err(|e| {
                let why = crate::error_chain(&e);
                first = Some(e);
                why
            })
        })
        .await;
    if let Some(e) = first {
        return Err(e);
    }
    cached
        .clone()
        .map_err(|why| KindError::FailedEarlier { what: what(), why }.into())
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl KindRun {
    /// A run with `options` (nothing is done yet).
    pub fn new(options: KindOptions) -> Self {
        Self {
            options,
            checked: tokio::sync::OnceCell::new(),
            cluster: tokio::sync::OnceCell::new(),
            images: Mutex::default(),
            to_delete: Mutex::new(None),
            starting: Mutex::new(None),
        }
    }

    /// The run of this process, with [`KindOptions::from_env`].
    pub fn global() -> &'static KindRun {
        static RUN: std::sync::OnceLock<KindRun> = std::sync::OnceLock::new();
        RUN.get_or_init(|| KindRun::new(KindOptions::from_env()))
    }

    /// The options.
    pub fn options(&self) -> &KindOptions {
        &self.options
    }

    /// The tools on the search path and a Docker engine that answers, checked once.
    async fn preflight(&self) -> Result<(), ProviderError> {
        let o = &self.options;
        let checked = self
            .checked
            .get_or_init(|| async {
                let check = async {
                    o.tools.require(&REQUIRED_TOOLS)?;
                    o.tools
                        .run(
                            "docker",
                            &["info", "--format", "{{.ServerVersion}}"],
                            o.timeouts.command,
                        )
                        .await
                        .map_err(KindError::NoEngine)?;
                    Ok::<(), KindError>(())
                };
                check.await.map_err(|e| crate::error_chain(&e))
            })
            .await;
        checked.clone().map_err(|e| KindError::Preflight(e).into())
    }

    /// The run's cluster, set up on the first call (later calls wait for it, and get the
    /// same error when it failed). No operator image is loaded into it here.
    ///
    /// # Errors
    /// [`KindError`] from the set-up, or [`KindError::Unavailable`] after it failed.
    pub async fn cluster(&self) -> Result<Arc<KindCluster>, ProviderError> {
        self.preflight().await?;
        let mut fresh = false;
        let cached = self
            .cluster
            .get_or_init(|| async {
                fresh = true;
                self.set_up()
                    .await
                    .map(Arc::new)
                    .map_err(|e| crate::error_chain(&e))
            })
            .await;
        match cached {
            Ok(cluster) => Ok(cluster.clone()),
            Err(e) if fresh => Err(KindError::Unavailable(e.clone()).into()),
            Err(e) => Err(KindError::Unavailable(format!("(set-up failed earlier) {e}")).into()),
        }
    }

    /// A scenario's share of the run's cluster, with `operator`'s image in it: provided
    /// (see [`image`]) before the cluster is set up, so a build that fails costs no
    /// cluster, then loaded; each once per image the manifests name.
    ///
    /// # Errors
    /// When the image cannot be provided or loaded, or the cluster set up.
    pub async fn provider(
        &self,
        operator: &dyn OperatorUnderTest,
    ) -> Result<KindProvider, ProviderError> {
        let wanted = operator.own_placement().image;
        let state = locked(&self.images)
            .entry(wanted.clone())
            .or_default()
            .clone();
        let provided = once(
            &state.provided,
            || format!("providing the operator image {wanted}"),
            async {
                self.preflight().await?;
                self.provide(operator, &wanted).await
            },
        )
        .await?;
        let cluster = self.cluster().await?;
        once(
            &state.loaded,
            || {
                format!(
                    "loading {} into kind cluster {}",
                    provided.image,
                    cluster.name()
                )
            },
            async { Ok(self.load(&cluster, &provided).await?) },
        )
        .await?;
        if let Some((began, created)) = locked(&self.starting).take() {
            let start = ClusterStart {
                cluster: cluster.name().to_string(),
                created_seconds: created.as_secs_f64(),
                ready_seconds: began.elapsed().as_secs_f64(),
            };
            progress(&format!(
                "kind cluster {} created in {:.1}s, ready with the operator image in it in {:.1}s",
                start.cluster, start.created_seconds, start.ready_seconds
            ));
            start.write(&cluster_start_file());
        }
        Ok(KindProvider::new(cluster, provided.image))
    }

    /// The image scenarios deploy for an operator whose manifests name `wanted` (see
    /// [`image`] for the order), built when needed; says which on stderr.
    async fn provide(
        &self,
        operator: &dyn OperatorUnderTest,
        wanted: &str,
    ) -> Result<Provided, ProviderError> {
        use image::Origin;
        let o = &self.options;
        if let Some(prebuilt) = &o.image {
            let local = self.inspect(prebuilt, "{{.Id}}").await?.is_some();
            progress(&format!(
                "deploying {prebuilt} (OPCONFORM_IMAGE) in place of {wanted}, the image the operator's manifests name{}",
                if local {
                    ""
                } else {
                    "; the local Docker engine has no such image: the nodes will pull it"
                }
            ));
            return Ok(Provided {
                image: prebuilt.clone(),
                origin: Origin::Prebuilt,
                local,
            });
        }
        let found = match self.inspect(wanted, image::ID_AND_LABELS).await? {
            None => None,
            Some(text) => {
                Some(
                    image::Found::parse(&text).ok_or_else(|| KindError::Unexpected {
                        what: "the image's id and labels",
                        line: format!("docker image inspect {wanted}"),
                        output: text.clone(),
                    })?,
                )
            }
        };
        let provided = |origin| Provided {
            image: wanted.to_string(),
            origin,
            local: true,
        };
        if found.as_ref().is_some_and(|f| f.built_from.is_none()) {
            progress(&format!(
                "using {wanted} from the local Docker engine as it is (not built by opconform: remove it to have one built from the operator's binary)"
            ));
            return Ok(provided(Origin::Local));
        }
        if let Some(base) = &o.base_image {
            let origin = self
                .build_on_base(operator, wanted, base, found.as_ref())
                .await?;
            return Ok(provided(origin));
        }
        if wanted == DEFAULT_OPERATOR_IMAGE && o.repository.join("operator/Dockerfile").is_file() {
            self.build_dockerfile(wanted).await?;
            if let Some(earlier) = &found {
                self.remove_earlier(wanted, &earlier.id).await;
            }
            return Ok(provided(Origin::Dockerfile));
        }
        Err(KindError::NoImage {
            image: wanted.to_string(),
        }
        .into())
    }

    /// `docker image inspect --format FORMAT image`: what it printed, `None` when the
    /// local engine has no such image.
    async fn inspect(&self, image: &str, format: &str) -> Result<Option<String>, KindError> {
        let o = &self.options;
        let out = o
            .tools
            .output(
                "docker",
                &["image", "inspect", "--format", format, image],
                &[],
                o.timeouts.command,
            )
            .await?;
        if out.success() {
            return Ok(Some(out.stdout.trim().to_string()));
        }
        if out.stderr.contains("No such image") {
            return Ok(None);
        }
        Err(out.check().err().map_or_else(
            || KindError::Unexpected {
                what: "whether the image exists",
                line: format!("docker image inspect {image}"),
                output: String::new(),
            },
            KindError::Command,
        ))
    }

    /// The image `image` of `operator`'s binary on `base`, unless the image of that name
    /// the engine has, `found` (one of ours), is built from the same input already; an
    /// earlier build it replaces is removed.
    async fn build_on_base(
        &self,
        operator: &dyn OperatorUnderTest,
        image: &str,
        base: &str,
        found: Option<&image::Found>,
    ) -> Result<image::Origin, ProviderError> {
        let o = &self.options;
        let binary = operator.binary()?;
        let shown = binary.display().to_string();
        let build_error = |why: String| KindError::Build {
            image: image.to_string(),
            binary: shown.clone(),
            why,
        };
        let plan = image::BuildPlan::new(image, base, &binary, operator.entrypoint_in_image()?)
            .map_err(build_error)?;
        let base_id =
            self.inspect(base, "{{.Id}}")
                .await?
                .ok_or_else(|| KindError::NoBaseImage {
                    base: base.to_string(),
                })?;
        let summed = o
            .tools
            .run("sha256sum", &[&shown], o.timeouts.command)
            .await?;
        let sum = image::parse_sha256sum(&summed.stdout).ok_or_else(|| KindError::Unexpected {
            what: "the binary's hash",
            line: summed.line.clone(),
            output: summed.stdout.clone(),
        })?;
        let input = plan.input(sum, &base_id);
        if found.and_then(|f| f.built_from.as_deref()) == Some(input.as_str()) {
            progress(&format!(
                "{image} is built already from {shown} on {base} (its label {}: {input})",
                image::INPUT_LABEL
            ));
            return Ok(image::Origin::Cached);
        }
        progress(&format!(
            "building {image} from {shown} on {base}, the binary at {} (up to {})…",
            plan.path,
            minutes(o.timeouts.build)
        ));
        let begin = Instant::now();
        std::fs::create_dir_all(&o.workdir).map_err(file_error("cannot create", &o.workdir))?;
        // Removed when dropped, whatever happens.
        let context = tempfile::Builder::new()
            .prefix("image-")
            .tempdir_in(&o.workdir)
            .map_err(file_error("cannot create a directory in", &o.workdir))?;
        let copy = context.path().join(image::CONTEXT_BINARY);
        std::fs::copy(&binary, &copy).map_err(file_error("cannot copy", &binary))?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
                .map_err(file_error("cannot make executable", &copy))?;
        }
        let dockerfile = context.path().join("Dockerfile");
        std::fs::write(&dockerfile, plan.dockerfile())
            .map_err(file_error("cannot write", &dockerfile))?;
        let label = format!("{}={input}", image::INPUT_LABEL);
        let context_arg = context.path().display().to_string();
        o.tools
            .run(
                "docker",
                &[
                    "build",
                    "--quiet",
                    "--label",
                    &label,
                    "--tag",
                    image,
                    &context_arg,
                ],
                o.timeouts.build,
            )
            .await?;
        progress(&format!(
            "built {image} in {:.1}s",
            begin.elapsed().as_secs_f64()
        ));
        if let Some(earlier) = found {
            self.remove_earlier(image, &earlier.id).await;
        }
        Ok(image::Origin::Built)
    }

    /// Removes the image `earlier`, an earlier build of ours that `image` named, once
    /// `image` names another (it would stay as a nameless image); a failure (a container
    /// still uses it) is said and changes nothing else.
    async fn remove_earlier(&self, image: &str, earlier: &str) {
        let o = &self.options;
        match self.inspect(image, "{{.Id}}").await {
            Ok(Some(now)) if now != earlier => {}
            _ => return,
        }
        let removed = o
            .tools
            .output("docker", &["rmi", earlier], &[], o.timeouts.command)
            .await
            .map_err(|e| crate::error_chain(&e))
            .and_then(|out| out.check().map(drop).map_err(|e| crate::error_chain(&e)));
        match removed {
            Ok(()) => progress(&format!("removed the earlier build of {image} ({earlier})")),
            Err(e) => progress(&format!(
                "the earlier build of {image} ({earlier}) is kept: {e}"
            )),
        }
    }

    /// The bundled operator's image from `operator/Dockerfile` (labelled, so that a later
    /// run does not take it for the user's own).
    async fn build_dockerfile(&self, image: &str) -> Result<(), KindError> {
        let o = &self.options;
        let dockerfile = o.repository.join("operator/Dockerfile");
        progress(&format!(
            "building {image} from operator/Dockerfile (up to {}; the first build compiles the operator)…",
            minutes(o.timeouts.build)
        ));
        let dockerfile = dockerfile.display().to_string();
        let context = o.repository.display().to_string();
        let label = format!("{}=operator/Dockerfile", image::INPUT_LABEL);
        o.tools
            .output(
                "docker",
                &[
                    "build",
                    "--file",
                    &dockerfile,
                    "--label",
                    &label,
                    "--tag",
                    image,
                    &context,
                ],
                // The Dockerfile's cache mounts need BuildKit; without it, say so plainly.
                &[("DOCKER_BUILDKIT", "1")],
                o.timeouts.build,
            )
            .await?
            .check()?;
        Ok(())
    }

    async fn set_up(&self) -> Result<KindCluster, KindError> {
        let o = &self.options;
        let tools = &o.tools;
        let t = o.timeouts;
        if let Some(name) = &o.existing {
            let out = tools.run("kind", &["get", "clusters"], t.command).await?;
            if !out.stdout.lines().any(|l| l.trim() == name) {
                let listed: Vec<&str> = out.stdout.split_whitespace().collect();
                return Err(KindError::NoSuchCluster {
                    name: name.clone(),
                    listed: if listed.is_empty() {
                        "no clusters".into()
                    } else {
                        listed.join(", ")
                    },
                });
            }
        }
        let (name, owned) = match &o.existing {
            Some(name) => (name.clone(), false),
            None => (random_name("opconform"), true),
        };
        if !owned {
            // A directory of this process's own: the cluster's own directory may be the
            // run's that created it (a conformance run's), which this run must not remove.
            let dir = o
                .workdir
                .join(&name)
                .join(format!("run-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(file_error("cannot create", &dir))?;
            progress(&format!(
                "using the existing kind cluster {name} (OPCONFORM_KIND_CLUSTER; it is not deleted)"
            ));
            return self.ready(name, false, dir).await;
        }
        let dir = o.workdir.join(&name);
        std::fs::create_dir_all(&dir).map_err(file_error("cannot create", &dir))?;
        *locked(&self.to_delete) = Some(name.clone());
        let made = async {
            let begin = Instant::now();
            self.create(&name, &dir).await?;
            let created = begin.elapsed();
            let cluster = self.ready(name.clone(), true, dir.clone()).await?;
            progress(&format!(
                "kind cluster {name} created in {:.1}s, its nodes Ready in {:.1}s",
                created.as_secs_f64(),
                begin.elapsed().as_secs_f64()
            ));
            *locked(&self.starting) = Some((begin, created));
            Ok(cluster)
        }
        .await;
        if made.is_err() {
            // Whatever part of the cluster exists goes at once.
            self.delete_owned().await;
        }
        made
    }

    async fn create(&self, name: &str, dir: &Path) -> Result<(), KindError> {
        let o = &self.options;
        let audit_dir = dir.join("audit");
        std::fs::create_dir_all(&audit_dir).map_err(file_error("cannot create", &audit_dir))?;
        // The API server appends to the file made here, so it stays readable by this user.
        let log = audit_dir.join(config::AUDIT_LOG_FILE);
        std::fs::write(&log, "").map_err(file_error("cannot create", &log))?;
        let generated = config::cluster_config(&o.config, &audit_dir)?;
        let config_file = dir.join("kind-config.yaml");
        std::fs::write(&config_file, &generated.yaml)
            .map_err(file_error("cannot write", &config_file))?;
        let wait = format!("{}s", o.timeouts.create.as_secs());
        let config_arg = config_file.display().to_string();
        let mut args = vec![
            "create",
            "cluster",
            "--name",
            name,
            "--config",
            &config_arg,
            "--wait",
            &wait,
        ];
        if let Some(node_image) = &o.node_image {
            args.extend(["--image", node_image.as_str()]);
        }
        progress(&format!(
            "creating kind cluster {name} (up to {})…",
            minutes(o.timeouts.create)
        ));
        o.tools
            .run("kind", &args, o.timeouts.create + Duration::from_secs(120))
            .await?;
        Ok(())
    }

    /// Kubeconfig, Ready nodes, a client, the audit log found.
    async fn ready(
        &self,
        name: String,
        owned: bool,
        dir: PathBuf,
    ) -> Result<KindCluster, KindError> {
        let o = &self.options;
        let tools = &o.tools;
        let t = o.timeouts;
        let out = tools
            .run("kind", &["get", "kubeconfig", "--name", &name], t.command)
            .await?;
        let kubeconfig = dir.join("kubeconfig");
        write_private(&kubeconfig, &out.stdout)?;
        let kubeconfig_arg = kubeconfig.display().to_string();
        let ready_timeout = format!("--timeout={}s", t.nodes_ready.as_secs());
        progress(&format!(
            "waiting for the nodes of {name} to be Ready (up to {})…",
            minutes(t.nodes_ready)
        ));
        tools
            .run(
                "kubectl",
                &[
                    "--kubeconfig",
                    &kubeconfig_arg,
                    "wait",
                    "--for=condition=Ready",
                    "nodes",
                    "--all",
                    &ready_timeout,
                ],
                t.nodes_ready + Duration::from_secs(30),
            )
            .await?;
        let client = client_from_kubeconfig(Some(&kubeconfig), None)
            .await
            .map_err(|e| KindError::Kubeconfig {
                name: name.clone(),
                source: Box::new(e),
            })?;
        let audit_log = if owned {
            Some(dir.join("audit").join(config::AUDIT_LOG_FILE))
        } else {
            self.existing_audit_log(&name).await?
        };
        let audit_log = audit_log.filter(|log| {
            let usable = std::fs::File::open(log).is_ok();
            if !usable {
                progress(&format!(
                    "the audit log of {name} is not readable at {}: scenarios run without the audit of writes",
                    log.display()
                ));
            }
            usable
        });
        Ok(KindCluster {
            name,
            owned,
            dir,
            kubeconfig,
            audit_log,
            client,
            tools: tools.clone(),
            network: o.network.clone(),
            timeouts: t,
        })
    }

    /// `kind load docker-image` of an image the local engine has into `cluster`.
    async fn load(&self, cluster: &KindCluster, provided: &Provided) -> Result<(), KindError> {
        if !provided.local {
            return Ok(());
        }
        let o = &self.options;
        let (image, name) = (provided.image.as_str(), cluster.name());
        progress(&format!(
            "loading {image} ({}) into kind cluster {name} (up to {})…",
            provided.origin.describe(),
            minutes(o.timeouts.load)
        ));
        let begin = Instant::now();
        o.tools
            .run(
                "kind",
                &["load", "docker-image", image, "--name", name],
                o.timeouts.load,
            )
            .await?;
        progress(&format!(
            "loaded {image} into kind cluster {name} in {:.1}s",
            begin.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// The host directory an existing cluster's control plane mounts at
    /// [`config::AUDIT_DIR_IN_NODE`], with the log file in it.
    async fn existing_audit_log(&self, name: &str) -> Result<Option<PathBuf>, KindError> {
        #[derive(serde::Deserialize)]
        struct Mount {
            #[serde(rename = "Source", default)]
            source: String,
            #[serde(rename = "Destination", default)]
            destination: String,
        }
        let o = &self.options;
        let node = format!("{name}-control-plane");
        let out = o
            .tools
            .run(
                "docker",
                &["inspect", "--format", "{{json .Mounts}}", &node],
                o.timeouts.command,
            )
            .await?;
        let mounts: Vec<Mount> =
            serde_json::from_str(out.stdout.trim()).map_err(|_| KindError::Unexpected {
                what: "the control plane's mounts",
                line: out.line.clone(),
                output: out.stdout.clone(),
            })?;
        let found = mounts
            .into_iter()
            .find(|m| m.destination == config::AUDIT_DIR_IN_NODE)
            .map(|m| PathBuf::from(m.source).join(config::AUDIT_LOG_FILE));
        if found.is_none() {
            progress(&format!(
                "{node} mounts no {} from this machine (create the cluster with kind-config.yaml): scenarios run without the audit of writes",
                config::AUDIT_DIR_IN_NODE
            ));
        }
        Ok(found)
    }

    /// Deletes the cluster this run created, once.
    async fn delete_owned(&self) {
        let Some(name) = locked(&self.to_delete).take() else {
            return;
        };
        let o = &self.options;
        progress(&format!("deleting kind cluster {name}…"));
        let begin = Instant::now();
        match o
            .tools
            .run(
                "kind",
                &["delete", "cluster", "--name", &name],
                o.timeouts.teardown,
            )
            .await
        {
            Ok(_) => progress(&format!(
                "deleted kind cluster {name} in {:.1}s",
                begin.elapsed().as_secs_f64()
            )),
            Err(e) => eprintln!(
                "opconform: {}; delete it with `kind delete cluster --name {name}`",
                crate::error_chain(&e)
            ),
        }
    }

    /// Ends the run: when it `failed`, exports the cluster's logs to
    /// [`KindOptions::logs`] and keeps the audit log of a cluster it created; deletes the
    /// cluster the run created (never a reused one). Safe to call more than once.
    pub async fn finish(&self, failed: bool) {
        let cluster = self.cluster.get().and_then(|c| c.as_ref().ok()).cloned();
        if let Some(cluster) = &cluster {
            if failed {
                self.export_logs(&cluster.name).await;
            }
            let _ = std::fs::remove_file(&cluster.kubeconfig);
        }
        self.delete_owned().await;
        if let Some(cluster) = &cluster {
            // A reused cluster's directory is this run's own and holds only the kubeconfig.
            if failed && cluster.owned {
                if let Some(log) = &cluster.audit_log {
                    progress(&format!(
                        "the API server's audit log is kept in {}",
                        log.display()
                    ));
                }
            } else {
                let _ = std::fs::remove_dir_all(&cluster.dir);
            }
        }
    }

    async fn export_logs(&self, name: &str) {
        let o = &self.options;
        let dir = o.logs.display().to_string();
        progress(&format!(
            "exporting the logs of kind cluster {name} to {dir} (up to {})…",
            minutes(o.timeouts.teardown)
        ));
        let Err(e) = o
            .tools
            .run(
                "kind",
                &["export", "logs", &dir, "--name", name],
                o.timeouts.teardown,
            )
            .await
        else {
            return;
        };
        let failure = crate::error_chain(&e);
        if !only_crictl_failed(&failure) {
            eprintln!("opconform: {failure}");
            return;
        }
        // Everything else was exported: list each node's images with ctr instead.
        let nodes = match o
            .tools
            .run(
                "kind",
                &["get", "nodes", "--name", name],
                o.timeouts.teardown,
            )
            .await
        {
            Ok(out) => out.stdout,
            Err(e) => {
                eprintln!("opconform: {}", crate::error_chain(&e));
                return;
            }
        };
        for node in nodes.split_whitespace() {
            let images = node::ctr(&o.tools, o.timeouts.teardown, node, &["images", "ls"]).await;
            let path = o.logs.join(node).join("images.log");
            let written = match images {
                Ok(list) => std::fs::write(&path, list).map_err(|e| e.to_string()),
                Err(e) => Err(crate::error_chain(&e)),
            };
            if let Err(e) = written {
                eprintln!(
                    "opconform: cannot list the images of node {node} into {}: {e}",
                    path.display()
                );
            }
        }
        progress(
            "the nodes have no crictl, which kind export logs runs for images.log: each node's images.log lists `ctr images ls` instead",
        );
    }

    /// What an interrupt does: kills the commands still running (a `kind create`, a
    /// build) and deletes the cluster the run created, even half made. Safe to call more
    /// than once, and before or after [`KindRun::finish`].
    pub async fn interrupt(&self) {
        self.options.tools.kill_in_flight();
        self.delete_owned().await;
    }
}

/// Whether the only commands a failed `kind export logs` names are `crictl images` (which
/// nodes without crictl cannot run; kind exports everything else regardless).
fn only_crictl_failed(failure: &str) -> bool {
    let failed: Vec<&str> = failure
        .split("command \"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(command, _)| command))
        .collect();
    !failed.is_empty() && failed.iter().all(|c| c.ends_with(" crictl images"))
}

fn write_private(path: &Path, text: &str) -> Result<(), KindError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(file_error("cannot write", path))?;
    file.write_all(text.as_bytes())
        .map_err(file_error("cannot write", path))
}

/// On ctrl-c or SIGTERM: says so, runs [`KindRun::interrupt`] on `run`, and exits with
/// status 130.
pub fn spawn_interrupt_handler(run: &'static KindRun) {
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminated => {}
        }
        progress(
            "interrupted: stopping the kind commands in flight and deleting the run's cluster…",
        );
        run.interrupt().await;
        std::process::exit(130);
    });
}

/// How long the last cluster the provider created took to start, as `opconform bench`
/// reads it from [`cluster_start_file`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStart {
    /// The cluster's name.
    pub cluster: String,
    /// `kind create cluster` alone.
    pub created_seconds: f64,
    /// Created, every node Ready and the operator image loaded.
    pub ready_seconds: f64,
}

impl ClusterStart {
    /// Writes it to `path`; a failure is said on stderr and changes nothing else.
    fn write(&self, path: &Path) {
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                std::fs::write(
                    path,
                    serde_json::to_vec_pretty(self).expect("a ClusterStart serializes"),
                )
            });
        if let Err(e) = written {
            progress(&format!(
                "cannot write the cluster's start times to {}: {e}",
                path.display()
            ));
        }
    }
}

/// `kind/cluster.json` under the reports root: the start of the last cluster created.
pub fn cluster_start_file() -> PathBuf {
    crate::report::reports_root()
        .join("kind")
        .join("cluster.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_that_failed_only_for_crictl_is_told_from_any_other_failure() {
        let crictl = r#"`kind export logs /t --name c` failed (exit status 1): ERROR: [command "docker exec --privileged c-worker crictl images" failed with error: exit status 126, command "docker exec --privileged c-control-plane crictl images" failed with error: exit status 126]"#;
        assert!(only_crictl_failed(crictl));
        let other = r#"ERROR: [command "docker exec --privileged c-worker crictl images" failed with error: exit status 126, command "docker exec --privileged c-worker journalctl --no-pager" failed with error: exit status 1]"#;
        assert!(!only_crictl_failed(other));
        assert!(!only_crictl_failed("ERROR: unknown cluster \"c\""));
    }
}
