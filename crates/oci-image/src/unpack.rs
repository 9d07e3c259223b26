//! Applying layers — uncompressed tar streams — one after the other to a root
//! filesystem directory, as the image spec's layer.md says:
//! - regular files, directories, symlinks and hard links are created; an entry replaces
//!   what a lower layer put at its path (a directory stays a directory when the entry is
//!   one too: its contents are kept);
//! - `.wh.<name>` deletes `<name>` from lower layers, and `.wh..wh..opq` makes its
//!   directory opaque: everything lower layers put in it is deleted, what this same layer
//!   puts there is kept, whichever comes first in the tar; whiteouts themselves are not
//!   written;
//! - modes are kept (setuid, setgid and sticky bits included), modification times are
//!   those of the tar, and ownership is kept when running as root (as only root can give
//!   files away); directories get their mode and time after every layer is applied, so
//!   that a read-only directory can still be filled and its time is not changed by
//!   writing into it.
//!
//! # Safety
//! Nothing is written outside the root. Entry paths are taken inside it: a leading `/`
//! is dropped and `..` cannot climb above it. Every parent directory of an entry is
//! resolved within the root as a chroot would: a symlink among them is followed with
//! its target read relative to the root (an absolute target starts again at the root, and
//! `..` stops there), and the last component is never followed (an entry replaces a
//! symlink at its path rather than writing through it). A hard link's target is resolved
//! the same way. The root directory is private to the unpack while it runs, so nothing
//! can swap a directory for a symlink between the check and the write.
//!
//! # Caveats
//! - Device nodes, fifos and sockets are skipped: the container runtime provides `/dev`.
//! - Extended attributes (file capabilities, SELinux labels) and ACLs are not applied.
//! - When not running as root, files belong to the user running the unpack, and a
//!   setgid bit on a file of a group that user is not in is dropped by the kernel.
//! - A parent path that a lower layer made a regular file is an error, not replaced.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use filetime::FileTime;

/// How many symlinks are followed to resolve one path (as Linux's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// The marker that makes its directory opaque.
const OPAQUE: &str = ".wh..wh..opq";
/// The prefix of a whiteout.
const WHITEOUT: &str = ".wh.";

/// A tar entry that could not be applied.
#[derive(Debug)]
pub(crate) struct EntryError {
    /// The entry's path as the tar gives it (`<tar stream>` for the tar itself).
    pub(crate) entry: String,
    pub(crate) source: io::Error,
}

/// The mode and time a directory gets once every layer is applied.
struct DirMeta {
    mode: u32,
    mtime: FileTime,
}

/// Applies layers to one root directory.
pub(crate) struct Unpacker {
    root: PathBuf,
    preserve_owner: bool,
    /// Directories by path relative to the root (`""` for the root).
    dirs: HashMap<PathBuf, DirMeta>,
}

/// One step of a path being resolved.
enum Step {
    Root,
    Up,
    Name(OsString),
}

impl Unpacker {
    /// An unpacker for the (empty, private) directory `root`; ownership is applied when
    /// `preserve_owner`.
    pub(crate) fn new(root: PathBuf, preserve_owner: bool) -> Self {
        Self {
            root,
            preserve_owner,
            dirs: HashMap::new(),
        }
    }

    /// Applies one layer: an uncompressed tar stream.
    pub(crate) fn apply(&mut self, tar: impl Read) -> Result<(), EntryError> {
        let stream_error = |source| EntryError {
            entry: "<tar stream>".to_owned(),
            source,
        };
        let mut archive = tar::Archive::new(tar);
        // Paths (relative to the root) that this layer wrote.
        let mut written = HashSet::new();
        for entry in archive.entries().map_err(stream_error)? {
            let mut entry = entry.map_err(stream_error)?;
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            self.apply_entry(&mut entry, &mut written)
                .map_err(|source| EntryError {
                    entry: name,
                    source,
                })?;
        }
        Ok(())
    }

