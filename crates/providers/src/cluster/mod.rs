//! Providers: where a scenario's cluster comes from, and how faults are carried out there.
//!
//! Every provider gives the step library the same things — an admin client, the namespace
//! the operator runs in, the image to deploy, a fault log, the audit of writes when it has
//! one — and carries out the fault vocabulary by its own means. What a provider cannot do
//! it refuses with [`ProviderError::Unsupported`], naming the provider and the fault, and
//! scenarios that need it carry a tag ([`Capability::tag`]) that the provider excludes.
//!
//! [`open`] is the one way a scenario gets its cluster, [`ProviderKind::supports`] says
//! which capabilities a provider has, and [`start_run`] and [`finish_run`] bracket a run
//! (the run-wide clusters of kind and local live between them).
//!
//! - [`sim`]: a fresh embedded simulated cluster per scenario (the default).
//! - [`local`]: one real control plane for the run (local processes), our kubelet as its
//!   nodes, a share of it per scenario.
//! - [`kubeconfig`]: any running cluster reachable through a kubeconfig.
//! - [`kind`]: one kind cluster for the run, created (or reused) and deleted by it.

pub mod admission;
pub mod audit_log;
pub mod kind;
pub mod kubeconfig;
pub mod local;
pub mod operator_image;
pub mod shared;
pub mod sim;
pub mod sim_parts;

/// The kubeconfig provider's settings, which [`open`] and [`ProviderKind::supports`] take.
pub use kubeconfig::KubeconfigOptions;

/// The kubectl the harness builds (or finds): for the tools it runs, such as kustomize.
pub use local::binaries::kubectl;

use std::path::Path;

use async_trait::async_trait;
use kube::Client;

use crate::audit::AuditFeed;
use crate::fault::{FaultError, FaultLog, NodeFault, PodFault, RequestMatch, RequestRules};

/// The image the operator manifests name.
pub const DEFAULT_OPERATOR_IMAGE: &str = "memcached-operator:dev";

/// The images of our kubelets (sim and local) for `operator`: the image its manifests name,
/// built from its binary as the kind provider would build it (see [`operator_image`]), so
/// that its manager runs unchanged everywhere. Blocking work (a copy and a gzip of the
/// binary when it changed) is done on a blocking thread.
///
/// # Errors
/// When the operator cannot be built, or its image written.
async fn operator_images(
    operator: &dyn OperatorUnderTest,
) -> Result<crate::sim::kubelet::ImageMap, ProviderError> {
    let image = operator.own_placement().image;
    let binary = operator.binary()?;
    let entrypoint = operator.entrypoint_in_image()?;
    let cache = sim_node::config::default_image_cache();
    tokio::task::spawn_blocking(move || {
        operator_image::operator_images(&image, &binary, entrypoint, &cache)
    })
    .await
    .map_err(|e| ProviderError::Operator(Box::new(e)))?
    .map_err(|e| ProviderError::Operator(Box::new(e)))
}

