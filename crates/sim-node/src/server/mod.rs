//! The kubelet's own HTTPS endpoint, where a real kube-apiserver reaches a node's pods:
//! `GET /containerLogs/{namespace}/{pod}/{container}` with the `PodLogOptions`
//! kube-apiserver passes on (`follow` streams until the container instance ends) for
//! `kubectl logs`, `/exec/{namespace}/{pod}/{container}` ([`exec`]: the command's streams
//! over SPDY/3.1) for `kubectl exec`, `/attach/{namespace}/{pod}/{container}` (what the
//! container writes from then on; its stdin) for `kubectl attach`, `/portForward/{namespace}/{pod}` (the sessions of
//! [`sim_apiserver::portforward`]: over SPDY/3.1 for `kubectl port-forward`, which
//! kube-apiserver turns into SPDY; over the WebSocket channel protocol with `?port=` for
//! kube-rs's `Portforwarder`, which kube-apiserver passes on as it is), and
//! `/healthz`. The simulated API server reads logs and runs commands in-process and needs
//! none of this.
//!
//! It listens on the node's own address (InternalIP) on a free port, which the Node
//! advertises as `status.daemonEndpoints.kubeletEndpoint.Port`, with a serving certificate
//! for that address and the node's name, signed by the CA the API server gives kubelets
//! ([`crate::upstream::Upstream::kubelet_serving_ca`], so kube-apiserver's
//! `--kubelet-certificate-authority` can verify it) or else self-signed. Every request is
//! authenticated and authorized as the kubelet does it ([`auth`]): client certificates
//! signed by the API server's CA, bearer tokens by TokenReview, SubjectAccessReviews of
//! `nodes/proxy` and the like.
//!
//! # Caveats
//! - `/attach` has one output stream (see [`exec`]).
//! - The stats, metrics, pods and checkpoint endpoints are not served (404).

pub mod auth;
pub mod exec;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};
use sim_apiserver::podlog::{LogOptions, LogStream};
use sim_apiserver::request::Query;
use sim_apiserver::tls::SigningCa;
use sim_apiserver::upgrade::{self, Switch};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::rustls;

use super::shared::Shared;

/// Errors of the kubelet's endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {ip} for the kubelet endpoint")]
    Bind {
        /// The node's address.
        ip: IpAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The serving certificate could not be made.
    #[error("cannot make the kubelet's serving certificate")]
    Certificate(#[source] rcgen::Error),
    /// The CA that verifies client certificates could not be read.
    #[error("cannot read the client CA of the kubelet endpoint (expected PEM certificates)")]
    ClientCa(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// rustls refused the configuration.
    #[error("cannot configure tls for the kubelet endpoint")]
    Tls(#[source] rustls::Error),
}

/// Binds the endpoint's socket on `ip`, a free port (the Node advertises it).
///
/// # Errors
/// When the socket cannot be bound.
pub(crate) async fn bind(ip: IpAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind((ip, 0))
        .await
        .map_err(|source| ServerError::Bind { ip, source })
}

/// The endpoint's TLS: a serving certificate for `ip` and `node` (signed by `issuer`, else
/// self-signed), and client certificates verified against `client_ca` (PEM) when a client
/// presents one (none is needed: a bearer token may do instead).
///
/// # Errors
/// When the certificate cannot be made or the CA read.
pub fn tls_config(
    node: &str,
    ip: IpAddr,
    issuer: Option<&SigningCa>,
    client_ca: &str,
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    use rcgen::{
        CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose,
    };
    let key = KeyPair::generate().map_err(ServerError::Certificate)?;
    let mut params = CertificateParams::new(vec![ip.to_string(), node.to_string()])
        .map_err(ServerError::Certificate)?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{node}@kubelet"));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = match issuer {
        Some(ca) => {
            let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(ServerError::Certificate)?;
            let issuer =
                Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).map_err(ServerError::Certificate)?;
            params.signed_by(&key, &issuer)
        }
        None => params.self_signed(&key),
    }
    .map_err(ServerError::Certificate)?;
    let mut roots = rustls::RootCertStore::empty();
    for der in rustls_pemfile::certs(&mut client_ca.as_bytes()) {
        let der = der.map_err(|e| ServerError::ClientCa(Box::new(e)))?;
        roots
            .add(der)
            .map_err(|e| ServerError::ClientCa(Box::new(e)))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| ServerError::ClientCa(Box::new(e)))?;
    let chain = vec![cert.der().clone()];
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ServerError::Tls)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(ServerError::Tls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves the endpoint on `listener` for the kubelet `shared` with `tls` until the task is
/// aborted.
pub(crate) fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shared: Weak<Shared>,
) -> JoinHandle<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let shared = shared.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                // rustls verified it against the client CA.
                let certificate = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|der| auth::certificate_user(der));
                let service = hyper::service::service_fn(move |req| {
                    let shared = shared.clone();
                    let certificate = certificate.clone();
                    async move { Ok::<_, Infallible>(answer(&shared, certificate, req).await) }
                });
                // With upgrades: exec and port-forward switch the connection to SPDY.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
            });
        }
    })
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Authenticates and authorizes the request, then answers it.
async fn answer<B>(
    shared: &Weak<Shared>,
    certificate: Option<auth::User>,
    mut req: Request<B>,
) -> Response<Body> {
    let Some(shared) = shared.upgrade() else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "the kubelet is stopping");
    };
    let authorization = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let checked = match shared
        .reviews
        .authenticate(certificate, authorization)
        .await
    {
        Ok(user) => {
            shared
                .reviews
                .authorize(
                    &shared.config.node_name,
                    &user,
                    req.method(),
                    req.uri().path(),
                )
                .await
        }
        Err(refusal) => Err(refusal),
    };
    if let Err(refusal) = checked {
        return text(status(refusal.code()), refusal.to_string());
    }
    let path = req.uri().path().to_owned();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts[..] {
        ["healthz"] => text(StatusCode::OK, "ok"),
        ["containerLogs", namespace, pod, container] => {
            container_log(&shared, namespace, pod, container, req.uri().query())
        }
        ["exec", namespace, pod, container] | ["exec", namespace, pod, _, container] => {
            let upgrade = hyper::upgrade::on(&mut req);
            remote_command(&shared, (namespace, pod, container), &req, upgrade, false)
        }
        ["portForward", namespace, pod] | ["portForward", namespace, pod, _] => {
            let upgrade = hyper::upgrade::on(&mut req);
            port_forward(&shared, namespace, pod, &req, upgrade)
        }
        ["attach", namespace, pod, container] | ["attach", namespace, pod, _, container] => {
            let upgrade = hyper::upgrade::on(&mut req);
            remote_command(&shared, (namespace, pod, container), &req, upgrade, true)
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

fn container_log(
    shared: &Shared,
    namespace: &str,
    pod: &str,
    container: &str,
    query: Option<&str>,
) -> Response<Body> {
    let query = Query::parse(query);
    let options = match LogOptions::parse(&query, pod) {
        Ok(options) => options,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Some(runtime) = shared.find(namespace, pod) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} not found on this node"),
        );
    };
    match runtime.read_log(container, &options, chrono::Utc::now()) {
        Err(e) => text(StatusCode::BAD_REQUEST, e.to_string()),
        Ok(LogStream { head, rest: None }) => text(StatusCode::OK, head),
        Ok(LogStream {
            head,
            rest: Some(rest),
        }) => {
            let chunks = futures::stream::iter([head])
                .chain(rest)
                .map(|chunk| Ok::<_, Infallible>(Frame::data(chunk)));
            let mut response = Response::new(StreamBody::new(chunks).boxed_unsync());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain"),
            );
            response
        }
    }
}

