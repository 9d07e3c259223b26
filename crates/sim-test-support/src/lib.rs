//! Shared helpers of the simulator's integration tests (and of the harness's tests that
//! use the simulated API server): a running simulated API server with an admin client, raw
//! requests, and waits. With the `controllers` feature, [`controllers`] adds the
//! controllers against that server and a fake kubelet.

use std::time::Duration;

use http_body_util::BodyExt as _;
use kube::Client;
use serde_json::Value;
use sim_apiserver::{ApiServer, ApiServerConfig};

#[cfg(feature = "controllers")]
pub mod controllers;

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
