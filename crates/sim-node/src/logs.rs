//! Container logs as the kubelet keeps them: each line a container instance writes on
//! stdout or stderr, with the time it was received (the CRI log format keeps one per
//! line; `--timestamps` shows it); the last lines of the current and the previous instance
//! in memory, bounded in bytes (what `kubectl logs` reads); and the whole raw output
//! appended to a file in the pod's directory (kept after the pod is gone, for
//! diagnostics).
//!
//! A line is kept once its newline arrives, or once it reaches [`LINE_LIMIT`] bytes (the
//! piece is then kept without a newline, as a CRI runtime splits a long line into partial
//! ones); what is left without a newline is kept when the instance ends. A read
//! ([`ContainerLog::read`]) selects lines by `tailLines`, then by `sinceSeconds` or
//! `sinceTime`, prefixes the times with `timestamps`, and stops after `limitBytes`; with
//! `follow` it goes on with the lines written later, as they are written, until the
//! instance ends (as the kubelet's does when the container exits). A follower that falls
//! behind by more than the memory bound misses the lines dropped meanwhile.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt as _;
use sim_apiserver::attach::AttachOutput;
use sim_apiserver::podlog::{LogOptions, LogStream};
use tokio::sync::watch;

/// Largest log file per container on disk; later output is only kept in memory.
const FILE_LIMIT: u64 = 64 * 1024 * 1024;

/// Longest line kept whole; a longer one is kept in pieces of this size.
pub const LINE_LIMIT: usize = 16 * 1024;

/// Why a container's log cannot be read (the kubelet's messages).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The pod has no such container on this node.
    #[error("container {container:?} in pod {pod:?} is not available")]
    NotAvailable {
        /// The container.
        container: String,
        /// The pod.
        pod: String,
    },
    /// `previous` was asked for a container that has not been restarted.
    #[error("previous terminated container {container:?} in pod {pod:?} not found")]
    NoPrevious {
        /// The container.
        container: String,
        /// The pod.
        pod: String,
    },
    /// The container has not started yet.
    #[error("container {container:?} in pod {pod:?} is waiting to start: {reason}")]
    Waiting {
        /// The container.
        container: String,
        /// The pod.
        pod: String,
        /// Its waiting reason, e.g. `ContainerCreating`.
        reason: String,
    },
}

/// Which output of the container a write comes from (as attach tags it).
pub use sim_apiserver::attach::Output;

struct Line {
    seq: u64,
    time: DateTime<Utc>,
    output: Output,
    /// With its newline, unless it is a piece of a longer line or the unfinished end.
    text: Vec<u8>,
}

struct Instance {
    id: u64,
    lines: VecDeque<Line>,
    bytes: usize,
    /// What each output wrote after its last newline.
    pending: [Vec<u8>; 2],
    ended: bool,
}

impl Instance {
    fn new(id: u64) -> Self {
        Self {
            id,
            lines: VecDeque::new(),
            bytes: 0,
            pending: [Vec::new(), Vec::new()],
            ended: false,
        }
    }
}

#[derive(Default)]
struct Inner {
    current: Option<Instance>,
    previous: Option<Instance>,
    next_seq: u64,
    next_id: u64,
    file: Option<std::fs::File>,
    written: u64,
}

impl Inner {
    fn start(&mut self) -> &mut Instance {
        let id = self.next_id;
        self.next_id += 1;
        self.current.insert(Instance::new(id))
    }

    fn instance(&self, id: u64) -> Option<&Instance> {
        [self.current.as_ref(), self.previous.as_ref()]
            .into_iter()
            .flatten()
            .find(|i| i.id == id)
    }

    fn push(&mut self, limit: usize, time: DateTime<Utc>, output: Output, text: Vec<u8>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.current.is_none() {
            self.start();
        }
        let Some(instance) = self.current.as_mut() else {
            return;
        };
        instance.bytes += text.len();
        instance.lines.push_back(Line {
            seq,
            time,
            output,
            text,
        });
        while instance.bytes > limit && instance.lines.len() > 1 {
            if let Some(old) = instance.lines.pop_front() {
                instance.bytes -= old.text.len();
            }
        }
        if instance.bytes > limit
            && let Some(only) = instance.lines.front_mut()
        {
            let excess = instance.bytes - limit;
            only.text.drain(..excess);
            instance.bytes = limit;
        }
    }