/// Errors of the providers.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// `OPCONFORM_PROVIDER` names no provider.
    #[error(
        "OPCONFORM_PROVIDER={0:?} is not a provider: expected sim (the default), local, kubeconfig or kind"
    )]
    Unknown(String),
    /// The provider cannot do what a step asks.
    #[error("the {provider} provider cannot {what}: {hint}")]
    Unsupported {
        /// The provider.
        provider: &'static str,
        /// What was asked.
        what: String,
        /// Where it can be done instead.
        hint: &'static str,
    },
    /// The simulated cluster did not start.
    #[error("cannot start the simulated cluster")]
    SimStart(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A client could not be built.
    #[error("cannot build a client for the cluster")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The cluster refused a fault.
    #[error("the fault was not applied")]
    Fault(#[from] FaultError),
    /// A request to the cluster failed.
    #[error("{action} failed")]
    Api {
        /// What was being done.
        action: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A reject rule cannot be an admission policy, or its policy did not come into or go
    /// out of force.
    #[error(transparent)]
    Admission(#[from] admission::AdmissionError),
    /// The operator under test could not be built, or its manifests read.
    #[error(transparent)]
    Operator(Box<dyn std::error::Error + Send + Sync>),
    /// The local provider failed (its binaries, control plane or nodes).
    #[error("the local provider failed")]
    Local(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The kind provider failed (a tool, the cluster's set-up, a fault's command).
    #[error(transparent)]
    Kind(Box<dyn std::error::Error + Send + Sync>),
    /// A file of the provider could not be read or written.
    #[error("{action} {path}")]
    File {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What a provider needs of the operator under test to run it.
pub trait OperatorUnderTest: Sync {
    /// Where its own manifests put it (namespace, image), on a cluster of its own.
    fn own_placement(&self) -> Placement;
    /// The binary our kubelets run for its image (sim, local), built when needed.
    ///
    /// # Errors
    /// [`ProviderError::Operator`] when it cannot be found or built.
    fn binary(&self) -> Result<std::path::PathBuf, ProviderError>;
    /// Its CustomResourceDefinitions (YAML).
    ///
    /// # Errors
    /// [`ProviderError::Operator`] when its manifests cannot be read.
    fn crd_manifests(&self) -> Result<Vec<String>, ProviderError>;
    /// Where [`OperatorUnderTest::binary`] goes in an image the kind provider builds for
    /// it (when neither `OPCONFORM_IMAGE` nor the local Docker engine has one; see
    /// [`kind::image`]), so that the manager container of its manifests runs it unchanged:
    ///
    /// - `Some(path)`: the absolute path the manager container runs, its `command[0]`
    ///   (`/manager` for a kubebuilder project); the binary is copied there, and is also
    ///   the image's ENTRYPOINT;
    /// - `None` (the default): the container runs the image's ENTRYPOINT; the binary goes
    ///   to `/usr/local/bin/<its file name>`, made the ENTRYPOINT.
    ///
    /// Either way the image is the base image plus that one file, run as user 65532, so
    /// the binary must be static (Go with `CGO_ENABLED=0`) or need no newer glibc than the
    /// base's; a path that is not absolute, names a directory, or holds a space, quote,
    /// backslash or `$` is refused.
    ///
    /// # Errors
    /// [`ProviderError::Operator`] when its manifests cannot be read.
    fn entrypoint_in_image(&self) -> Result<Option<String>, ProviderError> {
        Ok(None)
    }
}

/// What a scenario may need beyond deploying and deleting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Capability {
    /// crash, hold/release and partition/repair of pods and nodes: access to the nodes.
    NodeAccess,
    /// reject/allow of chosen API requests.
    ApiFaults,
    /// The simulator's own behaviour, checked against its own API server.
    SimOnly,
    /// delay, skew and evict of chosen pods: our kubelet and its pods' proxies (sim,
    /// local); a real kubelet evicts under node pressure only and shares its node's clock.
    KubeletFaults,
    /// Holding or deferring chosen API requests, judged one by one: the simulated API
    /// server, or our kubelet's pod proxies in front of a real one (local).
    RequestRules,
    /// The audit of writes by pod, for the single-writer check.
    Audit,
    /// Skewing a pod's wall clock: libfaketime (Debian package `faketime`) on the simulator.
    ClockSkew,
}

impl Capability {
    /// Every capability.
    pub const ALL: [Capability; 7] = [
        Capability::NodeAccess,
        Capability::ApiFaults,
        Capability::SimOnly,
        Capability::KubeletFaults,
        Capability::RequestRules,
        Capability::Audit,
        Capability::ClockSkew,
    ];

    /// What it lets a scenario do, as in "the provider cannot …".
    pub fn describe(self) -> &'static str {
        match self {
            Self::NodeAccess => "crash, freeze or cut off pods and nodes (no access to the nodes)",
            Self::ApiFaults => "make the API server reject chosen requests",
            Self::SimOnly => "run the simulator's own scenarios",
            Self::KubeletFaults => "delay API traffic, skew clocks or evict chosen pods",
            Self::RequestRules => {
                "hold or defer chosen API requests (it cannot judge requests one by one)"
            }
            Self::Audit => {
                "follow the audit of writes (set OPCONFORM_AUDIT_LOG to the API server's audit log)"
            }
            Self::ClockSkew => {
                "skew clocks here (on the simulator it needs libfaketime: apt-get install faketime)"
            }
        }
    }

    /// The tag scenarios needing it carry (without `@`).
    pub fn tag(self) -> &'static str {
        match self {
            Self::NodeAccess => "node-access",
            Self::ApiFaults => "api-faults",
            Self::SimOnly => "sim-only",
            Self::KubeletFaults => "kubelet-faults",
            Self::RequestRules => "request-rules",
            Self::Audit => "audit",
            Self::ClockSkew => "clock-skew",
        }
    }
}

/// Where the operator goes in a scenario, and under what names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The operator's namespace.
    pub namespace: String,
    /// Appended to cluster-scoped names (ClusterRole, ClusterRoleBinding); empty on a
    /// cluster of the scenario's own.
    pub suffix: String,
    /// The operator image.
    pub image: String,
    /// Namespaces the operator watches; empty for all.
    pub watch_namespaces: Vec<String>,
    /// Labels put on every object of the operator (so teardown finds them).
    pub labels: std::collections::BTreeMap<String, String>,
}

impl Placement {
    /// The bundled operator where its own manifests put it (namespace
    /// `memcached-operator-system`, image [`DEFAULT_OPERATOR_IMAGE`]), on a cluster of
    /// its own: what a cluster started without a subject runs.
    pub fn bundled() -> Self {
        Self {
            namespace: "memcached-operator-system".into(),
            suffix: String::new(),
            image: DEFAULT_OPERATOR_IMAGE.into(),
            watch_namespaces: Vec::new(),
            labels: Default::default(),
        }
    }
}

/// A cluster a scenario runs on.
#[async_trait]
pub trait Provider: Send + Sync {
    /// `sim`, `kubeconfig` or `kind`.
    fn name(&self) -> &'static str;
    /// An admin client.
    fn client(&self) -> Client;
    /// The name a feature's namespace has in this cluster (its own on a cluster of the
    /// scenario's own, prefixed on a shared one).
    fn namespace(&self, logical: &str) -> String;
    /// Where the operator goes.
    fn placement(&self) -> Placement;
    /// The log of faults applied and undone, which the provider records into (the
    /// recorder merges it into the history).
    fn faults(&self) -> FaultLog;
    /// A live feed of the audit, when the provider has one.
    fn audit(&self) -> Option<AuditFeed>;
    /// Applies a fault to a pod and logs it.
    async fn pod_fault(
        &self,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), ProviderError>;
    /// Applies a fault to a node and logs it.
    async fn node_fault(&self, node: &str, fault: &NodeFault) -> Result<(), ProviderError>;
    /// Makes the API server refuse matching requests with `code`; returns the rule's id.
    async fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        message: &str,
    ) -> Result<u64, ProviderError>;
    /// Removes a reject rule (undoes [`Provider::reject`]).
    async fn allow(&self, id: u64) -> Result<(), ProviderError>;
    /// Keeps what the provider knows of a failed scenario in `dir` (cluster logs…).
    async fn keep_artifacts(&self, dir: &Path);
    /// The request rules that hold chosen API requests or their senders, when the provider
    /// judges requests one by one: in the simulated API server (sim), in the pods' proxies
    /// (local, whose kubelet is ours).
    fn request_rules(&self) -> Option<&dyn RequestRules> {
        None
    }
    /// Whether pod IPs can be reached from the harness (pods run as local processes);
    /// else the recorder goes through the API server's `pods/proxy`.
    fn pod_ips_reachable(&self) -> bool {
        false
    }
    /// Removes everything the scenario created, whatever happened.
    async fn teardown(self: Box<Self>);
}

/// Which provider `OPCONFORM_PROVIDER` names (default `sim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// The embedded simulated cluster.
    Sim,
    /// A real control plane as local processes, our kubelet as its nodes.
    Local,
    /// Any cluster through `KUBECONFIG`.
    Kubeconfig,
    /// A kind cluster.
    Kind,
}

