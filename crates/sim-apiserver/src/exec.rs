//! `pods/exec`: a command run in a container of a pod by the kubelet that runs it, its
//! standard streams relayed over a WebSocket as kube-apiserver relays them to kubectl.
//!
//! The client upgrades `GET …/pods/NAME/exec?command=…&container=…&stdin=…&stdout=…&stderr=…`
//! to a WebSocket with the subprotocol `v5.channel.k8s.io` (what kubectl 1.30+ offers, and
//! only that) or `v4.channel.k8s.io` (kube-rs offers both). Every message is binary, its
//! first byte the channel: 0 stdin, 1 stdout, 2 stderr, 3 the final `Status` (JSON), 4 a
//! terminal resize; with v5 the client closes stdin with `[255, 0]`. Once the command has
//! exited and its output is relayed, the status goes on channel 3 (`Success`, or `Failure`
//! with reason `NonZeroExitCode` and the exit code as a cause, from which kubectl takes its
//! own exit code) and the socket closes. A client that goes away kills the command.
//!
//! With `tty=true` (`kubectl exec -t`) the command runs under a pseudo-terminal: channel 1
//! carries what the terminal shows, channel 0 is typed into it, there is no stderr (the
//! kubelet drops `stderr` with a terminal), and channel 4 carries window sizes as JSON
//! (`{"Width":80,"Height":24}`), each set on the terminal.
//!
//! Kubelets register an [`ExecSource`] ([`crate::state::State::add_exec_source`]) that
//! starts the command as a process whose standard streams are piped, or that are a
//! [`Terminal`]. [`exit_status`] is the final status of a command, shared with the kubelet's
//! own SPDY endpoint (in `sim-node`), which serves exec to a real kube-apiserver.
//!
//! # Caveats
//! - SPDY, kubectl's fallback, is not served here (the kubelet's endpoint serves it): the
//!   upgrade is refused with a status saying which protocols are.

use std::pin::Pin;
use std::sync::Arc;

use futures::{SinkExt as _, StreamExt as _};
use hyper::HeaderMap;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::process::Child;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use super::status::ApiError;

/// The subprotocols served, in order of preference.
pub const PROTOCOLS: &[&str] = &["v5.channel.k8s.io", "v4.channel.k8s.io"];

pub(crate) const STDIN: u8 = 0;
pub(crate) const STDOUT: u8 = 1;
pub(crate) const STDERR: u8 = 2;
pub(crate) const STATUS: u8 = 3;
/// Window sizes of a terminal (JSON).
pub(crate) const RESIZE: u8 = 4;
/// v5's close signal: `[255, channel]`.
pub(crate) const CLOSE: u8 = 255;

/// What a kubelet is asked to run.
#[derive(Debug)]
pub struct ExecRequest<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod.
    pub pod: &'a str,
    /// The container (already checked to be one of the pod's).
    pub container: &'a str,
    /// argv.
    pub command: &'a [String],
    /// Whether the client sends a stdin.
    pub stdin: bool,
    /// Whether the command runs under a terminal.
    pub tty: bool,
}

/// A command started by a kubelet: its process, and its terminal when it runs under one
/// (its standard streams are then the terminal's; else they are piped).
pub struct Started {
    /// The process; killed when dropped.
    pub child: Child,
    /// The terminal, with `tty`.
    pub terminal: Option<Terminal>,
}

/// The terminal a command runs under, from the master side.
pub struct Terminal {
    /// What the terminal shows (ends when the command and all it started have closed it).
    pub output: Pin<Box<dyn AsyncRead + Send>>,
    /// What is typed into it.
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
    /// Sets its window size: columns, rows.
    pub resize: Box<dyn Fn(u16, u16) + Send + Sync>,
}

/// A window size as remotecommand sends it (`TerminalSize`).
#[derive(Debug, serde::Deserialize)]
pub struct WindowSize {
    /// Columns.
    #[serde(rename = "Width")]
    pub width: u16,
    /// Rows.
    #[serde(rename = "Height")]
    pub height: u16,
}

/// Why a kubelet did not run a command (its message is the answer's).
pub type ExecRefusal = Box<dyn std::error::Error + Send + Sync>;

