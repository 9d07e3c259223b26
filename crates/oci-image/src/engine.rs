//! Images in a local Docker engine's store ([`ImageStore::engine_image`]), through the
//! Docker Engine API on the engine's unix socket ([`DockerEngine`]).
//!
//! The engine is found as the Docker CLI finds it ([`DockerEngine::from_env`]):
//! `DOCKER_HOST` (`unix:///path/to/docker.sock`), else `/var/run/docker.sock`.
//!
//! An image is looked up with `GET /images/{name}/json` (the engine's image inspection).
//! When the engine has it, its image id is looked up in the cache's record of images
//! exported before (`<cache>/engine/<id hex>`, which names the image's config digest): when
//! that root filesystem is in the cache, nothing more is asked of the engine. Otherwise,
//! holding a lock on `<cache>/engine/<id hex>.lock` (so that concurrent lookups of one
//! image, in threads or processes, export it once: those that waited find the record), the
//! image is exported with `GET /images/{name}/get` (a `docker save` archive, streamed
//! to a private file under `<cache>/downloads/.engine-*`), unpacked from that archive by
//! [`ImageStore::unpack`] on a blocking thread (so it is verified and cached as any archive
//! is), the record is written and the archive deleted.
//!
//! What counts as no engine, so that the caller goes on to its next source: no socket at
//! the address, a socket nobody listens on (connection refused), or one this user may not
//! open (permission denied). An engine that answers with an error, or with something that
//! is not what the Engine API sends, is an [`EngineError`] naming the engine and the
//! image; an engine that answers 404 (`No such image`) does not have the image.
//!
//! Requests are plain HTTP/1.1 with hyper over a `tokio::net::UnixStream`, one connection
//! per request, to the engine's unversioned paths (the engine's own API version).
//!
//! # Caveats
//! - Only unix sockets: a `tcp://` or `ssh://` `DOCKER_HOST` is refused
//!   ([`EngineError::UnsupportedHost`]), and the Docker CLI's contexts
//!   (`DOCKER_CONTEXT`, `~/.docker/config.json`) are not read.
//! - An export is written whole to disk before it is unpacked: it needs free space for the
//!   uncompressed image next to the cache.
//! - The engine has [`ANSWER_TIMEOUT`] to answer each request (and to send a whole JSON
//!   answer); the export's body has no deadline.
//! - The record of an exported image and its lock file are never pruned, like the cache
//!   itself; an image removed from the engine and loaded again under the same id is not
//!   exported again while its root filesystem is cached.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;

use crate::error::BoxError;
use crate::store::{Image, ImageStore};
use crate::{ImageConfig, ImageError, Source, digest};

/// Where the Docker CLI looks for the engine when `DOCKER_HOST` is not set.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// How long the engine has to answer a request (its headers; not an export's body).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest JSON answer read into memory.
const MAX_JSON: usize = 16 << 20;

/// Errors asking a Docker engine for an image.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `DOCKER_HOST` names an engine this crate cannot reach.
    #[error(
        "docker host {host:?} is not supported: expected unix:///path/to/docker.sock (tcp and ssh engines are not reached)"
    )]
    UnsupportedHost {
        /// The address.
        host: String,
    },
    /// The reference cannot be a name the engine knows.
    #[error("{reference:?} is not an image reference to ask the docker engine for")]
    Reference {
        /// The reference.
        reference: String,
    },
    /// The request failed once connected: the engine closed the connection, or sent
    /// something that is not HTTP.
    #[error("the docker engine at {engine} failed to answer {request} for image {image}")]
    Request {
        /// The engine's address.
        engine: String,
        /// The image.
        image: String,
        /// The request (`GET /images/…/json`).
        request: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The engine took longer than [`ANSWER_TIMEOUT`] to answer.
    #[error(
        "the docker engine at {engine} did not answer {request} for image {image} within {timeout:?}"
    )]
    Timeout {
        /// The engine's address.
        engine: String,
        /// The image.
        image: String,
        /// The request.
        request: String,
        /// How long it was given.
        timeout: Duration,
    },
    /// The engine answered with an error status.
    #[error(
        "the docker engine at {engine} answered {request} for image {image} with {status}: {message}"
    )]
    Status {
        /// The engine's address.
        engine: String,
        /// The image.
        image: String,
        /// The request.
        request: String,
        /// The HTTP status.
        status: u16,
        /// The engine's `message`, or the body as it came.
        message: String,
    },
    /// The engine's inspection of the image is not what the Engine API sends.
    #[error(
        "the docker engine at {engine} sent an unreadable inspection of image {image}: expected an object with an Id sha256:<hex>"
    )]
    Inspection {
        /// The engine's address.
        engine: String,
        /// The image.
        image: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The exported archive could not be written, or the record of an export kept.
    #[error("cannot write {path} for image {image} of the docker engine at {engine}")]
    Write {
        /// The engine's address.
        engine: String,
        /// The image.
        image: String,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The exported archive could not be unpacked (or is not the image).
    #[error("cannot unpack image {image} exported from the docker engine at {engine}")]
    Unpack {
        /// The engine's address.
        engine: String,
        /// The image.
        image: String,
        /// The cause.
        #[source]
        source: Box<ImageError>,
    },
    /// The unpacking of the export was cancelled (the runtime is shutting down).
    #[error(
        "the unpacking of image {image} exported from the docker engine at {engine} was cut short"
    )]
    Cancelled {
        /// The engine's address.
        engine: String,
        /// The image.
        image: String,
    },
}

