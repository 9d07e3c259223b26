//! Operator profiles: a small YAML file that describes one operator under test, so the
//! features run against any operator, not only the bundled one. A profile says where the
//! operator runs (namespace, Deployment, the labels of its pods), the lock it elects its
//! leader with, the port its metrics are served on, its image, where its binary comes from
//! for the providers that run pods as local processes, and where its manifests are.
//!
//! `OPCONFORM_OPERATOR=path/to/profile.yaml` picks the profile a run of the features uses;
//! the bundled memcached operator's is `profiles/memcached-operator/profile.yaml`. The JSON
//! Schema of the format (`profiles/profile.schema.json`) is generated from the types here
//! (`opconform profile schema`) and checked for drift by the tests. Reading a profile
//! refuses unknown keys and bad values with the key named, and resolves relative paths
//! against the profile's own directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use crate::record::recorder::HolderNaming;
use crate::subject::{
    BinaryBuild, BinarySource, Election, LeaseElection, LeaseTimings, LeaveOut, Lock, LockKind,
    ManagerPatch, ManifestSource, Metrics, Subject, TIMING_PLACEHOLDERS, WatchNamespace, Work,
};

/// The variable naming the profile of the operator under test.
pub const PROFILE_ENV: &str = "OPCONFORM_OPERATOR";

/// The bundled operator's profile, as shipped.
const BUNDLED: &str = include_str!("../../../profiles/memcached-operator/profile.yaml");

/// Errors of reading a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read the operator profile {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a profile: not YAML, a key unknown or missing, a value of the wrong
    /// type (the problem names the key and the line).
    #[error("operator profile {path}: {problem}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, where, and what was expected.
        problem: String,
    },
    /// A value is out of its range or malformed.
    #[error("operator profile {path}: {key}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, as a path from the top (`lock.name`).
        key: String,
        /// What is wrong and what was expected.
        problem: String,
    },
}

/// One operator under test, as its profile describes it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "opconform operator profile")]
pub struct Profile {
    /// A short name for reports (a DNS label).
    pub name: String,
    /// The namespace its manifests put it in (it is moved per scenario on shared clusters).
    pub namespace: String,
    /// The name of its Deployment in its manifests.
    pub deployment: String,
    /// The labels that select its pods (and only its pods).
    pub pod_selector: BTreeMap<String, String>,
    /// Where its pods serve their Prometheus metrics (the leader gauge, the reconcile
    /// counter).
    pub metrics: MetricsSpec,
    /// Its leader-election lock.
    pub lock: LockSpec,
    /// The flags that choose how it elects its leader, per mode: the features of a mode
    /// the profile leaves out are not run.
    pub election: ElectionSpec,
    /// The image its manifests name for its manager container.
    pub image: String,
    /// Where its binary comes from, for the providers that run pods as local processes
    /// (sim and local).
    pub binary: BinarySpec,
    /// Where its manifests are.
    pub manifests: ManifestSpec,
    /// Its manager works only as a container: it reads what a container of the pod has,
    /// such as the service-account files (controller-runtime finds its leader-election
    /// namespace there when none is given), or its image's own filesystem. On providers
    /// whose pods are processes of the host (sim, local), its scenarios are then not
    /// applicable, and the conformance table says so [default: false].
    #[serde(default)]
    pub needs_container: bool,
    /// How it is told which namespaces to watch, so that scenarios sharing a cluster keep
    /// apart: a flag (`{flag: --watch-namespace}`: the harness passes
    /// `--watch-namespace=ns1,ns2`) or an environment variable of its manager container
    /// (`{env: WATCH_NAMESPACE}`, operator-sdk's convention) [default: neither: it watches
    /// every namespace, and its scenarios run one at a time on a shared cluster].
    #[serde(default)]
    pub watch_namespace: Option<WatchNamespaceSpec>,
    /// Changes to the manager container of its Deployment, as a kustomize patch of it
    /// would make them (e.g. `env: {ENABLE_WEBHOOKS: "false"}`) [default: none].
    #[serde(default)]
    pub manager: Option<ManagerPatchSpec>,
    /// Objects of its manifests that are not applied, each printed as it is left out
    /// (e.g. cert-manager's kinds and the webhook configurations of an operator run with
    /// its webhooks off) [default: none].
    #[serde(default)]
    pub leave_out: Option<LeaveOutSpec>,
    /// The work the leadership scenarios give it, so that the single-writer check has
    /// writes to judge and a new leader can be seen working [default: none; the scenarios
    /// tagged `@work` are left out].
    #[serde(default)]
    pub work: Option<WorkSpec>,
}

/// How an operator is told the namespaces it watches (one of the two; the namespaces are
/// joined with commas).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchNamespaceSpec {
    /// A flag of its manager, given as `FLAG=ns1,ns2` (replacing one its manifests set).
    pub flag: Option<String>,
    /// An environment variable of its manager container (replacing one its manifests set).
    pub env: Option<String>,
}

/// Changes to an operator's manager container.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagerPatchSpec {
    /// The container's name [default: the Deployment's first container].
    pub container: Option<String>,
    /// Environment variables to set (replacing the manifests' values).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Arguments to add (a flag given again replaces the manifests' one).
    #[serde(default)]
    pub args: Vec<String>,
    /// Flags to remove, by name (`--metrics-secure` removes `--metrics-secure=true` too).
    #[serde(default)]
    pub remove_args: Vec<String>,
    /// Volumes of the manager's pod to remove, by name, with every container's mounts of
    /// them (e.g. the Secret of a webhook's certificate, which only cert-manager makes, for
    /// a manager run with its webhooks off).
    #[serde(default)]
    pub remove_volumes: Vec<String>,
}

