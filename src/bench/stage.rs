//! One stage of a benchmark: a simulated cluster with one subject (ours or an anchor)
//! deployed in one election mode with its own flags, its audit tapped, and the moves a
//! benchmark makes on it — wait until one replica leads while every other is Ready and
//! campaigning, delete a pod, read each pod's memory.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt as _};

use super::audit_tap::{AuditTap, first_lock_request, pod_deleted};
use super::{BenchError, Contender, Options};
use crate::deploy::{Manifest, Namespacing, apply_all};
use crate::sim::kubelet::ImageMap;
use crate::sim::{SimCluster, SimClusterConfig};
use crate::subject::{OperatorSetup, Subject};

/// Appended to the values of the selector's labels on a pod taken out of the Deployment
/// (see [`Stage::detach`]).
const DETACHED: &str = "-detached";

/// How often [`Stage::settle`] looks.
const SETTLE_POLL: Duration = Duration::from_millis(50);

pub use crate::subject::LeaseTimings;

/// Short timings for the handoff rows, so that many runs finish fast.
pub const HANDOFF_TIMINGS: LeaseTimings = LeaseTimings {
    lease_duration: Duration::from_secs(2),
    renew_deadline: Duration::from_millis(1500),
    retry_period: Duration::from_millis(500),
};

/// The election a stage runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Election {
    /// Leader-with-lease with these timings, releasing the Lease on SIGTERM or not.
    Lease {
        /// The timings.
        timings: LeaseTimings,
        /// `--release-on-cancel`.
        release_on_cancel: bool,
    },
    /// Leader-for-life.
    ForLife,
}

impl Election {
    /// The flags of this election mode for `contender`'s subject (from its profile), then
    /// the contender's own.
    ///
    /// # Errors
    /// [`BenchError::Unsound`] when the subject has no such mode, or cannot release on
    /// cancel when asked to.
    fn args(&self, contender: &Contender) -> Result<Vec<String>, BenchError> {
        let subject = &contender.subject;
        let missing =
            |what: &str| BenchError::Unsound(format!("the subject {} has no {what}", subject.name));
        let mut args = match self {
            Election::Lease {
                timings,
                release_on_cancel,
            } => {
                let mut args = subject
                    .election
                    .lease_args(timings)
                    .ok_or_else(|| missing("lease mode"))?;
                if *release_on_cancel {
                    let release = subject.election.release_on_cancel.as_ref();
                    args.extend(release.ok_or_else(|| missing("release-on-cancel"))?.clone());
                }
                args
            }
            Election::ForLife => subject
                .election
                .for_life
                .clone()
                .ok_or_else(|| missing("leader-for-life mode"))?,
        };
        args.extend(contender.args.iter().cloned());
        Ok(args)
    }

    /// The lock's resource: `leases` or `configmaps`.
    pub(crate) fn lock_resource(&self) -> &'static str {
        match self {
            Election::Lease { .. } => "leases",
            Election::ForLife => "configmaps",
        }
    }
}

/// Who leads and who stands by, once settled.
#[derive(Debug, Clone)]
pub(crate) struct Roles {
    /// The lock's holder.
    pub leader: String,
    /// The other replicas, each Ready and campaigning.
    pub standbys: Vec<String>,
    /// When each standby first asked the API server about the lock.
    pub campaigning_since: BTreeMap<String, DateTime<Utc>>,
}

/// A simulated cluster with the operator deployed.
///
/// # Caveats
/// The manager's readiness probe is shortened (first probe at once, then every second)
/// so that a replacement pod is Ready about a second after it starts instead of five:
/// nothing measured depends on readiness, but every run waits for it.
pub(crate) struct Stage {
    subject: Subject,
    cluster: SimCluster,
    client: Client,
    tap: AuditTap,
    election: Election,
    replicas: usize,
}