/// A kubelet's way to run a command in a container: `None` when the pod is not its, else
/// the started command (standard streams piped, stdin only when asked; or a terminal) or
/// why not.
pub type ExecSource =
    Arc<dyn Fn(&ExecRequest<'_>) -> Option<Result<Started, ExecRefusal>> + Send + Sync>;

/// An exec accepted and started: the answer to give (101 with these headers), then the
/// relay to run on the upgraded connection ([`relay`]).
pub struct Accepted {
    /// The subprotocol chosen.
    pub protocol: &'static str,
    /// `Sec-WebSocket-Accept`.
    pub accept_key: String,
    started: Started,
}

impl Accepted {
    /// How the 101 answers ([`crate::upgrade::switching_protocols`]).
    pub fn switch(&self) -> super::upgrade::Switch {
        super::upgrade::Switch::WebSocket {
            protocol: self.protocol,
            accept_key: self.accept_key.clone(),
        }
    }
}

/// Checks an exec request of `stored`, the pod as stored, and starts its command through
/// `run` (whichever kubelet's [`ExecSource`] runs the pod).
///
/// # Errors
/// As kube-apiserver refuses: a request that is not a WebSocket upgrade offering one of
/// [`PROTOCOLS`], no command, no stream, an unknown pod or container, a pod no kubelet
/// runs, or what the kubelet said.
pub fn start(
    stored: Option<Value>,
    namespace: &str,
    name: &str,
    raw_query: Option<&str>,
    headers: &HeaderMap,
    run: impl FnOnce(&ExecRequest<'_>) -> Option<Result<Started, ExecRefusal>>,
) -> Result<Accepted, ApiError> {
    let StreamQuery {
        command,
        container,
        stdin,
        tty,
        ..
    } = StreamQuery::parse(raw_query)?;
    if command.is_empty() {
        return Err(ApiError::BadRequest(
            "you must specify at least one command for the container".into(),
        ));
    }
    let (protocol, accept_key) = handshake(headers)?;
    let pod = super::upgrade::scheduled_pod(stored, name)?;
    let container = super::podlog::container_of(&pod, name, &container)?;
    let request = ExecRequest {
        namespace,
        pod: name,
        container: &container,
        command: &command,
        stdin,
        tty,
    };
    let started = kubelet_answer(run(&request), name)?;
    Ok(Accepted {
        protocol,
        accept_key,
        started,
    })
}

/// The subprotocol and `Sec-WebSocket-Accept` of a WebSocket upgrade offering one of
/// [`PROTOCOLS`].
fn handshake(headers: &HeaderMap) -> Result<(&'static str, String), ApiError> {
    super::upgrade::websocket(headers, PROTOCOLS).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "upgrade request required: exec is served over a WebSocket with one of the \
             subprotocols {}",
            PROTOCOLS.join(", ")
        ))
    })
}

/// Relays the command's streams over the upgraded connection until it has exited and its
/// output is sent, then sends its status; kills it when the client goes away first.
pub async fn relay<S>(socket: S, accepted: Accepted)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let v5 = accepted.protocol == PROTOCOLS[0];
    let Started {
        mut child,
        terminal,
    } = accepted.started;
    let ws = WebSocketStream::from_raw_socket(socket, Role::Server, None).await;
    let (mut sink, mut incoming) = ws.split();
    let (tx, mut output) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(pump(out, STDOUT, tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(pump(err, STDERR, tx.clone()));
    }
    let (mut stdin, resize): (Option<Pin<Box<dyn AsyncWrite + Send>>>, _) = match terminal {
        Some(terminal) => {
            tokio::spawn(pump(terminal.output, STDOUT, tx.clone()));
            (Some(terminal.input), Some(terminal.resize))
        }
        None => (
            child
                .stdin
                .take()
                .map(|pipe| Box::pin(pipe) as Pin<Box<dyn AsyncWrite + Send>>),
            None,
        ),
    };
    drop(tx);
    loop {
        tokio::select! {
            chunk = output.recv() => match chunk {
                Some(frame) => {
                    if sink.send(Message::binary(frame)).await.is_err() {
                        let _ = child.start_kill();
                        return;
                    }
                }
                // Both streams ended: the command is done with its output.
                None => break,
            },
            message = incoming.next() => match message {
                Some(Ok(Message::Binary(data))) => match data.first() {
                    Some(&STDIN) => {
                        if let Some(pipe) = stdin.as_mut()
                            && pipe.write_all(&data[1..]).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    Some(&CLOSE) if v5 && data.get(1) == Some(&STDIN) => stdin = None,
                    Some(&RESIZE) => {
                        if let (Some(resize), Ok(size)) =
                            (&resize, serde_json::from_slice::<WindowSize>(&data[1..]))
                        {
                            resize(size.width, size.height);
                        }
                    }
                    _ => {}
                },
                Some(Ok(Message::Close(_)) | Err(_)) | None => {
                    let _ = child.start_kill();
                    return;
                }
                Some(Ok(_)) => {}
            },
        }
    }
    drop(stdin);
    finish(&mut sink, &exit_status(child.wait().await)).await;
}

/// What a `pods/exec` or `pods/attach` query asks for:
/// `command=…&container=…&stdin=…&stdout=…&stderr=…&tty=…` (`true` or `1` for on).
#[derive(Debug, Default)]
pub(crate) struct StreamQuery {
    /// argv (exec only).
    pub command: Vec<String>,
    /// The container named, or empty.
    pub container: String,
    /// A stdin stream comes.
    pub stdin: bool,
    /// A stdout stream is wanted.
    pub stdout: bool,
    /// A stderr stream is wanted.
    pub stderr: bool,
    /// A terminal is asked for.
    pub tty: bool,
}

impl StreamQuery {
    /// Reads `raw_query`.
    ///
    /// # Errors
    /// No stream asked for, with kube-apiserver's message.
    pub(crate) fn parse(raw_query: Option<&str>) -> Result<Self, ApiError> {
        let mut query = Self::default();
        for (key, value) in form_urlencoded::parse(raw_query.unwrap_or_default().as_bytes()) {
            let on = matches!(value.as_ref(), "true" | "1");
            match key.as_ref() {
                "command" => query.command.push(value.into_owned()),
                "container" => query.container = value.into_owned(),
                "stdin" => query.stdin = on,
                "stdout" => query.stdout = on,
                "stderr" => query.stderr = on,
                "tty" => query.tty = on,
                _ => {}
            }
        }
        if !(query.stdin || query.stdout || query.stderr) {
            return Err(ApiError::BadRequest(
                "you must specify at least 1 of stdin, stdout, stderr".into(),
            ));
        }
        Ok(query)
    }
}

/// What a kubelet's source answered for pod `name`, as the API server answers it: `None`
/// (no kubelet runs the pod) and a refusal are `unable to upgrade connection: …`.
pub(crate) fn kubelet_answer<T>(
    answer: Option<Result<T, ExecRefusal>>,
    name: &str,
) -> Result<T, ApiError> {
    match answer {
        Some(Ok(started)) => Ok(started),
        Some(Err(refusal)) => Err(ApiError::BadRequest(format!(
            "unable to upgrade connection: {refusal}"
        ))),
        None => Err(ApiError::BadRequest(format!(
            "unable to upgrade connection: pod {name} is not running on a kubelet of this cluster"
        ))),
    }
}

/// Ends a session: `status` on channel 3, then a normal closure (1000), which clients read
/// as the end of every stream.
pub(crate) async fn finish<S>(sink: &mut S, status: &Value)
where
    S: futures::Sink<Message> + Unpin,
{
    let mut frame = vec![STATUS];
    frame.extend(crate::answer_json::to_vec(status));
    let _ = sink.send(Message::binary(frame)).await;
    let normal = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(normal))).await;
    let _ = sink.close().await;
}

