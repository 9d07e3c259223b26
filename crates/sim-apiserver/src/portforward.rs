//! `pods/portforward`: connections to a pod's ports relayed over SPDY/3.1, as kube-apiserver
//! and the kubelet relay them to `kubectl port-forward`.
//!
//! Two ways in, one session ([`crate::spdy`]) behind both:
//! - a WebSocket upgrade with the subprotocol `SPDY/3.1+portforward.k8s.io` (what kubectl
//!   1.31+ tries first): the payloads of its binary messages, concatenated, carry the SPDY
//!   session both ways;
//! - kubectl's fallback, a plain `Upgrade: SPDY/3.1` with
//!   `X-Stream-Protocol-Version: portforward.k8s.io`: the session runs on the connection.
//!
//! Within the session each local connection of the client is a pair of streams, `error`
//! and `data`, sharing the headers `port` and `requestid` (as the kubelet pairs them: by
//! `requestid`, else by stream ID). Once both are open the server connects to the port at
//! the pod's address (`status.podIP`) from inside the pod's network namespace
//! ([`pod_network::connect`]), as the kubelet connects inside the pod, and relays bytes
//! both ways: the client's FIN half-closes the pod connection, the pod's end FINs the data
//! stream, and the pair is over when the pod's side ends or the client resets. A failure
//! is written as text on the error stream (`error forwarding port P to pod …: …`), which
//! kubectl prints before it drops the session. A pair not completed within 30 s is told so
//! on its error stream.
//!
//! The kubelet's own endpoint (in `sim-node`) serves the same session to a real
//! kube-apiserver: it builds an [`Accepted`] for a [`Target`] of its own pods.
//!
//! # Caveats
//! - The WebSocket channel protocol of the kubelet (`v4.channel.k8s.io`, `?ports=`, what
//!   kube-rs's `Portforwarder` speaks) is not served: such an upgrade is refused, naming
//!   the protocols that are.
//! - No flow control (neither side of spdystream does any): a pod that does not read what
//!   the client sends holds up the session's other streams.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use hyper::HeaderMap;
use hyper::header::UPGRADE;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use super::spdy::{self, Event, Incoming};
use super::status::{ApiError, GroupResource};
use super::upgrade::{self, Switch};

/// The WebSocket subprotocol of the SPDY tunnel.
pub const WEBSOCKET_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The SPDY stream protocol (`X-Stream-Protocol-Version`).
pub const PROTOCOL: &str = "portforward.k8s.io";
/// How long a pair may wait for its second stream (the kubelet's stream creation timeout).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);

/// A port-forward accepted: how to answer (101 with [`Accepted::switch`]'s headers), then
/// [`serve`] on the upgraded connection.
#[derive(Debug)]
pub struct Accepted {
    /// The transport the client asked for: SPDY inside a WebSocket, or SPDY on the
    /// upgraded connection.
    pub switch: Switch,
    target: Arc<Target>,
}

/// The pod whose ports are forwarded.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID (named in errors).
    pub uid: String,
    /// Its address (`status.podIP`), connected to from inside its network namespace.
    pub ip: IpAddr,
}

impl Accepted {
    /// A port-forward of `target`'s ports whose upgrade `headers` ask for.
    ///
    /// # Errors
    /// As [`start`] refuses an upgrade.
    pub fn new(headers: &HeaderMap, target: Target) -> Result<Self, ApiError> {
        Ok(Self {
            switch: handshake(headers)?,
            target: Arc::new(target),
        })
    }
}

/// Checks a port-forward request: its upgrade and the pod.
///
/// # Errors
/// As kube-apiserver and the kubelet refuse: no upgrade (400), a SPDY upgrade without or
/// with other stream protocols (400, 403), a WebSocket without the tunnel's subprotocol
/// (400), an unknown pod (404), a pod without a node or an address (400).
pub fn start(
    state: &crate::state::State,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
) -> Result<Accepted, ApiError> {
    let switch = handshake(headers)?;
    let gr = GroupResource::new("", "pods");
    let pod = super::upgrade::scheduled_pod(state.store.get(&gr, namespace, name), name)?;
    let ip = pod["status"]["podIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unable to upgrade connection: pod {name} has no IP address yet"
            ))
        })?;
    Ok(Accepted {
        switch,
        target: Arc::new(Target {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            ip,
        }),
    })
}