    /// Ends the current instance: what is left without a newline becomes its last lines.
    fn end(&mut self, limit: usize, time: DateTime<Utc>) {
        let Some(instance) = self.current.as_mut() else {
            return;
        };
        if instance.ended {
            return;
        }
        instance.ended = true;
        let pending: Vec<(Output, Vec<u8>)> = [Output::Stdout, Output::Stderr]
            .into_iter()
            .zip(instance.pending.iter_mut().map(std::mem::take))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        for (output, text) in pending {
            self.push(limit, time, output, text);
        }
    }
}

struct Shared {
    inner: Mutex<Inner>,
    /// Bumped after every change, for followers.
    changes: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }
}

/// The log of one container across its restarts.
pub struct ContainerLog {
    limit: usize,
    path: PathBuf,
    shared: Arc<Shared>,
}

impl ContainerLog {
    /// A log keeping the last `limit` bytes of lines of each instance in memory and
    /// appending everything to `path` (created on first write).
    pub fn new(path: PathBuf, limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            path,
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner::default()),
                changes: watch::channel(0).0,
            }),
        }
    }

    /// The file everything is appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a new container instance: the current one ends and becomes the previous one.
    pub fn new_instance(&self) {
        {
            let mut inner = self.shared.lock();
            inner.end(self.limit, Utc::now());
            inner.previous = inner.current.take();
            inner.start();
        }
        self.shared.changed();
    }

    /// Ends the current instance (its container exited): followers get its last lines and
    /// their streams end.
    pub fn end_instance(&self) {
        self.shared.lock().end(self.limit, Utc::now());
        self.shared.changed();
    }

    /// Appends output of the current instance, received now.
    pub fn append(&self, output: Output, bytes: &[u8]) {
        self.append_at(output, bytes, Utc::now());
    }

    fn append_at(&self, output: Output, bytes: &[u8], time: DateTime<Utc>) {
        {
            let mut inner = self.shared.lock();
            self.write_file(&mut inner, bytes);
            let slot = match output {
                Output::Stdout => 0,
                Output::Stderr => 1,
            };
            let mut pending = match inner.current.as_mut() {
                Some(instance) => std::mem::take(&mut instance.pending[slot]),
                None => {
                    inner.start();
                    Vec::new()
                }
            };
            pending.extend_from_slice(bytes);
            let mut lines = Vec::new();
            let mut start = 0;
            while let Some(end) = next_line_end(&pending[start..]) {
                lines.push(pending[start..start + end].to_vec());
                start += end;
            }
            pending.drain(..start);
            for text in lines {
                inner.push(self.limit, time, output, text);
            }
            if let Some(instance) = inner.current.as_mut() {
                instance.pending[slot] = pending;
            }
        }
        self.shared.changed();
    }

    fn write_file(&self, inner: &mut Inner, bytes: &[u8]) {
        if inner.written >= FILE_LIMIT {
            return;
        }
        if inner.file.is_none() {
            inner.file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .ok();
        }
        if let Some(file) = inner.file.as_mut() {
            // A failing log file must not stop the container; memory keeps the tail.
            let _ = file.write_all(bytes);
        }
        inner.written += bytes.len() as u64;
    }

    /// The current instance's output kept in memory (lossy UTF-8), what it wrote after its
    /// last newline included, or the previous instance's; `None` when there is no previous
    /// instance.
    pub fn text(&self, previous: bool) -> Option<String> {
        let inner = self.shared.lock();
        let instance = if previous {
            inner.previous.as_ref()?
        } else {
            match inner.current.as_ref() {
                Some(instance) => instance,
                None => return Some(String::new()),
            }
        };
        let mut bytes = Vec::with_capacity(instance.bytes);
        for line in &instance.lines {
            bytes.extend_from_slice(&line.text);
        }
        for pending in &instance.pending {
            bytes.extend_from_slice(pending);
        }
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Whether the current instance has ended (its container exited).
    pub fn ended(&self) -> bool {
        self.shared
            .lock()
            .current
            .as_ref()
            .is_some_and(|instance| instance.ended)
    }

    /// Reads the current instance, or the previous one, as `options` ask at `now` (which
    /// `sinceSeconds` counts back from); `None` when there is no such instance.
    pub fn read(&self, options: &LogOptions, now: DateTime<Utc>) -> Option<LogStream> {
        let since = options.since(now);
        let mut limit = options
            .limit_bytes
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let changes = self.shared.changes.subscribe();
        let inner = self.shared.lock();
        let instance = if options.previous {
            inner.previous.as_ref()?
        } else {
            inner.current.as_ref()?
        };
        let skip = options
            .tail_lines
            .map(|n| {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                instance.lines.len().saturating_sub(n)
            })
            .unwrap_or(0);
        let mut head = Vec::new();
        for line in instance.lines.iter().skip(skip) {
            format_line(&mut head, line, options.timestamps, since);
        }
        cut(&mut head, &mut limit);
        let ended = instance.ended || limit == Some(0);
        let rest = (options.follow && !ended).then(|| {
            let follower = Follower {
                log: Arc::downgrade(&self.shared),
                changes,
                instance: instance.id,
                next: inner.next_seq,
                timestamps: options.timestamps,
                since,
                limit,
            };
            let stream = futures::stream::unfold(follower, |mut f| async move {
                f.next().await.map(|chunk| (chunk, f))
            });
            Box::pin(stream) as sim_apiserver::podlog::LogTail
        });
        Some(LogStream {
            head: Bytes::from(head),
            rest,
        })
    }
}

