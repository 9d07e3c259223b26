//! Finding an image in a `docker save` archive by its `manifest.json`: a list of images,
//! each with its `Config`, `RepoTags` and `Layers` as paths in the archive. Two layouts
//! are read:
//! - legacy (docker before 25): the config is `<hex>.json` (its name is its digest) and
//!   each layer is `<layer id>/layer.tar` (or a link to another one). A layer id is not a
//!   content digest, so such a layer is verified against the config's diff id for it
//!   (the sha256 of the uncompressed tar, which is what docker stores there);
//! - docker 25+: config and layers are `blobs/sha256/<hex>` and verified against that.
//!   (Such an archive also carries an OCI layout, which `resolve` prefers.)
//!
//! `RepoTags` are matched against the reference as `reference` says; without a
//! reference the archive must hold one image.
//!
//! # Caveats
//! Layer sizes are not known in advance here (`manifest.json` gives none), so only
//! digests are checked; `LayerSources` (foreign layers) are ignored.

use serde::Deserialize;

use crate::parts::{self, Check, LayerRef, Resolved};
use crate::reference::{self, Score};
use crate::source::{Expected, Store, normalise};
use crate::{ImageError, digest};

/// One image of `manifest.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SavedImage {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    #[serde(default)]
    layers: Vec<String>,
}

impl SavedImage {
    fn tags(&self) -> &[String] {
        self.repo_tags.as_deref().unwrap_or_default()
    }

    fn display_name(&self) -> String {
        match self.tags().first() {
            Some(tag) => tag.clone(),
            None => format!("<untagged {}>", self.config),
        }
    }
}

/// The digest `sha256:<hex>` that a path names: `blobs/sha256/<hex>` or `<hex>.json`.
fn digest_of_path(name: &str) -> Option<String> {
    let name = normalise(name)?;
    let hex = match name.strip_prefix("blobs/sha256/") {
        Some(hex) => hex,
        None => name.strip_suffix(".json")?,
    };
    digest::is_sha256_hex(hex).then(|| format!("sha256:{hex}"))
}

pub(crate) fn resolve(store: &Store, reference: Option<&str>) -> Result<Resolved, ImageError> {
    let mut images: Vec<SavedImage> = store.read_json("manifest.json", "docker save manifest")?;
    images.dedup_by(|a, b| a.config == b.config);
    let available = || {
        images
            .iter()
            .flat_map(|image| match image.tags() {
                [] => vec![image.display_name()],
                tags => tags.to_vec(),
            })
            .collect()
    };
    let saved = match reference {
        Some(reference) => images
            .iter()
            .find(|image| {
                image
                    .tags()
                    .iter()
                    .any(|tag| reference::score(reference, tag) == Score::Full)
            })
            .ok_or_else(|| ImageError::NotFound {
                path: store.path().to_owned(),
                reference: reference.to_owned(),
                available: available(),
            })?,
        None => match images.as_slice() {
            [] => {
                return Err(ImageError::Empty {
                    path: store.path().to_owned(),
                });
            }
            [only] => only,
            _ => {
                return Err(ImageError::Ambiguous {
                    path: store.path().to_owned(),
                    available: available(),
                });
            }
        },
    };
    let image = reference.map_or_else(|| saved.display_name(), str::to_owned);

    let config_digest = digest_of_path(&saved.config).ok_or_else(|| ImageError::ConfigName {
        path: store.path().to_owned(),
        name: saved.config.clone(),
    })?;
    let config = parts::read_config(
        store,
        &saved.config,
        &Expected {
            digest: config_digest.clone(),
            size: None,
        },
        &image,
    )?;
    let diff_ids = config.rootfs().diff_ids();
    let layers = saved
        .layers
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let check = match normalise(name)
                .filter(|n| n.starts_with("blobs/"))
                .and_then(|n| digest_of_path(&n))
            {
                Some(digest) => Check::Blob(Expected { digest, size: None }),
                None => match diff_ids.get(i) {
                    Some(diff_id) if saved.layers.len() == diff_ids.len() => {
                        Check::DiffId(diff_id.clone())
                    }
                    _ => {
                        return Err(ImageError::LayerCount {
                            path: store.path().to_owned(),
                            image: image.clone(),
                            layer: name.clone(),
                            layers: saved.layers.len(),
                            diff_ids: diff_ids.len(),
                        });
                    }
                },
            };
            Ok(LayerRef {
                name: name.clone(),
                label: name.clone(),
                media_type: "application/vnd.docker.image.rootfs.diff.tar".to_owned(),
                check,
            })
        })
        .collect::<Result<_, ImageError>>()?;
    Ok(Resolved {
        image,
        config_digest,
        config: parts::image_config(&config),
        layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_path_names_its_digest_in_either_layout() {
        let hex = "ab".repeat(32);
        let want = Some(format!("sha256:{hex}"));
        assert_eq!(digest_of_path(&format!("{hex}.json")), want);
        assert_eq!(digest_of_path(&format!("blobs/sha256/{hex}")), want);
        assert_eq!(digest_of_path("config.json"), None);
        assert_eq!(digest_of_path(&format!("blobs/sha512/{hex}")), None);
    }
}