/// Objects of an operator's manifests that are not applied.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaveOutSpec {
    /// Kinds left out entirely (`Certificate`, `ValidatingWebhookConfiguration`).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Single objects left out, as `Kind/name` (`Service/webhook-service`).
    #[serde(default)]
    pub objects: Vec<String>,
}

/// The work a leader does: what gives it work, and which of its writes prove it did it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkSpec {
    /// Objects that give it work (a YAML file of one or more documents, or a directory of
    /// them, relative to the profile's directory), created in the scenario's namespace
    /// [default: none, it works on its own].
    #[serde(default)]
    pub objects: Option<PathBuf>,
    /// A JSON merge patch applied to each of those objects that gives a leader more work
    /// [default: none, it works on its own].
    #[serde(default)]
    pub more: Option<serde_json::Value>,
    /// The resources, as the API server names them (`deployments`, `configmaps`), whose
    /// successful writes by the leader prove it did its work (a subresource such as
    /// `deployments/status` counts for its resource).
    pub writes: Vec<String>,
}

/// The lock an operator elects its leader with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LockSpec {
    /// The kind of object.
    pub kind: LockKindSpec,
    /// Its name (the leader-election id).
    pub name: String,
    /// Its namespace in the manifests [default: the operator's namespace].
    #[serde(default)]
    pub namespace: Option<String>,
    /// How a Lease's holderIdentity names the leader's pod: `beforeUnderscore` (client-go's
    /// and controller-runtime's `<host name>_<unique id>`: the part before the last `_`)
    /// or `whole` (the holder is the pod's host name alone) [default: beforeUnderscore].
    #[serde(default)]
    pub holder: HolderSpec,
}

/// How a Lease's holder names its pod.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum HolderSpec {
    /// `<pod>_<unique id>`.
    #[default]
    BeforeUnderscore,
    /// `<pod>`.
    Whole,
}

/// Where an operator's pods serve their metrics.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricsSpec {
    /// The port, on each pod's IP.
    pub port: u16,
    /// `http`, or `https` (a kubebuilder v4 scaffold's `--metrics-secure`, served with a
    /// certificate the manager makes itself: it is not verified, as the scaffold's own
    /// ServiceMonitor does not verify it) [default: http].
    #[serde(default)]
    pub scheme: MetricsSchemeSpec,
    /// The path [default: /metrics].
    #[serde(default = "default_metrics_path")]
    pub path: String,
    /// A bearer token the harness gets itself, for metrics behind controller-runtime's
    /// authentication and authorization filter: a ServiceAccount of its own, bound to this
    /// ClusterRole of the operator's manifests (a kubebuilder scaffold's
    /// `<prefix>metrics-reader`), and a TokenRequest for it [default: none, no token].
    #[serde(default)]
    pub token: Option<MetricsTokenSpec>,
}

fn default_metrics_path() -> String {
    "/metrics".into()
}

/// The scheme metrics are served with.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MetricsSchemeSpec {
    /// Plain HTTP.
    #[default]
    Http,
    /// HTTPS.
    Https,
}

/// The token for metrics behind authentication.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricsTokenSpec {
    /// The ClusterRole that may read them, as the manifests name it.
    pub cluster_role: String,
}

/// The flags of each election mode an operator has, appended to its manager container's
/// arguments (replacing any of the same name).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElectionSpec {
    /// A Lease renewed by the leader: either its arguments, where `{leaseDuration}`,
    /// `{renewDeadline}` and `{retryPeriod}` stand for the timings a feature states (as a
    /// flag takes them, e.g. `4s`), or, for an operator with no flags for them, its fixed
    /// timings and any arguments (`{timings: 15s/10s/2s, args: [--leader-elect]}`): the
    /// features then run at those timings, their bounds following them.
    #[serde(default)]
    pub lease: Option<LeaseSpec>,
    /// Leader-for-life (a lock owned by the leader's Pod): its arguments.
    #[serde(default)]
    pub for_life: Option<Vec<String>>,
    /// The arguments that make a leader release its Lease when it shuts down, added to the
    /// lease mode's (`[]` when it always does) [default: it never does; the scenarios
    /// tagged `@release-on-cancel` are left out].
    #[serde(default)]
    pub release_on_cancel: Option<Vec<String>>,
    /// It elects through coordinated leader election (KEP-4355: its candidates write
    /// LeaseCandidates and kube-apiserver picks the leader), which needs the control plane's
    /// `CoordinatedLeaderElection` feature gate: the local provider starts kube-apiserver
    /// with it (and the LeaseCandidate API); on providers that cannot set feature gates its
    /// scenarios cannot run [default: false].
    #[serde(default)]
    pub coordinated: bool,
}

/// How an operator elects with a Lease: the flags that set its timings, or its fixed
/// timings.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum LeaseSpec {
    /// Its arguments, with `{leaseDuration}`, `{renewDeadline}` and `{retryPeriod}`.
    Flags(Vec<String>),
    /// Fixed timings.
    Fixed(FixedLeaseSpec),
}

/// An operator whose lease timings no flag sets.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixedLeaseSpec {
    /// LeaseDuration/RenewDeadline/RetryPeriod as it runs with them (controller-runtime's
    /// defaults are `15s/10s/2s`); client-go's rules apply: the lease duration above the
    /// renew deadline, the renew deadline above 1.2 retry periods.
    pub timings: String,
    /// Arguments that choose lease mode (e.g. `--leader-elect`) [default: none].
    #[serde(default)]
    pub args: Vec<String>,
}