impl Stage {
    /// Starts a simulated cluster (3 nodes, fast node timings) that runs the contender's
    /// binary for its subject's image, and deploys its manifests with `replicas` replicas,
    /// the election's flags and the contender's own. Does not wait for the rollout.
    ///
    /// # Errors
    /// When the cluster does not start or the manifests cannot be applied; the cluster is
    /// stopped before returning.
    async fn start(
        contender: &Contender,
        election: Election,
        replicas: usize,
    ) -> Result<Stage, BenchError> {
        let args = election.args(contender)?;
        let subject = &contender.subject;
        let mut images = ImageMap::new();
        images.insert(&subject.image, &contender.binary);
        let cluster = SimCluster::start(SimClusterConfig {
            images,
            ..SimClusterConfig::fast()
        })
        .await
        .map_err(|e| BenchError::Cluster(Box::new(e)))?;
        let client = match cluster.server().admin_client().await {
            Ok(client) => client,
            Err(e) => {
                cluster.shutdown().await;
                return Err(BenchError::Client(e));
            }
        };
        let stage = Stage {
            subject: subject.clone(),
            tap: AuditTap::start(cluster.handle(), &subject.namespace),
            cluster,
            client,
            election,
            replicas,
        };
        match stage.deploy(args).await {
            Ok(()) => Ok(stage),
            Err(e) => {
                stage.shutdown().await;
                Err(e)
            }
        }
    }

    /// Starts a stage, runs `work` on it unless the run is interrupted, and shuts the stage
    /// down whatever the outcome.
    ///
    /// # Errors
    /// The stage's failure to start, `work`'s error, or [`BenchError::Interrupted`].
    pub(crate) async fn run<T>(
        options: &Options,
        (contender, election, replicas): (&Contender, Election, usize),
        work: impl AsyncFnOnce(&Stage) -> Result<T, BenchError>,
    ) -> Result<T, BenchError> {
        options.check_interrupt()?;
        let stage = Stage::start(contender, election, replicas).await?;
        let result = options.unless_interrupted(work(&stage)).await;
        stage.shutdown().await;
        result
    }

    async fn deploy(&self, args: Vec<String>) -> Result<(), BenchError> {
        let setup = OperatorSetup {
            replicas: i32::try_from(self.replicas).unwrap_or(i32::MAX),
            args,
            timings: None,
        };
        let mut manifests = self
            .subject
            .render(&setup, &self.subject.own_placement())
            .map_err(|e| BenchError::Deploy(Box::new(e)))?;
        quick_readiness(&mut manifests);
        apply_all(
            &self.client,
            &manifests,
            Namespacing::Default(&self.subject.namespace),
        )
        .await
        .map_err(|e| BenchError::Deploy(Box::new(e)))?;
        Ok(())
    }

    /// The subject deployed.
    pub(crate) fn subject(&self) -> &Subject {
        &self.subject
    }

    /// The admin client.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The audit tap.
    pub(crate) fn tap(&self) -> &AuditTap {
        &self.tap
    }

    /// Stops the cluster and every pod process.
    pub(crate) async fn shutdown(self) {
        self.cluster.shutdown().await;
    }

