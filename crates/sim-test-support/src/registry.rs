//! A real registry for tests: Debian's `docker-registry` (distribution v2), started on a
//! free 127.0.0.1 port with its storage in a temporary directory, and stopped (killed and
//! waited for) when dropped, also on a panic; and pushing to it with oci-client, no docker
//! CLI.
//!
//! Without `docker-registry`, [`Registry::start`] says why the test did not run and gives
//! `None`, unless `CI` is set: then it fails, saying what to install.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OCI_IMAGE_MEDIA_TYPE;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::Value;

/// The user of a registry started with basic auth.
pub const USER: &str = "tester";
/// Its password.
pub const PASSWORD: &str = "opconform-registry-test";
/// `PASSWORD` hashed with bcrypt (cost 5, to keep the registry's checks fast), as
/// `htpasswd -B` would write it.
const PASSWORD_BCRYPT: &str = "$2a$05$7F7Df3XA/kZbuMpKYiRbmeQwP0eaF8PJLM6HcIROQD5Myj7VsjJq.";

/// How long the registry may take to start serving.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A `docker-registry serve` process, killed and waited for when dropped; its storage and
/// configuration are in a temporary directory, deleted after it stops.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub host: String,
    dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts a registry, with htpasswd auth ([`USER`], [`PASSWORD`]) when `auth` is set;
    /// `None` when `docker-registry` is not installed outside CI.
    ///
    /// # Panics
    /// When it cannot be started or does not serve within 20 s.
    pub fn start(auth: bool) -> Option<Self> {
        let binary = registry_binary()?;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let host = format!("127.0.0.1:{}", free_port());
        let mut config = format!(
            "version: 0.1\n\
             log:\n  level: warn\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
             http:\n  addr: {host}\n  secret: opconform-test-secret\n",
            storage = dir.path().join("storage").display(),
        );
        if auth {
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{USER}:{PASSWORD_BCRYPT}\n"))
                .expect("the htpasswd file is written");
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: opconform-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("the registry's config is written");
        let log_path = dir.path().join("registry.log");
        let log = std::fs::File::create(&log_path).expect("the registry's log is created");
        let child = Command::new(&binary)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second handle of the log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut registry = Self { child, host, dir };
        registry.wait_until_serving(&log_path);
        Some(registry)
    }

    /// Waits until `/v2/` answers (any HTTP status), at most `START_TIMEOUT`.
    fn wait_until_serving(&mut self, log_path: &Path) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "docker-registry exited ({status}) before serving on {}: {}",
                    self.host,
                    std::fs::read_to_string(log_path).unwrap_or_default()
                );
            }
            if answers_v2(&self.host) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not serve /v2/ on {} within {START_TIMEOUT:?}: {}",
                self.host,
                std::fs::read_to_string(log_path).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `127.0.0.1:<port>/<repository>`.
    pub fn image(&self, repository_and_tag: &str) -> String {
        format!("{}/{repository_and_tag}", self.host)
    }

    /// Deletes the blob `digest` (`sha256:…`) from the registry's storage.
    ///
    /// # Panics
    /// When it is not there.
    pub fn delete_blob(&self, digest: &str) {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        let data = self
            .dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data");
        std::fs::remove_file(&data).expect("the blob is in the registry's storage");
    }

    /// Pushes the image of the single-manifest OCI layout `layout` (as `write_layout`
    /// writes it) as `image`, anonymously or with `auth`.
    ///
    /// # Panics
    /// When the layout cannot be read or the registry refuses.
    pub async fn push_layout(&self, layout: &Path, image: &str, auth: &RegistryAuth) {
        let blob = |digest: &str| {
            let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
            std::fs::read(layout.join("blobs/sha256").join(hex)).expect("the layout's blob")
        };
        let index: Value = serde_json::from_slice(
            &std::fs::read(layout.join("index.json")).expect("the layout's index"),
        )
        .expect("an index of json");
        let manifest_digest = index["manifests"][0]["digest"]
            .as_str()
            .expect("a manifest in the index");
        let manifest = blob(manifest_digest);
        let parsed: Value = serde_json::from_slice(&manifest).expect("a manifest of json");
        let mut blobs = vec![parsed["config"]["digest"].as_str().unwrap_or_default()];
        blobs.extend(
            parsed["layers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["digest"].as_str()),
        );
        let blobs: Vec<(Vec<u8>, String)> = blobs
            .into_iter()
            .map(|d| (blob(d), d.to_string()))
            .collect();
        push(
            &pusher(),
            auth,
            image,
            &blobs,
            &manifest,
            OCI_IMAGE_MEDIA_TYPE,
        )
        .await;
    }
}

/// Pushes `blobs` (bytes and digest) and then `manifest` (of `media_type`) as `image`.
///
/// # Panics
/// When the registry refuses.
pub async fn push(
    client: &Client,
    auth: &RegistryAuth,
    image: &str,
    blobs: &[(Vec<u8>, String)],
    manifest: &[u8],
    media_type: &str,
) {
    let reference: Reference = image.parse().expect("an image reference");
    client
        .auth(&reference, auth, oci_client::RegistryOperation::Push)
        .await
        .expect("the registry lets the pusher in");
    for (bytes, digest) in blobs {
        client
            .push_blob(&reference, bytes.clone(), digest)
            .await
            .expect("the registry takes the blob");
    }
    push_manifest(client, &reference, manifest, media_type).await;
}

/// Pushes a manifest (or an index) of `media_type` as `reference`.
///
/// # Panics
/// When the registry refuses.
pub async fn push_manifest(client: &Client, reference: &Reference, bytes: &[u8], media_type: &str) {
    client
        .push_manifest_raw(
            reference,
            bytes.to_vec(),
            media_type.parse().expect("a media type"),
        )
        .await
        .expect("the registry takes the manifest");
}

/// A client pushing over plain HTTP (with ring as rustls's provider: reqwest needs one
/// even for HTTP).
///
/// # Panics
/// When the client cannot be built.
pub fn pusher() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::try_from(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    })
    .expect("an oci client")
}

/// The `docker-registry` binary; `None` (after saying so) when it is not installed and
/// `CI` is unset.
fn registry_binary() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("docker-registry"))
        .find(|path| {
            path.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "docker-registry is not installed: apt-get install docker-registry"
        );
        eprintln!(
            "skipped: docker-registry is not installed (apt-get install docker-registry to run this test)"
        );
    }
    found
}

/// A free port of 127.0.0.1.
///
/// # Panics
/// When none can be had.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Whether an HTTP server answers `GET /v2/` on `host`.
fn answers_v2(host: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(host) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /v2/ HTTP/1.0\r\nHost: {host}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}
