//! A pod's volumes on the host, laid out as the kubelet lays them out, and each
//! container's bind mounts of them (for the container runtime's bundle).
//!
//! Every volume lives in `<pod dir>/volumes/<volume name>` (a hostPath volume is the host
//! path itself). The caller first fetches what [`references`] names (ConfigMaps, Secrets,
//! ServiceAccount tokens through TokenRequest bound to the pod) into [`VolumeSources`], then
//! calls [`PodVolumes::sync`] before the pod's containers start and again periodically to
//! propagate updates, and asks [`PodVolumes::mounts`] for each container's bind mounts.
//!
//! - configMap, secret, downwardAPI and projected volumes (configMap, secret, downwardAPI
//!   and serviceAccountToken sources) are written as the kubelet's AtomicWriter writes
//!   them: the files in a timestamped directory `..<UTC timestamp>.<random>`, a `..data`
//!   symlink to it, and each top-level user-visible path a symlink through `..data`
//!   (`key -> ..data/key`). An update writes a new timestamped directory, swaps `..data` by
//!   renaming a new link over it, and removes the old directory. `items` choose keys and
//!   paths, `defaultMode` and per-item `mode` are the file modes (the API's decimal
//!   integers of octal bits: 420 is 0644, the default), `optional` turns a missing object
//!   into an empty volume and skips missing keys. Secret values and ConfigMap `binaryData`
//!   are written as their bytes.
//! - The ConfigMap `kube-root-ca.crt` gets [`VolumeSources::extra_ca`] appended to its
//!   `ca.crt` key wherever it is projected: pods reach the API server through the node's
//!   proxy, which may present a certificate of its own CA.
//! - emptyDir is a directory (mode 0777, as the kubelet makes it); hostPath is checked
//!   against its `type` (`""`, `DirectoryOrCreate`, `Directory`, `FileOrCreate`, `File`,
//!   `Socket`, `CharDevice`, `BlockDevice`) as the kubelet checks it, creating what the
//!   `…OrCreate` types create (a directory 0755, a file 0644 whose parent must exist).
//! - persistentVolumeClaim volumes are the directory of the claim's bound PersistentVolume
//!   (`hostPath`, checked against its `type` as a hostPath volume is, or `local`, which must
//!   exist), fetched by the caller with the claim into [`VolumeSources::claims`] and checked
//!   as the kubelet's volume manager checks them (the claim Bound and naming the volume, the
//!   volume's `claimRef` the claim's uid). The directory outlives the pod: a pod made again
//!   on the node with the same claim finds what the last one wrote.
//! - ServiceAccount tokens are the caller's to request and renew: [`refresh_due`] says when
//!   the kubelet's token manager would renew one.
//!
//! # Guarantees
//! - A reader going through a user-visible path sees either the whole old content or the
//!   whole new one: `..data` is swapped by one `rename`. A sync that changes nothing
//!   (same files, same bytes) writes nothing.
//! - A bind mount of a volume's directory sees its updates; a `subPath` mount resolves
//!   through the symlinks to the current file when [`PodVolumes::mounts`] is called and
//!   sees no later update, as in Kubernetes (a restarted container gets the new content).
//! - emptyDir and hostPath volumes are set up once per [`PodVolumes`]; later syncs only
//!   refresh the AtomicWriter volumes, as the kubelet's remounts do. Every volume is tried
//!   on each sync, so one failing volume does not hold back the others.
//! - A `subPath` never resolves outside its volume, symlinks included, and the directories
//!   created for a missing one are created inside it.
//! - Calls on one [`PodVolumes`] are serialized.
//! - Errors display the kubelet's messages: [`PodVolumes::sync`]'s those of `FailedMount`
//!   events (`MountVolume.SetUp failed for volume "cfg" : configmap "app" not found`),
//!   [`PodVolumes::mounts`]'s those of `CreateContainerConfigError`.
//!
//! # Caveats
//! - emptyDir with `medium: Memory` (or a huge-page medium) is a plain directory on the
//!   host's disk, not a tmpfs (mounting one needs privileges), and `sizeLimit` is ignored:
//!   nothing evicts a pod for filling one.
//! - Nothing is chowned: `fsGroup`, `runAsUser` and `fsGroupChangePolicy` are ignored and
//!   the files belong to the kubelet's user (so a token is written with `defaultMode`
//!   even where the kubelet would write 0600 for an `fsGroup`). `mountPropagation`,
//!   `recursiveReadOnly` and SELinux relabelling are not acted on either.
//! - A projected volume whose several sources fail reports the first failure; the kubelet
//!   reports them all as `[a, b]`.
//! - The kubelet pins a `subPath` by bind-mounting it under the pod directory; here the
//!   resolved path is handed to the runtime, checked when [`PodVolumes::mounts`] runs.
//! - The hostPath messages are those released kubelets give
//!   (`hostPath type check failed: /p is not a directory`, a missing path included); the
//!   kubelet on upstream main words a missing path `hostPath /p doesn't exist` and appends
//!   `, it's a …` to a mismatch.
//! - A hostPath source that does not exist when the mounts are made is created as a
//!   directory (0755), as containerd does for a missing bind-mount source.
//! - clusterTrustBundle projections are not supported, nor are volume types other than
//!   those above (csi, ephemeral, image, nfs, …, and PersistentVolumes of types other than
//!   hostPath and local): they fail with an error naming the volume and its type.
//! - A projected file the kubelet's user may not read (mode 0 or the like, when the kubelet
//!   does not run as root) is rewritten on every sync: it cannot be compared.
//! - The token refresh time leaves out the kubelet's random jitter (up to 10 s).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, HostPathVolumeSource, KeyToPath, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, ProjectedVolumeSource, Secret,
    Volume,
};

use crate::env::{self, EnvError, PodFacts};

/// The ConfigMap every namespace holds with the cluster's CA (`ca.crt`).
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// The file mode of projected files when the volume gives none (0644, the API's 420).
pub const DEFAULT_MODE: u32 = 0o644;

/// A token's lifetime when its projection gives none (the API server's default).
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// The age at which the kubelet renews a token whatever its lifetime.
pub const MAX_TOKEN_AGE: Duration = Duration::from_secs(24 * 60 * 60);

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_FILE_NAME_LENGTH: usize = 255;
const MAX_PATH_LENGTH: usize = 4096;

/// Errors setting up a pod's volumes or a container's mounts. Those of
/// [`PodVolumes::sync`] display the kubelet's `FailedMount` event message; those of
/// [`PodVolumes::mounts`] its `CreateContainerConfigError` message.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A ConfigMap the volume projects does not exist and is not optional.
    #[error("MountVolume.SetUp failed for volume {volume:?} : configmap {name:?} not found")]
    NoConfigMap {
        /// The volume.
        volume: String,
        /// The ConfigMap.
        name: String,
    },
    /// A Secret the volume projects does not exist and is not optional.
    #[error("MountVolume.SetUp failed for volume {volume:?} : secret {name:?} not found")]
    NoSecret {
        /// The volume.
        volume: String,
        /// The Secret.
        name: String,
    },
    /// An item names a key its ConfigMap does not have, and the ConfigMap is not optional.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : configmap references non-existent config key: {key}"
    )]
    NoConfigMapKey {
        /// The volume.
        volume: String,
        /// The key.
        key: String,
    },
    /// An item names a key its Secret does not have, and the Secret is not optional.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : references non-existent secret key: {key}"
    )]
    NoSecretKey {
        /// The volume.
        volume: String,
        /// The key.
        key: String,
    },
    /// No token was fetched for a serviceAccountToken projection.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : failed to fetch token: none was requested for audience {audience:?} and expirationSeconds {expiration_seconds}"
    )]
    NoToken {
        /// The volume.
        volume: String,
        /// The projection's audience (empty: the API server's).
        audience: String,
        /// The projection's lifetime.
        expiration_seconds: i64,
    },
    /// A downwardAPI item names an unsupported field or resource.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {error}")]
    DownwardApi {
        /// The volume.
        volume: String,
        /// What is wrong (its text is the kubelet's).
        error: EnvError,
    },
    /// A downwardAPI `resourceFieldRef` names a container the pod does not have.
    #[error("MountVolume.SetUp failed for volume {volume:?} : container {container} not found")]
    NoContainer {
        /// The volume.
        volume: String,
        /// The container named.
        container: String,
    },
    /// A projected file's path is not a relative path inside the volume.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {detail}")]
    InvalidPath {
        /// The volume.
        volume: String,
        /// The kubelet's AtomicWriter message, e.g. `invalid path: must not contain '..': ../x`.
        detail: String,
    },
    /// A projected volume has a clusterTrustBundle source.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : clusterTrustBundle projections are not supported by the simulated kubelet"
    )]
    ClusterTrustBundle {
        /// The volume.
        volume: String,
    },
    /// The volume's type is not one the simulated kubelet lays out.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : volume type {kind} is not supported by the simulated kubelet"
    )]
    Unsupported {
        /// The volume.
        volume: String,
        /// Its type as the API names it, e.g. `persistentVolumeClaim`.
        kind: String,
    },
    /// The volume's name cannot be a directory name under `volumes/`.
    #[error("MountVolume.SetUp failed for volume {volume:?} : invalid volume name")]
    InvalidName {
        /// The volume.
        volume: String,
    },
    /// A hostPath has a `..` element.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : invalid HostPath `{path}`: must not contain '..'"
    )]
    InvalidHostPath {
        /// The volume.
        volume: String,
        /// The host path.
        path: String,
    },
    /// A hostPath is not of its `type`.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : hostPath type check failed: {path} is not a {expected}"
    )]
    HostPathType {
        /// The volume.
        volume: String,
        /// The host path.
        path: String,
        /// What it should be: `directory`, `file`, `socket file`, `character device`,
        /// `block device`.
        expected: &'static str,
    },
    /// A hostPath `type` is none the API knows.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {kind} is an invalid volume type")]
    InvalidHostPathType {
        /// The volume.
        volume: String,
        /// The type given.
        kind: String,
    },
    /// A file or directory of the volume could not be read or written.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {op} {}", path.display())]
    Io {
        /// The volume.
        volume: String,
        /// What was done, as Go names it: `open`, `mkdir`, `write`, `symlink`, `rename`, …
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A volumeMount names a volume the pod does not have.
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    NoVolume {
        /// The volume.
        volume: String,
        /// The container.
        container: String,
    },
    /// A volumeMount names a volume no sync has set up yet (or whose setup failed).
    #[error("volume {volume:?} is not mounted: its setup has not succeeded yet")]
    NotSetUp {
        /// The volume.
        volume: String,
    },
    /// A `subPath` (or expanded `subPathExpr`) is absolute.
    #[error("error SubPath `{sub_path}` must not be an absolute path")]
    AbsoluteSubPath {
        /// The subPath.
        sub_path: String,
    },
    /// A `subPath` (or expanded `subPathExpr`) has a `..` element.
    #[error("unable to provision SubPath `{sub_path}`: must not contain '..'")]
    SubPathBacksteps {
        /// The subPath.
        sub_path: String,
    },
    /// A `subPathExpr` refers to variables the container's environment lacks (or has
    /// empty).
    #[error("missing value for {}", missing.join(", "))]
    SubPathExpr {
        /// The variables, sorted.
        missing: Vec<String>,
    },
    /// The directory of a missing `subPath` could not be created inside the volume.
    #[error(
        "failed to create subPath directory for volumeMount {mount:?} of container {container:?}"
    )]
    SubPathCreate {
        /// The volumeMount's volume.
        mount: String,
        /// The container.
        container: String,
        /// The cause (the kubelet keeps it out of the message).
        #[source]
        source: io::Error,
    },
    /// A `subPath` does not resolve to a path inside its volume.
    #[error("failed to prepare subPath for volumeMount {mount:?} of container {container:?}")]
    SubPathPrepare {
        /// The volumeMount's volume.
        mount: String,
        /// The container.
        container: String,
        /// The cause (the kubelet keeps it out of the message).
        #[source]
        source: io::Error,
    },
    /// A claim's volume cannot be used (the volume manager's message, which the kubelet
    /// reports in its `FailedMount` event).
    #[error(
        "Unable to attach or mount volumes: unmounted volumes=[{volume}], unattached volumes=[], failed to process volumes=[{volume}]: error processing PVC {namespace}/{claim}: {reason}"
    )]
    Claim {
        /// The pod's volume.
        volume: String,
        /// The pod's namespace.
        namespace: String,
        /// The claim.
        claim: String,
        /// What is wrong with it or its volume.
        reason: String,
    },
    /// A missing hostPath mount source could not be created.
    #[error("failed to mkdir {}", path.display())]
    MountSource {
        /// The host path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// The TokenRequest a serviceAccountToken projection needs (bound to the pod).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenSpec {
    /// The audience; empty for the API server's own audiences.
    pub audience: String,
    /// The requested lifetime (3600 when the projection gives none).
    pub expiration_seconds: i64,
}

