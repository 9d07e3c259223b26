//! The EndpointSlice controller: for every Service with a selector (and not of type
//! ExternalName), the EndpointSlices listing the selected pods as kube-controller-manager
//! writes them (`pkg/controller/endpointslice` and `k8s.io/endpointslice`'s reconciler).
//!
//! A pod is an endpoint once it has an IP and while it is not Succeeded or Failed: its
//! addresses are the pod's IPs of the slice's address type, its conditions `ready`
//! (Ready and not terminating, or always under `publishNotReadyAddresses`), `serving`
//! (Ready) and `terminating` (being deleted), with `nodeName`, the node's
//! `topology.kubernetes.io/zone` as `zone`, a `targetRef` to the pod and the pod's
//! `hostname` when its `subdomain` names the Service. A pod whose node is unknown is left
//! out (and the sync reported failed, so retried) unless the Service publishes not-ready
//! addresses. Each set of ports (the Service's `targetPort`s resolved against the pod's
//! container ports, by number or by name) has its own slices of at most 100 endpoints,
//! named `<service>-<random>`, labelled with the Service's labels, `kubernetes.io/service-name`,
//! `endpointslice.kubernetes.io/managed-by` and (for a headless Service)
//! `service.kubernetes.io/headless`, owned by the Service, with the
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation set as upstream's trigger
//! time tracker sets it. A Service with no endpoints keeps one empty placeholder slice.
//!
//! The controller remembers the generation of each slice it wrote, so that a cache that
//! has not caught up with its own writes fails the sync (retried) instead of creating
//! slices twice, and so that only changes made by others bring a Service back (after a
//! second, as upstream's `endpointSliceChangeMinSyncDelay`).
//!
//! # Caveats
//! - Topology hints and `trafficDistribution` are not computed.
//! - New endpoints are added in the order of their key, where upstream takes them out of
//!   a Go map (in no defined order); the ports of a multi-port Service are kept in the
//!   Service's order, where upstream sorts them by a hash of their Go dump.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};

use super::events::{EventType, Recorder};
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{controller_ref, is_deleting, is_not_found, is_ready, is_terminal};

/// The value of `endpointslice.kubernetes.io/managed-by` on the slices this controller owns.
pub(crate) const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// The label naming a slice's Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming a slice's manager.
pub(crate) const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The label of the slices (and Endpoints) of a headless Service.
pub(crate) const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The annotation carrying the time of the last change behind a write.
pub(crate) const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// The node label naming its zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Most endpoints in one slice (`--max-endpoints-per-slice`'s default).
const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// How long a change of a slice by someone else waits before its Service is synced
/// (`endpointSliceChangeMinSyncDelay`).
const SLICE_CHANGE_DELAY: Duration = Duration::from_secs(1);

/// Errors of one Service's sync (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// The slice cache has not caught up with the controller's own writes.
    #[error("endpointslice informer cache is out of date")]
    StaleCache,
    /// Pods on nodes the controller does not know were left out.
    #[error("{}", skipped_message(.0))]
    NodesNotFound(Vec<String>),
}

