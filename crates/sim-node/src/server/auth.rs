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
//! Answers are cached as the kubelet caches them with its default configuration
//! ([`Reviews`], [`CacheTtls`]): a TokenReview's answer, authenticated or not, for 2 minutes
//! (`authentication.webhook.cacheTTL`), keyed by the token; a SubjectAccessReview's
//! answer, keyed by its whole spec (user, UID, groups, extra and attributes), for
//! 5 minutes when it allows (`authorization.webhook.cacheAuthorizedTTL`) and 30 seconds
//! when it does not (`cacheUnauthorizedTTL`). A review that fails, or a TokenReview that
//! answers with an error, is not cached.
//!
//! # Caveats
//! - Reviews go through the node's own client and proxy: a partitioned node cannot
//!   authorize anyone whose answer is not cached, as a real one could not.
//! - The caches have no size bound (the kubelet's are LRU caches of a few thousand
//!   entries); expired entries are dropped as new ones are added.
//! - No retries with backoff: a failed review fails the request at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

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

/// How long the kubelet keeps the API server's answers (its defaults: `Default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTtls {
    /// A TokenReview's answer, authenticated or not (`authentication.webhook.cacheTTL`).
    pub token: Duration,
    /// A SubjectAccessReview that allowed (`authorization.webhook.cacheAuthorizedTTL`).
    pub authorized: Duration,
    /// A SubjectAccessReview that did not (`authorization.webhook.cacheUnauthorizedTTL`).
    pub unauthorized: Duration,
}

impl Default for CacheTtls {
    fn default() -> Self {
        Self {
            token: Duration::from_secs(120),
            authorized: Duration::from_secs(300),
            unauthorized: Duration::from_secs(30),
        }
    }
}

/// Answers kept until `until` (tokio's clock, which tests may pause and advance).
#[derive(Debug)]
struct Cache<V> {
    entries: Mutex<HashMap<String, (Instant, V)>>,
}

impl<V: Clone> Cache<V> {
    fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &str) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, value)| value.clone())
    }

    fn put(&self, key: String, value: V, ttl: Duration) {
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, (until, _)| now < *until);
        entries.insert(key, (now + ttl, value));
    }
}

/// The kubelet's reviews of its callers by the API server, through `client`, with their
/// caches.
pub struct Reviews {
    client: kube::Client,
    ttls: CacheTtls,
    /// By token: the user, or `None` for a token the API server does not authenticate.
    tokens: Cache<Option<User>>,
    /// By the JSON of a SubjectAccessReview's spec: whether it allowed.
    decisions: Cache<bool>,
}

impl Reviews {
    /// Reviews through `client`, cached for `ttls`.
    pub fn new(client: kube::Client, ttls: CacheTtls) -> Self {
        Self {
            client,
            ttls,
            tokens: Cache::new(),
            decisions: Cache::new(),
        }
    }

