//! Shared helpers of the simulator's integration tests (and of the harness's tests that
//! use the simulated API server): a running simulated API server with an admin client, raw
//! requests, and waits. With the `controllers` feature, [`controllers`] adds the
//! controllers against that server and a fake kubelet; with `registry`, [`registry`] a real
//! registry on 127.0.0.1 and a pusher; with `docker-engine`, [`docker_engine`] a stand-in
//! Docker engine on a unix socket; with `grpc-health`, [`grpc_health`] a gRPC health
//! service for the kubelet's gRPC probes.

use std::time::Duration;

use http_body_util::BodyExt as _;
use kube::Client;
use serde_json::Value;
use sim_apiserver::{ApiServer, ApiServerConfig};

#[cfg(feature = "controllers")]
pub mod controllers;
#[cfg(feature = "docker-engine")]
pub mod docker_engine;
#[cfg(feature = "grpc-health")]
pub mod grpc_health;
#[cfg(feature = "registry")]
pub mod registry;

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

/// A busybox image directory made from the host's statically linked busybox (Debian's
/// `busybox-static`): `bin/busybox` and a link for each of its applets, under `dir/busybox`.
///
/// # Panics
/// When no statically linked busybox is on `PATH`, saying which package provides one.
pub fn busybox_image(dir: &std::path::Path) -> std::path::PathBuf {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
        .expect("a busybox on PATH (Debian: apt-get install busybox-static)");
    let listed = std::process::Command::new(&found)
        .arg("--list-full")
        .output()
        .expect("busybox --list-full runs");
    let elf = std::fs::read(&found).expect("busybox readable");
    assert!(
        !has_interpreter(&elf),
        "{} is dynamically linked: an image needs a static busybox (Debian: apt-get install busybox-static)",
        found.display()
    );
    let root = dir.join("busybox");
    for sub in ["bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "root"] {
        std::fs::create_dir_all(root.join(sub)).expect("image directory created");
    }
    // Anyone may write in /tmp, as in every image.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .expect("/tmp open to every user");
    }
    std::fs::copy(&found, root.join("bin/busybox")).expect("busybox copied");
    for applet in String::from_utf8_lossy(&listed.stdout).lines() {
        let link = root.join(applet.trim_start_matches('/'));
        if applet.trim().is_empty() || link == root.join("bin/busybox") {
            continue;
        }
        let _ = std::os::unix::fs::symlink("/bin/busybox", link);
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )
    .expect("passwd written");
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").expect("group written");
    root
}

/// Whether a 64-bit little-endian ELF file asks for a dynamic loader (a `PT_INTERP`
/// program header).
fn has_interpreter(elf: &[u8]) -> bool {
    let word = |at: usize, len: usize| -> usize {
        elf.get(at..at + len)
            .map(|b| b.iter().rev().fold(0usize, |n, x| (n << 8) | *x as usize))
            .unwrap_or(0)
    };
    let (offset, size, count) = (word(0x20, 8), word(0x36, 2), word(0x38, 2));
    (0..count).any(|i| word(offset + i * size, 4) == 3)
}

/// The host's processes whose command line is `words`, with whether each has ended (a
/// zombie not yet reaped).
pub fn processes_running(words: &[&str]) -> Vec<(u32, bool)> {
    let wanted: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .map(|pid| {
            let zombie =
                std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                    stat.rsplit_once(") ")
                        .is_some_and(|(_, rest)| rest.starts_with('Z'))
                });
            (pid, zombie)
        })
        .collect()
}

/// Waits until a process whose command line is `words` runs, then until every such process
/// has ended (a probe's command killed at its timeout, say).
pub async fn command_runs_then_ends(words: &[&str]) {
    eventually("the command runs", || async {
        processes_running(words)
            .iter()
            .any(|(_, ended)| !ended)
            .then_some(())
    })
    .await;
    eventually("the command has ended", || async {
        processes_running(words)
            .iter()
            .all(|(_, ended)| *ended)
            .then_some(())
    })
    .await;
}
