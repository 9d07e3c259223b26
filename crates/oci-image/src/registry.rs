//! Pulling an image from a registry through the OCI distribution API
//! ([`ImageStore::pull`]), with the `oci-client` crate, into the same cache as images on
//! disk.
//!
//! A pull:
//! 1. fetches the reference's manifest (an image index is followed to the manifest for
//!    this machine's platform, with the rules of `platform`; a manifest fetched by digest —
//!    the reference's `@sha256:…` or an index entry's — must hash to it);
//! 2. fetches the config blob, and the layer blobs unless the root filesystem of that
//!    config digest is already in the cache (so a second pull fetches the manifest and the
//!    config again, not the layers), up to three at a time, into a private OCI layout
//!    under `<cache>/downloads/.pull-*` (oci-client checks each blob against its digest
//!    once downloaded);
//! 3. writes the manifest and an `index.json` there and hands that layout to
//!    [`ImageStore::unpack`] on a blocking thread (`tokio::task::spawn_blocking`): every
//!    blob is verified again as it is read, and unpacked and cached exactly as an image on
//!    disk is; the layout is then deleted.
//!
//! Authentication is anonymous or with [`Credentials`] (see `credentials` for picking them
//! from a pull secret): oci-client sends them as HTTP basic auth, or to the registry's
//! token service when the registry asks for a bearer token, and keeps the token for the
//! rest of the pull.
//!
//! HTTPS is used (rustls, the system's roots). A registry on a loopback host
//! (`localhost`, `127.0.0.0/8`, `::1`) or one the caller calls insecure
//! ([`PullOptions::insecure`]) is tried over HTTPS without certificate checks first, then
//! over plain HTTP when HTTPS cannot connect, as docker does with insecure registries.
//!
//! Failures are told apart for the kubelet ([`ImageError::ImageNotFound`],
//! [`ImageError::Unauthorized`], [`ImageError::Unreachable`], else [`ImageError::Pull`]);
//! an error while unpacking what was fetched is kept as the cause of
//! [`ImageError::Pull`], but for a local write error ([`ImageError::Write`]) and an image
//! for another platform ([`ImageError::RegistryPlatform`]).
//!
//! # Caveats
//! - Layers are downloaded whole to disk before being unpacked (not streamed into the
//!   unpacker): a pull needs free space for the compressed layers next to the cache.
//!   Downloads are not resumed or shared between concurrent pulls of one image, and an
//!   interrupted pull starts again.
//! - Nothing is kept between pulls but root filesystems: no blob cache, no token cache (a
//!   client is made per pull), so a pull always fetches its manifest and config.
//! - A pull future dropped part-way deletes its download directory synchronously, in the
//!   dropping task.
//! - Connections time out after 10 s and reads after 60 s; there is no overall deadline
//!   (the caller may wrap the future in `tokio::time::timeout`).
//! - No mirrors, no proxies (`HTTPS_PROXY` is not read), no client certificates or extra
//!   CA roots; layers' foreign `urls` are not fetched; sha256 digests only; docker schema 1
//!   manifests are refused.
//! - The process's default rustls crypto provider is set to ring when none is set yet
//!   (oci-client's HTTP client needs one and this workspace builds rustls with ring only).

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use oci_spec::image::{Descriptor, ImageIndex, ImageManifest, MediaType};

use crate::credentials::{Credentials, split_port};
use crate::error::BoxError;
use crate::store::{Image, ImageStore};
use crate::write::LayoutWriter;
use crate::{ImageError, Source, digest, platform};

/// How a pull reaches and authenticates to the registry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullOptions {
    /// The username and password for the registry (from a pull secret:
    /// [`Credentials::from_docker_config`]); `None` pulls anonymously.
    pub credentials: Option<Credentials>,
    /// Whether the registry may be reached without TLS checks and over plain HTTP, as
    /// containerd's and docker's `insecure` registries are. Loopback registries
    /// (`localhost`, `127.0.0.0/8`, `::1`) always may.
    pub insecure: bool,
}

/// The registry of an image reference, as [`Credentials::from_docker_config`] takes it:
/// `host[:port]`, `docker.io` for Docker Hub (`busybox` is `docker.io/library/busybox`).
pub fn registry_of(reference: &str) -> Result<String, ImageError> {
    Ok(parse(reference)?.registry().to_owned())
}

