//! What a simulated kubelet is told: its node's name and addresses, the image map, timings.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use super::image::ImageConfig;
use super::oci::Isolation;

/// Errors of the kubelet's configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An image map entry is not `NAME=PATH`.
    #[error("image mapping {0:?} is not NAME=PATH")]
    ImageMapping(String),
    /// An entrypoint or cmd setting is not `NAME=ARRAY`.
    #[error("image setting {0:?} is not NAME=[\"WORD\", ...]")]
    ImageArgv(String),
    /// An entrypoint or cmd setting's array is not a JSON array of strings.
    #[error("image setting {text:?} is not NAME=[\"WORD\", ...]")]
    ImageArgvJson {
        /// The setting.
        text: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Where libfaketime is found on common Linux layouts (Debian's `libfaketime` package first).
const FAKETIME_CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The installed libfaketime preload library, if any (Debian package `faketime`).
pub fn find_faketime() -> Option<PathBuf> {
    FAKETIME_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// What runs an image: a local executable, or a directory holding the image's filesystem
/// (see [`super::image`]), told apart when a container starts. Images that are not in the
/// map run as stand-ins: Running and Ready, with no process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageMap(HashMap<String, Mapped>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapped {
    path: PathBuf,
    config: ImageConfig,
}

impl ImageMap {
    /// An empty map: every image is a stand-in.
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `image` (e.g. `memcached-operator:dev`) to an executable, or to a directory
    /// holding its filesystem, with neither entrypoint nor cmd.
    pub fn insert(&mut self, image: impl Into<String>, path: impl Into<PathBuf>) -> &mut Self {
        self.insert_filesystem(image, path, ImageConfig::default())
    }

    /// Maps `image` to the directory `root` holding its filesystem, with the entrypoint and
    /// cmd its containers run when they do not say (ignored when `root` is an executable)
    /// and the user they run as.
    pub fn insert_filesystem(
        &mut self,
        image: impl Into<String>,
        root: impl Into<PathBuf>,
        config: ImageConfig,
    ) -> &mut Self {
        let path = root.into();
        self.0.insert(image.into(), Mapped { path, config });
        self
    }

    /// The executable or directory of `image`: an exact match first, then a match after
    /// normalising both names (`docker.io/` and `library/` dropped, `:latest` added when
    /// untagged).
    pub fn get(&self, image: &str) -> Option<&Path> {
        self.find(image).map(|(_, m)| m.path.as_path())
    }

    /// The entrypoint and cmd of `image`, matched as [`ImageMap::get`] matches.
    pub fn config(&self, image: &str) -> Option<&ImageConfig> {
        self.find(image).map(|(_, m)| &m.config)
    }

    fn find(&self, image: &str) -> Option<(&str, &Mapped)> {
        if let Some((name, m)) = self.0.get_key_value(image) {
            return Some((name, m));
        }
        let wanted = normalize(image);
        self.0
            .iter()
            .find(|(name, _)| normalize(name) == wanted)
            .map(|(name, m)| (name.as_str(), m))
    }

    /// Changes the entrypoint, cmd or user of `image`, matched as [`ImageMap::get`] matches;
    /// `false` when it is not mapped.
    pub fn configure(&mut self, image: &str, change: impl FnOnce(&mut ImageConfig)) -> bool {
        let key = match self.find(image) {
            Some((key, _)) => key.to_string(),
            None => return false,
        };
        match self.0.get_mut(&key) {
            Some(m) => {
                change(&mut m.config);
                true
            }
            None => false,
        }
    }

    /// Whether no image is mapped.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mappings, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Path)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.path.as_path()))
    }
}

fn normalize(image: &str) -> String {
    let mut name = image.strip_prefix("docker.io/").unwrap_or(image);
    name = name.strip_prefix("library/").unwrap_or(name);
    let last = name.rsplit_once('/').map_or(name, |(_, last)| last);
    if last.contains(':') || name.contains('@') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

/// One `NAME=PATH` mapping, as `opconform sim --image NAME=PATH` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMapping {
    /// The image name.
    pub image: String,
    /// The executable, or the directory holding the image's filesystem.
    pub path: PathBuf,
}

impl FromStr for ImageMapping {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((image, path)) if !image.trim().is_empty() && !path.trim().is_empty() => {
                Ok(Self {
                    image: image.trim().to_string(),
                    path: PathBuf::from(path.trim()),
                })
            }
            _ => Err(ConfigError::ImageMapping(s.to_string())),
        }
    }
}

