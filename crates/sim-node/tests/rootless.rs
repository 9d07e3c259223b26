//! Pods as rootless containers: the kubelet, run by an unprivileged user (65534, in a
//! process of its own: a copy of this test binary that user can read), runs a busybox pod
//! as a rootless runc container — its host name is the pod's, its service-account files
//! are readable, its shell is PID 1, an exec probe's command runs in it and is killed at the
//! probe's timeout, a gRPC probe reaches the health service it serves — and the faults act
//! on it (crash, hold and release,
//! clock skew in a container of an executable image; an image directory of root's is
//! copied for the container); once the pod is deleted and that process has ended, nothing
//! of the container is left, nor when that process is SIGKILLed while the pod runs.
//!
//! The test needs root (to become another user), runc and user namespaces open to that
//! user: elsewhere it says why it did not run.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use sim_apiserver::ApiServer;
use sim_node::oci::{Isolation, OciRuntime};
use sim_node::upstream::SimulatedUpstream;
use sim_node::{Kubelet, KubeletConfig};
use sim_test_support::eventually;

const BUSYBOX: &str = "busybox:1.35";

/// An image mapped to the host's shell: an executable image, which sees the host's
/// system directories.
const HOST_SHELL: &str = "host-shell:1";

/// The variable that makes [`the_rootless_child`] run (the path of its directory).
const CHILD_VAR: &str = "OPCONFORM_ROOTLESS_TEST_CHILD";

/// The variable that gives [`the_rootless_child`] a busybox image directory of another
/// user (root's), which its containers get a copy of.
const FOREIGN_VAR: &str = "OPCONFORM_ROOTLESS_TEST_FOREIGN_IMAGE";

/// The image mapped to that directory.
const FOREIGN: &str = "foreign-busybox:1";

/// An image mapped to this test's executable, whose [`the_grpc_health_server`] serves the
/// gRPC health service in a container.
const HEALTH: &str = "grpc-health:1";

/// The variable that makes [`the_grpc_health_server`] serve: the file whose presence makes
/// it answer SERVING.
const HEALTH_VAR: &str = "OPCONFORM_ROOTLESS_TEST_HEALTH_FILE";

/// The port of that service.
const HEALTH_PORT: u16 = 18082;

/// The unprivileged user the child runs as (`nobody`).
const USER: u32 = 65534;

/// How long the child may take in all.
const CHILD_BOUND: Duration = Duration::from_secs(120);

fn main_status(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

/// The pod `name`, as JSON.
async fn get_named(api: Api<Pod>, name: &str) -> Option<Value> {
    serde_json::to_value(api.get_opt(name).await.ok()??).ok()
}

/// The state letter of `pid` (`/proc/PID/stat`), `None` when it is gone.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// In a child: the API server, a client, and a kubelet whose pods are rootless containers.
async fn start_kubelet(dir: &Path) -> (ApiServer, kube::Client, Kubelet, Arc<OciRuntime>) {
    assert!(!nix::unistd::geteuid().is_root(), "the child is not root");
    let isolation = Isolation::detect(Path::new(sim_node::oci::STATE_DIR));
    let rt = match &isolation {
        Isolation::Containers(rt) if rt.rootless() => rt.clone(),
        other => panic!("rootless containers expected, found {other:?}"),
    };
    let (server, client) = sim_test_support::server().await;
    let busybox = sim_test_support::busybox_image(dir);
    let mut config = KubeletConfig::new("rootless", 157, dir.join("node"));
    config.isolation = isolation;
    config.images.insert(BUSYBOX, &busybox);
    config.images.insert(HOST_SHELL, "/bin/sh");
    let foreign = std::env::var_os(FOREIGN_VAR).expect("the foreign image's directory");
    config.images.insert(FOREIGN, &foreign);
    config
        .images
        .insert(HEALTH, std::env::current_exe().expect("this test"));
    config.restart_backoff_base = Duration::from_millis(200);
    config.restart_backoff_cap = Duration::from_millis(400);
    let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config)
        .await
        .expect("the kubelet starts");
    (server, client, kubelet, rt)
}

/// Writes the child's report: the runtime's state directory and the pids of its
/// containers' processes.
fn write_report(dir: &Path, rt: &OciRuntime, pids: &[u32]) {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let report = format!("{}\n{}\n", rt.root().display(), pids.join(" "));
    std::fs::write(dir.join("report.tmp"), report).expect("the report is written");
    std::fs::rename(dir.join("report.tmp"), dir.join("report")).expect("the report renamed");
}

