//! A real Kubernetes control plane as local processes: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler, each on free loopback ports, with a fresh
//! certificate authority, service-account signing key, static tokens for the admin and the
//! components, and the same audit policy as the kind clusters, written to a file.
//!
//! kube-apiserver reaches the kubelets (logs, exec, port-forward) as kubeadm sets it up: with
//! a client certificate of the cluster CA ([`KUBELET_CLIENT_USER`], bound to
//! `system:kubelet-api-admin`), verifying the kubelets' serving certificates against the
//! cluster CA, which signs them ([`ControlPlane::upstream`] gives kubelets the CA to sign
//! with).
//!
//! # Guarantees
//! Every process runs in a watched process group ([`crate::sim::kubelet::process`]): when
//! the process that started it dies — panic, SIGINT, even SIGKILL — its watchdog kills the
//! group, so no etcd or kube-apiserver outlives the harness. [`ControlPlane::shutdown`]
//! and dropping a [`ControlPlane`] stop them at once and remove the working directory.
//!
//! # Caveats
//! Ports are found free by binding and releasing them, as envtest does; another process
//! may take one in between. A component that then fails to bind is started again on new
//! ports (a bounded number of times), and any other early exit is reported with the tail
//! of its log.
//!
//! kube-apiserver's node proxy (`/api/v1/nodes/NAME/proxy/…`) refuses the kubelets'
//! loopback addresses ("address not allowed"); logs, exec, attach and port-forward, which
//! reach them directly, are not affected.
//!
//! Without kube-controller-manager (setup-envtest installs none), the simulator's
//! controllers run in its place against the real API server, and the simulator's
//! scheduler in kube-scheduler's when that is missing too ([`ControlPlane::controllers`]
//! says which ran). They act as the same users, with the rights of every controller.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use super::binaries::Binaries;
use crate::sim::kubelet::logs::ContainerLog;
use crate::sim::kubelet::process::{Instance, Spec};

/// The audit policy of every real control plane the harness starts (kind's too).
pub const AUDIT_POLICY: &str = include_str!("../../../../../ci/kind/audit-policy.yaml");

/// The user the harness acts as (in `system:masters`).
pub const ADMIN_USER: &str = "opconform-admin";

/// The user kube-apiserver is to the kubelets (its `--kubelet-client-certificate`'s CN),
/// bound to `system:kubelet-api-admin` as kubeadm binds it.
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// The service CIDR; the `kubernetes` Service gets its first address.
const SERVICE_CIDR: &str = "10.0.0.0/24";

/// How often a component is started again after losing a race for its ports.
const PORT_ATTEMPTS: usize = 3;

