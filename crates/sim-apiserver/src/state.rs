//! The server's shared state and what happens after a write: CRDs become served types,
//! new namespaces get their default ServiceAccount and root CA ConfigMap, deleted
//! ServiceAccounts lose their tokens, and pod IPs are indexed for audit attribution. A fresh
//! cluster starts with its namespaces, the bootstrap RBAC policy, the system PriorityClasses,
//! the flow-control configuration and the `kubernetes` Service.

use std::net::IpAddr;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use serde_json::{Value, json};

use super::apiservices;
use super::audit::{AuditLog, PodRef};
use super::auth::{self, Tokens};
use super::create;
use super::registry::{self, Registry, ResourceType};
use super::services;
use super::status::{ApiError, GroupResource};
use super::store::{Event, EventType, Store, Write, Written};
use super::system_objects;

/// The `kubernetes.io/description` of every namespace's `kube-root-ca.crt`, as
/// kube-controller-manager's root CA publisher writes it.
pub const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// Settings of one simulated API server.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Cluster name (CA subject, kubeconfig names).
    pub name: String,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// How many events the watch cache keeps (older resourceVersions get 410 Expired).
    pub watch_history: usize,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// Whether a garbage collector runs: decides whether DELETE with the Orphan or
    /// Foreground policy adds the `orphan`/`foregroundDeletion` finalizer (as the real
    /// server does only when garbage collection is enabled).
    pub garbage_collection: bool,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        Self {
            name: "opconform".into(),
            port: 0,
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(60),
            garbage_collection: true,
        }
    }
}

pub use super::podlog::LogSource;

/// Everything the request handlers share.
pub struct State {
    /// Fault rules evaluated on every request, and the cluster's fault log.
    pub faults: Arc<crate::faults::Faults>,
    /// Who carries out pod and node faults (the simulated cluster, once it has kubelets).
    fault_target: RwLock<Option<Arc<dyn crate::faults::FaultTarget>>>,
    /// Where `pods/log` reads from (the kubelets register themselves here).
    pub log_sources: RwLock<Vec<LogSource>>,
    /// Where `pods/exec` runs commands (the kubelets register themselves here).
    pub exec_sources: RwLock<Vec<super::exec::ExecSource>>,
    /// Where `pods/attach` attaches to containers (the kubelets register themselves here).
    pub attach_sources: RwLock<Vec<super::attach::AttachSource>>,
    /// Settings.
    pub config: ApiServerConfig,
    /// Objects and events.
    pub store: Store,
    registry: RwLock<Registry>,
    /// Accepted bearer tokens.
    pub tokens: Tokens,
    /// The audit log.
    pub audit: AuditLog,
    /// The cluster CA (PEM).
    pub ca_pem: String,
    /// The cluster CA with its key, when this server made it: what the controllers' certificate
    /// signers sign with (kube-controller-manager's `--cluster-signing-cert-file`).
    pub signing_ca: Option<crate::tls::SigningCa>,
    /// The admin token.
    pub admin_token: String,
}

/// The ClusterIP of the `kubernetes` Service: the first address of the service range
/// (`10.0.0.0/24`, as the local control plane is configured).
pub const KUBERNETES_SERVICE_IP: &str = "10.0.0.1";

const CRDS: (&str, &str) = ("apiextensions.k8s.io", "customresourcedefinitions");

/// The field manager of what kube-apiserver writes itself.
const APISERVER: &str = "kube-apiserver";
/// The field manager of what kube-controller-manager's controllers write (their clients'
/// user agent, up to the first `/`).
const KCM: &str = "kube-controller-manager";

impl State {
    /// New state with the bootstrap objects of a fresh cluster.
    pub fn new(config: ApiServerConfig, ca_pem: String) -> Self {
        let admin_token = auth::random_token();
        let state = Self {
            faults: Arc::new(crate::faults::Faults::new()),
            fault_target: RwLock::new(None),
            log_sources: RwLock::new(Vec::new()),
            exec_sources: RwLock::new(Vec::new()),
            attach_sources: RwLock::new(Vec::new()),
            store: Store::new(config.watch_history),
            config,
            registry: RwLock::new(Registry::new()),
            tokens: Tokens::new(&admin_token),
            audit: AuditLog::new(),
            ca_pem,
            signing_ca: None,
            admin_token,
        };
        state.bootstrap();
        state
    }