    /// Gives directories their mode and time, once every layer is applied.
    pub(crate) fn finish(self) -> Result<(), EntryError> {
        for (rel, meta) in self.dirs {
            let path = self.root.join(&rel);
            match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {}
                _ => continue,
            }
            let apply = || -> io::Result<()> {
                fs::set_permissions(&path, fs::Permissions::from_mode(meta.mode))?;
                filetime::set_symlink_file_times(&path, meta.mtime, meta.mtime)
            };
            apply().map_err(|source| EntryError {
                entry: format!("{}/", rel.display()),
                source,
            })?;
        }
        Ok(())
    }

    fn apply_entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        written: &mut HashSet<PathBuf>,
    ) -> io::Result<()> {
        let path_components = components(&entry.path_bytes());
        let kind = entry.header().entry_type();
        let header = entry.header();
        let mode = header.mode()? & 0o7777;
        let mtime = FileTime::from_unix_time(i64::try_from(header.mtime()?).unwrap_or(0), 0);
        let owner = if self.preserve_owner {
            Some((id(header.uid()?)?, id(header.gid()?)?))
        } else {
            None
        };

        let Some((name, parents)) = path_components.split_last() else {
            // The root itself (`./`).
            if kind == tar::EntryType::Directory {
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&self.root, Some(uid), Some(gid))?;
                }
                self.dirs.insert(PathBuf::new(), DirMeta { mode, mtime });
            }
            return Ok(());
        };

        let name_str = name.to_string_lossy();
        if name_str == OPAQUE {
            if let Some(dir) = self.resolve_dir(parents, false)? {
                self.clear_lower(&dir, written)?;
            }
            return Ok(());
        }
        if let Some(hidden) = name_str.strip_prefix(WHITEOUT) {
            // `.wh..wh.*` other than the opaque marker are aufs metadata: ignored.
            if !hidden.starts_with(WHITEOUT)
                && !matches!(hidden, "" | "." | "..")
                && let Some(dir) = self.resolve_dir(parents, false)?
            {
                let hidden = OsStr::from_bytes(&name.as_bytes()[WHITEOUT.len()..]);
                let target = dir.join(hidden);
                if !written.contains(&target) {
                    remove_any(&self.root.join(&target))?;
                }
            }
            return Ok(());
        }

        use tar::EntryType as T;
        if !matches!(
            kind,
            T::Regular | T::Continuous | T::GNUSparse | T::Directory | T::Symlink | T::Link
        ) {
            // Devices, fifos, and headers that are not files (global pax headers, volume
            // labels): skipped.
            return Ok(());
        }
        let dir = self
            .resolve_dir(parents, true)?
            .ok_or_else(|| io::Error::other("cannot create the parent directory"))?;
        let rel = dir.join(name);
        let path = self.root.join(&rel);
        let existing = match fs::symlink_metadata(&path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };

        match kind {
            T::Directory => {
                match existing {
                    Some(m) if m.is_dir() => {}
                    Some(_) => {
                        fs::remove_file(&path)?;
                        fs::create_dir(&path)?;
                    }
                    None => fs::create_dir(&path)?,
                }
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
                }
                self.dirs.insert(rel.clone(), DirMeta { mode, mtime });
            }
            T::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| io::Error::other("symlink without a target"))?;
                remove_existing(&path, existing.as_ref())?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &path)?;
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
                }
                filetime::set_symlink_file_times(&path, mtime, mtime)?;
            }
            T::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| io::Error::other("hard link without a target"))?;
                let target_components = components(&target);
                let Some((target_name, target_parents)) = target_components.split_last() else {
                    return Err(io::Error::other("hard link to the root directory"));
                };
                let target_dir = self.resolve_dir(target_parents, false)?.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("hard link target {} is missing", target.escape_ascii()),
                    )
                })?;
                let target_rel = target_dir.join(target_name);
                if target_rel != rel {
                    remove_existing(&path, existing.as_ref())?;
                    fs::hard_link(self.root.join(&target_rel), &path).map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("cannot link to {}: {e}", target.escape_ascii()),
                        )
                    })?;
                }
            }
            _ => {
                remove_existing(&path, existing.as_ref())?;
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                io::copy(entry, &mut file)?;
                drop(file);
                // chown clears setuid/setgid bits: it comes before chmod.
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
                }
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
                filetime::set_symlink_file_times(&path, mtime, mtime)?;
            }
        }
        written.insert(rel);
        Ok(())
    }

    /// Resolves the directory `parents` within the root, following symlinks as a chroot
    /// would, and returns its path relative to the root. A missing directory is created
    /// when `create`, or makes the result `None`.
    fn resolve_dir(&self, parents: &[OsString], create: bool) -> io::Result<Option<PathBuf>> {
        let mut real: Vec<OsString> = Vec::new();
        let mut steps: VecDeque<Step> = parents.iter().cloned().map(Step::Name).collect();
        let mut links = 0;
        while let Some(step) = steps.pop_front() {
            let name = match step {
                Step::Root => {
                    real.clear();
                    continue;
                }
                Step::Up => {
                    real.pop();
                    continue;
                }
                Step::Name(name) => name,
            };
            let rel: PathBuf = real.iter().chain([&name]).collect();
            let path = self.root.join(&rel);
            match fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(io::Error::other(format!(
                            "too many levels of symbolic links at {}",
                            rel.display()
                        )));
                    }
                    let target = fs::read_link(&path)?;
                    for component in target.components().rev() {
                        match component {
                            Component::RootDir | Component::Prefix(_) => {
                                steps.push_front(Step::Root)
                            }
                            Component::CurDir => {}
                            Component::ParentDir => steps.push_front(Step::Up),
                            Component::Normal(part) => {
                                steps.push_front(Step::Name(part.to_owned()))
                            }
                        }
                    }
                }
                Ok(m) if m.is_dir() => real.push(name),
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotADirectory,
                        format!("{} is not a directory", rel.display()),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if !create {
                        return Ok(None);
                    }
                    fs::create_dir(&path)?;
                    real.push(name);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some(real.iter().collect()))
    }

    /// Deletes what lower layers put in the directory `dir` (relative to the root),
    /// keeping what this layer wrote there.
    fn clear_lower(&self, dir: &Path, written: &HashSet<PathBuf>) -> io::Result<()> {
        let entries = match fs::read_dir(self.root.join(dir)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let rel = dir.join(entry.file_name());
            if !written.contains(&rel) {
                remove_any(&entry.path())?;
            } else if entry.file_type()?.is_dir() {
                self.clear_lower(&rel, written)?;
            }
        }
        Ok(())
    }
}

