//! `opconform bench`: the bundled operator's failover times, API load and memory, measured
//! side by side with the real anchors — the election libraries operator authors use
//! today, deployed as subjects with their own profiles and flags — on the embedded control
//! plane, plus the simulated cluster's start time, its pods' start time and memory as
//! containers and as host processes, and the feature suite's wall time.
//!
//! # Who is measured
//! - **ours**: the bundled memcached operator ([`Options::subject`]) with
//!   `--standby watch` (its standbys watch the lock);
//! - **anchor** of the lease rows and of the API and memory rows: controller-runtime's
//!   manager election ([`LEASE_ANCHOR`], client-go's `LeaderElector` on a Lease), with its
//!   profile's `--release-on-cancel` (`LeaderElectionReleaseOnCancel`) in the lease rows;
//! - **anchor** of the for-life row: operator-lib's `leader.Become` ([`FOR_LIFE_ANCHOR`]);
//! - **peers** in the API and memory rows: the election crates of the kube-rs ecosystem
//!   ([`PEER_SUBJECTS`], named with the versions `Cargo.lock` pins, [`PEER_VERSIONS`]),
//!   their work quiet as the anchor's;
//! - in the pod start rows, **ours** is the simulator's pods as containers of the OCI
//!   runtime its kubelets find (crun, else runc) and the **anchor** the same pods as host
//!   processes (the kubelets' process path).
//!
//! Both anchors are the Go program in `subjects/go-election` (built by `go build` when
//! missing or stale; `OPCONFORM_GO_ELECTION_BIN` names a prebuilt one), named in the table
//! by profile name and the version `go.mod` pins ([`ANCHOR_VERSIONS`]). Each side gets its
//! election flags from its own profile, with the same timings. The anchor's leader writes
//! a ConfigMap every 500 ms as its work; during the API and memory window it runs with
//! [`ANCHOR_QUIET_WORK`] (`--work-interval=3600s`) so that only its election traffic is
//! counted, and it reconciles no Memcached (it serves none), while ours reconciles them.
//!
//! # How each row is measured
//! Every time comes from the API server's audit (when it received the request), never
//! from the harness's sleeps or the operator's own claims:
//! - **lease handoff after graceful release**: from the graceful delete of the leader's
//!   pod (the kubelet sends SIGTERM; the leader runs with `--release-on-cancel`) to the
//!   first successful write of the Lease by another pod (its acquisition);
//! - **lease takeover after kill**: the leader's pod is deleted with grace 0 (SIGKILL, no
//!   release); from that delete, and from the lease's expiry as observable (the leader's
//!   last successful write of the Lease + LeaseDuration), to the acquisition;
//! - **for-life takeover**: from the garbage collector's delete of the lock ConfigMap
//!   (after a graceful delete of the leader's pod) to another pod's create of the lock;
//! - **API requests per minute**: every request each replica sent during a window, in
//!   lease mode with controller-runtime's default timings (15 s / 10 s / 2 s), after the
//!   leader reconciled the Memcached objects;
//! - **RSS**: VmRSS of the leader's and the standby's process, sampled during that window;
//! - **cluster start**: a fresh simulated cluster (3 nodes) to the first request it served
//!   and to all nodes Ready; beside it, a real control plane (etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler, from [`crate::cluster::local::Binaries`])
//!   to every component ready, at most [`REAL_STARTS`] times;
//! - **pod start**: 30 busybox pods (`sh -c "sleep 3600"`, an image directory made from
//!   the host's static busybox, Debian's `busybox-static`) created at once on a fresh
//!   3-node cluster, each from the audit of its create to the audit of its kubelet's status
//!   write that first reported it Running (which write that is comes from the store's event
//!   log, see `src/bench/pod_start.rs`); once with the pods as containers (absent, with
//!   why, where the harness is not root or has no runtime), once as host processes
//!   ([`crate::sim::SimClusterConfig::isolation`]); 30 pods once per run, whatever `--runs`.
//!   The goal: containers at most 300 ms at p50 and at most twice the process path;
//! - **RSS per idle pod**: a second after those pods are Running, the VmRSS of every process
//!   of the cluster's pods (a container's processes, not its runtime's) summed and divided
//!   by the pods; beside it, for containers, the VmRSS of the runtime's `run` process that
//!   stays in the foreground for each container, per pod;
//! - **feature suite**: read from the files the suite's runner writes on the simulator
//!   ([`default_suite_file`]) and on the `local` provider ([`default_local_suite_file`]),
//!   never re-run here.
//!
//! The handoff rows reuse one cluster and one Deployment (one replica) per election and
//! side. Before each run the leader is taken out of its ReplicaSet by
//! relabelling, so the ReplicaSet starts a replacement at once; the fault comes once the
//! replacement is Ready and has asked for the lock, at a random moment within the next
//! 1.2 s (so that it falls anywhere in a polling standby's cycle). Every fault thus finds
//! exactly one standby and no pod starting — in the simulator a pod starts in a fraction
//! of a second and would otherwise race the standby for a lock freed by the fault.
//!
//! # Caveats
//! - operator-lib's for-life standbys are young (about a second), so their backoff is
//!   still short (1 s, 2 s, 4 s, …); a standby that has waited a minute polls only every
//!   16–19.2 s. The anchor's for-life figures are a lower bound.
//! - client-go's standby times a lease from when it saw the record change, and compares
//!   records as JSON whose renew time has whole seconds: at the handoff rows' 0.5 s
//!   RetryPeriod two renewals in one second look alike to it, so it may take a killed
//!   leader's lease up to a second before the expiry the audit shows (a negative "from
//!   expiry" sample is that, measured, not an error).
//! - The manager's readiness probe is shortened (first at once, then every second) so
//!   that runs do not wait five seconds for each replacement; nothing measured depends
//!   on readiness.

