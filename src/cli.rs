//! The `opconform` command line: `opconform sim` runs the simulated control plane in the
//! foreground so a person can use kubectl against it; `opconform profile` checks operator
//! profiles and prints their schema; `opconform init` writes a profile for a kubebuilder
//! or operator-sdk project.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, Subcommand};

/// Errors of the command line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The simulated cluster did not start.
    #[error("cannot start the simulated control plane")]
    Start(#[source] Box<crate::sim::ClusterError>),
    /// The kubeconfig could not be written.
    #[error("cannot write kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The audit log file could not be opened.
    #[error("cannot open the audit log")]
    Audit(#[source] crate::sim::apiserver::audit::AuditError),
    /// A fault request was malformed.
    #[error("{0}")]
    Usage(String),
    /// An operator profile could not be read.
    #[error(transparent)]
    Profile(crate::profile::ProfileError),
    /// Scenarios of `opconform test` failed.
    #[error("{failed} of {total} scenarios failed")]
    Failed {
        /// How many failed.
        failed: usize,
        /// How many ran.
        total: usize,
    },
    /// A conformance run failed.
    #[error("the conformance run failed")]
    Conformance(#[source] Box<crate::conformance::ConformanceError>),
    /// The kubeconfig could not be read or used.
    #[error("cannot use kubeconfig {path}")]
    Client {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The simulated cluster refused or failed the fault.
    #[error("the fault was not applied")]
    Fault(#[source] kube::Error),
    /// Waiting for a signal failed.
    #[error("cannot wait for ctrl-c")]
    Signal(#[source] std::io::Error),
    /// A benchmark failed or was interrupted.
    #[error("the benchmark failed")]
    Bench(#[source] Box<crate::bench::BenchError>),
    /// The real control plane did not start.
    #[error("cannot start the real control plane")]
    Local(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `opconform init` could not read the project or write its files.
    #[error(transparent)]
    Init(crate::init::InitError),
    /// The local provider's options (`--kubernetes`, `--feature-gates`) cannot be used.
    #[error(transparent)]
    LocalOption(#[from] LocalOptionError),
}

/// Errors of the local provider's options: the Kubernetes version and feature gates of its
/// control plane.
#[derive(Debug, thiserror::Error)]
pub enum LocalOptionError {
    /// An option of the local provider given with another provider.
    #[error(
        "{option} chooses the {what} of the local provider's control plane: the {provider} \
         provider cannot; expected --provider local, or no {option}"
    )]
    NotLocal {
        /// The option.
        option: &'static str,
        /// What it chooses.
        what: &'static str,
        /// The provider given.
        provider: String,
    },
    /// A version or feature-gate list that cannot be read.
    #[error("{option} {given:?}")]
    Invalid {
        /// The option.
        option: &'static str,
        /// Its value.
        given: String,
        /// What is wrong with it.
        #[source]
        source: crate::cluster::local::VersionError,
    },
    /// A profile that elects through coordinated leader election, on a provider that cannot
    /// set kube-apiserver's feature gates.
    #[error(
        "the profile of {subject} sets election.coordinated, which needs kube-apiserver's \
         CoordinatedLeaderElection feature gate: the {provider} provider cannot set feature \
         gates; expected --provider local"
    )]
    CoordinatedNeedsGates {
        /// The operator.
        subject: String,
        /// The provider given.
        provider: String,
    },
    /// A profile that elects through coordinated leader election, with the gate turned off.
    #[error(
        "the profile of {subject} sets election.coordinated, and --feature-gates turns \
         CoordinatedLeaderElection off: expected it on, or left out (the profile turns it on)"
    )]
    CoordinatedTurnedOff {
        /// The operator.
        subject: String,
    },
}

/// What a run on `provider` starts the local control plane with: the `--kubernetes` version
/// (`None`: not chosen) and the `--feature-gates`, with `CoordinatedLeaderElection` on when
/// `coordinated` names the operator under test, whose profile elects through it; `None` on
/// other providers, which refuse these options and such an operator.
///
/// # Errors
/// [`LocalOptionError`]: an option given with a provider other than local, an unknown
/// version, gates that cannot be read, a coordinated profile on a provider that cannot set
/// gates, or with the gate turned off.
pub fn local_options(
    provider: crate::cluster::ProviderKind,
    kubernetes: Option<&str>,
    feature_gates: Option<&str>,
    coordinated: Option<&str>,
) -> Result<Option<crate::cluster::local::LocalOptions>, LocalOptionError> {
    use crate::cluster::local::{KubernetesVersion, LocalOptions, versions};
    if provider != crate::cluster::ProviderKind::Local {
        for (option, given, what) in [
            ("--kubernetes", kubernetes, "Kubernetes version"),
            ("--feature-gates", feature_gates, "feature gates"),
        ] {
            if given.is_some() {
                return Err(LocalOptionError::NotLocal {
                    option,
                    what,
                    provider: provider.name().to_string(),
                });
            }
        }
        if let Some(subject) = coordinated {
            return Err(LocalOptionError::CoordinatedNeedsGates {
                subject: subject.to_string(),
                provider: provider.name().to_string(),
            });
        }
        return Ok(None);
    }
    let kubernetes = kubernetes
        .map(|given| {
            KubernetesVersion::resolve(given).map_err(|e| invalid("--kubernetes", given, e))
        })
        .transpose()?;
    let mut feature_gates = feature_gates
        .map(|given| {
            versions::parse_feature_gates(given).map_err(|e| invalid("--feature-gates", given, e))
        })
        .transpose()?
        .unwrap_or_default();
    if let Some(subject) = coordinated {
        let gate = versions::COORDINATED_LEADER_ELECTION.to_string();
        if feature_gates.insert(gate, true) == Some(false) {
            return Err(LocalOptionError::CoordinatedTurnedOff {
                subject: subject.to_string(),
            });
        }
    }
    Ok(Some(LocalOptions {
        kubernetes,
        feature_gates,
    }))
}

/// End-to-end conformance harness for Kubernetes operators.
#[derive(Debug, Parser)]
#[command(name = "opconform", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the simulated control plane in the foreground until interrupted.
    Sim(SimArgs),
    /// Run a real control plane (etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler) as local processes in the foreground until interrupted.
    Local(LocalArgs),
    /// Inject or undo a fault in a running `opconform sim`.
    Fault(FaultArgs),
    /// Measure handoff times, API load and memory of the bundled operator (`--standby
    /// watch`) beside the real anchors: controller-runtime's and operator-lib's election
    /// (subjects/go-election).
    Bench(BenchArgs),
    /// Operator profiles: print the JSON Schema of the format, or check a profile.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Run features against an operator: the shipped ones (lease, for-life, reconcile,
    /// finalizers, …) or your own feature files, with opconform's steps, and write the
    /// reports (index.html, timelines, suite.json; JUnit on request). Exits 0 when every
    /// scenario held, 1 when one failed or the run could not be made.
    Test(TestArgs),
    /// Run the leadership features against several operators (one profile each) and
    /// write the table of what each scenario found for each: held, broken (with the
    /// checker's verdict) or not applicable.
    Conformance(ConformanceArgs),
    /// Write an operator profile and a starter feature for a kubebuilder or operator-sdk
    /// (Go) project, from its PROJECT file, config/ and cmd/main.go, and say what it could
    /// not infer.
    Init(InitArgs),
}

/// Arguments of `opconform init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The project's directory (holding its PROJECT file).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// The profile to write [default: DIR/opconform/profile.yaml].
    #[arg(long, value_name = "PROFILE_PATH")]
    pub out: Option<PathBuf>,
    /// The directory of the starter feature [default: DIR/opconform/features].
    #[arg(long, value_name = "DIR")]
    pub features: Option<PathBuf>,
    /// Overwrite the profile and the feature if they exist.
    #[arg(long)]
    pub force: bool,
}

