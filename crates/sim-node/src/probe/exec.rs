//! `exec` probes: the command runs in its container through the runtime's `exec` (as
//! `kubectl exec` runs a command), or, for a pod that is host processes, as a process of
//! its own group in the pod's directory. A command that outlives the probe's timeout is
//! SIGKILLed, as containerd kills the process of an `ExecSync` that timed out: in a
//! container, the process whose pid the runtime wrote to its `--pid-file`; on the host,
//! the command's whole process group. The same happens when the probe is dropped midway
//! (its container stops), so nothing a probe started is left running.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::process::{Child, Command};

use crate::process::spawn;
use crate::runtime::ContainerRuntime;

/// The most of an exec probe's output the kubelet keeps.
const EXEC_OUTPUT_LIMIT: usize = 10 * 1024;

/// How long the runtime's `exec` may take to end once its command is killed before it is
/// killed too.
const RUNTIME_EXIT_BOUND: Duration = Duration::from_secs(5);

/// How often the runtime's pid file is read again when it was not written at the timeout.
const PID_FILE_RETRY: Duration = Duration::from_millis(100);

/// Why an exec probe's command failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// It exited with another code than 0: the message is what it wrote (stdout and
    /// stderr, at most 10 KiB), as the kubelet reports it.
    #[error("{output}")]
    Exited {
        /// Its exit code (`None` when a signal ended it).
        code: Option<i32>,
        /// What it wrote.
        output: String,
    },
    /// It did not end within timeoutSeconds (and was killed).
    #[error("command timed out: {command:?} timed out after {seconds}s")]
    Timeout {
        /// The command, its words joined by spaces.
        command: String,
        /// The timeout.
        seconds: u64,
    },
    /// It could not be started: nothing of the container runs, or the runtime could not be
    /// run.
    #[error("cannot run the exec probe's command in the container")]
    Start(#[source] std::io::Error),
}

/// Where the command of a started exec probe is, to kill it.
enum Killable {
    /// The child is the command, leading a process group of its own.
    Group,
    /// The child is the runtime's `exec`, which writes the command's pid to this file.
    PidFile(PathBuf),
}

/// An exec probe's command, started: killed (and its runtime's `exec` with it) when dropped
/// before it ended.
pub struct ExecProcess {
    child: Child,
    command: Killable,
    ended: bool,
    killed: bool,
}

impl ExecProcess {
    /// `child`, started by [`probe_process`]: the command itself, in a group of its own.
    #[must_use]
    pub fn on_the_host(child: Child) -> Self {
        Self {
            child,
            command: Killable::Group,
            ended: false,
            killed: false,
        }
    }

    /// `child`, the runtime's `exec` started with `--pid-file pid_file` (see
    /// [`with_pid_file`]).
    #[must_use]
    pub fn in_container(child: Child, pid_file: PathBuf) -> Self {
        Self {
            child,
            command: Killable::PidFile(pid_file),
            ended: false,
            killed: false,
        }
    }

    /// SIGKILLs the command, once, while its parent (this process's child) has not been
    /// reaped, so that its pid is still the command's; whether it was signalled (a runtime
    /// may not have written its pid yet).
    fn kill_command(&mut self) -> bool {
        if self.ended || self.killed || !matches!(self.child.try_wait(), Ok(None)) {
            return self.killed;
        }
        let sent = match &self.command {
            Killable::Group => self
                .child
                .id()
                .and_then(|p| i32::try_from(p).ok())
                .is_some_and(|pid| killpg(Pid::from_raw(pid), Signal::SIGKILL).is_ok()),
            Killable::PidFile(file) => std::fs::read_to_string(file)
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
                .filter(|p| *p > 1)
                .is_some_and(|pid| kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()),
        };
        self.killed = sent;
        sent
    }

    /// Kills the command, then waits for the runtime's `exec` to end (it reaps the command
    /// and exits); SIGKILLs the runtime too when it has not ended within
    /// [`RUNTIME_EXIT_BOUND`], trying again meanwhile to read the command's pid should the
    /// runtime not have written it yet.
    async fn kill(&mut self) {
        let bound = tokio::time::Instant::now() + RUNTIME_EXIT_BOUND;
        loop {
            let retry = if self.kill_command() {
                bound
            } else {
                (tokio::time::Instant::now() + PID_FILE_RETRY).min(bound)
            };
            if tokio::time::timeout_at(retry, self.child.wait())
                .await
                .is_ok()
            {
                break;
            }
            if tokio::time::Instant::now() >= bound {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                break;
            }
        }
        self.ended = true;
    }