/// What a pod's volumes need from the API server, for the caller to fetch first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct References {
    /// ConfigMaps projected by configMap volumes and projected volumes.
    pub config_maps: BTreeSet<String>,
    /// Secrets projected by secret volumes and projected volumes.
    pub secrets: BTreeSet<String>,
    /// The tokens of serviceAccountToken projections, one per distinct spec (the kubelet's
    /// token manager shares a token between identical requests), in the pod's order.
    pub tokens: Vec<TokenSpec>,
    /// PersistentVolumeClaims of persistentVolumeClaim volumes.
    pub claims: BTreeSet<String>,
}

/// A claim and the volume it is bound to, as the kubelet fetched them.
#[derive(Debug, Clone)]
pub struct ClaimedVolume {
    /// The claim.
    pub claim: PersistentVolumeClaim,
    /// The volume its `volumeName` names, if it exists.
    pub volume: Option<PersistentVolume>,
}

/// What was fetched for a pod's volumes. Objects that do not exist are simply missing.
#[derive(Debug, Clone, Default)]
pub struct VolumeSources {
    /// ConfigMaps by name.
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// Secrets by name.
    pub secrets: BTreeMap<String, Secret>,
    /// Token text by spec.
    pub tokens: BTreeMap<TokenSpec, String>,
    /// Claims and their volumes by claim name.
    pub claims: BTreeMap<String, ClaimedVolume>,
    /// A PEM appended to the `ca.crt` key of the ConfigMap `kube-root-ca.crt` wherever it
    /// is projected: the CA of the node's proxy, through which pods reach the API server.
    pub extra_ca: Option<String>,
}

/// One bind mount of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The host path: the volume's directory (or host path), or for a `subPath` the path
    /// it resolves to.
    pub source: PathBuf,
    /// The path in the container (`mountPath`, made absolute).
    pub destination: String,
    /// Whether the mount is read-only: asked by the volumeMount, and always for configMap,
    /// secret, downwardAPI and projected volumes (as the kubelet mounts them).
    pub read_only: bool,
}

/// The ConfigMaps, Secrets and tokens `pod`'s volumes refer to.
pub fn references(pod: &Pod) -> References {
    let mut refs = References::default();
    for volume in pod_volumes(pod) {
        if let Some(cm) = &volume.config_map {
            refs.config_maps.insert(cm.name.clone());
        }
        if let Some(name) = volume.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            refs.secrets.insert(name);
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            refs.claims.insert(claim.claim_name.clone());
        }
        for source in volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            if let Some(cm) = &source.config_map {
                refs.config_maps.insert(cm.name.clone());
            }
            if let Some(secret) = &source.secret {
                refs.secrets.insert(secret.name.clone());
            }
            if let Some(token) = &source.service_account_token {
                let spec = TokenSpec {
                    audience: token.audience.clone().unwrap_or_default(),
                    expiration_seconds: token
                        .expiration_seconds
                        .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
                };
                if !refs.tokens.contains(&spec) {
                    refs.tokens.push(spec);
                }
            }
        }
    }
    refs
}

/// When the kubelet's token manager renews a token issued at `issued` for `expiration`:
/// once 80 % of its lifetime has passed (20 % of it, in whole seconds rounded down, before
/// it expires), or once it is 24 hours old, whichever comes first.
pub fn refresh_due(issued: SystemTime, expiration: Duration) -> SystemTime {
    let early = Duration::from_secs(expiration.as_secs() * 20 / 100);
    issued + expiration.saturating_sub(early).min(MAX_TOKEN_AGE)
}

/// A pod's volumes under `<pod dir>/volumes/<volume name>`.
#[derive(Debug)]
pub struct PodVolumes {
    dir: PathBuf,
    /// The volumes set up at least once.
    set_up: Mutex<BTreeSet<String>>,
    /// The host directories of the persistentVolumeClaim volumes set up, by volume.
    claimed: Mutex<BTreeMap<String, PathBuf>>,
}

impl PodVolumes {
    /// The volumes of the pod whose directory is `pod_dir` (nothing is created yet).
    pub fn new(pod_dir: &Path) -> Self {
        PodVolumes {
            dir: pod_dir.join("volumes"),
            set_up: Mutex::new(BTreeSet::new()),
            claimed: Mutex::new(BTreeMap::new()),
        }
    }

