//! Where the real Kubernetes binaries come from: setup-envtest's `KUBEBUILDER_ASSETS`, or
//! the cache `ci/kubernetes/build.sh` fills from the Go module proxy, at the versions
//! pinned in `ci/kubernetes/versions.env`. When neither has them, they are built into the
//! cache on first use ([`super::provision`]), unless `OPCONFORM_NO_PROVISION=1`. A run that
//! chose another of the known versions ([`super::versions::choose`]) finds that version's
//! binaries in the cache, built there when missing; `KUBEBUILDER_ASSETS` is then not used.

use std::path::{Path, PathBuf};

use super::pinned::is_executable;
pub use super::pinned::{build_dir, cache_dir, etcd_version, kubernetes_version};
use super::provision::{self, ProvisionError, Provisioner};
use super::versions;

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
    /// They are not all in the cache, and could not be built there.
    #[error(
        "the Kubernetes binaries are not all in {}, and could not be built there",
        dir.display()
    )]
    Provision {
        /// The cache's binary directory.
        dir: PathBuf,
        /// Why building failed or could not start.
        #[source]
        source: ProvisionError,
    },
}

/// The kubectl to run: the one in `KUBEBUILDER_ASSETS` or in [`build_dir`] when there,
/// else the one built into [`build_dir`] now (see [`Binaries::find`]); the one on `PATH`
/// only when nothing can be built here (no Go 1.24 or newer) or building is turned off
/// (`OPCONFORM_NO_PROVISION=1`).
///
/// # Errors
/// [`BinariesError::Provision`] when the build failed, or when nothing can be built and
/// there is no kubectl on `PATH` either; [`BinariesError::Missing`] when building is
/// turned off and there is none anywhere.
pub fn kubectl() -> Result<PathBuf, BinariesError> {
    Lookup::from_env().kubectl()
}

/// Where to look for the binaries, and whether and how to build them when they are not
/// there: read from the environment once per lookup.
struct Lookup {
    /// `KUBEBUILDER_ASSETS`.
    assets: Option<PathBuf>,
    /// Whether building is allowed (no `OPCONFORM_NO_PROVISION=1`).
    provision: bool,
    /// The build into the cache.
    provisioner: Provisioner,
}

