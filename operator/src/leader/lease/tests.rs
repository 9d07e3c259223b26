//! Tests of the lease state machine: client-go's table, release, validation, and the standby/leader loops.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::clock::{FakeClock, SystemClock};
use crate::events::MemorySink;
use crate::leader::fake::{FakeLock, Op, conflict};
use crate::metrics::Metrics;
use crate::shutdown;

const ME: &str = "baz";

/// A Lease fixture: builder on the real type.
struct LeaseBuilder(Lease);

impl LeaseBuilder {
    fn new() -> Self {
        LeaseBuilder(Lease {
            metadata: ObjectMeta {
                name: Some("memcached-operator-lock".into()),
                namespace: Some("operators".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec::default()),
        })
    }
    fn spec(&mut self) -> &mut LeaseSpec {
        self.0.spec.get_or_insert_with(LeaseSpec::default)
    }
    fn held_by(mut self, holder: &str, secs: i32) -> Self {
        self.spec().holder_identity = Some(holder.into());
        self.spec().lease_duration_seconds = Some(secs);
        self.spec().renew_time = Some(MicroTime(Timestamp::UNIX_EPOCH));
        self.spec().acquire_time = Some(MicroTime(Timestamp::UNIX_EPOCH));
        self
    }
    fn transitions(mut self, n: i32) -> Self {
        self.spec().lease_transitions = Some(n);
        self
    }
    /// A renewal by the current holder: a new renewTime, everything else equal.
    fn renewed_at(mut self, secs: i64) -> Self {
        self.spec().renew_time = Some(MicroTime(Timestamp::from_second(secs).unwrap()));
        self
    }
    fn build(self) -> Lease {
        self.0
    }
}

fn config(standby: StandbyMode) -> LeaseConfig {
    LeaseConfig {
        name: "memcached-operator-lock".into(),
        namespace: "operators".into(),
        identity: ME.into(),
        lease_duration: Duration::from_secs(10),
        renew_deadline: Duration::from_secs(8),
        retry_period: Duration::from_secs(2),
        standby,
        labels: BTreeMap::from([("app.kubernetes.io/name".into(), "memcached-operator".into())]),
    }
}

struct Setup<C: Clock> {
    elector: LeaseElector<FakeLock<Lease>, C>,
    lock: FakeLock<Lease>,
    clock: C,
    metrics: Metrics,
    leadership: Leadership,
    events: MemorySink,
}

fn setup_with<C: Clock + Clone>(lock: FakeLock<Lease>, clock: C, standby: StandbyMode) -> Setup<C> {
    let metrics = Metrics::new();
    let leadership = Leadership::new("memcached-operator-lock", metrics.clone());
    let events = MemorySink::new();
    let elector = LeaseElector::new(
        config(standby),
        lock.clone(),
        clock.clone(),
        leadership.clone(),
        Some(Recorder::new(Arc::new(events.clone()))),
    );
    Setup {
        elector,
        lock,
        clock,
        metrics,
        leadership,
        events,
    }
}

fn setup(lock: FakeLock<Lease>) -> Setup<FakeClock> {
    setup_with(lock, FakeClock::new(), StandbyMode::Poll)
}

fn spec_of(lock: &FakeLock<Lease>) -> LeaseSpec {
    lock.current().and_then(|l| l.spec).unwrap_or_default()
}

// ---- client-go's testTryAcquireOrRenew table ----

#[tokio::test]
async fn acquire_from_no_object_creates_the_lease_without_a_transition() {
    let mut s = setup(FakeLock::empty());
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    assert_eq!(s.lock.ops(), ["get", "create"]);
    let spec = spec_of(&s.lock);
    assert_eq!(spec.holder_identity.as_deref(), Some(ME));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.lease_duration_seconds, Some(10));
    let labels = s.lock.current().unwrap().metadata.labels.unwrap();
    assert_eq!(labels["app.kubernetes.io/name"], "memcached-operator");
}

