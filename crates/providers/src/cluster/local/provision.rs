//! Building the real Kubernetes binaries when they are not there yet, so that a fresh
//! clone's tests need nothing beyond Rust and Go: an embedded copy of
//! `ci/kubernetes/build.sh` builds etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kubectl at the versions pinned in `ci/kubernetes/versions.env` (or
//! another of the Kubernetes versions it knows: [`Provisioner::of`]), from the Go module
//! proxy, into the cache ([`super::pinned::build_dir`]).
//!
//! It happens once however many threads and processes ask at the same time: the one that
//! holds an exclusive lock on `<cache>/kubernetes-<version>.lock` builds, the others wait
//! for it (and say so on stderr), and whoever gets the lock looks again before building.
//! Progress goes to stderr: what is built and where, a line every 30 s while the build
//! runs, the time it took.
//!
//! `OPCONFORM_NO_PROVISION=1` turns building off ([`opted_out`]): the binaries are then
//! only looked for, as `ci/kubernetes/build.sh control-plane` or setup-envtest left them.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::pinned::{VERSIONS, build_dir_in, cache_dir, is_executable};
use super::versions::KubernetesVersion;

/// The environment variable that turns building off when set to anything but empty or `0`.
pub const NO_PROVISION_VAR: &str = "OPCONFORM_NO_PROVISION";

/// The binaries a build provides, all in [`Provisioner::bin_dir`] (etcd as a link into its
/// own directory of the cache), as `ci/kubernetes/build.sh control-plane` leaves them.
pub const CONTROL_PLANE: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// The oldest Go that builds the pinned Kubernetes (the `go` directive of its go.mod);
/// newer minors need newer Go (1.37: Go 1.26), which the build itself then asks for.
pub const MIN_GO: (u32, u32) = (1, 24);

/// The build script, run from a temporary directory beside a copy of the versions file.
const BUILD_SCRIPT: &str = include_str!("../../../../../ci/kubernetes/build.sh");

/// How often a running build is reported as still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// How many of the build's last stderr lines a failure carries.
const STDERR_TAIL: usize = 20;

