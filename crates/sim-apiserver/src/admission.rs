//! Admission as kube-apiserver runs it around a write: the in-tree mutating plugins this
//! server models (LimitRanger's defaults on a create), the mutating webhooks, the object's
//! own defaulting and validation again when they changed it, then the validating
//! admission — ValidatingAdmissionPolicies ([`super::admission_policy`]) before the
//! validating webhooks ([`super::admission_webhooks`]) — and the write stored only if the
//! object has not changed meanwhile.

use serde_json::{Value, json};

use super::admission_webhooks::{Attributes, Operation, call_validating, mutate, redefaulter};
use super::objects::{self, from_view, to_view};
use super::status::{ApiError, GroupResource};
use super::store::{Store, Write};

/// The validating admission of a request: the ValidatingAdmissionPolicies, then the
/// validating webhooks, as kube-apiserver orders its plugins.
///
/// # Errors
/// A policy's denial, then a webhook's refusal (or a failure under `failurePolicy: Fail`).
pub fn validate(
    store: &Store,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if let Some(object) = object {
        check_limit_ranges(store, attrs, object, old)?;
    }
    super::admission_policy::validate(store, attrs, object, old)?;
    call_validating(store, attrs, object, old)?;
    match object {
        Some(object) => charge_quota(store, attrs, object, old),
        None => Ok(()),
    }
}

/// The in-tree mutating admission this server models that runs before the mutating
/// webhooks, on every create (a POST, or a PUT or an apply that creates): LimitRanger's
/// defaults for a pod ([`super::limit_ranger::default_pod`]), after NamespaceLifecycle and
/// before ServiceAccount as kube-apiserver orders its plugins. `object` is the pod as sent;
/// whether they changed it.
pub fn mutate_by_plugins(store: &Store, attrs: &Attributes<'_>, object: &mut Value) -> bool {
    let rt = attrs.rt;
    let defaults_pod = rt.group.is_empty()
        && rt.resource == "pods"
        && super::limit_ranger::applies(&rt.group, &rt.resource, attrs.subresource, false);
    if attrs.namespace.is_empty() || attrs.operation != Operation::Create || !defaults_pod {
        return false;
    }
    let before = object.clone();
    super::limit_ranger::default_pod(&limit_ranges(store, attrs.namespace), object);
    *object != before
}

/// The LimitRanges of `namespace` (for the LimitRanger admission plugin).
#[must_use]
pub fn limit_ranges(store: &Store, namespace: &str) -> Vec<Value> {
    store
        .list(&GroupResource::new("", "limitranges"), Some(namespace))
        .0
}

/// The LimitRanger admission plugin's validation, first of the validating admission: a
/// pod created or a claim written is checked against its namespace's LimitRanges
/// ([`super::limit_ranger::validate`]); an object being deleted is not.
///
/// # Errors
/// 403 with the plugin's refusal.
fn check_limit_ranges(
    store: &Store,
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let rt = attrs.rt;
    let update = attrs.operation == Operation::Update;
    if attrs.namespace.is_empty()
        || !matches!(attrs.operation, Operation::Create | Operation::Update)
        || !super::limit_ranger::applies(&rt.group, &rt.resource, attrs.subresource, update)
        || old.is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    {
        return Ok(());
    }
    let ranges = limit_ranges(store, attrs.namespace);
    super::limit_ranger::validate(&ranges, &rt.resource, object)
        .map_err(|reason| forbidden(attrs, object, &reason))
}

/// An admission plugin's 403 for `object` (`admission.NewForbidden`): `<resource> "<name>"
/// is forbidden: <reason>`, named as stored (a generated name included).
fn forbidden(attrs: &Attributes<'_>, object: &Value, reason: &str) -> ApiError {
    let name = object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or(attrs.name);
    ApiError::Forbidden {
        message: format!("{} \"{name}\" is forbidden: {reason}", attrs.rt.gr()),
        gr: attrs.rt.gr(),
        name: name.to_string(),
    }
}

