//! Running the kind provider's external tools (`docker`, `kind`, `kubectl`): found on an
//! explicit search path, each run with a time limit, answering with what the tool printed.
//!
//! # Guarantees
//! - A tool is looked up only in the search path [`Tools`] was given (by default the
//!   `PATH` the process started with), and its children see that same search path as
//!   their `PATH`, so `kind` finds the same `docker`.
//! - Every command runs in a process group of its own and is killed, with everything it
//!   started, when its time limit passes or [`Tools::kill_in_flight`] is called.
//! - Errors name the command line, and for a failed command its exit status and the end
//!   of what it wrote to stderr.
//!
//! Nothing is logged or recorded here: callers decide what a command means.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many trailing lines of stderr an error keeps.
const STDERR_LINES: usize = 30;

/// Errors of running a tool.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The tool is not on the search path.
    #[error("{tool} is not installed: no executable {tool:?} in {searched}; {install}")]
    Missing {
        /// The tool.
        tool: String,
        /// The search path, as given.
        searched: String,
        /// How to install it.
        install: &'static str,
    },
    /// The tool could not be started.
    #[error("`{line}` could not be started")]
    Spawn {
        /// The command line.
        line: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The tool did not finish in time and was killed.
    #[error("`{line}` did not finish within {}s and was killed", after.as_secs())]
    TimedOut {
        /// The command line.
        line: String,
        /// The time limit.
        after: Duration,
    },
    /// The tool exited unsuccessfully.
    #[error("`{line}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        line: String,
        /// `exit status N` or `killed by a signal`.
        status: String,
        /// The end of its stderr (or stdout when stderr was empty).
        stderr: String,
    },
}

/// What a finished command printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The command line, for messages.
    pub line: String,
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Output {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Itself when it succeeded, else [`CommandError::Failed`].
    ///
    /// # Errors
    /// When the exit status was not 0.
    pub fn check(self) -> Result<Self, CommandError> {
        if self.success() {
            return Ok(self);
        }
        let text = if self.stderr.trim().is_empty() {
            &self.stdout
        } else {
            &self.stderr
        };
        let lines: Vec<&str> = text.trim_end().lines().collect();
        let tail = lines[lines.len().saturating_sub(STDERR_LINES)..].join("\n");
        Err(CommandError::Failed {
            line: self.line,
            status: match self.code {
                Some(code) => format!("exit status {code}"),
                None => "killed by a signal".into(),
            },
            stderr: if tail.is_empty() {
                "it printed nothing".into()
            } else {
                tail
            },
        })
    }
}

/// Where to get a tool that is missing.
pub fn install_hint(tool: &str) -> &'static str {
    match tool {
        "docker" => {
            "install Docker Engine or Docker Desktop (https://docs.docker.com/get-docker/) and make sure `docker info` reaches the engine"
        }
        "kind" => {
            "install kind v0.32.0 or later (`go install sigs.k8s.io/kind@v0.32.0`, or a release binary: https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
        }
        "kubectl" => "install kubectl (https://kubernetes.io/docs/tasks/tools/)",
        "sha256sum" => "install GNU coreutils (Debian package coreutils)",
        _ => "install it or add its directory to PATH",
    }
}

/// The tools of one run: a search path, and the process groups of the commands running.
#[derive(Debug, Clone)]
pub struct Tools {
    search_path: OsString,
    in_flight: Arc<Mutex<BTreeSet<i32>>>,
}

impl Tools {
    /// Tools found on `search_path` (directories separated as in `PATH`).
    pub fn new(search_path: impl Into<OsString>) -> Self {
        Self {
            search_path: search_path.into(),
            in_flight: Arc::default(),
        }
    }

    /// Tools found on the `PATH` the process has.
    pub fn from_env() -> Self {
        Self::new(std::env::var_os("PATH").unwrap_or_default())
    }

    /// The search path.
    pub fn search_path(&self) -> &OsString {
        &self.search_path
    }

