//! Images mapped to a directory holding their filesystem: a simulated cluster runs a
//! busybox image's `sh -c "…"` found on the container's PATH inside the directory,
//! serves its output as the pod's log, runs a configured entrypoint and cmd, reports a
//! container it cannot start as a real runtime does, and runs a Job's pods to its end.

mod support;

use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, PostParams};
use opconform::sim::kubelet::{ImageConfig, ImageMap};
use opconform::sim::{SimCluster, SimClusterConfig};
use serde_json::{Value, json};
use support::eventually;

/// A busybox filesystem made from the host's static busybox, under `dir/busybox`.
fn busybox_like(dir: &Path) -> std::path::PathBuf {
    sim_test_support::busybox_image(dir)
}

/// Whether the cluster's pods are containers (rather than host processes).
fn containers() -> bool {
    matches!(
        opconform::sim::kubelet::oci::Isolation::detect(&std::env::temp_dir()),
        opconform::sim::kubelet::oci::Isolation::Containers(_)
    )
}

/// A one-node cluster with `busybox:1.36` mapped to a busybox-like directory and
/// `tools:1` to one whose entrypoint is `sh -c` and cmd an echo; its directory and the
/// default namespace's pods.
async fn start() -> (tempfile::TempDir, SimCluster, Api<Pod>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = busybox_like(dir);
    let mut images = ImageMap::new();
    images.insert("busybox:1.36", &root);
    images.insert_filesystem(
        "tools:1",
        &root,
        ImageConfig {
            entrypoint: vec!["sh".into(), "-c".into()],
            cmd: vec!["echo the default cmd of $POD_NAME".into()],
            user: None,
        },
    );
    let config = SimClusterConfig {
        nodes: 1,
        images,
        work_dir: Some(dir.join("cluster")),
        ..SimClusterConfig::fast()
    };
    let cluster = SimCluster::start(config).await.expect("the cluster starts");
    let client = cluster.server().admin_client().await.unwrap();
    (tmp, cluster, Api::namespaced(client, "default"))
}

/// A pod of one container `c`, which never restarts, with `POD_NAME` from the Downward API.
fn pod(name: &str, container: Value) -> Pod {
    let mut container = container;
    container["name"] = json!("c");
    container["env"] = json!([
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]);
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container]}
    }))
    .unwrap()
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

/// The pod's first container status, as JSON.
fn container(p: &Pod) -> Value {
    let status = serde_json::to_value(p.status.as_ref()).unwrap_or_default();
    status["containerStatuses"][0].clone()
}

/// Waits until the pod has `phase`, and returns it.
async fn until_phase(pods: &Api<Pod>, name: &str, wanted: &str) -> Pod {
    eventually(&format!("pod {name} to be {wanted}"), || async {
        let p = pods.get(name).await.ok()?;
        (phase(&p) == Some(wanted)).then_some(p)
    })
    .await
}