mod audit_tap;
mod chart;
mod handoff;
mod pod_start;
mod stage;
pub mod stats;
mod steady;
mod table;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use pod_start::PodStartError;
pub use stage::{HANDOFF_TIMINGS, LeaseTimings};
pub use stats::Stats;

/// Errors of the benchmarks.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The operator binary could not be found or built.
    #[error("cannot find or build the operator binary")]
    Operator(#[source] crate::subject::SubjectError),
    /// A simulated cluster did not start.
    #[error("cannot start a simulated cluster")]
    Cluster(#[source] Box<crate::sim::ClusterError>),
    /// A real control plane did not start.
    #[error("cannot start a real control plane")]
    ControlPlane(#[source] Box<crate::cluster::local::ControlPlaneError>),
    /// No client could be built for a simulated cluster.
    #[error("cannot build a client for the simulated cluster")]
    Client(#[source] crate::sim::apiserver::ApiServerError),
    /// An anchor's profile could not be read.
    #[error("cannot read the anchor's profile")]
    Profile(#[source] Box<crate::profile::ProfileError>),
    /// The operator's manifests could not be read or applied.
    #[error("cannot deploy the operator")]
    Deploy(#[source] Box<crate::deploy::DeployError>),
    /// A request of the harness failed.
    #[error("{what} failed")]
    Api {
        /// What the harness was doing.
        what: String,
        /// The cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// Something awaited did not happen within its bound.
    #[error("timed out after {within:?} waiting for {what}; last seen: {last}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The bound.
        within: Duration,
        /// What was last observed.
        last: String,
    },
    /// A measurement saw something that makes it meaningless.
    #[error("{0}")]
    Unsound(String),
    /// An output file could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The pod start rows could not be prepared (no static busybox, say).
    #[error("cannot prepare the pod start rows")]
    PodStart(#[source] PodStartError),
    /// The run was interrupted (ctrl-c or SIGTERM).
    #[error("interrupted; every simulated cluster and pod process was stopped")]
    Interrupted,
}

/// Groups of rows, as `--only` names them (rows in a group are measured together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowGroup {
    /// Lease handoff after graceful release.
    LeaseRelease,
    /// Lease takeover after a kill, from the kill and from the expiry.
    LeaseKill,
    /// Leader-for-life takeover after the garbage collector deletes the lock.
    ForLife,
    /// API requests per minute of a standby and of the leader.
    Api,
    /// Resident memory of a standby and of the leader.
    Rss,
    /// Simulated cluster start.
    ClusterStart,
    /// Pod start and memory per idle pod, as containers and as host processes.
    PodStart,
    /// The feature suite's wall time (read from a file).
    Suite,
}

/// The versions of the anchors' election libraries, by profile name, as
/// `subjects/go-election/go.mod` pins them (update both together).
pub const ANCHOR_VERSIONS: [(&str, &str); 2] = [
    ("controller-runtime", "v0.22.5"),
    ("operator-lib", "v0.19.0"),
];

/// The lease rows' and the API and memory rows' anchor: controller-runtime's manager
/// election, relative to the repository root.
pub const LEASE_ANCHOR: &str = "subjects/go-election/controller-runtime.profile.yaml";

/// The for-life row's anchor: operator-lib's `leader.Become`, relative to the repository
/// root.
pub const FOR_LIFE_ANCHOR: &str = "subjects/go-election/operator-lib.profile.yaml";

/// What the anchors' leaders do instead of their work during the API and memory window:
/// write their work ConfigMap once an hour rather than every 500 ms, so that only
/// election traffic is counted.
pub const ANCHOR_QUIET_WORK: &str = "--work-interval=3600s";

/// The versions of the peers' election crates, by profile name, as `Cargo.lock` pins them.
pub const PEER_VERSIONS: [(&str, &str); 2] = [
    ("kube-leader-election", "0.44.0"),
    ("kube-lease-manager", "0.13.1"),
];

/// The other subjects whose API load and memory the API and memory rows put beside ours,
/// each with the ids of its four rows (standby and leader requests, standby and leader
/// RSS): the election crates of the kube-rs ecosystem, relative to the repository root.
/// Their leaders' work is off as the anchor's is ([`ANCHOR_QUIET_WORK`]).
pub const PEER_SUBJECTS: [(&str, [&str; 4]); 2] = [
    (
        "subjects/kube-leader-election/profile.yaml",
        [
            "api-standby-kube-leader-election",
            "api-leader-kube-leader-election",
            "rss-standby-kube-leader-election",
            "rss-leader-kube-leader-election",
        ],
    ),
    (
        "subjects/kube-lease-manager/profile.yaml",
        [
            "api-standby-kube-lease-manager",
            "api-leader-kube-lease-manager",
            "rss-standby-kube-lease-manager",
            "rss-leader-kube-lease-manager",
        ],
    ),
];

/// A subject's name for the table: the profile's name and, for an anchor in
/// [`ANCHOR_VERSIONS`] or a peer in [`PEER_VERSIONS`], its version
/// (`controller-runtime v0.22.5`, `kube-lease-manager 0.13.1`).
pub fn subject_label(name: &str) -> String {
    match ANCHOR_VERSIONS
        .iter()
        .chain(PEER_VERSIONS.iter())
        .find(|(n, _)| *n == name)
    {
        Some((_, version)) => format!("{name} {version}"),
        None => name.to_string(),
    }
}

/// One side of a row: a subject, its binary, and the flags it runs with beside those of
/// its election mode.
#[derive(Debug, Clone)]
pub struct Contender {
    /// The operator: manifests, namespace, lock, election flags.
    pub subject: crate::subject::Subject,
    /// Its binary for the simulator.
    pub binary: PathBuf,
    /// Flags after the election mode's: `--standby=watch` for ours.
    pub args: Vec<String>,
    /// `watch` for ours, the profile's name for an anchor (the JSON's `behaviour`).
    pub behaviour: String,
    /// The anchor's name in the table (`controller-runtime v0.22.5`); `None` for ours.
    pub label: Option<String>,
}

impl Contender {
    /// The bundled operator with `--standby watch`.
    pub fn ours(subject: crate::subject::Subject, binary: PathBuf) -> Self {
        Self {
            subject,
            binary,
            args: vec!["--standby=watch".into()],
            behaviour: "watch".into(),
            label: None,
        }
    }

    /// A subject as it is, with only its profile's flags.
    pub fn anchor(subject: crate::subject::Subject, binary: PathBuf) -> Self {
        Self {
            label: Some(subject_label(&subject.name)),
            behaviour: subject.name.clone(),
            subject,
            binary,
            args: Vec::new(),
        }
    }

    /// The same with `arg` added.
    #[must_use]
    pub fn with_arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    fn series(&self, samples: Vec<f64>, details: Vec<Detail>) -> Series {
        Series {
            subject: self.label.clone(),
            ..Series::measured(&self.behaviour, samples, details)
        }
    }
}

impl std::fmt::Display for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.label {
            Some(label) => f.write_str(label),
            None => write!(f, "ours ({})", self.behaviour),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Runs (or memory samples) per row and side.
    pub runs: usize,
    /// Only these groups (all when empty).
    pub only: Vec<RowGroup>,
    /// Memcached objects the leader reconciles before the API and memory window.
    pub objects: usize,
    /// Length of the API and memory window.
    pub window: Duration,
    /// Where the feature suite's runner wrote its wall time on the simulator.
    pub suite_file: PathBuf,
    /// Where it wrote its wall time on the `local` provider.
    pub local_suite_file: PathBuf,
    /// Where it wrote its wall time on the `kind` provider.
    pub kind_suite_file: PathBuf,
    /// Where the `kind` provider wrote how long its last cluster took to start.
    pub kind_cluster_file: PathBuf,
    /// Print a line per run on stderr.
    pub progress: bool,
    /// Stop early (with [`BenchError::Interrupted`]) once this becomes `true`; every
    /// cluster started is shut down first.
    pub interrupt: Option<tokio::sync::watch::Receiver<bool>>,
    /// Ours: the operator measured (its binary, manifests, namespace and lock), run with
    /// `--standby watch`. The anchors are the subjects [`LEASE_ANCHOR`] and
    /// [`FOR_LIFE_ANCHOR`].
    pub subject: crate::subject::Subject,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            runs: 20,
            only: Vec::new(),
            objects: 100,
            window: Duration::from_secs(60),
            suite_file: default_suite_file(),
            local_suite_file: default_local_suite_file(),
            kind_suite_file: default_kind_suite_file(),
            kind_cluster_file: crate::cluster::kind::cluster_start_file(),
            progress: false,
            interrupt: None,
            subject: crate::subject::Subject::memcached(),
        }
    }
}

impl Options {
    /// Whether `group` is to be measured.
    pub fn wants(&self, group: RowGroup) -> bool {
        self.only.is_empty() || self.only.contains(&group)
    }

    /// Runs `work` unless or until the run is interrupted.
    async fn unless_interrupted<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, BenchError>>,
    ) -> Result<T, BenchError> {
        let Some(mut interrupt) = self.interrupt.clone() else {
            return work.await;
        };
        tokio::select! {
            result = work => result,
            _ = interrupt.wait_for(|stop| *stop) => Err(BenchError::Interrupted),
        }
    }

    /// [`BenchError::Interrupted`] once the run is interrupted.
    fn check_interrupt(&self) -> Result<(), BenchError> {
        match &self.interrupt {
            Some(interrupt) if *interrupt.borrow() => Err(BenchError::Interrupted),
            _ => Ok(()),
        }
    }

    fn say(&self, line: &str) {
        if self.progress {
            eprintln!("bench: {line}");
        }
    }
}

/// `bench` under the reports root ([`crate::report::reports_root`]): where the table,
/// JSON and chart go.
pub fn default_out_dir() -> PathBuf {
    crate::report::reports_root().join("bench")
}

/// `suite.json` under the reports root ([`crate::report::reports_root`]): where the
/// feature suite's runner records its wall time, as `{"wallSeconds": 93.4, ...}`.
pub fn default_suite_file() -> PathBuf {
    crate::report::reports_root().join("suite.json")
}

/// `kind/suite.json` under the reports root: the suite's wall time on the `kind` provider.
pub fn default_kind_suite_file() -> PathBuf {
    crate::report::reports_root().join("kind/suite.json")
}

/// `local/suite.json` under the reports root: the suite's wall time on the `local`
/// provider.
pub fn default_local_suite_file() -> PathBuf {
    crate::report::reports_root().join("local/suite.json")
}

/// At most this many real control planes are started for the cluster start row (each
/// takes about ten seconds).
pub const REAL_STARTS: usize = 3;

/// One handoff as measured: its two ends in the audit and who held the lock.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    /// 1-based run number.
    pub run: usize,
    /// The start (server time).
    pub from: DateTime<Utc>,
    /// The end (server time).
    pub to: DateTime<Utc>,
    /// The leader before.
    pub old_leader: String,
    /// The pod that took the lock.
    pub new_leader: String,
    /// Anything else worth knowing about this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The samples of one side of one row, with their summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    /// What ran: `watch` (ours), an anchor's profile name (`controller-runtime`,
    /// `operator-lib`), `sim`, `real`, `local`, or `none` (no anchor).
    pub behaviour: String,
    /// The anchor subject as the table names it (`controller-runtime v0.22.5`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The summary (absent when nothing was measured).
    #[serde(flatten)]
    pub stats: Option<Stats>,
    /// Every sample, in run order.
    pub samples: Vec<f64>,
    /// Per-run details (handoff rows).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Detail>,
    /// Why there are no samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

impl Series {
    /// Measured samples.
    pub fn measured(behaviour: &str, samples: Vec<f64>, details: Vec<Detail>) -> Self {
        Self {
            behaviour: behaviour.to_string(),
            subject: None,
            stats: Stats::of(&samples),
            samples,
            details,
            not_measured: None,
        }
    }

    /// Nothing measured, and why.
    pub fn not_measured(behaviour: &str, why: &str) -> Self {
        Self {
            behaviour: behaviour.to_string(),
            subject: None,
            stats: None,
            samples: Vec::new(),
            details: Vec::new(),
            not_measured: Some(why.to_string()),
        }
    }

    /// Its name on its line of the table: `ours (watch)`, `controller-runtime v0.22.5`,
    /// `anchor (real)`, `anchor (n/a)`.
    pub fn label(&self, ours: bool) -> String {
        let side = if ours { "ours" } else { "anchor" };
        match (&self.subject, self.behaviour.as_str()) {
            (Some(subject), _) => subject.clone(),
            (None, "none") => format!("{side} (n/a)"),
            (None, b) => format!("{side} ({b})"),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Stable id, e.g. `lease-release`.
    pub id: &'static str,
    /// The `--only` group it belongs to.
    pub group: RowGroup,
    /// What it measures.
    pub title: String,
    /// Unit of every number: `ms`, `req/min`, `MiB`, `KiB`, `s`.
    pub unit: &'static str,
    /// The performance target.
    pub target: &'static str,
    /// What the anchor is known to do.
    pub reference: &'static str,
    /// Ours (the bundled operator with `--standby watch`, or the simulator itself).
    pub ours: Series,
    /// The anchor (a subject: controller-runtime or operator-lib), or why there is none.
    pub anchor: Series,
    /// Ours over the anchor's, at the median.
    pub ratio: Option<f64>,
}

/// The machine the figures come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Logical CPUs available.
    pub cpus: usize,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
    /// `release` or `debug` build of opconform.
    pub profile: &'static str,
}

impl Machine {
    /// This machine.
    pub fn this() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .unwrap_or_else(|| "unknown cpu".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Self {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            kernel,
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        }
    }

    /// `2 cores, <model>, Linux <release>, release build`.
    pub fn describe(&self) -> String {
        format!(
            "{} cores, {}, Linux {}, {} build",
            self.cpus, self.cpu_model, self.kernel, self.profile
        )
    }
}

/// Everything a bench run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long the whole run took, in seconds.
    pub wall_seconds: f64,
    /// Runs per row and side.
    pub runs: usize,
    /// Memcached objects during the API and memory window.
    pub objects: usize,
    /// The API and memory window, in seconds.
    pub window_seconds: f64,
    /// Lease timings of the handoff rows (LeaseDuration/RenewDeadline/RetryPeriod).
    pub handoff_lease: String,
    /// Lease timings of the API and memory rows.
    pub steady_lease: String,
    /// The rows measured, in table order.
    pub rows: Vec<Row>,
}

impl Report {
    /// The table printed on stdout.
    pub fn table(&self) -> String {
        table::render(self)
    }

    /// The SVG bar chart of the handoff distributions.
    pub fn svg(&self) -> String {
        chart::render(self)
    }

    /// The report as pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Writes `table.txt`, `bench.json` and `handoffs.svg` into `dir` (created when
    /// missing), and the JSON also to `json` when given; returns the files written.
    ///
    /// # Errors
    /// [`BenchError::Write`] naming the file.
    pub fn write(&self, dir: &Path, json: Option<&Path>) -> Result<Vec<PathBuf>, BenchError> {
        let write = |path: PathBuf, content: &str| {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|source| BenchError::Write {
                    path: path.clone(),
                    source,
                })?;
            }
            std::fs::write(&path, content)
                .map(|()| path.clone())
                .map_err(|source| BenchError::Write { path, source })
        };
        let json_text = self.json();
        let mut written = vec![
            write(dir.join("table.txt"), &self.table())?,
            write(dir.join("bench.json"), &json_text)?,
            write(dir.join("handoffs.svg"), &self.svg())?,
        ];
        if let Some(path) = json {
            written.push(write(path.to_path_buf(), &json_text)?);
        }
        Ok(written)
    }
}

