//! The kind provider, exercised through its exact command sequences: stand-in `kind`,
//! `docker` and `kubectl` scripts record their arguments and answer as the real tools do
//! (the stand-in `docker` keeps the images it built, with their labels), and `kind get
//! kubeconfig` hands out an embedded simulated API server, so that the kube client side
//! (pods, namespaces) is real. Also: where the operator's image comes from,
//! `kind-config.yaml`, its audit policy, the workflow and the scripts the README documents.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use opconform::cluster::kind::node::SIGNAL_SCRIPT;
use opconform::cluster::kind::{KindOptions, KindProvider, KindRun, Timeouts, Tools};
use opconform::cluster::{OperatorUnderTest, Placement, Provider, ProviderError};
use opconform::fault::{Cut, HoldScope, LOW_ON_MEMORY, NodeFault, PodFault, RequestMatch};
use opconform::sim::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A tempdir of stand-in tools, the log of their calls, and the API server `kind get
/// kubeconfig` points at.
struct Fake {
    root: tempfile::TempDir,
    /// Kept running for the fakes' kubeconfig.
    _server: ApiServer,
    client: Client,
}

const KIND: &str = r#"#!/bin/sh
echo "kind $*" >> ROOT/calls.log
case "$1 $2" in
  "create cluster")
    if [ -e ROOT/flags/create-hangs ]; then /bin/sleep 30; fi
    if [ -e ROOT/flags/create-fails ]; then echo "ERROR: failed to create cluster: node(s) already exist" >&2; exit 1; fi
    while [ $# -gt 0 ]; do if [ "$1" = "--config" ]; then /bin/cp "$2" ROOT/created-config.yaml; fi; shift; done ;;
  "get kubeconfig") /bin/cat ROOT/sim.kubeconfig ;;
  "get clusters") echo existing; echo other ;;
esac
exit 0
"#;

const DOCKER: &str = r#"#!/bin/sh
if [ "$1" = build ]; then echo "docker $* DOCKER_BUILDKIT=$DOCKER_BUILDKIT" >> ROOT/calls.log; else echo "docker $*" >> ROOT/calls.log; fi
image_file() { echo "ROOT/images/$(echo "$1" | /usr/bin/tr '/:' '__')"; }
case "$*" in
  "info "*) echo 28.2.2 ;;
  "image inspect "*)
    if [ ! -e "$(image_file "$5")" ]; then echo "Error: No such image: $5" >&2; exit 1; fi
    if [ "$4" = "{{.Id}}" ]; then /usr/bin/cut -d' ' -f1 "$(image_file "$5")"; else /bin/cat "$(image_file "$5")"; fi ;;
  "build "*)
    if [ -e ROOT/flags/build-fails ]; then echo "Step 2/4 : COPY operator /manager: no space left on device" >&2; exit 1; fi
    label=""; tag=""; context=""
    while [ $# -gt 0 ]; do
      case "$1" in --label) label=$2; shift ;; --tag) tag=$2; shift ;; esac
      context=$1; shift
    done
    if [ -f "$context/Dockerfile" ]; then /bin/cp "$context/Dockerfile" ROOT/built.Dockerfile; /bin/cp "$context/operator" ROOT/built.operator; fi
    id=sha256:$(printf '%s' "$label" | /usr/bin/sha256sum | /usr/bin/cut -c1-12)
    printf '%s {"%s":"%s"}\n' "$id" "${label%%=*}" "${label#*=}" > "$(image_file "$tag")" ;;
  "inspect --format {{json .Mounts}} "*) /bin/cat ROOT/mounts.json ;;
  "inspect --format {{json .NetworkSettings.Networks}} "*)
    if [ -e ROOT/flags/moved ]; then echo '{"kind":{"IPAddress":"172.18.0.9","GlobalIPv6Address":"fc00::9"}}';
    else echo '{"kind":{"IPAddress":"172.18.0.3","GlobalIPv6Address":"fc00::3"}}'; fi ;;
  "network connect --ip "*)
    if [ -e ROOT/flags/no-fixed-ip ]; then echo "Error response from daemon: user specified IP address is supported only when connecting to networks with user configured subnets" >&2; exit 1; fi ;;
  *" ctr --namespace k8s.io containers ls "*) echo 4f1c0ffee ;;
  *" ctr --namespace k8s.io tasks ls"*) printf 'TASK PID STATUS\n5a4db0x 4100 RUNNING\n4f1c0ffee 4242 RUNNING\n' ;;
esac
exit 0
"#;

const KUBECTL: &str = r#"#!/bin/sh
echo "kubectl $*" >> ROOT/calls.log
exit 0
"#;

impl Fake {
    async fn new() -> Self {
        Self::with_tools(&["kind", "docker", "kubectl"]).await
    }