/// Arguments of `opconform test`.
#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Feature files, directories of them, or shipped features by name: lease, for-life,
    /// reconcile, finalizers, any-kind, detection, simulated-control-plane [default: every shipped
    /// feature].
    pub features: Vec<String>,
    /// The operator under test: its profile (YAML) [default: the bundled memcached
    /// operator].
    #[arg(long, value_name = "PROFILE")]
    pub operator: Option<PathBuf>,
    /// Where the scenarios run: sim (the embedded simulated control plane), local (a real
    /// control plane from binaries), kubeconfig (the cluster KUBECONFIG names) or kind.
    #[arg(long, default_value = "sim", value_parser = ["sim", "local", "kubeconfig", "kind"])]
    pub provider: String,
    /// Only the scenarios this cucumber tag expression selects (e.g. "@lease and not
    /// @timing").
    #[arg(long, value_name = "EXPR")]
    pub tags: Option<String>,
    /// Only the scenarios whose name this regular expression matches.
    #[arg(long, value_name = "REGEX", conflicts_with = "tags")]
    pub name: Option<String>,
    /// Where the reports go [default: opconform/reports in the current directory (in
    /// opconform's own repository: target/opconform, or under $CARGO_TARGET_DIR); local and
    /// kind in a folder of their own].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also write a JUnit XML report here.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Run each scenario N times, each run in its own cluster, named "… (run i of N)".
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub runs: u16,
    /// With --provider local: the Kubernetes version of the control plane, a minor (1.37:
    /// its known patch) or a full version (v1.37.2) of those ci/kubernetes/versions.env
    /// lists, built into the cache when missing [default: the pinned one].
    #[arg(long, value_name = "VERSION")]
    pub kubernetes: Option<String>,
    /// With --provider local: feature gates of kube-apiserver, kube-controller-manager and
    /// kube-scheduler, Name=true|false,… (CoordinatedLeaderElection=true also serves its
    /// LeaseCandidate API).
    #[arg(long, value_name = "GATES")]
    pub feature_gates: Option<String>,
}

