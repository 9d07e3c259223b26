//! Writing OCI image layouts: [`write_layout`] makes a single-layer image (gzip layer) of
//! a directory and tags it in a layout directory, for tests and for building small images
//! here (a busybox image from Debian's `busybox-static`, say). Several images can share
//! one layout: each call adds its blobs and its `index.json` entry, replacing an earlier
//! entry of the same name.
//!
//! The layer lists the directory in name order, so the same tree (same contents, modes,
//! owners and times) gives the same digests. Blobs and `index.json` are written to a
//! temporary file and renamed into place.
//!
//! # Caveats
//! - Files keep their owner, mode and modification time on disk: a tree built by a
//!   non-root user is owned by that user in the image.
//! - Hard links are stored as separate copies; device nodes, fifos and sockets are
//!   skipped (as unpacking skips them).
//! - The config has no `created` time and no history.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use flate2::write::GzEncoder;
use oci_spec::image::{
    Arch, Config, Descriptor, Digest, ImageConfiguration, ImageIndex, ImageManifestBuilder,
    MediaType, Os, Platform, PlatformBuilder, RootFs,
};

use crate::digest::{self, HashingWriter};
use crate::{ImageConfig, ImageError, platform};

/// Writes a single-layer OCI image layout of the directory `rootfs` (gzip layer) into
/// `layout_dir` (created when missing; an existing layout keeps its other images), tagged
/// `reference` (annotation `org.opencontainers.image.ref.name`), with `config` as what it
/// runs and this machine's platform. Returns the manifest's digest.
pub fn write_layout(
    layout_dir: &Path,
    reference: &str,
    rootfs: &Path,
    config: &ImageConfig,
) -> Result<String, ImageError> {
    if reference.trim().is_empty() {
        return Err(ImageError::Reference {
            reference: reference.to_owned(),
        });
    }
    let layout = LayoutWriter::create(layout_dir)?;
    let (layer, diff_id) = layout.add_layer_dir(rootfs)?;
    let manifest = layout.add_image(&image_configuration(config, vec![diff_id]), vec![layer])?;
    let digest = manifest.digest().to_string();
    layout.tag(manifest, reference)?;
    Ok(digest)
}

/// The image config of an image for this machine running `config`, with layers of
/// `diff_ids`.
pub(crate) fn image_configuration(
    config: &ImageConfig,
    diff_ids: Vec<String>,
) -> ImageConfiguration {
    let mut run = Config::default();
    let non_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    run.set_entrypoint(non_empty(&config.entrypoint));
    run.set_cmd(non_empty(&config.cmd));
    run.set_env(non_empty(&config.env));
    run.set_working_dir(config.working_dir.clone());
    run.set_user(config.user.clone());
    let mut rootfs = RootFs::default();
    rootfs.set_diff_ids(diff_ids);
    let mut image = ImageConfiguration::default();
    image.set_architecture(Arch::from(platform::this_arch()));
    image.set_os(Os::Linux);
    image.set_config(Some(run));
    image.set_rootfs(rootfs);
    image
}

/// This machine's platform, for index entries.
pub(crate) fn this_platform() -> Platform {
    PlatformBuilder::default()
        .architecture(Arch::from(platform::this_arch()))
        .os(Os::Linux)
        .build()
        .expect("a platform with os and architecture set is complete")
}

/// Writes the parts of an OCI image layout.
pub(crate) struct LayoutWriter {
    dir: PathBuf,
}

impl LayoutWriter {
    /// Makes `dir` an OCI image layout (`oci-layout`, `blobs/sha256/`), keeping what is
    /// there.
    pub(crate) fn create(dir: &Path) -> Result<Self, ImageError> {
        let blobs = dir.join("blobs").join("sha256");
        fs::create_dir_all(&blobs).map_err(|source| ImageError::Write {
            path: blobs.clone(),
            source,
        })?;
        let layout = Self {
            dir: dir.to_owned(),
        };
        if !dir.join("oci-layout").is_file() {
            layout.write_file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        }
        Ok(layout)
    }

