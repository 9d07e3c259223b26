//! A real control plane — etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
//! built by `ci/kubernetes/build.sh control-plane` (or setup-envtest's `KUBEBUILDER_ASSETS`)
//! — started as local processes: it serves kube-rs, runs its controllers, writes the audit
//! log, and leaves no process or directory behind, even when its owner is SIGKILLed.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use opconform::cluster::local::{Binaries, ControlPlane, ControlPlaneConfig, binaries};
use tokio::io::AsyncBufReadExt as _;

mod support;

use support::eventually;

fn found_binaries() -> Binaries {
    Binaries::find().unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)))
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s[s.rfind(')')? + 1..]
                .split_whitespace()
                .next()
                .map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// Live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
                && alive(*pid)
        })
        .collect()
}

/// Waits until the control plane's audit log has an event that `matches`.
async fn audited(
    plane: &ControlPlane,
    what: &str,
    matches: impl Fn(&serde_json::Value) -> bool + Clone,
) -> serde_json::Value {
    let audit = plane.audit_log().to_path_buf();
    eventually(what, || {
        let audit = audit.clone();
        let matches = matches.clone();
        async move {
            let text = std::fs::read_to_string(&audit).ok()?;
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|e| matches(e))
        }
    })
    .await
}

/// Creates namespace `name` and waits for its `default` ServiceAccount.
async fn namespace_with_its_default_account(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    eventually("the default ServiceAccount of a new namespace", || {
        let accounts = accounts.clone();
        async move { accounts.get_opt("default").await.ok().flatten() }
    })
    .await;
}

#[tokio::test]
async fn a_real_control_plane_serves_kube_rs_runs_its_controllers_and_audits_writes() {
    let plane = ControlPlane::start(ControlPlaneConfig::new(found_binaries()))
        .await
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    assert_eq!(
        plane.components(),
        [
            "etcd",
            "kube-apiserver",
            "kube-scheduler",
            "kube-controller-manager"
        ]
    );
    let client = plane.admin_client().await.unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, binaries::kubernetes_version());

    // The service-account controllers give a new namespace its default ServiceAccount.
    namespace_with_its_default_account(&client, "local-test").await;

    // The garbage collector removes what an owner that is gone owned.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "local-test");
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = maps.create(&PostParams::default(), &owner).await.unwrap();
    let mut owned = ConfigMap::default();
    owned.metadata.name = Some("owned".into());
    owned.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    maps.create(&PostParams::default(), &owned).await.unwrap();
    maps.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the owned ConfigMap to be collected", || {
        let maps = maps.clone();
        async move { matches!(maps.get_opt("owned").await, Ok(None)).then_some(()) }
    })
    .await;

    // Writes are in the audit log, attributed to the admin.
    audited(&plane, "the namespace's creation in the audit log", |e| {
        e["verb"] == "create"
            && e["objectRef"]["resource"] == "namespaces"
            && e["objectRef"]["name"] == "local-test"
            && e["user"]["username"] == "opconform-admin"
            && e["responseStatus"]["code"] == 201
    })
    .await;

    let dir = plane.dir().to_path_buf();
    let pids = plane.pids();
    plane.shutdown().await;
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "shutdown returned before every component died"
    );
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

