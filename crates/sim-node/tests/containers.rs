//! Pods as containers of a real OCI runtime, on the simulated kubelet against the simulated
//! API server of this process: a busybox image made from the host's static busybox sees
//! its own host name, root filesystem, PID and network namespaces, service-account files and
//! hosts file;
//! the faults act on the container (crash, hold and release, graceful deletion); and nothing
//! of a container is left when the process owning the kubelet is SIGKILLed.
//!
//! These tests need what containers need (root and runc or crun): elsewhere they say why
//! they did not run, except under `CI`, where they fail.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use sim_apiserver::ApiServer;
use sim_node::oci::Isolation;
use sim_node::upstream::SimulatedUpstream;
use sim_node::{Kubelet, KubeletConfig};
use sim_test_support::{WAIT, eventually};

const BUSYBOX: &str = "busybox:1.35";

/// An image mapped to the host's shell: an executable image, which sees the host's
/// system directories.
const HOST_SHELL: &str = "host-shell:1";

/// The variable that makes [`the_child_kubelet`] run (the path of its directory).
const CHILD_VAR: &str = "OPCONFORM_CONTAINERS_TEST_CHILD";

struct Node {
    _server: ApiServer,
    client: kube::Client,
    kubelet: Kubelet,
    name: String,
    /// Holds the images and the node's directory until the node is gone.
    _dir: tempfile::TempDir,
}

/// Whether containers can run here; when not, says why (and fails under `CI`).
fn containers_available() -> bool {
    match Isolation::detect(&std::env::temp_dir()) {
        Isolation::Containers(_) => true,
        Isolation::Processes { reason } => {
            assert!(
                std::env::var_os("CI").is_none(),
                "containers are required under CI: {reason}"
            );
            eprintln!("not run: pods cannot be containers here: {reason}");
            false
        }
    }
}

/// The config of node `box-<index>`, with pod IPs `127.255.<index>.N` of its own: the
/// default prefix, `100 + index`, is the same for every node of these tests, and two pods of
/// one address in this process (whose pod network routes by address) would be dialed one
/// for the other.
fn node_config(index: u8, dir: &Path) -> KubeletConfig {
    let mut config = KubeletConfig::new(&format!("box-{index}"), index, dir.join("node"));
    config.pod_ip_prefix = [255, index];
    config
}

impl Node {
    async fn start(index: u8) -> Self {
        let (server, client) = sim_test_support::server().await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        Self::start_in(index, server, client, dir).await
    }

