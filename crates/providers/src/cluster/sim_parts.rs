//! The simulator's parts as the providers that run them drive them. `sim` runs the whole
//! simulator; `local` runs our kubelet, whose pods' proxies judge requests, against a real
//! control plane. Both reach the parts here, not through each other.
//!
//! Faults need no translation: the harness and the simulator speak the same vocabulary
//! (`cluster-vocabulary`). What is here is what the harness's traits ask of the simulator:
//! its request rules ([`SimRules`]) and whether its kubelets can skew a clock.

use std::sync::Arc;
use std::time::Duration;

use crate::fault::{FaultEvent, FaultStore, Milestone, RequestMatch, RequestRules};
use crate::sim::faults::{DEFER_TIMED_OUT, Faults};

/// Whether our kubelets can skew a pod's clock here: they preload libfaketime (the Debian
/// package `faketime`) into its processes.
pub fn can_skew_clocks() -> bool {
    crate::sim::kubelet::find_faketime().is_some()
}

/// The simulator's request rules and fault log, as the harness uses them: the rules the
/// simulated API server judges requests by (sim), or our kubelet's pod proxies (local);
/// the log where the API server and the kubelets record the faults they carry out.
#[derive(Debug, Clone, Default)]
pub struct SimRules(Arc<Faults>);

impl SimRules {
    /// The harness's view of `faults`.
    pub fn new(faults: Arc<Faults>) -> Self {
        Self(faults)
    }
}

impl std::ops::Deref for SimRules {
    type Target = Arc<Faults>;

    fn deref(&self) -> &Arc<Faults> {
        &self.0
    }
}

impl RequestRules for SimRules {
    fn hold_sender(
        &self,
        matches: RequestMatch,
        span: Duration,
        after: Option<RequestMatch>,
    ) -> u64 {
        self.0.hold_sender(matches, span, after)
    }

    fn defer_until(
        &self,
        matches: RequestMatch,
        until: RequestMatch,
        milestone: Milestone,
        limit: Duration,
    ) -> u64 {
        self.0.defer_until(matches, until, milestone, limit)
    }

    fn defer_for(&self, matches: RequestMatch, span: Duration) -> u64 {
        self.0.defer_for(matches, span)
    }

    fn commit_after(&self, matches: RequestMatch, span: Duration) -> u64 {
        self.0.commit_after(matches, span)
    }

    fn lose_answer(
        &self,
        matches: RequestMatch,
        until: Option<(RequestMatch, Milestone)>,
        limit: Duration,
    ) -> u64 {
        self.0.lose_answer(matches, until, limit)
    }

    fn deferral_timed_out(&self, serve_detail: &str) -> bool {
        serve_detail.starts_with(DEFER_TIMED_OUT)
    }
}

/// The simulator's fault log is the scenario's: it holds what the API server and kubelets
/// record as they carry faults out, and what the harness records beside them.
impl FaultStore for SimRules {
    fn record(&self, verb: &str, target: &str, detail: &str) {
        self.0.record(verb, target, detail);
    }

    fn events(&self) -> Vec<FaultEvent> {
        self.0.log()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::PodRef;
    use crate::sim::faults::{RequestFacts, Verdict};

    #[tokio::test]
    async fn a_deferral_let_go_by_its_limit_reads_as_timed_out_and_one_let_go_in_time_does_not() {
        let rules = SimRules::default();
        let writes_of = |pod: &str| RequestMatch {
            verbs: vec!["update".into()],
            resource: Some("leases".into()),
            pod: Some(format!("ops/{pod}")),
            ..RequestMatch::default()
        };
        let pod = |name: &str| PodRef {
            namespace: "ops".into(),
            name: name.into(),
            uid: name.into(),
        };
        let (b, c) = (pod("b"), pod("c"));
        let write = |from| RequestFacts {
            verb: "update",
            resource: "leases",
            pod: Some(from),
            ..Default::default()
        };
        for (milestone, limit) in [
            (Milestone::Arrived, Duration::from_millis(20)),
            (Milestone::Answered, Duration::from_secs(10)),
        ] {
            RequestRules::defer_until(&rules, writes_of("c"), writes_of("b"), milestone, limit);
        }
        // B's write never comes: C's first is let go by its limit.
        let Verdict::Defer(first) = rules.verdict(&write(&c)) else {
            panic!("the first rule holds C's write");
        };
        rules.defer(first, "update leases").await;
        let timed_out = rules.log().pop().unwrap().detail;
        assert!(rules.deferral_timed_out(&timed_out), "{timed_out}");
        // B's write was answered before C's next one: that one goes at once.
        drop(rules.arrived(&write(&b)));
        let Verdict::Defer(second) = rules.verdict(&write(&c)) else {
            panic!("the second rule holds C's next write");
        };
        rules.defer(second, "update leases").await;
        let in_time = rules.log().pop().unwrap().detail;
        assert!(!rules.deferral_timed_out(&in_time), "{in_time}");
    }
}
