//! The API-aware side of a pod's proxy, for kubelets in front of a real API server, where
//! the harness cannot judge requests inside the server: the proxy terminates the pod's TLS
//! with a certificate of the node's own CA (which the pod trusts beside the cluster's: the
//! `ca.crt` it is given holds both), judges each HTTP request by the request rules the
//! harness set — hold its sender, defer it, delay it, reject it, commit it whatever the pod
//! does or lose its answer: the simulated API server's own [`Faults`] — and forwards it
//! over a TLS connection of its own to the API server, from the pod's address and with the
//! pod's own credentials. Bodies stream through (a request a rule commits is read whole
//! first: it outlives the pod's connection); watches stay open as long as the pod keeps
//! them.
//!
//! Connection faults (partition, delay) still act on the pod's side of the proxy, on the
//! bytes, before anything here sees them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Either, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

use sim_apiserver::audit::PodRef;
use sim_apiserver::faults::{
    AnswerLost, Detachment, Fate, FaultTarget, Faults, Verdict, detachable, request_facts,
};
use sim_apiserver::request::{Query, parse};
use sim_apiserver::tls::ClusterTls;

/// Errors of setting up request inspection on a node.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The node's proxy CA or serving certificate could not be made.
    #[error("cannot make the pod proxies' certificates of node {node}")]
    Certificates {
        /// The node.
        node: String,
        /// The cause.
        #[source]
        source: sim_apiserver::tls::TlsError,
    },
    /// The API server's CA could not be read.
    #[error("cannot trust the api server's ca for the pod proxies of node {node}: {reason}")]
    UpstreamCa {
        /// The node.
        node: String,
        /// What was wrong.
        reason: String,
    },
}

/// What a node's pod proxies need to inspect requests: the rules, the node's proxy
/// certificate, and how they reach the API server.
pub(crate) struct NodeInspection {
    faults: Arc<Faults>,
    serving: Arc<rustls::ServerConfig>,
    /// The node's proxy CA, PEM (pods trust it beside the cluster's).
    ca_pem: String,
    upstream: tokio_rustls::TlsConnector,
}