/// The transport an upgrade asks for, or why it is refused.
fn handshake(headers: &HeaderMap) -> Result<Switch, ApiError> {
    if !upgrade::is_upgrade(headers) {
        return Err(missing_upgrade());
    }
    let websocket = upgrade::header_values(headers, UPGRADE.as_str())
        .iter()
        .any(|v| v == "websocket");
    if websocket {
        return match upgrade::websocket(headers, &[WEBSOCKET_PROTOCOL]) {
            Some((protocol, accept_key)) => Ok(Switch::WebSocket {
                protocol,
                accept_key,
            }),
            None => Err(ApiError::BadRequest(format!(
                "unable to upgrade connection: port-forward is served over a WebSocket with \
                 the subprotocol {WEBSOCKET_PROTOCOL} or over SPDY/3.1 with {PROTOCOL}"
            ))),
        };
    }
    if !upgrade::is_spdy(headers) {
        return Err(missing_upgrade());
    }
    upgrade::stream_protocol(headers, &[PROTOCOL]).map(Switch::Spdy)
}

fn missing_upgrade() -> ApiError {
    ApiError::BadRequest("unable to upgrade: missing upgrade headers in request".into())
}

/// Serves the port-forward session on the upgraded connection until the client ends it.
pub async fn serve<S>(io: S, accepted: Accepted)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let target = accepted.target;
    match accepted.switch {
        Switch::Spdy(_) => session(io, target).await,
        Switch::WebSocket { .. } => {
            let (inner, outer) = tokio::io::duplex(64 * 1024);
            let session = tokio::spawn(session(inner, target));
            tunnel(io, outer).await;
            let _ = session.await;
        }
    }
}

/// Carries the bytes of `session` in the binary messages of a WebSocket on `io`, until
/// either side ends; the session's end is a normal closure (1000).
async fn tunnel<S>(io: S, session: tokio::io::DuplexStream)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    let (mut sink, mut messages) = ws.split();
    let (mut from_session, mut to_session) = tokio::io::split(session);
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(Ok(Message::Binary(bytes))) => {
                    if to_session.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                // The client went away: the session reads the end of its connection.
                Some(Ok(Message::Close(_)) | Err(_)) | None => {
                    let _ = to_session.shutdown().await;
                    return;
                }
                Some(Ok(_)) => {}
            },
            read = from_session.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::binary(buffer[..n].to_vec())).await.is_err() {
                        return;
                    }
                }
            },
        }
    }
    let normal = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(normal))).await;
    let _ = sink.close().await;
}

/// A pair of streams being assembled.
struct Pending {
    error: Option<Incoming>,
    data: Option<Incoming>,
    deadline: Instant,
}

/// Runs the SPDY session: pairs the streams the client opens and forwards each pair.
async fn session<S>(io: S, target: Arc<Target>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (tx, mut streams) = mpsc::channel(16);
    let served = tokio::spawn(spdy::serve(io, tx));
    let mut pending: HashMap<String, Pending> = HashMap::new();
    loop {
        let deadline = pending.values().map(|p| p.deadline).min();
        tokio::select! {
            incoming = streams.recv() => match incoming {
                Some(stream) => admit(stream, &mut pending, &target),
                None => break,
            },
            () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                if deadline.is_some() => {
                let now = Instant::now();
                let expired: Vec<String> = pending
                    .iter()
                    .filter(|(_, p)| p.deadline <= now)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in expired {
                    if let Some(pair) = pending.remove(&key) {
                        let message = format!("(request={key}) timed out waiting for streams");
                        for stream in [pair.error.as_ref(), pair.data.as_ref()].into_iter().flatten() {
                            if pair.error.as_ref().is_some_and(|e| e.id == stream.id) {
                                stream.writer.write(message.as_bytes());
                            }
                            stream.writer.finish();
                        }
                    }
                }
            },
        }
    }
    match served.await {
        Ok(Err(e)) => {
            tracing::debug!(error = %crate::error_chain(&e), "port-forward session ended")
        }
        Err(e) => tracing::debug!(error = %e, "port-forward session failed"),
        Ok(Ok(())) => {}
    }
}