/// The text of upstream's aggregate of skipped pods: one error alone, several in brackets.
fn skipped_message(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The listers the controller reads.
#[derive(Clone)]
pub(crate) struct Listers {
    pub(crate) services: Cache<Service>,
    pub(crate) pods: Cache<Pod>,
    pub(crate) nodes: Cache<Node>,
    pub(crate) slices: Cache<EndpointSlice>,
}

/// What the trigger time tracker remembers of one Service.
#[derive(Default, Clone)]
pub(crate) struct TriggerState {
    service: Option<Timestamp>,
    pods: HashMap<String, Timestamp>,
}

/// Upstream's `TriggerTimeTracker`: the earliest change (a pod's Ready transition, the
/// Service's creation) not yet published; the Service's creation on its first sync.
#[derive(Default)]
pub(crate) struct TriggerTimes {
    states: Mutex<HashMap<ObjectKey, TriggerState>>,
}

impl TriggerTimes {
    pub(crate) fn compute(&self, service: &Service, pods: &[Arc<Pod>]) -> Option<Timestamp> {
        let key = ObjectKey::of(service);
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let known = states.contains_key(&key);
        let state = states.entry(key).or_default();
        let mut earliest: Option<Timestamp> = None;
        let mut pod_times = HashMap::new();
        for pod in pods {
            let Some(at) = ready_transition(pod) else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if state.pods.get(&name).is_none_or(|last| at > *last) {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
            pod_times.insert(name, at);
        }
        let created = service.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(created) = created
            && state.service.is_none_or(|last| created > last)
        {
            earliest = Some(earliest.map_or(created, |e| e.min(created)));
        }
        state.pods = pod_times;
        state.service = created;
        if known { earliest } else { created }
    }

    pub(crate) fn forget(&self, key: &ObjectKey) {
        self.states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// The last transition of a pod's Ready condition, if it has one.
fn ready_transition(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// A generation that means "deleted, awaiting the watch" (`deletionExpected`).
const DELETION_EXPECTED: i64 = -1;

/// Upstream's `EndpointSliceTracker`: the generation of every slice the controller wrote,
/// by Service and slice uid.
#[derive(Default)]
struct Tracker {
    generations: Mutex<HashMap<ObjectKey, HashMap<String, i64>>>,
}

fn service_of(slice: &EndpointSlice) -> ObjectKey {
    ObjectKey::new(
        slice.metadata.namespace.as_deref().unwrap_or_default(),
        label(&slice.metadata, SERVICE_NAME_LABEL).unwrap_or_default(),
    )
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn uid(meta: &ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_default()
}

impl Tracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, HashMap<String, i64>>> {
        self.generations.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn has(&self, slice: &EndpointSlice) -> bool {
        self.lock()
            .get(&service_of(slice))
            .is_some_and(|g| g.contains_key(&uid(&slice.metadata)))
    }

    /// Whether a change of the slice was made by someone else (or is newer than ours).
    fn should_sync(&self, slice: &EndpointSlice) -> bool {
        let generations = self.lock();
        let Some(by_uid) = generations.get(&service_of(slice)) else {
            return true;
        };
        by_uid
            .get(&uid(&slice.metadata))
            .is_none_or(|g| slice.metadata.generation.unwrap_or_default() > *g)
    }

    /// Whether the cached slices lag behind what the controller wrote.
    fn stale(&self, service: &ObjectKey, slices: &[Arc<EndpointSlice>]) -> bool {
        let generations = self.lock();
        let Some(by_uid) = generations.get(service) else {
            return false;
        };
        let mut provided = BTreeSet::new();
        for slice in slices {
            let id = uid(&slice.metadata);
            if let Some(g) = by_uid.get(&id)
                && (*g == DELETION_EXPECTED || *g > slice.metadata.generation.unwrap_or_default())
            {
                return true;
            }
            provided.insert(id);
        }
        by_uid
            .iter()
            .any(|(id, g)| *g != DELETION_EXPECTED && !provided.contains(id))
    }

    fn update(&self, slice: &EndpointSlice) {
        self.lock().entry(service_of(slice)).or_default().insert(
            uid(&slice.metadata),
            slice.metadata.generation.unwrap_or_default(),
        );
    }

    fn expect_deletion(&self, slice: &EndpointSlice) {
        self.lock()
            .entry(service_of(slice))
            .or_default()
            .insert(uid(&slice.metadata), DELETION_EXPECTED);
    }

    /// Forgets a deleted slice; whether its deletion was the controller's own.
    fn handle_deletion(&self, slice: &EndpointSlice) -> bool {
        let mut generations = self.lock();
        let Some(by_uid) = generations.get_mut(&service_of(slice)) else {
            return true;
        };
        match by_uid.remove(&uid(&slice.metadata)) {
            Some(g) => g == DELETION_EXPECTED,
            None => true,
        }
    }

    fn forget(&self, service: &ObjectKey) {
        self.lock().remove(service);
    }
}

struct Controller {
    client: Client,
    listers: Listers,
    queue: Queue<ObjectKey>,
    triggers: TriggerTimes,
    tracker: Tracker,
    recorder: Recorder,
}

/// Subscribes the controller to the caches and starts its worker.
pub(crate) fn start(client: Client, listers: Listers) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        recorder: Recorder::new(client.clone(), "endpointslice-controller"),
        client,
        listers: listers.clone(),
        queue: Queue::new(),
        triggers: TriggerTimes::default(),
        tracker: Tracker::default(),
    });
    let c = controller.clone();
    listers.services.subscribe(move |change| {
        c.queue.add(ObjectKey::of(change.object().as_ref()));
    });
    let c = controller.clone();
    listers.pods.subscribe(move |change| c.pod_changed(change));
    let c = controller.clone();
    listers
        .slices
        .subscribe(move |change| c.slice_changed(change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

fn labels_of(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// The Service's selector, if it has one (an empty one is none, as it is once stored).
fn selector(service: &Service) -> Option<&BTreeMap<String, String>> {
    service
        .spec
        .as_ref()?
        .selector
        .as_ref()
        .filter(|s| !s.is_empty())
}

/// Whether a Service's selector picks these labels (`labels.Set(selector).AsSelector()`).
pub(crate) fn picks(service: &Service, labels: &BTreeMap<String, String>) -> bool {
    selector(service).is_some_and(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// The Services of the pod's namespace that select it (`GetPodServiceMemberships`).
pub(crate) fn services_of(services: &Cache<Service>, pod: &Pod) -> BTreeSet<ObjectKey> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let labels = labels_of(&pod.metadata);
    services
        .list_in(namespace)
        .iter()
        .filter(|s| picks(s, &labels))
        .map(|s| ObjectKey::of(s.as_ref()))
        .collect()
}

fn pod_ips(pod: &Pod) -> Vec<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ips.as_ref())
        .map(|ips| ips.iter().map(|ip| ip.ip.clone()).collect())
        .unwrap_or_default()
}

fn hostname_and_subdomain(pod: &Pod) -> (Option<&String>, Option<&String>) {
    let spec = pod.spec.as_ref();
    (
        spec.and_then(|s| s.hostname.as_ref()),
        spec.and_then(|s| s.subdomain.as_ref()),
    )
}

/// `podEndpointsChanged`: whether the change matters to endpoints, and whether it changed
/// the pod's labels (or hostname and subdomain).
pub(crate) fn endpoints_changed(old: &Pod, new: &Pod) -> (bool, bool) {
    let labels_changed = old.metadata.labels != new.metadata.labels
        || hostname_and_subdomain(old) != hostname_and_subdomain(new);
    let changed = old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || is_ready(old) != is_ready(new)
        || pod_ips(old) != pod_ips(new);
    (changed, labels_changed)
}

/// `GetServicesToUpdateOnPodChange`.
pub(crate) fn services_to_update(
    services: &Cache<Service>,
    old: &Pod,
    new: &Pod,
) -> BTreeSet<ObjectKey> {
    if old.metadata.resource_version == new.metadata.resource_version {
        return BTreeSet::new();
    }
    let (changed, labels_changed) = endpoints_changed(old, new);
    if !changed && !labels_changed {
        return BTreeSet::new();
    }
    let current = services_of(services, new);
    if !labels_changed {
        return current;
    }
    let previous = services_of(services, old);
    if changed {
        current.union(&previous).cloned().collect()
    } else {
        current.symmetric_difference(&previous).cloned().collect()
    }
}

/// `ShouldPodBeInEndpoints`: a pod with an IP that has not ended (terminating ones too
/// when `include_terminating`).
pub(crate) fn should_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    if is_terminal(pod) {
        return false;
    }
    let status = pod.status.as_ref();
    let has_ip = status
        .and_then(|s| s.pod_ip.as_ref())
        .is_some_and(|ip| !ip.is_empty())
        || status
            .and_then(|s| s.pod_ips.as_ref())
            .is_some_and(|ips| !ips.is_empty());
    has_ip && (include_terminating || !is_deleting(&pod.metadata))
}

/// `ShouldSetHostname`.
pub(crate) fn should_set_hostname(pod: &Pod, service: &Service) -> bool {
    let (hostname, subdomain) = hostname_and_subdomain(pod);
    hostname.is_some_and(|h| !h.is_empty())
        && subdomain == service.metadata.name.as_ref()
        && pod.metadata.namespace == service.metadata.namespace
}

/// `FindPort`: the container port a Service port targets on this pod — a number as it
/// is, a name looked up among the containers' ports (and restartable init containers')
/// of the same protocol.
pub(crate) fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match port.target_port.as_ref() {
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let spec = pod.spec.as_ref()?;
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            spec.containers
                .iter()
                .chain(sidecars)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
        // The server defaults targetPort to the port.
        None => Some(port.port),
    }
}

fn is_headless(service: &Service) -> bool {
    let cluster_ip = service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref());
    matches!(cluster_ip, None | Some("" | "None"))
}

/// `getEndpointPorts`.
fn endpoint_ports(service: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let spec = service.spec.clone().unwrap_or_default();
    let ports = spec.ports.unwrap_or_default();
    if ports.is_empty() && spec.cluster_ip.as_deref() == Some("None") {
        return Vec::new();
    }
    ports
        .iter()
        .filter_map(|port| {
            let number = find_port(pod, port)?;
            Some(EndpointPort {
                name: Some(port.name.clone().unwrap_or_default()),
                port: Some(number),
                protocol: Some(port.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: port.app_protocol.clone(),
            })
        })
        .collect()
}

/// The address types of a Service's slices (`getAddressTypesForService`).
fn address_types(service: &Service) -> BTreeSet<&'static str> {
    let spec = service.spec.clone().unwrap_or_default();
    let mut types = BTreeSet::new();
    for family in spec.ip_families.iter().flatten() {
        match family.as_str() {
            "IPv4" => {
                types.insert("IPv4");
            }
            "IPv6" => {
                types.insert("IPv6");
            }
            _ => {}
        }
    }
    if !types.is_empty() {
        return types;
    }
    match spec.cluster_ip.as_deref() {
        Some(ip) if !ip.is_empty() && ip != "None" => {
            types.insert(if ip.contains(':') { "IPv6" } else { "IPv4" });
        }
        _ => {
            types.insert("IPv4");
            types.insert("IPv6");
        }
    }
    types
}

/// The pod's IPs of one address type.
fn addresses(pod: &Pod, address_type: &str) -> Vec<String> {
    pod_ips(pod)
        .into_iter()
        .filter_map(|ip| ip.parse::<std::net::IpAddr>().ok())
        .filter(|ip| ip.is_ipv6() == (address_type == "IPv6"))
        .map(|ip| ip.to_string())
        .collect()
}

/// `podToEndpoint`.
fn endpoint_of(pod: &Pod, node: Option<&Node>, service: &Service, address_type: &str) -> Endpoint {
    let serving = is_ready(pod);
    let terminating = is_deleting(&pod.metadata);
    let publish = service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let zone = node
        .and_then(|n| label(&n.metadata, ZONE_LABEL))
        .filter(|z| !z.is_empty())
        .map(str::to_string);
    Endpoint {
        addresses: addresses(pod, address_type),
        conditions: Some(EndpointConditions {
            ready: Some(publish || (serving && !terminating)),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: should_set_hostname(pod, service)
            .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
            .flatten(),
        node_name,
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        }),
        zone,
        ..Endpoint::default()
    }
}

/// What makes two endpoints the same one (`hashEndpoint`): sorted addresses, hostname
/// and the pod.
fn endpoint_key(endpoint: &Endpoint) -> String {
    let mut addresses = endpoint.addresses.clone();
    addresses.sort();
    let target = endpoint.target_ref.clone().unwrap_or_default();
    serde_json::json!([
        addresses,
        endpoint.hostname.clone().unwrap_or_default(),
        target.namespace.unwrap_or_default(),
        target.name.unwrap_or_default()
    ])
    .to_string()
}

/// `EndpointsEqualBeyondHash`.
fn equal_beyond_key(a: &Endpoint, b: &Endpoint) -> bool {
    let conditions = |e: &Endpoint| e.conditions.clone().unwrap_or_default();
    let target = |e: &Endpoint| {
        e.target_ref.clone().map(|mut t| {
            t.resource_version = None;
            t
        })
    };
    a.node_name == b.node_name
        && a.zone == b.zone
        && conditions(a) == conditions(b)
        && target(a) == target(b)
}

/// A set of ports as a key (`NewPortMapKey`).
fn ports_key(ports: &[EndpointPort]) -> String {
    let mut each: Vec<String> = ports
        .iter()
        .map(|p| serde_json::to_string(p).unwrap_or_default())
        .collect();
    each.sort();
    each.join("\n")
}

fn owned_by(slice: &EndpointSlice, service: &Service) -> bool {
    slice.metadata.owner_references.iter().flatten().any(|o| {
        Some(&o.uid) == service.metadata.uid.as_ref()
            && o.kind == "Service"
            && o.api_version == "v1"
    })
}

fn is_reserved(key: &str) -> bool {
    matches!(key, SERVICE_NAME_LABEL | MANAGED_BY_LABEL | HEADLESS_LABEL)
}

/// `setEndpointSliceLabels`: the labels a slice should have, and whether the Service's own
/// labels on it changed.
fn slice_labels(slice: &EndpointSlice, service: &Service) -> (BTreeMap<String, String>, bool) {
    let own = |labels: BTreeMap<String, String>| -> BTreeMap<String, String> {
        labels
            .into_iter()
            .filter(|(k, _)| !is_reserved(k))
            .collect()
    };
    let current = own(labels_of(&slice.metadata));
    let mut wanted = own(labels_of(&service.metadata));
    let changed = current != wanted;
    if is_headless(service) {
        wanted.insert(HEADLESS_LABEL.into(), String::new());
    }
    wanted.insert(
        SERVICE_NAME_LABEL.into(),
        service.metadata.name.clone().unwrap_or_default(),
    );
    wanted.insert(MANAGED_BY_LABEL.into(), CONTROLLER_NAME.into());
    (wanted, changed)
}

/// The name prefix of a Service's slices (`getEndpointSlicePrefix`).
fn slice_prefix(service: &str) -> String {
    let prefix = format!("{service}-");
    if prefix.len() <= 253 {
        prefix
    } else {
        service.to_string()
    }
}

/// A slice as the Go controller's client sends it: an empty list of endpoints or of ports
/// is a nil slice there, sent as `null`, which the API server neither stores nor counts as
/// owned by the controller (an empty list would be both).
fn as_go_sends(slice: &EndpointSlice) -> Result<DynamicObject, kube::Error> {
    let mut object = serde_json::to_value(slice).map_err(kube::Error::SerdeError)?;
    for list in ["endpoints", "ports"] {
        if object[list].as_array().is_some_and(Vec::is_empty) {
            object[list] = serde_json::Value::Null;
        }
    }
    serde_json::from_value(object).map_err(kube::Error::SerdeError)
}

/// The slice the API server answered a write with.
fn from_dynamic(object: DynamicObject) -> Result<EndpointSlice, kube::Error> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(kube::Error::SerdeError)
}

/// `newEndpointSlice`.
fn new_slice(service: &Service, ports: &[EndpointPort], address_type: &str) -> EndpointSlice {
    let mut slice = EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(slice_prefix(
                service.metadata.name.as_deref().unwrap_or_default(),
            )),
            namespace: service.metadata.namespace.clone(),
            owner_references: Some(vec![controller_ref("v1", "Service", &service.metadata)]),
            ..ObjectMeta::default()
        },
        address_type: address_type.into(),
        endpoints: Vec::new(),
        ports: Some(ports.to_vec()),
    };
    slice.metadata.labels = Some(slice_labels(&slice, service).0);
    slice
}

