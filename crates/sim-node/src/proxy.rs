//! A TCP proxy in front of the API server for one pod or one node's kubelet. It connects
//! upstream from the pod's (or node's) own loopback address, so the audit knows who is
//! asking, and it is where network faults act: partition (drop or hang connections, one
//! way or both), repair, and added latency. TLS passes through untouched, unless the
//! proxy inspects requests ([`crate::inspect`]: in front of a real API server, where the
//! request rules act here), and then the faults act on the pod's side of it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::inspect::Inspection;

/// Errors of the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The listening socket could not be bound.
    #[error("cannot listen on 127.0.0.1 for the proxy of {owner}")]
    Bind {
        /// Whose proxy.
        owner: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// How the proxy treats traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forward everything.
    #[default]
    Pass,
    /// Partitioned: refuse new connections and close open ones at once (clients see
    /// connection errors).
    Drop,
    /// Partitioned: accept but forward nothing in either direction (clients see timeouts).
    Hang,
    /// One-way partition: requests reach the server, responses never come back.
    HangResponses,
}

#[derive(Debug, Clone, Copy, Default)]
struct Settings {
    mode: Mode,
    delay: Duration,
}

/// A running proxy; dropping it stops it and closes its connections.
pub struct Proxy {
    addr: SocketAddr,
    settings: Arc<Mutex<Settings>>,
    changes: watch::Sender<Settings>,
}

impl Proxy {
    /// Starts a proxy on 127.0.0.1 (free port) to `upstream`, connecting from `source`.
    ///
    /// # Errors
    /// When the listening socket cannot be bound.
    pub async fn start(
        owner: &str,
        upstream: SocketAddr,
        source: IpAddr,
    ) -> Result<Self, ProxyError> {
        Self::start_inspecting(owner, upstream, source, None, None).await
    }

    /// [`Proxy::start`], judging each request by the request rules when `inspection` is
    /// given, and listening inside `network` (the pod's own namespace) when given.
    ///
    /// # Errors
    /// When the listening socket cannot be bound.
    pub(crate) async fn start_inspecting(
        owner: &str,
        upstream: SocketAddr,
        source: IpAddr,
        inspection: Option<Inspection>,
        network: Option<&pod_network::Namespace>,
    ) -> Result<Self, ProxyError> {
        let at = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        let listener = match network {
            None => TcpListener::bind(at).await,
            Some(namespace) => namespace.listen(at).map_err(std::io::Error::from),
        }
        .map_err(|source| ProxyError::Bind {
            owner: owner.to_string(),
            source,
        })?;
        let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
            owner: owner.to_string(),
            source,
        })?;
        let settings = Arc::new(Mutex::new(Settings::default()));
        let (changes, rx) = watch::channel(Settings::default());
        tokio::spawn(accept_loop(listener, upstream, source, inspection, rx));
        Ok(Self {
            addr,
            settings,
            changes,
        })
    }

    /// Where clients connect (`127.0.0.1:PORT`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.lock().mode
    }

    /// The added latency.
    pub fn delay(&self) -> Duration {
        self.lock().delay
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self) {
        let settings = *self.lock();
        self.changes.send_replace(settings);
    }

    /// Sets the mode; open connections follow at once.
    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
        self.publish();
    }

    /// Adds latency to every chunk of traffic in both directions.
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
        self.publish();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Closing the channel ends the accept loop and every connection.
        let (replacement, _) = watch::channel(Settings::default());
        drop(std::mem::replace(&mut self.changes, replacement));
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    source: IpAddr,
    inspection: Option<Inspection>,
    mut settings: watch::Receiver<Settings>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            changed = settings.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        let Ok((client, _)) = accepted else { continue };
        let current = *settings.borrow();
        if current.mode == Mode::Drop {
            drop(client);
            continue;
        }
        tokio::spawn(connection(
            client,
            upstream,
            source,
            inspection.clone(),
            settings.clone(),
        ));
    }
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    source: IpAddr,
    inspection: Option<Inspection>,
    settings: watch::Receiver<Settings>,
) {
    let _ = client.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    match inspection {
        None => {
            let Ok(server) = crate::source::connect_from(source, upstream).await else {
                return;
            };
            let (server_read, server_write) = server.into_split();
            both_ways(
                client_read,
                client_write,
                server_read,
                server_write,
                settings,
            )
            .await;
        }
        Some(inspection) => {
            // The faults act between the pod and the inspecting side, on the bytes as
            // they are; the inspecting side makes its own connections upstream.
            let (near, far) = tokio::io::duplex(64 * 1024);
            let inspecting = tokio::spawn(crate::inspect::serve(far, inspection, upstream, source));
            let (near_read, near_write) = tokio::io::split(near);
            both_ways(client_read, client_write, near_read, near_write, settings).await;
            inspecting.abort();
        }
    }
}

