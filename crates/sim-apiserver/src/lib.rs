//! The simulated kube-apiserver: HTTPS on 127.0.0.1 with a per-cluster CA, bearer-token
//! authentication, impersonation, RBAC, the resource verbs, watch, discovery, OpenAPI v3
//! and an audit of every request. Real clients (kube-rs, kubectl) cannot tell it from
//! kube-apiserver for everything the conformance features touch.
//!
//! This crate knows nothing of nodes, controllers or the harness: the simulated nodes and
//! controllers are clients of it like any other. It speaks the fault vocabulary it shares
//! with the harness (`cluster-vocabulary`). Its fault rules ([`faults`]) act on the
//! requests it serves; process and network faults are handed to whoever registered as the
//! [`faults::FaultTarget`] (the simulated nodes), and logged here.
//!
//! # Caveats
//! - Protobuf request bodies are decoded for every built-in kind (see [`protobuf`]), custom
//!   resources are JSON only; answers are always JSON. No Table output (kubectl falls back to NAME/AGE columns), admission's
//!   CEL has no type checker (see [`cel`]), no RBAC escalation checks, no ClusterRole aggregation.
//! - `continue` pages are served from the current state, not a snapshot of the first page.
//! - `Accept: …;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (or `…List`) gets metadata only
//!   from every verb but watch, whose events carry whole objects.
//! - The `orphan`/`foregroundDeletion` finalizers are added on DELETE as the real server
//!   does when garbage collection is enabled; they are cleared by the garbage collector of
//!   the simulated controllers, not by this server.

pub mod admission;
pub mod admission_policy;
pub mod admission_webhooks;
pub mod aggregated;
pub mod answer_json;
pub mod apiservices;
pub mod apply;
pub mod attach;
pub mod audit;
pub mod auth;
pub mod call;
pub mod cel;
pub mod certificates;
pub mod component_status;
pub mod control;
pub mod conversion;
mod create;
pub mod cron_schedule;
pub mod discovery;
pub mod ephemeral;
pub mod eviction;
pub mod exec;
pub mod faults;
pub mod handlers;
pub mod kinds;
pub mod limit_ranger;
pub mod names;
pub mod objects;
pub mod patch;
pub mod podlog;
pub mod portforward;
pub mod protobuf;
pub mod quantity;
pub mod quota;
pub mod registry;
pub mod request;
pub mod resize;
pub mod reviews;
pub mod schema;
pub mod selectors;
mod services;
pub mod spdy;
pub mod state;
pub mod status;
pub mod store;
pub mod system_objects;
pub mod table;
pub mod time_zone;
pub mod tls;
pub mod upgrade;
pub mod validation;
pub mod validation_rules;
pub mod warnings;
pub mod watch;

/// An error and its causes on one line (`a: b: c`), for logs and failure messages.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use chrono::Utc;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use self::audit::AuditEvent;
use self::auth::{Attributes, Impersonation, UserInfo};
use self::call::{Call, MAX_BODY};
use self::request::{Query, RequestInfo};
pub use self::state::{ApiServerConfig, State};
use self::status::ApiError;

