//! A work queue with client-go's semantics: a key is queued at most once, is never handed
//! to two workers at a time (a key added while it is processed comes back after
//! [`Queue::done`]), can be delayed, and is retried with per-key exponential backoff.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// First retry delay of a failing key (client-go: 5 ms).
const BASE_DELAY: Duration = Duration::from_millis(5);
/// Longest retry delay (client-go: 1000 s; shorter here so scenarios recover from
/// injected API faults in seconds).
const MAX_DELAY: Duration = Duration::from_secs(30);

struct State<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
    delayed: BTreeMap<(Instant, u64), K>,
    delayed_at: HashMap<K, (Instant, u64)>,
    failures: HashMap<K, u32>,
    seq: u64,
}

/// The queue; clones share it.
pub(crate) struct Queue<K> {
    state: Arc<Mutex<State<K>>>,
    notify: Arc<Notify>,
}

impl<K> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            notify: self.notify.clone(),
        }
    }
}

impl<K: Clone + Eq + Hash> Default for Queue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash> Queue<K> {
    /// An empty queue.
    pub(crate) fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                delayed: BTreeMap::new(),
                delayed_at: HashMap::new(),
                failures: HashMap::new(),
                seq: 0,
            })),
            notify: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` now.
    pub(crate) fn add(&self, key: K) {
        let mut state = self.lock();
        Self::add_locked(&mut state, key);
        drop(state);
        self.notify.notify_one();
    }

    fn add_locked(state: &mut State<K>, key: K) {
        if !state.dirty.insert(key.clone()) {
            return;
        }
        if state.processing.contains(&key) {
            return;
        }
        state.queue.push_back(key);
    }

    /// Queues `key` after `delay` (at once when zero). An earlier pending time wins.
    pub(crate) fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = Instant::now() + delay;
        let mut state = self.lock();
        if let Some(existing) = state.delayed_at.get(&key) {
            if existing.0 <= at {
                return;
            }
            let existing = *existing;
            state.delayed.remove(&existing);
        }
        state.seq += 1;
        let slot = (at, state.seq);
        state.delayed.insert(slot, key.clone());
        state.delayed_at.insert(key, slot);
        drop(state);
        self.notify.notify_one();
    }

    /// Queues `key` again after its backoff, which doubles with each failure.
    pub(crate) fn add_rate_limited(&self, key: K) {
        let failures = {
            let mut state = self.lock();
            let n = state.failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        let delay = BASE_DELAY.saturating_mul(factor).min(MAX_DELAY);
        self.add_after(key, delay);
    }

    /// Clears the failure count of `key`.
    /// Ends the work on `key` with the outcome of its sync, as upstream's workers do: after
    /// a success its backoff is forgotten and it comes back after the delay the sync asked
    /// for, if any; after an error it comes back with rate-limited backoff. Returns the
    /// error, for the worker's log.
    pub(crate) fn settle<E>(&self, key: &K, outcome: Result<Option<Duration>, E>) -> Option<E> {
        let failed = match outcome {
            Ok(after) => {
                self.forget(key);
                if let Some(after) = after {
                    self.add_after(key.clone(), after);
                }
                None
            }
            Err(error) => {
                self.add_rate_limited(key.clone());
                Some(error)
            }
        };
        self.done(key);
        failed
    }

    pub(crate) fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// Waits for the next key and marks it as being processed.
    pub(crate) async fn next(&self) -> K {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let wake_at = {
                let mut state = self.lock();
                let now = Instant::now();
                while let Some((&slot, _)) = state.delayed.first_key_value() {
                    if slot.0 > now {
                        break;
                    }
                    if let Some(key) = state.delayed.remove(&slot) {
                        state.delayed_at.remove(&key);
                        Self::add_locked(&mut state, key);
                    }
                }
                if let Some(key) = state.queue.pop_front() {
                    state.dirty.remove(&key);
                    state.processing.insert(key.clone());
                    return key;
                }
                state.delayed.first_key_value().map(|(slot, _)| slot.0)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` as processed; if it was added meanwhile, it is queued again.
    pub(crate) fn done(&self, key: &K) {
        let mut state = self.lock();
        state.processing.remove(key);
        if state.dirty.contains(key) {
            state.queue.push_back(key.clone());
            drop(state);
            self.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_added_twice_is_handed_out_once() {
        let q = Queue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.next().await, "a");
        assert_eq!(q.next().await, "b");
        q.done(&"a");
        q.done(&"b");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), q.next())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_key_added_while_processed_comes_back_after_done() {
        let q = Queue::new();
        q.add(1);
        assert_eq!(q.next().await, 1);
        q.add(1);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), q.next())
                .await
                .is_err()
        );
        q.done(&1);
        assert_eq!(q.next().await, 1);
    }

    #[tokio::test]
    async fn a_delayed_key_waits_its_delay_and_the_earliest_time_wins() {
        let q = Queue::new();
        let start = Instant::now();
        q.add_after("x", Duration::from_millis(300));
        q.add_after("x", Duration::from_millis(30));
        assert_eq!(q.next().await, "x");
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(30) && waited < Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_key_comes_back_after_its_delay_or_its_backoff_and_a_success_resets_it() {
        let q = Queue::new();
        q.add("k");
        assert_eq!(q.next().await, "k");
        let failed = q.settle(&"k", Err::<Option<Duration>, _>("refused"));
        assert_eq!(failed, Some("refused"));
        let start = Instant::now();
        assert_eq!(q.next().await, "k");
        assert_eq!(start.elapsed(), Duration::from_millis(5));
        assert_eq!(
            q.settle(&"k", Ok::<_, &str>(Some(Duration::from_secs(7)))),
            None
        );
        let start = Instant::now();
        assert_eq!(q.next().await, "k");
        assert_eq!(start.elapsed(), Duration::from_secs(7));
        // The success forgot the failure: the next one backs off from the start again.
        q.settle(&"k", Err::<Option<Duration>, _>("refused again"));
        let start = Instant::now();
        assert_eq!(q.next().await, "k");
        assert_eq!(start.elapsed(), Duration::from_millis(5));
    }

    #[tokio::test]
    async fn failures_back_off_exponentially_until_forgotten() {
        let q = Queue::new();
        for expected in [5u64, 10, 20] {
            let start = Instant::now();
            q.add_rate_limited("k");
            assert_eq!(q.next().await, "k");
            q.done(&"k");
            assert!(start.elapsed() >= Duration::from_millis(expected));
        }
        q.forget(&"k");
        let start = Instant::now();
        q.add_rate_limited("k");
        q.next().await;
        assert!(start.elapsed() < Duration::from_millis(10));
    }
}
