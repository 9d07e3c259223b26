//! The OCI runtime's own mount namespace, for a kubelet running as root: a thread of this
//! process that has left the host's mount namespace for a copy of it, from which every
//! process of the runtime is started (its `run`, `exec`, `pause`, `resume`, `ps` and
//! `delete`, and the watchdog of each container) and where the containers' overlays are
//! mounted.
//!
//! In that copy:
//! - every mount is a slave of the host's: what the host mounts later appears in it, and
//!   nothing mounted in it reaches the host;
//! - on a hybrid cgroup host, the cgroup v2 hierarchy beside the v1 ones is unmounted
//!   (crun refuses to run where it holds a controller, see [`super::oci`]);
//! - each container's overlay is mounted on its bundle's `rootfs`, and unmounted when the
//!   container is deleted.
//!
//! One namespace for all of a runtime's commands spares each of them what a namespace per
//! command costs on a machine where starting a process takes milliseconds: an `unshare`,
//! a shell, an `umount` and a `mount` process before the runtime itself.
//!
//! The namespace lives while this process holds its thread or any process started in it
//! runs: when this process dies, the last container's runtime process and watchdog end it,
//! and every mount in it (the overlays) goes with it. Nothing is ever mounted in the
//! host's namespace.
//!
//! A mount namespace is a property of the thread that unshares it (after unsharing its
//! file-system attributes, which threads otherwise share): a process spawned from that
//! thread starts in it. The thread stays to run the jobs sent to it, one at a time.

use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};

