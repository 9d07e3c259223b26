//! kubectl (v1.34, built by `ci/kubernetes/build.sh`), a real client, against a running `opconform sim`: CRDs, client-side and
//! server-side apply, get in every output, watch, patch, replace conflicts, delete waiting
//! on a finalizer, tokens and `auth can-i`, discovery (`api-resources`), APIServices, the
//! `kubernetes` Service and field selectors; kubectl's rollout status and wait against
//! the simulated controllers; and, in pods that run, `exec` (also under a terminal), `attach` (the output from
//! then on, and stdin, which `stdinOnce` closes), `logs -f` and `port-forward` (over the
//! WebSocket tunnel and over plain SPDY), and kube-rs's port-forward (over the kubelet's
//! WebSocket channel protocol).
//!
//! The same `exec`, `logs -f` and both port-forward checks, and `attach`, also run against a
//! real control plane (`opconform::cluster::local`) whose one node is our kubelet: there
//! kube-apiserver reaches the pods through the kubelet's own endpoint, which is also shown
//! to refuse anonymous requests (401) and users without `nodes/proxy` (403).

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod support;

const WAIT: Duration = Duration::from_secs(30);

/// A running `opconform sim`, stopped on drop.
struct Sim {
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for Sim {
    fn drop(&mut self) {
        support::stop_child(&mut self.child);
    }
}

fn kubectl_available() {
    let found = Command::new(
        opconform::cluster::local::binaries::kubectl()
            .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e))),
    )
    .args(["version", "--client"])
    .output()
    .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "kubectl was not found (neither built by ci/kubernetes/build.sh nor on PATH): these tests drive the simulator with a real kubectl; run ci/kubernetes/build.sh to build it"
    );
}

impl Sim {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// `opconform sim` with `args` added (`--image NAME=PATH`…).
    fn start_with(args: &[&str]) -> Self {
        kubectl_available();
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
            .args(["sim", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("opconform sim starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("serving") {
                    let _ = tx.send(line);
                }
            }
        });
        rx.recv_timeout(WAIT)
            .expect("opconform sim announces that it is serving");
        Self { child, dir }
    }
}

/// A cluster kubectl drives: its kubeconfig, and a directory for manifests and kubectl's
/// cache.
trait Kubectl {
    /// The scratch directory (the kubeconfig is `kubeconfig` in it).
    fn dir(&self) -> &std::path::Path;

    fn kubeconfig(&self) -> PathBuf {
        self.dir().join("kubeconfig")
    }

    fn kubectl(&self) -> Command {
        let mut cmd = Command::new(
            opconform::cluster::local::binaries::kubectl()
                .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e))),
        );
        cmd.env("KUBECONFIG", self.kubeconfig())
            .env("KUBECACHEDIR", self.dir().join("cache"))
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        cmd
    }

    /// Runs kubectl, returning its output whatever the exit code.
    fn run(&self, args: &[&str]) -> Output {
        self.kubectl().args(args).output().expect("kubectl runs")
    }

    /// Runs kubectl and requires success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn write(&self, name: &str, content: &str) -> String {
        let path = self.dir().join(name);
        std::fs::write(&path, content).expect("write manifest");
        path.display().to_string()
    }

    /// Applies the manifest of pod `name` and waits until it is Ready.
    fn ready_pod(&self, name: &str, manifest: &str) {
        let path = self.write(&format!("{name}.yaml"), manifest);
        self.ok(&["apply", "-f", &path]);
        self.ok(&[
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=30s",
        ]);
    }
}

impl Kubectl for Sim {
    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: memcacheds.cache.example.com
spec:
  group: cache.example.com
  scope: Namespaced
  names: {plural: memcacheds, singular: memcached, kind: Memcached, listKind: MemcachedList}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 0, maximum: 100}
"#;

fn memcached(size: u32) -> String {
    format!(
        "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: cache\nspec:\n  size: {size}\n"
    )
}

fn deployment(replicas: u32, image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: {image}
        env: [{{name: MODE, value: fast}}]
"#
    )
}

