//! The kubeconfig provider needs nothing but a kubeconfig: the feature suite runs against
//! a separately started `opconform sim` process, reached only through the kubeconfig it
//! writes (and its audit log file), as it would against any running cluster. Scenarios
//! that need access to the nodes or API faults are left out by the provider.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use opconform::cluster::ProviderKind;
use opconform::cluster::kubeconfig::KubeconfigOptions;
use opconform::steps::{Suite, run_suite};
use opconform::subject::Subject;

mod support;

/// The `opconform sim` child, stopped whatever happens.
struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        support::stop_child(&mut self.0);
    }
}

fn start_sim(dir: &Path) -> Sim {
    let subject = Subject::memcached();
    let operator = subject.binary().expect("the operator binary");
    let child = Command::new(env!("CARGO_BIN_EXE_opconform"))
        .arg("sim")
        .arg("--fast")
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .arg("--audit-log")
        .arg(dir.join("audit.jsonl"))
        .arg("--image")
        .arg(format!("{}={}", subject.image, operator.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("opconform sim starts");
    let sim = Sim(child);
    // The kubeconfig is written once the cluster serves.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("kubeconfig").is_file() {
        assert!(
            Instant::now() < deadline,
            "opconform sim wrote no kubeconfig within 60s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sim
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sim = start_sim(dir.path());
    let suite = Suite {
        subject: Subject::memcached(),
        provider: ProviderKind::Kubeconfig,
        kubeconfig: KubeconfigOptions {
            kubeconfig: Some(dir.path().join("kubeconfig")),
            context: None,
            image: None,
            audit_log: Some(dir.path().join("audit.jsonl")),
        },
        reports: opconform::report::reports_root().join("kubeconfig"),
    };
    let features = opconform::features::gather(&[]).expect("the shipped features");
    let outcome = run_suite(features, suite, None).await;
    drop(sim);
    assert!(
        !outcome.scenarios.is_empty(),
        "the kubeconfig provider ran no scenario"
    );
    if outcome.failed {
        std::process::exit(1);
    }
}
