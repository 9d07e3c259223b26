//! The simulated kube-controller-manager and kube-scheduler: garbage collector, deployment
//! and replica set controllers, Job, CronJob and TTL-after-finished controllers, namespace
//! controller, node lifecycle with taint eviction, pod garbage collector, volume protection,
//! resource quota and a scheduler.
//!
//! They are ordinary API clients, exactly like the real components: they reach the server
//! only through kube clients (as `system:kube-controller-manager` and
//! `system:kube-scheduler`, each controller with its own User-Agent), keep watch-fed caches
//! (shared informers), and work from rate-limited work queues. The audit therefore shows
//! every write under the identity of the component that made it.
//!
//! - [`garbage_collector`]: ownerReferences across every served type; background,
//!   foreground and orphan propagation; dangling owners.
//! - [`deployment`] and [`replicaset`]: ReplicaSets per pod-template hash, pods per
//!   ReplicaSet, RollingUpdate and Recreate, status and conditions kubectl relies on.
//! - [`job`]: pods for `parallelism` and `completions` (NonIndexed and Indexed), counted
//!   through the job-tracking finalizer; back-off, deadline, pod failure policy, suspend;
//!   the conditions and Events of 1.34. [`ttl_after_finished`] deletes finished Jobs
//!   after `ttlSecondsAfterFinished`; [`cronjob`] creates a CronJob's Jobs on its schedule
//!   ([`ControllerConfig::cronjob_clock`]).
//! - [`statefulset`]: pods `<set>-<ordinal>` in order (`OrderedReady`) or all at once
//!   (`Parallel`), ControllerRevisions, rolling updates with a partition, `OnDelete`, claims
//!   from volume claim templates and their retention policy; status and Events as 1.34's.
//! - [`daemonset`]: a pod per node the template fits, pinned to it by node affinity;
//!   ControllerRevisions, `RollingUpdate` with `maxUnavailable` or `maxSurge`, `OnDelete`;
//!   failed pods replaced with a back-off; the status kubectl reads.
//! - [`disruption`]: the status of PodDisruptionBudgets (healthy, desired and expected
//!   pods, disruptions allowed, the `DisruptionAllowed` condition).
//! - [`endpointslice`] and [`endpoints`]: the EndpointSlices and the Endpoints of every
//!   Service with a selector.
//! - [`namespace`]: deleting a namespace deletes its content, then finalizes it.
//! - [`node_lifecycle`] and [`taint_eviction`]: heartbeats, Ready=Unknown after the grace
//!   period, unreachable/not-ready taints, NoExecute eviction after `tolerationSeconds`.
//! - [`podgc`]: force-deletes pods bound to nodes that no longer exist.
//! - [`persistent_volume`]: binds PersistentVolumeClaims to PersistentVolumes as the
//!   PersistentVolume controller does, and provisions the claims of kind's local-path
//!   provisioner as directories on the chosen node ([`ControllerConfig::local_volumes`]).
//! - [`volume_protection`]: removes the protection finalizers of PersistentVolumeClaims,
//!   PersistentVolumes and VolumeAttributesClasses being deleted once nothing uses them.
//! - [`csrsigning`]: signs approved CertificateSigningRequests of the `kubernetes.io`
//!   signers with the cluster CA ([`ControllerConfig::cluster_signing`]).
//! - [`resource_quota`]: the `status.hard` and `status.used` of ResourceQuotas, recounted
//!   when a quota's limits change and when an object that used it goes.
//! - [`scheduler`]: binds pending pods to Ready nodes through `pods/binding`.
//! - [`namespace_defaults`]: the `default` ServiceAccount and `kube-root-ca.crt` of every
//!   namespace, for a real API server ([`ControllerConfig::namespace_defaults`]).
//!
//! [`Controllers::start_against`] runs them against any API server ([`ApiAccess`]): the
//! simulated one, or a real kube-apiserver where no kube-controller-manager is at hand
//! (setup-envtest's assets).
//!
//! # Caveats
//! - No leader election, no metrics; only the Job, StatefulSet, DaemonSet, EndpointSlice
//!   and disruption controllers write Events.
//! - Only what the conformance features touch: no quota, preemption or resource fitting.