/// `placeholderSliceCompare`: the same namespace, labels, address type, endpoints and
/// ports (nothing else of the metadata counts; empty and missing lists are equal).
fn same_as_placeholder(slice: &EndpointSlice, placeholder: &EndpointSlice) -> bool {
    let ports = |s: &EndpointSlice| s.ports.clone().unwrap_or_default();
    slice.metadata.namespace == placeholder.metadata.namespace
        && labels_of(&slice.metadata) == labels_of(&placeholder.metadata)
        && slice.address_type == placeholder.address_type
        && slice.endpoints == placeholder.endpoints
        && ports(slice) == ports(placeholder)
}

/// `getSliceToFill`: the unchanged slice the new endpoints fill most closely.
fn slice_to_fill(slices: &[&EndpointSlice], wanted: usize) -> Option<String> {
    let mut closest = MAX_ENDPOINTS_PER_SLICE;
    let mut found = None;
    for slice in slices {
        let total = wanted + slice.endpoints.len();
        if total <= MAX_ENDPOINTS_PER_SLICE {
            let room = MAX_ENDPOINTS_PER_SLICE - total;
            if room < closest {
                closest = room;
                found = slice.metadata.name.clone();
                if room == 0 {
                    break;
                }
            }
        }
    }
    found
}

/// The writes of one sync.
#[derive(Default)]
struct Plan {
    create: Vec<EndpointSlice>,
    update: Vec<EndpointSlice>,
    delete: Vec<EndpointSlice>,
}