/// The 101 that switches to `switch`, with `serve` on the upgraded connection.
fn switched<F, Fut>(upgrade: hyper::upgrade::OnUpgrade, switch: &Switch, serve: F) -> Response<Body>
where
    F: FnOnce(hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    upgrade::switching_protocols(Some(upgrade), switch, serve)
        .map(|body| body.map_err(|never| match never {}).boxed_unsync())
}

fn refused(e: &sim_apiserver::status::ApiError) -> Response<Body> {
    text(status(e.code()), e.to_string())
}

/// An exec (`attach` false) or an attach in `container` of a pod of this node: its options
/// and stream protocol checked, the command started or the container's output followed,
/// then the 101 and the session.
fn remote_command<B>(
    shared: &Shared,
    (namespace, pod, container): (&str, &str, &str),
    req: &Request<B>,
    upgrade: hyper::upgrade::OnUpgrade,
    attach: bool,
) -> Response<Body> {
    let parsed = if attach {
        exec::ExecOptions::parse_attach(req.uri().query())
    } else {
        exec::ExecOptions::parse(req.uri().query())
    };
    let options = match parsed {
        Ok(options) => options,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    if !upgrade::is_spdy(req.headers()) {
        return text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request",
        );
    }
    let switch = match upgrade::stream_protocol(req.headers(), exec::PROTOCOLS) {
        Ok(protocol) => Switch::Spdy(protocol),
        Err(e) => return refused(&e),
    };
    let Some(runtime) = shared.find(namespace, pod) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    if !attach {
        let started = match runtime.exec(container, &options.command, options.stdin, options.tty) {
            Ok(started) => started,
            Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        return switched(upgrade, &switch, move |io| {
            exec::serve(io, started, options)
        });
    }
    match runtime.attach(container, options.stdin) {
        Ok(attached) => switched(upgrade, &switch, move |io| {
            exec::serve_attach(io, attached, options)
        }),
        Err(e) => text(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

fn port_forward<B>(
    shared: &Shared,
    namespace: &str,
    pod: &str,
    req: &Request<B>,
    upgrade: hyper::upgrade::OnUpgrade,
) -> Response<Body> {
    use sim_apiserver::portforward::{Accepted, KubeletOptions};
    // As the kubelet: the ports of a WebSocket first, then the pod, then the upgrade.
    let options = match KubeletOptions::parse(req.headers(), req.uri().query()) {
        Ok(options) => options,
        Err(e) => return refused(&e),
    };
    let Some(runtime) = shared.find(namespace, pod) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let target = sim_apiserver::portforward::Target {
        namespace: namespace.to_owned(),
        name: pod.to_owned(),
        uid: runtime.uid.clone(),
        ip: IpAddr::V4(runtime.ip),
    };
    match Accepted::for_kubelet(req.headers(), options, target) {
        Ok(accepted) => {
            let switch = accepted.switch.clone();
            switched(upgrade, &switch, move |io| {
                sim_apiserver::portforward::serve(io, accepted)
            })
        }
        Err(e) => refused(&e),
    }
}
