//! Steps about reconciling: running the operator with chosen flags, the results of an
//! object's reconciles (from the operator's log), API requests refused on purpose and the
//! intervals of their retries (from the audit), periodic resyncs, and quiet once an object
//! is gone.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use cucumber::{given, then, when};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};

use super::Doing as _;
use super::memcached::namespace_of;
use super::wait::eventually;
use super::{Dur, Step, StepError, World};
use crate::check::reconcile::{Reconcile, backing_off, collapse, parse_log, periodic};
use crate::fault::RequestMatch;
use crate::record::{Entry, History, Observation};

/// The status code the API server answers refused requests with: 403 Forbidden, which
/// every provider can give (on kind an admission policy answers).
pub const REFUSAL_CODE: u16 = 403;

/// Reconcile results in order as features write them: `requeue, then success`; each is a
/// result label of `controller_runtime_reconcile_total`.
#[derive(Debug, Clone, PartialEq, Eq, cucumber::Parameter)]
#[param(name = "results", regex = r"[a-z_]+(?:, then [a-z_]+)*")]
pub struct Results(pub Vec<String>);

impl FromStr for Results {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const LABELS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];
        let results: Vec<String> = s.split(", then ").map(str::to_string).collect();
        match results.iter().find(|r| !LABELS.contains(&r.as_str())) {
            Some(bad) => Err(format!(
                "{bad:?} is no reconcile result; the results are {}",
                LABELS.join(", ")
            )),
            None => Ok(Self(results)),
        }
    }
}

/// Makes the API server refuse requests matching `matches` with [`REFUSAL_CODE`],
/// remembered under `key` (for the undo) and as the scenario's latest refusal (for the
/// checks of refused requests).
///
/// # Errors
/// When there is no cluster or the provider cannot make the rule.
pub async fn refuse(world: &mut World, key: &str, matches: RequestMatch) -> Result<(), StepError> {
    let id = world
        .provider()?
        .reject(matches.clone(), REFUSAL_CODE, "refused by the scenario")
        .await
        .doing(format!("making the API server refuse {key}"))?;
    world.refusals.rules.insert(key.to_string(), id);
    world.refusals.latest = Some(matches);
    Ok(())
}

/// Undoes [`refuse`] for `key`.
///
/// # Errors
/// [`StepError::Missing`] when no step made the API server refuse `key`; otherwise when
/// there is no cluster or the provider cannot remove the rule.
pub async fn accept(world: &mut World, key: &str) -> Result<(), StepError> {
    let id = world.refusals.rules.remove(key).ok_or_else(|| {
        StepError::Missing(format!(
            "no step made the API server refuse {key}: run \"the API server rejects …\" first"
        ))
    })?;
    world
        .provider()?
        .allow(id)
        .await
        .doing(format!("making the API server accept {key} again"))?;
    Ok(())
}

fn request_match(verb: &str, resource: &str, namespace: String) -> RequestMatch {
    RequestMatch {
        verbs: vec![verb.to_string()],
        resource: Some(resource.to_string()),
        subresource: Some(String::new()),
        namespace: Some(namespace),
        ..RequestMatch::default()
    }
}

#[given(expr = "the API server rejects requests to {word} {word} in namespace {string}")]
#[when(expr = "the API server rejects requests to {word} {word} in namespace {string}")]
async fn rejects(world: &mut World, verb: String, resource: String, namespace: String) -> Step {
    let real = world.ensure_namespace(&namespace).await?;
    let key = format!("{verb} {resource} in {namespace}");
    refuse(world, &key, request_match(&verb, &resource, real)).await?;
    Ok(())
}

#[when(expr = "the API server accepts requests to {word} {word} in namespace {string} again")]
async fn accepts(world: &mut World, verb: String, resource: String, namespace: String) -> Step {
    accept(world, &format!("{verb} {resource} in {namespace}")).await?;
    Ok(())
}

/// Whether an audited write is one the remembered refusal matches.
fn matched(rule: &RequestMatch, entry: &Entry) -> bool {
    let Observation::Write {
        verb,
        resource,
        namespace,
        name,
        ..
    } = &entry.observation
    else {
        return false;
    };
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    (rule.verbs.is_empty() || rule.verbs.iter().any(|v| v == verb))
        && eq(&rule.resource, resource)
        && eq(&rule.subresource, subresource)
        && eq(&rule.namespace, namespace)
        && eq(&rule.name, name)
}

/// The requests the scenario's latest refusal matches.
fn latest_refusal(world: &World) -> Result<&RequestMatch, StepError> {
    world.refusals.latest.as_ref().ok_or_else(|| {
        StepError::Missing(
            "no step made the API server refuse requests before: run \"the API server rejects \
             requests to {word} {word} in namespace {string}\" (or \"… rejects changes to \
             ConfigMap {string} …\") first"
                .into(),
        )
    })
}

