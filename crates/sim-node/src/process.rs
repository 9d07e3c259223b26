//! Container processes: each instance runs in a process group of its own, guarded by a
//! watchdog so that it dies with the process that owns the kubelet; signals to the group
//! (SIGTERM, SIGKILL, SIGSTOP, SIGCONT); reaping; output captured into the container log;
//! stdin `/dev/null`, or a pipe whose write end the kubelet keeps ([`Instance::take_stdin`])
//! for a container whose spec has `stdin: true`; or, for a container whose spec has `tty:
//! true` ([`Streams::Terminal`]), the slave of a pseudo-terminal as all three, its master kept
//! here: what the terminal shows goes to the log as stdout, stdin is typed into it, and
//! [`TerminalControl::resize`] sets its window size. Blocking steps of a pod's start (a
//! spawn among them) run through [`off_the_workers`].
//!
//! # Guarantees
//! Every process group is led by a tiny watchdog shell started first (`process_group(0)`),
//! which the container process then joins. The watchdog ignores SIGTERM, SIGINT, SIGHUP and
//! SIGQUIT and blocks reading a pipe whose only writer is this process. When this process
//! ends for any reason — normal exit, panic, SIGINT, SIGKILL — the kernel closes the pipe,
//! the watchdog's `read` returns and it SIGKILLs its whole group, itself included. Because
//! the watchdog leads the group and is only reaped after the group has been killed, the
//! group id can never be reused by an unrelated process while this code may signal it.
//! Dropping an [`Instance`] SIGKILLs its group at once.
//!
//! A container ([`Instance::spawn_container`]) runs the same way, its OCI runtime's `run`
//! being the process in the group. Its init process leaves the group (the runtime gives it
//! a session of its own), so the watchdog of a container deletes it through the runtime
//! before killing the group, and dropping its [`Instance`] leaves that to the watchdog by
//! closing the pipe. Its signals go to its init process and its freezing is the runtime's
//! pause (see [`super::oci`]).
//!
//! # Caveats
//! A container process that moves itself to another process group or session (a
//! daemonizing program) escapes the group and with it these guarantees.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

use super::logs::{ContainerLog, Output};
use super::oci::Container;