/// The ResourceQuota admission plugin, last of the validating admission: the write is
/// checked against its namespace's quotas ([`super::quota::check`]) and, unless a dry run,
/// charged to them (their `status.used` written at once, as the plugin writes them before
/// the object is stored), again from a fresh read when a quota changed meanwhile.
///
/// # Errors
/// 403 with the plugin's refusal.
fn charge_quota(
    store: &Store,
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let rt = attrs.rt;
    let old = old.filter(|_| attrs.operation == Operation::Update);
    let creates_namespace = rt.group.is_empty() && rt.resource == "namespaces";
    if attrs.namespace.is_empty()
        || creates_namespace
        || !matches!(attrs.operation, Operation::Create | Operation::Update)
        || (attrs.operation == Operation::Update && old.is_none())
        || !super::quota::handles(&rt.group, &rt.resource, attrs.subresource, object, old)
    {
        return Ok(());
    }
    let quotas_gr = GroupResource::new("", "resourcequotas");
    let request = super::quota::Request {
        group: &rt.group,
        resource: &rt.resource,
        subresource: attrs.subresource,
        object,
        old,
    };
    // A quota changed between the read and the charge is read again.
    for _ in 0..16 {
        let (quotas, _) = store.list(&quotas_gr, Some(attrs.namespace));
        if quotas.is_empty() {
            return Ok(());
        }
        let charged = super::quota::check(&quotas, &request, std::time::SystemTime::now())
            .map_err(|reason| forbidden(attrs, object, &reason))?;
        if attrs.dry_run {
            return Ok(());
        }
        let mut stale = false;
        for (index, used) in charged {
            let quota = &quotas[index];
            let expected = quota["metadata"]["resourceVersion"].clone();
            let quota_name = quota["metadata"]["name"].as_str().unwrap_or_default();
            let written =
                store.write(
                    &quotas_gr,
                    attrs.namespace,
                    quota_name,
                    |current| match current {
                        Some(c) if c["metadata"]["resourceVersion"] == expected => {
                            let mut c = c.clone();
                            c["status"]["used"] = super::quota::to_json(&used);
                            Ok(Write::Put(c))
                        }
                        _ => Err(ApiError::modified(&quotas_gr, quota_name)),
                    },
                );
            if written.is_err() {
                stale = true;
                break;
            }
        }
        if !stale {
            return Ok(());
        }
    }
    Err(ApiError::Internal(
        "resource quota evaluation timed out".into(),
    ))
}

/// A delete's admission: the mutating webhooks, then the validating ones, with the live
/// object as the old object and no new one.
///
/// # Errors
/// As [`mutate`] and [`validate`].
pub fn admit_delete(store: &Store, attrs: &Attributes<'_>, old: &Value) -> Result<(), ApiError> {
    let mut none = None;
    mutate(store, attrs, &mut none, Some(old), &|_| {})?;
    validate(store, attrs, None, Some(old))
}

/// Defaults and validates a mutated object again (stored form, with the old one).
pub type Recheck<'a> = dyn Fn(&mut Value, Option<&Value>) -> Result<(), ApiError> + 'a;

