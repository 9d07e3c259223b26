//! Where the real Kubernetes binaries come from: setup-envtest's `KUBEBUILDER_ASSETS`, or
//! the cache `ci/kubernetes/build.sh` fills from the Go module proxy, at the versions
//! pinned in `ci/kubernetes/versions.env`.

use std::path::{Path, PathBuf};

/// The pinned versions, shared with `ci/kubernetes/build.sh`.
const VERSIONS: &str = include_str!("../../../ci/kubernetes/versions.env");

/// Errors of finding the binaries.
#[derive(Debug, thiserror::Error)]
pub enum BinariesError {
    /// A required binary is in none of the places looked at.
    #[error(
        "no {binary} in {searched}: build the Kubernetes binaries with `ci/kubernetes/build.sh control-plane`, \
         or set KUBEBUILDER_ASSETS to a directory holding etcd, kube-apiserver and kubectl (what setup-envtest installs)"
    )]
    Missing {
        /// The binary.
        binary: &'static str,
        /// The directories looked in.
        searched: String,
    },
}

/// The pinned Kubernetes version (`v1.34.4`).
pub fn kubernetes_version() -> &'static str {
    pinned("KUBERNETES_VERSION")
}

/// The pinned etcd version.
pub fn etcd_version() -> &'static str {
    pinned("ETCD_VERSION")
}

fn pinned(key: &str) -> &'static str {
    VERSIONS
        .lines()
        .filter_map(|line| line.trim().split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.trim())
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
    cache_dir()
        .join(format!("kubernetes-{}", kubernetes_version()))
        .join("bin")
}

/// The kubectl to run: the one in `KUBEBUILDER_ASSETS` or in [`build_dir`] when there,
/// else `kubectl` from `PATH`.
pub fn kubectl() -> PathBuf {
    std::env::var_os("KUBEBUILDER_ASSETS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .chain([build_dir()])
        .map(|dir| dir.join("kubectl"))
        .find(|path| is_executable(path))
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// The control-plane binaries found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    /// etcd.
    pub etcd: PathBuf,
    /// kube-apiserver.
    pub kube_apiserver: PathBuf,
    /// kube-controller-manager, when present (setup-envtest has none).
    pub kube_controller_manager: Option<PathBuf>,
    /// kube-scheduler, when present (setup-envtest has none).
    pub kube_scheduler: Option<PathBuf>,
    /// kubectl, when present.
    pub kubectl: Option<PathBuf>,
    /// Where they were found.
    pub dir: PathBuf,
}

impl Binaries {
    /// Finds them: in `KUBEBUILDER_ASSETS` when it is set, else in [`build_dir`].
    ///
    /// # Errors
    /// [`BinariesError::Missing`] when etcd or kube-apiserver is not there.
    pub fn find() -> Result<Self, BinariesError> {
        match std::env::var_os("KUBEBUILDER_ASSETS").filter(|v| !v.is_empty()) {
            Some(dir) => Self::in_dir(Path::new(&dir)),
            None => Self::in_dir(&build_dir()),
        }
    }

    /// Finds them in `dir`.
    ///
    /// # Errors
    /// [`BinariesError::Missing`] when etcd or kube-apiserver is not there.
    pub fn in_dir(dir: &Path) -> Result<Self, BinariesError> {
        let optional = |name: &str| Some(dir.join(name)).filter(|p| is_executable(p));
        let required = |binary: &'static str| {
            optional(binary).ok_or_else(|| BinariesError::Missing {
                binary,
                searched: dir.display().to_string(),
            })
        };
        Ok(Self {
            etcd: required("etcd")?,
            kube_apiserver: required("kube-apiserver")?,
            kube_controller_manager: optional("kube-controller-manager"),
            kube_scheduler: optional("kube-scheduler"),
            kubectl: optional("kubectl"),
            dir: dir.to_path_buf(),
        })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_versions_are_read_from_the_file_the_build_script_sources() {
        assert!(
            kubernetes_version().starts_with("v1.34."),
            "{}",
            kubernetes_version()
        );
        assert!(etcd_version().starts_with("v3.6."), "{}", etcd_version());
    }

    #[test]
    fn a_directory_without_kube_apiserver_is_refused_naming_the_binary_and_the_remedy() {
        let dir = tempfile::tempdir().unwrap();
        let etcd = dir.path().join("etcd");
        std::fs::write(&etcd, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&etcd, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = Binaries::in_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no kube-apiserver in"), "{e}");
        assert!(e.contains("ci/kubernetes/build.sh control-plane"), "{e}");
        assert!(e.contains("KUBEBUILDER_ASSETS"), "{e}");
    }

    #[test]
    fn setup_envtest_assets_without_controller_manager_or_scheduler_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        for name in ["etcd", "kube-apiserver", "kubectl"] {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let found = Binaries::in_dir(dir.path()).unwrap();
        assert_eq!(found.kube_controller_manager, None);
        assert_eq!(found.kube_scheduler, None);
        assert_eq!(found.kubectl, Some(dir.path().join("kubectl")));
    }
}