/// Errors starting or using the API server.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// The certificates could not be generated.
    #[error("cannot set up tls for the simulated api server")]
    Tls(#[from] tls::TlsError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A client for the server could not be built from its kubeconfig.
    #[error("cannot build a client for the simulated api server")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A ServiceAccount does not exist.
    #[error("serviceaccount {namespace}/{name} does not exist")]
    NoServiceAccount {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

type Body = BoxBody<Bytes, Infallible>;

/// A running simulated API server. Dropping it stops it.
pub struct ApiServer {
    handle: ServerHandle,
    shutdown: signal::Sender<bool>,
    started: Instant,
}

/// A cheap, cloneable way to reach a running server: its address, CA and credentials.
/// What the kubelets and controllers of a simulated cluster hold.
#[derive(Clone)]
pub struct ServerHandle {
    state: Arc<State>,
    addr: SocketAddr,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Shared state: store, audit, tokens.
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// The cluster CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.state.ca_pem
    }

    /// The admin bearer token.
    pub fn admin_token(&self) -> &str {
        &self.state.admin_token
    }

    /// The cluster CA with its key, for the controllers' certificate signers.
    pub fn signing_ca(&self) -> Option<&tls::SigningCa> {
        self.state.signing_ca.as_ref()
    }

    /// A kubeconfig for `server` (this server's URL, or a proxy in front of it) with `token`.
    pub fn kubeconfig_for(&self, server: &str, user: &str, token: &str) -> String {
        kubeconfig(
            &self.state.config.name,
            server,
            &self.state.ca_pem,
            user,
            token,
        )
    }

    /// The admin kubeconfig, as YAML.
    pub fn admin_kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.url(), auth::ADMIN_USER, self.admin_token())
    }

    /// A token for a ServiceAccount (valid while it exists).
    ///
    /// # Errors
    /// When the ServiceAccount does not exist.
    pub fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, ApiServerError> {
        let sa = self
            .state
            .store
            .get(
                &status::GroupResource::new("", "serviceaccounts"),
                namespace,
                name,
            )
            .ok_or_else(|| ApiServerError::NoServiceAccount {
                namespace: namespace.into(),
                name: name.into(),
            })?;
        let uid = sa["metadata"]["uid"].as_str().unwrap_or_default();
        Ok(self.state.tokens.for_service_account(namespace, name, uid))
    }

    /// A token for a named user in `groups` (e.g. `system:node:worker-1` in `system:nodes`).
    pub fn user_token(&self, name: &str, groups: &[&str]) -> String {
        self.state.tokens.issue_user(name, groups)
    }

    /// A kube client for `server` (this server's URL or a proxy in front of it) as a named
    /// user in `groups`.
    ///
    /// # Errors
    /// When the client cannot be built.
    pub async fn user_client(
        &self,
        server: &str,
        name: &str,
        groups: &[&str],
    ) -> Result<kube::Client, ApiServerError> {
        let token = self.user_token(name, groups);
        client_for(&self.kubeconfig_for(server, name, &token)).await
    }

    /// A kube client authenticated as the admin.
    ///
    /// # Errors
    /// When the client cannot be built.
    pub async fn admin_client(&self) -> Result<kube::Client, ApiServerError> {
        client_for(&self.admin_kubeconfig()).await
    }

    /// A kube client authenticated as a ServiceAccount.
    ///
    /// # Errors
    /// When the ServiceAccount does not exist or the client cannot be built.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, ApiServerError> {
        let token = self.service_account_token(namespace, name)?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        client_for(&self.kubeconfig_for(&self.url(), &user, &token)).await
    }
}

/// A kube client with the given kubeconfig YAML.
///
/// # Errors
/// When the kubeconfig cannot be turned into a client.
pub async fn client_for(kubeconfig_yaml: &str) -> Result<kube::Client, ApiServerError> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig_yaml)
        .map_err(|e| ApiServerError::Client(Box::new(e)))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| ApiServerError::Client(Box::new(e)))?;
    kube::Client::try_from(config).map_err(|e| ApiServerError::Client(Box::new(e)))
}

impl std::ops::Deref for ApiServer {
    type Target = ServerHandle;

    fn deref(&self) -> &ServerHandle {
        &self.handle
    }
}

impl ApiServer {
    /// Starts a server on 127.0.0.1 (the configured port, or a free one).
    ///
    /// # Errors
    /// When certificates cannot be made or the port cannot be bound.
    pub async fn start(config: ApiServerConfig) -> Result<Self, ApiServerError> {
        let started = Instant::now();
        let tls = tls::ClusterTls::generate(&config.name)?;
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), config.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ApiServerError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ApiServerError::Bind { addr, source })?;
        let mut state = State::new(config, tls.ca_pem);
        state.signing_ca = Some(tls.signing);
        let state = Arc::new(state);
        state.create_kubernetes_service(addr.port());
        let (shutdown, shutdown_rx) = signal::channel(false);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config);
        tokio::spawn(accept_loop(
            listener,
            acceptor,
            state.clone(),
            shutdown_rx,
            addr,
        ));
        Ok(Self {
            handle: ServerHandle { state, addr },
            shutdown,
            started,
        })
    }

    /// A cloneable handle to this server.
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// When `start` was called (for start-up measurements).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// A kube client with the given kubeconfig YAML (see [`client_for`]).
    ///
    /// # Errors
    /// When the kubeconfig cannot be turned into a client.
    pub async fn client_for(kubeconfig_yaml: &str) -> Result<kube::Client, ApiServerError> {
        client_for(kubeconfig_yaml).await
    }

    /// Stops serving: the listener closes and open connections and watches end.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A kubeconfig YAML document for one cluster, user and token.
