//! The cucumber step library: the [`World`] of a scenario and the steps grouped by domain
//! (cluster, operator, leadership, work, faults, memcached, reconcile, finalizers, history,
//! and objects: the steps for any kind). Users
//! write new features with these steps; `tests/e2e.rs` only runs them.

/// Fails the step (returns from it) unless `cond` holds: what the step checks, with the
/// message a person reads.
macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err($crate::steps::StepError::Unmet(format!($($message)+)).into());
        }
    };
}

/// Fails the step (returns from it): what it checks does not hold.
macro_rules! bail {
    ($($message:tt)+) => {
        return Err($crate::steps::StepError::Unmet(format!($($message)+)).into())
    };
}

pub mod artifacts;
pub mod breach;
pub mod cluster;
pub mod diagnosis;
pub mod failures;
pub mod faults;
pub mod finalizers;
pub mod history;
pub mod leadership;
pub mod memcached;
pub mod metrics;
pub mod objects;
pub mod operator;
pub mod reconcile;
pub mod vocabulary;
pub mod wait;
pub mod work;

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use kube::Client;

use crate::cluster::{Capability, KubeconfigOptions, Provider, ProviderError, ProviderKind};
use crate::record::History;

use crate::record::recorder::{Feeds, Recorder, RecorderConfig};
use crate::subject::{OperatorSetup, Subject, SubjectError};
use cucumber::gherkin::tagexpr::TagOperation;

/// Errors of the step library: why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A step needs a cluster and the scenario has none yet.
    #[error("no cluster: start the scenario with \"Given a cluster\"")]
    NoCluster,
    /// The provider could not start, connect or act.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The operator profile could not be read.
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    /// The operator binary could not be found or built, or its manifests read.
    #[error(transparent)]
    Subject(#[from] SubjectError),
    /// A request to the cluster failed; `doing` says what the step asked for.
    #[error("{doing}")]
    Api {
        /// What the step was doing, as a person says it (`reading the leader's Pod p-1`).
        doing: String,
        /// What the API server or the connection answered.
        #[source]
        source: kube::Error,
    },
    /// The provider could not carry out what the step asked of it (a fault, a rule).
    #[error("{doing}")]
    Acting {
        /// What the step asked for, as a person says it (`freezing pod p-1`).
        doing: String,
        /// Why the provider could not.
        #[source]
        source: ProviderError,
    },
    /// A step this one builds on has not run: no leader seen, no object created, no rule
    /// made. The message names the step to run first.
    #[error("{0}")]
    Missing(String),
    /// What the step checks does not hold.
    #[error("{0}")]
    Unmet(String),
    /// A condition did not come true within the step's bound.
    #[error("expected within {within:?}: {what}; last observed: {last}")]
    NotWithin {
        /// The step's bound.
        within: Duration,
        /// What was expected.
        what: String,
        /// What the last look saw.
        last: String,
    },
    /// A wait on the operator ran out: the wait's error, then what the operator's pods
    /// were doing ([`diagnosis`]).
    #[error("{waited}\n{pods}")]
    OperatorPods {
        /// The wait that ran out.
        waited: Box<StepError>,
        /// Each pod's phase, restarts, last exit and last log lines.
        pods: String,
    },
    /// A condition stopped holding during the span the step keeps it for.
    #[error("expected for {span:?}: {what}; after {after:?} observed: {observed}")]
    NotThroughout {
        /// The span the step keeps the condition for.
        span: Duration,
        /// What was expected.
        what: String,
        /// How far into the span it broke.
        after: Duration,
        /// What the look that broke it saw.
        observed: String,
    },
}

/// A failed step as cucumber prints it: the error with every cause on one line.
#[derive(Debug)]
pub struct Failed(pub StepError);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::error_chain(&self.0))
    }
}

impl<E: Into<StepError>> From<E> for Failed {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

/// What every step returns.
pub type Step = Result<(), Failed>;

/// Says what a step was doing when a request to the cluster, or the provider, failed.
pub trait Doing<T> {
    /// The error as [`StepError::Api`] or [`StepError::Acting`], `doing` what.
    ///
    /// # Errors
    /// When `self` is an error.
    fn doing(self, doing: impl Into<String>) -> Result<T, StepError>;
}

impl<T> Doing<T> for Result<T, kube::Error> {
    fn doing(self, doing: impl Into<String>) -> Result<T, StepError> {
        self.map_err(|source| StepError::Api {
            doing: doing.into(),
            source,
        })
    }
}

impl<T> Doing<T> for Result<T, ProviderError> {
    fn doing(self, doing: impl Into<String>) -> Result<T, StepError> {
        self.map_err(|source| StepError::Acting {
            doing: doing.into(),
            source,
        })
    }
}

/// What the fault steps did that later steps look at.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Faulted {
    /// The pod its kubelet evicted, and its uid.
    pub evicted: Option<(String, String)>,
    /// The node cut off from the API server.
    pub partitioned_node: Option<String>,
    /// The node whose kubelet hangs.
    pub hung_kubelet: Option<String>,
    /// The replica frozen until a step releases it.
    pub frozen: Option<String>,
    /// The two rules that make standbys' lock writes race: each rule's id and the standby
    /// whose write it holds.
    pub racing_rules: Vec<(u64, String)>,
}

/// A duration as features write it: a literal (`500ms`, `4s`, `2m`), or a sum of terms
/// that name the lease timings of the operator the scenario deployed, as client-go names
/// them (`LeaseDuration + 2 × RetryPeriod`, `RenewDeadline + RetryPeriod / 2`,
/// `2 × LeaseDuration`, `LeaseDuration - 500ms`). A term is a literal or a timing, times a
/// whole number before it (`×` or `*`) and divided by one after it (`/`); terms are added
/// and subtracted. A step resolves it with [`World::span`], so the same scenario judges an
/// operator at the timings it runs with.
#[derive(Debug, Clone, PartialEq, Eq, cucumber::Parameter)]
#[param(
    name = "duration",
    regex = r"(?:\d+ ?[×*] ?)?(?:\d+(?:ms|s|m)|LeaseDuration|RenewDeadline|RetryPeriod)(?: ?/ ?\d+)?(?: [+-] (?:\d+ ?[×*] ?)?(?:\d+(?:ms|s|m)|LeaseDuration|RenewDeadline|RetryPeriod)(?: ?/ ?\d+)?)*"
)]
pub struct Dur {
    /// As the feature wrote it.
    text: String,
    /// Its terms, each added or (when `true`) subtracted.
    terms: Vec<(bool, Term)>,
}