    /// The served types.
    pub fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets who carries out pod and node faults.
    pub fn set_fault_target(&self, target: Arc<dyn crate::faults::FaultTarget>) {
        *self.fault_target.write().unwrap_or_else(|p| p.into_inner()) = Some(target);
    }

    /// Who carries out pod and node faults, if anyone.
    pub fn fault_target(&self) -> Option<Arc<dyn crate::faults::FaultTarget>> {
        self.fault_target
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Registers a way to run commands in containers (a kubelet).
    pub fn add_exec_source(&self, source: super::exec::ExecSource) {
        self.exec_sources
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }

    /// Runs a command in a container through whichever kubelet runs its pod (`None`: none
    /// does).
    pub fn exec(
        &self,
        request: &super::exec::ExecRequest<'_>,
    ) -> Option<Result<super::exec::Started, super::exec::ExecRefusal>> {
        let sources = self
            .exec_sources
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        sources.iter().find_map(|source| source(request))
    }

    /// Registers a way to attach to containers (a kubelet).
    pub fn add_attach_source(&self, source: super::attach::AttachSource) {
        self.attach_sources
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }

    /// Attaches to a container through whichever kubelet runs its pod (`None`: none does).
    pub fn attach(
        &self,
        request: &super::attach::AttachRequest<'_>,
    ) -> Option<Result<super::attach::Attached, super::exec::ExecRefusal>> {
        let sources = self
            .attach_sources
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        sources.iter().find_map(|source| source(request))
    }

    /// Registers a source of container logs (a kubelet).
    pub fn add_log_source(&self, source: LogSource) {
        self.log_sources
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }

    /// Reads a container's log from whichever kubelet runs its pod (`None`: none does).
    pub fn read_log(
        &self,
        request: &super::podlog::LogRequest<'_>,
    ) -> Option<Result<super::podlog::LogStream, super::podlog::LogRefusal>> {
        let sources = self
            .log_sources
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        sources.iter().find_map(|source| source(request))
    }

    /// Whether garbage collection is on (see [`ApiServerConfig::garbage_collection`]).
    pub fn config_gc(&self) -> bool {
        self.config.garbage_collection
    }

    /// Writes an object of `rt` through the store and runs the post-write hooks.
    ///
    /// # Errors
    /// Whatever `decide` returns.
    pub fn write(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        decide: impl FnOnce(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, ApiError> {
        let gr = if rt.group == "events.k8s.io" {
            GroupResource::new("", "events")
        } else {
            rt.gr()
        };
        self.store_write(rt, &gr, namespace, name, decide)
    }

    /// Like [`State::write`] with an explicit storage resource.
    ///
    /// # Errors
    /// Whatever `decide` returns.
    pub fn store_write(
        &self,
        _rt: &ResourceType,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        decide: impl FnOnce(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, ApiError> {
        self.store_write_as(gr, namespace, name, false, decide)
    }

    /// Writes, or with `dry_run` only computes the write (`dryRun=All`: validation,
    /// defaulting and admission run; nothing is stored, no event, no hook).
    ///
    /// # Errors
    /// Whatever `decide` returns.
    pub fn store_write_as(
        &self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        dry_run: bool,
        decide: impl FnOnce(Option<&Value>) -> Result<Write, ApiError>,
    ) -> Result<Written, ApiError> {
        if dry_run {
            return self.store.preview(gr, namespace, name, decide);
        }
        let written = self.store.write(gr, namespace, name, decide)?;
        if let Some(event) = &written.event {
            self.after_write(event);
        }
        Ok(written)
    }

    fn after_write(&self, event: &Event) {
        match (event.gr.group.as_str(), event.gr.resource.as_str()) {
            CRDS => self.crd_changed(event),
            ("", "namespaces") if event.kind == EventType::Added => {
                self.populate_namespace(&event.name);
            }
            ("", "serviceaccounts") if event.kind == EventType::Deleted => {
                self.tokens.revoke(&event.namespace, &event.name);
            }
            ("", "pods") => self.index_pod_ip(event),
            ("", "services") => match (&event.kind, &event.previous) {
                (EventType::Deleted, _) => self.release_service_addresses(&event.object, None),
                (EventType::Modified, Some(previous)) => {
                    self.release_service_addresses(previous, Some(&event.object));
                    self.acquire_service_addresses(previous, &event.object);
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// Writes the `IPAddress` objects of what a Service's allocation took, once the
    /// Service `namespace`/`name` is stored ([`services`]).
    pub(crate) fn commit_service_addresses(
        &self,
        allocated: services::Allocated,
        namespace: &str,
        name: &str,
    ) {
        for address in allocated.addresses(namespace, name) {
            let (group, resource) = services::IPADDRESSES;
            let _ = self.create_internal(APISERVER, group, resource, address);
        }
    }

    /// Writes the `IPAddress` objects of the cluster IPs an update gave the Service `after`
    /// ([`services::acquired`]).
    fn acquire_service_addresses(&self, before: &Value, after: &Value) {
        let namespace = after["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = after["metadata"]["name"].as_str().unwrap_or_default();
        for ip in services::acquired(before, after) {
            let (group, resource) = services::IPADDRESSES;
            let address = system_objects::service_ip_address(&ip, namespace, name);
            let _ = self.create_internal(APISERVER, group, resource, address);
        }
    }

    /// Deletes the `IPAddress` objects of the cluster IPs the Service `before` had and
    /// `after` no longer has ([`services::released`]), those it owns only.
    fn release_service_addresses(&self, before: &Value, after: Option<&Value>) {
        let (group, resource) = services::IPADDRESSES;
        let gr = GroupResource::new(group, resource);
        for ip in services::released(before, after) {
            let _ = self.store_write_as(&gr, "", &ip, false, |current| {
                Ok::<_, ApiError>(match current {
                    Some(address) if services::owns(before, address) => Write::Delete,
                    _ => Write::Keep,
                })
            });
        }
    }

    fn index_pod_ip(&self, event: &Event) {
        let ip_of = |o: &Value| {
            o["status"]["podIP"]
                .as_str()
                .and_then(|s| s.parse::<IpAddr>().ok())
        };
        // A deleted pod keeps its address until another pod is given it: its processes
        // may still be running (a force delete, a partitioned node) and what they send
        // must still be attributed to it.
        if let Some(old_ip) = event.previous.as_ref().and_then(ip_of)
            && event.kind != EventType::Deleted
            && ip_of(&event.object) != Some(old_ip)
        {
            self.audit.set_pod_ip(old_ip, None);
        }
        if event.kind != EventType::Deleted
            && let Some(ip) = ip_of(&event.object)
        {
            self.audit.set_pod_ip(
                ip,
                Some(PodRef {
                    namespace: event.namespace.clone(),
                    name: event.name.clone(),
                    uid: event.object["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                }),
            );
        }
    }

    fn crd_changed(&self, event: &Event) {
        let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
        if event.kind == EventType::Deleted {
            if let Ok(rt) = registry::custom_type(&event.object) {
                registry.unregister(&rt.gr());
            }
            drop(registry);
            self.sync_apiservices();
            return;
        }
        let Ok(rt) = registry::custom_type(&event.object) else {
            return;
        };
        registry.register(rt.clone());
        drop(registry);
        self.sync_apiservices();
        let established = event.object["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        let accepted = &event.object["status"]["acceptedNames"];
        if established && accepted == &event.object["spec"]["names"] {
            return;
        }
        // What the apiextensions controllers do: accept the names, then establish.
        let now = super::objects::now();
        let Some(crd_type) = self
            .registry()
            .get(&GroupResource::new(CRDS.0, CRDS.1))
            .cloned()
        else {
            return;
        };
        let _ = self.write(&crd_type, "", &event.name, |current| {
            let Some(current) = current else {
                return Ok(Write::Keep);
            };
            let mut crd = current.clone();
            let stored: Vec<String> = crd["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["storage"] == json!(true))
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect();
            crd["status"] = json!({
                "acceptedNames": crd["spec"]["names"].clone(),
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
                "storedVersions": stored,
            });
            Ok(Write::Put(crd))
        });
    }

    /// Creates an object on behalf of a control-plane component (no RBAC, no audit);
    /// `manager` is the field manager its client would be (`kube-apiserver` for the
    /// server's own bootstrap objects, `kube-controller-manager` for what its controllers
    /// write).
    ///
    /// # Errors
    /// Validation errors, AlreadyExists.
    pub fn create_internal(
        &self,
        manager: &str,
        group: &str,
        resource: &str,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let rt = self
            .registry()
            .get(&GroupResource::new(group, resource))
            .cloned()
            .ok_or(ApiError::NoSuchResource)?;
        let namespace = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let version = rt.storage_version().to_string();
        let stored = create::prepare_create(
            &rt,
            &version,
            &namespace,
            obj,
            manager,
            &create::service_accounts(&self.store, &rt, &namespace),
        )?;
        let written = self.write(&rt, &namespace, &name, |current| {
            if current.is_some() {
                return Err(ApiError::already_exists(&rt.gr(), &name));
            }
            Ok(Write::Put(stored))
        })?;
        Ok(written.object.unwrap_or(Value::Null))
    }

    /// What kube-controller-manager's serviceaccount and root-ca-cert-publisher
    /// controllers add to a new namespace.
    fn populate_namespace(&self, namespace: &str) {
        let _ = self.create_internal(
            KCM,
            "",
            "serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": namespace}}),
        );
        let _ = self.create_internal(
            KCM,
            "",
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "kube-root-ca.crt", "namespace": namespace,
                                "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                   "data": {"ca.crt": self.ca_pem}}),
        );
    }

    /// Creates the `kubernetes` Service in `default` as kube-apiserver's bootstrap controller
    /// does: ClusterIP `10.0.0.1` (the first address of the service range), port 443 named
    /// `https` forwarding to the port the server listens on. The addresses the IP allocator
    /// fills in (`clusterIPs`, `ipFamilies`) and the empty status belong to no manager; the
    /// allocator's IPAddress for `10.0.0.1` is written with it.
    pub fn create_kubernetes_service(&self, port: u16) {
        let Some(rt) = self
            .registry()
            .get(&GroupResource::new("", "services"))
            .cloned()
        else {
            return;
        };
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": port}],
                     "clusterIP": KUBERNETES_SERVICE_IP, "type": "ClusterIP",
                     "sessionAffinity": "None", "ipFamilyPolicy": "SingleStack",
                     "internalTrafficPolicy": "Cluster"}});
        let Ok(mut stored) = create::prepare_create(
            &rt,
            rt.storage_version(),
            "default",
            service,
            "kube-apiserver",
            &super::objects::ServiceAccounts::default(),
        ) else {
            return;
        };
        stored["spec"]["clusterIPs"] = json!([KUBERNETES_SERVICE_IP]);
        stored["spec"]["ipFamilies"] = json!(["IPv4"]);
        stored["status"] = json!({"loadBalancer": {}});
        let written = self.write(&rt, "default", "kubernetes", |current| match current {
            Some(_) => Err(ApiError::already_exists(&rt.gr(), "kubernetes")),
            None => Ok(Write::Put(stored)),
        });
        if written.is_ok() {
            let address =
                system_objects::service_ip_address(KUBERNETES_SERVICE_IP, "default", "kubernetes");
            let _ = self.create_internal(APISERVER, "networking.k8s.io", "ipaddresses", address);
        }
    }

    /// Creates the APIService of every served group version that lacks one and deletes the
    /// managed ones of group versions no longer served (the autoregister controller).
    fn sync_apiservices(&self) {
        let Some(rt) = self
            .registry()
            .get(&GroupResource::new("apiregistration.k8s.io", "apiservices"))
            .cloned()
        else {
            return;
        };
        let desired = apiservices::desired(&self.registry());
        let names: Vec<&str> = desired
            .iter()
            .filter_map(|a| a["metadata"]["name"].as_str())
            .collect();
        let (existing, _) = self.store.list(&rt.gr(), None);
        for stale in existing.iter().filter(|a| {
            a["metadata"]["labels"][apiservices::AUTOMANAGED].is_string()
                && !names.contains(&a["metadata"]["name"].as_str().unwrap_or_default())
        }) {
            let name = stale["metadata"]["name"].as_str().unwrap_or_default();
            let _ = self.write(&rt, "", name, |_| Ok(Write::Delete));
        }
        for apiservice in desired {
            let name = apiservice["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if self.store.get(&rt.gr(), "", &name).is_some() {
                continue;
            }
            // The core group's `v1.` is no DNS subdomain: it is prepared under its version
            // and stored under its name (apiregistration validates names its own way).
            let mut prepared = apiservice;
            prepared["metadata"]["name"] = json!(name.trim_end_matches('.'));
            let Ok(mut stored) = create::prepare_create(
                &rt,
                "v1",
                "",
                prepared,
                "kube-apiserver",
                &super::objects::ServiceAccounts::default(),
            ) else {
                continue;
            };
            stored["metadata"]["name"] = json!(name);
            stored["status"] = apiservices::local_status(&super::objects::now());
            let _ = self.write(&rt, "", &name, |current| match current {
                Some(_) => Ok(Write::Keep),
                None => Ok(Write::Put(stored)),
            });
        }
    }

    fn bootstrap(&self) {
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let _ = self.create_internal(
                APISERVER,
                "",
                "namespaces",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            );
        }
        for (resource, obj) in auth::bootstrap_policy() {
            let _ = self.create_internal(APISERVER, "rbac.authorization.k8s.io", resource, obj);
        }
        for class in system_objects::priority_classes() {
            let _ = self.create_internal(APISERVER, "scheduling.k8s.io", "priorityclasses", class);
        }
        self.create_flow_control();
        self.create_service_cidr();
        self.sync_apiservices();
    }

    /// The default ServiceCIDR, ready, as the real control plane leaves it.
    fn create_service_cidr(&self) {
        let gr = GroupResource::new("networking.k8s.io", "servicecidrs");
        let Some(rt) = self.registry().get(&gr).cloned() else {
            return;
        };
        let now = super::objects::now();
        let mut cidr = system_objects::service_cidr(&now);
        cidr["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
        cidr["metadata"]["creationTimestamp"] = json!(now);
        let _ = self.write(&rt, "", "kubernetes", |current| match current {
            Some(_) => Ok(Write::Keep),
            None => Ok(Write::Put(cidr)),
        });
    }

    /// The API Priority and Fairness configuration, as its producer writes it, and each
    /// FlowSchema's status, as its consumer applies it.
    fn create_flow_control(&self) {
        const GROUP: &str = "flowcontrol.apiserver.k8s.io";
        for (resource, obj) in system_objects::flow_control() {
            let producer = system_objects::FLOW_CONTROL_PRODUCER;
            let Ok(created) = self.create_internal(producer, GROUP, resource, obj) else {
                continue;
            };
            let Some(rt) = self
                .registry()
                .get(&GroupResource::new(GROUP, resource))
                .cloned()
                .filter(|_| resource == "flowschemas")
            else {
                continue;
            };
            let name = created["metadata"]["name"].as_str().unwrap_or_default();
            let (status, entry) =
                system_objects::flow_schema_status(&created, &super::objects::now());
            let _ = self.write(&rt, "", name, |current| {
                let Some(current) = current else {
                    return Ok(Write::Keep);
                };
                let mut applied = current.clone();
                applied["status"] = status;
                let mut entries = vec![entry];
                entries.extend(
                    current["metadata"]["managedFields"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                );
                applied["metadata"]["managedFields"] = Value::Array(entries);
                Ok(Write::Put(applied))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_namespace_s_root_ca_configmap_is_written_by_kube_controller_manager() {
        let state = State::new(ApiServerConfig::default(), "ca".into());
        let cm = state
            .store
            .get(
                &GroupResource::new("", "configmaps"),
                "default",
                "kube-root-ca.crt",
            )
            .unwrap();
        assert_eq!(
            cm["metadata"]["managedFields"][0]["manager"],
            "kube-controller-manager"
        );
    }
}
