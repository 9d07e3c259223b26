//! Tests of leader-for-life: operator-lib's Become cases and what this elector does beyond them.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::*;
use crate::clock::SystemClock;
use crate::events::MemorySink;
use crate::leader::fake::{FakeLock, FakePods};
use crate::metrics::Metrics;
use crate::shutdown;

const LOCK: &str = "memcached-operator-lock";

/// A Pod fixture: builder on the real type.
struct PodBuilder(Pod);

impl PodBuilder {
    fn new(name: &str, uid: &str) -> Self {
        PodBuilder(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("operators".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        })
    }
    fn failed(mut self, reason: &str) -> Self {
        let st = self.0.status.get_or_insert_with(PodStatus::default);
        st.phase = Some("Failed".into());
        st.reason = Some(reason.into());
        self
    }
    fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        self
    }
    fn build(self) -> Pod {
        self.0
    }
}

fn owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: name.into(),
        uid: uid.into(),
        ..OwnerReference::default()
    }
}

/// A lock ConfigMap owned by the given pods.
fn lock_owned_by(owners: &[OwnerReference]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(LOCK.into()),
            namespace: Some("operators".into()),
            owner_references: Some(owners.to_vec()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

fn me() -> Pod {
    PodBuilder::new("op-a", "uid-a").build()
}

struct Setup {
    elector: ForLifeElector<FakeLock<ConfigMap>, FakePods, SystemClock>,
    lock: FakeLock<ConfigMap>,
    pods: FakePods,
    leadership: Leadership,
    metrics: Metrics,
    events: MemorySink,
}

fn setup(
    lock: FakeLock<ConfigMap>,
    pods: impl IntoIterator<Item = Pod>,
    standby: StandbyMode,
) -> Setup {
    let pods = FakePods::new(pods).collecting(&lock);
    let metrics = Metrics::new();
    let leadership = Leadership::new(LOCK, metrics.clone());
    let events = MemorySink::new();
    let cfg = ForLifeConfig {
        lock_name: LOCK.into(),
        namespace: "operators".into(),
        pod_name: "op-a".into(),
        standby,
        labels: BTreeMap::from([("app.kubernetes.io/name".into(), "memcached-operator".into())]),
    };
    let elector = ForLifeElector::new(
        cfg,
        lock.clone(),
        pods.clone(),
        SystemClock,
        leadership.clone(),
        Some(Recorder::new(Arc::new(events.clone()))),
    );
    Setup {
        elector,
        lock,
        pods,
        leadership,
        metrics,
        events,
    }
}

/// Runs `become_leader` for at most `limit` of virtual time; `true` when it won.
async fn become_within(s: &mut Setup, limit: Duration) -> bool {
    let (t, mut sd) = shutdown::channel();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        t.trigger();
    });
    let won = s.elector.become_leader(&mut sd).await.unwrap();
    stopper.abort();
    won
}

// ---- operator-lib's Become cases ----

