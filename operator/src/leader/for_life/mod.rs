//! Leader-for-life: a ConfigMap lock owned by the leader's Pod, held until that Pod is gone (operator-sdk's default).
//!
//! # How it works ([`ForLifeElector::become_leader`], after operator-lib's `leader.Become`)
//! - The lock is a ConfigMap named by `--leader-election-id` with a single
//!   ownerReference to this replica's Pod (`v1`, `Pod`, name, **uid**) and a label
//!   naming the operator. The API server's garbage collector deletes it when the Pod
//!   is deleted; that is the only way leadership passes on.
//! - An existing lock owned by this Pod's **UID** means we already lead (the container
//!   restarted). A lock owned by a Pod of the same *name* but another UID is not ours
//!   (a recreated StatefulSet pod): operator-lib matches by name and would adopt a lock
//!   that garbage collection is about to delete.
//! - Otherwise the owner is inspected: missing → wait for garbage collection; `Failed`
//!   with reason `Evicted` or `Preempting` and not already being deleted → delete that
//!   Pod (uid precondition), then wait for garbage collection; anything else → wait.
//! - Waiting: [`StandbyMode::Watch`] (default) watches the lock and tries again the
//!   moment it is deleted or changes owner, and watches the Pod that owns it and tries
//!   again the moment that Pod is evicted or preempted, with a slow safety poll
//!   ([`SAFETY_POLL`]); [`StandbyMode::Poll`] reproduces operator-lib exactly (1 s
//!   doubling to 16 s, each wait +0–20 % jitter).
//! - Once leading ([`ForLifeElector::hold`]) the lock stays watched: if it is deleted
//!   or its owner changes, leadership is lost and the process must exit non-zero
//!   ("leader-for-life lock lost"). operator-lib never looks at the lock again.
//! - A lock that vanishes while the Pod that owned it still runs was deleted by hand under
//!   a live leader, not collected after it: a standby that saw it go waits operator-lib's
//!   first wait ([`INITIAL_BACKOFF`]) before taking it, so that the old leader, which sees
//!   the same deletion, stops leading first. So does a standby whose create found a lock
//!   that was gone again before it could read its owner. A lock collected after its Pod
//!   is taken at once. The old leader, its work stopped, exits only after [`LOST_LINGER`],
//!   so that its restarted process finds the standby's lock instead of racing for it.
//!
//! # Guarantees
//! **This elector never deletes the lock of a leader that may still be running.**
//! operator-lib, when the leader Pod's Node is NotReady, deletes the leader Pod *and
//! the lock ConfigMap itself*; a leader process still running on a partitioned node
//! then keeps working while a second leader starts — two leaders. Here a leader on an
//! unreachable node keeps the lock until its Pod object is really deleted (by the node
//! lifecycle controller's eviction or by a person), exactly as the Pod's own
//! lifecycle would have it.
//!
//! # Caveats
//! - Succeeded, Unknown or otherwise stuck leader Pods keep the lock until someone
//!   deletes them, as with operator-lib.
//! - Watching the owner Pod needs `list` and `watch` on pods; without them the watch
//!   retries with backoff and a standby notices an eviction on its safety poll.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use super::{Leadership, LockBackend, LockEvent, PodBackend, StandbyMode, jitter, unless_shutdown};
use crate::clock::Clock;
use crate::events::{EventRecord, Recorder};
use crate::shutdown::Shutdown;

/// operator-lib's first wait.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// operator-lib's `defaultMaxBackoffInterval`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(16);
/// How long a leader that lost its lock stays, no longer leading, before its process
/// exits: past the wait of the standbys that saw the lock go ([`INITIAL_BACKOFF`]).
pub const LOST_LINGER: Duration = Duration::from_secs(2);
/// The safety poll of a watching standby (keeps a standby at ≤ 2 requests a minute).
pub const SAFETY_POLL: Duration = Duration::from_secs(60);

/// What can go wrong in leader-for-life.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// In a cluster without `POD_NAME`.
    #[error(
        "required env POD_NAME not set: leader-for-life needs this pod's name; expose it with the Downward API \
         (env: - name: POD_NAME, valueFrom: fieldRef: fieldPath: metadata.name)"
    )]
    MissingPodName,
    /// Reading this replica's own Pod failed.
    #[error("failed to get this operator's own pod {name}")]
    GetOwnPod {
        /// The pod name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// This replica's own Pod does not exist.
    #[error("this operator's own pod {0} was not found (is POD_NAME the pod's metadata.name?)")]
    OwnPodNotFound(String),
    /// This replica's own Pod has no uid.
    #[error("this operator's own pod {0} has no uid")]
    OwnPodWithoutUid(String),
}

