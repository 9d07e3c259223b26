//! `pods/portforward`: connections to a pod's ports relayed over SPDY/3.1, as kube-apiserver
//! and the kubelet relay them to `kubectl port-forward`, or over the kubelet's WebSocket
//! channel protocol, as they relay them to kube-rs's `Portforwarder`.
//!
//! Three ways in:
//! - a WebSocket upgrade with the subprotocol `SPDY/3.1+portforward.k8s.io` (what kubectl
//!   1.31+ tries first): the payloads of its binary messages, concatenated, carry the SPDY
//!   session both ways;
//! - kubectl's fallback, a plain `Upgrade: SPDY/3.1` with
//!   `X-Stream-Protocol-Version: portforward.k8s.io`: the session runs on the connection;
//! - any other WebSocket upgrade: the kubelet's channel protocol (`v4.channel.k8s.io`,
//!   `v4.base64.channel.k8s.io`, or binary when no subprotocol is offered; an offer of
//!   none of these is refused with 403, as the kubelet refuses it). The ports are named in
//!   the query (`ports` on the API server, `port` on the kubelet, which is what
//!   kube-apiserver passes on; comma-separated, each 1 to 65535). Port i has channels 2i
//!   (data, both ways) and 2i+1 (errors, server to client); each message starts with its
//!   channel byte (in base64, the digit `'0' + channel` and the rest base64-encoded). The
//!   server first sends the port, two bytes little-endian, on each channel; then it makes
//!   one connection per port and relays its bytes on the data channel. A port is done when
//!   the pod's side ends it or a connection fails (told on the error channel, and the
//!   session goes on for the other ports); once every port is done the server closes the
//!   WebSocket (1000), and when the client closes it everything ends.
//!
//! Within the SPDY session each local connection of the client is a pair of streams,
//! `error` and `data`, sharing the headers `port` and `requestid` (as the kubelet pairs
//! them: by `requestid`, else by stream ID). Once both are open the server connects to the
//! port at the pod's address (`status.podIP`) from inside the pod's network namespace
//! ([`pod_network::connect`]), as the kubelet connects inside the pod, and relays bytes
//! both ways: the client's FIN half-closes the pod connection, the pod's end FINs the data
//! stream, and the pair is over when the pod's side ends or the client resets. A failure
//! is written as text on the error stream (`error forwarding port P to pod …: …`, the
//! same text as on the channel protocol's error channel), which kubectl prints before it
//! drops the session. A pair not completed within 30 s is told so on its error stream.
//!
//! The kubelet's own endpoint (in `sim-node`) serves the same sessions to a real
//! kube-apiserver: it reads the request's [`KubeletOptions`], finds the pod, and builds an
//! [`Accepted`] for a [`Target`] of its own pods ([`Accepted::for_kubelet`]).
//!
//! # Caveats
//! - The channel protocol has no half-close: what the client ends of one port is not
//!   passed on to the pod (as with the kubelet), only the closing of the whole WebSocket.
//! - A port is done as soon as the pod's side ends its connection; containerd (behind the
//!   kubelet) gives the client's direction up to a second more.
//! - The error text names the pod as `namespace/name` and its UID; behind a real kubelet
//!   the runtime names its sandbox, and its own words follow.
//! - No idle timeout (the kubelet's `streamingConnectionIdleTimeout`, 4 h by default).
//! - A channel-protocol request of more than 128 ports is refused (400): channel numbers
//!   are one byte.
//! - The API server answers the channel protocol's refusals (a missing or bad `ports`, an
//!   offer of no channel subprotocol) itself, as Status objects; kube-apiserver passes on
//!   the kubelet's plain-text answers.
//! - No flow control (neither side of spdystream does any, nor does the channel protocol):
//!   a pod that does not read what the client sends holds up the session's other streams.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
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
/// The kubelet's channel subprotocols for port-forward: binary, base64.
pub const CHANNEL_PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "v4.base64.channel.k8s.io"];
/// How long a pair may wait for its second stream (the kubelet's stream creation timeout).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
/// The most ports of one channel-protocol session (channel numbers are one byte).
const MAX_CHANNEL_PORTS: usize = 128;

