//! The Kubernetes versions the local provider can run (`KUBERNETES_VERSIONS` in
//! `ci/kubernetes/versions.env`: the newest patch of each minor it knows), how a version is
//! named on the command line (`1.37`, `v1.37.2`), and the choices of one run: the version
//! and the feature gates its control plane starts with ([`LocalOptions`], chosen once per
//! process by the command line before the first scenario).

use std::collections::BTreeMap;
use std::sync::RwLock;

use super::pinned::{etcd_version, kubernetes_version, pinned};

/// The feature gate of coordinated leader election (KEP-4355).
pub const COORDINATED_LEADER_ELECTION: &str = "CoordinatedLeaderElection";

/// Errors of naming a version or feature gates.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// A version that is not one of the known ones.
    #[error(
        "unknown Kubernetes version {given:?}: expected one of {known} (a minor such as 1.37 \
         names its patch)"
    )]
    Unknown {
        /// What was given.
        given: String,
        /// The known versions, as `1.32 (v1.32.13), …`.
        known: String,
    },
    /// A list of versions naming none.
    #[error("no Kubernetes version in {given:?}: expected e.g. 1.34,1.37")]
    Empty {
        /// What was given.
        given: String,
    },
    /// A list naming one version twice.
    #[error("Kubernetes version {given:?} is named twice (both are {full}): expected each once")]
    Twice {
        /// The second mention.
        given: String,
        /// The version both name.
        full: &'static str,
    },
    /// Feature gates that are not `Name=true|false,…`.
    #[error("feature gates {given:?}: {problem}: expected Name=true|false, comma-separated")]
    Gates {
        /// What was given.
        given: String,
        /// What is wrong.
        problem: String,
    },
}

/// A Kubernetes version the local provider knows: one of `KUBERNETES_VERSIONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KubernetesVersion {
    /// The minor number (37 of v1.37.2), first so that versions sort by it.
    minor: u32,
    /// The full version, `v1.37.2`.
    full: &'static str,
}

impl KubernetesVersion {
    /// The pinned version (`KUBERNETES_VERSION`), which runs when none is chosen.
    pub fn pinned() -> Self {
        Self::of(kubernetes_version())
    }

    fn of(full: &'static str) -> Self {
        let minor = full
            .trim_start_matches('v')
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or_default();
        Self { minor, full }
    }

    /// The known versions, oldest first (the pinned one among them).
    pub fn known() -> Vec<Self> {
        let mut known: Vec<Self> = pinned("KUBERNETES_VERSIONS")
            .split_whitespace()
            .map(Self::of)
            .collect();
        if !known.contains(&Self::pinned()) {
            known.push(Self::pinned());
        }
        known.sort();
        known.dedup();
        known
    }

    /// The known version `given` names: a full version (`v1.37.2`, `1.37.2`) or a minor
    /// (`1.37`, `v1.37`), which names the known patch of that minor.
    ///
    /// # Errors
    /// [`VersionError::Unknown`], listing the known versions.
    pub fn resolve(given: &str) -> Result<Self, VersionError> {
        let want = given.trim().trim_start_matches('v');
        Self::known()
            .into_iter()
            .find(|v| want == v.number() || want == v.minor_name())
            .ok_or_else(|| VersionError::Unknown {
                given: given.to_string(),
                known: Self::known()
                    .iter()
                    .map(|v| format!("{} ({})", v.minor_name(), v.full))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The versions of a comma-separated list (`1.34,1.37`), in its order.
    ///
    /// # Errors
    /// An unknown version, an empty list, or a version named twice.
    pub fn resolve_list(given: &str) -> Result<Vec<Self>, VersionError> {
        let mut versions: Vec<Self> = Vec::new();
        for item in given.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let version = Self::resolve(item)?;
            if versions.contains(&version) {
                return Err(VersionError::Twice {
                    given: item.to_string(),
                    full: version.full,
                });
            }
            versions.push(version);
        }
        if versions.is_empty() {
            return Err(VersionError::Empty {
                given: given.to_string(),
            });
        }
        Ok(versions)
    }

    /// `v1.37.2`.
    pub fn full(&self) -> &'static str {
        self.full
    }

    /// `1.37.2`.
    fn number(&self) -> &'static str {
        self.full.trim_start_matches('v')
    }

