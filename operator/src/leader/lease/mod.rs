//! Leader-with-lease: client-go's LeaderElector algorithm over a `coordination.k8s.io/v1` Lease.
//!
//! # The algorithm (client-go `tryAcquireOrRenew`)
//! - **Fast path**: a leader whose observed lease is still valid updates its cached
//!   Lease directly (PUT with the cached resourceVersion); on failure it falls back.
//! - **Slow path**: GET. Missing → CREATE (transitions 0) and lead. If the record
//!   differs from the one observed last, note the *local monotonic* time of the change.
//!   Held by someone else and `observed_at + leaseDurationSeconds > now` → do not
//!   acquire. Otherwise PUT with the read resourceVersion (409 → try again later): a
//!   renewing leader keeps `acquireTime` and `leaseTransitions`, anyone else sets
//!   `acquireTime = now` and `leaseTransitions + 1`.
//! - `renewTime` is never compared with the local clock, so clock offsets between
//!   replicas do not matter.
//!
//! # Beyond client-go
//! - **Standby by watch** ([`StandbyMode::Watch`], default): the standby watches the
//!   Lease; every observed renewal moves its expiry timer, a release (empty holder) or
//!   a deletion makes it try at once, and a timer fires when the observed validity runs
//!   out. A healthy standby makes no requests besides its watch.
//!   [`StandbyMode::Poll`] reproduces client-go (RetryPeriod × [1, 2.2)).
//! - **Step-down**: a leader that sees another holder stops at once; one that has not
//!   renewed within RenewDeadline stops (every request is bounded by that deadline, so
//!   a hung request cannot keep it leading). The deadline is counted from when the last
//!   successful renewal was *sent*, which is also what the write guard uses.
//! - **Release** ([`LeaseElector::release`]) reads the Lease fresh and clears it only
//!   if this replica is still the holder there: client-go decides from its *observed*
//!   record and so can clear a newer leader's lease.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;
use tokio::time::Instant;

use super::{Leadership, LockBackend, LockEvent, StandbyMode, jitter, unless_shutdown};
use crate::clock::Clock;
use crate::events::{EventRecord, Recorder};
use crate::shutdown::Shutdown;

/// client-go's JitterFactor: RenewDeadline must exceed 1.2 × RetryPeriod.
pub const JITTER_FACTOR: f64 = 1.2;
/// controller-runtime's default LeaseDuration.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// controller-runtime's default RenewDeadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// controller-runtime's default RetryPeriod.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// An invalid lease configuration (exit code 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A duration is zero.
    #[error("{flag} must be greater than zero")]
    NotPositive {
        /// The flag at fault.
        flag: &'static str,
    },
    /// LeaseDuration ≤ RenewDeadline.
    #[error(
        "--lease-duration ({lease_duration:?}) must be greater than --renew-deadline ({renew_deadline:?})"
    )]
    LeaseDurationNotGreaterThanRenewDeadline {
        /// LeaseDuration.
        lease_duration: Duration,
        /// RenewDeadline.
        renew_deadline: Duration,
    },
    /// RenewDeadline ≤ 1.2 × RetryPeriod.
    #[error(
        "--renew-deadline ({renew_deadline:?}) must be greater than 1.2 × --retry-period ({retry_period:?})"
    )]
    RenewDeadlineNotGreaterThanJitteredRetryPeriod {
        /// RenewDeadline.
        renew_deadline: Duration,
        /// RetryPeriod.
        retry_period: Duration,
    },
    /// The lease duration does not fit the Lease's whole seconds.
    #[error("--lease-duration ({0:?}) must be a whole number of seconds of at least 1s")]
    LeaseDurationNotWholeSeconds(Duration),
    /// No identity.
    #[error("leader election identity must not be empty")]
    EmptyIdentity,
}

