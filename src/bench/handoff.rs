//! The handoff benchmarks: lease handoff after a graceful release, lease takeover after a
//! kill, for-life takeover after the garbage collector deletes the lock. Each runs many
//! times on one cluster and one operator Deployment; each time is read from the audit.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::audit_tap::{
    last_renewal, lease_taken, lock_collected, lock_created, millis_between, pod_of,
};
use super::stage::{Election, HANDOFF_TIMINGS, Roles, Stage};
use super::{BenchError, Contender, Detail, HANDOFF, Options, SETTLE, Series};
use crate::sim::apiserver::audit::AuditEvent;
use crate::subject::Lock;

/// The longest first wait of a polling standby: client-go's 2.2 × RetryPeriod (1.1 s
/// here), operator-lib's 1 s + 20 %.
const FAULT_PHASE: Duration = Duration::from_millis(1200);

/// The lease rows of one contender.
pub(crate) struct LeaseSeries {
    /// SIGTERM → new holder.
    pub release: Series,
    /// Kill → new holder.
    pub kill: Series,
    /// Observed expiry → new holder.
    pub expiry: Series,
}

/// Samples and details of one series being measured.
#[derive(Default)]
struct Collect {
    samples: Vec<f64>,
    details: Vec<Detail>,
}

impl Collect {
    fn push(&mut self, value: f64, detail: Detail) {
        self.samples.push(value);
        self.details.push(detail);
    }

    fn into_series(self, contender: &Contender) -> Series {
        contender.series(self.samples, self.details)
    }
}

/// When `leader` last wrote the lease `lock` before `before` (its last renewal or its
/// release).
fn last_lease_write(
    events: &[AuditEvent],
    lock: &Lock,
    leader: &str,
    before: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    last_renewal(events, &lock.namespace, &lock.name, leader, before).map(|e| e.time)
}

/// The detail of run `run`: from `from` to the acquiring write `taken`.
fn detail(
    run: usize,
    from: DateTime<Utc>,
    taken: &AuditEvent,
    old_leader: &str,
    note: Option<String>,
) -> Detail {
    Detail {
        run,
        from,
        to: taken.time,
        old_leader: old_leader.to_string(),
        new_leader: pod_of(taken).unwrap_or("?").to_string(),
        note,
    }
}

/// Readies one run: the leader alone, then taken out of its ReplicaSet so that its
/// replacement starts now, is Ready and campaigns before the fault. The fault thus finds
/// exactly one standby, and no pod starts during the handoff (a pod starting then would
/// race the standby for the free lock: in the simulator a pod starts in a fraction of a
/// second, not in the seconds a real cluster takes).
///
/// With `renewed`, also waits for a renewal of the Lease sent after the standby began
/// to campaign: the last renewal before a kill is then one the standby can see, so the
/// lease's expiry is the last renewal + LeaseDuration for it too.
///
/// Then waits a random moment below [`FAULT_PHASE`], so that the fault falls anywhere in
/// a polling standby's cycle rather than just after its first poll.
async fn prepare(stage: &Stage, renewed: bool) -> Result<Roles, BenchError> {
    let alone = stage.settle(1, SETTLE).await?;
    stage.detach(&alone.leader).await?;
    let roles = stage.settle(2, SETTLE).await?;
    if roles.leader != alone.leader {
        return Err(BenchError::Unsound(format!(
            "leadership moved from {} to {} before the fault",
            alone.leader, roles.leader
        )));
    }
    if let Some(since) = roles.campaigning_since.values().max().filter(|_| renewed) {
        stage
            .tap()
            .wait_for(
                &format!("{} to renew the lease", roles.leader),
                SETTLE,
                |events| {
                    last_lease_write(
                        events,
                        &stage.subject().lock,
                        &roles.leader,
                        DateTime::<Utc>::MAX_UTC,
                    )
                    .filter(|t| t > since)
                },
            )
            .await?;
    }
    let phase = rand::random_range(0..FAULT_PHASE.as_millis() as u64);
    tokio::time::sleep(Duration::from_millis(phase)).await;
    Ok(roles)
}

fn progress(options: &Options, what: &str, who: &Contender, run: usize, ms: f64, d: &Detail) {
    options.say(&format!(
        "{what}, {who}, run {run}/{}: {ms:.1} ms ({} -> {})",
        options.runs, d.old_leader, d.new_leader
    ));
}

/// Measures the lease rows for one contender: `runs` graceful releases (when `release`),
/// then `runs` kills (when `kill`), on one cluster with one replica (and its replacement) at
/// [`HANDOFF_TIMINGS`], releasing on cancel as its profile says.
///
/// # Errors
/// When the stage cannot start, or a settle or handoff does not happen in its bound.
pub(crate) async fn lease(
    options: &Options,
    contender: &Contender,
    release: bool,
    kill: bool,
) -> Result<LeaseSeries, BenchError> {
    let election = Election::Lease {
        timings: HANDOFF_TIMINGS,
        release_on_cancel: true,
    };
    options.say(&format!(
        "lease {}, {contender}: starting a simulated cluster and the operator",
        HANDOFF_TIMINGS
    ));
    Stage::run(options, (contender, election, 1), async |stage| {
        lease_runs(options, stage, contender, release, kill).await
    })
    .await
}

