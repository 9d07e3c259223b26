//! The kubelet's own HTTPS endpoint, where a real kube-apiserver reads container logs
//! (`kubectl logs`, `pods/log`): `GET /containerLogs/{namespace}/{pod}/{container}` with
//! the `PodLogOptions` kube-apiserver passes on (`follow` streams until the container
//! instance ends), and `/healthz`. The simulated API server reads the same logs
//! in-process and needs none of this.
//!
//! It listens on the node's own address (InternalIP) on a free port, which the Node
//! advertises as `status.daemonEndpoints.kubeletEndpoint.Port`, with a self-signed
//! certificate: kube-apiserver verifies kubelets' certificates only when given
//! `--kubelet-certificate-authority`.
//!
//! # Caveats
//! Exec, attach, port-forward and the stats endpoints are not served.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Weak;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};
use sim_apiserver::podlog::{LogOptions, LogStream};
use sim_apiserver::request::Query;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

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
    /// The certificate could not be made.
    #[error("cannot make the kubelet's serving certificate")]
    Tls(#[source] sim_apiserver::tls::TlsError),
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

/// Serves the endpoint on `listener` for the kubelet `shared` until the task is aborted.
///
/// # Errors
/// When the certificate cannot be made.
pub(crate) fn serve(
    listener: TcpListener,
    node: &str,
    shared: Weak<Shared>,
) -> Result<JoinHandle<()>, ServerError> {
    let tls = sim_apiserver::tls::ClusterTls::generate(&format!("kubelet-{node}"))
        .map_err(ServerError::Tls)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config.clone());
    Ok(tokio::spawn(async move {
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
                let service = hyper::service::service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(answer(&shared, &req)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    response
}

fn answer<B>(shared: &Weak<Shared>, req: &Request<B>) -> Response<Body> {
    let path = req.uri().path();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok");
    }
    let Some(rest) = path.strip_prefix("/containerLogs/") else {
        return text(StatusCode::NOT_FOUND, "404 page not found");
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let [namespace, pod, container] = parts[..] else {
        return text(
            StatusCode::BAD_REQUEST,
            "expected /containerLogs/{namespace}/{pod}/{container}",
        );
    };
    let query = Query::parse(req.uri().query());
    let options = match LogOptions::parse(&query, pod) {
        Ok(options) => options,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Some(shared) = shared.upgrade() else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "the kubelet is stopping");
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