    async fn start_in(
        index: u8,
        server: ApiServer,
        client: kube::Client,
        dir: tempfile::TempDir,
    ) -> Self {
        let busybox = sim_test_support::busybox_image(dir.path());
        let name = format!("box-{index}");
        let mut config = node_config(index, dir.path());
        config.images.insert(BUSYBOX, &busybox);
        config.images.insert(HOST_SHELL, "/bin/sh");
        config.restart_backoff_base = Duration::from_millis(200);
        config.restart_backoff_cap = Duration::from_millis(400);
        let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config)
            .await
            .expect("the kubelet starts");
        Self {
            _server: server,
            client,
            kubelet,
            name,
            _dir: dir,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn create(&self, name: &str, script: &str, change: impl FnOnce(&mut Value)) {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": self.name, "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", script]}]},
        });
        change(&mut pod);
        let pod: Pod = serde_json::from_value(pod).expect("a pod");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("the pod is created");
    }

    async fn wait(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let api = self.pods();
        let check = &check;
        eventually(&format!("pod {name}: {what}"), || {
            let api = api.clone();
            async move {
                let pod = serde_json::to_value(api.get_opt(name).await.ok()??).ok()?;
                check(&pod).then_some(pod)
            }
        })
        .await
    }

    async fn log_with(&self, name: &str, wanted: &str) -> String {
        eventually(&format!("{wanted:?} in the log of {name}"), || async {
            self.kubelet
                .log("default", name, None, false)
                .filter(|l| l.contains(wanted))
        })
        .await
    }

    /// The runtime's state of the container whose ID the status gives (`runc://ID`).
    fn runtime_state(&self, container_id: &str) -> Option<String> {
        let Isolation::Containers(rt) = &self.kubelet.config().isolation else {
            return None;
        };
        let id = container_id.split_once("://")?.1;
        let out = std::process::Command::new(rt.program())
            .arg("--root")
            .arg(rt.root())
            .args(["state", id])
            .output()
            .ok()?;
        let state: Value = serde_json::from_slice(&out.stdout).ok()?;
        state["status"].as_str().map(str::to_string)
    }
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn main_status(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

#[tokio::test]
async fn a_busybox_pod_sees_its_own_host_name_root_pid_namespace_and_service_account() {
    if !containers_available() {
        return;
    }
    let node = Node::start(151).await;
    // `$$` is how a pod spec escapes `$`: the shell gets `$$`.
    let script = "hostname; echo pid=$$$$; \
        cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
        test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token; \
        grep -q 'BEGIN CERTIFICATE' /var/run/secrets/kubernetes.io/serviceaccount/ca.crt && echo ca; \
        test -e /etc/debian_version || echo own root; \
        grep web-0 /etc/hosts; echo done; sleep 1";
    node.create("web-0", script, |pod| {
        pod["spec"]["restartPolicy"] = json!("Never");
    })
    .await;
    let log = node.log_with("web-0", "done").await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], "web-0", "the kernel's host name: {log}");
    assert_eq!(lines[1], "pid=1", "{log}");
    assert_eq!(lines[2], "default", "{log}");
    assert!(
        lines.contains(&"token") && lines.contains(&"ca"),
        "the projected credentials: {log}"
    );
    assert!(lines.contains(&"own root"), "not the host's /: {log}");
    let ip = node.kubelet.pod_ip("default", "web-0").expect("a pod IP");
    assert!(
        lines.contains(&format!("{ip}\tweb-0").as_str()),
        "the hosts file names the pod: {log}"
    );
    let pod = node
        .wait("web-0", "succeeded", |p| phase(p) == "Succeeded")
        .await;
    let id = main_status(&pod)["containerID"]
        .as_str()
        .unwrap_or_default();
    assert!(
        id.starts_with("runc://") || id.starts_with("crun://"),
        "{id}"
    );
}

/// The probes' commands run in the container: its files (an `emptyDir` kept across its
/// restarts) are not the host's. Its first run leaves no `/cache/ready`, so the liveness
/// probe fails and it is restarted; its second makes the file, and it turns Ready.
#[tokio::test]
async fn exec_probes_run_in_the_container_a_failing_liveness_restarts_it_and_readiness_follows() {
    if !containers_available() {
        return;
    }
    let node = Node::start(164).await;
    let script = "if [ -f /cache/once ]; then touch /cache/ready; else touch /cache/once; fi; \
        trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";
    node.create("probed", script, |pod| {
        let probe = |command: Value| json!({"exec": {"command": command}, "periodSeconds": 1, "failureThreshold": 1});
        pod["spec"]["volumes"] = json!([{"name": "cache", "emptyDir": {}}]);
        let main = &mut pod["spec"]["containers"][0];
        main["volumeMounts"] = json!([{"name": "cache", "mountPath": "/cache"}]);
        main["env"] = json!([{"name": "READY", "value": "/cache/ready"}]);
        main["livenessProbe"] = probe(json!(["test", "-f", "$(READY)"]));
        main["readinessProbe"] = probe(json!(["cat", "/cache/ready"]));
    })
    .await;
    let pod = node
        .wait("probed", "Ready after one restart", |p| {
            main_status(p)["ready"] == json!(true)
        })
        .await;
    assert_eq!(main_status(&pod)["restartCount"], 1, "{pod}");
    assert_eq!(phase(&pod), "Running");
}

/// An exec probe's command that outlives the probe's timeout is killed in the container,
/// as containerd kills the process of an `ExecSync` that timed out: killing the runtime's
/// `exec` alone would leave it running.
#[tokio::test]
async fn an_exec_probe_that_times_out_has_its_command_killed_in_the_container() {
    if !containers_available() {
        return;
    }
    let node = Node::start(171).await;
    let script = "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";
    node.create("slow-probe", script, |pod| {
        pod["spec"]["containers"][0]["readinessProbe"] = json!({
            "exec": {"command": ["sleep", "4171"]}, "timeoutSeconds": 2, "periodSeconds": 60
        });
    })
    .await;
    let command = ["sleep", "4171"];
    // The probe's command is killed at its timeout.
    sim_test_support::command_runs_then_ends(&command).await;
    let pod = node
        .wait("slow-probe", "running, not ready", |p| {
            phase(p) == "Running"
        })
        .await;
    assert_eq!(main_status(&pod)["ready"], json!(false), "{pod}");
}

