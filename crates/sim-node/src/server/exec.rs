//! `/exec/{namespace}/{pod}/{container}` and `/attach/{namespace}/{pod}/{container}` over
//! SPDY/3.1, as kube-apiserver reaches the kubelet for `pods/exec` and `pods/attach` (it
//! translates kubectl's WebSocket into this): the kubelet side of `remotecommand`.
//!
//! The request names the streams in its query (`input`, `output`, `error`, `tty`, each
//! `1` to ask for it, and one `command` per argument) and offers stream protocols in
//! `X-Stream-Protocol-Version`; `v5.channel.k8s.io` and `v4.channel.k8s.io` are served
//! (over SPDY, v5 is v4). On the upgraded connection the client opens one stream per
//! standard stream it asked for and an `error` stream, each named by its `streamType`
//! header; once all are open (within 30 s) the command's stdout and stderr go out on
//! theirs, each FINed when the command closes it, what comes on `stdin` goes to the
//! command (its FIN closes the command's stdin), and when the command has exited the
//! `error` stream carries its `metav1.Status` as JSON (`Success`, or `NonZeroExitCode`
//! with the exit code as a cause, which kube-apiserver hands to kubectl as its exit code)
//! and is FINed. A client that goes away (a reset of the error stream, or the end of the
//! session) kills the command.
//!
//! With `tty=1` the command runs under a pseudo-terminal: there is no stderr stream (the
//! kubelet drops `error=1` with a terminal), the stdout stream carries what the terminal
//! shows, stdin is typed into it, and the client's `resize` stream carries window sizes
//! (JSON `{"Width":…,"Height":…}` one after another), each set on the terminal.
//!
//! Attach ([`serve_attach`]) relays what a container writes from then on, read from its log
//! as `kubectl logs -f` reads it, until the container instance ends; then `Success`: its
//! stdout on the stdout stream and its stderr on the stderr stream, each only when asked
//! for (the other is dropped, as containerd's attach drops it). What
//! comes on its stdin stream goes to the stdin the kubelet keeps of a container whose spec
//! has `stdin: true` (see [`sim_apiserver::attach`] for when the client's FIN ends the
//! session and when, with `stdinOnce`, it closes the container's stdin). A container whose
//! spec has `tty: true` is attached to its terminal: what it shows on stdout, stdin typed
//! into it, and with `tty=1` the client's `resize` stream sets its window size.
//!
//! # Caveats
//! - Stream protocols v1 to v3 (text errors, no exit code) are not served: a client that
//!   offers only those gets the 403 of a failed negotiation.
//! - The session ends when the client closes it (kube-apiserver does once it has the
//!   status); the kubelet closes it itself.

use std::time::Duration;

use futures::StreamExt as _;
use std::pin::Pin;

use sim_apiserver::attach::{Attached, Output};
use sim_apiserver::exec::{Started, WindowSize};
use sim_apiserver::spdy::{self, Event, Incoming, StreamWriter};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

/// The stream protocols served, the client's order deciding.
pub const PROTOCOLS: &[&str] = &["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// How long the client may take to open its streams (the kubelet's
/// `streamCreationTimeout`).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What an exec asks for: its command and which standard streams it attaches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOptions {
    /// argv.
    pub command: Vec<String>,
    /// A stdin stream comes.
    pub stdin: bool,
    /// A stdout stream comes.
    pub stdout: bool,
    /// A stderr stream comes.
    pub stderr: bool,
    /// The command runs under a terminal, and a resize stream comes.
    pub tty: bool,
}

impl ExecOptions {
    /// The options of an exec query (`command=…&input=1&output=1&error=1`).
    ///
    /// # Errors
    /// No command, no stream, or a terminal asked for, each named.
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let options = Self::streams_of(query)?;
        if options.command.is_empty() {
            return Err("you must specify at least one command for the container".into());
        }
        Ok(options)
    }

    /// The options of an attach query (`input=1&output=1&error=1`, `tty=1`).
    ///
    /// # Errors
    /// No stream asked for.
    pub fn parse_attach(query: Option<&str>) -> Result<Self, String> {
        Self::streams_of(query)
    }

    fn streams_of(query: Option<&str>) -> Result<Self, String> {
        let mut options = Self::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let on = value == "1";
            match key.as_ref() {
                "command" => options.command.push(value.into_owned()),
                "input" => options.stdin = on,
                "output" => options.stdout = on,
                "error" => options.stderr = on,
                "tty" => options.tty = on,
                _ => {}
            }
        }
        // As the kubelet's remotecommand: a terminal has one output stream.
        if options.tty {
            options.stderr = false;
        }
        if !(options.stdin || options.stdout || options.stderr) {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(options)
    }

    /// How many streams the client opens: one per standard stream, the error stream, and
    /// with a terminal the resize stream.
    fn streams(&self) -> usize {
        1 + usize::from(self.stdin)
            + usize::from(self.stdout)
            + usize::from(self.stderr)
            + usize::from(self.tty)
    }
}

