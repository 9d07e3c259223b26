//! From a source and a reference to what an image is made of (`parts`). An OCI layout
//! (`oci-layout` and `index.json`, see `oci`) is preferred, since docker 25+ writes one
//! into its `docker save` archives too; otherwise `manifest.json` of a `docker save`
//! archive (see `docker`) is read.

use crate::ImageError;
use crate::parts::Resolved;
use crate::source::Store;

/// Finds the image `reference` (or the only one) in `store`.
pub(crate) fn resolve(store: &Store, reference: Option<&str>) -> Result<Resolved, ImageError> {
    if store.exists("oci-layout") && store.exists("index.json") {
        crate::oci::resolve(store, reference)
    } else if store.exists("manifest.json") {
        crate::docker::resolve(store, reference)
    } else {
        Err(ImageError::UnknownFormat {
            path: store.path().to_owned(),
        })
    }
}