impl ProviderKind {
    /// Reads `OPCONFORM_PROVIDER`.
    ///
    /// # Errors
    /// [`ProviderError::Unknown`] for a name that is no provider.
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::parse(std::env::var("OPCONFORM_PROVIDER").ok().as_deref())
    }

    /// Parses a provider name (`None` or empty is `sim`).
    ///
    /// # Errors
    /// [`ProviderError::Unknown`] for a name that is no provider.
    pub fn parse(name: Option<&str>) -> Result<Self, ProviderError> {
        match name.map(str::trim) {
            None | Some("") | Some("sim") => Ok(Self::Sim),
            Some("local") => Ok(Self::Local),
            Some("kubeconfig") => Ok(Self::Kubeconfig),
            Some("kind") => Ok(Self::Kind),
            Some(other) => Err(ProviderError::Unknown(other.to_string())),
        }
    }

    /// The provider's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sim => "sim",
            Self::Local => "local",
            Self::Kubeconfig => "kubeconfig",
            Self::Kind => "kind",
        }
    }

    /// Whether scenarios tagged with `capability`'s tag can run here; on kubeconfig the
    /// audit needs `kubeconfig`'s audit log.
    pub fn supports(
        self,
        capability: Capability,
        kubeconfig: &kubeconfig::KubeconfigOptions,
    ) -> bool {
        match (self, capability) {
            (Self::Sim | Self::Local, Capability::ClockSkew) => sim_parts::can_skew_clocks(),
            (Self::Sim, _) => true,
            // Our kubelet does the pod and node faults, its pods' proxies the request rules;
            // admission policies the rejects; the simulator's own scenarios stay on sim.
            (Self::Local, c) => c != Capability::SimOnly,
            (Self::Kind, c) => !matches!(
                c,
                Capability::SimOnly
                    | Capability::ClockSkew
                    | Capability::RequestRules
                    | Capability::KubeletFaults
            ),
            (Self::Kubeconfig, Capability::Audit) => kubeconfig.audit_log.is_some(),
            (Self::Kubeconfig, _) => false,
        }
    }

    /// How many scenarios run at once. On the simulator each has a cluster of its own
    /// whose time goes mostly to waiting on lease timers; on a shared cluster each adds
    /// its pods to every other scenario's nodes.
    pub fn concurrency(self) -> usize {
        match self {
            Self::Sim => SIM_CONCURRENCY,
            Self::Local | Self::Kubeconfig | Self::Kind => 2,
        }
    }

    /// The line a user reads when this provider's pods cannot be containers on this
    /// machine (sim and local without an OCI runtime, or without root and user
    /// namespaces): what is missing, and what a pod lacks therefore; or, when they are
    /// rootless containers, what those lack.
    pub fn pods_as_processes_warning(self) -> Option<String> {
        match self {
            Self::Sim | Self::Local => {
                let isolation = sim_node::oci::Isolation::detect(std::path::Path::new(
                    sim_node::oci::STATE_DIR,
                ));
                isolation.warning().or_else(|| isolation.rootless_notice())
            }
            Self::Kubeconfig | Self::Kind => None,
        }
    }

    /// Why a pod of this provider is not the container a manager expects, when it is not:
    /// on sim and local our kubelet runs each as a host process where it cannot make
    /// containers (no service-account files, host name, image filesystem or network
    /// namespace: two replicas of a manager that binds fixed ports, such as a kubebuilder
    /// scaffold's `:8443` and `:8081`, collide), and rootless containers share the host's
    /// network namespace (the same collision).
    pub fn pods_are_not_containers(self) -> Option<String> {
        match self {
            Self::Sim | Self::Local => {
                match sim_node::oci::Isolation::detect(&std::env::temp_dir()) {
                    sim_node::oci::Isolation::Processes { reason } => Some(format!(
                        "its pods are processes of the host, not containers ({reason}): they \
                         have no service-account files \
                         (/var/run/secrets/kubernetes.io/serviceaccount), host name, image \
                         filesystem or network namespace of their own"
                    )),
                    sim_node::oci::Isolation::Containers(rt) if rt.rootless() => Some(
                        "its pods are rootless containers (the harness is not root): they \
                         have no network namespace of their own, so replicas that bind the \
                         same ports collide"
                            .to_string(),
                    ),
                    sim_node::oci::Isolation::Containers(_) => None,
                }
            }
            Self::Kubeconfig | Self::Kind => None,
        }
    }

    /// The tags of scenarios that run alone, besides `@serial`: on a shared cluster those
    /// that disrupt it (`@disruptive`) or bound a moment to within a second (`@timing`:
    /// another scenario's load can delay the samples that date it), and on `local` those
    /// that set request rules, which are the run's nodes'.
    pub fn alone_tags(self) -> &'static [&'static str] {
        match self {
            Self::Sim => &[],
            Self::Local => &["disruptive", "timing", "request-rules"],
            Self::Kubeconfig | Self::Kind => &["disruptive", "timing"],
        }
    }
}