/// Run by [`a_busybox_pod_runs_as_a_rootless_container_when_the_kubelet_is_not_root`] as
/// an unprivileged user: a kubelet and its pod, checked from inside; writes the runtime's
/// state directory and the container's init pids to `report` in its directory.
#[tokio::test]
async fn the_rootless_child() {
    let Some(dir) = std::env::var_os(CHILD_VAR).map(PathBuf::from) else {
        return;
    };
    let (_server, client, kubelet, rt) = start_kubelet(&dir).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // `$$` is how a pod spec escapes `$`: the shell gets `$$`.
    let script = "hostname; echo pid=$$$$; \
        cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
        test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token; \
        test -e /etc/debian_version || echo own root; \
        grep web-0 /etc/hosts; grep -q nameserver /etc/resolv.conf && echo resolver; \
        echo done; while :; do echo tick; sleep 0.1; done";
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default"},
        "spec": {"nodeName": "rootless", "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsUser": 65532, "runAsNonRoot": true},
            "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", script]}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    let log = eventually("the pod's first lines", || async {
        kubelet
            .log("default", "web-0", None, false)
            .filter(|l| l.contains("done"))
    })
    .await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], "web-0", "the kernel's host name: {log}");
    assert_eq!(lines[1], "pid=1", "{log}");
    assert_eq!(lines[2], "default", "the service-account namespace: {log}");
    assert!(lines.contains(&"token"), "the token: {log}");
    assert!(lines.contains(&"own root"), "not the host's /: {log}");
    let ip = kubelet.pod_ip("default", "web-0").expect("a pod IP");
    assert!(
        lines.contains(&format!("{ip}\tweb-0").as_str()),
        "the hosts file names the pod: {log}"
    );
    assert!(lines.contains(&"resolver"), "the pod's resolv.conf: {log}");
    let running = |p: &Value| !main_status(p)["state"]["running"].is_null();
    let get =
        |api: Api<Pod>| async move { serde_json::to_value(api.get_opt("web-0").await.ok()??).ok() };
    let first = eventually("the pod running", || async {
        get(pods.clone()).await.filter(running)
    })
    .await;
    let id = main_status(&first)["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(id.starts_with("runc://"), "{id}");
    let mut inits = kubelet.pids();
    kubelet
        .crash("default", "web-0", None)
        .expect("the container is crashed");
    let second = eventually("the container restarted", || async {
        get(pods.clone())
            .await
            .filter(|p| main_status(p)["restartCount"] == 1 && running(p))
    })
    .await;
    assert_eq!(
        main_status(&second)["lastState"]["terminated"]["exitCode"],
        137,
        "{second:#}"
    );
    let pids = eventually("the new container's processes", || async {
        Some(kubelet.pids()).filter(|p| p.iter().any(|p| !inits.contains(p)))
    })
    .await;
    inits.extend(&pids);
    kubelet
        .hold_pod("default", "web-0")
        .expect("the pod is held");
    let held = kubelet.pids();
    assert!(!held.is_empty());
    for pid in &held {
        assert!(
            matches!(state_of(*pid), Some('T' | 't') | None),
            "process {pid} of the held pod is {:?}",
            state_of(*pid)
        );
    }
    let before = kubelet
        .log("default", "web-0", None, false)
        .unwrap_or_default()
        .len();
    kubelet
        .release_pod("default", "web-0")
        .expect("the pod is released");
    eventually("the released container ticks again", || async {
        let now = kubelet.log("default", "web-0", None, false)?.len();
        (now > before).then_some(())
    })
    .await;
    // An exec probe runs through the rootless runtime, and its command is killed at the
    // probe's timeout.
    let probed: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probed", "namespace": "default"},
        "spec": {"nodeName": "rootless", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BUSYBOX,
                "command": ["sh", "-c", "while :; do sleep 1; done"],
                "readinessProbe": {"exec": {"command": ["sleep", "4157"]},
                    "timeoutSeconds": 1, "periodSeconds": 60}}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &probed)
        .await
        .expect("the pod is created");
    let command = ["sleep", "4157"];
    // The probe's command is killed at its timeout.
    sim_test_support::command_runs_then_ends(&command).await;
    inits.extend(kubelet.pids());
    // A gRPC probe reaches the health service of a container, which answers from what
    // the container sees at its hostPath volume.
    let serving = dir.join("serving");
    std::fs::create_dir(&serving).expect("the health service's directory");
    let checked: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checked", "namespace": "default"},
        "spec": {"nodeName": "rootless", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": HEALTH,
                "command": ["health", "--exact", "the_grpc_health_server", "--nocapture"],
                "env": [{"name": HEALTH_VAR, "value": "/serving/now"},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "volumeMounts": [{"name": "serving", "mountPath": "/serving"}],
                "readinessProbe": {"grpc": {"port": HEALTH_PORT},
                    "periodSeconds": 1, "failureThreshold": 1}}],
            "volumes": [{"name": "serving",
                "hostPath": {"path": serving, "type": "Directory"}}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &checked)
        .await
        .expect("the pod is created");
    let ready = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    eventually("the gRPC-probed pod running", || async {
        get_named(pods.clone(), "checked")
            .await
            .filter(|p| !main_status(p)["state"]["running"].is_null())
    })
    .await;
    std::fs::write(serving.join("now"), "").expect("the service told to serve");
    eventually("the gRPC-probed pod ready", || async {
        get_named(pods.clone(), "checked").await.filter(ready)
    })
    .await;
    std::fs::remove_file(serving.join("now")).expect("the service told to stop serving");
    eventually("the gRPC-probed pod unready", || async {
        get_named(pods.clone(), "checked")
            .await
            .filter(|p| !ready(p))
    })
    .await;
    inits.extend(kubelet.pids());
    // An executable image, and clock skew through libfaketime.
    let skewed: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "skewed", "namespace": "default"},
        "spec": {"nodeName": "rootless", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": HOST_SHELL,
                "command": ["/bin/sh", "-c", "while :; do date +%s; sleep 0.2; done"]}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &skewed)
        .await
        .expect("the pod is created");
    let offset = || {
        let log = kubelet.log("default", "skewed", None, false)?;
        let last: i64 = log.lines().last()?.trim().parse().ok()?;
        Some(last - chrono::Utc::now().timestamp())
    };
    eventually("the container's clock to match ours", || async {
        offset().filter(|d| d.abs() <= 2)
    })
    .await;
    if sim_node::find_faketime().is_some() {
        kubelet
            .skew_pod("default", "skewed", chrono::Duration::hours(1))
            .expect("the pod is skewed");
        eventually("the container's clock to run an hour ahead", || async {
            offset().filter(|d| (d - 3600).abs() <= 2)
        })
        .await;
    }
    // An image directory of another user: the container gets a copy of its own.
    let copied: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "copied", "namespace": "default"},
        "spec": {"nodeName": "rootless", "restartPolicy": "Never",
            "containers": [{"name": "main", "image": FOREIGN, "command": ["sh", "-c",
                "hostname; cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
                 echo written > /root/file && cat /root/file"]}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &copied)
        .await
        .expect("the pod is created");
    let done = eventually("the pod of a copied image succeeded", || async {
        get_named(pods.clone(), "copied")
            .await
            .filter(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    assert_eq!(
        kubelet.log("default", "copied", None, false).as_deref(),
        Some("copied\ndefault\nwritten\n"),
        "{done:#}"
    );
    inits.extend(kubelet.pids());
    for name in ["web-0", "probed", "checked", "skewed", "copied"] {
        pods.delete(name, &DeleteParams::default())
            .await
            .expect("the pod is deleted");
    }
    for name in ["web-0", "probed", "checked", "skewed", "copied"] {
        eventually(&format!("pod {name} gone"), || async {
            matches!(pods.get_opt(name).await, Ok(None)).then_some(())
        })
        .await;
    }
    kubelet.shutdown().await;
    write_report(&dir, &rt, &inits);
}

/// Run in a container of [`the_rootless_child`]'s kubelet (image [`HEALTH`]): the gRPC
/// health service on the pod's address (`POD_IP`) and [`HEALTH_PORT`], serving while the
/// file [`HEALTH_VAR`] names exists, until the container is stopped.
#[tokio::test]
async fn the_grpc_health_server() {
    let Some(file) = std::env::var_os(HEALTH_VAR).map(PathBuf::from) else {
        return;
    };
    let ip: std::net::IpAddr = std::env::var("POD_IP")
        .expect("the pod's address")
        .parse()
        .expect("an address");
    let listener = tokio::net::TcpListener::bind((ip, HEALTH_PORT))
        .await
        .expect("the health port bound");
    sim_test_support::grpc_health::serve(listener, move || file.exists());
    std::future::pending::<()>().await;
}

/// Run by [`nothing_of_a_rootless_container_is_left_when_the_kubelets_process_is_killed`]
/// as an unprivileged user: a kubelet whose pod runs, until this process is SIGKILLed.
#[tokio::test]
async fn the_killed_rootless_child() {
    let Some(dir) = std::env::var_os(CHILD_VAR).map(PathBuf::from) else {
        return;
    };
    let (_server, client, kubelet, rt) = start_kubelet(&dir).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "doomed", "namespace": "default"},
        "spec": {"nodeName": "rootless",
            "containers": [{"name": "main", "image": BUSYBOX,
                "command": ["sh", "-c", "echo up; sleep 1000 & sleep 1000"]}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    eventually("the pod's output", || async {
        kubelet
            .log("default", "doomed", None, false)
            .filter(|l| l.contains("up"))
    })
    .await;
    let pids = eventually("both processes of the container", || async {
        Some(kubelet.pids()).filter(|p| p.len() >= 2)
    })
    .await;
    write_report(&dir, &rt, &pids);
    tokio::time::sleep(CHILD_BOUND).await;
}

/// What a child needs: a directory others can read (a copy of this test binary, since the
/// build's directory is not readable by others; a busybox image of root's) holding the
/// child's own directory.
struct ChildDir {
    _top: tempfile::TempDir,
    exe: PathBuf,
    dir: PathBuf,
    foreign: PathBuf,
    user: u32,
}

impl ChildDir {
    /// For a child run as `user`; `None`, saying why, where the test cannot run.
    fn prepare(user: u32) -> Option<Self> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("not run: becoming an unprivileged user needs root");
            return None;
        }
        if !matches!(
            Isolation::detect(&std::env::temp_dir()),
            Isolation::Containers(_)
        ) {
            eprintln!("not run: no OCI runtime here");
            return None;
        }
        let top = tempfile::tempdir().expect("a directory");
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755))
            .expect("the directory opened to others");
        // The child reaches its directory only through directories others may search.
        for ancestor in top.path().ancestors().skip(1) {
            let mode = std::fs::metadata(ancestor).map_or(0, |m| m.permissions().mode() & 0o7777);
            assert!(
                mode & 0o001 != 0,
                "the child (user {user}) cannot reach {}: {} (mode {mode:o}) is closed to other \
                 users; run the test with a TMPDIR others may search, as /tmp (mode 1777)",
                top.path().display(),
                ancestor.display(),
            );
        }
        let exe = top.path().join("rootless-test");
        std::fs::copy(std::env::current_exe().expect("this test"), &exe)
            .expect("a copy of the test");
        let foreign = sim_test_support::busybox_image(top.path());
        let dir = top.path().join("child");
        for sub in ["", "run", "tmp"] {
            std::fs::create_dir(dir.join(sub)).expect("a directory of the child");
            std::os::unix::fs::chown(dir.join(sub), Some(user), Some(user))
                .expect("the child's directory given to the child");
        }
        std::fs::set_permissions(dir.join("run"), std::fs::Permissions::from_mode(0o700))
            .expect("a private runtime directory");
        Some(Self {
            _top: top,
            exe,
            dir,
            foreign,
            user,
        })
    }

    /// Starts the child test `test` as the child's user, in its own directory (its
    /// home, temporary and runtime directory).
    fn spawn(&self, test: &str) -> std::process::Child {
        std::process::Command::new(&self.exe)
            .args(["--exact", test, "--nocapture"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.dir)
            .env("TMPDIR", self.dir.join("tmp"))
            .env("XDG_RUNTIME_DIR", self.dir.join("run"))
            .env(CHILD_VAR, &self.dir)
            .env(FOREIGN_VAR, &self.foreign)
            .current_dir(&self.dir)
            .uid(self.user)
            .gid(self.user)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the child starts")
    }

    /// The child's report: the runtime's state directory (checked to be in the child's
    /// runtime directory) and its containers' processes.
    fn report(&self) -> Option<(PathBuf, Vec<u32>)> {
        let report = std::fs::read_to_string(self.dir.join("report")).ok()?;
        let mut lines = report.lines();
        let state_dir = PathBuf::from(lines.next()?);
        assert!(
            state_dir.starts_with(self.dir.join("run")),
            "the runtime's state is in the user's runtime directory: {}",
            state_dir.display()
        );
        let pids: Vec<u32> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        assert!(!pids.is_empty(), "the child saw its containers' processes");
        Some((state_dir, pids))
    }
}

/// A child that is SIGKILLed when dropped (a failed wait included).
struct Killed(Option<std::process::Child>);

impl Killed {
    /// SIGKILLs the child now and returns what it wrote.
    fn kill_now(&mut self) -> std::process::Output {
        let mut child = self.0.take().expect("the child runs");
        let _ = child.kill();
        child.wait_with_output().expect("the child's output")
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until none of `pids` lives and the runtime keeps no container in `state_dir`.
async fn nothing_left(state_dir: &Path, pids: &[u32]) {
    let left = eventually("nothing of the containers left", || async {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| state_of(*p).is_some_and(|s| s != 'Z'))
            .collect();
        let states: Vec<String> = std::fs::read_dir(state_dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        (alive.is_empty() && states.is_empty()).then_some((alive, states))
    })
    .await;
    assert_eq!(left, (vec![], vec![]));
}

/// Runs the child test `test` to its end (SIGKILLed after [`CHILD_BOUND`]), and checks
/// that it passed.
async fn run_child(child: &ChildDir, test: &str) {
    let running = child.spawn(test);
    let pid = running.id();
    let waited = tokio::time::timeout(
        CHILD_BOUND,
        tokio::task::spawn_blocking(move || running.wait_with_output()),
    )
    .await;
    let out = match waited {
        Ok(done) => done.expect("the wait").expect("the child's output"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("the child did not end within {CHILD_BOUND:?}");
        }
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed: {said}");
}

#[tokio::test]
async fn a_busybox_pod_runs_as_a_rootless_container_when_the_kubelet_is_not_root() {
    let Some(child) = ChildDir::prepare(USER) else {
        return;
    };
    run_child(&child, "the_rootless_child").await;
    let (state_dir, pids) = child.report().expect("the child's report");
    nothing_left(&state_dir, &pids).await;
}

/// The user of [`a_rootless_container_runs_as_its_users_when_the_kubelets_user_has_subordinate_ids`]'s
/// child (`daemon`): one with an entry in the password database, which `newuidmap` needs.
const MAPPING_USER: (u32, &str) = (1, "daemon");

/// The first of the subordinate ids that test gives [`MAPPING_USER`], and how many.
const SUBORDINATE: (u32, u32) = (1_500_000_000, 65536);

/// A range of subordinate ids given to a user in `/etc/subuid` and `/etc/subgid` (files
/// made when absent), taken away when dropped: the lines added are removed, and a file
/// this made is removed when nothing else was written to it.
struct SubordinateRange {
    line: String,
    made: Vec<&'static str>,
}

impl SubordinateRange {
    fn give(user: &str, (first, count): (u32, u32)) -> Self {
        let line = format!("{user}:{first}:{count}\n");
        let mut made = Vec::new();
        for file in ["/etc/subuid", "/etc/subgid"] {
            let text = match std::fs::read_to_string(file) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    made.push(file);
                    String::new()
                }
                Err(e) => panic!("cannot read {file}: {e}"),
            };
            let separator = if text.is_empty() || text.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            std::fs::write(file, format!("{text}{separator}{line}"))
                .unwrap_or_else(|e| panic!("cannot write {file}: {e}"));
        }
        Self { line, made }
    }
}

impl Drop for SubordinateRange {
    fn drop(&mut self) {
        for file in ["/etc/subuid", "/etc/subgid"] {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            let kept = text.replacen(&self.line, "", 1);
            if kept.is_empty() && self.made.contains(&file) {
                let _ = std::fs::remove_file(file);
            } else {
                let _ = std::fs::write(file, kept);
            }
        }
    }
}

#[tokio::test]
async fn a_rootless_container_runs_as_its_users_when_the_kubelets_user_has_subordinate_ids() {
    let helpers = ["newuidmap", "newgidmap"];
    if let Some(missing) = helpers.iter().find(|h| {
        !std::process::Command::new("sh")
            .args(["-c", &format!("command -v {h}")])
            .output()
            .is_ok_and(|o| o.status.success())
    }) {
        eprintln!("not run: no {missing} (Debian: apt-get install uidmap)");
        return;
    }
    let Some(child) = ChildDir::prepare(MAPPING_USER.0) else {
        return;
    };
    let _range = SubordinateRange::give(MAPPING_USER.1, SUBORDINATE);
    run_child(&child, "the_rootless_child_with_subordinate_ids").await;
    let (state_dir, pids) = child.report().expect("the child's report");
    nothing_left(&state_dir, &pids).await;
}

/// Run by [`a_rootless_container_runs_as_its_users_when_the_kubelets_user_has_subordinate_ids`]
/// as a user with subordinate ids: a pod runs as the user, group and supplemental group its
/// security context names, which are those ids on the host; what it wrote as that user
/// goes with its container.
#[tokio::test]
async fn the_rootless_child_with_subordinate_ids() {
    let Some(dir) = std::env::var_os(CHILD_VAR).map(PathBuf::from) else {
        return;
    };
    let (_server, client, kubelet, rt) = start_kubelet(&dir).await;
    assert_eq!(
        rt.subordinate_ids().map(|ids| (ids.uids, ids.gids)),
        Ok((SUBORDINATE, SUBORDINATE)),
        "the user's subordinate ids are mapped"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let script = "id -u; id -g; id -G; \
        cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
        mkdir -p /tmp/made/deeper && echo kept > /tmp/made/deeper/file && \
        stat -c %u:%g /tmp/made/deeper/file; echo done; sleep 3600";
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "users", "namespace": "default"},
        "spec": {"nodeName": "rootless", "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000,
                "supplementalGroups": [4000], "runAsNonRoot": true},
            "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", script]}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    let log = eventually("the pod's lines", || async {
        kubelet
            .log("default", "users", None, false)
            .filter(|l| l.contains("done"))
    })
    .await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[..2], ["1000", "3000"], "the user and group: {log}");
    assert!(
        lines[2].split_whitespace().any(|g| g == "4000"),
        "the supplemental group: {log}"
    );
    assert_eq!(lines[3], "default", "the service-account namespace: {log}");
    assert_eq!(lines[4], "1000:3000", "a file the container wrote: {log}");
    // On the host, the container's process is the subordinate id of its user.
    let host_uid = SUBORDINATE.0 + 1000 - 1;
    let host_uid_of = |pid: &u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("Uid:"))?;
        line.split_whitespace().nth(1)?.parse::<u32>().ok()
    };
    let pids = eventually(
        &format!("a process of the container running as {host_uid} on the host"),
        || async {
            let pids = kubelet.pids();
            pids.iter()
                .any(|pid| host_uid_of(pid) == Some(host_uid))
                .then_some(pids)
        },
    )
    .await;
    pods.delete("users", &DeleteParams::default())
        .await
        .expect("the pod is deleted");
    eventually("pod users gone", || async {
        matches!(pods.get_opt("users").await, Ok(None)).then_some(())
    })
    .await;
    kubelet.shutdown().await;
    // What the container's user wrote went with its bundle, out of this user's reach as it
    // was.
    let left: Vec<PathBuf> = walk(&dir.join("node"))
        .into_iter()
        .filter(|(_, uid)| *uid >= SUBORDINATE.0)
        .map(|(path, _)| path)
        .collect();
    assert!(
        left.is_empty(),
        "files of the container's users left: {left:?}"
    );
    write_report(&dir, &rt, &pids);
}

/// Every file and directory under `dir`, with its owner.
fn walk(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::MetadataExt as _;
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            }
            found.push((entry.path(), meta.uid()));
        }
    }
    found
}

#[tokio::test]
async fn nothing_of_a_rootless_container_is_left_when_the_kubelets_process_is_killed() {
    let Some(child) = ChildDir::prepare(USER) else {
        return;
    };
    let mut running = Killed(Some(child.spawn("the_killed_rootless_child")));
    let reported = eventually("the child's container running", || async {
        child
            .report()
            .filter(|(_, pids)| pids.iter().all(|p| state_of(*p).is_some()))
    })
    .await;
    let out = running.kill_now();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (state_dir, pids) = reported;
    assert!(!said.contains("panicked"), "the child failed: {said}");
    nothing_left(&state_dir, &pids).await;
}
