//! Who is asking and may they: bearer tokens (the admin's and one per ServiceAccount),
//! impersonation, and RBAC evaluation of Roles, ClusterRoles and their bindings, with the
//! real server's forbidden messages.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::status::{ApiError, GroupResource};
use super::store::Store;

/// The group whose members may do anything (as in a real cluster).
pub const MASTERS: &str = "system:masters";
/// The admin user the harness and `opconform sim`'s kubeconfig use.
pub const ADMIN_USER: &str = "opconform-admin";

/// An authenticated identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (`system:serviceaccount:ns:name` for ServiceAccounts).
    pub name: String,
    /// Groups, including `system:authenticated`.
    pub groups: Vec<String>,
    /// UID (ServiceAccount uid), may be empty.
    pub uid: String,
}

impl UserInfo {
    /// The admin identity.
    pub fn admin() -> Self {
        Self {
            name: ADMIN_USER.into(),
            groups: vec![MASTERS.into(), "system:authenticated".into()],
            uid: String::new(),
        }
    }

    /// The identity of a ServiceAccount.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            uid: uid.into(),
        }
    }

    /// The anonymous identity (only a few public paths accept it).
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            uid: String::new(),
        }
    }

    /// `(namespace, name)` if this is a ServiceAccount.
    pub fn as_service_account(&self) -> Option<(&str, &str)> {
        let rest = self.name.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
    }
}

#[derive(Debug, Clone)]
enum TokenOwner {
    Admin,
    User(UserInfo),
    ServiceAccount {
        namespace: String,
        name: String,
        uid: String,
        expires: Option<DateTime<Utc>>,
        /// The token's own id (a JWT's `jti`), named in the credential-id extra.
        id: String,
        /// The audiences it was issued for; none means the API server's own.
        audiences: Vec<String>,
    },
}

/// A token the server accepts, and what it knows of it besides its user.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Who it belongs to.
    pub user: UserInfo,
    /// The user's extra values (`authentication.kubernetes.io/credential-id`).
    pub extra: BTreeMap<String, Vec<String>>,
    /// The audiences it was issued for, `None` for tokens valid for any audience.
    pub audiences: Option<Vec<String>>,
}

/// Why a token is refused, as kube-apiserver's union of token authenticators says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No authenticator knows the token.
    #[error("invalid bearer token")]
    Unknown,
    /// A service-account JWT of this server's issuer that none of its keys signed.
    #[error("[invalid bearer token, invalid signature, no keys found]")]
    BadSignature,
    /// A service-account token past its expiry.
    #[error("[invalid bearer token, service account token has expired]")]
    Expired,
}

/// The bearer tokens the server accepts.
#[derive(Debug)]
pub struct Tokens {
    tokens: Mutex<HashMap<String, TokenOwner>>,
}

