//! How the recorder reads a replica's metrics: where they are served ([`MetricsEndpoint`]:
//! plain HTTP, or HTTPS with a bearer token as a kubebuilder v4 scaffold serves them) and
//! the way there, chosen once for all replicas:
//!
//! - from the test process to the pod IP (dialled with [`pod_network::connect`], which
//!   enters a simulated pod's own network namespace): plain HTTP on a new connection each
//!   scrape; HTTPS
//!   (with the bearer token, when there is one) on a connection kept for the next scrapes
//!   (HTTP/1.1 keep-alive) and opened again after any failure;
//! - through the API server without a token: `pods/<name>:<port>/proxy<path>`, or
//!   `pods/https:<name>:<port>/proxy<path>` for HTTPS;
//! - through the API server with a token: a port-forward (`pods/<name>/portforward`), since
//!   kube-apiserver removes the `Authorization` header of a request it authenticated, so
//!   `pods/proxy` cannot carry the token to the pod. One forwarded connection per pod is
//!   kept (TLS over it for HTTPS, keep-alive, GET after GET) and opened again after any
//!   failure. The simulated API server serves no port-forward: kind exercises this way.
//!
//! The serving certificate of an HTTPS endpoint is **not verified**: a scaffolded manager
//! makes a self-signed one when it starts, and the scaffold's own ServiceMonitor scrapes it
//! with `insecureSkipVerify: true`. The handshake still checks the server's signatures, but
//! not whom its certificate names: the token goes to whatever answers at the pod's address
//! (or at the end of the port-forward to it).
//!
//! A 401 or 403 answer is a [`ScrapeError::Denied`] saying the token lacks the
//! `metrics-reader` role (or that none was sent); a refused connection, directly or at the
//! far end of a port-forward, is [`ScrapeError::is_refused`]: nothing listens, no process
//! of the replica runs.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Portforwarder};
use plain_http::{Get, PlainHttpError, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

/// How long one scrape of a replica's metrics may take, connection and TLS handshake
/// included (not the opening of a port-forward: see [`FORWARD_TIMEOUT`]).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_millis(300);

/// How long opening a port-forward to a pod may take, on top of [`SCRAPE_TIMEOUT`]: it goes
/// through the API server to the pod's kubelet, and is done once per kept connection.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);

/// The scheme of a metrics endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MetricsScheme {
    /// Plain HTTP (controller-runtime's default before kubebuilder v4, the bundled operator).
    #[default]
    Http,
    /// HTTPS, the serving certificate not verified (kubebuilder v4's `:8443`).
    Https,
}

/// Where each replica serves its metrics, on its pod.
#[derive(Clone, PartialEq, Eq)]
pub struct MetricsEndpoint {
    /// Plain HTTP or HTTPS.
    pub scheme: MetricsScheme,
    /// The port on the pod (8080 plain, 8443 for a kubebuilder v4 scaffold).
    pub port: u16,
    /// The path, `/metrics`.
    pub path: String,
    /// Sent as `Authorization: Bearer <token>`: a token of a ServiceAccount allowed `get` on
    /// the non-resource URL `/metrics` (the scaffold's `metrics-reader` ClusterRole). With a
    /// token, scrapes through the API server go by port-forward. Never printed.
    pub bearer_token: Option<String>,
}

impl MetricsEndpoint {
    /// Plain HTTP on `port` at `/metrics`, no token.
    #[must_use]
    pub fn http(port: u16) -> Self {
        Self {
            scheme: MetricsScheme::Http,
            port,
            path: "/metrics".into(),
            bearer_token: None,
        }
    }

    /// HTTPS on `port` at `/metrics` with `bearer_token`, as a kubebuilder v4 scaffold
    /// serves it (port 8443).
    #[must_use]
    pub fn https(port: u16, bearer_token: Option<String>) -> Self {
        Self {
            scheme: MetricsScheme::Https,
            port,
            path: "/metrics".into(),
            bearer_token,
        }
    }
}