impl Lookup {
    fn from_env() -> Self {
        let assets = std::env::var_os("KUBEBUILDER_ASSETS")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let chosen = versions::chosen().kubernetes;
        if let (Some(version), Some(dir)) = (chosen, &assets) {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "opconform: Kubernetes {version} was chosen: its binaries come from the cache, not from KUBEBUILDER_ASSETS ({})",
                    dir.display()
                )
            });
        }
        Self {
            assets: if chosen.is_some() { None } else { assets },
            provision: !provision::opted_out(),
            provisioner: Provisioner::of(
                chosen.unwrap_or_else(versions::KubernetesVersion::pinned),
            ),
        }
    }

    /// Builds the binaries into the cache unless they are all there.
    fn provide(&self) -> Result<PathBuf, BinariesError> {
        self.provisioner
            .ensure()
            .map_err(|source| BinariesError::Provision {
                dir: self.provisioner.bin_dir(),
                source,
            })
    }

    fn binaries(&self) -> Result<Binaries, BinariesError> {
        if let Some(dir) = &self.assets {
            return Binaries::in_dir(dir);
        }
        if self.provision {
            self.provide()?;
        }
        Binaries::in_dir(&self.provisioner.bin_dir())
    }

    fn kubectl(&self) -> Result<PathBuf, BinariesError> {
        let dirs: Vec<PathBuf> = self
            .assets
            .iter()
            .cloned()
            .chain([self.provisioner.bin_dir()])
            .collect();
        if let Some(found) = dirs
            .iter()
            .map(|dir| dir.join("kubectl"))
            .find(|path| is_executable(path))
        {
            return Ok(found);
        }
        let cannot_build = if self.provision {
            match self.provide() {
                Ok(dir) => return Ok(dir.join("kubectl")),
                Err(BinariesError::Provision { source, dir }) if source.is_impossible() => {
                    Some(BinariesError::Provision { dir, source })
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let path = self.provisioner.search_path();
        if let Some(found) = provision::on_path("kubectl", path) {
            return Ok(found);
        }
        Err(cannot_build.unwrap_or_else(|| BinariesError::Missing {
            binary: "kubectl",
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .chain(["PATH".to_string()])
                .collect::<Vec<_>>()
                .join(", "),
        }))
    }
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
    /// Finds them: in `KUBEBUILDER_ASSETS` when it is set, else in [`build_dir`], where
    /// they are built first when one of them is missing (once, however many threads and
    /// processes ask: see [`super::provision`]), unless `OPCONFORM_NO_PROVISION=1`. The
    /// build blocks the calling thread; it reports its progress on stderr.
    ///
    /// # Errors
    /// [`BinariesError::Missing`] when etcd or kube-apiserver is not there;
    /// [`BinariesError::Provision`] when building them failed or is impossible here.
    pub fn find() -> Result<Self, BinariesError> {
        Lookup::from_env().binaries()
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

    use super::provision::fake::{self, BUILD};

    /// A lookup into `<root>/cache` with the fake build, `KUBEBUILDER_ASSETS` unset.
    fn lookup(root: &Path, provision: bool) -> Lookup {
        Lookup {
            assets: None,
            provision,
            provisioner: fake::provisioner(root, BUILD),
        }
    }

    /// A lookup whose `PATH` is only `dirs`: no go, no bash.
    fn lookup_without_go(root: &Path, provision: bool, dirs: &[&Path]) -> Lookup {
        let path = std::env::join_paths(dirs).unwrap();
        Lookup {
            assets: None,
            provision,
            provisioner: Provisioner::new(root.join("cache"), BUILD.to_string(), path),
        }
    }

    #[test]
    fn an_empty_cache_is_filled_by_the_build_once_and_then_found_there() {
        let root = tempfile::tempdir().unwrap();
        let lookup = lookup(root.path(), true);
        let found = lookup.binaries().unwrap();
        let dir = lookup.provisioner.bin_dir();
        assert_eq!(found.dir, dir);
        assert_eq!(found.kube_scheduler, Some(dir.join("kube-scheduler")));
        assert_eq!(lookup.kubectl().unwrap(), dir.join("kubectl"));
        lookup.binaries().unwrap();
        assert_eq!(fake::runs(root.path()), 1);
    }

    #[test]
    fn with_building_turned_off_an_empty_cache_gives_the_missing_error_and_nothing_is_built() {
        let root = tempfile::tempdir().unwrap();
        let e = lookup(root.path(), false).binaries().unwrap_err();
        assert!(
            matches!(e, BinariesError::Missing { binary: "etcd", .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("ci/kubernetes/build.sh control-plane"),
            "{e}"
        );
        assert_eq!(fake::runs(root.path()), 0);
    }

    #[test]
    fn kubebuilder_assets_are_used_as_they_are_and_never_built_into() {
        let root = tempfile::tempdir().unwrap();
        let assets = root.path().join("assets");
        fake::executable(&assets.join("etcd"), "");
        let mut lookup = lookup(root.path(), true);
        lookup.assets = Some(assets.clone());
        let e = lookup.binaries().unwrap_err().to_string();
        assert!(e.contains("no kube-apiserver in"), "{e}");
        fake::executable(&assets.join("kube-apiserver"), "");
        fake::executable(&assets.join("kubectl"), "");
        assert_eq!(lookup.binaries().unwrap().dir, assets);
        assert_eq!(lookup.kubectl().unwrap(), assets.join("kubectl"));
        assert_eq!(fake::runs(root.path()), 0);
    }

    #[test]
    fn a_missing_go_is_named_in_the_error_of_find_with_what_to_install() {
        let root = tempfile::tempdir().unwrap();
        let e = lookup_without_go(root.path(), true, &[])
            .binaries()
            .unwrap_err();
        let chain = crate::error_chain(&e);
        assert!(chain.contains("are not all in"), "{chain}");
        assert!(
            chain.contains("go is not on PATH: install Go 1.24 or newer"),
            "{chain}"
        );
        assert!(chain.contains("KUBEBUILDER_ASSETS"), "{chain}");
    }

    #[test]
    fn without_go_kubectl_is_the_one_on_path() {
        let root = tempfile::tempdir().unwrap();
        let tools = root.path().join("tools");
        fake::executable(&tools.join("kubectl"), "");
        let lookup = lookup_without_go(root.path(), true, &[&tools]);
        assert_eq!(lookup.kubectl().unwrap(), tools.join("kubectl"));
    }

    #[test]
    fn without_go_or_a_kubectl_on_path_the_kubectl_error_says_what_to_install() {
        let root = tempfile::tempdir().unwrap();
        let e = lookup_without_go(root.path(), true, &[])
            .kubectl()
            .unwrap_err();
        let chain = crate::error_chain(&e);
        assert!(chain.contains("install Go 1.24 or newer"), "{chain}");
    }

    #[test]
    fn with_building_turned_off_kubectl_is_the_one_on_path_or_missing() {
        let root = tempfile::tempdir().unwrap();
        let tools = root.path().join("tools");
        let e = lookup_without_go(root.path(), false, &[&tools])
            .kubectl()
            .unwrap_err();
        assert!(
            matches!(
                e,
                BinariesError::Missing {
                    binary: "kubectl",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("PATH"), "{e}");
        fake::executable(&tools.join("kubectl"), "");
        let lookup = lookup_without_go(root.path(), false, &[&tools]);
        assert_eq!(lookup.kubectl().unwrap(), tools.join("kubectl"));
    }

    #[test]
    fn a_failed_build_is_an_error_for_kubectl_not_a_fallback_to_path() {
        let root = tempfile::tempdir().unwrap();
        let mut lookup = lookup(root.path(), true);
        lookup.provisioner = fake::provisioner(root.path(), "echo broken >&2; exit 1");
        let e = lookup.kubectl().unwrap_err();
        let chain = crate::error_chain(&e);
        assert!(chain.contains("failed (exit status: 1)"), "{chain}");
        assert!(chain.ends_with("broken"), "{chain}");
    }
}