/// A port-forward accepted: how to answer (101 with [`Accepted::switch`]'s headers), then
/// [`serve`] on the upgraded connection.
#[derive(Debug)]
pub struct Accepted {
    /// The transport the client asked for: SPDY inside a WebSocket, SPDY on the upgraded
    /// connection, or a WebSocket of the channel protocol.
    pub switch: Switch,
    channels: Option<Channels>,
    target: Arc<Target>,
}

/// A channel-protocol session: its ports, and whether messages are base64 text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Channels {
    ports: Vec<u16>,
    base64: bool,
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

/// The kubelet's options of a port-forward request (its `NewV4Options`), read before it
/// looks up the pod: the ports of a WebSocket request.
#[derive(Debug)]
pub struct KubeletOptions {
    ports: Vec<u16>,
}

impl KubeletOptions {
    /// The options of `/portForward` with `headers` and `query` (ports in `port`).
    ///
    /// # Errors
    /// 400 for a WebSocket request without ports or with a bad one, with the kubelet's
    /// messages.
    pub fn parse(headers: &HeaderMap, query: Option<&str>) -> Result<Self, ApiError> {
        let websocket = upgrade::is_upgrade(headers)
            && upgrade::header_values(headers, UPGRADE.as_str())
                .iter()
                .any(|v| v == "websocket");
        let ports = if websocket {
            channel_ports(query, "port")?
        } else {
            Vec::new()
        };
        Ok(Self { ports })
    }
}

impl Accepted {
    /// A port-forward of `target`'s ports (a pod of the kubelet) whose upgrade `headers`
    /// ask for, with `options`.
    ///
    /// # Errors
    /// As [`start`] refuses an upgrade.
    pub fn for_kubelet(
        headers: &HeaderMap,
        options: KubeletOptions,
        target: Target,
    ) -> Result<Self, ApiError> {
        let Handshake { switch, channels } = handshake(headers, move || Ok(options.ports))?;
        Ok(Self {
            switch,
            channels,
            target: Arc::new(target),
        })
    }
}

/// The transport of an accepted upgrade, and the ports of the channel protocol.
#[derive(Debug)]
struct Handshake {
    switch: Switch,
    channels: Option<Channels>,
}