/// Errors of container processes.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The watchdog shell could not be started.
    #[error("cannot start the watchdog of a container process group")]
    Watchdog(#[source] std::io::Error),
    /// The container's executable could not be started.
    #[error("cannot start {program}")]
    Spawn {
        /// The executable.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The OCI runtime refused to pause or resume a container.
    #[error(transparent)]
    Runtime(Box<super::oci::OciError>),
    /// The OCI runtime did not create the container.
    #[error("the container runtime did not create the container within {0:?}")]
    NotCreated(Duration),
    /// The terminal of a container with `tty: true` could not be made.
    #[error("cannot make the terminal of a container")]
    Terminal(#[source] super::terminal::TerminalError),
    /// A signal could not be delivered.
    #[error("cannot send {signal} to process group {pgid}")]
    Signal {
        /// The signal.
        signal: Signal,
        /// The group.
        pgid: i32,
        /// The cause.
        #[source]
        source: nix::Error,
    },
}

/// How an instance's standard streams are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// stdout and stderr are pipes into the log; stdin is a pipe the kubelet keeps with
    /// `stdin` ([`Instance::take_stdin`]), else `/dev/null`.
    Pipes {
        /// Whether stdin is a pipe.
        stdin: bool,
    },
    /// All three are the slave of a pseudo-terminal (a container's `tty: true`): what it
    /// shows goes into the log as stdout, as the kubelet logs a terminal; with `stdin`, what
    /// is written to [`Instance::take_stdin`] is typed into it.
    Terminal {
        /// Whether the kubelet keeps its input for attach.
        stdin: bool,
    },
}

/// The terminal of an instance started with [`Streams::Terminal`]: its master, and the
/// process that gets SIGWINCH when its size changes (the program, or the runtime's `run`,
/// which relays the size to the container's own terminal).
#[derive(Debug)]
pub struct TerminalControl {
    master: OwnedFd,
    leader: u32,
}

impl TerminalControl {
    /// Sets the window size, `width` columns and `height` rows, and tells the process.
    ///
    /// # Errors
    /// When the size cannot be set.
    pub fn resize(&self, width: u16, height: u16) -> std::io::Result<()> {
        super::terminal::resize(&self.master, width, height)?;
        let _ = kill(Pid::from_raw(self.leader as i32), Signal::SIGWINCH);
        Ok(())
    }
}

/// What is written to the standard input of an instance: a pipe, or a terminal's master.
pub type InstanceInput = Box<dyn AsyncWrite + Send + Sync + Unpin>;

/// The watchdog: ignore polite signals, learn the container's pid (for libfaketime's
/// shared memory), wait for the owner's pipe to close, clean up and kill the group.
const WATCHDOG: &str = "trap '' TERM INT HUP QUIT; read pid; read _; \
     rm -f /dev/shm/faketime_shm_$pid /dev/shm/sem.faketime_sem_$pid; kill -9 0";

/// The watchdog of a container: the same, but it first has the runtime delete the
/// container (its arguments are the runtime's `delete --force` command line).
const CONTAINER_WATCHDOG: &str =
    "trap '' TERM INT HUP QUIT; read pid; read _; \"$@\" >/dev/null 2>&1; kill -9 0";

/// How long [`Instance::spawn_container`] waits for the runtime to create the container.
pub const CREATE_BOUND: Duration = Duration::from_secs(30);

/// How often [`Instance::spawn_container`] looks for the container's pid file where it
/// cannot watch its directory.
const UNWATCHED_LOOK: Duration = Duration::from_millis(5);

/// The files written into (closed after writing) or moved into one directory, through
/// inotify: how [`Instance::spawn_container`] learns that the runtime wrote the pid file
/// (runc writes it aside and renames it), with no polling.
struct DirectoryWrites(tokio::io::unix::AsyncFd<Watch>);

/// An inotify instance, as the descriptor [`tokio::io::unix::AsyncFd`] waits on.
struct Watch(Inotify);

impl std::os::fd::AsRawFd for Watch {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsFd::as_fd(&self.0).as_raw_fd()
    }
}