impl fmt::Debug for MetricsEndpoint {
    /// The token is shown as `Some("…")`, never itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsEndpoint")
            .field("scheme", &self.scheme)
            .field("port", &self.port)
            .field("path", &self.path)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "…"))
            .finish()
    }
}

/// Why a scrape got no metrics.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// Connecting, sending or reading failed, or the answer was not HTTP.
    #[error(transparent)]
    Http(#[from] PlainHttpError),
    /// The TLS client could not be set up.
    #[error("cannot set up the tls client")]
    TlsSetup(#[source] rustls::Error),
    /// The TLS handshake failed.
    #[error("tls handshake with {target} failed")]
    Tls {
        /// Where the scrape went.
        target: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No answer in time (a frozen, overloaded or cut-off replica).
    #[error("no answer from {target} within {timeout:?}")]
    Timeout {
        /// Where the scrape went.
        target: String,
        /// The time allowed.
        timeout: Duration,
    },
    /// The endpoint refused the request: 401 or 403.
    #[error("{target} answered {status}: {why}")]
    Denied {
        /// Where the scrape went.
        target: String,
        /// 401 or 403.
        status: u16,
        /// What that means here.
        why: String,
    },
    /// Another status than 200.
    #[error("{target} answered with status {status}")]
    Status {
        /// Where the scrape went.
        target: String,
        /// The status.
        status: u16,
    },
    /// The body is not UTF-8 text.
    #[error("the metrics of {target} are not utf-8 text")]
    NotText {
        /// Where the scrape went.
        target: String,
    },
    /// The request through the API server could not be built.
    #[error("cannot build the request for pod {pod}")]
    Request {
        /// The pod.
        pod: String,
        /// The cause.
        #[source]
        source: http::Error,
    },
    /// The API server's `pods/proxy` failed.
    #[error("scraping pod {pod} through the api server's pods/proxy failed")]
    Proxy {
        /// The pod.
        pod: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A port-forward to the pod could not be opened.
    #[error("cannot open a port-forward to pod {pod} port {port}")]
    OpenForward {
        /// The pod.
        pod: String,
        /// The pod's port.
        port: u16,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The far end of a port-forward reported an error (e.g. `…: connection refused`).
    #[error("the port-forward to pod {pod} port {port} failed: {message}")]
    Forwarded {
        /// The pod.
        pod: String,
        /// The pod's port.
        port: u16,
        /// What the kubelet said.
        message: String,
    },
    /// A port-forward ended without saying why.
    #[error("the port-forward to pod {pod} port {port} ended")]
    ForwardEnded {
        /// The pod.
        pod: String,
        /// The pod's port.
        port: u16,
    },
}

impl ScrapeError {
    /// Whether nothing listened on the metrics port, so no process of the replica runs: the
    /// connection was refused, directly or at the far end of a port-forward or `pods/proxy`
    /// (as opposed to a replica that is slow, frozen or cut off, which times out).
    #[must_use]
    pub fn is_refused(&self) -> bool {
        match self {
            Self::Http(e) => e.is_refused(),
            Self::Forwarded { message, .. } => message.contains("connection refused"),
            // kube-apiserver's proxy relays the dial error: "…: connect: connection refused".
            Self::Proxy { source, .. } => source.to_string().contains("connection refused"),
            _ => false,
        }
    }

    /// Whether the endpoint answered 401 or 403: the token is missing, not valid, or lacks
    /// the `metrics-reader` role.
    #[must_use]
    pub fn is_denied(&self) -> bool {
        matches!(self, Self::Denied { .. })
    }

    fn is_timeout(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. } | Self::Http(PlainHttpError::Timeout { .. })
        )
    }
}

/// Which way the scrapes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// To the pod IP from the test process.
    Direct,
    /// The API server's `pods/proxy`.
    Proxy,
    /// A port-forward through the API server.
    PortForward,
}

impl Way {
    fn of(endpoint: &MetricsEndpoint, through_api: bool) -> Self {
        match (through_api, &endpoint.bearer_token) {
            (false, _) => Self::Direct,
            (true, None) => Self::Proxy,
            (true, Some(_)) => Self::PortForward,
        }
    }
}

/// The path of a scrape through `pods/proxy`.
fn proxy_path(namespace: &str, pod: &str, endpoint: &MetricsEndpoint) -> String {
    let scheme = match endpoint.scheme {
        MetricsScheme::Http => "",
        MetricsScheme::Https => "https:",
    };
    format!(
        "/api/v1/namespaces/{namespace}/pods/{scheme}{pod}:{}/proxy{}",
        endpoint.port, endpoint.path
    )
}

/// What the 401 or 403 of an endpoint means.
fn denial(status: u16, endpoint: &MetricsEndpoint, token_sent: bool) -> String {
    let role = format!(
        "the metrics-reader role (get on the non-resource URL {})",
        endpoint.path
    );
    match (token_sent, status) {
        (true, 401) => format!("the bearer token is not valid or lacks {role}"),
        (true, _) => format!("the bearer token lacks {role}"),
        (false, _) => format!("no bearer token was sent; it wants one whose account has {role}"),
    }
}

/// A byte stream a GET can go over.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// What ends with a port-forward's connection.
struct Forward {
    forwarder: Portforwarder,
    /// Resolves with the kubelet's error for the port, or `None` when the forward ends.
    failed: Failed,
}

/// The end of a port-forward, as kube reports it: resolves once, and then again with the
/// same outcome however often it is polled (kube's future may not be polled after it
/// resolved; a connection's several waits on it may each poll it).
struct Failed {
    pending: Option<Pin<Box<dyn Future<Output = Option<String>> + Send>>>,
    outcome: Option<Option<String>>,
}

impl Failed {
    fn new(future: impl Future<Output = Option<String>> + Send + 'static) -> Self {
        Self {
            pending: Some(Box::pin(future)),
            outcome: None,
        }
    }
}

impl Future for Failed {
    type Output = Option<String>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<String>> {
        if let Some(outcome) = &self.outcome {
            return std::task::Poll::Ready(outcome.clone());
        }
        let Some(pending) = self.pending.as_mut() else {
            return std::task::Poll::Pending;
        };
        let outcome = std::task::ready!(pending.as_mut().poll(cx));
        self.pending = None;
        self.outcome = Some(outcome.clone());
        std::task::Poll::Ready(outcome)
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

/// An open connection to a replica's metrics.
struct Connection {
    stream: Box<dyn Io>,
    forward: Option<Forward>,
}

/// Reads the replicas' metrics the way chosen, keeping connections between scrapes. Cheap
/// to clone: the clones share the kept connections.
#[derive(Clone)]
pub(crate) struct Scraper {
    shared: Arc<ScraperShared>,
}

struct ScraperShared {
    endpoint: MetricsEndpoint,
    way: Way,
    /// The API server's client and the pods' namespace, for the ways through it.
    api: Option<(Client, String)>,
    tls: Option<TlsConnector>,
    /// Connections kept between scrapes, by pod.
    kept: Mutex<HashMap<String, Connection>>,
}

impl Scraper {
    /// Scrapes to the pod IP from the test process.
    ///
    /// # Errors
    /// When the TLS client cannot be set up.
    pub(crate) fn direct(endpoint: MetricsEndpoint) -> Result<Self, ScrapeError> {
        Self::new(endpoint, Way::Direct, None)
    }

    /// Scrapes through the API server: `pods/proxy` without a token, a port-forward with
    /// one.
    ///
    /// # Errors
    /// When the TLS client cannot be set up.
    pub(crate) fn through_api(
        endpoint: MetricsEndpoint,
        client: Client,
        namespace: String,
    ) -> Result<Self, ScrapeError> {
        let way = Way::of(&endpoint, true);
        Self::new(endpoint, way, Some((client, namespace)))
    }

    fn new(
        endpoint: MetricsEndpoint,
        way: Way,
        api: Option<(Client, String)>,
    ) -> Result<Self, ScrapeError> {
        let tls = match (endpoint.scheme, way) {
            (MetricsScheme::Https, Way::Direct | Way::PortForward) => Some(tls_connector()?),
            _ => None,
        };
        Ok(Self {
            shared: Arc::new(ScraperShared {
                endpoint,
                way,
                api,
                tls,
                kept: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Closes the kept connection of `pod`, if any: the next scrape opens a new one.
    pub(crate) fn forget(&self, pod: &str) {
        self.kept().remove(pod);
    }

    /// Closes the kept connections of pods other than `pods` (gone, or no longer scraped).
    pub(crate) fn keep_only(&self, pods: &HashSet<String>) {
        self.kept().retain(|pod, _| pods.contains(pod));
    }

    /// The metrics text of `pod` (at `ip`), within [`SCRAPE_TIMEOUT`] (plus
    /// [`FORWARD_TIMEOUT`] when a port-forward is opened).
    pub(crate) async fn scrape(&self, pod: &str, ip: IpAddr) -> Result<String, ScrapeError> {
        let shared = &self.shared;
        match (shared.way, &shared.api) {
            (Way::Proxy, Some((client, namespace))) => self.proxied(client, namespace, pod).await,
            (Way::Direct, _) if shared.tls.is_none() => self.plain(ip).await,
            _ => self.kept_alive(pod, ip).await,
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<String, Connection>> {
        self.shared.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plain HTTP to the pod IP, a new connection each time (as `pods/proxy` does too).
    async fn plain(&self, ip: IpAddr) -> Result<String, ScrapeError> {
        let endpoint = &self.shared.endpoint;
        let addr = SocketAddr::new(ip, endpoint.port);
        let target = addr.to_string();
        let exchange = async {
            let mut stream =
                pod_network::connect(addr)
                    .await
                    .map_err(|source| PlainHttpError::Connect {
                        target: target.clone(),
                        source,
                    })?;
            let get = self.get(&target, false);
            plain_http::get_over(&mut stream, &target, &get).await
        };
        let response = tokio::time::timeout(SCRAPE_TIMEOUT, exchange)
            .await
            .map_err(|_| ScrapeError::Timeout {
                target: target.clone(),
                timeout: SCRAPE_TIMEOUT,
            })??;
        self.text_of(&target, response)
    }

    /// Through the API server's `pods/proxy`.
    async fn proxied(
        &self,
        client: &Client,
        namespace: &str,
        pod: &str,
    ) -> Result<String, ScrapeError> {
        let endpoint = &self.shared.endpoint;
        let target = format!("pod {pod} through the api server's pods/proxy");
        let request = http::Request::get(proxy_path(namespace, pod, endpoint))
            .body(Vec::new())
            .map_err(|source| ScrapeError::Request {
                pod: pod.to_string(),
                source,
            })?;
        match tokio::time::timeout(SCRAPE_TIMEOUT, client.request_text(request)).await {
            Err(_) => Err(ScrapeError::Timeout {
                target,
                timeout: SCRAPE_TIMEOUT,
            }),
            Ok(Ok(text)) => Ok(text),
            Ok(Err(kube::Error::Api(status))) if matches!(status.code, 401 | 403) => {
                Err(ScrapeError::Denied {
                    target,
                    status: status.code,
                    why: format!(
                        "{} (or the api server refused the proxy: {})",
                        denial(status.code, endpoint, false),
                        status.message.trim()
                    ),
                })
            }
            Ok(Err(source)) => Err(ScrapeError::Proxy {
                pod: pod.to_string(),
                source,
            }),
        }
    }

    /// Over a kept connection (HTTPS directly, or a port-forward), opened when there is
    /// none; a kept connection that fails otherwise than by a timeout (the server closed it,
    /// the process restarted) is replaced by a new one at once.
    async fn kept_alive(&self, pod: &str, ip: IpAddr) -> Result<String, ScrapeError> {
        let mut deadline = Instant::now() + SCRAPE_TIMEOUT;
        let target = self.target_of(pod, ip);
        // The pod's address also over a port-forward: the far end is the pod's port.
        let host = SocketAddr::new(ip, self.shared.endpoint.port).to_string();
        let kept = self.kept().remove(pod);
        let reused = kept.is_some();
        let mut connection = match kept {
            Some(connection) => connection,
            None => self.open(pod, ip, &target, &mut deadline).await?,
        };
        let answer = match self
            .exchange(&mut connection, pod, &target, &host, deadline)
            .await
        {
            Err(e) if reused && !e.is_timeout() => {
                tracing::debug!(replica = %pod, error = %e, "kept connection failed; opening another");
                connection = self.open(pod, ip, &target, &mut deadline).await?;
                self.exchange(&mut connection, pod, &target, &host, deadline)
                    .await?
            }
            answer => answer?,
        };
        if answer.reusable {
            self.kept().insert(pod.to_string(), connection);
        }
        self.text_of(&target, answer)
    }

    fn target_of(&self, pod: &str, ip: IpAddr) -> String {
        let endpoint = &self.shared.endpoint;
        match self.shared.way {
            Way::PortForward => format!("pod {pod} port {} by port-forward", endpoint.port),
            _ => SocketAddr::new(ip, endpoint.port).to_string(),
        }
    }

    /// A new connection, TLS set up when the endpoint is HTTPS; opening a port-forward
    /// moves the deadline to [`SCRAPE_TIMEOUT`] after it.
    async fn open(
        &self,
        pod: &str,
        ip: IpAddr,
        target: &str,
        deadline: &mut Instant,
    ) -> Result<Connection, ScrapeError> {
        let port = self.shared.endpoint.port;
        let timeout = |target: &str| ScrapeError::Timeout {
            target: target.to_string(),
            timeout: SCRAPE_TIMEOUT,
        };
        let (stream, mut forward): (Box<dyn Io>, _) = match (self.shared.way, &self.shared.api) {
            (Way::PortForward, Some((client, namespace))) => {
                let (stream, forward) = tokio::time::timeout(
                    FORWARD_TIMEOUT,
                    open_forward(client, namespace, pod, port),
                )
                .await
                .map_err(|_| ScrapeError::Timeout {
                    target: target.to_string(),
                    timeout: FORWARD_TIMEOUT,
                })??;
                *deadline = (*deadline).max(Instant::now() + SCRAPE_TIMEOUT);
                (Box::new(stream), Some(forward))
            }
            _ => {
                let addr = SocketAddr::new(ip, port);
                let stream = tokio::time::timeout_at(*deadline, pod_network::connect(addr))
                    .await
                    .map_err(|_| timeout(target))?
                    .map_err(|source| PlainHttpError::Connect {
                        target: target.to_string(),
                        source,
                    })?;
                (Box::new(stream), None)
            }
        };
        let Some(tls) = &self.shared.tls else {
            return Ok(Connection { stream, forward });
        };
        let handshake = async {
            let shaken = tls.connect(ip.into(), stream);
            match forward.as_mut() {
                None => Ok(shaken.await),
                Some(f) => tokio::select! {
                    biased;
                    failed = &mut f.failed => Err(forward_failure(pod, port, failed)),
                    shaken = shaken => Ok(shaken),
                },
            }
        };
        let shaken = tokio::time::timeout_at(*deadline, handshake).await;
        let stream = match shaken {
            Err(_) => return Err(timeout(target)),
            Ok(Err(failed)) => return Err(failed),
            Ok(Ok(Ok(stream))) => stream,
            Ok(Ok(Err(source))) => {
                return Err(forward_failed_now(forward.as_mut(), pod, port).unwrap_or(
                    ScrapeError::Tls {
                        target: target.to_string(),
                        source,
                    },
                ));
            }
        };
        Ok(Connection {
            stream: Box::new(stream),
            forward,
        })
    }

    /// One GET over `connection` with the `Host` header `host`, by `deadline`; over a
    /// port-forward, whichever comes first of the answer and the forward's failure.
    async fn exchange(
        &self,
        connection: &mut Connection,
        pod: &str,
        target: &str,
        host: &str,
        deadline: Instant,
    ) -> Result<Response, ScrapeError> {
        let port = self.shared.endpoint.port;
        let get = self.get(host, true);
        let Connection { stream, forward } = connection;
        let exchange = plain_http::get_over(stream, target, &get);
        let answer = match forward.as_mut() {
            None => tokio::time::timeout_at(deadline, exchange)
                .await
                .map(|answer| answer.map_err(ScrapeError::from)),
            Some(f) => {
                tokio::time::timeout_at(deadline, async {
                    tokio::select! {
                        biased;
                        failed = &mut f.failed => Err(forward_failure(pod, port, failed)),
                        answer = exchange => answer.map_err(ScrapeError::from),
                    }
                })
                .await
            }
        };
        match answer {
            Err(_) => Err(ScrapeError::Timeout {
                target: target.to_string(),
                timeout: SCRAPE_TIMEOUT,
            }),
            Ok(Ok(response)) => Ok(response),
            // The stream ended or broke: the forward's own error, when it has one, says why.
            Ok(Err(e)) => Err(forward_failed_now(forward.as_mut(), pod, port).unwrap_or(e)),
        }
    }

    fn get<'a>(&'a self, host: &'a str, keep_alive: bool) -> Get<'a> {
        let endpoint = &self.shared.endpoint;
        Get {
            path: &endpoint.path,
            host,
            bearer_token: endpoint.bearer_token.as_deref(),
            keep_alive,
        }
    }

    /// The body of a 200 answer; a 401 or 403 is [`ScrapeError::Denied`].
    fn text_of(&self, target: &str, response: Response) -> Result<String, ScrapeError> {
        let endpoint = &self.shared.endpoint;
        match response.status {
            200 => String::from_utf8(response.body).map_err(|_| ScrapeError::NotText {
                target: target.to_string(),
            }),
            status @ (401 | 403) => Err(ScrapeError::Denied {
                target: target.to_string(),
                status,
                why: denial(status, endpoint, endpoint.bearer_token.is_some()),
            }),
            status => Err(ScrapeError::Status {
                target: target.to_string(),
                status,
            }),
        }
    }
}

/// Opens a port-forward to `port` of `pod` and takes its stream and error.
async fn open_forward(
    client: &Client,
    namespace: &str,
    pod: &str,
    port: u16,
) -> Result<(tokio::io::DuplexStream, Forward), ScrapeError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut forwarder =
        pods.portforward(pod, &[port])
            .await
            .map_err(|source| ScrapeError::OpenForward {
                pod: pod.to_string(),
                port,
                source,
            })?;
    let ended = || ScrapeError::ForwardEnded {
        pod: pod.to_string(),
        port,
    };
    let stream = forwarder.take_stream(port).ok_or_else(ended)?;
    let failed = forwarder.take_error(port).ok_or_else(ended)?;
    Ok((
        stream,
        Forward {
            forwarder,
            failed: Failed::new(failed),
        },
    ))
}

/// The error of a forward whose failure future resolved.
fn forward_failure(pod: &str, port: u16, failed: Option<String>) -> ScrapeError {
    match failed {
        Some(message) => ScrapeError::Forwarded {
            pod: pod.to_string(),
            port,
            message,
        },
        None => ScrapeError::ForwardEnded {
            pod: pod.to_string(),
            port,
        },
    }
}

/// The forward's error if it has already failed (the kubelet's error comes before the end
/// of the stream it breaks). The connection is dropped after this.
fn forward_failed_now(forward: Option<&mut Forward>, pod: &str, port: u16) -> Option<ScrapeError> {
    let failed = (&mut forward?.failed).now_or_never()?;
    Some(forward_failure(pod, port, failed))
}

/// A TLS client (ring) that accepts any serving certificate, as the scaffold's
/// ServiceMonitor does with `insecureSkipVerify: true`.
fn tls_connector() -> Result<TlsConnector, ScrapeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyServerCertificate {
        schemes: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ScrapeError::TlsSetup)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Accepts any certificate for any name, but checks the handshake's signatures against it.
#[derive(Debug)]
struct AnyServerCertificate {
    schemes: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.schemes)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.schemes)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.schemes.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    const TOKEN: &str = "the-metrics-reader-token";

    const METRICS: &str = "leader_election_master_status{name=\"lock\"} 1\n\
        controller_runtime_reconcile_total{controller=\"memcached\",result=\"success\"} 4\n";

    /// A stand-in for a kubebuilder v4 manager's metrics endpoint: HTTPS with a self-signed
    /// certificate, `/metrics` only for the right bearer token (401 for any other) and its
    /// own address as `Host` (400 otherwise, as Go's server answers a bad one), and
    /// `answers_per_connection` answers on a connection before it closes it.
    struct MetricsServer {
        addr: SocketAddr,
        connections: Arc<AtomicUsize>,
    }

    impl MetricsServer {
        async fn start(tls: bool, answers_per_connection: usize) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let acceptor = tls.then(self_signed_acceptor);
            let connections = Arc::new(AtomicUsize::new(0));
            let counted = connections.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        match acceptor {
                            Some(acceptor) => {
                                if let Ok(stream) = acceptor.accept(tcp).await {
                                    serve(stream, addr, answers_per_connection).await;
                                }
                            }
                            None => serve(tcp, addr, answers_per_connection).await,
                        }
                    });
                }
            });
            Self { addr, connections }
        }

        fn connections(&self) -> usize {
            self.connections.load(Ordering::SeqCst)
        }
    }

    fn self_signed_acceptor() -> tokio_rustls::TlsAcceptor {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["memcached-operator".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
        );
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
        mut stream: S,
        addr: SocketAddr,
        answers: usize,
    ) {
        for _ in 0..answers {
            let mut request = Vec::new();
            while !request.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                if stream.read_exact(&mut byte).await.is_err() {
                    return;
                }
                request.push(byte[0]);
            }
            let request = String::from_utf8_lossy(&request);
            let authorized = request
                .lines()
                .any(|line| line == format!("Authorization: Bearer {TOKEN}"));
            let hosted = request.lines().any(|line| line == format!("Host: {addr}"));
            let answer = if !hosted {
                "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_string()
            } else if authorized {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{METRICS}",
                    METRICS.len()
                )
            } else {
                "HTTP/1.1 401 Unauthorized\r\nContent-Length: 13\r\n\r\nUnauthorized\n".to_string()
            };
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = stream.shutdown().await;
    }

    fn loopback() -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }

    fn scraper(scheme: MetricsScheme, port: u16, token: Option<&str>) -> Scraper {
        Scraper::direct(MetricsEndpoint {
            scheme,
            port,
            path: "/metrics".into(),
            bearer_token: token.map(str::to_string),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn an_https_endpoint_with_a_self_signed_certificate_is_scraped_with_the_bearer_token_over_one_connection()
     {
        let server = MetricsServer::start(true, usize::MAX).await;
        let scraper = scraper(MetricsScheme::Https, server.addr.port(), Some(TOKEN));
        for _ in 0..3 {
            let text = scraper.scrape("op-a", loopback()).await.unwrap();
            let scrape = crate::record::recorder::parse_metrics(&text, "lock");
            assert_eq!(scrape.leader, Some(true));
            assert_eq!(scrape.reconciles.get("success"), Some(&4));
        }
        assert_eq!(server.connections(), 1, "the connection is kept");
    }

    #[tokio::test]
    async fn a_wrong_bearer_token_is_a_401_failure_saying_the_token_lacks_the_metrics_reader_role()
    {
        let server = MetricsServer::start(true, usize::MAX).await;
        let scraper = scraper(MetricsScheme::Https, server.addr.port(), Some("stolen"));
        let e = scraper.scrape("op-a", loopback()).await.unwrap_err();
        assert!(e.is_denied() && !e.is_refused(), "{e:?}");
        let message = crate::error_chain(&e);
        assert_eq!(
            message,
            format!(
                "{} answered 401: the bearer token is not valid or lacks the metrics-reader \
                 role (get on the non-resource URL /metrics)",
                server.addr
            )
        );
        assert!(!message.contains("stolen"));

        let no_token = self::scraper(MetricsScheme::Https, server.addr.port(), None);
        let e = no_token.scrape("op-a", loopback()).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("answered 401: no bearer token was sent"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_kept_connection_the_server_closed_is_replaced_within_the_same_scrape() {
        let server = MetricsServer::start(true, 1).await;
        let scraper = scraper(MetricsScheme::Https, server.addr.port(), Some(TOKEN));
        for _ in 0..3 {
            scraper.scrape("op-a", loopback()).await.unwrap();
        }
        assert_eq!(server.connections(), 3);
    }

    #[tokio::test]
    async fn plain_http_is_still_scraped_on_a_new_connection_each_time() {
        let server = MetricsServer::start(false, usize::MAX).await;
        let scraper = scraper(MetricsScheme::Http, server.addr.port(), Some(TOKEN));
        for _ in 0..2 {
            let text = scraper.scrape("op-a", loopback()).await.unwrap();
            assert_eq!(text, METRICS);
        }
        assert_eq!(server.connections(), 2);
    }

    #[tokio::test]
    async fn a_closed_port_is_refused_over_https_too_and_its_kept_connection_is_dropped() {
        let server = MetricsServer::start(true, usize::MAX).await;
        let scraper = scraper(MetricsScheme::Https, server.addr.port(), Some(TOKEN));
        scraper.scrape("op-a", loopback()).await.unwrap();
        scraper.keep_only(&HashSet::new());
        assert!(scraper.kept().is_empty());

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let e = self::scraper(MetricsScheme::Https, port, Some(TOKEN))
            .scrape("op-a", loopback())
            .await
            .unwrap_err();
        assert!(e.is_refused(), "{e:?}");
    }

    #[test]
    fn the_way_follows_reachability_and_the_token_and_the_proxy_path_the_scheme() {
        let http = MetricsEndpoint::http(8080);
        let https = MetricsEndpoint::https(8443, Some(TOKEN.into()));
        let https_open = MetricsEndpoint::https(8443, None);
        assert_eq!(Way::of(&https, false), Way::Direct);
        assert_eq!(Way::of(&http, true), Way::Proxy);
        assert_eq!(Way::of(&https_open, true), Way::Proxy);
        assert_eq!(Way::of(&https, true), Way::PortForward);
        assert_eq!(
            proxy_path("ops", "op-a", &http),
            "/api/v1/namespaces/ops/pods/op-a:8080/proxy/metrics"
        );
        assert_eq!(
            proxy_path("ops", "op-a", &https_open),
            "/api/v1/namespaces/ops/pods/https:op-a:8443/proxy/metrics"
        );
    }

    #[test]
    fn an_endpoint_never_prints_its_bearer_token() {
        let printed = format!("{:?}", MetricsEndpoint::https(8443, Some(TOKEN.into())));
        assert!(!printed.contains(TOKEN), "{printed}");
        assert!(printed.contains("bearer_token: Some(\"…\")"), "{printed}");
        assert!(format!("{:?}", MetricsEndpoint::http(8080)).contains("bearer_token: None"));
    }

    #[test]
    fn the_end_of_a_port_forward_can_be_waited_on_again_after_it_came() {
        // kube's error future is a `Map`, which panics when polled after it resolved.
        let mut failed = Failed::new(
            futures::future::ready(Some("lost connection to pod".to_string()))
                .map(|message| message),
        );
        assert_eq!(
            (&mut failed).now_or_never(),
            Some(Some("lost connection to pod".to_string()))
        );
        assert_eq!(
            (&mut failed).now_or_never(),
            Some(Some("lost connection to pod".to_string()))
        );
    }

    #[test]
    fn a_refusal_at_the_far_end_of_a_port_forward_is_refused() {
        let refused = forward_failure(
            "op-a",
            8443,
            Some(
                "error forwarding port 8443 to pod 1234, uid : failed to execute portforward \
                 in network namespace \"/var/run/netns/cni-1\": failed to connect to \
                 localhost:8443 inside namespace \"1234\", IPv4: dial tcp4 127.0.0.1:8443: \
                 connect: connection refused IPv6 dial tcp6: address localhost: no suitable \
                 address found"
                    .into(),
            ),
        );
        assert!(refused.is_refused(), "{refused}");
        assert!(!forward_failure("op-a", 8443, None).is_refused());
    }
}
