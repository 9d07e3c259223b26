//! The image of the operator under test on our kubelets (sim and local), as the kind
//! provider would build it from the operator's binary: the binary at the path its manager
//! container runs ([`super::OperatorUnderTest::entrypoint_in_image`], else
//! `/usr/local/bin/<its name>`), run as [`super::kind::image::USER`].
//!
//! - A statically linked binary (a Go operator built with `CGO_ENABLED=0`, as a kubebuilder
//!   scaffold's is) gets a real image: an OCI image layout holding the binary, `/etc/passwd`
//!   and `/etc/group` naming the non-root user, and `/tmp`, with the binary as its
//!   entrypoint, as distroless's `static:nonroot` base holds it. The kubelet unpacks it as
//!   any image (by digest, into its image cache). Layouts are kept under the image cache,
//!   one per binary (its path, size and modification time), and written again only when
//!   the binary changes.
//! - A binary that needs a loader and libraries (our Rust operator) is mapped as an
//!   executable image instead: it runs in a root holding the host's system directories,
//!   read-only, as the same user.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::sim::kubelet::ImageMap;

/// Bumped whenever the layout's contents change, so earlier layouts are not reused.
const FORMAT: u32 = 1;

/// Where the binary goes when the manager container runs the image's entrypoint.
const BIN_DIR: &str = "/usr/local/bin";

/// Errors building the operator's image.
#[derive(Debug, thiserror::Error)]
pub enum OperatorImageError {
    /// The binary could not be read.
    #[error("cannot read the operator's binary {path}")]
    Read {
        /// The binary.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The entrypoint is not an absolute path of a file.
    #[error("the operator's entrypoint {0:?} is not the absolute path of a file in the image")]
    Entrypoint(String),
    /// A file of the image's root could not be written.
    #[error("cannot write {path} for the operator's image")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The layout could not be written.
    #[error("cannot write the operator's image layout {path}")]
    Layout {
        /// The layout directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<oci_image::ImageError>,
    },
}

/// The images of our kubelets for the operator under test: `image`, the name its manifests
/// give, as an image built from `binary` with the binary at `entrypoint` (see the module
/// docs), layouts kept under `cache`.
///
/// # Errors
/// When the binary cannot be read or its layout written.
pub fn operator_images(
    image: &str,
    binary: &Path,
    entrypoint: Option<String>,
    cache: &Path,
) -> Result<ImageMap, OperatorImageError> {
    let mut images = ImageMap::new();
    if is_static(binary)? {
        let layout = layout_of(image, binary, entrypoint, cache)?;
        images.insert(image, layout);
    } else {
        images.insert(image, binary);
        images.configure(image, |config| {
            config.user = Some(super::kind::image::USER.to_string());
        });
    }
    Ok(images)
}

fn is_static(binary: &Path) -> Result<bool, OperatorImageError> {
    let read = |source| OperatorImageError::Read {
        path: binary.to_owned(),
        source,
    };
    let mut head = vec![0u8; 64 * 1024];
    let mut file = std::fs::File::open(binary).map_err(read)?;
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..]).map_err(read)? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(oci_image::is_static_executable(&head[..filled]))
}

/// Layouts being written by this process: one at a time, so scenarios starting together
/// write each layout once.
static WRITING: Mutex<()> = Mutex::new(());