/// A fresh random token.
pub fn random_token() -> String {
    use base64::Engine as _;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Tokens {
    /// Tokens with one admin token.
    pub fn new(admin_token: &str) -> Self {
        let mut tokens = HashMap::new();
        tokens.insert(admin_token.to_string(), TokenOwner::Admin);
        Self {
            tokens: Mutex::new(tokens),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, TokenOwner>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Issues a token for a ServiceAccount (valid while that ServiceAccount, with that uid, exists).
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        expires: Option<DateTime<Utc>>,
    ) -> String {
        self.issue_for(namespace, name, uid, expires, &[])
    }

    /// Issues a token for a ServiceAccount for `audiences` (none: the API server's own).
    pub fn issue_for(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        expires: Option<DateTime<Utc>>,
        audiences: &[String],
    ) -> String {
        let token = random_token();
        self.lock().insert(
            token.clone(),
            TokenOwner::ServiceAccount {
                namespace: namespace.into(),
                name: name.into(),
                uid: uid.into(),
                expires,
                id: uuid::Uuid::new_v4().to_string(),
                audiences: audiences.to_vec(),
            },
        );
        token
    }

    /// Issues a token for a named user with groups (kubelets, controllers).
    pub fn issue_user(&self, name: &str, groups: &[&str]) -> String {
        let token = random_token();
        let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        self.lock().insert(
            token.clone(),
            TokenOwner::User(UserInfo {
                name: name.to_string(),
                groups,
                uid: String::new(),
            }),
        );
        token
    }

    /// Forgets every token of a ServiceAccount.
    pub fn revoke(&self, namespace: &str, name: &str) {
        self.lock().retain(|_, owner| {
            !matches!(owner, TokenOwner::ServiceAccount { namespace: n, name: s, .. } if n == namespace && s == name)
        });
    }

    /// Finds one valid token of a ServiceAccount, issuing one if it has none.
    pub fn for_service_account(&self, namespace: &str, name: &str, uid: &str) -> String {
        let found = self.lock().iter().find_map(|(token, owner)| match owner {
            TokenOwner::ServiceAccount {
                namespace: n,
                name: s,
                uid: u,
                expires: None,
                ..
            } if n == namespace && s == name && u == uid => Some(token.clone()),
            _ => None,
        });
        found.unwrap_or_else(|| self.issue(namespace, name, uid, None))
    }

    /// Who a bearer token belongs to; `None` when unknown or expired.
    pub fn authenticate(&self, token: &str, store: &Store) -> Option<UserInfo> {
        self.review(token, store).ok().map(|a| a.user)
    }

    /// What the server knows of a bearer token, or why it refuses it (a TokenReview's
    /// answer).
    ///
    /// # Errors
    /// When the token is unknown, expired, or of a ServiceAccount that no longer exists.
    pub fn review(&self, token: &str, store: &Store) -> Result<Authenticated, TokenError> {
        let Some(owner) = self.lock().get(token).cloned() else {
            return Err(if is_service_account_jwt(token) {
                TokenError::BadSignature
            } else {
                TokenError::Unknown
            });
        };
        let plain = |user| Authenticated {
            user,
            extra: BTreeMap::new(),
            audiences: None,
        };
        match owner {
            TokenOwner::Admin => Ok(plain(UserInfo::admin())),
            TokenOwner::User(user) => Ok(plain(user)),
            TokenOwner::ServiceAccount {
                namespace,
                name,
                uid,
                expires,
                id,
                audiences,
            } => {
                if expires.is_some_and(|e| e < Utc::now()) {
                    return Err(TokenError::Expired);
                }
                let sa = store
                    .get(
                        &GroupResource::new("", "serviceaccounts"),
                        &namespace,
                        &name,
                    )
                    .ok_or(TokenError::Unknown)?;
                if sa["metadata"]["uid"].as_str() != Some(&uid) {
                    return Err(TokenError::Unknown);
                }
                let extra = BTreeMap::from([(
                    "authentication.kubernetes.io/credential-id".to_string(),
                    vec![format!("JTI={id}")],
                )]);
                Ok(Authenticated {
                    user: UserInfo::service_account(&namespace, &name, &uid),
                    extra,
                    audiences: Some(audiences),
                })
            }
        }
    }
}

/// The issuer of the service-account tokens (the API server's `--service-account-issuer`).
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Whether `token` reads as a JWT of [`SERVICE_ACCOUNT_ISSUER`]: one the service-account
/// authenticator checks the signature of (rather than passing it on).
fn is_service_account_jwt(token: &str) -> bool {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .is_some_and(|claims| claims["iss"] == SERVICE_ACCOUNT_ISSUER)
}

/// What a request wants to do, in RBAC terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// get, list, watch, create, update, patch, delete, deletecollection, impersonate, …
    pub verb: String,
    /// Whether this is a resource request (else a non-resource path).
    pub resource_request: bool,
    /// API group.
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource or empty.
    pub subresource: String,
    /// Namespace or empty.
    pub namespace: String,
    /// Object name or empty.
    pub name: String,
    /// URL path for non-resource requests.
    pub path: String,
}

/// The decision, with the reason a SubjectAccessReview reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed or not.
    pub allowed: bool,
    /// Which binding allowed it (empty when denied).
    pub reason: String,
}

