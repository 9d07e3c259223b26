//! Checkers over a [`History`]: single leader, single writer (fencing), failover time,
//! lease transitions that never decrease, reconcile counts. Each returns a [`Verdict`]
//! that, on failure, carries the slice of history that breaks the rule.

pub mod reconcile;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::record::{Entry, History, Observation, describe};

/// The kind of guarantee a failed scenario breached, from the least to the most grave.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Breach {
    /// A bound exceeded with a single leader throughout: a failover, a step-down or a
    /// renewal that took longer than it may.
    Timing,
    /// Nothing happened within its bound: no leader, no work done, a leader lost without a
    /// fault.
    Liveness,
    /// Two leaders at once, a stale write, a lock overwritten or taken early.
    Safety,
}

impl Breach {
    /// Its name in tables and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Timing => "timing",
            Self::Liveness => "liveness",
            Self::Safety => "safety",
        }
    }
}

/// Whether `verdict` is one of the history's safety checks (single leader, single writer,
/// transitions that never decrease) and failed: a scenario that failed with one of them
/// failed breached safety, whatever step it failed at.
pub fn breaches_safety(verdict: &Verdict) -> bool {
    !verdict.passed
        && [SINGLE_LEADER, SINGLE_WRITER, TRANSITIONS_NEVER_DECREASE].contains(&verdict.checker)
}

/// The single-leader checker's name.
pub const SINGLE_LEADER: &str = "single leader";
/// The single-writer checker's name.
pub const SINGLE_WRITER: &str = "single writer";
/// The transitions checker's name.
pub const TRANSITIONS_NEVER_DECREASE: &str = "lease transitions never decrease";

/// The outcome of one checker.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Which checker.
    pub checker: &'static str,
    /// Whether the rule held.
    pub passed: bool,
    /// One line saying what was found.
    pub summary: String,
    /// The entries that show it (the offending slice on failure).
    pub evidence: Vec<Entry>,
}

impl Verdict {
    fn pass(checker: &'static str, summary: String) -> Self {
        Self {
            checker,
            passed: true,
            summary,
            evidence: Vec::new(),
        }
    }

    /// The verdict with its evidence, for a failure message.
    pub fn explain(&self, origin: DateTime<Utc>) -> String {
        if self.evidence.is_empty() {
            format!("{}: {}", self.checker, self.summary)
        } else {
            format!(
                "{}: {}\n{}",
                self.checker,
                self.summary,
                describe(&self.evidence, origin)
            )
        }
    }
}

/// The entries between `from` and `to` (inclusive) whose observation `keep` picks: the
/// slice of history a failed verdict shows.
fn slice_of(
    history: &History,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    keep: impl Fn(&Observation) -> bool,
) -> Vec<Entry> {
    history
        .slice(from, to)
        .into_iter()
        .filter(|e| keep(&e.observation))
        .collect()
}

/// A time interval during which a replica claimed leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Interval {
    /// The replica.
    pub replica: String,
    /// First sample saying "leader".
    pub from: DateTime<Utc>,
    /// Last sample saying "leader" of the same run.
    pub to: DateTime<Utc>,
}

/// Leadership intervals from the gauge: each run of consecutive "leader" samples of a
/// replica, from its first to its last such sample. A "standby" sample or the replica going
/// [down](Observation::Down) ends a run; a missing sample (a frozen replica) does not.
pub fn gauge_intervals(history: &History) -> Vec<Interval> {
    let mut open: BTreeMap<String, Interval> = BTreeMap::new();
    let mut done = Vec::new();
    for e in history.entries() {
        let Some((replica, leader)) = e.observation.leadership() else {
            continue;
        };
        match (leader, open.get_mut(replica)) {
            (true, Some(run)) => run.to = e.time,
            (true, None) => {
                open.insert(
                    replica.to_string(),
                    Interval {
                        replica: replica.to_string(),
                        from: e.time,
                        to: e.time,
                    },
                );
            }
            (false, Some(_)) => {
                if let Some(run) = open.remove(replica) {
                    done.push(run);
                }
            }
            (false, None) => {}
        }
    }
    done.extend(open.into_values());
    done.sort_by_key(|i| i.from);
    done
}

/// The replicas that reported a leader gauge at least once.
fn gauged_replicas(history: &History) -> std::collections::BTreeSet<&str> {
    history
        .entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Gauge { replica, .. } => Some(replica.as_str()),
            _ => None,
        })
        .collect()
}