impl DirectoryWrites {
    fn new(dir: &Path) -> std::io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(
            dir,
            AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO,
        )?;
        // Deprecated for types that could close or swap their descriptor while registered;
        // `Watch` owns its descriptor and never does, which is what `register` (unsafe,
        // which this crate forbids) would make the caller promise.
        #[allow(deprecated)]
        let fd =
            tokio::io::unix::AsyncFd::with_interest(Watch(inotify), tokio::io::Interest::READABLE)?;
        Ok(Self(fd))
    }

    /// Returns after the next write or move into the directory (now and then without
    /// one: the caller looks again either way).
    ///
    /// # Errors
    /// When the directory can no longer be watched.
    async fn next(&mut self) -> std::io::Result<()> {
        let mut ready = self.0.readable().await?;
        match ready.get_inner().0.read_events() {
            Ok(_) => Ok(()),
            Err(nix::errno::Errno::EAGAIN) => {
                ready.clear_ready();
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The executable.
    pub program: PathBuf,
    /// argv after the executable.
    pub args: Vec<String>,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// The working directory.
    pub cwd: PathBuf,
}

/// How a container process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The exit code as Kubernetes reports it: the code, or 128 + the signal number.
    pub code: i32,
    /// The signal that killed it, if any.
    pub signal: Option<i32>,
}

/// A running process group, as far as signals are concerned (cheap to clone and share).
#[derive(Debug, Clone)]
pub struct Group {
    /// The process group id (the watchdog's pid).
    pub pgid: i32,
    /// The container process (a container's init process, on the host).
    pub pid: u32,
    /// The container, when the group runs one through an OCI runtime.
    pub container: Option<Arc<Container>>,
}

impl PartialEq for Group {
    fn eq(&self, other: &Self) -> bool {
        self.pgid == other.pgid && self.pid == other.pid
    }
}

impl Eq for Group {}

impl Group {
    /// Sends `signal` to every process of the group (the watchdog ignores SIGTERM), or to
    /// a container's init process.
    ///
    /// # Errors
    /// When the group no longer exists or the signal cannot be sent.
    pub fn signal(&self, signal: Signal) -> Result<(), ProcessError> {
        let error = |source| ProcessError::Signal {
            signal,
            pgid: self.pgid,
            source,
        };
        match &self.container {
            Some(c) => c.signal(signal).map_err(error),
            None => killpg(Pid::from_raw(self.pgid), signal).map_err(error),
        }
    }

    /// Freezes the container's processes (SIGSTOP), leaving the watchdog running, and
    /// returns once every thread of the container process has stopped (bounded by
    /// [`STOP_WAIT`]): whatever reaches the process afterwards waits until it is thawed.
    ///
    /// # Errors
    /// When the group no longer exists.
    pub fn stop(&self) -> Result<(), ProcessError> {
        if let Some(c) = &self.container {
            c.pause().map_err(|e| ProcessError::Runtime(Box::new(e)))?;
            if c.frozen_by_signals() {
                // A signal stops its process some time after it is sent.
                let begin = std::time::Instant::now();
                while !c.pids().into_iter().all(all_threads_stopped) && begin.elapsed() < STOP_WAIT
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            return Ok(());
        }
        self.signal(Signal::SIGSTOP)?;
        // The watchdog must stay able to kill a frozen group when the owner dies.
        let _ = kill(Pid::from_raw(self.pgid), Signal::SIGCONT);
        let begin = std::time::Instant::now();
        while !all_threads_stopped(self.pid) && begin.elapsed() < STOP_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Thaws the group (SIGCONT).
    ///
    /// # Errors
    /// When the group no longer exists.
    pub fn resume(&self) -> Result<(), ProcessError> {
        match &self.container {
            Some(c) => c.resume().map_err(|e| ProcessError::Runtime(Box::new(e))),
            None => self.signal(Signal::SIGCONT),
        }
    }

    /// The processes of a container (its runtime's `ps`); `None` for a plain group.
    pub fn container_pids(&self) -> Option<Vec<u32>> {
        self.container.as_ref().map(|c| c.pids())
    }
}

/// How long [`Group::stop`] waits for a signalled process to actually stop.
pub const STOP_WAIT: Duration = Duration::from_secs(1);

/// Whether every thread of `pid` is stopped (or gone): the state letter of each
/// `/proc/<pid>/task/<tid>/stat`. Without procfs there is nothing to wait for.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            // The state follows the command name, which is in parentheses and may hold any byte.
            let state = stat
                .rfind(')')
                .and_then(|end| stat[end + 1..].trim_start().chars().next());
            matches!(state, Some('T' | 't' | 'Z' | 'X') | None)
        })
    })
}

/// One running container instance: its process group, watchdog and output readers.
pub struct Instance {
    group: Group,
    leader: Child,
    input: Option<InstanceInput>,
    terminal: Option<Arc<TerminalControl>>,
    watchdog: Child,
    pipe: Option<ChildStdin>,
    readers: Vec<JoinHandle<()>>,
    finished: bool,
}

fn path_env() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

impl Instance {
    /// Starts `spec` in a new watched process group; stdout and stderr go to `log`.
    ///
    /// # Errors
    /// When the watchdog or the executable cannot be started.
    pub async fn spawn(spec: &Spec, log: Arc<ContainerLog>) -> Result<Self, ProcessError> {
        Self::spawn_as(spec, None, Streams::Pipes { stdin: false }, log).await
    }

    /// [`Instance::spawn`] with `arg0` as the process's `argv[0]` instead of the
    /// executable's path (a container's `command[0]` as it gave it), and its standard
    /// streams connected as `streams` says.
    ///
    /// # Errors
    /// When the watchdog or the executable cannot be started.
    pub async fn spawn_as(
        spec: &Spec,
        arg0: Option<&str>,
        streams: Streams,
        log: Arc<ContainerLog>,
    ) -> Result<Self, ProcessError> {
        Self::launch(spec, arg0, WATCHDOG, &[], streams, log, None).await
    }

    /// What writes to the process's stdin, when it was started with one (once): the pipe's
    /// write end, or the terminal's master.
    pub fn take_stdin(&mut self) -> Option<InstanceInput> {
        self.input.take()
    }