impl<'de> Deserialize<'de> for LeaseSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = LeaseSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a list of arguments with {leaseDuration}, {renewDeadline} and \
                     {retryPeriod}, or a map with `timings` (e.g. 15s/10s/2s) and `args`",
                )
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<LeaseSpec, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(LeaseSpec::Flags)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<LeaseSpec, A::Error> {
                FixedLeaseSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(LeaseSpec::Fixed)
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// The kind of object a lock is.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub enum LockKindSpec {
    /// A `coordination.k8s.io/v1` Lease.
    Lease,
    /// A ConfigMap (leader-for-life).
    ConfigMap,
}

/// Where an operator's binary comes from: a file, or a Cargo build. `env` names a variable
/// that, when set, names the binary instead.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BinarySpec {
    /// A variable that names the binary to use, read first.
    #[serde(default)]
    pub env: Option<String>,
    /// An executable (relative to the profile's directory).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A Cargo build that makes it.
    #[serde(default)]
    pub cargo: Option<CargoSpec>,
    /// A Go build that makes it.
    #[serde(default)]
    pub go: Option<GoSpec>,
}

/// A binary built by `go build`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GoSpec {
    /// The Go module's directory, holding its `go.mod` and `go.sum` (relative to the
    /// profile's directory).
    pub module: PathBuf,
    /// The main package to build, as `go build` takes it (`.`, `./cmd/manager`).
    pub package: String,
    /// Files and directories it is built from (relative to the module): the binary is
    /// rebuilt when one is newer.
    #[serde(default)]
    pub sources: Vec<PathBuf>,
}

/// A binary built by Cargo.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CargoSpec {
    /// The workspace to build in (relative to the profile's directory).
    pub workspace: PathBuf,
    /// The package.
    pub package: String,
    /// The binary target.
    pub bin: String,
    /// Files and directories it is built from (relative to the workspace): the binary is
    /// rebuilt when one is newer.
    #[serde(default)]
    pub sources: Vec<PathBuf>,
}

/// Where an operator's manifests are.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestSpec {
    /// A directory of plain manifests (relative to the profile's directory); with `apply`.
    pub dir: Option<PathBuf>,
    /// The directory's subdirectories to apply, in this order (then ordered by kind).
    #[serde(default)]
    pub apply: Vec<String>,
    /// The directory's subdirectory of CustomResourceDefinitions (installed before the
    /// controllers start on providers that start their own) [default: none, an operator of
    /// built-in kinds only].
    #[serde(default)]
    pub crds: Option<String>,
    /// A kustomize directory (e.g. a kubebuilder project's `config/default`), rendered as
    /// `kubectl kustomize` renders it, by the kubectl the harness builds.
    pub kustomize: Option<PathBuf>,
    /// One YAML file of every object, already rendered (e.g. `make build-installer`'s
    /// `dist/install.yaml`).
    pub file: Option<PathBuf>,
}

