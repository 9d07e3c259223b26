//! Prometheus metrics named as controller-runtime names them, rendered in the text exposition format.
//!
//! A deliberately small registry (counters, one histogram, gauges) instead of a
//! metrics crate: the operator exports a handful of series and must stay small in
//! memory. Names and labels follow controller-runtime so dashboards and the harness
//! read them unchanged:
//! - `controller_runtime_reconcile_total{controller,result}` with result
//!   `success|error|requeue|requeue_after` (all four pre-initialised to 0),
//! - `controller_runtime_reconcile_errors_total{controller}`,
//! - `controller_runtime_reconcile_time_seconds{controller}` (histogram),
//! - `controller_runtime_max_concurrent_reconciles{controller}`,
//! - `leader_election_master_status{name}` (1 leader, 0 standby).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::lock;

/// controller-runtime's reconcile-time buckets (seconds).
pub const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// How one reconcile ended, as controller-runtime labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReconcileResult {
    /// Done, nothing scheduled.
    Success,
    /// The reconciler returned an error.
    Error,
    /// Requeued through the rate limiter.
    Requeue,
    /// Requeued after a fixed delay.
    RequeueAfter,
}

impl ReconcileResult {
    /// All results, in label order.
    pub const ALL: [ReconcileResult; 4] = [
        ReconcileResult::Success,
        ReconcileResult::Error,
        ReconcileResult::Requeue,
        ReconcileResult::RequeueAfter,
    ];

    /// The `result` label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

#[derive(Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
struct State {
    reconcile_total: BTreeMap<(String, ReconcileResult), u64>,
    reconcile_errors: BTreeMap<String, u64>,
    reconcile_time: BTreeMap<String, Histogram>,
    max_concurrent: BTreeMap<String, u64>,
    leader_status: BTreeMap<String, u8>,
}

/// The process-wide metrics registry; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    state: Arc<Mutex<State>>,
}

impl Metrics {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a controller: its four result counters and error counter start at 0.
    pub fn register_controller(&self, controller: &str, max_concurrent: u16) {
        let mut s = lock(&self.state);
        for r in ReconcileResult::ALL {
            s.reconcile_total
                .entry((controller.to_owned(), r))
                .or_insert(0);
        }
        s.reconcile_errors.entry(controller.to_owned()).or_insert(0);
        s.reconcile_time.entry(controller.to_owned()).or_default();
        s.max_concurrent
            .insert(controller.to_owned(), u64::from(max_concurrent));
    }