/// Arguments of `opconform conformance`.
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// The profiles, one column each [default: every profile.yaml and *.profile.yaml in
    /// the folders of profiles/ and subjects/ of the repository].
    pub profiles: Vec<PathBuf>,
    /// Where the scenarios run: sim, local or kind (one kind cluster for every profile,
    /// created and deleted by the command unless OPCONFORM_KIND_CLUSTER names one; each
    /// profile's image is loaded into it: OPCONFORM_IMAGE, else the local Docker engine's
    /// image of the name its manifests give, else built from its binary on
    /// OPCONFORM_KIND_BASE_IMAGE).
    #[arg(long, default_value = "sim", value_parser = ["sim", "local", "kind"])]
    pub provider: String,
    /// The scenarios to run (a cucumber tag expression).
    #[arg(long, default_value = "@lease or @for-life")]
    pub tags: String,
    /// Where the table and every run's reports go [default: target/opconform/conformance/<provider>, or under $CARGO_TARGET_DIR].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run each scenario N times per profile: a cell says held k of N, with the min /
    /// median / max of its failover figures.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub runs: u16,
    /// With --provider local: the Kubernetes versions to run the table on, one after
    /// another, comma-separated (1.34,1.37; a minor names its known patch): a column per
    /// profile and version [default: the pinned one, columns without a version].
    #[arg(long, value_name = "VERSIONS")]
    pub kubernetes: Option<String>,
    /// With --provider local: feature gates of the control plane, Name=true|false,… (as
    /// for opconform test).
    #[arg(long, value_name = "GATES")]
    pub feature_gates: Option<String>,
}

/// `opconform profile …`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print the JSON Schema of operator profiles (profiles/profile.schema.json).
    Schema,
    /// Read a profile and print the operator it describes, or what is wrong with it.
    Check {
        /// The profile (YAML).
        path: PathBuf,
    },
}

/// Arguments of `opconform local`.
#[derive(Debug, clap::Args)]
pub struct LocalArgs {
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = "local.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// The directory holding etcd, kube-apiserver and, when present,
    /// kube-controller-manager and kube-scheduler [default: $KUBEBUILDER_ASSETS, else the
    /// cache ci/kubernetes/build.sh fills].
    #[arg(long)]
    pub binaries: Option<PathBuf>,
    /// The Kubernetes version: a minor (1.37) or full version (v1.37.2) of those
    /// ci/kubernetes/versions.env lists, built into the cache when missing [default: the
    /// pinned one].
    #[arg(long, value_name = "VERSION", conflicts_with = "binaries")]
    pub kubernetes: Option<String>,
    /// Feature gates of kube-apiserver, kube-controller-manager and kube-scheduler,
    /// Name=true|false,… (CoordinatedLeaderElection=true also serves its LeaseCandidate
    /// API).
    #[arg(long, value_name = "GATES")]
    pub feature_gates: Option<String>,
}

/// Arguments of `opconform bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Runs per row and behaviour (and memory samples, and cluster starts); the pod start
    /// rows start 30 pods once, whatever the runs.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Also write the report, with every sample, as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Where the table, the JSON and the SVG chart go [default: target/opconform/bench, or under $CARGO_TARGET_DIR].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only these rows (several after one --only, or --only repeated).
    #[arg(long, value_enum, num_args = 1..)]
    pub only: Vec<crate::bench::RowGroup>,
    /// Memcached objects the leader reconciles before the API and memory window.
    #[arg(long, default_value_t = 100)]
    pub objects: usize,
    /// Length of the API and memory window: 500ms, 5s, 2m.
    #[arg(long, default_value = "60s", value_parser = parse_window)]
    pub window: std::time::Duration,
    /// The feature suite's timing file [default: target/opconform/suite.json, or under $CARGO_TARGET_DIR].
    #[arg(long)]
    pub suite: Option<PathBuf>,
    /// The feature suite's timing file on the local provider [default: local/suite.json beside --suite's default].
    #[arg(long)]
    pub local_suite: Option<PathBuf>,
    /// The feature suite's timing file on the kind provider [default: kind/suite.json beside --suite's default].
    #[arg(long)]
    pub kind_suite: Option<PathBuf>,
    /// The start times of the last kind cluster the harness created [default: kind/cluster.json beside --suite's default].
    #[arg(long)]
    pub kind_cluster: Option<PathBuf>,
}

fn parse_window(s: &str) -> Result<std::time::Duration, String> {
    crate::subject::parse_duration(s)
}

/// Arguments of `opconform fault`.
#[derive(Debug, clap::Args)]
pub struct FaultArgs {
    /// The kubeconfig `opconform sim` wrote (default: $KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// The fault.
    #[command(subcommand)]
    pub fault: FaultCommand,
}