    /// The terminal of an instance started with [`Streams::Terminal`].
    pub fn terminal(&self) -> Option<Arc<TerminalControl>> {
        self.terminal.clone()
    }

    /// Starts `container` (prepared by its runtime) in a new watched process group and
    /// returns once the runtime has created it (bounded by [`CREATE_BOUND`]); its output
    /// goes to `log`. The group's `pid` is the container's init process. Its streams are
    /// connected as `streams` says: the runtime passes pipes on to the container's process,
    /// and relays a terminal to the container's own (the bundle must then ask for one).
    ///
    /// # Errors
    /// When the watchdog or the runtime cannot be started, or the runtime exits or takes
    /// too long before the container exists (what it said is then in `log`).
    pub async fn spawn_container(
        container: Arc<Container>,
        streams: Streams,
        log: Arc<ContainerLog>,
    ) -> Result<Self, ProcessError> {
        let (program, args) = container.command();
        let spec = Spec {
            program,
            args,
            env: vec![("PATH".into(), path_env())],
            cwd: PathBuf::from("/"),
        };
        let words = container.delete_words();
        // Watched before the runtime starts, so that its pid file cannot come unnoticed.
        let pid_file = container.pid_file();
        let mut written = pid_file
            .parent()
            .and_then(|dir| DirectoryWrites::new(dir).ok());
        let mut instance = Self::launch(
            &spec,
            None,
            CONTAINER_WATCHDOG,
            &words,
            streams,
            log,
            Some(&container),
        )
        .await?;
        container.set_runtime_pid(instance.group.pid);
        let bound = tokio::time::Instant::now() + CREATE_BOUND;
        let pid = loop {
            if let Some(pid) = container.init_pid() {
                break pid;
            }
            tokio::select! {
                _ = instance.leader.wait() => {
                    if let Some(pid) = container.init_pid() {
                        break pid;
                    }
                    // It could not create the container: report how it exited, as a process.
                    instance.group.container = Some(container);
                    return Ok(instance);
                }
                watching = async {
                    match written.as_mut() {
                        Some(w) => w.next().await.is_ok(),
                        // No inotify: look again now and then.
                        None => {
                            tokio::time::sleep(UNWATCHED_LOOK).await;
                            true
                        }
                    }
                } => {
                    if !watching {
                        written = None;
                    }
                }
                _ = tokio::time::sleep_until(bound) => {
                    container.delete();
                    return Err(ProcessError::NotCreated(CREATE_BOUND));
                }
            }
        };
        instance.group.pid = pid as u32;
        instance.group.container = Some(container);
        Ok(instance)
    }