impl ContainerLog {
    /// What the current instance writes from now on, each run of lines of one output
    /// tagged with it, until the instance ends (an attach's output); `None` when there is
    /// no current instance or it has ended.
    pub fn follow_outputs(&self) -> Option<AttachOutput> {
        let changes = self.shared.changes.subscribe();
        let inner = self.shared.lock();
        let instance = inner.current.as_ref().filter(|i| !i.ended)?;
        let follower = Follower {
            log: Arc::downgrade(&self.shared),
            changes,
            instance: instance.id,
            next: inner.next_seq,
            timestamps: false,
            since: None,
            limit: None,
        };
        let stream = futures::stream::unfold(follower, |mut f| async move {
            f.next_pieces().await.map(|pieces| (pieces, f))
        })
        .flat_map(|pieces| {
            futures::stream::iter(
                pieces
                    .into_iter()
                    .map(|(output, piece)| (output, Bytes::from(piece))),
            )
        });
        Some(Box::pin(stream))
    }
}

/// The length of the first line of `bytes` up to its newline or [`LINE_LIMIT`], if one is
/// complete.
fn next_line_end(bytes: &[u8]) -> Option<usize> {
    match bytes.iter().take(LINE_LIMIT).position(|b| *b == b'\n') {
        Some(i) => Some(i + 1),
        None if bytes.len() >= LINE_LIMIT => Some(LINE_LIMIT),
        None => None,
    }
}

/// Appends `line` to `out`, with its time first when `timestamps`, unless it is older
/// than `since`.
fn format_line(out: &mut Vec<u8>, line: &Line, timestamps: bool, since: Option<DateTime<Utc>>) {
    if since.is_some_and(|since| line.time < since) {
        return;
    }
    if timestamps {
        out.extend_from_slice(
            line.time
                .to_rfc3339_opts(SecondsFormat::Nanos, true)
                .as_bytes(),
        );
        out.push(b' ');
    }
    out.extend_from_slice(&line.text);
}

/// Cuts `out` to what is left of `limit`, and counts it off.
fn cut(out: &mut Vec<u8>, limit: &mut Option<usize>) {
    if let Some(left) = limit.as_mut() {
        out.truncate(*left);
        *left -= out.len();
    }
}

/// Where a follower of one instance is.
struct Follower {
    log: Weak<Shared>,
    changes: watch::Receiver<u64>,
    instance: u64,
    next: u64,
    timestamps: bool,
    since: Option<DateTime<Utc>>,
    limit: Option<usize>,
}

impl Follower {
    /// The lines written since the last call, once there are any; `None` once the instance
    /// has ended (or the log is gone) and everything was answered, or the limit is reached.
    async fn next(&mut self) -> Option<Bytes> {
        let pieces = self.next_pieces().await?;
        let mut out = Vec::new();
        for (_, piece) in pieces {
            out.extend_from_slice(&piece);
        }
        Some(Bytes::from(out))
    }