/// Pumps both directions until either ends.
async fn both_ways(
    client_read: impl AsyncRead + Unpin,
    client_write: impl AsyncWrite + Unpin,
    server_read: impl AsyncRead + Unpin,
    server_write: impl AsyncWrite + Unpin,
    settings: watch::Receiver<Settings>,
) {
    let up = pump(
        client_read,
        server_write,
        settings.clone(),
        Direction::Request,
    );
    let down = pump(server_read, client_write, settings, Direction::Response);
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Response,
}

fn blocked(settings: &Settings, direction: Direction) -> bool {
    match settings.mode {
        Mode::Pass => false,
        Mode::Drop | Mode::Hang => true,
        Mode::HangResponses => direction == Direction::Response,
    }
}

/// Copies one direction, obeying faults: `Drop` ends the connection, hangs hold the bytes
/// until repaired, delay sleeps before each chunk.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut settings: watch::Receiver<Settings>,
    direction: Direction,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = settings.changed() => {
                if changed.is_err() || settings.borrow().mode == Mode::Drop {
                    return;
                }
                continue;
            }
        };
        loop {
            let current = *settings.borrow_and_update();
            if current.mode == Mode::Drop {
                return;
            }
            if !blocked(&current, direction) {
                if !current.delay.is_zero() {
                    tokio::time::sleep(current.delay).await;
                }
                break;
            }
            if settings.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, peer)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        // Echo the bytes, then who sent them.
                        let _ = s.write_all(&buf[..n]).await;
                        let _ = s.write_all(peer.ip().to_string().as_bytes()).await;
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(addr: SocketAddr) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"hi ").await?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    #[tokio::test]
    async fn traffic_reaches_upstream_from_the_owners_address() {
        let upstream = echo_server().await;
        let proxy = Proxy::start("pod", upstream, "127.0.9.9".parse().unwrap())
            .await
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), roundtrip(proxy.addr()))
            .await
            .unwrap()
            .unwrap();
        assert!(answer.starts_with("hi "));
        // The echo may arrive in one or two reads; the source shows up in the stream.
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let mut all = String::new();
        let mut buf = [0u8; 64];
        while !all.contains("127.0.9.9") {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "connection closed before the source address arrived");
            all.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }

    #[tokio::test]
    async fn a_dropping_partition_refuses_connections_and_repair_restores_them() {
        let upstream = echo_server().await;
        let proxy = Proxy::start("pod", upstream, "127.0.0.1".parse().unwrap())
            .await
            .unwrap();
        proxy.set_mode(Mode::Drop);
        let refused = tokio::time::timeout(Duration::from_secs(5), roundtrip(proxy.addr()))
            .await
            .unwrap();
        assert!(
            refused.as_ref().map_or(true, String::is_empty),
            "{refused:?}"
        );
        proxy.set_mode(Mode::Pass);
        let ok = tokio::time::timeout(Duration::from_secs(5), roundtrip(proxy.addr()))
            .await
            .unwrap()
            .unwrap();
        assert!(ok.starts_with("hi "));
    }

    #[tokio::test]
    async fn a_hanging_partition_holds_traffic_until_repaired() {
        let upstream = echo_server().await;
        let proxy = Proxy::start("pod", upstream, "127.0.0.1".parse().unwrap())
            .await
            .unwrap();
        proxy.set_mode(Mode::Hang);
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        s.write_all(b"held ").await.unwrap();
        let mut buf = [0u8; 64];
        let read = s.read(&mut buf);
        tokio::pin!(read);
        // Nothing comes back while partitioned: a negative observation over a bounded window.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut read)
                .await
                .is_err(),
            "traffic passed a hanging partition"
        );
        proxy.set_mode(Mode::Pass);
        let n = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("held"));
    }
}

/// The proxy inspecting requests: TLS terminated, each request judged by the rules.
#[cfg(test)]
mod inspecting {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use sim_apiserver::faults::RequestMatch;
    use sim_apiserver::{ApiServer, ApiServerConfig};

    use sim_apiserver::audit::PodRef;
    use sim_apiserver::faults::{FaultError, FaultTarget, Faults, NodeFault, PodFault};

    use super::Proxy;
    use crate::inspect::NodeInspection;

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
            None,
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
