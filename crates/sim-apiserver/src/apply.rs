//! Server-side apply: merging applied configurations and tracking field ownership in `metadata.managedFields`.
//!
//! The model follows structured-merge-diff's `merge.Updater` as the kube-apiserver drives it:
//!
//! - An **apply** computes the field set of the applied configuration, merges it into the live
//!   object (applied values win, associative lists merge by key, atomic lists are replaced),
//!   removes the fields the same manager applied last time and no longer mentions (unless another
//!   manager owns them too), and then compares the live object with the result. A changed or
//!   added field that another manager owns is a conflict, unless `force` moves it to the applier.
//! - An **update** (PUT, or a PATCH that is not an apply) gives its manager every field whose
//!   value it changed and takes those fields away from every other manager.
//!
//! Ownership is stored as real `managedFields` entries in the FieldsV1 format, so kubectl and
//! clients see what a real server would show. Lists are identified as in the real schemas:
//! associative lists use the strategic-merge keys of [`super::patch::list_strategy`] (container
//! ports and service ports are keyed by port and protocol, spread constraints by topology key and
//! `whenUnsatisfiable`), corrected where the OpenAPI `x-kubernetes-list-type` of the built-in
//! kinds says otherwise (a service account's `secrets`, a node's `podCIDRs`, ...),
//! `metadata.finalizers` is a set, everything else is atomic. The `structType=atomic` structs
//! of the built-in kinds (owner references, label selectors, object references, key selectors,
//! role references) are owned whole. Custom resources have atomic lists unless
//! [`Schema::with_list_types`] says otherwise.
//!
//! An update records what upstream's comparison of the old and the new object finds: a field
//! the old object lacks is "added" together with every map and list in it, which gives each of
//! them its `.` member, except a field that the kind's Go type always serializes (a struct held
//! by value such as `spec`, `template` or an existing container's `resources`, or a list without
//! `omitempty` such as `containers`), which exists as a zero value in the object a create starts
//! from and in every stored object. A custom resource starts from an empty object, so its
//! `spec` is "added" too.
//!
//! A live object without any `managedFields` is treated as the real server does: all its fields
//! belong to an `Update` manager called `before-first-apply`.
//!
//! # Caveats
//!
//! - No schema: every JSON object is a granular map except the known atomic structs and maps of
//!   the built-in kinds (see above); fields are not validated against a type and unknown fields
//!   are kept.
//! - Unions (discriminated one-of fields, e.g. a deployment strategy's `type`) are not
//!   normalized, and CRD schemas are only honoured as far as [`Schema::with_list_types`] passes
//!   their list types on (`x-kubernetes-map-type: atomic` maps of CRDs are granular here).
//! - Version conversion is modelled only when the caller converts ([`record_update_converting`],
//!   [`apply_with_schema`]), and an apply prunes what its manager no longer applies as compared
//!   in the version it applies now, not in the one its entry was of.
//! - The real server caps `Update` entries at ten by folding the oldest into `ancient-changes`;
//!   this module keeps them all.
//! - The fields Go types always serialize are listed for the kinds the simulator serves (and
//!   the pod templates of the other workloads); other built-in kinds may get a `.` upstream
//!   would not record.
//! - What `omitempty` drops before the field manager sees an object (empty maps and lists,
//!   `null`s) is the caller's job ([`super::objects::omit_empty`]).
//! - `null` in an applied configuration deletes the field instead of storing `null`.
//! - Status and spec resets done by the registries (status dropped on main-resource writes, spec
//!   dropped on `/status` writes) are the caller's job; this module tracks whatever changed.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::patch::{ListStrategy, list_strategy};

/// How a list is identified for ownership, as a CRD's `x-kubernetes-list-type` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The list is one value owned as a whole (`atomic`, the default).
    Atomic,
    /// The list is a set of scalars, each owned on its own (`set`).
    Set,
    /// The list holds maps identified by these key fields (`map` with `x-kubernetes-list-map-keys`).
    Map(Vec<String>),
}

/// Lookup of custom list types by path (field names from the root, list indices omitted).
pub type ListTypeLookup<'a> = &'a dyn Fn(&[&str]) -> Option<ListType>;

/// What the apply machinery knows of a kind's structure: the built-in list types, optionally
/// overridden by a lookup (e.g. built from a CRD's OpenAPI schema).
#[derive(Clone, Copy)]
pub struct Schema<'a> {
    kind: &'a str,
    list_types: Option<ListTypeLookup<'a>>,
}

impl std::fmt::Debug for Schema<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("kind", &self.kind)
            .field("list_types", &self.list_types.map(|_| "<lookup>"))
            .finish()
    }
}

impl<'a> Schema<'a> {
    /// The schema of `kind` ("Deployment", "Pod", a custom resource's kind, ...).
    pub fn for_kind(kind: &'a str) -> Self {
        Schema {
            kind,
            list_types: None,
        }
    }

    /// Lets `lookup` decide the type of any list it returns `Some` for.
    pub fn with_list_types(self, lookup: ListTypeLookup<'a>) -> Self {
        Schema {
            list_types: Some(lookup),
            ..self
        }
    }
}

/// One field that an apply would take from another manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The manager owning the field (`fieldManager` of its request).
    pub manager: String,
    /// How that manager got the field: `"Apply"` or `"Update"`.
    pub operation: String,
    /// The API version recorded in that manager's entry.
    pub api_version: String,
    /// The subresource that manager wrote through, if any.
    pub subresource: Option<String>,
    /// The field, as the real server prints it (`.spec.template.spec.containers[name="c"].image`).
    pub field: String,
}

impl Conflict {
    /// The message of the conflict's `StatusCause`, e.g. `conflict with "kubectl" using apps/v1`.
    pub fn message(&self) -> String {
        format!("conflict with {}", self.owner())
    }

    /// The owner as upstream's `printManager` writes it (the API version only for updaters).
    fn owner(&self) -> String {
        let mut owner = go_quote(&self.manager);
        if let Some(subresource) = &self.subresource {
            owner.push_str(" with subresource ");
            owner.push_str(&go_quote(subresource));
        }
        if self.operation == UPDATE {
            owner.push_str(" using ");
            owner.push_str(&self.api_version);
        }
        owner
    }

    /// The key upstream groups and sorts conflicts by (its JSON manager identifier).
    fn identifier(&self) -> String {
        manager_identifier(
            &self.manager,
            &self.operation,
            &self.api_version,
            self.subresource.as_deref(),
        )
    }
}

/// Errors of server-side apply.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apply would change fields other managers own and `force` was not set (HTTP 409,
    /// `details.causes[].reason` `FieldManagerConflict`).
    #[error("{}", conflict_message(.conflicts))]
    Conflict {
        /// Every conflicting field with its owner, grouped by owner.
        conflicts: Vec<Conflict>,
    },
    /// The applied configuration or the live object is not a JSON object.
    #[error("the {what} must be a json object, not {found}")]
    NotAnObject {
        /// Which input is wrong ("applied configuration" or "live object").
        what: &'static str,
        /// The JSON type found instead.
        found: &'static str,
    },
    /// The applied configuration cannot be typed: a list element lacks its key, a key repeats, ...
    #[error("failed to create typed patch object ({object}): {detail}")]
    InvalidAppliedObject {
        /// The object, as upstream prints it: `namespace/name; group/version, Kind=Kind`.
        object: String,
        /// What is wrong, with the field path of each problem.
        detail: String,
    },
}

impl Error {
    /// The HTTP status the real server answers with: 409 for conflicts, 400 for a body that is
    /// not an object, 500 for an untypable object (what 1.32 does).
    pub fn status_code(&self) -> u16 {
        match self {
            Error::Conflict { .. } => 409,
            Error::NotAnObject { .. } => 400,
            Error::InvalidAppliedObject { .. } => 500,
        }
    }

