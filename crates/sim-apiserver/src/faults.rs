//! Faults of the simulated cluster: the API server's request rules (`reject`/`allow`,
//! `delay`, the one-shot `hold` of the pod that sends a matching request, the one-shot
//! `defer` of a matching request until another has arrived or been answered, and the
//! one-shot `lose` of a request's answer: served, committed, and never answered), evaluated
//! in order with the first non-pass verdict winning, and the log of every fault applied
//! and undone (process and network faults are carried out by the kubelets; they are logged
//! here too), so a history can show when each was in force.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::audit::PodRef;
use crate::request::RequestInfo;

pub use cluster_vocabulary::{
    Cut, FaultError, FaultEvent, HoldScope, LOW_ON_MEMORY, Milestone, NodeFault, PodFault,
    RequestFacts, RequestMatch,
};

/// The facts of the request `info` describes, sent from `pod` (if known) by `user`.
pub fn request_facts<'a>(
    info: &'a RequestInfo,
    pod: Option<&'a PodRef>,
    user: &'a str,
) -> RequestFacts<'a> {
    RequestFacts {
        verb: &info.verb,
        group: &info.group,
        resource: &info.resource,
        subresource: &info.subresource,
        namespace: &info.namespace,
        name: &info.name,
        pod,
        user,
    }
}

/// What a rule does to matching requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum RuleAction {
    /// Answer with this status instead of serving.
    Reject {
        /// HTTP status code (400–599).
        code: u16,
        /// The Status `reason` (e.g. `InternalError`, `ServiceUnavailable`, `Forbidden`).
        reason: String,
        /// The Status message.
        message: String,
    },
    /// Serve after this extra latency.
    Delay {
        /// The latency in milliseconds.
        millis: u64,
    },
    /// Freeze the pod that sent the request (SIGSTOP) before serving it, and thaw it this
    /// long after: the pod wakes to a response it asked for before the freeze, in the middle
    /// of whatever it was doing. Fires once, at the first matching request sent from a pod,
    /// and is removed.
    Hold {
        /// How long the pod stays frozen, in milliseconds.
        millis: u64,
    },
    /// Hold the request itself, unserved (its pod keeps running), until a request matching
    /// `until` has reached `milestone` — counted from when the rule was made, so one that
    /// came before the held request counts — or for at most `millis`, then serve it; with
    /// no `until`, for `millis`: one slow request. Fires once, at the first matching
    /// request, and is removed.
    Defer {
        /// The request it waits for; none: it is held for `millis`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<RequestMatch>,
        /// How far that request must have got.
        milestone: Milestone,
        /// The longest the request is held, in milliseconds: then it is served anyway.
        millis: u64,
        /// What becomes of it if its client gives up on it meanwhile, and of its answer.
        #[serde(default, skip_serializing_if = "Fate::is_default")]
        fate: Fate,
    },
}

/// What becomes of a request a `defer` rule holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Fate {
    /// Served if its client still waits, dropped with it otherwise: a request still queued
    /// before the server's storage.
    #[default]
    WithClient,
    /// Served even if its client gave up on it meanwhile, and answered if it still waits: a
    /// write that reached the server's storage commits whatever its client does.
    Committed,
    /// Served even if its client gave up on it meanwhile, and never answered (the client's
    /// connection is closed instead): the write commits, its answer is lost.
    AnswerLost,
}

impl Fate {
    fn is_default(&self) -> bool {
        *self == Fate::WithClient
    }

    /// Whether the request is served even if its client goes away.
    pub fn outlives_client(self) -> bool {
        self != Fate::WithClient
    }

    /// What the fault log adds to a `defer` rule's arming.
    fn words(self) -> &'static str {
        match self {
            Fate::WithClient => "",
            Fate::Committed => ", then serve it even if its client gave up",
            Fate::AnswerLost => ", then serve it and lose its answer",
        }
    }
}

/// What the fault log says of a milestone: (waiting for it, reached, not reached).
fn milestone_words(milestone: Milestone) -> (&'static str, &'static str, &'static str) {
    match milestone {
        Milestone::Arrived => ("has arrived", "arrived", "had not arrived"),
        Milestone::Answered => ("has been answered", "was answered", "had not been answered"),
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Its id (to remove it).
    pub id: u64,
    /// Which requests.
    #[serde(rename = "match")]
    pub matches: RequestMatch,
    /// What happens to them.
    pub action: RuleAction,
    /// The rule applies only once a request matching this was served successfully (then
    /// this is cleared): "the first read *after* the next change".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<RequestMatch>,
}

/// The verdict for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Serve normally.
    Pass,
    /// Answer with this status.
    Reject {
        /// Code.
        code: u16,
        /// Reason.
        reason: String,
        /// Message.
        message: String,
    },
    /// Serve after a delay.
    Delay(Duration),
    /// Freeze the requesting pod for this long, then serve (see [`RuleAction::Hold`]).
    Hold(Duration),
    /// Hold the request until another reached a milestone, then serve (see
    /// [`RuleAction::Defer`] and [`Faults::defer`]).
    Defer(Deferral),
}