/// Which requests an API rule matches (every flag given must match).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MatchArgs {
    /// Verbs (get, list, watch, create, update, patch, delete, deletecollection); repeatable.
    #[arg(long = "verb")]
    pub verbs: Vec<String>,
    /// API group ("" for core).
    #[arg(long)]
    pub group: Option<String>,
    /// Plural resource, e.g. deployments.
    #[arg(long)]
    pub resource: Option<String>,
    /// Subresource, e.g. status.
    #[arg(long)]
    pub subresource: Option<String>,
    /// Namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Object name.
    #[arg(long)]
    pub name: Option<String>,
    /// Requests from this pod only (NAMESPACE/NAME).
    #[arg(long)]
    pub pod: Option<String>,
    /// Requests of this user only.
    #[arg(long)]
    pub user: Option<String>,
}

/// A fault and its undo.
#[derive(Debug, Subcommand)]
pub enum FaultCommand {
    /// Show the API rules in force and the fault log.
    List,
    /// Answer matching API requests with an error status instead of serving them.
    Reject {
        /// Which requests.
        #[command(flatten)]
        matches: MatchArgs,
        /// HTTP status code (400-599).
        #[arg(long, default_value_t = 500)]
        code: u16,
        /// Status reason.
        #[arg(long, default_value = "InternalError")]
        reason: String,
        /// Status message.
        #[arg(long, default_value = "rejected by an opconform fault rule")]
        message: String,
    },
    /// Add latency to matching API requests.
    Slow {
        /// Which requests.
        #[command(flatten)]
        matches: MatchArgs,
        /// Added latency in milliseconds.
        #[arg(long)]
        millis: u64,
    },
    /// Remove an API rule (undoes reject and slow).
    Allow {
        /// The rule id printed by reject or slow.
        id: u64,
    },
    /// A fault on one pod.
    Pod {
        /// NAMESPACE/NAME.
        pod: String,
        /// crash | evict | hold | release | partition | repair | delay | skew.
        verb: String,
        /// partition: drop (errors) | hang (timeouts) | hang-responses (one way).
        #[arg(long, default_value = "drop")]
        cut: String,
        /// delay: milliseconds.
        #[arg(long, default_value_t = 0)]
        millis: u64,
        /// skew: clock offset in seconds.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        seconds: i64,
        /// crash: one container only.
        #[arg(long)]
        container: Option<String>,
        /// evict: the pod's status message.
        #[arg(long, default_value = crate::sim::faults::LOW_ON_MEMORY)]
        message: String,
    },
    /// A fault on one node (its kubelet and every pod on it).
    Node {
        /// Node name.
        node: String,
        /// hold | hold-kubelet (the kubelet alone; its pods run on) | release | partition | repair.
        verb: String,
        /// partition: drop | hang | hang-responses.
        #[arg(long, default_value = "drop")]
        cut: String,
    },
}

/// Arguments of `opconform sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = "opconform-sim.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Also write the audit log as JSON lines to this file.
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// Cluster name (kubeconfig cluster and context name).
    #[arg(long, default_value = "opconform")]
    pub name: String,
    /// Number of worker nodes (0 runs the API server alone).
    #[arg(long, default_value_t = 3)]
    pub nodes: u8,
    /// Run an image as a local executable: NAME=PATH (repeatable), e.g.
    /// memcached-operator:dev=target/debug/memcached-operator; a PATH that is a directory is
    /// the image's filesystem, in which a container's command is found on its PATH, e.g.
    /// busybox:1.36=/srv/busybox-rootfs; an OCI layout or a docker save archive is
    /// unpacked. Other images come from the local Docker engine when it has them (pods as
    /// containers), else from a --registry, else are stand-ins.
    #[arg(long = "image", value_name = "NAME=PATH")]
    pub images: Vec<crate::sim::kubelet::ImageMapping>,
    /// The entrypoint of an image mapped to a directory, run when a container has no
    /// command: NAME=JSON array (repeatable), e.g. busybox:1.36='["sh", "-c"]'.
    #[arg(long = "image-entrypoint", value_name = "NAME=ARRAY")]
    pub entrypoints: Vec<crate::sim::kubelet::ImageArgv>,
    /// The cmd of an image mapped to a directory, run when a container has no args:
    /// NAME=JSON array (repeatable), e.g. busybox:1.36='["sh"]'.
    #[arg(long = "image-cmd", value_name = "NAME=ARRAY")]
    pub cmds: Vec<crate::sim::kubelet::ImageArgv>,
    /// Pull the images of this registry that no --image maps: HOST[:PORT] (repeatable), as
    /// an image names it (docker.io for Docker Hub), e.g. 127.0.0.1:5000; as its
    /// imagePullPolicy says, with the pod's imagePullSecrets; a loopback registry over plain
    /// HTTP. Images of other registries stay stand-ins, but for those the local Docker
    /// engine has. An image the engine has is present for IfNotPresent and Never; Always
    /// pulls it from here.
    #[arg(long = "registry", value_name = "HOST[:PORT]")]
    pub registries: Vec<String>,
    /// Short controller periods (node grace 3 s, heartbeats 500 ms) instead of the real ones.
    #[arg(long)]
    pub fast: bool,
}