#[tokio::test]
async fn a_sigkilled_owner_leaves_no_control_plane_process_or_directory_behind() {
    let out = tempfile::tempdir().unwrap();
    let kubeconfig = out.path().join("kubeconfig");
    let binaries = found_binaries();
    let mut child = tokio::process::Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
        .arg("local")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--binaries")
        .arg(&binaries.dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut serving, mut dir) = (None, None);
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("opconform local: serving") {
                serving = Some(line);
            } else if let Some(path) = line.strip_prefix("work directory: ") {
                dir = Some(path.to_string());
                return;
            }
        }
        panic!("opconform local ended before it was serving")
    })
    .await
    .expect("opconform local serves within 120 s");
    let serving = serving.expect("it said it was serving");
    assert!(
        serving.contains("kube-scheduler, kube-controller-manager"),
        "{serving}"
    );
    let dir = dir.unwrap();
    assert!(kubeconfig.is_file());
    let pids = processes_mentioning(&dir);
    assert!(
        pids.len() >= 4,
        "expected etcd, kube-apiserver, kube-controller-manager and kube-scheduler under {dir}, found {pids:?}"
    );

    child.start_kill().unwrap(); // SIGKILL: no destructor, no handler runs in the child.
    child.wait().await.unwrap();
    let needle = dir.clone();
    eventually("every control-plane process to die with its owner", || {
        let needle = needle.clone();
        async move { processes_mentioning(&needle).is_empty().then_some(()) }
    })
    .await;
    let path = std::path::PathBuf::from(&dir);
    eventually("the work directory to be removed", || {
        let path = path.clone();
        async move { (!path.exists()).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn our_kubelet_runs_pods_the_real_scheduler_binds_with_bound_tokens_and_serves_their_logs() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use opconform::sim::kubelet::{Kubelet, KubeletConfig};
    let mut config = ControlPlaneConfig::new(found_binaries());
    config.nodes = vec!["worker-71".into()];
    let plane = ControlPlane::start(config)
        .await
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let dir = tempfile::tempdir().unwrap();
    let mut node = KubeletConfig::new("worker-71", 71, dir.path().join("node"));
    node.images.insert("example/shell:1", "/bin/sh");
    let kubelet = Kubelet::start(std::sync::Arc::new(plane.upstream()), node)
        .await
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let client = plane.admin_client().await.unwrap();

    let nodes: Api<Node> = Api::all(client.clone());
    eventually("the node to be Ready in the real API server", || {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get_opt("worker-71").await.ok()??;
            node.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then_some(())
        }
    })
    .await;

    // Unscheduled: the real kube-scheduler binds it to our node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
        "spec": {"terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "main", "image": "example/shell:1",
                                 "args": ["-c", "echo hello from $HOSTNAME; exec sleep 300"]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running = eventually("the pod to run on our node", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("sleeper").await.ok()?;
            let status = pod.status.clone()?;
            (status.phase.as_deref() == Some("Running")).then_some(pod)
        }
    })
    .await;
    assert_eq!(
        running.spec.as_ref().unwrap().node_name.as_deref(),
        Some("worker-71")
    );
    let pod_ip = running.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(pod_ip.starts_with("127.171."), "{pod_ip}");
    assert_eq!(kubelet.pids().len(), 1, "one process for the one container");

    // Its ServiceAccount token came from a TokenRequest bound to the pod: in the projected
    // volume the API server added, for a container; in its directory, for a host process.
    let pod_dir = kubelet.pod_dir("default", "sleeper").unwrap();
    let volume = std::fs::read_dir(pod_dir.join("volumes"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("kube-api-access-"));
    let token_file =
        volume.map_or_else(|| pod_dir.join("serviceaccount/token"), |v| v.join("token"));
    let token = std::fs::read_to_string(token_file).unwrap();
    let claims = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = {
        use base64::Engine as _;
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(claims)
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(
        claims["kubernetes.io"]["pod"]["name"], "sleeper",
        "{claims}"
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"]["uid"],
        running.metadata.uid.clone().unwrap().as_str()
    );

    // The real API server reads its log from our kubelet's endpoint.
    let log = eventually("the pod's log through the API server", || {
        let pods = pods.clone();
        async move {
            let log = pods.logs("sleeper", &Default::default()).await.ok()?;
            (!log.is_empty()).then_some(log)
        }
    })
    .await;
    assert_eq!(log, "hello from sleeper\n");

    // Graceful deletion: the kubelet stops the process and makes the final delete.
    let pid = kubelet.pids()[0];
    pods.delete("sleeper", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the pod to be gone", || {
        let pods = pods.clone();
        async move { matches!(pods.get_opt("sleeper").await, Ok(None)).then_some(()) }
    })
    .await;
    assert!(!alive(pid), "the container process outlived its pod");

    kubelet.shutdown().await;
    plane.shutdown().await;
}

#[tokio::test]
async fn a_reject_policy_refuses_exactly_its_requests_from_the_moment_its_probe_says_it_is_in_force()
 {
    use opconform::cluster::admission;
    use opconform::fault::RequestMatch;
    let plane = ControlPlane::start(ControlPlaneConfig::new(found_binaries()))
        .await
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let client = plane.admin_client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["guarded", "other"] {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(name.into());
        maps.create(&PostParams::default(), &map).await.unwrap();
    }
    // The main resource only, as the reconcile steps ask (`subresource: Some("")`).
    let rule = RequestMatch {
        verbs: vec!["update".into()],
        group: Some(String::new()),
        resource: Some("configmaps".into()),
        subresource: Some(String::new()),
        namespace: Some("default".into()),
        name: Some("guarded".into()),
        ..RequestMatch::default()
    };
    let policy =
        admission::reject_policy("guard", &Default::default(), &rule, 403, "not now").unwrap();
    admission::apply(&client, &policy).await.unwrap();
    admission::wait_until_in_force(&client, "guard", true, admission::IN_FORCE_WITHIN)
        .await
        .unwrap();
    let update = |name: &'static str| {
        let maps = maps.clone();
        async move {
            let mut map = maps.get(name).await.unwrap();
            map.data = Some([("k".to_string(), "v".to_string())].into());
            maps.replace(name, &PostParams::default(), &map).await
        }
    };
    match update("guarded").await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403);
            assert!(status.message.contains("not now"), "{}", status.message);
        }
        other => panic!("the guarded update was not refused: {other:?}"),
    }
    update("other")
        .await
        .expect("an update of another ConfigMap is admitted");
    let mut fresh = ConfigMap::default();
    fresh.metadata.name = Some("fresh".into());
    maps.create(&PostParams::default(), &fresh)
        .await
        .expect("a create is admitted: the probe's rule matches only the probe");

    admission::remove(&client, "guard").await.unwrap();
    admission::wait_until_in_force(&client, "guard", false, admission::IN_FORCE_WITHIN)
        .await
        .unwrap();
    update("guarded")
        .await
        .expect("the update is admitted once the policy is gone");
    plane.shutdown().await;
}