/// An update's write admitted: `preview` computes it (without storing) from the live object,
/// the webhooks are called, and `commit` stores what they admitted if the live object is
/// still the one it was computed from.
///
/// `recheck` defaults and validates a mutated object again (stored form, with the old one).
///
/// # Errors
/// The decision's own errors, a webhook's refusal, the conflict of an object changed meanwhile.
pub fn admit_write(
    store: &Store,
    attrs: &mut Attributes<'_>,
    preview: impl FnOnce(&mut dyn FnMut(Option<&Value>, Write)) -> Result<(), ApiError>,
    recheck: &Recheck<'_>,
) -> Result<Admitted, ApiError> {
    let mut seen: Option<(Option<Value>, Write)> = None;
    preview(&mut |current, decision| seen = Some((current.cloned(), decision)))?;
    let Some((current, decision)) = seen else {
        return Err(ApiError::Internal("the write decided nothing".into()));
    };
    let rt = attrs.rt;
    let version = attrs.version.to_string();
    let view = |o: &Value| to_view(rt, &version, o.clone());
    attrs.operation = if current.is_some() {
        Operation::Update
    } else {
        Operation::Create
    };
    if attrs.operation == Operation::Create {
        attrs.options["kind"] = json!("CreateOptions");
    }
    let new_stored = match &decision {
        Write::Put(o) => o.clone(),
        Write::Keep => current.clone().unwrap_or_default(),
        Write::Delete => {
            let mut o = current.clone().unwrap_or_default();
            if let Some(m) = o["metadata"].as_object_mut() {
                m.remove("finalizers");
            }
            o
        }
    };
    let scale = attrs.subresource == "scale";
    let as_sent = |o: &Value| {
        if scale {
            objects::scale_of(rt, &view(o))
        } else {
            view(o)
        }
    };
    let old_sent = current.as_ref().map(as_sent);
    let mut sent = Some(as_sent(&new_stored));
    // Mutating admission runs before the update strategy moves the generation: the webhooks
    // are sent the old one, and the generation then follows the mutated object.
    let old_generation = current
        .as_ref()
        .and_then(|c| c["metadata"]["generation"].as_i64())
        .filter(|_| attrs.subresource.is_empty());
    if let (Some(generation), Some(object)) = (old_generation, sent.as_mut()) {
        object["metadata"]["generation"] = json!(generation);
    }
    // A create (a PUT or an apply that creates) is mutated before BeforeCreate sets the uid,
    // the creation time and the first generation.
    const SET_ON_CREATE: [&str; 3] = ["uid", "creationTimestamp", "generation"];
    if current.is_none()
        && !scale
        && let Some(meta) = sent.as_mut().and_then(|o| o["metadata"].as_object_mut())
    {
        for key in SET_ON_CREATE {
            meta.remove(key);
        }
    }
    let redefault = redefaulter(rt, &version);
    let defaulted = sent
        .as_mut()
        .is_some_and(|o| mutate_by_plugins(store, attrs, o));
    let changed = mutate(store, attrs, &mut sent, old_sent.as_ref(), &redefault)? || defaulted;
    let mut decision = decision;
    // The validating webhooks are sent the object as it is to be stored.
    let mutated = sent.replace(as_sent(&new_stored));
    if changed && let Some(mutated) = &mutated {
        let mut stored = if scale {
            let mut v = view(&new_stored);
            objects::set_scale(rt, &mut v, mutated["spec"]["replicas"].clone());
            from_view(rt, v)
        } else {
            from_view(rt, mutated.clone())
        };
        if let (Some(generation), Some(old)) = (old_generation, current.as_ref()) {
            let moved = objects::generation_changed(rt, old, &stored);
            stored["metadata"]["generation"] = json!(generation + i64::from(moved));
        }
        if current.is_none() && !scale {
            for key in SET_ON_CREATE {
                match new_stored["metadata"].get(key) {
                    Some(value) => stored["metadata"][key] = value.clone(),
                    None => {
                        if let Some(meta) = stored["metadata"].as_object_mut() {
                            meta.remove(key);
                        }
                    }
                }
            }
        }
        recheck(&mut stored, current.as_ref())?;
        sent = Some(as_sent(&stored));
        decision = Write::Put(stored);
    }
    validate(store, attrs, sent.as_ref(), old_sent.as_ref())?;
    Ok(Admitted {
        expected: current.map(|c| c["metadata"]["resourceVersion"].clone()),
        decision,
    })
}

/// A write the webhooks admitted, to store if the object is still as it was.
pub struct Admitted {
    expected: Option<Value>,
    decision: Write,
}

impl Admitted {
    /// The admitted write if `current` is still the object it was computed from.
    ///
    /// # Errors
    /// AlreadyExists or the stale-version Conflict when it changed meanwhile.
    pub fn commit(
        self,
        gr: &GroupResource,
        name: &str,
        current: Option<&Value>,
    ) -> Result<Write, ApiError> {
        let now = current.map(|c| c["metadata"]["resourceVersion"].clone());
        match (&self.expected, &now) {
            (None, Some(_)) => Err(ApiError::already_exists(gr, name)),
            (Some(_), None) => Err(ApiError::not_found(gr, name)),
            (a, b) if a != b => Err(ApiError::modified(gr, name)),
            _ => Ok(self.decision),
        }
    }
}