    async fn launch(
        spec: &Spec,
        arg0: Option<&str>,
        watchdog_script: &str,
        watchdog_args: &[String],
        streams: Streams,
        log: Arc<ContainerLog>,
        runtime: Option<&Arc<Container>>,
    ) -> Result<Self, ProcessError> {
        let pty = match streams {
            Streams::Terminal { .. } => {
                Some(super::terminal::open_pty().map_err(ProcessError::Terminal)?)
            }
            Streams::Pipes { .. } => None,
        };
        let mut watchdog_command = Command::new("/bin/sh");
        watchdog_command
            .arg("-c")
            .arg(watchdog_script)
            .arg("sh")
            .args(watchdog_args)
            .env_clear()
            .env("PATH", path_env())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let mut watchdog = spawn(watchdog_command, runtime).map_err(ProcessError::Watchdog)?;
        let mut pipe = watchdog.stdin.take();
        let Some(pgid) = watchdog.id() else {
            return Err(ProcessError::Watchdog(std::io::Error::other(
                "the watchdog exited at once",
            )));
        };
        let pgid = pgid as i32;
        let mut command = Command::new(&spec.program);
        if let Some(arg0) = arg0 {
            command.arg0(arg0);
        }
        command
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .process_group(pgid);
        let mut master = None;
        match (streams, pty) {
            (_, Some(pty)) => {
                // The program's own copies of the slave only: the master reads the end of
                // the output once they are closed.
                let slave = |fd: &OwnedFd| fd.try_clone().map(Stdio::from);
                let (input, output) = match (slave(&pty.slave), slave(&pty.slave)) {
                    (Ok(input), Ok(output)) => (input, output),
                    (Err(source), _) | (_, Err(source)) => {
                        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                        drop(pipe);
                        let _ = watchdog.wait().await;
                        return Err(ProcessError::Terminal(
                            super::terminal::TerminalError::Open(source),
                        ));
                    }
                };
                command
                    .stdin(input)
                    .stdout(output)
                    .stderr(Stdio::from(pty.slave));
                master = Some(pty.master);
            }
            (Streams::Pipes { stdin } | Streams::Terminal { stdin }, None) => {
                command
                    .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
            }
        }
        let spawned = spawn(command, runtime);
        let mut leader = match spawned {
            Ok(child) => child,
            Err(source) => {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                drop(pipe);
                let _ = watchdog.wait().await;
                return Err(ProcessError::Spawn {
                    program: spec.program.display().to_string(),
                    source,
                });
            }
        };
        let pid = leader.id().unwrap_or_default();
        if let Some(p) = pipe.as_mut() {
            // If this fails the watchdog is gone; the group is then killed on finish.
            let _ = p.write_all(format!("{pid}\n").as_bytes()).await;
            let _ = p.flush().await;
        }
        let mut readers = Vec::new();
        let mut input: Option<InstanceInput> = leader
            .stdin
            .take()
            .map(|pipe| Box::new(pipe) as InstanceInput);
        let terminal = master.map(|master| {
            let file = |fd: &OwnedFd| {
                fd.try_clone()
                    .ok()
                    .map(|copy| tokio::fs::File::from_std(std::fs::File::from(copy)))
            };
            if let Some(shown) = file(&master) {
                readers.push(tokio::spawn(copy_output(
                    shown,
                    Output::Stdout,
                    log.clone(),
                )));
            }
            if matches!(streams, Streams::Terminal { stdin: true }) {
                input = file(&master).map(|typed| Box::new(typed) as InstanceInput);
            }
            Arc::new(TerminalControl {
                master,
                leader: pid,
            })
        });
        if let Some(out) = leader.stdout.take() {
            readers.push(tokio::spawn(copy_output(out, Output::Stdout, log.clone())));
        }
        if let Some(err) = leader.stderr.take() {
            readers.push(tokio::spawn(copy_output(err, Output::Stderr, log)));
        }
        Ok(Self {
            group: Group {
                pgid,
                pid,
                container: None,
            },
            leader,
            input,
            terminal,
            watchdog,
            pipe,
            readers,
            finished: false,
        })
    }

    /// The group, for signals.
    pub fn group(&self) -> Group {
        self.group.clone()
    }

    /// Waits for the container process to exit (cancel-safe).
    pub async fn wait(&mut self) -> Exit {
        let container = self.group.container.is_some();
        match self.leader.wait().await {
            // A runtime reports a container killed by a signal as 128 + the signal.
            Ok(status) if container => Exit {
                code: status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
                signal: status
                    .code()
                    .filter(|c| (129..160).contains(c))
                    .map(|c| c - 128)
                    .or(status.signal()),
            },
            Ok(status) => Exit {
                code: status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
                signal: status.signal(),
            },
            // Waiting can only fail if the child was already reaped: report it killed.
            Err(_) => Exit {
                code: 137,
                signal: Some(9),
            },
        }
    }