/// `reconcileByPortMapping`: the slices of one set of ports.
fn reconcile_ports(
    service: &Service,
    existing: &[Arc<EndpointSlice>],
    mut desired: BTreeMap<String, Endpoint>,
    ports: &[EndpointPort],
    address_type: &str,
) -> Plan {
    let mut by_name: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    let mut unchanged = BTreeSet::new();
    let mut to_update = BTreeSet::new();
    let mut to_delete = BTreeSet::new();
    for slice in existing {
        let name = slice.metadata.name.clone().unwrap_or_default();
        by_name.insert(name.clone(), slice.as_ref().clone());
        let mut kept = Vec::new();
        let mut updated = false;
        for endpoint in &slice.endpoints {
            if let Some(wanted) = desired.remove(&endpoint_key(endpoint)) {
                if !equal_beyond_key(&wanted, endpoint) {
                    updated = true;
                }
                kept.push(wanted);
            }
        }
        let (labels, labels_changed) = slice_labels(slice, service);
        if updated || kept.len() != slice.endpoints.len() {
            if kept.is_empty() {
                to_delete.insert(name);
            } else {
                let mut copy = slice.as_ref().clone();
                copy.endpoints = kept;
                copy.metadata.labels = Some(labels);
                by_name.insert(name.clone(), copy);
                to_update.insert(name);
            }
        } else if labels_changed {
            let mut copy = slice.as_ref().clone();
            copy.metadata.labels = Some(labels);
            by_name.insert(name.clone(), copy);
            to_update.insert(name);
        } else {
            unchanged.insert(name);
        }
    }
    let pop = |desired: &mut BTreeMap<String, Endpoint>| desired.pop_first().map(|(_, e)| e);
    // Slices being updated anyway take new endpoints first, fullest first.
    if !desired.is_empty() && !to_update.is_empty() {
        let mut names: Vec<String> = to_update.iter().cloned().collect();
        names.sort_by_key(|n| std::cmp::Reverse(by_name[n].endpoints.len()));
        for name in names {
            if let Some(slice) = by_name.get_mut(&name) {
                while slice.endpoints.len() < MAX_ENDPOINTS_PER_SLICE {
                    let Some(endpoint) = pop(&mut desired) else {
                        break;
                    };
                    slice.endpoints.push(endpoint);
                }
            }
        }
    }
    let mut create = Vec::new();
    while !desired.is_empty() {
        let mut fill = None;
        if desired.len() < MAX_ENDPOINTS_PER_SLICE && !unchanged.is_empty() {
            let candidates: Vec<&EndpointSlice> = unchanged.iter().map(|n| &by_name[n]).collect();
            fill = slice_to_fill(&candidates, desired.len());
        }
        let mut slice = match &fill {
            Some(name) => by_name[name].clone(),
            None => new_slice(service, ports, address_type),
        };
        while slice.endpoints.len() < MAX_ENDPOINTS_PER_SLICE {
            let Some(endpoint) = pop(&mut desired) else {
                break;
            };
            slice.endpoints.push(endpoint);
        }
        match fill {
            Some(name) => {
                by_name.insert(name.clone(), slice);
                unchanged.remove(&name);
                to_update.insert(name);
            }
            None => create.push(slice),
        }
    }
    Plan {
        create,
        update: to_update.iter().map(|n| by_name[n].clone()).collect(),
        delete: to_delete.iter().map(|n| by_name[n].clone()).collect(),
    }
}