    async fn with_tools(tools: &[&str]) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for dir in ["bin", "flags", "images", "repo/operator", "work", "logs"] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
        }
        std::fs::write(r.join("repo/operator/Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(r.join("calls.log"), "").unwrap();
        for (name, script) in [("kind", KIND), ("docker", DOCKER), ("kubectl", KUBECTL)] {
            if !tools.contains(&name) {
                continue;
            }
            let path = r.join("bin").join(name);
            std::fs::write(&path, script.replace("ROOT", &r.display().to_string())).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        std::fs::write(r.join("sim.kubeconfig"), server.admin_kubeconfig()).unwrap();
        let client = server.admin_client().await.unwrap();
        Self {
            root,
            _server: server,
            client,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn shown(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    fn flag(&self, name: &str) {
        std::fs::write(self.path("flags").join(name), "").unwrap();
    }

    /// Puts `image` in the stand-in engine, with id `sha256:0123` and `labels` (JSON,
    /// `null` for none).
    fn image(&self, image: &str, labels: &str) {
        let file = image.replace(['/', ':'], "_");
        std::fs::write(
            self.path("images").join(file),
            format!("sha256:0123 {labels}"),
        )
        .unwrap();
    }

    /// The id and labels of `image` in the stand-in engine, when it has it.
    fn inspect(&self, image: &str) -> Option<(String, serde_json::Value)> {
        let file = self.path("images").join(image.replace(['/', ':'], "_"));
        let text = std::fs::read_to_string(file).ok()?;
        let (id, labels) = text.split_once(' ').unwrap();
        Some((id.to_string(), serde_json::from_str(labels).unwrap()))
    }

    fn options_with_base(&self, base: &str) -> KindOptions {
        let mut o = self.options();
        o.base_image = Some(base.into());
        o
    }

    fn options(&self) -> KindOptions {
        let mut o = KindOptions::new(self.path("repo"));
        o.tools = Tools::new(format!("{}:/usr/bin:/bin", self.shown("bin")));
        o.config = repository().join("kind-config.yaml");
        o.workdir = self.path("work");
        o.logs = self.path("logs");
        o.timeouts = Timeouts {
            command: Duration::from_secs(20),
            ..Timeouts::default()
        };
        o
    }

    /// The calls so far, and forgets them.
    fn take_calls(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.path("calls.log")).unwrap();
        std::fs::write(self.path("calls.log"), "").unwrap();
        text.lines().map(str::to_string).collect()
    }

    /// The set-up sequence of a new cluster `name` for the bundled operator.
    fn created(&self, name: &str) -> Vec<String> {
        let repo = self.shown("repo");
        let mut calls = vec![
            "docker info --format {{.ServerVersion}}".into(),
            "docker image inspect --format {{.Id}} {{json .Config.Labels}} memcached-operator:dev"
                .into(),
            format!(
                "docker build --file {repo}/operator/Dockerfile --label io.opconform.build-input=operator/Dockerfile --tag memcached-operator:dev {repo} DOCKER_BUILDKIT=1"
            ),
        ];
        calls.extend(self.cluster_created(name));
        calls.push(format!(
            "kind load docker-image memcached-operator:dev --name {name}"
        ));
        calls
    }

    /// `kind create cluster` of `name` until its nodes are Ready.
    fn cluster_created(&self, name: &str) -> Vec<String> {
        let dir = self.shown(&format!("work/{name}"));
        vec![
            format!(
                "kind create cluster --name {name} --config {dir}/kind-config.yaml --wait 300s"
            ),
            format!("kind get kubeconfig --name {name}"),
            format!(
                "kubectl --kubeconfig {dir}/kubeconfig wait --for=condition=Ready nodes --all --timeout=180s"
            ),
        ]
    }

    /// A pod of `namespace` on `node` at `ip`, as the kubelet would report it.
    async fn pod(&self, namespace: &str, name: &str, node: &str, ip: &str) -> String {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
        let _ = namespaces.create(&PostParams::default(), &ns).await;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "manager", "image": "memcached-operator:dev"}]}
        }))
        .unwrap();
        let made = pods.create(&PostParams::default(), &pod).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "podIP": ip}})),
        )
        .await
        .unwrap();
        made.metadata.uid.unwrap()
    }
}

/// An operator under test whose manifests name `image`, with its binary (`None`: it has
/// none) and the path its manager container runs.
struct Operator {
    image: String,
    binary: Option<PathBuf>,
    entrypoint: Option<String>,
}

impl Operator {
    /// The bundled operator, as far as the provider sees it.
    fn bundled() -> Self {
        Self {
            image: "memcached-operator:dev".into(),
            binary: None,
            entrypoint: None,
        }
    }
}

impl OperatorUnderTest for Operator {
    fn own_placement(&self) -> Placement {
        Placement {
            image: self.image.clone(),
            ..Placement::bundled()
        }
    }

    fn binary(&self) -> Result<PathBuf, ProviderError> {
        self.binary
            .clone()
            .ok_or_else(|| ProviderError::Operator("this operator has no binary".into()))
    }

    fn crd_manifests(&self) -> Result<Vec<String>, ProviderError> {
        Ok(Vec::new())
    }

    fn entrypoint_in_image(&self) -> Result<Option<String>, ProviderError> {
        Ok(self.entrypoint.clone())
    }
}

/// A provider on a new cluster, with the set-up calls forgotten.
async fn scenario(fake: &Fake) -> (Arc<KindRun>, KindProvider, String) {
    let run = Arc::new(KindRun::new(fake.options()));
    let provider = run.provider(&Operator::bundled()).await.unwrap();
    let name = provider.cluster().name().to_string();
    fake.take_calls();
    (run, provider, name)
}

/// Applies pod faults in order, each of which must succeed.
async fn apply(provider: &KindProvider, namespace: &str, pod: &str, faults: &[PodFault]) {
    for fault in faults {
        provider
            .pod_fault(namespace, pod, fault)
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: {}", opconform::error_chain(&e)));
    }
}

/// How a pod's containers and their main processes are found on `node` (with containerd's
/// `ctr`, which kind's images and ours have).
fn lookup(node: &str, uid: &str) -> [String; 2] {
    [
        format!(
            r#"docker exec {node} ctr --namespace k8s.io containers ls --quiet labels."io.kubernetes.pod.uid"=={uid},labels."io.cri-containerd.kind"==container"#
        ),
        format!("docker exec {node} ctr --namespace k8s.io tasks ls"),
    ]
}

/// Applies node faults in order, each of which must succeed.
async fn apply_node(provider: &KindProvider, node: &str, faults: &[NodeFault]) {
    for fault in faults {
        provider
            .node_fault(node, fault)
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: {}", opconform::error_chain(&e)));
    }
}

/// The fault log's verbs.
fn verbs(provider: &KindProvider) -> Vec<String> {
    provider
        .faults()
        .events()
        .into_iter()
        .map(|e| e.verb)
        .collect()
}

fn fault_log(provider: &KindProvider) -> Vec<(String, String)> {
    provider
        .faults()
        .events()
        .into_iter()
        .map(|e| (e.verb, e.target))
        .collect()
}

#[tokio::test]
async fn a_new_cluster_is_built_created_loaded_and_deleted_at_the_end() {
    let fake = Fake::new().await;
    let run = KindRun::new(fake.options());
    let provider = run.provider(&Operator::bundled()).await.unwrap();
    assert_eq!(provider.placement().image, "memcached-operator:dev");
    let cluster = run.cluster().await.unwrap();
    let name = cluster.name().to_string();
    assert!(name.starts_with("opconform-") && name.len() == "opconform-".len() + 6);
    assert!(cluster.owned());
    assert_eq!(fake.take_calls(), fake.created(&name));
    // The cluster is made from kind-config.yaml with its host paths absolute and the
    // audit log in the run's own directory, where the harness follows it.
    let config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(fake.path("created-config.yaml")).unwrap())
            .unwrap();
    let mounts = &config["nodes"][0]["extraMounts"];
    assert_eq!(
        mounts[0]["hostPath"].as_str().unwrap(),
        repository()
            .join("ci/kind/audit-policy.yaml")
            .display()
            .to_string()
    );
    let audit_dir = fake.path(&format!("work/{name}/audit"));
    assert_eq!(
        mounts[1]["hostPath"].as_str().unwrap(),
        audit_dir.display().to_string()
    );
    assert_eq!(
        cluster.audit_log(),
        Some(audit_dir.join("kube-apiserver-audit.log").as_path())
    );
    // The kubeconfig kind gave is the client's, and private.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(cluster.kubeconfig())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    cluster.client().apiserver_version().await.unwrap();
    // A second scenario shares it: nothing runs again.
    let again = run.provider(&Operator::bundled()).await.unwrap();
    assert_eq!(again.cluster().name(), name);
    assert!(Arc::ptr_eq(&cluster, &run.cluster().await.unwrap()));
    assert!(fake.take_calls().is_empty());
    run.finish(false).await;
    assert_eq!(
        fake.take_calls(),
        [format!("kind delete cluster --name {name}")]
    );
    assert!(!fake.path(&format!("work/{name}")).exists());
    run.finish(false).await;
    assert!(fake.take_calls().is_empty(), "deleted twice");
}