/// One term of a [`Dur`]: `times × quantity / over`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Term {
    times: u32,
    quantity: Quantity,
    over: u32,
}

/// What a term counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quantity {
    /// A literal duration.
    Literal(Duration),
    /// One of the operator's lease timings.
    Timing(Timing),
}

/// A lease timing, as client-go names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timing {
    LeaseDuration,
    RenewDeadline,
    RetryPeriod,
}

impl Dur {
    /// A literal duration.
    pub fn of(duration: Duration) -> Self {
        Self {
            text: format!("{}ms", duration.as_millis()),
            terms: vec![(
                false,
                Term {
                    times: 1,
                    quantity: Quantity::Literal(duration),
                    over: 1,
                },
            )],
        }
    }

    /// What it comes to at `timings` (`None`: no operator in lease mode was deployed).
    ///
    /// # Errors
    /// When it names a timing and there are none, divides by zero, or comes to less than
    /// nothing.
    pub fn at(&self, timings: Option<&crate::subject::LeaseTimings>) -> Result<Duration, String> {
        let mut total: i128 = 0;
        for (minus, term) in &self.terms {
            let base = match term.quantity {
                Quantity::Literal(d) => d,
                Quantity::Timing(timing) => {
                    let t = timings.ok_or_else(|| {
                        format!(
                            "{:?} names {timing:?}, but the scenario deployed no operator in lease mode",
                            self.text
                        )
                    })?;
                    match timing {
                        Timing::LeaseDuration => t.lease_duration,
                        Timing::RenewDeadline => t.renew_deadline,
                        Timing::RetryPeriod => t.retry_period,
                    }
                }
            };
            if term.over == 0 {
                return Err(format!("{:?} divides by zero", self.text));
            }
            let nanos = base.as_nanos() as i128 * i128::from(term.times) / i128::from(term.over);
            total += if *minus { -nanos } else { nanos };
        }
        u64::try_from(total)
            .map(Duration::from_nanos)
            .map_err(|_| format!("{:?} comes to less than nothing", self.text))
    }

    /// Whether it names a lease timing.
    pub fn names_a_timing(&self) -> bool {
        self.terms
            .iter()
            .any(|(_, t)| matches!(t.quantity, Quantity::Timing(_)))
    }

    /// `value` (what it came to) for a message: with the expression when it names a timing
    /// (`LeaseDuration + 2 × RetryPeriod = 6s`).
    pub fn shown(&self, value: Duration) -> String {
        if self.names_a_timing() {
            format!("{} = {value:?}", self.text)
        } else {
            format!("{value:?}")
        }
    }
}

impl std::fmt::Display for Dur {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Dur {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let spaced = s
            .replace('×', " × ")
            .replace(['*'], " × ")
            .replace('/', " / ")
            .replace('+', " + ");
        // A `-` only separates terms (durations have no sign of their own).
        let spaced = spaced.replace('-', " - ");
        let mut tokens = spaced.split_whitespace().peekable();
        let mut terms = Vec::new();
        let mut minus = false;
        loop {
            let first = tokens
                .next()
                .ok_or_else(|| format!("duration {s:?} ends where a term was expected"))?;
            let (times, quantity) = if tokens.peek() == Some(&"×") {
                tokens.next();
                let times = first.parse::<u32>().map_err(|_| {
                    format!("duration {s:?}: {first:?} before × is not a whole number")
                })?;
                let quantity = tokens
                    .next()
                    .ok_or_else(|| format!("duration {s:?} ends after ×"))?;
                (times, quantity)
            } else {
                (1, first)
            };
            let quantity = match quantity {
                "LeaseDuration" => Quantity::Timing(Timing::LeaseDuration),
                "RenewDeadline" => Quantity::Timing(Timing::RenewDeadline),
                "RetryPeriod" => Quantity::Timing(Timing::RetryPeriod),
                literal => Quantity::Literal(crate::subject::parse_duration(literal).map_err(
                    |e| {
                        format!(
                            "{e} (or LeaseDuration, RenewDeadline, RetryPeriod: the lease's timings)"
                        )
                    },
                )?),
            };
            let over = if tokens.peek() == Some(&"/") {
                tokens.next();
                let over = tokens
                    .next()
                    .ok_or_else(|| format!("duration {s:?} ends after /"))?;
                over.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("duration {s:?}: {over:?} after / is not a whole number above 0")
                })?
            } else {
                1
            };
            terms.push((
                minus,
                Term {
                    times,
                    quantity,
                    over,
                },
            ));
            match tokens.next() {
                None => break,
                Some("+") => minus = false,
                Some("-") => minus = true,
                Some(other) => {
                    return Err(format!(
                        "duration {s:?}: expected + or - between terms, found {other:?}"
                    ));
                }
            }
        }
        Ok(Self {
            text: s.to_string(),
            terms,
        })
    }
}

/// The error and its causes on one line.
pub use crate::error_chain as chain;

