//! Container probes (startup, readiness, liveness) on the kubelet's schedule of initial
//! delay, period, timeout and success/failure thresholds: `httpGet` with a minimal HTTP/1.1
//! client, `tcpSocket`, `grpc` (the health service's `Check`, see [`grpc`]) and `exec`
//! (through the container's runtime, the command killed at the timeout, see [`exec`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The User-Agent of the kubelet's HTTP probes: `kube-probe/MAJOR.MINOR` of the kubelet
/// the node reports (`node::KUBELET_VERSION`).
const HTTP_USER_AGENT: &str = "kube-probe/1.34";

pub mod exec;
pub mod grpc;

pub use exec::{ExecError, ExecProcess};
pub use grpc::GrpcError;

/// Why one probe attempt failed (the message lands in the container's events and logs).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The port is a name no container port has.
    #[error("port {0:?} is not a named port of the container")]
    NoSuchPort(String),
    /// The port number is out of range.
    #[error("port {0} is out of range")]
    BadPort(i32),
    /// The host is not an IPv4 address.
    #[error("host {0:?} is not an ipv4 address")]
    BadHost(String),
    /// No connection could be made.
    #[error("dial tcp {addr}: connect failed")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing the connection failed.
    #[error("get http://{addr}{path}: i/o failed")]
    Io {
        /// Where.
        addr: SocketAddr,
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No answer within timeoutSeconds.
    #[error(
        "get http://{addr}{path}: context deadline exceeded (client timeout exceeded while awaiting headers)"
    )]
    Timeout {
        /// Where.
        addr: SocketAddr,
        /// The path.
        path: String,
    },
    /// The answer was not HTTP.
    #[error("get http://{addr}{path}: malformed http response")]
    Malformed {
        /// Where.
        addr: SocketAddr,
        /// The path.
        path: String,
    },
    /// An HTTP status outside 200–399.
    #[error("http probe failed with statuscode: {0}")]
    Status(u16),
    /// An exec probe failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A gRPC probe failed.
    #[error(transparent)]
    Grpc(#[from] GrpcError),
}

/// Starts an exec probe's command in its container (the runtime's `exec` for a
/// container, the command itself in the pod's directory for a host process) with its
/// output piped; `None` while nothing of the container runs.
pub type Exec = Arc<dyn Fn(&[String]) -> Option<std::io::Result<ExecProcess>> + Send + Sync>;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// startupProbe: gates the others; failure restarts the container.
    Startup,
    /// readinessProbe: decides the container's `ready`.
    Readiness,
    /// livenessProbe: failure restarts the container.
    Liveness,
}

/// A change of a probe's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Which probe.
    pub kind: Kind,
    /// Whether it now passes.
    pub success: bool,
    /// The last failure's message.
    pub message: String,
}

/// Where probes connect: the pod's IP (unless the probe names a host) from the node's IP.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The pod IP.
    pub pod_ip: Ipv4Addr,
    /// The source address (the node).
    pub node_ip: Ipv4Addr,
}

fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, ProbeError> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| ProbeError::NoSuchPort(name.clone()))?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|n| *n > 0)
        .ok_or(ProbeError::BadPort(number))
}

async fn connect(target: Target, addr: SocketAddr) -> Result<TcpStream, ProbeError> {
    // Into the pod's network namespace when it has one (see `pod_network`); else from the
    // node's address, as the real kubelet probes from the host network, falling back to
    // any source if that address cannot be bound.
    let (socket, inside) =
        pod_network::socket_for(addr).map_err(|source| ProbeError::Connect { addr, source })?;
    if !inside {
        let _ = socket.bind(SocketAddr::new(IpAddr::V4(target.node_ip), 0));
    }
    socket
        .connect(addr)
        .await
        .map_err(|source| ProbeError::Connect { addr, source })
}

/// An exec probe's command, its `$(VAR)` references expanded from the container's
/// static environment only (a variable set from elsewhere is empty), as the kubelet's
/// `ExpandContainerCommandOnlyStatic` expands them.
fn exec_command(command: &[String], container: &Container) -> Vec<String> {
    let declared = |name: &str| {
        container
            .env
            .iter()
            .flatten()
            .rev()
            .find(|e| e.name == name)
            .map(|e| e.value.clone().unwrap_or_default())
    };
    command
        .iter()
        .map(|word| crate::env::expand(word, declared))
        .collect()
}

