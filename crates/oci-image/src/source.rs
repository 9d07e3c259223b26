//! Where images come from on disk ([`Source`]), and reading the files of one: a directory
//! read in place, or a tar archive read in place too — it is indexed once (name → offset
//! and length of each member, seeking past the data) and each file is then read by
//! re-opening the archive and seeking to it, so nothing is extracted to a temporary
//! directory first and a multi-gigabyte archive costs no extra disk space.
//!
//! Names inside a source are resolved like paths relative to its top: `.` is dropped,
//! `..` may not climb above the top ([`ImageError::PathEscape`]), and inside an archive
//! a member that is a symlink or hard link (legacy `docker save` links a repeated layer's
//! `layer.tar` to the first one) is followed to the member it names, within the archive.
//!
//! # Caveats
//! - An archive must be a plain tar: a compressed one (`docker save | gzip`) is refused
//!   with [`ImageError::CompressedArchive`] rather than decompressed to a temporary file.
//! - In an archive, sparse members and links through a linked *directory* are not
//!   followed (neither `docker save` nor skopeo writes them).
//! - In a layout directory, symlinks are followed by the operating system: the directory
//!   is trusted as any directory the caller names.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::ImageError;
use crate::digest::{self, HashingReader};

/// Where an image comes from on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An OCI image layout directory (`oci-layout`, `index.json`, `blobs/`), or the
    /// extracted contents of a `docker save` archive.
    Layout(PathBuf),
    /// A tar file: a `docker save` archive (legacy or docker 25+) or an OCI layout
    /// archive (skopeo's `oci-archive`).
    Archive(PathBuf),
}

impl Source {
    /// The directory or file.
    pub fn path(&self) -> &Path {
        match self {
            Source::Layout(path) | Source::Archive(path) => path,
        }
    }
}

/// The largest JSON document (index, manifest, config) read into memory.
const MAX_JSON: u64 = 64 << 20;

/// How many links are followed to reach a member of an archive.
const MAX_LINKS: usize = 16;

/// A source opened for reading.
pub(crate) struct Store {
    path: PathBuf,
    kind: Kind,
}

enum Kind {
    Dir,
    Tar(HashMap<String, Member>),
}

enum Member {
    File {
        offset: u64,
        size: u64,
    },
    /// A symlink or hard link, with the normalised name it points to (`None` when it
    /// leads outside the archive).
    Link(Option<String>),
}

/// What a blob must hash to, and how long it must be when that is known.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    pub(crate) digest: String,
    pub(crate) size: Option<u64>,
}

impl Store {
    pub(crate) fn open(source: &Source) -> Result<Self, ImageError> {
        match source {
            Source::Layout(path) => {
                let meta = std::fs::metadata(path).map_err(|source| ImageError::Read {
                    path: path.clone(),
                    source,
                })?;
                if !meta.is_dir() {
                    return Err(ImageError::Read {
                        path: path.clone(),
                        source: io::Error::new(
                            io::ErrorKind::NotADirectory,
                            "an image layout must be a directory",
                        ),
                    });
                }
                Ok(Self {
                    path: path.clone(),
                    kind: Kind::Dir,
                })
            }
            Source::Archive(path) => Ok(Self {
                path: path.clone(),
                kind: Kind::Tar(index_archive(path)?),
            }),
        }
    }