    /// `1.37`: how tables and setup-envtest name it.
    pub fn minor_name(&self) -> &'static str {
        let number = self.number();
        number.rsplit_once('.').map_or(number, |(minor, _)| minor)
    }

    /// The minor number: 37.
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// The etcd it runs with: `ETCD_VERSION_1_NN` when versions.env names one for its
    /// minor, else `ETCD_VERSION`.
    pub fn etcd(&self) -> &'static str {
        let key = format!("ETCD_VERSION_{}", self.minor_name().replace('.', "_"));
        Some(pinned(&key))
            .filter(|v| !v.is_empty())
            .unwrap_or_else(etcd_version)
    }

    /// Whether it is the pinned version.
    pub fn is_pinned(&self) -> bool {
        *self == Self::pinned()
    }
}

impl std::fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.full)
    }
}

/// Feature gates of the control plane's components: name to on or off.
pub type FeatureGates = BTreeMap<String, bool>;

/// Reads `Name=true,Other=false` (as the components' `--feature-gates` takes it).
///
/// # Errors
/// [`VersionError::Gates`] for an item that is not `Name=true|false`, or a gate named twice.
pub fn parse_feature_gates(given: &str) -> Result<FeatureGates, VersionError> {
    let bad = |problem: String| VersionError::Gates {
        given: given.to_string(),
        problem,
    };
    let mut gates = FeatureGates::new();
    for item in given.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| bad(format!("{item:?} has no ={{true|false}}")))?;
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad(format!("{name:?} is not a feature gate name")));
        }
        let on = match value.trim().to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            other => return Err(bad(format!("{name} is {other:?}, not true or false"))),
        };
        if gates.insert(name.to_string(), on).is_some() {
            return Err(bad(format!("{name} is named twice")));
        }
    }
    if gates.is_empty() {
        return Err(bad("no gate named".to_string()));
    }
    Ok(gates)
}