/// Runs one attempt of `probe` against `target` within its timeout, an exec probe
/// through `exec`.
///
/// # Errors
/// Whatever makes the attempt fail.
pub async fn attempt(
    probe: &Probe,
    container: &Container,
    target: Target,
    exec: Option<&Exec>,
) -> Result<(), ProbeError> {
    let timeout = seconds(probe.timeout_seconds, 1, 1);
    if let Some(action) = &probe.exec {
        let command = exec_command(action.command.as_deref().unwrap_or_default(), container);
        let start_error =
            |kind, what| ProbeError::Exec(ExecError::Start(std::io::Error::new(kind, what)));
        let exec = exec
            .ok_or_else(|| start_error(std::io::ErrorKind::Unsupported, "no runtime to exec in"))?;
        let not_running =
            || start_error(std::io::ErrorKind::NotFound, "the container is not running");
        if command.is_empty() {
            return Err(not_running());
        }
        let process = exec(&command)
            .ok_or_else(not_running)?
            .map_err(|e| ProbeError::Exec(ExecError::Start(e)))?;
        return Ok(exec::run(process, &command, timeout).await?);
    }
    if let Some(grpc) = &probe.grpc {
        let port = u16::try_from(grpc.port)
            .ok()
            .filter(|n| *n > 0)
            .ok_or(ProbeError::BadPort(grpc.port))?;
        let addr = SocketAddr::new(IpAddr::V4(target.pod_ip), port);
        let service = grpc.service.as_deref().unwrap_or_default();
        return Ok(grpc::probe(target, addr, service, timeout).await?);
    }
    match tokio::time::timeout(timeout, attempt_network(probe, container, target)).await {
        Ok(r) => r,
        Err(_) => Err(timeout_error(probe, target)),
    }
}

/// The address a probe's `host` names, the pod's IP when it names none.
fn host_or_pod(host: Option<&str>, target: Target) -> Result<Ipv4Addr, ProbeError> {
    match host.filter(|h| !h.is_empty()) {
        Some(h) => h
            .parse::<Ipv4Addr>()
            .map_err(|_| ProbeError::BadHost(h.to_string())),
        None => Ok(target.pod_ip),
    }
}