/// A Docker engine on a unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerEngine {
    socket: PathBuf,
}

impl DockerEngine {
    /// The engine listening on the unix socket `socket`.
    pub fn unix(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
        }
    }

    /// The engine a `DOCKER_HOST` value names: `unix:///path` (a bare absolute path is
    /// taken as one too).
    ///
    /// # Errors
    /// [`EngineError::UnsupportedHost`] for any other scheme (`tcp://`, `ssh://`, `npipe://`)
    /// or a relative path.
    pub fn from_host(host: &str) -> Result<Self, EngineError> {
        let path = host.strip_prefix("unix://").unwrap_or(host);
        if path.starts_with('/') && !path.contains("://") {
            Ok(Self::unix(path))
        } else {
            Err(EngineError::UnsupportedHost {
                host: host.to_owned(),
            })
        }
    }

    /// The engine the Docker CLI would use: `DOCKER_HOST` when set and not empty, else
    /// [`DEFAULT_SOCKET`]. Whether it runs is found out when it is asked.
    ///
    /// # Errors
    /// Those of [`DockerEngine::from_host`].
    pub fn from_env() -> Result<Self, EngineError> {
        match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.is_empty() => Self::from_host(&host),
            _ => Ok(Self::unix(DEFAULT_SOCKET)),
        }
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The engine's address as `DOCKER_HOST` writes it, for messages.
    pub fn address(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Sends `request` about `image`; `Ok(None)` when there is no engine to ask.
    async fn send(
        &self,
        image: &str,
        request: Request<Empty<Bytes>>,
    ) -> Result<Option<Response<Incoming>>, EngineError> {
        let label = format!("{} {}", request.method(), request.uri());
        let timeout = |_| EngineError::Timeout {
            engine: self.address(),
            image: image.to_owned(),
            request: label.clone(),
            timeout: ANSWER_TIMEOUT,
        };
        let failed = |source: BoxError| EngineError::Request {
            engine: self.address(),
            image: image.to_owned(),
            request: label.clone(),
            source,
        };
        let stream = match tokio::time::timeout(
            ANSWER_TIMEOUT,
            tokio::net::UnixStream::connect(&self.socket),
        )
        .await
        .map_err(timeout)?
        {
            Ok(stream) => stream,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(failed(Box::new(e))),
        };
        let answer = async {
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            // Ends when the answer's body is read or dropped.
            tokio::spawn(connection);
            sender.send_request(request).await
        };
        let response = tokio::time::timeout(ANSWER_TIMEOUT, answer)
            .await
            .map_err(timeout)?
            .map_err(|e| failed(Box::new(e)))?;
        Ok(Some(response))
    }

    /// The engine's error for a response that is not a success.
    async fn status_error(
        &self,
        image: &str,
        request: &str,
        response: Response<Incoming>,
    ) -> EngineError {
        let status = response.status().as_u16();
        let body = read_json(response).await.unwrap_or_default();
        #[derive(Deserialize)]
        struct Message {
            message: String,
        }
        let message = serde_json::from_slice::<Message>(&body)
            .map(|m| m.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).trim().to_owned());
        EngineError::Status {
            engine: self.address(),
            image: image.to_owned(),
            request: request.to_owned(),
            status,
            message,
        }
    }

    /// The engine's inspection of `image`; `None` when there is no engine or it does not
    /// have the image.
    async fn inspect(&self, image: &str) -> Result<Option<Inspection>, EngineError> {
        let path = format!("/images/{image}/json");
        let Some(response) = self.send(image, get(&path)).await? else {
            return Ok(None);
        };
        let request = format!("GET {path}");
        match response.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok(None),
            _ => return Err(self.status_error(image, &request, response).await),
        }
        let unreadable = |source: BoxError| EngineError::Inspection {
            engine: self.address(),
            image: image.to_owned(),
            source,
        };
        let body = read_json(response).await.map_err(unreadable)?;
        let inspection: Inspection =
            serde_json::from_slice(&body).map_err(|e| unreadable(Box::new(e)))?;
        if digest::sha256_hex(&inspection.id).is_none() {
            return Err(unreadable(
                format!("image id {:?} is not sha256:<64 hex digits>", inspection.id).into(),
            ));
        }
        Ok(Some(inspection))
    }

    /// Streams the `docker save` archive of `image` into `path`.
    async fn export(&self, image: &str, path: &Path) -> Result<(), EngineError> {
        let uri = format!("/images/{image}/get");
        let request = format!("GET {uri}");
        let response = self.send(image, get(&uri)).await?.ok_or_else(|| {
            // The engine answered the inspection a moment ago.
            EngineError::Request {
                engine: self.address(),
                image: image.to_owned(),
                request: request.clone(),
                source: "the engine went away after it inspected the image".into(),
            }
        })?;
        if response.status() != StatusCode::OK {
            return Err(self.status_error(image, &request, response).await);
        }
        let write_error = |source| EngineError::Write {
            engine: self.address(),
            image: image.to_owned(),
            path: path.to_owned(),
            source,
        };
        let mut file = tokio::fs::File::create(path).await.map_err(write_error)?;
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| EngineError::Request {
                engine: self.address(),
                image: image.to_owned(),
                request: request.clone(),
                source: Box::new(e),
            })?;
            if let Ok(data) = frame.into_data() {
                file.write_all(&data).await.map_err(write_error)?;
            }
        }
        file.flush().await.map_err(write_error)?;
        Ok(())
    }
}