    /// The layout directory or archive, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Where the file `name` is, for messages.
    pub(crate) fn display(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether the source has a file `name`.
    pub(crate) fn exists(&self, name: &str) -> bool {
        let Some(name) = normalise(name) else {
            return false;
        };
        match &self.kind {
            Kind::Dir => self.path.join(name).is_file(),
            Kind::Tar(members) => resolve_member(members, &name).is_some(),
        }
    }

    /// Opens the file `name`.
    pub(crate) fn open_file(&self, name: &str) -> Result<Box<dyn Read + Send>, ImageError> {
        let normal = normalise(name).ok_or_else(|| ImageError::PathEscape {
            path: self.path.clone(),
            what: name.to_owned(),
        })?;
        let missing = || ImageError::Missing {
            path: self.path.clone(),
            what: name.to_owned(),
        };
        match &self.kind {
            Kind::Dir => {
                let path = self.path.join(&normal);
                match File::open(&path) {
                    Ok(file) => Ok(Box::new(file)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Err(missing()),
                    Err(source) => Err(ImageError::Read { path, source }),
                }
            }
            Kind::Tar(members) => {
                let (offset, size) = resolve_member(members, &normal).ok_or_else(missing)?;
                let read_error = |source| ImageError::Read {
                    path: self.display(name),
                    source,
                };
                let mut file = File::open(&self.path).map_err(read_error)?;
                file.seek(SeekFrom::Start(offset)).map_err(read_error)?;
                Ok(Box::new(file.take(size)))
            }
        }
    }

    /// Reads the (unverified) JSON file `name` and parses it.
    pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        expected: &'static str,
    ) -> Result<T, ImageError> {
        let bytes = self.read_small(name)?;
        self.parse(&bytes, name, expected)
    }

    /// Parses the JSON document `what` of this source.
    pub(crate) fn parse<T: serde::de::DeserializeOwned>(
        &self,
        bytes: &[u8],
        what: &str,
        expected: &'static str,
    ) -> Result<T, ImageError> {
        serde_json::from_slice(bytes).map_err(|source| ImageError::Json {
            path: self.path.clone(),
            what: what.to_owned(),
            expected,
            source,
        })
    }

    /// Reads all of the small file `name` (at most [`MAX_JSON`] bytes).
    fn read_small(&self, name: &str) -> Result<Vec<u8>, ImageError> {
        let mut bytes = Vec::new();
        self.open_file(name)?
            .take(MAX_JSON + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| ImageError::Read {
                path: self.display(name),
                source,
            })?;
        if bytes.len() as u64 > MAX_JSON {
            return Err(ImageError::Read {
                path: self.display(name),
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "larger than the {} MiB allowed for a json document",
                        MAX_JSON >> 20
                    ),
                ),
            });
        }
        Ok(bytes)
    }

    /// Reads the small file `name` and checks it against `expected`.
    pub(crate) fn read_verified(
        &self,
        name: &str,
        expected: &Expected,
    ) -> Result<Vec<u8>, ImageError> {
        let bytes = self.read_small(name)?;
        self.verify(
            &expected.digest,
            expected.size,
            &digest::of(&bytes),
            bytes.len() as u64,
        )?;
        Ok(bytes)
    }

    /// Checks that what was read (`actual`, `len`) is what the blob `digest` should be.
    pub(crate) fn verify(
        &self,
        digest: &str,
        size: Option<u64>,
        actual: &str,
        len: u64,
    ) -> Result<(), ImageError> {
        if let Some(size) = size
            && size != len
        {
            return Err(ImageError::SizeMismatch {
                path: self.path.clone(),
                digest: digest.to_owned(),
                expected: size,
                actual: len,
            });
        }
        if actual != digest {
            return Err(ImageError::DigestMismatch {
                path: self.path.clone(),
                digest: digest.to_owned(),
                actual: actual.to_owned(),
            });
        }
        Ok(())
    }

    /// The name of the blob `digest` in an OCI layout, once the digest is checked to be a
    /// well-formed sha256 one.
    pub(crate) fn blob_name(&self, digest: &str) -> Result<String, ImageError> {
        let hex = digest::sha256_hex(digest).ok_or_else(|| ImageError::Digest {
            path: self.path.clone(),
            digest: digest.to_owned(),
        })?;
        Ok(format!("blobs/sha256/{hex}"))
    }

    /// Opens the file `name` with a hash of what is read from it.
    pub(crate) fn open_hashed(
        &self,
        name: &str,
    ) -> Result<HashingReader<Box<dyn Read + Send>>, ImageError> {
        Ok(HashingReader::new(self.open_file(name)?))
    }
}

