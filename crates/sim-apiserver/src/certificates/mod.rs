//! certificates.k8s.io/v1 CertificateSigningRequests as kube-apiserver v1.34.4 serves them:
//! the registry strategies of the main resource and of its `status` and `approval`
//! subresources (`pkg/registry/certificates/certificates/strategy.go`), their validation
//! with every message verbatim (`pkg/apis/certificates/validation/validation.go`), and the
//! admission plugins that guard them (`CertificateApproval`, `CertificateSigning`,
//! `CertificateSubjectRestriction`).
//!
//! # Guarantees
//! - A create records who asked (`spec.username`, `uid`, `groups`) and starts with an empty
//!   status: nobody creates a pre-approved request.
//! - An update of the main resource keeps the stored spec and status; one of `status` keeps
//!   the spec and the Approved/Denied conditions and may set the certificate once; one of
//!   `approval` changes only the conditions. Conditions get their timestamps as upstream's
//!   `populateConditionTimestamps` gives them.
//! - Field ownership leaves out what each strategy resets (`GetResetFields`), as the real
//!   field manager does; a create usually records none, and an update of a request without
//!   any records none either (upstream's `skipNonAppliedManager`), until an apply.
//!
//! # Caveats
//! - `metadata.name` of a request may be any path segment upstream; the generic object
//!   checks of this server still hold it to a DNS subdomain.
//! - Requests carry no `extra`: the server's identities have none.
//! - An apply of `spec` fields conflicts with `before-first-apply` here, not upstream
//!   (whose field manager ignores reset fields in conflicts too); the strategy keeps the
//!   stored spec either way.
//! - Of a malformed request's DER, only the outer structure's messages are Go's (see
//!   [`x509`]).

pub mod pem;
pub mod x509;

use serde_json::{Map, Value, json};

use super::auth::{self, Attributes, UserInfo};
use super::names::{self, Cause, NameRule};
use super::registry::ResourceType;
use super::state::State;
use super::status::{ApiError, GroupResource};
use super::store::Store;

/// The API group.
pub const GROUP: &str = "certificates.k8s.io";
/// The resource.
pub const RESOURCE: &str = "certificatesigningrequests";
/// The kind.
pub const KIND: &str = "CertificateSigningRequest";

/// Client certificates for kube-apiserver, signed by kube-controller-manager.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Kubelets' client certificates, signed (and auto-approved) by kube-controller-manager.
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Kubelets' serving certificates, signed by kube-controller-manager.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// The v1beta1 default, refused by v1.
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// The key usages a request may ask for (`allValidUsages`), sorted as Go's `sets.List` sorts.
pub const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

const APPROVED: &str = "Approved";
const DENIED: &str = "Denied";
const FAILED: &str = "Failed";

/// Whether `rt` is the CertificateSigningRequest resource.
pub fn serves(rt: &ResourceType) -> bool {
    rt.group == GROUP && rt.resource == RESOURCE && !rt.is_custom()
}

fn gr() -> GroupResource {
    GroupResource::new(GROUP, RESOURCE)
}

fn invalid(name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(KIND, GROUP, name, causes)
}

/// The 403 of an admission plugin (`admission.NewForbidden`).
fn forbidden(name: &str, reason: &str) -> ApiError {
    ApiError::Forbidden {
        message: format!("{} {} is forbidden: {reason}", gr(), names::go_quote(name)),
        gr: gr(),
        name: name.to_string(),
    }
}

fn meta_name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A `[]byte` field (`spec.request`, `status.certificate`): `None` when absent or null.
///
/// # Errors
/// The offset Go's base64 decoder names; a value that is not a string counts as offset 0.
fn bytes_at(obj: &Value, pointer: &str) -> Result<Option<Vec<u8>>, usize> {
    match obj.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => pem::decode_base64(s.as_bytes()).map(Some),
        Some(_) => Err(0),
    }
}

/// What decoding the body into the Go type refuses: a `[]byte` field that is not base64.
fn check_decodable(obj: &Value) -> Result<(), ApiError> {
    for pointer in ["/spec/request", "/status/certificate"] {
        if let Err(offset) = bytes_at(obj, pointer) {
            return Err(ApiError::BadRequest(format!(
                "{KIND} in version \"v1\" cannot be handled as a {KIND}: illegal base64 data at input byte {offset}"
            )));
        }
    }
    Ok(())
}

fn object_at<'v>(obj: &'v mut Value, key: &str) -> &'v mut Map<String, Value> {
    if !obj.get(key).is_some_and(Value::is_object) {
        obj[key] = json!({});
    }
    match obj.get_mut(key) {
        Some(Value::Object(map)) => map,
        _ => unreachable!("just made an object"),
    }
}