/// The streams of one exec, by type.
#[derive(Default)]
struct Streams {
    error: Option<Incoming>,
    stdin: Option<Incoming>,
    stdout: Option<Incoming>,
    stderr: Option<Incoming>,
    resize: Option<Incoming>,
}

/// Accepts the streams the client opens until the `expected` ones are there: each is
/// answered, and kept by its `streamType`; others are answered and left alone. `None`
/// when the session ends or the time runs out first.
async fn gather(streams: &mut mpsc::Receiver<Incoming>, expected: usize) -> Option<Streams> {
    let mut got = Streams::default();
    let mut count = 0;
    let deadline = tokio::time::sleep(STREAM_CREATION_TIMEOUT);
    tokio::pin!(deadline);
    while count < expected {
        let stream = tokio::select! {
            stream = streams.recv() => stream?,
            () = &mut deadline => {
                tracing::debug!("exec: timed out waiting for client to create streams");
                return None;
            }
        };
        stream.writer.reply();
        let slot = match spdy::header(&stream.headers, "streamtype") {
            Some("error") => &mut got.error,
            Some("stdin") => &mut got.stdin,
            Some("stdout") => &mut got.stdout,
            Some("stderr") => &mut got.stderr,
            Some("resize") => &mut got.resize,
            other => {
                tracing::debug!("exec: unexpected stream type {other:?}");
                continue;
            }
        };
        *slot = Some(stream);
        count += 1;
    }
    Some(got)
}

/// Serves the exec session on the upgraded connection `io`: relays the command's standard
/// streams (or its terminal, and window sizes from the resize stream) over the streams the
/// client opens and sends its status once it has exited; kills it when the client goes
/// away or does not open its streams.
pub async fn serve<S>(io: S, started: Started, options: ExecOptions)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let Started {
        mut child,
        terminal,
    } = started;
    let (tx, mut incoming) = mpsc::channel(8);
    let session = tokio::spawn(spdy::serve(io, tx));
    let Some(streams) = gather(&mut incoming, options.streams()).await else {
        let _ = child.kill().await;
        session.abort();
        return;
    };
    let Streams {
        error,
        stdin,
        stdout,
        stderr,
        resize,
    } = streams;
    let Some(mut error) = error else {
        let _ = child.kill().await;
        return;
    };
    let (mut stdout, mut resizing) = (stdout, None);
    let mut input: Option<Pin<Box<dyn AsyncWrite + Send>>> = child
        .stdin
        .take()
        .map(|pipe| Box::pin(pipe) as Pin<Box<dyn AsyncWrite + Send>>);
    let mut shown = None;
    if let Some(terminal) = terminal {
        shown = Some(tokio::spawn(pump(
            terminal.output,
            stdout.take().map(|s| s.writer),
        )));
        input = Some(terminal.input);
        resizing = resize.map(|stream| tokio::spawn(resizes(stream, terminal.resize)));
    }
    let pumps = [
        shown,
        child
            .stdout
            .take()
            .map(|out| tokio::spawn(pump(out, stdout.map(|s| s.writer)))),
        child
            .stderr
            .take()
            .map(|err| tokio::spawn(pump(err, stderr.map(|s| s.writer)))),
    ];
    let feeding = match (input, stdin) {
        (Some(pipe), Some(stream)) => Some(tokio::spawn(feed(stream, pipe))),
        _ => None,
    };
    let output = async {
        for pump in pumps.into_iter().flatten() {
            let _ = pump.await;
        }
    };
    tokio::select! {
        () = output => {}
        () = gone(&mut error.events) => {
            for task in [feeding, resizing].into_iter().flatten() {
                task.abort();
            }
            let _ = child.kill().await;
            return;
        }
    }
    let status = sim_apiserver::exec::exit_status(child.wait().await);
    for task in [feeding, resizing].into_iter().flatten() {
        task.abort();
    }
    error
        .writer
        .write(&serde_json::to_vec(&status).unwrap_or_default());
    error.writer.finish();
    // The session runs on until the client closes it; `incoming` goes with this task.
    drop(incoming);
}

