//! SPDY/3.1, the server side: what kubectl's `port-forward` speaks, over a raw upgraded
//! connection or tunnelled in a WebSocket.
//!
//! The frames ([`Frame`], [`parse`], [`Frame::encode`]) and their header blocks, compressed
//! with one zlib stream per direction primed with the SPDY/3 dictionary ([`HeaderDecoder`],
//! [`HeaderEncoder`]), and a session ([`serve`]) that hands each stream the client opens to
//! its consumer ([`Incoming`]), who answers it ([`StreamWriter::reply`]) or resets it; and
//! a [`Client`] of such a session.
//!
//! What a Go client (moby/spdystream) needs, no more: the client opens every stream (odd
//! IDs), the server echoes its pings, ignores SETTINGS, WINDOW_UPDATE and HEADERS, and
//! does no flow control (spdystream does none either). A GOAWAY or the end of the
//! connection ends the session: the events of every stream still open then end, which
//! their consumers read as a reset. A frame's whole payload is buffered before it is
//! handled (SPDY caps it at 2^24 − 1 bytes).

use std::collections::HashMap;

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

/// The dictionary both header zlib streams are primed with (SPDY/3 §2.6.10.1).
pub const DICTIONARY: &[u8] = b"\
\0\0\0\x07options\0\0\0\x04head\0\0\0\x04post\0\0\0\x03put\0\0\0\x06delete\0\0\0\x05trace\0\
\0\0\x06accept\0\0\0\x0eaccept-charset\0\0\0\x0faccept-encoding\0\0\0\x0faccept-language\0\0\
\0\x0daccept-ranges\0\0\0\x03age\0\0\0\x05allow\0\0\0\x0dauthorization\0\0\0\x0dcache-contro\
l\0\0\0\x0aconnection\0\0\0\x0ccontent-base\0\0\0\x10content-encoding\0\0\0\x10content-langu\
age\0\0\0\x0econtent-length\0\0\0\x10content-location\0\0\0\x0bcontent-md5\0\0\0\x0dcontent-\
range\0\0\0\x0ccontent-type\0\0\0\x04date\0\0\0\x04etag\0\0\0\x06expect\0\0\0\x07expires\0\0\
\0\x04from\0\0\0\x04host\0\0\0\x08if-match\0\0\0\x11if-modified-since\0\0\0\x0dif-none-match\
\0\0\0\x08if-range\0\0\0\x13if-unmodified-since\0\0\0\x0dlast-modified\0\0\0\x08location\0\0\
\0\x0cmax-forwards\0\0\0\x06pragma\0\0\0\x12proxy-authenticate\0\0\0\x13proxy-authorization\
\0\0\0\x05range\0\0\0\x07referer\0\0\0\x0bretry-after\0\0\0\x06server\0\0\0\x02te\0\0\0\x07t\
railer\0\0\0\x11transfer-encoding\0\0\0\x07upgrade\0\0\0\x0auser-agent\0\0\0\x04vary\0\0\0\
\x03via\0\0\0\x07warning\0\0\0\x10www-authenticate\0\0\0\x06method\0\0\0\x03get\0\0\0\x06sta\
tus\0\0\0\x06200 OK\0\0\0\x07version\0\0\0\x08HTTP/1.1\0\0\0\x03url\0\0\0\x06public\0\0\0\
\x0aset-cookie\0\0\0\x0akeep-alive\0\0\0\x06origin100101201202205206300302303304305306307402\
405406407408409410411412413414415416417502504505203 Non-Authoritative Information204 No Cont\
ent301 Moved Permanently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Interna\
l Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept\
\x20Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,i\
mage/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicpr\
ivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// The FIN flag of DATA, SYN_STREAM and SYN_REPLY: the sender's half is closed.
pub const FLAG_FIN: u8 = 0x01;
/// RST_STREAM status: the stream was not handled (what spdystream sends on `Reset`).
pub const CANCEL: u32 = 5;
/// RST_STREAM status: the stream broke the protocol (a stream ID reused or going back).
pub const PROTOCOL_ERROR: u32 = 1;
/// The most a DATA frame written here carries.
const MAX_DATA: usize = 32 * 1024;
/// Header blocks larger than this decompressed are refused (Go refuses 1 MiB fields).
const MAX_HEADER_BLOCK: usize = 4 << 20;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// What goes wrong reading SPDY.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    /// A frame other than version 3.
    #[error("unsupported spdy version {0}")]
    Version(u16),
    /// A control frame shorter than its type's fixed fields.
    #[error("spdy control frame of type {kind} is too short ({len} bytes)")]
    Short {
        /// The frame type.
        kind: u16,
        /// Its payload length.
        len: usize,
    },
    /// A header block that does not decompress.
    #[error("decompressing a header block")]
    Inflate(#[source] flate2::DecompressError),
    /// A header block that does not decompress to the end of its frame.
    #[error("compressed header block size was incorrect")]
    CompressedSize,
    /// Compressing a header block failed.
    #[error("compressing a header block")]
    Deflate(#[source] flate2::CompressError),
    /// A decompressed header block that is not `count (name value)*`.
    #[error("malformed header block: {0}")]
    HeaderBlock(&'static str),
    /// The connection failed.
    #[error("spdy connection")]
    Io(#[source] std::io::Error),
}

/// A header block: lower-case names and their values (several values joined by NUL).
pub type Headers = Vec<(String, String)>;

/// The value of header `name` (compared case-insensitively).
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A frame, as read (header blocks still compressed) or to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// DATA.
    Data {
        /// The stream.
        id: u32,
        /// [`FLAG_FIN`] or 0.
        flags: u8,
        /// The payload.
        data: Bytes,
    },
    /// SYN_STREAM: the peer opens stream `id`.
    SynStream {
        /// The stream.
        id: u32,
        /// [`FLAG_FIN`] (the peer sends nothing), 0x02 unidirectional.
        flags: u8,
        /// The compressed header block.
        block: Bytes,
    },
    /// SYN_REPLY: the answer to a SYN_STREAM.
    SynReply {
        /// The stream.
        id: u32,
        /// [`FLAG_FIN`] or 0.
        flags: u8,
        /// The compressed header block.
        block: Bytes,
    },
    /// RST_STREAM: the stream is over in both directions.
    RstStream {
        /// The stream.
        id: u32,
        /// Why ([`CANCEL`], [`PROTOCOL_ERROR`], …).
        status: u32,
    },
    /// PING, echoed by the side that did not send it.
    Ping(u32),
    /// GOAWAY: the sender opens no more streams and is closing.
    GoAway {
        /// The last stream the sender handled.
        last: u32,
        /// 0 OK.
        status: u32,
    },
    /// HEADERS: more headers for a stream (their block must still be decompressed).
    Headers {
        /// The stream.
        id: u32,
        /// The compressed header block.
        block: Bytes,
    },
    /// SETTINGS, WINDOW_UPDATE and unknown control frames: read and ignored.
    Ignored(u16),
}

/// The next frame in `buf` and how many bytes it took, or `None` when `buf` does not hold
/// a whole frame yet.
///
/// # Errors
/// A control frame of another version, or shorter than its type's fields.
pub fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, SpdyError> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let word = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let flags = buf[4];
    let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
    let Some(payload) = buf.get(8..8 + len) else {
        return Ok(None);
    };
    let used = 8 + len;
    if word & 0x8000_0000 == 0 {
        let data = Bytes::copy_from_slice(payload);
        return Ok(Some((
            Frame::Data {
                id: word,
                flags,
                data,
            },
            used,
        )));
    }
    let version = ((word >> 16) & 0x7fff) as u16;
    if version != 3 {
        return Err(SpdyError::Version(version));
    }
    let kind = (word & 0xffff) as u16;
    let short = |need: usize| {
        if len < need {
            Err(SpdyError::Short { kind, len })
        } else {
            Ok(())
        }
    };
    let u32_at = |at: usize| {
        u32::from_be_bytes([
            payload[at],
            payload[at + 1],
            payload[at + 2],
            payload[at + 3],
        ])
    };
    let frame = match kind {
        SYN_STREAM => {
            short(10)?;
            Frame::SynStream {
                id: u32_at(0) & 0x7fff_ffff,
                flags,
                block: Bytes::copy_from_slice(&payload[10..]),
            }
        }
        SYN_REPLY => {
            short(4)?;
            Frame::SynReply {
                id: u32_at(0) & 0x7fff_ffff,
                flags,
                block: Bytes::copy_from_slice(&payload[4..]),
            }
        }
        RST_STREAM => {
            short(8)?;
            Frame::RstStream {
                id: u32_at(0) & 0x7fff_ffff,
                status: u32_at(4),
            }
        }
        PING => {
            short(4)?;
            Frame::Ping(u32_at(0))
        }
        GOAWAY => {
            short(8)?;
            Frame::GoAway {
                last: u32_at(0) & 0x7fff_ffff,
                status: u32_at(4),
            }
        }
        HEADERS => {
            short(4)?;
            Frame::Headers {
                id: u32_at(0) & 0x7fff_ffff,
                block: Bytes::copy_from_slice(&payload[4..]),
            }
        }
        // Flow control and settings are not kept: spdystream keeps none either.
        SETTINGS | WINDOW_UPDATE => Frame::Ignored(kind),
        other => Frame::Ignored(other),
    };
    Ok(Some((frame, used)))
}

impl Frame {
    /// The frame's bytes on the wire (header blocks as given, already compressed).
    /// Payloads beyond 2^24 − 1 bytes are not representable: keep DATA smaller.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
            let mut out = Vec::with_capacity(8 + payload.len());
            out.extend_from_slice(&[0x80, 0x03]);
            out.extend_from_slice(&kind.to_be_bytes());
            out.push(flags);
            out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
            out.extend_from_slice(payload);
            out
        }
        let pair = |a: u32, b: u32| [a.to_be_bytes(), b.to_be_bytes()].concat();
        match self {
            Frame::Data { id, flags, data } => {
                let mut out = Vec::with_capacity(8 + data.len());
                out.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
                out.push(*flags);
                out.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
                out.extend_from_slice(data);
                out
            }
            Frame::SynStream { id, flags, block } => {
                let mut payload = pair(*id, 0);
                payload.extend_from_slice(&[0, 0]);
                payload.extend_from_slice(block);
                control(SYN_STREAM, *flags, &payload)
            }
            Frame::SynReply { id, flags, block } => {
                let mut payload = id.to_be_bytes().to_vec();
                payload.extend_from_slice(block);
                control(SYN_REPLY, *flags, &payload)
            }
            Frame::RstStream { id, status } => control(RST_STREAM, 0, &pair(*id, *status)),
            Frame::Ping(id) => control(PING, 0, &id.to_be_bytes()),
            Frame::GoAway { last, status } => control(GOAWAY, 0, &pair(*last, *status)),
            Frame::Headers { id, block } => {
                let mut payload = id.to_be_bytes().to_vec();
                payload.extend_from_slice(block);
                control(HEADERS, 0, &payload)
            }
            Frame::Ignored(kind) => control(*kind, 0, &[]),
        }
    }
}

