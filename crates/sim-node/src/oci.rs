//! Containers through a real OCI runtime: which runtime runs this node's pods (crun, else
//! runc, found at start, or none; on a hybrid cgroup host, crun with its cgroup v2 hierarchy
//! out of sight), each container instance's bundle (`config.json` and its
//! root filesystem) as the container runtime interface would ask for it, the command line
//! that starts it, and the [`Container`] handle the faults act through (signals to its init
//! process, the runtime's pause and resume, removal).
//!
//! # What a container gets
//! - Its own mount, UTS, IPC and PID namespaces, and the pod's network namespace (see
//!   [`pod_network`]; the host's for a `hostNetwork` pod): replicas bind the same ports. The
//!   pod's API proxy listens inside it and connects upstream from the pod's address on the
//!   host, so the audit and every network fault act as before.
//! - Its host name (the pod's, see [`super::names`]), `/etc/hosts`, `/etc/resolv.conf` and
//!   `/etc/hostname` bound from the pod's directory, and the bind mounts the caller gives
//!   (the service-account files among them).
//! - A root filesystem: an image directory under a copy-on-write layer of its own (overlayfs,
//!   mounted where only the runtime and the container see it, so it vanishes with them: as
//!   root, in the runtime's own mount namespace ([`super::launcher`]), unmounted when the
//!   container is deleted; rootless, in the private mount namespace of its runtime process;
//!   a copy of the directory where overlayfs is not available), or, for an image mapped to an
//!   executable, a fresh directory holding the executable and the host's `/usr`, `/bin`,
//!   `/sbin`, `/lib*` and `/etc`, read-only.
//!
//! # Where the runtime runs
//! As root, every process of the runtime (and each container's watchdog) starts in the
//! runtime's own mount namespace ([`super::launcher`]): a slave copy of the host's, where the
//! overlays are mounted and, on a hybrid cgroup host, the cgroup v2 hierarchy is out of
//! crun's sight. Starting a process costs milliseconds on a small machine: one namespace
//! for all, rather than an `unshare`, a shell, an `umount` and a `mount` before each
//! command, takes about a third off a container's start (see the README's pod start
//! figures).
//! - The user, groups, capabilities and read-only root of its `securityContext`, and its
//!   memory and CPU limits as cgroup limits (`cgroupsPath` = `/opconform-<id>`).
//!
//! # Rootless containers
//! Where this process is not root, pods are still containers when the kernel lets an
//! unprivileged user make user namespaces ([`Isolation::detect`] tries once, the way a
//! container will need it: a user namespace, a mount namespace, a PID namespace with its
//! own `/proc`, and an overlay mount inside). Each runtime process then starts under
//! `unshare --user --map-root-user --mount`: a user namespace of its own where this
//! process's user is root and, where the user has subordinate ids and the setuid helpers
//! `newuidmap` and `newgidmap` map them ([`SubordinateIds`], tried once), those are the
//! ids from 1 up; in it, it mounts the overlay (kernels since 5.11 allow it;
//! else the copy) and the runtime, root there, makes the container as it does for root
//! with what runc's own rootless specification (`runc spec --rootless`, oci-spec's
//! [`get_rootless_mounts`]) changes: a user namespace mapping the container's root to this
//! process's user (and its ids from 1 up to the subordinate ids, in a second extent), `/sys` bound read-only from the host instead of a new sysfs, no
//! `gid=5` on `/dev/pts`, and no cgroups. The runtime's state lives in a directory of the
//! user's own ([`rootless_state_dir`]). The runtime's `exec` enters the runtime process's
//! user namespace first (`nsenter --user --preserve-credentials`), where the container's
//! files and standard streams belong to its root.
//!
//! What a rootless container lacks, compared with root's:
//! - Without subordinate ids, it runs as the container's root (this process's user
//!   outside), whatever `runAsUser` or the image's user (65532 for a kubebuilder image)
//!   says: a single-id mapping can map one id only, and runc needs the container's root
//!   mapped. (With them, it runs as its users and groups, refused at start beyond the
//!   range; what they write in the container's layer is removed from inside such a user
//!   namespace, see [`OciRuntime::remove_all`].) A container asked to run as
//!   another user keeps no effective capabilities, as that user would have none;
//!   `fsGroup` and `supplementalGroups` are not applied (unmapped groups cannot be set).
//!   Every file of the image, the volumes and the service-account files belongs to this
//!   process's user, hence to the container's root, so the container reads them all: an
//!   image directory of another user (mapped with `--image`) is copied rather than laid
//!   under an overlay, since the container's root could not make its mount points in it.
//! - No network namespace of its own: it shares the host's. Making a pod's network
//!   namespace needs `CAP_SYS_ADMIN` over the host's network; a namespace made inside a
//!   user namespace would be entered only by processes of that user namespace, which a
//!   multi-threaded process such as this one cannot join, so the pod's API proxy, probes
//!   and port-forwards could not reach into it without a helper process relaying every
//!   socket. On the host's network each pod keeps its address (`127.x.y.z`, routed to the
//!   host's loopback) and its own API proxy port, so the audit and the network faults
//!   (partition, delay, hold at a request) act as before; but two pods that bind the same
//!   port collide (two replicas of a manager listening on `:8081`), and a port below 1024
//!   cannot be bound.
//! - No cgroup limits (no memory or CPU limit is enforced), and freezing is by signals:
//!   `hold` SIGSTOPs every process of the container's PID namespace and `release` SIGCONTs
//!   them (the runtime's `pause` needs the cgroup freezer). `crash` and `kill` are the
//!   SIGKILL of the container's init process as with root; clock skew is libfaketime as
//!   with root.
//!
//! # Guarantees
//! A container never outlives the kubelet's process: its runtime process runs in a watched
//! process group (see [`super::process`]) whose watchdog, when the kubelet's process ends in
//! any way, asks the runtime to delete the container by force (its processes, its cgroups,
//! its state) before killing the group.
//!
//! # Caveats
//! - No seccomp profile, AppArmor or SELinux label; `procMount`, `sysctls` and
//!   `windowsOptions` are ignored.
//! - Rootless: on a cgroup v1 host (and on a cgroup v2 host without a delegated subtree) a
//!   rootless container has no cgroup at all; see above for the rest. The probe at start
//!   tries the kernel, not the runtime: a runtime too old for rootless containers fails
//!   each container's start, with its message in the container's log.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};

use super::launcher::{Launcher, LauncherError};
use nix::unistd::Pid;
use oci_spec::runtime::{
    Capabilities, Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder,
    LinuxDeviceCgroupBuilder, LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType,
    LinuxResourcesBuilder, Mount, MountBuilder, ProcessBuilder, RootBuilder, Spec, SpecBuilder,
    UserBuilder, get_default_mounts, get_rootless_mounts,
};

/// The variable that chooses how pods run: `runc`, `crun`, a runtime's path, or
/// `processes` (host processes, no containers).
pub const RUNTIME_VAR: &str = "OPCONFORM_POD_RUNTIME";

/// Where the runtime keeps its containers' state: one directory for every kubelet of the
/// machine (container ids are unique), outside any kubelet's working directory, so that a
/// container can still be deleted after its kubelet's directory is gone (a test's
/// temporary directory, say), as runc keeps its own under `/run/runc`.
pub const STATE_DIR: &str = "/run/opconform";