/// Errors of the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// The working directory or one of its files could not be written.
    #[error("cannot write {path}")]
    File {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No free port could be found.
    #[error("cannot find a free port on 127.0.0.1")]
    Port(#[source] std::io::Error),
    /// Certificates or keys could not be generated.
    #[error("cannot generate the control plane's certificates")]
    Certificates(#[source] rcgen::Error),
    /// A component could not be started.
    #[error("cannot start {component}")]
    Spawn {
        /// The component.
        component: &'static str,
        /// The cause.
        #[source]
        source: crate::sim::kubelet::process::ProcessError,
    },
    /// A component exited while starting.
    #[error("{component} exited while starting (code {code}); the end of its log ({log}):\n{tail}")]
    Exited {
        /// The component.
        component: &'static str,
        /// Its exit code.
        code: i32,
        /// Its log file.
        log: String,
        /// The last lines of its log.
        tail: String,
    },
    /// A component did not become ready in time.
    #[error(
        "{component} was not ready within {within:?}: {last}; the end of its log ({log}):\n{tail}"
    )]
    NotReady {
        /// The component.
        component: &'static str,
        /// The bound.
        within: Duration,
        /// What the last check saw.
        last: String,
        /// Its log file.
        log: String,
        /// The last lines of its log.
        tail: String,
    },
    /// A CustomResourceDefinition given to install could not be.
    #[error("cannot install the CustomResourceDefinition {name}")]
    Crd {
        /// Its name, or where it is in the list.
        name: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// kube-apiserver's kubelet client user could not be bound to its role.
    #[error("cannot bind {KUBELET_CLIENT_USER} to system:kubelet-api-admin")]
    KubeletClient(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A client for the API server could not be built.
    #[error("cannot build a client for the control plane")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// How to start a control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// The binaries.
    pub binaries: Binaries,
    /// Where certificates, the etcd data, logs and the audit log go (a fresh temporary
    /// directory, removed on shutdown, when unset).
    pub work_dir: Option<PathBuf>,
    /// How long each component may take to become ready.
    pub ready_within: Duration,
    /// kube-controller-manager's `--node-monitor-grace-period`: how long a node may miss
    /// heartbeats before it is NotReady (taint eviction follows the pods' tolerations).
    pub node_monitor_grace_period: Duration,
    /// Run kube-controller-manager and kube-scheduler when the binaries are present.
    pub controllers: bool,
    /// Nodes that will register: each gets a static token as `system:node:<name>` in
    /// `system:nodes` ([`ControlPlane::node_tokens`]).
    pub nodes: Vec<String>,
    /// CustomResourceDefinitions (YAML) created, and waited for until Established, before
    /// kube-controller-manager starts. Its garbage collector learns of new resources only
    /// by rediscovering them every 30 s, so an object owned by a custom resource created
    /// meanwhile can wait far longer to be collected; a cluster that has had the CRDs for
    /// a while has no such delay.
    pub crds: Vec<String>,
    /// Feature gates of kube-apiserver, kube-controller-manager and kube-scheduler
    /// (`--feature-gates`; none when empty).
    pub feature_gates: super::versions::FeatureGates,
    /// API versions kube-apiserver serves beyond its defaults (`--runtime-config`, e.g.
    /// `coordination.k8s.io/v1beta1=true`; none when empty).
    pub runtime_config: Vec<String>,
}

impl ControlPlaneConfig {
    /// Defaults for `binaries`: 60 s to become ready, a 20 s node grace period, controllers
    /// on, no nodes.
    pub fn new(binaries: Binaries) -> Self {
        Self {
            binaries,
            work_dir: None,
            ready_within: Duration::from_secs(60),
            node_monitor_grace_period: Duration::from_secs(20),
            controllers: true,
            nodes: Vec::new(),
            crds: Vec::new(),
            feature_gates: Default::default(),
            runtime_config: Vec::new(),
        }
    }
}

/// The `--feature-gates` argument of `config`'s gates, when it has any.
fn gate_args(config: &ControlPlaneConfig) -> Option<String> {
    (!config.feature_gates.is_empty()).then(|| {
        format!(
            "--feature-gates={}",
            super::versions::feature_gates_arg(&config.feature_gates)
        )
    })
}

/// One running component.
struct Component {
    name: &'static str,
    instance: Instance,
    log: Arc<ContainerLog>,
}

/// A running control plane. Dropping it kills every process and removes its directory.
pub struct ControlPlane {
    components: Vec<Component>,
    url: String,
    ca_pem: String,
    admin_token: String,
    node_tokens: BTreeMap<String, String>,
    audit_log: PathBuf,
    pki: Pki,
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    _janitor: Option<Janitor>,
    started_in: Duration,
    stand_ins: Option<crate::sim::controllers::Controllers>,
    controllers: ControllersRun,
}

/// Who runs the built-in controllers of a [`ControlPlane`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllersRun {
    /// kube-controller-manager (and kube-scheduler, when present).
    Real,
    /// The simulator's controllers, against the real API server: no
    /// kube-controller-manager was found.
    Simulated {
        /// Whether the simulator's scheduler runs too (no kube-scheduler was found).
        scheduler: bool,
    },
    /// Nobody ([`ControlPlaneConfig::controllers`] is off).
    None,
}

impl std::fmt::Display for ControllersRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Real => f.write_str("kube-controller-manager"),
            Self::Simulated { scheduler: true } => f.write_str(
                "the simulator's controllers and scheduler (no kube-controller-manager or kube-scheduler was found)",
            ),
            Self::Simulated { scheduler: false } => f.write_str(
                "the simulator's controllers (no kube-controller-manager was found)",
            ),
            Self::None => f.write_str("no controllers"),
        }
    }
}

