//! Who may use the kubelet's endpoint, decided as the kubelet decides it with its default
//! configuration (`authentication.x509.clientCAFile`, `authentication.webhook.enabled`,
//! `authorization.mode: Webhook`, anonymous off): a client certificate verified against
//! the cluster CA names the user (CN) and its groups (O); otherwise a bearer token is
//! reviewed by the API server (TokenReview); without either the answer is
//! `401 Unauthorized`. The user is then authorized by a SubjectAccessReview of `nodes`
//! named after the node, the verb from the HTTP method and the subresource from the path
//! (`proxy` for exec, attach, port-forward and container logs; `stats`, `metrics`, `log`,
//! `checkpoint`, …; `healthz`, `pods`, `configz` first and then `proxy`, as
//! `KubeletFineGrainedAuthz` has it): `403` with the kubelet's message when no review
//! allows it.
//!
//! # Caveats
//! - Decisions are not cached (the kubelet caches them for minutes): every request costs
//!   a SubjectAccessReview, and a TokenReview for a bearer token.
//! - Reviews go through the node's own client and proxy: a partitioned node cannot
//!   authorize anyone, as a real one could not.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// An authenticated user of the endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// Its UID, when the authenticator knows one.
    pub uid: Option<String>,
    /// Its groups.
    pub groups: Vec<String>,
    /// Extra attributes (from a TokenReview).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Why a request is refused, with the status and text the kubelet answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Neither a verified certificate nor a token the API server knows: 401.
    #[error("Unauthorized")]
    Unauthorized,
    /// No review allowed it: 403.
    #[error("Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[{}])\n", subresources.join(" "))]
    Forbidden {
        /// The user.
        user: String,
        /// The verb.
        verb: String,
        /// The subresources tried.
        subresources: Vec<String>,
    },
    /// A SubjectAccessReview could not be made: 500.
    #[error(
        "Authorization error (user={user}, verb={verb}, resource=nodes, subresource={subresource})"
    )]
    Review {
        /// The user.
        user: String,
        /// The verb.
        verb: String,
        /// The subresource.
        subresource: String,
    },
}

impl Refusal {
    /// The HTTP status of the answer.
    pub fn code(&self) -> u16 {
        match self {
            Self::Unauthorized => 401,
            Self::Forbidden { .. } => 403,
            Self::Review { .. } => 500,
        }
    }
}

/// The user a verified client certificate (DER) names: CN as the name, each O as a group
/// (the API server's `CommonNameUserConversion`); `None` when it cannot be read or has no
/// CN.
pub fn certificate_user(der: &[u8]) -> Option<User> {
    use x509_parser::prelude::FromDer as _;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_owned();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(User {
        name,
        groups,
        ..User::default()
    })
}

/// The bearer token of an `Authorization` header value.
fn bearer(authorization: Option<&str>) -> Option<&str> {
    let (scheme, token) = authorization?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Who is asking: the certificate's user, else the user the API server's TokenReview of
/// the bearer token in `authorization` names.
///
/// # Errors
/// [`Refusal::Unauthorized`] without a certificate or token, for a token the API server
/// does not authenticate, or when the review fails.
pub async fn authenticate(
    client: &kube::Client,
    certificate: Option<User>,
    authorization: Option<&str>,
) -> Result<User, Refusal> {
    if let Some(user) = certificate {
        return Ok(user);
    }
    let token = bearer(authorization).ok_or(Refusal::Unauthorized)?;
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| {
            tracing::debug!(error = %e, "the kubelet's token review failed");
            Refusal::Unauthorized
        })?;
    let status = reviewed.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        return Err(Refusal::Unauthorized);
    }
    let user = status.user.unwrap_or_default();
    Ok(User {
        name: user.username.unwrap_or_default(),
        uid: user.uid,
        groups: user.groups.unwrap_or_default(),
        extra: user.extra.unwrap_or_default(),
    })
}