#[tokio::test]
async fn a_bundled_image_built_again_unchanged_is_kept() {
    let fake = Fake::new().await;
    for _ in 0..2 {
        let run = KindRun::new(fake.options());
        run.provider(&Operator::bundled()).await.unwrap();
        run.finish(false).await;
    }
    let calls = fake.take_calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("docker build --file"))
            .count(),
        2
    );
    // The second build named the same image as the first: nothing to remove.
    assert!(
        calls.contains(&"docker image inspect --format {{.Id}} memcached-operator:dev".to_string())
    );
    assert!(
        !calls.iter().any(|c| c.starts_with("docker rmi")),
        "{calls:?}"
    );
}

#[tokio::test]
async fn an_existing_cluster_is_reused_with_a_prebuilt_image_and_never_deleted() {
    let fake = Fake::new().await;
    fake.image("registry.example/op:1", "null");
    let audit = fake.path("reused-audit");
    std::fs::create_dir_all(&audit).unwrap();
    std::fs::write(audit.join("kube-apiserver-audit.log"), "").unwrap();
    std::fs::write(
        fake.path("mounts.json"),
        json!([
            {"Type": "bind", "Source": "/lib/modules", "Destination": "/lib/modules"},
            {"Type": "bind", "Source": audit.display().to_string(), "Destination": "/var/log/kubernetes"}
        ])
        .to_string(),
    )
    .unwrap();
    let mut options = fake.options();
    options.existing = Some("existing".into());
    options.image = Some("registry.example/op:1".into());
    let run = KindRun::new(options);
    let provider = run.provider(&Operator::bundled()).await.unwrap();
    // The prebuilt image replaces the one the manifests name.
    assert_eq!(provider.placement().image, "registry.example/op:1");
    let cluster = run.cluster().await.unwrap();
    assert!(!cluster.owned());
    assert_eq!(
        cluster.audit_log(),
        Some(audit.join("kube-apiserver-audit.log").as_path())
    );
    // Its files go in a directory of this run's own: the cluster's own directory may be
    // the one of the run that created it.
    let dir = fake.shown(&format!("work/existing/run-{}", std::process::id()));
    assert_eq!(
        fake.take_calls(),
        [
            "docker info --format {{.ServerVersion}}".to_string(),
            "docker image inspect --format {{.Id}} registry.example/op:1".into(),
            "kind get clusters".into(),
            "kind get kubeconfig --name existing".into(),
            format!(
                "kubectl --kubeconfig {dir}/kubeconfig wait --for=condition=Ready nodes --all --timeout=180s"
            ),
            "docker inspect --format {{json .Mounts}} existing-control-plane".into(),
            "kind load docker-image registry.example/op:1 --name existing".into(),
        ]
    );
    // A failed run exports the logs, and still leaves the cluster alone.
    run.finish(true).await;
    assert_eq!(
        fake.take_calls(),
        [format!(
            "kind export logs {} --name existing",
            fake.shown("logs")
        )]
    );
    run.interrupt().await;
    assert!(fake.take_calls().is_empty(), "a reused cluster was deleted");
    assert!(!Path::new(&dir).exists(), "the run's directory is left");
}

#[tokio::test]
async fn a_prebuilt_image_not_in_the_local_engine_is_left_for_the_nodes_to_pull() {
    let fake = Fake::new().await;
    let mut options = fake.options();
    options.image = Some("registry.example/op:1".into());
    let run = KindRun::new(options);
    let provider = run.provider(&Operator::bundled()).await.unwrap();
    assert_eq!(provider.placement().image, "registry.example/op:1");
    let name = provider.cluster().name().to_string();
    let calls = fake.take_calls();
    assert!(!calls.iter().any(|c| c.starts_with("docker build")));
    assert!(!calls.iter().any(|c| c.starts_with("kind load")));
    assert_eq!(
        calls[1],
        "docker image inspect --format {{.Id}} registry.example/op:1"
    );
    run.finish(false).await;
    assert_eq!(
        fake.take_calls(),
        [format!("kind delete cluster --name {name}")]
    );
}

/// An operator whose manifests name `image` and run `entrypoint`, with a binary of its own
/// in `fake`'s directory.
fn built_operator(fake: &Fake, image: &str, entrypoint: Option<&str>) -> Operator {
    let binary = fake.path("manager-bin");
    std::fs::write(&binary, "#!/bin/true\nthe operator\n").unwrap();
    Operator {
        image: image.into(),
        binary: Some(binary),
        entrypoint: entrypoint.map(str::to_string),
    }
}

/// Why `run` gives `operator` no share of its cluster.
async fn refused(run: &KindRun, operator: &Operator) -> String {
    match run.provider(operator).await {
        Ok(_) => panic!("a share was given"),
        Err(e) => opconform::error_chain(&e),
    }
}