/// Runs the command line.
///
/// # Errors
/// Start-up failures, with their cause.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Sim(args) => sim(args).await,
        Command::Local(args) => local(args).await,
        Command::Fault(args) => fault(args).await,
        Command::Bench(args) => bench(args).await,
        Command::Profile(command) => profile(command),
        Command::Test(args) => test(args).await,
        Command::Conformance(args) => conformance(args).await,
        Command::Init(args) => init(args),
    }
}

fn init(args: InitArgs) -> Result<(), CliError> {
    let outcome = crate::init::run(&crate::init::Options {
        dir: args.dir,
        out: args.out,
        features: args.features,
        force: args.force,
    })
    .map_err(CliError::Init)?;
    println!("wrote {}", outcome.profile.display());
    println!("wrote {}", outcome.feature.display());
    if outcome.gaps.is_empty() {
        println!("\nevery key was read from the project; check the comments above each");
    } else {
        println!("\nnot inferred, to fill in or check:");
        for gap in &outcome.gaps {
            println!("  {}: {}", gap.key, gap.why);
        }
    }
    if let Some(problem) = &outcome.check {
        println!("\nthe profile is not complete yet: {problem}");
    }
    println!(
        "\nnext:\n  opconform profile check {}\n  opconform test --operator {} {}",
        outcome.profile.display(),
        outcome.profile.display(),
        outcome
            .feature
            .parent()
            .unwrap_or(&outcome.feature)
            .display()
    );
    Ok(())
}

async fn test(args: TestArgs) -> Result<(), CliError> {
    use crate::steps::{Selection, Suite};
    let features = crate::features::gather(&args.features)
        .map_err(|e| CliError::Usage(crate::error_chain(&e)))?;
    features
        .check()
        .map_err(|e| CliError::Usage(crate::error_chain(&e)))?;
    let features = features.runs(usize::from(args.runs));
    let provider = crate::cluster::ProviderKind::parse(Some(&args.provider))
        .map_err(|e| CliError::Usage(crate::error_chain(&e)))?;
    let subject = match &args.operator {
        Some(path) => crate::profile::Profile::read(path),
        None => crate::profile::Profile::bundled(),
    }
    .map_err(CliError::Profile)?;
    let tags = args
        .tags
        .as_deref()
        .map(|expr| {
            expr.parse().map_err(|e| {
                CliError::Usage(format!(
                    "--tags {expr:?}: not a tag expression ({e}): expected e.g. \"@lease and not @timing\""
                ))
            })
        })
        .transpose()?;
    let name = args
        .name
        .as_deref()
        .map(|re| {
            regex::Regex::new(re).map_err(|e| {
                CliError::Usage(format!("--name {re:?}: not a regular expression: {e}"))
            })
        })
        .transpose()?;
    let suite = Suite {
        subject,
        provider,
        kubeconfig: crate::cluster::KubeconfigOptions::from_env(),
        reports: args
            .out
            .clone()
            .unwrap_or_else(|| Suite::default_reports(provider)),
    };
    let local = local_options(
        provider,
        args.kubernetes.as_deref(),
        args.feature_gates.as_deref(),
        suite
            .subject
            .election
            .coordinated
            .then_some(suite.subject.name.as_str()),
    )?;
    if let Some(local) = &local {
        crate::cluster::local::versions::choose(local.clone());
    }
    if let Some(line) = provider.pods_as_processes_warning() {
        eprintln!("opconform: {line}");
    }
    eprintln!(
        "opconform: {} feature file(s) against {} on {}{}; reports in {}",
        features.len(),
        suite.subject.name,
        provider.name(),
        local.as_ref().map_or_else(String::new, describe_local),
        suite.reports.display()
    );
    let selection = Selection {
        name,
        tags,
        reports: crate::steps::RunOptions {
            junit: args.junit,
            json: None,
        },
    };
    let outcome = crate::steps::run_suite(features, suite, Some(selection)).await;
    if outcome.failed {
        return Err(CliError::Failed {
            failed: outcome
                .scenarios
                .iter()
                .filter(|s| s.failure.is_some())
                .count(),
            total: outcome.scenarios.len(),
        });
    }
    Ok(())
}

/// The error of `option`'s value `given`.
fn invalid(
    option: &'static str,
    given: &str,
    source: crate::cluster::local::VersionError,
) -> LocalOptionError {
    LocalOptionError::Invalid {
        option,
        given: given.to_string(),
        source,
    }
}

/// ` (Kubernetes v1.37.2, feature gates CoordinatedLeaderElection=true)`.
fn describe_local(local: &crate::cluster::local::LocalOptions) -> String {
    let gates = if local.feature_gates.is_empty() {
        String::new()
    } else {
        format!(
            ", feature gates {}",
            crate::cluster::local::versions::feature_gates_arg(&local.feature_gates)
        )
    };
    format!(" (Kubernetes {}{gates})", local.version())
}