/// The whole body of a JSON answer: at most [`MAX_JSON`] bytes, within [`ANSWER_TIMEOUT`].
async fn read_json(response: Response<Incoming>) -> Result<Bytes, BoxError> {
    let body = Limited::new(response.into_body(), MAX_JSON).collect();
    match tokio::time::timeout(ANSWER_TIMEOUT, body).await {
        Ok(collected) => Ok(collected?.to_bytes()),
        Err(_) => Err(format!("no whole answer within {ANSWER_TIMEOUT:?}").into()),
    }
}

/// A GET request to the engine.
fn get(path: &str) -> Request<Empty<Bytes>> {
    Request::get(path)
        .header(hyper::header::HOST, "docker")
        .body(Empty::new())
        .expect("a path of reference characters is a valid uri")
}

/// Whether a connection error means there is no engine to ask.
fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::PermissionDenied
    )
}

/// Whether `reference` is made only of what an image reference may hold (so it goes into
/// a request's path as it is).
fn is_reference(reference: &str) -> bool {
    !reference.is_empty()
        && !reference.starts_with(['/', '.', '-'])
        && !reference.contains("..")
        && reference
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c))
}

/// What the engine's image inspection says that is read here.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspection {
    /// The image id, `sha256:…`: the config digest (the digest of the manifest or index
    /// with the containerd image store).
    id: String,
    /// What it runs.
    #[serde(default)]
    config: Option<InspectedConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectedConfig {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

impl InspectedConfig {
    fn image_config(self) -> ImageConfig {
        ImageConfig {
            entrypoint: self.entrypoint.unwrap_or_default(),
            cmd: self.cmd.unwrap_or_default(),
            env: self.env.unwrap_or_default(),
            working_dir: self.working_dir.filter(|d| !d.is_empty()),
            user: self.user.filter(|u| !u.is_empty()),
        }
    }
}

impl ImageStore {
    /// The image `reference` from the Docker engine `engine`, exported and unpacked into
    /// the cache unless an earlier export of the same image id is there; `None` when there
    /// is no engine at that address or it does not have the image.
    ///
    /// # Errors
    /// [`EngineError::Reference`] for a reference with characters no image name has,
    /// [`EngineError::Status`] when the engine answers with an error, and the other
    /// [`EngineError`]s when its answer cannot be read, written, or unpacked.
    pub async fn engine_image(
        &self,
        engine: &DockerEngine,
        reference: &str,
    ) -> Result<Option<Image>, EngineError> {
        if !is_reference(reference) {
            return Err(EngineError::Reference {
                reference: reference.to_owned(),
            });
        }
        let Some(inspection) = engine.inspect(reference).await? else {
            return Ok(None);
        };
        let id_hex = digest::sha256_hex(&inspection.id)
            .expect("checked by inspect")
            .to_owned();
        let config = inspection.config.unwrap_or_default().image_config();
        let records = self.cache_dir().join("engine");
        let record = records.join(&id_hex);
        if let Some(image) = self.recorded(&record, &config) {
            return Ok(Some(image));
        }

        let write_error = |path: &Path| {
            let path = path.to_owned();
            |source| EngineError::Write {
                engine: engine.address(),
                image: reference.to_owned(),
                path,
                source,
            }
        };
        // One export of an image at a time, across threads and processes: whoever waited
        // finds the record the first one wrote.
        std::fs::create_dir_all(&records).map_err(write_error(&records))?;
        let lock_path = records.join(format!("{id_hex}.lock"));
        let locked = lock_path.clone();
        let _lock = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::create(&locked)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .unwrap_or_else(|join| Err(io::Error::other(join)))
        .map_err(write_error(&lock_path))?;
        if let Some(image) = self.recorded(&record, &config) {
            return Ok(Some(image));
        }
        let downloads = self.cache_dir().join("downloads");
        std::fs::create_dir_all(&downloads).map_err(write_error(&downloads))?;
        let dir = tempfile::Builder::new()
            .prefix(".engine-")
            .tempdir_in(&downloads)
            .map_err(write_error(&downloads))?;
        let archive = dir.path().join("image.tar");
        engine.export(reference, &archive).await?;

        let store = self.clone();
        let unpacked = tokio::task::spawn_blocking(move || {
            // The export holds the one image asked for, whatever names it carries.
            let unpacked = store.unpack(&Source::Archive(archive), None);
            drop(dir);
            unpacked
        })
        .await;
        let image = match unpacked {
            Ok(Ok(image)) => image,
            Ok(Err(e)) => {
                return Err(EngineError::Unpack {
                    engine: engine.address(),
                    image: reference.to_owned(),
                    source: Box::new(e),
                });
            }
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => {
                return Err(EngineError::Cancelled {
                    engine: engine.address(),
                    image: reference.to_owned(),
                });
            }
        };
        self.record(&record, &image.digest)
            .map_err(write_error(&record))?;
        Ok(Some(image))
    }

    /// The image an earlier export of this image id unpacked, when its root filesystem
    /// is still in the cache.
    fn recorded(&self, record: &Path, config: &ImageConfig) -> Option<Image> {
        let digest = std::fs::read_to_string(record).ok()?;
        let digest = digest.trim();
        let rootfs = self.rootfs_dir(digest::sha256_hex(digest)?);
        rootfs.is_dir().then(|| Image {
            digest: digest.to_owned(),
            rootfs,
            config: config.clone(),
        })
    }

    /// Records that this image id unpacked to the config digest `digest` (atomically).
    fn record(&self, record: &Path, digest: &str) -> io::Result<()> {
        let dir = record
            .parent()
            .expect("a record is in the engine directory");
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        io::Write::write_all(&mut file, digest.as_bytes())?;
        file.persist(record).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_docker_host_is_a_unix_socket_or_refused_naming_it() {
        assert_eq!(
            DockerEngine::from_host("unix:///run/user/1000/docker.sock").unwrap(),
            DockerEngine::unix("/run/user/1000/docker.sock")
        );
        assert_eq!(
            DockerEngine::from_host("/var/run/docker.sock").unwrap(),
            DockerEngine::unix("/var/run/docker.sock")
        );
        for host in [
            "tcp://127.0.0.1:2375",
            "ssh://me@host",
            "npipe:////./pipe/docker_engine",
            "unix://relative.sock",
        ] {
            let err = DockerEngine::from_host(host).unwrap_err();
            assert!(matches!(err, EngineError::UnsupportedHost { .. }), "{err}");
            assert!(err.to_string().contains(&format!("{host:?}")), "{err}");
        }
        assert_eq!(
            DockerEngine::unix("/var/run/docker.sock").address(),
            "unix:///var/run/docker.sock"
        );
    }

    #[test]
    fn only_reference_characters_go_into_a_request_path() {
        for good in [
            "busybox",
            "127.0.0.1:5000/tools/busybox:1.35",
            "busybox@sha256:0123abcd",
            "example.org/op_x-y:dev",
        ] {
            assert!(is_reference(good), "{good}");
        }
        for bad in [
            "",
            "a b",
            "x?y=1",
            "../../containers/json",
            "/x",
            "a#b",
            "é",
        ] {
            assert!(!is_reference(bad), "{bad}");
        }
    }
}