    /// As [`Follower::next`], each run of lines of one output a piece of its own, in the
    /// order written.
    async fn next_pieces(&mut self) -> Option<Vec<(Output, Vec<u8>)>> {
        loop {
            if self.limit == Some(0) {
                return None;
            }
            {
                let shared = self.log.upgrade()?;
                let inner = shared.lock();
                let instance = inner.instance(self.instance)?;
                let mut pieces: Vec<(Output, Vec<u8>)> = Vec::new();
                let from = self.next;
                for line in instance.lines.iter().filter(|l| l.seq >= from) {
                    let mut text = Vec::new();
                    format_line(&mut text, line, self.timestamps, self.since);
                    cut(&mut text, &mut self.limit);
                    self.next = line.seq + 1;
                    match pieces.last_mut() {
                        Some((output, piece)) if *output == line.output => {
                            piece.extend_from_slice(&text);
                        }
                        _ if text.is_empty() => {}
                        _ => pieces.push((line.output, text)),
                    }
                    if self.limit == Some(0) {
                        break;
                    }
                }
                if !pieces.is_empty() {
                    return Some(pieces);
                }
                if instance.ended {
                    return None;
                }
            }
            self.changes.changed().await.ok()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: u32) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(&format!("2026-11-29T12:00:{second:02}.123456789Z"))
            .unwrap()
            .with_timezone(&Utc)
    }

    fn log(limit: usize) -> (tempfile::TempDir, ContainerLog) {
        let dir = tempfile::tempdir().unwrap();
        let log = ContainerLog::new(dir.path().join("c.log"), limit);
        (dir, log)
    }