/// What a row is, before it is measured.
struct Spec {
    id: &'static str,
    group: RowGroup,
    title: &'static str,
    unit: &'static str,
    target: &'static str,
    reference: &'static str,
}

const SPECS: [Spec; 25] = [
    Spec {
        id: "lease-release",
        group: RowGroup::LeaseRelease,
        title: "lease handoff after graceful release",
        unit: "ms",
        target: "p50 <= 50 ms",
        reference: "controller-runtime (client-go): the standby's next poll, RetryPeriod x [1, 2.2)",
    },
    Spec {
        id: "lease-kill",
        group: RowGroup::LeaseKill,
        title: "lease takeover after kill, from the kill",
        unit: "ms",
        target: "<= lease + 100 ms",
        reference: "controller-runtime (client-go): LeaseDuration + up to 2.2 x RetryPeriod",
    },
    Spec {
        id: "lease-kill-expiry",
        group: RowGroup::LeaseKill,
        title: "lease takeover after kill, from expiry",
        unit: "ms",
        target: "<= 100 ms",
        reference: "controller-runtime (client-go): a poll to see the last renewal, expiry from then, a poll to act (renew times compared in whole seconds: may act early)",
    },
    Spec {
        id: "for-life",
        group: RowGroup::ForLife,
        title: "for-life takeover after GC of the lock",
        unit: "ms",
        target: "<= 100 ms",
        reference: "operator-lib: backoff 1 s doubling to 16 s, +20% jitter",
    },
    Spec {
        id: "api-standby",
        group: RowGroup::Api,
        title: "API requests per standby per minute",
        unit: "req/min",
        target: "<= 2",
        reference: "controller-runtime (client-go): a GET of the Lease every RetryPeriod (2 s): 30 per minute",
    },
    Spec {
        id: "api-leader",
        group: RowGroup::Api,
        title: "API requests per leader per minute",
        unit: "req/min",
        target: "-",
        reference: "controller-runtime (client-go): a renewal every RetryPeriod; the subject's own work (a ConfigMap write every 500 ms) is off: --work-interval=3600s",
    },
    Spec {
        id: "rss-standby",
        group: RowGroup::Rss,
        title: "RSS of a standby",
        unit: "MiB",
        target: "<= 15 MiB",
        reference: "Go operators: 30-80 MiB; the controller-runtime subject reconciles no Memcached",
    },
    Spec {
        id: "rss-leader",
        group: RowGroup::Rss,
        title: "RSS of the leader",
        unit: "MiB",
        target: "<= 25 MiB",
        reference: "Go operators: 30-80 MiB; the controller-runtime subject reconciles no Memcached",
    },
    Spec {
        id: "api-standby-kube-leader-election",
        group: RowGroup::Api,
        title: "API requests per standby per minute, beside kube-leader-election",
        unit: "req/min",
        target: "-",
        reference: "kube-leader-election 0.44.0 (on kube 4): the subject calls try_acquire_or_renew every RetryPeriod (2 s), a GET of the Lease and, while leading, a merge patch",
    },
    Spec {
        id: "api-leader-kube-leader-election",
        group: RowGroup::Api,
        title: "API requests per leader per minute, beside kube-leader-election",
        unit: "req/min",
        target: "-",
        reference: "kube-leader-election 0.44.0 (on kube 4): the subject calls try_acquire_or_renew every RetryPeriod (2 s), a GET of the Lease and, while leading, a merge patch",
    },
    Spec {
        id: "rss-standby-kube-leader-election",
        group: RowGroup::Rss,
        title: "RSS of a standby, beside kube-leader-election",
        unit: "MiB",
        target: "-",
        reference: "kube-leader-election: a Rust binary on its own kube client; it reconciles no Memcached",
    },
    Spec {
        id: "rss-leader-kube-leader-election",
        group: RowGroup::Rss,
        title: "RSS of the leader, beside kube-leader-election",
        unit: "MiB",
        target: "-",
        reference: "kube-leader-election: a Rust binary on its own kube client; it reconciles no Memcached",
    },
    Spec {
        id: "api-standby-kube-lease-manager",
        group: RowGroup::Api,
        title: "API requests per standby per minute, beside kube-lease-manager",
        unit: "req/min",
        target: "-",
        reference: "kube-lease-manager 0.13.1: no RetryPeriod; the holder renews within the grace before expiry (LeaseDuration - RenewDeadline), a standby watches or polls as the crate does",
    },
    Spec {
        id: "api-leader-kube-lease-manager",
        group: RowGroup::Api,
        title: "API requests per leader per minute, beside kube-lease-manager",
        unit: "req/min",
        target: "-",
        reference: "kube-lease-manager 0.13.1: no RetryPeriod; the holder renews within the grace before expiry (LeaseDuration - RenewDeadline), a standby watches or polls as the crate does",
    },
    Spec {
        id: "rss-standby-kube-lease-manager",
        group: RowGroup::Rss,
        title: "RSS of a standby, beside kube-lease-manager",
        unit: "MiB",
        target: "-",
        reference: "kube-lease-manager: a Rust binary on its own kube client; it reconciles no Memcached",
    },
    Spec {
        id: "rss-leader-kube-lease-manager",
        group: RowGroup::Rss,
        title: "RSS of the leader, beside kube-lease-manager",
        unit: "MiB",
        target: "-",
        reference: "kube-lease-manager: a Rust binary on its own kube client; it reconciles no Memcached",
    },
    Spec {
        id: "start-first-request",
        group: RowGroup::ClusterStart,
        title: "sim cluster start to first served request",
        unit: "ms",
        target: "-",
        reference: "kind: about 60 s; envtest: seconds",
    },
    Spec {
        id: "start-nodes-ready",
        group: RowGroup::ClusterStart,
        title: "sim cluster start to 3 nodes Ready",
        unit: "ms",
        target: "<= 300 ms",
        reference: "kind: about 60 s; envtest: seconds",
    },
    Spec {
        id: "start-real",
        group: RowGroup::ClusterStart,
        title: "cluster start: sim (3 nodes Ready) vs real control plane (every component ready)",
        unit: "ms",
        target: "-",
        reference: "kind: about 60 s; envtest: seconds",
    },
    Spec {
        id: "start-kind",
        group: RowGroup::ClusterStart,
        title: "cluster start: sim (3 nodes Ready) vs kind (created, nodes Ready, operator image loaded)",
        unit: "ms",
        target: "-",
        reference: "the kind cluster a CI job creates before its tests",
    },
    Spec {
        id: "pod-start",
        group: RowGroup::PodStart,
        title: "pod start, create to Running: containers vs host processes",
        unit: "ms",
        target: "p50 <= 300 ms and <= 2x processes",
        reference: "the same 30 pods as host processes: the kubelet's process path (no bundle, no runtime)",
    },
    Spec {
        id: "pod-rss",
        group: RowGroup::PodStart,
        title: "RSS per idle pod, its own processes: containers vs host processes",
        unit: "KiB",
        target: "-",
        reference: "VmRSS summed over the pods' processes / 30: a container's as its runtime's ps lists them (not the runtime), a host process pod's group without the kubelet's watchdog shell",
    },
    Spec {
        id: "pod-runtime-rss",
        group: RowGroup::PodStart,
        title: "RSS per pod of the OCI runtime's run process (not in the row above)",
        unit: "KiB",
        target: "-",
        reference: "host process pods have no runtime process; on neither side: the kubelet's watchdog shell per pod",
    },
    Spec {
        id: "suite",
        group: RowGroup::Suite,
        title: "feature suite wall time: sim vs local (real control plane)",
        unit: "s",
        target: "<= 180 s on sim",
        reference: "kind suites: many minutes",
    },
    Spec {
        id: "suite-kind",
        group: RowGroup::Suite,
        title: "feature suite wall time: sim vs kind (real cluster)",
        unit: "s",
        target: "-",
        reference: "the same features on one kind cluster (one control plane, two workers)",
    },
];

