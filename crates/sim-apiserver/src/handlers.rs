//! The verbs on resources: get, list, create, update, patch (merge, JSON, strategic,
//! apply), delete (preconditions, grace periods, finalizers, propagation) and
//! deletecollection, plus the subresources (status, scale, binding, token, eviction,
//! ephemeralcontainers, resize, a CertificateSigningRequest's approval, finalize), with
//! kube-apiserver's semantics.
//!
//! An update (PUT) without a resourceVersion overwrites the latest version only where the
//! type's strategy allows unconditional updates (everything but Leases, CRDs and custom
//! resources) and is refused with the store's 422 elsewhere; a PUT of a missing object
//! creates it where the strategy allows create on update (Leases, Services, Events, RBAC).
//! Patches always apply to the live object and so are conditional on its version.

use serde_json::{Value, json};

use super::admission;
use super::admission_webhooks;
use super::apply;
use super::auth;
use super::call::{Call, body_object, decode};
use super::certificates;
use super::conversion;
use super::create::{
    admit_storage_class, checks, default_storage_class, invalid, meta_str, prepare_create,
    service_accounts,
};
use super::names::{Cause, random_suffix};
use super::objects::{self, from_view, to_view};
use super::patch;
use super::registry::{Backing, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::services;
use super::state::State;
use super::status::{ApiError, GroupResource, success_status};
use super::store::{Write, Written};

type Reply = Result<(u16, Value), ApiError>;

fn check_type(rt: &ResourceType, version: &str, obj: &Value) -> Result<(), ApiError> {
    let expected = rt.api_version(version);
    if let Some(av) = obj["apiVersion"].as_str()
        && av != expected
        && !(rt.is_custom() && rt.versions.iter().any(|v| rt.api_version(v) == av))
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({av}) does not match the expected API version ({expected})"
        )));
    }
    if let Some(kind) = obj["kind"].as_str()
        && kind != rt.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Which part of an object an update may change.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Main,
    Status,
    /// A CertificateSigningRequest's `approval`: its conditions.
    Approval,
}

impl Part {
    /// The subresource written through, as managedFields name it.
    fn subresource(self) -> Option<&'static str> {
        match self {
            Part::Main => None,
            Part::Status => Some("status"),
            Part::Approval => Some("approval"),
        }
    }
}

/// How the field manager converts a custom resource of `version` to the `apiVersion` of
/// another manager's entry: through the CRD's conversion webhook when it has one, by its
/// apiVersion alone when not.
fn manager_version_converter<'a>(
    rt: &'a ResourceType,
    version: &'a str,
    converter: Option<&'a conversion::Converter>,
) -> impl Fn(&Value, &str) -> Option<Value> + 'a {
    move |object: &Value, api_version: &str| {
        let to = api_version.rsplit('/').next().unwrap_or_default();
        let object = to_view(rt, version, object.clone());
        match converter {
            Some(c) => c.convert(object, to).ok(),
            None => Some(to_view(rt, to, object)),
        }
    }
}

/// Prepares an update of `old` to `new` (both stored form) and decides the write.
/// `authorized` is the admission decision of a CertificateSigningRequest update through
/// `approval` or `status`, made before the write.
#[allow(clippy::too_many_arguments)]
fn prepare_update(
    rt: &ResourceType,
    version: &str,
    old: &Value,
    mut new: Value,
    part: Part,
    manager: &str,
    managed_by_apply: bool,
    authorized: Option<&certificates::Authorized>,
    service_taken: Option<&services::Taken>,
    converter: Option<&conversion::Converter>,
) -> Result<Write, ApiError> {
    let name = meta_str(old, "name").to_string();
    let new_uid = meta_str(&new, "uid").to_string();
    if !new_uid.is_empty() && new_uid != meta_str(old, "uid") {
        return Err(invalid(
            rt,
            &name,
            vec![objects::invalid(
                "metadata.uid",
                json!(new_uid),
                "field is immutable",
            )],
        ));
    }
    let csr = certificates::serves(rt);
    if csr {
        certificates::prepare_for_update(part.subresource(), old, &mut new)?;
    } else if part == Part::Status && rt.is_custom() {
        // A custom resource's status update changes only status (and its field ownership).
        let mut merged = old.clone();
        merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
        if let Some(mf) = new["metadata"].get("managedFields") {
            merged["metadata"]["managedFields"] = mf.clone();
        }
        new = merged;
    } else if part == Part::Status {
        // Built-in status strategies reset spec (and, for workloads, labels; for pods,
        // ownerReferences) but keep other metadata changes, e.g. the revision annotation
        // the deployment controller writes through deployments/status.
        new["spec"] = old.get("spec").cloned().unwrap_or(Value::Null);
        let mut keep = vec!["deletionTimestamp"];
        match rt.resource.as_str() {
            "deployments" | "replicasets" => keep.push("labels"),
            "pods" => keep.push("ownerReferences"),
            _ => {}
        }
        for key in keep {
            match old["metadata"].get(key) {
                Some(v) => new["metadata"][key] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(key);
                    }
                }
            }
        }
        if new.get("spec").is_some_and(Value::is_null)
            && let Some(o) = new.as_object_mut()
        {
            o.remove("spec");
        }
    } else if rt.status {
        new["status"] = old.get("status").cloned().unwrap_or(Value::Null);
    }
    if new.get("status").is_some_and(Value::is_null)
        && let Some(o) = new.as_object_mut()
    {
        o.remove("status");
    }
    for key in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old["metadata"].get(key) {
            Some(v) => new["metadata"][key] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(key);
                }
            }
        }
    }
    // A Service's allocations (beginUpdate) come before its strategy validates. The field
    // manager records the object as the client sent it, before what the storage puts back,
    // allocates or drops for the new type.
    let mut recorded = None;
    if let Some(taken) = service_taken.filter(|_| part == Part::Main) {
        let mut as_sent = new.clone();
        objects::apply_defaults(rt, &mut as_sent);
        recorded = Some(as_sent);
        services::prepare_update(old, &mut new, taken)?;
        services::drop_type_dependent_fields(&mut new, old);
    }
    let mut causes = checks(rt, version, &mut new, Some(old));
    if csr {
        causes.extend(certificates::validate_update(part.subresource(), &new, old));
    }
    if !causes.is_empty() && objects::is_event(rt) {
        // Both Event resources validate the stored core Event, whose kind has no group.
        return Err(ApiError::invalid(&rt.kind, "", &name, causes));
    }
    if !causes.is_empty() {
        return Err(invalid(rt, &name, causes));
    }
    if is_deleting(old) {
        let before = finalizers(old);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(invalid(
                rt,
                &name,
                vec![objects::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added
                            .iter()
                            .map(|f| format!("{f:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )],
            ));
        }
    }
    // Only the main resource's strategy moves generation; status writes never do.
    if part == Part::Main && objects::generation_changed(rt, old, &new) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(generation);
    }
    if part == Part::Main {
        objects::prepare_for_update(rt, old, &mut new);
    }
    let subresource = part.subresource();
    if !managed_by_apply {
        let now = objects::now();
        match recorded {
            Some(mut recorded) => {
                apply::record_update(old, &mut recorded, manager, &rt.kind, &now, subresource);
                new["metadata"]["managedFields"] = recorded["metadata"]["managedFields"].take();
            }
            // A custom resource's manager is of the version the client spoke; the managers
            // of other versions compare the objects as converted to theirs.
            None if rt.is_custom() => {
                let convert = manager_version_converter(rt, version, converter);
                let mut view = to_view(rt, version, new.clone());
                apply::record_update_converting(
                    &to_view(rt, version, old.clone()),
                    &mut view,
                    manager,
                    apply::Schema::for_kind(&rt.kind),
                    &now,
                    subresource,
                    Some(&convert),
                );
                new["metadata"]["managedFields"] = view["metadata"]["managedFields"].take();
            }
            // An Event's manager is of the group version the client spoke, and the managers
            // of the other group's version go: the field manager of either resource cannot
            // convert to the other's version.
            None if objects::is_event(rt) => {
                let api_version = rt.api_version(version);
                let mut old_view = to_view(rt, version, old.clone());
                let mut view = to_view(rt, version, new.clone());
                apply::drop_managers_of_other_versions(&mut old_view, &api_version);
                apply::drop_managers_of_other_versions(&mut view, &api_version);
                apply::record_update(&old_view, &mut view, manager, &rt.kind, &now, subresource);
                match view["metadata"].get_mut("managedFields") {
                    Some(owned) => new["metadata"]["managedFields"] = owned.take(),
                    None => {
                        if let Some(metadata) = new["metadata"].as_object_mut() {
                            metadata.remove("managedFields");
                        }
                    }
                }
            }
            None => apply::record_update(old, &mut new, manager, &rt.kind, &now, subresource),
        }
    }
    objects::as_stored(rt, &mut new);
    if csr {
        certificates::finish_update(
            subresource,
            old,
            &mut new,
            manager,
            managed_by_apply,
            authorized,
        )?;
    }
    let mut old_cmp = old.clone();
    old_cmp["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"].clone();
    if same_ignoring_time(&old_cmp, &new) {
        return Ok(Write::Keep);
    }
    let grace_zero = old["metadata"]["deletionGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(0)
        == 0;
    if is_deleting(&new)
        && finalizers(&new).is_empty()
        && grace_zero
        && !namespace_blocked(rt, &new)
    {
        return Ok(Write::Delete);
    }
    Ok(Write::Put(new))
}

/// Whether two objects are equal apart from the timestamps of managedFields entries.
fn same_ignoring_time(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(entries) = v["metadata"]
            .get_mut("managedFields")
            .and_then(Value::as_array_mut)
        {
            for e in entries {
                if let Some(o) = e.as_object_mut() {
                    o.remove("time");
                }
            }
        }
        v
    };
    strip(a) == strip(b)
}