    /// Who is asking: the certificate's user, else the user the API server's TokenReview
    /// of the bearer token in `authorization` names (cached).
    ///
    /// # Errors
    /// [`Refusal::Unauthorized`] without a certificate or token, for a token the API
    /// server does not authenticate, or when the review fails.
    pub async fn authenticate(
        &self,
        certificate: Option<User>,
        authorization: Option<&str>,
    ) -> Result<User, Refusal> {
        if let Some(user) = certificate {
            return Ok(user);
        }
        let token = bearer(authorization).ok_or(Refusal::Unauthorized)?;
        if let Some(cached) = self.tokens.get(token) {
            return cached.ok_or(Refusal::Unauthorized);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "the kubelet's token review failed");
                Refusal::Unauthorized
            })?;
        let status = reviewed.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            // An answer with an error is the authenticator's error: not cached.
            if status.error.as_deref().is_none_or(str::is_empty) {
                self.tokens.put(token.to_owned(), None, self.ttls.token);
            }
            return Err(Refusal::Unauthorized);
        }
        let user = status.user.unwrap_or_default();
        let user = User {
            name: user.username.unwrap_or_default(),
            uid: user.uid,
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        };
        self.tokens
            .put(token.to_owned(), Some(user.clone()), self.ttls.token);
        Ok(user)
    }

    /// Whether `user` may make a request with `method` for `path` of node `node`: a
    /// SubjectAccessReview (cached) per candidate subresource ([`subresources`]) until
    /// one allows it.
    ///
    /// # Errors
    /// [`Refusal::Forbidden`] when none does, [`Refusal::Review`] when a review fails.
    pub async fn authorize(
        &self,
        node: &str,
        user: &User,
        method: &http::Method,
        path: &str,
    ) -> Result<(), Refusal> {
        let verb = verb(method);
        let candidates = subresources(path);
        for subresource in &candidates {
            let spec = SubjectAccessReviewSpec {
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
            };
            let key = serde_json::to_string(&spec).ok();
            let allowed = match key.as_deref().and_then(|k| self.decisions.get(k)) {
                Some(allowed) => allowed,
                None => {
                    let allowed = self.review(spec, user, verb, subresource).await?;
                    let ttl = if allowed {
                        self.ttls.authorized
                    } else {
                        self.ttls.unauthorized
                    };
                    if let Some(key) = key {
                        self.decisions.put(key, allowed, ttl);
                    }
                    allowed
                }
            };
            if allowed {
                return Ok(());
            }
        }
        Err(Refusal::Forbidden {
            user: user.name.clone(),
            verb: verb.to_owned(),
            subresources: candidates.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    /// Asks the API server whether `spec` is allowed.
    async fn review(
        &self,
        spec: SubjectAccessReviewSpec,
        user: &User,
        verb: &str,
        subresource: &str,
    ) -> Result<bool, Refusal> {
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "the kubelet's access review failed");
                Refusal::Review {
                    user: user.name.clone(),
                    verb: verb.to_owned(),
                    subresource: subresource.to_owned(),
                }
            })?;
        Ok(reviewed.status.is_some_and(|s| s.allowed))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A stand-in API server: token `good` is alice's, any other is unknown; alice may use
    /// `nodes/proxy`, bob nothing, and carol's reviews fail (500). It records each review:
    /// `token <token>` or `access <user> <subresource>`.
    fn api_server() -> (kube::Client, Arc<Mutex<Vec<String>>>) {
        use http_body_util::BodyExt as _;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let record = record.clone();
            async move {
                let path = req.uri().path().to_owned();
                let body = req.into_body().collect().await?.to_bytes();
                let review: serde_json::Value = serde_json::from_slice(&body)?;
                let spec = &review["spec"];
                let (code, status) = if path.ends_with("/tokenreviews") {
                    let token = spec["token"].as_str().unwrap_or_default();
                    record
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("token {token}"));
                    let status = if token == "good" {
                        serde_json::json!({"authenticated": true, "user": {"username": "alice"}})
                    } else {
                        serde_json::json!({"authenticated": false})
                    };
                    (200, status)
                } else {
                    let user = spec["user"].as_str().unwrap_or_default();
                    let subresource = spec["resourceAttributes"]["subresource"]
                        .as_str()
                        .unwrap_or_default();
                    record
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("access {user} {subresource}"));
                    let allowed = user == "alice" && subresource == "proxy";
                    let code = if user == "carol" { 500 } else { 200 };
                    (code, serde_json::json!({"allowed": allowed}))
                };
                let mut answer = review.clone();
                answer["status"] = status;
                let response = http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(
                        answer.to_string(),
                    )))?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    fn taken(seen: &Mutex<Vec<String>>) -> Vec<String> {
        std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            ..User::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn token_reviews_are_kept_two_minutes_whatever_they_answer() {
        let (client, seen) = api_server();
        let reviews = Reviews::new(client, CacheTtls::default());
        for _ in 0..3 {
            let alice = reviews.authenticate(None, Some("Bearer good")).await;
            assert_eq!(alice.map(|u| u.name), Ok("alice".to_string()));
            let unknown = reviews.authenticate(None, Some("Bearer bad")).await;
            assert_eq!(unknown, Err(Refusal::Unauthorized));
        }
        assert_eq!(taken(&seen), ["token good", "token bad"]);
        // A certificate's user needs no review.
        assert!(reviews.authenticate(Some(user("cert")), None).await.is_ok());
        tokio::time::advance(Duration::from_secs(119)).await;
        assert!(
            reviews
                .authenticate(None, Some("Bearer good"))
                .await
                .is_ok()
        );
        assert!(taken(&seen).is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            reviews
                .authenticate(None, Some("Bearer good"))
                .await
                .is_ok()
        );
        assert!(
            reviews
                .authenticate(None, Some("Bearer bad"))
                .await
                .is_err()
        );
        assert_eq!(taken(&seen), ["token good", "token bad"]);
    }

    #[tokio::test(start_paused = true)]
    async fn access_reviews_are_kept_five_minutes_when_allowed_thirty_seconds_when_not_and_never_when_failed()
     {
        let (client, seen) = api_server();
        let reviews = Reviews::new(client, CacheTtls::default());
        let get = http::Method::GET;
        for _ in 0..3 {
            let exec = reviews
                .authorize("n", &user("alice"), &http::Method::POST, "/exec/d/p/c")
                .await;
            assert_eq!(exec, Ok(()));
            // Another path of the same subresource and verb: the same review.
            let logs = reviews
                .authorize("n", &user("alice"), &http::Method::POST, "/portForward/d/p")
                .await;
            assert_eq!(logs, Ok(()));
            let bob = reviews.authorize("n", &user("bob"), &get, "/healthz").await;
            assert!(matches!(bob, Err(Refusal::Forbidden { .. })), "{bob:?}");
        }
        assert_eq!(
            taken(&seen),
            [
                "access alice proxy",
                "access bob healthz",
                "access bob proxy"
            ]
        );
        // Another verb, another review.
        assert_eq!(
            reviews
                .authorize("n", &user("alice"), &get, "/exec/d/p/c")
                .await,
            Ok(())
        );
        assert_eq!(taken(&seen), ["access alice proxy"]);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(
            reviews
                .authorize("n", &user("bob"), &get, "/healthz")
                .await
                .is_err()
        );
        assert!(
            reviews
                .authorize("n", &user("alice"), &http::Method::POST, "/exec/d/p/c")
                .await
                .is_ok()
        );
        assert_eq!(taken(&seen), ["access bob healthz", "access bob proxy"]);
        tokio::time::advance(Duration::from_secs(270)).await;
        assert!(
            reviews
                .authorize("n", &user("alice"), &http::Method::POST, "/exec/d/p/c")
                .await
                .is_ok()
        );
        assert_eq!(taken(&seen), ["access alice proxy"]);
        for _ in 0..2 {
            let carol = reviews
                .authorize("n", &user("carol"), &get, "/exec/d/p/c")
                .await;
            assert!(matches!(carol, Err(Refusal::Review { .. })), "{carol:?}");
        }
        assert_eq!(taken(&seen), ["access carol proxy", "access carol proxy"]);
    }

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