/// Checks a port-forward request: its upgrade, its ports (`ports` in `query`, for the
/// channel protocol) and the pod.
///
/// # Errors
/// As kube-apiserver and the kubelet refuse: no upgrade (400), a SPDY upgrade without or
/// with other stream protocols (400, 403), a WebSocket offering no subprotocol served
/// (403), a channel-protocol WebSocket without ports or with a bad one (400), an unknown
/// pod (404), a pod without a node or an address (400).
pub fn start(
    state: &crate::state::State,
    namespace: &str,
    name: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Accepted, ApiError> {
    let Handshake { switch, channels } = handshake(headers, || channel_ports(query, "ports"))?;
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
        channels,
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

/// The transport an upgrade asks for, or why it is refused; `ports` are the ports of a
/// channel-protocol request.
fn handshake(
    headers: &HeaderMap,
    ports: impl FnOnce() -> Result<Vec<u16>, ApiError>,
) -> Result<Handshake, ApiError> {
    if !upgrade::is_upgrade(headers) {
        return Err(missing_upgrade());
    }
    let websocket = upgrade::header_values(headers, UPGRADE.as_str())
        .iter()
        .any(|v| v == "websocket");
    if websocket {
        if let Some((protocol, accept_key)) = upgrade::websocket(headers, &[WEBSOCKET_PROTOCOL]) {
            return Ok(Handshake {
                switch: Switch::WebSocket {
                    protocol,
                    accept_key,
                },
                channels: None,
            });
        }
        return channel_handshake(headers, ports()?);
    }
    if !upgrade::is_spdy(headers) {
        return Err(missing_upgrade());
    }
    Ok(Handshake {
        switch: Switch::Spdy(upgrade::stream_protocol(headers, &[PROTOCOL])?),
        channels: None,
    })
}

/// The ports of a channel-protocol request: every value of `param` in `query`, each a
/// comma-separated list (the kubelet's `NewV4Options`, and its messages).
fn channel_ports(query: Option<&str>, param: &str) -> Result<Vec<u16>, ApiError> {
    let values: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == param)
        .map(|(_, v)| v.into_owned())
        .collect();
    if values.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "query parameter {param:?} is required"
        )));
    }
    let mut ports = Vec::new();
    for value in &values {
        if value.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "query parameter {param:?} cannot be empty"
            )));
        }
        for p in value.split(',') {
            match p.parse::<u16>() {
                Ok(0) => {
                    return Err(ApiError::BadRequest(format!("port {value:?} must be > 0")));
                }
                Ok(port) => ports.push(port),
                Err(e) => {
                    return Err(ApiError::BadRequest(format!(
                        "unable to parse {value:?} as a port: {e}"
                    )));
                }
            }
        }
    }
    if ports.len() > MAX_CHANNEL_PORTS {
        return Err(ApiError::BadRequest(format!(
            "query parameter {param:?} names {} ports, expected at most {MAX_CHANNEL_PORTS}",
            ports.len()
        )));
    }
    Ok(ports)
}

/// The subprotocol of a channel-protocol WebSocket: the client's first offer the kubelet
/// serves, binary when it offers none; 403 (no body, as the kubelet's WebSocket library
/// answers) when it offers only others.
fn channel_handshake(headers: &HeaderMap, ports: Vec<u16>) -> Result<Handshake, ApiError> {
    let forbidden = || ApiError::Custom {
        code: 403,
        reason: "Forbidden".into(),
        message: String::new(),
    };
    let key = headers
        .get(hyper::header::SEC_WEBSOCKET_KEY)
        .ok_or_else(missing_upgrade)?
        .as_bytes();
    let accept_key = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key);
    let offered = upgrade::header_values(headers, hyper::header::SEC_WEBSOCKET_PROTOCOL.as_str());
    let protocol = if offered.is_empty() {
        ""
    } else {
        offered
            .iter()
            .find_map(|o| CHANNEL_PROTOCOLS.iter().find(|p| **p == o.as_str()))
            .copied()
            .ok_or_else(forbidden)?
    };
    Ok(Handshake {
        switch: Switch::WebSocket {
            protocol,
            accept_key,
        },
        channels: Some(Channels {
            ports,
            base64: protocol == CHANNEL_PROTOCOLS[1],
        }),
    })
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
    if let Some(channels) = accepted.channels {
        return channel_session(io, target, channels).await;
    }
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

/// The text written on a port's error stream or channel when forwarding fails.
fn failure(port: u16, target: &Target, e: &std::io::Error) -> String {
    format!(
        "error forwarding port {port} to pod {}/{}, uid {}: {e}",
        target.namespace, target.name, target.uid
    )
}

/// A message of the channel protocol: `channel` and `bytes`, in the session's encoding.
fn channel_message(channel: u8, bytes: &[u8], base64: bool) -> Message {
    use base64::Engine as _;
    if base64 {
        let mut text = String::from(char::from(b'0'.wrapping_add(channel)));
        text.push_str(&base64::engine::general_purpose::STANDARD.encode(bytes));
        Message::text(text)
    } else {
        let mut frame = Vec::with_capacity(bytes.len() + 1);
        frame.push(channel);
        frame.extend_from_slice(bytes);
        Message::binary(frame)
    }
}