impl Profile {
    /// Reads and checks the profile in `path`.
    ///
    /// # Errors
    /// When the file cannot be read, is not a profile, or has a value out of its range.
    pub fn read(path: &Path) -> Result<Subject, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        // Relative to the working directory as it is now, whatever a build or a process
        // started later takes as its own.
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let base = std::path::absolute(parent).unwrap_or_else(|_| parent.to_path_buf());
        Self::parse(&text, path, &base)
    }

    /// The bundled memcached operator's profile.
    ///
    /// # Errors
    /// Never for the shipped file (the tests read it).
    pub fn bundled() -> Result<Subject, ProfileError> {
        let dir = crate::subject::repository_root().join("profiles/memcached-operator");
        Self::parse(BUNDLED, &dir.join("profile.yaml"), &dir)
    }

    /// The profile `OPCONFORM_OPERATOR` names, else the bundled one.
    ///
    /// # Errors
    /// As [`Profile::read`].
    pub fn from_env() -> Result<Subject, ProfileError> {
        match std::env::var_os(PROFILE_ENV) {
            Some(path) if !path.is_empty() => Self::read(Path::new(&path)),
            _ => Self::bundled(),
        }
    }

    /// Parses `text` (from `path`, for errors), resolves relative paths against `base`,
    /// checks every value and returns the subject it describes.
    ///
    /// # Errors
    /// Not a profile, or a value out of its range.
    pub fn parse(text: &str, path: &Path, base: &Path) -> Result<Subject, ProfileError> {
        let invalid = |key: &str, problem: String| ProfileError::Invalid {
            path: path.to_path_buf(),
            key: key.to_string(),
            problem,
        };
        let profile: Profile = serde_yaml::from_str(text).map_err(|e| ProfileError::Format {
            path: path.to_path_buf(),
            problem: e.to_string(),
        })?;
        profile
            .check()
            .map_err(|(key, problem)| invalid(key, problem))?;
        Ok(profile.into_subject(base))
    }

    /// Checks what the types cannot: names, ports, a binary source, manifests to apply.
    fn check(&self) -> Result<(), (&'static str, String)> {
        for (key, value) in [
            ("name", &self.name),
            ("namespace", &self.namespace),
            (
                "lock.namespace",
                self.lock.namespace.as_ref().unwrap_or(&self.namespace),
            ),
        ] {
            dns_label(value).map_err(|p| (key, p))?;
        }
        for (key, value) in [
            ("deployment", &self.deployment),
            ("lock.name", &self.lock.name),
        ] {
            dns_subdomain(value).map_err(|p| (key, p))?;
        }
        if let Some(manager) = &self.manager {
            if let Some(flag) = manager.remove_args.iter().find(|f| !f.starts_with('-')) {
                return Err((
                    "manager.removeArgs",
                    format!("{flag:?} is no flag name: expected e.g. --metrics-secure"),
                ));
            }
            if manager.container.as_deref() == Some("") {
                return Err(("manager.container", "expected a container's name".into()));
            }
        }
        if let Some(object) = self.leave_out.iter().flat_map(|l| &l.objects).find(|o| {
            o.split_once('/')
                .is_none_or(|(kind, name)| kind.is_empty() || name.is_empty())
        }) {
            return Err((
                "leaveOut.objects",
                format!("{object:?}: expected Kind/name, e.g. Service/webhook-service"),
            ));
        }
        if let Some(watch) = &self.watch_namespace {
            match (&watch.flag, &watch.env) {
                (Some(flag), None) if flag.starts_with('-') && !flag.contains(['=', ' ']) => {}
                (Some(flag), None) => {
                    return Err((
                        "watchNamespace.flag",
                        format!("{flag:?} is no flag name: expected e.g. --watch-namespace"),
                    ));
                }
                (None, Some(env))
                    if !env.is_empty()
                        && !env.starts_with(|c: char| c.is_ascii_digit())
                        && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {}
                (None, Some(env)) => {
                    return Err((
                        "watchNamespace.env",
                        format!(
                            "{env:?} is no environment variable name: expected e.g. WATCH_NAMESPACE"
                        ),
                    ));
                }
                _ => {
                    return Err((
                        "watchNamespace",
                        "expected exactly one of flag and env".to_string(),
                    ));
                }
            }
        }
        if self.pod_selector.is_empty() {
            return Err((
                "podSelector",
                "expected at least one label (key: value) that selects the operator's pods".into(),
            ));
        }
        if let Some((key, _)) = self
            .pod_selector
            .iter()
            .find(|(k, v)| k.is_empty() || k.contains([',', '=']) || v.contains([',', '=']))
        {
            return Err((
                "podSelector",
                format!("label {key:?}: expected a label key and value without ',' or '='"),
            ));
        }
        if self.metrics.port == 0 {
            return Err(("metrics.port", "expected a port from 1 to 65535".into()));
        }
        if !self.metrics.path.starts_with('/') {
            return Err((
                "metrics.path",
                format!(
                    "{:?}: expected an absolute path, e.g. /metrics",
                    self.metrics.path
                ),
            ));
        }
        if let Some(token) = &self.metrics.token {
            dns_subdomain(&token.cluster_role).map_err(|p| ("metrics.token.clusterRole", p))?;
        }
        if self.image.trim().is_empty() {
            return Err(("image", "expected an image reference".into()));
        }
        let sources = [
            self.binary.path.is_some(),
            self.binary.cargo.is_some(),
            self.binary.go.is_some(),
        ];
        match sources.iter().filter(|&&given| given).count() {
            0 if self.binary.env.is_none() => {
                return Err((
                    "binary",
                    "expected `path`, `cargo`, `go` or `env`: nothing says where the binary is"
                        .into(),
                ));
            }
            0 | 1 => {}
            _ => {
                return Err((
                    "binary",
                    "expected one of `path`, `cargo` and `go`, not several".into(),
                ));
            }
        }
        if let Some(go) = &self.binary.go
            && go.package.trim().is_empty()
        {
            return Err((
                "binary.go.package",
                "expected the main package to build, such as `.` or `./cmd/manager`".into(),
            ));
        }
        match (&self.election.lease, &self.election.for_life) {
            (None, None) => {
                return Err((
                    "election",
                    "expected `lease`, `forLife` or both: the election modes the operator has"
                        .into(),
                ));
            }
            (Some(LeaseSpec::Flags(args)), _) => {
                for placeholder in TIMING_PLACEHOLDERS {
                    if !args.iter().any(|a| a.contains(placeholder)) {
                        return Err((
                            "election.lease",
                            format!(
                                "expected an argument with {placeholder}: the features set {} \
                                 (or, for an operator with no flags for its timings, \
                                 `lease: {{timings: 15s/10s/2s}}`)",
                                TIMING_PLACEHOLDERS.join(", ")
                            ),
                        ));
                    }
                }
                if let Some(unknown) = args
                    .iter()
                    .find_map(|a| unknown_placeholder(a, &TIMING_PLACEHOLDERS))
                {
                    return Err((
                        "election.lease",
                        format!(
                            "unknown placeholder {unknown}: expected {}",
                            TIMING_PLACEHOLDERS.join(", ")
                        ),
                    ));
                }
            }
            (Some(LeaseSpec::Fixed(fixed)), _) => {
                LeaseTimings::parse(&fixed.timings)
                    .and_then(|t| t.check())
                    .map_err(|p| ("election.lease.timings", p))?;
                if let Some(unknown) = fixed.args.iter().find_map(|a| unknown_placeholder(a, &[])) {
                    return Err((
                        "election.lease.args",
                        format!(
                            "placeholder {unknown} in an argument: the timings are fixed \
                             (election.lease.timings), no flag sets them"
                        ),
                    ));
                }
            }
            _ => {}
        }
        if let Some(unknown) = self
            .election
            .for_life
            .iter()
            .flatten()
            .find_map(|a| unknown_placeholder(a, &[]))
        {
            return Err((
                "election.forLife",
                format!("unknown placeholder {unknown}: leader-for-life has no timings"),
            ));
        }
        if self.election.coordinated && self.election.lease.is_none() {
            return Err((
                "election.coordinated",
                "expected `election.lease` too: coordinated leader election elects with a Lease"
                    .into(),
            ));
        }
        if self.election.release_on_cancel.is_some() && self.election.lease.is_none() {
            return Err((
                "election.releaseOnCancel",
                "expected `election.lease` too: releasing on shutdown is a lease mode's".into(),
            ));
        }
        if let Some(work) = &self.work {
            if work.writes.is_empty() || work.writes.iter().any(|w| w.trim().is_empty()) {
                return Err((
                    "work.writes",
                    "expected at least one resource (plural, e.g. `deployments`) whose writes \
                     prove the leader's work"
                        .into(),
                ));
            }
            if let Some(more) = &work.more
                && !more.is_object()
            {
                return Err((
                    "work.more",
                    "expected a JSON merge patch: a mapping such as {spec: {size: 2}}".into(),
                ));
            }
            if work.more.is_some() && work.objects.is_none() {
                return Err((
                    "work.more",
                    "expected `work.objects` too: the patch is applied to them".into(),
                ));
            }
        }
        let m = &self.manifests;
        match (&m.dir, &m.kustomize, &m.file) {
            (Some(_), None, None) if m.apply.is_empty() => {
                return Err((
                    "manifests.apply",
                    "expected at least one subdirectory of manifests to apply".into(),
                ));
            }
            (Some(_), None, None) => {}
            (None, Some(_), None) | (None, None, Some(_)) => {
                for (key, set) in [
                    ("manifests.apply", !m.apply.is_empty()),
                    ("manifests.crds", m.crds.is_some()),
                ] {
                    if set {
                        return Err((key, "expected only with `manifests.dir`".into()));
                    }
                }
            }
            _ => {
                return Err((
                    "manifests",
                    "expected one of `dir`, `kustomize` and `file`".into(),
                ));
            }
        }
        Ok(())
    }

    fn into_subject(self, base: &Path) -> Subject {
        let pod_selector = self
            .pod_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let build = match (self.binary.path, self.binary.cargo, self.binary.go) {
            (Some(path), _, _) => BinaryBuild::Path(base.join(path)),
            (None, None, Some(go)) => {
                let module = normalize(&base.join(&go.module));
                BinaryBuild::Go {
                    sources: go.sources.iter().map(|s| module.join(s)).collect(),
                    module,
                    package: go.package,
                }
            }
            (None, Some(cargo), _) => {
                let workspace = normalize(&base.join(&cargo.workspace));
                BinaryBuild::Cargo {
                    sources: cargo.sources.iter().map(|s| workspace.join(s)).collect(),
                    workspace,
                    package: cargo.package,
                    bin: cargo.bin,
                }
            }
            (None, None, None) => BinaryBuild::None,
        };
        Subject {
            name: self.name,
            lock: Lock {
                kind: match self.lock.kind {
                    LockKindSpec::Lease => LockKind::Lease,
                    LockKindSpec::ConfigMap => LockKind::ConfigMap,
                },
                name: self.lock.name,
                holder: match self.lock.holder {
                    HolderSpec::BeforeUnderscore => HolderNaming::BeforeUnderscore,
                    HolderSpec::Whole => HolderNaming::Whole,
                },
                namespace: self
                    .lock
                    .namespace
                    .unwrap_or_else(|| self.namespace.clone()),
            },
            election: Election {
                lease: self.election.lease.map(|lease| match lease {
                    LeaseSpec::Flags(args) => LeaseElection { args, fixed: None },
                    LeaseSpec::Fixed(fixed) => LeaseElection {
                        // Checked by `check`.
                        fixed: LeaseTimings::parse(&fixed.timings).ok(),
                        args: fixed.args,
                    },
                }),
                for_life: self.election.for_life,
                release_on_cancel: self.election.release_on_cancel,
                coordinated: self.election.coordinated,
            },
            manager: self
                .manager
                .map_or_else(ManagerPatch::default, |m| ManagerPatch {
                    container: m.container,
                    env: m.env,
                    args: m.args,
                    remove_args: m.remove_args,
                    remove_volumes: m.remove_volumes,
                }),
            leave_out: self.leave_out.map_or_else(LeaveOut::default, |l| LeaveOut {
                kinds: l.kinds,
                objects: l.objects,
            }),
            watch_namespace: self.watch_namespace.and_then(|w| match (w.flag, w.env) {
                (Some(flag), _) => Some(WatchNamespace::Flag(flag)),
                (None, Some(env)) => Some(WatchNamespace::Env(env)),
                (None, None) => None,
            }),
            work: self.work.map(|work| Work {
                objects: work.objects.map(|o| base.join(o)),
                more: work.more,
                writes: work.writes,
            }),
            namespace: self.namespace,
            deployment: self.deployment,
            pod_selector,
            metrics: Metrics {
                https: matches!(self.metrics.scheme, MetricsSchemeSpec::Https),
                port: self.metrics.port,
                path: self.metrics.path,
                token_cluster_role: self.metrics.token.map(|t| t.cluster_role),
            },
            needs_container: self.needs_container,
            image: self.image,
            binary: BinarySource {
                env: self.binary.env,
                build,
            },
            manifests: match (
                self.manifests.dir,
                self.manifests.kustomize,
                self.manifests.file,
            ) {
                (Some(dir), _, _) => ManifestSource::Dirs {
                    config: normalize(&base.join(dir)),
                    dirs: self.manifests.apply,
                    crds: self.manifests.crds,
                },
                (None, Some(dir), _) => ManifestSource::Kustomize(normalize(&base.join(dir))),
                (None, None, file) => {
                    ManifestSource::File(normalize(&base.join(file.unwrap_or_default())))
                }
            },
        }
    }

    /// The JSON Schema of the format, as published in `profiles/profile.schema.json`.
    pub fn schema() -> String {
        let schema = schemars::schema_for!(Profile);
        let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
        text.push('\n');
        text
    }
}