/// Errors of containers.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A file or directory of the bundle could not be written.
    #[error("cannot write {path}")]
    Bundle {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The bundle's configuration could not be built.
    #[error("cannot build the container's configuration")]
    Spec(#[source] oci_spec::OciSpecError),
    /// The image directory could not be copied (where overlayfs is not available).
    #[error("cannot copy the image directory {from} to {to}")]
    Copy {
        /// The image directory.
        from: PathBuf,
        /// The container's root.
        to: PathBuf,
        /// What `cp` said.
        message: String,
    },
    /// The runtime's mount namespace refused the container's overlay, or is gone.
    #[error("the OCI runtime's mount namespace")]
    Namespace(#[source] LauncherError),
    /// Rootless: the container asks for an id its user namespace does not map.
    #[error(
        "{what} {id} is not mapped in this rootless container's user namespace, which maps 0 \
         (this user) and 1 to {mapped} ({why})"
    )]
    Unmapped {
        /// `runAsUser`, `runAsGroup` or `a supplemental group`.
        what: &'static str,
        /// The id asked for.
        id: u32,
        /// The highest id mapped.
        mapped: u32,
        /// Where the mapped ids come from, or why only root is.
        why: String,
    },
    /// The runtime refused a command.
    #[error("{runtime} {command} {id}: {message}")]
    Runtime {
        /// The runtime.
        runtime: String,
        /// The command (`pause`, `resume`, `delete`, `ps`).
        command: &'static str,
        /// The container.
        id: String,
        /// What it said.
        message: String,
    },
}

/// How this machine's pods run.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// As containers, through this runtime.
    Containers(Arc<OciRuntime>),
    /// As host processes, for the reason given (a line for the user).
    Processes {
        /// What is missing, and what a pod lacks therefore.
        reason: String,
    },
}

impl Isolation {
    /// Finds how pods run here: [`RUNTIME_VAR`] when set, else crun or runc on `PATH`; as
    /// root, containers of that runtime, with their state in `state_dir` (see
    /// [`STATE_DIR`]); without root, rootless containers when user namespaces can be used
    /// (tried once per process, see the module's documentation), with their state in
    /// [`rootless_state_dir`]; else host processes, for a reason that names what is
    /// missing.
    pub fn detect(state_dir: &Path) -> Self {
        let wanted = std::env::var(RUNTIME_VAR).ok().filter(|v| !v.is_empty());
        if wanted.as_deref() == Some("processes") {
            return Self::Processes {
                reason: format!("{RUNTIME_VAR}=processes"),
            };
        }
        let root = nix::unistd::geteuid().is_root();
        // crun first: it starts a container with less CPU than runc and holds a third of
        // its memory while the container runs (see the README's pod start figures). On a
        // hybrid cgroup host it needs root: it runs where the v2 hierarchy is unmounted.
        let crun_runs = !hybrid_with_v2_controllers() || root;
        let candidates: Vec<String> = match &wanted {
            Some(w) => vec![w.clone()],
            None if crun_runs => vec!["crun".into(), "runc".into()],
            None => vec!["runc".into()],
        };
        let found = candidates
            .iter()
            .find_map(|c| find_program(c).map(|p| (c.clone(), p)));
        let Some((name, program)) = found else {
            return Self::Processes {
                reason: match wanted {
                    Some(w) => format!("{RUNTIME_VAR}={w} is not an executable on PATH"),
                    None if crun_runs => {
                        "neither crun nor runc is on PATH (Debian: apt-get install crun)".into()
                    }
                    None => "runc is not on PATH, and crun cannot run on this host's hybrid \
                             cgroup layout without root (Debian: apt-get install runc)"
                        .into(),
                },
            };
        };
        let name = Path::new(&name)
            .file_name()
            .map_or(name.clone(), |n| n.to_string_lossy().into_owned());
        let overlay_listed = std::fs::read_to_string("/proc/filesystems")
            .is_ok_and(|f| f.lines().any(|l| l.trim_end().ends_with("\toverlay")));
        if root {
            // crun refuses to run at all on a hybrid host whose v2 hierarchy holds a
            // controller ("cgroups in hybrid mode not supported, drop all controllers from
            // cgroupv2"); where it is out of sight crun sees a cgroup v1 host and uses the v1
            // controllers, where pods' limits and the freezer are. Nothing of a pod is in the
            // v2 hierarchy, and the host's mounts are untouched.
            let hidden =
                (name == "crun" && hybrid_with_v2_controllers()).then_some(Path::new(UNIFIED));
            let launcher = match Launcher::start(hidden) {
                Ok(launcher) => launcher,
                Err(e) => {
                    let mut reason = e.to_string();
                    let mut cause = std::error::Error::source(&e);
                    while let Some(c) = cause {
                        reason = format!("{reason}: {c}");
                        cause = c.source();
                    }
                    return Self::Processes { reason };
                }
            };
            return Self::Containers(Arc::new(OciRuntime {
                name,
                program,
                root: state_dir.to_path_buf(),
                unshare: None,
                overlay: overlay_listed,
                limits: Path::new("/sys/fs/cgroup/memory").is_dir()
                    || Path::new("/sys/fs/cgroup/cgroup.controllers").is_file(),
                rootless: None,
                ids: Err("root maps no ids".into()),
                launcher: Some(launcher),
            }));
        }
        match rootless() {
            Ok(found) => Self::Containers(Arc::new(OciRuntime {
                name,
                program,
                root: found.state_dir.clone(),
                unshare: Some(found.unshare.clone()),
                overlay: overlay_listed && found.overlay,
                limits: false,
                rootless: Some(found.nsenter.clone()),
                ids: found.ids.clone(),
                launcher: None,
            })),
            Err(reason) => Self::Processes {
                reason: reason.clone(),
            },
        }
    }

    /// The line a user reads at start when pods are not containers.
    pub fn warning(&self) -> Option<String> {
        match self {
            Self::Containers(_) => None,
            Self::Processes { reason } => Some(format!(
                "pods run as host processes, not containers: {reason}; a pod has no host name, \
                 no root filesystem of its own and no service-account files at \
                 /var/run/secrets/kubernetes.io/serviceaccount"
            )),
        }
    }

    /// The line a user reads at start when pods are rootless containers: what they lack.
    pub fn rootless_notice(&self) -> Option<String> {
        match self {
            Self::Containers(rt) if rt.rootless() => Some(match &rt.ids {
                Ok(ids) => format!(
                    "pods run as rootless containers of {} (not root): they share the host's \
                     network namespace (two pods that bind the same port collide), have no \
                     cgroup limits, and run as users and groups up to {} and {} (this user's \
                     subordinate ids)",
                    rt.name, ids.uids.1, ids.gids.1
                ),
                Err(why) => format!(
                    "pods run as rootless containers of {} (not root): they share the host's \
                     network namespace (two pods that bind the same port collide), run as the \
                     container's root whatever runAsUser says ({why}), and have no cgroup \
                     limits",
                    rt.name
                ),
            }),
            _ => None,
        }
    }
}

/// What rootless containers need, found on this machine.
#[derive(Debug)]
struct RootlessSupport {
    unshare: PathBuf,
    nsenter: PathBuf,
    state_dir: PathBuf,
    /// Whether overlayfs can be mounted in a user namespace.
    overlay: bool,
    /// The user's subordinate ids, mapped above the container's root; else why not.
    ids: Result<SubordinateIds, String>,
}