    /// The directory of the volume `name` (hostPath volumes do not use it).
    pub fn volume_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes or refreshes every volume of `facts.pod`: idempotent, to be called before
    /// its containers start and then periodically to propagate updates of the sources and
    /// of the pod's labels and annotations.
    ///
    /// # Errors
    /// The first volume that could not be set up (the others are still set up), with the
    /// kubelet's `FailedMount` message.
    pub fn sync(&self, facts: &PodFacts<'_>, sources: &VolumeSources) -> Result<(), VolumeError> {
        let mut set_up = self.set_up.lock().unwrap_or_else(PoisonError::into_inner);
        let mut first = None;
        for volume in pod_volumes(facts.pod) {
            match self.sync_one(volume, facts, sources, &set_up) {
                Ok(()) => {
                    set_up.insert(volume.name.clone());
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn sync_one(
        &self,
        volume: &Volume,
        facts: &PodFacts<'_>,
        sources: &VolumeSources,
        set_up: &BTreeSet<String>,
    ) -> Result<(), VolumeError> {
        let name = volume.name.as_str();
        if !is_single_component(name) {
            return Err(VolumeError::InvalidName {
                volume: name.to_string(),
            });
        }
        let dir = self.volume_dir(name);
        match kind(volume) {
            Kind::Unsupported(kind) => Err(VolumeError::Unsupported {
                volume: name.to_string(),
                kind,
            }),
            Kind::EmptyDir if set_up.contains(name) => Ok(()),
            Kind::EmptyDir => make_world_writable_dir(name, &dir),
            Kind::HostPath(_) if set_up.contains(name) => Ok(()),
            Kind::HostPath(source) => check_host_path(name, source),
            Kind::Claim(_) if set_up.contains(name) => Ok(()),
            Kind::Claim(source) => {
                let namespace = facts.pod.metadata.namespace.as_deref().unwrap_or_default();
                let path = claimed_path(name, namespace, source, sources)?;
                self.claimed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name.to_string(), path);
                Ok(())
            }
            kind => {
                let payload = payload(name, &kind, facts, sources)?;
                if !set_up.contains(name) {
                    make_world_writable_dir(name, &dir)?;
                }
                write_atomically(name, &dir, &payload).map(|_| ())
            }
        }
    }

    /// The bind mounts of `container`, in the order of its volumeMounts (the kubelet's
    /// order): each volume's directory (or host path), or the path its `subPath` resolves
    /// to, a `subPathExpr` being expanded with `lookup` (the container's environment).
    /// A missing `subPath` is created as a directory inside the volume, as the kubelet does.
    ///
    /// # Errors
    /// With the kubelet's `CreateContainerConfigError` messages: a volumeMount of a volume
    /// the pod lacks or that is not set up, an absolute or escaping `subPath`, a
    /// `subPathExpr` with variables not set.
    pub fn mounts(
        &self,
        pod: &Pod,
        container: &Container,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<Mount>, VolumeError> {
        let set_up = self.set_up.lock().unwrap_or_else(PoisonError::into_inner);
        let volumes: Vec<&Volume> = pod_volumes(pod).collect();
        let mut mounts = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let volume = volumes
                .iter()
                .find(|v| v.name == mount.name)
                .ok_or_else(|| VolumeError::NoVolume {
                    volume: mount.name.clone(),
                    container: container.name.clone(),
                })?;
            let (volume_path, forced_read_only) = match kind(volume) {
                Kind::Unsupported(kind) => {
                    return Err(VolumeError::Unsupported {
                        volume: volume.name.clone(),
                        kind,
                    });
                }
                Kind::HostPath(source) => (PathBuf::from(&source.path), false),
                Kind::EmptyDir => (self.volume_dir(&volume.name), false),
                Kind::Claim(source) => {
                    let claimed = self.claimed.lock().unwrap_or_else(PoisonError::into_inner);
                    let path = claimed.get(&volume.name).cloned().unwrap_or_default();
                    (path, source.read_only == Some(true))
                }
                _ => (self.volume_dir(&volume.name), true),
            };
            if !set_up.contains(&volume.name) {
                return Err(VolumeError::NotSetUp {
                    volume: volume.name.clone(),
                });
            }
            let sub_path = match mount.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
                Some(expr) => expand_sub_path(expr, lookup)?,
                None => mount.sub_path.clone().unwrap_or_default(),
            };
            let source = if sub_path.is_empty() {
                if volume.host_path.is_some() && fs::symlink_metadata(&volume_path).is_err() {
                    fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(&volume_path)
                        .map_err(|source| VolumeError::MountSource {
                            path: volume_path.clone(),
                            source,
                        })?;
                }
                volume_path
            } else {
                resolve_sub_path(&volume_path, &sub_path).map_err(|e| match e {
                    SubPathFailure::Absolute => VolumeError::AbsoluteSubPath {
                        sub_path: sub_path.clone(),
                    },
                    SubPathFailure::Backsteps => VolumeError::SubPathBacksteps {
                        sub_path: sub_path.clone(),
                    },
                    SubPathFailure::Create(source) => VolumeError::SubPathCreate {
                        mount: mount.name.clone(),
                        container: container.name.clone(),
                        source,
                    },
                    SubPathFailure::Prepare(source) => VolumeError::SubPathPrepare {
                        mount: mount.name.clone(),
                        container: container.name.clone(),
                        source,
                    },
                })?
            };
            let destination = if mount.mount_path.starts_with('/') {
                mount.mount_path.clone()
            } else {
                format!("/{}", mount.mount_path)
            };
            mounts.push(Mount {
                source,
                destination,
                read_only: mount.read_only == Some(true) || forced_read_only,
            });
        }
        Ok(mounts)
    }
}

fn pod_volumes(pod: &Pod) -> impl Iterator<Item = &Volume> {
    pod.spec.iter().flat_map(|s| s.volumes.iter().flatten())
}

/// What a volume is, as far as laying it out goes.
enum Kind<'a> {
    ConfigMap(&'a k8s_openapi::api::core::v1::ConfigMapVolumeSource),
    Secret(&'a k8s_openapi::api::core::v1::SecretVolumeSource),
    DownwardApi(&'a k8s_openapi::api::core::v1::DownwardAPIVolumeSource),
    Projected(&'a ProjectedVolumeSource),
    EmptyDir,
    HostPath(&'a HostPathVolumeSource),
    Claim(&'a PersistentVolumeClaimVolumeSource),
    /// The API's name of the type.
    Unsupported(String),
}

fn kind(volume: &Volume) -> Kind<'_> {
    if let Some(s) = &volume.config_map {
        Kind::ConfigMap(s)
    } else if let Some(s) = &volume.secret {
        Kind::Secret(s)
    } else if let Some(s) = &volume.downward_api {
        Kind::DownwardApi(s)
    } else if let Some(s) = &volume.projected {
        Kind::Projected(s)
    } else if volume.empty_dir.is_some() {
        Kind::EmptyDir
    } else if let Some(s) = &volume.host_path {
        Kind::HostPath(s)
    } else if let Some(s) = &volume.persistent_volume_claim {
        Kind::Claim(s)
    } else {
        // The API server defaults a volume without a source to an emptyDir.
        let json = serde_json::to_value(volume).unwrap_or_default();
        json.as_object()
            .and_then(|fields| fields.keys().find(|k| *k != "name").cloned())
            .map_or(Kind::EmptyDir, Kind::Unsupported)
    }
}

fn is_single_component(name: &str) -> bool {
    let mut components = Path::new(name).components();
    matches!(components.next(), Some(Component::Normal(_))) && components.next().is_none()
}

fn io_error(volume: &str, op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> VolumeError {
    let volume = volume.to_string();
    let path = path.to_path_buf();
    move |source| VolumeError::Io {
        volume,
        op,
        path,
        source,
    }
}

/// A directory of mode 0777 (the kubelet's emptyDir, which also holds the AtomicWriter
/// volumes).
fn make_world_writable_dir(volume: &str, dir: &Path) -> Result<(), VolumeError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o777)
        .create(dir)
        .map_err(io_error(volume, "mkdir", dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o777))
        .map_err(io_error(volume, "chmod", dir))
}

fn check_host_path(volume: &str, source: &HostPathVolumeSource) -> Result<(), VolumeError> {
    let path = Path::new(&source.path);
    if has_backsteps(&source.path) {
        return Err(VolumeError::InvalidHostPath {
            volume: volume.to_string(),
            path: source.path.clone(),
        });
    }
    let mismatch = |expected: &'static str| VolumeError::HostPathType {
        volume: volume.to_string(),
        path: source.path.clone(),
        expected,
    };
    let meta = fs::metadata(path).ok();
    let file_type = meta.as_ref().map(fs::Metadata::file_type);
    let kind = source.type_.as_deref().unwrap_or_default();
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_none() => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(io_error(volume, "mkdir", path)),
        "DirectoryOrCreate" | "Directory" => match file_type {
            Some(t) if t.is_dir() => Ok(()),
            _ => Err(mismatch("directory")),
        },
        "FileOrCreate" if meta.is_none() => fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(path)
            .map(drop)
            .map_err(io_error(volume, "open", path)),
        // As the kubelet has it: anything that exists and is not a directory is a file.
        "FileOrCreate" | "File" => match file_type {
            Some(t) if !t.is_dir() => Ok(()),
            _ => Err(mismatch("file")),
        },
        "Socket" => match file_type {
            Some(t) if t.is_socket() => Ok(()),
            _ => Err(mismatch("socket file")),
        },
        "CharDevice" => match file_type {
            Some(t) if t.is_char_device() => Ok(()),
            _ => Err(mismatch("character device")),
        },
        "BlockDevice" => match file_type {
            Some(t) if t.is_block_device() => Ok(()),
            _ => Err(mismatch("block device")),
        },
        other => Err(VolumeError::InvalidHostPathType {
            volume: volume.to_string(),
            kind: other.to_string(),
        }),
    }
}

/// The host directory of a claim's volume, checked as the kubelet's volume manager checks
/// the claim and its volume (`getPVCExtractPV`, `getPVSpec`) and as the volume's plugin
/// sets it up.
fn claimed_path(
    volume: &str,
    namespace: &str,
    source: &PersistentVolumeClaimVolumeSource,
    sources: &VolumeSources,
) -> Result<PathBuf, VolumeError> {
    let fail = |reason: String| VolumeError::Claim {
        volume: volume.to_string(),
        namespace: namespace.to_string(),
        claim: source.claim_name.clone(),
        reason,
    };
    let Some(found) = sources.claims.get(&source.claim_name) else {
        return Err(fail(format!(
            "failed to fetch PVC from API server: persistentvolumeclaims {:?} not found",
            source.claim_name
        )));
    };
    let claim = &found.claim;
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(fail("PVC is being deleted".into()));
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Bound") {
        return Err(fail("PVC is not bound".into()));
    }
    let volume_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if volume_name.is_empty() {
        return Err(fail("PVC has empty pvc.Spec.VolumeName".into()));
    }
    let Some(pv) = &found.volume else {
        return Err(fail(format!(
            "failed to fetch PV {volume_name} from API server: persistentvolumes {volume_name:?} not found"
        )));
    };
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(reference) = &spec.claim_ref else {
        return Err(fail(format!(
            "found PV object {volume_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        )));
    };
    if reference.uid != claim.metadata.uid {
        return Err(fail(format!(
            "found PV object {volume_name} but its pv.Spec.ClaimRef.UID {} does not point to claim.UID {}",
            reference.uid.as_deref().unwrap_or_default(),
            claim.metadata.uid.as_deref().unwrap_or_default()
        )));
    }
    if let Some(host_path) = &spec.host_path {
        check_host_path(volume, host_path)?;
        return Ok(PathBuf::from(&host_path.path));
    }
    if let Some(local) = &spec.local {
        let path = PathBuf::from(&local.path);
        return match fs::metadata(&path) {
            Ok(_) => Ok(path),
            Err(source) => Err(VolumeError::MountSource { path, source }),
        };
    }
    let kind = serde_json::to_value(&spec)
        .ok()
        .and_then(|fields| {
            fields.as_object().and_then(|fields| {
                fields
                    .keys()
                    .find(|k| {
                        !matches!(
                            k.as_str(),
                            "accessModes"
                                | "capacity"
                                | "claimRef"
                                | "mountOptions"
                                | "nodeAffinity"
                                | "persistentVolumeReclaimPolicy"
                                | "storageClassName"
                                | "volumeMode"
                                | "volumeAttributesClassName"
                        )
                    })
                    .cloned()
            })
        })
        .unwrap_or_else(|| "unknown".into());
    Err(VolumeError::Unsupported {
        volume: volume.to_string(),
        kind,
    })
}

fn has_backsteps(path: &str) -> bool {
    path.split('/').any(|element| element == "..")
}

/// One file of an AtomicWriter volume.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Projection {
    data: Vec<u8>,
    mode: u32,
}

type Payload = BTreeMap<String, Projection>;

fn mode_bits(mode: Option<i32>, default: u32) -> u32 {
    mode.map_or(default, |m| (m as u32) & 0o777)
}

fn payload(
    volume: &str,
    kind: &Kind<'_>,
    facts: &PodFacts<'_>,
    sources: &VolumeSources,
) -> Result<Payload, VolumeError> {
    match kind {
        Kind::ConfigMap(s) => config_map_payload(
            volume,
            &s.name,
            s.items.as_deref(),
            s.optional == Some(true),
            mode_bits(s.default_mode, DEFAULT_MODE),
            sources,
        ),
        Kind::Secret(s) => secret_payload(
            volume,
            s.secret_name.as_deref().unwrap_or_default(),
            s.items.as_deref(),
            s.optional == Some(true),
            mode_bits(s.default_mode, DEFAULT_MODE),
            sources,
        ),
        Kind::DownwardApi(s) => downward_api_payload(
            volume,
            s.items.as_deref().unwrap_or_default(),
            mode_bits(s.default_mode, DEFAULT_MODE),
            facts,
        ),
        Kind::Projected(s) => projected_payload(volume, s, facts, sources),
        Kind::EmptyDir | Kind::HostPath(_) | Kind::Claim(_) | Kind::Unsupported(_) => {
            Ok(Payload::new())
        }
    }
}

fn projected_payload(
    volume: &str,
    projected: &ProjectedVolumeSource,
    facts: &PodFacts<'_>,
    sources: &VolumeSources,
) -> Result<Payload, VolumeError> {
    let mode = mode_bits(projected.default_mode, DEFAULT_MODE);
    let mut payload = Payload::new();
    for source in projected.sources.iter().flatten() {
        let part = if let Some(cm) = &source.config_map {
            config_map_payload(
                volume,
                &cm.name,
                cm.items.as_deref(),
                cm.optional == Some(true),
                mode,
                sources,
            )?
        } else if let Some(secret) = &source.secret {
            secret_payload(
                volume,
                &secret.name,
                secret.items.as_deref(),
                secret.optional == Some(true),
                mode,
                sources,
            )?
        } else if let Some(downward) = &source.downward_api {
            downward_api_payload(
                volume,
                downward.items.as_deref().unwrap_or_default(),
                mode,
                facts,
            )?
        } else if let Some(token) = &source.service_account_token {
            let spec = TokenSpec {
                audience: token.audience.clone().unwrap_or_default(),
                expiration_seconds: token
                    .expiration_seconds
                    .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
            };
            let text = sources
                .tokens
                .get(&spec)
                .ok_or_else(|| VolumeError::NoToken {
                    volume: volume.to_string(),
                    audience: spec.audience.clone(),
                    expiration_seconds: spec.expiration_seconds,
                })?;
            let file = Projection {
                data: text.clone().into_bytes(),
                mode,
            };
            Payload::from([(token.path.clone(), file)])
        } else if source.cluster_trust_bundle.is_some() {
            return Err(VolumeError::ClusterTrustBundle {
                volume: volume.to_string(),
            });
        } else {
            Payload::new()
        };
        payload.extend(part);
    }
    Ok(payload)
}

/// A ConfigMap's keys and bytes (`data` before `binaryData`), the extra CA appended to
/// `kube-root-ca.crt`'s `ca.crt`.
fn config_map_data(name: &str, sources: &VolumeSources) -> Option<BTreeMap<String, Vec<u8>>> {
    let cm = sources.config_maps.get(name)?;
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.entry(k.clone()).or_insert_with(|| v.0.clone());
    }
    if name == ROOT_CA_CONFIG_MAP
        && let (Some(extra), Some(ca)) = (&sources.extra_ca, data.get_mut("ca.crt"))
    {
        if !ca.is_empty() && !ca.ends_with(b"\n") {
            ca.push(b'\n');
        }
        ca.extend_from_slice(extra.as_bytes());
    }
    Some(data)
}

/// A Secret's keys and decoded bytes (`stringData` over `data`, as the API server merges
/// them).
fn secret_data(name: &str, sources: &VolumeSources) -> Option<BTreeMap<String, Vec<u8>>> {
    let secret = sources.secrets.get(name)?;
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        data.insert(k.clone(), v.clone().into_bytes());
    }
    Some(data)
}

fn config_map_payload(
    volume: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: bool,
    mode: u32,
    sources: &VolumeSources,
) -> Result<Payload, VolumeError> {
    let data = match config_map_data(name, sources) {
        Some(data) => data,
        None if optional => BTreeMap::new(),
        None => {
            return Err(VolumeError::NoConfigMap {
                volume: volume.to_string(),
                name: name.to_string(),
            });
        }
    };
    key_payload(&data, items, optional, mode, |key| {
        VolumeError::NoConfigMapKey {
            volume: volume.to_string(),
            key: key.to_string(),
        }
    })
}

fn secret_payload(
    volume: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: bool,
    mode: u32,
    sources: &VolumeSources,
) -> Result<Payload, VolumeError> {
    let data = match secret_data(name, sources) {
        Some(data) => data,
        None if optional => BTreeMap::new(),
        None => {
            return Err(VolumeError::NoSecret {
                volume: volume.to_string(),
                name: name.to_string(),
            });
        }
    };
    key_payload(&data, items, optional, mode, |key| {
        VolumeError::NoSecretKey {
            volume: volume.to_string(),
            key: key.to_string(),
        }
    })
}

/// Every key as a file named after it, or with `items` the keys they name at their paths.
fn key_payload(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    optional: bool,
    mode: u32,
    missing: impl Fn(&str) -> VolumeError,
) -> Result<Payload, VolumeError> {
    let items = items.unwrap_or_default();
    if items.is_empty() {
        return Ok(data
            .iter()
            .map(|(k, v)| {
                let file = Projection {
                    data: v.clone(),
                    mode,
                };
                (k.clone(), file)
            })
            .collect());
    }
    let mut payload = Payload::new();
    for item in items {
        match data.get(&item.key) {
            Some(bytes) => {
                let file = Projection {
                    data: bytes.clone(),
                    mode: mode_bits(item.mode, mode),
                };
                payload.insert(item.path.clone(), file);
            }
            None if optional => {}
            None => return Err(missing(&item.key)),
        }
    }
    Ok(payload)
}

fn downward_api_payload(
    volume: &str,
    items: &[DownwardAPIVolumeFile],
    mode: u32,
    facts: &PodFacts<'_>,
) -> Result<Payload, VolumeError> {
    let failed = |error| VolumeError::DownwardApi {
        volume: volume.to_string(),
        error,
    };
    let mut payload = Payload::new();
    for item in items {
        let text = if let Some(field) = &item.field_ref {
            env::field_value(&field.field_path, facts).map_err(failed)?
        } else if let Some(resource) = &item.resource_field_ref {
            let name = resource.container_name.clone().unwrap_or_default();
            let spec = facts.pod.spec.as_ref();
            let container = spec
                .into_iter()
                .flat_map(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                })
                .find(|c| c.name == name)
                .ok_or_else(|| VolumeError::NoContainer {
                    volume: volume.to_string(),
                    container: name.clone(),
                })?;
            let divisor = resource.divisor.as_ref().map(|d| d.0.as_str());
            env::resource_value(container, &resource.resource, divisor, facts).map_err(failed)?
        } else {
            String::new()
        };
        let file = Projection {
            data: text.into_bytes(),
            mode: mode_bits(item.mode, mode),
        };
        payload.insert(item.path.clone(), file);
    }
    Ok(payload)
}

/// The AtomicWriter's path rules, with its messages.
fn validate_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err(format!("invalid path: must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return Err(format!("invalid path: must be relative path: {path}"));
    }
    if path.len() > MAX_PATH_LENGTH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(format!("invalid path: must not contain '..': {path}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(format!(
                "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(format!("invalid path: must not start with '..': {path}"));
    }
    Ok(())
}

/// Go's `filepath.Clean` for a valid relative path: no empty or `.` elements.
fn clean_path(path: &str) -> String {
    let elements: Vec<&str> = path
        .split('/')
        .filter(|e| !e.is_empty() && *e != ".")
        .collect();
    if elements.is_empty() {
        ".".to_string()
    } else {
        elements.join("/")
    }
}

fn is_timestamp_dir(name: &str) -> bool {
    name.len() > 2 && name.starts_with("..") && name != DATA_DIR && !name.contains('/')
}

/// Writes `payload` into `dir` as the kubelet's AtomicWriter does (see the module doc).
/// Returns whether a new timestamped directory was written.
fn write_atomically(volume: &str, dir: &Path, payload: &Payload) -> Result<bool, VolumeError> {
    let mut clean = Payload::new();
    for (path, file) in payload {
        validate_path(path).map_err(|detail| VolumeError::InvalidPath {
            volume: volume.to_string(),
            detail,
        })?;
        clean.insert(clean_path(path), file.clone());
    }
    let data_link = dir.join(DATA_DIR);
    let old = match fs::read_link(&data_link) {
        Ok(target) => target
            .to_str()
            .filter(|t| is_timestamp_dir(t))
            .map(str::to_string),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(volume, "readlink", &data_link)(e)),
    };
    let mut to_remove = BTreeSet::new();
    let mut write = true;
    if let Some(old) = &old {
        let old_dir = dir.join(old);
        to_remove = paths_to_remove(volume, &clean, &old_dir)?;
        write = should_write(volume, &clean, &old_dir)? || !to_remove.is_empty();
    }
    if write {
        let ts_name = new_timestamp_dir(volume, dir)?;
        let ts_dir = dir.join(&ts_name);
        let swapped = write_files(volume, &ts_dir, &clean).and_then(|()| {
            let new_link = dir.join(NEW_DATA_DIR);
            match fs::remove_file(&new_link) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io_error(volume, "remove", &new_link)(e));
                }
                _ => {}
            }
            std::os::unix::fs::symlink(&ts_name, &new_link)
                .map_err(io_error(volume, "symlink", &new_link))?;
            fs::rename(&new_link, &data_link).map_err(|e| {
                let _ = fs::remove_file(&new_link);
                io_error(volume, "rename", &new_link)(e)
            })
        });
        if let Err(e) = swapped {
            let _ = fs::remove_dir_all(&ts_dir);
            return Err(e);
        }
    }
    // The user-visible links, also when nothing was written (one may have gone missing).
    for top in clean.keys().map(|p| p.split('/').next().unwrap_or(p)) {
        let visible = dir.join(top);
        if let Err(e) = fs::read_link(&visible)
            && e.kind() == io::ErrorKind::NotFound
        {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(top), &visible)
                .map_err(io_error(volume, "symlink", &visible))?;
        }
    }
    for path in to_remove.iter().filter(|p| !p.contains('/')) {
        let visible = dir.join(path);
        if fs::symlink_metadata(&visible).is_ok_and(|m| m.file_type().is_symlink()) {
            fs::remove_file(&visible).map_err(io_error(volume, "remove", &visible))?;
        }
    }
    if write && let Some(old) = &old {
        let old_dir = dir.join(old);
        match fs::remove_dir_all(&old_dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_error(volume, "remove", &old_dir)(e));
            }
            _ => {}
        }
    }
    Ok(write)
}