/// Removes a directory when the process that owns it dies, however it dies: a shell in a
/// process group of its own blocks reading a pipe only this process writes to, and removes
/// the directory once the pipe closes (at exit, or when this is dropped).
struct Janitor {
    child: std::process::Child,
    pipe: Option<std::process::ChildStdin>,
}

impl Janitor {
    fn watch(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt as _;
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(r#"trap '' TERM INT HUP QUIT; read _; rm -rf -- "$0""#)
            .arg(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Self { child, pipe })
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        self.pipe = None;
        let _ = self.child.wait();
    }
}

/// Ports handed out by this process, never handed out twice while it runs.
fn free_port() -> Result<u16, ControlPlaneError> {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..64 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_err(ControlPlaneError::Port)?
            .port();
        if GIVEN.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return Ok(port);
        }
    }
    Err(ControlPlaneError::Port(std::io::Error::other(
        "the system kept handing out ports this process already uses",
    )))
}

fn write(path: &Path, text: &str) -> Result<(), ControlPlaneError> {
    std::fs::write(path, text).map_err(|source| ControlPlaneError::File {
        path: path.to_path_buf(),
        source,
    })
}

/// The certificate authority and keys of one control plane, as files in `pki/`.
struct Pki {
    dir: PathBuf,
    ca_pem: String,
    ca_key_pem: String,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn generate(dir: &Path) -> Result<Self, ControlPlaneError> {
        std::fs::create_dir_all(dir).map_err(|source| ControlPlaneError::File {
            path: dir.to_path_buf(),
            source,
        })?;
        let ca_key = KeyPair::generate().map_err(ControlPlaneError::Certificates)?;
        let ca_key_pem = ca_key.serialize_pem();
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(ControlPlaneError::Certificates)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "opconform-local-ca");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(params, ca_key)
            .map_err(ControlPlaneError::Certificates)?;
        let ca_pem = ca.pem();
        write(&dir.join("ca.crt"), &ca_pem)?;
        write(&dir.join("ca.key"), &ca_key_pem)?;
        let pki = Self {
            dir: dir.to_path_buf(),
            ca_pem,
            ca_key_pem,
            ca,
        };
        // What kube-apiserver shows the kubelets (kubeadm's apiserver-kubelet-client).
        pki.leaf(
            "apiserver-kubelet-client",
            KUBELET_CLIENT_USER,
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        pki.leaf(
            "apiserver",
            "kube-apiserver",
            &[
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        // The service-account token signing key (ES256) and its public half.
        let sa = KeyPair::generate().map_err(ControlPlaneError::Certificates)?;
        write(&dir.join("sa.key"), &sa.serialize_pem())?;
        write(&dir.join("sa.pub"), &sa.public_key_pem())?;
        Ok(pki)
    }

    /// Writes `<name>.crt` and `<name>.key`: a certificate for `usage` and `names` (IP
    /// addresses become IP SANs) signed by the CA.
    fn leaf(
        &self,
        name: &str,
        common_name: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<(PathBuf, PathBuf), ControlPlaneError> {
        let key = KeyPair::generate().map_err(ControlPlaneError::Certificates)?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .map_err(ControlPlaneError::Certificates)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        let cert = params
            .signed_by(&key, &self.ca)
            .map_err(ControlPlaneError::Certificates)?;
        let (crt, key_path) = (
            self.dir.join(format!("{name}.crt")),
            self.dir.join(format!("{name}.key")),
        );
        write(&crt, &cert.pem())?;
        write(&key_path, &key.serialize_pem())?;
        Ok((crt, key_path))
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

/// A random bearer token.
fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl ControlPlane {
    /// Starts etcd, then kube-apiserver, each waited for until ready, then (when configured
    /// and present) kube-scheduler and kube-controller-manager together: ready once the
    /// controllers have made the `default` ServiceAccount with the scheduler still running.
    ///
    /// # Errors
    /// When a file cannot be written, a component cannot be started, exits, or is not
    /// ready within [`ControlPlaneConfig::ready_within`] (with the end of its log).
    pub async fn start(config: ControlPlaneConfig) -> Result<Self, ControlPlaneError> {
        let begin = Instant::now();
        let (temp, dir) = match &config.work_dir {
            Some(path) => (None, path.clone()),
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("opconform-local-")
                    .tempdir()
                    .map_err(|source| ControlPlaneError::File {
                        path: std::env::temp_dir(),
                        source,
                    })?;
                let path = temp.path().to_path_buf();
                (Some(temp), path)
            }
        };
        for sub in ["logs", "etcd", "audit"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|source| ControlPlaneError::File {
                path: dir.join(sub),
                source,
            })?;
        }
        // Declared before `temp`'s directory is filled: if this process is killed, the
        // janitor removes it; on an ordinary drop the TempDir does.
        let janitor = match temp {
            Some(_) => Some(
                Janitor::watch(&dir).map_err(|source| ControlPlaneError::File {
                    path: dir.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        let pki = Pki::generate(&dir.join("pki"))?;
        let admin_token = token();
        let kcm_token = token();
        let scheduler_token = token();
        let node_tokens: BTreeMap<String, String> =
            config.nodes.iter().map(|n| (n.clone(), token())).collect();
        let controllers = match (config.controllers, &config.binaries.kube_controller_manager) {
            (false, _) => ControllersRun::None,
            (true, Some(_)) => ControllersRun::Real,
            (true, None) => ControllersRun::Simulated {
                scheduler: config.binaries.kube_scheduler.is_none(),
            },
        };
        // The real components have their bootstrap roles; ours in their place do the work of
        // every controller's ServiceAccount, which only system:masters covers.
        let (kcm_groups, scheduler_groups) = match controllers {
            ControllersRun::Simulated { scheduler } => (
                "system:masters",
                if scheduler { "system:masters" } else { "" },
            ),
            _ => ("", ""),
        };
        let mut tokens = format!(
            "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
             {kcm_token},system:kube-controller-manager,system:kube-controller-manager,\"{kcm_groups}\"\n\
             {scheduler_token},system:kube-scheduler,system:kube-scheduler,\"{scheduler_groups}\"\n"
        );
        for (node, token) in &node_tokens {
            tokens.push_str(&format!(
                "{token},system:node:{node},system:node:{node},\"system:nodes\"\n"
            ));
        }
        write(&dir.join("pki/tokens.csv"), &tokens)?;
        write(&dir.join("audit/policy.yaml"), AUDIT_POLICY)?;
        let audit_log = dir.join("audit/audit.log");
        let mut plane = Self {
            components: Vec::new(),
            url: String::new(),
            ca_pem: pki.ca_pem.clone(),
            admin_token,
            node_tokens,
            audit_log,
            pki,
            dir: dir.clone(),
            _temp: temp,
            _janitor: janitor,
            started_in: Duration::ZERO,
            stand_ins: None,
            controllers,
        };
        let etcd_url = plane.start_etcd(&config).await?;
        plane.start_apiserver(&config, &etcd_url).await?;
        plane.bind_kubelet_client().await?;
        plane.install_crds(&config).await?;
        if config.controllers {
            // kube-scheduler serves nothing to ask whether it is ready: it starts first and
            // must still be running once the controllers are ready, which they are told
            // by a condition of their own (see wait_for_default_service_account).
            if let Some(scheduler) = &config.binaries.kube_scheduler {
                let kubeconfig = plane.component_kubeconfig("kube-scheduler", &scheduler_token)?;
                plane
                    .spawn_scheduler(scheduler, &kubeconfig, gate_args(&config))
                    .await?;
            }
            if let Some(kcm) = &config.binaries.kube_controller_manager {
                let kubeconfig =
                    plane.component_kubeconfig("kube-controller-manager", &kcm_token)?;
                plane
                    .start_controller_manager(&config, kcm, &kubeconfig)
                    .await?;
            } else {
                plane
                    .start_stand_ins(&config, kcm_token.clone(), scheduler_token.clone())
                    .await?;
            }
            plane.still_running("kube-scheduler").await?;
        }
        plane.started_in = begin.elapsed();
        Ok(plane)
    }

    async fn spawn(
        &mut self,
        name: &'static str,
        program: &Path,
        args: Vec<String>,
    ) -> Result<(), ControlPlaneError> {
        let log = Arc::new(ContainerLog::new(
            self.dir.join("logs").join(format!("{name}.log")),
            256 * 1024,
        ));
        log.new_instance();
        let spec = Spec {
            program: program.to_path_buf(),
            args,
            env: ["PATH", "HOME", "TMPDIR"]
                .into_iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
                .collect(),
            cwd: self.dir.clone(),
        };
        let instance = Instance::spawn(&spec, log.clone())
            .await
            .map_err(|source| ControlPlaneError::Spawn {
                component: name,
                source,
            })?;
        self.components.push(Component {
            name,
            instance,
            log,
        });
        Ok(())
    }

    /// Waits until `ready` answers `Ok`, failing early when the last started component
    /// exits. `Err(true)` from the closure's outcome means: it lost a race for a port.
    async fn wait_ready<F, Fut>(
        &mut self,
        config: &ControlPlaneConfig,
        mut ready: F,
    ) -> Result<(), Attempt>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let deadline = Instant::now() + config.ready_within;
        loop {
            let component = self.components.last_mut().expect("a component was started");
            if let Ok(exit) =
                tokio::time::timeout(Duration::from_millis(25), component.instance.wait()).await
            {
                let component = self.components.pop().expect("a component was started");
                let tail = tail(&component.log);
                let log = component.log.path().display().to_string();
                component.instance.finish().await;
                let lost_port = tail.contains("address already in use");
                return Err(Attempt {
                    lost_port,
                    error: ControlPlaneError::Exited {
                        component: component.name,
                        code: exit.code,
                        log,
                        tail,
                    },
                });
            }
            let last = match ready().await {
                Ok(()) => return Ok(()),
                Err(seen) => seen,
            };
            if Instant::now() > deadline {
                let component = self.components.last().expect("a component was started");
                return Err(Attempt {
                    lost_port: false,
                    error: ControlPlaneError::NotReady {
                        component: component.name,
                        within: config.ready_within,
                        last,
                        log: component.log.path().display().to_string(),
                        tail: tail(&component.log),
                    },
                });
            }
        }
    }

    async fn start_etcd(
        &mut self,
        config: &ControlPlaneConfig,
    ) -> Result<String, ControlPlaneError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (client, peer) = (free_port()?, free_port()?);
            let url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let data = self.dir.join("etcd");
            let args = vec![
                "--name=opconform".into(),
                format!("--data-dir={}", data.display()),
                format!("--listen-client-urls={url}"),
                format!("--advertise-client-urls={url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=opconform={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ];
            self.spawn("etcd", &config.binaries.etcd, args).await?;
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, client));
            let outcome = self
                .wait_ready(config, || async move {
                    match plain_http::get_text(addr, "/health", Duration::from_secs(2)).await {
                        Ok(body) if body.contains("\"health\":\"true\"") => Ok(()),
                        Ok(body) => Err(format!("/health answered {body}")),
                        Err(e) => Err(crate::error_chain(&e)),
                    }
                })
                .await;
            match outcome {
                Ok(()) => return Ok(url),
                Err(a) if a.lost_port && attempt < PORT_ATTEMPTS => {
                    let _ = std::fs::remove_dir_all(&data);
                }
                Err(a) => return Err(a.error),
            }
        }
    }

    async fn start_apiserver(
        &mut self,
        config: &ControlPlaneConfig,
        etcd_url: &str,
    ) -> Result<(), ControlPlaneError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port()?;
            self.url = format!("https://127.0.0.1:{port}");
            let pki = |f: &str| self.pki.path(f);
            let mut args = vec![
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--tls-cert-file={}", pki("apiserver.crt")),
                format!("--tls-private-key-file={}", pki("apiserver.key")),
                format!("--client-ca-file={}", pki("ca.crt")),
                format!("--token-auth-file={}", pki("tokens.csv")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", pki("sa.pub")),
                format!("--service-account-signing-key-file={}", pki("sa.key")),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--authorization-mode=Node,RBAC".into(),
                // The kubernetes Service cannot point at a loopback address.
                "--endpoint-reconciler-type=none".into(),
                "--allow-privileged=true".into(),
                // Our nodes' kubelet endpoints listen on their InternalIP (127.0.10.N),
                // with certificates the cluster CA signs; kube-apiserver authenticates to
                // them with its own client certificate.
                "--kubelet-preferred-address-types=InternalIP".into(),
                format!("--kubelet-certificate-authority={}", pki("ca.crt")),
                format!(
                    "--kubelet-client-certificate={}",
                    pki("apiserver-kubelet-client.crt")
                ),
                format!(
                    "--kubelet-client-key={}",
                    pki("apiserver-kubelet-client.key")
                ),
                format!(
                    "--audit-policy-file={}",
                    self.dir.join("audit/policy.yaml").display()
                ),
                format!("--audit-log-path={}", self.audit_log.display()),
                "--audit-log-format=json".into(),
                "--audit-log-maxsize=500".into(),
                "--profiling=false".into(),
            ];
            args.extend(gate_args(config));
            if !config.runtime_config.is_empty() {
                args.push(format!(
                    "--runtime-config={}",
                    config.runtime_config.join(",")
                ));
            }
            let program = config.binaries.kube_apiserver.clone();
            self.spawn("kube-apiserver", &program, args).await?;
            let client = self.admin_client().await?;
            let outcome = self
                .wait_ready(config, || {
                    let client = client.clone();
                    async move {
                        // send, not request_text: a not-yet-ready 500 is no error to log.
                        let request = http::Request::get("/readyz")
                            .body(kube::client::Body::empty())
                            .map_err(|e| e.to_string())?;
                        let response = client
                            .send(request)
                            .await
                            .map_err(|e| crate::error_chain(&e))?;
                        match response.status().as_u16() {
                            200 => Ok(()),
                            code => Err(format!("/readyz answered {code}")),
                        }
                    }
                })
                .await;
            match outcome {
                Ok(()) => return Ok(()),
                Err(a) if a.lost_port && attempt < PORT_ATTEMPTS => {}
                Err(a) => return Err(a.error),
            }
        }
    }

    /// Lets kube-apiserver use the kubelets' API (exec, port-forward, logs): its kubelet
    /// client user gets `system:kubelet-api-admin`, as kubeadm binds it.
    async fn bind_kubelet_client(&self) -> Result<(), ControlPlaneError> {
        use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-apiserver-kubelet-api-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:kubelet-api-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": KUBELET_CLIENT_USER}],
        }))
        .map_err(|e| ControlPlaneError::KubeletClient(Box::new(e)))?;
        kube::Api::<ClusterRoleBinding>::all(self.admin_client().await?)
            .create(&Default::default(), &binding)
            .await
            .map_err(|e| ControlPlaneError::KubeletClient(Box::new(e)))?;
        Ok(())
    }