/// Checks client-go's rules: every duration > 0, LeaseDuration > RenewDeadline > 1.2 × RetryPeriod.
///
/// # Errors
/// The first rule broken, naming it.
pub fn validate_timings(
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
) -> Result<(), ConfigError> {
    for (flag, d) in [
        ("--lease-duration", lease_duration),
        ("--renew-deadline", renew_deadline),
        ("--retry-period", retry_period),
    ] {
        if d.is_zero() {
            return Err(ConfigError::NotPositive { flag });
        }
    }
    if lease_duration <= renew_deadline {
        return Err(ConfigError::LeaseDurationNotGreaterThanRenewDeadline {
            lease_duration,
            renew_deadline,
        });
    }
    if renew_deadline.as_secs_f64() <= JITTER_FACTOR * retry_period.as_secs_f64() {
        return Err(
            ConfigError::RenewDeadlineNotGreaterThanJitteredRetryPeriod {
                renew_deadline,
                retry_period,
            },
        );
    }
    if lease_duration.subsec_nanos() != 0 {
        return Err(ConfigError::LeaseDurationNotWholeSeconds(lease_duration));
    }
    Ok(())
}

/// What a lease election needs to know.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Lease name (`--leader-election-id`).
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity (`<pod or host>_<uuid>`).
    pub identity: String,
    /// How long others wait after observing a renewal.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long stops.
    pub renew_deadline: Duration,
    /// Time between tries.
    pub retry_period: Duration,
    /// Watch or poll as a standby.
    pub standby: StandbyMode,
    /// Labels put on the Lease when this replica writes it.
    pub labels: BTreeMap<String, String>,
}

impl LeaseConfig {
    /// Validates the timings and identity.
    ///
    /// # Errors
    /// See [`validate_timings`]; [`ConfigError::EmptyIdentity`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_timings(self.lease_duration, self.renew_deadline, self.retry_period)?;
        if self.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        Ok(())
    }
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// No renewal succeeded within RenewDeadline.
    #[error("no renewal succeeded within the renew deadline ({0:?})")]
    RenewDeadlineExceeded(Duration),
    /// Another candidate holds the lease.
    #[error("the lease is held by {0}")]
    TakenBy(String),
}

/// How holding the lease ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Shutdown was requested while leading.
    Cancelled,
    /// Leadership was lost.
    Lost(Lost),
}

#[derive(Debug, Clone)]
struct Observed {
    lease: Lease,
    at: Instant,
}

/// The lease state machine over a lock backend and a clock.
pub struct LeaseElector<B, C> {
    cfg: LeaseConfig,
    backend: B,
    clock: C,
    leadership: Leadership,
    recorder: Option<Recorder>,
    observed: Option<Observed>,
    last_holder: Option<String>,
}