/// A header block uncompressed: `u32 count`, then each name and value as `u32 length`
/// and bytes.
#[must_use]
pub fn encode_header_block(headers: &Headers) -> Vec<u8> {
    let mut out = (headers.len() as u32).to_be_bytes().to_vec();
    for (name, value) in headers {
        for field in [name.to_ascii_lowercase().as_bytes(), value.as_bytes()] {
            out.extend_from_slice(&(field.len() as u32).to_be_bytes());
            out.extend_from_slice(field);
        }
    }
    out
}

/// The headers of an uncompressed header block.
///
/// # Errors
/// A block that ends early, has bytes left over, or a name or value that is not UTF-8.
pub fn decode_header_block(block: &[u8]) -> Result<Headers, SpdyError> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], SpdyError> {
        if rest.len() < n {
            return Err(SpdyError::HeaderBlock("it ends early"));
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Ok(head)
    }
    fn length(rest: &mut &[u8]) -> Result<usize, SpdyError> {
        take(rest, 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
    fn text(rest: &mut &[u8], what: &'static str) -> Result<String, SpdyError> {
        let n = length(rest)?;
        String::from_utf8(take(rest, n)?.to_vec()).map_err(|_| SpdyError::HeaderBlock(what))
    }
    let mut rest = block;
    let count = length(&mut rest)?;
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = text(&mut rest, "a name is not utf-8")?;
        let value = text(&mut rest, "a value is not utf-8")?;
        headers.push((name.to_ascii_lowercase(), value));
    }
    if !rest.is_empty() {
        return Err(SpdyError::HeaderBlock(
            "bytes are left after the last header",
        ));
    }
    Ok(headers)
}

/// The reading side's zlib stream: every header block the peer sends, in order.
pub struct HeaderDecoder {
    inflate: Decompress,
}

impl Default for HeaderDecoder {
    fn default() -> Self {
        Self {
            inflate: Decompress::new(true),
        }
    }
}

impl HeaderDecoder {
    /// The headers of the next compressed block, which must decompress exactly to its end.
    ///
    /// # Errors
    /// A block that does not inflate, ends mid-way, or is malformed once inflated.
    pub fn decode(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let mut out = Vec::with_capacity(compressed.len() * 4 + 64);
        let mut input = compressed;
        loop {
            let before = self.inflate.total_in();
            let result = self
                .inflate
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = usize::try_from(self.inflate.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            match result {
                Ok(Status::StreamEnd) => break,
                Ok(_) if input.is_empty() && out.len() < out.capacity() => break,
                Ok(Status::BufError) if out.len() < out.capacity() => {
                    return Err(SpdyError::CompressedSize);
                }
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(DICTIONARY)
                        .map_err(SpdyError::Inflate)?;
                }
                Err(e) => return Err(SpdyError::Inflate(e)),
            }
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(SpdyError::HeaderBlock("it is too large"));
                }
                out.reserve(out.len().max(256));
            }
        }
        if !input.is_empty() {
            return Err(SpdyError::CompressedSize);
        }
        decode_header_block(&out)
    }
}