    /// For a conflict, one `(message, field)` per conflicting field, ready for
    /// `details.causes[{reason: "FieldManagerConflict", message, field}]`; `None` for other errors.
    pub fn conflicts(&self) -> Option<Vec<(String, String)>> {
        match self {
            Error::Conflict { conflicts } => Some(
                conflicts
                    .iter()
                    .map(|conflict| (conflict.message(), conflict.field.clone()))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The conflicts with their owners' details (empty for other errors).
    pub fn conflict_details(&self) -> &[Conflict] {
        match self {
            Error::Conflict { conflicts } => conflicts,
            _ => &[],
        }
    }
}

/// The message of upstream's `NewConflictError`.
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.owner(),
            only.field
        );
    }
    let mut by_owner: BTreeMap<String, (String, Vec<&str>)> = BTreeMap::new();
    for conflict in conflicts {
        by_owner
            .entry(conflict.identifier())
            .or_insert_with(|| (conflict.owner(), Vec::new()))
            .1
            .push(&conflict.field);
    }
    let mut lines = Vec::new();
    for (owner, fields) in by_owner.values() {
        lines.push(format!("conflicts with {owner}:"));
        lines.extend(fields.iter().map(|field| format!("- {field}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

const APPLY: &str = "Apply";
const UPDATE: &str = "Update";
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Fields the server never records as owned (upstream's `stripMetaManager`).
const STRIPPED: &[&[&str]] = &[
    &["apiVersion"],
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "creationTimestamp"],
    &["metadata", "selfLink"],
    &["metadata", "uid"],
    &["metadata", "clusterName"],
    &["metadata", "generation"],
    &["metadata", "managedFields"],
    &["metadata", "resourceVersion"],
];

/// Applies `applied` (a full configuration with apiVersion and kind) for `manager` on top of `live`
/// (`None` when the apply creates the object) and returns the resulting object with its
/// `metadata.managedFields` updated. `now` is the RFC 3339 time recorded in the entry.
///
/// A re-apply that changes nothing returns `live` unchanged (same managedFields, same times), so
/// the caller can skip the write. The result is neither defaulted nor validated, and for a
/// `/status` apply the caller keeps only the status of the result, as the registry would.
///
/// # Errors
///
/// [`Error::Conflict`] when the apply would change fields other managers own and `force` is
/// false; [`Error::InvalidAppliedObject`] when a list element of `applied` lacks its key or a key
/// repeats; [`Error::NotAnObject`] when `applied` or `live` is not an object.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    kind: &str,
    now: &str,
    subresource: Option<&str>,
) -> Result<Value, Error> {
    apply_with_schema(
        live,
        applied,
        manager,
        force,
        Schema::for_kind(kind),
        now,
        subresource,
        None,
    )
}

/// [`apply`] with list types given by a [`Schema`] (e.g. from a CRD), where the managers of
/// another `apiVersion` than the apply's are judged on the live and the merged object
/// converted to their version by `convert` (structured-merge-diff's `Updater.update`): their
/// conflicts name their version's fields, and they lose what changed there. Without
/// `convert`, or when it cannot convert, every manager compares as sent.
///
/// # Errors
///
/// As [`apply`].
#[allow(clippy::too_many_arguments)]
pub fn apply_with_schema(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    schema: Schema<'_>,
    now: &str,
    subresource: Option<&str>,
    convert: Option<&Convert<'_>>,
) -> Result<Value, Error> {
    if !applied.is_object() {
        return Err(Error::NotAnObject {
            what: "applied configuration",
            found: json_type(applied),
        });
    }
    let walker = Walker { schema };
    let mut applied = applied.clone();
    take_managed_fields(&mut applied);
    let problems = walker.validate(&applied);
    if !problems.is_empty() {
        let detail = match problems.as_slice() {
            [only] => only.clone(),
            many => format!("errors:\n  {}", many.join("\n  ")),
        };
        return Err(Error::InvalidAppliedObject {
            object: describe_object(&applied),
            detail,
        });
    }

    let (live_object, mut entries) = match live {
        None => (Value::Object(Map::new()), Vec::new()),
        Some(value @ Value::Object(_)) => {
            let mut object = value.clone();
            let entries = take_managed_fields(&mut object);
            (object, entries)
        }
        Some(other) => {
            return Err(Error::NotAnObject {
                what: "live object",
                found: json_type(other),
            });
        }
    };
    let api_version = api_version_of(&applied)
        .or_else(|| api_version_of(&live_object))
        .unwrap_or_default()
        .to_owned();
    if live.is_some() && entries.is_empty() {
        let set = strip(walker.field_set(&live_object));
        if !set.is_empty() {
            entries.push(Entry {
                manager: BEFORE_FIRST_APPLY.to_owned(),
                operation: UPDATE.to_owned(),
                api_version: api_version.clone(),
                time: None,
                subresource: None,
                set,
            });
        }
    }
    let entries_before = entries.clone();

    let merged = walker.merge(&live_object, &applied);
    let applied_set = walker.field_set(&applied);
    let mine = entries
        .iter()
        .position(|entry| entry.is(manager, APPLY, &api_version, subresource));
    let result = match mine.and_then(|index| entries.get(index)) {
        Some(previous) => {
            let mut owned = applied_set.clone();
            for (index, entry) in entries.iter().enumerate() {
                if Some(index) != mine {
                    owned.union_with(&entry.set);
                }
            }
            for path in STRIPPED {
                owned.insert(&field_path(path));
            }
            walker.prune(merged, &previous.set, &owned)
        }
        None => merged,
    };

    let comparison = walker.compare(&live_object, &result);
    let mut changed = comparison.modified.clone();
    changed.union_with(&comparison.added);
    let others: Vec<&Entry> = entries
        .iter()
        .enumerate()
        .filter(|(index, _)| Some(*index) != mine)
        .map(|(_, entry)| entry)
        .collect();
    let by_version = walker.changes_in_versions(
        &live_object,
        &result,
        &api_version,
        others.into_iter(),
        convert,
    );
    let changes_of = |entry: &Entry| {
        by_version
            .get(&entry.api_version)
            .map_or((&changed, &comparison.removed), |(c, r)| (c, r))
    };
    let mut conflicts = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if Some(index) == mine {
            continue;
        }
        let (changed, _) = changes_of(entry);
        for path in entry.set.intersection(changed).member_paths() {
            conflicts.push(Conflict {
                manager: entry.manager.clone(),
                operation: entry.operation.clone(),
                api_version: entry.api_version.clone(),
                subresource: entry.subresource.clone(),
                field: path_string(&path),
            });
        }
    }
    if !conflicts.is_empty() && !force {
        conflicts.sort_by_key(Conflict::identifier);
        return Err(Error::Conflict { conflicts });
    }
    for (index, entry) in entries.iter_mut().enumerate() {
        if Some(index) != mine {
            let (changed, removed) = changes_of(entry);
            entry.set = entry.set.difference(changed).difference(removed);
        }
    }

    let object_changed = without_empty_metadata(&result) != without_empty_metadata(&live_object);
    let stored = strip(applied_set);
    match mine.and_then(|index| entries.get_mut(index)) {
        Some(entry) => {
            let entry_changed = entry.set != stored || entry.api_version != api_version;
            entry.set = stored;
            entry.api_version = api_version;
            if object_changed || entry_changed {
                entry.time = Some(now.to_owned());
            }
        }
        None => entries.push(Entry {
            manager: manager.to_owned(),
            operation: APPLY.to_owned(),
            api_version,
            time: Some(now.to_owned()),
            subresource: subresource.map(str::to_owned),
            set: stored,
        }),
    }
    entries.retain(|entry| !entry.set.is_empty());

    if let Some(live) = live
        && !object_changed
        && entries == entries_before
    {
        return Ok(live.clone());
    }
    let mut result = result;
    set_managed_fields(&mut result, &entries);
    Ok(result)
}

/// Records an ordinary write (POST, PUT, or a PATCH that is not an apply) by `manager`: every field
/// whose value differs between `old` and `new` becomes owned by `manager` (operation `Update`) and
/// is taken away from the other managers. `new.metadata.managedFields` is updated in place.
///
/// For a create, pass `Value::Null` (or `{}`) as `old`. `managedFields` sent in `new` replace the
/// stored ones (as upstream allows), unless they are empty or the write is to a subresource.
/// Server-controlled metadata (`uid`, `resourceVersion`, `generation`, `creationTimestamp`, ...)
/// is never recorded, whatever changed. Writes the real server does outside the field manager
/// (marking an object deleted, removing it) should not be recorded.
pub fn record_update(
    old: &Value,
    new: &mut Value,
    manager: &str,
    kind: &str,
    now: &str,
    subresource: Option<&str>,
) {
    record_update_with_schema(old, new, manager, Schema::for_kind(kind), now, subresource);
}

/// [`record_update`] with list types given by a [`Schema`] (e.g. from a CRD).
pub fn record_update_with_schema(
    old: &Value,
    new: &mut Value,
    manager: &str,
    schema: Schema<'_>,
    now: &str,
    subresource: Option<&str>,
) {
    record_update_converting(old, new, manager, schema, now, subresource, None);
}

/// Converts an object to an `apiVersion` (`group/version`), or `None` when it cannot.
pub type Convert<'a> = dyn Fn(&Value, &str) -> Option<Value> + 'a;

/// [`record_update_with_schema`] where the managers of another `apiVersion` than the
/// update's lose what changed between the old and the new object converted to their version
/// by `convert` (structured-merge-diff's `Updater.update`), and the others what changed as
/// sent. Without `convert`, or when it cannot convert, every manager compares as sent.
pub fn record_update_converting(
    old: &Value,
    new: &mut Value,
    manager: &str,
    schema: Schema<'_>,
    now: &str,
    subresource: Option<&str>,
    convert: Option<&Convert<'_>>,
) {
    if !new.is_object() {
        return;
    }
    let walker = Walker { schema };
    let mut old_object = match old {
        Value::Object(_) => old.clone(),
        _ => Value::Object(Map::new()),
    };
    let old_entries = take_managed_fields(&mut old_object);
    let mut new_object = new.clone();
    let sent_entries = take_managed_fields(&mut new_object);
    let mut entries = if subresource.is_none() && !sent_entries.is_empty() {
        sent_entries
    } else {
        old_entries
    };

    let comparison = walker.compare(&old_object, &new_object);
    let mut changed = comparison.modified;
    changed.union_with(&comparison.added);
    let changed = strip(changed);
    let removed = strip(comparison.removed);
    let api_version = api_version_of(&new_object)
        .or_else(|| api_version_of(&old_object))
        .unwrap_or_default()
        .to_owned();

    let by_version = walker.changes_in_versions(
        &old_object,
        &new_object,
        &api_version,
        entries.iter(),
        convert,
    );
    for entry in &mut entries {
        let (changed, removed) = by_version
            .get(&entry.api_version)
            .map_or((&changed, &removed), |(c, r)| (c, r));
        entry.set = entry.set.difference(changed).difference(removed);
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|entry| entry.is(manager, UPDATE, &api_version, subresource))
        {
            Some(entry) => {
                entry.set.union_with(&changed);
                entry.time = Some(now.to_owned());
            }
            None => entries.push(Entry {
                manager: manager.to_owned(),
                operation: UPDATE.to_owned(),
                api_version,
                time: Some(now.to_owned()),
                subresource: subresource.map(str::to_owned),
                set: changed,
            }),
        }
    }
    entries.retain(|entry| !entry.set.is_empty());
    set_managed_fields(new, &entries);
}

/// Removes from `object.metadata.managedFields` every entry of another `apiVersion` than
/// `api_version`, as structured-merge-diff's `Updater` drops a manager whose version the
/// resource's converter does not know (`IsMissingVersionError`): an Event written through
/// core `v1` loses its `events.k8s.io/v1` managers, and the other way round.
pub fn drop_managers_of_other_versions(object: &mut Value, api_version: &str) {
    let has_entries = object["metadata"]
        .get("managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| !entries.is_empty());
    if !has_entries {
        return;
    }
    let mut entries = take_managed_fields(object);
    entries.retain(|entry| entry.api_version == api_version);
    set_managed_fields(object, &entries);
}

/// A set of field paths, stored as a tree of FieldsV1 keys (`f:name`, `k:{"name":"c"}`, `v:"x"`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct FieldSet {
    /// Whether the path leading here is itself in the set (the `.` of FieldsV1).
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Adds `path`; the root (an empty path) is never a member.
    fn insert(&mut self, path: &[String]) {
        if let Some((first, rest)) = path.split_first() {
            let child = self.children.entry(first.clone()).or_default();
            if rest.is_empty() {
                child.member = true;
            } else {
                child.insert(rest);
            }
        }
    }

    /// Removes `path` as a member (its descendants stay).
    fn remove(&mut self, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        if let Some(child) = self.children.get_mut(first) {
            if rest.is_empty() {
                child.member = false;
            } else {
                child.remove(rest);
            }
            if child.is_empty() {
                self.children.remove(first);
            }
        }
    }

    fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (key, child) in &other.children {
            self.children
                .entry(key.clone())
                .or_default()
                .union_with(child);
        }
    }

    fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (key, child) in &self.children {
            let rest = match other.children.get(key) {
                Some(other_child) => child.difference(other_child),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(key.clone(), rest);
            }
        }
        out
    }

    fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (key, child) in &self.children {
            if let Some(other_child) = other.children.get(key) {
                let common = child.intersection(other_child);
                if !common.is_empty() {
                    out.children.insert(key.clone(), common);
                }
            }
        }
        out
    }

    /// The set plus every field (not list item) that has a member below it, as upstream's
    /// `EnsureNamedFieldsAreMembers`: owning a field inside a list item does not own the item.
    fn with_field_ancestors(&self) -> FieldSet {
        let mut out = FieldSet {
            member: self.member,
            children: BTreeMap::new(),
        };
        for (key, child) in &self.children {
            let mut child = child.with_field_ancestors();
            if key.starts_with("f:") && !child.children.is_empty() {
                child.member = true;
            }
            out.children.insert(key.clone(), child);
        }
        out
    }

    /// The member paths in upstream's iteration order: a node's members, then its subtrees.
    fn member_paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for (key, child) in &self.children {
            if child.member {
                let mut path = prefix.clone();
                path.push(key.clone());
                out.push(path);
            }
        }
        for (key, child) in &self.children {
            if !child.children.is_empty() {
                prefix.push(key.clone());
                child.collect_paths(prefix, out);
                prefix.pop();
            }
        }
    }

    fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Value::Object(map) = value {
            for (key, child) in map {
                if key == "." {
                    continue;
                }
                let mut node = FieldSet::from_fields_v1(child);
                let is_leaf = child.as_object().is_none_or(Map::is_empty);
                let has_marker = child
                    .as_object()
                    .is_some_and(|child| child.contains_key("."));
                node.member = is_leaf || has_marker;
                if !node.is_empty() {
                    set.children.insert(key.clone(), node);
                }
            }
        }
        set
    }

    fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        for (key, child) in &self.children {
            let mut encoded = match child.to_fields_v1() {
                Value::Object(encoded) => encoded,
                _ => Map::new(),
            };
            if child.member && !child.children.is_empty() {
                encoded.insert(".".to_owned(), Value::Object(Map::new()));
            }
            map.insert(key.clone(), Value::Object(encoded));
        }
        Value::Object(map)
    }
}

fn field_path(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| format!("f:{name}")).collect()
}

fn strip(mut set: FieldSet) -> FieldSet {
    for path in STRIPPED {
        set.remove(&field_path(path));
    }
    set
}

/// Prints a FieldsV1 path the way upstream's `fieldpath.Path.String` does.
fn path_string(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(name) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(key) = element.strip_prefix("k:") {
            match serde_json::from_str::<Map<String, Value>>(key) {
                Ok(fields) => {
                    let fields: Vec<String> = fields
                        .iter()
                        .map(|(name, value)| format!("{name}={value}"))
                        .collect();
                    out.push('[');
                    out.push_str(&fields.join(","));
                    out.push(']');
                }
                Err(_) => out.push_str(element),
            }
        } else if let Some(value) = element.strip_prefix("v:") {
            out.push_str("[=");
            out.push_str(value);
            out.push(']');
        } else if let Some(index) = element.strip_prefix("i:") {
            out.push('[');
            out.push_str(index);
            out.push(']');
        } else {
            out.push_str(element);
        }
    }
    out
}

/// How a list is keyed, with defaults for key fields the server defaults (ports' protocol).
#[derive(Clone, Debug, PartialEq)]
enum Keying {
    Atomic,
    Set,
    Map(Vec<(String, Option<Value>)>),
}

impl Keying {
    fn from_list_type(list_type: ListType) -> Keying {
        match list_type {
            ListType::Atomic => Keying::Atomic,
            ListType::Set => Keying::Set,
            ListType::Map(keys) => Keying::Map(keys.into_iter().map(|key| (key, None)).collect()),
        }
    }
}

/// A list's items by key; `None` if some item cannot be keyed (the list is then handled as atomic).
type KeyedItems<'v> = Vec<(String, &'v Value)>;

/// Walks objects of one schema; `names` holds field names from the root, list indices omitted.
struct Walker<'a> {
    schema: Schema<'a>,
}