/// The state of one scenario.
#[derive(Default, cucumber::World)]
#[world(init = Self::new)]
pub struct World {
    /// The scenario's name (set before it runs).
    pub scenario: String,
    /// The feature's name (set before it runs).
    pub feature: String,
    provider: Option<Box<dyn Provider>>,
    recorder: Option<Recorder>,
    /// How the operator was deployed, once it was.
    pub operator: Option<OperatorSetup>,
    /// The lease timings the operator was deployed with (lease mode): what the
    /// scenario's durations that name them come to.
    pub timings: Option<crate::subject::LeaseTimings>,
    /// The replica last seen leading.
    pub leader: Option<String>,
    /// The ConfigMaps the cluster steps made, and what they saw of them.
    pub config_maps: cluster::ConfigMapsSeen,
    /// What the work steps gave the operator.
    pub work: work::WorkGiven,
    /// The Memcached objects the scenario made, and what became of them.
    pub memcacheds: memcached::Memcacheds,
    /// The requests the API server was made to refuse.
    pub refusals: reconcile::Refusals,
    /// The replica replaced by the last takeover.
    pub old_leader: Option<String>,
    /// The lock's transitions when its first leader was seen.
    pub transitions_at_first_leader: Option<i64>,
    /// What the fault steps did that later steps look at.
    pub faulted: Faulted,
    /// What the steps for any kind keep: discovery, checkpoints.
    pub objects: objects::ObjectsSeen,
    /// When the scenario started (set before it runs).
    pub started: Option<std::time::Instant>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("scenario", &self.scenario)
            .field("provider", &self.provider.as_ref().map(|p| p.name()))
            .field("leader", &self.leader)
            .finish()
    }
}

impl World {
    async fn new() -> Self {
        Self::default()
    }

    /// Starts (sim) the scenario's cluster, or takes its share of the run's (local, kind)
    /// or of the user's (kubeconfig), as `OPCONFORM_PROVIDER` says.
    ///
    /// # Errors
    /// When the provider is unknown or cannot start.
    pub async fn start_cluster(&mut self) -> Result<(), StepError> {
        let suite = suite();
        self.provider =
            Some(crate::cluster::open(suite.provider, &suite.subject, &suite.kubeconfig).await?);
        Ok(())
    }

    /// Starts this scenario's own simulated cluster, whatever the provider.
    ///
    /// # Errors
    /// When it cannot start.
    pub async fn start_simulated_cluster(&mut self) -> Result<(), StepError> {
        let suite = suite();
        self.provider =
            Some(crate::cluster::open(ProviderKind::Sim, &suite.subject, &suite.kubeconfig).await?);
        Ok(())
    }

