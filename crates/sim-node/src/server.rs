//! The kubelet's own HTTPS endpoint, where a real kube-apiserver reads container logs
//! (`kubectl logs`, `pods/log`): `GET /containerLogs/{namespace}/{pod}/{container}` with
//! `previous`, `tailLines` and `limitBytes`, and `/healthz`. The simulated API server reads
//! the logs in-process and needs none of this.
//!
//! It listens on the node's own address (InternalIP) on a free port, which the Node
//! advertises as `status.daemonEndpoints.kubeletEndpoint.Port`, with a self-signed
//! certificate: kube-apiserver verifies kubelets' certificates only when given
//! `--kubelet-certificate-authority`.
//!
//! # Caveats
//! `follow=true` answers what has been written so far and ends; exec, attach, port-forward
//! and the stats endpoints are not served.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Weak;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
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

fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "text/plain".parse().expect("a valid header"),
    );
    response
}

fn answer<B>(shared: &Weak<Shared>, req: &Request<B>) -> Response<Full<Bytes>> {
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
    let query: Vec<(String, String)> =
        form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let get = |key: &str| {
        query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let previous = get("previous") == Some("true");
    let Some(shared) = shared.upgrade() else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "the kubelet is stopping");
    };
    let Some(runtime) = shared.find(namespace, pod) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} not found on this node"),
        );
    };
    let Some(mut log) = runtime.log_text(Some(container), previous) else {
        return text(
            StatusCode::BAD_REQUEST,
            if previous {
                format!("previous terminated container {container:?} in pod {pod:?} not found")
            } else {
                format!("container {container:?} in pod {pod:?} is not available")
            },
        );
    };
    if let Some(lines) = get("tailLines").and_then(|v| v.parse::<usize>().ok()) {
        let kept: Vec<&str> = log.lines().collect();
        let start = kept.len().saturating_sub(lines);
        let mut tail = kept[start..].join("\n");
        if !tail.is_empty() {
            tail.push('\n');
        }
        log = tail;
    }
    if let Some(limit) = get("limitBytes").and_then(|v| v.parse::<usize>().ok()) {
        let mut cut = limit.min(log.len());
        while !log.is_char_boundary(cut) {
            cut -= 1;
        }
        log.truncate(cut);
    }
    text(StatusCode::OK, log)
}