/// Spans in which replicas that never report a leader gauge (no election at all) acted as
/// leaders: from their first to their last successful non-election write.
pub fn ungauged_writer_intervals(history: &History) -> Vec<Interval> {
    let gauged = gauged_replicas(history);
    let mut spans: BTreeMap<&str, Interval> = BTreeMap::new();
    for (time, replica) in work_writes(history).filter(|(_, r)| !gauged.contains(r)) {
        spans
            .entry(replica)
            .and_modify(|i| i.to = time)
            .or_insert(Interval {
                replica: replica.to_string(),
                from: time,
                to: time,
            });
    }
    spans.into_values().collect()
}

/// The successful writes that are the operator's work — not election traffic, not Events —
/// in time order, with the replica that sent each.
fn work_writes(history: &History) -> impl Iterator<Item = (DateTime<Utc>, &str)> {
    history
        .entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Write {
                replica,
                election: false,
                code,
                ..
            } if *code < 400 => Some((e.time, replica.as_str())),
            _ => None,
        })
}

/// Writes that replicas with a leader gauge made outside their own leadership runs, each as
/// an instant: a write is an act of leadership whatever the gauge says.
pub fn writes_outside_leadership(history: &History, runs: &[Interval]) -> Vec<Interval> {
    let gauged = gauged_replicas(history);
    work_writes(history)
        .filter(|(time, replica)| {
            gauged.contains(replica)
                && !runs
                    .iter()
                    .any(|r| r.replica == *replica && r.from <= *time && *time <= r.to)
        })
        .map(|(time, replica)| Interval {
            replica: replica.to_string(),
            from: time,
            to: time,
        })
        .collect()
}

/// Never more than one leader: the leadership intervals of different replicas never
/// overlap — from their gauges, extended by the writes a replica made outside them, and,
/// for replicas that report no gauge (no election), the span in which they wrote.
pub fn single_leader(history: &History) -> Verdict {
    const NAME: &str = SINGLE_LEADER;
    let mut intervals = gauge_intervals(history);
    let outside = writes_outside_leadership(history, &intervals);
    intervals.extend(outside);
    intervals.extend(ungauged_writer_intervals(history));
    intervals.sort_by_key(|i| i.from);
    // Of all overlaps, the longest tells the story best (the earliest among equals).
    let mut worst: Option<(&Interval, &Interval, DateTime<Utc>, DateTime<Utc>)> = None;
    for (i, a) in intervals.iter().enumerate() {
        for b in &intervals[i + 1..] {
            if a.replica != b.replica && b.from <= a.to && a.from <= b.to {
                let (from, to) = (a.from.max(b.from), a.to.min(b.to));
                if worst.is_none_or(|(_, _, f, t)| to - from > t - f) {
                    worst = Some((a, b, from, to));
                }
            }
        }
    }
    if let Some((a, b, from, to)) = worst {
        let evidence = slice_of(
            history,
            from - chrono::Duration::seconds(2),
            to + chrono::Duration::seconds(2),
            |o| {
                matches!(
                    o,
                    Observation::Gauge { .. }
                        | Observation::Lock { .. }
                        | Observation::Fault { .. }
                        | Observation::Write {
                            election: false,
                            ..
                        }
                )
            },
        );
        return Verdict {
            checker: NAME,
            passed: false,
            summary: format!(
                "{} and {} both claimed leadership between {} and {}",
                a.replica,
                b.replica,
                from.format("%H:%M:%S%.3f"),
                to.format("%H:%M:%S%.3f")
            ),
            evidence,
        };
    }
    Verdict::pass(
        NAME,
        format!(
            "{} leadership interval(s), never overlapping",
            intervals.len()
        ),
    )
}

/// The lock entries at which a replica was seen taking the lock (the holder changed to
/// it), each with the holder before (`None` when the lock was free or new).
fn takeovers(history: &History) -> Vec<(&Entry, Option<String>)> {
    let mut holder: HashMap<String, Option<String>> = HashMap::new();
    let mut out = Vec::new();
    for e in history.entries() {
        if let Observation::Lock {
            lock, holder: h, ..
        } = &e.observation
        {
            let previous = holder.insert(lock.clone(), h.clone()).flatten();
            if h.is_some() && previous != *h {
                out.push((e, previous));
            }
        }
    }
    out
}

/// When each replica was seen taking the lock (the holder changed to it).
fn acquisitions(history: &History) -> Vec<(DateTime<Utc>, String)> {
    takeovers(history)
        .into_iter()
        .filter_map(|(e, _)| match &e.observation {
            Observation::Lock { holder, .. } => holder.clone().map(|h| (e.time, h)),
            _ => None,
        })
        .collect()
}