/// The layout of `binary`'s image, written when missing.
fn layout_of(
    image: &str,
    binary: &Path,
    entrypoint: Option<String>,
    cache: &Path,
) -> Result<PathBuf, OperatorImageError> {
    let path = match entrypoint {
        Some(path) => path,
        None => format!(
            "{BIN_DIR}/{}",
            binary
                .file_name()
                .map_or_else(|| "operator".into(), |n| n.to_string_lossy())
        ),
    };
    if !path.starts_with('/') || path.ends_with('/') || path.split('/').any(|p| p == "..") {
        return Err(OperatorImageError::Entrypoint(path));
    }
    let metadata = binary
        .metadata()
        .map_err(|source| OperatorImageError::Read {
            path: binary.to_owned(),
            source,
        })?;
    let modified = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let key = digest_hex(&format!(
        "{FORMAT}\n{image}\n{path}\n{}\n{}\n{modified}",
        binary.display(),
        metadata.len()
    ));
    let layouts = cache.join("operator-layouts");
    let layout = layouts.join(&key[..32]);
    let _writing = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    if layout.join("index.json").is_file() {
        return Ok(layout);
    }
    let write = |path: &Path| {
        let path = path.to_owned();
        move |source| OperatorImageError::Write { path, source }
    };
    std::fs::create_dir_all(&layouts).map_err(write(&layouts))?;
    let work = tempfile::Builder::new()
        .prefix(".writing-")
        .tempdir_in(&layouts)
        .map_err(write(&layouts))?;
    let root = work.path().join("rootfs");
    let inside = root.join(path.trim_start_matches('/'));
    let parent = inside.parent().unwrap_or(&root).to_owned();
    std::fs::create_dir_all(&parent).map_err(write(&parent))?;
    std::fs::copy(binary, &inside).map_err(write(&inside))?;
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o755))
        .map_err(write(&inside))?;
    let etc = root.join("etc");
    std::fs::create_dir_all(&etc).map_err(write(&etc))?;
    for (name, text) in [
        (
            "passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        ),
        ("group", "root:x:0:\nnonroot:x:65532:\n"),
    ] {
        std::fs::write(etc.join(name), text).map_err(write(&etc.join(name)))?;
    }
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(write(&tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).map_err(write(&tmp))?;
    let config = oci_image::ImageConfig {
        entrypoint: vec![path],
        cmd: Vec::new(),
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        working_dir: Some("/".into()),
        user: Some(super::kind::image::USER.to_string()),
    };
    let written = work.path().join("layout");
    oci_image::write_layout(&written, image, &root, &config).map_err(|source| {
        OperatorImageError::Layout {
            path: written.clone(),
            source: Box::new(source),
        }
    })?;
    std::fs::rename(&written, &layout).map_err(write(&layout))?;
    Ok(layout)
}

fn digest_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_that_needs_libraries_is_an_executable_image_run_as_nonroot() {
        let cache = tempfile::tempdir().expect("a directory");
        let images = operator_images("op:dev", Path::new("/bin/sh"), None, cache.path())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(images.get("op:dev"), Some(Path::new("/bin/sh")));
        assert_eq!(
            images
                .config("op:dev")
                .and_then(|c| c.user.clone())
                .as_deref(),
            Some("65532:65532")
        );
    }

    #[test]
    fn a_static_binary_is_an_image_layout_with_it_at_the_entrypoint_run_as_nonroot() {
        // Debian's busybox-static: a statically linked binary, as a Go operator's is.
        let Some(busybox) = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .map(Path::new)
            .find(|p| is_static(p).unwrap_or(false))
        else {
            assert!(
                std::env::var_os("CI").is_none(),
                "a static busybox is needed (apt-get install busybox-static)"
            );
            eprintln!("skipped: no static busybox (apt-get install busybox-static)");
            return;
        };
        let cache = tempfile::tempdir().expect("a directory");
        let images = operator_images("op:dev", busybox, Some("/manager".into()), cache.path())
            .unwrap_or_else(|e| panic!("{e}"));
        let layout = images.get("op:dev").expect("mapped").to_owned();
        assert!(layout.join("index.json").is_file(), "{}", layout.display());
        // Written once: the same binary maps to the same layout.
        let again = operator_images("op:dev", busybox, Some("/manager".into()), cache.path())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.get("op:dev"), Some(layout.as_path()));
        let store = oci_image::ImageStore::new(cache.path().join("unpacked"));
        let image = store
            .unpack(&oci_image::Source::Layout(layout), Some("op:dev"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(image.config.entrypoint, ["/manager"]);
        assert_eq!(image.config.user.as_deref(), Some("65532:65532"));
        let manager = image.rootfs.join("manager");
        assert_eq!(
            std::fs::metadata(&manager).map(|m| m.len()).ok(),
            std::fs::metadata(busybox).map(|m| m.len()).ok()
        );
        let passwd = std::fs::read_to_string(image.rootfs.join("etc/passwd")).unwrap_or_default();
        assert!(passwd.contains(":65532:65532:"), "{passwd}");
    }

    #[test]
    fn a_relative_entrypoint_is_refused_naming_it() {
        let cache = tempfile::tempdir().expect("a directory");
        let err = layout_of(
            "op:dev",
            Path::new("/bin/sh"),
            Some("manager".into()),
            cache.path(),
        )
        .expect_err("a relative path");
        assert!(err.to_string().contains("\"manager\""), "{err}");
    }
}