    /// The operator under test (the suite's).
    pub fn subject(&self) -> &'static Subject {
        &suite().subject
    }

    /// The scenario's provider.
    ///
    /// # Errors
    /// [`StepError::NoCluster`] before a cluster was started.
    pub fn provider(&self) -> Result<&dyn Provider, StepError> {
        self.provider.as_deref().ok_or(StepError::NoCluster)
    }

    /// The admin client of the scenario's cluster.
    ///
    /// # Errors
    /// [`StepError::NoCluster`] before a cluster was started.
    pub fn client(&self) -> Result<Client, StepError> {
        Ok(self.provider()?.client())
    }

    /// What a duration a step was given comes to, at the lease timings the operator was
    /// deployed with.
    ///
    /// # Errors
    /// [`StepError::Unmet`] when it names a timing and the operator runs in no lease mode.
    pub fn span(&self, duration: &Dur) -> Result<Duration, StepError> {
        duration.at(self.timings.as_ref()).map_err(StepError::Unmet)
    }

    /// The replica a step last saw leading.
    ///
    /// # Errors
    /// [`StepError::Missing`] when no step saw a leader yet.
    pub fn seen_leader(&self) -> Result<String, StepError> {
        self.leader.clone().ok_or_else(|| {
            StepError::Missing(
                "no step saw a leader yet: run \"within {duration} exactly one replica leads\" \
                 first"
                    .into(),
            )
        })
    }

    /// The operator's namespace in this scenario.
    ///
    /// # Errors
    /// [`StepError::NoCluster`] before a cluster was started.
    pub fn operator_namespace(&self) -> Result<String, StepError> {
        Ok(self.provider()?.placement().namespace)
    }

    /// The name a feature's namespace has in this scenario's cluster.
    ///
    /// # Errors
    /// [`StepError::NoCluster`] before a cluster was started.
    pub fn namespace(&self, logical: &str) -> Result<String, StepError> {
        Ok(self.provider()?.namespace(logical))
    }

    /// The name a feature's namespace has in this scenario's cluster, created (with the
    /// scenario's labels) when it does not exist yet.
    ///
    /// # Errors
    /// When there is no cluster or the namespace cannot be created.
    pub async fn ensure_namespace(&self, logical: &str) -> Result<String, StepError> {
        use k8s_openapi::api::core::v1::Namespace;
        let provider = self.provider()?;
        let name = provider.namespace(logical);
        let api: kube::Api<Namespace> = kube::Api::all(provider.client());
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                labels: Some(provider.placement().labels),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&Default::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(source) => {
                return Err(StepError::Api {
                    doing: format!("creating namespace {name}"),
                    source,
                });
            }
        }
        Ok(name)
    }

    /// Whether the recorder was started.
    pub fn recording(&self) -> bool {
        self.recorder.is_some()
    }

    /// Starts recording the operator's namespace and the workload namespaces (once), its
    /// metrics scraped with `metrics_token` when they ask for one (see [`metrics`]).
    pub fn start_recorder(&mut self, metrics_token: Option<String>) {
        if self.recorder.is_some() {
            return;
        }
        let Some(provider) = &self.provider else {
            return;
        };
        let placement = provider.placement();
        let subject = &suite().subject;
        self.recorder = Some(Recorder::start(
            provider.client(),
            RecorderConfig {
                namespace: placement.namespace,
                lock_name: subject.lock.name.clone(),
                pod_selector: subject.pod_selector.clone(),
                metrics: crate::record::recorder::MetricsEndpoint {
                    scheme: if subject.metrics.https {
                        crate::record::recorder::MetricsScheme::Https
                    } else {
                        crate::record::recorder::MetricsScheme::Http
                    },
                    port: subject.metrics.port,
                    path: subject.metrics.path.clone(),
                    bearer_token: metrics_token,
                },
                holder_naming: subject.lock.holder,
                // Pod IPs are reachable where pods are local processes; kube-apiserver's
                // pods/proxy refuses loopback addresses.
                scrape_through_api: !provider.pod_ips_reachable(),
                scrape_interval: Duration::from_millis(100),
                // The namespaces the operator watches: the scenario's own on a shared
                // cluster, every namespace on a cluster of its own.
                workload_namespaces: placement.watch_namespaces,
            },
            Feeds {
                audit: provider.audit(),
                faults: Some(provider.faults()),
            },
        ));
    }

    /// Adds a note to the history.
    pub fn note(&self, text: &str) {
        if let Some(r) = &self.recorder {
            r.note(text);
        }
    }

    /// The history so far (empty before the operator is deployed), with every write the API
    /// server had answered before this call (see [`Recorder::caught_up`]).
    pub async fn history(&self) -> History {
        match &self.recorder {
            Some(recorder) => recorder.caught_up().await,
            None => History::default(),
        }
    }

    /// The history as recorded by now, without waiting for the audit feed to catch up: for
    /// steps that poll until a condition holds (a lagging write shows up at a later poll).
    pub fn history_so_far(&self) -> History {
        self.recorder
            .as_ref()
            .map(Recorder::snapshot)
            .unwrap_or_default()
    }

    /// Where this scenario's reports go: `target/opconform/<scenario>/`.
    pub fn report_dir(&self) -> PathBuf {
        let slug: String = self
            .scenario
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        suite().reports.join(if slug.is_empty() {
            "scenario".into()
        } else {
            slug
        })
    }

    /// Writes the scenario's history and timeline; for a failed scenario also keeps the
    /// operator pods' logs, the events and the lock objects; then removes everything the
    /// scenario started. Returns the scenario's line of the index page.
    pub async fn finish(&mut self, failed: bool) -> crate::report::ScenarioSummary {
        let dir = self.report_dir();
        // What an earlier run of this scenario left there does not belong to this one.
        let _ = std::fs::remove_dir_all(&dir);
        let mut summary = crate::report::ScenarioSummary {
            name: self.scenario.clone(),
            link: format!(
                "{}/timeline.html",
                dir.file_name().unwrap_or_default().to_string_lossy()
            ),
            passed: !failed,
            failovers: Vec::new(),
            seconds: self
                .started
                .map(|t| t.elapsed().as_secs_f64())
                .unwrap_or_default(),
            failure: None,
            breach: None,
            ours: None,
            history_breached_safety: false,
        };
        let history = match self.recorder.take() {
            Some(r) => Some(r.stop().await),
            None => None,
        };
        if let Some(history) = history.filter(|h| !h.entries().is_empty()) {
            let verdicts = vec![
                crate::check::single_leader(&history),
                crate::check::single_writer(&history),
                crate::check::transitions_never_decrease(&history),
            ];
            summary.history_breached_safety = verdicts.iter().any(crate::check::breaches_safety);
            let failovers: Vec<_> = FAULT_VERBS
                .iter()
                .filter_map(|v| crate::check::failover(&history, v))
                .collect();
            summary.failovers = FAULT_VERBS
                .iter()
                .filter_map(|v| crate::check::failover(&history, v).map(|f| (v, f)))
                .filter_map(|(v, f)| f.to_lock.map(|d| format!("{v}: {} ms", d.as_millis())))
                .collect();
            let html =
                crate::report::timeline_html(&self.scenario, &history, &verdicts, &failovers);
            let _ = crate::report::write(&dir.join("timeline.html"), &html);
            let _ = crate::report::write(&dir.join("history.jsonl"), &history.to_json_lines());
        } else {
            summary.link.clear();
        }
        if failed {
            self.keep_artifacts(&dir).await;
            eprintln!(
                "opconform: history, timeline, pod logs, events and locks of the failed scenario in {}",
                dir.display()
            );
        }
        if let Some(provider) = self.provider.take() {
            provider.teardown().await;
        }
        summary
    }

    /// Keeps the operator pods' logs, the operator namespace's events and the lock objects
    /// in `dir`, then what the provider keeps.
    async fn keep_artifacts(&self, dir: &std::path::Path) {
        let Ok(provider) = self.provider() else {
            return;
        };
        let client = provider.client();
        let namespace = provider.placement().namespace;
        if let Err(e) = artifacts::keep(&client, &namespace, dir).await {
            eprintln!(
                "opconform: keeping the artifacts of {:?}: {}",
                self.scenario,
                chain(&e)
            );
        }
        provider.keep_artifacts(dir).await;
    }
}

/// The fault verbs a failover is measured after.
pub const FAULT_VERBS: [&str; 6] = ["crash", "delete", "evict", "hold", "partition", "reject"];

/// Options of a run beyond cucumber's own (`--name`, `--tags`, …).
#[derive(Debug, Clone, Default, cucumber::cli::Args)]
pub struct RunOptions {
    /// Also write a JUnit XML report here (or set OPCONFORM_JUNIT).
    #[arg(long, env = "OPCONFORM_JUNIT", value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Also write cucumber's JSON report here (or set OPCONFORM_JSON).
    #[arg(long, env = "OPCONFORM_JSON", value_name = "PATH")]
    pub json: Option<PathBuf>,
}

fn report_file(path: Option<&PathBuf>, what: &str) -> Box<dyn std::io::Write> {
    let Some(path) = path else {
        return Box::new(std::io::sink());
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::File::create(path) {
        Ok(file) => Box::new(file),
        Err(e) => {
            eprintln!(
                "opconform: cannot write the {what} report {}: {e}",
                path.display()
            );
            std::process::exit(2);
        }
    }
}

/// `user` (a tag expression, or none) and none of `excluded`.
fn without_tags<'a>(
    user: Option<TagOperation>,
    excluded: impl IntoIterator<Item = &'a str>,
) -> Option<TagOperation> {
    excluded.into_iter().fold(user, |expr, tag| {
        let not = TagOperation::Not(Box::new(TagOperation::Tag(tag.to_string())));
        Some(match expr {
            Some(expr) => TagOperation::And(Box::new(expr), Box::new(not)),
            None => not,
        })
    })
}