#[tokio::test]
async fn an_image_nobody_has_is_built_from_the_binary_on_the_base_and_reused_by_the_next_run() {
    let fake = Fake::new().await;
    fake.image("opconform/debian:bookworm-1", "null");
    let operator = built_operator(
        &fake,
        "opconform/kubebuilder-memcached:dev",
        Some("/manager"),
    );
    let mut options = fake.options();
    options.base_image = Some("opconform/debian:bookworm-1".into());
    let run = KindRun::new(options.clone());
    let provider = run.provider(&operator).await.unwrap();
    // Under the manifests' own name: nothing in them changes.
    assert_eq!(
        provider.placement().image,
        "opconform/kubebuilder-memcached:dev"
    );
    let name = provider.cluster().name().to_string();
    let calls = fake.take_calls();
    let build = calls
        .iter()
        .find(|c| c.starts_with("docker build"))
        .expect("a build");
    let out = std::process::Command::new("sha256sum")
        .arg(fake.path("manager-bin"))
        .output()
        .unwrap();
    let sum = String::from_utf8(out.stdout).unwrap()[..64].to_string();
    let input = format!("binary=sha256:{sum} base=sha256:0123 path=/manager format=1");
    assert!(
        build.starts_with(&format!(
            "docker build --quiet --label io.opconform.build-input={input} --tag opconform/kubebuilder-memcached:dev {}/image-",
            fake.shown("work")
        )),
        "{build}"
    );
    let mut expected = vec![
        "docker info --format {{.ServerVersion}}".to_string(),
        "docker image inspect --format {{.Id}} {{json .Config.Labels}} opconform/kubebuilder-memcached:dev"
            .into(),
        "docker image inspect --format {{.Id}} opconform/debian:bookworm-1".into(),
        build.clone(),
    ];
    expected.extend(fake.cluster_created(&name));
    expected.push(format!(
        "kind load docker-image opconform/kubebuilder-memcached:dev --name {name}"
    ));
    assert_eq!(calls, expected);
    // The base, the binary where the manager container runs it, the user of ours.
    assert_eq!(
        std::fs::read_to_string(fake.path("built.Dockerfile")).unwrap(),
        "FROM opconform/debian:bookworm-1\nCOPY operator /manager\nUSER 65532:65532\nENTRYPOINT [\"/manager\"]\n"
    );
    assert_eq!(
        std::fs::read(fake.path("built.operator")).unwrap(),
        std::fs::read(fake.path("manager-bin")).unwrap()
    );
    let (built, labels) = fake.inspect("opconform/kubebuilder-memcached:dev").unwrap();
    assert_eq!(labels["io.opconform.build-input"], input.as_str());
    // The build context is gone.
    let left: Vec<_> = std::fs::read_dir(fake.path("work"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("image-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    run.finish(false).await;
    fake.take_calls();

    // The next run finds it built from the same binary on the same base.
    let next = KindRun::new(options);
    let provider = next.provider(&operator).await.unwrap();
    let name = provider.cluster().name().to_string();
    let mut expected = vec![
        "docker info --format {{.ServerVersion}}".to_string(),
        "docker image inspect --format {{.Id}} {{json .Config.Labels}} opconform/kubebuilder-memcached:dev"
            .into(),
        "docker image inspect --format {{.Id}} opconform/debian:bookworm-1".into(),
    ];
    expected.extend(fake.cluster_created(&name));
    expected.push(format!(
        "kind load docker-image opconform/kubebuilder-memcached:dev --name {name}"
    ));
    assert_eq!(fake.take_calls(), expected);
    next.finish(false).await;
    fake.take_calls();

    // Another binary is built again, and the earlier build goes.
    std::fs::write(fake.path("manager-bin"), "#!/bin/true\nthe next operator\n").unwrap();
    let after = KindRun::new(fake.options_with_base("opconform/debian:bookworm-1"));
    after.provider(&operator).await.unwrap();
    let calls = fake.take_calls();
    let build = calls
        .iter()
        .position(|c| c.starts_with("docker build --quiet"))
        .expect("a build");
    assert_eq!(
        calls[build + 1..build + 3],
        [
            "docker image inspect --format {{.Id}} opconform/kubebuilder-memcached:dev".to_string(),
            format!("docker rmi {built}"),
        ]
    );
    assert_ne!(
        fake.inspect("opconform/kubebuilder-memcached:dev")
            .unwrap()
            .0,
        built
    );
    after.finish(false).await;
}

#[tokio::test]
async fn a_binary_the_container_runs_by_the_entrypoint_goes_to_usr_local_bin() {
    let fake = Fake::new().await;
    fake.image("b:1", "null");
    let operator = built_operator(&fake, "go-election-subject:dev", None);
    let run = KindRun::new(fake.options_with_base("b:1"));
    run.provider(&operator).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(fake.path("built.Dockerfile")).unwrap(),
        "FROM b:1\nCOPY operator /usr/local/bin/manager-bin\nUSER 65532:65532\nENTRYPOINT [\"/usr/local/bin/manager-bin\"]\n"
    );
    run.finish(false).await;
}

#[tokio::test]
async fn the_users_own_image_of_the_manifests_name_is_loaded_as_it_is() {
    let fake = Fake::new().await;
    fake.image(
        "go-election-subject:dev",
        r#"{"org.opencontainers.image.title":"mine"}"#,
    );
    // Not even a base image is needed, nor the binary.
    let operator = Operator {
        image: "go-election-subject:dev".into(),
        binary: None,
        entrypoint: None,
    };
    let run = KindRun::new(fake.options());
    let provider = run.provider(&operator).await.unwrap();
    assert_eq!(provider.placement().image, "go-election-subject:dev");
    let name = provider.cluster().name().to_string();
    let calls = fake.take_calls();
    assert!(!calls.iter().any(|c| c.starts_with("docker build")));
    assert_eq!(
        calls.last().unwrap(),
        &format!("kind load docker-image go-election-subject:dev --name {name}")
    );
    run.finish(false).await;
}

#[tokio::test]
async fn an_image_nothing_provides_is_named_with_the_ways_to_provide_it_before_any_cluster() {
    let fake = Fake::new().await;
    let operator = built_operator(&fake, "go-election-subject:dev", None);
    let run = KindRun::new(fake.options());
    let e = refused(&run, &operator).await;
    for named in [
        "no image go-election-subject:dev",
        "OPCONFORM_IMAGE",
        "build go-election-subject:dev into the local Docker engine",
        "OPCONFORM_KIND_BASE_IMAGE",
        "ci/kind/build.sh base",
    ] {
        assert!(e.contains(named), "{named}: {e}");
    }
    assert_eq!(
        fake.take_calls(),
        [
            "docker info --format {{.ServerVersion}}",
            "docker image inspect --format {{.Id}} {{json .Config.Labels}} go-election-subject:dev",
        ]
    );
    // Later scenarios get the same answer without trying again.
    let again = refused(&run, &operator).await;
    assert!(
        again.contains(
            "providing the operator image go-election-subject:dev failed earlier in this run"
        ) && again.contains("no image go-election-subject:dev"),
        "{again}"
    );
    assert!(fake.take_calls().is_empty());
    run.finish(true).await;
    assert!(fake.take_calls().is_empty());
}

#[tokio::test]
async fn a_failed_build_leaves_no_context_and_creates_no_cluster() {
    let fake = Fake::new().await;
    fake.image("b:1", "null");
    fake.flag("build-fails");
    let operator = built_operator(&fake, "go-election-subject:dev", None);
    let run = KindRun::new(fake.options_with_base("b:1"));
    let e = refused(&run, &operator).await;
    assert!(e.contains("no space left on device"), "{e}");
    let calls = fake.take_calls();
    assert!(calls.last().unwrap().starts_with("docker build --quiet"));
    assert!(!calls.iter().any(|c| c.starts_with("kind")), "{calls:?}");
    assert_eq!(std::fs::read_dir(fake.path("work")).unwrap().count(), 0);
    // A base image the engine lacks is named with how to build one.
    let fake = Fake::new().await;
    let run = KindRun::new(fake.options_with_base("gone:1"));
    let e = refused(&run, &operator).await;
    assert!(
        e.contains(
            "OPCONFORM_KIND_BASE_IMAGE=gone:1, but the local Docker engine has no such image"
        ) && e.contains("ci/kind/build.sh base"),
        "{e}"
    );
}

#[tokio::test]
async fn a_cluster_to_reuse_that_does_not_exist_is_named_with_what_kind_has() {
    let fake = Fake::new().await;
    let mut options = fake.options();
    options.existing = Some("gone".into());
    let e = KindRun::new(options)
        .cluster()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("OPCONFORM_KIND_CLUSTER=gone, but kind has no such cluster"),
        "{e}"
    );
    assert!(e.contains("existing, other"), "{e}");
}

#[tokio::test]
async fn a_missing_tool_is_named_with_how_to_install_it_before_anything_runs() {
    let fake = Fake::with_tools(&["kind", "docker"]).await;
    let mut options = fake.options();
    // Only the stand-ins: this machine's own kubectl must not be found.
    options.tools = Tools::new(fake.path("bin"));
    let run = KindRun::new(options);
    let e = run.cluster().await.unwrap_err();
    let text = opconform::error_chain(&e);
    assert!(text.contains("kubectl is not installed"), "{text}");
    assert!(
        text.contains("https://kubernetes.io/docs/tasks/tools/"),
        "{text}"
    );
    assert!(fake.take_calls().is_empty());
    // Every later scenario gets the same answer, without running anything again.
    let again = run.cluster().await.unwrap_err().to_string();
    assert!(again.contains("kubectl is not installed"), "{again}");
    assert!(fake.take_calls().is_empty());
}

#[tokio::test]
async fn a_failed_creation_deletes_what_was_made_and_is_not_tried_again() {
    let fake = Fake::new().await;
    fake.flag("create-fails");
    let run = KindRun::new(fake.options());
    let e = run.cluster().await.unwrap_err().to_string();
    assert!(e.contains("node(s) already exist"), "{e}");
    assert!(e.contains("`kind create cluster --name opconform-"), "{e}");
    let calls = fake.take_calls();
    let name = calls
        .iter()
        .find_map(|c| c.strip_prefix("kind create cluster --name "))
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        calls[calls.len() - 1],
        format!("kind delete cluster --name {name}")
    );
    assert!(run.cluster().await.is_err());
    run.finish(true).await;
    assert!(
        fake.take_calls().is_empty(),
        "tried again, or deleted twice"
    );
}