/// Errors of the runtime's mount namespace.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    /// The thread could not leave the host's mount namespace (it needs `CAP_SYS_ADMIN`).
    #[error("cannot make a mount namespace for the OCI runtime")]
    Unshare(#[source] nix::Error),
    /// The copy's mounts could not be made slaves of the host's.
    #[error("cannot make the OCI runtime's mount namespace a slave of the host's")]
    Slave(#[source] nix::Error),
    /// The cgroup v2 hierarchy could not be unmounted in the copy.
    #[error("cannot unmount {path} in the OCI runtime's mount namespace")]
    Hide {
        /// The hierarchy.
        path: String,
        /// The cause.
        #[source]
        source: nix::Error,
    },
    /// An overlay could not be mounted in the namespace.
    #[error("cannot mount the overlay of {merged} (lowerdir={lower}, upperdir={upper})")]
    Overlay {
        /// The image directory.
        lower: String,
        /// The container's layer.
        upper: String,
        /// Where it is mounted.
        merged: String,
        /// The cause.
        #[source]
        source: nix::Error,
    },
    /// The namespace's thread could not be started, or is gone.
    #[error("the thread of the OCI runtime's mount namespace could not be started or is gone")]
    Thread,
}

/// Work done in the namespace, on its thread.
type Job = Box<dyn FnOnce() + Send>;

/// The runtime's mount namespace: its thread, which ends when this is dropped.
#[derive(Debug)]
pub struct Launcher {
    jobs: Mutex<Sender<Job>>,
}

impl Launcher {
    /// Starts the thread in a new mount namespace, a slave copy of the host's, with
    /// `hidden` unmounted in it.
    ///
    /// # Errors
    /// Without `CAP_SYS_ADMIN`, or when `hidden` cannot be unmounted.
    pub fn start(hidden: Option<&Path>) -> Result<Self, LauncherError> {
        let hidden = hidden.map(Path::to_path_buf);
        let (made, made_rx) = channel();
        let (jobs, queue) = channel::<Job>();
        std::thread::Builder::new()
            .name("oci-launcher".into())
            .spawn(move || {
                let entered = (|| {
                    unshare(CloneFlags::CLONE_FS | CloneFlags::CLONE_NEWNS)
                        .map_err(LauncherError::Unshare)?;
                    mount(
                        None::<&str>,
                        "/",
                        None::<&str>,
                        MsFlags::MS_REC | MsFlags::MS_SLAVE,
                        None::<&str>,
                    )
                    .map_err(LauncherError::Slave)?;
                    if let Some(path) = &hidden {
                        umount2(path, MntFlags::MNT_DETACH).map_err(|source| {
                            LauncherError::Hide {
                                path: path.display().to_string(),
                                source,
                            }
                        })?;
                    }
                    Ok(())
                })();
                let ok = entered.is_ok();
                let _ = made.send(entered);
                if ok {
                    for job in queue {
                        job();
                    }
                }
            })
            .map_err(|_| LauncherError::Thread)?;
        made_rx.recv().map_err(|_| LauncherError::Thread)??;
        Ok(Self {
            jobs: Mutex::new(jobs),
        })
    }

    /// Runs `work` on the namespace's thread and returns what it returned: a process it
    /// spawns starts in the namespace. Within a Tokio runtime, `work` runs in its context
    /// (a `tokio::process::Command` can be spawned). Blocks until `work` is done.
    ///
    /// # Errors
    /// When the thread is gone.
    pub fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, LauncherError> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let (done, result) = channel();
        let job: Job = Box::new(move || {
            let _context = runtime.as_ref().map(tokio::runtime::Handle::enter);
            let _ = done.send(work());
        });
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job)
            .map_err(|_| LauncherError::Thread)?;
        result.recv().map_err(|_| LauncherError::Thread)
    }

    /// Mounts an overlay of `lower` under `upper` (with `work`) on `merged`, in the
    /// namespace.
    ///
    /// # Errors
    /// What the kernel said, or when the thread is gone.
    pub fn mount_overlay(
        &self,
        lower: &Path,
        upper: &Path,
        work: &Path,
        merged: &Path,
    ) -> Result<(), LauncherError> {
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        let target = merged.to_path_buf();
        let mounted = self.run(move || {
            mount(
                Some("overlay"),
                &target,
                Some("overlay"),
                MsFlags::empty(),
                Some(options.as_str()),
            )
        })?;
        mounted.map_err(|source| LauncherError::Overlay {
            lower: lower.display().to_string(),
            upper: upper.display().to_string(),
            merged: merged.display().to_string(),
            source,
        })
    }

    /// Unmounts what is mounted on `merged` in the namespace (lazily: a process still in
    /// it keeps it until it leaves). Nothing happens when nothing is.
    pub fn unmount(&self, merged: &Path) {
        let target = merged.to_path_buf();
        let _ = self.run(move || umount2(&target, MntFlags::MNT_DETACH));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounted_in(pid: &str, target: &Path) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(target.to_str().unwrap()))
    }

    #[test]
    fn an_overlay_mounted_in_the_namespace_is_seen_by_its_processes_and_never_by_the_host() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: a mount namespace needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let [lower, upper, work, merged] =
            ["lower", "upper", "work", "merged"].map(|d| dir.path().join(d));
        for d in [&lower, &upper, &work, &merged] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(lower.join("image-file"), "from the image").unwrap();
        let launcher = Launcher::start(None).unwrap();
        launcher
            .mount_overlay(&lower, &upper, &work, &merged)
            .unwrap();
        let seen = {
            let merged = merged.clone();
            launcher
                .run(move || {
                    std::process::Command::new("cat")
                        .arg(merged.join("image-file"))
                        .output()
                })
                .unwrap()
                .unwrap()
        };
        assert_eq!(String::from_utf8_lossy(&seen.stdout), "from the image");
        assert!(!mounted_in("self", &merged), "the host sees the overlay");
        assert!(!merged.join("image-file").exists());
        launcher.unmount(&merged);
        let after = {
            let merged = merged.clone();
            launcher
                .run(move || std::path::Path::new(&merged).join("image-file").exists())
                .unwrap()
        };
        assert!(!after, "the overlay is still mounted in the namespace");
    }
}