/// The `--feature-gates` value of `gates`: `A=true,B=false`.
pub fn feature_gates_arg(gates: &FeatureGates) -> String {
    gates
        .iter()
        .map(|(name, on)| format!("{name}={on}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The API versions kube-apiserver of `version` must serve for `gates` to work
/// (`--runtime-config`): coordinated leader election's LeaseCandidates are
/// `coordination.k8s.io/v1beta1` from 1.33 (beta, off by default, still so in 1.37),
/// `v1alpha2` in 1.32 and `v1alpha1` in 1.31.
pub fn runtime_config(version: KubernetesVersion, gates: &FeatureGates) -> Vec<String> {
    let mut config = Vec::new();
    if gates.get(COORDINATED_LEADER_ELECTION) == Some(&true) {
        let api = match version.minor() {
            0..=31 => "v1alpha1",
            32 => "v1alpha2",
            _ => "v1beta1",
        };
        config.push(format!("coordination.k8s.io/{api}=true"));
    }
    config
}

/// What one run on the local provider starts its control plane with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalOptions {
    /// The Kubernetes version, when one was chosen (`--kubernetes`); the pinned one when
    /// not, found where the pinned one is (`KUBEBUILDER_ASSETS` first).
    pub kubernetes: Option<KubernetesVersion>,
    /// The feature gates of kube-apiserver, kube-controller-manager and kube-scheduler.
    pub feature_gates: FeatureGates,
}

impl LocalOptions {
    /// The version that runs: the chosen one, else the pinned one.
    pub fn version(&self) -> KubernetesVersion {
        self.kubernetes.unwrap_or_else(KubernetesVersion::pinned)
    }
}

static CHOSEN: RwLock<Option<LocalOptions>> = RwLock::new(None);

/// Sets what this process's runs on the local provider start their control planes with
/// (the command line does, before the first scenario opens the provider).
pub fn choose(options: LocalOptions) {
    *CHOSEN.write().unwrap_or_else(|p| p.into_inner()) = Some(options);
}

/// What [`choose`] set; the defaults (the pinned version, no feature gates) when nothing
/// was.
pub fn chosen() -> LocalOptions {
    CHOSEN
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_versions_are_one_patch_per_minor_from_1_32_to_1_37_with_the_pinned_one() {
        let known: Vec<&str> = KubernetesVersion::known()
            .iter()
            .map(KubernetesVersion::minor_name)
            .collect();
        assert_eq!(known, ["1.32", "1.33", "1.34", "1.35", "1.36", "1.37"]);
        assert!(KubernetesVersion::known().contains(&KubernetesVersion::pinned()));
        assert!(KubernetesVersion::pinned().is_pinned());
    }

    #[test]
    fn a_minor_names_its_known_patch_and_a_full_version_itself_with_or_without_v() {
        for given in ["1.37", "v1.37", "1.37.2", "v1.37.2", " 1.37 "] {
            let version = KubernetesVersion::resolve(given).unwrap();
            assert_eq!(version.full(), "v1.37.2", "{given}");
            assert_eq!(version.minor(), 37);
            assert_eq!(version.minor_name(), "1.37");
        }
        assert_eq!(
            KubernetesVersion::resolve("1.34").unwrap(),
            KubernetesVersion::pinned()
        );
    }

    #[test]
    fn an_unknown_version_is_refused_listing_the_known_ones() {
        for given in ["1.38", "1.37.1", "1.3", "latest", ""] {
            let e = KubernetesVersion::resolve(given).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("unknown Kubernetes version {given:?}: expected one of 1.32 (v1.32.13), 1.33 (v1.33.13), 1.34 (v1.34.4)")),
                "{e}"
            );
            assert!(
                e.contains("1.37 (v1.37.2) (a minor such as 1.37 names its patch)"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_list_of_versions_keeps_its_order_and_refuses_a_version_named_twice_or_none() {
        let list = KubernetesVersion::resolve_list("1.37, 1.34").unwrap();
        let full: Vec<&str> = list.iter().map(KubernetesVersion::full).collect();
        assert_eq!(full, ["v1.37.2", "v1.34.4"]);
        let e = KubernetesVersion::resolve_list("1.34,v1.34.4")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "Kubernetes version \"v1.34.4\" is named twice (both are v1.34.4): expected each once"
        );
        let e = KubernetesVersion::resolve_list(" , ")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("no Kubernetes version in"), "{e}");
        let e = KubernetesVersion::resolve_list("1.34,1.99")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("unknown Kubernetes version \"1.99\""), "{e}");
    }

    #[test]
    fn every_known_version_runs_with_the_pinned_etcd_unless_versions_env_names_another() {
        for version in KubernetesVersion::known() {
            assert_eq!(version.etcd(), etcd_version(), "{version}");
        }
    }

    #[test]
    fn feature_gates_are_read_as_the_components_take_them_and_written_back_sorted() {
        let gates = parse_feature_gates("CoordinatedLeaderElection=true, SomeOther=False").unwrap();
        assert_eq!(gates.get(COORDINATED_LEADER_ELECTION), Some(&true));
        assert_eq!(gates.get("SomeOther"), Some(&false));
        assert_eq!(
            feature_gates_arg(&gates),
            "CoordinatedLeaderElection=true,SomeOther=false"
        );
        for (given, problem) in [
            ("CoordinatedLeaderElection", "has no ={true|false}"),
            (
                "CoordinatedLeaderElection=yes",
                "is \"yes\", not true or false",
            ),
            ("A=true,A=false", "A is named twice"),
            ("--x=true", "is not a feature gate name"),
            ("", "no gate named"),
        ] {
            let e = parse_feature_gates(given).unwrap_err().to_string();
            assert!(e.contains(problem), "{given}: {e}");
            assert!(
                e.ends_with("expected Name=true|false, comma-separated"),
                "{e}"
            );
        }
    }

    #[test]
    fn coordinated_leader_election_serves_the_lease_candidates_of_the_version() {
        let on = parse_feature_gates("CoordinatedLeaderElection=true").unwrap();
        let v = |minor| KubernetesVersion::resolve(minor).unwrap();
        assert_eq!(
            runtime_config(v("1.34"), &on),
            ["coordination.k8s.io/v1beta1=true"]
        );
        assert_eq!(
            runtime_config(v("1.37"), &on),
            ["coordination.k8s.io/v1beta1=true"]
        );
        assert_eq!(
            runtime_config(v("1.32"), &on),
            ["coordination.k8s.io/v1alpha2=true"]
        );
        let off = parse_feature_gates("CoordinatedLeaderElection=false").unwrap();
        assert!(runtime_config(v("1.34"), &off).is_empty());
    }

    #[test]
    fn without_a_choice_the_pinned_version_runs_with_no_gates() {
        let options = LocalOptions::default();
        assert_eq!(options.version(), KubernetesVersion::pinned());
        assert!(options.feature_gates.is_empty());
    }
}