pub fn kubeconfig(cluster: &str, server: &str, ca_pem: &str, user: &str, token: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user, "namespace": "default"}}],
        "current-context": cluster,
        "preferences": {},
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<State>,
    mut shutdown: signal::Receiver<bool>,
    addr: SocketAddr,
) {
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let state = state.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let tls = tokio::select! {
                tls = acceptor.accept(tcp) => match tls {
                    Ok(tls) => tls,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "tls handshake failed");
                        return;
                    }
                },
                _ = conn_shutdown.changed() => return,
            };
            let service_shutdown = conn_shutdown.clone();
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                let shutdown = service_shutdown.clone();
                async move {
                    // A task of its own, so that a request a rule commits is served even after
                    // its client went away.
                    let detachment = crate::faults::Detachment::default();
                    crate::faults::detachable(
                        detachment.clone(),
                        handle(state, req, peer, addr, shutdown, detachment),
                    )
                    .await
                }
            });
            // With upgrades: `pods/exec` switches the connection to a WebSocket, `pods/portforward`
            // to a WebSocket (of SPDY or of channels) or to SPDY/3.1.
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                _ = conn_shutdown.changed() => {}
            }
        });
    }
}

fn full(code: u16, content_type: &str, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(CONTENT_TYPE, v);
    }
    resp
}

fn wants_yaml(headers: &HeaderMap) -> bool {
    headers
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("application/yaml"))
}

fn json_response(code: u16, value: &Value, headers: &HeaderMap) -> Response<Body> {
    if wants_yaml(headers) {
        let yaml = serde_yaml::to_string(value).unwrap_or_default();
        return full(code, "application/yaml", yaml.into_bytes());
    }
    full(code, "application/json", answer_json::document(value))
}

/// Whether the client asks for metadata only (`as=PartialObjectMetadata` or
/// `as=PartialObjectMetadataList` of `meta.k8s.io/v1`, as client-go's metadata client and
/// kube-rs's `get_metadata` and `list_metadata` do).
fn wants_partial_metadata(headers: &HeaderMap) -> bool {
    headers
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|accept| accept.split(',').next())
        .is_some_and(|first| {
            let params: Vec<&str> = first.split(';').skip(1).map(str::trim).collect();
            params
                .iter()
                .any(|p| p.starts_with("as=PartialObjectMetadata"))
                && params.contains(&"g=meta.k8s.io")
                && params.contains(&"v=v1")
        })
}

/// An answer as metadata only: an object becomes a `PartialObjectMetadata`, a list a
/// `PartialObjectMetadataList` of them; a `Status` stays as it is.
fn partial_metadata(value: Value) -> Value {
    const META: &str = "meta.k8s.io/v1";
    if value["kind"] == "Status" {
        return value;
    }
    if let Some(items) = value["items"].as_array() {
        let items: Vec<Value> = items.iter().cloned().map(partial_metadata).collect();
        // kube-apiserver's list of no metadata is a nil slice, written `null`.
        let items = if items.is_empty() {
            Value::Null
        } else {
            Value::Array(items)
        };
        return serde_json::json!({"kind": "PartialObjectMetadataList", "apiVersion": META,
            "metadata": value["metadata"], "items": items});
    }
    serde_json::json!({"kind": "PartialObjectMetadata", "apiVersion": META,
        "metadata": value["metadata"]})
}

