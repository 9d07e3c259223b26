//! The pod start rows: [`PODS`] busybox pods (`sh -c "sleep 3600"`) created at once on a
//! fresh simulated cluster of [`NODES`] nodes, each timed from its create to the status write
//! of its kubelet that first reports it Running, then the resident memory of the pods once
//! idle — on one cluster whose pods are containers of the OCI runtime the kubelets find
//! (crun, else runc), and on an identical one whose pods are host processes.
//!
//! The image is a directory made from the host's statically linked busybox (Debian's
//! `busybox-static`): `bin/busybox`, a link for each applet, `/etc/passwd` and
//! `/etc/group`. A run without one fails, naming the package.
//!
//! # How the Running write is found
//! Both ends come from the API server's audit: the create of the pod, and the status write
//! (an update of `pods/status` by `system:node:*`) that first reported phase Running. The
//! audit says who wrote and when, not what: a kubelet writes a pod's status from one loop,
//! one write at a time and only when the status changed, so its successful status writes of
//! a pod, in the order received, are that pod's status changes in the store's event log in
//! revision order (the scheduler's binding, which sets `spec.nodeName`, left out). The change
//! that first sets phase Running is the k-th, and so its write is the k-th write. The two
//! counts must be equal for every pod: otherwise the measurement is unsound (an error),
//! never a guess.
//!
//! # Memory
//! One second after every pod is Running, the VmRSS of each process of the cluster's pods
//! ([`SimCluster::pids`]: a container's processes as the runtime's `ps` lists them, a host
//! process pod's process group without the kubelet's watchdog shell) is summed and divided
//! by the pods. Not counted there, and measured apart for containers: the runtime's own
//! `run` process, which stays in the foreground for each container (the other members of
//! the kubelet's watchdog groups). Counted on neither side: the watchdog shell of each pod
//! (one on both paths), the kubelet and its proxies (threads of this process). VmRSS counts
//! pages shared between processes (busybox's, the runtime's) once per process.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::audit_tap::millis_between;
use super::stage::vm_rss_kib;
use super::{BenchError, Options, Series};
use crate::sim::apiserver::State;
use crate::sim::apiserver::audit::AuditEvent;
use crate::sim::apiserver::status::GroupResource;
use crate::sim::apiserver::store::{Event, EventType};
use crate::sim::kubelet::ImageMap;
use crate::sim::kubelet::oci::{Isolation, STATE_DIR};
use crate::sim::{SimCluster, SimClusterConfig};

/// Pods created at once, whatever `--runs` says.
pub const PODS: usize = 30;

/// Nodes of each cluster.
pub const NODES: u8 = 3;

/// The image the pods run, mapped to the busybox directory.
const IMAGE: &str = "busybox:pod-start";

/// The namespace of the pods.
const NAMESPACE: &str = "default";

/// The Debian package that provides a statically linked busybox.
const BUSYBOX_PACKAGE: &str = "busybox-static";

/// How long the pods may take to be Running.
const RUNNING: Duration = Duration::from_secs(120);

/// How long the audit and the event log may take to agree on every status write.
const AGREE: Duration = Duration::from_secs(10);

/// How long the pods idle before their memory is read.
const IDLE: Duration = Duration::from_secs(1);