/// Whether some file of `payload` is missing from `old_dir` or has other bytes there.
fn should_write(volume: &str, payload: &Payload, old_dir: &Path) -> Result<bool, VolumeError> {
    for (path, file) in payload {
        let old = old_dir.join(path);
        match fs::read(&old) {
            Ok(bytes) if bytes == file.data => {}
            Ok(_) => return Ok(true),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound
                        | io::ErrorKind::PermissionDenied
                        | io::ErrorKind::IsADirectory
                        | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(true);
            }
            Err(e) => return Err(io_error(volume, "read", &old)(e)),
        }
    }
    Ok(false)
}

/// The paths of `old_dir` (files and directories, relative, `/`-separated) that neither
/// `payload` nor the directories leading to its files account for.
fn paths_to_remove(
    volume: &str,
    payload: &Payload,
    old_dir: &Path,
) -> Result<BTreeSet<String>, VolumeError> {
    let mut old = BTreeSet::new();
    let mut pending = vec![(old_dir.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_error(volume, "open", &dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_error(volume, "readdir", &dir))?;
            let relative = format!("{prefix}{}", entry.file_name().to_string_lossy());
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir {
                pending.push((entry.path(), format!("{relative}/")));
            }
            old.insert(relative);
        }
    }
    let mut new = BTreeSet::new();
    for path in payload.keys() {
        let mut current = path.as_str();
        loop {
            new.insert(current.to_string());
            match current.rsplit_once('/') {
                Some((parent, _)) => current = parent,
                None => break,
            }
        }
    }
    Ok(old.difference(&new).cloned().collect())
}