/// Errors of building the binaries.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// No `go` on `PATH`.
    #[error(
        "go is not on PATH: install Go {}.{} or newer from go.dev or your package manager, \
         or set KUBEBUILDER_ASSETS to a directory holding etcd, kube-apiserver and kubectl \
         (`KUBEBUILDER_ASSETS=$(setup-envtest use -p path {}.x)`)",
        MIN_GO.0, MIN_GO.1, version.minor_name()
    )]
    NoGo {
        /// The Kubernetes version to build.
        version: KubernetesVersion,
    },
    /// The `go` on `PATH` is older than [`MIN_GO`].
    #[error(
        "{} is {found}, too old to build Kubernetes {}: install Go {}.{} or newer from go.dev \
         or your package manager, or set KUBEBUILDER_ASSETS to a directory holding etcd, \
         kube-apiserver and kubectl (`KUBEBUILDER_ASSETS=$(setup-envtest use -p path {}.x)`)",
        go.display(), version.full(), MIN_GO.0, MIN_GO.1, version.minor_name()
    )]
    GoTooOld {
        /// The Kubernetes version to build.
        version: KubernetesVersion,
        /// The go found.
        go: PathBuf,
        /// Its version, as `go env GOVERSION` gives it.
        found: String,
    },
    /// The cache directory could not be made.
    #[error("cannot create the cache directory {}", path.display())]
    Cache {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot lock {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The build script could not be written out.
    #[error("cannot write the build script into {}", path.display())]
    Stage {
        /// Where it was written to.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The build could not be started or waited for.
    #[error("cannot run `{command}`")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The build failed.
    #[error("`{command}` failed ({status}); the last lines of its stderr:\n{stderr}")]
    Failed {
        /// The command.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// Its last stderr lines.
        stderr: String,
    },
    /// The build succeeded but a binary is still missing.
    #[error("`{command}` succeeded but left no {binary} in {}", dir.display())]
    Incomplete {
        /// The command.
        command: String,
        /// The binary missing.
        binary: &'static str,
        /// Where it should be.
        dir: PathBuf,
    },
}

impl ProvisionError {
    /// Whether nothing can be built here (no usable Go), as opposed to a build that failed.
    pub fn is_impossible(&self) -> bool {
        matches!(self, Self::NoGo { .. } | Self::GoTooOld { .. })
    }
}

/// Whether building is turned off: [`NO_PROVISION_VAR`] is set to anything but empty or `0`.
pub fn opted_out() -> bool {
    opt_out_value(std::env::var_os(NO_PROVISION_VAR).as_deref())
}

fn opt_out_value(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// Builds the control-plane binaries into a cache directory, once, under its lock.
#[derive(Debug, Clone)]
pub struct Provisioner {
    /// The cache: the build's output below it, the lock file in it.
    cache: PathBuf,
    /// The Kubernetes version built.
    version: KubernetesVersion,
    /// The build script's text.
    script: String,
    /// The `PATH` that `go` and `bash` are found on.
    path: OsString,
    /// How often a running build is reported.
    progress_every: Duration,
}

impl Provisioner {
    /// The pinned build (`ci/kubernetes/build.sh control-plane`) into
    /// [`super::pinned::cache_dir`], with the `go` and `bash` on `PATH`.
    pub fn pinned() -> Self {
        Self::of(KubernetesVersion::pinned())
    }

    /// The build of Kubernetes `version` (`KUBERNETES_VERSION=<version>
    /// ci/kubernetes/build.sh control-plane`) into [`super::pinned::cache_dir`], with the
    /// `go` and `bash` on `PATH`.
    pub fn of(version: KubernetesVersion) -> Self {
        Self::new(
            cache_dir(),
            BUILD_SCRIPT.to_string(),
            std::env::var_os("PATH").unwrap_or_default(),
        )
        .building(version)
    }

    /// A build of the pinned version that runs `script` (as `bash <script> control-plane`,
    /// beside a copy of the versions file, with `OPCONFORM_CACHE=<cache>` and
    /// `KUBERNETES_VERSION=<version>`) and finds its tools on `path`.
    pub(crate) fn new(cache: PathBuf, script: String, path: OsString) -> Self {
        Self {
            cache,
            version: KubernetesVersion::pinned(),
            script,
            path,
            progress_every: PROGRESS_EVERY,
        }
    }

    /// The same, building Kubernetes `version`.
    pub fn building(mut self, version: KubernetesVersion) -> Self {
        self.version = version;
        self
    }

    /// The Kubernetes version it builds.
    pub fn version(&self) -> KubernetesVersion {
        self.version
    }

    /// The directory the binaries are in once built.
    pub fn bin_dir(&self) -> PathBuf {
        build_dir_in(&self.cache, self.version.full())
    }

    /// The lock file: `<cache>/kubernetes-<version>.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.cache
            .join(format!("kubernetes-{}.lock", self.version.full()))
    }

    /// The `PATH` tools are looked for on.
    pub fn search_path(&self) -> &OsStr {
        &self.path
    }

    /// The first of [`CONTROL_PLANE`] that is not in [`Self::bin_dir`].
    pub fn missing(&self) -> Option<&'static str> {
        let dir = self.bin_dir();
        CONTROL_PLANE
            .into_iter()
            .find(|name| !is_executable(&dir.join(name)))
    }

    /// Makes sure every binary of [`CONTROL_PLANE`] is in [`Self::bin_dir`], building
    /// them when one is not (blocking the calling thread: a cold build takes about 13
    /// minutes on 2 cores), or waiting for the build another thread or process runs.
    ///
    /// # Errors
    /// [`ProvisionError::NoGo`] or [`ProvisionError::GoTooOld`] when nothing can be built
    /// here; the others when the build could not run or failed.
    pub fn ensure(&self) -> Result<PathBuf, ProvisionError> {
        let bin_dir = self.bin_dir();
        if self.missing().is_none() {
            return Ok(bin_dir);
        }
        let go = self.usable_go()?;
        std::fs::create_dir_all(&self.cache).map_err(|source| ProvisionError::Cache {
            path: self.cache.clone(),
            source,
        })?;
        let lock_path = self.lock_path();
        let locked = |source| ProvisionError::Lock {
            path: lock_path.clone(),
            source,
        };
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(locked)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                eprintln!(
                    "opconform: waiting for the Kubernetes build in progress (another test or process holds {})",
                    lock_path.display()
                );
                let waited = Instant::now();
                lock.lock().map_err(locked)?;
                eprintln!(
                    "opconform: the Kubernetes build in progress ended after {} s of waiting",
                    waited.elapsed().as_secs()
                );
            }
            Err(std::fs::TryLockError::Error(source)) => return Err(locked(source)),
        }
        // Whoever held the lock before may have built them.
        if self.missing().is_none() {
            return Ok(bin_dir);
        }
        let built = self.build(&go);
        drop(lock);
        built
    }

    /// The `go` on the search path, refused when older than [`MIN_GO`]; its version (or
    /// its path when that cannot be read: the build will tell).
    fn usable_go(&self) -> Result<String, ProvisionError> {
        let go = on_path("go", &self.path).ok_or(ProvisionError::NoGo {
            version: self.version,
        })?;
        let version = Command::new(&go)
            .args(["env", "GOVERSION"])
            .env("PATH", &self.path)
            .env("GOTOOLCHAIN", "local")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_default();
        match go_release(&version) {
            Some(release) if release < MIN_GO => Err(ProvisionError::GoTooOld {
                go,
                found: version,
                version: self.version,
            }),
            Some(_) => Ok(version),
            None => Ok(go.display().to_string()),
        }
    }

    /// Runs the build script from a temporary directory, its stderr passed on (and its
    /// last lines kept), reporting every [`Self::progress_every`] until it ends.
    fn build(&self, go: &str) -> Result<PathBuf, ProvisionError> {
        let bin_dir = self.bin_dir();
        let stage = tempfile::Builder::new()
            .prefix("opconform-kubernetes-build-")
            .tempdir()
            .map_err(|source| ProvisionError::Stage {
                path: std::env::temp_dir(),
                source,
            })?;
        let script = stage.path().join("build.sh");
        for (path, text) in [
            (script.clone(), self.script.as_str()),
            (stage.path().join("versions.env"), VERSIONS),
        ] {
            std::fs::write(&path, text).map_err(|source| ProvisionError::Stage { path, source })?;
        }
        let command = format!(
            "KUBERNETES_VERSION={} bash {} control-plane",
            self.version.full(),
            script.display()
        );
        eprintln!(
            "opconform: building Kubernetes {} and etcd {} ({}) with {go}, from the Go module proxy, \
             into {}: once for every test; a cold build takes about 13 minutes on 2 cores \
             ({NO_PROVISION_VAR}=1 turns this off)",
            self.version.full(),
            self.version.etcd(),
            CONTROL_PLANE.join(", "),
            bin_dir.display()
        );
        let started = Instant::now();
        let spawn_failed = |source| ProvisionError::Spawn {
            command: command.clone(),
            source,
        };
        let mut child = Command::new("bash")
            .arg(&script)
            .arg("control-plane")
            .current_dir(stage.path())
            .env("OPCONFORM_CACHE", &self.cache)
            .env("KUBERNETES_VERSION", self.version.full())
            .env("PATH", &self.path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_failed)?;
        let stderr = child.stderr.take();
        let tail = std::thread::spawn(move || {
            let mut tail = VecDeque::with_capacity(STDERR_TAIL);
            for line in stderr.into_iter().flat_map(|s| BufReader::new(s).lines()) {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            Vec::from(tail).join("\n")
        });
        let (done, ended) = mpsc::channel();
        std::thread::spawn(move || {
            // The receiver is gone only when the caller is.
            let _ = done.send(child.wait_with_output());
        });
        let output = loop {
            match ended.recv_timeout(self.progress_every) {
                Ok(output) => break output,
                Err(mpsc::RecvTimeoutError::Timeout) => eprintln!(
                    "opconform: still building the Kubernetes binaries, {} s",
                    started.elapsed().as_secs()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(std::io::Error::other("the build's waiting thread ended"));
                }
            }
        }
        .map_err(spawn_failed)?;
        let stderr = tail.join().unwrap_or_default();
        if !output.status.success() {
            return Err(ProvisionError::Failed {
                command,
                status: output.status,
                stderr,
            });
        }
        if let Some(binary) = self.missing() {
            return Err(ProvisionError::Incomplete {
                command,
                binary,
                dir: bin_dir,
            });
        }
        eprintln!(
            "opconform: built the Kubernetes binaries in {} s: {}",
            started.elapsed().as_secs(),
            bin_dir.display()
        );
        Ok(bin_dir)
    }
}