/// The verb of an HTTP method, as the kubelet names it (empty for others).
pub fn verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::POST => "create",
        http::Method::GET => "get",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "",
    }
}

/// `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The `nodes` subresources that may allow a request for `path`, in the order they are
/// asked.
pub fn subresources(path: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (prefix, subresource) in [
        ("/pods", "pods"),
        ("/healthz", "healthz"),
        ("/configz", "configz"),
        ("/runningPods/", "pods"),
    ] {
        if under(path, prefix) {
            out.push(subresource);
            break;
        }
    }
    let specific = [
        ("/stats/", "stats"),
        ("/metrics", "metrics"),
        ("/logs/", "log"),
        ("/checkpoint", "checkpoint"),
        ("/statusz", "statusz"),
        ("/flagz", "configz"),
    ]
    .into_iter()
    .find(|(prefix, _)| under(path, prefix))
    .map_or("proxy", |(_, subresource)| subresource);
    out.push(specific);
    out
}

/// Whether `user` may make a request with `method` for `path` of node `node`: a
/// SubjectAccessReview per candidate subresource ([`subresources`]) until one allows it.
///
/// # Errors
/// [`Refusal::Forbidden`] when none does, [`Refusal::Review`] when a review fails.
pub async fn authorize(
    client: &kube::Client,
    node: &str,
    user: &User,
    method: &http::Method,
    path: &str,
) -> Result<(), Refusal> {
    let verb = verb(method);
    let candidates = subresources(path);
    for subresource in &candidates {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some((*subresource).to_owned()),
                    name: Some(node.to_owned()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "the kubelet's access review failed");
                Refusal::Review {
                    user: user.name.clone(),
                    verb: verb.to_owned(),
                    subresource: (*subresource).to_owned(),
                }
            })?;
        if reviewed.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
    }
    Err(Refusal::Forbidden {
        user: user.name.clone(),
        verb: verb.to_owned(),
        subresources: candidates.iter().map(|s| (*s).to_owned()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_logs_are_nodes_proxy_and_health_is_tried_as_healthz_first() {
        assert_eq!(subresources("/exec/default/p/main"), ["proxy"]);
        assert_eq!(subresources("/portForward/default/p"), ["proxy"]);
        assert_eq!(subresources("/containerLogs/default/p/main"), ["proxy"]);
        assert_eq!(subresources("/attach/default/p/main"), ["proxy"]);
        assert_eq!(subresources("/healthz"), ["healthz", "proxy"]);
        assert_eq!(subresources("/pods"), ["pods", "proxy"]);
        assert_eq!(subresources("/runningPods/"), ["pods", "proxy"]);
        assert_eq!(subresources("/stats/summary"), ["stats"]);
        assert_eq!(subresources("/metrics/cadvisor"), ["metrics"]);
        assert_eq!(subresources("/logs/syslog"), ["log"]);
        assert_eq!(subresources("/podsx"), ["proxy"]);
        assert_eq!(verb(&http::Method::POST), "create");
        assert_eq!(verb(&http::Method::GET), "get");
    }

    #[test]
    fn the_refusals_say_what_the_kubelet_says() {
        assert_eq!(Refusal::Unauthorized.to_string(), "Unauthorized");
        let forbidden = Refusal::Forbidden {
            user: "u".into(),
            verb: "create".into(),
            subresources: vec!["healthz".into(), "proxy".into()],
        };
        assert_eq!(
            forbidden.to_string(),
            "Forbidden (user=u, verb=create, resource=nodes, subresource(s)=[healthz proxy])\n"
        );
        assert_eq!(forbidden.code(), 403);
    }

    #[test]
    fn only_a_bearer_authorization_carries_a_token() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn a_certificate_names_its_user_by_cn_and_its_groups_by_o() {
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "team-a");
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        let user = certificate_user(cert.der()).unwrap_or_default();
        assert_eq!(user.name, "kube-apiserver-kubelet-client");
        assert_eq!(user.groups, ["team-a"]);
    }
}