async fn log(pods: &Api<Pod>, name: &str) -> String {
    pods.logs(name, &LogParams::default())
        .await
        .expect("the log is served")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busybox_like_image_runs_sh_from_its_directory_and_its_output_is_the_pods_log() {
    let (dir, _cluster, pods) = start().await;
    let script = "echo hello from $POD_NAME; echo \"cwd $(pwd)\"; env";
    let spec = pod(
        "hello",
        json!({"image": "busybox:1.36", "command": ["sh", "-c", script], "workingDir": "/work"}),
    );
    pods.create(&PostParams::default(), &spec).await.unwrap();
    let done = until_phase(&pods, "hello", "Succeeded").await;
    let c = container(&done);
    assert_eq!(c["state"]["terminated"]["reason"], "Completed", "{c}");
    let text = log(&pods, "hello").await;
    assert!(text.contains("hello from hello\n"), "{text}");
    // The working directory is in the image: its root for a container, the directory for
    // a host process.
    let cwd = if containers() {
        "/work".into()
    } else {
        dir.path().join("busybox/work")
    };
    assert!(text.contains(&format!("cwd {}\n", cwd.display())), "{text}");
    assert!(text.contains("POD_NAME=hello\n"), "{text}");
    assert!(
        text.contains("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"),
        "a container without PATH gets the runtimes' default: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_image_runs_its_entrypoint_with_its_cmd_or_the_containers_args() {
    let (_dir, _cluster, pods) = start().await;
    let defaults = pod("defaults", json!({"image": "tools:1"}));
    let with_args = pod(
        "with-args",
        json!({"image": "tools:1", "args": ["echo args of $(POD_NAME)"]}),
    );
    for p in [defaults, with_args] {
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    until_phase(&pods, "defaults", "Succeeded").await;
    until_phase(&pods, "with-args", "Succeeded").await;
    assert_eq!(
        log(&pods, "defaults").await,
        "the default cmd of defaults\n"
    );
    assert_eq!(log(&pods, "with-args").await, "args of with-args\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_missing_from_the_image_fails_to_start_and_the_status_says_why() {
    let (_dir, _cluster, pods) = start().await;
    let cases = [
        (
            "not-on-path",
            "nope",
            "exec: \"nope\": executable file not found in $PATH",
        ),
        (
            "not-there",
            "/bin/nope",
            "exec: \"/bin/nope\": stat /bin/nope",
        ),
    ];
    for (name, command, _) in cases {
        let p = pod(name, json!({"image": "busybox:1.36", "command": [command]}));
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    for (name, _, wanted) in cases {
        let failed = until_phase(&pods, name, "Failed").await;
        let terminated = container(&failed)["state"]["terminated"].clone();
        assert_eq!(terminated["reason"], "StartError", "{terminated}");
        assert_eq!(terminated["exitCode"], 128, "{terminated}");
        let message = terminated["message"].as_str().unwrap_or_default();
        assert!(message.contains(wanted), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_image_with_nothing_to_run_leaves_the_container_waiting_with_the_reason() {
    let (_dir, _cluster, pods) = start().await;
    let p = pod("nothing", json!({"image": "busybox:1.36"}));
    pods.create(&PostParams::default(), &p).await.unwrap();
    let waiting = eventually("the container to wait with a reason", || async {
        let p = pods.get("nothing").await.ok()?;
        let waiting = container(&p)["state"]["waiting"].clone();
        (waiting["reason"] == "CreateContainerError").then_some(waiting)
    })
    .await;
    let message = waiting["message"].as_str().unwrap_or_default();
    assert!(message.contains("no command specified"), "{message}");
    assert!(message.contains("\"busybox:1.36\""), "{message}");
    let p = pods.get("nothing").await.unwrap();
    assert_eq!(phase(&p), Some("Pending"));
}

/// A Job of `completions` busybox pods, `parallelism` at a time, each running `script`;
/// a pod that exits with 3 fails the Job at once (its pod failure policy).
fn job(name: &str, completions: i32, parallelism: i32, script: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "podFailurePolicy": {"rules": [{"action": "FailJob",
                "onExitCodes": {"operator": "In", "values": [3]}}]},
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "work", "image": "busybox:1.36", "command": ["sh", "-c", script]}]}}
        }
    }))
    .unwrap()
}

/// The status of the Job's condition of `type_`, with its reason.
fn job_condition(job: &Job, type_: &str) -> Option<(String, Option<String>)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_busybox_pods_completes_and_one_whose_pod_exits_3_fails_by_its_pod_failure_policy()
{
    let (_dir, cluster, pods) = start().await;
    let client = cluster.server().admin_client().await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client, "default");
    jobs.create(
        &PostParams::default(),
        &job("count", 3, 2, "hostname; echo done"),
    )
    .await
    .unwrap();
    jobs.create(
        &PostParams::default(),
        &job("broken", 1, 1, "echo failing; exit 3"),
    )
    .await
    .unwrap();

    let done = eventually("the Job count to complete", || async {
        let job = jobs.get("count").await.ok()?;
        (job_condition(&job, "Complete")?.0 == "True").then_some(job)
    })
    .await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        (status.succeeded, status.failed),
        (Some(3), None),
        "{status:?}"
    );
    let ran = pods
        .list(&ListParams::default().labels("job-name=count"))
        .await
        .unwrap();
    assert_eq!(ran.items.len(), 3, "one pod per completion");
    for p in &ran.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        assert_eq!(phase(p), Some("Succeeded"), "{name}");
        let text = log(&pods, &name).await;
        // A container's host name is its pod's; a host process has the machine's.
        if containers() {
            assert_eq!(text, format!("{name}\ndone\n"));
        } else {
            assert!(text.ends_with("done\n"), "{text}");
        }
    }

    let failed = eventually("the Job broken to fail", || async {
        let job = jobs.get("broken").await.ok()?;
        job_condition(&job, "Failed").filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(failed.1.as_deref(), Some("PodFailurePolicy"));
    let ran = pods
        .list(&ListParams::default().labels("job-name=broken"))
        .await
        .unwrap();
    assert_eq!(ran.items.len(), 1, "no pod after the policy failed the Job");
    let name = ran.items[0].metadata.name.clone().unwrap_or_default();
    assert_eq!(log(&pods, &name).await, "failing\n");
}