/// How long one settle (one leader; every other pod Ready and campaigning) may take.
const SETTLE: Duration = Duration::from_secs(60);

/// How long one handoff may take (operator-lib's for-life backoff reaches 19.2 s).
const HANDOFF: Duration = Duration::from_secs(60);

/// Runs every wanted row and returns the report. Starts and stops its own simulated
/// clusters: nothing is left running when it returns, whether it succeeded, failed or was
/// interrupted through [`Options::interrupt`]. (Dropping the future instead leaves pod
/// processes running until this process ends: use the interrupt.)
///
/// # Errors
/// The first failure, with its cause: the operator binary missing and not buildable, a
/// cluster that does not start, a handoff or settle that does not happen in its bound.
pub async fn run(options: &Options) -> Result<Report, BenchError> {
    let started_at = Utc::now();
    let begin = std::time::Instant::now();
    let runs = options.runs.max(1);
    let options = &Options {
        runs,
        ..options.clone()
    };
    let lease_rows = options.wants(RowGroup::LeaseRelease) || options.wants(RowGroup::LeaseKill);
    let steady_rows = options.wants(RowGroup::Api) || options.wants(RowGroup::Rss);
    let for_life_row = options.wants(RowGroup::ForLife);
    let ours = if lease_rows || steady_rows || for_life_row {
        let binary = options.subject.binary().map_err(BenchError::Operator)?;
        Some(Contender::ours(options.subject.clone(), binary))
    } else {
        None
    };
    let lease_anchor = if lease_rows || steady_rows {
        Some(anchor(LEASE_ANCHOR)?)
    } else {
        None
    };
    let peers = if steady_rows {
        PEER_SUBJECTS
            .iter()
            .map(|(profile, ids)| Ok((anchor(profile)?.with_arg(ANCHOR_QUIET_WORK), ids)))
            .collect::<Result<Vec<_>, BenchError>>()?
    } else {
        Vec::new()
    };
    let for_life_anchor = if for_life_row {
        Some(anchor(FOR_LIFE_ANCHOR)?)
    } else {
        None
    };
    let mut measured: Vec<(&'static str, Series, Series)> = Vec::new();

    if let (Some(ours), Some(anchor)) = (&ours, &lease_anchor)
        && lease_rows
    {
        let (release, kill) = (
            options.wants(RowGroup::LeaseRelease),
            options.wants(RowGroup::LeaseKill),
        );
        let ours = handoff::lease(options, ours, release, kill).await?;
        let theirs = handoff::lease(options, anchor, release, kill).await?;
        measured.push(("lease-release", ours.release, theirs.release));
        measured.push(("lease-kill", ours.kill, theirs.kill));
        measured.push(("lease-kill-expiry", ours.expiry, theirs.expiry));
    }
    if let (Some(ours), Some(anchor)) = (&ours, &for_life_anchor) {
        let ours = handoff::for_life(options, ours).await?;
        let theirs = handoff::for_life(options, anchor).await?;
        measured.push(("for-life", ours, theirs));
    }
    if let (Some(ours), Some(anchor)) = (&ours, &lease_anchor)
        && steady_rows
    {
        // Both at once (nothing measured here depends on timing); each stops its own
        // cluster whatever happens to the other. The anchor's leader writes its work
        // ConfigMap once an hour, not every 500 ms: only election traffic is counted.
        // The peers run beside them, each on its own cluster too.
        let anchor = anchor.clone().with_arg(ANCHOR_QUIET_WORK);
        let (ours, theirs, peers_measured) = tokio::join!(
            steady::measure(options, ours),
            steady::measure(options, &anchor),
            futures::future::join_all(peers.iter().map(|(peer, _)| steady::measure(options, peer))),
        );
        let (ours, theirs) = (ours?, theirs?);
        for ((_, ids), peer) in peers.iter().zip(peers_measured) {
            let peer = peer?;
            let [api_standby, api_leader, rss_standby, rss_leader] = **ids;
            measured.push((api_standby, ours.standby_rate.clone(), peer.standby_rate));
            measured.push((api_leader, ours.leader_rate.clone(), peer.leader_rate));
            measured.push((
                rss_standby,
                ours.standby_memory.clone(),
                peer.standby_memory,
            ));
            measured.push((rss_leader, ours.leader_memory.clone(), peer.leader_memory));
        }
        measured.push(("api-standby", ours.standby_rate, theirs.standby_rate));
        measured.push(("api-leader", ours.leader_rate, theirs.leader_rate));
        measured.push(("rss-standby", ours.standby_memory, theirs.standby_memory));
        measured.push(("rss-leader", ours.leader_memory, theirs.leader_memory));
    }
    if options.wants(RowGroup::ClusterStart) {
        let (first, ready) = steady::cluster_start(options).await?;
        let none = || Series::not_measured("none", "the same simulator for both behaviours");
        measured.push(("start-first-request", first, none()));
        measured.push(("start-nodes-ready", ready.clone(), none()));
        measured.push((
            "start-real",
            ready.clone(),
            steady::real_start(options).await?,
        ));
        measured.push((
            "start-kind",
            ready,
            read_kind_start(&options.kind_cluster_file),
        ));
    }
    if options.wants(RowGroup::PodStart) {
        let pods = pod_start::measure(options).await?;
        measured.push(("pod-start", pods.start.0, pods.start.1));
        measured.push(("pod-rss", pods.memory.0, pods.memory.1));
        measured.push((
            "pod-runtime-rss",
            pods.runtime_memory.0,
            pods.runtime_memory.1,
        ));
    }
    if options.wants(RowGroup::Suite) {
        let sim = read_suite(&options.suite_file, "sim", "");
        measured.push((
            "suite",
            sim.clone(),
            read_suite(
                &options.local_suite_file,
                "local",
                " with OPCONFORM_PROVIDER=local",
            ),
        ));
        measured.push((
            "suite-kind",
            sim,
            read_suite(
                &options.kind_suite_file,
                "kind",
                " with OPCONFORM_PROVIDER=kind (ci/kind-e2e.sh)",
            ),
        ));
    }

    let rows = SPECS
        .iter()
        .filter(|s| options.wants(s.group))
        .filter_map(|spec| {
            let (_, ours, anchor) = measured.iter().find(|(id, ..)| *id == spec.id)?.clone();
            let ratio = match (&ours.stats, &anchor.stats) {
                (Some(o), Some(a)) => stats::ratio(o, a),
                _ => None,
            };
            let title = match spec.group {
                RowGroup::Rss => format!("{} with {} Memcached", spec.title, options.objects),
                _ => spec.title.to_string(),
            };
            Some(Row {
                id: spec.id,
                group: spec.group,
                title,
                unit: spec.unit,
                target: spec.target,
                reference: spec.reference,
                ours,
                anchor,
                ratio,
            })
        })
        .collect();
    Ok(Report {
        machine: Machine::this(),
        started_at,
        wall_seconds: begin.elapsed().as_secs_f64(),
        runs,
        objects: options.objects,
        window_seconds: options.window.as_secs_f64(),
        handoff_lease: HANDOFF_TIMINGS.to_string(),
        steady_lease: LeaseTimings::CONTROLLER_RUNTIME.to_string(),
        rows,
    })
}

/// The anchor whose profile is at `profile` (relative to the repository root), with its
/// binary (built by `go build` when missing or stale).
fn anchor(profile: &str) -> Result<Contender, BenchError> {
    let path = crate::subject::repository_root().join(profile);
    let subject =
        crate::profile::Profile::read(&path).map_err(|e| BenchError::Profile(Box::new(e)))?;
    let binary = subject.binary().map_err(BenchError::Operator)?;
    Ok(Contender::anchor(subject, binary))
}

/// What the feature suite's runner writes about its last run.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SuiteRun {
    wall_seconds: f64,
}

