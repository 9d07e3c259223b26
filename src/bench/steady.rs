//! The steady-state benchmarks: API requests per minute and resident memory of the leader
//! and a standby once the leader has reconciled the Memcached objects (a subject that does
//! not serve Memcached reconciles none), and the simulated cluster's start time.

use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt as _};

use super::audit_tap::{last_work_write, millis_between, requests_by_pod};
use super::stage::{Election, LeaseTimings, Stage};
use super::{BenchError, Contender, Options, SETTLE, Series};
use crate::sim::{SimCluster, SimClusterConfig};

/// The namespace of the Memcached objects.
const OBJECTS_NAMESPACE: &str = "bench";

/// `spec.size` of each Memcached: one memcached pod each.
const SIZE: i64 = 1;

/// The operator's finalizer on a reconciled Memcached.
const FINALIZER: &str = "cache.example.com/finalizer";

/// How long the leader may take to reconcile every object.
const RECONCILE: Duration = Duration::from_secs(300);

/// The leader counts as done when it wrote nothing but the lock and Events for this long.
const QUIET: Duration = Duration::from_secs(3);

/// The API and memory rows of one contender.
pub(crate) struct Steady {
    /// Requests per minute of the standby.
    pub standby_rate: Series,
    /// Requests per minute of the leader.
    pub leader_rate: Series,
    /// VmRSS samples of the standby, MiB.
    pub standby_memory: Series,
    /// VmRSS samples of the leader, MiB.
    pub leader_memory: Series,
}

fn memcacheds() -> ApiResource {
    ApiResource {
        group: "cache.example.com".into(),
        version: "v1alpha1".into(),
        api_version: "cache.example.com/v1alpha1".into(),
        kind: "Memcached".into(),
        plural: "memcacheds".into(),
    }
}

/// Measures the API and memory rows for one contender on its own cluster: 2 replicas in
/// lease mode at controller-runtime's default timings, `objects` Memcached objects
/// reconciled (when the subject serves Memcached), then a window of `options.window`
/// during which the memory of both replicas is sampled `runs` times and every request they
/// send is counted.
///
/// # Errors
/// When the stage cannot start, the objects are not reconciled in 5 minutes, or the
/// leadership moves during the window.
pub(crate) async fn measure(
    options: &Options,
    contender: &Contender,
) -> Result<Steady, BenchError> {
    options.say(&format!(
        "api and memory, {contender}: starting a simulated cluster with 2 replicas, lease {}",
        LeaseTimings::CONTROLLER_RUNTIME
    ));
    let election = Election::Lease {
        timings: LeaseTimings::CONTROLLER_RUNTIME,
        release_on_cancel: false,
    };
    Stage::run(options, (contender, election, 2), async |stage| {
        measure_on(options, stage, contender).await
    })
    .await
}

async fn measure_on(
    options: &Options,
    stage: &Stage,
    contender: &Contender,
) -> Result<Steady, BenchError> {
    let settled = Utc::now();
    let roles = stage.settle(2, SETTLE).await?;
    if contender.subject.serves_memcached() {
        options.say(&format!(
            "api and memory, {contender}: {} leads; creating {} Memcached objects",
            roles.leader, options.objects
        ));
        create_objects(stage.client(), options.objects).await?;
        wait_reconciled(stage.client(), options.objects).await?;
    } else {
        options.say(&format!(
            "api and memory, {contender}: {} leads; it serves no Memcached",
            roles.leader
        ));
    }
    wait_quiet(stage, &roles.leader, settled).await?;
    let roles = stage.settle(2, SETTLE).await?;
    let standby = roles
        .standbys
        .first()
        .cloned()
        .ok_or_else(|| BenchError::Unsound("no standby to measure".into()))?;
    options.say(&format!(
        "api and memory, {contender}: reconciled; counting requests for {:?}",
        options.window
    ));
    let begin = tokio::time::Instant::now();
    let from = Utc::now();
    let (mut leader_memory, mut standby_memory) = (Vec::new(), Vec::new());
    for sample in 1..=options.runs {
        let memory = stage.memory_by_pod();
        leader_memory.extend(memory.get(&roles.leader));
        standby_memory.extend(memory.get(&standby));
        let next = options.window.mul_f64(sample as f64 / options.runs as f64);
        tokio::time::sleep_until(begin + next).await;
    }
    let to = Utc::now();
    let after = stage.settle(2, SETTLE).await?;
    if after.leader != roles.leader {
        return Err(BenchError::Unsound(format!(
            "leadership moved from {} to {} during the window",
            roles.leader, after.leader
        )));
    }
    let counts = stage
        .tap()
        .query(|events| requests_by_pod(events, from, to));
    let minutes = millis_between(from, to) / 60_000.0;
    let rate = |pod: &str| counts.get(pod).copied().unwrap_or(0) as f64 / minutes;
    let (leader_rate, standby_rate) = (rate(&roles.leader), rate(&standby));
    options.say(&format!(
        "api and memory, {contender}: leader {leader_rate:.1} req/min, standby {standby_rate:.1} req/min"
    ));
    let series = |samples: Vec<f64>| contender.series(samples, Vec::new());
    Ok(Steady {
        standby_rate: series(vec![standby_rate]),
        leader_rate: series(vec![leader_rate]),
        standby_memory: series(standby_memory),
        leader_memory: series(leader_memory),
    })
}