/// The versions and gates of `opconform conformance --provider local`, refused with other
/// providers.
fn conformance_local(
    provider: &str,
    kubernetes: Option<&str>,
    feature_gates: Option<&str>,
) -> Result<Vec<crate::cluster::local::KubernetesVersion>, LocalOptionError> {
    use crate::cluster::local::{KubernetesVersion, versions};
    if provider != "local" {
        for (option, given, what) in [
            ("--kubernetes", kubernetes, "Kubernetes versions"),
            ("--feature-gates", feature_gates, "feature gates"),
        ] {
            if given.is_some() {
                return Err(LocalOptionError::NotLocal {
                    option,
                    what,
                    provider: provider.to_string(),
                });
            }
        }
    }
    if let Some(given) = feature_gates {
        versions::parse_feature_gates(given).map_err(|e| invalid("--feature-gates", given, e))?;
    }
    kubernetes
        .map(|given| {
            KubernetesVersion::resolve_list(given).map_err(|e| invalid("--kubernetes", given, e))
        })
        .transpose()
        .map(Option::unwrap_or_default)
}

async fn conformance(args: ConformanceArgs) -> Result<(), CliError> {
    let kubernetes = conformance_local(
        &args.provider,
        args.kubernetes.as_deref(),
        args.feature_gates.as_deref(),
    )?;
    let profiles = if args.profiles.is_empty() {
        let root = crate::subject::repository_root();
        let shipped = crate::conformance::shipped_profiles(&root);
        if shipped.is_empty() {
            return Err(CliError::Usage(format!(
                "no profile named, and the shipped ones are not in {} (the repository this \
                 opconform was built from): expected the profiles to compare, e.g. opconform \
                 conformance opconform/profile.yaml",
                root.display()
            )));
        }
        shipped
    } else {
        args.profiles
    };
    let options = crate::conformance::Options {
        out: args.out.unwrap_or_else(|| {
            crate::report::reports_root()
                .join("conformance")
                .join(&args.provider)
        }),
        provider: args.provider,
        profiles,
        tags: args.tags,
        runs: usize::from(args.runs),
        kubernetes,
        feature_gates: args.feature_gates,
    };
    let table = crate::conformance::run(&options)
        .await
        .map_err(|e| CliError::Conformance(Box::new(e)))?;
    print!("{}", table.markdown());
    eprintln!(
        "conformance: the table is in {} (also conformance.md and conformance.json)",
        options.out.join("index.html").display()
    );
    Ok(())
}

fn profile(command: ProfileCommand) -> Result<(), CliError> {
    use crate::profile::Profile;
    match command {
        ProfileCommand::Schema => print!("{}", Profile::schema()),
        ProfileCommand::Check { path } => {
            let subject = Profile::read(&path).map_err(CliError::Profile)?;
            println!(
                "{}: operator {} (Deployment {}/{}, pods {}, lock {} {}/{}, metrics at {}://POD:{}{}{}, image {}, {})",
                path.display(),
                subject.name,
                subject.namespace,
                subject.deployment,
                subject.pod_selector,
                subject.lock.kind.as_str(),
                subject.lock.namespace,
                subject.lock.name,
                if subject.metrics.https {
                    "https"
                } else {
                    "http"
                },
                subject.metrics.port,
                subject.metrics.path,
                match &subject.metrics.token_cluster_role {
                    Some(role) => format!(" with a token bound to {role}"),
                    None => String::new(),
                },
                subject.image,
                match &subject.watch_namespace {
                    Some(crate::subject::WatchNamespace::Flag(flag)) =>
                        format!("told its namespaces by {flag}"),
                    Some(crate::subject::WatchNamespace::Env(name)) =>
                        format!("told its namespaces by ${name}"),
                    None => "watches every namespace: one scenario at a time on a shared cluster"
                        .to_string(),
                },
            );
        }
    }
    Ok(())
}

fn cut(value: &str) -> Result<crate::sim::faults::Cut, CliError> {
    use crate::sim::faults::Cut;
    match value {
        "drop" => Ok(Cut::Drop),
        "hang" => Ok(Cut::Hang),
        "hang-responses" => Ok(Cut::HangResponses),
        other => Err(CliError::Usage(format!(
            "unknown --cut {other:?}: expected drop, hang or hang-responses"
        ))),
    }
}

fn request_match(m: MatchArgs) -> crate::sim::faults::RequestMatch {
    crate::sim::faults::RequestMatch {
        verbs: m.verbs,
        group: m.group,
        resource: m.resource,
        subresource: m.subresource,
        namespace: m.namespace,
        name: m.name,
        pod: m.pod,
        user: m.user,
    }
}