/// One attempt of an `httpGet` or `tcpSocket` probe (no timeout: the caller adds it).
async fn attempt_network(
    probe: &Probe,
    container: &Container,
    target: Target,
) -> Result<(), ProbeError> {
    if let Some(http) = &probe.http_get {
        let port = resolve_port(&http.port, container)?;
        let host = host_or_pod(http.host.as_deref(), target)?;
        let addr = SocketAddr::new(IpAddr::V4(host), port);
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let path = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: {HTTP_USER_AGENT}\r\nAccept: */*\r\nConnection: close\r\n"
        );
        for h in http.http_headers.iter().flatten() {
            request.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        request.push_str("\r\n");
        let mut stream = connect(target, addr).await?;
        let io = |source| ProbeError::Io {
            addr,
            path: path.clone(),
            source,
        };
        stream.write_all(request.as_bytes()).await.map_err(io)?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 8192 {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|source| ProbeError::Io {
                    addr,
                    path: path.clone(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&head);
        let code = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok())
            .filter(|_| line.starts_with("HTTP/"))
            .ok_or(ProbeError::Malformed { addr, path })?;
        return if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(ProbeError::Status(code))
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = resolve_port(&tcp.port, container)?;
        let host = host_or_pod(tcp.host.as_deref(), target)?;
        connect(target, SocketAddr::new(IpAddr::V4(host), port)).await?;
        return Ok(());
    }
    Ok(())
}

fn timeout_error(probe: &Probe, target: Target) -> ProbeError {
    let (port, path) = match &probe.http_get {
        Some(h) => (
            match &h.port {
                IntOrString::Int(n) => u16::try_from(*n).unwrap_or_default(),
                IntOrString::String(_) => 0,
            },
            h.path.clone().unwrap_or_else(|| "/".into()),
        ),
        None => (0, String::new()),
    };
    ProbeError::Timeout {
        addr: SocketAddr::new(IpAddr::V4(target.pod_ip), port),
        path,
    }
}

fn seconds(v: Option<i32>, default: i32, min: i32) -> Duration {
    Duration::from_secs(v.unwrap_or(default).max(min) as u64)
}

/// Probes until the receiver goes away, sending a [`Verdict`] whenever the verdict
/// changes (a probe starts as failing for readiness and startup, passing for liveness).
/// Waits for `gate` before each attempt (a held node probes nothing). Exec probes run
/// through `exec`.
pub async fn run(
    kind: Kind,
    probe: Probe,
    container: Container,
    target: Target,
    exec: Option<Exec>,
    verdicts: mpsc::UnboundedSender<Verdict>,
    gate: impl Fn() -> futures::future::BoxFuture<'static, ()>,
) {
    let initial = seconds(probe.initial_delay_seconds, 0, 0);
    let period = seconds(probe.period_seconds, 10, 1);
    let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
    let success_threshold = match kind {
        Kind::Readiness => probe.success_threshold.unwrap_or(1).max(1),
        _ => 1,
    };
    let mut passing = kind == Kind::Liveness;
    let (mut successes, mut failures) = (0, 0);
    tokio::time::sleep(initial).await;
    loop {
        gate().await;
        match attempt(&probe, &container, target, exec.as_ref()).await {
            Ok(()) => {
                successes += 1;
                failures = 0;
                if !passing && successes >= success_threshold {
                    passing = true;
                    let v = Verdict {
                        kind,
                        success: true,
                        message: String::new(),
                    };
                    if verdicts.send(v).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                failures += 1;
                successes = 0;
                if (passing || kind != Kind::Readiness) && failures >= failure_threshold {
                    passing = false;
                    failures = 0;
                    let v = Verdict {
                        kind,
                        success: false,
                        message: e.to_string(),
                    };
                    if verdicts.send(v).is_err() {
                        return;
                    }
                }
            }
        }
        if kind == Kind::Startup && passing {
            return;
        }
        if verdicts.is_closed() {
            return;
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_probes_user_agents_name_the_kubelet_version_the_node_reports() {
        let minor = crate::node::KUBELET_VERSION
            .trim_start_matches('v')
            .rsplit_once('.')
            .map(|(minor, _)| minor)
            .unwrap();
        let agent = format!("kube-probe/{minor}");
        assert!(grpc::USER_AGENT.starts_with(&format!("{agent} ")));
        assert_eq!(HTTP_USER_AGENT, agent);
    }
    use tokio::net::TcpListener;

    async fn server(status: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        addr
    }

    fn container() -> Container {
        serde_json::from_value(
            json!({"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}),
        )
        .unwrap()
    }

    fn http_probe(port: serde_json::Value) -> Probe {
        serde_json::from_value(json!({"httpGet": {"path": "/healthz", "port": port}})).unwrap()
    }

    #[tokio::test]
    async fn http_probes_pass_on_2xx_and_3xx_and_fail_otherwise() {
        let target = Target {
            pod_ip: Ipv4Addr::LOCALHOST,
            node_ip: Ipv4Addr::LOCALHOST,
        };
        for (status, ok) in [("200 OK", true), ("302 Found", true), ("500 Oops", false)] {
            let addr = server(status).await;
            let r = attempt(&http_probe(json!(addr.port())), &container(), target, None).await;
            assert_eq!(r.is_ok(), ok, "{status}: {r:?}");
        }
    }

    /// Runs the probe's command on the host, as a pod that is host processes does.
    fn on_the_host() -> Exec {
        Arc::new(|command: &[String]| {
            let (first, rest) = command.split_first()?;
            let mut process =
                exec::probe_process(first.into(), rest.to_vec(), std::env::temp_dir());
            Some(process.spawn().map(ExecProcess::on_the_host))
        })
    }

    fn exec_probe(command: serde_json::Value) -> Probe {
        serde_json::from_value(json!({"exec": {"command": command}})).unwrap()
    }

    #[tokio::test]
    async fn exec_probes_pass_on_exit_0_and_fail_with_what_the_command_wrote() {
        let target = Target {
            pod_ip: Ipv4Addr::LOCALHOST,
            node_ip: Ipv4Addr::LOCALHOST,
        };
        let exec = on_the_host();
        let passing = exec_probe(json!(["sh", "-c", "exit 0"]));
        assert!(
            attempt(&passing, &container(), target, Some(&exec))
                .await
                .is_ok()
        );
        let failing = exec_probe(json!(["sh", "-c", "echo not yet; echo oops >&2; exit 3"]));
        let err = attempt(&failing, &container(), target, Some(&exec))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &err,
                ProbeError::Exec(ExecError::Exited { code: Some(3), .. })
            ),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "not yet\noops\n");
        let nothing_runs: Exec = Arc::new(|_: &[String]| None);
        let err = attempt(&passing, &container(), target, Some(&nothing_runs))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProbeError::Exec(ExecError::Start(_))),
            "{err:?}"
        );
    }

    #[test]
    fn an_exec_probes_command_expands_only_the_containers_static_variables() {
        let container: Container = serde_json::from_value(json!({"name": "c", "env": [
            {"name": "FILE", "value": "/data/ready"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        ]}))
        .unwrap();
        let command: Vec<String> = ["test", "-f", "$(FILE)", "$(POD)", "$(OTHER)", "$$(FILE)"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            exec_command(&command, &container),
            ["test", "-f", "/data/ready", "", "$(OTHER)", "$(FILE)"]
        );
    }

    /// Whether process `pid` has ended (gone, or a zombie left to be reaped).
    fn ended(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
    }

    #[tokio::test]
    async fn an_exec_probe_that_times_out_says_so_as_the_runtime_does_and_leaves_nothing_running() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // The command leaves a process of its own behind it: the whole group goes.
        let script = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
        let probe: Probe = serde_json::from_value(
            json!({"exec": {"command": ["sh", "-c", script]}, "timeoutSeconds": 1}),
        )
        .unwrap();
        let target = Target {
            pod_ip: Ipv4Addr::LOCALHOST,
            node_ip: Ipv4Addr::LOCALHOST,
        };
        let started = tokio::time::Instant::now();
        let err = attempt(&probe, &container(), target, Some(&on_the_host()))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("command timed out: \"sh -c {script}\" timed out after 1s")
        );
        assert!(started.elapsed() >= Duration::from_secs(1));
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        sim_test_support::eventually("the probe's background sleep ends", || async {
            ended(pid.trim()).then_some(())
        })
        .await;
    }

    #[test]
    fn named_ports_resolve_through_the_container_ports() {
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &container()).unwrap(),
            8080
        );
        assert!(resolve_port(&IntOrString::String("nope".into()), &container()).is_err());
        assert_eq!(
            resolve_port(&IntOrString::Int(81), &container()).unwrap(),
            81
        );
    }
}
