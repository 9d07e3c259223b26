//! Steps that check the recorded history: never two leaders, single writer, failover time.

use cucumber::then;

use super::reconcile::origin;
use super::wait::eventually;
use super::{Dur, FAULT_VERBS, Step, StepError, World};
use crate::check;

#[then("there was never more than one leader")]
async fn never_two_leaders(world: &mut World) -> Step {
    let history = world.history().await;
    let v = check::single_leader(&history);
    ensure!(v.passed, "{}", v.explain(origin(&history)));
    Ok(())
}

#[then("no replica wrote after losing leadership")]
async fn single_writer(world: &mut World) -> Step {
    let history = world.history().await;
    let v = check::single_writer(&history);
    ensure!(v.passed, "{}", v.explain(origin(&history)));
    let writers: std::collections::BTreeSet<&str> = history
        .entries()
        .iter()
        .filter_map(|e| match &e.observation {
            crate::record::Observation::Write {
                replica,
                election: false,
                code,
                ..
            } if *code < 400 => Some(replica.as_str()),
            _ => None,
        })
        .collect();
    ensure!(
        !writers.is_empty(),
        "the single-writer check had nothing to check: no replica wrote anything but election \
         traffic; give the operator work in this scenario (e.g. a Memcached whose size changes)"
    );
    println!("single writer: {}", v.summary);
    Ok(())
}

#[then("only the lock's holder ever wrote the work")]
async fn only_holders_wrote(world: &mut World) -> Step {
    let history = world.history().await;
    let v = check::only_holders_wrote(&history);
    ensure!(v.passed, "{}", v.explain(origin(&history)));
    ensure!(
        !v.summary.starts_with("0 write"),
        "the check had nothing to check: no replica wrote its work; give the operator work \
         in this scenario (\"Given the operator has work\")"
    );
    println!("{}", v.summary);
    Ok(())
}

#[then("the lease transitions never decreased")]
async fn transitions(world: &mut World) -> Step {
    let history = world.history().await;
    let v = check::transitions_never_decrease(&history);
    ensure!(v.passed, "{}", v.explain(origin(&history)));
    Ok(())
}

/// The failover after the first `verb` fault: fault → new lock holder, printed for the
/// scenario output.
///
/// # Errors
/// [`StepError::Missing`] when the history has no `verb` fault, [`StepError::Unmet`] when
/// no new leader took the lock after it.
async fn measured_failover(world: &World, verb: &str) -> Result<std::time::Duration, StepError> {
    let history = world.history().await;
    let f = check::failover(&history, verb).ok_or_else(|| {
        StepError::Missing(format!(
            "no {verb} fault in the history: a step that makes one comes before this one"
        ))
    })?;
    let took = f
        .to_lock
        .ok_or_else(|| StepError::Unmet(format!("no new leader took the lock after the {verb}")))?;
    println!(
        "failover after {verb}: {} → {} took {} ms to the lock{}",
        f.old_leader.as_deref().unwrap_or("?"),
        f.new_leader.as_deref().unwrap_or("?"),
        took.as_millis(),
        f.to_first_write
            .map(|w| format!(", {} ms to its first write", w.as_millis()))
            .unwrap_or_default()
    );
    Ok(took)
}

#[then(expr = "the failover after the {word} took at most {duration}")]
async fn failover_at_most(world: &mut World, verb: String, bound: Dur) -> Step {
    let took = measured_failover(world, &verb).await?;
    let limit = world.span(&bound)?;
    ensure!(
        took <= limit,
        "the failover took {took:?}, more than {}",
        bound.shown(limit)
    );
    Ok(())
}

#[then(
    expr = "the old leader released the lock after the {word} and another took it within {duration}"
)]
async fn handover_within(world: &mut World, verb: String, bound: Dur) -> Step {
    let took = check::handover_after_release(&world.history().await, &verb).ok_or_else(|| {
        StepError::Unmet(format!(
            "after the {verb} the old leader never released the lock, or no one took it"
        ))
    })?;
    println!(
        "the lock stood free {} ms between the release and the next holder",
        took.as_millis()
    );
    let limit = world.span(&bound)?;
    ensure!(
        took <= limit,
        "the lock stood free {took:?}, more than {}",
        bound.shown(limit)
    );
    Ok(())
}