#[tokio::test]
async fn without_kube_controller_manager_the_simulators_controllers_stand_in_against_the_real_api_server()
 {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;
    use opconform::cluster::local::ControllersRun;
    use opconform::sim::kubelet::{Kubelet, KubeletConfig};
    // What setup-envtest installs: etcd, kube-apiserver and kubectl, nothing else.
    let found = found_binaries();
    let assets = tempfile::tempdir().unwrap();
    for (name, path) in [
        ("etcd", &found.etcd),
        ("kube-apiserver", &found.kube_apiserver),
    ] {
        std::os::unix::fs::symlink(path, assets.path().join(name)).unwrap();
    }
    let mut config = ControlPlaneConfig::new(Binaries::in_dir(assets.path()).unwrap());
    config.nodes = vec!["worker-72".into()];
    let plane = ControlPlane::start(config)
        .await
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    assert_eq!(plane.components(), ["etcd", "kube-apiserver"]);
    assert_eq!(
        plane.controllers(),
        ControllersRun::Simulated { scheduler: true }
    );
    let client = plane.admin_client().await.unwrap();

    // A new namespace gets its default ServiceAccount and the cluster's CA bundle.
    namespace_with_its_default_account(&client, "stand-in").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "stand-in");
    let bundle = eventually("kube-root-ca.crt in a new namespace", || {
        let maps = maps.clone();
        async move { maps.get_opt("kube-root-ca.crt").await.ok().flatten() }
    })
    .await;
    assert_eq!(
        bundle.data.unwrap().get("ca.crt").map(String::as_str),
        Some(plane.ca_pem())
    );

    // A Deployment gets its ReplicaSet and pods, which our scheduler binds to our node.
    let dir = tempfile::tempdir().unwrap();
    let mut node = KubeletConfig::new("worker-72", 72, dir.path().join("node"));
    node.images.insert("example/shell:1", "/bin/sh");
    let kubelet = Kubelet::start(std::sync::Arc::new(plane.upstream()), node)
        .await
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "stand-in");
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sleepers"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "sleepers"}},
                 "template": {"metadata": {"labels": {"app": "sleepers"}},
                              "spec": {"terminationGracePeriodSeconds": 5,
                                       "containers": [{"name": "main", "image": "example/shell:1",
                                                       "args": ["-c", "exec sleep 300"]}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "stand-in");
    eventually("two pods of the Deployment running on our node", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&Default::default()).await.ok()?;
            let running = list
                .items
                .iter()
                .filter(|p| {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                    node == Some("worker-72") && phase == Some("Running")
                })
                .count();
            (running == 2).then_some(())
        }
    })
    .await;

    // Deleting the Deployment lets the garbage collector take its ReplicaSet and pods.
    deployments
        .delete("sleepers", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the Deployment's pods to be gone", || {
        let pods = pods.clone();
        async move {
            pods.list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        }
    })
    .await;

    // A Job runs its pod to completion on our node; a TTL set then deletes it.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), "stand-in");
    let job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "example/shell:1", "args": ["-c", "exit 0"]}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    eventually("the Job complete with one succeeded pod", || {
        let jobs = jobs.clone();
        async move {
            let status = jobs.get("once").await.ok()?.status?;
            let complete = status
                .conditions?
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True");
            (complete && status.succeeded == Some(1)).then_some(())
        }
    })
    .await;
    jobs.patch(
        "once",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"ttlSecondsAfterFinished": 0}})),
    )
    .await
    .unwrap();
    eventually("the finished Job deleted by its TTL", || {
        let jobs = jobs.clone();
        async move { jobs.get_opt("once").await.ok()?.is_none().then_some(()) }
    })
    .await;

    // The audit names the stand-ins as the components they stand in for.
    audited(
        &plane,
        "the ReplicaSet's creation by the controller manager in the audit log",
        |e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "replicasets"
                && e["user"]["username"] == "system:kube-controller-manager"
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.ends_with("/deployment-controller"))
        },
    )
    .await;

    kubelet.shutdown().await;
    plane.shutdown().await;
}