#[test]
fn kubectl_creates_a_crd_waits_for_it_and_applies_resources_client_and_server_side() {
    let sim = Sim::start();
    let crd = sim.write("crd.yaml", CRD);
    assert!(sim.ok(&["create", "-f", &crd]).contains("created"));
    sim.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/memcacheds.cache.example.com",
        "--timeout=20s",
    ]);

    let cr = sim.write("cr.yaml", &memcached(3));
    assert!(
        sim.ok(&["apply", "-f", &cr])
            .contains("memcached.cache.example.com/cache created")
    );
    assert!(sim.ok(&["apply", "-f", &cr]).contains("unchanged"));
    let cr4 = sim.write("cr4.yaml", &memcached(4));
    assert!(sim.ok(&["apply", "-f", &cr4]).contains("configured"));
    assert_eq!(
        sim.ok(&["get", "memcached", "cache", "-o", "jsonpath={.spec.size}"]),
        "4"
    );

    let d = sim.write("d.yaml", &deployment(2, "memcached:1.6-alpine"));
    assert!(
        sim.ok(&["apply", "-f", &d])
            .contains("deployment.apps/web created")
    );
    assert!(sim.ok(&["apply", "-f", &d]).contains("unchanged"));
    let d2 = sim.write("d2.yaml", &deployment(2, "memcached:1.6.21-alpine"));
    assert!(sim.ok(&["apply", "-f", &d2]).contains("configured"));
    let json: serde_json::Value =
        serde_json::from_str(&sim.ok(&["get", "deployment", "web", "-o", "json"])).unwrap();
    assert_eq!(
        json["spec"]["template"]["spec"]["containers"][0]["image"],
        "memcached:1.6.21-alpine"
    );
    assert_eq!(
        json["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"],
        "MODE"
    );
    assert_eq!(json["metadata"]["generation"], 2);
    let yaml = sim.ok(&["get", "deployment", "web", "-o", "yaml"]);
    assert!(yaml.contains("kind: Deployment") && yaml.contains("replicas: 2"));
    assert!(
        sim.ok(&["get", "deployments", "-l", "app=web"])
            .contains("web")
    );
    assert!(
        !sim.ok(&["get", "deployments", "-l", "app=other"])
            .contains("web")
    );

    let cm = sim.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n",
    );
    assert!(
        sim.ok(&["apply", "--server-side", "-f", &cm])
            .contains("serverside-applied")
    );
    let managers = sim.ok(&[
        "get",
        "configmap",
        "settings",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(managers.contains("kubectl"), "{managers}");

    assert!(
        sim.ok(&[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#
        ])
        .contains("patched")
    );
    assert_eq!(
        sim.ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "3"
    );
}

#[test]
fn kubectl_replace_with_a_stale_resource_version_fails_with_the_real_conflict() {
    let sim = Sim::start();
    // A server-side dry run answers but stores nothing.
    let dry = sim.ok(&[
        "create",
        "configmap",
        "cfg",
        "--from-literal=a=1",
        "--dry-run=server",
    ]);
    assert!(dry.contains("created (server dry run)"), "{dry}");
    assert!(!sim.run(&["get", "configmap", "cfg"]).status.success());
    sim.ok(&["create", "configmap", "cfg", "--from-literal=a=1"]);
    let current = sim.ok(&["get", "configmap", "cfg", "-o", "yaml"]);
    sim.ok(&[
        "patch",
        "configmap",
        "cfg",
        "--type=merge",
        "-p",
        r#"{"data":{"a":"2"}}"#,
    ]);
    let stale = sim.write("stale.yaml", &current);
    let out = sim.run(&["replace", "-f", &stale]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Operation cannot be fulfilled on configmaps \"cfg\": the object has been modified; please apply your changes to the latest version and try again"),
        "{stderr}"
    );
}