/// The writing side's zlib stream: every header block sent, in order, each ending with a
/// sync flush so the peer can read it whole.
pub struct HeaderEncoder {
    deflate: Compress,
}

impl HeaderEncoder {
    /// A stream primed with [`DICTIONARY`], as Go's writer is.
    ///
    /// # Errors
    /// When zlib refuses the dictionary.
    pub fn new() -> Result<Self, SpdyError> {
        let mut deflate = Compress::new(Compression::best(), true);
        deflate
            .set_dictionary(DICTIONARY)
            .map_err(SpdyError::Deflate)?;
        Ok(Self { deflate })
    }

    /// `headers` compressed as the next block.
    ///
    /// # Errors
    /// When zlib fails.
    pub fn encode(&mut self, headers: &Headers) -> Result<Vec<u8>, SpdyError> {
        let block = encode_header_block(headers);
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut input = block.as_slice();
        loop {
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(SpdyError::Deflate)?;
            let used = usize::try_from(self.deflate.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            // The flush is complete once zlib stops short of the room it was given.
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(out.capacity().max(64));
        }
    }
}

/// What the peer sent on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Bytes.
    Data(Bytes),
    /// The peer's half is closed: nothing more comes.
    Fin,
    /// The stream is over both ways (RST_STREAM, or the session ended).
    Reset,
}