/// `name` as `a/b/c`, without `.` and with `..` applied; `None` when it climbs above the
/// top.
pub(crate) fn normalise(name: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// Offset and size of the member `name`, following links.
fn resolve_member(members: &HashMap<String, Member>, name: &str) -> Option<(u64, u64)> {
    let mut name = name;
    for _ in 0..=MAX_LINKS {
        match members.get(name)? {
            Member::File { offset, size } => return Some((*offset, *size)),
            Member::Link(target) => name = target.as_deref()?,
        }
    }
    None
}

/// Names the compression of a stream starting with `magic`, if it is compressed.
pub(crate) fn compression(magic: &[u8]) -> Option<&'static str> {
    if magic.starts_with(&[0x1f, 0x8b]) {
        Some("gzip")
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some("zstd")
    } else if magic.starts_with(b"BZh") {
        Some("bzip2")
    } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Some("xz")
    } else {
        None
    }
}

/// Lists the members of the archive at `path`.
fn index_archive(path: &Path) -> Result<HashMap<String, Member>, ImageError> {
    let read_error = |source| ImageError::Read {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(read_error)?;
    let mut magic = [0u8; 6];
    let n = read_up_to(&mut file, &mut magic).map_err(read_error)?;
    if let Some(compression) = compression(&magic[..n]) {
        return Err(ImageError::CompressedArchive {
            path: path.to_owned(),
            compression,
        });
    }
    file.seek(SeekFrom::Start(0)).map_err(read_error)?;

    let mut archive = tar::Archive::new(file);
    let mut members = HashMap::new();
    for entry in archive.entries_with_seek().map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        let raw_name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(name) = normalise(&raw_name) else {
            continue;
        };
        let header = entry.header();
        let member = match header.entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => Member::File {
                offset: entry.raw_file_position(),
                size: entry.size(),
            },
            tar::EntryType::Symlink => {
                let target = link_target(&entry);
                let parent = name.rsplit_once('/').map_or("", |(parent, _)| parent);
                Member::Link(if target.starts_with('/') {
                    normalise(&target)
                } else {
                    normalise(&format!("{parent}/{target}"))
                })
            }
            tar::EntryType::Link => Member::Link(normalise(&link_target(&entry))),
            _ => continue,
        };
        members.insert(name, member);
    }
    Ok(members)
}

fn link_target<R: Read>(entry: &tar::Entry<'_, R>) -> String {
    entry
        .link_name_bytes()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Reads into `buf` until it is full or the stream ends; returns how much was read.
pub(crate) fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_and_may_not_climb_out() {
        assert_eq!(
            normalise("./blobs//sha256/x").as_deref(),
            Some("blobs/sha256/x")
        );
        assert_eq!(normalise("a/../b").as_deref(), Some("b"));
        assert_eq!(
            normalise("/manifest.json").as_deref(),
            Some("manifest.json")
        );
        assert_eq!(normalise("../etc/passwd"), None);
        assert_eq!(normalise("a/../../b"), None);
    }

    #[test]
    fn a_gzipped_archive_is_refused_naming_its_compression() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image.tar.gz");
        std::fs::write(&path, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0]).unwrap();
        let err = Store::open(&Source::Archive(path.clone())).err().unwrap();
        assert!(
            matches!(
                err,
                ImageError::CompressedArchive {
                    compression: "gzip",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(&path.display().to_string()));
    }

    #[test]
    fn a_linked_member_of_an_archive_reads_as_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tar");
        let mut builder = tar::Builder::new(File::create(&path).unwrap());
        let mut header = tar::Header::new_gnu();
        header.set_size(5);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, "one/layer.tar", &b"hello"[..])
            .unwrap();
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        builder
            .append_link(&mut link, "two/layer.tar", "../one/layer.tar")
            .unwrap();
        let mut escape = tar::Header::new_gnu();
        escape.set_entry_type(tar::EntryType::Symlink);
        escape.set_size(0);
        builder
            .append_link(&mut escape, "three/layer.tar", "../../../etc/passwd")
            .unwrap();
        builder.into_inner().unwrap();

        let store = Store::open(&Source::Archive(path)).unwrap();
        let mut text = String::new();
        store
            .open_file("two/layer.tar")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "hello");
        assert!(matches!(
            store.open_file("three/layer.tar").err().unwrap(),
            ImageError::Missing { .. }
        ));
        assert!(matches!(
            store.open_file("../x").err().unwrap(),
            ImageError::PathEscape { .. }
        ));
    }
}
