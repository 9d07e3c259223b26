//! `pods/attach`: the standard streams of a running container, relayed over a WebSocket as
//! kube-apiserver relays them to kubectl, in the channel protocol of [`crate::exec`].
//!
//! The client upgrades `GET …/pods/NAME/attach?container=…&stdin=…&stdout=…&stderr=…` to a
//! WebSocket (`v5.channel.k8s.io` or `v4.channel.k8s.io`). What the container writes from
//! then on on its stdout goes out on channel 1 and what it writes on its stderr on channel
//! 2, each only when the client asked for that stream (the kubelet drops the other, as
//! containerd's attach does), and once the container instance ends the `Success` status
//! goes on channel 3 and the socket closes.
//! What comes on channel 0 goes to the container's stdin when it has one (`stdin: true` in
//! its spec: the kubelet keeps it); a container without one has it dropped, as containerd
//! drops it. When the client closes its stdin (v5's `[255, 0]`), the session ends with
//! `Success` at once, unless the container's spec has `stdinOnce: true`: the kubelet then
//! closes the container's stdin and relays its output on until it ends (containerd's
//! `ContainerIO.Attach`). A client that goes away ends its session, and with `stdinOnce`
//! the container's stdin.
//!
//! Kubelets register an [`AttachSource`] ([`crate::state::State::add_attach_source`]).
//! [`Attached`] is shared with the kubelet's own SPDY endpoint (in `sim-node`).
//!
//! A container whose spec has `tty: true` runs under a terminal: what it shows is its output,
//! stdin is typed into it, and window sizes on channel 4 (`{"Width":80,"Height":24}`) are
//! set on it. Whether a session has a terminal is the container's, as the kubelet decides
//! it: `tty=true` of a container without one gets its plain streams (kubectl asks for one
//! only of a container that has one). A terminal has one output: all of it is stdout.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::{SinkExt as _, Stream, StreamExt as _};
use hyper::HeaderMap;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::exec::{
    CLOSE, ExecRefusal, PROTOCOLS, RESIZE, STDERR, STDIN, STDOUT, StreamQuery, WindowSize, finish,
    kubelet_answer,
};
use super::status::ApiError;

/// What a kubelet is asked to attach to.
#[derive(Debug)]
pub struct AttachRequest<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod.
    pub pod: &'a str,
    /// The container (already checked to be one of the pod's).
    pub container: &'a str,
    /// Whether the client sends a stdin.
    pub stdin: bool,
}

/// Which of a container's outputs a piece of what it wrote comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Standard output (all of a terminal's output).
    Stdout,
    /// Standard error.
    Stderr,
}

/// What a container writes from the time it is attached to, each piece tagged with its
/// output, in the order written; it ends when the container instance ends.
pub type AttachOutput = Pin<Box<dyn Stream<Item = (Output, Bytes)> + Send>>;

/// A container attached to: its output from now on, and its stdin when asked for and kept.
pub struct Attached {
    /// What the container writes from now on, ending when the container instance ends.
    pub output: AttachOutput,
    /// Where the client's stdin goes: `None` when not asked for or when the container has
    /// none. Dropping it ends this session's stdin (with `stdin_once`, the container's).
    pub stdin: Option<mpsc::Sender<Bytes>>,
    /// The container's `stdinOnce`: the end of the client's stdin closes the container's,
    /// and the session goes on until the container ends.
    pub stdin_once: bool,
    /// Sets the window size of the container's terminal: `None` when it has none.
    pub resize: Option<Resize>,
}

/// Sets the window size of a container's terminal: columns, rows.
pub type Resize = Box<dyn Fn(u16, u16) + Send + Sync>;

/// A kubelet's way to attach to a container: `None` when the pod is not its, else the
/// container attached to or why not.
pub type AttachSource =
    Arc<dyn Fn(&AttachRequest<'_>) -> Option<Result<Attached, ExecRefusal>> + Send + Sync>;

/// An attach accepted: the answer to give (101 with these headers), then the relay to run
/// on the upgraded connection ([`relay`]).
pub struct Accepted {
    /// The subprotocol chosen.
    pub protocol: &'static str,
    /// `Sec-WebSocket-Accept`.
    pub accept_key: String,
    /// Whether the client asked for the container's stdout, and for its stderr.
    outputs: (bool, bool),
    attached: Attached,
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

/// Checks an attach request of `stored`, the pod as stored, and attaches through `attach`
/// (whichever kubelet's [`AttachSource`] runs the pod).
///
/// # Errors
/// As kube-apiserver refuses: a request that is not a WebSocket upgrade offering one of
/// [`PROTOCOLS`], no stream, an unknown pod or container, a pod no kubelet runs, or what
/// the kubelet said.
pub fn start(
    stored: Option<Value>,
    namespace: &str,
    name: &str,
    raw_query: Option<&str>,
    headers: &HeaderMap,
    attach: impl FnOnce(&AttachRequest<'_>) -> Option<Result<Attached, ExecRefusal>>,
) -> Result<Accepted, ApiError> {
    let StreamQuery {
        container,
        stdin,
        stdout,
        stderr,
        ..
    } = StreamQuery::parse(raw_query)?;
    let (protocol, accept_key) =
        super::upgrade::websocket(headers, PROTOCOLS).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "upgrade request required: attach is served over a WebSocket with one of \
                 the subprotocols {}",
                PROTOCOLS.join(", ")
            ))
        })?;
    let pod = super::upgrade::scheduled_pod(stored, name)?;
    let container = super::podlog::container_of(&pod, name, &container)?;
    let request = AttachRequest {
        namespace,
        pod: name,
        container: &container,
        stdin,
    };
    let attached = kubelet_answer(attach(&request), name)?;
    Ok(Accepted {
        protocol,
        accept_key,
        outputs: (stdout, stderr),
        attached,
    })
}

