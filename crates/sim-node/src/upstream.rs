//! The API server a kubelet serves, as the kubelet sees it: where it listens (its proxies
//! forward there), the CA it is signed by, the node's credentials, how a pod gets its
//! ServiceAccount token, the CA that signs the kubelet's serving certificate if the API
//! server verifies it — and, on the simulator only, hooks into the in-process server (it
//! reads container logs and runs commands through the kubelet and attributes requests to
//! pods by source IP).
//!
//! Implemented here by [`RealApiServer`], any kube-apiserver reached with a node token (pods
//! get TokenRequest tokens bound to them), and by [`SimulatedUpstream`], the simulated API
//! server of the same process, hooks included.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;

use sim_apiserver::audit::PodRef;
use sim_apiserver::state::LogSource;

/// Errors of reaching the API server.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A client could not be built.
    #[error("cannot build an api client")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// No token is known for the node.
    #[error("no token for node {0}")]
    NoNodeToken(String),
    /// The ServiceAccount token could not be had.
    #[error("cannot get a token of serviceaccount {namespace}/{name} for pod {pod}")]
    Token {
        /// Namespace.
        namespace: String,
        /// ServiceAccount.
        name: String,
        /// The pod it is for.
        pod: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The API server a kubelet serves.
#[async_trait]
pub trait Upstream: Send + Sync {
    /// The address the API server listens on.
    fn addr(&self) -> SocketAddr;
    /// The CA that signed its serving certificate, PEM.
    fn ca_pem(&self) -> String;
    /// The cluster's name, for the kubeconfigs written into pods.
    fn cluster_name(&self) -> String;
    /// A client acting as `system:node:<node>`, reaching the server at `server` (the node's
    /// proxy).
    async fn node_client(&self, server: &str, node: &str) -> Result<kube::Client, UpstreamError>;
    /// A token for ServiceAccount `account` of the pod `pod`, asked for with the node's
    /// `client`.
    async fn service_account_token(
        &self,
        client: &kube::Client,
        pod: &PodRef,
        account: &str,
    ) -> Result<String, UpstreamError>;
    /// Whether the API server reads container logs from the kubelet's HTTPS endpoint
    /// (a real kube-apiserver does; the simulated one reads them in-process).
    fn reads_logs_from_kubelets(&self) -> bool {
        false
    }
    /// The CA that signs the kubelets' serving certificates, when the API server verifies
    /// them (`--kubelet-certificate-authority`); without one they are self-signed.
    fn kubelet_serving_ca(&self) -> Option<sim_apiserver::tls::SigningCa> {
        None
    }
    /// Where the API server reads this kubelet's container logs from (in-process servers).
    fn add_log_source(&self, _source: LogSource) {}
    /// Where the API server runs commands in this kubelet's containers (`pods/exec`;
    /// in-process servers).
    fn add_exec_source(&self, _source: sim_apiserver::exec::ExecSource) {}
    /// Where the API server attaches to this kubelet's containers (`pods/attach`;
    /// in-process servers).
    fn add_attach_source(&self, _source: sim_apiserver::attach::AttachSource) {}
    /// Requests from `ip` come from `pod` (`None`: no longer) — for servers that attribute
    /// requests by source address in-process.
    fn attribute(&self, _ip: IpAddr, _pod: Option<PodRef>) {}
}

/// A real kube-apiserver: its address and CA, and a static token per node (the nodes
/// authenticate as `system:node:<name>` in `system:nodes`).
#[derive(Clone)]
pub struct RealApiServer {
    /// Its address.
    pub addr: SocketAddr,
    /// Its CA, PEM.
    pub ca_pem: String,
    /// The cluster's name.
    pub cluster_name: String,
    /// Node name → bearer token.
    pub node_tokens: Arc<std::collections::BTreeMap<String, String>>,
    /// The CA that signs the kubelets' serving certificates (the API server is given it
    /// as `--kubelet-certificate-authority`), if any.
    pub kubelet_serving_ca: Option<sim_apiserver::tls::SigningCa>,
}

/// How long a pod's ServiceAccount token is valid (the kubelet's default projected
/// token lifetime is an hour; a scenario never lasts that long).
const TOKEN_SECONDS: i64 = 3600;

#[async_trait]
impl Upstream for RealApiServer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    fn cluster_name(&self) -> String {
        self.cluster_name.clone()
    }

    fn reads_logs_from_kubelets(&self) -> bool {
        true
    }

    fn kubelet_serving_ca(&self) -> Option<sim_apiserver::tls::SigningCa> {
        self.kubelet_serving_ca.clone()
    }

    async fn node_client(&self, server: &str, node: &str) -> Result<kube::Client, UpstreamError> {
        let token = self
            .node_tokens
            .get(node)
            .ok_or_else(|| UpstreamError::NoNodeToken(node.to_string()))?;
        let kubeconfig = sim_apiserver::kubeconfig(
            &self.cluster_name,
            server,
            &self.ca_pem,
            &format!("system:node:{node}"),
            token,
        );
        client_for(&kubeconfig).await
    }

    /// A TokenRequest bound to the pod, as the kubelet asks for the projected
    /// `kube-api-access` token: the API server's audit then names the pod in each request's
    /// user extra (`authentication.kubernetes.io/pod-name`).
    async fn service_account_token(
        &self,
        client: &kube::Client,
        pod: &PodRef,
        account: &str,
    ) -> Result<String, UpstreamError> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| UpstreamError::Token {
            namespace: pod.namespace.clone(),
            name: account.to_string(),
            pod: pod.name.clone(),
            source,
        };
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": TOKEN_SECONDS,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid},
            },
        });
        let request = http::Request::post(format!(
            "/api/v1/namespaces/{}/serviceaccounts/{account}/token",
            pod.namespace
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        .map_err(|e| failed(Box::new(e)))?;
        let answer: serde_json::Value = client
            .request(request)
            .await
            .map_err(|e| failed(Box::new(e)))?;
        answer["status"]["token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| failed("the TokenRequest answer has no status.token".into()))
    }
}

async fn client_for(kubeconfig: &str) -> Result<kube::Client, UpstreamError> {
    let failed = |e: Box<dyn std::error::Error + Send + Sync>| UpstreamError::Client(e);
    let parsed: kube::config::Kubeconfig =
        serde_yaml::from_str(kubeconfig).map_err(|e| failed(Box::new(e)))?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|e| failed(Box::new(e)))?;
    kube::Client::try_from(config).map_err(|e| failed(Box::new(e)))
}