/// Evaluates RBAC for `user` doing `attrs`, reading roles and bindings from `store`.
pub fn authorize(store: &Store, user: &UserInfo, attrs: &Attributes) -> Decision {
    if user.groups.iter().any(|g| g == MASTERS) {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let rbac = |r: &str| GroupResource::new("rbac.authorization.k8s.io", r);
    let (crbs, _) = store.list(&rbac("clusterrolebindings"), None);
    for binding in &crbs {
        if !binds(binding, user) {
            continue;
        }
        if let Some(rules) = role_rules(store, binding, "")
            && rules.iter().any(|rule| rule_allows(rule, attrs))
        {
            return allowed_by("ClusterRoleBinding", binding, user);
        }
    }
    if !attrs.namespace.is_empty() {
        let (rbs, _) = store.list(&rbac("rolebindings"), Some(&attrs.namespace));
        for binding in &rbs {
            if !binds(binding, user) {
                continue;
            }
            if let Some(rules) = role_rules(store, binding, &attrs.namespace)
                && rules.iter().any(|rule| rule_allows(rule, attrs))
            {
                return allowed_by("RoleBinding", binding, user);
            }
        }
    }
    Decision {
        allowed: false,
        reason: String::new(),
    }
}

/// Every rule RBAC grants `user` in `namespace` (`DefaultRuleResolver.RulesFor`): the
/// rules of the roles of the ClusterRoleBindings that bind the user, then of the
/// RoleBindings of `namespace`, in the order they are listed. The privileged group
/// `system:masters` lists what its bindings grant, as the real server lists it.
pub fn rules_for(store: &Store, user: &UserInfo, namespace: &str) -> Vec<Value> {
    let rbac = |r: &str| GroupResource::new("rbac.authorization.k8s.io", r);
    let mut rules = Vec::new();
    let (crbs, _) = store.list(&rbac("clusterrolebindings"), None);
    for binding in crbs.iter().filter(|b| binds(b, user)) {
        rules.extend(role_rules(store, binding, "").unwrap_or_default());
    }
    let (rbs, _) = store.list(&rbac("rolebindings"), Some(namespace));
    for binding in rbs.iter().filter(|b| binds(b, user)) {
        rules.extend(role_rules(store, binding, namespace).unwrap_or_default());
    }
    rules
}

fn allowed_by(kind: &str, binding: &Value, user: &UserInfo) -> Decision {
    let name = binding["metadata"]["name"].as_str().unwrap_or_default();
    let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
    let role = binding["roleRef"]["name"].as_str().unwrap_or_default();
    let ns = binding["metadata"]["namespace"]
        .as_str()
        .map(|ns| format!("/{ns}"))
        .unwrap_or_default();
    Decision {
        allowed: true,
        reason: format!(
            "RBAC: allowed by {kind} \"{name}{ns}\" of {role_kind} \"{role}\" to User \"{}\"",
            user.name
        ),
    }
}

fn binds(binding: &Value, user: &UserInfo) -> bool {
    let Some(subjects) = binding["subjects"].as_array() else {
        return false;
    };
    let binding_ns = binding["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    subjects.iter().any(|s| {
        let name = s["name"].as_str().unwrap_or_default();
        match s["kind"].as_str() {
            Some("User") => name == user.name,
            Some("Group") => user.groups.iter().any(|g| g == name),
            Some("ServiceAccount") => {
                let ns = s["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(binding_ns);
                user.name == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

fn role_rules(store: &Store, binding: &Value, namespace: &str) -> Option<Vec<Value>> {
    let role_ref = &binding["roleRef"];
    let name = role_ref["name"].as_str()?;
    let role = match role_ref["kind"].as_str()? {
        "ClusterRole" => store.get(
            &GroupResource::new("rbac.authorization.k8s.io", "clusterroles"),
            "",
            name,
        )?,
        "Role" if !namespace.is_empty() => store.get(
            &GroupResource::new("rbac.authorization.k8s.io", "roles"),
            namespace,
            name,
        )?,
        _ => return None,
    };
    role["rules"].as_array().cloned()
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// Whether one PolicyRule allows the request (RBAC's `RuleAllows`).
pub fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    let verb_ok = strings(&rule["verbs"]).any(|v| v == "*" || v == attrs.verb);
    if !verb_ok {
        return false;
    }
    if !attrs.resource_request {
        return strings(&rule["nonResourceURLs"]).any(|u| {
            u == "*"
                || u == attrs.path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| attrs.path.starts_with(prefix))
        });
    }
    let group_ok = strings(&rule["apiGroups"]).any(|g| g == "*" || g == attrs.group);
    if !group_ok {
        return false;
    }
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let resource_ok = strings(&rule["resources"]).any(|r| {
        r == "*"
            || r == combined
            || (!attrs.subresource.is_empty()
                && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
    });
    if !resource_ok {
        return false;
    }
    let mut names = strings(&rule["resourceNames"]).peekable();
    names.peek().is_none() || names.any(|n| n == attrs.name)
}

/// The 403 a denied request gets, worded as kube-apiserver words it.
pub fn forbidden(user: &UserInfo, attrs: &Attributes) -> ApiError {
    let gr = GroupResource::new(&attrs.group, &attrs.resource);
    if !attrs.resource_request {
        return ApiError::Forbidden {
            message: format!(
                "forbidden: User \"{}\" cannot {} path \"{}\"",
                user.name, attrs.verb, attrs.path
            ),
            gr,
            name: String::new(),
        };
    }
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let scope = if attrs.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", attrs.namespace)
    };
    let reason = format!(
        "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {}",
        user.name, attrs.verb, resource, attrs.group, scope
    );
    let subject = if attrs.name.is_empty() {
        gr.to_string()
    } else {
        format!("{gr} \"{}\"", attrs.name)
    };
    ApiError::Forbidden {
        message: format!("{subject} is forbidden: {reason}"),
        gr,
        name: attrs.name.clone(),
    }
}

/// The impersonation headers of a request.
#[derive(Debug, Clone, Default)]
pub struct Impersonation {
    /// `Impersonate-User`.
    pub user: Option<String>,
    /// `Impersonate-Group` (repeatable).
    pub groups: Vec<String>,
}

/// Applies impersonation: checks that `requester` may impersonate the user and each group,
/// and returns the impersonated identity.
///
/// # Errors
/// A 403 naming what may not be impersonated.
pub fn impersonate(
    store: &Store,
    requester: &UserInfo,
    imp: &Impersonation,
) -> Result<UserInfo, ApiError> {
    let Some(user) = &imp.user else {
        if imp.groups.is_empty() {
            return Ok(requester.clone());
        }
        return Err(ApiError::Forbidden {
            message: "requested [] without impersonating a user".into(),
            gr: GroupResource::new("", "users"),
            name: String::new(),
        });
    };
    let check = |attrs: Attributes| -> Result<(), ApiError> {
        if authorize(store, requester, &attrs).allowed {
            Ok(())
        } else {
            Err(forbidden(requester, &attrs))
        }
    };
    let mut groups = Vec::new();
    let (namespace, name) = match user.strip_prefix("system:serviceaccount:") {
        Some(rest) => rest.split_once(':').unwrap_or((rest, "")),
        None => ("", ""),
    };
    if !name.is_empty() {
        check(Attributes {
            verb: "impersonate".into(),
            resource_request: true,
            resource: "serviceaccounts".into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        })?;
        if imp.groups.is_empty() {
            groups.push("system:serviceaccounts".to_string());
            groups.push(format!("system:serviceaccounts:{namespace}"));
        }
    } else {
        check(Attributes {
            verb: "impersonate".into(),
            resource_request: true,
            resource: "users".into(),
            name: user.clone(),
            ..Default::default()
        })?;
    }
    for group in &imp.groups {
        check(Attributes {
            verb: "impersonate".into(),
            resource_request: true,
            resource: "groups".into(),
            name: group.clone(),
            ..Default::default()
        })?;
        groups.push(group.clone());
    }
    if user != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(UserInfo {
        name: user.clone(),
        groups,
        uid: String::new(),
    })
}

/// The RBAC objects every cluster starts with (the bootstrap policy, trimmed to what
/// matters here): cluster-admin for system:masters, discovery and self-review for every
/// authenticated user, public info for everyone.
pub fn bootstrap_policy() -> Vec<(&'static str, Value)> {
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
               "rules": rules})
    };
    let bind_groups = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|group| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}))
            .collect();
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    let binding = |name: &str, group: &str| bind_groups(name, &[group]);
    vec![
        (
            "clusterroles",
            role(
                "cluster-admin",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                       {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            ),
        ),
        ("clusterrolebindings", binding("cluster-admin", MASTERS)),
        (
            "clusterroles",
            role(
                "system:discovery",
                json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                        "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterrolebindings",
            binding("system:discovery", "system:authenticated"),
        ),
        (
            "clusterroles",
            role(
                "system:basic-user",
                json!([{"apiGroups": ["authorization.k8s.io"],
                        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                       {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
            ),
        ),
        (
            "clusterrolebindings",
            binding("system:basic-user", "system:authenticated"),
        ),
        (
            "clusterroles",
            role(
                "system:public-info-viewer",
                json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterrolebindings",
            bind_groups(
                "system:public-info-viewer",
                &["system:authenticated", "system:unauthenticated"],
            ),
        ),
        (
            "clusterroles",
            role(
                "system:service-account-issuer-discovery",
                json!([{"nonResourceURLs": ["/.well-known/openid-configuration",
                        "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/"],
                        "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:service-account-issuer-discovery",
                "system:serviceaccounts",
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_rule_with_resource_names_only_matches_those_names() {
        let rule = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["lock"]});
        assert!(rule_allows(
            &rule,
            &attrs("get", "", "configmaps", "ns", "lock")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "", "configmaps", "ns", "other")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("list", "", "configmaps", "ns", "")
        ));
    }

    #[test]
    fn a_subresource_needs_its_own_rule_unless_star_slash_matches() {
        let rule = json!({"apiGroups": ["cache.example.com"], "resources": ["memcacheds"], "verbs": ["update"]});
        let mut a = attrs("update", "cache.example.com", "memcacheds", "ns", "m");
        a.subresource = "status".into();
        assert!(!rule_allows(&rule, &a));
        let rule = json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["update"]});
        assert!(rule_allows(&rule, &a));
    }

    #[test]
    fn the_forbidden_message_is_the_real_one() {
        let user = UserInfo::service_account("default", "op", "u");
        let e = forbidden(&user, &attrs("list", "", "pods", "default", ""));
        assert_eq!(
            e.to_string(),
            "pods is forbidden: User \"system:serviceaccount:default:op\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let e = forbidden(
            &user,
            &attrs("get", "coordination.k8s.io", "leases", "ns", "l"),
        );
        assert_eq!(
            e.to_string(),
            "leases.coordination.k8s.io \"l\" is forbidden: User \"system:serviceaccount:default:op\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"ns\""
        );
    }
}