#[tokio::test]
async fn an_interrupt_kills_the_creation_in_flight_and_deletes_the_cluster() {
    let fake = Fake::new().await;
    fake.flag("create-hangs");
    let run = Arc::new(KindRun::new(fake.options()));
    let creating = tokio::spawn({
        let run = run.clone();
        async move { run.cluster().await }
    });
    let log = fake.path("calls.log");
    support::eventually("kind create to start", || {
        let log = log.clone();
        async move {
            std::fs::read_to_string(&log)
                .unwrap()
                .contains("kind create cluster")
                .then_some(())
        }
    })
    .await;
    let started = std::time::Instant::now();
    // What the ctrl-c / SIGTERM handler runs.
    run.interrupt().await;
    let result = tokio::time::timeout(Duration::from_secs(10), creating)
        .await
        .expect("the creation was not stopped")
        .unwrap();
    assert!(result.is_err());
    assert!(started.elapsed() < Duration::from_secs(10));
    let calls = fake.take_calls();
    let create = calls
        .iter()
        .find(|c| c.starts_with("kind create cluster"))
        .unwrap();
    let name = create.split(' ').nth(4).unwrap();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("kind delete"))
            .collect::<Vec<_>>(),
        [&format!("kind delete cluster --name {name}")]
    );
    run.finish(true).await;
    assert!(fake.take_calls().is_empty());
}

#[tokio::test]
async fn a_failed_run_exports_the_logs_before_the_cluster_is_deleted_and_keeps_the_audit() {
    let fake = Fake::new().await;
    let (run, provider, name) = scenario(&fake).await;
    // The failed scenario keeps what the provider knows, then tears down.
    let dir = fake.path("report");
    provider.keep_artifacts(&dir).await;
    let notes = std::fs::read_to_string(dir.join("kind.txt")).unwrap();
    assert!(notes.contains(&format!("kind cluster: {name}")), "{notes}");
    Box::new(provider).teardown().await;
    run.finish(true).await;
    assert_eq!(
        fake.take_calls(),
        [
            format!("kind export logs {} --name {name}", fake.shown("logs")),
            format!("kind delete cluster --name {name}"),
        ]
    );
    assert!(
        fake.path(&format!("work/{name}/audit/kube-apiserver-audit.log"))
            .exists()
    );
    assert!(!fake.path(&format!("work/{name}/kubeconfig")).exists());
}

#[tokio::test]
async fn a_crash_kills_the_containers_processes_inside_its_node_and_the_pod_stays() {
    let fake = Fake::new().await;
    let (_run, provider, name) = scenario(&fake).await;
    let node = format!("{name}-worker");
    let uid = fake.pod("ops", "op-1", &node, "10.244.1.5").await;
    let manager = Some("manager".to_string());
    apply(
        &provider,
        "ops",
        "op-1",
        &[PodFault::Crash { container: None }],
    )
    .await;
    let mut expected = lookup(&node, &uid).to_vec();
    expected.push(format!(
        "docker exec {node} sh -c {SIGNAL_SCRIPT} sh KILL 4242"
    ));
    assert_eq!(fake.take_calls(), expected);
    apply(
        &provider,
        "ops",
        "op-1",
        &[PodFault::Crash { container: manager }],
    )
    .await;
    assert_eq!(
        fake.take_calls()[0],
        format!(
            r#"{},labels."io.kubernetes.container.name"==manager"#,
            lookup(&node, &uid)[0]
        )
    );
    let pods: Api<Pod> = Api::namespaced(fake.client.clone(), "ops");
    assert!(pods.get("op-1").await.is_ok());
    assert_eq!(
        fault_log(&provider),
        [("crash", "pod ops/op-1"), ("crash", "pod ops/op-1")].map(|(v, t)| (v.into(), t.into()))
    );
}