#[tokio::test]
async fn a_container_writes_to_a_root_of_its_own_and_a_read_only_root_refuses_writes() {
    if !containers_available() {
        return;
    }
    let node = Node::start(170).await;
    let never = |pod: &mut Value| pod["spec"]["restartPolicy"] = json!("Never");
    node.create(
        "writer",
        "echo mine > /made-here && cat /made-here; echo done; sleep 1",
        never,
    )
    .await;
    let log = node.log_with("writer", "done").await;
    assert!(log.lines().any(|l| l == "mine"), "{log}");
    node.create(
        "reader",
        "test -e /made-here && echo seen; echo done; sleep 1",
        never,
    )
    .await;
    let log = node.log_with("reader", "done").await;
    assert!(!log.contains("seen"), "another container's write: {log}");
    node.create(
        "frozen",
        "echo no > /made-here 2>/dev/null || echo refused; echo done; sleep 1",
        |pod| {
            never(pod);
            pod["spec"]["containers"][0]["securityContext"] =
                json!({"readOnlyRootFilesystem": true});
        },
    )
    .await;
    let log = node.log_with("frozen", "done").await;
    assert!(log.lines().any(|l| l == "refused"), "{log}");
    // Where `Node::start` laid out the busybox image.
    let image = node._dir.path().join("busybox");
    assert!(image.join("bin/busybox").is_file());
    assert!(
        !image.join("made-here").exists(),
        "the image directory was written"
    );
}

#[tokio::test]
async fn spec_hostname_and_subdomain_name_the_pod_as_the_kubelet_does() {
    if !containers_available() {
        return;
    }
    let node = Node::start(152).await;
    node.create("named", "hostname; grep db /etc/hosts; echo done", |pod| {
        pod["spec"]["hostname"] = json!("db");
        pod["spec"]["subdomain"] = json!("store");
        pod["spec"]["restartPolicy"] = json!("Never");
    })
    .await;
    let log = node.log_with("named", "done").await;
    let ip = node.kubelet.pod_ip("default", "named").expect("a pod IP");
    assert_eq!(
        log,
        format!("db\n{ip}\tdb.store.default.svc.cluster.local\tdb\ndone\n")
    );
}

