//! The API-aware side of a pod's proxy, for kubelets in front of a real API server, where
//! the harness cannot judge requests inside the server: the proxy terminates the pod's TLS
//! with a certificate of the node's own CA (which the pod trusts beside the cluster's: the
//! `ca.crt` it is given holds both), judges each HTTP request by the request rules the
//! harness set — hold its sender, defer it, delay it, reject it: the simulated API server's
//! own [`Faults`] — and forwards it over a TLS connection of its own to the API server, from
//! the pod's address and with the pod's own credentials. Bodies stream through; watches stay
//! open as long as the pod keeps them.
//!
//! Connection faults (partition, delay) still act on the pod's side of the proxy, on the
//! bytes, before anything here sees them.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

use sim_apiserver::audit::PodRef;
use sim_apiserver::faults::{
    FaultError, FaultTarget, Faults, NodeFault, PodFault, RequestFacts, Verdict,
};
use sim_apiserver::request::{Query, parse};
use sim_apiserver::tls::ClusterTls;

use super::shared::Shared;

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

/// The pods of the node `shared` belongs to, as the target of the rules' holds (a rule
/// holds the pod that sent the request, which runs there).
pub(crate) fn node_pods(shared: &Arc<Shared>) -> Arc<dyn FaultTarget> {
    Arc::new(NodePods(Arc::downgrade(shared)))
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

/// See [`node_pods`].
struct NodePods(Weak<Shared>);

impl FaultTarget for NodePods {
    fn pod(&self, namespace: &str, pod: &str, fault: &PodFault) -> Result<(), FaultError> {
        let shared = self.0.upgrade().ok_or_else(|| {
            FaultError::NoTarget(format!("pod {namespace}/{pod}: its kubelet stopped"))
        })?;
        let runtime = shared.find(namespace, pod).ok_or_else(|| {
            FaultError::NoTarget(format!("pod {namespace}/{pod} is not running on this node"))
        })?;
        match fault {
            PodFault::Hold => runtime.hold(),
            PodFault::Release => runtime.release(shared.node_held()),
            other => {
                return Err(FaultError::Unsupported(format!(
                    "a pod's proxy holds and releases its pod, nothing else ({other:?})"
                )));
            }
        }
        Ok(())
    }

    fn node(&self, node: &str, _fault: &NodeFault) -> Result<(), FaultError> {
        Err(FaultError::Unsupported(format!(
            "a pod's proxy acts on its pod, not on node {node}"
        )))
    }
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
        async move { judged(request, &inspection, &sender, upstream, source).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

/// One upstream connection; its task ends with it.
struct Upstream {
    sender: hyper::client::conn::http1::SendRequest<Incoming>,
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
) -> Result<Answer, ForwardError> {
    let query = Query::parse(request.uri().query());
    let info = parse(request.method(), request.uri().path(), &query);
    let faults = &inspection.faults;
    let facts = RequestFacts {
        verb: &info.verb,
        group: &info.group,
        resource: &info.resource,
        subresource: &info.subresource,
        namespace: &info.namespace,
        name: &info.name,
        pod: Some(&inspection.pod),
        user: &inspection.user,
    };
    // Dropped once the answer's head is back (or the request failed): rules waiting for
    // this request's answer learn of it then.
    let passage = faults.arrived(&facts);
    match faults.verdict(&facts) {
        Verdict::Pass => {}
        Verdict::Delay(delay) => tokio::time::sleep(delay).await,
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
    let answer = forward(request, sender, inspection, upstream, source).await?;
    drop(passage);
    if answer.status().as_u16() < 400 {
        faults.served(&facts);
    }
    Ok(answer.map(Either::Left))
}

async fn forward(
    request: Request<Incoming>,
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
    let tcp = super::proxy::connect_from(source, upstream)
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use sim_apiserver::faults::RequestMatch;
    use sim_apiserver::{ApiServer, ApiServerConfig};

    use super::*;
    use crate::proxy::Proxy;

    /// Records what the rules asked of it instead of signalling processes.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<String>>);

    impl FaultTarget for Recorded {
        fn pod(&self, namespace: &str, pod: &str, fault: &PodFault) -> Result<(), FaultError> {
            self.0
                .lock()
                .unwrap()
                .push(format!("{fault:?} {namespace}/{pod}"));
            Ok(())
        }

        fn node(&self, node: &str, _: &NodeFault) -> Result<(), FaultError> {
            Err(FaultError::NoTarget(node.into()))
        }
    }

    /// A simulated API server, and a client of it that goes through an inspecting proxy
    /// judging by `faults` and holding through `target`.
    async fn behind_an_inspecting_proxy(
        faults: Arc<Faults>,
        target: Arc<Recorded>,
    ) -> (ApiServer, Proxy, kube::Client) {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let inspection = NodeInspection::new("node-1", faults, server.ca_pem()).unwrap();
        let pod = PodRef {
            namespace: "default".into(),
            name: "p".into(),
            uid: "u".into(),
        };
        let proxy = Proxy::start_inspecting(
            "pod default/p",
            server.addr(),
            "127.0.0.1".parse().unwrap(),
            Some(inspection.for_pod(pod, "system:serviceaccount:default:default".into(), target)),
        )
        .await
        .unwrap();
        // The pod trusts both CAs, as its ca.crt says.
        let bundle = format!("{}\n{}", server.ca_pem(), inspection.ca_pem());
        let kubeconfig = sim_apiserver::kubeconfig(
            "sim",
            &format!("https://{}", proxy.addr()),
            &bundle,
            "admin",
            server.admin_token(),
        );
        let parsed: kube::config::Kubeconfig = serde_yaml::from_str(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
            .await
            .unwrap();
        (server, proxy, kube::Client::try_from(config).unwrap())
    }

    async fn within<T>(answer: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .expect("answered within 10 s")
    }

    fn configmap(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm
    }

    fn get_configmap(name: &str) -> RequestMatch {
        RequestMatch {
            verbs: vec!["get".into()],
            resource: Some("configmaps".into()),
            name: Some(name.into()),
            ..RequestMatch::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_pass_the_proxy_to_the_server_and_its_rules_reject_them_or_hold_their_sender()
    {
        let faults = Arc::new(Faults::new());
        let target = Arc::new(Recorded::default());
        let (server, _proxy, client) =
            behind_an_inspecting_proxy(faults.clone(), target.clone()).await;
        let maps: Api<ConfigMap> = Api::namespaced(client, "default");
        // Through the proxy, with the pod's credentials, to the server.
        within(maps.create(&PostParams::default(), &configmap("a")))
            .await
            .unwrap();
        assert!(
            server
                .state()
                .store
                .get(
                    &sim_apiserver::status::GroupResource::new("", "configmaps"),
                    "default",
                    "a"
                )
                .is_some()
        );

        // A reject rule answers in the server's stead, with its status and message.
        let reject = faults
            .reject(get_configmap("a"), 500, "InternalError", "refused here")
            .unwrap();
        let refused = within(maps.get("a")).await.unwrap_err();
        assert!(
            matches!(&refused, kube::Error::Api(s) if s.code == 500 && s.message == "refused here"),
            "{refused:?}"
        );
        faults.allow(reject).unwrap();

        // A hold rule freezes the sending pod at its matching request, then serves it.
        faults.hold_sender(get_configmap("a"), Duration::from_secs(60), None);
        let held = within(maps.get("a")).await.unwrap();
        assert_eq!(held.metadata.name.as_deref(), Some("a"));
        assert_eq!(
            target.0.lock().unwrap().first().map(String::as_str),
            Some("Hold default/p")
        );
        assert!(
            faults.log().iter().any(
                |e| e.verb == "hold" && e.detail.starts_with("at its get configmaps default/a")
            ),
            "{:?}",
            faults.log()
        );
    }
}