#[tokio::test]
async fn acquire_from_an_unheld_lease_counts_a_transition() {
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new().held_by("", 10).transitions(3).build(),
    ));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    assert_eq!(s.lock.ops(), ["get", "update"]);
    let spec = spec_of(&s.lock);
    assert_eq!(spec.holder_identity.as_deref(), Some(ME));
    assert_eq!(spec.lease_transitions, Some(4));
    assert_ne!(
        spec.acquire_time,
        Some(MicroTime(Timestamp::UNIX_EPOCH)),
        "a new holder sets acquireTime"
    );
}

#[tokio::test]
async fn acquire_from_an_object_without_a_holder_field_counts_a_transition() {
    let mut s = setup(FakeLock::with(LeaseBuilder::new().build()));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    assert_eq!(spec_of(&s.lock).lease_transitions, Some(1));
}

#[tokio::test]
async fn a_held_lease_is_not_acquired_until_its_own_duration_has_passed_since_it_was_observed() {
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new().held_by("bing", 3).build(),
    ));
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    s.clock.advance(Duration::from_millis(2_999));
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    s.clock.advance(Duration::from_millis(1));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    assert_eq!(s.lock.ops(), ["get", "get", "get", "update"]);
    assert_eq!(spec_of(&s.lock).lease_transitions, Some(1));
}

#[tokio::test]
async fn another_holders_record_counts_from_when_the_answer_arrived_not_from_the_request() {
    // The holder renewed while our GET was on its way: its lease runs from at least then,
    // so ours must count from the answer, or we take over early by the GET's latency.
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new().held_by("bing", 3).build(),
    ));
    let clock = s.clock.clone();
    s.lock
        .during_get(move || clock.advance(Duration::from_millis(500)));
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    // 3 s after the request was sent, but only 2.5 s after the answer: still held.
    s.clock.advance(Duration::from_millis(2_500));
    assert!(
        !s.elector.try_acquire_or_renew().await.unwrap(),
        "took the lease before its duration had passed since it was seen"
    );
}

#[tokio::test]
async fn dont_acquire_a_held_lease_that_was_just_observed() {
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new().held_by("bing", 10).build(),
    ));
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    assert_eq!(
        s.lock.ops(),
        ["get"],
        "no write to a lease someone else holds"
    );
    assert_eq!(spec_of(&s.lock).holder_identity.as_deref(), Some("bing"));
    assert_eq!(s.elector.observed_holder(), "bing");
}

#[tokio::test]
async fn acquire_from_an_expired_observed_lease_whose_holder_stopped_renewing() {
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new()
            .held_by("bing", 10)
            .transitions(1)
            .build(),
    ));
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    s.clock.advance(Duration::from_secs(11));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    let spec = spec_of(&s.lock);
    assert_eq!(spec.holder_identity.as_deref(), Some(ME));
    assert_eq!(spec.lease_transitions, Some(2));
}

#[tokio::test]
async fn a_renewal_by_the_holder_restarts_the_observed_validity() {
    let s0 = FakeLock::with(LeaseBuilder::new().held_by("bing", 10).build());
    let mut s = setup(s0);
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    s.clock.advance(Duration::from_secs(9));
    s.lock.put(
        LeaseBuilder::new()
            .held_by("bing", 10)
            .renewed_at(100)
            .build(),
    );
    assert!(
        !s.elector.try_acquire_or_renew().await.unwrap(),
        "a changed record is observed now"
    );
    s.clock.advance(Duration::from_secs(9));
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    s.clock.advance(Duration::from_secs(1));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
}

#[tokio::test]
async fn renew_time_is_never_compared_with_the_local_clock() {
    // The holder's clock is far behind ours: its renewTime is in 1970. It still holds.
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new()
            .held_by("bing", 10)
            .renewed_at(0)
            .build(),
    ));
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    // And far ahead: renewTime in the future does not extend the lease either.
    s.lock.put(
        LeaseBuilder::new()
            .held_by("bing", 10)
            .renewed_at(4_000_000_000)
            .build(),
    );
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    s.clock.advance(Duration::from_secs(10));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
}

