//! Steps for any kind: what an author states about the objects of their own operator
//! without a line of Rust — apply YAML, an object matches a partial YAML (within a bound, or
//! throughout a span), is deleted and gone, carries or lost a finalizer, has a condition, is
//! owned by another, has an Event about it, keeps a field's value, and whether the operator
//! wrote it since a checkpoint (from the audit).
//!
//! # Objects and namespaces
//! An object is named `the KIND "NAME"` — KIND as `kubectl get` takes it: the kind
//! (`Deployment`), its plural (`deployments`), either with its group (`Deployment.apps`,
//! `memcacheds.cache.example.com`) when two groups serve it; NAME is `name`, or
//! `namespace/name`. Namespaces are the feature's: each is the scenario's own namespace of
//! that name (as every step maps them), and an object that names none is in the scenario's
//! `default`. YAML that names no namespace is applied there too.
//!
//! # Matching
//! A partial YAML matches by the rules of [`crate::partial`]: maps by the keys stated,
//! arrays element by element in order and length, `null` for a field not set. Every
//! document of a partial YAML names its object by `apiVersion`, `kind` and
//! `metadata.name` (and `metadata.namespace`, the feature's).
//!
//! # Bounds
//! Every waiting step states its bound and fails with what it last observed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use cucumber::gherkin::Step as GherkinStep;
use cucumber::{given, then, when};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use serde::Deserialize as _;
use serde_json::Value;

use super::Doing as _;
use super::wait::{eventually, throughout};
use super::{Dur, Step, StepError, World};
use crate::deploy::{Manifest, Namespacing};
use crate::record::Observation;

/// The logical namespace of objects that name none.
const DEFAULT_NAMESPACE: &str = "default";

/// What the object steps keep in a scenario.
#[derive(Default)]
pub struct ObjectsSeen {
    /// The API server's discovery, once a step needed it (refreshed when a kind is not in
    /// it: a CRD applied since).
    discovery: Option<Arc<Discovery>>,
    /// The checkpoints the scenario took, by name.
    checkpoints: HashMap<String, DateTime<Utc>>,
}

/// An object as a step names it, resolved.
struct Target {
    resource: ApiResource,
    namespace: Option<String>,
    name: String,
    /// As the step wrote it, for messages.
    shown: String,
}

impl Target {
    fn api(&self, world: &World) -> Result<Api<DynamicObject>, StepError> {
        let client = world.client()?;
        Ok(match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.resource),
            None => Api::all_with(client, &self.resource),
        })
    }

    async fn get(&self, world: &World) -> Result<Option<DynamicObject>, String> {
        let api = self.api(world).map_err(|e| e.to_string())?;
        api.get_opt(&self.name)
            .await
            .map_err(|e| format!("reading {}: {}", self.shown, crate::error_chain(&e)))
    }
}

async fn discovery(world: &mut World, fresh: bool) -> Result<Arc<Discovery>, StepError> {
    if !fresh && let Some(d) = &world.objects.discovery {
        return Ok(d.clone());
    }
    let run = Discovery::new(world.client()?)
        .run()
        .await
        .doing("discovering the API server's resources")?;
    let run = Arc::new(run);
    world.objects.discovery = Some(run.clone());
    Ok(run)
}

/// The resources `word` names in `discovery` (kind or plural, optionally `.group`).
fn matching(discovery: &Discovery, word: &str) -> Vec<(ApiResource, ApiCapabilities)> {
    let (name, group) = match word.split_once('.') {
        Some((n, g)) => (n, Some(g)),
        None => (word, None),
    };
    let mut found: Vec<(ApiResource, ApiCapabilities)> = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .filter(|(r, _)| {
            (r.kind.eq_ignore_ascii_case(name) || r.plural == name)
                && group.is_none_or(|g| r.group == g)
        })
        .collect();
    found.sort_by(|a, b| a.0.group.cmp(&b.0.group));
    found
}

