//! What an image found in a source is made of ([`Resolved`]): its config and its layers,
//! each with the digest it must be verified against, as `oci` and `docker` read them; and
//! reading a config, which must be for this machine: `linux` and its architecture, so a
//! wrong image fails here with a message naming its platform instead of later with
//! `exec format error`.
//!
//! # Caveats
//! An image for another architecture is refused even where the machine could run it
//! through binfmt/qemu emulation: there is no option to choose another platform yet.

use oci_spec::image::ImageConfiguration;

use crate::source::{Expected, Store};
use crate::{ImageConfig, ImageError, platform};

/// An image found in a source, not yet unpacked.
pub(crate) struct Resolved {
    /// The image, for messages: its reference or digest.
    pub(crate) image: String,
    /// The digest of its config, `sha256:…`.
    pub(crate) config_digest: String,
    /// What it runs.
    pub(crate) config: ImageConfig,
    /// Its layers, base first.
    pub(crate) layers: Vec<LayerRef>,
}

/// A layer of an image.
pub(crate) struct LayerRef {
    /// Its file in the source.
    pub(crate) name: String,
    /// Its digest or path, for messages.
    pub(crate) label: String,
    /// Its media type as the manifest gives it.
    pub(crate) media_type: String,
    /// What it is verified against.
    pub(crate) check: Check,
}

/// How a layer is verified.
pub(crate) enum Check {
    /// The blob as stored hashes to this digest (and has this size, when known).
    Blob(Expected),
    /// The uncompressed tar hashes to this diff id: a legacy `docker save` layer, whose
    /// file name is not a digest.
    DiffId(String),
}

/// Reads, verifies and parses the config blob `name` of `image`, and checks it is for
/// this machine.
pub(crate) fn read_config(
    store: &Store,
    name: &str,
    expected: &Expected,
    image: &str,
) -> Result<ImageConfiguration, ImageError> {
    let bytes = store.read_verified(name, expected)?;
    let config: ImageConfiguration = store.parse(&bytes, &expected.digest, "image config")?;
    let (os, arch) = (config.os().to_string(), config.architecture().to_string());
    if !platform::is_this(&os, &arch) {
        return Err(ImageError::Platform {
            path: store.path().to_owned(),
            image: image.to_owned(),
            wanted: platform::wanted(),
            found: vec![format!("{os}/{arch}")],
        });
    }
    Ok(config)
}

/// What the image runs, from its config.
pub(crate) fn image_config(config: &ImageConfiguration) -> ImageConfig {
    let Some(c) = config.config() else {
        return ImageConfig::default();
    };
    ImageConfig {
        entrypoint: c.entrypoint().clone().unwrap_or_default(),
        cmd: c.cmd().clone().unwrap_or_default(),
        env: c.env().clone().unwrap_or_default(),
        working_dir: c.working_dir().clone().filter(|d| !d.is_empty()),
        user: c.user().clone().filter(|u| !u.is_empty()),
    }
}