impl Walker<'_> {
    fn names(names: &[String]) -> Vec<&str> {
        names.iter().map(String::as_str).collect()
    }

    fn keying(&self, names: &[String]) -> Keying {
        let path = Self::names(names);
        if let Some(lookup) = self.schema.list_types
            && let Some(list_type) = lookup(&path)
        {
            return Keying::from_list_type(list_type);
        }
        match path.as_slice() {
            ["metadata", "finalizers"] => return Keying::Set,
            ["metadata", "ownerReferences"] => return Keying::Map(vec![("uid".to_owned(), None)]),
            _ => {}
        }
        if let Some(list_type) = built_in_list_type(self.schema.kind, &path) {
            return Keying::from_list_type(list_type);
        }
        let tcp = || Some(Value::String("TCP".to_owned()));
        match list_strategy(self.schema.kind, &path) {
            ListStrategy::Replace => Keying::Atomic,
            ListStrategy::MergePrimitives => Keying::Set,
            ListStrategy::MergeByKey(key) => match (path.last(), key) {
                (Some(&"ports"), "containerPort" | "port") => {
                    Keying::Map(vec![(key.to_owned(), None), ("protocol".to_owned(), tcp())])
                }
                (Some(&"topologySpreadConstraints"), _) => Keying::Map(vec![
                    (key.to_owned(), None),
                    ("whenUnsatisfiable".to_owned(), None),
                ]),
                _ => Keying::Map(vec![(key.to_owned(), None)]),
            },
        }
    }

    /// Maps owned as a whole: `structType=atomic` structs (label selectors, object references,
    /// the items of `metadata.ownerReferences`, ...) and `mapType=atomic` maps, as the OpenAPI
    /// schemas of the built-in kinds say. A list's items are looked up by the list's path.
    fn is_atomic_map(&self, names: &[String]) -> bool {
        let path = Self::names(names);
        let kind = self.schema.kind;
        // Every kind's ObjectMeta, a custom resource's included.
        if path.as_slice() == ["metadata", "ownerReferences"] {
            return true;
        }
        is_built_in(kind) && is_atomic_struct(kind, &path)
    }

    /// The FieldsV1 key of a list item, or why it has none.
    fn item_key(item: &Value, keying: &Keying) -> Result<String, String> {
        match keying {
            Keying::Atomic => Err("atomic list".to_owned()),
            Keying::Set => match item {
                Value::Object(_) => {
                    Err("associative list without keys has an element that's a map type".to_owned())
                }
                Value::Array(_) => Err(
                    "associative list without keys has an element that's a list type".to_owned(),
                ),
                scalar => Ok(format!("v:{scalar}")),
            },
            Keying::Map(keys) => {
                let map = match item {
                    Value::Object(map) => map,
                    Value::Null => {
                        return Err(
                            "associative list with keys may not have a null element".to_owned()
                        );
                    }
                    _ => {
                        return Err(
                            "associative list with keys may not have non-map elements".to_owned()
                        );
                    }
                };
                let mut fields = Map::new();
                for (name, default) in keys {
                    let given = map.get(name).filter(|value| !value.is_null());
                    match given.or(default.as_ref()) {
                        Some(Value::Object(_) | Value::Array(_)) => {
                            return Err(format!(
                                "associative list with keys has an element whose key field {} is not a scalar",
                                go_quote(name)
                            ));
                        }
                        Some(value) => {
                            fields.insert(name.clone(), value.clone());
                        }
                        None => {
                            return Err(format!(
                                "associative list with keys has an element that omits key field {} (and doesn't have default value)",
                                go_quote(name)
                            ));
                        }
                    }
                }
                Ok(format!("k:{}", Value::Object(fields)))
            }
        }
    }

    /// Keys a list (first occurrence of a key wins); `None` if it is atomic or some item has no key.
    fn keyed<'v>(&self, items: &'v [Value], names: &[String]) -> Option<(Keying, KeyedItems<'v>)> {
        let keying = self.keying(names);
        if keying == Keying::Atomic {
            return None;
        }
        let mut seen = BTreeSet::new();
        let mut keyed = Vec::with_capacity(items.len());
        for item in items {
            let key = Self::item_key(item, &keying).ok()?;
            if seen.insert(key.clone()) {
                keyed.push((key, item));
            }
        }
        Some((keying, keyed))
    }

    /// Problems that make an applied configuration untypable, each prefixed with its field path.
    fn validate(&self, object: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        self.validate_value(object, &mut Vec::new(), &mut Vec::new(), &mut problems);
        problems
    }

    fn validate_value(
        &self,
        value: &Value,
        names: &mut Vec<String>,
        path: &mut Vec<String>,
        problems: &mut Vec<String>,
    ) {
        match value {
            Value::Object(map) if !self.is_atomic_map(names) => {
                for (key, child) in map {
                    names.push(key.clone());
                    path.push(format!("f:{key}"));
                    self.validate_value(child, names, path, problems);
                    path.pop();
                    names.pop();
                }
            }
            Value::Array(items) => {
                let keying = self.keying(names);
                if keying == Keying::Atomic {
                    return;
                }
                let mut seen = BTreeSet::new();
                for (index, item) in items.iter().enumerate() {
                    match Self::item_key(item, &keying) {
                        Err(reason) => problems
                            .push(format!("{}: element {index}: {reason}", path_string(path))),
                        Ok(key) => {
                            if !seen.insert(key.clone()) {
                                let shown = path_string(std::slice::from_ref(&key));
                                problems.push(format!(
                                    "{}: duplicate entries for key {shown}",
                                    path_string(path)
                                ));
                            } else if item.is_object() {
                                path.push(key);
                                self.validate_value(item, names, path, problems);
                                path.pop();
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The fields an object sets, as upstream's `ToFieldSet`: leaves, list items, atomic values and empty containers.
    fn field_set(&self, object: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        self.collect(
            object,
            &mut Vec::new(),
            &mut Vec::new(),
            &mut set,
            Nodes::Leaves,
        );
        set
    }

    /// Adds the fields of `value` (found at `path`) to `set`; `nodes` says which container nodes count.
    fn collect(
        &self,
        value: &Value,
        names: &mut Vec<String>,
        path: &mut Vec<String>,
        set: &mut FieldSet,
        nodes: Nodes,
    ) {
        match value {
            Value::Object(map) if !map.is_empty() && !self.is_atomic_map(names) => {
                for (key, child) in map {
                    names.push(key.clone());
                    path.push(format!("f:{key}"));
                    self.collect(child, names, path, set, nodes);
                    path.pop();
                    names.pop();
                }
                if nodes == Nodes::All {
                    set.insert(path);
                }
            }
            Value::Array(items) if !items.is_empty() => match self.keyed(items, names) {
                Some((keying, keyed)) => {
                    for (key, item) in keyed {
                        path.push(key);
                        if matches!(keying, Keying::Map(_)) {
                            self.collect(item, names, path, set, nodes);
                        }
                        set.insert(path);
                        path.pop();
                    }
                    if nodes == Nodes::All {
                        set.insert(path);
                    }
                }
                None => set.insert(path),
            },
            _ => set.insert(path),
        }
    }

    /// What changed from `old` to `new`, as upstream's `TypedValue.Compare`.
    /// The fields changed and removed between `old` and `new` (of `api_version`) as the
    /// managers of each other version of `entries` see them, converted by `convert`: the
    /// versions it cannot convert to are left out.
    fn changes_in_versions<'e>(
        &self,
        old: &Value,
        new: &Value,
        api_version: &str,
        entries: impl Iterator<Item = &'e Entry>,
        convert: Option<&Convert<'_>>,
    ) -> BTreeMap<String, (FieldSet, FieldSet)> {
        let mut by_version = BTreeMap::new();
        let Some(convert) = convert else {
            return by_version;
        };
        for entry in entries {
            if entry.api_version == api_version || by_version.contains_key(&entry.api_version) {
                continue;
            }
            let (Some(mut old_there), Some(mut new_there)) = (
                convert(old, &entry.api_version),
                convert(new, &entry.api_version),
            ) else {
                continue;
            };
            take_managed_fields(&mut old_there);
            take_managed_fields(&mut new_there);
            let there = self.compare(&old_there, &new_there);
            let mut changed_there = there.modified;
            changed_there.union_with(&there.added);
            by_version.insert(
                entry.api_version.clone(),
                (strip(changed_there), strip(there.removed)),
            );
        }
        by_version
    }

    fn compare(&self, old: &Value, new: &Value) -> Comparison {
        let mut out = Comparison::default();
        self.compare_values(
            Some(old),
            Some(new),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut out,
        );
        out
    }

    fn compare_values(
        &self,
        old: Option<&Value>,
        new: Option<&Value>,
        names: &mut Vec<String>,
        path: &mut Vec<String>,
        out: &mut Comparison,
    ) {
        match (old, new) {
            (None, None) => {}
            (None, Some(new)) => self.collect_added(new, names, path, &mut out.added),
            (Some(old), None) => self.collect(old, names, path, &mut out.removed, Nodes::All),
            (Some(old), Some(new)) => self.compare_present(old, new, names, path, out),
        }
    }

    fn compare_present(
        &self,
        old: &Value,
        new: &Value,
        names: &mut Vec<String>,
        path: &mut Vec<String>,
        out: &mut Comparison,
    ) {
        if old == new {
            return;
        }
        let empty = Value::Object(Map::new());
        let no_items = Value::Array(Vec::new());
        // `null` stands for an empty container of the other side's shape.
        let (old, new) = match (old, new) {
            (Value::Null, Value::Object(_)) => (&empty, new),
            (Value::Object(_), Value::Null) => (old, &empty),
            (Value::Null, Value::Array(_)) => (&no_items, new),
            (Value::Array(_), Value::Null) => (old, &no_items),
            _ => (old, new),
        };
        let is_empty = |value: &Value| match value {
            Value::Object(map) => map.is_empty(),
            Value::Array(items) => items.is_empty(),
            _ => false,
        };
        if is_empty(old) && is_empty(new) {
            out.modified.insert(path);
            return;
        }
        match (old, new) {
            (Value::Object(old_map), Value::Object(new_map)) if !self.is_atomic_map(names) => {
                let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
                for key in keys {
                    names.push(key.clone());
                    path.push(format!("f:{key}"));
                    self.compare_values(old_map.get(key), new_map.get(key), names, path, out);
                    path.pop();
                    names.pop();
                }
            }
            (Value::Array(old_items), Value::Array(new_items)) => {
                match (self.keyed(old_items, names), self.keyed(new_items, names)) {
                    (Some((keying, old_keyed)), Some((_, new_keyed))) => {
                        let old_by_key: BTreeMap<&str, &Value> = old_keyed
                            .iter()
                            .map(|(key, item)| (key.as_str(), *item))
                            .collect();
                        let new_by_key: BTreeMap<&str, &Value> = new_keyed
                            .iter()
                            .map(|(key, item)| (key.as_str(), *item))
                            .collect();
                        let keys: BTreeSet<&str> = old_by_key
                            .keys()
                            .chain(new_by_key.keys())
                            .copied()
                            .collect();
                        for key in keys {
                            path.push(key.to_owned());
                            let (old_item, new_item) =
                                (old_by_key.get(key).copied(), new_by_key.get(key).copied());
                            match (old_item, new_item) {
                                (Some(old_item), Some(new_item))
                                    if matches!(keying, Keying::Map(_)) =>
                                {
                                    self.compare_present(old_item, new_item, names, path, out);
                                }
                                (Some(_), Some(_)) => {}
                                (None, Some(new_item)) => self.collect_item(
                                    new_item,
                                    &keying,
                                    names,
                                    path,
                                    &mut out.added,
                                ),
                                (Some(old_item), None) => {
                                    self.collect_item(
                                        old_item,
                                        &keying,
                                        names,
                                        path,
                                        &mut out.removed,
                                    );
                                }
                                (None, None) => {}
                            }
                            path.pop();
                        }
                    }
                    _ => out.modified.insert(path),
                }
            }
            _ => {
                // A leaf that changed, or a value that changed shape: the old subtree is gone, the new one is added.
                out.modified.insert(path);
                let mut gone = FieldSet::default();
                self.collect(old, names, path, &mut gone, Nodes::All);
                gone.remove(path);
                out.removed.union_with(&gone);
                let mut added = FieldSet::default();
                self.collect(new, names, path, &mut added, Nodes::All);
                added.remove(path);
                out.added.union_with(&added);
            }
        }
    }

    /// Adds a list item that exists on one side only: the item itself and everything in it.
    fn collect_item(
        &self,
        item: &Value,
        keying: &Keying,
        names: &mut Vec<String>,
        path: &mut Vec<String>,
        set: &mut FieldSet,
    ) {
        if matches!(keying, Keying::Map(_)) {
            self.collect(item, names, path, set, Nodes::All);
        }
        set.insert(path);
    }

    /// Adds a field of `new` that the old object lacks, below a parent both have, as upstream's
    /// comparison sees it: the field and every map and list in it are added (and get their `.`),
    /// unless the Go type always serializes the field, in which case the old object has it as
    /// a zero value and only what is inside it is added.
    fn collect_added(
        &self,
        value: &Value,
        names: &mut Vec<String>,
        path: &mut Vec<String>,
        set: &mut FieldSet,
    ) {
        if !is_always_serialized(self.schema.kind, &Self::names(names)) {
            self.collect(value, names, path, set, Nodes::All);
            return;
        }
        match value {
            // The zero value is an empty struct or a null list, which this equals.
            Value::Object(map) if map.is_empty() => {}
            Value::Object(map) if !self.is_atomic_map(names) => {
                for (key, child) in map {
                    names.push(key.clone());
                    path.push(format!("f:{key}"));
                    self.collect_added(child, names, path, set);
                    path.pop();
                    names.pop();
                }
            }
            Value::Array(items) => match self.keyed(items, names) {
                Some((keying, keyed)) => {
                    for (key, item) in keyed {
                        path.push(key);
                        self.collect_item(item, &keying, names, path, set);
                        path.pop();
                    }
                }
                None => set.insert(path),
            },
            _ => set.insert(path),
        }
    }

    /// `live` with `applied` merged in: applied values win, keyed lists merge by key, atomic values are replaced.
    fn merge(&self, live: &Value, applied: &Value) -> Value {
        self.merge_values(live, applied, &mut Vec::new())
    }

    fn merge_values(&self, live: &Value, applied: &Value, names: &mut Vec<String>) -> Value {
        match (live, applied) {
            (Value::Object(live_map), Value::Object(applied_map)) if !self.is_atomic_map(names) => {
                let mut out = live_map.clone();
                for (key, applied_value) in applied_map {
                    if applied_value.is_null() {
                        out.remove(key);
                        continue;
                    }
                    names.push(key.clone());
                    let merged = match live_map.get(key) {
                        Some(live_value) => self.merge_values(live_value, applied_value, names),
                        None => without_nulls(applied_value),
                    };
                    names.pop();
                    out.insert(key.clone(), merged);
                }
                Value::Object(out)
            }
            (Value::Array(live_items), Value::Array(applied_items)) => {
                match (
                    self.keyed(live_items, names),
                    self.keyed(applied_items, names),
                ) {
                    (Some((keying, live_keyed)), Some((_, applied_keyed))) => {
                        Value::Array(self.merge_lists(&keying, &live_keyed, &applied_keyed, names))
                    }
                    _ => without_nulls(applied),
                }
            }
            _ => without_nulls(applied),
        }
    }

    /// Merges keyed lists in upstream's order: live-only items stay where they were, applied items
    /// follow the applied order, and a new applied item lands right after the applied items before it.
    fn merge_lists(
        &self,
        keying: &Keying,
        live: &KeyedItems<'_>,
        applied: &KeyedItems<'_>,
        names: &mut Vec<String>,
    ) -> Vec<Value> {
        let live_index: BTreeMap<&str, &Value> = live
            .iter()
            .map(|(key, item)| (key.as_str(), *item))
            .collect();
        let applied_keys: BTreeSet<&str> = applied.iter().map(|(key, _)| key.as_str()).collect();
        let shared: Vec<&str> = applied
            .iter()
            .map(|(key, _)| key.as_str())
            .filter(|key| live_index.contains_key(key))
            .collect();
        let mut next_shared = 0;
        let merge_item = |live_item: Option<&Value>,
                          applied_item: &Value,
                          names: &mut Vec<String>| match (
            keying, live_item,
        ) {
            (Keying::Map(_), Some(live_item)) => self.merge_values(live_item, applied_item, names),
            _ => without_nulls(applied_item),
        };
        let mut out = Vec::with_capacity(live.len() + applied.len());
        let (mut in_live, mut in_applied) = (0, 0);
        while in_live < live.len() || in_applied < applied.len() {
            let live_entry = live.get(in_live);
            let applied_entry = applied.get(in_applied);
            if let (Some((live_key, live_item)), Some((applied_key, applied_item))) =
                (live_entry, applied_entry)
            {
                if live_key == applied_key {
                    out.push(merge_item(Some(*live_item), applied_item, names));
                    if shared.get(next_shared) == Some(&live_key.as_str()) {
                        next_shared += 1;
                    }
                    in_live += 1;
                    in_applied += 1;
                    continue;
                }
                if applied_keys.contains(live_key.as_str())
                    && shared.get(next_shared) != Some(&live_key.as_str())
                {
                    in_live += 1;
                    continue;
                }
            }
            if let Some((live_key, live_item)) = live_entry
                && !applied_keys.contains(live_key.as_str())
            {
                out.push((*live_item).clone());
                in_live += 1;
                continue;
            }
            if let Some((applied_key, applied_item)) = applied_entry {
                let live_item = live_index.get(applied_key.as_str()).copied();
                out.push(merge_item(live_item, applied_item, names));
                if shared.get(next_shared) == Some(&applied_key.as_str()) {
                    next_shared += 1;
                }
                in_applied += 1;
                continue;
            }
            // A live item the applied list already placed.
            in_live += 1;
        }
        out
    }

    /// Removes what `previous` (the manager's last applied set) holds and nobody in `owned` does.
    fn prune(&self, merged: Value, previous: &FieldSet, owned: &FieldSet) -> Value {
        let mut to_remove = previous
            .with_field_ancestors()
            .difference(&owned.with_field_ancestors());
        to_remove.member = false;
        let mut pruned = merged;
        if !to_remove.is_empty() {
            self.remove_fields(&mut pruned, &to_remove, &mut Vec::new());
        }
        pruned
    }

    fn remove_fields(&self, value: &mut Value, set: &FieldSet, names: &mut Vec<String>) {
        match value {
            // An atomic map (a list's atomic items too) is removed whole or not at all.
            Value::Object(_) if self.is_atomic_map(names) => {}
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for key in keys {
                    let Some(child_set) = set.children.get(&format!("f:{key}")) else {
                        continue;
                    };
                    if child_set.member {
                        map.remove(&key);
                        continue;
                    }
                    if let Some(child) = map.get_mut(&key) {
                        names.push(key.clone());
                        let emptied = remove_then_check_emptied(child, |child| {
                            self.remove_fields(child, child_set, names)
                        });
                        names.pop();
                        if emptied {
                            map.remove(&key);
                        }
                    }
                }
            }
            Value::Array(items) => {
                let keying = self.keying(names);
                if keying == Keying::Atomic {
                    return;
                }
                let mut kept = Vec::with_capacity(items.len());
                for mut item in std::mem::take(items) {
                    let child_set = Self::item_key(&item, &keying)
                        .ok()
                        .and_then(|key| set.children.get(&key));
                    match child_set {
                        Some(child_set) if child_set.member => {} // the item is removed
                        Some(child_set) if matches!(keying, Keying::Map(_)) => {
                            self.remove_fields(&mut item, child_set, names);
                            kept.push(item);
                        }
                        _ => kept.push(item),
                    }
                }
                *items = kept;
            }
            _ => {}
        }
    }
}

/// Runs `remove` on a container and says whether it went from non-empty to empty.
fn remove_then_check_emptied(value: &mut Value, remove: impl FnOnce(&mut Value)) -> bool {
    let is_empty = |value: &Value| match value {
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    };
    let was_empty = is_empty(value);
    remove(value);
    !was_empty && is_empty(value)
}

/// Whether `kind` is a built-in kind, a Go type (one whose lists the strategic-merge tables
/// know, or one of the create-only kinds of subresources and reviews), not a custom resource.
fn is_built_in(kind: &str) -> bool {
    list_strategy(kind, &["metadata", "finalizers"]) != ListStrategy::Replace
        || matches!(
            kind,
            "TokenRequest"
                | "TokenReview"
                | "Scale"
                | "Eviction"
                | "SelfSubjectAccessReview"
                | "SubjectAccessReview"
                | "LocalSubjectAccessReview"
                | "SelfSubjectReview"
        )
}

/// The part of `path` inside the kind's pod spec (`[]` for the pod spec itself), if it is there.
fn pod_spec_rest<'p>(kind: &str, path: &'p [&'p str]) -> Option<&'p [&'p str]> {
    let prefix: &[&str] = match kind {
        "Pod" => &["spec"],
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => &["spec", "template", "spec"],
        "PodTemplate" => &["template", "spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => return None,
    };
    path.strip_prefix(prefix)
}

/// The `structType=atomic` structs and `mapType=atomic` maps of the built-in kinds' OpenAPI
/// schemas (ObjectMeta's owner references, label and node selectors, object references, the
/// key selectors of environment variables and volumes, role references), by path.
fn is_atomic_struct(kind: &str, path: &[&str]) -> bool {
    if matches!(path, [.., "metadata", "ownerReferences"]) {
        return true;
    }
    match (kind, path) {
        (_, ["spec", "selector"]) => matches!(
            kind,
            "Deployment"
                | "ReplicaSet"
                | "StatefulSet"
                | "DaemonSet"
                | "Job"
                | "PodDisruptionBudget"
                | "Service"
                | "ReplicationController"
        ),
        ("NetworkPolicy", ["spec", "podSelector"])
        | ("ControllerRevision", ["data"])
        | ("ValidatingAdmissionPolicy", ["spec", "matchConstraints"])
        | ("ValidatingAdmissionPolicyBinding", ["spec", "matchResources"])
        | ("Event", ["involvedObject" | "related" | "regarding"])
        | ("RoleBinding" | "ClusterRoleBinding", ["roleRef" | "subjects"])
        | ("ClusterRole", ["aggregationRule", "clusterRoleSelectors"])
        | ("ServiceAccount", ["secrets" | "imagePullSecrets"]) => true,
        _ => pod_spec_rest(kind, path).is_some_and(|rest| {
            matches!(
                rest,
                ["nodeSelector" | "imagePullSecrets"]
                    | [
                        _,
                        "env",
                        "valueFrom",
                        "configMapKeyRef"
                            | "secretKeyRef"
                            | "fieldRef"
                            | "resourceFieldRef"
                            | "fileKeyRef"
                    ]
                    | [
                        "volumes",
                        ..,
                        "fieldRef" | "resourceFieldRef" | "labelSelector"
                    ]
                    | [
                        "volumes",
                        "cephfs"
                            | "cinder"
                            | "flexVolume"
                            | "iscsi"
                            | "rbd"
                            | "scaleIO"
                            | "storageos",
                        "secretRef"
                    ]
                    | ["volumes", "csi", "nodePublishSecretRef"]
                    | [
                        "volumes",
                        "ephemeral",
                        "volumeClaimTemplate",
                        "spec",
                        "selector" | "dataSource"
                    ]
                    | [
                        "affinity",
                        ..,
                        "labelSelector" | "namespaceSelector" | "preference"
                    ]
                    | [
                        "affinity",
                        "nodeAffinity",
                        "requiredDuringSchedulingIgnoredDuringExecution"
                    ]
                    | ["topologySpreadConstraints", "labelSelector"]
            )
        }),
    }
}

/// List types of the built-in kinds' OpenAPI schemas that their strategic-merge keys do not
/// give (server-side apply follows `x-kubernetes-list-type`, not `patchMergeKey`).
fn built_in_list_type(kind: &str, path: &[&str]) -> Option<ListType> {
    if !is_built_in(kind) {
        return None;
    }
    let by_name = || Some(ListType::Map(vec!["name".to_owned()]));
    match (kind, path) {
        // The ObjectMeta of templates, an ephemeral volume's claim template's included.
        (_, [.., "metadata", "finalizers"]) => Some(ListType::Set),
        (_, [.., "metadata", "ownerReferences"]) => Some(ListType::Map(vec!["uid".to_owned()])),
        ("ServiceAccount", ["secrets"]) | ("Pod", ["status", "resourceClaimStatuses"]) => by_name(),
        ("Node", ["spec", "podCIDRs"]) => Some(ListType::Set),
        ("ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration", ["webhooks"]) => {
            by_name()
        }
        ("ValidatingAdmissionPolicyBinding", ["spec", "validationActions"])
        | ("CSIDriver", ["spec", "volumeLifecycleModes"]) => Some(ListType::Set),
        ("Pod", ["status", "hostIPs"]) => Some(ListType::Atomic),
        _ => match pod_spec_rest(kind, path)? {
            [
                "containers" | "initContainers" | "ephemeralContainers",
                "resources",
                "claims",
            ]
            | ["resources", "claims"] => by_name(),
            _ => None,
        },
    }
}

/// Whether the Go type of a built-in kind always serializes the field at `path` when its parent
/// exists: a struct held by value (`spec`, `template`, a container's `resources`, ...) or a list
/// without `omitempty` (`containers`, a role's `rules`). Such a field is in the zero value a
/// create starts from and in every stored object, so a write never "creates" it and upstream
/// records no `.` for it. Custom resources start from an empty object: nothing is.
pub(super) fn is_always_serialized(kind: &str, path: &[&str]) -> bool {
    if path == ["metadata"] {
        return true;
    }
    if !is_built_in(kind) {
        return false;
    }
    // A ReplicationController's template is a pointer: nothing in it is in the zero value.
    if kind == "ReplicationController" && path.starts_with(&["spec", "template"]) {
        return false;
    }
    if let Some(rest) = pod_spec_rest(kind, path) {
        return matches!(
            rest,
            [] | ["containers"]
                | [
                    "containers" | "initContainers" | "ephemeralContainers",
                    "resources"
                ]
                | ["volumes", "projected", "sources"]
                | ["volumes", "cephfs" | "rbd", "monitors"]
        );
    }
    if kind == "EndpointSlice" {
        // Its lists of endpoints and of ports have no `omitempty`.
        return matches!(path, ["endpoints" | "ports"]);
    }
    if kind == "CustomResourceDefinition" {
        return matches!(
            path,
            ["spec" | "status"]
                | ["spec", "names" | "versions"]
                | ["spec", "conversion", "webhook", "conversionReviewVersions"]
                | ["status", "acceptedNames" | "conditions" | "storedVersions"]
        );
    }
    matches!(
        path,
        ["spec" | "status"]
            | [.., "template" | "jobTemplate"]
            | [.., "template" | "jobTemplate", "metadata" | "spec"]
            | ["spec", "strategy" | "updateStrategy"]
            | ["status", "loadBalancer" | "nodeInfo" | "daemonEndpoints"]
            | ["status", "daemonEndpoints", "kubeletEndpoint"]
            | ["status", "images", "names"]
            | [
                "status",
                "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses",
                "state" | "lastState"
            ]
            | ["involvedObject" | "source" | "regarding" | "deprecatedSource" | "roleRef"]
            | [
                "spec",
                "resources"
                    | "scaleTargetRef"
                    | "priorityLevelConfiguration"
                    | "source"
                    | "devices"
                    | "spec"
                    | "metadata"
            ]
            | ["spec", "spec", "devices"]
            | ["rules"]
            | ["rules", "verbs"]
    )
}

/// Which container nodes [`Walker::collect`] records besides leaves and list items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nodes {
    /// None (an applied configuration's field set).
    Leaves,
    /// Every map and list (fields an update created or removed).
    All,
}

#[derive(Debug, Default)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

/// The object without a `metadata` that is empty (as it is once `managedFields` are taken out).
fn without_empty_metadata(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut()
        && map
            .get("metadata")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        map.remove("metadata");
    }
    object
}

/// A copy of `value` with the keys whose value is `null` removed, at any depth.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, child)| !child.is_null())
                .map(|(key, child)| (key.clone(), without_nulls(child)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    /// Whether this entry is the one of that manager identity (the API version counts for updaters only).
    fn is(
        &self,
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == APPLY || self.api_version == api_version)
    }

    fn from_json(value: &Value) -> Option<Entry> {
        let map = value.as_object()?;
        let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
        Some(Entry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation").unwrap_or_else(|| UPDATE.to_owned()),
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource").filter(|subresource| !subresource.is_empty()),
            set: strip(
                map.get("fieldsV1")
                    .map(FieldSet::from_fields_v1)
                    .unwrap_or_default(),
            ),
        })
    }

    fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("manager".to_owned(), Value::String(self.manager.clone()));
        map.insert(
            "operation".to_owned(),
            Value::String(self.operation.clone()),
        );
        map.insert(
            "apiVersion".to_owned(),
            Value::String(self.api_version.clone()),
        );
        if let Some(time) = &self.time {
            map.insert("time".to_owned(), Value::String(time.clone()));
        }
        map.insert(
            "fieldsType".to_owned(),
            Value::String("FieldsV1".to_owned()),
        );
        map.insert("fieldsV1".to_owned(), self.set.to_fields_v1());
        if let Some(subresource) = &self.subresource {
            map.insert("subresource".to_owned(), Value::String(subresource.clone()));
        }
        Value::Object(map)
    }
}

/// Removes `metadata.managedFields` from an object and decodes it (entries of one identity are merged).
fn take_managed_fields(object: &mut Value) -> Vec<Entry> {
    let Some(object) = object.as_object_mut() else {
        return Vec::new();
    };
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Vec::new();
    };
    let raw = metadata.remove("managedFields");
    if metadata.is_empty() {
        object.remove("metadata");
    }
    let Some(Value::Array(raw)) = raw else {
        return Vec::new();
    };
    let mut entries: Vec<Entry> = Vec::new();
    for entry in raw.iter().filter_map(Entry::from_json) {
        let existing = entries.iter_mut().find(|known| {
            known.is(
                &entry.manager,
                &entry.operation,
                &entry.api_version,
                entry.subresource.as_deref(),
            )
        });
        match existing {
            Some(known) => known.set.union_with(&entry.set),
            None => entries.push(entry),
        }
    }
    entries
}

/// Writes the entries to `metadata.managedFields` in upstream's order (Apply first, then by time and manager).
fn set_managed_fields(object: &mut Value, entries: &[Entry]) {
    let Some(object) = object.as_object_mut() else {
        return;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        metadata.remove("managedFields");
        return;
    }
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|left, right| {
        (
            &left.operation,
            &left.time,
            &left.manager,
            &left.api_version,
            &left.subresource,
        )
            .cmp(&(
                &right.operation,
                &right.time,
                &right.manager,
                &right.api_version,
                &right.subresource,
            ))
    });
    metadata.insert(
        "managedFields".to_owned(),
        Value::Array(sorted.into_iter().map(Entry::to_json).collect()),
    );
}