/// The resource `word` names: one group's, the core group's when several serve it.
async fn resource(world: &mut World, word: &str) -> Result<(ApiResource, Scope), StepError> {
    let mut found = matching(&*discovery(world, false).await?, word);
    if found.is_empty() {
        // A CRD applied since the last look.
        found = matching(&*discovery(world, true).await?, word);
    }
    match found.as_slice() {
        [] => Err(StepError::Missing(format!(
            "the API server serves no kind or resource {word:?}: expected a kind such as \
             Deployment, a plural such as deployments, or either with its group \
             (Deployment.apps)"
        ))),
        [(r, caps)] => Ok((r.clone(), caps.scope.clone())),
        [(r, caps), ..] if r.group.is_empty() => Ok((r.clone(), caps.scope.clone())),
        several => Err(StepError::Missing(format!(
            "{word:?} is served by several groups ({}): name one as KIND.GROUP",
            several
                .iter()
                .map(|(r, _)| format!("{}.{}", r.kind, r.group))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The object `the KIND "NAME"` names.
async fn target(world: &mut World, kind: &str, name: &str) -> Result<Target, StepError> {
    let (resource, scope) = resource(world, kind).await?;
    let (logical, object) = match name.split_once('/') {
        Some((ns, n)) => (ns, n),
        None => (DEFAULT_NAMESPACE, name),
    };
    let namespace = match scope {
        Scope::Namespaced => Some(world.namespace(logical)?),
        Scope::Cluster => None,
    };
    Ok(Target {
        shown: format!("{} {name}", resource.kind),
        resource,
        namespace,
        name: object.to_string(),
    })
}

/// The docstring of a step that needs one, each of its YAML documents checked to parse: a
/// malformed one is refused with the line and column of the feature file it is on.
fn docstring(step: &GherkinStep) -> Result<&str, StepError> {
    let text = step.docstring.as_deref().ok_or_else(|| {
        StepError::Missing(format!(
            "the step \"{}\" needs its YAML as a doc string (between \"\"\" lines) below it",
            step.value
        ))
    })?;
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        if let Err(e) = Value::deserialize(doc) {
            return Err(StepError::Missing(malformed_docstring(
                step.position.line,
                text,
                i + 1,
                &e,
            )));
        }
    }
    Ok(text)
}

/// Why a document of a step's doc string is not YAML, its positions turned into lines of
/// the feature file: the doc string's text starts on the line after its opening `"""`,
/// which is the line after the step's (the gherkin parser keeps the newline that ends the
/// `"""` line); its columns are the doc string's, whose indentation is gone.
fn malformed_docstring(
    step_line: usize,
    text: &str,
    index: usize,
    e: &serde_yaml::Error,
) -> String {
    static POSITION: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"line (\d+) column \d+").expect("a valid regular expression")
    });
    let first = step_line + 1 + usize::from(!text.starts_with('\n'));
    let message = e.to_string();
    let message = POSITION.replace_all(&message, |c: &regex::Captures<'_>| {
        let line: usize = c[1].parse().unwrap_or(1);
        format!(
            "line {} of the feature file",
            first + line.saturating_sub(1)
        )
    });
    format!("document {index} of the step's doc string is not YAML: {message}")
}

/// `manifests` with each namespace they name mapped to the scenario's (created when new).
async fn scenario_namespaces(
    world: &World,
    mut manifests: Vec<Manifest>,
) -> Result<Vec<Manifest>, StepError> {
    for manifest in &mut manifests {
        if let Some(ns) = manifest.object.metadata.namespace.clone() {
            manifest.object.metadata.namespace = Some(world.ensure_namespace(&ns).await?);
        }
    }
    Ok(manifests)
}

async fn apply(world: &mut World, manifests: Vec<Manifest>, what: &str) -> Step {
    let manifests = scenario_namespaces(world, manifests).await?;
    let default = world.ensure_namespace(DEFAULT_NAMESPACE).await?;
    crate::deploy::apply_all(&world.client()?, &manifests, Namespacing::Default(&default))
        .await
        .map_err(|e| StepError::Unmet(format!("applying {what}: {}", crate::error_chain(&e))))?;
    // The kinds a CRD among them adds.
    world.objects.discovery = None;
    Ok(())
}

#[given("these objects are applied:")]
#[when("these objects are applied:")]
async fn apply_docstring(world: &mut World, step: &GherkinStep) -> Step {
    let text = docstring(step)?;
    let manifests = crate::deploy::parse_manifests(text, Path::new("the step's doc string"))
        .map_err(|e| StepError::Unmet(crate::error_chain(&e)))?;
    apply(world, manifests, "the step's doc string").await
}