/// A stream the client opened: its headers, what it sends, and the way to answer.
pub struct Incoming {
    /// The stream ID.
    pub id: u32,
    /// The SYN_STREAM's headers.
    pub headers: Headers,
    /// What the client sends; it ends after [`Event::Fin`] or [`Event::Reset`], or when
    /// the session does.
    pub events: mpsc::Receiver<Event>,
    /// Answers it and writes to it.
    pub writer: StreamWriter,
}

enum Out {
    Reply(u32),
    Data(u32, Bytes, bool),
    Reset(u32, u32),
    Ping(u32),
}

/// Writes to one stream. Writes go out in order; after the session has ended they are
/// dropped.
#[derive(Clone)]
pub struct StreamWriter {
    id: u32,
    out: mpsc::UnboundedSender<Out>,
}

impl StreamWriter {
    /// Accepts the stream: SYN_REPLY with no headers. Send it before anything else.
    pub fn reply(&self) {
        let _ = self.out.send(Out::Reply(self.id));
    }

    /// Sends `data` (in frames of at most 32 KiB).
    pub fn write(&self, data: &[u8]) {
        for chunk in data.chunks(MAX_DATA) {
            let _ = self
                .out
                .send(Out::Data(self.id, Bytes::copy_from_slice(chunk), false));
        }
    }

    /// Closes this side: an empty DATA frame with FIN.
    pub fn finish(&self) {
        let _ = self.out.send(Out::Data(self.id, Bytes::new(), true));
    }

