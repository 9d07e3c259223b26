//! Shared helpers of the integration tests: a running simulated API server and raw requests.

#![allow(dead_code)]

use std::time::Duration;

use http_body_util::BodyExt as _;
use kube::Client;
use opconform::sim::apiserver::{ApiServer, ApiServerConfig};
use serde_json::Value;

/// How long any wait in these tests may take before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// A started server and an admin client.
pub async fn server() -> (ApiServer, Client) {
    server_with(ApiServerConfig::default()).await
}

/// A started server with a config and an admin client.
pub async fn server_with(config: ApiServerConfig) -> (ApiServer, Client) {
    let server = ApiServer::start(config).await.expect("server starts");
    let client = server.admin_client().await.expect("admin client");
    (server, client)
}

/// The status code and message of a kube API error.
pub fn api_error(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Sends a raw request and returns the status code and the body as text.
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body))
        .expect("request");
    let response = client.send(request).await.expect("response");
    let code = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

/// Parses a body as JSON.
pub fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not json ({e}): {body}"))
}

/// Polls `check` until it returns `Some`, failing after [`WAIT`] with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {WAIT:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops a child process the way a user would, with SIGTERM, so that it can clean up
/// (an `opconform sim` shuts its cluster down and removes its work directory); SIGKILL only
/// when it is still running after 10 s.
pub fn stop_child(child: &mut std::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