/// The operator's requests the scenario's latest refusal turned away, in time order.
///
/// # Errors
/// [`StepError::Missing`] when no step made the API server refuse requests.
pub async fn refused(world: &World) -> Result<Vec<Entry>, StepError> {
    let rule = latest_refusal(world)?;
    Ok(world
        .history()
        .await
        .entries()
        .iter()
        .filter(|e| {
            matches!(e.observation, Observation::Write { code, .. } if code == REFUSAL_CODE)
                && matched(rule, e)
        })
        .cloned()
        .collect())
}

/// The time of a history's first entry: where failure messages count time from.
pub fn origin(history: &History) -> DateTime<Utc> {
    history
        .entries()
        .first()
        .map(|e| e.time)
        .unwrap_or_default()
}

#[then(expr = "within {duration} the API server refused the operator at least {int} times")]
async fn refused_at_least(world: &mut World, within: Dur, times: usize) -> Step {
    // Without a refusal there is nothing to wait for: fail at once.
    latest_refusal(world)?;
    let what = format!("the operator's requests were refused at least {times} times");
    eventually(world.span(&within)?, &what, || async {
        let refused = refused(world).await.map_err(|e| super::chain(&e))?;
        if refused.len() >= times {
            Ok(())
        } else {
            Err(format!(
                "{} refusal(s):\n{}",
                refused.len(),
                crate::record::describe(&refused, origin(&world.history().await))
            ))
        }
    })
    .await?;
    Ok(())
}

#[then(
    expr = "the refused requests were retried at least {int} times at intervals that never shrank by more than {duration} and grew by at least {duration}"
)]
async fn retried_backing_off(world: &mut World, retries: usize, slack: Dur, growth: Dur) -> Step {
    let refused = refused(world).await?;
    let verdict = backing_off(&refused, retries, world.span(&slack)?, world.span(&growth)?);
    ensure!(
        verdict.passed,
        "{}",
        verdict.explain(origin(&world.history_so_far()))
    );
    println!("{}", verdict.summary);
    Ok(())
}

/// Every reconcile the operator's pods logged, in time order.
///
/// # Errors
/// When there is no cluster or the operator's pods cannot be listed.
pub async fn reconciles(world: &World) -> Result<Vec<Reconcile>, StepError> {
    let namespace = world.operator_namespace()?;
    let pods: Api<Pod> = Api::namespaced(world.client()?, &namespace);
    let list = pods
        .list(&ListParams::default().labels(&world.subject().pod_selector))
        .await
        .doing("listing the operator's pods")?;
    let mut all = Vec::new();
    for pod in list.items {
        let name = pod.metadata.name.unwrap_or_default();
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_default();
        all.extend(parse_log(&name, &log));
    }
    all.sort_by_key(|r| r.at);
    Ok(all)
}

/// The reconciles of Memcached `name`.
async fn reconciles_of(world: &World, name: &str) -> Result<Vec<Reconcile>, StepError> {
    let namespace = namespace_of(world, name)?;
    Ok(reconciles(world)
        .await?
        .into_iter()
        .filter(|r| r.namespace == namespace && r.name == name)
        .collect())
}

fn describe(reconciles: &[Reconcile], origin: DateTime<Utc>) -> String {
    if reconciles.is_empty() {
        return "no reconcile".into();
    }
    reconciles
        .iter()
        .map(|r| r.describe(origin))
        .collect::<Vec<_>>()
        .join("\n")
}

#[then(expr = "within {duration} the reconcile results of memcached {string} were {results}")]
async fn results_were(world: &mut World, within: Dur, name: String, expected: Results) -> Step {
    let expected = expected.0;
    let what = format!(
        "the reconciles of memcached {name} ended in {} (repeats merged)",
        expected.join(", then ")
    );
    let origin = origin(&world.history().await);
    // The probe answers `Ok(Err(observed))` when the results left the expected course: the
    // wait ends there and the step fails.
    let course = eventually(world.span(&within)?, &what, || async {
        let seen = reconciles_of(world, &name)
            .await
            .map_err(|e| super::chain(&e))?;
        let results = collapse(seen.iter().map(|r| r.result.as_str()));
        let observed = || {
            format!(
                "results {}:\n{}",
                results.join(", then "),
                describe(&seen, origin)
            )
        };
        if results == expected {
            return Ok(Ok(seen));
        }
        // Results only ever get added: once they leave the expected course, no later
        // reconcile brings them back.
        if !expected.starts_with(&results) {
            return Ok(Err(observed()));
        }
        Err(observed())
    })
    .await?;
    let seen = match course {
        Ok(seen) => seen,
        Err(observed) => bail!("expected {what}; they took another course: {observed}"),
    };
    world.note(&format!(
        "memcached {name}: {} reconciles, {}",
        seen.len(),
        expected.join(" → ")
    ));
    Ok(())
}