#[test]
fn kubectl_get_watch_sees_a_change() {
    let sim = Sim::start();
    sim.ok(&["create", "configmap", "watched", "--from-literal=a=1"]);
    let mut watch = sim
        .kubectl()
        .args([
            "get",
            "configmap",
            "watched",
            "-w",
            "-o",
            "jsonpath={.data.a}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl get -w");
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    assert_eq!(rx.recv_timeout(WAIT).expect("the initial state"), "1");
    sim.ok(&[
        "patch",
        "configmap",
        "watched",
        "--type=merge",
        "-p",
        r#"{"data":{"a":"2"}}"#,
    ]);
    assert_eq!(rx.recv_timeout(WAIT).expect("the change"), "2");
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn kubectl_delete_waits_until_the_last_finalizer_is_removed() {
    let sim = Sim::start();
    let held = sim.write(
        "held.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/cleanup]\n",
    );
    sim.ok(&["create", "-f", &held]);
    let mut delete = sim
        .kubectl()
        .args(["delete", "configmap", "held", "--wait", "--timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl delete");
    // The delete is in progress: the object is Terminating and the command still waits.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let ts = sim.ok(&[
            "get",
            "configmap",
            "held",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ]);
        if !ts.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the object never became Terminating"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        delete.try_wait().unwrap().is_none(),
        "kubectl delete returned before the finalizer was removed"
    );
    sim.ok(&[
        "patch",
        "configmap",
        "held",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    let out = wait_with_timeout(delete, WAIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted"));
    let gone = sim.run(&["get", "configmap", "held"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
}

fn wait_with_timeout(mut child: Child, timeout: Duration) -> Output {
    let deadline = std::time::Instant::now() + timeout;
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("command did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn kubectl_auth_can_i_answers_for_a_service_account_as_rbac_says() {
    let sim = Sim::start();
    sim.ok(&["create", "serviceaccount", "op"]);
    let as_op = ["--as=system:serviceaccount:default:op"];
    let ask = |verb: &str, resource: &str| {
        let out = sim.run(&["auth", "can-i", verb, resource, as_op[0]]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(ask("create", "leases.coordination.k8s.io"), "no");
    sim.ok(&[
        "create",
        "role",
        "leases",
        "--verb=get,create,update",
        "--resource=leases.coordination.k8s.io",
    ]);
    sim.ok(&[
        "create",
        "rolebinding",
        "leases",
        "--role=leases",
        "--serviceaccount=default:op",
    ]);
    assert_eq!(ask("create", "leases.coordination.k8s.io"), "yes");
    assert_eq!(ask("delete", "leases.coordination.k8s.io"), "no");
    assert_eq!(ask("list", "pods"), "no");
    let token = sim.ok(&["create", "token", "op"]);
    assert!(token.trim().len() > 20, "a token: {token}");
    // The token authenticates as the ServiceAccount.
    let out = sim
        .kubectl()
        .args(["--token", token.trim(), "get", "pods"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("User \"system:serviceaccount:default:op\" cannot list resource \"pods\""),
        "{stderr}"
    );
}

#[test]
fn opconform_fault_rejects_requests_until_allowed_as_kubectl_sees_it() {
    let sim = Sim::start();
    let fault = |args: &[&str]| {
        Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
            .arg("fault")
            .arg("--kubeconfig")
            .arg(sim.kubeconfig())
            .args(args)
            .output()
            .expect("opconform fault runs")
    };
    let out = fault(&[
        "reject",
        "--verb",
        "create",
        "--resource",
        "configmaps",
        "--code",
        "503",
        "--reason",
        "ServiceUnavailable",
        "--message",
        "injected outage",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = id["id"].as_u64().expect("a rule id");
    let refused = sim.run(&["create", "configmap", "c", "--from-literal=a=b"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("injected outage"));
    let out = fault(&["allow", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sim.ok(&["create", "configmap", "c", "--from-literal=a=b"]);
    let listing = String::from_utf8_lossy(&fault(&["list"]).stdout).into_owned();
    assert!(
        listing.contains("\"reject\"") && listing.contains("\"allow\""),
        "{listing}"
    );
    // A bad verb is a clear usage error, not a panic.
    let out = fault(&["pod", "default/x", "explode"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown pod fault \"explode\""));
}

#[test]
fn kubectl_discovers_every_resource_lists_apiservices_and_the_kubernetes_service_and_selects_pods_by_node()
 {
    let sim = Sim::start();
    let resources = sim.ok(&["api-resources", "-o", "name"]);
    for name in [
        "pods",
        "deployments.apps",
        "apiservices.apiregistration.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
    ] {
        assert!(
            resources.lines().any(|l| l == name),
            "{name} in api-resources: {resources}"
        );
    }
    let apiservices = sim.ok(&["get", "apiservices", "-o", "name"]);
    for name in [
        "apiservice.apiregistration.k8s.io/v1.",
        "apiservice.apiregistration.k8s.io/v1.apps",
    ] {
        assert!(
            apiservices.lines().any(|l| l == name),
            "{name} in {apiservices}"
        );
    }
    let port = sim.ok(&[
        "get",
        "svc",
        "kubernetes",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.clusterIP} {.spec.ports[0].name} {.spec.ports[0].port}",
    ]);
    assert_eq!(port, "10.0.0.1 https 443");
    let pod = |name: &str, node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {node}\n  containers: [{{name: main, image: example/app:1}}]\n"
        )
    };
    for (name, node) in [("on-a", "node-a"), ("on-b", "node-b")] {
        let path = sim.write(&format!("{name}.yaml"), &pod(name, node));
        sim.ok(&["create", "-f", &path]);
    }
    let selected = sim.ok(&[
        "get",
        "pods",
        "--field-selector",
        "spec.nodeName=node-a",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "pod/on-a");
    let refused = sim.run(&["get", "pods", "--field-selector", "spec.image=x"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("field label not supported: spec.image"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// kubectl's rollout rule, against the simulated API server and controllers of this process
// with a fake kubelet in place of the nodes (sim-test-support's, as the controllers' own
// tests start them): no `opconform sim` runs.

#[tokio::test]
async fn kubectl_rollout_status_and_wait_for_available_are_satisfied() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Api, PostParams};
    use serde_json::json;
    use sim_test_support::controllers::{Sim, available, deployment, rollout_complete};

    let sim = Sim::start(&["node-a", "node-b"]).await;
    let deployments: Api<Deployment> = sim.api();
    deployments
        .create(
            &PostParams::default(),
            &deployment("cli", 2, "cli:1", json!({"type": "RollingUpdate"})),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.server.admin_kubeconfig()).unwrap();
    let kubectl = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(
            opconform::cluster::local::binaries::kubectl()
                .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e))),
        );
        cmd.args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBECACHEDIR", dir.path().join("cache"));
        cmd
    };
    let rollout = kubectl(&["rollout", "status", "deployment/cli", "--timeout=20s"])
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&rollout.stdout);
    assert!(
        rollout.status.success(),
        "rollout status failed: {out} {}",
        String::from_utf8_lossy(&rollout.stderr)
    );
    assert!(out.contains("successfully rolled out"), "{out}");
    let wait = kubectl(&[
        "wait",
        "--for=condition=Available",
        "deployment/cli",
        "--timeout=20s",
    ])
    .output()
    .await
    .unwrap();
    assert!(
        wait.status.success(),
        "wait failed: {}",
        String::from_utf8_lossy(&wait.stderr)
    );

    // The same rule, read from the status fields.
    let d = deployments.get("cli").await.unwrap();
    assert!(rollout_complete(&d) && available(&d), "{:?}", d.status);
    let history = kubectl(&["rollout", "history", "deployment/cli"])
        .output()
        .await
        .unwrap();
    assert!(
        history.status.success(),
        "{}",
        String::from_utf8_lossy(&history.stderr)
    );
    sim.stop().await;
}

/// Writes `files` (name, text) into `dir`.
fn write_all(dir: &std::path::Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write a manifest");
    }
}

#[test]
fn a_kustomize_directory_is_rendered_as_kubectl_kustomize_renders_it() {
    use opconform::subject::{ManifestSource, kind_of};
    kubectl_available();
    let dir = tempfile::tempdir().expect("tempdir");
    write_all(
        dir.path(),
        &[
            (
                "kustomization.yaml",
                "namespace: shop-system\nnamePrefix: shop-\nresources: [manager.yaml]\n",
            ),
            (
                "manager.yaml",
                "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: controller-manager}\n---\n\
                 apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: controller-manager}\n\
                 spec:\n  selector: {matchLabels: {app: shop}}\n  template:\n    metadata: \
                 {labels: {app: shop}}\n    spec:\n      serviceAccountName: controller-manager\n      \
                 containers: [{name: manager, image: controller:latest}]\n",
            ),
        ],
    );
    let manifests = ManifestSource::Kustomize(dir.path().to_path_buf())
        .read()
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let placed: Vec<(String, String, String)> = manifests
        .iter()
        .map(|m| {
            (
                kind_of(&m.object).to_string(),
                m.object.metadata.namespace.clone().unwrap_or_default(),
                m.object.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    let expected = |kind: &str| {
        (
            kind.to_string(),
            "shop-system".to_string(),
            "shop-controller-manager".to_string(),
        )
    };
    assert_eq!(placed, [expected("ServiceAccount"), expected("Deployment")]);
    // kustomize's own renaming reaches the references: the pod runs as the renamed account.
    assert_eq!(
        manifests[1].object.data["spec"]["template"]["spec"]["serviceAccountName"],
        "shop-controller-manager"
    );
}

#[test]
fn a_kustomization_that_names_a_missing_resource_fails_with_kustomizes_own_error() {
    use opconform::subject::ManifestSource;
    kubectl_available();
    let dir = tempfile::tempdir().expect("tempdir");
    write_all(
        dir.path(),
        &[("kustomization.yaml", "resources: [gone.yaml]\n")],
    );
    let e = ManifestSource::Kustomize(dir.path().to_path_buf())
        .read()
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "cannot render the manifests of {}: ",
            dir.path().display()
        )) && e.contains("gone.yaml"),
        "{e}"
    );
}

#[test]
fn the_kubebuilder_scaffold_renders_from_its_kustomize_tree_and_follows_its_operator_when_moved() {
    use opconform::subject::{OperatorSetup, kind_of};
    kubectl_available();
    let root = opconform::subject::repository_root();
    let subject = opconform::profile::Profile::read(
        &root.join("subjects/kubebuilder-memcached/profile.yaml"),
    )
    .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    assert_eq!(
        subject.manager_command().map_err(|e| e.to_string()),
        Ok(Some("/manager".to_string())),
        "the image the kind provider builds puts the binary where the manager runs it"
    );
    let placement = opconform::cluster::shared::shared_placement("opconform-t1", "kb:dev");
    let setup = OperatorSetup::lease(&subject, 3, "4s/3s/1s", "").expect("lease setup");
    let manifests = subject
        .render(&setup, &placement)
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let object = |kind: &str, name: &str| {
        manifests
            .iter()
            .map(|m| &m.object)
            .find(|o| kind_of(o) == kind && o.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
    };
    let deployment = object("Deployment", "memcached-operator-controller-manager");
    assert_eq!(
        deployment.metadata.namespace.as_deref(),
        Some("opconform-t1-system")
    );
    let manager = &deployment.data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(manager["image"], "kb:dev");
    assert_eq!(deployment.data["spec"]["replicas"], 3);
    // The scaffold's own flags stay, the timings are its own: nothing is added for them.
    let args: Vec<&str> = manager["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(
        args,
        [
            "--metrics-bind-address=:8443",
            "--health-probe-bind-address=:8081",
            "--zap-time-encoding=rfc3339nano",
            "--leader-elect"
        ]
    );
    // Its webhooks off: the env, no certificate volume, none of cert-manager's objects and
    // no webhook configuration.
    assert!(
        manager["env"]
            .as_array()
            .expect("env")
            .contains(&serde_json::json!({"name": "ENABLE_WEBHOOKS", "value": "false"})),
        "{manager}"
    );
    assert_eq!(manager["volumeMounts"], serde_json::json!([]));
    assert_eq!(
        deployment.data["spec"]["template"]["spec"]["volumes"],
        serde_json::json!([])
    );
    for m in &manifests {
        let kind = kind_of(&m.object);
        assert!(
            !kind.contains("Webhook") && kind != "Certificate" && kind != "Issuer",
            "{kind} was applied"
        );
        assert_ne!(
            m.object.metadata.name.as_deref(),
            Some("memcached-operator-webhook-service")
        );
    }
    // Its RBAC follows it: the lease Role where it runs, the ClusterRoleBindings to the
    // renamed roles and its moved ServiceAccount.
    let role = object("Role", "memcached-operator-leader-election-role");
    assert_eq!(
        role.metadata.namespace.as_deref(),
        Some("opconform-t1-system")
    );
    let binding = object(
        "ClusterRoleBinding",
        "memcached-operator-metrics-auth-rolebinding-opconform-t1",
    );
    assert_eq!(
        binding.data["roleRef"]["name"],
        "memcached-operator-metrics-auth-role-opconform-t1"
    );
    assert_eq!(
        binding.data["subjects"][0]["namespace"],
        "opconform-t1-system"
    );
    object(
        "ClusterRole",
        "memcached-operator-metrics-reader-opconform-t1",
    );
}

#[test]
fn kubectl_exec_runs_commands_in_a_pod_and_logs_follow_streams_its_output_as_written() {
    exec_and_logs_follow(&Sim::start_with(&["--image", "shell:1=/bin/sh"]));
}

/// `kubectl exec` (stdout, stderr, stdin, an exit code) and `kubectl logs -f` in a pod of
/// image `shell:1` (`/bin/sh`).
fn exec_and_logs_follow(sim: &impl Kubectl) {
    // It waits for a file its working directory gets from an exec, then ends.
    sim.ready_pod(
        "waiter",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: waiter}\nspec:\n  restartPolicy: Never\n  \
         containers:\n  - name: main\n    image: shell:1\n    command: [/bin/sh, -c, \
         'echo before; while [ ! -e go ]; do sleep 0.1; done; echo after']\n",
    );

    let out = sim.run(&[
        "exec",
        "waiter",
        "--",
        "/bin/sh",
        "-c",
        "echo out; echo err >&2",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");

    let mut cat = sim
        .kubectl()
        .args(["exec", "-i", "waiter", "--", "/bin/cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl exec -i starts");
    {
        use std::io::Write as _;
        let mut stdin = cat.stdin.take().expect("stdin");
        stdin
            .write_all(b"through stdin\n")
            .expect("kubectl reads stdin");
    }
    let echoed = wait_with_timeout(cat, WAIT);
    assert!(echoed.status.success(), "{echoed:?}");
    assert_eq!(String::from_utf8_lossy(&echoed.stdout), "through stdin\n");

    let failed = sim.run(&["exec", "waiter", "--", "/bin/sh", "-c", "exit 3"]);
    assert_eq!(failed.status.code(), Some(3), "{failed:?}");

    let mut follow = sim
        .kubectl()
        .args(["logs", "-f", "waiter"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl logs -f starts");
    let mut lines = BufReader::new(follow.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok);
    assert_eq!(first.as_deref(), Some("before"));
    // Only now is the pod told to go on: "after" reaches a follower already there.
    sim.ok(&["exec", "waiter", "--", "/bin/sh", "-c", "touch go"]);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(rest, ["after"], "the rest of the followed log");
    let ended = wait_with_timeout(follow, WAIT);
    assert!(
        ended.status.success(),
        "kubectl logs -f ends with the container: {ended:?}"
    );
}

/// Starts `kubectl port-forward pod/NAME :PORT` (with `env` set) and returns it and the
/// local port from its `Forwarding from 127.0.0.1:NNNN -> PORT` line; its stdout is read on
/// to the end by a thread, so kubectl never blocks writing it.
fn port_forward(sim: &impl Kubectl, pod: &str, port: u16, env: &[(&str, &str)]) -> (Child, u16) {
    let mut child = sim
        .kubectl()
        .args(["port-forward", &format!("pod/{pod}"), &format!(":{port}")])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let suffix = format!(" -> {port}");
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let local = line
                .strip_prefix("Forwarding from 127.0.0.1:")
                .and_then(|rest| rest.strip_suffix(suffix.as_str()))
                .and_then(|p| p.parse::<u16>().ok());
            if let Some(local) = local {
                let _ = tx.send(local);
            }
        }
    });
    match rx.recv_timeout(WAIT) {
        Ok(local) => (child, local),
        Err(_) => {
            let _ = child.kill();
            let out = child.wait_with_output().expect("kubectl output");
            panic!(
                "kubectl port-forward did not say where it listens: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        }
    }
}

/// `GET path` over HTTP/1.0 to 127.0.0.1:`port`: the whole answer, or what cut it short.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(WAIT))?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[test]
fn kubectl_port_forward_reaches_a_pods_port_over_the_websocket_tunnel_and_over_plain_spdy() {
    port_forward_both_ways(&Sim::start_with(&["--image", "shell:1=/bin/sh"]));
}

/// Pod `portal` of image `shell:1` (`/bin/sh`) serving HTTP with python3 on 8080: the
/// container's filesystem, whose /etc/hostname is the pod's; Ready once the port accepts
/// connections.
fn serve_portal(sim: &impl Kubectl) {
    sim.ready_pod(
        "portal",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: portal}\nspec:\n  containers:\n  \
         - name: main\n    image: shell:1\n    command: [/bin/sh, -c, \
         'exec python3 -m http.server 8080 --bind 0.0.0.0 --directory /']\n    \
         ports: [{containerPort: 8080}]\n    \
         readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}\n",
    );
}

/// `kubectl port-forward` to pod `portal` ([`serve_portal`]): over the WebSocket tunnel
/// and over plain SPDY, and a refused port.
fn port_forward_both_ways(sim: &impl Kubectl) {
    serve_portal(sim);

    // kubectl's default (SPDY inside a WebSocket), then its fallback (plain SPDY/3.1).
    for env in [&[][..], &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")][..]] {
        let (mut kubectl, local) = port_forward(sim, "portal", 8080, env);
        // Two connections: two pairs of streams on the one session.
        for _ in 0..2 {
            let answer = http_get(local, "/etc/hostname")
                .unwrap_or_else(|e| panic!("GET through port {local} ({env:?}): {e}"));
            assert!(
                answer.starts_with("HTTP/1.0 200 OK\r\n"),
                "{env:?}: {answer}"
            );
            assert!(answer.ends_with("\r\n\r\nportal\n"), "{env:?}: {answer}");
        }
        let _ = kubectl.kill();
        let _ = kubectl.wait();
    }

    // Nothing listens on 8081: the error the pod's side gave reaches kubectl, which says
    // so and ends.
    let (kubectl, local) = port_forward(sim, "portal", 8081, &[]);
    let cut = http_get(local, "/").unwrap_or_default();
    assert!(!cut.contains("200 OK"), "{cut}");
    let out = wait_with_timeout(kubectl, WAIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error forwarding port 8081 to pod default/portal")
            && stderr.contains("onnection refused"),
        "{out:?}"
    );
}

#[test]
fn kube_rs_port_forward_reaches_a_pods_port_over_the_kubelets_websocket_channel_protocol() {
    let sim = Sim::start_with(&["--image", "shell:1=/bin/sh"]);
    serve_portal(&sim);
    kube_rs_port_forward(&sim);
}

/// kube-rs's `Api::<Pod>::portforward` (the kubelet's WebSocket channel protocol) to pod
/// `portal` ([`serve_portal`]) on 8080 and 8081 at once: an HTTP answer through 8080, the
/// pod's refusal of 8081 (nothing listens there) on its error channel, and the session's
/// end once both are done; an unknown pod is a 404.
fn kube_rs_port_forward(cluster: &impl Kubectl) {
    use k8s_openapi::api::core::v1::Pod;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(cluster.kubeconfig()).expect("the kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client configuration");
        let pods: kube::Api<Pod> =
            kube::Api::default_namespaced(kube::Client::try_from(config).expect("a client"));
        let mut forwarder = pods
            .portforward("portal", &[8080, 8081])
            .await
            .unwrap_or_else(|e| panic!("kube-rs port-forward to portal: {e}"));
        let mut stream = forwarder.take_stream(8080).expect("the stream of 8080");
        let refused = forwarder.take_error(8081).expect("the errors of 8081");
        stream
            .write_all(b"GET /etc/hostname HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await
            .expect("the request is written");
        // The pod ends its answer; both ports done, the server ends the session.
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut answer))
            .await
            .unwrap_or_else(|_| panic!("the answer did not end within {WAIT:?}"))
            .expect("the answer is read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nportal\n"), "{answer}");
        let error = tokio::time::timeout(WAIT, refused)
            .await
            .unwrap_or_else(|_| panic!("no word on 8081 within {WAIT:?}"))
            .unwrap_or_default();
        assert!(
            error.starts_with("error forwarding port 8081 to pod default/portal")
                && error.contains("onnection refused"),
            "{error}"
        );
        drop(stream);
        // The server closed the WebSocket first (every port done, as the kubelet closes
        // it), so kube-rs's own Close finds it closed: the one error its join may report.
        let joined = tokio::time::timeout(WAIT, forwarder.join())
            .await
            .unwrap_or_else(|_| panic!("the forwarder did not end within {WAIT:?}"));
        if let Err(e) = joined {
            assert!(e.to_string().contains("Sending after closing"), "{e}");
        }
        match pods.portforward("nowhere", &[8080]).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 404, "{status:?}"),
            Err(e) => panic!("an unknown pod: {e}"),
            Ok(_) => panic!("an unknown pod was forwarded to"),
        }
    });
}

/// A real control plane (`opconform::cluster::local`) with one node of our kubelet, which
/// maps image `shell:1` to `/bin/sh`; stopped on drop, even when the test panics.
struct Local {
    runtime: tokio::runtime::Runtime,
    plane: Option<opconform::cluster::local::ControlPlane>,
    kubelet: Option<opconform::sim::kubelet::Kubelet>,
    dir: tempfile::TempDir,
}

const LOCAL_NODE: &str = "worker-74";

impl Local {
    fn start() -> Self {
        use opconform::cluster::local::{Binaries, ControlPlane, ControlPlaneConfig};
        use opconform::sim::kubelet::{Kubelet, KubeletConfig};
        kubectl_available();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let binaries =
            Binaries::find().unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
        let mut config = ControlPlaneConfig::new(binaries);
        config.nodes = vec![LOCAL_NODE.into()];
        let plane = runtime
            .block_on(ControlPlane::start(config))
            .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
        let mut local = Self {
            runtime,
            plane: Some(plane),
            kubelet: None,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let mut node = KubeletConfig::new(LOCAL_NODE, 74, local.dir.path().join("node"));
        node.images.insert("shell:1", "/bin/sh");
        let upstream = std::sync::Arc::new(local.plane().upstream());
        let kubelet = local
            .runtime
            .block_on(Kubelet::start(upstream, node))
            .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
        local.kubelet = Some(kubelet);
        local
            .plane()
            .write_admin_kubeconfig(&local.kubeconfig())
            .expect("the admin kubeconfig is written");
        local.ok(&[
            "wait",
            "--for=condition=Ready",
            &format!("node/{LOCAL_NODE}"),
            "--timeout=60s",
        ]);
        local
    }

    fn plane(&self) -> &opconform::cluster::local::ControlPlane {
        self.plane.as_ref().expect("the control plane runs")
    }

    /// `GET path` of the kubelet's own endpoint at `server`, trusting the cluster CA, with
    /// `token` or no credentials: the status and the body.
    fn kubelet_get(&self, server: &str, token: Option<&str>, path: &str) -> (u16, String) {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.plane().ca_pem());
        let user = token.map_or("{}".to_string(), |t| format!("{{token: {t}}}"));
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: k, cluster: {{server: '{server}', \
             certificate-authority-data: {ca}}}}}]\nusers: [{{name: u, user: {user}}}]\n\
             contexts: [{{name: k, context: {{cluster: k, user: u}}}}]\ncurrent-context: k\n"
        );
        self.runtime.block_on(async {
            let parsed: kube::config::Kubeconfig =
                serde_yaml::from_str(&kubeconfig).expect("a kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
                .await
                .expect("a client configuration");
            let client = kube::Client::try_from(config).expect("a client");
            support::raw(&client, "GET", path, "text/plain", Vec::new()).await
        })
    }
}

impl Kubectl for Local {
    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let (kubelet, plane) = (self.kubelet.take(), self.plane.take());
        self.runtime.block_on(async {
            if let Some(kubelet) = kubelet {
                kubelet.shutdown().await;
            }
            if let Some(plane) = plane {
                plane.shutdown().await;
            }
        });
    }
}