/// How a run of the features is set up: the operator under test, the provider and its
/// settings, and where the reports go.
#[derive(Debug, Clone)]
pub struct Suite {
    /// The operator under test.
    pub subject: Subject,
    /// The provider.
    pub provider: ProviderKind,
    /// Settings of the kubeconfig provider.
    pub kubeconfig: KubeconfigOptions,
    /// Where reports go: `OPCONFORM_REPORTS` when set, else [`crate::report::reports_root`]
    /// (`local` and `kind` under it for those providers).
    pub reports: PathBuf,
}

impl Suite {
    /// The operator `OPCONFORM_OPERATOR`'s profile describes (the bundled memcached operator
    /// without it) on the provider `OPCONFORM_PROVIDER` names, with the provider's own
    /// variables; reports under [`crate::report::reports_root`].
    ///
    /// # Errors
    /// An unknown provider, or a profile that cannot be read.
    pub fn from_env() -> Result<Self, StepError> {
        let kind = ProviderKind::from_env()?;
        Ok(Self {
            subject: crate::profile::Profile::from_env()?,
            provider: kind,
            kubeconfig: KubeconfigOptions::from_env(),
            reports: match std::env::var_os("OPCONFORM_REPORTS") {
                Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
                _ => Self::default_reports(kind),
            },
        })
    }

    /// Where a run on `kind` keeps its reports unless told: [`crate::report::reports_root`],
    /// `local` and `kind` beside the simulator's, not over them (CI runs all three).
    pub fn default_reports(kind: ProviderKind) -> std::path::PathBuf {
        match kind {
            ProviderKind::Local => crate::report::reports_root().join("local"),
            ProviderKind::Kind => crate::report::reports_root().join("kind"),
            _ => crate::report::reports_root(),
        }
    }

    /// Why the scenarios must run one at a time, when they must: on a cluster scenarios
    /// share, an operator that watches every namespace would reconcile the objects of every
    /// other scenario's.
    pub fn one_at_a_time(&self) -> Option<String> {
        (self.provider != ProviderKind::Sim && self.subject.watch_namespace.is_none()).then(|| {
            format!(
                "the profile of {} has no watchNamespace, so its operator watches every \
                 namespace of the {} cluster the scenarios share",
                self.subject.name,
                self.provider.name()
            )
        })
    }

    /// Why no scenario of the operator can run on the provider, when none can: its manager
    /// works only as a container (`needsContainer`) and the provider's pods are not.
    pub fn not_applicable(&self) -> Option<String> {
        let not_containers = self.provider.pods_are_not_containers()?;
        self.subject.needs_container.then(|| {
            format!(
                "the profile of {} says its manager works only as a container \
                 (needsContainer), and on {} {not_containers}",
                self.subject.name,
                self.provider.name()
            )
        })
    }

    /// Whether scenarios tagged with `capability`'s tag can run.
    pub fn supports(&self, capability: Capability) -> bool {
        self.provider.supports(capability, &self.kubeconfig)
    }

    /// The tags of scenarios the provider or the operator cannot run, with the reason:
    /// what the provider cannot do, and the election modes the operator's profile lacks.
    pub fn excluded_tags(&self) -> Vec<(&'static str, String)> {
        let election = &self.subject.election;
        let modes = [
            ("lease", "election.lease", election.lease.is_none()),
            ("for-life", "election.forLife", election.for_life.is_none()),
        ];
        Capability::ALL
            .into_iter()
            .filter(|c| !self.supports(*c))
            .map(|c| {
                (
                    c.tag(),
                    format!(
                        "the {} provider cannot {}",
                        self.provider.name(),
                        c.describe()
                    ),
                )
            })
            .chain((!self.subject.serves_memcached()).then(|| {
                (
                    "memcached",
                    format!(
                        "the profile of {} installs no Memcached CRD (memcacheds.cache.example.com): \
                         the operator has no Memcached to reconcile",
                        self.subject.name
                    ),
                )
            }))
            .chain(self.subject.work.is_none().then(|| {
                (
                    "work",
                    format!(
                        "the profile of {} has no work: nothing says what work to give it and \
                         which writes prove it",
                        self.subject.name
                    ),
                )
            }))
            .chain(election.lease.as_ref().and_then(|l| l.fixed).map(|fixed| {
                (
                    "slow",
                    format!(
                        "the profile of {} fixes its timings at {fixed}: every lease scenario \
                         runs at them already, so the production-timing ones would repeat them",
                        self.subject.name
                    ),
                )
            }))
            .chain(election.release_on_cancel.is_none().then(|| {
                (
                    "release-on-cancel",
                    format!(
                        "the profile of {} has no election.releaseOnCancel: its leader does not \
                         release its lease on shutdown",
                        self.subject.name
                    ),
                )
            }))
            .chain(
                modes
                    .into_iter()
                    .filter(|(_, _, lacks)| *lacks)
                    .map(|(tag, key, _)| {
                        (
                            tag,
                            format!(
                                "the profile of {} has no {key}: the operator has no such mode",
                                self.subject.name
                            ),
                        )
                    }),
            )
            .collect()
    }
}

static SUITE: std::sync::OnceLock<Suite> = std::sync::OnceLock::new();

/// The run's set-up: what [`run_suite`] was given, else read from the environment.
fn suite() -> &'static Suite {
    SUITE.get_or_init(|| {
        Suite::from_env().unwrap_or_else(|e| {
            eprintln!("opconform: {}", crate::error_chain(&e));
            std::process::exit(2);
        })
    })
}

/// What a run of the features came to.
#[derive(Debug, Clone)]
pub struct SuiteOutcome {
    /// Whether any scenario failed (or a step was undefined).
    pub failed: bool,
    /// One line per scenario run.
    pub scenarios: Vec<crate::report::ScenarioSummary>,
    /// Wall time of the run.
    pub wall: Duration,
}