/// The simulated API server as the kubelets' [`Upstream`].
#[derive(Clone)]
pub struct SimulatedUpstream(pub sim_apiserver::ServerHandle);

#[async_trait]
impl Upstream for SimulatedUpstream {
    fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    fn ca_pem(&self) -> String {
        self.0.ca_pem().to_string()
    }

    fn cluster_name(&self) -> String {
        self.0.state().config.name.clone()
    }

    async fn node_client(&self, server: &str, node: &str) -> Result<kube::Client, UpstreamError> {
        self.0
            .user_client(
                server,
                &format!("system:node:{node}"),
                &["system:nodes", "system:masters"],
            )
            .await
            .map_err(|e| UpstreamError::Client(Box::new(e)))
    }

    async fn service_account_token(
        &self,
        _client: &kube::Client,
        pod: &PodRef,
        account: &str,
    ) -> Result<String, UpstreamError> {
        self.0
            .service_account_token(&pod.namespace, account)
            .map_err(|e| UpstreamError::Token {
                namespace: pod.namespace.clone(),
                name: account.to_string(),
                pod: pod.name.clone(),
                source: Box::new(e),
            })
    }

    fn add_log_source(&self, source: LogSource) {
        self.0.state().add_log_source(source);
    }

    fn add_exec_source(&self, source: sim_apiserver::exec::ExecSource) {
        self.0.state().add_exec_source(source);
    }

    fn add_attach_source(&self, source: sim_apiserver::attach::AttachSource) {
        self.0.state().add_attach_source(source);
    }

    fn attribute(&self, ip: IpAddr, pod: Option<PodRef>) {
        self.0.state().audit.set_pod_ip(ip, pod);
    }
}