/// The subordinate ids of a user (`/etc/subuid`, `/etc/subgid`), which the setuid helpers
/// `newuidmap` and `newgidmap` map into a user namespace the user makes: there they are
/// the ids from 1 up, above the user's own id as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubordinateIds {
    /// The first subordinate user id, and how many there are.
    pub uids: (u32, u32),
    /// The first subordinate group id, and how many there are.
    pub gids: (u32, u32),
}

impl SubordinateIds {
    /// `unshare`'s words for a user namespace where this process's user is root and its
    /// subordinate ids are the ids from 1 up.
    fn unshare_words(&self) -> [String; 3] {
        [
            "--map-root-user".into(),
            format!("--map-users={},1,{}", self.uids.0, self.uids.1),
            format!("--map-groups={},1,{}", self.gids.0, self.gids.1),
        ]
    }

    /// Reads the first range of `user` (its name or its id) in each of the two files'
    /// texts (`name:first:count` lines, as `newuidmap` and `newgidmap` read them).
    ///
    /// # Errors
    /// Naming the file without a range of the user.
    pub fn parse(
        user: &str,
        uid: u32,
        subuid: Option<&str>,
        subgid: Option<&str>,
    ) -> Result<Self, String> {
        let range = |file: &str, text: Option<&str>| {
            text.unwrap_or_default()
                .lines()
                .filter_map(|line| {
                    let mut fields = line.trim().split(':');
                    let (owner, first, count) = (fields.next()?, fields.next()?, fields.next()?);
                    let count: u32 = count.parse().ok()?;
                    ((owner == user || owner == uid.to_string()) && count > 0)
                        .then_some((first.parse().ok()?, count))
                })
                .next()
                .ok_or_else(|| format!("{file} gives {user} no range of subordinate ids"))
        };
        Ok(Self {
            uids: range(SUBUID, subuid)?,
            gids: range(SUBGID, subgid)?,
        })
    }
}

/// Where the subordinate user ids of users are listed.
const SUBUID: &str = "/etc/subuid";

/// Where the subordinate group ids of users are listed.
const SUBGID: &str = "/etc/subgid";

/// This user's subordinate ids, tried once in a user namespace with `unshare`; else what
/// is missing.
fn subordinate_ids(unshare: &Path) -> Result<SubordinateIds, String> {
    let missing: Vec<&str> = ["newuidmap", "newgidmap"]
        .into_iter()
        .filter(|helper| find_program(helper).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} not on PATH (Debian: apt-get install uidmap)",
            missing.join(" and ")
        ));
    }
    let uid = nix::unistd::geteuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    let ids = SubordinateIds::parse(
        &user,
        uid.as_raw(),
        std::fs::read_to_string(SUBUID).ok().as_deref(),
        std::fs::read_to_string(SUBGID).ok().as_deref(),
    )?;
    let out = Command::new(unshare)
        .arg("--user")
        .args(ids.unshare_words())
        .args(["--", "/bin/sh", "-c", "exit 0"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", unshare.display()))?;
    if out.status.success() {
        Ok(ids)
    } else {
        Err(format!(
            "mapping them was refused: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether rootless containers can run here, tried once per process.
fn rootless() -> &'static Result<RootlessSupport, String> {
    static FOUND: OnceLock<Result<RootlessSupport, String>> = OnceLock::new();
    FOUND.get_or_init(|| {
        let (Some(unshare), Some(nsenter)) = (find_program("unshare"), find_program("nsenter"))
        else {
            return Err(
                "not root, and rootless containers need util-linux's unshare and \
                        nsenter on PATH"
                    .into(),
            );
        };
        let state_dir = rootless_state_dir();
        make_private_dir(&state_dir).map_err(|e| {
            format!(
                "not root, and the state directory of rootless containers {} cannot be \
                 made: {e}",
                state_dir.display()
            )
        })?;
        let overlay = probe_user_namespaces(&unshare).map_err(|said| {
            userns_refused(&said, |key| {
                std::fs::read_to_string(Path::new("/proc/sys").join(key.replace('.', "/")))
                    .ok()
                    .map(|v| v.trim().to_string())
            })
        })?;
        let ids = subordinate_ids(&unshare);
        Ok(RootlessSupport {
            unshare,
            nsenter,
            state_dir,
            overlay,
            ids,
        })
    })
}

/// Where rootless containers keep their runtime's state: `$XDG_RUNTIME_DIR/opconform`
/// when that variable names an absolute path, else `opconform-<uid>` in the temporary
/// directory.
pub fn rootless_state_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .map(|p| p.join("opconform"))
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("opconform-{}", nix::unistd::geteuid()))
        })
}

/// Makes `dir` (mode 0700) unless it exists, and checks that it is this user's own.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(std::io::Error::other(
            "it is not a directory of this user's own",
        ));
    }
    Ok(())
}

/// Tries what a rootless container needs: a user namespace where this user is root, with
/// a mount namespace and a PID namespace whose `/proc` it mounts; then whether overlayfs
/// mounts there. Returns whether it does, or what `unshare` said.
fn probe_user_namespaces(unshare: &Path) -> Result<bool, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let parts = ["lower", "upper", "work", "merged"].map(|p| dir.path().join(p));
    for p in &parts {
        std::fs::create_dir(p).map_err(|e| format!("cannot make {}: {e}", p.display()))?;
    }
    let out = Command::new(unshare)
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--",
            "/bin/sh",
            "-c",
            r#"mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" 2>/dev/null && echo overlay; exit 0"#,
            "sh",
        ])
        .args(&parts)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", unshare.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).contains("overlay"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The reason pods are not rootless containers when a user namespace was refused: the
/// setting that refuses it, read through `sysctl` (`None` where the kernel has no such
/// setting), and what `unshare` said.
fn userns_refused(said: &str, sysctl: impl Fn(&str) -> Option<String>) -> String {
    let settings: [(&str, &str, &str); 3] = [
        (
            "kernel.unprivileged_userns_clone",
            "0",
            "unprivileged user namespaces are disabled",
        ),
        (
            "kernel.apparmor_restrict_unprivileged_userns",
            "1",
            "AppArmor confines unprivileged user namespaces, as on Ubuntu 23.10 and later",
        ),
        (
            "user.max_user_namespaces",
            "0",
            "no user namespace may be made",
        ),
    ];
    let found: Vec<String> = settings
        .iter()
        .filter(|(key, refusing, _)| sysctl(key).as_deref() == Some(*refusing))
        .map(|(key, value, what)| format!("{key}={value}: {what}"))
        .collect();
    let cause = if found.is_empty() {
        "the kernel refuses them".to_string()
    } else {
        found.join("; ")
    };
    let said = said.lines().last().unwrap_or_default().trim();
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(" ({said})")
    };
    format!("not root, and rootless containers need unprivileged user namespaces: {cause}{said}")
}

fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_else(|| {
            [
                "/usr/local/sbin",
                "/usr/local/bin",
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
            ]
            .iter()
            .map(PathBuf::from)
            .collect()
        })
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// An OCI runtime on this machine.
#[derive(Debug)]
pub struct OciRuntime {
    name: String,
    program: PathBuf,
    root: PathBuf,
    unshare: Option<PathBuf>,
    overlay: bool,
    limits: bool,
    /// Rootless: `nsenter`, through which the runtime's `exec` enters the user namespace
    /// of the runtime process.
    rootless: Option<PathBuf>,
    /// Rootless: the user's subordinate ids, mapped in the runtime's user namespace; else
    /// why not (only the user's own id is, as the container's root).
    ids: Result<SubordinateIds, String>,
    /// As root: the mount namespace every process of the runtime starts in, where the
    /// overlays are mounted (see [`super::launcher`]).
    launcher: Option<Launcher>,
}