/// A request held by a [`RuleAction::Defer`] rule: what it waits for, and for how long at
/// most. [`Faults::defer`] carries it out.
#[derive(Debug, Clone)]
pub struct Deferral {
    /// The rule that fired.
    pub rule: u64,
    /// The rule as the fault log names it (`rule 4: update,patch leases… from pod ops/b`).
    pub target: String,
    /// The request waited for, as the fault log describes it; none when the request is
    /// held for its limit.
    pub until: Option<String>,
    /// How far it must get.
    pub milestone: Milestone,
    /// The longest the request is held.
    pub limit: Duration,
    /// What becomes of it (see [`Fate`]): unless it is [`Fate::WithClient`], the caller
    /// serves it whether or not its client still waits (see [`detachable`]); for
    /// [`Fate::AnswerLost`] it calls [`Faults::lost`] and closes the connection instead of
    /// answering.
    pub fate: Fate,
    met: watch::Receiver<bool>,
}

impl PartialEq for Deferral {
    fn eq(&self, other: &Self) -> bool {
        (
            self.rule,
            &self.target,
            &self.until,
            self.milestone,
            self.limit,
            self.fate,
        ) == (
            other.rule,
            &other.target,
            &other.until,
            other.milestone,
            other.limit,
            other.fate,
        )
    }
}

impl Eq for Deferral {}

/// The fault log's word for a deferred request served because its limit ran out (it starts
/// the detail of the `serve` event).
pub const DEFER_TIMED_OUT: &str = "timed out";

/// What a `defer` rule waits for, from when it was made until the request it holds is
/// served: whether a request matching `until` has reached `milestone`.
#[derive(Debug)]
struct Awaiting {
    rule: u64,
    until: Option<RequestMatch>,
    milestone: Milestone,
    met: watch::Sender<bool>,
}

/// A request's passage through the server, made by [`Faults::arrived`]: dropped when the
/// server is done with it, which tells the rules waiting for its answer.
#[must_use = "dropping it says the request was answered"]
pub struct Passage<'a> {
    faults: &'a Faults,
    facts: RequestFacts<'a>,
}

impl Drop for Passage<'_> {
    fn drop(&mut self) {
        self.faults.reached(Milestone::Answered, &self.facts);
    }
}

/// The rules of one API server and the fault log of its cluster.
#[derive(Debug, Default)]
pub struct Faults {
    rules: RwLock<Vec<Rule>>,
    next_id: Mutex<u64>,
    log: Mutex<Vec<FaultEvent>>,
    awaiting: Mutex<Vec<Awaiting>>,
}