#[tokio::test]
async fn a_crashed_container_restarts_and_a_held_one_is_paused_until_released() {
    if !containers_available() {
        return;
    }
    let node = Node::start(153).await;
    node.create(
        "ticker",
        "echo up; while :; do echo tick; sleep 0.1; done",
        |_| {},
    )
    .await;
    let first = node
        .wait("ticker", "running", |p| phase(p) == "Running")
        .await;
    let first_id = main_status(&first)["containerID"].clone();
    node.log_with("ticker", "tick").await;
    node.kubelet
        .crash("default", "ticker", None)
        .expect("the container is crashed");
    let second = node
        .wait("ticker", "restarted", |p| {
            main_status(p)["restartCount"] == 1 && !main_status(p)["state"]["running"].is_null()
        })
        .await;
    let terminated = &main_status(&second)["lastState"]["terminated"];
    assert_eq!(terminated["exitCode"], 137, "{second:#}");
    assert_ne!(main_status(&second)["containerID"], first_id);
    let id = main_status(&second)["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    node.kubelet
        .hold_pod("default", "ticker")
        .expect("the pod is held");
    assert_eq!(node.runtime_state(&id).as_deref(), Some("paused"));
    node.kubelet
        .release_pod("default", "ticker")
        .expect("the pod is released");
    assert_eq!(node.runtime_state(&id).as_deref(), Some("running"));
    let before = node
        .kubelet
        .log("default", "ticker", None, false)
        .unwrap_or_default()
        .len();
    eventually("the released container ticks again", || async {
        let now = node.kubelet.log("default", "ticker", None, false)?.len();
        (now > before).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_pod_sends_sigterm_to_its_container_and_leaves_no_container_behind() {
    if !containers_available() {
        return;
    }
    let node = Node::start(154).await;
    node.create(
        "graceful",
        "trap 'echo got SIGTERM; exit 0' TERM; echo up; while :; do sleep 0.1; done",
        |_| {},
    )
    .await;
    let pod = node
        .wait("graceful", "running", |p| phase(p) == "Running")
        .await;
    let id = main_status(&pod)["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    node.log_with("graceful", "up").await;
    assert!(!node.kubelet.pids().is_empty(), "the container's processes");
    node.pods()
        .delete("graceful", &DeleteParams::default())
        .await
        .expect("the pod is deleted");
    let api = node.pods();
    eventually("the pod to be gone", || {
        let api = api.clone();
        async move { matches!(api.get_opt("graceful").await, Ok(None)).then_some(()) }
    })
    .await;
    eventually("no container process left", || async {
        node.kubelet.pids().is_empty().then_some(())
    })
    .await;
    assert_eq!(node.runtime_state(&id), None, "the runtime forgot it");
}

/// What a container leaves on the host: its runtime state, its cgroups, its mounts.
fn leftovers(state_dir: &Path, id: &str) -> Vec<String> {
    let mut found = Vec::new();
    if state_dir.join(id).exists() {
        found.push(format!("runtime state {}", state_dir.join(id).display()));
    }
    let cgroup = format!("opconform-{id}");
    let mut dirs = vec![PathBuf::from("/sys/fs/cgroup").join(&cgroup)];
    if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
        dirs.extend(hierarchies.flatten().map(|h| h.path().join(&cgroup)));
    }
    found.extend(
        dirs.into_iter()
            .filter(|d| d.exists())
            .map(|d| format!("cgroup {}", d.display())),
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    found.extend(
        mounts
            .lines()
            .filter(|l| l.contains(id))
            .map(|l| format!("mount {l}")),
    );
    found
}

/// Run by [`nothing_of_a_container_is_left_when_the_kubelets_process_is_killed`] in a
/// process of its own: a kubelet whose pod runs, until that process is SIGKILLed.
#[tokio::test]
async fn the_child_kubelet() {
    let Some(dir) = std::env::var_os(CHILD_VAR).map(PathBuf::from) else {
        return;
    };
    let (server, client) = sim_test_support::server().await;
    let tmp = tempfile::tempdir_in(&dir).expect("a directory");
    let node = Node::start_in(155, server, client, tmp).await;
    node.create("doomed", "echo up; sleep 1000", |_| {}).await;
    let pod = node
        .wait("doomed", "running", |p| phase(p) == "Running")
        .await;
    node.log_with("doomed", "up").await;
    let id = main_status(&pod)["containerID"]
        .as_str()
        .and_then(|id| id.split_once("://"))
        .map(|(_, id)| id.to_string())
        .expect("a container id");
    let Isolation::Containers(rt) = &node.kubelet.config().isolation else {
        panic!("containers expected");
    };
    let report = format!("{}\n{}\n", rt.root().display(), id);
    std::fs::write(dir.join("report.tmp"), report).expect("report written");
    std::fs::rename(dir.join("report.tmp"), dir.join("report")).expect("report renamed");
    tokio::time::sleep(WAIT * 10).await;
}

#[tokio::test]
async fn nothing_of_a_container_is_left_when_the_kubelets_process_is_killed() {
    if !containers_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("a directory");
    let mut child = std::process::Command::new(std::env::current_exe().expect("this test"))
        .args(["--exact", "the_child_kubelet", "--nocapture"])
        .env(CHILD_VAR, dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the child starts");
    let report = eventually("the child's container running", || async {
        std::fs::read_to_string(dir.path().join("report")).ok()
    })
    .await;
    let mut lines = report.lines();
    let state_dir = PathBuf::from(lines.next().expect("the state directory"));
    let id = lines.next().expect("the container id").to_string();
    assert!(
        !leftovers(&state_dir, &id).is_empty(),
        "the container exists while the child runs"
    );
    let _ = child.kill();
    let _ = child.wait();
    let left = eventually("nothing of the container left", || async {
        let left = leftovers(&state_dir, &id);
        left.is_empty().then_some(left)
    })
    .await;
    assert!(left.is_empty());
}

#[tokio::test]
async fn an_image_from_an_oci_archive_runs_its_entrypoint_env_user_and_working_directory() {
    if !containers_available() {
        return;
    }
    let (server, client) = sim_test_support::server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let rootfs = sim_test_support::busybox_image(dir.path());
    std::fs::create_dir_all(rootfs.join("srv/app")).expect("the working directory");
    let config = oci_image::ImageConfig {
        entrypoint: vec!["sh".into(), "-c".into()],
        cmd: vec!["echo \"$GREETING from $(pwd) as $(id -u):$(id -g)\"".into()],
        env: vec![
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "GREETING=hello".into(),
        ],
        working_dir: Some("/srv/app".into()),
        user: Some("65534:65534".into()),
    };
    let layout = dir.path().join("layout");
    oci_image::write_layout(&layout, "example.org/greeter:1", &rootfs, &config)
        .expect("the layout is written");
    let archive = dir.path().join("greeter.tar");
    let tarred = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout)
        .arg(".")
        .status()
        .expect("tar runs");
    assert!(tarred.success());
    // Mapped to the archive, unpacked into a cache of the test's own.
    let mut config = node_config(156, dir.path());
    config.images.insert("example.org/greeter:1", &archive);
    config.image_cache = dir.path().join("cache");
    let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config)
        .await
        .expect("the kubelet starts");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "greeter", "namespace": "default"},
        "spec": {"nodeName": "box-156", "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "example.org/greeter:1",
                "env": [{"name": "GREETING", "value": "hi"}]}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    let log = eventually("the greeter's line", || async {
        kubelet
            .log("default", "greeter", None, false)
            .filter(|l| l.ends_with('\n'))
    })
    .await;
    assert_eq!(log, "hi from /srv/app as 65534:65534\n");
    let status = eventually("the greeter's image id", || async {
        let pod = serde_json::to_value(pods.get_opt("greeter").await.ok()??).ok()?;
        // Empty while the container waits to be created.
        let id = pod["status"]["containerStatuses"][0]["imageID"]
            .as_str()
            .filter(|id| !id.is_empty())?
            .to_string();
        Some(id)
    })
    .await;
    assert!(
        status.starts_with("example.org/greeter:1@sha256:"),
        "{status}"
    );
    kubelet.shutdown().await;
}

#[tokio::test]
async fn a_configmap_update_reaches_the_volume_of_a_running_container() {
    if !containers_available() {
        return;
    }
    let node = Node::start(157).await;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(node.client.clone(), "default");
    let map = |text: &str| {
        serde_json::from_value(json!({"metadata": {"name": "greeting"}, "data": {"text": text}}))
            .expect("a ConfigMap")
    };
    maps.create(&PostParams::default(), &map("hello"))
        .await
        .expect("the ConfigMap is created");
    node.create(
        "reader",
        "last=; while :; do now=$(cat /config/text); \
         [ \"$now\" != \"$last\" ] && echo \"text=$now\" && last=$now; sleep 0.2; done",
        |pod| {
            pod["spec"]["volumes"] = json!([{"name": "config", "configMap": {"name": "greeting"}}]);
            pod["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "config", "mountPath": "/config", "readOnly": true}]);
        },
    )
    .await;
    node.log_with("reader", "text=hello").await;
    maps.replace("greeting", &PostParams::default(), &{
        let mut m = maps.get("greeting").await.expect("the ConfigMap is read");
        m.data = Some([("text".to_string(), "bonjour".to_string())].into());
        m
    })
    .await
    .expect("the ConfigMap is updated");
    node.log_with("reader", "text=bonjour").await;
}

#[tokio::test]
async fn skew_shifts_the_clock_inside_a_container_of_an_executable_image() {
    if !containers_available() {
        return;
    }
    assert!(
        sim_node::find_faketime().is_some(),
        "libfaketime is missing: apt-get install faketime (clock skew needs it)"
    );
    let node = Node::start(158).await;
    node.create("skewed", "", |pod| {
        pod["spec"]["containers"][0] = json!({"name": "main", "image": HOST_SHELL,
            "command": ["/bin/sh", "-c", "while :; do date +%s; sleep 0.2; done"]});
    })
    .await;
    let offset = || {
        let log = node.kubelet.log("default", "skewed", None, false)?;
        let last: i64 = log.lines().last()?.trim().parse().ok()?;
        Some(last - chrono::Utc::now().timestamp())
    };
    eventually("the container's clock to match ours", || async {
        offset().filter(|d| d.abs() <= 2)
    })
    .await;
    node.kubelet
        .skew_pod("default", "skewed", chrono::Duration::hours(1))
        .expect("the pod is skewed");
    eventually("the container's clock to run an hour ahead", || async {
        offset().filter(|d| (d - 3600).abs() <= 2)
    })
    .await;
}

#[tokio::test]
async fn an_image_missing_from_its_archive_waits_in_err_image_pull_then_image_pull_back_off() {
    if !containers_available() {
        return;
    }
    let (server, client) = sim_test_support::server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let rootfs = sim_test_support::busybox_image(dir.path());
    let layout = dir.path().join("layout");
    oci_image::write_layout(
        &layout,
        "example.org/other:1",
        &rootfs,
        &oci_image::ImageConfig::default(),
    )
    .expect("the layout is written");
    let mut config = node_config(159, dir.path());
    config.images.insert("example.org/wanted:1", &layout);
    config.image_cache = dir.path().join("cache");
    config.restart_backoff_base = Duration::from_millis(500);
    let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config)
        .await
        .expect("the kubelet starts");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "unpulled", "namespace": "default"},
        "spec": {"nodeName": "box-159",
            "containers": [{"name": "main", "image": "example.org/wanted:1"}]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the pod is created");
    let waiting = |reason: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(&format!("the container waiting in {reason}"), || async {
                let pod = serde_json::to_value(pods.get_opt("unpulled").await.ok()??).ok()?;
                let waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"].clone();
                (waiting["reason"] == reason).then_some(waiting)
            })
            .await
        }
    };
    let pull = waiting("ErrImagePull").await;
    let message = pull["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("example.org/wanted:1") && message.contains("example.org/other:1"),
        "names the image and what the layout holds: {message}"
    );
    let backoff = waiting("ImagePullBackOff").await;
    assert!(
        backoff["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Back-off pulling image \"example.org/wanted:1\""),
        "{backoff}"
    );
    kubelet.shutdown().await;
}

#[tokio::test]
async fn replicas_binding_one_port_serve_each_in_its_own_network_namespace() {
    if !containers_available() {
        return;
    }
    let node = Node::start(163).await;
    // Both bind every address's port 8081, as a manager binds `:8081`.
    let script = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8081 -h /www";
    for name in ["web-a", "web-b"] {
        node.create(name, script, |pod| {
            pod["spec"]["containers"][0]["readinessProbe"] =
                json!({"httpGet": {"path": "/", "port": 8081}, "periodSeconds": 1});
        })
        .await;
    }
    for name in ["web-a", "web-b"] {
        // Ready: the kubelet's probe reached the pod inside its namespace.
        let pod = node
            .wait(name, "ready", |p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .await;
        let ip: std::net::IpAddr = pod["status"]["podIP"]
            .as_str()
            .and_then(|ip| ip.parse().ok())
            .expect("a pod IP");
        let addr = std::net::SocketAddr::new(ip, 8081);
        let page = plain_http::get_text(addr, "/", Duration::from_secs(5))
            .await
            .expect("the pod's server answers at its address");
        assert_eq!(page, format!("{name}\n"));
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "nothing listens at {addr} in the host's namespace"
        );
    }
}

#[tokio::test]
async fn an_image_of_a_registry_the_kubelet_pulls_from_runs_as_its_pull_policy_says() {
    if !containers_available() {
        return;
    }
    let Some(registry) = sim_test_support::registry::Registry::start(false) else {
        return;
    };
    let (server, client) = sim_test_support::server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let rootfs = sim_test_support::busybox_image(dir.path());
    let layout = dir.path().join("layout");
    echo_layout(&layout, "busybox", &rootfs, "pulled as $(hostname)");
    let pushed = registry.image("tools/busybox:1");
    registry
        .push_layout(
            &layout,
            &pushed,
            &oci_client::secrets::RegistryAuth::Anonymous,
        )
        .await;
    let mut config = node_config(160, dir.path());
    config.registries = vec![registry.host.clone()];
    config.image_cache = dir.path().join("cache");
    let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config)
        .await
        .expect("the kubelet starts");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let create = |name: &str, image: &str, policy: Option<&str>| {
        let mut container = json!({"name": "main", "image": image});
        if let Some(policy) = policy {
            container["imagePullPolicy"] = json!(policy);
        }
        serde_json::from_value::<Pod>(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "box-160", "restartPolicy": "Never", "containers": [container]},
        }))
        .expect("a pod")
    };
    let status_of = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let pod = serde_json::to_value(pods.get_opt(name).await.ok()??).ok()?;
            Some(pod["status"]["containerStatuses"][0].clone())
        }
    };
    for (name, image, policy) in [
        ("pulled", pushed.as_str(), None),
        ("elsewhere", "registry.example.org/app:1", None),
        ("never", &registry.image("tools/busybox:2"), Some("Never")),
    ] {
        pods.create(&PostParams::default(), &create(name, image, policy))
            .await
            .expect("the pod is created");
    }
    let log = eventually("the pulled image's line", || async {
        kubelet
            .log("default", "pulled", None, false)
            .filter(|l| l.ends_with('\n'))
    })
    .await;
    assert_eq!(log, "pulled as pulled\n");
    let pulled = eventually("the pulled image's id", || async {
        status_of("pulled").await?["imageID"]
            .as_str()
            .filter(|id| !id.is_empty())
            .map(str::to_string)
    })
    .await;
    assert!(pulled.starts_with(&format!("{pushed}@sha256:")), "{pulled}");
    // Not a registry the kubelet pulls from: a stand-in, as any unmapped image.
    let elsewhere = eventually("the other registry's image id", || async {
        status_of("elsewhere").await?["imageID"]
            .as_str()
            .filter(|id| !id.is_empty())
            .map(str::to_string)
    })
    .await;
    assert!(elsewhere.starts_with("standin://"), "{elsewhere}");
    // Never, and never pulled: the kubelet's own reason and message.
    let never = eventually("ErrImageNeverPull", || async {
        let status = status_of("never").await?;
        (status["state"]["waiting"]["reason"] == "ErrImageNeverPull").then_some(status)
    })
    .await;
    assert_eq!(
        never["state"]["waiting"]["message"],
        format!(
            "Container image \"{}\" is not present with pull policy of Never",
            registry.image("tools/busybox:2")
        )
    );
    kubelet.shutdown().await;
}