#[tokio::test]
async fn renew_an_already_acquired_lease_keeps_acquire_time_and_transitions() {
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new().held_by("", 10).transitions(5).build(),
    ));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    let first = spec_of(&s.lock);
    s.clock.advance(Duration::from_secs(2));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    let second = spec_of(&s.lock);
    assert_eq!(second.lease_transitions, first.lease_transitions);
    assert_eq!(second.acquire_time, first.acquire_time);
    assert_ne!(second.renew_time, first.renew_time);
    assert_eq!(
        s.lock.ops(),
        ["get", "update", "update"],
        "renewal takes the fast path: no read"
    );
}

#[tokio::test]
async fn the_fast_path_falls_back_to_a_read_after_a_conflict() {
    // client-go TestFastPathLeaderElection: get, create, update, update(409), get, update.
    let mut s = setup(FakeLock::empty());
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    s.lock.fail_next(Op::Update, conflict());
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    assert_eq!(
        s.lock.ops(),
        ["get", "create", "update", "update(error)", "get", "update"]
    );
}

#[tokio::test]
async fn a_conflicting_write_by_another_candidate_is_an_error_not_a_win() {
    let mut s = setup(FakeLock::with(LeaseBuilder::new().held_by("", 10).build()));
    s.lock.fail_next(Op::Update, conflict());
    let err = s.elector.try_acquire_or_renew().await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref st) if st.is_conflict()));
}

#[tokio::test]
async fn losing_the_create_race_is_an_error_and_the_next_try_sees_the_winner() {
    let mut s = setup(FakeLock::empty());
    s.lock
        .fail_next(Op::Create, crate::leader::fake::already_exists());
    assert!(s.elector.try_acquire_or_renew().await.is_err());
    s.lock.put(LeaseBuilder::new().held_by("bing", 10).build());
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
}

// ---- release ----

#[tokio::test]
async fn release_clears_the_holder_sets_one_second_and_keeps_transitions() {
    let mut s = setup(FakeLock::with(
        LeaseBuilder::new().held_by("", 10).transitions(2).build(),
    ));
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    assert!(s.elector.release().await.unwrap());
    let spec = spec_of(&s.lock);
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(3));
    assert_eq!(
        s.lock.ops(),
        ["get", "update", "get", "update"],
        "release reads first"
    );
}

#[tokio::test]
async fn a_stale_leader_does_not_release_a_lease_someone_else_now_holds() {
    let mut s = setup(FakeLock::empty());
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    // We were deposed (our renewals failed, someone took over); our observed record still says us.
    s.lock.put(
        LeaseBuilder::new()
            .held_by("bing", 10)
            .transitions(1)
            .build(),
    );
    assert!(!s.elector.release().await.unwrap());
    assert_eq!(spec_of(&s.lock).holder_identity.as_deref(), Some("bing"));
    assert_eq!(s.lock.ops().last().map(String::as_str), Some("get"));
}

#[tokio::test]
async fn release_of_a_missing_lease_does_nothing() {
    let mut s = setup(FakeLock::empty());
    assert!(!s.elector.release().await.unwrap());
    assert_eq!(s.lock.ops(), ["get"]);
}

#[tokio::test]
async fn release_retries_after_a_conflict_with_a_fresh_read() {
    let mut s = setup(FakeLock::empty());
    assert!(s.elector.try_acquire_or_renew().await.unwrap());
    s.lock.fail_next(Op::Update, conflict());
    assert!(s.elector.release().await.unwrap());
    assert_eq!(
        s.lock.ops(),
        ["get", "create", "get", "update(error)", "get", "update"]
    );
    assert_eq!(spec_of(&s.lock).holder_identity.as_deref(), Some(""));
}

