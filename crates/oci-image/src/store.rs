//! The cache of unpacked images: [`ImageStore::unpack`] finds an image in a source,
//! verifies it and unpacks its layers into `<cache>/rootfs/<config hex>/`, keyed by the
//! digest of the image's config (which names every layer by its diff id).
//!
//! An image is unpacked into a private temporary directory next to its final place
//! (`<cache>/rootfs/.unpack-*`) and renamed there only when complete, so a crash never
//! leaves a half root filesystem under the final name. When the final directory exists
//! the layers are not read at all: only the index, manifest and config are (to learn the
//! config digest). Two unpacks of the same image at once (threads or processes) both
//! succeed: the second to finish finds the directory there and drops its own copy.
//!
//! Each layer is read once, as a stream: hashed as stored and checked against its digest
//! (and size) at the end, sniffed for compression by its magic bytes (gzip or none; the
//! media type is not trusted), and applied by `unpack`. A mismatch fails the
//! unpack and the temporary directory is deleted, so unverified content never reaches the
//! cache.
//!
//! A registry pull (`registry`) hands the blobs it downloaded to [`ImageStore::unpack`] as
//! an OCI layout, so pulled images are verified, unpacked and cached by this same code.
//!
//! # Caveats
//! - OCI layer diff ids are not checked against the config (the layer blob's own digest
//!   is); only legacy `docker save` layers, which have no other digest, are checked
//!   against their diff id.
//! - zstd, bzip2 and xz layers are refused with [`ImageError::LayerCompression`].
//! - The cache is never pruned, and temporary directories left by a crash
//!   (`<cache>/rootfs/.unpack-*`) are not cleaned up.
//! - A cached root filesystem is shared: whoever runs a container on it must not write
//!   to it (use an overlay or a copy).

use std::fs;
use std::io::{BufRead as _, BufReader, Read};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use crate::digest::{self, HashingReader};
use crate::parts::{Check, LayerRef};
use crate::resolve;
use crate::source::{self, Source, Store};
use crate::unpack::{self, Unpacker};
use crate::{ImageConfig, ImageError};

/// An image unpacked into a root filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The digest of the image's config, `sha256:…` (for a `docker save` image: its
    /// image id).
    pub digest: String,
    /// The unpacked root filesystem, `<cache>/rootfs/<config hex>`: shared, not to be
    /// written to.
    pub rootfs: PathBuf,
    /// What the image runs.
    pub config: ImageConfig,
}

/// A cache directory of unpacked images.
#[derive(Debug, Clone)]
pub struct ImageStore {
    cache_dir: PathBuf,
}

impl ImageStore {
    /// A store keeping its unpacked images under `cache_dir` (created when needed).
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            cache_dir: cache_dir.into(),
        }
    }

    /// The cache directory.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// Where the root filesystem of the image whose config digest is `sha256:<hex>` is
    /// unpacked.
    pub(crate) fn rootfs_dir(&self, hex: &str) -> PathBuf {
        self.cache_dir.join("rootfs").join(hex)
    }

    /// Finds `reference` (e.g. `example.org/op:dev`, `busybox`, or `None` for the only
    /// image) in `source`, verifies it, unpacks it (once: cached by config digest) and
    /// returns it.
    pub fn unpack(&self, source: &Source, reference: Option<&str>) -> Result<Image, ImageError> {
        let store = Store::open(source)?;
        let resolved = resolve::resolve(&store, reference)?;
        let hex =
            digest::sha256_hex(&resolved.config_digest).ok_or_else(|| ImageError::Digest {
                path: store.path().to_owned(),
                digest: resolved.config_digest.clone(),
            })?;
        let rootfs = self.rootfs_dir(hex);
        let parent = self.cache_dir.join("rootfs");
        let image = Image {
            digest: resolved.config_digest.clone(),
            rootfs: rootfs.clone(),
            config: resolved.config.clone(),
        };
        if rootfs.is_dir() {
            return Ok(image);
        }

        let write_error = |path: &Path| {
            let path = path.to_owned();
            move |source| ImageError::Write { path, source }
        };
        fs::create_dir_all(&parent).map_err(write_error(&parent))?;
        let staging = Staging::new(&parent)?;
        fs::set_permissions(&staging.path, fs::Permissions::from_mode(0o755))
            .map_err(write_error(&staging.path))?;
        // The directory was just created by this process: its owner is our effective
        // uid, and only root can give files away.
        let is_root = fs::metadata(&staging.path)
            .map_err(write_error(&staging.path))?
            .uid()
            == 0;
        let mut unpacker = Unpacker::new(staging.path.clone(), is_root);
        for layer in &resolved.layers {
            apply_layer(&store, &resolved.image, layer, &mut unpacker)?;
        }
        unpacker.finish().map_err(|e| ImageError::Layer {
            path: store.path().to_owned(),
            layer: format!(
                "{} of image {}",
                resolved.layers.last().map_or("", |l| l.label.as_str()),
                resolved.image
            ),
            entry: format!("{} (its mode and time, set last)", e.entry),
            source: e.source,
        })?;

        match fs::rename(&staging.path, &rootfs) {
            Ok(()) => staging.keep(),
            // Another unpack of the same image finished first: its copy is as good.
            Err(_) if rootfs.is_dir() => {}
            Err(source) => {
                return Err(ImageError::Write {
                    path: rootfs,
                    source,
                });
            }
        }
        Ok(image)
    }
}

