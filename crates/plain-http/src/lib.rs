//! A minimal HTTP/1.1 GET over plain TCP: how the simulated API server reaches pods for
//! `pods/proxy`, how the recorder scrapes `/metrics` directly and how the `local` provider
//! asks etcd for `/health`. Bounded in time and size, never a hang.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The largest response read.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// Errors of a plain HTTP GET.
#[derive(Debug, thiserror::Error)]
pub enum PlainHttpError {
    /// The address could not be reached.
    #[error("cannot connect to {addr}")]
    Connect {
        /// The address scraped.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Sending the request or reading the response failed.
    #[error("cannot read the answer of {addr}")]
    Io {
        /// The address scraped.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No complete response within the timeout (a frozen or overloaded replica).
    #[error("no answer from {addr} within {timeout:?}")]
    Timeout {
        /// The address scraped.
        addr: SocketAddr,
        /// The timeout.
        timeout: Duration,
    },
    /// The response was not `200 OK`.
    #[error("{addr} answered with status {status}")]
    Status {
        /// The address scraped.
        addr: SocketAddr,
        /// The status code.
        status: u16,
    },
    /// The response was not HTTP as expected.
    #[error("malformed response from {addr}: {reason}")]
    Malformed {
        /// The address scraped.
        addr: SocketAddr,
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
        Err(_) => Err(PlainHttpError::Timeout { addr, timeout }),
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
        return Err(PlainHttpError::Status { addr, status });
    }
    String::from_utf8(body).map_err(|_| PlainHttpError::Malformed {
        addr,
        reason: "body is not UTF-8",
    })
}

async fn exchange(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>), PlainHttpError> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|source| PlainHttpError::Connect { addr, source })?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\nUser-Agent: opconform\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|source| PlainHttpError::Io { addr, source })?;
    let mut buf = Vec::with_capacity(8 * 1024);
    let mut chunk = [0u8; 8 * 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|source| PlainHttpError::Io { addr, source })?;
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            return Err(PlainHttpError::Malformed {
                addr,
                reason: "response too large",
            });
        }
        let malformed = |reason| PlainHttpError::Malformed { addr, reason };
        if let Some(answer) = parse_response(&buf, n == 0).map_err(malformed)? {
            return Ok(answer);
        }
    }
}

/// Parses an HTTP/1.1 response: `Ok(None)` while incomplete, the status and decoded body
/// (content-length, chunked, or up to the end of the stream) once complete.
fn parse_response(buf: &[u8], eof: bool) -> Result<Option<(u16, Vec<u8>)>, &'static str> {
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
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err("not an HTTP/1 status line");
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or("no status code")?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if key.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| "bad content-length")?);
        } else if key.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = &buf[head_end + 4..];
    if chunked {
        return match decode_chunked(body)? {
            Some(decoded) => Ok(Some((status, decoded))),
            None if eof => Err("truncated chunked body"),
            None => Ok(None),
        };
    }
    match length {
        Some(n) if body.len() >= n => Ok(Some((status, body[..n].to_vec()))),
        Some(_) if eof => Err("truncated body"),
        Some(_) => Ok(None),
        None if eof => Ok(Some((status, body.to_vec()))),
        None => Ok(None),
    }
}

/// Decodes a complete chunked body (`Ok(None)` while incomplete); trailers are ignored.
fn decode_chunked(mut body: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = find(body, b"\r\n") else {
            return Ok(None);
        };
        let size_line = std::str::from_utf8(&body[..line_end]).map_err(|_| "bad chunk size")?;
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| "bad chunk size")?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if body.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_complete_by_length_by_chunks_or_at_the_end_of_stream() {
        let by_length = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(
            parse_response(by_length, false).unwrap(),
            Some((200, b"hello".to_vec()))
        );
        assert_eq!(parse_response(&by_length[..40], false).unwrap(), None);
        assert!(parse_response(&by_length[..40], true).is_err());

        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked, false).unwrap(),
            Some((200, b"hello".to_vec()))
        );
        assert_eq!(parse_response(&chunked[..60], false).unwrap(), None);

        let to_end = b"HTTP/1.0 503 Unavailable\r\n\r\nbusy";
        assert_eq!(parse_response(to_end, false).unwrap(), None);
        assert_eq!(
            parse_response(to_end, true).unwrap(),
            Some((503, b"busy".to_vec()))
        );
        assert!(parse_response(b"SSH-2.0\r\n\r\n", false).is_err());
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