    /// The executable `tool` on the search path.
    ///
    /// # Errors
    /// [`CommandError::Missing`] when no directory of the search path has it.
    pub fn find(&self, tool: &str) -> Result<PathBuf, CommandError> {
        std::env::split_paths(&self.search_path)
            .filter(|dir| !dir.as_os_str().is_empty())
            .map(|dir| dir.join(tool))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| CommandError::Missing {
                tool: tool.to_string(),
                searched: self.search_path.to_string_lossy().into_owned(),
                install: install_hint(tool),
            })
    }

    /// Checks that every tool is on the search path (nothing is run).
    ///
    /// # Errors
    /// [`CommandError::Missing`] for the first one that is not.
    pub fn require(&self, tools: &[&str]) -> Result<(), CommandError> {
        tools.iter().try_for_each(|tool| self.find(tool).map(drop))
    }

    /// Runs `tool args…` with `limit`, and fails unless it exits with status 0.
    ///
    /// # Errors
    /// A missing tool, a failure to start, the time limit, or a non-zero exit.
    pub async fn run(
        &self,
        tool: &str,
        args: &[&str],
        limit: Duration,
    ) -> Result<Output, CommandError> {
        self.output(tool, args, &[], limit).await?.check()
    }

    /// Runs `tool args…` with extra environment `env` and `limit`, whatever its exit
    /// status (see [`Output::check`]).
    ///
    /// # Errors
    /// A missing tool, a failure to start, or the time limit.
    pub async fn output(
        &self,
        tool: &str,
        args: &[&str],
        env: &[(&str, &str)],
        limit: Duration,
    ) -> Result<Output, CommandError> {
        let program = self.find(tool)?;
        let line = command_line(tool, args);
        let mut command = tokio::process::Command::new(&program);
        command
            .args(args)
            .env("PATH", &self.search_path)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().map_err(|source| CommandError::Spawn {
            line: line.clone(),
            source,
        })?;
        let group = child.id().and_then(|id| i32::try_from(id).ok());
        if let Some(group) = group {
            self.lock().insert(group);
        }
        let finished = tokio::time::timeout(limit, child.wait_with_output()).await;
        if let Some(group) = group {
            self.lock().remove(&group);
            // Whatever the tool left behind in its group goes with it.
            kill_group(group);
        }
        let output = match finished {
            Err(_) => {
                return Err(CommandError::TimedOut { line, after: limit });
            }
            Ok(Err(source)) => return Err(CommandError::Spawn { line, source }),
            Ok(Ok(output)) => output,
        };
        Ok(Output {
            line,
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Kills every command of these tools still running, with what it started (used when
    /// the run is interrupted, before the cluster is deleted).
    pub fn kill_in_flight(&self) {
        let groups = std::mem::take(&mut *self.lock());
        for group in groups {
            kill_group(group);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn kill_group(group: i32) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    // ESRCH (already gone) is the usual answer and not an error.
    let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `tool args…` as a person would type it (arguments with spaces or quotes quoted).
pub fn command_line(tool: &str, args: &[&str]) -> String {
    std::iter::once(tool)
        .chain(args.iter().copied())
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+{}".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn command_lines_quote_only_what_needs_it() {
        assert_eq!(
            command_line("docker", &["exec", "n", "sh", "-c", "kill -s STOP 1"]),
            "docker exec n sh -c 'kill -s STOP 1'"
        );
        assert_eq!(command_line("echo", &["it's", ""]), r"echo 'it'\''s' ''");
    }

    #[test]
    fn a_missing_tool_names_itself_the_search_path_and_how_to_install_it() {
        let dir = tempfile::tempdir().unwrap();
        let tools = Tools::new(dir.path());
        let e = tools.require(&["kind"]).unwrap_err().to_string();
        assert!(e.starts_with("kind is not installed"), "{e}");
        assert!(e.contains(&dir.path().display().to_string()), "{e}");
        assert!(e.contains("go install sigs.k8s.io/kind@"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_executable_is_not_a_tool() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kind"), "#!/bin/sh\n").unwrap();
        assert!(Tools::new(dir.path()).find("kind").is_err());
    }

    #[tokio::test]
    async fn a_failed_command_is_named_with_its_status_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        script(
            dir.path(),
            "kind",
            "echo out; echo 'ERROR: no nodes' >&2; exit 3",
        );
        let tools = Tools::new(dir.path());
        let e = tools
            .run("kind", &["get", "nodes"], Duration::from_secs(10))
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "`kind get nodes` failed (exit status 3): ERROR: no nodes"
        );
        let out = tools
            .output("kind", &["x"], &[], Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!((out.code, out.stdout.as_str()), (Some(3), "out\n"));
    }

    #[tokio::test]
    async fn children_see_the_search_path_and_the_extra_environment() {
        let dir = tempfile::tempdir().unwrap();
        script(dir.path(), "docker", "echo \"$PATH $DOCKER_BUILDKIT\"");
        let tools = Tools::new(dir.path());
        let out = tools
            .output(
                "docker",
                &[],
                &[("DOCKER_BUILDKIT", "1")],
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(out.stdout.trim(), format!("{} 1", dir.path().display()));
    }

    #[tokio::test]
    async fn a_command_past_its_limit_is_killed_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        // The child sleeps in the background: it must die with its group.
        script(
            dir.path(),
            "kind",
            &format!(
                "(/bin/sleep 2; /usr/bin/touch {}) & /bin/sleep 30",
                marker.display()
            ),
        );
        let tools = Tools::new(dir.path());
        let started = std::time::Instant::now();
        let e = tools
            .run("kind", &["create"], Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(e, CommandError::TimedOut { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !marker.exists(),
            "the background child outlived the timeout"
        );
    }
}
