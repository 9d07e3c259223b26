//! A minimal HTTP/1.1 GET, bounded in size and never a hang: over plain TCP, as the
//! simulated API server reaches pods for `pods/proxy`, the recorder scrapes a plain
//! `/metrics` directly and the `local` provider asks etcd for `/health` ([`get`],
//! [`get_text`], bounded in time); or over a byte stream the caller opened and bounds in time
//! (TLS, a port-forward), with a bearer token and the connection kept for more GETs, as the
//! recorder scrapes HTTPS `/metrics` ([`get_over`]). TLS itself is the caller's.
//!
//! [`get`] dials with [`pod_network::connect`]: a simulated pod's address is reached inside
//! the pod's own network namespace.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The largest response read.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// Errors of a plain HTTP GET.
#[derive(Debug, thiserror::Error)]
pub enum PlainHttpError {
    /// The address could not be reached.
    #[error("cannot connect to {target}")]
    Connect {
        /// The address asked (`ip:port`).
        target: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Sending the request or reading the response failed.
    #[error("cannot read the answer of {target}")]
    Io {
        /// The address or stream asked.
        target: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No complete response within the timeout (a frozen or overloaded replica).
    #[error("no answer from {target} within {timeout:?}")]
    Timeout {
        /// The address or stream asked.
        target: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The response was not `200 OK`.
    #[error("{target} answered with status {status}")]
    Status {
        /// The address or stream asked.
        target: String,
        /// The status code.
        status: u16,
    },
    /// The response was not HTTP as expected.
    #[error("malformed response from {target}: {reason}")]
    Malformed {
        /// The address or stream asked.
        target: String,
        /// What was wrong.
        reason: &'static str,
    },
}

impl PlainHttpError {
    /// Whether nothing listened at the address: the connection was refused, so no process
    /// serves there (as opposed to one that is slow, frozen or cut off, which times out).
    #[must_use]
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Connect { source, .. }
            if source.kind() == std::io::ErrorKind::ConnectionRefused)
    }
}

/// One GET sent by [`get_over`].
#[derive(Clone, Copy)]
pub struct Get<'a> {
    /// The path (and query), e.g. `/metrics`.
    pub path: &'a str,
    /// The `Host` header, e.g. `10.0.0.7:8443`.
    pub host: &'a str,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub bearer_token: Option<&'a str>,
    /// Ask for the connection to be kept for more GETs (`Connection: keep-alive`) rather
    /// than closed after the answer.
    pub keep_alive: bool,
}

impl fmt::Debug for Get<'_> {
    /// The token is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Get")
            .field("path", &self.path)
            .field("host", &self.host)
            .field("bearer_token", &self.bearer_token.map(|_| "…"))
            .field("keep_alive", &self.keep_alive)
            .finish()
    }
}

/// The answer to a [`Get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body, decoded from chunks if it came in chunks.
    pub body: Vec<u8>,
    /// Whether the connection may carry another GET: kept alive was asked for, the answer
    /// was framed by a length or chunks (not by the end of the stream), the server did not
    /// say `Connection: close` (nor spoke HTTP/1.0), and nothing followed the answer.
    pub reusable: bool,
}

/// GETs `http://<addr><path>` and returns the status and body, whatever the status.
///
/// # Errors
/// When the connection fails, the whole exchange takes longer than `timeout`, or the
/// response is not HTTP.
pub async fn get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), PlainHttpError> {
    match tokio::time::timeout(timeout, exchange(addr, path)).await {
        Ok(result) => result,
        Err(_) => Err(PlainHttpError::Timeout {
            target: addr.to_string(),
            timeout,
        }),
    }
}