/// The watch events of `lines` with their objects as Tables of one row, the first with
/// the column definitions, as kube-apiserver writes them for `kubectl get -w`; bookmarks
/// and errors as they are. Unchanged when the resource has no printer here.
fn table_events(
    state: &Arc<State>,
    call: &Call<'_>,
    rt: &registry::ResourceType,
    mut lines: tokio::sync::mpsc::Receiver<Bytes>,
) -> Result<tokio::sync::mpsc::Receiver<Bytes>, ApiError> {
    let include = table::Include::parse(call.query.get("includeObject"))?;
    let crd = defining_crd(state, rt);
    let version = call.info.version.clone();
    if table::convert(
        rt,
        crd.as_ref(),
        &version,
        &serde_json::json!({"metadata": {}}),
        include,
        true,
        Utc::now(),
    )
    .is_none()
    {
        return Ok(lines);
    }
    let rt = rt.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        let mut first = true;
        while let Some(line) = lines.recv().await {
            let converted = serde_json::from_slice::<Value>(&line)
                .ok()
                .and_then(|mut event| {
                    if !matches!(
                        event["type"].as_str(),
                        Some("ADDED" | "MODIFIED" | "DELETED")
                    ) {
                        return None;
                    }
                    let object = table::convert(
                        &rt,
                        crd.as_ref(),
                        &version,
                        &event["object"],
                        include,
                        first,
                        Utc::now(),
                    )?;
                    first = false;
                    event["object"] = object;
                    Some(Bytes::from(answer_json::document(&event)))
                });
            if tx.send(converted.unwrap_or(line)).await.is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// The CRD that defines `rt`, when it is a custom resource.
fn defining_crd(state: &State, rt: &registry::ResourceType) -> Option<Value> {
    match &rt.backing {
        registry::Backing::Custom { crd, .. } => state.store.get(
            &status::GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions"),
            "",
            crd,
        ),
        _ => None,
    }
}

/// A get or list answer of `info`'s resource as a Table ([`table`]), or `None` when the
/// resource has no printer here (the answer then stays JSON).
fn as_table(
    state: &State,
    info: &request::RequestInfo,
    query: &Query,
    value: &Value,
) -> Result<Option<Value>, ApiError> {
    let include = table::Include::parse(query.get("includeObject"))?;
    let rt = {
        let registry = state.registry();
        registry
            .lookup(&info.group, &info.version, &info.resource)
            .cloned()
    };
    let Some(rt) = rt else {
        return Ok(None);
    };
    let crd = defining_crd(state, &rt);
    Ok(table::convert(
        &rt,
        crd.as_ref(),
        &info.version,
        value,
        include,
        true,
        Utc::now(),
    ))
}

fn error_response(e: &ApiError, headers: &HeaderMap) -> Response<Body> {
    if wants_yaml(headers) {
        return json_response(e.code(), &e.to_status(), headers);
    }
    let accept = headers
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let body = answer_json::error_document(&e.to_status(), accept);
    full(e.code(), "application/json", body)
}

fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
    else {
        return true;
    };
    accept.split(',').any(|part| {
        let media = part.split(';').next().unwrap_or("").trim();
        matches!(
            media,
            "" | "*/*" | "application/json" | "application/*" | "application/yaml"
        )
    })
}

fn impersonation(headers: &HeaderMap) -> Impersonation {
    Impersonation {
        user: headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        groups: headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect(),
    }
}

fn attributes(info: &RequestInfo) -> Attributes {
    Attributes {
        verb: info.verb.clone(),
        resource_request: info.resource_request,
        group: info.group.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        path: info.path.clone(),
    }
}

struct Outcome {
    response: Response<Body>,
    code: u16,
}

impl From<Response<Body>> for Outcome {
    fn from(response: Response<Body>) -> Self {
        let code = response.status().as_u16();
        Self { response, code }
    }
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
    peer: SocketAddr,
    server_addr: SocketAddr,
    shutdown: signal::Receiver<bool>,
    detachment: crate::faults::Detachment,
) -> Response<Body> {
    // When the server received the request, as its audit says: once the request rules let
    // it through (as on a real API server behind the pods' proxies, which hold a request
    // before it reaches the server), so that a held write is audited when it lands.
    let mut time = Utc::now();
    let (mut parts, body) = req.into_parts();
    let query = Query::parse(parts.uri.query());
    let info = request::parse(&parts.method, parts.uri.path(), &query);
    let user_agent = parts
        .headers
        .get(hyper::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut audited_user = UserInfo::anonymous();
    // A create names its object only in the body: the audit names it from the response.
    let mut created_name = String::new();
    let mut impersonated_by = None;
    // The request a `lose` rule took: served, and its answer dropped once audited.
    let mut losing = None;
    let outcome: Outcome = async {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let user = match token {
            Some(token) => match state.tokens.authenticate(token, &state.store) {
                Some(user) => user,
                None => return error_response(&ApiError::Unauthorized, &parts.headers).into(),
            },
            None => UserInfo::anonymous(),
        };
        audited_user = user.clone();
        let imp = impersonation(&parts.headers);
        if imp.user.is_some() || !imp.groups.is_empty() {
            match auth::impersonate(&state.store, &user, &imp) {
                Ok(as_user) => {
                    impersonated_by = Some(user.name.clone());
                    audited_user = as_user;
                }
                Err(e) => return error_response(&e, &parts.headers).into(),
            }
        }
        let user = audited_user.clone();
        let attrs = attributes(&info);
        if !auth::authorize(&state.store, &user, &attrs).allowed {
            let e = if token.is_none() {
                ApiError::Unauthorized
            } else {
                auth::forbidden(&user, &attrs)
            };
            return error_response(&e, &parts.headers).into();
        }
        // Read before any rule holds the request, so that one a rule commits can be served
        // after its client went away.
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > MAX_BODY) {
            return error_response(&ApiError::TooLarge { limit: MAX_BODY }, &parts.headers).into();
        }
        let body = match Limited::new(body, MAX_BODY).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                return error_response(&ApiError::TooLarge { limit: MAX_BODY }, &parts.headers)
                    .into();
            }
        };
        let pod = state.audit.pod_of(peer.ip());
        let facts = crate::faults::request_facts(&info, pod.as_ref(), &user.name);
        // Dropped when this block ends, whatever it answered: rules waiting for this
        // request's answer learn of it then.
        let _passage = state.faults.arrived(&facts);
        match state.faults.verdict(&facts) {
            crate::faults::Verdict::Pass => {}
            crate::faults::Verdict::Delay(delay) => tokio::time::sleep(delay).await,
            crate::faults::Verdict::Defer(deferral) => {
                detachment.mark(deferral.fate);
                if deferral.fate == crate::faults::Fate::AnswerLost {
                    losing = Some(deferral.clone());
                }
                state.faults.defer(deferral, &info.summary()).await;
            }
            crate::faults::Verdict::Hold(span) => {
                if let (Some(pod), Some(target)) = (pod.as_ref(), state.fault_target()) {
                    let what = info.summary();
                    if let Err(e) = state.faults.hold_for(target, pod, span, &what) {
                        tracing::warn!(error = %e, "holding the sender of {what} failed");
                    }
                }
            }
            crate::faults::Verdict::Reject {
                code,
                reason,
                message,
            } => {
                time = Utc::now();
                let e = ApiError::Custom {
                    code,
                    reason,
                    message,
                };
                return error_response(&e, &parts.headers).into();
            }
        }
        time = Utc::now();
        if info.group.is_empty()
            && info.resource == "pods"
            && matches!(info.subresource.as_str(), "exec" | "attach")
        {
            let stored = state.store.get(
                &self::status::GroupResource::new("", "pods"),
                &info.namespace,
                &info.name,
            );
            let (namespace, name) = (info.namespace.as_str(), info.name.as_str());
            let (query, headers) = (parts.uri.query(), &parts.headers);
            // Without an upgrade (the client went away), dropping the session ends it (an
            // exec's command is killed).
            let session = if info.subresource == "exec" {
                exec::start(stored, namespace, name, query, headers, |r| state.exec(r))
                    .map(|a| stream_session(a.switch(), move |io| exec::relay(io, a)))
            } else {
                attach::start(stored, namespace, name, query, headers, |r| state.attach(r))
                    .map(|a| stream_session(a.switch(), move |io| attach::relay(io, a)))
            };
            return match session {
                Ok((switch, relay)) => {
                    state.faults.served(&facts);
                    upgraded(parts.extensions.remove(), &switch, relay).into()
                }
                Err(e) => error_response(&e, &parts.headers).into(),
            };
        }
        if info.group.is_empty() && info.resource == "pods" && info.subresource == "portforward" {
            let query = parts.uri.query();
            return match portforward::start(
                &state,
                &info.namespace,
                &info.name,
                query,
                &parts.headers,
            ) {
                Ok(accepted) => {
                    state.faults.served(&facts);
                    let switch = accepted.switch.clone();
                    upgraded(parts.extensions.remove(), &switch, move |io| {
                        portforward::serve(io, accepted)
                    })
                    .into()
                }
                Err(e) => error_response(&e, &parts.headers).into(),
            };
        }
        if !accepts_json(&parts.headers) {
            return error_response(&ApiError::NotAcceptable, &parts.headers).into();
        }
        if info.path.starts_with(control::PREFIX) {
            return match control::serve(&state, &parts.method, &info.path, &body) {
                Ok((code, value)) => json_response(code, &value, &parts.headers),
                Err(e) => error_response(&e, &parts.headers),
            }
            .into();
        }
        if !info.resource_request {
            return non_resource(&state, &parts.method, &info, server_addr, &parts.headers).into();
        }
        let content_type = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let manager = query
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| {
                user_agent
                    .split('/')
                    .next()
                    .filter(|p| !p.is_empty())
                    .unwrap_or("unknown")
                    .to_string()
            });
        let call = Call {
            state: &state,
            info: &info,
            query: &query,
            content_type,
            body,
            manager,
            user: &user,
        };
        if info.verb == "watch" {
            return watch_response(&state, &call, &parts.headers, shutdown).into();
        }
        if info.resource == "pods" && info.subresource == "proxy" {
            return match pod_proxy(&state, &info).await {
                Ok((code, body)) => full(code, "text/plain", body).into(),
                Err(e) => error_response(&e, &parts.headers).into(),
            };
        }
        if info.group.is_empty()
            && info.resource == "pods"
            && info.subresource == "log"
            && info.verb == "get"
        {
            let stored = state.store.get(
                &self::status::GroupResource::new("", "pods"),
                &info.namespace,
                &info.name,
            );
            return match podlog::read(stored, &info.namespace, &info.name, &query, |r| {
                state.read_log(r)
            }) {
                Ok(stream) => {
                    state.faults.served(&facts);
                    log_response(stream, shutdown).into()
                }
                Err(e) => error_response(&e, &parts.headers).into(),
            };
        }
        let (served, warnings) = warnings::collect_warnings(|| call.serve());
        if served.as_ref().is_ok_and(|(code, _)| *code < 400) {
            state.faults.served(&facts);
        }
        let mut response = match served {
            Ok((code, Value::String(text))) => full(code, "text/plain", text.into_bytes()),
            Ok((code, value)) => {
                if info.verb == "create" && info.name.is_empty() {
                    created_name = value["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                }
                let value = if wants_partial_metadata(&parts.headers) {
                    partial_metadata(value)
                } else if matches!(info.verb.as_str(), "get" | "list")
                    && info.subresource.is_empty()
                    && table::requested(
                        parts
                            .headers
                            .get(hyper::header::ACCEPT)
                            .and_then(|v| v.to_str().ok()),
                    )
                {
                    match as_table(&state, &info, &query, &value) {
                        Ok(Some(table)) => table,
                        Ok(None) => value,
                        Err(e) => return error_response(&e, &parts.headers).into(),
                    }
                } else {
                    value
                };
                json_response(code, &value, &parts.headers)
            }
            Err(e) => error_response(&e, &parts.headers),
        };
        warnings::add_warning_headers(&mut response, &warnings);
        response.into()
    }
    .await;
    let source_ip = peer.ip();
    state.audit.record(AuditEvent {
        time,
        seq: 0,
        user: audited_user.name.clone(),
        groups: audited_user.groups.clone(),
        impersonated_by,
        source_ip: source_ip.to_string(),
        pod: state.audit.pod_of(source_ip),
        verb: info.verb.clone(),
        api_group: info.group.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        namespace: info.namespace.clone(),
        name: if info.name.is_empty() {
            created_name
        } else {
            info.name.clone()
        },
        request_uri: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        user_agent,
        code: outcome.code,
    });
    if let Some(deferral) = &losing {
        state.faults.lost(deferral, &info.summary(), outcome.code);
    }
    let mut response = outcome.response;
    if component_status::warns(&info) && !matches!(outcome.code, 401 | 403) {
        response.headers_mut().insert(
            hyper::header::WARNING,
            HeaderValue::from_static(component_status::WARNING),
        );
    }
    response
}

