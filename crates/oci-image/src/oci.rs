//! Finding an image in an OCI image layout (a directory, or a tar of one as skopeo's
//! `oci-archive` and docker 25+'s `docker save` write): the `oci-layout` file is checked,
//! the entries of `index.json` are matched against the reference by their
//! `org.opencontainers.image.ref.name` and `io.containerd.image.name` annotations, and an
//! entry that is an image index (multi-platform image) is followed to the manifest for
//! `linux/<this machine's GOARCH>`, through nested indexes.
//!
//! Without a reference, the layout must hold one image: one manifest, or several that
//! are the same image for several platforms (same names); otherwise the error lists them.
//!
//! Every index, manifest and config read here is verified against its digest and size.
//!
//! # Caveats
//! Blobs are read from `blobs/sha256/` only; `urls` of non-distributable layers are not
//! fetched (no network), and artifact manifests are not told apart from images until their
//! config fails to parse as an image config.

use std::collections::HashMap;

use oci_spec::image::{Descriptor, ImageIndex, ImageManifest, OciLayout};

use crate::parts::{self, Check, LayerRef, Resolved};
use crate::reference::{self, Score};
use crate::source::{Expected, Store};
use crate::{ImageError, platform};

/// The annotation naming an image in an index (a full reference or a tag).
const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The annotation containerd and docker 25+ add with the image's full name.
const CONTAINERD_NAME: &str = "io.containerd.image.name";
/// How deep image indexes may nest.
const MAX_DEPTH: usize = 4;