/// Where a hybrid cgroup host mounts its cgroup v2 hierarchy beside the v1 ones.
const UNIFIED: &str = "/sys/fs/cgroup/unified";

/// Whether this host mounts a cgroup v2 hierarchy holding controllers beside its v1
/// hierarchies (a hybrid host that crun refuses).
fn hybrid_with_v2_controllers() -> bool {
    !Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
        && std::fs::read_to_string(Path::new(UNIFIED).join("cgroup.controllers"))
            .is_ok_and(|c| !c.trim().is_empty())
}

/// The root filesystem of a container instance.
#[derive(Debug, Clone)]
pub enum Rootfs {
    /// An image's filesystem (a directory), under a copy-on-write layer of the instance.
    Image(PathBuf),
    /// An image mapped to an executable: the executable, bound read-only at `at`, and the
    /// host's system directories.
    Executable {
        /// The executable on the host.
        program: PathBuf,
        /// Where the container sees it.
        at: String,
    },
}

/// A host path bound into a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    /// On the host.
    pub source: PathBuf,
    /// In the container.
    pub destination: String,
    /// Read-only.
    pub read_only: bool,
}

/// What a container's process may do: its `securityContext`, resolved.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups (`fsGroup`, `supplementalGroups`).
    pub additional_gids: Vec<u32>,
    /// `privileged`: every capability, no masked paths, every device.
    pub privileged: bool,
    /// `capabilities.add` (names with or without `CAP_`, or `ALL`).
    pub add: Vec<String>,
    /// `capabilities.drop`.
    pub drop: Vec<String>,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privileges: bool,
}

/// Limits as cgroup settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// `limits.memory`, bytes.
    pub memory_bytes: Option<i64>,
    /// `limits.cpu`, millicores.
    pub cpu_millis: Option<i64>,
    /// `requests.cpu`, millicores (CPU shares).
    pub cpu_request_millis: Option<i64>,
}

/// Everything one container instance runs with.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    /// Unique on the machine (it names the cgroups too): `[A-Za-z0-9_.-]+`.
    pub id: String,
    /// A fresh directory for the bundle, removed by the caller after the instance.
    pub bundle: PathBuf,
    /// The root filesystem.
    pub rootfs: Rootfs,
    /// argv (`argv[0]` is looked up on the container's `PATH` when it has no slash).
    pub args: Vec<String>,
    /// The environment.
    pub env: Vec<(String, String)>,
    /// The working directory in the container.
    pub cwd: String,
    /// The host name.
    pub hostname: String,
    /// The network namespace to join (the pod's: see [`pod_network`]); `None` is the
    /// host's.
    pub network: Option<PathBuf>,
    /// Whether the process runs under a terminal of its own (`tty: true`), which the
    /// runtime relays to the standard streams of its `run`: those must be a terminal.
    pub terminal: bool,
    /// Bind mounts, in order, after the runtime's own (`/proc`, `/dev`, `/sys`…).
    pub mounts: Vec<BindMount>,
    /// The security context.
    pub security: Security,
    /// The limits.
    pub limits: Limits,
}

/// The capabilities containerd gives a container by default (Kubernetes' defaults).
const DEFAULT_CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// Every capability Linux defines, for `ALL` and `privileged`.
const ALL_CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The host's directories an executable image sees (read-only), when they exist.
const HOST_SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

fn capability_set(names: impl IntoIterator<Item = String>) -> Capabilities {
    names
        .into_iter()
        .filter_map(|n| {
            let n = n.trim().to_ascii_uppercase();
            let n = n.strip_prefix("CAP_").unwrap_or(&n).to_string();
            n.parse::<Capability>().ok()
        })
        .collect()
}

/// The capability set of `security` as containerd computes it: the defaults (or all, when
/// privileged), plus `add`, minus `drop` (`ALL` in either meaning every capability).
fn capabilities(security: &Security) -> Capabilities {
    let all = || ALL_CAPABILITIES.iter().map(|c| c.to_string());
    let mentions_all = |list: &[String]| list.iter().any(|c| c.eq_ignore_ascii_case("ALL"));
    if security.privileged {
        return capability_set(all());
    }
    let mut set = if mentions_all(&security.add) {
        capability_set(all())
    } else {
        let mut s = capability_set(DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()));
        s.extend(capability_set(security.add.iter().cloned()));
        s
    };
    if mentions_all(&security.drop) {
        set = capability_set(security.add.iter().cloned());
    } else {
        for c in capability_set(security.drop.iter().cloned()) {
            set.remove(&c);
        }
    }
    set
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OciError + '_ {
    move |source| OciError::Bundle {
        path: path.to_path_buf(),
        source,
    }
}

fn bind(source: &Path, destination: &str, read_only: bool) -> Result<Mount, OciError> {
    let mut options = vec!["rbind".to_string(), "rprivate".to_string()];
    if read_only {
        options.push("ro".into());
    }
    MountBuilder::default()
        .destination(destination)
        .typ("bind")
        .source(source)
        .options(options)
        .build()
        .map_err(OciError::Spec)
}

/// Whether `path` can go into overlayfs's mount options unquoted.
fn overlay_safe(path: &Path) -> bool {
    path.to_str()
        .is_some_and(|p| !p.contains([',', ':', '\\', '"']))
}

impl OciRuntime {
    /// The runtime's name (`runc`, `crun`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The runtime's executable.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The runtime's state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether its containers are rootless (see the module's documentation).
    pub fn rootless(&self) -> bool {
        self.rootless.is_some()
    }

    /// Rootless: the ids mapped above the container's root (this user's subordinate ids),
    /// else why only root is.
    pub fn subordinate_ids(&self) -> Result<SubordinateIds, &str> {
        match &self.ids {
            Ok(ids) => Ok(*ids),
            Err(why) => Err(why),
        }
    }

    /// `unshare`'s words for the user namespace of a rootless runtime process: this user
    /// as root, and its subordinate ids where it has them. None as root.
    fn user_namespace_words(&self) -> Vec<String> {
        if !self.rootless() {
            return Vec::new();
        }
        let mut words = vec!["--user".to_string()];
        match &self.ids {
            Ok(ids) => words.extend(ids.unshare_words()),
            Err(_) => words.push("--map-root-user".into()),
        }
        words
    }

    /// Removes `dir` (a container's bundle). Rootless with subordinate ids, what the
    /// container's other users made there may be out of this user's reach: that is removed
    /// in a user namespace like the runtime's, where this user is their owner's root.
    pub fn remove_all(&self, dir: &Path) {
        if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
            return;
        }
        if let (Some(unshare), Ok(_)) = (&self.unshare, &self.ids) {
            let _ = Command::new(unshare)
                .args(self.user_namespace_words())
                .args(["--", "rm", "-rf", "--"])
                .arg(dir)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    /// The program and arguments that run the runtime with `args` (after `--root`).
    fn invocation(&self, args: Vec<String>) -> (PathBuf, Vec<String>) {
        let mut words = self.words();
        words.extend(args);
        let program = PathBuf::from(words.remove(0));
        (program, words)
    }

    /// Starts a process of the runtime's, which `spawn` spawns, where the runtime runs: as
    /// root, from the thread of its mount namespace ([`Launcher::run`]); rootless, here.
    ///
    /// # Errors
    /// What `spawn` returned, or when the namespace's thread is gone.
    pub fn start<T: Send + 'static>(
        &self,
        spawn: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        match &self.launcher {
            Some(launcher) => launcher.run(spawn).map_err(std::io::Error::other)?,
            None => spawn(),
        }
    }