/// Who owns an existing lock, as far as the lock itself says.
#[derive(Debug, Clone, PartialEq)]
pub enum LockOwner {
    /// Owned by this Pod (same UID): we already lead.
    Mine,
    /// Owned by a Pod with our name but another UID (a previous incarnation).
    SameNameOtherUid(OwnerReference),
    /// Owned by another Pod.
    Other(OwnerReference),
    /// Not exactly one Pod owner.
    Malformed(usize),
}

/// Classifies a lock against this Pod's owner reference.
#[must_use]
pub fn classify_lock(lock: &ConfigMap, me: &OwnerReference) -> LockOwner {
    let owners = lock
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    match owners {
        [o] if o.kind == "Pod" => {
            if o.uid == me.uid {
                LockOwner::Mine
            } else if o.name == me.name {
                LockOwner::SameNameOtherUid(o.clone())
            } else {
                LockOwner::Other(o.clone())
            }
        }
        _ => LockOwner::Malformed(owners.len()),
    }
}

/// What the owner Pod's state means for a waiting candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// No such Pod (or another Pod now has that name): garbage collection will remove the lock.
    Missing,
    /// Failed with reason Evicted, not being deleted: delete it.
    Evicted,
    /// Failed with reason Preempting, not being deleted: delete it.
    Preempted,
    /// Anything else, including a Pod already being deleted: wait.
    Alive,
}

/// Classifies the lock owner's Pod (`None` when it does not exist).
#[must_use]
pub fn owner_state(owner: &OwnerReference, pod: Option<&Pod>) -> OwnerState {
    let Some(pod) = pod else {
        return OwnerState::Missing;
    };
    if pod.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
        return OwnerState::Missing;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return OwnerState::Alive;
    }
    let status = pod.status.as_ref();
    let failed = status.and_then(|s| s.phase.as_deref()) == Some("Failed");
    match (failed, status.and_then(|s| s.reason.as_deref())) {
        (true, Some("Evicted")) => OwnerState::Evicted,
        (true, Some("Preempting")) => OwnerState::Preempted,
        _ => OwnerState::Alive,
    }
}

/// operator-lib's wait schedule: wait `jitter(b, 0.2)`, then `b *= 2` while `b < max`.
#[derive(Debug, Clone)]
pub struct PollBackoff {
    next: Duration,
    max: Duration,
}

impl Default for PollBackoff {
    fn default() -> Self {
        Self {
            next: INITIAL_BACKOFF,
            max: MAX_BACKOFF,
        }
    }
}

impl PollBackoff {
    /// The base of the next wait (before jitter), advancing the schedule.
    pub fn next_base(&mut self) -> Duration {
        let b = self.next;
        if self.next < self.max {
            self.next *= 2;
        }
        b
    }
}

/// What leader-for-life needs to know.
#[derive(Debug, Clone)]
pub struct ForLifeConfig {
    /// Lock ConfigMap name.
    pub lock_name: String,
    /// Namespace of the lock and of this Pod.
    pub namespace: String,
    /// This Pod's name (`POD_NAME`).
    pub pod_name: String,
    /// Watch or poll while waiting.
    pub standby: StandbyMode,
    /// Labels put on the lock.
    pub labels: BTreeMap<String, String>,
}

/// Why a leader-for-life stopped leading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// The lock was deleted.
    #[error("the lock was deleted")]
    Deleted,
    /// The lock now names another owner.
    #[error("the lock changed owner")]
    OwnerChanged,
}

/// How holding the lock ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Shutdown was requested.
    Cancelled,
    /// Leadership was lost.
    Lost(Lost),
}

/// The leader-for-life state machine.
pub struct ForLifeElector<L, P, C> {
    cfg: ForLifeConfig,
    lock: L,
    pods: P,
    clock: C,
    leadership: Leadership,
    recorder: Option<Recorder>,
    me: Option<OwnerReference>,
}

/// How a wait ended.
enum Woke {
    Retry,
    SafetyPoll,
    Shutdown,
}