/// The request `opconform fault` sends: method, path below the control prefix, body.
///
/// # Errors
/// [`CliError::Usage`] for unknown verbs or malformed pod names.
pub fn fault_request(
    command: FaultCommand,
) -> Result<(http::Method, String, serde_json::Value), CliError> {
    use crate::sim::apiserver::control::PREFIX;
    use crate::sim::faults::{HoldScope, NodeFault, PodFault, RuleAction};
    use serde_json::json;
    Ok(match command {
        FaultCommand::List => (http::Method::GET, PREFIX.to_string(), json!(null)),
        FaultCommand::Reject {
            matches,
            code,
            reason,
            message,
        } => (
            http::Method::POST,
            format!("{PREFIX}/rules"),
            json!({"match": request_match(matches), "action": RuleAction::Reject { code, reason, message }}),
        ),
        FaultCommand::Slow { matches, millis } => (
            http::Method::POST,
            format!("{PREFIX}/rules"),
            json!({"match": request_match(matches), "action": RuleAction::Delay { millis }}),
        ),
        FaultCommand::Allow { id } => (
            http::Method::DELETE,
            format!("{PREFIX}/rules/{id}"),
            json!(null),
        ),
        FaultCommand::Pod {
            pod,
            verb,
            cut: how,
            millis,
            seconds,
            container,
            message,
        } => {
            let (namespace, name) = pod
                .split_once('/')
                .ok_or_else(|| CliError::Usage(format!("pod {pod:?} must be NAMESPACE/NAME")))?;
            let fault = match verb.as_str() {
                "crash" => PodFault::Crash { container },
                "evict" => PodFault::Evict { message },
                "hold" => PodFault::Hold,
                "release" => PodFault::Release,
                "partition" => PodFault::Partition { cut: cut(&how)? },
                "repair" => PodFault::Repair,
                "delay" => PodFault::Delay { millis },
                "skew" => PodFault::Skew { seconds },
                other => {
                    return Err(CliError::Usage(format!(
                        "unknown pod fault {other:?}: expected crash, evict, hold, release, partition, repair, delay or skew"
                    )));
                }
            };
            (
                http::Method::POST,
                format!("{PREFIX}/pods/{namespace}/{name}"),
                json!(fault),
            )
        }
        FaultCommand::Node {
            node,
            verb,
            cut: how,
        } => {
            let fault = match verb.as_str() {
                "hold" => NodeFault::Hold {
                    scope: HoldScope::Node,
                },
                "hold-kubelet" => NodeFault::Hold {
                    scope: HoldScope::Kubelet,
                },
                "release" => NodeFault::Release,
                "partition" => NodeFault::Partition { cut: cut(&how)? },
                "repair" => NodeFault::Repair,
                other => {
                    return Err(CliError::Usage(format!(
                        "unknown node fault {other:?}: expected hold, hold-kubelet, release, \
                         partition or repair"
                    )));
                }
            };
            (
                http::Method::POST,
                format!("{PREFIX}/nodes/{node}"),
                json!(fault),
            )
        }
    })
}

async fn fault(args: FaultArgs) -> Result<(), CliError> {
    let client_error = |source: Box<dyn std::error::Error + Send + Sync>| CliError::Client {
        path: args.kubeconfig.clone(),
        source,
    };
    let yaml = std::fs::read_to_string(&args.kubeconfig).map_err(|e| client_error(Box::new(e)))?;
    let client = crate::sim::apiserver::client_for(&yaml)
        .await
        .map_err(|e| client_error(Box::new(e)))?;
    let (method, path, body) = fault_request(args.fault)?;
    let body = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap_or_default()
    };
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let answer = client
        .request_text(request)
        .await
        .map_err(CliError::Fault)?;
    println!("{answer}");
    Ok(())
}

async fn sim(args: SimArgs) -> Result<(), CliError> {
    use crate::sim::{SimCluster, SimClusterConfig};
    let begin = Instant::now();
    let mut config = if args.fast {
        SimClusterConfig::fast()
    } else {
        SimClusterConfig::default()
    };
    config.apiserver.name = args.name.clone();
    config.apiserver.port = args.port;
    config.nodes = args.nodes;
    config.images = args.images.iter().cloned().collect();
    config.registries.clone_from(&args.registries);
    if let Some(bad) = args
        .registries
        .iter()
        .find(|r| r.is_empty() || r.contains('/') || r.contains("://"))
    {
        return Err(CliError::Usage(format!(
            "--registry {bad:?}: expected a registry host, HOST[:PORT], as an image names it \
             (e.g. 127.0.0.1:5000 or docker.io)"
        )));
    }
    for mapping in &args.images {
        if !mapping.path.is_file() && !mapping.path.is_dir() {
            return Err(CliError::Usage(format!(
                "--image {}={}: no such executable or directory",
                mapping.image,
                mapping.path.display()
            )));
        }
    }
    let settings = args
        .entrypoints
        .iter()
        .map(|e| ("--image-entrypoint", e, true));
    for (flag, setting, entrypoint) in
        settings.chain(args.cmds.iter().map(|c| ("--image-cmd", c, false)))
    {
        let directory = config
            .images
            .get(&setting.image)
            .is_some_and(|p| p.is_dir());
        let argv = setting.argv.clone();
        let set = directory
            && config.images.configure(&setting.image, |c| {
                if entrypoint {
                    c.entrypoint = argv;
                } else {
                    c.cmd = argv;
                }
            });
        if !set {
            return Err(CliError::Usage(format!(
                "{flag} {}: no --image {}=DIRECTORY",
                setting.image, setting.image
            )));
        }
    }
    let cluster = SimCluster::start(config)
        .await
        .map_err(|e| CliError::Start(Box::new(e)))?;
    let server = cluster.server();
    if let Some(path) = &args.audit_log {
        server
            .state()
            .audit
            .write_to(path)
            .map_err(CliError::Audit)?;
    }
    // Written whole or not at all: whoever waits for the file never reads half of it.
    let partial = args.kubeconfig.with_extension("partial");
    std::fs::write(&partial, server.admin_kubeconfig())
        .and_then(|()| std::fs::rename(&partial, &args.kubeconfig))
        .map_err(|source| CliError::Kubeconfig {
            path: args.kubeconfig.clone(),
            source,
        })?;
    println!(
        "opconform sim: serving {} with {} node(s) ready (started in {} ms)",
        server.url(),
        args.nodes,
        begin.elapsed().as_millis()
    );
    println!(
        "kubeconfig: {}  (try: KUBECONFIG={} kubectl get nodes)",
        args.kubeconfig.display(),
        args.kubeconfig.display()
    );
    println!("press ctrl-c to stop");
    wait_for_interrupt().await?;
    cluster.shutdown().await;
    println!("opconform sim: stopped");
    Ok(())
}

