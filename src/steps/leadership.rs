//! Steps about who leads: waiting for exactly one leader, a new leader after a fault.

use std::time::Duration;

use cucumber::{given, then};

use super::{Dur, World};
use crate::record::{History, Observation};

/// The replica that leads now, judged from the history: the lock's latest holder, whose
/// latest gauge sample says "leader", while every other replica's latest sample says not.
pub fn current_leader(history: &History) -> Option<String> {
    let mut holder = None;
    let mut gauges: std::collections::BTreeMap<String, bool> = Default::default();
    let mut gone: std::collections::BTreeSet<String> = Default::default();
    for e in history.entries() {
        match &e.observation {
            Observation::Lock { holder: h, .. } => holder = h.clone(),
            Observation::Gauge { replica, leader } => {
                gauges.insert(replica.clone(), *leader);
            }
            Observation::Pod {
                name,
                terminating: true,
                ..
            } => {
                gone.insert(name.clone());
            }
            _ => {}
        }
    }
    let holder = holder?;
    let leaders: Vec<&String> = gauges
        .iter()
        .filter(|(r, leader)| **leader && !gone.contains(*r))
        .map(|(r, _)| r)
        .collect();
    (leaders.len() == 1 && *leaders[0] == holder).then_some(holder)
}

async fn wait_for_leader(world: &World, within: Duration, unlike: Option<&str>) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let history = world.history();
        if let Some(leader) = current_leader(&history).filter(|l| Some(l.as_str()) != unlike) {
            return leader;
        }
        if tokio::time::Instant::now() >= deadline {
            let tail: Vec<_> = history
                .entries()
                .iter()
                .rev()
                .take(12)
                .rev()
                .cloned()
                .collect();
            let origin = history
                .entries()
                .first()
                .map(|e| e.time)
                .unwrap_or_default();
            panic!(
                "no single {}leader within {within:?}; last observed:\n{}",
                if unlike.is_some() { "new " } else { "" },
                crate::record::describe(&tail, origin)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[given(expr = "within {duration} exactly one replica leads")]
#[then(expr = "within {duration} exactly one replica leads")]
async fn exactly_one_leads(world: &mut World, within: Dur) {
    let leader = wait_for_leader(world, within.0, None).await;
    world.note(&format!("{leader} leads"));
    world.leader = Some(leader);
}

#[then(expr = "within {duration} another replica leads")]
async fn another_leads(world: &mut World, within: Dur) {
    let old = world.leader.clone().expect("a leader was seen before");
    let leader = wait_for_leader(world, within.0, Some(&old)).await;
    world.note(&format!("{leader} leads after {old}"));
    world.leader = Some(leader);
}

#[then(expr = "within {duration} the same replica leads again")]
async fn same_leads_again(world: &mut World, within: Dur) {
    let old = world.leader.clone().expect("a leader was seen before");
    let leader = wait_for_leader(world, within.0, None).await;
    assert_eq!(leader, old, "another replica took over instead of {old}");
    world.note(&format!("{leader} leads again"));
}

#[then(expr = "the leader keeps leading for {duration}")]
async fn keeps_leading(world: &mut World, span: Dur) {
    let leader = world.leader.clone().expect("a leader was seen before");
    let deadline = tokio::time::Instant::now() + span.0;
    while tokio::time::Instant::now() < deadline {
        let now = current_leader(&world.history());
        assert!(
            now.as_deref().is_none_or(|l| l == leader),
            "{} took over while {leader} was expected to keep leading",
            now.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[test]
    fn the_leader_is_the_holder_whose_gauge_alone_says_leader() {
        let mut h = History::new();
        let t = Utc::now();
        h.push(
            t,
            Observation::Lock {
                lock: "l".into(),
                holder: Some("a".into()),
                transitions: Some(0),
                resource_version: String::new(),
            },
        );
        h.push(
            t,
            Observation::Gauge {
                replica: "a".into(),
                leader: true,
            },
        );
        h.push(
            t,
            Observation::Gauge {
                replica: "b".into(),
                leader: false,
            },
        );
        assert_eq!(current_leader(&h).as_deref(), Some("a"));
        h.push(
            t,
            Observation::Gauge {
                replica: "b".into(),
                leader: true,
            },
        );
        assert_eq!(current_leader(&h), None, "two gauges say leader");
    }
}