/// Serves an attach session on the upgraded connection `io`: what the container writes
/// from now on (its log, followed) goes out on the stdout and stderr streams, each output
/// on its own when asked for, what comes on the stdin stream goes to the container's kept stdin (or
/// is dropped when it has none), and once the container instance ends, or the client's
/// stdin ends without `stdinOnce`, the error stream carries `Success`.
pub async fn serve_attach<S>(io: S, attached: Attached, options: ExecOptions)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let Attached {
        mut output,
        stdin: to_container,
        stdin_once,
        resize: to_terminal,
    } = attached;
    let (tx, mut incoming) = mpsc::channel(8);
    let session = tokio::spawn(spdy::serve(io, tx));
    let Some(Streams {
        error: Some(mut error),
        stdin,
        stdout,
        stderr,
        resize,
    }) = gather(&mut incoming, options.streams()).await
    else {
        session.abort();
        return;
    };
    let resizing = match (resize, to_terminal) {
        (Some(stream), Some(to_terminal)) => Some(tokio::spawn(resizes(stream, to_terminal))),
        _ => None,
    };
    let stdout = stdout.map(|s| s.writer);
    let stderr = stderr.map(|s| s.writer);
    let relay = async {
        while let Some((from, chunk)) = output.next().await {
            let to = match from {
                Output::Stdout => &stdout,
                Output::Stderr => &stderr,
            };
            if let Some(to) = to {
                to.write(&chunk);
            }
        }
    };
    // Returns when the client's stdin ends and that ends the session (not `stdinOnce`).
    let stdin_ends = async {
        let Some(mut stream) = stdin else {
            return std::future::pending::<()>().await;
        };
        let mut to_container = to_container;
        let attached = to_container.is_some();
        while let Some(Event::Data(bytes)) = stream.events.recv().await {
            if let Some(pipe) = &to_container
                && pipe.send(bytes).await.is_err()
            {
                to_container = None;
            }
        }
        drop(to_container);
        if !attached || stdin_once {
            // Keep draining: the session must not stall on the stream.
            while stream.events.recv().await.is_some() {}
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = relay => {}
        () = stdin_ends => {}
        () = gone(&mut error.events) => return,
    }
    if let Some(resizing) = resizing {
        resizing.abort();
    }
    for to in [&stdout, &stderr].into_iter().flatten() {
        to.finish();
    }
    let success = sim_apiserver::exec::exit_status(Ok(std::process::ExitStatus::default()));
    error
        .writer
        .write(&serde_json::to_vec(&success).unwrap_or_default());
    error.writer.finish();
    drop(incoming);
}

/// Returns once the client is gone: the stream is reset, or its events end before its
/// FIN (the session ended). After a FIN it never returns.
async fn gone(events: &mut mpsc::Receiver<Event>) {
    loop {
        match events.recv().await {
            Some(Event::Data(_)) => {}
            Some(Event::Fin) => std::future::pending::<()>().await,
            Some(Event::Reset) | None => return,
        }
    }
}

/// Sends what `from` yields on `to` (or drops it, when the client asked for no such
/// stream) until it ends, then FINs `to`.
async fn pump(mut from: impl AsyncRead + Unpin, to: Option<StreamWriter>) {
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(to) = &to {
                    to.write(&buffer[..n]);
                }
            }
        }
    }
    if let Some(to) = to {
        to.finish();
    }
}

/// Writes what the client sends on its stdin stream to the command's stdin (or terminal),
/// which is closed at the stream's FIN or reset.
async fn feed(mut stream: Incoming, mut pipe: impl AsyncWrite + Unpin) {
    while let Some(Event::Data(bytes)) = stream.events.recv().await {
        if pipe.write_all(&bytes).await.is_err() || pipe.flush().await.is_err() {
            return;
        }
    }
}