#[tokio::test]
async fn a_released_lease_is_acquired_at_once_by_a_candidate() {
    let lock = FakeLock::with(LeaseBuilder::new().held_by("bing", 10).build());
    let mut s = setup(lock);
    assert!(!s.elector.try_acquire_or_renew().await.unwrap());
    let mut released = LeaseBuilder::new().held_by("", 1).transitions(1).build();
    released.spec.as_mut().unwrap().lease_duration_seconds = Some(1);
    s.lock.put(released);
    assert!(
        s.elector.try_acquire_or_renew().await.unwrap(),
        "an empty holder skips the validity check"
    );
}

// ---- validation ----

#[test]
fn timings_must_be_positive_and_ordered_as_client_go_requires() {
    let s = Duration::from_secs;
    assert_eq!(validate_timings(s(15), s(10), s(2)), Ok(()));
    assert_eq!(
        validate_timings(s(10), s(10), s(2)),
        Err(ConfigError::LeaseDurationNotGreaterThanRenewDeadline {
            lease_duration: s(10),
            renew_deadline: s(10)
        })
    );
    assert_eq!(
        validate_timings(s(15), Duration::from_millis(2400), s(2)),
        Err(
            ConfigError::RenewDeadlineNotGreaterThanJitteredRetryPeriod {
                renew_deadline: Duration::from_millis(2400),
                retry_period: s(2)
            }
        )
    );
    assert_eq!(
        validate_timings(s(15), Duration::from_millis(2401), s(2)),
        Ok(())
    );
    assert_eq!(
        validate_timings(s(0), s(10), s(2)),
        Err(ConfigError::NotPositive {
            flag: "--lease-duration"
        })
    );
    assert_eq!(
        validate_timings(s(15), s(0), s(2)),
        Err(ConfigError::NotPositive {
            flag: "--renew-deadline"
        })
    );
    assert_eq!(
        validate_timings(s(15), s(10), s(0)),
        Err(ConfigError::NotPositive {
            flag: "--retry-period"
        })
    );
    assert_eq!(
        validate_timings(Duration::from_millis(15_500), s(10), s(2)),
        Err(ConfigError::LeaseDurationNotWholeSeconds(
            Duration::from_millis(15_500)
        ))
    );
}

#[test]
fn validation_messages_name_the_rule() {
    let s = Duration::from_secs;
    let msg = validate_timings(s(10), s(10), s(2))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("--lease-duration") && msg.contains("must be greater than --renew-deadline"),
        "{msg}"
    );
    let msg = validate_timings(s(15), s(2), s(2)).unwrap_err().to_string();
    assert!(
        msg.contains("must be greater than 1.2 × --retry-period"),
        "{msg}"
    );
}

#[test]
fn an_empty_identity_is_rejected() {
    let mut cfg = config(StandbyMode::Poll);
    cfg.identity.clear();
    assert_eq!(cfg.validate(), Err(ConfigError::EmptyIdentity));
}

// ---- the loops, on tokio's paused clock (no real waiting) ----

#[tokio::test(start_paused = true)]
async fn a_polling_standby_takes_over_once_the_leader_stops_renewing() {
    let lock = FakeLock::with(LeaseBuilder::new().held_by("bing", 10).build());
    let mut s = setup_with(lock, SystemClock, StandbyMode::Poll);
    let start = Instant::now();
    let (_t, mut sd) = shutdown::channel();
    assert!(s.elector.acquire(&mut sd).await);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(10)
            && waited < Duration::from_secs(10) + Duration::from_millis(4400),
        "{waited:?}"
    );
    assert!(s.leadership.is_leading());
    assert_eq!(s.metrics.leader_status("memcached-operator-lock"), Some(1));
    assert_eq!(s.events.reasons(), ["LeaderElection"]);
    assert_eq!(s.events.events()[0].1.message, "baz became leader");
    assert_eq!(s.events.events()[0].0.kind.as_deref(), Some("Lease"));
}