/// GETs `http://<addr><path>` and returns the body of a 200 answer as text.
///
/// # Errors
/// What [`get`] reports, another status, or a body that is not UTF-8.
pub async fn get_text(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<String, PlainHttpError> {
    let (status, body) = get(addr, path, timeout).await?;
    if status != 200 {
        return Err(PlainHttpError::Status {
            target: addr.to_string(),
            status,
        });
    }
    String::from_utf8(body).map_err(|_| PlainHttpError::Malformed {
        target: addr.to_string(),
        reason: "body is not UTF-8",
    })
}

async fn exchange(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>), PlainHttpError> {
    let target = addr.to_string();
    let mut stream =
        pod_network::connect(addr)
            .await
            .map_err(|source| PlainHttpError::Connect {
                target: target.clone(),
                source,
            })?;
    let get = Get {
        path,
        host: &target,
        bearer_token: None,
        keep_alive: false,
    };
    let response = get_over(&mut stream, &target, &get).await?;
    Ok((response.status, response.body))
}

/// Sends one GET over `stream` (plain TCP, TLS, a port-forward: whatever the caller opened)
/// and reads its answer, whatever the status; `target` names the stream in errors. With
/// [`Get::keep_alive`] the stream may carry the next GET when [`Response::reusable`] says
/// so. It sets no time limit: the caller bounds the call.
///
/// # Errors
/// When sending or reading fails, the stream ends before a whole answer, or the answer is
/// not HTTP or larger than 4 MiB.
pub async fn get_over<S>(
    stream: &mut S,
    target: &str,
    get: &Get<'_>,
) -> Result<Response, PlainHttpError>
where
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let io = |source| PlainHttpError::Io {
        target: target.to_string(),
        source,
    };
    let malformed = |reason| PlainHttpError::Malformed {
        target: target.to_string(),
        reason,
    };
    let mut request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/plain\r\nUser-Agent: opconform\r\n",
        get.path, get.host
    );
    if let Some(token) = get.bearer_token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str(if get.keep_alive {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    stream.flush().await.map_err(io)?;
    let mut buf = Vec::with_capacity(8 * 1024);
    let mut chunk = [0u8; 8 * 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(io)?;
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            return Err(malformed("response too large"));
        }
        if let Some(parsed) = parse_response(&buf, n == 0).map_err(malformed)? {
            return Ok(Response {
                status: parsed.status,
                body: parsed.body,
                reusable: get.keep_alive && parsed.keeps_alive && parsed.len == buf.len(),
            });
        }
    }
}

/// A complete response as read.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    status: u16,
    body: Vec<u8>,
    /// Framed by a length or chunks, HTTP/1.1, and no `Connection: close`.
    keeps_alive: bool,
    /// How many bytes of the buffer it took.
    len: usize,
}

/// Parses an HTTP/1.1 response: `Ok(None)` while incomplete, the status and decoded body
/// (content-length, chunked, or up to the end of the stream) once complete.
fn parse_response(buf: &[u8], eof: bool) -> Result<Option<Parsed>, &'static str> {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return if eof {
            Err("truncated headers")
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err("not an HTTP/1 status line");
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or("no status code")?;
    let mut length = None;
    let mut chunked = false;
    let mut close = version == "HTTP/1.0";
    for line in lines {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if key.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| "bad content-length")?);
        } else if key.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if key.eq_ignore_ascii_case("connection") {
            close = value.to_ascii_lowercase().contains("close");
        }
    }
    let body_start = head_end + 4;
    let body = &buf[body_start..];
    let complete = |body: Vec<u8>, len: usize, framed: bool| {
        Ok(Some(Parsed {
            status,
            body,
            keeps_alive: framed && !close,
            len,
        }))
    };
    if chunked {
        return match decode_chunked(body)? {
            Some((decoded, used)) => complete(decoded, body_start + used, true),
            None if eof => Err("truncated chunked body"),
            None => Ok(None),
        };
    }
    match length {
        Some(n) if body.len() >= n => complete(body[..n].to_vec(), body_start + n, true),
        Some(_) if eof => Err("truncated body"),
        Some(_) => Ok(None),
        None if eof => complete(body.to_vec(), buf.len(), false),
        None => Ok(None),
    }
}