/// The kubelet's endpoint lets in users whose token the API server knows and who may use
/// `nodes/proxy`, and no one else (kube-apiserver, with its client certificate, is let in
/// for exec, logs and port-forward; its node proxy refuses loopback addresses, so it is
/// not tried here); a pod it does not run is a 404 with the kubelet's text.
fn the_kubelet_lets_in_only_whom_the_api_server_authorizes(local: &Local) {
    let port = local.ok(&[
        "get",
        "node",
        LOCAL_NODE,
        "-o",
        "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}",
    ]);
    // Its serving certificate is for its InternalIP, signed by the cluster CA.
    let server = format!("https://127.0.10.74:{port}");
    assert_eq!(
        local.kubelet_get(&server, None, "/healthz"),
        (401, "Unauthorized".to_string())
    );
    local.ok(&["create", "serviceaccount", "nobody"]);
    let token = local.ok(&["create", "token", "nobody"]);
    let token = token.trim();
    assert_eq!(
        local.kubelet_get(&server, Some(token), "/healthz"),
        (
            403,
            "Forbidden (user=system:serviceaccount:default:nobody, verb=get, resource=nodes, \
             subresource(s)=[healthz proxy])\n"
                .to_string()
        )
    );
    local.ok(&[
        "create",
        "clusterrole",
        "node-proxy",
        "--verb=get",
        "--resource=nodes/proxy",
    ]);
    // Bound now, but the kubelet keeps its denial of `nobody` for 30 s, as the kubelet
    // does: `somebody`, never asked about, shows the binding.
    local.ok(&["create", "serviceaccount", "somebody"]);
    local.ok(&[
        "create",
        "clusterrolebinding",
        "node-proxy",
        "--clusterrole=node-proxy",
        "--serviceaccount=default:nobody",
        "--serviceaccount=default:somebody",
    ]);
    // The binding reaches the API server's authorizer through its informers: asked of the
    // API server, so that no denial is cached by the kubelet meanwhile.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let can = local.run(&[
            "auth",
            "can-i",
            "get",
            "nodes",
            "--subresource=proxy",
            "--as=system:serviceaccount:default:somebody",
        ]);
        if String::from_utf8_lossy(&can.stdout).trim() == "yes" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the binding did not reach the authorizer within {WAIT:?}: {can:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let token = local.ok(&["create", "token", "somebody"]);
    let token = token.trim();
    assert_eq!(
        local.kubelet_get(&server, Some(token), "/healthz"),
        (200, "ok".to_string())
    );
    // A pod the kubelet does not run.
    assert_eq!(
        local.kubelet_get(&server, Some(token), "/portForward/default/nowhere"),
        (404, "pod does not exist".to_string())
    );
}