    /// Ends the stream both ways: RST_STREAM with `status`.
    pub fn reset(&self, status: u32) {
        let _ = self.out.send(Out::Reset(self.id, status));
    }
}

/// Serves a SPDY/3.1 session on `io` as the server: every stream the client opens is sent
/// to `streams` (unanswered: its consumer replies or resets). Returns when the client
/// says GOAWAY, the connection ends or breaks, or `streams` is dropped; then the events of
/// the streams still open end (read it as a reset), and once their writers are gone a
/// GOAWAY goes out.
///
/// # Errors
/// A frame that breaks the protocol, or the connection failing.
pub async fn serve<S>(io: S, streams: mpsc::Sender<Incoming>) -> Result<(), SpdyError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, writer) = tokio::io::split(io);
    let encoder = HeaderEncoder::new()?;
    let (out, queue) = mpsc::unbounded_channel();
    let written = tokio::spawn(write_frames(writer, queue, encoder));
    let read = read_frames(&mut reader, &out, &streams).await;
    drop(out);
    drop(streams);
    // The writer ends once every stream writer is dropped; its failure only matters when
    // reading went well.
    let write = written.await.unwrap_or(Ok(()));
    read.and(write)
}

async fn read_frames<R>(
    reader: &mut R,
    out: &mpsc::UnboundedSender<Out>,
    streams: &mpsc::Sender<Incoming>,
) -> Result<(), SpdyError>
where
    R: AsyncRead + Unpin,
{
    let mut decoder = HeaderDecoder::default();
    let mut open: HashMap<u32, mpsc::Sender<Event>> = HashMap::new();
    let mut last_id = 0u32;
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        while let Some((frame, used)) = parse(&buf)? {
            buf.drain(..used);
            match frame {
                Frame::Data { id, flags, data } => {
                    let fin = flags & FLAG_FIN != 0;
                    if let Some(tx) = open.get(&id) {
                        if !data.is_empty() {
                            let _ = tx.send(Event::Data(data)).await;
                        }
                        if fin {
                            let _ = tx.send(Event::Fin).await;
                        }
                    }
                    if fin {
                        open.remove(&id);
                    }
                }
                Frame::SynStream { id, flags, block } => {
                    let headers = decoder.decode(&block)?;
                    if id <= last_id || id % 2 == 0 {
                        let _ = out.send(Out::Reset(id, PROTOCOL_ERROR));
                        continue;
                    }
                    last_id = id;
                    let (tx, events) = mpsc::channel(64);
                    if flags & FLAG_FIN != 0 {
                        let _ = tx.send(Event::Fin).await;
                    } else {
                        open.insert(id, tx);
                    }
                    let writer = StreamWriter {
                        id,
                        out: out.clone(),
                    };
                    let incoming = Incoming {
                        id,
                        headers,
                        events,
                        writer,
                    };
                    if streams.send(incoming).await.is_err() {
                        return Ok(());
                    }
                }
                Frame::Headers { block, .. } | Frame::SynReply { block, .. } => {
                    // Read only to keep the zlib stream in step.
                    decoder.decode(&block)?;
                }
                Frame::RstStream { id, .. } => {
                    if let Some(tx) = open.remove(&id) {
                        let _ = tx.send(Event::Reset).await;
                    }
                }
                Frame::Ping(id) => {
                    // The client's pings (odd) are echoed; ours would be even, and none
                    // are sent.
                    if id % 2 == 1 {
                        let _ = out.send(Out::Ping(id));
                    }
                }
                Frame::GoAway { .. } => return Ok(()),
                Frame::Ignored(_) => {}
            }
        }
        let mut chunk = [0u8; 16 * 1024];
        match reader.read(&mut chunk).await {
            Ok(0) => return Ok(()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(SpdyError::Io(e)),
        }
    }
}