/// A namespace is removed only once its spec finalizers are gone too.
fn namespace_blocked(rt: &ResourceType, obj: &Value) -> bool {
    rt.group.is_empty()
        && rt.resource == "namespaces"
        && obj["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
}

/// Whether a request asks for a dry run (`dryRun=All` in the query or DeleteOptions).
///
/// # Errors
/// A 400 for any other dryRun value, as the real server answers.
fn dry_run_requested(query_value: Option<&str>, body: &Value) -> Result<bool, ApiError> {
    let mut values: Vec<String> = query_value.map(|v| vec![v.to_string()]).unwrap_or_default();
    if let Some(list) = body["dryRun"].as_array() {
        values.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
    }
    for v in &values {
        if v != "All" {
            return Err(ApiError::BadRequest(format!(
                "dryRun: Unsupported value: {v:?}: supported values: \"All\""
            )));
        }
    }
    Ok(!values.is_empty())
}

impl<'a> Call<'a> {
    /// The admission attributes of this request.
    fn admission<'s>(
        &'s self,
        rt: &'s ResourceType,
        operation: admission_webhooks::Operation,
        name: &'s str,
        delete_options: Option<&Value>,
    ) -> admission_webhooks::Attributes<'s> {
        admission_webhooks::Attributes {
            rt,
            version: &self.info.version,
            subresource: &self.info.subresource,
            operation,
            name,
            namespace: &self.info.namespace,
            user: self.user,
            dry_run: self.query.get("dryRun").is_some()
                || delete_options
                    .is_some_and(|o| o["dryRun"].as_array().is_some_and(|d| !d.is_empty())),
            options: admission_webhooks::options(operation, self.query, delete_options),
            convert: self.converter(rt).map(|converter| {
                Box::new(move |object: Value, version: &str| {
                    converter
                        .convert(object, version)
                        .map_err(|failure| failure.to_string())
                }) as admission_webhooks::ConvertVersion<'s>
            }),
        }
    }

    /// Writes through the state once the admission webhooks admitted the write `decide`
    /// computes, or only computes it for `dryRun=All`.
    ///
    /// A write admitted against an object that another write changed before it was stored is
    /// decided and admitted again on the newer object, as the store's `GuaranteedUpdate`
    /// retries its update function: a request naming a stale resourceVersion is then refused
    /// by `decide`, an unconditional one applies to the newer object.
    fn write(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut decide: impl FnMut(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, ApiError> {
        for _ in 1..MAX_WRITE_ATTEMPTS {
            match self.write_once(rt, namespace, name, &mut decide) {
                Err(WriteFailure::Changed(_)) => {}
                result => return result.map_err(WriteFailure::into_api_error),
            }
        }
        self.write_once(rt, namespace, name, &mut decide)
            .map_err(WriteFailure::into_api_error)
    }

    /// One attempt of [`Self::write`].
    fn write_once(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        decide: &mut dyn FnMut(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, WriteFailure> {
        if let Some(converter) = self.converter(rt) {
            return self.write_converted(&converter, rt, namespace, name, decide);
        }
        self.admit_and_write(rt, namespace, name, decide)
    }

    /// A write of a custom resource whose CRD converts through a webhook: the live object is
    /// read and converted to the request's version, the write decided on it, admitted by the
    /// admission webhooks in that version and converted to the storage version (outside the
    /// store's lock, as the webhooks are called), then stored if the live object has not
    /// changed meanwhile. A dry run converts nothing to store.
    fn write_converted(
        &self,
        converter: &conversion::Converter,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        decide: &mut dyn FnMut(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, WriteFailure> {
        let version = &self.info.version;
        let current = self.state.store.get(&Self::storage_gr(rt), namespace, name);
        let expected = current
            .as_ref()
            .map(|c| c["metadata"]["resourceVersion"].clone());
        let current = current
            .map(|c| converter.convert(c, version))
            .transpose()
            .map_err(conversion::Failure::into_api_error)?;
        let mut decision = decide(current.as_ref())?;
        if self.admits(rt) {
            decision = self
                .admit(rt, name, |seen| {
                    seen(current.as_ref(), decision);
                    Ok(())
                })?
                .commit(&rt.gr(), name, current.as_ref())
                .map_err(WriteFailure::Changed)?;
        }
        let decision = match decision {
            Write::Put(object) if !self.dry_run()? => Write::Put(
                converter
                    .to_storage(rt, version, object)
                    .map_err(conversion::Failure::into_api_error)?,
            ),
            decision => decision,
        };
        let gr = rt.gr();
        let changed = std::cell::Cell::new(false);
        self.store_write(rt, namespace, name, |now| {
            let now = now.map(|c| c["metadata"]["resourceVersion"].clone());
            let stale = match (&expected, &now) {
                (None, Some(_)) => ApiError::already_exists(&gr, name),
                (Some(_), None) => ApiError::not_found(&gr, name),
                (a, b) if a != b => ApiError::modified(&gr, name),
                _ => return Ok(decision),
            };
            changed.set(true);
            Err(stale)
        })
        .map_err(|e| WriteFailure::after(changed.get(), e))
    }

    /// Whether the request is a dry run.
    fn dry_run(&self) -> Result<bool, ApiError> {
        dry_run_requested(self.query.get("dryRun"), &Value::Null)
    }

    /// The webhook converter of `rt`'s objects, if its CRD has one.
    fn converter(&self, rt: &ResourceType) -> Option<conversion::Converter> {
        conversion::converter(&self.state.store, rt)
    }

    /// A stored object as the client of this request's version sees it.
    fn view(
        &self,
        converter: Option<&conversion::Converter>,
        rt: &ResourceType,
        object: Value,
    ) -> Result<Value, ApiError> {
        conversion::view(converter, rt, &self.info.version, object)
    }

    /// Writes through the state once the admission webhooks admitted the write `decide`
    /// computes, or only computes it for `dryRun=All`.
    fn admit_and_write(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        decide: &mut dyn FnMut(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, WriteFailure> {
        if !self.admits(rt) {
            return Ok(self.store_write(rt, namespace, name, decide)?);
        }
        let gr = Self::storage_gr(rt);
        let admitted = self.admit(rt, name, |seen| {
            self.state
                .store
                .preview(&gr, namespace, name, |current| {
                    seen(current, decide(current)?);
                    Ok(Write::Keep)
                })
                .map(|_| ())
        })?;
        let changed = std::cell::Cell::new(false);
        self.store_write(rt, namespace, name, |current| {
            admitted.commit(&rt.gr(), name, current).inspect_err(|_| {
                changed.set(true);
            })
        })
        .map_err(|e| WriteFailure::after(changed.get(), e))
    }

    /// Whether this request's write goes to the admission webhooks: not one made on another
    /// resource's behalf (`bindings` writes pods), and only when webhooks are configured.
    fn admits(&self, rt: &ResourceType) -> bool {
        admission_webhooks::admits_subresource(&self.info.subresource)
            && self.info.resource == rt.resource
            && admission_webhooks::configured(&self.state.store)
    }

    /// The write `preview` shows (the live object and the write decided on it), as the
    /// admission webhooks admit it.
    fn admit(
        &self,
        rt: &ResourceType,
        name: &str,
        preview: impl FnOnce(&mut dyn FnMut(Option<&Value>, Write)) -> Result<(), ApiError>,
    ) -> Result<admission::Admitted, ApiError> {
        let version = self.info.version.clone();
        let mut attrs = self.admission(rt, admission_webhooks::Operation::Update, name, None);
        admission::admit_write(
            &self.state.store,
            &mut attrs,
            preview,
            &|stored, old| match checks(rt, &version, stored, old) {
                causes if causes.is_empty() => Ok(()),
                causes => Err(invalid(rt, name, causes)),
            },
        )
    }

    /// Writes through the state, or only computes the write for `dryRun=All`.
    fn store_write(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        decide: impl FnOnce(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, ApiError> {
        let dry_run = dry_run_requested(self.query.get("dryRun"), &Value::Null)?;
        let gr = if rt.group == "events.k8s.io" {
            GroupResource::new("", "events")
        } else {
            rt.gr()
        };
        self.state
            .store_write_as(&gr, namespace, name, dry_run, decide)
    }

    fn rt(&self) -> Result<ResourceType, ApiError> {
        let registry = self.state.registry();
        let rt = registry
            .lookup(&self.info.group, &self.info.version, &self.info.resource)
            .cloned()
            .ok_or(ApiError::NoSuchResource)?;
        if !rt.namespaced && !self.info.namespace.is_empty() && rt.resource != "namespaces" {
            return Err(ApiError::NoSuchResource);
        }
        Ok(rt)
    }

    fn storage_gr(rt: &ResourceType) -> GroupResource {
        if rt.group == "events.k8s.io" {
            GroupResource::new("", "events")
        } else {
            rt.gr()
        }
    }

    fn ns(&self, rt: &ResourceType) -> String {
        if rt.namespaced {
            self.info.namespace.clone()
        } else {
            String::new()
        }
    }

    /// Serves the request.
    pub fn serve(&self) -> Reply {
        let rt = self.rt()?;
        if matches!(rt.backing, Backing::Health) {
            return super::component_status::serve(self, &rt);
        }
        if matches!(rt.backing, Backing::Virtual) {
            return match self.info.verb.as_str() {
                // `bindings` is `pods/binding` with the pod named in the Binding.
                "create" if rt.group.is_empty() && rt.resource == "bindings" => {
                    let pods = self
                        .state
                        .registry()
                        .get(&GroupResource::new("", "pods"))
                        .cloned()
                        .ok_or(ApiError::NoSuchResource)?;
                    let body = body_object(self)?;
                    self.bind_pod(&pods, meta_str(&body, "name"))
                }
                "create" => super::reviews::create(self, &rt),
                _ => Err(ApiError::MethodNotSupported),
            };
        }
        let sub = self.info.subresource.as_str();
        let verb = self.info.verb.as_str();
        if rt.namespaced && self.info.namespace.is_empty() && !matches!(verb, "list" | "watch") {
            return Err(ApiError::NoSuchResource);
        }
        match (verb, sub) {
            ("get", "") | ("get", "status") if sub.is_empty() || rt.status => self.get(&rt),
            ("list", "") => self.list(&rt),
            ("create", "") => self.create(&rt),
            ("update", "") => self.update(&rt, Part::Main),
            ("update", "status") if rt.status => self.update(&rt, Part::Status),
            ("patch", "") => self.patch(&rt, Part::Main),
            ("patch", "status") if rt.status => self.patch(&rt, Part::Status),
            ("get", "approval") if certificates::serves(&rt) => self.get(&rt),
            ("update", "approval") if certificates::serves(&rt) => self.update(&rt, Part::Approval),
            ("patch", "approval") if certificates::serves(&rt) => self.patch(&rt, Part::Approval),
            ("delete", "") => self.delete(&rt),
            // Not every storage deletes collections (namespaces do not): kube-apiserver
            // has no such route, and answers 405.
            ("deletecollection", "")
                if crate::discovery::verbs(&rt).contains(&"deletecollection") =>
            {
                self.delete_collection(&rt)
            }
            ("get", "scale") if rt.scale.is_some() => self.get_scale(&rt),
            ("update" | "patch", "scale") if rt.scale.is_some() => self.write_scale(&rt),
            ("update", "finalize") if rt.resource == "namespaces" => self.finalize_namespace(&rt),
            ("create", "binding") if rt.resource == "pods" => self.bind_pod(&rt, &self.info.name),
            ("create", "eviction") if rt.resource == "pods" => {
                super::eviction::evict(self, &rt, &|namespace, name, options| {
                    delete_object(self.state, &rt, namespace, name, options).map(|_| ())
                })
            }
            ("get", "ephemeralcontainers" | "resize") if rt.resource == "pods" => self.get(&rt),
            ("update", "ephemeralcontainers") if rt.resource == "pods" => {
                self.update_pod_part(&rt, PodPart::EphemeralContainers)
            }
            ("patch", "ephemeralcontainers") if rt.resource == "pods" => {
                self.patch_pod_part(&rt, PodPart::EphemeralContainers)
            }
            ("update", "resize") if rt.resource == "pods" => {
                self.update_pod_part(&rt, PodPart::Resize)
            }
            ("patch", "resize") if rt.resource == "pods" => {
                self.patch_pod_part(&rt, PodPart::Resize)
            }
            // Gets, updates and patches only: other verbs are not allowed (405), as upstream;
            // the resize route's 405 carries empty details.
            (_, "ephemeralcontainers") if rt.resource == "pods" => {
                Err(ApiError::MethodNotSupported)
            }
            (_, "resize") if rt.resource == "pods" => Err(ApiError::Generic { code: 405 }),
            ("create", "token") if rt.resource == "serviceaccounts" => {
                super::reviews::token_request(self, &rt)
            }
            _ if !sub.is_empty() => Err(ApiError::NoSuchResource),
            _ => Err(ApiError::MethodNotSupported),
        }
    }

    fn get(&self, rt: &ResourceType) -> Reply {
        let obj = self
            .state
            .store
            .get(&Self::storage_gr(rt), &self.ns(rt), &self.info.name)
            .ok_or_else(|| ApiError::not_found(&rt.gr(), &self.info.name))?;
        Ok((200, self.view(self.converter(rt).as_ref(), rt, obj)?))
    }

    /// Parses the selectors of a list or watch.
    pub fn selectors(&self, rt: &ResourceType) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(self.query.str("labelSelector"))
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let fields = FieldSelector::parse(self.query.str("fieldSelector"))
            .and_then(|f| f.for_resource(rt, &self.info.version))
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        Ok((labels, fields))
    }

    fn list(&self, rt: &ResourceType) -> Reply {
        let q = self.query;
        if q.get("sendInitialEvents").is_some() {
            return Err(list_options_invalid(
                "sendInitialEvents",
                json!(q.str("sendInitialEvents")),
                "sendInitialEvents is forbidden for list",
            ));
        }
        if let Some(m) = q.get("resourceVersionMatch") {
            if q.str("resourceVersion").is_empty() {
                return Err(list_options_invalid(
                    "resourceVersionMatch",
                    json!(m),
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if q.get("continue").is_some() {
                return Err(list_options_invalid(
                    "resourceVersionMatch",
                    json!(m),
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        if let Some(rv) = q.get("resourceVersion").filter(|r| !r.is_empty()) {
            parse_rv(rt, rv)?;
        }
        let (labels, fields) = self.selectors(rt)?;
        let ns = (!self.info.namespace.is_empty()).then_some(self.info.namespace.as_str());
        let (items, revision) = self.state.store.list(&Self::storage_gr(rt), ns);
        let items = match self.converter(rt) {
            Some(converter) => converter
                .convert_all(items, &self.info.version)
                .map_err(|f| f.into_list_error(rt, &self.info.version))?,
            None => items,
        };
        let mut items: Vec<Value> = items
            .into_iter()
            .map(|o| to_view(rt, &self.info.version, o))
            .filter(|o| {
                labels.matches(
                    &o["metadata"]["labels"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                ) && fields.matches(o)
            })
            .map(|o| objects::list_item(rt, o))
            .collect();
        let mut list_rv = revision;
        if let Some(token) = q.get("continue").filter(|c| !c.is_empty()) {
            let (rv, after) = decode_continue(token)?;
            list_rv = rv;
            items.retain(|o| object_key(o) > after);
        }
        let mut metadata = json!({"resourceVersion": list_rv.to_string()});
        if rt.is_custom() {
            // An unstructured list keeps ListMeta's empty `continue`.
            metadata["continue"] = json!("");
        }
        if let Some(limit) = q
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0)
            && items.len() > limit
        {
            let remaining = items.len() - limit;
            items.truncate(limit);
            let last = items.last().map(object_key).unwrap_or_default();
            metadata["continue"] = json!(encode_continue(list_rv, &last));
            metadata["remainingItemCount"] = json!(remaining);
        }
        Ok((
            200,
            json!({
                "kind": format!("{}List", rt.kind),
                "apiVersion": rt.api_version(&self.info.version),
                "metadata": metadata,
                "items": items,
            }),
        ))
    }

    fn ensure_namespace(&self, rt: &ResourceType, name: &str) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        let ns = self
            .state
            .store
            .get(
                &GroupResource::new("", "namespaces"),
                "",
                &self.info.namespace,
            )
            .ok_or_else(|| {
                ApiError::not_found(&GroupResource::new("", "namespaces"), &self.info.namespace)
            })?;
        if is_deleting(&ns) {
            return Err(ApiError::NamespaceTerminating {
                gr: rt.gr(),
                name: name.to_string(),
                namespace: self.info.namespace.clone(),
            });
        }
        Ok(())
    }

    fn create(&self, rt: &ResourceType) -> Reply {
        let mut obj = body_object(self)?;
        check_type(rt, &self.info.version, &obj)?;
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let body_ns = meta_str(&obj, "namespace").to_string();
        if rt.namespaced && !body_ns.is_empty() && body_ns != self.info.namespace {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        let admission_name = objects::admission_name(&obj);
        let requested_name = meta_str(&obj, "name").to_string();
        let mut name = requested_name.clone();
        let generate = meta_str(&obj, "generateName").to_string();
        if name.is_empty() && !generate.is_empty() {
            name = format!("{generate}{}", random_suffix());
            obj["metadata"]["name"] = json!(name);
        }
        if name.is_empty() {
            return Err(invalid(
                rt,
                "",
                vec![Cause {
                    field: "metadata.name".into(),
                    value: Value::Null,
                    reason: "FieldValueRequired",
                    message: "name or generateName is required".into(),
                }],
            ));
        }
        // The admission plugins (NamespaceLifecycle, then ServiceAccount) run before the
        // strategy validates.
        self.ensure_namespace(rt, &admission_name)?;
        let attrs = self.admission(
            rt,
            admission_webhooks::Operation::Create,
            &requested_name,
            None,
        );
        // The in-tree mutating plugins (LimitRanger), before ServiceAccount and the webhooks;
        // the field manager has recorded the object as sent, so what they add is unowned.
        let as_sent = obj.clone();
        let plugins_changed = admission::mutate_by_plugins(&self.state.store, &attrs, &mut obj);
        let accounts = service_accounts(&self.state.store, rt, &self.ns(rt));
        accounts.admit(rt, &self.ns(rt), &admission_name, &obj)?;
        if certificates::serves(rt) {
            certificates::before_create(&mut obj, self.user)?;
        }
        let webhooks = admission_webhooks::configured(&self.state.store);
        let mut unowned = None;
        if webhooks {
            (obj, unowned) = admission_webhooks::mutate_create(
                &self.state.store,
                &attrs,
                obj,
                &self.manager,
                &accounts,
            )?;
        }
        let mut stored = prepare_create(
            rt,
            &self.info.version,
            &self.ns(rt),
            from_view(rt, obj),
            &self.manager,
            &accounts,
        )?;
        admit_storage_class(
            default_storage_class(&self.state.store, rt).as_deref(),
            &mut stored,
        );
        if plugins_changed {
            // The entry the field manager wrote before admission, of the object as sent.
            unowned = prepare_create(
                rt,
                &self.info.version,
                &self.ns(rt),
                from_view(rt, as_sent),
                &self.manager,
                &accounts,
            )
            .ok()
            .map(|sent| sent["metadata"]["managedFields"].clone())
            .or(unowned);
        }
        if let Some(managed) = unowned {
            stored["metadata"]["managedFields"] = managed;
        }
        if certificates::serves(rt) {
            certificates::finish_create(&mut stored, &self.manager);
        }
        // A Service's addresses and ports are chosen (beginCreate) before the validating
        // webhooks see it, and written under one lock.
        let (_allocating, mut taken) = self.service_allocation(rt, &name);
        let allocated = match taken.as_mut() {
            Some(taken) => Some(services::allocate_create(
                taken,
                &mut stored,
                dry_run_requested(self.query.get("dryRun"), &Value::Null)?,
            )?),
            None => None,
        };
        if webhooks {
            let view = to_view(rt, &self.info.version, stored.clone());
            admission::validate(&self.state.store, &attrs, Some(&view), None)?;
        }
        if let Some(converter) = self
            .converter(rt)
            .filter(|_| !matches!(self.dry_run(), Ok(true)))
        {
            stored = converter
                .to_storage(rt, &self.info.version, stored)
                .map_err(conversion::Failure::into_api_error)?;
        }
        let written = self.store_write(rt, &self.ns(rt), &name, |current| {
            if current.is_some() {
                return Err(ApiError::already_exists(&rt.gr(), &name));
            }
            Ok(Write::Put(stored))
        })?;
        self.commit_allocation(rt, &name, allocated);
        Ok((201, self.view_written(rt, written)?))
    }

    /// For a write of the Service `name`: the allocation lock, held until the write is
    /// done, and what is taken (see [`services`]); nothing for other resources.
    fn service_allocation(
        &self,
        rt: &ResourceType,
        name: &str,
    ) -> (
        Option<std::sync::MutexGuard<'static, ()>>,
        Option<services::Taken>,
    ) {
        if !services::serves(&rt.group, &rt.resource) {
            return (None, None);
        }
        let lock = services::lock();
        let dry_run = matches!(self.dry_run(), Ok(true));
        let taken = services::taken(&self.state.store, &self.ns(rt), name, dry_run);
        (Some(lock), Some(taken))
    }

    /// Creates what a Service's allocation took, once the Service is written.
    fn commit_allocation(
        &self,
        rt: &ResourceType,
        name: &str,
        allocated: Option<services::Allocated>,
    ) {
        if let Some(allocated) = allocated {
            self.state
                .commit_service_addresses(allocated, &self.ns(rt), name);
        }
    }

    /// The object written as the client sees it; a dry run's was never converted to the
    /// storage version, and is not converted back.
    fn view_written(&self, rt: &ResourceType, written: Written) -> Result<Value, ApiError> {
        let converter = self
            .converter(rt)
            .filter(|_| !matches!(self.dry_run(), Ok(true)));
        written
            .object
            .map(|o| self.view(converter.as_ref(), rt, o))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    fn update(&self, rt: &ResourceType, part: Part) -> Reply {
        let obj = body_object(self)?;
        check_type(rt, &self.info.version, &obj)?;
        let body_name = meta_str(&obj, "name");
        if body_name != self.info.name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({})",
                self.info.name
            )));
        }
        let body_ns = meta_str(&obj, "namespace");
        if rt.namespaced && !body_ns.is_empty() && body_ns != self.info.namespace {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        let rv = meta_str(&obj, "resourceVersion").to_string();
        let new = from_view(rt, obj);
        let name = self.info.name.clone();
        let ns = self.ns(rt);
        // Only the main resource creates here. Of the types that allow it, only Services
        // have a status subresource, whose strategy inherits AllowCreateOnUpdate: a PUT of
        // services/status to a missing Service is answered 404 rather than creating it.
        let may_create = part == Part::Main && rt.allow_create_on_update;
        if may_create
            && self
                .state
                .store
                .get(&Self::storage_gr(rt), &ns, &name)
                .is_none()
        {
            // The create admission (NamespaceLifecycle) runs for a PUT that creates.
            self.ensure_namespace(rt, &name)?;
        }
        let accounts = service_accounts(&self.state.store, rt, &ns);
        let create_refusal = may_create.then(|| self.create_refusal()).flatten();
        let authorized =
            certificates::authorize_update(self.state, self.user, rt, part.subresource(), &name);
        let (_allocating, mut taken) = self.service_allocation(rt, &name);
        let dry_run = dry_run_requested(self.query.get("dryRun"), &Value::Null)?;
        let mut allocated = None;
        let mut created = false;
        let converter = self.converter(rt);
        let written = self.write(rt, &ns, &name, |current| {
            // Decided afresh on each attempt of the write.
            let mut new = new.clone();
            created = false;
            allocated = None;
            let Some(current) = current else {
                if !may_create {
                    return Err(ApiError::not_found(&rt.gr(), &name));
                }
                check_update_uid(rt, &ns, &name, &new, None)?;
                // The storage drops whatever resourceVersion the body carries and creates:
                // a PUT that creates is never refused for lacking (or having) one.
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                let mut stored =
                    prepare_create(rt, &self.info.version, &ns, new, &self.manager, &accounts)?;
                if let Some(refusal) = create_refusal.clone() {
                    return Err(refusal);
                }
                if let Some(taken) = taken.as_mut() {
                    allocated = Some(services::allocate_create(taken, &mut stored, dry_run)?);
                }
                created = true;
                return Ok(Write::Put(stored));
            };
            check_update_uid(rt, &ns, &name, &new, Some(current))?;
            let latest = meta_str(current, "resourceVersion");
            if rv_unspecified(&rv) {
                if !rt.allow_unconditional_update {
                    return Err(resource_version_required(rt, &name));
                }
                // An unconditional update overwrites the latest version.
                new["metadata"]["resourceVersion"] = json!(latest);
            } else if rv != latest {
                return Err(ApiError::modified(&rt.gr(), &name));
            }
            prepare_update(
                rt,
                &self.info.version,
                current,
                new,
                part,
                &self.manager,
                false,
                authorized.as_ref(),
                taken.as_ref(),
                converter.as_ref(),
            )
        })?;
        self.commit_allocation(rt, &name, allocated);
        Ok((
            if created { 201 } else { 200 },
            self.view_written(rt, written)?,
        ))
    }

    /// The refusal of a write that would create its object, unless the requester may
    /// also `create` it: kube-apiserver's update and patch handlers authorize `create`
    /// (with the request's own attributes) when a PUT or an apply creates, after the object
    /// was validated and before the validating admission (`withAuthorization`).
    fn create_refusal(&self) -> Option<ApiError> {
        let mut attrs = super::attributes(self.info);
        attrs.verb = "create".into();
        (!auth::authorize(&self.state.store, self.user, &attrs).allowed)
            .then(|| auth::forbidden(self.user, &attrs))
    }

    fn patch(&self, rt: &ResourceType, part: Part) -> Reply {
        let (kind, patch_doc, is_apply, force) = self.patch_request(rt)?;
        let kind = kind.as_str();
        let name = self.info.name.clone();
        let version = self.info.version.clone();
        if is_apply {
            self.ensure_namespace(rt, &name)?;
        }
        let ns = self.ns(rt);
        let subresource = part.subresource();
        let authorized =
            certificates::authorize_update(self.state, self.user, rt, subresource, &name);
        let (accounts, default_class) = if is_apply {
            (
                service_accounts(&self.state.store, rt, &ns),
                default_storage_class(&self.state.store, rt),
            )
        } else {
            (objects::ServiceAccounts::default(), None)
        };
        let create_refusal = (is_apply && part == Part::Main)
            .then(|| self.create_refusal())
            .flatten();
        let (_allocating, mut taken) = self.service_allocation(rt, &name);
        let dry_run = dry_run_requested(self.query.get("dryRun"), &Value::Null)?;
        let mut allocated = None;
        let mut created = false;
        let converter = self.converter(rt);
        let written = self.write(rt, &ns, &name, |current| {
            let Some(current) = current else {
                if !is_apply || part != Part::Main {
                    return Err(ApiError::not_found(&rt.gr(), &name));
                }
                let applied = apply::apply(
                    None,
                    &patch_doc,
                    &self.manager,
                    force,
                    &rt.kind,
                    &objects::now(),
                    None,
                )
                .map_err(apply_error)?;
                let mut obj = applied;
                obj["metadata"]["name"] = json!(name);
                accounts.admit(rt, &ns, &name, &obj)?;
                let managed = obj["metadata"]["managedFields"].clone();
                if certificates::serves(rt) {
                    certificates::before_create(&mut obj, self.user)?;
                }
                let mut stored = prepare_create(
                    rt,
                    &version,
                    &ns,
                    from_view(rt, obj),
                    &self.manager,
                    &accounts,
                )?;
                if let Some(refusal) = create_refusal.clone() {
                    return Err(refusal);
                }
                stored["metadata"]["managedFields"] = managed;
                admit_storage_class(default_class.as_deref(), &mut stored);
                if certificates::serves(rt) {
                    certificates::finish_create(&mut stored, &self.manager);
                }
                if let Some(taken) = taken.as_mut() {
                    allocated = Some(services::allocate_create(taken, &mut stored, dry_run)?);
                }
                created = true;
                return Ok(Write::Put(stored));
            };
            let live = to_view(rt, &version, current.clone());
            let mut patched = match kind {
                "application/json-patch+json" => {
                    let mut target = live.clone();
                    patch::json_patch(&mut target, &patch_doc)?;
                    target
                }
                "application/merge-patch+json" => {
                    patch::check_merge_patch(&patch_doc)?;
                    let mut target = live.clone();
                    patch::merge_patch(&mut target, &patch_doc);
                    target
                }
                "application/strategic-merge-patch+json" => {
                    patch::strategic_merge_patch(&live, &patch_doc, &rt.kind)?
                }
                _ if rt.is_custom() => {
                    // The managers of other versions judge the apply in theirs.
                    let convert = manager_version_converter(rt, &version, converter.as_ref());
                    apply::apply_with_schema(
                        Some(&live),
                        &patch_doc,
                        &self.manager,
                        force,
                        apply::Schema::for_kind(&rt.kind),
                        &objects::now(),
                        subresource,
                        Some(&convert),
                    )
                    .map_err(apply_error)?
                }
                _ => apply::apply(
                    Some(&live),
                    &patch_doc,
                    &self.manager,
                    force,
                    &rt.kind,
                    &objects::now(),
                    subresource,
                )
                .map_err(apply_error)?,
            };
            if !patched.is_object() {
                return Err(ApiError::BadRequest(
                    "the patch produced a non-object".into(),
                ));
            }
            if objects::is_event(rt) {
                // As on an update: the other Event group's managers go (an apply's too,
                // once it has judged the live object's ownership).
                apply::drop_managers_of_other_versions(&mut patched, &rt.api_version(&version));
            }
            let rv = meta_str(&patched, "resourceVersion");
            if !rv.is_empty() && rv != meta_str(current, "resourceVersion") {
                return Err(ApiError::modified(&rt.gr(), &name));
            }
            let mut patched = from_view(rt, patched);
            patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            prepare_update(
                rt,
                &version,
                current,
                patched,
                part,
                &self.manager,
                is_apply,
                authorized.as_ref(),
                taken.as_ref(),
                converter.as_ref(),
            )
        })?;
        self.commit_allocation(rt, &name, allocated);
        Ok((
            if created { 201 } else { 200 },
            self.view_written(rt, written)?,
        ))
    }

    fn delete_options(&self) -> Result<Value, ApiError> {
        let mut opts = if self.body.is_empty() {
            json!({})
        } else {
            decode(&self.content_type, &self.body)?
        };
        if !opts.is_object() {
            return Err(ApiError::BadRequest(
                "DeleteOptions must be an object".into(),
            ));
        }
        if let Some(v) = self.query.get("dryRun") {
            let mut list = opts["dryRun"].as_array().cloned().unwrap_or_default();
            list.push(json!(v));
            opts["dryRun"] = Value::Array(list);
        }
        for key in [
            "gracePeriodSeconds",
            "propagationPolicy",
            "orphanDependents",
        ] {
            if let Some(v) = self.query.get(key) {
                opts[key] = match key {
                    "gracePeriodSeconds" => v.parse::<i64>().map(|g| json!(g)).map_err(|_| {
                        ApiError::BadRequest(format!("invalid gracePeriodSeconds: {v}"))
                    })?,
                    "orphanDependents" => json!(v == "true"),
                    _ => json!(v),
                };
            }
        }
        if let Some(p) = opts["propagationPolicy"].as_str()
            && !matches!(p, "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                vec![Cause {
                    field: "propagationPolicy".into(),
                    value: json!(p),
                    reason: "FieldValueNotSupported",
                    message: "Unsupported value: \"".to_string()
                        + p
                        + "\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"",
                }],
            ));
        }
        Ok(opts)
    }

    fn delete(&self, rt: &ResourceType) -> Reply {
        let opts = self.delete_options()?;
        let name = self.info.name.clone();
        let ns = self.ns(rt);
        // A CRD's custom resources go once its own delete is accepted (preconditions hold),
        // and not at all on a dry run.
        let crd = (rt.group == "apiextensions.k8s.io")
            .then(|| self.state.store.get(&rt.gr(), "", &name))
            .flatten();
        let dry_run = dry_run_requested(None, &opts)?;
        let converter = self.converter(rt);
        let current = self.state.store.get(&Self::storage_gr(rt), &ns, &name);
        let viewed = current
            .map(|c| self.view(converter.as_ref(), rt, c))
            .transpose()?;
        if let (Some(converter), Some(viewed)) = (&converter, &viewed) {
            // kube-apiserver's store reads the object in the request's version and encodes
            // it again to compare with what is stored (`getStateFromObject`): both
            // conversions are made, and the delete fails with them.
            converter
                .convert(viewed.clone(), rt.storage_version())
                .map_err(conversion::Failure::into_api_error)?;
        }
        if admission_webhooks::configured(&self.state.store)
            && let Some(viewed) = &viewed
        {
            let attrs = self.admission(
                rt,
                admission_webhooks::Operation::Delete,
                &name,
                Some(&opts),
            );
            admission::admit_delete(&self.state.store, &attrs, viewed)?;
        }
        let (code, obj) = delete_object(self.state, rt, &ns, &name, &opts)?;
        if let Some(crd) = crd.filter(|_| !dry_run) {
            self.delete_custom_resources_of(&crd);
        }
        Ok((code, self.present_delete(rt, obj)?))
    }

    fn present_delete(&self, rt: &ResourceType, outcome: Deleted) -> Result<Value, ApiError> {
        match outcome {
            Deleted::Gone(obj) if !rt.returns_deleted_object => Ok(success_status(
                &rt.gr(),
                meta_str(&obj, "name"),
                meta_str(&obj, "uid"),
            )),
            Deleted::Gone(obj) | Deleted::Pending(obj) => {
                self.view(self.converter(rt).as_ref(), rt, obj)
            }
        }
    }

    fn delete_custom_resources_of(&self, crd: &Value) {
        let gr = GroupResource::new(
            crd["spec"]["group"].as_str().unwrap_or_default(),
            crd["spec"]["names"]["plural"].as_str().unwrap_or_default(),
        );
        let (items, _) = self.state.store.list(&gr, None);
        for item in items {
            let _ = self.state.store.write::<ApiError>(
                &gr,
                meta_str(&item, "namespace"),
                meta_str(&item, "name"),
                |_| Ok(Write::Delete),
            );
        }
    }

    fn delete_collection(&self, rt: &ResourceType) -> Reply {
        let opts = self.delete_options()?;
        let (labels, fields) = self.selectors(rt)?;
        let ns = (!self.info.namespace.is_empty()).then_some(self.info.namespace.as_str());
        let (items, _) = self.state.store.list(&Self::storage_gr(rt), ns);
        let converter = self.converter(rt);
        let mut deleted = Vec::new();
        for item in items {
            let view = self.view(converter.as_ref(), rt, item)?;
            let labels_map = view["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            if !labels.matches(&labels_map) || !fields.matches(&view) {
                continue;
            }
            if admission_webhooks::configured(&self.state.store) {
                // Each item is admitted as a DELETE naming no object, as the collection's.
                let attrs =
                    self.admission(rt, admission_webhooks::Operation::Delete, "", Some(&opts));
                admission::admit_delete(&self.state.store, &attrs, &view)?;
            }
            match delete_object(
                self.state,
                rt,
                meta_str(&view, "namespace"),
                meta_str(&view, "name"),
                &opts,
            ) {
                Ok((_, Deleted::Gone(o) | Deleted::Pending(o))) => {
                    deleted.push(objects::list_item(
                        rt,
                        self.view(converter.as_ref(), rt, o)?,
                    ));
                }
                Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok((
            200,
            json!({
                "kind": format!("{}List", rt.kind),
                "apiVersion": rt.api_version(&self.info.version),
                "metadata": {"resourceVersion": self.state.store.revision().to_string()},
                "items": deleted,
            }),
        ))
    }

    fn get_scale(&self, rt: &ResourceType) -> Reply {
        let obj = self
            .state
            .store
            .get(&rt.gr(), &self.ns(rt), &self.info.name)
            .ok_or_else(|| ApiError::not_found(&rt.gr(), &self.info.name))?;
        Ok((
            200,
            objects::scale_of(rt, &self.view(self.converter(rt).as_ref(), rt, obj)?),
        ))
    }

    fn write_scale(&self, rt: &ResourceType) -> Reply {
        let name = self.info.name.clone();
        let ns = self.ns(rt);
        let version = self.info.version.clone();
        let converter = self.converter(rt);
        let written = self.write(rt, &ns, &name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(&rt.gr(), &name))?;
            let view = to_view(rt, &version, current.clone());
            let scale = objects::scale_of(rt, &view);
            let new_scale = if self.info.verb == "update" {
                body_object(self)?
            } else {
                let doc = decode(&self.content_type, &self.body)?;
                match self.content_type.as_str() {
                    "application/json-patch+json" => {
                        let mut s = scale.clone();
                        patch::json_patch(&mut s, &doc)?;
                        s
                    }
                    _ => {
                        let mut s = scale.clone();
                        patch::merge_patch(&mut s, &doc);
                        s
                    }
                }
            };
            let rv = meta_str(&new_scale, "resourceVersion");
            if !rv.is_empty() && rv != meta_str(current, "resourceVersion") {
                return Err(ApiError::modified(&rt.gr(), &name));
            }
            let replicas = new_scale["spec"]["replicas"].clone();
            if replicas.as_i64().is_some_and(|r| r < 0) {
                return Err(ApiError::invalid(
                    "Scale",
                    "autoscaling",
                    &name,
                    vec![objects::invalid(
                        "spec.replicas",
                        replicas.clone(),
                        "must be greater than or equal to 0",
                    )],
                ));
            }
            let mut updated = view;
            objects::set_scale(rt, &mut updated, replicas);
            prepare_update(
                rt,
                &version,
                current,
                from_view(rt, updated),
                Part::Main,
                &self.manager,
                false,
                None,
                None,
                converter.as_ref(),
            )
        })?;
        let obj = self.view_written(rt, written)?;
        Ok((200, objects::scale_of(rt, &obj)))
    }

    fn finalize_namespace(&self, rt: &ResourceType) -> Reply {
        let body = body_object(self)?;
        let name = self.info.name.clone();
        let written = self.write(rt, "", &name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(&rt.gr(), &name))?;
            let mut new = current.clone();
            new["spec"]["finalizers"] = body["spec"]["finalizers"].clone();
            if new["spec"]["finalizers"].is_null() {
                new["spec"]["finalizers"] = json!([]);
            }
            if is_deleting(&new) && finalizers(&new).is_empty() && !namespace_blocked(rt, &new) {
                return Ok(Write::Delete);
            }
            Ok(Write::Put(new))
        })?;
        Ok((200, self.view_written(rt, written)?))
    }

    fn bind_pod(&self, rt: &ResourceType, name: &str) -> Reply {
        let body = body_object(self)?;
        let node = body["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "Binding",
                "",
                name,
                vec![objects::required("target.name")],
            ));
        }
        let name = name.to_string();
        // The binding storage reports its conflicts as `pods/binding`'s.
        let binding = GroupResource::new("", "pods/binding");
        self.write(rt, &self.ns(rt), &name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(&rt.gr(), &name))?;
            if is_deleting(current) {
                return Err(ApiError::conflict(&binding, &name, format!("pod {name} is being deleted, cannot be assigned to a host")));
            }
            if let Some(existing) = current["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                return Err(ApiError::conflict(&binding, &name, format!("pod {name} is already assigned to node \"{existing}\"")));
            }
            let mut new = current.clone();
            new["spec"]["nodeName"] = json!(node);
            let mut conditions = new["status"]["conditions"].as_array().cloned().unwrap_or_default();
            conditions.retain(|c| c["type"] != "PodScheduled");
            conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": objects::now()}));
            new["status"]["conditions"] = Value::Array(conditions);
            Ok(Write::Put(new))
        })?;
        Ok((
            201,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        ))
    }

    /// The patch of a PATCH request: its content type (one of the four patch types for a
    /// type that takes strategic merge patches), the decoded document, whether it is an
    /// apply and whether the apply is forced. `fieldManager` is required for an apply,
    /// `force` refused for anything else, and an apply must name the type's group, version
    /// and kind.
    fn patch_request(&self, rt: &ResourceType) -> Result<(String, Value, bool, bool), ApiError> {
        let kind = self.content_type.as_str();
        let known = matches!(
            kind,
            "application/json-patch+json"
                | "application/merge-patch+json"
                | "application/apply-patch+yaml"
        ) || (kind == "application/strategic-merge-patch+json"
            && rt.accepts_strategic_merge());
        if !known {
            let accepted = if rt.accepts_strategic_merge() {
                "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
            } else {
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            };
            return Err(ApiError::UnsupportedMediaType {
                accepted: accepted.into(),
            });
        }
        let is_apply = kind == "application/apply-patch+yaml";
        let force = self.query.flag("force");
        if is_apply && self.query.get("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                vec![Cause {
                    field: "fieldManager".into(),
                    value: Value::Null,
                    reason: "FieldValueRequired",
                    message: "is required for apply patch".into(),
                }],
            ));
        }
        if !is_apply && self.query.get("force").is_some() {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                vec![Cause {
                    field: "force".into(),
                    value: json!(force),
                    reason: "FieldValueForbidden",
                    message: "may not be specified for non-apply patch".into(),
                }],
            ));
        }
        let doc = decode(kind, &self.body)?;
        if is_apply {
            if !doc.is_object() {
                return Err(ApiError::BadRequest("invalid object type".into()));
            }
            if doc["metadata"].get("managedFields").is_some() {
                return Err(ApiError::BadRequest(
                    "metadata.managedFields must be nil".into(),
                ));
            }
            let av = doc["apiVersion"].as_str().unwrap_or_default();
            if av != rt.api_version(&self.info.version) || doc["kind"] != json!(rt.kind) {
                return Err(ApiError::BadRequest(format!(
                    "Incorrect version specified in apply patch. Specified patch version: {av}, expected: {}",
                    rt.api_version(&self.info.version)
                )));
            }
        }
        Ok((kind.to_string(), doc, is_apply, force))
    }

    /// `PUT …/pods/NAME/ephemeralcontainers` and `…/resize`: the body is the whole Pod, of
    /// which only the ephemeral containers, or the containers' resources, are taken (see
    /// [`super::ephemeral`] and [`super::resize`]); the answer is the whole updated Pod.
    /// Unconditional without a resourceVersion, as pod updates are; never creates a pod.
    fn update_pod_part(&self, rt: &ResourceType, part: PodPart) -> Reply {
        let obj = body_object(self)?;
        check_type(rt, &self.info.version, &obj)?;
        let body_name = meta_str(&obj, "name");
        if body_name != self.info.name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({})",
                self.info.name
            )));
        }
        let body_ns = meta_str(&obj, "namespace");
        if !body_ns.is_empty() && body_ns != self.info.namespace {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        let rv = meta_str(&obj, "resourceVersion").to_string();
        let new = from_view(rt, obj);
        let name = self.info.name.clone();
        let ns = self.ns(rt);
        let written = self.write(rt, &ns, &name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(&rt.gr(), &name))?;
            check_update_uid(rt, &ns, &name, &new, Some(current))?;
            if !rv_unspecified(&rv) && rv != meta_str(current, "resourceVersion") {
                return Err(ApiError::modified(&rt.gr(), &name));
            }
            self.prepare_pod_part_update(rt, part, current, &new, false)
        })?;
        Ok((200, self.view_written(rt, written)?))
    }

    /// `PATCH …/pods/NAME/ephemeralcontainers` and `…/resize`: the patch applies to the
    /// whole Pod (as `kubectl debug` sends it: a strategic merge patch of
    /// `spec.ephemeralContainers`; `kubectl patch --subresource resize`: one of the
    /// containers' resources), of which only the subresource's part is taken; the answer is
    /// the whole updated Pod.
    fn patch_pod_part(&self, rt: &ResourceType, part: PodPart) -> Reply {
        let (kind, doc, is_apply, force) = self.patch_request(rt)?;
        let name = self.info.name.clone();
        let ns = self.ns(rt);
        let version = self.info.version.clone();
        // A write that lands between the admission of the patch and its store is not the
        // client's conflict: `write` applies the patch again to the newer pod. A patch naming
        // a stale resourceVersion is refused.
        let written = self.write(rt, &ns, &name, |current| {
            let current = current.ok_or_else(|| ApiError::not_found(&rt.gr(), &name))?;
            let live = to_view(rt, &version, current.clone());
            let patched = match kind.as_str() {
                "application/json-patch+json" => {
                    let mut target = live;
                    patch::json_patch(&mut target, &doc)?;
                    target
                }
                "application/merge-patch+json" => {
                    patch::check_merge_patch(&doc)?;
                    let mut target = live;
                    patch::merge_patch(&mut target, &doc);
                    target
                }
                "application/strategic-merge-patch+json" => {
                    patch::strategic_merge_patch(&live, &doc, &rt.kind)?
                }
                _ => apply::apply(
                    Some(&live),
                    &doc,
                    &self.manager,
                    force,
                    &rt.kind,
                    &objects::now(),
                    Some(part.subresource()),
                )
                .map_err(apply_error)?,
            };
            if !patched.is_object() {
                return Err(ApiError::BadRequest(
                    "the patch produced a non-object".into(),
                ));
            }
            let rv = meta_str(&patched, "resourceVersion");
            if !rv.is_empty() && rv != meta_str(current, "resourceVersion") {
                return Err(ApiError::modified(&rt.gr(), &name));
            }
            let mut patched = from_view(rt, patched);
            patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            self.prepare_pod_part_update(rt, part, current, &patched, is_apply)
        })?;
        Ok((200, self.view_written(rt, written)?))
    }

    /// Decides the write of an update of the live pod `old` through
    /// `pods/ephemeralcontainers` or `pods/resize` to `new` (stored form): the strategy keeps
    /// only the ephemeral containers, or the containers' resources and resize policies, of
    /// `new`, validates them, moves the generation when the spec changed, and records the
    /// writer's fields under the subresource.
    fn prepare_pod_part_update(
        &self,
        rt: &ResourceType,
        part: PodPart,
        old: &Value,
        new: &Value,
        managed_by_apply: bool,
    ) -> Result<Write, ApiError> {
        let name = meta_str(old, "name").to_string();
        let new_uid = meta_str(new, "uid");
        if !new_uid.is_empty() && new_uid != meta_str(old, "uid") {
            return Err(invalid(
                rt,
                &name,
                vec![objects::invalid(
                    "metadata.uid",
                    json!(new_uid),
                    "field is immutable",
                )],
            ));
        }
        // The field manager records what the request changes (as decoded, so defaulted),
        // before the strategy drops all but its part of the pod: labels or status a
        // PUT sends are not stored, but owned by the writer from then on, as upstream.
        let mut request = new.clone();
        objects::apply_defaults(rt, &mut request);
        if !managed_by_apply {
            apply::record_update(
                old,
                &mut request,
                &self.manager,
                &rt.kind,
                &objects::now(),
                Some(part.subresource()),
            );
        }
        let mut updated = match part {
            PodPart::EphemeralContainers => super::ephemeral::prepare_update(old, &request),
            PodPart::Resize => super::resize::prepare_update(old, &request),
        };
        match request["metadata"].get("managedFields") {
            Some(entries) => updated["metadata"]["managedFields"] = entries.clone(),
            None => {
                if let Some(meta) = updated["metadata"].as_object_mut() {
                    meta.remove("managedFields");
                }
            }
        }
        let causes = match part {
            PodPart::EphemeralContainers => {
                super::ephemeral::drop_disabled_fields(&mut updated);
                super::ephemeral::validate_update(&updated, old)
            }
            PodPart::Resize => {
                super::resize::validate_update(&updated, old, objects::pod_qos_class)
            }
        };
        if !causes.is_empty() {
            return Err(invalid(rt, &name, causes));
        }
        if objects::generation_changed(rt, old, &updated) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            updated["metadata"]["generation"] = json!(generation);
        }
        let mut old_cmp = old.clone();
        old_cmp["metadata"]["resourceVersion"] = updated["metadata"]["resourceVersion"].clone();
        if same_ignoring_time(&old_cmp, &updated) {
            return Ok(Write::Keep);
        }
        Ok(Write::Put(updated))
    }
}

