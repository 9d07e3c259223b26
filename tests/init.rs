//! `opconform init` on a copy of the kubebuilder subject's project: the profile it writes
//! passes `opconform profile check` and says, in substance, what the hand-written profile
//! of that project says; what it cannot know it reports; it refuses to overwrite, and a
//! directory without a PROJECT file. And the README's walkthrough ("Testing your
//! operator"), its five commands exactly, on a copy of that project outside this repository
//! with the binary installed outside it too.

use std::path::{Component, Path, PathBuf};

use assert_cmd::Command;
use opconform::profile::Profile;
use opconform::subject::{BinaryBuild, ManifestSource, Subject};

fn opconform() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("opconform"))
}

fn subject_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("subjects/kubebuilder-memcached")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the subject's project in a temporary directory.
fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("project");
    copy_dir(&subject_dir().join("project"), &dir);
    (tmp, dir)
}

fn init(dir: &Path, extra: &[&str]) -> std::process::Output {
    opconform()
        .arg("init")
        .arg(dir)
        .args(extra)
        .output()
        .unwrap()
}

/// The subject with its paths made relative to `root`, to compare two copies.
fn relative_to(mut s: Subject, root: &Path) -> Subject {
    let strip = |p: &Path| {
        let mut plain = PathBuf::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    plain.pop();
                }
                Component::CurDir => {}
                other => plain.push(other),
            }
        }
        plain.strip_prefix(root).unwrap_or(&plain).to_path_buf()
    };
    s.binary.build = match s.binary.build {
        BinaryBuild::Go {
            module,
            package,
            sources,
        } => BinaryBuild::Go {
            module: strip(&module),
            package,
            sources: sources.iter().map(|p| strip(p)).collect(),
        },
        other => other,
    };
    s.manifests = match s.manifests {
        ManifestSource::Kustomize(dir) => ManifestSource::Kustomize(strip(&dir)),
        other => other,
    };
    if let Some(work) = &mut s.work {
        work.objects = work.objects.as_deref().map(strip);
    }
    s
}