/// Runs the feature files under `features` (a file or a directory) on the provider
/// `OPCONFORM_PROVIDER` names and
/// exits non-zero when a scenario failed (see [`run_suite`]).
pub async fn run(features: impl AsRef<std::path::Path>) {
    // The harness's own logs (scrape failures, watch retries, …), on stderr, when asked for.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let suite = Suite::from_env().unwrap_or_else(|e| {
        eprintln!("opconform: {}", crate::error_chain(&e));
        std::process::exit(2);
    });
    if let Some(line) = suite.provider.pods_as_processes_warning() {
        eprintln!("opconform: {line}");
    }
    let features = crate::features::FeatureSet::new()
        .path(features)
        .unwrap_or_else(|e| {
            eprintln!("opconform: {}", crate::error_chain(&e));
            std::process::exit(2);
        });
    let outcome = run_suite(features, suite, None).await;
    if outcome.failed {
        std::process::exit(1);
    }
}

/// Which scenarios a run takes and which extra reports it writes, when not from the
/// process's command line.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only the scenarios whose name this regex matches.
    pub name: Option<regex::Regex>,
    /// Only the scenarios this cucumber tag expression selects.
    pub tags: Option<cucumber::gherkin::tagexpr::TagOperation>,
    /// The extra reports.
    pub reports: RunOptions,
}

/// Runs `features` with the step library on `suite`'s provider: fails
/// on skipped (undefined) steps, takes the scenarios `selection` selects — else those
/// cucumber's command line of this process selects (`-- --tags @lease`, `--name …`, plus
/// `--junit PATH` and `--json PATH`) —, leaves out scenarios tagged with
/// what the provider cannot do, runs `@serial` scenarios alone (and `@disruptive` and
/// `@timing` ones on shared clusters), keeps each scenario's history and timeline under the reports
/// directory with an index page and `suite.json`, and always cleans up.
///
/// One run per process: the set-up is fixed by the first call.
pub async fn run_suite(
    features: crate::features::FeatureSet,
    suite: Suite,
    selection: Option<Selection>,
) -> SuiteOutcome {
    use cucumber::World as _;
    use cucumber::writer::Stats as _;
    use cucumber::{WriterExt as _, writer};

    let _ = SUITE.set(suite);
    let suite = self::suite();
    let kind = suite.provider;
    if let Some(why) = suite.not_applicable() {
        // Nothing to run: the report says why, and the run is not a failure.
        eprintln!("opconform: no scenario runs: {why}");
        let begin = std::time::Instant::now();
        let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        write_suite_reports(&[], begin.elapsed(), &started_at, suite);
        return SuiteOutcome {
            failed: false,
            scenarios: Vec::new(),
            wall: begin.elapsed(),
        };
    }
    let mut cli = match selection {
        None => cucumber::cli::Opts::<_, _, _, RunOptions>::parsed(),
        Some(selection) => cucumber::cli::Opts::<_, _, _, RunOptions> {
            re_filter: selection.name,
            tags_filter: selection.tags,
            custom: selection.reports,
            ..Default::default()
        },
    };
    let junit = report_file(cli.custom.junit.as_ref(), "JUnit");
    let json = report_file(cli.custom.json.as_ref(), "JSON");
    let excluded = suite.excluded_tags();
    // Joined to the user's own tag expression, so `--tags`/`--name` keep the exclusions.
    cli.tags_filter = without_tags(cli.tags_filter.take(), excluded.iter().map(|(tag, _)| *tag));
    for (tag, why) in &excluded {
        eprintln!("opconform: leaving out scenarios tagged @{tag}: {why}");
    }
    crate::cluster::start_run(kind);
    let summaries: std::sync::Arc<std::sync::Mutex<Vec<crate::report::ScenarioSummary>>> =
        Default::default();
    let collected = summaries.clone();
    let alone = kind.alone_tags();
    let begin = std::time::Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let failures = failures::Failures::default();
    let writer = World::cucumber::<&str>()
        .with_parser(crate::features::FeatureSet::new())
        .max_concurrent_scenarios(concurrency(suite))
        .which_scenario(move |feature, rule, scenario| {
            let tagged = |name: &str| {
                feature
                    .tags
                    .iter()
                    .chain(rule.iter().flat_map(|r| r.tags.iter()))
                    .chain(scenario.tags.iter())
                    .any(|t| t == name)
            };
            if tagged("serial") || alone.iter().any(|tag| tagged(tag)) {
                cucumber::runner::ScenarioType::Serial
            } else {
                cucumber::runner::ScenarioType::Concurrent
            }
        })
        .before(|feature, _rule, scenario, world| {
            Box::pin(async move {
                world.scenario = scenario.name.clone();
                world.feature = feature.name.clone();
                world.started = Some(std::time::Instant::now());
            })
        })
        .after(move |_feature, _rule, _scenario, event, world| {
            let summaries = collected.clone();
            Box::pin(async move {
                let failed = matches!(event, cucumber::event::ScenarioFinished::StepFailed(..));
                if let Some(world) = world {
                    let summary = world.finish(failed).await;
                    summaries
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(summary);
                }
            })
        })
        .with_writer(
            writer::Basic::stdout()
                .summarized()
                .tee::<World, _>(writer::JUnit::for_tee(junit, 0))
                .tee::<World, _>(writer::Json::for_tee(json))
                .tee::<World, _>(
                    failures
                        .clone()
                        .discard_stats_writes()
                        .discard_arbitrary_writes(),
                )
                .normalized(),
        )
        .fail_on_skipped()
        .with_cli(cli)
        .run(features)
        .await;
    let mut summaries = std::mem::take(&mut *summaries.lock().unwrap_or_else(|p| p.into_inner()));
    let failed_steps = failures.taken();
    for failure in &failed_steps {
        if let Some(summary) = summaries
            .iter_mut()
            .find(|s| s.name == failure.scenario && s.failure.is_none())
        {
            summary.failure = Some(format!("{}: {}", failure.step, failure.error));
            let judged = breach::of_step(&failure.step, &failure.error);
            summary.breach = if summary.history_breached_safety {
                Some(crate::check::Breach::Safety)
            } else {
                judged.map(|g| g.breach)
            };
            summary.ours = judged
                .and_then(|g| g.ours)
                .filter(|_| summary.breach == judged.map(|g| g.breach))
                .map(str::to_string);
        }
    }
    summaries.sort_by(|a, b| a.name.cmp(&b.name));
    let wall = begin.elapsed();
    write_suite_reports(&summaries, wall, &started_at, suite);
    let failed = writer.execution_has_failed();
    if !failed_steps.is_empty() {
        eprintln!("opconform: {} step(s) failed:", failed_steps.len());
        for failure in &failed_steps {
            eprintln!("  {}", failure.to_string().replace('\n', "\n  "));
        }
    }
    crate::cluster::finish_run(kind, failed).await;
    if failed {
        eprintln!(
            "opconform: the run failed; the timelines are indexed in {}",
            suite.reports.join("index.html").display()
        );
    }
    SuiteOutcome {
        failed,
        scenarios: summaries,
        wall,
    }
}