fn holder_of(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

fn duration_of(lease: &Lease) -> Duration {
    let secs = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .unwrap_or(0);
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

impl<B: LockBackend<Lease>, C: Clock> LeaseElector<B, C> {
    /// A standby elector.
    pub fn new(
        cfg: LeaseConfig,
        backend: B,
        clock: C,
        leadership: Leadership,
        recorder: Option<Recorder>,
    ) -> Self {
        Self {
            cfg,
            backend,
            clock,
            leadership,
            recorder,
            observed: None,
            last_holder: None,
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// The holder in the last observed record ("" when unheld or unknown).
    #[must_use]
    pub fn observed_holder(&self) -> &str {
        self.observed.as_ref().map_or("", |o| holder_of(&o.lease))
    }

    /// Whether the last observed record names this replica.
    fn observed_is_me(&self) -> bool {
        self.observed_holder() == self.cfg.identity
    }

    /// client-go's `isLeaseValid`: observed locally at `at`, valid for the record's own duration.
    fn observed_valid(&self, now: Instant) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|o| o.at + duration_of(&o.lease) > now)
    }

    /// When the observed lease stops being valid.
    fn observed_expiry(&self) -> Option<Instant> {
        self.observed.as_ref().map(|o| o.at + duration_of(&o.lease))
    }

    /// Records `lease` as seen at `now`; the observed time moves only when the record changed.
    fn observe(&mut self, lease: Lease, now: Instant) {
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.lease.spec != lease.spec);
        let at = if changed {
            now
        } else {
            self.observed.as_ref().map_or(now, |o| o.at)
        };
        let holder = holder_of(&lease).to_owned();
        self.observed = Some(Observed { lease, at });
        if self.last_holder.as_deref() != Some(holder.as_str()) {
            tracing::info!(lease = %self.cfg.name, holder = %holder, "new leader observed");
            self.last_holder = Some(holder);
        }
    }

    fn spec_for_me(&self, old: Option<&LeaseSpec>, keep: bool) -> LeaseSpec {
        let now = MicroTime(self.clock.wall());
        let secs = i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let (acquire_time, transitions) = match old {
            Some(o) if keep => (
                o.acquire_time.clone().or_else(|| Some(now.clone())),
                o.lease_transitions.unwrap_or(0),
            ),
            Some(o) => (Some(now.clone()), o.lease_transitions.unwrap_or(0) + 1),
            None => (Some(now.clone()), 0),
        };
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(secs),
            acquire_time,
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..old.cloned().unwrap_or_default()
        }
    }

    fn with_labels(&self, mut meta: ObjectMeta) -> ObjectMeta {
        if !self.cfg.labels.is_empty() {
            let labels = meta.labels.get_or_insert_with(BTreeMap::new);
            for (k, v) in &self.cfg.labels {
                labels.insert(k.clone(), v.clone());
            }
        }
        meta
    }

    /// One round of client-go's `tryAcquireOrRenew`: `Ok(true)` when this replica holds the lease afterwards.
    ///
    /// # Errors
    /// The API error of the failed GET, CREATE or UPDATE (Conflict and AlreadyExists
    /// included: the caller tries again later with a fresh read).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = self.clock.now();

        // Fast path: we lead and our cached lease is still valid.
        if self.observed_is_me()
            && self.observed_valid(now)
            && let Some(o) = &self.observed
        {
            let mut lease = o.lease.clone();
            lease.spec = Some(self.spec_for_me(o.lease.spec.as_ref(), true));
            lease.metadata = self.with_labels(lease.metadata);
            match self.backend.update(&lease).await {
                Ok(updated) => {
                    self.observe(updated, now);
                    return Ok(true);
                }
                Err(error) => {
                    tracing::debug!(
                        lease = %self.cfg.name,
                        error = %error,
                        "fast-path renew failed; falling back to a fresh read",
                    );
                }
            }
        }

        let Some(current) = self.backend.get().await? else {
            let lease = Lease {
                metadata: self.with_labels(ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(self.spec_for_me(None, false)),
            };
            let created = self.backend.create(&lease).await?;
            self.observe(created, now);
            return Ok(true);
        };

        // Another holder's record counts from when its answer arrived, never from before
        // the request: the holder may have renewed while the GET was on its way.
        self.observe(current.clone(), self.clock.now());
        let holder = holder_of(&current).to_owned();
        let mine = holder == self.cfg.identity;
        if !holder.is_empty() && !mine && self.observed_valid(now) {
            return Ok(false);
        }
        let mut lease = current;
        lease.spec = Some(self.spec_for_me(lease.spec.as_ref(), mine));
        lease.metadata = self.with_labels(lease.metadata);
        let updated = self.backend.update(&lease).await?;
        self.observe(updated, now);
        Ok(true)
    }

    /// Blocks until this replica leads (`true`) or shutdown is requested (`false`).
    ///
    /// Errors are logged and retried: an election never gives up on its own.
    pub async fn acquire(&mut self, shutdown: &mut Shutdown) -> bool {
        let mut events = match self.cfg.standby {
            StandbyMode::Watch => Some(self.backend.watch()),
            StandbyMode::Poll => None,
        };
        loop {
            let attempt_at = self.clock.now();
            let failed = match self.try_acquire_or_renew().await {
                Ok(true) => {
                    self.became_leader(attempt_at).await;
                    return true;
                }
                Ok(false) => false,
                Err(error) => {
                    tracing::warn!(
                        lease = %self.cfg.name,
                        error = %error,
                        "failed to acquire lease",
                    );
                    true
                }
            };
            let waited = match events.as_mut() {
                None => {
                    unless_shutdown(
                        shutdown,
                        tokio::time::sleep(jitter(self.cfg.retry_period, JITTER_FACTOR)),
                    )
                    .await
                }
                Some(stream) => {
                    let outcome = self.wait_watching(stream, failed, shutdown).await;
                    if outcome == Some(WatchWait::StreamEnded) {
                        tracing::warn!(
                            lease = %self.cfg.name,
                            "lease watch ended; polling instead",
                        );
                        events = None;
                    }
                    outcome.map(|_| ())
                }
            };
            if waited.is_none() {
                return false;
            }
        }
    }

    /// Waits, as a watching standby, until trying again makes sense.
    async fn wait_watching(
        &mut self,
        stream: &mut futures::stream::BoxStream<'static, LockEvent<Lease>>,
        failed: bool,
        shutdown: &mut Shutdown,
    ) -> Option<WatchWait> {
        let retry_at = self.clock.now() + self.cfg.retry_period;
        loop {
            let now = self.clock.now();
            let held_by_other = !self.observed_holder().is_empty()
                && !self.observed_is_me()
                && self.observed_valid(now);
            if !held_by_other && !failed {
                return Some(WatchWait::Try);
            }
            // Held: wait for the observed validity to run out. After an error: RetryPeriod.
            let deadline = match (held_by_other, self.observed_expiry()) {
                (true, Some(expiry)) if !failed => expiry,
                (true, Some(expiry)) => expiry.min(retry_at),
                _ => retry_at,
            };
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return Some(WatchWait::Try),
                ev = stream.next() => match ev {
                    Some(LockEvent::Applied(lease)) => {
                        self.observe(lease, self.clock.now());
                        if holder_of_observed_is_free(self) {
                            return Some(WatchWait::Try);
                        }
                    }
                    Some(LockEvent::Deleted) => return Some(WatchWait::Try),
                    None => return Some(WatchWait::StreamEnded),
                },
                () = shutdown.wait() => return None,
            }
        }
    }

    async fn became_leader(&mut self, at: Instant) {
        self.leadership.start(at);
        tracing::info!(lease = %self.cfg.name, identity = %self.cfg.identity, "became leader");
        self.record(EventRecord::normal(
            "LeaderElection",
            "Elect",
            format!("{} became leader", self.cfg.identity),
        ))
        .await;
    }

    async fn record(&self, event: EventRecord) {
        if let (Some(rec), Some(o)) = (&self.recorder, &self.observed) {
            let reference = ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: o.lease.metadata.name.clone(),
                namespace: o.lease.metadata.namespace.clone(),
                uid: o.lease.metadata.uid.clone(),
                resource_version: o.lease.metadata.resource_version.clone(),
                ..ObjectReference::default()
            };
            rec.publish(&reference, &event).await;
        }
    }

    /// Renews every RetryPeriod until leadership is lost or shutdown is requested.
    ///
    /// On return the [`Leadership`] is already stopped when leadership was lost; on
    /// [`Stop::Cancelled`] it still leads (the caller stops its controllers, then
    /// releases and calls [`LeaseElector::stopped_leading`]).
    pub async fn hold(&mut self, shutdown: &mut Shutdown) -> Stop {
        let mut last_attempt = self.clock.now();
        loop {
            let confirmed = self.leadership.confirmed_at().unwrap_or(last_attempt);
            let deadline = confirmed + self.cfg.renew_deadline;
            let next = (last_attempt + self.cfg.retry_period).min(deadline);
            if unless_shutdown(shutdown, tokio::time::sleep_until(next))
                .await
                .is_none()
            {
                return Stop::Cancelled;
            }
            let start = self.clock.now();
            if start >= deadline {
                return self
                    .lose(Lost::RenewDeadlineExceeded(self.cfg.renew_deadline))
                    .await;
            }
            last_attempt = start;
            let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew());
            match unless_shutdown(shutdown, attempt).await {
                None => return Stop::Cancelled,
                Some(Ok(Ok(true))) => self.leadership.confirm(start),
                Some(Ok(Ok(false))) => {
                    let holder = self.observed_holder().to_owned();
                    return self.lose(Lost::TakenBy(holder)).await;
                }
                Some(Ok(Err(error))) => {
                    tracing::warn!(lease = %self.cfg.name, error = %error, "failed to renew lease");
                }
                Some(Err(_elapsed)) => {
                    return self
                        .lose(Lost::RenewDeadlineExceeded(self.cfg.renew_deadline))
                        .await;
                }
            }
        }
    }

    /// Keeps renewing, every RetryPeriod, until `work` ends (or leadership is lost), and
    /// returns its output: a leader shutting down holds the lease while its running work
    /// ends, so that a write still in flight lands while this replica holds the lock, never
    /// after a standby took it (kubernetes PR #139991, controller-runtime #1132). The
    /// renewal in flight when `work` ends is abandoned; [`LeaseElector::release`] reads
    /// afresh and retries a conflict with it.
    pub async fn renew_while<F: std::future::Future>(&mut self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        // Nothing cancels this holding but the work's end.
        let (_never, mut not_cancelled) = crate::shutdown::channel();
        tokio::select! {
            output = &mut work => output,
            _ = self.hold(&mut not_cancelled) => work.await,
        }
    }

    async fn lose(&mut self, why: Lost) -> Stop {
        tracing::error!(lease = %self.cfg.name, reason = %why, "leader election lost");
        self.stopped_leading().await;
        Stop::Lost(why)
    }

    /// Marks leadership stopped (gauge 0) and records the "stopped leading" event.
    pub async fn stopped_leading(&mut self) {
        if self.leadership.is_leading() {
            self.leadership.stop();
            self.record(EventRecord::normal(
                "LeaderElection",
                "Elect",
                format!("{} stopped leading", self.cfg.identity),
            ))
            .await;
        }
    }

    /// Gives the lease up: only if a fresh read shows this replica still holds it.
    ///
    /// Writes `holderIdentity: ""` and `leaseDurationSeconds: 1`, keeps
    /// `leaseTransitions`; a Conflict is retried with a new read. `Ok(false)` when there
    /// was nothing of ours to release.
    ///
    /// # Errors
    /// The API error of the read or write (other than Conflict).
    ///
    /// # Caveats
    /// Does not add a timeout: bound it by RenewDeadline at the call site.
    pub async fn release(&mut self) -> Result<bool, kube::Error> {
        loop {
            let Some(mut lease) = self.backend.get().await? else {
                return Ok(false);
            };
            if holder_of(&lease) != self.cfg.identity {
                return Ok(false);
            }
            let now = MicroTime(self.clock.wall());
            let old = lease.spec.clone().unwrap_or_default();
            lease.spec = Some(LeaseSpec {
                holder_identity: Some(String::new()),
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: old.lease_transitions,
                ..old
            });
            match self.backend.update(&lease).await {
                Ok(updated) => {
                    self.observe(updated, self.clock.now());
                    tracing::info!(lease = %self.cfg.name, "released lease");
                    return Ok(true);
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn holder_of_observed_is_free<B: LockBackend<Lease>, C: Clock>(e: &LeaseElector<B, C>) -> bool {
    e.observed_holder().is_empty() || !e.observed_valid(e.clock.now())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchWait {
    Try,
    StreamEnded,
}

#[cfg(test)]
mod tests;