/// Writes into `layout` an image `name` of `rootfs` whose container prints `line`.
fn echo_layout(layout: &Path, name: &str, rootfs: &Path, line: &str) {
    let config = oci_image::ImageConfig {
        entrypoint: vec!["sh".into(), "-c".into()],
        cmd: vec![format!("echo {line}")],
        env: vec!["PATH=/bin".into()],
        working_dir: None,
        user: None,
    };
    oci_image::write_layout(layout, name, rootfs, &config).expect("the layout is written");
}

/// A stand-in Docker engine holding the image `name` of `rootfs` that prints `line`,
/// exported as docker 25+ exports it (an OCI layout, preferred to its manifest.json); and
/// its image id.
fn engine_holding(
    dir: &Path,
    rootfs: &Path,
    name: &str,
    line: &str,
) -> (sim_test_support::docker_engine::StandInEngine, String) {
    let layout = dir.join("engine-layout");
    echo_layout(&layout, name, rootfs, line);
    let id = oci_image::ImageStore::new(dir.join("scratch"))
        .unpack(&oci_image::Source::Layout(layout.clone()), None)
        .expect("the layout unpacks")
        .digest;
    let archive = dir.join("engine.tar");
    let tarred = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout)
        .arg(".")
        .status()
        .expect("tar runs");
    assert!(tarred.success());
    let engine = sim_test_support::docker_engine::StandInEngine::start();
    engine.add(
        &[name],
        &id,
        json!({"Entrypoint": ["sh", "-c"], "Cmd": [format!("echo {line}")], "Env": ["PATH=/bin"]}),
        std::fs::read(&archive).expect("the archive"),
    );
    (engine, id)
}