/// Opens a scenario's cluster on the provider `kind`: a fresh simulated cluster (sim), a
/// share of the run's (local, kind; the first scenario starts it), or of the user's
/// (kubeconfig), ready for `operator`, the operator under test (on kind, with the image
/// its manifests name in the cluster: see [`kind::image`]).
///
/// # Errors
/// When the cluster cannot start or be reached, or the operator cannot be built.
pub async fn open(
    kind: ProviderKind,
    operator: &dyn OperatorUnderTest,
    kubeconfig: &self::kubeconfig::KubeconfigOptions,
) -> Result<Box<dyn Provider>, ProviderError> {
    Ok(match kind {
        ProviderKind::Sim => Box::new(
            sim::SimProvider::running(operator.own_placement(), operator_images(operator).await?)
                .await?,
        ),
        ProviderKind::Kubeconfig => {
            Box::new(self::kubeconfig::KubeconfigProvider::connect(kubeconfig.clone()).await?)
        }
        ProviderKind::Kind => Box::new(self::kind::KindRun::global().provider(operator).await?),
        ProviderKind::Local => {
            // The operator's CRDs are there before the controllers start, as on a cluster
            // that has had them a while (see ControlPlaneConfig::crds).
            let start = async {
                // Finding the binaries may mean building them (minutes): not on a worker.
                let binaries = tokio::task::spawn_blocking(local::Binaries::find)
                    .await
                    .map_err(|e| ProviderError::Local(Box::new(e)))?
                    .map_err(|e| ProviderError::Local(Box::new(e)))?;
                local::LocalCluster::running(
                    binaries,
                    &operator.own_placement().image,
                    operator_images(operator).await?,
                    operator.crd_manifests()?,
                )
                .await
            };
            Box::new(local::LocalRun::global().share(start).await?)
        }
    })
}

