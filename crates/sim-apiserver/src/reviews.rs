//! Computed, never-stored resources: access reviews (`kubectl auth can-i`), token reviews
//! (how a pod's server, such as controller-runtime's metrics filter, authenticates a bearer
//! token) and ServiceAccount TokenRequests (`kubectl create token`).

use chrono::{Duration, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::apply;
use super::auth::{self, Attributes, UserInfo};
use super::call::{Call, decode};
use super::names::{self, Cause};
use super::registry::ResourceType;
use super::status::{ApiError, GroupResource};

fn attributes_of(spec: &Value, namespace_override: Option<&str>) -> Attributes {
    if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        Attributes {
            verb: s("verb"),
            resource_request: true,
            group: s("group"),
            resource: s("resource"),
            subresource: s("subresource"),
            namespace: namespace_override
                .map(str::to_string)
                .unwrap_or_else(|| s("namespace")),
            name: s("name"),
            path: String::new(),
        }
    } else {
        let n = &spec["nonResourceAttributes"];
        Attributes {
            verb: n["verb"].as_str().unwrap_or_default().to_string(),
            resource_request: false,
            path: n["path"].as_str().unwrap_or_default().to_string(),
            ..Default::default()
        }
    }
}

/// Serves a create of an access review.
///
/// # Errors
/// BadRequest for a malformed body.
pub fn create(call: &Call<'_>, rt: &ResourceType) -> Result<(u16, Value), ApiError> {
    let mut review = decode(&call.content_type, &call.body)?;
    if !review.is_object() {
        return Err(ApiError::BadRequest(
            "the object provided is unrecognized or malformed".into(),
        ));
    }
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    if rt.resource == "tokenreviews" {
        return token_review(call, review);
    }
    if rt.resource == "selfsubjectreviews" {
        return Ok((201, self_subject_review(call.user, review)));
    }
    if rt.resource == "selfsubjectrulesreviews" {
        return self_subject_rules_review(call, &review);
    }
    let spec = review["spec"].clone();
    let (user, ns) = match rt.resource.as_str() {
        "selfsubjectaccessreviews" => (call.user.clone(), None),
        _ => {
            let user = UserInfo {
                name: spec["user"].as_str().unwrap_or_default().to_string(),
                groups: spec["groups"]
                    .as_array()
                    .map(|g| {
                        g.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
                uid: spec["uid"].as_str().unwrap_or_default().to_string(),
            };
            let ns = (rt.resource == "localsubjectaccessreviews")
                .then_some(call.info.namespace.as_str());
            (user, ns)
        }
    };
    let decision = auth::authorize(&call.state.store, &user, &attributes_of(&spec, ns));
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!(rt.kind);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    review["status"] = status;
    Ok((201, review))
}

/// A SelfSubjectReview: the requester's own user, stamped with the time of the request.
///
/// # Caveats
/// A ServiceAccount token's `extra` (its credential id, pod and node) is left out.
fn self_subject_review(user: &UserInfo, mut review: Value) -> Value {
    let mut who = json!({"username": user.name});
    if !user.uid.is_empty() {
        who["uid"] = json!(user.uid);
    }
    if !user.groups.is_empty() {
        who["groups"] = json!(user.groups);
    }
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    review["kind"] = json!("SelfSubjectReview");
    review["metadata"]["creationTimestamp"] = json!(super::objects::now());
    review["status"] = json!({"userInfo": who});
    review
}

/// A SelfSubjectRulesReview: the rules of every RBAC binding of the requester in
/// `spec.namespace` (the cluster's bindings, then the namespace's), as the RBAC
/// authorizer's `RulesFor` lists them; the Node authorizer before it lists none for users
/// that are not nodes. The answer carries no spec, as the real server's.
///
/// # Errors
/// BadRequest without a namespace, as the real server refuses it.
fn self_subject_rules_review(call: &Call<'_>, review: &Value) -> Result<(u16, Value), ApiError> {
    let namespace = review["spec"]["namespace"].as_str().unwrap_or_default();
    if namespace.is_empty() {
        return Err(ApiError::BadRequest("no namespace on request".into()));
    }
    let rules = auth::rules_for(&call.state.store, call.user, namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rules {
        let list = |key: &str| {
            rule.get(key)
                .cloned()
                .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        };
        if let Some(resources) = list("resources") {
            let mut out = json!({"verbs": rule["verbs"].clone(), "resources": resources});
            if let Some(groups) = list("apiGroups") {
                out["apiGroups"] = groups;
            }
            if let Some(names) = list("resourceNames") {
                out["resourceNames"] = names;
            }
            resource_rules.push(out);
        }
        if let Some(urls) = list("nonResourceURLs") {
            non_resource_rules
                .push(json!({"verbs": rule["verbs"].clone(), "nonResourceURLs": urls}));
        }
    }
    Ok((
        201,
        json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
               "metadata": {"creationTimestamp": null}, "spec": {},
               "status": {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                          "incomplete": false}}),
    ))
}

/// The `spec.audiences` of a TokenReview or TokenRequest (empty when none are named).
fn audiences_of(spec: &Value) -> Vec<String> {
    spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// A TokenReview, as kube-apiserver's registry answers it: a token it accepts is
/// `authenticated`, with its user (a ServiceAccount's with the token's credential id) and
/// the audiences asked for that the token was issued for (the API server's own when none
/// are asked); any other gets an empty user and the authenticators' `error`. The request's
/// `managedFields` entry is recorded as the create handler records it.
///
/// # Caveats
/// A token asked for audiences it was not issued for is refused without the real error
/// text.
fn token_review(call: &Call<'_>, mut review: Value) -> Result<(u16, Value), ApiError> {
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::BadRequest(
            "token is required for TokenReview in authentication".into(),
        ));
    }
    let asked = audiences_of(&review["spec"]);
    let asked = if asked.is_empty() {
        API_AUDIENCES.iter().map(|a| a.to_string()).collect()
    } else {
        asked
    };
    let status = match call.state.tokens.review(token, &call.state.store) {
        Ok(found) => {
            let issued_for: Vec<String> = match found.audiences {
                Some(issued) if !issued.is_empty() => issued,
                Some(_) => API_AUDIENCES.iter().map(|a| a.to_string()).collect(),
                None => asked.clone(),
            };
            let audiences: Vec<&String> = asked.iter().filter(|a| issued_for.contains(a)).collect();
            if audiences.is_empty() {
                json!({"user": {}, "error": auth::TokenError::Unknown.to_string()})
            } else {
                let user = found.user;
                let mut who = json!({"username": user.name});
                if !user.uid.is_empty() {
                    who["uid"] = json!(user.uid);
                }
                who["groups"] = json!(user.groups);
                if !found.extra.is_empty() {
                    who["extra"] = json!(found.extra);
                }
                json!({"authenticated": true, "user": who, "audiences": audiences})
            }
        }
        Err(e) => json!({"user": {}, "error": e.to_string()}),
    };
    let now = now_text();
    let mut recorded = review.clone();
    without_nulls(&mut recorded);
    if let Some(m) = recorded["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    recorded["apiVersion"] = json!("authentication.k8s.io/v1");
    recorded["kind"] = json!("TokenReview");
    apply::record_update(
        &Value::Null,
        &mut recorded,
        &call.manager,
        "TokenReview",
        &now,
        None,
    );
    let mut entries = recorded["metadata"]["managedFields"].clone();
    for entry in entries.as_array_mut().into_iter().flatten() {
        if let Some(map) = entry["fieldsV1"]
            .pointer_mut("/f:spec")
            .and_then(Value::as_object_mut)
        {
            map.remove(".");
        }
    }
    if entries.as_array().is_some_and(|e| !e.is_empty()) {
        review["metadata"]["managedFields"] = entries;
    }
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    review["kind"] = json!("TokenReview");
    review["status"] = status;
    Ok((201, review))
}

fn now_text() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The audiences of a token whose request names none (the apiserver's `--api-audiences`,
/// which default to its service-account issuer).
const API_AUDIENCES: &[&str] = &["https://kubernetes.default.svc.cluster.local"];

/// Group and kind the TokenRequest registry names in its errors.
const TOKEN_REQUEST: (&str, &str) = ("authentication.k8s.io", "TokenRequest");

/// `schema.FromAPIVersionAndKind`'s group and version (both empty when unparsable).
fn group_version(api_version: &str) -> (&str, &str) {
    if api_version.is_empty() || api_version == "/" {
        return ("", "");
    }
    match api_version.matches('/').count() {
        0 => ("", api_version),
        1 => api_version.split_once('/').unwrap_or(("", "")),
        _ => ("", ""),
    }
}

fn meta<'v>(obj: &'v Value, key: &str) -> &'v str {
    obj["metadata"][key].as_str().unwrap_or_default()
}