/// A new `..<UTC timestamp>.<random>` directory of mode 0755; its name.
fn new_timestamp_dir(volume: &str, dir: &Path) -> Result<String, VolumeError> {
    let mut attempt = 0;
    loop {
        let random = uuid::Uuid::new_v4().as_u128() % 1_000_000_000;
        let name = format!(
            "{}{random}",
            chrono::Utc::now().format("..%Y_%m_%d_%H_%M_%S.")
        );
        let path = dir.join(&name);
        match fs::create_dir(&path) {
            Ok(()) => {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
                    .map_err(io_error(volume, "chmod", &path))?;
                return Ok(name);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 10 => attempt += 1,
            Err(e) => return Err(io_error(volume, "mkdir", &path)(e)),
        }
    }
}

fn write_files(volume: &str, ts_dir: &Path, payload: &Payload) -> Result<(), VolumeError> {
    for (path, file) in payload {
        let full = ts_dir.join(path);
        if let Some(parent) = full.parent() {
            fs::create_dir_all(parent).map_err(io_error(volume, "mkdir", parent))?;
        }
        fs::write(&full, &file.data).map_err(io_error(volume, "write", &full))?;
        fs::set_permissions(&full, fs::Permissions::from_mode(file.mode))
            .map_err(io_error(volume, "chmod", &full))?;
    }
    Ok(())
}

/// Kubernetes' `subPathExpr` expansion: every variable referred to must be set and not
/// empty.
fn expand_sub_path(
    expr: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, VolumeError> {
    let missing = RefCell::new(BTreeSet::new());
    let expanded = env::expand(expr, |name| match lookup(name) {
        Some(value) if !value.is_empty() => Some(value),
        _ => {
            missing.borrow_mut().insert(name.to_string());
            Some(String::new())
        }
    });
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(VolumeError::SubPathExpr {
            missing: missing.into_iter().collect(),
        })
    }
}

enum SubPathFailure {
    Absolute,
    Backsteps,
    Create(io::Error),
    Prepare(io::Error),
}

/// The path `sub_path` resolves to inside `volume_path`, every symlink followed; a missing
/// one is first created as directories of the volume's mode.
fn resolve_sub_path(volume_path: &Path, sub_path: &str) -> Result<PathBuf, SubPathFailure> {
    if sub_path.starts_with('/') {
        return Err(SubPathFailure::Absolute);
    }
    if has_backsteps(sub_path) {
        return Err(SubPathFailure::Backsteps);
    }
    let target = volume_path.join(sub_path);
    if fs::metadata(&target).is_err() {
        make_dirs_inside(volume_path, Path::new(sub_path)).map_err(SubPathFailure::Create)?;
    }
    let base = fs::canonicalize(volume_path).map_err(SubPathFailure::Prepare)?;
    let resolved = fs::canonicalize(&target).map_err(SubPathFailure::Prepare)?;
    if !resolved.starts_with(&base) {
        return Err(SubPathFailure::Prepare(io::Error::other(format!(
            "subpath {} not within volume path {}",
            resolved.display(),
            base.display()
        ))));
    }
    Ok(resolved)
}

/// Creates the missing directories of `relative` under `base`, never outside it: the
/// existing part is resolved (symlinks followed) and must stay inside `base`.
fn make_dirs_inside(base: &Path, relative: &Path) -> io::Result<()> {
    let mode = fs::metadata(base)?.permissions().mode() & 0o7777;
    let base = fs::canonicalize(base)?;
    let mut current = base.clone();
    for component in relative.components() {
        let element = match component {
            Component::Normal(element) => element,
            Component::CurDir => continue,
            _ => return Err(io::Error::other("unexpected path element")),
        };
        let next = current.join(element);
        match fs::symlink_metadata(&next) {
            Ok(_) => {
                let real = fs::canonicalize(&next)?;
                if !real.starts_with(&base) {
                    return Err(io::Error::other(format!(
                        "path {} is outside of allowed base {}",
                        real.display(),
                        base.display()
                    )));
                }
                if !fs::metadata(&real)?.is_dir() {
                    return Err(io::Error::other(format!(
                        "{} is not a directory",
                        real.display()
                    )));
                }
                current = real;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&next)?;
                fs::set_permissions(&next, fs::Permissions::from_mode(mode))?;
                current = next;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use k8s_openapi::ByteString;
    use serde_json::{Value, json};

    use super::*;

    const ALLOCATABLE: &[(&str, &str)] = &[("cpu", "8"), ("memory", "16Gi")];

    fn pod(volumes: Value, mounts: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u-1",
                "labels": {"app": "x", "tier": "web"},
                "annotations": {"note": "hi"}
            },
            "spec": {
                "containers": [{
                    "name": "c", "image": "i", "volumeMounts": mounts,
                    "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}
                }],
                "volumes": volumes
            }
        }))
        .unwrap()
    }

    fn facts(pod: &Pod) -> PodFacts<'_> {
        PodFacts {
            pod,
            pod_ip: "127.101.0.1".into(),
            host_ip: "127.0.10.1".into(),
            allocatable: ALLOCATABLE,
        }
    }

    fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    fn read(path: impl AsRef<Path>) -> String {
        fs::read_to_string(path).unwrap()
    }

    fn mode(path: impl AsRef<Path>) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn names(dir: &Path) -> BTreeSet<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    fn data_target(dir: &Path) -> String {
        fs::read_link(dir.join(DATA_DIR))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn sync_error(volumes: Value, sources: &VolumeSources) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(volumes, json!([]));
        let err = PodVolumes::new(tmp.path())
            .sync(&facts(&pod), sources)
            .unwrap_err();
        err.to_string()
    }

    #[test]
    fn a_configmap_volume_links_each_key_through_the_data_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "cfg", "configMap": {"name": "app"}}]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a.conf", "x=1"), ("b", "two")]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();

        let dir = volumes.volume_dir("cfg");
        assert_eq!(dir, tmp.path().join("volumes/cfg"));
        let ts = data_target(&dir);
        assert!(
            ts.starts_with("..") && ts.len() > "..2006_01_02_15_04_05.".len(),
            "{ts}"
        );
        assert_eq!(
            names(&dir),
            BTreeSet::from([ts.clone(), DATA_DIR.into(), "a.conf".into(), "b".into()])
        );
        assert_eq!(
            fs::read_link(dir.join("a.conf")).unwrap(),
            Path::new("..data/a.conf")
        );
        assert_eq!(read(dir.join("a.conf")), "x=1");
        assert_eq!(read(dir.join("b")), "two");
        assert_eq!(mode(dir.join("a.conf")), 0o644);
        assert_eq!(mode(dir.join(&ts)), 0o755);
        assert_eq!(mode(&dir), 0o777);
    }

    #[test]
    fn items_pick_keys_and_give_paths_and_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "cfg", "configMap": {"name": "app", "defaultMode": 0o640, "items": [
                {"key": "a", "path": "conf/./app.conf", "mode": 0o400},
                {"key": "b", "path": "b.txt"}
            ]}}]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        sources.config_maps.insert(
            "app".into(),
            config_map(&[("a", "1"), ("b", "2"), ("c", "3")]),
        );
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();

        let dir = volumes.volume_dir("cfg");
        assert_eq!(
            fs::read_link(dir.join("conf")).unwrap(),
            Path::new("..data/conf")
        );
        assert_eq!(read(dir.join("conf/app.conf")), "1");
        assert_eq!(mode(dir.join("conf/app.conf")), 0o400);
        assert_eq!(read(dir.join("b.txt")), "2");
        assert_eq!(mode(dir.join("b.txt")), 0o640);
        assert!(!dir.join("c").exists() && !dir.join("a").exists());
    }

    #[test]
    fn missing_objects_and_keys_fail_with_the_kubelets_messages() {
        let sources = VolumeSources::default();
        assert_eq!(
            sync_error(
                json!([{"name": "cfg", "configMap": {"name": "app"}}]),
                &sources
            ),
            r#"MountVolume.SetUp failed for volume "cfg" : configmap "app" not found"#
        );
        assert_eq!(
            sync_error(
                json!([{"name": "s", "secret": {"secretName": "creds"}}]),
                &sources
            ),
            r#"MountVolume.SetUp failed for volume "s" : secret "creds" not found"#
        );

        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "1")]));
        sources
            .secrets
            .insert("creds".into(), secret(&[("a", b"1")]));
        assert_eq!(
            sync_error(
                json!([{"name": "cfg", "configMap": {"name": "app", "items": [{"key": "nope", "path": "x"}]}}]),
                &sources
            ),
            r#"MountVolume.SetUp failed for volume "cfg" : configmap references non-existent config key: nope"#
        );
        assert_eq!(
            sync_error(
                json!([{"name": "s", "secret": {"secretName": "creds", "items": [{"key": "pw", "path": "x"}]}}]),
                &sources
            ),
            r#"MountVolume.SetUp failed for volume "s" : references non-existent secret key: pw"#
        );
    }

    #[test]
    fn optional_sources_give_empty_volumes_and_skip_missing_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([
                {"name": "gone", "configMap": {"name": "missing", "optional": true}},
                {"name": "gone-secret", "secret": {"secretName": "missing", "optional": true}},
                {"name": "some", "configMap": {"name": "app", "optional": true, "items": [
                    {"key": "a", "path": "a"}, {"key": "nope", "path": "nope"}
                ]}}
            ]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "1")]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();

        for empty in ["gone", "gone-secret"] {
            let dir = volumes.volume_dir(empty);
            assert_eq!(names(&dir).len(), 2, "only ..data and its directory");
            assert!(names(&dir.join(DATA_DIR)).is_empty());
        }
        let dir = volumes.volume_dir("some");
        assert_eq!(read(dir.join("a")), "1");
        assert!(!dir.join("nope").exists());
    }

    #[test]
    fn secret_values_and_binary_data_are_written_as_their_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([
                {"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o600}},
                {"name": "cfg", "configMap": {"name": "bin"}}
            ]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        let key: &[u8] = &[0, 255, b'\n', 1, 0x80];
        sources
            .secrets
            .insert("creds".into(), secret(&[("key", key)]));
        let mut bin = config_map(&[("text", "t")]);
        bin.binary_data = Some(BTreeMap::from([(
            "blob".to_string(),
            ByteString(vec![0xff, 0xfe, 0]),
        )]));
        sources.config_maps.insert("bin".into(), bin);
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();

        let s = volumes.volume_dir("s");
        assert_eq!(fs::read(s.join("key")).unwrap(), key);
        assert_eq!(mode(s.join("key")), 0o600);
        let cfg = volumes.volume_dir("cfg");
        assert_eq!(fs::read(cfg.join("blob")).unwrap(), [0xff, 0xfe, 0]);
        assert_eq!(read(cfg.join("text")), "t");
    }

    #[test]
    fn a_changed_configmap_replaces_the_data_link_atomically() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "cfg", "configMap": {"name": "app"}}]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "old"), ("b", "dropped")]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();
        let dir = volumes.volume_dir("cfg");
        let before = data_target(&dir);
        let reader = dir.join("a");
        assert_eq!(read(&reader), "old");

        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "new"), ("c", "added")]));
        volumes.sync(&facts(&pod), &sources).unwrap();

        let after = data_target(&dir);
        assert_ne!(before, after);
        assert_eq!(read(&reader), "new", "the same path reads the new content");
        assert_eq!(read(dir.join("c")), "added");
        assert!(
            fs::symlink_metadata(dir.join("b")).is_err(),
            "a removed key's link goes"
        );
        assert!(
            !dir.join(&before).exists(),
            "the old timestamped directory goes"
        );
        assert_eq!(
            names(&dir),
            BTreeSet::from([after, DATA_DIR.into(), "a".into(), "c".into()])
        );
    }

    #[test]
    fn an_unchanged_sync_rewrites_nothing_but_restores_a_lost_link() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "cfg", "configMap": {"name": "app"}}]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "1")]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();
        let dir = volumes.volume_dir("cfg");
        let before = data_target(&dir);
        let inode = fs::metadata(dir.join("a")).unwrap().ino();

        volumes.sync(&facts(&pod), &sources).unwrap();
        assert_eq!(data_target(&dir), before);
        assert_eq!(fs::metadata(dir.join("a")).unwrap().ino(), inode);

        fs::remove_file(dir.join("a")).unwrap();
        volumes.sync(&facts(&pod), &sources).unwrap();
        assert_eq!(data_target(&dir), before);
        assert_eq!(read(dir.join("a")), "1");
    }

    #[test]
    fn a_sync_recovers_when_the_data_link_points_to_a_lost_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "cfg", "configMap": {"name": "app"}}]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "1")]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();
        let dir = volumes.volume_dir("cfg");
        let lost = data_target(&dir);
        fs::remove_dir_all(dir.join(&lost)).unwrap();
        fs::write(dir.join(NEW_DATA_DIR), "stale").unwrap();

        volumes.sync(&facts(&pod), &sources).unwrap();
        assert_ne!(data_target(&dir), lost);
        assert_eq!(read(dir.join("a")), "1");
        assert!(fs::symlink_metadata(dir.join(NEW_DATA_DIR)).is_err());
    }

    #[test]
    fn a_downward_api_volume_projects_metadata_and_resources() {
        let tmp = tempfile::tempdir().unwrap();
        let volumes_json = json!([{"name": "info", "downwardAPI": {"items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
            {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
            {"path": "mem", "mode": 0o600, "resourceFieldRef": {
                "containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
            {"path": "cpus", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu"}},
            {"path": "millicpus", "resourceFieldRef": {
                "containerName": "c", "resource": "requests.cpu", "divisor": "1m"}}
        ]}}]);
        let mut pod = pod(volumes_json, json!([]));
        let volumes = PodVolumes::new(tmp.path());
        let sources = VolumeSources::default();
        volumes.sync(&facts(&pod), &sources).unwrap();

        let dir = volumes.volume_dir("info");
        assert_eq!(read(dir.join("name")), "p");
        assert_eq!(read(dir.join("namespace")), "ns");
        assert_eq!(read(dir.join("uid")), "u-1");
        assert_eq!(read(dir.join("labels")), "app=\"x\"\ntier=\"web\"");
        assert_eq!(read(dir.join("app")), "x");
        assert_eq!(read(dir.join("annotations")), "note=\"hi\"");
        assert_eq!(read(dir.join("mem")), "64");
        assert_eq!(mode(dir.join("mem")), 0o600);
        assert_eq!(
            read(dir.join("cpus")),
            "8",
            "an unset limit is the node's allocatable"
        );
        assert_eq!(read(dir.join("millicpus")), "250");

        pod.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("app".into(), "y".into());
        volumes.sync(&facts(&pod), &sources).unwrap();
        assert_eq!(read(dir.join("app")), "y");
        assert_eq!(read(dir.join("labels")), "app=\"y\"\ntier=\"web\"");
    }

    #[test]
    fn a_downward_api_item_of_an_unknown_container_or_field_fails() {
        let sources = VolumeSources::default();
        assert_eq!(
            sync_error(
                json!([{"name": "info", "downwardAPI": {"items": [{"path": "x", "resourceFieldRef": {
                    "containerName": "nope", "resource": "limits.cpu"}}]}}]),
                &sources
            ),
            r#"MountVolume.SetUp failed for volume "info" : container nope not found"#
        );
        assert_eq!(
            sync_error(
                json!([{"name": "info", "downwardAPI": {"items": [
                    {"path": "x", "fieldRef": {"fieldPath": "spec.bogus"}}]}}]),
                &sources
            ),
            r#"MountVolume.SetUp failed for volume "info" : unsupported fieldPath: spec.bogus"#
        );
    }

    fn api_access_volume() -> Value {
        json!([{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            {"secret": {"name": "extra", "items": [{"key": "k", "path": "extra/k", "mode": 0o400}]}},
            {"serviceAccountToken": {"path": "vault-token", "audience": "vault"}}
        ]}}])
    }

    fn api_access_sources() -> VolumeSources {
        let mut sources = VolumeSources::default();
        sources.config_maps.insert(
            ROOT_CA_CONFIG_MAP.into(),
            config_map(&[("ca.crt", "ROOT PEM")]),
        );
        sources
            .secrets
            .insert("extra".into(), secret(&[("k", b"v")]));
        let api_token = TokenSpec {
            audience: String::new(),
            expiration_seconds: 3607,
        };
        let vault_token = TokenSpec {
            audience: "vault".into(),
            expiration_seconds: DEFAULT_TOKEN_EXPIRATION_SECONDS,
        };
        sources.tokens.insert(api_token, "api-jwt".into());
        sources.tokens.insert(vault_token, "vault-jwt".into());
        sources.extra_ca = Some("PROXY PEM\n".into());
        sources
    }

    #[test]
    fn a_projected_volume_mixes_its_sources_and_appends_the_proxy_ca() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(api_access_volume(), json!([]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &api_access_sources()).unwrap();

        let dir = volumes.volume_dir("kube-api-access");
        assert_eq!(read(dir.join("token")), "api-jwt");
        assert_eq!(read(dir.join("vault-token")), "vault-jwt");
        assert_eq!(read(dir.join("ca.crt")), "ROOT PEM\nPROXY PEM\n");
        assert_eq!(read(dir.join("namespace")), "ns");
        assert_eq!(read(dir.join("extra/k")), "v");
        assert_eq!(mode(dir.join("token")), 0o644);
        assert_eq!(mode(dir.join("extra/k")), 0o400);
    }

    #[test]
    fn the_proxy_ca_is_appended_to_kube_root_ca_only() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([
                {"name": "root", "configMap": {"name": "kube-root-ca.crt"}},
                {"name": "other", "configMap": {"name": "other"}}
            ]),
            json!([]),
        );
        let mut sources = VolumeSources::default();
        sources.config_maps.insert(
            ROOT_CA_CONFIG_MAP.into(),
            config_map(&[("ca.crt", "ROOT\n"), ("note", "n")]),
        );
        sources
            .config_maps
            .insert("other".into(), config_map(&[("ca.crt", "OTHER\n")]));
        sources.extra_ca = Some("PROXY\n".into());
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();

        assert_eq!(
            read(volumes.volume_dir("root").join("ca.crt")),
            "ROOT\nPROXY\n"
        );
        assert_eq!(read(volumes.volume_dir("root").join("note")), "n");
        assert_eq!(read(volumes.volume_dir("other").join("ca.crt")), "OTHER\n");
    }

    #[test]
    fn references_name_what_the_volumes_need_once_each() {
        let mut volumes = api_access_volume();
        volumes.as_array_mut().unwrap().extend([
            json!({"name": "cfg", "configMap": {"name": "app", "optional": true}}),
            json!({"name": "s", "secret": {"secretName": "creds"}}),
            json!({"name": "again", "projected": {"sources": [
                {"serviceAccountToken": {"path": "t", "audience": "vault"}},
                {"configMap": {"name": "app"}}
            ]}}),
        ]);
        let refs = references(&pod(volumes, json!([])));
        assert_eq!(
            refs.config_maps,
            BTreeSet::from(["app".to_string(), ROOT_CA_CONFIG_MAP.to_string()])
        );
        assert_eq!(
            refs.secrets,
            BTreeSet::from(["creds".to_string(), "extra".to_string()])
        );
        assert_eq!(
            refs.tokens,
            [
                TokenSpec {
                    audience: String::new(),
                    expiration_seconds: 3607
                },
                TokenSpec {
                    audience: "vault".into(),
                    expiration_seconds: 3600
                }
            ]
        );
    }

    #[test]
    fn a_projected_volume_fails_on_a_missing_token_or_a_cluster_trust_bundle() {
        let mut sources = api_access_sources();
        sources.tokens.clear();
        assert_eq!(
            sync_error(api_access_volume(), &sources),
            r#"MountVolume.SetUp failed for volume "kube-api-access" : failed to fetch token: none was requested for audience "" and expirationSeconds 3607"#
        );
        assert_eq!(
            sync_error(
                json!([{"name": "bundle", "projected": {"sources": [
                    {"clusterTrustBundle": {"signerName": "example.com/s", "path": "b.pem"}}]}}]),
                &sources
            ),
            r#"MountVolume.SetUp failed for volume "bundle" : clusterTrustBundle projections are not supported by the simulated kubelet"#
        );
    }

    #[test]
    fn unsupported_volume_types_name_the_volume_and_type_and_spare_the_others() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([
                {"name": "data", "nfs": {"server": "nfs.example", "path": "/exports"}},
                {"name": "scratch", "emptyDir": {}}
            ]),
            json!([]),
        );
        let volumes = PodVolumes::new(tmp.path());
        let err = volumes
            .sync(&facts(&pod), &VolumeSources::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"MountVolume.SetUp failed for volume "data" : volume type nfs is not supported by the simulated kubelet"#
        );
        assert!(volumes.volume_dir("scratch").is_dir());
    }

    #[test]
    fn an_empty_dir_is_a_plain_world_writable_directory_kept_across_syncs() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([
                {"name": "scratch", "emptyDir": {}},
                {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                {"name": "bare"}
            ]),
            json!([]),
        );
        let volumes = PodVolumes::new(tmp.path());
        volumes
            .sync(&facts(&pod), &VolumeSources::default())
            .unwrap();
        for name in ["scratch", "mem", "bare"] {
            let dir = volumes.volume_dir(name);
            assert!(dir.is_dir(), "{name}");
            assert_eq!(mode(&dir), 0o777, "{name}");
        }
        fs::write(volumes.volume_dir("scratch").join("f"), "kept").unwrap();
        volumes
            .sync(&facts(&pod), &VolumeSources::default())
            .unwrap();
        assert_eq!(read(volumes.volume_dir("scratch").join("f")), "kept");
    }

    /// A claim `data` of uid `c-1` in `phase`, naming `volume_name`, and the volume that
    /// name has, a hostPath at `dir` referring to `claim_uid`.
    fn claimed(phase: &str, volume_name: &str, claim_uid: &str, dir: &Path) -> VolumeSources {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "c-1"},
            "spec": {"volumeName": volume_name}, "status": {"phase": phase}}))
        .unwrap();
        let volume: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-1"},
            "spec": {"claimRef": {"namespace": "ns", "name": "data", "uid": claim_uid},
                     "hostPath": {"path": dir, "type": "DirectoryOrCreate"}}}))
        .unwrap();
        let volume = (volume_name == "pv-1").then_some(volume);
        VolumeSources {
            claims: BTreeMap::from([("data".to_string(), ClaimedVolume { claim, volume })]),
            ..VolumeSources::default()
        }
    }

    #[test]
    fn a_claim_volume_is_its_bound_volumes_directory_mounted_read_write_unless_asked() {
        let tmp = tempfile::tempdir().unwrap();
        let disk = tmp.path().join("disk");
        let pod = pod(
            json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                   {"name": "r", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}}]),
            json!([{"name": "d", "mountPath": "/data"}, {"name": "r", "mountPath": "/ro"}]),
        );
        assert_eq!(
            references(&pod).claims,
            BTreeSet::from(["data".to_string()])
        );
        let volumes = PodVolumes::new(&tmp.path().join("pod"));
        volumes
            .sync(&facts(&pod), &claimed("Bound", "pv-1", "c-1", &disk))
            .unwrap();
        assert!(
            disk.is_dir(),
            "DirectoryOrCreate makes the volume's directory"
        );
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let mounts = volumes.mounts(&pod, container, &no_env).unwrap();
        assert_eq!(
            mounts,
            vec![
                Mount {
                    source: disk.clone(),
                    destination: "/data".into(),
                    read_only: false
                },
                Mount {
                    source: disk,
                    destination: "/ro".into(),
                    read_only: true
                },
            ]
        );
    }

    #[test]
    fn a_claim_not_bound_to_its_volume_fails_with_the_volume_managers_messages() {
        let tmp = tempfile::tempdir().unwrap();
        let volumes = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]);
        let failed = |reason: &str| {
            format!(
                "Unable to attach or mount volumes: unmounted volumes=[d], unattached volumes=[], failed to process volumes=[d]: error processing PVC ns/data: {reason}"
            )
        };
        assert_eq!(
            sync_error(volumes.clone(), &VolumeSources::default()),
            failed(
                "failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"
            )
        );
        assert_eq!(
            sync_error(volumes.clone(), &claimed("Pending", "", "c-1", tmp.path())),
            failed("PVC is not bound")
        );
        assert_eq!(
            sync_error(
                volumes.clone(),
                &claimed("Bound", "pv-2", "c-1", tmp.path())
            ),
            failed("failed to fetch PV pv-2 from API server: persistentvolumes \"pv-2\" not found")
        );
        assert_eq!(
            sync_error(volumes, &claimed("Bound", "pv-1", "c-0", tmp.path())),
            failed(
                "found PV object pv-1 but its pv.Spec.ClaimRef.UID c-0 does not point to claim.UID c-1"
            )
        );
    }

    fn host_path(kind: &str, path: &Path) -> Result<(), String> {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "h", "hostPath": {"path": path, "type": kind}}]),
            json!([]),
        );
        PodVolumes::new(tmp.path())
            .sync(&facts(&pod), &VolumeSources::default())
            .map_err(|e| crate::container::error_chain(&e))
    }

    #[test]
    fn host_path_types_are_checked_as_the_kubelet_checks_them() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let file = root.join("file");
        fs::write(&file, "x").unwrap();
        let missing = root.join("missing");
        let failed = |p: &Path, what: &str| {
            format!(
                "MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: {} is not a {what}",
                p.display()
            )
        };

        assert_eq!(host_path("", &missing), Ok(()));
        assert!(!missing.exists(), "no type: nothing is checked or created");
        assert_eq!(
            host_path("Directory", &missing),
            Err(failed(&missing, "directory"))
        );
        assert_eq!(
            host_path("Directory", &file),
            Err(failed(&file, "directory"))
        );
        assert_eq!(host_path("Directory", root), Ok(()));

        let made = root.join("made/deep");
        assert_eq!(host_path("DirectoryOrCreate", &made), Ok(()));
        assert!(made.is_dir());
        assert_eq!(mode(&made) & !0o755, 0, "created 0755 (less the umask)");
        assert_eq!(
            host_path("DirectoryOrCreate", &file),
            Err(failed(&file, "directory"))
        );

        let created = root.join("created");
        assert_eq!(host_path("FileOrCreate", &created), Ok(()));
        assert_eq!(read(&created), "");
        assert_eq!(mode(&created) & !0o644, 0, "created 0644 (less the umask)");
        let orphan = root.join("no-parent/file");
        assert_eq!(
            host_path("FileOrCreate", &orphan),
            Err(format!(
                "MountVolume.SetUp failed for volume \"h\" : open {}: No such file or directory (os error 2)",
                orphan.display()
            ))
        );
        assert_eq!(host_path("FileOrCreate", root), Err(failed(root, "file")));
        assert_eq!(host_path("File", &file), Ok(()));
        assert_eq!(host_path("File", &missing), Err(failed(&missing, "file")));

        let socket = root.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(host_path("Socket", &socket), Ok(()));
        assert_eq!(
            host_path("Socket", &file),
            Err(failed(&file, "socket file"))
        );
        let null = Path::new("/dev/null");
        assert_eq!(host_path("CharDevice", null), Ok(()));
        assert_eq!(
            host_path("CharDevice", &file),
            Err(failed(&file, "character device"))
        );
        assert_eq!(
            host_path("BlockDevice", null),
            Err(failed(null, "block device"))
        );

        assert_eq!(
            host_path("Bogus", &file),
            Err(
                r#"MountVolume.SetUp failed for volume "h" : Bogus is an invalid volume type"#
                    .into()
            )
        );
        assert_eq!(
            host_path("", Path::new("/a/../b")),
            Err("MountVolume.SetUp failed for volume \"h\" : invalid HostPath `/a/../b`: must not contain '..'".into())
        );
    }

    #[test]
    fn mounts_follow_the_volume_mounts_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        let pod = pod(
            json!([
                {"name": "cfg", "configMap": {"name": "app"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "host", "hostPath": {"path": host}}
            ]),
            json!([
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": false},
                {"name": "host", "mountPath": "data", "readOnly": true}
            ]),
        );
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "1")]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();
        let container = &pod.spec.as_ref().unwrap().containers[0];

        let mounts = volumes.mounts(&pod, container, &no_env).unwrap();
        assert_eq!(
            mounts,
            [
                Mount {
                    source: volumes.volume_dir("scratch"),
                    destination: "/scratch".into(),
                    read_only: false
                },
                Mount {
                    source: volumes.volume_dir("cfg"),
                    destination: "/etc/cfg".into(),
                    read_only: true
                },
                Mount {
                    source: host.clone(),
                    destination: "/data".into(),
                    read_only: true
                }
            ]
        );
        assert!(
            host.is_dir(),
            "a missing hostPath source is made, as containerd does"
        );
    }

    #[test]
    fn mounts_need_a_volume_of_the_pod_that_is_set_up() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "cfg", "configMap": {"name": "app"}}]),
            json!([{"name": "nope", "mountPath": "/x"}]),
        );
        let volumes = PodVolumes::new(tmp.path());
        let container = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            volumes
                .mounts(&pod, container, &no_env)
                .unwrap_err()
                .to_string(),
            r#"cannot find volume "nope" to mount into container "c""#
        );

        let mut container = container.clone();
        container.volume_mounts.as_mut().unwrap()[0].name = "cfg".into();
        assert!(
            volumes
                .sync(&facts(&pod), &VolumeSources::default())
                .is_err()
        );
        assert_eq!(
            volumes
                .mounts(&pod, &container, &no_env)
                .unwrap_err()
                .to_string(),
            r#"volume "cfg" is not mounted: its setup has not succeeded yet"#
        );
    }

    #[test]
    fn a_sub_path_into_a_configmap_is_a_snapshot_of_the_current_file() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "cfg", "configMap": {"name": "app"}}]),
            json!([{"name": "cfg", "mountPath": "/etc/a.conf", "subPath": "a"}]),
        );
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "1")]));
        let volumes = PodVolumes::new(tmp.path());
        volumes.sync(&facts(&pod), &sources).unwrap();
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let dir = fs::canonicalize(volumes.volume_dir("cfg")).unwrap();

        let first = volumes.mounts(&pod, container, &no_env).unwrap();
        let snapshot = first[0].source.clone();
        assert_eq!(snapshot, dir.join(data_target(&dir)).join("a"));
        assert_eq!(read(&snapshot), "1");
        assert!(first[0].read_only);

        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "2")]));
        volumes.sync(&facts(&pod), &sources).unwrap();
        assert!(
            !snapshot.exists(),
            "the snapshot's directory is gone: only a bind mount made before keeps it"
        );
        let again = volumes.mounts(&pod, container, &no_env).unwrap();
        assert_ne!(again[0].source, snapshot);
        assert_eq!(read(&again[0].source), "2");
    }

    #[test]
    fn a_missing_sub_path_is_created_inside_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "scratch", "emptyDir": {}}]),
            json!([{"name": "scratch", "mountPath": "/logs", "subPath": "logs/./app"}]),
        );
        let volumes = PodVolumes::new(tmp.path());
        volumes
            .sync(&facts(&pod), &VolumeSources::default())
            .unwrap();
        let container = &pod.spec.as_ref().unwrap().containers[0];

        let mounts = volumes.mounts(&pod, container, &no_env).unwrap();
        let dir = fs::canonicalize(volumes.volume_dir("scratch")).unwrap();
        assert_eq!(mounts[0].source, dir.join("logs/app"));
        assert!(mounts[0].source.is_dir());
        assert_eq!(mode(dir.join("logs")), 0o777, "the volume's mode");
        assert_eq!(mode(dir.join("logs/app")), 0o777);
    }

    #[test]
    fn sub_path_expr_expands_the_container_environment() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod(
            json!([{"name": "scratch", "emptyDir": {}}]),
            json!([{"name": "scratch", "mountPath": "/out", "subPathExpr": "$(POD_NAME)/$$(x)"}]),
        );
        let volumes = PodVolumes::new(tmp.path());
        volumes
            .sync(&facts(&pod), &VolumeSources::default())
            .unwrap();
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let env = |name: &str| match name {
            "POD_NAME" => Some("p-1".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };

        let mounts = volumes.mounts(&pod, container, &env).unwrap();
        let dir = fs::canonicalize(volumes.volume_dir("scratch")).unwrap();
        assert_eq!(mounts[0].source, dir.join("p-1/$(x)"));

        let mut container = container.clone();
        container.volume_mounts.as_mut().unwrap()[0].sub_path_expr =
            Some("$(UNSET)/$(EMPTY)/$(POD_NAME)".into());
        assert_eq!(
            volumes
                .mounts(&pod, &container, &env)
                .unwrap_err()
                .to_string(),
            "missing value for EMPTY, UNSET"
        );
    }

    #[test]
    fn sub_paths_may_not_leave_their_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let pod = pod(json!([{"name": "scratch", "emptyDir": {}}]), json!([]));
        let volumes = PodVolumes::new(tmp.path());
        volumes
            .sync(&facts(&pod), &VolumeSources::default())
            .unwrap();
        std::os::unix::fs::symlink(&outside, volumes.volume_dir("scratch").join("out")).unwrap();
        let mount_error = |sub_path: &str| {
            let mut container = pod.spec.as_ref().unwrap().containers[0].clone();
            container.volume_mounts = Some(vec![
                serde_json::from_value(
                    json!({"name": "scratch", "mountPath": "/x", "subPath": sub_path}),
                )
                .unwrap(),
            ]);
            let err = volumes.mounts(&pod, &container, &no_env).unwrap_err();
            (
                err.to_string(),
                std::error::Error::source(&err).map(ToString::to_string),
            )
        };

        assert_eq!(
            mount_error("/etc").0,
            "error SubPath `/etc` must not be an absolute path"
        );
        assert_eq!(
            mount_error("a/../../x").0,
            "unable to provision SubPath `a/../../x`: must not contain '..'"
        );
        let (message, cause) = mount_error("out");
        assert_eq!(
            message,
            r#"failed to prepare subPath for volumeMount "scratch" of container "c""#
        );
        assert!(cause.unwrap().contains("not within volume path"));
        assert_eq!(
            mount_error("out/new").0,
            r#"failed to create subPath directory for volumeMount "scratch" of container "c""#
        );
        assert!(
            !outside.join("new").exists(),
            "nothing is created outside the volume"
        );
    }

    #[test]
    fn item_paths_follow_the_atomic_writers_rules() {
        let mut sources = VolumeSources::default();
        sources
            .config_maps
            .insert("app".into(), config_map(&[("a", "1")]));
        let with_path = |path: &str| {
            sync_error(
                json!([{"name": "cfg", "configMap": {"name": "app", "items": [{"key": "a", "path": path}]}}]),
                &sources,
            )
        };
        let prefix = r#"MountVolume.SetUp failed for volume "cfg" : "#;
        assert_eq!(
            with_path("../x"),
            format!("{prefix}invalid path: must not contain '..': ../x")
        );
        assert_eq!(
            with_path("..x/y"),
            format!("{prefix}invalid path: must not start with '..': ..x/y")
        );
        assert_eq!(
            with_path("/abs"),
            format!("{prefix}invalid path: must be relative path: /abs")
        );
    }

    #[test]
    fn tokens_are_refreshed_at_80_percent_of_their_lifetime_or_after_a_day() {
        let issued = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let after = |secs: u64| issued + Duration::from_secs(secs);
        assert_eq!(refresh_due(issued, Duration::from_secs(3600)), after(2880));
        assert_eq!(
            refresh_due(issued, Duration::from_secs(3607)),
            after(3607 - 721)
        );
        assert_eq!(
            refresh_due(issued, Duration::from_secs(7 * 24 * 3600)),
            after(24 * 3600)
        );
    }
}