    /// Runs the command to its end, or kills it at `timeout`: its exit status and what it
    /// wrote (stdout then stderr), `None` when it timed out.
    async fn finish(
        mut self,
        timeout: Duration,
    ) -> std::io::Result<Option<(Option<i32>, Vec<u8>)>> {
        let (stdout, stderr) = (self.child.stdout.take(), self.child.stderr.take());
        let child = &mut self.child;
        let ran = async {
            let (out, err, status) = tokio::join!(read_all(stdout), read_all(stderr), child.wait());
            let mut written = out?;
            written.extend(err?);
            std::io::Result::Ok((status?.code(), written))
        };
        match tokio::time::timeout(timeout, ran).await {
            Ok(done) => {
                self.ended = true;
                done.map(Some)
            }
            Err(_) => {
                self.kill().await;
                Ok(None)
            }
        }
    }
}

/// All that `pipe` gives until its end.
async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(mut pipe) = pipe {
        pipe.read_to_end(&mut out).await?;
    }
    Ok(out)
}

impl Drop for ExecProcess {
    fn drop(&mut self) {
        let _ = self.kill_command();
        if let Killable::PidFile(file) = &self.command {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// The command that runs `program` with `args` in `cwd` for an exec probe: no stdin, its
/// output piped, in a process group of its own, killed when dropped.
#[must_use]
pub fn probe_process(program: PathBuf, args: Vec<String>, cwd: PathBuf) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    command
}

/// A runtime's `exec` words (`… exec ID COMMAND…`, as `oci::Container::exec_command`
/// gives them for `command`) with `--pid-file pid_file` after `exec`; `None` when they do
/// not end so.
#[must_use]
pub fn with_pid_file(
    mut args: Vec<String>,
    command: &[String],
    pid_file: &std::path::Path,
) -> Option<Vec<String>> {
    let at = args.len().checked_sub(command.len() + 2)?;
    if args[at] != "exec" || args[at + 2..] != *command {
        return None;
    }
    args.splice(
        at + 1..at + 1,
        ["--pid-file".to_string(), pid_file.display().to_string()],
    );
    Some(args)
}

/// Starts exec probes' commands in `container`: through its runtime's `exec`, with a pid
/// file beside the container's bundle, while it runs as a container; as host processes in
/// `pod_dir` for a pod that is processes; `None` while nothing of it runs.
pub(crate) fn starter(container: Arc<ContainerRuntime>, pod_dir: PathBuf) -> super::Exec {
    Arc::new(move |command: &[String]| {
        let group = container.group()?;
        let Some(oci) = &group.container else {
            let (first, rest) = command.split_first()?;
            let process = probe_process(first.into(), rest.to_vec(), pod_dir.clone());
            return Some(spawn(process, None).map(ExecProcess::on_the_host));
        };
        let (program, args) = oci.exec_command(command, false);
        let pid_file = oci
            .pid_file()
            .with_file_name(format!("probe-{}.pid", uuid::Uuid::new_v4()));
        let Some(args) = with_pid_file(args, command, &pid_file) else {
            return Some(Err(std::io::Error::other(
                "the runtime's exec words do not end with exec ID COMMAND",
            )));
        };
        let process = probe_process(program, args, PathBuf::from("/"));
        Some(spawn(process, Some(oci)).map(|child| ExecProcess::in_container(child, pid_file)))
    })
}

/// Runs `process` within `timeout`, judging it by its exit code; `command` names it in a
/// timeout's message.
pub(super) async fn run(
    process: ExecProcess,
    command: &[String],
    timeout: Duration,
) -> Result<(), ExecError> {
    match process.finish(timeout).await.map_err(ExecError::Start)? {
        Some((Some(0), _)) => Ok(()),
        Some((code, mut written)) => {
            written.truncate(EXEC_OUTPUT_LIMIT);
            Err(ExecError::Exited {
                code,
                output: String::from_utf8_lossy(&written).into_owned(),
            })
        }
        None => Err(ExecError::Timeout {
            command: command.join(" "),
            seconds: timeout.as_secs(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_file_option_goes_right_after_the_runtimes_exec() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let command = words(&["test", "-f", "exec"]);
        let args = words(&["--root", "/run/crun", "exec", "c1", "test", "-f", "exec"]);
        assert_eq!(
            with_pid_file(args, &command, std::path::Path::new("/b/p.pid")).unwrap(),
            words(&[
                "--root",
                "/run/crun",
                "exec",
                "--pid-file",
                "/b/p.pid",
                "c1",
                "test",
                "-f",
                "exec"
            ])
        );
        let other = words(&["run", "c1", "test", "-f", "exec"]);
        assert!(with_pid_file(other, &command, std::path::Path::new("/p")).is_none());
    }
}