/// One `NAME=["WORD", ...]` setting of a directory image's entrypoint or cmd (a JSON array
/// of strings, as a Dockerfile's exec form), as `opconform sim --image-entrypoint` and
/// `--image-cmd` take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageArgv {
    /// The image name.
    pub image: String,
    /// The words.
    pub argv: Vec<String>,
}

impl FromStr for ImageArgv {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some((image, argv)) = s.split_once('=').filter(|(i, _)| !i.trim().is_empty()) else {
            return Err(ConfigError::ImageArgv(s.to_string()));
        };
        let argv = serde_json::from_str(argv).map_err(|source| ConfigError::ImageArgvJson {
            text: s.to_string(),
            source,
        })?;
        Ok(Self {
            image: image.trim().to_string(),
            argv,
        })
    }
}

impl FromStr for ImageMap {
    type Err = ConfigError;

    /// Parses one or more comma-separated `NAME=PATH` mappings.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut map = Self::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let m: ImageMapping = part.parse()?;
            map.insert(m.image, m.path);
        }
        Ok(map)
    }
}

impl FromIterator<ImageMapping> for ImageMap {
    fn from_iter<T: IntoIterator<Item = ImageMapping>>(iter: T) -> Self {
        let mut map = Self::new();
        for m in iter {
            map.insert(m.image, m.path);
        }
        map
    }
}

/// Everything one simulated kubelet needs to know.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// The Node's name.
    pub node_name: String,
    /// The kubelet's own loopback source address (InternalIP), e.g. `127.0.10.1`.
    pub node_ip: Ipv4Addr,
    /// Pod IPs are `127.P0.P1.N` with `N` in `1..=254`, unique on this node.
    pub pod_ip_prefix: [u8; 2],
    /// Which executable or image filesystem runs which image.
    pub images: ImageMap,
    /// A per-node directory for pod working directories, kubeconfigs and logs.
    pub work_dir: PathBuf,
    /// How often the node status and the node Lease are renewed (real kubelet: 10 s).
    pub heartbeat_interval: Duration,
    /// The node Lease's duration (real kubelet: 40 s).
    pub lease_duration_seconds: i32,
    /// libfaketime's preload library; `None` disables clock skew.
    pub faketime_library: Option<PathBuf>,
    /// Extra labels of the Node.
    pub labels: BTreeMap<String, String>,
    /// The first CrashLoopBackOff delay (real kubelet: 10 s).
    pub restart_backoff_base: Duration,
    /// The largest CrashLoopBackOff delay (real kubelet: 300 s). A container that ran for
    /// twice this long restarts without delay and its backoff starts over.
    pub restart_backoff_cap: Duration,
    /// How much of each container's output is kept in memory for `kubectl logs`.
    pub log_limit_bytes: usize,
    /// The port the Node advertises for its kubelet endpoint
    /// (`status.daemonEndpoints.kubeletEndpoint.Port`); set to the port actually bound when
    /// the API server reads logs from kubelets.
    pub kubelet_port: u16,
    /// Request rules its pods' proxies judge every API request by (holding the sender,
    /// deferring, delaying, rejecting), terminating the pods' TLS to read them: for a real
    /// API server, which the harness cannot make judge requests. `None` passes the bytes
    /// through (the simulated API server judges them itself).
    pub request_rules: Option<std::sync::Arc<sim_apiserver::faults::Faults>>,
    /// How pods run: as containers of an OCI runtime, or as host processes.
    pub isolation: Isolation,
    /// Where images mapped to OCI layouts or archives, or pulled, are unpacked, by digest.
    pub image_cache: PathBuf,
    /// The registries (`host[:port]`, as [`oci_image::registry_of`] names them) whose
    /// images the kubelet pulls when they are not mapped, as `imagePullPolicy` says and
    /// with the pod's `imagePullSecrets`; an unmapped image of any other registry is a
    /// stand-in unless the Docker engine has it ([`Self::docker_engine`]). Loopback
    /// registries are reached over plain HTTP.
    pub registries: Vec<String>,
    /// The Docker engine whose store holds images for this node (as containerd's store does
    /// for a real kubelet): an unmapped image it has is exported from it and run, and is
    /// present for `imagePullPolicy`. `None` asks no engine; an engine that is not running
    /// is skipped. Used only when pods are containers.
    pub docker_engine: Option<oci_image::DockerEngine>,
}

/// `$XDG_CACHE_HOME/opconform/images`, else `~/.cache/opconform/images`, else one under
/// the temporary directory.
pub fn default_image_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("opconform")
        .join("images")
}

impl KubeletConfig {
    /// The scheme of the container IDs and image IDs this kubelet reports: the runtime's
    /// name, or `opconform` for host processes.
    pub fn isolation_name(&self) -> &str {
        match &self.isolation {
            Isolation::Containers(rt) => rt.name(),
            Isolation::Processes { .. } => "opconform",
        }
    }