/// `kubectl attach` relays what the container writes until it ends, its stdout on kubectl's
/// stdout and its stderr on kubectl's stderr, then ends well.
fn attach_relays_a_containers_output_until_it_ends(local: &impl Kubectl) {
    local.ready_pod(
        "talker",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: talker}\nspec:\n  restartPolicy: Never\n  \
         containers:\n  - name: main\n    image: shell:1\n    command: [/bin/sh, -c, \
         'while [ ! -e stop ]; do echo tick; echo tock >&2; sleep 0.2; done; echo bye']\n",
    );
    let mut attach = local
        .kubectl()
        .args(["attach", "talker"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach starts");
    let stderr = attach.stderr.take().expect("stderr");
    let errors = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    // Read by a thread, so that every wait for a line is bounded.
    let stdout = attach.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = lines.recv_timeout(WAIT);
    if first.as_deref() != Ok("tick") {
        let _ = attach.kill();
        panic!("kubectl attach did not relay the container's output: {first:?}");
    }
    local.ok(&["exec", "talker", "--", "/bin/sh", "-c", "touch stop"]);
    let mut rest = Vec::new();
    loop {
        match lines.recv_timeout(WAIT) {
            Ok(line) => rest.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = attach.kill();
                panic!("kubectl attach did not end with the container: {rest:?}");
            }
        }
    }
    assert_eq!(rest.last().map(String::as_str), Some("bye"), "{rest:?}");
    assert!(
        rest[..rest.len() - 1].iter().all(|l| l == "tick"),
        "{rest:?}"
    );
    let ended = wait_with_timeout(attach, WAIT);
    assert!(
        ended.status.success(),
        "kubectl attach ends with the container: {ended:?}"
    );
    // kubectl writes its own notices on its stderr too.
    let errors = errors.join().unwrap_or_default();
    assert!(
        errors.iter().any(|l| l == "tock") && !errors.iter().any(|l| l == "tick" || l == "bye"),
        "the container's stderr reaches kubectl's stderr, and its stdout does not: {errors:?}"
    );
}