/// Checks a stream the client opened, answers it, and forwards its pair once complete.
fn admit(stream: Incoming, pending: &mut HashMap<String, Pending>, target: &Arc<Target>) {
    let refuse = |stream: &Incoming, why: &str| {
        tracing::debug!(id = stream.id, "port-forward stream refused: {why}");
        stream.writer.reset(spdy::CANCEL);
    };
    let Some(port) = spdy::header(&stream.headers, "port") else {
        return refuse(&stream, "\"port\" header is required");
    };
    let port = match port.parse::<u16>() {
        Ok(0) => return refuse(&stream, &format!("port {port:?} must be > 0")),
        Ok(p) => p,
        Err(e) => return refuse(&stream, &format!("unable to parse {port:?} as a port: {e}")),
    };
    let kind = spdy::header(&stream.headers, "streamtype").unwrap_or_default();
    let is_error = match kind {
        "error" => true,
        "data" => false,
        other => return refuse(&stream, &format!("invalid stream type {other:?}")),
    };
    stream.writer.reply();
    // Pairs are keyed by `requestid`; without it (old clients) the data stream is taken
    // to follow its error stream, as the kubelet takes it.
    let key = match spdy::header(&stream.headers, "requestid") {
        Some(id) => id.to_owned(),
        None if is_error => stream.id.to_string(),
        None => stream.id.saturating_sub(2).to_string(),
    };
    let pair = pending.entry(key.clone()).or_insert_with(|| Pending {
        error: None,
        data: None,
        deadline: Instant::now() + PAIR_TIMEOUT,
    });
    let slot = if is_error {
        &mut pair.error
    } else {
        &mut pair.data
    };
    if slot.is_some() {
        let message =
            format!("error processing stream for request {key}: {kind} stream already assigned");
        if let Some(error) = &pair.error {
            error.writer.write(message.as_bytes());
        }
        stream.writer.finish();
        return;
    }
    *slot = Some(stream);
    if pair.error.is_some()
        && pair.data.is_some()
        && let Some(Pending {
            error: Some(error),
            data: Some(data),
            ..
        }) = pending.remove(&key)
    {
        tokio::spawn(forward(error, data, port, target.clone()));
    }
}

/// Connects to `port` of the pod and relays the data stream to and from it; reports a
/// failure on the error stream; closes both.
async fn forward(error: Incoming, mut data: Incoming, port: u16, target: Arc<Target>) {
    // What the client sends on the error stream (nothing, then FIN) is not read.
    let Incoming {
        writer: error_writer,
        ..
    } = error;
    let addr = SocketAddr::new(target.ip, port);
    let result = match pod_network::connect(addr).await {
        Ok(connection) => relay(connection, &mut data).await,
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        let message = format!(
            "error forwarding port {port} to pod {}/{}, uid {}: {e}",
            target.namespace, target.name, target.uid
        );
        tracing::debug!("{message}");
        error_writer.write(message.as_bytes());
    }
    // The kubelet's deferred closes: the error stream's, then the data stream's.
    error_writer.finish();
    data.writer.finish();
}