/// How many scenarios run at once: `OPCONFORM_CONCURRENCY` when set, else the provider's
/// own number ([`ProviderKind::concurrency`]). A value that is no positive whole number
/// ends the run before it starts, naming it.
fn concurrency(suite: &Suite) -> usize {
    if let Some(why) = suite.one_at_a_time() {
        eprintln!("opconform: running one scenario at a time: {why}");
        return 1;
    }
    match std::env::var("OPCONFORM_CONCURRENCY") {
        Err(_) => suite.provider.concurrency(),
        Ok(text) => parse_concurrency(&text).unwrap_or_else(|e| {
            eprintln!("opconform: {e}");
            std::process::exit(2);
        }),
    }
}

/// `OPCONFORM_CONCURRENCY`'s value as a number of scenarios.
fn parse_concurrency(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "OPCONFORM_CONCURRENCY={text:?} is not a number of scenarios to run at once: expected a whole number of at least 1"
        )),
    }
}

/// The index page and `suite.json` (wall time, counts, each scenario's figures).
fn write_suite_reports(
    summaries: &[crate::report::ScenarioSummary],
    wall: Duration,
    started_at: &str,
    suite: &Suite,
) {
    let kind = suite.provider;
    let root = &suite.reports;
    let index = crate::report::index_html(&crate::report::SuiteSummary {
        provider: kind.name(),
        started_at,
        wall,
        scenarios: summaries,
    });
    if let Err(e) = crate::report::write(&root.join("index.html"), &index) {
        eprintln!("opconform: {}", chain(&e));
    }
    let left_out: Vec<serde_json::Value> = suite
        .excluded_tags()
        .into_iter()
        .map(|(tag, why)| serde_json::json!({ "tag": tag, "why": why }))
        .collect();
    let suite = serde_json::json!({
        "provider": kind.name(),
        "subject": suite.subject.name,
        "leftOut": left_out,
        "notApplicable": suite.not_applicable(),
        "startedAt": started_at,
        "wallSeconds": wall.as_secs_f64(),
        "scenarios": summaries.len(),
        "passed": summaries.iter().filter(|s| s.passed).count(),
        "results": summaries,
    });
    let text = serde_json::to_string_pretty(&suite).unwrap_or_default();
    if let Err(e) = crate::report::write(&root.join("suite.json"), &text) {
        eprintln!("opconform: {}", chain(&e));
    }
    eprintln!(
        "opconform: {} scenario(s) on {} in {:.1}s; timelines indexed in {}",
        summaries.len(),
        kind.name(),
        wall.as_secs_f64(),
        root.join("index.html").display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subject::LeaseTimings;
    use cucumber::tag::Ext as _;

    fn at(text: &str, timings: &str) -> Result<Duration, String> {
        text.parse::<Dur>()?
            .at(Some(&LeaseTimings::parse(timings).unwrap()))
    }

    #[test]
    fn durations_in_the_lease_timings_come_to_todays_literal_bounds_at_4s_3s_1s() {
        for (text, expected) in [
            ("LeaseDuration", 4000),
            ("LeaseDuration + 2 × RetryPeriod", 6000),
            ("RenewDeadline + RetryPeriod / 2", 3500),
            ("2 × LeaseDuration", 8000),
            ("5 × LeaseDuration", 20_000),
            ("LeaseDuration + RetryPeriod", 5000),
            ("2 × RenewDeadline", 6000),
            ("2*RetryPeriod", 2000),
            ("LeaseDuration - 500ms", 3500),
        ] {
            assert_eq!(
                at(text, "4s/3s/1s"),
                Ok(Duration::from_millis(expected)),
                "{text}"
            );
        }
        assert_eq!(
            at("RenewDeadline - 2 × RetryPeriod", "6s/5s/1s"),
            Ok(Duration::from_secs(3))
        );
    }

    #[test]
    fn the_same_durations_follow_controller_runtimes_timings() {
        assert_eq!(
            at("LeaseDuration + 2 × RetryPeriod", "15s/10s/2s"),
            Ok(Duration::from_secs(19))
        );
        assert_eq!(
            at("RenewDeadline + RetryPeriod / 2", "15s/10s/2s"),
            Ok(Duration::from_secs(11))
        );
    }

    #[test]
    fn a_literal_duration_needs_no_timings_and_a_timing_needs_a_lease() {
        let literal: Dur = "1500ms".parse().unwrap();
        assert_eq!(literal.at(None), Ok(Duration::from_millis(1500)));
        assert!(!literal.names_a_timing());
        let timing: Dur = "LeaseDuration".parse().unwrap();
        let e = timing.at(None).unwrap_err();
        assert!(e.contains("no operator in lease mode"), "{e}");
    }

    #[test]
    fn malformed_durations_are_refused_with_what_was_expected() {
        for (text, says) in [
            ("4", "needs a unit"),
            ("4h", "unknown unit"),
            ("LeaseDuration +", "ends where a term was expected"),
            ("LeaseDuration / 0", "not a whole number above 0"),
            ("x × LeaseDuration", "not a whole number"),
            (
                "LeaseDurations",
                "LeaseDuration, RenewDeadline, RetryPeriod",
            ),
        ] {
            let e = text.parse::<Dur>().unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(
            at("RetryPeriod - LeaseDuration", "4s/3s/1s")
                .unwrap_err()
                .contains("less than nothing")
        );
    }

    #[test]
    fn a_failed_step_reads_what_it_was_doing_and_every_cause() {
        let refused: Result<(), kube::Error> = Err(kube::Error::Api(
            kube::core::Status::failure("pods \"p-1\" not found", "NotFound")
                .with_code(404)
                .boxed(),
        ));
        let failed = Failed::from(refused.doing("reading the leader's Pod p-1").unwrap_err());
        let text = failed.to_string();
        assert!(
            text.starts_with("reading the leader's Pod p-1: ") && text.contains("not found"),
            "{text}"
        );
    }

    #[test]
    fn ensure_fails_the_step_with_its_message_only_when_the_condition_is_false() {
        fn check(size: i64) -> Step {
            ensure!(size == 3, "expected size 3, saw {size}");
            Ok(())
        }
        assert!(check(3).is_ok());
        let failed = check(2).unwrap_err();
        assert!(matches!(&failed.0, StepError::Unmet(m) if m == "expected size 3, saw 2"));
        assert_eq!(failed.to_string(), "expected size 3, saw 2");
    }

    #[test]
    fn the_election_modes_a_profile_lacks_leave_their_scenarios_out() {
        let mut subject = Subject::memcached();
        subject.election.for_life = None;
        let suite = Suite {
            subject,
            provider: ProviderKind::Sim,
            kubeconfig: KubeconfigOptions::default(),
            reports: PathBuf::new(),
        };
        let excluded = suite.excluded_tags();
        let tags: Vec<&str> = excluded.iter().map(|(tag, _)| *tag).collect();
        assert!(
            tags.contains(&"for-life") && !tags.contains(&"lease"),
            "{excluded:?}"
        );
        let why = &excluded
            .iter()
            .find(|(tag, _)| *tag == "for-life")
            .unwrap()
            .1;
        assert_eq!(
            why,
            "the profile of memcached-operator has no election.forLife: the operator has no such mode"
        );
    }

    #[test]
    fn an_operator_with_fixed_timings_skips_the_production_timing_repeats_and_one_that_needs_a_container_skips_where_pods_are_not()
     {
        let mut subject = Subject::memcached();
        let suite = |subject: Subject, provider| Suite {
            subject,
            provider,
            kubeconfig: KubeconfigOptions::default(),
            reports: PathBuf::new(),
        };
        let tags = |s: &Suite| -> Vec<&'static str> {
            s.excluded_tags().into_iter().map(|(tag, _)| tag).collect()
        };
        assert!(!tags(&suite(subject.clone(), ProviderKind::Sim)).contains(&"slow"));
        assert_eq!(
            suite(subject.clone(), ProviderKind::Sim).not_applicable(),
            None
        );
        if let Some(lease) = subject.election.lease.as_mut() {
            lease.fixed = Some(crate::subject::LeaseTimings::CONTROLLER_RUNTIME);
        }
        subject.needs_container = true;
        assert!(tags(&suite(subject.clone(), ProviderKind::Kind)).contains(&"slow"));
        assert_eq!(
            suite(subject.clone(), ProviderKind::Kind).not_applicable(),
            None
        );
        // On local (and sim) pods are containers only where the harness can make them.
        let on_local = suite(subject.clone(), ProviderKind::Local).not_applicable();
        match ProviderKind::Local.pods_are_not_containers() {
            Some(_) => {
                let why = on_local.expect("not applicable on local");
                assert!(
                    why.contains("needsContainer") && why.contains("network namespace"),
                    "{why}"
                );
            }
            None => assert_eq!(on_local, None),
        }
    }

    #[test]
    fn an_operator_that_watches_every_namespace_runs_its_scenarios_one_at_a_time_on_a_shared_cluster()
     {
        let mut suite = Suite {
            subject: Subject::memcached(),
            provider: ProviderKind::Kind,
            kubeconfig: KubeconfigOptions::default(),
            reports: PathBuf::new(),
        };
        assert_eq!(
            suite.one_at_a_time(),
            None,
            "the bundled operator is told its namespaces"
        );
        suite.subject.watch_namespace = None;
        let why = suite.one_at_a_time().expect("one at a time on kind");
        assert!(
            why.contains("memcached-operator has no watchNamespace"),
            "{why}"
        );
        suite.provider = ProviderKind::Sim;
        assert_eq!(
            suite.one_at_a_time(),
            None,
            "each scenario has a cluster of its own"
        );
    }

    #[test]
    fn a_concurrency_that_is_no_positive_whole_number_is_refused_naming_it() {
        assert_eq!(parse_concurrency(" 4 "), Ok(4));
        for bad in ["0", "-1", "two", ""] {
            let e = parse_concurrency(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("at least 1"), "{e}");
        }
    }

    #[test]
    fn on_local_scenarios_that_set_request_rules_run_alone_and_on_sim_none_must() {
        assert!(ProviderKind::Local.alone_tags().contains(&"request-rules"));
        assert!(!ProviderKind::Kind.alone_tags().contains(&"request-rules"));
        assert!(ProviderKind::Sim.alone_tags().is_empty());
        for kind in [
            ProviderKind::Local,
            ProviderKind::Kind,
            ProviderKind::Kubeconfig,
        ] {
            assert!(kind.alone_tags().contains(&"disruptive"), "{kind:?}");
        }
    }

    #[test]
    fn the_providers_exclusions_join_the_users_tag_expression() {
        let user: TagOperation = "@lease or @for-life".parse().unwrap();
        let expr = without_tags(Some(user), ["node-access", "sim-only"]).unwrap();
        assert!(expr.eval(["lease"]));
        assert!(!expr.eval(["lease", "node-access"]));
        assert!(!expr.eval(["reconcile"]));
        let only = without_tags(None, ["node-access"]).unwrap();
        assert!(only.eval(["reconcile"]));
        assert!(!only.eval(["reconcile", "node-access"]));
        assert!(without_tags(None, []).is_none());
    }
}