impl Controller {
    async fn run(self: Arc<Self>) {
        let l = &self.listers;
        l.services.wait_ready().await;
        l.pods.wait_ready().await;
        l.nodes.wait_ready().await;
        l.slices.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(service = %key, error = %super::support::error_chain(&error), "endpoint slice sync failed; retrying");
            }
        }
    }

    fn pod_changed(&self, change: &Change<Pod>) {
        let services = match change {
            Change::Applied {
                old: Some(old),
                new,
            } => services_to_update(&self.listers.services, old, new),
            Change::Applied { old: None, new } => services_of(&self.listers.services, new),
            Change::Deleted(old) => services_of(&self.listers.services, old),
        };
        for key in services {
            self.queue.add(key);
        }
    }

    fn slice_changed(&self, change: &Change<EndpointSlice>) {
        let managed =
            |s: &EndpointSlice| label(&s.metadata, MANAGED_BY_LABEL) == Some(CONTROLLER_NAME);
        match change {
            Change::Applied { old, new } => {
                if let Some(old) = old {
                    if label(&old.metadata, SERVICE_NAME_LABEL)
                        != label(&new.metadata, SERVICE_NAME_LABEL)
                    {
                        self.queue.add_after(service_of(new), SLICE_CHANGE_DELAY);
                        self.queue.add_after(service_of(old), SLICE_CHANGE_DELAY);
                        return;
                    }
                    if managed(old) != managed(new) {
                        self.queue.add_after(service_of(new), SLICE_CHANGE_DELAY);
                        return;
                    }
                }
                if managed(new) && self.tracker.should_sync(new) {
                    self.queue.add_after(service_of(new), SLICE_CHANGE_DELAY);
                }
            }
            Change::Deleted(old) => {
                if managed(old) && self.tracker.has(old) && !self.tracker.handle_deletion(old) {
                    self.queue.add_after(service_of(old), SLICE_CHANGE_DELAY);
                }
            }
        }
    }

    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(service) = self.listers.services.get(&key.namespace, &key.name) else {
            self.triggers.forget(key);
            self.tracker.forget(key);
            return Ok(None);
        };
        let spec = service.spec.clone().unwrap_or_default();
        if spec.type_.as_deref() == Some("ExternalName") || selector(&service).is_none() {
            return Ok(None);
        }
        let mut pods = self.listers.pods.filter(|p| {
            p.metadata.namespace.as_deref() == Some(&key.namespace)
                && picks(&service, &labels_of(&p.metadata))
        });
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let slices: Vec<Arc<EndpointSlice>> = self.listers.slices.filter(|s| {
            s.metadata.namespace.as_deref() == Some(&key.namespace)
                && label(&s.metadata, SERVICE_NAME_LABEL) == Some(key.name.as_str())
                && label(&s.metadata, MANAGED_BY_LABEL) == Some(CONTROLLER_NAME)
                && !is_deleting(&s.metadata)
        });
        if self.tracker.stale(key, &slices) {
            return Err(Error::StaleCache);
        }
        let trigger = self.triggers.compute(&service, &pods);
        let outcome = self.reconcile(&service, &pods, &slices, trigger).await;
        if let Err(error) = &outcome {
            let message = format!(
                "Error updating Endpoint Slices for Service {}/{}: {}",
                key.namespace,
                key.name,
                super::support::error_chain(error)
            );
            self.recorder.record(
                "v1",
                "Service",
                &service.metadata,
                EventType::Warning,
                "FailedToUpdateEndpointSlices",
                &message,
            );
        }
        outcome.map(|()| None)
    }

    /// `Reconcile`: the slices of every address type the Service has.
    async fn reconcile(
        &self,
        service: &Service,
        pods: &[Arc<Pod>],
        slices: &[Arc<EndpointSlice>],
        trigger: Option<Timestamp>,
    ) -> Result<(), Error> {
        let types = address_types(service);
        let mut skipped = Vec::new();
        let mut first_error = None;
        for address_type in &types {
            let existing: Vec<Arc<EndpointSlice>> = slices
                .iter()
                .filter(|s| s.address_type == *address_type)
                .cloned()
                .collect();
            if let Err(e) = self
                .reconcile_address_type(
                    service,
                    pods,
                    &existing,
                    trigger,
                    address_type,
                    &mut skipped,
                )
                .await
            {
                first_error.get_or_insert(e);
            }
        }
        for slice in slices
            .iter()
            .filter(|s| !types.contains(s.address_type.as_str()))
        {
            if let Err(e) = self.delete(slice).await {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        if skipped.is_empty() {
            Ok(())
        } else {
            Err(Error::NodesNotFound(skipped))
        }
    }

    async fn reconcile_address_type(
        &self,
        service: &Service,
        pods: &[Arc<Pod>],
        existing: &[Arc<EndpointSlice>],
        trigger: Option<Timestamp>,
        address_type: &str,
        skipped: &mut Vec<String>,
    ) -> Result<(), Error> {
        let namespace = service.metadata.namespace.clone().unwrap_or_default();
        let name = service.metadata.name.clone().unwrap_or_default();
        let publish = service
            .spec
            .as_ref()
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false);
        let mut plan = Plan::default();
        let mut existing_by_ports: BTreeMap<String, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
        for slice in existing {
            if owned_by(slice, service) {
                let ports = slice.ports.clone().unwrap_or_default();
                existing_by_ports
                    .entry(ports_key(&ports))
                    .or_default()
                    .push(slice.clone());
            } else {
                plan.delete.push(slice.as_ref().clone());
            }
        }
        let mut desired: BTreeMap<String, (Vec<EndpointPort>, BTreeMap<String, Endpoint>)> =
            BTreeMap::new();
        for pod in pods {
            if !should_be_in_endpoints(pod, true) {
                continue;
            }
            let ports = endpoint_ports(service, pod);
            let entry = desired
                .entry(ports_key(&ports))
                .or_insert_with(|| (ports, BTreeMap::new()));
            let node_name = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let node = self.listers.nodes.get("", &node_name);
            if node.is_none() && !publish {
                skipped.push(format!(
                    "skipping Pod {} for Service {namespace}/{name}: Node {node_name} Not Found",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
                continue;
            }
            let endpoint = endpoint_of(pod, node.as_deref(), service, address_type);
            if !endpoint.addresses.is_empty() {
                entry.1.insert(endpoint_key(&endpoint), endpoint);
            }
        }
        for (key, (ports, endpoints)) in desired.iter() {
            let current = existing_by_ports.get(key).cloned().unwrap_or_default();
            let part = reconcile_ports(service, &current, endpoints.clone(), ports, address_type);
            plan.create.extend(part.create);
            plan.update.extend(part.update);
            plan.delete.extend(part.delete);
        }
        for (key, slices) in &existing_by_ports {
            if !desired.contains_key(key) {
                plan.delete
                    .extend(slices.iter().map(|s| s.as_ref().clone()));
            }
        }
        if existing.len() == plan.delete.len() && plan.create.is_empty() {
            let placeholder = new_slice(service, &[], address_type);
            if plan.delete.len() == 1 && same_as_placeholder(&plan.delete[0], &placeholder) {
                plan.delete.clear();
            } else {
                plan.create.push(placeholder);
            }
        }
        self.finalize(service, plan, trigger).await
    }

    /// `finalize`: deletions turned into updates of new slices where possible, then the
    /// creations (not for a Service being deleted), updates and deletions.
    async fn finalize(
        &self,
        service: &Service,
        mut plan: Plan,
        trigger: Option<Timestamp>,
    ) -> Result<(), Error> {
        let mut i = 0;
        while i < plan.delete.len() {
            let Some(mut recycled) = plan.create.pop() else {
                break;
            };
            let old = &plan.delete[i];
            if old.address_type == recycled.address_type && owned_by(old, service) {
                recycled.metadata.name = old.metadata.name.clone();
                plan.update.push(recycled);
                plan.delete.remove(i);
            } else {
                plan.create.push(recycled);
                i += 1;
            }
        }
        let namespace = service.metadata.namespace.clone().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &namespace,
            &ApiResource::erase::<EndpointSlice>(&()),
        );
        if !is_deleting(&service.metadata) {
            for mut slice in plan.create {
                set_trigger_time(&mut slice, trigger);
                let sent = as_go_sends(&slice)?;
                match api.create(&PostParams::default(), &sent).await {
                    Ok(created) => self.tracker.update(&from_dynamic(created)?),
                    Err(e) if namespace_terminating(&e) => return Ok(()),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        for mut slice in plan.update {
            set_trigger_time(&mut slice, trigger);
            let name = slice.metadata.name.clone().unwrap_or_default();
            let sent = as_go_sends(&slice)?;
            let updated = api.replace(&name, &PostParams::default(), &sent).await?;
            self.tracker.update(&from_dynamic(updated)?);
        }
        for slice in plan.delete {
            self.delete(&slice).await?;
        }
        Ok(())
    }

    async fn delete(&self, slice: &EndpointSlice) -> Result<(), Error> {
        let namespace = slice.metadata.namespace.clone().unwrap_or_default();
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &namespace);
        let name = slice.metadata.name.clone().unwrap_or_default();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                self.tracker.expect_deletion(slice);
                Ok(())
            }
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether a create was refused because the namespace is being deleted.
fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403 && status.message.contains("because it is being terminated"))
}

/// `addTriggerTimeAnnotation`: the time set (RFC 3339 with nanoseconds as needed), or
/// removed when there is none.
pub(crate) fn set_trigger_time_annotation(
    annotations: &mut BTreeMap<String, String>,
    trigger: Option<Timestamp>,
) {
    match trigger {
        Some(at) => {
            annotations.insert(TRIGGER_TIME_ANNOTATION.into(), format_trigger_time(at));
        }
        None => {
            annotations.remove(TRIGGER_TIME_ANNOTATION);
        }
    }
}

/// Go's `time.RFC3339Nano` in UTC: seconds, then the fraction without trailing zeros.
pub(crate) fn format_trigger_time(at: Timestamp) -> String {
    let seconds = at.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = at.subsec_nanosecond();
    if nanos == 0 {
        format!("{seconds}Z")
    } else {
        let fraction = format!("{nanos:09}");
        format!("{seconds}.{}Z", fraction.trim_end_matches('0'))
    }
}

fn set_trigger_time(slice: &mut EndpointSlice, trigger: Option<Timestamp>) {
    let annotations = slice.metadata.annotations.get_or_insert_with(BTreeMap::new);
    set_trigger_time_annotation(annotations, trigger);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "ns", "uid": "s-1",
                                                   "labels": {"tier": "front"}},
                                      "spec": spec}),
        )
        .unwrap()
    }

    fn pod(name: &str, ready: bool, extra: serde_json::Value) -> Pod {
        let mut pod = json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                                          "labels": {"app": "web"}},
                             "spec": {"nodeName": "node-a",
                                      "containers": [{"name": "main", "image": "app",
                                                      "ports": [{"name": "http", "containerPort": 8080}]}]},
                             "status": {"phase": "Running", "podIP": "10.0.0.1",
                                        "podIPs": [{"ip": "10.0.0.1"}],
                                        "conditions": [{"type": "Ready",
                                                        "status": if ready { "True" } else { "False" }}]}});
        if let (Some(all), Some(more)) = (pod.as_object_mut(), extra.as_object()) {
            for (k, v) in more {
                all.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(pod).unwrap()
    }

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "node-a",
                                                   "labels": {"topology.kubernetes.io/zone": "zone-1"}}}))
        .unwrap()
    }

    #[test]
    fn a_target_port_is_found_by_number_or_by_the_container_port_s_name() {
        let p = pod("a", true, json!({}));
        let by_name: ServicePort =
            serde_json::from_value(json!({"port": 80, "targetPort": "http", "protocol": "TCP"}))
                .unwrap();
        let by_number: ServicePort =
            serde_json::from_value(json!({"port": 80, "targetPort": 9090, "protocol": "TCP"}))
                .unwrap();
        let missing: ServicePort =
            serde_json::from_value(json!({"port": 80, "targetPort": "grpc", "protocol": "TCP"}))
                .unwrap();
        assert_eq!(find_port(&p, &by_name), Some(8080));
        assert_eq!(find_port(&p, &by_number), Some(9090));
        assert_eq!(find_port(&p, &missing), None);
    }

    #[test]
    fn an_endpoint_carries_the_pod_s_address_conditions_node_zone_and_reference() {
        let s = service(json!({"selector": {"app": "web"}, "clusterIP": "10.96.0.1"}));
        let endpoint = endpoint_of(&pod("a", false, json!({})), Some(&node()), &s, "IPv4");
        assert_eq!(
            serde_json::to_value(&endpoint).unwrap(),
            json!({"addresses": ["10.0.0.1"],
                   "conditions": {"ready": false, "serving": false, "terminating": false},
                   "nodeName": "node-a", "zone": "zone-1",
                   "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "u-a"}})
        );
        let publishing =
            service(json!({"selector": {"app": "web"}, "publishNotReadyAddresses": true}));
        let endpoint = endpoint_of(&pod("a", false, json!({})), None, &publishing, "IPv4");
        assert_eq!(endpoint.conditions.unwrap().ready, Some(true));
        assert_eq!(endpoint.zone, None);
    }

    #[test]
    fn a_hostname_is_published_only_when_the_subdomain_names_the_service() {
        let s = service(json!({"selector": {"app": "web"}}));
        let mut named = pod("a", true, json!({}));
        let spec = named.spec.as_mut().unwrap();
        spec.hostname = Some("a-host".into());
        spec.subdomain = Some("web".into());
        assert!(should_set_hostname(&named, &s));
        named.spec.as_mut().unwrap().subdomain = Some("other".into());
        assert!(!should_set_hostname(&named, &s));
    }

    #[test]
    fn new_slices_hold_at_most_a_hundred_endpoints_each() {
        let s = service(json!({"selector": {"app": "web"}, "clusterIP": "10.96.0.1"}));
        let desired: BTreeMap<String, Endpoint> = (0..250)
            .map(|i| {
                let mut p = pod(&format!("p{i}"), true, json!({}));
                p.status.as_mut().unwrap().pod_ips = Some(vec![
                    serde_json::from_value(json!({"ip": format!("10.0.{}.{}", i / 200, i % 200)}))
                        .unwrap(),
                ]);
                let e = endpoint_of(&p, Some(&node()), &s, "IPv4");
                (endpoint_key(&e), e)
            })
            .collect();
        let plan = reconcile_ports(&s, &[], desired, &[], "IPv4");
        let sizes: Vec<usize> = plan.create.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
        let labels = plan.create[0].metadata.labels.clone().unwrap();
        assert_eq!(
            labels.get(SERVICE_NAME_LABEL).map(String::as_str),
            Some("web")
        );
        assert_eq!(
            labels.get(MANAGED_BY_LABEL).map(String::as_str),
            Some(CONTROLLER_NAME)
        );
        assert_eq!(labels.get("tier").map(String::as_str), Some("front"));
        assert_eq!(
            plan.create[0].metadata.generate_name.as_deref(),
            Some("web-")
        );
    }

    #[test]
    fn an_endpoint_whose_conditions_change_updates_its_slice_in_place() {
        let s = service(json!({"selector": {"app": "web"}, "clusterIP": "10.96.0.1"}));
        let before = endpoint_of(&pod("a", false, json!({})), Some(&node()), &s, "IPv4");
        let mut existing = new_slice(&s, &[], "IPv4");
        existing.metadata.name = Some("web-abcde".into());
        existing.endpoints = vec![before];
        let after = endpoint_of(&pod("a", true, json!({})), Some(&node()), &s, "IPv4");
        let desired = BTreeMap::from([(endpoint_key(&after), after)]);
        let plan = reconcile_ports(&s, &[Arc::new(existing)], desired, &[], "IPv4");
        assert!(plan.create.is_empty() && plan.delete.is_empty());
        assert_eq!(plan.update.len(), 1);
        assert_eq!(
            plan.update[0].endpoints[0]
                .conditions
                .as_ref()
                .unwrap()
                .ready,
            Some(true)
        );
    }

    #[test]
    fn the_trigger_time_is_the_service_s_creation_first_then_the_earliest_new_ready_transition() {
        let triggers = TriggerTimes::default();
        let mut s = service(json!({"selector": {"app": "web"}}));
        let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        s.metadata.creation_timestamp = Some(Time(created));
        let mut a = pod("a", true, json!({}));
        let ready_at: Timestamp = "2026-01-01T00:00:05Z".parse().unwrap();
        a.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
            Some(Time(ready_at));
        let a = Arc::new(a);
        assert_eq!(
            triggers.compute(&s, std::slice::from_ref(&a)),
            Some(created)
        );
        assert_eq!(triggers.compute(&s, std::slice::from_ref(&a)), None);
        let mut later = (*a).clone();
        let again: Timestamp = "2026-01-01T00:00:09Z".parse().unwrap();
        later.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
            Some(Time(again));
        assert_eq!(triggers.compute(&s, &[Arc::new(later)]), Some(again));
        assert_eq!(format_trigger_time(again), "2026-01-01T00:00:09Z");
    }
}