    /// Counts one reconcile and records how long it took.
    pub fn observe_reconcile(&self, controller: &str, result: ReconcileResult, took: Duration) {
        let mut s = lock(&self.state);
        *s.reconcile_total
            .entry((controller.to_owned(), result))
            .or_insert(0) += 1;
        if result == ReconcileResult::Error {
            *s.reconcile_errors.entry(controller.to_owned()).or_insert(0) += 1;
        }
        let h = s.reconcile_time.entry(controller.to_owned()).or_default();
        if h.counts.is_empty() {
            h.counts = vec![0; RECONCILE_TIME_BUCKETS.len()];
        }
        let secs = took.as_secs_f64();
        for (i, le) in RECONCILE_TIME_BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// Sets `leader_election_master_status{name}`: 1 when leading, 0 as a standby.
    pub fn set_leader(&self, name: &str, leading: bool) {
        lock(&self.state)
            .leader_status
            .insert(name.to_owned(), u8::from(leading));
    }

    /// The current `leader_election_master_status` for `name`, if reported.
    #[must_use]
    pub fn leader_status(&self, name: &str) -> Option<u8> {
        lock(&self.state).leader_status.get(name).copied()
    }

    /// The current `controller_runtime_reconcile_total` for a controller and result.
    #[must_use]
    pub fn reconcile_total(&self, controller: &str, result: ReconcileResult) -> u64 {
        lock(&self.state)
            .reconcile_total
            .get(&(controller.to_owned(), result))
            .copied()
            .unwrap_or(0)
    }

    /// Renders every series in the Prometheus text format (version 0.0.4).
    #[must_use]
    pub fn render(&self) -> String {
        let s = lock(&self.state);
        let mut out = String::new();
        if !s.reconcile_total.is_empty() {
            out.push_str("# HELP controller_runtime_reconcile_total Total number of reconciliations per controller\n");
            out.push_str("# TYPE controller_runtime_reconcile_total counter\n");
            for ((c, r), v) in &s.reconcile_total {
                let _ = writeln!(
                    out,
                    "controller_runtime_reconcile_total{{controller=\"{}\",result=\"{}\"}} {v}",
                    escape(c),
                    r.label()
                );
            }
            out.push_str("# HELP controller_runtime_reconcile_errors_total Total number of reconciliation errors per controller\n");
            out.push_str("# TYPE controller_runtime_reconcile_errors_total counter\n");
            for (c, v) in &s.reconcile_errors {
                let _ = writeln!(
                    out,
                    "controller_runtime_reconcile_errors_total{{controller=\"{}\"}} {v}",
                    escape(c)
                );
            }
            out.push_str("# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller\n");
            out.push_str("# TYPE controller_runtime_reconcile_time_seconds histogram\n");
            for (c, h) in &s.reconcile_time {
                let c = escape(c);
                for (i, le) in RECONCILE_TIME_BUCKETS.iter().enumerate() {
                    let n = h.counts.get(i).copied().unwrap_or(0);
                    let _ = writeln!(
                        out,
                        "controller_runtime_reconcile_time_seconds_bucket{{controller=\"{c}\",le=\"{le}\"}} {n}"
                    );
                }
                let _ = writeln!(
                    out,
                    "controller_runtime_reconcile_time_seconds_bucket{{controller=\"{c}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(
                    out,
                    "controller_runtime_reconcile_time_seconds_sum{{controller=\"{c}\"}} {}",
                    h.sum
                );
                let _ = writeln!(
                    out,
                    "controller_runtime_reconcile_time_seconds_count{{controller=\"{c}\"}} {}",
                    h.count
                );
            }
            out.push_str("# HELP controller_runtime_max_concurrent_reconciles Maximum number of concurrent reconciles per controller\n");
            out.push_str("# TYPE controller_runtime_max_concurrent_reconciles gauge\n");
            for (c, v) in &s.max_concurrent {
                let _ = writeln!(
                    out,
                    "controller_runtime_max_concurrent_reconciles{{controller=\"{}\"}} {v}",
                    escape(c)
                );
            }
        }
        if !s.leader_status.is_empty() {
            out.push_str("# HELP leader_election_master_status Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.\n");
            out.push_str("# TYPE leader_election_master_status gauge\n");
            for (n, v) in &s.leader_status {
                let _ = writeln!(
                    out,
                    "leader_election_master_status{{name=\"{}\"}} {v}",
                    escape(n)
                );
            }
        }
        out
    }
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_controller_reports_all_four_results_at_zero() {
        let m = Metrics::new();
        m.register_controller("memcached", 1);
        let text = m.render();
        for r in ["success", "error", "requeue", "requeue_after"] {
            let line = format!(
                "controller_runtime_reconcile_total{{controller=\"memcached\",result=\"{r}\"}} 0"
            );
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
        assert!(
            text.contains("controller_runtime_reconcile_errors_total{controller=\"memcached\"} 0")
        );
        assert!(
            text.contains(
                "controller_runtime_max_concurrent_reconciles{controller=\"memcached\"} 1"
            )
        );
    }

    #[test]
    fn an_error_counts_in_the_total_the_error_counter_and_the_histogram() {
        let m = Metrics::new();
        m.register_controller("memcached", 1);
        m.observe_reconcile(
            "memcached",
            ReconcileResult::Error,
            Duration::from_millis(20),
        );
        let text = m.render();
        assert!(text.contains(
            "controller_runtime_reconcile_total{controller=\"memcached\",result=\"error\"} 1"
        ));
        assert!(
            text.contains("controller_runtime_reconcile_errors_total{controller=\"memcached\"} 1")
        );
        assert!(text.contains("controller_runtime_reconcile_time_seconds_bucket{controller=\"memcached\",le=\"0.01\"} 0"));
        assert!(text.contains("controller_runtime_reconcile_time_seconds_bucket{controller=\"memcached\",le=\"0.025\"} 1"));
        assert!(text.contains(
            "controller_runtime_reconcile_time_seconds_count{controller=\"memcached\"} 1"
        ));
        assert_eq!(m.reconcile_total("memcached", ReconcileResult::Error), 1);
    }

    #[test]
    fn the_leader_gauge_is_one_for_a_leader_and_zero_for_a_standby() {
        let m = Metrics::new();
        assert!(!m.render().contains("leader_election_master_status"));
        m.set_leader("memcached-operator-lock", false);
        assert!(
            m.render()
                .contains("leader_election_master_status{name=\"memcached-operator-lock\"} 0")
        );
        m.set_leader("memcached-operator-lock", true);
        assert!(
            m.render()
                .contains("leader_election_master_status{name=\"memcached-operator-lock\"} 1")
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
