//! The simulated kubelet against an in-process API server: pods of a fixture image run as
//! real processes (a small shell script written at test time), with their env, args, IPs,
//! logs, probes, restarts, graceful deletion, and every process and network fault.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, LogParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use sim_apiserver::ApiServer;
use sim_node::oci::Isolation;
use sim_node::proxy::Mode;
use sim_node::upstream::SimulatedUpstream;
use sim_node::{Kubelet, KubeletConfig, find_faketime};
use sim_test_support::{WAIT, eventually};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The fixture container: records each start in `starts`, prints its args and env, and
/// then, by mode (the first argument):
/// - `run` (default): writes `heartbeat` (ns) and `clock` (s) every 100 ms; SIGTERM → "got SIGTERM", exit 0;
/// - `ignore-term`: the same, but SIGTERM is only logged;
/// - `await`: writes `waiting for go`, then once a file `go` is in its directory `got go`,
///   and exits 0;
/// - `idle`: sleeps (two processes, no CPU) until SIGTERM;
/// - `exit CODE [SECONDS]`: exits with CODE (after SECONDS), recording the time in `exits`;
/// - `kubectl`: every 200 ms `kubectl get --raw /version` through its KUBECONFIG, printing
///   `api: ok|failed|hung <ms>ms`.
const FIXTURE: &str = r#"#!/bin/sh
date +%s%N >> starts
echo "args: $*"
env | sort | sed 's/^/env: /'
mode="${1:-run}"
case "$mode" in
  exit)
    sleep "${3:-0}"
    echo "exiting with $2"
    date +%s%N >> exits
    exit "$2" ;;
  ignore-term)
    trap 'echo "ignoring SIGTERM"' TERM ;;
  await)
    echo "waiting for go"
    while [ ! -e go ]; do sleep 0.05; done
    echo "got go"
    exit 0 ;;
  idle)
    trap 'exit 0' TERM
    while :; do sleep 10; done ;;
  kubectl)
    trap 'echo "got SIGTERM"; exit 0' TERM
    while :; do
      s=$(date +%s%N)
      if timeout 2 kubectl --kubeconfig "$KUBECONFIG" get --raw /version >/dev/null 2>kubectl.err; then
        r=ok
      elif [ $? = 124 ]; then
        r=hung
      else
        r=failed
      fi
      e=$(date +%s%N)
      echo "api: $r $(( (e - s) / 1000000 ))ms"
      sleep 0.2
    done ;;
  *)
    trap 'echo "got SIGTERM"; exit 0' TERM ;;
esac
while :; do
  date +%s%N > heartbeat.tmp && mv heartbeat.tmp heartbeat
  date +%s > clock.tmp && mv clock.tmp clock
  sleep 0.1
done
"#;

const IMAGE: &str = "fixture:dev";

/// An API server, a kubelet for node `worker-INDEX` mapping [`IMAGE`] to the fixture.
struct Cluster {
    server: ApiServer,
    client: Client,
    kubelet: Option<Kubelet>,
    node: String,
    _dir: tempfile::TempDir,
}

fn write_fixture(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("podfixture.sh");
    std::fs::write(&path, FIXTURE).expect("fixture written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

impl Cluster {
    /// Each test uses its own `index` so pod IPs never collide between parallel tests.
    async fn start(index: u8) -> Self {
        Self::start_with(index, |_| {}).await
    }

    async fn start_with(index: u8, tweak: impl FnOnce(&mut KubeletConfig)) -> Self {
        let (server, client) = sim_test_support::server().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let fixture = write_fixture(dir.path());
        let node = format!("worker-{index}");
        let mut config = KubeletConfig::new(&node, index, dir.path().join("node"));
        // The fixture is a host script that reads and writes its pod directory: these tests
        // are the process path's (tests/containers.rs runs containers).
        config.isolation = Isolation::Processes {
            reason: "the process path is under test".into(),
        };
        config.images.insert(IMAGE, &fixture);
        config.restart_backoff_base = Duration::from_millis(200);
        config.restart_backoff_cap = Duration::from_millis(1600);
        tweak(&mut config);
        let kubelet = Kubelet::start(
            std::sync::Arc::new(SimulatedUpstream(server.handle())),
            config,
        )
        .await
        .expect("the kubelet starts");
        Self {
            server,
            client,
            kubelet: Some(kubelet),
            node,
            _dir: dir,
        }
    }

    fn kubelet(&self) -> &Kubelet {
        self.kubelet.as_ref().expect("kubelet running")
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn pod(&self, name: &str, args: &[&str]) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": self.node, "containers": [{"name": "main", "image": IMAGE, "args": args}]},
        })
    }

    async fn create(&self, pod: Value) -> Pod {
        let pod: Pod = serde_json::from_value(pod).expect("a pod");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("pod created")
    }

    async fn wait(&self, name: &str, what: &str, check: impl Fn(&Pod) -> bool) -> Pod {
        let api = self.pods();
        let check = &check;
        eventually(&format!("pod {name}: {what}"), || {
            let api = api.clone();
            async move { api.get_opt(name).await.ok().flatten().filter(|p| check(p)) }
        })
        .await
    }

    async fn running(&self, name: &str) -> Pod {
        self.wait(name, "running and ready", |p| {
            phase(p) == "Running" && ready(p)
        })
        .await
    }

    async fn gone(&self, name: &str) {
        let api = self.pods();
        eventually(&format!("pod {name} to be gone"), || {
            let api = api.clone();
            async move { matches!(api.get_opt(name).await, Ok(None)).then_some(()) }
        })
        .await;
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.kubelet().pod_dir("default", name).expect("pod dir")
    }

    fn log(&self, name: &str) -> String {
        self.kubelet()
            .log("default", name, None, false)
            .unwrap_or_default()
    }

    async fn log_line(&self, name: &str, after: usize, wanted: &str) -> usize {
        eventually(&format!("{wanted:?} in the log of {name}"), || async {
            let lines: Vec<String> = self.log(name).lines().map(str::to_string).collect();
            lines
                .iter()
                .enumerate()
                .skip(after)
                .find(|(_, l)| l.contains(wanted))
                .map(|(i, _)| i + 1)
        })
        .await
    }
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn ready(p: &Pod) -> bool {
    condition(p, "Ready")
}

fn condition(p: &Pod, kind: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == kind && c.status == "True"))
}

fn container(p: &Pod) -> Value {
    serde_json::to_value(p).unwrap()["status"]["containerStatuses"][0].clone()
}

fn pid_of(p: &Pod) -> u32 {
    container(p)["containerID"]
        .as_str()
        .and_then(|id| id.strip_prefix("opconform://"))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no process container id in {}", container(p)))
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string))
        })
        .is_some_and(|state| state != "Z")
}

fn process_state(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rfind(')')
        .and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string))
}