#[given(expr = "the objects in {string} are applied")]
#[when(expr = "the objects in {string} are applied")]
async fn apply_file(world: &mut World, path: String) -> Step {
    let manifests = crate::deploy::read_manifests(Path::new(&path))
        .map_err(|e| StepError::Unmet(crate::error_chain(&e)))?;
    apply(world, manifests, &path).await
}

/// A document of a partial YAML: the object it names and the fragment to match.
struct Expected {
    target: Target,
    fragment: Value,
}

async fn expected(world: &mut World, step: &GherkinStep) -> Result<Vec<Expected>, StepError> {
    let text = docstring(step)?.to_string();
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let bad = |why: String| {
            StepError::Missing(format!(
                "document {} of the step's doc string: {why}",
                i + 1
            ))
        };
        let mut fragment = Value::deserialize(doc).map_err(|e| bad(e.to_string()))?;
        if fragment.is_null() {
            continue;
        }
        let field = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
        let (Some(api_version), Some(kind)) =
            (field(&fragment, "apiVersion"), field(&fragment, "kind"))
        else {
            return Err(bad(
                "expected apiVersion and kind naming the object's kind".into()
            ));
        };
        let name = field(&fragment["metadata"], "name")
            .ok_or_else(|| bad("expected metadata.name naming the object".into()))?;
        // The feature's namespace; the object's is the scenario's.
        let namespace = fragment["metadata"]
            .as_object_mut()
            .and_then(|m| m.remove("namespace"))
            .and_then(|v| v.as_str().map(str::to_string));
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        let word = if group.is_empty() {
            kind.clone()
        } else {
            format!("{kind}.{group}")
        };
        let named = match &namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name,
        };
        let target = target(world, &word, &named).await?;
        out.push(Expected { target, fragment });
    }
    if out.is_empty() {
        return Err(StepError::Missing(
            "the step's doc string holds no object".into(),
        ));
    }
    Ok(out)
}

/// Where the objects differ from their fragments (empty when they all match).
async fn differences(world: &World, expected: &[Expected]) -> Result<(), String> {
    let mut found = Vec::new();
    for e in expected {
        match e.target.get(world).await? {
            None => found.push(format!("{} does not exist", e.target.shown)),
            Some(object) => {
                let value = serde_json::to_value(&object).map_err(|e| e.to_string())?;
                found.extend(
                    crate::partial::mismatches(&e.fragment, &value)
                        .into_iter()
                        .map(|m| format!("{} {m}", e.target.shown)),
                );
            }
        }
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(found.join("; "))
    }
}

#[given(expr = "within {duration} these objects match:")]
#[then(expr = "within {duration} these objects match:")]
async fn objects_match(world: &mut World, within: Dur, step: &GherkinStep) -> Step {
    let expected = expected(world, step).await?;
    let shown = names(&expected);
    eventually(world.span(&within)?, &format!("{shown} match"), || {
        differences(world, &expected)
    })
    .await?;
    Ok(())
}

#[then(expr = "these objects keep matching for {duration}:")]
async fn objects_keep_matching(world: &mut World, span: Dur, step: &GherkinStep) -> Step {
    let expected = expected(world, step).await?;
    let shown = names(&expected);
    throughout(world.span(&span)?, &format!("{shown} match"), || {
        differences(world, &expected)
    })
    .await?;
    Ok(())
}