/// The `Status` of a command that has ended (or could not be waited for), as the kubelet
/// writes it on the error stream: `Success`, or `Failure` with reason `NonZeroExitCode`
/// and the exit code (128 + the signal for a command killed by one) as a cause.
pub fn exit_status(exit: std::io::Result<std::process::ExitStatus>) -> Value {
    match exit {
        Ok(exit) if exit.success() => json!({"metadata": {}, "status": "Success"}),
        Ok(exit) => {
            let code = exit
                .code()
                .or_else(|| std::os::unix::process::ExitStatusExt::signal(&exit).map(|s| 128 + s))
                .unwrap_or(1);
            failure(code)
        }
        Err(e) => json!({"metadata": {}, "status": "Failure",
                         "message": format!("error executing command in container: {e}"),
                         "reason": "InternalError"}),
    }
}

/// The status of a command that exited with `code`, as the kubelet writes it.
fn failure(code: i32) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: exit status {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// Sends what `stream` yields as frames of `channel` until it ends.
async fn pump(
    mut stream: impl AsyncRead + Unpin,
    channel: u8,
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
) {
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut frame = Vec::with_capacity(n + 1);
                frame.push(channel);
                frame.extend_from_slice(&buffer[..n]);
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::{
        CONNECTION, HeaderValue, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
    };

    fn upgrade(protocols: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
        headers.insert(
            SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        headers.insert(
            SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_str(protocols).unwrap_or(HeaderValue::from_static("")),
        );
        headers
    }

    #[test]
    fn the_handshake_prefers_v5_and_answers_with_the_rfc_6455_accept_key() {
        let (protocol, key) =
            handshake(&upgrade("v4.channel.k8s.io, v5.channel.k8s.io")).unwrap_or_default();
        assert_eq!(protocol, "v5.channel.k8s.io");
        assert_eq!(key, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        let (protocol, _) = handshake(&upgrade("v4.channel.k8s.io")).unwrap_or_default();
        assert_eq!(protocol, "v4.channel.k8s.io");
    }

    #[test]
    fn a_request_that_offers_no_served_protocol_or_no_upgrade_is_refused() {
        assert!(handshake(&upgrade("channel.k8s.io")).is_err());
        assert!(handshake(&HeaderMap::new()).is_err());
    }

    #[test]
    fn a_non_zero_exit_names_its_code_as_kubectl_reads_it() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(
            exit_status(Ok(std::process::ExitStatus::from_raw(0)))["status"],
            "Success"
        );
        let status = exit_status(Ok(std::process::ExitStatus::from_raw(3 << 8)));
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(status["details"]["causes"][0]["message"], "3");
    }
}
