//! What a mapped image runs. An image maps either to a single executable, which runs in
//! place of the container's `command[0]`, or to a directory holding the image's
//! filesystem, in which the container's process is found as a container runtime finds it.
//!
//! For a directory image, the argv follows Kubernetes' rules: `command` replaces the
//! image's entrypoint and `args` its cmd ([`ImageConfig`] says them, since a directory has
//! no image metadata). Then `argv[0]` is found inside the directory: with a slash it is the
//! directory plus that path; without one it is looked up on the container's `PATH`
//! ([`DEFAULT_PATH`] when the container sets none), each entry taken inside the directory.
//! The working directory is the directory plus `workingDir` (its root when unset), created
//! when missing as runc creates it.
//!
//! # Caveats
//! There is no chroot and no mount namespace: only the lookup of `argv[0]` and the working
//! directory are taken inside the directory. The process sees the host's filesystem — its
//! dynamic loader and libraries, `/etc`, `/tmp`, and every path it opens or executes
//! itself, including the programs a shell it runs finds on `PATH` — and symlinks in the
//! directory are followed by the host, so an absolute link points outside it. `..` in a
//! path does not climb above the directory.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

/// What a mapped path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An executable (anything that is neither a directory nor a tar archive).
    Executable,
    /// A directory holding an image's filesystem.
    Directory,
    /// An OCI image layout (a directory with an `oci-layout` file).
    Layout,
    /// A tar archive: a `docker save` archive or an OCI layout archive.
    Archive,
}

/// What `path` is, from the file system: a directory with an `oci-layout` file is an image
/// layout, another directory a filesystem; a file whose header is a tar header (`ustar` at
/// byte 257) an archive, another file an executable.
pub fn kind_of(path: &Path) -> Kind {
    if path.is_dir() {
        return if path.join("oci-layout").is_file() {
            Kind::Layout
        } else {
            Kind::Directory
        };
    }
    let mut header = [0u8; 262];
    let is_tar = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut header))
        .is_ok_and(|()| &header[257..262] == b"ustar");
    if is_tar {
        Kind::Archive
    } else {
        Kind::Executable
    }
}

/// The `PATH` of a container whose image and spec set none (the runtimes' default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Errors finding a container's process in a directory image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Neither the container nor the image says what to run.
    #[error(
        "no command specified: the container has no command and image {image:?} (the directory {root}) has no entrypoint or cmd"
    )]
    NoCommand {
        /// The image.
        image: String,
        /// Its directory.
        root: PathBuf,
    },
    /// `argv[0]` has no slash and is on no entry of `PATH`.
    #[error("exec: {name:?}: executable file not found in $PATH")]
    NotFound {
        /// `argv[0]`.
        name: String,
    },
    /// `argv[0]` has a slash and is not in the directory.
    #[error("exec: {name:?}: stat {name}")]
    Missing {
        /// `argv[0]`.
        name: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `argv[0]` has a slash and is a directory or not executable.
    #[error("exec: {name:?}: permission denied")]
    NotExecutable {
        /// `argv[0]`.
        name: String,
    },
    /// The working directory could not be created.
    #[error("cannot create the working directory {path}")]
    WorkingDir {
        /// The directory, as the container names it.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What a mapped image runs when the container does not say: its `ENTRYPOINT` and `CMD`
/// (a directory image's; both empty by default) and its `USER` (any mapped image's), as an
/// image's metadata would give them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// The image's entrypoint, replaced by the container's `command`.
    pub entrypoint: Vec<String>,
    /// The image's cmd, replaced by the container's `args`.
    pub cmd: Vec<String>,
    /// The image's `USER` (`uid[:gid]` or a name), used when the pod does not say; `None`
    /// is root.
    pub user: Option<String>,
}

/// The process of a container of a directory image, as the host runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// The executable, on the host (inside the directory).
    pub program: PathBuf,
    /// `argv[0]` as the container gave it.
    pub arg0: String,
    /// The rest of argv.
    pub args: Vec<String>,
    /// The working directory, on the host (inside the directory).
    pub cwd: PathBuf,
}

/// The argv of a container by Kubernetes' rules: `command` (when not empty) replaces the
/// entrypoint, and `args` (when not empty) replaces the cmd — which is dropped too when
/// `command` is given.
pub fn argv(config: &ImageConfig, command: &[String], args: &[String]) -> Vec<String> {
    let (entrypoint, cmd) = if command.is_empty() {
        (&config.entrypoint[..], &config.cmd[..])
    } else {
        (command, &[][..])
    };
    let tail = if args.is_empty() { cmd } else { args };
    entrypoint.iter().chain(tail).cloned().collect()
}