impl Faults {
    /// No rules, empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a fault in the log.
    pub fn record(&self, verb: &str, target: &str, detail: &str) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(FaultEvent {
                time: Utc::now(),
                verb: verb.to_string(),
                target: target.to_string(),
                detail: detail.to_string(),
            });
    }

    /// Every fault applied and undone so far.
    pub fn log(&self) -> Vec<FaultEvent> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The rules in force, in evaluation order.
    pub fn rules(&self) -> Vec<Rule> {
        self.rules.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn add(&self, matches: RequestMatch, action: RuleAction) -> u64 {
        self.add_after(matches, action, None)
    }

    fn add_after(
        &self,
        matches: RequestMatch,
        action: RuleAction,
        after: Option<RequestMatch>,
    ) -> u64 {
        let id = {
            let mut next = self.next_id.lock().unwrap_or_else(|p| p.into_inner());
            *next += 1;
            *next
        };
        let (verb, detail) = match &action {
            RuleAction::Reject { code, reason, .. } => ("reject", format!("{code} {reason}")),
            RuleAction::Delay { millis } => ("delay", format!("{millis}ms")),
            RuleAction::Hold { millis } => ("arm", format!("hold {millis}ms")),
            RuleAction::Defer {
                until,
                milestone,
                millis,
                fate,
            } => {
                self.awaiting
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Awaiting {
                        rule: id,
                        until: until.clone(),
                        milestone: *milestone,
                        met: watch::Sender::new(false),
                    });
                let held = match until {
                    Some(until) => format!(
                        "defer until the {} {}, at most {millis}ms",
                        describe(until),
                        milestone_words(*milestone).0
                    ),
                    None => format!("defer for {millis}ms"),
                };
                ("arm", format!("{held}{}", fate.words()))
            }
        };
        self.record(verb, &format!("rule {id}: {}", describe(&matches)), &detail);
        self.rules
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(Rule {
                id,
                matches,
                action,
                after,
            });
        id
    }

    /// Rejects matching requests with `code`, `reason` and `message`; returns the rule id.
    ///
    /// # Errors
    /// When `code` is not 400–599.
    pub fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        reason: &str,
        message: &str,
    ) -> Result<u64, FaultError> {
        if !(400..=599).contains(&code) {
            return Err(FaultError::NotAnErrorCode(code));
        }
        Ok(self.add(
            matches,
            RuleAction::Reject {
                code,
                reason: reason.to_string(),
                message: message.to_string(),
            },
        ))
    }

    /// Delays matching requests; returns the rule id.
    pub fn delay(&self, matches: RequestMatch, delay: Duration) -> u64 {
        self.add(
            matches,
            RuleAction::Delay {
                millis: delay.as_millis() as u64,
            },
        )
    }

    /// Freezes the pod that next sends a matching request for `span`, before that request
    /// is served (a one-shot rule, removed when it fires); returns the rule id, which
    /// [`Faults::allow`] takes to disarm it before it fires.
    ///
    /// With `after`, the rule waits until a request matching `after` was served: the pod is
    /// held at its first matching request that follows that one.
    pub fn hold_sender(
        &self,
        matches: RequestMatch,
        span: Duration,
        after: Option<RequestMatch>,
    ) -> u64 {
        self.add_after(
            matches,
            RuleAction::Hold {
                millis: span.as_millis() as u64,
            },
            after,
        )
    }

    /// Holds the next request matching `matches` (not its pod) until a request matching
    /// `until` has reached `milestone` since now, or for at most `limit`, then serves it (a
    /// one-shot rule, removed when it fires); returns the rule id, which [`Faults::allow`]
    /// takes to disarm it before it fires. The log shows the request held (`defer`) and let
    /// go (`serve`, with how long it waited and why).
    ///
    /// Two of them make two requests race: B's held until C's has been answered, C's held
    /// until B's has arrived — whichever comes first, C's is served first and B's after it,
    /// although B sent it before it could have seen C's effect.
    ///
    /// # Caveats
    /// The request waited for is seen only from the rule's making on, and only once it was
    /// authenticated and authorized.
    pub fn defer_until(
        &self,
        matches: RequestMatch,
        until: RequestMatch,
        milestone: Milestone,
        limit: Duration,
    ) -> u64 {
        self.add(
            matches,
            RuleAction::Defer {
                until: Some(until),
                milestone,
                millis: limit.as_millis() as u64,
                fate: Fate::WithClient,
            },
        )
    }

    /// Holds the next request matching `matches` (not its pod) for `span`, then serves it:
    /// one slow request (a one-shot rule, removed when it fires); returns the rule id. The
    /// log shows it held (`defer`) and let go (`serve`).
    pub fn defer_for(&self, matches: RequestMatch, span: Duration) -> u64 {
        self.held_for(matches, span, Fate::WithClient)
    }

    /// A one-shot `defer` rule that holds the next matching request for `span`, then gives
    /// it `fate`.
    fn held_for(&self, matches: RequestMatch, span: Duration, fate: Fate) -> u64 {
        self.add(
            matches,
            RuleAction::Defer {
                until: None,
                milestone: Milestone::Arrived,
                millis: span.as_millis() as u64,
                fate,
            },
        )
    }

    /// Commits the next request matching `matches` and loses its answer (a one-shot rule,
    /// removed when it fires): the request is held until a request matching `until` has
    /// reached its milestone since now, or for at most `limit` (with no `until`: for
    /// `limit`, which may be zero), then served whether or not its client still waits, and
    /// its client never gets the answer. Returns the rule id, which [`Faults::allow`] takes
    /// to disarm it before it fires. The log shows it held (`defer`), served (`serve`) and
    /// its answer dropped (`lose`).
    ///
    /// A client that gave up on the request (its context was cancelled) believes the write
    /// did not happen; the server has it, with a new resourceVersion: the next write the
    /// client bases on what it knew conflicts.
    pub fn lose_answer(
        &self,
        matches: RequestMatch,
        until: Option<(RequestMatch, Milestone)>,
        limit: Duration,
    ) -> u64 {
        let (until, milestone) = match until {
            Some((until, milestone)) => (Some(until), milestone),
            None => (None, Milestone::Arrived),
        };
        self.add(
            matches,
            RuleAction::Defer {
                until,
                milestone,
                millis: limit.as_millis() as u64,
                fate: Fate::AnswerLost,
            },
        )
    }

    /// Holds the next request matching `matches` for `span`, then serves it even if its
    /// client gave up on it meanwhile (a one-shot rule, removed when it fires): a write
    /// slow to commit that commits whatever its client does. Returns the rule id.
    pub fn commit_after(&self, matches: RequestMatch, span: Duration) -> u64 {
        self.held_for(matches, span, Fate::Committed)
    }

    /// Logs that the answer of a request held by a `lose` rule (see [`Faults::lose_answer`])
    /// was dropped: `code` is what the server answered, which its client never learns.
    pub fn lost(&self, deferral: &Deferral, what: &str, code: u16) {
        self.record(
            "lose",
            &deferral.target,
            &format!("{what}: served ({code}), its answer dropped"),
        );
    }

    /// Tells the rules that a request arrived (before its verdict); the returned passage,
    /// dropped when the server is done with the request, tells them it was answered.
    pub fn arrived<'a>(&'a self, facts: &RequestFacts<'a>) -> Passage<'a> {
        self.reached(Milestone::Arrived, facts);
        Passage {
            faults: self,
            facts: facts.clone(),
        }
    }

    fn reached(&self, milestone: Milestone, facts: &RequestFacts<'_>) {
        for a in self
            .awaiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|a| {
                a.milestone == milestone
                    && !*a.met.borrow()
                    && a.until.as_ref().is_some_and(|u| u.matches(facts))
            })
        {
            a.met.send_replace(true);
        }
    }

    /// Carries out a [`Verdict::Defer`] for the request described by `what`: logs it held
    /// (`defer`), waits until what it waits for has happened or its limit ran out, and logs
    /// it let go (`serve`, the detail starting with [`DEFER_TIMED_OUT`] when the limit ran
    /// out). Does not serve it: the caller does, once this returns.
    pub async fn defer(&self, deferral: Deferral, what: &str) {
        let (waiting, reached, missed) = milestone_words(deferral.milestone);
        let Some(until) = &deferral.until else {
            // Held for its limit: one slow request.
            self.record(
                "defer",
                &deferral.target,
                &format!("{what}, for {}ms", deferral.limit.as_millis()),
            );
            let start = tokio::time::Instant::now();
            tokio::time::sleep(deferral.limit).await;
            self.record(
                "serve",
                &deferral.target,
                &format!("{what}, after {}ms", start.elapsed().as_millis()),
            );
            self.awaiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|a| a.rule != deferral.rule);
            return;
        };
        self.record(
            "defer",
            &deferral.target,
            &format!(
                "{what}, until the {until} {waiting}, at most {}ms",
                deferral.limit.as_millis()
            ),
        );
        let start = Instant::now();
        let mut met = deferral.met.clone();
        let outcome = tokio::time::timeout(deferral.limit, met.wait_for(|m| *m)).await;
        let waited = start.elapsed().as_millis();
        let detail = match outcome {
            Ok(Ok(_)) => format!("{what}, after {waited}ms: the request it waited for {reached}"),
            _ => format!(
                "{DEFER_TIMED_OUT} after {waited}ms: {what}, the request it waited for {missed}"
            ),
        };
        self.record("serve", &deferral.target, &detail);
        self.awaiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|a| a.rule != deferral.rule);
    }

    /// Tells the rules that a request was served successfully: rules waiting for such a
    /// request (their `after`) apply from now on.
    pub fn served(&self, facts: &RequestFacts<'_>) {
        let waiting = |r: &Rule| r.after.as_ref().is_some_and(|a| a.matches(facts));
        if !self
            .rules
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(waiting)
        {
            return;
        }
        for rule in self
            .rules
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
            .filter(|r| waiting(r))
        {
            rule.after = None;
        }
    }

    /// Carries out a [`Verdict::Hold`] for the request of `pod` described by `what`:
    /// freezes the pod now and spawns its release after `span`, logging both.
    ///
    /// # Errors
    /// When the pod cannot be frozen (it is not running on any node).
    pub fn hold_for(
        self: &Arc<Self>,
        target: Arc<dyn FaultTarget>,
        pod: &PodRef,
        span: Duration,
        what: &str,
    ) -> Result<(), FaultError> {
        let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
        target.pod(&namespace, &name, &PodFault::Hold)?;
        let subject = format!("pod {namespace}/{name}");
        self.record(
            "hold",
            &subject,
            &format!("at its {what}, for {}ms", span.as_millis()),
        );
        let faults = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(span).await;
            match target.pod(&namespace, &name, &PodFault::Release) {
                Ok(()) => faults.record("release", &subject, ""),
                // Gone meanwhile (deleted, node removed): nothing is left to thaw.
                Err(e) => faults.record("release", &subject, &e.to_string()),
            }
        });
        Ok(())
    }

    /// Removes a rule (the undo of `reject` and `delay`, or disarms a `hold` or `defer` not
    /// yet fired).
    ///
    /// # Errors
    /// When no rule has this id.
    pub fn allow(&self, id: u64) -> Result<Rule, FaultError> {
        let removed = {
            let mut rules = self.rules.write().unwrap_or_else(|p| p.into_inner());
            let index = rules
                .iter()
                .position(|r| r.id == id)
                .ok_or(FaultError::NoRule(id))?;
            rules.remove(index)
        };
        let verb = match removed.action {
            RuleAction::Reject { .. } => "allow",
            RuleAction::Delay { .. } => "undelay",
            RuleAction::Hold { .. } | RuleAction::Defer { .. } => "disarm",
        };
        self.awaiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|a| a.rule != id);
        self.record(
            verb,
            &format!("rule {id}: {}", describe(&removed.matches)),
            "",
        );
        Ok(removed)
    }

    /// The verdict for a request: the first rule that matches decides. A `hold` rule
    /// matches only requests sent from a pod; `hold` and `defer` rules are removed as they
    /// fire.
    pub fn verdict(&self, facts: &RequestFacts<'_>) -> Verdict {
        let (id, verdict) = {
            let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
            let applies = |r: &&Rule| {
                r.after.is_none()
                    && r.matches.matches(facts)
                    && (facts.pod.is_some() || !matches!(r.action, RuleAction::Hold { .. }))
            };
            match rules.iter().find(applies) {
                None => return Verdict::Pass,
                Some(rule) => (
                    rule.id,
                    match &rule.action {
                        RuleAction::Reject {
                            code,
                            reason,
                            message,
                        } => Verdict::Reject {
                            code: *code,
                            reason: reason.clone(),
                            message: message.clone(),
                        },
                        RuleAction::Delay { millis } => {
                            Verdict::Delay(Duration::from_millis(*millis))
                        }
                        RuleAction::Hold { millis } => {
                            Verdict::Hold(Duration::from_millis(*millis))
                        }
                        RuleAction::Defer {
                            until,
                            milestone,
                            millis,
                            fate,
                        } => match self.deferral(rule, until, *milestone, *millis, *fate) {
                            Some(deferral) => Verdict::Defer(deferral),
                            // Allowed meanwhile: nothing to wait for.
                            None => Verdict::Pass,
                        },
                    },
                ),
            }
        };
        if matches!(verdict, Verdict::Hold(_) | Verdict::Defer(_)) {
            let mut rules = self.rules.write().unwrap_or_else(|p| p.into_inner());
            match rules.iter().position(|r| r.id == id) {
                Some(index) => {
                    rules.remove(index);
                }
                // Another request fired it first: this one is judged by the rules left.
                None => {
                    drop(rules);
                    return self.verdict(facts);
                }
            }
        }
        verdict
    }
}