/// Sets the window sizes the client sends on its resize stream (JSON `TerminalSize`s one
/// after another) with `resize`, until the stream ends.
async fn resizes(mut stream: Incoming, resize: Box<dyn Fn(u16, u16) + Send + Sync>) {
    let mut pending = Vec::new();
    while let Some(Event::Data(bytes)) = stream.events.recv().await {
        pending.extend_from_slice(&bytes);
        let mut sizes = serde_json::Deserializer::from_slice(&pending).into_iter::<WindowSize>();
        let mut used = 0;
        while let Some(Ok(size)) = sizes.next() {
            used = sizes.byte_offset();
            resize(size.width, size.height);
        }
        pending.drain(..used);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sim_apiserver::spdy::Frame;

    #[test]
    fn the_query_names_the_streams_with_ones_drops_stderr_with_a_terminal_and_refuses_no_stream() {
        let options = ExecOptions::parse(Some(
            "command=%2Fbin%2Fsh&command=-c&command=true&input=1&output=1",
        ))
        .unwrap_or_default();
        assert_eq!(options.command, ["/bin/sh", "-c", "true"]);
        assert!(options.stdin && options.stdout && !options.stderr);
        assert_eq!(options.streams(), 3);
        let tty = ExecOptions::parse(Some("command=x&input=1&output=1&error=1&tty=1"))
            .unwrap_or_default();
        assert!(tty.tty && tty.stdout && !tty.stderr, "{tty:?}");
        assert_eq!(tty.streams(), 4);
        let attach_tty =
            ExecOptions::parse_attach(Some("input=1&output=1&error=1&tty=1")).unwrap_or_default();
        assert_eq!(attach_tty.streams(), 4, "{attach_tty:?}");
        assert!(ExecOptions::parse(Some("command=x&output=true")).is_err());
        assert!(ExecOptions::parse(Some("output=1")).is_err());
    }

    type Client = spdy::Client<tokio::io::DuplexStream>;

    /// What the server sends on `ids` until it FINs them all (within 30 s), and the
    /// streams it replied to meanwhile.
    async fn fins(client: &mut Client, ids: &[u32]) -> (Vec<Vec<u8>>, Vec<u32>) {
        let (data, others) =
            tokio::time::timeout(Duration::from_secs(30), client.read_to_fins(ids))
                .await
                .unwrap_or_else(|_| panic!("streams {ids:?} were not finished within 30 s"))
                .unwrap_or_else(|e| panic!("streams {ids:?}: {e}"));
        let replies = others
            .iter()
            .filter_map(|f| match f {
                Frame::SynReply { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        (data, replies)
    }

    fn shell(script: &str, stdin: bool) -> tokio::process::Child {
        tokio::process::Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(if stdin {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("/bin/sh: {e}"))
    }

    #[tokio::test]
    async fn the_streams_pair_by_type_carry_the_commands_io_and_the_error_stream_its_exit_code() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let options = ExecOptions {
            command: vec!["sh".into()],
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let child = shell("read line; echo \"got $line\"; echo oops >&2; exit 3", true);
        let started = Started {
            child,
            terminal: None,
        };
        let served = tokio::spawn(serve(server_io, started, options));
        let mut client = Client::new(client_io).unwrap_or_else(|e| panic!("{e}"));
        // client-go opens the error stream first; the order does not matter here.
        client.open(1, &[("streamtype", "error")]).await.ok();
        client.open(3, &[("streamtype", "stdin")]).await.ok();
        client.open(5, &[("streamtype", "stdout")]).await.ok();
        client.open(7, &[("streamtype", "stderr")]).await.ok();
        client
            .send(Frame::Data {
                id: 3,
                flags: spdy::FLAG_FIN,
                data: Bytes::from_static(b"hello\n"),
            })
            .await
            .ok();
        let (data, mut replies) = fins(&mut client, &[1, 5, 7]).await;
        replies.sort_unstable();
        assert_eq!(replies, [1, 3, 5, 7]);
        assert_eq!(String::from_utf8_lossy(&data[1]), "got hello\n");
        assert_eq!(String::from_utf8_lossy(&data[2]), "oops\n");
        let status: serde_json::Value =
            serde_json::from_slice(&data[0]).unwrap_or_else(|e| panic!("{e}: {data:?}"));
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(status["details"]["causes"][0]["message"], "3");
        client.send(Frame::GoAway { last: 0, status: 0 }).await.ok();
        assert!(served.await.is_ok());
    }

    #[tokio::test]
    async fn an_attach_relays_stdout_and_stderr_each_on_its_stream_and_ends_with_success() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let options = ExecOptions::parse_attach(Some("output=1&error=1")).unwrap_or_default();
        let output = Attached {
            output: Box::pin(futures::stream::iter([
                (Output::Stdout, Bytes::from_static(b"tick\n")),
                (Output::Stderr, Bytes::from_static(b"oops\n")),
                (Output::Stdout, Bytes::from_static(b"bye\n")),
            ])),
            stdin: None,
            stdin_once: false,
            resize: None,
        };
        let served = tokio::spawn(serve_attach(server_io, output, options));
        let mut client = Client::new(client_io).unwrap_or_else(|e| panic!("{e}"));
        client.open(1, &[("streamtype", "error")]).await.ok();
        client.open(3, &[("streamtype", "stdout")]).await.ok();
        client.open(5, &[("streamtype", "stderr")]).await.ok();
        let (data, _) = fins(&mut client, &[1, 3, 5]).await;
        assert_eq!(String::from_utf8_lossy(&data[1]), "tick\nbye\n");
        assert_eq!(String::from_utf8_lossy(&data[2]), "oops\n");
        let status: serde_json::Value =
            serde_json::from_slice(&data[0]).unwrap_or_else(|e| panic!("{e}: {data:?}"));
        assert_eq!(status["status"], "Success");
        client.send(Frame::GoAway { last: 0, status: 0 }).await.ok();
        assert!(served.await.is_ok());
    }

    /// An attach with stdin of a container that keeps one: what the client sends reaches
    /// the container, then the client FINs its stdin, which the container sees closed;
    /// then the container writes `after` and ends. Returns what reached the container and
    /// what the stdout stream carried, the session having ended with `Success`.
    async fn attach_and_close_stdin(stdin_once: bool) -> (Vec<u8>, String) {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let options = ExecOptions::parse_attach(Some("input=1&output=1")).unwrap_or_default();
        let (to_container, mut container) = mpsc::channel::<Bytes>(16);
        let (writes, written) = mpsc::channel::<Bytes>(16);
        let attached = Attached {
            output: Box::pin(futures::stream::unfold(written, |mut rx| async move {
                rx.recv().await.map(|chunk| ((Output::Stdout, chunk), rx))
            })),
            stdin: Some(to_container),
            stdin_once,
            resize: None,
        };
        let served = tokio::spawn(serve_attach(server_io, attached, options));
        let mut client = Client::new(client_io).unwrap_or_else(|e| panic!("{e}"));
        client.open(1, &[("streamtype", "error")]).await.ok();
        client.open(3, &[("streamtype", "stdin")]).await.ok();
        client.open(5, &[("streamtype", "stdout")]).await.ok();
        client
            .send(Frame::Data {
                id: 3,
                flags: spdy::FLAG_FIN,
                data: Bytes::from_static(b"hello\n"),
            })
            .await
            .ok();
        let mut got = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), container.recv())
            .await
            .unwrap_or_else(|_| panic!("the session's stdin was not closed within 30 s"))
        {
            got.extend_from_slice(&chunk);
        }
        writes.send(Bytes::from_static(b"after\n")).await.ok();
        drop(writes);
        let (data, _) = fins(&mut client, &[1, 5]).await;
        let status: serde_json::Value =
            serde_json::from_slice(&data[0]).unwrap_or_else(|e| panic!("{e}: {data:?}"));
        assert_eq!(status["status"], "Success");
        client.send(Frame::GoAway { last: 0, status: 0 }).await.ok();
        assert!(served.await.is_ok());
        (got, String::from_utf8_lossy(&data[1]).into_owned())
    }

    #[tokio::test]
    async fn an_attach_writes_stdin_to_the_container_and_ends_when_the_client_closes_it() {
        let (got, output) = attach_and_close_stdin(false).await;
        assert_eq!(got, b"hello\n");
        assert_eq!(
            output, "",
            "the session went on after the client closed its stdin"
        );
    }

    #[tokio::test]
    async fn with_stdin_once_the_clients_fin_closes_the_containers_stdin_and_output_goes_on() {
        let (got, output) = attach_and_close_stdin(true).await;
        assert_eq!(got, b"hello\n");
        assert_eq!(output, "after\n");
    }

    #[tokio::test]
    async fn with_a_terminal_stdin_is_typed_into_it_and_the_stdout_stream_shows_it() {
        let pty = crate::terminal::open_pty().unwrap_or_else(|e| panic!("{e}"));
        let slave = |fd: &std::os::fd::OwnedFd| {
            fd.try_clone()
                .map(std::process::Stdio::from)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let child = tokio::process::Command::new("setsid")
            .args(["--ctty", "--", "/bin/sh", "-c"])
            .arg("read line; echo \"got $line\"; tty")
            .stdin(slave(&pty.slave))
            .stdout(slave(&pty.slave))
            .stderr(std::process::Stdio::from(pty.slave))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("setsid: {e}"));
        let terminal = crate::runtime::terminal_of(pty.master).unwrap_or_else(|e| panic!("{e}"));
        let started = Started {
            child,
            terminal: Some(terminal),
        };
        let options =
            ExecOptions::parse(Some("command=sh&input=1&output=1&tty=1")).unwrap_or_default();
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(serve(server_io, started, options));
        let mut client = Client::new(client_io).unwrap_or_else(|e| panic!("{e}"));
        client.open(1, &[("streamtype", "error")]).await.ok();
        client.open(3, &[("streamtype", "stdin")]).await.ok();
        client.open(5, &[("streamtype", "stdout")]).await.ok();
        client.open(7, &[("streamtype", "resize")]).await.ok();
        // A size on the resize stream (set on the terminal; see the terminal's own test).
        client
            .send(Frame::Data {
                id: 7,
                flags: 0,
                data: Bytes::from_static(b"{\"Width\":123,\"Height\":45}"),
            })
            .await
            .ok();
        client
            .send(Frame::Data {
                id: 3,
                flags: spdy::FLAG_FIN,
                data: Bytes::from_static(b"hello\n"),
            })
            .await
            .ok();
        let (data, _) = fins(&mut client, &[1, 5]).await;
        let shown = String::from_utf8_lossy(&data[1]);
        assert!(shown.contains("got hello\r\n"), "{shown:?}");
        assert!(shown.contains("/dev/pts/"), "{shown:?}");
        let status: serde_json::Value =
            serde_json::from_slice(&data[0]).unwrap_or_else(|e| panic!("{e}: {data:?}"));
        assert_eq!(status["status"], "Success");
        client.send(Frame::GoAway { last: 0, status: 0 }).await.ok();
        assert!(served.await.is_ok());
    }

    #[tokio::test]
    async fn a_client_that_resets_its_error_stream_has_the_command_killed() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let options = ExecOptions {
            command: vec!["sh".into()],
            stdout: true,
            ..ExecOptions::default()
        };
        let child = shell("echo started; exec sleep 600", false);
        let pid = child.id().unwrap_or_default();
        let started = Started {
            child,
            terminal: None,
        };
        let served = tokio::spawn(serve(server_io, started, options));
        let mut client = Client::new(client_io).unwrap_or_else(|e| panic!("{e}"));
        client.open(1, &[("streamtype", "error")]).await.ok();
        client.open(3, &[("streamtype", "stdout")]).await.ok();
        // Wait for the command to be running, then go away.
        loop {
            match tokio::time::timeout(Duration::from_secs(30), client.next()).await {
                Ok(Ok(Some(Frame::Data { id: 3, data, .. }))) if !data.is_empty() => break,
                Ok(Ok(Some(_))) => {}
                other => panic!("no output from the command: {other:?}"),
            }
        }
        client
            .send(Frame::RstStream {
                id: 1,
                status: spdy::CANCEL,
            })
            .await
            .ok();
        tokio::time::timeout(Duration::from_secs(30), served)
            .await
            .unwrap_or_else(|_| panic!("the exec did not end"))
            .ok();
        // Killed and reaped: no such process any more.
        let alive =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
        assert!(!alive, "the command outlived its client");
    }
}