async fn create_objects(client: &Client, objects: usize) -> Result<(), BenchError> {
    let api_error = |what: String| {
        move |source| BenchError::Api {
            what,
            source: Box::new(source),
        }
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(OBJECTS_NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(api_error(format!("creating namespace {OBJECTS_NAMESPACE}")))?;
    let resource = memcacheds();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), OBJECTS_NAMESPACE, &resource);
    for i in 0..objects {
        let name = format!("mc-{i:03}");
        let object = DynamicObject::new(&name, &resource)
            .data(serde_json::json!({ "spec": { "size": SIZE } }));
        api.create(&PostParams::default(), &object)
            .await
            .map_err(api_error(format!("creating Memcached {name}")))?;
    }
    Ok(())
}

/// Waits until every Memcached carries the finalizer and has its Deployment.
async fn wait_reconciled(client: &Client, objects: usize) -> Result<(), BenchError> {
    let resource = memcacheds();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), OBJECTS_NAMESPACE, &resource);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OBJECTS_NAMESPACE);
    let deadline = tokio::time::Instant::now() + RECONCILE;
    loop {
        let finalized = api
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|m| m.finalizers().iter().any(|f| f == FINALIZER))
                    .count()
            })
            .unwrap_or(0);
        let deployed = deployments
            .list(&ListParams::default().labels("app=memcached"))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if finalized >= objects && deployed >= objects {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("the leader to reconcile {objects} Memcached objects"),
                within: RECONCILE,
                last: format!("{finalized} finalized, {deployed} Deployments"),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the leader wrote nothing but the lock and Events for [`QUIET`].
async fn wait_quiet(
    stage: &Stage,
    leader: &str,
    since: chrono::DateTime<Utc>,
) -> Result<(), BenchError> {
    let deadline = tokio::time::Instant::now() + RECONCILE;
    let lock = &stage.subject().lock.name;
    loop {
        let last = stage
            .tap()
            .query(|events| last_work_write(events, leader, lock, since).map(|e| e.time));
        let quiet_for = last.map_or(QUIET, |t| {
            (Utc::now() - t).to_std().unwrap_or(Duration::ZERO)
        });
        if quiet_for >= QUIET {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("the leader {leader} to stop writing"),
                within: RECONCILE,
                last: format!("its last write was {quiet_for:?} ago"),
            });
        }
        tokio::time::sleep(QUIET - quiet_for).await;
    }
}

/// Starts and stops `runs` simulated clusters (3 nodes, no operator), timing each from
/// the call to its first served request (the first audited request that succeeded) and
/// to every node Ready.
///
/// # Errors
/// When a cluster does not start.
pub(crate) async fn cluster_start(options: &Options) -> Result<(Series, Series), BenchError> {
    let (mut first, mut ready) = (Vec::new(), Vec::new());
    for run in 1..=options.runs {
        options.check_interrupt()?;
        let begin = Utc::now();
        let cluster = SimCluster::start(SimClusterConfig::fast())
            .await
            .map_err(|e| BenchError::Cluster(Box::new(e)))?;
        let ready_ms = cluster.ready_after().as_secs_f64() * 1000.0;
        let served = cluster
            .server()
            .state()
            .audit
            .events()
            .iter()
            .filter(|e| e.code < 400)
            .map(|e| e.time)
            .min();
        cluster.shutdown().await;
        let served = served.ok_or_else(|| {
            BenchError::Unsound("a simulated cluster started without serving a request".into())
        })?;
        let first_ms = millis_between(begin, served);
        options.say(&format!(
            "cluster start, run {run}/{}: first request served after {first_ms:.1} ms, nodes Ready after {ready_ms:.1} ms",
            options.runs
        ));
        first.push(first_ms);
        ready.push(ready_ms);
    }
    Ok((
        Series::measured("sim", first, Vec::new()),
        Series::measured("sim", ready, Vec::new()),
    ))
}

/// A real control plane's start to every component ready, from the binaries
/// [`crate::cluster::local::Binaries::find`] finds, at most [`super::REAL_STARTS`] times;
/// not measured (and why) when there are none.
pub(crate) async fn real_start(options: &Options) -> Result<Series, BenchError> {
    use crate::cluster::local::{Binaries, ControlPlane, ControlPlaneConfig};
    let binaries = match Binaries::find() {
        Ok(binaries) => binaries,
        Err(e) => {
            return Ok(Series::not_measured(
                "real",
                &format!("not measured: {}", crate::error_chain(&e)),
            ));
        }
    };
    let runs = options.runs.min(super::REAL_STARTS);
    let mut samples = Vec::new();
    for run in 1..=runs {
        options.check_interrupt()?;
        let plane = options
            .unless_interrupted(async {
                ControlPlane::start(ControlPlaneConfig::new(binaries.clone()))
                    .await
                    .map_err(|e| BenchError::ControlPlane(Box::new(e)))
            })
            .await?;
        let ms = plane.started_in().as_secs_f64() * 1000.0;
        plane.shutdown().await;
        options.say(&format!(
            "real control plane start, run {run}/{runs}: every component ready after {ms:.0} ms"
        ));
        samples.push(ms);
    }
    Ok(Series::measured("real", samples, Vec::new()))
}