/// How often a write is decided and admitted again when another write changed the object
/// between its admission and its store.
const MAX_WRITE_ATTEMPTS: u32 = 5;

/// Why one attempt of a write stored nothing.
#[derive(Debug)]
enum WriteFailure {
    /// The request, or the write decided on it, was refused.
    Refused(ApiError),
    /// The object changed between the admission of the write and its store.
    Changed(ApiError),
}

impl WriteFailure {
    /// `error` of an attempt, which found the object `changed` when it came to store.
    fn after(changed: bool, error: ApiError) -> Self {
        if changed {
            Self::Changed(error)
        } else {
            Self::Refused(error)
        }
    }

    fn into_api_error(self) -> ApiError {
        match self {
            Self::Refused(e) | Self::Changed(e) => e,
        }
    }
}

impl From<ApiError> for WriteFailure {
    fn from(e: ApiError) -> Self {
        Self::Refused(e)
    }
}

/// The part of a pod a subresource writes.
#[derive(Debug, Clone, Copy)]
enum PodPart {
    /// `pods/ephemeralcontainers`: the ephemeral containers.
    EphemeralContainers,
    /// `pods/resize`: the containers' and init containers' resources and resize policies.
    Resize,
}

impl PodPart {
    fn subresource(self) -> &'static str {
        match self {
            Self::EphemeralContainers => super::ephemeral::SUBRESOURCE,
            Self::Resize => super::resize::SUBRESOURCE,
        }
    }
}