/// Every write of the work came from the lock's holder: the replica the lock named when
/// the write was made, or one that took it within a second after (the lock is watched, the
/// writes are audited: a new holder's first write can be seen before its lock). A replica
/// that never held the lock, or no longer did, and wrote anyway ran leader-only work — as
/// controller-runtime's non-elected managers did on shutdown (controller-runtime #2719).
pub fn only_holders_wrote(history: &History) -> Verdict {
    const NAME: &str = "only the holder writes";
    let locks: Vec<(DateTime<Utc>, Option<&str>)> = history
        .entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Lock { holder, .. } => Some((e.time, holder.as_deref())),
            _ => None,
        })
        .collect();
    let mut writes = 0;
    for (time, replica) in work_writes(history) {
        writes += 1;
        let holder = locks
            .iter()
            .rev()
            .find(|(t, _)| *t <= time)
            .and_then(|(_, h)| *h);
        let soon = locks.iter().any(|(t, h)| {
            *t > time && *t <= time + chrono::Duration::seconds(1) && *h == Some(replica)
        });
        if holder == Some(replica) || soon {
            continue;
        }
        let evidence = slice_of(history, time - chrono::Duration::seconds(2), time, |o| {
            matches!(o, Observation::Lock { .. } | Observation::Write { .. })
        });
        return Verdict {
            checker: NAME,
            passed: false,
            summary: format!(
                "{replica} wrote its work at {} while the lock {}",
                time.format("%H:%M:%S%.3f"),
                holder.map_or("was free".to_string(), |h| format!("was {h}'s"))
            ),
            evidence,
        };
    }
    Verdict::pass(
        NAME,
        format!("{writes} write(s) of the work, each by the lock's holder"),
    )
}

/// After the first `verb` fault the lock changed hands exactly once: one replica took it
/// and nobody took it from that one. Two candidates that both saw the lock free or expired
/// may both write it; a write made without the lock's resourceVersion as a precondition is
/// not refused with a Conflict when the other's came first, and silently replaces the new
/// holder — the lock changes hands twice within milliseconds, and both believe they lead.
pub fn lock_changed_hands_once(history: &History, verb: &str) -> Verdict {
    const NAME: &str = "one takeover";
    let Some(fault) = history
        .entries()
        .iter()
        .find(|e| matches!(&e.observation, Observation::Fault { verb: v, .. } if v == verb))
    else {
        return Verdict {
            checker: NAME,
            passed: false,
            summary: format!("no {verb} fault in the history"),
            evidence: Vec::new(),
        };
    };
    let taken: Vec<(&Entry, Option<String>)> = takeovers(history)
        .into_iter()
        .filter(|(e, _)| e.time >= fault.time)
        .collect();
    let lock_of = |e: &Entry| match &e.observation {
        Observation::Lock {
            holder,
            transitions,
            ..
        } => (holder.clone().unwrap_or_default(), *transitions),
        _ => (String::new(), None),
    };
    let counted = |t: Option<i64>| {
        t.map(|t| format!(" (leaseTransitions {t})"))
            .unwrap_or_default()
    };
    match taken.as_slice() {
        [] => Verdict {
            checker: NAME,
            passed: false,
            summary: format!("the lock never changed hands after the {verb}"),
            evidence: vec![fault.clone()],
        },
        [(e, _)] => {
            let (holder, transitions) = lock_of(e);
            Verdict::pass(
                NAME,
                format!(
                    "{holder} took the lock {} ms after the {verb}{}, and kept it",
                    (e.time - fault.time).num_milliseconds(),
                    counted(transitions)
                ),
            )
        }
        [(first, _), rest @ ..] => {
            let (first_holder, first_transitions) = lock_of(first);
            let mut summary = format!(
                "the lock changed hands {} times after the {verb}: {first_holder} took it {} ms after it{}",
                taken.len(),
                (first.time - fault.time).num_milliseconds(),
                counted(first_transitions)
            );
            let mut before = (first.time, first_transitions);
            for (e, previous) in rest {
                let (holder, transitions) = lock_of(e);
                let previous = previous.clone().unwrap_or_default();
                summary.push_str(&format!(
                    ", then {holder} took it from {previous} {} ms later{}",
                    (e.time - before.0).num_milliseconds(),
                    counted(transitions)
                ));
                if transitions.is_some() && transitions == before.1 {
                    summary.push_str(&format!(
                        " without counting a transition: written from the lock as it was \
                         before {previous} took it, and no resourceVersion precondition \
                         refused it"
                    ));
                }
                before = (e.time, transitions);
            }
            let last = rest.last().map_or(first.time, |(e, _)| e.time);
            Verdict {
                checker: NAME,
                passed: false,
                summary,
                evidence: slice_of(
                    history,
                    fault.time.min(first.time - chrono::Duration::seconds(1)),
                    last + chrono::Duration::seconds(1),
                    |o| {
                        matches!(
                            o,
                            Observation::Lock { .. }
                                | Observation::Fault { .. }
                                | Observation::Write { election: true, .. }
                        )
                    },
                ),
            }
        }
    }
}