#[test]
fn a_missing_pod_name_names_the_downward_api_fix() {
    let msg = Error::MissingPodName.to_string();
    assert!(
        msg.contains("POD_NAME") && msg.contains("Downward API") && msg.contains("metadata.name"),
        "{msg}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_own_pod_is_an_error() {
    let mut s = setup(FakeLock::empty(), [], StandbyMode::Watch);
    let (_t, mut sd) = shutdown::channel();
    let err = s.elector.become_leader(&mut sd).await.unwrap_err();
    assert!(
        matches!(err, Error::OwnPodNotFound(ref n) if n == "op-a"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_no_lock_the_candidate_creates_one_owned_by_its_pod_uid() {
    let mut s = setup(FakeLock::empty(), [me()], StandbyMode::Watch);
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    let cm = s.lock.current().unwrap();
    assert_eq!(
        cm.metadata.owner_references.unwrap(),
        [owner("op-a", "uid-a")]
    );
    assert_eq!(
        cm.metadata.labels.unwrap()["app.kubernetes.io/name"],
        "memcached-operator"
    );
    assert_eq!(s.lock.ops(), ["get", "create"]);
    assert!(s.leadership.is_leading());
    assert_eq!(s.metrics.leader_status(LOCK), Some(1));
    assert_eq!(s.events.reasons(), ["LeaderElection"]);
    assert_eq!(s.events.events()[0].1.message, "op-a became leader");
    assert_eq!(s.events.events()[0].0.kind.as_deref(), Some("ConfigMap"));
}

#[tokio::test(start_paused = true)]
async fn an_existing_lock_owned_by_this_pods_uid_means_it_already_leads() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-a", "uid-a")]));
    let mut s = setup(lock, [me()], StandbyMode::Watch);
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    assert_eq!(s.lock.ops(), ["get"], "no create after a container restart");
}

#[tokio::test(start_paused = true)]
async fn a_lock_owned_by_the_same_pod_name_with_another_uid_is_not_ours() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-a", "uid-old")]));
    let mut s = setup(lock, [me()], StandbyMode::Watch);
    assert!(!become_within(&mut s, Duration::from_secs(120)).await);
    assert!(!s.leadership.is_leading());
    assert_eq!(s.metrics.leader_status(LOCK), Some(0));
    // Garbage collection removes the old pod's lock: now it is ours to take.
    s.lock.delete();
    let t = Instant::now();
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    assert!(t.elapsed() < Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn an_evicted_leader_pod_is_deleted_and_its_lock_taken_once_collected() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let leader = PodBuilder::new("op-b", "uid-b").failed("Evicted").build();
    let mut s = setup(lock, [me(), leader], StandbyMode::Watch);
    let t = Instant::now();
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    assert!(t.elapsed() < Duration::from_millis(10));
    assert!(!s.pods.exists("op-b"));
    assert!(s.pods.ops().contains(&"delete pod op-b".to_owned()));
    assert_eq!(
        s.lock.current().unwrap().metadata.owner_references.unwrap(),
        [owner("op-a", "uid-a")]
    );
}

#[tokio::test(start_paused = true)]
async fn a_preempted_leader_pod_is_deleted_and_its_lock_taken_once_collected() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let leader = PodBuilder::new("op-b", "uid-b")
        .failed("Preempting")
        .build();
    let mut s = setup(lock, [me(), leader], StandbyMode::Watch);
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    assert!(!s.pods.exists("op-b"));
}

#[tokio::test(start_paused = true)]
async fn a_missing_leader_pod_means_waiting_for_garbage_collection_then_taking_over_at_once() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let mut s = setup(lock, [me()], StandbyMode::Watch);
    assert!(!become_within(&mut s, Duration::from_secs(30)).await);
    assert!(s.pods.ops().iter().all(|op| !op.starts_with("delete")));
    s.lock.delete();
    let t = Instant::now();
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    assert!(
        t.elapsed() < Duration::from_millis(10),
        "took {:?}",
        t.elapsed()
    );
}

// ---- beyond operator-lib ----

#[tokio::test(start_paused = true)]
async fn a_lock_deleted_by_hand_under_a_running_leader_is_taken_only_after_operator_libs_first_wait()
 {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let mut s = setup(
        lock,
        [me(), PodBuilder::new("op-b", "uid-b").build()],
        StandbyMode::Watch,
    );
    let lock = s.lock.clone();
    let deleted = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        lock.delete();
        Instant::now()
    });
    assert!(become_within(&mut s, Duration::from_secs(30)).await);
    let taken = Instant::now() - deleted.await.unwrap();
    assert!(
        taken >= INITIAL_BACKOFF && taken < INITIAL_BACKOFF + Duration::from_millis(10),
        "taken {taken:?} after the delete"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lock_that_won_the_race_and_vanished_before_it_was_read_is_taken_only_after_the_first_wait()
 {
    // Another Pod's lock was there at this Pod's create and is gone at its next read.
    let lock = FakeLock::empty();
    lock.fail_next(
        crate::leader::fake::Op::Create,
        crate::leader::fake::already_exists(),
    );
    let mut s = setup(lock, [me()], StandbyMode::Watch);
    let t = Instant::now();
    assert!(become_within(&mut s, Duration::from_secs(5)).await);
    assert!(
        t.elapsed() >= INITIAL_BACKOFF && t.elapsed() < INITIAL_BACKOFF + Duration::from_millis(10),
        "took {:?}",
        t.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_lock_collected_after_its_leaders_pod_is_gone_is_taken_at_once() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let mut s = setup(
        lock,
        [me(), PodBuilder::new("op-b", "uid-b").build()],
        StandbyMode::Watch,
    );
    let pods = s.pods.clone();
    let collected = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        // The garbage collector removes the lock with its Pod.
        PodBackend::delete(&pods, "op-b", "uid-b").await.unwrap();
        Instant::now()
    });
    assert!(become_within(&mut s, Duration::from_secs(30)).await);
    let taken = Instant::now() - collected.await.unwrap();
    assert!(
        taken < Duration::from_millis(10),
        "taken {taken:?} after the delete"
    );
}