impl Faults {
    fn deferral(
        &self,
        rule: &Rule,
        until: &Option<RequestMatch>,
        milestone: Milestone,
        millis: u64,
        fate: Fate,
    ) -> Option<Deferral> {
        let met = self
            .awaiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|a| a.rule == rule.id)?
            .met
            .subscribe();
        Some(Deferral {
            rule: rule.id,
            target: format!("rule {}: {}", rule.id, describe(&rule.matches)),
            until: until.as_ref().map(describe),
            milestone,
            limit: Duration::from_millis(millis),
            fate,
            met,
        })
    }
}

fn describe(m: &RequestMatch) -> String {
    let mut parts = Vec::new();
    parts.push(if m.verbs.is_empty() {
        "*".to_string()
    } else {
        m.verbs.join(",")
    });
    let resource = match (&m.group, &m.resource) {
        (Some(g), Some(r)) if !g.is_empty() => format!("{r}.{g}"),
        (_, Some(r)) => r.clone(),
        _ => "*".into(),
    };
    parts.push(match &m.subresource {
        Some(s) if !s.is_empty() => format!("{resource}/{s}"),
        _ => resource,
    });
    if let Some(ns) = &m.namespace {
        parts.push(format!("in {ns}"));
    }
    if let Some(n) = &m.name {
        parts.push(format!("named {n}"));
    }
    if let Some(p) = &m.pod {
        parts.push(format!("from pod {p}"));
    }
    if let Some(u) = &m.user {
        parts.push(format!("by {u}"));
    }
    parts.join(" ")
}