pub(crate) fn resolve(store: &Store, reference: Option<&str>) -> Result<Resolved, ImageError> {
    let layout: OciLayout = store.read_json("oci-layout", "oci-layout file")?;
    let version = layout.image_layout_version();
    if version.split('.').next() != Some("1") {
        return Err(ImageError::LayoutVersion {
            path: store.path().to_owned(),
            version: version.clone(),
        });
    }
    let index: ImageIndex = store.read_json("index.json", "oci image index")?;
    let mut seen = HashMap::new();
    let entries: Vec<&Descriptor> = index
        .manifests()
        .iter()
        .filter(|d| seen.insert(d.digest().to_string(), ()).is_none())
        .collect();
    if entries.is_empty() {
        return Err(ImageError::Empty {
            path: store.path().to_owned(),
        });
    }
    let candidates = select(store, &entries, reference)?;
    let image = reference.map_or_else(|| display_name(candidates[0]), str::to_owned);
    let manifest = find_manifest(store, &image, &candidates, 0)?;

    let config_desc = manifest.config();
    let config_digest = config_desc.digest().to_string();
    let config = parts::read_config(
        store,
        &store.blob_name(&config_digest)?,
        &Expected {
            digest: config_digest.clone(),
            size: Some(config_desc.size()),
        },
        &image,
    )?;
    let layers = manifest
        .layers()
        .iter()
        .map(|layer| {
            let digest = layer.digest().to_string();
            Ok(LayerRef {
                name: store.blob_name(&digest)?,
                label: digest.clone(),
                media_type: layer.media_type().to_string(),
                check: Check::Blob(Expected {
                    digest,
                    size: Some(layer.size()),
                }),
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

/// The names an index entry gives its image.
fn names(descriptor: &Descriptor) -> Vec<&str> {
    let Some(annotations) = descriptor.annotations() else {
        return Vec::new();
    };
    [CONTAINERD_NAME, REF_NAME]
        .iter()
        .filter_map(|key| annotations.get(*key).map(String::as_str))
        .collect()
}

/// The image of an index entry as listings show it.
fn display_name(descriptor: &Descriptor) -> String {
    match names(descriptor).first() {
        Some(name) => (*name).to_owned(),
        None => format!("<untagged {}>", descriptor.digest()),
    }
}

/// How well `reference` names the image of an index entry.
fn score(descriptor: &Descriptor, reference: &str) -> Score {
    let names = names(descriptor);
    let full = names
        .iter()
        .map(|name| reference::score(reference, name))
        .max()
        .unwrap_or(Score::None);
    if full != Score::None {
        return full;
    }
    let has_full_name = descriptor
        .annotations()
        .as_ref()
        .is_some_and(|a| a.contains_key(CONTAINERD_NAME));
    let tag_match = names
        .iter()
        .any(|name| reference::is_bare_tag(name) && reference::has_tag(reference, name));
    if tag_match && !has_full_name {
        Score::Tag
    } else {
        Score::None
    }
}

/// The entries of `index.json` that `reference` names (or, without one, the only image).
fn select<'a>(
    store: &Store,
    entries: &[&'a Descriptor],
    reference: Option<&str>,
) -> Result<Vec<&'a Descriptor>, ImageError> {
    let available = || {
        let mut names: Vec<String> = entries.iter().map(|d| display_name(d)).collect();
        names.dedup();
        names
    };
    match reference {
        Some(reference) => {
            let best = entries
                .iter()
                .map(|d| score(d, reference))
                .max()
                .unwrap_or(Score::None);
            if best == Score::None {
                return Err(ImageError::NotFound {
                    path: store.path().to_owned(),
                    reference: reference.to_owned(),
                    available: available(),
                });
            }
            let matches: Vec<&Descriptor> = entries
                .iter()
                .copied()
                .filter(|d| score(d, reference) == best)
                .collect();
            if is_one_image(&matches) {
                Ok(matches)
            } else {
                Err(ImageError::Ambiguous {
                    path: store.path().to_owned(),
                    available: matches.iter().map(|d| display_name(d)).collect(),
                })
            }
        }
        None if is_one_image(entries) => Ok(entries.to_vec()),
        None => Err(ImageError::Ambiguous {
            path: store.path().to_owned(),
            available: available(),
        }),
    }
}

/// Whether `entries` are one image: a single entry, or entries of the same names that
/// each name a platform (an image listed per platform in `index.json` itself).
fn is_one_image(entries: &[&Descriptor]) -> bool {
    match entries {
        [] => false,
        [_] => true,
        [first, ..] => entries
            .iter()
            .all(|d| names(d) == names(first) && d.platform().is_some()),
    }
}

/// Follows `candidates` (entries naming one image) to the manifest for this machine.
fn find_manifest(
    store: &Store,
    image: &str,
    candidates: &[&Descriptor],
    depth: usize,
) -> Result<ImageManifest, ImageError> {
    let chosen = match candidates {
        [only] => *only,
        _ => pick_platform(store, image, candidates)?,
    };
    let digest = chosen.digest().to_string();
    if depth > MAX_DEPTH {
        return Err(ImageError::NotAnImage {
            path: store.path().to_owned(),
            digest,
            expected: "an image manifest within 4 nested image indexes",
        });
    }
    let bytes = store.read_verified(
        &store.blob_name(&digest)?,
        &Expected {
            digest: digest.clone(),
            size: Some(chosen.size()),
        },
    )?;
    let kind: serde_json::Value = store.parse(&bytes, &digest, "json document")?;
    if kind.get("manifests").is_some() {
        let index: ImageIndex = store.parse(&bytes, &digest, "oci image index")?;
        let children: Vec<&Descriptor> = index.manifests().iter().collect();
        let next = match children.as_slice() {
            [] => {
                return Err(ImageError::NotAnImage {
                    path: store.path().to_owned(),
                    digest,
                    expected: "an image index with at least one manifest",
                });
            }
            // A lone entry without a platform is taken: its config is checked anyway.
            [only] if only.platform().is_none() => *only,
            _ => pick_platform(store, image, &children)?,
        };
        find_manifest(store, image, &[next], depth + 1)
    } else if kind.get("layers").is_some() {
        store.parse(&bytes, &digest, "oci image manifest")
    } else {
        Err(ImageError::NotAnImage {
            path: store.path().to_owned(),
            digest,
            expected: "an image index or an image manifest",
        })
    }
}

/// The first of `entries` whose platform is this machine's.
fn pick_platform<'a>(
    store: &Store,
    image: &str,
    entries: &[&'a Descriptor],
) -> Result<&'a Descriptor, ImageError> {
    platform::pick(entries).map_err(|found| ImageError::Platform {
        path: store.path().to_owned(),
        image: image.to_owned(),
        wanted: platform::wanted(),
        found,
    })
}
