//! The operator's test bench: an embedded API server with the shipped CRD and RBAC, operator
//! candidates run in-process as the operator's ServiceAccount, their /metrics, and the
//! captured operator log.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use clap::Parser as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use memcached_operator::cli::Args;
use memcached_operator::controller::error_chain;
use memcached_operator::run::{self, Env};
use memcached_operator::shutdown::{self, ShutdownTrigger};
use opconform::deploy::{Namespacing, apply_all, read_manifests};
use opconform::sim::apiserver::ApiServer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinHandle;

use crate::support::{self, WAIT};

/// The operator's namespace, as `operator/config/rbac` names it.
pub const NS: &str = "memcached-operator-system";
/// The operator's ServiceAccount.
pub const SA: &str = "memcached-operator";
/// The user the API server sees for that ServiceAccount.
pub const SA_USER: &str = "system:serviceaccount:memcached-operator-system:memcached-operator";
/// The lock name (`--leader-election-id` default): the Lease or the for-life ConfigMap.
pub const LOCK: &str = "memcached-operator-lock";
/// Short lease timings (LeaseDuration 4s > RenewDeadline 3s > 1.2 × RetryPeriod 1s).
pub const SHORT_LEASE: &[&str] = &[
    "--leader-election",
    "lease",
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "1s",
];

/// `operator/config/<dir>` of the workspace.
pub fn config_dir(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("operator/config")
        .join(dir)
}

// ---------------------------------------------------------------------------------------
// The captured log