async fn write_frames<W>(
    mut writer: W,
    mut queue: mpsc::UnboundedReceiver<Out>,
    mut encoder: HeaderEncoder,
) -> Result<(), SpdyError>
where
    W: AsyncWrite + Unpin,
{
    let mut last_reply = 0u32;
    let mut broken = None;
    while let Some(item) = queue.recv().await {
        if broken.is_some() {
            // Keep draining so writers never block; nothing more can go out.
            continue;
        }
        let frame = match item {
            Out::Reply(id) => {
                last_reply = last_reply.max(id);
                Frame::SynReply {
                    id,
                    flags: 0,
                    block: encoder.encode(&Vec::new())?.into(),
                }
            }
            Out::Data(id, data, fin) => Frame::Data {
                id,
                flags: if fin { FLAG_FIN } else { 0 },
                data,
            },
            Out::Reset(id, status) => Frame::RstStream { id, status },
            Out::Ping(id) => Frame::Ping(id),
        };
        let written = writer.write_all(&frame.encode()).await;
        let written = match written {
            Ok(()) if queue.is_empty() => writer.flush().await,
            other => other,
        };
        if let Err(e) = written {
            broken = Some(e);
        }
    }
    if let Some(e) = broken {
        return Err(SpdyError::Io(e));
    }
    let goaway = Frame::GoAway {
        last: last_reply,
        status: 0,
    };
    let _ = writer.write_all(&goaway.encode()).await;
    let _ = writer.shutdown().await;
    Ok(())
}