/// Whether an update body's resourceVersion leaves the update unconditional: the store
/// reads it as an unsigned number, and absent, empty and `0` all read as 0.
fn rv_unspecified(rv: &str) -> bool {
    rv.bytes().all(|b| b == b'0')
}

/// The 422 of store.go's `Update` for an unconditional update of a type whose strategy
/// refuses them: `NewInvalid` with the group and the plural *resource* as the kind, and
/// `field.Invalid(metadata.resourceVersion, uint64(0), …)`, which apimachinery 1.34
/// renders as JSON (`0`).
fn resource_version_required(rt: &ResourceType, name: &str) -> ApiError {
    ApiError::invalid(
        &rt.resource,
        &rt.group,
        name,
        vec![objects::invalid(
            "metadata.resourceVersion",
            json!(0),
            "must be specified for an update",
        )],
    )
}

fn apply_error(e: apply::Error) -> ApiError {
    match e.conflicts() {
        Some(conflicts) => ApiError::ApplyConflict {
            message: e.to_string(),
            causes: conflicts,
        },
        None => status_error(e.status_code(), e.to_string()),
    }
}

/// An error with the code a patch or apply module chose, and the matching reason.
fn status_error(code: u16, message: String) -> ApiError {
    match code {
        400 => ApiError::BadRequest(message),
        500 => ApiError::Internal(message),
        _ => ApiError::Custom {
            code,
            reason: if code == 422 { "Invalid" } else { "BadRequest" }.into(),
            message,
        },
    }
}

