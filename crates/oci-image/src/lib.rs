//! Container images on disk, in the local Docker engine or in a registry, unpacked into
//! root filesystems for a container runtime (runc) to run: the simulated kubelet's image
//! store.
//!
//! An image comes from a [`Source`] — an OCI image layout directory, or a tar file that
//! is a `docker save` archive (legacy or docker 25+) or an OCI layout archive (skopeo's
//! `oci-archive`) — and is named by a reference (`example.org/op:dev`, `busybox`) or is
//! the only one there. [`ImageStore::unpack`] finds it, picks this machine's platform
//! from a multi-platform index, verifies every blob it reads against its digest, applies
//! its layers (whiteouts included, nothing written outside the root) and caches the
//! result by config digest, returning an [`Image`]: its root filesystem and what it runs
//! ([`ImageConfig`]). [`write_layout`] does the reverse for a directory, to build small
//! images here.
//!
//! [`ImageStore::pull`] gets an image from a registry instead, through the OCI
//! distribution API ([`PullOptions`]: [`Credentials`], which
//! [`Credentials::from_docker_config`] picks from a pull secret, and whether the registry
//! is insecure), and unpacks it with the same code into the same cache.
//!
//! [`ImageStore::engine_image`] gets an image from the local Docker engine's store instead
//! ([`DockerEngine`], found as the Docker CLI finds it by [`DockerEngine::from_env`]): the
//! engine's `docker save` export, unpacked as an archive is, once per image id. No engine
//! running, or an image it does not have, is `None`: the caller's next source.
//!
//! ```no_run
//! use oci_image::{ImageStore, Source};
//!
//! let store = ImageStore::new("/var/cache/opconform/images");
//! let image = store.unpack(&Source::Archive("busybox.tar".into()), Some("busybox"))?;
//! println!("{} runs {:?} in {}", image.digest, image.config.cmd, image.rootfs.display());
//! # Ok::<(), oci_image::ImageError>(())
//! ```
//!
//! ```no_run
//! use oci_image::{Credentials, ImageStore, PullOptions};
//!
//! # async fn pull(secret: serde_json::Value) -> Result<(), oci_image::ImageError> {
//! let store = ImageStore::new("/var/cache/opconform/images");
//! let reference = "127.0.0.1:5000/tools/busybox:1.35";
//! let options = PullOptions {
//!     credentials: Credentials::from_docker_config(&secret, &oci_image::registry_of(reference)?)?,
//!     ..PullOptions::default()
//! };
//! let image = store.pull(reference, &options).await?;
//! println!("{reference} is {} in {}", image.digest, image.rootfs.display());
//! # Ok(())
//! # }
//! ```
//!
//! Modules (private; their docs say how each part works and what it leaves out):
//! - `source`: [`Source`], and reading a layout directory or an archive in place.
//! - `resolve`, `oci`, `docker`, `reference`, `platform`: finding an image's config and
//!   layers (`parts`) from a reference.
//! - `store`: [`ImageStore`], the cache, and verifying layers as they are read.
//! - `unpack`: applying layers to a root filesystem safely.
//! - `registry`: [`ImageStore::pull`], [`PullOptions`], [`registry_of`].
//! - `engine`: [`ImageStore::engine_image`], [`DockerEngine`], [`EngineError`].
//! - `credentials`: [`Credentials`], and picking them from a docker config.
//! - `write`: [`write_layout`].
//! - `elf`: [`is_static_executable`], whether a binary runs in an image holding nothing
//!   else.
//! - `digest`, `error`: sha256 digests; [`ImageError`].
//!
//! Only [`ImageStore::pull`] and [`ImageStore::engine_image`] are async (they need a tokio
//! runtime, and unpack on tokio's blocking pool); the rest is file-system work, to run on a
//! blocking thread.
//!
//! # Caveats
//! - OCI layer diff ids are not checked against the config (each layer blob's own digest
//!   is); zstd layers are refused; extended attributes are not applied; device nodes and
//!   fifos in layers are skipped (the runtime provides `/dev`).
//! - A pull downloads layers to disk before unpacking them and keeps no blob cache: see
//!   `registry`'s caveats. An engine's export is written whole to disk too, and only an
//!   engine on a unix socket is reached: see `engine`'s caveats.
//! - See each module's own caveats.

mod credentials;
mod digest;
mod docker;
mod elf;
mod engine;
mod error;
mod oci;
mod parts;
mod platform;
mod reference;
mod registry;
mod resolve;
mod source;
mod store;
mod unpack;
mod write;

#[cfg(test)]
mod tests;

pub use credentials::Credentials;
pub use elf::is_static_executable;
pub use engine::{DockerEngine, EngineError};
pub use error::{BoxError, ImageError};
pub use registry::{PullOptions, registry_of};
pub use source::Source;
pub use store::{Image, ImageStore};
pub use write::write_layout;

/// What an image runs, from its config: the defaults a container's `command`, `args`,
/// `env` and `workingDir` are applied over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// The image's `ENTRYPOINT` (empty when it has none).
    pub entrypoint: Vec<String>,
    /// The image's `CMD` (empty when it has none).
    pub cmd: Vec<String>,
    /// The image's environment, `K=V` each.
    pub env: Vec<String>,
    /// The working directory, when the image sets one.
    pub working_dir: Option<String>,
    /// The user (`name`, `uid`, `uid:gid`…), when the image sets one.
    pub user: Option<String>,
}