    fn read(log: &ContainerLog, options: LogOptions) -> String {
        let stream = log.read(&options, at(59)).unwrap();
        String::from_utf8(stream.head.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn an_attach_follows_what_each_output_writes_from_now_on_tagged_with_its_output() {
        let (_dir, log) = log(1024);
        log.append(Output::Stdout, b"before\n");
        let followed = log
            .follow_outputs()
            .expect("a running instance is followed");
        log.append(Output::Stdout, b"out\nmore\n");
        log.append(Output::Stderr, b"err\n");
        log.append(Output::Stdout, b"last");
        log.end_instance();
        let got: Vec<(Output, Bytes)> = followed.collect().await;
        assert_eq!(
            got,
            [
                (Output::Stdout, Bytes::from_static(b"out\nmore\n")),
                (Output::Stderr, Bytes::from_static(b"err\n")),
                (Output::Stdout, Bytes::from_static(b"last")),
            ]
        );
        assert!(
            log.follow_outputs().is_none(),
            "an ended instance is not followed"
        );
    }

    #[test]
    fn the_log_keeps_the_last_lines_in_memory_and_everything_on_disk() {
        let (dir, log) = log(8);
        log.append(Output::Stdout, b"0123\n45\n6789\n");
        assert_eq!(log.text(false).unwrap(), "45\n6789\n");
        log.new_instance();
        log.append(Output::Stdout, b"ab");
        assert_eq!(log.text(false).unwrap(), "ab");
        assert_eq!(log.text(true).unwrap(), "45\n6789\n");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c.log")).unwrap(),
            "0123\n45\n6789\nab"
        );
    }

    #[test]
    fn each_line_keeps_the_time_it_was_written_and_timestamps_show_it() {
        let (_dir, log) = log(1024);
        log.new_instance();
        log.append_at(Output::Stdout, b"one\ntw", at(1));
        log.append_at(Output::Stderr, b"err\n", at(2));
        log.append_at(Output::Stdout, b"o\n", at(3));
        let options = LogOptions {
            timestamps: true,
            ..LogOptions::default()
        };
        assert_eq!(
            read(&log, options),
            "2026-11-29T12:00:01.123456789Z one\n\
             2026-11-29T12:00:02.123456789Z err\n\
             2026-11-29T12:00:03.123456789Z two\n"
        );
    }

    #[test]
    fn tail_lines_then_since_select_the_lines_and_limit_bytes_cuts_them() {
        let (_dir, log) = log(1024);
        log.new_instance();
        for (second, text) in [(1, "a\n"), (2, "b\n"), (3, "c\n"), (4, "d\n")] {
            log.append_at(Output::Stdout, text.as_bytes(), at(second));
        }
        let tail = |n| LogOptions {
            tail_lines: Some(n),
            ..LogOptions::default()
        };
        assert_eq!(read(&log, tail(2)), "c\nd\n");
        assert_eq!(read(&log, tail(0)), "");
        assert_eq!(read(&log, tail(10)), "a\nb\nc\nd\n");
        let since = LogOptions {
            since_time: Some(at(2)),
            ..LogOptions::default()
        };
        assert_eq!(read(&log, since.clone()), "b\nc\nd\n");
        assert_eq!(
            read(
                &log,
                LogOptions {
                    tail_lines: Some(3),
                    since_time: Some(at(4)),
                    ..LogOptions::default()
                }
            ),
            "d\n"
        );
        assert_eq!(
            read(
                &log,
                LogOptions {
                    since_seconds: Some(56),
                    ..LogOptions::default()
                }
            ),
            "c\nd\n",
            "sinceSeconds counts back from the time of the read"
        );
        assert_eq!(
            read(
                &log,
                LogOptions {
                    limit_bytes: Some(3),
                    ..LogOptions::default()
                }
            ),
            "a\nb"
        );
    }

    #[test]
    fn a_long_line_is_kept_in_pieces_and_an_unfinished_one_when_the_instance_ends() {
        let (_dir, log) = log(4 * LINE_LIMIT);
        log.new_instance();
        let long = vec![b'x'; LINE_LIMIT + 3];
        log.append(Output::Stdout, &long);
        log.append(Output::Stdout, b"\nlast words");
        let all = read(&log, LogOptions::default());
        assert_eq!(
            all.len(),
            LINE_LIMIT + 4,
            "the unfinished line is not read yet"
        );
        log.end_instance();
        let all = read(&log, LogOptions::default());
        assert!(all.ends_with("xxx\nlast words"));
    }

    #[test]
    fn previous_reads_the_instance_before_the_last_start_and_none_is_there_at_first() {
        let (_dir, log) = log(1024);
        assert!(log.read(&LogOptions::default(), at(0)).is_none());
        log.new_instance();
        log.append(Output::Stdout, b"first\n");
        let previous = LogOptions {
            previous: true,
            ..LogOptions::default()
        };
        assert!(log.read(&previous, at(0)).is_none());
        log.new_instance();
        log.append(Output::Stdout, b"second\n");
        assert_eq!(read(&log, previous), "first\n");
        assert_eq!(read(&log, LogOptions::default()), "second\n");
    }

    #[tokio::test]
    async fn a_follower_gets_each_line_as_it_is_written_until_the_instance_ends() {
        let (_dir, log) = log(1024);
        log.new_instance();
        log.append(Output::Stdout, b"before\n");
        let options = LogOptions {
            follow: true,
            ..LogOptions::default()
        };
        let stream = log.read(&options, Utc::now()).unwrap();
        assert_eq!(stream.head.as_ref(), b"before\n");
        let mut rest = stream.rest.expect("a running instance is followed");
        let waiting = tokio::spawn(async move {
            let first = rest.next().await;
            (first, rest)
        });
        tokio::task::yield_now().await;
        log.append(Output::Stdout, b"after\n");
        let (first, mut rest) = waiting.await.unwrap();
        assert_eq!(first.unwrap().as_ref(), b"after\n");
        log.append(Output::Stderr, b"last");
        log.end_instance();
        assert_eq!(rest.next().await.unwrap().as_ref(), b"last");
        assert!(
            rest.next().await.is_none(),
            "the stream ends with the instance"
        );
    }

    #[tokio::test]
    async fn a_follower_stops_at_the_byte_limit_and_an_ended_instance_is_not_followed() {
        let (_dir, log) = log(1024);
        log.new_instance();
        log.append(Output::Stdout, b"12\n");
        let options = LogOptions {
            follow: true,
            limit_bytes: Some(5),
            ..LogOptions::default()
        };
        let stream = log.read(&options, Utc::now()).unwrap();
        assert_eq!(stream.head.as_ref(), b"12\n");
        let mut rest = stream.rest.unwrap();
        log.append(Output::Stdout, b"345\n");
        assert_eq!(rest.next().await.unwrap().as_ref(), b"34");
        assert!(rest.next().await.is_none(), "the limit ends the stream");
        log.end_instance();
        let ended = log.read(&options, Utc::now()).unwrap();
        assert!(ended.rest.is_none());
        let previous = LogOptions {
            previous: true,
            follow: true,
            ..LogOptions::default()
        };
        log.new_instance();
        assert!(log.read(&previous, Utc::now()).unwrap().rest.is_none());
    }
}