    /// The runtime and its state directory: the words every command of it starts with.
    fn words(&self) -> Vec<String> {
        vec![
            self.program.display().to_string(),
            "--root".into(),
            self.root.display().to_string(),
        ]
    }

    /// Writes the bundle of `spec` and returns the container, not started: run
    /// [`Container::command`] to start it.
    ///
    /// # Errors
    /// When the bundle cannot be written.
    pub fn prepare(self: &Arc<Self>, spec: &ContainerSpec) -> Result<Container, OciError> {
        let bundle = &spec.bundle;
        let rootfs = bundle.join("rootfs");
        std::fs::create_dir_all(&rootfs).map_err(io(&rootfs))?;
        let mut mounts = if self.rootless() {
            // No cgroup of its own to mount.
            let mut m = get_rootless_mounts();
            m.retain(|m| m.destination() != Path::new("/sys/fs/cgroup"));
            m
        } else {
            get_default_mounts()
        };
        let mut overlay = None;
        match &spec.rootfs {
            Rootfs::Image(lower) => {
                let (upper, work) = (bundle.join("upper"), bundle.join("work"));
                // Rootless, the container's root may create its mount points only in
                // directories of the harness's user: an image directory of another user is
                // copied, which makes the copy the harness's user's.
                let foreign = self.rootless() && !owned_by_this_user(lower);
                let possible = self.overlay
                    && !foreign
                    && [lower, &upper, &work, &rootfs]
                        .iter()
                        .all(|p| overlay_safe(p));
                // As root, mounted in the runtime's mount namespace once the bundle is
                // written; rootless, by `unshare` in the user namespace it makes for the
                // runtime's `run`.
                if possible && (self.launcher.is_some() || self.unshare.is_some()) {
                    std::fs::create_dir_all(&upper).map_err(io(&upper))?;
                    std::fs::create_dir_all(&work).map_err(io(&work))?;
                    overlay = Some([lower.clone(), upper, work, rootfs.clone()]);
                } else {
                    copy_dir(lower, &rootfs)?;
                }
            }
            Rootfs::Executable { program, at } => {
                for dir in HOST_SYSTEM_DIRS {
                    let host = Path::new(dir);
                    let inside = rootfs.join(&dir[1..]);
                    match std::fs::symlink_metadata(host) {
                        Ok(m) if m.file_type().is_symlink() => {
                            let target = std::fs::read_link(host).map_err(io(host))?;
                            std::os::unix::fs::symlink(target, &inside).map_err(io(&inside))?;
                        }
                        Ok(m) if m.is_dir() => mounts.push(bind(host, dir, true)?),
                        _ => {}
                    }
                }
                mounts.push(bind(program, at, true)?);
            }
        }
        for m in &spec.mounts {
            mounts.push(bind(&m.source, &m.destination, m.read_only)?);
        }
        let config = self.config(spec, mounts)?;
        let path = bundle.join("config.json");
        config.save(&path).map_err(|e| match e {
            oci_spec::OciSpecError::Io(source) => OciError::Bundle { path, source },
            other => OciError::Spec(other),
        })?;
        let container = Container {
            runtime: self.clone(),
            id: spec.id.clone(),
            bundle: bundle.clone(),
            overlay,
            overlay_mounted: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            init: OnceLock::new(),
            runtime_pid: OnceLock::new(),
        };
        if let (Some(launcher), Some([lower, upper, work, merged])) =
            (&self.launcher, &container.overlay)
        {
            launcher
                .mount_overlay(lower, upper, work, merged)
                .map_err(OciError::Namespace)?;
            container.overlay_mounted.store(true, Ordering::SeqCst);
        }
        Ok(container)
    }