#[tokio::test]
async fn hold_and_release_stop_and_continue_the_pods_processes() {
    let fake = Fake::new().await;
    let (_run, provider, name) = scenario(&fake).await;
    let node = format!("{name}-worker2");
    let uid = fake.pod("ops", "op-2", &node, "10.244.2.5").await;
    apply(
        &provider,
        "ops",
        "op-2",
        &[PodFault::Hold, PodFault::Release],
    )
    .await;
    let mut expected = Vec::new();
    for signal in ["STOP", "CONT"] {
        expected.extend(lookup(&node, &uid));
        expected.push(format!(
            "docker exec {node} sh -c {SIGNAL_SCRIPT} sh {signal} 4242"
        ));
    }
    assert_eq!(fake.take_calls(), expected);
    assert_eq!(verbs(&provider), ["hold", "release"]);
}

#[tokio::test]
async fn a_pod_partition_is_iptables_rules_in_its_node_and_repair_deletes_them() {
    let fake = Fake::new().await;
    let (_run, provider, name) = scenario(&fake).await;
    let node = format!("{name}-worker");
    fake.pod("ops", "op-1", &node, "10.244.1.5").await;
    let drop = PodFault::Partition { cut: Cut::Drop };
    apply(&provider, "ops", "op-1", &[drop, PodFault::Repair]).await;
    let rule = "-s 10.244.1.5 -p tcp --dport 6443 -m comment --comment opconform partition ops/op-1 -j REJECT --reject-with tcp-reset";
    let iptables = format!("docker exec {node} iptables -w 5");
    assert_eq!(
        fake.take_calls(),
        [
            format!("{iptables} -I FORWARD 1 {rule}"),
            format!("{iptables} -I INPUT 1 {rule}"),
            format!("{iptables} -D FORWARD {rule}"),
            format!("{iptables} -D INPUT {rule}"),
        ]
    );
    apply(
        &provider,
        "ops",
        "op-1",
        &[PodFault::Partition { cut: Cut::Hang }],
    )
    .await;
    assert!(fake.take_calls()[0].ends_with("ops/op-1 -j DROP"));
    let responses = PodFault::Partition {
        cut: Cut::HangResponses,
    };
    let e = provider
        .pod_fault("ops", "op-1", &responses)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ProviderError::Unsupported {
                provider: "kind",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(verbs(&provider), ["partition", "repair", "partition"]);
}

#[tokio::test]
async fn a_node_is_paused_and_unpaused_and_disconnected_and_reconnected_at_its_address() {
    let fake = Fake::new().await;
    let (_run, provider, name) = scenario(&fake).await;
    let node = format!("{name}-worker");
    let cut = NodeFault::Partition { cut: Cut::Drop };
    apply_node(
        &provider,
        &node,
        &[
            NodeFault::Hold {
                scope: HoldScope::Node,
            },
            NodeFault::Release,
        ],
    )
    .await;
    apply_node(&provider, &node, &[cut, NodeFault::Repair]).await;
    assert_eq!(
        fake.take_calls(),
        [
            format!("docker pause {node}"),
            format!("docker unpause {node}"),
            format!("docker inspect --format {{{{json .NetworkSettings.Networks}}}} {node}"),
            format!("docker network disconnect kind {node}"),
            format!("docker network connect --ip 172.18.0.3 --ip6 fc00::3 kind {node}"),
        ]
    );
    assert_eq!(
        fault_log(&provider),
        ["hold", "release", "partition", "repair"].map(|v| (v.to_string(), format!("node {node}")))
    );
}

#[tokio::test]
async fn a_node_docker_will_not_pin_comes_back_where_docker_puts_it_and_must_be_the_same() {
    let fake = Fake::new().await;
    fake.flag("no-fixed-ip");
    let (_run, provider, name) = scenario(&fake).await;
    let node = format!("{name}-worker2");
    let cut = NodeFault::Partition { cut: Cut::Drop };
    apply_node(&provider, &node, &[cut.clone(), NodeFault::Repair]).await;
    let inspect = format!("docker inspect --format {{{{json .NetworkSettings.Networks}}}} {node}");
    assert_eq!(
        fake.take_calls(),
        [
            inspect.clone(),
            format!("docker network disconnect kind {node}"),
            format!("docker network connect --ip 172.18.0.3 --ip6 fc00::3 kind {node}"),
            format!("docker network connect kind {node}"),
            inspect,
        ]
    );
    // Back at another address: an error that says what it means, and still in force.
    apply_node(&provider, &node, &[cut]).await;
    fake.flag("moved");
    let e = provider
        .node_fault(&node, &NodeFault::Repair)
        .await
        .unwrap_err();
    let text = opconform::error_chain(&e);
    assert!(
        text.contains(
            "came back on the kind network at 172.18.0.9 fc00::9, not at 172.18.0.3 fc00::3"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn delay_skew_eviction_hanging_node_cuts_and_the_control_plane_are_refused_naming_kind() {
    let fake = Fake::new().await;
    let (_run, provider, name) = scenario(&fake).await;
    fake.pod("ops", "op-1", &format!("{name}-worker"), "10.244.1.5")
        .await;
    for fault in [
        PodFault::Delay { millis: 200 },
        PodFault::Skew { seconds: 30 },
        PodFault::Evict {
            message: LOW_ON_MEMORY.into(),
        },
    ] {
        let e = provider
            .pod_fault("ops", "op-1", &fault)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("the kind provider cannot"), "{e}");
        assert!(e.contains("run the scenario on sim"), "{e}");
    }
    let e = provider
        .node_fault(
            &format!("{name}-worker"),
            &NodeFault::Partition { cut: Cut::Hang },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("the kind provider cannot cut node"), "{e}");
    let e = provider
        .node_fault(
            &format!("{name}-control-plane"),
            &NodeFault::Hold {
                scope: HoldScope::Node,
            },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("runs the API server the harness talks to"),
        "{e}"
    );
    let e = provider
        .node_fault(
            "elsewhere-worker",
            &NodeFault::Hold {
                scope: HoldScope::Node,
            },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a node of this kind cluster"), "{e}");
    assert!(fake.take_calls().is_empty());
    assert!(provider.faults().events().is_empty());
}

#[tokio::test]
async fn reject_refuses_reads_and_codes_admission_cannot_give_before_touching_the_cluster() {
    let fake = Fake::new().await;
    let (_run, provider, _name) = scenario(&fake).await;
    let reads = RequestMatch {
        verbs: vec!["get".into()],
        resource: Some("leases".into()),
        ..RequestMatch::default()
    };
    let e = provider.reject(reads, 403, "no").await.unwrap_err();
    assert!(e.to_string().contains("cannot reject get requests"), "{e}");
    let e = provider
        .reject(RequestMatch::default(), 503, "down")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cannot answer with 503"), "{e}");
    let e = opconform::error_chain(&provider.allow(7).await.unwrap_err());
    assert!(e.contains("no fault rule 7"), "{e}");
    assert!(provider.faults().events().is_empty());
}

#[tokio::test]
async fn teardown_after_a_failed_scenario_undoes_the_faults_in_force_and_deletes_its_objects() {
    let fake = Fake::new().await;
    let (_run, provider, name) = scenario(&fake).await;
    let worker = format!("{name}-worker");
    let worker2 = format!("{name}-worker2");
    fake.pod("ops", "op-1", &worker, "10.244.1.5").await;
    let system = provider.placement().namespace;
    let namespaces: Api<Namespace> = Api::all(fake.client.clone());
    let labelled: Namespace = serde_json::from_value(json!({
        "metadata": {"name": system, "labels": provider.placement().labels}
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &labelled)
        .await
        .unwrap();
    provider
        .node_fault(
            &worker2,
            &NodeFault::Hold {
                scope: HoldScope::Node,
            },
        )
        .await
        .unwrap();
    provider
        .pod_fault("ops", "op-1", &PodFault::Partition { cut: Cut::Hang })
        .await
        .unwrap();
    fake.take_calls();
    Box::new(provider).teardown().await;
    let rule = "-s 10.244.1.5 -p tcp --dport 6443 -m comment --comment opconform partition ops/op-1 -j DROP";
    assert_eq!(
        fake.take_calls(),
        [
            format!("docker unpause {worker2}"),
            format!("docker exec {worker} iptables -w 5 -D FORWARD {rule}"),
            format!("docker exec {worker} iptables -w 5 -D INPUT {rule}"),
        ]
    );
    let gone = match namespaces.get(&system).await {
        Err(_) => true,
        Ok(ns) => ns.metadata.deletion_timestamp.is_some(),
    };
    assert!(gone, "the scenario's namespace is still there");
}

#[tokio::test]
async fn the_api_servers_audit_log_is_followed_and_writes_are_attributed_to_pods() {
    let fake = Fake::new().await;
    let (_run, provider, name) = scenario(&fake).await;
    let system = provider.placement().namespace;
    let log = fake.path(&format!("work/{name}/audit/kube-apiserver-audit.log"));
    let (mut feed, _) = provider.audit().expect("an audit feed").into_parts();
    fake.pod(&system, "op-9", &format!("{name}-worker"), "10.244.1.9")
        .await;
    let line = |source: &str, extra: &str| {
        format!(
            r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/apis/coordination.k8s.io/v1/namespaces/{system}/leases/lock","verb":"update","user":{{"username":"system:serviceaccount:{system}:op","groups":[]{extra}}},"sourceIPs":["{source}"],"objectRef":{{"resource":"leases","namespace":"{system}","name":"lock","apiGroup":"coordination.k8s.io"}},"responseStatus":{{"code":200}},"requestReceivedTimestamp":"2026-01-01T00:00:00Z"}}"#
        )
    };
    let append = |text: String| {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(file, "{text}").unwrap();
    };
    // Bound token claims name the pod whatever the source address.
    append(line(
        "172.18.0.3",
        r#","extra":{"authentication.kubernetes.io/pod-name":["op-1"],"authentication.kubernetes.io/pod-uid":["u-1"]}"#,
    ));
    let ev = tokio::time::timeout(support::WAIT, feed.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((ev.seq, ev.pod.unwrap().name.as_str()), (1, "op-1"));
    // Without them, the pod whose address the request came from (once it is watched).
    let deadline = tokio::time::Instant::now() + support::WAIT;
    loop {
        append(line("10.244.1.9", ""));
        let ev = tokio::time::timeout(support::WAIT, feed.recv())
            .await
            .unwrap()
            .unwrap();
        if let Some(pod) = ev.pod {
            assert_eq!(
                (pod.namespace.as_str(), pod.name.as_str()),
                (system.as_str(), "op-9")
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never attributed by address"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(fake.take_calls().is_empty(), "the audit needs no command");
}

// ---- kind-config.yaml, its audit policy, the workflow and the script ----

fn yaml(rel: &str) -> serde_yaml::Value {
    let path = repository().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
}

fn text(rel: &str) -> String {
    std::fs::read_to_string(repository().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `kind: ClusterConfiguration` patches of a node, parsed.
fn cluster_configuration(node: &serde_yaml::Value) -> serde_yaml::Value {
    node["kubeadmConfigPatches"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| serde_yaml::from_str::<serde_yaml::Value>(p.as_str().unwrap()).unwrap())
        .find(|p| p["kind"].as_str() == Some("ClusterConfiguration"))
        .expect("a ClusterConfiguration patch")
}

#[test]
fn kind_config_has_one_control_plane_two_workers_and_the_audit_log_mounted() {
    let config = yaml("kind-config.yaml");
    assert_eq!(config["kind"].as_str(), Some("Cluster"));
    assert_eq!(
        config["apiVersion"].as_str(),
        Some("kind.x-k8s.io/v1alpha4")
    );
    let roles: Vec<&str> = config["nodes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|n| n["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["control-plane", "worker", "worker"]);
    let control_plane = &config["nodes"][0];
    let patch = cluster_configuration(control_plane);
    let args = &patch["apiServer"]["extraArgs"];
    let policy = args["audit-policy-file"].as_str().unwrap();
    let log = Path::new(args["audit-log-path"].as_str().unwrap());
    assert_eq!(args["audit-log-format"].as_str(), Some("json"));
    assert_eq!(log.file_name().unwrap(), "kube-apiserver-audit.log");
    // The API server pod sees the policy and the log directory of the node…
    let volumes: Vec<&str> = patch["apiServer"]["extraVolumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v["mountPath"].as_str().unwrap())
        .collect();
    assert!(volumes.contains(&Path::new(policy).parent().unwrap().to_str().unwrap()));
    assert!(volumes.contains(&log.parent().unwrap().to_str().unwrap()));
    // …and the node has them from this machine.
    let mounts: Vec<(&str, &str)> = control_plane["extraMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["containerPath"].as_str().unwrap(),
                m["hostPath"].as_str().unwrap(),
            )
        })
        .collect();
    let policy_on_host = mounts
        .iter()
        .find(|(c, _)| *c == policy)
        .expect("the policy file is mounted")
        .1;
    assert!(repository().join(policy_on_host).is_file());
    assert!(
        mounts
            .iter()
            .any(|(c, _)| Path::new(c) == log.parent().unwrap())
    );
    // Node failures are noticed in seconds.
    let grace = patch["controllerManager"]["extraArgs"]["node-monitor-grace-period"]
        .as_str()
        .unwrap();
    assert_eq!(grace, "20s");
    // Every block says what it is for.
    assert!(text("kind-config.yaml").matches("\n  # ").count() >= 3);
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct AuditPolicy {
    api_version: String,
    kind: String,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: bool,
    rules: Vec<AuditRule>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct AuditRule {
    level: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<serde_yaml::Value>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<String>,
}

#[test]
fn the_audit_policy_is_an_audit_k8s_io_v1_policy_logging_every_write() {
    let policy: AuditPolicy =
        serde_yaml::from_str(&text("ci/kind/audit-policy.yaml")).expect("a valid Policy");
    assert_eq!(policy.api_version, "audit.k8s.io/v1");
    assert_eq!(policy.kind, "Policy");
    let stages = [
        "RequestReceived",
        "ResponseStarted",
        "ResponseComplete",
        "Panic",
    ];
    assert!(
        policy
            .omit_stages
            .iter()
            .all(|s| stages.contains(&s.as_str()))
    );
    assert!(!policy.omit_stages.iter().any(|s| s == "ResponseComplete"));
    let verbs = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    for rule in &policy.rules {
        assert!(
            ["None", "Metadata", "Request", "RequestResponse"].contains(&rule.level.as_str()),
            "{}",
            rule.level
        );
        assert!(rule.verbs.iter().all(|v| verbs.contains(&v.as_str())));
    }
    // The first rule that matches an operator's write logs it.
    for verb in ["create", "update", "patch", "delete"] {
        let rule = policy
            .rules
            .iter()
            .find(|r| {
                r.user_groups.is_empty()
                    && r.users.is_empty()
                    && (r.verbs.is_empty() || r.verbs.iter().any(|v| v == verb))
            })
            .unwrap();
        assert_eq!(rule.level, "Metadata", "{verb}");
    }
}

#[test]
fn the_kind_script_runs_the_conformance_table_with_each_profiles_own_image_in_its_lifecycle() {
    let script = text("ci/kind-e2e.sh");
    // The same Docker lifecycle and build, the table in place of the features.
    assert!(script.contains("ci/kind/docker.sh up"));
    assert!(script.contains("ci/kind/docker.sh down"));
    assert!(script.contains("opconform\" conformance --provider kind \"$@\""));
    // Each profile runs its own image: the bundled operator's is not given to every one.
    assert!(script.contains("unset OPCONFORM_IMAGE"));
    assert!(script.contains("OPCONFORM_KIND_BASE_IMAGE"));
    let build = text("ci/kind/build.sh");
    assert!(build.contains("echo \"OPCONFORM_KIND_BASE_IMAGE=$base_image\""));
    assert!(build.contains("  base)"));
    // CI runs the kubebuilder subject's table there once its profile exists.
    let ci = text(".ci/run");
    let stage = ci
        .split("\nstage \"")
        .find(|s| s.starts_with("the leadership conformance table on kind"))
        .expect("a stage for the table on kind");
    assert!(
        stage.contains("if [ -f \"$kubebuilder_profile\" ]"),
        "{stage}"
    );
    assert!(
        stage.contains("ci/kind-e2e.sh conformance \"$kubebuilder_profile\""),
        "{stage}"
    );
}

#[test]
fn the_workflow_runs_the_commands_the_readme_documents() {
    let workflow = yaml("ci/github/e2e-kind.yml");
    let jobs = workflow["jobs"].as_mapping().expect("jobs");
    let runs = |job: &str| -> String {
        workflow["jobs"][job]["steps"]
            .as_sequence()
            .unwrap_or_else(|| panic!("job {job} has steps"))
            .iter()
            .filter_map(|s| s["run"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let uses = |job: &str| -> Vec<String> {
        workflow["jobs"][job]["steps"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|s| s["uses"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(jobs.len(), 2);
    // The harness makes its own cluster, through the same script as locally.
    assert!(runs("kind").contains("ci/kind-e2e.sh"));
    let pinned = workflow["env"]["KIND_VERSION"].as_str().unwrap();
    assert!(pinned.starts_with("v0."), "kind is pinned: {pinned}");
    assert!(runs("kind").contains("go install \"sigs.k8s.io/kind@${KIND_VERSION}\""));
    assert!(
        uses("kind")
            .iter()
            .any(|u| u.starts_with("actions/upload-artifact@"))
    );
    // An existing cluster made by helm/kind-action, through its kubeconfig.
    assert!(
        uses("kubeconfig")
            .iter()
            .any(|u| u.starts_with("helm/kind-action@"))
    );
    assert!(runs("kubeconfig").contains("OPCONFORM_PROVIDER=kubeconfig cargo test --test e2e"));
    let script = text("ci/kind-e2e.sh");
    assert!(script.starts_with("#!"));
    // With the workspace's features, as `cargo test --workspace` built it.
    assert!(script.contains("OPCONFORM_PROVIDER=kind cargo test --workspace --test e2e"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(repository().join("ci/kind-e2e.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert!(mode & 0o111 != 0, "ci/kind-e2e.sh is executable");
    let readme = text("README.md");
    for documented in [
        "ci/kind-e2e.sh",
        "OPCONFORM_PROVIDER=kind cargo test --test e2e",
        "OPCONFORM_PROVIDER=kubeconfig cargo test --test e2e",
        "ci/github/e2e-kind.yml",
    ] {
        assert!(readme.contains(documented), "README lacks {documented}");
    }
}