/// A pod of one container of `image` on `node`, with the pull policy `policy`.
fn pod_of(name: &str, node: &str, image: &str, policy: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "imagePullPolicy": policy}]},
    }))
    .expect("a pod")
}

/// The first line `name` printed.
async fn line_of(kubelet: &Kubelet, name: &str) -> String {
    eventually(&format!("the line of {name}"), || async {
        kubelet
            .log("default", name, None, false)
            .filter(|l| l.ends_with('\n'))
    })
    .await
}

#[tokio::test]
async fn an_image_of_the_docker_engine_runs_whatever_its_pull_policy_and_is_exported_once() {
    if !containers_available() {
        return;
    }
    let (server, client) = sim_test_support::server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let rootfs = sim_test_support::busybox_image(dir.path());
    let (engine, id) = engine_holding(
        dir.path(),
        &rootfs,
        "example.org/engine:1",
        "from the engine as $(hostname)",
    );
    let mut config = node_config(161, dir.path());
    config.image_cache = dir.path().join("cache");
    config.docker_engine = Some(oci_image::DockerEngine::unix(engine.socket()));
    let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config)
        .await
        .expect("the kubelet starts");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Always: no registry this kubelet pulls from has it, so the engine's copy is used.
    for (name, image, policy) in [
        ("first", "example.org/engine:1", "IfNotPresent"),
        ("never", "example.org/engine:1", "Never"),
        ("always", "example.org/engine:1", "Always"),
        ("absent", "example.org/absent:1", "IfNotPresent"),
    ] {
        pods.create(
            &PostParams::default(),
            &pod_of(name, "box-161", image, policy),
        )
        .await
        .expect("the pod is created");
    }
    for name in ["first", "never", "always"] {
        assert_eq!(
            line_of(&kubelet, name).await,
            format!("from the engine as {name}\n")
        );
    }
    let image_id = |name: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(&format!("the image id of {name}"), || async {
                let pod = serde_json::to_value(pods.get_opt(name).await.ok()??).ok()?;
                pod["status"]["containerStatuses"][0]["imageID"]
                    .as_str()
                    .filter(|id| !id.is_empty())
                    .map(str::to_string)
            })
            .await
        }
    };
    assert_eq!(
        image_id("first").await,
        format!("example.org/engine:1@{id}")
    );
    // Not in the engine, of no registry the kubelet pulls from: a stand-in.
    let absent = image_id("absent").await;
    assert!(absent.starts_with("standin://"), "{absent}");
    assert_eq!(engine.exports(), 1, "three pods, one export");
    kubelet.shutdown().await;
}