/// A temporary root filesystem, deleted unless kept.
struct Staging {
    path: PathBuf,
    keep: bool,
}

impl Staging {
    fn new(parent: &Path) -> Result<Self, ImageError> {
        let dir = tempfile::Builder::new()
            .prefix(".unpack-")
            .tempdir_in(parent)
            .map_err(|source| ImageError::Write {
                path: parent.to_owned(),
                source,
            })?;
        Ok(Self {
            path: dir.keep(),
            keep: false,
        })
    }

    fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.keep {
            let _ = unpack::remove_tree(&self.path);
        }
    }
}

/// Reads, verifies and applies one layer.
fn apply_layer(
    store: &Store,
    image: &str,
    layer: &LayerRef,
    unpacker: &mut Unpacker,
) -> Result<(), ImageError> {
    let read_error = |source| ImageError::Read {
        path: store.display(&layer.name),
        source,
    };
    let mut raw = store.open_hashed(&layer.name)?;
    let applied = apply_stream(store, image, layer, &mut raw, unpacker);
    let (digest, len) = raw.finish().map_err(read_error)?;
    match (&layer.check, applied) {
        (Check::Blob(expected), applied) => {
            // A corrupt blob is reported as such, even when it broke the tar first.
            store.verify(&expected.digest, expected.size, &digest, len)?;
            applied.map(|_| ())
        }
        (Check::DiffId(diff_id), Ok(uncompressed)) => store.verify(diff_id, None, &uncompressed, 0),
        (Check::DiffId(_), Err(e)) => Err(e),
    }
}

/// Decompresses and applies the layer read from `raw`; returns the digest of the
/// uncompressed tar.
fn apply_stream(
    store: &Store,
    image: &str,
    layer: &LayerRef,
    raw: &mut HashingReader<Box<dyn Read + Send>>,
    unpacker: &mut Unpacker,
) -> Result<String, ImageError> {
    let read_error = |source| ImageError::Read {
        path: store.display(&layer.name),
        source,
    };
    let mut buffered = BufReader::with_capacity(64 * 1024, raw);
    let magic = buffered.fill_buf().map_err(read_error)?;
    let stream: Box<dyn Read + '_> = match source::compression(magic) {
        None => Box::new(buffered),
        Some("gzip") => Box::new(MultiGzDecoder::new(buffered)),
        Some(compression) => {
            return Err(ImageError::LayerCompression {
                path: store.path().to_owned(),
                layer: layer.label.clone(),
                media_type: layer.media_type.clone(),
                compression,
            });
        }
    };
    let mut uncompressed = HashingReader::new(stream);
    unpacker
        .apply(&mut uncompressed)
        .map_err(|e| ImageError::Layer {
            path: store.path().to_owned(),
            layer: format!("{} of image {image}", layer.label),
            entry: e.entry,
            source: e.source,
        })?;
    let (digest, _) = uncompressed.finish().map_err(read_error)?;
    Ok(digest)
}
