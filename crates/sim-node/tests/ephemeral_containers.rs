//! Ephemeral containers on the simulated kubelet, against the simulated API server of this
//! process: added to a pod through `pods/ephemeralcontainers` (as `kubectl debug` adds
//! them), run once from a busybox-like image directory, logged, and reported in
//! `status.ephemeralContainerStatuses` until they end — never restarted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sim_apiserver::{ApiServer, ApiServerConfig};
use sim_node::upstream::SimulatedUpstream;
use sim_node::{Kubelet, KubeletConfig};

/// How long any wait of these tests may take.
const WAIT: Duration = Duration::from_secs(20);

/// The image whose filesystem is a directory holding `bin/sh`.
const BUSYBOX: &str = "busybox:1.36";

/// An API server and one kubelet whose node runs [`BUSYBOX`] from a directory made from
/// the host's static busybox.
struct Node {
    _server: ApiServer,
    client: kube::Client,
    kubelet: Option<Kubelet>,
    config: KubeletConfig,
    name: String,
    dir: tempfile::TempDir,
}

impl Node {
    /// Node number `index` (its IPs follow from it: each test uses its own).
    async fn start(index: u8) -> Self {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("the api server starts");
        let client = server.admin_client().await.expect("an admin client");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let busybox = busybox(dir.path());
        let name = format!("ephemeral-{index}");
        let mut config = KubeletConfig::new(&name, index, dir.path().join("node"));
        config.images.insert(BUSYBOX, &busybox);
        let kubelet = Kubelet::start(Arc::new(SimulatedUpstream(server.handle())), config.clone())
            .await
            .expect("the kubelet starts");
        Self {
            _server: server,
            client,
            kubelet: Some(kubelet),
            config,
            name,
            dir,
        }
    }

    fn kubelet(&self) -> &Kubelet {
        self.kubelet.as_ref().expect("a kubelet runs")
    }

