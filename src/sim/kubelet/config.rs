//! What a simulated kubelet is told: its node's name and addresses, the image map, timings.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Errors of the kubelet's configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An image map entry is not `NAME=PATH`.
    #[error("image mapping {0:?} is not NAME=PATH")]
    ImageMapping(String),
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

/// Which local executable runs an image. Images that are not in the map run as stand-ins:
/// Running and Ready, with no process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageMap(HashMap<String, PathBuf>);

impl ImageMap {
    /// An empty map: every image is a stand-in.
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `image` (e.g. `memcached-operator:dev`) to an executable.
    pub fn insert(&mut self, image: impl Into<String>, path: impl Into<PathBuf>) -> &mut Self {
        self.0.insert(image.into(), path.into());
        self
    }

    /// The executable of `image`: an exact match first, then a match after normalising
    /// both names (`docker.io/` and `library/` dropped, `:latest` added when untagged).
    pub fn get(&self, image: &str) -> Option<&Path> {
        if let Some(p) = self.0.get(image) {
            return Some(p);
        }
        let wanted = normalize(image);
        self.0
            .iter()
            .find(|(name, _)| normalize(name) == wanted)
            .map(|(_, p)| p.as_path())
    }

    /// Whether no image is mapped.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mappings, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Path)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_path()))
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
    /// The executable.
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
    /// Which executable runs which image.
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
}

impl KubeletConfig {
    /// Defaults for node number `index` of a simulated cluster: node IP `127.0.10.<index>`,
    /// pod IPs `127.<100+index>.0.N`, 1 s heartbeats, a 40 s lease, the real
    /// CrashLoopBackOff of 10 s doubling to 300 s, libfaketime when installed, no images.
    pub fn new(node_name: &str, index: u8, work_dir: PathBuf) -> Self {
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
        }
    }
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