/// Begins a run on `kind`: on kind, ctrl-c and SIGTERM then delete the run's cluster.
pub fn start_run(kind: ProviderKind) {
    if kind == ProviderKind::Kind {
        self::kind::spawn_interrupt_handler(self::kind::KindRun::global());
    }
}

/// Ends a run on `kind`, whatever happened: the run's kind cluster is deleted (its logs
/// exported first when the run `failed`), the run's local control plane stopped, the
/// CustomResourceDefinitions a run on a kubeconfig's cluster brought deleted.
pub async fn finish_run(kind: ProviderKind, failed: bool) {
    match kind {
        ProviderKind::Kind => self::kind::KindRun::global().finish(failed).await,
        ProviderKind::Local => local::LocalRun::global().finish().await,
        ProviderKind::Kubeconfig => kubeconfig::finish_run().await,
        ProviderKind::Sim => {}
    }
}

/// How many scenarios run at once on the simulator (see [`ProviderKind::concurrency`]).
const SIM_CONCURRENCY: usize = 6;

/// A random lowercase name `prefix-xxxxxx` valid as a namespace.
pub fn random_name(prefix: &str) -> String {
    use rand::Rng as _;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let tail: String = (0..6)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}-{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_defaults_to_sim_and_an_unknown_name_lists_the_valid_ones() {
        assert_eq!(ProviderKind::parse(None).unwrap(), ProviderKind::Sim);
        assert_eq!(ProviderKind::parse(Some("")).unwrap(), ProviderKind::Sim);
        assert_eq!(
            ProviderKind::parse(Some("kind")).unwrap(),
            ProviderKind::Kind
        );
        assert_eq!(
            ProviderKind::parse(Some("local")).unwrap(),
            ProviderKind::Local
        );
        let e = ProviderKind::parse(Some("minikube"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"minikube\""), "{e}");
        assert!(
            e.contains("sim (the default), local, kubeconfig or kind"),
            "{e}"
        );
    }

    #[test]
    fn random_names_are_valid_namespace_names() {
        let n = random_name("opconform");
        assert!(n.starts_with("opconform-") && n.len() == "opconform-".len() + 6);
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
}