/// Relays the container's output over the upgraded connection, and the client's stdin to
/// the container, until the container instance ends (then `Success`), the client closes
/// its stdin (then `Success`, unless `stdinOnce`), or the client goes away.
pub async fn relay<S>(socket: S, accepted: Accepted)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let v5 = accepted.protocol == PROTOCOLS[0];
    let Attached {
        mut output,
        mut stdin,
        stdin_once,
        resize,
    } = accepted.attached;
    let had_stdin = stdin.is_some();
    let ws = WebSocketStream::from_raw_socket(socket, Role::Server, None).await;
    let (mut sink, mut incoming) = ws.split();
    loop {
        tokio::select! {
            chunk = output.next() => match chunk {
                Some((from, chunk)) => {
                    let channel = match from {
                        Output::Stdout if accepted.outputs.0 => STDOUT,
                        Output::Stderr if accepted.outputs.1 => STDERR,
                        _ => continue,
                    };
                    let mut frame = Vec::with_capacity(chunk.len() + 1);
                    frame.push(channel);
                    frame.extend_from_slice(&chunk);
                    if sink.send(Message::binary(frame)).await.is_err() {
                        return;
                    }
                }
                // The container instance ended.
                None => break,
            },
            message = incoming.next() => match message {
                Some(Ok(Message::Binary(data))) => match data.first() {
                    Some(&STDIN) => {
                        if let Some(pipe) = &stdin
                            && pipe.send(Bytes::copy_from_slice(&data[1..])).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    Some(&CLOSE) if v5 && data.get(1) == Some(&STDIN) => {
                        stdin = None;
                        if had_stdin && !stdin_once {
                            break;
                        }
                    }
                    Some(&RESIZE) => {
                        if let (Some(resize), Ok(size)) =
                            (&resize, serde_json::from_slice::<WindowSize>(&data[1..]))
                        {
                            resize(size.width, size.height);
                        }
                    }
                    _ => {}
                },
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
        }
    }
    drop(stdin);
    let status = super::exec::exit_status(Ok(std::process::ExitStatus::default()));
    finish(&mut sink, &status).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Option<Value> {
        Some(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
        }))
    }

    fn quiet() -> Attached {
        Attached {
            output: Box::pin(futures::stream::empty()),
            stdin: None,
            stdin_once: false,
            resize: None,
        }
    }

    /// The frames a client receives from an attach of a container that writes `written`,
    /// the client having asked for stdout and stderr as `outputs`: (channel, text).
    async fn frames(
        outputs: (bool, bool),
        written: Vec<(Output, &'static str)>,
    ) -> Vec<(u8, String)> {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let accepted = Accepted {
            protocol: PROTOCOLS[0],
            accept_key: String::new(),
            outputs,
            attached: Attached {
                output: Box::pin(futures::stream::iter(
                    written
                        .into_iter()
                        .map(|(from, text)| (from, Bytes::from_static(text.as_bytes()))),
                )),
                ..quiet()
            },
        };
        let served = tokio::spawn(relay(server_io, accepted));
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let mut got = Vec::new();
        while let Some(Ok(message)) = client.next().await {
            if let Message::Binary(data) = message
                && let Some((&channel, text)) = data.split_first()
            {
                got.push((channel, String::from_utf8_lossy(text).into_owned()));
            }
        }
        assert!(served.await.is_ok());
        got
    }

    #[tokio::test]
    async fn an_attach_sends_stdout_on_channel_1_and_stderr_on_channel_2_dropping_an_output_not_asked_for()
     {
        let written = || {
            vec![
                (Output::Stdout, "out\n"),
                (Output::Stderr, "err\n"),
                (Output::Stdout, "more\n"),
            ]
        };
        let both = frames((true, true), written()).await;
        assert_eq!(
            both[..3],
            [
                (STDOUT, "out\n".to_string()),
                (STDERR, "err\n".to_string()),
                (STDOUT, "more\n".to_string())
            ]
        );
        assert_eq!(both.len(), 4, "then the status: {both:?}");
        assert!(both[3].1.contains("Success"), "{both:?}");
        let stderr_only = frames((false, true), written()).await;
        assert_eq!(stderr_only[0], (STDERR, "err\n".to_string()));
        assert_eq!(stderr_only.len(), 2, "{stderr_only:?}");
    }

    #[test]
    fn an_attach_without_a_stream_or_without_a_websocket_is_refused() {
        let headers = HeaderMap::new();
        let refused = |query: &str| {
            start(pod(), "default", "p", Some(query), &headers, |_| {
                Some(Ok(quiet()))
            })
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
        };
        assert!(refused("container=main").contains("at least 1 of stdin, stdout, stderr"));
        assert!(refused("stdout=true&tty=true").contains("upgrade request required"));
        assert!(refused("stdout=true").contains("upgrade request required"));
    }
}