#[tokio::test(start_paused = true)]
async fn a_live_leaders_lock_is_never_deleted_and_its_pod_left_alone() {
    // The lock backend has no delete at all: the only way a lock goes is garbage collection.
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let mut s = setup(
        lock,
        [me(), PodBuilder::new("op-b", "uid-b").build()],
        StandbyMode::Poll,
    );
    assert!(!become_within(&mut s, Duration::from_secs(300)).await);
    assert!(s.lock.current().is_some());
    assert!(s.pods.exists("op-b"));
    assert!(s.pods.ops().iter().all(|op| !op.starts_with("delete")));
    assert!(
        s.lock.ops().iter().all(|op| op == "get"),
        "{:?}",
        s.lock.ops()
    );
}

#[tokio::test(start_paused = true)]
async fn an_evicted_leader_pod_already_being_deleted_is_not_deleted_again() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let leader = PodBuilder::new("op-b", "uid-b")
        .failed("Evicted")
        .deleting()
        .build();
    let mut s = setup(lock, [me(), leader], StandbyMode::Watch);
    assert!(!become_within(&mut s, Duration::from_secs(30)).await);
    assert!(s.pods.exists("op-b"));
}

#[tokio::test(start_paused = true)]
async fn a_lock_without_exactly_one_pod_owner_is_waited_on() {
    let lock = FakeLock::with(lock_owned_by(&[
        owner("op-b", "uid-b"),
        owner("op-c", "uid-c"),
    ]));
    let mut s = setup(lock, [me()], StandbyMode::Watch);
    assert!(!become_within(&mut s, Duration::from_secs(30)).await);
    assert!(s.pods.ops().iter().all(|op| !op.starts_with("delete")));
}

#[tokio::test(start_paused = true)]
async fn a_watching_standby_notices_a_leader_evicted_later_at_once() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let mut s = setup(
        lock,
        [me(), PodBuilder::new("op-b", "uid-b").build()],
        StandbyMode::Watch,
    );
    let pods = s.pods.clone();
    let evict = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        pods.put(PodBuilder::new("op-b", "uid-b").failed("Evicted").build());
    });
    let t = Instant::now();
    assert!(become_within(&mut s, Duration::from_secs(120)).await);
    evict.await.unwrap();
    assert_eq!(t.elapsed(), Duration::from_secs(10));
    assert!(
        s.pods.ops().contains(&"watch pod op-b".to_string()),
        "{:?}",
        s.pods.ops()
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_pod_that_changes_but_keeps_running_does_not_wake_a_watching_standby() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let mut s = setup(
        lock,
        [me(), PodBuilder::new("op-b", "uid-b").build()],
        StandbyMode::Watch,
    );
    let pods = s.pods.clone();
    let changes = tokio::spawn(async move {
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            pods.put(PodBuilder::new("op-b", "uid-b").build());
        }
    });
    assert!(!become_within(&mut s, Duration::from_secs(30)).await);
    changes.await.unwrap();
    assert_eq!(
        s.lock.ops().iter().filter(|op| *op == "get").count(),
        1,
        "{:?}",
        s.lock.ops()
    );
}

#[tokio::test(start_paused = true)]
async fn a_polling_standby_backs_off_as_operator_lib_does() {
    let lock = FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")]));
    let mut s = setup(
        lock,
        [me(), PodBuilder::new("op-b", "uid-b").build()],
        StandbyMode::Poll,
    );
    // Waits of [1,1.2) + [2,2.4) + [4,4.8) + [8,9.6) + [16,19.2) s: the 6th try is within 31–37.2 s.
    assert!(!become_within(&mut s, Duration::from_millis(30_999)).await);
    assert_eq!(s.lock.ops().len(), 5, "{:?}", s.lock.ops());
    let mut s2 = setup(
        FakeLock::with(lock_owned_by(&[owner("op-b", "uid-b")])),
        [me(), PodBuilder::new("op-b", "uid-b").build()],
        StandbyMode::Poll,
    );
    assert!(!become_within(&mut s2, Duration::from_millis(37_200)).await);
    assert_eq!(s2.lock.ops().len(), 6, "{:?}", s2.lock.ops());
}