/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one read from a registry may wait.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How many blobs are downloaded at once (containerd's default).
const CONCURRENT_DOWNLOADS: usize = 3;
/// How deep image indexes may nest.
const MAX_DEPTH: usize = 4;
/// The manifest media types asked for.
const MANIFEST_TYPES: &[&str] = &[
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
];

impl ImageStore {
    /// Pulls `reference` (`127.0.0.1:5000/tools/busybox:1.35`, `busybox`,
    /// `name@sha256:…`) from its registry, unpacks it into the cache (once: cached by
    /// config digest, like [`unpack`](Self::unpack)) and returns it.
    ///
    /// The manifest and config are fetched on every call; the layers only when the root
    /// filesystem is not cached. Unpacking runs on tokio's blocking pool
    /// (`spawn_blocking`), so this may be awaited on any tokio runtime task; it must run
    /// inside a tokio runtime.
    pub async fn pull(&self, reference: &str, options: &PullOptions) -> Result<Image, ImageError> {
        let (remote, top) = Remote::connect(reference, options).await?;
        let (manifest_bytes, manifest) = remote.platform_manifest(top).await?;
        let config_digest = manifest.config().digest().to_string();
        let cached = digest::sha256_hex(&config_digest).is_some_and(|hex| self.is_cached(hex));

        let downloads = self.cache_dir().join("downloads");
        let dir = tokio::task::spawn_blocking(move || download_dir(&downloads))
            .await
            .map_err(|e| remote.pull_error(e))??;
        let mut blobs = vec![&config_digest];
        let layer_digests: Vec<String> = manifest
            .layers()
            .iter()
            .map(|layer| layer.digest().to_string())
            .collect();
        if !cached {
            blobs.extend(&layer_digests);
        }
        let fetched = remote.fetch_blobs(dir.path(), blobs).await;

        let store = self.clone();
        let name = reference.to_owned();
        let media_type = manifest
            .media_type()
            .clone()
            .unwrap_or(MediaType::ImageManifest);
        // What went wrong fetching is returned as it is; what went wrong unpacking what
        // was fetched is a failed pull.
        let unpacked = tokio::task::spawn_blocking(move || {
            let result = fetched.map(|()| {
                let layout = LayoutWriter::create(dir.path())?;
                let descriptor = layout.add_blob(&manifest_bytes, media_type)?;
                layout.tag(descriptor, &name)?;
                store.unpack(&Source::Layout(dir.path().to_owned()), None)
            });
            drop(dir);
            result
        })
        .await;
        match unpacked {
            Ok(Ok(Ok(image))) => Ok(image),
            Ok(Err(fetch_error)) => Err(fetch_error),
            Ok(Ok(Err(ImageError::Platform { wanted, found, .. }))) => {
                Err(ImageError::RegistryPlatform {
                    reference: remote.name,
                    registry: remote.registry,
                    wanted,
                    found,
                })
            }
            Ok(Ok(Err(e @ ImageError::Write { .. }))) => Err(e),
            Ok(Ok(Err(e))) => Err(remote.pull_error(e)),
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(join) => Err(remote.pull_error(join)),
        }
    }

    /// Whether the root filesystem of the config `hex` is in the cache.
    fn is_cached(&self, hex: &str) -> bool {
        self.rootfs_dir(hex).is_dir()
    }
}

/// Makes a private download directory under `downloads`, with `blobs/sha256/`.
fn download_dir(downloads: &Path) -> Result<tempfile::TempDir, ImageError> {
    let write_error = |path: &Path| {
        let path = path.to_owned();
        move |source| ImageError::Write { path, source }
    };
    std::fs::create_dir_all(downloads).map_err(write_error(downloads))?;
    let dir = tempfile::Builder::new()
        .prefix(".pull-")
        .tempdir_in(downloads)
        .map_err(write_error(downloads))?;
    let blobs = dir.path().join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).map_err(write_error(&blobs))?;
    Ok(dir)
}

fn parse(reference: &str) -> Result<Reference, ImageError> {
    reference.parse().map_err(
        |source: oci_client::ParseError| ImageError::InvalidReference {
            reference: reference.to_owned(),
            source: Box::new(source),
        },
    )
}

/// Whether `registry` (`host[:port]`) is on this machine.
fn is_loopback(registry: &str) -> bool {
    let (host, _) = split_port(registry);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Sets ring as the process's rustls crypto provider unless one is set.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another thread installing one is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Which request failed, to tell "not found" from a missing blob.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Manifest,
    Blob,
}

