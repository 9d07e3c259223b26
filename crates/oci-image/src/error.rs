//! The crate's one error type, [`ImageError`]: every way finding, pulling, verifying,
//! unpacking or writing an image can fail. Messages are lowercase and name the input
//! (file, reference, registry, blob digest) and what was expected; the underlying cause is
//! kept as the error's `source`, not repeated in the message.
//!
//! A failed registry pull is one of [`ImageError::ImageNotFound`] (the registry does not
//! know the manifest), [`ImageError::Unauthorized`], [`ImageError::Unreachable`] or, for
//! anything else the registry or the transfer got wrong, [`ImageError::Pull`] — what a
//! kubelet reports as `ErrImagePull`.

use std::path::PathBuf;

/// The cause of a registry error: the registry client's error, or a description of what
/// was wrong with what the registry sent.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors finding, verifying, unpacking or writing an image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file (for a blob inside an archive: the archive and the blob).
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file or directory could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The source is neither an OCI image layout nor a `docker save` archive.
    #[error(
        "{path} is not an image: expected an oci image layout (an oci-layout file and index.json) or a docker save archive (manifest.json)"
    )]
    UnknownFormat {
        /// The layout directory or archive.
        path: PathBuf,
    },
    /// The archive is compressed as a whole.
    #[error(
        "{path} is a {compression}-compressed archive: expected a plain tar file (decompress it first)"
    )]
    CompressedArchive {
        /// The archive.
        path: PathBuf,
        /// The compression found (`gzip`, `zstd`, …).
        compression: &'static str,
    },
    /// The `oci-layout` file names a layout version this crate does not read.
    #[error("{path} has image layout version {version:?}: expected 1.x")]
    LayoutVersion {
        /// The layout directory or archive.
        path: PathBuf,
        /// The version found.
        version: String,
    },
    /// A JSON document (index, manifest, config, `manifest.json`…) could not be parsed.
    #[error("{what} in {path} is not a valid {expected}")]
    Json {
        /// The layout directory or archive.
        path: PathBuf,
        /// The document: a file name or a blob digest.
        what: String,
        /// What it should have been (`oci image index`, `image config`…).
        expected: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A file that the image refers to is not in the layout or archive.
    #[error("{what} is missing from {path}")]
    Missing {
        /// The layout directory or archive.
        path: PathBuf,
        /// The file (a blob digest or a path inside the archive).
        what: String,
    },
    /// A path named by the image leads outside the layout or archive.
    #[error("{what} in {path} leads outside of it")]
    PathEscape {
        /// The layout directory or archive.
        path: PathBuf,
        /// The path as the image names it.
        what: String,
    },
    /// A digest uses an algorithm other than sha256, or is malformed.
    #[error("unsupported digest {digest:?} in {path}: expected sha256:<64 hex digits>")]
    Digest {
        /// The layout directory or archive.
        path: PathBuf,
        /// The digest.
        digest: String,
    },
    /// A blob's content does not match its digest.
    #[error("blob {digest} in {path} does not match its digest: its content hashes to {actual}")]
    DigestMismatch {
        /// The layout directory or archive.
        path: PathBuf,
        /// The expected digest (for a `docker save` legacy layer: its diff id), which names
        /// the blob.
        digest: String,
        /// The digest of what was read.
        actual: String,
    },
    /// A blob's length does not match its descriptor's size.
    #[error("blob {digest} in {path} has {actual} bytes: expected {expected}")]
    SizeMismatch {
        /// The layout directory or archive.
        path: PathBuf,
        /// The blob's digest.
        digest: String,
        /// The size its descriptor gives.
        expected: u64,
        /// Its actual length.
        actual: u64,
    },
    /// The source holds no image.
    #[error("{path} holds no image")]
    Empty {
        /// The layout directory or archive.
        path: PathBuf,
    },
    /// No reference was given and the source holds several images.
    #[error("{path} holds several images ({}): name the one to use", .available.join(", "))]
    Ambiguous {
        /// The layout directory or archive.
        path: PathBuf,
        /// The images there: their names, or `<untagged DIGEST>`.
        available: Vec<String>,
    },
    /// The reference names no image of the source.
    #[error("no image {reference:?} in {path}: it has {}", .available.join(", "))]
    NotFound {
        /// The layout directory or archive.
        path: PathBuf,
        /// The reference asked for.
        reference: String,
        /// The images there: their names, or `<untagged DIGEST>`.
        available: Vec<String>,
    },
    /// No manifest of a multi-platform image (or the image itself) is for this machine.
    #[error("image {image} in {path} is not for {wanted}: it has {}", .found.join(", "))]
    Platform {
        /// The layout directory or archive.
        path: PathBuf,
        /// The image: its reference or digest.
        image: String,
        /// This machine's platform, `linux/<GOARCH>`.
        wanted: String,
        /// The platforms found (`unknown` where a manifest names none).
        found: Vec<String>,
    },
    /// A blob is neither an image index nor an image manifest, or indexes nest too deep.
    #[error("blob {digest} in {path} is not usable: expected {expected}")]
    NotAnImage {
        /// The layout directory or archive.
        path: PathBuf,
        /// The blob's digest.
        digest: String,
        /// What was expected there.
        expected: &'static str,
    },
    /// A `docker save` archive names its config by a path that carries no digest.
    #[error(
        "config {name:?} in {path} carries no digest: expected blobs/sha256/<hex> or <hex>.json"
    )]
    ConfigName {
        /// The archive.
        path: PathBuf,
        /// The config's path in the archive.
        name: String,
    },
    /// A legacy `docker save` layer has no diff id in the config to verify it against.
    #[error(
        "layer {layer} of image {image} in {path} cannot be verified: the config has {diff_ids} diff ids for {layers} layers"
    )]
    LayerCount {
        /// The archive.
        path: PathBuf,
        /// The image.
        image: String,
        /// The layer's path in the archive.
        layer: String,
        /// The number of layers in `manifest.json`.
        layers: usize,
        /// The number of diff ids in the config.
        diff_ids: usize,
    },
    /// A layer is compressed in a way this crate does not read.
    #[error(
        "layer {layer} ({media_type}) in {path} is {compression}-compressed: expected a gzip or uncompressed tar"
    )]
    LayerCompression {
        /// The layout directory or archive.
        path: PathBuf,
        /// The layer: its digest or path.
        layer: String,
        /// Its media type.
        media_type: String,
        /// The compression found by its magic bytes (`zstd`, `bzip2`, `xz`).
        compression: &'static str,
    },
    /// A layer could not be applied to the root filesystem.
    #[error("cannot unpack {entry} of layer {layer} in {path}")]
    Layer {
        /// The layout directory or archive.
        path: PathBuf,
        /// The layer: its digest or path.
        layer: String,
        /// The tar entry (or `<tar stream>` when the archive itself is unreadable).
        entry: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A reference given to [`write_layout`](crate::write_layout) is empty.
    #[error("cannot write an image tagged {reference:?}: expected a non-empty reference")]
    Reference {
        /// The reference.
        reference: String,
    },
    /// A reference given to [`ImageStore::pull`](crate::ImageStore::pull) is not a valid
    /// image reference.
    #[error("{reference:?} is not a valid image reference")]
    InvalidReference {
        /// The reference.
        reference: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The registry does not know the image: no manifest for the tag or digest, or no
    /// such repository.
    #[error("image {reference} not found in registry {registry} (manifest unknown)")]
    ImageNotFound {
        /// The reference pulled.
        reference: String,
        /// The registry (`host[:port]`, `docker.io` for Docker Hub).
        registry: String,
        /// The registry's answer.
        #[source]
        source: BoxError,
    },
    /// The registry refused the pull: no credentials, wrong ones, or not allowed to pull
    /// this repository (Docker Hub answers so for a repository that does not exist, too).
    #[error(
        "not authorized to pull {reference} from registry {registry}: credentials missing or wrong, or no such repository"
    )]
    Unauthorized {
        /// The reference pulled.
        reference: String,
        /// The registry.
        registry: String,
        /// The registry's answer.
        #[source]
        source: BoxError,
    },
    /// The registry could not be reached: no connection, TLS failure, or a timeout.
    #[error("cannot reach registry {registry} to pull {reference}")]
    Unreachable {
        /// The reference pulled.
        reference: String,
        /// The registry.
        registry: String,
        /// The connection error.
        #[source]
        source: BoxError,
    },
    /// A pull failed otherwise: a server error, a blob that does not match its digest, a
    /// manifest that is not an image's, a blob that could not be stored…
    #[error("cannot pull {reference} from registry {registry}")]
    Pull {
        /// The reference pulled.
        reference: String,
        /// The registry.
        registry: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// A manifest fetched by digest (the reference's, or an index entry's) does not match
    /// that digest.
    #[error(
        "manifest {expected} of {reference} from registry {registry} does not match its digest: its content hashes to {actual}"
    )]
    ManifestDigest {
        /// The reference pulled.
        reference: String,
        /// The registry.
        registry: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what the registry sent.
        actual: String,
    },
    /// No manifest of the image's index in the registry is for this machine.
    #[error("image {reference} in registry {registry} is not for {wanted}: it has {}", .found.join(", "))]
    RegistryPlatform {
        /// The reference pulled.
        reference: String,
        /// The registry.
        registry: String,
        /// This machine's platform, `linux/<GOARCH>`.
        wanted: String,
        /// The platforms found (`unknown` where an entry names none).
        found: Vec<String>,
    },
    /// The credentials for a registry in a `.dockerconfigjson` (or `.dockercfg`) could
    /// not be read.
    #[error(
        "cannot read the credentials for registry {registry} from the docker config: {problem}"
    )]
    DockerConfig {
        /// The registry asked for.
        registry: String,
        /// What is wrong, naming the entry.
        problem: String,
    },
}