pub mod cronjob;
pub mod csrsigning;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
mod dynamic;
pub mod endpoints;
pub mod endpointslice;
mod events;
mod expectations;
pub mod garbage_collector;
mod history;
pub mod in_process;
mod informer;
pub mod job;
pub mod namespace;
pub mod namespace_defaults;
pub mod node_lifecycle;
pub mod persistent_volume;
pub mod podgc;
mod queue;
pub mod replicaset;
pub mod resource_quota;
pub mod scheduler;
pub mod statefulset;
mod support;
pub mod taint_eviction;
pub mod ttl_after_finished;
pub mod volume_protection;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::watcher;

use self::informer::{AbortOnDrop, Cache};

/// The version the simulated components claim in their User-Agent.
const VERSION: &str = "v1.32.13";

/// Errors starting the controllers.
#[derive(Debug, thiserror::Error)]
pub enum ControllersError {
    /// The certificate signers' CA could not be loaded.
    #[error("cannot start the certificate signers")]
    Signing(#[source] csrsigning::Error),
    /// The kubeconfig of a component could not be turned into a client.
    #[error("cannot build a client for {component}")]
    Client {
        /// The component (controller or scheduler).
        component: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Periods and thresholds of the controllers. [`Default`] gives the values of a real
/// Kubernetes 1.32 cluster; [`ControllerConfig::fast`] gives periods short enough for
/// scenarios that observe node failures in seconds.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Delay before the garbage collector acts on anything it noticed, so scenarios can
    /// observe the window between an owner's deletion and its dependents'. Real: none (0).
    pub gc_delay: Duration,
    /// How often the garbage collector and the namespace controller re-run discovery to
    /// find new resource types (they also do at once when a CRD changes). Real: 30 s
    /// (`kube-controller-manager`'s `garbageCollector.Sync` period).
    pub gc_discovery_period: Duration,
    /// How often the node lifecycle controller checks every node
    /// (`--node-monitor-period`). Real: 5 s.
    pub node_monitor_period: Duration,
    /// How long a node may go without a heartbeat before it is marked Unknown
    /// (`--node-monitor-grace-period`). Real: 50 s in 1.32.
    pub node_monitor_grace_period: Duration,
    /// How long a node that never posted a Ready condition is given
    /// (`--node-startup-grace-period`). Real: 60 s.
    pub node_startup_grace_period: Duration,
    /// How long a pod bound to a missing node waits before the pod garbage collector
    /// force-deletes it (`quarantineTime`). Real: 40 s.
    pub podgc_quarantine: Duration,
    /// Number of terminated (Succeeded/Failed) pods kept before the oldest are deleted
    /// (`--terminated-pod-gc-threshold`). Real: 12500.
    pub terminated_pod_gc_threshold: usize,
    /// How long a pod the scheduler could not place waits before it is tried again even
    /// if no node changed (`podMaxInUnschedulablePodsDuration`). Real: 5 min.
    pub unschedulable_retry: Duration,
    /// Whether the scheduler runs too (not where a real kube-scheduler does).
    pub scheduler: bool,
    /// When set, the service-account controller (a `default` ServiceAccount in every
    /// namespace) and the root CA publisher (`kube-root-ca.crt` holding this PEM bundle in
    /// every namespace) run too. The simulated API server does both itself; a real one
    /// leaves them to kube-controller-manager.
    pub namespace_defaults: Option<String>,
    /// The CA the certificate signers sign with (`--cluster-signing-cert-file` and
    /// `--cluster-signing-key-file`); without one, approved CertificateSigningRequests stay
    /// unsigned, as with a kube-controller-manager given none.
    pub cluster_signing: Option<sim_apiserver::tls::SigningCa>,
    /// The longest certificate the signers issue (`--cluster-signing-duration`). Real: one
    /// year.
    pub cluster_signing_duration: Duration,
    /// How long the Job controller waits before replacing a failed pod; the wait doubles
    /// with each further failure since the last success. Real: 10 s
    /// (`DefaultJobPodFailureBackOff`).
    pub job_pod_failure_backoff: Duration,
    /// The longest such wait. Real: 6 min (`MaxJobPodFailureBackOff`).
    pub job_max_pod_failure_backoff: Duration,
    /// The time the CronJob controller schedules by: the real time unless a test moves it
    /// forward.
    pub cronjob_clock: cronjob::Clock,
    /// Where the simulated local-path provisioner (`rancher.io/local-path`) keeps the
    /// volumes it provisions, one directory per node; without one it does not run, and the
    /// claims of its classes stay Pending as on a cluster without it.
    pub local_volumes: Option<PathBuf>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            gc_delay: Duration::ZERO,
            gc_discovery_period: Duration::from_secs(30),
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(50),
            node_startup_grace_period: Duration::from_secs(60),
            podgc_quarantine: Duration::from_secs(40),
            terminated_pod_gc_threshold: 12_500,
            unschedulable_retry: Duration::from_secs(300),
            scheduler: true,
            namespace_defaults: None,
            cluster_signing: None,
            cluster_signing_duration: Duration::from_secs(8760 * 3600),
            job_pod_failure_backoff: Duration::from_secs(10),
            job_max_pod_failure_backoff: Duration::from_secs(360),
            cronjob_clock: cronjob::Clock::default(),
            local_volumes: None,
        }
    }
}