/// The fencing property: once another replica has written as leader, a replica that wrote
/// before writes no more — unless it took the lock again after that.
pub fn single_writer(history: &History) -> Verdict {
    const NAME: &str = SINGLE_WRITER;
    let acquired = acquisitions(history);
    let reacquired = |replica: &str, after: DateTime<Utc>, before: DateTime<Utc>| {
        acquired
            .iter()
            .any(|(t, r)| r == replica && *t > after && *t <= before)
    };
    let mut current: Option<(String, DateTime<Utc>)> = None;
    let mut superseded: HashMap<String, (DateTime<Utc>, String)> = HashMap::new();
    let mut writes = 0;
    let mut writers = Vec::<String>::new();
    for (time, replica) in work_writes(history) {
        writes += 1;
        match &current {
            Some((r, _)) if r.as_str() == replica => continue,
            Some((r, _)) => {
                if let Some((at, by)) = superseded.get(replica)
                    && !reacquired(replica, *at, time)
                {
                    let evidence =
                        slice_of(history, *at - chrono::Duration::seconds(1), time, |o| {
                            !matches!(
                                o,
                                Observation::Gauge { .. } | Observation::Reconciles { .. }
                            )
                        });
                    return Verdict {
                        checker: NAME,
                        passed: false,
                        summary: format!(
                            "{replica} wrote at {} after {by} had taken over writing at {}",
                            time.format("%H:%M:%S%.3f"),
                            at.format("%H:%M:%S%.3f")
                        ),
                        evidence,
                    };
                }
                superseded.insert(r.clone(), (time, replica.to_string()));
            }
            None => {}
        }
        current = Some((replica.to_string(), time));
        if !writers.iter().any(|w| w == replica) {
            writers.push(replica.to_string());
        }
    }
    Verdict::pass(
        NAME,
        format!(
            "{writes} write(s) by {} writer(s) ({}), none after being superseded",
            writers.len(),
            writers.join(" → ")
        ),
    )
}

/// Lease transitions never decrease.
pub fn transitions_never_decrease(history: &History) -> Verdict {
    const NAME: &str = TRANSITIONS_NEVER_DECREASE;
    let mut last: HashMap<String, (i64, Entry)> = HashMap::new();
    for e in history.entries() {
        // A deleted lock starts over: a new Lease counts its transitions from 0.
        if let Observation::Lock {
            lock,
            holder: None,
            transitions: None,
            ..
        } = &e.observation
        {
            last.remove(lock);
            continue;
        }
        if let Observation::Lock {
            lock,
            transitions: Some(t),
            ..
        } = &e.observation
        {
            if let Some((before, earlier)) = last.get(lock)
                && t < before
            {
                return Verdict {
                    checker: NAME,
                    passed: false,
                    summary: format!("{lock}: leaseTransitions went from {before} to {t}"),
                    evidence: vec![earlier.clone(), e.clone()],
                };
            }
            last.insert(lock.clone(), (*t, e.clone()));
        }
    }
    Verdict::pass(NAME, "transitions never went down".into())
}

/// How long leadership took to move after a fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failover {
    /// The fault.
    pub fault: Entry,
    /// Who held the lock when the fault hit.
    pub old_leader: Option<String>,
    /// Who took it next.
    pub new_leader: Option<String>,
    /// Fault → the new leader seen holding the lock.
    pub to_lock: Option<Duration>,
    /// Fault → the new leader's first write (not election traffic).
    pub to_first_write: Option<Duration>,
}

/// Measures the failover after the first fault whose verb is `verb` (e.g. `crash`,
/// `delete`, `partition`); `None` when there is no such fault.
pub fn failover(history: &History, verb: &str) -> Option<Failover> {
    let fault = history
        .entries()
        .iter()
        .find(|e| matches!(&e.observation, Observation::Fault { verb: v, .. } if v == verb))?
        .clone();
    let mut old_leader = None;
    for e in history.entries() {
        if e.time > fault.time {
            break;
        }
        if let Observation::Lock { holder, .. } = &e.observation {
            old_leader = holder.clone();
        }
    }
    let since = |t: DateTime<Utc>| (t - fault.time).to_std().ok();
    let taken = history.entries().iter().find_map(|e| match &e.observation {
        Observation::Lock {
            holder: Some(h), ..
        } if e.time >= fault.time && Some(h) != old_leader.as_ref() => Some((e.time, h.clone())),
        _ => None,
    });
    let new_leader = taken.as_ref().map(|(_, h)| h.clone());
    let to_first_write = new_leader.as_ref().and_then(|leader| {
        history.entries().iter().find_map(|e| match &e.observation {
            Observation::Write {
                replica,
                election: false,
                code,
                ..
            } if e.time >= fault.time && replica == leader && *code < 400 => since(e.time),
            _ => None,
        })
    });
    Some(Failover {
        to_lock: taken.and_then(|(t, _)| since(t)),
        fault,
        old_leader,
        new_leader,
        to_first_write,
    })
}