/// Errors of the pod start rows' preparation.
#[derive(Debug, thiserror::Error)]
pub enum PodStartError {
    /// No busybox on `PATH` nor at `/usr/bin/busybox`.
    #[error(
        "no busybox on PATH: the pod start rows run a statically linked one (Debian: apt-get install {BUSYBOX_PACKAGE})"
    )]
    NoBusybox,
    /// The busybox found needs a dynamic loader.
    #[error(
        "{0} is dynamically linked: the pod start rows need a static busybox (Debian: apt-get install {BUSYBOX_PACKAGE})"
    )]
    Dynamic(PathBuf),
    /// The busybox found could not be read or run.
    #[error("cannot read or run {path}")]
    Busybox {
        /// The busybox.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The image directory could not be written.
    #[error("cannot write the busybox image at {path}")]
    Image {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The three rows, each as (containers, host processes).
pub(crate) struct PodStart {
    /// Create to Running, ms, one sample per pod.
    pub start: (Series, Series),
    /// VmRSS of the pods' own processes per pod, KiB.
    pub memory: (Series, Series),
    /// VmRSS of the runtime's `run` processes per pod, KiB.
    pub runtime_memory: (Series, Series),
}

/// What one cluster measured.
struct Measured {
    start_ms: Vec<f64>,
    memory_kib: f64,
    runtime_kib: f64,
}

/// Measures the pod start rows: containers first (when this machine has them), then host
/// processes, each on a cluster of its own that is shut down before the next starts.
///
/// # Errors
/// When busybox is missing, a cluster does not start, the pods are not Running within two
/// minutes, or the audit and the event log disagree.
pub(crate) async fn measure(options: &Options) -> Result<PodStart, BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("opconform-bench-pods-")
        .tempdir()
        .map_err(|source| {
            BenchError::PodStart(PodStartError::Image {
                path: std::env::temp_dir(),
                source,
            })
        })?;
    let image = busybox_image(dir.path()).map_err(BenchError::PodStart)?;
    let containers = match Isolation::detect(Path::new(STATE_DIR)) {
        isolation @ Isolation::Containers(_) => {
            Ok(on_cluster(options, dir.path(), &image, "containers", isolation).await?)
        }
        Isolation::Processes { reason } => Err(format!("not measured: {reason}")),
    };
    let processes = Isolation::Processes {
        reason: "the bench's host process path, measured beside containers".into(),
    };
    let processes = on_cluster(options, dir.path(), &image, "processes", processes).await?;
    let side = |behaviour: &str, value: Result<Vec<f64>, &String>| match value {
        Ok(samples) => Series::measured(behaviour, samples, Vec::new()),
        Err(why) => Series::not_measured(behaviour, why),
    };
    let ours = |pick: fn(&Measured) -> Vec<f64>| side("containers", containers.as_ref().map(pick));
    let theirs = |pick: fn(&Measured) -> Vec<f64>| side("processes", Ok(pick(&processes)));
    Ok(PodStart {
        start: (ours(|m| m.start_ms.clone()), theirs(|m| m.start_ms.clone())),
        memory: (ours(|m| vec![m.memory_kib]), theirs(|m| vec![m.memory_kib])),
        runtime_memory: (
            ours(|m| vec![m.runtime_kib]),
            Series::not_measured(
                "processes",
                "none: a host process pod has no runtime process",
            ),
        ),
    })
}

/// Starts a cluster whose kubelets run pods with `isolation`, measures on it unless the
/// run is interrupted, and shuts it down whatever the outcome.
async fn on_cluster(
    options: &Options,
    dir: &Path,
    image: &Path,
    label: &str,
    isolation: Isolation,
) -> Result<Measured, BenchError> {
    options.check_interrupt()?;
    let runtime = match &isolation {
        Isolation::Containers(rt) => format!("containers of {}", rt.name()),
        Isolation::Processes { .. } => "host processes".to_string(),
    };
    options.say(&format!(
        "pod start, {label}: starting a simulated cluster with {NODES} nodes, pods as {runtime}"
    ));
    let mut images = ImageMap::new();
    images.insert(IMAGE, image);
    let cluster = SimCluster::start(SimClusterConfig {
        nodes: NODES,
        images,
        work_dir: Some(dir.join(label)),
        isolation: Some(isolation),
        ..SimClusterConfig::fast()
    })
    .await
    .map_err(|e| BenchError::Cluster(Box::new(e)))?;
    let result = options
        .unless_interrupted(measure_on(options, &cluster, label))
        .await;
    cluster.shutdown().await;
    result
}

async fn measure_on(
    options: &Options,
    cluster: &SimCluster,
    label: &str,
) -> Result<Measured, BenchError> {
    let client = cluster
        .server()
        .admin_client()
        .await
        .map_err(BenchError::Client)?;
    let state = cluster.server().state().clone();
    let since = state.store.revision();
    let names: Vec<String> = (1..=PODS).map(|i| format!("idle-{i:02}")).collect();
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    options.say(&format!("pod start, {label}: creating {PODS} pods at once"));
    futures::future::try_join_all(names.iter().map(|name| {
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &idle_pod(name))
                .await
                .map_err(|source| BenchError::Api {
                    what: format!("creating pod {name}"),
                    source: Box::new(source),
                })
        }
    }))
    .await?;
    wait_running(&state, &names).await?;
    let start_ms = agreed_start_times(&state, since, &names).await?;
    tokio::time::sleep(IDLE).await;
    let pod_pids = cluster.pids();
    let runtime_pids = runtime_pids(&pod_pids);
    let kib = |pids: &[u32]| pids.iter().filter_map(|p| vm_rss_kib(*p)).sum::<u64>();
    let measured = Measured {
        memory_kib: kib(&pod_pids) as f64 / PODS as f64,
        runtime_kib: kib(&runtime_pids) as f64 / PODS as f64,
        start_ms,
    };
    if pod_pids.is_empty() {
        return Err(BenchError::Unsound(format!(
            "pod start, {label}: {PODS} pods Running but no pod process found"
        )));
    }
    let stats = super::Stats::of(&measured.start_ms);
    options.say(&format!(
        "pod start, {label}: {PODS} pods Running; create to Running p50 {:.1} ms, p95 {:.1} ms; {:.0} KiB per idle pod in {} processes, {:.0} KiB per pod in {} runtime processes",
        stats.map_or(f64::NAN, |s| s.p50),
        stats.map_or(f64::NAN, |s| s.p95),
        measured.memory_kib,
        pod_pids.len(),
        measured.runtime_kib,
        runtime_pids.len(),
    ));
    Ok(measured)
}