    /// Stops the kubelet as a machine losing power would (its processes die with it) and
    /// starts another one for the same node.
    async fn restart_kubelet(&mut self) {
        if let Some(old) = self.kubelet.take() {
            old.shutdown().await;
        }
        let upstream = Arc::new(SimulatedUpstream(self._server.handle()));
        let fresh = Kubelet::start(upstream, self.config.clone()).await;
        self.kubelet = Some(fresh.expect("the kubelet starts again"));
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Creates a pod on this node: `main` runs `script` with `sh -c`.
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

    /// A host directory the tests write flags into, which pods see at `/flags`.
    fn flags(&self) -> PathBuf {
        let dir = self.dir.path().join("flags");
        std::fs::create_dir_all(&dir).expect("the flags directory is made");
        dir
    }

    /// Gives `pod` the volume `flags`: [`Node::flags`] as a hostPath.
    fn mount_flags(&self, pod: &mut Value) {
        pod["spec"]["volumes"] =
            json!([{"name": "flags", "hostPath": {"path": self.flags(), "type": "Directory"}}]);
    }

    /// Adds ephemeral container `name` running `script` with `sh -c`, as `kubectl debug`
    /// does: a strategic merge patch of `pods/ephemeralcontainers`.
    async fn debug(&self, pod: &str, name: &str, script: &str) {
        let patch = json!({"spec": {"ephemeralContainers": [{
            "name": name, "image": BUSYBOX, "command": ["sh", "-c", script],
            "targetContainerName": "main", "terminationMessagePolicy": "File"}]}});
        self.pods()
            .patch_subresource(
                "ephemeralcontainers",
                pod,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
            .expect("the ephemeral container is added");
    }

    /// The pod (as JSON) once `check` holds for it.
    async fn wait(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let pod = self.pods().get_opt(name).await.expect("a pod read");
            let pod = serde_json::to_value(pod).expect("pod json");
            if check(&pod) {
                return pod;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pod {name}: {what} within {WAIT:?}; last seen: {pod:#}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the API server's log endpoint answers for `container` of `pod`.
    async fn api_log(&self, pod: &str, container: &str) -> String {
        let request = http::Request::get(format!(
            "/api/v1/namespaces/default/pods/{pod}/log?container={container}"
        ))
        .body(Vec::new())
        .expect("a request");
        self.client
            .request_text(request)
            .await
            .expect("the log is served")
    }
}

/// A directory image holding `bin/sh` (a link to the host's shell).
fn busybox(dir: &Path) -> PathBuf {
    sim_test_support::busybox_image(dir)
}

/// The status of ephemeral container `name`, `null` while there is none.
fn ephemeral<'p>(pod: &'p Value, name: &str) -> &'p Value {
    pod["status"]["ephemeralContainerStatuses"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

/// Loops until SIGTERM, then exits 0.
const IDLE: &str = "trap 'echo stopping; exit 0' TERM; while :; do sleep 0.1; done";

#[tokio::test]
async fn an_ephemeral_container_runs_once_and_ends_terminated_with_its_exit_code_and_its_log() {
    let node = Node::start(141).await;
    node.create("debuggee", &format!("echo main up; {IDLE}"), |_| {})
        .await;
    let running = node
        .wait("debuggee", "running", |p| phase(p) == "Running")
        .await;
    assert!(running["status"]["ephemeralContainerStatuses"].is_null());
    node.debug(
        "debuggee",
        "debugger",
        "echo hello from $HOSTNAME; echo to stderr >&2; exit 3",
    )
    .await;
    let pod = node
        .wait("debuggee", "the debugger terminated", |p| {
            !ephemeral(p, "debugger")["state"]["terminated"].is_null()
        })
        .await;
    let debugger = ephemeral(&pod, "debugger");
    let terminated = &debugger["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 3, "{debugger:#}");
    assert_eq!(terminated["reason"], "Error");
    assert!(terminated["startedAt"].is_string() && terminated["finishedAt"].is_string());
    assert_eq!(terminated["containerID"], debugger["containerID"]);
    assert_eq!(debugger["image"], BUSYBOX);
    assert_eq!(debugger["restartCount"], 0);
    assert_eq!(debugger["ready"], false);
    assert!(debugger.get("started").is_none(), "{debugger:#}");
    assert_eq!(debugger["lastState"], json!({}));
    // Its log, from the kubelet and through the API server's log endpoint (kubectl logs -c).
    let log = node
        .kubelet()
        .log("default", "debuggee", Some("debugger"), false)
        .expect("the debugger's log");
    // Two pipes: the order of their lines is the order they were read in.
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["hello from debuggee", "to stderr"], "{log}");
    assert_eq!(node.api_log("debuggee", "debugger").await, log);
    // The app container's log stays the default one.
    assert_eq!(node.api_log("debuggee", "main").await, "main up\n");
    // Never restarted, and the pod runs on as before.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = node.wait("debuggee", "read again", |p| !p.is_null()).await;
    assert_eq!(ephemeral(&later, "debugger"), debugger);
    assert_eq!(
        node.kubelet()
            .log("default", "debuggee", Some("debugger"), false)
            .as_deref(),
        Some(log.as_str())
    );
    assert_eq!(phase(&later), "Running");
    assert_eq!(later["status"]["containerStatuses"][0]["restartCount"], 0);
    let ready = later["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned();
    assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("True")));
}

#[tokio::test]
async fn a_second_ephemeral_container_runs_beside_the_first_and_stops_with_the_pod() {
    let node = Node::start(142).await;
    node.create("debuggee", IDLE, |_| {}).await;
    node.wait("debuggee", "running", |p| phase(p) == "Running")
        .await;
    node.debug("debuggee", "first", "echo first").await;
    node.wait("debuggee", "the first ended", |p| {
        ephemeral(p, "first")["state"]["terminated"]["exitCode"] == 0
    })
    .await;
    node.debug("debuggee", "second", &format!("echo second; {IDLE}"))
        .await;
    let pod = node
        .wait("debuggee", "the second running", |p| {
            !ephemeral(p, "second")["state"]["running"].is_null()
        })
        .await;
    assert_eq!(
        ephemeral(&pod, "first")["state"]["terminated"]["reason"],
        "Completed"
    );
    node.pods()
        .delete("debuggee", &DeleteParams::default())
        .await
        .expect("the pod is deleted");
    let deadline = tokio::time::Instant::now() + WAIT;
    while node
        .pods()
        .get_opt("debuggee")
        .await
        .expect("a pod read")
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod is gone within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = node
        .kubelet()
        .log("default", "debuggee", Some("second"), false)
        .unwrap_or_default();
    assert!(
        log.is_empty(),
        "the pod's containers are gone with it: {log}"
    );
    assert!(node.kubelet().pids().is_empty(), "no process is left");
}

#[tokio::test]
async fn an_ephemeral_container_starts_while_init_containers_still_run() {
    let node = Node::start(143).await;
    let flag = node.flags().join("initialized");
    let wait_for_flag = "while [ ! -e /flags/initialized ]; do sleep 0.1; done";
    node.create("initializing", IDLE, |pod| {
        pod["spec"]["initContainers"] = json!([{"name": "setup", "image": BUSYBOX,
            "command": ["sh", "-c", wait_for_flag], "volumeMounts": [{"name": "flags", "mountPath": "/flags"}]}]);
        node.mount_flags(pod);
    })
    .await;
    node.wait("initializing", "initializing", |p| {
        !p["status"]["initContainerStatuses"][0]["state"]["running"].is_null()
    })
    .await;
    node.debug("initializing", "early", "echo early").await;
    let pod = node
        .wait("initializing", "the ephemeral container ended", |p| {
            !ephemeral(p, "early")["state"]["terminated"].is_null()
        })
        .await;
    assert_eq!(phase(&pod), "Pending", "the init container still runs");
    assert_eq!(
        ephemeral(&pod, "early")["state"]["terminated"]["exitCode"],
        0
    );
    std::fs::write(&flag, "").expect("flag written");
    node.wait("initializing", "running", |p| phase(p) == "Running")
        .await;
}

#[tokio::test]
async fn an_ephemeral_container_still_running_is_stopped_when_its_pod_ends() {
    let node = Node::start(144).await;
    let flag = node.flags().join("done");
    let until_flag = "while [ ! -e /flags/done ]; do sleep 0.1; done";
    node.create("finite", until_flag, |pod| {
        pod["spec"]["restartPolicy"] = json!("Never");
        pod["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "flags", "mountPath": "/flags"}]);
        node.mount_flags(pod);
    })
    .await;
    node.wait("finite", "running", |p| phase(p) == "Running")
        .await;
    node.debug("finite", "lingering", IDLE).await;
    node.wait("finite", "the ephemeral container running", |p| {
        !ephemeral(p, "lingering")["state"]["running"].is_null()
    })
    .await;
    std::fs::write(&flag, "").expect("flag written");
    let pod = node
        .wait("finite", "succeeded, the ephemeral container ended", |p| {
            phase(p) == "Succeeded" && !ephemeral(p, "lingering")["state"]["terminated"].is_null()
        })
        .await;
    let lingering = ephemeral(&pod, "lingering");
    assert_eq!(
        lingering["state"]["terminated"]["exitCode"], 0,
        "{lingering:#}"
    );
    assert_eq!(lingering["restartCount"], 0);
    let log = node
        .kubelet()
        .log("default", "finite", Some("lingering"), false)
        .unwrap_or_default();
    // SIGTERM reaches the whole process group: sh may report its `sleep` terminated first.
    assert!(log.ends_with("stopping\n"), "{log}");
}

#[tokio::test]
async fn a_kubelet_that_starts_again_does_not_run_an_ended_ephemeral_container_again() {
    let mut node = Node::start(145).await;
    node.create("debuggee", IDLE, |_| {}).await;
    node.wait("debuggee", "running", |p| phase(p) == "Running")
        .await;
    node.debug("debuggee", "once", "echo once; exit 4").await;
    let before = node
        .wait("debuggee", "the ephemeral container ended", |p| {
            ephemeral(p, "once")["state"]["terminated"]["exitCode"] == 4
        })
        .await;
    node.restart_kubelet().await;
    let main_id = before["status"]["containerStatuses"][0]["containerID"].clone();
    let after = node
        .wait("debuggee", "main started again by the new kubelet", |p| {
            phase(p) == "Running"
                && p["status"]["containerStatuses"][0]["containerID"] != main_id
                && !p["status"]["containerStatuses"][0]["state"]["running"].is_null()
        })
        .await;
    assert_eq!(ephemeral(&after, "once"), ephemeral(&before, "once"));
    assert_eq!(
        node.kubelet()
            .log("default", "debuggee", Some("once"), false),
        None,
        "the new kubelet never ran it"
    );
}