impl Subject {
    /// The bundled memcached operator (`operator/`), as its profile
    /// (`profiles/memcached-operator/profile.yaml`) describes it: namespace
    /// `memcached-operator-system`, lock Lease `memcached-operator-lock`, image
    /// `memcached-operator:dev`, manifests in `operator/config`.
    ///
    /// # Panics
    /// Never: the shipped profile is read by the tests.
    pub fn memcached() -> Self {
        Profile::bundled().unwrap_or_else(|e| panic!("the bundled operator profile: {e}"))
    }
}

/// `path` without `.` and `..` components where a parent can be dropped.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The first `{…}` in `arg` that is not one of `allowed`.
fn unknown_placeholder(arg: &str, allowed: &[&str]) -> Option<String> {
    let mut rest = arg;
    while let Some(start) = rest.find('{') {
        let end = rest[start..]
            .find('}')
            .map_or(rest.len(), |e| start + e + 1);
        let placeholder = &rest[start..end];
        if !allowed.contains(&placeholder) {
            return Some(placeholder.to_string());
        }
        rest = &rest[end..];
    }
    None
}

/// A DNS label (RFC 1123): what namespaces are named.
fn dns_label(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{value:?}: expected a DNS label (at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)"
        ))
    }
}

/// A DNS subdomain (RFC 1123): what most objects are named.
fn dns_subdomain(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|label| dns_label(label).is_ok());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{value:?}: expected a DNS subdomain (at most 253 characters: DNS labels joined by '.')"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Subject, ProfileError> {
        Profile::parse(text, Path::new("/p/profile.yaml"), Path::new("/p"))
    }

    const MINIMAL: &str = "