/// The channel and bytes of a client's message, decoded; `None` for an empty message or
/// undecodable base64 (which the kubelet drops).
fn channel_payload(payload: &[u8], base64: bool) -> Option<(u8, Bytes)> {
    use base64::Engine as _;
    let (&first, rest) = payload.split_first()?;
    if base64 {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        Some((first.wrapping_sub(b'0'), Bytes::from(bytes)))
    } else {
        Some((first, Bytes::copy_from_slice(rest)))
    }
}

/// Runs a channel-protocol session on `io` (already upgraded to a WebSocket).
async fn channel_session<S>(io: S, target: Arc<Target>, channels: Channels)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Channels { ports, base64 } = channels;
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    let (mut sink, mut messages) = ws.split();
    // The port on each channel first: data, then error, port by port.
    for (i, port) in ports.iter().enumerate() {
        let data = channel_of(i);
        for channel in [data, data.wrapping_add(1)] {
            let message = channel_message(channel, &port.to_le_bytes(), base64);
            if sink.send(message).await.is_err() {
                return;
            }
        }
    }
    let (out, mut outgoing) = mpsc::channel::<(u8, Bytes)>(16);
    let mut to_pods = Vec::with_capacity(ports.len());
    let mut forwards = tokio::task::JoinSet::new();
    for (i, port) in ports.iter().enumerate() {
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        to_pods.push(tx);
        forwards.spawn(forward_channel(
            *port,
            channel_of(i),
            rx,
            out.clone(),
            target.clone(),
        ));
    }
    drop(out);
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(Ok(Message::Binary(payload))) => {
                    deliver(&to_pods, channel_payload(&payload, base64)).await;
                }
                Some(Ok(Message::Text(payload))) => {
                    deliver(&to_pods, channel_payload(payload.as_bytes(), base64)).await;
                }
                // The client ended the session: so ends every port.
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            sent = outgoing.recv() => match sent {
                Some((channel, bytes)) => {
                    if sink.send(channel_message(channel, &bytes, base64)).await.is_err() {
                        break;
                    }
                }
                // Every port is done.
                None => break,
            },
        }
    }
    forwards.abort_all();
    let normal = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(normal))).await;
    let _ = sink.close().await;
}

/// The data channel of the `i`th port (its error channel is the next).
fn channel_of(i: usize) -> u8 {
    u8::try_from(2 * i).unwrap_or(u8::MAX - 1)
}

/// Passes what the client sent on a data channel to its port; what it sends on an error
/// channel, on a channel of no port, or empty, is dropped (as the kubelet drops it).
async fn deliver(to_pods: &[mpsc::Sender<Bytes>], payload: Option<(u8, Bytes)>) {
    let Some((channel, bytes)) = payload else {
        return;
    };
    if channel % 2 != 0 || bytes.is_empty() {
        return;
    }
    if let Some(tx) = to_pods.get(usize::from(channel / 2)) {
        // A port that is done no longer reads.
        let _ = tx.send(bytes).await;
    }
}