#[then(expr = "the failover after the {word} took at least {duration}")]
async fn failover_at_least(world: &mut World, verb: String, bound: Dur) -> Step {
    let took = measured_failover(world, &verb).await?;
    let limit = world.span(&bound)?;
    ensure!(
        took >= limit,
        "the failover took {took:?}, less than {}",
        bound.shown(limit)
    );
    Ok(())
}

#[then(expr = "the old leader stopped leading at most {duration} after the {word}")]
async fn stepped_down_within(world: &mut World, bound: Dur, verb: String) -> Step {
    let took = check::step_down_after(&world.history().await, &verb).ok_or_else(|| {
        StepError::Unmet(format!(
            "the leader at the {verb} never stopped saying it leads"
        ))
    })?;
    println!(
        "the old leader stepped down {} ms after the {verb}",
        took.as_millis()
    );
    let limit = world.span(&bound)?;
    ensure!(
        took <= limit,
        "it stepped down after {took:?}, more than {}",
        bound.shown(limit)
    );
    Ok(())
}

/// How a takeover that came too early is described ([`super::breach`] reads it: early is a
/// safety breach, late a timing one).
pub(crate) const EARLY: &str = "earlier than";

#[then(
    expr = "the new leader took over between {duration} and {duration} after the old leader's last renewal"
)]
async fn takeover_window(world: &mut World, at_least: Dur, at_most: Dur) -> Step {
    let history = world.history().await;
    let took = FAULT_VERBS
        .iter()
        .find_map(|v| check::takeover_after_last_renewal(&history, v))
        .ok_or_else(|| {
            StepError::Unmet(
                "no takeover after a fault, with the old leader's renewals, in the history".into(),
            )
        })?;
    println!(
        "the new leader took over {} ms after the old leader's last renewal",
        took.as_millis()
    );
    let (low, high) = (world.span(&at_least)?, world.span(&at_most)?);
    ensure!(
        took >= low,
        "the takeover came {took:?} after the last renewal, {EARLY} {}: the old leader may \
         still have been leading",
        at_least.shown(low)
    );
    ensure!(
        took <= high,
        "the takeover came {took:?} after the last renewal, later than {}",
        at_most.shown(high)
    );
    Ok(())
}

/// Waits until `checker` fails over the history: for scenarios that break a guarantee on
/// purpose, to show the harness detects it.
///
/// # Errors
/// [`StepError::NotWithin`] when it reports no violation within `within`.
async fn wait_for_violation(
    world: &World,
    within: Dur,
    name: &str,
    checker: fn(&crate::record::History) -> check::Verdict,
) -> Result<(), StepError> {
    let what = format!("the {name} check to report a violation");
    let summary = eventually(world.span(&within)?, &what, || {
        let v = checker(&world.history_so_far());
        async move {
            if v.passed {
                Err(format!("it says: {}", v.summary))
            } else {
                Ok(v.summary)
            }
        }
    })
    .await?;
    println!("detected, as expected: {summary}");
    world.note(&format!("the {name} check detected: {summary}"));
    Ok(())
}

#[then(expr = "within {duration} the single-leader check reports two leaders")]
async fn two_leaders_detected(world: &mut World, within: Dur) -> Step {
    wait_for_violation(world, within, "single-leader", check::single_leader).await?;
    Ok(())
}

#[then(expr = "within {duration} the single-writer check reports a stale writer")]
async fn stale_writer_detected(world: &mut World, within: Dur) -> Step {
    wait_for_violation(world, within, "single-writer", check::single_writer).await?;
    Ok(())
}

#[then(expr = "the lock changed hands exactly once after the {word}")]
async fn changed_hands_once(world: &mut World, verb: String) -> Step {
    let history = world.history().await;
    let v = check::lock_changed_hands_once(&history, &verb);
    ensure!(v.passed, "{}", v.explain(origin(&history)));
    println!("one takeover: {}", v.summary);
    Ok(())
}