    /// Waits until exactly `pods` operator pods run (none terminating, detached ones
    /// included), all Ready, one of them holds the lock and every other has asked the API
    /// server about it.
    ///
    /// # Errors
    /// [`BenchError::Timeout`] with what was last missing.
    pub(crate) async fn settle(&self, pods: usize, within: Duration) -> Result<Roles, BenchError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let last = match self.roles(pods).await {
                Ok(roles) => return Ok(roles),
                Err(why) => why,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(BenchError::Timeout {
                    what: format!(
                        "{pods} operator pods: one leader, every other Ready and campaigning"
                    ),
                    within,
                    last,
                });
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    async fn roles(&self, expected: usize) -> Result<Roles, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.subject.namespace);
        let pods = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("cannot list the operator's pods: {e}"))?
            .items;
        let terminating = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count();
        if pods.len() != expected || terminating > 0 {
            return Err(format!(
                "{} pods ({terminating} terminating), waiting for {expected} running",
                pods.len(),
            ));
        }
        if let Some(p) = pods.iter().find(|p| !is_ready(p)) {
            return Err(format!("pod {} is not Ready", p.name_any()));
        }
        let holder = self.holder(&pods).await?;
        let leader = holder.ok_or("nobody holds the lock")?;
        let mut standbys = Vec::new();
        let mut campaigning_since = BTreeMap::new();
        for pod in pods.iter().map(|p| p.name_any()).filter(|p| *p != leader) {
            let since = self.tap.query(|events| {
                first_lock_request(
                    events,
                    &self.subject.lock.namespace,
                    self.election.lock_resource(),
                    &self.subject.lock.name,
                    &pod,
                )
                .map(|e| e.time)
            });
            let since = since.ok_or_else(|| format!("pod {pod} has not asked for the lock yet"))?;
            campaigning_since.insert(pod.clone(), since);
            standbys.push(pod);
        }
        Ok(Roles {
            leader,
            standbys,
            campaigning_since,
        })
    }

    /// Takes a pod out of its ReplicaSet by changing the labels the selector matches: the
    /// ReplicaSet starts a replacement now, and nothing replaces the pod once it is
    /// deleted. The pod itself runs on untouched.
    ///
    /// # Errors
    /// When the API server refuses the patch.
    pub(crate) async fn detach(&self, pod: &str) -> Result<(), BenchError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.subject.namespace);
        let patch = serde_json::json!({"metadata": {"labels": detached_labels(&self.subject)}});
        pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| BenchError::Api {
                what: format!("detaching pod {pod} from its ReplicaSet"),
                source: Box::new(source),
            })?;
        Ok(())
    }

    /// The running pod that holds the lock, if any.
    async fn holder(&self, pods: &[Pod]) -> Result<Option<String>, String> {
        let unreadable = |e: kube::Error| format!("cannot read the lock: {e}");
        let lock = &self.subject.lock;
        let holder = match self.election {
            Election::Lease { .. } => {
                let leases: Api<Lease> = Api::namespaced(self.client.clone(), &lock.namespace);
                leases
                    .get_opt(&lock.name)
                    .await
                    .map_err(unreadable)?
                    .and_then(|l| l.spec?.holder_identity)
                    .and_then(|id| lock.holder.holder_of_identity(&id))
                    .and_then(|name| pods.iter().find(|p| p.name_any() == name))
            }
            Election::ForLife => {
                let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &lock.namespace);
                let owner = maps
                    .get_opt(&lock.name)
                    .await
                    .map_err(unreadable)?
                    .and_then(|c| c.metadata.owner_references?.into_iter().next());
                owner.and_then(|o| {
                    pods.iter()
                        .find(|p| p.name_any() == o.name && p.metadata.uid.as_ref() == Some(&o.uid))
                })
            }
        };
        Ok(holder.map(|p| p.name_any()))
    }

    /// Deletes an operator pod — gracefully (SIGTERM, then the pod's grace period) or with
    /// grace 0 (killed at once) — logs it in the cluster's fault log, and returns the
    /// audit of the deletion: its time is the fault's.
    ///
    /// # Errors
    /// When the API server refuses, or its audit of the deletion does not appear.
    pub(crate) async fn delete_pod(
        &self,
        name: &str,
        grace_seconds: Option<u32>,
    ) -> Result<crate::sim::apiserver::audit::AuditEvent, BenchError> {
        let detail = match grace_seconds {
            Some(0) => "force, grace 0".to_string(),
            Some(g) => format!("grace {g}s"),
            None => "graceful".to_string(),
        };
        self.cluster.server().state().faults.record(
            "delete",
            &format!("pod {}/{name}", self.subject.namespace),
            &detail,
        );
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.subject.namespace);
        let sent = Utc::now();
        let params = DeleteParams {
            grace_period_seconds: grace_seconds,
            ..DeleteParams::default()
        };
        pods.delete(name, &params)
            .await
            .map_err(|source| BenchError::Api {
                what: format!("deleting pod {name}"),
                source: Box::new(source),
            })?;
        self.tap
            .wait_for(
                &format!("the audit of the deletion of pod {name}"),
                Duration::from_secs(10),
                |events| pod_deleted(events, &self.subject.namespace, name, sent).cloned(),
            )
            .await
    }

    /// The resident memory (VmRSS, MiB) of each operator pod's processes, by pod name.
    pub(crate) fn memory_by_pod(&self) -> BTreeMap<String, f64> {
        let mut memory = BTreeMap::new();
        for pid in self.cluster.pids() {
            if let (Some(pod), Some(kib)) = (pod_name_of(pid), vm_rss_kib(pid)) {
                *memory.entry(pod).or_insert(0.0) += kib as f64 / 1024.0;
            }
        }
        memory
    }
}

/// The labels of a pod taken out of the Deployment: the selector's, with other values.
fn detached_labels(subject: &Subject) -> serde_json::Map<String, serde_json::Value> {
    subject
        .selector_labels()
        .map(|(key, value)| (key.to_string(), format!("{value}{DETACHED}").into()))
        .collect()
}