    /// After the container process exited: kills what is left of the group (and the
    /// watchdog), reaps it and waits (briefly) for the output to drain.
    pub async fn finish(mut self) {
        if let Some(c) = self.group.container.clone() {
            let _ = tokio::task::spawn_blocking(move || c.delete()).await;
        }
        let _ = killpg(Pid::from_raw(self.group.pgid), Signal::SIGKILL);
        let _ = self.leader.wait().await;
        let _ = self.watchdog.wait().await;
        self.finished = true;
        self.pipe = None;
        for reader in std::mem::take(&mut self.readers) {
            let abort = reader.abort_handle();
            if tokio::time::timeout(Duration::from_secs(1), reader)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        remove_faketime_shm(self.group.pid);
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(container) = self.group.container.as_ref().filter(|_| !self.finished) {
            // Its processes die now; the watchdog deletes the container (cgroups, state),
            // then kills the group.
            let _ = container.signal(Signal::SIGKILL);
            self.pipe = None;
            for reader in &self.readers {
                reader.abort();
            }
        } else if !self.finished {
            let _ = killpg(Pid::from_raw(self.group.pgid), Signal::SIGKILL);
            remove_faketime_shm(self.group.pid);
            for reader in &self.readers {
                reader.abort();
            }
        }
    }
}

/// libfaketime leaves its shared memory behind when a process does not exit normally;
/// a stale segment makes a later process with the same pid fail to start.
fn remove_faketime_shm(pid: u32) {
    for name in [
        format!("/dev/shm/faketime_shm_{pid}"),
        format!("/dev/shm/sem.faketime_sem_{pid}"),
    ] {
        let _ = std::fs::remove_file(name);
    }
}

async fn copy_output(
    mut from: impl tokio::io::AsyncRead + Unpin,
    output: Output,
    log: Arc<ContainerLog>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => log.append(output, &buf[..n]),
        }
    }
}