impl ControllerConfig {
    /// Short periods for scenarios: the node monitor runs every 250 ms, a node is
    /// Unknown after 3 s without heartbeats, pods on missing nodes go after 2 s.
    pub fn fast() -> Self {
        Self {
            node_monitor_period: Duration::from_millis(250),
            node_monitor_grace_period: Duration::from_secs(3),
            node_startup_grace_period: Duration::from_secs(5),
            podgc_quarantine: Duration::from_secs(2),
            unschedulable_retry: Duration::from_secs(30),
            ..Self::default()
        }
    }
}

/// The running controllers and scheduler. Dropping it stops every loop.
pub struct Controllers {
    tasks: Vec<AbortOnDrop>,
}

impl std::fmt::Debug for Controllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controllers")
            .field("tasks", &self.tasks.len())
            .finish()
    }
}

/// How the controllers reach an API server and as whom they act: the simulated one, or
/// any other, such as a real kube-apiserver that has no kube-controller-manager beside it.
#[derive(Clone)]
pub struct ApiAccess {
    /// The server's URL.
    pub url: String,
    /// The CA bundle (PEM) its serving certificate chains to.
    pub ca_pem: String,
    /// The bearer token of `system:kube-controller-manager`, with the rights of every
    /// controller (the real manager's per-controller ServiceAccounts together).
    pub controller_manager_token: String,
    /// The bearer token of `system:kube-scheduler`.
    pub scheduler_token: String,
}

impl std::fmt::Debug for ApiAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiAccess")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The user kube-controller-manager acts as.
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";
/// The user kube-scheduler acts as.
pub const SCHEDULER_USER: &str = "system:kube-scheduler";

/// A kube client for `access` as `user` (with `token`) with its own User-Agent.
async fn client(
    access: &ApiAccess,
    user: &str,
    token: &str,
    agent: &str,
) -> Result<kube::Client, ControllersError> {
    let fail = |source: Box<dyn std::error::Error + Send + Sync>| ControllersError::Client {
        component: agent.to_string(),
        source,
    };
    let yaml = sim_apiserver::kubeconfig("opconform", &access.url, &access.ca_pem, user, token);
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).map_err(|e| fail(Box::new(e)))?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| fail(Box::new(e)))?;
    let value = http::header::HeaderValue::from_str(agent).map_err(|e| fail(Box::new(e)))?;
    config.headers.push((http::header::USER_AGENT, value));
    kube::Client::try_from(config).map_err(|e| fail(Box::new(e)))
}