/// A pod of one busybox container that sleeps for an hour.
fn idle_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "pod-start"}},
        "spec": {"containers": [{
            "name": "idle",
            "image": IMAGE,
            "command": ["sh", "-c", "sleep 3600"],
        }]}
    }))
    .unwrap_or_default()
}

fn pods() -> GroupResource {
    GroupResource::new("", "pods")
}

fn phase(pod: &Value) -> Option<&str> {
    pod["status"]["phase"].as_str()
}

/// Waits until every pod in `names` is Running, reading the store itself (no request, so
/// nothing is added to the audit or to the server's load).
async fn wait_running(state: &State, names: &[String]) -> Result<(), BenchError> {
    let deadline = tokio::time::Instant::now() + RUNNING;
    loop {
        let (items, _) = state.store.list(&pods(), Some(NAMESPACE));
        let running = items
            .iter()
            .filter(|p| phase(p) == Some("Running"))
            .filter(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| names.iter().any(|m| m == n))
            })
            .count();
        if running == names.len() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: format!("{} pods to be Running", names.len()),
                within: RUNNING,
                last: format!("{running} Running"),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Each pod's create to Running, once the audit and the event log agree on every status
/// write (a write's audit is recorded just after the write itself).
async fn agreed_start_times(
    state: &State,
    since: u64,
    names: &[String],
) -> Result<Vec<f64>, BenchError> {
    let deadline = tokio::time::Instant::now() + AGREE;
    loop {
        let events = match state.store.watch(Some(since)) {
            Ok((events, ..)) => events,
            Err(e) => {
                return Err(BenchError::Unsound(format!(
                    "the event log no longer holds the pods' changes: {e}"
                )));
            }
        };
        let audit = state.audit.events();
        match start_times(&events, &audit, NAMESPACE, names) {
            Ok(times) => return Ok(times),
            Err(why) if tokio::time::Instant::now() >= deadline => {
                return Err(BenchError::Unsound(why));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Milliseconds from each pod's create to its kubelet's first status write reporting it
/// Running, in the order of `names`; why not, when the audit and the event log disagree.
fn start_times(
    events: &[Arc<Event>],
    audit: &[AuditEvent],
    namespace: &str,
    names: &[String],
) -> Result<Vec<f64>, String> {
    names
        .iter()
        .map(|name| {
            let of_pod = |e: &&AuditEvent| {
                e.namespace == namespace
                    && e.resource == "pods"
                    && e.name == *name
                    && (200..300).contains(&e.code)
            };
            let created = audit
                .iter()
                .filter(of_pod)
                .filter(|e| e.verb == "create" && e.subresource.is_empty())
                .min_by_key(|e| e.time)
                .ok_or_else(|| format!("no create of pod {name} in the audit"))?;
            let mut writes: Vec<&AuditEvent> = audit
                .iter()
                .filter(of_pod)
                .filter(|e| {
                    matches!(e.verb.as_str(), "update" | "patch")
                        && e.subresource == "status"
                        && e.user.starts_with("system:node:")
                })
                .collect();
            writes.sort_by_key(|e| (e.time, e.seq));
            let changes: Vec<&Event> = {
                let mut changes: Vec<&Event> = events
                    .iter()
                    .map(Arc::as_ref)
                    .filter(|e| {
                        e.kind == EventType::Modified
                            && e.gr == pods()
                            && e.namespace == namespace
                            && e.name == *name
                            && status_changed_in_place(e)
                    })
                    .collect();
                changes.sort_by_key(|e| e.revision);
                changes
            };
            if writes.len() != changes.len() {
                return Err(format!(
                    "pod {name}: {} status writes by its kubelet in the audit but {} status changes in the event log",
                    writes.len(),
                    changes.len()
                ));
            }
            let k = changes
                .iter()
                .position(|e| phase(&e.object) == Some("Running"))
                .ok_or_else(|| format!("pod {name}: no status change to Running"))?;
            Ok(millis_between(created.time, writes[k].time))
        })
        .collect()
}

/// A change of the status by a write that left `spec.nodeName` as it was (the binding sets
/// it).
fn status_changed_in_place(event: &Event) -> bool {
    let Some(previous) = &event.previous else {
        return false;
    };
    previous["spec"]["nodeName"] == event.object["spec"]["nodeName"]
        && previous["status"] != event.object["status"]
}

/// The runtime processes of this process's containers: the members of the kubelet's
/// watchdog groups (children of this process that lead a group) other than the watchdogs
/// and the pods' own processes. For a container that is its runtime's `run`, which a
/// container's init process leaves; a host process pod's members are all pod processes.
fn runtime_pids(pod_pids: &[u32]) -> Vec<u32> {
    let me = std::process::id();
    let processes: Vec<(u32, u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (ppid, pgid) = parent_and_group(&stat)?;
            Some((pid, ppid, pgid))
        })
        .collect();
    let watchdogs: HashSet<u32> = processes
        .iter()
        .filter(|(pid, ppid, pgid)| *ppid == me && pid == pgid)
        .map(|(pid, ..)| *pid)
        .collect();
    processes
        .iter()
        .filter(|(pid, _, pgid)| watchdogs.contains(pgid) && pid != pgid && !pod_pids.contains(pid))
        .map(|(pid, ..)| *pid)
        .collect()
}

/// The parent and the process group in the text of `/proc/PID/stat` (after the command
/// name, which may hold spaces and parentheses: `pid (comm) state ppid pgrp …`).
fn parent_and_group(stat: &str) -> Option<(u32, u32)> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some((ppid, pgid))
}

/// The host's statically linked busybox: the first on `PATH`, else `/usr/bin/busybox`.
fn find_busybox() -> Result<PathBuf, PodStartError> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("busybox"))
        .chain([PathBuf::from("/usr/bin/busybox")])
        .find(|p| p.is_file())
        .ok_or(PodStartError::NoBusybox)
}