#[tokio::test]
async fn always_pulls_from_a_registry_the_kubelet_pulls_from_even_when_the_engine_has_the_image() {
    if !containers_available() {
        return;
    }
    let Some(registry) = sim_test_support::registry::Registry::start(false) else {
        return;
    };
    let (server, client) = sim_test_support::server().await;
    let dir = tempfile::tempdir().expect("a directory");
    let rootfs = sim_test_support::busybox_image(dir.path());
    // The same name, two images: each says where it came from.
    let pushed = registry.image("tools/busybox:1");
    let layout = dir.path().join("registry-layout");
    echo_layout(&layout, &pushed, &rootfs, "from the registry");
    registry
        .push_layout(
            &layout,
            &pushed,
            &oci_client::secrets::RegistryAuth::Anonymous,
        )
        .await;
    let (engine, _) = engine_holding(dir.path(), &rootfs, &pushed, "from the engine");
    let mut config = node_config(162, dir.path());
    config.registries = vec![registry.host.clone()];
    config.image_cache = dir.path().join("cache");
    config.docker_engine = Some(oci_image::DockerEngine::unix(engine.socket()));
    let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config)
        .await
        .expect("the kubelet starts");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, policy, origin) in [
        ("always", "Always", "registry"),
        ("present", "IfNotPresent", "engine"),
    ] {
        pods.create(
            &PostParams::default(),
            &pod_of(name, "box-162", &pushed, policy),
        )
        .await
        .expect("the pod is created");
        assert_eq!(
            line_of(&kubelet, name).await,
            format!("from the {origin}\n")
        );
    }

    // An engine in trouble: the kubelet's ErrImagePull, naming the engine and the image.
    engine.fail_with(500, "layer store is corrupt");
    let other = registry.image("tools/other:1");
    pods.create(
        &PostParams::default(),
        &pod_of("troubled", "box-162", &other, "IfNotPresent"),
    )
    .await
    .expect("the pod is created");
    let waiting = eventually("the troubled pod in ErrImagePull", || async {
        let pod = serde_json::to_value(pods.get_opt("troubled").await.ok()??).ok()?;
        let waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (waiting["reason"] == "ErrImagePull").then_some(waiting)
    })
    .await;
    let message = waiting["message"].as_str().unwrap_or_default();
    for part in [
        format!("unix://{}", engine.socket().display()),
        other,
        "layer store is corrupt".to_string(),
    ] {
        assert!(message.contains(&part), "{part} missing from: {message}");
    }
    assert_eq!(engine.exports(), 1);
    kubelet.shutdown().await;
}