/// The components of a tar entry's path, taken inside the root: `/` and `.` dropped,
/// `..` removing the previous component and never climbing above the root.
fn components(path: &[u8]) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for component in Path::new(OsStr::from_bytes(path)).components() {
        match component {
            Component::Normal(part) => out.push(part.to_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// A uid or gid from a tar header.
fn id(value: u64) -> io::Result<u32> {
    u32::try_from(value).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("owner id {value} too large"),
        )
    })
}

/// Removes what is at `path` (described by `existing`) before an entry is written there.
fn remove_existing(path: &Path, existing: Option<&fs::Metadata>) -> io::Result<()> {
    match existing {
        None => Ok(()),
        Some(m) if m.is_dir() => fs::remove_dir_all(path),
        Some(_) => fs::remove_file(path),
    }
}

/// Removes a file, symlink or directory tree at `path`, if there is one (a symlink is
/// removed, never followed).
pub(crate) fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) => remove_existing(path, Some(&m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the tree at `path`, making its directories writable first if that is what
/// stops the removal (a layer's read-only directories, when not running as root).
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    match remove_any(path) {
        Ok(()) => Ok(()),
        Err(_) => {
            make_writable(path);
            remove_any(path)
        }
    }
}

fn make_writable(path: &Path) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
    if let Ok(entries) = fs::read_dir(path) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}