/// Waits (at most 30 s) until nothing the operator watches has changed and the operator
/// has written nothing for `quiet`: the reconciles that follow are the resync's, not the
/// echo of a last status write or Deployment update.
///
/// # Errors
/// [`StepError::Unmet`] when they never stayed unchanged that long within 30 s.
async fn settled(world: &World, quiet: std::time::Duration) -> Result<(), StepError> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let history = world.history().await;
        let last_change = history
            .entries()
            .iter()
            .filter(|e| {
                matches!(
                    e.observation,
                    Observation::Write {
                        election: false,
                        ..
                    } | Observation::Memcached { .. }
                        | Observation::Deployment { .. }
                )
            })
            .map(|e| e.time)
            .max();
        let quiet_since =
            last_change.map_or(quiet, |t| (Utc::now() - t).to_std().unwrap_or_default());
        if quiet_since >= quiet {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the operator and its objects never stayed unchanged for {quiet:?} within 30s"
        );
        // The next moment the quiet could be long enough, unless something changes.
        tokio::time::sleep(quiet - quiet_since).await;
    }
}

#[given(expr = "the operator has been idle for {duration}")]
#[when(expr = "the operator has been idle for {duration}")]
async fn idle(world: &mut World, quiet: Dur) -> Step {
    // An operator whose profile gives it no more work to do works all the time (its leader
    // writes on its own): it is never idle, and the step says so instead of waiting.
    if let Some(work) = &world.subject().work
        && work.more.is_none()
    {
        world.note(&format!(
            "{} works all the time: not waiting for it to be idle",
            world.subject().name
        ));
        return Ok(());
    }
    settled(world, world.span(&quiet)?).await?;
    Ok(())
}

#[then(
    expr = "for {duration} memcached {string} is reconciled every {duration}, give or take {duration}, each time ending in {word} and writing nothing"
)]
async fn resynced(
    world: &mut World,
    span: Dur,
    name: String,
    period: Dur,
    slack: Dur,
    result: String,
) -> Step {
    settled(world, world.span(&period)?).await?;
    let from = Utc::now();
    // The step's meaning is "for this long": watch the window, then judge it.
    tokio::time::sleep(world.span(&span)?).await;
    let to = Utc::now();
    let seen = reconciles_of(world, &name).await?;
    match periodic(
        &seen,
        from,
        to,
        world.span(&period)?,
        world.span(&slack)?,
        &result,
    ) {
        Ok(summary) => println!("{summary}"),
        Err(why) => bail!(
            "memcached {name} was not reconciled every {:?}: {why}",
            world.span(&period)?
        ),
    }
    let writes: Vec<Entry> = world
        .history()
        .await
        .entries()
        .iter()
        .filter(|e| {
            e.time >= from
                && e.time <= to
                && matches!(
                    e.observation,
                    Observation::Write {
                        election: false,
                        ..
                    }
                )
        })
        .cloned()
        .collect();
    ensure!(
        writes.is_empty(),
        "the resyncs of memcached {name} were expected to change nothing, but the operator wrote:\n{}",
        crate::record::describe(&writes, from)
    );
    Ok(())
}

#[then(expr = "memcached {string} is not reconciled again for {duration}")]
async fn not_reconciled_again(world: &mut World, name: String, span: Dur) -> Step {
    let from = Utc::now();
    // The step's meaning is "for this long".
    tokio::time::sleep(world.span(&span)?).await;
    let seen = reconciles_of(world, &name).await?;
    let late: Vec<Reconcile> = seen
        .iter()
        .filter(|r| r.started() >= from)
        .cloned()
        .collect();
    ensure!(
        late.is_empty(),
        "memcached {name} was reconciled again within {:?} (times from the start of that window):\n{}\nall its reconciles:\n{}",
        world.span(&span)?,
        describe(&late, from),
        describe(&seen, from)
    );
    Ok(())
}

/// The requests the API server was made to refuse, for the undo and the checks.
#[derive(Debug, Default)]
pub struct Refusals {
    /// The provider's id of each refusal rule in force, by the key the step made it under
    /// (`get memcacheds in default`, `changes to ConfigMap memcached-registry`).
    pub rules: BTreeMap<String, u64>,
    /// The requests the scenario's latest refusal matches (still remembered after its undo).
    pub latest: Option<RequestMatch>,
}