/// The old leader's last successful renewal before the lock changed hands after the
/// first `verb` fault, and how long after it the new holder was seen: a lease must not be
/// taken sooner than its duration after the last renewal.
pub fn takeover_after_last_renewal(history: &History, verb: &str) -> Option<Duration> {
    let f = failover(history, verb)?;
    let old = f.old_leader.as_ref()?;
    let new = f.new_leader.as_ref()?;
    let taken_at = history
        .entries()
        .iter()
        .find_map(|e| match &e.observation {
            Observation::Lock {
                holder: Some(h), ..
            } if e.time >= f.fault.time && h == new => Some(e.time),
            _ => None,
        })?;
    let renewed_at = history
        .entries()
        .iter()
        .filter(|e| e.time <= taken_at)
        .filter_map(|e| match &e.observation {
            Observation::Write {
                replica,
                election: true,
                resource,
                code,
                ..
            } if replica == old && resource == "leases" && *code < 400 => Some(e.time),
            _ => None,
        })
        .next_back()?;
    (taken_at - renewed_at).to_std().ok()
}

/// How long the lock stood free after the first `verb` fault: from the old leader's
/// release (the holder cleared) to the next holder seen. `None` when the lock was never
/// released after the fault, or never taken again.
pub fn handover_after_release(history: &History, verb: &str) -> Option<Duration> {
    let f = failover(history, verb)?;
    let released_at = history
        .entries()
        .iter()
        .find_map(|e| match &e.observation {
            Observation::Lock { holder: None, .. } if e.time >= f.fault.time => Some(e.time),
            _ => None,
        })?;
    let taken_at = history
        .entries()
        .iter()
        .find_map(|e| match &e.observation {
            Observation::Lock {
                holder: Some(_), ..
            } if e.time >= released_at => Some(e.time),
            _ => None,
        })?;
    (taken_at - released_at).to_std().ok()
}

/// How long after the first `verb` fault the replica that led then was seen no longer
/// leading: its gauge said standby, it went down, or its "stopped leading" Event (which an
/// elector records once it has stopped: client-go's, ours) was watched — whichever came
/// first, as a replica that steps down and exits at once may not be scraped in between.
/// `None` when none of them is in the history.
pub fn step_down_after(history: &History, verb: &str) -> Option<Duration> {
    let f = failover(history, verb)?;
    let old = f.old_leader.as_ref()?;
    history
        .entries()
        .iter()
        .filter(|e| e.time >= f.fault.time)
        .find(|e| match &e.observation {
            Observation::Event {
                reason, message, ..
            } => {
                // The identity is the pod name, or client-go's `<pod>_<uuid>`.
                let who = message.strip_suffix(" stopped leading");
                reason == "LeaderElection"
                    && who.is_some_and(|w| {
                        w == old
                            || w.strip_prefix(old.as_str())
                                .is_some_and(|r| r.starts_with('_'))
                    })
            }
            o => o.leadership() == Some((old.as_str(), false)),
        })
        .and_then(|e| (e.time - f.fault.time).to_std().ok())
}