    /// Defaults for node number `index` of a simulated cluster: node IP `127.0.10.<index>`,
    /// pod IPs `127.<100+index>.0.N`, 1 s heartbeats, a 40 s lease, the real
    /// CrashLoopBackOff of 10 s doubling to 300 s, libfaketime when installed, no images,
    /// the Docker engine of `DOCKER_HOST` or the default socket.
    pub fn new(node_name: &str, index: u8, work_dir: PathBuf) -> Self {
        let isolation = Isolation::detect(Path::new(super::oci::STATE_DIR));
        Self {
            node_name: node_name.to_string(),
            node_ip: Ipv4Addr::new(127, 0, 10, index),
            pod_ip_prefix: [100u8.saturating_add(index), 0],
            images: ImageMap::new(),
            work_dir,
            heartbeat_interval: Duration::from_secs(1),
            lease_duration_seconds: 40,
            faketime_library: find_faketime(),
            labels: BTreeMap::new(),
            restart_backoff_base: Duration::from_secs(10),
            restart_backoff_cap: Duration::from_secs(300),
            log_limit_bytes: 1024 * 1024,
            kubelet_port: 10250,
            request_rules: None,
            isolation,
            image_cache: default_image_cache(),
            registries: Vec::new(),
            docker_engine: docker_engine_from_env(),
        }
    }
}

/// The Docker engine the Docker CLI would use (`DOCKER_HOST`, else the default socket);
/// `None`, with a warning, when `DOCKER_HOST` names one that cannot be reached (not a unix
/// socket).
fn docker_engine_from_env() -> Option<oci_image::DockerEngine> {
    oci_image::DockerEngine::from_env()
        .inspect_err(|e| tracing::warn!(error = %e, "the docker engine's images are not used"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_mappings_parse_from_name_equals_path() {
        let m: ImageMapping = "memcached-operator:dev=/bin/op".parse().unwrap();
        assert_eq!(m.image, "memcached-operator:dev");
        assert_eq!(m.path, PathBuf::from("/bin/op"));
        assert!("no-equals".parse::<ImageMapping>().is_err());
        assert!("=/bin/x".parse::<ImageMapping>().is_err());
        let map: ImageMap = "a:1=/x,b=/y".parse().unwrap();
        assert_eq!(map.get("a:1"), Some(Path::new("/x")));
        assert_eq!(map.get("b:latest"), Some(Path::new("/y")));
    }

    #[test]
    fn entrypoint_and_cmd_settings_parse_from_name_equals_a_json_array() {
        let e: ImageArgv = r#"busybox:1.36=["sh", "-c"]"#.parse().unwrap();
        assert_eq!(e.image, "busybox:1.36");
        assert_eq!(e.argv, ["sh", "-c"]);
        let err = "busybox=sh -c".parse::<ImageArgv>().unwrap_err();
        assert!(matches!(err, ConfigError::ImageArgvJson { .. }), "{err}");
        assert!(r#"=["sh"]"#.parse::<ImageArgv>().is_err());
        assert!("busybox".parse::<ImageArgv>().is_err());
        let mut map: ImageMap = "busybox=/srv/busybox".parse().unwrap();
        assert!(map.configure("docker.io/library/busybox", |c| c.cmd = e.argv.clone()));
        assert!(!map.configure("other", |c| c.cmd.clear()));
        assert_eq!(map.config("busybox:latest").unwrap().cmd, ["sh", "-c"]);
    }

    #[test]
    fn image_names_match_after_normalisation() {
        let mut map = ImageMap::new();
        map.insert("memcached-operator:dev", "/op");
        assert_eq!(
            map.get("docker.io/library/memcached-operator:dev"),
            Some(Path::new("/op"))
        );
        assert_eq!(map.get("memcached-operator:other"), None);
        assert_eq!(map.get("memcached"), None);
    }

    #[test]
    fn defaults_derive_addresses_from_the_node_index() {
        let c = KubeletConfig::new("worker-2", 2, PathBuf::from("/tmp/w"));
        assert_eq!(c.node_ip, Ipv4Addr::new(127, 0, 10, 2));
        assert_eq!(c.pod_ip_prefix, [102, 0]);
        assert_eq!(c.heartbeat_interval, Duration::from_secs(1));
        assert_eq!(c.lease_duration_seconds, 40);
        assert_eq!(c.restart_backoff_base, Duration::from_secs(10));
        assert_eq!(c.restart_backoff_cap, Duration::from_secs(300));
    }
}