#[tokio::test(start_paused = true)]
async fn a_watching_standby_makes_no_requests_while_the_leader_renews_and_takes_a_release_at_once()
{
    let lock = FakeLock::with(LeaseBuilder::new().held_by("bing", 10).build());
    let s = setup_with(lock.clone(), SystemClock, StandbyMode::Watch);
    let (mut elector, leadership) = (s.elector, s.leadership.clone());
    let (_t, mut sd) = shutdown::channel();
    let task = tokio::spawn(async move { elector.acquire(&mut sd).await });
    for i in 1..=30 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        lock.put(
            LeaseBuilder::new()
                .held_by("bing", 10)
                .renewed_at(i)
                .build(),
        );
    }
    assert!(!leadership.is_leading());
    assert_eq!(lock.ops(), ["get"], "one attempt, then only the watch");
    let released_at = Instant::now();
    lock.put(LeaseBuilder::new().held_by("", 1).transitions(1).build());
    assert!(task.await.unwrap());
    assert!(
        released_at.elapsed() < Duration::from_millis(10),
        "took {:?}",
        released_at.elapsed()
    );
    assert_eq!(spec_of(&lock).holder_identity.as_deref(), Some(ME));
    assert_eq!(spec_of(&lock).lease_transitions, Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_watching_standby_takes_over_when_the_observed_validity_runs_out() {
    let lock = FakeLock::with(LeaseBuilder::new().held_by("bing", 10).build());
    let s = setup_with(lock.clone(), SystemClock, StandbyMode::Watch);
    let mut elector = s.elector;
    let (_t, mut sd) = shutdown::channel();
    let task = tokio::spawn(async move { elector.acquire(&mut sd).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    lock.put(
        LeaseBuilder::new()
            .held_by("bing", 10)
            .renewed_at(1)
            .build(),
    );
    let last_renewal = Instant::now();
    assert!(task.await.unwrap());
    let waited = last_renewal.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_millis(10_010),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_a_waiting_standby() {
    let lock = FakeLock::with(LeaseBuilder::new().held_by("bing", 10).build());
    let mut s = setup_with(lock, SystemClock, StandbyMode::Watch);
    let (t, mut sd) = shutdown::channel();
    t.trigger();
    assert!(!s.elector.acquire(&mut sd).await);
    assert!(!s.leadership.is_leading());
    assert_eq!(s.metrics.leader_status("memcached-operator-lock"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_leader_renews_every_retry_period() {
    let mut s = setup_with(FakeLock::empty(), SystemClock, StandbyMode::Poll);
    let (t, mut sd) = shutdown::channel();
    assert!(s.elector.acquire(&mut sd).await);
    let lock = s.lock.clone();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(9_500)).await;
        t.trigger();
    });
    assert_eq!(s.elector.hold(&mut sd).await, Stop::Cancelled);
    stopper.await.unwrap();
    assert_eq!(
        lock.ops(),
        ["get", "create", "update", "update", "update", "update"]
    );
    assert!(
        s.leadership.is_leading(),
        "cancel leaves stepping down to the caller"
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_shutting_down_keeps_renewing_until_its_work_has_ended() {
    let mut s = setup_with(FakeLock::empty(), SystemClock, StandbyMode::Poll);
    let (_t, mut sd) = shutdown::channel();
    assert!(s.elector.acquire(&mut sd).await);
    // Work that takes two lease durations to end: the lease must outlive it.
    let ended = s
        .elector
        .renew_while(async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            "ended"
        })
        .await;
    assert_eq!(ended, "ended");
    let renewals = s.lock.ops().iter().filter(|op| *op == "update").count();
    assert!(renewals >= 9, "{:?}", s.lock.ops());
    assert!(s.leadership.is_leading());
    assert!(s.elector.release().await.unwrap());
    assert_eq!(spec_of(&s.lock).holder_identity.as_deref(), Some(""));
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_steps_down_at_the_renew_deadline() {
    let mut s = setup_with(FakeLock::empty(), SystemClock, StandbyMode::Poll);
    let (_t, mut sd) = shutdown::channel();
    assert!(s.elector.acquire(&mut sd).await);
    let acquired = Instant::now();
    s.lock.set_unavailable(true);
    assert_eq!(
        s.elector.hold(&mut sd).await,
        Stop::Lost(Lost::RenewDeadlineExceeded(Duration::from_secs(8)))
    );
    assert_eq!(acquired.elapsed(), Duration::from_secs(8));
    assert!(!s.leadership.is_leading());
    assert_eq!(s.metrics.leader_status("memcached-operator-lock"), Some(0));
    assert_eq!(s.events.reasons(), ["LeaderElection", "LeaderElection"]);
    assert_eq!(s.events.events()[1].1.message, "baz stopped leading");
}

#[tokio::test(start_paused = true)]
async fn a_hung_renewal_cannot_keep_a_leader_past_the_renew_deadline() {
    let mut s = setup_with(FakeLock::empty(), SystemClock, StandbyMode::Poll);
    let (_t, mut sd) = shutdown::channel();
    assert!(s.elector.acquire(&mut sd).await);
    let acquired = Instant::now();
    s.lock.set_hang(true);
    assert!(matches!(
        s.elector.hold(&mut sd).await,
        Stop::Lost(Lost::RenewDeadlineExceeded(_))
    ));
    assert_eq!(acquired.elapsed(), Duration::from_secs(8));
    assert!(!s.leadership.is_leading());
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_sees_another_holder_steps_down_at_once() {
    let mut s = setup_with(FakeLock::empty(), SystemClock, StandbyMode::Poll);
    let (_t, mut sd) = shutdown::channel();
    assert!(s.elector.acquire(&mut sd).await);
    s.lock.put(
        LeaseBuilder::new()
            .held_by("bing", 10)
            .transitions(1)
            .build(),
    );
    let taken = Instant::now();
    assert_eq!(
        s.elector.hold(&mut sd).await,
        Stop::Lost(Lost::TakenBy("bing".into()))
    );
    assert_eq!(
        taken.elapsed(),
        Duration::from_secs(2),
        "noticed at the next renewal"
    );
    assert!(!s.leadership.is_leading());
}

#[tokio::test(start_paused = true)]
async fn the_write_guard_closes_before_a_frozen_leaders_lease_could_be_taken() {
    use crate::leader::WriteGuard;
    let mut s = setup_with(FakeLock::empty(), SystemClock, StandbyMode::Poll);
    let (_t, mut sd) = shutdown::channel();
    assert!(s.elector.acquire(&mut sd).await);
    let guard = WriteGuard::leading(
        s.leadership.clone(),
        Arc::new(SystemClock),
        Some(Duration::from_secs(8)),
    );
    assert!(guard.check().is_ok());
    // The process is frozen: no renewals. Others may take over 10 s after they observed the last one.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        guard.check().is_err(),
        "writes stop at the renew deadline, before the lease runs out"
    );
    assert!(
        s.leadership.is_leading(),
        "even though nobody told the leader yet"
    );
}

#[tokio::test(start_paused = true)]
async fn release_on_cancel_hands_the_lease_to_a_watching_standby_immediately() {
    let lock = FakeLock::empty();
    let mut leader = setup_with(lock.clone(), SystemClock, StandbyMode::Watch);
    let (_t, mut sd) = shutdown::channel();
    assert!(leader.elector.acquire(&mut sd).await);

    let mut cfg = config(StandbyMode::Watch);
    cfg.identity = "standby".into();
    let standby_leadership = Leadership::new("memcached-operator-lock", Metrics::new());
    let mut standby = LeaseElector::new(
        cfg,
        lock.clone(),
        SystemClock,
        standby_leadership.clone(),
        None,
    );
    let (_t2, mut sd2) = shutdown::channel();
    let task = tokio::spawn(async move { standby.acquire(&mut sd2).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!standby_leadership.is_leading());

    let released_at = Instant::now();
    assert!(leader.elector.release().await.unwrap());
    leader.elector.stopped_leading().await;
    assert!(task.await.unwrap());
    assert!(released_at.elapsed() < Duration::from_millis(10));
    let spec = spec_of(&lock);
    assert_eq!(spec.holder_identity.as_deref(), Some("standby"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(
        leader.metrics.leader_status("memcached-operator-lock"),
        Some(0)
    );
}