/// `path` (as the container names it) inside `root`: relative paths are taken from the
/// root, `.` is dropped and `..` never climbs above the root.
pub fn inside(root: &Path, path: &str) -> PathBuf {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::ParentDir => {
                parts.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    parts
        .iter()
        .fold(root.to_path_buf(), |p, part| p.join(part))
}

/// Whether `path` is a file someone may execute (following symlinks on the host).
fn executable(path: &Path) -> Result<bool, std::io::Error> {
    let meta = std::fs::metadata(path)?;
    Ok(!meta.is_dir() && meta.permissions().mode() & 0o111 != 0)
}

/// Finds `name` inside `root` as `exec.LookPath` would inside the container: a name with
/// a slash as is, otherwise on each entry of `path_env` (empty entries skipped).
///
/// # Errors
/// [`ImageError::NotFound`] when no entry has it, [`ImageError::Missing`] or
/// [`ImageError::NotExecutable`] for a name with a slash.
pub fn look_path(root: &Path, name: &str, path_env: &str) -> Result<PathBuf, ImageError> {
    if name.contains('/') {
        let candidate = inside(root, name);
        return match executable(&candidate) {
            Ok(true) => Ok(candidate),
            Ok(false) => Err(ImageError::NotExecutable {
                name: name.to_string(),
            }),
            Err(source) => Err(ImageError::Missing {
                name: name.to_string(),
                source,
            }),
        };
    }
    if !name.is_empty() {
        for dir in path_env.split(':').filter(|d| !d.is_empty()) {
            let candidate = inside(root, &format!("{dir}/{name}"));
            if matches!(executable(&candidate), Ok(true)) {
                return Ok(candidate);
            }
        }
    }
    Err(ImageError::NotFound {
        name: name.to_string(),
    })
}

/// The process of a container of `image`, mapped to the directory `root`: its argv by
/// [`argv`], `argv[0]` found by [`look_path`] on `path_env`, and its working directory
/// (created when missing).
///
/// # Errors
/// [`ImageError::NoCommand`] when the argv is empty, else those of [`look_path`] and
/// [`ImageError::WorkingDir`].
pub fn process(
    image: &str,
    root: &Path,
    config: &ImageConfig,
    command: &[String],
    args: &[String],
    path_env: Option<&str>,
    working_dir: Option<&str>,
) -> Result<Process, ImageError> {
    let mut argv = argv(config, command, args).into_iter();
    let Some(arg0) = argv.next() else {
        return Err(ImageError::NoCommand {
            image: image.to_string(),
            root: root.to_path_buf(),
        });
    };
    let program = look_path(root, &arg0, path_env.unwrap_or(DEFAULT_PATH))?;
    let working_dir = working_dir.filter(|w| !w.is_empty()).unwrap_or("/");
    let cwd = inside(root, working_dir);
    std::fs::create_dir_all(&cwd).map_err(|source| ImageError::WorkingDir {
        path: working_dir.to_string(),
        source,
    })?;
    Ok(Process {
        program,
        arg0,
        args: argv.collect(),
        cwd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    fn image(entrypoint: &[&str], cmd: &[&str]) -> ImageConfig {
        ImageConfig {
            entrypoint: strings(entrypoint),
            cmd: strings(cmd),
            user: None,
        }
    }

    /// A directory with `usr/bin/sh` (executable), `bin/data` (not executable),
    /// `opt/tool` (executable) and a directory `usr/local/bin/sh`.
    fn layout() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["usr/bin", "bin", "opt", "usr/local/bin/sh"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for (file, mode) in [
            ("usr/bin/sh", 0o755),
            ("bin/data", 0o644),
            ("opt/tool", 0o700),
        ] {
            let path = root.join(file);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        dir
    }

    #[test]
    fn command_replaces_the_entrypoint_and_args_replace_the_cmd() {
        let config = image(&["/entry", "-e"], &["default"]);
        let none: Vec<String> = Vec::new();
        assert_eq!(argv(&config, &none, &none), ["/entry", "-e", "default"]);
        assert_eq!(
            argv(&config, &none, &strings(&["x"])),
            ["/entry", "-e", "x"]
        );
        assert_eq!(argv(&config, &strings(&["sh"]), &none), ["sh"]);
        assert_eq!(
            argv(&config, &strings(&["sh", "-c"]), &strings(&["echo hi"])),
            ["sh", "-c", "echo hi"]
        );
        assert_eq!(
            argv(&ImageConfig::default(), &none, &strings(&["a"])),
            ["a"]
        );
    }

    #[test]
    fn names_without_a_slash_are_found_on_the_path_inside_the_directory() {
        let dir = layout();
        let root = dir.path();
        // usr/local/bin/sh is a directory: skipped for usr/bin/sh.
        assert_eq!(
            look_path(root, "sh", DEFAULT_PATH).unwrap(),
            root.join("usr/bin/sh")
        );
        assert_eq!(
            look_path(root, "tool", "/nope::/opt").unwrap(),
            root.join("opt/tool")
        );
        // Not executable: skipped, and so not found.
        let err = look_path(root, "data", "/bin").unwrap_err();
        assert_eq!(
            err.to_string(),
            "exec: \"data\": executable file not found in $PATH"
        );
        // Only the container's PATH counts, not the host's.
        let err = look_path(root, "sh", "/opt").unwrap_err();
        assert!(matches!(err, ImageError::NotFound { .. }), "{err}");
        assert!(matches!(
            look_path(root, "", DEFAULT_PATH),
            Err(ImageError::NotFound { .. })
        ));
    }

    #[test]
    fn names_with_a_slash_are_taken_from_the_root_of_the_directory() {
        let dir = layout();
        let root = dir.path();
        assert_eq!(
            look_path(root, "/opt/tool", "").unwrap(),
            root.join("opt/tool")
        );
        assert_eq!(
            look_path(root, "opt/tool", "").unwrap(),
            root.join("opt/tool")
        );
        assert_eq!(
            look_path(root, "/../../opt/./tool", "").unwrap(),
            root.join("opt/tool")
        );
        let err = look_path(root, "/bin/nope", DEFAULT_PATH).unwrap_err();
        assert!(matches!(err, ImageError::Missing { .. }), "{err}");
        assert_eq!(err.to_string(), "exec: \"/bin/nope\": stat /bin/nope");
        let err = look_path(root, "/bin/data", DEFAULT_PATH).unwrap_err();
        assert_eq!(err.to_string(), "exec: \"/bin/data\": permission denied");
        let err = look_path(root, "/usr/local/bin/sh", DEFAULT_PATH).unwrap_err();
        assert!(matches!(err, ImageError::NotExecutable { .. }), "{err}");
    }

    #[test]
    fn a_container_without_command_runs_the_configured_entrypoint_with_its_args() {
        let dir = layout();
        let root = dir.path();
        let config = image(&["sh", "-c"], &["echo default"]);
        let p = process("img", root, &config, &[], &strings(&["echo x"]), None, None).unwrap();
        assert_eq!(p.program, root.join("usr/bin/sh"));
        assert_eq!(p.arg0, "sh");
        assert_eq!(p.args, ["-c", "echo x"]);
        assert_eq!(p.cwd, root);
    }

    #[test]
    fn a_container_with_nothing_to_run_names_the_image_and_what_is_missing() {
        let dir = layout();
        let root = dir.path();
        let none: Vec<String> = Vec::new();
        let err = process(
            "busybox:1.36",
            root,
            &ImageConfig::default(),
            &none,
            &none,
            None,
            None,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ImageError::NoCommand { .. }));
        assert!(text.contains("no command specified"), "{text}");
        assert!(text.contains("\"busybox:1.36\""), "{text}");
        assert!(text.contains("no entrypoint or cmd"), "{text}");
    }

    #[test]
    fn the_containers_path_and_working_directory_are_taken_inside_the_directory() {
        let dir = layout();
        let root = dir.path();
        let p = process(
            "img",
            root,
            &ImageConfig::default(),
            &strings(&["tool", "a"]),
            &strings(&["b"]),
            Some("/opt"),
            Some("/work/../app"),
        )
        .unwrap();
        assert_eq!(p.program, root.join("opt/tool"));
        assert_eq!(p.args, ["a", "b"]);
        assert_eq!(p.cwd, root.join("app"));
        assert!(
            root.join("app").is_dir(),
            "the working directory is created"
        );
    }
}
