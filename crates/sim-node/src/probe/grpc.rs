//! `grpc` probes, as the kubelet's `pkg/probe/grpc` runs them: a unary call of
//! `grpc.health.v1.Health/Check` over cleartext HTTP/2 (prior knowledge) to the pod's IP
//! and the probe's port, with its `service`, the kubelet's User-Agent and the probe's
//! timeout; it passes only on `SERVING`, and fails with the kubelet's messages otherwise.
//!
//! As grpc-go's blocking dial does, connecting is retried with its back-off (1 s, ×1.6)
//! until the deadline, and a connection counts once the server has spoken HTTP/2 (its
//! preface): a port that refuses, or a server that never answers the preface, fails as
//! "failed to connect … within …", one that never answers the call as "health rpc did
//! not complete within …".
//!
//! The request and response messages have one field each, so they are encoded here by
//! hand rather than with a protobuf library; the call's status is the `grpc-status`
//! trailer (or header, in a trailers-only answer), its message `grpc-message`.
//!
//! The User-Agent names the kubelet the node reports (`node::KUBELET_VERSION`, 1.34) and the
//! grpc-go Kubernetes 1.34 is built with.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Target;

/// What the kubelet sends as User-Agent: its own (`kube-probe/MAJOR.MINOR`) before
/// grpc-go's.
pub const USER_AGENT: &str = "kube-probe/1.34 grpc-go/1.72.1";

/// The health service's method.
const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// How a gRPC probe failed, in the kubelet's words.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    /// No connection (one whose server spoke HTTP/2) within the timeout.
    #[error(
        "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
        go_duration(*.timeout)
    )]
    ConnectTimeout {
        /// `host:port`.
        addr: String,
        /// The probe's timeout.
        timeout: Duration,
    },
    /// The call got no answer within the timeout.
    #[error("timeout: health rpc did not complete within {}", go_duration(*.timeout))]
    RpcTimeout {
        /// The probe's timeout.
        timeout: Duration,
    },
    /// The server does not serve `grpc.health.v1.Health` (status `Unimplemented`).
    #[error(
        "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {message}"
    )]
    Unimplemented {
        /// The status's message.
        message: String,
    },
    /// The call ended with another status than OK.
    #[error("error: health rpc probe failed: rpc error: code = {} desc = {message}", code_name(*.code))]
    Failed {
        /// The gRPC status code.
        code: u32,
        /// Its message.
        message: String,
    },
    /// The service answered, but not `SERVING`.
    #[error("service unhealthy (responded with {status:?})")]
    Unhealthy {
        /// The status's name (`NOT_SERVING`, `SERVICE_UNKNOWN`, `UNKNOWN`, or its number).
        status: String,
    },
}

/// gRPC's status codes that matter here.
const OK: u32 = 0;
const INTERNAL: u32 = 13;
const UNIMPLEMENTED: u32 = 12;
const UNKNOWN: u32 = 2;
const DEADLINE_EXCEEDED: u32 = 4;
const UNAVAILABLE: u32 = 14;

/// A status code's name, as grpc-go's `codes.Code` prints it.
fn code_name(code: u32) -> String {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("Code({code})"), |n| (*n).to_string())
}

/// A whole number of seconds as Go's `time.Duration` prints it (`1s`, `1m30s`, `1h0m0s`).
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// `grpc-timeout`'s value for `d`: in the finest unit that keeps it to 8 digits, as
/// grpc-go encodes it.
fn grpc_timeout(d: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let units = [
        (d.as_nanos(), 'n'),
        (d.as_micros(), 'u'),
        (d.as_millis(), 'm'),
        (u128::from(d.as_secs()), 'S'),
    ];
    units.iter().find(|(n, _)| *n <= MAX).map_or_else(
        || format!("{}M", d.as_secs() / 60),
        |(n, unit)| format!("{n}{unit}"),
    )
}

/// A status of the health service's answer, by its protobuf name.
fn serving_status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

