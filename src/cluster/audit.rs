//! Following an audit log file as it grows: the audit of providers whose API server writes
//! one (a running `opconform sim --audit-log`, or kube-apiserver's log on kind), turned
//! into the same live feed the embedded simulator gives.

use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::broadcast;

use super::ProviderError;
use crate::sim::apiserver::audit::AuditEvent;

/// How often the file is read for new lines.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Turns one line of the log into an event (`None` skips the line).
pub type LineParser = fn(&str) -> Option<AuditEvent>;

/// Parses a line written by `opconform sim --audit-log`.
pub fn parse_sim_line(line: &str) -> Option<AuditEvent> {
    serde_json::from_str(line).ok()
}

/// Follows `path` from its current end: every complete line appended later is parsed
/// and sent on the returned feed. The follower stops when every receiver is dropped.
///
/// # Errors
/// When the file cannot be opened.
pub fn follow_file(
    path: &Path,
    parse: LineParser,
) -> Result<broadcast::Receiver<AuditEvent>, ProviderError> {
    let file_error = |source| ProviderError::File {
        action: "cannot follow the audit log",
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(file_error)?;
    let start = file.seek(SeekFrom::End(0)).map_err(file_error)?;
    let (tx, rx) = broadcast::channel(65_536);
    let path: PathBuf = path.to_path_buf();
    tokio::spawn(async move {
        let mut reader = BufReader::new(file);
        let mut offset = start;
        let mut partial = String::new();
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        loop {
            ticker.tick().await;
            if tx.receiver_count() == 0 {
                return;
            }
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(n) => {
                        offset += n as u64;
                        partial.push_str(&line);
                        if !partial.ends_with('\n') {
                            continue;
                        }
                        if let Some(ev) = parse(partial.trim_end()) {
                            let _ = tx.send(ev);
                        }
                        partial.clear();
                    }
                    Err(e) => {
                        eprintln!(
                            "opconform: reading the audit log {} failed at byte {offset}: {e}",
                            path.display()
                        );
                        return;
                    }
                }
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn line(seq: u64) -> String {
        format!(
            r#"{{"time":"2026-01-01T00:00:00Z","seq":{seq},"user":"u","groups":[],"sourceIp":"127.0.0.1","verb":"create","apiGroup":"","resource":"configmaps","requestUri":"/api/v1/namespaces/n/configmaps","code":201}}"#
        )
    }

    #[tokio::test]
    async fn only_lines_appended_after_the_start_are_followed_even_when_written_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, format!("{}\n", line(1))).unwrap();
        let mut feed = follow_file(&path, parse_sim_line).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let second = line(2);
        let (head, tail) = second.split_at(40);
        write!(file, "{head}").unwrap();
        file.flush().unwrap();
        tokio::time::sleep(POLL_INTERVAL * 3).await;
        writeln!(file, "{tail}").unwrap();
        writeln!(file, "not json").unwrap();
        writeln!(file, "{}", line(3)).unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), feed.recv())
            .await
            .unwrap()
            .unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), feed.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((first.seq, next.seq), (2, 3));
    }

    #[test]
    fn a_missing_file_is_named_in_the_error() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _guard = rt.enter();
        let e = follow_file(Path::new("/nonexistent/audit.jsonl"), parse_sim_line).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/audit.jsonl"), "{e}");
    }
}