name: op
namespace: op-system
deployment: op-manager
podSelector: {app: op}
metrics: {port: 8080}
lock: {kind: Lease, name: op-lock}
election:
  lease: [--elect=lease, '--lease={leaseDuration}', '--renew={renewDeadline}', '--retry={retryPeriod}']
image: op:dev
binary: {path: bin/op}
manifests: {dir: config, apply: [rbac, manager], crds: crd}
";

    #[test]
    fn a_minimal_profile_describes_its_operator_with_paths_from_its_directory() {
        let subject = parse(MINIMAL).unwrap();
        assert_eq!(subject.name, "op");
        assert_eq!(subject.pod_selector, "app=op");
        assert_eq!(subject.lock.namespace, "op-system");
        assert_eq!(subject.lock.kind, LockKind::Lease);
        assert_eq!(
            subject.binary.build,
            BinaryBuild::Path(PathBuf::from("/p/bin/op"))
        );
        let ManifestSource::Dirs { config, dirs, crds } = &subject.manifests else {
            panic!("plain manifests: {:?}", subject.manifests);
        };
        assert_eq!(config, &PathBuf::from("/p/config"));
        assert_eq!(dirs, &["rbac", "manager"]);
        assert_eq!(crds.as_deref(), Some("crd"));
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_path() {
        let e = parse(&MINIMAL.replace("lock: {kind: Lease,", "lock: {kind: Lease, renew: 3,"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("operator profile /p/profile.yaml: lock: unknown field `renew`"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_value_is_refused_with_its_key_and_what_was_expected() {
        let e = parse(&MINIMAL.replace("kind: Lease", "kind: Secret"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lock.kind: unknown variant `Secret`, expected `Lease` or `ConfigMap`"),
            "{e}"
        );
        let e = parse(&MINIMAL.replace("metrics: {port: 8080}", "metrics: {port: 70000}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("metrics.port: invalid value"), "{e}");
        let e = parse(&MINIMAL.replace("namespace: op-system", "namespace: Op_System"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("namespace: \"Op_System\": expected a DNS label"),
            "{e}"
        );
        let e = parse(&MINIMAL.replace("podSelector: {app: op}", "podSelector: {}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("podSelector: expected at least one label"),
            "{e}"
        );
    }

    #[test]
    fn the_watched_namespaces_go_by_a_flag_an_environment_variable_or_not_at_all() {
        let with = |watch: &str| parse(&format!("{MINIMAL}watchNamespace: {watch}\n"));
        assert_eq!(parse(MINIMAL).unwrap().watch_namespace, None);
        assert_eq!(
            with("{flag: --namespaces}").unwrap().watch_namespace,
            Some(WatchNamespace::Flag("--namespaces".into()))
        );
        assert_eq!(
            with("{env: WATCH_NAMESPACE}").unwrap().watch_namespace,
            Some(WatchNamespace::Env("WATCH_NAMESPACE".into()))
        );
        for (watch, said) in [
            ("{}", "watchNamespace: expected exactly one of flag and env"),
            (
                "{flag: --a, env: B}",
                "watchNamespace: expected exactly one of flag and env",
            ),
            (
                "{flag: watch}",
                "watchNamespace.flag: \"watch\" is no flag name: expected e.g. --watch-namespace",
            ),
            (
                "{env: 1WATCH}",
                "watchNamespace.env: \"1WATCH\" is no environment variable name",
            ),
        ] {
            let e = with(watch).unwrap_err().to_string();
            assert!(e.contains(said), "{watch}: {e}");
        }
    }

    #[test]
    fn a_profile_patches_the_manager_and_leaves_objects_out_as_it_says() {
        let subject = parse(&format!(
            "{MINIMAL}manager: {{container: manager, env: {{ENABLE_WEBHOOKS: \"false\"}}, \
             args: [--x=1], removeArgs: [--metrics-secure], removeVolumes: [cert]}}\n\
             leaveOut: {{kinds: [Certificate], objects: [Service/webhook-service]}}\n"
        ))
        .unwrap();
        assert_eq!(subject.manager.container.as_deref(), Some("manager"));
        assert_eq!(subject.manager.env["ENABLE_WEBHOOKS"], "false");
        assert_eq!(subject.manager.args, ["--x=1"]);
        assert_eq!(subject.manager.remove_args, ["--metrics-secure"]);
        assert_eq!(subject.manager.remove_volumes, ["cert"]);
        assert_eq!(subject.leave_out.kinds, ["Certificate"]);
        assert_eq!(subject.leave_out.objects, ["Service/webhook-service"]);
        for (extra, said) in [
            (
                "manager: {removeArgs: [metrics-secure]}",
                "manager.removeArgs: \"metrics-secure\" is no flag name",
            ),
            (
                "leaveOut: {objects: [webhook-service]}",
                "leaveOut.objects: \"webhook-service\": expected Kind/name",
            ),
            (
                "manager: {environment: {}}",
                "manager: unknown field `environment`",
            ),
        ] {
            let e = parse(&format!("{MINIMAL}{extra}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(said), "{extra}: {e}");
        }
    }

    #[test]
    fn manifests_come_from_one_of_a_directory_a_kustomization_and_a_rendered_file() {
        let plain = "manifests: {dir: config, apply: [rbac, manager], crds: crd}";
        let with = |manifests: &str| parse(&MINIMAL.replace(plain, manifests));
        assert_eq!(
            with("manifests: {kustomize: config/default}")
                .unwrap()
                .manifests,
            ManifestSource::Kustomize(PathBuf::from("/p/config/default"))
        );
        assert_eq!(
            with("manifests: {file: dist/install.yaml}")
                .unwrap()
                .manifests,
            ManifestSource::File(PathBuf::from("/p/dist/install.yaml"))
        );
        for (manifests, said) in [
            (
                "manifests: {kustomize: config/default, file: dist/install.yaml}",
                "manifests: expected one of `dir`, `kustomize` and `file`",
            ),
            (
                "manifests: {}",
                "manifests: expected one of `dir`, `kustomize` and `file`",
            ),
            (
                "manifests: {kustomize: config/default, apply: [rbac]}",
                "manifests.apply: expected only with `manifests.dir`",
            ),
            (
                "manifests: {dir: config}",
                "manifests.apply: expected at least one subdirectory",
            ),
        ] {
            let e = with(manifests).unwrap_err().to_string();
            assert!(e.contains(said), "{manifests}: {e}");
        }
    }

    #[test]
    fn a_missing_key_is_named() {
        let e = parse(&MINIMAL.replace("image: op:dev\n", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `image`"), "{e}");
    }

    #[test]
    fn a_binary_needs_exactly_one_source_unless_a_variable_names_it() {
        let e = parse(&MINIMAL.replace(
            "binary: {path: bin/op}",
            "binary: {path: bin/op, cargo: {workspace: ., package: op, bin: op}}",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("binary: expected one of `path`, `cargo` and `go`, not several"),
            "{e}"
        );
        let e = parse(&MINIMAL.replace("binary: {path: bin/op}", "binary: {}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("binary: expected `path`, `cargo`, `go` or `env`"),
            "{e}"
        );
        let subject =
            parse(&MINIMAL.replace("binary: {path: bin/op}", "binary: {env: OP_BIN}")).unwrap();
        assert_eq!(subject.binary.build, BinaryBuild::None);
    }

    #[test]
    fn a_go_binary_is_built_in_its_module_resolved_against_the_profile() {
        let subject = parse(&MINIMAL.replace(
            "binary: {path: bin/op}",
            "binary: {go: {module: ../op, package: ./cmd/manager, sources: [go.mod]}}",
        ))
        .unwrap();
        assert_eq!(
            subject.binary.build,
            BinaryBuild::Go {
                module: PathBuf::from("/op"),
                package: "./cmd/manager".into(),
                sources: vec![PathBuf::from("/op/go.mod")],
            }
        );
        let e = parse(&MINIMAL.replace(
            "binary: {path: bin/op}",
            "binary: {go: {module: ., package: ' '}}",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("binary.go.package: expected the main package"),
            "{e}"
        );
    }

    #[test]
    fn work_needs_the_writes_that_prove_it_and_a_patch_needs_objects() {
        let with = |work: &str| parse(&format!("{MINIMAL}work: {work}\n"));
        let subject =
            with("{objects: work.yaml, more: {spec: {size: 2}}, writes: [deployments]}").unwrap();
        let work = subject.work.unwrap();
        assert_eq!(work.objects, Some(PathBuf::from("/p/work.yaml")));
        assert!(work.proves("deployments/status"));
        assert!(!work.proves("configmaps"));
        for (bad, expected) in [
            (
                "{writes: []}",
                "work.writes: expected at least one resource",
            ),
            (
                "{more: {a: 1}, writes: [x]}",
                "work.more: expected `work.objects` too",
            ),
            (
                "{objects: w.yaml, more: 2, writes: [x]}",
                "work.more: expected a JSON merge patch",
            ),
            ("{writes: [x], extra: 1}", "unknown field `extra`"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(expected), "{bad}: {e}");
        }
    }

    #[test]
    fn metrics_over_https_with_a_token_and_a_whole_holder_are_read_as_written() {
        let subject = parse(
            &MINIMAL
                .replace(
                    "metrics: {port: 8080}",
                    "metrics: {port: 8443, scheme: https, token: {clusterRole: op-metrics-reader}}",
                )
                .replace(
                    "lock: {kind: Lease, name: op-lock}",
                    "lock: {kind: Lease, name: op-lock, holder: whole}\nneedsContainer: true",
                ),
        )
        .unwrap();
        assert_eq!(
            subject.metrics,
            Metrics {
                https: true,
                port: 8443,
                path: "/metrics".into(),
                token_cluster_role: Some("op-metrics-reader".into()),
            }
        );
        assert_eq!(subject.lock.holder, HolderNaming::Whole);
        assert!(subject.needs_container);
        let plain = parse(MINIMAL).unwrap();
        assert_eq!(plain.metrics, Metrics::http(8080));
        assert_eq!(plain.lock.holder, HolderNaming::BeforeUnderscore);
        assert!(!plain.needs_container);
        for (bad, expected) in [
            (
                "metrics: {port: 8443, scheme: tls}",
                "unknown variant `tls`",
            ),
            (
                "metrics: {port: 8443, path: metrics}",
                "metrics.path: \"metrics\": expected an absolute path",
            ),
            (
                "metrics: {port: 8443, token: {clusterRole: Bad_Role}}",
                "metrics.token.clusterRole",
            ),
            (
                "metrics: {port: 8443, token: {}}",
                "missing field `clusterRole`",
            ),
        ] {
            let e = parse(&MINIMAL.replace("metrics: {port: 8080}", bad))
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{bad}: {e}");
        }
    }

    #[test]
    fn an_operator_without_timing_flags_states_its_fixed_timings() {
        let lease = "  lease: [--elect=lease, '--lease={leaseDuration}', '--renew={renewDeadline}', '--retry={retryPeriod}']";
        let with = |spec: &str| parse(&MINIMAL.replace(lease, &format!("  lease: {spec}")));
        let subject = with("{timings: 15s/10s/2s, args: [--leader-elect]}").unwrap();
        let election = subject.election.lease.unwrap();
        assert_eq!(election.fixed, Some(LeaseTimings::CONTROLLER_RUNTIME));
        assert_eq!(election.args, ["--leader-elect"]);
        assert_eq!(
            with("{timings: 15s/10s/2s}")
                .unwrap()
                .election
                .lease
                .unwrap()
                .args,
            Vec::<String>::new()
        );
        for (bad, expected) in [
            (
                "{timings: 10s/10s/2s}",
                "election.lease.timings: 10s/10s/2s: client-go refuses them: the lease duration must be greater than the renew deadline",
            ),
            (
                "{timings: 15s/2s/2s}",
                "election.lease.timings: 15s/2s/2s: client-go refuses them: the renew deadline must be greater than the retry period times 1.2",
            ),
            ("{timings: 15s/10s}", "expected LEASE/RENEW/RETRY"),
            ("{timings: 15s/10s/2h}", "unknown unit \"h\""),
            (
                "{timings: 15s/10s/2s, args: ['--lease={leaseDuration}']}",
                "election.lease.args: placeholder {leaseDuration} in an argument: the timings are fixed",
            ),
            ("{timing: 15s/10s/2s}", "unknown field `timing`"),
            ("7", "a list of arguments with {leaseDuration}"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(expected), "{bad}: {e}");
        }
    }

    #[test]
    fn coordinated_leader_election_is_off_unless_the_lease_mode_says_so() {
        assert!(!parse(MINIMAL).unwrap().election.coordinated);
        let coordinated = MINIMAL.replace("election:\n", "election:\n  coordinated: true\n");
        assert!(parse(&coordinated).unwrap().election.coordinated);
        let for_life_only = coordinated.replace(
            "  lease: [--elect=lease, '--lease={leaseDuration}', '--renew={renewDeadline}', '--retry={retryPeriod}']",
            "  forLife: [--elect=for-life]",
        );
        let e = parse(&for_life_only).unwrap_err().to_string();
        assert!(
            e.contains("election.coordinated: expected `election.lease` too"),
            "{e}"
        );
    }

    #[test]
    fn election_modes_need_their_timings_and_no_other_placeholders() {
        let e = parse(&MINIMAL.replace("'--retry={retryPeriod}'", "--retry=1s"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("election.lease: expected an argument with {retryPeriod}"),
            "{e}"
        );
        let e = parse(&MINIMAL.replace("--retry={retryPeriod}", "--retry={retryPeriod}{jitter}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("election.lease: unknown placeholder {jitter}"),
            "{e}"
        );
        let e = parse(&MINIMAL.replace(
            "election:\n  lease:",
            "election:\n  forLife: ['--lease={leaseDuration}']\n  lease:",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("election.forLife: unknown placeholder {leaseDuration}"),
            "{e}"
        );
        let for_life_only = MINIMAL.replace(
            "  lease: [--elect=lease, '--lease={leaseDuration}', '--renew={renewDeadline}', '--retry={retryPeriod}']",
            "  forLife: [--elect=for-life]",
        );
        let subject = parse(&for_life_only).unwrap();
        assert_eq!(subject.election.lease, None);
        assert_eq!(
            subject.election.for_life.as_deref(),
            Some(&["--elect=for-life".to_string()][..])
        );
        let e = parse(&for_life_only.replace("  forLife: [--elect=for-life]\n", "  {}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("election: expected `lease`, `forLife` or both"),
            "{e}"
        );
    }

    #[test]
    fn a_file_that_cannot_be_read_is_named() {
        let e = Profile::read(Path::new("/nonexistent/profile.yaml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "cannot read the operator profile /nonexistent/profile.yaml"
        );
    }

    #[test]
    fn the_bundled_profile_is_the_memcached_operator_in_this_repository() {
        let subject = Profile::bundled().unwrap();
        let root = crate::subject::repository_root();
        assert_eq!(subject.name, "memcached-operator");
        assert!(
            matches!(&subject.manifests, ManifestSource::Dirs { config, .. } if *config == root.join("operator/config")),
            "{:?}",
            subject.manifests
        );
        assert_eq!(
            subject.binary.build,
            BinaryBuild::Cargo {
                workspace: root.clone(),
                package: "memcached-operator".into(),
                bin: "memcached-operator".into(),
                sources: ["operator/src", "operator/Cargo.toml", "Cargo.lock"]
                    .iter()
                    .map(|p| root.join(p))
                    .collect(),
            }
        );
    }
}