/// The states of the processes in `pid`'s process group, the group leader (the kubelet's
/// watchdog) left out.
fn group_states(pid: u32) -> Vec<String> {
    let Some(group) = process_group_of(pid) else {
        return Vec::new();
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| *p as i32 != group && process_group_of(*p) == Some(group))
        .filter_map(process_state)
        .collect()
}

/// Whether `pid`'s container is frozen: its processes are stopped (T), or blocked (D) on a
/// stopped child, as a shell in `vfork` is.
fn frozen(pid: u32) -> bool {
    let states = group_states(pid);
    states.iter().any(|s| s == "T") && states.iter().all(|s| s == "T" || s == "D" || s == "Z")
}

/// Waits until the container of `pid` is frozen (signals are delivered asynchronously).
async fn stopped(pid: u32) {
    let deadline = Instant::now() + WAIT;
    while !frozen(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} is not frozen: its group is in states {:?}",
            group_states(pid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn all_dead(what: &str, pids: &[u32]) {
    let pids = pids.to_vec();
    eventually(what, || {
        let pids = pids.clone();
        async move { pids.iter().all(|p| !alive(*p)).then_some(()) }
    })
    .await;
}

fn read_number(path: &Path) -> Option<i128> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test]
async fn three_fixture_pods_get_distinct_ips_run_with_their_env_and_args_and_serve_their_logs() {
    let c = Cluster::start(1).await;
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "settings"}, "data": {"greeting": "hello"}}),
    )
    .unwrap();
    Api::<ConfigMap>::namespaced(c.client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let mut created = Vec::new();
    for i in 0..3 {
        let mut pod = c.pod(
            &format!("p-{i}"),
            &[
                "run",
                "--name=$(POD_NAME)",
                "--ip=$(POD_IP)",
                "$$(POD_NAME)",
                "$(UNKNOWN)",
            ],
        );
        pod["spec"]["containers"][0]["env"] = json!([
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
            {"name": "WHERE", "value": "$(POD_NAME)@$(NODE_NAME)"},
        ]);
        created.push((Instant::now(), c.create(pod).await));
    }
    let mut ips = BTreeSet::new();
    for (i, (t0, pod)) in created.iter().enumerate() {
        let name = format!("p-{i}");
        let running = c.running(&name).await;
        println!(
            "pod {name}: created → Running and Ready in {:?}",
            t0.elapsed()
        );
        let status = running.status.clone().unwrap();
        let ip: Ipv4Addr = status.pod_ip.clone().unwrap().parse().unwrap();
        assert_eq!(
            ip.octets()[..3],
            [127, 101, 0],
            "pod IPs come from the node's prefix"
        );
        assert_eq!(c.kubelet().pod_ip("default", &name), Some(ip));
        assert_eq!(status.host_ip.as_deref(), Some("127.0.10.1"));
        assert!(status.start_time.is_some());
        for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            assert!(condition(&running, kind), "{kind} is not True: {status:?}");
        }
        let cs = container(&running);
        assert_eq!(cs["ready"], true);
        assert_eq!(cs["restartCount"], 0);
        assert!(cs["state"]["running"]["startedAt"].is_string());
        ips.insert(ip);

        let pid = pid_of(&running);
        assert!(alive(pid));
        assert!(c.kubelet().pids().contains(&pid));
        assert_eq!(
            std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
            c.dir(&name),
            "the process runs in the pod's own directory"
        );

        let uid = pod.metadata.uid.clone().unwrap();
        // The log is captured asynchronously: wait until the fixture's whole preamble is in.
        let logs = eventually("the fixture's env in the pod log", || async {
            let logs = c.pods().logs(&name, &LogParams::default()).await.ok()?;
            logs.contains("env: WHERE=").then_some(logs)
        })
        .await;
        assert!(
            logs.contains(&format!(
                "args: run --name={name} --ip={ip} $(POD_NAME) $(UNKNOWN)"
            )),
            "{logs}"
        );
        for line in [
            format!("env: POD_NAME={name}"),
            "env: POD_NAMESPACE=default".into(),
            format!("env: POD_UID={uid}"),
            "env: NODE_NAME=worker-1".into(),
            format!("env: POD_IP={ip}"),
            "env: HOST_IP=127.0.10.1".into(),
            "env: SA=default".into(),
            "env: GREETING=hello".into(),
            format!("env: WHERE={name}@worker-1"),
            format!("env: HOME={}", c.dir(&name).display()),
            format!(
                "env: KUBECONFIG={}",
                c.dir(&name).join("kubeconfig").display()
            ),
            "env: KUBERNETES_SERVICE_HOST=127.0.0.1".into(),
        ] {
            assert!(
                logs.lines().any(|l| l == line),
                "missing {line:?} in:\n{logs}"
            );
        }
        let sa = c.dir(&name).join("serviceaccount");
        assert!(
            !std::fs::read_to_string(sa.join("token"))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            std::fs::read_to_string(sa.join("namespace")).unwrap(),
            "default"
        );
        assert_eq!(
            std::fs::read_to_string(sa.join("ca.crt")).unwrap(),
            c.server.ca_pem()
        );
    }
    assert_eq!(ips.len(), 3, "pod IPs are distinct: {ips:?}");
    assert!(c.kubelet().pids().len() >= 3);
    // The three pods read the ConfigMap from the node's watch of it: one list, no reads of
    // their own.
    let verbs: Vec<String> = c
        .server
        .state()
        .audit
        .events()
        .into_iter()
        .filter(|e| e.resource == "configmaps" && e.user == "system:node:worker-1")
        .map(|e| e.verb)
        .collect();
    assert_eq!(
        verbs.iter().filter(|v| *v == "list").count(),
        1,
        "the kubelet's ConfigMap requests: {verbs:?}"
    );
    assert!(
        !verbs.iter().any(|v| v == "get"),
        "the kubelet's ConfigMap requests: {verbs:?}"
    );
}