fn watch_response(
    state: &Arc<State>,
    call: &Call<'_>,
    headers: &HeaderMap,
    shutdown: signal::Receiver<bool>,
) -> Response<Body> {
    let rt = {
        let registry = state.registry();
        registry
            .lookup(&call.info.group, &call.info.version, &call.info.resource)
            .cloned()
    };
    let Some(rt) = rt.filter(|_| call.info.subresource.is_empty()) else {
        return error_response(&ApiError::NoSuchResource, headers);
    };
    if matches!(rt.backing, registry::Backing::Health) {
        return error_response(&component_status::watch_refused(), headers);
    }
    let plan = match watch::plan(call, &rt) {
        Ok(plan) => plan,
        Err(e) => return error_response(&e, headers),
    };
    let mut lines = watch::run(state.clone(), plan, shutdown);
    if table::requested(
        headers
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    ) {
        match table_events(state, call, &rt, lines) {
            Ok(tables) => lines = tables,
            Err(e) => return error_response(&e, headers),
        }
    }
    let stream = ReceiverStream::new(lines).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// The answer to an accepted `pods/exec` or `pods/portforward`: 101 Switching Protocols
/// as `switch` says, and `serve` on the connection once it is upgraded (see [`upgrade`]).
/// The upgraded connection of an exec or attach session.
type UpgradedIo = hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>;

/// What serves an accepted exec or attach session on its upgraded connection.
type Relay = Box<dyn FnOnce(UpgradedIo) -> futures::future::BoxFuture<'static, ()> + Send>;

/// An accepted exec or attach session: how the 101 answers, and its relay.
fn stream_session<Fut>(
    switch: upgrade::Switch,
    relay: impl FnOnce(UpgradedIo) -> Fut + Send + 'static,
) -> (upgrade::Switch, Relay)
where
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    (switch, Box::new(move |io| Box::pin(relay(io))))
}