async fn local(args: LocalArgs) -> Result<(), CliError> {
    use crate::cluster::local::{Binaries, ControlPlane, ControlPlaneConfig};
    let failed = |e: Box<dyn std::error::Error + Send + Sync>| CliError::Local(e);
    let local = local_options(
        crate::cluster::ProviderKind::Local,
        args.kubernetes.as_deref(),
        args.feature_gates.as_deref(),
        None,
    )?
    .unwrap_or_default();
    crate::cluster::local::versions::choose(local.clone());
    let binaries = match &args.binaries {
        Some(dir) => Binaries::in_dir(dir),
        None => Binaries::find(),
    }
    .map_err(|e| failed(e.into()))?;
    let mut config = ControlPlaneConfig::new(binaries);
    config.runtime_config =
        crate::cluster::local::versions::runtime_config(local.version(), &local.feature_gates);
    config.feature_gates = local.feature_gates.clone();
    let plane = ControlPlane::start(config)
        .await
        .map_err(|e| failed(e.into()))?;
    let partial = args.kubeconfig.with_extension("partial");
    std::fs::write(&partial, plane.admin_kubeconfig())
        .and_then(|()| std::fs::rename(&partial, &args.kubeconfig))
        .map_err(|source| CliError::Kubeconfig {
            path: args.kubeconfig.clone(),
            source,
        })?;
    println!(
        "opconform local: serving {}{} with {} (started in {} ms)",
        plane.url(),
        describe_local(&local),
        plane.components().join(", "),
        plane.started_in().as_millis()
    );
    println!("built-in controllers: {}", plane.controllers());
    println!("work directory: {}", plane.dir().display());
    println!(
        "kubeconfig: {}  (try: KUBECONFIG={} kubectl get namespaces)",
        args.kubeconfig.display(),
        args.kubeconfig.display()
    );
    println!("press ctrl-c to stop");
    wait_for_interrupt().await?;
    plane.shutdown().await;
    println!("opconform local: stopped");
    Ok(())
}

async fn bench(args: BenchArgs) -> Result<(), CliError> {
    use crate::bench::{
        BenchError, Options, default_kind_suite_file, default_local_suite_file, default_out_dir,
        default_suite_file, run,
    };
    let failed = |e: BenchError| CliError::Bench(Box::new(e));
    let (interrupt, interrupted) = tokio::sync::watch::channel(false);
    let options = Options {
        runs: args.runs as usize,
        only: args.only,
        objects: args.objects,
        window: args.window,
        suite_file: args.suite.unwrap_or_else(default_suite_file),
        local_suite_file: args.local_suite.unwrap_or_else(default_local_suite_file),
        kind_suite_file: args.kind_suite.unwrap_or_else(default_kind_suite_file),
        kind_cluster_file: args
            .kind_cluster
            .unwrap_or_else(crate::cluster::kind::cluster_start_file),
        progress: true,
        interrupt: Some(interrupted),
        subject: crate::subject::Subject::memcached(),
    };
    // On ctrl-c or SIGTERM the run is told to stop; it shuts its clusters down (killing
    // every pod process it started) before it returns.
    let measuring = run(&options);
    tokio::pin!(measuring);
    let report = tokio::select! {
        report = &mut measuring => report,
        signal = wait_for_interrupt() => {
            signal?;
            eprintln!("bench: interrupted; stopping the simulated clusters");
            let _ = interrupt.send(true);
            measuring.await
        }
    }
    .map_err(failed)?;
    let out = args.out.unwrap_or_else(default_out_dir);
    let written = report.write(&out, args.json.as_deref()).map_err(failed)?;
    print!("{}", report.table());
    for path in written {
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(())
}

async fn wait_for_interrupt() -> Result<(), CliError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(CliError::Signal)?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.map_err(CliError::Signal),
        _ = term.recv() => Ok(()),
    }
}