async fn lease_runs(
    options: &Options,
    stage: &Stage,
    contender: &Contender,
    release: bool,
    kill: bool,
) -> Result<LeaseSeries, BenchError> {
    let lock = &stage.subject().lock;
    let mut released = Collect::default();
    let mut killed = Collect::default();
    let mut expired = Collect::default();
    for run in (1..=options.runs).filter(|_| release) {
        let roles = prepare(stage, false).await?;
        let fault = stage.delete_pod(&roles.leader, None).await?;
        let taken = lease_taken_after(stage, &roles, &fault).await?;
        let ms = millis_between(fault.time, taken.time);
        let release = stage
            .tap()
            .query(|events| last_lease_write(events, lock, &roles.leader, taken.time))
            .filter(|t| *t >= fault.time)
            .map(|t| millis_between(fault.time, t));
        let note =
            release.map(|ms| format!("the leader released the lease {ms:.1} ms after SIGTERM"));
        let detail = detail(run, fault.time, &taken, &roles.leader, note);
        progress(options, "lease release", contender, run, ms, &detail);
        released.push(ms, detail);
    }
    for run in (1..=options.runs).filter(|_| kill) {
        let roles = prepare(stage, true).await?;
        let fault = stage.delete_pod(&roles.leader, Some(0)).await?;
        let taken = lease_taken_after(stage, &roles, &fault).await?;
        let renewed = stage
            .tap()
            .query(|events| last_lease_write(events, lock, &roles.leader, taken.time))
            .ok_or_else(|| {
                BenchError::Unsound(format!(
                    "the audit has no write of the lease by its leader {}",
                    roles.leader
                ))
            })?;
        let expiry = renewed
            + chrono::Duration::from_std(HANDOFF_TIMINGS.lease_duration).unwrap_or_default();
        let note = format!("last renewal at {}", renewed.to_rfc3339());
        let detail = detail(run, fault.time, &taken, &roles.leader, Some(note));
        let ms = millis_between(fault.time, taken.time);
        progress(options, "lease kill", contender, run, ms, &detail);
        killed.push(ms, detail.clone());
        expired.push(
            millis_between(expiry, taken.time),
            Detail {
                from: expiry,
                ..detail
            },
        );
    }
    Ok(LeaseSeries {
        release: released.into_series(contender),
        kill: killed.into_series(contender),
        expiry: expired.into_series(contender),
    })
}

async fn lease_taken_after(
    stage: &Stage,
    roles: &Roles,
    fault: &AuditEvent,
) -> Result<AuditEvent, BenchError> {
    let lock = &stage.subject().lock;
    stage
        .tap()
        .wait_for(
            &format!("another replica to take the lease from {}", roles.leader),
            HANDOFF,
            |events| {
                lease_taken(
                    events,
                    &lock.namespace,
                    &lock.name,
                    &roles.leader,
                    fault.time,
                )
                .cloned()
            },
        )
        .await
}

/// Measures the for-life row for one contender: `runs` graceful deletions of the leader's
/// pod on one cluster, each timed from the garbage collector's delete of
/// the lock to the next create of it.
///
/// # Errors
/// When the stage cannot start, or a settle, collection or takeover does not happen in
/// its bound.
pub(crate) async fn for_life(
    options: &Options,
    contender: &Contender,
) -> Result<Series, BenchError> {
    options.say(&format!(
        "for-life, {contender}: starting a simulated cluster and the operator"
    ));
    Stage::run(options, (contender, Election::ForLife, 1), async |stage| {
        for_life_runs(options, stage, contender).await
    })
    .await
}

async fn for_life_runs(
    options: &Options,
    stage: &Stage,
    contender: &Contender,
) -> Result<Series, BenchError> {
    let lock = &stage.subject().lock;
    let mut taken = Collect::default();
    for run in 1..=options.runs {
        let roles = prepare(stage, false).await?;
        let fault = stage.delete_pod(&roles.leader, None).await?;
        let collected = stage
            .tap()
            .wait_for(
                &format!(
                    "the garbage collector to delete the lock of {}",
                    roles.leader
                ),
                HANDOFF,
                |events| lock_collected(events, &lock.namespace, &lock.name, fault.time).cloned(),
            )
            .await?;
        let created = stage
            .tap()
            .wait_for("another replica to create the lock", HANDOFF, |events| {
                lock_created(events, &lock.namespace, &lock.name, collected.time).cloned()
            })
            .await?;
        let note = pod_of(&created)
            .and_then(|pod| roles.campaigning_since.get(pod))
            .map(|since| {
                format!(
                    "the new leader had campaigned for {:.1} s",
                    millis_between(*since, collected.time) / 1000.0
                )
            });
        let ms = millis_between(collected.time, created.time);
        let detail = detail(run, collected.time, &created, &roles.leader, note);
        progress(options, "for-life", contender, run, ms, &detail);
        taken.push(ms, detail);
    }
    Ok(taken.into_series(contender))
}