fn names(expected: &[Expected]) -> String {
    expected
        .iter()
        .map(|e| e.target.shown.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

#[when(expr = "the {word} {string} is deleted")]
async fn delete(world: &mut World, kind: String, name: String) -> Step {
    let target = target(world, &kind, &name).await?;
    target
        .api(world)?
        .delete(&target.name, &DeleteParams::default())
        .await
        .doing(format!("deleting {}", target.shown))?;
    Ok(())
}

#[given(expr = "within {duration} the {word} {string} is gone")]
#[then(expr = "within {duration} the {word} {string} is gone")]
async fn gone(world: &mut World, within: Dur, kind: String, name: String) -> Step {
    let target = target(world, &kind, &name).await?;
    eventually(
        world.span(&within)?,
        &format!("{} is gone", target.shown),
        || async {
            match target.get(world).await? {
                None => Ok(()),
                Some(o) => Err(format!(
                    "it exists{}, finalizers {:?}",
                    if o.metadata.deletion_timestamp.is_some() {
                        ", Terminating"
                    } else {
                        ""
                    },
                    o.metadata.finalizers.unwrap_or_default()
                )),
            }
        },
    )
    .await?;
    Ok(())
}

#[given(expr = "within {duration} the {word} {string} carries the finalizer {string}")]
#[then(expr = "within {duration} the {word} {string} carries the finalizer {string}")]
async fn carries(world: &mut World, within: Dur, kind: String, name: String, fin: String) -> Step {
    finalizer(world, within, kind, name, fin, true).await
}

#[given(expr = "within {duration} the {word} {string} has lost the finalizer {string}")]
#[then(expr = "within {duration} the {word} {string} has lost the finalizer {string}")]
async fn lost(world: &mut World, within: Dur, kind: String, name: String, fin: String) -> Step {
    finalizer(world, within, kind, name, fin, false).await
}

async fn finalizer(
    world: &mut World,
    within: Dur,
    kind: String,
    name: String,
    finalizer: String,
    carried: bool,
) -> Step {
    let target = target(world, &kind, &name).await?;
    let what = if carried {
        format!("{} carries the finalizer {finalizer}", target.shown)
    } else {
        format!(
            "{} no longer carries the finalizer {finalizer} (or is gone)",
            target.shown
        )
    };
    eventually(world.span(&within)?, &what, || async {
        let finalizers = match target.get(world).await? {
            Some(o) => o.metadata.finalizers.unwrap_or_default(),
            None if carried => return Err(format!("{} does not exist", target.shown)),
            None => return Ok(()),
        };
        if finalizers.contains(&finalizer) == carried {
            Ok(())
        } else {
            Err(format!("finalizers {finalizers:?}"))
        }
    })
    .await?;
    Ok(())
}

#[given(
    expr = "within {duration} the {word} {string} has the condition {string} with status {string}"
)]
#[then(
    expr = "within {duration} the {word} {string} has the condition {string} with status {string}"
)]
async fn condition_with_status(
    world: &mut World,
    within: Dur,
    kind: String,
    name: String,
    condition: String,
    status: String,
) -> Step {
    has_condition(world, within, kind, name, condition, status, None).await
}

#[given(
    expr = "within {duration} the {word} {string} has the condition {string} with status {string} and reason {string}"
)]
#[then(
    expr = "within {duration} the {word} {string} has the condition {string} with status {string} and reason {string}"
)]
async fn condition_with_reason(
    world: &mut World,
    within: Dur,
    kind: String,
    name: String,
    condition: String,
    status: String,
    reason: String,
) -> Step {
    has_condition(world, within, kind, name, condition, status, Some(reason)).await
}