/// `name` in the first directory of `path` that holds it as an executable file.
pub fn on_path(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// The major and minor release of a `go env GOVERSION` answer (`go1.26.8`, `go1.24rc1`,
/// `devel go1.25-abcdef …`).
fn go_release(version: &str) -> Option<(u32, u32)> {
    let number = version
        .split_whitespace()
        .find_map(|word| word.strip_prefix("go"))?;
    let (major, rest) = number.split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
impl Provisioner {
    /// The same, reporting a running build every `every`.
    pub(crate) fn reporting_every(mut self, every: Duration) -> Self {
        self.progress_every = every;
        self
    }
}

/// Stand-ins for the build and for go, so that no test builds Kubernetes.
#[cfg(test)]
pub(crate) mod fake {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    use super::Provisioner;

    /// A build that counts its runs in `<cache>/runs`, takes a moment, and leaves an
    /// executable stand-in of every control-plane binary where the real one would be
    /// (found through the versions file beside it, as the real script does).
    pub(crate) const BUILD: &str = r#"set -eu
chosen=${KUBERNETES_VERSION:-}
. "$(dirname "$0")/versions.env"
KUBERNETES_VERSION=${chosen:-$KUBERNETES_VERSION}
[ "$1" = control-plane ]
echo run >> "$OPCONFORM_CACHE/runs"
echo "kubernetes build: building" >&2
sleep 0.3
bin="$OPCONFORM_CACHE/kubernetes-$KUBERNETES_VERSION/bin"
mkdir -p "$bin"
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  printf '#!/bin/sh\n' > "$bin/$b"
  chmod +x "$bin/$b"
done
echo "$bin"
"#;

    /// Writes an executable shell script.
    pub(crate) fn executable(path: &Path, body: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A directory with a `go` that answers `version` to `go env GOVERSION`.
    pub(crate) fn go_dir(root: &Path, version: &str) -> PathBuf {
        let dir = root.join("fake-go");
        executable(&dir.join("go"), &format!("echo {version}"));
        dir
    }

    /// `dirs`, then the test's own `PATH` (for bash and the tools the scripts use).
    pub(crate) fn path_with(dirs: &[&Path]) -> OsString {
        let inherited = std::env::var_os("PATH").unwrap_or_default();
        let all = dirs
            .iter()
            .map(|d| d.to_path_buf())
            .chain(std::env::split_paths(&inherited));
        std::env::join_paths(all).unwrap()
    }

    /// A provisioner into `<root>/cache` running `script`, with a recent enough go.
    pub(crate) fn provisioner(root: &Path, script: &str) -> Provisioner {
        let go = go_dir(root, "go1.26.0");
        Provisioner::new(root.join("cache"), script.to_string(), path_with(&[&go]))
    }

    /// How many times the build ran into `<root>/cache`.
    pub(crate) fn runs(root: &Path) -> usize {
        std::fs::read_to_string(root.join("cache/runs")).map_or(0, |s| s.lines().count())
    }
}

#[cfg(test)]
mod tests {
    use super::super::pinned::{etcd_version, kubernetes_version};
    use super::fake::{self, BUILD};
    use super::*;

    #[test]
    fn two_provisioners_racing_on_one_cache_build_once_and_both_find_every_binary() {
        let root = tempfile::tempdir().unwrap();
        let provisioner =
            fake::provisioner(root.path(), BUILD).reporting_every(Duration::from_millis(50));
        let start = std::sync::Barrier::new(2);
        let results: Vec<_> = std::thread::scope(|s| {
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let provisioner = provisioner.clone();
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        provisioner.ensure()
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for result in results {
            assert_eq!(result.unwrap(), provisioner.bin_dir());
        }
        assert_eq!(fake::runs(root.path()), 1, "the build ran once");
        assert_eq!(provisioner.missing(), None);
        assert!(
            provisioner
                .lock_path()
                .ends_with(format!("cache/kubernetes-{}.lock", kubernetes_version()))
        );
        // Asked again, it finds them without building.
        provisioner.ensure().unwrap();
        assert_eq!(fake::runs(root.path()), 1);
    }

    #[test]
    fn a_missing_go_is_named_in_the_error_with_what_to_install() {
        let root = tempfile::tempdir().unwrap();
        let empty = root.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let provisioner = Provisioner::new(
            root.path().join("cache"),
            BUILD.to_string(),
            empty.into_os_string(),
        );
        let e = provisioner.ensure().unwrap_err();
        assert!(e.is_impossible());
        let e = e.to_string();
        assert!(e.contains("go is not on PATH"), "{e}");
        assert!(
            e.contains("install Go 1.24 or newer from go.dev or your package manager"),
            "{e}"
        );
        assert!(
            e.contains("KUBEBUILDER_ASSETS=$(setup-envtest use -p path 1.34.x)"),
            "{e}"
        );
        assert_eq!(fake::runs(root.path()), 0);
    }

    #[test]
    fn a_go_older_than_the_one_kubernetes_needs_is_refused_before_building() {
        let root = tempfile::tempdir().unwrap();
        let go = fake::go_dir(root.path(), "go1.22.5");
        let provisioner = Provisioner::new(
            root.path().join("cache"),
            BUILD.to_string(),
            fake::path_with(&[&go]),
        );
        let e = provisioner.ensure().unwrap_err();
        assert!(e.is_impossible());
        let e = e.to_string();
        assert!(
            e.contains("is go1.22.5, too old to build Kubernetes v1.34"),
            "{e}"
        );
        assert!(e.contains("install Go 1.24 or newer"), "{e}");
        assert_eq!(fake::runs(root.path()), 0);
    }

    #[test]
    fn a_failed_build_names_the_command_its_exit_status_and_the_last_lines_of_its_stderr() {
        let root = tempfile::tempdir().unwrap();
        let failing = "for i in $(seq 1 30); do echo \"line $i\" >&2; done\nexit 3\n";
        let e = fake::provisioner(root.path(), failing)
            .ensure()
            .unwrap_err();
        assert!(!e.is_impossible());
        let e = e.to_string();
        assert!(
            e.contains("build.sh control-plane` failed (exit status: 3)"),
            "{e}"
        );
        assert!(
            e.contains(&format!(
                "`KUBERNETES_VERSION={} bash ",
                kubernetes_version()
            )),
            "{e}"
        );
        let lines: Vec<_> = e.lines().collect();
        assert!(
            lines.contains(&"line 30") && lines.contains(&"line 11"),
            "{e}"
        );
        assert!(!lines.contains(&"line 10"), "only the last lines: {e}");
    }

    #[test]
    fn a_build_that_leaves_a_binary_out_is_reported_as_incomplete() {
        let root = tempfile::tempdir().unwrap();
        let partial = BUILD.replace("kube-scheduler kubectl", "kubectl");
        let e = fake::provisioner(root.path(), &partial)
            .ensure()
            .unwrap_err()
            .to_string();
        assert!(e.contains("succeeded but left no kube-scheduler in"), "{e}");
    }

    #[test]
    fn a_complete_cache_is_used_without_building_or_even_looking_for_go() {
        let root = tempfile::tempdir().unwrap();
        let provisioner = Provisioner::new(
            root.path().join("cache"),
            "exit 1".to_string(),
            OsString::new(),
        );
        for name in CONTROL_PLANE {
            fake::executable(&provisioner.bin_dir().join(name), "");
        }
        assert_eq!(provisioner.ensure().unwrap(), provisioner.bin_dir());
    }

    #[test]
    fn the_embedded_script_run_from_a_temporary_directory_completes_a_cache_missing_only_the_etcd_link()
     {
        // Every binary built, etcd in its own directory but not yet linked beside the
        // others: the real script builds nothing (its go is never run) and links it.
        let root = tempfile::tempdir().unwrap();
        let go = fake::go_dir(root.path(), "go1.26.0");
        let provisioner = Provisioner::new(
            root.path().join("cache"),
            BUILD_SCRIPT.to_string(),
            fake::path_with(&[&go]),
        );
        for name in CONTROL_PLANE.into_iter().filter(|n| *n != "etcd") {
            fake::executable(&provisioner.bin_dir().join(name), "");
        }
        let etcd = root
            .path()
            .join(format!("cache/etcd-{}/bin/etcd", etcd_version()));
        fake::executable(&etcd, "");
        assert_eq!(provisioner.missing(), Some("etcd"));
        assert_eq!(provisioner.ensure().unwrap(), provisioner.bin_dir());
        let linked = provisioner.bin_dir().join("etcd");
        assert_eq!(
            std::fs::canonicalize(linked).unwrap(),
            std::fs::canonicalize(etcd).unwrap()
        );
    }

    #[test]
    fn the_opt_out_is_on_for_any_value_but_empty_and_0() {
        assert!(!opt_out_value(None));
        assert!(!opt_out_value(Some(OsStr::new(""))));
        assert!(!opt_out_value(Some(OsStr::new("0"))));
        assert!(opt_out_value(Some(OsStr::new("1"))));
        assert!(opt_out_value(Some(OsStr::new("yes"))));
    }

    #[test]
    fn go_releases_are_read_from_what_go_env_goversion_says() {
        assert_eq!(go_release("go1.26.8"), Some((1, 26)));
        assert_eq!(go_release("go1.24rc1"), Some((1, 24)));
        assert_eq!(go_release("devel go1.25-abcdef Tue"), Some((1, 25)));
        assert_eq!(go_release(""), None);
        assert!(go_release("go1.23.4").unwrap() < MIN_GO);
    }

    #[test]
    fn the_embedded_script_builds_the_control_plane_and_links_etcd_beside_the_rest() {
        // What `Provisioner::missing` and `Binaries::in_dir` rely on: one directory
        // holds every binary, etcd as a link into its own directory of the cache.
        assert!(BUILD_SCRIPT.contains(
            "control-plane) components+=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)"
        ));
        assert!(
            BUILD_SCRIPT.contains(r#"bin_dir="$cache_root/kubernetes-$KUBERNETES_VERSION/bin""#)
        );
        assert!(
            BUILD_SCRIPT.contains(r#"ln -sfn "../../etcd-$ETCD_VERSION/bin/etcd" "$bin_dir/etcd""#)
        );
        assert!(BUILD_SCRIPT.contains(r#". "$(dirname "$0")/versions.env""#));
        assert_eq!(KubernetesVersion::pinned().minor_name(), "1.34");
    }

    #[test]
    fn a_chosen_version_is_built_into_a_directory_and_under_a_lock_of_its_own() {
        let root = tempfile::tempdir().unwrap();
        let v137 = KubernetesVersion::resolve("1.37").unwrap();
        let newer = fake::provisioner(root.path(), BUILD).building(v137);
        let pinned = fake::provisioner(root.path(), BUILD);
        assert!(newer.bin_dir().ends_with("cache/kubernetes-v1.37.2/bin"));
        assert!(newer.lock_path().ends_with("cache/kubernetes-v1.37.2.lock"));
        assert_eq!(newer.ensure().unwrap(), newer.bin_dir());
        assert_eq!(newer.missing(), None);
        assert_eq!(
            pinned.missing(),
            Some("etcd"),
            "the pinned version is not built by building another"
        );
        assert_eq!(fake::runs(root.path()), 1);
    }

    #[test]
    fn the_embedded_script_refuses_an_unknown_version_naming_the_known_ones() {
        let root = tempfile::tempdir().unwrap();
        let stage = root.path().join("stage");
        std::fs::create_dir(&stage).unwrap();
        std::fs::write(stage.join("build.sh"), BUILD_SCRIPT).unwrap();
        std::fs::write(stage.join("versions.env"), VERSIONS).unwrap();
        let out = Command::new("bash")
            .arg(stage.join("build.sh"))
            .args(["--version", "1.99", "control-plane"])
            .env("OPCONFORM_CACHE", root.path().join("cache"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("unknown Kubernetes version '1.99': expected one of v1.32.13 v1.33.13 v1.34.4 v1.35.4 v1.36.3 v1.37.2"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}