impl<L, P, C> ForLifeElector<L, P, C>
where
    L: LockBackend<ConfigMap>,
    P: PodBackend,
    C: Clock,
{
    /// A candidate.
    pub fn new(
        cfg: ForLifeConfig,
        lock: L,
        pods: P,
        clock: C,
        leadership: Leadership,
        recorder: Option<Recorder>,
    ) -> Self {
        Self {
            cfg,
            lock,
            pods,
            clock,
            leadership,
            recorder,
            me: None,
        }
    }

    /// This Pod's owner reference: GET own Pod, take its UID.
    ///
    /// # Errors
    /// [`Error::GetOwnPod`], [`Error::OwnPodNotFound`], [`Error::OwnPodWithoutUid`].
    pub async fn my_owner_ref(&mut self) -> Result<OwnerReference, Error> {
        if let Some(me) = &self.me {
            return Ok(me.clone());
        }
        let name = self.cfg.pod_name.clone();
        let pod = self
            .pods
            .get(&name)
            .await
            .map_err(|source| Error::GetOwnPod {
                name: name.clone(),
                source,
            })?
            .ok_or_else(|| Error::OwnPodNotFound(name.clone()))?;
        let uid = pod
            .metadata
            .uid
            .clone()
            .ok_or_else(|| Error::OwnPodWithoutUid(name.clone()))?;
        let me = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name,
            uid,
            ..OwnerReference::default()
        };
        self.me = Some(me.clone());
        Ok(me)
    }

    fn desired_lock(&self, me: &OwnerReference) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.cfg.lock_name.clone()),
                namespace: Some(self.cfg.namespace.clone()),
                owner_references: Some(vec![me.clone()]),
                labels: (!self.cfg.labels.is_empty()).then(|| self.cfg.labels.clone()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// Blocks until this Pod owns the lock (`Ok(true)`) or shutdown is requested (`Ok(false)`).
    ///
    /// API errors are logged and retried after operator-lib's backoff (1 s doubling to 16 s), in both standby modes.
    ///
    /// # Errors
    /// Only when this Pod cannot identify itself (see [`ForLifeElector::my_owner_ref`]).
    pub async fn become_leader(&mut self, shutdown: &mut Shutdown) -> Result<bool, Error> {
        let me = self.my_owner_ref().await?;
        let mut backoff = PollBackoff::default();
        let mut events: Option<BoxStream<'static, LockEvent<ConfigMap>>> =
            (self.cfg.standby == StandbyMode::Watch).then(|| self.lock.watch());
        // The Pod that owns the lock, watched while we wait: its eviction leaves the lock as
        // it is, so the lock's watch alone would only see it on the safety poll.
        let mut owner: Option<OwnerWatch> = None;
        // The Pod that owned the lock last seen: a lock gone while that Pod still runs was
        // deleted under a live leader (by hand), not collected after it.
        let mut last_owner: Option<OwnerReference> = None;
        // Whether this Pod's last create found a lock it had not seen: one that vanishes
        // before this Pod sees it had an owner this Pod cannot tell gone or running.
        let mut lost_race = false;
        loop {
            if shutdown.is_triggered() {
                return Ok(false);
            }
            let lock = self.lock.get().await;
            let vanished = matches!(lock, Ok(None)) && {
                let previous = last_owner.take();
                let unseen = std::mem::take(&mut lost_race);
                match previous {
                    Some(previous) => self.still_runs(&previous).await,
                    None => unseen,
                }
            };
            if vanished {
                // The old leader sees the same deletion and stops leading: it gets
                // operator-lib's first wait to do so before this Pod takes the lock, so that
                // the two never lead at once.
                tracing::info!(
                    lock = %self.cfg.lock_name,
                    "the lock was deleted while its owner may still run; waiting for it to stop leading",
                );
                match unless_shutdown(shutdown, tokio::time::sleep(INITIAL_BACKOFF)).await {
                    Some(()) => continue,
                    None => return Ok(false),
                }
            }
            let seen = match lock {
                Ok(None) => match self.lock.create(&self.desired_lock(&me)).await {
                    Ok(created) => {
                        self.became_leader(&created, "became the leader").await;
                        return Ok(true);
                    }
                    Err(kube::Error::Api(s)) if s.is_already_exists() => {
                        lost_race = true;
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(
                            lock = %self.cfg.lock_name,
                            error = %error,
                            "failed to create the lock",
                        );
                        None
                    }
                },
                Ok(Some(existing)) => {
                    if self.inspect(&existing, &me).await {
                        self.became_leader(
                            &existing,
                            "found existing lock with my UID; I was likely restarted",
                        )
                        .await;
                        return Ok(true);
                    }
                    Some(existing)
                }
                Err(error) => {
                    tracing::warn!(
                        lock = %self.cfg.lock_name,
                        error = %error,
                        "failed to get the lock",
                    );
                    None
                }
            };
            last_owner = match seen.as_ref().map(|cm| classify_lock(cm, &me)) {
                Some(LockOwner::Other(o)) => Some(o),
                _ => None,
            };
            owner = match (&events, seen.as_ref().map(|cm| classify_lock(cm, &me))) {
                (Some(_), Some(LockOwner::Other(o))) => match owner.take() {
                    Some(w) if w.owner.uid == o.uid => Some(w),
                    _ => Some(OwnerWatch {
                        events: self.pods.watch(&o.name),
                        owner: o,
                    }),
                },
                _ => None,
            };
            let woke = match (seen.is_some(), events.as_mut()) {
                (false, _) | (true, None) => {
                    let d = jitter(backoff.next_base(), 0.2);
                    match unless_shutdown(shutdown, tokio::time::sleep(d)).await {
                        Some(()) => Woke::Retry,
                        None => Woke::Shutdown,
                    }
                }
                (true, Some(stream)) => {
                    match wait_for_change(stream, seen.as_ref(), owner.as_mut(), shutdown).await {
                        Some(w) => w,
                        None => {
                            tracing::warn!(
                                lock = %self.cfg.lock_name,
                                "lock watch ended; polling instead",
                            );
                            events = None;
                            Woke::Retry
                        }
                    }
                }
            };
            match woke {
                Woke::Shutdown => return Ok(false),
                Woke::Retry | Woke::SafetyPoll => {}
            }
        }
    }

    /// Whether the Pod `owner` names still runs (exists with its uid, evicted or not, being
    /// deleted or not); `false` when it cannot be read.
    async fn still_runs(&self, owner: &OwnerReference) -> bool {
        match self.pods.get(&owner.name).await {
            Ok(pod) => matches!(owner_state(owner, pod.as_ref()), OwnerState::Alive),
            Err(_) => false,
        }
    }

    /// Inspects an existing lock: `true` when it is ours; otherwise acts on the owner (evicted → delete) and returns `false`.
    async fn inspect(&mut self, lock: &ConfigMap, me: &OwnerReference) -> bool {
        let owner = match classify_lock(lock, me) {
            LockOwner::Mine => return true,
            LockOwner::SameNameOtherUid(o) => {
                tracing::info!(lock = %self.cfg.lock_name, owner_uid = %o.uid,
                    "lock is owned by a previous pod with my name; waiting for garbage collection");
                return false;
            }
            LockOwner::Malformed(n) => {
                tracing::warn!(
                    lock = %self.cfg.lock_name,
                    owners = n,
                    "lock does not have exactly one pod owner; waiting",
                );
                return false;
            }
            LockOwner::Other(o) => o,
        };
        let pod = match self.pods.get(&owner.name).await {
            Ok(p) => p,
            Err(error) => {
                tracing::warn!(
                    lock = %self.cfg.lock_name,
                    owner = %owner.name,
                    error = %error,
                    "failed to get the leader pod",
                );
                return false;
            }
        };
        match owner_state(&owner, pod.as_ref()) {
            OwnerState::Missing => {
                tracing::info!(
                    lock = %self.cfg.lock_name,
                    owner = %owner.name,
                    "leader pod is gone; waiting for garbage collection to remove the lock",
                );
            }
            state @ (OwnerState::Evicted | OwnerState::Preempted) => {
                tracing::info!(
                    lock = %self.cfg.lock_name,
                    owner = %owner.name,
                    state = ?state,
                    "deleting the failed leader pod",
                );
                if let Err(error) = self.pods.delete(&owner.name, &owner.uid).await {
                    tracing::warn!(
                        owner = %owner.name,
                        error = %error,
                        "failed to delete the failed leader pod",
                    );
                }
            }
            OwnerState::Alive => {
                tracing::info!(
                    lock = %self.cfg.lock_name,
                    owner = %owner.name,
                    "not the leader; waiting",
                );
            }
        }
        false
    }

    async fn became_leader(&mut self, lock: &ConfigMap, how: &str) {
        self.leadership.start(self.clock.now());
        tracing::info!(lock = %self.cfg.lock_name, pod = %self.cfg.pod_name, "{how}");
        if let Some(rec) = &self.recorder {
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
                name: lock.metadata.name.clone(),
                namespace: lock.metadata.namespace.clone(),
                uid: lock.metadata.uid.clone(),
                resource_version: lock.metadata.resource_version.clone(),
                ..ObjectReference::default()
            };
            let ev = EventRecord::normal(
                "LeaderElection",
                "Elect",
                format!("{} became leader", self.cfg.pod_name),
            );
            rec.publish(&reference, &ev).await;
        }
    }

    /// Watches the lock while leading: returns when it is deleted or changes owner, or on shutdown.
    ///
    /// On [`Stop::Lost`] the [`Leadership`] is already stopped.
    pub async fn hold(&mut self, shutdown: &mut Shutdown) -> Stop {
        let Some(me) = self.me.clone() else {
            return Stop::Lost(Lost::OwnerChanged);
        };
        let mut events = self.lock.watch();
        loop {
            let ev = tokio::select! {
                ev = events.next() => ev,
                () = shutdown.wait() => return Stop::Cancelled,
            };
            let lost = match ev {
                Some(LockEvent::Applied(cm)) => match classify_lock(&cm, &me) {
                    LockOwner::Mine => None,
                    _ => Some(Lost::OwnerChanged),
                },
                Some(LockEvent::Deleted) => Some(Lost::Deleted),
                None => {
                    // The watch ended: fall back to a slow poll of the lock.
                    if unless_shutdown(shutdown, tokio::time::sleep(SAFETY_POLL))
                        .await
                        .is_none()
                    {
                        return Stop::Cancelled;
                    }
                    events = self.lock.watch();
                    None
                }
            };
            if let Some(why) = lost {
                tracing::error!(
                    lock = %self.cfg.lock_name,
                    reason = %why,
                    "leader-for-life lock lost",
                );
                self.leadership.stop();
                return Stop::Lost(why);
            }
        }
    }
}