/// The User-Agent of one kube-controller-manager controller (what the real one sends
/// with `--use-service-account-credentials`: the binary, then the controller).
fn kcm_agent(controller: &str) -> String {
    format!("kube-controller-manager/{VERSION} (linux/amd64) kubernetes/opconform/{controller}")
}

async fn kcm(access: &ApiAccess, controller: &str) -> Result<kube::Client, ControllersError> {
    client(
        access,
        CONTROLLER_MANAGER_USER,
        &access.controller_manager_token,
        &kcm_agent(controller),
    )
    .await
}

/// The shared informers of the controller manager (one watch per type, as client-go's
/// SharedInformerFactory).
#[derive(Clone)]
struct Informers {
    pods: Cache<Pod>,
    replicasets: Cache<ReplicaSet>,
    deployments: Cache<Deployment>,
    jobs: Cache<Job>,
    cronjobs: Cache<CronJob>,
    nodes: Cache<Node>,
    node_leases: Cache<Lease>,
    claims: Cache<PersistentVolumeClaim>,
    volumes: Cache<PersistentVolume>,
    storage_classes: Cache<StorageClass>,
    volume_attributes_classes: Cache<DynamicObject>,
    budgets: Cache<PodDisruptionBudget>,
    statefulsets: Cache<StatefulSet>,
    daemonsets: Cache<DaemonSet>,
    replication_controllers: Cache<ReplicationController>,
    controller_revisions: Cache<ControllerRevision>,
}