    async fn install_crds(&self, config: &ControlPlaneConfig) -> Result<(), ControlPlaneError> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        if config.crds.is_empty() {
            return Ok(());
        }
        let api: kube::Api<CustomResourceDefinition> = kube::Api::all(self.admin_client().await?);
        for (index, text) in config.crds.iter().enumerate() {
            let crd: CustomResourceDefinition =
                serde_yaml::from_str(text).map_err(|e| ControlPlaneError::Crd {
                    name: format!("number {}", index + 1),
                    source: Box::new(e),
                })?;
            let name = crd.metadata.name.clone().unwrap_or_default();
            let failed =
                |source: Box<dyn std::error::Error + Send + Sync>| ControlPlaneError::Crd {
                    name: name.clone(),
                    source,
                };
            api.create(&Default::default(), &crd)
                .await
                .map_err(|e| failed(Box::new(e)))?;
            let established = kube::runtime::wait::await_condition(
                api.clone(),
                &name,
                kube::runtime::wait::conditions::is_crd_established(),
            );
            tokio::time::timeout(config.ready_within, established)
                .await
                .map_err(|_| {
                    failed(format!("not Established within {:?}", config.ready_within).into())
                })?
                .map_err(|e| failed(Box::new(e)))?;
        }
        Ok(())
    }

    async fn start_controller_manager(
        &mut self,
        config: &ControlPlaneConfig,
        program: &Path,
        kubeconfig: &Path,
    ) -> Result<(), ControlPlaneError> {
        let pki = |f: &str| self.pki.path(f);
        let grace = config.node_monitor_grace_period.as_secs().max(1);
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--service-account-private-key-file={}", pki("sa.key")),
            format!("--root-ca-file={}", pki("ca.crt")),
            format!("--cluster-signing-cert-file={}", pki("ca.crt")),
            format!("--cluster-signing-key-file={}", pki("ca.key")),
            "--use-service-account-credentials=true".into(),
            "--controllers=*".into(),
            "--leader-elect=false".into(),
            // With its own credentials per controller it makes several requests for each
            // of its ~40 controllers before it starts their informers: at the default 20
            // per second that alone took 4 s of a throw-away plane's start.
            "--kube-api-qps=1000".into(),
            "--kube-api-burst=2000".into(),
            "--node-monitor-period=1s".into(),
            format!("--node-monitor-grace-period={grace}s"),
            "--secure-port=0".into(),
            "--profiling=false".into(),
        ];
        args.extend(gate_args(config));
        self.spawn("kube-controller-manager", program, args).await?;
        self.wait_for_default_service_account(config).await
    }

    /// The simulator's controllers in kube-controller-manager's place (and its scheduler in
    /// kube-scheduler's, when that is missing too), with the same periods.
    async fn start_stand_ins(
        &mut self,
        config: &ControlPlaneConfig,
        controller_manager_token: String,
        scheduler_token: String,
    ) -> Result<(), ControlPlaneError> {
        use crate::sim::controllers::{ApiAccess, ControllerConfig, Controllers};
        let access = ApiAccess {
            url: self.url.clone(),
            ca_pem: self.ca_pem.clone(),
            controller_manager_token,
            scheduler_token,
        };
        let controllers = Controllers::start_against(
            access,
            ControllerConfig {
                node_monitor_period: Duration::from_secs(1),
                node_monitor_grace_period: config.node_monitor_grace_period,
                scheduler: config.binaries.kube_scheduler.is_none(),
                namespace_defaults: Some(self.ca_pem.clone()),
                ..ControllerConfig::default()
            },
        )
        .await
        .map_err(|e| ControlPlaneError::Client(Box::new(e)))?;
        self.stand_ins = Some(controllers);
        self.wait_for_default_service_account(config).await
    }

    /// Ready when the service-account controller has made the `default` ServiceAccount of
    /// `default`, which every pod there needs.
    async fn wait_for_default_service_account(
        &mut self,
        config: &ControlPlaneConfig,
    ) -> Result<(), ControlPlaneError> {
        let client = self.admin_client().await?;
        self.wait_ready(config, || {
            let api: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
                kube::Api::namespaced(client.clone(), "default");
            async move {
                match api.get_opt("default").await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err("no ServiceAccount default/default yet".to_string()),
                    Err(e) => Err(crate::error_chain(&e)),
                }
            }
        })
        .await
        .map_err(|a| a.error)
    }

    async fn spawn_scheduler(
        &mut self,
        program: &Path,
        kubeconfig: &Path,
        gates: Option<String>,
    ) -> Result<(), ControlPlaneError> {
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect=false".into(),
            "--kube-api-qps=1000".into(),
            "--kube-api-burst=2000".into(),
            "--secure-port=0".into(),
            "--profiling=false".into(),
        ];
        args.extend(gates);
        self.spawn("kube-scheduler", program, args).await
    }

    /// Fails with the end of its log when the component `name`, if started, has exited.
    async fn still_running(&mut self, name: &'static str) -> Result<(), ControlPlaneError> {
        let Some(index) = self.components.iter().position(|c| c.name == name) else {
            return Ok(());
        };
        let exited = tokio::time::timeout(Duration::ZERO, self.components[index].instance.wait());
        let Ok(exit) = exited.await else {
            return Ok(());
        };
        let component = self.components.remove(index);
        let tail = tail(&component.log);
        let log = component.log.path().display().to_string();
        component.instance.finish().await;
        Err(ControlPlaneError::Exited {
            component: name,
            code: exit.code,
            log,
            tail,
        })
    }

    fn component_kubeconfig(&self, name: &str, token: &str) -> Result<PathBuf, ControlPlaneError> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        write(
            &path,
            &crate::sim::apiserver::kubeconfig(
                "opconform-local",
                &self.url,
                &self.ca_pem,
                name,
                token,
            ),
        )?;
        Ok(path)
    }

    /// The API server's URL (`https://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The cluster CA, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The API server's address.
    pub fn addr(&self) -> SocketAddr {
        self.url
            .trim_start_matches("https://")
            .parse()
            .unwrap_or_else(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
    }

    /// The static token of each node named in [`ControlPlaneConfig::nodes`].
    pub fn node_tokens(&self) -> &BTreeMap<String, String> {
        &self.node_tokens
    }

    /// The API server as a kubelet sees it (nodes named in [`ControlPlaneConfig::nodes`]).
    pub fn upstream(&self) -> crate::sim::kubelet::upstream::RealApiServer {
        crate::sim::kubelet::upstream::RealApiServer {
            addr: self.addr(),
            ca_pem: self.ca_pem.clone(),
            cluster_name: "opconform-local".into(),
            node_tokens: std::sync::Arc::new(self.node_tokens.clone()),
            kubelet_serving_ca: Some(crate::sim::apiserver::tls::SigningCa {
                cert_pem: self.pki.ca_pem.clone(),
                key_pem: self.pki.ca_key_pem.clone(),
            }),
        }
    }

    /// The admin kubeconfig (user [`ADMIN_USER`], in `system:masters`), as YAML.
    pub fn admin_kubeconfig(&self) -> String {
        crate::sim::apiserver::kubeconfig(
            "opconform-local",
            &self.url,
            &self.ca_pem,
            ADMIN_USER,
            &self.admin_token,
        )
    }

    /// Writes the admin kubeconfig to `path`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_admin_kubeconfig(&self, path: &Path) -> Result<(), ControlPlaneError> {
        write(path, &self.admin_kubeconfig())
    }

    /// An admin client.
    ///
    /// # Errors
    /// When the kubeconfig cannot be turned into a client.
    pub async fn admin_client(&self) -> Result<kube::Client, ControlPlaneError> {
        let kubeconfig: kube::config::Kubeconfig =
            serde_yaml::from_str(&self.admin_kubeconfig())
                .map_err(|e| ControlPlaneError::Client(e.into()))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| ControlPlaneError::Client(e.into()))?;
        kube::Client::try_from(crate::cluster::shared::without_retries(config))
            .map_err(|e| ControlPlaneError::Client(e.into()))
    }

    /// The API server's JSON audit log (the kind clusters' policy).
    pub fn audit_log(&self) -> &Path {
        &self.audit_log
    }

    /// The working directory: `pki/`, `etcd/`, `logs/<component>.log`, `audit/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate and key files, for certificates of the nodes' own servers.
    pub fn ca_files(&self) -> (PathBuf, PathBuf) {
        (self.pki.dir.join("ca.crt"), self.pki.dir.join("ca.key"))
    }

    /// Whether anything runs the built-in controllers: kube-controller-manager, or the
    /// simulator's controllers in its place.
    pub fn has_controllers(&self) -> bool {
        self.controllers != ControllersRun::None
    }

    /// Who runs the built-in controllers.
    pub fn controllers(&self) -> ControllersRun {
        self.controllers
    }

    /// The components running, in start order.
    pub fn components(&self) -> Vec<&'static str> {
        self.components.iter().map(|c| c.name).collect()
    }

    /// The process ids of every component (for tests that check nothing is left behind).
    pub fn pids(&self) -> Vec<u32> {
        self.components
            .iter()
            .map(|c| c.instance.group().pid)
            .collect()
    }

    /// How long start-up took until every component was ready.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Copies every component's log and the audit log into `dir` (for a failed scenario).
    pub fn keep_logs(&self, dir: &Path) {
        let _ = std::fs::create_dir_all(dir);
        for c in &self.components {
            let _ = std::fs::copy(c.log.path(), dir.join(format!("{}.log", c.name)));
        }
        let _ = std::fs::copy(&self.audit_log, dir.join("audit.log"));
    }

    /// Stops every component (the controllers first, etcd last) and waits for them.
    pub async fn shutdown(mut self) {
        if let Some(stand_ins) = self.stand_ins.take() {
            stand_ins.shutdown().await;
        }
        while let Some(component) = self.components.pop() {
            let _ = component
                .instance
                .group()
                .signal(nix::sys::signal::Signal::SIGKILL);
            component.instance.finish().await;
        }
    }
}

/// A failed start of a component, and whether it failed for a port someone else took.
struct Attempt {
    lost_port: bool,
    error: ControlPlaneError,
}

/// The last 30 lines of a component's log.
fn tail(log: &ContainerLog) -> String {
    let text = log.text(false).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