/// The status as Go encodes the struct: an object, without an empty certificate or an
/// empty list of conditions (`omitempty`).
fn normalize_status(obj: &mut Value) {
    let status = object_at(obj, "status");
    if status
        .get("certificate")
        .is_some_and(|c| c.is_null() || c.as_str() == Some(""))
    {
        status.remove("certificate");
    }
    if status
        .get("conditions")
        .is_some_and(|c| c.is_null() || c.as_array().is_some_and(Vec::is_empty))
    {
        status.remove("conditions");
    }
}

fn conditions(obj: &Value) -> Vec<Value> {
    obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn condition_type(c: &Value) -> &str {
    c["type"].as_str().unwrap_or_default()
}

fn of_type(obj: &Value, kind: &str) -> Vec<Value> {
    conditions(obj)
        .into_iter()
        .filter(|c| condition_type(c) == kind)
        .collect()
}

fn usages(obj: &Value) -> Vec<String> {
    obj["spec"]["usages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| u.as_str().unwrap_or_default().to_string())
        .collect()
}

/// What upstream's `PrepareForCreate` does: who asked goes into the spec, whatever the
/// client wrote there; the status starts empty.
pub fn prepare_for_create(obj: &mut Value, user: &UserInfo) {
    let spec = object_at(obj, "spec");
    for key in ["username", "uid", "groups", "extra"] {
        spec.remove(key);
    }
    if !user.name.is_empty() {
        spec.insert("username".into(), json!(user.name));
    }
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    obj["status"] = json!({});
}

/// Whether a cause is about `metadata.name` or `metadata.generateName` being malformed.
fn about_name(cause: &Cause) -> bool {
    cause.reason == names::FIELD_VALUE_INVALID
        && matches!(
            cause.field.as_str(),
            "metadata.name" | "metadata.generateName"
        )
}

/// Everything a create of a request does before it is stored, in upstream's order: the body
/// is decoded, `PrepareForCreate` fills in the requester, the strategy validates (names are
/// free), `BeforeCreate` checks the name as a path segment, and the
/// `CertificateSubjectRestriction` admission plugin refuses `system:masters` client
/// certificates.
///
/// # Errors
/// A 400 for a body that does not decode, a 422 with every invalid field, a 403 from
/// admission.
pub fn before_create(obj: &mut Value, user: &UserInfo) -> Result<(), ApiError> {
    check_decodable(obj)?;
    prepare_for_create(obj, user);
    let name = meta_name(obj);
    let meta_causes = names::validate_object_meta(&obj["metadata"], NameRule::PathSegment);
    let (name_causes, mut causes): (Vec<Cause>, Vec<Cause>) =
        meta_causes.into_iter().partition(about_name);
    causes.extend(validate(obj, Options::new(obj, None)));
    if !causes.is_empty() {
        return Err(invalid(&name, causes));
    }
    if !name_causes.is_empty() {
        return Err(invalid(&name, name_causes));
    }
    restrict_subject(obj, &name)
}

/// The `CertificateSubjectRestriction` admission plugin.
fn restrict_subject(obj: &Value, name: &str) -> Result<(), ApiError> {
    if obj["spec"]["signerName"].as_str() != Some(KUBE_APISERVER_CLIENT) {
        return Ok(());
    }
    let request = bytes_at(obj, "/spec/request")
        .ok()
        .flatten()
        .unwrap_or_default();
    let parsed = x509::parse_request_pem(&request, false)
        .map_err(|e| forbidden(name, &format!("failed to parse CSR: {e}")))?;
    if parsed.organizations().iter().any(|o| o == "system:masters") {
        return Err(forbidden(
            name,
            &format!(
                "use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed"
            ),
        ));
    }
    Ok(())
}

/// What a create stores besides: the empty status Go always writes, and no field ownership
/// of what the strategy resets (`spec`, `status`), which usually leaves none.
pub fn finish_create(obj: &mut Value, manager: &str) {
    normalize_status(obj);
    drop_reset_fields(obj, manager, None);
}

/// The fields a strategy resets (`GetResetFields`), as paths of FieldsV1 keys.
fn reset_fields(subresource: Option<&str>) -> &'static [&'static [&'static str]] {
    match subresource {
        Some("status") => &[&["f:spec"], &["f:status", "f:conditions"]],
        Some("approval") => &[&["f:spec"], &["f:status", "f:certificate"]],
        _ => &[&["f:spec"], &["f:status"]],
    }
}

fn remove_path(fields: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(map) = fields.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        map.remove(*first);
        return;
    }
    if let Some(child) = map.get_mut(*first) {
        remove_path(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            map.remove(*first);
        }
    }
}

/// Removes what the strategy of `subresource` resets from the entries `manager` (and, for
/// an apply, `before-first-apply`) wrote through it: the real field manager ignores those
/// fields (its `IgnoreFilter`). Entries left empty go, and `managedFields` with them.
fn drop_reset_fields(obj: &mut Value, manager: &str, subresource: Option<&str>) {
    let Some(entries) = obj["metadata"]
        .get_mut("managedFields")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for entry in entries.iter_mut() {
        let writer = entry["manager"].as_str();
        if !(writer == Some(manager) || writer == Some("before-first-apply"))
            || entry["subresource"].as_str() != subresource
        {
            continue;
        }
        for path in reset_fields(subresource) {
            remove_path(&mut entry["fieldsV1"], path);
        }
    }
    entries.retain(|e| !e["fieldsV1"].as_object().is_some_and(Map::is_empty));
    if entries.is_empty()
        && let Some(meta) = obj["metadata"].as_object_mut()
    {
        meta.remove("managedFields");
    }
}

/// Gives `manager` the timestamps of the conditions it wrote without them (through
/// `approval`). The Go type holds them as zero times, which the field manager sees as
/// `null` values the update set, before the strategy fills them in; other managers lose
/// them.
fn own_unset_timestamps(obj: &mut Value, manager: &str, now: &str) {
    let mut owned: Vec<(String, &'static str)> = Vec::new();
    for c in conditions(obj) {
        let key = format!(
            "k:{}",
            serde_json::to_string(&json!({"type": condition_type(&c)})).unwrap_or_default()
        );
        for field in ["lastTransitionTime", "lastUpdateTime"] {
            if time_missing(&c, field) {
                owned.push((key.clone(), field));
            }
        }
    }
    if owned.is_empty() {
        return;
    }
    let meta = object_at(obj, "metadata");
    let entries = meta.entry("managedFields").or_insert_with(|| json!([]));
    let Some(entries) = entries.as_array_mut() else {
        return;
    };
    let mine = |e: &Value| {
        e["manager"].as_str() == Some(manager)
            && e["operation"] == "Update"
            && e["subresource"] == "approval"
    };
    for entry in entries.iter_mut().filter(|e| !mine(e)) {
        for (key, field) in &owned {
            let field = format!("f:{field}");
            remove_path(
                &mut entry["fieldsV1"],
                &["f:status", "f:conditions", key.as_str(), field.as_str()],
            );
        }
    }
    if !entries.iter().any(mine) {
        entries.push(json!({"manager": manager, "operation": "Update",
            "apiVersion": format!("{GROUP}/v1"), "time": now, "fieldsType": "FieldsV1",
            "fieldsV1": {}, "subresource": "approval"}));
    }
    if let Some(entry) = entries.iter_mut().find(|e| mine(e)) {
        entry["time"] = json!(now);
        for (key, field) in &owned {
            let item = &mut entry["fieldsV1"]["f:status"]["f:conditions"][key.as_str()];
            item[format!("f:{field}")] = json!({});
        }
    }
    entries.retain(|e| !e["fieldsV1"].as_object().is_some_and(Map::is_empty));
}

fn has_managed_fields(obj: &Value) -> bool {
    obj["metadata"]["managedFields"]
        .as_array()
        .is_some_and(|e| !e.is_empty())
}

/// The strategy's `PrepareForUpdate` for the main resource (`None`), `status` or `approval`,
/// before validation: the spec is always kept, the status kept, kept but for its
/// certificate and non-approval conditions, or kept but for its conditions. Condition
/// timestamps come after the field manager has seen the object ([`finish_update`]).
///
/// # Errors
/// A 400 for a body that does not decode.
pub fn prepare_for_update(
    subresource: Option<&str>,
    old: &Value,
    new: &mut Value,
) -> Result<(), ApiError> {
    check_decodable(new)?;
    new["spec"] = old.get("spec").cloned().unwrap_or_else(|| json!({}));
    let old_status = old.get("status").cloned().unwrap_or_else(|| json!({}));
    match subresource {
        Some("status") => {
            for kind in [APPROVED, DENIED] {
                preserve_condition_instances(new, old, kind);
            }
        }
        Some("approval") => {
            let sent = new["status"].get("conditions").cloned();
            new["status"] = old_status;
            match sent {
                Some(conditions) => {
                    object_at(new, "status").insert("conditions".into(), conditions)
                }
                None => object_at(new, "status").remove("conditions"),
            };
        }
        _ => new["status"] = old_status,
    }
    normalize_status(new);
    Ok(())
}

/// `preserveConditionInstances`: when the update keeps the number of conditions of `kind`,
/// they are put back as they were.
fn preserve_condition_instances(new: &mut Value, old: &Value, kind: &str) {
    let old_instances = of_type(old, kind);
    let Some(list) = new["status"]
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let indices: Vec<usize> = list
        .iter()
        .enumerate()
        .filter(|(_, c)| condition_type(c) == kind)
        .map(|(i, _)| i)
        .collect();
    if indices.len() != old_instances.len() {
        return;
    }
    for (index, condition) in indices.into_iter().zip(old_instances) {
        list[index] = condition;
    }
}

fn time_missing(c: &Value, key: &str) -> bool {
    c.get(key)
        .is_none_or(|t| t.is_null() || t.as_str() == Some(""))
}

/// `populateConditionTimestamps`: a condition without `lastUpdateTime` gets now; one without
/// `lastTransitionTime` gets that of the old condition of the same type and status, or now.
fn populate_condition_timestamps(new: &mut Value, old: &Value, now: &str) {
    let old_conditions = conditions(old);
    let Some(list) = new["status"]
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for condition in list.iter_mut().filter(|c| c.is_object()) {
        if time_missing(condition, "lastUpdateTime") {
            condition["lastUpdateTime"] = json!(now);
        }
        if time_missing(condition, "lastTransitionTime") {
            let earlier = old_conditions.iter().find(|o| {
                o["type"] == condition["type"]
                    && o["status"] == condition["status"]
                    && !time_missing(o, "lastTransitionTime")
            });
            condition["lastTransitionTime"] = match earlier {
                Some(o) => o["lastTransitionTime"].clone(),
                None => json!(now),
            };
        }
    }
}

/// Whether a user may `verb` (`approve`, `sign`) requests for `signer`, by name or by its
/// domain's wildcard (`certauthorization.IsAuthorizedForSignerName`).
pub fn authorized_for_signer(store: &Store, user: &UserInfo, verb: &str, signer: &str) -> bool {
    let ask = |name: String| {
        auth::authorize(
            store,
            user,
            &Attributes {
                verb: verb.to_string(),
                resource_request: true,
                group: GROUP.to_string(),
                resource: "signers".to_string(),
                name,
                ..Default::default()
            },
        )
        .allowed
    };
    let domain = signer.split('/').next().unwrap_or_default();
    ask(signer.to_string()) || ask(format!("{domain}/*"))
}

/// The admission decision of an update through `approval` or `status`, made before the
/// write (the store cannot be read while it is written): may this user approve, or sign,
/// requests of the stored request's signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorized {
    signer: String,
    allowed: bool,
}

/// Decides [`Authorized`] for an update of `name` through `subresource`; `None` for other
/// resources, the main resource, or a request that does not exist (the update will 404).
pub fn authorize_update(
    state: &State,
    user: &UserInfo,
    rt: &ResourceType,
    subresource: Option<&str>,
    name: &str,
) -> Option<Authorized> {
    if !serves(rt) {
        return None;
    }
    let verb = match subresource {
        Some("approval") => "approve",
        Some("status") => "sign",
        _ => return None,
    };
    let current = state.store.get(&gr(), "", name)?;
    let signer = current["spec"]["signerName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let allowed = authorized_for_signer(&state.store, user, verb, &signer);
    Some(Authorized { signer, allowed })
}

/// Validation of an update through `subresource` (`ValidateUpdate` of its strategy), after
/// [`prepare_for_update`]. The metadata checks are the server's generic ones.
pub fn validate_update(subresource: Option<&str>, new: &Value, old: &Value) -> Vec<Cause> {
    let mut opts = Options::new(new, Some(old));
    match subresource {
        Some("status") => opts.allow_setting_certificate = true,
        Some("approval") => opts.allow_setting_approval_conditions = true,
        _ => {}
    }
    let mut causes = validate(new, opts);
    for kind in [APPROVED, DENIED, FAILED] {
        if of_type(new, kind).len() < of_type(old, kind).len() {
            causes.push(Cause::forbidden(
                "status.conditions",
                format!(
                    "updates may not remove a condition of type {}",
                    names::go_quote(kind)
                ),
            ));
        }
    }
    if !opts.allow_setting_approval_conditions {
        for kind in [APPROVED, DENIED] {
            // Fewer is refused above. Changed instances are unreachable through v1: the
            // status strategy puts back any it keeps the number of.
            if of_type(new, kind).len() > of_type(old, kind).len() {
                causes.push(Cause::forbidden(
                    "status.conditions",
                    format!(
                        "updates may not add a condition of type {}",
                        names::go_quote(kind)
                    ),
                ));
            }
        }
    }
    let certificate = |o: &Value| bytes_at(o, "/status/certificate").ok().flatten();
    let (new_certificate, old_certificate) = (certificate(new), certificate(old));
    if new_certificate.as_deref().unwrap_or_default()
        != old_certificate.as_deref().unwrap_or_default()
    {
        if !opts.allow_setting_certificate {
            causes.push(Cause::forbidden(
                "status.certificate",
                "updates may not set certificate content",
            ));
        } else if old_certificate.is_some_and(|c| !c.is_empty()) {
            causes.push(Cause::forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
    causes
}

/// What an update (an apply when `applied`) by `manager` through `subresource` does after
/// the field manager has recorded it: condition timestamps (`status`, `approval`), field
/// ownership without what the strategy resets, and the `CertificateApproval` and
/// `CertificateSigning` admission plugins.
///
/// # Errors
/// A 403 when the user may not approve (any update of `approval`) or sign (an update of
/// `status` that changes the certificate or the conditions) the request's signer.
pub fn finish_update(
    subresource: Option<&str>,
    old: &Value,
    new: &mut Value,
    manager: &str,
    applied: bool,
    authorized: Option<&Authorized>,
) -> Result<(), ApiError> {
    let now = super::objects::now();
    if !applied && !has_managed_fields(old) {
        // `skipNonAppliedManager`: an update of an object nobody owns a field of records
        // nothing (only an apply starts tracking again).
        if let Some(meta) = new["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
    } else {
        if subresource == Some("approval") && !applied {
            own_unset_timestamps(new, manager, &now);
        }
        drop_reset_fields(new, manager, subresource);
    }
    if subresource.is_some() {
        populate_condition_timestamps(new, old, &now);
    }
    let name = meta_name(old);
    let signer = old["spec"]["signerName"].as_str().unwrap_or_default();
    let allowed = authorized.is_some_and(|a| a.allowed && a.signer == signer);
    match subresource {
        Some("approval") if !allowed => Err(forbidden(
            &name,
            &format!(
                "user not permitted to approve requests with signerName {}",
                names::go_quote(signer)
            ),
        )),
        Some("status")
            if !allowed
                && (old["status"].get("certificate") != new["status"].get("certificate")
                    || old["status"].get("conditions") != new["status"].get("conditions")) =>
        {
            Err(forbidden(
                &name,
                &format!(
                    "user not permitted to sign requests with signerName {}",
                    names::go_quote(signer)
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// `certificateValidationOptions` as `getValidationOptions` derives them: what the stored
/// object already gets away with stays allowed.
#[derive(Debug, Clone, Copy, Default)]
struct Options {
    allow_setting_approval_conditions: bool,
    allow_setting_certificate: bool,
    allow_both_approved_and_denied: bool,
    allow_legacy_signer_name: bool,
    allow_duplicate_condition_types: bool,
    allow_empty_condition_type: bool,
    allow_arbitrary_certificate: bool,
    allow_unknown_usages: bool,
    allow_duplicate_usages: bool,
}

fn has_duplicates(items: &[String]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, item)| items[..i].contains(item))
}

impl Options {
    fn new(new: &Value, old: Option<&Value>) -> Self {
        let Some(old) = old else {
            return Self::default();
        };
        let types: Vec<String> = conditions(old)
            .iter()
            .map(|c| condition_type(c).to_string())
            .collect();
        let old_usages = usages(old);
        let certificate = |o: &Value| o["status"].get("certificate").cloned();
        let old_certificate = bytes_at(old, "/status/certificate")
            .ok()
            .flatten()
            .unwrap_or_default();
        Self {
            allow_both_approved_and_denied: types.iter().any(|t| t == APPROVED)
                && types.iter().any(|t| t == DENIED),
            allow_legacy_signer_name: old["spec"]["signerName"].as_str() == Some(LEGACY_UNKNOWN),
            allow_duplicate_condition_types: has_duplicates(&types),
            allow_empty_condition_type: types.iter().any(String::is_empty),
            allow_arbitrary_certificate: certificate(new) == certificate(old)
                || x509::validate_certificate_pem(&old_certificate).is_err(),
            allow_unknown_usages: old_usages.iter().any(|u| !USAGES.contains(&u.as_str())),
            allow_duplicate_usages: has_duplicates(&old_usages),
            ..Self::default()
        }
    }
}

/// `validateCertificateSigningRequest` without the object metadata.
fn validate(obj: &Value, opts: Options) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let request = bytes_at(obj, "/spec/request").ok().flatten();
    if let Err(message) = x509::parse_request_pem(request.as_deref().unwrap_or_default(), true) {
        let value = request.as_deref().map_or(Value::Null, |r| json!(b64(r)));
        causes.push(Cause::invalid("spec.request", value, message));
    }
    let usages = usages(obj);
    if usages.is_empty() {
        causes.push(Cause::required("spec.usages", ""));
    }
    let supported: Vec<String> = USAGES.iter().map(|u| u.to_string()).collect();
    if !opts.allow_unknown_usages {
        for (i, usage) in usages.iter().enumerate() {
            if !USAGES.contains(&usage.as_str()) {
                causes.push(Cause::not_supported(
                    &format!("spec.usages[{i}]"),
                    json!(usage),
                    &supported,
                ));
            }
        }
    }
    if !opts.allow_duplicate_usages {
        for (i, usage) in usages.iter().enumerate() {
            if usages[..i].contains(usage) {
                causes.push(Cause::duplicate(&format!("spec.usages[{i}]"), json!(usage)));
            }
        }
    }
    let signer = spec["signerName"].as_str().unwrap_or_default();
    if !opts.allow_legacy_signer_name && signer == LEGACY_UNKNOWN {
        causes.push(Cause::invalid(
            "spec.signerName",
            json!(signer),
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        causes.extend(validate_signer_name("spec.signerName", signer));
    }
    if let Some(seconds) = spec["expirationSeconds"].as_i64()
        && seconds < 600
    {
        causes.push(Cause::invalid(
            "spec.expirationSeconds",
            json!(seconds),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    causes.extend(validate_conditions(obj, opts));
    if !opts.allow_arbitrary_certificate {
        let certificate = bytes_at(obj, "/status/certificate")
            .ok()
            .flatten()
            .unwrap_or_default();
        if let Err(message) = x509::validate_certificate_pem(&certificate) {
            causes.push(Cause::invalid(
                "status.certificate",
                json!("<certificate data>"),
                message,
            ));
        }
    }
    causes
}

fn validate_conditions(obj: &Value, opts: Options) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let (mut approved, mut denied) = (false, false);
    let list = conditions(obj);
    for (i, c) in list.iter().enumerate() {
        let kind = condition_type(c);
        let field = format!("status.conditions[{i}]");
        if !opts.allow_empty_condition_type && kind.is_empty() {
            causes.push(Cause::required(&format!("{field}.type"), ""));
        }
        let allowed: &[&str] = if [APPROVED, DENIED, FAILED].contains(&kind) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        let status = c["status"].as_str().unwrap_or_default();
        if status.is_empty() {
            causes.push(Cause::required(&format!("{field}.status"), ""));
        } else if !allowed.contains(&status) {
            let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
            causes.push(Cause::not_supported(
                &format!("{field}.status"),
                json!(status),
                &allowed,
            ));
        }
        if !opts.allow_both_approved_and_denied {
            let clash = match kind {
                APPROVED => {
                    approved = true;
                    denied
                }
                DENIED => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                causes.push(Cause::invalid(
                    "status.conditions",
                    json!(kind),
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !opts.allow_duplicate_condition_types {
            if seen.contains(&kind) {
                causes.push(Cause::duplicate(&format!("{field}.type"), json!(kind)));
            }
            seen.push(kind);
        }
    }
    causes
}

/// `ValidateSignerName`: `domain/path`, each part made of DNS labels (the domain of at least
/// two), within the lengths a resource name allows.
fn validate_signer_name(field: &str, signer: &str) -> Vec<Cause> {
    const SUBDOMAIN_MAX: usize = 253;
    const LABEL_MAX: usize = 63;
    let mut causes = Vec::new();
    if signer.is_empty() {
        causes.push(Cause::required(field, ""));
        return causes;
    }
    let segments: Vec<&str> = signer.split('/').collect();
    if segments.len() != 2 {
        causes.push(Cause::invalid(
            field,
            json!(signer),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return causes;
    }
    if segments[0].len() > SUBDOMAIN_MAX {
        causes.push(Cause::too_long(field, Some(SUBDOMAIN_MAX)));
    }
    let domain_labels: Vec<&str> = segments[0].split('.').collect();
    for label in &domain_labels {
        let errors = names::dns1123_label(label);
        if !errors.is_empty() {
            for error in errors {
                causes.push(Cause::invalid(
                    field,
                    json!(segments[0]),
                    format!("validating label {}: {error}", names::go_quote(label)),
                ));
            }
            break;
        }
    }
    if domain_labels.len() < 2 {
        causes.push(Cause::invalid(
            field,
            json!(segments[0]),
            "should be a domain with at least two segments separated by dots",
        ));
    }
    for label in segments[1].split('.') {
        let errors = names::dns1123_subdomain(label);
        if !errors.is_empty() {
            for error in errors {
                causes.push(Cause::invalid(
                    field,
                    json!(segments[1]),
                    format!("validating label {}: {error}", names::go_quote(label)),
                ));
            }
            break;
        }
    }
    let max = SUBDOMAIN_MAX + (SUBDOMAIN_MAX + LABEL_MAX + 1) + 1;
    if signer.len() > max {
        causes.push(Cause::too_long(field, Some(max)));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_pem(organization: Option<&str>) -> String {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        if let Some(o) = organization {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, o);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn csr(signer: &str, usages: Value) -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": KIND,
               "metadata": {"name": "a"},
               "spec": {"request": b64(request_pem(None).as_bytes()), "signerName": signer,
                        "usages": usages}})
    }

    fn rendered(result: Result<(), ApiError>) -> Vec<String> {
        match result {
            Err(ApiError::Invalid { causes, .. }) => {
                causes.iter().map(ToString::to_string).collect()
            }
            Err(other) => vec![other.to_string()],
            Ok(()) => vec![],
        }
    }

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            groups: vec!["team".into(), "system:authenticated".into()],
            uid: String::new(),
        }
    }

    #[test]
    fn a_create_records_the_requester_and_drops_what_the_client_claimed() {
        let mut obj = csr("example.com/signer", json!(["client auth"]));
        obj["spec"]["username"] = json!("mallory");
        obj["spec"]["extra"] = json!({"k": ["v"]});
        obj["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        before_create(&mut obj, &alice()).unwrap();
        assert_eq!(obj["spec"]["username"], "alice");
        assert_eq!(
            obj["spec"]["groups"],
            json!(["team", "system:authenticated"])
        );
        assert!(obj["spec"].get("uid").is_none() && obj["spec"].get("extra").is_none());
        assert_eq!(obj["status"], json!({}));
    }

    #[test]
    fn every_spec_rule_is_reported_with_the_real_messages() {
        let mut obj = csr("example", json!(["client auth", "bogus", "client auth"]));
        obj["spec"]["request"] = json!(b64(b"hello"));
        obj["spec"]["expirationSeconds"] = json!(599);
        assert_eq!(
            rendered(before_create(&mut obj, &alice())),
            vec![
                format!("spec.request: Invalid value: \"{}\": PEM block type must be CERTIFICATE REQUEST", b64(b"hello")),
                format!("spec.usages[1]: Unsupported value: \"bogus\": supported values: {}", USAGES.iter().map(|u| format!("\"{u}\"")).collect::<Vec<_>>().join(", ")),
                "spec.usages[2]: Duplicate value: \"client auth\"".to_string(),
                "spec.signerName: Invalid value: \"example\": must be a fully qualified domain and path of the form 'example.com/signer-name'".to_string(),
                "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)".to_string(),
            ]
        );
    }

    #[test]
    fn missing_usages_request_and_signer_are_required() {
        let mut obj = json!({"metadata": {"name": "a"}, "spec": {}});
        assert_eq!(
            rendered(before_create(&mut obj, &alice())),
            vec![
                "spec.request: Invalid value: null: PEM block type must be CERTIFICATE REQUEST",
                "spec.usages: Required value",
                "spec.signerName: Required value",
            ]
        );
    }

    #[test]
    fn signer_names_are_checked_label_by_label() {
        let causes: Vec<String> = validate_signer_name("s", "Example.com/a.B")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(causes.len(), 2);
        assert!(causes[0].starts_with("s: Invalid value: \"Example.com\": validating label \"Example\": a lowercase RFC 1123 label"));
        assert!(causes[1].starts_with(
            "s: Invalid value: \"a.B\": validating label \"B\": a lowercase RFC 1123 subdomain"
        ));
        assert_eq!(
            validate_signer_name("s", "com/x")
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![
                "s: Invalid value: \"com\": should be a domain with at least two segments separated by dots"
            ]
        );
        assert!(validate_signer_name("s", "example.com/my-signer").is_empty());
        assert_eq!(
            rendered(before_create(
                &mut csr(LEGACY_UNKNOWN, json!(["client auth"])),
                &alice()
            )),
            vec![
                "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"
            ]
        );
    }

    #[test]
    fn a_client_certificate_for_system_masters_is_refused_by_admission() {
        let mut obj = csr(KUBE_APISERVER_CLIENT, json!(["client auth"]));
        obj["spec"]["request"] = json!(b64(request_pem(Some("system:masters")).as_bytes()));
        assert_eq!(
            rendered(before_create(&mut obj, &alice())),
            vec![
                "certificatesigningrequests.certificates.k8s.io \"a\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
            ]
        );
    }

    #[test]
    fn a_body_that_is_not_base64_is_a_bad_request() {
        let mut obj = csr("example.com/s", json!(["client auth"]));
        obj["spec"]["request"] = json!("not base64!");
        assert_eq!(
            rendered(before_create(&mut obj, &alice())),
            vec![
                "CertificateSigningRequest in version \"v1\" cannot be handled as a CertificateSigningRequest: illegal base64 data at input byte 3"
            ]
        );
    }

    fn stored() -> Value {
        let mut obj = csr("example.com/s", json!(["client auth"]));
        before_create(&mut obj, &alice()).unwrap();
        obj
    }

    fn approved(at: &str) -> Value {
        json!({"type": "Approved", "status": "True", "reason": "R",
               "lastUpdateTime": at, "lastTransitionTime": at})
    }

    #[test]
    fn the_main_resource_keeps_spec_and_status() {
        let mut old = stored();
        old["status"] = json!({"conditions": [approved("2020-01-01T00:00:00Z")]});
        let mut new = old.clone();
        new["spec"]["signerName"] = json!("example.com/other");
        new["status"] = json!({});
        new["metadata"]["labels"] = json!({"a": "b"});
        prepare_for_update(None, &old, &mut new).unwrap();
        assert_eq!(new["spec"], old["spec"]);
        assert_eq!(new["status"], old["status"]);
        assert_eq!(new["metadata"]["labels"], json!({"a": "b"}));
    }

    #[test]
    fn approval_changes_only_the_conditions_and_stamps_them() {
        let old = stored();
        let mut new = old.clone();
        new["status"] = json!({"certificate": "Zm9v", "conditions": [{"type": "Approved", "status": "True", "reason": "R"}]});
        prepare_for_update(Some("approval"), &old, &mut new).unwrap();
        assert!(new["status"].get("certificate").is_none());
        assert!(validate_update(Some("approval"), &new, &old).is_empty());
        let authorized = Authorized {
            signer: "example.com/s".into(),
            allowed: true,
        };
        finish_update(
            Some("approval"),
            &old,
            &mut new,
            "m",
            false,
            Some(&authorized),
        )
        .unwrap();
        let condition = &new["status"]["conditions"][0];
        assert!(condition["lastUpdateTime"].is_string());
        assert_eq!(condition["lastTransitionTime"], condition["lastUpdateTime"]);
    }

    #[test]
    fn approval_without_the_approve_verb_is_forbidden() {
        let old = stored();
        let mut new = old.clone();
        let denied = Authorized {
            signer: "example.com/s".into(),
            allowed: false,
        };
        assert_eq!(
            rendered(finish_update(
                Some("approval"),
                &old,
                &mut new,
                "m",
                false,
                Some(&denied)
            )),
            vec![
                "certificatesigningrequests.certificates.k8s.io \"a\" is forbidden: user not permitted to approve requests with signerName \"example.com/s\""
            ]
        );
        // A status write that changes nothing needs no sign verb.
        assert!(finish_update(Some("status"), &old, &mut new, "m", false, Some(&denied)).is_ok());
    }

    #[test]
    fn approval_rules_have_the_real_messages() {
        let mut old = stored();
        old["status"] = json!({"conditions": [{"type": "Denied", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        let mut new = old.clone();
        new["status"]["conditions"] = json!([
            {"type": "Approved", "status": "False"},
            {"type": "", "status": ""},
            {"type": "X", "status": "True"},
            {"type": "X", "status": "Maybe"},
        ]);
        prepare_for_update(Some("approval"), &old, &mut new).unwrap();
        let causes: Vec<String> = validate_update(Some("approval"), &new, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            causes,
            vec![
                "status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\"",
                "status.conditions[1].type: Required value",
                "status.conditions[1].status: Required value",
                "status.conditions[3].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
                "status.conditions[3].type: Duplicate value: \"X\"",
                "status.conditions: Forbidden: updates may not remove a condition of type \"Denied\"",
            ]
        );
        let mut both = old.clone();
        both["status"]["conditions"] = json!([
            {"type": "Denied", "status": "True"},
            {"type": "Approved", "status": "True"},
        ]);
        let causes: Vec<String> = validate_update(Some("approval"), &both, &stored())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            causes,
            vec![
                "status.conditions: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive"
            ]
        );
    }

    #[test]
    fn the_status_subresource_keeps_approvals_and_sets_the_certificate_once() {
        let mut old = stored();
        old["status"] = json!({"conditions": [approved("2020-01-01T00:00:00Z")]});
        let mut new = old.clone();
        new["status"]["conditions"][0]["reason"] = json!("Changed");
        new["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Denied", "status": "True"}));
        prepare_for_update(Some("status"), &old, &mut new).unwrap();
        assert_eq!(new["status"]["conditions"][0]["reason"], "R");
        let causes: Vec<String> = validate_update(Some("status"), &new, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            causes,
            vec![
                "status.conditions: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
                "status.conditions: Forbidden: updates may not add a condition of type \"Denied\"",
            ]
        );
        let mut garbage = old.clone();
        garbage["status"]["certificate"] = json!(b64(b"junk"));
        assert_eq!(
            validate_update(Some("status"), &garbage, &old)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![
                "status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block"
            ]
        );
        assert_eq!(
            validate_update(None, &garbage, &old)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![
                "status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block",
                "status.certificate: Forbidden: updates may not set certificate content",
            ]
        );
    }

    #[test]
    fn field_ownership_leaves_out_what_each_strategy_resets() {
        let mut obj = json!({"metadata": {"managedFields": [
            {"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:request": {}}, "f:status": {"f:certificate": {}}}},
            {"manager": "m", "operation": "Update", "subresource": "approval", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:certificate": {}, "f:conditions": {".": {}}}}},
        ]}});
        drop_reset_fields(&mut obj, "m", Some("approval"));
        assert_eq!(
            obj["metadata"]["managedFields"][1]["fieldsV1"],
            json!({"f:status": {"f:conditions": {".": {}}}})
        );
        drop_reset_fields(&mut obj, "m", None);
        assert_eq!(
            obj["metadata"]["managedFields"].as_array().unwrap().len(),
            1
        );
    }

    #[test]
    fn an_approval_owns_the_timestamps_it_left_unset() {
        let mut obj = json!({"metadata": {"managedFields": [
            {"manager": "other", "operation": "Update", "subresource": "approval",
             "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Approved\"}": {"f:lastUpdateTime": {}, "f:reason": {}}}}}}]},
            "status": {"conditions": [{"type": "Approved", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        own_unset_timestamps(&mut obj, "m", "2021-01-01T00:00:00Z");
        let entries = obj["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(
            entries[0]["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Approved\"}": {"f:reason": {}}}}})
        );
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Approved\"}": {"f:lastUpdateTime": {}}}}})
        );
    }

    #[test]
    fn an_update_of_a_request_nobody_owns_fields_of_records_nothing() {
        let old = stored();
        let mut new = old.clone();
        new["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}}]);
        finish_update(None, &old, &mut new, "m", false, None).unwrap();
        assert!(new["metadata"].get("managedFields").is_none());
    }
}