impl Controllers {
    /// Starts every controller (and the scheduler, unless `config` leaves it out) against
    /// any API server.
    ///
    /// # Errors
    /// When a client cannot be built. Nothing else fails start-up: discovery and watches
    /// that fail are retried in the background.
    pub async fn start_against(
        access: ApiAccess,
        config: ControllerConfig,
    ) -> Result<Controllers, ControllersError> {
        let server = &access;
        let mut tasks = Vec::new();
        let shared = kcm(server, "shared-informers").await?;
        let informers = Informers {
            pods: Cache::new(),
            replicasets: Cache::new(),
            deployments: Cache::new(),
            jobs: Cache::new(),
            cronjobs: Cache::new(),
            nodes: Cache::new(),
            node_leases: Cache::new(),
            claims: Cache::new(),
            volumes: Cache::new(),
            storage_classes: Cache::new(),
            volume_attributes_classes: Cache::new(),
            budgets: Cache::new(),
            statefulsets: Cache::new(),
            daemonsets: Cache::new(),
            replication_controllers: Cache::new(),
            controller_revisions: Cache::new(),
        };

        let hub = dynamic::Hub::new(
            kcm(server, "resource-discovery").await?,
            config.gc_discovery_period,
        );
        tasks.push(garbage_collector::start(
            &hub,
            kcm(server, "generic-garbage-collector").await?,
            config.gc_delay,
        ));
        tasks.push(namespace::start(
            &hub,
            kcm(server, "namespace-controller").await?,
        ));
        tasks.push(resource_quota::start(
            &hub,
            kcm(server, "resourcequota-controller").await?,
        ));
        tasks.push(hub.start());

        tasks.push(replicaset::start(
            kcm(server, "replicaset-controller").await?,
            &informers.replicasets,
            &informers.pods,
        ));
        tasks.push(deployment::start(
            kcm(server, "deployment-controller").await?,
            &informers.deployments,
            &informers.replicasets,
            &informers.pods,
        ));
        tasks.push(job::start(
            kcm(server, "job-controller").await?,
            &informers.jobs,
            &informers.pods,
            job::Settings {
                pod_failure_backoff: config.job_pod_failure_backoff,
                max_pod_failure_backoff: config.job_max_pod_failure_backoff,
            },
        ));
        tasks.push(statefulset::start(
            kcm(server, "statefulset-controller").await?,
            &informers.statefulsets,
            &informers.pods,
            &informers.claims,
            &informers.controller_revisions,
        ));
        tasks.push(daemonset::start(
            kcm(server, "daemon-set-controller").await?,
            &informers.daemonsets,
            &informers.pods,
            &informers.nodes,
            &informers.controller_revisions,
        ));
        tasks.push(ttl_after_finished::start(
            kcm(server, "ttl-after-finished-controller").await?,
            &informers.jobs,
        ));
        tasks.push(cronjob::start(
            kcm(server, "cronjob-controller").await?,
            &informers.cronjobs,
            &informers.jobs,
            config.cronjob_clock.clone(),
        ));
        tasks.push(node_lifecycle::start(
            kcm(server, "node-lifecycle-controller").await?,
            &informers.nodes,
            &informers.node_leases,
            &informers.pods,
            node_lifecycle::Periods {
                monitor: config.node_monitor_period,
                grace: config.node_monitor_grace_period,
                startup_grace: config.node_startup_grace_period,
            },
        ));
        tasks.push(taint_eviction::start(
            kcm(server, "taint-eviction-controller").await?,
            &informers.nodes,
            &informers.pods,
        ));
        tasks.push(podgc::start(
            kcm(server, "pod-garbage-collector").await?,
            &informers.nodes,
            &informers.pods,
            podgc::Settings {
                quarantine: config.podgc_quarantine,
                terminated_threshold: config.terminated_pod_gc_threshold,
            },
        ));

        tasks.push(volume_protection::start_claim_protection(
            kcm(server, "pvc-protection-controller").await?,
            &informers.claims,
            &informers.pods,
        ));
        tasks.push(volume_protection::start_volume_protection(
            kcm(server, "pv-protection-controller").await?,
            &informers.volumes,
        ));
        tasks.push(volume_protection::start_class_protection(
            kcm(server, "volumeattributesclass-protection-controller").await?,
            &informers.volume_attributes_classes,
            &informers.claims,
            &informers.volumes,
        ));
        let volume_listers = persistent_volume::Listers {
            claims: informers.claims.clone(),
            volumes: informers.volumes.clone(),
            classes: informers.storage_classes.clone(),
            pods: informers.pods.clone(),
            nodes: informers.nodes.clone(),
        };
        tasks.push(persistent_volume::start_binder(
            kcm(server, "persistentvolume-binder-controller").await?,
            &volume_listers,
        ));
        if let Some(root) = &config.local_volumes {
            tasks.push(persistent_volume::start_provisioner(
                client(
                    server,
                    CONTROLLER_MANAGER_USER,
                    &server.controller_manager_token,
                    "local-path-provisioner/v0.0.31",
                )
                .await?,
                &volume_listers,
                root.clone(),
            ));
        }
        tasks.push(disruption::start(
            kcm(server, "disruption-controller").await?,
            disruption::Listers {
                budgets: informers.budgets.clone(),
                pods: informers.pods.clone(),
                replication_controllers: informers.replication_controllers.clone(),
                replicasets: informers.replicasets.clone(),
                deployments: informers.deployments.clone(),
                statefulsets: informers.statefulsets.clone(),
            },
        ));
        let slice_listers = endpointslice::Listers {
            services: Cache::new(),
            pods: informers.pods.clone(),
            nodes: informers.nodes.clone(),
            slices: Cache::new(),
        };
        tasks.push(informer::spawn(
            Api::all(shared.clone()),
            watcher::Config::default(),
            slice_listers.services.clone(),
        ));
        tasks.push(informer::spawn(
            Api::all(shared.clone()),
            watcher::Config::default(),
            slice_listers.slices.clone(),
        ));
        let endpoints_listers = endpoints::Listers {
            services: slice_listers.services.clone(),
            pods: informers.pods.clone(),
            endpoints: Cache::new(),
        };
        tasks.push(informer::spawn(
            Api::all(shared.clone()),
            watcher::Config::default(),
            endpoints_listers.endpoints.clone(),
        ));
        tasks.push(endpointslice::start(
            kcm(server, "endpointslice-controller").await?,
            slice_listers,
        ));
        tasks.push(endpoints::start(
            kcm(server, "endpoint-controller").await?,
            endpoints_listers,
        ));

        let informer_config = watcher::Config::default();
        tasks.push(informer::spawn(
            Api::<Pod>::all(shared.clone()),
            informer_config.clone(),
            informers.pods.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<ReplicaSet>::all(shared.clone()),
            informer_config.clone(),
            informers.replicasets.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<Deployment>::all(shared.clone()),
            informer_config.clone(),
            informers.deployments.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<Job>::all(shared.clone()),
            informer_config.clone(),
            informers.jobs.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<CronJob>::all(shared.clone()),
            informer_config.clone(),
            informers.cronjobs.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<Node>::all(shared.clone()),
            informer_config.clone(),
            informers.nodes.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<PersistentVolumeClaim>::all(shared.clone()),
            informer_config.clone(),
            informers.claims.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<PersistentVolume>::all(shared.clone()),
            informer_config.clone(),
            informers.volumes.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<StorageClass>::all(shared.clone()),
            informer_config.clone(),
            informers.storage_classes.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<DynamicObject>::all_with(shared.clone(), &volume_protection::class_resource()),
            informer_config.clone(),
            informers.volume_attributes_classes.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<PodDisruptionBudget>::all(shared.clone()),
            informer_config.clone(),
            informers.budgets.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<StatefulSet>::all(shared.clone()),
            informer_config.clone(),
            informers.statefulsets.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<DaemonSet>::all(shared.clone()),
            informer_config.clone(),
            informers.daemonsets.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<ReplicationController>::all(shared.clone()),
            informer_config.clone(),
            informers.replication_controllers.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<ControllerRevision>::all(shared.clone()),
            informer_config.clone(),
            informers.controller_revisions.clone(),
        ));
        tasks.push(informer::spawn(
            Api::<Lease>::namespaced(shared, "kube-node-lease"),
            informer_config,
            informers.node_leases.clone(),
        ));

        if let Some(ca) = &config.cluster_signing {
            tasks.push(
                csrsigning::start(
                    kcm(server, "certificate-controller").await?,
                    ca,
                    config.cluster_signing_duration,
                )
                .map_err(ControllersError::Signing)?,
            );
        }

        if let Some(bundle) = &config.namespace_defaults {
            let namespaces = Cache::new();
            tasks.push(namespace_defaults::start_service_accounts(
                kcm(server, "serviceaccount-controller").await?,
                &namespaces,
            ));
            tasks.push(namespace_defaults::start_root_ca_publisher(
                kcm(server, "root-ca-cert-publisher").await?,
                &namespaces,
                bundle.clone(),
            ));
            tasks.push(informer::spawn(
                Api::all(kcm(server, "shared-informers").await?),
                watcher::Config::default(),
                namespaces,
            ));
        }

        if config.scheduler {
            let scheduler_agent =
                format!("kube-scheduler/{VERSION} (linux/amd64) kubernetes/opconform/scheduler");
            let scheduler_client = client(
                server,
                SCHEDULER_USER,
                &server.scheduler_token,
                &scheduler_agent,
            )
            .await?;
            tasks.extend(scheduler::start(
                scheduler_client,
                config.unschedulable_retry,
            ));
        }

        Ok(Controllers { tasks })
    }

    /// Stops every loop and waits until they are gone.
    pub async fn shutdown(mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            task.join().await;
        }
    }
}
