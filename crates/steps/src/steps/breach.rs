//! The kind of guarantee a failed step breached ([`Breach`]): the step library's checking
//! steps, each with the kind its failure means — safety (two leaders, a stale write, a lock
//! overwritten or taken early), timing (a bound exceeded, a single leader throughout),
//! liveness (nothing within the bound) — and, for the guarantees client-go's documented
//! semantics do not promise, why opconform holds operators to them. A step that acts (a
//! deploy, a fault) or checks something else breaches none: its scenario is reported as
//! failed, without a kind. The run gives a failed scenario whose history shows two leaders,
//! a stale write or decreasing transitions a safety breach, whatever step it failed at.

use crate::check::Breach;

/// What a failed checking step breached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    /// The kind.
    pub breach: Breach,
    /// When the guarantee is opconform's own: why it matters.
    pub ours: Option<&'static str>,
}

/// Why the step-down bound is measured from the fault.
pub const STEP_DOWN_FROM_THE_FAULT: &str = "client-go bounds a leader's step-down by \
     RenewDeadline from its last successful renewal; opconform measures it from the fault, \
     because from the fault on the cut-off leader's work can no longer be trusted and its \
     users are exposed until it stops";

/// The checking steps, by the start of their text (keyword left out), and what each one's
/// failure breaches.
const STEPS: &[(&str, Breach, Option<&str>)] = &[
    ("there was never more than one leader", Breach::Safety, None),
    (
        "only the lock's holder ever wrote the work",
        Breach::Safety,
        None,
    ),
    (
        "no replica wrote after losing leadership",
        Breach::Safety,
        None,
    ),
    (
        "the lease transitions never decreased",
        Breach::Safety,
        None,
    ),
    (
        "the lease transitions grew by exactly",
        Breach::Safety,
        None,
    ),
    (
        "the lock changed hands exactly once after the",
        Breach::Safety,
        None,
    ),
    ("the leader gauges sum to 1", Breach::Safety, None),
    (
        "the old leader's Pod stays terminating and the lock stays its own",
        Breach::Safety,
        None,
    ),
    ("no replica leads for", Breach::Safety, None),
    ("the failover after the", Breach::Timing, None),
    (
        "the old leader stopped leading at most",
        Breach::Timing,
        Some(STEP_DOWN_FROM_THE_FAULT),
    ),
    (
        "the old leader released the lock after the",
        Breach::Timing,
        None,
    ),
    ("the new leader took over between", Breach::Timing, None),
    ("the lease is renewed within", Breach::Timing, None),
    ("the leader keeps leading for", Breach::Liveness, None),
];

/// The checking steps that start with `within {duration}`, by what follows it.
const WITHIN: &[(&str, Breach)] = &[
    ("exactly one replica leads", Breach::Liveness),
    ("another replica leads", Breach::Liveness),
    ("the same replica leads again", Breach::Liveness),
    ("the old leader no longer leads", Breach::Timing),
    ("the operator has done work", Breach::Liveness),
    ("the leader has done the new work", Breach::Liveness),
];

/// What the failed `step` (as the feature writes it, keyword included) breached, given its
/// `error`; `None` for a step that checks no election guarantee.
pub fn of_step(step: &str, error: &str) -> Option<Judged> {
    let text = step
        .split_once(' ')
        .filter(|(keyword, _)| {
            ["Given", "When", "Then", "And", "But", "*"].contains(&keyword.trim())
        })
        .map_or(step, |(_, rest)| rest)
        .trim();
    if let Some((_, breach, ours)) = STEPS.iter().find(|(start, ..)| text.starts_with(start)) {
        // A takeover earlier than its window is a lock taken while its holder may lead.
        let breach = if text.starts_with("the new leader took over between")
            && error.contains(super::history::EARLY)
        {
            Breach::Safety
        } else {
            *breach
        };
        return Some(Judged {
            breach,
            ours: *ours,
        });
    }
    let rest = text.strip_prefix("within ")?;
    WITHIN
        .iter()
        .find(|(end, _)| rest.ends_with(end))
        .map(|(_, breach)| Judged {
            breach: *breach,
            ours: None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(step: &str) -> Option<Breach> {
        of_step(step, "").map(|j| j.breach)
    }

    #[test]
    fn each_checking_step_names_the_kind_of_guarantee_its_failure_breaches() {
        assert_eq!(
            kind("And there was never more than one leader"),
            Some(Breach::Safety)
        );
        assert_eq!(
            kind("Then the failover after the crash took at most 3s"),
            Some(Breach::Timing)
        );
        assert_eq!(
            kind("Then within 5 × LeaseDuration another replica leads"),
            Some(Breach::Liveness)
        );
        assert_eq!(
            kind("And within LeaseDuration + RetryPeriod the old leader no longer leads"),
            Some(Breach::Timing)
        );
        assert_eq!(
            kind("But the leader keeps leading for 3s"),
            Some(Breach::Liveness)
        );
    }

    #[test]
    fn a_step_that_acts_or_checks_something_else_breaches_no_guarantee() {
        assert_eq!(
            kind("Given the operator is deployed with 3 replicas in for-life mode"),
            None
        );
        assert_eq!(kind("Then within 30s these objects match:"), None);
        assert_eq!(kind("And within 30s the Memcached \"cache\" is gone"), None);
    }

    #[test]
    fn a_takeover_too_early_is_a_safety_breach_and_one_too_late_a_timing_one() {
        let step = "And the new leader took over between LeaseDuration and LeaseDuration + \
                    2 × RetryPeriod after the old leader's last renewal";
        let early = format!(
            "the takeover came 1.2s after the last renewal, {} LeaseDuration (4s)",
            crate::steps::history::EARLY
        );
        assert_eq!(of_step(step, &early).unwrap().breach, Breach::Safety);
        let late = "the takeover came 9s after the last renewal, later than LeaseDuration + \
                    2 × RetryPeriod (6s)";
        assert_eq!(of_step(step, late).unwrap().breach, Breach::Timing);
    }

    #[test]
    fn every_step_the_table_classifies_is_a_defined_step() {
        let dir = crate::repository_root().join("crates/steps/src/steps");
        let defined = crate::steps::vocabulary::defined_steps(&dir).unwrap();
        for (start, ..) in STEPS {
            assert!(
                defined.iter().any(|step| step.starts_with(start)),
                "no step starts with {start:?}"
            );
        }
        for (end, _) in WITHIN {
            assert!(
                defined
                    .iter()
                    .any(|step| step.starts_with("within {duration} ") && step.ends_with(end)),
                "no step reads \"within {{duration}} {end}\""
            );
        }
    }

    #[test]
    fn the_step_down_bound_from_the_fault_is_marked_as_opconforms_own() {
        let judged =
            of_step("And the old leader stopped leading at most RenewDeadline + RetryPeriod / 2 after the partition", "")
                .unwrap();
        assert_eq!(judged.breach, Breach::Timing);
        assert_eq!(judged.ours, Some(STEP_DOWN_FROM_THE_FAULT));
    }
}