/// `HealthCheckRequest { service }` as a gRPC message: the 5-byte prefix (uncompressed,
/// length), then field 1 (a string) unless empty.
#[must_use]
pub fn encode_request(service: &str) -> Bytes {
    let mut message = BytesMut::new();
    if !service.is_empty() {
        message.put_u8(0x0a);
        put_varint(&mut message, service.len() as u64);
        message.put_slice(service.as_bytes());
    }
    frame(&message)
}

/// `message` behind gRPC's length prefix.
fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    framed.put_slice(message);
    framed.freeze()
}

fn put_varint(out: &mut BytesMut, mut n: u64) {
    while n >= 0x80 {
        out.put_u8((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.put_u8(n as u8);
}

fn get_varint(input: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *input.first()?;
        input.advance(1);
        n |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// The protobuf field `number` of varint type in `message` (the last one, as protobuf
/// merges), skipping the others; `None` when the message is malformed.
#[must_use]
pub fn varint_field(mut message: &[u8], number: u64) -> Option<Option<u64>> {
    let mut found = None;
    while !message.is_empty() {
        let key = get_varint(&mut message)?;
        match key & 7 {
            0 => {
                let value = get_varint(&mut message)?;
                if key >> 3 == number {
                    found = Some(value);
                }
            }
            1 => message = message.get(8..)?,
            2 => {
                let len = usize::try_from(get_varint(&mut message)?).ok()?;
                message = message.get(len..)?;
            }
            5 => message = message.get(4..)?,
            _ => return None,
        }
    }
    Some(found)
}

/// The message of `grpc-message`, percent-decoded.
fn decode_message(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (value[i], value.get(i + 1), value.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or_default() * 16 + hex(l).unwrap_or_default()) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A connection that says when the server first sent something (its HTTP/2 preface).
struct Heard {
    stream: TcpStream,
    heard: Arc<Notify>,
    told: bool,
}

impl AsyncRead for Heard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if !self.told && buf.filled().len() > before {
            self.told = true;
            self.heard.notify_one();
        }
        polled
    }
}

impl AsyncWrite for Heard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// An HTTP/2 connection whose driving task ends with it.
struct Connection {
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// One try at connecting: TCP, then HTTP/2 until the server's preface arrives.
async fn connect_once(target: Target, addr: SocketAddr) -> Option<Connection> {
    let stream = super::connect(target, addr).await.ok()?;
    let heard = Arc::new(Notify::new());
    let io = Heard {
        stream,
        heard: heard.clone(),
        told: false,
    };
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .ok()?;
    let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
        let _ = ended_tx.send(());
    });
    let connection = Connection { sender, driver };
    tokio::select! {
        () = heard.notified() => Some(connection),
        _ = ended => None,
    }
}

/// Connects as grpc-go's blocking dial does: tries again after its back-off until the
/// deadline passes.
async fn connect(target: Target, addr: SocketAddr) -> Connection {
    let mut backoff = Duration::from_secs(1);
    loop {
        if let Some(connection) = connect_once(target, addr).await {
            return connection;
        }
        tokio::time::sleep(backoff).await;
        backoff = backoff.mul_f64(1.6).min(Duration::from_secs(120));
    }
}

/// A call's end: its status code and message, with the message it answered (if any).
struct Answer {
    code: u32,
    message: String,
    body: Bytes,
}

fn header_code(headers: &http::HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?;
    let code = std::str::from_utf8(code.as_bytes())
        .ok()
        .and_then(|c| c.parse::<u32>().ok());
    let message = headers
        .get("grpc-message")
        .map(|m| decode_message(m.as_bytes()))
        .unwrap_or_default();
    Some(match code {
        Some(code) => (code, message),
        None => (INTERNAL, "transport: malformed grpc-status".into()),
    })
}

/// The HTTP status's code and message when an answer is not gRPC's, as grpc-go maps it.
fn not_grpc(response: &http::response::Parts) -> Option<(u32, String)> {
    let content_type = response
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let grpc = content_type.is_some_and(|t| {
        t == "application/grpc"
            || t.starts_with("application/grpc+")
            || t.starts_with("application/grpc;")
    });
    let status = response.status;
    if grpc && status == http::StatusCode::OK {
        return None;
    }
    let mut errors = Vec::new();
    if status != http::StatusCode::OK {
        errors.push(format!(
            "unexpected HTTP status code received from server: {} ({})",
            status.as_u16(),
            status.canonical_reason().unwrap_or_default()
        ));
    }
    if !grpc {
        errors.push(match content_type {
            Some(t) => format!("transport: received unexpected content-type {t:?}"),
            None => "malformed header: missing HTTP content-type".into(),
        });
    }
    let code = match status.as_u16() {
        200 => INTERNAL,
        400 => INTERNAL,
        401 => 16,
        403 => 7,
        404 => UNIMPLEMENTED,
        429 | 502 | 503 | 504 => UNAVAILABLE,
        _ => UNKNOWN,
    };
    Some((code, errors.join("; ")))
}

/// Calls `Health/Check` for `service` on `connection`.
async fn call(
    connection: &mut Connection,
    addr: SocketAddr,
    service: &str,
    deadline: Instant,
) -> Answer {
    let remaining = deadline.saturating_duration_since(Instant::now());
    let request = http::Request::post(format!("http://{addr}{CHECK_PATH}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::USER_AGENT, USER_AGENT)
        .header(http::header::TE, "trailers")
        .header("grpc-timeout", grpc_timeout(remaining))
        .body(Full::new(encode_request(service)));
    let failed = |code, message: String| Answer {
        code,
        message,
        body: Bytes::new(),
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => return failed(INTERNAL, e.to_string()),
    };
    let response = match connection.sender.send_request(request).await {
        Ok(r) => r,
        Err(e) => return failed(UNAVAILABLE, format!("error reading from server: {e}")),
    };
    let (parts, body) = response.into_parts();
    if let Some((code, message)) = not_grpc(&parts) {
        return failed(code, message);
    }
    if let Some((code, message)) = header_code(&parts.headers) {
        return failed(code, message);
    }
    let collected = match body.collect().await {
        Ok(c) => c,
        Err(e) => return failed(UNAVAILABLE, format!("error reading from server: {e}")),
    };
    let trailers = collected.trailers().cloned();
    let body = collected.to_bytes();
    match trailers.as_ref().and_then(header_code) {
        Some((code, message)) => Answer {
            code,
            message,
            body,
        },
        None => failed(
            INTERNAL,
            "server closed the stream without sending trailers".into(),
        ),
    }
}

/// The health service's status in an OK answer's body.
fn serving_status(body: &[u8]) -> Result<u64, GrpcError> {
    let malformed = |message: &str| GrpcError::Failed {
        code: INTERNAL,
        message: message.to_string(),
    };
    let mut body = body;
    if body.len() < 5 {
        return Err(malformed(
            "cardinality violation: expected <grpc_health_v1.HealthCheckResponse> message but got none",
        ));
    }
    if body[0] != 0 {
        return Err(malformed(
            "grpc: compressed flag set with identity or empty encoding",
        ));
    }
    let len = (&body[1..5]).get_u32() as usize;
    body.advance(5);
    let message = body
        .get(..len)
        .ok_or_else(|| malformed("grpc: failed to unmarshal the received message"))?;
    varint_field(message, 1)
        .map(Option::unwrap_or_default)
        .ok_or_else(|| malformed("grpc: failed to unmarshal the received message"))
}

/// Runs one gRPC probe of `service` at `addr` within `timeout`.
///
/// # Errors
/// What makes it fail, in the kubelet's words.
pub async fn probe(
    target: Target,
    addr: SocketAddr,
    service: &str,
    timeout: Duration,
) -> Result<(), GrpcError> {
    let deadline = Instant::now() + timeout;
    let Ok(mut connection) = tokio::time::timeout_at(deadline, connect(target, addr)).await else {
        return Err(GrpcError::ConnectTimeout {
            addr: addr.to_string(),
            timeout,
        });
    };
    let answered =
        tokio::time::timeout_at(deadline, call(&mut connection, addr, service, deadline));
    let Ok(answer) = answered.await else {
        return Err(GrpcError::RpcTimeout { timeout });
    };
    match answer.code {
        OK => match serving_status(&answer.body)? {
            1 => Ok(()),
            other => Err(GrpcError::Unhealthy {
                status: serving_status_name(other),
            }),
        },
        UNIMPLEMENTED => Err(GrpcError::Unimplemented {
            message: answer.message,
        }),
        DEADLINE_EXCEEDED => Err(GrpcError::RpcTimeout { timeout }),
        code => Err(GrpcError::Failed {
            code,
            message: answer.message,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::net::Ipv4Addr;
    use std::sync::Mutex;

    use http_body_util::StreamBody;
    use hyper::body::{Frame, Incoming};
    use tokio::net::TcpListener;

    use super::*;

    /// How a test server answers a health check.
    #[derive(Clone, Copy)]
    enum Serves {
        /// The health service: `""` is SERVING, `"sick"` NOT_SERVING, any other service
        /// unknown (status NOT_FOUND).
        Health,
        /// No health service: every call is UNIMPLEMENTED, as grpc-go answers it.
        Nothing,
        /// Never answers a call.
        Silence,
    }

    type Frames =
        StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

    fn answer(code: u32, message: &str, reply: Option<u64>) -> http::Response<Frames> {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", code.to_string().parse().unwrap());
        trailers.insert("grpc-message", message.replace(' ', "%20").parse().unwrap());
        let builder = http::Response::builder().header("content-type", "application/grpc");
        let frames = match reply {
            Some(status) => vec![
                Ok(Frame::data(frame(&[0x08, status as u8]))),
                Ok(Frame::trailers(trailers)),
            ],
            // Trailers-only: the status in the headers.
            None => {
                let builder = trailers
                    .iter()
                    .fold(builder, |b, (name, value)| b.header(name, value));
                return builder
                    .body(StreamBody::new(futures::stream::iter(Vec::new())))
                    .unwrap();
            }
        };
        builder
            .body(StreamBody::new(futures::stream::iter(frames)))
            .unwrap()
    }

    /// The request headers seen last.
    type Seen = Arc<Mutex<Option<http::HeaderMap>>>;

    async fn respond(
        serves: Serves,
        seen: Seen,
        request: http::Request<Incoming>,
    ) -> http::Response<Frames> {
        *seen.lock().unwrap() = Some(request.headers().clone());
        let path = request.uri().path().to_string();
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let service = body
            .get(5..)
            .filter(|m| m.first() == Some(&0x0a))
            .map(|m| String::from_utf8_lossy(&m[2..]).into_owned())
            .unwrap_or_default();
        match serves {
            Serves::Silence => std::future::pending().await,
            Serves::Nothing => answer(12, "unknown service grpc.health.v1.Health", None),
            Serves::Health if path != CHECK_PATH => answer(12, "unknown method", None),
            Serves::Health => match service.as_str() {
                "" => answer(OK, "", Some(1)),
                "sick" => answer(OK, "", Some(2)),
                _ => answer(5, "unknown service", None),
            },
        }
    }

    /// An HTTP/2 server on a port of its own answering as `serves` says.
    async fn server(serves: Serves) -> (SocketAddr, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Seen::default();
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = kept.clone();
                let service = hyper::service::service_fn(move |request| {
                    let seen = seen.clone();
                    async move { Ok::<_, Infallible>(respond(serves, seen, request).await) }
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        (addr, seen)
    }

    const TARGET: Target = Target {
        pod_ip: Ipv4Addr::LOCALHOST,
        node_ip: Ipv4Addr::LOCALHOST,
    };

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_grpc_probe_passes_on_serving_and_fails_with_the_kubelets_message_otherwise() {
        let (addr, seen) = server(Serves::Health).await;
        // As the pod spec gives it: the pod's IP, the probe's port, no service.
        let spec: k8s_openapi::api::core::v1::Probe =
            serde_json::from_value(serde_json::json!({"grpc": {"port": addr.port()}})).unwrap();
        let container = k8s_openapi::api::core::v1::Container::default();
        super::super::attempt(&spec, &container, TARGET, None)
            .await
            .unwrap();
        let headers = seen.lock().unwrap().clone().unwrap();
        assert_eq!(headers["user-agent"], USER_AGENT);
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(headers["te"], "trailers");
        assert!(headers.contains_key("grpc-timeout"), "{headers:?}");
        let failure = |service: &'static str| async move {
            probe(TARGET, addr, service, SECOND)
                .await
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            failure("sick").await,
            r#"service unhealthy (responded with "NOT_SERVING")"#
        );
        assert_eq!(
            failure("db").await,
            "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
        );
        let (bare, _) = server(Serves::Nothing).await;
        assert_eq!(
            probe(TARGET, bare, "", SECOND)
                .await
                .unwrap_err()
                .to_string(),
            "error: this server does not implement the grpc health protocol \
             (grpc.health.v1.Health): unknown service grpc.health.v1.Health"
        );
    }

    /// The failure of a probe of `addr` with a timeout of a second, which it waited for.
    async fn failure_after_the_timeout(addr: SocketAddr) -> String {
        let started = Instant::now();
        let failure = probe(TARGET, addr, "", SECOND).await.unwrap_err();
        assert!(started.elapsed() >= SECOND, "{failure}");
        failure.to_string()
    }

    #[tokio::test]
    async fn a_grpc_call_never_answered_times_out_with_the_kubelets_message() {
        let (addr, _) = server(Serves::Silence).await;
        assert_eq!(
            failure_after_the_timeout(addr).await,
            "timeout: health rpc did not complete within 1s"
        );
    }

    #[tokio::test]
    async fn a_port_that_refuses_or_never_speaks_http2_fails_to_connect_within_the_timeout() {
        // Accepts, and says nothing.
        let mute = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mute_addr = mute.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((stream, _)) = mute.accept().await {
                kept.push(stream);
            }
        });
        let refusing = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        for addr in [mute_addr, refusing] {
            assert_eq!(
                failure_after_the_timeout(addr).await,
                format!(
                    "timeout: failed to connect service \"{addr}\" within 1s: context deadline exceeded"
                )
            );
        }
        held.abort();
    }

    #[test]
    fn durations_print_as_go_and_grpc_go_print_them() {
        let d = |s| go_duration(Duration::from_secs(s));
        assert_eq!(
            [d(1), d(59), d(60), d(90), d(3600)],
            ["1s", "59s", "1m0s", "1m30s", "1h0m0s"]
        );
        let timeout = |s: f64| grpc_timeout(Duration::from_secs_f64(s));
        assert_eq!(
            [timeout(0.05), timeout(1.0), timeout(3600.0)],
            ["50000000n", "1000000u", "3600000m"]
        );
    }

    #[test]
    fn the_request_carries_the_service_and_the_response_its_status() {
        assert_eq!(&encode_request("")[..], [0, 0, 0, 0, 0]);
        assert_eq!(
            &encode_request("db")[..],
            [0, 0, 0, 0, 4, 0x0a, 2, b'd', b'b']
        );
        // An unknown string field before the status is skipped.
        assert_eq!(varint_field(&[0x12, 1, b'x', 0x08, 2], 1), Some(Some(2)));
        assert_eq!(varint_field(&[], 1), Some(None));
        assert_eq!(varint_field(&[0x08], 1), None);
        assert_eq!(serving_status(&frame(&[0x08, 1])).unwrap(), 1);
        assert_eq!(serving_status(&frame(&[])).unwrap(), 0);
    }

    #[test]
    fn status_messages_are_percent_decoded_and_codes_named_as_grpc_go_names_them() {
        assert_eq!(
            decode_message(b"unknown%20service%3A x"),
            "unknown service: x"
        );
        assert_eq!(code_name(5), "NotFound");
        assert_eq!(code_name(42), "Code(42)");
    }
}
