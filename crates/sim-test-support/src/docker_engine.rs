//! A stand-in Docker engine for tests: the few Engine API endpoints an image is found and
//! exported with, served over HTTP/1.1 on a unix socket in a temporary directory, answering
//! as the real engine answers (`GET /images/{name}/json` with the image's inspection or a
//! 404 `{"message":"No such image: {name}"}`, `GET /images/{name}/get` with a `docker save`
//! archive as `application/x-tar`).
//!
//! The images it holds are given whole: the names it answers to, its id, its config and the
//! archive it exports ([`StandInEngine::add`]). The real engine's normalisation of names
//! (`busybox` = `busybox:latest` = `docker.io/library/busybox:latest`) is not imitated: a
//! test lists every name it asks for. [`StandInEngine::fail_with`] makes every request
//! fail as an engine in trouble does. It stops (its task aborted, its socket's directory
//! deleted) when dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// One image of the stand-in.
struct Held {
    inspection: Value,
    archive: Bytes,
}

#[derive(Default)]
struct State {
    images: Mutex<HashMap<String, Arc<Held>>>,
    failure: Mutex<Option<(StatusCode, String)>>,
    exports: AtomicUsize,
}

/// A stand-in engine listening on `socket`.
pub struct StandInEngine {
    socket: PathBuf,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for StandInEngine {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandInEngine {
    /// Starts an engine holding no image (on the current tokio runtime).
    ///
    /// # Panics
    /// When its socket cannot be bound.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let socket = dir.path().join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&socket).expect("the socket is bound");
        let state = Arc::new(State::default());
        let served = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = served.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(&state, request)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            socket,
            state,
            task,
            _dir: dir,
        }
    }

    /// The engine's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Holds an image answering to `names`, with the image id `id` (`sha256:…`), the
    /// container config `config` (`{"Cmd": […], "Env": […], …}`) and the `docker save`
    /// archive `archive`.
    pub fn add(&self, names: &[&str], id: &str, config: Value, archive: Vec<u8>) {
        let held = Arc::new(Held {
            inspection: json!({
                "Id": id,
                "RepoTags": names,
                "RepoDigests": [],
                "Parent": "",
                "Comment": "",
                "Created": "2024-01-01T00:00:00Z",
                "Config": config,
                "Os": "linux",
                "Size": archive.len(),
                "RootFS": {"Type": "layers", "Layers": []},
            }),
            archive: Bytes::from(archive),
        });
        let mut images = self.state.images.lock().expect("not poisoned");
        for name in names {
            images.insert((*name).to_owned(), held.clone());
        }
    }

    /// Makes every request answer `status` with `{"message": message}`.
    pub fn fail_with(&self, status: u16, message: &str) {
        let status = StatusCode::from_u16(status).expect("an HTTP status");
        *self.state.failure.lock().expect("not poisoned") = Some((status, message.to_owned()));
    }

    /// How many images it has exported.
    pub fn exports(&self) -> usize {
        self.state.exports.load(Ordering::SeqCst)
    }
}

/// The engine's JSON error.
fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            json!({ "message": message }).to_string(),
        )))
        .expect("a response")
}

fn answer(state: &State, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some((status, message)) = state.failure.lock().expect("not poisoned").clone() {
        return error(status, &message);
    }
    let path = request.uri().path();
    let route = path.strip_prefix("/images/").and_then(|rest| {
        rest.strip_suffix("/json")
            .map(|name| (name, false))
            .or_else(|| rest.strip_suffix("/get").map(|name| (name, true)))
    });
    let Some((name, export)) = route.filter(|_| request.method() == hyper::Method::GET) else {
        return error(StatusCode::NOT_FOUND, "page not found");
    };
    let Some(held) = state
        .images
        .lock()
        .expect("not poisoned")
        .get(name)
        .cloned()
    else {
        return error(StatusCode::NOT_FOUND, &format!("No such image: {name}"));
    };
    let (content_type, body) = if export {
        state.exports.fetch_add(1, Ordering::SeqCst);
        ("application/x-tar", held.archive.clone())
    } else {
        ("application/json", Bytes::from(held.inspection.to_string()))
    };
    Response::builder()
        .header("content-type", content_type)
        .body(Full::new(body))
        .expect("a response")
}