#[tokio::test]
async fn deleting_a_pod_sends_sigterm_and_the_kubelet_makes_the_final_delete() {
    let c = Cluster::start(2).await;
    c.create(c.pod("doomed", &["run"])).await;
    let running = c.running("doomed").await;
    c.heartbeat_advances("doomed").await; // its SIGTERM trap is set
    let pid = pid_of(&running);
    let log_file = c.dir("doomed").join("logs").join("main.log");
    let mut watch = c
        .pods()
        .watch(&WatchParams::default().fields("metadata.name=doomed"), "0")
        .await
        .unwrap()
        .boxed();
    let t0 = Instant::now();
    c.pods()
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let mut last_before_delete = None;
    let deleted = tokio::time::timeout(WAIT, async {
        while let Some(event) = watch.next().await {
            match event.unwrap() {
                WatchEvent::Modified(p) => last_before_delete = Some(p),
                WatchEvent::Deleted(p) => return p,
                _ => {}
            }
        }
        panic!("the watch ended")
    })
    .await
    .expect("the pod is deleted");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the pod went as soon as its process ended, not after the 30 s grace period"
    );
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(log.contains("got SIGTERM"), "{log}");
    assert!(!alive(pid));
    let last = last_before_delete.expect("a status update before the delete");
    assert_eq!(phase(&last), "Succeeded");
    assert_eq!(container(&last)["state"]["terminated"]["exitCode"], 0);
    assert_eq!(
        container(&last)["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(deleted.metadata.uid, running.metadata.uid);
    let kubelet_delete =
        c.server.state().audit.events().into_iter().find(|e| {
            e.verb == "delete" && e.resource == "pods" && e.user == "system:node:worker-2"
        });
    let kubelet_delete = kubelet_delete.expect("the kubelet's final delete is audited");
    assert_eq!(kubelet_delete.source_ip, "127.0.10.2");
    assert_eq!(kubelet_delete.code, 200);
}

#[tokio::test]
async fn a_container_that_ignores_sigterm_is_killed_when_the_grace_period_ends() {
    let c = Cluster::start(3).await;
    let mut pod = c.pod("stubborn", &["ignore-term"]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(1);
    c.create(pod).await;
    let running = c.running("stubborn").await;
    c.heartbeat_advances("stubborn").await; // its SIGTERM trap is set
    let mut watch = c
        .pods()
        .watch(
            &WatchParams::default().fields("metadata.name=stubborn"),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    let t0 = Instant::now();
    c.pods()
        .delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    c.log_line("stubborn", 0, "ignoring SIGTERM").await;
    let mut last = None;
    tokio::time::timeout(WAIT, async {
        while let Some(event) = watch.next().await {
            match event.unwrap() {
                WatchEvent::Modified(p) => last = Some(p),
                WatchEvent::Deleted(_) => return,
                _ => {}
            }
        }
    })
    .await
    .expect("the pod is deleted");
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "killed before the grace period ended"
    );
    let last = last.unwrap();
    assert_eq!(container(&last)["state"]["terminated"]["exitCode"], 137);
    assert_eq!(phase(&last), "Failed");
    assert!(!alive(pid_of(&running)));
}

#[tokio::test]
async fn a_force_deleted_pod_is_killed_at_once() {
    let c = Cluster::start(4).await;
    c.create(c.pod("forced", &["ignore-term"])).await;
    let pid = pid_of(&c.running("forced").await);
    c.pods()
        .delete(
            "forced",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    all_dead("the force-deleted pod's process to die", &[pid]).await;
    eventually("the kubelet to forget the pod", || async {
        c.kubelet()
            .pod_ip("default", "forced")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(c.kubelet().pids().is_empty());
}

#[tokio::test]
async fn a_failing_container_is_restarted_with_growing_delays() {
    let c = Cluster::start(5).await;
    let created = c.create(c.pod("crashy", &["exit", "3"])).await;
    let mut watch = c
        .pods()
        .watch(&WatchParams::default().fields("metadata.name=crashy"), "0")
        .await
        .unwrap()
        .boxed();
    let seen = c
        .wait("crashy", "restarted four times", |p| {
            container(p)["restartCount"].as_i64() >= Some(4)
        })
        .await;
    assert_eq!(seen.metadata.uid, created.metadata.uid);
    assert_eq!(
        phase(&seen),
        "Running",
        "restartPolicy Always keeps the pod Running"
    );
    let last = &container(&seen)["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3);
    assert_eq!(last["reason"], "Error");

    // The watch saw the CrashLoopBackOff waits with their growing delays.
    let mut messages = Vec::new();
    while let Ok(Some(Ok(event))) =
        tokio::time::timeout(Duration::from_millis(200), watch.next()).await
    {
        if let WatchEvent::Modified(p) | WatchEvent::Added(p) = event
            && let Some(m) = container(&p)["state"]["waiting"]["message"].as_str()
            && !messages.iter().any(|x: &String| x == m)
        {
            messages.push(m.to_string());
        }
    }
    let uid = created.metadata.uid.unwrap();
    for delay in ["200ms", "400ms", "800ms"] {
        let wanted =
            format!("back-off {delay} restarting failed container=main pod=crashy_default({uid})");
        assert!(messages.contains(&wanted), "no {wanted:?} in {messages:?}");
    }

    // The fixture's own records: from each exit to the next start is at least the
    // back-off, and it grows (compared two restarts apart, where the back-off at least
    // doubles, so that scheduling noise on a loaded machine cannot reorder them).
    let read = |file: &str| -> Vec<i128> {
        std::fs::read_to_string(c.dir("crashy").join(file))
            .unwrap()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let (starts, exits) = (read("starts"), read("exits"));
    assert!(
        starts.len() >= 5 && exits.len() >= 4,
        "{starts:?} {exits:?}"
    );
    let waits: Vec<i128> = exits
        .iter()
        .zip(&starts[1..])
        .map(|(exit, next)| (next - exit) / 1_000_000)
        .collect();
    let expected = [0, 200, 400, 800];
    for (waited, delay) in waits.iter().zip(expected) {
        assert!(
            *waited >= delay,
            "restarted {waited} ms after the exit, before the {delay} ms back-off: {waits:?}"
        );
    }
    for k in 0..2 {
        assert!(
            waits[k + 2] > waits[k],
            "the back-off does not grow: {waits:?}"
        );
    }
}

#[tokio::test]
async fn a_crashed_container_restarts_in_the_same_pod() {
    let c = Cluster::start(6).await;
    let before = c.running_after_create("victim").await;
    let pid = pid_of(&before);
    c.kubelet().crash("default", "victim", None).unwrap();
    let after = c
        .wait("victim", "restarted once and running", |p| {
            container(p)["restartCount"] == 1 && container(p)["state"]["running"].is_object()
        })
        .await;
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same pod");
    assert_ne!(pid_of(&after), pid, "a new process");
    assert!(!alive(pid));
    let last = &container(&after)["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137);
    assert_eq!(last["signal"], 9);
    assert_eq!(last["reason"], "Error");
    assert!(c.kubelet().crash("default", "nobody", None).is_err());
}

const LOW_ON_MEMORY: &str = "The node was low on resource: memory.";

fn status(p: &Pod) -> Value {
    serde_json::to_value(p).unwrap()["status"].clone()
}

fn condition_of(p: &Pod, kind: &str) -> Value {
    status(p)["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

fn evicted(p: &Pod) -> bool {
    phase(p) == "Failed" && status(p)["reason"] == "Evicted"
}

#[tokio::test]
async fn an_evicted_pod_is_killed_reported_failed_and_never_restarted() {
    let c = Cluster::start(24).await;
    let mut pod = c.pod("evictee", &["run"]);
    pod["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "cache", "image": "memcached:1.6"}));
    c.create(pod).await;
    let running = c.running("evictee").await;
    c.heartbeat_advances("evictee").await;
    let pid = pid_of(&running);
    c.kubelet()
        .evict_pod("default", "evictee", LOW_ON_MEMORY)
        .unwrap();
    all_dead("the evicted pod's process to die", &[pid]).await;
    let failed = c.wait("evictee", "failed as evicted", evicted).await;
    assert_eq!(status(&failed)["message"], LOW_ON_MEMORY);
    assert_eq!(failed.metadata.uid, running.metadata.uid, "the same pod");
    assert!(failed.metadata.deletion_timestamp.is_none(), "not deleted");
    let ready = condition_of(&failed, "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("PodCompleted"))
    );
    let disruption = condition_of(&failed, "DisruptionTarget");
    assert_eq!(disruption["status"], "True");
    assert_eq!(disruption["reason"], "TerminationByKubelet");
    assert_eq!(disruption["message"], LOW_ON_MEMORY);
    // Both containers, the process and the stand-in, were killed and stay so.
    for c in status(&failed)["containerStatuses"].as_array().unwrap() {
        assert_eq!(c["state"]["terminated"]["exitCode"], 137, "{c}");
        assert_eq!(c["state"]["terminated"]["signal"], 9, "{c}");
        assert_eq!(
            (&c["ready"], &c["restartCount"]),
            (&json!(false), &json!(0)),
            "{c}"
        );
    }
    // restartPolicy Always would restart a crashed container at once (no back-off before
    // the first restart): several back-offs later the evicted one still has not run again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = c.pods().get("evictee").await.unwrap();
    assert!(evicted(&later), "{}", status(&later));
    assert_eq!(container(&later)["restartCount"], 0);
    let starts = std::fs::read_to_string(c.dir("evictee").join("starts")).unwrap();
    assert_eq!(starts.lines().count(), 1, "started again: {starts}");
    assert!(c.kubelet().pids().is_empty());
    // Nothing more to evict or crash.
    let again = c.kubelet().evict_pod("default", "evictee", LOW_ON_MEMORY);
    assert!(again.unwrap_err().to_string().contains("evicted already"));
    assert!(c.kubelet().crash("default", "evictee", None).is_err());
    // The Pod stays until deleted; then it goes as any ended pod does.
    c.pods()
        .delete("evictee", &DeleteParams::default())
        .await
        .unwrap();
    c.gone("evictee").await;
    eventually("the kubelet to forget the pod", || async {
        c.kubelet()
            .pod_ip("default", "evictee")
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_evicted_pod_deleted_before_its_status_landed_gets_the_kubelets_final_delete() {
    let c = Cluster::start(25).await;
    let running = c.running_after_create("cut-off").await;
    let pid = pid_of(&running);
    let mut watch = c
        .pods()
        .watch(&WatchParams::default().fields("metadata.name=cut-off"), "0")
        .await
        .unwrap()
        .boxed();
    // The node cannot report the eviction, so the API still sees a running pod and
    // deletes it gracefully.
    c.kubelet().partition_node(Mode::Drop);
    c.kubelet()
        .evict_pod("default", "cut-off", LOW_ON_MEMORY)
        .unwrap();
    all_dead("the evicted pod's process to die", &[pid]).await;
    c.pods()
        .delete("cut-off", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = c.pods().get("cut-off").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(phase(&terminating), "Running");
    c.kubelet().partition_node(Mode::Pass);
    let mut last_before_delete = None;
    tokio::time::timeout(WAIT, async {
        while let Some(event) = watch.next().await {
            match event.unwrap() {
                WatchEvent::Modified(p) => last_before_delete = Some(p),
                WatchEvent::Deleted(_) => return,
                _ => {}
            }
        }
        panic!("the watch ended")
    })
    .await
    .expect("the pod is deleted");
    let last = last_before_delete.expect("a status update before the delete");
    assert!(evicted(&last), "{}", status(&last));
    assert_eq!(container(&last)["state"]["terminated"]["exitCode"], 137);
    let kubelet_delete = c.server.state().audit.events().into_iter().find(|e| {
        e.verb == "delete"
            && e.resource == "pods"
            && e.name == "cut-off"
            && e.user == "system:node:worker-25"
    });
    assert_eq!(
        kubelet_delete.expect("the kubelet's final delete").code,
        200
    );
}

impl Cluster {
    async fn running_after_create(&self, name: &str) -> Pod {
        self.create(self.pod(name, &["run"])).await;
        self.running(name).await
    }

    async fn heartbeat_advances(&self, name: &str) -> i128 {
        let file = self.dir(name).join("heartbeat");
        let first = eventually("a first heartbeat", || async { read_number(&file) }).await;
        eventually("the heartbeat to advance", || async {
            read_number(&file).filter(|v| *v > first)
        })
        .await
    }
}

#[tokio::test]
async fn holding_a_pod_stops_its_heartbeat_and_releasing_resumes_it() {
    let c = Cluster::start(7).await;
    let pid = pid_of(&c.running_after_create("frozen").await);
    c.heartbeat_advances("frozen").await;
    c.kubelet().hold_pod("default", "frozen").unwrap();
    stopped(pid).await;
    let file = c.dir("frozen").join("heartbeat");
    // A write already under way may still land; then nothing may change for a while.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = read_number(&file).unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        read_number(&file),
        Some(held),
        "the heartbeat advanced while held"
    );
    c.kubelet().release_pod("default", "frozen").unwrap();
    eventually("the heartbeat to advance after release", || async {
        read_number(&file).filter(|v| *v > held)
    })
    .await;
    assert!(!frozen(pid));
}

#[tokio::test]
async fn a_partitioned_pod_cannot_reach_the_api_server_until_repaired() {
    let c = Cluster::start(8).await;
    c.create(c.pod("caller", &["kubectl"])).await;
    c.running("caller").await;
    let mut at = c.log_line("caller", 0, "api: ok").await;

    c.kubelet()
        .partition_pod("default", "caller", Mode::Drop)
        .unwrap();
    // A call already on the wire may still succeed; wait for the first failure.
    at = c.log_line("caller", at, "api: failed").await;

    c.kubelet()
        .partition_pod("default", "caller", Mode::Hang)
        .unwrap();
    at = c.log_line("caller", at, "api: hung").await;

    c.kubelet()
        .partition_pod("default", "caller", Mode::Pass)
        .unwrap();
    c.log_line("caller", at, "api: ok").await;
}

#[tokio::test]
async fn the_audit_attributes_a_pods_requests_to_the_pod() {
    let c = Cluster::start(9).await;
    let pod = c.create(c.pod("audited", &["kubectl"])).await;
    c.running("audited").await;
    c.log_line("audited", 0, "api: ok").await;
    let ip = c
        .kubelet()
        .pod_ip("default", "audited")
        .unwrap()
        .to_string();
    let events = c.server.state().audit.events();
    let from_pod: Vec<_> = events
        .iter()
        .filter(|e| e.request_uri == "/version" && e.source_ip == ip)
        .collect();
    assert!(!from_pod.is_empty(), "no /version request from {ip}");
    for e in from_pod {
        let attributed = e.pod.as_ref().expect("attributed to a pod");
        assert_eq!(attributed.name, "audited");
        assert_eq!(attributed.namespace, "default");
        assert_eq!(Some(&attributed.uid), pod.metadata.uid.as_ref());
        assert_eq!(e.user, "system:serviceaccount:default:default");
    }
    // The kubelet's own requests come from the node, as the node.
    let kubelet = events
        .iter()
        .find(|e| e.user == "system:node:worker-9")
        .expect("kubelet requests");
    assert_eq!(kubelet.source_ip, "127.0.10.9");
    assert!(kubelet.pod.is_none());
}

#[tokio::test]
async fn a_delay_slows_every_request_of_the_pod_by_at_least_the_delay() {
    let c = Cluster::start(10).await;
    c.running_after_create("slow").await;
    let kubeconfig = std::fs::read_to_string(c.dir("slow").join("kubeconfig")).unwrap();
    let timed = || async {
        // A fresh client each time: the connection, too, goes through the pod's proxy.
        let client = ApiServer::client_for(&kubeconfig).await.unwrap();
        let t0 = Instant::now();
        client
            .apiserver_version()
            .await
            .expect("the pod's kubeconfig works");
        t0.elapsed()
    };
    let delay = Duration::from_millis(400);
    let quick = timed().await;
    c.kubelet().delay_pod("default", "slow", delay).unwrap();
    let slow = timed().await;
    assert!(
        slow >= delay,
        "a request took {slow:?} with a {delay:?} delay"
    );
    c.kubelet()
        .delay_pod("default", "slow", Duration::ZERO)
        .unwrap();
    let again = timed().await;
    assert!(
        again < delay,
        "{again:?} after removing the delay (first request {quick:?})"
    );
    // The requests came from the pod.
    let ip = c.kubelet().pod_ip("default", "slow").unwrap().to_string();
    assert!(
        c.server
            .state()
            .audit
            .events()
            .iter()
            .any(|e| e.source_ip == ip && e.pod.as_ref().is_some_and(|p| p.name == "slow"))
    );
}

#[tokio::test]
async fn skew_shifts_the_time_the_pod_reports_by_the_offset() {
    assert!(
        find_faketime().is_some(),
        "libfaketime is missing: apt-get install faketime (clock skew needs it)"
    );
    let c = Cluster::start(11).await;
    c.running_after_create("skewed").await;
    let clock = c.dir("skewed").join("clock");
    let offset_from_now = |path: &Path| {
        let reported = read_number(path)?;
        let now = chrono::Utc::now().timestamp() as i128;
        Some(reported - now)
    };
    eventually("the pod's clock to match ours", || async {
        offset_from_now(&clock).filter(|d| d.abs() <= 2)
    })
    .await;
    c.kubelet()
        .skew_pod("default", "skewed", chrono::Duration::hours(1))
        .unwrap();
    eventually("the pod's clock to run an hour ahead", || async {
        offset_from_now(&clock).filter(|d| (d - 3600).abs() <= 2)
    })
    .await;
    c.kubelet()
        .skew_pod("default", "skewed", chrono::Duration::seconds(-90))
        .unwrap();
    eventually("the pod's clock to run 90 s behind", || async {
        offset_from_now(&clock).filter(|d| (d + 90).abs() <= 2)
    })
    .await;
    c.kubelet()
        .skew_pod("default", "skewed", chrono::Duration::zero())
        .unwrap();
    eventually("the pod's clock to match ours again", || async {
        offset_from_now(&clock).filter(|d| d.abs() <= 2)
    })
    .await;
}

#[tokio::test]
async fn skew_without_libfaketime_names_the_package_to_install() {
    let c = Cluster::start_with(12, |config| config.faketime_library = None).await;
    let err = c
        .kubelet()
        .skew_pod("default", "anything", chrono::Duration::seconds(5))
        .unwrap_err()
        .to_string();
    assert!(err.contains("apt-get install faketime"), "{err}");
}

/// The child half of the leak test: a cluster with running pods whose pids it prints.
#[tokio::test]
#[ignore = "run by no_pod_process_survives_the_death_of_the_process_that_owns_the_kubelet"]
async fn leak_child() {
    if std::env::var_os("OPCONFORM_KUBELET_LEAK_CHILD").is_none() {
        return;
    }
    let c = Cluster::start(13).await;
    let mut pids = Vec::new();
    for i in 0..3 {
        pids.push(pid_of(&c.running_after_create(&format!("leaky-{i}")).await));
    }
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    println!("PIDS {}", pids.join(" "));
    tokio::time::sleep(Duration::from_secs(600)).await;
}

fn process_group_of(pid: u32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

fn live_members(groups: &BTreeSet<i32>) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process_group_of(*pid).is_some_and(|g| groups.contains(&g)) && alive(*pid))
        .collect()
}

#[tokio::test]
async fn no_pod_process_survives_the_death_of_the_process_that_owns_the_kubelet() {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "leak_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OPCONFORM_KUBELET_LEAK_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT * 2, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // libtest prints "test leak_child ... " on the same line.
            if let Some((_, pids)) = line.split_once("PIDS ") {
                return pids.to_string();
            }
        }
        panic!("the child ended without reporting its pod processes")
    })
    .await
    .expect("the child reports its pod processes in time");
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 3, "{line}");
    let groups: BTreeSet<i32> = pids.iter().filter_map(|p| process_group_of(*p)).collect();
    assert_eq!(groups.len(), 3, "one process group per container");
    assert!(pids.iter().all(|p| alive(*p)));
    child.start_kill().unwrap(); // SIGKILL: no destructor, no handler runs in the child.
    child.wait().await.unwrap();
    let groups = &groups;
    eventually(
        "every pod process (and watchdog) to die with the kubelet's owner",
        || async move { live_members(groups).is_empty().then_some(()) },
    )
    .await;
    all_dead("the reported pod processes to die", &pids).await;
}

#[tokio::test]
async fn shutdown_and_drop_kill_every_pod_process() {
    let mut c = Cluster::start(14).await;
    c.running_after_create("a").await;
    c.running_after_create("b").await;
    let pids = c.kubelet().pids();
    assert!(pids.len() >= 2);
    c.kubelet.take().unwrap().shutdown().await;
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "shutdown returned before its processes died"
    );

    let c = Cluster::start(15).await;
    c.running_after_create("dropped").await;
    let pids = c.kubelet().pids();
    drop(c);
    all_dead("the dropped kubelet's processes to die", &pids).await;
}

async fn lease_renew_time(leases: &Api<Lease>, node: &str) -> Option<String> {
    let lease = leases.get(node).await.ok()?;
    let t = lease.spec?.renew_time?;
    Some(t.0.to_string())
}

#[tokio::test]
async fn the_node_lease_advances_stops_while_the_node_is_held_and_resumes_after_release() {
    let interval = Duration::from_millis(200);
    let c = Cluster::start_with(16, |config| config.heartbeat_interval = interval).await;
    let node = Api::<Node>::all(c.client.clone())
        .get("worker-16")
        .await
        .unwrap();
    let node = serde_json::to_value(node).unwrap();
    let ready = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["status"], "True");
    assert_eq!(
        node["status"]["addresses"][0],
        json!({"type": "InternalIP", "address": "127.0.10.16"})
    );
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.34.0");

    let leases: Api<Lease> = Api::namespaced(c.client.clone(), "kube-node-lease");
    let lease = leases.get("worker-16").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("worker-16"));
    assert_eq!(lease.lease_duration_seconds, Some(40));
    let first = lease_renew_time(&leases, "worker-16").await.unwrap();
    eventually("the lease to be renewed", || async {
        lease_renew_time(&leases, "worker-16")
            .await
            .filter(|t| *t > first)
    })
    .await;

    let pid = pid_of(&c.running_after_create("on-held-node").await);
    let alone = pid_of(&c.running_after_create("held-on-its-own").await);
    c.kubelet().hold_pod("default", "held-on-its-own").unwrap();
    c.kubelet().hold_node();
    stopped(pid).await;
    tokio::time::sleep(interval * 2).await;
    let held = lease_renew_time(&leases, "worker-16").await.unwrap();
    tokio::time::sleep(interval * 5).await;
    assert_eq!(
        lease_renew_time(&leases, "worker-16").await.unwrap(),
        held,
        "renewed while held"
    );
    c.kubelet().release_node();
    eventually("the lease to be renewed after release", || async {
        lease_renew_time(&leases, "worker-16")
            .await
            .filter(|t| *t > held)
    })
    .await;
    assert!(!frozen(pid));
    assert!(frozen(alone), "a pod held on its own stays held");
    c.kubelet()
        .release_pod("default", "held-on-its-own")
        .unwrap();
    eventually("the pod held on its own to run again", || async {
        (!frozen(alone)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_node_partition_stops_heartbeats_and_cuts_its_pods_until_repaired() {
    let interval = Duration::from_millis(200);
    let c = Cluster::start_with(17, |config| config.heartbeat_interval = interval).await;
    c.create(c.pod("cut", &["kubectl"])).await;
    c.running("cut").await;
    let mut at = c.log_line("cut", 0, "api: ok").await;
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), "kube-node-lease");
    c.kubelet().partition_node(Mode::Drop);
    at = c.log_line("cut", at, "api: failed").await;
    let cut = lease_renew_time(&leases, "worker-17").await.unwrap();
    tokio::time::sleep(interval * 5).await;
    assert_eq!(
        lease_renew_time(&leases, "worker-17").await.unwrap(),
        cut,
        "renewed while partitioned"
    );
    c.kubelet().partition_node(Mode::Pass);
    eventually("the lease to be renewed after repair", || async {
        lease_renew_time(&leases, "worker-17")
            .await
            .filter(|t| *t > cut)
    })
    .await;
    c.log_line("cut", at, "api: ok").await;
}

#[tokio::test]
async fn stand_in_pods_are_running_and_ready_without_a_process() {
    let c = Cluster::start(18).await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "memcached", "namespace": "default"},
        "spec": {"nodeName": c.node, "containers": [{"name": "memcached", "image": "memcached:1.6"}]},
    });
    c.create(pod).await;
    let running = c.running("memcached").await;
    assert!(
        container(&running)["containerID"]
            .as_str()
            .unwrap()
            .starts_with("opconform://standin-")
    );
    assert!(c.kubelet().pids().is_empty());
    c.kubelet().crash("default", "memcached", None).unwrap();
    let after = c
        .wait("memcached", "restarted", |p| {
            container(p)["restartCount"] == 1 && ready(p)
        })
        .await;
    assert_eq!(
        container(&after)["lastState"]["terminated"]["exitCode"],
        137
    );
    c.pods()
        .delete("memcached", &DeleteParams::default())
        .await
        .unwrap();
    c.gone("memcached").await;
}

async fn probe_server(ip: Ipv4Addr, port: u16, ready: Arc<AtomicU16>, live: Arc<AtomicU16>) {
    let listener = eventually("the probe port to bind on the pod IP", || async {
        tokio::net::TcpListener::bind((ip, port)).await.ok()
    })
    .await;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (ready, live) = (ready.clone(), live.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let code = if request.starts_with("GET /ready") {
                    ready.load(Ordering::SeqCst)
                } else {
                    live.load(Ordering::SeqCst)
                };
                let _ = s
                    .write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            });
        }
    });
}

/// A gRPC health server on the pod's `ip` and `port`: `Check` answers SERVING while
/// `serving` holds, NOT_SERVING otherwise.
async fn health_server(ip: Ipv4Addr, port: u16, serving: Arc<AtomicBool>) {
    let listener = eventually("the health port to bind on the pod IP", || async {
        tokio::net::TcpListener::bind((ip, port)).await.ok()
    })
    .await;
    sim_test_support::grpc_health::serve(listener, move || serving.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_grpc_readiness_probe_follows_the_health_service() {
    let c = Cluster::start(31).await;
    let mut pod = c.pod("checked", &["run"]);
    pod["spec"]["containers"][0]["readinessProbe"] =
        json!({"grpc": {"port": 18081}, "periodSeconds": 1, "failureThreshold": 1});
    c.create(pod).await;
    let ip = eventually("a pod IP", || async {
        c.kubelet().pod_ip("default", "checked")
    })
    .await;
    let serving = Arc::new(AtomicBool::new(false));
    health_server(ip, 18081, serving.clone()).await;
    let unready = c
        .wait("checked", "running but not ready", |p| {
            phase(p) == "Running"
        })
        .await;
    assert!(!ready(&unready));
    serving.store(true, Ordering::SeqCst);
    c.running("checked").await;
    serving.store(false, Ordering::SeqCst);
    c.wait("checked", "unready again", |p| !ready(p)).await;
}

#[tokio::test]
async fn readiness_and_liveness_probes_decide_readiness_and_restarts() {
    let c = Cluster::start(19).await;
    let mut pod = c.pod("probed", &["run"]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(2);
    pod["spec"]["containers"][0]["ports"] = json!([{"name": "http", "containerPort": 18080}]);
    pod["spec"]["containers"][0]["readinessProbe"] = json!({"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1, "failureThreshold": 1});
    pod["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"path": "/live", "port": 18080}, "periodSeconds": 1, "failureThreshold": 2});
    c.create(pod).await;
    let ip = eventually("a pod IP", || async {
        c.kubelet().pod_ip("default", "probed")
    })
    .await;
    let ready_code = Arc::new(AtomicU16::new(503));
    let live_code = Arc::new(AtomicU16::new(200));
    probe_server(ip, 18080, ready_code.clone(), live_code.clone()).await;

    let unready = c
        .wait("probed", "running but not ready", |p| phase(p) == "Running")
        .await;
    assert!(!ready(&unready));
    assert_eq!(container(&unready)["ready"], false);
    ready_code.store(200, Ordering::SeqCst);
    c.running("probed").await;
    ready_code.store(500, Ordering::SeqCst);
    c.wait("probed", "unready again", |p| !ready(p)).await;
    ready_code.store(200, Ordering::SeqCst);
    let before = c.running("probed").await;

    live_code.store(500, Ordering::SeqCst);
    let restarted = c
        .wait("probed", "restarted by its liveness probe", |p| {
            container(p)["restartCount"] == 1
        })
        .await;
    live_code.store(200, Ordering::SeqCst);
    assert_eq!(restarted.metadata.uid, before.metadata.uid);
    assert!(c.log("probed").contains("args: run"));
    let previous = c.kubelet().log("default", "probed", None, true).unwrap();
    assert!(
        previous.contains("got SIGTERM"),
        "the liveness kill is graceful: {previous}"
    );
    let served = c
        .pods()
        .logs(
            "probed",
            &LogParams {
                previous: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("the previous instance's log through the API");
    assert_eq!(
        served, previous,
        "logs?previous=true serves the instance before the restart"
    );
    c.running("probed").await;
}

#[tokio::test]
async fn restart_policies_decide_whether_finished_containers_run_again() {
    let c = Cluster::start(20).await;
    for (name, policy, code) in [
        ("never-ok", "Never", "0"),
        ("never-fails", "Never", "2"),
        ("onfailure-ok", "OnFailure", "0"),
        ("onfailure-fails", "OnFailure", "2"),
    ] {
        let mut pod = c.pod(name, &["exit", code]);
        pod["spec"]["restartPolicy"] = json!(policy);
        c.create(pod).await;
    }
    let ok = c
        .wait("never-ok", "succeeded", |p| phase(p) == "Succeeded")
        .await;
    assert_eq!(container(&ok)["state"]["terminated"]["reason"], "Completed");
    assert!(!ready(&ok));
    let failed = c
        .wait("never-fails", "failed", |p| phase(p) == "Failed")
        .await;
    assert_eq!(container(&failed)["state"]["terminated"]["exitCode"], 2);
    assert_eq!(container(&failed)["state"]["terminated"]["reason"], "Error");
    assert_eq!(container(&failed)["restartCount"], 0);
    c.wait("onfailure-ok", "succeeded", |p| phase(p) == "Succeeded")
        .await;
    c.wait("onfailure-fails", "restarted", |p| {
        container(p)["restartCount"].as_i64() >= Some(1)
    })
    .await;
    // A finished pod is deleted at once by the server.
    c.pods()
        .delete("never-ok", &DeleteParams::default())
        .await
        .unwrap();
    c.gone("never-ok").await;
}

#[tokio::test]
async fn init_containers_run_to_completion_before_the_app_containers() {
    let c = Cluster::start(21).await;
    let mut pod = c.pod("initialized", &["run"]);
    pod["spec"]["initContainers"] =
        json!([{"name": "setup", "image": IMAGE, "args": ["exit", "0", "0.3"]}]);
    c.create(pod).await;
    let pending = c
        .wait("initialized", "initializing", |p| phase(p) == "Pending")
        .await;
    assert!(!condition(&pending, "Initialized"));
    let running = c.running("initialized").await;
    let init = &serde_json::to_value(&running).unwrap()["status"]["initContainerStatuses"][0];
    assert_eq!(init["state"]["terminated"]["reason"], "Completed");
    assert!(condition(&running, "Initialized"));
    let log = c
        .kubelet()
        .log("default", "initialized", Some("setup"), false)
        .unwrap();
    assert!(log.contains("exiting with 0"), "{log}");
}

/// How many pods one node runs at once (not a timed test; run with `--ignored --nocapture`,
/// `OPCONFORM_KUBELET_PODS=N` to choose N, at most 254 per node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a capacity measurement, not a check"]
async fn a_node_runs_many_pods_at_once() {
    let n: usize = std::env::var("OPCONFORM_KUBELET_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut c = Cluster::start(30).await;
    let t0 = Instant::now();
    for i in 0..n {
        c.create(c.pod(&format!("many-{i}"), &["idle"])).await;
    }
    let api = c.pods();
    let all_running = async {
        loop {
            let list = api.list(&Default::default()).await.unwrap();
            let running = list
                .items
                .iter()
                .filter(|p| phase(p) == "Running" && ready(p))
                .count();
            if running == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(300), all_running)
        .await
        .expect("every pod runs in time");
    let pids = c.kubelet().pids();
    println!(
        "{n} pods Running and Ready after {:?}; {} pod processes",
        t0.elapsed(),
        pids.len()
    );
    let t1 = Instant::now();
    c.kubelet.take().unwrap().shutdown().await;
    println!("shutdown in {:?}", t1.elapsed());
    assert!(pids.iter().all(|p| !alive(*p)));
}

#[tokio::test]
async fn a_deleted_node_registers_again() {
    let c = Cluster::start_with(22, |config| {
        config.heartbeat_interval = Duration::from_millis(100)
    })
    .await;
    let nodes = Api::<Node>::all(c.client.clone());
    let first = nodes.get("worker-22").await.unwrap().metadata.uid;
    nodes
        .delete("worker-22", &DeleteParams::default())
        .await
        .unwrap();
    let ready = |n: &Node| {
        serde_json::to_value(n).unwrap()["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    eventually("the node to be registered again, Ready", || async {
        nodes
            .get_opt("worker-22")
            .await
            .ok()
            .flatten()
            .filter(|n| n.metadata.uid != first && ready(n))
    })
    .await;
}

#[tokio::test]
async fn a_second_delete_with_a_shorter_grace_period_kills_sooner() {
    let c = Cluster::start(23).await;
    c.create(c.pod("patient", &["ignore-term"])).await;
    let pid = pid_of(&c.running("patient").await);
    c.heartbeat_advances("patient").await; // its SIGTERM trap is set
    let t0 = Instant::now();
    c.pods()
        .delete("patient", &DeleteParams::default())
        .await
        .unwrap();
    c.log_line("patient", 0, "ignoring SIGTERM").await;
    c.pods()
        .delete(
            "patient",
            &DeleteParams {
                grace_period_seconds: Some(1),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    c.gone("patient").await;
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the 30 s grace period was not cut short: {:?}",
        t0.elapsed()
    );
    assert!(!alive(pid));
}

/// Reads the next line of a followed log, failing after [`WAIT`].
async fn next_line(
    lines: &mut (impl futures::Stream<Item = std::io::Result<String>> + Unpin),
) -> Option<String> {
    tokio::time::timeout(WAIT, lines.next())
        .await
        .expect("a log line or the end of the log in time")
        .map(|line| line.expect("a readable log line"))
}

#[tokio::test]
async fn a_followed_log_streams_a_line_written_after_the_request_and_ends_with_the_container() {
    use futures::AsyncBufReadExt as _;
    let c = Cluster::start(26).await;
    let mut pod = c.pod("follow", &["await"]);
    pod["spec"]["restartPolicy"] = json!("Never");
    c.create(pod).await;
    c.running("follow").await;
    let params = LogParams {
        follow: true,
        timestamps: true,
        ..LogParams::default()
    };
    let started = chrono::Utc::now();
    let mut lines = Box::pin(
        c.pods()
            .log_stream("follow", &params)
            .await
            .expect("the log is followed")
            .lines(),
    );
    loop {
        let line = next_line(&mut lines).await.expect("the log goes on");
        if line.ends_with(" waiting for go") {
            break;
        }
    }
    std::fs::write(c.dir("follow").join("go"), "").expect("go written");
    let line = next_line(&mut lines)
        .await
        .expect("the line written after the request");
    let (time, text) = line.split_once(' ').expect("a timestamp and a line");
    assert_eq!(text, "got go");
    assert_eq!(time.len(), "2026-11-29T12:00:00.123456789Z".len(), "{time}");
    let time = chrono::DateTime::parse_from_rfc3339(time).expect("an RFC3339 time");
    assert!(
        time > started,
        "the line was written after the request: {time} {started}"
    );
    assert_eq!(
        next_line(&mut lines).await,
        None,
        "the stream ends when the container exits"
    );
    c.wait("follow", "succeeded", |p| phase(p) == "Succeeded")
        .await;
    let tail = c
        .pods()
        .logs(
            "follow",
            &LogParams {
                tail_lines: Some(1),
                ..LogParams::default()
            },
        )
        .await
        .expect("the log of the ended container");
    assert_eq!(tail, "got go\n");
    let limited = c
        .pods()
        .logs(
            "follow",
            &LogParams {
                limit_bytes: Some(4),
                ..LogParams::default()
            },
        )
        .await
        .expect("the first bytes of the log");
    assert_eq!(limited, "args");
    let mut ended = Box::pin(
        c.pods()
            .log_stream("follow", &params)
            .await
            .expect("an ended container's log")
            .lines(),
    );
    let mut all = Vec::new();
    while let Some(line) = next_line(&mut ended).await {
        all.push(line);
    }
    assert!(
        all.last().is_some_and(|l| l.ends_with(" got go")),
        "following an ended container answers its log and ends: {all:?}"
    );
}

#[tokio::test]
async fn pods_log_refuses_what_kube_apiserver_and_the_kubelet_refuse_with_their_messages() {
    let c = Cluster::start(27).await;
    let mut pod = c.pod("pair", &["idle"]);
    pod["spec"]["containers"] = json!([
        {"name": "a", "image": IMAGE, "args": ["idle"]},
        {"name": "b", "image": IMAGE, "args": ["idle"]},
    ]);
    c.create(pod).await;
    c.running("pair").await;
    let refusal = |e: kube::Error| match e {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("not an api error: {other}"),
    };
    let pods = c.pods();
    let read = |params: LogParams| {
        let pods = pods.clone();
        async move { refusal(pods.logs("pair", &params).await.unwrap_err()) }
    };
    assert_eq!(
        read(LogParams::default()).await,
        (
            400,
            "a container name must be specified for pod pair, choose one of: [a b]".into()
        )
    );
    assert_eq!(
        read(LogParams {
            container: Some("c".into()),
            ..LogParams::default()
        })
        .await,
        (400, "container c is not valid for pod pair".into())
    );
    assert_eq!(
        read(LogParams {
            container: Some("a".into()),
            previous: true,
            ..LogParams::default()
        })
        .await,
        (
            400,
            "previous terminated container \"a\" in pod \"pair\" not found".into()
        )
    );
    assert_eq!(
        read(LogParams {
            container: Some("a".into()),
            tail_lines: Some(-1),
            ..LogParams::default()
        })
        .await,
        (
            422,
            "PodLogOptions \"pair\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0".into()
        )
    );
    let both = http::Request::get(
        "/api/v1/namespaces/default/pods/pair/log?container=a&sinceSeconds=10&sinceTime=2026-11-29T12:00:00Z",
    )
    .body(Vec::new())
    .unwrap();
    let (code, message) = refusal(c.client.request_text(both).await.unwrap_err());
    assert_eq!(
        (code, message.as_str()),
        (
            422,
            "PodLogOptions \"pair\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        )
    );
}

#[tokio::test]
async fn a_resized_pods_container_statuses_follow_its_new_resources_and_generation() {
    use kube::api::{Patch, PatchParams};
    let c = Cluster::start(60).await;
    let mut pod = c.pod("resized", &["idle"]);
    pod["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"},
    });
    c.create(pod).await;
    let running = c.running("resized").await;
    assert_eq!(
        container(&running)["resources"],
        json!({"requests": {"cpu": "100m", "memory": "64Mi"},
               "limits": {"cpu": "200m", "memory": "128Mi"}})
    );
    assert_eq!(
        container(&running)["allocatedResources"],
        json!({"cpu": "100m", "memory": "64Mi"})
    );
    let resize = json!({"spec": {"containers": [{"name": "main",
        "resources": {"requests": {"cpu": "150m"}, "limits": {"cpu": "300m"}}}]}});
    let resized = c
        .pods()
        .patch_subresource(
            "resize",
            "resized",
            &PatchParams::default(),
            &Patch::Strategic(resize),
        )
        .await
        .expect("the resize is accepted");
    assert_eq!(resized.metadata.generation, Some(2));
    let followed = c
        .wait("resized", "its status following the resize", |p| {
            p.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
        })
        .await;
    assert_eq!(
        container(&followed)["resources"],
        json!({"requests": {"cpu": "150m", "memory": "64Mi"},
               "limits": {"cpu": "300m", "memory": "128Mi"}})
    );
    assert_eq!(
        container(&followed)["allocatedResources"],
        json!({"cpu": "150m", "memory": "64Mi"})
    );
    let conditions = serde_json::to_value(&followed).unwrap()["status"]["conditions"].clone();
    for condition in conditions.as_array().unwrap() {
        assert_eq!(condition["observedGeneration"], 2, "{condition}");
    }
    assert_eq!(
        pid_of(&followed),
        pid_of(&running),
        "resized in place, not restarted"
    );
    assert_eq!(container(&followed)["restartCount"], 0);
}