    /// Writes `bytes` as the file `name` of the layout, atomically.
    fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), ImageError> {
        let path = self.dir.join(name);
        let write_error = |source| ImageError::Write {
            path: path.clone(),
            source,
        };
        let mut file = tempfile::NamedTempFile::new_in(path.parent().unwrap_or(&self.dir))
            .map_err(write_error)?;
        file.write_all(bytes).map_err(write_error)?;
        file.persist(&path).map_err(|e| write_error(e.error))?;
        Ok(())
    }

    /// Adds the blob `bytes`.
    pub(crate) fn add_blob(
        &self,
        bytes: &[u8],
        media_type: MediaType,
    ) -> Result<Descriptor, ImageError> {
        let digest = digest::of(bytes);
        self.write_file(&blob_name(&digest), bytes)?;
        Ok(descriptor(media_type, bytes.len() as u64, &digest))
    }

    /// Adds a gzip layer of the directory `rootfs`; returns it and its diff id.
    pub(crate) fn add_layer_dir(&self, rootfs: &Path) -> Result<(Descriptor, String), ImageError> {
        let blobs = self.dir.join("blobs").join("sha256");
        let write_error = |path: &Path| {
            let path = path.to_owned();
            move |source| ImageError::Write { path, source }
        };
        let mut file = tempfile::NamedTempFile::new_in(&blobs).map_err(write_error(&blobs))?;
        let compressed = HashingWriter::new(BufWriter::new(file.as_file_mut()));
        let gzip = GzEncoder::new(compressed, flate2::Compression::default());
        let mut builder = tar::Builder::new(HashingWriter::new(gzip));
        builder.follow_symlinks(false);
        append_tree(&mut builder, rootfs, Path::new("")).map_err(|source| ImageError::Read {
            path: rootfs.to_owned(),
            source,
        })?;
        let finish = || -> io::Result<(String, String, u64)> {
            let (gzip, diff_id, _) = builder.into_inner()?.finish();
            let (buffered, digest, size) = gzip.finish()?.finish();
            buffered
                .into_inner()
                .map_err(io::IntoInnerError::into_error)?;
            Ok((diff_id, digest, size))
        };
        let (diff_id, digest, size) = finish().map_err(write_error(&blobs))?;
        let path = self.dir.join(blob_name(&digest));
        file.persist(&path)
            .map_err(|e| write_error(&path)(e.error))?;
        Ok((
            descriptor(MediaType::ImageLayerGzip, size, &digest),
            diff_id,
        ))
    }

    /// Adds the config `config` and a manifest of it with `layers`; returns the manifest's
    /// descriptor, with this machine's platform.
    pub(crate) fn add_image(
        &self,
        config: &ImageConfiguration,
        layers: Vec<Descriptor>,
    ) -> Result<Descriptor, ImageError> {
        let config_bytes = serde_json::to_vec(config).map_err(json_error(&self.dir))?;
        let config = self.add_blob(&config_bytes, MediaType::ImageConfig)?;
        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(config)
            .layers(layers)
            .build()
            .expect("a manifest with schema version, config and layers set is complete");
        let manifest_bytes = serde_json::to_vec(&manifest).map_err(json_error(&self.dir))?;
        let mut descriptor = self.add_blob(&manifest_bytes, MediaType::ImageManifest)?;
        descriptor.set_platform(Some(this_platform()));
        Ok(descriptor)
    }

    /// Adds `manifest` to `index.json` under the name `reference`, replacing an entry of
    /// that name.
    pub(crate) fn tag(&self, mut manifest: Descriptor, reference: &str) -> Result<(), ImageError> {
        const REF_NAME: &str = "org.opencontainers.image.ref.name";
        let index_path = self.dir.join("index.json");
        let mut index = match fs::read(&index_path) {
            Ok(bytes) => {
                serde_json::from_slice::<ImageIndex>(&bytes).map_err(|source| ImageError::Json {
                    path: self.dir.clone(),
                    what: "index.json".to_owned(),
                    expected: "oci image index",
                    source,
                })?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => ImageIndex::default(),
            Err(source) => {
                return Err(ImageError::Read {
                    path: index_path,
                    source,
                });
            }
        };
        let mut annotations = manifest.annotations().clone().unwrap_or_default();
        annotations.insert(REF_NAME.to_owned(), reference.to_owned());
        manifest.set_annotations(Some(annotations));
        let mut entries = index.manifests().clone();
        entries.retain(|d| {
            d.annotations()
                .as_ref()
                .and_then(|a| a.get(REF_NAME))
                .is_none_or(|name| name != reference)
        });
        entries.push(manifest);
        index.set_manifests(entries);
        self.write_index(&index)
    }

    /// Writes `index` as `index.json`.
    pub(crate) fn write_index(&self, index: &ImageIndex) -> Result<(), ImageError> {
        let bytes = serde_json::to_vec_pretty(index).map_err(json_error(&self.dir))?;
        self.write_file("index.json", &bytes)
    }
}

fn json_error(dir: &Path) -> impl FnOnce(serde_json::Error) -> ImageError + '_ {
    move |e| ImageError::Write {
        path: dir.to_owned(),
        source: io::Error::other(e),
    }
}

/// `blobs/sha256/<hex>` of a digest this crate computed.
fn blob_name(digest: &str) -> String {
    format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"))
}

/// A descriptor of a blob this crate wrote.
pub(crate) fn descriptor(media_type: MediaType, size: u64, digest: &str) -> Descriptor {
    let digest = Digest::from_str(digest).expect("a sha256 digest this crate computed is valid");
    Descriptor::new(media_type, size, digest)
}

/// Appends the tree under `root`/`rel` to `builder`, in name order.
fn append_tree<W: Write>(builder: &mut tar::Builder<W>, root: &Path, rel: &Path) -> io::Result<()> {
    let mut entries = fs::read_dir(root.join(rel))?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        let name = rel.join(entry.file_name());
        let file_type = entry.file_type()?;
        if file_type.is_fifo()
            || file_type.is_socket()
            || file_type.is_block_device()
            || file_type.is_char_device()
        {
            continue;
        }
        builder.append_path_with_name(entry.path(), &name)?;
        if file_type.is_dir() {
            append_tree(builder, root, &name)?;
        }
    }
    Ok(())
}