/// Drops `null`s, which the typed request decodes to nothing.
fn without_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(without_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(without_nulls),
        _ => {}
    }
}

/// The managedFields entry of the request: the field manager runs in the create handler on
/// the decoded, defaulted request and records what differs from an empty TokenRequest (whose
/// `status.token` is `""`), before the registry fills in anything.
fn request_managed_fields(request: &Value, manager: &str, now: &str) -> Value {
    let mut recorded = request.clone();
    without_nulls(&mut recorded);
    if recorded["status"]["token"] == json!("")
        && let Some(status) = recorded["status"].as_object_mut()
    {
        status.remove("token");
    }
    recorded["apiVersion"] = json!("authentication.k8s.io/v1");
    recorded["kind"] = json!("TokenRequest");
    if let Some(m) = recorded["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    apply::record_update(
        &Value::Null,
        &mut recorded,
        manager,
        "TokenRequest",
        now,
        Some("token"),
    );
    let mut entries = recorded["metadata"]["managedFields"].clone();
    // spec, status and spec.boundObjectRef are structs, which have no "." entry of their own.
    for entry in entries.as_array_mut().into_iter().flatten() {
        for path in ["/f:spec", "/f:status", "/f:spec/f:boundObjectRef"] {
            if let Some(map) = entry["fieldsV1"]
                .pointer_mut(path)
                .and_then(Value::as_object_mut)
            {
                map.remove(".");
            }
        }
    }
    entries
}