/// The processes (pid) currently in any of `groups`, from `/proc`.
pub fn group_members(groups: &[i32]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(pgid) = process_group_of(pid)
            && groups.contains(&pgid)
        {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// The process group of `pid`, from `/proc/PID/stat`.
pub fn process_group_of(pid: u32) -> Option<i32> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    // The command name may contain spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let _ppid = fields.next()?;
    fields.next()?.parse().ok()
}

/// Runs `work`, which blocks (file writes, a network namespace's creation, a runtime's
/// bundle, a process's spawn), without holding up the runtime's other tasks: dozens of pods
/// starting at once would otherwise keep the few workers busy while the API server, the
/// pods' proxies and the kubelets' own watches wait. On a multi-threaded runtime the worker
/// hands its other tasks to another thread first ([`tokio::task::block_in_place`]); on a
/// current-thread runtime, which cannot, `work` runs where it is.
pub(crate) fn off_the_workers<R>(work: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// Spawns `command` off the async workers (forking a process of this size blocks for a
/// while, as do the pod's other blocking steps): for a container's processes (its
/// runtime's and its watchdog), where its runtime runs ([`Container::start`]); else here.
pub(crate) fn spawn(
    mut command: Command,
    runtime: Option<&Arc<Container>>,
) -> std::io::Result<Child> {
    off_the_workers(|| match runtime {
        Some(container) => container.start(move || command.spawn()),
        None => command.spawn(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        // A zombie is dead for our purposes.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rfind(')')
                    .and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string))
            })
            .is_some_and(|state| state != "Z")
    }

    async fn eventually_dead(pids: &[u32]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|p| alive(*p)) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "processes {pids:?} survive"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn spec(dir: &Path, script: &str) -> Spec {
        Spec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("PATH".into(), path_env())],
            cwd: dir.to_path_buf(),
        }
    }

    #[tokio::test]
    async fn a_process_runs_in_its_own_group_and_its_output_is_captured() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(ContainerLog::new(dir.path().join("log"), 1024));
        let mut instance =
            Instance::spawn(&spec(dir.path(), "echo hello; pwd; exit 3"), log.clone())
                .await
                .unwrap();
        let group = instance.group();
        assert_ne!(group.pgid, std::process::id() as i32);
        let exit = instance.wait().await;
        assert_eq!(
            exit,
            Exit {
                code: 3,
                signal: None
            }
        );
        instance.finish().await;
        let text = log.text(false).unwrap();
        assert!(text.starts_with("hello\n"), "{text}");
        assert!(text.contains(dir.path().to_str().unwrap()), "{text}");
        eventually_dead(&[group.pid, group.pgid as u32]).await;
    }

    /// Waits (bounded) until the log's text contains `wanted`, and returns it.
    async fn log_shows(log: &ContainerLog, wanted: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = log.text(false).unwrap_or_default();
            if text.contains(wanted) {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the log never showed {wanted:?}: {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_terminal_instance_shows_its_terminal_in_the_log_takes_typed_input_and_resizes() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(ContainerLog::new(dir.path().join("log"), 4096));
        let script = "trap 'stty size; exit 0' WINCH; \
             test -t 0 && test -t 1 && test -t 2 && echo on-a-terminal; \
             read line; echo got-$line; while :; do sleep 0.05; done";
        let mut instance = Instance::spawn_as(
            &spec(dir.path(), script),
            None,
            Streams::Terminal { stdin: true },
            log.clone(),
        )
        .await
        .unwrap();
        // Typed once the program is up: the terminal echoes what is typed when it is.
        log_shows(&log, "on-a-terminal\r\n").await;
        let mut typed = instance.take_stdin().expect("a terminal's input");
        typed.write_all(b"abc\n").await.unwrap();
        typed.flush().await.unwrap();
        // The terminal echoes what is typed and ends lines as a terminal does.
        let text = log_shows(&log, "got-abc\r\n").await;
        assert!(text.starts_with("on-a-terminal\r\nabc\r\n"), "{text:?}");
        let terminal = instance.terminal().expect("its terminal");
        terminal.resize(120, 40).unwrap();
        log_shows(&log, "40 120\r\n").await;
        assert_eq!(instance.wait().await.code, 0);
        instance.finish().await;
    }

    #[tokio::test]
    async fn an_instance_with_pipes_has_no_terminal() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(ContainerLog::new(dir.path().join("log"), 1024));
        let mut instance = Instance::spawn_as(
            &spec(dir.path(), "test -t 1 || echo not-a-terminal"),
            None,
            Streams::Pipes { stdin: false },
            log.clone(),
        )
        .await
        .unwrap();
        assert!(instance.terminal().is_none() && instance.take_stdin().is_none());
        instance.wait().await;
        instance.finish().await;
        assert_eq!(log.text(false).unwrap_or_default(), "not-a-terminal\n");
    }

    #[tokio::test]
    async fn stop_returns_once_the_process_is_stopped_and_resume_runs_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(ContainerLog::new(dir.path().join("log"), 1024));
        let instance = Instance::spawn(&spec(dir.path(), "while :; do :; done"), log)
            .await
            .unwrap();
        let group = instance.group();
        group.stop().unwrap();
        assert!(
            all_threads_stopped(group.pid),
            "a busy process was still running when stop returned"
        );
        group.resume().unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while all_threads_stopped(group.pid) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the process stayed stopped after resume"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(instance);
        eventually_dead(&[group.pid, group.pgid as u32]).await;
    }

    #[tokio::test]
    async fn sigkill_reports_137_and_kills_grandchildren() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(ContainerLog::new(dir.path().join("log"), 1024));
        let mut instance =
            Instance::spawn(&spec(dir.path(), "sleep 30 & echo $!; wait"), log.clone())
                .await
                .unwrap();
        let group = instance.group();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let grandchild: u32 = loop {
            if let Some(pid) = log.text(false).and_then(|t| t.trim().parse().ok()) {
                break pid;
            }
            assert!(tokio::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(process_group_of(grandchild), Some(group.pgid));
        group.signal(Signal::SIGKILL).unwrap();
        assert_eq!(
            instance.wait().await,
            Exit {
                code: 137,
                signal: Some(9)
            }
        );
        instance.finish().await;
        eventually_dead(&[grandchild, group.pid, group.pgid as u32]).await;
    }

    #[tokio::test]
    async fn sigterm_spares_the_watchdog_and_dropping_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(ContainerLog::new(dir.path().join("log"), 1024));
        let instance = Instance::spawn(
            &spec(
                dir.path(),
                "trap '' TERM; echo ready; while :; do sleep 0.05; done",
            ),
            log.clone(),
        )
        .await
        .unwrap();
        let group = instance.group();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !log.text(false).unwrap_or_default().contains("ready") {
            assert!(tokio::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        group.signal(Signal::SIGTERM).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(alive(group.pgid as u32), "the watchdog died of SIGTERM");
        assert!(alive(group.pid));
        drop(instance);
        eventually_dead(&[group.pid, group.pgid as u32]).await;
    }
}