/// Every line the operators of this test binary logged (tracing, text format).
///
/// One process-wide subscriber: tests run in parallel, so a test looks only for lines it
/// alone can cause (each test has its own API server).
fn log_buffer() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_ansi(false)
            .with_writer(move || LogWriter(sink.clone()))
            .try_init();
        buf
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines captured so far that contain `needle`.
pub fn log_lines_containing(needle: &str) -> Vec<String> {
    let buf = log_buffer().lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(&buf)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------
// The cluster

/// An API server with the operator's namespace, CRD and RBAC applied, and an admin client
/// for the test's own reads and writes (the operator never uses it).
pub struct Bench {
    pub server: ApiServer,
    pub admin: Client,
}

impl Bench {
    /// Starts the API server, creates `memcached-operator-system`, applies
    /// `operator/config/crd` and `operator/config/rbac` as shipped.
    pub async fn start() -> Self {
        log_buffer();
        let (server, admin) = support::server().await;
        create_namespace(&admin, NS).await;
        let crd = read_manifests(&config_dir("crd")).expect("operator/config/crd reads");
        apply_all(&admin, &crd, Namespacing::Default(NS))
            .await
            .expect("the CRD applies");
        let rbac = read_manifests(&config_dir("rbac")).expect("operator/config/rbac reads");
        apply_all(&admin, &rbac, Namespacing::Into(NS))
            .await
            .expect("the RBAC applies");
        Self { server, admin }
    }

    /// A client authenticated as the operator's ServiceAccount (what every candidate uses).
    pub async fn operator_client(&self) -> Client {
        self.server
            .service_account_client(NS, SA)
            .await
            .expect("service account client")
    }

    /// Runs the operator in-process as `name` (its POD_NAME), with `flags`, as the
    /// operator's ServiceAccount; returns once its /readyz answers.
    pub async fn candidate(&self, name: &str, flags: &[&str]) -> Candidate {
        let addr = free_local_addr();
        let addr_s = addr.to_string();
        // Metrics and probes on one address: one listener serves /metrics, /healthz, /readyz.
        let argv = [
            "memcached-operator",
            "--metrics-bind-address",
            &addr_s,
            "--health-probe-bind-address",
            &addr_s,
        ]
        .into_iter()
        .chain(flags.iter().copied());
        let args = Args::try_parse_from(argv).expect("flags parse");
        let env = Env {
            pod_name: Some(name.to_owned()),
            pod_namespace: Some(NS.to_owned()),
            service_account_namespace: None,
        };
        let plan = run::plan(&args, &env).expect("a valid plan");
        let client = self.operator_client().await;
        let (trigger, shutdown) = shutdown::channel();
        let task = tokio::spawn(async move { run::run(&args, plan, client, shutdown).await });
        let c = Candidate {
            name: name.to_owned(),
            addr,
            trigger,
            task: Some(task),
        };
        support::eventually(&format!("{name} serves /readyz on {addr}"), || async {
            matches!(http_get(addr, "/readyz").await, Some((200, _))).then_some(())
        })
        .await;
        c
    }

    /// Creates a Pod object for an operator replica (no kubelet runs it: the candidate runs
    /// in-process and only needs the object to exist, as leader-for-life GETs it).
    pub async fn operator_pod(&self, name: &str) -> Pod {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"app.kubernetes.io/name": "memcached-operator"},
            },
            "spec": {
                "serviceAccountName": SA,
                "containers": [{"name": "manager", "image": "memcached-operator:dev"}],
            },
        }))
        .expect("pod json");
        Api::<Pod>::namespaced(self.admin.clone(), NS)
            .create(&PostParams::default(), &pod)
            .await
            .expect("operator pod created")
    }

    /// The Lease, if it exists.
    pub async fn lease(&self) -> Option<Lease> {
        Api::<Lease>::namespaced(self.admin.clone(), NS)
            .get_opt(LOCK)
            .await
            .expect("get lease")
    }

    /// The leader-for-life lock ConfigMap, if it exists.
    pub async fn for_life_lock(&self) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.admin.clone(), NS)
            .get_opt(LOCK)
            .await
            .expect("get lock")
    }

    /// Events in `namespace` with `reason` about the object named `about`.
    pub async fn events(&self, namespace: &str, reason: &str, about: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.admin.clone(), namespace)
            .list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.involved_object.name.as_deref() == Some(about)
            })
            .collect()
    }

    /// Fails if any request of the operator's ServiceAccount was refused by RBAC: the shipped
    /// `operator/config/rbac` must be sufficient for everything the test made it do.
    pub fn assert_no_forbidden_requests(&self) {
        let refused: Vec<String> = self
            .server
            .state()
            .audit
            .events()
            .into_iter()
            .filter(|e| e.user == SA_USER && e.code == 403)
            .map(|e| format!("{} {}", e.verb, e.request_uri))
            .collect();
        let made = self
            .server
            .state()
            .audit
            .events()
            .iter()
            .filter(|e| e.user == SA_USER)
            .count();
        assert!(made > 0, "the operator made no requests as {SA_USER}");
        assert!(
            refused.is_empty(),
            "requests of {SA_USER} refused by RBAC: {refused:#?}"
        );
    }
}