/// Decodes a complete chunked body and says how many bytes it took (`Ok(None)` while
/// incomplete); trailers are skipped.
fn decode_chunked(body: &[u8]) -> Result<Option<(Vec<u8>, usize)>, &'static str> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_end) = find(&body[at..], b"\r\n") else {
            return Ok(None);
        };
        let size_line =
            std::str::from_utf8(&body[at..at + line_end]).map_err(|_| "bad chunk size")?;
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| "bad chunk size")?;
        at += line_end + 2;
        if size == 0 {
            // Trailer lines, if any, up to an empty line.
            loop {
                let Some(line_end) = find(&body[at..], b"\r\n") else {
                    return Ok(None);
                };
                at += line_end + 2;
                if line_end == 0 {
                    return Ok(Some((out, at)));
                }
            }
        }
        if body.len() < at + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&body[at..at + size]);
        at += size + 2;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &[u8]) -> Option<(u16, Vec<u8>)> {
        Some((status, body.to_vec()))
    }

    fn parsed(buf: &[u8], eof: bool) -> Option<(u16, Vec<u8>)> {
        parse_response(buf, eof)
            .unwrap()
            .map(|parsed| (parsed.status, parsed.body))
    }

    #[test]
    fn a_response_is_complete_by_length_by_chunks_or_at_the_end_of_stream() {
        let by_length = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parsed(by_length, false), answer(200, b"hello"));
        assert_eq!(parsed(&by_length[..40], false), None);
        assert!(parse_response(&by_length[..40], true).is_err());

        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(parsed(chunked, false), answer(200, b"hello"));
        assert_eq!(parsed(&chunked[..60], false), None);
        // The last chunk without the empty line that ends the trailers is not the end yet.
        assert_eq!(parsed(&chunked[..chunked.len() - 2], false), None);

        let to_end = b"HTTP/1.0 503 Unavailable\r\n\r\nbusy";
        assert_eq!(parsed(to_end, false), None);
        assert_eq!(parsed(to_end, true), answer(503, b"busy"));
        assert!(parse_response(b"SSH-2.0\r\n\r\n", false).is_err());
    }

    #[test]
    fn an_answer_framed_by_length_or_chunks_keeps_the_connection_unless_closed() {
        let keeps = |buf: &[u8], eof: bool| {
            let parsed = parse_response(buf, eof)
                .unwrap()
                .expect("a complete answer");
            parsed.keeps_alive && parsed.len == buf.len()
        };
        assert!(keeps(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            false
        ));
        assert!(keeps(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
            false
        ));
        assert!(!keeps(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            false
        ));
        assert!(!keeps(
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
            false
        ));
        assert!(!keeps(b"HTTP/1.1 200 OK\r\n\r\nok", true));
        // Bytes after the answer: the stream is out of step.
        assert!(!keeps(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP",
            false
        ));
    }

    #[tokio::test]
    async fn a_get_over_a_stream_sends_the_bearer_token_and_can_send_another() {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let serve = tokio::spawn(async move {
            let mut requests = Vec::new();
            for body in ["one", "two"] {
                let mut request = Vec::new();
                while find(&request, b"\r\n\r\n").is_none() {
                    let mut byte = [0u8; 1];
                    server.read_exact(&mut byte).await.unwrap();
                    request.push(byte[0]);
                }
                requests.push(String::from_utf8(request).unwrap());
                let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{body}");
                server.write_all(answer.as_bytes()).await.unwrap();
            }
            requests
        });
        let get = Get {
            path: "/metrics",
            host: "10.0.0.7:8443",
            bearer_token: Some("s3cret"),
            keep_alive: true,
        };
        for body in [b"one", b"two"] {
            let response = get_over(&mut client, "the stream", &get).await.unwrap();
            assert_eq!(
                response,
                Response {
                    status: 200,
                    body: body.to_vec(),
                    reusable: true,
                }
            );
        }
        let requests = serve.await.unwrap();
        assert!(
            requests[1].starts_with("GET /metrics HTTP/1.1\r\nHost: 10.0.0.7:8443\r\n"),
            "{requests:?}"
        );
        assert!(requests[1].contains("\r\nAuthorization: Bearer s3cret\r\n"));
        assert!(requests[1].contains("\r\nConnection: keep-alive\r\n"));
        assert!(!format!("{get:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn a_closed_port_is_refused_and_a_silent_one_times_out() {
        // A port bound and then closed: nothing listens there any more.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let refused = get(addr, "/", Duration::from_secs(5)).await.unwrap_err();
        assert!(refused.is_refused(), "{refused:?}");

        // A listener that never answers: the connection is accepted, the answer never comes.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let late = get(
            silent.local_addr().unwrap(),
            "/",
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
        assert!(!late.is_refused(), "{late:?}");
    }
}