/// A busybox image directory under `dir/busybox`, made from the host's static busybox:
/// `bin/busybox`, a link for each of its applets, `/etc/passwd` and `/etc/group`.
///
/// # Errors
/// When there is no busybox, it is dynamically linked, or the directory cannot be written.
pub(crate) fn busybox_image(dir: &Path) -> Result<PathBuf, PodStartError> {
    let found = find_busybox()?;
    let unreadable = |source| PodStartError::Busybox {
        path: found.clone(),
        source,
    };
    let elf = std::fs::read(&found).map_err(unreadable)?;
    if !oci_image::is_static_executable(&elf) {
        return Err(PodStartError::Dynamic(found));
    }
    let listed = std::process::Command::new(&found)
        .arg("--list-full")
        .output()
        .map_err(unreadable)?;
    let root = dir.join("busybox");
    let written = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PodStartError::Image { path, source }
    };
    for sub in ["bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "root"] {
        let path = root.join(sub);
        std::fs::create_dir_all(&path).map_err(written(&path))?;
    }
    let binary = root.join("bin/busybox");
    std::fs::copy(&found, &binary).map_err(written(&binary))?;
    for applet in String::from_utf8_lossy(&listed.stdout).lines() {
        let link = root.join(applet.trim().trim_start_matches('/'));
        if applet.trim().is_empty() || link == binary || link.exists() {
            continue;
        }
        std::os::unix::fs::symlink("/bin/busybox", &link).map_err(written(&link))?;
    }
    for (file, text) in [
        (
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        ),
        ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
    ] {
        let path = root.join(file);
        std::fs::write(&path, text).map_err(written(&path))?;
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    const NS: &str = "default";

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    fn audit(ms: i64, user: &str, verb: &str, subresource: &str, name: &str) -> AuditEvent {
        AuditEvent {
            time: at(ms),
            seq: ms as u64,
            user: user.into(),
            groups: vec![],
            impersonated_by: None,
            source_ip: "127.0.0.1".into(),
            pod: None,
            verb: verb.into(),
            api_group: String::new(),
            resource: "pods".into(),
            subresource: subresource.into(),
            namespace: NS.into(),
            name: name.into(),
            request_uri: String::new(),
            user_agent: String::new(),
            code: if verb == "create" { 201 } else { 200 },
        }
    }

    fn change(revision: u64, name: &str, before: Value, after: Value) -> Arc<Event> {
        Arc::new(Event {
            revision,
            kind: EventType::Modified,
            gr: pods(),
            namespace: NS.into(),
            name: name.into(),
            object: after,
            previous: Some(before),
        })
    }

    fn pod(node: Option<&str>, phase: &str, ready: bool) -> Value {
        json!({"spec": {"nodeName": node}, "status": {"phase": phase, "ready": ready}})
    }

    #[test]
    fn the_running_write_is_the_kubelets_write_that_made_the_change_to_running() {
        let kubelet = "system:node:worker-1";
        let mut refused = audit(25, kubelet, "update", "status", "a");
        refused.code = 409;
        let audit = vec![
            audit(0, "admin", "create", "", "a"),
            audit(5, "system:kube-scheduler", "create", "binding", "a"),
            audit(10, kubelet, "update", "status", "a"),
            refused,
            audit(30, kubelet, "update", "status", "a"),
            audit(40, kubelet, "update", "status", "a"),
            audit(50, kubelet, "update", "status", "b"),
        ];
        let events = vec![
            change(
                2,
                "a",
                pod(None, "Pending", false),
                pod(Some("w"), "Pending", false),
            ),
            change(
                3,
                "a",
                pod(Some("w"), "Pending", false),
                pod(Some("w"), "Pending", true),
            ),
            change(
                4,
                "a",
                pod(Some("w"), "Pending", true),
                pod(Some("w"), "Running", false),
            ),
            change(
                5,
                "a",
                pod(Some("w"), "Running", false),
                pod(Some("w"), "Running", true),
            ),
        ];
        let names = ["a".to_string()];
        assert_eq!(start_times(&events, &audit, NS, &names), Ok(vec![30.0]));
        // A write the event log does not show makes the pairing unsound, not a guess.
        let missing = &events[..3];
        let why = start_times(missing, &audit, NS, &names).unwrap_err();
        assert!(
            why.contains("3 status writes") && why.contains("2 status changes"),
            "{why}"
        );
        // So does a pod whose create is not in the audit.
        let why = start_times(&events, &audit, NS, &["b".to_string()]).unwrap_err();
        assert_eq!(why, "no create of pod b in the audit");
    }

    #[test]
    fn the_parent_and_group_are_read_after_the_command_name() {
        let stat = "4242 (sh -c (x)) S 17 4240 4240 0 -1 4194560 120 0 0 0";
        assert_eq!(parent_and_group(stat), Some((17, 4240)));
        assert_eq!(parent_and_group("4242 (sh"), None);
        let mine = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parent_and_group(&mine).is_some());
    }

    #[test]
    fn the_busybox_image_has_sh_and_sleep_linked_to_its_busybox_or_the_error_names_the_package() {
        let dir = tempfile::tempdir().unwrap();
        match busybox_image(dir.path()) {
            Ok(root) => {
                for applet in ["bin/sh", "bin/sleep"] {
                    let link = std::fs::read_link(root.join(applet)).unwrap();
                    assert_eq!(link, Path::new("/bin/busybox"), "{applet}");
                }
                assert!(root.join("bin/busybox").is_file());
                assert!(root.join("etc/passwd").is_file());
            }
            Err(e) => assert!(e.to_string().contains(BUSYBOX_PACKAGE), "{e}"),
        }
    }
}
