//! The Kubernetes and etcd versions the harness pins (`ci/kubernetes/versions.env`, which
//! `ci/kubernetes/build.sh` reads too) and where opconform's cache keeps their binaries.

use std::path::{Path, PathBuf};

/// The pinned versions, shared with `ci/kubernetes/build.sh`.
pub(super) const VERSIONS: &str = include_str!("../../../../../ci/kubernetes/versions.env");

/// The pinned Kubernetes version (`v1.34.4`).
pub fn kubernetes_version() -> &'static str {
    pinned("KUBERNETES_VERSION")
}

/// The pinned etcd version.
pub fn etcd_version() -> &'static str {
    pinned("ETCD_VERSION")
}

/// The value of `key` in the versions file (quotes removed); empty when it has none.
pub(super) fn pinned(key: &str) -> &'static str {
    VERSIONS
        .lines()
        .filter_map(|line| line.trim().split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.trim().trim_matches('"'))
        .unwrap_or_default()
}

/// opconform's cache directory: `OPCONFORM_CACHE`, else `$XDG_CACHE_HOME/opconform`, else
/// `~/.cache/opconform` (the same rule as `ci/kubernetes/build.sh`).
pub fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("OPCONFORM_CACHE") {
        return PathBuf::from(dir);
    }
    let base = var("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(var("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
    });
    base.join("opconform")
}

/// The directory `ci/kubernetes/build.sh` puts the binaries of the pinned version in.
pub fn build_dir() -> PathBuf {
    build_dir_in(&cache_dir(), kubernetes_version())
}

/// The directory the binaries of Kubernetes `version` (`v1.37.2`) are built into below the
/// cache directory `cache`.
pub(super) fn build_dir_in(cache: &Path, version: &str) -> PathBuf {
    cache.join(format!("kubernetes-{version}")).join("bin")
}

pub(super) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