/// A shared set of faults.
pub type SharedFaults = Arc<Faults>;

/// What a rule made of a request's handling (see [`Fate`]): whether it is served to its
/// end even if its client goes away, and whether its answer is dropped. The server handling
/// the request marks it; [`detachable`] reads it.
#[derive(Debug, Clone, Default)]
pub struct Detachment(Arc<(AtomicBool, AtomicBool)>);

impl Detachment {
    /// Says what a rule made of the request: nothing for [`Fate::WithClient`].
    pub fn mark(&self, fate: Fate) {
        if fate.outlives_client() {
            self.0.0.store(true, Ordering::SeqCst);
        }
        if fate == Fate::AnswerLost {
            self.0.1.store(true, Ordering::SeqCst);
        }
    }

    /// Whether the request is served to its end even if its client goes away.
    pub fn outlives_client(&self) -> bool {
        self.0.0.load(Ordering::SeqCst)
    }

    /// Whether the request's answer is dropped.
    pub fn answer_lost(&self) -> bool {
        self.0.1.load(Ordering::SeqCst)
    }
}

/// What a server's service answers for a request whose answer a `lose` rule dropped: hyper
/// closes the connection instead of answering.
#[derive(Debug, thiserror::Error)]
#[error("the answer was dropped by a lose rule")]
pub struct AnswerLost;

/// Handles one request as a task of its own: aborted when its client goes away (this future
/// is dropped), as a server handling it inline would be, unless a rule made it outlive its
/// client (`detachment`): then it runs to its end; and its answer is dropped
/// ([`AnswerLost`]) when the rule lost it.
///
/// # Errors
/// [`AnswerLost`] when a `lose` rule took the request.
///
/// # Panics
/// When `handling` panics (the panic goes on here).
pub async fn detachable<T: Send + 'static>(
    detachment: Detachment,
    handling: impl Future<Output = T> + Send + 'static,
) -> Result<T, AnswerLost> {
    /// Aborts the handling when dropped, unless a rule made it outlive its client.
    struct AbortWithClient(tokio::task::AbortHandle, Detachment);

    impl Drop for AbortWithClient {
        fn drop(&mut self) {
            if !self.1.outlives_client() {
                self.0.abort();
            }
        }
    }

    let task = tokio::spawn(handling);
    let _guard = AbortWithClient(task.abort_handle(), detachment.clone());
    let answer = match task.await {
        Ok(answer) => answer,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Aborted: only by the guard, which is still here.
        Err(_) => return Err(AnswerLost),
    };
    if detachment.answer_lost() {
        Err(AnswerLost)
    } else {
        Ok(answer)
    }
}

/// The `Status` reason kube-apiserver gives with an HTTP error code.
pub fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// Who carries out process and network faults (the simulated cluster's kubelets).
pub trait FaultTarget: Send + Sync {
    /// Applies a fault to a pod.
    ///
    /// # Errors
    /// When the pod is not running on any node, or the fault cannot be done.
    fn pod(&self, namespace: &str, pod: &str, fault: &PodFault) -> Result<(), FaultError>;
    /// Applies a fault to a node.
    ///
    /// # Errors
    /// When the node does not exist.
    fn node(&self, node: &str, fault: &NodeFault) -> Result<(), FaultError>;
}

impl Faults {
    /// Applies a pod fault through `target` and logs it.
    ///
    /// # Errors
    /// What the target reports.
    pub fn apply_pod(
        &self,
        target: &dyn FaultTarget,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), FaultError> {
        target.pod(namespace, pod, fault)?;
        self.record(
            fault.verb(),
            &format!("pod {namespace}/{pod}"),
            &fault.detail(),
        );
        Ok(())
    }