/// The uid of the object a token is bound to, checked as the registry checks it.
fn bound_object_uid(call: &Call<'_>, reference: &Value) -> Result<String, ApiError> {
    let s = |k: &str| reference[k].as_str().unwrap_or_default();
    let (group, version) = group_version(s("apiVersion"));
    let (kind, name) = (s("kind"), s("name"));
    let namespace = call.info.namespace.as_str();
    let lookup = |resource: &str, namespace: &str| {
        let gr = GroupResource::new("", resource);
        call.state
            .store
            .get(&gr, namespace, name)
            .ok_or_else(|| ApiError::not_found(&gr, name))
    };
    let object = match (group, kind) {
        ("", "Pod") => {
            let pod = lookup("pods", namespace)?;
            if pod["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or_default()
                != call.info.name
            {
                return Err(ApiError::BadRequest(format!(
                    "cannot bind token for serviceaccount {} to pod running with different serviceaccount name.",
                    names::go_quote(&call.info.name)
                )));
            }
            pod
        }
        ("", "Node") => lookup("nodes", "")?,
        ("", "Secret") => lookup("secrets", namespace)?,
        _ => {
            return Err(ApiError::BadRequest(format!(
                "cannot bind token to object of type {group}/{version}, Kind={kind}"
            )));
        }
    };
    let uid = meta(&object, "uid").to_string();
    let wanted = s("uid");
    if !wanted.is_empty() && wanted != uid {
        return Err(ApiError::conflict(
            &GroupResource::new(group, kind),
            name,
            format!(
                "the UID in the bound object reference ({wanted}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ));
    }
    Ok(uid)
}

/// Serves `POST …/serviceaccounts/NAME/token` as `TokenREST.Create` does
/// (`pkg/registry/core/serviceaccount/storage/token.go`): the request is answered with the
/// ServiceAccount's uid, the default audiences, a managedFields entry for the `token`
/// subresource and `spec.boundObjectRef` written out even when `null`.
///
/// # Errors
/// BadRequest for an empty or malformed body or an unsupported bound object; Invalid for a
/// name or namespace other than the URL's or an expiration outside [10 minutes, 2^32 s];
/// NotFound for a missing ServiceAccount or bound object; Conflict for a uid that does not match.
pub fn token_request(call: &Call<'_>, _rt: &ResourceType) -> Result<(u16, Value), ApiError> {
    if call.body.is_empty() {
        return Err(ApiError::BadRequest(
            "the object provided is unrecognized (must be of type TokenRequest): couldn't get version/kind; json parse error: unexpected end of JSON input (<empty>)".into(),
        ));
    }
    let mut request = decode(&call.content_type, &call.body)?;
    if !request.is_object() {
        return Err(ApiError::BadRequest(
            "the object provided is unrecognized or malformed".into(),
        ));
    }
    let (group, kind) = TOKEN_REQUEST;
    let (namespace, name) = (call.info.namespace.as_str(), call.info.name.as_str());
    // Defaulting (SetDefaults_TokenRequestSpec), then the field manager.
    for key in ["metadata", "spec"] {
        if !request[key].is_object() {
            request[key] = json!({});
        }
    }
    if request["spec"]["expirationSeconds"].is_null() {
        request["spec"]["expirationSeconds"] = json!(3600);
    }
    let now = Utc::now();
    let now_text = now.to_rfc3339_opts(SecondsFormat::Secs, true);
    let managed_fields = request_managed_fields(&request, &call.manager, &now_text);

    let mismatch = |field: &str, found: &str, what: &str| {
        ApiError::invalid(
            kind,
            group,
            name,
            vec![Cause::invalid(
                field,
                json!(found),
                format!("must match the service account {what} if specified"),
            )],
        )
    };
    let requested_name = meta(&request, "name");
    if !requested_name.is_empty() && requested_name != name {
        return Err(mismatch("metadata.name", requested_name, "name"));
    }
    let requested_namespace = meta(&request, "namespace");
    if !requested_namespace.is_empty() && requested_namespace != namespace {
        return Err(mismatch(
            "metadata.namespace",
            requested_namespace,
            "namespace",
        ));
    }
    let gr = GroupResource::new("", "serviceaccounts");
    let sa = call
        .state
        .store
        .get(&gr, namespace, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let sa_uid = meta(&sa, "uid").to_string();
    let requested_uid = meta(&request, "uid");
    if !requested_uid.is_empty() && requested_uid != sa_uid {
        // TokenRequestServiceAccountUIDValidation is on by default in 1.34.
        return Err(ApiError::conflict(
            &GroupResource::new(group, kind),
            name,
            format!(
                "the UID in the token request ({requested_uid}) does not match the UID of the service account ({sa_uid})"
            ),
        ));
    }
    if request["spec"]["audiences"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        request["spec"]["audiences"] = json!(API_AUDIENCES);
    }
    request["metadata"]["name"] = json!(name);
    request["metadata"]["namespace"] = json!(namespace);
    request["metadata"]["uid"] = json!(sa_uid);
    request["metadata"]["creationTimestamp"] = json!(now_text);

    let seconds = request["spec"]["expirationSeconds"].as_i64().unwrap_or(0);
    let mut causes = Vec::new();
    if seconds < 600 {
        causes.push(Cause::invalid(
            "spec.expirationSeconds",
            json!(seconds),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if seconds > 1 << 32 {
        causes.push(Cause::invalid(
            "spec.expirationSeconds",
            json!(seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(kind, group, "", causes));
    }
    let reference = request["spec"]["boundObjectRef"].clone();
    if reference.is_object() {
        bound_object_uid(call, &reference)?;
    } else {
        request["spec"]["boundObjectRef"] = Value::Null;
    }

    let expires = now + Duration::seconds(seconds);
    let audiences = audiences_of(&request["spec"]);
    let token = call
        .state
        .tokens
        .issue_for(namespace, name, &sa_uid, Some(expires), &audiences);
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!(kind);
    if managed_fields.is_array() {
        request["metadata"]["managedFields"] = managed_fields;
    }
    request["status"] = json!({"token": token,
        "expirationTimestamp": expires.to_rfc3339_opts(SecondsFormat::Secs, true)});
    Ok((201, request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{self, Query};
    use crate::state::{ApiServerConfig, State};
    use bytes::Bytes;
    use hyper::Method;

    const ACCOUNTS: &str = "/api/v1/namespaces/default/serviceaccounts";

    fn send(
        state: &State,
        method: Method,
        path: &str,
        body: &str,
    ) -> Result<(u16, Value), ApiError> {
        let query = Query::parse(None);
        let info = request::parse(&method, path, &query);
        let user = UserInfo::admin();
        Call {
            state,
            info: &info,
            query: &query,
            content_type: "application/json".into(),
            body: Bytes::from(body.to_string()),
            manager: "kubectl".into(),
            user: &user,
        }
        .serve()
    }

    /// A state with the ServiceAccount `sa` in `default`, and its uid.
    fn with_account() -> (State, String) {
        let state = State::new(ApiServerConfig::default(), String::new());
        let created = send(
            &state,
            Method::POST,
            ACCOUNTS,
            r#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"sa"}}"#,
        );
        let uid = created
            .ok()
            .and_then(|(_, sa)| sa["metadata"]["uid"].as_str().map(str::to_string))
            .unwrap_or_default();
        (state, uid)
    }

    fn token(state: &State, body: &str) -> Result<(u16, Value), ApiError> {
        send(state, Method::POST, &format!("{ACCOUNTS}/sa/token"), body)
    }

    fn review_token(state: &State, token: &str) -> Result<(u16, Value), ApiError> {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                          "spec": {"token": token}});
        send(
            state,
            Method::POST,
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &body.to_string(),
        )
    }

    #[test]
    fn a_token_review_names_the_account_of_an_issued_token_and_says_why_it_refuses_another_or_an_expired_one()
     {
        let (state, uid) = with_account();
        let (_, issued) = token(
            &state,
            r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let issued = issued["status"]["token"].as_str().unwrap_or_default();
        let (code, review) = review_token(&state, issued).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(code, 201);
        assert_eq!(review["kind"], "TokenReview");
        assert_eq!(review["status"]["authenticated"], true);
        assert_eq!(
            review["status"]["user"]["username"],
            "system:serviceaccount:default:sa"
        );
        assert_eq!(review["status"]["user"]["uid"], json!(uid));
        assert_eq!(
            review["status"]["audiences"],
            json!(["https://kubernetes.default.svc.cluster.local"])
        );
        let (_, unknown) = review_token(&state, "not-a-token").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            unknown["status"],
            json!({"user": {}, "error": "invalid bearer token"})
        );
        let expired = state.tokens.issue(
            "default",
            "sa",
            &uid,
            Some(Utc::now() - Duration::seconds(1)),
        );
        let (_, expired) = review_token(&state, &expired).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            expired["status"],
            json!({"user": {},
                "error": "[invalid bearer token, service account token has expired]"})
        );
        match review_token(&state, "") {
            Err(ApiError::BadRequest(message)) => {
                assert_eq!(
                    message,
                    "token is required for TokenReview in authentication"
                );
            }
            other => panic!("an empty token is a bad request, not {other:?}"),
        }
    }

    #[test]
    fn a_token_request_answers_with_the_account_s_uid_and_a_managed_fields_entry() {
        let (state, uid) = with_account();
        let (code, answer) = token(
            &state,
            r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(code, 201);
        assert!(!uid.is_empty());
        assert_eq!(answer["metadata"]["uid"], json!(uid));
        assert_eq!(answer["metadata"]["name"], "sa");
        assert_eq!(answer["metadata"]["namespace"], "default");
        let entries = answer["metadata"]["managedFields"].as_array().cloned();
        let entry = entries.as_deref().and_then(<[Value]>::first).cloned();
        let mut entry = entry.unwrap_or_default();
        assert!(entry["time"].is_string());
        entry["time"] = json!("<time>");
        assert_eq!(
            entry,
            json!({"manager": "kubectl", "operation": "Update", "apiVersion": "authentication.k8s.io/v1",
                   "time": "<time>", "fieldsType": "FieldsV1",
                   "fieldsV1": {"f:spec": {"f:expirationSeconds": {}}}, "subresource": "token"})
        );
        assert_eq!(
            answer["spec"],
            json!({"audiences": ["https://kubernetes.default.svc.cluster.local"],
                   "expirationSeconds": 3600, "boundObjectRef": null})
        );
        assert!(answer["status"]["token"].is_string());
        assert!(answer["status"]["expirationTimestamp"].is_string());
    }

    #[test]
    fn the_managed_fields_record_what_the_request_set_that_an_empty_request_lacks() {
        let (state, _) = with_account();
        let (_, answer) = token(
            &state,
            r#"{"metadata":{"labels":{"x":"y"}},"spec":{"audiences":[],"expirationSeconds":7200},"status":{"token":"zz"}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            answer["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}},
                   "f:spec": {"f:audiences": {}, "f:expirationSeconds": {}},
                   "f:status": {"f:token": {}}})
        );
        assert_eq!(answer["metadata"]["labels"], json!({"x": "y"}));
        assert_eq!(answer["spec"]["expirationSeconds"], 7200);
        // An empty audience list gets the default audiences.
        assert_eq!(
            answer["spec"]["audiences"],
            json!(["https://kubernetes.default.svc.cluster.local"])
        );
    }

    #[test]
    fn a_short_expiration_is_invalid_without_a_name_rather_than_raised() {
        let (state, _) = with_account();
        let e = token(&state, r#"{"spec":{"expirationSeconds":599}}"#).err();
        assert_eq!(
            e.as_ref().map(ToString::to_string).as_deref(),
            Some(
                "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
            )
        );
        assert_eq!(
            e.map(|e| e.to_status()["details"].get("name").cloned()),
            Some(None)
        );
    }

    #[test]
    fn names_namespaces_and_uids_other_than_the_account_s_are_refused() {
        let (state, uid) = with_account();
        let e = token(&state, r#"{"metadata":{"name":"other"},"spec":{}}"#).err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some(
                "TokenRequest.authentication.k8s.io \"sa\" is invalid: metadata.name: Invalid value: \"other\": must match the service account name if specified"
            )
        );
        let e = token(
            &state,
            r#"{"metadata":{"namespace":"kube-system"},"spec":{}}"#,
        )
        .err();
        assert_eq!(e.map(|e| e.code()), Some(422));
        let other = "00000000-0000-0000-0000-000000000002";
        let e = token(
            &state,
            &format!(r#"{{"metadata":{{"uid":"{other}"}},"spec":{{}}}}"#),
        )
        .err();
        assert_eq!(
            e.map(|e| e.to_status()),
            Some(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("Operation cannot be fulfilled on TokenRequest.authentication.k8s.io \"sa\": the UID in the token request ({other}) does not match the UID of the service account ({uid})"),
                "reason": "Conflict", "code": 409,
                "details": {"name": "sa", "group": "authentication.k8s.io", "kind": "TokenRequest"}})
            )
        );
    }

    #[test]
    fn bound_objects_must_exist_be_supported_and_match() {
        let (state, _) = with_account();
        let bound = |reference: &str| {
            token(
                &state,
                &format!(r#"{{"spec":{{"boundObjectRef":{reference}}}}}"#),
            )
            .err()
            .map(|e| (e.code(), e.to_string()))
        };
        assert_eq!(
            bound(r#"{"kind":"Pod","apiVersion":"v1","name":"nopod"}"#),
            Some((404, "pods \"nopod\" not found".to_string()))
        );
        assert_eq!(
            bound(r#"{"kind":"Secret","apiVersion":"v1","name":"nosecret"}"#),
            Some((404, "secrets \"nosecret\" not found".to_string()))
        );
        assert_eq!(
            bound(r#"{"kind":"ConfigMap","apiVersion":"v1","name":"a"}"#),
            Some((
                400,
                "cannot bind token to object of type /v1, Kind=ConfigMap".to_string()
            ))
        );
        let secret = send(
            &state,
            Method::POST,
            "/api/v1/namespaces/default/secrets",
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}"#,
        );
        assert!(secret.is_ok(), "{secret:?}");
        assert_eq!(
            bound(r#"{"kind":"Secret","apiVersion":"v1","name":"s","uid":"u"}"#),
            Some((409, "Operation cannot be fulfilled on Secret \"s\": the UID in the bound object reference (u) does not match the UID in record. The object might have been deleted and then recreated".to_string()))
        );
        assert_eq!(
            bound(r#"{"kind":"Secret","apiVersion":"v1","name":"s"}"#),
            None
        );
    }

    #[test]
    fn an_empty_body_is_refused_as_the_decoder_refuses_it() {
        let (state, _) = with_account();
        assert_eq!(
            token(&state, "").err().map(|e| e.to_string()).as_deref(),
            Some(
                "the object provided is unrecognized (must be of type TokenRequest): couldn't get version/kind; json parse error: unexpected end of JSON input (<empty>)"
            )
        );
    }
}