/// Relays bytes between the pod connection and the data stream until the pod's side
/// ends or the client resets the stream.
async fn relay(connection: tokio::net::TcpStream, data: &mut Incoming) -> std::io::Result<()> {
    let (mut from_pod, mut to_pod) = connection.into_split();
    let mut buffer = vec![0u8; 32 * 1024];
    let mut client_open = true;
    loop {
        tokio::select! {
            read = from_pod.read(&mut buffer) => match read? {
                0 => return Ok(()),
                n => data.writer.write(&buffer[..n]),
            },
            event = data.events.recv(), if client_open => match event {
                Some(Event::Data(bytes)) => to_pod.write_all(&bytes).await?,
                Some(Event::Fin) => {
                    client_open = false;
                    let _ = to_pod.shutdown().await;
                }
                Some(Event::Reset) | None => return Ok(()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upgrade::tests::with;
    use bytes::Bytes;

    type Client = spdy::Client<tokio::io::DuplexStream>;

    /// What the server sends on `ids` until it FINs them all, within 30 s.
    async fn fins(client: &mut Client, ids: &[u32]) -> (Vec<Vec<u8>>, Vec<spdy::Frame>) {
        tokio::time::timeout(Duration::from_secs(30), client.read_to_fins(ids))
            .await
            .unwrap_or_else(|_| panic!("streams {ids:?} were not finished within 30 s"))
            .unwrap_or_else(|e| panic!("streams {ids:?}: {e}"))
    }

    fn loopback() -> Arc<Target> {
        Arc::new(Target {
            namespace: "default".into(),
            name: "p".into(),
            uid: "u".into(),
            ip: IpAddr::from([127, 0, 0, 1]),
        })
    }

    #[tokio::test]
    async fn a_pair_of_streams_reaches_the_pods_port_and_carries_bytes_both_ways() {
        // The "pod": an echo of what it reads, upper-cased, once the client is done.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("binding a loopback port: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let pod = tokio::spawn(async move {
            if let Ok((mut conn, _)) = listener.accept().await {
                let mut got = Vec::new();
                conn.read_to_end(&mut got).await.ok();
                conn.write_all(&got.to_ascii_uppercase()).await.ok();
            }
        });
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(session(server_io, loopback()));
        let mut client = Client::new(client_io).unwrap_or_else(|e| panic!("{e}"));
        let port = port.to_string();
        // Data first: the pair is keyed by requestid, not by order.
        client
            .open(
                1,
                &[("streamtype", "data"), ("port", &port), ("requestid", "7")],
            )
            .await
            .ok();
        client
            .open(
                3,
                &[("streamtype", "error"), ("port", &port), ("requestid", "7")],
            )
            .await
            .ok();
        client
            .send(spdy::Frame::Data {
                id: 3,
                flags: spdy::FLAG_FIN,
                data: Bytes::new(),
            })
            .await
            .ok();
        client
            .send(spdy::Frame::Data {
                id: 1,
                flags: 0,
                data: Bytes::from_static(b"hello"),
            })
            .await
            .ok();
        // The client's FIN half-closes the pod connection: the pod answers then.
        client
            .send(spdy::Frame::Data {
                id: 1,
                flags: spdy::FLAG_FIN,
                data: Bytes::new(),
            })
            .await
            .ok();
        let (data, others) = fins(&mut client, &[1, 3]).await;
        assert_eq!(data, [&b"HELLO"[..], b""]);
        let replies: Vec<u32> = others
            .iter()
            .filter_map(|f| match f {
                spdy::Frame::SynReply { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        assert_eq!(replies, [1, 3]);
        client
            .send(spdy::Frame::GoAway { last: 0, status: 0 })
            .await
            .ok();
        assert!(served.await.is_ok());
        assert!(pod.await.is_ok());
    }

    #[tokio::test]
    async fn a_refused_connection_is_told_on_the_error_stream_and_bad_streams_are_reset() {
        // A port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("binding a loopback port: {e}"));
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(session(server_io, loopback()));
        let mut client = Client::new(client_io).unwrap_or_else(|e| panic!("{e}"));
        let port = port.to_string();
        client.open(1, &[("streamtype", "data")]).await.ok();
        client
            .open(3, &[("streamtype", "other"), ("port", "80")])
            .await
            .ok();
        // No requestid: the data stream (7) pairs with the error stream before it (5).
        client
            .open(5, &[("streamtype", "error"), ("port", &port)])
            .await
            .ok();
        client
            .open(7, &[("streamtype", "data"), ("port", &port)])
            .await
            .ok();
        let (data, others) = fins(&mut client, &[5, 7]).await;
        assert_eq!(data[1], b"");
        let message = data[0].clone();
        let message = String::from_utf8_lossy(&message);
        assert!(
            message.starts_with(&format!(
                "error forwarding port {port} to pod default/p, uid u: "
            )),
            "{message}"
        );
        for id in [1, 3] {
            assert!(
                others.contains(&spdy::Frame::RstStream {
                    id,
                    status: spdy::CANCEL
                }),
                "{others:?}"
            );
        }
        drop(client);
        assert!(served.await.is_ok());
    }

    #[test]
    fn a_websocket_offering_the_spdy_tunnel_is_accepted_with_its_accept_key() {
        let headers = with(&[
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-protocol", "SPDY/3.1+portforward.k8s.io"),
        ]);
        assert_eq!(
            handshake(&headers).ok(),
            Some(Switch::WebSocket {
                protocol: WEBSOCKET_PROTOCOL,
                accept_key: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into()
            })
        );
    }

    #[test]
    fn a_websocket_offering_only_channel_protocols_is_refused() {
        let headers = with(&[
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-protocol", "v4.channel.k8s.io"),
        ]);
        assert!(handshake(&headers).is_err());
    }

    #[test]
    fn a_spdy_upgrade_must_offer_the_port_forward_stream_protocol() {
        let spdy = [("upgrade", "SPDY/3.1"), ("connection", "Upgrade")];
        let offered = [
            &spdy[..],
            &[("x-stream-protocol-version", "portforward.k8s.io")],
        ]
        .concat();
        assert_eq!(
            handshake(&with(&offered)).ok(),
            Some(Switch::Spdy(PROTOCOL))
        );
        assert!(handshake(&with(&spdy)).is_err());
        let other = [
            &spdy[..],
            &[("x-stream-protocol-version", "v4.channel.k8s.io")],
        ]
        .concat();
        assert!(matches!(
            handshake(&with(&other)),
            Err(ApiError::Custom { code: 403, .. })
        ));
        assert!(
            handshake(&with(&[(
                "x-stream-protocol-version",
                "portforward.k8s.io"
            )]))
            .is_err()
        );
    }
}