/// `kubectl attach -i` writes to the stdin the kubelet keeps of a container with `stdin:
/// true`; with `stdinOnce: true` the end of kubectl's stdin closes the container's, and the
/// attach goes on to relay what the container writes until it ends.
fn attach_writes_to_a_containers_stdin_which_stdin_once_closes(cluster: &impl Kubectl) {
    cluster.ready_pod(
        "reader",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: reader}\nspec:\n  restartPolicy: Never\n  \
         containers:\n  - name: main\n    image: shell:1\n    stdin: true\n    stdinOnce: true\n    \
         command: [/bin/sh, -c, 'while read line; do echo \"got $line\"; done; echo closed']\n",
    );
    let mut attach = cluster
        .kubectl()
        .args(["attach", "-i", "reader"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach -i starts");
    {
        use std::io::Write as _;
        let mut stdin = attach.stdin.take().expect("stdin");
        stdin.write_all(b"hello\n").expect("kubectl reads stdin");
    }
    let ended = wait_with_timeout(attach, WAIT);
    assert!(
        ended.status.success(),
        "kubectl attach -i ends with the container: {ended:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&ended.stdout),
        "got hello\nclosed\n"
    );
}

/// Runs `kubectl ARGS` under a terminal of its own (util-linux `script`), types `typed`
/// into it, and returns how it ended and what the terminal showed. The terminal's input is
/// held open until kubectl is done: its end would be typed into the terminal.
fn kubectl_under_a_terminal(
    cluster: &impl Kubectl,
    args: &str,
    typed: &[u8],
) -> (std::process::Output, String) {
    let kubectl = opconform::cluster::local::binaries::kubectl()
        .unwrap_or_else(|e| panic!("{}", opconform::error_chain(&e)));
    let line = format!("{} {args}", kubectl.display());
    let mut script = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("KUBECACHEDIR", cluster.dir().join("cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("script runs kubectl {args}: {e}"));
    let mut typing = script.stdin.take();
    {
        use std::io::Write as _;
        if let Some(typing) = typing.as_mut() {
            typing.write_all(typed).expect("script reads stdin");
        }
    }
    let ended = wait_with_timeout(script, WAIT);
    drop(typing);
    let shown = String::from_utf8_lossy(&ended.stdout).into_owned();
    (ended, shown)
}

/// `kubectl attach -it` to a container whose spec has `tty: true` (kubectl's terminal from
/// util-linux `script`): what is typed reaches the container's own terminal, and what the
/// container shows there comes back, until it ends.
fn attach_to_a_containers_terminal(cluster: &impl Kubectl) {
    cluster.ready_pod(
        "typist",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: typist}\nspec:\n  restartPolicy: Never\n  \
         containers:\n  - name: main\n    image: shell:1\n    stdin: true\n    tty: true\n    \
         command: [/bin/sh, -c, 'read line; tty; echo \"got $line\"']\n",
    );
    // Typed into kubectl's terminal, which it reads once attached.
    let (ended, shown) = kubectl_under_a_terminal(cluster, "attach -it typist", b"hello\n");
    assert!(ended.status.success(), "{ended:?}");
    assert!(shown.contains("/dev/pts/"), "not a terminal: {shown:?}");
    assert!(shown.contains("got hello\r\n"), "{shown:?}");
}

/// `kubectl exec -it` (its terminal from util-linux `script`) runs the command under a
/// terminal of its own, shows what it writes there, and ends with its exit code.
fn exec_with_a_terminal(cluster: &impl Kubectl) {
    cluster.ready_pod(
        "idler",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: idler}\nspec:\n  containers:\n  - name: main\n    \
         image: shell:1\n    command: [/bin/sh, -c, 'while :; do sleep 1; done']\n",
    );
    let (ended, shown) = kubectl_under_a_terminal(
        cluster,
        "exec -it idler -- /bin/sh -c 'tty; echo shown; exit 3'",
        b"",
    );
    assert_eq!(ended.status.code(), Some(3), "{ended:?}");
    assert!(shown.contains("/dev/pts/"), "not a terminal: {shown:?}");
    assert!(shown.contains("shown\r\n"), "{shown:?}");
}

#[test]
fn kubectl_exec_with_a_terminal_runs_the_command_under_one() {
    exec_with_a_terminal(&Sim::start_with(&["--image", "shell:1=/bin/sh"]));
}

#[test]
fn kubectl_attach_relays_a_containers_output_writes_its_stdin_which_stdin_once_closes_and_reaches_its_terminal()
 {
    let sim = Sim::start_with(&["--image", "shell:1=/bin/sh"]);
    attach_relays_a_containers_output_until_it_ends(&sim);
    attach_writes_to_a_containers_stdin_which_stdin_once_closes(&sim);
    attach_to_a_containers_terminal(&sim);
}

#[test]
fn on_local_kubectl_exec_attach_logs_follow_and_port_forward_reach_our_kubelet_which_lets_in_only_authorized_users()
 {
    let local = Local::start();
    the_kubelet_lets_in_only_whom_the_api_server_authorizes(&local);
    exec_and_logs_follow(&local);
    attach_relays_a_containers_output_until_it_ends(&local);
    attach_writes_to_a_containers_stdin_which_stdin_once_closes(&local);
    attach_to_a_containers_terminal(&local);
    exec_with_a_terminal(&local);
    port_forward_both_ways(&local);
    kube_rs_port_forward(&local);
}