/// A registry client for one pull of one reference.
struct Remote {
    client: Client,
    reference: Reference,
    auth: RegistryAuth,
    /// The reference as the caller gave it, for messages.
    name: String,
    /// `host[:port]`, for messages.
    registry: String,
}

impl Remote {
    /// A client for `name`, and the manifest it names (verified against its digest when it
    /// has one).
    async fn connect(name: &str, options: &PullOptions) -> Result<(Self, Vec<u8>), ImageError> {
        let reference = parse(name)?;
        install_crypto_provider();
        let insecure = options.insecure || is_loopback(reference.registry());
        let auth = match &options.credentials {
            Some(c) => RegistryAuth::Basic(c.username.clone(), c.password.clone()),
            None => RegistryAuth::Anonymous,
        };
        let mut remote = Self {
            registry: reference.registry().to_owned(),
            name: name.to_owned(),
            client: Client::default(),
            reference,
            auth,
        };
        remote.client = remote.client(ClientProtocol::Https, insecure)?;
        let top = remote.reference.clone();
        let first = match remote.fetch(&top).await {
            Err(e) if insecure && is_transport(&e) => {
                let plain = ClientProtocol::HttpsExcept(vec![
                    remote.reference.resolve_registry().to_owned(),
                ]);
                remote.client = remote.client(plain, insecure)?;
                remote.fetch(&top).await
            }
            other => other,
        };
        let bytes = first.map_err(|e| remote.error(e, Stage::Manifest))?;
        remote.check_digest(&top, &bytes)?;
        Ok((remote, bytes))
    }

    fn client(&self, protocol: ClientProtocol, insecure: bool) -> Result<Client, ImageError> {
        let config = ClientConfig {
            protocol,
            accept_invalid_certificates: insecure,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            platform_resolver: None,
            ..ClientConfig::default()
        };
        Client::try_from(config).map_err(|e| self.pull_error(e))
    }

    /// Fetches the manifest (or index) `reference` names.
    async fn fetch(&self, reference: &Reference) -> Result<Vec<u8>, OciDistributionError> {
        let (bytes, _) = self
            .client
            .pull_manifest_raw(reference, &self.auth, MANIFEST_TYPES)
            .await?;
        Ok(bytes.to_vec())
    }

    /// Fetches the manifest `reference` names and verifies it against its digest.
    async fn manifest(&self, reference: &Reference) -> Result<Vec<u8>, ImageError> {
        let bytes = self
            .fetch(reference)
            .await
            .map_err(|e| self.error(e, Stage::Manifest))?;
        self.check_digest(reference, &bytes)?;
        Ok(bytes)
    }

    /// Checks a manifest fetched by `reference` against its digest, if it has one (as
    /// oci-client does too).
    fn check_digest(&self, reference: &Reference, bytes: &[u8]) -> Result<(), ImageError> {
        let Some(expected) = reference.digest() else {
            return Ok(());
        };
        if digest::sha256_hex(expected).is_none() {
            return Err(self.pull_error(format!(
                "unsupported digest {expected:?}: expected sha256:<64 hex digits>"
            )));
        }
        let actual = digest::of(bytes);
        if actual != expected {
            return Err(ImageError::ManifestDigest {
                reference: self.name.clone(),
                registry: self.registry.clone(),
                expected: expected.to_owned(),
                actual,
            });
        }
        Ok(())
    }