impl NodeInspection {
    /// A fresh proxy CA for `node` and a TLS client trusting `upstream_ca_pem`.
    pub(crate) fn new(
        node: &str,
        faults: Arc<Faults>,
        upstream_ca_pem: &str,
    ) -> Result<Self, InspectError> {
        let tls = ClusterTls::generate(&format!("{node}-pod-proxy")).map_err(|source| {
            InspectError::Certificates {
                node: node.to_string(),
                source,
            }
        })?;
        let ca_error = |reason: String| InspectError::UpstreamCa {
            node: node.to_string(),
            reason,
        };
        let mut roots = rustls::RootCertStore::empty();
        let mut found = 0;
        for cert in rustls_pemfile::certs(&mut upstream_ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| ca_error(e.to_string()))?;
            roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
            found += 1;
        }
        if found == 0 {
            return Err(ca_error("no CERTIFICATE block in its PEM".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ca_error(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            faults,
            serving: tls.server_config,
            ca_pem: tls.ca_pem,
            upstream: tokio_rustls::TlsConnector::from(Arc::new(client)),
        })
    }

    /// The node's proxy CA, PEM.
    pub(crate) fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// What the proxy of one pod needs: who it is, as the rules see it, and what holds it.
    pub(crate) fn for_pod(
        &self,
        pod: PodRef,
        user: String,
        target: Arc<dyn FaultTarget>,
    ) -> Inspection {
        Inspection {
            faults: self.faults.clone(),
            serving: self.serving.clone(),
            upstream: self.upstream.clone(),
            pod,
            user,
            target,
        }
    }
}

/// The inspection of one pod's requests.
#[derive(Clone)]
pub(crate) struct Inspection {
    faults: Arc<Faults>,
    serving: Arc<rustls::ServerConfig>,
    upstream: tokio_rustls::TlsConnector,
    pod: PodRef,
    user: String,
    target: Arc<dyn FaultTarget>,
}

type Answer = Response<Either<Incoming, Full<Bytes>>>;

/// Why a request could not be forwarded: the pod's connection is closed, as a client
/// talking to the API server directly would see it.
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    #[error("cannot connect to the api server")]
    Connect(#[source] std::io::Error),
    #[error("the api server's connection failed")]
    Http(#[source] hyper::Error),
    #[error("cannot read the pod's request")]
    Request(#[source] hyper::Error),
    #[error(transparent)]
    Lost(#[from] AnswerLost),
}

/// Serves one pod connection (the proxy's side of it): TLS, then HTTP/1.1, each request
/// judged and forwarded on one upstream connection of its own.
pub(crate) async fn serve(
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    inspection: Inspection,
    upstream: SocketAddr,
    source: IpAddr,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(inspection.serving.clone());
    let Ok(tls) = acceptor.accept(stream).await else {
        return;
    };
    let sender: Arc<tokio::sync::Mutex<Option<Upstream>>> = Arc::default();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let inspection = inspection.clone();
        let sender = sender.clone();
        // A task of its own, so that a request a rule commits is forwarded even after the
        // pod went away.
        async move {
            let detachment = Detachment::default();
            detachable(detachment.clone(), async move {
                judged(request, &inspection, &sender, upstream, source, &detachment).await
            })
            .await?
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

/// What the proxy sends upstream: the pod's request body as it streams in, or read whole
/// (a request a `lose` rule took, which must outlive the pod's connection).
type Forwarded = Either<Incoming, Full<Bytes>>;

/// One upstream connection; its task ends with it.
struct Upstream {
    sender: hyper::client::conn::http1::SendRequest<Forwarded>,
    task: tokio::task::AbortHandle,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn judged(
    request: Request<Incoming>,
    inspection: &Inspection,
    sender: &tokio::sync::Mutex<Option<Upstream>>,
    upstream: SocketAddr,
    source: IpAddr,
    detachment: &Detachment,
) -> Result<Answer, ForwardError> {
    let query = Query::parse(request.uri().query());
    let info = parse(request.method(), request.uri().path(), &query);
    let faults = &inspection.faults;
    let facts = request_facts(&info, Some(&inspection.pod), &inspection.user);
    // Dropped once the answer's head is back (or the request failed): rules waiting for
    // this request's answer learn of it then.
    let passage = faults.arrived(&facts);
    match faults.verdict(&facts) {
        Verdict::Pass => {}
        Verdict::Delay(delay) => tokio::time::sleep(delay).await,
        Verdict::Defer(deferral) if deferral.fate.outlives_client() => {
            detachment.mark(deferral.fate);
            let what = info.summary();
            // Read whole now: the pod may go away while the request is held.
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map_err(ForwardError::Request)?;
            let whole = Request::from_parts(parts, Either::Right(Full::new(body.to_bytes())));
            faults.defer(deferral.clone(), &what).await;
            let (head, body) = forward(whole, sender, inspection, upstream, source)
                .await?
                .into_parts();
            // Read to its end, so that the upstream connection serves the next request.
            let body = body.collect().await.map_err(ForwardError::Http)?.to_bytes();
            drop(passage);
            let code = head.status.as_u16();
            if code < 400 {
                faults.served(&facts);
            }
            if deferral.fate == Fate::AnswerLost {
                faults.lost(&deferral, &what, code);
                return Err(AnswerLost.into());
            }
            return Ok(Response::from_parts(head, Either::Right(Full::new(body))));
        }
        Verdict::Defer(deferral) => faults.defer(deferral, &info.summary()).await,
        Verdict::Hold(span) => {
            let what = info.summary();
            if let Err(e) = faults.hold_for(inspection.target.clone(), &inspection.pod, span, &what)
            {
                tracing::warn!(error = %e, "holding the sender of {what} failed");
            }
        }
        Verdict::Reject {
            code,
            reason,
            message,
        } => return Ok(rejected(code, &reason, &message)),
    }
    let answer = forward(
        request.map(Either::Left),
        sender,
        inspection,
        upstream,
        source,
    )
    .await?;
    drop(passage);
    if answer.status().as_u16() < 400 {
        faults.served(&facts);
    }
    Ok(answer.map(Either::Left))
}

async fn forward(
    request: Request<Forwarded>,
    sender: &tokio::sync::Mutex<Option<Upstream>>,
    inspection: &Inspection,
    upstream: SocketAddr,
    source: IpAddr,
) -> Result<Response<Incoming>, ForwardError> {
    let mut slot = sender.lock().await;
    if slot.as_ref().is_none_or(|u| u.sender.is_closed()) {
        *slot = Some(connect(inspection, upstream, source).await?);
    }
    let upstream = slot.as_mut().expect("connected above");
    upstream.sender.ready().await.map_err(ForwardError::Http)?;
    upstream
        .sender
        .send_request(request)
        .await
        .map_err(ForwardError::Http)
}

async fn connect(
    inspection: &Inspection,
    upstream: SocketAddr,
    source: IpAddr,
) -> Result<Upstream, ForwardError> {
    let tcp = super::source::connect_from(source, upstream)
        .await
        .map_err(ForwardError::Connect)?;
    let name = rustls::pki_types::ServerName::IpAddress(match upstream.ip() {
        IpAddr::V4(ip) => ip.into(),
        IpAddr::V6(ip) => ip.into(),
    });
    let tls = inspection
        .upstream
        .connect(name, tcp)
        .await
        .map_err(ForwardError::Connect)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(ForwardError::Http)?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    })
    .abort_handle();
    Ok(Upstream { sender, task })
}

/// The answer of a reject rule: a Status, as the simulated API server gives it.
fn rejected(code: u16, reason: &str, message: &str) -> Answer {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Either::Right(Full::new(Bytes::from(status.to_string()))))
        .expect("a status code of 400-599 and a fixed header")
}