    fn config(&self, spec: &ContainerSpec, mounts: Vec<Mount>) -> Result<Spec, OciError> {
        let rootless = self.rootless();
        let security = &spec.security;
        let caps = capabilities(security);
        let root_user = security.uid == 0;
        // Rootless: the container's root is the only id mapped (see the module's
        // documentation); a process asked to run as another user keeps that user's (empty)
        // capabilities.
        let (uid, gid, additional_gids) = match (rootless, &self.ids) {
            (true, Err(_)) => (0, 0, Vec::new()),
            (true, Ok(ids)) => {
                let check = |what, id: u32, (_, count): (u32, u32)| {
                    if id <= count {
                        Ok(id)
                    } else {
                        Err(OciError::Unmapped {
                            what,
                            id,
                            mapped: count,
                            why: format!("this user's subordinate ids, {SUBUID} and {SUBGID}"),
                        })
                    }
                };
                (
                    check("runAsUser", security.uid, ids.uids)?,
                    check("runAsGroup", security.gid, ids.gids)?,
                    security
                        .additional_gids
                        .iter()
                        .map(|g| check("a supplemental group", *g, ids.gids))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            (false, _) => (security.uid, security.gid, security.additional_gids.clone()),
        };
        let effective = if root_user {
            caps.clone()
        } else {
            Capabilities::new()
        };
        let capabilities = LinuxCapabilitiesBuilder::default()
            .bounding(caps.clone())
            .permitted(effective.clone())
            .effective(effective)
            .inheritable(Capabilities::new())
            .ambient(Capabilities::new())
            .build()
            .map_err(OciError::Spec)?;
        let user = UserBuilder::default()
            .uid(uid)
            .gid(gid)
            .additional_gids(additional_gids)
            .build()
            .map_err(OciError::Spec)?;
        let process = ProcessBuilder::default()
            .terminal(spec.terminal)
            .user(user)
            .args(spec.args.clone())
            .env(
                spec.env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>(),
            )
            .cwd(spec.cwd.clone())
            .capabilities(capabilities)
            .no_new_privileges(security.no_new_privileges)
            .build()
            .map_err(OciError::Spec)?;
        let root = RootBuilder::default()
            .path("rootfs")
            .readonly(security.read_only_root)
            .build()
            .map_err(OciError::Spec)?;
        let namespaces = [
            LinuxNamespaceType::Pid,
            LinuxNamespaceType::Ipc,
            LinuxNamespaceType::Uts,
            LinuxNamespaceType::Mount,
        ]
        .into_iter()
        .map(|typ| LinuxNamespaceBuilder::default().typ(typ).build())
        .chain(spec.network.iter().map(|path| {
            LinuxNamespaceBuilder::default()
                .typ(LinuxNamespaceType::Network)
                .path(path.clone())
                .build()
        }))
        .chain(rootless.then(|| {
            LinuxNamespaceBuilder::default()
                .typ(LinuxNamespaceType::User)
                .build()
        }))
        .collect::<Result<Vec<_>, _>>()
        .map_err(OciError::Spec)?;
        let mut resources = LinuxResourcesBuilder::default().devices(vec![
            LinuxDeviceCgroupBuilder::default()
                .allow(security.privileged)
                .access("rwm")
                .build()
                .map_err(OciError::Spec)?,
        ]);
        if self.limits {
            if let Some(bytes) = spec.limits.memory_bytes {
                resources = resources.memory(
                    LinuxMemoryBuilder::default()
                        .limit(bytes)
                        .build()
                        .map_err(OciError::Spec)?,
                );
            }
            let mut cpu = LinuxCpuBuilder::default();
            let mut any = false;
            if let Some(millis) = spec.limits.cpu_millis {
                // Kubernetes: a 100 ms period, the quota in proportion (at least 1 ms).
                cpu = cpu.period(100_000u64).quota((millis * 100).max(1000));
                any = true;
            }
            if let Some(millis) = spec.limits.cpu_request_millis {
                cpu = cpu.shares(((millis * 1024) / 1000).max(2) as u64);
                any = true;
            }
            if any {
                resources = resources.cpu(cpu.build().map_err(OciError::Spec)?);
            }
        }
        let mut linux = LinuxBuilder::default().namespaces(namespaces);
        if rootless {
            // The runtime runs as root of a user namespace where root is this process's
            // user (and the ids from 1 up its subordinate ids): the container's ids are
            // those, in as many extents (the kernel maps an extent within one extent of
            // the parent namespace).
            let extents = |subordinate: Option<u32>| {
                std::iter::once((0u32, 1u32))
                    .chain(subordinate.map(|count| (1, count)))
                    .map(|(first, size)| {
                        oci_spec::runtime::LinuxIdMappingBuilder::default()
                            .container_id(first)
                            .host_id(first)
                            .size(size)
                            .build()
                            .map_err(OciError::Spec)
                    })
                    .collect::<Result<Vec<_>, _>>()
            };
            let ids = self.ids.as_ref().ok();
            linux = linux
                .uid_mappings(extents(ids.map(|i| i.uids.1))?)
                .gid_mappings(extents(ids.map(|i| i.gids.1))?);
        } else {
            linux = linux
                .resources(resources.build().map_err(OciError::Spec)?)
                .cgroups_path(PathBuf::from(format!("/opconform-{}", spec.id)));
        }
        if !security.privileged {
            let defaults = oci_spec::runtime::Linux::default();
            linux = linux
                .masked_paths(defaults.masked_paths().clone().unwrap_or_default())
                .readonly_paths(defaults.readonly_paths().clone().unwrap_or_default());
        }
        SpecBuilder::default()
            .version("1.0.2")
            .root(root)
            .hostname(spec.hostname.clone())
            .mounts(mounts)
            .process(process)
            .linux(linux.build().map_err(OciError::Spec)?)
            .build()
            .map_err(OciError::Spec)
    }
}

/// Whether `path` belongs to the user this process runs as.
fn owned_by_this_user(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
}

/// `cp -a from/. to`: the container's own copy of an image directory.
fn copy_dir(from: &Path, to: &Path) -> Result<(), OciError> {
    let out = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .output()
        .map_err(|source| OciError::Bundle {
            path: to.to_path_buf(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(OciError::Copy {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The processes (host pids) in the PID namespace of `init`, from `/proc`; empty when
/// `init` is gone.
fn namespace_members(init: u32) -> Vec<u32> {
    let ns = |pid: &str| std::fs::read_link(Path::new("/proc").join(pid).join("ns/pid")).ok();
    let Some(wanted) = ns(&init.to_string()) else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let pid = name.parse::<u32>().ok()?;
            (ns(name).as_ref() == Some(&wanted)).then_some(pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// How long the runtime commands of [`Container`] may take.
const COMMAND_BOUND: Duration = Duration::from_secs(10);

/// One container instance of the runtime: what starts it, and the faults' handle on it.
#[derive(Debug)]
pub struct Container {
    runtime: Arc<OciRuntime>,
    id: String,
    bundle: PathBuf,
    /// lower, upper, work, merged: as root, mounted in the runtime's mount namespace by
    /// [`OciRuntime::prepare`]; rootless, by the `unshare` that starts the runtime's `run`.
    overlay: Option<[PathBuf; 4]>,
    /// Whether the overlay is mounted in the runtime's mount namespace (until deleted).
    overlay_mounted: AtomicBool,
    paused: AtomicBool,
    /// The init process's pid, once read.
    init: OnceLock<i32>,
    /// The runtime process's pid (rootless: its user namespace is where `exec` runs).
    runtime_pid: OnceLock<u32>,
}

impl Drop for Container {
    fn drop(&mut self) {
        self.unmount_overlay();
    }
}

impl Container {
    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The runtime's name.
    pub fn runtime_name(&self) -> &str {
        &self.runtime.name
    }

    /// Where the runtime writes the init process's pid.
    pub fn pid_file(&self) -> PathBuf {
        self.bundle.join("init.pid")
    }

    /// The program and arguments that run the container in the foreground (its exit status
    /// is the container's): the runtime's `run` (started with [`Container::start`]);
    /// rootless, inside the user and mount namespaces `unshare` makes, where it mounts the
    /// overlay when there is one.
    pub fn command(&self) -> (PathBuf, Vec<String>) {
        let rt = &self.runtime;
        let run = vec![
            "run".into(),
            "--bundle".into(),
            self.bundle.display().to_string(),
            "--pid-file".into(),
            self.pid_file().display().to_string(),
            self.id.clone(),
        ];
        // Rootless: the runtime runs as root of a user namespace of its own (where this
        // process's user is root), which holds the overlay's mount namespace too.
        let user = rt.user_namespace_words();
        let mut runtime_words = rt.words();
        runtime_words.extend(run.iter().cloned());
        match (&self.overlay, &rt.unshare) {
            (Some([lower, upper, work, merged]), Some(unshare)) => {
                let mut args = user;
                args.extend([
                    "--mount".to_string(),
                    "--propagation".into(),
                    "private".into(),
                    "--".into(),
                    "/bin/sh".into(),
                    "-c".into(),
                    r#"mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" && shift 4 && exec "$@""#.to_string(),
                    "sh".into(),
                ]);
                args.extend([lower, upper, work, merged].map(|p| p.display().to_string()));
                args.append(&mut runtime_words);
                (unshare.clone(), args)
            }
            // runc, root of that user namespace, opens the sources of bind mounts in its
            // own mount namespace, which must then belong to that user namespace.
            (None, Some(unshare)) if rt.rootless() => {
                let mut args = user;
                args.extend(["--mount", "--propagation", "private", "--"].map(String::from));
                args.append(&mut runtime_words);
                (unshare.clone(), args)
            }
            _ => rt.invocation(run),
        }
    }

    /// Records the pid of the process that runs [`Container::command`] (rootless
    /// containers' `exec` enters its user namespace).
    pub fn set_runtime_pid(&self, pid: u32) {
        let _ = self.runtime_pid.set(pid);
    }

    /// The program and arguments that run `command` in the running container (the
    /// runtime's `exec`: the container's namespaces, root, user, environment and working
    /// directory). A rootless container's runs in the user namespace of the runtime process, where
    /// the container's standard streams and files belong to its root. With `tty`, it runs
    /// under a terminal the runtime makes and relays to its own standard streams (`--tty`;
    /// `--console-socket` is refused without `--detach`, which would lose the exit code).
    pub fn exec_command(&self, command: &[String], tty: bool) -> (PathBuf, Vec<String>) {
        let mut args = vec!["exec".to_string()];
        if tty {
            args.push("--tty".into());
        }
        args.push(self.id.clone());
        args.extend(command.iter().cloned());
        let (program, mut args) = self.runtime.invocation(args);
        match (&self.runtime.rootless, self.runtime_pid.get()) {
            (Some(nsenter), Some(pid)) => {
                let mut words = vec![
                    "--user".to_string(),
                    "--preserve-credentials".into(),
                    "--target".into(),
                    pid.to_string(),
                    "--".into(),
                    program.display().to_string(),
                ];
                words.append(&mut args);
                (nsenter.clone(), words)
            }
            _ => (program, args),
        }
    }

    /// The shell words the watchdog runs when the kubelet's process is gone: delete the
    /// container by force (the watchdog is started with [`Container::start`], where the
    /// runtime runs).
    pub fn delete_words(&self) -> Vec<String> {
        let (program, mut args) =
            self.runtime
                .invocation(vec!["delete".into(), "--force".into(), self.id.clone()]);
        args.insert(0, program.display().to_string());
        args
    }

    /// The init process's pid on the host, once the runtime has created the container.
    pub fn init_pid(&self) -> Option<i32> {
        if let Some(pid) = self.init.get() {
            return Some(*pid);
        }
        let pid = std::fs::read_to_string(self.pid_file())
            .ok()
            .and_then(|p| p.trim().parse().ok())?;
        Some(*self.init.get_or_init(|| pid))
    }

    /// Sends `signal` to the container's init process, as the kubelet's runtime does (a
    /// SIGKILL of the init process ends every process of its PID namespace). A paused
    /// container is resumed after a SIGKILL, since frozen processes cannot die.
    ///
    /// # Errors
    /// When the container has no init process yet or it is gone.
    pub fn signal(&self, signal: Signal) -> Result<(), nix::Error> {
        let pid = self.init_pid().ok_or(nix::Error::ESRCH)?;
        kill(Pid::from_raw(pid), signal)?;
        if signal == Signal::SIGKILL && self.paused.load(Ordering::SeqCst) {
            let _ = self.resume();
        }
        Ok(())
    }

    /// Freezes every process of the container (the runtime's `pause`: the cgroup freezer),
    /// retrying while the container is still being created (bounded).
    ///
    /// # Errors
    /// What the runtime said.
    pub fn pause(&self) -> Result<(), OciError> {
        self.paused.store(true, Ordering::SeqCst);
        if self.runtime.rootless() {
            return self.signal_all("pause", Signal::SIGSTOP);
        }
        let begin = Instant::now();
        loop {
            match self.run_command("pause", &[]) {
                Ok(_) => return Ok(()),
                Err(e) if begin.elapsed() > Duration::from_secs(2) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Whether [`Container::pause`] freezes by signals (a rootless container, which has no
    /// cgroup freezer): its processes stop some time after it returns.
    pub fn frozen_by_signals(&self) -> bool {
        self.runtime.rootless()
    }

    /// Thaws the container (the runtime's `resume`).
    ///
    /// # Errors
    /// What the runtime said.
    pub fn resume(&self) -> Result<(), OciError> {
        self.paused.store(false, Ordering::SeqCst);
        if self.runtime.rootless() {
            return self.signal_all("resume", Signal::SIGCONT);
        }
        self.run_command("resume", &[]).map(|_| ())
    }

    /// Rootless freezing and thawing: `signal` to every process of the container's PID
    /// namespace, again until no process is left unsignalled (one may fork meanwhile).
    fn signal_all(&self, command: &'static str, signal: Signal) -> Result<(), OciError> {
        let error = |message: String| OciError::Runtime {
            runtime: self.runtime.name.clone(),
            command,
            id: self.id.clone(),
            message,
        };
        let begin = Instant::now();
        let init = loop {
            if let Some(pid) = self.init_pid() {
                break pid;
            }
            if begin.elapsed() > COMMAND_BOUND {
                return Err(error("the container has no init process".into()));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let mut done = std::collections::BTreeSet::new();
        loop {
            let pids = namespace_members(init as u32);
            if pids.is_empty() && done.is_empty() {
                return Err(error(format!("its init process {init} is gone")));
            }
            let new: Vec<u32> = pids.into_iter().filter(|p| !done.contains(p)).collect();
            if new.is_empty() {
                return Ok(());
            }
            for pid in new {
                let _ = kill(Pid::from_raw(pid as i32), signal);
                done.insert(pid);
            }
            if begin.elapsed() > COMMAND_BOUND {
                return Err(error(format!(
                    "its processes kept changing for {COMMAND_BOUND:?}"
                )));
            }
        }
    }

    /// The host pids of the container's processes (the runtime's `ps`; for a rootless
    /// container, which has no cgroup, the processes of its PID namespace).
    pub fn pids(&self) -> Vec<u32> {
        if self.runtime.rootless() {
            return self
                .init_pid()
                .map(|init| namespace_members(init as u32))
                .unwrap_or_default();
        }
        self.run_command("ps", &["--format", "json"])
            .ok()
            .and_then(|out| serde_json::from_str::<Vec<u32>>(&out).ok())
            .unwrap_or_default()
    }

    /// Deletes the container by force: its processes, cgroups and state, and its overlay's
    /// mount. Nothing happens when it is already gone.
    pub fn delete(&self) {
        let _ = self.run_command("delete", &["--force"]);
        self.unmount_overlay();
    }

    /// Unmounts the overlay from the runtime's mount namespace, once.
    fn unmount_overlay(&self) {
        if self.overlay_mounted.swap(false, Ordering::SeqCst)
            && let (Some(launcher), Some([.., merged])) = (&self.runtime.launcher, &self.overlay)
        {
            launcher.unmount(merged);
        }
    }

    /// Starts a process of the runtime's for this container (its `run` or an `exec`), which
    /// `spawn` spawns, where the runtime runs (see [`OciRuntime::start`]).
    ///
    /// # Errors
    /// What `spawn` returned, or when the runtime's mount namespace is gone.
    pub fn start<T: Send + 'static>(
        &self,
        spawn: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        self.runtime.start(spawn)
    }

    fn run_command(&self, command: &'static str, extra: &[&str]) -> Result<String, OciError> {
        let rt = &self.runtime;
        let error = |message: String| OciError::Runtime {
            runtime: rt.name.clone(),
            command,
            id: self.id.clone(),
            message,
        };
        let mut words = vec![command.to_string()];
        words.extend(extra.iter().map(|e| e.to_string()));
        words.push(self.id.clone());
        let (program, args) = rt.invocation(words);
        let mut child = rt
            .start(move || {
                Command::new(program)
                    .args(args)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
            })
            .map_err(|e| error(e.to_string()))?;
        let begin = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if begin.elapsed() > COMMAND_BOUND => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(error(format!("no answer within {COMMAND_BOUND:?}")));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return Err(error(e.to_string())),
            }
        }
        let out = child.wait_with_output().map_err(|e| error(e.to_string()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(error(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_command_is_the_runtime_with_its_state_directory_and_nothing_around_it() {
        let runtime = OciRuntime {
            name: "crun".into(),
            program: "/usr/bin/crun".into(),
            root: "/run/opconform".into(),
            unshare: None,
            overlay: true,
            limits: true,
            rootless: None,
            ids: Err("root".into()),
            launcher: None,
        };
        let (program, args) =
            runtime.invocation(vec!["delete".to_string(), "--force".into(), "c1".into()]);
        assert_eq!(program, Path::new("/usr/bin/crun"));
        assert_eq!(
            args,
            ["--root", "/run/opconform", "delete", "--force", "c1"]
        );
    }

    #[test]
    fn capabilities_are_containerds_defaults_with_add_and_drop_applied() {
        let s = Security {
            add: vec!["NET_ADMIN".into(), "CAP_SYS_TIME".into()],
            drop: vec!["chown".into()],
            ..Security::default()
        };
        let caps = capabilities(&s);
        assert!(caps.contains(&Capability::NetAdmin));
        assert!(caps.contains(&Capability::SysTime));
        assert!(caps.contains(&Capability::Kill));
        assert!(!caps.contains(&Capability::Chown));
        assert_eq!(caps.len(), DEFAULT_CAPABILITIES.len() + 1);
        let none = capabilities(&Security {
            drop: vec!["ALL".into()],
            add: vec!["NET_BIND_SERVICE".into()],
            ..Security::default()
        });
        assert_eq!(
            none.into_iter().collect::<Vec<_>>(),
            [Capability::NetBindService]
        );
        let all = capabilities(&Security {
            privileged: true,
            ..Security::default()
        });
        assert!(all.contains(&Capability::SysAdmin));
    }

    #[test]
    fn the_fallback_line_names_the_setting_that_refuses_user_namespaces_and_what_a_pod_lacks() {
        let said = "unshare: write failed /proc/self/uid_map: Operation not permitted";
        let ubuntu = |key: &str| match key {
            "kernel.apparmor_restrict_unprivileged_userns" => Some("1".to_string()),
            "user.max_user_namespaces" => Some("63450".to_string()),
            _ => None,
        };
        let reason = userns_refused(said, ubuntu);
        assert_eq!(
            reason,
            "not root, and rootless containers need unprivileged user namespaces: \
             kernel.apparmor_restrict_unprivileged_userns=1: AppArmor confines unprivileged \
             user namespaces, as on Ubuntu 23.10 and later (unshare: write failed \
             /proc/self/uid_map: Operation not permitted)"
        );
        let debian =
            |key: &str| (key == "kernel.unprivileged_userns_clone").then(|| "0".to_string());
        assert!(
            userns_refused("", debian).ends_with(
                "kernel.unprivileged_userns_clone=0: unprivileged user namespaces are disabled"
            ),
            "{}",
            userns_refused("", debian)
        );
        assert!(
            userns_refused("unshare: unshare failed: EPERM", |_| None)
                .ends_with("the kernel refuses them (unshare: unshare failed: EPERM)")
        );
        let line = Isolation::Processes { reason }
            .warning()
            .expect("a line for host processes");
        assert!(
            line.starts_with("pods run as host processes, not containers: not root, and")
                && line.contains("apparmor_restrict_unprivileged_userns=1")
                && line.ends_with(
                    "a pod has no host name, no root filesystem of its own and no \
                     service-account files at /var/run/secrets/kubernetes.io/serviceaccount"
                ),
            "{line}"
        );
    }

    #[test]
    fn a_users_subordinate_ids_are_its_first_range_by_name_or_id_in_each_file() {
        let subuid = "root:100000:65536\n# a comment\nbuilder:0:0\nbuilder:200000:65536\nbuilder:300000:10\n";
        let subgid = "1001:400000:1000\n";
        assert_eq!(
            SubordinateIds::parse("builder", 1001, Some(subuid), Some(subgid)),
            Ok(SubordinateIds {
                uids: (200000, 65536),
                gids: (400000, 1000)
            })
        );
        assert_eq!(
            SubordinateIds::parse("other", 1002, Some(subuid), Some(subgid)),
            Err("/etc/subuid gives other no range of subordinate ids".to_string())
        );
        assert_eq!(
            SubordinateIds::parse("builder", 1001, Some(subuid), None),
            Err("/etc/subgid gives builder no range of subordinate ids".to_string())
        );
    }

    /// A rootless runtime whose user has `ids`, and a container spec asking for `security`.
    fn rootless_config(
        ids: Result<SubordinateIds, String>,
        security: Security,
    ) -> Result<Spec, OciError> {
        let runtime = OciRuntime {
            name: "runc".into(),
            program: "/usr/bin/runc".into(),
            root: "/tmp/state".into(),
            unshare: Some("/usr/bin/unshare".into()),
            overlay: true,
            limits: false,
            rootless: Some("/usr/bin/nsenter".into()),
            ids,
            launcher: None,
        };
        let spec = ContainerSpec {
            id: "c1".into(),
            bundle: "/tmp/bundle".into(),
            rootfs: Rootfs::Image("/tmp/image".into()),
            args: vec!["id".into()],
            env: Vec::new(),
            cwd: "/".into(),
            hostname: "pod-a".into(),
            network: None,
            terminal: false,
            mounts: Vec::new(),
            security,
            limits: Limits::default(),
        };
        runtime.config(&spec, Vec::new())
    }

    #[test]
    fn a_rootless_container_runs_as_its_users_where_subordinate_ids_are_mapped_and_as_root_elsewhere()
     {
        let asked = Security {
            uid: 1000,
            gid: 3000,
            additional_gids: vec![4000],
            ..Security::default()
        };
        let ids = SubordinateIds {
            uids: (200000, 65536),
            gids: (300000, 65536),
        };
        let config = rootless_config(Ok(ids), asked.clone()).unwrap();
        let user = config.process().as_ref().unwrap().user();
        assert_eq!(
            (user.uid(), user.gid(), user.additional_gids().clone()),
            (1000, 3000, Some(vec![4000]))
        );
        let linux = config.linux().as_ref().unwrap();
        let sizes = |m: &Option<Vec<oci_spec::runtime::LinuxIdMapping>>| {
            m.as_ref()
                .unwrap()
                .iter()
                .map(|m| (m.container_id(), m.host_id(), m.size()))
                .collect::<Vec<_>>()
        };
        // Two extents: each within one extent of the runtime's user namespace.
        assert_eq!(sizes(linux.uid_mappings()), [(0, 0, 1), (1, 1, 65536)]);
        assert_eq!(sizes(linux.gid_mappings()), [(0, 0, 1), (1, 1, 65536)]);
        let single = rootless_config(Err("no uidmap".into()), asked.clone()).unwrap();
        let user = single.process().as_ref().unwrap().user();
        assert_eq!((user.uid(), user.gid()), (0, 0));
        assert_eq!(
            sizes(single.linux().as_ref().unwrap().uid_mappings()),
            [(0, 0, 1)]
        );
        let beyond = rootless_config(
            Ok(ids),
            Security {
                uid: 70000,
                ..asked
            },
        )
        .unwrap_err();
        assert_eq!(
            beyond.to_string(),
            "runAsUser 70000 is not mapped in this rootless container's user namespace, which \
             maps 0 (this user) and 1 to 65536 (this user's subordinate ids, /etc/subuid and \
             /etc/subgid)"
        );
    }

    #[test]
    fn overlay_options_refuse_paths_that_would_split_them() {
        assert!(overlay_safe(Path::new("/tmp/a/b")));
        assert!(!overlay_safe(Path::new("/tmp/a,b")));
        assert!(!overlay_safe(Path::new("/tmp/a:b")));
    }
}