/// A 422 about ListOptions.
fn list_options_invalid(field: &str, value: Value, detail: &str) -> ApiError {
    ApiError::invalid(
        "ListOptions",
        "meta.k8s.io",
        "",
        vec![objects::forbidden_value(field, value, detail)],
    )
}

/// Parses a resourceVersion, answering the real 422 when it is not a number.
pub fn parse_rv(rt: &ResourceType, rv: &str) -> Result<u64, ApiError> {
    rv.parse::<u64>().map_err(|e| {
        ApiError::invalid(
            &rt.gr().to_string(),
            "",
            "",
            vec![objects::invalid(
                "resourceVersion",
                json!(rv),
                &format!("invalid resource version: {e}"),
            )],
        )
    })
}

fn object_key(o: &Value) -> String {
    format!("{}/{}", meta_str(o, "namespace"), meta_str(o, "name"))
}

fn encode_continue(rv: u64, after: &str) -> String {
    use base64::Engine as _;
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": after});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    use base64::Engine as _;
    let bad = || ApiError::BadRequest(format!("invalid continue token: {token}"));
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok((
        v["rv"].as_u64().ok_or_else(bad)?,
        v["start"].as_str().ok_or_else(bad)?.to_string(),
    ))
}

/// What a delete did.
pub enum Deleted {
    /// The object is gone; its final state.
    Gone(Value),
    /// The object stays, now with a deletionTimestamp (finalizers or a grace period).
    Pending(Value),
}

/// Checks a delete's `preconditions` against the stored object.
///
/// Most types check them in `rest.BeforeDelete` (apiserver `pkg/registry/rest/delete.go`),
/// naming the kind and group of the internal type (`ConfigMap`, `Lease.coordination.k8s.io`,
/// `Event` for both event APIs); namespaces and CRDs check them in their own `Delete` with the
/// storage layer's wording and their resource.
///
/// # Errors
/// Conflict when the uid or resourceVersion differs.
fn check_delete_preconditions(
    rt: &ResourceType,
    name: &str,
    pre: &Value,
    current: &Value,
) -> Result<(), ApiError> {
    let own_delete = matches!(
        (rt.group.as_str(), rt.resource.as_str()),
        ("", "namespaces") | ("apiextensions.k8s.io", "customresourcedefinitions")
    );
    let kind = if rt.group == "events.k8s.io" {
        GroupResource::new("", &rt.kind)
    } else {
        GroupResource::new(&rt.group, &rt.kind)
    };
    if let Some(uid) = pre["uid"].as_str() {
        let actual = meta_str(current, "uid");
        if uid != actual {
            return Err(if own_delete {
                ApiError::conflict(
                    &rt.gr(),
                    name,
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                    ),
                )
            } else {
                ApiError::conflict(
                    &kind,
                    name,
                    format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
                    ),
                )
            });
        }
    }
    if let Some(rv) = pre["resourceVersion"].as_str() {
        let actual = meta_str(current, "resourceVersion");
        if rv != actual {
            return Err(if own_delete {
                ApiError::conflict(
                    &rt.gr(),
                    name,
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                    ),
                )
            } else {
                ApiError::conflict(
                    &kind,
                    name,
                    format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
                    ),
                )
            });
        }
    }
    Ok(())
}

/// The storage layer's key of an object (`/registry/…`, as the `StorageError`s of etcd3 name
/// it): the resource's storage prefix, then the namespace and the name.
fn storage_key(rt: &ResourceType, namespace: &str, name: &str) -> String {
    let prefix = match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "services") => "services/specs".to_string(),
        ("", "nodes") => "minions".to_string(),
        ("", "replicationcontrollers") => "controllers".to_string(),
        ("", "endpoints") => "services/endpoints".to_string(),
        ("events.k8s.io", "events") => "events".to_string(),
        ("networking.k8s.io", "ingresses") => "ingress".to_string(),
        ("apiextensions.k8s.io", _) => format!("{}/{}", rt.group, rt.resource),
        _ if rt.is_custom() => format!("{}/{}", rt.group, rt.resource),
        _ => rt.resource.clone(),
    };
    if namespace.is_empty() {
        format!("/registry/{prefix}/{name}")
    } else {
        format!("/registry/{prefix}/{namespace}/{name}")
    }
}