#[test]
fn init_writes_for_the_kubebuilder_subject_what_its_hand_written_profile_says() {
    let (_tmp, dir) = project();
    let out = init(&dir, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = dir.join("opconform/profile.yaml");
    let check = opconform()
        .args(["profile", "check"])
        .arg(&written)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let generated = relative_to(Profile::read(&written).unwrap(), &dir);
    let hand = relative_to(
        Profile::read(&subject_dir().join("profile.yaml")).unwrap(),
        &subject_dir().join("project"),
    );
    assert_eq!(generated.name, "memcached-operator");
    assert_eq!(generated.namespace, hand.namespace);
    assert_eq!(generated.deployment, hand.deployment);
    assert_eq!(generated.pod_selector, hand.pod_selector);
    assert_eq!(generated.metrics, hand.metrics);
    assert_eq!(generated.lock, hand.lock);
    assert_eq!(generated.election, hand.election);
    assert_eq!(generated.image, hand.image);
    assert_eq!(generated.binary.build, hand.binary.build);
    assert_eq!(generated.manifests, hand.manifests);
    assert_eq!(generated.manager, hand.manager);
    assert_eq!(generated.leave_out, hand.leave_out);
    assert_eq!(generated.needs_container, hand.needs_container);
    assert_eq!(generated.watch_namespace, hand.watch_namespace);
    let (work, hand_work) = (generated.work.unwrap(), hand.work.unwrap());
    assert_eq!(work.objects, hand_work.objects);
    assert_eq!(work.writes, hand_work.writes);

    // What the hand-written profile has and init cannot know is reported, not made up.
    assert_eq!(work.more, None);
    assert!(hand_work.more.is_some());
    assert_eq!(generated.binary.env, None);
    assert!(hand.binary.env.is_some());
    for key in ["work.more:", "binary.env:"] {
        assert!(stdout.contains(key), "{key} not reported: {stdout}");
    }
    assert!(stdout.contains("opconform profile check"), "{stdout}");
    assert!(stdout.contains("opconform test --operator"), "{stdout}");

    let text = std::fs::read_to_string(&written).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate().skip(1) {
        if !line.starts_with([' ', '#', '-']) {
            assert!(
                lines[i - 1].starts_with('#'),
                "no comment above {line:?}: {text}"
            );
        }
    }
    assert!(
        text.contains("# cmd/main.go's LeaderElectionID"),
        "no comment on lock: {text}"
    );
    let feature =
        std::fs::read_to_string(dir.join("opconform/features/memcached.feature")).unwrap();
    // No tag of its own: the harness's tags (`@memcached` is the bundled operator's kind)
    // would leave its scenarios out.
    assert!(feature.starts_with("Feature: Memcached\n"), "{feature}");
    for line in [
        "When these objects are applied:",
        "kind: Memcached",
        "Then within 30s these objects match:",
        "name: memcached-sample",
        "Given the operator is deployed with 3 replicas in lease mode with timings 15s/10s/2s",
        "Then within 60s exactly one replica leads",
        "And there was never more than one leader",
    ] {
        assert!(feature.contains(line), "{line}: {feature}");
    }
}

/// The project as operator-sdk's Go plugin lays it out: kubebuilder's `go.kubebuilder.io/v4`
/// with operator-sdk's own plugins in `PROJECT` (`manifests.sdk.operatorframework.io/v2`,
/// `scorecard.sdk.operatorframework.io/v2`) and their trees, `config/manifests` (the
/// bundle's ClusterServiceVersion base) and `config/scorecard`. (operator-sdk itself is not
/// served by the Go module proxy this project builds from, so its layout is written here.)
fn as_operator_sdk_lays_it_out(dir: &Path) {
    let project = std::fs::read_to_string(dir.join("PROJECT")).unwrap();
    let project = project
        .replace("cliVersion: 4.16.0\n", "cliVersion: 1.42.0\n")
        .replace(
            "plugins:\n",
            "plugins:\n  manifests.sdk.operatorframework.io/v2: {}\n  \
             scorecard.sdk.operatorframework.io/v2: {}\n",
        );
    assert!(project.contains("manifests.sdk.operatorframework.io/v2"));
    std::fs::write(dir.join("PROJECT"), project).unwrap();
    let manifests = dir.join("config/manifests");
    std::fs::create_dir_all(manifests.join("bases")).unwrap();
    std::fs::write(
        manifests.join("kustomization.yaml"),
        "resources:\n- bases/memcached-operator.clusterserviceversion.yaml\n- ../default\n\
         - ../samples\n- ../scorecard\n",
    )
    .unwrap();
    std::fs::write(
        manifests.join("bases/memcached-operator.clusterserviceversion.yaml"),
        "apiVersion: operators.coreos.com/v1alpha1\nkind: ClusterServiceVersion\nmetadata:\n  \
         name: memcached-operator.v0.0.0\n  namespace: placeholder\nspec:\n  displayName: \
         memcached-operator\n  install:\n    spec:\n      deployments: null\n    strategy: \"\"\n",
    )
    .unwrap();
    let scorecard = dir.join("config/scorecard");
    std::fs::create_dir_all(scorecard.join("bases")).unwrap();
    std::fs::write(
        scorecard.join("kustomization.yaml"),
        "resources:\n- bases/config.yaml\n",
    )
    .unwrap();
    std::fs::write(
        scorecard.join("bases/config.yaml"),
        "apiVersion: scorecard.operatorframework.io/v1alpha3\nkind: Configuration\nmetadata:\n  \
         name: config\nstages:\n- parallel: true\n  tests: []\n",
    )
    .unwrap();
}

#[test]
fn init_reads_an_operator_sdk_go_project_as_it_reads_kubebuilders() {
    let (_kubebuilder_tmp, kubebuilder) = project();
    let (_sdk_tmp, sdk) = project();
    as_operator_sdk_lays_it_out(&sdk);
    for dir in [&kubebuilder, &sdk] {
        let out = init(dir, &[]);
        assert!(
            out.status.success(),
            "{}: {}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let read = |dir: &Path| {
        relative_to(
            Profile::read(&dir.join("opconform/profile.yaml")).unwrap(),
            dir,
        )
    };
    assert_eq!(read(&sdk), read(&kubebuilder));
    let feature = |dir: &Path| {
        std::fs::read_to_string(dir.join("opconform/features/memcached.feature")).unwrap()
    };
    assert_eq!(feature(&sdk), feature(&kubebuilder));
}

#[test]
fn init_without_a_literal_election_id_leaves_the_lock_to_fill_in_and_says_so() {
    let (_tmp, dir) = project();
    let main = dir.join("cmd/main.go");
    let text = std::fs::read_to_string(&main).unwrap();
    std::fs::write(
        &main,
        text.replace("\"1031f310.example.org\"", "os.Getenv(\"LOCK_NAME\")"),
    )
    .unwrap();
    let out = init(&dir, &[]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("lock.name: cmd/main.go sets LeaderElectionID to os.Getenv(\"LOCK_NAME\"), not a literal"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the profile is not complete yet: operator profile"),
        "{stdout}"
    );
    let check = opconform()
        .args(["profile", "check"])
        .arg(dir.join("opconform/profile.yaml"))
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(stderr.contains("lock.name"), "{stderr}");
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let (_tmp, dir) = project();
    assert!(init(&dir, &[]).status.success());
    let profile = dir.join("opconform/profile.yaml");
    std::fs::write(&profile, "# mine\n").unwrap();
    let out = init(&dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{} exists: pass --force to overwrite it",
            profile.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&profile).unwrap(), "# mine\n");
    assert!(init(&dir, &["--force"]).status.success());
    assert_ne!(std::fs::read_to_string(&profile).unwrap(), "# mine\n");
}

#[test]
fn init_writes_where_it_is_told_with_paths_relative_to_the_profile() {
    let (tmp, dir) = project();
    let out_profile = tmp.path().join("elsewhere/op.yaml");
    let out = init(
        &dir,
        &[
            "--out",
            out_profile.to_str().unwrap(),
            "--features",
            tmp.path().join("features").to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&out_profile).unwrap();
    assert!(
        text.contains("kustomize: ../project/config/default"),
        "{text}"
    );
    assert!(tmp.path().join("features/memcached.feature").is_file());
    let subject = Profile::read(&out_profile).unwrap();
    assert_eq!(
        subject.manifests,
        ManifestSource::Kustomize(dir.join("config/default"))
    );
}

#[test]
fn init_in_a_directory_without_a_project_file_says_what_it_expected() {
    let tmp = tempfile::tempdir().unwrap();
    let out = init(tmp.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("is not a kubebuilder or operator-sdk project: expected its PROJECT file at"),
        "{stderr}"
    );
    assert!(!tmp.path().join("opconform").exists());
}

#[test]
fn init_names_a_malformed_file_and_what_it_expected() {
    let (_tmp, dir) = project();
    std::fs::write(dir.join("config/manager/manager.yaml"), "kind: Service\n").unwrap();
    let out = init(&dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("config/manager/manager.yaml: expected a Deployment (kind: Deployment)"),
        "{stderr}"
    );
    std::fs::remove_file(dir.join("config/manager/manager.yaml")).unwrap();
    std::fs::create_dir(dir.join("config/manager/manager.yaml")).unwrap();
    let stderr = String::from_utf8_lossy(&init(&dir, &[]).stderr).into_owned();
    assert!(
        stderr.contains(&format!(
            "cannot read {}",
            dir.join("config/manager/manager.yaml").display()
        )),
        "{stderr}"
    );
    std::fs::write(dir.join("PROJECT"), "layout: [a\n").unwrap();
    let stderr = String::from_utf8_lossy(&init(&dir, &[]).stderr).into_owned();
    assert!(stderr.contains("PROJECT: not YAML"), "{stderr}");
}

#[test]
fn init_of_a_project_with_metrics_and_webhooks_off_turns_the_metrics_on_and_says_so() {
    let (_tmp, dir) = project();
    let kustomization = dir.join("config/default/kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    let mut off = text.clone();
    for part in [
        "- ../webhook\n",
        "- ../certmanager\n",
        "- path: manager_metrics_patch.yaml\n  target:\n    kind: Deployment\n",
        "- path: manager_webhook_patch.yaml\n  target:\n    kind: Deployment\n",
    ] {
        assert!(off.contains(part), "{part}");
        off = off.replace(part, "");
    }
    // The cert-manager replacements go too, as they name the webhook's Service.
    let off = &off[..off.find("replacements:").unwrap()];
    std::fs::write(&kustomization, off).unwrap();
    let out = init(&dir, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "metrics: --metrics-bind-address's default in main.go is \"0\": the manager serves no metrics as deployed; the profile turns them on over HTTP on :8080"
        ),
        "{stdout}"
    );
    let subject = Profile::read(&dir.join("opconform/profile.yaml")).unwrap();
    assert_eq!(subject.manager.env["ENABLE_WEBHOOKS"], "false");
    assert!(subject.manager.remove_args.is_empty());
    assert!(subject.leave_out.kinds.is_empty());
    assert_eq!(
        subject.manager.args,
        [
            "--metrics-bind-address=:8080",
            "--metrics-secure=false",
            "--zap-time-encoding=rfc3339nano"
        ]
    );
    assert!(!subject.metrics.https);
    assert_eq!(subject.metrics.port, 8080);
}

/// The commands of the README's walkthrough: the first `sh` block of its "Testing your
/// operator" section, one per line, comments dropped.
fn walkthrough_commands() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("\n## Testing your operator\n")
        .nth(1)
        .expect("README.md has a section \"Testing your operator\"");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section has a sh block");
    block
        .lines()
        .map(|l| l.split(" # ").next().unwrap_or_default().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_readme_walkthrough_installs_inits_checks_and_tests_a_kubebuilder_project_outside_this_repository()
 {
    let commands = walkthrough_commands();
    assert_eq!(commands.len(), 5, "at most five commands: {commands:?}");
    assert_eq!(commands[0], "cargo install --path .");
    assert!(commands[1].starts_with("cd "), "{commands:?}");

    // 1. Install. `cargo install --path .` builds this package and copies its binary into
    // a bin directory; the build is this test run's own (building it again with the
    // features of one package alone takes a minute), so the test copies that binary into
    // a bin directory of its own, outside the repository and outside cargo's target.
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("cargo-home/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(
        assert_cmd::cargo::cargo_bin!("opconform"),
        bin.join("opconform"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // 2. `cd` into the project: a copy of the kubebuilder-scaffolded project.
    let project = tmp.path().join("src/my-operator");
    copy_dir(&subject_dir().join("project"), &project);

    // 3–5, exactly as written.
    let run = |command: &str| {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&project)
            .env("PATH", &path)
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "{command}: {}\n{stdout}\n{stderr}",
            out.status
        );
        (stdout, stderr)
    };
    let (stdout, _) = run(&commands[2]);
    assert!(
        stdout.contains("wrote ./opconform/profile.yaml")
            && stdout.contains("wrote ./opconform/features/memcached.feature"),
        "{stdout}"
    );
    let (stdout, _) = run(&commands[3]);
    assert!(
        stdout.contains("operator memcached-operator (Deployment memcached-operator-system/memcached-operator-controller-manager"),
        "{stdout}"
    );
    let (stdout, stderr) = run(&commands[4]);
    let reports = project.join("opconform/reports");
    assert!(reports.join("suite.json").is_file(), "{stderr}");
    match opconform::cluster::ProviderKind::Sim.pods_are_not_containers() {
        // The kubebuilder manager needs a container (needsContainer): where this machine
        // cannot make one the run says so and runs nothing.
        Some(why) => {
            eprintln!("the walkthrough's scenarios need containers: {why}");
            assert!(stderr.contains("opconform: no scenario runs:"), "{stderr}");
        }
        None => {
            assert!(
                stdout.contains("2 scenarios (2 passed)"),
                "{stdout}\n{stderr}"
            );
            let suite = std::fs::read_to_string(reports.join("suite.json")).unwrap();
            assert!(
                suite.contains("Exactly one of three replicas leads"),
                "{suite}"
            );
        }
    }
}