/// The client side of a session, as client-go drives one (opening odd-numbered streams),
/// for whoever needs to talk to a server of this module's kind: tests of the servers that
/// build on it, tools.
pub struct Client<S> {
    read: tokio::io::ReadHalf<S>,
    write: tokio::io::WriteHalf<S>,
    encoder: HeaderEncoder,
    decoder: HeaderDecoder,
    buffer: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite> Client<S> {
    /// A client on the connection `io`.
    ///
    /// # Errors
    /// When zlib refuses the header dictionary.
    pub fn new(io: S) -> Result<Self, SpdyError> {
        let (read, write) = tokio::io::split(io);
        Ok(Self {
            read,
            write,
            encoder: HeaderEncoder::new()?,
            decoder: HeaderDecoder::default(),
            buffer: Vec::new(),
        })
    }

    /// Writes `frame`.
    ///
    /// # Errors
    /// When the connection fails.
    pub async fn send(&mut self, frame: Frame) -> Result<(), SpdyError> {
        self.write
            .write_all(&frame.encode())
            .await
            .map_err(SpdyError::Io)
    }

    /// Opens stream `id` (odd, above the last) with `headers`.
    ///
    /// # Errors
    /// When the headers cannot be compressed or the connection fails.
    pub async fn open(&mut self, id: u32, headers: &[(&str, &str)]) -> Result<(), SpdyError> {
        let headers = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        let block = self.encoder.encode(&headers)?;
        self.send(Frame::SynStream {
            id,
            flags: 0,
            block: block.into(),
        })
        .await
    }

    /// The next frame from the server (`None` once the connection ends); the header blocks
    /// of replies are read, to keep the zlib stream in step, and must be empty, as the
    /// server of this module sends them.
    ///
    /// # Errors
    /// A frame or header block that breaks the protocol, or the connection failing.
    pub async fn next(&mut self) -> Result<Option<Frame>, SpdyError> {
        loop {
            if let Some((frame, used)) = parse(&self.buffer)? {
                self.buffer.drain(..used);
                if let Frame::SynReply { block, .. } | Frame::Headers { block, .. } = &frame
                    && !self.decoder.decode(block)?.is_empty()
                {
                    return Err(SpdyError::HeaderBlock("a reply carries headers"));
                }
                return Ok(Some(frame));
            }
            let mut chunk = [0u8; 4096];
            match self.read.read(&mut chunk).await {
                Ok(0) => return Ok(None),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(SpdyError::Io(e)),
            }
        }
    }

    /// What the server sends on each of `ids` until it has FINed them all, and the other
    /// frames it sent meanwhile (replies, resets, …). Not bounded in time: callers bound
    /// it.
    ///
    /// # Errors
    /// As [`Client::next`]; the connection ending first is an error too.
    pub async fn read_to_fins(
        &mut self,
        ids: &[u32],
    ) -> Result<(Vec<Vec<u8>>, Vec<Frame>), SpdyError> {
        let mut data = vec![Vec::new(); ids.len()];
        let mut open = ids.len();
        let mut others = Vec::new();
        while open > 0 {
            let Some(frame) = self.next().await? else {
                return Err(SpdyError::Io(std::io::Error::from(
                    std::io::ErrorKind::UnexpectedEof,
                )));
            };
            match frame {
                Frame::Data { id, flags, data: d } if ids.contains(&id) => {
                    let at = ids.iter().position(|i| *i == id).unwrap_or_default();
                    data[at].extend_from_slice(&d);
                    if flags & FLAG_FIN != 0 {
                        open -= 1;
                    }
                }
                other => others.push(other),
            }
        }
        Ok((data, others))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
            .collect()
    }

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_dictionary_is_spdy_3s_by_its_length_and_adler_32() {
        assert_eq!(DICTIONARY.len(), 1423);
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in DICTIONARY {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    #[test]
    fn header_blocks_written_by_a_zlib_with_the_dictionary_decode_block_after_block() {
        // Two blocks of one zlib stream (level 9, the SPDY/3 dictionary, a sync flush after
        // each), as a port-forward client sends them for its error and data streams.
        let mut decoder = HeaderDecoder::default();
        let first = hex(
            "78f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45e01c6061606100a4398b20d198094ade8c0600000000ffff",
        );
        let second = hex("c2aa19540e2512d60b000000ffff");
        assert_eq!(
            decoder.decode(&first).ok(),
            Some(headers(&[
                ("streamtype", "error"),
                ("port", "8080"),
                ("requestid", "0")
            ]))
        );
        assert_eq!(
            decoder.decode(&second).ok(),
            Some(headers(&[
                ("streamtype", "data"),
                ("port", "8080"),
                ("requestid", "0")
            ]))
        );
    }

    #[test]
    fn an_empty_header_block_compressed_with_the_dictionary_decodes_to_no_headers() {
        let mut decoder = HeaderDecoder::default();
        let block = hex("78f9e3c6a7c202a6230600000000ffff");
        assert_eq!(decoder.decode(&block).ok(), Some(Vec::new()));
    }

    #[test]
    fn a_compressed_block_cut_short_of_its_headers_is_refused() {
        let mut decoder = HeaderDecoder::default();
        let block = hex(
            "78f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45e01c6061606100a4398b20d198094ade8c0600000000ffff",
        );
        assert!(decoder.decode(&block[..20]).is_err());
    }

    #[test]
    fn encoded_header_blocks_decode_in_order_with_a_fresh_reader() {
        let mut encoder = HeaderEncoder::new().unwrap_or_else(|e| panic!("{e}"));
        let mut decoder = HeaderDecoder::default();
        let blocks = [
            Vec::new(),
            headers(&[("streamtype", "error"), ("port", "80")]),
            headers(&[("x", &"v".repeat(100_000))]),
            Vec::new(),
        ];
        for block in &blocks {
            let compressed = encoder.encode(block).unwrap_or_default();
            assert_eq!(
                compressed.get(compressed.len() - 4..),
                Some(&[0, 0, 0xff, 0xff][..])
            );
            assert_eq!(decoder.decode(&compressed).ok().as_ref(), Some(block));
        }
    }

    #[test]
    fn an_uncompressed_header_block_lowercases_names_and_refuses_truncation() {
        let block = encode_header_block(&headers(&[("StreamType", "data")]));
        assert_eq!(
            block,
            [
                &[0, 0, 0, 1, 0, 0, 0, 10][..],
                b"streamtype",
                &[0, 0, 0, 4],
                b"data"
            ]
            .concat()
        );
        assert_eq!(
            decode_header_block(&block).ok(),
            Some(headers(&[("streamtype", "data")]))
        );
        assert!(decode_header_block(&block[..block.len() - 1]).is_err());
        assert!(decode_header_block(&[0, 0, 0, 1]).is_err());
        assert!(decode_header_block(&[&block[..], &[0]].concat()).is_err());
    }

    #[test]
    fn frames_encode_to_their_wire_bytes_and_parse_back() {
        let frames = [
            Frame::Data {
                id: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hi"),
            },
            Frame::SynStream {
                id: 1,
                flags: 0,
                block: Bytes::from_static(b"zz"),
            },
            Frame::SynReply {
                id: 1,
                flags: 0,
                block: Bytes::from_static(b"z"),
            },
            Frame::RstStream {
                id: 5,
                status: CANCEL,
            },
            Frame::Ping(7),
            Frame::GoAway { last: 9, status: 0 },
            Frame::Headers {
                id: 1,
                block: Bytes::new(),
            },
        ];
        for frame in &frames {
            let bytes = frame.encode();
            assert_eq!(
                parse(&bytes).ok().flatten(),
                Some((frame.clone(), bytes.len())),
                "{frame:?}"
            );
            // Any shorter prefix is not a frame yet.
            assert_eq!(parse(&bytes[..bytes.len() - 1]).ok(), Some(None));
        }
        assert_eq!(
            Frame::Data {
                id: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hi")
            }
            .encode(),
            [0, 0, 0, 3, 1, 0, 0, 2, b'h', b'i']
        );
        assert_eq!(
            Frame::Ping(1).encode(),
            [0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]
        );
        assert_eq!(
            Frame::RstStream {
                id: 1,
                status: CANCEL
            }
            .encode(),
            [0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 5]
        );
    }

    #[test]
    fn settings_and_window_updates_are_read_and_bad_control_frames_refused() {
        // SETTINGS with one entry.
        let settings = [
            0x80, 3, 0, 4, 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 7, 0, 1, 0, 0,
        ];
        assert_eq!(
            parse(&settings).ok().flatten(),
            Some((Frame::Ignored(SETTINGS), settings.len()))
        );
        let window = [0x80, 3, 0, 9, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 9];
        assert_eq!(
            parse(&window).ok().flatten(),
            Some((Frame::Ignored(WINDOW_UPDATE), window.len()))
        );
        assert!(parse(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]).is_err());
        assert!(parse(&[0x80, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1]).is_err());
    }

    #[tokio::test]
    async fn a_session_replies_routes_data_echoes_pings_and_says_goaway() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (tx, mut rx) = mpsc::channel(4);
        let session = tokio::spawn(serve(server, tx));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let mut encoder = HeaderEncoder::new().unwrap_or_else(|e| panic!("{e}"));
        let block = encoder
            .encode(&headers(&[("streamtype", "data")]))
            .unwrap_or_default();
        let mut sent = Frame::SynStream {
            id: 1,
            flags: 0,
            block: block.into(),
        }
        .encode();
        sent.extend(Frame::Ping(1).encode());
        sent.extend(
            Frame::Data {
                id: 1,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"ping"),
            }
            .encode(),
        );
        // Split mid-frame, as a WebSocket tunnel may deliver it.
        client_write.write_all(&sent[..5]).await.ok();
        client_write.write_all(&sent[5..]).await.ok();
        let Some(mut stream) = rx.recv().await else {
            panic!("no stream")
        };
        assert_eq!(stream.id, 1);
        assert_eq!(header(&stream.headers, "StreamType"), Some("data"));
        assert_eq!(
            stream.events.recv().await,
            Some(Event::Data(Bytes::from_static(b"ping")))
        );
        assert_eq!(stream.events.recv().await, Some(Event::Fin));
        stream.writer.reply();
        stream.writer.write(b"pong");
        stream.writer.finish();
        drop(stream);
        client_write
            .write_all(&Frame::GoAway { last: 0, status: 0 }.encode())
            .await
            .ok();
        assert!(session.await.is_ok_and(|r| r.is_ok()));
        let mut received = Vec::new();
        client_read.read_to_end(&mut received).await.ok();
        let mut decoder = HeaderDecoder::default();
        let mut frames = Vec::new();
        let mut rest = received.as_slice();
        while let Ok(Some((frame, used))) = parse(rest) {
            rest = &rest[used..];
            frames.push(frame);
        }
        assert!(rest.is_empty());
        assert_eq!(frames.first(), Some(&Frame::Ping(1)));
        match frames.get(1) {
            Some(Frame::SynReply { id: 1, block, .. }) => {
                assert_eq!(decoder.decode(block).ok(), Some(Vec::new()));
            }
            other => panic!("expected a SYN_REPLY, got {other:?}"),
        }
        assert_eq!(
            frames[2..],
            [
                Frame::Data {
                    id: 1,
                    flags: 0,
                    data: Bytes::from_static(b"pong")
                },
                Frame::Data {
                    id: 1,
                    flags: FLAG_FIN,
                    data: Bytes::new()
                },
                Frame::GoAway { last: 1, status: 0 },
            ]
        );
    }
}