/// The suite's wall time from `path` (written by a run on `provider`, which `how` sets),
/// or why there is none.
fn read_suite(path: &Path, provider: &str, how: &str) -> Series {
    let run = format!("run `cargo test --test e2e`{how} first");
    read_json(path, provider, &run, "wallSeconds", |run: SuiteRun| {
        run.wall_seconds
    })
}

/// The last kind cluster's start (created, nodes Ready, operator image loaded) from `path`
/// in milliseconds, or why there is none.
fn read_kind_start(path: &Path) -> Series {
    let run = "run ci/kind-e2e.sh first";
    read_json(
        path,
        "kind",
        run,
        "readySeconds",
        |start: crate::cluster::kind::ClusterStart| start.ready_seconds * 1000.0,
    )
}

/// One value read from the JSON file at `path` (`field`, through `value`), or why there
/// is none: `run` says what writes the file.
fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    provider: &str,
    run: &str,
    field: &str,
    value: impl FnOnce(T) -> f64,
) -> Series {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Series::not_measured(
                provider,
                &format!("not measured: {run} (no {})", path.display()),
            );
        }
        Err(e) => {
            return Series::not_measured(
                provider,
                &format!("not measured: cannot read {}: {e}", path.display()),
            );
        }
    };
    match serde_json::from_str::<T>(&text) {
        Ok(parsed) => Series::measured(provider, vec![value(parsed)], Vec::new()),
        Err(e) => Series::not_measured(
            provider,
            &format!("not measured: {} has no {field}: {e}", path.display()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_has_a_row_and_ids_are_unique() {
        use clap::ValueEnum as _;
        for group in RowGroup::value_variants() {
            assert!(SPECS.iter().any(|s| s.group == *group), "{group:?}");
        }
        let mut ids: Vec<_> = SPECS.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), SPECS.len());
    }

    #[test]
    fn the_suite_time_is_read_from_its_file_or_said_to_be_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite.json");
        let missing = read_suite(&path, "local", " with OPCONFORM_PROVIDER=local");
        assert_eq!(missing.behaviour, "local");
        assert!(missing.not_measured.as_deref().unwrap().starts_with(
            "not measured: run `cargo test --test e2e` with OPCONFORM_PROVIDER=local first"
        ));
        std::fs::write(&path, r#"{"wallSeconds": 93.5, "scenarios": 12}"#).unwrap();
        let read = read_suite(&path, "sim", "");
        assert_eq!((read.behaviour.as_str(), read.samples), ("sim", vec![93.5]));
        std::fs::write(&path, "{}").unwrap();
        assert!(
            read_suite(&path, "sim", "")
                .not_measured
                .unwrap()
                .contains("wallSeconds")
        );
    }

    #[test]
    fn the_kind_cluster_start_is_read_in_milliseconds_or_said_to_be_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.json");
        assert!(
            read_kind_start(&path)
                .not_measured
                .unwrap()
                .starts_with("not measured: run ci/kind-e2e.sh first")
        );
        std::fs::write(
            &path,
            r#"{"cluster": "c", "createdSeconds": 30.5, "readySeconds": 55.25}"#,
        )
        .unwrap();
        let read = read_kind_start(&path);
        assert_eq!(
            (read.behaviour.as_str(), read.samples),
            ("kind", vec![55250.0])
        );
    }

    #[test]
    fn anchors_are_named_by_profile_and_pinned_version_and_ours_by_standby() {
        assert_eq!(
            subject_label("controller-runtime"),
            "controller-runtime v0.22.5"
        );
        assert_eq!(subject_label("operator-lib"), "operator-lib v0.19.0");
        assert_eq!(
            subject_label("kube-lease-manager"),
            "kube-lease-manager 0.13.1"
        );
        assert_eq!(subject_label("some-operator"), "some-operator");
        // The versions are the ones the subjects' go.mod pins.
        let go_mod = std::fs::read_to_string(
            crate::subject::repository_root().join("subjects/go-election/go.mod"),
        )
        .unwrap();
        for (name, version) in ANCHOR_VERSIONS {
            assert!(
                go_mod.lines().any(|l| {
                    let l = l.trim();
                    l.ends_with(&format!("/{name} {version}"))
                }),
                "{name} {version} not in go.mod"
            );
        }
        // And the peers' are the ones Cargo.lock pins.
        let lock =
            std::fs::read_to_string(crate::subject::repository_root().join("Cargo.lock")).unwrap();
        for (name, version) in PEER_VERSIONS {
            assert!(
                lock.contains(&format!("name = \"{name}\"\nversion = \"{version}\"")),
                "{name} {version} not in Cargo.lock"
            );
        }
        let subject = crate::subject::Subject::memcached();
        let ours = Contender::ours(subject.clone(), PathBuf::new());
        assert_eq!(ours.to_string(), "ours (watch)");
        let series = ours.series(vec![1.0], Vec::new());
        assert_eq!(
            (series.behaviour.as_str(), series.label(true)),
            ("watch", "ours (watch)".to_string())
        );
        let anchor = Contender::anchor(
            crate::subject::Subject {
                name: "controller-runtime".into(),
                ..subject
            },
            PathBuf::new(),
        );
        let series = anchor.series(vec![1.0], Vec::new());
        assert_eq!(series.behaviour, "controller-runtime");
        assert_eq!(series.label(false), "controller-runtime v0.22.5");
        assert_eq!(
            Series::not_measured("none", "-").label(false),
            "anchor (n/a)"
        );
        assert_eq!(
            Series::measured("real", vec![], vec![]).label(false),
            "anchor (real)"
        );
    }

    #[test]
    fn only_restricts_the_groups() {
        let options = Options {
            only: vec![RowGroup::Api],
            ..Options::default()
        };
        assert!(options.wants(RowGroup::Api));
        assert!(!options.wants(RowGroup::Rss));
        assert!(Options::default().wants(RowGroup::Suite));
    }
}