/// Connects to `port` of the pod and relays its bytes on channel `data` and from
/// `from_client`, until the pod's side ends; a failure is sent on the error channel.
async fn forward_channel(
    port: u16,
    data: u8,
    mut from_client: mpsc::Receiver<Bytes>,
    out: mpsc::Sender<(u8, Bytes)>,
    target: Arc<Target>,
) {
    let addr = SocketAddr::new(target.ip, port);
    let result = match pod_network::connect(addr).await {
        Ok(connection) => {
            let (mut from_pod, mut to_pod) = connection.into_split();
            let mut buffer = vec![0u8; 32 * 1024];
            loop {
                tokio::select! {
                    read = from_pod.read(&mut buffer) => match read {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            let bytes = Bytes::copy_from_slice(&buffer[..n]);
                            if out.send((data, bytes)).await.is_err() {
                                break Ok(());
                            }
                        }
                        Err(e) => break Err(e),
                    },
                    bytes = from_client.recv() => match bytes {
                        Some(bytes) => {
                            if let Err(e) = to_pod.write_all(&bytes).await {
                                break Err(e);
                            }
                        }
                        None => break Ok(()),
                    },
                }
            }
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        let message = failure(port, &target, &e);
        tracing::debug!("{message}");
        let _ = out
            .send((data.wrapping_add(1), Bytes::from(message.into_bytes())))
            .await;
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
        let message = failure(port, &target, &e);
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

    /// The handshake of a request with `headers` and `query`, its ports in `param`.
    fn checked(
        headers: &HeaderMap,
        query: Option<&str>,
        param: &str,
    ) -> Result<Handshake, ApiError> {
        handshake(headers, || channel_ports(query, param))
    }

    /// The switch a handshake asks for, with `ports` in the query.
    fn switch(headers: &HeaderMap, query: Option<&str>) -> Option<Switch> {
        checked(headers, query, "ports").ok().map(|h| h.switch)
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
            switch(&headers, None),
            Some(Switch::WebSocket {
                protocol: WEBSOCKET_PROTOCOL,
                accept_key: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into()
            })
        );
    }

    #[test]
    fn a_websocket_of_the_channel_protocol_takes_the_first_offer_served_and_its_ports() {
        let offering = |protocols: &'static str| {
            with(&[
                ("upgrade", "websocket"),
                ("connection", "Upgrade"),
                ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("sec-websocket-protocol", protocols),
            ])
        };
        // kube-rs offers v5 first, which port-forward does not serve.
        let kube_rs = offering("v5.channel.k8s.io, v4.channel.k8s.io");
        let accepted = checked(&kube_rs, Some("&ports=80%2C1234&ports=9"), "ports")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            accepted.channels,
            Some(Channels {
                ports: vec![80, 1234, 9],
                base64: false
            })
        );
        assert!(matches!(
            accepted.switch,
            Switch::WebSocket {
                protocol: "v4.channel.k8s.io",
                ..
            }
        ));
        let base64 = checked(
            &offering("v4.base64.channel.k8s.io"),
            Some("port=80"),
            "port",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(base64.channels.map(|c| c.base64), Some(true));
        // No subprotocol at all: binary, and none named in the answer.
        let mut bare = offering("x");
        bare.remove("sec-websocket-protocol");
        assert!(matches!(
            switch(&bare, Some("ports=80")),
            Some(Switch::WebSocket { protocol: "", .. })
        ));
        assert!(matches!(
            checked(&offering("v5.channel.k8s.io"), Some("ports=80"), "ports"),
            Err(ApiError::Custom { code: 403, .. })
        ));
    }

    #[test]
    fn the_channel_protocols_ports_are_refused_with_the_kubelets_messages() {
        let headers = with(&[
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-protocol", "v4.channel.k8s.io"),
        ]);
        let refusal = |query: &'static str| match checked(&headers, Some(query), "port") {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("{query}: {other:?}"),
        };
        assert_eq!(refusal("ports=80"), "query parameter \"port\" is required");
        assert_eq!(refusal("port="), "query parameter \"port\" cannot be empty");
        assert_eq!(refusal("port=80,0"), "port \"80,0\" must be > 0");
        assert!(
            refusal("port=http").starts_with("unable to parse \"http\" as a port: "),
            "{}",
            refusal("port=http")
        );
    }

    #[test]
    fn channel_messages_carry_their_channel_first_in_binary_and_in_base64() {
        assert_eq!(
            channel_message(3, &80u16.to_le_bytes(), false),
            Message::binary(vec![3, 80, 0])
        );
        assert_eq!(channel_message(1, b"hi", true), Message::text("1aGk="));
        assert_eq!(
            channel_payload(b"0aGk=", true),
            Some((0, Bytes::from_static(b"hi")))
        );
        assert_eq!(
            channel_payload(&[2, 7], false),
            Some((2, Bytes::from_static(&[7])))
        );
        assert_eq!(channel_payload(b"", false), None);
        assert_eq!(channel_payload(b"0!!", true), None);
    }

    #[tokio::test]
    async fn a_channel_session_sends_the_ports_relays_a_port_and_tells_a_refused_one() {
        use tokio_tungstenite::tungstenite::protocol::Role;
        // The "pod" on one port: answers what it reads, upper-cased, then ends.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("binding a loopback port: {e}"));
        let open = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let pod = tokio::spawn(async move {
            if let Ok((mut conn, _)) = listener.accept().await {
                let mut got = [0u8; 5];
                conn.read_exact(&mut got).await.ok();
                conn.write_all(&got.to_ascii_uppercase()).await.ok();
            }
        });
        // Nothing listens on the other: bound, then released.
        let refused = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("binding a loopback port: {e}"));
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let channels = Channels {
            ports: vec![open, refused],
            base64: false,
        };
        let served = tokio::spawn(channel_session(server_io, loopback(), channels));
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let mut first = Vec::new();
        for _ in 0..4 {
            let message = tokio::time::timeout(Duration::from_secs(30), client.next())
                .await
                .unwrap_or_else(|_| panic!("no message within 30 s"));
            first.push(message.and_then(Result::ok));
        }
        let [o, r] = [open.to_le_bytes(), refused.to_le_bytes()];
        assert_eq!(
            first,
            [
                Some(Message::binary(vec![0, o[0], o[1]])),
                Some(Message::binary(vec![1, o[0], o[1]])),
                Some(Message::binary(vec![2, r[0], r[1]])),
                Some(Message::binary(vec![3, r[0], r[1]])),
            ]
        );
        client.send(Message::binary(b"\0hello".to_vec())).await.ok();
        let mut data = Vec::new();
        let mut errors = Vec::new();
        let mut closed = false;
        while let Some(Ok(message)) = tokio::time::timeout(Duration::from_secs(30), client.next())
            .await
            .unwrap_or_else(|_| panic!("the session did not end within 30 s"))
        {
            match message {
                Message::Binary(bytes) if bytes.first() == Some(&0) => {
                    data.extend_from_slice(&bytes[1..])
                }
                Message::Binary(bytes) => {
                    errors.push((bytes[0], String::from_utf8_lossy(&bytes[1..]).into_owned()))
                }
                Message::Close(frame) => {
                    closed = frame.is_some_and(|f| f.code == CloseCode::Normal);
                }
                _ => {}
            }
        }
        assert_eq!(data, b"HELLO");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, 3);
        assert!(
            errors[0].1.starts_with(&format!(
                "error forwarding port {refused} to pod default/p, uid u: "
            )),
            "{errors:?}"
        );
        assert!(closed, "every port done: the server closes normally");
        assert!(served.await.is_ok());
        assert!(pod.await.is_ok());
    }

    #[test]
    fn a_spdy_upgrade_must_offer_the_port_forward_stream_protocol() {
        let spdy = [("upgrade", "SPDY/3.1"), ("connection", "Upgrade")];
        let offered = [
            &spdy[..],
            &[("x-stream-protocol-version", "portforward.k8s.io")],
        ]
        .concat();
        assert_eq!(switch(&with(&offered), None), Some(Switch::Spdy(PROTOCOL)));
        assert!(checked(&with(&spdy), None, "ports").is_err());
        let other = [
            &spdy[..],
            &[("x-stream-protocol-version", "v4.channel.k8s.io")],
        ]
        .concat();
        assert!(matches!(
            checked(&with(&other), None, "ports"),
            Err(ApiError::Custom { code: 403, .. })
        ));
        assert!(
            checked(
                &with(&[("x-stream-protocol-version", "portforward.k8s.io")]),
                None,
                "ports"
            )
            .is_err()
        );
    }
}