    /// Applies a node fault through `target` and logs it.
    ///
    /// # Errors
    /// What the target reports.
    pub fn apply_node(
        &self,
        target: &dyn FaultTarget,
        node: &str,
        fault: &NodeFault,
    ) -> Result<(), FaultError> {
        target.node(node, fault)?;
        self.record(fault.verb(), &format!("node {node}"), &fault.detail());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(verb: &'a str, resource: &'a str, pod: Option<&'a PodRef>) -> RequestFacts<'a> {
        RequestFacts {
            verb,
            group: "apps",
            resource,
            subresource: "",
            namespace: "ns",
            name: "web",
            pod,
            user: "u",
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_allow_removes_it() {
        let f = Faults::new();
        let m = RequestMatch {
            verbs: vec!["create".into()],
            resource: Some("deployments".into()),
            ..Default::default()
        };
        let reject = f.reject(m.clone(), 500, "InternalError", "boom").unwrap();
        f.delay(m, Duration::from_millis(5));
        assert!(matches!(
            f.verdict(&facts("create", "deployments", None)),
            Verdict::Reject { code: 500, .. }
        ));
        assert_eq!(f.verdict(&facts("get", "deployments", None)), Verdict::Pass);
        f.allow(reject).unwrap();
        assert_eq!(
            f.verdict(&facts("create", "deployments", None)),
            Verdict::Delay(Duration::from_millis(5))
        );
        assert!(matches!(f.allow(reject), Err(FaultError::NoRule(_))));
        let verbs: Vec<String> = f.log().into_iter().map(|e| e.verb).collect();
        assert_eq!(verbs, vec!["reject", "delay", "allow"]);
    }

    #[test]
    fn a_rule_can_target_the_requests_of_one_pod() {
        let f = Faults::new();
        f.reject(
            RequestMatch {
                pod: Some("ops/op-1".into()),
                ..Default::default()
            },
            503,
            "ServiceUnavailable",
            "partitioned",
        )
        .unwrap();
        let op1 = PodRef {
            namespace: "ops".into(),
            name: "op-1".into(),
            uid: "u".into(),
        };
        let op2 = PodRef {
            name: "op-2".into(),
            ..op1.clone()
        };
        assert!(matches!(
            f.verdict(&facts("update", "leases", Some(&op1))),
            Verdict::Reject { .. }
        ));
        assert_eq!(
            f.verdict(&facts("update", "leases", Some(&op2))),
            Verdict::Pass
        );
        assert_eq!(f.verdict(&facts("update", "leases", None)), Verdict::Pass);
    }

    struct Accepts;

    impl FaultTarget for Accepts {
        fn pod(&self, _: &str, _: &str, _: &PodFault) -> Result<(), FaultError> {
            Ok(())
        }
        fn node(&self, _: &str, _: &NodeFault) -> Result<(), FaultError> {
            Ok(())
        }
    }

    #[test]
    fn an_eviction_without_a_message_says_the_node_was_low_on_memory() {
        let fault: PodFault = serde_json::from_str(r#"{"verb": "evict"}"#).unwrap();
        assert_eq!(
            fault,
            PodFault::Evict {
                message: LOW_ON_MEMORY.into()
            }
        );
        let f = Faults::new();
        f.apply_pod(&Accepts, "ops", "op-1", &fault).unwrap();
        let logged = f.log();
        assert_eq!(
            (logged[0].verb.as_str(), logged[0].target.as_str()),
            ("evict", "pod ops/op-1")
        );
        assert_eq!(logged[0].detail, LOW_ON_MEMORY);
    }

    #[test]
    fn a_hold_fires_once_and_only_at_a_request_sent_from_a_pod() {
        let f = Faults::new();
        let id = f.hold_sender(
            RequestMatch {
                verbs: vec!["get".into()],
                resource: Some("deployments".into()),
                ..Default::default()
            },
            Duration::from_secs(8),
            None,
        );
        let op1 = PodRef {
            namespace: "ops".into(),
            name: "op-1".into(),
            uid: "u".into(),
        };
        assert_eq!(f.verdict(&facts("get", "deployments", None)), Verdict::Pass);
        assert_eq!(
            f.verdict(&facts("get", "deployments", Some(&op1))),
            Verdict::Hold(Duration::from_secs(8))
        );
        assert_eq!(
            f.verdict(&facts("get", "deployments", Some(&op1))),
            Verdict::Pass
        );
        assert!(f.rules().is_empty());
        assert!(matches!(f.allow(id), Err(FaultError::NoRule(_))));
    }

    #[test]
    fn a_rule_with_after_applies_only_once_such_a_request_was_served() {
        let f = Faults::new();
        let op1 = PodRef {
            namespace: "ops".into(),
            name: "op-1".into(),
            uid: "u".into(),
        };
        f.hold_sender(
            RequestMatch {
                verbs: vec!["get".into()],
                resource: Some("deployments".into()),
                ..Default::default()
            },
            Duration::from_secs(8),
            Some(RequestMatch {
                verbs: vec!["patch".into()],
                resource: Some("memcacheds".into()),
                ..Default::default()
            }),
        );
        let get = facts("get", "deployments", Some(&op1));
        assert_eq!(f.verdict(&get), Verdict::Pass);
        f.served(&facts("patch", "deployments", None));
        assert_eq!(f.verdict(&get), Verdict::Pass);
        f.served(&facts("patch", "memcacheds", None));
        assert_eq!(f.verdict(&get), Verdict::Hold(Duration::from_secs(8)));
    }

    fn lease_write<'a>(pod: &'a PodRef) -> RequestFacts<'a> {
        RequestFacts {
            verb: "update",
            group: "coordination.k8s.io",
            resource: "leases",
            subresource: "",
            namespace: "ops",
            name: "lock",
            pod: Some(pod),
            user: "u",
        }
    }

    fn lease_writes_of(pod: &str) -> RequestMatch {
        RequestMatch {
            verbs: vec!["update".into(), "patch".into()],
            group: Some("coordination.k8s.io".into()),
            resource: Some("leases".into()),
            pod: Some(format!("ops/{pod}")),
            ..Default::default()
        }
    }

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: "ops".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn deferral(verdict: Verdict) -> Deferral {
        match verdict {
            Verdict::Defer(d) => d,
            other => panic!("expected a deferral, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_deferred_request_is_served_once_the_request_it_waits_for_arrives() {
        let f = Arc::new(Faults::new());
        let (b, c) = (pod("b"), pod("c"));
        f.defer_until(
            lease_writes_of("c"),
            lease_writes_of("b"),
            Milestone::Arrived,
            Duration::from_secs(10),
        );
        let held = deferral(f.verdict(&lease_write(&c)));
        assert!(f.rules().is_empty(), "a defer rule fires once");
        let waiting = {
            let f = f.clone();
            tokio::spawn(async move { f.defer(held, "update leases ops/lock").await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // B's write arrives, and is still in the server: C's is let go.
        let passage = f.arrived(&lease_write(&b));
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("served before its limit")
            .unwrap();
        drop(passage);
        let log = f.log();
        let verbs: Vec<&str> = log.iter().map(|e| e.verb.as_str()).collect();
        assert_eq!(verbs, ["arm", "defer", "serve"]);
        assert_eq!(log[2].target, log[0].target);
        assert_eq!(
            log[1].detail,
            "update leases ops/lock, until the update,patch leases.coordination.k8s.io \
             from pod ops/b has arrived, at most 10000ms"
        );
        assert!(
            log[2]
                .detail
                .ends_with("ms: the request it waited for arrived"),
            "{}",
            log[2].detail
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_defer_for_a_span_holds_the_next_matching_request_that_long_once_and_serves_it() {
        let f = Faults::new();
        let (b, c) = (pod("b"), pod("c"));
        f.defer_for(lease_writes_of("c"), Duration::from_millis(1750));
        // Another pod's write is not the one it holds.
        assert_eq!(f.verdict(&lease_write(&b)), Verdict::Pass);
        let held = deferral(f.verdict(&lease_write(&c)));
        assert!(f.rules().is_empty(), "a defer rule fires once");
        assert_eq!(f.verdict(&lease_write(&c)), Verdict::Pass);
        let start = tokio::time::Instant::now();
        f.defer(held, "update leases ops/lock").await;
        assert_eq!(start.elapsed(), Duration::from_millis(1750));
        let log = f.log();
        let entries: Vec<(&str, &str)> = log
            .iter()
            .map(|e| (e.verb.as_str(), e.detail.as_str()))
            .collect();
        assert_eq!(
            entries,
            [
                ("arm", "defer for 1750ms"),
                ("defer", "update leases ops/lock, for 1750ms"),
                ("serve", "update leases ops/lock, after 1750ms"),
            ]
        );
        // Its JSON has no `until`, and reads back as the same rule.
        f.defer_for(lease_writes_of("c"), Duration::from_millis(5));
        let rule = f.rules().pop().unwrap();
        let json = serde_json::to_value(&rule.action).unwrap();
        assert!(json.get("until").is_none(), "{json}");
        assert_eq!(
            serde_json::from_value::<RuleAction>(json).unwrap(),
            rule.action
        );
    }

    #[tokio::test]
    async fn a_lose_rule_holds_the_write_until_the_read_it_waits_for_was_answered_and_logs_the_answer_dropped()
     {
        let f = Arc::new(Faults::new());
        let c = pod("c");
        let reads = RequestMatch {
            verbs: vec!["get".into()],
            ..lease_writes_of("c")
        };
        let read = RequestFacts {
            verb: "get",
            ..lease_write(&c)
        };
        f.lose_answer(
            lease_writes_of("c"),
            Some((reads, Milestone::Answered)),
            Duration::from_secs(10),
        );
        let held = deferral(f.verdict(&lease_write(&c)));
        assert_eq!(held.fate, Fate::AnswerLost);
        assert!(f.rules().is_empty(), "a lose rule fires once");
        assert_eq!(f.verdict(&lease_write(&c)), Verdict::Pass);
        let waiting = {
            let (f, held) = (f.clone(), held.clone());
            tokio::spawn(async move { f.defer(held, "update leases ops/lock").await })
        };
        // The read arriving is not enough: it must have been answered.
        let passage = f.arrived(&read);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(passage);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("served once the read was answered")
            .unwrap();
        f.lost(&held, "update leases ops/lock", 200);
        let log = f.log();
        let entries: Vec<(&str, &str)> = log
            .iter()
            .map(|e| (e.verb.as_str(), e.detail.as_str()))
            .collect();
        assert_eq!(entries[0].0, "arm");
        assert!(
            entries[0]
                .1
                .ends_with("at most 10000ms, then serve it and lose its answer"),
            "{}",
            entries[0].1
        );
        assert_eq!(
            entries[1..].iter().map(|e| e.0).collect::<Vec<_>>(),
            ["defer", "serve", "lose"]
        );
        assert_eq!(
            entries[3].1,
            "update leases ops/lock: served (200), its answer dropped"
        );
        // As JSON (the control API's rule) it is a defer that loses the answer.
        f.lose_answer(lease_writes_of("c"), None, Duration::ZERO);
        let rule = f.rules().pop().unwrap();
        let json = serde_json::to_value(&rule.action).unwrap();
        assert_eq!(json["action"], "defer");
        assert_eq!(json["fate"], "answerLost");
        assert_eq!(
            serde_json::from_value::<RuleAction>(json).unwrap(),
            rule.action
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_a_rule_commits_runs_to_its_end_after_its_client_went_away_and_others_do_not()
    {
        let finished = Arc::new(AtomicBool::new(false));
        let handling = |detachment: Detachment, fate: Fate| {
            let finished = finished.clone();
            async move {
                detachment.mark(fate);
                tokio::time::sleep(Duration::from_millis(50)).await;
                finished.store(true, Ordering::SeqCst);
            }
        };
        // The client goes away (the service's future is dropped) before the handling ends.
        for fate in [Fate::WithClient, Fate::Committed, Fate::AnswerLost] {
            finished.store(false, Ordering::SeqCst);
            let detachment = Detachment::default();
            let gone = tokio::time::timeout(
                Duration::from_millis(10),
                detachable(detachment.clone(), handling(detachment, fate)),
            )
            .await;
            assert!(gone.is_err());
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(
                finished.load(Ordering::SeqCst),
                fate != Fate::WithClient,
                "{fate:?}"
            );
        }
        // A client that stays gets the answer, or, when a lose rule took it, none.
        for fate in [Fate::WithClient, Fate::Committed, Fate::AnswerLost] {
            let detachment = Detachment::default();
            let took = detachment.clone();
            let answer = detachable(detachment, async move {
                took.mark(fate);
                7
            })
            .await;
            assert_eq!(
                answer.ok(),
                (fate != Fate::AnswerLost).then_some(7),
                "{fate:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_request_waited_for_that_came_before_the_deferred_one_counts() {
        let f = Faults::new();
        let (b, c) = (pod("b"), pod("c"));
        f.defer_until(
            lease_writes_of("b"),
            lease_writes_of("c"),
            Milestone::Answered,
            Duration::from_secs(10),
        );
        let passage = f.arrived(&lease_write(&c));
        assert_eq!(f.verdict(&lease_write(&c)), Verdict::Pass);
        // Arrived is not answered.
        let held = deferral(f.verdict(&lease_write(&b)));
        assert!(!*held.met.borrow());
        drop(passage);
        tokio::time::timeout(Duration::from_secs(5), f.defer(held, "update leases"))
            .await
            .expect("served at once: C's write was answered before");
        assert!(f.log().last().unwrap().detail.ends_with("was answered"));
    }

    #[tokio::test]
    async fn a_deferred_request_is_served_when_its_limit_runs_out_and_the_log_says_so() {
        let f = Faults::new();
        let c = pod("c");
        f.defer_until(
            lease_writes_of("c"),
            lease_writes_of("b"),
            Milestone::Arrived,
            Duration::from_millis(50),
        );
        let held = deferral(f.verdict(&lease_write(&c)));
        tokio::time::timeout(
            Duration::from_secs(5),
            f.defer(held, "update leases ops/lock"),
        )
        .await
        .expect("the limit lets it go");
        let served = f.log().pop().unwrap();
        assert_eq!(served.verb, "serve");
        assert!(
            served.detail.starts_with(DEFER_TIMED_OUT)
                && served
                    .detail
                    .ends_with("update leases ops/lock, the request it waited for had not arrived"),
            "{}",
            served.detail
        );
    }

    #[test]
    fn two_deferrals_make_the_later_write_be_served_after_the_earlier_whichever_comes_first() {
        for b_first in [true, false] {
            let f = Faults::new();
            let (b, c) = (pod("b"), pod("c"));
            let limit = Duration::from_secs(10);
            f.defer_until(
                lease_writes_of("c"),
                lease_writes_of("b"),
                Milestone::Arrived,
                limit,
            );
            f.defer_until(
                lease_writes_of("b"),
                lease_writes_of("c"),
                Milestone::Answered,
                limit,
            );
            let (first, second) = if b_first { (&b, &c) } else { (&c, &b) };
            let p1 = f.arrived(&lease_write(first));
            let d1 = deferral(f.verdict(&lease_write(first)));
            let p2 = f.arrived(&lease_write(second));
            let d2 = deferral(f.verdict(&lease_write(second)));
            let (for_b, for_c) = if b_first { (d1, d2) } else { (d2, d1) };
            assert!(*for_c.met.borrow(), "C goes once B's write arrived");
            assert!(!*for_b.met.borrow(), "B waits for C's answer");
            // C's answered: B goes.
            drop(if b_first { p2 } else { p1 });
            assert!(*for_b.met.borrow());
        }
    }

    #[test]
    fn a_disarmed_deferral_leaves_nothing_waiting() {
        let f = Faults::new();
        let id = f.defer_until(
            lease_writes_of("c"),
            lease_writes_of("b"),
            Milestone::Arrived,
            Duration::from_secs(1),
        );
        f.allow(id).unwrap();
        assert_eq!(f.verdict(&lease_write(&pod("c"))), Verdict::Pass);
        assert!(f.awaiting.lock().unwrap().is_empty());
        assert_eq!(f.log().last().unwrap().verb, "disarm");
    }

    #[test]
    fn a_success_code_is_not_a_rejection() {
        assert!(matches!(
            Faults::new().reject(RequestMatch::default(), 200, "OK", ""),
            Err(FaultError::NotAnErrorCode(200))
        ));
    }
}