#[test]
fn the_poll_backoff_doubles_from_one_to_sixteen_seconds() {
    let mut b = PollBackoff::default();
    let secs: Vec<u64> = (0..7).map(|_| b.next_base().as_secs()).collect();
    assert_eq!(secs, [1, 2, 4, 8, 16, 16, 16]);
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_lock_is_deleted_loses_leadership() {
    let mut s = setup(FakeLock::empty(), [me()], StandbyMode::Watch);
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    let lock = s.lock.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        lock.delete();
    });
    let (_t, mut sd) = shutdown::channel();
    assert_eq!(s.elector.hold(&mut sd).await, Stop::Lost(Lost::Deleted));
    assert!(!s.leadership.is_leading());
    assert_eq!(s.metrics.leader_status(LOCK), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_lock_changes_owner_loses_leadership() {
    let mut s = setup(FakeLock::empty(), [me()], StandbyMode::Watch);
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    let lock = s.lock.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        lock.put(lock_owned_by(&[owner("op-b", "uid-b")]));
    });
    let (_t, mut sd) = shutdown::channel();
    assert_eq!(
        s.elector.hold(&mut sd).await,
        Stop::Lost(Lost::OwnerChanged)
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_keeps_leading_until_shutdown() {
    let mut s = setup(FakeLock::empty(), [me()], StandbyMode::Watch);
    assert!(become_within(&mut s, Duration::from_secs(1)).await);
    let (t, mut sd) = shutdown::channel();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        t.trigger();
    });
    assert_eq!(s.elector.hold(&mut sd).await, Stop::Cancelled);
    assert!(s.leadership.is_leading());
}

// ---- the pure classifiers (operator-lib's isPodEvicted / isPodPreempted cases) ----

#[test]
fn a_pod_is_evicted_or_preempted_only_when_failed_with_that_reason() {
    let o = owner("op-b", "uid-b");
    let empty = Pod {
        metadata: PodBuilder::new("op-b", "uid-b").build().metadata,
        ..Pod::default()
    };
    assert_eq!(owner_state(&o, Some(&empty)), OwnerState::Alive);
    assert_eq!(
        owner_state(
            &o,
            Some(
                &PodBuilder::new("op-b", "uid-b")
                    .failed("OutOfMemory")
                    .build()
            )
        ),
        OwnerState::Alive
    );
    let mut running_evicted = PodBuilder::new("op-b", "uid-b").failed("Evicted").build();
    running_evicted.status.as_mut().unwrap().phase = Some("Running".into());
    assert_eq!(owner_state(&o, Some(&running_evicted)), OwnerState::Alive);
    assert_eq!(
        owner_state(
            &o,
            Some(&PodBuilder::new("op-b", "uid-b").failed("Evicted").build())
        ),
        OwnerState::Evicted
    );
    assert_eq!(
        owner_state(
            &o,
            Some(
                &PodBuilder::new("op-b", "uid-b")
                    .failed("Preempting")
                    .build()
            )
        ),
        OwnerState::Preempted
    );
    assert_eq!(owner_state(&o, None), OwnerState::Missing);
    assert_eq!(
        owner_state(&o, Some(&PodBuilder::new("op-b", "uid-new").build())),
        OwnerState::Missing,
        "a recreated pod is not the owner"
    );
}

#[test]
fn a_lock_is_classified_by_owner_uid_not_name() {
    let me = owner("op-a", "uid-a");
    assert_eq!(
        classify_lock(&lock_owned_by(&[owner("op-a", "uid-a")]), &me),
        LockOwner::Mine
    );
    assert_eq!(
        classify_lock(&lock_owned_by(&[owner("op-a", "uid-old")]), &me),
        LockOwner::SameNameOtherUid(owner("op-a", "uid-old"))
    );
    assert_eq!(
        classify_lock(&lock_owned_by(&[owner("op-b", "uid-b")]), &me),
        LockOwner::Other(owner("op-b", "uid-b"))
    );
    assert_eq!(
        classify_lock(&lock_owned_by(&[]), &me),
        LockOwner::Malformed(0)
    );
    let mut not_a_pod = owner("op-a", "uid-a");
    not_a_pod.kind = "ReplicaSet".into();
    assert_eq!(
        classify_lock(&lock_owned_by(&[not_a_pod]), &me),
        LockOwner::Malformed(1)
    );
}