/// Creates a namespace.
pub async fn create_namespace(admin: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// The holder named in a Lease ("" when unheld).
pub fn holder(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

/// A Lease's `leaseTransitions` (0 when unset).
pub fn transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// Candidates

/// One operator replica running in-process.
pub struct Candidate {
    /// Its POD_NAME (the lease identity is `<name>_<uuid>`).
    pub name: String,
    /// Where it serves /metrics, /healthz and /readyz.
    pub addr: SocketAddr,
    trigger: ShutdownTrigger,
    task: Option<JoinHandle<Result<(), run::Error>>>,
}

impl Candidate {
    /// Its `leader_election_master_status{name="memcached-operator-lock"}` (None when unreadable).
    pub async fn leader_gauge(&self) -> Option<u8> {
        metric(self.addr, LEADER_GAUGE).await.map(|v| v as u8)
    }

    /// Whether a lease holder identity is this candidate's (`<POD_NAME>_<uuid>`).
    pub fn is_identity(&self, identity: &str) -> bool {
        identity
            .strip_prefix(&self.name)
            .is_some_and(|rest| rest.starts_with('_'))
    }

    /// Whether `run` has returned.
    pub fn has_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits (at most [`WAIT`]) for `run` to return on its own, and returns its result.
    pub async fn exited(&mut self) -> Result<(), run::Error> {
        let task = self.task.take().expect("the candidate is running");
        match tokio::time::timeout(WAIT, task).await {
            Ok(joined) => joined.expect("the operator task does not panic"),
            Err(_) => panic!("{} did not stop within {WAIT:?}", self.name),
        }
    }

    /// Sends the shutdown signal (what SIGTERM does) and waits for `run` to return.
    pub async fn stop(mut self) -> Result<(), run::Error> {
        self.trigger.trigger();
        self.exited().await
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.trigger.trigger();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The leadership gauge's series.
pub const LEADER_GAUGE: &str = r#"leader_election_master_status{name="memcached-operator-lock"}"#;

/// One sample of a series from `addr`'s /metrics.
pub async fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let (code, body) = http_get(addr, "/metrics").await?;
    if code != 200 {
        return None;
    }
    body.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// `GET path` over HTTP/1.0 (the server closes the connection after the response);
/// `None` when the endpoint cannot be reached.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

/// A 127.0.0.1 address with a port the kernel just handed out and that nothing holds.
///
/// # Caveats
/// The port is free when this returns, not reserved: another process could take it before
/// the operator binds it (unlikely; the operator then fails to start, loudly).
pub fn free_local_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
}

/// An error and its causes, as the operator logs them.
pub fn chain(e: &run::Error) -> String {
    error_chain(e)
}

// ---------------------------------------------------------------------------------------
// The built binary (for the measurement)

/// The built `memcached-operator` binary: `$MEMCACHED_OPERATOR_BIN`, else next to this
/// test's target directory (`cargo build -p memcached-operator [--release]` puts it there).
pub fn operator_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("MEMCACHED_OPERATOR_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/operator-<hash> → target/<profile>/memcached-operator
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    dir.join("memcached-operator")
}

/// Memory of a process in KiB, as /proc/<pid>/status reports it.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss: u64,
    /// `VmHWM`: the peak resident size.
    pub hwm: u64,
    /// `RssAnon`: resident anonymous memory (heap, stacks).
    pub anon: u64,
    /// `RssFile`: resident file-backed memory (mostly the binary's code).
    pub file: u64,
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VmRSS {} KiB (RssAnon {}, RssFile {}; VmHWM {})",
            self.rss, self.anon, self.file, self.hwm
        )
    }
}

/// A running operator process, killed (by its pid) when dropped.
pub struct Process {
    pub name: String,
    pub addr: SocketAddr,
    pub child: std::process::Child,
    dir: tempfile::TempDir,
}

impl Process {
    /// Starts the binary as replica `name` of the operator's ServiceAccount with `flags`.
    pub fn spawn(bench: &Bench, binary: &Path, name: &str, flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let token = bench
            .server
            .service_account_token(NS, SA)
            .expect("service account token");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::File::create(&kubeconfig)
            .and_then(|mut f| {
                f.write_all(
                    bench
                        .server
                        .kubeconfig_for(&bench.server.url(), SA_USER, &token)
                        .as_bytes(),
                )
            })
            .expect("kubeconfig written");
        let addr = free_local_addr();
        let log = std::fs::File::create(dir.path().join("stderr")).expect("log file");
        let child = std::process::Command::new(binary)
            .args([
                "--metrics-bind-address",
                &addr.to_string(),
                "--health-probe-bind-address",
                &addr.to_string(),
            ])
            .args(flags)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", NS)
            .env("POD_IP", "127.0.0.1")
            .env("RUST_LOG", "warn")
            .env_remove("WATCH_NAMESPACE")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        Self {
            name: name.to_owned(),
            addr,
            child,
            dir,
        }
    }

    /// The process's memory from /proc/<pid>/status.
    pub fn memory(&self) -> Memory {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/<pid>/status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} missing in /proc status"))
        };
        Memory {
            rss: field("VmRSS:"),
            hwm: field("VmHWM:"),
            anon: field("RssAnon:"),
            file: field("RssFile:"),
        }
    }

    /// The stderr the process wrote so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