    /// Follows the manifest `bytes` through image indexes to the image manifest for this
    /// machine.
    async fn platform_manifest(
        &self,
        mut bytes: Vec<u8>,
    ) -> Result<(Vec<u8>, ImageManifest), ImageError> {
        for _ in 0..=MAX_DEPTH {
            let kind: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| self.pull_error(e))?;
            if kind.get("manifests").is_some() {
                let index: ImageIndex =
                    serde_json::from_slice(&bytes).map_err(|e| self.pull_error(e))?;
                let entries: Vec<&Descriptor> = index.manifests().iter().collect();
                let chosen = match entries.as_slice() {
                    [] => return Err(self.pull_error("the image index lists no manifest")),
                    // A lone entry without a platform is taken: its config is checked.
                    [only] if only.platform().is_none() => *only,
                    _ => {
                        platform::pick(&entries).map_err(|found| ImageError::RegistryPlatform {
                            reference: self.name.clone(),
                            registry: self.registry.clone(),
                            wanted: platform::wanted(),
                            found,
                        })?
                    }
                };
                let child = self
                    .reference
                    .clone_with_digest(chosen.digest().to_string());
                bytes = self.manifest(&child).await?;
            } else if kind.get("layers").is_some() {
                let manifest = serde_json::from_slice(&bytes).map_err(|e| self.pull_error(e))?;
                return Ok((bytes, manifest));
            } else {
                return Err(
                    self.pull_error("the manifest is neither an image index nor an image manifest")
                );
            }
        }
        Err(self.pull_error(format!("image indexes nest deeper than {MAX_DEPTH} levels")))
    }

    /// Downloads the blobs `digests` (each once) into the layout `dir`.
    async fn fetch_blobs(&self, dir: &Path, digests: Vec<&String>) -> Result<(), ImageError> {
        let mut seen = HashSet::new();
        let unique: Vec<&String> = digests.into_iter().filter(|d| seen.insert(*d)).collect();
        // The fetches made first (futures do nothing until polled): a stream of a closure
        // would make this future Send only for one lifetime, and a kubelet spawns it.
        let fetches: Vec<_> = unique
            .into_iter()
            .map(|digest| self.fetch_blob(dir, digest))
            .collect();
        futures::stream::iter(fetches)
            .buffer_unordered(CONCURRENT_DOWNLOADS)
            .try_collect()
            .await
    }

    /// Downloads the blob `digest` into the layout `dir` (verified by oci-client).
    async fn fetch_blob(&self, dir: &Path, digest: &str) -> Result<(), ImageError> {
        let hex = digest::sha256_hex(digest).ok_or_else(|| {
            self.pull_error(format!(
                "blob {digest:?} has an unsupported digest: expected sha256:<64 hex digits>"
            ))
        })?;
        let path: PathBuf = dir.join("blobs").join("sha256").join(hex);
        let file = tokio::fs::File::create(&path)
            .await
            .map_err(|source| ImageError::Write {
                path: path.clone(),
                source,
            })?;
        self.client
            .pull_blob(&self.reference, digest, file)
            .await
            .map_err(|e| self.error(e, Stage::Blob))
    }

    /// [`ImageError::Pull`] of `cause`.
    fn pull_error(&self, cause: impl Into<BoxError>) -> ImageError {
        ImageError::Pull {
            reference: self.name.clone(),
            registry: self.registry.clone(),
            source: cause.into(),
        }
    }

    /// The error of a failed request.
    fn error(&self, e: OciDistributionError, stage: Stage) -> ImageError {
        let reference = self.name.clone();
        let registry = self.registry.clone();
        if stage == Stage::Manifest
            && let OciDistributionError::DigestError(DigestError::VerificationError {
                expected,
                actual,
            }) = &e
        {
            return ImageError::ManifestDigest {
                reference,
                registry,
                expected: expected.clone(),
                actual: actual.clone(),
            };
        }
        let source: BoxError = Box::new(e);
        let e = source
            .downcast_ref::<OciDistributionError>()
            .expect("boxed just above");
        if is_transport(e) {
            ImageError::Unreachable {
                reference,
                registry,
                source,
            }
        } else if is_unauthorized(e) {
            ImageError::Unauthorized {
                reference,
                registry,
                source,
            }
        } else if stage == Stage::Manifest && is_not_found(e) {
            ImageError::ImageNotFound {
                reference,
                registry,
                source,
            }
        } else {
            ImageError::Pull {
                reference,
                registry,
                source,
            }
        }
    }
}

/// Whether the request never got an answer: no connection, TLS failure, timeout.
fn is_transport(e: &OciDistributionError) -> bool {
    matches!(e, OciDistributionError::RequestError(e)
        if e.is_connect() || e.is_timeout() || e.is_request())
}

fn is_unauthorized(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
        OciDistributionError::ServerError { code, .. } => matches!(code, 401 | 403),
        _ => false,
    }
}

fn is_not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown | OciErrorCode::NotFound
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_told_apart_from_remote_ones() {
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("127.1.2.3"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("docker.io"));
        assert!(!is_loopback("10.0.0.1:5000"));
        assert!(!is_loopback("localhost.example.org"));
    }

    #[test]
    fn the_registry_of_a_short_name_is_docker_hub() {
        assert_eq!(registry_of("busybox").unwrap(), "docker.io");
        assert_eq!(
            registry_of("127.0.0.1:5000/tools/busybox:1.35").unwrap(),
            "127.0.0.1:5000"
        );
        let err = registry_of("Not A Reference").unwrap_err();
        assert!(matches!(err, ImageError::InvalidReference { .. }), "{err}");
        assert!(err.to_string().contains("\"Not A Reference\""), "{err}");
    }
}