/// The same lock object with the same owners (a re-list or an unrelated update).
fn same_lock(a: &ConfigMap, b: &ConfigMap) -> bool {
    a.metadata.uid == b.metadata.uid && a.metadata.owner_references == b.metadata.owner_references
}

/// The watch of the Pod that owns the lock.
struct OwnerWatch {
    owner: OwnerReference,
    events: BoxStream<'static, LockEvent<Pod>>,
}

/// Waits until the watched lock differs from `seen` (deleted, replaced, new owner), its
/// owner Pod was evicted or preempted, the safety poll, or shutdown.
///
/// `None` when the lock's stream ended. When the owner's stream ends, the lock's watch and
/// the safety poll are left.
async fn wait_for_change(
    stream: &mut BoxStream<'static, LockEvent<ConfigMap>>,
    seen: Option<&ConfigMap>,
    mut owner: Option<&mut OwnerWatch>,
    shutdown: &mut Shutdown,
) -> Option<Woke> {
    let poll = tokio::time::sleep(SAFETY_POLL);
    tokio::pin!(poll);
    loop {
        let owner_event = async {
            match owner.as_deref_mut() {
                Some(w) => w.events.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut poll => return Some(Woke::SafetyPoll),
            () = shutdown.wait() => return Some(Woke::Shutdown),
            ev = stream.next() => match ev {
                None => return None,
                Some(LockEvent::Deleted) => return Some(Woke::Retry),
                Some(LockEvent::Applied(cm)) => {
                    if !seen.is_some_and(|s| same_lock(s, &cm)) {
                        return Some(Woke::Retry);
                    }
                }
            },
            ev = owner_event => match ev {
                Some(LockEvent::Applied(pod)) => {
                    let failed = owner.as_deref().is_some_and(|w| {
                        matches!(
                            owner_state(&w.owner, Some(&pod)),
                            OwnerState::Evicted | OwnerState::Preempted
                        )
                    });
                    if failed {
                        return Some(Woke::Retry);
                    }
                }
                // Gone: the garbage collector deletes the lock next, and its watch says so.
                Some(LockEvent::Deleted) => {}
                None => owner = None,
            },
        }
    }
}

#[cfg(test)]
mod tests;