fn upgraded<F, Fut>(
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    switch: &upgrade::Switch,
    serve: F,
) -> Response<Body>
where
    F: FnOnce(hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    upgrade::switching_protocols(upgrade, switch, serve)
        .map(|body| body.map_err(|never| match never {}).boxed())
}

/// A `pods/log` answer: the log so far as one body, or with `follow` a chunked stream of it
/// and the later output, which ends when the source's does, when the client goes away or
/// when the server stops.
fn log_response(stream: podlog::LogStream, mut shutdown: signal::Receiver<bool>) -> Response<Body> {
    let Some(mut rest) = stream.rest else {
        return full(200, "text/plain", stream.head.to_vec());
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let head = stream.head;
    tokio::spawn(async move {
        if !head.is_empty() && tx.send(head).await.is_err() {
            return;
        }
        loop {
            tokio::select! {
                chunk = rest.next() => match chunk {
                    Some(chunk) => {
                        if tx.send(chunk).await.is_err() {
                            return;
                        }
                    }
                    None => return,
                },
                () = tx.closed() => return,
                _ = shutdown.changed() => return,
            }
        }
    });
    let body = ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut resp = Response::new(StreamBody::new(body).boxed());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

fn non_resource(
    state: &State,
    method: &Method,
    info: &RequestInfo,
    server_addr: SocketAddr,
    headers: &HeaderMap,
) -> Response<Body> {
    if *method != Method::GET && *method != Method::HEAD {
        return error_response(&ApiError::MethodNotSupported, headers);
    }
    let path = info.path.trim_end_matches('/');
    let registry = state.registry();
    if path == "/api" || path == "/apis" {
        let accept = headers
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        let form = aggregated::negotiate(accept);
        if form != aggregated::Form::Plain {
            let body = if path == "/api" {
                aggregated::core(&registry)
            } else {
                aggregated::groups(&registry)
            };
            return aggregated_response(form, &body, headers);
        }
    }
    let found = match path {
        "/healthz" | "/livez" | "/readyz" => {
            return full(200, "text/plain; charset=utf-8", b"ok".to_vec());
        }
        "/version" => {
            let body = answer_json::version_document(&discovery::version());
            return full(200, "application/json", body);
        }
        "/api" => Some(discovery::core_versions(&server_addr.to_string())),
        "/apis" => Some(discovery::group_list(&registry)),
        "/openapi/v3" => Some(discovery::openapi_index(&registry)),
        _ => {
            if let Some(rest) = path.strip_prefix("/openapi/v3/") {
                discovery::openapi_document(&registry, rest)
            } else if path.starts_with("/api/")
                || (path.starts_with("/apis/") && !info.version.is_empty())
            {
                discovery::resource_list(&registry, &info.group, &info.version)
            } else if let Some(group) = path.strip_prefix("/apis/") {
                discovery::group(&registry, group)
            } else {
                None
            }
        }
    };
    match found {
        Some(v) => json_response(200, &v, headers),
        None => error_response(&ApiError::NoSuchResource, headers),
    }
}

/// An aggregated discovery document with its media type, `ETag`, `Vary: Accept` and
/// `Cache-Control: public`; `304 Not Modified` when `If-None-Match` names its `ETag`.
fn aggregated_response(
    form: aggregated::Form,
    body: &Value,
    headers: &HeaderMap,
) -> Response<Body> {
    // The ETag hashes the document as json.Marshal writes it, without the encoder's newline.
    let etag = aggregated::etag(&answer_json::to_vec(body));
    let mut resp = if headers
        .get(hyper::header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        // As kube-apiserver: a 304 names no Content-Type.
        let mut not_modified = full(304, aggregated::CONTENT_TYPE, Vec::new());
        not_modified.headers_mut().remove(CONTENT_TYPE);
        not_modified
    } else if form == aggregated::Form::AggregatedYaml {
        let yaml = serde_yaml::to_string(body).unwrap_or_default();
        full(200, aggregated::CONTENT_TYPE_YAML, yaml.into_bytes())
    } else {
        full(200, aggregated::CONTENT_TYPE, answer_json::document(body))
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(hyper::header::ETAG, v);
    }
    h.insert(hyper::header::VARY, HeaderValue::from_static("Accept"));
    h.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("public"),
    );
    resp
}

/// `GET pods/{name[:port]}/proxy/{path}`: the answer of the pod's own HTTP server (plain
/// HTTP only, port 80 unless named), as kube-apiserver relays it.
async fn pod_proxy(state: &State, info: &RequestInfo) -> Result<(u16, Vec<u8>), ApiError> {
    if info.verb != "get" {
        return Err(ApiError::MethodNotSupported);
    }
    let (name, port) = match info.name.split_once(':') {
        Some((name, port)) => (
            name,
            port.parse::<u16>().map_err(|_| {
                ApiError::BadRequest(format!("invalid port {port:?} in {:?}", info.name))
            })?,
        ),
        None => (info.name.as_str(), 80),
    };
    let gr = self::status::GroupResource::new("", "pods");
    let pod = state
        .store
        .get(&gr, &info.namespace, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let ip: std::net::IpAddr = pod["status"]["podIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| {
            ApiError::BadRequest(format!("pod {name} has no IP address yet: no proxy to it"))
        })?;
    plain_http::get(
        std::net::SocketAddr::new(ip, port),
        &info.proxy_path,
        std::time::Duration::from_secs(5),
    )
    .await
    .map_err(|e| ApiError::Custom {
        code: 503,
        reason: "ServiceUnavailable".into(),
        message: format!("error trying to reach service: {}", crate::error_chain(&e)),
    })
}