/// The manager's readiness probe: first at once, then every second.
fn quick_readiness(manifests: &mut [Manifest]) {
    for m in manifests {
        if m.object
            .types
            .as_ref()
            .is_some_and(|t| t.kind == "Deployment")
        {
            let probe =
                &mut m.object.data["spec"]["template"]["spec"]["containers"][0]["readinessProbe"];
            if probe.is_object() {
                probe["initialDelaySeconds"] = 0.into();
                probe["periodSeconds"] = 1.into();
            }
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The `POD_NAME` in a process's environment (every operator pod has it).
fn pod_name_of(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(b"POD_NAME="))
        .map(|name| String::from_utf8_lossy(name).into_owned())
}

/// `VmRSS` of a process, in KiB.
pub(crate) fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(profile: &str) -> Contender {
        let path = crate::subject::repository_root().join(profile);
        let subject = crate::profile::Profile::read(&path).unwrap();
        Contender::anchor(subject, "/nonexistent".into())
    }

    #[test]
    fn each_subject_gets_its_own_election_flags_with_the_timings_as_it_parses_them() {
        let release = Election::Lease {
            timings: HANDOFF_TIMINGS,
            release_on_cancel: true,
        };
        let ours = Contender::ours(Subject::memcached(), "/nonexistent".into());
        assert_eq!(
            release.args(&ours).unwrap(),
            [
                "--leader-election=lease",
                "--lease-duration=2s",
                "--renew-deadline=1500ms",
                "--retry-period=500ms",
                "--release-on-cancel",
                "--standby=watch",
            ]
        );
        let controller_runtime = anchor(crate::bench::LEASE_ANCHOR);
        assert_eq!(
            release.args(&controller_runtime).unwrap(),
            [
                "--election=lease",
                "--lease-duration=2s",
                "--renew-deadline=1500ms",
                "--retry-period=500ms",
                "--release-on-cancel",
            ]
        );
        let steady = Election::Lease {
            timings: LeaseTimings::CONTROLLER_RUNTIME,
            release_on_cancel: false,
        };
        assert_eq!(
            steady
                .args(&controller_runtime.with_arg(crate::bench::ANCHOR_QUIET_WORK))
                .unwrap(),
            [
                "--election=lease",
                "--lease-duration=15s",
                "--renew-deadline=10s",
                "--retry-period=2s",
                "--work-interval=3600s",
            ]
        );
        let operator_lib = anchor(crate::bench::FOR_LIFE_ANCHOR);
        assert_eq!(
            Election::ForLife.args(&operator_lib).unwrap(),
            ["--election=for-life"]
        );
        // operator-lib has no lease mode: asking for one is refused, not guessed.
        assert!(release.args(&operator_lib).is_err());
        assert_eq!(HANDOFF_TIMINGS.to_string(), "2s/1500ms/500ms");
        assert_eq!(LeaseTimings::CONTROLLER_RUNTIME.to_string(), "15s/10s/2s");
    }

    #[test]
    fn only_the_readiness_probe_is_shortened() {
        let setup = OperatorSetup {
            replicas: 2,
            args: vec![],
            timings: None,
        };
        let subject = Subject::memcached();
        let mut manifests = subject.render(&setup, &subject.own_placement()).unwrap();
        quick_readiness(&mut manifests);
        let deployment = manifests
            .iter()
            .find(|m| m.object.types.as_ref().unwrap().kind == "Deployment")
            .unwrap();
        let container = &deployment.object.data["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["readinessProbe"]["initialDelaySeconds"], 0);
        assert_eq!(container["readinessProbe"]["periodSeconds"], 1);
        assert_eq!(container["livenessProbe"]["initialDelaySeconds"], 15);
    }

    #[test]
    fn a_detached_pod_carries_the_selectors_labels_with_other_values() {
        assert_eq!(
            serde_json::Value::Object(detached_labels(&Subject::memcached())),
            serde_json::json!({"app.kubernetes.io/name": "memcached-operator-detached"})
        );
    }

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tmemcached-operator\nVmPeak:\t  20000 kB\nVmRSS:\t    9216 kB\n";
        assert_eq!(parse_vm_rss(status), Some(9216));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_has_a_resident_size() {
        assert!(vm_rss_kib(std::process::id()).is_some_and(|k| k > 0));
    }
}