fn api_version_of(object: &Value) -> Option<&str> {
    object.get("apiVersion").and_then(Value::as_str)
}

/// Upstream's JSON manager identifier (`{"manager":"m","operation":"Update","apiVersion":"v1"}`).
fn manager_identifier(
    manager: &str,
    operation: &str,
    api_version: &str,
    subresource: Option<&str>,
) -> String {
    let mut out = String::from("{\"manager\":");
    out.push_str(&go_quote(manager));
    out.push_str(",\"operation\":");
    out.push_str(&go_quote(operation));
    if operation != APPLY && !api_version.is_empty() {
        out.push_str(",\"apiVersion\":");
        out.push_str(&go_quote(api_version));
    }
    if let Some(subresource) = subresource {
        out.push_str(",\"subresource\":");
        out.push_str(&go_quote(subresource));
    }
    out.push('}');
    out
}

/// A string quoted like Go's `%q` for the plain names managers have.
fn go_quote(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// `namespace/name; group/version, Kind=Kind`, as upstream prints the object of a typing error.
fn describe_object(object: &Value) -> String {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let api_version = text("/apiVersion");
    let group_version = if api_version.contains('/') {
        api_version.to_owned()
    } else {
        format!("/{api_version}")
    };
    format!(
        "{}/{}; {group_version}, Kind={}",
        text("/metadata/namespace"),
        text("/metadata/name"),
        text("/kind")
    )
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T1: &str = "2024-05-01T12:00:00Z";
    const T2: &str = "2024-05-01T12:05:00Z";
    const T3: &str = "2024-05-01T12:10:00Z";

    fn deployment(replicas: u32, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}
                }
            }
        })
    }

    fn apply_ok(
        live: Option<&Value>,
        applied: &Value,
        manager: &str,
        force: bool,
        now: &str,
    ) -> Value {
        match apply(live, applied, manager, force, "Deployment", now, None) {
            Ok(result) => result,
            Err(error) => panic!("apply by {manager} failed: {error}"),
        }
    }

    fn apply_err(live: &Value, applied: &Value, manager: &str) -> Error {
        match apply(Some(live), applied, manager, false, "Deployment", T3, None) {
            Ok(result) => panic!("apply by {manager} should have failed, got {result}"),
            Err(error) => error,
        }
    }

    fn managed_fields(object: &Value) -> Vec<Value> {
        object["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn entry_of<'v>(object: &'v Value, manager: &str) -> &'v Value {
        object["metadata"]["managedFields"]
            .as_array()
            .and_then(|entries| entries.iter().find(|entry| entry["manager"] == manager))
            .unwrap_or(&Value::Null)
    }

    fn without_managed_fields(object: &Value) -> Value {
        let mut object = object.clone();
        take_managed_fields(&mut object);
        object
    }

    #[test]
    fn apply_creates_the_object_with_an_apply_entry() {
        let applied = deployment(2, "nginx:1.25");
        let created = apply_ok(None, &applied, "kubectl", false, T1);
        assert_eq!(without_managed_fields(&created), applied);
        assert_eq!(
            managed_fields(&created),
            vec![json!({
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:selector": {},
                        "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                ".": {}, "f:image": {}, "f:name": {}
                            }}}
                        }
                    }
                }
            })]
        );
    }

    #[test]
    fn apply_records_the_subresource_in_its_entry() {
        let live = apply_ok(None, &deployment(1, "a"), "kubectl", false, T1);
        let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "status": {"replicas": 1}});
        let result = apply(
            Some(&live),
            &status,
            "controller",
            false,
            "Deployment",
            T2,
            Some("status"),
        );
        let result = result.unwrap_or_else(|error| panic!("{error}"));
        let entry = entry_of(&result, "controller");
        assert_eq!(entry["subresource"], "status");
        assert_eq!(entry["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
    }

    #[test]
    fn reapplying_an_unchanged_configuration_is_a_no_op() {
        let applied = deployment(2, "nginx:1.25");
        let live = apply_ok(None, &applied, "kubectl", false, T1);
        let again = apply_ok(Some(&live), &applied, "kubectl", false, T2);
        assert_eq!(again, live);
    }

    #[test]
    fn reapplying_without_a_field_removes_it() {
        let mut first = deployment(2, "nginx:1.25");
        first["metadata"]["labels"]["tier"] = json!("frontend");
        first["spec"]["paused"] = json!(true);
        let live = apply_ok(None, &first, "kubectl", false, T1);
        let second = deployment(2, "nginx:1.25");
        let result = apply_ok(Some(&live), &second, "kubectl", false, T2);
        assert_eq!(without_managed_fields(&result), second);
        let entry = entry_of(&result, "kubectl");
        assert_eq!(entry["time"], T2);
        assert_eq!(
            entry["fieldsV1"]["f:metadata"],
            json!({"f:labels": {"f:app": {}}})
        );
        assert!(entry["fieldsV1"]["f:spec"].get("f:paused").is_none());
    }

    #[test]
    fn reapplying_without_a_field_another_manager_owns_only_drops_ownership() {
        let mut first = deployment(2, "nginx:1.25");
        first["metadata"]["labels"]["tier"] = json!("frontend");
        let live = apply_ok(None, &first, "kubectl", false, T1);
        // A second applier sets the same label to the same value: shared ownership, no conflict.
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"tier": "frontend"}}});
        let shared = apply_ok(Some(&live), &other, "labeler", false, T2);
        let result = apply_ok(
            Some(&shared),
            &deployment(2, "nginx:1.25"),
            "kubectl",
            false,
            T3,
        );
        assert_eq!(
            result["metadata"]["labels"],
            json!({"app": "web", "tier": "frontend"})
        );
        assert_eq!(
            entry_of(&result, "kubectl")["fieldsV1"]["f:metadata"],
            json!({"f:labels": {"f:app": {}}})
        );
        assert_eq!(
            entry_of(&result, "labeler")["fieldsV1"]["f:metadata"],
            json!({"f:labels": {"f:tier": {}}})
        );
    }

    #[test]
    fn two_appliers_conflict_on_spec_replicas_with_the_real_message() {
        let live = apply_ok(None, &deployment(2, "nginx:1.25"), "alice", false, T1);
        let error = apply_err(&live, &deployment(5, "nginx:1.25"), "bob");
        assert_eq!(
            error.to_string(),
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
        );
        assert_eq!(error.status_code(), 409);
        assert_eq!(
            error.conflicts(),
            Some(vec![(
                "conflict with \"alice\"".to_owned(),
                ".spec.replicas".to_owned()
            )])
        );
        assert_eq!(error.conflict_details().len(), 1);
    }

    #[test]
    fn an_updater_conflicts_with_the_real_message_naming_its_api_version() {
        let created = apply_ok(None, &deployment(2, "nginx:1.25"), "alice", false, T1);
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(3);
        record_update(&created, &mut scaled, "kubectl", "Deployment", T2, None);
        let error = apply_err(&scaled, &deployment(2, "nginx:1.25"), "alice");
        assert_eq!(
            error.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"
        );
        let cause = &error.conflict_details()[0];
        assert_eq!(cause.message(), "conflict with \"kubectl\" using apps/v1");
        assert_eq!(
            (cause.operation.as_str(), cause.api_version.as_str()),
            ("Update", "apps/v1")
        );
    }

    /// A widget's `spec.size` in v1 is its `spec.replicas` in v2.
    fn widget_in(object: &Value, api_version: &str) -> Option<Value> {
        let (from, to) = match api_version {
            "example.com/v1" => ("replicas", "size"),
            "example.com/v2" => ("size", "replicas"),
            _ => return None,
        };
        let mut object = object.clone();
        object["apiVersion"] = json!(api_version);
        if let Some(value) = object["spec"].as_object_mut().and_then(|s| s.remove(from)) {
            object["spec"][to] = value;
        }
        Some(object)
    }

    #[test]
    fn an_apply_is_judged_by_a_manager_of_another_version_in_that_version() {
        let widget = |version: &str, field: &str, value: i64| {
            json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget",
                "metadata": {"name": "w", "namespace": "ns"}, "spec": {field: value}})
        };
        let schema = || Schema::for_kind("Widget");
        let convert: &Convert<'_> = &widget_in;
        let sized = apply_with_schema(
            None,
            &widget("v1", "size", 1),
            "sizer",
            false,
            schema(),
            T1,
            None,
            Some(convert),
        )
        .unwrap();
        let live = widget_in(&sized, "example.com/v2").unwrap();
        let scale = |force: bool| {
            apply_with_schema(
                Some(&live),
                &widget("v2", "replicas", 2),
                "scaler",
                force,
                schema(),
                T2,
                None,
                Some(convert),
            )
        };
        assert_eq!(
            scale(false).unwrap_err().to_string(),
            "Apply failed with 1 conflict: conflict with \"sizer\": .spec.size"
        );
        let scaled = scale(true).unwrap();
        let managers: Vec<&str> = scaled["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["manager"].as_str())
            .collect();
        assert_eq!(managers, ["scaler"]);
        let unconverted = apply_with_schema(
            Some(&live),
            &widget("v2", "replicas", 2),
            "scaler",
            false,
            schema(),
            T2,
            None,
            None,
        );
        assert!(unconverted.is_ok(), "without conversion the fields differ");
    }

    #[test]
    fn several_conflicts_are_listed_per_manager() {
        let mut base = deployment(2, "nginx:1.25");
        base["spec"]["paused"] = json!(false);
        let created = apply_ok(None, &base, "alice", false, T1);
        let mut edited = created.clone();
        edited["spec"]["replicas"] = json!(3);
        edited["spec"]["paused"] = json!(true);
        record_update(&created, &mut edited, "mgr", "Deployment", T2, None);
        let error = apply_err(&edited, &base, "alice");
        assert_eq!(
            error.to_string(),
            "Apply failed with 2 conflicts: conflicts with \"mgr\" using apps/v1:\n- .spec.paused\n- .spec.replicas"
        );
        let fields: Vec<String> = error
            .conflicts()
            .unwrap_or_default()
            .into_iter()
            .map(|(_, field)| field)
            .collect();
        assert_eq!(fields, [".spec.paused", ".spec.replicas"]);
    }

    #[test]
    fn conflicts_name_container_fields_by_key() {
        let live = apply_ok(None, &deployment(2, "nginx:1.25"), "alice", false, T1);
        let error = apply_err(&live, &deployment(2, "nginx:1.26"), "bob");
        assert_eq!(
            error.to_string(),
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.template.spec.containers[name=\"web\"].image"
        );
    }

    #[test]
    fn forcing_an_apply_takes_ownership() {
        let live = apply_ok(None, &deployment(2, "nginx:1.25"), "alice", false, T1);
        let result = apply_ok(Some(&live), &deployment(5, "nginx:1.25"), "bob", true, T2);
        assert_eq!(result["spec"]["replicas"], 5);
        assert!(
            entry_of(&result, "alice")["fieldsV1"]["f:spec"]
                .get("f:replicas")
                .is_none()
        );
        assert_eq!(
            entry_of(&result, "bob")["fieldsV1"]["f:spec"]["f:replicas"],
            json!({})
        );
        // Both still own the fields they agree on.
        assert_eq!(
            entry_of(&result, "alice")["fieldsV1"]["f:spec"]["f:selector"],
            json!({})
        );
        assert_eq!(
            entry_of(&result, "bob")["fieldsV1"]["f:spec"]["f:selector"],
            json!({})
        );
        // Alice now conflicts with bob if she insists on her value.
        let error = apply_err(&result, &deployment(2, "nginx:1.25"), "alice");
        assert_eq!(
            error.to_string(),
            "Apply failed with 1 conflict: conflict with \"bob\": .spec.replicas"
        );
    }

    #[test]
    fn an_update_by_another_manager_then_an_apply_conflicts() {
        let live = apply_ok(None, &deployment(2, "nginx:1.25"), "kubectl", false, T1);
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(7);
        record_update(&live, &mut scaled, "hpa-controller", "Deployment", T2, None);
        assert!(
            entry_of(&scaled, "kubectl")["fieldsV1"]["f:spec"]
                .get("f:replicas")
                .is_none()
        );
        assert_eq!(
            entry_of(&scaled, "hpa-controller")["fieldsV1"],
            json!({"f:spec": {"f:replicas": {}}})
        );
        assert_eq!(entry_of(&scaled, "hpa-controller")["operation"], "Update");
        let error = apply_err(&scaled, &deployment(2, "nginx:1.25"), "kubectl");
        assert_eq!(
            error.to_string(),
            "Apply failed with 1 conflict: conflict with \"hpa-controller\" using apps/v1: .spec.replicas"
        );
    }

    #[test]
    fn applying_a_container_list_merges_by_name() {
        let live = apply_ok(None, &deployment(2, "nginx:1.25"), "kubectl", false, T1);
        let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy:1"}]}}}});
        let injected = apply_ok(Some(&live), &sidecar, "injector", false, T2);
        assert_eq!(
            injected["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:1.25"}, {"name": "proxy", "image": "envoy:1"}])
        );
        assert_eq!(
            entry_of(&injected, "injector")["fieldsV1"],
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"proxy\"}": {
                ".": {}, "f:image": {}, "f:name": {}
            }}}}}})
        );
        // The first applier re-applies with a new image: its container changes, the sidecar stays.
        let updated = apply_ok(
            Some(&injected),
            &deployment(2, "nginx:1.26"),
            "kubectl",
            false,
            T3,
        );
        assert_eq!(
            updated["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:1.26"}, {"name": "proxy", "image": "envoy:1"}])
        );
    }

    #[test]
    fn dropping_a_container_from_the_configuration_removes_it() {
        let mut two = deployment(1, "a");
        two["spec"]["template"]["spec"]["containers"] = json!([{"name": "web", "image": "a"}, {"name": "debug", "image": "busybox", "args": ["sleep"]}]);
        let live = apply_ok(None, &two, "kubectl", false, T1);
        let result = apply_ok(Some(&live), &deployment(1, "a"), "kubectl", false, T2);
        assert_eq!(
            result["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "a"}])
        );
    }

    #[test]
    fn dropping_a_container_removes_it_even_if_another_manager_changed_a_field_in_it() {
        let mut two = deployment(1, "a");
        two["spec"]["template"]["spec"]["containers"] =
            json!([{"name": "web", "image": "a"}, {"name": "debug", "image": "busybox"}]);
        let live = apply_ok(None, &two, "kubectl", false, T1);
        let mut edited = live.clone();
        edited["spec"]["template"]["spec"]["containers"][1]["image"] = json!("busybox:2");
        record_update(&live, &mut edited, "editor", "Deployment", T2, None);
        let result = apply_ok(Some(&edited), &deployment(1, "a"), "kubectl", false, T3);
        assert_eq!(
            result["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "a"}])
        );
        assert_eq!(entry_of(&result, "editor"), &Value::Null);
    }

    #[test]
    fn apply_keys_container_ports_by_port_and_defaulted_protocol() {
        let mut applied = deployment(1, "a");
        applied["spec"]["template"]["spec"]["containers"][0]["ports"] =
            json!([{"containerPort": 80}]);
        let created = apply_ok(None, &applied, "kubectl", false, T1);
        let container = &entry_of(&created, "kubectl")["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
            ["f:containers"]["k:{\"name\":\"web\"}"];
        assert_eq!(
            container["f:ports"],
            json!({"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}})
        );
    }

    #[test]
    fn apply_treats_finalizers_as_a_set() {
        let cm = |finalizers: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": finalizers}});
        let live = apply(
            None,
            &cm(json!(["a.io/x"])),
            "one",
            false,
            "ConfigMap",
            T1,
            None,
        );
        let live = live.unwrap_or_else(|error| panic!("{error}"));
        let both = apply(
            Some(&live),
            &cm(json!(["b.io/y"])),
            "two",
            false,
            "ConfigMap",
            T2,
            None,
        );
        let both = both.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(both["metadata"]["finalizers"], json!(["a.io/x", "b.io/y"]));
        assert_eq!(
            entry_of(&both, "two")["fieldsV1"],
            json!({"f:metadata": {"f:finalizers": {"v:\"b.io/y\"": {}}}})
        );
    }

    #[test]
    fn custom_resource_lists_are_atomic_unless_a_key_is_given() {
        let widget = |items: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"items": items}});
        let live = apply(
            None,
            &widget(json!([{"name": "a"}])),
            "one",
            false,
            "Widget",
            T1,
            None,
        );
        let live = live.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            entry_of(&live, "one")["fieldsV1"],
            json!({"f:spec": {"f:items": {}}})
        );
        let error = apply(
            Some(&live),
            &widget(json!([{"name": "b"}])),
            "two",
            false,
            "Widget",
            T2,
            None,
        );
        let error = error.err().map(|error| error.to_string());
        assert_eq!(
            error.as_deref(),
            Some("Apply failed with 1 conflict: conflict with \"one\": .spec.items")
        );

        let lookup = |path: &[&str]| {
            (path == ["spec", "items"]).then(|| ListType::Map(vec!["name".to_owned()]))
        };
        let schema = Schema::for_kind("Widget").with_list_types(&lookup);
        let live = apply_with_schema(
            None,
            &widget(json!([{"name": "a"}])),
            "one",
            false,
            schema,
            T1,
            None,
            None,
        );
        let live = live.unwrap_or_else(|error| panic!("{error}"));
        let merged = apply_with_schema(
            Some(&live),
            &widget(json!([{"name": "b"}])),
            "two",
            false,
            schema,
            T2,
            None,
            None,
        );
        let merged = merged.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            merged["spec"]["items"],
            json!([{"name": "a"}, {"name": "b"}])
        );
    }

    #[test]
    fn an_object_without_managed_fields_belongs_to_before_first_apply() {
        let live = deployment(2, "nginx:1.25");
        let error = apply_err(&live, &deployment(3, "nginx:1.25"), "kubectl");
        assert_eq!(
            error.to_string(),
            "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas"
        );
        let same = apply_ok(
            Some(&live),
            &deployment(2, "nginx:1.25"),
            "kubectl",
            false,
            T2,
        );
        assert_eq!(entry_of(&same, "before-first-apply")["operation"], "Update");
        assert_eq!(entry_of(&same, "kubectl")["operation"], "Apply");
    }

    #[test]
    fn apply_rejects_a_list_element_without_its_key() {
        let mut applied = deployment(1, "a");
        applied["spec"]["template"]["spec"]["containers"] = json!([{"image": "a"}]);
        let error = apply(None, &applied, "kubectl", false, "Deployment", T1, None).err();
        assert_eq!(
            error.as_ref().map(ToString::to_string).as_deref(),
            Some(
                "failed to create typed patch object (default/web; apps/v1, Kind=Deployment): \
                 .spec.template.spec.containers: element 0: associative list with keys has an element \
                 that omits key field \"name\" (and doesn't have default value)"
            )
        );
        assert_eq!(error.map(|error| error.status_code()), Some(500));
    }

    #[test]
    fn apply_rejects_duplicate_keys() {
        let mut applied = deployment(1, "a");
        applied["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]);
        let error = apply(None, &applied, "kubectl", false, "Deployment", T1, None).err();
        assert_eq!(
            error.map(|error| error.to_string()).as_deref(),
            Some(
                "failed to create typed patch object (default/web; apps/v1, Kind=Deployment): \
                 .spec.template.spec.containers[name=\"web\"].env: duplicate entries for key [name=\"A\"]"
            )
        );
    }

    #[test]
    fn apply_rejects_a_body_that_is_not_an_object() {
        let error = apply(None, &json!([1]), "kubectl", false, "Deployment", T1, None).err();
        assert_eq!(error.as_ref().map(Error::status_code), Some(400));
    }

    #[test]
    fn an_update_that_changes_nothing_records_nothing() {
        let live = apply_ok(None, &deployment(2, "a"), "kubectl", false, T1);
        let mut same = live.clone();
        record_update(&live, &mut same, "other", "Deployment", T2, None);
        assert_eq!(same, live);
    }

    #[test]
    fn a_create_records_an_update_entry_for_every_field() {
        let mut created = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default", "uid": "u", "resourceVersion": "1", "labels": {"a": "1"}},
            "data": {"k": "v"}});
        record_update(
            &Value::Null,
            &mut created,
            "kubectl-create",
            "ConfigMap",
            T1,
            None,
        );
        assert_eq!(
            managed_fields(&created),
            vec![json!({
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}}
            })]
        );
    }

    #[test]
    fn a_created_deployment_gets_markers_only_on_maps_that_go_types_allocate() {
        let mut created = deployment(1, "nginx");
        created["spec"]["strategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}});
        record_update(
            &Value::Null,
            &mut created,
            "kubectl-create",
            "Deployment",
            T1,
            None,
        );
        assert_eq!(
            entry_of(&created, "kubectl-create")["fieldsV1"],
            json!({
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}}, "f:type": {}},
                    "f:template": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                            ".": {}, "f:image": {}, "f:name": {}
                        }}}
                    }
                }
            })
        );
    }

    #[test]
    fn an_update_removing_a_field_takes_it_from_its_owner() {
        let mut applied = deployment(2, "a");
        applied["metadata"]["labels"]["tier"] = json!("x");
        let live = apply_ok(None, &applied, "kubectl", false, T1);
        let mut edited = live.clone();
        if let Some(labels) = edited["metadata"]["labels"].as_object_mut() {
            labels.remove("tier");
        }
        record_update(&live, &mut edited, "editor", "Deployment", T2, None);
        assert_eq!(
            entry_of(&edited, "kubectl")["fieldsV1"]["f:metadata"],
            json!({"f:labels": {"f:app": {}}})
        );
        assert_eq!(entry_of(&edited, "editor"), &Value::Null);
    }

    #[test]
    fn update_entries_are_kept_per_manager_and_merged_over_time() {
        let live = apply_ok(None, &deployment(2, "a"), "kubectl", false, T1);
        let mut first = live.clone();
        first["spec"]["replicas"] = json!(3);
        record_update(&live, &mut first, "scaler", "Deployment", T2, None);
        let mut second = first.clone();
        second["spec"]["paused"] = json!(true);
        record_update(&first, &mut second, "scaler", "Deployment", T3, None);
        let entry = entry_of(&second, "scaler");
        assert_eq!(entry["time"], T3);
        assert_eq!(
            entry["fieldsV1"],
            json!({"f:spec": {"f:paused": {}, "f:replicas": {}}})
        );
        let order: Vec<(String, String)> = managed_fields(&second)
            .iter()
            .map(|entry| (entry["manager"].to_string(), entry["operation"].to_string()))
            .collect();
        let expected = [("\"kubectl\"", "\"Apply\""), ("\"scaler\"", "\"Update\"")];
        assert_eq!(
            order,
            expected.map(|(manager, operation)| (manager.to_owned(), operation.to_owned()))
        );
    }

    #[test]
    fn field_sets_round_trip_through_fields_v1() {
        let fields = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}});
        let set = FieldSet::from_fields_v1(&fields);
        assert_eq!(set.to_fields_v1(), fields);
        let paths: Vec<String> = set
            .member_paths()
            .iter()
            .map(|path| path_string(path))
            .collect();
        assert_eq!(
            paths,
            [
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.containers[name=\"c\"]",
                ".spec.containers[name=\"c\"].image"
            ]
        );
    }

    fn created_fields(object: &Value, kind: &str) -> Value {
        let mut created = object.clone();
        record_update(&Value::Null, &mut created, "kubectl-create", kind, T1, None);
        entry_of(&created, "kubectl-create")["fieldsV1"].clone()
    }

    #[test]
    fn owner_references_are_owned_as_whole_items_of_a_created_list() {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "lock", "namespace": "default", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "leader", "uid": "u-1"}]}});
        assert_eq!(
            created_fields(&config_map, "ConfigMap"),
            json!({"f:metadata": {"f:ownerReferences": {".": {}, "k:{\"uid\":\"u-1\"}": {}}}})
        );
    }

    #[test]
    fn changing_an_owner_reference_gives_the_whole_item_to_the_writer() {
        let owner = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": "u-1"}]}})
        };
        let mut live = owner("first");
        record_update(&Value::Null, &mut live, "creator", "ConfigMap", T1, None);
        let mut renamed = owner("second");
        renamed["metadata"]["managedFields"] = live["metadata"]["managedFields"].clone();
        record_update(&live, &mut renamed, "renamer", "ConfigMap", T2, None);
        assert_eq!(
            entry_of(&renamed, "creator")["fieldsV1"],
            json!({"f:metadata": {"f:ownerReferences": {}}})
        );
        assert_eq!(
            entry_of(&renamed, "renamer")["fieldsV1"],
            json!({"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u-1\"}": {}}}})
        );
    }

    #[test]
    fn applying_a_changed_owner_reference_replaces_the_item_whole() {
        let applied = |extra: Value| {
            let mut reference =
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1"});
            if let (Some(reference), Some(extra)) = (reference.as_object_mut(), extra.as_object()) {
                reference.extend(extra.clone());
            }
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default", "ownerReferences": [reference]}})
        };
        let first = apply(
            None,
            &applied(json!({"controller": true})),
            "a",
            false,
            "ConfigMap",
            T1,
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let second = apply(
            Some(&first),
            &applied(json!({})),
            "a",
            false,
            "ConfigMap",
            T2,
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            second["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1"}])
        );
        assert_eq!(
            entry_of(&second, "a")["fieldsV1"],
            json!({"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u-1\"}": {}}}})
        );
    }

    #[test]
    fn a_created_pod_marks_new_lists_and_the_structs_inside_new_items() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "finalizers": ["example.com/x"]},
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}},
                "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
            "volumes": [{"name": "v", "configMap": {"name": "x"}}],
            "imagePullSecrets": [{"name": "pull"}],
            "securityContext": {}
        }});
        assert_eq!(
            created_fields(&pod, "Pod"),
            json!({
                "f:metadata": {"f:finalizers": {".": {}, "v:\"example.com/x\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}, "f:protocol": {}}},
                        "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}}}
                    }},
                    "f:imagePullSecrets": {".": {}, "k:{\"name\":\"pull\"}": {}},
                    "f:securityContext": {},
                    "f:volumes": {".": {}, "k:{\"name\":\"v\"}": {
                        ".": {}, "f:configMap": {".": {}, "f:name": {}}, "f:name": {}}}
                }
            })
        );
    }

    #[test]
    fn a_new_container_in_a_live_pod_owns_its_resources_but_a_live_one_does_not() {
        let pod = |containers: Value| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": containers}})
        };
        let live = pod(json!([{"name": "a", "image": "i", "resources": {}}]));
        let mut edited = pod(json!([
            {"name": "a", "image": "i", "resources": {"limits": {"cpu": "1"}}},
            {"name": "b", "image": "i", "resources": {"limits": {"cpu": "1"}}}
        ]));
        record_update(&live, &mut edited, "editor", "Pod", T1, None);
        assert_eq!(
            entry_of(&edited, "editor")["fieldsV1"]["f:spec"]["f:containers"],
            json!({
                "k:{\"name\":\"a\"}": {"f:resources": {"f:limits": {".": {}, "f:cpu": {}}}},
                "k:{\"name\":\"b\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}}}}
            })
        );
    }

    #[test]
    fn a_created_custom_resource_marks_its_spec_as_created() {
        let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"size": 3, "nested": {"a": "x"}}});
        assert_eq!(
            created_fields(&widget, "Widget"),
            json!({"f:spec": {".": {}, "f:nested": {".": {}, "f:a": {}}, "f:size": {}}})
        );
    }

    #[test]
    fn role_references_object_references_and_key_selectors_are_owned_whole() {
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "u"}]});
        assert_eq!(
            created_fields(&binding, "RoleBinding"),
            json!({"f:roleRef": {}, "f:subjects": {}})
        );
        let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R"});
        assert_eq!(
            created_fields(&event, "Event"),
            json!({"f:involvedObject": {}, "f:reason": {}})
        );
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [
                {"name": "E", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}]}]}}}});
        assert_eq!(
            created_fields(&deployment, "Deployment")["f:spec"]["f:template"]["f:spec"]["f:containers"],
            json!({"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:env": {".": {}, "k:{\"name\":\"E\"}": {
                ".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}}}})
        );
    }

    #[test]
    fn an_empty_struct_the_go_type_always_has_records_nothing() {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"}, "spec": {}});
        let mut created = lease.clone();
        record_update(
            &Value::Null,
            &mut created,
            "kubectl-create",
            "Lease",
            T1,
            None,
        );
        assert_eq!(created, lease);
    }

    #[test]
    fn a_role_s_rules_are_one_field_even_when_empty() {
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r"}, "rules": []});
        assert_eq!(created_fields(&role, "Role"), json!({"f:rules": {}}));
    }

    #[test]
    fn lists_follow_the_openapi_list_types_where_patch_keys_differ() {
        let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "a"},
            "secrets": [{"name": "s"}], "imagePullSecrets": [{"name": "p"}]});
        assert_eq!(
            created_fields(&account, "ServiceAccount"),
            json!({"f:imagePullSecrets": {}, "f:secrets": {".": {}, "k:{\"name\":\"s\"}": {}}})
        );
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "spec": {"podCIDRs": ["10.0.0.0/24"]}});
        assert_eq!(
            created_fields(&node, "Node"),
            json!({"f:spec": {"f:podCIDRs": {".": {}, "v:\"10.0.0.0/24\"": {}}}})
        );
    }
}