/// The uid precondition of an update: a PUT whose body names a uid is conditional on it
/// (`defaultUpdatedObjectInfo.Preconditions`), checked by the storage layer against the stored
/// object (an empty one when a PUT creates) and answered with its raw `StorageError`.
///
/// # Errors
/// Conflict when the uids differ.
fn check_update_uid(
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    new: &Value,
    current: Option<&Value>,
) -> Result<(), ApiError> {
    let uid = meta_str(new, "uid");
    let actual = current.map_or("", |c| meta_str(c, "uid"));
    if uid.is_empty() || uid == actual {
        return Ok(());
    }
    Err(ApiError::conflict(
        &rt.gr(),
        name,
        format!(
            "StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}",
            storage_key(rt, namespace, name)
        ),
    ))
}

/// Deletes one object with kube-apiserver's semantics: preconditions, pod grace periods,
/// finalizers, and the `orphan`/`foregroundDeletion` finalizers of the propagation policy.
///
/// # Errors
/// NotFound, Conflict on a failed precondition.
pub fn delete_object(
    state: &State,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    opts: &Value,
) -> Result<(u16, Deleted), ApiError> {
    let gr = rt.gr();
    let is_pod = rt.group.is_empty() && rt.resource == "pods";
    let is_namespace = rt.group.is_empty() && rt.resource == "namespaces";
    let policy = opts["propagationPolicy"]
        .as_str()
        .map(str::to_string)
        .or_else(|| match opts["orphanDependents"].as_bool() {
            Some(true) => Some("Orphan".into()),
            Some(false) => Some("Background".into()),
            None => None,
        });
    let mut pending = false;
    let mut immediate = false;
    let storage_gr = if rt.group == "events.k8s.io" {
        GroupResource::new("", "events")
    } else {
        gr.clone()
    };
    let dry_run = dry_run_requested(None, opts)?;
    let written = state.store_write_as(&storage_gr, namespace, name, dry_run, |current| {
        let current = current.ok_or_else(|| ApiError::not_found(&gr, name))?;
        check_delete_preconditions(rt, name, &opts["preconditions"], current)?;
        let mut obj = current.clone();
        let mut fins = finalizers(&obj);
        if state.config_gc() {
            match policy.as_deref() {
                Some("Orphan") if !fins.iter().any(|f| f == "orphan") => {
                    fins.retain(|f| f != "foregroundDeletion");
                    fins.push("orphan".into());
                }
                Some("Foreground") if !fins.iter().any(|f| f == "foregroundDeletion") => {
                    fins.retain(|f| f != "orphan");
                    fins.push("foregroundDeletion".into());
                }
                _ => {}
            }
        }
        let now = objects::now();
        let mut grace = 0i64;
        let mut deadline = None;
        if is_pod {
            match pod_deletion(
                &obj,
                opts["gracePeriodSeconds"].as_i64(),
                chrono::Utc::now(),
            ) {
                PodDeletion::Pending => {
                    // Nothing changes, not even finalizers from the options.
                    pending = true;
                    return Ok(Write::Keep);
                }
                PodDeletion::Now => {}
                PodDeletion::Graceful { seconds, timestamp } => {
                    grace = seconds;
                    deadline = Some(timestamp);
                }
            }
        }
        let namespace_finalizers = is_namespace
            && obj["spec"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
        if fins.is_empty() && grace == 0 && !namespace_finalizers {
            if !is_pod {
                return Ok(Write::Delete);
            }
            // The pod strategy makes every deletion graceful: the deletion metadata (grace
            // 0) is written, then the pod is removed, and the answer is that last state.
            immediate = true;
        } else {
            pending = true;
        }
        let first = !is_deleting(&obj);
        let unchanged = !first
            && fins == finalizers(current)
            && (is_namespace
                || obj["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(grace));
        if unchanged {
            return Ok(Write::Keep);
        }
        if first && let Some(g) = obj["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
            obj["metadata"]["generation"] = json!(g + 1);
        }
        if let Some(timestamp) = deadline.or_else(|| first.then_some(now)) {
            obj["metadata"]["deletionTimestamp"] = json!(timestamp);
        }
        // The namespace registry's own Delete sets the timestamp and the phase, not a grace period.
        if !is_namespace {
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        }
        if !fins.is_empty() {
            obj["metadata"]["finalizers"] = json!(fins);
        }
        if is_namespace {
            obj["status"]["phase"] = json!("Terminating");
        }
        Ok(Write::Put(obj))
    })?;
    let mut obj = written.object.unwrap_or(Value::Null);
    if immediate && !dry_run {
        let uid = obj["metadata"]["uid"].clone();
        let gone = state.store_write_as(&storage_gr, namespace, name, false, |current| {
            Ok::<_, ApiError>(match current {
                Some(c) if c["metadata"]["uid"] == uid => Write::Delete,
                _ => Write::Keep,
            })
        })?;
        if gone.event.is_some() {
            obj = gone.object.unwrap_or(obj);
        }
    }
    Ok((
        200,
        if pending {
            Deleted::Pending(obj)
        } else {
            Deleted::Gone(obj)
        },
    ))
}

/// What a delete does to a pod, given the grace period it asks for (`requested`).
#[derive(Debug, PartialEq)]
enum PodDeletion {
    /// Already terminating with a grace period no longer than asked, or none asked:
    /// nothing changes.
    Pending,
    /// Already terminating with no grace period left: removed now.
    Now,
    /// Deletion metadata to write (the object is removed at once when `seconds` is 0 and
    /// no finalizer holds it).
    Graceful {
        /// `metadata.deletionGracePeriodSeconds`.
        seconds: i64,
        /// `metadata.deletionTimestamp`.
        timestamp: String,
    },
}

/// The pod strategy's `CheckGracefulDelete` and apiserver's `BeforeDelete` (rest/delete.go):
/// a first delete waits the asked period, else the pod's `terminationGracePeriodSeconds`,
/// else 30 s (none for a pod on no node or in a terminal phase; a negative one is 1 s). A
/// pod already terminating may only have its period shortened: its deadline moves back by
/// the difference, to `now` at the earliest (a graceful period then becomes 1 s).
fn pod_deletion(
    pod: &Value,
    requested: Option<i64>,
    now: chrono::DateTime<chrono::Utc>,
) -> PodDeletion {
    // A negative period asked for is 1 s.
    let requested = requested.map(|s| if s < 0 { 1 } else { s });
    let stamp =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if is_deleting(pod) {
        let existing = pod["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        let current = pod["metadata"]["deletionTimestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        if existing == 0 {
            return PodDeletion::Now;
        }
        let (Some(mut seconds), Some(current)) = (requested, current) else {
            return PodDeletion::Pending;
        };
        if seconds >= existing {
            return PodDeletion::Pending;
        }
        let mut timestamp = current.with_timezone(&chrono::Utc)
            - chrono::Duration::seconds(existing)
            + chrono::Duration::seconds(seconds);
        if timestamp < now {
            timestamp = now;
            if seconds != 0 {
                seconds = 1;
            }
        }
        return PodDeletion::Graceful {
            seconds,
            timestamp: stamp(timestamp),
        };
    }
    let scheduled = pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    let mut seconds = requested
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30);
    if !scheduled || terminal {
        seconds = 0;
    }
    if seconds < 0 {
        seconds = 1;
    }
    PodDeletion::Graceful {
        seconds,
        timestamp: stamp(now + chrono::Duration::seconds(seconds)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;
    use crate::request::{self, Query};
    use crate::state::ApiServerConfig;
    use bytes::Bytes;
    use hyper::Method;
    use std::sync::Arc;

    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

    fn state() -> State {
        State::new(ApiServerConfig::default(), String::new())
    }

    fn send(state: &State, method: Method, path: &str, content_type: &str, body: Value) -> Reply {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let query = Query::parse(Some(query));
        let info = request::parse(&method, path, &query);
        let user = UserInfo::admin();
        Call {
            state,
            info: &info,
            query: &query,
            content_type: content_type.into(),
            body: Bytes::from(body.to_string()),
            manager: "test".into(),
            user: &user,
        }
        .serve()
    }

    fn post(state: &State, path: &str, body: Value) -> Value {
        let (code, obj) = send(state, Method::POST, path, "application/json", body).unwrap();
        assert_eq!(code, 201);
        obj
    }

    fn put(state: &State, path: &str, body: Value) -> Reply {
        send(state, Method::PUT, path, "application/json", body)
    }

    fn lease(name: &str, holder: &str) -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}
        })
    }

    fn configmap(name: &str, value: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": {"k": value}
        })
    }

    fn rv(obj: &Value) -> String {
        meta_str(obj, "resourceVersion").to_string()
    }

    #[test]
    fn a_lease_replaced_without_a_resource_version_is_refused_as_the_real_store_refuses_it() {
        let state = state();
        post(&state, LEASES, lease("lock", "a"));
        let e = put(&state, &format!("{LEASES}/lock"), lease("lock", "b")).unwrap_err();
        assert_eq!((e.code(), e.reason()), (422, "Invalid"));
        assert_eq!(
            e.to_string(),
            "leases.coordination.k8s.io \"lock\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
        );
        assert_eq!(
            e.to_status()["details"],
            json!({
                "name": "lock",
                "group": "coordination.k8s.io",
                "kind": "leases",
                "causes": [{
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0: must be specified for an update",
                    "field": "metadata.resourceVersion",
                }],
            })
        );
        let stored = state
            .store
            .get(
                &GroupResource::new("coordination.k8s.io", "leases"),
                "default",
                "lock",
            )
            .unwrap();
        assert_eq!(stored["spec"]["holderIdentity"], "a");
    }

    #[test]
    fn a_lease_replaced_with_a_resource_version_of_zero_is_refused_too() {
        let state = state();
        post(&state, LEASES, lease("lock", "a"));
        let mut body = lease("lock", "b");
        body["metadata"]["resourceVersion"] = json!("0");
        let e = put(&state, &format!("{LEASES}/lock"), body).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(
            e.to_string()
                .ends_with("Invalid value: 0: must be specified for an update")
        );
    }

    #[test]
    fn a_lease_replaced_with_its_current_resource_version_is_updated() {
        let state = state();
        let created = post(&state, LEASES, lease("lock", "a"));
        let mut body = lease("lock", "b");
        body["metadata"]["resourceVersion"] = json!(rv(&created));
        let (code, updated) = put(&state, &format!("{LEASES}/lock"), body).unwrap();
        assert_eq!(code, 200);
        assert_eq!(updated["spec"]["holderIdentity"], "b");
    }

    #[test]
    fn a_configmap_replaced_without_a_resource_version_overwrites_the_latest_version() {
        let state = state();
        let created = post(&state, CONFIGMAPS, configmap("cm", "1"));
        let mut second = configmap("cm", "2");
        second["metadata"]["resourceVersion"] = json!(rv(&created));
        let (_, second) = put(&state, &format!("{CONFIGMAPS}/cm"), second).unwrap();
        let (code, third) = put(&state, &format!("{CONFIGMAPS}/cm"), configmap("cm", "3")).unwrap();
        assert_eq!(code, 200);
        assert_eq!(third["data"]["k"], "3");
        assert_ne!(rv(&third), rv(&second));
        assert_eq!(third["metadata"]["uid"], created["metadata"]["uid"]);
    }

    #[test]
    fn a_configmap_replaced_with_a_resource_version_of_zero_is_an_unconditional_update() {
        let state = state();
        post(&state, CONFIGMAPS, configmap("cm", "1"));
        let mut body = configmap("cm", "2");
        body["metadata"]["resourceVersion"] = json!("0");
        let (code, updated) = put(&state, &format!("{CONFIGMAPS}/cm"), body).unwrap();
        assert_eq!(code, 200);
        assert_eq!(updated["data"]["k"], "2");
    }

    #[test]
    fn an_unconditional_update_that_changes_nothing_keeps_the_resource_version() {
        let state = state();
        let created = post(&state, CONFIGMAPS, configmap("cm", "1"));
        let (_, same) = put(&state, &format!("{CONFIGMAPS}/cm"), configmap("cm", "1")).unwrap();
        assert_eq!(rv(&same), rv(&created));
    }

    #[test]
    fn a_configmap_replaced_with_a_stale_resource_version_is_a_conflict() {
        let state = state();
        let created = post(&state, CONFIGMAPS, configmap("cm", "1"));
        put(&state, &format!("{CONFIGMAPS}/cm"), configmap("cm", "2")).unwrap();
        let mut stale = configmap("cm", "3");
        stale["metadata"]["resourceVersion"] = json!(rv(&created));
        let e = put(&state, &format!("{CONFIGMAPS}/cm"), stale).unwrap_err();
        assert_eq!(e.code(), 409);
    }

    #[test]
    fn a_put_creates_a_lease_that_does_not_exist() {
        let state = state();
        let (code, created) = put(&state, &format!("{LEASES}/lock"), lease("lock", "a")).unwrap();
        assert_eq!(code, 201);
        assert_eq!(created["spec"]["holderIdentity"], "a");
        assert_eq!(created["metadata"]["namespace"], "default");
        assert!(!meta_str(&created, "uid").is_empty());
        assert!(!meta_str(&created, "creationTimestamp").is_empty());
        assert!(!rv(&created).is_empty());
        let stored = state
            .store
            .get(
                &GroupResource::new("coordination.k8s.io", "leases"),
                "default",
                "lock",
            )
            .unwrap();
        assert_eq!(stored["metadata"]["uid"], created["metadata"]["uid"]);
    }

    #[test]
    fn a_put_creates_a_missing_lease_whatever_resource_version_the_body_carries() {
        let state = state();
        let mut body = lease("lock", "a");
        body["metadata"]["resourceVersion"] = json!("12345");
        let (code, created) = put(&state, &format!("{LEASES}/lock"), body).unwrap();
        assert_eq!(code, 201);
        assert_ne!(rv(&created), "12345");
    }

    #[test]
    fn a_put_of_a_missing_lease_in_a_missing_namespace_is_not_found() {
        let state = state();
        let e = put(
            &state,
            "/apis/coordination.k8s.io/v1/namespaces/nowhere/leases/lock",
            lease("lock", "a"),
        )
        .unwrap_err();
        assert_eq!(e.code(), 404);
        assert_eq!(e.to_string(), "namespaces \"nowhere\" not found");
    }

    #[test]
    fn a_dry_run_put_of_a_missing_lease_answers_the_creation_and_stores_nothing() {
        let state = state();
        let (code, _) = put(
            &state,
            &format!("{LEASES}/lock?dryRun=All"),
            lease("lock", "a"),
        )
        .unwrap();
        assert_eq!(code, 201);
        let gr = GroupResource::new("coordination.k8s.io", "leases");
        assert!(state.store.get(&gr, "default", "lock").is_none());
    }

    #[test]
    fn a_put_of_a_missing_configmap_is_not_found() {
        let state = state();
        let e = put(&state, &format!("{CONFIGMAPS}/cm"), configmap("cm", "1")).unwrap_err();
        assert_eq!(e.code(), 404);
        assert_eq!(e.to_string(), "configmaps \"cm\" not found");
    }

    #[test]
    fn a_put_creates_a_role_that_does_not_exist() {
        let state = state();
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
        });
        let (code, _) = put(
            &state,
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/reader",
            role,
        )
        .unwrap();
        assert_eq!(code, 201);
    }

    #[test]
    fn a_custom_resource_and_its_status_refuse_unconditional_updates() {
        let state = state();
        post(
            &state,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "memcacheds.cache.example.com"},
                "spec": {"group": "cache.example.com", "scope": "Namespaced",
                    "names": {"plural": "memcacheds", "singular": "memcached",
                              "kind": "Memcached", "listKind": "MemcachedList"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]}
            }),
        );
        let path = "/apis/cache.example.com/v1/namespaces/default/memcacheds";
        let mc = json!({
            "apiVersion": "cache.example.com/v1", "kind": "Memcached",
            "metadata": {"name": "mc"}, "spec": {"size": 1}, "status": {"ready": 0}
        });
        post(&state, path, mc.clone());
        let message = "memcacheds.cache.example.com \"mc\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update";
        let e = put(&state, &format!("{path}/mc"), mc.clone()).unwrap_err();
        assert_eq!((e.code(), e.to_string().as_str()), (422, message));
        let e = put(&state, &format!("{path}/mc/status"), mc).unwrap_err();
        assert_eq!((e.code(), e.to_string().as_str()), (422, message));
    }

    #[test]
    fn a_crd_refuses_an_unconditional_update() {
        let state = state();
        let mut crd = post(
            &state,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "things.example.com"},
                "spec": {"group": "example.com", "scope": "Cluster",
                    "names": {"plural": "things", "kind": "Thing"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object"}}}]}
            }),
        );
        if let Some(m) = crd["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        let e = put(
            &state,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/things.example.com",
            crd,
        )
        .unwrap_err();
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            (
                422,
                "customresourcedefinitions.apiextensions.k8s.io \"things.example.com\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
            )
        );
    }

    #[test]
    fn a_merge_patch_of_a_lease_stays_conditional_on_the_live_version() {
        let state = state();
        post(&state, LEASES, lease("lock", "a"));
        let (code, patched) = send(
            &state,
            Method::PATCH,
            &format!("{LEASES}/lock"),
            "application/merge-patch+json",
            json!({"spec": {"holderIdentity": "b"}}),
        )
        .unwrap();
        assert_eq!(code, 200);
        assert_eq!(patched["spec"]["holderIdentity"], "b");
    }

    #[test]
    fn an_apply_of_a_lease_without_a_resource_version_updates_it() {
        let state = state();
        post(&state, LEASES, lease("lock", "a"));
        let (code, applied) = send(
            &state,
            Method::PATCH,
            &format!("{LEASES}/lock?fieldManager=elector&force=true"),
            "application/apply-patch+yaml",
            lease("lock", "b"),
        )
        .unwrap();
        assert_eq!(code, 200);
        assert_eq!(applied["spec"]["holderIdentity"], "b");
    }

    fn delete_with(state: &State, path: &str, preconditions: Value) -> Reply {
        send(
            state,
            Method::DELETE,
            path,
            "application/json",
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions}),
        )
    }

    #[test]
    fn a_failed_delete_precondition_names_the_kind_as_before_delete_does() {
        let state = state();
        let cm = post(&state, CONFIGMAPS, configmap("doomed", "x"));
        let uid = meta_str(&cm, "uid").to_string();
        let other = "00000000-0000-0000-0000-000000000002";
        let e = delete_with(
            &state,
            &format!("{CONFIGMAPS}/doomed"),
            json!({"uid": other}),
        )
        .err();
        assert_eq!(
            e.as_ref().map(ApiError::to_status),
            Some(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("Operation cannot be fulfilled on ConfigMap \"doomed\": the UID in the precondition ({other}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"),
                "reason": "Conflict", "details": {"name": "doomed", "kind": "ConfigMap"}, "code": 409})
            )
        );
        let e = delete_with(
            &state,
            &format!("{CONFIGMAPS}/doomed"),
            json!({"resourceVersion": "1"}),
        )
        .err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some(format!(
                "Operation cannot be fulfilled on ConfigMap \"doomed\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({}). The object might have been modified",
                rv(&cm)
            ))
        );
        let matching = json!({"uid": uid, "resourceVersion": rv(&cm)});
        assert!(delete_with(&state, &format!("{CONFIGMAPS}/doomed"), matching).is_ok());
    }

    #[test]
    fn a_grouped_kind_names_its_group_and_namespaces_keep_the_storage_wording() {
        let state = state();
        post(&state, LEASES, lease("l", "a"));
        let e = delete_with(
            &state,
            &format!("{LEASES}/l"),
            json!({"resourceVersion": "1"}),
        )
        .err();
        let status = e.map(|e| e.to_status()).unwrap_or_default();
        assert!(
            status["message"].as_str().is_some_and(|m| m.starts_with(
                "Operation cannot be fulfilled on Lease.coordination.k8s.io \"l\": the ResourceVersion in the precondition (1)"
            )),
            "{status}"
        );
        assert_eq!(
            status["details"],
            json!({"name": "l", "group": "coordination.k8s.io", "kind": "Lease"})
        );
        let ns = post(
            &state,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}),
        );
        let e = delete_with(&state, "/api/v1/namespaces/gone", json!({"uid": "u"})).err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some(format!(
                "Operation cannot be fulfilled on namespaces \"gone\": Precondition failed: UID in precondition: u, UID in object meta: {}",
                meta_str(&ns, "uid")
            ))
        );
    }

    const PODS: &str = "/api/v1/namespaces/default/pods";

    fn pod(name: &str, node: Option<&str>) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "example/app:1"}]}});
        if let Some(node) = node {
            p["spec"]["nodeName"] = json!(node);
        }
        p
    }

    #[test]
    fn a_new_pod_mounts_the_api_credentials_and_has_generation_one() {
        let s = state();
        let p = post(&s, PODS, pod("p", None));
        assert_eq!(p["metadata"]["generation"], 1);
        let volume = p["spec"]["volumes"][0]["name"].as_str().unwrap();
        assert!(volume.starts_with("kube-api-access-"), "{volume}");
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": volume, "readOnly": true,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
        );
    }

    #[test]
    fn a_service_account_without_automount_gets_no_credentials_volume() {
        let s = state();
        post(
            &s,
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"},
                   "automountServiceAccountToken": false,
                   "imagePullSecrets": [{"name": "registry"}]}),
        );
        let mut body = pod("p", None);
        body["spec"]["serviceAccountName"] = json!("quiet");
        let p = post(&s, PODS, body);
        assert_eq!(p["spec"].get("volumes"), None);
        assert_eq!(p["spec"]["containers"][0].get("volumeMounts"), None);
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "registry"}]));
    }

    /// Deletes `path` with `options` and answers the object of the 200.
    fn delete(state: &State, path: &str, options: Value) -> Value {
        let (code, obj) = send(state, Method::DELETE, path, "application/json", options).unwrap();
        assert_eq!(code, 200);
        obj
    }

    fn gone(state: &State, path: &str) -> bool {
        matches!(
            send(state, Method::GET, path, "application/json", Value::Null),
            Err(ApiError::NotFound { .. })
        )
    }

    #[test]
    fn a_second_grace_zero_delete_answers_grace_zero() {
        let s = state();
        post(&s, PODS, pod("p", Some("node-a")));
        let path = format!("{PODS}/p");
        let first = delete(&s, &path, json!({}));
        assert_eq!(first["metadata"]["deletionGracePeriodSeconds"], 30);
        assert_eq!(first["metadata"]["generation"], 2);
        let second = delete(&s, &path, json!({"gracePeriodSeconds": 0}));
        assert_eq!(second["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(second["metadata"]["generation"], 2);
        assert!(gone(&s, &path));
        // An unscheduled pod goes at once, answered with the same deletion metadata.
        post(&s, PODS, pod("unbound", None));
        let path = format!("{PODS}/unbound");
        let answer = delete(&s, &path, json!({}));
        assert_eq!(
            (
                &answer["metadata"]["deletionGracePeriodSeconds"],
                &answer["metadata"]["generation"]
            ),
            (&json!(0), &json!(2))
        );
        assert!(gone(&s, &path));
    }

    #[test]
    fn a_list_of_a_built_in_type_leaves_out_each_item_s_kind() {
        let s = state();
        post(&s, CONFIGMAPS, configmap("a", "1"));
        let (_, list) = send(&s, Method::GET, CONFIGMAPS, "application/json", Value::Null).unwrap();
        assert_eq!(list["kind"], "ConfigMapList");
        let item = &list["items"][0];
        assert_eq!((item.get("kind"), item.get("apiVersion")), (None, None));
    }

    #[test]
    fn an_unknown_field_selector_names_the_fields_the_default_conversion_knows() {
        let s = state();
        let e = send(
            &s,
            Method::GET,
            &format!("{CONFIGMAPS}?fieldSelector=data.n%3Dx"),
            "application/json",
            Value::Null,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#""data.n" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        let e = send(
            &s,
            Method::GET,
            &format!("{PODS}?fieldSelector=spec.foo%3Dx"),
            "application/json",
            Value::Null,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "field label not supported: spec.foo");
    }

    #[test]
    fn a_deleted_namespace_has_no_deletion_grace_period() {
        let state = state();
        post(
            &state,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}),
        );
        let (code, ns) = send(
            &state,
            Method::DELETE,
            "/api/v1/namespaces/gone",
            "application/json",
            json!({}),
        )
        .unwrap();
        assert_eq!(code, 200);
        assert_eq!(ns["status"]["phase"], "Terminating");
        assert!(ns["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(ns["metadata"].get("deletionGracePeriodSeconds"), None);
        let (_, again) = send(
            &state,
            Method::DELETE,
            "/api/v1/namespaces/gone",
            "application/json",
            json!({}),
        )
        .unwrap();
        assert_eq!(rv(&again), rv(&ns), "a second delete changes nothing");
    }

    fn widget_crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
    }

    #[test]
    fn a_refused_or_dry_run_crd_delete_keeps_the_custom_resources() {
        let state = state();
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        post(&state, crds, widget_crd());
        let widgets = "/apis/example.com/v1/namespaces/default/widgets";
        post(
            &state,
            widgets,
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        );
        let crd = format!("{crds}/widgets.example.com");
        let e = delete_with(&state, &crd, json!({"resourceVersion": "1"})).err();
        assert!(e.is_some_and(|e| {
            e.to_string()
                .contains("Precondition failed: ResourceVersion in precondition: 1")
        }));
        let dry = send(
            &state,
            Method::DELETE,
            &format!("{crd}?dryRun=All"),
            "application/json",
            json!({}),
        );
        assert!(dry.is_ok(), "{dry:?}");
        let listed = send(
            &state,
            Method::GET,
            widgets,
            "application/json",
            Value::Null,
        );
        assert_eq!(
            listed
                .ok()
                .map(|(_, l)| l["items"].as_array().map(Vec::len)),
            Some(Some(1))
        );
    }

    #[test]
    fn a_put_naming_another_uid_fails_the_storage_precondition() {
        let state = state();
        let cm = post(&state, CONFIGMAPS, configmap("a", "1"));
        let other = "00000000-0000-0000-0000-000000000002";
        let mut body = configmap("a", "2");
        body["metadata"]["uid"] = json!(other);
        let e = put(&state, &format!("{CONFIGMAPS}/a"), body).err();
        assert_eq!(
            e.as_ref().map(ApiError::to_status),
            Some(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("Operation cannot be fulfilled on configmaps \"a\": StorageError: invalid object, Code: 4, Key: /registry/configmaps/default/a, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {other}, UID in object meta: {}", meta_str(&cm, "uid")),
                "reason": "Conflict", "details": {"name": "a", "kind": "configmaps"}, "code": 409})
            )
        );
        // Checked before the resourceVersion, and against an empty object when a PUT creates.
        let mut created = lease("new", "a");
        created["metadata"]["uid"] = json!(other);
        let e = put(&state, &format!("{LEASES}/new"), created).err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some(format!(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"new\": StorageError: invalid object, Code: 4, Key: /registry/leases/default/new, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {other}, UID in object meta: "
            ))
        );
        let mut same = configmap("a", "3");
        same["metadata"]["uid"] = cm["metadata"]["uid"].clone();
        assert!(put(&state, &format!("{CONFIGMAPS}/a"), same).is_ok());
    }

    #[test]
    fn storage_keys_follow_the_registry_prefixes() {
        let r = crate::registry::Registry::new();
        let key = |group: &str, resource: &str, ns: &str| {
            r.lookup(group, "v1", resource)
                .map(|rt| storage_key(rt, ns, "x"))
                .unwrap_or_default()
        };
        assert_eq!(key("", "services", "d"), "/registry/services/specs/d/x");
        assert_eq!(key("", "nodes", ""), "/registry/minions/x");
        assert_eq!(key("", "namespaces", ""), "/registry/namespaces/x");
        assert_eq!(
            key("rbac.authorization.k8s.io", "clusterroles", ""),
            "/registry/clusterroles/x"
        );
        assert_eq!(key("events.k8s.io", "events", "d"), "/registry/events/d/x");
        assert_eq!(
            key("apiextensions.k8s.io", "customresourcedefinitions", ""),
            "/registry/apiextensions.k8s.io/customresourcedefinitions/x"
        );
    }

    #[test]
    fn a_config_map_with_a_bad_key_is_refused_with_the_real_status() {
        let state = state();
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad-key"}, "data": {"a b": "x"}});
        let e = send(&state, Method::POST, CONFIGMAPS, "application/json", body).err();
        let msg = "Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
        assert_eq!(
            e.map(|e| e.to_status()),
            Some(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("ConfigMap \"bad-key\" is invalid: data[a b]: {msg}"),
                "reason": "Invalid", "code": 422,
                "details": {"name": "bad-key", "kind": "ConfigMap",
                    "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": "data[a b]"}]}})
            )
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"c d": "x"}});
        let e = send(
            &state,
            Method::POST,
            "/api/v1/namespaces/default/secrets",
            "application/json",
            secret,
        )
        .err();
        assert!(e.is_some_and(|e| {
            e.to_string()
                .starts_with("Secret \"s\" is invalid: data[c d]: Invalid value: \"c d\"")
        }));
    }

    #[test]
    fn a_json_patch_that_does_not_apply_is_the_generic_422() {
        let state = state();
        post(&state, CONFIGMAPS, configmap("a", "1"));
        let e = send(
            &state,
            Method::PATCH,
            &format!("{CONFIGMAPS}/a"),
            "application/json-patch+json",
            json!([{"op": "test", "path": "/data/k", "value": "other"}]),
        )
        .err();
        assert_eq!(
            e.map(|e| e.to_status()),
            Some(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server rejected our request due to an error in our request",
                "reason": "Invalid", "details": {}, "code": 422})
            )
        );
        let e = send(
            &state,
            Method::PATCH,
            &format!("{CONFIGMAPS}/a"),
            "application/merge-patch+json",
            json!([1]),
        )
        .err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some(
                "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        );
    }

    /// POSTs `body` to `path` as the admin with the manager `kubectl-create`.
    fn create(path: &str, body: Value) -> Value {
        let state = State::new(ApiServerConfig::default(), String::new());
        let query = Query::parse(None);
        let info = request::parse(&Method::POST, path, &query);
        let user = UserInfo::admin();
        let call = Call {
            state: &state,
            info: &info,
            query: &query,
            content_type: "application/json".into(),
            body: Bytes::from(body.to_string()),
            manager: "kubectl-create".into(),
            user: &user,
        };
        match call.serve() {
            Ok((201, created)) => created,
            Ok((code, answer)) => panic!("POST {path}: {code} {answer}"),
            Err(error) => panic!("POST {path}: {error}"),
        }
    }

    fn fields_of(object: &Value) -> Value {
        let entries = object["metadata"]["managedFields"].as_array();
        assert_eq!(entries.map(Vec::len), Some(1), "{object}");
        object["metadata"]["managedFields"][0]["fieldsV1"].clone()
    }

    #[test]
    fn a_created_namespace_owns_its_name_label_but_not_the_finalizer_or_phase_the_strategy_sets() {
        let namespace = create(
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "owned"}}),
        );
        assert_eq!(namespace["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(namespace["status"]["phase"], "Active");
        assert_eq!(
            fields_of(&namespace),
            json!({"f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/metadata.name": {}}}})
        );
    }

    #[test]
    fn a_config_map_with_only_empty_maps_is_stored_without_them_and_without_managed_fields() {
        let config_map = create(
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "empty", "labels": {}, "annotations": null, "finalizers": []},
                "data": {}, "binaryData": {}}),
        );
        assert_eq!(config_map.get("data"), None);
        assert_eq!(config_map.get("binaryData"), None);
        let metadata = &config_map["metadata"];
        for field in ["labels", "annotations", "finalizers", "managedFields"] {
            assert_eq!(metadata.get(field), None, "{field} in {config_map}");
        }
    }

    #[test]
    fn a_created_pod_owns_its_decoded_defaults_but_not_what_admission_adds() {
        let pod = create(
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "nginx:1",
                    "resources": {"limits": {"cpu": "1"}}, "args": []}]}}),
        );
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "1"})
        );
        assert_eq!(pod["spec"]["containers"][0].get("args"), None);
        assert_eq!(
            fields_of(&pod),
            json!({"f:spec": {
                "f:containers": {"k:{\"name\":\"c\"}": {
                    ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                    "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}}, "f:requests": {".": {}, "f:cpu": {}}},
                    "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}
            }})
        );
    }

    fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&chrono::Utc)
    }

    fn terminating(timestamp: &str, seconds: i64) -> Value {
        json!({"metadata": {"deletionTimestamp": timestamp, "deletionGracePeriodSeconds": seconds},
               "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 30}})
    }

    #[test]
    fn a_first_pod_delete_waits_the_asked_period_or_the_pods_own() {
        let now = at("2026-01-01T00:00:00Z");
        let bound =
            json!({"metadata": {}, "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 45}});
        let graceful = |seconds: i64, timestamp: &str| PodDeletion::Graceful {
            seconds,
            timestamp: timestamp.into(),
        };
        assert_eq!(
            pod_deletion(&bound, None, now),
            graceful(45, "2026-01-01T00:00:45Z")
        );
        assert_eq!(
            pod_deletion(&bound, Some(5), now),
            graceful(5, "2026-01-01T00:00:05Z")
        );
        assert_eq!(
            pod_deletion(&bound, Some(-3), now),
            graceful(1, "2026-01-01T00:00:01Z")
        );
        let unbound = json!({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 45}});
        assert_eq!(
            pod_deletion(&unbound, Some(5), now),
            graceful(0, "2026-01-01T00:00:00Z")
        );
    }

    #[test]
    fn a_shorter_period_moves_a_terminating_pods_deadline_back_by_the_difference() {
        let pod = terminating("2026-01-01T00:00:30Z", 30);
        assert_eq!(
            pod_deletion(&pod, Some(10), at("2026-01-01T00:00:02.5Z")),
            PodDeletion::Graceful {
                seconds: 10,
                timestamp: "2026-01-01T00:00:10Z".into()
            }
        );
    }

    #[test]
    fn a_longer_period_or_none_leaves_a_terminating_pod_as_it_is() {
        let pod = terminating("2026-01-01T00:00:30Z", 30);
        let now = at("2026-01-01T00:00:02Z");
        assert_eq!(pod_deletion(&pod, Some(30), now), PodDeletion::Pending);
        assert_eq!(pod_deletion(&pod, Some(60), now), PodDeletion::Pending);
        assert_eq!(pod_deletion(&pod, None, now), PodDeletion::Pending);
    }

    #[test]
    fn a_deadline_moved_into_the_past_is_now_with_a_period_of_one_second_unless_zero() {
        let pod = terminating("2026-01-01T00:00:10Z", 10);
        let now = at("2026-01-01T00:00:08Z");
        assert_eq!(
            pod_deletion(&pod, Some(1), now),
            PodDeletion::Graceful {
                seconds: 1,
                timestamp: "2026-01-01T00:00:08Z".into()
            }
        );
        assert_eq!(
            pod_deletion(&pod, Some(0), now),
            PodDeletion::Graceful {
                seconds: 0,
                timestamp: "2026-01-01T00:00:08Z".into()
            }
        );
    }

    #[test]
    fn a_terminating_pod_with_no_period_left_is_removed_now() {
        let pod = terminating("2026-01-01T00:00:10Z", 0);
        assert_eq!(
            pod_deletion(&pod, Some(5), at("2026-01-01T00:00:00Z")),
            PodDeletion::Now
        );
    }

    /// A state whose validating webhook on configmap updates, on its first call, lets
    /// another writer change `default/cm`; returns the webhook server and how often it was
    /// called.
    fn configmap_changed_during_admission() -> (
        Arc<State>,
        crate::admission_webhooks::test_webhooks::Server,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let state = Arc::new(state());
        post(&state, CONFIGMAPS, configmap("cm", "a"));
        let calls = Arc::new(AtomicUsize::new(0));
        let (writer, counted) = (state.clone(), calls.clone());
        let server = crate::admission_webhooks::test_webhooks::serve(move |_, review| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                writer
                    .store
                    .write::<ApiError>(
                        &GroupResource::new("", "configmaps"),
                        "default",
                        "cm",
                        |current| {
                            let mut changed = current.cloned().expect("the configmap");
                            changed["metadata"]["labels"] = json!({"written": "meanwhile"});
                            Ok(Write::Put(changed))
                        },
                    )
                    .unwrap();
            }
            json!({"uid": review["request"]["uid"], "allowed": true})
        });
        post(
            &state,
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "meanwhile"},
                "webhooks": [{"name": "meanwhile.test",
                    "clientConfig": {"url": format!("https://127.0.0.1:{}/", server.port),
                                     "caBundle": server.ca},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                               "operations": ["UPDATE"], "resources": ["configmaps"]}],
                    "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}),
        );
        (state, server, calls)
    }

    #[test]
    fn an_unconditional_update_of_an_object_changed_during_its_admission_applies_to_the_newer_object()
     {
        let (state, _server, calls) = configmap_changed_during_admission();
        let before = state
            .store
            .get(&GroupResource::new("", "configmaps"), "default", "cm")
            .unwrap();
        let (code, updated) =
            put(&state, &format!("{CONFIGMAPS}/cm"), configmap("cm", "b")).unwrap();
        assert_eq!(code, 200);
        assert_eq!(updated["data"]["k"], "b");
        // Admitted again on the object the other writer left.
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
        let stored = state
            .store
            .get(&GroupResource::new("", "configmaps"), "default", "cm")
            .unwrap();
        assert_eq!(stored["data"]["k"], "b");
        // Two writes after the one read before: the other writer's, then the update's.
        assert!(rv(&stored).parse::<u64>().unwrap() > rv(&before).parse::<u64>().unwrap() + 1);
    }

    #[test]
    fn an_update_naming_the_version_another_write_replaced_during_its_admission_is_a_conflict() {
        let (state, _server, calls) = configmap_changed_during_admission();
        let read = state
            .store
            .get(&GroupResource::new("", "configmaps"), "default", "cm")
            .unwrap();
        let mut body = configmap("cm", "b");
        body["metadata"]["resourceVersion"] = json!(rv(&read));
        let e = put(&state, &format!("{CONFIGMAPS}/cm"), body).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Operation cannot be fulfilled on configmaps \"cm\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        let stored = state
            .store
            .get(&GroupResource::new("", "configmaps"), "default", "cm")
            .unwrap();
        assert_eq!(
            (
                stored["data"]["k"].as_str(),
                stored["metadata"]["labels"]["written"].as_str()
            ),
            (Some("a"), Some("meanwhile"))
        );
    }
}
