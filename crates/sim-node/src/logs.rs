//! Container logs: the bounded tail of each container instance's stdout and stderr in
//! memory (what `kubectl logs` reads), and the whole output appended to a file in the
//! pod's directory (kept after the pod is gone, for diagnostics).

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Largest log file per container on disk; later output is only kept in memory.
const FILE_LIMIT: u64 = 64 * 1024 * 1024;

#[derive(Default)]
struct Inner {
    current: VecDeque<u8>,
    previous: Option<VecDeque<u8>>,
    file: Option<std::fs::File>,
    written: u64,
}

/// The log of one container across its restarts.
pub struct ContainerLog {
    limit: usize,
    path: PathBuf,
    inner: Mutex<Inner>,
}

impl ContainerLog {
    /// A log keeping the last `limit` bytes of each instance in memory and appending
    /// everything to `path` (created on first write).
    pub fn new(path: PathBuf, limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            path,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The file everything is appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a new container instance: the current log becomes the previous one.
    pub fn new_instance(&self) {
        let mut inner = self.lock();
        let current = std::mem::take(&mut inner.current);
        inner.previous = Some(current);
    }

    /// Appends output of the current instance.
    pub fn append(&self, bytes: &[u8]) {
        let mut inner = self.lock();
        inner.current.extend(bytes);
        let excess = inner.current.len().saturating_sub(self.limit);
        if excess > 0 {
            inner.current.drain(..excess);
        }
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
        let n = bytes.len() as u64;
        if let Some(file) = inner.file.as_mut() {
            // A failing log file must not stop the container; memory keeps the tail.
            let _ = file.write_all(bytes);
        }
        inner.written += n;
    }

    /// The current instance's output (lossy UTF-8), or the previous instance's.
    pub fn text(&self, previous: bool) -> Option<String> {
        let inner = self.lock();
        let buf = if previous {
            inner.previous.as_ref()?
        } else {
            &inner.current
        };
        let (a, b) = buf.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_tail_in_memory_and_everything_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let log = ContainerLog::new(dir.path().join("c.log"), 8);
        log.append(b"0123456789");
        assert_eq!(log.text(false).unwrap(), "23456789");
        log.new_instance();
        log.append(b"ab");
        assert_eq!(log.text(false).unwrap(), "ab");
        assert_eq!(log.text(true).unwrap(), "23456789");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c.log")).unwrap(),
            "0123456789ab"
        );
    }
}