async fn has_condition(
    world: &mut World,
    within: Dur,
    kind: String,
    name: String,
    condition: String,
    status: String,
    reason: Option<String>,
) -> Step {
    let target = target(world, &kind, &name).await?;
    let what = format!(
        "{} has the condition {condition} with status {status}{}",
        target.shown,
        reason
            .as_ref()
            .map_or_else(String::new, |r| format!(" and reason {r}"))
    );
    eventually(world.span(&within)?, &what, || async {
        let object = target
            .get(world)
            .await?
            .ok_or_else(|| format!("{} does not exist", target.shown))?;
        let conditions = object.data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let text = |c: &Value, f: &str| c[f].as_str().unwrap_or_default().to_string();
        let found = conditions.iter().find(|c| text(c, "type") == condition);
        match found {
            Some(c)
                if text(c, "status") == status
                    && reason.as_ref().is_none_or(|r| text(c, "reason") == *r) =>
            {
                Ok(())
            }
            _ => Err(format!(
                "conditions [{}]",
                conditions
                    .iter()
                    .map(|c| format!(
                        "{} {} {} ({})",
                        text(c, "type"),
                        text(c, "status"),
                        text(c, "reason"),
                        text(c, "message")
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    })
    .await?;
    Ok(())
}

#[given(expr = "within {duration} the {word} {string} is owned by the {word} {string}")]
#[then(expr = "within {duration} the {word} {string} is owned by the {word} {string}")]
async fn owned(
    world: &mut World,
    within: Dur,
    kind: String,
    name: String,
    owner_kind: String,
    owner: String,
) -> Step {
    let target = target(world, &kind, &name).await?;
    let owner = self::target(world, &owner_kind, &owner).await?;
    let what = format!(
        "{} has {} as its controller (ownerReference with controller: true and its uid)",
        target.shown, owner.shown
    );
    eventually(world.span(&within)?, &what, || async {
        let uid = owner
            .get(world)
            .await?
            .and_then(|o| o.metadata.uid)
            .ok_or_else(|| format!("{} does not exist", owner.shown))?;
        let object = target
            .get(world)
            .await?
            .ok_or_else(|| format!("{} does not exist", target.shown))?;
        let references = object.metadata.owner_references.unwrap_or_default();
        if references
            .iter()
            .any(|r| r.uid == uid && r.kind == owner.resource.kind && r.controller == Some(true))
        {
            Ok(())
        } else {
            Err(format!(
                "owner references [{}]",
                references
                    .iter()
                    .map(|r| format!(
                        "{} {} (uid {}, controller {:?})",
                        r.kind, r.name, r.uid, r.controller
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    })
    .await?;
    Ok(())
}

#[given(expr = "within {duration} an Event {string} is recorded about the {word} {string}")]
#[then(expr = "within {duration} an Event {string} is recorded about the {word} {string}")]
async fn event(world: &mut World, within: Dur, reason: String, kind: String, name: String) -> Step {
    use k8s_openapi::api::core::v1::Event;
    let target = target(world, &kind, &name).await?;
    let namespace = match &target.namespace {
        Some(ns) => ns.clone(),
        // Events about cluster-scoped objects go to `default`.
        None => "default".to_string(),
    };
    let api: Api<Event> = Api::namespaced(world.client()?, &namespace);
    let what = format!("an Event with reason {reason} about {}", target.shown);
    eventually(world.span(&within)?, &what, || async {
        let events = api
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing the Events of {namespace}: {e}"))?;
        let about: Vec<&Event> = events
            .items
            .iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some(target.resource.kind.as_str())
                    && e.involved_object.name.as_deref() == Some(target.name.as_str())
            })
            .collect();
        if about.iter().any(|e| e.reason.as_deref() == Some(&reason)) {
            Ok(())
        } else {
            Err(format!(
                "its Events: [{}]",
                about
                    .iter()
                    .map(|e| format!(
                        "{} ({})",
                        e.reason.clone().unwrap_or_default(),
                        e.message.clone().unwrap_or_default()
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    })
    .await?;
    Ok(())
}

/// One step of a field path: a key, or an index into an array.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Parses a field path (`.spec.replicas`, `.status.conditions[0].type`, `spec.replicas`).
fn field_path(path: &str) -> Result<Vec<Segment>, String> {
    let bad = |why: &str| format!("{path:?} is not a field path: {why} (e.g. .spec.replicas)");
    let mut segments = Vec::new();
    let text = path.strip_prefix('.').unwrap_or(path);
    for part in text.split('.') {
        let (key, indexes) = part.split_at(part.find('[').unwrap_or(part.len()));
        if key.is_empty() && (indexes.is_empty() || !segments.is_empty()) {
            return Err(bad("expected a field name between dots"));
        }
        if !key.is_empty() {
            segments.push(Segment::Key(key.to_string()));
        }
        let mut rest = indexes;
        while !rest.is_empty() {
            let close = rest
                .find(']')
                .filter(|_| rest.starts_with('['))
                .ok_or_else(|| bad("expected [N] after a field name"))?;
            let index = rest[1..close]
                .parse()
                .map_err(|_| bad("expected a number between [ and ]"))?;
            segments.push(Segment::Index(index));
            rest = &rest[close + 1..];
        }
    }
    Ok(segments)
}

/// The value at `path` in `object` (`None` when it is not set).
fn at_path<'a>(object: &'a Value, path: &[Segment]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object, |current, segment| match segment {
            Segment::Key(key) => current.get(key),
            Segment::Index(i) => current.get(*i),
        })
}

#[then(expr = "the field {string} of the {word} {string} keeps the value {string} for {duration}")]
async fn keeps_value(
    world: &mut World,
    path: String,
    kind: String,
    name: String,
    value: String,
    span: Dur,
) -> Step {
    // The value as YAML: `3` is a number, `"3"` a string, `true` a boolean.
    let expected: Value = serde_yaml::from_str(&value).map_err(|e| {
        StepError::Missing(format!("the value {value:?} is not a YAML scalar: {e}"))
    })?;
    let segments = field_path(&path).map_err(StepError::Missing)?;
    let target = target(world, &kind, &name).await?;
    let what = format!("{path} of {} is {value}", target.shown);
    throughout(world.span(&span)?, &what, || async {
        let object = target
            .get(world)
            .await?
            .ok_or_else(|| format!("{} does not exist", target.shown))?;
        let object = serde_json::to_value(&object).map_err(|e| e.to_string())?;
        let found = at_path(&object, &segments);
        let mismatches = crate::partial::mismatches(&expected, found.unwrap_or(&Value::Null));
        match (found, mismatches.is_empty()) {
            (Some(_), true) => Ok(()),
            (None, _) => Err(format!("{path} is not set")),
            (Some(v), false) => Err(format!("{path} is {v}")),
        }
    })
    .await?;
    Ok(())
}

#[given(expr = "a checkpoint {string}")]
#[when(expr = "a checkpoint {string}")]
async fn checkpoint(world: &mut World, name: String) -> Step {
    world.objects.checkpoints.insert(name, Utc::now());
    Ok(())
}

#[then(expr = "the operator wrote the {word} {string} since the checkpoint {string}")]
async fn wrote(world: &mut World, kind: String, name: String, checkpoint: String) -> Step {
    let (writes, target) = writes_since(world, &kind, &name, &checkpoint).await?;
    ensure!(
        !writes.is_empty(),
        "no replica of the operator wrote {} since the checkpoint {checkpoint}",
        target.shown
    );
    Ok(())
}

#[then(expr = "the operator did not write the {word} {string} since the checkpoint {string}")]
async fn did_not_write(world: &mut World, kind: String, name: String, checkpoint: String) -> Step {
    let (writes, target) = writes_since(world, &kind, &name, &checkpoint).await?;
    ensure!(
        writes.is_empty(),
        "the operator wrote {} since the checkpoint {checkpoint}: {}",
        target.shown,
        writes.join("; ")
    );
    Ok(())
}

/// The operator's successful writes of the object since the checkpoint, as the audit has
/// them by now.
async fn writes_since(
    world: &mut World,
    kind: &str,
    name: &str,
    checkpoint: &str,
) -> Result<(Vec<String>, Target), StepError> {
    let since = *world.objects.checkpoints.get(checkpoint).ok_or_else(|| {
        StepError::Missing(format!(
            "no checkpoint {checkpoint:?}: take it first with \"a checkpoint {checkpoint:?}\""
        ))
    })?;
    if !world.recording() {
        return Err(StepError::Missing(
            "nothing is recorded before the operator is deployed: deploy it first".into(),
        ));
    }
    let target = target(world, kind, name).await?;
    let history = world.history().await;
    let namespace = target.namespace.clone().unwrap_or_default();
    let writes = history
        .entries()
        .iter()
        .filter(|e| e.time >= since)
        .filter_map(|e| match &e.observation {
            Observation::Write {
                replica,
                verb,
                resource,
                namespace: ns,
                name: n,
                code,
                ..
            } if (resource == &target.resource.plural
                || resource.starts_with(&format!("{}/", target.resource.plural)))
                && *ns == namespace
                && *n == target.name
                && (200..300).contains(code) =>
            {
                Some(format!("{verb} {resource} by {replica} at {}", e.time))
            }
            _ => None,
        })
        .collect();
    Ok((writes, target))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_field_path_reaches_into_maps_and_arrays() {
        let object =
            json!({"spec": {"replicas": 3}, "status": {"conditions": [{"type": "Ready"}]}});
        let at = |p: &str| at_path(&object, &field_path(p).unwrap()).cloned();
        assert_eq!(at(".spec.replicas"), Some(json!(3)));
        assert_eq!(at("spec.replicas"), Some(json!(3)));
        assert_eq!(at(".status.conditions[0].type"), Some(json!("Ready")));
        assert_eq!(at(".status.conditions[1].type"), None);
        assert_eq!(at(".metadata.name"), None);
    }

    #[test]
    fn a_field_path_that_does_not_parse_says_why() {
        for (path, why) in [
            (".status.conditions[x]", "expected a number between [ and ]"),
            ("..spec", "expected a field name between dots"),
            ("", "expected a field name between dots"),
            (".spec[0", "expected [N] after a field name"),
            (".spec.[0]", "expected a field name between dots"),
        ] {
            let e = field_path(path).unwrap_err();
            assert!(e.contains(why), "{path}: {e}");
        }
    }
}