/// Reconcile results by kind, summed over replicas (the last scraped value of each counter).
pub fn reconcile_counts(history: &History) -> BTreeMap<String, u64> {
    let mut last: BTreeMap<(String, String), u64> = BTreeMap::new();
    for e in history.entries() {
        if let Observation::Reconciles {
            replica,
            result,
            count,
        } = &e.observation
        {
            last.insert((replica.clone(), result.clone()), *count);
        }
    }
    let mut totals = BTreeMap::new();
    for ((_, result), count) in last {
        *totals.entry(result).or_insert(0) += count;
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    fn gauge(h: &mut History, ms: i64, replica: &str, leader: bool) {
        h.push(
            at(ms),
            Observation::Gauge {
                replica: replica.into(),
                leader,
            },
        );
    }

    #[test]
    fn a_replica_going_down_ends_its_leadership_run() {
        let mut h = History::new();
        gauge(&mut h, 0, "a", true);
        gauge(&mut h, 100, "a", true);
        h.push(
            at(150),
            Observation::Down {
                replica: "a".into(),
                reason: "connection refused".into(),
            },
        );
        gauge(&mut h, 400, "b", true);
        gauge(&mut h, 550, "b", false);
        // Restarted, it takes the lock again: a new run, not one from 0 ms on.
        gauge(&mut h, 600, "a", true);
        let runs = gauge_intervals(&h);
        let spans: Vec<_> = runs
            .iter()
            .map(|r| (r.replica.as_str(), r.from, r.to))
            .collect();
        assert_eq!(
            spans,
            vec![
                ("a", at(0), at(100)),
                ("b", at(400), at(400)),
                ("a", at(600), at(600))
            ]
        );
        assert!(single_leader(&h).passed);
    }

    fn lock(h: &mut History, ms: i64, holder: Option<&str>, transitions: i64) {
        h.push(
            at(ms),
            Observation::Lock {
                lock: "lock".into(),
                holder: holder.map(str::to_string),
                transitions: Some(transitions),
                resource_version: String::new(),
            },
        );
    }

    fn write(h: &mut History, ms: i64, replica: &str) {
        h.push(
            at(ms),
            Observation::Write {
                replica: replica.into(),
                verb: "patch".into(),
                resource: "memcacheds/status".into(),
                namespace: "ns".into(),
                name: "m".into(),
                code: 200,
                election: false,
            },
        );
    }

    #[test]
    fn a_clean_handover_has_one_leader_at_a_time() {
        let mut h = History::new();
        gauge(&mut h, 0, "a", true);
        gauge(&mut h, 100, "b", false);
        gauge(&mut h, 1000, "a", true);
        gauge(&mut h, 1100, "a", false);
        gauge(&mut h, 1200, "b", true);
        assert!(single_leader(&h).passed);
    }

    #[test]
    fn overlapping_claims_are_reported_with_the_slice_that_shows_them() {
        let mut h = History::new();
        gauge(&mut h, 0, "a", true);
        gauge(&mut h, 500, "b", true);
        gauge(&mut h, 1000, "a", true);
        let v = single_leader(&h);
        assert!(!v.passed);
        assert!(v.summary.starts_with("a and b both claimed leadership"));
        assert_eq!(v.evidence.len(), 3);
    }

    #[test]
    fn a_replica_writing_after_its_gauge_dropped_while_another_leads_is_a_second_leader() {
        let mut h = History::new();
        gauge(&mut h, 0, "a", true);
        write(&mut h, 50, "a");
        gauge(&mut h, 100, "a", false);
        gauge(&mut h, 200, "b", true);
        write(&mut h, 250, "a");
        gauge(&mut h, 300, "b", true);
        let v = single_leader(&h);
        assert!(!v.passed, "{}", v.summary);
        assert!(
            v.summary.starts_with("b and a both claimed leadership"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn of_several_overlaps_the_longest_is_reported() {
        let mut h = History::new();
        gauge(&mut h, 0, "a", true);
        write(&mut h, 400, "b");
        gauge(&mut h, 500, "b", true);
        gauge(&mut h, 1000, "a", true);
        gauge(&mut h, 1500, "b", true);
        let v = single_leader(&h);
        let (from, to) = (
            at(500).format("%H:%M:%S%.3f"),
            at(1000).format("%H:%M:%S%.3f"),
        );
        assert!(
            v.summary.ends_with(&format!("between {from} and {to}")),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_leader_writing_just_before_its_first_gauge_sample_is_no_second_leader() {
        let mut h = History::new();
        gauge(&mut h, 0, "a", true);
        gauge(&mut h, 100, "a", false);
        write(&mut h, 150, "b");
        gauge(&mut h, 200, "b", true);
        gauge(&mut h, 300, "b", true);
        let v = single_leader(&h);
        assert!(v.passed, "{}", v.summary);
    }

    #[test]
    fn a_standby_that_writes_while_another_holds_the_lock_breaks_only_holders_wrote() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        write(&mut h, 10, "a");
        write(&mut h, 500, "c");
        write(&mut h, 600, "a");
        let v = only_holders_wrote(&h);
        assert!(!v.passed);
        assert!(
            v.summary.starts_with("c wrote its work at"),
            "{}",
            v.summary
        );
        assert!(
            v.summary.ends_with("while the lock was a's"),
            "{}",
            v.summary
        );
        // The same write with the lock released is a write while it was free.
        let mut free = History::new();
        lock(&mut free, 0, None, 0);
        write(&mut free, 500, "c");
        assert!(
            only_holders_wrote(&free)
                .summary
                .ends_with("while the lock was free")
        );
    }

    #[test]
    fn a_new_holder_whose_first_write_is_seen_before_its_lock_wrote_as_the_holder() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        write(&mut h, 10, "a");
        write(&mut h, 1_000, "b");
        lock(&mut h, 1_300, Some("b"), 1);
        write(&mut h, 1_500, "b");
        let v = only_holders_wrote(&h);
        assert!(v.passed, "{}", v.summary);
        assert_eq!(
            v.summary,
            "3 write(s) of the work, each by the lock's holder"
        );
        // More than a second before it took the lock is too early.
        let mut early = History::new();
        lock(&mut early, 0, Some("a"), 0);
        write(&mut early, 100, "b");
        lock(&mut early, 1_300, Some("b"), 1);
        assert!(!only_holders_wrote(&early).passed);
    }

    #[test]
    fn a_stale_leader_writing_after_its_successor_breaks_single_writer() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        write(&mut h, 10, "a");
        lock(&mut h, 100, Some("b"), 1);
        write(&mut h, 120, "b");
        write(&mut h, 130, "a");
        let v = single_writer(&h);
        assert!(!v.passed, "{}", v.summary);
        assert!(v.summary.starts_with("a wrote at"));
    }

    #[test]
    fn a_replica_that_takes_the_lock_back_may_write_again() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        write(&mut h, 10, "a");
        lock(&mut h, 100, Some("b"), 1);
        write(&mut h, 120, "b");
        lock(&mut h, 200, Some("a"), 2);
        write(&mut h, 220, "a");
        assert!(single_writer(&h).passed);
    }

    #[test]
    fn failed_writes_and_election_writes_do_not_count_as_writing() {
        let mut h = History::new();
        write(&mut h, 10, "a");
        write(&mut h, 20, "b");
        h.push(
            at(30),
            Observation::Write {
                replica: "a".into(),
                verb: "update".into(),
                resource: "leases".into(),
                namespace: "ns".into(),
                name: "lock".into(),
                code: 200,
                election: true,
            },
        );
        h.push(
            at(40),
            Observation::Write {
                replica: "a".into(),
                verb: "patch".into(),
                resource: "memcacheds/status".into(),
                namespace: "ns".into(),
                name: "m".into(),
                code: 409,
                election: false,
            },
        );
        assert!(single_writer(&h).passed);
    }

    #[test]
    fn failover_is_measured_from_the_fault_to_the_new_holder_and_its_first_write() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        h.push(
            at(1000),
            Observation::Fault {
                verb: "crash".into(),
                target: "pod ns/a".into(),
                detail: String::new(),
            },
        );
        lock(&mut h, 1250, Some("b"), 1);
        write(&mut h, 1300, "b");
        let f = failover(&h, "crash").unwrap();
        assert_eq!(f.old_leader.as_deref(), Some("a"));
        assert_eq!(f.new_leader.as_deref(), Some("b"));
        assert_eq!(f.to_lock, Some(Duration::from_millis(250)));
        assert_eq!(f.to_first_write, Some(Duration::from_millis(300)));
        assert!(failover(&h, "hold").is_none());
    }

    #[test]
    fn a_lock_taken_once_after_the_fault_changed_hands_once() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 2);
        fault(&mut h, 1000, "delete");
        lock(&mut h, 5000, Some("c"), 3);
        renewal(&mut h, 5002, "b");
        let v = lock_changed_hands_once(&h, "delete");
        assert!(v.passed, "{}", v.summary);
        assert_eq!(
            v.summary,
            "c took the lock 4000 ms after the delete (leaseTransitions 3), and kept it"
        );
    }

    #[test]
    fn a_holder_replaced_without_a_transition_is_reported_as_overwritten() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 2);
        fault(&mut h, 1000, "delete");
        lock(&mut h, 5000, Some("c"), 3);
        lock(&mut h, 5003, Some("b"), 3);
        let v = lock_changed_hands_once(&h, "delete");
        assert!(!v.passed);
        assert!(
            v.summary.starts_with(
                "the lock changed hands 2 times after the delete: c took it 4000 ms after it \
                 (leaseTransitions 3), then b took it from c 3 ms later (leaseTransitions 3) \
                 without counting a transition: written from the lock as it was before c took it"
            ),
            "{}",
            v.summary
        );
        assert_eq!(v.evidence.len(), 3, "the fault and the two takeovers");
    }

    #[test]
    fn a_lock_nobody_took_after_the_fault_did_not_change_hands() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 2);
        fault(&mut h, 1000, "delete");
        let v = lock_changed_hands_once(&h, "delete");
        assert!(!v.passed);
        assert_eq!(v.summary, "the lock never changed hands after the delete");
        assert!(!lock_changed_hands_once(&h, "crash").passed);
    }

    #[test]
    fn decreasing_transitions_are_caught() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 2);
        lock(&mut h, 10, Some("b"), 1);
        assert!(!transitions_never_decrease(&h).passed);
    }

    #[test]
    fn a_recreated_lease_may_start_its_transitions_again() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 2);
        h.push(
            at(5),
            Observation::Lock {
                lock: "lock".into(),
                holder: None,
                transitions: None,
                resource_version: String::new(),
            },
        );
        lock(&mut h, 10, Some("b"), 0);
        assert!(transitions_never_decrease(&h).passed);
    }

    #[test]
    fn reconcile_counts_sum_the_last_value_of_each_replicas_counter() {
        let mut h = History::new();
        for (ms, replica, result, count) in [
            (0, "a", "success", 1),
            (10, "a", "success", 3),
            (20, "b", "success", 2),
            (30, "a", "error", 1),
        ] {
            h.push(
                at(ms),
                Observation::Reconciles {
                    replica: replica.into(),
                    result: result.into(),
                    count,
                },
            );
        }
        let counts = reconcile_counts(&h);
        assert_eq!(counts["success"], 5);
        assert_eq!(counts["error"], 1);
    }

    fn fault(h: &mut History, ms: i64, verb: &str) {
        h.push(
            at(ms),
            Observation::Fault {
                verb: verb.into(),
                target: "pod ns/a".into(),
                detail: String::new(),
            },
        );
    }

    fn renewal(h: &mut History, ms: i64, replica: &str) {
        h.push(
            at(ms),
            Observation::Write {
                replica: replica.into(),
                verb: "update".into(),
                resource: "leases".into(),
                namespace: "ns".into(),
                name: "lock".into(),
                code: 200,
                election: true,
            },
        );
    }

    #[test]
    fn a_takeover_is_measured_from_the_old_leaders_last_successful_renewal() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        renewal(&mut h, 1000, "a");
        renewal(&mut h, 2000, "a");
        fault(&mut h, 2500, "delete");
        renewal(&mut h, 2600, "b");
        lock(&mut h, 6100, Some("b"), 1);
        assert_eq!(
            takeover_after_last_renewal(&h, "delete"),
            Some(Duration::from_millis(4100))
        );
        assert_eq!(takeover_after_last_renewal(&h, "crash"), None);
    }

    #[test]
    fn a_handover_is_measured_from_the_release_to_the_next_holder() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        fault(&mut h, 1000, "delete");
        renewal(&mut h, 1500, "a");
        lock(&mut h, 2300, None, 0);
        lock(&mut h, 2360, Some("b"), 1);
        assert_eq!(
            handover_after_release(&h, "delete"),
            Some(Duration::from_millis(60))
        );
        assert_eq!(handover_after_release(&h, "crash"), None);
    }

    #[test]
    fn a_lock_never_released_has_no_handover() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        fault(&mut h, 1000, "delete");
        lock(&mut h, 5000, Some("b"), 1);
        assert_eq!(handover_after_release(&h, "delete"), None);
    }

    #[test]
    fn the_step_down_is_the_old_leaders_first_not_leading_gauge_after_the_fault() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        gauge(&mut h, 100, "a", true);
        fault(&mut h, 1000, "partition");
        gauge(&mut h, 1100, "b", false);
        gauge(&mut h, 3900, "a", false);
        assert_eq!(
            step_down_after(&h, "partition"),
            Some(Duration::from_millis(2900))
        );
    }

    #[test]
    fn a_stopped_leading_event_shows_the_step_down_of_a_leader_that_exited_unscraped() {
        let mut h = History::new();
        lock(&mut h, 0, Some("a"), 0);
        gauge(&mut h, 100, "a", true);
        fault(&mut h, 1000, "reject");
        gauge(&mut h, 2400, "a", true);
        let event = |message: &str| Observation::Event {
            namespace: "ops".into(),
            involved: "Lease/lock".into(),
            type_: "Normal".into(),
            reason: "LeaderElection".into(),
            message: message.into(),
            reporter: "memcached-operator".into(),
            instance: String::new(),
            count: 1,
        };
        h.push(at(3300), event("b_5e1f became leader"));
        h.push(at(3450), event("a_0c2d stopped leading"));
        // Restarted, it answers again as a standby.
        gauge(&mut h, 5600, "a", false);
        assert_eq!(
            step_down_after(&h, "reject"),
            Some(Duration::from_millis(2450))
        );
    }

    #[test]
    fn replicas_without_an_election_that_write_at_the_same_time_are_two_leaders() {
        let mut h = History::new();
        write(&mut h, 0, "a");
        write(&mut h, 100, "b");
        write(&mut h, 200, "a");
        let v = single_leader(&h);
        assert!(!v.passed, "{}", v.summary);
        assert!(v.summary.contains("a and b"), "{}", v.summary);
    }

    #[test]
    fn the_writes_of_a_replica_with_a_gauge_do_not_make_it_a_leader_by_themselves() {
        let mut h = History::new();
        gauge(&mut h, 0, "a", true);
        write(&mut h, 50, "a");
        gauge(&mut h, 100, "a", false);
        gauge(&mut h, 150, "b", true);
        write(&mut h, 160, "b");
        write(&mut h, 170, "a");
        assert!(single_leader(&h).passed);
    }
}
